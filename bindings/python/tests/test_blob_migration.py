"""TensorBlob on tensorblob 0.3.0's own directories (written here by the real
tensorblob): read identically, refused to writers, converted, extended
from, and damaged copies refused clearly."""

import json
import os
import shutil

import pytest

import deathtensors as dt
from blob_pair import DT, TB, bits, torch

# --- 4. migration from tensorblob directories -------------------------------


def _random_rows(gen, dtype, n, shape):
    if dtype == torch.bool:
        return torch.randint(0, 2, (n, *shape), generator=gen).bool()
    if dtype.is_complex:
        return torch.randn((n, *shape), generator=gen, dtype=dtype)
    if dtype.is_floating_point and dtype.itemsize <= 2:  # any bit pattern, NaNs included
        raw = {1: torch.uint8, 2: torch.int16}[dtype.itemsize]
        info = torch.iinfo(raw)
        return torch.randint(info.min, info.max + 1, (n, *shape), generator=gen).to(raw).view(dtype)
    if dtype.is_floating_point:
        return torch.randn((n, *shape), generator=gen, dtype=dtype)
    return torch.randint(-100, 100, (n, *shape), generator=gen).to(dtype)


def _tb_sample(path, dtype, shape, block_size, n, after=None):
    gen = torch.Generator().manual_seed(n * 31 + block_size)
    with TB.open(path, "w", dtype=dtype, shape=shape, block_size=block_size) as b:
        b.write(_random_rows(gen, dtype, n, shape))
        if after == "truncate":
            b.truncate(n * 2 // 3)
        elif after == "truncate0":
            b.truncate(0)
            b.write(_random_rows(gen, dtype, 3, shape))
        elif after == "overwrite":
            b.seek(1)
            b.write(_random_rows(gen, dtype, 2, shape))
    if after == "append":
        with TB.open(path, "a") as b:
            b.write(_random_rows(gen, dtype, 4, shape))
    if after == "extend":
        other = path.with_name(path.name + ".other")
        with TB.open(other, "w", dtype=dtype, shape=shape, block_size=block_size) as o:
            o.write(_random_rows(gen, dtype, n + 1, shape))
        with TB.open(path, "a") as b, TB.open(other, "r") as o:
            b.extend(o, maintain_order=False)


TB_SAMPLES = {
    "f32": (torch.float32, (4, 3), 5, 13, None),
    "bf16": (torch.bfloat16, (4, 3), 5, 13, None),
    "i64-scalar": (torch.int64, (), 4, 6, None),
    "bool": (torch.bool, (3,), 2, 5, None),
    "fp8": (torch.float8_e4m3fn, (2,), 3, 7, None),
    "c64": (torch.complex64, (2,), 4, 9, None),
    "f16-bs1": (torch.float16, (1,), 1, 3, None),
    "u8-default-bs": (torch.uint8, (5,), 8192, 10, None),
    "empty": (torch.float32, (2,), 3, 0, None),
    "f32-truncated": (torch.float32, (4, 3), 5, 10, "truncate"),
    "i32-truncate0": (torch.int32, (2,), 2, 5, "truncate0"),
    "f64-overwritten": (torch.float64, (2,), 3, 6, "overwrite"),
    "i16-appended": (torch.int16, (2,), 3, 4, "append"),
    "f32-unordered-extend": (torch.float32, (2,), 4, 6, "extend"),
}


@pytest.fixture(scope="module")
def tb_dirs(tmp_path_factory):
    """name -> (tensorblob directory, its rows as tensorblob reads them,
    tensorblob's (dtype, shape, block_size))."""
    root = tmp_path_factory.mktemp("tensorblob")
    out = {}
    for name, (dtype, shape, bs, n, after) in TB_SAMPLES.items():
        path = root / name
        _tb_sample(path, dtype, shape, bs, n, after)
        with TB.open(path, "r") as b:
            out[name] = path, b[:], (b.dtype, b.shape, b.block_size)
    return out


@pytest.mark.parametrize("name", list(TB_SAMPLES))
def test_tensorblob_directories_read_identically(tb_dirs, name):
    path, expected, (dtype, shape, bs) = tb_dirs[name]
    before = sorted(os.listdir(path))
    with DT.open(path, "r") as b:
        assert (b.dtype, b.shape, b.block_size, len(b)) == (dtype, shape, bs, len(expected))
        assert expected.dtype == b[:].dtype and tuple(b[:].shape) == tuple(expected.shape)
        assert torch.equal(bits(b[:]), bits(expected))
        for i in range(len(expected)):
            assert torch.equal(bits(b[i]), bits(expected[i])), i
        assert torch.equal(bits(b[::-2]), bits(expected.flip(0)[::2]))
        assert torch.equal(bits(b.read()), bits(expected)) and b.tell() == len(expected)
        b.seek(0)
        assert all(torch.equal(bits(r), bits(e)) for r, e in zip(b, expected))
        assert not b.refresh()
    with DT.open(path, "r", framework="numpy") as b:
        assert b[:].tobytes() == bits(expected).numpy().tobytes()
    assert sorted(os.listdir(path)) == before  # a reader writes nothing


@pytest.mark.parametrize("mode", ["r+", "a", "a+", "w", "w+"])
def test_tensorblob_directories_refuse_writers(tb_dirs, mode):
    path, expected, (dtype, shape, bs) = tb_dirs["f32"]
    before = sorted(os.listdir(path))
    with pytest.raises(dt.DeathTensorsError, match="tensorblob.*convert"):
        DT.open(path, mode, dtype=torch.float32, shape=shape)
    assert sorted(os.listdir(path)) == before
    with TB.open(path, "r") as b:
        assert torch.equal(b[:], expected)


@pytest.mark.parametrize("mode", ["w", "w+"])
def test_tensorblob_directories_refuse_w_without_dtype_clearly(tb_dirs, mode):
    path = tb_dirs["f32"][0]
    with pytest.raises(dt.DeathTensorsError, match="tensorblob"):
        DT.open(path, mode)


@pytest.mark.parametrize("name", ["f32", "bf16", "fp8", "i64-scalar", "empty", "f32-truncated",
                                  "f32-unordered-extend"])
@pytest.mark.parametrize("block_size", [None, 2])
def test_convert_tensorblob_directories(tb_dirs, tmp_path, name, block_size):
    src, expected, (dtype, shape, bs) = tb_dirs[name]
    dst = tmp_path / "converted"
    assert DT.convert(src, dst, block_size=block_size) == len(expected)
    assert (dst / "collection.json").is_file()
    with DT.open(dst, "r") as b:
        assert (b.dtype, b.shape, b.block_size, len(b)) == (dtype, shape, block_size or bs, len(expected))
        assert torch.equal(bits(b[:]), bits(expected))
        assert b.verify() == len(expected) // b.block_size  # the digests of full blocks
    with DT.open(dst, "a") as b:  # ours now: writable
        b.write(expected[:1])
    with DT.open(dst, "r") as b:
        assert len(b) == len(expected) + (1 if len(expected) else 0)
    with TB.open(src, "r") as b:  # the source is untouched
        assert torch.equal(bits(b[:]), bits(expected))


def test_extend_from_tensorblob(tb_dirs, tmp_path):
    src, expected, (dtype, shape, bs) = tb_dirs["bf16"]
    with TB.open(src, "r") as theirs, DT.open(src, "r") as reader:
        with DT.open(tmp_path / "c", "w", dtype=dtype, shape=shape, block_size=bs) as b:
            b.write(expected[:3])
            b.extend(theirs)  # any object with len and slicing
            b.extend(reader, maintain_order=False)  # whole blocks copied from the tensorblob directory
    with DT.open(tmp_path / "c", "r") as b:
        # 3 + 13 rows: 3 full blocks of 5, tensorblob's 2 full blocks, our tail row, tensorblob's 3.
        want = torch.cat([expected[:3], expected[:12], expected[:10], expected[12:13], expected[10:]])
        assert len(b) == 29 and torch.equal(bits(b[:]), bits(want))


def _stat(path):
    return json.loads((path / ".stat").read_text())


def _edit_json(path, **changes):
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))


