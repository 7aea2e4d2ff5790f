"""Safe, fast, pickle-free tensor storage: a Rust core with a Python interface.

Opening a file never runs code: a fixed binary prefix, a JSON header, raw
tensor bytes. See :func:`save`, :func:`open` and :class:`DtFile`.
"""

from ._append import append, append_file
from ._blob import TensorBlob
from ._diff import diff
from ._file import DtFile, load_file, open, save, save_file, sign_file
from ._formats import from_safetensors, to_safetensors
from ._keys import KeyRing, Passphrase, fingerprint, generate_key, public_key, register_keys
from ._legacy import (
    CANONICAL_EXTENSION,
    DT_DTYPE_MAP,
    LEGACY_EXTENSION,
    TORCH_DTYPE_MAP,
    builtin_open,
    expand_path,
    file_magic,
    format_version,
    library_author,
    library_version,
    main,
    supported_dtypes,
)
from ._manifest import read_manifest, write_manifest
from ._model_sign import SignedModel, open_signed_model, sign_model, verify_model
from ._native import CREATED_BY, FORMAT_VERSION, MAGIC, __version__
from ._schema import Schema
from ._sharded import ShardedFile, ShardedReader, open_sharded, save_sharded
from ._sparse import get_sparse, save_sparse
from .errors import *  # noqa: F403 - the exception classes, as errors.__all__ names them

__author__ = library_author()

__all__ = [
    "save",
    "save_file",
    "load_file",
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
    "PolicyDeniedError",
    "sign_file",
    "sign_model",
    "open_signed_model",
    "SignedModel",
    "verify_model",
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
    "__author__",
]

# deathtensors 0.3.0's names, listed apart: they stay importable from here (and
# in ``__all__``) so that 0.3.0 programs keep working; docs/MIGRATING.md gives
# each one's way today.
__all__ += [
    "append",
    "append_file",
    "diff",
    "from_safetensors",
    "to_safetensors",
    "save_sparse",
    "get_sparse",
    "Schema",
    "write_manifest",
    "read_manifest",
    "supported_dtypes",
    "expand_path",
    "ShardedReader",
    "CANONICAL_EXTENSION",
    "LEGACY_EXTENSION",
    "file_magic",
    "format_version",
    "library_version",
    "library_author",
    "TORCH_DTYPE_MAP",
    "DT_DTYPE_MAP",
    "main",
]
