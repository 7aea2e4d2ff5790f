//! How remote objects are reached and read.

use std::time::Duration;

use crate::cache::Cache;
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
    /// A local cache of fetched ranges. Default none;
    /// [`RemoteOptions::from_env`] sets one from `DEATHTENSORS_REMOTE_CACHE`.
    pub cache: Option<Cache>,
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
            cache: None,
        }
    }
}

/// The cache's budget when `DEATHTENSORS_REMOTE_CACHE_MAX_BYTES` is unset.
const DEFAULT_CACHE_BYTES: u64 = 10 << 30;

impl RemoteOptions {
    /// The defaults, with a cache when the environment asks for one:
    /// `DEATHTENSORS_REMOTE_CACHE` (a directory) and
    /// `DEATHTENSORS_REMOTE_CACHE_MAX_BYTES` (default 10 GiB). The command
    /// line and the Python package start from these.
    pub fn from_env() -> RemoteOptions {
        let cache = std::env::var_os("DEATHTENSORS_REMOTE_CACHE").filter(|d| !d.is_empty()).map(|dir| {
            let max = std::env::var("DEATHTENSORS_REMOTE_CACHE_MAX_BYTES")
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_CACHE_BYTES);
            Cache::new(dir, max)
        });
        RemoteOptions { cache, ..RemoteOptions::default() }
    }

    /// Adds a store configuration entry (see
    /// [`RemoteOptions::storage_options`]).
    pub fn with(mut self, key: impl Into<String>, value: impl Into<String>) -> RemoteOptions {
        self.storage_options.push((key.into(), value.into()));
        self
    }
}
