"""A write that fails on a full disk (a 64 MiB tmpfs, mounted by the
``small_disk`` fixture when the tests run as root; skipped otherwise, saying
why) raises ENOSPC naming the file, keeps the old data byte-identical and
leaves nothing it created behind, for every way of writing: dt.save, the
drop-in's save_file, dt.append, TensorBlob appends, the CLI's convert and
dt.save_sharded (a sharded save writes every shard and its index under temp
names and renames them into place only when all are written, so even shards
of the same names as the older checkpoint's stay the older ones). The
distributed StorageWriter's full-disk test is in test_distributed.py."""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import deathtensors as dt
from conftest import snapshot

MIB = 1 << 20


def tensors(mib_each, count, value):
    """``count`` float32 tensors of ``mib_each`` MiB each, filled from ``value``."""
    n = mib_each * MIB // 4
    return {f"layer.{i}.weight": np.full(n, value + i, dtype=np.float32) for i in range(count)}


def assert_enospc(err, where):
    """The error is the OS's ENOSPC, and names the file being written."""
    assert isinstance(err, OSError), repr(err)
    assert err.errno == errno.ENOSPC, repr(err)
    text = str(err)
    assert "No space left on device" in text and str(where) in text, text


def free(disk):
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("layout", ["huggingface", "deathtensors-0.3"])
def test_save_sharded_on_a_full_disk_leaves_nothing_and_the_older_checkpoint_whole(small_disk, layout):
    path = small_disk / ("model" if layout == "huggingface" else "model.dt")
    old = tensors(6, 4, 1.0)
    # 4 shards of 6 MiB: 24 MiB, 40 free.
    dt.save_sharded(path, old, max_shard_bytes=6 * MIB)
    before = snapshot(small_disk)
    index = next(n for n in before if "00001" not in n and ("index" in n or n == "model.dt"))
    free_before = free(small_disk)

    # 4 shards of 12 MiB, of the same names as the old ones: the fourth
    # finds no room, after three were written.
    new = tensors(12, 4, 10.0)
    with pytest.raises(OSError) as info:
        dt.save_sharded(path, new, max_shard_bytes=12 * MIB)
    shard_names = sorted(n for n in before if n != index)
    assert_enospc(info.value, small_disk / shard_names[3])
    # Nothing it wrote is left, nothing it did not write is touched.
    assert snapshot(small_disk) == before
    assert free(small_disk) == free_before
    with dt.open_sharded(small_disk / index) as f:
        got = f.get_tensors("numpy")
    assert set(got) == set(old) and all(np.array_equal(got[k], old[k]) for k in old)

    # The next save that fits replaces the checkpoint and leaves nothing else.
    newer = tensors(8, 4, 20.0)
    dt.save_sharded(path, newer, max_shard_bytes=8 * MIB)
    assert sorted(os.listdir(small_disk)) == sorted(before)
    with dt.open_sharded(small_disk / index) as f:
        got = f.get_tensors("numpy")
    assert all(np.array_equal(got[k], newer[k]) for k in newer)


