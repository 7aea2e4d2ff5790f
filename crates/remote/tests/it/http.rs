//! `http://` against nginx through the counting proxy: requests and bytes
//! of opening and reading, data equality, digests, sharded checkpoints.

use std::time::Duration;

use deathtensors_io::{save_sharded, ErrorKind, ReadOptions, Reader, WriteOptions};
use deathtensors_remote::{open, open_sharded, prefetch, RemoteOptions};

use crate::proxy::Proxy;
use crate::servers::nginx;
use crate::{scratch, write_model};

/// Options for tests: short backoffs.
pub fn options() -> RemoteOptions {
    RemoteOptions { backoff: Duration::from_millis(10), ..RemoteOptions::default() }
}

#[test]
fn open_small_head_is_one_request_and_a_tensor_is_its_bytes() {
    let dir = scratch("http-small");
    let Some(server) = nginx(&dir) else { return };
    let tensors = write_model(&server.root.join("m.dt"), 10, 100_000, 0);
    let proxy = Proxy::start(server.port);
    let reader = open(&proxy.url("m.dt"), &options(), ReadOptions::default()).unwrap();
    assert_eq!(proxy.requests(), 1);
    assert!(proxy.bytes() <= 64 << 10, "{} bytes", proxy.bytes());
    assert_eq!(reader.header().len(), 10);
    proxy.reset();
    let (name, data) = &tensors[7];
    assert_eq!(&reader.read(name).unwrap(), data);
    assert_eq!(proxy.requests(), 1);
    assert_eq!(proxy.bytes(), 100_000);
}

#[test]
fn open_large_head_is_two_requests_within_head_plus_64_kib() {
    let dir = scratch("http-large");
    let Some(server) = nginx(&dir) else { return };
    let tensors = write_model(&server.root.join("m.dt"), 3000, 16, 60);
    let proxy = Proxy::start(server.port);
    let reader = open(&proxy.url("m.dt"), &options(), ReadOptions::default()).unwrap();
    let head = reader.head().data_start;
    assert!(head > 64 << 10, "the head ({head} bytes) must not fit in the first request");
    assert_eq!(proxy.requests(), 2, "{:?}", proxy.ranges());
    assert!(proxy.bytes() <= head + (64 << 10), "{} bytes for a head of {head}", proxy.bytes());
    assert_eq!(&reader.read(&tensors[2999].0).unwrap(), &tensors[2999].1);
}

#[test]
fn load_everything_in_parallel_parts_equals_the_file() {
    let dir = scratch("http-all");
    let Some(server) = nginx(&dir) else { return };
    let path = server.root.join("m.dt");
    write_model(&path, 8, 3 << 20, 0);
    let proxy = Proxy::start(server.port);
    let options = RemoteOptions { part_size: 1 << 20, ..options() };
    let reader = open(&proxy.url("m.dt"), &options, ReadOptions::default()).unwrap();
    let mut remote = vec![0u8; reader.header().data_len() as usize];
    proxy.reset();
    reader.read_data_into(&mut remote).unwrap();
    let local = Reader::open(&path).unwrap();
    let mut expected = vec![0u8; local.header().data_len() as usize];
    local.read_data_into(&mut expected).unwrap();
    assert!(remote == expected);
    // 24 MiB and a little padding, in 1 MiB parts.
    assert_eq!(proxy.requests(), remote.len().div_ceil(1 << 20) as u64);
    // The first request's 64 KiB overlap the blob's start, served from memory.
    assert!(proxy.bytes() <= remote.len() as u64);
    assert_eq!(options.stats.requests(), 1 + proxy.requests());
}

#[test]
fn prefetch_coalesces_neighbours_into_one_request() {
    let dir = scratch("http-prefetch");
    let Some(server) = nginx(&dir) else { return };
    let tensors = write_model(&server.root.join("m.dt"), 20, 200_000, 0);
    let proxy = Proxy::start(server.port);
    let reader = open(&proxy.url("m.dt"), &options(), ReadOptions::default()).unwrap();
    proxy.reset();
    let names: Vec<&str> = tensors[4..9].iter().map(|(n, _)| n.as_str()).collect();
    prefetch(&reader, &names).unwrap();
    assert_eq!(proxy.requests(), 1);
    // Five tensors and four gaps of alignment padding: within 1% of the tensors.
    assert!(proxy.bytes() <= 5 * 200_000 + 5 * 64, "{}", proxy.bytes());
    for (name, data) in &tensors[4..9] {
        assert_eq!(&reader.read(name).unwrap(), data);
    }
    assert_eq!(proxy.requests(), 1);
}

