"""A corpus of PyTorch pickle checkpoints, legitimate and hostile, for the
never-executing pickle reader (docs/PICKLE.md).

``legit(dir)`` writes checkpoints made by ``torch.save`` (and a few by this
module's own opcode writer) and returns each as a ``Case``: the tensors
``torch.load`` gives, flattened with dots, and the non-tensor leaves.

``hostile(dir)`` writes files a safe reader must refuse, written opcode by
opcode (never by pickling real objects), and returns each as a ``Hostile``:
what kind of attack it is and a substring a good error message contains.
``prove_live`` shows a code-running payload really runs, by loading it with
the real ``pickle.load`` or ``torch.load(weights_only=False)`` in a
subprocess whose working directory is a fresh temporary directory: every
payload's action is harmless, creating the file ``MARKER`` in its working
directory (``touch MARKER`` or ``open(MARKER, 'w')``).

Nothing in this module loads a hostile file in the calling process, and at
import time it needs only the standard library (torch and numpy are
imported by the functions that need them: ``legit`` and ``flatten``).

Run it (``python bindings/python/tests/pickle_corpus.py [--out DIR]
[--no-prove]``) to write both sets and print a summary.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from pathlib import Path

# The file every payload creates in its working directory (relative, so a
# payload can only ever touch its own directory).
MARKER = "deathtensors-corpus-pwned"
SH = f"touch {MARKER}"  # for os.system and friends
PY = f"open({MARKER!r}, 'w').close()"  # for eval, exec and runpy

# Every kind of hostile file, as the tests group them.
KINDS = (
    "global", "reduce", "inst", "obj", "newobj", "ext", "nested", "allowed-module-callable", "memo",
    "zip-path", "zip-duplicate", "deflate-bomb", "memo-bomb", "stack-bomb", "size-bomb",
    "storage-too-big", "stride", "truncated",
)


@dataclasses.dataclass
class Case:
    """A legitimate checkpoint: what a reader must give for it."""

    name: str
    path: Path
    # The tensors torch.load gives, flattened ("state_dict.layer.weight").
    # Compare bitwise where NaNs are involved (special-floats-*).
    expect: dict[str, "torch.Tensor"] | None  # noqa: F821 (torch is imported lazily)
    # The other leaves (int, float, str, bool, None), flattened the same way.
    metadata: dict
    note: str


@dataclasses.dataclass
class Hostile:
    """A file a safe reader must refuse (without running or allocating it)."""

    name: str
    path: Path
    kind: str  # one of KINDS
    must_mention: str  # a substring of a good error message
    live: bool | None = None  # the payload ran under `victim` (None: not proven / not a code payload)
    note: str = ""
    # How prove_live loads the file: "torch" = torch.load(weights_only=False),
    # "pickle" = pickle.load; None: not a code-running payload, never proven.
    victim: str | None = None
    # Python run in the proving subprocess before loading (the EXT cases
    # register their extension code in copyreg there, as a victim program
    # could have done).
    setup: str = ""
    proof: str = ""  # what the proving subprocess said (its exception, or "loaded")


# ---------------------------------------------------------------------------
# Flattening (the rule of docs/PICKLE.md "Tensors out")
# ---------------------------------------------------------------------------


def flatten(obj) -> tuple[dict, dict]:
    """(tensors, metadata) of a loaded checkpoint: dictionary keys joined with
    ".", list and tuple items by index; tensors are tensors; None, bools,
    ints, floats and strings are metadata. Empty containers give nothing;
    attributes (an OrderedDict's ``_metadata``) are not items and are not
    looked at."""
    import torch

    tensors: dict = {}
    metadata: dict = {}

    def walk(value, key):
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(v, f"{key}.{i}" if key else str(i))
        elif value is None or isinstance(value, (bool, int, float, str)):
            metadata[key] = value
        else:
            raise TypeError(f"{key}: a {type(value).__name__} leaf has no place in the corpus")

    walk(obj, "")
    return tensors, metadata


# ---------------------------------------------------------------------------
# Opcode writer: every hostile pickle is assembled from these, byte by byte
# ---------------------------------------------------------------------------


def _proto(n: int) -> bytes:
    return pickle.PROTO + bytes([n])


def _str(text: str) -> bytes:
    """BINUNICODE (any protocol >= 1)."""
    data = text.encode("utf-8", "surrogatepass")
    return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _bytes(data: bytes) -> bytes:
    """BINBYTES (protocol 3)."""
    return pickle.BINBYTES + struct.pack("<I", len(data)) + data


def _long_bytes(n: int) -> bytes:
    """Two's complement little-endian, as pickle's LONG1/LONG4 want it."""
    if n == 0:
        return b""
    data = n.to_bytes(n.bit_length() // 8 + 1, "little", signed=True)
    if n < 0 and len(data) > 1 and data[-1] == 0xFF and data[-2] & 0x80:
        data = data[:-1]
    return data


def _int(n: int) -> bytes:
    if 0 <= n < 256:
        return pickle.BININT1 + bytes([n])
    if 0 <= n < 65536:
        return pickle.BININT2 + struct.pack("<H", n)
    if -(2**31) <= n < 2**31:
        return pickle.BININT + struct.pack("<i", n)
    data = _long_bytes(n)
    return pickle.LONG1 + bytes([len(data)]) + data


def _global(module: str, name: str) -> bytes:
    """GLOBAL: the two names as text lines."""
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def _stack_global(module: str, name: str) -> bytes:
    """STACK_GLOBAL (protocol 4): the two names as strings on the stack."""
    return _str(module) + _str(name) + pickle.STACK_GLOBAL


def _tuple(*items: bytes) -> bytes:
    if not items:
        return pickle.EMPTY_TUPLE
    if len(items) <= 3:
        return b"".join(items) + (pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3)[len(items) - 1]
    return pickle.MARK + b"".join(items) + pickle.TUPLE


def _list(*items: bytes) -> bytes:
    return pickle.EMPTY_LIST + (pickle.MARK + b"".join(items) + pickle.APPENDS if items else b"")


def _dict(*pairs: tuple[bytes, bytes]) -> bytes:
    if not pairs:
        return pickle.EMPTY_DICT
    return pickle.EMPTY_DICT + pickle.MARK + b"".join(k + v for k, v in pairs) + pickle.SETITEMS


def _call(fn: bytes, *args: bytes) -> bytes:
    """fn(*args) with REDUCE."""
    return fn + _tuple(*args) + pickle.REDUCE


def _put(i: int) -> bytes:
    return pickle.BINPUT + bytes([i]) if i < 256 else pickle.LONG_BINPUT + struct.pack("<I", i)


def _get(i: int) -> bytes:
    return pickle.BINGET + bytes([i]) if i < 256 else pickle.LONG_BINGET + struct.pack("<I", i)


def _program(body: bytes, proto: int = 2) -> bytes:
    """A whole pickle: PROTO, body, STOP (protocol 2 is what torch.save writes)."""
    return _proto(proto) + body + pickle.STOP


def _framed(body: bytes) -> bytes:
    """A protocol 4 pickle with its body in one FRAME, as pickle.dumps writes."""
    inner = body + pickle.STOP
    return _proto(4) + pickle.FRAME + struct.pack("<Q", len(inner)) + inner


def _storage(key: str = "0", cls: str = "FloatStorage", numel: int = 4) -> bytes:
    """torch's persistent id for a storage, and BINPERSID."""
    return _tuple(_str("storage"), _global("torch", cls), _str(key), _str("cpu"), _int(numel)) + pickle.BINPERSID


def _tensor(key="0", cls="FloatStorage", numel=4, offset=0, size=(4,), stride=(1,), *, pid: bytes | None = None,
            offset_op: bytes | None = None) -> bytes:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()),
    as torch.save writes a tensor."""
    return _call(
        _global("torch._utils", "_rebuild_tensor_v2"),
        pid if pid is not None else _storage(key, cls, numel),
        offset_op if offset_op is not None else _int(offset),
        _tuple(*map(_int, size)),
        _tuple(*map(_int, stride)),
        pickle.NEWFALSE,
        _call(_global("collections", "OrderedDict")),
    )


def _floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


FOUR_FLOATS = _floats(1.0, 2.0, 3.0, 4.0)

# A benign checkpoint written by hand: {"weight": <float32 [4] = 1,2,3,4>, "epoch": 3}.
BENIGN_PKL = _program(_dict((_str("weight"), _tensor()), (_str("epoch"), _int(3))))

# The legacy (non-zip) format's leading pickles: magic number, protocol
# version, system info. torch.load unpickles the checkpoint's object next.
LEGACY_MAGIC = _program(_int(0x1950A86A20F9469CFC6C))
LEGACY_PROTOCOL = _program(_int(1001))
LEGACY_SYS_INFO = _program(_dict(
    (_str("protocol_version"), _int(1001)),
    (_str("little_endian"), pickle.NEWTRUE),
    (_str("type_sizes"), _dict((_str("short"), _int(2)), (_str("int"), _int(4)), (_str("long"), _int(4)))),
))


# ---------------------------------------------------------------------------
# Zip containers
# ---------------------------------------------------------------------------

_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the corpus is reproducible


def _write_zip(path: Path, members, compression=zipfile.ZIP_STORED) -> Path:
    """Members (name, bytes) in order, names taken as given (duplicates,
    "..", leading "/" included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Duplicate name": wanted here
        with zipfile.ZipFile(path, "w", compression) as zf:
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=_EPOCH)
                info.compress_type = compression
                zf.writestr(info, data)
    return path


