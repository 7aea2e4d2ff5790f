"""Appendable collections of same-shaped tensors with a file-like API:
tensorblob's API on deathtensors' crash-safe storage.

A collection is a directory: a manifest (``collection.json``) and block
files, each an ordinary deathtensors v1 file (docs/FORMAT.md section 13).
Everything written since the last :meth:`TensorBlob.flush` (or ``close``)
is committed atomically by the next one; a crash at any instant leaves the
collection exactly as the last commit left it.
"""

from __future__ import annotations

import array
import io
import numbers
import operator
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional

from . import _convert, _dtypes, _native
from ._native import Collection as _Collection
from ._native import dtype_from_name
from .errors import DeathTensorsError

__all__ = ["TensorBlob"]

DEFAULT_BLOCK_SIZE = 8192



class BlobClosedError(ValueError, OSError):
    """An operation on a closed TensorBlob (an ``OSError`` as in tensorblob,
    and a ``ValueError`` as for Python's closed files)."""


class RowShapeError(DeathTensorsError, RuntimeError):
    """A tensor written to a TensorBlob is not a whole number of rows (a
    ``ValueError``, and a ``RuntimeError`` as torch's reshape raises in
    tensorblob)."""


def resolve_dtype(dtype: Any) -> str:
    """The file dtype name of a torch dtype, a numpy dtype or type, or a
    string: one of ours (``"BF16"``), torch's (``"bfloat16"``, ``"float"``)
    or numpy's (``"float32"``, ``"<f4"``)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        return _dtypes.from_torch(dtype)
    if isinstance(dtype, str):
        # Ours ("BF16") or torch's and its aliases ("bfloat16", "half"), as
        # tensorblob stores them: the core's one table of names.
        name = dtype_from_name(dtype.removeprefix("torch."))
        if name is not None:
            return name
    try:
        import numpy as np

        return _dtypes.from_numpy(np.dtype(dtype))
    except (ImportError, TypeError, DeathTensorsError):
        pass
    raise TypeError(
        f"dtype must be a torch dtype, a numpy dtype or a dtype name such as 'float32' or 'BF16', got {dtype!r}"
    )


def _torch_name(file_dtype: str) -> str:
    """The torch-style name tensorblob reports as ``.dtype``."""
    return _dtypes.TORCH_NAMES.get(file_dtype, file_dtype)


def _resolve_shape(shape: Any) -> tuple:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"shape must not have negative dimensions, got {dims}")
    return dims


def _parse_mode(mode: str) -> str:
    chars = set(mode)
    if chars - set("raw+") or len(mode) > len(chars):
        raise ValueError("Invalid mode: %s" % mode)
    if sum(c in "raw" for c in mode) != 1 or mode.count("+") > 1:
        raise ValueError("Must have exactly one of read/write/append mode and at most one plus: %s" % mode)
    return mode


def _default_framework() -> str:
    try:
        import torch  # noqa: F401

        return "torch"
    except ImportError:
        return "numpy"


class TensorBlob:
    """A growing collection of same-shaped tensors, stored in a directory,
    read and written like a file and indexed like an array.

    Open one with :meth:`TensorBlob.open`. Reads return tensors the caller
    owns: small ones are copied from the page cache; reads of 1 MiB and more
    of committed rows map the block files copy-on-write (no copy at all, and
    writes to the tensor stay in it), as loads of files do. Like every
    mapping, such a tensor must not outlive another program truncating the
    block files. ``read(copy=True)`` always copies. :meth:`view` gives
    zero-copy, read-only views of committed rows.
    """

    def __init__(self, native: _Collection, mode: str, framework: str, filename: str):
        self._c = native
        self.mode = mode
        self.filename = filename
        self.framework = framework
        self._readable = "r" in mode or "+" in mode
        self._writable = "w" in mode or "a" in mode or "+" in mode
        self._append = "a" in mode
        self._closed = False
        self._spelling: Optional[str] = None
        self._layout()
        self._pos = len(self) if self._append else 0

    def _layout(self) -> None:
        self._dtype = self._c.dtype
        self._shape = tuple(self._c.shape)
        self._block_size = self._c.block_rows
        self._row_numel = 1
        for d in self._shape:
            self._row_numel *= d

    # --- opening ---------------------------------------------------------

    @classmethod
    def open(
        cls,
        filename: "str | os.PathLike",
        mode: str = "r",
        *,
        dtype: Any = None,
        shape: Any = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        framework: Optional[str] = None,
        durable: bool = True,
        max_cached_blocks: Optional[int] = None,
    ) -> "TensorBlob":
        """Opens the collection at directory `filename`.

        Modes, as Python's ``open`` and tensorblob: ``r`` reads (the
        collection must exist), ``w`` creates or empties it, ``a`` appends
        (it must exist; writes always go to the end), and ``+`` adds reading
        or writing (``r+`` overwrites from the position, ``a+`` reads
        anywhere and appends). `dtype` (torch, numpy, or a name such as
        ``"float32"`` or ``"BF16"``) and `shape` (an int or a tuple) are
        needed only to create; opening an existing collection with ``w``
        and a different `dtype`, `shape` or `block_size` replaces it with an
        empty one of those. `framework` is what reads return: ``"torch"``
        (the default when torch is installed) or ``"numpy"``.

        `durable` (default True) makes each commit wait for the disk; it
        is the only one of :func:`deathtensors.save`'s write keywords a
        collection takes: its blocks are raw rows of one dtype and shape
        (no per-tensor metadata, checksum, compression, alignment,
        encryption or signature), committed block by block.
        tensorblob directories open read-only (``r``); convert them with
        :meth:`TensorBlob.convert`. `max_cached_blocks` is accepted for
        tensorblob's sake and ignored (open block files cost one descriptor).

        Raises ``FileNotFoundError`` for a missing collection in ``r``/``a``
        modes, ``ValueError`` for a bad mode or missing dtype/shape, and
        :class:`~deathtensors.errors.LockedError` when another writer has
        it open.
        """
        del max_cached_blocks
        mode = _parse_mode(mode)
        framework = framework or _default_framework()
        if framework not in ("torch", "pt", "numpy", "np"):
            raise ValueError(f"unknown framework {framework!r}: use 'torch' or 'numpy'")
        path = Path(filename).expanduser().resolve()
        kind = _Collection.detect(str(path))
        if "w" in mode:
            blob = cls._create(path, kind, mode, framework, dtype, shape, block_size, durable)
            blob._keep_spelling(dtype)
            return blob
        if kind is None:
            if path.is_dir():
                raise FileNotFoundError(f"not a collection: no collection.json in {str(path)!r}")
            if path.is_file():
                raise FileNotFoundError(
                    f"{str(path)!r} is {_native.describe_file(str(path))}, not a collection (a directory of blocks): open it with "
                    "deathtensors.open(); TensorBlob.open(dir, 'w') makes a collection"
                )
            raise FileNotFoundError(f"Blob not found: {str(path)!r}")
        if mode == "r":
            native = _Collection.open(str(path))
        else:
            native = _Collection.open_writable(str(path), durable)
        return cls(native, mode, framework, str(path))

    @classmethod
    def _create(cls, path, kind, mode, framework, dtype, shape, block_size, durable):
        block_size = operator.index(block_size)
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        if kind == "tensorblob":
            raise DeathTensorsError(
                f"{str(path)!r} is a tensorblob directory, which opens read-only: convert it with "
                "TensorBlob.convert(src, dst) or `deathtensors blob convert`"
            )
        if kind == "deathtensors":
            existing = _Collection.open(str(path))
            file_dtype = existing.dtype if dtype is None else resolve_dtype(dtype)
            dims = tuple(existing.shape) if shape is None else _resolve_shape(shape)
            same = (file_dtype, dims) == (existing.dtype, tuple(existing.shape))
            rows = existing.block_rows if same and block_size == DEFAULT_BLOCK_SIZE else block_size
            existing.close()
        else:
            if dtype is None or shape is None:
                raise ValueError(
                    "Arguments ``dtype`` and ``shape`` are required for new blob; got: %r and %r" % (dtype, shape)
                )
            file_dtype, dims, rows = resolve_dtype(dtype), _resolve_shape(shape), block_size
        native = _Collection.create(str(path), file_dtype, list(dims), rows, durable)
        return cls(native, mode, framework, str(path))

    @classmethod
    def convert(cls, src: "str | os.PathLike", dst: "str | os.PathLike", *, block_size: Optional[int] = None) -> int:
        """Copies the collection at `src` (ours, or a tensorblob directory)
        to a new collection at `dst` (which must not exist, or be an empty
        directory), rows in order, in one commit; returns the row count. On
        failure nothing is left at `dst`."""
        source = _Collection.open(str(Path(src).expanduser().resolve()))
        try:
            return source.convert_to(str(Path(dst).expanduser().resolve()), block_size)
        finally:
            source.close()

    # --- properties ------------------------------------------------------

    def _keep_spelling(self, dtype: Any) -> None:
        """Keeps torch's spelling of the dtype this handle was created with
        (``"half"``, ``"float"``), which :attr:`dtype` reports as tensorblob
        does."""
        if isinstance(dtype, str):
            name = dtype.removeprefix("torch.")
            if name not in _dtypes.TORCH_NAMES and dtype_from_name(name) == self._dtype:
                self._spelling = name

    @property
    def dtype(self) -> str:
        """The rows' dtype as tensorblob names it: torch's name, as given
        when this handle created the collection (``"half"``), else the
        canonical one (``"float16"``, ``"bfloat16"``); :attr:`dtype_name`
        is the file's (``"F16"``). A reopened collection reports the
        canonical name: its manifest records the dtype (``F16``), not how it
        was spelled, where tensorblob's ``.conf`` keeps the spelling; both
        name the same torch dtype (``getattr(torch, blob.dtype)``)."""
        return self._spelling or _torch_name(self._dtype)

    @property
    def dtype_name(self) -> str:
        """The rows' dtype as deathtensors files name it (``"F32"``)."""
        return self._dtype

    @property
    def shape(self) -> tuple:
        """The shape of one row."""
        return self._shape

    @property
    def block_size(self) -> int:
        """Rows per block file."""
        return self._block_size

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def path(self) -> str:
        return self.filename

    @property
    def metadata(self) -> dict:
        """The collection's string metadata (set it in a writable mode; it
        is committed with the rows)."""
        return dict(self._open()._c.metadata)

    @metadata.setter
    def metadata(self, value: dict) -> None:
        self._check_writable()
        self._c.metadata = {str(k): str(v) for k, v in value.items()}

    def __len__(self) -> int:
        return self._c.rows

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self)} rows"
        return (
            f"TensorBlob({self.filename!r}, mode={self.mode!r}, dtype={self.dtype!r}, "
            f"shape={self._shape}, block_size={self._block_size}, {state})"
        )

    # --- checks ----------------------------------------------------------

    def _open(self) -> "TensorBlob":
        if self._closed:
            raise BlobClosedError(f"I/O operation on closed blob. ({self.filename})")
        return self

    def _check_readable(self) -> None:
        self._open()
        if not self._readable:
            raise io.UnsupportedOperation(f"Blob is not open for reading (mode={self.mode!r})")

    def _check_writable(self) -> None:
        self._open()
        if not self._writable:
            raise io.UnsupportedOperation(f"Blob is not open for writing (mode={self.mode!r})")

    # --- file-like API ---------------------------------------------------

    def tell(self) -> int:
        """The current row position."""
        self._open()
        return self._pos

    def seek(self, pos: int = 0, whence: int = io.SEEK_SET) -> int:
        """Moves the position (clamped to ``0..len``, as tensorblob) and
        returns it."""
        self._open()
        pos = operator.index(pos)
        if whence == io.SEEK_SET:
            new = pos
        elif whence == io.SEEK_CUR:
            new = self._pos + pos
        elif whence == io.SEEK_END:
            new = len(self) + pos
        else:
            raise ValueError("Invalid whence: %r" % (whence,))
        self._pos = max(min(new, len(self)), 0)
        return self._pos

    def read(self, size: Optional[int] = None, *, copy: bool = False) -> Any:
        """Reads up to `size` rows from the position (all the rest when
        `size` is None or negative) and moves past them. With `copy`, the
        rows are always copied into fresh memory (never mapped)."""
        self._check_readable()
        n = len(self)
        end = n if size is None or size < 0 else min(self._pos + operator.index(size), n)
        end = max(end, self._pos)
        out = self._rows(self._pos, end - self._pos, copy=copy)
        self._pos = end
        return out

    def write(self, rows: Any) -> int:
        """Writes one row or a batch at the position (at the end in ``a``
        modes), overwriting rows before the end and appending the rest;
        returns the number of rows written. The dtype must be the
        collection's (no silent casts)."""
        self._check_writable()
        # One tensor, collected as every save collects its tensors.
        collected = _convert.collect({"rows": rows})
        dtype, shape = collected.dtype(0), collected.shape(0)
        if dtype != self._dtype:
            raise TypeError(f"Tensor dtype {_torch_name(dtype)} does not match blob dtype {self.dtype}!")
        numel = 1
        for d in shape:
            numel *= d
        if numel % self._row_numel:
            raise RowShapeError(
                f"cannot write a tensor of shape {tuple(shape)} as rows of shape {self._shape}: "
                f"{numel} elements are not a whole number of rows of {self._row_numel}"
            )
        count = numel // self._row_numel
        if self._append:
            self._pos = len(self)
        if count:
            self._c.write(self._pos, collected)
        self._pos += count
        return count

    def truncate(self, pos: Optional[int] = None) -> int:
        """Cuts the collection at `pos` (default: the position; never
        grows it), moves there and returns the new length. Committed by the
        next flush, like every change."""
        self._check_writable()
        if pos is None:
            pos = self._pos
        pos = operator.index(pos)
        if pos < 0:
            raise ValueError("Truncate position must be non-negative, got %d!" % pos)
        pos = min(pos, len(self))
        self._c.truncate(pos)
        self._pos = pos
        return pos

    def extend(self, other: Any, maintain_order: bool = True) -> None:
        """Appends all rows of `other` (a TensorBlob, or anything with
        ``len`` and slicing that gives rows). With ``maintain_order=False``
        it does what tensorblob's default does, faster: whole blocks of
        `other` are shared (hard links) or copied, and the rows of both
        partial last blocks follow; this needs equal block sizes."""
        self._check_writable()
        if isinstance(other, TensorBlob):
            if (other._dtype, other._shape) != (self._dtype, self._shape):
                raise ValueError("Blob data types and shapes must match to extend blobs!")
            if other is self:
                self._extend_chunks(self, len(self))
            elif maintain_order:
                self._c.extend_rows(other._c)
            else:
                if other._block_size != self._block_size:
                    raise ValueError("Block sizes must match to extend blobs in non-order-preserving mode!")
                self._c.extend_blocks(other._c)
        else:
            self._extend_chunks(other, len(other))
        self._pos = len(self)

    def _extend_chunks(self, other: Any, count: int) -> None:
        step = max(1, (8 << 20) // max(1, self._c.row_bytes))
        for start in range(0, count, step):
            chunk = other[start : min(start + step, count)]
            self._pos = len(self)
            self.write(chunk)

    def flush(self) -> None:
        """Commits everything written since the last commit, atomically and
        (by default) durably."""
        self._check_writable()
        self._c.flush()

    def close(self) -> None:
        """Commits (in writable modes) and releases the lock. Closing twice
        is fine. As in tensorblob, a closed blob can still be indexed,
        iterated and used as the source of ``extend`` (it reads the state
        just committed); everything else raises."""
        if self._closed:
            return
        if self._writable:
            self._c.release_writer()
        self._closed = True

    def refresh(self) -> bool:
        """Readers: shows the newest committed state (rows appended and
        committed by a writer since this blob was opened). Returns whether
        anything changed."""
        self._open()
        if self._writable:
            return False
        changed = self._c.refresh()
        if changed:
            # A writer may have re-created it ('w') with another layout.
            self._layout()
            self._pos = min(self._pos, len(self))
        return changed

    def verify(self) -> int:
        """Checks every block file and the SHA-256 of every full block;
        returns how many blocks were hashed. Raises IntegrityError or
        FormatError naming the block."""
        return self._open()._c.verify()

    def blocks(self) -> list:
        """The block files: ``(path, rows, sha256 or None, committed)``."""
        return self._open()._c.blocks()

    def __enter__(self) -> "TensorBlob":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        c = getattr(self, "_c", None)
        if c is None or getattr(self, "_closed", True) or c.closed:
            return
        if c.writable and c.has_changes:
            warnings.warn(
                f"TensorBlob {self.filename!r} was not closed: writes since the last flush() are discarded",
                ResourceWarning,
                stacklevel=2,
            )
        c.abandon()

    # --- array API -------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Rows from the position to the end, moving the position (as
        tensorblob)."""
        for i in range(self._pos, len(self)):
            self._pos += 1
            yield self[i]

    def __getitem__(self, index: Any) -> Any:
        """``blob[i]`` (one row; negative counts from the end),
        ``blob[a:b:c]`` (any step), ``blob[indices]`` (a list, tuple, numpy
        array or tensor of ints, or a boolean mask), as numpy answers them.
        Works after ``close()`` too, as in tensorblob."""
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return self._rows(start, max(0, stop - start))
            return self._gather(array.array("q", range(start, stop, step)))
        scalar = isinstance(index, numbers.Integral) or (
            getattr(index, "ndim", None) == 0 and getattr(getattr(index, "dtype", None), "kind", "") in "iub"
        )
        if scalar or not (isinstance(index, (list, tuple)) or hasattr(index, "__array__") or hasattr(index, "dim")):
            try:
                i = operator.index(index)
            except TypeError:
                raise TypeError(
                    f"Index must be int, slice, or a sequence of int, got {type(index).__name__!r}!"
                ) from None
            if i >= n or i < -n:
                raise IndexError(f"index {i} is out of bounds for a blob of {n} rows")
            return self._rows(i % n, 1, squeeze=True)
        return self._gather(self._indices(index, n))

    def _indices(self, index: Any, n: int) -> "array.array":
        import numpy as np

        if hasattr(index, "dim") and hasattr(index, "cpu"):
            index = index.cpu().numpy()
        idx = np.asarray(index)
        if idx.ndim != 1:
            if idx.ndim == 0:
                raise ValueError("Batch index must be 1-dimensional, got 0!")
            raise ValueError(f"Batch index must be 1-dimensional, got {idx.ndim}!")
        if idx.dtype == np.bool_:
            if len(idx) != n:
                raise IndexError(f"boolean index of length {len(idx)} does not match the blob's {n} rows")
            idx = np.flatnonzero(idx)
        elif idx.size == 0:
            idx = idx.astype(np.int64)
        elif idx.dtype.kind not in "iu":
            raise TypeError(f"Batch index must have an integer dtype, got elements of {idx.dtype}!")
        idx = idx.astype(np.int64, copy=False)
        if idx.size:
            bad = (idx >= n) | (idx < -n)
            if bad.any():
                raise IndexError(f"index {int(idx[bad][0])} is out of bounds for a blob of {n} rows")
            idx = np.where(idx < 0, idx + n, idx)
        return np.ascontiguousarray(idx, dtype=np.int64)

    def _rows(self, start: int, count: int, squeeze: bool = False, copy: bool = False) -> Any:
        shape = list(self._shape) if squeeze else [count, *self._shape]
        if count == 0:
            return self._empty(shape)
        return _convert.from_buffer(self.framework, "rows", self._dtype, shape, self._c.read(start, count, copy))

    def _gather(self, indices: Any) -> Any:
        count = len(indices)
        if count == 0:
            return self._empty([0, *self._shape])
        arena = self._c.gather(indices)
        return _convert.from_buffer(self.framework, "rows", self._dtype, [count, *self._shape], arena)

    def _empty(self, shape: list) -> Any:
        if self.framework in ("torch", "pt"):
            import torch

            return torch.empty(shape, dtype=_dtypes.torch_dtype(self._dtype))
        import numpy as np

        return np.empty(shape, dtype=_dtypes.numpy_dtype(self._dtype))

    def view(self, index: Any) -> Any:
        """A zero-copy, read-only view of committed rows: ``view(i)`` one
        row, ``view(slice(a, b))`` rows ``a..b`` (step 1, within one block;
        see :meth:`blocks`). It maps the block file: valid while it lives,
        even after close, and never copied. Other programs must not
        truncate or rewrite block files in place meanwhile (our writers
        never do: they copy a block before changing committed rows)."""
        self._open()
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                raise ValueError("a view needs consecutive rows (step 1)")
            count, shape = max(0, stop - start), None
        else:
            i = operator.index(index)
            if i >= n or i < -n:
                raise IndexError(f"index {i} is out of bounds for a blob of {n} rows")
            start, count, shape = i % n, 1, list(self._shape)
        if count == 0:
            return self._empty([0, *self._shape])
        region = self._c.view(start, count)
        out = _convert.view(self.framework, self._dtype, shape or [count, *self._shape], region)
        if hasattr(out, "flags"):
            out.flags.writeable = False
        return out

    # --- tensorblob's class methods ------------------------------------------

    @classmethod
    def unlink(cls, filename: "str | os.PathLike") -> bool:
        """Deletes the collection at `filename` (the manifest first, so a
        crash midway leaves no collection, then its files and the directory
        if nothing else is in it). Returns True when it is gone."""
        path = Path(filename).expanduser().resolve()
        kind = _Collection.detect(str(path))
        if kind == "tensorblob":
            warnings.warn(
                f"{str(path)!r} is a tensorblob directory: remove it with tensorblob.TensorBlob.unlink",
                UserWarning,
                stacklevel=2,
            )
            return False
        if kind != "deathtensors":
            return not path.exists()
        # io removes it as its writer, under the writer's lock.
        if _Collection.remove(str(path)):
            return True
        warnings.warn(f"Failed to unlink blob at {str(path)!r}: other files are in it", UserWarning, stacklevel=2)
        return False
