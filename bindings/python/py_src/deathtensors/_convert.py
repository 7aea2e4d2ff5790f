"""Turning tensors into bytes to save, and bytes into tensors."""

from __future__ import annotations

import collections.abc
import contextlib
import gc
import os
import sys
from typing import Any, Dict, Iterator, Optional

from . import _dtypes, _frameworks, _native
from ._numpy import numpy_buffer as _numpy_buffer
from ._numpy import numpy_resolved as numpy_resolved
from .errors import DeathTensorsError


def _is_torch(x: Any) -> bool:
    t = sys.modules.get("torch")
    return t is not None and isinstance(x, t.Tensor)


def _is_numpy(x: Any) -> bool:
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def collect(tensors: Any, metadata: Optional[Dict[str, Dict[str, str]]] = None) -> Any:
    """A dict (or mapping) of name to tensor, collected for the native
    writers (``_native.collect``): numpy arrays and torch tensors taken
    there, every other value converted here (:func:`to_buffer`,
    :func:`torch_resolved`), with per-tensor ``metadata``. The native module
    is handed this module to call back: it never imports the package."""
    if not isinstance(tensors, collections.abc.Mapping):
        # A list of items, or what this made already: the writers take them.
        if metadata:
            raise TypeError("metadata= goes with a dict of tensors")
        return tensors
    if not isinstance(tensors, dict):
        tensors = dict(tensors)
    return _native.collect(tensors, metadata, sys.modules[__name__])


def to_buffer(name: str, value: Any) -> tuple[str, list[int], Any]:
    """(dtype name, shape, C-contiguous byte buffer) for a value to save.

    This is the one conversion every save path takes for values the native
    collection (:func:`collect`, which takes numpy arrays in C order
    and every torch tensor, through :func:`torch_resolved` when not as it
    is) leaves: ``dt.save``, ``save_file``, ``save_sharded``, ``append``,
    ``TensorBlob.write``, the cryptotensors API and the safetensors
    drop-in; JAX, TensorFlow, Paddle and MLX arrays through
    ``_frameworks.to_buffer``. The buffer holds the values the caller sees,
    whatever view the value is (numpy's byte-swapped, Fortran-ordered,
    negative-stride and broadcast arrays). A value already laid out as it
    is saved is not copied; any other is copied once. Values that cannot
    be written as they are (object dtypes, buffers without a dtype) are
    refused with an error naming them."""
    if _is_torch(value):
        # Taken natively, after torch_resolved when not as they are.
        raise DeathTensorsError(f"tensor {name!r}: torch tensors are saved from a dict of tensors (collect)")
    if _is_numpy(value):
        return _numpy_buffer(name, value)
    got = _frameworks.to_buffer(name, value)  # JAX, TensorFlow, Paddle, MLX
    if got is not None:
        return got
    if isinstance(value, tuple) and len(value) == 3:
        dtype, shape, data = value
        dtype = str(dtype)
        mv = memoryview(data)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())
        return dtype, [int(d) for d in shape], mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
    try:
        mv = memoryview(value)
    except TypeError:
        raise DeathTensorsError(
            f"tensor {name!r}: cannot save {type(value).__name__}: expected a torch tensor, a numpy array, "
            "a JAX, TensorFlow, Paddle or MLX array, a (dtype, shape, bytes) tuple or an object with the "
            "buffer protocol"
        ) from None
    dtype = _native.struct_dtype(mv.format)
    if dtype is None:
        raise DeathTensorsError(f"tensor {name!r}: buffer format {mv.format!r} has no dtype")
    shape = list(mv.shape or ())
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    return dtype, shape, mv.cast("B")


def _torch_refusal(t: Any) -> Optional[str]:
    """Why a torch tensor cannot be saved as it is, or None."""
    import torch

    if getattr(t, "is_nested", False):
        return "nested (jagged) tensors cannot be saved; save each component (t.unbind()) instead"
    if t.layout != torch.strided:
        return f"{t.layout} tensors cannot be saved; call .to_dense() first (sparse tensors: dt.save_sparse)"
    if t.is_quantized:
        return f"quantized tensors ({t.dtype}) cannot be saved; call .dequantize() or save .int_repr() and the scales"
    if t.device.type == "meta":
        return "meta tensors have no data to save"
    return None


def torch_resolved(name: str, t: Any) -> Any:
    """`t` as a dense, C-contiguous CPU tensor holding the values the caller
    sees: conjugate and negative bits resolved, any other layout (strides,
    expansions, channels_last) copied into row-major order. No copy when
    `t` already is; at most one copy (and one device transfer) otherwise."""
    why = _torch_refusal(t)
    if why is not None:
        raise DeathTensorsError(f"tensor {name!r}: {why}")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.is_conj() or t.is_neg() or not t.is_contiguous():
        import torch

        # One copy into a fresh row-major tensor: copy_ materializes the
        # conjugate and negative bits (resolve_conj then contiguous would copy
        # twice).
        out = torch.empty(t.shape, dtype=t.dtype)
        out.copy_(t)
        t = out
    return t


