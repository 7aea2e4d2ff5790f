//! `verify`: footers and per-tensor digests, failures named precisely.

use deathtensors_io::format::Dtype;
use deathtensors_io::{Reader, WriteOptions};
use serde_json::json;

use crate::{assert_one_error_line, check, f32s, json, valid, write, Scratch};

#[test]
fn checksummed_fixtures_verify() {
    for name in ["all_dtypes_checksum.deathtensors", "all_dtypes_zstd_checksum.deathtensors"] {
        let path = valid(&format!("deathtensors-0.3.0/{name}"));
        let r = check(["verify".as_ref(), path.as_os_str()], 0);
        assert!(r.stdout.contains(": ok: SHA-256 footer over bytes 24.."), "{}", r.stdout);
        let doc = json(["verify".as_ref(), path.as_os_str()], 0);
        assert_eq!(doc["ok"], true);
        assert_eq!(doc["footer"], "ok");
        assert_eq!(doc["failures"], json!([]));
    }
}

#[test]
fn a_flipped_bit_fails_the_footer() {
    let path = valid("deathtensors-0.3.0/bad_checksum_bitflip.deathtensors");
    let r = check(["verify".as_ref(), path.as_os_str()], 1);
    assert!(r.stdout.contains("FAILED: SHA-256 footer mismatch over file bytes 24..3284"), "{}", r.stdout);
    assert_one_error_line(&r, &["bad_checksum_bitflip.deathtensors", "the SHA-256 footer does not match"]);
    let doc = json(["verify".as_ref(), path.as_os_str()], 1);
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["footer"], "mismatch");
    assert_eq!(doc["failures"][0]["tensor"], serde_json::Value::Null);
    assert_eq!(doc["failures"][0]["range"], json!([24, 3284]));
}

#[test]
fn a_corrupt_tensor_is_named_with_its_byte_range() {
    let dir = Scratch::new("verify-corrupt");
    let path = dir.path("model.dt");
    let tensors = [
        ("a", Dtype::F32, &[4u64][..], f32s(&[1.0, 2.0, 3.0, 4.0])),
        ("b", Dtype::F32, &[2u64][..], f32s(&[5.0, 6.0])),
    ];
    write(&path, &tensors, &WriteOptions { checksum: true, ..WriteOptions::default() });
    check(["verify".as_ref(), path.as_os_str()], 0);

    let offset = Reader::open(&path).unwrap().tensor("b").unwrap().file_offset;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + 1] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let r = check(["verify".as_ref(), path.as_os_str()], 1);
    let range = format!("(file bytes {offset}..{})", offset + 8);
    assert!(r.stdout.contains(&format!("FAILED: tensor \"b\" {range} is corrupt")), "{}", r.stdout);
    assert!(r.stdout.contains("FAILED: SHA-256 footer mismatch"), "{}", r.stdout);
    assert!(!r.stdout.contains("tensor \"a\""), "{}", r.stdout);
    assert_one_error_line(&r, &["model.dt", "tensor \"b\" and the SHA-256 footer do not match"]);

    let doc = json(["verify".as_ref(), path.as_os_str()], 1);
    assert_eq!(doc["tensors_verified"], 2);
    let failures = doc["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0]["tensor"], "b");
    assert_eq!(failures[0]["range"], json!([offset, offset + 8]));
}

#[test]
fn a_file_without_checksum_fails_unless_allowed() {
    let path = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let r = check(["verify".as_ref(), path.as_os_str()], 1);
    assert_one_error_line(&r, &["all_dtypes.safetensors", "no checksum to verify", "--allow-missing"]);
    assert_eq!(r.stdout, "");
    let r = check(["verify".as_ref(), "--allow-missing".as_ref(), path.as_os_str()], 0);
    assert!(r.stdout.contains("no checksum to verify (allowed by --allow-missing)"), "{}", r.stdout);
    let doc = json(["verify".as_ref(), "--allow-missing".as_ref(), path.as_os_str()], 0);
    assert_eq!(doc["footer"], "absent");
    assert_eq!(doc["unverified"].as_array().unwrap().len(), 18);
}
