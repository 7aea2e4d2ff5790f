"""``safetensors.torch`` over the deathtensors core: saving and loading
dicts of torch tensors and whole models, with safetensors 0.8.0's API,
checks and messages.

Differences that are deliberate: files are written atomically and fsync'd;
loaded tensors are copies the caller owns rather than copy-on-write views of
the file; ``load`` and ``load_file`` know every dtype ``safe_open`` knows;
``_find_shared_tensors`` groups overlapping tensors transitively.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any, Optional, Union

import torch

from .. import _convert, _dtypes
from . import _other, _serialize
from ._open import safe_open
from ._serialize import TensorSpec, deserialize, serialize, serialize_file  # noqa: F401 -- there in safetensors too

__all__ = ["save", "save_file", "load", "load_file", "save_model", "load_model"]

# File dtype code -> torch dtype, for the codes this torch version has and
# safetensors knows (all of Rust's table but complex128), named by the table.
_TYPES: dict[str, torch.dtype] = {
    code: getattr(torch, row["torch"])
    for code, row in _dtypes.TABLE.items()
    if row["torch"] and code != "C128" and hasattr(torch, row["torch"])
}

# Bytes per element of the dtypes torch has (those of this torch version).
_SIZE: dict[torch.dtype, int] = {d: d.itemsize for d in _TYPES.values()}


def _getdtype(dtype_str: str) -> torch.dtype:
    return _TYPES[dtype_str]


def storage_ptr(tensor: torch.Tensor) -> int:
    """The address of the start of the tensor's storage (0 if it has none)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:
        return 0  # meta tensors and other storage-less tensors


def storage_size(tensor: torch.Tensor) -> int:
    """The size of the tensor's storage in bytes."""
    try:
        return tensor.untyped_storage().nbytes()
    except Exception:
        return tensor.nelement() * tensor.element_size()


def _end_ptr(tensor: torch.Tensor) -> int:
    """The address one past the tensor's last byte."""
    if not tensor.nelement():
        return tensor.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr() + (last + 1) * tensor.element_size()


def _is_complete(tensor: torch.Tensor) -> bool:
    """Whether the tensor covers its whole storage, exactly."""
    return (
        tensor.data_ptr() == storage_ptr(tensor)
        and tensor.nelement() * tensor.element_size() == storage_size(tensor)
    )


def _filter_shared_not_shared(tensors: list[set[str]], state_dict: dict[str, torch.Tensor]) -> list[set[str]]:
    """Splits each group of names sharing a storage into groups whose bytes
    overlap (transitively); disjoint views of one storage are not shared."""
    out: list[set[str]] = []
    for names in tensors:
        if len(names) < 2:
            out.append(names)
            continue
        spans = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in names)
        group: set[str] = set()
        end = 0
        for start, stop, name in spans:
            if group and start < end:
                group.add(name)
                end = max(end, stop)
            else:
                group = {name}
                out.append(group)
                end = stop
    return out


def _find_shared_tensors(state_dict: dict[str, torch.Tensor]) -> list[set[str]]:
    """Groups of names whose tensors share memory, in first-seen order;
    tensors without memory (meta, empty storage) are left out."""
    groups: dict[tuple[Any, int, int], set[str]] = {}
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta":
            continue
        ptr, size = storage_ptr(tensor), storage_size(tensor)
        if ptr and size:
            groups.setdefault((tensor.device, ptr, size), set()).add(name)
    # safetensors sorts these sets by inclusion; they are disjoint, so that
    # keeps the first-seen order.
    return _filter_shared_not_shared(list(groups.values()), state_dict)


def _remove_duplicate_names(
    state_dict: dict[str, torch.Tensor],
    *,
    preferred_names: Optional[list[str]] = None,
    discard_names: Optional[list[str]] = None,
) -> dict[str, list[str]]:
    """For each group of shared tensors, the name to keep (one covering the
    whole storage: a preferred one, else one not to discard, else the first
    in sorted order) mapped to the names to drop."""
    preferred = set(preferred_names or ())
    discard = set(discard_names or ())
    to_remove: dict[str, list[str]] = defaultdict(list)
    for shared in _find_shared_tensors(state_dict):
        complete = {name for name in shared if _is_complete(state_dict[name])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {shared}. None is covering the entire storage.Refusing to save/load the model"
                " since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue."
            )
        candidates = (preferred & complete) or (complete - discard) or complete
        keep = min(candidates)
        for name in sorted(shared):
            if name != keep:
                to_remove[keep].append(name)  # a lone tensor gets no (empty) entry
    return to_remove


