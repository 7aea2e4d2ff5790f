//! Sharded checkpoints in `inspect`, `verify` and `convert`: Hugging Face
//! indexes, deathtensors 0.3.0 index files, and conversions both ways.

use deathtensors_io::ShardedReader;

use crate::{check, json, tensors, valid, write, Scratch};

#[test]
fn inspect_reads_a_hugging_face_index() {
    let index = valid("safetensors-0.8.0/sharded/model.safetensors.index.json");
    let r = check([std::path::Path::new("inspect"), &index], 0);
    assert!(r.stdout.contains("2 shards"), "{}", r.stdout);
    assert!(r.stdout.contains("model-00002-of-00002.safetensors"), "{}", r.stdout);
    let doc = json([std::path::Path::new("inspect"), &index], 0);
    assert_eq!(doc["tensors"].as_array().unwrap().len(), 4);
    assert_eq!(doc["total_size"], 4096);
    assert_eq!(doc["shards"].as_array().unwrap().len(), 2);
}

#[test]
fn verify_checks_index_and_shards_of_a_030_set() {
    let index = valid("deathtensors-0.3.0/sdist-samples/sharded_model.deathtensors");
    let r = check([std::path::Path::new("verify"), &index], 0);
    assert!(r.stdout.contains("20 shards") && r.stdout.contains("20 of the shards carry checksums"), "{}", r.stdout);
    // Hugging Face shards have no checksums: consistent, but nothing to verify.
    let hf = valid("safetensors-0.8.0/sharded/model.safetensors.index.json");
    check([std::path::Path::new("verify"), &hf], 1);
    check([std::path::Path::new("verify"), std::path::Path::new("--allow-missing"), &hf], 0);
}

#[test]
fn verify_fails_on_an_index_that_lies() {
    let s = Scratch::new("sharded-lie");
    let src = valid("safetensors-0.8.0/sharded");
    for f in ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"] {
        std::fs::copy(src.join(f), s.path(f)).unwrap();
    }
    let text = std::fs::read_to_string(src.join("model.safetensors.index.json")).unwrap();
    std::fs::write(
        s.path("model.safetensors.index.json"),
        text.replace("\"total_size\": 4096", "\"total_size\": 4097"),
    )
    .unwrap();
    let r = check(
        [
            std::path::Path::new("verify"),
            &s.path("model.safetensors.index.json"),
            std::path::Path::new("--allow-missing"),
        ],
        1,
    );
    assert!(r.stderr.contains("total_size"), "{}", r.stderr);
}

#[test]
fn convert_sharded_checkpoints_both_ways_and_into_one_file() {
    let s = Scratch::new("sharded-convert");
    let hf = valid("safetensors-0.8.0/sharded/model.safetensors.index.json");
    let source = ShardedReader::open(&hf).unwrap();
    // Hugging Face -> deathtensors shards with checksums.
    let out_index = s.path("model.deathtensors.index.json");
    check([std::path::Path::new("convert"), &hf, &out_index, std::path::Path::new("--checksum")], 0);
    assert!(s.path("model-00001-of-00002.deathtensors").exists());
    let ours = ShardedReader::open(&out_index).unwrap();
    ours.verify().unwrap();
    // ... and back to safetensors shards: byte-identical to the originals.
    let back = s.path("back.safetensors.index.json");
    check([std::path::Path::new("convert"), &out_index, &back], 0);
    for i in 1..=2 {
        let theirs =
            std::fs::read(valid(&format!("safetensors-0.8.0/sharded/model-0000{i}-of-00002.safetensors"))).unwrap();
        let mine = std::fs::read(s.path(&format!("back-0000{i}-of-00002.safetensors"))).unwrap();
        assert_eq!(mine, theirs, "shard {i}");
    }
    // Into one file: every tensor, byte for byte.
    let single = s.path("merged.dt");
    check([std::path::Path::new("convert"), &hf, &single], 0);
    let merged = deathtensors_io::Reader::open(&single).unwrap();
    assert_eq!(merged.header().len(), 4);
    for name in source.keys() {
        assert_eq!(merged.read(name).unwrap(), source.read(name).unwrap(), "{name}");
    }
    assert!(merged.header().metadata().unwrap().get("total_size").is_none());
}

