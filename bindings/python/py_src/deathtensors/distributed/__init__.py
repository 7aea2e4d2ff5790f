"""deathtensors as the storage of ``torch.distributed.checkpoint`` (DCP).

    import torch.distributed.checkpoint as dcp
    from deathtensors.distributed import StorageWriter, StorageReader, consolidate

    dcp.save(state_dict, storage_writer=StorageWriter("ckpt/step-1000"))
    dcp.load(state_dict, storage_reader=StorageReader("ckpt/step-1000"))
    consolidate("ckpt/step-1000", "model.safetensors")

Every rank writes its own file (deathtensors v1 with per-tensor SHA-256, or
safetensors); the coordinator commits the checkpoint by writing its JSON
metadata (``deathtensors.json``) last, atomically. Nothing is ever
unpickled unless a caller passes ``allow_pickle=True``. See
``docs/DISTRIBUTED.md``.
"""

from ._consolidate import consolidate
from ._storage import StorageReader, StorageWriter

__all__ = ["StorageWriter", "StorageReader", "consolidate"]
