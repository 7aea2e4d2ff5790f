"""``safe_open``: safetensors 0.8.0's lazy reader, over ``deathtensors._native.Reader``.

The header is parsed and validated by the deathtensors core. Every tensor
returned is writable and the caller's: writes never reach the file, and it
stays valid after the file is closed, replaced or deleted. With the ``mmap``
backend (the default) a tensor is a copy-on-write view of the mapped file,
as safetensors' torch tensors are: loading copies nothing, and the kernel
copies a page when it is first written (small tensors, under 1 MiB, are
copied when read one at a time; on Windows, where a mapped file can be
neither replaced nor deleted, every tensor is copied). Unlike safetensors,
two calls for the same tensor never share memory. Like any mapping, it sees another
program truncating or rewriting the file in place (a truncation raises
SIGBUS on access). With ``pread``, every tensor is a fresh copy (read with
the GIL released). Slices copy only the bytes they select.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Optional, Union

from .. import _dtypes, _frameworks, _keys, _native, _remote
from .._convert import MAP_BY_DEFAULT, MAP_MIN, gc_paused
from ..errors import DeathTensorsError, TensorNotFoundError
from . import _slicing
from ._errors import SafetensorError

if sys.byteorder != "little":  # pragma: no cover
    # Files are little-endian and tensors are handed over as they lie.
    raise ImportError("deathtensors.safetensors supports little-endian hosts only")

# safe_open's framework names, and the framework each one means.
_FRAMEWORKS = {
    "pt": "pytorch",
    "torch": "pytorch",
    "pytorch": "pytorch",
    "np": "numpy",
    "numpy": "numpy",
    "tf": "tensorflow",
    "tensorflow": "tensorflow",
    "jax": "flax",
    "flax": "flax",
    "mlx": "mlx",
    "paddle": "paddle",
}

# safe_open's frameworks that deathtensors._frameworks converts to.
_OTHERS = {"flax": "jax", "tensorflow": "tensorflow", "paddle": "paddle", "mlx": "mlx"}

# Those that take memory they did not allocate, 64-byte aligned only
# (Paddle takes any).
_ALIGNED = ("flax", "tensorflow")

# Device kinds that take an index ("cuda" means "cuda:0").
_INDEXED_DEVICES = ("cuda", "musa", "npu", "xpu", "xla", "mlu", "hpu")


def _framework(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"argument 'framework': '{type(name).__name__}' object cannot be converted to 'PyString'")
    framework = _FRAMEWORKS.get(name)
    if framework is None:
        raise SafetensorError(f"framework {name} is invalid")
    return framework


def _device(device: Any) -> Union[str, int]:
    """"cpu", "mps", "<kind>:<index>", or an int (the default accelerator's
    index, torch's choice)."""
    if device is None:
        return "cpu"
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    if not isinstance(device, str) and type(device).__name__ == "device":
        device = str(device)  # a torch.device
    if not isinstance(device, str):
        raise SafetensorError(f"device {device!r} is invalid")
    if device in ("cpu", "mps"):
        return device
    if device in _INDEXED_DEVICES:
        return f"{device}:0"
    kind, _, index = device.partition(":")
    if index.isdigit() and kind == "mps":
        if int(index) != 0:
            raise SafetensorError(f"device {device} is invalid: only mps or mps:0 is supported")
        return "mps"
    if index.isdigit() and kind in _INDEXED_DEVICES:
        return f"{kind}:{int(index)}"
    raise SafetensorError(f"device {device} is invalid")


def _backend(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"argument 'backend': '{type(name).__name__}' object cannot be converted to 'PyString'")
    if name not in ("mmap", "pread"):
        raise SafetensorError(f'backend {json.dumps(name)} is invalid (expected one of: "mmap", "pread")')
    return name


def open_reader(
    path: str, mmap: bool, storage_options: Optional[Mapping[str, Any]] = None, keys: Any = None
) -> Any:
    """Opens a file (or a URL: ``s3://``, ``http(s)://``, ...) with the
    deathtensors core, with safetensors' errors. ``keys`` (a KeyRing)
    default to those registered with deathtensors.register_keys (or in the
    environment): they open cryptotensors files, as cryptotensors'
    compatibility package does."""
    try:
        options = _native.ReadOptions(
            keys=_keys.default_keys() if keys is None else keys, storage_options=storage_options
        )
        return _native.Reader(path, options, mmap=mmap)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such file or directory: {path}") from None
    except DeathTensorsError as e:
        raise SafetensorError(f"Error while deserializing header: {e}") from e


# get_tensors reads with this many threads at most, for files of at least
# _PARALLEL_BYTES (below that, starting threads costs more than it saves).
_READ_THREADS = 4
_PARALLEL_BYTES = 64 << 20

# dtype code -> torch / numpy dtype, filled as they are asked for.
_TORCH_DTYPES: dict[str, Any] = {}
_NUMPY_DTYPES: dict[str, Any] = {}


def torch_dtype(code: str) -> Any:
    return _cached_dtype(_TORCH_DTYPES, _dtypes.torch_dtype, code)


def numpy_dtype(code: str) -> Any:
    return _cached_dtype(_NUMPY_DTYPES, _dtypes.numpy_dtype, code)


def _cached_dtype(cache: dict[str, Any], make: Callable[[str], Any], code: str) -> Any:
    """The dtype of `code` in `cache`, made by `make` (``_dtypes``' function
    of the framework) the first time; a code it cannot make is a
    :class:`SafetensorError`."""
    dtype = cache.get(code)
    if dtype is None:
        try:
            dtype = cache[code] = make(code)
        except DeathTensorsError:
            raise SafetensorError(f"Dtype not understood: {code}") from None
    return dtype


def torch_shape(code: str, shape: list[int]) -> list[int]:
    """A header shape as torch counts it: F4 (float4_e2m1fn_x2) holds two
    values an element."""
    if code != "F4" or not shape:
        return list(shape)
    if shape[-1] % 2:
        raise SafetensorError(
            f"f4_x2 dtype requires that the last dim be divisible by 2 in torch: got {list(shape)}"
        )
    return [*shape[:-1], shape[-1] // 2]


def empty_bytes(framework: str, nbytes: int) -> tuple[Any, Any]:
    """Fresh memory for a tensor's bytes: a 1-D uint8 tensor of the
    framework (torch's own memory, for torch) and a numpy view of it."""
    import numpy as np

    if framework == "pytorch":
        import torch

        t = torch.empty(nbytes, dtype=torch.uint8)
        return t, t.numpy()
    if framework in _ALIGNED:
        a = _frameworks.aligned_empty(nbytes)  # so that the framework takes it as it is
        return a, a
    a = np.empty(nbytes, dtype=np.uint8)
    return a, a


def from_bytes(framework: str, device: Union[str, int], code: str, shape: list[int], raw: Any) -> Any:
    """A tensor of `framework` taking over `raw`, the first half of what
    :func:`empty_bytes` gave, filled with the tensor's bytes, on `device`.
    Only a shape the framework cannot make is a :class:`SafetensorError`;
    moving to a device raises what the framework raises (CUDA out of
    memory, no CUDA), as safetensors lets it through."""
    try:
        tensor = _from_bytes(framework, code, shape, raw)
    except SafetensorError:
        raise
    except DeathTensorsError as e:  # a dtype the framework lacks
        raise SafetensorError(str(e)) from e
    except (ValueError, TypeError, RuntimeError, OverflowError) as e:
        # A shape the file may hold but the framework cannot (a zero among
        # dimensions that multiply past 2^63, say).
        raise SafetensorError(f"a {code} tensor of shape {list(shape)} cannot be made a {framework} tensor: {e}") from e
    if framework == "pytorch":
        return tensor if device == "cpu" else tensor.to(device)
    if framework == "paddle" and device != "cpu":
        paddle = importlib.import_module("paddle")
        place = f"gpu:{device.split(':')[1]}" if isinstance(device, str) and device.startswith("cuda:") else device
        return paddle.to_tensor(tensor, place=place)
    return tensor


def _from_bytes(framework: str, code: str, shape: list[int], raw: Any) -> Any:
    """The tensor on the CPU, over `raw` where the framework can take it
    (deathtensors._frameworks says which), else copied once."""
    if framework == "pytorch":
        import torch

        dtype, dims = torch_dtype(code), torch_shape(code, shape)
        return raw.view(dtype).reshape(dims) if raw.numel() else torch.empty(dims, dtype=dtype)
    if framework == "numpy":
        return raw.view(numpy_dtype(code)).reshape(shape)
    return _frameworks.tensor(_OTHERS[framework], code, shape, raw)


def copied(framework: str, data: Any) -> Any:
    """A copy of `data` (any numpy uint8 array or byte buffer) in fresh
    memory from :func:`empty_bytes`."""
    import numpy as np

    source = np.asarray(memoryview(data)) if not isinstance(data, np.ndarray) else data
    raw, view = empty_bytes(framework, source.size)
    np.copyto(view.reshape(source.shape), source)  # one strided copy
    return raw


def _read(reader: Any, name: str, nbytes: int, framework: str) -> Any:
    """The tensor's bytes in fresh memory, read with the GIL released. A
    failed read (a tag or digest that does not verify, say) is a
    :class:`SafetensorError`, the deathtensors error its ``__cause__``."""
    raw, view = empty_bytes(framework, nbytes)
    if nbytes:
        try:
            reader.read_into(name, view)
        except DeathTensorsError as e:
            raise SafetensorError(f"Error while reading tensor {name}: {e}") from e
    return raw


def _bounding_box(np_index: tuple, shape: list[int]) -> tuple[list[tuple[int, int]], tuple]:
    """The region, ``(start, length)`` in each dimension, that holds every
    element `np_index` (ints and slices with a positive step, from
    `_slicing.plan`) selects of a tensor of `shape`, and the index that
    selects them from that region."""
    region, local = [], []
    for i, dim in enumerate(shape):
        ix = np_index[i] if i < len(np_index) else slice(None)
        if isinstance(ix, int):
            region.append((ix, 1))
            local.append(0)
        else:
            start, stop, step = ix.indices(dim)
            length = max(0, stop - start)
            region.append((start, length))
            local.append(slice(0, length, step))
    return region, tuple(local)


def maps_bytes(reader: Any) -> bool:
    """Whether the tensors' bytes can be viewed in a mapping of the file
    (the native ``Reader.maps_tensors`` decides: not when they must be
    decompressed, decrypted, checked as they are read, or fetched)."""
    return reader.maps_tensors()


class PySafeSlice:
    """A tensor not read yet: its dtype and shape, and indexing that reads
    only the selected part (``f.get_slice("w")[:, 4:8]``)."""

    def __init__(self, owner: safe_open, reader: Any, name: str, code: str, shape: list[int]) -> None:
        self._reader = reader  # keeps the file open after safe_open exits
        self._name = name
        self._code = code
        self._shape = shape
        self._framework = owner._framework
        self._device = owner._device
        self._mapped = owner._backend == "mmap" and maps_bytes(reader)

    def get_shape(self) -> list[int]:
        """The tensor's shape, as the header records it."""
        return list(self._shape)

    def get_dtype(self) -> str:
        """The tensor's dtype code (``"F32"``, ``"BF16"``, ...)."""
        return self._code

    def __repr__(self) -> str:
        return f"PySafeSlice(name={self._name!r}, dtype={self._code!r}, shape={self._shape})"

    def __getitem__(self, index: Any) -> Any:
        import numpy as np

        shape = self._shape
        packed = self._code == "F4"
        if self._framework == "pytorch" and not packed:
            return self._torch_item(index)
        indexers = _slicing.parse(index, shape)
        np_index, newshape = _slicing.plan(indexers, shape, packed)
        if packed:
            itemsize, byte_shape = 1, torch_shape(self._code, shape)
        else:
            itemsize = _dtypes.ITEMSIZE.get(self._code)
            if itemsize is None:
                raise SafetensorError(f"Dtype not understood: {self._code}")
            byte_shape = list(shape)
        nbytes = self._reader.nbytes(self._name)
        if self._mapped and nbytes:
            # A read-only view of the mapping; only the selection is copied.
            source = np.frombuffer(self._reader.region(self._name), dtype=np.uint8)
            selected = source.reshape([*byte_shape, itemsize])[np_index]
        elif nbytes and not packed and self._reads_regions():
            # Not mapped (pread, a URL): only the selection's bounding box
            # is read (io's read_region_into), then stepped through.
            region, local = _bounding_box(np_index, byte_shape)
            box = np.empty([length for _, length in region] + [itemsize], dtype=np.uint8)
            if box.size:
                try:
                    self._reader.read_region_into(self._name, region, box)
                except DeathTensorsError as e:
                    raise SafetensorError(f"Error while reading tensor {self._name}: {e}") from e
            selected = box[local]
        else:
            source = _read(self._reader, self._name, nbytes, "numpy")
            selected = source.reshape([*byte_shape, itemsize])[np_index]
        raw = copied(self._framework, selected)
        return from_bytes(self._framework, self._device, self._code, newshape, raw)


    def _reads_regions(self) -> bool:
        """Whether a region read gives the same guarantees as a whole read:
        the tensor has no digest to check (a region is not hashed whole),
        and is stored plainly (not encrypted, not compressed)."""
        return (
            self._reader.info(self._name).sha256 is None
            and not self._reader.is_encrypted()
            and self._reader.compression() is None
        )

    def _torch_item(self, index: Any) -> Any:
        """``framework="pt"``: safetensors 0.8.0 indexes a torch view of the
        tensor, so torch's rules and errors apply (bounds clamp, lists, None
        and masks select, a bad index is an ``IndexError``); so here, on a
        view of the mapping (or of the tensor read), of which only the
        selection is copied."""
        import torch

        dtype = torch_dtype(self._code)
        nbytes = self._reader.nbytes(self._name)
        if not nbytes:
            whole = torch.empty(self._shape, dtype=dtype)
        elif self._mapped:
            with warnings.catch_warnings():
                # The mapping is read-only; the view is only read, never
                # handed out: the selection below is a copy.
                warnings.simplefilter("ignore", UserWarning)
                raw = torch.frombuffer(self._reader.region(self._name), dtype=torch.uint8)
            whole = raw.view(dtype).reshape(self._shape)
        else:
            whole = _read(self._reader, self._name, nbytes, "pytorch").view(dtype).reshape(self._shape)
        selected = whole[index].clone(memory_format=torch.contiguous_format)
        return selected if self._device == "cpu" else selected.to(self._device)


class safe_open:
    """Opens a safetensors file lazily and returns tensors as asked.

    Args:
        filename: the file to open (a deathtensors file works too).
        framework: ``"pt"`` (torch), ``"np"`` (numpy), ``"flax"``/``"jax"``,
            ``"tf"``/``"tensorflow"``, ``"paddle"`` or ``"mlx"``: JAX and
            TensorFlow tensors are the loaded bytes themselves where 64-byte
            aligned, else one copy; Paddle tensors are, at any address; MLX
            copies once.
        device: where tensors go (``"cpu"``, ``"cuda:0"``, ``0``, ...);
            only ``"cpu"`` for frameworks other than torch and paddle.
        backend: ``"mmap"`` (the default) maps the file; ``"pread"`` reads
            each tensor with positioned reads instead.
        storage_options: for a URL (``s3://``, ``gs://``, ``az://``,
            ``http(s)://``; a deathtensors extension), the store's settings,
            as :func:`deathtensors.open` takes them. A URL is read with
            ranged requests (as ``"pread"``), never mapped.
    """

    def __init__(
        self,
        filename: Union[str, "os.PathLike[str]"],
        framework: str,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self._reader: Optional[Any] = None
        self._framework = _framework(framework)
        self._device = _device(device)
        self._backend = _backend(backend)
        path = os.fsdecode(os.fspath(filename))
        if self._device != "cpu" and self._framework not in ("pytorch", "paddle"):
            raise SafetensorError(f"Device {self._device} is not supported for framework {self._framework}")
        # As safetensors, fail at open when the framework is missing.
        importlib.import_module({"pytorch": "torch", "paddle": "paddle"}.get(self._framework, "numpy"))
        if _remote.is_url(path):
            self._backend = "pread"
        self._reader = open_reader(
            path, mmap=self._backend == "mmap", storage_options=storage_options, keys=self._open_keys()
        )
        self._path = path
        self._keys: Optional[list[str]] = None
        # Whether tensors are copy-on-write mappings rather than copies.
        self._mapping_ok = MAP_BY_DEFAULT and self._backend == "mmap" and maps_bytes(self._reader)

    def _open_keys(self) -> Any:
        """The keys to open the file with: None, the registered ones."""
        return None

    def __repr__(self) -> str:
        path = getattr(self, "_path", None)
        state = "closed" if self._reader is None else f"framework={self._framework!r}, device={self._device!r}"
        return f"<safe_open {path!r} ({state})>"

    def _open(self) -> Any:
        reader = self._reader
        if reader is None:
            raise SafetensorError("File is closed")
        return reader

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, _exc_type: Any, _exc_value: Any, _traceback: Any) -> None:
        # Dropped, not closed: slices taken from this file keep working, and
        # the mapping goes when the last of them does.
        self._reader = None

    def metadata(self) -> Optional[dict[str, str]]:
        """The header's ``__metadata__``, or None when it has none (without
        the crypto fields of a cryptotensors file, as cryptotensors hides them)."""
        return self._open().metadata()

    def keys(self) -> list[str]:
        """The tensors' names, sorted."""
        reader = self._open()
        if self._keys is None:
            self._keys = sorted(reader.keys())
        return list(self._keys)

    def offset_keys(self) -> list[str]:
        """The tensors' names, in the order of their bytes in the file."""
        return self._open().offset_keys()

    def _lookup(self, name: str) -> tuple[Any, str, list[int]]:
        reader = self._open()
        try:
            return reader, reader.dtype(name), reader.shape(name)
        except TensorNotFoundError:
            raise SafetensorError(f"File does not contain tensor {name}") from None

    def _mapped(self, reader: Any, name: str, nbytes: int, blob: Any = None) -> Any:
        """The tensor's bytes as a 1-D uint8 copy-on-write view: of `blob`
        (the data blob's mapping) when given, else of a mapping of its own
        for a large tensor. None when they must be read instead (``pread``
        backend, compressed file, bytes not aligned for their dtype, small
        tensor, no bytes, or out of mappings)."""
        if not self._mapping_ok:
            return None
        info = reader.info(name)
        start = info.data_offsets[0]
        if not (info.aligned and nbytes):
            return None
        if blob is None:
            if nbytes < MAP_MIN:
                return None
            try:
                blob, start = reader.map_tensor(name), 0
            except OSError:
                return None
        if self._framework == "pytorch":
            import torch

            return torch.frombuffer(blob, dtype=torch.uint8, count=nbytes, offset=start)
        import numpy as np

        return np.frombuffer(blob, dtype=np.uint8, count=nbytes, offset=start)

    def get_tensor(self, name: str, _blob: Any = None) -> Any:
        """The tensor `name`, the caller's (see the module's doc), on the
        device asked for."""
        reader, code, shape = self._lookup(name)
        nbytes = reader.nbytes(name)
        raw = self._mapped(reader, name, nbytes, _blob)
        if raw is not None and self._framework in _ALIGNED and raw.ctypes.data % _frameworks.ALIGN:
            # The framework takes only aligned memory: the one copy is a
            # read into fresh aligned memory (without the GIL), not a
            # second one in the framework.
            raw = None
        if raw is None:
            raw = _read(reader, name, nbytes, self._framework)
        return from_bytes(self._framework, self._device, code, shape, raw)

    def get_tensors(self) -> dict[str, Any]:
        """Every tensor, by name, in file order. Mapped (the default), they
        are views of one copy-on-write mapping of the data, and nothing is
        copied. Otherwise large files are read by a few threads at once: the
        copies run without the GIL, and filling fresh memory is bound by
        page faults, which parallelise."""
        with gc_paused():  # tens of thousands of tensors are made
            return self._get_tensors()

    def _get_tensors(self) -> dict[str, Any]:
        names = self.offset_keys()
        reader = self._open()
        if not names:
            from .._file import refuse_hidden_tensors

            refuse_hidden_tensors(reader, self._path)
        if self._mapping_ok:
            try:
                blob = reader.map_all()
            except OSError:
                blob = None  # cannot map (out of address space, say): read instead
            if blob is not None and self._framework == "paddle" and self._device == "cpu":
                return self._paddle_tensors(reader, names, blob)
            if blob is not None and self._framework not in _ALIGNED:
                return {name: self.get_tensor(name, blob) for name in names}
        else:
            blob = None
        # Tensors read (JAX, TensorFlow and Paddle tensors not aligned in
        # the mapping among them): by a few threads at once for a large file.
        workers = min(_READ_THREADS, os.cpu_count() or 1, len(names))
        if workers < 2 or sum(reader.nbytes(n) for n in names) < _PARALLEL_BYTES:
            return {name: self.get_tensor(name, blob) for name in names}
        with ThreadPoolExecutor(workers, thread_name_prefix="deathtensors-read") as pool:
            return dict(zip(names, pool.map(lambda name: self.get_tensor(name, blob), names)))

    def _paddle_tensors(self, reader: Any, names: list[str], blob: Any) -> dict[str, Any]:
        """Every tensor, in the order of `names`, over `blob` (the data
        blob's copy-on-write mapping): Paddle tensors made in bulk
        (``deathtensors._frameworks.paddle_tensors``), a few microseconds
        each, where one at a time through :meth:`get_tensor` costs tens."""
        rows = {row[0]: row for row in reader.layout(False)}
        out: dict[str, Any] = {}
        try:
            return _frameworks.paddle_tensors([rows[name] for name in names], blob, out)
        except DeathTensorsError as e:  # a dtype Paddle lacks
            raise SafetensorError(str(e)) from e
        except (ValueError, TypeError, RuntimeError, OverflowError) as e:
            # The first tensor not made is the one that failed.
            name = next(n for n in names if n not in out)
            code, shape = rows[name][1], rows[name][2]
            raise SafetensorError(f"a {code} tensor of shape {list(shape)} cannot be made a paddle tensor: {e}") from e

    def get_slice(self, name: str) -> PySafeSlice:
        """The tensor `name` as a :class:`PySafeSlice`, to index before reading."""
        reader, code, shape = self._lookup(name)
        return PySafeSlice(self, reader, name, code, shape)


class _safe_open_handle(safe_open):
    """:class:`safe_open` for an open Python file object (one with
    ``fileno()`` and ``name``, as local fsspec files have): opens its path."""

    def __init__(self, f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap") -> None:
        f.fileno  # noqa: B018 -- like safetensors, only real files qualify
        super().__init__(f.name, framework, device, backend=backend)

