"""Writes the known-answer vectors of testdata/crypto with reference.py.

Every key and random value is derived from a fixed label, so running this
again gives the same bytes:

    python -m venv /tmp/kat-venv && /tmp/kat-venv/bin/pip install cryptography argon2-cffi
    /tmp/kat-venv/bin/python testdata/crypto/make_vectors.py
"""

import base64
import hashlib
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reference as ref  # noqa: E402

CHUNK = 4096
PASSPHRASE = "correct horse battery staple ✓"
ARGON2 = {"memory_kib": 64, "iterations": 1, "parallelism": 1}


def fixed(label, n=32):
    """n bytes that stand for randomness, derived from a label."""
    out, k = b"", 0
    while len(out) < n:
        out += hashlib.sha256(f"deathtensors kat {label} {k}".encode()).digest()
        k += 1
    return out[:n]


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def ed25519_public(seed):
    return ref.Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


SYM = {"kid": "team-aes", "key": fixed("symmetric key")}
SYM16 = {"kid": 'ключ "16" \\', "key": fixed("short symmetric key", 16)}  # 16 bytes; a kid JSON escapes
X_ALICE = fixed("x25519 alice")
X_BOB = fixed("x25519 bob")  # a recipient whose secret is not in keys.json
SIGNER = fixed("ed25519 signer")

# Tensors of 0, 1, 4095, 4096, 4097 and 12293 bytes, several dtypes, a scalar and a non-ASCII name.
SHAPES = [
    ("empty", "F32", [3, 0]),            # 0 bytes: one empty chunk
    ("scalar", "U8", []),               # rank 0: 1 byte
    ('f6 "packed"', "F6_E2M3", [5460]), # 4095 bytes, sub-byte dtype, a name JSON escapes
    ("weight", "F32", [32, 32]),        # 4096 bytes: exactly one chunk
    ("über/gewicht", "U8", [17, 241]),  # 4097 bytes: a last chunk of 1 byte
    ("f4.big", "F4", [2, 12293]),       # 12293 bytes: 4 chunks, the last of 5 bytes
]


def tensors(tag):
    out = {}
    for name, dtype, shape in SHAPES:
        n = ref.byte_len(dtype, shape)
        out[name] = (dtype, shape, fixed(f"{tag} {name} plaintext", n) if n else b"")
    return out


CASES = [
    {
        "file": "aes-symmetric-signed.dt",
        "about": "AES-256-GCM, one symmetric recipient, per-tensor sha256 of the ciphertext, footer, signed",
        "cipher": "AES-256-GCM", "alignment": 64, "checksum": True, "digests": True, "signers": [SIGNER],
        "recipients": [{"kind": "symmetric", **SYM}],
    },
    {
        "file": "chacha-x25519.dt",
        "about": "ChaCha20-Poly1305, two X25519 recipients (only alice's secret is in keys.json), "
                 "alignment 128, no footer, no digests, unsigned",
        "cipher": "CHACHA20-POLY1305", "alignment": 128, "checksum": False, "digests": False, "signers": [],
        "recipients": [
            {"kind": "x25519", "kid": "bob", "public_key": ref.x25519_public(X_BOB),
             "ephemeral_secret": fixed("ephemeral for bob")},
            {"kind": "x25519", "kid": "alice", "public_key": ref.x25519_public(X_ALICE),
             "ephemeral_secret": fixed("ephemeral for alice")},
        ],
    },
    {
        "file": "passphrase.dt",
        "about": "AES-256-GCM, a passphrase recipient (Argon2id, 64 KiB, 1 iteration, 1 lane) and a "
                 "16-byte symmetric key whose kid is non-ASCII and JSON-escaped, footer, alignment 1",
        "cipher": "AES-256-GCM", "alignment": 1, "checksum": True, "digests": False, "signers": [],
        "recipients": [
            {"kind": "passphrase", "passphrase": PASSPHRASE, "salt": fixed("argon2 salt", 16), **ARGON2},
            {"kind": "symmetric", **SYM16},
        ],
    },
    {
        "file": "chacha-symmetric-order.dt",
        "about": "ChaCha20-Poly1305, symmetric, signed, footer; the JSON lists the tensors in another "
                 "order than their offsets, so the tensor index i (header order) is not the offset order",
        "cipher": "CHACHA20-POLY1305", "alignment": 64, "checksum": True, "digests": True, "signers": [SIGNER],
        "recipients": [{"kind": "symmetric", **SYM}],
        "header_order": [s[0] for s in reversed(SHAPES)],
    },
]


