"""``safetensors.numpy`` over the deathtensors core: saving and loading
dicts of numpy arrays with safetensors 0.8.0's API.

Unlike safetensors 0.8.0, arrays of any layout are saved with their values:
Fortran-ordered, transposed, sliced and negative-stride arrays are copied to
C order first (safetensors writes their raw memory, scrambled). Big-endian
arrays are converted to little-endian, as there.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np

from .. import _convert
from . import _other, _serialize
from ._open import safe_open
from ._serialize import TensorSpec, deserialize, serialize, serialize_file  # noqa: F401 -- there in safetensors too

__all__ = ["save", "save_file", "load", "load_file"]

# safetensors.numpy's own module attribute, entry for entry and in its
# order (programs written for safetensors may read it): the peer's choice of
# codes. tests/test_dtype_table.py checks each entry against the format's
# dtype table.
_TYPES: dict[str, Any] = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "U64": np.uint64,
    "I32": np.int32,
    "U32": np.uint32,
    "I16": np.int16,
    "U16": np.uint16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": bool,
    "C64": np.complex64,
}


def _getdtype(dtype_str: str) -> Any:
    return _TYPES[dtype_str]


def _items(tensor_dict: dict[str, np.ndarray]) -> list[_serialize.Item]:
    """(name, dtype code, shape, bytes) for each array, in C order and
    little-endian; the byte buffers share the arrays' memory when they
    already are."""
    if not isinstance(tensor_dict, dict):
        raise ValueError(f"Expected a dict of [str, np.ndarray] but received {type(tensor_dict)}")
    items = []
    for name, value in tensor_dict.items():
        if isinstance(value, np.generic):
            value = np.asarray(value)
        if isinstance(value, np.ma.MaskedArray):
            value = np.ma.getdata(value)  # the values, as safetensors saves them (the mask is not kept)
        if not isinstance(value, np.ndarray):
            raise ValueError(f"Key `{name}` is invalid, expected np.ndarray but received {type(value)}")
        code = _serialize.dtype_code(value.dtype.name)
        # Little-endian, and the values in C order whatever the layout
        # (Fortran order, transposes, slices, broadcasts, negative strides),
        # not the memory as it lies (safetensors issue #825): deathtensors'
        # one conversion.
        value = _convert.numpy_resolved(name, value)
        data: Any = value.reshape(-1).view(np.uint8) if value.size else b""
        items.append((name, code, _serialize.logical_shape(code, value.shape), data))
    return items


def save(tensor_dict: dict[str, np.ndarray], metadata: Optional[dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the arrays and the text `metadata`."""
    return _serialize.encode(_items(tensor_dict), metadata)


def save_file(
    tensor_dict: dict[str, np.ndarray],
    filename: Union[str, os.PathLike],
    metadata: Optional[dict[str, str]] = None,
) -> None:
    """Writes the arrays and the text `metadata` to a safetensors file, atomically."""
    _serialize.write(_items(tensor_dict), filename, metadata)


def load(data: bytes) -> dict[str, np.ndarray]:
    """Every array of a safetensors file held in memory."""
    return _other.load(data, "numpy")


def load_file(
    filename: Union[str, os.PathLike], *, backend: str = "mmap", storage_options: Optional[dict] = None
) -> dict[str, np.ndarray]:
    """Every array of a safetensors file (or URL: see ``safe_open``)."""
    with safe_open(filename, framework="np", backend=backend, storage_options=storage_options) as f:
        return f.get_tensors()
