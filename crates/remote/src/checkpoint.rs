//! A distributed checkpoint on an object store (`deathtensors.distributed`'s
//! `StorageWriter` to an `s3://`, `gs://` or `az://` prefix), read for io's
//! consolidation: the metadata with one GET, each rank file's length with
//! one HEAD, each rank file opened as a remote object (ranged GETs).

use std::path::{Path, PathBuf};

use deathtensors_io::{
    consolidate_from, CheckpointDir, CheckpointSource, ConsolidateOptions, Error, ReadOptions, Reader, Result,
    DCP_METADATA,
};

use crate::open::{open, url_of};
use crate::options::RemoteOptions;
use crate::upload::{get, list, size};

/// The checkpoint under a URL prefix (`s3://bucket/ckpt/step-1000`), for
/// [`consolidate_from`]: its files are the objects directly under it.
/// Errors name the objects' URLs.
#[derive(Clone, Debug)]
pub struct RemoteCheckpoint {
    /// The prefix, without a trailing `/`.
    url: String,
    /// The prefix as a path, which errors name (joined with a file name).
    location: PathBuf,
    options: RemoteOptions,
}

impl RemoteCheckpoint {
    /// The checkpoint under the URL `url`, reached with `options`.
    pub fn new(url: &str, options: &RemoteOptions) -> RemoteCheckpoint {
        let url = url.trim_end_matches('/').to_string();
        RemoteCheckpoint { location: PathBuf::from(&url), url, options: options.clone() }
    }

    fn url_of(&self, name: &str) -> String {
        format!("{}/{name}", self.url)
    }
}

impl CheckpointSource for RemoteCheckpoint {
    fn location(&self) -> &Path {
        &self.location
    }

    fn name_of(&self, name: &str) -> PathBuf {
        PathBuf::from(self.url_of(name))
    }

    fn read_metadata(&self, max: u64) -> Result<Option<Vec<u8>>> {
        get(&self.url_of(DCP_METADATA), max, &self.options)
    }

    fn names(&self) -> Result<Vec<String>> {
        // An HTTP server has no listing: a checkpoint there without its
        // metadata is reported missing, not incomplete.
        if self.url.get(..4).is_some_and(|s| s.eq_ignore_ascii_case("http")) {
            return Ok(Vec::new());
        }
        Ok(list(&self.url, &self.options)?.into_iter().map(|(name, _)| name).collect())
    }

    fn file_len(&self, name: &str) -> Result<u64> {
        let url = self.url_of(name);
        size(&url, &self.options)?.ok_or_else(|| {
            let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no such object");
            Error::from_io(missing, Path::new(&url), "cannot consolidate")
        })
    }

    fn open(&self, name: &str) -> Result<Reader> {
        open(&self.url_of(name), &self.options, ReadOptions::default())
    }
}

/// Consolidates the distributed checkpoint at `checkpoint` into the local
/// `out` (as io's `consolidate`): a URL ([`is_url`](crate::is_url)) read
/// through a [`RemoteCheckpoint`] with `remote`, or a local directory.
/// The one place a front end chooses between the two.
///
/// # Errors
/// As io's `consolidate_from`; for a URL, as [`get`], [`size`], [`list`]
/// and [`open`] for the objects read.
pub fn consolidate_any(
    checkpoint: impl AsRef<Path>,
    out: &Path,
    remote: &RemoteOptions,
    options: &ConsolidateOptions,
) -> Result<Vec<PathBuf>> {
    let checkpoint = checkpoint.as_ref();
    match url_of(checkpoint) {
        Some(url) => consolidate_from(&RemoteCheckpoint::new(url, remote), out, options),
        None => consolidate_from(&CheckpointDir::new(checkpoint), out, options),
    }
}
