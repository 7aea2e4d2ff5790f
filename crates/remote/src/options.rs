//! How remote objects are reached and read.

use std::time::Duration;

use crate::stats::Stats;

/// Options of remote reads: the store's own configuration, and how ranges
/// are requested.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Configuration for the store, as object_store's builders name it (for
    /// example `aws_endpoint`, `aws_region`, `aws_access_key_id`,
    /// `google_service_account`, `azure_storage_account_name`, or client
    /// options such as `timeout`, `allow_http`): what fsspec users pass as
    /// `storage_options`. The environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`)
    /// is read first; these override it.
    pub storage_options: Vec<(String, String)>,
    /// The first request's length: the prefix and most headers fit, and a
    /// longer head costs one more request. Default 64 KiB.
    pub first_read: u64,
    /// Reads longer than this are split into parts fetched in parallel.
    /// Default 8 MiB: large enough that a request's latency is small beside
    /// its transfer, small enough that a 1 GiB read has 128 parts to share.
    pub part_size: u64,
    /// How many requests are in flight at once for one read. Default 8.
    pub concurrency: usize,
    /// Retries of a failed request (connection errors, 5xx, timeouts) after
    /// object_store's own, each after a backoff. Default 3.
    pub retries: u32,
    /// The first backoff; each retry doubles it. Default 100 ms.
    pub backoff: Duration,
    /// Neighbouring ranges of [`prefetch`](crate::prefetch) closer than this
    /// are fetched as one. Default 1 MiB.
    pub coalesce_gap: u64,
    /// Counters of requests and bytes, shared with the caller.
    pub stats: Stats,
}

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            storage_options: Vec::new(),
            first_read: 64 << 10,
            part_size: 8 << 20,
            concurrency: 8,
            retries: 3,
            backoff: Duration::from_millis(100),
            coalesce_gap: 1 << 20,
            stats: Stats::default(),
        }
    }
}

impl RemoteOptions {
    /// Adds a store configuration entry (see
    /// [`RemoteOptions::storage_options`]).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> RemoteOptions {
        self.storage_options.push((key.into(), value.into()));
        self
    }
}
