"""``safetensors.mlx``: ``deathtensors.safetensors.mlx`` (the same module)."""

import sys

from deathtensors.safetensors import mlx as _module

sys.modules[__name__] = _module
