"""Loading one 1 GiB / 296-tensor safetensors file into JAX, TensorFlow,
Paddle and MLX: safetensors 0.8.0's ``safetensors.<framework>.load_file``
against the drop-in's, and one memcpy of the data (fresh memory, as a
copying load needs) for scale. One run each, warm page cache, each
framework in a process of its own (TensorFlow and Paddle cannot share one).

    .venv/bin/python bindings/python/benches/frameworks_bench.py [DIR]
"""

import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = {"jax": "flax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}

WORKER = r"""
import os, sys, time, gc
import numpy as np
fw, path, which = sys.argv[1], sys.argv[2], sys.argv[3]
module = {"jax": "flax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}[fw]
__import__({"jax": "jax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx.core"}[fw])
if which == "memcpy":
    with open(path, "rb") as f:
        data = np.frombuffer(f.read(), np.uint8)  # the data, in memory
    t = time.perf_counter()
    out = np.empty_like(data)
    np.copyto(out, data)
    print(time.perf_counter() - t)
    sys.exit()
if which == "ours":
    import deathtensors.safetensors as s
    load_file = __import__(f"deathtensors.safetensors.{module}", fromlist=["x"]).load_file
else:
    load_file = __import__(f"safetensors.{module}", fromlist=["x"]).load_file
t = time.perf_counter()
got = load_file(path)
if fw == "mlx":
    import mlx.core as mx
    mx.eval(list(got.values()))
elif fw == "jax":
    import jax
    jax.block_until_ready(list(got.values()))
print(time.perf_counter() - t)
"""


def main():
    sys.path.insert(0, HERE)
    import numpy as np
    import safetensors.numpy

    from bench import make, model_spec

    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/dt-frameworks-bench"
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "model.safetensors")
    spec = model_spec(1024)
    if not os.path.exists(path):
        safetensors.numpy.save_file(make(spec, "numpy"), path)
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass  # warm
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3")
    print(f"{len(spec)} tensors, {os.path.getsize(path) / 2**30:.2f} GiB")
    print("| framework | safetensors 0.8.0 | deathtensors | ratio | one memcpy |")
    print("|---|---|---|---|---|")
    for fw in sys.argv[2:] or MODULES:
        times = {}
        for which in ("real", "ours", "memcpy"):
            r = subprocess.run([sys.executable, "-c", WORKER, fw, path, which], capture_output=True, text=True, env=env)
            if r.returncode:
                times[which] = float("nan")
                print(f"{fw} {which} failed: {r.stderr[-500:]}", file=sys.stderr)
            else:
                times[which] = float(r.stdout.strip().splitlines()[-1])
        print(
            f"| {fw} | {times['real']:.3f} s | {times['ours']:.3f} s | {times['ours'] / times['real']:.2f}x "
            f"| {times['memcpy']:.3f} s ({times['ours'] / times['memcpy']:.2f}x) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
