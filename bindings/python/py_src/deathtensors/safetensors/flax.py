"""``safetensors.flax`` over the deathtensors core: saving and loading dicts
of JAX arrays with safetensors 0.8.0's API.

Loaded arrays are the file's bytes themselves where they lie at a multiple
of 64 bytes (``jax.device_put`` of a copy-on-write mapping; on the CPU),
else one copy into fresh aligned memory; safetensors copies every array
twice. 64-bit dtypes follow ``jax_enable_x64`` as ``jnp.array`` does.
Unlike safetensors, saving does not replace the values of the dict passed
in with numpy arrays.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import jax.numpy as jnp  # noqa: F401 -- as safetensors.flax, fails to import without jax
import numpy as np
from jax import Array

from . import _other, _serialize
from . import numpy as numpy  # noqa: F401 -- there in safetensors too
from ._open import safe_open

__all__ = ["save", "save_file", "load", "load_file"]


def save(tensors: dict[str, Array], metadata: Optional[dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the arrays and the text `metadata`."""
    return _serialize.encode(_other.items(tensors, "Array"), metadata)


def save_file(
    tensors: dict[str, Array], filename: Union[str, os.PathLike], metadata: Optional[dict[str, str]] = None
) -> None:
    """Writes the arrays and the text `metadata` to a safetensors file, atomically."""
    _serialize.write(_other.items(tensors, "Array"), filename, metadata)


def load(data: bytes) -> dict[str, Array]:
    """Every array of a safetensors file held in memory."""
    return _other.load(data, "flax")


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap") -> dict[str, Array]:
    """Every array of a safetensors file."""
    with safe_open(filename, framework="flax", backend=backend) as f:
        return f.get_tensors()


def _np2jnp(numpy_dict: dict[str, np.ndarray]) -> dict[str, Array]:
    for k, v in numpy_dict.items():
        numpy_dict[k] = jnp.array(v)
    return numpy_dict


def _jnp2np(jnp_dict: dict[str, Array]) -> dict[str, Any]:
    for k, v in jnp_dict.items():
        jnp_dict[k] = np.asarray(v)
    return jnp_dict
