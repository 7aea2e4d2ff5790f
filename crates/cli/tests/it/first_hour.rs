//! What a newcomer meets in the first hour (issue 49): what a signature
//! proves, key files shown, honest `verify` of a small collection, errors
//! that name the argument that is wrong, help text.

use std::path::Path;

use crate::{check, json, run, valid, Scratch};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A key pair `name.jwk` / `name.pub.jwk` of `kind`; returns keygen's stdout.
fn keygen(dir: &Scratch, kind: &str, name: &str) -> String {
    let (out, public) = (dir.path(&format!("{name}.jwk")), dir.path(&format!("{name}.pub.jwk")));
    check(["keygen", "--type", kind, "--kid", name, "--out", p(&out), "--public-out", p(&public)], 0).stdout
}

/// A checksummed copy of a fixture, signed by mallory.
fn signed_by_mallory(dir: &Scratch) -> std::path::PathBuf {
    keygen(dir, "ed25519", "mallory");
    let f = dir.path("m.dt");
    check(["convert", p(&valid("safetensors-0.8.0/all_dtypes.safetensors")), p(&f), "--checksum"], 0);
    check(["sign", p(&f), "--with", p(&dir.path("mallory.jwk"))], 0);
    f
}

fn fingerprint(dir: &Scratch, key: &str) -> String {
    let v = json(["key", p(&dir.path(key))], 0);
    v["keys"][0]["fingerprint"].as_str().unwrap().to_string()
}

#[test]
fn an_untrusted_signature_is_valid_not_verified() {
    let dir = Scratch::new("first-hour-untrusted");
    let f = signed_by_mallory(&dir);
    let fp = fingerprint(&dir, "mallory.pub.jwk");
    let out = check(["inspect", p(&f)], 0).stdout;
    let line = out.lines().find(|l| l.starts_with("signed by")).expect("a signed by line");
    assert!(line.contains(&fp), "{out}");
    assert!(line.contains("signature valid, but its key is not trusted"), "{out}");
    assert!(line.contains("not who signed it") && line.contains("--signer"), "{out}");
    assert!(!line.contains("verified"), "{out}");
    let out = check(["verify", p(&f)], 0).stdout;
    assert!(out.contains("not trusted") && !out.contains("verified, a key you trust"), "{out}");
    let v = json(["verify", p(&f)], 0);
    assert_eq!(v["signer_keys"][0]["trusted"], false);
    assert_eq!(v["signer_keys"][0]["fingerprint"], fp.as_str());
}

#[test]
fn a_trusted_signature_is_verified_and_named_by_kid() {
    let dir = Scratch::new("first-hour-trusted");
    let f = signed_by_mallory(&dir);
    let fp = fingerprint(&dir, "mallory.jwk");
    let public = dir.path("mallory.pub.jwk");
    let out = check(["inspect", p(&f), "--signer", p(&public)], 0).stdout;
    let line = out.lines().find(|l| l.starts_with("signed by")).expect("a signed by line");
    assert!(
        line.contains(&format!("\"mallory\" (fingerprint {fp}): header signature verified, a key you trust")),
        "{out}"
    );
    assert!(out.contains("checked here") && out.contains("no tensor byte was read"), "{out}");
    let out = check(["verify", p(&f), "--signer", p(&public)], 0).stdout;
    assert!(out.contains(&format!("signed by \"mallory\" (fingerprint {fp}): verified")), "{out}");
    let v = json(["inspect", p(&f), "--signer", p(&public)], 0);
    assert_eq!(v["signer_keys"][0], serde_json::json!({"fingerprint": fp, "kid": "mallory", "trusted": true}));

    // Another key given: the signature is still valid, but not by a key you trust.
    keygen(&dir, "ed25519", "bob");
    let out = check(["inspect", p(&f), "--signer", p(&dir.path("bob.pub.jwk"))], 0).stdout;
    assert!(out.contains("signature valid, but not by a key you trust"), "{out}");
}

#[test]
fn keys_are_shown_by_kind_kid_fingerprint_and_public_half() {
    let dir = Scratch::new("first-hour-keys");
    let made = keygen(&dir, "ed25519", "publisher");
    let secret = dir.path("publisher.jwk");
    let fp = fingerprint(&dir, "publisher.jwk");
    assert_eq!(fp.len(), 16);
    assert!(made.contains(&format!("fingerprint {fp}")), "keygen prints the fingerprint: {made}");
    let d = serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&secret).unwrap()).unwrap()["d"]
        .as_str()
        .unwrap()
        .to_string();
    for cmd in ["key", "inspect"] {
        let out = check([cmd, p(&secret)], 0).stdout;
        assert!(out.contains("Ed25519 secret key") && out.contains("publisher") && out.contains(&fp), "{out}");
        assert!(out.contains("\"x\""), "the public half: {out}");
        assert!(!out.contains(&d), "never the secret: {out}");
    }
    let v = json(["key", p(&dir.path("publisher.pub.jwk"))], 0);
    assert_eq!(v["keys"][0]["kind"], "ed25519");
    assert_eq!(v["keys"][0]["secret"], false);
    assert_eq!(v["keys"][0]["fingerprint"], fp.as_str());

    keygen(&dir, "x25519", "alice");
    let v = json(["key", p(&dir.path("alice.jwk"))], 0);
    assert_eq!((v["keys"][0]["kind"].as_str(), v["keys"][0]["kid"].as_str()), (Some("x25519"), Some("alice")));
    assert!(v["keys"][0]["public_jwk"].get("d").is_none());
}

