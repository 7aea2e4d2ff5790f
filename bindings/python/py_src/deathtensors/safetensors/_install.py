"""Making ``import safetensors`` resolve to the drop-in, in one process.

:func:`install` registers ``deathtensors.safetensors`` as ``safetensors``
in ``sys.modules`` and adds an import hook that serves ``safetensors.torch``,
``.numpy``, ``.flax``, ``.tensorflow``, ``.paddle`` and ``.mlx`` (imported
when first asked for, as usual: each imports its framework). The
safetensors distribution stays installed: transformers checks its version
with ``importlib.metadata``, which still answers for it.

The shim directory :data:`SHIM_PATH` holds a package named ``safetensors``
whose ``__init__`` calls :func:`install`, so that putting that directory
first on ``PYTHONPATH`` switches a whole program without changing its code.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Optional, Sequence

# Our package, as `safetensors` is to be.
_PACKAGE = __name__.rpartition(".")[0]

#: The directory to put on ``PYTHONPATH`` to make ``import safetensors``
#: resolve to this drop-in in every process started with it.
SHIM_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_shim")

# Submodules served as `safetensors.<name>`.
_SUBMODULES = ("torch", "numpy", "flax", "tensorflow", "paddle", "mlx", "_safetensors_rust")


def _is_ours(module: Optional[ModuleType]) -> bool:
    if module is None:
        return False
    name = getattr(module, "__name__", "")
    return name == _PACKAGE or name.startswith(_PACKAGE + ".") or getattr(module, "__deathtensors_shim__", False)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``safetensors`` and ``safetensors.<framework>`` as the modules
    of this package (the same module objects, not copies)."""

    def __init__(self) -> None:
        self._specs: dict[str, Optional[importlib.machinery.ModuleSpec]] = {}

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == "safetensors" or fullname in (f"safetensors.{s}" for s in _SUBMODULES):
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(_PACKAGE + spec.name.removeprefix("safetensors"))
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system gave the module the alias's spec; give it its
        # own back, so that reloading and pickling still find it.
        own = self._specs.get(module.__name__)
        if own is not None:
            module.__spec__ = own


_HOOK = _Alias()


def install(*, replace: bool = False, durable: Optional[bool] = None) -> None:
    """Makes ``import safetensors`` (and ``safetensors.torch``, ``.numpy``,
    ``.flax``, ``.tensorflow``, ``.paddle``, ``.mlx``) give this drop-in
    from now on, in this process.

    Saves are durable by default (fsync'd, unlike safetensors'): pass
    ``durable=False`` for safetensors' behaviour (atomic, but not safe
    from a power loss), or set ``DEATHTENSORS_DURABLE=0`` in the
    environment. None leaves the setting as it is.

    Call it before anything imports safetensors. If the real package is
    already imported, this raises ``RuntimeError``, unless `replace` is true:
    then it is dropped from ``sys.modules``, but modules that already did
    ``from safetensors import ...`` keep what they got.

    ``safetensors``, its framework modules and the private
    ``safetensors._safetensors_rust`` are provided.
    """
    if durable is not None:
        from ._serialize import set_durable

        set_durable(durable)
    current = sys.modules.get("safetensors")
    if current is not None and not _is_ours(current):
        if not replace:
            raise RuntimeError(
                f"safetensors is already imported in this process (from {getattr(current, '__file__', '?')}): "
                "call deathtensors.safetensors.install() before anything imports it, put "
                "deathtensors.safetensors.SHIM_PATH on PYTHONPATH, or pass replace=True"
            )
    if replace:
        for name in [n for n in sys.modules if n == "safetensors" or n.startswith("safetensors.")]:
            if not _is_ours(sys.modules[name]):
                del sys.modules[name]
    if _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
    package = importlib.import_module(_PACKAGE)
    sys.modules["safetensors"] = package
    for sub in _SUBMODULES:
        loaded = sys.modules.get(f"{_PACKAGE}.{sub}")
        if loaded is not None:
            sys.modules[f"safetensors.{sub}"] = loaded


def uninstall() -> None:
    """Undoes :func:`install`: ``import safetensors`` finds the real
    package again (modules holding the drop-in keep it)."""
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)
    for name in [n for n in sys.modules if n == "safetensors" or n.startswith("safetensors.")]:
        if _is_ours(sys.modules[name]):
            del sys.modules[name]


def installed() -> bool:
    """Whether ``import safetensors`` currently gives this drop-in."""
    current = sys.modules.get("safetensors")
    return _is_ours(current) if current is not None else _HOOK in sys.meta_path

