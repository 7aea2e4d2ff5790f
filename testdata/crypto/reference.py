"""A test oracle for deathtensors v1 encryption and signatures.

This is a second, independent implementation of docs/FORMAT.md sections 10
(encryption, flag bit 2) and 11 (signatures, flag bit 3), written from the
spec alone. It exists to check that the spec is precise enough to implement
and to produce known-answer vectors for the Rust code (make_vectors.py). It is
a test oracle, not a library: it holds whole files in memory, takes every
random value as an argument, and trusts its inputs no more than a test needs.

Only the standard library, `cryptography` and `argon2-cffi` are used.
"""

import hashlib
import hmac
import json
import struct

from argon2.low_level import Type, hash_secret_raw
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

MAGIC = b"DTLEGION"
CHECKSUM, ENCRYPTED, SIGNED = 0x2, 0x4, 0x8
SIG_MAGIC = b"DTSIGEND"
WRAP_AAD = b"deathtensors v1 data key"
CIPHERS = {"AES-256-GCM": AESGCM, "CHACHA20-POLY1305": ChaCha20Poly1305}
# Section 4: bits per element.
BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
        "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
        "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64, "C128": 128}


class Invalid(Exception):
    """The file breaks a rule of the spec, or a key does not open it."""


def roundup(n, a):
    return (n + a - 1) // a * a


def sha256(b):
    return hashlib.sha256(b).digest()


def byte_len(dtype, shape):
    numel = 1
    for d in shape:
        numel *= d
    assert numel * BITS[dtype] % 8 == 0
    return numel * BITS[dtype] // 8


# --- Section 10.3: key derivation and wrapping ------------------------------------------------

def hkdf(salt, ikm, info, length=32):
    """HKDF-SHA256 (RFC 5869), written out so that nothing is hidden."""
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    out, block, n = b"", b"", 1
    while len(out) < length:
        block = hmac.new(prk, block + info + bytes([n]), hashlib.sha256).digest()
        out, n = out + block, n + 1
    return out[:length]


def wrap_info(kind, context):
    return b"deathtensors v1 key wrap\0" + kind.encode() + b"\0" + context


def x25519(secret, public):
    """The shared secret; an all-zero one (a low-order public key) is refused."""
    try:
        shared = X25519PrivateKey.from_private_bytes(secret).exchange(X25519PublicKey.from_public_bytes(public))
    except ValueError:  # `cryptography` refuses the all-zero result itself.
        shared = bytes(32)
    if shared == bytes(32):
        raise Invalid("all-zero X25519 shared secret")
    return shared


def x25519_public(secret):
    return X25519PrivateKey.from_private_bytes(secret).public_key().public_bytes_raw()


def argon2id(passphrase, salt, memory_kib, iterations, parallelism):
    return hash_secret_raw(passphrase.encode(), salt, time_cost=iterations, memory_cost=memory_kib,
                           parallelism=parallelism, hash_len=32, type=Type.ID, version=19)


def kek(file_id, kind, ikm, context):
    return hkdf(file_id, ikm, wrap_info(kind, context))


def mac_input(covered):
    """What the header MAC covers: the bytes given, flag bit 3 (signed) cleared."""
    b = bytearray(covered)
    b[12] &= ~SIGNED & 0xFF
    return bytes(b)


def file_keys(file_id, dk):
    """(K_chunks, K_mac) from the data key."""
    return (hkdf(file_id, dk, b"deathtensors v1 chunks"), hkdf(file_id, dk, b"deathtensors v1 header mac"))


def make_recipient(r, file_id, cipher, dk):
    """A recipient entry (section 10.2), and its KEK, from a description of the key.

    r is one of {"kind": "symmetric", "kid", "key"}, {"kind": "x25519", "kid", "public_key",
    "ephemeral_secret"} or {"kind": "passphrase", "passphrase", "salt", "memory_kib",
    "iterations", "parallelism"}; binary values are bytes.
    """
    kind = r["kind"]
    if kind == "symmetric":
        entry, k = {"kind": kind, "kid": r["kid"]}, kek(file_id, kind, r["key"], r["kid"].encode())
    elif kind == "x25519":
        epk = x25519_public(r["ephemeral_secret"])
        entry = {"kind": kind, "kid": r["kid"], "ephemeral_public_key": epk.hex()}
        k = kek(file_id, kind, x25519(r["ephemeral_secret"], r["public_key"]), epk + r["public_key"])
    else:
        params = {p: r[p] for p in ("memory_kib", "iterations", "parallelism")}
        entry = {"kind": kind, "kdf": "argon2id", **params, "salt": r["salt"].hex()}
        k = kek(file_id, kind, argon2id(r["passphrase"], r["salt"], **params), b"")
    entry["wrapped_key"] = CIPHERS[cipher](k).encrypt(bytes(12), dk, WRAP_AAD).hex()
    return entry, k


