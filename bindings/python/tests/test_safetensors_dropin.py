"""deathtensors.safetensors, the drop-in for safetensors 0.8.0's Python API:
same bytes, same answers and the same errors as the real package (imported
here as `real`), right values where the real one scrambles them, and the
switch that makes `import safetensors` give ours. safetensors' own test
suite runs against it in `cargo xtask compat`."""

import gc
import hashlib
import importlib.metadata
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import deathtensors
import deathtensors.safetensors as ours
import deathtensors.safetensors.numpy as ours_np
import deathtensors.safetensors.torch as ours_pt

from conftest import TESTDATA, mappings_of

real = pytest.importorskip("safetensors")
import safetensors.numpy as real_np  # noqa: E402
import safetensors.torch as real_pt  # noqa: E402

assert real is not ours, "the real safetensors must be importable next to the drop-in"

VALID = TESTDATA / "valid"
REAL_FILES = sorted(p for p in (VALID / "safetensors-0.8.0").rglob("*.safetensors"))


def torch_bytes(t: torch.Tensor) -> bytes:
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def raised(f, *args):
    """The exception f(*args) raises, as (type name, message)."""
    try:
        f(*args)
    except Exception as e:  # noqa: BLE001 -- compared, not handled
        return type(e).__name__, str(e)
    pytest.fail(f"{f} did not raise")


# Same bytes


TORCH_CASES = {
    "dtypes": {
        "a": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "b": torch.ones(2, 3, dtype=torch.bfloat16),
        "c": torch.tensor([True, False]),
        "d": torch.arange(5, dtype=torch.int64),
        "e": torch.zeros(2, 0, dtype=torch.float16),
        "f": torch.tensor(7.5),
        "g": torch.tensor([-0.5, 2.0], dtype=torch.float8_e4m3fn),
        "h": torch.zeros(2, 2, dtype=torch.complex64),
        "i": torch.arange(4, dtype=torch.int32).to(torch.uint16),
    },
    "one": {"test": torch.zeros((2, 2), dtype=torch.int32)},
    "empty": {},
}


@pytest.mark.parametrize("case", sorted(TORCH_CASES))
@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}])
def test_torch_bytes_match_safetensors(case, metadata, tmp_path):
    tensors = TORCH_CASES[case]
    if not tensors and metadata == {}:
        # safetensors 0.8.0 writes `{},"__metadata__":{}}` here, which it
        # cannot read back; ours is valid.
        assert ours_pt.load(ours_pt.save(tensors, metadata=metadata)) == {}
        with pytest.raises(real.SafetensorError, match="invalid JSON"):
            real_pt.load(real_pt.save(tensors, metadata=metadata))
        return
    assert ours_pt.save(tensors, metadata=metadata) == real_pt.save(tensors, metadata=metadata)
    ours_pt.save_file(tensors, tmp_path / "ours.safetensors", metadata=metadata)
    real_pt.save_file(tensors, tmp_path / "real.safetensors", metadata=metadata)
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "real.safetensors").read_bytes()


def test_numpy_bytes_match_safetensors():
    tensors = {"x": np.arange(6, dtype=np.float64).reshape(2, 3), "y": np.asarray(False), "z": np.zeros(3, ">i4")}
    assert ours_np.save(tensors) == real_np.save(tensors)


def test_fp4_bytes_match_safetensors():
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip("torch has no float4_e2m1fn_x2")
    tensors = {"p": torch.zeros(2, 2, dtype=torch.uint8).view(torch.float4_e2m1fn_x2), "s": torch.ones(3)}
    data = ours_pt.save(tensors)
    assert data == real_pt.save(tensors)
    assert ours_pt.load(data)["p"].shape == (2, 2)


def test_tensor_spec_api_matches_safetensors():
    a = np.arange(6, dtype=np.float32)
    for mod in (ours, real):
        spec = mod.TensorSpec(dtype="float32", shape=(2, 3), data_ptr=a.ctypes.data, data_len=a.nbytes)
        assert (spec.dtype, spec.shape) == ("F32", [2, 3])
    specs = {m: {"a": m.TensorSpec(dtype="float32", shape=[6], data_ptr=a.ctypes.data, data_len=24)} for m in (ours, real)}
    assert ours.serialize(specs[ours], {"k": "v"}) == real.serialize(specs[real], {"k": "v"})
    packed = ours.TensorSpec(dtype="float4_e2m1fn_x2", shape=[4, 2], data_ptr=0, data_len=8)
    assert packed.shape == [4, 4]
    with pytest.raises(ours.SafetensorError, match='Unknown dtype "nonsense"'):
        ours.TensorSpec(dtype="nonsense", shape=[1], data_ptr=0, data_len=0)
    with pytest.raises(TypeError):
        ours.serialize({"a": {"dtype": "float32", "shape": [1], "data_ptr": 0, "data_len": 0}})
    with pytest.raises(ours.SafetensorError, match="Error while serializing"):
        ours.serialize({"a": ours.TensorSpec(dtype="float32", shape=[7], data_ptr=a.ctypes.data, data_len=24)})


