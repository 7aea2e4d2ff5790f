#!/usr/bin/env python3
"""Writes the hostile files of testdata/invalid/ and their manifest.json.

Every file here must be rejected by `Head::parse` with the `ErrorKind` variant
that manifest.json lists for it. Each file breaks exactly one rule: apart from
the fault it is named after, it is a valid deathtensors v1, safetensors or
bintensors 0.2 file.

Run from anywhere with `python3 testdata/invalid/make.py`. Python 3 standard
library only; the output is the same on every run (no randomness, no dates).
"""

import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
KEEP = {"make.py", "README.md", "manifest.json"}

MAGIC = b"DTLEGION"
FLAG_ZSTD = 1 << 0
FLAG_CHECKSUM = 1 << 1
FLAG_ENCRYPTED = 1 << 2
FLAG_SIGNED = 1 << 3
FLAG_SEALED = 1 << 4
FLAG_COMPRESSED = 1 << 5
FOOTER_LEN = 32
# Limits::DEFAULT of deathtensors-format.
MAX_HEADER_LEN = 4 << 30  # Limits::DEFAULT_MAX_HEADER_LEN
SAFETENSORS_MAX_HEADER = 100_000_000
RANK_LIMIT = 64
MAX_NAME_LEN = 4096
U64_MAX = 2**64 - 1

# ---------------------------------------------------------------- JSON text


class Raw(str):
    """JSON text written as is: numbers Python would print differently, bad syntax."""


class Obj:
    """A JSON object as a list of pairs, so that a key can appear twice."""

    def __init__(self, pairs):
        self.pairs = list(pairs)


def enc(v):
    """Compact JSON text of `v`. Non-ASCII characters are written raw (UTF-8)."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, Obj):
        return "{" + ",".join(enc(k) + ":" + enc(x) for k, x in v.pairs) + "}"
    if isinstance(v, dict):
        return enc(Obj(v.items()))
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(enc(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def text(v):
    return v if isinstance(v, bytes) else enc(v).encode("utf-8")


# ---------------------------------------------------------------- builders

# Eight bytes of data: two F32 ones.
ONES = struct.pack("<2f", 1.0, 1.0)


def seq(v):
    """Tuples become JSON arrays; anything else (a Raw, an object) is kept as is."""
    return list(v) if isinstance(v, tuple) else v


def dt_tensor(dtype="F32", shape=(2,), offsets=(0, 8), **extra):
    t = {"dtype": dtype, "shape": seq(shape), "data_offsets": seq(offsets), "metadata": {}}
    t.update(extra)
    return t


OMIT = object()


def dt_top(tensors=None, **fields):
    """A deathtensors header; a field set to OMIT is left out."""
    top = {
        "format": "deathtensors",
        "format_version": 1,
        "created_by": "testdata/invalid/make.py",
        "global_metadata": {},
        "tensors": {"w": dt_tensor()} if tensors is None else tensors,
    }
    top.update(fields)
    return {k: v for k, v in top.items() if v is not OMIT}


def dt(header=None, *, data=ONES, flags=0, version=1, magic=MAGIC, header_len=None, pad=None, footer=b""):
    """A deathtensors v1 file: prefix, JSON, NUL padding to 8, data, footer."""
    body = text(dt_top() if header is None else header)
    n = len(body) if header_len is None else header_len
    out = magic + struct.pack("<IIQ", version, flags, n) + body
    out += b"\0" * (-len(out) % 8) if pad is None else pad
    return out + data + footer


def st_tensor(dtype="F32", shape=(2,), offsets=(0, 8), **extra):
    t = {"dtype": dtype, "shape": seq(shape), "data_offsets": seq(offsets)}
    t.update(extra)
    return t


def st_top(tensors=None, metadata=None):
    top = {}
    if metadata is not None:
        top["__metadata__"] = metadata
    top.update({"w": st_tensor()} if tensors is None else tensors)
    return top


def st(header=None, *, data=ONES, header_len=None):
    """A safetensors file: length, JSON padded with spaces to 8 bytes, data."""
    body = text(st_top() if header is None else header)
    body += b" " * (-len(body) % 8)
    n = len(body) if header_len is None else header_len
    return struct.pack("<Q", n) + body + data


# bintensors 0.2: an 8-byte length, then bincode 2 (standard: varints) of
# (Option<metadata map>, list of (name, dtype index, shape, (begin, end))),
# padded with spaces to a multiple of 8. Index 11 is F32.
BT_F32 = 11
BT_U8 = 1


def bt_varint(v):
    """bincode's shortest varint of `v`."""
    if v <= 250:
        return bytes([v])
    if v < 2**16:
        return b"\xfb" + struct.pack("<H", v)
    if v < 2**32:
        return b"\xfc" + struct.pack("<I", v)
    return b"\xfd" + struct.pack("<Q", v)


def bt_str(s):
    b = s if isinstance(s, bytes) else s.encode("utf-8")
    return bt_varint(len(b)) + b


def bt_entry(name="a", dtype=BT_F32, shape=(2,), offsets=(0, 8)):
    out = bt_str(name) + bt_varint(dtype) + bt_varint(len(shape)) + b"".join(bt_varint(d) for d in shape)
    return out + bt_varint(offsets[0]) + bt_varint(offsets[1])


def bt_body(entries=None, metadata=None):
    """The encoded header: metadata (None, or a list of pairs) and raw entries."""
    if metadata is None:
        out = b"\x00"
    else:
        out = b"\x01" + bt_varint(len(metadata)) + b"".join(bt_str(k) + bt_str(v) for k, v in metadata)
    entries = [bt_entry()] if entries is None else entries
    return out + bt_varint(len(entries)) + b"".join(entries)


def bt(body=None, *, data=ONES, pad=None, header_len=None):
    """A bintensors file: length, header padded with spaces to 8 bytes, data."""
    body = bt_body() if body is None else body
    body += b" " * (-len(body) % 8) if pad is None else pad
    n = len(body) if header_len is None else header_len
    return struct.pack("<Q", n) + body + data


# ---------------------------------------------------------------- the corpus

FILES = {}


def add(name, data, kind, why, limits=None):
    assert name not in FILES, name
    assert why.endswith(".") and "\n" not in why, name
    entry = {"kind": kind, "why": why}
    if limits:
        entry["limits"] = limits
    FILES[name] = (data, entry)


def two(tensor, a, b):
    """Tensors "a" and "b" of two F32 each (built by `tensor`), at offsets `a` and `b`."""
    return {"a": tensor(offsets=a), "b": tensor(offsets=b)}


def both(stem, kind, why, dt_file, st_file, limits=None):
    add(f"dt-{stem}.deathtensors", dt_file, kind, why, limits)
    add(f"st-{stem}.safetensors", st_file, kind, why, limits)


def both_tensor(stem, kind, why, **fields):
    """The same faulty tensor fields in a file of each format."""
    both(stem, kind, why, dt(dt_top({"w": dt_tensor(**fields)})), st(st_top({"w": st_tensor(**fields)})))


def name_case(stem, kind, why, name):
    both(
        stem,
        kind,
        why,
        dt(dt_top({name: dt_tensor()})),
        st(st_top({name: st_tensor()})),
    )


LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    b"size 548105171\n"
)
HTML_PAGE = (
    b"\n<!DOCTYPE html>\n<html lang=\"en\">\n<head><title>Sign in</title></head>\n"
    b"<body><p>You need to sign in to download this model.</p></body>\n</html>\n"
)
XML_ERROR = (
    b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>\n"
)
# The opening of torch.save's legacy format: protocol 2, then a global.
PICKLE = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01X\x06\x00\x00\x00weightq\x02.\n"
# A zip local file header as torch.save writes it (archive/data.pkl, stored).
ZIP = b"PK\x03\x04" + struct.pack("<HHHHHIIIHH", 20, 0, 0, 0, 0, 0, 0, 0, 16, 0) + b"archive/data.pkl"
INDEX_JSON = text(
    {
        "metadata": {"total_size": 16},
        "weight_map": {"w": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"},
    }
)


def build():
    # ---- not a file of either format
    add("empty.safetensors", b"", "UnrecognizedFormat", "A zero-byte file is neither format.")
    add("lfs-pointer.safetensors", LFS_POINTER, "UnrecognizedFormat", "A Git LFS pointer checked out instead of the file it points to.")
    add("lfs-pointer.deathtensors", LFS_POINTER, "UnrecognizedFormat", "A Git LFS pointer checked out instead of the file it points to.")
    add("html-page.safetensors", HTML_PAGE, "UnrecognizedFormat", "A download that returned a sign-in web page (with a leading newline).")
    add("xml-error-page.safetensors", XML_ERROR, "UnrecognizedFormat", "A storage service's XML error document saved as the file.")
    add("pytorch-pickle.bin", PICKLE, "UnrecognizedFormat", "A legacy PyTorch pickle, which must never reach a loader that expects tensors.")
    add("pytorch-zip.pt", ZIP, "UnrecognizedFormat", "A zip archive as torch.save writes it.")
    add("gzip.safetensors", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\x00" * 14, "UnrecognizedFormat", "A gzip-compressed file.")
    add("gguf.safetensors", b"GGUF\x03\x00\x00\x00" + b"\x00" * 16, "UnrecognizedFormat", "A GGUF file.")
    add("npy.safetensors", b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n", "UnrecognizedFormat", "A numpy .npy file.")
    add("index-json.safetensors", INDEX_JSON, "UnrecognizedFormat", "A sharded checkpoint's index JSON instead of a shard.")
    add("text-file.safetensors", b"this is not a tensor file, it is a short note\n", "UnrecognizedFormat", "Plain text, whose first 8 bytes read as a huge safetensors header length.")

    # ---- deathtensors prefix
    add("dt-truncated-prefix-magic-only.deathtensors", MAGIC, "Truncated", "The file ends right after the magic, inside the 24-byte prefix.")
    add("dt-truncated-prefix-20-bytes.deathtensors", dt()[:20], "Truncated", "The file ends inside the header length field of the prefix.")
    add("dt-truncated-magic.deathtensors", MAGIC[:5], "Truncated", "The file ends inside the magic number.")
    add("dt-bad-magic-lowercase.deathtensors", dt(magic=b"dtlegion"), "UnrecognizedFormat", "The magic is spelt in lowercase; magic numbers are exact.")
    add("dt-bad-magic-digit-zero.deathtensors", dt(magic=b"DTLEGI0N"), "UnrecognizedFormat", "The magic has a digit zero for the letter O.")
    add("dt-version-0.deathtensors", dt(version=0), "UnsupportedVersion", "Prefix version 0 does not exist.")
    add("dt-version-2.deathtensors", dt(version=2), "UnsupportedVersion", "Prefix version 2 is from the future.")
    add("dt-version-u32-max.deathtensors", dt(version=2**32 - 1), "UnsupportedVersion", "Prefix version 0xffffffff.")
    add("dt-unknown-flag-bit6.deathtensors", dt(flags=1 << 6), "UnknownFlags", "Flag bit 6 is not defined, so an old reader must refuse the file.")
    add("dt-unknown-flag-bit31.deathtensors", dt(flags=1 << 31), "UnknownFlags", "Flag bit 31 is not defined.")
    add("dt-unknown-flags-all.deathtensors", dt(flags=2**32 - 1), "UnknownFlags", "Every flag bit is set, undefined ones included.")
    add("dt-encrypted-flag.deathtensors", dt(flags=FLAG_ENCRYPTED), "MissingField", "Flag bit 2 (encryption) is set but the header has no encryption section.")
    add("dt-encrypted-checksum-flags.deathtensors", dt(flags=FLAG_ENCRYPTED | FLAG_CHECKSUM, footer=bytes(FOOTER_LEN)), "MissingField", "Encryption with a checksum footer, and still no encryption section.")
    add("dt-encrypted-zstd-flags.deathtensors", dt(flags=FLAG_ENCRYPTED | FLAG_ZSTD), "Unsupported", "Encryption cannot be combined with whole-blob zstd.")

    # ---- compression section (docs/FORMAT.md section 15). The tensor "w" is
    # 2,000 U8 bytes (one chunk of 4,096 at most) stored in 100 bytes.
    def comp(tables=None, **fields):
        c = {"codec": "zstd", "level": 3, "chunk_size": 4096, "tensors": {"w": [100]} if tables is None else tables}
        c.update(fields)
        return {k: v for k, v in c.items() if v is not OMIT}

    def cw(offsets=(0, 100)):
        return dt_tensor("U8", (2000,), offsets)

    def cdt(section=None, tensors=None, flags=FLAG_COMPRESSED, data=bytes(100)):
        top = dt_top({"w": cw()} if tensors is None else tensors, compression=comp() if section is None else section)
        return dt(top, data=data, flags=flags)

    add("dt-compressed-no-section.deathtensors", dt(flags=FLAG_COMPRESSED), "MissingField", "Flag bit 5 (per-tensor compression) is set but the header has no compression section.")
    add("dt-compression-without-flag.deathtensors", cdt(flags=0), "Unsupported", "A compression section without flag bit 5.")
    add("dt-compressed-zstd-flags.deathtensors", cdt(flags=FLAG_COMPRESSED | FLAG_ZSTD), "Unsupported", "Per-tensor compression cannot be combined with whole-blob zstd.")
    add("dt-compressed-encrypted-flags.deathtensors", cdt(flags=FLAG_COMPRESSED | FLAG_ENCRYPTED), "Unsupported", "Per-tensor compression cannot be combined with encryption.")
    add("dt-compression-bad-codec.deathtensors", cdt(comp(codec="lz4")), "InvalidCompression", "The codec is lz4; only zstd is defined.")
    add("dt-compression-level-0.deathtensors", cdt(comp(level=0)), "InvalidCompression", "Level 0 is outside zstd's 1 to 22.")
    add("dt-compression-chunk-size-not-power.deathtensors", cdt(comp(chunk_size=5000)), "InvalidCompression", "A chunk size of 5,000 is not a power of two.")
    add("dt-compression-chunk-size-huge.deathtensors", cdt(comp(chunk_size=2**27)), "InvalidCompression", "A chunk size of 128 MiB is over the 64 MiB cap.")
    add("dt-compression-missing-codec.deathtensors", cdt(comp(codec=OMIT)), "MissingField", "The compression section has no codec.")
    add("dt-compression-unknown-field.deathtensors", cdt(comp(window=1)), "UnknownField", "The compression section has a field the format does not define.")
    add("dt-compression-chunk-longer-than-raw.deathtensors", cdt(comp({"w": [2001]}), {"w": cw((0, 2001))}, data=bytes(2001)), "InvalidCompression", "A chunk stores 2,001 bytes for 2,000 raw bytes: stored chunks are never longer than raw ones.")
    add("dt-compression-chunk-zero.deathtensors", cdt(comp({"w": [0]}), {"w": cw((0, 0))}, data=b""), "InvalidCompression", "A chunk of zero stored bytes cannot decompress to 2,000.")
    add("dt-compression-too-many-chunks.deathtensors", cdt(comp({"w": [50, 50]})), "InvalidCompression", "Two chunks for 2,000 raw bytes, which take one chunk of 4,096.")
    add("dt-compression-sizes-lie.deathtensors", cdt(comp({"w": [90]})), "ByteLengthMismatch", "The chunk table adds up to 90 stored bytes but data_offsets span 100.")
    add("dt-compression-unknown-tensor.deathtensors", cdt(comp({"x": [100]})), "InvalidCompression", "The chunk table names a tensor the header does not have.")
    add("dt-compression-table-not-array.deathtensors", cdt(comp({"w": 100})), "WrongType", "A chunk table is a number, not an array of lengths.")
    add("dt-compression-chunk-budget.deathtensors", cdt(comp({"w": [100]})), "LimitExceeded", "One chunk over a budget of zero chunks (max_chunks).", limits={"max_chunks": 0})
    add("dt-compression-overlap.deathtensors", cdt(comp({"w": [100], "v": [100]}), {"w": cw((0, 100)), "v": cw((50, 150))}, data=bytes(150)), "Overlap", "Two compressed tensors whose stored ranges overlap.")
    add("dt-compression-out-of-range.deathtensors", cdt(data=bytes(60)), "OffsetOutOfBounds", "The stored range of a compressed tensor runs past the end of the blob.")

    # ---- encryption section (docs/FORMAT.md section 10)
    def section(**fields):
        """A well-formed encryption section for the one 8-byte tensor `w` (one chunk)."""
        e = {
            "cipher": "AES-256-GCM",
            "chunk_size": 1 << 20,
            "file_id": "00" * 16,
            "nonce_salt": "11" * 12,
            "tag_table": {"length": 16, "sha256": "22" * 32},
            "recipients": [{"kind": "symmetric", "kid": "k1", "wrapped_key": "33" * 48}],
        }
        e.update(fields)
        return {k: v for k, v in e.items() if v is not OMIT}

    def sym(**fields):
        r = {"kind": "symmetric", "kid": "k1", "wrapped_key": "33" * 48}
        r.update(fields)
        return {k: v for k, v in r.items() if v is not OMIT}

    def pw(**fields):
        r = {"kind": "passphrase", "kdf": "argon2id", "memory_kib": 65536, "iterations": 3, "parallelism": 1, "salt": "44" * 16, "wrapped_key": "33" * 48}
        r.update(fields)
        return r

    def encrypted(sec, flags=FLAG_ENCRYPTED):
        # Head, then the tag table and MAC, then the blob: enough bytes that only the section can be at fault.
        return dt(dt_top(encryption=sec), data=bytes(16 + 32 + 64) + ONES, flags=flags)

    bad_sections = [
        ("cipher-unknown", section(cipher="AES-128-CBC"), "InvalidEncryption", "The cipher is not AES-256-GCM or CHACHA20-POLY1305."),
        ("cipher-lowercase", section(cipher="aes-256-gcm"), "InvalidEncryption", "Cipher names are exact."),
        ("cipher-missing", section(cipher=OMIT), "MissingField", "The section has no cipher."),
        ("chunk-size-not-power-of-two", section(chunk_size=1000000), "InvalidEncryption", "The chunk size must be a power of two."),
        ("chunk-size-too-small", section(chunk_size=2048), "InvalidEncryption", "The chunk size is below 4 KiB."),
        ("chunk-size-too-large", section(chunk_size=1 << 27), "InvalidEncryption", "The chunk size is above 64 MiB."),
        ("chunk-size-zero", section(chunk_size=0), "InvalidEncryption", "A zero chunk size would divide by zero."),
        ("chunk-size-negative", section(chunk_size=Raw("-4096")), "InvalidEncryption", "A negative chunk size."),
        ("file-id-short", section(file_id="00" * 15), "InvalidEncryption", "The file id is 15 bytes, not 16."),
        ("file-id-uppercase", section(file_id="AB" * 16), "InvalidEncryption", "Hex must be lowercase."),
        ("nonce-salt-number", section(nonce_salt=12), "InvalidEncryption", "The nonce salt is a number, not hex."),
        ("tag-table-length-mismatch", section(tag_table={"length": 32, "sha256": "22" * 32}), "InvalidEncryption", "The tag table length is not 16 bytes per chunk (one chunk here)."),
        ("tag-table-length-odd", section(tag_table={"length": 17, "sha256": "22" * 32}), "InvalidEncryption", "The tag table length is not a multiple of 16."),
        ("tag-table-unknown-field", section(tag_table={"length": 16, "sha256": "22" * 32, "offset": 0}), "UnknownField", "The tag table object has a field the spec does not define."),
        ("recipients-empty", section(recipients=[]), "InvalidEncryption", "No recipient can unwrap the data key."),
        ("recipients-65", section(recipients=[sym(kid=f"k{i}") for i in range(65)]), "InvalidEncryption", "More than 64 recipients."),
        ("recipient-kind-unknown", section(recipients=[sym(kind="rsa")]), "InvalidEncryption", "An unknown recipient kind."),
        ("recipient-kind-missing", section(recipients=[sym(kind=OMIT)]), "MissingField", "A recipient without its kind."),
        ("recipient-kid-empty", section(recipients=[sym(kid="")]), "InvalidEncryption", "An empty key id."),
        ("recipient-kid-control", section(recipients=[sym(kid="a\u0000b")]), "InvalidEncryption", "A key id with a NUL character."),
        ("recipient-kid-too-long", section(recipients=[sym(kid="k" * 257)]), "InvalidEncryption", "A key id over 256 bytes."),
        ("recipient-wrapped-key-short", section(recipients=[sym(wrapped_key="33" * 47)]), "InvalidEncryption", "A wrapped key of 47 bytes, not 48."),
        ("recipient-extra-field", section(recipients=[sym(x="1")]), "UnknownField", "A recipient with a field its kind does not define."),
        ("recipient-not-object", section(recipients=["k1"]), "WrongType", "A recipient that is a string."),
        ("passphrase-memory-too-large", section(recipients=[pw(memory_kib=(1 << 20) + 1)]), "InvalidEncryption", "Argon2 memory over 1 GiB: a hostile file must not make the reader allocate it."),
        ("passphrase-iterations-huge", section(recipients=[pw(iterations=1 << 31)]), "InvalidEncryption", "Argon2 iterations over 16."),
        ("passphrase-parallelism-zero", section(recipients=[pw(parallelism=0)]), "InvalidEncryption", "Argon2 parallelism 0."),
        ("passphrase-kdf-unknown", section(recipients=[pw(kdf="pbkdf2")]), "InvalidEncryption", "A KDF other than argon2id."),
        ("section-unknown-field", section(aad="x"), "UnknownField", "The section has a field the spec does not define."),
        ("section-duplicate-key", Obj(list(section().items()) + [("cipher", "AES-256-GCM")]), "DuplicateKey", "The section repeats a key."),
        ("section-not-object", "AES-256-GCM", "WrongType", "The section is a string."),
        ("section-too-deep", section(tag_table={"length": 16, "sha256": [[[[[[[[["x"]]]]]]]]]}), "LimitExceeded", "The section nests deeper than any field needs."),
    ]
    for name, sec, kind, why in bad_sections:
        add(f"dt-encryption-{name}.deathtensors", encrypted(sec), kind, why)
    add("dt-encryption-section-without-flag.deathtensors", encrypted(section(), flags=0), "Unsupported", "An encryption section in a file whose flag bit 2 is clear: the flag and the section must agree.")
    add("dt-encryption-duplicate-section.deathtensors", dt(Obj(list(dt_top().items()) + [("encryption", section()), ("encryption", section())]), data=bytes(16 + 32 + 64) + ONES, flags=FLAG_ENCRYPTED), "DuplicateKey", "The header has two encryption sections.")
    add("dt-encryption-truncated-tag-table.deathtensors", dt(dt_top(encryption=section()), data=bytes(8), flags=FLAG_ENCRYPTED), "Truncated", "The file ends inside the tag table.")
    # ---- sealed headers (FORMAT.md 10.8)
    outer = dt_top({}, created_by=OMIT, alignment=64)
    add("dt-sealed-without-encryption-flag.deathtensors", dt(dt_top(), flags=FLAG_SEALED), "Unsupported", "Flag bit 4 (sealed) needs flag bit 2 (encrypted).")
    add("dt-sealed-flag-without-field.deathtensors", encrypted(section(), flags=FLAG_ENCRYPTED | FLAG_SEALED), "MissingField", "A sealed file's encryption section must say how long the sealed header is.")
    add("dt-sealed-field-without-flag.deathtensors", dt(dict(outer, encryption=section(sealed_header={"length": 100})), data=bytes(256), flags=FLAG_ENCRYPTED), "Unsupported", "A sealed_header field in a file whose flag bit 4 is clear.")
    add("dt-sealed-length-zero.deathtensors", dt(dict(outer, encryption=section(sealed_header={"length": 0})), data=bytes(256), flags=FLAG_ENCRYPTED | FLAG_SEALED), "InvalidEncryption", "A sealed header of 0 bytes.")
    add("dt-sealed-length-over-limit.deathtensors", dt(dict(outer, encryption=section(sealed_header={"length": MAX_HEADER_LEN + 1})), data=bytes(256), flags=FLAG_ENCRYPTED | FLAG_SEALED), "LimitExceeded", "A sealed header longer than the header limit.")
    add("dt-sealed-outer-lists-tensors.deathtensors", dt(dt_top(created_by=OMIT, alignment=64, encryption=section(sealed_header={"length": 100})), data=bytes(256), flags=FLAG_ENCRYPTED | FLAG_SEALED), "InvalidEncryption", "The outer header of a sealed file lists a tensor: it would leak what sealing hides.")
    add("dt-sealed-outer-has-metadata.deathtensors", dt(dict(outer, global_metadata={"arch": "x"}, encryption=section(sealed_header={"length": 100})), data=bytes(256), flags=FLAG_ENCRYPTED | FLAG_SEALED), "InvalidEncryption", "The outer header of a sealed file has global metadata.")
    add("dt-sealed-truncated.deathtensors", dt(dict(outer, encryption=section(sealed_header={"length": 100000})), data=bytes(256), flags=FLAG_ENCRYPTED | FLAG_SEALED), "Truncated", "The file ends inside the sealed header.")
    add("dt-signed-plain-tensor-without-digest.deathtensors", dt(flags=FLAG_SIGNED), "Unsupported", "A signed file must give every unencrypted tensor a sha256 digest (the signature commits to the data through them).")

    # ---- header length
    add("dt-header-len-over-limit.deathtensors", dt(header_len=MAX_HEADER_LEN + 1), "LimitExceeded", "The header length is one byte over the 4 GiB default limit.")
    add("dt-header-len-near-2pow64.deathtensors", dt(header_len=U64_MAX), "LimitExceeded", "The header length is 2^64-1, far past any limit.")
    add("dt-header-len-wraps-to-zero.deathtensors", dt(header_len=2**64 - 24), "LimitExceeded", "24 + header length wraps around to 0 in 64-bit arithmetic.")
    add("dt-header-len-past-end.deathtensors", dt(header_len=4096), "Truncated", "The header length is within the limit but runs past the end of the file.")
    add("dt-header-len-zero.deathtensors", dt(header_len=0), "InvalidJson", "A zero header length leaves an empty JSON text.")
    short = dt_top()
    n = len(text(short)) // 8 * 8 - 24  # 24 + n is a multiple of 8: no padding
    add("dt-header-len-too-short.deathtensors", dt(short, header_len=n), "InvalidJson", "The header length cuts the JSON text short (the rest lands in the data blob).")
    both("header-len-just-past-end", "Truncated", "The header length runs just past the end of a file with an empty data blob.",
         dt(data=b"", header_len=len(text(dt_top())) + 8), st(data=b"", header_len=len(text(st_top())) + 8 + 1))
    add("st-truncated-header-len.safetensors", b"\x10\x00\x00\x00\x00", "Truncated", "The file ends inside the 8-byte header length.")
    add("st-header-len-over-limit.safetensors", st(header_len=MAX_HEADER_LEN + 1), "LimitExceeded", "The header length is one byte over the 4 GiB default limit.")
    add("st-header-len-over-safetensors-cap.safetensors", st(header_len=SAFETENSORS_MAX_HEADER + 1), "LimitExceeded", "The header length is one byte over safetensors' own cap of 100,000,000 bytes (under our 4 GiB): safetensors refuses it, so do we.")
    add("st-header-len-near-2pow64.safetensors", st(header_len=U64_MAX), "LimitExceeded", "The header length is 2^64-1, far past any limit.")
    add("st-header-len-wraps-to-zero.safetensors", st(header_len=2**64 - 8), "LimitExceeded", "8 + header length wraps around to 0 in 64-bit arithmetic.")
    add("st-header-len-past-end.safetensors", st(header_len=4096), "Truncated", "The header length is within the limit but runs past the end of the file.")
    add("st-header-len-zero.safetensors", st(header_len=0), "UnrecognizedFormat", "A zero header length: no JSON object follows the length.")
    body = text(st_top())
    add("st-header-len-too-short.safetensors", st(header_len=len(body) - 8), "InvalidJson", "The header length cuts the JSON text short (the rest lands in the data blob).")

    # ---- padding and footer (deathtensors)
    # A header whose end leaves 4 bytes of padding before the data blob.
    padded = next(h for k in range(8) if (24 + len(text(h := dt_top(global_metadata={"note": "x" * k})))) % 8 == 4)
    pad_len = 4
    add("dt-nonzero-padding-space.deathtensors", dt(padded, pad=b" " * pad_len), "NonZeroPadding", "The header is padded to 8 bytes with spaces after the header length instead of NUL bytes.")
    add("dt-nonzero-padding-last-byte.deathtensors", dt(padded, pad=b"\0" * (pad_len - 1) + b"\x01"), "NonZeroPadding", "The last padding byte before the data blob is 0x01, a place to smuggle bytes.")
    add("dt-truncated-footer.deathtensors", dt(flags=FLAG_CHECKSUM, footer=bytes(16)), "Truncated", "The checksum flag is set but only 16 of the 32 footer bytes remain after an 8-byte blob.")
    add("dt-checksum-flag-no-footer-zero-tensors.deathtensors", dt(dt_top({}), data=b"", flags=FLAG_CHECKSUM), "Truncated", "The checksum flag is set but the file ends at the data start.")
    big = dt_top({"w": dt_tensor(shape=(16,), offsets=(0, 64))})
    add("dt-checksum-flag-footer-missing.deathtensors", dt(big, data=bytes(64), flags=FLAG_CHECKSUM), "OffsetOutOfBounds", "The checksum flag is set but no footer was written, so the last 32 data bytes are taken for the footer and the tensor no longer fits.")

    # ---- not UTF-8, not JSON, not an object
    both("header-not-utf8", "InvalidUtf8", "A 0xff byte inside a JSON string.",
         dt(text(dt_top()).replace(b"make.py", b"make\xff.py")), st(text(st_top()).replace(b'"w"', b'"w\xff"')))
    both("header-overlong-utf8", "InvalidUtf8", "An overlong UTF-8 encoding of '/' (0xc0 0xaf) inside a JSON string.",
         dt(text(dt_top()).replace(b"testdata/", b"testdata\xc0\xaf")), st(text(st_top()).replace(b'"w"', b'"w\xc0\xaf"')))
    add("dt-header-lone-surrogate-utf8.deathtensors", dt(text(dt_top()).replace(b"make.py", b"make\xed\xa0\x80.py")), "InvalidUtf8", "A UTF-16 surrogate (U+D800) encoded as UTF-8 is not valid UTF-8.")
    both("header-not-json", "InvalidJson", "Keys without quotes are not JSON.",
         dt(b"{format: deathtensors, format_version: 1}"), st(b"{w: {dtype: F32}}"))
    both("header-nul-after-number", "InvalidJson", "A raw NUL byte after a number (simd-json alone would accept it).",
         dt(text(dt_top()).replace(b'"format_version":1', b'"format_version":1\x00')),
         st(text(st_top()).replace(b'[0,8]', b'[0,8\x00]')))
    both("header-raw-newline-in-name", "InvalidJson", "A raw control character inside a string must be escaped.",
         dt(text(dt_top()).replace(b'"w"', b'"w\n"')), st(text(st_top()).replace(b'"w"', b'"w\n"')))
    both("header-json-truncated", "InvalidJson", "The JSON object is not closed.",
         dt(text(dt_top())[:-1]), st(text(st_top())[:-1]))
    both("header-json-trailing-comma", "InvalidJson", "A trailing comma after the last member is not JSON.",
         dt(text(dt_top())[:-1] + b",}"), st(text(st_top())[:-1] + b",}"))
    both("header-json-single-quotes", "InvalidJson", "Single-quoted strings are not JSON.",
         dt(text(dt_top()).replace(b'"created_by"', b"'created_by'")), st(text(st_top()).replace(b'"w"', b"'w'")))
    both("trailing-garbage-after-json", "InvalidJson", "Text after the closing brace of the header object.",
         dt(text(dt_top()) + b"garbage"), st(text(st_top()) + b"garbage"))
    both("trailing-second-object", "InvalidJson", "A second JSON object after the header object.",
         dt(text(dt_top()) + b"{}"), st(text(st_top()) + b"{}"))
    both("trailing-nul-then-garbage", "InvalidJson", "A NUL byte and text after the header object, inside the header length.",
         dt(text(dt_top()) + b"\0{}"), st(text(st_top()) + b"\0{}"))
    # simd-json decodes a high surrogate escape with no low surrogate after it
    # as U+0000 (https://github.com/simd-lite/simd-json/issues/481); serde_json
    # refuses it, and so must both builds of the crate.
    both("name-lone-surrogate", "InvalidJson", "A tensor name is the lone high surrogate escape \\ud800, which no UTF-8 text can hold.",
         dt(dt_top({Raw('"\\ud800"'): dt_tensor()})), st(st_top({Raw('"\\ud800"'): st_tensor()})))
    add("dt-global-metadata-lone-surrogate.deathtensors", dt(dt_top(global_metadata={"note": Raw('"caf\\ud800"')})), "InvalidJson", "A metadata value ends in a lone high surrogate escape.")
    add("dt-lone-surrogate-then-escape.deathtensors", dt(dt_top(global_metadata={"note": Raw('"\\ud800\\n"')})), "InvalidJson", "A high surrogate escape followed by \\n, not by a low surrogate escape.")
    add("dt-lone-surrogate-then-bad-hex.deathtensors", dt(dt_top(global_metadata={"note": Raw('"\\ud800\\uzzzz"')})), "InvalidJson", "A high surrogate escape followed by an escape with invalid hex digits.")
    add("st-metadata-lone-surrogate-key.safetensors", st(st_top(metadata=Obj([(Raw('"\\udbff"'), "v")]))), "InvalidJson", "An __metadata__ key is the lone high surrogate escape \\udbff.")
    add("st-metadata-lone-low-surrogate.safetensors", st(st_top(metadata={"k": Raw('"\\udc00"')})), "InvalidJson", "An __metadata__ value is the lone low surrogate escape \\udc00.")
    add("dt-header-utf8-bom.deathtensors", dt(b"\xef\xbb\xbf" + text(dt_top())), "InvalidJson", "A UTF-8 byte order mark before the JSON text is not JSON.")
    add("dt-header-json-array.deathtensors", dt(text([dt_top()])), "WrongType", "The header is a JSON array holding the header object.")
    add("dt-header-json-string.deathtensors", dt(text("deathtensors")), "WrongType", "The header is a JSON string.")
    add("dt-header-json-number.deathtensors", dt(b"1"), "WrongType", "The header is a JSON number.")
    add("dt-header-json-null.deathtensors", dt(b"null"), "WrongType", "The header is JSON null.")
    add("st-header-json-array.safetensors", st(text([st_top()])), "UnrecognizedFormat", "After the length comes a JSON array, not the object every safetensors header starts with.")
    add("st-header-json-string.safetensors", st(text("w")), "UnrecognizedFormat", "After the length comes a JSON string, not an object.")
    add("st-header-json-number.safetensors", st(b"1"), "UnrecognizedFormat", "After the length comes a JSON number, not an object.")
    add("st-header-leading-space.safetensors", st(b"  " + text(st_top())), "UnrecognizedFormat", "The header must start with '{' (safetensors itself refuses leading whitespace).")

    # ---- duplicate keys, at every level
    top = dt_top()
    for field in ["format", "format_version", "created_by", "global_metadata", "tensors"]:
        dup = Obj(list(top.items()) + [(field, top[field])])
        add(f"dt-duplicate-{field.replace('_', '-')}.deathtensors", dt(dup), "DuplicateKey", f"The top-level field \"{field}\" appears twice with the same value.")
    add("dt-duplicate-alignment.deathtensors", dt(Obj(list(dt_top(alignment=1).items()) + [("alignment", 64)])), "DuplicateKey", "The field \"alignment\" appears twice with different values.")
    add("dt-duplicate-format-via-escape.deathtensors", dt(Obj(list(top.items()) + [(Raw('"form\\u0061t"'), "deathtensors")])), "DuplicateKey", "\"form\\u0061t\" is \"format\" once unescaped: a second \"format\" key.")
    w = dt_tensor()
    w2 = dt_tensor(offsets=(8, 16))
    add("dt-duplicate-tensor-name.deathtensors", dt(dt_top(Obj([("w", w), ("w", w2)])), data=ONES * 2), "DuplicateKey", "Two tensors named \"w\" with adjacent, valid byte ranges.")
    add("dt-duplicate-tensor-name-identical.deathtensors", dt(dt_top(Obj([("w", w), ("w", w)]))), "DuplicateKey", "The same tensor entry twice: a last-key-wins parser would see one valid tensor.")
    add("dt-duplicate-tensor-name-via-escape.deathtensors", dt(dt_top(Obj([("w", w), (Raw('"\\u0077"'), w2)])), data=ONES * 2), "DuplicateKey", "Tensor names \"w\" and \"\\u0077\" are the same name once unescaped.")
    for field in ["dtype", "shape", "data_offsets", "metadata"]:
        dup = Obj(list(w.items()) + [(field, w[field])])
        add(f"dt-duplicate-tensor-field-{field.replace('_', '-')}.deathtensors", dt(dt_top({"w": dup})), "DuplicateKey", f"The tensor field \"{field}\" appears twice.")
    digest = "ab" * 32
    add("dt-duplicate-tensor-field-sha256.deathtensors", dt(dt_top({"w": Obj(list(dt_tensor(sha256=digest).items()) + [("sha256", "cd" * 32)])})), "DuplicateKey", "The tensor field \"sha256\" appears twice with different digests.")
    add("dt-duplicate-global-metadata-key.deathtensors", dt(dt_top(global_metadata=Obj([("license", "MIT"), ("license", "proprietary")]))), "DuplicateKey", "A key of global_metadata appears twice with different values.")
    add("dt-duplicate-tensor-metadata-key.deathtensors", dt(dt_top({"w": dt_tensor(metadata=Obj([("k", "a"), ("k", "b")]))})), "DuplicateKey", "A key of a tensor's metadata appears twice.")
    s = st_tensor()
    s2 = st_tensor(offsets=(8, 16))
    add("st-duplicate-tensor-name.safetensors", st(Obj([("w", s), ("w", s2)]), data=ONES * 2), "DuplicateKey", "Two tensors named \"w\" with adjacent, valid byte ranges.")
    add("st-duplicate-tensor-name-identical.safetensors", st(Obj([("w", s), ("w", s)])), "DuplicateKey", "The same tensor entry twice: a last-key-wins parser would see one valid tensor.")
    add("st-duplicate-tensor-name-via-escape.safetensors", st(Obj([("w", s), (Raw('"\\u0077"'), s2)]), data=ONES * 2), "DuplicateKey", "Tensor names \"w\" and \"\\u0077\" are the same name once unescaped.")
    for field in ["dtype", "shape", "data_offsets"]:
        dup = Obj(list(s.items()) + [(field, s[field])])
        add(f"st-duplicate-tensor-field-{field.replace('_', '-')}.safetensors", st({"w": dup}), "DuplicateKey", f"The tensor field \"{field}\" appears twice.")
    add("st-duplicate-metadata.safetensors", st(Obj([("__metadata__", {"a": "1"}), ("w", s), ("__metadata__", {"a": "2"})])), "DuplicateKey", "\"__metadata__\" appears twice.")
    add("st-duplicate-metadata-key.safetensors", st(st_top(metadata=Obj([("format", "pt"), ("format", "np")]))), "DuplicateKey", "A key of __metadata__ appears twice with different values.")

    # ---- missing, unknown and wrongly typed fields
    for field in ["format", "format_version", "tensors"]:
        add(f"dt-missing-{field.replace('_', '-')}.deathtensors", dt(dt_top(**{field: OMIT})), "MissingField", f"The required top-level field \"{field}\" is absent.")
    for field in ["dtype", "shape", "data_offsets"]:
        dt_t = {k: v for k, v in dt_tensor().items() if k != field}
        st_t = {k: v for k, v in st_tensor().items() if k != field}
        both(f"missing-{field.replace('_', '-')}", "MissingField", f"A tensor has no \"{field}\".", dt(dt_top({"w": dt_t})), st(st_top({"w": st_t})))
    add("dt-unknown-top-level-field.deathtensors", dt(dt_top(compressor="zstd")), "UnknownField", "The top-level field \"compressor\" is not part of the format.")
    add("dt-unknown-field-case.deathtensors", dt(Obj([("Format", "deathtensors")] + list(dt_top().items()))), "UnknownField", "Field names are case-sensitive: \"Format\" is not \"format\".")
    add("dt-unknown-tensor-field.deathtensors", dt(dt_top({"w": dt_tensor(offsets_unit="bytes")})), "UnknownField", "The tensor field \"offsets_unit\" is not part of the format.")
    add("st-unknown-tensor-field.safetensors", st(st_top({"w": st_tensor(stride=[1])})), "UnknownField", "The tensor field \"stride\" is not part of safetensors.")
    add("st-tensor-metadata-field.safetensors", st(st_top({"w": st_tensor(metadata={})})), "UnknownField", "Per-tensor \"metadata\" exists in deathtensors only.")
    add("st-tensor-sha256-field.safetensors", st(st_top({"w": st_tensor(sha256="ab" * 32)})), "UnknownField", "Per-tensor \"sha256\" exists in deathtensors only.")
    add("dt-wrong-format-name-safetensors.deathtensors", dt(dt_top(format="safetensors")), "WrongFormatName", "The format field says \"safetensors\" inside a deathtensors prefix.")
    add("dt-wrong-format-name-case.deathtensors", dt(dt_top(format="DeathTensors")), "WrongFormatName", "The format name is case-sensitive.")
    add("dt-wrong-format-name-empty.deathtensors", dt(dt_top(format="")), "WrongFormatName", "The format name is empty.")
    add("dt-format-version-2.deathtensors", dt(dt_top(format_version=2)), "UnsupportedFormatVersion", "format_version 2 is from the future.")
    add("dt-format-version-0.deathtensors", dt(dt_top(format_version=0)), "UnsupportedFormatVersion", "format_version 0 does not exist.")
    add("dt-format-version-u64-max.deathtensors", dt(dt_top(format_version=U64_MAX)), "UnsupportedFormatVersion", "format_version 2^64-1.")
    add("dt-format-version-string.deathtensors", dt(dt_top(format_version="1")), "WrongType", "format_version is the string \"1\", not a number.")
    add("dt-format-version-float.deathtensors", dt(dt_top(format_version=Raw("1.0"))), "WrongType", "format_version is 1.0, not an integer.")
    add("dt-format-version-negative.deathtensors", dt(dt_top(format_version=-1)), "WrongType", "format_version is negative.")
    add("dt-format-version-negative-zero.deathtensors", dt(dt_top(format_version=Raw("-0"))), "WrongType", "format_version is -0, a float to serde_json.")
    add("dt-alignment-negative-zero.deathtensors", dt(dt_top(alignment=Raw("-0"))), "WrongType", "alignment is -0, a float to serde_json.")
    add("dt-format-not-string.deathtensors", dt(dt_top(format=1)), "WrongType", "The format field is a number.")
    add("dt-created-by-null.deathtensors", dt(dt_top(created_by=Raw("null"))), "WrongType", "created_by is null, not a string.")
    add("dt-tensors-array.deathtensors", dt(dt_top([dict(name="w", **dt_tensor())])), "WrongType", "tensors is an array of objects, not an object keyed by name.")
    add("dt-tensors-string.deathtensors", dt(dt_top("w")), "WrongType", "tensors is a string.")
    add("dt-global-metadata-array.deathtensors", dt(dt_top(global_metadata=[["license", "MIT"]])), "WrongType", "global_metadata is an array of pairs, not an object.")
    add("dt-global-metadata-null.deathtensors", dt(dt_top(global_metadata=Raw("null"))), "WrongType", "global_metadata is null, not an object.")
    add("dt-tensor-metadata-array.deathtensors", dt(dt_top({"w": dt_tensor(metadata=[])})), "WrongType", "A tensor's metadata is an array, not an object.")
    add("dt-alignment-string.deathtensors", dt(dt_top(alignment="64")), "WrongType", "alignment is the string \"64\".")
    add("dt-alignment-negative.deathtensors", dt(dt_top(alignment=-64)), "WrongType", "alignment is negative.")
    both_tensor("tensor-dtype-number", "WrongType", "dtype is a number, not a name.", dtype=32)
    both("tensor-entry-string", "WrongType", "A tensor entry is a string, not an object.",
         dt(dt_top({"w": "F32"})), st(st_top({"w": "F32"})))
    add("dt-tensor-sha256-number.deathtensors", dt(dt_top({"w": dt_tensor(sha256=0)})), "WrongType", "sha256 is a number, not a hex string.")
    add("st-metadata-string.safetensors", st(st_top(metadata="format=pt")), "WrongType", "__metadata__ is a string, not an object.")
    add("st-metadata-array.safetensors", st(st_top(metadata=[["format", "pt"]])), "WrongType", "__metadata__ is an array of pairs, not an object.")

    # ---- dtypes and shapes
    both_tensor("dtype-lowercase", "UnknownDtype", "Dtype names are case-sensitive: \"f32\" is not \"F32\".", dtype="f32")
    both_tensor("dtype-unknown", "UnknownDtype", "\"F128\" is not a dtype of either format.", dtype="F128")
    both_tensor("dtype-torch-name", "UnknownDtype", "\"float32\" is torch's name, not the header's.", dtype="float32")
    add("dt-dtype-empty.deathtensors", dt(dt_top({"w": dt_tensor(dtype="")})), "UnknownDtype", "The dtype is the empty string.")
    add("st-dtype-padded.safetensors", st(st_top({"w": st_tensor(dtype=" F32")})), "UnknownDtype", "The dtype has a leading space.")
    both_tensor("shape-negative", "InvalidDimension", "A dimension is -1.", shape=(-1, -2), offsets=(0, 8))
    both_tensor("shape-float", "InvalidDimension", "A dimension is 2.0, a float.", shape=(Raw("2.0"),))
    both_tensor("shape-exponent", "InvalidDimension", "A dimension is 2e0, a float in exponent form.", shape=(Raw("2e0"),))
    both_tensor("shape-string", "InvalidDimension", "A dimension is the string \"2\".", shape=("2",))
    both_tensor("shape-too-large-for-u64", "InvalidDimension", "A dimension is 2^64, one more than a u64 holds.", shape=(2**64,), offsets=(0, 0))
    both_tensor("shape-not-array", "InvalidDimension", "The shape is a number, not an array.", shape=Raw("2"))
    both_tensor("shape-nested", "InvalidDimension", "The shape is an array of arrays.", shape=([2],))
    both("shape-negative-zero", "InvalidDimension", "A dimension is -0, which serde_json and safetensors read as a float (simd-json read it as 0).",
         dt(dt_top({"w": dt_tensor(shape=(Raw("-0"),), offsets=(0, 0))}), data=b""),
         st(st_top({"w": st_tensor(shape=(Raw("-0"),), offsets=(0, 0))}), data=b""))
    both_tensor("shape-rank-65", "LimitExceeded", "65 dimensions of 1: one over the default rank limit of 64.", shape=(1,) * (RANK_LIMIT + 1), offsets=(0, 4))
    both_tensor("numel-overflow", "Overflow", "2^32 x (2^32 + 1) elements do not fit in a u64.", shape=(2**32, 2**32 + 1), offsets=(0, 0))
    both_tensor("byte-len-overflow", "Overflow", "2^61 F64 elements fit in a u64 but their 2^64 bytes do not.", dtype="F64", shape=(2**61,), offsets=(0, 0))
    add("dt-byte-len-overflow-c128.deathtensors", dt(dt_top({"w": dt_tensor(dtype="C128", shape=(2**60,), offsets=(0, 0))})), "Overflow", "2^60 C128 elements fit in a u64 but their 2^64 bytes do not.")
    add("st-c128.safetensors", st(st_top({"w": st_tensor(dtype="C128", shape=(1,), offsets=(0, 16))}), data=b"\0" * 16), "UnknownDtype", "safetensors 0.8 has no C128 and its readers refuse such files, so we do too.")
    both("f4-odd-count", "MisalignedSubByte", "Three F4 elements take 12 bits, which do not end on a byte boundary.",
         dt(dt_top({"w": dt_tensor(dtype="F4", shape=(3,), offsets=(0, 2))}), data=b"\0\0"),
         st(st_top({"w": st_tensor(dtype="F4", shape=(3,), offsets=(0, 2))}), data=b"\0\0"))
    add("st-f6-misaligned.safetensors", st(st_top({"w": st_tensor(dtype="F6_E2M3", shape=(2,), offsets=(0, 2))}), data=b"\0\0"), "MisalignedSubByte", "Two F6_E2M3 elements take 12 bits, which do not end on a byte boundary.")

    # ---- data_offsets
    both_tensor("offsets-one-entry", "InvalidOffsets", "data_offsets has one entry.", offsets=(8,))
    both_tensor("offsets-three-entries", "InvalidOffsets", "data_offsets has three entries.", offsets=(0, 8, 16))
    both_tensor("offsets-empty", "InvalidOffsets", "data_offsets is an empty array.", offsets=())
    both_tensor("offsets-negative", "InvalidOffsets", "data_offsets starts at -8.", offsets=(-8, 0))
    both_tensor("offsets-float", "InvalidOffsets", "data_offsets holds floats.", offsets=(Raw("0.0"), Raw("8.0")))
    both_tensor("offsets-string", "InvalidOffsets", "data_offsets holds strings.", offsets=("0", "8"))
    both_tensor("offsets-too-large-for-u64", "InvalidOffsets", "An offset is 2^64, one more than a u64 holds.", offsets=(0, 2**64))
    both_tensor("offsets-not-array", "InvalidOffsets", "data_offsets is an object, not an array.", offsets={"start": 0, "end": 8})
    both_tensor("offsets-null", "InvalidOffsets", "data_offsets is null.", offsets=Raw("null"))
    both_tensor("offsets-negative-zero", "InvalidOffsets", "data_offsets starts at -0, which serde_json and safetensors read as a float (simd-json read it as 0).", offsets=(Raw("-0"), 8))
    both_tensor("offsets-reversed", "OffsetsReversed", "data_offsets is [8, 0]: the end comes before the start.", offsets=(8, 0))
    both_tensor("byte-length-too-short", "ByteLengthMismatch", "Two F32 elements need 8 bytes but data_offsets spans 4.", offsets=(0, 4))
    both("byte-length-too-long", "ByteLengthMismatch", "Two F32 elements need 8 bytes but data_offsets spans 12.",
         dt(dt_top({"w": dt_tensor(offsets=(0, 12))}), data=bytes(12)),
         st(st_top({"w": st_tensor(offsets=(0, 12))}), data=bytes(12)))
    both("offsets-past-blob", "OffsetOutOfBounds", "The header places 8 bytes but the file holds a 4-byte data blob.",
         dt(data=ONES[:4]), st(data=ONES[:4]))
    both("offsets-past-empty-blob", "OffsetOutOfBounds", "The header places 8 bytes but the file ends right after the header.",
         dt(data=b""), st(data=b""))
    both_tensor("offsets-near-2pow64", "UnexpectedGap", "The tensor sits 8 bytes below 2^64: far from where the layout puts it (0).", offsets=(2**64 - 9, 2**64 - 1))
    both("overlap", "Overlap", "Tensor b starts inside tensor a (bytes 4..8 are shared).",
         dt(dt_top(two(dt_tensor, (0, 8), (4, 12))), data=bytes(12)),
         st(st_top(two(st_tensor, (0, 8), (4, 12))), data=bytes(12)))
    both("overlap-alias", "Overlap", "Two tensors share the same 8 bytes, so writing one changes the other.",
         dt(dt_top(two(dt_tensor, (0, 8), (0, 8)))), st(st_top(two(st_tensor, (0, 8), (0, 8)))))
    both("hole", "UnexpectedGap", "Bytes 8..12 between the two packed tensors belong to no tensor.",
         dt(dt_top(two(dt_tensor, (0, 8), (12, 20))), data=bytes(20)),
         st(st_top(two(st_tensor, (0, 8), (12, 20))), data=bytes(20)))
    both("first-tensor-not-at-zero", "UnexpectedGap", "The only tensor starts at byte 4; bytes 0..4 belong to no tensor.",
         dt(dt_top({"w": dt_tensor(offsets=(4, 12))}), data=bytes(12)),
         st(st_top({"w": st_tensor(offsets=(4, 12))}), data=bytes(12)))
    add("dt-hole-wider-than-alignment.deathtensors", dt(dt_top(two(dt_tensor, (0, 8), (128, 136)), alignment=64), data=bytes(136)), "UnexpectedGap", "With alignment 64, b must start at 64, not 128.")
    add("dt-unaligned-tensor.deathtensors", dt(dt_top(two(dt_tensor, (0, 8), (8, 16)), alignment=64), data=bytes(16)), "UnexpectedGap", "With alignment 64, b must start at 64, not packed at 8.")
    add("dt-zstd-hole.deathtensors", dt(dt_top(two(dt_tensor, (0, 8), (12, 20))), data=b"\x28\xb5\x2f\xfd" + bytes(9), flags=FLAG_ZSTD), "UnexpectedGap", "The layout is checked even when the blob is compressed.")
    both("trailing-bytes", "UnownedBytes", "16 bytes after the last tensor belong to no tensor.",
         dt(data=ONES + bytes(16)), st(data=ONES + bytes(16)))
    both("polyglot-zip-appended", "UnownedBytes", "A zip archive hidden after the last tensor: the file is also a zip.",
         dt(data=ONES + ZIP), st(data=ONES + ZIP))
    both("zero-tensors-with-data", "UnownedBytes", "A header with no tensor followed by 8 bytes of data.",
         dt(dt_top({})), st(st_top({})))
    add("dt-trailing-bytes-before-footer.deathtensors", dt(data=ONES + bytes(8), flags=FLAG_CHECKSUM, footer=bytes(FOOTER_LEN)), "UnownedBytes", "8 unowned bytes between the last tensor and the checksum footer.")

    # ---- tensor names
    name_case("empty-name", "EmptyName", "A tensor named \"\".", "")
    name_case("name-nul", "ControlCharacterInName", "A tensor name holds U+0000 (escaped as \\u0000).", "a\u0000b")
    name_case("name-newline", "ControlCharacterInName", "A tensor name holds a newline (escaped as \\n), which forges lines in logs.", "a\nb")
    name_case("name-escape-sequence", "ControlCharacterInName", "A tensor name holds an ANSI escape sequence that recolours terminals.", "\u001b[31mred")
    name_case("name-del", "ControlCharacterInName", "A tensor name holds a raw U+007F (DEL).", "a\u007fb")
    name_case("name-nel", "ControlCharacterInName", "A tensor name holds U+0085 (NEL), a C1 control character.", "a\u0085b")
    name_case("name-4097-bytes", "LimitExceeded", "A 4097-byte tensor name: one over the default limit of 4096.", "n" * (MAX_NAME_LEN + 1))
    add("st-name-4097-bytes-multibyte.safetensors", st(st_top({"\u00e9" * 2049: st_tensor()})), "LimitExceeded", "A tensor name of 2049 two-byte characters: 4098 bytes, over the byte limit though under 4096 characters.")
    add("st-tensor-named-metadata.safetensors", st({"__metadata__": st_tensor()}), "MetadataNotString", "A tensor named \"__metadata__\" is read as the metadata, whose values must be strings.")

    # ---- metadata values
    add("dt-global-metadata-number.deathtensors", dt(dt_top(global_metadata={"epochs": 3})), "MetadataNotString", "A global_metadata value is a number.")
    add("dt-global-metadata-null-value.deathtensors", dt(dt_top(global_metadata={"license": Raw("null")})), "MetadataNotString", "A global_metadata value is null.")
    add("dt-global-metadata-object-value.deathtensors", dt(dt_top(global_metadata={"config": {"layers": "2"}})), "MetadataNotString", "A global_metadata value is an object.")
    add("dt-global-metadata-bool-value.deathtensors", dt(dt_top(global_metadata={"trained": True})), "MetadataNotString", "A global_metadata value is a boolean.")
    add("dt-tensor-metadata-number.deathtensors", dt(dt_top({"w": dt_tensor(metadata={"scale": 0.5})})), "MetadataNotString", "A tensor's metadata value is a number.")
    add("dt-tensor-metadata-array-value.deathtensors", dt(dt_top({"w": dt_tensor(metadata={"axes": ["x"]})})), "MetadataNotString", "A tensor's metadata value is an array.")
    add("st-metadata-number.safetensors", st(st_top(metadata={"epochs": 3})), "MetadataNotString", "An __metadata__ value is a number (safetensors requires strings).")
    add("st-metadata-null-value.safetensors", st(st_top(metadata={"format": Raw("null")})), "MetadataNotString", "An __metadata__ value is null.")
    add("st-metadata-object-value.safetensors", st(st_top(metadata={"config": {"layers": "2"}})), "MetadataNotString", "An __metadata__ value is an object.")

    # ---- sha256 digests (deathtensors)
    for stem, hexd, why in [
        ("uppercase", "AB" * 32, "The digest is uppercase hex; headers store lowercase."),
        ("short", "ab" * 31 + "a", "The digest has 63 hex digits."),
        ("long", "ab" * 32 + "a", "The digest has 65 hex digits."),
        ("non-hex", "ab" * 31 + "gz", "The digest holds non-hex letters."),
        ("empty", "", "The digest is the empty string."),
        ("prefixed", "sha256:" + "ab" * 32, "The digest carries an algorithm prefix."),
    ]:
        add(f"dt-sha256-{stem}.deathtensors", dt(dt_top({"w": dt_tensor(sha256=hexd)})), "InvalidDigest", why)

    # ---- alignment (deathtensors)
    for value, why in [
        (0, "An alignment of 0 is not a power of two."),
        (3, "An alignment of 3 is not a power of two."),
        (96, "An alignment of 96 is not a power of two."),
        (2**31, "An alignment of 2^31 is over the 1 GiB maximum."),
        (2**40, "An alignment of 2^40 is over the 1 GiB maximum."),
        (2**63, "An alignment of 2^63 is over the 1 GiB maximum (and rounding up to it overflows)."),
    ]:
        add(f"dt-alignment-{value}.deathtensors", dt(dt_top(alignment=value)), "InvalidAlignment", why)

    # ---- tensor count (the default limit of 1,000,000 would need a 50 MB file)
    many = {f"t{i}": None for i in range(5)}
    dt_many = {k: dt_tensor(dtype="U8", shape=(1,), offsets=(i, i + 1)) for i, k in enumerate(many)}
    st_many = {k: st_tensor(dtype="U8", shape=(1,), offsets=(i, i + 1)) for i, k in enumerate(many)}
    both("tensor-count-over-limit", "LimitExceeded", "Five tensors where the test's limits allow four (max_tensors = 4).",
         dt(dt_top(dt_many), data=bytes(5)), st(st_top(st_many), data=bytes(5)), limits={"max_tensors": 4})

    # ---- bintensors 0.2 (docs/FORMAT.md, "bintensors files")
    def bt_add(stem, data, kind, why, limits=None):
        add(f"bt-{stem}.bt", data, kind, why, limits)

    def two_bt(a, b, data=bytes(16)):
        return bt(bt_body([bt_entry("a", offsets=a), bt_entry("b", offsets=b)]), data=data)

    bt_add("varint-u128-tag", bt(b"\x00\xfe" + bytes(16) + bt_entry()), "InvalidBintensors", "The tensor count is a 128-bit varint (tag 0xfe), which no field may hold.")
    bt_add("varint-reserved-tag", bt(b"\x00\x01\xff" + bt_entry()[2:]), "InvalidBintensors", "The name length uses the reserved varint tag 0xff.")
    bt_add("varint-u64-in-dtype", bt(b"\x00\x01" + bt_str("a") + b"\xfd" + struct.pack("<Q", BT_F32) + b"\x01\x02\x00\x08"), "InvalidBintensors", "The dtype index 11 is written as a 9-byte varint (bintensors refuses a u64 there; we refuse any long form).")
    bt_add("varint-not-shortest", bt(b"\x00\xfb\x01\x00" + bt_entry()), "InvalidBintensors", "The tensor count 1 is written as a 3-byte varint: bintensors reads it, but its writer never writes it, and one value must have one spelling.")
    bt_add("varint-not-shortest-everywhere", bt(b"\x00" + b"\xfd" + struct.pack("<Q", 1) + b"\xfc" + struct.pack("<I", 1) + b"a" + b"\xfb\x0b\x00" + b"\xfb\x01\x00" + b"\xfb\x02\x00" + b"\xfb\x00\x00" + b"\xfb\x08\x00"), "InvalidBintensors", "Every integer in its longest form (bintensors' hostile noncanonical_varints, which it accepts).")
    bt_add("varint-truncated", bt(b"\x00\x01\x01a\x0b\x01\xfc\x02", pad=b""), "Truncated", "The header ends inside a 5-byte varint (a shape dimension).")
    bt_add("name-len-past-end", bt(b"\x00\x01\xc8abcdefgh"), "Truncated", "The name length is 200 but the header holds 8 bytes of it.")
    bt_add("string-len-over-budget", bt(b"\x00\x01\xfc" + struct.pack("<I", 200_000_000) + b"abcdefgh"), "LimitExceeded", "The name length is 200,000,000: past bincode's decode budget of 100,000,000, which bintensors enforces.")
    bt_add("count-over-budget", bt(b"\x00\xfc" + struct.pack("<I", 2_000_000) + bt_entry()), "LimitExceeded", "2,000,000 tensors claim 144,000,000 bytes of bincode's budget of 100,000,000.")
    bt_add("count-past-end", bt(b"\x00\xfc" + struct.pack("<I", 1_000_000) + bt_entry()), "Truncated", "The tensor count is 1,000,000 (within the budget) but the header holds one entry.")
    bt_add("rank-over-budget", bt(b"\x00\x01\x01a\x0b\xfc" + struct.pack("<I", 20_000_000) + b"\x02\x00\x08"), "LimitExceeded", "A rank of 20,000,000 claims 160,000,000 bytes of bincode's budget.")
    bt_add("rank-65", bt(bt_body([bt_entry(dtype=BT_U8, shape=(1,) * 65, offsets=(0, 1))]), data=b"\x00"), "LimitExceeded", "A tensor of rank 65: over the default limit of 64.")
    bt_add("tensor-count-over-limit", bt(bt_body([bt_entry(f"t{i}", BT_U8, (1,), (i, i + 1)) for i in range(5)]), data=bytes(5)), "LimitExceeded", "Five tensors where the test's limits allow four (max_tensors = 4).", limits={"max_tensors": 4})
    bt_add("unsorted-offsets", two_bt((8, 16), (0, 8)), "UnexpectedGap", "Entries list (8,16) then (0,8): the data must follow the header's order, the first at 0.")
    bt_add("overlap", two_bt((0, 8), (4, 12), data=bytes(12)), "Overlap", "Tensor b starts inside tensor a (bytes 4..8 are shared).")
    bt_add("overlap-alias", two_bt((0, 8), (0, 8), data=bytes(8)), "Overlap", "Two tensors share the same 8 bytes.")
    bt_add("hole", two_bt((0, 8), (12, 20), data=bytes(20)), "UnexpectedGap", "Bytes 8..12 between the two tensors belong to no tensor.")
    bt_add("first-tensor-not-at-zero", bt(bt_body([bt_entry(offsets=(4, 12))]), data=bytes(12)), "UnexpectedGap", "The only tensor starts at byte 4; bytes 0..4 belong to no tensor.")
    bt_add("offsets-reversed", two_bt((0, 8), (8, 0), data=bytes(8)), "OffsetsReversed", "The second tensor's offsets are (8, 0): the end comes before the start.")
    bt_add("duplicate-tensor-name", two_bt((0, 8), (8, 16)).replace(b"\x01b\x0b", b"\x01a\x0b"), "DuplicateKey", "Two entries named a, with consecutive offsets.")
    bt_add("metadata-keys-unsorted", bt(bt_body(metadata=[("z", "1"), ("a", "2")])), "InvalidBintensors", "Metadata keys z then a: bintensors reads them, but its writer sorts them, and a head we accept is the one bintensors writes.")
    bt_add("duplicate-metadata-key", bt(bt_body(metadata=[("k", "1"), ("k", "2")])), "DuplicateKey", "The metadata map lists key k twice: bintensors keeps the last value, another reader might keep the first.")
    bt_add("header-len-past-end", bt(header_len=64), "Truncated", "The header length is 64 but the file holds 16 header bytes and 8 of data.")
    bt_add("header-len-over-cap", bt(header_len=100_000_001), "LimitExceeded", "The header length is 100,000,001: one over bintensors' cap.")
    bt_add("header-len-u64-max", bt(header_len=U64_MAX), "LimitExceeded", "The header length is 2^64 - 1.")
    bt_add("trailing-bytes", bt(data=ONES + bytes(4)), "UnownedBytes", "4 bytes after the last tensor belong to no tensor.")
    bt_add("polyglot-zip-appended", bt(data=ONES + ZIP), "UnownedBytes", "A zip archive hidden after the last tensor: the file is also a zip.")
    bt_add("truncated-data", bt(data=ONES[:4]), "OffsetOutOfBounds", "The header places 8 bytes but the file holds 4.")
    bt_add("zero-tensors-with-data", bt(bt_body([])), "UnownedBytes", "An empty tensor list followed by 8 bytes of data.")
    bt_add("byte-length-mismatch", bt(bt_body([bt_entry(shape=(3,))])), "ByteLengthMismatch", "Three F32 elements need 12 bytes but the offsets span 8.")
    bt_add("numel-overflow", bt(bt_body([bt_entry(dtype=BT_U8, shape=(2**32, 2**32), offsets=(0, 8))])), "Overflow", "The shape [2^32, 2^32] has more elements than a u64 counts.")
    bt_add("huge-end-offset", bt(bt_body([bt_entry(dtype=BT_U8, shape=(2**63,), offsets=(0, 2**63))])), "Overflow", "A U8 [2^63] tensor at (0, 2^63) in a short file: 2^66 bits, and sizes are counted in bits (for sub-byte dtypes), so a u64 overflows first.")
    bt_add("dtype-15", bt(bt_body([bt_entry(dtype=15)])), "UnknownDtype", "The dtype index is 15, one past U64 (bintensors has 15 dtypes).")
    bt_add("metadata-option-tag-2", bt(b"\x02" + bt_body()[1:]), "UnrecognizedFormat", "The metadata option tag is 2: neither bintensors (0 or 1) nor safetensors ({).")
    bt_add("name-not-utf8", bt(bt_body([bt_entry(b"\xff\xfe")])), "InvalidUtf8", "The tensor name is the bytes ff fe, not UTF-8.")
    bt_add("metadata-not-utf8", bt(bt_body(metadata=[("k", b"\xc3\x28")])), "InvalidUtf8", "A metadata value is the bytes c3 28, not UTF-8.")
    bt_add("padding-garbage", bt(pad=b"XYZ!\xff\xff\xff"), "InvalidBintensors", "The header is padded with XYZ! and ff bytes instead of spaces (bintensors ignores them; its writer writes spaces).")
    bt_add("padding-nul", bt(pad=bytes(7)), "InvalidBintensors", "The header is padded with NUL bytes instead of spaces.")
    bt_add("padding-too-long", bt(pad=b" " * 15), "InvalidBintensors", "15 spaces of padding: the writer pads to the next multiple of 8 only (7 here).")
    bt_add("header-unpadded", bt(pad=b""), "InvalidBintensors", "A 9-byte header without padding: the writer pads it to 16, and the data starts misaligned.")
    bt_add("empty-name", bt(bt_body([bt_entry("")])), "EmptyName", "A tensor named \"\" (bintensors allows it; our formats do not).")
    bt_add("name-newline", bt(bt_body([bt_entry("a\nb")])), "ControlCharacterInName", "A tensor name holds a newline, which forges lines in logs.")
    bt_add("name-4097-bytes", bt(bt_body([bt_entry("n" * (MAX_NAME_LEN + 1))])), "LimitExceeded", "A 4097-byte tensor name: one over the default limit of 4096.")


def main():
    build()
    total = 0
    for path in sorted(HERE.iterdir()):
        if path.is_file() and path.name not in KEEP and path.name not in FILES:
            print(f"removing stale {path.name}")
            path.unlink()
    for name, (data, _) in sorted(FILES.items()):
        (HERE / name).write_bytes(data)
        total += len(data)
    manifest = {
        "about": "Hostile and invalid files, written by make.py. Head::parse must reject each one with the ErrorKind variant named by \"kind\", under Limits::DEFAULT overridden by \"limits\" where given.",
        "files": {name: entry for name, (_, entry) in sorted(FILES.items())},
    }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n")
    print(f"wrote {len(FILES)} files, {total} bytes, and manifest.json")


if __name__ == "__main__":
    main()
