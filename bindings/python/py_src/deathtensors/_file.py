"""The seed's API: save, save_file, open and DtFile."""

from __future__ import annotations

import collections.abc
import functools
import inspect
import os
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypedDict, TypeVar, Union, Unpack

from . import _convert, _dtypes, _keys, _remote
from . import _native
from ._legacy import expand_path
from ._native import Reader, TensorNames, save as _native_save
from .errors import DeathTensorsError, FormatError, IntegrityError, NoKeyError

# The lazy names of a large file are a sequence (isinstance(names, Sequence)).
collections.abc.Sequence.register(TensorNames)

#: Rows of ``Reader.layout`` that ``DtFile.get_tensors`` asks for at once.
_LAYOUT_BLOCK = 65_536

PathLike = Union[str, "os.PathLike[str]"]
F = TypeVar("F", bound=Callable[..., Any])


def _check_metadata(what: str, m: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    if m is None:
        return None
    if not isinstance(m, Mapping):
        raise DeathTensorsError(f"{what} must be a dict of str to str, got {type(m).__name__}")
    out = {}
    for k, v in m.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise DeathTensorsError(f"{what}: keys and values must be str, got {k!r}: {v!r}")
        out[k] = v
    return out


def _tensor_metadata(tensors: Any, metadata: Any, verb: str) -> Dict[str, Optional[Dict[str, str]]]:
    """Checks that ``tensors`` is a dict and that ``metadata`` maps some of
    its names to string dicts; returns the checked metadata."""
    if not isinstance(tensors, Mapping):
        raise DeathTensorsError(f"tensors must be a dict of name to tensor, got {type(tensors).__name__}")
    metadata = dict(metadata or {})
    unknown = set(metadata) - set(tensors)
    if unknown:
        raise DeathTensorsError(f"metadata names tensors that are not {verb}: {sorted(unknown)}")
    return {name: _check_metadata(f"metadata of {name!r}", m) for name, m in metadata.items()}


def _file_items(
    tensors: Iterable[Tuple[str, str, Iterable[int], Any, Optional[Mapping[str, str]]]],
) -> List[Tuple[str, str, Any, Any, Optional[Dict[str, str]]]]:
    """``(name, dtype, shape, bytes[, metadata])`` entries, as
    :func:`save_file` and ``append_file`` take them, as the native writers
    take them: each one's bytes as a buffer, its metadata checked."""
    items = []
    for entry in tensors:
        name, dtype, shape, data = entry[:4]
        meta = entry[4] if len(entry) > 4 else None
        dtype, shape, buf = _convert.to_buffer(name, (dtype, shape, data))
        items.append((name, dtype, shape, buf, _check_metadata(f"metadata of {name!r}", meta)))
    return items


class WriteKeywords(TypedDict, total=False):
    """:func:`write_options`' keywords, for type checkers (PEP 692): the
    write keywords of every writing function (:func:`save` takes them all;
    the others take them all or a subset, their docstrings saying why).
    ``tests/test_options.py`` keeps it equal to ``write_options``'
    parameters, to the native ``WriteOptions`` and to ``_native.pyi``, and
    every writing function's keywords and defaults equal to these."""

    global_metadata: Optional[Mapping[str, str]]
    checksum: Union[bool, str]
    compress: Union[bool, str]
    compress_level: int
    durable: bool
    format: str
    alignment: int
    encrypt: Any
    sign: Any
    cipher: str
    chunk_size: int
    seal_header: bool
    drop_cache: bool


def write_options(
    *,
    global_metadata: Optional[Mapping[str, str]] = None,
    checksum: Union[bool, str] = False,
    compress: Union[bool, str] = False,
    compress_level: int = _native.COMPRESS_LEVEL,
    durable: bool = True,
    format: str = "deathtensors",
    alignment: int = 64,
    encrypt: Any = None,
    sign: Any = None,
    cipher: str = "AES-256-GCM",
    chunk_size: int = 1 << 20,
    seal_header: bool = False,
    drop_cache: bool = False,
) -> _native.WriteOptions:
    """The native write options of a save's keywords (documented in
    :func:`save`), built and checked once, by the native core, for every
    writing function (``save``, ``save_file``, ``save_sharded``,
    ``from_safetensors``, ``to_safetensors``, the distributed storage
    writer); keys are turned into key rings here. The defaults are the
    native ``WriteOptions``' (a test keeps them equal); a writing function
    whose default differs says why in its docstring."""
    return _native.WriteOptions(
        global_metadata=_check_metadata("global_metadata", global_metadata),
        checksum=checksum,
        compress=compress,
        compress_level=compress_level,
        durable=durable,
        format=format,
        alignment=alignment,
        encrypt=None if encrypt is None else _keys.keyring(encrypt),
        sign=None if sign is None else _keys.keyring(sign),
        cipher=cipher,
        chunk_size=chunk_size,
        seal_header=seal_header,
        drop_cache=drop_cache,
    )


class ReadKeywords(TypedDict, total=False):
    """:func:`read_options`' keywords, for type checkers (PEP 692): the
    ``**options`` of ``open``, ``DtFile`` and ``open_sharded``. A test keeps
    it equal to ``read_options``' parameters."""

    keys: Any
    trusted_signers: Any
    require_signature: bool
    require_encryption: bool
    policy_input: Any
    max_decompressed_len: Optional[int]
    storage_options: Optional[Mapping[str, Any]]
    max_kdf_work: Optional[int]
    max_header_len: Optional[int]
    signed_model: Any
    map_tensors: Optional[bool]


def read_options(
    *,
    keys: Any = None,
    trusted_signers: Any = None,
    require_signature: bool = False,
    require_encryption: bool = False,
    policy_input: Any = None,
    max_decompressed_len: Optional[int] = None,
    storage_options: Optional[Mapping[str, Any]] = None,
    max_kdf_work: Optional[int] = None,
    max_header_len: Optional[int] = None,
    signed_model: Any = None,
    map_tensors: Optional[bool] = None,
) -> _native.ReadOptions:
    """The native read options of :func:`open`'s keywords (documented
    there), built once for a file or for every shard of a checkpoint.
    Without ``keys``, the registered and environment keys are used."""
    return _native.ReadOptions(
        keys=_keys.keyring(keys) if keys is not None else _keys.default_keys(),
        trusted_signers=_keys.signer_keys(trusted_signers),
        require_signature=require_signature,
        require_encryption=require_encryption,
        policy_input=policy_input,
        max_decompressed_len=max_decompressed_len,
        storage_options=storage_options,
        max_kdf_work=max_kdf_work,
        max_header_len=max_header_len,
        signed_model=None if signed_model is None else signed_model._native,
        map_tensors=map_tensors,
    )


def with_read_options(f: F) -> F:
    """Shows ``read_options``' keywords in the signature of ``f``, which
    takes them as ``**options`` and passes them on (``open``,
    ``DtFile.__init__``, ``open_sharded``): they are spelled once, there.
    A keyword that is neither ``f``'s nor ``read_options``' is refused in
    ``f``'s name, as Python refuses one of a plain function."""
    own = inspect.signature(f)
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    keywords = inspect.signature(read_options).parameters.values()
    accepted = {p.name for p in params} | {p.name for p in keywords}

    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in accepted:
                raise TypeError(f"{f.__qualname__}() got an unexpected keyword argument {name!r}")
        return f(*args, **kwargs)

    checked.__signature__ = own.replace(parameters=[*params, *keywords])  # type: ignore[attr-defined]
    return checked  # type: ignore[return-value]


def save(
    path: PathLike,
    tensors: Mapping[str, Any],
    metadata: Optional[Mapping[str, Mapping[str, str]]] = None,
    global_metadata: Optional[Mapping[str, str]] = None,
    checksum: Union[bool, str] = False,
    compress: Union[bool, str] = False,
    compress_level: int = _native.COMPRESS_LEVEL,
    durable: bool = True,
    *,
    format: str = "deathtensors",
    alignment: int = 64,
    encrypt: Any = None,
    sign: Any = None,
    cipher: str = "AES-256-GCM",
    chunk_size: int = 1 << 20,
    seal_header: bool = False,
    drop_cache: bool = False,
) -> None:
    """Save a dict of tensors to ``path``, atomically. ``~`` and ``$VARS`` in
    ``path`` are expanded, as deathtensors 0.3.0 did (everywhere a path is
    taken).

    ``tensors`` maps names to torch tensors (CPU or not, any layout), numpy
    arrays (any memory layout: saved in C order with the right values),
    ``(dtype, shape, bytes)`` tuples, or objects with the buffer protocol.
    ``metadata`` maps tensor names to string dicts; ``global_metadata`` is a
    string dict for the file. ``checksum`` records a SHA-256 digest of every
    tensor and a SHA-256 footer; ``checksum="tensors"`` records the digests
    alone, hashing every byte once instead of twice, for files read tensor by
    tensor (each read can be checked; ``verify`` checks every tensor; there
    is no footer for whole-file checks). ``durable`` (default) fsyncs before the file
    replaces the target; ``durable=False`` skips only the fsyncs.
    ``drop_cache=True`` (durable saves, Linux) keeps the file out of the page
    cache: a plain save goes around it (``O_DIRECT``) where the file system
    allows, which also spares it the page allocations; otherwise (and for
    compressed or encrypted saves) its pages leave the cache once they are
    on the disk, part by part as the save goes. For large files kept for
    later (checkpoints): the save evicts nothing the machine had cached; a
    read of the file soon after comes from the disk.

    ``compress=True`` compresses each tensor on its own with zstd at
    ``compress_level`` (1 to 22), in 1 MiB chunks, floats grouped by byte
    plane first (``docs/FORMAT.md`` section 15): loading one tensor
    decompresses only its chunks, on all cores. Tensors that do not shrink
    are stored raw. deathtensors 0.3.0 refuses such files.
    ``compress="blob"`` writes deathtensors 0.3.0's whole-file zstd frame
    instead, which 0.3.0 reads, but loading one tensor then decompresses
    the whole file. Compression does not combine with ``encrypt``.

    ``format`` is ``"deathtensors"`` (default), ``"safetensors"`` or
    ``"bintensors"`` (bintensors 0.2, byte for byte as its own writer writes
    the same tensors; ``global_metadata=None`` and ``{}`` are different
    files there). The other two formats have no per-tensor metadata,
    checksum, alignment, encryption or signature.

    The tensors' memory goes to the file without copies, with the GIL
    released. Same tensors, same bytes (unless encrypted).

    ``encrypt`` encrypts every tensor (``docs/FORMAT.md`` section 10) for
    one or more recipients: symmetric JWKs, X25519 public JWKs,
    :class:`Passphrase` objects, key files or a :class:`KeyRing`; ``cipher``
    is ``"AES-256-GCM"`` (default) or ``"CHACHA20-POLY1305"``, in chunks of
    ``chunk_size`` bytes. ``sign`` signs the file with Ed25519 JWKs that hold
    their secret ``d``; a signed plaintext file always gets digests and a
    footer (the signature commits to the data through them).
    ``seal_header=True`` (with ``encrypt``) encrypts the header too: without
    a key, the file shows no tensor names, shapes or metadata. These make
    files that deathtensors 0.3.0 refuses to open.
    """
    checked = _tensor_metadata(tensors, metadata, "saved")
    options = write_options(
        global_metadata=global_metadata, checksum=checksum, compress=compress, compress_level=compress_level,
        durable=durable, format=format, alignment=alignment, encrypt=encrypt, sign=sign, cipher=cipher,
        chunk_size=chunk_size, seal_header=seal_header, drop_cache=drop_cache,
    )
    _native_save(expand_path(path), _convert.collect(tensors, checked or None), options)


def save_file(
    path: PathLike,
    tensors: Iterable[Tuple[str, str, Iterable[int], Any, Optional[Mapping[str, str]]]],
    global_metadata: Optional[Mapping[str, str]] = None,
    checksum: Union[bool, str] = False,
    compress: Union[bool, str] = False,
    compress_level: int = _native.COMPRESS_LEVEL,
    durable: bool = True,
    *,
    metadata: Optional[Mapping[str, str]] = None,
    format: str = "deathtensors",
    alignment: int = 64,
    encrypt: Any = None,
    sign: Any = None,
    cipher: str = "AES-256-GCM",
    chunk_size: int = 1 << 20,
    seal_header: bool = False,
    drop_cache: bool = False,
) -> None:
    """The lower-level form of :func:`save`: ``tensors`` is an iterable of
    ``(name, dtype, shape, bytes, metadata)`` with dtype names such as
    ``"F32"`` and raw little-endian row-major bytes. The write keywords
    (``checksum``, ``compress``, ``format``, ``encrypt``, ...) are
    :func:`save`'s, with its defaults.

    safetensors' order is taken too: ``save_file(tensors, path,
    metadata=None)`` with ``tensors`` a dict of tensors (what
    :func:`save` takes) and ``metadata`` the global metadata.
    """
    keywords: WriteKeywords = {
        "checksum": checksum, "compress": compress, "compress_level": compress_level, "durable": durable,
        "format": format, "alignment": alignment, "encrypt": encrypt, "sign": sign, "cipher": cipher,
        "chunk_size": chunk_size, "seal_header": seal_header, "drop_cache": drop_cache,
    }
    if isinstance(path, Mapping) and isinstance(tensors, (str, bytes, os.PathLike)):
        # safetensors.*.save_file(tensors, filename, metadata=None)
        save(tensors, path, global_metadata=metadata if metadata is not None else global_metadata, **keywords)
        return
    if metadata is not None:
        raise TypeError("save_file(path, tensors, ...): the global metadata is global_metadata= (metadata= is for save_file(tensors, path, metadata=...), safetensors' order)")
    options = write_options(global_metadata=global_metadata, **keywords)
    items = _file_items(tensors)
    _native_save(expand_path(path), items, options)


def _tensor_name(name: Any) -> None:
    """A tensor name must be a string: any other key says so, naming it
    (the native layer's own words would be "cannot be converted to
    'PyString'")."""
    if not isinstance(name, str):
        raise TypeError(f"tensor names are strings: got {type(name).__name__} {name!r} (f.keys() lists the names)")


class DtFile:
    """An open deathtensors (or safetensors, or bintensors) file.

    Opening reads only the header. Tensors are read when asked for: as
    tensors the caller owns (``get_tensor``: copy-on-write views of the
    mapped file, or copies with ``copy=True``) or as zero-copy read-only
    views of the mapped file (``get_tensor_view``, ``get_buffer``).
    """

    @with_read_options
    def __init__(self, path: PathLike, verify: bool = False, **options: Unpack[ReadKeywords]) -> None:
        """Opens ``path`` with :func:`open`'s keywords (``keys=``,
        ``trusted_signers=``, ...)."""
        self._open(path, read_options(**options), verify, _keys.trusted_names(options.get("trusted_signers")))

    def _open(self, path: PathLike, options: Any, verify: bool, trusted: Dict[bytes, Optional[str]]) -> None:
        path = expand_path(path)
        self._reader = Reader(path, options)
        self.path = path
        self._trusted = trusted
        if verify:
            self.verify()

    @classmethod
    def _with(
        cls, path: PathLike, options: Any, verify: bool = False, trusted: Optional[Dict[bytes, Optional[str]]] = None
    ) -> "DtFile":
        """A file opened with native read options already built (a shard
        of a checkpoint: every shard shares them); ``trusted``: the trusted
        signers' key ids, as :func:`_keys.trusted_names` gives."""
        f = cls.__new__(cls)
        f._open(path, options, verify, trusted or {})
        return f

    # -- container protocol -------------------------------------------------
    def keys(self) -> Sequence[str]:
        """Tensor names in file order: a list, or for a file of 100,000
        tensors or more a lazy read-only sequence of them
        (:class:`TensorNames`: ``len``, indexing and slicing, iteration,
        ``in`` and ``index`` by hash lookup, equal to the list of the same
        names) that makes no Python string until one is asked for.
        ``list(f.keys())`` gives a list (for ``json.dumps``, say)."""
        return self._reader.keys()

    def __len__(self) -> int:
        return len(self._reader)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._reader

    def __iter__(self) -> Iterator[str]:
        return iter(self._reader.keys())

    def __enter__(self) -> "DtFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the file. Tensors already returned stay valid."""
        self._reader.close()

    def __repr__(self) -> str:
        if self._reader.closed:
            return f"<DtFile {self.path!r} (closed)>"
        n = len(self)
        parts = [f"{n} tensor" if n == 1 else f"{n} tensors"]
        if self._reader.is_encrypted():
            parts.append("encrypted")
        for signer in self.signers():
            who = f"{signer.kid!r} " if signer.kid else ""
            trust = "verified, trusted key" if signer.trusted else "valid signature, key not trusted"
            parts.append(f"signed by {who}{signer} ({trust})")
        return f"<DtFile {self.path!r} ({', '.join(parts)})>"

    # -- header -------------------------------------------------------------
    def metadata(self) -> Dict[str, str]:
        """The file's global metadata (without the crypto fields of a
        cryptotensors file, which describe its encryption, not the model)."""
        return self._reader.metadata() or {}

    def info(self, name: str) -> Dict[str, Any]:
        """dtype, shape, data_offsets, nbytes, metadata (and more) of a tensor."""
        _tensor_name(name)
        t = self._reader.info(name)
        dtype, offsets = t.dtype, t.data_offsets
        torch_name = _dtypes._TORCH.get(dtype)
        numpy_spec = _dtypes._NUMPY.get(dtype)
        return {
            "name": name,
            "dtype": dtype,
            "torch_dtype": f"torch.{torch_name}" if torch_name else None,
            "numpy_dtype": (numpy_spec[1] if isinstance(numpy_spec, tuple) else numpy_spec),
            "shape": t.shape,
            "data_offsets": offsets,
            "nbytes": self._reader.nbytes(name),
            "stored_nbytes": offsets[1] - offsets[0],
            "compression": self._tensor_compression(name),
            "metadata": t.metadata,
            "sha256": t.sha256,
            "file_offset": t.file_offset,
            "aligned": t.aligned,
        }

    def has_checksum(self) -> bool:
        """Whether the file has a SHA-256 footer."""
        return self._reader.has_footer()

    def is_encrypted(self) -> bool:
        """Whether the tensors are encrypted (the header is readable without
        a key; the tensors need one)."""
        return self._reader.is_encrypted()

    def encryption(self) -> Optional[Dict[str, Any]]:
        """The cipher, chunk size and recipients (kind and key id) of an
        encrypted file, or None. Needs no key. For a cryptotensors file
        also ``"format": "cryptotensors"``, how many tensors it encrypts
        (``"encrypted_tensors"``; the others are stored in the clear) and
        its signer's key id (``"signer_kid"``); its ``chunk_size`` is None
        when each tensor is one AEAD message (its version 1)."""
        e = self._reader.encryption()
        if e is None:
            return None
        info: Dict[str, Any] = {
            "cipher": e.cipher,
            "chunk_size": e.chunk_size,
            "recipients": [{"kind": k, "kid": kid} for k, kid in e.recipients],
        }
        if e.scheme == "cryptotensors":
            info.update(format=e.scheme, encrypted_tensors=e.encrypted_tensors, signer_kid=e.signer_kid)
        return info

    def policy(self) -> Optional[str]:
        """The Rego policy (package ``model``) that opening with a key
        evaluates against ``policy_input`` before the key is used, or None.
        Needs no key (except in a sealed header)."""
        return self._reader.policy()

    def is_sealed(self) -> bool:
        """Whether the header is sealed (encrypted). Without a key the file
        then shows no tensor; with one, it reads as if it were not sealed."""
        return self._reader.is_sealed()

    def signers(self) -> List[_keys.Signer]:
        """The keys whose signatures the file carries, all valid (checked
        when it was opened): each a :class:`Signer`, a string equal to its
        fingerprint with ``kid`` and ``trusted``. A valid signature proves
        the file is unchanged since that key signed it; the key is carried
        in the file, so only a key given as ``trusted_signers=`` says who
        signed it (``trusted``). What a signature vouches for is
        :meth:`signature_covers`."""
        out = []
        for k in self._reader.signers():
            k = bytes(k)
            trusted = k in self._trusted
            out.append(_keys.Signer(_native.fingerprint(k), self._trusted.get(k), trusted))
        return out

    def signature_covers(self) -> Optional[str]:
        """What the file's signature commits to, or None if it has none:
        ``"header and data"`` for deathtensors files (the header, and
        through its digests every tensor byte: each tensor read is checked
        against them, encrypted or not, so not even another recipient of an
        encrypted file can change what this reader returns), ``"header"``
        for cryptotensors files (their signature covers no digest of the
        data: a holder of the master key can change tensor bytes;
        ``docs/SECURITY.md``)."""
        return self._reader.signature_covers()

    def is_compressed(self) -> bool:
        """Whether the file is compressed: tensors one by one in chunks
        (``save(compress=True)``), or the whole data blob as one zstd frame
        (deathtensors 0.2/0.3, ``compress="blob"``)."""
        return self._reader.is_compressed()

    def compression(self) -> Optional[Dict[str, Any]]:
        """How the file is compressed, or None: ``mode`` (``"chunks"`` or
        ``"blob"``), ``codec``, ``level`` and ``chunk_size`` (None for a
        blob: 0.3.0 does not record them), ``raw_bytes`` (the tensors'
        bytes), ``stored_bytes`` (what they take in the file) and ``ratio``
        (stored / raw)."""
        c = self._reader.compression()
        if c is None:
            return None
        return {
            "mode": c.mode,
            "codec": c.codec,
            "level": c.level,
            "chunk_size": c.chunk_size,
            "raw_bytes": c.raw_bytes,
            "stored_bytes": c.stored_bytes,
            "ratio": c.stored_bytes / c.raw_bytes if c.raw_bytes else 1.0,
        }

    def _tensor_compression(self, name: str) -> Optional[Dict[str, Any]]:
        c = self._reader.tensor_compression(name)
        if c is None:
            return None
        return {
            "codec": "zstd",
            "raw_bytes": c.raw_bytes,
            "stored_bytes": c.stored_bytes,
            "chunks": c.chunks,
            "ratio": c.stored_bytes / c.raw_bytes,
        }

    @property
    def format(self) -> str:
        return self._reader.format

    # -- data ---------------------------------------------------------------
    def get_bytes(self, name: str) -> bytes:
        """The tensor's raw bytes (a copy)."""
        _tensor_name(name)
        return self._reader.read(name)

    def get_buffer(self, name: str) -> memoryview:
        """A read-only memoryview of the tensor's bytes in the mapped file
        (zero-copy; see :meth:`get_tensor_view` for the trade-off and the
        files it refuses)."""
        _tensor_name(name)
        return memoryview(self._reader.region(name))

    def get_tensor(self, name: str, framework: str = "torch", verify: bool = False, copy: bool = False) -> Any:
        """The tensor as a torch tensor (default) or numpy array that the
        caller owns: writable, writes never reach the file, valid after
        close().

        A large tensor (1 MiB or more) is by default a copy-on-write mapping
        of its bytes in the file: loading copies nothing, and the kernel
        copies a page only when it is first written. Every call maps anew, so
        two calls never share memory. Like any mapping, it sees another
        program truncating or rewriting the file in place (a truncation
        raises SIGBUS on access); files replaced by a rename, as ours are,
        are safe. ``copy=True`` reads the bytes into fresh memory instead,
        detached from the file, as is done for small tensors (and always on
        Windows, where a mapped file can be neither replaced nor deleted).
        ``verify=True`` checks the bytes against the tensor's digest, and
        implies a copy, so that the bytes checked are the bytes returned.
        """
        _tensor_name(name)
        info = self._reader.info(name)
        dtype, shape, (start, end), aligned = info.dtype, info.shape, info.data_offsets, info.aligned
        # A compressed tensor spans fewer bytes in the file than it has.
        end = start + self._reader.nbytes(name)
        if end == start:
            if verify:
                self._reader.verify_tensor(name)
            return _convert.from_buffer(framework, name, dtype, shape, b"")
        arena = None
        mappable = _convert.MAP_BY_DEFAULT and self._reader.maps_tensors()
        if not (copy or verify) and aligned and end - start >= _convert.MAP_MIN and mappable:
            try:
                arena = self._reader.map_tensor(name)
            except OSError:
                arena = None  # out of mappings, say: read it instead
        if arena is None:
            # A fresh aligned buffer holding just this tensor.
            arena = self._reader.read_tensor(name, verify)
        return _convert.from_buffer(framework, name, dtype, shape, arena)

    def get_tensor_view(self, name: str, framework: str = "torch") -> Any:
        """A zero-copy, read-only view of the tensor in the shared mapping of
        the file.

        Trade-off: no copy and no extra memory, but the file must not be
        modified or truncated while the view lives (a truncated mapping
        kills the process with SIGBUS on access). A tensor whose bytes are
        not aligned for its dtype (files by deathtensors 0.3.0) is copied.
        :meth:`get_tensor` is as cheap and gives a writable tensor. Refused
        (``DeathTensorsError``) where tensors are read and checked, never
        mapped: encrypted or compressed files, signed files, and readers
        with a signature or encryption requirement.
        """
        _tensor_name(name)
        info = self._reader.info(name)
        if not info.aligned:
            return self.get_tensor(name, framework)
        return _convert.view(framework, info.dtype, info.shape, self._reader.region(name), name)

    def get_tensors(self, framework: str = "torch", copy: bool = False) -> Dict[str, Any]:
        """Every tensor, by name in the order of :meth:`keys`, in memory the
        caller owns (writable, writes never reach the file, valid after
        close()).

        By default the tensors are views of one copy-on-write mapping of the
        file's data (a new one each call), with the properties and the one
        caveat given in :meth:`get_tensor`: loading copies nothing. With
        ``copy=True`` (and for compressed files) the whole data blob is read
        at once, with parallel reads, into one fresh buffer detached from the
        file, and the tensors are views into it. Either buffer is freed when
        the last of its tensors is. Tensors whose bytes are not aligned for
        their dtype (files by deathtensors 0.3.0) are copied.
        """
        if not len(self._reader):
            refuse_hidden_tensors(self._reader, self.path)
            return {}
        arena = None
        if not copy and _convert.MAP_BY_DEFAULT and self._reader.maps_tensors():
            try:
                arena = self._reader.map_all()
            except OSError:
                arena = None  # cannot map (out of address space, say): read instead
        heap = arena is None
        if heap:
            arena = self._reader.read_all()
        out: Dict[str, Any] = {}
        n = len(self._reader)
        with _convert.gc_paused():
            # The layout a block of rows at a time: all at once, a million
            # tiny tensors' rows (~200 bytes each) would outweigh the
            # tensors made from them.
            for start in range(0, n, _LAYOUT_BLOCK):
                out.update(_convert.from_blob(framework, self._reader.layout(heap, start, start + _LAYOUT_BLOCK), arena))
        return out

    def get_tensor_slice(
        self, name: str, start: int = 0, count: Optional[int] = None, framework: str = "torch"
    ) -> Any:
        """Rows ``[start, start + count)`` of the tensor's first axis (all
        remaining rows when ``count`` is None), reading only their bytes: a
        10-million-row embedding table can be streamed a block at a time.
        The result is a fresh tensor the caller owns. (deathtensors 0.3.0
        read the whole tensor to slice it.)"""
        info = self._reader.info(name)
        dtype, shape = info.dtype, info.shape
        if not shape:
            raise DeathTensorsError(f"tensor {name!r} is a scalar; get_tensor_slice needs at least one axis")
        rows = shape[0]
        if not isinstance(start, int) or start < 0 or start >= rows:
            raise DeathTensorsError(f"start={start} is out of range for tensor {name!r} with {rows} rows")
        if count is None:
            count = rows - start
        if not isinstance(count, int) or count < 0 or start + count > rows:
            raise DeathTensorsError(f"slice [{start}, {start}+{count}) exceeds the {rows} rows of tensor {name!r}")
        # The tensor's own bytes (a compressed one's stored bytes are fewer).
        row_bytes, odd = divmod(self._reader.nbytes(name), rows)
        if odd:
            raise DeathTensorsError(f"the rows of tensor {name!r} ({dtype}) do not fill whole bytes: use get_bytes()")
        arena = self._reader.read_range(name, start * row_bytes, count * row_bytes)
        return _convert.from_buffer(framework, name, dtype, [count, *shape[1:]], arena)

    def get_tensor_mmap(self, name: str) -> Any:
        """A torch tensor viewing the tensor's bytes in the mapped file,
        without a copy (read-only: see :meth:`get_tensor_view`). As in
        deathtensors 0.3.0, compressed files refuse it."""
        _tensor_name(name)
        if self._reader.is_compressed():
            raise DeathTensorsError("get_tensor_mmap() is not supported on compressed files; use get_tensor() instead")
        return self.get_tensor_view(name, "torch")

    def get_all_bytes(self) -> Dict[str, bytes]:
        """Every tensor's raw bytes, by name in file order (copies)."""
        refuse_hidden_tensors(self._reader, self.path)
        return {name: self._reader.read(name) for name in self._reader.keys()}

    def stats(self, name: str) -> Dict[str, Any]:
        """Summary statistics of one tensor, computed streaming in native code
        on all cores without materialising it: deathtensors 0.3.0's fields
        ``dtype``, ``shape``, ``nbytes``, ``count`` (elements), ``min``,
        ``max``, ``mean``, ``stddev`` (population) and ``nnz`` (finite
        non-zero values), and ``finite``, ``zeros``, ``nan`` and ``inf``.

        min, max, mean and stddev are over the finite values (NaN when there
        are none; mean and stddev 0.0 for an empty tensor). Complex tensors
        count their real and imaginary parts as separate values (0.3.0 used
        magnitudes); BOOL's min and max are its real ones (0.3.0 always said
        0 for min)."""
        _tensor_name(name)
        return self.all_stats([name])[name]

    def all_stats(self, names: Optional[Iterable[str]] = None) -> Dict[str, Dict[str, Any]]:
        """:meth:`stats` of every tensor (or of ``names``), computed in one
        pass spread over all cores."""
        if names is None:
            refuse_hidden_tensors(self._reader, self.path)
        names = list(self._reader.keys() if names is None else names)
        out = {}
        for name, s in zip(names, self._reader.stats(names)):
            info = self._reader.info(name)
            dtype, shape = info.dtype, info.shape
            if s is None:
                raise DeathTensorsError(f"stats of tensor {name!r}: not supported for packed sub-byte dtype {dtype}")
            count, finite, zeros, nan, inf, lo, hi, mean, std = s
            empty = 0.0 if count == 0 else float("nan")
            numel = 1
            for d in shape:
                numel *= d
            out[name] = {
                "dtype": dtype,
                "shape": list(shape),
                "nbytes": self._reader.nbytes(name),
                "count": numel,
                "min": float("nan") if lo is None else lo,
                "max": float("nan") if hi is None else hi,
                "mean": empty if mean is None else mean,
                "stddev": empty if std is None else std,
                "nnz": finite - zeros,
                "finite": finite,
                "zeros": zeros,
                "nan": nan,
                "inf": inf,
            }
        return out

    # -- integrity ----------------------------------------------------------
    def verify(self) -> bool:
        """Check the SHA-256 footer and every tensor digest (on all cores).

        Returns True when everything checks, False when the file carries no
        checksum; raises :class:`IntegrityError` (naming the tensor, when a
        digest fails) if the file is corrupt. An encrypted file opened
        without a key that opens it raises :class:`NoKeyError`: its tensors'
        tags and digests cannot be checked, and True would claim they were.
        """
        # The verdict is io's (the command line's `verify` comes to the same).
        return self._reader.verify()

    def verify_tensor(self, name: str) -> None:
        """Check one tensor against its digest; raises IntegrityError."""
        _tensor_name(name)
        self._reader.verify_tensor(name)


def refuse_hidden_tensors(reader: Any, path: Any) -> None:
    """For loading every tensor of a file that lists none: raises if that is
    because the header is sealed and no key opened it, which must not pass
    for a file of no tensors."""
    if reader.is_sealed() and not reader.can_decrypt():
        raise NoKeyError(
            f"cannot read {path}: the header is sealed and no key given matches its recipients, "
            "so its tensors are hidden"
        )


@with_read_options
def load_file(path: PathLike, framework: str = "torch", **options: Unpack[ReadKeywords]) -> Dict[str, Any]:
    """Every tensor of ``path`` as a dict, name to tensor of ``framework``
    (``"torch"``, ``"numpy"``, ``"jax"``, ``"tensorflow"``, ``"paddle"``,
    ``"mlx"``): safetensors' ``load_file``, with :func:`open`'s keywords.
    A torch pickle checkpoint is read without running it, as by :func:`open`."""
    with open(path, **options) as f:
        return f.get_tensors(framework)


@with_read_options
def open(path: PathLike, verify: bool = False, **options: Unpack[ReadKeywords]) -> DtFile:  # noqa: A001 - the seed's name
    """Open a file lazily: a context manager returning :class:`DtFile`.

    ``keys`` decrypt an encrypted file (JWK dicts, key files,
    :class:`Passphrase` or :class:`KeyRing`; without it, the registered and
    environment keys are used). ``trusted_signers`` (Ed25519 public JWKs or
    32-byte keys) makes the file open only if one of them signed it;
    ``require_signature`` and ``require_encryption`` refuse unsigned or
    unencrypted files. With any of the three, every tensor returned has
    been checked against the digest or tags the signed header commits to.
    ``policy_input`` (any JSON value) is the ``input`` of the file's Rego
    policy, evaluated before keys are released (see ``docs/SECURITY.md``
    for what a policy can and cannot enforce). ``max_decompressed_len``
    (default 16 GiB) caps what a compressed file may decompress to in memory
    this library allocates (one tensor, or all of them at once): a small
    hostile file can declare huge tensors. ``max_kdf_work`` (default
    4,194,304: 4 GiB of memory times passes) caps the Argon2 work spent
    deriving keys from passphrases in one open, summed over the entries
    tried: a file's header sets that cost, up to 16 GiB-passes an entry.
    ``max_header_len`` (default 4 GiB, at most 64 GiB) caps a deathtensors
    header's length: 10 million tensors with 35-byte names take about
    1 GB. A longer header raises ``FormatError`` before anything is read;
    a header longer than the file is refused as truncated, and memory for
    the index grows with the bytes actually read, so a hostile length costs
    nothing. safetensors files keep safetensors' 100,000,000-byte cap.
    ``signed_model`` (from :func:`open_signed_model`) holds the file to a
    verified model signature: it must be one of the model's files, its
    header is checked on open and each tensor as it is read (a changed
    byte raises ``IntegrityError`` when its tensor is read).
    ``map_tensors`` chooses how large tensors of a local file are loaded:
    mapped copy-on-write (True) or read into memory the tensor owns
    (False). By default (None) they are mapped on a local disk and read
    with many parallel requests on a network or user-space file system
    (NFS, SMB, Lustre, GPFS, Ceph, 9p, FUSE), where each page fault of a
    mapping would be a round trip.

    ``path`` may be a URL: ``s3://``, ``gs://``, ``az://``, ``http(s)://``.
    Opening then reads the prefix and header with at most 2 ranged
    requests, and each tensor read fetches only its bytes (large ones in
    parallel parts), checked against its SHA-256 when the file has digests.
    ``storage_options`` configure the store (object_store's keys, e.g.
    ``{"aws_endpoint": "http://127.0.0.1:9000", "aws_region": "us-east-1"}``);
    the environment (``AWS_*``, ``GOOGLE_*``, ``AZURE_*``) is read too.
    ``DEATHTENSORS_REMOTE_CACHE`` (a directory) keeps fetched ranges in a
    local cache, checked and bounded (``DEATHTENSORS_REMOTE_CACHE_MAX_BYTES``,
    default 10 GiB): see ``docs/REMOTE.md``.

    A ``torch.save`` pickle checkpoint (``pytorch_model.bin``, ``.pt``) is
    opened as a :class:`~deathtensors._torch_file.TorchFile`, read without
    running its pickle (``docs/PICKLE.md``); ``verify`` and the keywords
    above do not apply to it.
    """
    try:
        return DtFile(path, verify, **options)
    except FormatError:
        # Not one of our formats: a torch checkpoint is tried only then,
        # so that no open of our files pays for the check.
        if _remote.is_url(path) or not _native.is_torch_checkpoint(expand_path(path)):
            raise
    from ._torch_file import TorchFile

    if options or verify:
        raise TypeError(f"{', '.join(sorted(options)) or 'verify'}: not for a torch pickle checkpoint")
    return TorchFile(expand_path(path))  # type: ignore[return-value]


def sign_file(path: PathLike, key: Any, durable: bool = True) -> None:
    """Adds a signature by ``key`` (an Ed25519 JWK with ``d``) to the file
    at ``path``, keeping the signatures it has. The file is replaced
    atomically; its data is copied, not re-encoded. A plaintext file must
    carry per-tensor digests (saved with ``checksum=True``)."""
    _native.sign_file(expand_path(path), _keys.keyring(key), durable)


__all__ = ["save", "save_file", "open", "DtFile", "sign_file", "IntegrityError"]
