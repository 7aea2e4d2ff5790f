//! Parsing the head of a whole file of either format never panics, and
//! re-encoding a head that parses gives a file with the same header. An
//! encrypted file's table layout follows FORMAT.md 10; a signed file is
//! parsed without its signature block, which re-encodes to the same bytes.
//!
//! `cargo fuzz run file` fuzzes it (nightly); `cargo run --release --bin
//! file -- FILE_OR_DIR...` replays inputs without libFuzzer (stable).
#![cfg_attr(fuzzing, no_main)]

use deathtensors_fuzz::properties::file as property;

libfuzzer_sys::fuzz_target!(|data: &[u8]| property(data));

#[cfg(not(fuzzing))]
fn main() {
    deathtensors_fuzz::replay(property);
}
