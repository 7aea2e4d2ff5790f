"""TensorBlob across processes: one writer at a time (locks), readers that
only ever see committed prefixes while a writer appends, and zero-copy views
of committed rows."""

import itertools
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import deathtensors as dt
from blob_pair import DT, rows, torch
from conftest import mappings_of

# --- 5. one writer at a time ------------------------------------------------

HOLD_SCRIPT = r"""
import sys, torch, deathtensors as dt
b = dt.TensorBlob.open(sys.argv[1], "a")
b.write(torch.arange(3, dtype=torch.int64) + 100)
b.flush()
b.write(torch.arange(2, dtype=torch.int64) + 200)  # never committed
print("holding", flush=True)
if sys.stdin.readline().strip() == "close":
    b.close()
    print("closed", flush=True)
"""

TRY_SCRIPT = r"""
import sys, deathtensors as dt
for mode in sys.argv[2:]:
    try:
        dt.TensorBlob.open(sys.argv[1], mode, framework="numpy").close()
        print(mode, "opened")
    except dt.LockedError as e:
        print(mode, "LockedError", "writer.lock" in str(e))
with dt.TensorBlob.open(sys.argv[1], "r", framework="numpy") as r:
    print("reader", len(r))
"""


def _collection(path, n=4):
    with DT.open(path, "w", dtype=torch.int64, shape=(), block_size=2) as b:
        b.write(torch.arange(n))


def _holding_writer(path):
    """A collection of 4 rows at `path`, and a child process that holds its
    writer lock with 3 rows committed and 2 not, until told "close"."""
    _collection(path)
    child = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "holding"
    return child


def test_second_writer_in_this_process_is_locked_out(tmp_path):
    path = tmp_path / "c"
    _collection(path)
    w = DT.open(path, "a")
    w.write(torch.tensor([9]))
    for mode in ["a", "r+", "a+", "w", "w+"]:
        with pytest.raises(dt.LockedError, match="writer.lock") as e:
            DT.open(path, mode)
        assert isinstance(e.value, OSError) and isinstance(e.value, dt.DeathTensorsError)
        assert f"process {os.getpid()}" in str(e.value)
    with DT.open(path, "r") as r:  # readers need no lock, and see the last commit
        assert r[:].tolist() == [0, 1, 2, 3]
    w.close()
    with DT.open(path, "a") as w2:
        assert len(w2) == 5
        w2.write(torch.tensor([10]))
    assert DT.open(path, "r")[:].tolist() == [0, 1, 2, 3, 9, 10]


