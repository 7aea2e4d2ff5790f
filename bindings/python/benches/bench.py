"""End-to-end Python benchmark: ours against safetensors 0.8 (numpy and
torch) and deathtensors 0.3.0 (from its own venv), in one run on the same
data; encrypted and signed files against cryptotensors 0.2.3 (from its own
venv). Every measurement runs in a fresh process with a warm page cache;
each is the median of several runs. Reports time and the peak RSS the
operation adds, then the goals as ratios.

    python bench.py [--runs N] [--mib 1024] [--out DIR] [--legacy-python PATH]
                    [--ct-python PATH] [--ops save,open,load-all,load-one,enc-save,enc-load-all,enc-load-one]
    python bench.py --ops blob [--runs N] [--mib 1024]
    python bench.py --ops save,open,load-all,load-one --before-python PATH [--impls ...]
    python bench.py --ops save,open,load-one --before REV [--datasets tiny] [--impls ...]

The 20,000-tensor dataset (`tiny`) also runs bintensors 0.2 (its numpy and
torch modules, each on its own file: its binary header). With
`--before-python`, both datasets also run an older build of ours installed
in another venv, so that a change is measured before and after in one run
(`--impls ours-numpy,ours-torch,before-numpy,before-torch` runs only those).
`--before REV` (a commit, a tag, `HEAD~3`) makes that venv itself: REV is
checked out in a git worktree under `target/bench-before/`, its wheel built
as a release is (the `dist` profile of pyproject.toml, or release before
it had one) and installed into a venv of its own with numpy and torch; both
are kept, by commit, for the next run.

The `enc-*` operations (1 GiB model only) save with AES-256-GCM and an
Ed25519 signature and load with the key: ours (`dt.save(encrypt=, sign=)`,
`dt.open(keys=)`) and cryptotensors' `save_file`/`load_file` (its default
format, v2 in 2 MB chunks, aes256gcm), plus ours reading cryptotensors' own
file (`deathtensors.cryptotensors.load_file`). Keys are made once, in
cryptotensors' JWK dialect, into `OUT/keys.json`.

The `blob-*` operations (not in the default `--ops`; `--ops blob` runs them
all) compare appendable collections, `deathtensors.TensorBlob` against
tensorblob 0.3.0's `TensorBlob` (both torch), on `--mib` MiB of rows of 768
float32: blob-append (1 MiB batches of whole rows, open to close, ours
with `durable=False`; beside plain 1 MiB `os.write`s of the same bytes to a
new file), blob-flush (ours with `durable=True`, its `close()` apart;
beside the same writes then `os.fsync`), blob-row (`blob[i]` at random,
median), blob-read-all (`read()` / `[:]`, beside numpy memmaps of our
block files summed as uint64), blob-gather (`blob[list]` of 1,000 random
rows, median).

Run by `cargo xtask bench`.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve()


# ---------------------------------------------------------------- data
def model_spec(mib: int):
    """~`mib` MiB transformer-like: half-precision matrices, F32 norms, I64
    buffers; tensors from 16 B to ~200 MB."""
    d, layers, vocab = 2048, 24, 32000
    spec = [("model.embed_tokens.weight", "half", (vocab, d))]
    for i in range(layers):
        p = f"model.layers.{i}"
        for m in "qkvo":
            spec.append((f"{p}.self_attn.{m}_proj.weight", "half", (d // 2, d // 2)))
        for m, shape in (("gate", (d, d // 4)), ("up", (d, d // 4)), ("down", (d // 4, d))):
            spec.append((f"{p}.mlp.{m}_proj.weight", "half", shape))
        spec.append((f"{p}.input_layernorm.weight", "f32", (d,)))
        spec.append((f"{p}.post_attention_layernorm.weight", "f32", (d,)))
        spec.append((f"{p}.position_ids", "i64", (2,)))
    spec.append(("model.norm.weight", "f32", (d,)))
    spec.append(("lm_head.weight", "half", (vocab, d)))
    total = sum(_nbytes(k, s) for _, k, s in spec)
    scale = (mib << 20) / total
    if abs(scale - 1) > 0.05:  # resize the big matrices to hit the target
        spec = [(n, k, (max(1, int(s[0] * scale)),) + tuple(s[1:]) if len(s) == 2 else s) for n, k, s in spec]
    return spec


def tiny_spec(n: int = 20000):
    """20,000 tensors of shape [16] F32 (issue 12's case: MoE experts,
    per-layer scales, optimizer states)."""
    return [(f"model.layers.{i // 16}.block.{i % 16}.weight", "f32", (16,)) for i in range(n)]


# Appendable collections: rows of 768 float32 (an embedding), appended in
# batches of the whole rows that fit in 1 MiB (341 rows, 1,047,552 bytes).
BLOB_OPS = ["blob-append", "blob-flush", "blob-row", "blob-read-all", "blob-gather"]
ROW = 768
ROW_BYTES = ROW * 4
BATCH_ROWS = (1 << 20) // ROW_BYTES


def blob_rows(mib: int) -> int:
    return (mib << 20) // ROW_BYTES


def _nbytes(kind, shape):
    n = 1
    for d in shape:
        n *= d
    return n * {"half": 2, "f32": 4, "i64": 8}[kind]


def make(spec, framework):
    import numpy as np

    rng = np.random.default_rng(0)
    out = {}
    for name, kind, shape in spec:
        n = _nbytes(kind, shape)
        raw = rng.integers(0, 255, size=n, dtype=np.uint8)
        if kind == "half":
            raw[1::2] &= 0x3F  # finite halves
        dtype = {"half": np.float16, "f32": np.float32, "i64": np.int64}[kind]
        a = raw.view(dtype).reshape(shape)
        if framework == "torch":
            import torch

            t = torch.from_numpy(a)
            out[name] = t.view(torch.bfloat16) if kind == "half" else t
        else:
            out[name] = a
    return out


# ---------------------------------------------------------------- worker
def rss_peak():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# Up to this many bytes of results, `touch` reads them all in one pass over
# their concatenation, with one small call per tensor: for 20,000 tiny
# tensors the per-tensor sums cost more than the loads they check.
TOUCH_BATCH_MAX = 64 << 20


def touch(values):
    """Read every byte of every result: a sum of each tensor's bytes as
    64-bit words (and the few bytes after the last whole word).

    Not numpy's `max` over the bytes, which this benchmark used first: its
    uint8 kernel reads the same bytes 20-25% slower or faster depending on
    where the tensors sit in memory (measured: one mapping, our layout's
    offsets against safetensors' offsets), while a uint64 sum and torch's
    reductions read both layouts at the same speed; the touch is there to
    make every page be mapped and read, not to measure that kernel."""
    import numpy as np

    values = list(values)
    if len(values) > 256:
        small = touch_batched(values)
        if small is not None:
            return small
    acc = 0
    for v in values:
        if hasattr(v, "numpy"):
            v = v.view(-1).view(__import__("torch").uint8).numpy() if v.numel() else None
        else:
            v = v.reshape(-1).view(np.uint8) if v.size else None
        if v is not None:
            whole = v.size - v.size % 8
            acc += int(v[:whole].view(np.uint64).sum(dtype=np.uint64)) + int(v[whole:].sum())
    return acc


def touch_batched(values):
    """`touch` for many small results: every byte read once, by one
    concatenation of all of them (torch: per dtype, then as bytes; numpy:
    as bytes), then a byte sum. None if they hold more than
    TOUCH_BATCH_MAX bytes."""
    import numpy as np

    if hasattr(values[0], "numpy"):
        import torch

        if sum(v.numel() * v.element_size() for v in values) > TOUCH_BATCH_MAX:
            return None
        groups = {}
        for v in values:
            groups.setdefault(v.dtype, []).append(v.reshape(-1) if v.dim() != 1 else v)
        return sum(int(torch.cat(g).view(torch.uint8).sum(dtype=torch.int64)) for g in groups.values())
    if sum(v.nbytes for v in values) > TOUCH_BATCH_MAX:
        return None
    return int(np.concatenate([v.reshape(-1).view(np.uint8) for v in values]).sum(dtype=np.uint64))


def rss_reset():
    """Sets the peak RSS back to the current RSS (Linux), so that a peak
    before the measurement (making its data) does not hide its own."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def warm_memory(nbytes):
    """Touches `nbytes` of fresh memory once per page, then frees it.

    On this VM the first touch of memory the host does not back yet costs
    0.1 to 9 s per GiB, depending on what ran before (`np.empty(1 GiB)`
    touched per page: 8.7 s in a fresh process, then 0.2 s in the same
    process), while memory just freed is handed out again at once, still
    backed. A collection op that fills 1 GiB of fresh memory or page cache
    would measure mostly that; after this, every implementation fills
    memory the host backs."""
    import numpy as np

    a = np.empty(nbytes, np.uint8)
    a[::4096] = 1
    del a


def blob_worker(impl, op, path, mib):
    """One measurement of a collection op. `impl` is ours
    (`deathtensors.TensorBlob`), tb (`tensorblob.TensorBlob`) or a baseline
    on the same bytes: raw (1 MiB `os.write`s to a new file, then `fsync`
    for blob-flush) or mmap (numpy memmaps of our block files' rows, summed).
    Prints the time (for blob-row and blob-gather: the median of many calls
    in this process) and its parts.

    The reads copy every byte into memory of their own, so blob-read-all
    times the open and the read (for mmap: the map and a uint64 sum of every
    byte); the sum of the result afterwards is reported apart (`touch`)."""
    import numpy as np
    import torch
    import tensorblob

    import deathtensors as dt

    rows, parts = blob_rows(mib), {}
    rng = np.random.default_rng(0)
    if op in ("blob-append", "blob-flush"):
        data = torch.from_numpy(rng.random((rows, ROW), dtype=np.float32))
        batches = [data[i : i + BATCH_ROWS] for i in range(0, rows, BATCH_ROWS)]
        raw = [memoryview(b.numpy()).cast("B") for b in batches]
    if op in ("blob-append", "blob-flush", "blob-read-all"):
        warm_memory(2 * rows * ROW_BYTES)  # the page cache written, or the rows read (tensorblob: twice)
    rss_reset()
    before = rss_peak()
    t0 = time.perf_counter()
    if op in ("blob-append", "blob-flush"):
        if impl.startswith("ours"):
            blob = dt.TensorBlob.open(path, "w", dtype=torch.float32, shape=(ROW,), framework="torch",
                                      durable=impl == "ours-durable")
        elif impl == "tb":
            blob = tensorblob.TensorBlob.open(path, "w", dtype="float32", shape=(ROW,))
        else:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        t1 = time.perf_counter()
        if impl == "raw" or impl == "raw-fsync":
            for b in raw:
                while b:
                    b = b[os.write(fd, b):]
        else:
            for b in batches:
                blob.write(b)
        t2 = time.perf_counter()
        if impl == "raw" or impl == "raw-fsync":
            if impl == "raw-fsync":
                os.fsync(fd)
            os.close(fd)
        else:
            blob.close()
        t3 = time.perf_counter()
        parts = {"open": t1 - t0, "write": t2 - t1, "close": t3 - t2}
    elif op == "blob-read-all":
        if impl == "ours":
            blob = dt.TensorBlob.open(path, "r", framework="torch")
        elif impl == "tb":
            blob = tensorblob.TensorBlob.open(path, "r")
        else:
            manifest = json.loads((pathlib.Path(path) / "collection.json").read_text())
            maps = []
            for b in manifest["blocks"]:
                f = pathlib.Path(path) / b["file"]
                data_start = f.stat().st_size - manifest["block_rows"] * ROW_BYTES
                maps.append(np.memmap(f, dtype=np.uint8, mode="r", offset=data_start, shape=(b["rows"] * ROW_BYTES,)))
        t1 = time.perf_counter()
        if impl == "mmap":
            touch(maps)
            values = maps
        else:
            values = [blob.read() if impl == "ours" else blob[:]]
        t2 = time.perf_counter()
        assert sum(len(v) for v in values) == (rows if impl != "mmap" else rows * ROW_BYTES)
        if impl != "mmap":
            touch(values)
        parts = {"open": t1 - t0, "read": t2 - t1, "touch": time.perf_counter() - t2}
    elif op in ("blob-row", "blob-gather"):
        blob = dt.TensorBlob.open(path, "r", framework="torch") if impl == "ours" else tensorblob.TensorBlob.open(path, "r")
        assert len(blob) == rows
        for i in range(0, rows, 8192):  # every block opened (ours) or mapped (tensorblob)
            blob[i]
        if op == "blob-row":
            warmup, keys = 200, rng.integers(0, rows, 2200).tolist()
        else:
            warmup, keys = 5, [rng.integers(0, rows, 1000).tolist() for _ in range(55)]
        times = []
        for k in keys:
            t = time.perf_counter()
            blob[k]
            times.append(time.perf_counter() - t)
        times = sorted(times[warmup:])
        parts = {"p90": times[len(times) * 9 // 10]}
    if op in ("blob-row", "blob-gather"):
        elapsed = statistics.median(times)
    elif op == "blob-read-all":
        # Until every byte was read once: ours maps committed rows (the
        # work is in the touch), tensorblob copies (in the read), the
        # memmaps are the touch.
        elapsed = time.perf_counter() - t0
    else:
        elapsed = time.perf_counter() - t0
    print(json.dumps({"seconds": elapsed, "rss_added": max(0, rss_peak() - before), **parts}))


def worker(impl, op, dataset, path, mib):
    if op.startswith("blob-"):
        return blob_worker(impl, op, path, mib)
    spec = tiny_spec() if dataset == "tiny" else model_spec(mib)
    framework = "torch" if "torch" in impl else "numpy"
    # Libraries are imported before timing, for every implementation alike.
    import numpy  # noqa: F401

    if framework == "torch":
        import torch  # noqa: F401
    data = make(spec, framework) if op in ("save", "enc-save", "fsync-write") else None
    if impl.startswith("ours") or impl == "dt030" or impl.startswith("before"):
        import deathtensors as dt
    if impl.startswith("ours"):
        import deathtensors.cryptotensors as dtct  # not in deathtensors 0.3.0
    if impl.startswith("bt"):
        import bintensors.numpy as btn
        import bintensors.torch as btt
        from bintensors import safe_open as bt_open
    if impl.startswith("st"):
        import safetensors.numpy as stn
        import safetensors.torch as stt
        from safetensors import safe_open
    if op.startswith("enc-"):
        keys = json.loads((pathlib.Path(path).parent / "keys.json").read_text())
        enc, sign = keys["enc"], keys["sign"]
        ct_config = {"enc_key": enc, "sign_key": sign}
    if impl == "ct":
        import cryptotensors
        import cryptotensors.numpy as ctn

        if op != "enc-save":
            cryptotensors.register_direct_key_provider(keys=[enc, sign])
    one = spec[len(spec) // 2][0]
    parts = {}  # the time until the results were returned, apart from touching them
    before = rss_peak()
    t0 = time.perf_counter()
    if op == "save":
        if impl in ("ours-numpy", "ours-torch", "before-numpy", "before-torch"):
            dt.save(path, data, durable=False)
        elif impl == "bt-numpy":
            btn.save_file(data, path)
        elif impl == "bt-torch":
            btt.save_file(data, path)
        elif impl == "ours-durable":
            dt.save(path, data, durable=True)
        elif impl == "st-numpy":
            stn.save_file(data, path)
        elif impl == "st-torch":
            stt.save_file(data, path)
        elif impl == "dt030":
            dt.save(path, data)
        elif impl == "dropin-durable":
            # The safetensors drop-in as transformers calls it: durable
            # unless turned off.
            import deathtensors.safetensors.numpy as dsn

            dsn.save_file(data, path)
    elif op == "fsync-write":
        # The same bytes written plainly: `raw` then fsyncs (the disk's
        # time), `raw-cache` does not (the page cache's).
        with open(path, "wb") as f:
            for v in data.values():
                f.write(memoryview(v.reshape(-1).view("uint8")))
            f.flush()
            if impl == "raw":
                os.fsync(f.fileno())
    elif op == "open":
        if impl.startswith("ours") or impl == "dt030" or impl.startswith("before"):
            names = dt.open(path).keys()
        elif impl.startswith("bt"):
            with bt_open(path, framework="np") as f:
                names = list(f.keys())
        else:
            with safe_open(path, framework="np") as f:
                names = list(f.keys())
        assert len(names) == len(spec)
    elif op == "load-all":
        if impl.startswith("ours") or impl.startswith("before"):
            values = dt.open(path).get_tensors(framework=framework).values()
        elif impl == "bt-numpy":
            values = btn.load_file(path).values()
        elif impl == "bt-torch":
            values = btt.load_file(path).values()
        elif impl == "st-numpy":
            values = stn.load_file(path).values()
        elif impl == "st-torch":
            values = stt.load_file(path).values()
        elif impl == "dt030":
            values = dt.open(path).get_tensors(framework="numpy").values()
        parts["load"] = time.perf_counter() - t0
        touch(values)
    elif op == "enc-save":
        if impl == "ours-enc" or impl == "ours-enc-durable":
            dt.save(path, data, encrypt=enc, sign=sign, durable=impl.endswith("durable"))
        elif impl == "ours-ck" or impl == "ours-ck-durable":
            dt.save(path, data, checksum=True, durable=impl.endswith("durable"))
        elif impl == "ct":
            ctn.save_file(data, path, config=ct_config)
        elif impl == "ours-ct":
            dtct.save_file(data, path, config=ct_config)
    elif op == "enc-load-all":
        if impl == "ours-enc":
            with dt.open(path, keys=enc) as f:
                values = f.get_tensors(framework="numpy").values()
        elif impl == "ours-enc-trusted":
            with dt.open(path, keys=enc, trusted_signers=sign) as f:
                values = f.get_tensors(framework="numpy").values()
        elif impl == "ours-copy":
            with dt.open(path) as f:
                values = f.get_tensors(framework="numpy", copy=True).values()
        elif impl == "ct":
            values = ctn.load_file(path).values()
        elif impl == "ours-ct-file":
            values = dtct.load_file(path, keys=[enc, sign]).values()
        touch(values)
    elif op == "enc-load-one":
        if impl == "ours-enc":
            with dt.open(path, keys=enc) as f:
                v = f.get_tensor(one, framework="numpy")
        elif impl == "ours-ct-file":
            with dt.open(path, keys=[enc, sign]) as f:
                v = f.get_tensor(one, framework="numpy")
        elif impl == "ct":
            with cryptotensors.safe_open(path, framework="np") as f:
                v = f.get_tensor(one)
        touch([v])
    elif op == "load-one":
        if impl.startswith("ours") or impl == "dt030" or impl.startswith("before"):
            v = dt.open(path).get_tensor(one, framework=framework)
        elif impl.startswith("bt"):
            with bt_open(path, framework="pt" if framework == "torch" else "np") as f:
                v = f.get_tensor(one)
        else:
            with safe_open(path, framework="pt" if framework == "torch" else "np") as f:
                v = f.get_tensor(one)
        touch([v])
    elapsed = time.perf_counter() - t0
    print(json.dumps({"seconds": elapsed, "rss_added": max(0, rss_peak() - before), **parts}))


def build_before(rev: str) -> pathlib.Path:
    """The Python of a venv holding our wheel at commit `rev` (see the
    module's doc), built once per commit."""
    root = HERE.parents[3]
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    base = root / "target" / "bench-before"
    venv = base / f"venv-{commit[:12]}"
    python = venv / "bin" / "python"
    if python.exists():
        print(f"before: {rev} = {commit[:12]}, built already ({venv})", flush=True)
        return python
    tree = base / f"tree-{commit[:12]}"
    if not tree.exists():
        git("worktree", "add", "--detach", str(tree), commit)
    print(f"before: building {rev} = {commit[:12]} (its wheel, as released) ...", flush=True)
    wheels = base / f"wheels-{commit[:12]}"
    maturin = pathlib.Path(sys.executable).parent / "maturin"
    env = dict(os.environ, CARGO_TARGET_DIR=str(base / "target"))
    subprocess.run([str(maturin), "build", "--release", "-q", "-m", str(tree / "bindings/python/Cargo.toml"),
                    "-o", str(wheels)], check=True, env=env)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *map(str, wheels.glob("*.whl")), "numpy", "torch"],
                   check=True)
    git("worktree", "remove", "--force", str(tree))
    return python


def bench_keys():
    """A symmetric key and an Ed25519 key in cryptotensors' JWK dialect
    (standard base64 with padding, "oct"/"okp", "alg"), which ours reads too."""
    import base64

    import deathtensors as dt

    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    raw = lambda s: base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))  # noqa: E731
    jwk = dt.generate_key("ed25519")
    return {
        "enc": {"kty": "oct", "alg": "aes256gcm", "kid": "bench", "k": b64(os.urandom(32))},
        "sign": {"kty": "okp", "alg": "ed25519", "kid": "bench-sign", "x": b64(raw(jwk["x"])), "d": b64(raw(jwk["d"]))},
    }