# Same answers on files safetensors wrote


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: p.name)
def test_reads_what_safetensors_reads(path, manifest):
    expected = manifest["files"][str(path.relative_to(VALID))]["tensors"]
    with ours.safe_open(path, framework="pt") as f, real.safe_open(path, framework="pt") as g:
        assert f.keys() == g.keys() == sorted(expected)
        assert f.metadata() == g.metadata()
        assert f.offset_keys() == g.offset_keys()
        for name in f.keys():
            t = f.get_tensor(name)
            assert (t.dtype, t.shape) == (g.get_tensor(name).dtype, g.get_tensor(name).shape)
            assert hashlib.sha256(torch_bytes(t)).hexdigest() == expected[name]["sha256"]
            s = f.get_slice(name)
            assert (s.get_shape(), s.get_dtype()) == (g.get_slice(name).get_shape(), g.get_slice(name).get_dtype())
    assert ours_pt.load(path.read_bytes()).keys() == real_pt.load(path.read_bytes()).keys()


def test_keys_are_sorted_and_metadata_none_when_absent(tmp_path):
    path = tmp_path / "t.safetensors"
    ours_pt.save_file({"z": torch.ones(1), "a": torch.ones(1, dtype=torch.int64), "m": torch.ones(2)}, path)
    with ours.safe_open(path, framework="pt") as f:
        assert f.keys() == ["a", "m", "z"]
        assert f.offset_keys() == ["a", "m", "z"]  # I64 first, then F32 by name
        assert f.metadata() is None
        assert list(f.get_tensors()) == ["a", "m", "z"]


def test_numpy_framework_and_pread(tmp_path):
    path = tmp_path / "t.safetensors"
    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.uint64)}
    ours_np.save_file(arrays, path)
    for backend in ("mmap", "pread"):
        loaded = ours_np.load_file(path, backend=backend)
        for k, v in arrays.items():
            np.testing.assert_array_equal(loaded[k], v)
            assert loaded[k].dtype == v.dtype and loaded[k].flags.writeable


def test_parallel_get_tensors(tmp_path, monkeypatch):
    from deathtensors.safetensors import _open

    monkeypatch.setattr(_open, "_PARALLEL_BYTES", 0)
    tensors = {f"t{i}": torch.full((100 + i,), float(i)) for i in range(40)}
    ours_pt.save_file(tensors, tmp_path / "t.safetensors")
    with ours.safe_open(tmp_path / "t.safetensors", framework="pt", backend="pread") as f:
        loaded = f.get_tensors()  # copies, read by threads
    assert list(loaded) == sorted(tensors)  # file order: one dtype, so by name
    for k, v in tensors.items():
        assert torch.equal(loaded[k], v)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/self/maps")
@pytest.mark.parametrize("framework", ["pt", "np"])
def test_loads_are_private_mappings_that_never_share_or_write(framework, tmp_path):
    path = tmp_path / "t.safetensors"
    big = torch.arange(1 << 19, dtype=torch.float32)  # 2 MiB: mapped
    ours_pt.save_file({"big": big, "small": torch.ones(3)}, path)
    before = path.read_bytes()
    with ours.safe_open(path, framework=framework) as f:
        one, two = f.get_tensor("big"), f.get_tensor("big")
        assert mappings_of(path) >= 2  # one mapping each, no copy
        everything = f.get_tensors()
    for t in (one, everything["big"], everything["small"]):
        t[:2] = -7  # writable, after the file is closed
    assert path.read_bytes() == before  # writes never reach the file
    assert two[:2].tolist() == [0.0, 1.0]  # nor another call's tensor
    assert everything["small"].tolist() == [-7.0, -7.0, 1.0]
    with ours.safe_open(path, framework=framework, backend="pread") as f:
        copied = f.get_tensor("big")
    assert copied[5].item() == 5.0
    path.unlink()  # the mappings outlive the file's name
    assert two[-1].item() == float((1 << 19) - 1) and one[2].item() == 2.0
    del one, two, everything, f, t
    gc.collect()
    assert mappings_of(path) == 0 and mappings_of(f"{path} (deleted)") == 0


