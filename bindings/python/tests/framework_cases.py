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


# What safetensors 0.8.0 itself cannot do with these frameworks (pinned in
# .venv), measured: (framework, call) -> the dtypes it fails on and the
# words of its error. Any other failure of the peer fails the test, so a
# bug of ours cannot hide behind "the peer could not".
F8 = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ"}
PEER_REFUSES = {
    ("jax", "load"): ({"BF16"} | F8, "KeyError"),
    ("jax", "load_file"): (F8, "has no attribute 'float8"),
    ("tensorflow", "load"): ({"BF16"}, "KeyError"),
    ("paddle", "load"): ({"C64"}, "KeyError"),
    # safetensors.paddle's load_file views its bytes with a stride of 0
    # for the (2, 0) tensor beside them, whatever the dtype.
    ("paddle", "load_file"): (None, "must be 1 to view uint8"),
    ("mlx", "save"): ({"BF16"}, "not a valid PEP 3118 buffer format"),
}
REFUSED: list = []


def peer_refused(code: str, call: str, e: Exception) -> None:
    """Records a failure of safetensors itself, if it is a known one."""
    dtypes, words = PEER_REFUSES.get((FW, call), (set(), None))
    message = f"{type(e).__name__}: {e}"
    if words is None or (dtypes is not None and code not in dtypes) or words not in message:
        raise AssertionError(f"safetensors.{FW} {call} failed on {code}, which is not a known refusal") from e
    REFUSED.append((code, call))


def test_dropin_round_trips_and_matches_safetensors_bytes(tmp_path):
    src = tensors()
    for code, t in src.items():
        if code == "C128":
            continue  # not a safetensors dtype (deathtensors files only)
        d = {"x": t, "zero": make(np.zeros((2, 0), np.float32), DTYPES["F32"])}
        mine = ours.save(d)
        try:
            theirs = real.save(dict(d))  # safetensors replaces the dict's values
        except Exception as e:  # noqa: BLE001 -- only a known refusal passes
            peer_refused(code, "save", e)
            theirs = None
        if theirs is not None:
            assert mine == theirs, code
            try:
                theirs_loaded = real.load(mine)["x"]
            except Exception as e:  # noqa: BLE001 -- only a known refusal passes
                peer_refused(code, "load", e)
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
            except Exception as e:  # noqa: BLE001 -- only a known refusal passes
                peer_refused(code, "load_file", e)
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



def _paddle_only():
    if FW != "paddle":
        pytest.skip("Paddle's bulk load (deathtensors._frameworks.paddle_tensors)")


def paddle_sample():
    """Every dtype Paddle has, several shapes (a scalar, an empty tensor, a
    1-D and a 3-D one), with values that tell the tensors apart."""
    out = {code: make(VALUES + i, name) for i, (code, name) in enumerate(DTYPES.items()) if code != "BOOL"}
    out["BOOL"] = make(VALUES > 1, "bool")
    out["scalar"] = make(np.float32(3.5), "float32")
    out["empty"] = make(np.zeros((3, 0, 2), np.float32), "bfloat16")
    out["flat"] = make(np.arange(1000, dtype=np.float32), "float16")
    out["cube"] = make(np.arange(24, dtype=np.float32).reshape(2, 3, 4), "bfloat16")
    return out


def loads(path):
    """Paddle's loads of `path`: the drop-in's load_file, safe_open's
    get_tensors, and our API's (mapped and copied)."""
    from deathtensors.safetensors import safe_open

    def api(copy):
        with dt.open(path) as f:
            return f.get_tensors(framework="paddle", copy=copy)

    def opened():
        with safe_open(path, framework="paddle") as f:
            return f.get_tensors()

    return {"load_file": lambda: ours.load_file(path), "safe_open": opened, "api": lambda: api(False), "copy": lambda: api(True)}


@pytest.mark.parametrize("kind", ["safetensors", "deathtensors"])
def test_paddle_loads_every_dtype_over_one_mapping(tmp_path, kind):
    _paddle_only()
    src = paddle_sample()
    path = tmp_path / f"m.{kind}"
    if kind == "safetensors":
        src.pop("C128")  # not a safetensors dtype
        real.save_file(dict(src), path)  # tensors at 8-byte, not 64-byte, offsets
    else:
        dt.save(path, src)
    for how, load in loads(path).items():
        got = load()
        assert list(got) == list(ours.load_file(path)), how
        for k, v in src.items():
            same(got[k], v)
            assert got[k].dtype == v.dtype and got[k].place.is_cpu_place(), (how, k)
        if how != "copy":
            # The file's bytes themselves: each tensor where its bytes lie in
            # one mapping of the data.
            with dt.open(path) as f:
                base = got["F32"].data_ptr() - f.info("F32")["data_offsets"][0]
                for k in src:
                    if k != "empty":
                        assert got[k].data_ptr() == base + f.info(k)["data_offsets"][0], (how, k)
        # Usable as any tensor: arithmetic, and written in place.
        assert float((got["F32"] * 2).sum()) == 2 * float(got["F32"].sum())
        got["cube"][0, 0, 0] = 100
        assert float(got["cube"].astype("float32")[0, 0, 0]) == 100.0


