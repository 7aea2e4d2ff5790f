//! `deathtensors._native.collect`: Python tensors as specs and borrowed
//! bytes for the writers, which take a dict of tensors in one call.
//!
//! numpy arrays (through the buffer protocol) and CPU torch tensors (through
//! a few attributes) in C order, without a conjugate or negative bit, are
//! taken here, without a Python call per tensor: saving 20,000 small
//! tensors spent most of its time turning each into a buffer in Python.
//! Which torch tensors are taken as they are is decided here alone
//! ([`from_torch`]); `_convert.torch_resolved` turns any other into one or
//! names the refusal. Other values (other frameworks, byte orders, tuples,
//! buffers) go through `_convert.to_buffer`.

use std::ffi::CStr;

use deathtensors_io::format::{Dtype, Metadata, TensorSpec, DTYPE_NAMES};
use deathtensors_io::{Strided, TensorBytes};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString, PyTuple};

use crate::buffer::Buffer;
use crate::errors::IntoPy;

/// Where a tensor's bytes are, and what keeps them alive.
enum Source {
    Buffer(Buffer),
    /// A torch tensor's memory: `len` bytes at `ptr`, owned by the tensor.
    Raw {
        ptr: *const u8,
        len: usize,
        _owner: Py<PyAny>,
    },
    /// A view of rows of a torch tensor's memory (a column tile, a slice of
    /// columns): `count` runs of `run` bytes, `stride` bytes apart, from
    /// `ptr`, owned by the tensor.
    Strided {
        ptr: *const u8,
        run: usize,
        stride: usize,
        count: usize,
        _owner: Py<PyAny>,
    },
}

/// Where a tensor's bytes are, as addresses that cross into a thread
/// without the GIL (`Tensors` keeps what they point to alive).
#[derive(Clone, Copy)]
pub(crate) enum Place {
    Contiguous { ptr: usize, len: usize },
    Strided { ptr: usize, run: usize, stride: usize, count: usize },
}

impl Place {
    /// The bytes as the io writers take them.
    ///
    /// # Safety
    /// The memory must be valid (and unmodified) for `'a`, as `Tensors`
    /// keeps it while it lives.
    unsafe fn bytes<'a>(self) -> TensorBytes<'a> {
        match self {
            Place::Contiguous { len: 0, .. } => TensorBytes::Contiguous(&[]),
            // SAFETY: as the caller promises.
            Place::Contiguous { ptr, len } => {
                TensorBytes::Contiguous(unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
            }
            Place::Strided { ptr, run, stride, count } => {
                // `row_runs` checked that the span fits; were it not so, no
                // bytes, which the writer refuses as the wrong length.
                let Some(span) = Strided::span_len(run, stride, count).filter(|&n| n > 0) else {
                    return TensorBytes::Contiguous(&[]);
                };
                // SAFETY: as the caller promises; the runs lie in the
                // tensor's memory (`row_runs` derived them from its strides).
                let span = unsafe { std::slice::from_raw_parts(ptr as *const u8, span) };
                Strided::new(span, run, stride, count).map_or(TensorBytes::Contiguous(&[]), TensorBytes::Strided)
            }
        }
    }
}

impl Source {
    fn place(&self) -> Place {
        match self {
            Source::Buffer(b) => {
                let (ptr, len) = b.bytes();
                Place::Contiguous { ptr: ptr as usize, len }
            }
            Source::Raw { ptr, len, .. } => Place::Contiguous { ptr: *ptr as usize, len: *len },
            Source::Strided { ptr, run, stride, count, .. } => {
                Place::Strided { ptr: *ptr as usize, run: *run, stride: *stride, count: *count }
            }
        }
    }
}

/// The dtype of a buffer's struct-module format (`"f"`, `"<q"`, `"Zd"`):
/// the one table, for Python too (`_native.struct_dtype`).
#[pyfunction]
#[pyo3(name = "struct_dtype")]
pub fn struct_dtype_name(format: &str) -> Option<&'static str> {
    let format = format.trim_start_matches(['@', '=', '<']);
    struct_dtype_of(format.as_bytes()).map(Dtype::name)
}

/// The dtype of a buffer's struct-module format.
fn struct_dtype(format: &CStr) -> Option<Dtype> {
    struct_dtype_of(format.to_bytes())
}

