//! Property tests: any valid header within the limits survives encode then
//! decode unchanged, encoding is deterministic, and decoding a mutated
//! encoding never panics (a mutated bintensors head that is still accepted
//! is still canonical).

use deathtensors_format::{Dtype, Flags, Format, Head, Header, Limits, Metadata, TensorSpec};
use proptest::prelude::*;

fn dtype() -> impl Strategy<Value = Dtype> {
    proptest::sample::select(Dtype::ALL.to_vec())
}

/// Text with the characters that stress JSON escaping: quotes, backslashes,
/// control characters, non-ASCII and astral-plane characters.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-z0-9._\"\\\\/\u{0}-\u{1f}\u{7f}éü✓\u{1F600} -]{0,12}").unwrap()
}

/// A tensor name: any text without control characters.
fn name() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zA-Z0-9._\"\\\\/ éü✓\u{1F600}-]{1,24}").unwrap()
}

fn metadata() -> impl Strategy<Value = Metadata> {
    proptest::collection::btree_map(text(), text(), 0..4)
}

fn spec() -> impl Strategy<Value = TensorSpec> {
    (name(), dtype(), proptest::collection::vec(0u64..6, 0..4), metadata(), proptest::option::of(any::<[u8; 32]>()))
        .prop_map(|(name, dtype, mut shape, metadata, sha256)| {
            // Sub-byte dtypes need whole bytes: make the element count even
            // (F4) or a multiple of 4 (F6).
            if dtype.bits() < 8 {
                shape.push(4);
            }
            TensorSpec { name, dtype, shape, metadata, sha256 }
        })
}

/// safetensors has every dtype but C128.
fn safetensors_specs() -> impl Strategy<Value = Vec<TensorSpec>> {
    specs().prop_map(|mut v| {
        v.retain(|s| s.dtype != Dtype::C128);
        v
    })
}

fn specs() -> impl Strategy<Value = Vec<TensorSpec>> {
    proptest::collection::vec(spec(), 0..12).prop_map(|mut v| {
        // Names must be unique: keep the first of each.
        let mut seen = std::collections::HashSet::new();
        v.retain(|s| seen.insert(s.name.clone()));
        v
    })
}

/// bintensors has 15 of our dtypes.
fn bintensors_specs() -> impl Strategy<Value = Vec<TensorSpec>> {
    specs().prop_map(|mut v| {
        v.retain(|s| crate::bintensors_has(s.dtype));
        v
    })
}

/// Overwrites, flips, inserts bytes or truncates.
fn mutate(bytes: &mut Vec<u8>, edits: Vec<(prop::sample::Index, u8, u8)>) {
    for (at, byte, op) in edits {
        if bytes.is_empty() {
            break;
        }
        let i = at.index(bytes.len());
        match op {
            0 => bytes[i] = byte,
            1 => bytes[i] ^= 1 << (byte % 8),
            2 => bytes.insert(i, byte),
            _ => bytes.truncate(i),
        }
    }
}

fn alignment() -> impl Strategy<Value = u64> {
    (0u32..13).prop_map(|p| 1u64 << p)
}

/// A whole file for `header`: head, zeroed blob, and a footer if flagged.
fn file(header: &Header, flags: Flags) -> Vec<u8> {
    let mut bytes = Head::encode(header, flags).unwrap();
    bytes.resize(bytes.len() + header.data_len() as usize, 0);
    if flags.contains(Flags::CHECKSUM) {
        bytes.extend_from_slice(&[0u8; 32]);
    }
    bytes
}

fn parse(bytes: &[u8]) -> deathtensors_format::Result<Head> {
    Head::parse(bytes, bytes.len() as u64, &Limits::DEFAULT)
}

