"""cryptotensors' ``cryptotensors.numpy``: numpy arrays to and from
cryptotensors files (encrypted with ``config``) and plain safetensors files,
over the safetensors drop-in's ``numpy`` module."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import numpy as np

from ..safetensors import numpy as _st
from . import _bytes, safe_open


def save_file(
    tensor_dict: Dict[str, np.ndarray],
    filename: Union[str, os.PathLike],
    metadata: Optional[Dict[str, str]] = None,
    config: Optional[Any] = None,
) -> None:
    """Saves the arrays as a cryptotensors file encrypted and signed as
    ``config`` says, or as a plain safetensors file without it, atomically."""
    _bytes.save_file(_st, tensor_dict, filename, metadata, config)


def save(tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None, config: Optional[Any] = None) -> bytes:
    """The bytes :func:`save_file` would write."""
    return _bytes.save(_st, save_file, tensor_dict, metadata, config)


def load_file(filename: Union[str, os.PathLike], config: Optional[Any] = None) -> Dict[str, np.ndarray]:
    """Every array of a cryptotensors (or plain) file, decrypted with
    ``config``'s keys or the registered ones."""
    with safe_open(filename, framework="np", config=config) as f:
        return f.get_tensors()


def load(data: bytes, config: Optional[Any] = None) -> Dict[str, np.ndarray]:
    """Every array of a file held in memory."""
    return _bytes.load(_st, load_file, data, config)


__all__ = ["save_file", "save", "load_file", "load"]
