//! `convert`: both directions checked tensor by tensor, metadata carried
//! over, format choice, atomicity (onto itself, and killed midway).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use deathtensors_io::format::{Dtype, Metadata, TensorSpec};
use deathtensors_io::{save, WriteOptions};
use serde_json::{json, Value};

use crate::{
    assert_one_error_line, assert_same_tensors, check, command, f32s, is_legacy_index, json, manifest, valid, write,
    Scratch,
};

fn convert(input: &Path, output: &Path, extra: &[&str], code: i32) -> crate::Run {
    let mut args = vec!["convert".as_ref(), input.as_os_str(), output.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    check(args, code)
}

#[test]
fn every_fixture_converts_to_deathtensors_tensor_by_tensor() {
    let dir = Scratch::new("convert-fixtures");
    for (name, expected) in manifest() {
        // Index files of sharded checkpoints are tested in `sharded`.
        if expected["outcome"] != "ok" || name.ends_with(".json") || is_legacy_index(&expected) {
            continue;
        }
        let src = valid(&name);
        let out = dir.path("out.dt");
        convert(&src, &out, &["--checksum"], 0);
        check(["verify".as_ref(), out.as_os_str()], 0);
        assert_same_tensors(&src, &out);
        // The digests the conversion recorded are the manifest's.
        let doc = json(["inspect".as_ref(), out.as_os_str()], 0);
        assert_eq!(doc["format"], "deathtensors");
        for t in doc["tensors"].as_array().unwrap() {
            let e = &expected["tensors"][t["name"].as_str().unwrap()];
            assert_eq!(t["sha256"], e["sha256"], "{name}: {}", t["name"]);
            assert_eq!(t["metadata"], e["metadata"], "{name}: {}", t["name"]);
        }
        let global = expected["global_metadata"].clone();
        let global = if global.is_null() { json!({}) } else { global };
        assert_eq!(doc["metadata"], global, "{name}");
    }
}

#[test]
fn safetensors_round_trip_is_byte_identical() {
    let dir = Scratch::new("convert-round-trip");
    for name in [
        "all_dtypes.safetensors",
        "multi_metadata.safetensors",
        "empty.safetensors",
        "sharded/model-00001-of-00002.safetensors",
    ] {
        let src = valid(&format!("safetensors-0.8.0/{name}"));
        let (dt, back) = (dir.path("model.dt"), dir.path("back.safetensors"));
        convert(&src, &dt, &["--checksum"], 0);
        let r = convert(&dt, &back, &[], 0);
        assert!(r.stderr.contains("checksums are dropped"), "{}", r.stderr);
        assert_same_tensors(&src, &back);
        let (a, b) = (json(["inspect".as_ref(), src.as_os_str()], 0), json(["inspect".as_ref(), back.as_os_str()], 0));
        assert_eq!(a["metadata"], b["metadata"], "{name}");
        // Byte for byte too, but where safetensors wrote metadata keys in
        // insertion order: ours are sorted.
        if a["metadata"].as_object().is_none_or(|m| m.len() < 2) {
            assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap(), "{name}");
        }
    }
}

#[test]
fn deathtensors_to_safetensors_drops_what_safetensors_cannot_hold() {
    let dir = Scratch::new("convert-to-safetensors");
    let src = dir.path("model.dt");
    let mut spec = TensorSpec::new("w", Dtype::F32, [2]);
    spec.metadata.insert("role".into(), "weight".into());
    let metadata: Metadata = [("license".to_string(), "MIT".to_string())].into();
    let options = WriteOptions { checksum: true, metadata: Some(metadata), ..WriteOptions::default() };
    let b = [7u8; 3];
    let w = f32s(&[1.5, -2.0]);
    save(&src, vec![(spec, &w[..]), (TensorSpec::new("b", Dtype::U8, [3]), &b[..])], &options).unwrap();

    let out = dir.path("model.safetensors");
    let r = convert(&src, &out, &[], 0);
    assert!(r.stderr.contains("per-tensor metadata of 1 tensor(s) (first \"w\") is dropped"), "{}", r.stderr);
    assert!(r.stdout.contains("safetensors, 2 tensors"), "{}", r.stdout);
    assert_same_tensors(&src, &out);
    let doc = json(["inspect".as_ref(), out.as_os_str()], 0);
    assert_eq!(doc["format"], "safetensors");
    assert_eq!(doc["metadata"], json!({ "license": "MIT" }));

    // An empty global_metadata becomes no __metadata__.
    let bare = dir.path("bare.dt");
    write(&bare, &[("x", Dtype::I8, &[1], vec![1])], &WriteOptions::default());
    convert(&bare, &out, &[], 0);
    assert_eq!(json(["inspect".as_ref(), out.as_os_str()], 0)["metadata"], Value::Null);
}

