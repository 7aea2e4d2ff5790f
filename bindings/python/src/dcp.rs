//! Native work of `deathtensors.distributed`: `consolidate`, io's
//! consolidation of distributed checkpoints (the same code as the command
//! line's `deathtensors consolidate`), of a directory or of a URL prefix
//! read through `deathtensors-remote`; and `sha256_tensors`, the digests a
//! checkpoint's metadata keeps for the blocks of safetensors rank files;
//! the checks of a checkpoint's metadata and rank-file names, its limits,
//! and format's dtype table, all owned by Rust; and the save protocol
//! (io's `protocol.rs`): a save's marker, and which files a save removes,
//! decided natively from what `_store.py` listed and read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use deathtensors_io::format::{hex_digest, Format};
use deathtensors_io::{ConsolidateOptions, SaveCaller, SaveListing, SaveMarker};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

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
        // Whether a safetensors file can hold it (format's `Format::holds`).
        row.set_item("safetensors", deathtensors_io::format::Format::Safetensors.holds(n.dtype))?;
        table.set_item(n.dtype.name(), row)?;
    }
    Ok(table)
}

/// Why the rank file `name`, open as `reader`, is not the one the
/// checkpoint's metadata names (rank `rank`, `size` bytes): io's
/// `check_rank_file`, the check `consolidate` makes too; `None` when it is.
#[pyfunction]
pub fn check_rank_file(
    reader: PyRef<'_, crate::reader::PyReader>,
    name: &str,
    rank: u64,
    size: u64,
) -> PyResult<Option<String>> {
    let r = reader.get()?;
    Ok(deathtensors_io::check_rank_file(&r, name, rank, size).err())
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

/// `deathtensors.saving-<save id>.json`: the marker of a save that has not
/// committed.
#[pyfunction]
pub fn save_marker_name(save_id: &str) -> String {
    deathtensors_io::save_marker_name(save_id)
}

/// The save id of a save marker's name, or `None` for other names.
#[pyfunction]
pub fn parse_save_marker_name(name: &str) -> Option<String> {
    deathtensors_io::parse_save_marker_name(name).map(str::to_string)
}

/// The metadata documents among `names`, sorted: the checkpoint's and
/// those of ranks that saved without collectives.
#[pyfunction]
pub fn metadata_documents(names: BTreeSet<String>) -> Vec<String> {
    deathtensors_io::metadata_documents(names.iter().map(String::as_str)).into_iter().map(str::to_string).collect()
}

/// The marker's document of save `save_id`, started now by the calling
/// thread (for one rank's own save or file id: with its `rank`).
#[pyfunction]
#[pyo3(signature = (save_id, rank = None))]
pub fn save_marker<'py>(py: Python<'py>, save_id: &str, rank: Option<u64>) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &SaveMarker::new(save_id, &caller(py)?, rank).encode()))
}

/// The names to remove before a save's ranks write (io's
/// `uncommitted_files`), from what the store held: `names` listed, then
/// `markers` (bytes by save id) read, then `documents` (bytes by name)
/// read; `None` for one gone since the listing.
#[pyfunction]
#[pyo3(signature = (own, stale_after, rank, names, markers, documents))]
pub fn uncommitted_files(
    py: Python<'_>,
    own: &str,
    stale_after: f64,
    rank: Option<u64>,
    names: BTreeSet<String>,
    markers: BTreeMap<String, Option<Bound<'_, PyBytes>>>,
    documents: BTreeMap<String, Option<Bound<'_, PyBytes>>>,
) -> PyResult<Vec<String>> {
    let caller = caller(py)?;
    let seen = listing(names, markers, documents);
    Ok(py.allow_threads(|| deathtensors_io::uncommitted_files(&seen, own, rank, &caller, stale_after)))
}

/// The names to remove after save `save_id` committed (io's
/// `after_commit_files`): with what the store held (as for
/// `uncommitted_files`), its files are cleaned too; without it
/// (`keep_stale`), only the markers of `save_id` and `file_ids` go.
#[pyfunction]
#[pyo3(signature = (save_id, file_ids, stale_after, rank = None, names = None, markers = None, documents = None))]
#[allow(clippy::too_many_arguments)]
pub fn after_commit_files(
    py: Python<'_>,
    save_id: &str,
    file_ids: Vec<String>,
    stale_after: f64,
    rank: Option<u64>,
    names: Option<BTreeSet<String>>,
    markers: Option<BTreeMap<String, Option<Bound<'_, PyBytes>>>>,
    documents: Option<BTreeMap<String, Option<Bound<'_, PyBytes>>>>,
) -> PyResult<Vec<String>> {
    let caller = caller(py)?;
    let seen = names.map(|names| listing(names, markers.unwrap_or_default(), documents.unwrap_or_default()));
    Ok(py.allow_threads(|| {
        deathtensors_io::after_commit_files(seen.as_ref(), save_id, &file_ids, rank, &caller, stale_after)
    }))
}

/// What a save saw of its store, as io takes it.
fn listing(
    names: BTreeSet<String>,
    markers: BTreeMap<String, Option<Bound<'_, PyBytes>>>,
    documents: BTreeMap<String, Option<Bound<'_, PyBytes>>>,
) -> SaveListing {
    let bytes = |d: Option<Bound<'_, PyBytes>>| d.map(|d| d.as_bytes().to_vec());
    SaveListing {
        names,
        markers: markers.into_iter().map(|(id, d)| (id, bytes(d))).collect(),
        documents: documents.into_iter().map(|(name, d)| (name, bytes(d))).collect(),
    }
}

/// This process as the save protocol sees it, in Python's names: the host
/// name `socket.gethostname()` gives (what markers hold), and the idents of
/// the calling thread and of the live ones (`threading`'s).
fn caller(py: Python<'_>) -> PyResult<SaveCaller> {
    let host: String = py.import("socket")?.call_method0("gethostname")?.extract()?;
    let threading = py.import("threading")?;
    let thread: u64 = threading.call_method0("get_ident")?.extract()?;
    let mut live = BTreeSet::new();
    for t in threading.call_method0("enumerate")?.try_iter()? {
        // A thread not started yet has no ident.
        live.extend(t?.getattr("ident")?.extract::<Option<u64>>()?);
    }
    Ok(SaveCaller::new(&host, thread, live))
}