def view(framework: str, dtype: str, shape: list[int], region: Any, name: str = "") -> Any:
    """A read-only tensor over a mapped region (zero-copy)."""
    try:
        return _view(framework, dtype, shape, region, name)
    except DeathTensorsError:
        raise
    except ModuleNotFoundError as e:
        raise _missing(framework, e) from e
    except (ValueError, TypeError, RuntimeError, OverflowError, MemoryError) as e:
        raise unrepresentable(name, dtype, shape, framework, e) from e


def unrepresentable(name: str, dtype: str, shape: list, framework: str, cause: BaseException) -> DeathTensorsError:
    """The error for a tensor the file may hold but `framework` cannot: a
    shape with a zero whose other dimensions multiply past 2^63, say."""
    return DeathTensorsError(
        f"tensor {name!r} ({dtype}, shape {list(shape)}) cannot be made a {framework} tensor: {cause}"
    )


def _missing(framework: str, e: ModuleNotFoundError) -> ImportError:
    """torch or numpy not installed: the error names the package and the
    ``framework=`` alternative, as for every other framework."""
    name = {"pt": "torch", "np": "numpy"}.get(framework, framework)
    if e.name in ("torch", "numpy"):
        return _frameworks.missing(e.name if e.name != name else name)
    return e


def unknown_framework(framework: Any) -> DeathTensorsError:
    return DeathTensorsError(
        f"unknown framework {framework!r}: use 'torch', 'numpy', 'jax', 'tensorflow', 'paddle' or 'mlx'"
    )


def _view(framework: str, dtype: str, shape: list[int], region: Any, name: str) -> Any:
    other = _frameworks.canonical(framework)
    if other is not None:
        # A framework tensor cannot be read-only: the region's bytes are
        # copied once (or, for MLX, as its own copy).
        import numpy as np

        raw = np.frombuffer(region, dtype=np.uint8) if len(region) else np.empty(0, np.uint8)
        return _frameworks.tensor(other, dtype, shape, raw, name)
    if framework in ("numpy", "np"):
        import numpy as np

        ndtype = _dtypes.numpy_dtype(dtype)
        if not len(region):
            return np.empty(shape, dtype=ndtype)
        return np.frombuffer(region, dtype=ndtype).reshape(shape)
    if framework in ("torch", "pt"):
        import warnings

        import torch

        tdtype = _dtypes.torch_dtype(dtype)
        if dtype == "F4":
            shape = torch_f4_shape(name, shape)
        if not len(region):
            return torch.empty(shape, dtype=tdtype)
        with warnings.catch_warnings():
            # torch warns that the buffer is read-only: that is the point.
            warnings.simplefilter("ignore", UserWarning)
            raw = torch.frombuffer(region, dtype=torch.uint8)
        return raw.view(tdtype).reshape(shape)
    raise unknown_framework(framework)


# Tensors of at least this many bytes are loaded as copy-on-write mappings
# of their own (one mmap call, no copy); smaller ones are read into fresh
# memory, which costs less than a mapping and keeps the process's count of
# mappings (vm.max_map_count, 65530 by default on Linux) low.
MAP_MIN = _native.MAP_MIN

# Whether loads map files copy-on-write by default. Not on Windows, where a
# mapped file cannot be replaced (our saves rename over their target) nor
# deleted while any tensor maps it: loads copy there.
MAP_BY_DEFAULT = os.name != "nt"


