//! Reading a pickle as a torch checkpoint's, a zip container, and a numpy
//! `.npy` header (see `properties::pickle`).
//!
//! `cargo fuzz run pickle` fuzzes it (nightly); `cargo run --release --bin
//! pickle -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::pickle as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
