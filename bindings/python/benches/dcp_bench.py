"""torch.distributed.checkpoint storage benchmark: deathtensors'
StorageWriter/StorageReader against torch's FileSystemWriter/Reader and
HuggingFaceStorageWriter, and against plain writes of the same bytes with
one file per rank: to the page cache (`raw`), and the same with an fsync
(`raw_sync`). A durable save of ours goes around the page cache (O_DIRECT),
so neither is its floor: the disk's time and a memcpy are.

4 ranks (gloo on loopback, one process each) save a state dict of DTensors
sharded Shard(0) (64 tensors, 2 GiB in all by default), then 2 ranks load it
with resharding (Shard(1)). One run each, same data, warm cache; the disk
is synced before each save. Each job is
a fresh set of processes, so each peak RSS is that job's; RSS is reported
above what the process held before it built its state dict (after torch's
first DTensor, whose dispatch machinery is the harness's cost).

With ``--repeat N`` every job runs N times, the jobs interleaved (each
round runs them all in order), and each row gives the median time and the
largest RSS: this machine's timings of the same job vary by up to a third
from one run to the next.

    python benches/dcp_bench.py [--gib 2] [--dir /tmp/dcp-bench] [--repeat 3]
"""

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import time


def _rss_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _job(rank, world, port, kind, path, gib, n_tensors, q):
    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh

    from deathtensors.distributed import StorageReader, StorageWriter

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    mesh = init_device_mesh("cpu", (world,))
    rows = 4096
    cols = (gib << 30) // 4 // n_tensors // rows
    # torch's first DTensor loads its dispatch machinery (about 100 MiB
    # here), whatever the storage: a small one first, so that RSS above the
    # base is the state dict's and the storage's, not the harness's.
    DTensor.from_local(torch.zeros(16, 16), mesh, [Shard(0)], run_check=False).to_local().numpy()
    base = _rss_now()
    load = kind.startswith("load")
    placement = Shard(1) if load else Shard(0)
    sd = {}
    for i in range(n_tensors):
        shape = [rows // world, cols] if not load else [rows, cols // world]
        local = torch.empty(shape) if load else torch.full(shape, float(i + rank))
        sd[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [placement], run_check=False)
    share = sum(t.to_local().numel() * 4 for t in sd.values())
    dist.barrier()
    t0 = time.perf_counter()
    if kind in ("raw", "raw_sync"):
        # The same bytes into the page cache, one file per rank; and to the
        # disk (fsynced), as a buffered durable save does.
        with open(os.path.join(path, f"rank{rank}.bin"), "wb") as f:
            for t in sd.values():
                f.write(t.to_local().numpy().data)
            if kind == "raw_sync":
                f.flush()
                os.fsync(f.fileno())
    elif kind == "ours":
        dcp.save(sd, storage_writer=StorageWriter(path))
    elif kind == "ours_nosync":
        dcp.save(sd, storage_writer=StorageWriter(path, durable=False))
    elif kind == "fs":
        dcp.save(sd, storage_writer=dcp.FileSystemWriter(path))
    elif kind == "hf":
        dcp.save(sd, storage_writer=dcp.HuggingFaceStorageWriter(path, save_distributed=True))
    elif kind == "load_ours":
        dcp.load(sd, storage_reader=StorageReader(path))
    elif kind == "load_fs":
        dcp.load(sd, storage_reader=dcp.FileSystemReader(path))
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if load:
        first = sd["layers.3.weight"].to_local()
        assert float(first[0, 0]) == 3.0 and float(first[-1, -1]) == 3.0 + world * 2 - 1, "wrong data loaded"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    q.put((rank, elapsed, peak - base, share))
    dist.destroy_process_group()


def run(kind, world, path, gib, n_tensors):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=_job, args=(r, world, port, kind, path, gib, n_tensors, q)) for r in range(world)]
    for p in procs:
        p.start()
    results = [q.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"{kind}: a rank failed ({p.exitcode})")
    return max(r[1] for r in results), max(r[2] for r in results), max(r[3] for r in results)


def _drop(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def _round(root, gib, n_tensors, k=0):
    """Every job once: the saves, then the loads of two of them, in turn
    first (round ``k``): a job that starts right after another exits finds
    the memory that one freed quick to fault in again, and a load is mostly
    the page faults of its destination."""
    rows = []
    dirs = {}
    for kind in ("raw", "raw_sync", "fs", "hf", "ours", "ours_nosync"):
        d = dirs[kind] = os.path.join(root, kind)
        _drop(d)
        # Each save starts with the disk idle: the dirty pages of the save
        # before it would otherwise still be going to disk during this one's
        # fsyncs.
        os.sync()
        t, rss, share = run(kind, 4, d, gib, n_tensors)
        rows.append((f"save, 4 ranks: {kind}", t, rss, share))
        if kind in ("raw", "raw_sync", "hf"):
            shutil.rmtree(d)
    loads = [("load_fs", dirs["fs"]), ("load_ours", dirs["ours"])]
    for kind, d in loads if k % 2 == 0 else loads[::-1]:
        # Warm cache: read once first.
        for name in os.listdir(d):
            with open(os.path.join(d, name), "rb") as f:
                while f.read(64 << 20):
                    pass
        t, rss, share = run(kind, 2, d, gib, n_tensors)
        rows.append((f"load 4 -> 2 ranks, Shard(0) -> Shard(1): {kind}", t, rss, share))
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=int, default=2)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="dcp-bench-")
    runs = {}
    for k in range(a.repeat):
        for name, t, rss, share in _round(root, a.gib, a.tensors, k):
            runs.setdefault(name, []).append((t, rss, share))
            print((name, t, rss, share), file=sys.stderr, flush=True)
    rows = [(name, statistics.median(r[0] for r in rs), max(r[1] for r in rs), rs[0][2]) for name, rs in runs.items()]
    shutil.rmtree(root, ignore_errors=True)
    if a.json:
        print(json.dumps(rows))
        return
    seconds = "seconds" if a.repeat == 1 else f"seconds (median of {a.repeat})"
    print(f"| {a.gib} GiB state dict, {a.tensors} tensors | {seconds} | peak RSS above start, largest rank (MiB) | rank's share (MiB) |")
    print("|---|---:|---:|---:|")
    for name, t, rss, share in rows:
        print(f"| {name} | {t:.2f} | {rss / 2**20:.0f} | {share / 2**20:.0f} |")
    t = {name.split(": ")[-1]: t for name, t, _, _ in rows}
    print()
    print(f"durable save: {t['ours'] / t['fs']:.2f}x FileSystemWriter, {t['ours'] / t['hf']:.2f}x HuggingFaceStorageWriter, "
          f"{t['ours'] / t['raw']:.2f}x the page-cache raw write, {t['ours'] / t['raw_sync']:.2f}x the fsync'd raw write")
    print(f"save without fsync: {t['ours_nosync'] / t['raw']:.2f}x the page-cache raw write")
    print(f"load with resharding: {t['load_ours'] / t['load_fs']:.2f}x FileSystemReader")
    ours = [r - s for name, _, r, s in rows if "ours" in name]
    print(f"peak RSS of ours above the rank's share: {max(ours) / 2**20:.0f} MiB at most")


if __name__ == "__main__":
    main()
