"""Exceptions raised by deathtensors.

Every error about a file's contents is a :class:`DeathTensorsError` (itself a
``ValueError``, as in deathtensors 0.3). Operating-system errors are the usual
``OSError`` subclasses: ``FileNotFoundError``, ``PermissionError``, ...
"""


class DeathTensorsError(ValueError):
    """Base class of the errors of deathtensors."""


class FormatError(DeathTensorsError):
    """The file is malformed or hostile (the message says what and where)."""


class IntegrityError(DeathTensorsError):
    """A SHA-256 footer or a tensor digest does not match the file's bytes."""


class DecryptionError(DeathTensorsError):
    """An encrypted file or tensor could not be decrypted: a wrong key, or
    data or a header that were changed. Says where, deliberately not why."""


class NoKeyError(DecryptionError):
    """The file is encrypted and no key given is one of its recipients (the
    message lists them)."""


class SignatureError(IntegrityError):
    """A signature does not verify, or a required signature (or signer) is
    missing."""


class PolicyDeniedError(DeathTensorsError):
    """An encrypted file's Rego policy (``__policy__``) refused access for
    the ``policy_input`` given; its key was not used."""


class NotEncryptedError(DeathTensorsError):
    """Encryption was required (``require_encryption=True``) and the file is
    not encrypted."""


class NoChecksumError(DeathTensorsError):
    """A check was asked for but the file carries no checksum of that kind."""


class LockedError(DeathTensorsError, BlockingIOError):
    """A collection is open for writing elsewhere (another process, thread
    or handle): one writer at a time. The message names the lock file."""


class TensorNotFoundError(DeathTensorsError, KeyError):
    """No tensor of that name in the file."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


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
