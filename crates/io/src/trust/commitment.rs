//! What a signed model statement commits a directory's tensor files to,
//! beyond their whole-file digests: each file's head (prefix and header)
//! and each tensor's bytes (`docs/SECURITY.md`, "Lazy per-tensor
//! verification"). A reader opened with [`ReadOptions::signed_model`]
//! checks its file's head on open and each tensor as it is read, so a load
//! of one tensor reads and checks only the head and that tensor.
//!
//! [`ReadOptions::signed_model`]: crate::ReadOptions::signed_model

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// One file's commitments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileCommitment {
    /// The length of the file's head: its bytes before the data.
    pub head_len: u64,
    /// The SHA-256 of the head.
    pub head_sha256: [u8; 32],
    /// The SHA-256 of each tensor's bytes as stored, for the tensors whose
    /// header records no digest (the head commits to the others').
    pub tensors: BTreeMap<String, [u8; 32]>,
}

/// A verified statement's commitments for the files of one directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelCommitments {
    dir: PathBuf,
    files: BTreeMap<String, FileCommitment>,
    /// Every file's whole SHA-256 (the statement's resources): what a small
    /// file read whole (a sharded checkpoint's index) is checked against.
    whole: BTreeMap<String, [u8; 32]>,
}

const OPENING: &str = "cannot open";

fn mismatch(path: &Path, message: String) -> Error {
    Error::new(ErrorKind::ModelMismatch(message), Some(path), OPENING)
}

impl ModelCommitments {
    /// The commitments of a verified statement for the directory `dir`.
    ///
    /// # Errors
    /// `Io` if `dir` cannot be resolved.
    pub fn new(
        dir: &Path,
        files: BTreeMap<String, FileCommitment>,
        whole: BTreeMap<String, [u8; 32]>,
    ) -> Result<ModelCommitments> {
        let dir = std::fs::canonicalize(dir).map_err(|e| Error::io(e, dir, OPENING))?;
        Ok(ModelCommitments { dir, files, whole })
    }

    /// The model directory (resolved).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The files with per-tensor commitments, `/`-separated, relative to
    /// the directory.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str)
    }

    /// The name of `path` in the statement: relative to the directory,
    /// `/`-separated.
    fn name_of(&self, path: &Path) -> Result<String> {
        let resolved = std::fs::canonicalize(path).map_err(|e| Error::io(e, path, OPENING))?;
        let rel = resolved.strip_prefix(&self.dir).map_err(|_| {
            mismatch(path, format!("the file is not inside the signed model directory {}", self.dir.display()))
        })?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        parts.map(|p| p.join("/")).ok_or_else(|| mismatch(path, "the file's name is not UTF-8".into()))
    }

    /// The commitments of the file at `path`.
    ///
    /// # Errors
    /// `ModelMismatch` if the statement does not list the file, or lists it
    /// without per-tensor commitments (not a plain tensor file when signed).
    pub(crate) fn for_file(&self, path: &Path) -> Result<&FileCommitment> {
        let name = self.name_of(path)?;
        self.files.get(&name).ok_or_else(|| {
            let why = if self.whole.contains_key(&name) {
                "the model signature covers it whole, but commits to none of its tensors (it was not a plain \
                 deathtensors, safetensors or bintensors file when signed): verify the directory with verify_model"
            } else {
                "the model signature does not list this file"
            };
            mismatch(path, format!("{name}: {why}"))
        })
    }

    /// Checks the bytes of a small file read whole (an index) against its
    /// signed digest.
    ///
    /// # Errors
    /// `ModelMismatch` if the statement does not list the file or its bytes
    /// differ.
    pub(crate) fn check_whole(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        let name = self.name_of(path)?;
        match self.whole.get(&name) {
            None => Err(mismatch(path, format!("{name}: the model signature does not list this file"))),
            Some(d) if *d != crate::fs::hash::sha256(bytes) => {
                Err(mismatch(path, format!("{name}: changed since it was signed (SHA-256 differs)")))
            }
            Some(_) => Ok(()),
        }
    }
}
