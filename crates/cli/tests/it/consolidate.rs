//! `consolidate`: a one-rank distributed checkpoint (built here) to one
//! file and to Hugging Face shards; a directory without metadata refused;
//! the same checkpoint on moto's S3 server and over HTTP (nginx) gives the
//! same bytes, and a missing or damaged rank object is named. io's tests
//! cover resharded checkpoints and hostile metadata.

use deathtensors_io::format::{Dtype, Metadata, TensorSpec};
use deathtensors_io::{save, Reader, WriteOptions};
use serde_json::json;

use crate::remote::{moto_options, nginx};
use crate::servers::{moto, request};
use crate::{assert_one_error_line, check, f32s, Scratch};

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

/// Consolidates `ckpt` (a path or URL, with `extra` arguments) into the
/// file `single` and the directory `single-hf/` of `dir`; returns what each
/// file holds, byte for byte, by name (`single` for the one file).
fn consolidated(ckpt: &str, dir: &Scratch, single: &str, extra: &[String]) -> Vec<(String, Vec<u8>)> {
    let out = dir.path(single);
    let hf = format!("{}/", dir.path(&format!("{single}-hf")).display());
    let mut files = Vec::new();
    for target in [out.to_string_lossy().into_owned(), hf] {
        let mut args =
            vec!["consolidate".to_string(), ckpt.to_string(), target, "--max-shard-bytes".into(), "8".into()];
        args.extend_from_slice(extra);
        let r = check(&args, 0);
        for line in r.stdout.lines() {
            let path = std::path::Path::new(line);
            let name = if path == out { "single".into() } else { path.file_name().unwrap().to_string_lossy().into() };
            files.push((name, std::fs::read(path).unwrap()));
        }
    }
    assert_eq!(files.len(), 4, "one file, two shards and an index");
    files
}

#[test]
fn consolidate_reads_a_checkpoint_on_s3_as_the_same_bytes() {
    let dir = Scratch::new("consolidate-s3");
    let ckpt = checkpoint(&dir);
    let Some(server) = moto(&dir.0) else { return };
    assert_eq!(request(server.port, "PUT", "/ckpt", b""), 200);
    for name in [RANK_FILE, "deathtensors.json"] {
        let status =
            request(server.port, "PUT", &format!("/ckpt/step-1/{name}"), &std::fs::read(ckpt.join(name)).unwrap());
        assert_eq!(status, 200, "upload of {name}");
    }
    let local = consolidated(&ckpt.to_string_lossy(), &dir, "local.dt", &[]);
    // A trailing `/` names the same prefix.
    for url in ["s3://ckpt/step-1", "s3://ckpt/step-1/"] {
        assert!(consolidated(url, &dir, "s3.dt", &moto_options(&server)) == local, "{url}");
    }
}

#[test]
fn consolidate_names_a_missing_damaged_or_hostile_rank_object() {
    let dir = Scratch::new("consolidate-s3-bad");
    let ckpt = checkpoint(&dir);
    let Some(server) = moto(&dir.0) else { return };
    assert_eq!(request(server.port, "PUT", "/ckpt", b""), 200);
    let doc = std::fs::read_to_string(ckpt.join("deathtensors.json")).unwrap();
    let rank = std::fs::read(ckpt.join(RANK_FILE)).unwrap();
    let out = dir.path("out.dt");
    // Each case under a prefix of its own (moto refuses an unsigned
    // overwrite): its metadata and rank object, if any; the run's exit
    // code and its one error line.
    let case = |prefix: &str, doc: Option<&str>, rank: Option<&[u8]>, code: i32, parts: &[&str]| {
        let objects = [("deathtensors.json", doc.map(str::as_bytes)), (RANK_FILE, rank)];
        for (name, bytes) in objects.into_iter().filter_map(|(n, b)| Some((n, b?))) {
            assert_eq!(request(server.port, "PUT", &format!("/ckpt/{prefix}/{name}"), bytes), 200, "{prefix}/{name}");
        }
        let url = format!("s3://ckpt/{prefix}");
        let mut args = vec!["consolidate".to_string(), url, out.to_string_lossy().into_owned()];
        args.extend(moto_options(&server));
        assert_one_error_line(&check(&args, code), parts);
        assert!(!out.exists(), "{prefix}");
    };
    // The metadata names a rank object that is not there: exit 2, naming it.
    let missing = format!("s3://ckpt/missing/{RANK_FILE}");
    case("missing", Some(&doc), None, 2, &[&missing, "no such object"]);
    // A flipped byte in the last block's data (before the 32-byte footer):
    // its digest fails, exit 1.
    let mut damaged = rank.clone();
    let at = damaged.len() - 40;
    damaged[at] ^= 0x10;
    case("damaged", Some(&doc), Some(&damaged), 1, &[&format!("s3://ckpt/damaged/{RANK_FILE}"), "is corrupt"]);
    // Another checkpoint's rank file of that name.
    let mut foreign = rank.clone();
    let at = foreign.windows(16).position(|w| w == b"00000000000000ff").unwrap();
    foreign[at + 15] = b'e';
    let named = format!("s3://ckpt/foreign/{RANK_FILE}");
    case("foreign", Some(&doc), Some(&foreign), 1, &[&named, "another checkpoint"]);
    // Metadata asking for far more bytes than the rank objects hold is
    // refused before any buffer is allocated.
    let hostile = doc
        .replace(r#""size":[3,2]"#, r#""size":[3,200000000000]"#)
        .replace(r#""sizes":[3,2]"#, r#""sizes":[3,200000000000]"#);
    let named = "s3://ckpt/hostile/deathtensors.json";
    case("hostile", Some(&hostile), Some(&rank), 1, &[named, "its rank files hold"]);
    // Rank objects and no metadata: an incomplete checkpoint.
    case("incomplete", None, Some(&rank), 1, &["s3://ckpt/incomplete", "incomplete checkpoint"]);
}

#[test]
fn consolidate_reads_a_checkpoint_over_http() {
    let dir = Scratch::new("consolidate-http");
    let ckpt = checkpoint(&dir);
    std::fs::create_dir_all(dir.path("www")).unwrap();
    std::fs::rename(&ckpt, dir.path("www/ckpt")).unwrap();
    let Some(server) = nginx(&dir.0) else { return };
    let local = consolidated(&dir.path("www/ckpt").to_string_lossy(), &dir, "local.dt", &[]);
    let url = format!("http://127.0.0.1:{}/ckpt", server.port);
    assert!(consolidated(&url, &dir, "http.dt", &[]) == local);
}

#[test]
fn consolidate_refuses_bintensors_naming_the_formats_it_writes() {
    let dir = Scratch::new("consolidate-bt");
    let ckpt = checkpoint(&dir);
    let out = dir.path("model.bt");
    let r = check(
        ["consolidate".as_ref(), ckpt.as_os_str(), out.as_os_str(), "--format".as_ref(), "bintensors".as_ref()],
        2,
    );
    crate::assert_one_error_line(&r, &["deathtensors or safetensors, not bintensors"]);
    assert!(!out.exists(), "nothing is written");
}
