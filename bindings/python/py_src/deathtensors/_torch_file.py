"""``dt.open`` of a ``torch.save`` pickle checkpoint (``pytorch_model.bin``,
``.pt``, ``.pth``, ``.ckpt``): read by the native core's own pickle machine,
which never imports or calls anything (``docs/PICKLE.md``). No torch is
needed to read one: ``get_tensor(..., framework="numpy")`` works without it.
"""

from typing import Any, Dict, Iterator, List, Tuple

from . import _convert, _native
from .errors import TensorNotFoundError


class TorchFile:
    """A torch pickle checkpoint, open: its tensors listed without reading
    their data; ``get_tensor`` reads that tensor's storage only (its CRC-32
    checked), copied out with its own offset and strides. Non-tensor values
    (epochs, learning rates, strings) are the ``metadata()``, flattened
    with dots as the tensor names are (``optimizer.param_groups.0.lr``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._ckpt = _native.TorchCheckpoint(path)

    def __repr__(self) -> str:
        return f"TorchFile({self.path!r}, {len(self)} tensors, pickle protocol {self._ckpt.protocol})"

    def __enter__(self) -> "TorchFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release beyond what the garbage collector does: kept
        for ``DtFile``'s interface."""

    def keys(self) -> List[str]:
        """The tensor names, in the checkpoint's order."""
        return self._ckpt.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._ckpt.info(name) is not None

    def metadata(self) -> Dict[str, str]:
        """The checkpoint's plain values as text, by flattened name."""
        return dict(self._ckpt.metadata())

    def other_values(self) -> List[Tuple[str, str]]:
        """Values that are neither tensors nor plain (bytes, sets), listed:
        ``(name, what it is)``."""
        return [tuple(o) for o in self._ckpt.others()]  # type: ignore[misc]

    def info(self, name: str) -> Tuple[str, List[int]]:
        """``(dtype, shape)`` of tensor ``name``, dtype as the header names it (``F32``)."""
        found = self._ckpt.info(name)
        if found is None:
            raise TensorNotFoundError(f"{self.path}: no tensor named {name!r}")
        return found

    def get_tensor(self, name: str, framework: str = "torch") -> Any:
        """Tensor ``name`` as a tensor of ``framework`` that the caller owns."""
        dtype, shape = self.info(name)
        return _convert.from_buffer(framework, name, dtype, shape, self._ckpt.read(name))

    def get_bytes(self, name: str) -> bytes:
        """Tensor ``name``'s bytes, row-major and little-endian: no framework
        needed (neither torch nor numpy)."""
        self.info(name)
        return bytes(self._ckpt.read(name))

    def get_tensors(self, framework: str = "torch") -> Dict[str, Any]:
        """Every tensor, by name."""
        return {name: self.get_tensor(name, framework) for name in self.keys()}


def scan(path: Any) -> Dict[str, Any]:
    """What the pickle at ``path`` refers to and would call, without
    running it (``deathtensors scan``): ``plain`` (a plain tensor
    checkpoint), ``verdict``, ``protocol``, ``names`` (``(name, offset,
    allowed)``) and ``calls`` (``(name, offset)``)."""
    from ._legacy import expand_path

    return _native.scan_pickle(expand_path(path))
