"""``safetensors.flax``: ``deathtensors.safetensors.flax`` (the same module)."""

import sys

from deathtensors.safetensors import flax as _module

sys.modules[__name__] = _module
