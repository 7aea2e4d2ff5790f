//! Compressed headers (`docs/FORMAT.md` section 15): chunk tables survive
//! encode then parse, chunks tile their tensor, byte planes invert, and
//! hostile `compression` sections are refused with the error that names them.

use deathtensors_format::{
    byte_planes, group_bytes, ungroup_bytes, Codec, Compression, Dtype, ErrorKind, Flags, Head, Header, Limits,
    Metadata, TensorSpec,
};
use proptest::prelude::*;

const C: u64 = 4096;

fn compression() -> Compression {
    Compression { codec: Codec::Zstd, level: 3, chunk_size: C }
}

/// Two compressed tensors and a raw one: `w` of 10,000 F32 (40,000 bytes,
/// 10 chunks), `b` of 8 bytes (raw), `h` of 5,000 BF16 (3 chunks).
fn header() -> Header {
    let specs = vec![
        TensorSpec::new("w", Dtype::F32, [100, 100]),
        TensorSpec::new("b", Dtype::U8, [8]),
        TensorSpec::new("h", Dtype::BF16, [5000]),
    ];
    let mut w: Vec<u64> = vec![1000; 9];
    w.push(3136); // the last chunk: 40,000 − 9 × 4096 = 3,136 raw bytes, stored raw
    let tables = vec![Some(w), None, Some(vec![4096, 10, 1808])];
    Header::new_compressed(specs, Metadata::new(), 64, None, compression(), tables, &Limits::DEFAULT).unwrap()
}

/// A file of `header` with a blob of zeros.
fn file(header: &Header) -> Vec<u8> {
    let mut f = Head::encode(header, Flags::COMPRESSED).unwrap();
    f.resize(f.len() + header.data_len() as usize, 0);
    f
}

#[track_caller]
fn refused(json: &str, kind: fn(&ErrorKind) -> bool) {
    let err = Header::parse_deathtensors(json.as_bytes(), &Limits::DEFAULT).unwrap_err();
    assert!(kind(err.kind()), "{err}");
}

/// The JSON of `header()` with `from` replaced by `to` (once).
fn edited(from: &str, to: &str) -> String {
    let h = header();
    let bytes = Head::encode(&h, Flags::COMPRESSED).unwrap();
    let json = std::str::from_utf8(&bytes[24..]).unwrap().trim_end().to_string();
    assert!(json.contains(from), "{json}");
    json.replacen(from, to, 1)
}

#[test]
fn layout_uses_stored_lengths_and_roundtrips() {
    let h = header();
    let w = h.get("w").unwrap();
    assert_eq!(w.data_offsets, (0, 9 * 1000 + 3136));
    assert_eq!(w.byte_len(), 40_000);
    assert_eq!(w.stored_len(), 12_136);
    let b = h.get("b").unwrap();
    assert_eq!(b.data_offsets, (12_160, 12_168));
    assert_eq!(h.get("h").unwrap().data_offsets, (12_224, 12_224 + 4096 + 10 + 1808));
    assert_eq!(h.raw_len(), 40_000 + 8 + 10_000);
    let f = file(&h);
    let head = Head::parse(&f, f.len() as u64, &Limits::DEFAULT).unwrap();
    assert_eq!(head.header, h);
    assert!(head.is_chunk_compressed() && !head.is_compressed());
    let json = std::str::from_utf8(&f[24..head.data_start as usize]).unwrap();
    assert!(json.contains(
        r#""compression":{"codec":"zstd","level":3,"chunk_size":4096,"tensors":{"w":[1000,1000,1000,1000,1000,1000,1000,1000,1000,3136],"h":[4096,10,1808]}}"#
    ));
}

#[test]
fn chunks_tile_the_tensor() {
    let h = header();
    let t = h.chunk_table(2).unwrap();
    let chunks: Vec<_> = t.chunks().collect();
    assert_eq!(chunks.len(), 3);
    assert_eq!((chunks[0].raw, chunks[0].stored, chunks[0].is_raw()), ((0, 4096), (0, 4096), true));
    assert_eq!((chunks[1].raw, chunks[1].stored, chunks[1].is_raw()), ((4096, 8192), (4096, 4106), false));
    assert_eq!((chunks[2].raw, chunks[2].stored), ((8192, 10_000), (4106, 5914)));
    let covering: Vec<u64> = t.covering(4095, 4097).map(|c| c.index).collect();
    assert_eq!(covering, [0, 1]);
    assert!(h.chunk_table(1).is_none());
}

