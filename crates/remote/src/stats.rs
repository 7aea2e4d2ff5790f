//! Counts of requests and bytes, for tests, benchmarks and the curious.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Requests made and bytes received by the readers that share it (clones
/// share the counts).
#[derive(Clone, Debug, Default)]
pub struct Stats(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
    cache_hits: AtomicU64,
}

impl Stats {
    /// GET requests sent (each attempt of a retried request counts).
    pub fn requests(&self) -> u64 {
        self.0.requests.load(Ordering::Relaxed)
    }

    /// Body bytes received.
    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Requests retried after a transient failure.
    pub fn retries(&self) -> u64 {
        self.0.retries.load(Ordering::Relaxed)
    }

    /// Reads served by the local cache.
    pub fn cache_hits(&self) -> u64 {
        self.0.cache_hits.load(Ordering::Relaxed)
    }

    pub(crate) fn cache_hit(&self) {
        self.0.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn request(&self) {
        self.0.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn received(&self, n: u64) {
        self.0.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn retry(&self) {
        self.0.retries.fetch_add(1, Ordering::Relaxed);
    }
}