# ---------------------------------------------------------------- driver
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--out", default=str(HERE.parents[3] / "target" / "bench-py"))
    ap.add_argument("--legacy-python", default=str(HERE.parents[3] / ".venv-dt030" / "bin" / "python"))
    ap.add_argument("--ct-python", default=str(HERE.parents[3] / ".venv-ct023" / "bin" / "python"))
    ap.add_argument("--before-python", default=None,
                    help="a Python whose deathtensors is an older build of ours: measured beside this one "
                         "(`before-numpy`, `before-torch`) on every dataset, with a before/after table")
    ap.add_argument("--before", default=None, metavar="REV",
                    help="a commit (or tag) of ours to build and measure beside this one, as --before-python")
    ap.add_argument("--datasets", default="model,tiny", help="model, tiny (20,000 tensors of [16] F32), or both")
    ap.add_argument("--impls", default=None, help="only these implementations (comma-separated names, as printed)")
    ap.add_argument("--worker", nargs=4)
    ap.add_argument("--ops", default="save,open,load-all,load-one,enc-save,enc-load-all,enc-load-one",
                    help="the operations to measure (loads reuse the files of an earlier run's saves); "
                         "'blob' stands for the collection ops: " + ",".join(BLOB_OPS))
    args = ap.parse_args()
    if args.worker:
        impl, op, dataset, path = args.worker
        return worker(impl, op, dataset, path, args.mib)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.before:
        args.before_python = str(build_before(args.before))
    ops = [o for op in args.ops.split(",") for o in (BLOB_OPS if op == "blob" else [op])]
    # The model and tiny datasets' ops (all but the collection ops).
    file_ops = [op for op in ops if op not in BLOB_OPS]
    legacy = pathlib.Path(args.legacy_python)
    if file_ops and not legacy.exists():
        venv = legacy.parent.parent
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(legacy), "-m", "pip", "install", "-q", "deathtensors==0.3.0", "numpy"], check=True)
    ct_python = pathlib.Path(args.ct_python)
    if any(op.startswith("enc-") for op in ops):
        if not ct_python.exists():
            venv = ct_python.parent.parent
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(ct_python), "-m", "pip", "install", "-q", "cryptotensors==0.2.3", "numpy"], check=True)
        keys_file = out / "keys.json"
        if not keys_file.exists():
            keys_file.write_text(json.dumps(bench_keys()))

    def warm(path):
        """Puts the file in the page cache ("warm cache"), afresh: its pages
        are dropped first, then read back. Where the kernel places a page
        cache (and how the hypervisor backs that memory) changes how fast a
        mapping of it is touched by up to 2x on this VM, so every run of
        every implementation gets a new placement, rather than one file
        keeping a lucky or unlucky one for all runs. A directory (a
        collection): every file in it."""
        path = pathlib.Path(path)
        for p in sorted(path.iterdir()) if path.is_dir() else [path]:
            with open(p, "rb", buffering=0) as f:
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                while f.read(16 << 20):
                    pass

    def remove(path):
        path = pathlib.Path(path)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    def once(impl, op, dataset, path):
        py = (str(legacy) if impl == "dt030" else str(ct_python) if impl == "ct"
              else args.before_python if impl.startswith("before") else sys.executable)
        if op in ("save", "enc-save", "fsync-write"):
            os.sync()  # every save starts with no dirty pages of earlier runs
        elif op in ("blob-append", "blob-flush"):
            remove(path)  # a new collection (or file) every run, not one replaced
            os.sync()
        else:
            warm(path)
        r = subprocess.run([py, str(HERE), "--mib", str(args.mib), "--worker", impl, op, dataset, str(path)],
                           capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"{impl} {op} {dataset} failed:\n{r.stderr}")
        return json.loads(r.stdout)

    def run(op, dataset, jobs):
        """Measures `op` for every (impl, path) of `jobs`, interleaved: each
        round runs every implementation once, so that whatever drifts on
        the machine during the measurement (memory fragmentation, the
        host's load) falls on all of them alike."""
        if args.impls:
            jobs = [(impl, path) for impl, path in jobs if impl in args.impls.split(",")]
        if not jobs:
            return
        samples = {impl: [] for impl, _ in jobs}
        for _ in range(args.runs):
            for impl, path in jobs:
                samples[impl].append(once(impl, op, dataset, path))
        out = {}
        for impl, _ in jobs:
            # Each key's own median: time, peak RSS added, and (collection
            # ops) the parts of the time.
            res = out[impl] = {key: statistics.median(s[key] for s in samples[impl]) for key in samples[impl][0]}
            if op in BLOB_OPS:
                print(f"  {dataset:5} {op:13} {impl:12} {blob_line(op, res)}", flush=True)
                continue
            print(f"  {dataset:5} {op:11} {impl:18} {res['seconds'] * 1000:10.1f} ms  +{res['rss_added'] / 2**20:8.1f} MiB",
                  flush=True)
        results.update({(dataset, op, impl): res for impl, res in out.items()})

    def crypto(files):
        """Encrypted and signed: ours and cryptotensors 0.2.3, on the model."""
        enc = {i: out / f"model-{i}.dt" for i in ("ours-enc", "ours-enc-durable", "ours-ck", "ours-ck-durable")}
        enc["ct"] = out / "model-ct.safetensors"
        enc["ours-ct"] = out / "model-ours-ct.safetensors"
        if "enc-save" in ops:
            run("enc-save", "model", list(enc.items()))
        if "enc-load-all" in ops:
            run("enc-load-all", "model", [("ours-enc", enc["ours-enc"]), ("ours-enc-trusted", enc["ours-enc"]),
                                          ("ours-copy", enc["ours-ck"]), ("ct", enc["ct"]),
                                          ("ours-ct-file", enc["ct"])])
        if "enc-load-one" in ops:
            run("enc-load-one", "model", [("ours-enc", enc["ours-enc"]), ("ct", enc["ct"]),
                                          ("ours-ct-file", enc["ct"])])

    blob_bytes = blob_rows(args.mib) * ROW_BYTES

    def blob_line(op, res):
        t = res["seconds"]
        line = f"{t * 1e6:10.1f} µs" if op == "blob-row" else f"{t * 1000:10.1f} ms"
        if op in ("blob-append", "blob-flush", "blob-read-all"):
            line += f" {blob_bytes / t / 1e9:6.2f} GB/s"
        line += f"  +{res['rss_added'] / 2**20:8.1f} MiB"
        parts = [f"{k} {res[k] * 1000:.1f}" for k in ("open", "write", "close", "read", "touch") if k in res]
        if "p90" in res:
            parts.append(f"p90 {res['p90'] * (1e6 if op == 'blob-row' else 1000):.1f}")
        return line + (f"  ({', '.join(parts)} {'µs' if op == 'blob-row' else 'ms'})" if parts else "")

    def collections():
        """Appendable collections: ours (`deathtensors.TensorBlob`) and
        tensorblob 0.3.0 on the same rows, beside the same bytes written to
        or mapped from plain files. The reads use the collections of the
        last blob-append run (made first if missing or of another size)."""
        rows = blob_rows(args.mib)
        print(f"blob: {rows} rows of {ROW} float32, {blob_bytes / 2**20:.1f} MiB, "
              f"appended in batches of {BATCH_ROWS} rows", flush=True)
        ours, tb = out / "blob-ours", out / "blob-tb"
        if "blob-append" in ops:
            run("blob-append", "blob", [("ours", ours), ("tb", tb), ("raw", out / "blob-raw.bin")])
            remove(out / "blob-raw.bin")
        if "blob-flush" in ops:
            run("blob-flush", "blob", [("ours-durable", out / "blob-ours-durable"), ("raw-fsync", out / "blob-raw-fsync.bin")])
            remove(out / "blob-ours-durable")
            remove(out / "blob-raw-fsync.bin")
        reads = [op for op in ("blob-row", "blob-read-all", "blob-gather") if op in ops]
        if not reads:
            return

        def rows_in(impl, path):
            try:
                if impl == "ours":
                    return json.loads((path / "collection.json").read_text())["rows"]
                return json.loads((path / ".stat").read_text())["len"]
            except (OSError, ValueError, KeyError):
                return None

        for impl, path in (("ours", ours), ("tb", tb)):
            if rows_in(impl, path) != rows:
                once(impl, "blob-append", "blob", path)
        for op in reads:
            run(op, "blob", [("ours", ours), ("tb", tb)] + ([("mmap", ours)] if op == "blob-read-all" else []))

    def blob_tables():
        get = lambda op, impl, key="seconds": results.get(("blob", op, impl), {}).get(key, float("nan"))  # noqa: E731
        gbs = lambda op, impl: blob_bytes / get(op, impl) / 1e9  # noqa: E731
        ms = lambda op, impl, key="seconds": f"{get(op, impl, key) * 1000:.1f} ms"  # noqa: E731
        rss = lambda op, impl: f"+{get(op, impl, 'rss_added') / 2**20:.0f} MiB"  # noqa: E731
        print(f"\n| collections, {blob_bytes / 2**20:.0f} MiB | ours | tensorblob 0.3.0 | baseline |\n| --- | ---: | ---: | ---: |")
        print(f"| append, 1 MiB batches, open to close (`durable=False`) | {ms('blob-append', 'ours')}, "
              f"{gbs('blob-append', 'ours'):.2f} GB/s | {ms('blob-append', 'tb')}, {gbs('blob-append', 'tb'):.2f} GB/s | "
              f"page-cache write: {ms('blob-append', 'raw')}, {gbs('blob-append', 'raw'):.2f} GB/s |")
        print(f"| append: writes / close | {ms('blob-append', 'ours', 'write')} / {ms('blob-append', 'ours', 'close')} | "
              f"{ms('blob-append', 'tb', 'write')} / {ms('blob-append', 'tb', 'close')} | |")
        print(f"| durable: close (`durable=True`) | {ms('blob-flush', 'ours-durable', 'close')} | | "
              f"fsync: {ms('blob-flush', 'raw-fsync', 'close')} |")
        print(f"| durable: open to close | {ms('blob-flush', 'ours-durable')} | | "
              f"write + fsync: {ms('blob-flush', 'raw-fsync')} |")
        print(f"| one row `blob[i]`, median | {get('blob-row', 'ours') * 1e6:.1f} µs | {get('blob-row', 'tb') * 1e6:.1f} µs | |")
        print(f"| read all, warm (`read()` / `[:]`) | {ms('blob-read-all', 'ours')}, {gbs('blob-read-all', 'ours'):.2f} GB/s, "
              f"{rss('blob-read-all', 'ours')} | {ms('blob-read-all', 'tb')}, {gbs('blob-read-all', 'tb'):.2f} GB/s, "
              f"{rss('blob-read-all', 'tb')} | mmap sum: {ms('blob-read-all', 'mmap')}, {gbs('blob-read-all', 'mmap'):.2f} GB/s |")
        print(f"| read all, then a uint64 sum of the result | {ms('blob-read-all', 'ours', 'touch')} | "
              f"{ms('blob-read-all', 'tb', 'touch')} | (in the row above) |")
        print(f"| gather 1,000 random rows, median | {get('blob-gather', 'ours') * 1000:.2f} ms | "
              f"{get('blob-gather', 'tb') * 1000:.2f} ms | |")
        goals = [
            ("append GB/s vs page-cache write", get("blob-append", "raw") / get("blob-append", "ours"), ">= 0.9"),
            ("(the same, the writes alone, without close)", get("blob-append", "raw", "write") / get("blob-append", "ours", "write"), ""),
            ("durable close vs fsync of the same bytes", get("blob-flush", "ours-durable", "close") / get("blob-flush", "raw-fsync", "close"), ""),
            ("durable append, open to close, vs write + fsync", get("blob-flush", "ours-durable") / get("blob-flush", "raw-fsync"), ""),
            ("one row: ours, µs", get("blob-row", "ours") * 1e6, "<= 20"),
            ("one row: ours vs tensorblob", get("blob-row", "ours") / get("blob-row", "tb"), ""),
            ("read all GB/s vs mmap sum", get("blob-read-all", "mmap") / get("blob-read-all", "ours"), ">= 0.9"),
            ("read all: peak RSS added / data size", get("blob-read-all", "ours", "rss_added") / blob_bytes, "<= 1.05"),
            ("gather 1,000 rows: ours vs tensorblob", get("blob-gather", "ours") / get("blob-gather", "tb"), ""),
        ]
        print("\n| goal | ratio | target |\n| --- | --- | --- |")
        for name, ratio, target in goals:
            print(f"| {name} | {ratio:.2f} | {target} |")

    results = {}
    for dataset in args.datasets.split(",") if file_ops else ():
        impls = ["ours-numpy", "ours-torch", "st-numpy", "st-torch", "dt030"]
        if dataset == "tiny":
            # bintensors (its binary header).
            impls += ["bt-numpy", "bt-torch"]
        if args.before_python:
            # Ours before this change.
            impls += ["before-numpy", "before-torch"]
        size = sum(_nbytes(k, s) for _, k, s in (model_spec(args.mib) if dataset == "model" else tiny_spec()))
        print(f"{dataset}: {size / 2**20:.1f} MiB", flush=True)
        ext = lambda i: "safetensors" if i.startswith("st") else "bt" if i.startswith("bt") else "dt"  # noqa: E731
        files = {i: out / f"{dataset}-{i}.{ext(i)}" for i in impls}
        if "save" in ops:
            jobs = [(i, files[i]) for i in impls]
            if dataset == "model":
                jobs.append(("ours-durable", out / f"{dataset}-durable.dt"))
                jobs.append(("dropin-durable", out / f"{dataset}-dropin.safetensors"))
            run("save", dataset, jobs)
            if dataset == "model":
                run("fsync-write", dataset, [("raw", out / "raw.bin"), ("raw-cache", out / "raw-cache.bin")])
        for op in ("open", "load-all", "load-one"):
            if op not in ops:
                continue
            jobs = [(i, files[i]) for i in impls]
            if op == "load-all" and dataset == "model":
                # Ours reading safetensors' own file: the loaders compared
                # on the very same bytes.
                jobs.append(("ours-torch-st-file", files["st-torch"]))
            run(op, dataset, jobs)
        if dataset == "model":
            crypto(files)
        results[(dataset, "size", "")] = {"seconds": 0, "rss_added": size}

    if any(op in BLOB_OPS for op in ops):
        collections()
        blob_tables()
    r = lambda d, op, i: results.get((d, op, i), {"seconds": float("nan")})["seconds"]
    rss = lambda d, op, i: results.get((d, op, i), {"rss_added": float("nan")})["rss_added"]
    size = results.get(("model", "size", ""), {"rss_added": float("nan")})["rss_added"]
    goals = [
        ("save (durable=False) vs safetensors.numpy.save_file", r("model", "save", "ours-numpy") / r("model", "save", "st-numpy"), "<= 1"),
        ("save peak RSS added / data size", results.get(("model", "save", "ours-numpy"), {"rss_added": float("nan")})["rss_added"] / size, "<= 0.10"),
        ("durable save vs fsync'd raw write", r("model", "save", "ours-durable") / r("model", "fsync-write", "raw"), "<= 1.2"),
        ("durable save vs the larger of page-cache write and fsync'd write", r("model", "save", "ours-durable")
         / max(r("model", "fsync-write", "raw"), r("model", "fsync-write", "raw-cache")), "<= 1.1"),
        ("drop-in save_file (durable) vs safetensors.numpy.save_file", r("model", "save", "dropin-durable")
         / r("model", "save", "st-numpy"), ""),
        ("load all torch vs safetensors.torch.load_file", r("model", "load-all", "ours-torch") / r("model", "load-all", "st-torch"), "<= 1"),
        ("(same, ours reading safetensors' file)", r("model", "load-all", "ours-torch-st-file") / r("model", "load-all", "st-torch"), "<= 1"),
        ("load all numpy vs safetensors.numpy.load_file", r("model", "load-all", "ours-numpy") / r("model", "load-all", "st-numpy"), "<= 0.5"),
        ("open 20k tensors vs safetensors", r("tiny", "open", "ours-numpy") / r("tiny", "open", "st-numpy"), "<= 0.33"),
        ("load one tiny tensor vs safetensors", r("tiny", "load-one", "ours-numpy") / r("tiny", "load-one", "st-numpy"), "<= 1"),
        ("20k: open, list names, ms (numpy)", r("tiny", "open", "ours-numpy") * 1000, "<= 5"),
        ("20k: open, list names, ms (torch)", r("tiny", "open", "ours-torch") * 1000, "<= 5"),
        ("20k: load one tensor, ms (numpy)", r("tiny", "load-one", "ours-numpy") * 1000, "<= 5"),
        ("20k: load one tensor, ms (torch)", r("tiny", "load-one", "ours-torch") * 1000, "<= 5"),
        ("20k: load all, ms (numpy)", r("tiny", "load-all", "ours-numpy") * 1000, "<= 100"),
        ("20k: load all, ms (torch)", r("tiny", "load-all", "ours-torch") * 1000, "<= 100"),
        ("20k: save numpy vs safetensors.numpy.save_file", r("tiny", "save", "ours-numpy") / r("tiny", "save", "st-numpy"), "<= 0.8"),
        ("20k: save torch vs safetensors.numpy.save_file", r("tiny", "save", "ours-torch") / r("tiny", "save", "st-numpy"), "<= 0.8"),
        ("20k: open vs bintensors' open of its own file", r("tiny", "open", "ours-numpy") / r("tiny", "open", "bt-numpy"), "< 1"),
        ("20k: load one vs bintensors", r("tiny", "load-one", "ours-numpy") / r("tiny", "load-one", "bt-numpy"), "< 1"),
        ("encrypted+signed save vs plain save with checksum (durable=False)", r("model", "enc-save", "ours-enc") / r("model", "enc-save", "ours-ck"), "<= 1.3"),
        ("(same, durable=True)", r("model", "enc-save", "ours-enc-durable") / r("model", "enc-save", "ours-ck-durable"), "<= 1.3"),
        ("encrypted save: peak RSS added / data size", rss("model", "enc-save", "ours-enc") / size, "<= 0.10"),
        ("encrypted load all: peak RSS added / data size", rss("model", "enc-load-all", "ours-enc") / size, "<= 1.05"),
        ("encrypted load all vs plain load into fresh memory (copy=True)", r("model", "enc-load-all", "ours-enc") / r("model", "enc-load-all", "ours-copy"), ""),
        ("encrypted+signed save vs cryptotensors save_file", r("model", "enc-save", "ours-enc") / r("model", "enc-save", "ct"), ""),
        ("encrypted load all vs cryptotensors load_file (each its own file)", r("model", "enc-load-all", "ours-enc") / r("model", "enc-load-all", "ct"), ""),
        ("cryptotensors' file: ours load_file vs cryptotensors load_file", r("model", "enc-load-all", "ours-ct-file") / r("model", "enc-load-all", "ct"), "<= 0.33"),
        ("cryptotensors' file: ours load one tensor vs cryptotensors", r("model", "enc-load-one", "ours-ct-file") / r("model", "enc-load-one", "ct"), ""),
    ]
    if ("tiny", "size", "") in results:
        cols = [i for i in ("ours-numpy", "ours-torch", "before-numpy", "before-torch", "bt-numpy", "bt-torch",
                            "st-numpy", "st-torch", "dt030") if any(k[0] == "tiny" and k[2] == i for k in results)]
        print("\n| 20,000 tensors [16] F32, ms | " + " | ".join(cols) + " |\n| --- |" + " ---: |" * len(cols))
        for op in ("save", "open", "load-all", "load-one"):
            if any(k[:2] == ("tiny", op) for k in results):
                print(f"| {op} | " + " | ".join(f"{r('tiny', op, i) * 1000:.1f}" for i in cols) + " |")
    if args.before_python:
        print("\n| before/after | op | before, ms | after, ms | after / before |\n| --- | --- | ---: | ---: | ---: |")
        for dataset in args.datasets.split(","):
            for op in ("save", "open", "load-all", "load-one"):
                for api in ("numpy", "torch"):
                    if (dataset, op, f"ours-{api}") in results and (dataset, op, f"before-{api}") in results:
                        b, a = r(dataset, op, f"before-{api}"), r(dataset, op, f"ours-{api}")
                        print(f"| {dataset} ({api}) | {op} | {b * 1000:.1f} | {a * 1000:.1f} | {a / b:.2f} |")
    if file_ops:
        print("\n| goal | ratio | target |\n| --- | --- | --- |")
        for name, ratio, target in goals:
            print(f"| {name} | {ratio:.2f} | {target} |")
    name = "results.json" if set(ops) >= {"save", "open", "load-all", "load-one"} else f"results-{'-'.join(ops)}.json"
    (out / name).write_text(json.dumps({"|".join(k): v for k, v in results.items()}, indent=1))


if __name__ == "__main__":
    main()
