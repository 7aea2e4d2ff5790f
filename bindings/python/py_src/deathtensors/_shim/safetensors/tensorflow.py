"""``safetensors.tensorflow``: ``deathtensors.safetensors.tensorflow`` (the same module)."""

import sys

from deathtensors.safetensors import tensorflow as _module

sys.modules[__name__] = _module
