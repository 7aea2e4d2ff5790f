"""Indexing a tensor slice (``get_slice(name)[...]``) with safetensors
0.8.0's rules and error messages for every framework but torch (with
``"pt"``, safetensors indexes a torch view, and so does ``PySafeSlice``),
and for F4 tensors.

An index is ints, slices (positive steps), ``...`` and tuples of those, or
an empty list. Out-of-range stops are errors, not clamped as numpy would, so
that a wrong shard size is reported rather than silently shortened.
Negative ints count from the end. Negative slice bounds, which safetensors
rejects with an ``OverflowError``, count from the end too.
"""

from __future__ import annotations

import operator
from typing import Any, Optional, Union

from ._errors import SafetensorError

# One indexer per indexed dimension: an int selects (and drops the
# dimension); a Narrow keeps [start, stop) by step, None meaning "to the edge".
Narrow = tuple[Optional[int], Optional[int], int]
Indexer = Union[int, Narrow]


def _int(value: Any) -> Optional[int]:
    try:
        return operator.index(value)
    except TypeError:
        return None


def _resolve(value: int, dim_index: int, dim: int) -> int:
    if value >= 0:
        return value
    if dim + value < 0:
        raise SafetensorError(f"Invalid index {value} for dimension {dim_index} of size {dim}")
    return dim + value


def parse(index: Any, shape: list[int]) -> list[Indexer]:
    """The indexers of a Python index, negative positions resolved."""
    if isinstance(index, tuple):
        items = list(index)
    elif isinstance(index, list):
        if index:
            raise SafetensorError("Non empty lists are not implemented")
        return [(0, 0, 1)]  # an empty selection of the first dimension
    else:
        items = [index]
    ellipses = sum(1 for item in items if item is Ellipsis)
    if ellipses > 1:
        raise SafetensorError("Only one ellipsis (...) is allowed in slice index")
    expansion = max(0, len(shape) - (len(items) - ellipses))
    out: list[Indexer] = []
    for item in items:
        at = len(out)
        dim = shape[at] if at < len(shape) else 0
        if item is Ellipsis:
            out.extend([(None, None, 1)] * expansion)
        elif isinstance(item, slice):
            step = 1 if item.step is None else operator.index(item.step)
            if step <= 0:
                raise SafetensorError(f"Slice step must be a positive integer, got {step}")
            start = None if item.start is None else _resolve(operator.index(item.start), at, dim)
            stop = None if item.stop is None else _resolve(operator.index(item.stop), at, dim)
            out.append((start, stop, step))
        else:
            value = _int(item)
            if value is None:
                raise SafetensorError(
                    f"Unsupported slice index at position {at}: expected slice, int, or ellipsis"
                )
            out.append(_resolve(value, at, dim))
    return out


def describe(indexers: list[Indexer]) -> str:
    """The index as safetensors prints it in errors: ``[2:, 20]``."""
    parts = []
    for ix in indexers:
        if isinstance(ix, int):
            parts.append(str(ix))
        else:
            start, stop, step = ix
            text = f"{'' if start is None else start}:{'' if stop is None else stop}"
            parts.append(text if step == 1 else f"{text}:{step}")
    return "[" + ", ".join(parts) + "]"


MISALIGNED = (
    "The slice is slicing for subbytes dtypes, and the slice does not end up at a byte boundary, this is invalid."
)


def plan(indexers: list[Indexer], shape: list[int], packed: bool) -> tuple[tuple[Any, ...], list[int]]:
    """Checks `indexers` against `shape` and returns the numpy index to apply
    to the tensor's bytes (viewed with the shape plus a trailing axis of
    element bytes) and the shape of the result.

    `packed` is for F4, two values a byte: the last dimension of the byte
    view is then half the tensor's, and slicing it must stay on whole bytes.
    """

    def fail(message: str) -> SafetensorError:
        return SafetensorError(f"Error during slicing {describe(indexers)} with shape {list(shape)}: {message}")

    if len(indexers) > len(shape):
        raise fail("more slicing indexes than dimensions in tensor")
    bounds = []
    for i, ix in enumerate(indexers):
        if isinstance(ix, int):
            bounds.append((ix, ix + 1, 1))
        else:
            start, stop, step = ix
            bounds.append((0 if start is None else start, shape[i] if stop is None else stop, step))
    # Checked innermost first, so the dimension reported is safetensors' one.
    for i in reversed(range(len(bounds))):
        start, stop, _ = bounds[i]
        if start >= shape[i] or stop > shape[i]:
            asked = start if start >= shape[i] else max(stop - 1, 0)
            raise fail(f"index {asked} out of bounds for tensor dimension #{i} of size {shape[i]}")
    index: list[Any] = []
    newshape: list[int] = []
    for i, (ix, (start, stop, step)) in enumerate(zip(indexers, bounds)):
        if packed and i == len(shape) - 1:
            whole = start == 0 and stop == shape[i] and step == 1
            if not whole and (isinstance(ix, int) or step != 1 or start % 2 or stop % 2):
                raise fail(MISALIGNED)
            start, stop = start // 2, stop // 2
        if isinstance(ix, int):
            index.append(start)
        else:
            index.append(slice(start, stop, step))
            newshape.append(max(0, -(-(bounds[i][1] - bounds[i][0]) // step)))
    newshape.extend(shape[len(indexers) :])
    return tuple(index), newshape
