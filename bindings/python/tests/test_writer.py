"""Writing: every dtype and edge shape with numpy and torch, any memory
layout, property-based round trips, determinism and failures."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import deathtensors as dt
import ml_dtypes

NUMPY_DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.float16, np.int32, np.uint32,
                np.float32, np.int64, np.uint64, np.float64, np.complex64, np.complex128,
                ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.uint16, torch.int16, torch.float16, torch.bfloat16,
                torch.int32, torch.uint32, torch.float32, torch.int64, torch.uint64, torch.float64,
                torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2,
                torch.float8_e8m0fnu]
SHAPES = [(), (0,), (3, 0, 2), (7,), (2, 3, 4), (1, 1, 1, 1, 5)]


def rand_numpy(dtype, shape, seed=0):
    raw = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    a = raw.view(dtype).reshape(shape)
    if np.dtype(dtype) == np.bool_:
        a = (raw % 2).astype(np.bool_).reshape(shape)
    return a


@pytest.mark.parametrize("shape", SHAPES)
def test_numpy_round_trip_every_dtype(tmp_path, shape):
    tensors = {f"t{i}": rand_numpy(d, shape, i) for i, d in enumerate(NUMPY_DTYPES)}
    dt.save(tmp_path / "m.dt", tensors)
    with dt.open(tmp_path / "m.dt") as f:
        for k, v in tensors.items():
            got = f.get_tensor(k, framework="numpy")
            assert got.dtype == v.dtype and got.shape == v.shape
            assert got.tobytes() == v.tobytes(), k


@pytest.mark.parametrize("shape", SHAPES)
def test_torch_round_trip_every_dtype(tmp_path, shape):
    tensors = {}
    for i, d in enumerate(TORCH_DTYPES):
        n = int(np.prod(shape))
        if n == 0:
            tensors[f"t{i}"] = torch.empty(shape, dtype=d)
            continue
        raw = torch.from_numpy(rand_numpy(np.uint8, (n * torch.empty(0, dtype=d).element_size(),), i))
        tensors[f"t{i}"] = (raw % 2).view(d).reshape(shape) if d == torch.bool else raw.view(d).reshape(shape)
    dt.save(tmp_path / "m.dt", tensors, checksum=True)
    with dt.open(tmp_path / "m.dt", verify=True) as f:
        for k, v in tensors.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and got.shape == v.shape
            assert got.reshape(-1).view(torch.uint8).tolist() == v.reshape(-1).view(torch.uint8).tolist(), k


def test_layouts_are_saved_with_their_values(tmp_path):
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    cases = {
        "fortran": np.asfortranarray(base),
        "transposed": base.transpose(2, 0, 1),
        "sliced": base[:, ::2, 1:4],
        "negative": base[::-1, :, ::-2],
        "big_endian": base.astype(">f8"),
        "torch_t": torch.from_numpy(base.copy()).permute(2, 1, 0),
        "torch_slice": torch.from_numpy(base.copy())[:, 1, ::2],
    }
    dt.save(tmp_path / "m.dt", cases)
    with dt.open(tmp_path / "m.dt") as f:
        for k, v in cases.items():
            want = v.numpy() if isinstance(v, torch.Tensor) else v
            got = f.get_tensor(k, framework="numpy")
            assert got.shape == want.shape and np.array_equal(got, want.astype("<f8")), k


def test_tuples_and_buffer_objects(tmp_path):
    import array

    dt.save(tmp_path / "m.dt", {"t": ("I16", [2], b"\x01\x00\x02\x00"), "arr": array.array("f", [1.5, 2.5]),
                                 "bytes": b"abc"})
    with dt.open(tmp_path / "m.dt") as f:
        assert f.get_tensor("t", "numpy").tolist() == [1, 2]
        assert f.info("arr")["dtype"] == "F32" and f.get_tensor("arr", "numpy").tolist() == [1.5, 2.5]
        assert f.get_bytes("bytes") == b"abc"
    dt.save_file(tmp_path / "n.dt", [("w", "F32", [1], b"\0\0\x80?", {"k": "v"})], global_metadata={"g": "1"})
    with dt.open(tmp_path / "n.dt") as f:
        assert f.get_tensor("w", "numpy").tolist() == [1.0] and f.info("w")["metadata"] == {"k": "v"}


def test_saving_is_deterministic_and_keeps_insertion_order(tmp_path):
    tensors = {"z": np.ones(3), "a": np.zeros((2, 2), np.int8)}
    meta = {"b": "2", "a": "1"}
    dt.save(tmp_path / "1.dt", tensors, global_metadata=meta, checksum=True)
    dt.save(tmp_path / "2.dt", dict(tensors), global_metadata=dict(reversed(list(meta.items()))), checksum=True)
    assert (tmp_path / "1.dt").read_bytes() == (tmp_path / "2.dt").read_bytes()
    assert dt.open(tmp_path / "1.dt").keys() == ["z", "a"]


def test_bad_input_is_refused_and_the_old_file_kept(tmp_path):
    path = tmp_path / "m.dt"
    dt.save(path, {"a": np.zeros(2)})
    before = path.read_bytes()
    with pytest.raises(dt.DeathTensorsError):
        dt.save(path, {"a": object()})
    with pytest.raises(dt.DeathTensorsError, match="not saved"):
        dt.save(path, {"a": np.zeros(1)}, metadata={"b": {"k": "v"}})
    with pytest.raises(dt.DeathTensorsError):
        dt.save(path, {"a": np.zeros(1)}, global_metadata={"k": 1})
    with pytest.raises(dt.FormatError, match="control character"):
        dt.save(path, {"bad\nname": np.zeros(1)})
    with pytest.raises(dt.DeathTensorsError, match="need 8"):
        dt.save(path, {"a": ("F64", [1], b"\0" * 7)})
    with pytest.raises(dt.DeathTensorsError, match="compress_level"):
        dt.save_file(path, [("a", "F32", [1], b"\0\0\0\0")], compress=True, compress_level=23)
    with pytest.raises(FileNotFoundError):
        dt.save(tmp_path / "missing" / "m.dt", {"a": np.zeros(1)})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.dt"]


tensor_dicts = st.dictionaries(
    st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=20),
    hnp.arrays(
        dtype=st.sampled_from([np.float32, np.int64, np.uint8, np.float16, np.bool_, np.complex64]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
    ),
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(tensors=tensor_dicts, checksum=st.booleans())
def test_random_dicts_round_trip(tmp_path_factory, tensors, checksum):
    path = tmp_path_factory.mktemp("h") / "m.dt"
    dt.save(path, tensors, checksum=checksum, durable=False)
    with dt.open(path, verify=checksum) as f:
        assert f.keys() == list(tensors)
        for k, v in tensors.items():
            got = f.get_tensor(k, framework="numpy")
            assert got.dtype == v.dtype and got.shape == v.shape and got.tobytes() == v.tobytes()


def test_checksum_tensors_keeps_the_digests_and_drops_the_footer(tmp_path):
    tensors = {"a": np.arange(1000, dtype=np.float32), "b": np.ones((3, 4), dtype=np.int64)}
    full, lean = tmp_path / "full.dt", tmp_path / "lean.dt"
    dt.save(full, tensors, checksum=True)
    dt.save(lean, tensors, checksum="tensors")
    assert lean.stat().st_size == full.stat().st_size - 32
    with dt.open(lean) as f:
        assert not f.has_checksum()
        assert all(len(f.info(k)["sha256"]) == 64 for k in tensors)
        assert f.verify()
    with dt.open(full) as f, dt.open(lean) as g:
        assert [f.info(k)["sha256"] for k in tensors] == [g.info(k)["sha256"] for k in tensors]
    # A flipped byte is named by the tensor's digest.
    with dt.open(lean) as f:
        at = f.info("a")["file_offset"]
    data = bytearray(lean.read_bytes())
    data[at + 5] ^= 1
    lean.write_bytes(bytes(data))
    with dt.open(lean) as f, pytest.raises(dt.IntegrityError, match='"a"'):
        f.verify()
    for bad in ("footer", 1, "True"):
        with pytest.raises(ValueError, match="checksum must be False, True or 'tensors'"):
            dt.save(tmp_path / "x.dt", tensors, checksum=bad)
    with pytest.raises(ValueError, match="without a footer are for plain saves, not compressed"):
        dt.save(tmp_path / "x.dt", tensors, checksum="tensors", compress=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.dt", "lean.dt"]


def test_torch_works_without_numpy(tmp_path):
    """numpy is optional: saving and loading torch tensors must not need it."""
    import subprocess
    import sys

    script = f"""
