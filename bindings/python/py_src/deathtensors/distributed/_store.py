"""Where a checkpoint lives: a local (or shared) directory, or a prefix of
an object store. The storage classes see only this interface."""

import contextlib
import os
import tempfile
from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple, Union

from .. import _file, _native, _remote
from .._legacy import expand_path
from ..errors import FormatError, IntegrityError
from . import _metadata
from ._metadata import METADATA_NAME

#: torch's FileSystemWriter names its (pickled) metadata this.
TORCH_METADATA_NAME = ".metadata"


#: A save whose coordinator ran on another host is taken as failed once its
#: marker is this many seconds old (``StorageWriter(stale_after=...)``): no
#: host can tell whether a process on another one still runs (io's).
STALE_AFTER = _native.DCP_STALE_AFTER


#: The URL schemes a checkpoint may live under: the object stores the
#: native core serves (``http(s)://`` has no listing, no writes).
CHECKPOINT_SCHEMES = tuple(s for s in _remote.SCHEMES if not s.startswith("http"))


def id_problem(checkpoint_id: Any) -> Optional[str]:
    """Why ``checkpoint_id`` cannot name a checkpoint here, or ``None``: a
    local path (no ``://``), or a URL of an object store we serve. Any
    other ``scheme://`` is refused, never taken as a relative folder."""
    if isinstance(checkpoint_id, os.PathLike):
        return None
    if not isinstance(checkpoint_id, str):
        return f"a checkpoint id is a path or a URL, got {type(checkpoint_id).__name__}"
    if "://" not in checkpoint_id:
        return None if checkpoint_id else "the checkpoint id is empty"
    if checkpoint_id.lower().startswith(CHECKPOINT_SCHEMES) and _remote.is_url(checkpoint_id):
        return None
    scheme = checkpoint_id.split("://", 1)[0]
    return (
        f"checkpoint id {checkpoint_id!r}: {scheme + '://'!r} is not a store deathtensors serves; "
        f"give a local path (without file://) or a URL of {', '.join(CHECKPOINT_SCHEMES)}"
    )


def valid_id(checkpoint_id: Any) -> bool:
    """Whether ``checkpoint_id`` can name a checkpoint here (see
    :func:`id_problem`)."""
    return id_problem(checkpoint_id) is None


def check_id(checkpoint_id: Any) -> Any:
    """``checkpoint_id``, or ``ValueError`` saying why it cannot name a
    checkpoint."""
    why = id_problem(checkpoint_id)
    if why is not None:
        raise ValueError(why)
    return checkpoint_id


def metadata_name(rank: Optional[int]) -> str:
    """The metadata document of a checkpoint (``rank`` None) or of one
    rank's checkpoint saved without collectives."""
    return METADATA_NAME if rank is None else _native.rank_metadata_name(rank)


def open_store(path: Any, storage_options: Optional[Mapping[str, Any]]) -> "Store":
    check_id(path)
    if isinstance(path, str) and _remote.is_url(path):
        return RemoteStore(path.rstrip("/"), storage_options)
    if storage_options is not None:
        raise ValueError("storage_options apply to URLs only")
    return LocalStore(expand_path(path))


def _checksum(fmt: str) -> Any:
    """A rank file's digests: per tensor (each block is read and checked on
    its own), without the whole-file footer, which would hash every byte a
    second time; safetensors files keep theirs in the metadata."""
    return "tensors" if fmt == "deathtensors" else False


class RankFile:
    """One rank file, open for checked reads of its blocks."""

    def __init__(self, reader: Any, where: str) -> None:
        self.reader = reader
        self.where = where

    def read(self, reads: Sequence["Read"]) -> None:
        """Reads tiles, whole or a region of each, to their places in their
        buffers in one call with the GIL released: each tile is read once
        and checked against the checkpoint's digest when it gives one
        (safetensors rank files), else the file's own, unless the read is
        unchecked (a file torch wrote, which has none); two tiles are hashed
        side by side. On an error the bytes every read places are zeroed."""
        for r in reads:
            if r.name not in self.reader:
                raise FormatError(f"rank file {self.where} has no tensor {r.name!r}, which the checkpoint metadata names")
        outs: List[Any] = []
        index: Dict[Tuple[int, int], int] = {}
        batch = []
        for r in reads:
            # Reads into one tensor share its buffer: one entry each.
            key = (r.out.ctypes.data, r.out.nbytes)
            if key not in index:
                index[key] = len(outs)
                outs.append(r.out)
            batch.append((r.name, r.region, index[key], r.place, r.checked, r.sha256 if r.checked else None))
        try:
            self.reader.read_regions_placed(batch, outs)
        except IntegrityError as e:
            if any(r.checked and r.sha256 for r in reads):
                raise IntegrityError(f"{e} (a digest of the checkpoint metadata, for rank file {self.where})") from None
            raise


