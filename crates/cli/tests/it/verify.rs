//! `verify`: footers and per-tensor digests, failures named precisely.

use deathtensors_io::format::Dtype;
use deathtensors_io::{Reader, WriteOptions};
use serde_json::json;

use crate::{assert_one_error_line, check, f32s, json, valid, write, Scratch};

#[test]
fn checksummed_fixtures_verify() {
    for name in ["all_dtypes_checksum.deathtensors", "all_dtypes_zstd_checksum.deathtensors"] {
        let path = valid(&format!("deathtensors-0.3.0/{name}"));
        let r = check(["verify".as_ref(), path.as_os_str()], 0);
        assert!(r.stdout.contains(": ok: SHA-256 footer over bytes 24.."), "{}", r.stdout);
        let doc = json(["verify".as_ref(), path.as_os_str()], 0);
        assert_eq!(doc["ok"], true);
        assert_eq!(doc["checked"]["footer"], "ok");
        assert_eq!(doc["failures"], json!([]));
    }
}

#[test]
fn a_flipped_bit_fails_the_footer() {
    let path = valid("deathtensors-0.3.0/bad_checksum_bitflip.deathtensors");
    let r = check(["verify".as_ref(), path.as_os_str()], 1);
    assert!(r.stdout.contains("FAILED: SHA-256 footer mismatch over file bytes 24..3284"), "{}", r.stdout);
    assert_one_error_line(&r, &["bad_checksum_bitflip.deathtensors", "the SHA-256 footer does not match"]);
    let doc = json(["verify".as_ref(), path.as_os_str()], 1);
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["checked"]["footer"], "mismatch");
    assert_eq!(doc["failures"][0]["tensor"], serde_json::Value::Null);
    assert_eq!(doc["failures"][0]["range"], json!([24, 3284]));
}

#[test]
fn a_corrupt_tensor_is_named_with_its_byte_range() {
    let dir = Scratch::new("verify-corrupt");
    let path = dir.path("model.dt");
    let tensors = [
        ("a", Dtype::F32, &[4u64][..], f32s(&[1.0, 2.0, 3.0, 4.0])),
        ("b", Dtype::F32, &[2u64][..], f32s(&[5.0, 6.0])),
    ];
    write(&path, &tensors, &WriteOptions { checksum: true, ..WriteOptions::default() });
    check(["verify".as_ref(), path.as_os_str()], 0);

    let offset = Reader::open(&path).unwrap().tensor("b").unwrap().file_offset;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + 1] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let r = check(["verify".as_ref(), path.as_os_str()], 1);
    let range = format!("(file bytes {offset}..{})", offset + 8);
    assert!(r.stdout.contains(&format!("FAILED: tensor \"b\" {range} is corrupt")), "{}", r.stdout);
    assert!(r.stdout.contains("FAILED: SHA-256 footer mismatch"), "{}", r.stdout);
    assert!(!r.stdout.contains("tensor \"a\""), "{}", r.stdout);
    assert_one_error_line(&r, &["model.dt", "tensor \"b\" and the SHA-256 footer do not match"]);

    let doc = json(["verify".as_ref(), path.as_os_str()], 1);
    assert_eq!(doc["checked"]["tensors_verified"], 2);
    let failures = doc["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0]["tensor"], "b");
    assert_eq!(failures[0]["range"], json!([offset, offset + 8]));
}

#[test]
fn a_file_without_checksum_fails_unless_allowed() {
    let path = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let r = check(["verify".as_ref(), path.as_os_str()], 1);
    assert_one_error_line(&r, &["all_dtypes.safetensors", "no checksum to verify", "--allow-missing"]);
    assert_eq!(r.stdout, "");
    let r = check(["verify".as_ref(), "--allow-missing".as_ref(), path.as_os_str()], 0);
    assert!(r.stdout.contains("no checksum to verify (allowed by --allow-missing)"), "{}", r.stdout);
    let doc = json(["verify".as_ref(), "--allow-missing".as_ref(), path.as_os_str()], 0);
    assert_eq!(doc["checked"]["footer"], "absent");
    assert_eq!(doc["unverified"].as_array().unwrap().len(), 18);
}

/// Each `--signer` key file is read once (issue 59: verify opened it twice,
/// once for the open's requirement and once to name the signers). The key
/// is served through a FIFO that one writer opens once: a second open by
/// the command would wait for a writer forever, and the test fails on its
/// deadline instead.
#[cfg(unix)]
#[test]
fn verify_reads_each_signer_key_file_once() {
    use std::io::Write;
    let dir = Scratch::new("signer-once");
    let (key, public) = (dir.path("k.jwk"), dir.path("k.pub.jwk"));
    check(
        [
            "keygen".as_ref(),
            "--type".as_ref(),
            "ed25519".as_ref(),
            "--out".as_ref(),
            key.as_os_str(),
            "--public-out".as_ref(),
            public.as_os_str(),
        ],
        0,
    );
    let file = dir.path("m.dt");
    write(
        &file,
        &[("w", Dtype::F32, &[2], f32s(&[1.0, 2.0]))],
        &WriteOptions { checksum: true, ..WriteOptions::default() },
    );
    check(["sign".as_ref(), file.as_os_str(), "--with".as_ref(), key.as_os_str()], 0);
    let fifo = dir.path("signer.fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let jwk = std::fs::read(&public).unwrap();
    let writer_path = fifo.clone();
    let writer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new().write(true).open(&writer_path).unwrap();
        f.write_all(&jwk).unwrap();
    });
    let mut child = crate::command()
        .args(["verify".as_ref(), file.as_os_str(), "--signer".as_ref(), fifo.as_os_str()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("verify waited on the signer's key file a second time (it opened it more than once)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    writer.join().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("signed by"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// `verify --json` has one shape whatever it verifies: a file, a sharded
/// checkpoint, a collection (and `verify-model` a model directory, tested
/// with the model-signing package in Python), passing or failing.
#[test]
fn every_kind_reports_in_one_shape() {
    const KEYS: [&str; 10] =
        ["checked", "error", "failures", "kind", "ok", "path", "signer_keys", "signers", "unverified", "verdict"];
    let keys = |doc: &serde_json::Value| {
        let mut k: Vec<String> = doc.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let file = valid("deathtensors-0.3.0/sdist-samples/sharded_model.deathtensors");
    let hf = valid("safetensors-0.8.0/sharded/model.safetensors.index.json");
    let s = crate::Scratch::new("verify-shape");
    let rows = s.path("rows.dt");
    let data = [0u8; 64];
    deathtensors_io::save(
        &rows,
        vec![(deathtensors_io::format::TensorSpec::new("emb", deathtensors_io::format::Dtype::F32, [4, 4]), &data[..])],
        &deathtensors_io::WriteOptions::default(),
    )
    .unwrap();
    let blob = s.path("emb");
    check(["blob", "create", blob.to_str().unwrap(), "--from", rows.to_str().unwrap(), "--block-rows", "2"], 0);
    let one = valid("safetensors-0.8.0/all_dtypes.safetensors");
    let cases: [(&std::path::Path, &str, i32); 5] =
        [(&file, "sharded", 0), (&hf, "sharded", 1), (&blob, "collection", 0), (&rows, "file", 1), (&one, "file", 1)];
    for (path, kind, code) in cases {
        let doc = json(["verify".as_ref(), path.as_os_str()], code);
        assert_eq!(keys(&doc), KEYS, "{}: {doc}", path.display());
        assert_eq!(doc["kind"], kind, "{}: {doc}", path.display());
        assert_eq!(doc["ok"], code == 0, "{}: {doc}", path.display());
    }
}
