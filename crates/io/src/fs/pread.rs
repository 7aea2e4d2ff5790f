//! Positioned reads: safe against a file truncated under us (an error, not
//! SIGBUS as with a mapping), from a local file or from any other source of
//! bytes ([`ReadAt`], such as an object on a remote store).

use std::fs::File;
use std::io;

/// Positioned reads of an immutable byte source: a local file, or an object
/// on a remote store (`deathtensors-remote`). A [`Reader`](crate::Reader)
/// opened on one ([`Reader::open_source`](crate::Reader::open_source))
/// reads everything through it, so every check a file gets (limits, header
/// validation, digests, signatures, decryption) applies.
pub trait ReadAt: Send + Sync + std::fmt::Debug {
    /// Fills `buf` with the bytes at `offset`, or fails (`UnexpectedEof`
    /// past the end). A failed read may leave `buf` partly written.
    ///
    /// # Errors
    /// Any I/O error of the source, which should name what failed.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// How many bytes one read should ask for when a caller streams through
    /// a long range (hashing a footer or a tensor), if not the caller's own
    /// choice (sized for the page cache): large for sources where each read
    /// is a request.
    fn stream_chunk(&self) -> Option<usize> {
        None
    }

    /// A hint: the byte ranges `(offset, len)` about to be read, for sources
    /// that fetch them ahead (coalescing neighbours). Files ignore it.
    ///
    /// # Errors
    /// As [`ReadAt::read_exact_at`].
    fn prefetch(&self, ranges: &mut [(u64, u64)]) -> io::Result<()> {
        let _ = ranges;
        Ok(())
    }
}

impl ReadAt for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        read_file_exact_at(self, buf, offset)
    }
}

/// Fills `buf` from `source` at `offset`, or fails with `UnexpectedEof`.
pub(crate) fn read_exact_at<R: ReadAt + ?Sized>(source: &R, buf: &mut [u8], offset: u64) -> io::Result<()> {
    source.read_exact_at(buf, offset)
}

/// Where a [`Reader`](crate::Reader) reads from: a local file (which may
/// also be mapped) or another [`ReadAt`] source (never mapped).
#[derive(Debug)]
pub(crate) enum Source {
    File(File),
    Other(Box<dyn ReadAt>),
}

impl Source {
    /// The local file, for mappings.
    pub(crate) fn file(&self) -> Option<&File> {
        match self {
            Source::File(f) => Some(f),
            Source::Other(_) => None,
        }
    }
}

impl ReadAt for Source {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match self {
            Source::File(f) => read_file_exact_at(f, buf, offset),
            Source::Other(r) => r.read_exact_at(buf, offset),
        }
    }

    fn stream_chunk(&self) -> Option<usize> {
        match self {
            Source::File(f) => f.stream_chunk(),
            Source::Other(r) => r.stream_chunk(),
        }
    }

    fn prefetch(&self, ranges: &mut [(u64, u64)]) -> io::Result<()> {
        match self {
            Source::File(_) => Ok(()),
            Source::Other(r) => r.prefetch(ranges),
        }
    }
}

/// Fills `buf` from `file` at `offset`, or fails with `UnexpectedEof`.
fn read_file_exact_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match read_at(file, buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("file ends at byte {offset}, before the data it declares (truncated while open?)"),
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, offset)
}

#[cfg(windows)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, offset)
}

/// Writes all of `buf` to `file` at `offset`.
pub(crate) fn write_all_at(file: &File, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match write_at(file, buf, offset) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0 bytes")),
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(unix)]
fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::write_at(file, buf, offset)
}

#[cfg(windows)]
fn write_at(file: &File, buf: &[u8], offset: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_write(file, buf, offset)
}
