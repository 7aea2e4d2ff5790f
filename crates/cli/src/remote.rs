//! URLs wherever a path is accepted: `s3://`, `gs://`, `az://`,
//! `http(s)://` open through `deathtensors-remote` (ranged reads), with the
//! `--storage-option` entries of this run and the environment.

use std::path::Path;
use std::sync::OnceLock;

use deathtensors_io::{ReadOptions, Reader, ShardedReader};
use deathtensors_remote::RemoteOptions;

static OPTIONS: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Parses `KEY=VALUE` entries and makes them the storage options of this
/// run (the first call wins).
///
/// # Errors
/// An entry without `=`.
pub fn set(entries: &[String]) -> anyhow::Result<()> {
    let parsed = entries
        .iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.to_string())),
            None => anyhow::bail!("--storage-option {e:?} is not KEY=VALUE"),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let _ = OPTIONS.set(parsed);
    Ok(())
}

/// The URL `path` holds, if it is one.
pub fn url(path: &Path) -> Option<&str> {
    path.to_str().filter(|p| deathtensors_remote::is_url(p))
}

fn options() -> RemoteOptions {
    // A cache when DEATHTENSORS_REMOTE_CACHE names a directory.
    RemoteOptions { storage_options: OPTIONS.get().cloned().unwrap_or_default(), ..RemoteOptions::from_env() }
}

/// Opens a local file or a URL.
pub fn open(path: &Path, read_options: ReadOptions) -> deathtensors_io::Result<Reader> {
    match url(path) {
        Some(url) => deathtensors_remote::open(url, &options(), read_options),
        None => Reader::open_with(path, read_options),
    }
}

/// Opens a sharded checkpoint from a local index or a URL, every shard
/// opened with `read_options`.
pub fn open_sharded(path: &Path, read_options: ReadOptions) -> deathtensors_io::Result<ShardedReader> {
    match url(path) {
        Some(url) => deathtensors_remote::open_sharded(url, &options(), read_options),
        None => ShardedReader::open_with(path, read_options),
    }
}
