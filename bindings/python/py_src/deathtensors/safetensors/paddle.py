"""``safetensors.paddle`` over the deathtensors core: saving and loading
dicts of Paddle tensors with safetensors 0.8.0's API.

Loaded tensors are the file's bytes themselves, at any address, as
safetensors.paddle's are: ``load_file`` maps the data once, copy-on-write,
and makes every tensor over its bytes with ``core.frombuffer`` and
``view_shape`` (``deathtensors._frameworks.paddle_tensors``); writes stay in
the process, and the tensors outlive the file. Tensors not aligned for
their dtype, and files whose tensors are checked as they are read (signed,
compressed, encrypted), are read into fresh memory. Then they are moved to
`device`. Saving reads each tensor's own memory, as safetensors does, but
also takes non-contiguous tensors (copied once). Paddle has no uint16,
uint32, uint64, F8_E8M0 or FNUZ types: such tensors are an error naming
the dtype.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Union

import numpy as np
import paddle

from .. import _dtypes
from . import _other, _serialize
from . import numpy as numpy  # noqa: F401 -- there in safetensors too
from ._open import safe_open
from ._serialize import TensorSpec, deserialize, serialize, serialize_file  # noqa: F401 -- there in safetensors too

__all__ = ["save", "save_file", "load", "load_file"]

# safetensors.paddle's own module attribute, entry for entry and in its
# order (programs written for safetensors may read it): the peer's choice of
# codes, each the Paddle dtype the format's dtype table names (as
# safetensors.torch's _TYPES).
_TYPES: dict[str, Any] = {
    code: getattr(paddle, _dtypes.TABLE[code]["paddle"])
    for code in ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2")
}


def _getdtype(dtype_str: str) -> Any:
    return _TYPES[dtype_str]


def save(tensors: dict[str, paddle.Tensor], metadata: Optional[dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding the tensors and the text `metadata`."""
    return _serialize.encode(_other.items(_checked(tensors), "paddle.Tensor"), metadata)


def save_file(
    tensors: dict[str, paddle.Tensor],
    filename: Union[str, os.PathLike],
    metadata: Optional[dict[str, str]] = None,
) -> None:
    """Writes the tensors and the text `metadata` to a safetensors file, atomically."""
    _serialize.write(_other.items(_checked(tensors), "paddle.Tensor"), filename, metadata)


def load(data: bytes, device: str = "cpu") -> dict[str, paddle.Tensor]:
    """Every tensor of a safetensors file held in memory, on `device`."""
    return _other.load(data, "paddle", device)


def load_file(
    filename: Union[str, os.PathLike], device: Any = "cpu", *, backend: str = "mmap"
) -> dict[str, paddle.Tensor]:
    """Every tensor of a safetensors file, on `device`."""
    with safe_open(filename, framework="paddle", device=device, backend=backend) as f:
        return f.get_tensors()


def _checked(tensors: Any) -> Any:
    """safetensors.paddle's checks: a dict of paddle tensors."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, paddle.Tensor] but received {type(tensors)}")
    for k, v in tensors.items():
        if not isinstance(v, paddle.Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected paddle.Tensor but received {type(v)}")
    return tensors


def _np2paddle(numpy_dict: dict[str, np.ndarray], device: str = "cpu") -> dict[str, paddle.Tensor]:
    for k, v in numpy_dict.items():
        numpy_dict[k] = paddle.to_tensor(v, place=device)
    return numpy_dict


def _paddle2np(paddle_dict: dict[str, paddle.Tensor]) -> dict[str, Any]:
    for k, v in paddle_dict.items():
        paddle_dict[k] = v.detach().cpu().numpy()
    return paddle_dict
