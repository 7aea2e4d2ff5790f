//! Writeback that keeps pace with a durable write.
//!
//! An fsync at the end of a save starts writing the file to disk only then:
//! the disk idles while the file is written, then the writer idles while the
//! disk works. Instead, on Linux, each range is handed to the disk as soon
//! as it is written (`sync_file_range` with `SYNC_FILE_RANGE_WRITE`), and
//! the writer waits for the ranges it wrote a while ago, which bounds the
//! dirty pages a save piles up. The fsync still follows (it is what makes
//! data and metadata durable), and finds little left to do. Elsewhere, and
//! for saves that are not durable, nothing changes.
//!
//! With `drop_cache`, each range the writer has waited for, and the whole
//! file once fsynced, also leaves the page cache (`POSIX_FADV_DONTNEED`):
//! a large write kept for later (a checkpoint) neither evicts what the
//! machine had cached nor holds its own size in memory. The kernel frees
//! those pages during the write, which the write then pays for.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::ops::Range;

use crate::fs::pread::write_all_at;
use crate::options::WriteOptions;

/// A range is handed to the disk once this much of it is written: large
/// requests, few system calls, and an early start (2 to 16 MiB measured
/// alike on a virtio disk). Ranges end on multiples of it, so on page
/// boundaries: a writer that touches a page being written back waits for
/// the disk (unaligned ranges made a save about 1.5x slower).
const CHUNK: u64 = 4 << 20;

/// A range left behind by a write elsewhere is handed over only if at least
/// this large; smaller ones wait for the fsync, which merges them.
const MIN_RANGE: u64 = 256 << 10;

/// The writer waits for ranges this far behind it: the dirty backlog of a
/// save. Less makes a writer faster than the disk wait more (32 MiB: 10%
/// slower on a virtio disk than 128 MiB).
const LAG: u64 = 128 << 20;

/// Hands a durable file's data to the disk as it is written.
#[derive(Debug)]
pub(crate) struct Writeback {
    on: bool,
    /// Drop each range from the page cache once waited for.
    drop_cache: bool,
    /// Written, not yet handed to the disk.
    pending: Range<u64>,
    /// Handed to the disk, oldest first, not yet waited for.
    started: VecDeque<Range<u64>>,
    /// The bytes in `started`.
    in_flight: u64,
    /// Every call made, for the tests.
    #[cfg(test)]
    log: Vec<(SyncRange, Range<u64>)>,
    /// Every range dropped from the page cache, for the tests.
    #[cfg(test)]
    dropped: Vec<Range<u64>>,
}

impl Writeback {
    /// Starts tracking a file; does nothing unless `durable`.
    pub(crate) fn new(durable: bool) -> Writeback {
        Writeback {
            on: durable && cfg!(target_os = "linux"),
            drop_cache: false,
            pending: 0..0,
            started: VecDeque::new(),
            in_flight: 0,
            #[cfg(test)]
            log: Vec::new(),
            #[cfg(test)]
            dropped: Vec::new(),
        }
    }

    /// Also drops each range from the page cache once it is on the disk,
    /// if `drop` (durable writes only: a range not on the disk stays).
    pub(crate) fn dropping_cache(mut self, drop: bool) -> Writeback {
        self.drop_cache = drop && self.on;
        self
    }

    /// The writeback of a save with `options` (`durable`, `drop_cache`).
    pub(crate) fn for_write(options: &WriteOptions) -> Writeback {
        Writeback::new(options.durable).dropping_cache(options.drops_cache())
    }

    /// Writes `buf` to `file` at `at`, in pieces handed to the disk as they go.
    pub(crate) fn write_at(&mut self, file: &File, buf: &[u8], at: u64) -> io::Result<()> {
        if !self.on {
            return write_all_at(file, buf, at);
        }
        let (mut at, mut buf) = (at, buf);
        while !buf.is_empty() {
            let (piece, rest) = buf.split_at(to_boundary(at, buf.len()));
            write_all_at(file, piece, at)?;
            self.wrote(file, at, piece.len() as u64)?;
            (at, buf) = (at + piece.len() as u64, rest);
        }
        Ok(())
    }

    /// Records that `len` bytes were written to `file` at `at`.
    fn wrote(&mut self, file: &File, at: u64, len: u64) -> io::Result<()> {
        if !self.on || len == 0 {
            return Ok(());
        }
        // Alignment gaps (never written: holes or zeros) join the range.
        let continues = at >= self.pending.end && at - self.pending.end < MIN_RANGE;
        if !continues {
            let left = std::mem::replace(&mut self.pending, at..at);
            if left.end - left.start >= MIN_RANGE {
                self.start(file, left)?;
            }
        }
        self.pending.end = at + len;
        if self.pending.end - self.pending.start >= CHUNK {
            let cut = self.pending.end / CHUNK * CHUNK;
            let range = self.pending.start..cut;
            self.pending.start = cut;
            self.start(file, range)?;
        }
        Ok(())
    }