#[test]
fn complex128_cannot_go_to_safetensors() {
    let dir = Scratch::new("convert-c128");
    let out = dir.path("out.safetensors");
    let r = convert(&valid("deathtensors-0.3.0/all_dtypes.deathtensors"), &out, &[], 2);
    assert_one_error_line(&r, &["all_dtypes.deathtensors", "tensor \"c128\" is C128", "safetensors cannot store"]);
    assert!(!out.exists());
}

#[test]
fn output_format_comes_from_to_or_the_extension() {
    let dir = Scratch::new("convert-format");
    let src = valid("safetensors-0.8.0/multi_metadata.safetensors");
    let bin = dir.path("out.bin");
    let r = convert(&src, &bin, &[], 2);
    assert_one_error_line(&r, &["out.bin", "--format"]);
    assert!(!bin.exists());
    convert(&src, &bin, &["--to", "safetensors"], 0);
    assert_eq!(json(["inspect".as_ref(), bin.as_os_str()], 0)["format"], "safetensors");
    convert(&src, &bin, &["--to", "deathtensors"], 0);
    assert_eq!(json(["inspect".as_ref(), bin.as_os_str()], 0)["format"], "deathtensors");
    let dt = dir.path("out.deathtensors");
    convert(&src, &dt, &["--alignment", "4096"], 0);
    let doc = json(["inspect".as_ref(), dt.as_os_str()], 0);
    assert_eq!(doc["alignment"], 4096);
    assert_eq!(doc["flags"]["checksum"], false);
    for t in doc["tensors"].as_array().unwrap() {
        assert_eq!(t["data_offsets"][0].as_u64().unwrap() % 4096, 0);
    }
    assert_same_tensors(&src, &dt);

    let r = convert(&src, &dir.path("x.dt"), &["--alignment", "3"], 2);
    assert_one_error_line(&r, &["x.dt", "alignment 3"]);
    let r = convert(&src, &dir.path("x.safetensors"), &["--checksum"], 2);
    assert_one_error_line(&r, &["safetensors files have no checksum"]);
    check(["convert".as_ref(), src.as_os_str(), dt.as_os_str(), "--checksum".as_ref(), "--no-checksum".as_ref()], 2);
    assert_eq!(dir.entries(), ["out.bin", "out.deathtensors"]);
}

#[test]
fn checksums_are_kept_unless_refused() {
    let dir = Scratch::new("convert-keep-checksum");
    let (a, b) = (dir.path("a.dt"), dir.path("b.dt"));
    write(&a, &[("x", Dtype::F32, &[2], f32s(&[1.0, 2.0]))], &WriteOptions { checksum: true, ..Default::default() });
    convert(&a, &b, &[], 0);
    assert_eq!(json(["inspect".as_ref(), b.as_os_str()], 0)["flags"]["checksum"], true);
    convert(&a, &b, &["--no-checksum"], 0);
    let doc = json(["inspect".as_ref(), b.as_os_str()], 0);
    assert_eq!(doc["flags"]["checksum"], false);
    assert_eq!(doc["tensors"][0]["sha256"], Value::Null);
}

#[test]
fn converting_a_file_onto_itself_is_safe() {
    let dir = Scratch::new("convert-onto-itself");
    let path = dir.path("model.dt");
    std::fs::copy(valid("deathtensors-0.3.0/edge_shapes.deathtensors"), &path).unwrap();
    convert(&path, &path, &["--alignment", "128", "--checksum"], 0);
    assert_same_tensors(&valid("deathtensors-0.3.0/edge_shapes.deathtensors"), &path);
    check(["verify".as_ref(), path.as_os_str()], 0);
    assert_eq!(dir.entries(), ["model.dt"]);
}

