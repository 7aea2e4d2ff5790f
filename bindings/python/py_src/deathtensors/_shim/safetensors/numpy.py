"""``safetensors.numpy``: ``deathtensors.safetensors.numpy`` (the same module)."""

import sys

from deathtensors.safetensors import numpy as _module

sys.modules[__name__] = _module