class Read(NamedTuple):
    """One tile read of :meth:`RankFile.read`: the tile's name, its region
    as ``(start, length)`` in each dimension (``None``: all of it), the
    buffer it goes into (a contiguous tensor's bytes), where in it as
    ``(offset, run, stride)`` (rows of ``run`` bytes, ``stride`` apart), the
    bytes it places, the checkpoint's digest of the tile (hex) if it gives
    one, and whether to check it at all."""

    name: str
    region: Optional[List[Tuple[int, int]]]
    out: Any
    place: Tuple[int, int, int]
    nbytes: int
    sha256: Optional[str]
    checked: bool


class Store:
    """The operations a checkpoint needs from where it is stored."""

    def describe(self, name: str) -> str:
        raise NotImplementedError

    def make_dir(self) -> None:
        raise NotImplementedError

    def save(
        self, name: str, tensors: Dict[str, Any], fmt: str, global_metadata: Dict[str, str], durable: bool, drop_cache: bool = False
    ) -> int:
        raise NotImplementedError

    def size(self, name: str) -> Optional[int]:
        raise NotImplementedError

    def get(self, name: str) -> Optional[bytes]:
        raise NotImplementedError

    def put_atomic(self, name: str, data: bytes, durable: bool) -> None:
        raise NotImplementedError

    def list(self) -> Set[str]:
        raise NotImplementedError

    def remove(self, name: str) -> None:
        raise NotImplementedError

    def open_reader(self, name: str) -> Any:
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        return self.size(name) is not None

    def begin_save(self, save_id: str, rank: Optional[int] = None) -> None:
        """Marks save ``save_id`` as running: its marker, naming this host,
        process and thread (and ``rank``, for a rank's own save or file id),
        put before any rank writes."""
        marker = _native.save_marker(save_id, rank)
        self.put_atomic(_native.save_marker_name(save_id), marker, durable=False)

    def checkpoints(self, names: Optional[Set[str]] = None) -> List[str]:
        """The metadata documents here: the checkpoint's, and those of ranks
        that saved without collectives."""
        return _native.metadata_documents(self.list() if names is None else names)

    def _seen(self) -> Dict[str, Any]:
        """What the save protocol decides from, read in this order: the
        names here, then the save markers (by save id), then the metadata
        documents (by name); ``None`` for one gone since the listing. A save
        that commits meanwhile puts its metadata before it removes its
        marker, so its files are seen either as running or as committed,
        never as neither."""
        names = self.list()
        markers = {sid: self.get(n) for n in names if (sid := _native.parse_save_marker_name(n)) is not None}
        documents = {n: self.get(n) for n in self.checkpoints(names)}
        return {"names": names, "markers": markers, "documents": documents}

    def remove_uncommitted(self, own: str, stale_after: float, rank: Optional[int] = None) -> None:
        """Removes the rank files of saves that did not commit and no longer
        run (and their markers), as the native protocol decides
        (``docs/DISTRIBUTED.md``, "A failed save"): never the files a
        committed metadata document names, those of ``own`` (the caller's
        save), or those of a save that may still run; nothing when a
        metadata document is unreadable. With ``rank`` (a save without
        collectives), only that rank's files and markers."""
        for name in _native.uncommitted_files(own, stale_after, rank, **self._seen()):
            self._remove_quietly(name)

    def end_save(
        self, save_id: str, stale_after: float, clean: bool, rank: Optional[int] = None, file_ids: Sequence[str] = ()
    ) -> None:
        """After ``save_id``'s commit: removes its marker and those of the
        ids its ranks named their files with (``file_ids``), and
        (``clean``) the rank files of earlier checkpoints and of failed
        saves, our metadata temp files and, after a save with collectives,
        the per-rank documents of an earlier save without them (the new
        document replaces them), as the native protocol decides. ``rank``: a
        save without collectives, which touches only that rank's files. A
        crash here leaves only files nobody reads."""
        seen = self._seen() if clean else {}
        for name in _native.after_commit_files(save_id, list(file_ids), stale_after, rank, **seen):
            self._remove_quietly(name)

    def _remove_quietly(self, name: str) -> None:
        try:
            self.remove(name)
        except FileNotFoundError:
            pass

    def has_checkpoint(self) -> bool:
        """Whether a committed checkpoint (any metadata document) is here."""
        return bool(self.checkpoints())

    @contextlib.contextmanager
    def open_rank_file(self, name: str, doc: "Optional[_metadata.Document]") -> Iterator[RankFile]:
        where = self.describe(name)
        try:
            reader = self.open_reader(name)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"rank file {where} is missing (the checkpoint metadata {self.describe(METADATA_NAME)} names it)"
            ) from None
        try:
            if doc is not None and not doc.foreign:
                # io's check, as consolidate's: its size, its save id and rank.
                expected = doc.files[name]
                why = _native.check_rank_file(reader, name, expected["rank"], expected["size"])
                if why is not None:
                    raise IntegrityError(f"{where}: {why}")
            yield RankFile(reader, where)
        finally:
            reader.close()