def test_writer_in_another_process_locks_this_one_out(tmp_path):
    path = tmp_path / "c"
    child = _holding_writer(path)
    try:
        with pytest.raises(dt.LockedError, match="writer.lock") as e:
            DT.open(path, "a")
        assert f"process {child.pid}" in str(e.value)
        with DT.open(path, "r") as r:
            assert r[:].tolist() == [0, 1, 2, 3, 100, 101, 102]
        child.stdin.write("close\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
    finally:
        child.stdin.close()
        assert child.wait(timeout=30) == 0
    with DT.open(path, "a") as w:
        assert w[:].tolist() == [0, 1, 2, 3, 100, 101, 102, 200, 201]


def test_this_process_locks_another_out(tmp_path):
    path = tmp_path / "c"
    _collection(path)
    w = DT.open(path, "r+")
    w.write(torch.tensor([5, 6, 7, 8, 9]))
    try:
        out = subprocess.run([sys.executable, "-c", TRY_SCRIPT, str(path), "a", "w+", "r+"], capture_output=True,
                             text=True, timeout=60)
        assert out.stdout.splitlines() == ["a LockedError True", "w+ LockedError True", "r+ LockedError True",
                                           "reader 4"], out.stderr
    finally:
        w.close()
    with DT.open(path, "a") as w:  # after close, the next writer
        assert w[:].tolist() == [5, 6, 7, 8, 9]


def test_a_killed_writer_leaves_its_last_commit_and_the_lock(tmp_path):
    path = tmp_path / "c"
    child = _holding_writer(path)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    child.stdin.close()
    child.stdout.close()
    with DT.open(path, "a") as w:  # the OS released the lock with the process
        assert w[:].tolist() == [0, 1, 2, 3, 100, 101, 102]
        blocks = {os.path.basename(b[0]) for b in w.blocks()}
        assert all(b[3] for b in w.blocks())
    leftovers = {f for f in os.listdir(path) if f.startswith("blk-")} - blocks
    assert not leftovers, f"uncommitted block files were not cleaned: {leftovers}"


# --- 6. readers while a writer appends -------------------------------------

WRITER_SCRIPT = r"""
import sys, time, torch, deathtensors as dt

def rows(start, count):
    i = torch.arange(start, start + count, dtype=torch.int64)[:, None]
    return i * torch.tensor([1, -1, 7])

path, plan = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
b = dt.TensorBlob.open(path, "r+")
n = len(b)
for k, count in enumerate(plan):
    half = count // 2
    b.seek(n)
    b.write(rows(n, half))
    time.sleep(0.001)  # a reader may look now: these rows are not committed
    b.write(rows(n + half, count - half))
    if k % 4 == 3 and n:
        # Rewrite committed rows with the same values: copy on write, and the
        # replaced block files are deleted after the commit.
        b.seek(max(0, n - 3))
        b.write(rows(max(0, n - 3), min(3, n)))
    b.flush()
    n += count
    time.sleep(0.002)
b.close()
"""


def test_readers_see_only_committed_prefixes(tmp_path):
    path = tmp_path / "c"
    with DT.open(path, "w", dtype=torch.int64, shape=(3,), block_size=5):
        pass
    plan = [(k * 7) % 9 + 1 for k in range(60)]
    committed = set(itertools.accumulate(plan, initial=0))
    writer = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(path), ",".join(map(str, plan))],
                              stderr=subprocess.PIPE, text=True)
    seen, gone, reader, k, failures = set(), 0, None, 0, []
    deadline = time.monotonic() + 40
    try:
        while True:
            finished = writer.poll() is not None
            k += 1
            try:
                if reader is None or k % 2:
                    if reader is not None:
                        reader.close()
                    reader = DT.open(path, "r")
                else:
                    reader.refresh()
                n = len(reader)
                assert n in committed, f"a reader saw {n} rows, not a committed length"
                got = reader[:] if k % 3 else (reader.seek(0), reader.read())[1]
                assert torch.equal(got, rows(0, n, width=3)), f"wrong rows in a state of {n} rows"
                if n:
                    assert torch.equal(reader[n - 1], rows(n - 1, 1, width=3)[0])
                seen.add(n)
            except dt.DeathTensorsError as e:
                gone += 1
                failures.append(str(e))
                reader = None
            if finished or time.monotonic() > deadline:
                break
    finally:
        if reader is not None:
            reader.close()
        if writer.poll() is None:
            writer.kill()
        err = writer.communicate(timeout=30)[1]
    assert writer.returncode == 0, err
    assert max(seen) == sum(plan)
    assert len(seen) >= 3, f"the reader saw only {sorted(seen)}: no overlap with the writer"
    assert gone == 0, f"{gone} of {k} opens or reads failed: {failures[:3]}"


OVERWRITER_SCRIPT = r"""
import sys, time, numpy as np, deathtensors as dt

path, log_path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
log = open(log_path, "a", buffering=1)
b = dt.TensorBlob.open(path, "r+", framework="numpy")
n, salt, deadline = len(b), 0, time.monotonic() + seconds
while time.monotonic() < deadline:
    salt += 1
    if salt % 3 == 0:
        n += 3  # and append
    i = np.arange(n, dtype=np.int64)[:, None]
    # Every row rewritten: each commit replaces every block file and removes
    # the old ones.
    b.seek(0)
    b.write(np.concatenate([i, -i, np.full_like(i, salt)], axis=1))
    b.flush()
    log.write(f"{n} {salt}\n")
b.close()
log.write("DONE\n")
"""