def _torch_members(pkl: bytes, storages: dict[str, bytes] | None = None, archive: str = "archive"):
    """The members torch.save writes that a reader looks at."""
    storages = {"0": FOUR_FLOATS} if storages is None else storages
    return (
        [(f"{archive}/data.pkl", pkl)]
        + [(f"{archive}/data/{key}", data) for key, data in storages.items()]
        + [(f"{archive}/version", b"3\n"), (f"{archive}/byteorder", b"little")]
    )


def _torch_zip(path: Path, pkl: bytes, storages: dict[str, bytes] | None = None, archive: str = "archive") -> Path:
    return _write_zip(path, _torch_members(pkl, storages, archive))


def _raw_zip(path: Path, members) -> Path:
    """A zip written field by field, for members zipfile cannot write without
    materialising them: (name, method, crc32, uncompressed size, stored bytes)."""
    out = bytearray()
    central = bytearray()
    for name, method, crc, usize, data in members:
        encoded = name.encode()
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), usize,
                           len(encoded), 0) + encoded + data
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21, crc, len(data),
                               usize, len(encoded), 0, 0, 0, 0, 0, offset) + encoded
    cd_offset = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), cd_offset, 0)
    path.write_bytes(bytes(out))
    return path


def _stored(name: str, data: bytes):
    return (name, zipfile.ZIP_STORED, zlib.crc32(data), len(data), data)


_ZERO_BOMB: tuple[bytes, int] | None = None


