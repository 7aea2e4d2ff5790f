//! What deathtensors 0.3.0's API needs below Python: appends, its sharded
//! layout, statistics, diffs and manifests.

use deathtensors_format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{
    append, diff, manifest, save, save_sharded_legacy, tensor_stats, write_manifest, Compare, Compress, ErrorKind,
    Reader, ShardedReader, WriteOptions,
};

fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn metadata(pairs: &[(&str, &str)]) -> Metadata {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn append_keeps_the_old_tensors_checksums_and_metadata() {
    let dir = crate::scratch("append");
    let path = dir.join("m.dt");
    let a = f32s(&[1.0, 2.0, 3.0]);
    let mut spec = TensorSpec::new("a", Dtype::F32, [3]);
    spec.metadata = metadata(&[("role", "old")]);
    let options =
        WriteOptions { checksum: true, metadata: Some(metadata(&[("model", "x"), ("v", "1")])), ..Default::default() };
    save(&path, vec![(spec, &a[..])], &options).unwrap();

    let b = vec![7u8; 5];
    append(&path, vec![(TensorSpec::new("b", Dtype::U8, [5]), &b[..])], Some(&metadata(&[("v", "2")])), true).unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.header().tensors().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(r.read("a").unwrap(), a);
    assert_eq!(r.read("b").unwrap(), b);
    assert_eq!(r.header().get("a").unwrap().metadata, metadata(&[("role", "old")]));
    assert_eq!(r.header().metadata().unwrap(), &metadata(&[("model", "x"), ("v", "2")]));
    assert!(r.has_footer() && r.header().tensors().iter().all(|t| t.sha256.is_some()));
    r.verify().unwrap();
    assert_eq!(crate::entries(&dir), ["m.dt"], "no temp file left");
}

#[test]
fn append_refuses_duplicates_and_leaves_the_file_whole() {
    let dir = crate::scratch("append-dup");
    let path = dir.join("m.safetensors");
    let a = f32s(&[1.0]);
    let options = WriteOptions { format: Format::Safetensors, ..Default::default() };
    save(&path, vec![(TensorSpec::new("a", Dtype::F32, [1]), &a[..])], &options).unwrap();
    let before = std::fs::read(&path).unwrap();
    for names in [&["a"][..], &["c", "c"][..]] {
        let specs = names.iter().map(|n| (TensorSpec::new(*n, Dtype::F32, [1]), &a[..])).collect();
        let err = append(&path, specs, None, true).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::InvalidInput(m) if m.contains("already in the file or given twice")));
    }
    // A buffer of the wrong length fails inside the writer: nothing changes.
    let err = append(&path, vec![(TensorSpec::new("c", Dtype::F32, [2]), &a[..])], None, true).unwrap_err();
    assert!(err.to_string().contains("need 8"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(crate::entries(&dir), ["m.safetensors"]);
    // A safetensors file stays one.
    append(&path, vec![(TensorSpec::new("c", Dtype::F32, [1]), &a[..])], None, false).unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!((r.format(), r.header().len()), (Format::Safetensors, 2));
}

#[test]
fn legacy_sharded_saves_are_read_and_lay_out_as_030_does() {
    let dir = crate::scratch("legacy-sharded");
    let data: Vec<(TensorSpec, Vec<u8>)> =
        (0..5).map(|i| (TensorSpec::new(format!("w.{i}"), Dtype::U8, [100]), vec![i as u8; 100])).collect();
    let options = WriteOptions { checksum: true, metadata: Some(metadata(&[("model", "é")])), ..Default::default() };
    let index = dir.join("model.deathtensors");
    let shards =
        save_sharded_legacy(&index, data.iter().map(|(s, b)| (s.clone(), &b[..])).collect(), 250, &options).unwrap();
    let names: Vec<String> = shards.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(
        names,
        ["model-00001-of-0003.deathtensors", "model-00002-of-0003.deathtensors", "model-00003-of-0003.deathtensors"]
    );
    let meta = Reader::open(&index).unwrap().header().metadata().unwrap().clone();
    assert_eq!(meta["deathtensors.sharded"], "true");
    assert_eq!(meta["deathtensors.shard.count"], "3");
    assert_eq!(
        meta["deathtensors.shards"],
        r#"[{"path": "model-00001-of-0003.deathtensors", "tensors": ["w.0", "w.1"], "bytes": 200}, {"path": "model-00002-of-0003.deathtensors", "tensors": ["w.2", "w.3"], "bytes": 200}, {"path": "model-00003-of-0003.deathtensors", "tensors": ["w.4"], "bytes": 100}]"#
    );
    let shard = Reader::open(&shards[1]).unwrap();
    assert_eq!(shard.header().metadata().unwrap()["deathtensors.shard.index"], "1");
    let r = ShardedReader::open(&index).unwrap();
    assert_eq!(r.metadata(), &metadata(&[("model", "é")]));
    assert_eq!(r.read("w.3").unwrap(), vec![3u8; 100]);
    r.verify().unwrap();
}

#[test]
fn stats_and_diff_see_values() {
    let dir = crate::scratch("stats-diff");
    let (pa, pb) = (dir.join("a.dt"), dir.join("b.dt"));
    let x = f32s(&[0.0, 1.0, f32::NAN, 3.0]);
    let y = f32s(&[0.0, 1.5, f32::NAN, 3.0]);
    let z = [1u8, 2];
    let opt = WriteOptions::default();
    save(
        &pa,
        vec![(TensorSpec::new("x", Dtype::F32, [4]), &x[..]), (TensorSpec::new("z", Dtype::U8, [2]), &z[..])],
        &opt,
    )
    .unwrap();
    save(
        &pb,
        vec![(TensorSpec::new("x", Dtype::F32, [4]), &y[..]), (TensorSpec::new("z", Dtype::U8, [1, 2]), &z[..])],
        &opt,
    )
    .unwrap();
    let (a, b) = (Reader::open(&pa).unwrap(), Reader::open(&pb).unwrap());
    let infos: Vec<_> = a.header().tensors().iter().collect();
    let stats = tensor_stats(&a, &infos, |_| {}).unwrap();
    let s = stats[0].unwrap();
    assert_eq!((s.count, s.finite, s.nan, s.zeros, s.nonzero()), (4, 3, 1, 1, 2));
    let [min, max, mean, _] = s.summary().unwrap();
    assert_eq!((min, max), (0.0, 3.0));
    assert!((mean - 4.0 / 3.0).abs() < 1e-12);

    let d = diff(&a, &b, Compare::Exact, |_| {}).unwrap();
    assert!(!d.identical());
    assert_eq!(d.retyped, ["z"]);
    assert_eq!(d.values.len(), 1);
    assert_eq!((d.values[0].0.as_str(), d.values[0].1.differing, d.values[0].1.max_abs_diff), ("x", 1, Some(0.5)));
    assert!(diff(&a, &a, Compare::Exact, |_| {}).unwrap().identical());
    let close = diff(&a, &b, Compare::Close { atol: 0.5, rtol: 0.0 }, |_| {}).unwrap();
    assert!(close.values.is_empty());
}

#[test]
fn manifests_describe_the_header() {
    let dir = crate::scratch("manifest");
    let path = dir.join("m.dt");
    let x = f32s(&[1.0, 2.0]);
    let options = WriteOptions { checksum: true, metadata: Some(metadata(&[("k", "v")])), ..Default::default() };
    save(&path, vec![(TensorSpec::new("x", Dtype::F32, [2]), &x[..])], &options).unwrap();
    let out = write_manifest(&Reader::open(&path).unwrap(), None, "9.9.9", false).unwrap();
    assert_eq!(out, dir.join("m.dt.json"));
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(m["deathtensors_version"], "9.9.9");
    assert_eq!(m["magic"], "DTLEGION");
    assert_eq!(m["global_metadata"]["k"], "v");
    let t = &m["tensors"]["x"];
    assert_eq!(
        (t["dtype"].as_str(), t["numpy_dtype"].as_str(), t["nbytes"].as_u64()),
        (Some("F32"), Some("<f4"), Some(8))
    );
    assert_eq!(t["sha256"].as_str().unwrap(), crate::sha256_hex(&x));
    let again: serde_json::Value = serde_json::from_str(&manifest(&Reader::open(&path).unwrap(), "1")).unwrap();
    assert_eq!(again["tensors"], m["tensors"]);
}

#[test]
fn append_keeps_either_compression() {
    let dir = crate::scratch("append-compressed");
    let big: Vec<u8> = (0..1u32 << 16).flat_map(|i| ((i % 251) as f32).to_le_bytes()).collect();
    for (name, compress) in [("chunks.dt", Compress::Chunked { level: 3 }), ("blob.dt", Compress::Blob { level: 3 })] {
        let path = dir.join(name);
        let options = WriteOptions { compress, checksum: true, ..Default::default() };
        save(&path, vec![(TensorSpec::new("big", Dtype::F32, [1 << 16]), &big[..])], &options).unwrap();
        let small = f32s(&[1.0, 2.0]);
        append(&path, vec![(TensorSpec::new("small", Dtype::F32, [2]), &small[..])], None, false).unwrap();
        let r = Reader::open(&path).unwrap();
        assert_eq!(
            (r.head().is_chunk_compressed(), r.head().is_compressed()),
            (name == "chunks.dt", name == "blob.dt")
        );
        assert!(r.file_len() < big.len() as u64 / 2, "{name} stays compressed");
        assert_eq!(r.read("big").unwrap(), big);
        assert_eq!(r.read("small").unwrap(), small);
        r.verify().unwrap();
    }
}