def torch_f4_shape(name: str, shape: list) -> list:
    """An F4 tensor's shape as torch counts it: float4_e2m1fn_x2 holds two
    values an element, so the last dimension halves (and must be even)."""
    if not shape:
        return []
    if shape[-1] % 2:
        raise DeathTensorsError(
            f"tensor {name!r}: F4 needs an even last dimension in torch (two values a byte), got shape {list(shape)}"
        )
    return list(shape[:-1]) + [shape[-1] // 2]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while many objects are made
    (tens of thousands of tensors and their layout rows). None of them is
    garbage, but each 700 allocations start a collection, and now and then
    a full one over every object of the process (torch's import alone makes
    hundreds of thousands): 80 ms of a 20,000-tensor load. Collections
    resume afterwards as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def from_blob(framework: str, layout: list, arena: Any) -> Dict[str, Any]:
    """Every tensor of `layout` (``(name, dtype, shape, start, end,
    aligned)`` rows, as ``Reader.layout()`` gives for `arena`) viewing its
    bytes in `arena`, a buffer holding them (a whole data blob, or one
    tensor). Each tensor has a storage of its own bytes (torch), or is a
    slice of one array over the buffer (numpy); tensors not aligned for
    their dtype are copied."""
    out: Dict[str, Any] = {}
    try:
        return _from_blob(framework, layout, arena, out)
    except DeathTensorsError:
        raise
    except ModuleNotFoundError as e:
        raise _missing(framework, e) from e
    except (ValueError, TypeError, RuntimeError, OverflowError, MemoryError) as e:
        # The first tensor not made is the one that failed.
        row = next(r for r in layout if r[0] not in out)
        raise unrepresentable(row[0], row[1], row[2], framework, e) from e


def _from_blob(framework: str, layout: list, arena: Any, out: Dict[str, Any]) -> Dict[str, Any]:
    names = {row[1] for row in layout}
    other = _frameworks.canonical(framework)
    if other == "paddle":
        # Over the arena's bytes, no numpy in between (a few microseconds a
        # tensor).
        return _frameworks.paddle_tensors(layout, arena, out)
    if other is not None:
        # JAX and TensorFlow tensors over the arena's bytes where they are
        # 64-byte aligned (those dt.save writes are), one copy otherwise;
        # MLX copies.
        import numpy as np

        for d in names:
            _frameworks.check_dtype(other, d, next(r[0] for r in layout if r[1] == d))
        nonempty = len(arena) > 0
        for name, dtype, shape, start, end, _aligned in layout:
            raw = np.frombuffer(arena, np.uint8, end - start, start) if end > start and nonempty else np.empty(0, np.uint8)
            out[name] = _frameworks.tensor(other, dtype, shape, raw, name)
        return out
    if framework in ("torch", "pt"):
        import torch

        base = torch.frombuffer(arena, dtype=torch.uint8) if len(arena) else None
        tdtypes = {d: _dtypes.torch_dtype(d) for d in names}
        sizes = {d: torch.empty(0, dtype=t).element_size() for d, t in tdtypes.items()}
        # Tensors of the dtypes numpy has are made as numpy arrays over the
        # arena, then wrapped by torch.from_numpy: 1.5x faster than
        # torch.frombuffer for 20,000 tiny tensors.
        ndtypes = _numpy_twins(names)
        ndarray, from_numpy = (sys.modules["numpy"].ndarray, torch.from_numpy) if ndtypes else (None, None)
        for name, dtype, shape, start, end, aligned in layout:
            tdtype = tdtypes[dtype]
            if dtype == "F4":
                shape = torch_f4_shape(name, shape)
            if end == start or base is None:
                out[name] = torch.empty(shape, dtype=tdtype)
            elif not aligned:
                out[name] = base[start:end].clone().view(tdtype).reshape(shape)
            elif dtype in ndtypes:
                # A storage of its own over the tensor's bytes (as safetensors'
                # tensors have): code that finds shared tensors by storage,
                # torch.save and deepcopy see just this tensor.
                out[name] = from_numpy(ndarray(shape, ndtypes[dtype], arena, start))
            else:
                # The same, for dtypes numpy lacks (bfloat16, float8, ...).
                count = (end - start) // sizes[dtype]
                raw = torch.frombuffer(arena, dtype=tdtype, count=count, offset=start)
                out[name] = raw.reshape(shape) if len(shape) != 1 else raw
        return out
    if framework in ("numpy", "np"):
        import numpy as np

        ndarray = np.ndarray
        ndtypes = {d: _dtypes.numpy_dtype(d) for d in names}
        nonempty = len(arena) > 0
        for name, dtype, shape, start, end, aligned in layout:
            if end == start or not nonempty:
                out[name] = np.empty(shape, dtype=ndtypes[dtype])
            elif aligned:
                # One call: an array over the arena's bytes at `start` (its
                # base is the arena), 3x faster than slicing, viewing and
                # reshaping a uint8 view of the arena.
                out[name] = ndarray(shape, ndtypes[dtype], arena, start)
            else:
                raw = np.frombuffer(arena, np.uint8, end - start, start).copy()
                out[name] = raw.view(ndtypes[dtype]).reshape(shape)
        return out
    raise unknown_framework(framework)


# File dtypes whose numpy arrays torch.from_numpy takes as the same dtype.
_FROM_NUMPY = ("BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "C64", "F64", "I64", "U64", "C128")


def _numpy_twins(names: set) -> Dict[str, Any]:
    """File dtype -> numpy dtype for those of `names` that torch.from_numpy
    takes, when numpy is importable (torch works without it)."""
    try:
        import numpy as np
    except ImportError:
        return {}
    return {d: np.dtype(_dtypes.numpy_dtype(d)) for d in names if d in _FROM_NUMPY}


def from_buffer(framework: str, name: str, dtype: str, shape: list, arena: Any) -> Any:
    """Tensor `name` taking over `arena`, a fresh aligned buffer holding
    exactly its bytes (what ``Reader.read_tensor`` and ``map_tensor`` give)."""
    return from_blob(framework, [(name, dtype, list(shape), 0, len(arena), True)], arena)[name]
