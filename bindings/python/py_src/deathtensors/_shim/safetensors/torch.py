"""``safetensors.torch``: ``deathtensors.safetensors.torch`` (the same module)."""

import sys

from deathtensors.safetensors import torch as _module

sys.modules[__name__] = _module