def hexed(v):
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, dict):
        return {k: hexed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [hexed(x) for x in v]
    return v


def pick_chunks(trace):
    """The chunks worth listing: the first and last of every tensor."""
    by_tensor = {}
    for c in trace["chunks"]:
        by_tensor.setdefault(c["tensor"], []).append(c)
    picked = []
    for cs in by_tensor.values():
        picked += [cs[0]] + ([cs[-1]] if len(cs) > 1 else [])
    return picked


def make(case):
    name = case["file"]
    data = tensors(name)
    trace = {}
    dk, file_id, salt = fixed(f"{name} data key"), fixed(f"{name} file id", 16), fixed(f"{name} nonce salt", 12)
    file = ref.write(data, case["recipients"], cipher=case["cipher"], data_key=dk, file_id=file_id,
                     nonce_salt=salt, chunk_size=CHUNK, alignment=case["alignment"], checksum=case["checksum"],
                     digests=case["digests"], signers=case["signers"], header_order=case.get("header_order"),
                     trace=trace)
    (HERE / name).write_bytes(file)
    # The oracle reads back what it wrote, with each recipient's key alone.
    for r in case["recipients"]:
        keys = {"symmetric": {r["kid"]: r["key"]}} if r["kind"] == "symmetric" else \
            {"x25519": {r["kid"]: X_ALICE if r["kid"] == "alice" else X_BOB}} if r["kind"] == "x25519" else \
            {"passphrases": ["wrong", PASSPHRASE]}
        trusted = [ed25519_public(s) for s in case["signers"]] or None
        _, plain, _ = ref.read(file, keys, trusted)
        assert plain == {n: d for n, (_, _, d) in data.items()}
    recipients = []
    for r, entry, k in zip(case["recipients"], trace["header"]["encryption"]["recipients"], trace["keks"]):
        context = r["kid"].encode() if r["kind"] == "symmetric" else b""
        if r["kind"] == "x25519":
            context = bytes.fromhex(entry["ephemeral_public_key"]) + r["public_key"]
        v = {"kind": r["kind"], "kid": r.get("kid"), "wrap_info": ref.wrap_info(r["kind"], context), "kek": k,
             "wrapped_key": entry["wrapped_key"]}
        if r["kind"] == "x25519":
            v.update(public_key=r["public_key"], ephemeral_secret=r["ephemeral_secret"],
                     ephemeral_public_key=entry["ephemeral_public_key"],
                     shared_secret=ref.x25519(r["ephemeral_secret"], r["public_key"]))
        if r["kind"] == "passphrase":
            v.update(argon2_output=ref.argon2id(PASSPHRASE, r["salt"], **ARGON2))
        recipients.append({k: x for k, x in v.items() if x is not None})
    order = case.get("header_order") or list(data)
    out = {
        "file": name, "about": case["about"], "file_sha256": ref.sha256(file), "file_len": len(file),
        "cipher": case["cipher"], "chunk_size": CHUNK, "alignment": case["alignment"],
        "data_key": dk, "file_id": file_id, "nonce_salt": salt, "recipients": recipients,
        "k_chunks": trace["k_chunks"], "k_mac": trace["k_mac"],
        "tag_table_len": 16 * len(trace["chunks"]), "tag_table_sha256": trace["tag_table_sha256"],
        "header_mac": trace["header_mac"], "footer": trace["footer"] or None,
        "tensors": [
            {"name": n, "index": order.index(n), "dtype": data[n][0], "shape": data[n][1],
             "len": len(data[n][2]), "chunks": ref.chunk_count(len(data[n][2]), CHUNK),
             "plaintext_sha256": ref.sha256(data[n][2]),
             **({"plaintext": data[n][2]} if len(data[n][2]) <= 64 else {})}
            for n in order
        ],
        "chunks": [{k: c[k] for k in ("tensor", "i", "j", "last", "nonce", "aad", "tag")}
                   for c in pick_chunks(trace)],
    }
    if case["signers"]:
        out.update(signers=[ed25519_public(s) for s in case["signers"]],
                   signed_message_sha256=trace["signed_message_sha256"], signatures=trace["signatures"])
    return hexed({k: v for k, v in out.items() if v is not None})


def main():
    files = [make(case) for case in CASES]
    vectors = {
        "about": "Known-answer vectors for docs/FORMAT.md sections 10 and 11, written by make_vectors.py "
                 "with reference.py, an implementation written from the spec. Bytes are lowercase hex.",
        "keys": "keys.json",
        "passphrase": PASSPHRASE,
        "labels": {"chunks": b"deathtensors v1 chunks".hex(), "header_mac": b"deathtensors v1 header mac".hex(),
                   "wrap_aad": ref.WRAP_AAD.hex()},
        "files": files,
    }
    (HERE / "vectors.json").write_text(json.dumps(vectors, indent=1, ensure_ascii=False) + "\n")
    keys = {"keys": [
        {"kty": "oct", "kid": SYM["kid"], "k": b64(SYM["key"])},
        {"kty": "oct", "kid": SYM16["kid"], "k": b64(SYM16["key"])},
        {"kty": "OKP", "crv": "X25519", "kid": "alice", "x": b64(ref.x25519_public(X_ALICE)), "d": b64(X_ALICE)},
        {"kty": "OKP", "crv": "Ed25519", "x": b64(ed25519_public(SIGNER)), "d": b64(SIGNER)},
    ]}
    (HERE / "keys.json").write_text(json.dumps(keys, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
