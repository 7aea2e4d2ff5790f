//! `deathtensors._native.TensorInfo`: one tensor's header entry, with named
//! fields, as `Reader.info` returns it (it was a positional 7-tuple).

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A tensor's dtype, shape, place and digest, as a load needs them:
/// `data_offsets` are relative to the data blob (`(start, end)` of its
/// bytes in the file, fewer than it has when compressed), `file_offset`
/// is where those bytes start in the file, `aligned` whether they sit
/// aligned for the dtype there (a mapping can then be viewed as the
/// tensor), `sha256` the recorded digest (hex) or None.
#[derive(Debug)]
#[pyclass(name = "TensorInfo", module = "deathtensors._native", frozen, get_all)]
pub struct PyTensorInfo {
    pub(crate) dtype: &'static str,
    pub(crate) shape: Vec<u64>,
    pub(crate) data_offsets: (u64, u64),
    pub(crate) metadata: Py<PyDict>,
    pub(crate) sha256: Option<String>,
    pub(crate) file_offset: u64,
    pub(crate) aligned: bool,
}

#[pymethods]
impl PyTensorInfo {
    fn __repr__(&self) -> String {
        format!(
            "TensorInfo(dtype={:?}, shape={:?}, data_offsets={:?}, file_offset={}, aligned={})",
            self.dtype, self.shape, self.data_offsets, self.file_offset, self.aligned
        )
    }
}