/// A safetensors or bintensors header round-trips: its head is a multiple
/// of 8 bytes, decodes to it, and encodes again to the same bytes.
fn check_packed(header: Header, format: Format) -> Result<(), TestCaseError> {
    prop_assert_eq!(header.format(), format);
    let bytes = file(&header, Flags::EMPTY);
    prop_assert_eq!((bytes.len() - header.data_len() as usize) % 8, 0);
    let head = parse(&bytes).unwrap();
    prop_assert_eq!(&head.header, &header);
    prop_assert_eq!(file(&head.header, Flags::EMPTY), bytes);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn deathtensors_roundtrip(specs in specs(), global in metadata(), alignment in alignment(), checksum in any::<bool>()) {
        let header = Header::new_deathtensors(specs.clone(), global, alignment, Some("proptest".into()), &Limits::DEFAULT).unwrap();
        // Tensors keep insertion order and start at multiples of the alignment.
        prop_assert_eq!(header.len(), specs.len());
        for (t, s) in header.tensors().iter().zip(&specs) {
            prop_assert_eq!(&t.name, &s.name);
            prop_assert_eq!(t.data_offsets.0 % alignment, 0);
        }
        let flags = if checksum { Flags::CHECKSUM } else { Flags::EMPTY };
        let bytes = file(&header, flags);
        let head = parse(&bytes).unwrap();
        prop_assert_eq!(&head.header, &header);
        prop_assert_eq!(head.flags, flags);
        prop_assert_eq!(head.data_start % 64.max(alignment), 0);
        // Deterministic: encoding the decoded header gives the same bytes.
        prop_assert_eq!(file(&head.header, flags), bytes);
    }

    #[test]
    fn safetensors_roundtrip(specs in safetensors_specs(), meta in proptest::option::of(metadata())) {
        check_packed(Header::new_safetensors(specs, meta, &Limits::DEFAULT).unwrap(), Format::Safetensors)?;
    }

    #[test]
    fn bintensors_roundtrip(specs in bintensors_specs(), meta in proptest::option::of(metadata())) {
        check_packed(Header::new_bintensors(specs, meta, &Limits::DEFAULT).unwrap(), Format::Bintensors)?;
    }

    #[test]
    fn mutated_bintensors_files_never_panic(
        specs in bintensors_specs(),
        meta in proptest::option::of(metadata()),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
    ) {
        let header = Header::new_bintensors(specs, meta, &Limits::DEFAULT).unwrap();
        let mut bytes = file(&header, Flags::EMPTY);
        mutate(&mut bytes, edits);
        if let Ok(head) = parse(&bytes) {
            // What is accepted is canonical: it encodes to the same head.
            prop_assert_eq!(&file(&head.header, head.flags)[..head.data_start as usize], &bytes[..head.data_start as usize]);
        }
    }

    #[test]
    fn mutated_files_never_panic(
        specs in safetensors_specs(),
        safetensors in any::<bool>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8),
    ) {
        let header = if safetensors {
            Header::new_safetensors(specs, None, &Limits::DEFAULT).unwrap()
        } else {
            Header::new_deathtensors(specs, Metadata::new(), 64, None, &Limits::DEFAULT).unwrap()
        };
        let mut bytes = file(&header, Flags::EMPTY);
        mutate(&mut bytes, edits);
        // Whatever the bytes, parsing returns; if it accepts them, the
        // result is a valid header that round-trips.
        if let Ok(head) = parse(&bytes) {
            if !head.is_compressed() {
                let again = parse(&file(&head.header, head.flags)).unwrap();
                prop_assert_eq!(again.header, head.header);
            }
        }
    }
}

#[test]
fn safetensors_refuses_c128_which_safetensors_cannot_read() {
    let err =
        Header::new_safetensors(vec![TensorSpec::new("z", Dtype::C128, [1])], None, &Limits::DEFAULT).unwrap_err();
    assert_eq!(err.kind(), &deathtensors_format::ErrorKind::UnknownDtype("C128".into()));
    assert_eq!(err.tensor(), Some("z"));
}

#[test]
fn zero_element_tensors_with_huge_dimensions_are_valid() {
    let specs =
        vec![TensorSpec::new("empty", Dtype::F64, [u64::MAX, 0, u64::MAX]), TensorSpec::new("scalar", Dtype::C128, [])];
    let header = Header::new_deathtensors(specs, Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    assert_eq!(header.get("empty").unwrap().byte_len(), 0);
    assert_eq!(header.get("scalar").unwrap().data_offsets, (0, 16));
    let head = parse(&file(&header, Flags::EMPTY)).unwrap();
    assert_eq!(head.header, header);
}

#[test]
fn layout_pads_each_tensor_to_the_alignment() {
    let specs = vec![
        TensorSpec::new("a", Dtype::BOOL, [3]),
        TensorSpec::new("b", Dtype::F32, [5]),
        TensorSpec::new("c", Dtype::U8, [0]),
        TensorSpec::new("d", Dtype::I64, [1]),
    ];
    let header = Header::new_deathtensors(specs, Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let offsets: Vec<_> = header.tensors().iter().map(|t| t.data_offsets).collect();
    assert_eq!(offsets, [(0, 3), (64, 84), (128, 128), (128, 136)]);
    assert_eq!(header.data_len(), 136);
    let packed = Header::new_deathtensors(
        header.tensors().iter().map(|t| TensorSpec::new(t.name.clone(), t.dtype, t.shape.clone())).collect(),
        Metadata::new(),
        1,
        None,
        &Limits::DEFAULT,
    )
    .unwrap();
    assert_eq!(packed.get("b").unwrap().data_offsets, (3, 23));
}

#[test]
fn encoder_output_is_compact_and_opens_at_a_64_byte_boundary() {
    let mut spec = TensorSpec::new("w", Dtype::F32, [2]);
    spec.metadata.insert("k".into(), "v\"\n".into());
    spec.sha256 = Some([0xab; 32]);
    let mut global = Metadata::new();
    global.insert("model".into(), "tiny".into());
    let header = Header::new_deathtensors(vec![spec], global, 64, Some("me".into()), &Limits::DEFAULT).unwrap();
    let head = Head::encode(&header, Flags::CHECKSUM).unwrap();
    assert_eq!(&head[..8], b"DTLEGION");
    assert_eq!(u32::from_le_bytes(head[8..12].try_into().unwrap()), 1);
    assert_eq!(u32::from_le_bytes(head[12..16].try_into().unwrap()), 2);
    assert_eq!(u64::from_le_bytes(head[16..24].try_into().unwrap()) as usize, head.len() - 24);
    assert_eq!(head.len() % 64, 0);
    let json = std::str::from_utf8(&head[24..]).unwrap().trim_end_matches(' ');
    let digest = "ab".repeat(32);
    assert_eq!(
        json,
        format!(
            r#"{{"format":"deathtensors","format_version":1,"created_by":"me","alignment":64,"global_metadata":{{"model":"tiny"}},"tensors":{{"w":{{"dtype":"F32","shape":[2],"data_offsets":[0,8],"metadata":{{"k":"v\"\n"}},"sha256":"{digest}"}}}}}}"#
        )
    );
}
