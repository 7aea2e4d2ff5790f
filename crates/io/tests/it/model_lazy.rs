//! Lazy per-tensor verification of a signed model directory
//! (`open_signed_model` + `ReadOptions::signed_model`): each file's head is
//! checked on open and each tensor as it is read; the attacks of
//! docs/SECURITY.md's design, one each.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use deathtensors_io::format::{Dtype, Format, TensorSpec};
use deathtensors_io::{
    open_signed_model, save, sign_model, EcPublicKey, EcSigningKey, ErrorKind, ModelSigner, ModelVerifier, ReadOptions,
    Reader, ShardedReader, SignModelOptions, WriteOptions,
};
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dt-model-lazy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A P-256 key pair: (signer, verifier).
fn keys(dir: &Path) -> (ModelSigner, ModelVerifier) {
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &ring::rand::SystemRandom::new()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(pkcs8.as_ref());
    let path = dir.join("key.pem");
    std::fs::write(&path, format!("-----BEGIN PRIVATE KEY-----\n{b64}\n-----END PRIVATE KEY-----\n")).unwrap();
    let key = EcSigningKey::from_pem_file(&path).unwrap();
    let public = dir.join("key.pub");
    std::fs::write(&public, key.public().to_pem()).unwrap();
    (ModelSigner::Key(key), ModelVerifier::Key(EcPublicKey::from_pem_file(&public).unwrap()))
}

fn tensor(i: u8, n: usize) -> Vec<u8> {
    (0..n).map(|k| (k as u8).wrapping_mul(31).wrapping_add(i)).collect()
}

/// A model directory: a two-shard safetensors checkpoint with its index, a
/// deathtensors file with digests, a config. Returns it, signed.
fn model(root: &Path, signer: &ModelSigner) -> PathBuf {
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let st = WriteOptions { format: Format::Safetensors, ..WriteOptions::default() };
    let (a, b, c) = (tensor(1, 4096), tensor(2, 4096), tensor(3, 1000));
    let spec = |name: &str, n: u64| TensorSpec::new(name, Dtype::U8, vec![n]);
    save(dir.join("model-00001-of-00002.safetensors"), vec![(spec("a", 4096), &a[..]), (spec("b", 4096), &b[..])], &st)
        .unwrap();
    save(dir.join("model-00002-of-00002.safetensors"), vec![(spec("c", 1000), &c[..])], &st).unwrap();
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        r#"{"metadata": {"total_size": 9192}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let checked = WriteOptions { checksum: true, ..WriteOptions::default() };
    save(dir.join("extra.dt"), vec![(spec("e", 4096), &a[..])], &checked).unwrap();
    std::fs::write(dir.join("config.json"), b"{\"hidden\": 8}").unwrap();
    sign_model(&dir, signer, &dir.join("model.sig"), &SignModelOptions::default()).unwrap();
    dir
}

/// A fresh signed model directory: (scratch root, its verifier, the model).
fn signed(name: &str) -> (PathBuf, ModelVerifier, PathBuf) {
    let root = temp(name);
    let (signer, verifier) = keys(&root);
    let dir = model(&root, &signer);
    (root, verifier, dir)
}

fn with_model(dir: &Path, verifier: &ModelVerifier) -> ReadOptions {
    let model = open_signed_model(dir, verifier, &dir.join("model.sig")).unwrap();
    ReadOptions { signed_model: Some(Arc::new(model)), ..ReadOptions::default() }
}

fn mismatch(err: &deathtensors_io::Error) -> String {
    match err.kind() {
        ErrorKind::ModelMismatch(m) => m.clone(),
        other => panic!("not a model mismatch: {other:?} ({err})"),
    }
}

