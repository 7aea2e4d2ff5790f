"""JAX, TensorFlow, PaddlePaddle and MLX: tensors over a tensor's bytes, and
the bytes of their tensors to save.

None of them is required, and none is imported until a call names it (a
value to save is recognised only if its framework is already imported).

Loading: JAX (``jax.device_put`` of a numpy array), TensorFlow (DLPack)
and Paddle (``frombuffer``, as safetensors.paddle) take memory they did not
allocate, so a tensor is the loaded bytes themselves, no copy: always for
Paddle, and for JAX and TensorFlow when those lie at a multiple of 64 bytes
(files ``dt.save`` writes align every tensor so). Other bytes are copied
once into fresh 64-byte-aligned memory: TensorFlow's kernels abort the
process on a tensor that is not (Eigen's alignment check), and JAX would
copy them itself. bfloat16 reaches TensorFlow as a uint16 DLPack tensor and
``tf.bitcast``, which shares the buffer. A whole file's Paddle tensors are
made over one buffer by :func:`paddle_tensors`, with no numpy in between.
MLX allocates all its arrays itself: ``mx.array`` copies once.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import sys
from typing import Any, Optional

from . import _dtypes
from ._numpy import numpy_buffer
from .errors import DeathTensorsError

#: Framework names (ours and safetensors') -> the framework.
NAMES = {
    "jax": "jax",
    "flax": "jax",
    "tensorflow": "tensorflow",
    "tf": "tensorflow",
    "paddle": "paddle",
    "pp": "paddle",
    "mlx": "mlx",
}

#: The module each framework is imported as.
MODULES = {"jax": "jax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx.core"}

# Tensors the frameworks take without a copy start at a multiple of this
# (Eigen's EIGEN_MAX_ALIGN_BYTES, which XLA's CPU client also asks for).
ALIGN = 64

# File dtype -> the framework's dtype attribute, for the dtypes it has
# (from Rust's one table, `_dtypes.TABLE`). JAX has every dtype numpy has
# with ml_dtypes (64-bit ones as JAX's jax_enable_x64 allows); F4 (two
# values a byte) has no framework here.
def _column(name: str) -> "dict[str, str]":
    return {code: row[name] for code, row in _dtypes.TABLE.items() if row[name]}


_TF = _column("tensorflow")
# Paddle has no unsigned type but uint8 (its "uint16" is bfloat16).
_PADDLE = _column("paddle")
_MLX = _column("mlx")
_JAX = frozenset(_dtypes.ITEMSIZE)
_TABLES: dict[str, Any] = {"jax": _JAX, "tensorflow": _TF, "paddle": _PADDLE, "mlx": _MLX}

# The numpy dtype a tensor's bytes are handed over as, where numpy (without
# ml_dtypes) or DLPack lacks the file's: same width, bits unchanged.
_CARRIER = _column("carrier")


def canonical(framework: Any) -> Optional[str]:
    """"jax", "tensorflow", "paddle" or "mlx" for any of their names; None
    for any other value (torch, numpy, unknown)."""
    return NAMES.get(framework) if isinstance(framework, str) else None


def module(framework: str) -> Any:
    """The framework's module, imported now (an ImportError naming the
    package to install when it is missing)."""
    name = MODULES[framework]
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise missing(framework) from e


PACKAGES = {"torch": "torch", "numpy": "numpy", "jax": "jax", "tensorflow": "tensorflow", "paddle": "paddlepaddle", "mlx": "mlx"}


def missing(framework: str) -> ImportError:
    """The error for a framework whose package is not installed: it names
    the package to install and the ``framework=`` alternative."""
    import importlib.util

    package = PACKAGES.get(framework, framework)
    # Only the frameworks that are installed (their module found without
    # importing it; the others but numpy need numpy too).
    def installed(f: str) -> bool:
        try:
            return importlib.util.find_spec(f) is not None and (f in ("torch", "numpy") or importlib.util.find_spec("numpy") is not None)
        except (ImportError, ValueError):
            return False

    others = [repr(f) for f in PACKAGES if f != framework and installed(f)]
    alternative = f"or pass framework= one that is installed ({', '.join(others)})" if others else "no other framework is installed"
    return ImportError(f"framework {framework!r} needs the optional package {package!r}: pip install {package}; {alternative}")


def check_dtype(framework: str, code: str, name: str) -> None:
    """Raises a DeathTensorsError naming the dtype if `framework` has no
    equivalent of file dtype `code`."""
    if code not in _TABLES[framework]:
        which = f"tensor {name!r}: " if name else ""
        raise DeathTensorsError(
            f"{which}dtype {code} has no equivalent in {framework}; read it with "
            "framework='numpy' or 'torch', or get_bytes()"
        )


def aligned_empty(nbytes: int) -> Any:
    """Fresh, uninitialised memory as a 1-D numpy uint8 array starting at a
    multiple of :data:`ALIGN`."""
    import numpy as np

    block = np.empty(nbytes + ALIGN, dtype=np.uint8)
    skip = -block.ctypes.data % ALIGN
    return block[skip : skip + nbytes]


def tensor(framework: str, code: str, shape: list, raw: Any, name: str = "") -> Any:
    """A tensor of `framework` (canonical name) over `raw`, a 1-D numpy
    uint8 array holding a tensor's bytes in C order: `raw` itself when the
    framework can take it (JAX, TensorFlow, Paddle, `raw` 64-byte aligned
    and writable), else one copy. The caller gives up `raw`."""
    check_dtype(framework, code, name)
    import numpy as np

    shape = [int(d) for d in shape]
    mod = module(framework)
    if framework == "mlx":
        carrier = np.dtype("uint16") if code == "BF16" else _dtypes.numpy_dtype(code)
        # The one copy; the dtype given, as mx.array makes float64 float32.
        out = mod.array(raw.view(carrier).reshape(shape), dtype=getattr(mod, "uint16" if code == "BF16" else _MLX[code]))
        return out.view(mod.bfloat16) if code == "BF16" else out
    nbytes = raw.nbytes
    # Paddle takes any address (as safetensors hands it mapped bytes); JAX
    # would copy, TensorFlow would abort.
    unaligned = framework != "paddle" and raw.ctypes.data % ALIGN
    if nbytes and (unaligned or not raw.flags.writeable):
        copy = aligned_empty(nbytes)
        np.copyto(copy, raw)
        raw = copy
    if framework == "jax":
        array = raw.view(_dtypes.numpy_dtype(code)).reshape(shape)
        # On the CPU, device_put aliases an aligned numpy array (it holds a
        # reference to it); on an accelerator it copies there.
        return mod.device_put(array)
    if framework == "tensorflow":
        dtype = getattr(mod, _TF[code])
        if not nbytes:
            return mod.zeros(shape, dtype=dtype)
        carrier = np.dtype(_CARRIER.get(code) or _dtypes.numpy_dtype(code))
        t = mod.experimental.dlpack.from_dlpack(raw.view(carrier).reshape(shape).__dlpack__())
        return mod.bitcast(t, dtype) if t.dtype != dtype else t  # bitcast shares the buffer
    # paddle
    dtype = getattr(mod, _PADDLE[code])
    if not nbytes:
        return mod.zeros(shape, dtype=dtype)
    frombuffer, view_shape = _paddle_makers(mod)
    return view_shape(frombuffer(raw, dtype), shape)


def _paddle_makers(paddle: Any) -> tuple[Any, Any]:
    """Paddle's two cheapest calls that make a tensor over memory it did
    not allocate (3 us a tensor, where ``paddle.utils.dlpack.from_dlpack``
    takes 17 and ``Tensor.reshape`` 5): ``core.frombuffer`` (what
    safetensors.paddle's ``load`` uses: a 1-D tensor of any dtype over a
    writable buffer, holding a reference to it) and ``_C_ops.view_shape``
    (the same memory in another shape; ``Tensor.reshape`` where a Paddle
    lacks it).

    Paddle keys the deleters of ``frombuffer``'s tensors by address: two
    live ones starting at the same address abort the process when the
    second is freed. Every caller here hands it memory no other tensor
    starts at (a tensor's own bytes in a fresh mapping or fresh memory;
    zero-byte tensors are made by ``zeros``)."""
    view_shape = getattr(paddle._C_ops, "view_shape", None)
    if view_shape is None:  # pragma: no cover -- Paddle before 2.6
        def view_shape(t: Any, shape: list) -> Any:
            return t.reshape(shape)
    return paddle.base.core.frombuffer, view_shape


def paddle_tensors(rows: Any, arena: Any, out: dict) -> dict:
    """Paddle tensors over `arena`, a buffer holding their bytes (a fresh
    copy-on-write mapping of a file's data blob, or fresh memory read from
    it), one per row ``(name, code, shape, start, end, aligned)`` (as
    ``Reader.layout()`` gives), put in `out` (returned): each over its own
    bytes in `arena`, no copy, so that a load costs a few microseconds a
    tensor. A tensor not aligned for its dtype, or any tensor of a
    read-only `arena`, is copied once. Raises a DeathTensorsError naming a
    dtype Paddle lacks before making any tensor."""
    rows = list(rows)
    for code in {row[1] for row in rows}:
        check_dtype("paddle", code, next(r[0] for r in rows if r[1] == code))
    paddle = module("paddle")
    frombuffer, view_shape = _paddle_makers(paddle)
    dtypes = {code: getattr(paddle, _PADDLE[code]) for code in {row[1] for row in rows}}
    whole = memoryview(arena).cast("B") if len(arena) else None
    writable = whole is not None and not whole.readonly
    for name, code, shape, start, end, aligned in rows:
        dtype = dtypes[code]
        if end == start or whole is None:
            out[name] = paddle.zeros(shape, dtype=dtype)
            continue
        raw = whole[start:end] if aligned and writable else bytearray(whole[start:end])  # the one copy
        t = frombuffer(raw, dtype)
        out[name] = view_shape(t, shape) if len(shape) != 1 else t
    return out


def to_buffer(name: str, value: Any) -> Optional[tuple[str, list[int], Any]]:
    """(dtype name, shape, C-contiguous byte buffer) of a JAX, TensorFlow,
    Paddle or MLX tensor, its own memory when it lies on the CPU in C order
    (else one copy); None when `value` is none of these (or its framework
    is not imported: then it cannot be one)."""
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(value, jax.Array):
        return _numpy_buffer(name, value, "jax")
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(value, (tf.Tensor, tf.Variable)):
        if isinstance(value, tf.SparseTensor) or getattr(value, "dtype", None) == tf.string:
            raise DeathTensorsError(f"tensor {name!r}: cannot save a {type(value).__name__} of {value.dtype}")
        return _numpy_buffer(name, value, "tensorflow")
    paddle = sys.modules.get("paddle")
    if paddle is not None and isinstance(value, paddle.Tensor):
        return _paddle_buffer(name, value, paddle)
    mx = sys.modules.get("mlx.core")
    if mx is not None and isinstance(value, mx.array):
        return _mlx_buffer(name, value, mx)
    return None


def _numpy_buffer(name: str, value: Any, framework: str) -> tuple[str, list[int], Any]:
    """JAX and TensorFlow arrays: numpy views them (their own memory on the
    CPU; a device array is copied to the host), bfloat16 and float8 as
    ml_dtypes' types."""
    import numpy as np

    try:
        array = np.asarray(value)
    except Exception as e:  # noqa: BLE001 -- the framework's own error, with the tensor's name
        raise DeathTensorsError(f"tensor {name!r}: cannot read this {framework} array's values: {e}") from e
    return numpy_buffer(name, array)


