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

use deathtensors_format::Dtype;

/// The repository's `testdata/` folder.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// Whether bintensors 0.2 can store `dtype`: 15 of ours, all but the
/// sub-byte floats, F8_E8M0, the FNUZ floats and the complex dtypes.
pub fn bintensors_has(dtype: Dtype) -> bool {
    !matches!(
        dtype,
        Dtype::F4
            | Dtype::F6_E2M3
            | Dtype::F6_E3M2
            | Dtype::F8_E8M0
            | Dtype::F8_E4M3FNUZ
            | Dtype::F8_E5M2FNUZ
            | Dtype::C64
            | Dtype::C128
    )
}
