//! `inspect` and `ls`: what the header says, as text and as JSON, on every
//! fixture and on generated files.

use deathtensors_io::format::{Dtype, Metadata, TensorSpec};
use deathtensors_io::{save, WriteOptions};
use serde_json::{json, Value};

use crate::{check, is_legacy_index, json, manifest, valid, Scratch};

#[test]
fn inspect_json_matches_the_manifest_of_every_fixture() {
    for (name, expected) in manifest() {
        // Index files of sharded checkpoints are tested in `sharded`.
        if expected["outcome"] != "ok" || name.ends_with(".json") || is_legacy_index(&expected) {
            continue;
        }
        let path = valid(&name);
        let doc = json(["inspect".as_ref(), path.as_os_str()], 0);
        let format = match () {
            _ if name.contains(".safetensors") => "safetensors",
            _ if name.ends_with(".bt") => "bintensors",
            _ => "deathtensors",
        };
        assert_eq!(doc["format"], format, "{name}");
        let mut flags = json!({ "checksum": false, "compressed": false });
        if let Value::Object(given) = &expected["flags"] {
            for (k, v) in given {
                flags[k] = v.clone();
            }
        }
        // The fixtures have no encrypted, sealed or signed file.
        for k in ["encrypted", "cryptotensors", "sealed", "signed"] {
            flags[k] = json!(false);
        }
        assert_eq!(doc["flags"], flags, "{name}");
        // The manifest writes a safetensors file without __metadata__ as {},
        // and a bintensors file without metadata too.
        let metadata = if doc["metadata"].is_null() { json!({}) } else { doc["metadata"].clone() };
        if expected["metadata_is_none"] == true {
            assert!(doc["metadata"].is_null(), "{name}");
        }
        assert_eq!(metadata, expected["global_metadata"], "{name}");
        let tensors = doc["tensors"].as_array().unwrap();
        let listed = expected["tensors"].as_object().unwrap();
        assert_eq!(tensors.len(), listed.len(), "{name}");
        let (mut bytes, mut parameters) = (0, 0);
        for t in tensors {
            let e = &listed[t["name"].as_str().unwrap()];
            assert_eq!(t["dtype"], e["dtype"], "{name}");
            assert_eq!(t["shape"], e["shape"], "{name}");
            assert_eq!(t["nbytes"], e["nbytes"], "{name}");
            let offsets = t["data_offsets"].as_array().unwrap();
            assert_eq!(offsets[1].as_u64().unwrap() - offsets[0].as_u64().unwrap(), t["nbytes"].as_u64().unwrap());
            bytes += t["nbytes"].as_u64().unwrap();
            parameters += t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).product::<u64>();
        }
        assert_eq!(doc["total_bytes"], bytes, "{name}");
        assert_eq!(doc["parameters"], parameters, "{name}");
        assert!(doc["data_start"].as_u64().unwrap() >= 8, "{name}");

        // The text names every tensor too.
        let text = check(["inspect".as_ref(), path.as_os_str()], 0).stdout;
        for t in listed.keys() {
            assert!(text.contains(t.as_str()), "{name}: {t} missing from\n{text}");
        }
    }
}

#[test]
fn inspect_text_snapshot() {
    let path = valid("safetensors-0.8.0/multi_metadata.safetensors");
    let text = check(["inspect".as_ref(), path.as_os_str()], 0).stdout;
    let expected = format!(
        "\
file       {}
format     safetensors
flags      none
alignment  1
data       bytes 192..240 of 240 (240 B)
metadata   format = pt
           license = MIT
           producer = fixture
tensors    2 tensors, 48 bytes (48 B), 9 parameters, 0 with a sha256 digest

name  dtype  shape   size  offsets  sha256  metadata
b     I64    [3]     24 B  0..24    -
a     F32    [2, 3]  24 B  24..48   -
",
        path.display()
    );
    assert_eq!(text, expected);
}