#[test]
fn decrypting_with_a_public_key_says_so() {
    let dir = Scratch::new("first-hour-public-key");
    keygen(&dir, "x25519", "alice");
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let enc = dir.path("enc.dt");
    check(["encrypt", p(&src), p(&enc), "--to", p(&dir.path("alice.pub.jwk"))], 0);
    let out = dir.path("plain.dt");
    let r = check(["decrypt", p(&enc), p(&out), "--key", p(&dir.path("alice.pub.jwk"))], 2);
    assert!(r.stderr.contains("public X25519 key") && r.stderr.contains("needs the secret key"), "{}", r.stderr);
    assert!(!out.exists());
}

#[test]
fn decrypting_with_an_ed25519_key_says_so() {
    // Issue 61: an Ed25519 key given to decrypt got "no key given matches",
    // where an X25519 public key gets a precise message.
    let dir = Scratch::new("first-hour-ed25519-key");
    keygen(&dir, "x25519", "alice");
    keygen(&dir, "ed25519", "publisher");
    let src = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let enc = dir.path("enc.dt");
    check(["encrypt", p(&src), p(&enc), "--recipient", p(&dir.path("alice.pub.jwk"))], 0);
    let out = dir.path("plain.dt");
    for key in ["publisher.pub.jwk", "publisher.jwk"] {
        let r = check(["decrypt", p(&enc), p(&out), "--key", p(&dir.path(key))], 2);
        assert!(r.stderr.contains("this is an Ed25519 key \"publisher\", a signer's"), "{}", r.stderr);
        assert!(r.stderr.contains("decrypting needs a symmetric key or an X25519 secret key"), "{}", r.stderr);
        assert!(!out.exists());
    }
    // With the right key beside it, the signer's key is no obstacle.
    check(["decrypt", p(&enc), p(&out), "--key", p(&dir.path("publisher.jwk")), "--key", p(&dir.path("alice.jwk"))], 0);
}

#[test]
fn decrypting_with_the_wrong_key_warns_of_nothing() {
    let dir = Scratch::new("first-hour-wrong-key");
    keygen(&dir, "x25519", "alice");
    keygen(&dir, "x25519", "eve");
    let src = dir.path("src.dt");
    check(["convert", p(&valid("safetensors-0.8.0/all_dtypes.safetensors")), p(&src), "--checksum"], 0);
    let enc = dir.path("enc.dt");
    keygen(&dir, "ed25519", "pub");
    check(["encrypt", p(&src), p(&enc), "--to", p(&dir.path("alice.pub.jwk")), "--sign", p(&dir.path("pub.jwk"))], 0);
    let r = run(["decrypt", p(&enc), p(&dir.path("out.safetensors")), "--key", p(&dir.path("eve.jwk"))]);
    assert_ne!(r.code, 0);
    assert!(!r.stderr.contains("warning"), "no warning before an error: {}", r.stderr);
}

#[test]
fn a_collection_smaller_than_a_block_verifies() {
    let dir = Scratch::new("first-hour-small-blob");
    let emb = dir.path("emb");
    check(["blob", "create", p(&emb), "--dtype", "F32", "--shape", "4"], 0);
    let rows = dir.path("rows.dt");
    crate::write(
        &rows,
        &[("r", deathtensors_io::format::Dtype::F32, &[3, 4], crate::f32s(&[0.5; 12]))],
        &Default::default(),
    );
    check(["blob", "append", p(&emb), p(&rows)], 0);
    let out = check(["verify", p(&emb)], 0).stdout;
    assert!(out.contains("ok: 3 rows in 1 block") && out.contains("1 partial block"), "{out}");
    assert!(out.contains("structure only"), "{out}");
}