def test_loaded_tensors_are_owned_copies(tmp_path):
    path = tmp_path / "t.safetensors"
    ours_pt.save_file({"a": torch.zeros(4)}, path)
    loaded = ours_pt.load_file(path)
    loaded["a"] += 1  # writable
    path.unlink()  # and independent of the file
    assert torch.equal(loaded["a"], torch.ones(4))


# Slices


SLICE_INDICES = [
    (slice(None),),
    (),
    (slice(None, 2),),
    (slice(None), slice(None, 2)),
    (0, slice(None, 2)),
    (slice(2, None), -1),
    (slice(1, 9, 3), slice(None, None, 2)),
    (Ellipsis, 3),
    (4, Ellipsis),
    (slice(-3, None), slice(-4, -1)),
    (np.int64(2),),
    [],
]


@pytest.mark.parametrize("framework", ["pt", "np"])
@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_slices_match_indexing(framework, backend, tmp_path):
    a = np.random.default_rng(0).random((10, 5)).astype(np.float32)
    path = tmp_path / "s.safetensors"
    ours_np.save_file({"a": a}, path)
    with ours.safe_open(path, framework=framework, backend=backend) as f:
        s = f.get_slice("a")
        for index in SLICE_INDICES:
            got = s[index]
            want = a[index] if not isinstance(index, list) else a[:0]
            got = got.numpy() if framework == "pt" else got
            assert got.shape == want.shape, index
            np.testing.assert_array_equal(got, want)


@st.composite
def array_and_index(draw):
    """An array and a valid index: ints, slices, maybe an ellipsis."""
    shape = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    items = []
    for dim in shape:
        if draw(st.booleans()):
            items.append(draw(st.integers(-dim, dim - 1)))
        else:
            start = draw(st.one_of(st.none(), st.integers(0, dim - 1)))
            stop = draw(st.one_of(st.none(), st.integers(0, dim)))
            items.append(slice(start, stop, draw(st.integers(1, 3))))
    lead = draw(st.integers(0, len(shape)))
    if draw(st.booleans()):
        trail = draw(st.integers(0, len(shape) - lead))
        index = (*items[:lead], Ellipsis, *items[len(shape) - trail :])
    else:
        index = tuple(items[:lead])
    return np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape), index


def shape_name(shape) -> str:
    return "x".join(map(str, shape))


@pytest.fixture(scope="session")
def slice_file(tmp_path_factory):
    """Every shape of 1 to 3 dimensions of 1 to 5."""
    shapes = [s for n in (1, 2, 3) for s in np.ndindex(*[5] * n)]
    arrays = {}
    for s in shapes:
        shape = [d + 1 for d in s]
        arrays[shape_name(shape)] = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape)
    path = tmp_path_factory.mktemp("slices") / "shapes.safetensors"
    ours_np.save_file(arrays, path)
    return path


@settings(max_examples=200, deadline=None)
@given(case=array_and_index())
def test_slices_match_numpy(slice_file, case):
    a, index = case
    with ours.safe_open(slice_file, framework="np") as f:
        got = f.get_slice(shape_name(a.shape))[index]
    np.testing.assert_array_equal(got, a[index])
    assert got.shape == a[index].shape


def test_slice_errors_match_safetensors(tmp_path):
    path = tmp_path / "s.safetensors"
    real_np.save_file({"a": np.zeros((10, 5))}, path)
    bad = [(slice(2, None), -6), [0, 1], (slice(2, None), 20), (slice(None, 20),), (slice(None), slice(None, 20)),
           (1, 2, 3), (Ellipsis, Ellipsis), (slice(None, None, -1),), ("x",)]
    with ours.safe_open(path, framework="np") as f, real.safe_open(path, framework="np") as g:
        for index in bad:
            got = raised(f.get_slice("a").__getitem__, index)
            assert got == raised(g.get_slice("a").__getitem__, index), index
        assert raised(f.get_tensor, "nope") == raised(g.get_tensor, "nope")
    assert got[0] == "SafetensorError"