import sys
sys.modules["numpy"] = None  # any import of numpy now fails
import torch
import deathtensors as dt
t = {{"w": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(), "b": torch.ones(2, dtype=torch.bfloat16)}}
dt.save({str(tmp_path / "m.dt")!r}, t, checksum=True)
with dt.open({str(tmp_path / "m.dt")!r}, verify=True) as f:
    assert torch.equal(f.get_tensor("w"), t["w"])
    assert torch.equal(f.get_tensors()["b"], t["b"])
    assert torch.equal(f.get_tensor_view("w"), t["w"])
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_views_with_offsets_grad_and_any_mapping_are_saved_as_their_values(tmp_path):
    """The native fast path takes numpy arrays and torch tensors by their
    memory: views that start inside their buffer, tensors that require
    grad, and mappings that are not dicts must save exactly their values."""
    import collections

    base = np.arange(40, dtype=np.int32)
    tbase = torch.arange(40, dtype=torch.float32)
    cases = collections.OrderedDict(
        np_view=base[3:11].reshape(2, 4),
        torch_view=tbase[5:17].reshape(3, 4),
        torch_grad=torch.ones(3, requires_grad=True),
        torch_scalar=torch.tensor(7, dtype=torch.int64),
        np_scalar=np.float32(2.5),
        torch_bf16_view=tbase.to(torch.bfloat16)[1:4],
    )

    class Tensors(collections.abc.Mapping):
        def __getitem__(self, k):
            return cases[k]

        def __iter__(self):
            return iter(cases)

        def __len__(self):
            return len(cases)

    for what, mapping in (("dict", dict(cases)), ("mapping", Tensors())):
        path = tmp_path / f"{what}.dt"
        dt.save(path, mapping)
        with dt.open(path) as f:
            assert f.keys() == list(cases)
            for k, v in cases.items():
                got = f.get_tensor(k, framework="torch")
                want = torch.as_tensor(np.asarray(v)) if not isinstance(v, torch.Tensor) else v.detach()
                assert got.dtype == want.dtype and got.shape == want.shape, k
                assert torch.equal(got, want), k


