//! `deathtensors._native.save`: streaming, atomic writes from Python buffers.

use deathtensors_io::save_views;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::options::PyWriteOptions;
use crate::tensors::with_tensor_views;

/// Saves tensors (a dict of name to tensor with per-tensor `metadata`, a
/// list of items, or what `collect` made of a dict) atomically, as
/// `options` say: the whole save in one call. The buffers' memory (and views of rows of
/// torch tensors) goes to the file without a copy, with the GIL released; they must not be modified
/// meanwhile.
#[pyfunction]
#[pyo3(signature = (path, tensors, options, metadata = None))]
pub fn save(
    py: Python<'_>,
    path: std::path::PathBuf,
    tensors: Bound<'_, PyAny>,
    options: Bound<'_, PyWriteOptions>,
    metadata: Option<Bound<'_, PyDict>>,
) -> PyResult<()> {
    let options = &options.get().inner;
    with_tensor_views(py, &tensors, metadata.as_ref(), |data| save_views(&path, data, options).map(|_| ()))
}