class LocalStore(Store):
    """A directory on a local or shared file system."""

    def __init__(self, path: str) -> None:
        self.path = path

    def describe(self, name: str) -> str:
        return os.path.join(self.path, name)

    def make_dir(self) -> None:
        os.makedirs(self.path, exist_ok=True)

    def save(
        self, name: str, tensors: Dict[str, Any], fmt: str, global_metadata: Dict[str, str], durable: bool, drop_cache: bool = False
    ) -> int:
        target = self.describe(name)
        # The durable writer: written to an unnamed temp file, fsynced,
        # linked into place, directory fsynced; with drop_cache, each part
        # leaves the page cache once it is on the disk.
        _file.save(
            target, tensors, global_metadata=global_metadata, checksum=_checksum(fmt), durable=durable, format=fmt,
            drop_cache=drop_cache,
        )
        return os.stat(target).st_size

    def size(self, name: str) -> Optional[int]:
        try:
            return os.stat(self.describe(name)).st_size
        except FileNotFoundError:
            return None

    def get(self, name: str) -> Optional[bytes]:
        try:
            with open(self.describe(name), "rb") as f:
                data = f.read(_native.DCP_METADATA_LIMIT + 1)
        except FileNotFoundError:
            return None
        return data

    def put_atomic(self, name: str, data: bytes, durable: bool) -> None:
        # io's one temp-file scheme: a temp file beside the target, renamed
        # over it; with durable, the file and then the directory synced.
        _native.write_file_atomic(self.describe(name), data, durable)

    def list(self) -> Set[str]:
        try:
            return set(os.listdir(self.path))
        except FileNotFoundError:
            return set()

    def remove(self, name: str) -> None:
        os.unlink(self.describe(name))

    def open_reader(self, name: str) -> Any:
        return _native.Reader(self.describe(name), mmap=False)


class RemoteStore(Store):
    """A prefix of an object store (``s3://bucket/ckpt``), through
    ``deathtensors-remote``: ranged GETs to read; to write, a rank file is
    written locally with the streaming writer, then uploaded (multipart,
    bounded memory) and removed; the metadata is one PUT. An object is
    visible only once its upload completed, and replaces an older one of
    its name atomically, so putting the metadata last is the commit."""

    def __init__(self, url: str, storage_options: Optional[Mapping[str, Any]]) -> None:
        self.url = url
        # Converted (and refused if not a dict) by the native core, here
        # rather than at the first request.
        _native.ReadOptions(storage_options=storage_options)
        self.options = storage_options

    def describe(self, name: str) -> str:
        return f"{self.url}/{name}"

    def make_dir(self) -> None:
        # Object stores have no directories: a prefix exists once an
        # object under it does.
        pass

    def save(
        self, name: str, tensors: Dict[str, Any], fmt: str, global_metadata: Dict[str, str], durable: bool, drop_cache: bool = False
    ) -> int:
        # Written locally first: the streaming writer needs a file, and the
        # upload then reads it part by part (bounded memory). The local copy
        # need not be durable: the upload's completion is what counts, and
        # a crash before it leaves nothing visible.
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".upload", dir=os.environ.get("DEATHTENSORS_UPLOAD_DIR"))
        os.close(fd)
        try:
            _file.save(tmp, tensors, global_metadata=global_metadata, checksum=_checksum(fmt), durable=False, format=fmt)
            return _native.remote_upload(tmp, self.describe(name), self.options)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def size(self, name: str) -> Optional[int]:
        return _native.remote_size(self.describe(name), self.options)

    def get(self, name: str) -> Optional[bytes]:
        return _native.remote_get(self.describe(name), _native.DCP_METADATA_LIMIT, self.options)

    def put_atomic(self, name: str, data: bytes, durable: bool) -> None:
        # One PUT: the object appears whole or not at all.
        _native.remote_put(self.describe(name), data, self.options)

    def list(self) -> Set[str]:
        return {name for name, _ in _native.remote_list(self.url, self.options)}

    def remove(self, name: str) -> None:
        _native.remote_delete(self.describe(name), self.options)

    def open_reader(self, name: str) -> Any:
        return _native.Reader(self.describe(name), _native.ReadOptions(storage_options=self.options))


