//! Collections on the command line: `deathtensors blob` and collection
//! directories in `inspect`, `verify` and `convert`.

use std::path::Path;

use deathtensors_io::format::{Dtype, TensorSpec};
use deathtensors_io::{save, Collection, Reader, WriteOptions};

use crate::{assert_one_error_line, check, f32s, json, Scratch};

/// A file with one F32 tensor `emb` of `rows` rows of 4, row i = i, i+.25, ...
fn rows_file(path: &Path, rows: u64, first: f32) {
    let values: Vec<f32> = (0..rows * 4).map(|i| first + (i / 4) as f32 + (i % 4) as f32 * 0.25).collect();
    let spec = TensorSpec::new("emb", Dtype::F32, [rows, 4]);
    save(path, vec![(spec, &f32s(&values)[..])], &WriteOptions::default()).unwrap();
}

fn all_rows(dir: &Path) -> Vec<u8> {
    let c = Collection::open(dir).unwrap();
    let mut out = vec![0u8; (c.rows() * c.layout().row_bytes()) as usize];
    c.read_rows(0, &mut out).unwrap();
    out
}

#[test]
fn create_append_truncate_export_round_trip() {
    let s = Scratch::new("blob-cli");
    let (a, b, dir) = (s.path("a.dt"), s.path("b.dt"), s.path("emb"));
    rows_file(&a, 10, 0.0);
    rows_file(&b, 7, 100.0);
    let d = dir.to_str().unwrap();
    let r = check(["blob", "create", d, "--from", a.to_str().unwrap(), "--block-rows", "4"], 0);
    assert!(r.stdout.contains("10 rows"), "{}", r.stdout);
    check(["blob", "append", d, b.to_str().unwrap()], 0);
    let doc = json(["inspect", d], 0);
    assert_eq!(doc["rows"], 17);
    assert_eq!(doc["dtype"], "F32");
    assert_eq!(doc["row_shape"], serde_json::json!([4]));
    assert_eq!(doc["blocks"].as_array().unwrap().len(), 5);
    let mut want = Reader::open(&a).unwrap().read("emb").unwrap();
    want.extend(Reader::open(&b).unwrap().read("emb").unwrap());
    assert_eq!(all_rows(&dir), want);
    let r = check(["verify", d], 0);
    assert!(r.stdout.contains("4 SHA-256 verified"), "{}", r.stdout);

    check(["blob", "truncate", d, "12"], 0);
    assert_eq!(all_rows(&dir), want[..12 * 16]);
    let out = s.path("part.safetensors");
    check(["blob", "export", d, out.to_str().unwrap(), "--rows", "3:9"], 0);
    let exported = Reader::open(&out).unwrap();
    assert_eq!(exported.header().get("rows").unwrap().shape, vec![6, 4]);
    assert_eq!(exported.read("rows").unwrap(), want[3 * 16..9 * 16]);

    // convert: to a new collection (other block size kept), or to one file.
    let copy = s.path("copy");
    check(["convert", d, copy.to_str().unwrap()], 0);
    assert_eq!(all_rows(&copy), want[..12 * 16]);
    let whole = s.path("whole.dt");
    check(["convert", d, whole.to_str().unwrap(), "--checksum"], 0);
    let r = Reader::open(&whole).unwrap();
    r.verify().unwrap();
    assert_eq!(r.read("rows").unwrap(), want[..12 * 16]);
}

#[test]
fn refusals_name_the_problem() {
    let s = Scratch::new("blob-cli-errors");
    let (a, dir) = (s.path("a.dt"), s.path("emb"));
    rows_file(&a, 3, 0.0);
    let d = dir.to_str().unwrap();
    check(["blob", "create", d, "--dtype", "BF16", "--shape", "4"], 0);
    // A tensor of another dtype.
    let r = check(["blob", "append", d, a.to_str().unwrap()], 2);
    assert_one_error_line(&r, &["F32", "BF16"]);
    // Creating over an existing collection.
    let r = check(["blob", "create", d, "--dtype", "F32", "--shape", "4"], 2);
    assert_one_error_line(&r, &["not empty"]);
    // Exporting rows past the end.
    let r = check(["blob", "export", d, s.path("x.dt").to_str().unwrap(), "--rows", "0:5"], 2);
    assert_one_error_line(&r, &["--rows", "0 rows"]);
    // A damaged manifest is an invalid file (exit 1), naming it.
    std::fs::write(dir.join("collection.json"), b"{\"format\": 1}").unwrap();
    let r = check(["inspect", d], 1);
    assert_one_error_line(&r, &["collection.json"]);
    let r = check(["verify", d], 1);
    assert_one_error_line(&r, &["collection.json"]);
}

#[test]
fn a_corrupt_block_fails_verify_naming_it() {
    let s = Scratch::new("blob-cli-corrupt");
    let (a, dir) = (s.path("a.dt"), s.path("emb"));
    rows_file(&a, 8, 0.0);
    let d = dir.to_str().unwrap();
    check(["blob", "create", d, "--from", a.to_str().unwrap(), "--block-rows", "4"], 0);
    let block = Collection::open(&dir).unwrap().blocks()[1].path.clone();
    let mut bytes = std::fs::read(&block).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&block, bytes).unwrap();
    let r = check(["verify", d], 1);
    assert_one_error_line(&r, &["FAILED", "block 1", block.file_name().unwrap().to_str().unwrap()]);
    // Reading commands that pass rows on check the blocks they read first:
    // nothing is written from a damaged block.
    let out = s.path("rows.safetensors");
    let o = out.to_str().unwrap();
    for args in [vec!["blob", "export", d, o], vec!["blob", "export", d, o, "--rows", "4:6"]] {
        let r = check(&args, 1);
        assert_one_error_line(&r, &["block 1"]);
        assert!(!out.exists(), "{args:?} wrote {o}");
    }
    // Rows of the intact block 0 export.
    check(["blob", "export", d, o, "--rows", "0:4"], 0);
    let copy = s.path("copy");
    let r = check(["blob", "convert", d, copy.to_str().unwrap()], 1);
    assert_one_error_line(&r, &["block 1"]);
    assert!(!copy.exists());
}