def _damage(d, kind):
    """Damages the tensorblob directory `d` (13 float32 rows of (4, 3) in 3
    blocks of 5); returns what the error must name."""
    blocks = _stat(d)["bds"]
    match kind:
        case "bad JSON in .stat":
            (d / ".stat").write_text('{"len": 13, "bds": [')
            return ".stat"
        case "bad JSON in .conf":
            (d / ".conf").write_text("{nope")
            return ".conf"
        case "len past the blocks":
            _edit_json(d / ".stat", len=16)
            return ".stat"
        case "len not an int":
            _edit_json(d / ".stat", len="13")
            return ".stat"
        case "block name escaping":
            _edit_json(d / ".stat", bds=["../x", *blocks[1:]])
            return ".stat"
        case "unknown dtype":
            _edit_json(d / ".conf", dtype="notadtype")
            return "notadtype"
        case "float block_size":
            _edit_json(d / ".conf", block_size=5.5)
            return ".conf"
        case "missing block file":
            os.remove(d / blocks[1])
            return blocks[1]
        case "short block file":
            os.truncate(d / blocks[2], 100)
            return blocks[2]
        case "empty block file":
            os.truncate(d / blocks[0], 0)
            return blocks[0]
    raise AssertionError(kind)


DAMAGE = ["bad JSON in .stat", "bad JSON in .conf", "len past the blocks", "len not an int", "block name escaping",
          "unknown dtype", "float block_size", "missing block file", "short block file", "empty block file"]


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_tensorblob_directories_give_clear_errors(tb_dirs, tmp_path, damage):
    src, expected, _ = tb_dirs["f32"]
    d = tmp_path / "damaged"
    shutil.copytree(src, d)
    names = _damage(d, damage)
    with pytest.raises((dt.DeathTensorsError, OSError)) as e:
        b = DT.open(d, "r")
        # Reading may be what finds it: rows before the damaged block are still right.
        for i in range(len(b)):
            assert torch.equal(b[i], expected[i]), f"row {i} is wrong"
        b[:]
    assert names in str(e.value), str(e.value)
    with pytest.raises((dt.DeathTensorsError, OSError)):
        DT.convert(d, tmp_path / "out")


def test_failed_convert_leaves_no_collection(tb_dirs, tmp_path):
    d = tmp_path / "damaged"
    shutil.copytree(tb_dirs["f32"][0], d)
    os.remove(d / _stat(d)["bds"][1])
    with pytest.raises(dt.DeathTensorsError):
        DT.convert(d, tmp_path / "out")
    assert not (tmp_path / "out" / "collection.json").exists(), os.listdir(tmp_path / "out")


def test_missing_tensorblob_block_is_not_blamed_on_a_commit(tb_dirs, tmp_path):
    d = tmp_path / "damaged"
    shutil.copytree(tb_dirs["f32"][0], d)
    os.remove(d / _stat(d)["bds"][1])
    with DT.open(d, "r") as b, pytest.raises(dt.DeathTensorsError) as e:
        b[:]
    assert "commit" not in str(e.value) and "refresh" not in str(e.value), str(e.value)
