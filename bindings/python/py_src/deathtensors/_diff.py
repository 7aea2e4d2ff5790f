"""diff: what differs between two files (the work is native, shared with
``deathtensors diff``)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _native
from ._file import DtFile, PathLike


def _open(x: Any) -> DtFile:
    return x if isinstance(x, DtFile) else DtFile(x)


def diff(
    path_a: PathLike,
    path_b: PathLike,
    framework: str = "torch",
    *,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
) -> Dict[str, Any]:
    """Compares two files (or open :class:`DtFile` objects), of any of the
    formats read, as deathtensors 0.3.0's ``diff`` does, and returns its
    dict:

    - ``added`` / ``removed``: sorted names only in B / only in A;
    - ``shape_changed``: ``{name: (shape_a, shape_b)}``;
    - ``dtype_changed``: ``{name: (dtype_a, dtype_b)}`` (same shape);
    - ``value_changed``: sorted names of the same dtype and shape whose
      values differ (byte for byte, or beyond ``atol``/``rtol`` as
      ``numpy.isclose``);
    - ``metadata_changed``: ``{name: (metadata_a, metadata_b)}`` for
      tensors of the same dtype and shape;
    - ``global_metadata_changed``: ``(metadata_a, metadata_b)`` or None;
    - ``equal``: whether none of the above differs.

    Values are compared streaming in native code on all cores, never
    loaded whole. ``framework`` is accepted for 0.3.0's signature and not
    used: nothing is converted."""
    del framework
    fa, fb = _open(path_a), _open(path_b)
    d = _native.diff(fa._reader, fb._reader, atol, rtol)
    removed, added, retyped = d.removed, d.added, d.retyped
    shape_changed = {}
    dtype_changed = {}
    for name in sorted(retyped):
        ia, ib = fa.info(name), fb.info(name)
        if ia["shape"] != ib["shape"]:
            shape_changed[name] = (ia["shape"], ib["shape"])
        else:
            dtype_changed[name] = (ia["dtype"], ib["dtype"])
    retyped_set = set(retyped)
    metadata_changed = {
        name: (fa.info(name)["metadata"], fb.info(name)["metadata"])
        for name, _ in sorted(d.tensor_metadata)
        if name not in retyped_set
    }
    global_changed = (fa.metadata(), fb.metadata()) if d.metadata else None
    value_changed = sorted(name for name, _, _ in d.values)
    equal = not (added or removed or shape_changed or dtype_changed or value_changed or metadata_changed or global_changed)
    return {
        "added": sorted(added),
        "removed": sorted(removed),
        "shape_changed": shape_changed,
        "dtype_changed": dtype_changed,
        "value_changed": value_changed,
        "metadata_changed": metadata_changed,
        "global_metadata_changed": global_changed,
        "equal": equal,
    }


__all__ = ["diff"]
