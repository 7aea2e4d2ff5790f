//! `consolidate`: io's consolidation of distributed checkpoints, for
//! `deathtensors.distributed.consolidate` (the same code as the command
//! line's `deathtensors consolidate`), of a directory or of a URL prefix
//! read through `deathtensors-remote`.

use std::path::PathBuf;

use deathtensors_io::format::Format;
use deathtensors_io::ConsolidateOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::options::remote_options;

/// Writes the full tensors of the checkpoint (a directory, or a URL reached
/// with `storage_options`) to the local `out` (one file, or a Hugging Face
/// checkpoint for a directory); returns the paths written.
#[pyfunction]
#[pyo3(signature = (checkpoint, out, max_shard_bytes, format = None, storage_options = None))]
pub fn consolidate(
    py: Python<'_>,
    checkpoint: PathBuf,
    out: PathBuf,
    max_shard_bytes: u64,
    format: Option<&str>,
    storage_options: Option<Vec<(String, String)>>,
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
    let remote = remote_options(storage_options);
    py.allow_threads(|| deathtensors_remote::consolidate_any(&checkpoint, &out, &remote, &options)).py(py)
}
