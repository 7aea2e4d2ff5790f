//! `consolidate`: a one-rank distributed checkpoint (built here) to one
//! file and to Hugging Face shards; a directory without metadata refused.
//! io's tests cover resharded checkpoints and hostile metadata.

use deathtensors_io::format::{Dtype, Metadata, TensorSpec};
use deathtensors_io::{save, Reader, WriteOptions};
use serde_json::json;

use crate::{check, f32s, Scratch};

const RANK_FILE: &str = "rank-00000-00000000000000ff.dt";

/// A checkpoint of one rank: `w` [3, 2] in blocks of 2 rows, `b` [2].
fn checkpoint(dir: &Scratch) -> std::path::PathBuf {
    let ckpt = dir.path("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    let meta =
        Metadata::from([("dcp.save_id".to_string(), "00000000000000ff".to_string()), ("dcp.rank".into(), "0".into())]);
    let options = WriteOptions { checksum: true, durable: false, metadata: Some(meta), ..Default::default() };
    let (w0, w2, b) = (f32s(&[1.0, 2.0, 3.0, 4.0]), f32s(&[5.0, 6.0]), f32s(&[7.0, 8.0]));
    let specs = vec![
        (TensorSpec::new("w@0,0", Dtype::F32, [2, 2]), &w0[..]),
        (TensorSpec::new("w@2,0", Dtype::F32, [1, 2]), &w2[..]),
        (TensorSpec::new("b@0", Dtype::F32, [2]), &b[..]),
    ];
    save(ckpt.join(RANK_FILE), specs, &options).unwrap();
    let size = std::fs::metadata(ckpt.join(RANK_FILE)).unwrap().len();
    let chunk =
        |sizes: &[u64]| json!([{"offsets": vec![0; sizes.len()], "sizes": sizes, "file": RANK_FILE, "rows": 2}]);
    let doc = json!({"deathtensors_dcp": 1, "save_id": "00000000000000ff", "format": "deathtensors",
        "files": {RANK_FILE: {"rank": 0, "size": size}},
        "tensors": {"w": {"dtype": "float32", "size": [3, 2], "chunks": chunk(&[3, 2])},
                    "b": {"dtype": "float32", "size": [2], "chunks": chunk(&[2])}},
        "values": {}, "planner_data": null, "storage_meta": null});
    std::fs::write(ckpt.join("deathtensors.json"), doc.to_string()).unwrap();
    ckpt
}

#[test]
fn consolidate_writes_one_file_or_hugging_face_shards() {
    let dir = Scratch::new("consolidate");
    let ckpt = checkpoint(&dir);
    let out = dir.path("model.dt");
    let r = check(["consolidate".as_ref(), ckpt.as_os_str(), out.as_os_str()], 0);
    assert_eq!(r.stdout.trim(), out.to_string_lossy());
    let reader = Reader::open(&out).unwrap();
    assert_eq!(reader.read("w").unwrap(), f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    assert_eq!(reader.read("b").unwrap(), f32s(&[7.0, 8.0]));
    check(["verify".as_ref(), out.as_os_str()], 0);
    let hf = format!("{}/", dir.path("hf").display());
    let r = check(["consolidate", &ckpt.to_string_lossy(), &hf, "--max-shard-bytes", "8"], 0);
    assert_eq!(r.stdout.lines().count(), 3, "{}", r.stdout);
    let shard = Reader::open(dir.path("hf").join("model-00002-of-00002.safetensors")).unwrap();
    assert_eq!(shard.read("w").unwrap(), f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
}

#[test]
fn consolidate_refuses_an_incomplete_checkpoint() {
    let dir = Scratch::new("consolidate-incomplete");
    let ckpt = checkpoint(&dir);
    std::fs::remove_file(ckpt.join("deathtensors.json")).unwrap();
    let out = dir.path("model.dt");
    // An invalid checkpoint: exit 1, as for any invalid file.
    let r = check(["consolidate".as_ref(), ckpt.as_os_str(), out.as_os_str()], 1);
    assert!(r.stderr.contains("incomplete checkpoint"), "{}", r.stderr);
    assert!(!out.exists());
    std::fs::write(ckpt.join("deathtensors.json"), b"\x80\x04pickled").unwrap();
    let r = check(["consolidate".as_ref(), ckpt.as_os_str(), out.as_os_str()], 1);
    assert!(r.stderr.contains("pickle"), "{}", r.stderr);
    assert!(!out.exists());
    // No checkpoint there at all: exit 2, as for a missing file.
    let empty = dir.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let r = check(["consolidate".as_ref(), empty.as_os_str(), out.as_os_str()], 2);
    assert!(r.stderr.contains("no checkpoint"), "{}", r.stderr);
}
