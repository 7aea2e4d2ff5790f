"""Sharded checkpoints: save_sharded and open_sharded.

Two layouts are written. Hugging Face's: an index
``model.deathtensors.index.json`` (``metadata.total_size`` and
``weight_map``) and shards ``model-00001-of-00003.deathtensors``.
deathtensors 0.3.0's: the index is a tensor-less ``.deathtensors`` file at
the path given, whose metadata lists the shards ``model-00001-of-00003.deathtensors``
beside it. ``open_sharded`` reads both, and Hugging Face
``model.safetensors.index.json`` checkpoints. Shards are opened only when a
tensor in them is asked for.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

from . import _convert, _keys, _native, _remote
from ._file import DtFile, PathLike, ReadKeywords, _check_metadata, read_options, with_read_options, write_options
from ._legacy import expand_path
from ._native import ShardedIndex, save_sharded as _native_save_sharded
from .errors import DeathTensorsError, TensorNotFoundError

#: The two layouts ``save_sharded`` writes.
LAYOUTS = ("huggingface", "deathtensors-0.3")


def _layout(path: PathLike, format: str, layout: Optional[str]) -> str:
    """deathtensors 0.3.0's layout when the path names a deathtensors file
    (``model.deathtensors``, ``model.dt``), as 0.3.0 programs call it;
    Hugging Face's otherwise (``out/model``, ``model.safetensors``)."""
    if layout is not None:
        if layout not in LAYOUTS:
            raise DeathTensorsError(f"unknown layout {layout!r}: use one of {LAYOUTS}")
        return layout
    name = os.fspath(path).lower()
    if format == "deathtensors" and name.endswith((".deathtensors", ".dt")):
        return "deathtensors-0.3"
    return "huggingface"


def save_sharded(
    path: PathLike,
    tensors: Mapping[str, Any],
    max_shard_bytes: int = 5 * 1024**3,
    metadata: Optional[Mapping[str, Mapping[str, str]]] = None,
    global_metadata: Optional[Mapping[str, str]] = None,
    checksum: Union[bool, str] = True,
    compress: Union[bool, str] = False,
    compress_level: int = _native.COMPRESS_LEVEL,
    durable: bool = True,
    *,
    format: str = "deathtensors",
    encrypt: Any = None,
    sign: Any = None,
    cipher: str = "AES-256-GCM",
    chunk_size: int = 1 << 20,
    seal_header: bool = False,
    layout: Optional[str] = None,
    alignment: int = 64,
    drop_cache: bool = False,
) -> List[str]:
    """Save tensors over shards of at most ``max_shard_bytes`` of tensor data
    (a larger tensor gets a shard of its own) and an index. Returns the
    shard paths, as deathtensors 0.3.0 does. Every shard and the index are
    written under temp names and renamed into place only once all are
    written, the index last: it never names a missing shard, and a save
    that fails (a full disk) leaves nothing it wrote and replaces nothing,
    so an older checkpoint at the same names stays whole and loadable.

    ``layout`` (default: from ``path``) is one of:

    - ``"deathtensors-0.3"``, when ``path`` ends in ``.deathtensors`` or
      ``.dt``: what deathtensors 0.3.0 writes for the same call. ``path`` is
      the index, a deathtensors file without tensors whose metadata lists
      the shards, ``model-00001-of-00003.deathtensors`` ... beside it; each
      shard's metadata has ``deathtensors.shard.index`` and ``.count``.
    - ``"huggingface"``, otherwise: ``dir/model`` gives
      ``dir/model-00001-of-0000N.deathtensors`` ... and
      ``dir/model.deathtensors.index.json``. ``format="safetensors"`` writes
      a Hugging Face checkpoint (``.safetensors`` shards, byte-identical to
      safetensors).

    ``compress`` and ``compress_level`` are :func:`save`'s, for every shard.
    ``encrypt``, ``sign``, ``cipher``, ``chunk_size`` and ``seal_header`` are :func:`save`'s:
    every shard is encrypted (with a data key of its own) and signed. The
    index itself is plain JSON. ``alignment`` and ``drop_cache`` are
    :func:`save`'s, for every shard.

    ``checksum`` defaults to True here and to False in :func:`save`: each is
    deathtensors 0.3.0's default for the same function, which programs
    written for it rely on (its checkpoints are verified shard by shard).
    """
    if not isinstance(tensors, Mapping):
        raise DeathTensorsError(f"tensors must be a dict of name to tensor, got {type(tensors).__name__}")
    metadata = dict(metadata or {})
    checked = {name: _check_metadata(f"metadata of {name!r}", m) for name, m in metadata.items() if name in tensors}
    path = expand_path(path)
    if _layout(path, format, layout) == "deathtensors-0.3":
        if encrypt is not None or sign is not None:
            raise DeathTensorsError("deathtensors 0.3.0's layout cannot be encrypted or signed: use layout='huggingface'")
        options = write_options(
            global_metadata=global_metadata, checksum=checksum, durable=durable, compress=compress,
            compress_level=compress_level, alignment=alignment, drop_cache=drop_cache,
        )
        collected = _convert.collect(tensors, checked or None)
        shards = _native.save_sharded_legacy(path, collected, int(max_shard_bytes), options)
        return [os.fspath(p) for p in shards]
    options = write_options(
        global_metadata=global_metadata, checksum=checksum and format == "deathtensors", durable=durable,
        format=format, encrypt=encrypt, sign=sign, cipher=cipher, chunk_size=chunk_size, seal_header=seal_header,
        compress=compress, compress_level=compress_level, alignment=alignment, drop_cache=drop_cache,
    )
    _index, shards = _native_save_sharded(path, _convert.collect(tensors, checked or None), int(max_shard_bytes), options)
    return [os.fspath(p) for p in shards]


