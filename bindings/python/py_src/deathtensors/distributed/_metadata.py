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

:func:`parse` has Rust check every field of a document read from storage
(``_native.check_checkpoint_metadata``, the check the command line's
``consolidate`` runs: limits, names, duplicate keys, unknown fields, the
chunks' cover): a hostile or damaged one is a
:class:`~deathtensors.errors.FormatError` saying what is wrong, before
anything is read from the rank files. This module only converts the checked
document to and from torch's objects.
"""

import dataclasses
import json
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

from .. import _dtypes, _native
from ..errors import FormatError
from . import _values

#: The name of the metadata object, written last: a checkpoint exists once
#: it does.
METADATA_NAME = _native.DCP_METADATA
#: torch dtypes a safetensors file cannot hold (format's `Format::holds`,
#: the dtype table's "safetensors" column): stored as bytes in a rank file,
#: refused in a consolidated one.
SAFETENSORS_LACKS = frozenset(
    getattr(torch, row["torch"])
    for row in _dtypes.TABLE.values()
    if not row["safetensors"] and row["torch"] and isinstance(getattr(torch, row["torch"], None), torch.dtype)
)
#: The version of the document this module writes and reads (io's).
VERSION = _native.DCP_VERSION
EXTENSIONS = {"deathtensors": "dt", "safetensors": "safetensors"}


def rank_file_name(rank: int, save_id: str, fmt: str) -> str:
    """``rank-00003-<save_id>.dt``: a rank's file of one save."""
    return _native.rank_file_name(rank, save_id, EXTENSIONS[fmt])


def parse_rank_file_name(name: str) -> Optional[Tuple[int, str]]:
    """(rank, save id) of a rank file's name, or ``None`` for other names."""
    parsed = _native.parse_rank_file_name(name)
    return None if parsed is None else (int(parsed[0]), parsed[1])


def saving_name(save_id: str) -> str:
    """The name of the marker of a save that has not committed (who runs
    it, since when), written by its coordinator before any rank writes and
    removed after its commit."""
    return _native.save_marker_name(save_id)


def parse_saving_name(name: str) -> Optional[str]:
    """The save id of a save marker's name, or ``None`` for other names."""
    return _native.parse_save_marker_name(name)


def block_name(fqn: str, offsets: List[int]) -> str:
    """The tensor name of a block: its tensor's name and global offsets."""
    return _native.block_name(fqn, offsets)


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
    return [Tile(*t) for t in _native.chunk_tiles(list(sizes), rows, cols or None)]


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


def parse(data: bytes, where: str, rank: Optional[int] = None) -> Document:
    """Parses a metadata document read from ``where``, checked by Rust
    (with ``rank``: a rank's own document, naming only that rank's files).

    Raises :class:`FormatError` naming ``where`` and the field for anything
    the writer would not have written.
    """

    def bad(why: str) -> FormatError:
        return FormatError(f"invalid checkpoint metadata {where}: {why}")

    _native.check_checkpoint_metadata(bytes(data), where, rank)
    # Checked: UTF-8 JSON, unique keys, every field as the writer writes it.
    doc = json.loads(data)
    fmt = doc["format"]
    files = doc["files"]
    state: Dict[str, Any] = {}
    storage: Dict[MetadataIndex, Any] = {}
    for fqn, t in doc["tensors"].items():
        try:
            dtype = _values.dtype_from_name(t["dtype"], f"tensor {fqn!r}")
        except ValueError as e:
            raise bad(str(e)) from None
        chunks = []
        for c in t["chunks"]:
            offsets, sizes, sha = c["offsets"], c["sizes"], c.get("sha256")
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)))
            storage[MetadataIndex(fqn, offsets)] = ChunkInfo(
                fqn, tuple(offsets), tuple(sizes), dtype, c["file"], c["rows"], None if sha is None else tuple(sha), cols=c.get("cols")
            )
        state[fqn] = TensorStorageMetadata(properties=TensorProperties(dtype=dtype), size=torch.Size(t["size"]), chunks=chunks)
    for fqn, v in doc["values"].items():
        state[fqn] = BytesStorageMetadata()
        storage[MetadataIndex(fqn)] = ValueInfo(fqn, v)

    try:
        planner_data = _values.decode(doc.get("planner_data"), "planner_data")
    except ValueError as e:
        raise bad(str(e)) from None
    meta = doc.get("storage_meta")
    storage_meta = StorageMeta()
    if meta is not None:
        storage_meta = StorageMeta(checkpoint_id=meta["checkpoint_id"], save_id=meta["save_id"], modules=meta["modules"])
    metadata = Metadata(
        state_dict_metadata=state,
        planner_data=planner_data,
        storage_data=storage,
        storage_meta=storage_meta,
        version=doc.get("dcp_version"),
    )
    return Document(metadata, doc["save_id"], fmt, files)