def _zero_bomb(total: int = 2**31, chunk: int = 2**20) -> tuple[bytes, int]:
    """(raw deflate stream, crc32) of `total` zero bytes, built from one
    compressed chunk repeated: a full flush ends each chunk's blocks on a
    byte boundary with no reference back, so the copies concatenate into
    a valid stream (about 2 MB for 2 GiB) that is never inflated here."""
    global _ZERO_BOMB
    if _ZERO_BOMB is None:
        compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
        segment = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
        final = zlib.compressobj(9, zlib.DEFLATED, -15).flush()  # an empty last block
        zeros = bytes(chunk)
        crc = 0
        for _ in range(total // chunk):
            crc = zlib.crc32(zeros, crc)
        _ZERO_BOMB = (segment * (total // chunk) + final, crc)
    return _ZERO_BOMB


# ---------------------------------------------------------------------------
# Legitimate checkpoints
# ---------------------------------------------------------------------------

# The dtypes of the format's table (crates/format/src/dtype_names.rs) that
# torch.save writes. Not here: complex32 (torch saves it, but the format
# has no such dtype), the bitsN and quantized dtypes (qint8 & co: torch
# 2.15 cannot even save a qint8 tensor here), and the sub-byte intN/uintN
# (torch cannot save them).
DTYPES = (
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
    "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
)


def _dtype_tensor(name: str):
    """A 2x3 tensor of dtype `name`, using its range's ends where it has them."""
    import numpy as np
    import torch

    dtype = getattr(torch, name)
    if name == "bool":
        return torch.tensor([[True, False, True], [False, False, True]])
    if name in ("float8_e8m0fnu", "float4_e2m1fn_x2"):
        # Set by bit pattern: e8m0 is a bare exponent (127 = 1.0, 255 = NaN),
        # float4_e2m1fn_x2 is two float4s a byte.
        return torch.tensor([[127, 128, 126], [255, 0, 130]], dtype=torch.uint8).view(dtype)
    if dtype.is_complex:
        return torch.tensor([[1 + 2j, -3.5j, 0], [float("inf") + 0j, -0.0 + 1j, 2.5 - 1j]], dtype=dtype)
    if dtype.is_floating_point:
        return torch.tensor([[-1.5, 0.0, 1.0], [2.25, 3.0, -0.5]], dtype=torch.float32).to(dtype)
    info = np.iinfo(name)  # numpy has every integer dtype torch saves, unsigned 64 included
    values = np.array([[info.min, info.max, 0], [1, info.max // 3, 42]], dtype=name)
    return torch.from_numpy(values)


# Bit patterns: quiet NaN, NaNs with payload bits (one signalling, one
# negative), -0.0, the smallest and largest subnormals, inf, -inf, the
# largest finite and the smallest normal numbers.
SPECIAL_BITS = {
    "float32": ("int32", [0x7FC00000, 0x7FC00001, 0x7F800001, 0xFFC12345, 0x80000000, 0x00000001, 0x007FFFFF,
                          0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x00800000]),
    "float16": ("int16", [0x7E00, 0x7E01, 0x7C01, 0xFE55, 0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7BFF, 0x0400]),
    "bfloat16": ("int16", [0x7FC0, 0x7FC1, 0x7F81, 0xFFD5, 0x8000, 0x0001, 0x007F, 0x7F80, 0xFF80, 0x7F7F, 0x0080]),
    "float64": ("int64", [0x7FF8000000000000, 0x7FF8000000000001, 0x7FF0000000000001, 0xFFF8123456789ABC,
                          0x8000000000000000, 0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x7FF0000000000000,
                          0xFFF0000000000000, 0x7FEFFFFFFFFFFFFF, 0x0010000000000000]),
}


def _special_floats(name: str):
    import numpy as np
    import torch

    carrier, bits = SPECIAL_BITS[name]
    unsigned = {"int16": np.uint16, "int32": np.uint32, "int64": np.uint64}[carrier]
    raw = np.array(bits, dtype=unsigned).view(carrier)  # reinterpreted, never converted: NaN payloads survive
    return torch.from_numpy(raw.copy()).view(getattr(torch, name))


def _torch_load(path: Path):
    """(object, how) for our own legitimate files: weights_only=True, or
    weights_only=False where torch refuses the protocol (1: INT opcodes;
    4 and 5: FRAME), which is safe for files this module wrote with
    torch.save."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return torch.load(path, weights_only=True), "weights_only=True"
        except pickle.UnpicklingError:
            return torch.load(path, weights_only=False), "weights_only=False (torch refuses it with weights_only)"


def _big_endian(path: Path, obj, itemsizes: list[int]) -> None:
    """torch.save `obj`, then relabel the file big-endian: byteorder "big" and
    every storage's elements swapped (storage keys "0", "1", ... are given in
    the order tensors are pickled; itemsizes[i] is storage i's element size)."""
    import io

    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    with zipfile.ZipFile(buffer) as zf:
        members = [(info.filename, zf.read(info)) for info in zf.infolist()]
    archive = members[0][0].split("/")[0]
    out = []
    for name, data in members:
        if name == f"{archive}/byteorder":
            data = b"big"
        elif name.startswith(f"{archive}/data/"):
            size = itemsizes[int(name.rsplit("/", 1)[1])]
            data = b"".join(data[i:i + size][::-1] for i in range(0, len(data), size))
        out.append((name, data))
    _write_zip(path, out)


def legit(dir: Path) -> list[Case]:  # noqa: A002
    """Write the legitimate checkpoints into `dir`; each as a Case whose
    expectations come from torch.load of the file written."""
    import numpy as np
    import torch
    from torch import nn

    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cases: list[Case] = []

    def add(name, obj=None, note="", *, ext=".pt", writer=None, **save_kw):
        path = dir / f"{name}{ext}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if writer is not None:
                writer(path)
            else:
                torch.save(obj, path, **save_kw)
        loaded, how = _torch_load(path)
        tensors, metadata = flatten(loaded)
        cases.append(Case(name, path, tensors, metadata, f"{note} [expect: torch.load {how}]".strip()))

    def basic(tag):
        return {
            "weight": torch.randn(3, 4), "bias": torch.arange(4, dtype=torch.float32),
            "step": 7, "lr": 0.5, "name": tag, "flag": True, "nothing": None,
        }

    # -- Containers and protocols ------------------------------------------
    # Protocol 0 is left out: torch.save writes a PERSID whose id is a repr
    # string, and torch.load itself cannot read the file back.
    for proto in (1, 2, 3, 4, 5):
        add(f"zip-protocol-{proto}", basic(f"protocol {proto}"),
            f"torch.save zip, pickle_protocol={proto}" + (" (torch's default)" if proto == 2 else ""),
            pickle_protocol=proto)
    add("legacy", basic("legacy"), "legacy (non-zip) format: magic, protocol, sys_info, object, keys, storages",
        ext=".bin", _use_new_zipfile_serialization=False)

    # -- Every dtype --------------------------------------------------------
    for name in DTYPES:
        add(f"dtype-{name}", {"t": _dtype_tensor(name)}, f"one 2x3 {name} tensor")

    # -- Special float values (compare bitwise: NaN payloads, -0.0) ---------
    for name in SPECIAL_BITS:
        add(f"special-floats-{name}", {"x": _special_floats(name)},
            f"{name} NaNs with payload bits (one signalling), -0.0, subnormals, +-inf, max, min normal: compare bits")

    # -- Views and odd shapes ------------------------------------------------
    base = torch.arange(10.0)
    add("shared-storage", {"a": base[2:5], "b": base[5:]},
        "two views of one 10-element storage, offsets 2 and 5 (each keeps its own values)")
    same = torch.arange(6.0).reshape(2, 3)
    add("same-tensor-twice", {"x": same, "y": same}, "one tensor under two keys: one storage, one key")
    add("transposed", {"t": torch.arange(12.0).reshape(3, 4).t()}, "a non-contiguous (transposed) view, stride (1, 4)")
    add("expanded-stride-0", {"e": torch.tensor([[1.0, 2.0, 3.0]]).expand(4, 3)},
        "a 4x3 view with stride (0, 1) over a 3-element storage")
    add("empty", {"empty": torch.empty(0, 3), "empty1": torch.zeros(0, dtype=torch.int64)},
        "empty tensors (0x3 and 0): no storage bytes needed")
    add("scalar-0d", {"scalar": torch.tensor(3.5), "iscalar": torch.tensor(7, dtype=torch.int32)}, "0-d tensors")
    add("large", {"big": torch.randn(256, 1024)}, "a 1 MiB tensor")
    add("unicode-keys", {"ünïcødé": torch.ones(2), "emoji🙂": torch.zeros(2), "日本": torch.arange(3)},
        "non-ASCII keys")

    # -- Nested checkpoints --------------------------------------------------
    def training():
        return {
            "state_dict": {"layer": {"weight": torch.randn(2, 3), "bias": torch.zeros(2)}},
            "epoch": 3,
            "optimizer": {
                "state": {0: {"step": torch.tensor(10.0), "exp_avg": torch.randn(2, 3)}},
                "param_groups": [{"lr": 0.1, "params": [0]}],
            },
        }

    add("nested-training", training(),
        "state_dict / epoch / optimizer: int keys and list items flattened by index (optimizer.state.0.exp_avg)")
    add("legacy-nested-training", training(), "the nested checkpoint in the legacy format", ext=".bin",
        _use_new_zipfile_serialization=False)
    add("lists-and-tuples",
        {"pair": (torch.ones(2), torch.zeros(2)), "list": [torch.arange(3), {"deep": torch.eye(2)}],
         "shape": (2, 3), "names": ["x", "y"], "ratio": 0.25},
        "tuples and lists holding tensors and metadata")
    add("top-level-list", [torch.ones(2), torch.arange(3), 5, "five"], "the checkpoint is a list: keys 0, 1, 2, 3")

    # -- Modules -------------------------------------------------------------
    model = nn.Sequential(collections.OrderedDict(
        [("emb", nn.Embedding(10, 4)), ("proj", nn.Linear(4, 3)), ("norm", nn.LayerNorm(3))]))
    add("module-state-dict", model.state_dict(),
        "nn.Module.state_dict(): an OrderedDict with a _metadata attribute (BUILD with a dict state)")
    add("parameters",
        {"p": nn.Parameter(torch.randn(2, 2)), "frozen": nn.Parameter(torch.ones(3), requires_grad=False)},
        "nn.Parameters saved as themselves (_rebuild_parameter)")

    # -- Written by this module's opcode writer -----------------------------
    # The writer every hostile file uses: torch must load what it writes.
    add("handwritten-protocol-2",
        note="written opcode by opcode (the hostile files' writer): weight [1,2,3,4], epoch 3",
        writer=lambda p: _torch_zip(p, BENIGN_PKL))
    add("handwritten-protocol-4",
        note="protocol 4 with FRAME and STACK_GLOBAL, by the opcode writer",
        writer=lambda p: _torch_zip(p, _framed(_dict((_str("weight"), _call(
            _stack_global("torch._utils", "_rebuild_tensor_v2"),
            _tuple(_str("storage"), _stack_global("torch", "FloatStorage"), _str("0"), _str("cpu"), _int(4))
            + pickle.BINPERSID,
            _int(0), _tuple(_int(4)), _tuple(_int(1)), pickle.NEWFALSE,
            _call(_stack_global("collections", "OrderedDict"))))))))

    # -- Big-endian ----------------------------------------------------------
    endian = {"f32": torch.randn(5), "i16": torch.tensor([1, -2, 300], dtype=torch.int16),
              "f64": torch.randn(2, 2, dtype=torch.float64), "bf16": torch.randn(3).to(torch.bfloat16)}
    add("big-endian", note="byteorder 'big', storages byte-swapped per element (as on a big-endian machine)",
        writer=lambda p: _big_endian(p, endian, [4, 2, 8, 2]))
    for key, tensor in endian.items():  # torch.load swaps back: it must give the originals
        got = cases[-1].expect[key]
        assert torch.equal(got, tensor), f"big-endian relabelling went wrong for {key}"

    # Sanity: the corpus's own expectations are what they should be.
    by_name = {c.name: c for c in cases}
    assert by_name["nested-training"].metadata == {"epoch": 3, "optimizer.param_groups.0.lr": 0.1,
                                                   "optimizer.param_groups.0.params.0": 0}
    assert "optimizer.state.0.exp_avg" in by_name["nested-training"].expect
    assert torch.equal(by_name["handwritten-protocol-2"].expect["weight"], torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert np.array_equal(by_name["special-floats-float32"].expect["x"].view(torch.int32).numpy(),
                          _special_floats("float32").view(torch.int32).numpy()), "NaN payloads lost"
    return cases


# ---------------------------------------------------------------------------
# Hostile files
# ---------------------------------------------------------------------------

# The code payloads named in the GLOBAL / STACK_GLOBAL table:
# (module, name, body(g)) with g the opcode writer of globals.
def _argv() -> bytes:
    return _list(_str("touch"), _str(MARKER))


_TARGETS = (
    ("os", "system", lambda g: _call(g("os", "system"), _str(SH))),
    ("posix", "system", lambda g: _call(g("posix", "system"), _str(SH))),
    ("subprocess", "Popen", lambda g: _call(g("subprocess", "Popen"), _argv())),
    ("builtins", "eval", lambda g: _call(g("builtins", "eval"), _str(PY))),
    ("builtins", "exec", lambda g: _call(g("builtins", "exec"), _str(PY))),
    # Python 2's name: pickle maps it to builtins below protocol 3 (fix_imports).
    ("__builtin__", "eval", lambda g: _call(g("__builtin__", "eval"), _str(PY))),
    # getattr(__import__("os"), "system")("touch ..."): getattr is named first.
    ("builtins", "getattr", lambda g: _call(
        _call(g("builtins", "getattr"), _call(g("builtins", "__import__"), _str("os")), _str("system")), _str(SH))),
    # runpy._run_code(code, globals) execs its code (a string will do).
    ("runpy", "_run_code", lambda g: _call(g("runpy", "_run_code"), _str(PY), pickle.EMPTY_DICT)),
    ("pty", "spawn", lambda g: _call(g("pty", "spawn"), _argv())),
)

# A payload on its own: posix.system("touch MARKER") (protocol 2).
SYSTEM = _call(_global("posix", "system"), _str(SH))
INNER = _program(SYSTEM)  # the embedded pickle of the nested cases


class _Writer:
    """Collects Hostile cases written into one directory."""

    def __init__(self, dir: Path):  # noqa: A002
        self.dir = Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cases: list[Hostile] = []

    def _add(self, name, path, kind, must, note, victim, setup=""):
        assert kind in KINDS, kind
        assert all(c.name != name for c in self.cases), name
        self.cases.append(Hostile(name, path, kind, must, None, note, victim, setup))

    def zip(self, name, kind, must, pkl, note="", *, code=True, storages=None, setup=""):
        """A torch.save-shaped zip whose data.pkl is `pkl`."""
        path = _torch_zip(self.dir / f"{name}.pt", pkl, storages)
        self._add(name, path, kind, must, note, "torch" if code else None, setup)

    def bare(self, name, kind, must, pkl, note="", *, code=True, setup=""):
        """A bare pickle (what torch.load's legacy path unpickles first)."""
        path = self.dir / f"{name}.pkl"
        path.write_bytes(pkl)
        self._add(name, path, kind, must, note, "pickle" if code else None, setup)

    def file(self, name, kind, must, writer, note="", *, ext=".pt", victim=None):
        """Any other file, written by writer(path)."""
        path = self.dir / f"{name}{ext}"
        writer(path)
        self._add(name, path, kind, must, note, victim)


def _globals_table(w: _Writer) -> None:
    """Each dangerous callable by GLOBAL (protocol 2, as torch writes) and by
    STACK_GLOBAL (protocol 4, framed), in a torch.save zip and as a bare pickle."""
    for module, name, body in _TARGETS:
        full = f"{module}.{name}"
        for op, pkl in (("", _program(body(_global))), ("-stack", _framed(body(_stack_global)))):
            how = "STACK_GLOBAL" if op else "GLOBAL"
            w.zip(f"global-{full}{op}-zip", "global", full, pkl, f"{how} {full}, called by REDUCE, as data.pkl")
            w.bare(f"global-{full}{op}-bare", "global", full, pkl, f"{how} {full}, called by REDUCE, a bare pickle")
    # The legacy format with a valid head: the payload is the checkpoint object
    # (or the sys_info), unpickled by torch.load after the magic number.
    w.file("global-posix.system-legacy-object", "global", "posix.system",
           lambda p: p.write_bytes(LEGACY_MAGIC + LEGACY_PROTOCOL + LEGACY_SYS_INFO + _program(SYSTEM)),
           "legacy format: valid magic, protocol and sys_info pickles, then the payload as the object",
           ext=".bin", victim="torch")
    w.file("global-posix.system-legacy-sys-info", "global", "posix.system",
           lambda p: p.write_bytes(LEGACY_MAGIC + LEGACY_PROTOCOL + _program(SYSTEM) + BENIGN_PKL),
           "legacy format: the payload in place of the sys_info pickle", ext=".bin", victim="torch")


def _reduce_cases(w: _Writer) -> None:
    """REDUCE payloads hidden inside an otherwise ordinary checkpoint."""
    w.zip("reduce-state-dict-value", "reduce", "posix.system",
          _program(_dict((_str("weight"), _tensor()), (_str("bias"), SYSTEM))),
          "a state_dict whose second value is the payload, after a real tensor")
    w.zip("reduce-dict-key", "reduce", "posix.system",
          _program(_dict((_str("weight"), _tensor()), (SYSTEM, _int(1)))), "the payload as a dictionary key")
    w.zip("reduce-tensor-offset", "reduce", "posix.system",
          _program(_dict((_str("weight"), _tensor(offset_op=SYSTEM)))),
          "the payload as the storage offset argument of an allowed _rebuild_tensor_v2")
    w.zip("reduce-persistent-id", "reduce", "posix.system",
          _program(_dict((_str("weight"), _tensor(pid=_tuple(
              _str("storage"), _global("torch", "FloatStorage"), SYSTEM, _str("cpu"), _int(4)) + pickle.BINPERSID)))),
          "the payload inside the persistent id tuple (it runs before persistent_load sees the id)")
    w.zip("reduce-after-many-tensors", "reduce", "posix.system",
          _program(_dict(*[(_str(f"layer{i}.weight"), _tensor()) for i in range(50)], (_str("z"), SYSTEM))),
          "the payload after 50 legitimate tensors")


def _opcode_cases(w: _Writer) -> None:
    """The other calling opcodes: INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT1/2/4."""
    w.zip("inst-os.system", "inst", "os.system",
          _program(pickle.MARK + _str(SH) + pickle.INST + b"os\nsystem\n"), "INST os.system: a call, protocol 0 style")
    w.bare("inst-os.system-bare", "inst", "os.system",
           _program(pickle.MARK + _str(SH) + pickle.INST + b"os\nsystem\n"), "INST os.system, a bare pickle")
    w.zip("inst-builtins.exec", "inst", "builtins.exec",
          _program(pickle.MARK + _str(PY) + pickle.INST + b"builtins\nexec\n"), "INST builtins.exec")
    w.zip("obj-posix.system", "obj", "posix.system",
          _program(pickle.MARK + _global("posix", "system") + _str(SH) + pickle.OBJ),
          "OBJ: the callable is the first item after MARK")
    w.zip("obj-builtins.eval", "obj", "builtins.eval",
          _program(pickle.MARK + _global("builtins", "eval") + _str(PY) + pickle.OBJ), "OBJ builtins.eval")
    # NEWOBJ calls cls.__new__(cls, *args): functools.partial's __new__ builds
    # partial(posix.system, "touch ..."), which an empty REDUCE then calls.
    w.zip("newobj-functools.partial", "newobj", "functools.partial",
          _framed(_global("functools", "partial") + _tuple(_global("posix", "system"), _str(SH)) + pickle.NEWOBJ
                  + _call(b"")), "NEWOBJ functools.partial(posix.system, cmd), then called")
    w.zip("newobj_ex-functools.partial", "newobj", "functools.partial",
          _framed(_global("functools", "partial") + _tuple(_global("posix", "system"))
                  + _dict((_str("command"), _str(SH))) + pickle.NEWOBJ_EX + _call(b"")),
          "NEWOBJ_EX functools.partial(posix.system, command=cmd) with keyword arguments, then called")
    w.zip("newobj-subprocess.Popen", "newobj", "subprocess.Popen",
          _framed(_global("subprocess", "Popen") + _tuple(_argv()) + pickle.NEWOBJ),
          "NEWOBJ on subprocess.Popen: __new__ without __init__ runs nothing (expected not live), "
          "but the name must be refused all the same")
    # EXT1/2/4 name a global through copyreg's extension registry, which is
    # empty in a fresh process: the proofs register the code first, as a
    # program that called copyreg.add_extension would have.
    for op, code, arg in ((pickle.EXT1, 240, bytes([240])), (pickle.EXT2, 0xF0F0, struct.pack("<H", 0xF0F0)),
                          (pickle.EXT4, 0x12345678, struct.pack("<i", 0x12345678))):
        label = {pickle.EXT1: "EXT1", pickle.EXT2: "EXT2", pickle.EXT4: "EXT4"}[op]
        w.zip(f"ext-{label.lower()}-registered", "ext", label, _program(op + arg + _tuple(_str(SH)) + pickle.REDUCE),
              f"{label} code {code:#x} -> posix.system, live where the process registered it (the proof does)",
              setup=f"import copyreg; copyreg.add_extension('posix', 'system', {code})")
    w.zip("ext-ext1-unregistered", "ext", "EXT1",
          _program(pickle.EXT1 + bytes([241]) + _tuple(_str(SH)) + pickle.REDUCE),
          "EXT1 with a code no one registered (expected not live: pickle refuses it too)")


def _nested_cases(w: _Writer) -> None:
    """A pickle that unpickles embedded bytes: the inner payload is never
    visible to a reader that only checks the outer names."""
    w.zip("nested-pickle.loads", "nested", "pickle.loads",
          _program(_call(_global("pickle", "loads"), _bytes(INNER)), 3),
          "pickle.loads(BINBYTES: a pickle calling posix.system)")
    twice = _program(_call(_global("pickle", "loads"), _bytes(INNER)), 3)
    w.zip("nested-pickle.loads-twice", "nested", "pickle.loads",
          _program(_call(_global("pickle", "loads"), _bytes(twice)), 3),
          "pickle.loads of a pickle.loads of the payload")
    w.zip("nested-_pickle.loads", "nested", "_pickle.loads",
          _program(_call(_global("_pickle", "loads"), _bytes(INNER)), 3),
          "the C module's loads")
    # torch.load(io.BytesIO(inner), None, torch.serialization.pickle): passing a
    # pickle_module turns weights_only off, so the inner pickle runs.
    w.zip("nested-torch.load", "nested", "torch.load",
          _program(_call(_global("torch", "load"), _call(_global("io", "BytesIO"), _bytes(INNER)), pickle.NONE,
                         _global("torch.serialization", "pickle")), 3),
          "torch.load(BytesIO(inner), None, pickle): weights_only off because a pickle_module is given")


def _allowed_module_cases(w: _Writer) -> None:
    """Dangerous callables reached through modules an allow list names
    (torch, collections, numpy): names must match exactly."""
    # torch.storage._load_from_bytes(b) is torch.load(BytesIO(b), weights_only=False);
    # the bytes made with _codecs.encode (allowed) as protocol 2 writes them.
    w.zip("allowed-torch.storage._load_from_bytes", "allowed-module-callable", "torch.storage._load_from_bytes",
          _program(_call(_global("torch.storage", "_load_from_bytes"),
                         _call(_global("_codecs", "encode"), _str(INNER.decode("latin1")), _str("latin1")))),
          "torch.storage._load_from_bytes(_codecs.encode(inner, 'latin1')): torch.load with weights_only=False")
    # torch._tensor._rebuild_from_type_v2(func, type, args, state) calls func(*args).
    w.zip("allowed-torch._tensor._rebuild_from_type_v2", "allowed-module-callable", "_rebuild_from_type_v2",
          _program(_call(_global("torch._tensor", "_rebuild_from_type_v2"), _global("posix", "system"),
                         _global("torch", "Tensor"), _tuple(_str(SH)), pickle.EMPTY_DICT)),
          "torch._tensor._rebuild_from_type_v2(posix.system, Tensor, (cmd,), {}) calls func(*args)")
    # Protocol 4 resolves dotted names attribute by attribute from the module:
    # torch.serialization imports os and pickle.
    w.zip("allowed-dotted-torch.serialization.os.system", "allowed-module-callable", "serialization.os.system",
          _framed(_call(_stack_global("torch", "serialization.os.system"), _str(SH))),
          "STACK_GLOBAL('torch', 'serialization.os.system'): a dotted name walks to os.system")
    w.zip("allowed-dotted-torch._utils.pickle.loads", "allowed-module-callable", "serialization.pickle.loads",
          _program(_call(_global("torch._utils", "torch.serialization.pickle.loads"), _bytes(INNER)), 4),
          "GLOBAL torch._utils / torch.serialization.pickle.loads at protocol 4 (dotted), on an inner payload")
    # BUILD looks __setstate__ up on the instance: the first BUILD puts one in
    # an OrderedDict's __dict__, the second calls it with the state.
    w.zip("allowed-ordereddict-build-setstate", "allowed-module-callable", "posix.system",
          _program(_call(_global("collections", "OrderedDict"))
                   + _dict((_str("__setstate__"), _global("posix", "system"))) + pickle.BUILD
                   + _str(SH) + pickle.BUILD),
          "OrderedDict(); BUILD {'__setstate__': posix.system}; BUILD 'cmd' calls it")
    # An OrderedDict global sits on the stack, but REDUCE calls what is above it.
    w.zip("allowed-ordereddict-reduce-swap", "allowed-module-callable", "posix.system",
          _program(_global("collections", "OrderedDict") + _global("posix", "system") + _tuple(_str(SH))
                   + pickle.REDUCE + pickle.TUPLE2),
          "GLOBAL collections.OrderedDict, then REDUCE on a different callable pushed after it")
    # numpy's object arrays unpickle their elements as ordinary objects.
    dtype_o = (_call(_global("numpy", "dtype"), _str("O8"), pickle.NEWFALSE, pickle.NEWTRUE)
               + _tuple(_int(3), _str("|"), pickle.NONE, pickle.NONE, pickle.NONE, _int(-1), _int(-1), _int(63))
               + pickle.BUILD)
    w.zip("allowed-numpy-object-array", "allowed-module-callable", "numpy.core.multiarray._reconstruct",
          _program(_call(_global("numpy.core.multiarray", "_reconstruct"), _global("numpy", "ndarray"),
                         _tuple(_int(0)), _call(_global("_codecs", "encode"), _str("b"), _str("latin1")))
                   + _tuple(_int(1), _tuple(_int(1)), dtype_o, pickle.NEWFALSE, _list(SYSTEM)) + pickle.BUILD),
          "numpy.core.multiarray._reconstruct with dtype('O'): the element is the payload "
          "(numpy 2 writes numpy._core; torch's allow list has both)")


def _memo_cases(w: _Writer) -> None:
    """Names and callables that reach the call through the memo."""
    w.zip("memo-stack-global-names", "memo", "posix.system",
          _framed(_str("posix") + _put(0) + _str("system") + _put(1) + pickle.POP + pickle.POP
                  + _dict((_str("weight"), _tensor()))  # something in between
                  + pickle.POP + _get(0) + _get(1) + pickle.STACK_GLOBAL + _tuple(_str(SH)) + pickle.REDUCE),
          "STACK_GLOBAL whose module and name strings come from BINGET")
    w.zip("memo-overwritten-names", "memo", "posix.system",
          _framed(pickle.EMPTY_DICT + pickle.MARK
                  + _str("state") + _str("collections") + _put(0) + _str("OrderedDict") + _put(1)
                  + pickle.STACK_GLOBAL + _call(b"")
                  + _str("x") + _str("posix") + _put(0) + pickle.POP + _str("system") + _put(1) + pickle.POP
                  + _get(0) + _get(1) + pickle.STACK_GLOBAL + _tuple(_str(SH)) + pickle.REDUCE
                  + pickle.SETITEMS),
          "memo slots first hold 'collections'/'OrderedDict' (used), then are overwritten with 'posix'/'system'")
    w.zip("memo-overwritten-callable", "memo", "posix.system",
          _program(_global("collections", "OrderedDict") + _put(2) + pickle.POP
                   + _global("posix", "system") + _put(2) + pickle.POP
                   + _get(2) + _tuple(_str(SH)) + pickle.REDUCE),
          "memo slot 2 holds OrderedDict, then posix.system: REDUCE on BINGET 2")
    w.zip("memo-long-index-names", "memo", "posix.system",
          _framed(_str("posix") + _put(100_000) + pickle.POP + _str("system") + _put(100_001) + pickle.POP
                  + _get(100_000) + _get(100_001) + pickle.STACK_GLOBAL + _tuple(_str(SH)) + pickle.REDUCE),
          "names at LONG_BINPUT indices 100000 and 100001 (a sparse memo)")


def _zip_cases(w: _Writer) -> None:
    """The container: member names and duplicates. Which of two same-named
    members torch reads depends on miniz's lookup in its sorted name index,
    not on their order: torch 2.15 reads the last of two data.pkl but the
    first of two data/0 here, so a reader must refuse both."""
    payload = _program(SYSTEM)
    w.file("zip-path-traversal", "zip-path", "..",
           lambda p: _torch_zip(p, payload, archive="../../evil"),
           "every member under ../../evil/ (the archive folder is a traversal)", victim="torch")
    w.file("zip-path-absolute", "zip-path", "/abs/data.pkl",
           lambda p: _torch_zip(p, payload, archive="/abs"), "every member under /abs/ (absolute)", victim="torch")
    w.file("zip-path-drive", "zip-path", "C:",
           lambda p: _torch_zip(p, payload, archive="C:/evil"), "every member under C:/evil/ (a drive path)",
           victim="torch")
    w.file("zip-path-dotdot-alias", "zip-path", "..",
           lambda p: _write_zip(p, _torch_members(BENIGN_PKL) + [("archive/x/../data.pkl", payload)]),
           "a benign archive plus archive/x/../data.pkl (normalises to archive/data.pkl) holding the payload",
           victim="torch")
    w.file("zip-path-second-archive", "zip-path", "evil/",
           lambda p: _write_zip(p, _torch_members(BENIGN_PKL) + _torch_members(payload, archive="evil")),
           "a benign archive/ and a second folder evil/ with its own data.pkl: one archive folder only",
           victim="torch")

    def mismatch(p):
        # The local header says archive/evil.pkl, the central directory archive/data.pkl.
        _torch_zip(p, payload)
        data = p.read_bytes()
        at = data.index(b"archive/data.pkl")  # the first: the local header's name
        p.write_bytes(data[:at] + b"archive/evil.pkl" + data[at + 16:])

    w.file("zip-local-header-mismatch", "zip-path", "local", mismatch,
           "the local header names archive/evil.pkl, the central directory archive/data.pkl", victim="torch")

    storages = [("archive/data/0", FOUR_FLOATS), ("archive/version", b"3\n"), ("archive/byteorder", b"little")]
    w.file("zip-duplicate-last-malicious", "zip-duplicate", "duplicate",
           lambda p: _write_zip(p, [("archive/data.pkl", BENIGN_PKL), ("archive/data.pkl", payload)] + storages),
           "archive/data.pkl twice: benign first, payload last (what zipfile reads; torch 2.15 reads it too)",
           victim="torch")
    w.file("zip-duplicate-first-malicious", "zip-duplicate", "duplicate",
           lambda p: _write_zip(p, [("archive/data.pkl", payload), ("archive/data.pkl", BENIGN_PKL)] + storages),
           "archive/data.pkl twice: payload first, benign last (what zipfile-based scanners and torch 2.15 read)",
           victim="torch")
    w.file("zip-duplicate-storage", "zip-duplicate", "duplicate",
           lambda p: _write_zip(p, _torch_members(BENIGN_PKL) + [("archive/data/0", _floats(9, 9, 9, 9))]),
           "archive/data/0 twice with different values (torch 2.15 reads the first, zipfile the last)")


def _bomb_cases(w: _Writer) -> None:
    """Inputs that cost far more than their size, unless bounded."""
    bomb, crc = _zero_bomb()
    w.file("deflate-bomb-pickle", "deflate-bomb", "compress",
           lambda p: _raw_zip(p, [("archive/data.pkl", zipfile.ZIP_DEFLATED, crc, 2**31, bomb)]
                              + [_stored(n, d) for n, d in _torch_members(b"", {"0": FOUR_FLOATS})[1:]]),
           f"archive/data.pkl deflated: {len(bomb)} bytes that inflate to 2 GiB of zeros")
    w.file("deflate-bomb-storage", "deflate-bomb", "compress",
           lambda p: _raw_zip(p, [_stored("archive/data.pkl", _program(_dict((_str("w"), _tensor(
               numel=2**29, size=(2**29,))))))]
               + [("archive/data/0", zipfile.ZIP_DEFLATED, crc, 2**31, bomb)]
               + [_stored("archive/version", b"3\n"), _stored("archive/byteorder", b"little")]),
           "a consistent 2**29-float tensor whose storage member is deflated zeros: 2 GiB inflated")

    # The memo: sparse (one slot at 2**31, then a missing one) and dense.
    w.zip("memo-bomb-sparse", "memo-bomb", "memo",
          _program(pickle.NONE + pickle.LONG_BINPUT + struct.pack("<I", 2**31) + pickle.POP
                   + pickle.LONG_BINGET + struct.pack("<I", 2**31 - 7)),
          "LONG_BINPUT 2**31 (an array memo allocates 16 GiB), then LONG_BINGET of a slot never put", code=False)
    count = 1_000_100
    w.zip("memo-bomb-dense", "memo-bomb", "memo", _framed(pickle.NONE + pickle.MEMOIZE * count),
          f"{count} MEMOIZEs (one byte each): more memo entries than MAX_PICKLE_STACK", code=False)

    # The stack and the mark stack, one byte an entry: under 1 MiB each.
    w.zip("stack-bomb-marks", "stack-bomb", "stack", _framed(pickle.MARK * count),
          f"{count} MARKs in a FRAME: more than MAX_PICKLE_STACK marks", code=False)
    w.zip("stack-bomb-values", "stack-bomb", "stack", _framed(pickle.NONE * count),
          f"{count} NONEs: more than MAX_PICKLE_STACK stack entries", code=False)
    depth = 100_000
    w.zip("stack-bomb-depth", "stack-bomb", "deep",
          _program(_dict((_str("x"), pickle.EMPTY_LIST * depth + pickle.APPEND * (depth - 1)))),
          f"lists nested {depth} deep (a recursive walk overflows its stack): more than MAX_PICKLE_DEPTH", code=False)

    # Lengths claiming far more than the file holds (files of about 150 bytes).
    def padded(head: bytes, size: int = 150) -> bytes:
        return head + b"A" * (size - len(head))

    w.zip("size-bomb-binunicode", "size-bomb", str(0xFFFF_FFF0),
          padded(_proto(2) + pickle.EMPTY_DICT + _str("weight") + pickle.BINUNICODE + struct.pack("<I", 0xFFFF_FFF0)),
          "BINUNICODE claiming 4294967280 bytes in a 150-byte pickle", code=False)
    w.zip("size-bomb-binbytes8", "size-bomb", str(2**32),
          padded(_proto(4) + pickle.EMPTY_DICT + _str("weight") + pickle.BINBYTES8 + struct.pack("<Q", 2**32)),
          "BINBYTES8 claiming 4 GiB in a 150-byte pickle", code=False)
    w.zip("size-bomb-bytearray8", "size-bomb", str(2**62),
          padded(_proto(5) + pickle.BYTEARRAY8 + struct.pack("<Q", 2**62)),
          "BYTEARRAY8 claiming 2**62 bytes", code=False)
    w.zip("size-bomb-frame", "size-bomb", str(2**40),
          padded(_proto(4) + pickle.FRAME + struct.pack("<Q", 2**40) + pickle.NONE), "FRAME claiming 1 TiB", code=False)
    w.zip("size-bomb-long4", "size-bomb", str(2**31),
          padded(_proto(2) + pickle.LONG4 + struct.pack("<I", 2**31)),
          "LONG4 claiming a 2 GiB integer (and integers beyond 64 bits are refused anyway)", code=False)

    # Tensors whose logical size is the bomb.
    w.zip("size-bomb-stride-0-4tib", "size-bomb", "limit",
          _program(_dict((_str("w"), _tensor(numel=1, size=(2**40,), stride=(0,))))),
          "a stride-0 view of one float claiming 2**40 elements (4 TiB logical); torch.load accepts it",
          storages={"0": _floats(1.0)}, code=False)
    w.zip("size-bomb-shape-overflow", "size-bomb", "limit",
          _program(_dict((_str("w"), _tensor(numel=1, size=(2**32, 2**32), stride=(0, 0))))),
          "a stride-0 view whose element count (2**64) overflows 64 bits", storages={"0": _floats(1.0)}, code=False)
    w.zip("size-bomb-65-dims", "size-bomb", "64",
          _program(_dict((_str("w"), _tensor(numel=1, size=(1,) * 65, stride=(0,) * 65)))),
          "a tensor of 65 dimensions (at most 64)", storages={"0": _floats(1.0)}, code=False)


def _tensor_cases(w: _Writer) -> None:
    """Storages and tensor geometry that disagree with the bytes present."""
    w.zip("storage-numel-2**40", "storage-too-big", str(2**40),
          _program(_dict((_str("w"), _tensor(numel=2**40)))),
          "the persistent id claims 2**40 floats; archive/data/0 holds 16 bytes", code=False)
    w.zip("storage-numel-overflow", "storage-too-big", str(2**62),
          _program(_dict((_str("w"), _tensor(cls="DoubleStorage", numel=2**62)))),
          "2**62 doubles: the byte length (2**65) overflows 64 bits", code=False)
    w.zip("storage-member-missing", "storage-too-big", "data/7",
          _program(_dict((_str("w"), _tensor(key="7")))),
          "the storage key 7 has no archive/data/7 member", code=False)
    w.zip("storage-key-conflict", "storage-too-big", "storage",
          _program(_dict((_str("a"), _tensor()),
                         (_str("b"), _tensor(cls="DoubleStorage", numel=2, size=(2,))))),
          "key 0 as 4 floats, then as 2 doubles (torch silently reuses the first)", code=False)
    w.zip("storage-member-short", "truncated", "storage", _program(_dict((_str("w"), _tensor()))),
          "4 floats claimed, archive/data/0 holds 15 bytes", storages={"0": FOUR_FLOATS[:15]}, code=False)

    ten = {"0": _floats(*range(10))}

    def geometry(name, must, note, **kw):
        w.zip(name, "stride", must, _program(_dict((_str("w"), _tensor(numel=10, **kw)))), note, storages=ten,
              code=False)

    geometry("stride-negative", "stride", "stride -1 from offset 9", offset=9, size=(3,), stride=(-1,))
    geometry("stride-overflow", "stride", "size 3, stride 2**62: (3-1)*stride overflows 64 bits",
             size=(3,), stride=(2**62,))
    geometry("stride-beyond-storage", "storage", "4x4 with stride (4, 1) needs 16 elements of 10",
             size=(4, 4), stride=(4, 1))
    geometry("stride-offset-beyond", "offset", "offset 100 in a storage of 10", offset=100, size=(1,), stride=(1,))
    geometry("stride-offset-negative", "offset", "offset -1", offset=-1, size=(2,), stride=(1,))
    geometry("stride-size-negative", "size", "size -4", size=(-4,), stride=(1,))
    geometry("stride-rank-mismatch", "stride", "two sizes, one stride", size=(2, 2), stride=(1,))


def _truncated_cases(w: _Writer) -> None:
    """Pickles and containers that end early."""
    at_string = BENIGN_PKL.index(pickle.BINUNICODE) + 3  # inside the length of the first string
    at_global = BENIGN_PKL.index(b"torch._utils") + 5  # inside the GLOBAL's module line
    w.zip("truncated-mid-length", "truncated", "truncated", BENIGN_PKL[:at_string],
          "data.pkl cut inside a BINUNICODE length", code=False)
    w.zip("truncated-mid-global", "truncated", "truncated", BENIGN_PKL[:at_global],
          "data.pkl cut inside a GLOBAL's module line", code=False)
    w.zip("truncated-no-stop", "truncated", "STOP", BENIGN_PKL[:-1], "data.pkl complete but for its STOP", code=False)
    w.bare("truncated-bare", "truncated", "truncated", BENIGN_PKL[:len(BENIGN_PKL) // 2],
           "a bare pickle cut in half", code=False)

    def half_zip(p):
        _torch_zip(p, BENIGN_PKL)
        data = p.read_bytes()
        p.write_bytes(data[:len(data) // 2])

    w.file("truncated-zip", "truncated", "zip", half_zip, "a torch.save zip cut in half: no central directory")


# The kinds whose files carry a code payload (prove_live applies to them).
CODE_KINDS = {"global", "reduce", "inst", "obj", "newobj", "ext", "nested", "allowed-module-callable", "memo",
              "zip-path", "zip-duplicate"}


def hostile(dir: Path, prove: bool = False) -> list[Hostile]:  # noqa: A002
    """Write the hostile files into `dir`. With prove=True, load each code
    payload in a subprocess (prove_live) and set its `live`."""
    w = _Writer(dir)
    for section in (_globals_table, _reduce_cases, _opcode_cases, _nested_cases, _allowed_module_cases,
                    _memo_cases, _zip_cases, _bomb_cases, _tensor_cases, _truncated_cases):
        section(w)
    if prove:
        provable = [h for h in w.cases if h.victim is not None]
        with tempfile.TemporaryDirectory(prefix="pickle-corpus-proofs-") as work, \
                concurrent.futures.ThreadPoolExecutor(max_workers=min(8, 2 * (os.cpu_count() or 2))) as pool:
            list(pool.map(lambda h: prove_live(h, Path(work)), provable))
    return w.cases


# ---------------------------------------------------------------------------
# Proof, in a subprocess
# ---------------------------------------------------------------------------

_PROVER = r"""
import sys
victim, path, setup = sys.argv[1:4]
if setup:
    exec(setup)
try:
    if victim == "torch":
        import torch
        torch.load(path, weights_only=False)
    else:
        import pickle
        with open(path, "rb") as f:
            pickle.load(f)
    print("loaded without error")
except BaseException as e:
    print((type(e).__name__ + ": " + str(e)).splitlines()[0][:200])
"""


def prove_live(h: Hostile, workdir: Path) -> bool:
    """Load `h` with the real loader (h.victim) in a subprocess whose working
    directory is a new directory under `workdir`; live when the payload's
    marker file appears there. Sets h.live and h.proof."""
    if h.victim is None:
        raise ValueError(f"{h.name} carries no code payload to prove")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{h.name[:40]}-", dir=workdir))
    try:
        try:
            result = subprocess.run(
                [sys.executable, "-c", _PROVER, h.victim, str(Path(h.path).resolve()), h.setup],
                cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=180,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
            said = result.stdout.strip().splitlines()
            h.proof = said[-1] if said else (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        except subprocess.TimeoutExpired:
            h.proof = "timed out"
        marker = work / MARKER
        deadline = time.monotonic() + 3  # subprocess.Popen's child may still be running
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        h.live = marker.exists()
        return h.live
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------


def _summary(cases: list[Case], hostiles: list[Hostile], proved: bool) -> None:
    print(f"legit: {len(cases)} checkpoints")
    for c in cases:
        print(f"  {c.name:32} {c.path.stat().st_size:>9} B  {len(c.expect or {}):>3} tensors  "
              f"{len(c.metadata):>2} metadata")
    print(f"\nhostile: {len(hostiles)} files")
    counts: dict[str, int] = {}
    for h in hostiles:
        counts[h.kind] = counts.get(h.kind, 0) + 1
    print("  " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    for h in hostiles:
        live = {None: "-", True: "LIVE", False: "not live"}[h.live]
        print(f"  {h.name:48} {h.kind:24} {h.path.stat().st_size:>9} B  {live:8}  "
              f"must mention {h.must_mention!r}" + (f"\n      proof: {h.proof}" if proved and h.victim else ""))
    if proved:
        provable = [h for h in hostiles if h.victim is not None]
        live = [h.name for h in provable if h.live]
        print(f"\nproven live: {len(live)} of {len(provable)} code payloads")
        print("not live: " + (", ".join(h.name for h in provable if not h.live) or "none"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write here (default: a temporary directory, removed after)")
    parser.add_argument("--no-prove", action="store_true", help="do not load the payloads in subprocesses")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pickle-corpus-") as tmp:
        out = args.out or Path(tmp)
        started = time.monotonic()
        cases = legit(out / "legit")
        hostiles = hostile(out / "hostile", prove=not args.no_prove)
        _summary(cases, hostiles, proved=not args.no_prove)
        print(f"\nwritten to {out} in {time.monotonic() - started:.1f} s" + ("" if args.out else " (removed)"))


if __name__ == "__main__":
    main()
