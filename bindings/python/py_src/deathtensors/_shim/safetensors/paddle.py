"""``safetensors.paddle``: ``deathtensors.safetensors.paddle`` (the same module)."""

import sys

from deathtensors.safetensors import paddle as _module

sys.modules[__name__] = _module