class HfFile(NamedTuple):
    """One safetensors file of a checkpoint torch's
    ``HuggingFaceStorageWriter`` wrote, as read from its header: its name,
    where it is (for errors), its metadata and its tensors' ``(name, shape,
    dtype code)``."""

    name: str
    where: str
    metadata: Dict[str, str]
    tensors: List[Tuple[str, List[int], str]]


def hf_document(where: str, files: List[HfFile]) -> Document:
    """The checkpoint metadata of ``files`` (a ``HuggingFaceStorageWriter``
    checkpoint at ``where``): each tensor's chunks placed by the files'
    ``DCP_SHARDING_INFO`` (``saved_offsets``), their cover checked as our
    documents' are. Such files carry no digests: the document is
    ``foreign``, its reads unchecked."""
    state: Dict[str, Any] = {}
    storage: Dict[Any, Any] = {}
    covers: Dict[str, Any] = {}
    for f in files:
        sharding = None
        if "DCP_SHARDING_INFO" in f.metadata:
            try:
                sharding = json.loads(f.metadata["DCP_SHARDING_INFO"])
            except ValueError:
                raise FormatError(f"{f.where}: DCP_SHARDING_INFO is not JSON") from None
            if not isinstance(sharding, dict):
                raise FormatError(f"{f.where}: DCP_SHARDING_INFO is not an object")
        for key, shape, code in f.tensors:
            # torch's name for it; none for a packed type (torch's float4 counts pairs).
            dtype = getattr(torch, _dtypes.TORCH_NAMES.get(code, ""), None) if code in _dtypes.ITEMSIZE else None
            if not isinstance(dtype, torch.dtype):
                raise FormatError(f"{f.where}: tensor {key!r} has dtype {code}, which DCP does not load")
            offsets = [0] * len(shape)
            if sharding is not None and key in sharding:
                info = sharding[key]
                offsets = info.get("saved_offsets") if isinstance(info, dict) else None
                if not isinstance(offsets, list) or len(offsets) != len(shape) or not all(type(o) is int and o >= 0 for o in offsets):
                    raise FormatError(f"{f.where}: tensor {key!r}: saved_offsets must be {len(shape)} non-negative integers")
            chunk = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(shape))
            md = state.get(key)
            if md is None:
                md = state[key] = TensorStorageMetadata(TensorProperties(dtype=dtype), torch.Size([0] * len(shape)), [])
            elif md.properties.dtype != dtype or len(md.size) != len(shape):
                raise FormatError(f"{f.where}: tensor {key!r} differs in dtype or rank from its other chunks")
            md.chunks.append(chunk)
            md.size = torch.Size([max(a, o + s) for a, o, s in zip(md.size, offsets, shape)])
            covers.setdefault(key, []).append((offsets, shape))
            storage[MetadataIndex(key, offsets)] = ChunkInfo(
                key, tuple(offsets), tuple(shape), dtype, f.name, max(1, shape[0] if shape else 1), None, key
            )
    if not state:
        raise FileNotFoundError(f"no checkpoint at {where}: no {METADATA_NAME} and no tensors")
    for key, chunks in covers.items():
        itemsize = state[key].properties.dtype.itemsize
        why = _native.check_chunk_cover(list(state[key].size), itemsize, chunks)
        if why is not None:
            raise FormatError(f"{where}: tensor {key!r}: {why}")
    metadata = Metadata(state_dict_metadata=state, storage_data=storage, storage_meta=StorageMeta())
    return Document(metadata, "", "safetensors", {f.name: {} for f in files}, foreign=True)