#[test]
fn flags_and_section_go_together() {
    let h = header();
    assert!(matches!(Head::encode(&h, Flags::EMPTY).unwrap_err().kind(), ErrorKind::Unsupported { .. }));
    assert!(matches!(
        Head::encode(&h, Flags::COMPRESSED | Flags::ZSTD).unwrap_err().kind(),
        ErrorKind::Unsupported { .. }
    ));
    let mut f = file(&h);
    f[12] = 0; // clear bit 5: the section is now unexpected
    let e = Head::parse(&f, f.len() as u64, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Unsupported { what } if what.contains("bit 5")), "{e}");
    f[12] = 0x21; // bits 0 and 5
    let e = Head::parse(&f, f.len() as u64, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Unsupported { .. }), "{e}");
    f[12] = 0x40; // bit 6 is unknown
    let e = Head::parse(&f, f.len() as u64, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::UnknownFlags(0x40)), "{e}");
}

#[test]
fn reserved_head_has_the_reserved_length() {
    let h = header();
    let plain = Head::encode(&h, Flags::COMPRESSED).unwrap();
    let reserved = Head::encode_reserved(&h, Flags::COMPRESSED, plain.len() as u64 + 128).unwrap();
    assert_eq!(reserved.len(), plain.len() + 128);
    let mut f = reserved.clone();
    f.resize(f.len() + h.data_len() as usize, 0);
    assert_eq!(Head::parse(&f, f.len() as u64, &Limits::DEFAULT).unwrap().header, h);
    assert!(Head::encode_reserved(&h, Flags::COMPRESSED, plain.len() as u64 - 64).is_err());
    assert!(Head::encode_reserved(&h, Flags::COMPRESSED, plain.len() as u64 + 1).is_err());
}

#[test]
fn hostile_sections_are_refused() {
    use ErrorKind as K;
    // A chunk that claims more stored bytes than it has raw.
    refused(&edited("[4096,10,1808]", "[4097,10,1807]"), |k| {
        matches!(k, K::InvalidCompression { what: "chunk length" })
    });
    // A chunk that would expand more than any zstd frame can: 65,536 raw bytes from 1, or 2.
    let big = |stored: u64| {
        format!(
            r#"{{"format":"deathtensors","format_version":1,"compression":{{"codec":"zstd","level":3,"chunk_size":65536,"tensors":{{"z":[{stored}]}}}},"tensors":{{"z":{{"dtype":"U8","shape":[65536],"data_offsets":[0,{stored}]}}}}}}"#
        )
    };
    refused(&big(1), |k| matches!(k, K::InvalidCompression { what: "chunk length" }));
    assert!(Header::parse_deathtensors(big(2).as_bytes(), &Limits::DEFAULT).is_ok());
    // A zero-length chunk.
    refused(&edited("[4096,10,1808]", "[4096,0,1818]"), |k| {
        matches!(k, K::InvalidCompression { what: "chunk length" })
    });
    // Too many, too few chunks.
    refused(&edited("[4096,10,1808]", "[4096,10,1800,8]"), |k| {
        matches!(k, K::InvalidCompression { what: "chunk count" })
    });
    refused(&edited("[4096,10,1808]", "[4096,1818]"), |k| matches!(k, K::InvalidCompression { what: "chunk count" }));
    // Lengths that do not add up to the stored range (a lie about sizes).
    refused(&edited("[4096,10,1808]", "[4096,11,1808]"), |k| matches!(k, K::ByteLengthMismatch { .. }));
    // A table for a tensor that does not exist, or listed twice.
    refused(&edited("\"h\":[", "\"x\":["), |k| matches!(k, K::InvalidCompression { .. }));
    refused(&edited("\"h\":[4096,10,1808]", "\"h\":[4096,10,1808],\"h\":[4096,10,1808]"), |k| {
        matches!(k, K::DuplicateKey { within: "compression.tensors", .. })
    });
    // A table for an empty tensor.
    // Codec, level, chunk size.
    refused(&edited("\"zstd\"", "\"lz4\""), |k| matches!(k, K::InvalidCompression { what: "codec" }));
    refused(&edited("\"level\":3", "\"level\":23"), |k| matches!(k, K::InvalidCompression { what: "level" }));
    refused(&edited("\"level\":3", "\"level\":-1"), |k| matches!(k, K::InvalidCompression { what: "level" }));
    refused(&edited("\"chunk_size\":4096", "\"chunk_size\":4095"), |k| {
        matches!(k, K::InvalidCompression { what: "chunk_size" })
    });
    refused(&edited("\"chunk_size\":4096", "\"chunk_size\":2048"), |k| {
        matches!(k, K::InvalidCompression { what: "chunk_size" })
    });
    // Unknown and missing fields, wrong types.
    refused(&edited("\"level\":3", "\"level\":3,\"x\":1"), |k| matches!(k, K::UnknownField { .. }));
    refused(&edited("\"level\":3,", ""), |k| matches!(k, K::MissingField { .. }));
    refused(&edited("[4096,10,1808]", "\"4096\""), |k| matches!(k, K::WrongType { .. }));
    refused(&edited("[4096,10,1808]", "[4096,10.5,1808]"), |k| matches!(k, K::InvalidCompression { .. }));
    // Compression with encryption is not defined.
}