def test_non_str_names_are_refused(tmp_path):
    with pytest.raises(dt.DeathTensorsError, match="names must be str"):
        dt.save(tmp_path / "m.dt", {1: np.zeros(2)})
    with pytest.raises(dt.DeathTensorsError, match="names must be str"):
        dt.save_sharded(tmp_path / "s", {("a",): torch.zeros(2)})
    assert list(tmp_path.iterdir()) == []


def test_drop_cache_writes_the_same_file_out_of_the_page_cache(tmp_path):
    from conftest import cached_fraction

    tensors = {"a": np.arange(3 << 20, dtype=np.float32), "b": torch.arange(1 << 20, dtype=torch.int64)[::2]}
    dt.save(tmp_path / "kept.dt", tensors, checksum=True)
    dt.save(tmp_path / "dropped.dt", tensors, checksum=True, drop_cache=True)
    cached = cached_fraction(tmp_path / "dropped.dt")
    if cached is not None:
        assert cached < 0.05, f"{cached:.0%} of the file is still in the page cache"
    assert (tmp_path / "kept.dt").read_bytes() == (tmp_path / "dropped.dt").read_bytes()
    with dt.open(tmp_path / "dropped.dt") as f:
        assert f.verify()
    # A save that is not durable does not wait for the disk: refused, and
    # the target is untouched.
    with pytest.raises(ValueError, match="drop_cache=True needs durable=True"):
        dt.save(tmp_path / "dropped.dt", {"x": np.zeros(3)}, durable=False, drop_cache=True)
    assert (tmp_path / "kept.dt").read_bytes() == (tmp_path / "dropped.dt").read_bytes()