#[test]
fn convert_sharded_checkpoints_compressed() {
    let s = Scratch::new("sharded-convert-compressed");
    let hf = valid("safetensors-0.8.0/sharded/model.safetensors.index.json");
    let source = ShardedReader::open(&hf).unwrap();
    let out_index = s.path("model.deathtensors.index.json");
    check([std::path::Path::new("convert"), &hf, &out_index, "--checksum".as_ref(), "--compress=5".as_ref()], 0);
    let ours = ShardedReader::open(&out_index).unwrap();
    ours.verify().unwrap();
    for name in source.keys() {
        assert_eq!(ours.read(name).unwrap(), source.read(name).unwrap(), "{name}");
    }
    for i in 1..=2 {
        let shard = deathtensors_io::Reader::open(s.path(&format!("model-0000{i}-of-00002.deathtensors"))).unwrap();
        assert!(shard.head().is_chunk_compressed() && shard.header().compression().unwrap().level == 5);
    }
    // Into one file, as 0.3.0's whole-file frame.
    let single = s.path("merged.dt");
    check([std::path::Path::new("convert"), &hf, &single, "--compress".as_ref(), "--blob".as_ref()], 0);
    let merged = deathtensors_io::Reader::open(&single).unwrap();
    assert!(merged.head().is_compressed());
    for name in source.keys() {
        assert_eq!(merged.read(name).unwrap(), source.read(name).unwrap(), "{name}");
    }
}

/// `ls`, `stats`, `cat` and `diff` take a sharded index of either layout,
/// as `inspect`, `verify` and `convert` do: what they print equals what they
/// print for the same tensors in one file.
#[test]
fn ls_stats_cat_and_diff_take_both_index_layouts() {
    use std::path::Path;
    let s = Scratch::new("sharded-readers");
    let hf = valid("safetensors-0.8.0/sharded/model.safetensors.index.json");
    let single = s.path("one.dt");
    check([Path::new("convert"), &hf, &single], 0);
    // deathtensors 0.3.0's layout: an index file holding no tensors.
    let legacy = valid("deathtensors-0.3.0/sdist-samples/sharded_model.deathtensors");
    let legacy_names = check([Path::new("ls"), &legacy], 0).stdout;
    assert_eq!(legacy_names.lines().count(), 20, "{legacy_names}");
    assert_eq!(legacy_names.lines().next(), Some("layer.0.weight"));
    let index = &hf;
    assert_eq!(check([Path::new("ls"), index], 0).stdout, check([Path::new("ls"), &single], 0).stdout);
    let name = Path::new("model.layers.3.weight");
    assert_eq!(check([Path::new("cat"), index, name], 0).stdout, check([Path::new("cat"), &single, name], 0).stdout);
    let stats = |p: &Path| json([Path::new("stats"), p], 0)["tensors"].clone();
    assert_eq!(stats(index), stats(&single));
    // The same tensors: identical, either way round.
    let r = check([Path::new("diff"), index, &single], 0);
    assert!(r.stdout.starts_with("identical: 4 tensors"), "{}", r.stdout);
    check([Path::new("diff"), &single, index], 0);
    let legacy_stats = json([Path::new("stats"), &legacy], 0);
    assert_eq!(legacy_stats["tensors"].as_array().unwrap().len(), 20);
    check([Path::new("cat"), &legacy, Path::new("layer.19.weight")], 0);
    // A changed tensor in one shard is found, named, and makes diff exit 1.
    let edited = s.path("edited.dt");
    let mut all = tensors(&single);
    all[2].3[0] ^= 1;
    all.pop();
    let all: Vec<(&str, _, &[u64], Vec<u8>)> =
        all.iter().map(|(n, d, sh, b)| (n.as_str(), *d, &sh[..], b.clone())).collect();
    write(&edited, &all, &deathtensors_io::WriteOptions::default());
    let r = check([Path::new("diff"), &hf, &edited], 1);
    assert!(r.stdout.contains("- model.layers.3.weight"), "{}", r.stdout);
    assert!(r.stdout.contains("~ model.layers.2.weight  values: 1 of"), "{}", r.stdout);
    // The legacy set against itself converted to one file: identical.
    let legacy_one = s.path("legacy.dt");
    check([Path::new("convert"), &legacy, &legacy_one], 0);
    let r = check([Path::new("diff"), &legacy, &legacy_one], 0);
    assert!(r.stdout.starts_with("identical: 20 tensors"), "{}", r.stdout);
}
