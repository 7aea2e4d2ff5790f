"""Round trips through JAX, TensorFlow, Paddle or MLX, for one framework per
process: ``DT_TEST_FRAMEWORK`` names it (``test_frameworks.py`` runs this
file once per framework; TensorFlow and Paddle cannot share a process,
and TensorFlow's threads are best kept out of the main test process).

Each check compares with the real safetensors 0.8.0's module of the same
framework in this process (``import safetensors.<module>`` is the real
package here: the drop-in is not installed)."""

import os

import ml_dtypes
import numpy as np
import pytest

import deathtensors as dt
from deathtensors import _frameworks
from deathtensors.errors import DeathTensorsError

FW = os.environ.get("DT_TEST_FRAMEWORK", "")
if FW not in ("jax", "tensorflow", "paddle", "mlx"):
    pytest.skip("run by test_frameworks.py with DT_TEST_FRAMEWORK set", allow_module_level=True)

MODULE = {"jax": "flax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}[FW]
ours = __import__(f"deathtensors.safetensors.{MODULE}", fromlist=["save"])
real = __import__(f"safetensors.{MODULE}", fromlist=["save"])
assert not real.__name__.startswith("deathtensors")

# File dtype -> the framework's dtype name, for every dtype it has.
DTYPES = {
    "jax": {
        "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
        "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
        "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
        "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
    },
    "tensorflow": dict(_frameworks._TF),
    "paddle": dict(_frameworks._PADDLE),
    "mlx": dict(_frameworks._MLX),
}[FW]
LACKING = {"jax": None, "tensorflow": "F8_E4M3", "paddle": "U16", "mlx": "F8_E4M3"}[FW]

if FW == "jax":
    import jax
    import jax.numpy as jnp

    def make(values, name):
        return jnp.asarray(values).astype(getattr(jnp, name))

    def values_of(t):
        return np.asarray(t).astype(np.float64)

    def address(t):
        return t.unsafe_buffer_pointer()
elif FW == "tensorflow":
    import tensorflow as tf

    def make(values, name):
        return tf.cast(tf.constant(values), getattr(tf, name))

    def values_of(t):
        return np.asarray(tf.cast(t, tf.float64) if t.dtype != tf.complex128 else t).astype(np.float64)

    def address(t):
        if t.dtype == tf.bfloat16:
            t = tf.bitcast(t, tf.uint16)
        return np.asarray(t).ctypes.data
elif FW == "paddle":
    import paddle

    def make(values, name):
        return paddle.to_tensor(values).astype(getattr(paddle, name))

    def values_of(t):
        return t.astype("complex128" if t.is_complex() else "float64").numpy().astype(np.float64)

    def address(t):
        return t.data_ptr()
else:
    import mlx.core as mx

    def make(values, name):
        return mx.array(values).astype(getattr(mx, name))

    def values_of(t):
        return np.asarray(t.astype(mx.float32 if t.dtype != mx.complex64 else mx.complex64)).astype(np.float64)

    def address(t):
        return np.asarray(memoryview(t)).ctypes.data  # numeric dtypes only


# Values every dtype holds exactly (float8_e8m0 holds powers of two only).
VALUES = np.array([[1, 2, 4, 1], [2, 4, 1, 2], [4, 1, 2, 4]], dtype=np.float32)


def tensors():
    return {code: make(VALUES, name) for code, name in DTYPES.items()}


def same(a, b, dtype=True):
    assert tuple(a.shape) == tuple(b.shape), (a, b)
    assert not dtype or str(a.dtype) == str(b.dtype), (a, b)
    assert np.array_equal(values_of(a), values_of(b))


def test_our_api_round_trips_every_dtype(tmp_path):
    src = tensors()
    dt.save(tmp_path / "m.dt", src)
    for copy in (False, True):
        with dt.open(tmp_path / "m.dt") as f:
            got = f.get_tensors(framework=FW, copy=copy)
            one = {k: f.get_tensor(k, framework=FW) for k in src}
            view = f.get_tensor_view("F32", framework=FW)
        for k, v in src.items():
            same(got[k], v)
            same(one[k], v)
        same(view, src["F32"])
    dt.save_sharded(tmp_path / "sh", src, max_shard_bytes=64)
    with dt.open_sharded(tmp_path / "sh") as f:
        for k, v in f.get_tensors(framework=FW).items():
            same(v, src[k])


def test_dropin_round_trips_and_matches_safetensors_bytes(tmp_path):
    src = tensors()
    for code, t in src.items():
        if code == "C128":
            continue  # not a safetensors dtype (deathtensors files only)
        d = {"x": t, "zero": make(np.zeros((2, 0), np.float32), DTYPES["F32"])}
        mine = ours.save(d)
        try:
            theirs = real.save(dict(d))  # safetensors replaces the dict's values
        except Exception:  # noqa: BLE001 -- a dtype safetensors cannot save (MLX's bfloat16)
            theirs = None
        if theirs is not None:
            assert mine == theirs, code
            try:
                theirs_loaded = real.load(mine)["x"]
            except Exception:  # noqa: BLE001 -- a dtype safetensors cannot load into this framework
                theirs_loaded = t
            same(theirs_loaded, t, dtype=False)  # safetensors.mlx makes float64 float32
        same(ours.load(mine)["x"], t)
        ours.save_file(d, tmp_path / "ours.safetensors", metadata={"k": code})
        same(ours.load_file(tmp_path / "ours.safetensors")["x"], t)
        if theirs is not None:
            real.save_file(dict(d), tmp_path / "real.safetensors", metadata={"k": code})
            assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "real.safetensors").read_bytes()
            same(ours.load_file(tmp_path / "real.safetensors")["x"], t)
            try:
                theirs_loaded = real.load_file(tmp_path / "ours.safetensors")["x"]
            except Exception:  # noqa: BLE001 -- a dtype safetensors cannot load into this framework
                continue
            same(theirs_loaded, t, dtype=False)  # safetensors.mlx makes float64 float32


