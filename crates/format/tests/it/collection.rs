//! Collection manifests and block headers (docs/FORMAT.md section 13):
//! encode → parse roundtrips, canonical encoding, and manifests or layouts
//! that must be refused.

use deathtensors_format::{
    check_block_name, BlockRef, Dtype, ErrorKind, Head, Limits, Manifest, Metadata, RowLayout, BLOCK_ALIGNMENT,
    MANIFEST_NAME, MAX_BLOCKS, MAX_BLOCK_BYTES, MAX_MANIFEST_LEN,
};
use proptest::prelude::*;

fn layout() -> impl Strategy<Value = RowLayout> {
    (proptest::sample::select(Dtype::ALL.to_vec()), proptest::collection::vec(1u64..7, 0..4), 1u64..10_000)
        .prop_filter_map("rows of whole bytes", |(dtype, shape, block_rows)| {
            RowLayout::new(dtype, shape, block_rows).ok()
        })
}

/// Text that stresses JSON escaping.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9._\"\\\\/\u{0}-\u{1f}\u{7f}éü✓\u{1F600} -]{0,12}").unwrap()
}

fn block_name() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[A-Za-z0-9_-][A-Za-z0-9._-]{0,40}").unwrap()
}

fn manifest() -> impl Strategy<Value = Manifest> {
    (
        layout(),
        any::<u64>(),
        proptest::collection::btree_map(text(), text(), 0..4),
        proptest::collection::vec((block_name(), proptest::option::of(any::<[u8; 32]>())), 0..12),
        any::<u64>(),
    )
        .prop_map(|(layout, generation, metadata, mut blocks, last)| {
            let mut seen = std::collections::HashSet::new();
            blocks.retain(|(name, _)| name != MANIFEST_NAME && seen.insert(name.clone()));
            let n = blocks.len();
            let cap = layout.block_rows;
            let blocks = blocks
                .into_iter()
                .enumerate()
                .map(|(i, (file, sha256))| BlockRef {
                    file,
                    rows: if i + 1 == n { 1 + last % cap } else { cap },
                    sha256,
                })
                .collect();
            Manifest { layout, generation, metadata, blocks }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn manifest_roundtrips(m in manifest()) {
        m.check().unwrap();
        let bytes = m.encode();
        let back = Manifest::parse(&bytes).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(back.rows(), m.rows());
        // Canonical: the same manifest always gives the same bytes.
        prop_assert_eq!(back.encode(), bytes.clone());
        prop_assert_eq!(m.clone().encode(), bytes.clone());
        prop_assert!(bytes.ends_with(b"]}\n"), "ends in a newline");
        // Any JSON spelling of it (other key order, whitespace) parses to it
        // and encodes to the canonical bytes.
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(value["rows"].as_u64(), Some(m.rows()));
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        let again = Manifest::parse(&pretty).unwrap();
        prop_assert_eq!(&again, &m);
        prop_assert_eq!(again.encode(), bytes);
    }

    #[test]
    fn mutated_manifest_never_panics(m in manifest(), at in any::<usize>(), byte in any::<u8>(), cut in any::<bool>()) {
        let mut bytes = m.encode();
        let at = at % bytes.len();
        if cut {
            bytes.truncate(at);
        } else {
            bytes[at] = byte;
        }
        if let Ok(parsed) = Manifest::parse(&bytes) {
            // Whatever parses obeys the rules and roundtrips.
            parsed.check().unwrap();
            prop_assert_eq!(Manifest::parse(&parsed.encode()).unwrap(), parsed);
        }
    }

    #[test]
    fn block_header_checks_against_its_layout(layout in layout(), other in layout()) {
        let header = layout.block_header().unwrap();
        prop_assert_eq!(header.len() as u64 % BLOCK_ALIGNMENT, 0);
        let file_len = header.len() as u64 + layout.block_bytes();
        let head = Head::parse(&header, file_len, &Limits::DEFAULT).unwrap();
        prop_assert_eq!(layout.check_block(&head).unwrap(), header.len() as u64);
        let same = other.dtype == layout.dtype && other.block_shape() == layout.block_shape();
        prop_assert_eq!(other.check_block(&head).is_ok(), same);
    }
}

fn good() -> Manifest {
    let layout = RowLayout::new(Dtype::F32, vec![2, 3], 4).unwrap();
    let blocks = vec![
        BlockRef { file: "a.dt".into(), rows: 4, sha256: Some([7; 32]) },
        BlockRef { file: "b.dt".into(), rows: 4, sha256: None },
        BlockRef { file: "c.dt".into(), rows: 2, sha256: None },
    ];
    let metadata: Metadata = [("k".to_string(), "v".to_string())].into();
    Manifest { layout, generation: 9, metadata, blocks }
}

#[test]
fn encoding_is_canonical() {
    let text = String::from_utf8(good().encode()).unwrap();
    let sevens = "07".repeat(32);
    assert_eq!(
        text,
        format!(
            "{{\"format\":\"deathtensors-collection\",\"format_version\":1,\"dtype\":\"F32\",\"row_shape\":[2,3],\
             \"block_rows\":4,\"rows\":10,\"generation\":9,\"metadata\":{{\"k\":\"v\"}},\"blocks\":[\n\
             {{\"file\":\"a.dt\",\"rows\":4,\"sha256\":\"{sevens}\"}},\n\
             {{\"file\":\"b.dt\",\"rows\":4}},\n\
             {{\"file\":\"c.dt\",\"rows\":2}}]}}\n"
        )
    );
    let empty = Manifest::new(RowLayout::new(Dtype::U8, vec![], 1).unwrap());
    assert_eq!(
        String::from_utf8(empty.encode()).unwrap(),
        "{\"format\":\"deathtensors-collection\",\"format_version\":1,\"dtype\":\"U8\",\"row_shape\":[],\
         \"block_rows\":1,\"rows\":0,\"generation\":0,\"blocks\":[]}\n"
    );
    assert_eq!(Manifest::parse(&empty.encode()).unwrap(), empty);
}

/// Parses `good()`'s encoding with `from` replaced by `to`, and checks the
/// error kind and that its message contains `needle`.
#[track_caller]
fn check(from: &str, to: &str, kind: impl Fn(&ErrorKind) -> bool, needle: &str) {
    let text = String::from_utf8(good().encode()).unwrap();
    assert!(text.contains(from), "{from:?} not in {text}");
    let err = Manifest::parse(text.replacen(from, to, 1).as_bytes()).unwrap_err();
    let msg = err.to_string();
    assert!(kind(err.kind()), "{:?}: {msg}", err.kind());
    assert!(msg.contains(needle), "{msg:?} does not contain {needle:?}");
}

fn invalid(k: &ErrorKind) -> bool {
    matches!(k, ErrorKind::InvalidCollection { .. })
}

#[test]
fn manifests_that_break_a_rule() {
    check("\"rows\":10,", "\"rows\":11,", invalid, "rows is 11 but the blocks hold 10");
    check("\"b.dt\",\"rows\":4", "\"b.dt\",\"rows\":3", invalid, "blocks[1] holds 3 rows");
    check("\"c.dt\",\"rows\":2", "\"c.dt\",\"rows\":0", invalid, "the last block holds 0 rows");
    check("\"c.dt\",\"rows\":2", "\"c.dt\",\"rows\":5", invalid, "the last block holds 5 rows");
    check("\"b.dt\"", "\"a.dt\"", invalid, "block file \"a.dt\" is listed twice");
    check("\"b.dt\"", "\"../b.dt\"", invalid, "blocks[1].file \"../b.dt\"");
    check("\"b.dt\"", "\".b.dt\"", invalid, "must not start with '.'");
    check("\"b.dt\"", "\"collection.json\"", invalid, "cannot be the manifest");
    check("\"b.dt\"", "4", |k| matches!(k, ErrorKind::WrongType { .. }), "file must be string");
    check("deathtensors-collection", "deathtensors", invalid, "format is not");
    check("\"format_version\":1", "\"format_version\":0", |k| matches!(k, ErrorKind::UnsupportedFormatVersion(0)), "0");
    check("\"block_rows\":4", "\"block_rows\":0", invalid, "block_rows must be at least 1");
    check("[2,3]", "[2,0]", invalid, "has no elements");
    check("[2,3]", "[2,3.5]", |k| matches!(k, ErrorKind::WrongType { .. }), "row_shape");
    let rank65 = format!("[{}1]", "1,".repeat(64));
    check("[2,3]", &rank65, |k| matches!(k, ErrorKind::LimitExceeded { .. }), "row rank 65");
    check(
        "\"dtype\":\"F32\",\"row_shape\":[2,3]",
        "\"dtype\":\"F4\",\"row_shape\":[3]",
        invalid,
        "a row of 3 F4 elements is not a whole number of bytes",
    );
    check("\"generation\":9", "\"generation\":-9", |k| matches!(k, ErrorKind::WrongType { .. }), "generation");
    check(
        "\"generation\":9",
        "\"generation\":18446744073709551616",
        |k| matches!(k, ErrorKind::WrongType { .. }),
        "generation",
    );
    check("\"sha256\":\"07", "\"sha256\":\"G7", invalid, "blocks[0].sha256 is not 64 lowercase hex digits");
    check("\"sha256\":\"07", "\"sha256\":\"0707", invalid, "blocks[0].sha256");
    let digest = format!("\"{}\"", "07".repeat(32));
    check(&digest, "7", |k| matches!(k, ErrorKind::WrongType { .. }), "sha256 must be string");
}

#[test]
fn manifests_that_are_not_well_formed() {
    let json = |k: &ErrorKind| matches!(k, ErrorKind::InvalidJson { .. });
    check("]}\n", "]", json, "JSON");
    check("]}\n", "]}}", json, "JSON");
    check("\"k\":\"v\"", "\"k\":\"v\",\"k\":\"w\"", |k| matches!(k, ErrorKind::DuplicateKey { .. }), "\"k\"");
    check("\"rows\":10,", "\"rows\":10,\"rows\":10,", |k| matches!(k, ErrorKind::DuplicateKey { .. }), "\"rows\"");
    check("\"rows\":10,", "\"rows\":10,\"zstd\":true,", |k| matches!(k, ErrorKind::UnknownField { .. }), "\"zstd\"");
    check("\"c.dt\",", "\"c.dt\",\"offset\":0,", |k| matches!(k, ErrorKind::UnknownField { .. }), "\"offset\"");
    check("\"generation\":9,", "", |k| matches!(k, ErrorKind::MissingField { field: "generation" }), "generation");
    check("\"k\":\"v\"", "\"k\":1", |k| matches!(k, ErrorKind::MetadataNotString { .. }), "\"k\"");
    check("\"F32\"", "\"f32\"", |k| matches!(k, ErrorKind::UnknownDtype(_)), "\"f32\"");
    for bad in [&b""[..], b"null", b"[]", b"\"collection\"", b"{}", b"\xff{}"] {
        assert!(Manifest::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn manifest_over_the_length_limit() {
    // Zeroed memory is not touched: the length is checked first.
    let huge = vec![0u8; MAX_MANIFEST_LEN as usize + 1];
    let err = Manifest::parse(&huge).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { what: "manifest length", .. }), "{err}");
}

#[test]
fn block_names() {
    for ok in ["a", "blk-0000000000000001-00000001.dt", "A_b-c.d", "x..y", &"n".repeat(128)] {
        assert_eq!(check_block_name(ok), Ok(()), "{ok:?}");
    }
    for bad in ["", ".", "..", ".a", "a/b", "/a", "a\\b", "a b", "é", "a\0", "collection.json", &"n".repeat(129)] {
        assert!(check_block_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn layouts_that_are_refused() {
    let refused = |dtype, shape: &[u64], block_rows, needle: &str| {
        let err = RowLayout::new(dtype, shape.to_vec(), block_rows).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::InvalidCollection { .. }), "{err}");
        assert!(err.to_string().contains(needle), "{err} does not contain {needle:?}");
    };
    refused(Dtype::U8, &[2], 0, "block_rows must be at least 1");
    refused(Dtype::U8, &[0], 1, "has no elements");
    refused(Dtype::F4, &[3], 1, "not a whole number of bytes");
    refused(Dtype::U8, &[1; 65], 1, "row shape has 65 dimensions, at most 64");
    refused(Dtype::U8, &[u64::MAX, 2], 1, "overflows");
    refused(Dtype::U8, &[1 << 20], (MAX_BLOCK_BYTES >> 20) + 1, "exceeds");
    // A row too big to count in bytes is refused (its message: see below).
    refused(Dtype::U64, &[u64::MAX / 4], 1, "");
    // At the limit is fine.
    let edge = RowLayout::new(Dtype::U8, vec![1 << 20], MAX_BLOCK_BYTES >> 20).unwrap();
    assert_eq!(edge.block_bytes(), MAX_BLOCK_BYTES);
    assert_eq!(RowLayout::new(Dtype::F4, vec![2], 1).unwrap().row_bytes(), 1);
    assert_eq!(RowLayout::new(Dtype::F32, vec![], 1).unwrap().row_bytes(), 4);
}

/// A row whose byte length overflows is refused as an overflow, not as
/// "not a whole number of bytes" (which U64 rows always are).
#[test]
fn row_byte_length_overflow_is_named() {
    let err = RowLayout::new(Dtype::U64, vec![u64::MAX / 4], 1).unwrap_err();
    assert!(err.to_string().contains("overflow"), "{err}");
}

/// Every manifest a writer may commit parses back: `MAX_BLOCKS` entries of
/// the longest names fit in `MAX_MANIFEST_LEN`, one block more is refused,
/// and so is metadata that would make the manifest too long.
#[test]
fn every_committable_manifest_parses_back() {
    let layout = RowLayout::new(Dtype::U8, vec![1], 1).unwrap();
    let n = MAX_BLOCKS as usize;
    let blocks: Vec<BlockRef> =
        (0..n).map(|i| BlockRef { file: format!("{i:0>128}"), rows: 1, sha256: Some([0xab; 32]) }).collect();
    let mut m = Manifest { layout, generation: u64::MAX, metadata: Metadata::new(), blocks };
    let bytes = m.to_bytes().unwrap();
    assert!(Manifest::parse(&bytes).is_ok(), "{n} blocks encode to {} bytes", bytes.len());
    m.blocks.push(BlockRef { file: "one-more".into(), rows: 1, sha256: None });
    assert!(m.check().is_err(), "one block over MAX_BLOCKS");
    m.blocks.truncate(1);
    m.metadata.insert("big".into(), "x".repeat(MAX_MANIFEST_LEN as usize));
    let err = m.to_bytes().unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { what: "manifest length", .. }), "{err}");
}
