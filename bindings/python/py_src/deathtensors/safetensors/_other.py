"""What ``safetensors.flax``, ``.tensorflow``, ``.paddle`` and ``.mlx`` share:
their tensors as the items the encoders take, and a file held in memory as
their tensors (``deathtensors._frameworks`` converts both ways); ``.numpy``
and ``.torch`` load a file held in memory here too."""

from __future__ import annotations

from typing import Any

from .. import _convert, _frameworks
from ..errors import DeathTensorsError
from . import _open, _serialize
from ._errors import SafetensorError


def items(tensors: Any, kind: str) -> list[_serialize.Item]:
    """(name, dtype code, shape, bytes) for each tensor: the tensor's own
    memory when it lies on the CPU in C order, else one copy. numpy arrays
    and other array-likes are taken too, as safetensors takes them (it
    saves ``np.asarray`` of each value)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, {kind}] but received {type(tensors)}")
    out = []
    for name, value in tensors.items():
        try:
            got = _frameworks.to_buffer(name, value)
            if got is None:
                import numpy as np

                got = _convert.to_buffer(name, np.asarray(value))
        except DeathTensorsError as e:
            raise SafetensorError(f"Error while serializing: {e}") from e
        code, shape, data = got
        out.append((name, code, _serialize.logical_shape(code, shape), data))
    return out


def load(data: Any, framework: str, device: Any = "cpu") -> dict[str, Any]:
    """Every tensor of a safetensors file held in memory, each copied once
    (into memory the framework takes as it is, or by MLX). `framework` is
    one of ``safe_open``'s frameworks, as ``_open._framework`` names it."""
    import numpy as np

    device = _open._device(device)
    view, base, _metadata, tensors = _serialize.parse(data)
    out = {}
    for name, code, shape, (start, end) in tensors:
        if framework == "mlx":
            raw = np.frombuffer(view[base + start : base + end], dtype=np.uint8)  # mx.array copies it
        else:
            raw = _open.copied(framework, view[base + start : base + end])
        out[name] = _open.from_bytes(framework, device, code, shape, raw)
    return out