#[test]
fn inspect_shows_digests_flags_and_tensor_metadata() {
    let dir = Scratch::new("inspect-digests");
    let path = dir.path("model.dt");
    let mut spec = TensorSpec::new("w", Dtype::BF16, [2, 3]);
    spec.metadata.insert("role".into(), "weight".into());
    let metadata: Metadata = [("license".to_string(), "MIT".to_string())].into();
    let options = WriteOptions { checksum: true, metadata: Some(metadata), ..WriteOptions::default() };
    save(&path, vec![(spec, &[0u8; 12][..])], &options).unwrap();

    let doc = json(["inspect".as_ref(), path.as_os_str()], 0);
    let plain = json!({ "checksum": true, "compressed": false, "encrypted": false, "cryptotensors": false, "sealed": false, "signed": false });
    assert_eq!(doc["flags"], plain);
    assert_eq!(doc["alignment"], 64);
    assert_eq!(doc["metadata"], json!({ "license": "MIT" }));
    assert!(doc["created_by"].as_str().unwrap().starts_with("deathtensors "));
    let t = &doc["tensors"][0];
    assert_eq!(t["metadata"], json!({ "role": "weight" }));
    // SHA-256 of twelve zero bytes.
    assert_eq!(t["sha256"], "15ec7bf0b50732b49f8228e07d24365338f9e3ab994b00af08e5a3bffe55fd8b");
    assert_eq!(doc["parameters"], 6);

    let text = check(["inspect".as_ref(), path.as_os_str()], 0).stdout;
    assert!(text.contains("checksum (SHA-256 footer)"), "{text}");
    assert!(text.contains("w     BF16   [2, 3]  12 B  0..12    yes     role=weight"), "{text}");
}

#[test]
fn formats_are_detected_by_content_not_by_extension() {
    let dir = Scratch::new("inspect-content");
    for (src, format) in [
        ("safetensors-0.8.0/multi_metadata.safetensors", "safetensors"),
        ("deathtensors-0.3.0/edge_shapes.deathtensors", "deathtensors"),
    ] {
        let path = dir.path(if format == "safetensors" { "model.dt" } else { "model.safetensors" });
        std::fs::copy(valid(src), &path).unwrap();
        assert_eq!(json(["inspect".as_ref(), path.as_os_str()], 0)["format"], format);
        check(["stats".as_ref(), path.as_os_str()], 0);
    }
}

#[test]
fn inspect_reads_the_header_only() {
    // A (sparse) 4 GiB file inspects at once: only its header is read.
    let dir = Scratch::new("inspect-sparse");
    let path = dir.path("big.safetensors");
    let n: u64 = 1 << 32;
    let header = format!(r#"{{"w":{{"dtype":"U8","shape":[{n}],"data_offsets":[0,{n}]}}}}"#);
    let mut head = (header.len() as u64).to_le_bytes().to_vec();
    head.extend(header.as_bytes());
    std::fs::write(&path, &head).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(head.len() as u64 + n).unwrap();
    let started = std::time::Instant::now();
    let doc = json(["inspect".as_ref(), path.as_os_str()], 0);
    assert_eq!(doc["total_bytes"], n);
    assert!(started.elapsed().as_secs() < 5);
}

#[test]
fn ls_lists_names_in_header_order() {
    for name in ["safetensors-0.8.0/all_dtypes.safetensors", "deathtensors-0.3.0/all_dtypes.deathtensors"] {
        let path = valid(name);
        let doc = json(["inspect".as_ref(), path.as_os_str()], 0);
        let names: Vec<&str> = doc["tensors"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        let text = check(["ls".as_ref(), path.as_os_str()], 0).stdout;
        assert_eq!(text.lines().collect::<Vec<_>>(), names);
        let listed = json(["ls".as_ref(), path.as_os_str()], 0);
        assert_eq!(listed, Value::from(names));
    }
    let empty = valid("safetensors-0.8.0/empty.safetensors");
    assert_eq!(check(["ls".as_ref(), empty.as_os_str()], 0).stdout, "");
}
