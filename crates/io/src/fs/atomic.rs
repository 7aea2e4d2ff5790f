//! Crash-safe replacement of a file: the target is either the old file or
//! the complete new one, and no temp file stays behind.
//!
//! On Linux the new file is an unnamed `O_TMPFILE` in the target's directory:
//! a process killed mid-write leaves nothing at all. When complete it is
//! linked under a temp name and renamed over the target. Elsewhere (or on
//! filesystems without `O_TMPFILE`) a named temp file is used, removed on
//! error or drop; temp files left by a killed process are removed by the next
//! save to the same directory.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::options::WriteOptions;

/// Suffix of our temp files, so stale ones can be recognised.
const TEMP_SUFFIX: &str = ".dt-tmp";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Old files at least this large are released in the background when
/// replaced (see `TempFile::persist`); smaller ones cost nothing to free.
const DEFERRED_FREE_MIN: u64 = 64 << 20;

/// A file being written that will atomically replace `target`.
#[derive(Debug)]
pub(crate) struct TempFile {
    file: File,
    target: PathBuf,
    dir: PathBuf,
    /// The temp file's name, when it has one (not `O_TMPFILE`).
    named: Option<PathBuf>,
    durable: bool,
    /// Once fsynced, the file leaves the page cache (durable files only).
    drop_cache: bool,
}

