"""bintensors 0.2 files against the real wheel (`bintensors==0.2.0`, in the
test venv: its import name is its own): what it writes we read, what we write
(`dt.save(format="bintensors")`, `convert --format bintensors` from the other
formats, on the command line and through the Python API) it reads, byte for
byte what it writes for the same tensors, and hostile files are refused with
an error that says what is wrong."""

import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch

import bintensors
import bintensors.numpy as btnp
import bintensors.torch as btpt
import deathtensors as dt
from conftest import TESTDATA

assert bintensors.__version__ == "0.2.0"

# Every dtype bintensors has, as numpy dtypes (ml_dtypes for bf16 and f8).
NUMPY_DTYPES = {
    "BOOL": np.dtype(bool),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "I16": np.dtype(np.int16),
    "U16": np.dtype(np.uint16),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I32": np.dtype(np.int32),
    "U32": np.dtype(np.uint32),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "I64": np.dtype(np.int64),
    "U64": np.dtype(np.uint64),
}
# The dtypes bintensors' torch writer saves (it has no torch.uint16/32/64).
TORCH_DTYPES = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3": torch.float8_e4m3fn,
    "I16": torch.int16,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I32": torch.int32,
    "F32": torch.float32,
    "F64": torch.float64,
    "I64": torch.int64,
}
SHAPES = [(), (0,), (3,), (2, 3), (1, 0, 4), (2, 1, 3, 2)]


def random_array(rng, dtype, shape):
    raw = rng.integers(0, 256, size=int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, dtype=np.uint8)
    if dtype == np.dtype(bool):
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def random_dict(seed, dtypes=NUMPY_DTYPES):
    """A dict of random arrays: every dtype at least once, names that sort
    apart from the writer's dtype order, random shapes."""
    rng = np.random.default_rng(seed)
    out = {}
    for code, dtype in dtypes.items():
        for k in range(int(rng.integers(1, 3))):
            name = f"{'zyxw'[int(rng.integers(0, 4))]}.{code.lower()}.{k}"
            out[name] = random_array(rng, dtype, SHAPES[int(rng.integers(0, len(SHAPES)))])
    return out


def random_metadata(seed):
    rng = np.random.default_rng(seed)
    return [None, {}, {"format": "np", "é": "ünï", "": "empty key", "z": str(seed)}][int(rng.integers(0, 3))]


def raw(a):
    """The little-endian bytes of an array or tensor."""
    if isinstance(a, torch.Tensor):
        return a.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
    return np.ascontiguousarray(a).tobytes()


def check_reads(path, tensors, metadata):
    with dt.open(path) as f:
        assert f.format == "bintensors"
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata() == (metadata or {})
        for name, want in tensors.items():
            got = f.get_tensor(name, framework="numpy")
            assert got.shape == tuple(want.shape), name
            assert raw(got) == raw(want), name
            t = f.get_tensor(name, framework="torch")
            assert raw(t) == raw(want), name
        assert f.verify() is False  # no digest to check: structure only


