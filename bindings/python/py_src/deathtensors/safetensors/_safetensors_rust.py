"""``safetensors._safetensors_rust``: the names safetensors' native module
exports, which some programs import from it directly
(``from safetensors._safetensors_rust import SafetensorError``)."""

from . import SafetensorError, TensorSpec, __version__, _safe_open_handle, deserialize, safe_open
from ._serialize import serialize, serialize_file

__all__ = [
    "SafetensorError",
    "TensorSpec",
    "__version__",
    "_safe_open_handle",
    "deserialize",
    "safe_open",
    "serialize",
    "serialize_file",
]