class ShardedFile:
    """A sharded checkpoint opened lazily: the same reading API as
    :class:`DtFile`, over all shards."""

    @with_read_options
    def __init__(self, index_path: PathLike, verify: bool = False, **options: Unpack[ReadKeywords]) -> None:
        """Opens the index with :func:`deathtensors.open`'s keywords, built
        once into native read options that every shard is opened with
        (``storage_options``: the index's and every shard's store)."""
        self.path = _index_path(expand_path(index_path))
        self._options = read_options(**options)
        self._trusted = _keys.trusted_names(options.get("trusted_signers"))
        self._index = ShardedIndex(self.path, self._options)
        self._files: Dict[str, DtFile] = {}
        if verify:
            self.verify()

    def _shard_path(self, name: str) -> str:
        shard = self._index.shard_path_of(name)
        if shard is None:
            raise TensorNotFoundError(f"cannot read {self.path}: no tensor named {name!r}")
        return shard

    def _shard(self, shard: str) -> DtFile:
        f = self._files.get(shard)
        if f is None:
            f = self._files[shard] = DtFile._with(shard, self._options, trusted=self._trusted)
        return f

    def _file(self, name: str) -> DtFile:
        f = self._shard(self._shard_path(name))
        if name not in f:
            # Asked of the shard as opened with the keys: a sealed shard
            # shows its tensors only then.
            raise DeathTensorsError(
                f"invalid sharded checkpoint {f.path}: the index puts tensor {json.dumps(name)} in this shard, "
                "which does not contain it"
            )
        return f

    def keys(self) -> List[str]:
        return self._index.keys()

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.keys())

    def __repr__(self) -> str:
        shards = len(self._index.shard_paths())
        return f"<ShardedFile {os.fspath(self.path)!r} ({len(self)} tensors in {shards} shard{'s' if shards != 1 else ''})>"

    def __enter__(self) -> "ShardedFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    def metadata(self) -> Dict[str, str]:
        """The index's metadata (``total_size`` as a string)."""
        return self._index.metadata()

    @property
    def total_size(self) -> Optional[int]:
        return self._index.total_size

    def shard_paths(self) -> List[str]:
        return [os.fspath(p) for p in self._index.shard_paths()]

    @property
    def index_path(self) -> str:
        """The index (or single file) this checkpoint was opened from."""
        return self.path

    def which_shard(self, name: str) -> str:
        """The file name of the shard holding ``name``."""
        return os.path.basename(os.fspath(self._shard_path(name)))

    def stats(self, name: str) -> Dict[str, Any]:
        """:meth:`DtFile.stats` of ``name``, from its shard."""
        return self._file(name).stats(name)

    def opened_shards(self) -> int:
        """How many shards have been opened so far."""
        return len(self._files)

    def info(self, name: str) -> Dict[str, Any]:
        info = self._file(name).info(name)
        info["shard"] = self._file(name).path
        return info

    def get_bytes(self, name: str) -> bytes:
        return self._file(name).get_bytes(name)

    def get_tensor(self, name: str, framework: str = "torch", verify: bool = False, copy: bool = False) -> Any:
        """As :meth:`DtFile.get_tensor`, from the shard holding ``name``."""
        return self._file(name).get_tensor(name, framework, verify, copy)

    def get_tensor_view(self, name: str, framework: str = "torch") -> Any:
        return self._file(name).get_tensor_view(name, framework)

    def get_tensors(self, framework: str = "torch", copy: bool = False) -> Dict[str, Any]:
        """Every tensor of every shard, as :meth:`DtFile.get_tensors` loads a
        file: one mapping (or, with ``copy=True``, one read) per shard."""
        by_shard: Dict[str, List[str]] = {}
        for name in self.keys():
            by_shard.setdefault(self._shard_path(name), []).append(name)
        loaded: Dict[str, Any] = {}
        for names in by_shard.values():
            f = self._file(names[0])
            for name in names[1:]:
                self._file(name)  # checks that the shard holds it
            if len(f) == len(names):  # the shard holds just these: load it whole
                got = f.get_tensors(framework, copy=copy)
                loaded.update((name, got[name]) for name in names)
            else:  # and more: only what the index lists
                loaded.update((name, f.get_tensor(name, framework, copy=copy)) for name in names)
        return {name: loaded[name] for name in self.keys()}

    def verify(self) -> bool:
        """Check that index and shards agree, every shard's signatures and
        requirements (``trusted_signers=``, ...), and every checksum the
        shards carry: footers, tensor digests and, with a key, every chunk's
        tag. Returns True; raises (naming the shard) otherwise."""
        self._index.verify()
        return True


