"""A signature over an encrypted file holds against the file's own
recipients (docs/FORMAT.md 11.2).

Bob, one of two recipients of a file the publisher signed, holds the data
key. He forges tensor ``w`` two ways: (1) rewriting two blocks of a chunk so
that its AES-GCM tag still verifies (GHASH is linear once its key is
known), and (2) re-encrypting the chunk with a new tag and rebuilding the
tag table and the header MAC. The publisher's signature still verifies in
both. Alice, the other recipient, must never get the forged tensor, on any
reading path, with or without a signature requirement; the error names the
tensor (or, for (2), the tag table the signed header commits to)."""

import base64
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import deathtensors as dt

pytest.importorskip("cryptography")
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402
from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: E402

CHUNK = 4096


def _b64(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _gf_mul(x, y):
    """x·y in GCM's GF(2^128) (NIST SP 800-38D, 6.3), blocks as big-endian ints."""
    r, z, v = 0xE1 << 120, 0, y
    for i in range(127, -1, -1):
        if (x >> i) & 1:
            z ^= v
        v = (v >> 1) ^ r if v & 1 else v >> 1
    return z


class Signed:
    """A file encrypted for alice and bob and signed by the publisher, and
    what bob (a recipient) learns from it."""

    def __init__(self, ref, path):
        self.alice = dt.generate_key("symmetric", kid="alice")
        self.bob = dt.generate_key("symmetric", kid="bob")
        self.publisher = dt.generate_key("ed25519", kid="publisher")
        self.w = np.arange(3000, dtype=np.float32)  # 12,000 bytes: three 4 KiB chunks
        self.b = np.full(7, 3, np.int16)
        dt.save(path, {"w": self.w, "b": self.b}, encrypt=[self.alice, self.bob], sign=self.publisher,
                chunk_size=CHUNK)
        self.path, self.ref = path, ref
        raw = path.read_bytes()
        (length,) = struct.unpack("<Q", raw[16:24])
        self.header = json.loads(raw[24:24 + length])
        e = self.header["encryption"]
        self.file_id, self.salt = bytes.fromhex(e["file_id"]), bytes.fromhex(e["nonce_salt"])
        entry = next(r for r in e["recipients"] if r["kid"] == "bob")
        dk = ref.unwrap(entry, self.file_id, e["cipher"], {"symmetric": {"bob": _b64(self.bob["k"])}})
        assert dk is not None, "bob is a recipient"
        self.k_chunks, self.k_mac = ref.file_keys(self.file_id, dk)
        names = list(self.header["tensors"])
        self.i = names.index("w")
        self.base = sum(ref.chunk_count(self._len(n), CHUNK) for n in names[: self.i])  # w's first tag
        self.t0 = ref.roundup(24 + length, 8)
        self.n_chunks = e["tag_table"]["length"] // 16
        self.data_start = ref.roundup(self.t0 + 16 * self.n_chunks + 32, max(64, self.header.get("alignment", 1)))
        self.w_start = self.data_start + self.header["tensors"]["w"]["data_offsets"][0]

    def _len(self, name):
        a, b = self.header["tensors"][name]["data_offsets"]
        return b - a

    def _aad(self, j):
        t = self.header["tensors"]["w"]
        last = j == self.ref.chunk_count(self._len("w"), CHUNK) - 1
        return self.ref.chunk_aad(self.file_id, self.i, "w", t["dtype"], t["shape"], j, last)

    def keep_tag(self, out):
        """(1): chunk 0's first two blocks changed, its tag unchanged."""
        raw = bytearray(self.path.read_bytes())
        c0 = self.w_start
        h = int.from_bytes(Cipher(algorithms.AES(self.k_chunks), modes.ECB()).encryptor().update(bytes(16)), "big")
        d1 = 1 << 100  # flips one bit of block 1
        d2 = _gf_mul(d1, h)  # so that GHASH, and the tag, stay the same
        for k, d in ((0, d1), (1, d2)):
            block = int.from_bytes(raw[c0 + 16 * k:c0 + 16 * k + 16], "big") ^ d
            raw[c0 + 16 * k:c0 + 16 * k + 16] = block.to_bytes(16, "big")
        tag = raw[self.t0 + 16 * self.base:self.t0 + 16 * self.base + 16]
        # The forgery is real: chunk 0 still opens under its old tag, to other plaintext.
        nonce = self.ref.chunk_nonce(self.salt, self.i, 0)
        forged = AESGCM(self.k_chunks).decrypt(nonce, bytes(raw[c0:c0 + CHUNK]) + bytes(tag), self._aad(0))
        assert forged != self.w.tobytes()[:CHUNK]
        out.write_bytes(bytes(raw))
        return out

    def new_tag(self, out):
        """(2): chunk 0 re-encrypted with a new tag; tag table and header MAC rebuilt."""
        raw = bytearray(self.path.read_bytes())
        c0 = self.w_start
        nonce = self.ref.chunk_nonce(self.salt, self.i, 0)
        plain = bytearray(self.w.tobytes()[:CHUNK])
        plain[:4] = np.float32(1e6).tobytes()
        sealed = AESGCM(self.k_chunks).encrypt(nonce, bytes(plain), self._aad(0))
        raw[c0:c0 + CHUNK] = sealed[:CHUNK]
        at = self.t0 + 16 * self.base
        raw[at:at + 16] = sealed[CHUNK:]
        mac_at = self.t0 + 16 * self.n_chunks
        import hmac
        import hashlib

        raw[mac_at:mac_at + 32] = hmac.new(self.k_mac, self.ref.mac_input(bytes(raw[:mac_at])), hashlib.sha256).digest()
        out.write_bytes(bytes(raw))
        return out


@pytest.fixture
def signed(ref, tmp_path):
    return Signed(ref, tmp_path / "signed.dt")


def _paths(f):
    """Every way a tensor leaves a DtFile."""
    return {
        "get_tensor": lambda: f.get_tensor("w", framework="numpy"),
        "get_tensor copy": lambda: f.get_tensor("w", framework="numpy", copy=True),
        "get_tensors": lambda: f.get_tensors(framework="numpy"),
        "get_tensors copy": lambda: f.get_tensors(framework="numpy", copy=True),
        "slice": lambda: f.get_tensor_slice("w", 0, 4, framework="numpy"),
        "slice of another chunk": lambda: f.get_tensor_slice("w", 2000, 4, framework="numpy"),
        "bytes": lambda: f.get_bytes("w"),
        "all bytes": lambda: f.get_all_bytes(),
    }


def test_the_intact_file_reads_on_every_path(signed):
    for requirement in ({}, {"trusted_signers": [signed.publisher]}, {"require_signature": True}):
        with dt.open(signed.path, keys=signed.alice, **requirement) as f:
            assert f.signers() == [dt.fingerprint(signed.publisher)]
            assert f.signature_covers() == "header and data"
            for name, read in _paths(f).items():
                read()
            assert np.array_equal(f.get_tensor("w", framework="numpy"), signed.w)


@pytest.mark.parametrize("requirement", [{}, {"trusted_signers": "publisher"}, {"require_signature": True}],
                         ids=["no requirement", "trusted signer", "require_signature"])
def test_a_tag_keeping_forgery_fails_every_reading_path(signed, tmp_path, requirement):
    forged = signed.keep_tag(tmp_path / "forged.dt")
    if requirement.get("trusted_signers"):
        requirement = {"trusted_signers": [signed.publisher]}
    with dt.open(forged, keys=signed.alice, **requirement) as f:
        # The signature verifies: the header is untouched.
        assert f.signers() == [dt.fingerprint(signed.publisher)]
        for name, read in _paths(f).items():
            with pytest.raises(dt.IntegrityError, match='"w"') as e:
                read()
            assert "corrupt" in str(e.value) or "digest" in str(e.value), (name, e.value)
        # The other tensor is intact and reads.
        assert np.array_equal(f.get_tensor("b", framework="numpy"), signed.b)
        with pytest.raises(dt.IntegrityError):
            f.verify()


def test_a_rebuilt_tag_table_fails_at_open(signed, tmp_path):
    forged = signed.new_tag(tmp_path / "retagged.dt")
    for requirement in ({}, {"trusted_signers": [signed.publisher]}):
        with pytest.raises(dt.DeathTensorsError, match="tag table"):
            dt.open(forged, keys=signed.alice, **requirement)


def test_the_drop_ins_refuse_the_forgery(signed, tmp_path):
    from deathtensors.safetensors import safe_open
    from deathtensors.safetensors.numpy import load_file

    forged = signed.keep_tag(tmp_path / "forged.dt")
    dt.register_keys(signed.alice)
    try:
        with safe_open(forged, framework="np") as f:
            with pytest.raises(Exception, match='"w"'):
                f.get_tensor("w")
            with pytest.raises(Exception, match='"w"'):
                f.get_slice("w")[0:4]
            assert np.array_equal(f.get_tensor("b"), signed.b)
        with pytest.raises(Exception, match='"w"'):
            load_file(forged)
        import deathtensors.cryptotensors as ct

        with ct.safe_open(forged, framework="np") as f:
            with pytest.raises(Exception, match='"w"'):
                f.get_tensor("w")
    finally:
        dt.register_keys()


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if k not in ("DEATHTENSORS_KEYS", "CRYPTOTENSOR_KEYS")}
    return subprocess.run([sys.executable, "-m", "deathtensors", *map(str, args)], capture_output=True, text=True,
                          env=env)


