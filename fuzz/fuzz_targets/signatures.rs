//! Decoding a signature block never panics, a block that decodes encodes to
//! the same bytes, and the length its trailer gives is the length decoding
//! accepts; records encode to a block that decodes to them.
//!
//! `cargo fuzz run signatures` fuzzes it (nightly); `cargo run --release --bin
//! signatures -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::signatures as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
