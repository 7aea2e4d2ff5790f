"""``StorageWriter`` and ``StorageReader``: deathtensors as the storage of
``torch.distributed.checkpoint``.

Commit protocol (``docs/DISTRIBUTED.md``): the coordinator picks a save id
when it makes the global plan; every rank writes its own file
``rank-NNNNN-<save id>.dt`` with the durable writer (file fsynced, renamed
into place, directory fsynced) and returns; DCP gathers the results, and only
then does the coordinator check the files and write ``deathtensors.json``
atomically (temp file, fsync, rename, directory fsync). A checkpoint is the
metadata and the files it names: files of another save id, from a save that
did not commit, are never read. The coordinator marks its save as running
(``deathtensors.saving-<save id>.json``) before any rank writes, removes
the files of earlier saves that failed then, and those of the replaced
checkpoint after its own commit. So a save killed at any instant leaves the
previous checkpoint (its metadata and files untouched) or the new one, and
a failed save's files are gone once the next save starts.
"""

import dataclasses
import math
import os
import secrets
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
from torch.distributed.checkpoint import storage as dcp_storage
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.staging import BlockingAsyncStager
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.futures import Future

from .. import _file, _native
from .._remote import is_url
from ..errors import FormatError, IntegrityError
from . import _metadata, _store, _values
from ._metadata import METADATA_NAME, ChunkInfo, ValueInfo

try:
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION as DCP_VERSION
except ImportError:  # older torch
    DCP_VERSION = "1.0.0"

PathOrUrl = Union[str, "os.PathLike[str]"]

#: A chunk is stored as tiles of about this many bytes: a reader that needs
#: part of a chunk reads and checks whole tiles, and a tile is the most a
#: load holds besides the tensors it fills.
BLOCK_BYTES = 16 << 20
#: Chunks of two or more dimensions are cut into this many column tiles
#: (along their second dimension), so that a load of another placement
#: (saved Shard(0), loaded Shard(1)) reads and hashes only the columns it
#: needs: with 8, splits of the columns in 2, 4 or 8 fall on tile edges.
TILES = 8


def _bytes_of(t: torch.Tensor) -> Any:
    """A writable byte view (numpy) of a contiguous CPU tensor."""
    return t.reshape(-1).view(torch.uint8).numpy()


@dataclasses.dataclass(frozen=True)
class _RankPlan:
    """What the coordinator tells each rank: its rank and the save id."""

    rank: int
    save_id: str


