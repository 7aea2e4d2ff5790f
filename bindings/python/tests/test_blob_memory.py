"""Larger than memory: a process whose address space is capped
(RLIMIT_AS) writes a TensorBlob several times that size, then reads all of
it back in batches, row by row and by gather, and every value checks out;
its peak RSS stays within a few block-sized buffers of where it started.

The child uses framework="numpy" only (torch alone would not fit the cap).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

MIB = 1 << 20
# The bare interpreter with numpy and deathtensors maps ~150 MiB, and the
# whole test passes down to a 200 MiB cap; 512 MiB leaves room for the
# stacks of the hashing and reading threads on machines with many cores.
LIMIT = 512 * MIB
WIDTH = 768  # float32 elements per row: 3 KiB rows
BLOCK_ROWS = 8192  # the default: 24 MiB blocks
BATCH_ROWS = 5461  # ~16 MiB batches, which straddle block boundaries
TOTAL_ROWS = 5 * LIMIT // 2 // (WIDTH * 4)  # 2.5x the limit

SCRIPT = r"""
import json, resource, sys, time
limit, path, total, batch_rows, block_rows, width = int(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:7])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

import numpy as np
import deathtensors as dt

COL = np.arange(width, dtype=np.float32)


def expected(first_rows):
    # Row r holds r + c in column c: exact in float32 below 2**24.
    return np.asarray(first_rows, dtype=np.float32)[:, None] + COL


def peak():
    # VmHWM is this process's own peak: ru_maxrss carries the parent's peak
    # across fork and exec (pytest's, with torch imported).
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def check(got, first_rows):
    assert got.shape == (len(first_rows), width) and got.dtype == np.float32, (got.shape, got.dtype)
    if not np.array_equal(got, expected(first_rows)):
        bad = int(np.flatnonzero((got != expected(first_rows)).any(axis=1))[0])
        raise AssertionError(f"row {first_rows[bad]} reads {got[bad, :3]}...")
    return int(got.sum(dtype=np.float64))


out = {"baseline": peak()}
want = width * total * (total - 1) // 2 + total * int(COL.sum())  # the sum of every value
t = time.monotonic()
blob = dt.TensorBlob.open(
    path, "w", dtype="float32", shape=(width,), block_size=block_rows, framework="numpy", durable=False
)
for i, start in enumerate(range(0, total, batch_rows)):
    blob.write(expected(np.arange(start, min(start + batch_rows, total))))
    if i % 16 == 15:
        blob.flush()
blob.close()
out["write"], out["after write"], out["write s"] = peak(), now(), round(time.monotonic() - t, 1)

t = time.monotonic()
blob = dt.TensorBlob.open(path, "r", framework="numpy")
assert len(blob) == total
blob.verify()
out["verify"], out["verify s"] = peak(), round(time.monotonic() - t, 1)

t = time.monotonic()
got = 0
while blob.tell() < total:
    start = blob.tell()
    got += check(blob.read(batch_rows), np.arange(start, min(start + batch_rows, total)))
assert got == want, (got, want)
out["read"], out["read s"] = peak(), round(time.monotonic() - t, 1)

# Row by row (iteration moves the position): the last 10000 rows, across a
# block boundary to the end, then a few rows around every block boundary.
t = time.monotonic()
got, seen = 0, 0
blob.seek(total - 10000)
for k, row in enumerate(blob):
    got += check(row[None], [total - 10000 + k])
    seen += 1
assert seen == 10000 and blob.tell() == total
for boundary in list(range(block_rows, total, block_rows)) + [total]:
    blob.seek(boundary - 3)
    for k, row in enumerate(blob):
        got += check(row[None], [boundary - 3 + k])
        seen += 1
        if k == 5:
            break
out["rows iterated"] = seen
# Gather: all rows, in a random order, a batch of indices at a time.
order = np.random.default_rng(0).permutation(total)
got = 0
for i in range(0, total, batch_rows):
    idx = order[i : i + batch_rows]
    got += check(blob[idx], idx)
assert got == want, (got, want)
got = check(blob[1 : total : 97], np.arange(1, total, 97))
out["gather"], out["gather s"] = peak(), round(time.monotonic() - t, 1)
out["end"] = now()
blob.close()
print(json.dumps(out))
"""


def test_a_collection_larger_than_the_memory_limit_round_trips_in_bounded_rss(tmp_path):
    row_bytes = WIDTH * 4
    size = TOTAL_ROWS * row_bytes
    assert size >= 2 * LIMIT
    # Block files carry a header each; a little room for the manifest besides.
    need = size + 64 * MIB
    free = shutil.disk_usage(tmp_path).free
    if free < need + 512 * MIB:
        pytest.skip(f"needs {need >> 20} MiB of free disk in {tmp_path}, has {free >> 20} MiB")
    path = tmp_path / "big"
    try:
        r = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(LIMIT), str(path)]
            + [str(n) for n in (TOTAL_ROWS, BATCH_ROWS, BLOCK_ROWS, WIDTH)],
            capture_output=True,
            text=True,
            # RLIMIT_AS counts address space reserved but never touched: keep
            # numpy's thread pool and glibc's per-thread malloc arenas (64 MiB
            # reservations each) from eating the cap on machines with many cores.
            env=dict(os.environ, OPENBLAS_NUM_THREADS="1", MALLOC_ARENA_MAX="2"),
        )
        assert r.returncode == 0, r.stderr
        m = json.loads(r.stdout)
        on_disk = sum(f.stat().st_size for f in path.iterdir())
    finally:
        shutil.rmtree(path, ignore_errors=True)
    assert on_disk >= size
    peak = max(m["write"], m["verify"], m["read"], m["gather"])
    # What the library may hold at once: a block's worth of reads or copies
    # and the caller's batch with its expected values beside it.
    buffers = 2 * BLOCK_ROWS * row_bytes + 4 * BATCH_ROWS * row_bytes
    print(
        f"\nlarger than memory: {on_disk / MIB:.0f} MiB collection, RLIMIT_AS {LIMIT >> 20} MiB; "
        f"peak RSS {m['baseline'] / MIB:.0f} MiB after imports, {m['write'] / MIB:.0f} after writing "
        f"({m['write s']} s), {m['verify'] / MIB:.0f} after verify ({m['verify s']} s), "
        f"{m['read'] / MIB:.0f} after reading in batches ({m['read s']} s), "
        f"{m['gather'] / MIB:.0f} after {m['rows iterated']} rows iterated and a full gather ({m['gather s']} s); "
        f"RSS at the end {m['end'] / MIB:.0f} MiB; bound {(m['baseline'] + buffers) / MIB:.0f} MiB"
    )
    assert peak < LIMIT
    assert peak - m["baseline"] <= buffers, f"peak RSS grew by {(peak - m['baseline']) >> 20} MiB"
