//! Where a distributed checkpoint's files are read from: the few
//! operations [`consolidate_from`](crate::consolidate_from) needs, so that
//! the same checks run on a local directory ([`CheckpointDir`]) and on a
//! prefix of an object store (`deathtensors-remote`'s `RemoteCheckpoint`).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::file::reader::Reader;

use deathtensors_format::DCP_METADATA;

/// The files of one distributed checkpoint (`deathtensors.json` and the
/// rank files it names), by name.
///
/// Every check is the caller's (`consolidate_from`): the metadata's
/// fields, each rank file's length, save id and rank, each block's digest.
/// A source only reads.
pub trait CheckpointSource {
    /// Where the checkpoint is (a directory's path, or a URL as a path):
    /// errors name [`CheckpointSource::name_of`] its files.
    fn location(&self) -> &Path;

    /// What errors name the file `name` of the checkpoint: the location
    /// joined with it (a URL's source joins with `/` on every system).
    fn name_of(&self, name: &str) -> PathBuf {
        self.location().join(name)
    }

    /// The whole metadata document ([`DCP_METADATA`]),
    /// or `None` if the checkpoint has none.
    ///
    /// # Errors
    /// - An error naming the document if it is longer than `max` bytes
    ///   (read no further than needed to tell).
    /// - `Io` if it cannot be read.
    fn read_metadata(&self, max: u64) -> Result<Option<Vec<u8>>>;

    /// The names of the files directly in the checkpoint, to tell an
    /// incomplete checkpoint (rank files, no metadata) from no checkpoint
    /// at all. A store that cannot list (an HTTP server) may return none.
    ///
    /// # Errors
    /// `Io` if the listing fails (for a directory: it does not exist).
    fn names(&self) -> Result<Vec<String>>;

    /// The length of the file `name` in bytes.
    ///
    /// # Errors
    /// `Io` naming the file, of kind `NotFound` if there is none.
    fn file_len(&self, name: &str) -> Result<u64>;

    /// Opens the file `name` with the default read options (its digests
    /// checked on reads).
    ///
    /// # Errors
    /// As [`Reader::open`], naming the file.
    fn open(&self, name: &str) -> Result<Reader>;
}

/// A checkpoint in a directory of the local (or a shared) file system.
#[derive(Clone, Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
}

impl CheckpointDir {
    /// The checkpoint in the directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> CheckpointDir {
        CheckpointDir { dir: dir.into() }
    }
}

const DOING: &str = "cannot consolidate";

impl CheckpointSource for CheckpointDir {
    fn location(&self) -> &Path {
        &self.dir
    }

    fn read_metadata(&self, max: u64) -> Result<Option<Vec<u8>>> {
        let path = self.dir.join(DCP_METADATA);
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > max => Err(Error::checkpoint(
                format!("invalid checkpoint metadata: {} bytes, more than the {max} allowed", m.len()),
                &path,
                DOING,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => std::fs::read(&path).map(Some).map_err(|e| Error::io(e, &path, DOING)),
        }
    }

    fn names(&self) -> Result<Vec<String>> {
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Error::io(e, &self.dir, "cannot open"))?;
        Ok(entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
    }

    fn file_len(&self, name: &str) -> Result<u64> {
        let path = self.dir.join(name);
        Ok(std::fs::metadata(&path).map_err(|e| Error::io(e, &path, DOING))?.len())
    }

    fn open(&self, name: &str) -> Result<Reader> {
        Reader::open(self.dir.join(name))
    }
}
