"""``safetensors.tensorflow`` over the deathtensors core: saving and loading
dicts of TensorFlow tensors with safetensors 0.8.0's API.

Loaded tensors are the file's bytes themselves where they lie at a multiple
of 64 bytes (DLPack over a copy-on-write mapping; bfloat16 through
``tf.bitcast``, which shares them), else one copy into fresh aligned memory;
safetensors copies every tensor twice. Unlike safetensors, saving does not
replace the values of the dict passed in with numpy arrays. TensorFlow has
no float8 types: such tensors are an error naming the dtype.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np
import tensorflow as tf

from . import _other, _serialize
from . import numpy as numpy  # noqa: F401 -- there in safetensors too
from ._open import safe_open

__all__ = ["save", "save_file", "load", "load_file"]


def save(tensors: dict[str, tf.Tensor], metadata: Optional[dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the tensors and the text `metadata`."""
    return _serialize.encode(_other.items(tensors, "tf.Tensor"), metadata)


def save_file(
    tensors: dict[str, tf.Tensor], filename: Union[str, os.PathLike], metadata: Optional[dict[str, str]] = None
) -> None:
    """Writes the tensors and the text `metadata` to a safetensors file, atomically."""
    _serialize.write(_other.items(tensors, "tf.Tensor"), filename, metadata)


def load(data: bytes) -> dict[str, tf.Tensor]:
    """Every tensor of a safetensors file held in memory."""
    return _other.load(data, "tensorflow")


def load_file(filename: Union[str, os.PathLike], *, backend: str = "mmap") -> dict[str, tf.Tensor]:
    """Every tensor of a safetensors file."""
    with safe_open(filename, framework="tf", backend=backend) as f:
        return f.get_tensors()


def _np2tf(numpy_dict: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
    for k, v in numpy_dict.items():
        numpy_dict[k] = tf.convert_to_tensor(v)
    return numpy_dict


def _tf2np(tf_dict: dict[str, tf.Tensor]) -> dict[str, Any]:
    for k, v in tf_dict.items():
        tf_dict[k] = v.numpy()
    return tf_dict
