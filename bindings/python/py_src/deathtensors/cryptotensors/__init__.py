"""Reading and writing cryptotensors 0.2.3 files, with cryptotensors' own API.

cryptotensors files are safetensors files whose tensors are encrypted (each
under a key of its own, wrapped by a master key) and whose header is signed
(Ed25519). Code written for cryptotensors switches by changing its import
(``cryptotensors`` -> ``deathtensors.cryptotensors``, and its ``.torch`` and
``.numpy`` modules alike)::

    from deathtensors.cryptotensors import register_direct_key_provider, safe_open
    from deathtensors.cryptotensors.torch import save_file, load_file

    register_direct_key_provider(keys=[enc_jwk, sign_jwk])
    save_file(tensors, "model.safetensors", config={"enc_key": enc_jwk, "sign_key": sign_jwk})
    tensors = load_file("model.safetensors")
    with safe_open("model.safetensors", "pt", config={"enc_key": enc_jwk, "sign_key": sign_jwk}) as f:
        w = f.get_slice("w")[:, :8]

Errors are ``SafetensorError`` (the safetensors drop-in's), the deathtensors
error that caused them their ``__cause__``. Not here: cryptotensors' key
provider plugins (``init_key_provider``) and re-wrapping (``rewrap_file``).

Keys are cryptotensors' JWK dicts as they are (standard base64, ``"kty":
"oct"`` / ``"okp"``, ``alg``), or deathtensors' keys. Reading checks the
signature first, evaluates the file's Rego policy (``policy_input``), and
decrypts each tensor only when it is read, on all cores, into memory the
caller owns. Files written here open in cryptotensors 0.2.3, and they keep
that format's weaknesses (``docs/SECURITY.md``): no associated data, a
signature over a re-serialised header, plaintext tensors that nothing
authenticates. For new files, prefer deathtensors' own encryption
(``deathtensors.save(..., encrypt=..., sign=...)``).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Mapping, Optional

import json
from typing import Union

from .. import _convert, _keys, _native
from .._file import DtFile
from ..errors import DeathTensorsError
from ..safetensors import SafetensorError, deserialize, serialize  # noqa: F401 - cryptotensors' names
from ..safetensors._open import safe_open as _safe_open

DEFAULT_CHUNK_SIZE = _native.CT_DEFAULT_CHUNK_SIZE


def _jwk(key: Any, kind: str) -> Any:
    """cryptotensors' lenient direct-key dicts (``key``/``private``/``public``
    for ``k``/``d``/``x``, no ``kty``) as JWKs."""
    if not isinstance(key, Mapping):
        return key
    k = dict(key)
    for alias, name in (("key", "k"), ("private", "d"), ("public", "x")):
        if alias in k and name not in k:
            k[name] = k.pop(alias)
    if "kty" not in k:
        k["kty"] = "oct" if kind == "enc" else "okp"
    if kind == "enc":
        k.setdefault("alg", "aes256gcm")
        if "k" not in k:
            raise DeathTensorsError("enc_key has no key bytes ('k'): cryptotensors would make a key and lose it")
    else:
        k.setdefault("alg", "ed25519")
    return k


def register_direct_key_provider(*, keys: Any = None, files: Optional[Iterable[Any]] = None) -> None:
    """Registers keys for every open in this process (JWK dicts, a JWK set,
    or key files), replacing those registered before, as cryptotensors'
    function of the same name does."""
    if (keys is None) == (files is None):
        raise DeathTensorsError("give exactly one of keys= and files=")
    _keys.register_keys(keys, files=files)


register_tmp_key_provider = register_direct_key_provider


class SerializeCryptoConfig:
    """cryptotensors' writing configuration, as a class: ``enc_key`` and
    ``sign_key`` (JWK dicts), ``policy``, ``tensors``, ``chunk_size``,
    ``version``; ``to_dict()`` gives the ``config`` dict (Nones left out)."""

    def __init__(
        self,
        enc_key: Any = None,
        sign_key: Any = None,
        enc_kid: Optional[str] = None,
        enc_jku: Optional[str] = None,
        sign_kid: Optional[str] = None,
        sign_jku: Optional[str] = None,
        policy: Optional[Mapping[str, str]] = None,
        tensors: Optional[Iterable[str]] = None,
        chunk_size: Optional[int] = None,
        version: Optional[str] = None,
    ) -> None:
        config = {
            "enc_key": enc_key, "sign_key": sign_key, "enc_kid": enc_kid, "enc_jku": enc_jku,
            "sign_kid": sign_kid, "sign_jku": sign_jku, "policy": policy, "tensors": tensors,
            "chunk_size": chunk_size, "version": version,
        }
        self.config = {k: v for k, v in config.items() if v is not None}

    def to_dict(self) -> Dict[str, Any]:
        return self.config


class DeserializeCryptoConfig:
    """cryptotensors' reading configuration: the keys to read one file with
    (``enc_key``, ``sign_key``; without them, the registered keys)."""

    def __init__(self, enc_key: Any = None, sign_key: Any = None) -> None:
        self.config = {k: v for k, v in {"enc_key": enc_key, "sign_key": sign_key}.items() if v is not None}

    def to_dict(self) -> Dict[str, Any]:
        return self.config


def _config(config: Any) -> Dict[str, Any]:
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict or a CryptoConfig, not {type(config).__name__}")
    return dict(config or {})


def _read_keys(config: Any) -> Any:
    """The keys a reading ``config`` gives (its ``enc_key`` and ``sign_key``,
    as cryptotensors takes them), or None: the registered keys."""
    config = _config(config)
    given = [_jwk(config[k], kind) for k, kind in (("enc_key", "enc"), ("sign_key", "sign")) if config.get(k)]
    return _keys.keyring(given) if given else None


class safe_open(_safe_open):
    """cryptotensors' ``safe_open``: the safetensors drop-in's, which opens
    cryptotensors files with the registered keys, or with those of
    ``config`` (``{"enc_key": ..., "sign_key": ...}`` or a
    :class:`DeserializeCryptoConfig`). Its ``metadata()`` leaves out every
    key that starts with ``__`` (None if nothing is left), which
    ``reserved_metadata()`` gives."""

    def __init__(self, filename: Any, framework: str, device: Any = "cpu", config: Any = None, **kwargs: Any) -> None:
        self._config_keys = _read_keys(config)
        super().__init__(filename, framework, device, **kwargs)

    def _open_keys(self) -> Any:
        return self._config_keys

    def metadata(self) -> Optional[Dict[str, str]]:
        raw = self._open().raw_metadata() or {}
        user = {k: v for k, v in raw.items() if not k.startswith("__")}
        return user or None

    def reserved_metadata(self) -> Dict[str, str]:
        raw = self._open().raw_metadata() or {}
        return {k: v for k, v in raw.items() if k.startswith("__")}


def serialize_file(
    tensor_dict: Mapping[str, Mapping[str, Any]],
    filename: Any,
    metadata: Optional[Mapping[str, str]] = None,
    config: Any = None,
) -> None:
    """cryptotensors' ``serialize_file``: ``{name: {"dtype", "shape",
    "data"}}`` (dtype names as torch and numpy spell them) to a file,
    encrypted with ``config`` (plain safetensors without)."""
    from ..safetensors._serialize import dtype_code, logical_shape

    tensors = {}
    for name, spec in tensor_dict.items():
        code = dtype_code(str(spec["dtype"]))
        tensors[name] = (code, logical_shape(code, spec["shape"]), spec["data"])
    save_file(tensors, filename, metadata, config)


def save_file(
    tensors: Mapping[str, Any],
    filename: Any,
    metadata: Optional[Mapping[str, str]] = None,
    config: Optional[Mapping[str, Any]] = None,
) -> None:
    """Saves ``tensors`` (numpy arrays or torch tensors) as a cryptotensors
    file. ``config`` is cryptotensors' dict: ``enc_key`` and ``sign_key``
    (JWK dicts; or ``enc_kid``/``sign_kid`` naming registered keys),
    ``policy`` (``{"local": rego, "remote": rego}``), ``tensors`` (the
    names to encrypt; default all), ``chunk_size`` and ``version`` ("1" or
    "2", the default). Without ``config`` it is a plain safetensors file."""
    config = _config(config)
    items = _convert.collect(tensors)
    meta = dict(metadata or {})
    if not config:
        options = _native.WriteOptions(global_metadata=meta or None, format="safetensors", alignment=1)
        _native.save(os.fspath(filename), items, options)
        return
    registered = _keys.default_keys()
    enc = _keys.keyring(_jwk(config["enc_key"], "enc")) if config.get("enc_key") else _select(registered, config.get("enc_kid"), "enc")
    sign = _keys.keyring(_jwk(config["sign_key"], "sign")) if config.get("sign_key") else _select(registered, config.get("sign_kid"), "sign")
    policy = config.get("policy") or None
    if policy is not None:
        default = "package model\nallow = true"
        policy = (policy.get("local", default), policy.get("remote", default))
    version = int(config.get("version") or 2)
    _native.save_cryptotensors(
        os.fspath(filename),
        items,
        meta or None,
        enc,
        sign,
        None,
        version,
        int(config.get("chunk_size") or DEFAULT_CHUNK_SIZE),
        policy,
        list(config["tensors"]) if config.get("tensors") is not None else None,
        True,
    )


def _select(ring: Any, kid: Optional[str], kind: str) -> Any:
    if kid is not None:
        raise DeathTensorsError(
            f"{kind}_kid: pass the key itself ({kind}_key=...); keys are looked up by kid when reading"
        )
    if (kind == "enc" and not ring.can_decrypt()) or (kind == "sign" and not ring.signing_count()):
        raise DeathTensorsError(f"no {kind} key: give config['{kind}_key'] or register one")
    return ring


def load_file(
    filename: Any, framework: str = "numpy", *, keys: Any = None, policy_input: Any = None, config: Any = None
) -> Dict[str, Any]:
    """Every tensor of a cryptotensors (or plain safetensors) file, decrypted
    with ``keys`` (or ``config``'s, or the registered ones); the signature
    is checked first. All tensors are decrypted at once, on all cores, into
    one buffer the tensors share (freed with the last of them)."""
    if keys is None:
        keys = _read_keys(config)
    with DtFile(filename, keys=keys, policy_input=policy_input) as f:
        return f.get_tensors(framework=framework)


def is_encrypted_bytes(data: Union[bytes, bytearray, memoryview]) -> bool:
    """Whether the safetensors file held in ``data`` is a cryptotensors
    file (its metadata has the ``__encryption__`` field)."""
    view = memoryview(data)
    if len(view) < 8:
        return False
    n = int.from_bytes(view[:8], "little")
    if n > len(view) - 8:
        return False
    try:
        header = json.loads(bytes(view[8 : 8 + n]))
    except (ValueError, RecursionError):
        return False  # not JSON (or nested past Python's limit): the reader says what is wrong
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return isinstance(meta, dict) and "__encryption__" in meta


__all__ = [
    "save_file",
    "load_file",
    "safe_open",
    "serialize",
    "serialize_file",
    "deserialize",
    "register_direct_key_provider",
    "register_tmp_key_provider",
    "SafetensorError",
    "SerializeCryptoConfig",
    "DeserializeCryptoConfig",
]