def test_the_command_line_refuses_the_forgery(signed, tmp_path):
    forged = signed.keep_tag(tmp_path / "forged.dt")
    key, pub = tmp_path / "alice.jwk", tmp_path / "publisher.pub.jwk"
    key.write_text(json.dumps(signed.alice))
    pub.write_text(json.dumps(dt.public_key(signed.publisher)))
    out = tmp_path / "out.dt"
    runs = {
        "decrypt": ["decrypt", str(forged), str(out), "--key", str(key)],
        "decrypt --signer": ["decrypt", str(forged), str(out), "--key", str(key), "--signer", str(pub)],
        "encrypt (re-encrypt)": ["encrypt", str(forged), str(out), "--key", str(key), "--recipient", str(key)],
        "verify --key": ["verify", str(forged), "--key", str(key)],
        "verify --signer --key": ["verify", str(forged), "--key", str(key), "--signer", str(pub)],
        "cat": ["cat", str(forged), "w", "--key", str(key)],
    }
    for name, args in runs.items():
        r = _cli(*args)
        assert r.returncode == 1, (name, r.returncode, r.stderr)
        assert '"w"' in r.stderr, (name, r.stderr)
        assert not out.exists(), f"{name} wrote {out}"
    # The intact file decrypts, with the signer required.
    r = _cli("decrypt", signed.path, out, "--key", key, "--signer", pub)
    assert r.returncode == 0, r.stderr
    with dt.open(out) as f:
        assert np.array_equal(f.get_tensor("w", framework="numpy"), signed.w)