def cli(*args):
    return subprocess.run([sys.executable, "-m", "deathtensors", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("seed", range(12))
def test_numpy_files_the_wheel_writes_read_back(tmp_path, seed):
    tensors, metadata = random_dict(seed), random_metadata(seed)
    path = tmp_path / "m.bt"
    btnp.save_file(tensors, str(path), metadata=metadata)
    check_reads(path, tensors, metadata)


@pytest.mark.parametrize("seed", range(6))
def test_torch_files_the_wheel_writes_read_back(tmp_path, seed):
    rng = np.random.default_rng(seed)
    tensors = {}
    for code, dtype in TORCH_DTYPES.items():
        a = random_array(rng, NUMPY_DTYPES[code], SHAPES[int(rng.integers(0, len(SHAPES)))])
        data = a.tobytes()
        t = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
        tensors[f"t.{code.lower()}"] = t.reshape(a.shape)
    path = tmp_path / "m.bt"
    btpt.save_file(tensors, str(path), metadata={"framework": "pt"})
    with dt.open(path) as f:
        assert f.format == "bintensors" and f.metadata() == {"framework": "pt"}
        for name, want in tensors.items():
            got = f.get_tensor(name, framework="torch")
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert raw(got) == raw(want), name


@pytest.mark.parametrize("seed", range(12))
def test_we_write_what_the_wheel_writes_byte_for_byte(tmp_path, seed):
    tensors, metadata = random_dict(seed), random_metadata(seed)
    ours = tmp_path / "ours.bt"
    dt.save(ours, tensors, global_metadata=metadata, format="bintensors")
    theirs = btnp.save(tensors, metadata=metadata)
    assert ours.read_bytes() == theirs
    # The wheel reads it: metadata (None stays None), and every value (torch
    # reads every dtype; the wheel's numpy reader has no F8).
    with bintensors.safe_open(str(ours), "pt") as f:
        assert f.metadata() == metadata
        assert sorted(f.keys()) == sorted(tensors)
        for name, want in tensors.items():
            assert raw(f.get_tensor(name)) == raw(want), name
    no_f8 = {k: v for k, v in tensors.items() if not k.split(".")[1].startswith("f8")}
    path = tmp_path / "no_f8.bt"
    dt.save(path, no_f8, format="bintensors")
    loaded = btnp.load_file(str(path))
    for name, want in no_f8.items():
        assert raw(loaded[name]) == raw(want), name


def test_metadata_none_and_empty_are_different_files(tmp_path):
    for metadata in (None, {}):
        path = tmp_path / f"{metadata is None}.bt"
        dt.save(path, {"w": np.ones(2, np.float32)}, global_metadata=metadata, format="bintensors")
        assert path.read_bytes() == btnp.save({"w": np.ones(2, np.float32)}, metadata=metadata)
        with bintensors.safe_open(str(path), "np") as f:
            assert f.metadata() == metadata


@pytest.mark.parametrize("source", ["deathtensors", "safetensors"])
def test_convert_to_bintensors_gives_the_wheels_bytes(tmp_path, source):
    tensors = random_dict(100)
    metadata = {"model": "random"} if source == "safetensors" else None
    src = tmp_path / f"src.{'dt' if source == 'deathtensors' else 'safetensors'}"
    dt.save(src, tensors, global_metadata=metadata, format=source, checksum=source == "deathtensors")
    want = btnp.save(tensors, metadata=metadata)
    # The command line (recognises the input by content, the output by --format).
    out = tmp_path / "cli-out"
    r = cli("convert", src, out, "--format", "bintensors")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == want
    # The Python API: open any format, save as bintensors.
    with dt.open(src) as f:
        loaded = {k: f.get_tensor(k, framework="numpy") for k in f.keys()}
        meta = f.metadata() or None
    api = tmp_path / "api.bt"
    dt.save(api, loaded, global_metadata=meta, format="bintensors")
    assert api.read_bytes() == want
    # And back: bintensors to the other formats, on the command line.
    back = tmp_path / f"back.{'dt' if source == 'deathtensors' else 'safetensors'}"
    r = cli("convert", out, back)
    assert r.returncode == 0, r.stderr
    r = cli("diff", src, back)
    assert r.returncode == 0 and r.stdout.startswith("identical"), r.stdout + r.stderr


def test_the_cli_inspects_verifies_and_diffs_bintensors_files(tmp_path):
    tensors = random_dict(7)
    path = tmp_path / "model.bin"  # recognised by content, not by extension
    btnp.save_file(tensors, str(path), metadata={"k": "v"})
    doc = json.loads(cli("inspect", "--json", path).stdout)
    assert doc["format"] == "bintensors" and doc["metadata"] == {"k": "v"}
    assert len(doc["tensors"]) == len(tensors)
    assert cli("verify", "--allow-missing", path).returncode == 0
    other = tmp_path / "other.dt"
    assert cli("convert", path, other).returncode == 0
    assert cli("diff", path, other).returncode == 0


def test_what_bintensors_cannot_hold_is_refused_naming_the_tensor(tmp_path):
    with pytest.raises(dt.DeathTensorsError, match=r'tensor "c".*bintensors files cannot store dtype C64'):
        dt.save(tmp_path / "c.bt", {"c": np.zeros(2, np.complex64)}, format="bintensors")
    assert not (tmp_path / "c.bt").exists()


def invalid_bintensors():
    manifest = json.loads((TESTDATA / "invalid/manifest.json").read_text())["files"]
    return sorted((name, e) for name, e in manifest.items() if name.startswith("bt-"))


# What each hostile file's error must say (a word of its ErrorKind's message).
SAYS = {
    "InvalidBintensors": "invalid bintensors header",
    "Truncated": "truncated",
    "LimitExceeded": "exceeds the limit",
    "UnexpectedGap": "hole in the data blob",
    "Overlap": "overlaps",
    "OffsetsReversed": "reversed",
    "DuplicateKey": "duplicate key",
    "UnownedBytes": "belong to no tensor",
    "OffsetOutOfBounds": "past the",
    "ByteLengthMismatch": "dtype and shape need",
    "Overflow": "overflow",
    "UnknownDtype": "unknown dtype",
    "UnrecognizedFormat": "not a deathtensors, safetensors or bintensors file",
    "InvalidUtf8": "not valid UTF-8",
    "EmptyName": "empty tensor name",
    "ControlCharacterInName": "control character",
}


@pytest.mark.parametrize("name,entry", invalid_bintensors(), ids=[n for n, _ in invalid_bintensors()])
def test_hostile_files_are_refused_saying_what_is_wrong(name, entry):
    if entry.get("limits"):
        pytest.skip("needs limits other than the defaults")
    path = TESTDATA / "invalid" / name
    with pytest.raises(dt.FormatError) as e:
        dt.open(path)
    message = str(e.value)
    assert SAYS[entry["kind"]] in message, message
    assert "\n" not in message


def test_hostile_files_the_wheel_reads_are_only_those_we_refuse_on_purpose():
    """Our extra strictness (docs/FORMAT.md 14.2, rules 6 to 9) is all that
    separates us from the wheel: every other hostile file it refuses too."""
    ours_only = {"InvalidBintensors", "EmptyName", "ControlCharacterInName", "LimitExceeded", "DuplicateKey"}
    for name, entry in invalid_bintensors():
        try:
            with bintensors.safe_open(str(TESTDATA / "invalid" / name), "np") as f:
                f.keys()
        except Exception:
            continue
        assert entry["kind"] in ours_only, f"{name}: bintensors reads it, and we refuse it with {entry['kind']}"
