"""Safe, fast, pickle-free tensor storage: a Rust core with a Python interface.

Opening a file never runs code: a fixed binary prefix, a JSON header, raw
tensor bytes. See :func:`save`, :func:`open` and :class:`DtFile`.
"""

from ._blob import TensorBlob
from ._file import DtFile, open, save, save_file, sign_file
from ._keys import KeyRing, Passphrase, fingerprint, generate_key, public_key, register_keys
from ._native import CREATED_BY, __version__
from ._sharded import ShardedFile, open_sharded, save_sharded
from .errors import (
    DecryptionError,
    DeathTensorsError,
    FormatError,
    IntegrityError,
    LockedError,
    NoChecksumError,
    NoKeyError,
    NotEncryptedError,
    SignatureError,
    TensorNotFoundError,
)

FORMAT_VERSION = 1
MAGIC = b"DTLEGION"

__all__ = [
    "save",
    "save_file",
    "open",
    "DtFile",
    "save_sharded",
    "open_sharded",
    "ShardedFile",
    "TensorBlob",
    "LockedError",
    "DeathTensorsError",
    "FormatError",
    "IntegrityError",
    "NoChecksumError",
    "TensorNotFoundError",
    "DecryptionError",
    "NoKeyError",
    "SignatureError",
    "NotEncryptedError",
    "sign_file",
    "KeyRing",
    "Passphrase",
    "generate_key",
    "public_key",
    "fingerprint",
    "register_keys",
    "FORMAT_VERSION",
    "MAGIC",
    "CREATED_BY",
    "__version__",
]
