"""Exceptions raised by deathtensors.

Every error about a file's contents is a :class:`DeathTensorsError` (itself a
``ValueError``, as in deathtensors 0.3). Operating-system errors are the usual
``OSError`` subclasses: ``FileNotFoundError``, ``PermissionError``, ...

The classes are made by the native module, which raises them (one place,
in Rust); this module is where they are documented and found:

- ``DeathTensorsError``: the base class.
- ``FormatError``: the file is malformed or hostile (the message says what
  and where).
- ``IntegrityError``: a SHA-256 footer or a tensor digest does not match.
- ``SignatureError`` (an ``IntegrityError``): a signature does not verify, or
  a required signature or signer is missing.
- ``DecryptionError``: a wrong key, or changed data or header; says where,
  deliberately not why. ``NoKeyError`` (a ``DecryptionError``): no key given
  is one of the file's recipients.
- ``PolicyDeniedError``: the file's Rego policy refused access.
- ``NotEncryptedError``: encryption was required and the file has none.
- ``NoChecksumError``: a check was asked for and the file has no checksum
  of that kind.
- ``LockedError`` (also a ``BlockingIOError``): a collection is open for
  writing elsewhere.
- ``TensorNotFoundError`` (also a ``KeyError``): no tensor of that name.
"""

from ._native import (
    DeathTensorsError,
    DecryptionError,
    FormatError,
    IntegrityError,
    LockedError,
    NoChecksumError,
    NoKeyError,
    NotEncryptedError,
    PolicyDeniedError,
    SignatureError,
    TensorNotFoundError,
)

__all__ = [
    "DeathTensorsError",
    "FormatError",
    "IntegrityError",
    "NoChecksumError",
    "TensorNotFoundError",
    "LockedError",
    "DecryptionError",
    "NoKeyError",
    "SignatureError",
    "NotEncryptedError",
    "PolicyDeniedError",
]
