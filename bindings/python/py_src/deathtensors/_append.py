"""append and append_file: adding tensors to an existing file."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Tuple

from . import _convert, _native
from ._file import PathLike, _check_metadata, _file_items, _tensor_metadata
from ._legacy import expand_path


def append(
    path: PathLike,
    tensors: Mapping[str, Any],
    metadata: Optional[Mapping[str, Mapping[str, str]]] = None,
    extra_global_metadata: Optional[Mapping[str, str]] = None,
    *,
    durable: bool = True,
) -> None:
    """Adds ``tensors`` (what :func:`save` takes) after the tensors of the
    file at ``path``, with their ``metadata``; ``extra_global_metadata`` is
    merged into the file's global metadata, its values replacing those of
    the same keys (as deathtensors 0.3.0 does, whatever its docstring says).

    The file keeps its format, alignment and checksums. Its tensors stream
    from the old file into a new one that replaces it atomically, so memory
    stays bounded and a crash leaves the old file or the new one. A name the
    file already has is an error, and so are encrypted and signed files."""
    checked = _tensor_metadata(tensors, metadata, "appended")
    _native.append(
        expand_path(path),
        _convert.collect(tensors, checked or None),
        _check_metadata("extra_global_metadata", extra_global_metadata),
        durable,
    )


def append_file(
    path: PathLike,
    tensors: Iterable[Tuple[str, str, Iterable[int], Any, Optional[Mapping[str, str]]]],
    extra_global_metadata: Optional[Mapping[str, str]] = None,
    *,
    durable: bool = True,
) -> None:
    """The lower-level form of :func:`append`: ``(name, dtype, shape, bytes,
    metadata)`` tuples, as :func:`save_file` takes."""
    items = _file_items(tensors)
    _native.append(expand_path(path), items, _check_metadata("extra_global_metadata", extra_global_metadata), durable)


__all__ = ["append", "append_file"]
