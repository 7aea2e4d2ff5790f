//! Integration tests of `deathtensors-remote`, against real servers on
//! loopback that the tests start and stop themselves: nginx (Debian) for
//! `http://`, moto's S3 server (PyPI, in `.venv`) for `s3://`, Azurite
//! (npm, in `target/test-tools`) for `az://`, fake-gcs-server (PyPI, in
//! `.venv`) for `gs://`, and a small proxy of our own in front of nginx
//! that counts requests and bytes and injects faults; servers that do not
//! serve (`dead`) are plain listeners of the tests.

mod azure;
mod cache;
mod checks;
mod dead;
mod faults;
mod gcs;
mod http;
mod proxy;
mod s3;
mod upload;

use std::path::Path;

use deathtensors_io::format::{Dtype, TensorSpec};
use deathtensors_io::{save, WriteOptions};

pub use deathtensors_testkit::scratch::Scratch;
pub use deathtensors_testkit::servers;

/// A fresh empty directory for one test, removed when dropped.
pub fn scratch(name: &str) -> Scratch {
    Scratch::new("dt-remote", name)
}

/// Deterministic bytes: tensor `i`'s contents (noise, its seed spread so
/// that neighbouring tensors differ).
pub fn bytes(i: usize, len: usize) -> Vec<u8> {
    deathtensors_testkit::bytes::noise((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), len)
}

/// Writes a deathtensors file of `count` U8 tensors of `len` bytes each,
/// named `t.{i}` padded with `name_pad` bytes (to grow the header), with
/// per-tensor digests and a footer; returns the tensors.
pub fn write_model(path: &Path, count: usize, len: usize, name_pad: usize) -> Vec<(String, Vec<u8>)> {
    let tensors: Vec<(String, Vec<u8>)> =
        (0..count).map(|i| (format!("t.{i:06}{}", "x".repeat(name_pad)), bytes(i, len))).collect();
    let options = WriteOptions { checksum: true, durable: false, ..WriteOptions::default() };
    save(path, u8_specs(&tensors), &options).unwrap();
    tensors
}

/// Each named byte vector as a 1-D U8 tensor to save.
pub fn u8_specs(tensors: &[(String, Vec<u8>)]) -> Vec<(TensorSpec, &[u8])> {
    tensors.iter().map(|(n, b)| (TensorSpec::new(n.as_str(), Dtype::U8, [b.len() as u64]), &b[..])).collect()
}
