//! `s3://` against moto's S3 server: open, read, requests counted by
//! [`Stats`](deathtensors_remote::Stats), sharded checkpoints.

use deathtensors_io::{ErrorKind, ReadOptions, Reader};
use deathtensors_remote::{open, open_sharded, RemoteOptions};

use crate::servers::{moto, request, Server};
use crate::{scratch, write_model};

/// Options for moto's S3 server `server` (its fixed test credentials).
pub(crate) fn s3_options(server: &Server) -> RemoteOptions {
    crate::http::options()
        .with("aws_endpoint", format!("http://127.0.0.1:{}", server.port))
        .with("aws_access_key_id", "testing")
        .with("aws_secret_access_key", "testing")
        .with("aws_region", "us-east-1")
}

/// Creates `bucket` and uploads the files of `dir` into it.
fn upload(server: &Server, bucket: &str, files: &[std::path::PathBuf]) {
    assert_eq!(request(server.port, "PUT", &format!("/{bucket}"), b""), 200);
    for f in files {
        let name = f.file_name().unwrap().to_str().unwrap();
        let status = request(server.port, "PUT", &format!("/{bucket}/{name}"), &std::fs::read(f).unwrap());
        assert_eq!(status, 200, "upload of {name}");
    }
}

#[test]
fn s3_open_is_one_request_and_reads_check_digests() {
    let dir = scratch("s3-open");
    let Some(server) = moto(&dir) else { return };
    let path = dir.join("m.dt");
    let tensors = write_model(&path, 6, 200_000, 0);
    upload(&server, "models", std::slice::from_ref(&path));
    let options = s3_options(&server);
    let reader = open("s3://models/m.dt", &options, ReadOptions::default()).unwrap();
    assert_eq!(options.stats.requests(), 1);
    assert!(options.stats.bytes() <= 64 << 10);
    let before = options.stats.bytes();
    assert_eq!(&reader.read(&tensors[4].0).unwrap(), &tensors[4].1);
    assert_eq!(options.stats.requests(), 2);
    assert_eq!(options.stats.bytes() - before, 200_000);
    reader.verify().unwrap();
    let local = Reader::open(&path).unwrap();
    let mut expected = vec![0u8; local.header().data_len() as usize];
    local.read_data_into(&mut expected).unwrap();
    let mut all = vec![0u8; expected.len()];
    reader.read_data_into(&mut all).unwrap();
    assert!(all == expected);
}

#[test]
fn s3_missing_object_and_bucket_are_not_found() {
    let dir = scratch("s3-404");
    let Some(server) = moto(&dir) else { return };
    upload(&server, "empty", &[]);
    let options = s3_options(&server);
    for url in ["s3://empty/none.dt", "s3://nobucket/none.dt"] {
        let err = open(url, &options, ReadOptions::default()).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound), "{url}: {err}");
    }
}

#[test]
fn s3_sharded_opens_only_the_shard_asked_for() {
    let dir = scratch("s3-sharded");
    let Some(server) = moto(&dir) else { return };
    let tensors = write_model(&dir.join("whole.dt"), 9, 100_000, 0);
    let specs = crate::u8_specs(&tensors);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let w = deathtensors_io::WriteOptions { checksum: true, durable: false, ..Default::default() };
    let (index, shards) = deathtensors_io::save_sharded(out.join("model.dt"), specs, 300_000, &w).unwrap();
    let mut files = shards.clone();
    files.push(index.clone());
    upload(&server, "sharded", &files);
    let options = s3_options(&server);
    let url = format!("s3://sharded/{}", index.file_name().unwrap().to_str().unwrap());
    let sharded = open_sharded(&url, &options, ReadOptions::default()).unwrap();
    assert_eq!(options.stats.requests(), 1);
    assert_eq!(&sharded.read(&tensors[4].0).unwrap(), &tensors[4].1);
    assert_eq!(sharded.opened_shards(), 1);
    assert!(options.stats.requests() <= 3);
    sharded.verify().unwrap();
    assert_eq!(sharded.opened_shards(), shards.len());
}

#[test]
fn an_unknown_storage_option_is_named() {
    let err = open("s3://b/m.dt", &RemoteOptions::default().with("no_such_option", "1"), ReadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no_such_option"), "{err}");
}