class StorageWriter(dcp_storage.StorageWriter, BlockingAsyncStager):
    """Saves a distributed checkpoint as deathtensors (or safetensors) files,
    one per rank, with JSON metadata committed last.

    ``path`` is a directory (created if missing) or an ``s3://``, ``gs://``
    or ``az://`` URL (``storage_options`` as in :func:`deathtensors.open`).
    ``format`` is ``"deathtensors"`` (per-tensor SHA-256 in each file) or
    ``"safetensors"`` (digests kept in the metadata). Non-tensor values are
    stored as JSON; other objects are refused naming their key, unless
    ``allow_pickle=True`` (then only ``StorageReader(allow_pickle=True)``
    loads them). ``durable=False`` skips the fsyncs (tests, scratch).
    ``drop_cache`` (default: on for durable saves to a directory) keeps the
    rank files out of the page cache: on Linux they are written around it
    (``O_DIRECT``) where the file system allows, so a checkpoint evicts
    nothing the job had cached and costs no page allocations (a 2 GiB
    checkpoint on 4 ranks saved in a third of the time on this project's
    2-core machine); a load soon after reads from the disk.
    ``drop_cache=False`` keeps them cached (loads right after the save).
    Of :func:`deathtensors.save`'s write keywords it takes ``format``,
    ``durable`` and ``drop_cache`` (default: ``durable``, where ``save``'s
    is False: a checkpoint is written once and read later, by another job);
    the others are the writer's own: digests are always recorded (as
    ``format`` says above), tiles are laid out by ``block_bytes`` and
    ``tiles``, the checkpoint's metadata is its JSON document, and
    compression, encryption and signatures are not offered for checkpoints.
    A save removes, before its ranks write, the rank files of earlier
    saves of this checkpoint that failed, and after its commit those of the
    checkpoint it replaces; never the committed checkpoint's files before
    its commit, nor those of a save still running (its coordinator's
    process and thread alive, or, started on another host, for
    ``stale_after`` seconds: an hour). ``keep_stale=True`` leaves the files
    of older or failed saves in place instead. Each chunk is stored
    as tiles of about ``block_bytes`` (16 MiB), cut into ``tiles`` column
    tiles when it has two or more dimensions (1: blocks of whole rows), each
    with its own digest: a load reads and checks only the tiles it needs.

    ``FileSystemWriter``'s options are taken with the same meaning where one
    exists (docs/DISTRIBUTED.md has the table): ``overwrite=False`` refuses
    to replace a committed checkpoint; ``sync_files`` is ``durable``;
    ``cache_staged_state_dict`` keeps ``async_save``'s CPU copy for the next
    save; ``thread_count`` and ``per_thread_copy_ahead`` are accepted and
    change nothing (one streaming writer a rank, hashing on every core);
    ``single_file_per_rank=False`` and ``_extensions`` are refused.
    """

    def __init__(
        self,
        path: PathOrUrl,
        *,
        format: str = "deathtensors",
        storage_options: Optional[Mapping[str, Any]] = None,
        allow_pickle: bool = False,
        durable: bool = True,
        drop_cache: Optional[bool] = None,
        keep_stale: bool = False,
        block_bytes: int = BLOCK_BYTES,
        tiles: int = TILES,
        stale_after: float = _store.STALE_AFTER,
        overwrite: bool = True,
        sync_files: Optional[bool] = None,
        single_file_per_rank: bool = True,
        thread_count: int = 1,
        per_thread_copy_ahead: int = 10_000_000,
        cache_staged_state_dict: bool = False,
        _extensions: Optional[Any] = None,
    ) -> None:
        dcp_storage.StorageWriter.__init__(self)
        BlockingAsyncStager.__init__(self, cache_staged_state_dict=bool(cache_staged_state_dict))
        _store.check_id(path)
        if sync_files is not None:
            # FileSystemWriter's name for it.
            if not durable and sync_files:
                raise ValueError("sync_files=True and durable=False disagree: sync_files is FileSystemWriter's name for durable")
            durable = bool(sync_files)
        if not single_file_per_rank:
            raise ValueError(
                "single_file_per_rank=False is not supported: deathtensors writes one file per rank, "
                "each tensor stored as tiles with their own digests (docs/DISTRIBUTED.md)"
            )
        if _extensions:
            raise ValueError(
                "_extensions (FileSystemWriter's stream transforms) are not supported: deathtensors rank files "
                "are read in place and checked tile by tile, which a transformed stream would not allow"
            )
        if type(thread_count) is not int or thread_count < 1:
            raise ValueError(f"thread_count must be a positive integer, got {thread_count!r}")
        if type(per_thread_copy_ahead) is not int or per_thread_copy_ahead < 0:
            raise ValueError(f"per_thread_copy_ahead must be a non-negative integer, got {per_thread_copy_ahead!r}")
        if format not in _metadata.EXTENSIONS:
            raise ValueError(f"format must be 'deathtensors' or 'safetensors', got {format!r}")
        if block_bytes < 1:
            raise ValueError("block_bytes must be positive")
        if drop_cache is None:
            drop_cache = durable
        # The save's own rules (drop_cache needs durable), checked here once
        # by the native options rather than on every rank's first save.
        _file.write_options(durable=durable, drop_cache=drop_cache)
        if type(tiles) is not int or tiles < 1:
            raise ValueError(f"tiles must be a positive integer, got {tiles!r}")
        self.path = path
        self.format = format
        self.storage_options = storage_options
        self.allow_pickle = allow_pickle
        self.durable = durable
        self.drop_cache = drop_cache
        self.keep_stale = keep_stale
        self.stale_after = float(stale_after)
        self.block_bytes = block_bytes
        self.tiles = tiles
        self.overwrite = bool(overwrite)
        self.thread_count = thread_count
        self.per_thread_copy_ahead = per_thread_copy_ahead
        self.is_coordinator = False
        #: This process's rank, and whether the save coordinates its ranks
        #: (``dcp.save(use_collectives=False)`` does not): from DCP's
        #: ``set_up_storage_writer``.
        self.rank: Optional[int] = None
        self.use_collectives = True
        #: The save id the coordinator chose (``prepare_global_plan``).
        self.save_id: Optional[str] = None
        #: The id this rank named its file with (``write_data``).
        self.file_id: Optional[str] = None

    def __repr__(self) -> str:
        options = [f"format={self.format!r}"]
        if not self.durable:
            options.append("durable=False")
        if not self.overwrite:
            options.append("overwrite=False")
        if self.storage_options:
            # Names only: values may be credentials.
            options.append(f"storage_options=[{', '.join(sorted(map(str, self.storage_options)))}]")
        if self.allow_pickle:
            options.append("allow_pickle=True")
        return f"StorageWriter({str(self.path)!r}, {', '.join(options)})"

    def reset(self, checkpoint_id: Optional[PathOrUrl] = None) -> None:
        if checkpoint_id:
            self.path = _store.check_id(checkpoint_id)
        self.save_id = None
        self.file_id = None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = bool(kwargs.get("use_collectives", True))
        if not self.use_collectives and self.rank is None:
            raise RuntimeError("deathtensors StorageWriter: a save without collectives needs its rank from DCP (torch >= 2.15)")
        self.store = _store.open_store(self.path, self.storage_options)
        self.store.make_dir()

    @property
    def _own_rank(self) -> Optional[int]:
        """The rank whose checkpoint this is when the save has no
        collectives (each rank commits its own), else None."""
        return None if self.use_collectives else self.rank

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=str(self.path))

    def stage(self, state_dict: Dict[str, Any]) -> Dict[str, Any]:
        """``async_save``'s CPU copy of ``state_dict`` (as
        ``FileSystemWriter``'s), kept for the next save with
        ``cache_staged_state_dict=True``; pinned only where CUDA is (torch
        pins it always, which fails on a machine without a GPU)."""
        if not self.cache_staged_state_dict:
            return super().stage(state_dict)
        from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict

        if self.state_dict_cache is None:
            self.state_dict_cache = _create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available())
        return _copy_state_dict(state_dict, self.state_dict_cache)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        # On every rank, before anything is written (as FileSystemWriter).
        if not self.overwrite and self.store.has_checkpoint():
            raise FileExistsError(
                f"a checkpoint exists at {self.store.describe('')} ({', '.join(self.store.checkpoints())}) "
                "and StorageWriter(overwrite=False) does not replace it"
            )
        if not self.use_collectives and self.store.exists(METADATA_NAME):
            raise FileExistsError(
                f"{self.store.describe(METADATA_NAME)} holds a checkpoint saved with collectives: a save without "
                "them commits one document per rank, which loads would not see beside it; save into another "
                "directory, or remove that checkpoint first"
            )
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        save_id = secrets.token_hex(8)
        own = self._own_rank
        # Before any rank writes: the files of earlier saves of this
        # checkpoint that failed (never the committed checkpoint's, never a
        # running save's: docs/DISTRIBUTED.md), first, so that a retry on a
        # full disk finds the room they took; then this save's marker.
        # Without collectives every rank runs this for itself alone, and
        # looks only at its own rank's files.
        if not self.keep_stale:
            self.store.remove_uncommitted(save_id, self.stale_after, own)
        self.store.begin_save(save_id, own)
        self.save_id = save_id
        if own is not None:
            return [dataclasses.replace(p, storage_data=_RankPlan(own, save_id)) for p in plans]
        return [dataclasses.replace(p, storage_data=_RankPlan(i, save_id)) for i, p in enumerate(plans)]

    def _file_id(self, info: _RankPlan) -> str:
        """The id this rank's file is named with: the save's, unless the plan
        is an earlier save's (torch's plan cache hands a rank the plan it
        cached, ``DefaultSavePlanner(enable_plan_caching=True)``): its
        save's marker is gone, or its file is there already. Then an id of
        the rank's own, marked as running: never a committed file's name."""
        fmt_name = _metadata.rank_file_name(info.rank, info.save_id, self.format)
        if self.store.exists(_metadata.saving_name(info.save_id)) and not self.store.exists(fmt_name):
            return info.save_id
        own = secrets.token_hex(8)
        # This rank's files and markers of its earlier such saves that did
        # not commit (the coordinator cannot tell them from a running
        # save's: they name this rank's process, which lives on).
        if not self.keep_stale:
            self.store.remove_uncommitted(own, self.stale_after, info.rank)
        self.store.begin_save(own, info.rank)
        return own

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        info = plan.storage_data
        if not isinstance(info, _RankPlan):
            raise RuntimeError("deathtensors StorageWriter: the plan was not prepared by its prepare_global_plan")
        if self._own_rank is not None and info.rank != self._own_rank:
            raise RuntimeError(f"deathtensors StorageWriter: rank {self._own_rank} was handed rank {info.rank}'s plan")
        # A rank with no tensor to write writes no file, and marks nothing.
        writes_file = any(item.type != WriteItemType.BYTE_IO for item in plan.items)
        file_id = self.file_id = self._file_id(info) if writes_file else info.save_id
        name = _metadata.rank_file_name(info.rank, file_id, self.format)
        tensors: Dict[str, torch.Tensor] = {}
        results: List[dcp_storage.WriteResult] = []
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                value = self._value(planner, item)
                results.append(dcp_storage.WriteResult(index=item.index, size_in_bytes=0, storage_data={"value": value}))
                continue
            t = planner.resolve_data(item)
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"the planner resolved {fqn!r} to a {type(t).__name__}, not a tensor")
            t = t.detach()
            if t.device.type != "cpu":
                t = t.to("cpu")
            if not t.is_contiguous():
                t = t.contiguous()
            offsets = [int(o) for o in item.tensor_data.chunk.offsets] if item.tensor_data else [0] * t.dim()
            sizes = [int(s) for s in t.shape]
            rows, cols = _tiling(t, self.block_bytes, self.tiles)
            where: Dict[str, Any] = {"file": name, "rows": rows}
            if cols is not None:
                where["cols"] = cols
            blocks: List[str] = []
            for tile in _metadata.tiles(sizes, rows, cols):
                # A view: the writer takes its rows where they are.
                block = t[tile.r0 : tile.r1] if t.dim() else t
                if t.dim() > 1 and cols is not None:
                    block = block[:, tile.c0 : tile.c1]
                if self.format == "safetensors" and t.dtype in _SAFETENSORS_LACKS:
                    # Stored as its bytes (U8); the metadata keeps the dtype.
                    block = block.contiguous()
                    block = block.reshape(*block.shape[:-1], -1) if block.dim() else block.reshape(1)
                    block = block.view(torch.uint8)
                block_name = _metadata.block_name(fqn, _metadata.block_offsets(offsets, tile))
                tensors[block_name] = block
                blocks.append(block_name)
            if self.format == "safetensors":
                # The blocks' names, in tile order: their digests below.
                where["sha256"] = blocks
            results.append(dcp_storage.WriteResult(index=item.index, size_in_bytes=t.numel() * t.element_size(), storage_data=where))
        if tensors:
            # A safetensors rank file has no place for digests: its blocks
            # are hashed natively beside the write (both let go of the GIL),
            # on the cores a durable write leaves idle while it waits for
            # the disk, as the deathtensors writer hashes its own.
            # Leaving the pool waits for the hashing, so it is never left
            # running; a failed save's error is the one raised.
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="deathtensors-hash") as pool:
                hashing = pool.submit(_block_digests, tensors) if self.format == "safetensors" else None
                size = self.store.save(
                    name,
                    tensors,
                    fmt=self.format,
                    global_metadata={"dcp.save_id": file_id, "dcp.rank": str(info.rank)},
                    durable=self.durable,
                    drop_cache=self.drop_cache,
                )
            if hashing is not None:
                _fill_digests(hashing.result(), results)
            results.append(
                dcp_storage.WriteResult(
                    index=MetadataIndex(f"\0file:{name}"), size_in_bytes=size, storage_data={"file": name, "rank": info.rank, "size": size}
                )
            )
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def _value(self, planner: SavePlanner, item: Any) -> Any:
        fqn = item.index.fqn
        lookup = getattr(planner, "lookup_object", None)
        if lookup is not None:
            obj = lookup(item.index)
            return _values.encode(obj, fqn, self.allow_pickle, pickled=lambda: planner.resolve_data(item).getvalue())
        # A planner without lookup_object gives only torch.save's bytes: read
        # them back with the weights-only unpickler, which runs no code.
        data = planner.resolve_data(item)
        raw = data.getvalue() if hasattr(data, "getvalue") else bytes(data)
        try:
            import io

            obj = torch.load(io.BytesIO(raw), weights_only=True)
        except Exception:
            if not self.allow_pickle:
                raise TypeError(
                    f"state dict key {fqn!r}: the planner pickled a value that is not plain data; "
                    "pass allow_pickle=True to StorageWriter to store it pickled"
                ) from None
            import base64

            return {"$pickle": base64.b64encode(raw).decode()}
        return _values.encode(obj, fqn, self.allow_pickle)

    def finish(self, metadata: Metadata, results: List[List[dcp_storage.WriteResult]]) -> None:
        save_id = self.save_id
        files: Dict[str, Dict[str, int]] = {}
        chunk_data: Dict[Tuple[str, Tuple[int, ...]], Dict[str, Any]] = {}
        values: Dict[str, Any] = {}
        for rank_results in results:
            for r in rank_results:
                sd = r.storage_data
                if r.index.fqn.startswith("\0file:"):
                    files[sd["file"]] = {"rank": sd["rank"], "size": sd["size"]}
                elif "value" in sd:
                    values[r.index.fqn] = sd["value"]
                else:
                    chunk_data[(r.index.fqn, tuple(int(o) for o in (r.index.offset or ())))] = sd
        if save_id is None:
            raise RuntimeError("deathtensors StorageWriter: finish before prepare_global_plan (no save id)")
        file_ids = [_metadata.parse_rank_file_name(n)[1] for n in files]
        try:
            planner_data = _values.encode(metadata.planner_data, "planner_data", self.allow_pickle)
        except TypeError as e:
            raise TypeError(f"the planner's data cannot be stored as JSON: {e}") from None
        if metadata.version is None:
            metadata.version = DCP_VERSION
        meta = metadata.storage_meta if metadata.storage_meta is not None else self.storage_meta()
        doc = _metadata.encode(metadata, save_id, self.format, files, chunk_data, values, planner_data, meta)
        # Every rank fsynced its file and directory before DCP gathered its
        # results; check they are all there, as large as written, before
        # anything names them.
        for name, f in files.items():
            size = self.store.size(name)
            if size != f["size"]:
                raise IntegrityError(f"rank file {self.store.describe(name)} is {size} bytes, rank {f['rank']} wrote {f['size']}")
        # The commit: the metadata, last, atomically (without collectives,
        # each rank's own document).
        own = self._own_rank
        self.store.put_atomic(_store.metadata_name(own), _metadata.dumps(doc), durable=self.durable)
        self.store.end_save(save_id, self.stale_after, clean=not self.keep_stale, rank=own, file_ids=file_ids)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathOrUrl) -> bool:
        return _store.valid_id(checkpoint_id)


