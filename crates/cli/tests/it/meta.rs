//! `meta`: reading global metadata, and changing it by an atomic rewrite
//! that keeps everything else.

use deathtensors_io::format::{Dtype, Metadata, TensorSpec};
use deathtensors_io::{save, WriteOptions};
use serde_json::{json, Value};

use crate::{assert_one_error_line, assert_same_tensors, check, json, valid, Scratch};

#[test]
fn metadata_prints_as_lines_and_json() {
    let path = valid("safetensors-0.8.0/multi_metadata.safetensors");
    let r = check(["meta".as_ref(), path.as_os_str()], 0);
    assert_eq!(r.stdout, "format=pt\nlicense=MIT\nproducer=fixture\n");
    let doc = json(["meta".as_ref(), path.as_os_str()], 0);
    assert_eq!(doc, json!({ "format": "pt", "license": "MIT", "producer": "fixture" }));
    let empty = valid("safetensors-0.8.0/empty.safetensors");
    assert_eq!(check(["meta".as_ref(), empty.as_os_str()], 0).stdout, "");
}

#[test]
fn set_and_delete_rewrite_safetensors_keeping_the_tensors() {
    let dir = Scratch::new("meta-safetensors");
    let src = valid("safetensors-0.8.0/multi_metadata.safetensors");
    let path = dir.path("m.safetensors");
    std::fs::copy(&src, &path).unwrap();
    let args = |extra: &[&str]| {
        let mut a = vec!["meta".to_string(), path.to_str().unwrap().to_string()];
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let r = check(args(&["--set", "author=Death Legion", "--set", "eq=a=b", "--delete", "format"]), 0);
    assert!(r.stdout.contains("metadata updated (4 keys)"), "{}", r.stdout);
    let doc = json(["meta".as_ref(), path.as_os_str()], 0);
    assert_eq!(doc, json!({ "author": "Death Legion", "eq": "a=b", "license": "MIT", "producer": "fixture" }));
    assert_same_tensors(&src, &path);
    assert_eq!(json(["inspect".as_ref(), path.as_os_str()], 0)["format"], "safetensors");

    // Deleting every key leaves no __metadata__.
    check(args(&["--delete", "author", "--delete", "eq", "--delete", "license", "--delete", "producer"]), 0);
    assert_eq!(json(["inspect".as_ref(), path.as_os_str()], 0)["metadata"], Value::Null);
    assert!(!std::fs::read_to_string(&path).unwrap_or_default().contains("__metadata__"));
    assert_same_tensors(&src, &path);
    // A missing key is a warning, and nothing changes.
    let r = check(args(&["--delete", "nope"]), 0);
    assert!(r.stderr.contains("warning: ") && r.stderr.contains("no metadata key \"nope\""), "{}", r.stderr);
    assert!(r.stdout.contains("metadata unchanged"), "{}", r.stdout);
    assert_eq!(dir.entries(), ["m.safetensors"]);
}

#[test]
fn rewriting_deathtensors_keeps_checksum_alignment_and_tensor_metadata() {
    let dir = Scratch::new("meta-deathtensors");
    let path = dir.path("model.dt");
    let mut spec = TensorSpec::new("w", Dtype::F32, [2]);
    spec.metadata.insert("role".into(), "weight".into());
    let metadata: Metadata = [("k".to_string(), "v".to_string())].into();
    let options = WriteOptions { checksum: true, alignment: 256, metadata: Some(metadata), ..Default::default() };
    save(&path, vec![(spec, &[1u8; 8][..]), (TensorSpec::new("b", Dtype::U8, [3]), &[2u8; 3][..])], &options).unwrap();
    let before = json(["inspect".as_ref(), path.as_os_str()], 0);
    let original = dir.path("original.dt");
    std::fs::copy(&path, &original).unwrap();

    check(["meta".as_ref(), path.as_os_str(), "--set".as_ref(), "k=w".as_ref()], 0);
    let after = json(["inspect".as_ref(), path.as_os_str()], 0);
    assert_eq!(after["metadata"], json!({ "k": "w" }));
    for key in ["flags", "alignment", "tensors", "created_by", "format"] {
        assert_eq!(after[key], before[key], "{key}");
    }
    check(["verify".as_ref(), path.as_os_str()], 0);
    assert_same_tensors(&original, &path);
}

#[test]
fn bad_edits_are_refused() {
    let dir = Scratch::new("meta-refused");
    let path = dir.path("z.dt");
    std::fs::copy(valid("deathtensors-0.3.0/all_dtypes_zstd.deathtensors"), &path).unwrap();
    let r = check(["meta".as_ref(), path.as_os_str(), "--set".as_ref(), "a=b".as_ref()], 2);
    assert_one_error_line(&r, &["z.dt", "zstd-compressed", "convert it first"]);
    let r = check(["meta".as_ref(), path.as_os_str(), "--set".as_ref(), "novalue".as_ref()], 2);
    assert!(r.stderr.contains("expected KEY=VALUE"), "{}", r.stderr);
    let r = check(["meta", path.to_str().unwrap(), "--set", "a=1", "--delete", "a"], 2);
    assert_one_error_line(&r, &["choose one"]);
    // Reading a compressed file's metadata is fine.
    check(["meta".as_ref(), path.as_os_str()], 0);
}

/// An in-place rewrite while another handle holds the file open for
/// reading does what docs/PLATFORMS.md says: on Windows the rename over an
/// open file is refused, and the command fails naming the file, which stays
/// as it was with no temp file left; elsewhere the rewrite succeeds and the
/// open handle keeps reading the old bytes.
#[test]
fn a_rewrite_of_a_file_held_open_by_a_reader_is_what_the_platform_doc_says() {
    use std::io::Read;
    let dir = Scratch::new("meta-held-open");
    let path = dir.path("m.safetensors");
    std::fs::copy(valid("safetensors-0.8.0/multi_metadata.safetensors"), &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut held = std::fs::File::open(&path).unwrap();
    let p = path.to_str().unwrap();
    let r = crate::run(["meta", p, "--set", "license=Apache-2.0"]);
    if cfg!(windows) {
        // An I/O error, not a check that failed: exit code 2.
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains("m.safetensors") && r.stderr.contains("open"), "{}", r.stderr);
        assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    } else {
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert!(check(["meta", p], 0).stdout.contains("license=Apache-2.0"));
    }
    // The open handle reads the bytes it opened, whole.
    let mut seen = Vec::new();
    held.read_to_end(&mut seen).unwrap();
    assert_eq!(seen, before);
    drop(held);
    let names: Vec<String> = std::fs::read_dir(dir.path("."))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["m.safetensors"], "a temp file was left");
}
