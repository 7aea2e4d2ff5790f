#!/usr/bin/env python3
"""Writes the hostile files of testdata/invalid-data/ and their manifest.json.

Every file here has a valid head (Head::parse accepts it): the fault is in
the tensor data, so a reader finds it only when it reads the tensor. Each
file is a deathtensors file with flag bit 5 (docs/FORMAT.md section 15) and
one U8 tensor "w" of 8,192 bytes in two chunks of 4,096: chunk 0 is a good
zstd frame, chunk 1 is the fault. Reading "w" must fail with the io
ErrorKind the manifest names, naming the tensor and the chunk.

The zstd frames are made by hand (raw and RLE blocks, RFC 8878), so that
this script needs only the Python 3 standard library; the output is the
same on every run.
"""

import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
KEEP = {"make.py", "README.md", "manifest.json"}
MAGIC = b"DTLEGION"
FLAG_COMPRESSED = 1 << 5
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_BLOCK = 128 * 1024


def block(kind, size, payload, last):
    """A block header (3 bytes: last, type, size) and its payload."""
    return struct.pack("<I", (size << 3) | (kind << 1) | int(last))[:3] + payload


def rle_frame(byte, n, content_size=True, blocks=None):
    """A frame of `n` copies of `byte` in RLE blocks. With `content_size`, the
    frame header records the size (single segment); without, it declares a
    128 KiB window and no size, as streaming encoders do."""
    if content_size:
        out = ZSTD_MAGIC + bytes([0xA0]) + struct.pack("<I", n if blocks is None else blocks)
    else:
        out = ZSTD_MAGIC + bytes([0x00, 7 << 3])
    left = n
    while True:
        k = min(left, MAX_BLOCK)
        left -= k
        out += block(1, k, bytes([byte]), left == 0)
        if left == 0:
            return out


def raw_frame(payload):
    return ZSTD_MAGIC + bytes([0xA0]) + struct.pack("<I", len(payload)) + block(0, len(payload), payload, True)


def dt_file(chunk1, chunk0=None):
    chunk0 = rle_frame(7, 4096) if chunk0 is None else chunk0
    stored = len(chunk0) + len(chunk1)
    header = {
        "format": "deathtensors",
        "format_version": 1,
        "created_by": "testdata/invalid-data/make.py",
        "compression": {"codec": "zstd", "level": 3, "chunk_size": 4096, "tensors": {"w": [len(chunk0), len(chunk1)]}},
        "global_metadata": {},
        "tensors": {"w": {"dtype": "U8", "shape": [8192], "data_offsets": [0, stored], "metadata": {}}},
    }
    body = json.dumps(header, separators=(",", ":")).encode()
    out = MAGIC + struct.pack("<IIQ", 1, FLAG_COMPRESSED, len(body)) + body
    out += b"\0" * (-len(out) % 8)
    return out + chunk0 + chunk1


FILES = {}


def add(name, data, why, kind="DecompressChunk"):
    assert name not in FILES and why.endswith("."), name
    FILES[name] = (data, {"kind": kind, "tensor": "w", "chunk": 1, "why": why})


def build():
    bomb = rle_frame(0, 64 << 20, content_size=False)
    add("bomb-no-size.deathtensors", dt_file(bomb), "Chunk 1 declares 4,096 raw bytes; its frame (2 KiB of RLE blocks, no content size) expands to 64 MiB.")
    add("bomb-size-lies.deathtensors", dt_file(rle_frame(0, 4096, blocks=1 << 30)), "The frame header of chunk 1 says it holds 1 GiB, the chunk table 4,096 bytes.")
    add("short.deathtensors", dt_file(rle_frame(7, 100)), "Chunk 1 decompresses to 100 bytes, not the 4,096 declared.")
    short_nosize = rle_frame(7, 100, content_size=False)
    add("short-no-size.deathtensors", dt_file(short_nosize), "Chunk 1 decompresses to 100 bytes, and its frame does not say so up front.")
    good = rle_frame(7, 4096)
    add("truncated.deathtensors", dt_file(good[:-2]), "Chunk 1 is a frame cut short, inside its last block.")
    add("trailing-bytes.deathtensors", dt_file(good + b"\x01\x02\x03"), "Three bytes follow the frame of chunk 1.")
    add("two-frames.deathtensors", dt_file(rle_frame(7, 2048) + rle_frame(8, 2048)), "Chunk 1 is two frames of 2,048 bytes: a chunk is one frame.")
    add("not-a-frame.deathtensors", dt_file(b"\x42" * 40), "Chunk 1 holds 40 bytes that are not a zstd frame.")
    reserved = ZSTD_MAGIC + bytes([0xA0]) + struct.pack("<I", 4096) + block(3, 4096, b"", True)
    add("reserved-block.deathtensors", dt_file(reserved), "Chunk 1's only block has the reserved block type 3.")
    add("raw-block-short.deathtensors", dt_file(raw_frame(b"\x07" * 4000)), "Chunk 1 is a raw block of 4,000 bytes for 4,096 declared.")


def main():
    build()
    for p in HERE.iterdir():
        if p.name not in KEEP and p.name not in FILES:
            print(f"removing stale {p.name}")
            p.unlink()
    total = 0
    for name, (data, _) in FILES.items():
        (HERE / name).write_bytes(data)
        total += len(data)
    manifest = {
        "about": "Files whose head is valid but whose tensor data is hostile, written by make.py. Reading tensor \"w\" must fail with the deathtensors_io ErrorKind named by \"kind\", naming the tensor and chunk; Head::parse accepts each file.",
        "files": {name: entry for name, (_, entry) in sorted(FILES.items())},
    }
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(FILES)} files, {total} bytes, and manifest.json")


if __name__ == "__main__":
    main()