#[test]
fn chunk_budget_is_a_limit() {
    let h = header();
    let bytes = Head::encode(&h, Flags::COMPRESSED).unwrap();
    let limits = Limits { max_chunks: 12, ..Limits::DEFAULT };
    let e = Header::parse_deathtensors(&bytes[24..], &limits).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::LimitExceeded { what: "chunk count", .. }), "{e}");
    let limits = Limits { max_chunks: 13, ..Limits::DEFAULT };
    assert!(Header::parse_deathtensors(&bytes[24..], &limits).is_ok());
}

#[test]
fn empty_tensors_have_no_table() {
    let specs = vec![TensorSpec::new("e", Dtype::F32, [0])];
    let e =
        Header::new_compressed(specs, Metadata::new(), 64, None, compression(), vec![Some(vec![])], &Limits::DEFAULT)
            .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::InvalidCompression { what: "chunk count" }), "{e}");
}

#[test]
fn planes_of_bf16_put_high_bytes_first() {
    let raw = [0x01, 0x3f, 0x02, 0x40, 0x03, 0xbf];
    let mut grouped = [0u8; 6];
    group_bytes(&raw, byte_planes(Dtype::BF16), &mut grouped);
    assert_eq!(grouped, [0x01, 0x02, 0x03, 0x3f, 0x40, 0xbf]);
    assert_eq!(byte_planes(Dtype::F8_E4M3), 1);
    assert_eq!(byte_planes(Dtype::I32), 1);
}

proptest! {
    #[test]
    fn planes_invert(bytes in proptest::collection::vec(any::<u8>(), 0..200), k in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)]) {
        let n = bytes.len() / k * k;
        let raw = &bytes[..n];
        let mut grouped = vec![0u8; n];
        group_bytes(raw, k, &mut grouped);
        let mut back = vec![0u8; n];
        ungroup_bytes(&grouped, k, &mut back);
        prop_assert_eq!(&back[..], raw);
        if k > 1 && n > 0 {
            prop_assert_eq!(grouped[0], raw[0]);
            prop_assert_eq!(grouped[n / k], raw[1]);
        }
    }

    #[test]
    fn any_tables_roundtrip(lens in proptest::collection::vec((1u64..40_000, any::<u64>()), 0..6)) {
        let mut specs = Vec::new();
        let mut tables = Vec::new();
        for (i, (n, seed)) in lens.iter().enumerate() {
            specs.push(TensorSpec::new(format!("t{i}"), Dtype::U8, [*n]));
            if seed % 3 == 0 {
                tables.push(None);
                continue;
            }
            let chunks = n.div_ceil(C);
            let table: Vec<u64> = (0..chunks)
                .map(|j| {
                    let raw = (n - j * C).min(C);
                    1 + (seed.rotate_left(j as u32) % raw)
                })
                .collect();
            tables.push(Some(table));
        }
        let h = Header::new_compressed(specs, Metadata::new(), 64, None, compression(), tables, &Limits::DEFAULT).unwrap();
        let f = file(&h);
        let parsed = Head::parse(&f, f.len() as u64, &Limits::DEFAULT).unwrap();
        prop_assert_eq!(parsed.header, h);
    }
}
