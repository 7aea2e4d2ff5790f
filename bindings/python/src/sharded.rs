//! `deathtensors._native.ShardedIndex` and `save_sharded`: sharded
//! checkpoints. Tensors are read through per-shard `Reader`s that the
//! Python layer opens lazily; the index resolves names to shards.

use std::path::PathBuf;

use deathtensors_io::format::Metadata;
use deathtensors_io::{save_sharded as io_save_sharded, ShardedReader};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::IntoPy;
use crate::options::{PyReadOptions, PyWriteOptions};
use crate::tensors::with_tensors;

/// The index of a sharded checkpoint (Hugging Face, ours, or deathtensors
/// 0.3.0's), or a single file.
#[derive(Debug)]
#[pyclass(name = "ShardedIndex", module = "deathtensors._native", frozen)]
pub struct PyShardedIndex {
    inner: ShardedReader,
}

#[pymethods]
impl PyShardedIndex {
    /// Shards are opened with `options` (keys, trusted signers,
    /// requirements, policy input, limits), as `Reader` opens a file.
    #[new]
    #[pyo3(signature = (path, options = None))]
    fn new(py: Python<'_>, path: PathBuf, options: Option<Bound<'_, PyReadOptions>>) -> PyResult<PyShardedIndex> {
        let (read, remote) = PyReadOptions::of(options);
        let inner = py.allow_threads(|| deathtensors_remote::open_sharded_any(&path, &remote, read)).py(py)?;
        Ok(PyShardedIndex { inner })
    }

    fn keys(&self) -> Vec<String> {
        self.inner.keys().map(str::to_string).collect()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, name: &str) -> bool {
        self.inner.contains(name)
    }

    fn metadata(&self) -> Metadata {
        self.inner.metadata().clone()
    }

    #[getter]
    fn total_size(&self) -> Option<u64> {
        self.inner.total_size()
    }

    /// As strings, not `pathlib` paths: a URL's `//` must survive.
    fn shard_paths(&self) -> Vec<String> {
        self.inner.shard_paths().iter().map(|p| p.to_string_lossy().into_owned()).collect()
    }

    /// The path (or URL) the index gives for the shard of `name`, without
    /// opening it; None if the index has no such tensor.
    fn shard_path_of(&self, name: &str) -> Option<String> {
        let i = self.inner.shard_index_of(name)?;
        Some(self.inner.shard_paths()[i].to_string_lossy().into_owned())
    }

    /// The path (or URL) of the shard that holds `name`.
    fn shard_of(&self, py: Python<'_>, name: &str) -> PyResult<String> {
        Ok(self.inner.reader_of(name).py(py)?.path().to_string_lossy().into_owned())
    }

    /// Checks index and shards agree, every shard's signatures and
    /// requirements, and every checksum (and, with a key, every tag) the
    /// shards carry.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        py.allow_threads(|| self.inner.verify()).py(py)
    }
}

/// Saves tensors over shards of at most `max_shard_bytes` plus an index in
/// Hugging Face's scheme, every shard as `options` say (encrypted with a
/// data key of its own, and signed, when they say so). Returns (index
/// path, shard paths).
#[pyfunction]
#[pyo3(signature = (path, tensors, max_shard_bytes, options, metadata = None))]
pub fn save_sharded(
    py: Python<'_>,
    path: PathBuf,
    tensors: Bound<'_, PyAny>,
    max_shard_bytes: u64,
    options: Bound<'_, PyWriteOptions>,
    metadata: Option<Bound<'_, PyDict>>,
) -> PyResult<(PathBuf, Vec<PathBuf>)> {
    let options = &options.get().inner;
    with_tensors(py, &tensors, metadata.as_ref(), |data| io_save_sharded(&path, data, max_shard_bytes, options))
}