def test_cryptotensors_signatures_say_they_cover_the_header_only(tmp_path):
    import deathtensors.cryptotensors.numpy as ctn

    enc = dt.generate_key("symmetric", kid="enc", format="cryptotensors")
    sign = dt.generate_key("ed25519", kid="sign", format="cryptotensors")
    path = tmp_path / "ct.safetensors"
    ctn.save_file({"w": np.arange(4, dtype=np.float32)}, path, config={"enc_key": enc, "sign_key": sign})
    with dt.open(path, keys=[enc, sign]) as f:
        assert f.signers() and f.signature_covers() == "header"
    with dt.open(path) as f:
        assert f.signature_covers() == "header"
    plain = tmp_path / "p.dt"
    dt.save(plain, {"w": np.arange(4, dtype=np.float32)})
    with dt.open(plain) as f:
        assert f.signature_covers() is None


def test_decrypt_takes_signature_requirements(tmp_path):
    key = dt.generate_key("symmetric", kid="k")
    signer, other = dt.generate_key("ed25519", kid="s"), dt.generate_key("ed25519", kid="o")
    (tmp_path / "k.jwk").write_text(json.dumps(key))
    (tmp_path / "s.pub.jwk").write_text(json.dumps(dt.public_key(signer)))
    (tmp_path / "o.pub.jwk").write_text(json.dumps(dt.public_key(other)))
    dt.save(tmp_path / "unsigned.dt", {"w": np.ones(3, np.float32)}, encrypt=key)
    dt.save(tmp_path / "signed.dt", {"w": np.ones(3, np.float32)}, encrypt=key, sign=signer)
    out = tmp_path / "out.dt"
    r = _cli("decrypt", tmp_path / "unsigned.dt", out, "--key", tmp_path / "k.jwk", "--require-signature")
    assert r.returncode == 1 and "not signed" in r.stderr.lower(), r.stderr
    r = _cli("decrypt", tmp_path / "signed.dt", out, "--key", tmp_path / "k.jwk", "--signer", tmp_path / "o.pub.jwk")
    assert r.returncode == 1 and "trusted" in r.stderr, r.stderr
    assert not out.exists()
    r = _cli("decrypt", tmp_path / "signed.dt", out, "--key", tmp_path / "k.jwk", "--signer", tmp_path / "s.pub.jwk")
    assert r.returncode == 0, r.stderr
    r = _cli("decrypt", tmp_path / "unsigned.dt", tmp_path / "out2.dt", "--key", tmp_path / "k.jwk")
    assert r.returncode == 0, r.stderr


