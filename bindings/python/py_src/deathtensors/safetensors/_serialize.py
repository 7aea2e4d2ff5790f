"""``TensorSpec``, ``serialize``, ``serialize_file`` and ``deserialize``:
safetensors 0.8.0's raw-pointer API, over the deathtensors encoder.

Files are written by ``deathtensors._native.save`` (atomic and, unlike
safetensors, fsync'd before the rename, unless durability is turned off:
:func:`durable`); bytes by
``_native.encode_safetensors``. Both lay the file out exactly as safetensors
0.8.0 does, so the bytes are identical.
"""

from __future__ import annotations

import ctypes
import json
import operator
import os
from collections.abc import Mapping
from typing import Any, Optional, Union

from .. import _native
from ._errors import SafetensorError

# The dtype names safetensors' TensorSpec accepts, in the order its error
# message lists them (the peer's choice), and their codes from the format's
# one dtype table (torch's names, which are numpy's too where numpy has
# the dtype).
_TORCH_CODES = {row["torch"]: code for code, row in _native.dtype_table().items() if row["torch"]}
_CODES = {
    name: _TORCH_CODES[name]
    for name in (
        "bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32",
        "float64", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
        "float8_e8m0fnu", "float4_e2m1fn_x2", "complex64",
    )
}

# (name, dtype code, shape, C-contiguous byte buffer): what the native
# encoders take.
Item = tuple[str, str, list[int], Any]


def dtype_code(name: str) -> str:
    """The file dtype code of a torch or numpy dtype name."""
    code = _CODES.get(name)
    if code is None:
        raise SafetensorError(
            f"Unknown dtype {json.dumps(name)}. Supported dtypes: {', '.join(_CODES)}"
        )
    return code


