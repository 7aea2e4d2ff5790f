"""``safetensors.mlx`` over the deathtensors core: saving and loading dicts
of MLX arrays with safetensors 0.8.0's API.

MLX allocates every array itself, so loading copies each tensor once (from
a mapping of the file, by ``mx.array``); safetensors copies twice. Saving
reads each array's own memory. bfloat16 works both ways (safetensors 0.8.0
cannot load it); MLX has no float8 or complex128 types: such tensors are an
error naming the dtype.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import mlx.core as mx
import numpy as np

from . import _other, _serialize
from . import numpy as numpy  # noqa: F401 -- there in safetensors too
from ._open import safe_open

__all__ = ["save", "save_file", "load", "load_file"]


def save(tensors: dict[str, mx.array], metadata: Optional[dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the arrays and the text `metadata`."""
    return _serialize.encode(_other.items(tensors, "mx.array"), metadata)


def save_file(
    tensors: dict[str, mx.array], filename: Union[str, os.PathLike], metadata: Optional[dict[str, str]] = None
) -> None:
    """Writes the arrays and the text `metadata` to a safetensors file, atomically."""
    _serialize.write(_other.items(tensors, "mx.array"), filename, metadata)


def load(data: bytes) -> dict[str, mx.array]:
    """Every array of a safetensors file held in memory."""
    return _other.load(data, "mlx")


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap") -> dict[str, mx.array]:
    """Every array of a safetensors file."""
    with safe_open(filename, framework="mlx", backend=backend) as f:
        return f.get_tensors()


def _np2mx(numpy_dict: dict[str, np.ndarray]) -> dict[str, mx.array]:
    for k, v in numpy_dict.items():
        numpy_dict[k] = mx.array(v)
    return numpy_dict


def _mx2np(mx_dict: dict[str, mx.array]) -> dict[str, Any]:
    return {k: np.asarray(v) for k, v in mx_dict.items()}
