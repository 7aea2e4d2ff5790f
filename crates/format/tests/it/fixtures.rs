//! Files written by deathtensors 0.3.0, safetensors 0.8.0 and bintensors
//! 0.2.0 (`testdata/valid`) decode to exactly what their manifest states, and
//! our safetensors and bintensors encoders reproduce their heads byte for
//! byte.

use deathtensors_format::{Dtype, Flags, Format, Head, Header, Limits, Metadata, TensorSpec};
use serde_json::Value;

fn manifest() -> Value {
    let text = std::fs::read_to_string(crate::testdata().join("valid/manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn metadata_of(v: &Value) -> Metadata {
    v.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect()
}

#[track_caller]
fn check_file(rel: &str, expected: &Value) {
    let bytes = std::fs::read(crate::testdata().join("valid").join(rel)).unwrap();
    let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let header = &head.header;
    if let Some(flags) = expected.get("flags") {
        assert_eq!(head.flags.contains(Flags::CHECKSUM), flags["checksum"].as_bool().unwrap(), "{rel}");
        assert_eq!(head.flags.contains(Flags::ZSTD), flags["compressed"].as_bool().unwrap(), "{rel}");
        assert_eq!(header.format(), Format::Deathtensors, "{rel}");
    } else if expected["format"] == "bintensors" {
        assert_eq!(header.format(), Format::Bintensors, "{rel}");
    } else {
        assert_eq!(header.format(), Format::Safetensors, "{rel}");
    }
    let global = metadata_of(&expected["global_metadata"]);
    match header.format() {
        Format::Deathtensors => assert_eq!(header.metadata(), Some(&global), "{rel}"),
        // safetensors: absent `__metadata__` is `None`, and the manifest says `{}`.
        Format::Safetensors => assert_eq!(header.metadata().cloned().unwrap_or_default(), global, "{rel}"),
        // bintensors: `None` and `{}` are different files.
        Format::Bintensors => {
            let none = expected["metadata_is_none"].as_bool().unwrap();
            assert_eq!(header.metadata(), (!none).then_some(&global), "{rel}");
        }
    }
    if let Some(order) = expected.get("order_in_file") {
        let names: Vec<&str> = header.tensors().iter().map(|t| t.name.as_str()).collect();
        let want: Vec<&str> = order.as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        assert_eq!(names, want, "{rel}");
        for t in header.tensors() {
            let o = &expected["tensors"][t.name.as_str()]["data_offsets"];
            assert_eq!([t.data_offsets.0, t.data_offsets.1], [o[0].as_u64().unwrap(), o[1].as_u64().unwrap()], "{rel}");
        }
    }
    let tensors = expected["tensors"].as_object().unwrap();
    assert_eq!(header.len(), tensors.len(), "{rel}");
    for (name, t) in tensors {
        let info = header.get(name).unwrap_or_else(|| panic!("{rel}: no tensor {name}"));
        assert_eq!(info.dtype.name(), t["dtype"].as_str().unwrap(), "{rel} {name}");
        let shape: Vec<u64> = t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(info.shape, shape, "{rel} {name}");
        assert_eq!(info.byte_len(), t["nbytes"].as_u64().unwrap(), "{rel} {name}");
        assert_eq!(info.metadata, metadata_of(&t["metadata"]), "{rel} {name}");
    }
}

#[test]
fn every_fixture_matches_its_manifest() {
    let manifest = manifest();
    let files = manifest["files"].as_object().unwrap();
    let mut checked = 0;
    for (rel, expected) in files {
        if expected["outcome"] == "ok" {
            check_file(rel, expected);
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} fixtures checked");
}

#[test]
fn bitflipped_fixture_still_parses() {
    // Its header is intact; only the footer check (in deathtensors-io) fails.
    let bytes =
        std::fs::read(crate::testdata().join("valid/deathtensors-0.3.0/bad_checksum_bitflip.deathtensors")).unwrap();
    let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
    assert!(head.flags.contains(Flags::CHECKSUM));
    assert_eq!(head.footer(), Some((bytes.len() as u64 - 32, bytes.len() as u64)));
}

#[test]
fn legacy_offsets_are_packed_and_the_blob_starts_at_a_multiple_of_8() {
    let bytes = std::fs::read(crate::testdata().join("valid/deathtensors-0.3.0/edge_shapes.deathtensors")).unwrap();
    let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
    assert_eq!(head.data_start, 808);
    assert_eq!(head.header.alignment(), 1);
    let after_odd = head.header.get("after_odd").unwrap();
    assert_eq!(after_odd.data_offsets, (7, 27));
    assert_eq!(head.header.created_by(), Some("deathtensors 0.3.0 (death legion)"));
}

/// Rebuilds a safetensors file's header from its tensors with our encoder.
fn reencode_safetensors(bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let head = Head::parse(bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
    // Feed the tensors in a scrambled order: the encoder must sort them as
    // safetensors does.
    let mut specs: Vec<TensorSpec> =
        head.header.tensors().iter().map(|t| TensorSpec::new(t.name.clone(), t.dtype, t.shape.clone())).collect();
    specs.reverse();
    let rebuilt = Header::new_safetensors(specs, head.header.metadata().cloned(), &Limits::DEFAULT).unwrap();
    let ours = Head::encode(&rebuilt, Flags::EMPTY).unwrap();
    (ours, bytes[..head.data_start as usize].to_vec())
}

#[test]
fn safetensors_encoder_reproduces_fixture_headers() {
    for rel in [
        "safetensors-0.8.0/all_dtypes.safetensors",
        "safetensors-0.8.0/empty.safetensors",
        "safetensors-0.8.0/sharded/model-00001-of-00002.safetensors",
        "safetensors-0.8.0/sharded/model-00002-of-00002.safetensors",
    ] {
        let bytes = std::fs::read(crate::testdata().join("valid").join(rel)).unwrap();
        let (ours, theirs) = reencode_safetensors(&bytes);
        assert_eq!(String::from_utf8_lossy(&ours[8..]), String::from_utf8_lossy(&theirs[8..]), "{rel}");
        assert_eq!(ours, theirs, "{rel}");
    }
}

#[test]
fn safetensors_multi_key_metadata_is_reproduced_up_to_key_order() {
    // safetensors writes `__metadata__` from a HashMap, so its key order is
    // random (the manifest says byte_identical_on_rewrite: false); ours is
    // sorted. Everything else must match.
    let rel = "safetensors-0.8.0/multi_metadata.safetensors";
    let bytes = std::fs::read(crate::testdata().join("valid").join(rel)).unwrap();
    let (ours, theirs) = reencode_safetensors(&bytes);
    assert_eq!(ours.len(), theirs.len());
    let ours = String::from_utf8(ours[8..].to_vec()).unwrap();
    let theirs = String::from_utf8(theirs[8..].to_vec()).unwrap();
    assert!(ours.starts_with(r#"{"__metadata__":{"format":"pt","license":"MIT","producer":"fixture"},"#), "{ours}");
    let tensors = |s: &str| s[s.find("},").unwrap()..].to_string();
    assert_eq!(tensors(&ours), tensors(&theirs));
}

/// How a header constructor without alignment lays tensors out.
type Lay = fn(Vec<TensorSpec>, Option<Metadata>, &Limits) -> deathtensors_format::Result<Header>;

/// Lays out one-element tensors of the given names and dtypes with `lay`,
/// checks the order of their names, and returns the header.
#[track_caller]
fn check_order(lay: Lay, given: &[(&str, Dtype)], expected: &[&str]) -> Header {
    let specs = given.iter().map(|&(name, dtype)| TensorSpec::new(name, dtype, [1])).collect();
    let h = lay(specs, None, &Limits::DEFAULT).unwrap();
    let names: Vec<&str> = h.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, expected);
    h
}

#[test]
fn safetensors_sort_order_follows_dtype_then_name() {
    let given = [("b", Dtype::U8), ("a", Dtype::U8), ("z", Dtype::F64), ("m", Dtype::BF16)];
    let h = check_order(Header::new_safetensors, &given, &["z", "m", "a", "b"]);
    let head = Head::encode(&h, Flags::EMPTY).unwrap();
    assert_eq!(head.len() % 8, 0);
    assert!(head[8..].starts_with(br#"{"z":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"m""#));
}

/// Every bintensors fixture: its head, rebuilt by our encoder from its
/// tensors (given in another order), byte for byte.
#[test]
fn bintensors_encoder_reproduces_every_fixture_head() {
    let manifest = manifest();
    let mut checked = 0;
    for (rel, expected) in manifest["files"].as_object().unwrap() {
        if expected["format"] != "bintensors" {
            continue;
        }
        let bytes = std::fs::read(crate::testdata().join("valid").join(rel)).unwrap();
        let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
        let mut specs: Vec<TensorSpec> =
            head.header.tensors().iter().map(|t| TensorSpec::new(t.name.clone(), t.dtype, t.shape.clone())).collect();
        specs.reverse();
        let rebuilt = Header::new_bintensors(specs, head.header.metadata().cloned(), &Limits::DEFAULT).unwrap();
        assert_eq!(rebuilt, head.header, "{rel}");
        let ours = Head::encode(&rebuilt, Flags::EMPTY).unwrap();
        assert_eq!(ours, bytes[..head.data_start as usize], "{rel}");
        checked += 1;
    }
    assert!(checked >= 15, "only {checked} bintensors fixtures");
}

#[test]
fn bintensors_sort_order_is_bintensors_dtype_index_then_name() {
    // bintensors numbers F64 12, I64 13, U64 14: not by size.
    let given = [
        ("b", Dtype::BOOL),
        ("f", Dtype::F64),
        ("u", Dtype::U64),
        ("a", Dtype::BOOL),
        ("i", Dtype::I64),
        ("e", Dtype::F8_E4M3),
        ("d", Dtype::F8_E5M2),
    ];
    check_order(Header::new_bintensors, &given, &["u", "i", "f", "e", "d", "a", "b"]);
}

#[test]
fn bintensors_refuses_dtypes_it_lacks_naming_the_tensor() {
    for dtype in Dtype::ALL {
        let specs = vec![TensorSpec::new("w", dtype, [2, 4])];
        let result = Header::new_bintensors(specs, None, &Limits::DEFAULT);
        let supported = crate::bintensors_has(dtype);
        match result {
            Ok(_) => assert!(supported, "{dtype} accepted"),
            Err(e) => {
                assert!(!supported, "{dtype}: {e}");
                assert_eq!(e.to_string(), format!("tensor \"w\": bintensors files cannot store dtype {dtype}"));
            }
        }
    }
}

#[test]
fn bintensors_metadata_none_and_empty_are_different_files() {
    let none = Header::new_bintensors(vec![], None, &Limits::DEFAULT).unwrap();
    let empty = Header::new_bintensors(vec![], Some(Metadata::new()), &Limits::DEFAULT).unwrap();
    assert_eq!(Head::encode(&none, Flags::EMPTY).unwrap(), b"\x08\0\0\0\0\0\0\0\0\0      ");
    assert_eq!(Head::encode(&empty, Flags::EMPTY).unwrap(), b"\x08\0\0\0\0\0\0\0\x01\0\0     ");
    assert_ne!(none, empty);
}
