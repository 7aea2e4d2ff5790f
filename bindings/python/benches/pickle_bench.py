"""Torch pickle checkpoints: deathtensors' reader (which runs no pickle)
against torch's, in one run, a fresh process per operation, interleaved,
medians (docs/BENCHMARKS.md, "Pickle checkpoints").

- convert: a `pytorch_model.bin` of `--mib` MiB (296 float32 tensors, a
  state dict as torch.save writes it) to safetensors: `deathtensors
  convert` (python -m deathtensors) against `torch.load(weights_only=True)`
  + `safetensors.torch.save_file`;
- open + one tensor: `dt.open(bin).get_tensor(name)` against
  `torch.load(bin, mmap=True, weights_only=True)[name]`, with the bytes
  each read from the file (`/proc/self/io` read_bytes: from the disk; the
  page cache is dropped first where we may; `rchar` and the mapped pages
  counted from /proc/self/io's read_bytes after the file left the page
  cache), and the pickle's and the tensor's sizes beside them. Seconds
  are the operation's, after the imports; "with imports" the whole
  process's (torch's import is most of a fresh process's time).
The physical limit is a copy of the file (`cp`), in the same run.

    python bindings/python/benches/pickle_bench.py --runs 9 --mib 1024
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

CHILD = r"""
import json, os, sys, time
op, src, dst, name = sys.argv[1:5]
start = time.perf_counter()
# The file leaves the page cache first (clean pages: no root needed), so
# that read_bytes counts what the operation reads from the disk.
fd = os.open(src, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
if op.startswith("dt"):
    import deathtensors as dt
    from deathtensors import _native
elif op.startswith("torch"):
    import torch
    from safetensors.torch import save_file
before = dict(l.split(": ") for l in open("/proc/self/io").read().splitlines())
t0 = time.perf_counter()
if op == "dt-convert":
    assert _native.cli_main(["deathtensors", "convert", src, dst]) == 0
elif op == "torch-convert":
    save_file(torch.load(src, weights_only=True), dst)
elif op == "dt-one":
    t = dt.open(src).get_tensor(name, framework="numpy")
    t.sum()
elif op == "torch-one":
    t = torch.load(src, mmap=True, weights_only=True)[name]
    t.sum()
elif op == "cp":
    import shutil
    shutil.copyfile(src, dst)
elapsed = time.perf_counter() - t0
io = dict(l.split(": ") for l in open("/proc/self/io").read().splitlines())
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"s": elapsed, "total": time.perf_counter() - start,
                  "read": int(io["read_bytes"]) - int(before["read_bytes"]), "hwm_kib": hwm}))
"""


def run(op, src, dst="", name=""):
    r = subprocess.run([sys.executable, "-c", CHILD, op, str(src), str(dst), name], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    import torch

    work = tempfile.mkdtemp(prefix="pickle-bench-", dir=args.dir)
    try:
        src = os.path.join(work, "pytorch_model.bin")
        per = args.mib * (1 << 20) // 4 // 296
        g = torch.Generator().manual_seed(0)
        torch.save({f"layers.{i}.weight": torch.randn(per, generator=g) for i in range(296)}, src)
        with zipfile.ZipFile(src) as z:
            pkl = next(i.file_size for i in z.infolist() if i.filename.endswith("data.pkl"))
        one = "layers.148.weight"
        size = os.path.getsize(src)
        times = {k: [] for k in ("cp", "dt-convert", "torch-convert", "dt-one", "torch-one")}
        totals = {k: [] for k in times}
        reads = {k: [] for k in times}
        rss = {k: [] for k in times}
        for i in range(args.runs):
            for op in times:  # interleaved
                dst = os.path.join(work, f"out-{op}.safetensors")
                r = run(op, src, dst, one)
                times[op].append(r["s"])
                totals[op].append(r["total"])
                reads[op].append(r["read"])
                rss[op].append(r["hwm_kib"])
                if os.path.exists(dst):
                    os.unlink(dst)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"{args.mib} MiB pytorch_model.bin (296 tensors, pickle {pkl} bytes), {args.runs} runs each, medians")
        print(f"{'operation':<32}{'seconds':>9}{'x torch':>9}{'with imports':>14}{'x torch':>9}{'disk read':>15}{'peak RSS MiB':>14}")
        rows = [
            ("cp (the physical limit)", "cp", None),
            ("deathtensors convert", "dt-convert", "torch-convert"),
            ("torch.load + save_file", "torch-convert", "torch-convert"),
            ("dt.open + get_tensor (one)", "dt-one", "torch-one"),
            ("torch.load(mmap=True)[one]", "torch-one", "torch-one"),
        ]
        for label, k, ref in rows:
            tot = {key: statistics.median(v) for key, v in totals.items()}
            ratio = f"{med[k] / med[ref]:.2f}" if ref else ""
            ratio_total = f"{tot[k] / tot[ref]:.2f}" if ref else ""
            print(
                f"{label:<32}{med[k]:>9.3f}{ratio:>9}{tot[k]:>14.3f}{ratio_total:>9}"
                f"{statistics.median(reads[k]):>15,.0f}{statistics.median(rss[k]) / 1024:>14.0f}"
            )
        print(f"one tensor is {per * 4:,} bytes; the pickle {pkl:,}; the file {size:,}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
