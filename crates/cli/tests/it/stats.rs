//! `stats`: statistics of known values in every decodable dtype, NaN and
//! Inf counted apart, tensors chosen by name, and every fixture.

use deathtensors_io::format::Dtype;
use deathtensors_io::WriteOptions;
use serde_json::{json, Value};

use crate::{assert_one_error_line, check, f32s, json, manifest, valid, write, Scratch};

fn stats(path: &std::path::Path, names: &[&str]) -> Value {
    let mut args = vec!["stats".as_ref(), path.as_os_str()];
    args.extend(names.iter().map(std::ffi::OsStr::new));
    json(args, 0)
}

#[test]
fn known_values_give_known_statistics() {
    let dir = Scratch::new("stats-known");
    let path = dir.path("model.dt");
    let f = f32s(&[1.0, 2.0, 3.0, 4.0, 0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
    write(
        &path,
        &[
            ("f", Dtype::F32, &[8], f),
            ("bf", Dtype::BF16, &[2], [0x3F80u16, 0xC000].iter().flat_map(|v| v.to_le_bytes()).collect()),
            ("e4m3", Dtype::F8_E4M3, &[3], vec![0x7E, 0xFE, 0x7F]),
            ("e5m2", Dtype::F8_E5M2, &[2], vec![0x3C, 0x7C]),
            ("u8", Dtype::U8, &[4], vec![0, 0, 10, 250]),
            ("i64", Dtype::I64, &[2], [-3i64, 5].iter().flat_map(|v| v.to_le_bytes()).collect()),
            ("b", Dtype::BOOL, &[4], vec![1, 0, 0, 1]),
            ("c", Dtype::C64, &[2], f32s(&[1.0, -1.0, 3.0, 5.0])),
            ("packed", Dtype::F4, &[4], vec![0x12, 0x34]),
            ("empty", Dtype::F32, &[0], vec![]),
        ],
        &WriteOptions::default(),
    );
    let doc = stats(&path, &[]);
    let t: Vec<&Value> = doc["tensors"].as_array().unwrap().iter().collect();
    let std5 = (2.0f64).sqrt(); // of 0, 1, 2, 3, 4 around 2
    assert_eq!(
        *t[0],
        json!({ "name": "f", "dtype": "F32", "count": 8, "min": 0.0, "max": 4.0, "mean": 2.0, "std": std5,
                "zeros": 1, "nan": 1, "inf": 2 })
    );
    assert_eq!(
        (t[1]["min"].clone(), t[1]["max"].clone(), t[1]["mean"].clone()),
        (json!(-2.0), json!(1.0), json!(-0.5))
    );
    assert_eq!(
        (t[2]["min"].clone(), t[2]["max"].clone(), t[2]["nan"].clone()),
        (json!(-448.0), json!(448.0), json!(1))
    );
    assert_eq!((t[3]["max"].clone(), t[3]["inf"].clone()), (json!(1.0), json!(1)));
    assert_eq!(
        (t[4]["zeros"].clone(), t[4]["max"].clone(), t[4]["mean"].clone()),
        (json!(2), json!(250.0), json!(65.0))
    );
    assert_eq!((t[5]["min"].clone(), t[5]["mean"].clone(), t[5]["std"].clone()), (json!(-3.0), json!(1.0), json!(4.0)));
    assert_eq!((t[6]["mean"].clone(), t[6]["zeros"].clone()), (json!(0.5), json!(2)));
    assert_eq!((t[7]["count"].clone(), t[7]["mean"].clone()), (json!(4), json!(2.0)));
    assert_eq!(t[7]["note"], "complex: statistics over real and imaginary parts");
    assert_eq!(*t[8], json!({ "name": "packed", "dtype": "F4", "error": "not supported for packed sub-byte dtypes" }));
    assert_eq!(
        *t[9],
        json!({ "name": "empty", "dtype": "F32", "count": 0, "min": null, "max": null, "mean": null, "std": null,
                "zeros": 0, "nan": 0, "inf": 0 })
    );

    let text = check(["stats".as_ref(), path.as_os_str()], 0).stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "name    dtype    count  min   max  mean  std      zeros  nan  inf");
    assert_eq!(lines[1], "f       F32      8      0     4    2     1.41421  1      1    2");
    assert_eq!(
        lines[9],
        "packed  F4       -      -     -    -     -        -      -    -    not supported for packed sub-byte dtypes"
    );
    assert_eq!(lines[10], "empty   F32      0      -     -    -     -        0      0    0");
    assert_eq!(lines[11], "(complex: statistics over real and imaginary parts)");
}

#[test]
fn names_choose_tensors_in_the_order_given() {
    let path = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let doc = stats(&path, &["u8", "f32"]);
    let names: Vec<&str> = doc["tensors"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["u8", "f32"]);
    let r = check(["stats".as_ref(), path.as_os_str(), "nope".as_ref()], 2);
    assert_one_error_line(&r, &["all_dtypes.safetensors", "no tensor named \"nope\""]);
}

#[test]
fn every_fixture_has_statistics() {
    let manifest = manifest();
    let mut sharded = 0;
    for (name, expected) in &manifest {
        if expected["outcome"] != "ok" || name.ends_with(".json") {
            continue;
        }
        // deathtensors 0.3.0's sharded index (a file of no tensors naming its
        // shards): stats covers the shards' tensors, as listed for each shard.
        let shards: Vec<&serde_json::Value> = match expected["global_metadata"]["deathtensors.shards"].as_str() {
            Some(list) => {
                sharded += 1;
                let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
                let list: serde_json::Value = serde_json::from_str(list).unwrap();
                let paths = list.as_array().unwrap().iter().map(|s| format!("{dir}/{}", s["path"].as_str().unwrap()));
                paths.map(|p| &manifest[&p]["tensors"]).collect()
            }
            None => vec![&expected["tensors"]],
        };
        let doc = stats(&valid(name), &[]);
        let tensors = doc["tensors"].as_array().unwrap();
        assert_eq!(tensors.len(), shards.iter().map(|s| s.as_object().unwrap().len()).sum::<usize>(), "{name}");
        for t in tensors {
            let tname = t["name"].as_str().unwrap();
            let e =
                shards.iter().map(|s| &s[tname]).find(|e| !e.is_null()).unwrap_or_else(|| panic!("{name}: {tname}"));
            let numel: u64 = e["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).product();
            let parts = if matches!(e["dtype"].as_str(), Some("C64" | "C128")) { 2 } else { 1 };
            if matches!(e["dtype"].as_str(), Some("F4" | "F6_E2M3" | "F6_E3M2")) {
                assert!(t["error"].is_string(), "{name}: {t}");
            } else {
                assert_eq!(t["count"], numel * parts, "{name}: {t}");
            }
        }
    }
    assert!(sharded > 0, "no sharded index among the fixtures");
}
