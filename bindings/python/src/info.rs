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

/// How a file is compressed, as `Reader.compression` returns it (it was a
/// positional 6-tuple): `mode` `"chunks"` (tensors one by one; `level` and
/// `chunk_size` from the header) or `"blob"` (deathtensors 0.3.0's
/// whole-blob frame, which records neither: None), the tensors' bytes
/// (`raw_bytes`) and what they take in the file (`stored_bytes`).
#[derive(Debug)]
#[pyclass(name = "Compression", module = "deathtensors._native", frozen, get_all)]
pub struct PyCompression {
    pub(crate) mode: &'static str,
    pub(crate) codec: &'static str,
    pub(crate) level: Option<u32>,
    pub(crate) chunk_size: Option<u64>,
    pub(crate) raw_bytes: u64,
    pub(crate) stored_bytes: u64,
}

/// One tensor stored compressed in chunks, as `Reader.tensor_compression`
/// returns it (it was a positional 3-tuple).
#[derive(Debug)]
#[pyclass(name = "TensorCompression", module = "deathtensors._native", frozen, get_all)]
pub struct PyTensorCompression {
    pub(crate) raw_bytes: u64,
    pub(crate) stored_bytes: u64,
    pub(crate) chunks: usize,
}

/// How a file is encrypted, as `Reader.encryption` returns it (it was a
/// positional 6-tuple): the `scheme` (`"deathtensors"` or
/// `"cryptotensors"`), `cipher`, `chunk_size` (None for a cryptotensors
/// file of one AEAD message per tensor), `recipients` as `(kind, kid or
/// None)` pairs, how many tensors are stored encrypted, and a cryptotensors
/// file's signer key id.
#[derive(Debug)]
#[pyclass(name = "Encryption", module = "deathtensors._native", frozen, get_all)]
pub struct PyEncryption {
    pub(crate) scheme: &'static str,
    pub(crate) cipher: String,
    pub(crate) chunk_size: Option<u64>,
    pub(crate) recipients: Vec<(&'static str, Option<String>)>,
    pub(crate) encrypted_tensors: usize,
    pub(crate) signer_kid: Option<String>,
}
