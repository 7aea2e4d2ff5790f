"""deathtensors 0.3.0's module-level names: constants, dtype tables, path
expansion and the CLI entry point, so that programs written for 0.3.0 run
unchanged (see ``docs/MIGRATING.md``)."""

from __future__ import annotations

import builtins
import os
import sys
from typing import Any, Dict, List, Optional, Union

from . import _dtypes, _native

#: Python's ``open``, which 0.3.0 kept under this name beside its own.
builtin_open = builtins.open

#: The extension deathtensors 0.3.0 writes, and its older one.
CANONICAL_EXTENSION = ".deathtensors"
LEGACY_EXTENSION = ".dt"

#: The format's magic bytes and version, defined once in the format crate.
_MAGIC = _native.MAGIC
_FORMAT_VERSION = _native.FORMAT_VERSION


def file_magic() -> bytes:
    """The 8 magic bytes that start every deathtensors file."""
    return _MAGIC


def format_version() -> int:
    """The on-disk format version this library writes."""
    return _FORMAT_VERSION


def library_version() -> str:
    """This library's version."""
    return _native.__version__


def library_author() -> str:
    """Who makes this library."""
    return "death legion"


def supported_dtypes() -> List[str]:
    """Every dtype name of the format (a superset of 0.3.0's fifteen: the
    8-bit floats, F4 and F6 too)."""
    return _native.supported_dtypes()


def TORCH_DTYPE_MAP() -> Dict[str, Any]:  # noqa: N802 - 0.3.0's name
    """File dtype name -> torch dtype, for the dtypes this torch has (a new
    dict each call, as in 0.3.0). Needs torch."""
    torch = _dtypes._module("torch")
    out = {}
    for name, attr in _dtypes.TORCH_NAMES.items():
        dtype = getattr(torch, attr, None)
        if dtype is not None:
            out[name] = dtype
    return out


def DT_DTYPE_MAP() -> Dict[Any, str]:  # noqa: N802 - 0.3.0's name
    """torch dtype -> file dtype name: the inverse of :func:`TORCH_DTYPE_MAP`."""
    return {dtype: name for name, dtype in TORCH_DTYPE_MAP().items()}


def expand_path(path: Union[str, "os.PathLike[str]"]) -> str:
    """Expands ``~`` and ``$VARS`` and normalises ``path``, as 0.3.0 does for
    every path it is given. A URL (``s3://...``) is left as it is."""
    from . import _remote

    if _remote.is_url(path):
        return path
    return os.path.normpath(os.path.expandvars(os.path.expanduser(os.fspath(path))))


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (``python -m deathtensors``): returns its exit code.
    0.3.0's ``info``, ``list``, ``verify``, ``stats``, ``diff`` and
    ``manifest`` work, as subcommands of the same names."""
    sys.stdout.flush()
    return _native.cli_main(["deathtensors", *(sys.argv[1:] if argv is None else argv)])