/// A temp name beside `target` (`.<name>.<pid>.<n>.dt-tmp`): removed by
/// the next save to its directory once this process is gone.
pub(crate) fn temp_name(target: &Path) -> OsString {
    let mut name = OsString::from(".");
    name.push(target.file_name().unwrap_or_default());
    name.push(format!(".{}.{}{TEMP_SUFFIX}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    name
}

/// Whether a temp file named by `temp_name` belongs to a process that is gone.
fn is_stale(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(TEMP_SUFFIX) else {
        return false;
    };
    let mut parts = stem.rsplitn(3, '.');
    let (_counter, pid) = (parts.next(), parts.next());
    let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    if pid == std::process::id() {
        return false;
    }
    crate::fs::process::lives(u64::from(pid)) == Some(false)
}

/// Removes temp files of ours in `dir` whose writer died (their names end
/// in our suffix and carry the writer's process id).
fn clean_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if let Some(name) = name.to_str() {
            if name.starts_with('.') && is_stale(name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Gives the temp file the permission bits of the file it will replace, if
/// any, before anything is written to it: replacing a file the user made
/// private (0600) never widens who can read it. A new file gets the
/// process's default (0644 less the umask).
#[cfg(unix)]
pub(crate) fn keep_mode(file: &File, target: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(target) {
        Ok(old) if old.is_file() => {
            file.set_permissions(std::fs::Permissions::from_mode(old.permissions().mode() & 0o777))
        }
        _ => Ok(()),
    }
}

#[cfg(not(unix))]
pub(crate) fn keep_mode(_file: &File, _target: &Path) -> io::Result<()> {
    Ok(())
}

impl TempFile {
    /// Creates the temp file beside `target`, with the permissions of the
    /// file it replaces (see [`keep_mode`]).
    pub(crate) fn create(target: &Path, durable: bool) -> io::Result<TempFile> {
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        clean_stale(&dir);
        #[cfg(target_os = "linux")]
        {
            use rustix::fs::{Mode, OFlags};
            use rustix::io::Errno;
            // Unnamed until complete: a killed writer leaves nothing behind.
            let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
            match rustix::fs::openat(rustix::fs::CWD, &dir, flags, Mode::from_raw_mode(0o644)) {
                Ok(fd) => {
                    let file = File::from(fd);
                    keep_mode(&file, target)?;
                    return Ok(TempFile {
                        file,
                        target: target.to_path_buf(),
                        dir,
                        named: None,
                        durable,
                        drop_cache: false,
                    });
                }
                // Filesystems without O_TMPFILE: fall back to a named file.
                Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let path = dir.join(temp_name(target));
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let temp = TempFile { file, target: target.to_path_buf(), dir, named: Some(path), durable, drop_cache: false };
        keep_mode(&temp.file, target)?;
        Ok(temp)
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// The temp file of a save with `options`: fsynced if `durable`, and
    /// then dropped from the page cache if `drop_cache`.
    pub(crate) fn for_write(target: &Path, options: &WriteOptions) -> io::Result<TempFile> {
        let mut temp = TempFile::create(target, options.durable)?;
        temp.drop_cache = options.drops_cache();
        Ok(temp)
    }

    /// Makes the file durable and moves it over the target.
    pub(crate) fn persist(mut self) -> io::Result<()> {
        if self.durable {
            // Data and metadata on disk before the rename makes them visible:
            // otherwise a power loss can leave a renamed but empty file.
            self.file.sync_all()?;
            if self.drop_cache {
                // Every page is on the disk now: what the writeback left
                // (its last ranges, the header written over at the end).
                crate::fs::writeback::drop_cached(&self.file, &(0..0));
            }
        }
        let from = match self.named.take() {
            Some(path) => path,
            None => self.link()?,
        };
        // Replacing a large file frees its page cache inside rename(), which
        // costs ~0.5 s per GiB in the caller's time. Holding the old file
        // open moves that work to whichever thread closes it last: ours, in
        // the background. Only on unix: Windows refuses to replace an open
        // file.
        let old = if cfg!(unix) {
            File::open(&self.target).ok().filter(|f| f.metadata().is_ok_and(|m| m.len() >= DEFERRED_FREE_MIN))
        } else {
            None
        };
        if let Err(e) = std::fs::rename(&from, &self.target) {
            let _ = std::fs::remove_file(&from);
            return Err(refused_replace(e));
        }
        if let Some(old) = old {
            // If the thread cannot start, the file is closed here instead.
            let _ = std::thread::Builder::new().name("deathtensors-free".into()).spawn(move || drop(old));
        }
        if self.durable {
            // The rename itself is durable only once the directory is synced.
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Gives an `O_TMPFILE` a temp name in the target's directory.
    #[cfg(target_os = "linux")]
    fn link(&self) -> io::Result<PathBuf> {
        use std::os::unix::io::AsRawFd;
        let path = self.dir.join(temp_name(&self.target));
        // Linking an O_TMPFILE through /proc needs no privilege (AT_EMPTY_PATH does).
        let proc = format!("/proc/self/fd/{}", self.file.as_raw_fd());
        let cwd = rustix::fs::CWD;
        rustix::fs::linkat(cwd, proc.as_str(), cwd, &path, rustix::fs::AtFlags::SYMLINK_FOLLOW)?;
        Ok(path)
    }

    #[cfg(not(target_os = "linux"))]
    fn link(&self) -> io::Result<PathBuf> {
        unreachable!("only Linux creates unnamed temp files")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(path) = &self.named {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A rename over the target that failed. Windows refuses to replace a file
/// that is open (without delete sharing) or mapped, by any process: the
/// error then says so; the old file is untouched (docs/PLATFORMS.md).
pub(crate) fn refused_replace(e: io::Error) -> io::Error {
    if cfg!(windows) && e.kind() == io::ErrorKind::PermissionDenied {
        io::Error::new(
            e.kind(),
            format!(
                "{e}: the file is open or mapped (by this or another program), and Windows refuses to replace an open \
                 file; it is unchanged: close it and save again"
            ),
        )
    } else {
        e
    }
}

#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
pub(crate) fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Windows has no directory fsync; MoveFileEx is durable with the file flushed.
    Ok(())
}

/// Writes `bytes` to `target` atomically, the one temp-file scheme of the
/// house (a temp file beside the target, renamed over it; with `durable`,
/// synced, then the directory): a reader finds the old file or the new
/// one, and a failed write leaves the old one and no temp file. For small
/// files (indexes, checkpoint documents, markers).
///
/// # Errors
/// `Io` naming `target`.
pub fn write_file_atomic(target: &Path, bytes: &[u8], durable: bool) -> crate::Result<()> {
    write_file(target, bytes, durable).map_err(|e| crate::Error::io(e, target, "cannot write"))
}

/// Writes `bytes` to `target` atomically (small files: indexes).
pub(crate) fn write_file(target: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    use std::io::Write;
    let temp = TempFile::create(target, durable)?;
    let mut f = temp.file();
    f.write_all(bytes)?;
    temp.persist()
}
