"""Keys for encrypted and signed files.

Keys are JSON Web Keys (JWK) as dicts, the form cryptotensors and most key
tools use: ``{"kty": "oct", "kid": ..., "k": ...}`` for symmetric keys,
``{"kty": "OKP", "crv": "X25519" | "Ed25519", "x": ..., "d": ...}`` for
X25519 (encryption to a public key) and Ed25519 (signatures). Wherever a
function takes keys it accepts one key or a list of: JWK dicts (a JWK set
``{"keys": [...]}`` too), paths of JWK files, :class:`Passphrase` objects
and :class:`KeyRing` objects. Secrets stay in Rust memory that is wiped when
freed; Python only ever holds what you give it (the JWK dicts, and the text
of a :class:`Passphrase`, which can be neither pickled nor copied).

Keys can also be registered once for the process (:func:`register_keys`, as
cryptotensors' ``register_direct_key_provider``) or put in the environment
variables ``DEATHTENSORS_KEYS`` or ``CRYPTOTENSOR_KEYS`` as JWK JSON; they are
used when a file is opened without ``keys=``.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, Iterable, List, Optional, Union

from . import _native
from .errors import DeathTensorsError

KeyRing = _native.KeyRing

#: Environment variables read for keys when a file is opened without ``keys=``.
ENV_VARS = tuple(_native.KEY_ENV_VARS)  # ("DEATHTENSORS_KEYS", "CRYPTOTENSOR_KEYS"), named in io

_registered: List[Any] = []


class KeyArgumentError(DeathTensorsError, TypeError):
    """Something given as a key is not of a kind that can be one (both a
    :class:`DeathTensorsError` and a ``TypeError``)."""


class Passphrase:
    """A passphrase as a recipient or a key (Argon2id, 64 MiB, 3 passes).

    Its ``repr`` never shows it, and it can be neither pickled nor copied
    (a copy would be one more place the secret lives)."""

    __slots__ = ("_secret",)

    def __init__(self, passphrase: str) -> None:
        if not isinstance(passphrase, str):
            raise KeyArgumentError(f"a passphrase must be a str, not {type(passphrase).__name__}")
        if not passphrase:
            raise DeathTensorsError("a passphrase must not be empty")
        self._secret = passphrase

    def __repr__(self) -> str:
        return "Passphrase(***)"

    def __reduce__(self) -> Any:
        raise TypeError("a Passphrase cannot be pickled: it would write the secret in the clear")

    def __copy__(self) -> "Passphrase":
        return self  # immutable

    def __deepcopy__(self, _memo: Any) -> "Passphrase":
        return self


KeysLike = Union[None, dict, str, "os.PathLike[str]", Passphrase, "KeyRing", Iterable[Any]]


def keyring(keys: KeysLike) -> "KeyRing":
    """A :class:`KeyRing` holding ``keys`` (see the module documentation)."""
    ring = KeyRing()
    _add(ring, keys)
    return ring


def _add(ring: "KeyRing", keys: Any) -> None:
    if keys is None:
        return
    if isinstance(keys, KeyRing):
        ring.extend(keys)
    elif isinstance(keys, Passphrase):
        ring.add_passphrase(keys._secret)
    elif isinstance(keys, dict):
        ring.add_jwk_json(json.dumps(keys))
    elif isinstance(keys, (str, os.PathLike)):
        path = os.fspath(keys)
        if path.lstrip().startswith("{") or path.lstrip().startswith("["):
            ring.add_jwk_json(path)
        else:
            ring.add_jwk_file(path)
    elif isinstance(keys, Iterable) and not isinstance(keys, (bytes, bytearray, memoryview)):
        for k in keys:
            _add(ring, k)
    else:
        raise KeyArgumentError(
            f"cannot use {type(keys).__name__} as a key: give JWK dicts, key file paths, "
            "Passphrase or KeyRing objects"
        )


def default_keys() -> "KeyRing":
    """The keys registered with :func:`register_keys` and those of the
    environment variables in :data:`ENV_VARS`."""
    ring = keyring(_registered)
    for var in ENV_VARS:
        try:
            ring.add_env(var)
        except DeathTensorsError as e:
            # It must not stop opening files that need no key.
            warnings.warn(f"{e}; its keys are ignored", RuntimeWarning, stacklevel=3)
    return ring


def register_keys(keys: KeysLike = None, *, files: Optional[Iterable[Any]] = None) -> None:
    """Registers keys for the whole process, used by every open without
    ``keys=`` (and by the safetensors drop-in). Replaces earlier ones, as
    cryptotensors' ``register_direct_key_provider(keys=..., files=...)``
    does; ``register_keys()`` clears them."""
    ring = keyring(keys)
    _add(ring, list(files or []))
    _registered[:] = [ring]


def generate_key(kind: str = "symmetric", kid: Optional[str] = None, format: str = "jwk") -> dict:
    """A new key as a JWK dict, secret included: ``"symmetric"`` (32 random
    bytes, for AES-256-GCM or ChaCha20-Poly1305), ``"x25519"`` (a key pair
    to encrypt to) or ``"ed25519"`` (a key pair that signs). Keep it secret;
    :func:`public_key` gives what to share. ``format="cryptotensors"``
    writes it in cryptotensors' dialect (symmetric and Ed25519 keys, with a
    kid), which its ``register_direct_key_provider`` takes; both read here."""
    if format not in ("jwk", "cryptotensors"):
        raise DeathTensorsError(f"unknown key format {format!r}: use 'jwk' or 'cryptotensors'")
    if format == "cryptotensors" and kid is None:
        kid = "key"  # its registry needs one (symmetric keys get this default anyway)
    text = _native.generate_key(kind, kid)
    return json.loads(_native.cryptotensors_jwk(text) if format == "cryptotensors" else text)


def public_key(jwk: dict) -> dict:
    """The public half of an X25519 or Ed25519 JWK: what writers encrypt to,
    or what readers trust (in cryptotensors' dialect when ``jwk`` is)."""
    public = _native.public_jwk(json.dumps(jwk))
    dialect = jwk.get("kty") == "okp" and str(jwk.get("alg", "")).lower() == "ed25519" and jwk.get("kid")
    if dialect:  # cryptotensors' (lowercase kty, alg, a kid): kept so
        public = _native.cryptotensors_jwk(public)
    return json.loads(public)


def _describe(key: Any) -> str:
    """How an error names a key it could not use, without its secret."""
    if isinstance(key, dict):
        fields = ", ".join(f"{f}={key[f]!r}" for f in ("kty", "crv", "kid") if isinstance(key.get(f), str))
        return f"the JWK ({fields})" if fields else "a JWK dict"
    if isinstance(key, (str, os.PathLike)) and not os.fspath(key).lstrip().startswith(("{", "[")):
        return f"the key file {os.fspath(key)!r}"
    return f"a {type(key).__name__}"


def _public_bytes(key: Any) -> List[bytes]:
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return [bytes(key)]
    found = list(key.verifying_keys()) if isinstance(key, KeyRing) else keyring(key).verifying_keys()
    if not found:
        raise DeathTensorsError(f"no Ed25519 public key in {_describe(key)}")
    return list(found)


def signer_keys(trusted: Any) -> List[bytes]:
    """The 32-byte Ed25519 public keys of ``trusted``: JWK dicts, 32-byte
    strings, key file paths, KeyRings, or a list of them. Something that
    holds no Ed25519 key is an error: trusting nobody is not the same as
    not asking (None)."""
    if trusted is None:
        return []
    if isinstance(trusted, (dict, str, bytes, bytearray, os.PathLike, KeyRing)) or not isinstance(trusted, Iterable):
        items = [trusted]
    else:
        items = list(trusted)
        if not items:
            raise DeathTensorsError(
                "trusted_signers is empty: give the Ed25519 public keys to trust, or None to trust any signer"
            )
    out: List[bytes] = []
    for k in items:
        out.extend(_public_bytes(k))
    return out


def trusted_names(trusted: Any) -> Dict[bytes, Optional[str]]:
    """The keys of ``trusted_signers=`` and their key ids (from JWK dicts
    and key files; None where there is none): how :class:`Signer` names a
    trusted signer."""
    if trusted is None:
        return {}
    single = isinstance(trusted, (dict, str, bytes, bytearray, os.PathLike, KeyRing)) or not isinstance(trusted, Iterable)
    items = [trusted] if single else list(trusted)
    out: Dict[bytes, Optional[str]] = {}
    for k in items:
        jwks: List[Any] = []
        if isinstance(k, dict):
            jwks = k.get("keys", [k]) if isinstance(k.get("keys"), list) else [k]
        elif isinstance(k, (str, os.PathLike)):
            try:
                with open(os.fspath(k), encoding="utf-8") as f:
                    doc = json.load(f)
                jwks = doc.get("keys", [doc]) if isinstance(doc, dict) else list(doc)
            except (OSError, ValueError):
                jwks = []
        for key in _public_bytes(k):
            out.setdefault(key, None)
        for jwk in jwks:
            if isinstance(jwk, dict) and isinstance(jwk.get("kid"), str):
                try:
                    named = _public_bytes(jwk)
                except DeathTensorsError:
                    continue  # not an Ed25519 key
                for key in named:
                    out[key] = jwk["kid"]
    return out


class Signer(str):
    """A signer of an open file: equal to (and printed as) its fingerprint,
    as ``signers()`` always returned, with ``fingerprint``, ``kid`` (from
    ``trusted_signers=``: files carry no key id) and ``trusted``.

    A signature that verifies proves the file is unchanged since that key
    signed it. The key is carried in the file, so it proves who signed it
    only when the key is one you trust: ``trusted`` is True only for a key
    given as ``trusted_signers=``."""

    kid: Optional[str]
    trusted: bool

    def __new__(cls, fingerprint: str, kid: Optional[str] = None, trusted: bool = False) -> "Signer":
        self = super().__new__(cls, fingerprint)
        self.kid = kid
        self.trusted = trusted
        return self

    @property
    def fingerprint(self) -> str:
        return str(self)

    def describe(self) -> str:
        """What the signature proves, in one sentence."""
        name = f"{self.kid!r} (fingerprint {self})" if self.kid else f"fingerprint {self}"
        if self.trusted:
            return f"{name}: verified, a key you trust (trusted_signers=)"
        return (
            f"{name}: signature valid, but its key is not trusted: the key is carried in the file, so this proves "
            "the file is unchanged since that key signed it, not who signed it (open with trusted_signers= to "
            "check it is a key you trust)"
        )

    def __repr__(self) -> str:
        return f"<Signer {self.describe()}>"


def fingerprint(key: Any) -> str:
    """How files, errors and ``deathtensors inspect`` name a signer: 16 hex
    digits of the SHA-256 of its Ed25519 public key (a JWK or 32 bytes)."""
    return _native.fingerprint(_public_bytes(key)[0])


__all__ = [
    "KeyRing",
    "Passphrase",
    "keyring",
    "register_keys",
    "generate_key",
    "public_key",
    "fingerprint",
    "ENV_VARS",
]
