"""The JSON manifest sidecar: a file's header, to browse a model without its
data (written by native code shared with ``deathtensors manifest``)."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from . import _native
from ._file import DtFile, PathLike
from ._legacy import expand_path
from .errors import DeathTensorsError

#: The largest manifest read: one of a million tensors is ~300 MB.
MAX_MANIFEST_BYTES = 1 << 30


def write_manifest(dt_path: PathLike, manifest_path: Optional[PathLike] = None) -> str:
    """Writes the manifest of the file at ``dt_path`` to ``manifest_path``
    (default ``dt_path + ".json"``), atomically, and returns its path.

    The fields are deathtensors 0.3.0's (``deathtensors_version``,
    ``format_version``, ``magic``, ``global_metadata``, ``tensors`` with
    each tensor's :meth:`DtFile.info` fields, ``written_at``), plus
    ``format`` and each tensor's ``sha256`` when the file has digests."""
    with DtFile(expand_path(dt_path)) as f:
        out = None if manifest_path is None else expand_path(manifest_path)
        return os.fspath(_native.write_manifest(f._reader, out))


def read_manifest(manifest_path: PathLike) -> Dict[str, Any]:
    """Reads a manifest written by :func:`write_manifest` (or by 0.3.0)."""
    path = expand_path(manifest_path)
    size = os.path.getsize(path)
    if size > MAX_MANIFEST_BYTES:
        raise DeathTensorsError(f"{path}: a manifest of {size} bytes is over the limit of {MAX_MANIFEST_BYTES}")
    with open(path, "rb") as fh:
        doc = json.loads(fh.read())
    if not isinstance(doc, dict):
        raise DeathTensorsError(f"{path}: a manifest is a JSON object, this is a {type(doc).__name__}")
    return doc


__all__ = ["write_manifest", "read_manifest"]
