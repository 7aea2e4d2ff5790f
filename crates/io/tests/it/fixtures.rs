//! Every fixture in `testdata/valid` reads back to exactly its manifest's
//! SHA-256 per tensor, through owned reads and zero-copy borrows; checksummed
//! fixtures verify; the bit-flipped one fails verification.

use deathtensors_io::{ErrorKind, Reader};
use serde_json::Value;

fn manifest() -> Value {
    let text = std::fs::read_to_string(crate::testdata().join("valid/manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_fixture_reads_back_to_its_manifest() {
    let manifest = manifest();
    let mut tensors_checked = 0;
    for (rel, expected) in manifest["files"].as_object().unwrap() {
        if expected["outcome"] != "ok" {
            continue;
        }
        let path = crate::testdata().join("valid").join(rel);
        let reader = Reader::open(&path).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: test data is not modified while mapped.
        let mapped = unsafe { Reader::open_mmap(&path) }.unwrap();
        for (name, t) in expected["tensors"].as_object().unwrap() {
            let want = t["sha256"].as_str().unwrap();
            let owned = reader.read(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(crate::sha256_hex(&owned), want, "{rel} {name}");
            assert_eq!(crate::sha256_hex(mapped.bytes(name).unwrap()), want, "{rel} {name} (mapped)");
            tensors_checked += 1;
        }
        if expected["flags"]["checksum"] == true {
            reader.verify_footer().unwrap_or_else(|e| panic!("{e}"));
            reader.verify().unwrap_or_else(|e| panic!("{e}"));
        } else if expected.get("flags").is_some() {
            assert!(matches!(reader.verify().unwrap_err().kind(), ErrorKind::NoChecksum { .. }), "{rel}");
        }
    }
    assert!(tensors_checked > 80, "only {tensors_checked} tensors checked");
}

#[test]
fn bitflipped_fixture_fails_verification() {
    let path = crate::testdata().join("valid/deathtensors-0.3.0/bad_checksum_bitflip.deathtensors");
    let reader = Reader::open(&path).unwrap();
    let err = reader.verify().unwrap_err();
    assert!(err.is_integrity(), "{err}");
    assert!(matches!(err.kind(), ErrorKind::ChecksumMismatch { .. }));
    let text = err.to_string();
    assert!(text.contains("bad_checksum_bitflip") && text.contains("SHA-256 footer mismatch"), "{text}");
}

#[test]
fn footer_progress_counts_every_byte_hashed() {
    // A progress bar over the footer pass sees the whole checksummed range,
    // on a good file and on a corrupt one alike.
    for name in ["all_dtypes_checksum.deathtensors", "bad_checksum_bitflip.deathtensors"] {
        let reader = Reader::open(crate::testdata().join("valid/deathtensors-0.3.0").join(name)).unwrap();
        let (start, end) = reader.head().checksummed().unwrap();
        let mut seen = 0u64;
        let result = reader.verify_footer_with(|n| seen += n);
        assert_eq!(result.is_ok(), name.starts_with("all"), "{name}");
        assert_eq!(seen, end - start, "{name}");
    }
}

#[test]
fn misaligned_legacy_tensors_are_flagged_and_read_correctly() {
    // deathtensors 0.3.0 packs an F32 right after a 3-byte BOOL.
    let path = crate::testdata().join("valid/deathtensors-0.3.0/edge_shapes.deathtensors");
    let reader = Reader::open(&path).unwrap();
    let t = reader.tensor("after_odd").unwrap();
    assert!(!t.is_aligned());
    assert!(reader.tensor("scalar").unwrap().is_aligned());
    let bytes = reader.read("after_odd").unwrap();
    let values: Vec<f32> = bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(values.len(), 5);
    assert!(values.iter().all(|v| v.is_finite()));
}

#[test]
fn compressed_fixture_decompresses_lazily_and_verifies() {
    let path = crate::testdata().join("valid/deathtensors-0.3.0/all_dtypes_zstd_checksum.deathtensors");
    let reader = Reader::open(&path).unwrap();
    assert!(reader.is_compressed());
    assert_eq!(reader.read("f32").unwrap().len(), 256);
    assert_eq!(reader.bytes("c128").unwrap().len(), 48);
    reader.verify().unwrap();
}
