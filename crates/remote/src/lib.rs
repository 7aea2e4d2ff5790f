//! Remote deathtensors checkpoints: open `s3://`, `gs://`, `az://` and
//! `http(s)://` URLs and read only the byte ranges asked for.
//!
//! A checkpoint on an object store is opened like a local file, with the
//! same [`Reader`](deathtensors_io::Reader): every check of `deathtensors-io`
//! (limits, header validation, signatures, decryption, decompression) runs on
//! bytes fetched with ranged GETs through the [`object_store`] crate (the
//! engine of arrow, DataFusion and delta-rs: retries with backoff,
//! credentials from the environment or options, request signing).
//!
//! - Opening reads the prefix and header with at most 2 requests: a first
//!   range of [`RemoteOptions::first_read`] bytes (64 KiB), which also gives
//!   the object's size and ETag, and a second one only for a longer head.
//! - Reads fetch only their ranges, split into parts of
//!   [`RemoteOptions::part_size`] fetched in parallel
//!   ([`RemoteOptions::concurrency`]); [`prefetch`] coalesces the ranges of
//!   many tensors first. Every later request is conditional on the ETag of
//!   the first (`If-Match`), so a file replaced while open is an error,
//!   never a mix of two files.
//! - A whole tensor read is checked against its SHA-256 (when the file has
//!   digests) before it is returned; `verify` also checks the footer.
//! - Sharded checkpoints ([`open_sharded`]) read their index and open only
//!   the shards that hold the tensors asked for.
//! - An optional local [`Cache`] keeps fetched ranges, content-checked and
//!   bounded ([`RemoteOptions::cache`]).
//! - A distributed checkpoint on a store ([`RemoteCheckpoint`]) is
//!   consolidated into a local file by io's code ([`consolidate_any`]).
//!
//! The API is blocking: a tokio runtime owned by this crate runs
//! object_store's futures, so callers (the CLI, the Python bindings) stay
//! synchronous.
//!
//! # Example
//!
//! ```no_run
//! use deathtensors_remote::{open, RemoteOptions};
//!
//! let options = RemoteOptions::default().with("aws_region", "us-east-1");
//! let reader = open("s3://bucket/model.dt", &options, Default::default())?;
//! let weight = reader.read("weight")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Crate features
//!
//! None: S3, GCS, Azure and HTTP(S) are always built in (object_store's
//! `*-base` features with `ring`, the crypto `deathtensors-io` already uses).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod cache;
mod checkpoint;
mod object;
mod open;
mod options;
mod runtime;
mod stats;
mod store;
mod upload;

pub use crate::{
    cache::Cache,
    checkpoint::{consolidate_any, RemoteCheckpoint},
    open::{
        is_url, open, open_any, open_sharded, open_sharded_any, open_sharded_from, prefetch, url_of, RemoteOpener,
        SCHEMES,
    },
    options::RemoteOptions,
    stats::Stats,
    upload::{delete, get, list, put, size, upload},
};

// The README's examples compile as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
