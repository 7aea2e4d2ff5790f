//! The properties the fuzz targets check, one function per target. Each
//! takes any bytes and panics if the property does not hold.
//!
//! This file is shared by the targets (through the fuzz crate's `lib.rs`)
//! and by `crates/format/tests/it/fuzz_regressions.rs`, which includes it
//! with `#[path]` so that `cargo test` replays `testdata/fuzz/` through the
//! very same checks without depending on the fuzz crate.

use deathtensors_format::{Flags, Head, Header, Limits, Prefix, Result, FOOTER_LEN};

/// A property: panics if it does not hold for the input.
pub type Property = fn(&[u8]);

/// Every target, by name: a file in `testdata/fuzz/` is named
/// `<target>-<hash>` and replayed through the target's property.
pub const TARGETS: &[(&str, Property)] =
    &[("deathtensors_header", deathtensors_header), ("safetensors_header", safetensors_header), ("file", file)];

/// Length of the safetensors header-length field that precedes its JSON.
const SAFETENSORS_LEN_FIELD: usize = 8;

/// A deathtensors JSON header that parses encodes to a head whose JSON parses
/// to an equal header, and encoding that again gives the same bytes.
pub fn deathtensors_header(data: &[u8]) {
    if let Ok(header) = Header::parse_deathtensors(data, &Limits::DEFAULT) {
        roundtrip(&header, Prefix::LEN, Header::parse_deathtensors);
    }
}

/// As [`deathtensors_header`], for a safetensors JSON header.
pub fn safetensors_header(data: &[u8]) {
    if let Ok(header) = Header::parse_safetensors(data, &Limits::DEFAULT) {
        roundtrip(&header, SAFETENSORS_LEN_FIELD, Header::parse_safetensors);
    }
}

fn roundtrip(header: &Header, json_start: usize, parse: fn(&[u8], &Limits) -> Result<Header>) {
    let head = Head::encode(header, Flags::EMPTY)
        .unwrap_or_else(|e| panic!("a header that parsed does not encode: {e}\n{header:#?}"));
    let json = &head[json_start..];
    let again = parse(json, &Limits::DEFAULT)
        .unwrap_or_else(|e| panic!("the encoded header does not parse: {e}\n{}", String::from_utf8_lossy(json)));
    assert!(again == *header, "parse(encode(header)) != header\nbefore: {header:#?}\nafter: {again:#?}");
    let head_again =
        Head::encode(&again, Flags::EMPTY).unwrap_or_else(|e| panic!("a re-parsed header does not encode: {e}"));
    assert!(
        head_again == head,
        "encoding is not deterministic:\n{}\n{}",
        String::from_utf8_lossy(&head),
        String::from_utf8_lossy(&head_again)
    );
}

/// `Head::parse` never panics on a whole file; a head that parses is
/// consistent, and re-encoding it (with a zeroed blob and footer) gives a
/// file that parses to the same header and flags.
pub fn file(data: &[u8]) {
    let Ok(head) = Head::parse(data, data.len() as u64, &Limits::DEFAULT) else {
        return;
    };
    let header = &head.header;
    let footer_len = head.footer().map_or(0, |_| FOOTER_LEN);
    assert!(
        head.data_start <= head.data_end && head.data_end + footer_len == data.len() as u64,
        "inconsistent head: {head:#?}"
    );
    if !head.is_compressed() {
        assert_eq!(head.data_end - head.data_start, header.data_len(), "blob length");
    }

    let mut file = Head::encode(header, head.flags)
        .unwrap_or_else(|e| panic!("a header that parsed does not encode: {e}\n{header:#?}"));
    let data_start = file.len() as u64;
    // An uncompressed blob is exactly `data_len` bytes long, so no longer
    // than the input: this allocation is bounded. A compressed blob's length
    // is not checked when parsing the head, so an empty one will do.
    let blob_len = if head.is_compressed() { 0 } else { header.data_len() };
    file.resize((data_start + blob_len + footer_len) as usize, 0);
    let again = Head::parse(&file, file.len() as u64, &Limits::DEFAULT).unwrap_or_else(|e| {
        panic!("the re-encoded file does not parse: {e}\n{}", String::from_utf8_lossy(&file[..data_start as usize]))
    });
    assert!(
        again.header == *header,
        "parse(encode(header)) != header\nbefore: {header:#?}\nafter: {:#?}",
        again.header
    );
    assert_eq!(again.flags, head.flags, "flags");
    assert_eq!(again.data_start, data_start, "data start");
    assert_eq!(again.data_end, data_start + blob_len, "data end");
}
