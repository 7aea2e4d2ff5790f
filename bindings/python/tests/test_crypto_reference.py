"""Encrypted and signed files against testdata/crypto/reference.py, an
implementation of docs/FORMAT.md sections 10 and 11 written from the spec:
the oracle reads what deathtensors writes (every recipient kind, both
ciphers, with and without footer and signature), and deathtensors reads the
oracle's known-answer files. The oracle needs `cryptography` and
`argon2-cffi`; without them its tests are skipped."""

import base64
import hashlib
import json

import pytest

import deathtensors as dt
from conftest import TESTDATA

CRYPTO = TESTDATA / "crypto"
VECTORS = json.loads((CRYPTO / "vectors.json").read_text())

# Sizes around 4 KiB chunks: empty, one byte, a chunk minus one, a chunk, a chunk plus one, several.
TENSORS = {
    "empty": ("F32", [0, 3], b""),
    "scalar": ("U8", [], b"\x2a"),
    "odd": ("I8", [4095], bytes(range(256)) * 15 + bytes(range(255))),
    "weight": ("F32", [32, 32], bytes(range(256)) * 16),
    "über \"q\"": ("U8", [4097], hashlib.sha256(b"a").digest() * 128 + b"\x01"),
    "big": ("F4", [2, 12293], (hashlib.sha256(b"b").digest() * 385)[:12293]),
}


def raw(jwk, field):
    return base64.urlsafe_b64decode(jwk[field] + "=" * (-len(jwk[field]) % 4))


@pytest.fixture(scope="module")
def keys():
    sym = dt.generate_key("symmetric", kid="team")
    x = dt.generate_key("x25519", kid="alice")
    signer = dt.generate_key("ed25519")
    return {"symmetric": sym, "x25519": x, "ed25519": signer, "passphrase": "hunter2 ✓"}


RECIPIENTS = [["symmetric"], ["x25519"], ["passphrase"], ["x25519", "symmetric", "passphrase"]]


@pytest.mark.parametrize("cipher", ["AES-256-GCM", "CHACHA20-POLY1305"])
@pytest.mark.parametrize("kinds", RECIPIENTS, ids="+".join)
@pytest.mark.parametrize("checksum", [False, True])
@pytest.mark.parametrize("signed", [False, True])
def test_the_oracle_reads_what_we_write(tmp_path, ref, keys, cipher, kinds, checksum, signed):
    if "passphrase" in kinds and (checksum or signed or cipher != "AES-256-GCM"):
        pytest.skip("Argon2id with 64 MiB is slow; one passphrase file per recipient list is enough")
    recipients = [
        dt.Passphrase(keys["passphrase"]) if k == "passphrase"
        else dt.public_key(keys[k]) if k == "x25519" else keys[k]
        for k in kinds
    ]
    path = tmp_path / "m.dt"
    dt.save(path, TENSORS, encrypt=recipients, cipher=cipher, chunk_size=4096, checksum=checksum,
            sign=keys["ed25519"] if signed else None)
    signer = raw(keys["ed25519"], "x")
    # Each recipient alone opens the file.
    for k in kinds:
        secret = (
            {"passphrases": [keys["passphrase"]]} if k == "passphrase"
            else {k: {keys[k]["kid"]: raw(keys[k], "d" if k == "x25519" else "k")}}
        )
        header, plain, signers = ref.read(path.read_bytes(), secret, [signer] if signed else None)
        assert plain == {name: data for name, (_, _, data) in TENSORS.items()}
        assert signers == ([signer] if signed else [])
        assert header["encryption"]["cipher"] == cipher
        # Signing implies digests of the ciphertext (a co-recipient could forge under the tags).
        assert all(("sha256" in t) == (checksum or signed) for t in header["tensors"].values())


def test_the_oracle_refuses_a_wrong_key(tmp_path, ref, keys):
    path = tmp_path / "m.dt"
    dt.save(path, TENSORS, encrypt=keys["symmetric"], chunk_size=4096)
    with pytest.raises(ref.Invalid):
        ref.read(path.read_bytes(), {"symmetric": {"team": bytes(32)}})


@pytest.mark.parametrize("vector", VECTORS["files"], ids=lambda v: v["file"])
def test_we_read_the_oracles_files(vector):
    path = CRYPTO / vector["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == vector["file_sha256"]
    keys = [str(CRYPTO / VECTORS["keys"]), dt.Passphrase(VECTORS["passphrase"])]
    signers = [bytes.fromhex(k) for k in vector.get("signers", [])]
    with dt.open(path, keys=keys, trusted_signers=signers or None) as f:
        assert f.is_encrypted()
        assert list(f.keys()) == [t["name"] for t in vector["tensors"]]
        for t in vector["tensors"]:
            data = f.get_bytes(t["name"])
            assert hashlib.sha256(data).hexdigest() == t["plaintext_sha256"], t["name"]
        if "footer" in vector:
            assert f.verify() is True
