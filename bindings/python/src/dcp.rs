//! Native work of `deathtensors.distributed`: `consolidate`, io's
//! consolidation of distributed checkpoints (the same code as the command
//! line's `deathtensors consolidate`), of a directory or of a URL prefix
//! read through `deathtensors-remote`; and `sha256_tensors`, the digests a
//! checkpoint's metadata keeps for the blocks of safetensors rank files;
//! the checks of a checkpoint's metadata and rank-file names, its limits,
//! and format's dtype table, all owned by Rust.

use std::path::PathBuf;

use deathtensors_io::format::{hex_digest, Format};
use deathtensors_io::ConsolidateOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{raise, IntoPy};
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
    storage_options: Option<Bound<'_, PyAny>>,
) -> PyResult<Vec<PathBuf>> {
    let storage_options = Some(crate::options::storage_pairs(storage_options)?);
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
    with_tensor_views(py, &tensors, None, |data| {
        let views: Vec<_> = data.iter().map(|(_, bytes)| *bytes).collect();
        let digests = deathtensors_io::sha256_views(&views);
        Ok(data.into_iter().zip(digests).map(|((spec, _), d)| (spec.name, hex_digest(&d))).collect())
    })
}

/// Checks a checkpoint's metadata document (`deathtensors.json`) read from
/// `where` as `consolidate` does: every field, the limits, duplicate keys,
/// unknown fields. `FormatError` says what is wrong, naming `where`.
/// With `rank`, the document is that rank's own (a checkpoint saved
/// without collectives), and every file it names must be that rank's.
#[pyfunction]
#[pyo3(signature = (data, r#where, rank = None))]
pub fn check_checkpoint_metadata(py: Python<'_>, data: &[u8], r#where: &str, rank: Option<u64>) -> PyResult<()> {
    py.allow_threads(|| match rank {
        None => deathtensors_io::check_checkpoint_metadata(data),
        Some(rank) => deathtensors_io::check_rank_checkpoint_metadata(data, rank),
    })
    .map_err(|why| raise(py, "FormatError", format!("invalid checkpoint metadata {where}: {why}")))
}

/// `deathtensors.rank-00003.json`: the metadata of one rank's checkpoint,
/// saved without collectives.
#[pyfunction]
pub fn rank_metadata_name(rank: u64) -> String {
    deathtensors_io::rank_metadata_name(rank)
}

/// The rank of a per-rank metadata document's name, or `None` for other
/// names.
#[pyfunction]
pub fn parse_rank_metadata_name(name: &str) -> Option<u64> {
    deathtensors_io::parse_rank_metadata_name(name)
}

/// `(rank, save id)` of a rank file's name (`rank-00003-<save id>.dt`), or
/// `None` for other names.
#[pyfunction]
pub fn parse_rank_file_name(name: &str) -> Option<(u64, String)> {
    deathtensors_io::parse_rank_file_name(name).map(|(rank, id)| (rank, id.to_string()))
}

/// Every dtype's names (torch, numpy, ml_dtypes, tensorflow, paddle, mlx,
/// carrier), byte width (`None` below a byte) and whether plain numpy
/// lacks it ("exotic"), by header name: format's one table.
#[pyfunction]
pub fn dtype_table(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let table = PyDict::new(py);
    for n in deathtensors_io::format::DTYPE_NAMES.iter() {
        let row = PyDict::new(py);
        row.set_item("torch", n.torch)?;
        row.set_item("numpy", n.numpy)?;
        row.set_item("ml_dtypes", n.ml_dtypes)?;
        row.set_item("tensorflow", n.tensorflow)?;
        row.set_item("paddle", n.paddle)?;
        row.set_item("mlx", n.mlx)?;
        row.set_item("carrier", n.carrier)?;
        row.set_item("itemsize", n.byte_width())?;
        row.set_item("exotic", n.is_exotic())?;
        table.set_item(n.dtype.name(), row)?;
    }
    Ok(table)
}

/// Why the chunks `(offsets, sizes)` of a tensor of `size`, elements of
/// `itemsize` bytes, do not add up to it without overlapping; `None` when
/// they do.
#[pyfunction]
pub fn check_chunk_cover(size: Vec<u64>, itemsize: u64, chunks: Vec<(Vec<u64>, Vec<u64>)>) -> Option<String> {
    let chunks: Vec<(&[u64], &[u64])> = chunks.iter().map(|(o, s)| (&o[..], &s[..])).collect();
    deathtensors_io::check_chunk_cover(&size, itemsize, &chunks).err()
}

/// The tensor name of a block of a rank file: `fqn@<global offsets>`.
#[pyfunction]
pub fn block_name(fqn: &str, offsets: Vec<u64>) -> String {
    deathtensors_io::block_name(fqn, &offsets)
}

/// `rank-00003-<save id>.<ext>`: a rank's file of one save.
#[pyfunction]
pub fn rank_file_name(rank: u64, save_id: &str, ext: &str) -> String {
    deathtensors_io::rank_file_name(rank, save_id, ext)
}

/// A chunk's tiles in row-major order (the order of its digests), each
/// `(r0, r1, c0, c1)`: rows `r0:r1` and columns `c0:c1` within the chunk.
#[pyfunction]
#[pyo3(signature = (sizes, rows, cols = None))]
pub fn chunk_tiles(sizes: Vec<u64>, rows: u64, cols: Option<u64>) -> PyResult<Vec<(u64, u64, u64, u64)>> {
    if rows == 0 || cols == Some(0) {
        return Err(PyValueError::new_err("rows and cols must be positive"));
    }
    Ok(deathtensors_io::chunk_tiles(&sizes, rows, cols).into_iter().map(|t| (t.r0, t.r1, t.c0, t.c1)).collect())
}
