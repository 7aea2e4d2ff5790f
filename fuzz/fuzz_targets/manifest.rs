//! Parsing a collection manifest never panics, and a manifest that parses
//! encodes to bytes that parse to it again (and to a block header that fits
//! its layout).
//!
//! `cargo fuzz run manifest` fuzzes it (nightly); `cargo run --release --bin
//! manifest -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::manifest as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
