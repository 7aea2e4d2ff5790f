//! Native work of `deathtensors.distributed`: `consolidate`, io's
//! consolidation of distributed checkpoints (the same code as the command
//! line's `deathtensors consolidate`), of a directory or of a URL prefix
//! read through `deathtensors-remote`; and `sha256_tensors`, the digests a
//! checkpoint's metadata keeps for the blocks of safetensors rank files.

use std::path::PathBuf;

use deathtensors_io::format::{hex_digest, Format};
use deathtensors_io::ConsolidateOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::options::remote_options;
use crate::tensors::with_tensor_views;

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

/// The SHA-256 (hex) of each tensor of `tensors` (what `collect` made of a
/// dict), by name: on all cores with the GIL released, two streams a core,
/// and rows of a view (a column tile) hashed where they are, without a
/// contiguous copy.
#[pyfunction]
pub fn sha256_tensors(py: Python<'_>, tensors: Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    with_tensor_views(py, &tensors, |data| {
        let views: Vec<_> = data.iter().map(|(_, bytes)| *bytes).collect();
        let digests = deathtensors_io::sha256_views(&views);
        Ok(data.into_iter().zip(digests).map(|((spec, _), d)| (spec.name, hex_digest(&d))).collect())
    })
}
