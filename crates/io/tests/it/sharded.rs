//! Sharded checkpoints: Hugging Face indexes, deathtensors 0.3.0 indexes,
//! our own sharded saves, lazy shard opening, and hostile indexes.

use deathtensors_format::{Dtype, Format, TensorSpec};
use deathtensors_io::{is_json_index, is_legacy_index, save_sharded, Reader, ShardedReader, WriteOptions};
use serde_json::Value;

fn manifest_sha(rel: &str, name: &str) -> String {
    let text = std::fs::read_to_string(crate::testdata().join("valid/manifest.json")).unwrap();
    let m: Value = serde_json::from_str(&text).unwrap();
    m["files"][rel]["tensors"][name]["sha256"].as_str().unwrap().to_string()
}

#[test]
fn hugging_face_index_opens_only_the_shards_asked_for() {
    let index = crate::testdata().join("valid/safetensors-0.8.0/sharded/model.safetensors.index.json");
    let r = ShardedReader::open(&index).unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r.total_size(), Some(4096));
    assert_eq!(r.opened_shards(), 0);
    let bytes = r.read("model.layers.1.weight").unwrap();
    assert_eq!(
        crate::sha256_hex(&bytes),
        manifest_sha("safetensors-0.8.0/sharded/model-00002-of-00002.safetensors", "model.layers.1.weight")
    );
    assert_eq!(r.opened_shards(), 1);
    r.verify().unwrap();
    assert_eq!(r.opened_shards(), 2);
}

#[test]
fn deathtensors_030_sharded_set_reads() {
    let index = crate::testdata().join("valid/deathtensors-0.3.0/sdist-samples/sharded_model.deathtensors");
    let r = ShardedReader::open(&index).unwrap();
    assert_eq!(r.len(), 20);
    assert_eq!(r.shard_paths().len(), 20);
    assert!(r.metadata().keys().all(|k| !k.starts_with("deathtensors.shard")));
    let rel = "deathtensors-0.3.0/sdist-samples/sharded_model-00005-of-0020.deathtensors";
    assert_eq!(crate::sha256_hex(&r.read("layer.4.weight").unwrap()), manifest_sha(rel, "layer.4.weight"));
    assert_eq!(r.opened_shards(), 1);
    r.verify().unwrap();
}

#[test]
fn what_is_an_index_is_decided_by_io() {
    let valid = crate::testdata().join("valid");
    assert!(is_json_index(&valid.join("safetensors-0.8.0/sharded/model.safetensors.index.json")));
    assert!(!is_json_index(&valid.join("safetensors-0.8.0/all_dtypes.safetensors")));
    let legacy = valid.join("deathtensors-0.3.0/sdist-samples/sharded_model.deathtensors");
    assert!(is_legacy_index(&Reader::open(&legacy).unwrap()));
    let shard = valid.join("deathtensors-0.3.0/sdist-samples/sharded_model-00005-of-0020.deathtensors");
    assert!(!is_legacy_index(&Reader::open(&shard).unwrap()));
}

#[test]
fn single_file_is_a_checkpoint_of_one_shard() {
    let r = ShardedReader::open(crate::testdata().join("valid/safetensors-0.8.0/all_dtypes.safetensors")).unwrap();
    assert_eq!(r.len(), 18);
    assert_eq!(r.read("u8").unwrap().len(), 9);
}

#[test]
fn sharded_saves_round_trip_in_both_formats() {
    let dir = crate::scratch("sharded-save");
    let data: Vec<(TensorSpec, Vec<u8>)> = (0..7)
        .map(|i| {
            (
                TensorSpec::new(format!("layer.{i}.weight"), Dtype::F32, [100 * (i + 1)]),
                vec![i as u8; 400 * (i + 1) as usize],
            )
        })
        .collect();
    for format in [Format::Deathtensors, Format::Safetensors] {
        let options = WriteOptions {
            format,
            checksum: format == Format::Deathtensors,
            durable: false,
            ..WriteOptions::default()
        };
        let tensors = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
        let (index, shards) = save_sharded(dir.join("model"), tensors, 4000, &options).unwrap();
        let ext = if format == Format::Deathtensors { "deathtensors" } else { "safetensors" };
        assert_eq!(index, dir.join(format!("model.{ext}.index.json")));
        let n = shards.len();
        assert!(n >= 3, "{n} shards");
        for (i, p) in shards.iter().enumerate() {
            assert_eq!(p.file_name().unwrap().to_str().unwrap(), format!("model-{:05}-of-{n:05}.{ext}", i + 1));
        }
        let json: Value = serde_json::from_slice(&std::fs::read(&index).unwrap()).unwrap();
        assert_eq!(json["metadata"]["total_size"], 400 * 28);
        assert_eq!(json["weight_map"].as_object().unwrap().len(), 7);
        let r = ShardedReader::open(&index).unwrap();
        for (spec, bytes) in &data {
            assert_eq!(&r.read(&spec.name).unwrap(), bytes);
        }
        r.verify().unwrap();
        // Shard sizes respect the limit unless one tensor alone is larger.
        for p in &shards {
            let sr = deathtensors_io::Reader::open(p).unwrap();
            let size: u64 = sr.header().tensors().iter().map(|t| t.byte_len()).sum();
            assert!(size <= 4000 || sr.header().len() == 1, "{p:?} holds {size}");
        }
    }
}

