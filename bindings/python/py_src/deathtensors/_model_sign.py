"""OpenSSF model signing of whole directories (``model.sig``).

The bundles are those of the ``model-signing`` package
(``model_signing sign|verify key|certificate``): a directory signed here
verifies there, and the other way round. Keys are ECDSA P-256 or P-384 in
PEM; the Ed25519 JWKs of :func:`sign_file` are in-file signature keys, not
these. See docs/SECURITY.md, "Model directories".
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Union

from . import _native

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["sign_model", "verify_model", "open_signed_model", "SignedModel"]


def _signature_path(model_dir: PathLike, signature: PathLike | None) -> str:
    return os.fspath(signature) if signature is not None else os.path.join(os.fspath(model_dir), "model.sig")


def _paths(paths: PathLike | Iterable[PathLike] | None) -> list[str] | None:
    if paths is None:
        return None
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def sign_model(
    model_dir: PathLike,
    key: PathLike,
    signature: PathLike | None = None,
    *,
    certificate_chain: PathLike | Iterable[PathLike] | None = None,
    ignore_paths: Iterable[str] = (),
    allow_symlinks: bool = False,
) -> dict[str, Any]:
    """Signs every file of ``model_dir`` into an OpenSSF model-signing bundle.

    Args:
        model_dir: The model directory.
        key: A PEM file with an ECDSA private key (P-256 or P-384; PKCS#8
            ``PRIVATE KEY`` or SEC1 ``EC PRIVATE KEY``).
        signature: Where to write the bundle (default ``model_dir/model.sig``;
            it is left out of what is signed).
        certificate_chain: Certificate mode: PEM files holding the signing
            certificate of ``key`` first, then the rest of its chain.
        ignore_paths: More paths, relative to ``model_dir``, to leave out
            (``.git``, ``.gitattributes``, ``.github`` and ``.gitignore``
            always are).
        allow_symlinks: Hash the files symbolic links point to (else a link
            is an error).

    Returns:
        ``{"name": ..., "files": {relative name: sha256 hex}, "ignore_paths": [...]}``.

    Raises:
        DeathTensorsError: The key or a certificate is not one these take.
        OSError: A file cannot be read, or the bundle cannot be written.
    """
    return _native.sign_model(
        os.fspath(model_dir),
        os.fspath(key),
        _signature_path(model_dir, signature),
        _paths(certificate_chain),
        list(ignore_paths),
        allow_symlinks,
    )


def verify_model(
    model_dir: PathLike,
    public_key: PathLike | None = None,
    signature: PathLike | None = None,
    *,
    certificate_chain: PathLike | Iterable[PathLike] | None = None,
) -> dict[str, Any]:
    """Verifies ``model_dir`` against its OpenSSF model-signing bundle.

    Args:
        model_dir: The model directory.
        public_key: Key mode: a PEM file with the signer's ECDSA public key
            (P-256 or P-384).
        signature: The bundle (default ``model_dir/model.sig``).
        certificate_chain: Certificate mode (instead of ``public_key``): PEM
            files of the certificates to trust.

    Returns:
        What the signature covers, as :func:`sign_model` returns it.

    Raises:
        SignatureError: The bundle is refused: another key, an untrusted
            chain, a modified bundle, or an unsupported kind (the message
            says which).
        IntegrityError: The directory does not match: the message names the
            files changed, missing and not in the signature.
    """
    if public_key is None and certificate_chain is None:
        raise TypeError("verify_model needs public_key (key mode) or certificate_chain (certificate mode)")
    return _native.verify_model(
        os.fspath(model_dir),
        _signature_path(model_dir, signature),
        None if public_key is None else os.fspath(public_key),
        _paths(certificate_chain),
    )


class SignedModel:
    """A model directory whose signature verified, for loads that check
    each file's header on open and each tensor as it is read, against the
    per-tensor commitments deathtensors' :func:`sign_model` adds to the
    signed statement (docs/SECURITY.md, "Lazy per-tensor verification").

    Loading one tensor reads and checks only its file's header and that
    tensor: what is not read is not checked. A changed tensor raises
    ``IntegrityError`` when it is read; a changed header, a file renamed
    or not listed raises ``IntegrityError`` on open. Give it to
    :func:`open` / :func:`open_sharded` as ``signed_model=``, or use
    :meth:`open` and :meth:`open_sharded`.
    """

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def dir(self) -> str:
        """The model directory (resolved)."""
        return os.fspath(self._native.dir)

    def files(self) -> list[str]:
        """The tensor files it commits to, relative to :attr:`dir`."""
        return self._native.files()

    def open(self, name: PathLike, **options: Any) -> Any:
        """:func:`deathtensors.open` of the file ``name`` (relative to the
        directory), held to the signature."""
        from ._file import open as open_file

        return open_file(os.path.join(self.dir, os.fspath(name)), signed_model=self, **options)

    def open_sharded(self, index: PathLike, **options: Any) -> Any:
        """:func:`deathtensors.open_sharded` of the index ``index``
        (relative to the directory; it is checked whole), every shard held
        to the signature."""
        from ._sharded import open_sharded

        return open_sharded(os.path.join(self.dir, os.fspath(index)), signed_model=self, **options)

    def __repr__(self) -> str:
        files = self.files()
        return f"SignedModel({self.dir!r}, {len(files)} tensor file{'' if len(files) == 1 else 's'} committed)"


def open_signed_model(
    model_dir: PathLike,
    public_key: PathLike | None = None,
    signature: PathLike | None = None,
    *,
    certificate_chain: PathLike | Iterable[PathLike] | None = None,
) -> SignedModel:
    """Checks the model-signing bundle of ``model_dir`` (its signature and
    statement; no file of the directory is read) and returns a
    :class:`SignedModel` whose loads check each tensor lazily.

    The arguments are :func:`verify_model`'s. The bundle must have been
    written by deathtensors' :func:`sign_model` (it carries the per-tensor
    commitments); ``model_signing``'s own bundles carry none: verify those
    whole with :func:`verify_model`.

    Raises:
        SignatureError: The bundle is refused, or carries no per-tensor
            commitments.
    """
    if public_key is None and certificate_chain is None:
        raise TypeError("open_signed_model needs public_key (key mode) or certificate_chain (certificate mode)")
    return SignedModel(
        _native.open_signed_model(
            os.fspath(model_dir),
            _signature_path(model_dir, signature),
            None if public_key is None else os.fspath(public_key),
            _paths(certificate_chain),
        )
    )
