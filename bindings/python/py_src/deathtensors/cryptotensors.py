"""Reading and writing cryptotensors 0.2.3 files, with cryptotensors' own API.

cryptotensors files are safetensors files whose tensors are encrypted (each
under a key of its own, wrapped by a master key) and whose header is signed
(Ed25519). Code written for cryptotensors switches by changing its import::

    from deathtensors.cryptotensors import save_file, load_file, safe_open, register_direct_key_provider

    register_direct_key_provider(keys=[enc_jwk, sign_jwk])
    save_file(tensors, "model.safetensors", config={"enc_key": enc_jwk, "sign_key": sign_jwk})
    tensors = load_file("model.safetensors")

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

from . import _convert, _keys, _native
from ._file import DtFile
from .errors import DeathTensorsError
from .safetensors import safe_open  # noqa: F401 - cryptotensors' name, opens its files with registered keys

DEFAULT_CHUNK_SIZE = 2 << 20


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
        k.setdefault("kid", "default")
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
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    config = dict(config or {})
    items = _convert.collect(tensors)
    meta = dict(metadata or {})
    if not config:
        _native.save(os.fspath(filename), items, meta or None, False, True, "safetensors", 1)
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


def load_file(filename: Any, framework: str = "numpy", *, keys: Any = None, policy_input: Any = None) -> Dict[str, Any]:
    """Every tensor of a cryptotensors (or plain safetensors) file, decrypted
    with ``keys`` or the registered ones; the signature is checked first.
    All tensors are decrypted at once, on all cores, into one buffer the
    tensors share (freed with the last of them)."""
    with DtFile(filename, keys=keys, policy_input=policy_input) as f:
        return f.get_tensors(framework=framework)


__all__ = ["save_file", "load_file", "safe_open", "register_direct_key_provider", "register_tmp_key_provider"]
