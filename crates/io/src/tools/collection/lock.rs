//! One writer at a time: an exclusive lock on `writer.lock` in the
//! collection directory, held while the writer lives.
//!
//! The lock is the operating system's (`flock` on Unix, `LockFileEx` on
//! Windows) on an open file description: it is released when the process
//! dies, however it dies, and a second open in the same process (another
//! thread, another handle) is refused like another process.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Error, ErrorKind, Result};

pub use deathtensors_format::LOCK_NAME;

/// A held writer lock; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct WriterLock {
    _file: File,
}

impl WriterLock {
    /// Takes the lock of the collection at `dir`, or fails at once naming the
    /// lock file and the process that holds it.
    pub(crate) fn acquire(dir: &Path) -> Result<WriterLock> {
        let path = dir.join(LOCK_NAME);
        let doing = "cannot open for writing";
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(e, &path, doing))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                let who = if holder.is_empty() { String::new() } else { format!(" (held by {holder})") };
                return Err(Error::new(
                    ErrorKind::Locked(format!(
                        "the collection is open for writing elsewhere: lock {}{who} is taken; \
                         one writer at a time (readers need no lock)",
                        path.display()
                    )),
                    Some(dir),
                    doing,
                ));
            }
            Err(TryLockError::Error(e)) => return Err(Error::io(e, &path, doing)),
        }
        // Who holds it, for the next writer's error message.
        let me = format!("process {} on {}", std::process::id(), host());
        let _ =
            file.set_len(0).and_then(|()| file.seek(SeekFrom::Start(0))).and_then(|_| file.write_all(me.as_bytes()));
        Ok(WriterLock { _file: file })
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this host".into())
}
