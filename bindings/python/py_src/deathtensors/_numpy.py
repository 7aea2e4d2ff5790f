"""numpy arrays as the bytes saved: the one conversion both
``_convert.to_buffer`` and ``_frameworks`` (JAX and TensorFlow arrays,
which numpy views) take."""

from __future__ import annotations

from typing import Any

from . import _dtypes
from .errors import DeathTensorsError


def numpy_resolved(name: str, a: Any) -> Any:
    """`a` as a C-contiguous little-endian array of the values the caller
    sees (byte-swapped, Fortran-ordered, negative-stride and broadcast
    arrays copied once; others as they are)."""
    import numpy as np

    if a.dtype.hasobject:
        raise DeathTensorsError(f"tensor {name!r}: arrays of Python objects (dtype {a.dtype}) cannot be saved")
    # The plain array (a masked array's data, a subclass's base), not a copy.
    a = np.asarray(a)
    if a.dtype.byteorder == ">":
        # C order and little-endian in one copy (0-d arrays stay 0-d).
        return a.astype(a.dtype.newbyteorder("<"), order="C")
    if not a.flags.c_contiguous:
        # The values in C order whatever the layout: Fortran order,
        # transposes, slices, broadcasts and negative strides are copied,
        # not scrambled.
        return a.copy(order="C")
    return a


def numpy_buffer(name: str, a: Any) -> tuple[str, list[int], Any]:
    """(dtype name, shape, C-contiguous byte buffer) of a numpy array."""
    import numpy as np

    if a.dtype.hasobject:
        raise DeathTensorsError(f"tensor {name!r}: arrays of Python objects (dtype {a.dtype}) cannot be saved")
    try:
        dtype = _dtypes.from_numpy(a.dtype)
    except DeathTensorsError as e:
        raise DeathTensorsError(f"tensor {name!r}: {e}") from None
    shape = list(a.shape)
    a = numpy_resolved(name, a)
    if a.size == 0:
        return dtype, shape, b""
    return dtype, shape, a.reshape(-1).view(np.uint8)