SNAPSHOT_READER_SCRIPT = r"""
import sys, time, numpy as np, deathtensors as dt

path, stop_after, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
opens = reads = failures = 0
seen, errors, blob, k = set(), [], None, seed
deadline = time.monotonic() + stop_after
while time.monotonic() < deadline:
    k += 1
    try:
        if blob is None or k % 3 == 0:
            if blob is not None:
                blob.close()
            blob = dt.TensorBlob.open(path, "r", framework="numpy")
            opens += 1
        else:
            blob.refresh()
        got = blob[:] if k % 2 else blob[np.arange(len(blob))]
        reads += 1
        n = len(got)
        salt = int(got[0, 2]) if n else 0
        i = np.arange(n, dtype=np.int64)
        consistent = (got[:, 0] == i).all() and (got[:, 1] == -i).all() and (got[:, 2] == salt).all()
        if not consistent:
            raise AssertionError(f"rows of more than one commit in a read of {n} rows")
        seen.add((n, salt))
    except Exception as e:  # counted and reported: the test fails on any
        failures += 1
        errors.append(f"{type(e).__name__}: {e}")
        blob = None
print(opens, reads, failures)
for n, salt in sorted(seen):
    print("S", n, salt)
for e in errors[:3]:
    print("E", e)
"""


def test_reader_processes_always_get_a_committed_snapshot(tmp_path):
    """One writer process rewriting every row and appending, committing as
    fast as it can; three reader processes opening, refreshing and reading
    in a loop for a bounded time. No open, refresh or read fails, and every
    read is exactly one committed state."""
    path, log = tmp_path / "c", tmp_path / "commits.log"
    with DT.open(path, "w", dtype="int64", shape=(3,), block_size=4, framework="numpy") as b:
        i = np.arange(6, dtype=np.int64)[:, None]
        b.write(np.concatenate([i, -i, np.zeros_like(i)], axis=1))
    seconds = 6.0
    writer = subprocess.Popen([sys.executable, "-c", OVERWRITER_SCRIPT, str(path), str(log), str(seconds)],
                              stderr=subprocess.PIPE, text=True)
    readers = [
        subprocess.Popen([sys.executable, "-c", SNAPSHOT_READER_SCRIPT, str(path), str(seconds), str(k)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for k in range(3)
    ]
    try:
        outs = [r.communicate(timeout=120) for r in readers]
        assert writer.wait(timeout=120) == 0, writer.stderr.read()
    finally:
        for p in [writer, *readers]:
            if p.poll() is None:
                p.kill()
                p.wait()
    committed = {(6, 0)} | {tuple(map(int, l.split())) for l in log.read_text().splitlines() if l != "DONE"}
    assert log.read_text().endswith("DONE\n")
    totals = [0, 0, 0]
    for (out, err), r in zip(outs, readers):
        assert r.returncode == 0, err
        lines = out.splitlines()
        counts = list(map(int, lines[0].split()))
        totals = [a + b for a, b in zip(totals, counts)]
        errors = [l for l in lines if l.startswith("E ")]
        assert counts[2] == 0, f"{counts[2]} failures: {errors}"
        states = {(int(n), int(s)) for _, n, s in (l.split() for l in lines if l.startswith("S "))}
        assert states <= committed, f"states never committed: {sorted(states - committed)[:5]}"
    print(f"\n{len(committed)} commits; readers: {totals[0]} opens, {totals[1]} reads, {totals[2]} failures")
    assert len(committed) > 20 and totals[1] > 20, (len(committed), totals)


# --- 7. zero-copy views -----------------------------------------------------


def test_views_are_read_only_zero_copy_and_committed_only(tmp_path):
    path = tmp_path / "c"
    ref = rows(0, 7, width=3)
    w = DT.open(path, "w+", dtype=torch.int64, shape=(3,), block_size=3, framework="numpy")
    w.write(ref[:5])
    w.flush()
    w.write(ref[5:])
    block0 = w.blocks()[0][0]
    before = mappings_of(block0)
    v = w.view(slice(0, 3))
    assert isinstance(v, np.ndarray) and not v.flags.writeable and not v.flags.owndata
    assert np.array_equal(v, ref[:3].numpy())
    assert mappings_of(block0) == before + 1  # the block file itself is mapped: no copy
    with pytest.raises(ValueError):
        v[0, 0] = 1
    one = w.view(-4)
    assert one.shape == (3,) and not one.flags.writeable and np.array_equal(one, ref[3].numpy())
    assert w.view(slice(4, 4)).shape == (0, 3)
    for bad, exc in [(5, dt.DeathTensorsError), (-1, dt.DeathTensorsError), (slice(4, 6), dt.DeathTensorsError),
                     (slice(2, 4), dt.DeathTensorsError), (slice(0, 3, 2), ValueError), (7, IndexError)]:
        with pytest.raises(exc) as e:
            w.view(bad)
        if bad in (5, -1):
            assert "not committed" in str(e.value) and "flush" in str(e.value)
    w.flush()
    assert np.array_equal(w.view(5), ref[5].numpy())
    # A view is a snapshot: an overwrite copies the block, and the old file,
    # deleted after the commit, stays mapped until the view goes.
    w.seek(0)
    w.write(-ref[:3])
    w.close()
    assert not os.path.exists(block0)
    assert np.array_equal(v, ref[:3].numpy())
    with DT.open(path, "r") as r:
        assert np.array_equal(r[0:3], -ref[:3])
    t = DT.open(path, "r", framework="torch")
    tv = t.view(slice(3, 6))
    t.close()  # a view outlives its blob
    assert isinstance(tv, torch.Tensor) and tv.dtype == torch.int64 and torch.equal(tv, ref[3:6])


def test_views_unmap_when_dropped(tmp_path):
    import gc

    with DT.open(tmp_path / "c", "w", dtype=torch.float32, shape=(2,), block_size=4) as w:
        w.write(torch.ones(4, 2))
    with DT.open(tmp_path / "c", "r", framework="numpy") as r:
        block = r.blocks()[0][0]
        views = [r.view(slice(0, 4)) for _ in range(3)]
        assert mappings_of(block) == 3 and all(np.array_equal(v, np.ones((4, 2), np.float32)) for v in views)
        del views
        gc.collect()
        assert mappings_of(block) == 0


def test_reader_view_of_rows_its_writer_has_not_committed(tmp_path):
    path = tmp_path / "c"
    w = DT.open(path, "w", dtype=torch.float32, shape=(2,), block_size=4)
    w.write(torch.ones(3, 2))
    w.flush()
    w.write(torch.full((1, 2), 2.0))
    with DT.open(path, "r") as r:
        assert len(r) == 3
        assert torch.equal(r.view(slice(0, 3)), torch.ones(3, 2))
        with pytest.raises(IndexError):
            r.view(3)
        w.flush()
        assert r.refresh() and len(r) == 4
        assert torch.equal(r.view(3), torch.full((2,), 2.0))
    w.close()


def test_large_reads_of_committed_rows_map_the_blocks_and_stay_private(tmp_path):
    from conftest import mappings_of

    path = tmp_path / "big"
    rows = np.arange(4096 * 256, dtype=np.float32).reshape(4096, 256)  # 4 MiB, blocks of 1 MiB
    with DT.open(path, "w", dtype="float32", shape=256, block_size=1024, framework="numpy") as b:
        b.write(rows)
        # Not committed yet: copied, never mapped.
        before = sum(mappings_of(f) for f, *_ in b.blocks())
        assert np.array_equal(b[0:2048], rows[:2048])
        assert sum(mappings_of(f) for f, *_ in b.blocks()) == before
    with DT.open(path, "r", framework="numpy") as b:
        got = b.read()
        assert np.array_equal(got, rows)
        assert got.flags.writeable and sum(mappings_of(f) for f, *_ in b.blocks()) >= 4
        got[0, 0] = -1  # stays in this array
        assert b[0][0] == 0 and b.read(copy=True) is not None
        b.seek(0)
        copied = b.read(copy=True)
        assert np.array_equal(copied, rows)
    del got
