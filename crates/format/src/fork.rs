//! How a caller lends the decoder what this crate has not (it is `no_std`
//! and sans-IO): threads, and memory mapped in bulk. A caller that has
//! threads passes a [`Fork`], and the decoder splits a large header's
//! tensor entries in two halves decoded at the same time (see `fast.rs`),
//! then builds the name index while it checks the layout (see
//! `header.rs`). A caller that can map memory in bulk does so when
//! [`Fork::prefault`] is called, ahead of the decoder's writes, and one
//! that decodes from a file's mapping may drop the pages the decoder is
//! done with ([`Fork::release`]).

use core::mem::MaybeUninit;

use crate::TensorInfo;

/// Runs two jobs, possibly at the same time.
///
/// The decoder calls [`Fork::join`] at most twice per header, with two jobs
/// that share nothing and never panic; `join` must run both to completion
/// before it returns. [`Serial`] runs them one after the other.
pub trait Fork: Sync {
    /// Runs `a` and `b`, and returns once both are done.
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send));

    /// Whether [`Fork::join`] may run its jobs at the same time. The decoder
    /// splits its work only for a fork that says so: two halves decoded one
    /// after the other cost more than the whole (the second half's entries
    /// are built in a vector of their own, then moved).
    fn is_parallel(&self) -> bool {
        true
    }

    /// Called before the decoder writes tensor entries into `spare`, the
    /// next room of its list of entries, in windows of about 256 KiB as the
    /// list fills (lists of fewer than [`PREFAULT_MIN_ENTRIES`] entries are
    /// never announced). Memory freshly given by the system is mapped page
    /// by page as it is first written; a caller that can map a whole range
    /// in one call (Linux: `MADV_POPULATE_WRITE`) may do it here, which
    /// costs less than the page faults it replaces. It must not read or
    /// write `spare`. The default does nothing.
    fn prefault(&self, spare: &mut [MaybeUninit<TensorInfo>]) {
        let _ = spare;
    }

    /// As [`Fork::prefault`], for the room of a block the decoder is about
    /// to write tensor names into (32 KiB, or one name if longer; only
    /// while decoding a list that is announced). It must not read or write
    /// `spare`. The default does nothing.
    fn prefault_bytes(&self, spare: &mut [MaybeUninit<u8>]) {
        let _ = spare;
    }

    /// Called as the decoder leaves behind a stretch of its input: `done`,
    /// a part of the header text it was given, in steps of
    /// [`RELEASE_STEP`] bytes or more (while decoding an object of
    /// tensors). The decoder reads it again only if it falls back to the
    /// full decoder. A caller that decodes straight from a file's mapping
    /// may drop those pages from memory (they stay in the page cache): a
    /// 1 GB header then does not sit in memory whole beside the tensors
    /// decoded from it. It must not change what `done` reads as. The
    /// default does nothing.
    fn release(&self, done: &[u8]) {
        let _ = done;
    }
}

/// The least input the decoder leaves behind between two calls of
/// [`Fork::release`]: 4 MiB (a 1 GB header makes about 250 calls).
pub const RELEASE_STEP: usize = 4 << 20;

/// The fewest entries the decoder announces through [`Fork::prefault`] at
/// once (about 256 KiB of them), and the size of a list below which it
/// announces none: a smaller list is likely carved from memory the
/// allocator already holds.
pub const PREFAULT_MIN_ENTRIES: usize = (256 << 10) / core::mem::size_of::<TensorInfo>();

/// Runs both jobs on the calling thread, one after the other: what
/// [`crate::Head::parse`] uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl Fork for Serial {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        a();
        b();
    }

    fn is_parallel(&self) -> bool {
        false
    }
}