#: dtypes safetensors has no name for: their blocks are stored as bytes.
_SAFETENSORS_LACKS = _metadata.SAFETENSORS_LACKS


def _tiling(t: torch.Tensor, block_bytes: int, tiles: int) -> Tuple[int, Optional[int]]:
    """(rows, cols) of the tiles of chunk ``t``: ``rows`` makes a tile about
    ``block_bytes``; ``cols`` is ``None`` for tiles of whole rows (fewer
    than two dimensions, ``tiles=1``, and chunks under a 64th of
    ``block_bytes``, or whose tiles would have rows under a 32768th of it:
    256 KiB and 512 bytes by default; more, smaller tiles would cost header
    entries and reads without saving hashing worth having)."""
    if t.dim() == 0 or t.numel() == 0:
        return 1, None
    row = (t.numel() // t.shape[0]) * t.element_size()
    cols: Optional[int] = None
    if t.dim() > 1 and tiles > 1 and t.numel() * t.element_size() >= block_bytes // 64:
        per_col = row // t.shape[1]
        width = max(-(-t.shape[1] // tiles), -(-(block_bytes // 32768) // per_col))
        if width < t.shape[1]:
            cols, row = width, width * per_col
    return max(1, block_bytes // row), cols


def _block_digests(blocks: Dict[str, torch.Tensor]) -> Dict[str, str]:
    """The SHA-256 of each of ``blocks``, by name: natively, on all cores,
    two streams a core, the rows of column tiles hashed where they are."""
    try:
        # Collected here: the native collection belongs to this thread.
        return dict(_native.sha256_tensors(blocks))
    except BaseException as e:
        # The frames below keep the native collection, which may be dropped
        # only in this thread: their locals go now, their lines stay in the
        # traceback.
        traceback.clear_frames(e.__traceback__)
        raise


def _fill_digests(digests: Dict[str, str], results: List[dcp_storage.WriteResult]) -> None:
    """Replaces the block names of each chunk's ``sha256`` with the blocks'
    ``digests`` (a safetensors rank file has no place for them)."""
    for r in results:
        names = r.storage_data.get("sha256") if isinstance(r.storage_data, dict) else None
        if names is not None:
            r.storage_data["sha256"] = [digests[n] for n in names]


class StorageReader(dcp_storage.StorageReader):
    """Loads a checkpoint :class:`StorageWriter` saved, on any number of
    ranks and placements: each rank reads only the blocks of the chunks its
    tensors overlap, checks each against its SHA-256, and fills non-tensor
    values from JSON without unpickling.

    Also reads checkpoints torch's ``HuggingFaceStorageWriter`` wrote (a
    directory of safetensors files; they carry no digests, so those reads are
    not checked). ``allow_pickle=True`` loads values a writer stored pickled,
    and torch ``FileSystemWriter`` checkpoints (through torch's own reader):
    both unpickle, which runs code the checkpoint chooses. Loading a
    FileSystemWriter checkpoint that way and saving it with
    :class:`StorageWriter` converts it, once, to a checkpoint that loads
    without pickle.
    """

    def __init__(
        self,
        path: PathOrUrl,
        *,
        storage_options: Optional[Mapping[str, Any]] = None,
        allow_pickle: bool = False,
    ) -> None:
        super().__init__()
        self.path = _store.check_id(path)
        self.storage_options = storage_options
        self.allow_pickle = allow_pickle
        self.storage_data: Dict[MetadataIndex, Any] = {}
        self.doc: Optional[_metadata.Document] = None
        self._torch: Any = None

    def __repr__(self) -> str:
        options = []
        if self.storage_options:
            # Names only: values may be credentials.
            options.append(f"storage_options=[{', '.join(sorted(map(str, self.storage_options)))}]")
        if self.allow_pickle:
            options.append("allow_pickle=True (unpickles: runs code the checkpoint chooses)")
        return f"StorageReader({', '.join([repr(str(self.path)), *options])})"

    def reset(self, checkpoint_id: Optional[PathOrUrl] = None) -> None:
        if checkpoint_id:
            self.path = _store.check_id(checkpoint_id)
        self.storage_data = {}
        self.doc = None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The checkpoint's metadata; with ``rank=`` (DCP asks for it when
        the checkpoint has none, as after a save without collectives), that
        rank's own."""
        rank = kwargs.get("rank")
        self.store = _store.open_store(self.path, self.storage_options)
        if rank is not None:
            self.doc = _store.read_document(self.store, rank=int(rank))
            return self.doc.metadata
        if self.allow_pickle and _store.is_torch_checkpoint(self.store):
            # Opted in: torch's own reader, which unpickles.
            from torch.distributed.checkpoint import FileSystemReader

            self._torch = FileSystemReader(self.store.path)
            return self._torch.read_metadata()
        self.doc = _store.read_document(self.store)
        return self.doc.metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if self._torch is not None:
            return self._torch.set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)
        if not isinstance(metadata.storage_data, dict):
            raise FormatError("this checkpoint's metadata was not read by a deathtensors StorageReader")
        self.storage_data = metadata.storage_data
        if not hasattr(self, "store"):
            self.store = _store.open_store(self.path, self.storage_options)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        if self._torch is not None:
            return self._torch.read_data(plan, planner)
        by_file: Dict[str, List[ReadItem]] = {}
        for item in plan.items:
            where = self.storage_data.get(item.storage_index)
            if where is None:
                raise FormatError(f"the checkpoint has no {item.storage_index.fqn!r} at {list(item.storage_index.offset or [])}")
            if isinstance(where, ValueInfo):
                self._load_value(item, where, planner)
            else:
                by_file.setdefault(where.file, []).append(item)
        for name, items in by_file.items():
            with self.store.open_rank_file(name, self.doc) as f:
                batch = _Batch(f)
                for item in items:
                    self._load_tensor(batch, item, self.storage_data[item.storage_index], planner)
                batch.flush()
        fut: Future = Future()
        fut.set_result(None)
        return fut

    def _load_value(self, item: ReadItem, where: ValueInfo, planner: LoadPlanner) -> None:
        value = _values.decode(where.data, where.fqn, self.allow_pickle)
        fqn = item.dest_index.fqn
        original = getattr(planner, "original_state_dict", None)
        mappings = getattr(planner, "mappings", None)
        flatten = getattr(planner, "flatten_state_dict", None)
        if type(planner).load_bytes is _DEFAULT_LOAD_BYTES and flatten is not None:
            # What DefaultLoadPlanner.load_bytes does, minus its
            # torch.load(weights_only=False) of bytes from the checkpoint.
            if flatten:
                from torch.distributed.checkpoint._traverse import set_element

                set_element(original, mappings[fqn], value)
            else:
                planner.state_dict[fqn] = value
            return
        # Another planner takes only bytes: hand it the value we decoded from
        # JSON, pickled by us (its torch.load sees no bytes from the file).
        import io

        buf = io.BytesIO()
        torch.save(value, buf)
        buf.seek(0)
        planner.load_bytes(item, buf)

    def _load_tensor(
        self, batch: "_Batch", item: ReadItem, where: ChunkInfo, planner: LoadPlanner
    ) -> None:
        dest = planner.resolve_tensor(item).detach()
        so = [int(o) for o in item.storage_offsets]
        ln = [int(n) for n in item.lengths]
        if list(dest.shape) != ln:
            raise RuntimeError(f"{item.dest_index.fqn!r}: the planner's tensor has shape {list(dest.shape)}, the read {ln}")
        # Tiles go straight to their places in `dest` (rows at a stride:
        # a column tile into its columns) when it can take the stored bytes.
        buf = _bytes_of(dest) if _direct(dest, where) else None
        for tile in where.tiles() if all(ln) else []:
            # The part of the tile the read needs (in dims 0 and 1).
            part, box = dest, []
            if ln:
                lo0, hi0 = max(tile.r0, so[0]), min(tile.r1, so[0] + ln[0])
                if lo0 >= hi0:
                    continue
                part = part.narrow(0, lo0 - so[0], hi0 - lo0)
                box = [(lo0 - tile.r0, hi0 - lo0)]
            if len(ln) > 1:
                lo1, hi1 = max(tile.c0, so[1]), min(tile.c1, so[1] + ln[1])
                if lo1 >= hi1:
                    continue
                part = part.narrow(1, lo1 - so[1], hi1 - lo1)
                box.append((lo1 - tile.c0, hi1 - lo1))
                box += list(zip(so[2:], ln[2:]))
            # The region always given (a whole tile too): the reader checks
            # it against the stored tile's shape, so a tile of another shape
            # than the metadata says fails, naming it.
            place = _placement(part, dest) if buf is not None else None
            if place is not None:
                batch.add(_read(where, tile, box, buf, place, part.nbytes))
                continue
            # Elsewhere (another dtype or device, a layout rows cannot
            # describe): through a scratch buffer of the batch, copied.
            shape = where.tile_shape(tile)
            tmp = batch.scratch(shape, where.dtype)
            batch.add(_read(where, tile, _whole(where, tile), _bytes_of(tmp), (0, tmp.nbytes, tmp.nbytes), tmp.nbytes))
            src = tmp
            for d, (o, n) in enumerate(box):
                src = src.narrow(d, o, n)
            batch.after_reads(lambda part=part, src=src: part.copy_(src))
        batch.then(lambda: planner.commit_tensor(item, dest))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathOrUrl) -> bool:
        return _store.valid_id(checkpoint_id)


def _digest(where: ChunkInfo, tile: _metadata.Tile) -> Optional[str]:
    """The checkpoint's digest of ``tile`` (safetensors rank files), or
    ``None`` (the file holds its own)."""
    return None if where.sha256 is None else where.sha256[where.tile_index(tile)]


def _direct(t: torch.Tensor, where: ChunkInfo) -> bool:
    """Whether tiles of the chunk ``where`` can be read straight into
    ``t``: contiguous, on the CPU, of the stored dtype (not one a
    safetensors rank file keeps as bytes)."""
    return t.is_contiguous() and t.dtype == where.dtype and t.device.type == "cpu" and not _as_bytes(where)


def _whole(where: ChunkInfo, tile: _metadata.Tile) -> Optional[List[Tuple[int, int]]]:
    """All of ``tile`` as a region, which the reader checks against the
    stored tensor's shape; ``None`` (the stored tensor, whatever its shape,
    the buffer's length checked) for tiles a safetensors file keeps as
    bytes."""
    return None if _as_bytes(where) else [(0, n) for n in where.tile_shape(tile)]


def _as_bytes(where: ChunkInfo) -> bool:
    """Whether the chunk's tiles are stored as bytes (U8): a dtype
    safetensors has no name for, in a safetensors rank file."""
    return where.dtype in _SAFETENSORS_LACKS and where.file.endswith(".safetensors")


def _placement(part: torch.Tensor, base: torch.Tensor) -> Optional[Tuple[int, int, int]]:
    """Where ``part``, a view of the contiguous ``base``, lies in base's
    bytes as rows (one a first-dimension index): ``(offset, run, stride)``,
    or ``None`` when its rows are not each contiguous."""
    offset = part.data_ptr() - base.data_ptr()
    if part.is_contiguous():
        return offset, part.nbytes, part.nbytes
    expected = 1
    for n, st in reversed(list(zip(part.shape[1:], part.stride()[1:]))):
        if n != 1 and st != expected:
            return None
        expected *= n
    return offset, expected * part.element_size(), part.stride(0) * part.element_size()


class _Batch:
    """Tile reads of one rank file gathered into one native call (two
    tiles hashed side by side), and what to do once they are done (copy
    out of scratch buffers, commit the tensors they fill). Flushed when the
    buffers it fills reach ``limit`` bytes, so that a planner that hands out
    fresh tensors holds at most that much in waiting, and when its scratch
    buffers (``scratch_limit`` bytes, for tiles that go to strided parts of
    a tensor) are all in use."""

    def __init__(self, f: "_store.RankFile", limit: int = 4 * BLOCK_BYTES, scratch_limit: int = 2 * BLOCK_BYTES) -> None:
        self.f, self.limit, self.scratch_limit = f, limit, scratch_limit
        self.reads: List[_store.Read] = []
        self.after: List[Any] = []
        self.pending = 0
        self.pool = torch.empty(0, dtype=torch.uint8)
        self.pool_used = 0

    def add(self, read: "_store.Read") -> None:
        self.reads.append(read)
        self.pending += read.nbytes

    def scratch(self, shape: List[int], dtype: torch.dtype) -> torch.Tensor:
        """A buffer for one tile read, valid until the reads and the
        ``after_reads`` work of this batch have run: when the pool has no
        room left, the batch is flushed first."""
        size = math.prod(shape) * dtype.itemsize
        need = -(-size // 64) * 64  # each buffer 64-byte aligned in the pool
        if self.pool_used + need > self.pool.numel():
            if self.pool_used:
                self.flush()
            if need > self.pool.numel():
                self.pool = torch.empty(max(need, self.scratch_limit), dtype=torch.uint8)
        buf = self.pool[self.pool_used : self.pool_used + size]
        self.pool_used += need
        return buf.view(dtype).view(shape)

    def after_reads(self, work: Any) -> None:
        """Runs ``work`` once the reads so far are done (in order with the
        commits)."""
        self.after.append(work)

    def then(self, done: Any) -> None:
        self.after.append(done)
        if self.pending >= self.limit:
            self.flush()

    def flush(self) -> None:
        """The reads so far, then their copies and commits (or nothing, if a
        read failed)."""
        reads, after = self.reads, self.after
        self.reads, self.after, self.pending = [], [], 0
        try:
            if reads:
                self.f.read(reads)
            for done in after:
                done()
        finally:
            self.pool_used = 0


def _read(
    where: ChunkInfo,
    tile: _metadata.Tile,
    region: Optional[List[Tuple[int, int]]],
    out: Any,
    place: Tuple[int, int, int],
    nbytes: int,
) -> "_store.Read":
    """The read of ``region`` of ``tile`` of the chunk ``where`` (``None``:
    all of the stored tensor) into the bytes ``out`` at ``place``."""
    checked = where.foreign_name is None
    return _store.Read(where.block_name(tile), region, out, place, nbytes, _digest(where, tile), checked)


def read_block(f: "_store.RankFile", where: ChunkInfo, tile: _metadata.Tile, out: torch.Tensor) -> None:
    """Reads ``tile`` of the chunk ``where``, checked against its digest,
    into ``out`` (of the tile's shape) now: straight into it when it can
    take the stored bytes, else through a buffer, copied."""
    if not out.numel():
        return
    buf = out if _direct(out, where) else torch.empty(list(out.shape), dtype=where.dtype)
    f.read([_read(where, tile, _whole(where, tile), _bytes_of(buf), (0, buf.nbytes, buf.nbytes), buf.nbytes)])
    if buf is not out:
        out.copy_(buf)


from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner  # noqa: E402

_DEFAULT_LOAD_BYTES = DefaultLoadPlanner.load_bytes
