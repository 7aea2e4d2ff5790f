//! Every command that reads tensor bytes checks them against their digests
//! (or the footer) first: a file with one flipped byte in a tensor fails
//! each of them with exit 1 naming the tensor, locally and over HTTP, and
//! nothing is written from it.

use std::path::Path;

use deathtensors_io::format::Dtype;
use deathtensors_io::{Reader, WriteOptions};

use crate::remote::nginx;
use crate::{assert_one_error_line, check, f32s, valid, write, Scratch};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A file with digests: `small`, and `big` (12 MiB, two copy chunks).
fn good_file(path: &Path) {
    let big: Vec<f32> = (0..3 << 20).map(|i| (i % 1000) as f32).collect();
    let tensors = [
        ("small", Dtype::F32, &[4u64][..], f32s(&[1.0, 2.0, 3.0, 4.0])),
        ("big", Dtype::F32, &[3 << 20][..], f32s(&big)),
    ];
    write(path, &tensors, &WriteOptions { checksum: true, ..WriteOptions::default() });
}

/// A copy of `good` with one byte of tensor `name` flipped, `at` bytes into it.
fn flipped(good: &Path, bad: &Path, name: &str, at: u64) {
    let offset = Reader::open(good).unwrap().tensor(name).unwrap().file_offset + at;
    let mut bytes = std::fs::read(good).unwrap();
    bytes[offset as usize] ^= 0x40;
    std::fs::write(bad, bytes).unwrap();
}

/// Runs `args`, expecting exit 1 with one error line naming `tensor`, and
/// that `outputs` were not written.
#[track_caller]
fn refused(args: &[&str], tensor: &str, outputs: &[&Path]) {
    let r = check(args, 1);
    assert_one_error_line(&r, &[&format!("tensor {tensor:?} is corrupt")]);
    for out in outputs {
        assert!(!out.exists(), "{} was written by {args:?}", out.display());
    }
}

/// The reading commands on `bad` (a path or URL) whose tensor `tensor` is
/// damaged; outputs go to `dir`, `good` is an intact copy.
fn every_command_refuses(dir: &Scratch, bad: &str, good: &Path, tensor: &str) {
    let out = dir.path("out.dt");
    refused(&["cat", bad, tensor], tensor, &[]);
    refused(&["cat", "--raw", bad, tensor], tensor, &[]);
    refused(&["cat", "--json", bad, tensor], tensor, &[]);
    refused(&["stats", bad], tensor, &[]);
    refused(&["stats", bad, tensor], tensor, &[]);
    refused(&["diff", bad, p(good)], tensor, &[]);
    refused(&["diff", p(good), bad], tensor, &[]);
    refused(&["convert", bad, p(&out)], tensor, &[&out]);
    refused(&["convert", bad, p(&out), "--checksum"], tensor, &[&out]);
    let st = dir.path("out.safetensors");
    refused(&["convert", bad, p(&st)], tensor, &[&st]);
    refused(&["convert", bad, p(&out), "--compress=3"], tensor, &[&out]);
    refused(&["convert", bad, p(&out), "--compress=3", "--blob"], tensor, &[&out]);
    let key = dir.path("k.jwk");
    if !key.exists() {
        check(["keygen", "--type", "symmetric", "--kid", "k", "--out", p(&key)], 0);
    }
    refused(&["encrypt", bad, p(&out), "--to", p(&key)], tensor, &[&out]);
    let coll = dir.path("rows");
    refused(&["blob", "create", p(&coll), "--from", bad, "--tensor", tensor], tensor, &[&coll]);
    check(["blob", "create", p(&coll), "--from", p(good), "--tensor", tensor], 0);
    check(["blob", "truncate", p(&coll), "0"], 0);
    refused(&["blob", "append", p(&coll), bad, "--tensor", tensor], tensor, &[]);
    let c = deathtensors_io::Collection::open(&coll).unwrap();
    assert_eq!(c.rows(), 0, "no row of a damaged tensor is committed");
    drop(c);
    std::fs::remove_dir_all(&coll).unwrap();
}

#[test]
fn a_flipped_tensor_byte_fails_every_reading_command() {
    let dir = Scratch::new("integrity-local");
    let good = dir.path("good.dt");
    good_file(&good);
    for (tensor, at) in [("small", 5), ("big", 11 << 20)] {
        let bad = dir.path(&format!("bad-{tensor}.dt"));
        flipped(&good, &bad, tensor, at);
        let before = std::fs::read(&bad).unwrap();
        every_command_refuses(&dir, p(&bad), &good, tensor);
        // meta and sign rewrite the file in place: refused, and it is unchanged.
        refused(&["meta", p(&bad), "--set", "k=v"], tensor, &[]);
        let signer = dir.path("s.jwk");
        if !signer.exists() {
            check(["keygen", "--type", "ed25519", "--kid", "s", "--out", p(&signer)], 0);
        }
        refused(&["sign", p(&bad), "--with", p(&signer)], tensor, &[]);
        assert_eq!(std::fs::read(&bad).unwrap(), before, "the damaged file was changed");
        // The intact file passes the same commands.
        check(["cat", p(&good), tensor], 0);
        check(["stats", p(&good)], 0);
        check(["convert", p(&good), p(&dir.path("ok.dt"))], 0);
        check(["verify", p(&dir.path("ok.dt"))], 0);
    }
}

#[test]
fn a_file_with_only_a_footer_is_checked_by_its_footer() {
    // deathtensors 0.3.0's checksum files carry a footer and no digests.
    let dir = Scratch::new("integrity-footer");
    let bad = valid("deathtensors-0.3.0/bad_checksum_bitflip.deathtensors");
    let out = dir.path("out.dt");
    for args in [vec!["cat", p(&bad), "f32"], vec!["stats", p(&bad)], vec!["convert", p(&bad), p(&out)]] {
        let r = check(&args, 1);
        assert_one_error_line(&r, &["footer"]);
        assert!(!out.exists());
    }
    check(["cat", p(&valid("deathtensors-0.3.0/all_dtypes_checksum.deathtensors")), "f32"], 0);
}

#[test]
fn a_flipped_tensor_byte_served_over_http_fails_every_reading_command() {
    let dir = Scratch::new("integrity-http");
    std::fs::create_dir_all(dir.path("www")).unwrap();
    let good = dir.path("good.dt");
    good_file(&good);
    flipped(&good, &dir.path("www/bad.dt"), "big", 9 << 20);
    std::fs::copy(&good, dir.path("www/good.dt")).unwrap();
    let Some(server) = nginx(&dir.0) else { return };
    let url = format!("http://127.0.0.1:{}/bad.dt", server.port);
    every_command_refuses(&dir, &url, &good, "big");
    // A requirement applies to the one open of a URL: an unsigned file is
    // refused, never read through an open made without it.
    let good_url = format!("http://127.0.0.1:{}/good.dt", server.port);
    let out = dir.path("req.dt");
    for args in
        [vec!["verify", &good_url, "--require-signature"], vec!["convert", &good_url, p(&out), "--require-signature"]]
    {
        let r = check(&args, 1);
        assert_one_error_line(&r, &["not signed"]);
        assert!(!out.exists());
    }
    check(["verify", good_url.as_str()], 0);
}