def test_cryptotensors_cipher_must_agree_with_the_key(tmp_path):
    master = dt.generate_key("symmetric", kid="m", format="cryptotensors")  # alg aes256gcm
    sign = dt.generate_key("ed25519", kid="s", format="cryptotensors")
    (tmp_path / "m.jwk").write_text(json.dumps(master))
    (tmp_path / "s.jwk").write_text(json.dumps(sign))
    dt.save(tmp_path / "in.dt", {"w": np.ones(3, np.float32)})
    out = tmp_path / "out.safetensors"
    base = ["encrypt", tmp_path / "in.dt", out, "--format", "cryptotensors", "--recipient", tmp_path / "m.jwk",
            "--sign", tmp_path / "s.jwk"]
    r = _cli(*base, "--cipher", "chacha20-poly1305")
    assert r.returncode != 0 and "alg" in r.stderr and "chacha20poly1305" in r.stderr, r.stderr
    assert not out.exists()
    r = _cli(*base, "--cipher", "aes-256-gcm")
    assert r.returncode == 0, r.stderr
    r = _cli(*base)
    assert r.returncode == 0, r.stderr


def test_cryptotensors_keys_sharing_a_kid_are_each_tried(tmp_path):
    import deathtensors.cryptotensors.numpy as ctn

    old = dt.generate_key("symmetric", kid="m", format="cryptotensors")
    new = dt.generate_key("symmetric", kid="m", format="cryptotensors")
    sign_old = dt.generate_key("ed25519", kid="s", format="cryptotensors")
    sign_new = dt.generate_key("ed25519", kid="s", format="cryptotensors")
    path = tmp_path / "ct.safetensors"
    w = np.arange(5, dtype=np.float32)
    ctn.save_file({"w": w}, path, config={"enc_key": new, "sign_key": sign_new})
    # The rotated-out key comes first in both pairs: each key of the kid is tried.
    with dt.open(path, keys=[old, new, sign_old, sign_new]) as f:
        assert np.array_equal(f.get_tensor("w", framework="numpy"), w)
    with pytest.raises(dt.DeathTensorsError):
        dt.open(path, keys=[old, sign_new]).get_tensor("w", framework="numpy")
