//! A test's scratch directory, for the integration tests of
//! `deathtensors-io` and `deathtensors-remote`.

use std::path::PathBuf;

/// A test's directory: a path while the test runs, gone when it ends
/// (a failing test's files go too; rerun it with `DT_KEEP_SCRATCH=1`
/// to keep them). Declared before the test's files and collections, it is
/// dropped after them: Windows removes no folder with an open file in it.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh empty directory `<temp>/<prefix>-<pid>-<name>`.
    pub fn new(prefix: &str, name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl std::ops::Deref for Scratch {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for Scratch {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::env::var_os("DT_KEEP_SCRATCH").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
