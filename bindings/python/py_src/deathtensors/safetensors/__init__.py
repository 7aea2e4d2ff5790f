"""A drop-in for the ``safetensors`` package (its 0.8.0 Python API), backed
by the deathtensors Rust core.

``deathtensors.safetensors`` and its modules ``torch``, ``numpy``,
``flax``, ``tensorflow``, ``paddle`` and ``mlx`` provide what callers of safetensors
(transformers, diffusers, accelerate, vLLM, huggingface_hub) use:
:class:`safe_open`, ``save_file``/``load_file``/``save``/``load``,
``save_model``/``load_model``, :class:`TensorSpec`, :func:`serialize`,
:func:`serialize_file`, :func:`deserialize` and :class:`SafetensorError`,
with the same bytes on disk and the same exception types. Error messages
say more than safetensors' (which tensor, which byte), so their wording
differs. Files are checked more strictly than safetensors checks them, as
docs/FORMAT.md section 7 lists: names must be non-empty, at most 4,096
bytes and free of control characters; duplicate keys, unknown fields in a
tensor entry and a header not starting with ``{`` are refused.

To make existing code use it without changing it, either call
:func:`install` before anything imports safetensors, or start the program
with :data:`SHIM_PATH` on ``PYTHONPATH``::

    PYTHONPATH=$(python -c "import deathtensors.safetensors as s; print(s.SHIM_PATH)") python train.py

Limits: tensors are read on the CPU and then
moved to the device; ``install`` cannot reach modules that imported the
real package before it ran; little-endian hosts only.
"""

from ._errors import SafetensorError
from ._install import SHIM_PATH, install, installed, uninstall
from ._open import PySafeSlice, _safe_open_handle, safe_open
from ._serialize import DURABLE_ENV, TensorSpec, deserialize, durable, serialize, serialize_file

#: The safetensors API version this package implements. The distribution
#: named ``safetensors`` (what ``importlib.metadata`` reports) stays the real one.
__version__ = "0.8.0"

__all__ = [
    "SafetensorError",
    "TensorSpec",
    "safe_open",
    "serialize",
    "serialize_file",
    "deserialize",
    "install",
    "uninstall",
    "installed",
    "SHIM_PATH",
    "__version__",
]

# Last: it imports from this package. safetensors has it as an attribute once imported.
from . import _safetensors_rust  # noqa: E402,F401