    fn start(&mut self, file: &File, range: Range<u64>) -> io::Result<()> {
        if !self.sync_range(file, &range, SyncRange::Start)? {
            return Ok(());
        }
        self.in_flight += range.end - range.start;
        self.started.push_back(range);
        while let Some(oldest) = self.started.front() {
            let len = oldest.end - oldest.start;
            if self.in_flight - len < LAG {
                break;
            }
            let oldest = self.started.pop_front().expect("checked above");
            self.in_flight -= len;
            if self.sync_range(file, &oldest, SyncRange::Wait)? && self.drop_cache {
                drop_cached(file, &oldest);
                #[cfg(test)]
                self.dropped.push(oldest);
            }
        }
        Ok(())
    }

    /// Returns whether the call was made; turns itself off where the system
    /// does not support it (the fsync then does all the work).
    fn sync_range(&mut self, file: &File, range: &Range<u64>, how: SyncRange) -> io::Result<bool> {
        match sync_file_range(file, range, how) {
            Ok(()) => {
                #[cfg(test)]
                self.log.push((how, range.clone()));
                Ok(true)
            }
            // A real error (EIO, ENOSPC) is reported: once a wait has seen
            // it, the final fsync on this file no longer would.
            Err(e) if !is_unsupported(&e) => Err(e),
            Err(_) => {
                self.on = false;
                Ok(false)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SyncRange {
    /// Start writeback of the range's dirty pages.
    Start,
    /// Write the range and wait until it is on the disk.
    Wait,
}

#[cfg(target_os = "linux")]
fn sync_file_range(file: &File, range: &Range<u64>, how: SyncRange) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // rustix has no sync_file_range; libc's binding is the one system call.
    let flags = match how {
        SyncRange::Start => libc::SYNC_FILE_RANGE_WRITE,
        SyncRange::Wait => {
            libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER
        }
    };
    let (Ok(at), Ok(len)) = (i64::try_from(range.start), i64::try_from(range.end - range.start)) else {
        return Ok(());
    };
    // SAFETY: the call takes integers only; the descriptor is `file`'s,
    // open for the duration of the borrow.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), at, len, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to drop `file`'s pages in `range` (`0..0`: all of them)
/// from the page cache: pages already on the disk go, dirty ones stay. A
/// hint: its errors change nothing, so they are ignored.
#[cfg(target_os = "linux")]
pub(crate) fn drop_cached(file: &File, range: &Range<u64>) {
    let len = std::num::NonZeroU64::new(range.end - range.start);
    let _ = rustix::fs::fadvise(file, range.start, len, rustix::fs::Advice::DontNeed);
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn drop_cached(_file: &File, _range: &Range<u64>) {}

#[cfg(not(target_os = "linux"))]
fn sync_file_range(_file: &File, _range: &Range<u64>, _how: SyncRange) -> io::Result<()> {
    Ok(())
}

/// Errors that mean "not here": an old kernel or a seccomp filter
/// (ENOSYS), or a file that is not a regular one (EINVAL, ESPIPE).
fn is_unsupported(e: &io::Error) -> bool {
    #[cfg(target_os = "linux")]
    {
        matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL | libc::ESPIPE | libc::EOPNOTSUPP))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = e;
        true
    }
}

/// How many of `len` bytes written at `at` fit before the next multiple of
/// `CHUNK`.
fn to_boundary(at: u64, len: usize) -> usize {
    let room = CHUNK - at % CHUNK;
    len.min(usize::try_from(room).unwrap_or(usize::MAX))
}

/// A file written front to back from offset 0 through its cursor (so that
/// writes after it continue where it ended), handed to the disk as it goes.
#[derive(Debug)]
pub(crate) struct Sequential<'f> {
    file: &'f File,
    at: u64,
    writeback: Writeback,
}

impl<'f> Sequential<'f> {
    /// Writes `file` for a save with `options`, from offset `at`, where the
    /// caller has put its position.
    pub(crate) fn for_write(file: &'f File, options: &WriteOptions, at: u64) -> Sequential<'f> {
        Sequential { file, at, writeback: Writeback::for_write(options) }
    }
}

impl Write for Sequential<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Large buffers go in pieces, so that the disk starts on the first
        // while the next is copied.
        let buf = if self.writeback.on { &buf[..to_boundary(self.at, buf.len())] } else { buf };
        let mut file = self.file;
        let n = file.write(buf)?;
        self.writeback.wrote(self.file, self.at, n as u64)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
