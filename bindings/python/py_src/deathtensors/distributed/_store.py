"""Where a checkpoint lives: a local (or shared) directory, or a prefix of
an object store. The storage classes see only this interface."""

import contextlib
import hashlib
import os
import secrets
from typing import Any, Dict, Iterator, Mapping, Optional, Set, Union

from .. import _file, _native, _remote
from .._legacy import expand_path
from ..errors import FormatError, IntegrityError
from . import _metadata
from ._metadata import METADATA_NAME

#: torch's FileSystemWriter names its (pickled) metadata this.
TORCH_METADATA_NAME = ".metadata"


def valid_id(checkpoint_id: Any) -> bool:
    """Whether ``checkpoint_id`` can name a checkpoint here: a URL of an
    object store, or a path."""
    if isinstance(checkpoint_id, str) and _remote.is_url(checkpoint_id):
        return not checkpoint_id.lower().startswith(("http://", "https://"))
    return isinstance(checkpoint_id, (str, os.PathLike))


def open_store(path: Any, storage_options: Optional[Mapping[str, Any]]) -> "Store":
    if isinstance(path, str) and _remote.is_url(path):
        return RemoteStore(path.rstrip("/"), storage_options)
    if storage_options is not None:
        raise ValueError("storage_options apply to URLs only")
    return LocalStore(expand_path(path))


class RankFile:
    """One rank file, open for checked reads of its blocks."""

    def __init__(self, reader: Any, where: str) -> None:
        self.reader = reader
        self.where = where

    def read_into(self, name: str, out: Any, sha256: Optional[str]) -> None:
        if name not in self.reader:
            raise FormatError(f"rank file {self.where} has no tensor {name!r}, which the checkpoint metadata names")
        if sha256 is None:
            self.reader.read_into(name, out, verify=True)
            return
        self.reader.read_into(name, out, verify=False)
        actual = hashlib.sha256(out).hexdigest()
        if actual != sha256:
            raise IntegrityError(f"tensor {name!r} of {self.where}: SHA-256 {actual} differs from the checkpoint's {sha256}")


class Store:
    """The operations a checkpoint needs from where it is stored."""

    def describe(self, name: str) -> str:
        raise NotImplementedError

    def make_dir(self) -> None:
        raise NotImplementedError

    def save(self, name: str, tensors: Dict[str, Any], fmt: str, global_metadata: Dict[str, str], durable: bool) -> int:
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

    def remove_stale(self, keep: Set[str]) -> None:
        """Removes rank files this checkpoint does not name (earlier saves,
        interrupted saves) and our metadata temp files. Called after the
        commit, so a crash here leaves only files nobody reads."""
        for name in self.list() - keep:
            if _metadata.parse_rank_file_name(name) is not None or name.startswith(METADATA_NAME + ".tmp-"):
                try:
                    self.remove(name)
                except FileNotFoundError:
                    pass

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
            if doc is not None:
                expected = doc.files[name]
                size = self.size(name)
                if size != expected["size"]:
                    raise IntegrityError(f"rank file {where} is {size} bytes, the checkpoint metadata says {expected['size']}")
                meta = reader.metadata() or {}
                if meta.get("dcp.save_id") != doc.save_id or meta.get("dcp.rank") != str(expected["rank"]):
                    raise IntegrityError(
                        f"rank file {where} belongs to another checkpoint (save id {meta.get('dcp.save_id')!r}, "
                        f"rank {meta.get('dcp.rank')!r}; expected {doc.save_id!r}, rank {expected['rank']})"
                    )
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

    def save(self, name: str, tensors: Dict[str, Any], fmt: str, global_metadata: Dict[str, str], durable: bool) -> int:
        target = self.describe(name)
        # The durable writer: written to an unnamed temp file, fsynced,
        # linked into place, directory fsynced.
        _file.save(target, tensors, global_metadata=global_metadata, checksum=fmt == "deathtensors", durable=durable, format=fmt)
        return os.stat(target).st_size

    def size(self, name: str) -> Optional[int]:
        try:
            return os.stat(self.describe(name)).st_size
        except FileNotFoundError:
            return None

    def get(self, name: str) -> Optional[bytes]:
        try:
            with open(self.describe(name), "rb") as f:
                data = f.read(_metadata.MAX_METADATA_BYTES + 1)
        except FileNotFoundError:
            return None
        return data

    def put_atomic(self, name: str, data: bytes, durable: bool) -> None:
        tmp = self.describe(f"{name}.tmp-{secrets.token_hex(4)}")
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                # The bytes reach the disk before the name does.
                if durable:
                    os.fsync(f.fileno())
            os.replace(tmp, self.describe(name))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        # The rename is durable only once the directory is synced.
        if durable:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

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
    """A prefix of an object store (``s3://bucket/ckpt``): ranged GETs
    through ``deathtensors-remote`` to read; writes are not supported yet."""

    def __init__(self, url: str, storage_options: Optional[Mapping[str, Any]]) -> None:
        self.url = url
        self.options = storage_options

    def describe(self, name: str) -> str:
        return f"{self.url}/{name}"

    def make_dir(self) -> None:
        raise NotImplementedError(
            "saving to an object store needs an upload path in deathtensors-remote, which it does not have yet; "
            "save to a local or shared directory"
        )

    def open_reader(self, name: str) -> Any:
        return _native.Reader(self.describe(name), storage_options=_remote.pairs(self.options))

    def size(self, name: str) -> Optional[int]:
        return None

    def get(self, name: str) -> Optional[bytes]:
        raise NotImplementedError("reading a checkpoint's metadata from an object store is not supported yet")


def read_document(store: Store) -> "_metadata.Document":
    """The checkpoint's metadata, checked; a directory without it is named
    incomplete, and torch's pickled metadata is refused."""
    data = store.get(METADATA_NAME)
    if data is None:
        names = store.list() if isinstance(store, LocalStore) else set()
        if isinstance(store, LocalStore) and not os.path.isdir(store.path):
            raise FileNotFoundError(f"no checkpoint at {store.path}: no such directory")
        if TORCH_METADATA_NAME in names:
            raise FormatError(
                f"{store.describe('')} is a torch FileSystemWriter checkpoint: its metadata is a pickle, which "
                "deathtensors does not load. Convert it once, trusting it, with "
                "deathtensors.distributed.convert_torch_checkpoint(src, dst, allow_pickle=True)"
            )
        if any(_metadata.parse_rank_file_name(n) for n in names):
            raise FormatError(
                f"incomplete checkpoint at {store.describe('')}: rank files but no {METADATA_NAME} "
                "(a save that did not commit); it cannot be loaded"
            )
        raise FileNotFoundError(f"no checkpoint at {store.describe('')}: {METADATA_NAME} is missing")
    return _metadata.parse(data, store.describe(METADATA_NAME))
