//! URLs wherever a path is accepted: `s3://`, `gs://`, `az://`,
//! `http(s)://` open through `deathtensors-remote` (ranged reads), with the
//! `--storage-option` entries of this run and the environment.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use deathtensors_io::{ErrorKind, ReadOptions, Reader, ShardedReader};
use deathtensors_remote::RemoteOptions;

/// The `--storage-option` entries of this run, set anew by every run of
/// `main_with_args` (which also runs in-process from Python).
static OPTIONS: RwLock<Vec<(String, String)>> = RwLock::new(Vec::new());

thread_local! {
    /// A URL opened by a check before the command opens it (`sharded::is_index`),
    /// and what the open gave: the command's own open takes it, so a URL is
    /// opened once (a dead server is waited for once, not twice). See:
    /// <https://github.com/death-legion/deathtensors/issues/30>
    static KEPT: RefCell<Option<(PathBuf, deathtensors_io::Result<Reader>)>> = const { RefCell::new(None) };
}

/// Parses `KEY=VALUE` entries and makes them the storage options of this
/// run, in place of any earlier run's.
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
    *OPTIONS.write().unwrap_or_else(std::sync::PoisonError::into_inner) = parsed;
    Ok(())
}

/// The URL `path` holds, if it is one.
pub fn url(path: &Path) -> Option<&str> {
    path.to_str().filter(|p| deathtensors_remote::is_url(p))
}

fn options() -> RemoteOptions {
    // A cache when DEATHTENSORS_REMOTE_CACHE names a directory.
    let storage_options = OPTIONS.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    RemoteOptions { storage_options, ..RemoteOptions::from_env() }
}

/// Keeps what opening the URL `path` with the keys of this run
/// ([`crate::keys::read_options`]) gave, for the next open of it; a local
/// path is not kept.
pub fn keep(path: &Path, opened: deathtensors_io::Result<Reader>) {
    if url(path).is_some() {
        KEPT.with(|k| *k.borrow_mut() = Some((path.to_path_buf(), opened)));
    }
}

/// Drops what [`keep`] kept: a run starts with nothing of an earlier run
/// of `main_with_args` in this thread (whose keys and options differ).
pub fn forget() {
    KEPT.with(|k| k.borrow_mut().take());
}

/// Takes what [`keep`] kept for `path`, if `usable` accepts it.
fn take_if(
    path: &Path,
    usable: impl FnOnce(&deathtensors_io::Result<Reader>) -> bool,
) -> Option<deathtensors_io::Result<Reader>> {
    KEPT.with(|k| {
        let mut kept = k.borrow_mut();
        match kept.take() {
            Some((p, opened)) if p == path && usable(&opened) => Some(opened),
            other => {
                *kept = other;
                None
            }
        }
    })
}

/// Opens a URL with the keys of this run, or takes the result of the open
/// that [`keep`] kept.
pub fn open_with_keys(path: &Path, read_options: impl FnOnce() -> ReadOptions) -> deathtensors_io::Result<Reader> {
    take_if(path, |_| true).unwrap_or_else(|| open(path, read_options()))
}

/// Opens a local file or a URL. A kept failure to reach the URL is
/// returned again: it does not depend on `read_options`.
pub fn open(path: &Path, read_options: ReadOptions) -> deathtensors_io::Result<Reader> {
    match url(path) {
        Some(url) => {
            if let Some(failed) = take_if(path, |r| r.as_ref().is_err_and(|e| matches!(e.kind(), ErrorKind::Io(_)))) {
                return failed;
            }
            deathtensors_remote::open(url, &options(), read_options)
        }
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
