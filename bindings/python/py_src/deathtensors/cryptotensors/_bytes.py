"""Encrypted files held in memory (``save`` and ``load`` of cryptotensors'
``torch`` and ``numpy`` modules): the core reads and writes files, so an
encrypted buffer goes through a private temp file, removed at once."""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Dict, Optional, Union


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