def _index_path(path: str) -> str:
    """``path``, or the index a Hugging Face save of ``path`` wrote (so that
    ``open_sharded("out/model")`` opens what ``save_sharded("out/model")``
    made)."""
    if not _remote.is_url(path) and not os.path.exists(path):
        for suffix in (".deathtensors.index.json", ".safetensors.index.json"):
            if os.path.exists(path + suffix):
                return path + suffix
    return path


#: deathtensors 0.3.0's name for :class:`ShardedFile`.
ShardedReader = ShardedFile


@with_read_options
def open_sharded(index_path: PathLike, verify: bool = False, **options: Unpack[ReadKeywords]) -> ShardedFile:
    """Open a sharded checkpoint from its index (ours, Hugging Face's, or
    deathtensors 0.3.0's tensor-less index file), or a single file. The key
    and trust arguments are :func:`deathtensors.open`'s, applied to every
    shard as it is opened. ``index_path`` may be a URL (``s3://``, ``gs://``,
    ``az://``, ``http(s)://``, with ``storage_options`` as in
    :func:`deathtensors.open`): the index is read, and only the shards that
    hold the tensors asked for are opened."""
    return ShardedFile(index_path, verify, **options)


__all__ = ["save_sharded", "open_sharded", "ShardedFile", "ShardedReader"]
