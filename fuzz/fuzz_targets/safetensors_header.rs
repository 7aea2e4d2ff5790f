//! Decoding a safetensors JSON header, then encode → parse → equal, and
//! encoding is deterministic.
//!
//! `cargo fuzz run safetensors_header` fuzzes it (nightly); `cargo run --release --bin
//! safetensors_header -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::safetensors_header as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
