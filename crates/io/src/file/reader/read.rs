//! Reading tensors: borrowed from a mapping, copied into buffers, the
//! whole data blob at once.

use std::fs::File;

use super::Reader;
use crate::error::{Error, Result};
use crate::fs::hash;
use crate::fs::mount::Mount;
use crate::fs::pread::{read_exact_at, ReadAt, Source};
use crate::trust::access;

/// Fills `buf` from `file` at `offset`; large reads are split over all
/// cores, so that the kernel's copies run in parallel (one thread copies
/// from the page cache at ~3.5 GB/s here). Worth it for buffers backed by
/// huge pages (the Python arena); with small pages the threads contend on
/// page faults instead.
pub(crate) fn read_parallel(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    // Below this, one thread is as fast as several.
    const PARALLEL_MIN: usize = 16 << 20;
    let threads = if buf.len() < PARALLEL_MIN { 1 } else { hash::threads() };
    if threads == 1 {
        return read_exact_at(file, buf, offset);
    }
    let chunk = buf.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks_mut(chunk)
            .enumerate()
            .map(|(i, part)| s.spawn(move || read_exact_at(file, part, offset + (i * chunk) as u64)))
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

/// Reads `buf` from `file` at `offset` on a network or user-space file
/// system ([`Mount::Shared`]): 4 MiB requests, 16 in flight, each a round
/// trip the others overlap (the requests wait on the server, not on the
/// cores, so more of them than cores pay).
pub(crate) fn read_shared(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    const REQUEST: usize = 4 << 20;
    const IN_FLIGHT: usize = 16;
    if buf.len() <= REQUEST {
        return read_exact_at(file, buf, offset);
    }
    let parts: Vec<std::sync::Mutex<(u64, &mut [u8])>> = buf
        .chunks_mut(REQUEST)
        .enumerate()
        .map(|(i, part)| std::sync::Mutex::new((offset + (i * REQUEST) as u64, part)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..IN_FLIGHT.min(parts.len()))
            .map(|_| {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(part) = parts.get(i) else { return Ok(()) };
                    let mut part = part.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (at, bytes) = &mut *part;
                    read_exact_at(file, bytes, *at)?;
                })
            })
            .collect();
        workers.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

impl Reader {
    /// Refuses a caller's buffer that is not `len` bytes: "buffer is N
    /// bytes, {what} {len}".
    pub(super) fn check_buffer(&self, buf: &[u8], len: u64, what: &str) -> Result<()> {
        if buf.len() as u64 == len {
            return Ok(());
        }
        Err(Error::input(format!("buffer is {} bytes, {what} {len}", buf.len()), &self.path, "cannot read"))
    }

    /// Fetches the stored bytes of the named tensors ahead, for sources
    /// that read ranges remotely ([`Reader::open_source`]), which coalesce
    /// neighbours into one request; a local file ignores it. Names not in
    /// the file are skipped (reading them reports it), and so is a file
    /// whose blob is one zstd frame (read whole anyway).
    ///
    /// # Errors
    /// `Io` if the source fails.
    pub fn prefetch(&self, names: &[&str]) -> Result<()> {
        if !self.is_remote() || self.head.is_compressed() {
            return Ok(());
        }
        let mut ranges: Vec<(u64, u64)> = names
            .iter()
            .filter_map(|n| self.head.header.get(n))
            .map(|t| (self.head.data_start + t.data_offsets.0, t.data_offsets.1 - t.data_offsets.0))
            .collect();
        self.file.prefetch(&mut ranges).map_err(|e| Error::io(e, &self.path, "cannot read"))
    }

    /// The tensor's bytes without copying: borrowed from the mapping, or from
    /// the decompressed blob of a compressed file.
    ///
    /// # Errors
    /// - `TensorNotFound` if there is no such tensor.
    /// - `InvalidInput` if the file is neither mapped ([`Reader::open_mmap`])
    ///   nor compressed: use [`Reader::read`].
    /// - `Decompress` if a compressed blob is corrupt.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        self.plaintext_only("cannot borrow")?;
        self.unchecked_only("cannot borrow")?;
        let bytes = self.bytes_unchecked(name)?;
        Ok(bytes)
    }

    pub(super) fn bytes_unchecked(&self, name: &str) -> Result<&[u8]> {
        let t = self.tensor(name)?;
        if self.packed(name).is_some() {
            return Err(Error::input(
                format!("tensor {name:?} is stored compressed: read it with read() or read_into()"),
                &self.path,
                "cannot borrow",
            ));
        }
        let (start, end) = t.info.data_offsets;
        if self.head.is_compressed() {
            return Ok(&self.blob()?[start as usize..end as usize]);
        }
        if !self.mappable {
            return Err(Error::input(
                "the file is not mapped: open it with open_mmap for zero-copy access, or use read()",
                &self.path,
                "cannot borrow",
            ));
        }
        let map = self.map()?;
        Ok(&map.bytes()[t.file_offset as usize..(t.file_offset + (end - start)) as usize])
    }

    /// Maps the data blob copy-on-write: the fastest way to load a whole
    /// warm file into memory the caller may write to, since the pages stay
    /// the page cache's until written, with no copy and no fresh memory.
    /// Tensor `t`'s bytes are at `t.info.data_offsets` in the result, at an
    /// address aligned as [`TensorRef::is_aligned`](crate::TensorRef::is_aligned) says.
    ///
    /// # Safety
    /// The file must not be truncated or modified in place while the
    /// mapping lives: pages not yet written see the change, and a truncation
    /// makes access to them kill the process with SIGBUS. A file replaced by
    /// a rename (as our writers do) is safe. Owned reads ([`Reader::read`])
    /// have no such condition.
    ///
    /// # Errors
    /// - `InvalidInput` for a compressed file (its blob must be decompressed:
    ///   use [`Reader::read`] or [`Reader::bytes`]).
    /// - `Io` if the file cannot be mapped or changed size since it was opened.
    pub unsafe fn map_private(&self) -> Result<crate::PrivateMap> {
        self.plaintext_only("cannot map")?;
        self.unchecked_only("cannot map")?;
        if self.head.is_chunk_compressed() {
            return Err(Error::input(
                "the tensors are stored compressed: read them with read_data_into() or read()",
                &self.path,
                "cannot map",
            ));
        }
        let (start, end) = (self.head.data_start, self.head.data_end);
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { self.map_range(start, end - start) }
    }

    /// Maps one tensor's bytes copy-on-write, as [`Reader::map_private`]
    /// does the whole blob.
    ///
    /// # Safety
    /// As [`Reader::map_private`].
    ///
    /// # Errors
    /// As [`Reader::map_private`], and `TensorNotFound`.
    pub unsafe fn map_tensor_private(&self, name: &str) -> Result<crate::PrivateMap> {
        self.plaintext_only("cannot map")?;
        self.unchecked_only("cannot map")?;
        let t = self.tensor(name)?;
        if self.packed(name).is_some() {
            return Err(Error::input(
                format!("tensor {name:?} is stored compressed: read it with read() or read_into()"),
                &self.path,
                "cannot map",
            ));
        }
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { self.map_range(t.file_offset, t.info.byte_len()) }
    }

    /// # Safety
    /// As [`Reader::map_private`].
    pub(super) unsafe fn map_range(&self, start: u64, len: u64) -> Result<crate::PrivateMap> {
        let doing = "cannot map";
        if self.head.is_compressed() {
            return Err(Error::input("the data blob is compressed: it cannot be mapped", &self.path, doing));
        }
        let Some(file) = self.file.file() else {
            return Err(Error::input("a remote file cannot be mapped: read it", &self.path, doing));
        };
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { crate::PrivateMap::map(file, self.file_len, start, len) }.map_err(|e| Error::io(e, &self.path, doing))
    }

    /// Reads the tensor's bytes into `buf`, which must be exactly as long as
    /// the tensor. Uses positioned reads, never the mapping.
    ///
    /// # Errors
    /// - `TensorNotFound`, `InvalidInput` for a wrong buffer length.
    /// - `Io` if the file cannot be read (for example, it was truncated).
    /// - `Decompress` for a corrupt compressed blob.
    pub fn read_into(&self, name: &str, buf: &mut [u8]) -> Result<()> {
        let t = self.tensor(name)?;
        self.check_buffer(buf, t.info.byte_len(), &format!("tensor {name:?} is"))?;
        if self.is_encrypted() {
            return self.decrypt_into(name, 0, buf);
        }
        if let Some(packed) = self.packed(name) {
            packed.read_range(0, buf)?;
        } else if self.head.is_compressed() {
            let (start, end) = t.info.data_offsets;
            buf.copy_from_slice(&self.blob()?[start as usize..end as usize]);
        } else {
            let shared = match (&self.file, self.mount()) {
                (Source::File(file), Mount::Shared(_)) => Some(file),
                _ => None,
            };
            match shared {
                // A network or user-space file system: many requests in
                // flight, each a round trip.
                Some(file) => read_shared(file, buf, t.file_offset),
                // One thread: into a fresh buffer of small pages, parallel
                // readers contend on its page faults and are slower (measured).
                None => read_exact_at(&self.file, buf, t.file_offset),
            }
            .map_err(|e| Error::io(e, &self.path, "cannot read"))?;
        }
        if let Err(e) = self.check_read(name, buf) {
            buf.fill(0);
            return Err(e);
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes of the tensor starting `offset` bytes into it,
    /// for streaming through a tensor in chunks (positioned reads).
    ///
    /// # Errors
    /// As [`Reader::read_into`]; `InvalidInput` if the range is past the tensor.
    pub fn read_range_into(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        let t = self.tensor(name)?;
        let len = t.info.byte_len();
        let end = offset.checked_add(buf.len() as u64).filter(|&e| e <= len);
        let Some(end) = end else {
            return Err(Error::input(
                format!("range {offset}+{} is past the end of tensor {name:?} ({len} bytes)", buf.len()),
                &self.path,
                "cannot read",
            ));
        };
        if self.is_encrypted() {
            return self.decrypt_into(name, offset, buf);
        }
        if self.trust.checked_reads {
            // A slice comes from the whole tensor, read once and checked.
            let whole = self.read(name)?;
            buf.copy_from_slice(&whole[offset as usize..end as usize]);
            return Ok(());
        }
        if let Some(packed) = self.packed(name) {
            return packed.read_range(offset, buf);
        }
        if self.head.is_compressed() {
            let start = t.info.data_offsets.0 + offset;
            buf.copy_from_slice(&self.blob()?[start as usize..(start + (end - offset)) as usize]);
            return Ok(());
        }
        read_exact_at(&self.file, buf, t.file_offset + offset).map_err(|e| Error::io(e, &self.path, "cannot read"))
    }

    /// Reads the whole (decompressed) data blob into `buf`, which must be
    /// exactly [`Header::data_len`](deathtensors_format::Header::data_len) bytes: every tensor at its offset, gaps
    /// zero. Large reads are split over all cores, so page faults of a fresh
    /// buffer are taken in parallel. Positioned reads, never the mapping.
    ///
    /// # Errors
    /// `InvalidInput` for a wrong length; `Io`; `Decompress`.
    pub fn read_data_into(&self, buf: &mut [u8]) -> Result<()> {
        if self.head.is_chunk_compressed() {
            return self.read_unpacked_into(buf);
        }
        self.check_buffer(buf, self.head.header.data_len(), "the data blob is")?;
        if self.is_encrypted() {
            if self.head.header.encryption().is_some() {
                if let Some(done) = access::decrypt_all(&self.file, &self.path, &self.head, &self.trust, buf) {
                    return done;
                }
            }
            // Tensor by tensor (cryptotensors files, other writers' orders),
            // tensors spread over all cores.
            return self.decrypt_tensors(buf);
        }
        if self.head.is_compressed() {
            buf.copy_from_slice(self.blob()?);
        } else {
            match &self.file {
                Source::File(file) if matches!(self.mount(), Mount::Shared(_)) => {
                    read_shared(file, buf, self.head.data_start)
                }
                Source::File(file) => read_parallel(file, buf, self.head.data_start),
                Source::Other(source) if self.digest_reads() => return self.read_checked_windows(&**source, buf),
                // A remote source splits and parallelises one read itself.
                Source::Other(source) => source.read_exact_at(buf, self.head.data_start),
            }
            .map_err(|e| Error::io(e, &self.path, "cannot read"))?;
        }
        if self.digest_reads() {
            let layout: Vec<(u64, u64)> = self.head.header.tensors().iter().map(|t| t.data_offsets).collect();
            return self.check_laid_out(buf, &layout);
        }
        Ok(())
    }

    /// Reads the tensor's bytes into a fresh buffer the caller owns.
    ///
    /// # Errors
    /// As [`Reader::read_into`].
    pub fn read(&self, name: &str) -> Result<Vec<u8>> {
        let len = self.unpacked_tensor_len(name)?;
        let mut buf = vec![0u8; len as usize];
        self.read_into(name, &mut buf)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::read_shared;

    #[test]
    fn shared_reads_put_every_request_at_its_place() {
        let dir = deathtensors_testkit::scratch::Scratch::new("dt-io", "read-shared");
        let path = dir.join("blob");
        // 4 MiB requests: 9 full ones and a tail, from an odd offset.
        let data: Vec<u8> =
            (0..(37u32 << 20) / 4 + 3).flat_map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()).collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; data.len() - 5];
        read_shared(&file, &mut buf, 5).unwrap();
        assert!(buf == data[5..], "bytes out of place");
        let mut small = vec![0u8; 1000];
        read_shared(&file, &mut small, 7).unwrap();
        assert_eq!(small, data[7..1007]);
        // Past the end: an error, not a short buffer.
        let mut past = vec![0u8; 9 << 20];
        assert!(read_shared(&file, &mut past, data.len() as u64 - (8 << 20)).is_err());
    }
}