#[test]
fn errors_name_the_argument_that_is_wrong() {
    let dir = Scratch::new("first-hour-errors");
    let r = check(["convert", p(&dir.path("missing_dir")), p(&dir.path("out"))], 2);
    assert!(r.stderr.contains("cannot open the input") && r.stderr.contains("missing_dir"), "{}", r.stderr);
    assert!(!r.stderr.contains("output format"), "{}", r.stderr);
    // Converting into a missing folder: the error, and no warning first.
    let src = dir.path("src.dt");
    check(["convert", p(&valid("safetensors-0.8.0/all_dtypes.safetensors")), p(&src), "--checksum"], 0);
    let r = check(["convert", p(&src), p(&dir.path("nowhere/out.safetensors"))], 2);
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
}

#[test]
fn help_says_what_each_argument_is() {
    let out = check(["decrypt", "--help"], 0).stdout;
    assert!(!out.contains("The file to convert") && out.contains("The encrypted file to decrypt"), "{out}");
    let out = check(["sign", "--help"], 0).stdout;
    assert!(out.contains("--with <KEY> <FILE>"), "{out}");
    let out = check(["convert", "--help"], 0).stdout;
    assert!(out.contains("<IN> <OUT>"), "{out}");
    for help in ["-h", "--help"] {
        let out = check([help], 0).stdout;
        assert!(out.lines().take(2).collect::<String>().contains("bintensors"), "{out}");
    }
}

#[test]
fn inspect_counts_parameters_for_people() {
    let dir = Scratch::new("first-hour-params");
    let f = dir.path("big.dt");
    // 1,234,567 parameters: 1.23 M (out's unit test covers 1.02 B).
    crate::write(
        &f,
        &[("w", deathtensors_io::format::Dtype::U8, &[1_234_567], vec![0u8; 1_234_567])],
        &Default::default(),
    );
    let out = check(["inspect", p(&f)], 0).stdout;
    assert!(out.contains("1.23 M parameters"), "{out}");
}

/// A file cut short says truncated, with the length its header needs and the
/// length it has, signed (before the signature block is parsed) or not,
/// encrypted or not.
#[test]
fn a_truncated_file_says_so_with_the_sizes() {
    let dir = Scratch::new("first-hour-truncated");
    let signed = signed_by_mallory(&dir);
    let plain = dir.path("plain.dt");
    check(["convert", p(&valid("safetensors-0.8.0/all_dtypes.safetensors")), p(&plain)], 0);
    check(["keygen", "--type", "symmetric", "--kid", "team", "--out", p(&dir.path("team.jwk"))], 0);
    let encrypted = dir.path("enc.dt");
    check(["encrypt", p(&plain), p(&encrypted), "--to", p(&dir.path("team.jwk"))], 0);
    for (file, cut, what) in [
        (&signed, 10, "truncated signed file"),
        (&signed, 200, "truncated signed file"),
        (&plain, 1, "the file is truncated"),
        (&encrypted, 100, "the file is truncated"),
    ] {
        let bytes = std::fs::read(file).unwrap();
        let short = dir.path("short.dt");
        std::fs::write(&short, &bytes[..bytes.len() - cut]).unwrap();
        let r = run(["inspect", p(&short), "--key", p(&dir.path("team.jwk"))]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        let (needs, has) = (bytes.len().to_string(), (bytes.len() - cut).to_string());
        assert!(r.stderr.contains(what) && r.stderr.contains(&needs) && r.stderr.contains(&has), "{cut}: {}", r.stderr);
        assert!(!r.stderr.contains("bad magic"), "{}", r.stderr);
    }
}

#[test]
fn inspect_says_what_it_checked_on_a_signed_file_with_changed_tensor_bytes() {
    // Issue 61: inspect said "verified, a key you trust" of a signed file
    // with 4 bytes flipped inside a tensor, where verify fails.
    let dir = Scratch::new("first-hour-tampered");
    let f = signed_by_mallory(&dir);
    let public = dir.path("mallory.pub.jwk");
    let reader = deathtensors_io::Reader::open(&f).unwrap();
    let name = reader.header().tensors().iter().find(|t| t.byte_len() >= 4).unwrap().name.to_string();
    let at = reader.tensor(&name).unwrap().file_offset as usize;
    drop(reader);
    let mut bytes = std::fs::read(&f).unwrap();
    for b in &mut bytes[at..at + 4] {
        *b ^= 0xff;
    }
    std::fs::write(&f, bytes).unwrap();
    let out = check(["inspect", p(&f), "--signer", p(&public)], 0).stdout;
    assert!(out.contains("header signature verified, a key you trust"), "{out}");
    assert!(!out.contains(": verified,"), "{out}");
    assert!(out.contains("no tensor byte was read (`deathtensors verify` checks every tensor)"), "{out}");
    let r = run(["verify", p(&f), "--signer", p(&public)]);
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    assert!(format!("{}{}", r.stdout, r.stderr).contains(&name), "{}{}", r.stdout, r.stderr);
}
