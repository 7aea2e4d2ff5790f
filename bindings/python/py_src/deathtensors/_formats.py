"""from_safetensors and to_safetensors: whole-file conversions, streaming in
native code (the CLI's ``convert`` does the same)."""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _native
from ._file import DtFile, PathLike, write_options
from ._legacy import CANONICAL_EXTENSION, expand_path


def _destination(src: str, dst: Optional[PathLike], extension: str) -> str:
    if dst is None:
        return os.path.splitext(src)[0] + extension
    return expand_path(dst)


def from_safetensors(
    src_path: PathLike,
    dst_path: Optional[PathLike] = None,
    checksum: bool = True,
    compress: Union[bool, str] = False,
    *,
    compress_level: int = 3,
    durable: bool = True,
) -> str:
    """Converts a safetensors file to deathtensors at ``dst_path`` (default:
    the source with its extension swapped for ``.deathtensors``) and returns
    that path. ``checksum`` (default on, as in 0.3.0) records per-tensor
    digests and a footer; ``compress`` and ``compress_level`` are
    :func:`save`'s.

    The tensors stream from file to file: nothing is loaded whole, and
    neither torch nor safetensors is needed. The global metadata is the
    source's plus ``deathtensors.converted_from`` and
    ``deathtensors.source.filename`` (0.3.0 kept only those two)."""
    src = expand_path(src_path)
    dst = _destination(src, dst_path, CANONICAL_EXTENSION)
    with DtFile(src) as f:
        metadata = dict(f.metadata())
    metadata.update({"deathtensors.converted_from": "safetensors", "deathtensors.source.filename": os.path.basename(src)})
    options = write_options(
        global_metadata=metadata, checksum=checksum, durable=durable, compress=compress, compress_level=compress_level
    )
    _native.convert(src, dst, options)
    return dst


def to_safetensors(src_path: PathLike, dst_path: Optional[PathLike] = None, *, durable: bool = True) -> str:
    """Converts a file (deathtensors, or any format read) to safetensors at
    ``dst_path`` (default: the source with its extension swapped for
    ``.safetensors``), byte for byte what safetensors writes for the same
    tensors, and returns that path. The global metadata is kept (0.3.0
    dropped it); per-tensor metadata, which safetensors has no place for,
    is dropped."""
    src = expand_path(src_path)
    dst = _destination(src, dst_path, ".safetensors")
    with DtFile(src) as f:
        metadata = f.metadata() or None
    _native.convert(src, dst, write_options(global_metadata=metadata, durable=durable, format="safetensors"))
    return dst


__all__ = ["from_safetensors", "to_safetensors"]
