"""Signing and verifying a 1 GiB model directory (issue 52): deathtensors'
``sign-model`` / ``verify-model`` beside the reference tool
(``model_signing sign key`` / ``verify key``, PyPI model-signing), both as
the commands a user runs (a fresh process each, Python's start included for
both), rounds interleaved (ours, theirs, ours, ...), the page cache warm;
then a lazy verified load of one tensor (``open_signed_model`` +
``get_tensor``), counting the bytes it reads (``/proc/self/io`` rchar).

    python model_sign_bench.py [--runs 5] [--gib 1] [--out DIR]

The directory: 4 safetensors shards of 64 tensors (4 MiB each, random
bytes) and a config; one ECDSA P-256 key.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def run(*args: str) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {r.stdout}{r.stderr}")
    return took


LAZY = r"""
import sys, time
import deathtensors as dt
import numpy  # imported before counting: only the load is counted
root, pub, sig = sys.argv[1], sys.argv[2], sys.argv[3]
def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar:")).split()[1])
t0 = time.perf_counter()
before = rchar()
signed = dt.open_signed_model(root, pub, sig)
with signed.open("model-00003-of-00004.safetensors") as f:
    t = f.get_tensor("layer.2.17.weight", framework="numpy")
print(rchar() - before, t.nbytes, time.perf_counter() - t0)
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    import numpy as np
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from safetensors.numpy import save_file

    work = a.out or tempfile.mkdtemp(prefix="dt-model-sign-bench-")
    root = os.path.join(work, "model")
    os.makedirs(root, exist_ok=True)
    per = int(a.gib * (1 << 30)) // (4 * 64)
    rng = np.random.default_rng(0)
    for s in range(4):
        tensors = {f"layer.{s}.{i}.weight": rng.integers(0, 255, size=(per,), dtype=np.uint8) for i in range(64)}
        save_file(tensors, os.path.join(root, f"model-{s + 1:05d}-of-00004.safetensors"))
    with open(os.path.join(root, "config.json"), "w") as f:
        json.dump({"hidden": 4096}, f)
    key = ec.generate_private_key(ec.SECP256R1())
    priv, pub = os.path.join(work, "key.pem"), os.path.join(work, "key.pub.pem")
    with open(priv, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(pub, "wb") as f:
        f.write(key.public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.SubjectPublicKeyInfo))
    ours_sig, theirs_sig = os.path.join(work, "ours.sig"), os.path.join(work, "theirs.sig")
    times: dict[str, list[float]] = {k: [] for k in ("ours sign", "theirs sign", "ours verify", "theirs verify")}
    run("deathtensors", "sign-model", root, "--private-key", priv, "-s", ours_sig)  # warms the page cache
    for _ in range(a.runs):
        times["ours sign"].append(run("deathtensors", "sign-model", root, "--private-key", priv, "-s", ours_sig))
        times["theirs sign"].append(run("model_signing", "sign", "key", root, "--private_key", priv,
                                        "--signature", theirs_sig))
        times["ours verify"].append(run("deathtensors", "verify-model", root, "--public-key", pub, "-s", ours_sig))
        times["theirs verify"].append(run("model_signing", "verify", "key", root, "--public_key", pub,
                                          "--signature", theirs_sig))
    # Each verifies the other's bundle too.
    run("model_signing", "verify", "key", root, "--public_key", pub, "--signature", ours_sig)
    run("deathtensors", "verify-model", root, "--public-key", pub, "-s", theirs_sig)
    size = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"directory: {size / (1 << 30):.2f} GiB in 5 files; {a.runs} interleaved rounds, medians (s)")
    for what in ("sign", "verify"):
        o, t = med[f"ours {what}"], med[f"theirs {what}"]
        print(f"{what:6s}  ours {o:6.2f}  model_signing {t:6.2f}  ratio {o / t:.2f}x (target <= 1.1x)"
              f"  [ours {', '.join(f'{x:.2f}' for x in times[f'ours {what}'])};"
              f" theirs {', '.join(f'{x:.2f}' for x in times[f'theirs {what}'])}]")
    out = subprocess.run([sys.executable, "-c", LAZY, root, pub, ours_sig], capture_output=True, text=True, check=True)
    read, tensor, took = out.stdout.split()
    print(f"lazy verified load of one {int(tensor) >> 20} MiB tensor: {int(read) / (1 << 20):.2f} MiB read "
          f"of {size / (1 << 20):.0f} MiB, {float(took):.3f} s (signature checked, header and tensor hashed)")


if __name__ == "__main__":
    main()