fn struct_dtype_of(format: &[u8]) -> Option<Dtype> {
    Some(match format {
        b"?" => Dtype::BOOL,
        b"B" | b"c" => Dtype::U8,
        b"b" => Dtype::I8,
        b"h" => Dtype::I16,
        b"H" => Dtype::U16,
        b"e" => Dtype::F16,
        b"i" => Dtype::I32,
        b"I" => Dtype::U32,
        b"f" => Dtype::F32,
        b"d" => Dtype::F64,
        b"q" | b"l" => Dtype::I64,
        b"Q" | b"L" => Dtype::U64,
        b"Zf" => Dtype::C64,
        b"Zd" => Dtype::C128,
        _ => return None,
    })
}

/// Tensors ready to write: their specs, and their bytes borrowed from the
/// Python objects, kept alive (and exported) until this is dropped.
#[pyclass(name = "Tensors", module = "deathtensors._native", unsendable)]
pub struct Tensors {
    specs: Vec<TensorSpec>,
    sources: Vec<Source>,
}

impl std::fmt::Debug for Tensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tensors").field("len", &self.specs.len()).finish_non_exhaustive()
    }
}

#[pymethods]
impl Tensors {
    fn __len__(&self) -> usize {
        self.specs.len()
    }

    /// The file dtype of tensor `index` (`"F32"`).
    fn dtype(&self, index: usize) -> PyResult<&'static str> {
        Ok(self.spec(index)?.dtype.name())
    }

    /// The shape of tensor `index`, as the file counts it.
    fn shape(&self, index: usize) -> PyResult<Vec<u64>> {
        Ok(self.spec(index)?.shape.clone())
    }
}

impl Tensors {
    fn spec(&self, index: usize) -> PyResult<&TensorSpec> {
        self.specs.get(index).ok_or_else(|| {
            pyo3::exceptions::PyIndexError::new_err(format!("no tensor {index} of {}", self.specs.len()))
        })
    }

    pub(crate) fn with_capacity(n: usize) -> Tensors {
        Tensors { specs: Vec::with_capacity(n), sources: Vec::with_capacity(n) }
    }

    /// Adds a tensor given as a dtype name, a shape and a C-contiguous buffer.
    pub(crate) fn push_buffer(
        &mut self,
        name: String,
        dtype: &str,
        shape: Vec<u64>,
        obj: &Bound<'_, PyAny>,
        metadata: Option<Metadata>,
    ) -> PyResult<()> {
        let dtype = Dtype::from_name(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("tensor {name:?}: unknown dtype {dtype:?}")))?;
        let Some(buf) = Buffer::get(obj) else {
            let kind = obj.get_type().name().map_or_else(|_| "object".to_string(), |n| n.to_string());
            return Err(PyTypeError::new_err(format!("tensor {name:?}: a {kind} has no buffer of bytes")));
        };
        if !buf.is_c_contiguous() {
            return Err(PyValueError::new_err(format!("tensor {name:?}: buffer is not C-contiguous")));
        }
        let mut spec = TensorSpec::new(name, dtype, shape);
        spec.metadata = metadata.unwrap_or_default();
        self.specs.push(spec);
        self.sources.push(Source::Buffer(buf));
        Ok(())
    }

    /// The specs and bytes, for a write with the GIL released: the slices
    /// stay valid while `self` lives.
    pub(crate) fn take(&mut self) -> (Vec<TensorSpec>, Vec<Place>) {
        let places = self.sources.iter().map(Source::place).collect();
        (std::mem::take(&mut self.specs), places)
    }
}

/// A numpy array in C order with a little-endian dtype of ours.
fn from_numpy(obj: &Bound<'_, PyAny>) -> Option<(Dtype, Vec<u64>, Buffer)> {
    let buf = Buffer::get(obj)?;
    if !buf.is_c_contiguous() {
        return None;
    }
    let dtype = struct_dtype(buf.format()?)?;
    if buf.itemsize()? as u64 != dtype.bits() / 8 {
        return None;
    }
    Some((dtype, buf.shape(), buf))
}

/// torch's types a save looks up once: `torch.Tensor`, `torch.strided`,
/// and each torch dtype of the format's table this torch has, to its file
/// dtype.
struct Torch<'py> {
    tensor: Bound<'py, PyAny>,
    strided: Bound<'py, PyAny>,
    dtypes: Bound<'py, PyDict>,
}

impl<'py> Torch<'py> {
    /// torch's types, when torch is imported (a value can only be a torch
    /// tensor then).
    fn imported(py: Python<'py>, modules: &Bound<'py, PyAny>) -> PyResult<Option<Torch<'py>>> {
        let Some(torch) = imported(modules, "torch") else {
            return Ok(None);
        };
        let dtypes = PyDict::new(py);
        for row in DTYPE_NAMES {
            // A torch older than the table lacks its newest dtypes.
            if let Some(dtype) = row.torch.and_then(|name| torch.getattr(name).ok()) {
                dtypes.set_item(dtype, row.dtype.name())?;
            }
        }
        Ok(Some(Torch { tensor: torch.getattr("Tensor")?, strided: torch.getattr("strided")?, dtypes }))
    }
}

/// A module of `sys.modules`, if imported (one set to None there must not
/// be imported).
fn imported<'py>(modules: &Bound<'py, PyAny>, name: &str) -> Option<Bound<'py, PyAny>> {
    modules.get_item(name).ok().filter(|m| !m.is_none())
}

/// A torch tensor taken as it is: strided, on the CPU, not nested, of a
/// dtype of ours, its memory holding the values the caller sees (no
/// conjugate or negative bit), and contiguous or rows of a larger tensor.
/// This is the one place that decides it; `_convert.torch_resolved` makes
/// any other tensor one (or says why it cannot be saved).
fn from_torch(t: &Bound<'_, PyAny>, torch: &Torch<'_>) -> PyResult<Option<(Dtype, Vec<u64>, Source)>> {
    let py = t.py();
    // Nested tensors are strided too, and have no `shape`.
    if !t.getattr(intern!(py, "layout"))?.is(&torch.strided)
        || !t.getattr(intern!(py, "is_cpu"))?.is_truthy()?
        || t.getattr(intern!(py, "is_nested"))?.is_truthy()?
    {
        return Ok(None);
    }
    let Some(name) = torch.dtypes.get_item(t.getattr(intern!(py, "dtype"))?)? else {
        return Ok(None);
    };
    let Some(dtype) = Dtype::from_name(name.downcast::<PyString>()?.to_str()?) else {
        return Ok(None);
    };
    // Lazy views (a conjugate or negative bit) are not their memory.
    if t.call_method0(intern!(py, "is_neg"))?.is_truthy()?
        || (matches!(dtype, Dtype::C64 | Dtype::C128) && t.call_method0(intern!(py, "is_conj"))?.is_truthy()?)
    {
        return Ok(None);
    }
    let mut shape: Vec<u64> = t.getattr(intern!(py, "shape"))?.extract()?;
    let len: usize = t.getattr(intern!(py, "nbytes"))?.extract()?;
    let ptr: usize = if len == 0 { 0 } else { t.call_method0(intern!(py, "data_ptr"))?.extract()? };
    let owner = t.clone().unbind();
    let contiguous = t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()?;
    if dtype == Dtype::F4 {
        // float4_e2m1fn_x2 holds two values an element: the file counts
        // values. Its views of rows are left to the conversion.
        if !contiguous {
            return Ok(None);
        }
        match shape.last_mut() {
            Some(last) => *last = last.checked_mul(2).ok_or_else(|| PyValueError::new_err("F4 shape overflows"))?,
            None => shape.push(2),
        }
    }
    if contiguous {
        return Ok(Some((dtype, shape, Source::Raw { ptr: ptr as *const u8, len, _owner: owner })));
    }
    // Rows of a larger tensor (each row contiguous, rows at a stride): the
    // writer takes them where they are. Other layouts are converted.
    let strides: Vec<i64> = t.call_method0(intern!(py, "stride"))?.extract()?;
    let item = (dtype.bits() / 8) as usize;
    match row_runs(&shape, &strides, item) {
        Some((run, stride, count)) => {
            Ok(Some((dtype, shape, Source::Strided { ptr: ptr as *const u8, run, stride, count, _owner: owner })))
        }
        None => Ok(None),
    }
}

