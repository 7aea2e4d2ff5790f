"""A stand-in ``safetensors`` package: with its parent directory first on
``PYTHONPATH``, ``import safetensors`` gives ``deathtensors.safetensors``.

It only installs the drop-in, which then replaces this module in
``sys.modules``: see ``deathtensors.safetensors.install``.
"""

__deathtensors_shim__ = True

from deathtensors.safetensors import install as _install  # noqa: E402

_install()
