//! `remote_put`, `remote_upload`, `remote_size`, `remote_get`,
//! `remote_list` and `remote_delete`: writing to object stores through
//! `deathtensors-remote`, for `deathtensors.distributed`'s checkpoints on
//! object stores. Each releases the GIL while it waits on the network.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::IntoPy;
use crate::options::{remote_options, storage_pairs};

/// Options as the other remote calls take them.
/// `storage_options=`: a dict, as `dt.open` takes it (converted once, in
/// `options.rs`).
type StorageOptions<'py> = Option<Bound<'py, PyAny>>;

/// Puts `data` as the object at `url` (one request).
/// Whether `location` is a URL of a store `deathtensors-remote` opens
/// (its `is_url`, the one rule), not a local path.
#[pyfunction]
pub fn is_url(location: &str) -> bool {
    deathtensors_remote::is_url(location)
}

#[pyfunction]
#[pyo3(signature = (url, data, storage_options = None))]
pub fn remote_put(py: Python<'_>, url: String, data: Vec<u8>, storage_options: StorageOptions<'_>) -> PyResult<()> {
    let options = remote_options(Some(storage_pairs(storage_options)?));
    py.allow_threads(|| deathtensors_remote::put(&url, data, &options)).py(py)
}

/// Writes `data` to the local file `path` atomically, with io's one
/// temp-file scheme (`write_file_atomic`); `durable` syncs the file and its
/// directory.
#[pyfunction]
pub fn write_file_atomic(py: Python<'_>, path: PathBuf, data: Vec<u8>, durable: bool) -> PyResult<()> {
    py.allow_threads(|| deathtensors_io::write_file_atomic(&path, &data, durable)).py(py)
}

/// Uploads the local file `path` as the object at `url` (multipart when
/// longer than a part) and returns its length.
#[pyfunction]
#[pyo3(signature = (path, url, storage_options = None))]
pub fn remote_upload(py: Python<'_>, path: PathBuf, url: String, storage_options: StorageOptions<'_>) -> PyResult<u64> {
    let options = remote_options(Some(storage_pairs(storage_options)?));
    py.allow_threads(|| deathtensors_remote::upload(&path, &url, &options)).py(py)
}

/// The size of the object at `url`, or None if there is none.
#[pyfunction]
#[pyo3(signature = (url, storage_options = None))]
pub fn remote_size(py: Python<'_>, url: String, storage_options: StorageOptions<'_>) -> PyResult<Option<u64>> {
    let options = remote_options(Some(storage_pairs(storage_options)?));
    py.allow_threads(|| deathtensors_remote::size(&url, &options)).py(py)
}

/// The object at `url` (at most `max` bytes), or None if there is none.
#[pyfunction]
#[pyo3(signature = (url, max, storage_options = None))]
pub fn remote_get<'py>(
    py: Python<'py>,
    url: String,
    max: u64,
    storage_options: StorageOptions<'_>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let options = remote_options(Some(storage_pairs(storage_options)?));
    let data = py.allow_threads(|| deathtensors_remote::get(&url, max, &options)).py(py)?;
    Ok(data.map(|d| PyBytes::new(py, &d)))
}

/// The objects directly under the prefix `url`: (name, size) pairs.
#[pyfunction]
#[pyo3(signature = (url, storage_options = None))]
pub fn remote_list(py: Python<'_>, url: String, storage_options: StorageOptions<'_>) -> PyResult<Vec<(String, u64)>> {
    let options = remote_options(Some(storage_pairs(storage_options)?));
    py.allow_threads(|| deathtensors_remote::list(&url, &options)).py(py)
}

/// Deletes the object at `url` (none there is not an error).
#[pyfunction]
#[pyo3(signature = (url, storage_options = None))]
pub fn remote_delete(py: Python<'_>, url: String, storage_options: StorageOptions<'_>) -> PyResult<()> {
    let options = remote_options(Some(storage_pairs(storage_options)?));
    py.allow_threads(|| deathtensors_remote::delete(&url, &options)).py(py)
}