#[test]
fn an_invalid_input_is_exit_1_and_writes_nothing() {
    let dir = Scratch::new("convert-invalid");
    let out = dir.path("out.dt");
    let lfs = crate::testdata().join("invalid/lfs-pointer.safetensors");
    let r = convert(&lfs, &out, &[], 1);
    assert_one_error_line(&r, &["lfs-pointer.safetensors", "Git LFS pointer"]);
    assert!(dir.entries().is_empty());
}

/// Bytes the process has written so far (Linux), or `None` when unknown.
fn written(pid: u32) -> Option<u64> {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines().find_map(|l| l.strip_prefix("wchar: ")).and_then(|n| n.trim().parse().ok())
}

/// The length of the conversion's named temp file beside `out.dt` (off
/// Linux, where temp files have names).
fn temp_written(dir: &Scratch) -> Option<u64> {
    let entries = dir.entries();
    let temp = entries.iter().find(|e| e.starts_with(".out.dt.") && e.ends_with(".dt-tmp"))?;
    std::fs::metadata(dir.path(temp)).ok().map(|m| m.len())
}

#[test]
fn a_killed_conversion_leaves_no_partial_output() {
    let dir = Scratch::new("convert-killed");
    let src = dir.path("big.safetensors");
    // 256 MiB: long enough to kill the conversion in the middle.
    let len = 256usize << 20;
    let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let options =
        WriteOptions { format: deathtensors_io::format::Format::Safetensors, durable: false, ..Default::default() };
    write(&src, &[("w", Dtype::U8, &[len as u64], bytes)], &options);

    for old in [Some(&b"the old file"[..]), None] {
        let out = dir.path("out.dt");
        let _ = std::fs::remove_file(&out);
        if let Some(old) = old {
            std::fs::write(&out, old).unwrap();
        }
        let mut child = command()
            .args(["convert".as_ref(), src.as_os_str(), out.as_os_str(), "--checksum".as_ref()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Kill it once it has written 32 MiB of its 256 (or after a moment
        // where /proc cannot tell). Off Linux the temp file has a name: its
        // length tells (a process under Wine starts too slowly for a moment).
        let started = Instant::now();
        loop {
            let progress = if cfg!(target_os = "linux") { written(child.id()) } else { temp_written(&dir) };
            match progress {
                Some(n) if n >= 32 << 20 => break,
                None if cfg!(target_os = "linux") && started.elapsed() > Duration::from_millis(300) => break,
                _ if started.elapsed() > Duration::from_secs(60) => break,
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        assert!(child.try_wait().unwrap().is_none(), "the conversion ended before it could be killed");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        let mut stdout = String::new();
        child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
        assert_eq!(stdout, "");
        match old {
            Some(old) => assert_eq!(std::fs::read(&out).unwrap(), old),
            None => assert!(!out.exists()),
        }
        // No temp file left behind on Linux (an unnamed O_TMPFILE);
        // elsewhere the killed writer's named temp file stays until the
        // next save to the folder removes it (below).
        let expected: Vec<&str> =
            if old.is_some() { vec!["big.safetensors", "out.dt"] } else { vec!["big.safetensors"] };
        let mut entries = dir.entries();
        if !cfg!(target_os = "linux") {
            entries.retain(|e| !(e.starts_with(".out.dt.") && e.ends_with(".dt-tmp")));
        }
        assert_eq!(entries, expected);
    }
    // And when left alone, it completes, and no temp file stays.
    let out = dir.path("out.dt");
    convert(&src, &out, &["--checksum"], 0);
    check(["verify".as_ref(), out.as_os_str()], 0);
    assert_eq!(dir.entries(), ["big.safetensors", "out.dt"]);
}

/// The bintensors fixtures (written by bintensors 0.2.0's wheel).
fn bintensors_fixtures() -> Vec<(String, Value)> {
    manifest().into_iter().filter(|(_, e)| e["format"] == "bintensors").collect()
}

#[test]
fn bintensors_round_trips_byte_for_byte_through_deathtensors_and_safetensors() {
    let dir = Scratch::new("convert-bintensors");
    let fixtures = bintensors_fixtures();
    assert!(fixtures.len() >= 15);
    for (name, expected) in fixtures {
        let src = valid(&name);
        // bintensors to bintensors: the same bytes (no extension: --to).
        let same = dir.path("same");
        convert(&src, &same, &["--to", "bintensors"], 0);
        assert_eq!(std::fs::read(&same).unwrap(), std::fs::read(&src).unwrap(), "{name}");
        // Through deathtensors and back: the same bytes, except that an
        // empty map becomes no metadata (deathtensors has one metadata map
        // always; the empty one is written as bintensors' "none").
        let (dt, back) = (dir.path("model.dt"), dir.path("back.bt"));
        convert(&src, &dt, &["--checksum"], 0);
        check(["verify".as_ref(), dt.as_os_str()], 0);
        check(["diff".as_ref(), src.as_os_str(), dt.as_os_str()], 0);
        let r = convert(&dt, &back, &[], 0);
        assert!(r.stdout.contains("bintensors,"), "{}", r.stdout);
        assert!(r.stderr.contains("checksums are dropped: bintensors has none"), "{}", r.stderr);
        assert_same_tensors(&src, &back);
        let empty_map = expected["metadata_is_none"] == false && expected["global_metadata"] == json!({});
        if !empty_map {
            assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap(), "{name}");
        }
        // Through safetensors (which has every bintensors dtype).
        let (st, back) = (dir.path("model.safetensors"), dir.path("back2.bt"));
        convert(&src, &st, &[], 0);
        convert(&st, &back, &[], 0);
        if !empty_map {
            assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap(), "{name}");
        }
    }
}

#[test]
fn to_bintensors_refuses_what_bintensors_cannot_hold() {
    let dir = Scratch::new("convert-to-bintensors");
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let out = dir.path("out.bt");
    let r = convert(&src, &out, &[], 2);
    assert_one_error_line(&r, &["cannot convert", "to bintensors: tensor", "which bintensors cannot store"]);
    assert!(!out.exists());
    let src = valid("bintensors-0.2.0/np_all_dtypes.bt");
    for flag in ["--checksum", "--alignment=64"] {
        let r = convert(&src, &out, &["--to", "bintensors", flag], 2);
        assert_one_error_line(&r, &["bintensors files"]);
        assert!(!out.exists());
    }
}

#[test]
fn compress_writes_chunks_or_a_blob_and_every_command_reads_them() {
    let dir = Scratch::new("convert-compress");
    let (src, chunks, blob, back) = (dir.path("a.dt"), dir.path("c.dt"), dir.path("b.dt"), dir.path("back.dt"));
    // 600,000 small floats (compressible) and a tiny tensor (stored raw).
    let values: Vec<f32> = (0..600_000).map(|i| ((i % 1000) as f32 - 500.0) * 1e-3).collect();
    write(
        &src,
        &[("w", Dtype::F32, &[600, 1000], f32s(&values)), ("b", Dtype::F32, &[2], f32s(&[1.0, 2.0]))],
        &WriteOptions { checksum: true, ..Default::default() },
    );
    convert(&src, &chunks, &["--compress=5"], 0);
    convert(&src, &blob, &["--compress", "--blob"], 0);
    for out in [&chunks, &blob] {
        check(["verify".as_ref(), out.as_os_str()], 0);
        assert_same_tensors(&src, out);
        check(["diff".as_ref(), src.as_os_str(), out.as_os_str()], 0);
    }
    let doc = json(["inspect".as_ref(), chunks.as_os_str()], 0);
    assert_eq!(doc["compression"]["mode"], "chunks");
    assert_eq!(doc["compression"]["level"], 5);
    assert!(doc["compression"]["ratio"].as_f64().unwrap() < 0.5, "{doc}");
    let w = doc["tensors"].as_array().unwrap().iter().find(|t| t["name"] == "w").unwrap();
    assert!(w["compression"]["ratio"].as_f64().unwrap() < 0.5 && w["nbytes"] == 2_400_000, "{w}");
    let b = doc["tensors"].as_array().unwrap().iter().find(|t| t["name"] == "b").unwrap();
    assert!(b["compression"].is_null());
    let doc = json(["inspect".as_ref(), blob.as_os_str()], 0);
    assert_eq!(doc["compression"]["mode"], "blob");
    // Back to uncompressed: byte for byte the original.
    convert(&chunks, &back, &[], 0);
    assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(&back).unwrap());
    // Compression is for deathtensors only.
    convert(&src, &dir.path("x.safetensors"), &["--compress"], 2);
}
