"""A checkpoint's global metadata as JSON (``deathtensors.json``), never pickle.

The document (``docs/DISTRIBUTED.md`` has the full description)::

    {"deathtensors_dcp": 1, "save_id": "<16 hex>", "format": "deathtensors",
     "dcp_version": "1.0.0",
     "files": {"rank-00000-<save_id>.dt": {"rank": 0, "size": 123}, ...},
     "tensors": {fqn: {"dtype": "float32", "size": [...],
                       "chunks": [{"offsets": [...], "sizes": [...], "file": ...,
                                   "rows": 1024, "cols": 256, "sha256": [...]}]}},
     "values": {fqn: <value JSON, see _values.py>},
     "planner_data": <value JSON>,
     "storage_meta": {"checkpoint_id": ..., "save_id": ..., "modules": [...]}}

A chunk (one item of DCP's plan) is stored as tiles of ``rows`` rows
along its first dimension and, when ``cols`` is present (chunks of two or
more dimensions), ``cols`` indices along its second, in row-major order;
each tile is a tensor of the rank file named :func:`block_name` (the
tile's global offsets), so that a reader that needs part of a chunk (a
range of rows, or of columns when it loads another placement) reads and
checks only the tiles it overlaps. Without ``cols`` a tile spans the
chunk's whole second dimension (a block of rows). ``sha256`` (one digest a
tile, in tile order) is present for safetensors rank files, which carry no
digests themselves; deathtensors files carry their own.

:func:`parse` checks every field of a document read from storage: a hostile
or damaged one is a :class:`~deathtensors.errors.FormatError` saying what is
wrong, before anything is read from the rank files.
"""

import dataclasses
import json
import math
import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from ..errors import FormatError
from . import _values

#: The name of the metadata object, written last: a checkpoint exists once
#: it does.
METADATA_NAME = "deathtensors.json"
#: The version of the document this module writes and reads.
VERSION = 1
#: Refuse larger metadata documents: a checkpoint of 100,000 tensors sharded
#: on 1,000 ranks needs about 100 MB; the bound keeps a hostile file from
#: taking all memory.
MAX_METADATA_BYTES = 512 << 20
#: Tensors of more dimensions are refused (torch allows 64... in practice 25).
MAX_RANK = 64
#: Refuse chunks of more tiles: a writer makes tiles of megabytes, so a
#: chunk of a million tiles is a terabyte; a hostile ``rows`` of 1 on a
#: huge chunk is refused before anything lists its tiles.
MAX_TILES = 1 << 20