@pytest.mark.parametrize(
    "options",
    [{}, {"durable": False}, {"checksum": False}, {"compress": True}, {"format": "safetensors", "checksum": False}],
    ids=["default", "not-durable", "no-checksum", "compressed", "safetensors"],
)
def test_save_on_a_full_disk_keeps_the_old_file(small_disk, options):
    path = small_disk / "model.dt"
    old = tensors(20, 1, 1.0)
    dt.save(path, old)
    before = snapshot(small_disk)
    # Random data: compression cannot make it fit.
    big = {"w": np.random.default_rng(0).random(70 * MIB // 4, dtype=np.float32)}
    with pytest.raises(OSError) as info:
        dt.save(path, big, **options)
    assert_enospc(info.value, path)
    assert snapshot(small_disk) == before


def test_drop_in_save_file_on_a_full_disk_keeps_the_old_file(small_disk):
    from deathtensors.safetensors import SafetensorError
    from deathtensors.safetensors.numpy import load_file, save_file

    path = small_disk / "model.safetensors"
    old = tensors(20, 1, 1.0)
    save_file(old, path)
    before = snapshot(small_disk)
    # safetensors' own error type, as safetensors raises it; the OS's error
    # is its cause.
    with pytest.raises(SafetensorError) as info:
        save_file(tensors(50, 1, 5.0), path)
    assert_enospc(info.value.__cause__, path)
    assert "No space left on device" in str(info.value)
    assert snapshot(small_disk) == before
    assert all(np.array_equal(v, old[k]) for k, v in load_file(path).items())


def test_append_on_a_full_disk_keeps_the_old_file(small_disk):
    path = small_disk / "model.dt"
    dt.save(path, tensors(20, 1, 1.0))
    before = snapshot(small_disk)
    # The append streams the old tensors and the new into a new file: 20 +
    # 30 MiB beside the old 20.
    with pytest.raises(OSError) as info:
        dt.append(path, {"extra": np.zeros(30 * MIB // 4, dtype=np.float32)})
    assert_enospc(info.value, path)
    assert snapshot(small_disk) == before


def test_tensor_blob_appends_on_a_full_disk_keep_what_was_committed(small_disk):
    path = small_disk / "blob"
    rows = np.arange(64 * 1024, dtype=np.float32).reshape(16, 4096)  # 16 rows of 16 KiB
    with dt.TensorBlob.open(path, "w", dtype="float32", shape=(4096,), block_size=256, framework="numpy") as b:
        b.write(rows)
    before = snapshot(small_disk)
    big = np.ones((5000, 4096), dtype=np.float32)  # 78 MiB

    def append():
        with dt.TensorBlob.open(path, "a", framework="numpy") as b:
            b.write(big)

    with pytest.raises(OSError) as info:
        append()
    assert info.value.errno == errno.ENOSPC and "No space left on device" in str(info.value), repr(info.value)
    del info
    with dt.TensorBlob.open(path, "r", framework="numpy") as b:
        assert len(b) == 16 and np.array_equal(b[:], rows)
    # The uncommitted blocks the failed append wrote are removed when the
    # collection is next opened for writing (not yet when the append fails:
    # a collection, like a file, keeps what was written for a retried
    # flush); then the directory holds the files it held. The partly
    # filled last block keeps its committed rows (read back above); the
    # room after them, which no committed state counts, held the failed
    # append's rows.
    with dt.TensorBlob.open(path, "a", framework="numpy") as b:
        assert len(b) == 16
    after = snapshot(small_disk)
    assert sorted(after) == sorted(before)
    assert {k: v for k, v in after.items() if "blk-" not in k} == {k: v for k, v in before.items() if "blk-" not in k}
    # A retry that fits.
    with dt.TensorBlob.open(path, "a", framework="numpy") as b:
        b.write(rows)
    with dt.TensorBlob.open(path, "r", framework="numpy") as b:
        assert len(b) == 32 and np.array_equal(b[16:], rows)


def test_cli_convert_on_a_full_disk_keeps_the_old_file(small_disk, tmp_path):
    src = tmp_path / "src.dt"
    dt.save(src, {"w": np.random.default_rng(1).random(50 * MIB // 4, dtype=np.float32)})
    out = small_disk / "model.safetensors"
    dt.save(out, tensors(20, 1, 1.0), format="safetensors", checksum=False)
    before = snapshot(small_disk)
    r = subprocess.run([sys.executable, "-m", "deathtensors", "convert", str(src), str(out)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "No space left on device" in r.stderr and str(out) in r.stderr, r.stderr
    assert snapshot(small_disk) == before


def test_cli_convert_of_a_sharded_checkpoint_on_a_full_disk_leaves_nothing(small_disk, tmp_path):
    def source(name, mib, value):
        dt.save_sharded(tmp_path / name, tensors(mib, 4, value), max_shard_bytes=mib * MIB)
        return tmp_path / f"{name}.deathtensors.index.json"

    out = small_disk / "model.safetensors.index.json"
    convert = [sys.executable, "-m", "deathtensors", "convert", "--format", "safetensors"]
    r = subprocess.run([*convert, str(source("small", 6, 1.0)), str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    before = snapshot(small_disk)
    assert len(before) == 5
    # The same four shard names, 48 MiB: the fourth finds no room.
    r = subprocess.run([*convert, str(source("big", 12, 10.0)), str(out)], capture_output=True, text=True)
    assert r.returncode != 0
    assert "No space left on device" in r.stderr, r.stderr
    assert snapshot(small_disk) == before
