"""Non-tensor values of a state dict as JSON, so that loading one never
unpickles anything.

A value is plain JSON when it is plain JSON (``None``, booleans, integers,
finite floats, strings, lists, objects of string keys that do not start with
``$``); anything else is an object of one tagged key:

- ``{"$float": "nan" | "inf" | "-inf"}``
- ``{"$tuple": [...]}``, ``{"$size": [ints]}`` (a ``torch.Size``)
- ``{"$dict": [[key, value], ...]}`` (other keys, or keys starting with ``$``)
- ``{"$bytes": base64}``
- ``{"$dtype": "float32"}`` (a ``torch.dtype``)
- ``{"$tensor": {"dtype": "float32", "shape": [...], "data": base64}}`` (a small
  tensor inside a value, little-endian bytes)
- ``{"$pickle": base64}``: only written with ``allow_pickle=True`` and only
  read with ``allow_pickle=True`` (unpickling runs code chosen by the file).

The decoder accepts nothing else and nests at most :data:`MAX_DEPTH` deep.
"""

import base64
import io
import math
from typing import Any, Callable, Optional

import torch

#: How deep a decoded value may nest. A state dict's values are shallow;
#: the bound keeps a hostile file from exhausting the stack.
MAX_DEPTH = 64


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` → ``"float32"``."""
    return str(dtype).rsplit(".", 1)[-1]


def dtype_from_name(name: Any, what: str) -> torch.dtype:
    """The torch dtype called ``name``, or an error saying what was read."""
    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"{what}: {name!r} is not a torch dtype")
    return dtype


def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def encode(value: Any, key: str, allow_pickle: bool = False, pickled: Optional[Callable[[], bytes]] = None) -> Any:
    """``value`` as JSON-able data. ``key`` names it in errors.

    Objects of other types are refused unless ``allow_pickle``; then
    ``pickled()`` (or ``torch.save``) gives their bytes.
    """

    def enc(v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise TypeError(f"state dict key {key!r}: the value nests deeper than {MAX_DEPTH} levels")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            if math.isfinite(v):
                return float(v)
            return {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
        if isinstance(v, torch.Size):
            return {"$size": [int(d) for d in v]}
        if isinstance(v, list):
            return [enc(x, depth + 1) for x in v]
        if isinstance(v, tuple) and type(v) is tuple:
            return {"$tuple": [enc(x, depth + 1) for x in v]}
        if isinstance(v, dict) and type(v) is dict:
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: enc(x, depth + 1) for k, x in v.items()}
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if isinstance(v, (bytes, bytearray)):
            return {"$bytes": base64.b64encode(bytes(v)).decode()}
        if isinstance(v, torch.dtype):
            return {"$dtype": dtype_name(v)}
        if type(v) is torch.Tensor and v.layout == torch.strided:
            return {
                "$tensor": {
                    "dtype": dtype_name(v.dtype),
                    "shape": [int(d) for d in v.shape],
                    "data": base64.b64encode(_tensor_bytes(v)).decode(),
                }
            }
        if allow_pickle:
            return {"$pickle": base64.b64encode(pickled() if pickled is not None and depth == 0 else _pickle(v)).decode()}
        raise TypeError(
            f"state dict key {key!r}: a {type(v).__module__}.{type(v).__qualname__} value cannot be stored "
            "without pickle (JSON values, tuples, bytes, dtypes and tensors can); pass allow_pickle=True "
            "to StorageWriter to store it pickled, which only a StorageReader(allow_pickle=True) loads"
        )

    return enc(value, 0)


def _pickle(v: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(v, buf)
    return buf.getvalue()


def decode(data: Any, key: str, allow_pickle: bool = False) -> Any:
    """The value :func:`encode` stored. Raises ``ValueError`` naming ``key``
    for anything it did not write."""

    def bad(why: str) -> ValueError:
        return ValueError(f"value of {key!r}: {why}")

    def dec(v: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise bad(f"nests deeper than {MAX_DEPTH} levels")
        if v is None or isinstance(v, (bool, str, int, float)):
            return v
        if isinstance(v, list):
            return [dec(x, depth + 1) for x in v]
        if not isinstance(v, dict):
            raise bad(f"unexpected {type(v).__name__}")
        if not any(isinstance(k, str) and k.startswith("$") for k in v):
            return {k: dec(x, depth + 1) for k, x in v.items()}
        if len(v) != 1:
            raise bad("a tagged object must have exactly one key")
        ((tag, body),) = v.items()
        if tag == "$float":
            if body not in ("nan", "inf", "-inf"):
                raise bad(f"$float {body!r}")
            return float(body)
        if tag == "$tuple":
            if not isinstance(body, list):
                raise bad("$tuple must hold a list")
            return tuple(dec(x, depth + 1) for x in body)
        if tag == "$size":
            if not isinstance(body, list) or not all(type(d) is int and d >= 0 for d in body):
                raise bad("$size must hold non-negative integers")
            return torch.Size(body)
        if tag == "$dict":
            if not isinstance(body, list) or not all(isinstance(p, list) and len(p) == 2 for p in body):
                raise bad("$dict must hold [key, value] pairs")
            out = {}
            for k, x in body:
                k = dec(k, depth + 1)
                try:
                    hash(k)
                except TypeError:
                    raise bad("a $dict key is not hashable") from None
                out[k] = dec(x, depth + 1)
            return out
        if tag == "$bytes":
            return _b64(body, bad)
        if tag == "$dtype":
            try:
                return dtype_from_name(body, f"value of {key!r}")
            except ValueError as e:
                raise bad(str(e)) from None
        if tag == "$tensor":
            return _decode_tensor(body, bad)
        if tag == "$pickle":
            if not allow_pickle:
                raise ValueError(
                    f"value of {key!r} was stored pickled (saved with allow_pickle=True); loading it runs code "
                    "the checkpoint chooses: pass allow_pickle=True to StorageReader only for a checkpoint you trust"
                )
            return torch.load(io.BytesIO(_b64(body, bad)), weights_only=False)
        raise bad(f"unknown tag {tag!r}")

    return dec(data, 0)


def _b64(body: Any, bad: Callable[[str], ValueError]) -> bytes:
    if not isinstance(body, str):
        raise bad("base64 data must be a string")
    try:
        return base64.b64decode(body, validate=True)
    except ValueError:
        raise bad("invalid base64") from None


def _decode_tensor(body: Any, bad: Callable[[str], ValueError]) -> torch.Tensor:
    if not isinstance(body, dict) or set(body) != {"dtype", "shape", "data"}:
        raise bad("$tensor must hold dtype, shape and data")
    try:
        dtype = dtype_from_name(body["dtype"], "$tensor")
    except ValueError as e:
        raise bad(str(e)) from None
    shape = body["shape"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad("$tensor shape must be non-negative integers")
    data = _b64(body["data"], bad)
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(data) != numel * itemsize:
        raise bad(f"$tensor holds {len(data)} bytes, its shape and dtype need {numel * itemsize}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)
