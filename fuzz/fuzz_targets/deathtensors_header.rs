//! Decoding a deathtensors JSON header, then encode → parse → equal, and
//! encoding is deterministic; a header with an `encryption` section encodes
//! with flag bit 2, and every header laid out as a whole file (tag table and
//! MAC if encrypted, footer and signature block if signable) parses back.
//!
//! `cargo fuzz run deathtensors_header` fuzzes it (nightly); `cargo run --release --bin
//! deathtensors_header -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::deathtensors_header as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
