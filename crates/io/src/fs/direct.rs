//! Writes around the page cache: a durable save with `drop_cache`, written
//! front to back, goes to the disk with `O_DIRECT` (Linux).
//!
//! A buffered write first fills the page cache, which costs a page
//! allocation per 4 KiB (on a VM whose host has taken the free memory back,
//! most of a save's time), and a `drop_cache` save then frees those pages
//! again. A direct write copies each 4 MiB into one aligned buffer and hands
//! it to the disk from there: no page of the file is ever cached, and the
//! save costs the disk's time and a memcpy. The fsync still follows (it
//! flushes the disk's cache and the file's metadata).
//!
//! Where the file system refuses `O_DIRECT` (tmpfs before Linux 6.6, some FUSE),
//! no direct writer is made and the caller writes through the page cache as
//! usual; where it takes the flag but refuses an aligned write (`EINVAL`: a
//! block larger than 4 KiB), the writer turns the flag off and goes on
//! buffered from there, the same bytes either way.

use std::fs::File;
use std::io::{self, Seek, Write};

use crate::fs::pread::write_all_at;
use crate::options::WriteOptions;

/// Bytes handed to the disk per write: large requests, one buffer's worth
/// of memory.
const CHUNK: usize = 4 << 20;

/// What direct writes are aligned to (offsets, lengths and the buffer's
/// address): the largest logical block of common disks.
const BLOCK: usize = 4096;

/// A file written front to back from offset 0 around the page cache.
#[derive(Debug)]
pub(crate) struct Direct<'f> {
    file: &'f File,
    /// Where `buf`'s bytes go in the file.
    at: u64,
    /// Page-aligned: an anonymous map.
    buf: memmap2::MmapMut,
    /// Bytes of `buf` filled.
    len: usize,
    /// Whether the file is still open with `O_DIRECT`.
    direct: bool,
}

impl<'f> Direct<'f> {
    /// The direct writer of a save with `options` to `file` (empty, written
    /// from offset 0), if they ask for a durable file out of the page cache
    /// and the file system takes `O_DIRECT`; `None` otherwise, and the file
    /// is as it was.
    pub(crate) fn for_write(file: &'f File, options: &WriteOptions) -> Option<Direct<'f>> {
        if !options.drops_cache() {
            return None;
        }
        Direct::new(file)
    }

    #[cfg(target_os = "linux")]
    fn new(file: &'f File) -> Option<Direct<'f>> {
        let buf = memmap2::MmapMut::map_anon(CHUNK).ok()?;
        set_direct(file, true).ok()?;
        Some(Direct { file, at: 0, buf, len: 0, direct: true })
    }

    #[cfg(not(target_os = "linux"))]
    fn new(_file: &'f File) -> Option<Direct<'f>> {
        None
    }

    /// Writes the buffer's bytes to the file and empties it.
    fn spill(&mut self) -> io::Result<()> {
        match write_all_at(self.file, &self.buf[..self.len], self.at) {
            // EINVAL: the alignment, or a flag the file system dropped.
            Err(e) if self.direct && e.kind() == io::ErrorKind::InvalidInput => {
                // The file system wants more alignment than BLOCK: the rest
                // goes through the page cache (this buffer again, whole).
                self.turn_off()?;
                write_all_at(self.file, &self.buf[..self.len], self.at)?;
            }
            r => r?,
        }
        self.at += self.len as u64;
        self.len = 0;
        Ok(())
    }

    /// Writes what is left, turns `O_DIRECT` off and puts the file's cursor
    /// at its end (where later writes, a footer, continue); returns the
    /// file's length.
    pub(crate) fn finish(mut self) -> io::Result<u64> {
        let end = self.at + self.len as u64;
        if self.direct {
            // A direct write's length is whole blocks: the tail goes padded
            // with zeros, cut off again below.
            let padded = self.len.div_ceil(BLOCK) * BLOCK;
            self.buf[self.len..padded].fill(0);
            self.len = padded;
        }
        self.spill()?;
        if self.direct {
            self.turn_off()?;
            self.file.set_len(end)?;
        }
        let mut file = self.file;
        file.seek(io::SeekFrom::Start(end))?;
        Ok(end)
    }

    /// Goes on through the page cache from here.
    fn turn_off(&mut self) -> io::Result<()> {
        set_direct(self.file, false)?;
        self.direct = false;
        Ok(())
    }
}

impl Write for Direct<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(CHUNK - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&buf[..n]);
        self.len += n;
        if self.len == CHUNK {
            self.spill()?;
        }
        Ok(n)
    }

    /// Nothing: the buffer is written whole blocks at a time, and its tail
    /// by [`Direct::finish`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Turns `O_DIRECT` on or off for `file` (every descriptor of its open file).
#[cfg(target_os = "linux")]
fn set_direct(file: &File, on: bool) -> io::Result<()> {
    use rustix::fs::OFlags;
    let flags = rustix::fs::fcntl_getfl(file)?;
    let flags = if on { flags | OFlags::DIRECT } else { flags - OFlags::DIRECT };
    Ok(rustix::fs::fcntl_setfl(file, flags)?)
}

#[cfg(not(target_os = "linux"))]
fn set_direct(_file: &File, _on: bool) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests;
