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
    checksum: Union[bool, str] = True,
    compress: Union[bool, str] = False,
    *,
    compress_level: int = _native.COMPRESS_LEVEL,
    durable: bool = True,
    alignment: int = 64,
    drop_cache: bool = False,
) -> str:
    """Converts a safetensors file to deathtensors at ``dst_path`` (default:
    the source with its extension swapped for ``.deathtensors``) and returns
    that path. The write keywords are :func:`save`'s, with its defaults but
    one: ``checksum`` defaults to True here (per-tensor digests and a
    footer), deathtensors 0.3.0's default for this function, which programs
    written for it rely on. ``global_metadata`` and ``format`` are not
    taken: the output is a deathtensors file, and its global metadata is
    the source's plus ``deathtensors.converted_from`` and
    ``deathtensors.source.filename`` (0.3.0 kept only those two). Nor are
    ``encrypt``, ``sign``, ``cipher``, ``chunk_size`` and ``seal_header``:
    the streaming conversion does not encrypt or sign; load the tensors and
    :func:`save` them encrypted, or sign the output with ``sign_file``.

    The tensors stream from file to file: nothing is loaded whole, and
    neither torch nor safetensors is needed."""
    src = expand_path(src_path)
    dst = _destination(src, dst_path, CANONICAL_EXTENSION)
    with DtFile(src) as f:
        metadata = dict(f.metadata())
    metadata.update({"deathtensors.converted_from": "safetensors", "deathtensors.source.filename": os.path.basename(src)})
    options = write_options(
        global_metadata=metadata, checksum=checksum, durable=durable, compress=compress, compress_level=compress_level,
        alignment=alignment, drop_cache=drop_cache,
    )
    _native.convert(src, dst, options)
    return dst


def to_safetensors(
    src_path: PathLike, dst_path: Optional[PathLike] = None, *, durable: bool = True, drop_cache: bool = False
) -> str:
    """Converts a file (deathtensors, or any format read) to safetensors at
    ``dst_path`` (default: the source with its extension swapped for
    ``.safetensors``), byte for byte what safetensors writes for the same
    tensors, and returns that path. The global metadata is kept (0.3.0
    dropped it); per-tensor metadata, which safetensors has no place for,
    is dropped. ``durable`` and ``drop_cache`` are :func:`save`'s; its
    other write keywords are not taken: ``format`` is safetensors by
    definition, the global metadata is the source's, and safetensors has no
    place for a checksum, compression, alignment, encryption or signature.
    """
    src = expand_path(src_path)
    dst = _destination(src, dst_path, ".safetensors")
    with DtFile(src) as f:
        metadata = f.metadata() or None
    options = write_options(global_metadata=metadata, durable=durable, drop_cache=drop_cache, format="safetensors")
    _native.convert(src, dst, options)
    return dst


__all__ = ["from_safetensors", "to_safetensors"]
