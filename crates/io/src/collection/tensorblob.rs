//! tensorblob directories (read-only): `.conf`, `.stat` and raw block files.

use std::path::Path;

use super::Collection;
use crate::error::{Error, Result};

/// Whether `dir` looks like a tensorblob directory.
pub(crate) fn is_tensorblob(dir: &Path) -> bool {
    dir.join(".conf").is_file() && dir.join(".stat").is_file()
}

pub(crate) fn open(dir: &Path) -> Result<Collection> {
    Err(Error::input("tensorblob directories are not supported yet", dir, "cannot open collection"))
}
