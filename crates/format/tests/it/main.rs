//! Integration tests of `deathtensors-format`.

mod bintensors;
mod collection;
mod compression;
mod crypt;
mod fixtures;
mod fuzz_regressions;
mod invalid;
mod many;
mod prefault;
mod roundtrip;
mod split;

use std::path::PathBuf;

/// The repository's `testdata/` folder.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}
