//! The main job of the README: build everything, then show the library at
//! work on real files.

use crate::util::cargo;

pub fn run() -> Result<(), String> {
    cargo(&["build", "--workspace", "--release"])?;
    for file in [
        "testdata/valid/deathtensors-0.3.0/all_dtypes_checksum.deathtensors",
        "testdata/valid/safetensors-0.8.0/all_dtypes.safetensors",
    ] {
        cargo(&["run", "--quiet", "--release", "-p", "deathtensors-format", "--example", "inspect", "--", file])?;
    }
    Ok(())
}
