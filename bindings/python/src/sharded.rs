//! `deathtensors._native.ShardedIndex` and `save_sharded`: sharded
//! checkpoints. Tensors are read through per-shard `Reader`s that the
//! Python layer opens lazily; the index resolves names to shards.

use std::path::PathBuf;

use deathtensors_io::format::Metadata;
use deathtensors_io::{save_sharded as io_save_sharded, ShardedReader, WriteOptions};
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::writer::{parse_format, with_tensors};

/// The index of a sharded checkpoint (Hugging Face, ours, or deathtensors
/// 0.3.0's), or a single file.
#[derive(Debug)]
#[pyclass(name = "ShardedIndex", module = "deathtensors._native", frozen)]
pub struct PyShardedIndex {
    inner: ShardedReader,
}

/// Remote options from Python's `storage_options` (already strings).
pub(crate) fn remote_options(storage_options: Option<Vec<(String, String)>>) -> deathtensors_remote::RemoteOptions {
    deathtensors_remote::RemoteOptions {
        storage_options: storage_options.unwrap_or_default(),
        // A cache when DEATHTENSORS_REMOTE_CACHE names a directory.
        ..deathtensors_remote::RemoteOptions::from_env()
    }
}

#[pymethods]
impl PyShardedIndex {
    /// Shards are opened with the keys, trusted signers, requirements,
    /// policy input and limits given, as `Reader` opens a file.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (path, storage_options = None, keys = None, trusted_signers = Vec::new(), require_signature = false, require_encryption = false, policy_input = None, max_decompressed_len = None, max_kdf_work = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        storage_options: Option<Vec<(String, String)>>,
        keys: Option<crate::keys::PyKeyRing>,
        trusted_signers: Vec<[u8; 32]>,
        require_signature: bool,
        require_encryption: bool,
        policy_input: Option<String>,
        max_decompressed_len: Option<u64>,
        max_kdf_work: Option<u64>,
    ) -> PyResult<PyShardedIndex> {
        let options = crate::reader::read_options(
            py,
            keys,
            trusted_signers,
            require_signature,
            require_encryption,
            policy_input,
            max_decompressed_len,
            max_kdf_work,
        )?;
        let url = path.to_str().filter(|p| deathtensors_remote::is_url(p));
        let inner = py
            .allow_threads(|| match url {
                Some(url) => deathtensors_remote::open_sharded(url, &remote_options(storage_options), options),
                None => ShardedReader::open_with(&path, options),
            })
            .py(py)?;
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
/// Hugging Face's scheme. Returns (index path, shard paths).
#[pyfunction]
#[pyo3(signature = (path, tensors, max_shard_bytes, global_metadata = None, checksum = false, durable = true, format = "deathtensors", alignment = 64, encrypt = None, sign = None, cipher = "AES-256-GCM", chunk_size = 1 << 20, seal_header = false, compress = "off", compress_level = 3))]
#[allow(clippy::too_many_arguments)]
pub fn save_sharded(
    py: Python<'_>,
    path: PathBuf,
    tensors: Bound<'_, PyAny>,
    max_shard_bytes: u64,
    global_metadata: Option<Metadata>,
    checksum: bool,
    durable: bool,
    format: &str,
    alignment: u64,
    encrypt: Option<crate::keys::PyKeyRing>,
    sign: Option<crate::keys::PyKeyRing>,
    cipher: &str,
    chunk_size: u64,
    seal_header: bool,
    compress: &str,
    compress_level: i32,
) -> PyResult<(PathBuf, Vec<PathBuf>)> {
    let format = parse_format(format)?;
    let compress = crate::writer::parse_compress(compress, compress_level)?;
    let mut options = WriteOptions {
        format,
        checksum,
        durable,
        metadata: global_metadata,
        alignment,
        compress,
        ..WriteOptions::default()
    };
    // Every shard is encrypted (with a data key of its own) and signed.
    crate::keys::apply(py, &mut options, encrypt, sign, cipher, chunk_size, seal_header)?;
    with_tensors(py, &tensors, |data| io_save_sharded(&path, data, max_shard_bytes, &options))
}
