#!/usr/bin/env python3
"""Regenerate the cryptotensors 0.2.3 sample files in /tmp/ct/samples/.

Run with the venv that has cryptotensors==0.2.3, numpy and cryptography:
    /tmp/ct/venv/bin/python /tmp/ct/make_samples.py

Determinism: all key material and all tensor values are derived from fixed
labels, so keys.json and the plaintext are reproducible.  The files themselves
are NOT byte-reproducible: cryptotensors draws every DEK and every nonce from
the OS RNG (ring::rand::SystemRandom) and there is no way to seed it.
"""
import base64
import hashlib
import json
import os
import struct
import sys

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import cryptotensors
from cryptotensors.numpy import load_file, save_file

OUT = "/tmp/ct/samples"
CHUNK = 4096  # small chunk size for v2 samples so the "big" tensor spans chunks


def b64(b: bytes) -> str:
    # cryptotensors uses STANDARD base64 ('+', '/', '=' padding required)
    return base64.b64encode(b).decode("ascii")


def kbytes(label: str, n: int) -> bytes:
    return hashlib.sha256(label.encode()).digest()[:n]


def make_keys():
    seed = kbytes("deathtensors-sample-ed25519", 32)
    pub = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    keys = {
        "aes128gcm": {"kty": "oct", "alg": "aes128gcm", "kid": "enc-aes128gcm",
                      "k": b64(kbytes("deathtensors-sample-aes128gcm", 16))},
        "aes256gcm": {"kty": "oct", "alg": "aes256gcm", "kid": "enc-aes256gcm",
                      "k": b64(kbytes("deathtensors-sample-aes256gcm", 32))},
        "chacha20poly1305": {"kty": "oct", "alg": "chacha20poly1305", "kid": "enc-chacha20poly1305",
                             "k": b64(kbytes("deathtensors-sample-chacha20poly1305", 32))},
        "sign": {"kty": "okp", "alg": "ed25519", "kid": "sign-ed25519",
                 "x": b64(pub), "d": b64(seed)},
    }
    return keys


def make_tensors(big_elems=3000):
    rng = np.random.default_rng(12345)
    return {
        "f32": rng.standard_normal((3, 4)).astype(np.float32),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "i64": np.arange(-3, 3, dtype=np.int64).reshape(2, 3),
        "u8": np.arange(7, dtype=np.uint8) * 37,
        "bool": np.array([[True, False], [False, True]]),
        # 3000*4 = 12000 bytes -> chunks of 4096, 4096, 3808 with CHUNK=4096
        "big": rng.standard_normal((big_elems,)).astype(np.float32),
        # 2048*4 = 8192 bytes -> exactly 2 full chunks (no empty trailing chunk)
        "exact": np.arange(2048, dtype=np.float32),
        # a single zero-sized tensor (v1: iv=""/tag="", v2: one tag over empty input)
        # NB: two or more zero-sized tensors break signature verification in 0.2.3
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def header_of(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, f.read(n)


def main():
    os.makedirs(OUT, exist_ok=True)
    keys = make_keys()
    sign = keys["sign"]
    with open(os.path.join(OUT, "keys.json"), "w") as f:
        # JWK Set usable by CRYPTOTENSOR_KEYS, register_direct_key_provider(files=...) and jku=file://
        json.dump({"keys": [keys["aes128gcm"], keys["aes256gcm"], keys["chacha20poly1305"], sign]}, f, indent=2)

    tensors = make_tensors()
    np.savez(os.path.join(OUT, "plaintext_tensors.npz"), **tensors)

    samples = {}  # name -> (tensors, metadata, config)
    samples["plain"] = (tensors, {"note": "no encryption"}, None)
    for alg in ("aes128gcm", "aes256gcm", "chacha20poly1305"):
        samples[f"v1_{alg}"] = (tensors, None, {"enc_key": keys[alg], "sign_key": sign, "version": "1"})
        samples[f"v2_{alg}"] = (tensors, None, {"enc_key": keys[alg], "sign_key": sign, "version": "2",
                                                "chunk_size": CHUNK})
    # v2 with default chunk size (2 MiB, chunk_size still written into the header) and a 5 MiB tensor
    big5 = dict(tensors)
    big5["big"] = np.random.default_rng(7).standard_normal((5 * 1024 * 1024 // 4,)).astype(np.float32)
    samples["v2_defaultchunk_aes256gcm"] = (big5, None, {"enc_key": keys["aes256gcm"], "sign_key": sign})
    # custom policy (Rego v1 syntax is required by regorus 0.4: `allow if ...`)
    policy = {
        "local": "package model\n\nimport rego.v1\n\ndefault allow := false\n\nallow if {\n\tcount([1, 2]) == 2\n}\n",
        "remote": "package model\n\ndefault allow := false\n\nallow if input.user == \"alice\"\n",
    }
    samples["v2_policy_aes256gcm"] = (tensors, None, {"enc_key": keys["aes256gcm"], "sign_key": sign,
                                                      "chunk_size": CHUNK, "policy": policy})
    # only some tensors encrypted + user metadata with characters that need JSON escaping
    samples["v2_partial_meta_chacha20poly1305"] = (
        tensors,
        {"format": "np", "weird \"key\"\n": "caf\u00e9 \u2603 tab\there ctrl\x01 slash/ back\\"},
        {"enc_key": keys["chacha20poly1305"], "sign_key": sign, "chunk_size": CHUNK,
         "tensors": ["big", "f32", "not-present"]},
    )
    # v1 with jku in the key descriptors (stored verbatim in __crypto_keys__)
    jku = "file://" + os.path.join(OUT, "keys.json")
    samples["v1_jku_aes256gcm"] = (tensors, None, {"enc_key": dict(keys["aes256gcm"], jku=jku),
                                                   "sign_key": dict(sign, jku=jku), "version": "1"})

    for name, (tens, meta, cfg) in samples.items():
        path = os.path.join(OUT, name + ".safetensors")
        save_file(tens, path, metadata=meta, config=cfg)

    # Verify they load back with the real package (registry lookup by kid from the header)
    cryptotensors.register_direct_key_provider(files=[os.path.join(OUT, "keys.json")])
    for name, (tens, meta, cfg) in samples.items():
        path = os.path.join(OUT, name + ".safetensors")
        got = load_file(path)
        for k, v in tens.items():
            assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v), (name, k)
    # dump headers
    with open(os.path.join(OUT, "headers.txt"), "w") as out:
        for name in samples:
            path = os.path.join(OUT, name + ".safetensors")
            n, hb = header_of(path)
            raw = open(path, "rb").read(64)
            out.write(f"===== {name}.safetensors  size={os.path.getsize(path)}  header_len={n}\n")
            out.write("first 64 bytes: " + raw.hex(" ") + "\n")
            hdr = json.loads(hb)
            md = hdr.get("__metadata__", {})
            pretty = {"__metadata__": {k: (json.loads(v) if k in ("__crypto_keys__", "__encryption__", "__policy__") else v)
                                       for k, v in md.items()}}
            pretty.update({k: v for k, v in hdr.items() if k != "__metadata__"})
            out.write("raw header JSON:\n" + hb.decode() + "\n")
            out.write("decoded (nested JSON strings parsed):\n" + json.dumps(pretty, indent=2, ensure_ascii=False) + "\n\n")
    print("samples written to", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