def unwrap(entry, file_id, cipher, keys):
    """The data key, if one of `keys` opens this recipient entry; else None."""
    kind, wrapped = entry["kind"], bytes.fromhex(entry["wrapped_key"])
    if kind == "symmetric" and entry["kid"] in keys.get("symmetric", {}):
        candidates = [kek(file_id, kind, keys["symmetric"][entry["kid"]], entry["kid"].encode())]
    elif kind == "x25519" and entry["kid"] in keys.get("x25519", {}):
        secret, epk = keys["x25519"][entry["kid"]], bytes.fromhex(entry["ephemeral_public_key"])
        try:  # An all-zero shared secret refuses this entry; the next may still open the file.
            candidates = [kek(file_id, kind, x25519(secret, epk), epk + x25519_public(secret))]
        except Invalid:
            return None
    elif kind == "passphrase":
        assert entry["kdf"] == "argon2id"
        params = [entry[p] for p in ("memory_kib", "iterations", "parallelism")]
        salt = bytes.fromhex(entry["salt"])
        candidates = [kek(file_id, kind, argon2id(p, salt, *params), b"") for p in keys.get("passphrases", [])]
    else:
        return None
    for k in candidates:
        try:
            return CIPHERS[cipher](k).decrypt(bytes(12), wrapped, WRAP_AAD)
        except Exception:
            pass
    return None


# --- Sections 10.4 and 10.5: chunks, nonces and associated data -------------------------------

