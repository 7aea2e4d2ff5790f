//! Counts of requests and bytes, for tests, benchmarks and the curious.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Requests made and bytes received (and sent, by uploads) by the readers
/// and uploads that share it (clones
/// share the counts).
#[derive(Clone, Debug, Default)]
pub struct Stats(Arc<Counts>);

#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
    cache_hits: AtomicU64,
    writes: AtomicU64,
    bytes_sent: AtomicU64,
}

impl Stats {
    /// Requests that read sent: GETs (each attempt of a retried request
    /// counts), and the HEADs and listings of `size` and `list`.
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

    /// Requests that write (PUTs, the parts of multipart uploads and the
    /// requests that start and complete them, DELETEs), counted once they
    /// succeed.
    pub fn writes(&self) -> u64 {
        self.0.writes.load(Ordering::Relaxed)
    }

    /// Body bytes sent by uploads.
    pub fn bytes_sent(&self) -> u64 {
        self.0.bytes_sent.load(Ordering::Relaxed)
    }

    pub(crate) fn sent(&self, requests: u64, bytes: u64) {
        self.0.writes.fetch_add(requests, Ordering::Relaxed);
        self.0.bytes_sent.fetch_add(bytes, Ordering::Relaxed);
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