_RANK_FILE = re.compile(r"^rank-(\d{5,9})-([0-9a-f]{16})\.(dt|safetensors)$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
EXTENSIONS = {"deathtensors": "dt", "safetensors": "safetensors"}


def rank_file_name(rank: int, save_id: str, fmt: str) -> str:
    """``rank-00003-<save_id>.dt``: a rank's file of one save."""
    return f"rank-{rank:05d}-{save_id}.{EXTENSIONS[fmt]}"


def parse_rank_file_name(name: str) -> Optional[Tuple[int, str]]:
    """(rank, save id) of a rank file's name, or ``None`` for other names."""
    m = _RANK_FILE.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


_SAVING = re.compile(r"^deathtensors\.saving-([0-9a-f]{16})\.json$")


def saving_name(save_id: str) -> str:
    """``deathtensors.saving-<save id>.json``: the marker of a save that has
    not committed (who runs it, since when), written by its coordinator
    before any rank writes and removed after its commit."""
    return f"deathtensors.saving-{save_id}.json"


def parse_saving_name(name: str) -> Optional[str]:
    """The save id of a save marker's name, or ``None`` for other names."""
    m = _SAVING.match(name)
    return m.group(1) if m else None


def block_name(fqn: str, offsets: List[int]) -> str:
    """The tensor name of a block: its tensor's name and global offsets."""
    return fqn + "@" + ",".join(str(o) for o in offsets)


class Tile(NamedTuple):
    """A tile of a chunk: rows ``r0:r1`` and columns (indices of the second
    dimension) ``c0:c1`` within the chunk; the columns are ``0:0`` for a
    chunk of fewer than two dimensions."""

    r0: int
    r1: int
    c0: int
    c1: int


def tiles(sizes: List[int], rows: int, cols: Optional[int] = None) -> List[Tile]:
    """A chunk's tiles, in row-major order (one for a scalar or an empty
    chunk)."""
    if not sizes or 0 in sizes:
        n = sizes[0] if sizes else 0
        return [Tile(0, n, 0, sizes[1] if len(sizes) > 1 else 0)]
    width = sizes[1] if len(sizes) > 1 else 0
    step = cols if cols and width else max(width, 1)
    return [
        Tile(r, min(r + rows, sizes[0]), c, min(c + step, width))
        for r in range(0, sizes[0], rows)
        for c in (range(0, width, step) if width else [0])
    ]


def block_offsets(offsets: List[int], tile: Tile) -> List[int]:
    """Global offsets of a tile of the chunk at ``offsets``."""
    if not offsets:
        return []
    if len(offsets) == 1:
        return [offsets[0] + tile.r0]
    return [offsets[0] + tile.r0, offsets[1] + tile.c0, *offsets[2:]]


@dataclasses.dataclass(frozen=True)
class ChunkInfo:
    """Where one saved chunk is: the rank file and its blocks."""

    fqn: str
    offsets: Tuple[int, ...]
    sizes: Tuple[int, ...]
    dtype: torch.dtype
    file: str
    rows: int
    sha256: Optional[Tuple[str, ...]] = None
    #: The tensor's name in a file of one block per chunk that we did not
    #: write (torch's HuggingFaceStorageWriter), which has no digests.
    foreign_name: Optional[str] = None
    #: Columns a tile (``None``: the whole second dimension).
    cols: Optional[int] = None

    def tiles(self) -> List[Tile]:
        return tiles(list(self.sizes), self.rows, self.cols)

    def tile_index(self, tile: Tile) -> int:
        """The position of ``tile`` in :meth:`tiles` (its digest's)."""
        per_row = 1 if not self.cols or len(self.sizes) < 2 else -(-self.sizes[1] // self.cols)
        return (tile.r0 // self.rows) * per_row + (tile.c0 // self.cols if self.cols else 0)

    def tile_shape(self, tile: Tile) -> List[int]:
        """The shape of ``tile``'s tensor."""
        if not self.sizes:
            return []
        if len(self.sizes) == 1:
            return [tile.r1 - tile.r0]
        return [tile.r1 - tile.r0, tile.c1 - tile.c0, *self.sizes[2:]]

    def block_name(self, tile: Tile) -> str:
        if self.foreign_name is not None:
            return self.foreign_name
        return block_name(self.fqn, block_offsets(list(self.offsets), tile))


@dataclasses.dataclass(frozen=True)
class ValueInfo:
    """A non-tensor value, still as the JSON the document holds (decoded
    when it is loaded, so errors name the key being loaded)."""

    fqn: str
    data: Any


@dataclasses.dataclass
class Document:
    """A parsed metadata document: DCP's ``Metadata`` and what our storage
    needs to read it."""

    metadata: Metadata
    save_id: str
    format: str
    files: Dict[str, Dict[str, int]]
    #: A checkpoint torch's HuggingFaceStorageWriter wrote: no save id to
    #: check, no digests.
    foreign: bool = False


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def dumps(doc: Dict[str, Any]) -> bytes:
    """The document's bytes (compact, deterministic key order, no NaN)."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode()


def encode(
    metadata: Metadata,
    save_id: str,
    fmt: str,
    files: Dict[str, Dict[str, int]],
    chunk_data: Dict[Tuple[str, Tuple[int, ...]], Dict[str, Any]],
    values: Dict[str, Any],
    planner_data: Any,
    storage_meta: Optional[StorageMeta],
) -> Dict[str, Any]:
    """The document of a finished save. ``chunk_data`` maps (fqn, chunk
    offsets) to the ``file``/``rows``/``sha256`` the rank that wrote it
    reported."""
    tensors: Dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            if fqn not in values:
                raise RuntimeError(f"no rank wrote the value of {fqn!r}")
            continue
        chunks = []
        for c in md.chunks:
            offsets = tuple(int(o) for o in c.offsets)
            where = chunk_data.get((fqn, offsets))
            if where is None:
                raise RuntimeError(f"no rank wrote the chunk of {fqn!r} at {list(offsets)}")
            chunks.append({"offsets": list(offsets), "sizes": [int(s) for s in c.sizes], **where})
        tensors[fqn] = {"dtype": _values.dtype_name(md.properties.dtype), "size": [int(s) for s in md.size], "chunks": chunks}
    meta = None
    if storage_meta is not None:
        meta = {
            "checkpoint_id": None if storage_meta.checkpoint_id is None else str(storage_meta.checkpoint_id),
            "save_id": save_id,
            "modules": [str(m) for m in storage_meta.modules],
        }
    return {
        "deathtensors_dcp": VERSION,
        "save_id": save_id,
        "format": fmt,
        "dcp_version": metadata.version,
        "files": files,
        "tensors": tensors,
        "values": values,
        "planner_data": planner_data,
        "storage_meta": meta,
    }


def parse(data: bytes, where: str) -> Document:
    """Parses and checks a metadata document read from ``where``.

    Raises :class:`FormatError` naming ``where`` and the field for anything
    this module would not have written.
    """

    def bad(why: str) -> FormatError:
        return FormatError(f"invalid checkpoint metadata {where}: {why}")

    if len(data) > MAX_METADATA_BYTES:
        raise bad(f"{len(data)} bytes, more than the {MAX_METADATA_BYTES} allowed")
    if data[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05"):
        raise bad("this is a pickle, not JSON (a FileSystemWriter checkpoint?); deathtensors never unpickles metadata")
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except RecursionError:
        raise bad("nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"not a JSON document ({e})") from None
    if not isinstance(doc, dict):
        raise bad("not a JSON object")
    known = {"deathtensors_dcp", "save_id", "format", "dcp_version", "files", "tensors", "values", "planner_data", "storage_meta"}
    if set(doc) - known:
        raise bad(f"unknown fields {sorted(set(doc) - known)}")
    if doc.get("deathtensors_dcp") != VERSION:
        raise bad(f"version {doc.get('deathtensors_dcp')!r}, this reader knows {VERSION}")
    save_id = doc.get("save_id")
    if not isinstance(save_id, str) or not re.fullmatch(r"[0-9a-f]{16}", save_id):
        raise bad("save_id must be 16 lowercase hex digits")
    fmt = doc.get("format")
    if fmt not in EXTENSIONS:
        raise bad(f"format {fmt!r}")
    dcp_version = doc.get("dcp_version")
    if dcp_version is not None and not isinstance(dcp_version, str):
        raise bad("dcp_version must be a string")

    files = doc.get("files")
    if not isinstance(files, dict):
        raise bad("files must be an object")
    for name, f in files.items():
        parsed = parse_rank_file_name(name)
        if parsed is None or parsed[1] != save_id or not name.endswith("." + EXTENSIONS[fmt]):
            raise bad(f"file {name!r} is not a rank file of save {save_id}")
        if not isinstance(f, dict) or set(f) != {"rank", "size"} or not all(_nat(f[k]) for k in f):
            raise bad(f"file {name!r}: needs rank and size, non-negative integers")
        if f["rank"] != parsed[0]:
            raise bad(f"file {name!r}: rank {f['rank']} differs from its name")

    state: Dict[str, Any] = {}
    storage: Dict[MetadataIndex, Any] = {}
    tensors = doc.get("tensors")
    if not isinstance(tensors, dict):
        raise bad("tensors must be an object")
    for fqn, t in tensors.items():
        what = f"tensor {fqn!r}"
        if not isinstance(t, dict) or set(t) != {"dtype", "size", "chunks"}:
            raise bad(f"{what}: needs dtype, size and chunks")
        try:
            dtype = _values.dtype_from_name(t["dtype"], what)
        except ValueError as e:
            raise bad(str(e)) from None
        size = t["size"]
        if not _dims(size):
            raise bad(f"{what}: size must be at most {MAX_RANK} non-negative integers")
        if not isinstance(t["chunks"], list):
            raise bad(f"{what}: chunks must be a list")
        chunks = []
        for c in t["chunks"]:
            if not isinstance(c, dict) or not {"offsets", "sizes", "file", "rows"} <= set(c) <= {"offsets", "sizes", "file", "rows", "cols", "sha256"}:
                raise bad(f"{what}: a chunk needs offsets, sizes, file and rows (and may have cols and sha256)")
            offsets, sizes = c["offsets"], c["sizes"]
            if not (_dims(offsets) and _dims(sizes) and len(offsets) == len(sizes) == len(size)):
                raise bad(f"{what}: a chunk's offsets and sizes must have the tensor's {len(size)} dimensions")
            if any(o + s > d for o, s, d in zip(offsets, sizes, size)):
                raise bad(f"{what}: chunk at {offsets} of sizes {sizes} lies outside the tensor's size {size}")
            if c["file"] not in files:
                raise bad(f"{what}: chunk at {offsets} names file {c['file']!r}, which files does not list")
            rows = c["rows"]
            if not _nat(rows) or rows == 0:
                raise bad(f"{what}: chunk at {offsets}: rows must be a positive integer")
            cols = c.get("cols")
            if cols is not None and (not _nat(cols) or cols == 0 or len(sizes) < 2):
                raise bad(f"{what}: chunk at {offsets}: cols must be a positive integer, on a chunk of 2 or more dimensions")
            n_tiles = _tile_count(sizes, rows, cols)
            if n_tiles > MAX_TILES:
                raise bad(f"{what}: chunk at {offsets}: {n_tiles} tiles, more than the {MAX_TILES} allowed")
            sha = c.get("sha256")
            if fmt == "safetensors":
                if not isinstance(sha, list) or len(sha) != n_tiles or not all(isinstance(h, str) and _HEX64.match(h) for h in sha):
                    raise bad(f"{what}: chunk at {offsets}: sha256 must list one digest for each of its {n_tiles} tiles")
            elif sha is not None:
                raise bad(f"{what}: chunk at {offsets}: sha256 only belongs to safetensors rank files")
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)))
            storage[MetadataIndex(fqn, offsets)] = ChunkInfo(
                fqn, tuple(offsets), tuple(sizes), dtype, c["file"], rows, None if sha is None else tuple(sha), cols=cols
            )
        _check_cover(size, [(c["offsets"], c["sizes"]) for c in t["chunks"]], bad, what)
        state[fqn] = TensorStorageMetadata(properties=TensorProperties(dtype=dtype), size=torch.Size(size), chunks=chunks)

    values = doc.get("values")
    if not isinstance(values, dict):
        raise bad("values must be an object")
    for fqn, v in values.items():
        if fqn in state:
            raise bad(f"{fqn!r} is both a tensor and a value")
        state[fqn] = BytesStorageMetadata()
        storage[MetadataIndex(fqn)] = ValueInfo(fqn, v)

    try:
        planner_data = _values.decode(doc.get("planner_data"), "planner_data")
    except ValueError as e:
        raise bad(str(e)) from None
    meta = doc.get("storage_meta")
    storage_meta = StorageMeta()
    if meta is not None:
        if not isinstance(meta, dict) or set(meta) != {"checkpoint_id", "save_id", "modules"}:
            raise bad("storage_meta needs checkpoint_id, save_id and modules")
        if not isinstance(meta["modules"], list) or not all(isinstance(m, str) for m in meta["modules"]):
            raise bad("storage_meta.modules must be strings")
        storage_meta = StorageMeta(checkpoint_id=meta["checkpoint_id"], save_id=meta["save_id"], modules=meta["modules"])
    metadata = Metadata(
        state_dict_metadata=state,
        planner_data=planner_data,
        storage_data=storage,
        storage_meta=storage_meta,
        version=dcp_version,
    )
    return Document(metadata, save_id, fmt, files)


def _tile_count(sizes: List[int], rows: int, cols: Optional[int]) -> int:
    """How many tiles :func:`tiles` gives, without listing them (a hostile
    ``rows`` or ``cols`` of 1 on a huge chunk would be billions)."""
    if not sizes or 0 in sizes:
        return 1
    across = -(-sizes[1] // cols) if cols and len(sizes) > 1 else 1
    return -(-sizes[0] // rows) * across


def _nat(v: Any) -> bool:
    return type(v) is int and v >= 0


def _dims(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= MAX_RANK and all(_nat(d) for d in v)


def _check_cover(size: List[int], chunks: List[Tuple[List[int], List[int]]], bad: Any, what: str) -> None:
    """Chunks must not overlap and must add up to the tensor (DCP saves each
    element once; a reader would otherwise leave elements unset or read
    two versions of one)."""
    total = math.prod(size)
    if sum(math.prod(s) for _, s in chunks) != total:
        raise bad(f"{what}: its chunks do not add up to its {total} elements")
    if len(chunks) <= 64:
        for i, (oa, sa) in enumerate(chunks):
            for ob, sb in chunks[:i]:
                if math.prod(sa) and math.prod(sb) and all(a < b + m and b < a + n for a, n, b, m in zip(oa, sa, ob, sb)):
                    raise bad(f"{what}: chunks at {oa} and {ob} overlap")
