//! `consolidate`: distributed checkpoints (as `deathtensors.distributed`
//! writes them, built here) to one file and to Hugging Face shards; the
//! metadata and rank files checked.

use std::collections::BTreeMap;
use std::path::Path;

use deathtensors_io::format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{consolidate, save, ConsolidateOptions, ErrorKind, Reader, WriteOptions};
use serde_json::json;

use crate::scratch;

const SAVE_ID: &str = "0123456789abcdef";

fn f32s(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values.flat_map(f32::to_le_bytes).collect()
}

/// The full tensors: `w` [6, 4] saved Shard(0) on 2 ranks, `v` [4, 6]
/// saved Shard(1), `s` a scalar on rank 0; blocks of 2 rows.
fn full() -> BTreeMap<&'static str, (Vec<u64>, Vec<u8>)> {
    BTreeMap::from([
        ("w", (vec![6, 4], f32s((0..24).map(|i| i as f32)))),
        ("v", (vec![4, 6], f32s((0..24).map(|i| 100.0 + i as f32)))),
        ("s", (vec![], f32s([7.5].into_iter()))),
        ("t", (vec![6, 5, 2], f32s((0..60).map(|i| 200.0 + i as f32)))),
    ])
}

/// The bytes of the box `offsets`/`sizes` of a [rows, cols] f32 tensor.
fn cut(bytes: &[u8], cols: u64, offsets: [u64; 2], sizes: [u64; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in offsets[0]..offsets[0] + sizes[0] {
        let start = ((r * cols + offsets[1]) * 4) as usize;
        out.extend_from_slice(&bytes[start..start + (sizes[1] * 4) as usize]);
    }
    out
}

/// A checkpoint written into `dir/ckpt` ([`write_checkpoint`]).
fn checkpoint_in(dir: &Path, tiled: bool) -> std::path::PathBuf {
    let ckpt = dir.join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    write_checkpoint(&ckpt, tiled);
    ckpt
}

/// Writes the checkpoint to `dir`: two rank files and `deathtensors.json`;
/// with `tiled`, also `t` [6, 5, 2], one chunk on rank 1 in tiles of 4 rows
/// and 2 columns (the last ones shorter and narrower).
fn write_checkpoint(dir: &Path, tiled: bool) {
    let full = full();
    let rank_name = |r: u64| format!("rank-{r:05}-{SAVE_ID}.dt");
    let mut chunks: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let mut files = serde_json::Map::new();
    for rank in 0..2u64 {
        let mut blocks: Vec<(String, Vec<u64>, Vec<u8>)> = Vec::new();
        // w: rows 3 * rank .. + 3, blocks of 2 rows.
        let (w_off, w_size) = ([3 * rank, 0], [3, 4]);
        for (r0, r1) in [(0, 2), (2, 3)] {
            let rows = [w_off[0] + r0, 0];
            blocks.push((format!("w@{},0", rows[0]), vec![r1 - r0, 4], cut(&full["w"].1, 4, rows, [r1 - r0, 4])));
        }
        // v: columns 3 * rank .. + 3, blocks of 2 rows.
        let (v_off, v_size) = ([0, 3 * rank], [4, 3]);
        for r0 in [0, 2] {
            blocks.push((format!("v@{r0},{}", v_off[1]), vec![2, 3], cut(&full["v"].1, 6, [r0, v_off[1]], [2, 3])));
        }
        let file = rank_name(rank);
        chunks.entry("w").or_default().push(json!({"offsets": w_off, "sizes": w_size, "file": file, "rows": 2}));
        chunks.entry("v").or_default().push(json!({"offsets": v_off, "sizes": v_size, "file": file, "rows": 2}));
        if rank == 1 && tiled {
            let t = &full["t"].1;
            for (r0, r1) in [(0u64, 4u64), (4, 6)] {
                for (c0, c1) in [(0u64, 2u64), (2, 4), (4, 5)] {
                    // Rows of [5, 2] elements: 10 a row of the [6, 10] view.
                    let bytes = cut(t, 10, [r0, c0 * 2], [r1 - r0, (c1 - c0) * 2]);
                    blocks.push((format!("t@{r0},{c0},0"), vec![r1 - r0, c1 - c0, 2], bytes));
                }
            }
            chunks
                .entry("t")
                .or_default()
                .push(json!({"offsets": [0, 0, 0], "sizes": [6, 5, 2], "file": rank_name(rank), "rows": 4, "cols": 2}));
        }
        if rank == 0 {
            blocks.push(("s@".into(), vec![], full["s"].1.clone()));
            chunks.entry("s").or_default().push(json!({"offsets": [], "sizes": [], "file": file, "rows": 1}));
        }
        let metadata =
            Metadata::from([("dcp.save_id".to_string(), SAVE_ID.to_string()), ("dcp.rank".into(), rank.to_string())]);
        let options = WriteOptions { checksum: true, durable: false, metadata: Some(metadata), ..Default::default() };
        let specs =
            blocks.iter().map(|(n, s, b)| (TensorSpec::new(n.as_str(), Dtype::F32, s.clone()), &b[..])).collect();
        save(dir.join(&file), specs, &options).unwrap();
        let size = std::fs::metadata(dir.join(&file)).unwrap().len();
        files.insert(file, json!({"rank": rank, "size": size}));
    }
    let tensors: serde_json::Map<_, _> = chunks
        .into_iter()
        .map(|(fqn, c)| (fqn.to_string(), json!({"dtype": "float32", "size": full[fqn].0, "chunks": c})))
        .collect();
    let doc = json!({"deathtensors_dcp": 1, "save_id": SAVE_ID, "format": "deathtensors", "dcp_version": "1.0.0",
        "files": files, "tensors": tensors, "values": {"step": 3}, "planner_data": null, "storage_meta": null});
    std::fs::write(dir.join("deathtensors.json"), doc.to_string()).unwrap();
}

#[track_caller]
fn assert_full(path: &Path, names: &[&str]) {
    let full = full();
    let reader = Reader::open(path).unwrap();
    for name in names {
        let info = reader.header().get(name).unwrap();
        assert_eq!(&info.shape[..], &full[name].0[..], "{name}");
        assert!(reader.read(name).unwrap() == full[name].1, "{name}");
    }
}

#[test]
fn one_file_holds_every_full_tensor_and_the_values() {
    let dir = scratch("dcp-one");
    let ckpt = checkpoint_in(&dir, false);
    let out = dir.join("model.dt");
    assert_eq!(consolidate(&ckpt, &out, &ConsolidateOptions::default()).unwrap(), std::slice::from_ref(&out));
    assert_full(&out, &["w", "v", "s"]);
    let reader = Reader::open(&out).unwrap();
    assert!(reader.header().has_tensor_digests());
    assert_eq!(reader.header().metadata().unwrap()["dcp.values"], r#"{"step":3}"#);
    let st = dir.join("model.safetensors");
    consolidate(&ckpt, &st, &ConsolidateOptions::default()).unwrap();
    assert_eq!(Reader::open(&st).unwrap().header().format(), Format::Safetensors);
    assert_full(&st, &["w", "v", "s"]);
}

#[test]
fn a_directory_gets_hugging_face_shards_and_an_index() {
    let dir = scratch("dcp-hf");
    let ckpt = checkpoint_in(&dir, false);
    let out = dir.join("hf");
    std::fs::create_dir(&out).unwrap();
    // 96 bytes a matrix, 4 the scalar: "s" and "v" share a shard, "w" not.
    let options = ConsolidateOptions { max_shard_bytes: 100, ..Default::default() };
    let written = consolidate(&ckpt, &out, &options).unwrap();
    let names: Vec<String> = written.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"]
    );
    let index: serde_json::Value = serde_json::from_slice(&std::fs::read(&written[2]).unwrap()).unwrap();
    assert_eq!(index["metadata"]["total_size"], 196);
    assert_eq!(index["weight_map"]["s"], "model-00001-of-00002.safetensors");
    assert_eq!(index["weight_map"]["w"], "model-00002-of-00002.safetensors");
    assert_full(&written[0], &["s", "v"]);
    assert_full(&written[1], &["w"]);
}

#[track_caller]
fn refused(ckpt: &Path, out: &Path, message: &str) {
    let err = consolidate(ckpt, out, &ConsolidateOptions::default()).unwrap_err();
    assert!(err.to_string().contains(message), "{err}");
    assert!(matches!(err.kind(), ErrorKind::InvalidCheckpoint(_)), "{err:?}");
    assert!(err.is_invalid_file());
    assert!(!out.exists());
}

#[test]
fn incomplete_hostile_and_damaged_checkpoints_are_refused() {
    let dir = scratch("dcp-bad");
    let ckpt = checkpoint_in(&dir, false);
    let out = dir.join("out.dt");
    let doc = std::fs::read(ckpt.join("deathtensors.json")).unwrap();
    for (bytes, message) in [
        (&b"\x80\x04\x95..."[..], "pickle"),
        (b"[]", "not a JSON object"),
        (b"{", "not a JSON document"),
        (br#"{"deathtensors_dcp": 2}"#, "version 2"),
    ] {
        std::fs::write(ckpt.join("deathtensors.json"), bytes).unwrap();
        refused(&ckpt, &out, message);
    }
    let text = String::from_utf8(doc.clone()).unwrap();
    std::fs::write(ckpt.join("deathtensors.json"), text.replacen(r#""sizes":[3,4]"#, r#""sizes":[2,4]"#, 1)).unwrap();
    refused(&ckpt, &out, "chunks do not add up");
    let huge = text.replacen(r#""size":[6,4]"#, r#""size":[6,4611686018427387904]"#, 1);
    std::fs::write(ckpt.join("deathtensors.json"), huge).unwrap();
    refused(&ckpt, &out, "too large");
    let big = text
        .replace(r#""size":[6,4]"#, r#""size":[6,400000000]"#)
        .replace(r#""sizes":[3,4]"#, r#""sizes":[3,400000000]"#);
    std::fs::write(ckpt.join("deathtensors.json"), big).unwrap();
    refused(&ckpt, &out, "its rank files hold");
    std::fs::remove_file(ckpt.join("deathtensors.json")).unwrap();
    refused(&ckpt, &out, "incomplete checkpoint");
    std::fs::write(ckpt.join("deathtensors.json"), &doc).unwrap();
    // A flipped byte in the last tensor's data (before the 32-byte footer).
    let rank1 = ckpt.join(format!("rank-00001-{SAVE_ID}.dt"));
    let mut bytes = std::fs::read(&rank1).unwrap();
    let at = bytes.len() - 40;
    bytes[at] ^= 0x10;
    std::fs::write(&rank1, &bytes).unwrap();
    let err = consolidate(&ckpt, &out, &ConsolidateOptions::default()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    std::fs::remove_file(&rank1).unwrap();
    let err = consolidate(&ckpt, &out, &ConsolidateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("rank-00001"), "{err}");
    // No checkpoint at all is not an invalid one.
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = consolidate(&empty, &out, &ConsolidateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("no checkpoint"), "{err}");
    assert!(!err.is_invalid_file());
}

#[test]
fn column_tiles_are_put_together() {
    let dir = scratch("dcp-tiles");
    let ckpt = checkpoint_in(&dir, true);
    let out = dir.join("model.dt");
    consolidate(&ckpt, &out, &ConsolidateOptions::default()).unwrap();
    assert_full(&out, &["w", "v", "s", "t"]);
}

#[test]
fn hostile_tiles_are_refused() {
    let dir = scratch("dcp-bad-tiles");
    let ckpt = checkpoint_in(&dir, true);
    let out = dir.join("out.dt");
    let text = String::from_utf8(std::fs::read(ckpt.join("deathtensors.json")).unwrap()).unwrap();
    let tiled = r#""cols":2,"file":"rank-00001-0123456789abcdef.dt","offsets":[0,0,0],"rows":4"#;
    let with = |cols: &str, rows: &str| {
        text.replace(
            tiled,
            &format!(r#"{cols}"file":"rank-00001-0123456789abcdef.dt","offsets":[0,0,0],"rows":{rows}"#),
        )
    };
    assert!(text.contains(tiled), "{text}");
    for (doc, message) in [
        (with(r#""cols":0,"#, "4"), "cols must be a positive integer"),
        (with(r#""cols":-1,"#, "4"), "cols must be a positive integer"),
        (with(r#""cols":"2","#, "4"), "cols must be a positive integer"),
        // A tile list of trillions is refused before it is made.
        (
            with(r#""cols":1,"#, "1")
                .replace(r#""size":[6,5,2]"#, r#""size":[6000000000000,5,2]"#)
                .replace(r#""sizes":[6,5,2]"#, r#""sizes":[6000000000000,5,2]"#),
            "tiles allowed",
        ),
        // Tiles of another shape than the file's tensors.
        (with(r#""cols":3,"#, "4"), "bytes, its chunk needs"),
        (with("", "6"), "bytes, its chunk needs"),
    ] {
        std::fs::write(ckpt.join("deathtensors.json"), doc).unwrap();
        let err = consolidate(&ckpt, &out, &ConsolidateOptions::default()).unwrap_err();
        assert!(err.to_string().contains(message), "{message}: {err}");
        assert!(!out.exists());
    }
    // cols on a chunk of fewer than two dimensions (the scalar).
    let scalar = r#""rows":1,"sizes":[]"#;
    assert!(text.contains(scalar), "{text}");
    std::fs::write(ckpt.join("deathtensors.json"), text.replace(scalar, r#""cols":1,"rows":1,"sizes":[]"#)).unwrap();
    let err = consolidate(&ckpt, &out, &ConsolidateOptions::default()).unwrap_err();
    assert!(err.to_string().contains("on a chunk of 2 or more dimensions"), "{err}");
}

/// A consolidation into shards that fails on a later shard leaves nothing:
/// every shard is staged and renamed into place with the index, or none is.
#[test]
fn a_failed_sharded_consolidation_leaves_no_shard() {
    let dir = scratch("dcp-hf-fail");
    let ckpt = checkpoint_in(&dir, false);
    // "w", the second shard's tensor ("s" and "v" are the first's), is
    // damaged: a byte of its block w@5,0 in rank 1's file is flipped.
    let file = ckpt.join(format!("rank-00001-{SAVE_ID}.dt"));
    let at = deathtensors_io::Reader::open(&file).unwrap().tensor("w@5,0").unwrap().file_offset as usize;
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[at] ^= 0x10;
    std::fs::write(&file, &bytes).unwrap();
    let out = dir.join("hf");
    std::fs::create_dir(&out).unwrap();
    let options = ConsolidateOptions { max_shard_bytes: 100, ..Default::default() };
    let err = consolidate(&ckpt, &out, &options).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    let left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
