//! Integration tests of `deathtensors-io`.

mod bintensors;
mod collection;
mod collection_hostile;
mod collection_model;
mod collection_snapshot;
mod compress;
mod converted;
mod crypt;
mod cryptotensors;
mod dcp;
mod fixtures;
mod model_lazy;
mod model_sign;
mod page_cache;
mod parity;
mod region;
mod roundtrip;
mod safety;
mod sharded;
mod strided;
mod vectors;

use std::path::PathBuf;

/// The repository's `testdata/` folder.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

pub use deathtensors_testkit::scratch::Scratch;

/// A fresh empty directory for one test, removed when dropped.
pub fn scratch(name: &str) -> Scratch {
    Scratch::new("dt-io", name)
}

/// Names of the entries of a directory, sorted.
pub fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Lowercase hex SHA-256, as the fixture manifest writes it.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Options that encrypt for `key` (AES-256-GCM, chunks of 4 KiB).
pub fn encrypted_for(key: &std::sync::Arc<deathtensors_io::SymmetricKey>) -> deathtensors_io::WriteOptions {
    deathtensors_io::WriteOptions {
        encryption: Some(deathtensors_io::EncryptOptions {
            cipher: deathtensors_format::Cipher::Aes256Gcm,
            chunk_size: 4096,
            recipients: vec![deathtensors_io::RecipientKey::Symmetric(key.clone())],
            seal_header: false,
        }),
        ..deathtensors_io::WriteOptions::default()
    }
}