def _check_for_save(tensors: Any) -> None:
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    sparse = []
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"Key `{name}` is invalid, expected torch.Tensor but received {type(value)}")
        if value.layout != torch.strided:
            sparse.append(name)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed."
        )
    failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if failing:
        raise RuntimeError(
            f"""
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {failing}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """
        )


def _items(tensors: dict[str, torch.Tensor]) -> list[_serialize.Item]:
    """(name, dtype code, shape, bytes) for each tensor; the byte buffers
    share the tensors' memory (CPU tensors) or a CPU copy."""
    _check_for_save(tensors)
    items = []
    for name, tensor in tensors.items():
        if not tensor.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It either means you"
                " are trying to save tensors which are reference of each other in which case it's recommended to save"
                " only the full tensors, and reslice at load time, or simply call `.contiguous()` on your tensor to"
                " pack it before saving."
            )
        code = _serialize.dtype_code(str(tensor.dtype).removeprefix("torch."))
        shape = _serialize.logical_shape(code, tensor.shape)
        tensor = tensor.detach()
        if tensor.device.type != "cpu":
            # torch's own error for a meta tensor, as safetensors raises it.
            tensor = tensor.to("cpu")
        # The values the caller sees (conjugate and negative bits resolved):
        # deathtensors' one conversion.
        tensor = _convert.torch_resolved(name, tensor)
        data: Any = tensor.reshape(-1).view(torch.uint8).numpy() if tensor.nelement() else b""
        items.append((name, code, shape, data))
    return items


def save(tensors: dict[str, torch.Tensor], metadata: Optional[dict[str, str]] = None) -> bytes:
    """The bytes of a safetensors file holding `tensors` (contiguous, dense,
    not sharing memory) and the text `metadata`."""
    return _serialize.encode(_items(tensors), metadata)


def save_file(
    tensors: dict[str, torch.Tensor],
    filename: Union[str, os.PathLike],
    metadata: Optional[dict[str, str]] = None,
) -> None:
    """Writes `tensors` (contiguous, dense, not sharing memory) and the text
    `metadata` to a safetensors file, atomically."""
    _serialize.write(_items(tensors), filename, metadata)


def load_file(
    filename: Union[str, os.PathLike],
    device: Union[str, int] = "cpu",
    *,
    backend: str = "mmap",
    storage_options: Optional[dict] = None,
) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file (or URL: see ``safe_open``), on `device`."""
    with safe_open(filename, framework="pt", device=device, backend=backend, storage_options=storage_options) as f:
        return f.get_tensors()


def load(data: bytes) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file held in memory, on the CPU."""
    return _other.load(data, "pytorch")


def save_model(
    model: torch.nn.Module,
    filename: str,
    metadata: Optional[dict[str, str]] = None,
    force_contiguous: bool = True,
) -> None:
    """Saves a model's state dict, keeping one name of each group of shared
    tensors; the dropped names are recorded in the metadata as
    ``{dropped: kept}`` (unless the metadata already has them)."""
    state_dict = model.state_dict()
    metadata = dict(metadata) if metadata is not None else None
    for kept, removed in _remove_duplicate_names(state_dict).items():
        for name in removed:
            if metadata is None:
                metadata = {}
            metadata.setdefault(name, kept)
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata)
    except ValueError as e:
        raise ValueError(
            f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential caveats."
        ) from e


def load_model(
    model: torch.nn.Module,
    filename: Union[str, os.PathLike],
    strict: bool = True,
    device: Union[str, int] = "cpu",
    *,
    backend: str = "mmap",
) -> tuple[list[str], list[str]]:
    """Loads a file saved by :func:`save_model` into `model`, restoring
    shared tensors. Returns ``(missing, unexpected)`` names; with `strict`,
    either being non-empty is a ``RuntimeError``."""
    state_dict = load_file(filename, device=device, backend=backend)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=list(state_dict))
    missing_keys, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing_keys)
    for removed in to_removes.values():
        for name in removed:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected

