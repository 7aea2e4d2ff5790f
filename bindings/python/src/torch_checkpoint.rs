//! `deathtensors._native.TorchCheckpoint`: io's reader of `torch.save`
//! pickle checkpoints (docs/PICKLE.md), which runs nothing; Python's
//! `dt.open` returns a `TorchFile` over it. And `scan_pickle`, what a
//! pickle refers to and would call.

use std::path::PathBuf;

use deathtensors_io::TorchCheckpoint;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arena::PyArena;
use crate::errors::IntoPy;

/// A torch.save checkpoint, open: tensors listed, each read on demand.
#[derive(Debug)]
#[pyclass(name = "TorchCheckpoint", module = "deathtensors._native", frozen)]
pub struct PyTorchCheckpoint {
    inner: TorchCheckpoint,
}

#[pymethods]
impl PyTorchCheckpoint {
    /// Opens `path`: its zip directory and pickle read and checked, no
    /// tensor data read.
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.allow_threads(|| TorchCheckpoint::open(&path)).py(py)?;
        Ok(PyTorchCheckpoint { inner })
    }

    /// The tensor names, in the pickle's order.
    fn keys(&self) -> Vec<String> {
        self.inner.tensors().map(|t| t.name.to_string()).collect()
    }

    /// `(dtype, shape)` of tensor `name` (the dtype's header name, `F32`).
    fn info(&self, name: &str) -> Option<(&'static str, Vec<u64>)> {
        self.inner.tensors().find(|t| t.name == name).map(|t| (t.dtype.name(), t.shape.to_vec()))
    }

    /// Tensor `name`'s bytes, contiguous and little-endian, in a fresh
    /// aligned buffer (its storage's CRC checked first).
    fn read(&self, py: Python<'_>, name: &str) -> PyResult<PyArena> {
        let bytes = py.allow_threads(|| self.inner.read(name)).py(py)?;
        let mut arena = PyArena::new(bytes.len())?;
        // SAFETY: the arena is fresh and not yet exported.
        unsafe { arena.as_mut_slice() }.copy_from_slice(&bytes);
        Ok(arena)
    }

    /// The plain values beside the tensors, as text, by flattened name.
    fn metadata(&self) -> Vec<(String, String)> {
        self.inner.metadata().to_vec()
    }

    /// The other leaves (bytes, sets, ...): `(name, what it is)`.
    fn others(&self) -> Vec<(String, &'static str)> {
        self.inner.others().to_vec()
    }

    /// The pickle protocol the checkpoint declares.
    #[getter]
    fn protocol(&self) -> u8 {
        self.inner.protocol()
    }
}

/// Whether the local file at `path` looks like a torch pickle checkpoint.
#[pyfunction]
pub fn is_torch_checkpoint(path: PathBuf) -> bool {
    deathtensors_io::is_torch_checkpoint(path)
}

/// What the file at `path` is, for people ("a deathtensors file", "a
/// Python pickle ...", "a directory"): io's `describe_file`, the format
/// crate's one decision of which kind a file is.
#[pyfunction]
pub fn describe_file(path: PathBuf) -> &'static str {
    deathtensors_io::describe_file(&path)
}

/// What the pickle at `path` refers to and would call, without running
/// it: `{"plain": bool, "verdict": str, "protocol": int, "names": [(name,
/// offset, allowed)], "calls": [(name, offset)]}`.
#[pyfunction]
pub fn scan_pickle<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let scan = py.allow_threads(|| deathtensors_io::scan_pickle(&path)).py(py)?;
    let out = PyDict::new(py);
    out.set_item("plain", scan.verdict.is_ok())?;
    let verdict = match &scan.verdict {
        Ok(n) => format!("a plain tensor checkpoint ({n} tensors, pickle protocol {})", scan.protocol),
        Err(e) => format!("not a plain tensor checkpoint: {e}"),
    };
    out.set_item("verdict", verdict)?;
    out.set_item("protocol", scan.protocol)?;
    out.set_item("names", scan.names.iter().map(|n| (n.name.clone(), n.offset, n.allowed)).collect::<Vec<_>>())?;
    out.set_item("calls", scan.calls.iter().map(|n| (n.name.clone(), n.offset)).collect::<Vec<_>>())?;
    Ok(out)
}
