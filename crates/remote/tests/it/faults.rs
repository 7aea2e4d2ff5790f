//! Faults injected by the proxy in front of nginx: each gives a retry or a
//! clear error, never wrong data.

use std::time::Duration;

use deathtensors_io::ReadOptions;
use deathtensors_remote::{open, RemoteOptions};

use crate::http::options;
use crate::proxy::{Fault, Proxy};
use crate::servers::nginx;
use crate::{scratch, write_model};

/// Opens `m.dt` through a proxy that injects `faults` into the requests of
/// reading tensor 5 (after the open), reads it, and returns the result and
/// the requests the read took.
#[track_caller]
fn read_through(name: &str, faults: &[Fault], options: RemoteOptions) -> (Result<(), String>, u64) {
    let dir = scratch(name);
    let Some(server) = nginx(&dir) else { return (Ok(()), 0) };
    let tensors = write_model(&server.root.join("m.dt"), 8, 300_000, 0);
    let proxy = Proxy::start(server.port);
    let reader = open(&proxy.url("m.dt"), &options, ReadOptions::default()).unwrap();
    proxy.reset();
    proxy.inject(faults);
    let result = reader.read(&tensors[5].0).map_err(|e| e.to_string());
    let result = result.map(|data| assert!(data == tensors[5].1, "wrong data after {faults:?}"));
    (result, proxy.requests())
}

#[test]
fn a_reset_connection_is_retried() {
    let (result, requests) = read_through("fault-reset", &[Fault::Reset], options());
    result.unwrap();
    assert_eq!(requests, 2);
}

#[test]
fn unavailable_is_retried() {
    let (result, requests) = read_through("fault-503", &[Fault::Unavailable, Fault::Unavailable], options());
    result.unwrap();
    assert_eq!(requests, 3);
}

#[test]
fn a_body_cut_short_is_retried() {
    let (result, requests) = read_through("fault-truncate", &[Fault::Truncate], options());
    result.unwrap();
    assert_eq!(requests, 2);
}

#[test]
fn a_slow_response_times_out_and_is_retried() {
    let options = options().with("timeout", "1s");
    let (result, requests) = read_through("fault-slow", &[Fault::Slow(Duration::from_secs(3))], options);
    result.unwrap();
    assert_eq!(requests, 2);
}

#[test]
fn persistent_failures_end_in_an_error_after_bounded_retries() {
    let faults = vec![Fault::Unavailable; 20];
    let options = RemoteOptions { retries: 2, ..options() };
    let (result, requests) = read_through("fault-down", &faults, options);
    let err = result.unwrap_err();
    assert!(err.contains("m.dt"), "{err}");
    // object_store's 2 retries, then ours: 2 more attempts of 3 requests.
    assert!((3..=9).contains(&requests), "{requests} requests");
}

#[test]
fn a_server_that_ignores_range_is_a_clear_error() {
    let (result, _) = read_through("fault-norange", &[Fault::IgnoreRange], options());
    let err = result.unwrap_err();
    assert!(err.contains("Range"), "{err}");
}

#[test]
fn opening_through_a_server_that_ignores_range_is_a_clear_error() {
    let dir = scratch("fault-norange-open");
    let Some(server) = nginx(&dir) else { return };
    write_model(&server.root.join("m.dt"), 2, 100_000, 0);
    let proxy = Proxy::start(server.port);
    proxy.inject(&[Fault::IgnoreRange]);
    let err = open(&proxy.url("m.dt"), &options(), ReadOptions::default()).unwrap_err().to_string();
    assert!(err.contains("Range") && err.contains("m.dt"), "{err}");
    assert_eq!(proxy.requests(), 1);
}