def chunk_count(n, chunk_size):
    return max(1, -(-n // chunk_size))


def chunk_nonce(nonce_salt, i, j):
    return bytes(a ^ b for a, b in zip(nonce_salt, struct.pack("<IQ", i, j)))


def chunk_aad(file_id, i, name, dtype, shape, j, last):
    name_b = name.encode()
    return (b"deathtensors v1 chunk" + file_id + struct.pack("<I", i)
            + struct.pack("<Q", len(name_b)) + name_b
            + bytes([len(dtype)]) + dtype.encode()
            + struct.pack("<Q", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
            + struct.pack("<QB", j, int(last)))


def chunks(i, name, dtype, shape, n, enc):
    """(j, last, nonce, aad, start, end) for every chunk of tensor i."""
    count = chunk_count(n, enc["chunk_size"])
    for j in range(count):
        start, end = j * enc["chunk_size"], min((j + 1) * enc["chunk_size"], n)
        yield (j, j == count - 1, chunk_nonce(enc["nonce_salt"], i, j),
               chunk_aad(enc["file_id"], i, name, dtype, shape, j, j == count - 1), start, end)


# --- Writing ----------------------------------------------------------------------------------

def encode_json(header):
    # Compact, raw UTF-8, control characters as \u00xx: serde_json's escaping (section 5).
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()


def write(tensors, recipients, *, cipher, data_key, file_id, nonce_salt, chunk_size=1 << 20,
          alignment=64, checksum=False, digests=False, signers=(), global_metadata=None,
          created_by=None, header_order=None, space_pad=True, trace=None):
    """The bytes of an encrypted deathtensors v1 file.

    tensors: dict name -> (dtype, shape, plaintext bytes), laid out in this order (section 5).
    recipients: list of make_recipient descriptions. signers: Ed25519 seeds (32 bytes).
    digests: write every tensor's sha256 (of its ciphertext). header_order: the order of
    the names in the JSON, if not the layout order. space_pad=False leaves the JSON
    unpadded, so that NUL bytes pad it to 8 (10.1). trace: a dict that receives the
    intermediate values.
    """
    trace = {} if trace is None else trace
    enc = {"chunk_size": chunk_size, "file_id": file_id, "nonce_salt": nonce_salt}
    aead = CIPHERS[cipher]
    # Layout: each tensor at the previous end rounded up to the alignment (section 5).
    offsets, covered = {}, 0
    for name, (dtype, shape, data) in tensors.items():
        assert len(data) == byte_len(dtype, shape)
        start = roundup(covered, alignment)
        offsets[name], covered = (start, start + len(data)), start + len(data)
    blob = bytearray(covered)
    order = list(header_order or tensors)
    entries = [make_recipient(r, file_id, cipher, data_key) for r in recipients]
    trace["keks"] = [k for _, k in entries]
    k_chunks, k_mac = file_keys(file_id, data_key)
    trace.update(k_chunks=k_chunks, k_mac=k_mac, chunks=[])
    tags = []
    for i, name in enumerate(order):
        dtype, shape, data = tensors[name]
        base = offsets[name][0]
        for j, last, nonce, aad, s, e in chunks(i, name, dtype, shape, len(data), enc):
            out = aead(k_chunks).encrypt(nonce, data[s:e], aad)
            blob[base + s:base + e], tag = out[:-16], out[-16:]
            tags.append(tag)
            trace["chunks"].append(dict(tensor=name, i=i, j=j, last=last, nonce=nonce, aad=aad, tag=tag))
    table = b"".join(tags)
    header = {"format": "deathtensors", "format_version": 1}
    if created_by is not None:
        header["created_by"] = created_by
    header["alignment"] = alignment
    header["encryption"] = {
        "cipher": cipher, "chunk_size": chunk_size, "file_id": file_id.hex(), "nonce_salt": nonce_salt.hex(),
        "tag_table": {"length": len(table), "sha256": sha256(table).hex()},
        "recipients": [e for e, _ in entries],
    }
    header["global_metadata"] = dict(sorted((global_metadata or {}).items()))
    header["tensors"] = {}
    for name in order:
        dtype, shape, _ = tensors[name]
        a, b = offsets[name]
        # Empty per-tensor metadata is not written (FORMAT.md section 5).
        entry = {"dtype": dtype, "shape": list(shape), "data_offsets": [a, b]}
        if digests:
            entry["sha256"] = sha256(bytes(blob[a:b])).hex()
        header["tensors"][name] = entry
    text = encode_json(header)
    # The encoder pads with spaces so that 24 + L is a multiple of max(64, alignment).
    length = roundup(24 + len(text), max(64, alignment)) - 24 if space_pad else len(text)
    flags = ENCRYPTED | (CHECKSUM if checksum else 0) | (SIGNED if signers else 0)
    head = MAGIC + struct.pack("<IIQ", 1, flags, length) + text.ljust(length, b" ")
    file = head + b"\0" * (roundup(len(head), 8) - len(head)) + table
    # The MAC covers the prefix with flag bit 3 (signed) cleared (FORMAT.md 10.6).
    mac = hmac.new(k_mac, mac_input(file), hashlib.sha256).digest()
    file += mac
    file += b"\0" * (roundup(len(file), max(64, alignment)) - len(file)) + bytes(blob)
    footer = sha256(file[24:]) if checksum else b""
    file += footer
    trace.update(header=header, tag_table_sha256=sha256(table), header_mac=mac, footer=footer)
    if signers:
        message = b"deathtensors v1 signature\0" + head + footer
        records = []
        for seed in signers:
            key = Ed25519PrivateKey.from_private_bytes(seed)
            records.append(key.public_key().public_bytes_raw() + key.sign(message))
        trace.update(signed_message_sha256=sha256(message), signatures=[r[32:] for r in records])
        file += b"".join(records) + struct.pack("<II", len(records), 0) + SIG_MAGIC
    return file


# --- Reading ----------------------------------------------------------------------------------

def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Invalid("duplicate key")
    return dict(pairs)


def read(file, keys, trusted=None):
    """Checks an encrypted file and returns (header, {name: plaintext}, [signer public keys]).

    keys: {"symmetric": {kid: bytes}, "x25519": {kid: secret bytes}, "passphrases": [str]}.
    trusted: Ed25519 public keys, one of which must have signed the file (None: no requirement).
    """
    if file[:8] != MAGIC:
        raise Invalid("magic")
    version, flags, length = struct.unpack("<IIQ", file[8:24])
    if version != 1 or flags & ~0xF or not flags & ENCRYPTED or flags & 1:
        raise Invalid("prefix")
    body, signers = file, []
    if flags & SIGNED:  # Section 11.1: the block is read from the end.
        count, zero = struct.unpack("<II", file[-16:-8])
        if file[-8:] != SIG_MAGIC or zero != 0 or not 1 <= count <= 64:
            raise Invalid("signature trailer")
        block = file[-16 - 96 * count:-16]
        body = file[:-16 - 96 * count]
        signers = [block[k:k + 32] for k in range(0, len(block), 96)]
        if len(set(signers)) != len(signers):
            raise Invalid("duplicate signer")
    footer = b""
    if flags & CHECKSUM:
        body, footer = body[:-32], body[-32:]
        if sha256(body[24:]) != footer:
            raise Invalid("footer")
    if flags & SIGNED:
        message = b"deathtensors v1 signature\0" + file[:24 + length] + footer
        for k in range(0, len(block), 96):
            # verify() raises InvalidSignature: every record must verify.
            Ed25519PublicKey.from_public_bytes(block[k:k + 32]).verify(block[k + 32:k + 96], message)
    if trusted is not None and not set(signers) & set(trusted):
        raise Invalid("no trusted signer")
    header = json.loads(file[24:24 + length].decode(), object_pairs_hook=no_duplicates)
    e = header["encryption"]
    assert e["cipher"] in CIPHERS and e["chunk_size"] & (e["chunk_size"] - 1) == 0
    enc = {"chunk_size": e["chunk_size"], "file_id": bytes.fromhex(e["file_id"]),
           "nonce_salt": bytes.fromhex(e["nonce_salt"])}
    alignment = header.get("alignment", 1)
    tensors = header["tensors"]
    n_chunks = sum(chunk_count(t["data_offsets"][1] - t["data_offsets"][0], enc["chunk_size"])
                   for t in tensors.values())
    t0 = roundup(24 + length, 8)
    if file[24 + length:t0].strip(b"\0") or e["tag_table"]["length"] != 16 * n_chunks:
        raise Invalid("padding or tag table length")
    table = file[t0:t0 + 16 * n_chunks]
    if sha256(table).hex() != e["tag_table"]["sha256"]:
        raise Invalid("tag table digest")
    mac = file[t0 + 16 * n_chunks:t0 + 16 * n_chunks + 32]
    start = roundup(t0 + 16 * n_chunks + 32, max(64, alignment))
    if body[t0 + 16 * n_chunks + 32:start].strip(b"\0"):
        raise Invalid("padding after the header MAC")
    blob = body[start:]
    if len(blob) != max([t["data_offsets"][1] for t in tensors.values()], default=0):
        raise Invalid("blob length")
    dk = next((k for k in (unwrap(r, enc["file_id"], e["cipher"], keys) for r in e["recipients"]) if k), None)
    if dk is None:
        raise Invalid("no key opens a recipient")
    k_chunks, k_mac = file_keys(enc["file_id"], dk)
    if not hmac.compare_digest(hmac.new(k_mac, mac_input(file[:t0 + 16 * n_chunks]), hashlib.sha256).digest(), mac):
        raise Invalid("header MAC")
    out, tag_at = {}, 0
    for i, (name, t) in enumerate(tensors.items()):
        a, b = t["data_offsets"]
        if "sha256" in t and sha256(blob[a:b]).hex() != t["sha256"]:
            raise Invalid(f"sha256 of {name}")
        plain = bytearray()
        for j, last, nonce, aad, s, end in chunks(i, name, t["dtype"], t["shape"], b - a, enc):
            tag = table[16 * tag_at:16 * tag_at + 16]
            tag_at += 1
            try:
                plain += CIPHERS[e["cipher"]](k_chunks).decrypt(nonce, blob[a + s:a + end] + tag, aad)
            except Exception:
                raise Invalid(f"decrypt {name} chunk {j}") from None
        out[name] = bytes(plain)
    return header, out, signers