/// `(run, stride, count)` in bytes of a tensor of `shape` and element
/// `strides` whose rows (all dimensions but the first) are each contiguous
/// and do not overlap: `count` rows of `run` bytes, `stride` bytes apart.
/// `None` for any other layout.
fn row_runs(shape: &[u64], strides: &[i64], item: usize) -> Option<(usize, usize, usize)> {
    let (&rows, rest) = shape.split_first()?;
    if strides.len() != shape.len() || item == 0 {
        return None;
    }
    // The strides a contiguous row would have (dimensions of size one may
    // have any stride).
    let mut expected: u64 = 1;
    for (d, &n) in rest.iter().enumerate().rev() {
        if n != 1 && u64::try_from(strides[d + 1]).ok()? != expected {
            return None;
        }
        expected = expected.checked_mul(n)?;
    }
    let run = usize::try_from(expected).ok()?.checked_mul(item)?;
    let stride = usize::try_from(strides[0]).ok()?.checked_mul(item)?;
    let count = usize::try_from(rows).ok()?;
    // Refuses overlapping rows and spans that overflow.
    Strided::span_len(run, stride, count).map(|_| (run, stride, count))
}

/// Collects a dict of name to tensor (`tensors`), with per-tensor metadata
/// from `metadata` (a dict of name to validated string dict), for the
/// writers. numpy arrays and torch tensors are taken here (torch tensors
/// that cannot be taken as they are through `convert.torch_resolved`
/// first); every other value through `convert.to_buffer`, the one
/// conversion of odd values, which returns `(dtype, shape, buffer)` or
/// raises. `convert` is the caller's (`deathtensors._convert`, which
/// calls this): the native module never imports the package.
#[pyfunction]
#[pyo3(signature = (tensors, metadata = None, convert = None))]
pub fn collect(
    py: Python<'_>,
    tensors: &Bound<'_, PyDict>,
    metadata: Option<&Bound<'_, PyDict>>,
    convert: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensors> {
    let modules = py.import("sys")?.getattr("modules")?;
    let ndarray = imported(&modules, "numpy").map(|m| m.getattr("ndarray")).transpose()?;
    let torch = Torch::imported(py, &modules)?;
    let convert = |name: &str, value: &Bound<'_, PyAny>| {
        convert.ok_or_else(|| {
            let kind = value.get_type().name().map_or_else(|_| "?".to_string(), |n| n.to_string());
            pyo3::exceptions::PyTypeError::new_err(format!(
                "tensor {name:?}: a {kind} needs converting first (deathtensors._convert.collect does it)"
            ))
        })
    };
    let mut out = Tensors::with_capacity(tensors.len());
    for (key, value) in tensors.iter() {
        let Ok(name) = key.downcast::<PyString>() else {
            return Err(crate::errors::error(py, format!("tensor names must be str, got {}", key.repr()?)));
        };
        let meta: Option<Metadata> = match metadata {
            Some(m) => m.get_item(name)?.map(|m| m.extract()).transpose()?,
            None => None,
        };
        let taken = if ndarray.as_ref().is_some_and(|t| value.is_instance(t).unwrap_or(false)) {
            from_numpy(&value).map(|(d, s, b)| (d, s, Source::Buffer(b)))
        } else if let Some(torch) = torch.as_ref().filter(|t| value.is_instance(&t.tensor).unwrap_or(false)) {
            match from_torch(&value, torch)? {
                Some(taken) => Some(taken),
                None => {
                    let resolved =
                        convert(name.to_str()?, &value)?.call_method1(intern!(py, "torch_resolved"), (name, &value))?;
                    let taken = from_torch(&resolved, torch)?;
                    Some(taken.ok_or_else(|| torch_refusal(name, &resolved))?)
                }
            }
        } else {
            None
        };
        let name = name.to_str()?.to_string();
        match taken {
            Some((dtype, shape, source)) => {
                let mut spec = TensorSpec::new(name, dtype, shape);
                spec.metadata = meta.unwrap_or_default();
                out.specs.push(spec);
                out.sources.push(source);
            }
            None => {
                let converted =
                    convert(&name, &value)?.call_method1(intern!(py, "to_buffer"), (name.as_str(), &value))?;
                let converted = converted.downcast::<PyTuple>()?;
                let (dtype, shape, buf): (String, Vec<u64>, Bound<'_, PyAny>) = converted.extract()?;
                out.push_buffer(name, &dtype, shape, &buf, meta)?;
            }
        }
    }
    Ok(out)
}

/// Why a resolved torch tensor (dense, C order, on the CPU) still cannot
/// be taken: its dtype is not one of ours.
fn torch_refusal(name: &Bound<'_, PyString>, t: &Bound<'_, PyAny>) -> PyErr {
    let repr = name.repr().map_or_else(|_| String::new(), |r| r.to_string());
    let dtype = t.getattr("dtype").and_then(|d| d.str()).map_or_else(|_| "?".to_string(), |d| d.to_string());
    crate::errors::error(t.py(), format!("tensor {repr}: torch dtype {dtype} cannot be stored"))
}

/// One tensor as Python hands it over: name, dtype name, shape, a
/// C-contiguous byte buffer, and per-tensor metadata.
pub(crate) type Item<'py> = (String, String, Vec<u64>, Bound<'py, PyAny>, Option<Metadata>);