def test_safe_open_and_slices(tmp_path):
    from deathtensors.safetensors import safe_open

    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    ours.save_file({"a": make(a, "float32")}, tmp_path / "s.safetensors")
    names = {"jax": ("flax", "jax"), "tensorflow": ("tf", "tensorflow"), "paddle": ("paddle",), "mlx": ("mlx",)}[FW]
    for name in names:
        for backend in ("mmap", "pread"):
            with safe_open(tmp_path / "s.safetensors", framework=name, backend=backend) as f:
                same(f.get_tensor("a"), make(a, "float32"))
                for index in (slice(None), (slice(1, 4), 2), (0, slice(2, 5)), (slice(None), slice(None, None, 3))):
                    got = f.get_slice("a")[index]
                    assert np.array_equal(values_of(got), a[index]), index


def test_aligned_bytes_are_taken_as_they_are_others_copied_once():
    raw = _frameworks.aligned_empty(4096)
    raw[:] = 0
    t = _frameworks.tensor(FW, "F32", [32, 32], raw)
    if FW == "mlx":
        assert address(t) != raw.ctypes.data  # MLX allocates its arrays: one copy
    else:
        assert address(t) == raw.ctypes.data
    odd = _frameworks.aligned_empty(4096 + 8)[8:]
    odd.view(np.float32)[:] = 1
    t = _frameworks.tensor(FW, "F32", [32, 32], odd)
    if FW == "paddle":
        assert address(t) == odd.ctypes.data  # Paddle takes any address, as safetensors hands it
    else:
        assert FW == "mlx" or address(t) % 64 == 0
    # Kernels work on it (TensorFlow aborts the process on unaligned tensors).
    assert float(values_of(t).sum()) == 1024.0


def test_a_dtype_the_framework_lacks_is_named(tmp_path):
    if LACKING is None:
        pytest.skip("JAX has every dtype but F4, which numpy lacks too")
    dtype = np.dtype(ml_dtypes.float8_e4m3fn) if LACKING == "F8_E4M3" else np.uint16
    dt.save(tmp_path / "l.dt", {"w": np.ones(4, dtype)})
    with dt.open(tmp_path / "l.dt") as f, pytest.raises(DeathTensorsError, match=f"'w'.*{LACKING}.*{FW}"):
        f.get_tensor("w", framework=FW)