def logical_shape(code: str, shape: Any) -> list[int]:
    """The shape a header records: F4 is stored two values a byte, and
    frameworks count bytes in its last dimension, the header values."""
    dims = [operator.index(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {dims} has a negative dimension")
    if code == "F4" and dims:
        dims[-1] *= 2
    return dims


class TensorSpec:
    """One tensor for :func:`serialize` / :func:`serialize_file`: its dtype
    name (``"float32"``, ``"bfloat16"``, ...), shape, and the address and
    length of its C-contiguous bytes.

    The caller keeps that memory alive and unchanged while a spec is being
    serialized. ``dtype`` reads back as the file's code (``"F32"``), and for
    ``float4_e2m1fn_x2`` the last dimension of ``shape`` is doubled to count
    values, as safetensors 0.8.0 does.
    """

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Any, data_ptr: int, data_len: int) -> None:
        self._dtype = dtype_code(dtype)
        self._shape = logical_shape(self._dtype, shape)
        self._data_ptr = operator.index(data_ptr)
        self._data_len = operator.index(data_len)
        if self._data_ptr < 0 or self._data_len < 0:
            raise ValueError("data_ptr and data_len must not be negative")

    @property
    def dtype(self) -> str:
        """The file's dtype code (``"F32"``, ``"BF16"``, ...)."""
        return self._dtype

    @property
    def shape(self) -> list[int]:
        """The shape the header records."""
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        """The address of the tensor's bytes."""
        return self._data_ptr

    @property
    def data_len(self) -> int:
        """The length of the tensor's bytes."""
        return self._data_len

    def __repr__(self) -> str:
        return (
            f"TensorSpec(dtype='{self._dtype}', shape={self._shape}, "
            f"data_ptr={self._data_ptr}, data_len={self._data_len})"
        )


def _spec_items(tensor_dict: Any) -> list[Item]:
    if not isinstance(tensor_dict, Mapping):
        raise TypeError(
            f"argument 'tensor_dict': '{type(tensor_dict).__name__}' object cannot be converted to 'PyDict'"
        )
    items = []
    for name, spec in tensor_dict.items():
        if not isinstance(spec, TensorSpec):
            raise TypeError(
                f"argument 'tensor_dict': '{type(spec).__name__}' object cannot be converted to 'TensorSpec'"
            )
        if spec.data_len == 0:
            memory: Any = b""
        else:
            # A buffer over the caller's memory, without copying it.
            memory = memoryview((ctypes.c_ubyte * spec.data_len).from_address(spec.data_ptr)).cast("B")
        items.append((name, spec.dtype, spec.shape, memory))
    return items


def encode(items: list[Item], metadata: Optional[dict[str, str]]) -> bytes:
    """A whole safetensors file as bytes."""
    try:
        return _native.encode_safetensors(items, metadata)
    except ValueError as e:  # deathtensors' FormatError is a ValueError
        raise SafetensorError(f"Error while serializing: {e}") from e


#: Set by ``install(durable=...)``; None: the environment decides.
_durable: Optional[bool] = None

#: ``DEATHTENSORS_DURABLE=0`` (or ``false``, ``no``, ``off``) turns fsync off.
DURABLE_ENV = "DEATHTENSORS_DURABLE"


def durable() -> bool:
    """Whether the drop-in's ``save_file`` and ``serialize_file`` wait for
    the disk (fsync of the file and its directory) before returning: True
    unless turned off by ``install(durable=False)`` or the environment
    variable ``DEATHTENSORS_DURABLE=0``. Off, a save is still atomic (the
    file is whole or absent after a crash of the process) but, as with
    safetensors, not after a power loss."""
    if _durable is not None:
        return _durable
    return os.environ.get(DURABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def set_durable(value: Optional[bool]) -> None:
    """Sets :func:`durable` for this process (None: back to the environment)."""
    global _durable
    _durable = None if value is None else bool(value)


def write(items: list[Item], filename: Union[str, "os.PathLike[str]"], metadata: Optional[dict[str, str]]) -> None:
    """Writes a safetensors file atomically (and durably: :func:`durable`)."""
    path = os.fspath(filename)
    tensors = [(name, code, shape, buf, None) for name, code, shape, buf in items]
    try:
        options = _native.WriteOptions(global_metadata=metadata, durable=durable(), format="safetensors")
        _native.save(path, tensors, options)
    except (ValueError, OSError) as e:
        raise SafetensorError(f"Error while serializing: {e}") from e


def serialize(tensor_dict: dict[str, TensorSpec], metadata: Optional[dict[str, str]] = None) -> bytes:
    """Serializes tensors described by :class:`TensorSpec` into the bytes of
    a safetensors file."""
    return encode(_spec_items(tensor_dict), metadata)


def serialize_file(
    tensor_dict: dict[str, TensorSpec],
    filename: Union[str, "os.PathLike[str]"],
    metadata: Optional[dict[str, str]] = None,
) -> None:
    """Serializes tensors described by :class:`TensorSpec` into a
    safetensors file, atomically, with the GIL released."""
    write(_spec_items(tensor_dict), filename, metadata)


# A parsed file in memory: the bytes, where the blob starts, the metadata,
# and (name, dtype code, shape, (start, end)) in data order.
Parsed = tuple[memoryview, int, Optional[dict[str, str]], list[tuple[str, str, list[int], tuple[int, int]]]]


def parse(data: Any) -> Parsed:
    """Parses and validates a file held in memory."""
    if not isinstance(data, bytes):
        data = bytes(memoryview(data))
    try:
        head = _native.parse_head(data)
    except (ValueError, OSError) as e:
        raise SafetensorError(f"Error while deserializing: {e}") from e
    if head.compressed:
        raise SafetensorError(
            "Error while deserializing: the tensors are zstd-compressed (a deathtensors file saved with "
            "compress=...): use deathtensors.open on a file"
        )
    tensors = sorted(head.tensors, key=lambda t: t[3])
    return memoryview(data), head.data_start, head.metadata, tensors


def deserialize(bytes: Any) -> list[tuple[str, dict[str, Any]]]:  # noqa: A002 -- safetensors' name
    """The tensors of a file held in memory, in data order:
    ``[(name, {"shape": [...], "dtype": "F32", "data": bytearray}), ...]``."""
    view, base, _metadata, tensors = parse(bytes)
    return [
        (name, {"shape": shape, "dtype": dtype, "data": bytearray(view[base + a : base + b])})
        for name, dtype, shape, (a, b) in tensors
    ]