#[test]
fn an_untouched_model_loads_every_tensor_checked() {
    let (root, verifier, dir) = signed("clean");
    let options = with_model(&dir, &verifier);
    let shard = Reader::open_with(dir.join("model-00001-of-00002.safetensors"), options.clone()).unwrap();
    assert!(shard.checked_reads());
    assert_eq!(shard.read("b").unwrap(), tensor(2, 4096));
    let mut part = vec![0u8; 10];
    shard.read_range_into("a", 100, &mut part).unwrap();
    assert_eq!(part, tensor(1, 4096)[100..110]);
    // A file whose header has digests: the head commits to them.
    let extra = Reader::open_with(dir.join("extra.dt"), options.clone()).unwrap();
    assert_eq!(extra.read("e").unwrap(), tensor(1, 4096));
    // The sharded checkpoint through its index, checked whole.
    let sharded = ShardedReader::open_with(dir.join("model.safetensors.index.json"), options).unwrap();
    assert_eq!(sharded.read("c").unwrap(), tensor(3, 1000));
    // Windows refuses to remove files still open.
    drop((shard, extra, sharded));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_changed_tensor_byte_is_refused_when_that_tensor_is_read() {
    let (root, verifier, dir) = signed("byte");
    let path = dir.join("model-00001-of-00002.safetensors");
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1; // a byte of "b", the last tensor
    bytes[last] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let shard = Reader::open_with(&path, with_model(&dir, &verifier)).unwrap();
    // The other tensor reads: only what is read is checked.
    assert_eq!(shard.read("a").unwrap(), tensor(1, 4096));
    let e = shard.read("b").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorDigestMismatch { .. }), "{e}");
    let mut part = vec![0u8; 10];
    assert!(shard.read_range_into("b", 0, &mut part).is_err());
    // Windows refuses to remove files still open.
    drop(shard);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_changed_header_is_refused_on_open() {
    let (root, verifier, dir) = signed("header");
    let path = dir.join("model-00001-of-00002.safetensors");
    // Swap the two tensors' offsets: the same length, each read would
    // return the other's bytes.
    let mut bytes = std::fs::read(&path).unwrap();
    let json_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let json = String::from_utf8(bytes[8..8 + json_len].to_vec()).unwrap();
    let swapped =
        json.replacen("[0,4096]", "[X]", 1).replacen("[4096,8192]", "[0,4096]", 1).replacen("[X]", "[4096,8192]", 1);
    assert!(json != swapped && json.len() == swapped.len(), "the header names both ranges: {json}");
    bytes[8..8 + json_len].copy_from_slice(swapped.as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    if let Err(e) = Reader::open(&path) {
        panic!("a valid file, just not the signed one: {e}");
    }
    let e = Reader::open_with(&path, with_model(&dir, &verifier)).unwrap_err();
    assert!(mismatch(&e).contains("header differs from the signed one"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_renamed_or_unlisted_file_is_refused_on_open() {
    let (root, verifier, dir) = signed("renamed");
    let options = with_model(&dir, &verifier);
    // Shards swapped by name: each is a valid file of the model.
    let (one, two) = (dir.join("model-00001-of-00002.safetensors"), dir.join("model-00002-of-00002.safetensors"));
    let tmp = dir.join("tmp");
    std::fs::rename(&one, &tmp).unwrap();
    std::fs::rename(&two, &one).unwrap();
    std::fs::rename(&tmp, &two).unwrap();
    let e = Reader::open_with(&one, options.clone()).unwrap_err();
    assert!(mismatch(&e).contains("header differs"), "{e}");
    // A file the statement does not list.
    std::fs::copy(dir.join("extra.dt"), dir.join("added.dt")).unwrap();
    let e = Reader::open_with(dir.join("added.dt"), options.clone()).unwrap_err();
    assert!(mismatch(&e).contains("added.dt: the model signature does not list this file"), "{e}");
    // A file outside the directory.
    let outside = root.join("outside.dt");
    std::fs::copy(dir.join("extra.dt"), &outside).unwrap();
    let e = Reader::open_with(&outside, options.clone()).unwrap_err();
    assert!(mismatch(&e).contains("not inside the signed model directory"), "{e}");
    // A changed index (read whole) is refused.
    let index = dir.join("model.safetensors.index.json");
    let text = std::fs::read_to_string(&index).unwrap().replace("9192", "9193");
    std::fs::write(&index, text).unwrap();
    let e = ShardedReader::open_with(&index, options).unwrap_err();
    assert!(mismatch(&e).contains("changed since it was signed"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn a_statement_without_commitments_is_refused_and_stripping_them_breaks_the_signature() {
    let (root, verifier, dir) = signed("stripped");
    let sig = dir.join("model.sig");
    let mut bundle: serde_json::Value = serde_json::from_slice(&std::fs::read(&sig).unwrap()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = b64.decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap()).unwrap();
    let mut statement: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert!(statement["predicate"]["deathtensors"]["files"].as_array().unwrap().len() == 3);
    statement["predicate"].as_object_mut().unwrap().remove("deathtensors");
    bundle["dsseEnvelope"]["payload"] = b64.encode(serde_json::to_vec(&statement).unwrap()).into();
    std::fs::write(&sig, serde_json::to_vec(&bundle).unwrap()).unwrap();
    let e = open_signed_model(&dir, &verifier, &sig).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::ModelSignature(_)), "{e}");
    assert!(e.to_string().contains("does not verify"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}