#[test]
fn a_tensor_whose_digest_fails_is_an_error_not_data() {
    let dir = scratch("http-digest");
    let Some(server) = nginx(&dir) else { return };
    let path = server.root.join("m.dt");
    let tensors = write_model(&path, 4, 10_000, 0);
    let local = Reader::open(&path).unwrap();
    let at = local.tensor(&tensors[2].0).unwrap().file_offset + 17;
    drop(local);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at as usize] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let reader = open(&server.url("m.dt"), &options(), ReadOptions::default()).unwrap();
    assert_eq!(&reader.read(&tensors[1].0).unwrap(), &tensors[1].1);
    let err = reader.read(&tensors[2].0).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == &tensors[2].0), "{err}");
    let mut all = vec![0u8; reader.header().data_len() as usize];
    let err = reader.read_data_into(&mut all).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    assert!(all.iter().all(|&b| b == 0), "a failed read leaves zeros");
    let err = reader.verify_footer().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::ChecksumMismatch { .. }), "{err}");
}

#[test]
fn a_file_replaced_while_open_is_an_error() {
    let dir = scratch("http-etag");
    let Some(server) = nginx(&dir) else { return };
    let path = server.root.join("m.dt");
    let tensors = write_model(&path, 4, 100_000, 0);
    let reader = open(&server.url("m.dt"), &options(), ReadOptions::default()).unwrap();
    // Same layout, other bytes, a later mtime: another ETag.
    std::thread::sleep(Duration::from_millis(1100));
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();
    let err = reader.read(&tensors[3].0).unwrap_err();
    assert!(err.to_string().contains("changed since it was opened"), "{err}");
}

#[test]
fn a_missing_object_is_not_found() {
    let dir = scratch("http-404");
    let Some(server) = nginx(&dir) else { return };
    let err = open(&server.url("nope.dt"), &options(), ReadOptions::default()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound), "{err}");
    assert!(err.to_string().contains("nope.dt"), "{err}");
}

#[test]
fn sharded_reads_touch_only_the_shards_asked_for() {
    let dir = scratch("http-sharded");
    let Some(server) = nginx(&dir) else { return };
    let tensors = crate::write_model(&dir.join("whole.dt"), 12, 50_000, 0);
    let specs = crate::u8_specs(&tensors);
    let options_w = WriteOptions { checksum: true, durable: false, ..WriteOptions::default() };
    let (index, _) = save_sharded(server.root.join("model.dt"), specs, 200_000, &options_w).unwrap();
    let proxy = Proxy::start(server.port);
    let name = index.file_name().unwrap().to_str().unwrap();
    let sharded = open_sharded(&proxy.url(name), &options(), ReadOptions::default()).unwrap();
    assert_eq!(proxy.requests(), 1, "the index only");
    assert!(sharded.shard_paths().len() >= 3);
    let (last, data) = &tensors[11];
    assert_eq!(&sharded.read(last).unwrap(), data);
    assert_eq!(sharded.opened_shards(), 1);
    // The shard's first 64 KiB hold its head and the tensor's start, the rest is one more.
    assert!(proxy.requests() <= 3, "{:?}", proxy.ranges());
    assert!(proxy.bytes() <= 2 * (64 << 10) + 50_000, "{}", proxy.bytes());
}

#[test]
fn verify_transfers_the_object_once_and_names_a_bad_tensor() {
    let dir = scratch("http-verify");
    let Some(server) = nginx(&dir) else { return };
    let path = server.root.join("m.dt");
    let tensors = write_model(&path, 12, 1 << 20, 0);
    let file_len = std::fs::metadata(&path).unwrap().len();
    let proxy = Proxy::start(server.port);
    let options = RemoteOptions { part_size: 1 << 20, ..options() };
    let reader = open(&proxy.url("m.dt"), &options, ReadOptions::default()).unwrap();
    reader.verify().unwrap();
    // Footer and digests from one transfer: the head's first 64 KiB again at most.
    assert!(proxy.bytes() <= file_len + (64 << 10), "{} bytes for a {file_len}-byte file", proxy.bytes());
    let mut bytes = std::fs::read(&path).unwrap();
    let at = Reader::open(&path).unwrap().tensor(&tensors[9].0).unwrap().file_offset as usize;
    bytes[at + 3] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    let reader = open(&proxy.url("m.dt"), &options, ReadOptions::default()).unwrap();
    let err = reader.verify().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == &tensors[9].0), "{err}");
}

#[test]
fn a_hostile_header_length_hits_the_limit_without_being_fetched() {
    let dir = scratch("http-hostile");
    let Some(server) = nginx(&dir) else { return };
    // A safetensors prefix declaring a 1 TiB header, then 1 MiB of junk.
    let mut bytes = (1u64 << 40).to_le_bytes().to_vec();
    bytes.extend(std::iter::repeat_n(b'{', 1 << 20));
    std::fs::write(server.root.join("huge.safetensors"), bytes).unwrap();
    let proxy = Proxy::start(server.port);
    let err = open(&proxy.url("huge.safetensors"), &options(), ReadOptions::default()).unwrap_err();
    assert!(err.is_invalid_file(), "{err}");
    assert_eq!(proxy.requests(), 1);
    assert!(proxy.bytes() <= 64 << 10, "{}", proxy.bytes());
}