/// The writers' `tensors` argument: a dict of name to numpy arrays and
/// torch tensors (collected here, with per-tensor `metadata`), what
/// `_native.collect` made of any dict (with the caller's converter), or a
/// list of items.
pub(crate) fn tensors_arg(tensors: &Bound<'_, PyAny>, metadata: Option<&Bound<'_, PyDict>>) -> PyResult<TensorsArg> {
    if let Ok(dict) = tensors.downcast::<PyDict>() {
        return Ok(TensorsArg::Owned(collect(tensors.py(), dict, metadata, None)?));
    }
    if tensors.downcast::<PyMapping>().is_ok() {
        let dict = tensors.py().get_type::<PyDict>().call1((tensors,))?;
        return Ok(TensorsArg::Owned(collect(tensors.py(), dict.downcast()?, metadata, None)?));
    }
    if metadata.is_some() {
        // Items carry their own metadata, and a collection has it already:
        // metadata= given with either would be lost.
        return Err(pyo3::exceptions::PyTypeError::new_err("metadata= goes with a dict of tensors"));
    }
    if let Ok(collected) = tensors.downcast::<Tensors>() {
        return Ok(TensorsArg::Collected(collected.clone().unbind()));
    }
    let items: Vec<Item<'_>> = tensors.extract()?;
    let mut out = Tensors::with_capacity(items.len());
    for (name, dtype, shape, obj, metadata) in items {
        out.push_buffer(name, &dtype, shape, &obj, metadata)?;
    }
    Ok(TensorsArg::Owned(out))
}

/// See [`tensors_arg`].
pub(crate) enum TensorsArg {
    Collected(Py<Tensors>),
    Owned(Tensors),
}

/// Runs `write` on the tensors' specs and bytes with the GIL released,
/// borrowing each buffer's memory without a copy (views of rows of a torch
/// tensor are copied into one buffer each: see [`with_tensor_views`]).
pub(crate) fn with_tensors<R: Send>(
    py: Python<'_>,
    tensors: &Bound<'_, PyAny>,
    metadata: Option<&Bound<'_, PyDict>>,
    write: impl FnOnce(Vec<(TensorSpec, &[u8])>) -> deathtensors_io::Result<R> + Send,
) -> PyResult<R> {
    with_tensor_views(py, tensors, metadata, |data| {
        let (specs, bytes): (Vec<_>, Vec<_>) = data.into_iter().map(|(s, b)| (s, b.to_cow())).unzip();
        write(specs.into_iter().zip(bytes.iter().map(|b| &**b)).collect())
    })
}

/// Runs `write` on the tensors' specs and bytes with the GIL released,
/// borrowing each buffer's memory without a copy, views of rows of a torch
/// tensor included.
pub(crate) fn with_tensor_views<R: Send>(
    py: Python<'_>,
    tensors: &Bound<'_, PyAny>,
    metadata: Option<&Bound<'_, PyDict>>,
    write: impl FnOnce(Vec<(TensorSpec, TensorBytes<'_>)>) -> deathtensors_io::Result<R> + Send,
) -> PyResult<R> {
    let mut arg = tensors_arg(tensors, metadata)?;
    let mut guard;
    let tensors: &mut Tensors = match &mut arg {
        TensorsArg::Owned(t) => t,
        TensorsArg::Collected(t) => {
            guard = t.bind(py).try_borrow_mut()?;
            &mut guard
        }
    };
    let (specs, places) = tensors.take();
    let result = py.allow_threads(|| {
        let data = specs
            .into_iter()
            .zip(places)
            // SAFETY: `tensors` keeps each exporter's buffer (or torch
            // tensor) alive, and its memory where `place` says, until it is
            // dropped, after this closure returns.
            .map(|(s, place)| (s, unsafe { place.bytes() }))
            .collect();
        write(data)
    });
    drop(arg);
    result.py(py)
}
