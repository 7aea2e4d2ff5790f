"""Sparse COO tensors, stored as deathtensors 0.3.0 stores them: three dense
tensors per sparse one, marked by per-tensor metadata."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from ._file import PathLike
from .errors import DeathTensorsError


def save_sparse(path: PathLike, tensors: Mapping[str, Any], **kwargs: Any) -> None:
    """Saves a dict of torch tensors, some of which may be sparse COO, with
    :func:`save` (``kwargs`` are its arguments). A sparse tensor ``name``
    becomes ``name.indices`` (I64, ``[ndim, nnz]``), ``name.values``
    (``[nnz, ...]``) and ``name.shape`` (I64, the dense shape), each with
    ``sparse_role`` and ``sparse_parent`` metadata, exactly as deathtensors
    0.3.0 writes them; :func:`get_sparse` reassembles it."""
    from ._file import save

    import torch

    expanded: Dict[str, Any] = {}
    metadata: Dict[str, Dict[str, str]] = {k: dict(v) for k, v in dict(kwargs.pop("metadata", None) or {}).items()}
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.is_sparse:
            t = t.coalesce()
            parts = {
                "indices": t.indices().to(torch.int64),
                "values": t.values(),
                "shape": torch.tensor(list(t.shape), dtype=torch.int64),
            }
            for role, part in parts.items():
                key = f"{name}.{role}"
                if key in tensors:
                    raise DeathTensorsError(f"sparse tensor {name!r} needs the name {key!r}, which is also given")
                expanded[key] = part
                metadata.setdefault(key, {}).update({"sparse_role": role, "sparse_parent": name})
        else:
            expanded[name] = t
    save(path, expanded, metadata=metadata, **kwargs)


def get_sparse(f: Any, name: str) -> Any:
    """The sparse tensor ``name`` saved by :func:`save_sparse` (from an open
    file, sharded or not), as a coalesced ``torch.sparse_coo_tensor``; any
    other tensor as :meth:`DtFile.get_tensor` gives it.

    The three parts are checked before torch sees them (ranks, dtypes, sizes,
    indices within the shape): a hostile file gets a clear error."""
    import torch

    keys = set(f.keys())
    parts = [f"{name}.indices", f"{name}.values", f"{name}.shape"]
    if not all(p in keys for p in parts):
        return f.get_tensor(name)
    indices, values, shape = (f.get_tensor(p) for p in parts)
    where = f"sparse tensor {name!r}"
    if shape.dtype != torch.int64 or shape.dim() != 1 or bool((shape < 0).any()):
        raise DeathTensorsError(f"{where}: its shape must be a 1-D I64 tensor of sizes >= 0")
    ndim = shape.numel()
    if indices.dtype != torch.int64 or indices.dim() != 2 or indices.shape[0] > ndim:
        raise DeathTensorsError(f"{where}: its indices must be an I64 tensor of shape [sparse dims <= {ndim}, nnz]")
    nnz = indices.shape[1]
    sparse_dims = indices.shape[0]
    if values.dim() < 1 or values.shape[0] != nnz or list(values.shape[1:]) != shape.tolist()[sparse_dims:]:
        raise DeathTensorsError(f"{where}: its values must have shape [nnz={nnz}, *dense dims]")
    if nnz and (bool((indices < 0).any()) or bool((indices >= shape[:sparse_dims].unsqueeze(1)).any())):
        raise DeathTensorsError(f"{where}: an index is outside its shape {shape.tolist()}")
    return torch.sparse_coo_tensor(indices, values, shape.tolist(), check_invariants=True).coalesce()


__all__ = ["save_sparse", "get_sparse"]
