//! `consolidate`: io's consolidation of distributed checkpoints, for
//! `deathtensors.distributed.consolidate` (the same code as the command
//! line's `deathtensors consolidate`).

use std::path::PathBuf;

use deathtensors_io::format::Format;
use deathtensors_io::ConsolidateOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// Writes the checkpoint directory's full tensors to `out` (one file, or a
/// Hugging Face checkpoint for a directory); returns the paths written.
#[pyfunction]
#[pyo3(signature = (checkpoint, out, max_shard_bytes, format = None))]
pub fn consolidate(
    py: Python<'_>,
    checkpoint: PathBuf,
    out: PathBuf,
    max_shard_bytes: u64,
    format: Option<&str>,
) -> PyResult<Vec<PathBuf>> {
    let format = match format {
        None => None,
        Some("deathtensors") => Some(Format::Deathtensors),
        Some("safetensors") => Some(Format::Safetensors),
        Some(other) => {
            return Err(PyValueError::new_err(format!("format must be 'deathtensors' or 'safetensors', got {other:?}")))
        }
    };
    let options = ConsolidateOptions { max_shard_bytes, format, ..ConsolidateOptions::default() };
    py.allow_threads(|| deathtensors_io::consolidate(&checkpoint, &out, &options)).py(py)
}
