"""Millions of tiny tensors (issue 51): ours (deathtensors v1,
``alignment=1``) beside safetensors 0.8.0 (``safetensors.numpy``) at 1 M
tensors, and ours alone at 10 M, in one run. Every step runs in a fresh
process: save (building the dict is not timed), open+list (open, ``len``,
``keys()``), load one (``get_tensor`` of one name, timed after the open; the
open is reported beside it), load all (open and every tensor as numpy). Peak
RSS is the process's ``ru_maxrss`` (for save, the dict of tensors is in it,
the same for both). Runs are interleaved (ours, theirs, ours, ...) and
medians reported, with the targets as ratios.

    python many_bench.py [--runs 3] [--n 1000000] [--big 10000000] [--out DIR]

Names are ``model.layers.{i // 1000}.block.{i % 1000}.weight``, each tensor
``[4]`` F32, as in the issue.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
import numpy as np
lib, step, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
one = "model.layers.%d.block.%d.weight" % ((n // 2) // 1000, (n // 2) % 1000)
out = {}
if step == "save":
    a = np.arange(4, dtype=np.float32)
    tensors = {f"model.layers.{i // 1000}.block.{i % 1000}.weight": a for i in range(n)}
    t0 = time.perf_counter()
    if lib == "ours":
        import deathtensors as dt
        dt.save(path, tensors, alignment=1, durable=False)
    else:
        from safetensors.numpy import save_file
        save_file(tensors, path)
    out["s"] = time.perf_counter() - t0
else:
    t0 = time.perf_counter()
    if lib == "ours":
        import deathtensors as dt
        f = dt.open(path)
        if step == "open":
            assert len(f) == n and len(f.keys()) == n
        elif step == "one":
            out["open_s"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            f.get_tensor(one, framework="numpy")
            out["after_open_s"] = time.perf_counter() - t1
        else:
            assert len(f.get_tensors(framework="numpy")) == n
    else:
        from safetensors import safe_open
        from safetensors.numpy import load_file
        if step == "all":
            assert len(load_file(path)) == n
        else:
            with safe_open(path, framework="np") as f:
                if step == "open":
                    assert len(f.keys()) == n
                else:
                    out["open_s"] = time.perf_counter() - t0
                    t1 = time.perf_counter()
                    f.get_tensor(one)
                    out["after_open_s"] = time.perf_counter() - t1
    out["s"] = time.perf_counter() - t0
out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

STEPS = ["save", "open", "one", "all"]


def run(lib: str, step: str, path: str, n: int) -> dict:
    res = subprocess.run([sys.executable, "-c", CHILD, lib, step, path, str(n)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{lib} {step} {n}: {res.stderr.strip()}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def header_len(path: str) -> int:
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] == b"DTLEGION":
        return int.from_bytes(head[16:24], "little")
    return int.from_bytes(head[:8], "little")


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--big", type=int, default=10_000_000, help="0 to skip")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="many_bench_")
    os.makedirs(out, exist_ok=True)
    files = {"ours": os.path.join(out, "many.dt"), "theirs": os.path.join(out, "many.safetensors")}
    big = os.path.join(out, "many-big.dt")
    results: dict = {}
    for _ in range(args.runs):
        for step in STEPS:
            for lib in ("ours", "theirs"):
                results.setdefault((lib, step, args.n), []).append(run(lib, step, files[lib], args.n))
            if args.big:
                results.setdefault(("ours", step, args.big), []).append(run("ours", step, big, args.big))
    print(f"# {args.runs} runs, medians; interleaved; the machine may be shared")
    sizes = [("ours", args.n), ("theirs", args.n)] + ([("ours", args.big)] if args.big else [])
    for lib, n in sizes:
        path = big if n == args.big and lib == "ours" else files[lib]
        print(f"\n{lib} {n:,} tensors: file {os.path.getsize(path) / 1e6:.1f} MB, header {header_len(path) / 1e6:.1f} MB")
        for step in STEPS:
            rows = results[(lib, step, n)]
            extra = f", after open {median(rows, 'after_open_s') * 1e3:.2f} ms" if step == "one" else ""
            print(f"  {step:5s} {median(rows, 's'):8.3f} s{extra}  peak RSS {median(rows, 'rss_mb'):8.0f} MB")
    print(f"\nratios at {args.n:,} (ours / safetensors; targets in brackets):")
    for step, key, target in [("open", "s", 0.1), ("all", "s", 0.5), ("save", "s", 0.5), ("all", "rss_mb", 0.5)]:
        ratio = median(results[("ours", step, args.n)], key) / median(results[("theirs", step, args.n)], key)
        print(f"  {step} {key}: {ratio:.3f}x  [<= {target}x]")
    # Load one: our get_tensor after the open against safetensors' load-one
    # step (3.0 s in issue 51's table: its open, then get_tensor), the
    # target's reading; and like for like, get_tensor after each one's open.
    ours_one = median(results[("ours", "one", args.n)], "after_open_s")
    print(f"  one: get_tensor after open / safetensors' load-one step: "
          f"{ours_one / median(results[('theirs', 'one', args.n)], 's'):.6f}x  [<= 0.01x]")
    print(f"  one: get_tensor after open / safetensors' get_tensor after open: "
          f"{ours_one / median(results[('theirs', 'one', args.n)], 'after_open_s'):.2f}x")
    if args.big:
        h = header_len(big) / 2**20
        rows = results[("ours", "open", args.big)]
        print(f"\nat {args.big:,}: open+list {median(rows, 's'):.2f} s [<= 3 s], "
              f"peak RSS of open+list {median(rows, 'rss_mb') / h:.2f}x the header [<= 2x]")


if __name__ == "__main__":
    main()
