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

    /// Asks the kernel to read `range` of the mapping ahead, in large
    /// requests (a storage about to be copied whole). Best effort.
    pub(crate) fn will_need(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if range.end <= self.0.len() && range.start < range.end {
            let _ = self.0.advise_range(memmap2::Advice::WillNeed, range.start, range.end - range.start);
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// Random-access readahead: for files read in small scattered parts
    /// (a torch checkpoint's directory, pickle and one storage), where
    /// sequential readahead would pull in most of the file.
    pub(crate) fn advise_random(&self) {
        #[cfg(unix)]
        let _ = self.0.advise(memmap2::Advice::Random);
    }

    /// Drops from this process's memory the pages of the mapping that
    /// `done` (bytes of it) lies on; they stay in the page cache, and a
    /// later read maps them again with the same bytes. Bytes that are not
    /// in the mapping are left alone. Best effort (unix only): a read-only
    /// header decoded from the mapping then never sits in memory whole
    /// beside the tensors decoded from it.
    pub(crate) fn release(&self, done: &[u8]) {
        let (base, at) = (self.0.as_ptr() as usize, done.as_ptr() as usize);
        let Some(offset) = at.checked_sub(base).filter(|o| o.saturating_add(done.len()) <= self.0.len()) else {
            return;
        };
        #[cfg(unix)]
        // SAFETY: a read-only shared mapping of a file: MADV_DONTNEED only
        // unmaps the pages, which the next access maps again from the page
        // cache with the same bytes (the file is not modified while mapped:
        // the contract of `Mmap::map`), so no reference into the mapping
        // sees a change.
        let _ = unsafe { self.0.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, done.len()) };
        #[cfg(not(unix))]
        let _ = offset;
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
pub struct PrivateMap(Inner);

#[derive(Debug)]
enum Inner {
    /// One range of one file.
    One(memmap2::MmapMut),
    /// Ranges of several files side by side in one reservation (unix).
    #[cfg(unix)]
    Joined(Joined),
}

/// A reservation of `map_len` bytes at `base` into which file ranges were
/// mapped copy-on-write; the bytes are `ptr..ptr + len` inside it.
#[cfg(unix)]
#[derive(Debug)]
struct Joined {
    base: usize,
    map_len: usize,
    ptr: usize,
    len: usize,
}

#[cfg(unix)]
impl Drop for Joined {
    fn drop(&mut self) {
        // SAFETY: `base..base + map_len` is the reservation made in
        // `PrivateMap::join`, mapped once and unmapped only here.
        let _ = unsafe { rustix::mm::munmap(self.base as *mut std::ffi::c_void, self.map_len) };
    }
}

// SAFETY: the mapping is plain memory owned by this value; `&[u8]` and
// `&mut [u8]` access go through `&self` / `&mut self` as for a `Vec`.
#[cfg(unix)]
unsafe impl Send for Joined {}
#[cfg(unix)]
unsafe impl Sync for Joined {}

/// One piece of a joined mapping: `len` bytes of `file` from `offset`.
/// Off unix nothing is joined (`join` answers `None`): the fields go unread.
#[cfg_attr(not(unix), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment<'a> {
    pub(crate) file: &'a File,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

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
        Ok(PrivateMap(Inner::One(map)))
    }

    /// Maps file ranges copy-on-write side by side, as one run of bytes:
    /// `segments[0]`, then `segments[1]`, ... Every segment but the first
    /// must start on a page, and every one but the last must end on one
    /// (the first may start anywhere: the bytes begin inside its page).
    /// `None` when the segments do not line up so, or off unix.
    ///
    /// # Safety
    /// As [`PrivateMap::map`], for every file: none may be truncated or
    /// modified in place in the mapped ranges while the mapping lives.
    pub(crate) unsafe fn join(segments: &[Segment<'_>]) -> std::io::Result<Option<PrivateMap>> {
        #[cfg(unix)]
        {
            use rustix::mm::{MapFlags, ProtFlags};
            let page = rustix::param::page_size() as u64;
            let n = segments.len();
            let mut pieces = Vec::with_capacity(n);
            let mut total = 0u64;
            for (i, s) in segments.iter().enumerate() {
                let start = s.offset - s.offset % page;
                let end = s.offset.checked_add(s.len).ok_or_else(|| std::io::Error::other("range overflows"))?;
                let aligned = (i == 0 || s.offset % page == 0) && (i + 1 == n || end % page == 0);
                if !aligned || s.len == 0 || end > s.file.metadata()?.len() {
                    return Ok(None);
                }
                let map_len = end.div_ceil(page) * page - start;
                pieces.push((s.file, start, map_len));
                total += map_len;
            }
            let Some(first) = segments.first() else { return Ok(None) };
            let skip = (first.offset % page) as usize;
            let len: u64 = segments.iter().map(|s| s.len).sum();
            let (total, len) = match (usize::try_from(total), usize::try_from(len)) {
                (Ok(t), Ok(l)) => (t, l),
                _ => return Ok(None),
            };
            let prot = ProtFlags::READ | ProtFlags::WRITE;
            // SAFETY: a fresh anonymous reservation; nothing else refers to it.
            let base = unsafe { rustix::mm::mmap_anonymous(std::ptr::null_mut(), total, prot, MapFlags::PRIVATE) }?;
            // Owns the reservation from here: unmapped on any early return.
            let joined = Joined { base: base as usize, map_len: total, ptr: base as usize + skip, len };
            let mut at = 0usize;
            for (file, start, map_len) in pieces {
                let addr = (joined.base + at) as *mut std::ffi::c_void;
                // SAFETY: `addr..addr + map_len` lies inside our reservation
                // (MAP_FIXED replaces those pages of it and nothing else); the
                // file range exists (checked above); the contract on the
                // file's contents is the caller's (`# Safety`).
                unsafe {
                    rustix::mm::mmap(addr, map_len as usize, prot, MapFlags::PRIVATE | MapFlags::FIXED, file, start)
                }?;
                at += map_len as usize;
            }
            Ok(Some(PrivateMap(Inner::Joined(joined))))
        }
        #[cfg(not(unix))]
        {
            let _ = segments;
            Ok(None)
        }
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Inner::One(m) => m,
            // SAFETY: `ptr..ptr + len` is mapped readable and writable for
            // the life of `self` (see `join`).
            #[cfg(unix)]
            Inner::Joined(j) => unsafe { std::slice::from_raw_parts(j.ptr as *const u8, j.len) },
        }
    }

    /// The mapped bytes, writable; writes stay in this mapping.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Inner::One(m) => m,
            // SAFETY: as in `as_slice`, and `&mut self` makes this the only
            // access.
            #[cfg(unix)]
            Inner::Joined(j) => unsafe { std::slice::from_raw_parts_mut(j.ptr as *mut u8, j.len) },
        }
    }

    /// The number of mapped bytes.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether no bytes are mapped.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
