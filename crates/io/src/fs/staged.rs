//! Files written together that replace their targets together or not at
//! all: the shards and the index of a sharded checkpoint.
//!
//! Each file is written (by an atomic writer: [`crate::save`], ...) under a
//! staging name beside its target, a temp name of [`crate::fs::atomic`] that the
//! next save to the directory removes once this process is gone. Nothing is
//! at the targets until [`StagedFiles::commit`], which renames the files
//! into place in the order they were staged (the index last). So a save
//! that fails before the commit (a full disk, an error, a panic) removes
//! every file it staged, and the targets, with whatever older files were
//! there (an older checkpoint's shards of the same names, its index), stay
//! untouched. A rename that fails during the commit undoes the renames
//! before it: a target that held an older file gets it back (kept as a hard
//! link until the commit is done, where the file system has them), one that
//! did not is removed.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::atomic::{keep_mode, sync_dir, temp_name};

const DOING: &str = "cannot write";

/// Files written under staging names, moved over their targets by
/// [`StagedFiles::commit`]; dropped without a commit, the staged files are
/// removed.
#[derive(Debug)]
pub struct StagedFiles {
    /// (staging path, target), in staging order.
    files: Vec<(PathBuf, PathBuf)>,
    durable: bool,
}

impl StagedFiles {
    /// An empty set; `durable`: the commit's renames are fsynced (the
    /// directories), as the files' own writes are.
    pub fn new(durable: bool) -> StagedFiles {
        StagedFiles { files: Vec::new(), durable }
    }

    /// Writes the file meant for `target` with `write`, given the staging
    /// path to write at (atomically: a failed write leaves nothing there).
    /// An error that names the staging path names `target` instead.
    ///
    /// # Errors
    /// `write`'s.
    pub fn write<T>(&mut self, target: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
        let staging = target.with_file_name(staging_name(target));
        // Listed first: whatever `write` leaves there is removed with the rest.
        self.files.push((staging.clone(), target.to_path_buf()));
        write(&staging).map_err(|e| if e.path() == Some(staging.as_path()) { e.with_path(target) } else { e })
    }

    /// Moves every staged file over its target, in staging order, and (if
    /// durable) fsyncs their directories. On an error the renames made are
    /// undone (see the module's documentation) and every staged file is
    /// removed.
    ///
    /// # Errors
    /// `Io`, naming the target that could not be replaced.
    pub fn commit(mut self) -> Result<()> {
        let files = std::mem::take(&mut self.files);
        // (target, the older file kept as a hard link, if any).
        let mut done: Vec<(&Path, Option<PathBuf>)> = Vec::with_capacity(files.len());
        let mut failed = None;
        for (staging, target) in &files {
            match replace(staging, target) {
                Ok(backup) => done.push((target, backup)),
                Err(e) => {
                    failed = Some(Error::io(e, target, DOING));
                    break;
                }
            }
        }
        if failed.is_none() && self.durable {
            let mut dirs: Vec<&Path> = files.iter().map(|(_, t)| dir_of(t)).collect();
            dirs.dedup();
            if let Some((dir, e)) = dirs.into_iter().find_map(|d| sync_dir(d).err().map(|e| (d, e))) {
                failed = Some(Error::io(e, dir, DOING));
            }
        }
        match failed {
            None => {
                for backup in done.into_iter().filter_map(|(_, b)| b) {
                    release(&backup);
                }
                Ok(())
            }
            Some(e) => {
                for (target, backup) in done.into_iter().rev() {
                    let _ = match backup {
                        Some(backup) => std::fs::rename(&backup, target),
                        None => std::fs::remove_file(target),
                    };
                }
                for (staging, _) in &files {
                    let _ = std::fs::remove_file(staging);
                }
                Err(e)
            }
        }
    }
}

impl Drop for StagedFiles {
    fn drop(&mut self) {
        for (staging, _) in &self.files {
            let _ = std::fs::remove_file(staging);
        }
    }
}

fn staging_name(target: &Path) -> OsString {
    temp_name(target)
}

fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Renames `staging` over `target`, giving it the older file's permission
/// bits first; returns the older file, kept as a hard link under a temp
/// name, if there was one and the file system could link it.
fn replace(staging: &Path, target: &Path) -> std::io::Result<Option<PathBuf>> {
    let old = std::fs::symlink_metadata(target).ok().filter(|m| m.is_file());
    let backup = match old {
        Some(_) => {
            keep_mode(&File::open(staging)?, target)?;
            let backup = target.with_file_name(temp_name(target));
            std::fs::hard_link(target, &backup).ok().map(|_| backup)
        }
        None => None,
    };
    if let Err(e) = std::fs::rename(staging, target) {
        if let Some(backup) = &backup {
            let _ = std::fs::remove_file(backup);
        }
        return Err(crate::fs::atomic::refused_replace(e));
    }
    Ok(backup)
}

/// Removes an older file kept by [`replace`]. Freeing a large file's page
/// cache costs ~0.5 s per GiB in whichever thread closes it last: held open
/// here, that is a background thread (as `atomic` does for a file it
/// replaces).
fn release(backup: &Path) {
    let open = File::open(backup).ok().filter(|f| f.metadata().is_ok_and(|m| m.len() >= 64 << 20));
    let _ = std::fs::remove_file(backup);
    if let Some(file) = open {
        let _ = std::thread::Builder::new().name("deathtensors-free".into()).spawn(move || drop(file));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("dt-staged-{}-{}", std::process::id(), rand_suffix()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn nothing_is_at_the_targets_before_the_commit_and_a_drop_removes_the_staged_files() {
        let d = dir();
        std::fs::write(d.join("a"), b"old a").unwrap();
        let mut set = StagedFiles::new(false);
        set.write(&d.join("a"), |p| {
            crate::fs::atomic::write_file(p, b"new a", false).map_err(|e| Error::io(e, p, DOING))
        })
        .unwrap();
        set.write(&d.join("b"), |p| {
            crate::fs::atomic::write_file(p, b"new b", false).map_err(|e| Error::io(e, p, DOING))
        })
        .unwrap();
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"old a");
        assert!(!d.join("b").exists());
        drop(set);
        assert_eq!(names(&d), ["a"]);
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"old a");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_commit_replaces_every_target_and_leaves_nothing_else() {
        let d = dir();
        std::fs::write(d.join("a"), b"old a").unwrap();
        let mut set = StagedFiles::new(true);
        for (n, bytes) in [("a", b"new a"), ("b", b"new b")] {
            set.write(&d.join(n), |p| {
                crate::fs::atomic::write_file(p, bytes, true).map_err(|e| Error::io(e, p, DOING))
            })
            .unwrap();
        }
        set.commit().unwrap();
        assert_eq!(names(&d), ["a", "b"]);
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"new a");
        assert_eq!(std::fs::read(d.join("b")).unwrap(), b"new b");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_rename_undoes_the_commit() {
        let d = dir();
        std::fs::write(d.join("a"), b"old a").unwrap();
        // "c" is a non-empty directory: renaming a file over it fails.
        std::fs::create_dir_all(d.join("c").join("x")).unwrap();
        let mut set = StagedFiles::new(false);
        for n in ["a", "b", "c"] {
            set.write(&d.join(n), |p| {
                crate::fs::atomic::write_file(p, b"new", false).map_err(|e| Error::io(e, p, DOING))
            })
            .unwrap();
        }
        let e = set.commit().unwrap_err();
        assert_eq!(e.path(), Some(d.join("c").as_path()));
        assert_eq!(names(&d), ["a", "c"]);
        assert_eq!(std::fs::read(d.join("a")).unwrap(), b"old a");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_failed_write_names_the_target_and_leaves_nothing() {
        let d = dir();
        let mut set = StagedFiles::new(false);
        let e = set
            .write(&d.join("a"), |p| {
                Err::<(), _>(Error::io(std::io::Error::from(std::io::ErrorKind::StorageFull), p, DOING))
            })
            .unwrap_err();
        assert_eq!(e.path(), Some(d.join("a").as_path()));
        drop(set);
        assert!(names(&d).is_empty());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