def is_torch_checkpoint(store: Store) -> bool:
    """A local directory with torch's pickled metadata and none of ours."""
    names = store.list() if isinstance(store, LocalStore) else set()
    return TORCH_METADATA_NAME in names and METADATA_NAME not in names


def read_document(store: Store, rank: Optional[int] = None) -> "_metadata.Document":
    """The checkpoint's metadata, checked; a directory without it is named
    incomplete, and torch's pickled metadata is refused. With ``rank``: that
    rank's own checkpoint, saved without collectives (every file it names
    is that rank's)."""
    if rank is not None:
        name = metadata_name(rank)
        data = store.get(name)
        if data is None and store.exists(METADATA_NAME):
            # DCP asks for a rank's own when reading the checkpoint's failed:
            # that failure is the one to report (or, committed since, the
            # checkpoint itself).
            return read_document(store)
        if data is None:
            others = [n for n in store.checkpoints() if n != METADATA_NAME]
            having = f" (it has {', '.join(others[:4])}{', ...' if len(others) > 4 else ''})" if others else ""
            raise FileNotFoundError(f"no checkpoint of rank {rank} at {store.describe('')}: {name} is missing{having}")
        return _metadata.parse(data, store.describe(name), rank=rank)
    data = store.get(METADATA_NAME)
    if data is None:
        names = store.list()
        if isinstance(store, LocalStore) and not os.path.isdir(store.path):
            raise FileNotFoundError(f"no checkpoint at {store.path}: no such directory")
        ranks = [n for n in store.checkpoints(names) if n != METADATA_NAME]
        if ranks:
            # torch's loader then asks for the rank's own (read_metadata(rank=)).
            raise FileNotFoundError(
                f"no {METADATA_NAME} at {store.describe('')}: the checkpoint was saved without collectives, "
                f"each rank its own ({ranks[0]}, ...); a rank loads its own"
            )
        if TORCH_METADATA_NAME in names:
            raise FormatError(
                f"{store.describe('')} is a torch FileSystemWriter checkpoint: its metadata is a pickle, which "
                "deathtensors does not load. To convert it once, if you trust it: dcp.load it with "
                "StorageReader(path, allow_pickle=True) (unsafe: unpickling runs its code), then dcp.save "
                "with StorageWriter"
            )
        if any(n.endswith(".safetensors") and _metadata.parse_rank_file_name(n) is None for n in names):
            return read_hf_document(store, sorted(n for n in names if n.endswith(".safetensors")))
        if any(_metadata.parse_rank_file_name(n) for n in names):
            raise FormatError(
                f"incomplete checkpoint at {store.describe('')}: rank files but no {METADATA_NAME} "
                "(a save that did not commit); it cannot be loaded"
            )
        raise FileNotFoundError(f"no checkpoint at {store.describe('')}: {METADATA_NAME} is missing")
    return _metadata.parse(data, store.describe(METADATA_NAME))


def read_hf_document(store: Store, names: "list[str]") -> "_metadata.Document":
    """The metadata of a checkpoint torch's ``HuggingFaceStorageWriter``
    wrote: safetensors files whose ``DCP_SHARDING_INFO`` metadata (JSON)
    gives each tensor's offsets, read from the headers by our reader. Such
    files carry no digests, so their reads are not checked."""
    files = []
    for name in names:
        reader = store.open_reader(name)
        try:
            tensors = [(key, list(reader.shape(key)), reader.dtype(key)) for key in reader.keys()]
            files.append(_metadata.HfFile(name, store.describe(name), reader.metadata() or {}, tensors))
        finally:
            reader.close()
    return _metadata.hf_document(store.describe(""), files)