def test_paddle_tensors_outlive_the_file_and_never_write_to_it(tmp_path):
    _paddle_only()
    import gc

    src = paddle_sample()
    path = tmp_path / "m.dt"
    dt.save(path, src)
    before = path.read_bytes()
    for how, load in loads(path).items():
        got = load()
        gc.collect()  # the file object, the reader and the mapping's other owners are gone
        got["F32"][0, 0] = -7
        got["BF16"] += 1
        assert path.read_bytes() == before, how  # copy-on-write: writes stay in the process
        dt.save(path, {"F32": make(np.zeros((3, 4), np.float32), "float32")})  # replaced by a rename
        os.remove(path)
        gc.collect()
        assert float(got["F32"][0, 0]) == -7.0
        same(got["BF16"], src["BF16"] + 1)
        for k in ("F16", "I64", "F8_E4M3", "cube", "scalar"):
            same(got[k], src[k])
        dt.save(path, src)
        before = path.read_bytes()


def test_paddle_loads_twice_share_no_memory(tmp_path):
    # Each load maps the file anew: two loads' tensors never share bytes
    # (nor, what Paddle's frombuffer cannot survive, a start address).
    _paddle_only()
    path = tmp_path / "m.dt"
    src = paddle_sample()
    dt.save(path, src)
    for load in loads(path).values():
        a, b = load(), load()
        assert all(a[k].data_ptr() != b[k].data_ptr() for k in a if k != "empty")
        a["F32"][0, 0] = -9
        same(b["F32"], src["F32"])
        with dt.open(path) as f:
            views = [f.get_tensor_view("F32", framework="paddle") for _ in range(2)]  # copies of the shared mapping
        assert views[0].data_ptr() != views[1].data_ptr()
        del a, b, views


def test_paddle_loads_of_a_signed_file_check_every_byte(tmp_path):
    # A signed file's tensors are read and checked against their signed
    # digests, never mapped: a flipped byte raises instead of loading.
    _paddle_only()
    from deathtensors.safetensors import SafetensorError, safe_open

    src = {"small": make(VALUES, "float32"), "big": make(np.arange(1 << 18, dtype=np.float32), "bfloat16")}
    path = tmp_path / "m.dt"
    dt.save(path, src, sign=dt.generate_key("ed25519"))
    for load in loads(path).values():
        for k, v in load().items():
            same(v, src[k])
    raw = bytearray(path.read_bytes())
    with dt.open(path) as f:
        data_len = max(f.info(k)["data_offsets"][1] for k in f.keys())
        big_start = f.info("big")["data_offsets"][0]
    raw[len(raw) - 32 - (96 + 16) - data_len + big_start + 1000] ^= 1  # before the footer and one signature
    path.write_bytes(bytes(raw))
    with dt.open(path) as f:
        same(f.get_tensor("small", framework="paddle"), src["small"])
        with pytest.raises(dt.IntegrityError, match="big"):
            f.get_tensor("big", framework="paddle")
        for copy in (False, True):
            with pytest.raises(dt.IntegrityError, match="big"):
                f.get_tensors(framework="paddle", copy=copy)
    with pytest.raises(SafetensorError, match="big"):
        ours.load_file(path)
    with safe_open(path, framework="paddle") as f, pytest.raises(SafetensorError, match="big"):
        f.get_tensors()
    # Unsigned, with digests: a load asked to verify checks them.
    plain = tmp_path / "plain.dt"
    dt.save(plain, src, checksum=True)
    raw = bytearray(plain.read_bytes())
    with dt.open(plain) as f:
        off = f.info("big")["file_offset"]
    raw[off + 1000] ^= 1
    plain.write_bytes(bytes(raw))
    with dt.open(plain) as f:
        with pytest.raises(dt.IntegrityError, match="big"):
            f.get_tensor("big", framework="paddle", verify=True)
    with pytest.raises(dt.IntegrityError, match="big"):
        dt.open(plain, verify=True)


def test_paddle_bulk_load_names_a_dtype_paddle_lacks(tmp_path):
    _paddle_only()
    from deathtensors.safetensors import SafetensorError, safe_open

    path = tmp_path / "l.safetensors"
    dt.save(path, {"ok": np.ones(4, np.float32), "w": np.ones(4, np.uint16)}, format="safetensors")
    with dt.open(path) as f, pytest.raises(DeathTensorsError, match="'w'.*U16.*paddle"):
        f.get_tensors(framework="paddle")
    with safe_open(path, framework="paddle") as f, pytest.raises(SafetensorError, match="U16"):
        f.get_tensors()


def test_paddle_bulk_load_copies_a_tensor_not_aligned_for_its_dtype(tmp_path):
    # A float32 at byte 1 of the data (a safetensors file may lay one out
    # so): copied once into memory aligned for it; its neighbour is not.
    _paddle_only()
    import json
    import struct

    header = json.dumps({
        "a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]},
    }).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\x07" + np.array([1.5, -2], np.float32).tobytes())
    for how, load in loads(path).items():
        got = load()
        assert got["b"].data_ptr() % 4 == 0, how
        assert got["b"].numpy().tolist() == [1.5, -2.0] and got["a"].numpy().tolist() == [7], how