#[test]
fn hostile_indexes_are_refused() {
    let dir = crate::scratch("sharded-hostile");
    let cases = [
        (r#"{"weight_map": {"w": "../outside.safetensors"}}"#, "plain file name"),
        (r#"{"weight_map": {"w": "/etc/passwd"}}"#, "plain file name"),
        (r#"{"metadata": {}}"#, "weight_map"),
        (r#"[1, 2]"#, "not a JSON object"),
        (r#"{"weight_map": {"w": 3}}"#, "not a string"),
        ("{", "not valid JSON"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let p = dir.join(format!("bad{i}.index.json"));
        std::fs::write(&p, text).unwrap();
        let err = ShardedReader::open(&p).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
    // An index that puts a tensor in the wrong shard is caught on read.
    let options = WriteOptions { format: Format::Safetensors, ..WriteOptions::default() };
    let (index, _) = save_sharded(
        dir.join("m"),
        vec![(TensorSpec::new("a", Dtype::U8, [1]), &[1u8][..]), (TensorSpec::new("b", Dtype::U8, [1]), &[2u8][..])],
        1,
        &options,
    )
    .unwrap();
    let text = std::fs::read_to_string(&index).unwrap().replace("m-00002-of-00002", "m-00001-of-00002");
    std::fs::write(&index, text).unwrap();
    let r = ShardedReader::open(&index).unwrap();
    assert!(r.read("b").unwrap_err().to_string().contains("does not contain it"));
    assert!(r.verify().is_err());
}

/// Every file in `dir`, with its bytes, sorted by name.
fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

#[test]
fn a_failed_sharded_save_leaves_nothing_and_the_older_checkpoint_of_the_same_names_whole() {
    let dir = crate::scratch("sharded-failed");
    let spec = |i: usize| TensorSpec::new(format!("layer.{i}.weight"), Dtype::F32, [100]);
    let old: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 400]).collect();
    let new: Vec<Vec<u8>> = (0..4).map(|i| vec![100 + i as u8; 400]).collect();
    let options = WriteOptions { durable: false, ..WriteOptions::default() };
    // Four shards of one tensor each; the new save gives them the same names.
    let (index, shards) =
        save_sharded(dir.join("model"), (0..4).map(|i| (spec(i), &old[i][..])).collect(), 400, &options).unwrap();
    assert_eq!(shards.len(), 4);
    let before = snapshot(&dir);

    // A write fails in the middle (the third tensor's buffer is short): the
    // first two shards were written, under temp names, and are removed.
    let mut tensors: Vec<(TensorSpec, &[u8])> = (0..4).map(|i| (spec(i), &new[i][..])).collect();
    tensors[2].1 = &new[2][..399];
    let err = save_sharded(dir.join("model"), tensors, 400, &options).unwrap_err();
    assert_eq!(err.path(), Some(shards[2].as_path()), "{err}");
    assert_eq!(snapshot(&dir), before);

    // A rename fails in the commit (the last shard's name is taken by a
    // directory): the shards already moved get the old ones back.
    let blocker = dir.join("model-00004-of-00004.deathtensors");
    std::fs::remove_file(&blocker).unwrap();
    std::fs::create_dir_all(blocker.join("x")).unwrap();
    let before = snapshot(&dir);
    let err =
        save_sharded(dir.join("model"), (0..4).map(|i| (spec(i), &new[i][..])).collect(), 400, &options).unwrap_err();
    assert_eq!(err.path(), Some(blocker.as_path()), "{err}");
    assert_eq!(snapshot(&dir), before);
    std::fs::remove_dir_all(&blocker).unwrap();

    // The next save replaces everything, leaving nothing else.
    save_sharded(dir.join("model"), (0..4).map(|i| (spec(i), &new[i][..])).collect(), 400, &options).unwrap();
    let names: Vec<String> = snapshot(&dir).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 5, "{names:?}");
    let r = ShardedReader::open(&index).unwrap();
    for (i, bytes) in new.iter().enumerate() {
        assert_eq!(&r.read(&spec(i).name).unwrap(), bytes);
    }
}

#[test]
fn a_failed_legacy_sharded_save_leaves_nothing() {
    let dir = crate::scratch("sharded-legacy-failed");
    let spec = |i: usize| TensorSpec::new(format!("t{i}"), Dtype::U8, [10]);
    let old: Vec<Vec<u8>> = (0..3).map(|i| vec![i as u8; 10]).collect();
    let options = WriteOptions { durable: false, ..WriteOptions::default() };
    let index = dir.join("model.deathtensors");
    deathtensors_io::save_sharded_legacy(&index, (0..3).map(|i| (spec(i), &old[i][..])).collect(), 10, &options)
        .unwrap();
    let before = snapshot(&dir);
    let mut tensors: Vec<(TensorSpec, &[u8])> = (0..3).map(|i| (spec(i), &old[(i + 1) % 3][..])).collect();
    tensors[2].1 = &old[0][..9];
    deathtensors_io::save_sharded_legacy(&index, tensors, 10, &options).unwrap_err();
    assert_eq!(snapshot(&dir), before);
}
