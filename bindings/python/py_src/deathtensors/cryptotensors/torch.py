"""cryptotensors' ``cryptotensors.torch``: torch tensors to and from
cryptotensors files (encrypted with ``config``) and plain safetensors files,
over the safetensors drop-in's ``torch`` module."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Union

import torch

from ..safetensors import torch as _st
from ..safetensors.torch import (  # noqa: F401 -- there in cryptotensors.torch too
    _find_shared_tensors,
    _remove_duplicate_names,
    load_model,
    save_model,
    storage_ptr,
    storage_size,
)
from . import _bytes, safe_open


def save_file(
    tensors: Dict[str, torch.Tensor],
    filename: Union[str, os.PathLike],
    metadata: Optional[Dict[str, str]] = None,
    config: Optional[Any] = None,
) -> None:
    """Saves `tensors` (contiguous, dense, not sharing memory) as a
    cryptotensors file encrypted and signed as ``config`` says, or as a
    plain safetensors file without it, atomically."""
    _bytes.save_file(_st, tensors, filename, metadata, config, check=_st._check_for_save)


def save(tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None, config: Optional[Any] = None) -> bytes:
    """The bytes :func:`save_file` would write."""
    return _bytes.save(_st, save_file, tensors, metadata, config)


def load_file(filename: Union[str, os.PathLike], device: Union[str, int] = "cpu", config: Optional[Any] = None) -> Dict[str, torch.Tensor]:
    """Every tensor of a cryptotensors (or plain) file on `device`,
    decrypted with ``config``'s keys or the registered ones."""
    with safe_open(filename, framework="pt", device=device, config=config) as f:
        return f.get_tensors()


def load(data: bytes, config: Optional[Any] = None) -> Dict[str, torch.Tensor]:
    """Every tensor of a file held in memory, on the CPU."""
    return _bytes.load(_st, load_file, data, config)


__all__ = ["save_file", "save", "load_file", "load", "save_model", "load_model"]
