"""Consolidation: a distributed checkpoint as one full-model file, or as a
Hugging Face sharded checkpoint, without a process group."""

import contextlib
import json
import os
import secrets
from typing import Any, Dict, List, Mapping, Optional

import torch
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from .. import _file, _native
from .._legacy import expand_path
from . import _metadata, _store
from ._metadata import METADATA_NAME, ChunkInfo
from ._storage import read_block

#: Hugging Face's default largest shard.
MAX_SHARD_BYTES = 5 << 30


def consolidate(
    checkpoint: Any,
    out: Any,
    *,
    max_shard_bytes: int = MAX_SHARD_BYTES,
    format: Optional[str] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
) -> List[str]:
    """Writes the full tensors of ``checkpoint`` (a directory or URL
    :class:`StorageWriter` saved, or torch's HuggingFaceStorageWriter's) to
    ``out``, returning the paths written.

    ``out`` a directory (existing, or ending in ``/``): a Hugging Face
    sharded checkpoint, ``model-0000k-of-0000n.safetensors`` of at most
    ``max_shard_bytes`` each (a larger tensor gets a shard of its own) and
    ``model.safetensors.index.json``, which transformers loads. Otherwise one
    file: safetensors if ``out`` ends in ``.safetensors`` (or
    ``format="safetensors"``), else deathtensors with per-tensor SHA-256; a
    single file keeps the non-tensor values as JSON in its metadata
    (``dcp.values``).

    Memory: one output shard (the whole model for one file) plus one block
    (16 MiB by default) at a time. Every block read is checked against its
    digest. A checkpoint of ours, on a file system or an object store, is
    consolidated by the same Rust code as ``deathtensors consolidate`` (byte
    for byte the same output); torch's HuggingFaceStorageWriter checkpoints
    by this module.
    """
    store = _store.open_store(checkpoint, storage_options)
    if store.size(METADATA_NAME) is not None:
        # Ours: the Rust code `deathtensors consolidate` runs
        # (deathtensors-io's dcp.rs, objects read through
        # deathtensors-remote), which reads, checks and writes with the GIL
        # released.
        out_s = expand_path(out)
        if os.fspath(out).endswith(("/", os.sep)):
            out_s += os.sep  # normpath drops it; it asks for a directory
        if isinstance(store, _store.RemoteStore):
            written = _native.consolidate(store.url, out_s, max_shard_bytes, format, store.options)
        else:
            written = _native.consolidate(store.path, out_s, max_shard_bytes, format)
        return [os.fspath(p) for p in written]
    doc = _store.read_document(store)
    tensors = {
        fqn: md for fqn, md in doc.metadata.state_dict_metadata.items() if isinstance(md, TensorStorageMetadata)
    }
    chunks: Dict[str, List[ChunkInfo]] = {}
    for info in doc.metadata.storage_data.values():
        if isinstance(info, ChunkInfo):
            chunks.setdefault(info.fqn, []).append(info)
    out_s = os.fspath(out)
    sharded = out_s.endswith(("/", os.sep)) or os.path.isdir(out_s)
    with contextlib.ExitStack() as stack:
        readers = _Readers(store, doc, stack)
        if sharded:
            return _write_sharded(store, doc, tensors, chunks, expand_path(out_s), max_shard_bytes, readers)
        fmt = format or ("safetensors" if out_s.endswith(".safetensors") else "deathtensors")
        values = {}
        for info in doc.metadata.storage_data.values():
            if not isinstance(info, ChunkInfo):
                values[info.fqn] = info.data
        full = {fqn: _assemble(store, doc, md, chunks.get(fqn, []), readers) for fqn, md in tensors.items()}
        meta = {"format": "pt"}
        if values:
            meta["dcp.values"] = json.dumps(values, separators=(",", ":"))
        _file.save(expand_path(out_s), full, global_metadata=meta, checksum=fmt == "deathtensors", format=fmt)
        return [expand_path(out_s)]


class _Readers(dict):
    """Rank files opened (and checked) on first use, closed with the stack."""

    def __init__(self, store: Any, doc: Any, stack: contextlib.ExitStack) -> None:
        super().__init__()
        self.store, self.doc, self.stack = store, doc, stack

    def __missing__(self, name: str) -> Any:
        f = self[name] = self.stack.enter_context(self.store.open_rank_file(name, self.doc))
        return f


def _nbytes(md: TensorStorageMetadata) -> int:
    n = 1
    for d in md.size:
        n *= int(d)
    return n * torch.empty((), dtype=md.properties.dtype).element_size()


def _write_sharded(
    store: Any, doc: Any, tensors: Dict[str, TensorStorageMetadata], chunks: Dict[str, List[ChunkInfo]],
    out: str, max_shard_bytes: int, readers: Dict[str, Any],
) -> List[str]:
    groups: List[List[str]] = []
    size = 0
    for fqn in sorted(tensors):
        n = _nbytes(tensors[fqn])
        if not groups or (size + n > max_shard_bytes and groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(fqn)
        size += n
    os.makedirs(out, exist_ok=True)
    weight_map: Dict[str, str] = {}
    written = []
    total = 0
    for k, group in enumerate(groups, 1):
        name = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        shard = {fqn: _assemble(store, doc, tensors[fqn], chunks.get(fqn, []), readers) for fqn in group}
        for fqn, t in shard.items():
            if t.dtype in _metadata.SAFETENSORS_LACKS:
                raise TypeError(f"tensor {fqn!r} is {t.dtype}, which safetensors cannot hold; consolidate to a .dt file")
        _file.save(os.path.join(out, name), shard, global_metadata={"format": "pt"}, format="safetensors")
        total += sum(t.numel() * t.element_size() for t in shard.values())
        weight_map.update({fqn: name for fqn in group})
        written.append(os.path.join(out, name))
        del shard
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    path = os.path.join(out, "model.safetensors.index.json")
    tmp = f"{path}.tmp-{secrets.token_hex(4)}"
    with open(tmp, "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return written + [path]


def _assemble(store: Any, doc: Any, md: TensorStorageMetadata, chunks: List[ChunkInfo], readers: Dict[str, Any]) -> torch.Tensor:
    """The full tensor, filled chunk by chunk, tile by tile (checked)."""
    full = torch.empty(list(md.size), dtype=md.properties.dtype)
    for c in chunks:
        f = readers[c.file]
        box = full
        for d, (o, s) in enumerate(zip(c.offsets, c.sizes)):
            box = box.narrow(d, o, s)
        if box.numel() == 0:
            continue
        for tile in c.tiles():
            part = box.narrow(0, tile.r0, tile.r1 - tile.r0) if box.dim() else box
            if box.dim() > 1:
                part = part.narrow(1, tile.c0, tile.c1 - tile.c0)
            read_block(f, c, tile, part)
    return full