# Paddle dtype name -> file dtype.
_FROM_PADDLE = {v: k for k, v in _PADDLE.items()}


def _paddle_buffer(name: str, t: Any, paddle: Any) -> tuple[str, list[int], Any]:
    code = _FROM_PADDLE.get(str(t.dtype).rpartition(".")[2])
    if code is None:
        raise DeathTensorsError(f"tensor {name!r}: paddle dtype {t.dtype} cannot be stored")
    shape = [int(d) for d in t.shape]
    if not t.place.is_cpu_place():
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    nbytes = _dtypes.ITEMSIZE[code] * math.prod(shape)  # numel has no float8 kernel
    if nbytes == 0:
        return code, shape, b""
    # The tensor's own memory, as safetensors.paddle reads it: a ctypes view
    # of its bytes that keeps the tensor alive.
    raw = (ctypes.c_ubyte * nbytes).from_address(t.data_ptr())
    raw._owner = t  # type: ignore[attr-defined]
    return code, shape, memoryview(raw).cast("B")


# MLX dtype name -> file dtype.
_FROM_MLX = {v.rstrip("_"): k for k, v in _MLX.items()}


def _mlx_buffer(name: str, a: Any, mx: Any) -> tuple[str, list[int], Any]:
    code = _FROM_MLX.get(str(a.dtype).rpartition(".")[2])
    if code is None:
        raise DeathTensorsError(f"tensor {name!r}: mlx dtype {a.dtype} cannot be stored")
    shape = [int(d) for d in a.shape]
    if a.size == 0:
        return code, shape, b""
    mv = memoryview(a)  # evaluates the array; its own memory
    if not mv.c_contiguous:
        mv = memoryview(mx.contiguous(a))
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B") if mv.format in ("B", "b", "c") or len(mv.format) == 1 else _bytes_of(mv)
    return code, shape, mv


def _bytes_of(mv: memoryview) -> memoryview:
    """A C-contiguous buffer of a non-native format (mlx's "bfloat16") as
    bytes, without a copy: numpy reads it through the buffer's address."""
    import numpy as np

    raw = (ctypes.c_ubyte * mv.nbytes).from_buffer(mv) if not mv.readonly else None
    if raw is not None:
        raw._owner = mv  # type: ignore[attr-defined]
        return memoryview(raw).cast("B")
    return memoryview(np.frombuffer(mv.tobytes(), dtype=np.uint8))
