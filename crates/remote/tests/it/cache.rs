//! The local cache: hits cost no request, a damaged entry is fetched
//! again, the directory stays within its budget, another ETag misses.

use deathtensors_io::ReadOptions;
use deathtensors_remote::{open, Cache, RemoteOptions};

use crate::proxy::Proxy;
use crate::servers::nginx;
use crate::{scratch, write_model};

fn cached(dir: &std::path::Path, max: u64) -> RemoteOptions {
    RemoteOptions { cache: Some(Cache::new(dir, max)), ..crate::http::options() }
}

fn cache_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.metadata().unwrap().len()).sum()).unwrap_or(0)
}

#[test]
fn a_cached_tensor_costs_no_request_and_a_damaged_entry_is_refetched() {
    let dir = scratch("cache-hit");
    let Some(server) = nginx(&dir) else { return };
    let tensors = write_model(&server.root.join("m.dt"), 6, 200_000, 0);
    let proxy = Proxy::start(server.port);
    let cache_dir = dir.join("cache");
    let (name, data) = &tensors[4];
    let first = open(&proxy.url("m.dt"), &cached(&cache_dir, 1 << 30), ReadOptions::default()).unwrap();
    assert_eq!(&first.read(name).unwrap(), data);
    assert_eq!(proxy.requests(), 2);
    proxy.reset();
    let options = cached(&cache_dir, 1 << 30);
    let again = open(&proxy.url("m.dt"), &options, ReadOptions::default()).unwrap();
    assert_eq!(&again.read(name).unwrap(), data);
    assert_eq!(proxy.requests(), 1, "the open only: it checks the ETag");
    assert_eq!(options.stats.cache_hits(), 1);
    // Damage every entry: each is noticed, removed and fetched again.
    for e in std::fs::read_dir(&cache_dir).unwrap().flatten() {
        let mut bytes = std::fs::read(e.path()).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 1;
        std::fs::write(e.path(), bytes).unwrap();
    }
    proxy.reset();
    let damaged = open(&proxy.url("m.dt"), &cached(&cache_dir, 1 << 30), ReadOptions::default()).unwrap();
    assert_eq!(&damaged.read(name).unwrap(), data);
    assert_eq!(proxy.requests(), 2);
}

#[test]
fn the_cache_stays_within_its_budget() {
    let dir = scratch("cache-budget");
    let Some(server) = nginx(&dir) else { return };
    let tensors = write_model(&server.root.join("m.dt"), 8, 100_000, 0);
    let cache_dir = dir.join("cache");
    let budget = 250_000;
    let reader = open(&server.url("m.dt"), &cached(&cache_dir, budget), ReadOptions::default()).unwrap();
    for (name, data) in &tensors[2..] {
        assert_eq!(&reader.read(name).unwrap(), data);
        assert!(cache_bytes(&cache_dir) <= budget, "{} bytes", cache_bytes(&cache_dir));
    }
    assert!(cache_bytes(&cache_dir) >= 200_000, "the most recent entries stay");
}

#[test]
fn a_replaced_object_misses_the_cache() {
    let dir = scratch("cache-etag");
    let Some(server) = nginx(&dir) else { return };
    let path = server.root.join("m.dt");
    let tensors = write_model(&path, 4, 100_000, 0);
    let cache_dir = dir.join("cache");
    let reader = open(&server.url("m.dt"), &cached(&cache_dir, 1 << 30), ReadOptions::default()).unwrap();
    assert_eq!(&reader.read(&tensors[3].0).unwrap(), &tensors[3].1);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Same names and sizes, other bytes: another ETag.
    let other: Vec<(String, Vec<u8>)> =
        tensors.iter().map(|(n, b)| (n.clone(), b.iter().rev().copied().collect())).collect();
    let specs: Vec<_> = other
        .iter()
        .map(|(n, b)| {
            let spec = deathtensors_io::format::TensorSpec::new(
                n.as_str(),
                deathtensors_io::format::Dtype::U8,
                [b.len() as u64],
            );
            (spec, &b[..])
        })
        .collect();
    let w = deathtensors_io::WriteOptions { checksum: true, durable: false, ..Default::default() };
    deathtensors_io::save(&path, specs, &w).unwrap();
    let options = cached(&cache_dir, 1 << 30);
    let reopened = open(&server.url("m.dt"), &options, ReadOptions::default()).unwrap();
    assert_eq!(&reopened.read(&other[3].0).unwrap(), &other[3].1);
    assert_eq!(options.stats.cache_hits(), 0);
}
