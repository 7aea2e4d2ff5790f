"""Dtype names of the file format and their numpy and torch equivalents.

numpy, torch and ml_dtypes are imported lazily: none is required.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from . import _native
from .errors import DeathTensorsError

# The names come from Rust's one table (format's DTYPE_NAMES): file dtype
# -> {"torch", "numpy", "ml_dtypes", "tensorflow", "paddle", "mlx",
# "carrier", "itemsize", "exotic"}. This module only turns names into the
# frameworks' objects.
TABLE: "dict[str, dict[str, Any]]" = _native.dtype_table()

# Bytes per element of every dtype that has whole-byte elements.
ITEMSIZE = {code: row["itemsize"] for code, row in TABLE.items() if row["itemsize"] is not None}

# File dtype -> numpy dtype: a plain numpy name, or ("ml_dtypes", attribute).
_NUMPY = {
    code: row["numpy"] or ("ml_dtypes", row["ml_dtypes"])
    for code, row in TABLE.items()
    if row["numpy"] or row["ml_dtypes"]
}

# File dtype -> torch dtype attribute. F4 is packed two to a byte, as
# torch.float4_e2m1fn_x2 (whose last dimension is half the file's).
_TORCH = {code: row["torch"] for code, row in TABLE.items() if row["torch"]}


#: File dtype -> torch's name for it ("F32" -> "float32").
TORCH_NAMES = _TORCH


def _module(name: str) -> Any:
    # Already imported (nearly always): a dict lookup, not importlib's
    # Python-level machinery (tens of microseconds on a cold cache, as
    # after a large open: most of a first get_tensor).
    module = sys.modules.get(name)
    if module is not None:
        return module
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportError(
            f"this needs the optional package {name!r}: pip install {name.replace('_', '-')}"
        ) from None


def numpy_dtype(name: str) -> Any:
    """The numpy dtype for a file dtype name."""
    np = _module("numpy")
    spec = _NUMPY.get(name)
    if spec is None:
        raise DeathTensorsError(
            f"dtype {name} has no numpy equivalent (packed sub-byte type): use get_bytes()"
        )
    if isinstance(spec, tuple):
        return np.dtype(getattr(_module(spec[0]), spec[1]))
    return np.dtype(spec)


def torch_dtype(name: str) -> Any:
    """The torch dtype for a file dtype name."""
    torch = _module("torch")
    attr = _TORCH.get(name)
    dtype = getattr(torch, attr, None) if attr else None
    if dtype is None:
        raise DeathTensorsError(f"dtype {name} has no equivalent in torch {torch.__version__}: use get_bytes()")
    return dtype


def from_numpy(dtype: Any) -> str:
    """The file dtype name of a numpy dtype."""
    key = dtype.name if dtype.kind != "V" else str(dtype)
    for name, spec in _NUMPY.items():
        if (spec[1] if isinstance(spec, tuple) else spec) == key:
            return name
    raise DeathTensorsError(f"numpy dtype {dtype} cannot be stored")


def from_torch(dtype: Any) -> str:
    """The file dtype name of a torch dtype."""
    attr = str(dtype).removeprefix("torch.")
    for name, spec in _TORCH.items():
        if spec == attr:
            return name
    raise DeathTensorsError(f"torch dtype {dtype} cannot be stored")


