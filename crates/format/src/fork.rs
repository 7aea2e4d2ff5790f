//! How a caller lends a thread to the decoder. This crate has none (it is
//! `no_std` and sans-IO), so a caller that has threads passes a [`Fork`],
//! and the decoder splits a large header's tensor entries in two halves
//! decoded at the same time (see `fast.rs`), then builds the name index
//! while it checks the layout (see `header.rs`).

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
}

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
