//! Decoding a bintensors 0.2 header: what parses is canonical (encoding it
//! gives back its bytes) and, laid out as a file, parses again the same.
//!
//! `cargo fuzz run bintensors` fuzzes it (nightly); `cargo run --release --bin
//! bintensors -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::bintensors as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
