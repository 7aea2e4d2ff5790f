"""What cryptotensors' ``torch`` and ``numpy`` modules share: a plain
safetensors file (no ``config``, or not encrypted) is the safetensors
drop-in's module's to save and load, an encrypted one cryptotensors'. The
core reads and writes files, so an encrypted file held in memory goes
through a private temp file, removed at once."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, Optional, Union

from . import is_encrypted_bytes
from . import save_file as _save_encrypted


def save_file(
    st: Any,
    tensors: Any,
    filename: Union[str, os.PathLike],
    metadata: Optional[Dict[str, str]],
    config: Optional[Any],
    check: Optional[Callable[[Any], None]] = None,
) -> None:
    """Saves `tensors` as a cryptotensors file encrypted as `config` says
    (after `check` of them, if given), or without a config as a plain file
    by `st`, the safetensors drop-in's module of their framework."""
    config = config_or_none(config)
    if config is None:
        st.save_file(tensors, filename, metadata)
        return
    if check is not None:
        check(tensors)
    _save_encrypted(tensors, filename, metadata, config)


def save(
    st: Any,
    write: Callable[[Any, str, Optional[Dict[str, str]], Any], None],
    tensors: Any,
    metadata: Optional[Dict[str, str]],
    config: Optional[Any],
) -> bytes:
    """The bytes `write` (the module's own ``save_file``) puts in a file of
    `tensors` with `config`; without a config, those of `st`'s ``save``."""
    config = config_or_none(config)
    if config is None:
        return st.save(tensors, metadata)
    return via_file(lambda path: write(tensors, path, metadata, config))


def load(
    st: Any, read: Callable[..., Dict[str, Any]], data: Union[bytes, bytearray, memoryview], config: Optional[Any]
) -> Dict[str, Any]:
    """The tensors of a file held in `data`: a cryptotensors file's by
    `read` (the module's own ``load_file``) with `config`, any other by
    `st`'s ``load``."""
    if not is_encrypted_bytes(data):
        return st.load(data)
    return from_file(data, lambda path: read(path, config=config))


def via_file(write: Callable[[str], None]) -> bytes:
    """The bytes `write` puts in a file."""
    fd, path = tempfile.mkstemp(suffix=".safetensors")
    os.close(fd)
    try:
        write(path)
        with open(path, "rb") as f:
            return f.read()
    finally:
        os.unlink(path)


def from_file(data: Union[bytes, bytearray, memoryview], read: Callable[[str], Dict[str, Any]]) -> Dict[str, Any]:
    """What `read` gets from a file holding `data` (readable by this user only)."""
    fd, path = tempfile.mkstemp(suffix=".safetensors")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return read(path)
    finally:
        os.unlink(path)


def config_or_none(config: Optional[Any]) -> Optional[Any]:
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    return config or None