# With "pt", safetensors indexes a torch view, so torch's rules hold:
# bounds clamp, lists, None and masks select, bad indices raise IndexError,
# ValueError or TypeError. transformers slices every parameter this way
# (zero-size ones too) and tensor-parallel loading passes lists.
TORCH_INDICES = [
    (...,), (slice(None),), (slice(0, 0),), (slice(None), slice(None)), slice(2, 6), slice(1, 100),
    slice(4, None), slice(10, None), slice(-10, None), [0, 2], ([0, 2], ...), (slice(None), [0, 2, 4]),
    torch.tensor([1, 3]), None, (slice(None), None), (..., ...), True, False, 4, (0, 6), (0, 0, 0), -1,
    (-1, -2), slice(None, None, -1), slice(None, None, 0), 1.0, (slice(None), slice(1, 3)),
    slice(None, None, 2), torch.tensor([True, False, True, False]),
]


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_torch_slices_follow_torch_like_safetensors(backend, tmp_path):
    path = tmp_path / "s.safetensors"
    real_pt.save_file(
        {
            "empty": torch.empty(0, 4),
            "w": torch.arange(24.0).reshape(4, 6),
            "mask": torch.tensor([True, False, True, False]),
            "h": torch.arange(12, dtype=torch.bfloat16).reshape(4, 3),
            "scalar": torch.tensor(2.5),
        },
        path,
    )
    with real.safe_open(path, "pt") as g, ours.safe_open(path, "pt", backend=backend) as f:
        for name in g.keys():
            for index in TORCH_INDICES:
                want = raised_or(g.get_slice(name).__getitem__, index)
                got = raised_or(f.get_slice(name).__getitem__, index)
                if isinstance(want, torch.Tensor):
                    assert isinstance(got, torch.Tensor), (name, index, got)
                    assert (got.shape, got.dtype) == (want.shape, want.dtype), (name, index)
                    assert torch.equal(got, want), (name, index)
                else:
                    assert got == want, (name, index)
        # A slice is the caller's copy: writing it reaches neither the file
        # nor later reads.
        x = f.get_slice("w")[...]
        x[0, 0] = 99
        assert f.get_slice("w")[0, 0].item() == 0.0 and f.get_tensor("w")[0, 0].item() == 0.0


def raised_or(call, *args):
    """What `call` returns, or the type of what it raises."""
    try:
        return call(*args)
    except Exception as e:  # noqa: BLE001 -- compared by type
        return type(e)


def test_bf16_and_fp8_slices(tmp_path):
    t = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors = {"b": t.to(torch.bfloat16), "f": t.to(torch.float8_e5m2)}
    path = tmp_path / "s.safetensors"
    ours_pt.save_file(tensors, path)
    with ours.safe_open(path, framework="pt") as f:
        for name, v in tensors.items():
            assert torch_bytes(f.get_slice(name)[1:3, ::2]) == torch_bytes(v[1:3, ::2])


def test_slices_from_threads_and_after_close(tmp_path):
    a = torch.arange(64 * 32, dtype=torch.float32).reshape(64, 32)
    path = tmp_path / "s.safetensors"
    ours_pt.save_file({"a": a}, path)
    errors = []
    with ours.safe_open(path, framework="pt") as f:
        s = f.get_slice("a")

        def work(i):
            try:
                for _ in range(20):
                    assert torch.equal(s[i * 8 : (i + 1) * 8], a[i * 8 : (i + 1) * 8])
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors
    assert torch.equal(s[:2], a[:2])  # a slice outlives its safe_open, as in safetensors
    with pytest.raises(ours.SafetensorError, match="File is closed"):
        f.keys()


