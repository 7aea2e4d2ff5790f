//! The crate's only `unsafe`: mapping a file.

use std::fs::File;

/// A read-only mapping of a whole file.
#[derive(Debug)]
pub(crate) struct Mmap(memmap2::Mmap);

impl Mmap {
    /// Maps `file` read-only.
    ///
    /// # Safety
    /// The file must not be modified or truncated while mapped: a write
    /// changes bytes already validated, and a truncation makes access to the
    /// lost pages raise SIGBUS. Callers that cannot guarantee it use the
    /// positioned reads of [`crate::Reader`] instead, which never touch the
    /// mapping.
    pub(crate) unsafe fn map(file: &File) -> std::io::Result<Mmap> {
        // SAFETY: forwarded to the caller (see `# Safety`).
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        // Sequential readahead: loads read tensors front to back, and
        // MADV_RANDOM (as deathtensors 0.3.0 uses) makes cold reads crawl.
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(Mmap(map))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A private, copy-on-write mapping of a range of a file (a data blob, or
/// one tensor): writable, and what is written never reaches the file (the
/// kernel copies a page on its first write). Pages never written are the
/// page cache's own, so mapping and reading a warm file costs no copy and no
/// fresh memory. Each mapping is independent of every other: a write to one
/// is not seen through another of the same bytes.
///
/// Made by [`crate::Reader::map_private`] and
/// [`crate::Reader::map_tensor_private`].
#[derive(Debug)]
pub struct PrivateMap(memmap2::MmapMut);

impl PrivateMap {
    /// Maps the bytes `start..start + len` of `file` copy-on-write. The
    /// mapping starts on the page holding `start`, so the bytes keep their
    /// alignment (to the page) from the file.
    ///
    /// # Safety
    /// As [`Mmap::map`]: the file must not be truncated or modified in place
    /// while the mapping lives. Pages not yet written are shared with the
    /// file, so they see such changes, and a truncation makes them raise
    /// SIGBUS. Replacing the file by a rename (as our writers do) is safe.
    pub(crate) unsafe fn map(file: &File, file_len: u64, start: u64, len: u64) -> std::io::Result<PrivateMap> {
        // A mapping past the end of the file would fault on access: check
        // the range against the size the header was validated with, and the
        // size the file has now.
        let now = file.metadata()?.len();
        if now != file_len || start.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(std::io::Error::other("the file changed size since it was opened"));
        }
        let len = usize::try_from(len).map_err(|_| std::io::Error::other("the range is too large to map"))?;
        // SAFETY: forwarded to the caller (see `# Safety`).
        let map = unsafe { memmap2::MmapOptions::new().offset(start).len(len).map_copy(file)? };
        #[cfg(unix)]
        if len > 0 {
            let _ = map.advise(memmap2::Advice::Sequential);
        }
        Ok(PrivateMap(map))
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// The mapped bytes, writable; writes stay in this mapping.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }

    /// The number of mapped bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no bytes are mapped.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
