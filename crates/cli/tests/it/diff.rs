//! `diff`: every kind of difference, exact and within tolerances, across
//! formats, as text and JSON, with diff(1)'s exit codes.

use std::path::Path;

use deathtensors_io::format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{save, WriteOptions};
use serde_json::json;

use crate::{check, f32s, json, valid, write, Scratch};

fn diff(a: &Path, b: &Path, extra: &[&str], code: i32) -> crate::Run {
    let mut args = vec!["diff".as_ref(), a.as_os_str(), b.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    check(args, code)
}

fn diff_json(a: &Path, b: &Path, extra: &[&str], code: i32) -> serde_json::Value {
    let mut args = vec!["diff".as_ref(), a.as_os_str(), b.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    json(args, code)
}

#[test]
fn a_file_and_its_conversion_are_identical() {
    let dir = Scratch::new("diff-identical");
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let dt = dir.path("all.dt");
    check(["convert".as_ref(), src.as_os_str(), dt.as_os_str(), "--checksum".as_ref()], 0);
    let r = diff(&src, &dt, &[], 0);
    assert_eq!(r.stdout, "identical: 18 tensors, and the same metadata\n");
    let doc = diff_json(&dt, &src, &[], 0);
    assert_eq!(doc["identical"], true);
    assert_eq!(doc["comparison"], "exact");
}

#[test]
fn every_kind_of_difference_is_reported() {
    let dir = Scratch::new("diff-kinds");
    let (a, b) = (dir.path("a.dt"), dir.path("b.safetensors"));
    let meta_a: Metadata = [("k".to_string(), "1".to_string()), ("gone".to_string(), "x".to_string())].into();
    let meta_b: Metadata = [("k".to_string(), "2".to_string()), ("new".to_string(), "y".to_string())].into();
    let same = f32s(&[1.0, 2.0, 3.0]);
    let (va, vb) = (f32s(&[1.0, 2.0, 3.0, 4.0]), f32s(&[1.0, 2.5, 3.0, 4.25]));
    let tensors_a = [
        ("same", Dtype::F32, &[3u64][..], same.clone()),
        ("removed", Dtype::U8, &[1u64][..], vec![0]),
        ("retyped", Dtype::F32, &[1u64][..], f32s(&[0.0])),
        ("reshaped", Dtype::F32, &[4u64][..], va.clone()),
        ("values", Dtype::F32, &[2u64, 2][..], va.clone()),
    ];
    let tensors_b = [
        ("same", Dtype::F32, &[3u64][..], same),
        ("added", Dtype::I8, &[2u64][..], vec![1, 2]),
        ("retyped", Dtype::I32, &[1u64][..], vec![0; 4]),
        ("reshaped", Dtype::F32, &[2u64, 2][..], va),
        ("values", Dtype::F32, &[2u64, 2][..], vb),
    ];
    write(&a, &tensors_a, &WriteOptions { metadata: Some(meta_a), ..Default::default() });
    let options = WriteOptions { format: Format::Safetensors, metadata: Some(meta_b), ..Default::default() };
    write(&b, &tensors_b, &options);

    let r = diff(&a, &b, &[], 1);
    let expected = format!(
        "\
--- {}
+++ {}
- removed  U8 [1]
+ added  I8 [2]
~ retyped  dtype F32 -> I32
~ reshaped  shape [4] -> [2, 2]
~ values  values: 2 of 4 elements differ, max |a - b| = 0.5
~ metadata  \"gone\" removed (was \"x\")
~ metadata  \"k\": \"1\" -> \"2\"
~ metadata  \"new\" added: \"y\"
",
        a.display(),
        b.display()
    );
    assert_eq!(r.stdout, expected);
    assert_eq!(r.stderr, "");

    let doc = diff_json(&a, &b, &[], 1);
    assert_eq!(doc["identical"], false);
    assert_eq!(doc["removed"], json!([{ "name": "removed", "dtype": "U8", "shape": [1] }]));
    assert_eq!(doc["added"], json!([{ "name": "added", "dtype": "I8", "shape": [2] }]));
    assert_eq!(doc["dtype_or_shape"][0]["name"], "retyped");
    assert_eq!(doc["dtype_or_shape"][1]["b"], json!({ "dtype": "F32", "shape": [2, 2] }));
    assert_eq!(
        doc["values"],
        json!([{
            "name": "values", "dtype": "F32", "elements": 4, "differing": 2, "unit": "elements", "max_abs_diff": 0.5,
        }])
    );
    assert_eq!(doc["metadata"].as_array().unwrap().len(), 3);
    assert_eq!(doc["metadata"][1], json!({ "key": "k", "a": "1", "b": "2" }));

    // Within tolerances only the values' difference goes away.
    let doc = diff_json(&a, &b, &["--atol", "0.5"], 1);
    assert_eq!(doc["values"], json!([]));
    assert_eq!(doc["comparison"], json!({ "atol": 0.5, "rtol": 0.0 }));
    let doc = diff_json(&a, &b, &["--atol", "0.1", "--rtol", "0.05"], 1);
    assert_eq!(doc["values"][0]["differing"], 1, "{doc}");
}

#[test]
fn tolerances_decide_equality_of_values() {
    let dir = Scratch::new("diff-tolerance");
    let (a, b) = (dir.path("a.dt"), dir.path("b.dt"));
    let nan = f32::NAN;
    write(&a, &[("x", Dtype::F32, &[4], f32s(&[1.0, 100.0, nan, f32::INFINITY]))], &WriteOptions::default());
    write(&b, &[("x", Dtype::F32, &[4], f32s(&[1.001, 100.1, nan, f32::INFINITY]))], &WriteOptions::default());
    let r = diff(&a, &b, &[], 1);
    assert!(r.stdout.contains("~ x  values: 2 of 4 elements differ, max |a - b| = 0.09999"), "{}", r.stdout);
    diff(&a, &b, &["--atol", "0.2"], 0);
    diff(&a, &b, &["--rtol", "0.002"], 0);
    diff(&a, &b, &["--rtol", "0.0001"], 1);
    let r = diff(&a, &b, &["--atol=-1"], 2);
    assert!(r.stderr.contains("non-negative"), "{}", r.stderr);
}

#[test]
fn low_precision_and_complex_values_are_compared_decoded() {
    let dir = Scratch::new("diff-dtypes");
    let (a, b) = (dir.path("a.dt"), dir.path("b.dt"));
    // BF16 1.0 and 1.0078125 (the next value); C64 (1, 2) and (1, 2.5).
    let c64 = |im: f32| f32s(&[1.0, im]);
    let tensors = |bf: u16, im: f32| {
        vec![
            ("bf", Dtype::BF16, &[1u64][..], bf.to_le_bytes().to_vec()),
            ("c", Dtype::C64, &[1u64][..], c64(im)),
            ("packed", Dtype::F4, &[2u64][..], vec![if im > 2.0 { 0x21 } else { 0x12 }]),
        ]
    };
    write(&a, &tensors(0x3F80, 2.0), &WriteOptions::default());
    write(&b, &tensors(0x3F81, 2.5), &WriteOptions::default());
    let doc = diff_json(&a, &b, &[], 1);
    let values = doc["values"].as_array().unwrap();
    assert_eq!(values[0]["max_abs_diff"], 0.0078125);
    assert_eq!(values[1]["max_abs_diff"], 0.5);
    assert_eq!(values[2]["unit"], "bytes");
    assert_eq!(values[2]["differing"], 1);
    let doc = diff_json(&a, &b, &["--atol", "0.01"], 1);
    let names: Vec<&str> = doc["values"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["c", "packed"]);
}

#[test]
fn per_tensor_metadata_differences_are_reported() {
    let dir = Scratch::new("diff-tensor-metadata");
    let (a, b) = (dir.path("a.dt"), dir.path("b.dt"));
    for (path, role) in [(&a, "weight"), (&b, "bias")] {
        let mut spec = TensorSpec::new("t", Dtype::U8, [1]);
        spec.metadata.insert("role".into(), role.into());
        save(path, vec![(spec, &[0u8][..])], &WriteOptions::default()).unwrap();
    }
    let r = diff(&a, &b, &[], 1);
    assert!(r.stdout.contains("~ t  metadata \"role\": \"weight\" -> \"bias\""), "{}", r.stdout);
    let doc = diff_json(&a, &b, &[], 1);
    assert_eq!(doc["tensor_metadata"][0]["changes"][0], json!({ "key": "role", "a": "weight", "b": "bias" }));
}