# Errors


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        ours.safe_open("notafile", framework="pt")
    assert str(e.value) == "No such file or directory: notafile"
    lfs = tmp_path / "model.safetensors"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    with pytest.raises(ours.SafetensorError, match="Error while deserializing header: .*Git LFS pointer"):
        ours.safe_open(lfs, framework="pt")
    with pytest.raises(ours.SafetensorError, match="Error while deserializing"):
        ours_pt.load(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    with pytest.raises(ours.SafetensorError, match='backend "nope" is invalid'):
        ours.safe_open(lfs, framework="pt", backend="nope")
    with pytest.raises(ours.SafetensorError, match="framework jaxx is invalid"):
        ours.safe_open(lfs, framework="jaxx")
    with pytest.raises(ours.SafetensorError, match="Device cuda:0 is not supported for framework numpy"):
        ours.safe_open(lfs, framework="np", device="cuda")


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_torch_save_checks_match_safetensors(tmp_path):
    a = torch.arange(6.0).reshape(2, 3)
    cases = [
        {"a": a, "b": a[:1]},  # shared memory
        {"a": a.t()},  # not contiguous
        {"a": {"x": 1}},
        "notadict",
        {"a": torch.sparse_coo_tensor(size=(2, 3))},
        {"a": torch.zeros(2, device="meta")},
    ]
    for tensors in cases:
        assert raised(ours_pt.save, tensors) == raised(real_pt.save, tensors), tensors
    # safetensors fails with a bare KeyError(torch.complex128) here.
    with pytest.raises(ours.SafetensorError, match='Unknown dtype "complex128"'):
        ours_pt.save({"a": torch.zeros(2, dtype=torch.complex128)})


def test_deserialize_matches_safetensors():
    data = real_pt.save({"b": torch.ones(2, dtype=torch.int64), "a": torch.zeros(3)}, {"k": "v"})
    assert sorted(ours.deserialize(data)) == sorted(real.deserialize(data))
    assert sorted(ours.deserialize(bytearray(data))) == sorted(real.deserialize(data))


# Right values where safetensors 0.8.0 scrambles them


def odd_layouts():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    return {
        "fortran": np.asfortranarray(base),
        "transposed": base.T,
        "strided": base[:, ::2],
        "reversed": base[::-1, ::-1],
        "big_endian": base.astype(">f4"),
    }


def test_numpy_layouts_saved_with_their_values(tmp_path):
    arrays = odd_layouts()
    loaded = ours_np.load(ours_np.save(arrays))
    ours_np.save_file(arrays, tmp_path / "o.safetensors")
    from_file = ours_np.load_file(tmp_path / "o.safetensors")
    for k, v in arrays.items():
        np.testing.assert_array_equal(loaded[k], v, err_msg=k)
        np.testing.assert_array_equal(from_file[k], v, err_msg=k)
    # The same file as safetensors writes for the same values in C order.
    assert ours_np.save(arrays) == real_np.save({k: np.ascontiguousarray(v, "<f4") for k, v in arrays.items()})


@pytest.mark.skipif(real.__version__ != "0.8.0", reason="documents safetensors 0.8.0")
def test_safetensors_scrambles_fortran_arrays():
    a = odd_layouts()["fortran"]
    assert not np.array_equal(real_np.load(real_np.save({"a": a}))["a"], a)  # safetensors issue #825
    np.testing.assert_array_equal(ours_np.load(ours_np.save({"a": a}))["a"], a)


# Models with shared tensors


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = self.a


def test_save_model_and_load_model(tmp_path):
    model = Tied()
    ours_pt.save_model(model, tmp_path / "ours.safetensors")
    real_pt.save_model(model, tmp_path / "real.safetensors")
    # safetensors writes metadata keys in random order; ours sorts them.
    ours_bytes, real_bytes = (tmp_path / "ours.safetensors").read_bytes(), (tmp_path / "real.safetensors").read_bytes()
    assert len(ours_bytes) == len(real_bytes) and ours_bytes[192:] == real_bytes[192:]
    with ours.safe_open(tmp_path / "ours.safetensors", framework="pt") as f:
        assert f.metadata() == {"b.bias": "a.bias", "b.weight": "a.weight"}
    other = Tied()
    assert ours_pt.load_model(other, tmp_path / "ours.safetensors") == (set(), [])
    assert torch.equal(other.b.weight, model.a.weight)
    assert ours_pt._remove_duplicate_names(model.state_dict()) == {"a.bias": ["b.bias"], "a.weight": ["b.weight"]}


def test_shared_tensor_helpers_match_safetensors():
    a = torch.zeros(4)
    b = torch.zeros(16)
    cases = [{"B": a[:2], "C": a[2:]}, {"B": a[:2], "C": a[1:]}, {"B": a[:2], "C": a[2:], "D": a[:1]}, {"x": b, "y": b[::4]}]
    for sd in cases:
        assert ours_pt._find_shared_tensors(sd) == real_pt._find_shared_tensors(sd)
        for t in sd.values():
            assert ours_pt._end_ptr(t) == real_pt._end_ptr(t)
            assert ours_pt._is_complete(t) == real_pt._is_complete(t)
            assert (ours_pt.storage_ptr(t), ours_pt.storage_size(t)) == (real_pt.storage_ptr(t), real_pt.storage_size(t))
    assert ours_pt._TYPES["BF16"] is torch.bfloat16


def test_remove_duplicate_names_lists_only_shared_tensors():
    a = torch.arange(8.0)
    cases = [
        {"A": a, "x": torch.ones(1)},  # nothing shared
        {"A": a, "B": a, "x": torch.ones(1)},  # one group
        {},
    ]
    for sd in cases:
        assert dict(ours_pt._remove_duplicate_names(sd)) == dict(real_pt._remove_duplicate_names(sd)), sd
    # A lone view not covering its storage: both refuse.
    lone = {"y": torch.ones(2)[:1]}
    assert raised_or(ours_pt._remove_duplicate_names, lone) == raised_or(real_pt._remove_duplicate_names, lone)


# The switch


def run_python(code: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_install_makes_import_safetensors_ours():
    out = run_python(
        "import deathtensors.safetensors as d; d.install(); "
        "import safetensors, safetensors.torch, safetensors.numpy; "
        "from safetensors.torch import save_file, _find_shared_tensors; "
        "import importlib.metadata as m; "
        "assert safetensors is d and safetensors.torch is d.torch and safetensors.numpy is d.numpy; "
        "assert safetensors.torch.__spec__.name == 'deathtensors.safetensors.torch'; "
        "print(m.version('safetensors'), safetensors.__version__, d.installed())"
    )
    assert out == "0.8.0 0.8.0 True"


@pytest.mark.parametrize("how", ["install", "shim"])
def test_the_native_module_names_import_from_the_drop_in(how):
    real_names = sorted(n for n in dir(real._safetensors_rust) if not n.startswith("__") or n == "__version__")
    code = (
        ("import deathtensors.safetensors as d; d.install(); " if how == "install" else "")
        + "import safetensors._safetensors_rust as r, deathtensors.safetensors as d; "
        + "from safetensors._safetensors_rust import SafetensorError, deserialize, safe_open; "
        + "assert r.SafetensorError is d.SafetensorError and r.safe_open is d.safe_open; "
        + "print(' '.join(sorted(n for n in dir(r) if not n.startswith('__') or n == '__version__')))"
    )
    env = {"PYTHONPATH": ours.SHIM_PATH} if how == "shim" else {}
    assert run_python(code, **env).split() == real_names


def test_install_refuses_after_the_real_one_unless_replacing():
    out = run_python(
        "import safetensors, deathtensors.safetensors as d\n"
        "try:\n    d.install()\nexcept RuntimeError as e:\n    print('refused' if 'already imported' in str(e) else e)\n"
        "d.install(replace=True)\nimport safetensors as s2, safetensors.torch\n"
        "print(s2 is d, safetensors.torch is d.torch)\n"
        "d.uninstall()\nimport safetensors as s3\nprint(s3 is d, s3.__name__)"
    )
    assert out.split() == ["refused", "True", "True", "False", "safetensors"]


def test_shim_on_pythonpath():
    out = run_python(
        "import safetensors, safetensors.torch, deathtensors.safetensors as d; "
        "print(safetensors is d, safetensors.torch is d.torch)",
        PYTHONPATH=ours.SHIM_PATH,
    )
    assert out == "True True"
    assert os.path.isfile(os.path.join(ours.SHIM_PATH, "safetensors", "__init__.py"))


def test_distribution_is_still_the_real_one():
    assert importlib.metadata.version("safetensors") == "0.8.0"
    assert ours.__version__ == "0.8.0"  # the API version, not deathtensors'
    assert deathtensors.__version__ != "0.8.0"


@pytest.mark.parametrize("length", [100_000_000, 100_000_001, 100 * 1024 * 1024])
def test_header_length_cap_is_safetensors_own(length, tmp_path):
    """A header length safetensors refuses (over 100,000,000 bytes) is refused
    by the drop-in too, before any of it is read; one at the cap is refused
    by both only because the file is shorter than it says."""
    import safetensors

    path = tmp_path / "big-header.safetensors"
    path.write_bytes(length.to_bytes(8, "little") + b'{"a":' + b" " * 64)
    with pytest.raises(Exception) as theirs:
        safetensors.safe_open(str(path), framework="np")
    with pytest.raises(Exception) as mine:
        ours.safe_open(str(path), framework="np")
    too_large = "too large" in str(theirs.value)
    assert too_large == (length > 100_000_000), theirs.value
    assert ("100000000" in str(mine.value) or "limit" in str(mine.value)) == too_large, mine.value


def test_saves_are_durable_unless_turned_off(tmp_path, monkeypatch):
    """The drop-in's save_file fsyncs by default; install(durable=False) or
    DEATHTENSORS_DURABLE=0 give safetensors' behaviour (still atomic)."""
    import deathtensors._native as native
    from deathtensors.safetensors import _serialize

    calls = []
    real_save = native.save

    def spy(path, tensors, options):
        calls.append(options.durable)
        return real_save(path, tensors, options)

    monkeypatch.setattr(native, "save", spy)
    t = {"a": np.arange(4, dtype=np.float32)}
    monkeypatch.delenv("DEATHTENSORS_DURABLE", raising=False)
    try:
        ours_np.save_file(t, tmp_path / "a.safetensors")
        monkeypatch.setenv("DEATHTENSORS_DURABLE", "0")
        ours_np.save_file(t, tmp_path / "b.safetensors")
        monkeypatch.setenv("DEATHTENSORS_DURABLE", "1")
        _serialize.set_durable(False)  # what install(durable=False) sets
        ours_pt.save_file({"a": torch.ones(2)}, tmp_path / "c.safetensors")
        _serialize.set_durable(True)
        ours_np.save_file(t, tmp_path / "d.safetensors")
    finally:
        _serialize.set_durable(None)
    assert calls == [True, False, False, True]
    assert ours.durable() is True
    assert np.array_equal(real_np.load_file(str(tmp_path / "b.safetensors"))["a"], t["a"])
    # install(durable=False), in a process where safetensors is not imported yet.
    script = (
        "import deathtensors.safetensors as s; s.install(durable=False); import safetensors; "
        "print(safetensors.durable(), s.durable())"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_masked_arrays_keyword_deserialize_and_the_rust_module():
    import safetensors.numpy as real_np

    import deathtensors.safetensors as dts
    import deathtensors.safetensors.numpy as dts_np

    masked = {"a": np.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])}
    data = dts_np.save(masked)
    assert data == real_np.save(masked)  # the values, as safetensors saves them
    assert dts.deserialize(bytes=data)[0][0] == "a"
    assert dts._safetensors_rust.safe_open is dts.safe_open


def _bytes_read() -> int:
    """Bytes this process has read through read/pread (Linux's rchar)."""
    for line in open("/proc/self/io"):
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts reads through /proc/self/io (Linux)")
def test_get_slice_without_a_mapping_reads_only_the_selection(tmp_path):
    """Issue 59: with backend="pread" (and for URLs) get_slice read the whole
    tensor and sliced it in numpy; it now reads the selection's bounding
    box only, with the same values and errors as the mapped path."""
    import numpy as np
    from deathtensors.safetensors import safe_open
    from deathtensors.safetensors.numpy import save_file

    rng = np.random.default_rng(3)
    big = rng.standard_normal((1024, 4096)).astype(np.float32)  # 16 MiB
    small = rng.integers(0, 100, (7, 5, 3)).astype(np.int16)
    path = tmp_path / "m.safetensors"
    save_file({"big": big, "small": small}, str(path))
    with safe_open(str(path), framework="np", backend="pread") as f, safe_open(str(path), framework="np") as m:
        before = _bytes_read()
        rows = f.get_slice("big")[10:12]
        band = f.get_slice("big")[100:116, 8:40:3]
        read = _bytes_read() - before
        assert np.array_equal(rows, big[10:12]) and np.array_equal(band, big[100:116, 8:40:3])
        # Two rows (32 KiB) and a 16 x 32 box (the band's rows, 16 KiB
        # each): not the 16 MiB tensor, twice.
        assert read < 1 << 20, read
        for index in [(slice(None), 2), (3,), (slice(1, 6, 2), slice(None), slice(0, 3, 2)), (slice(0, 0),), ()]:
            assert np.array_equal(f.get_slice("small")[index], m.get_slice("small")[index]), index
            assert np.array_equal(f.get_slice("small")[index], small[index]), index
        with pytest.raises(Exception) as mapped_error:
            m.get_slice("small")[9]
        with pytest.raises(type(mapped_error.value), match="out of bounds"):
            f.get_slice("small")[9]
