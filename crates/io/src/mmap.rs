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
