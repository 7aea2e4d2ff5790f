"""``safetensors._safetensors_rust``: ``deathtensors.safetensors._safetensors_rust`` (the same module)."""

import sys

from deathtensors.safetensors import _safetensors_rust as _module

sys.modules[__name__] = _module
