//! Hostile and invalid files (`testdata/invalid`, written by its `make.py`):
//! `Head::parse` rejects each one with the `ErrorKind` its manifest lists,
//! and a one-line message. Tests of rejected input that need no file on
//! disk belong in the module of the feature they exercise.

use std::collections::BTreeSet;

use deathtensors_format::{Head, Limits};
use serde_json::Value;

/// Files in `testdata/invalid` that are not test inputs.
const NOT_INPUTS: [&str; 3] = ["make.py", "README.md", "manifest.json"];

fn manifest() -> Value {
    let path = crate::testdata().join("invalid/manifest.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run testdata/invalid/make.py)", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// `Limits::DEFAULT`, with the fields of the manifest entry's `limits` (if
/// any) overriding it.
fn limits_of(entry: &Value) -> Limits {
    let mut limits = Limits::DEFAULT;
    let Some(overrides) = entry.get("limits") else {
        return limits;
    };
    for (field, value) in overrides.as_object().unwrap() {
        let value = value.as_u64().unwrap();
        match field.as_str() {
            "max_header_len" => limits.max_header_len = value,
            "max_tensors" => limits.max_tensors = value,
            "max_rank" => limits.max_rank = value,
            "max_name_len" => limits.max_name_len = value,
            "max_chunks" => limits.max_chunks = value,
            other => panic!("unknown limit {other:?} in the manifest"),
        }
    }
    limits
}

/// The variant name of a `Debug` rendering: `Truncated { .. }` gives `Truncated`.
fn variant(debug: &str) -> &str {
    let end = debug.find(['{', '(', ' ']).unwrap_or(debug.len());
    &debug[..end]
}

#[track_caller]
fn check(name: &str, bytes: &[u8], limits: &Limits, expected_kind: &str) {
    let err = match Head::parse(bytes, bytes.len() as u64, limits) {
        Ok(head) => panic!("{name}: accepted, but must fail with {expected_kind}: {head:?}"),
        Err(err) => err,
    };
    let debug = format!("{:?}", err.kind());
    assert_eq!(variant(&debug), expected_kind, "{name}: wrong error kind: {debug} ({err})");
    let message = err.to_string();
    assert!(!message.is_empty(), "{name}: empty error message");
    assert!(!message.contains(['\n', '\r']), "{name}: error message spans lines: {message:?}");
}

#[test]
fn every_invalid_file_is_rejected_with_its_kind() {
    let manifest = manifest();
    let files = manifest["files"].as_object().unwrap();
    for (name, entry) in files {
        let bytes =
            std::fs::read(crate::testdata().join("invalid").join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        check(name, &bytes, &limits_of(entry), entry["kind"].as_str().unwrap());
    }
    assert!(files.len() >= 70, "only {} invalid files", files.len());
}

#[test]
fn manifest_lists_exactly_the_files_in_the_folder() {
    let manifest = manifest();
    let listed: BTreeSet<String> = manifest["files"].as_object().unwrap().keys().cloned().collect();
    let present: BTreeSet<String> = std::fs::read_dir(crate::testdata().join("invalid"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| !NOT_INPUTS.contains(&name.as_str()))
        .collect();
    let unlisted: Vec<_> = present.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&present).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "not in the manifest: {unlisted:?}; listed but absent: {missing:?} (rerun make.py)"
    );
}

#[test]
fn every_manifest_entry_says_why() {
    let manifest = manifest();
    for (name, entry) in manifest["files"].as_object().unwrap() {
        let why = entry["why"].as_str().unwrap_or("");
        assert!(!why.is_empty() && !why.contains('\n'), "{name}: bad \"why\"");
    }
}

/// safetensors' header cap (100,000,000 bytes) applies to safetensors files
/// in both directions; deathtensors files keep the 100 MiB limit.
#[test]
fn safetensors_headers_stop_at_safetensors_cap() {
    use deathtensors_format::{ErrorKind, Format, Header, SAFETENSORS_MAX_HEADER};
    let at_cap = {
        let mut p = SAFETENSORS_MAX_HEADER.to_le_bytes().to_vec();
        p.push(b'{');
        p
    };
    assert_eq!(Head::needed(&at_cap, &Limits::DEFAULT).unwrap(), 8 + SAFETENSORS_MAX_HEADER);
    let mut over = (SAFETENSORS_MAX_HEADER + 1).to_le_bytes().to_vec();
    over.push(b'{');
    let err = Head::needed(&over, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { limit: SAFETENSORS_MAX_HEADER, .. }), "{err}");
    // A deathtensors header of that length is within our own limit.
    let mut dt = deathtensors_format::MAGIC.to_vec();
    dt.extend_from_slice(&1u32.to_le_bytes());
    dt.extend_from_slice(&0u32.to_le_bytes());
    dt.extend_from_slice(&(SAFETENSORS_MAX_HEADER + 1).to_le_bytes());
    assert!(Head::needed(&dt, &Limits::DEFAULT).is_ok());
    // Decoding: the length check comes first, before any JSON is read.
    let json = vec![b' '; SAFETENSORS_MAX_HEADER as usize + 1];
    let err = Header::parse(&json, Format::Safetensors, &Limits::DEFAULT).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { .. }), "{err}");
    let err = Header::parse(&json, Format::Deathtensors, &Limits::DEFAULT).unwrap_err();
    assert!(!matches!(err.kind(), ErrorKind::LimitExceeded { .. }), "{err}");
}
