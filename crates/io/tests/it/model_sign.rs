//! OpenSSF model signing of directories in Rust: sign, verify, tamper.
//! (The interop with the real `model-signing` package is in the Python
//! tests, `test_model_sign.py`.)

use std::path::{Path, PathBuf};

use base64::Engine as _;
use deathtensors_io::{
    sign_model, verify_bundle, verify_model, EcPublicKey, EcSigningKey, ErrorKind, ModelSigner, ModelVerifier,
    SignModelOptions,
};
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING};

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dt-model-sign-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// A new key pair as PEM files: (private, public).
fn key_files(dir: &Path, p384: bool) -> (PathBuf, PathBuf) {
    let rng = ring::rand::SystemRandom::new();
    let alg = if p384 { &ECDSA_P384_SHA384_ASN1_SIGNING } else { &ECDSA_P256_SHA256_ASN1_SIGNING };
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    let private = dir.join(if p384 { "k384.pem" } else { "k256.pem" });
    std::fs::write(&private, pem("PRIVATE KEY", pkcs8.as_ref())).unwrap();
    let key = EcSigningKey::from_pem_file(&private).unwrap();
    let public = private.with_extension("pub");
    std::fs::write(&public, key.public().to_pem()).unwrap();
    (private, public)
}

fn model(root: &Path) -> PathBuf {
    let dir = root.join("model");
    std::fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    std::fs::write(dir.join("config.json"), b"{\"hidden\": 8}").unwrap();
    std::fs::write(dir.join("weights.bin"), vec![7u8; 300_000]).unwrap();
    std::fs::write(dir.join("nested/deeper/vocab.txt"), b"a\nb\n").unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::write(dir.join(".git/HEAD"), b"ref").unwrap();
    dir
}

fn mismatch(err: &deathtensors_io::Error) -> &str {
    match err.kind() {
        ErrorKind::ModelMismatch(m) => m,
        other => panic!("not a mismatch: {other:?} ({err})"),
    }
}

fn refused(err: &deathtensors_io::Error) -> &str {
    match err.kind() {
        ErrorKind::ModelSignature(m) => m,
        other => panic!("not a refused signature: {other:?} ({err})"),
    }
}

#[test]
fn signs_and_verifies_on_both_curves_and_the_public_pem_is_cryptography_s() {
    for p384 in [false, true] {
        let root = temp(if p384 { "p384" } else { "p256" });
        let dir = model(&root);
        let (private, public) = key_files(&root, p384);
        let signer = ModelSigner::Key(EcSigningKey::from_pem_file(&private).unwrap());
        let sig = dir.join("model.sig");
        let signed = sign_model(&dir, &signer, &sig, &SignModelOptions::default()).unwrap();
        let names: Vec<&str> = signed.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["config.json", "nested/deeper/vocab.txt", "weights.bin"]);
        assert!(signed.ignore_paths.iter().any(|p| p == "model.sig"));
        let verifier = ModelVerifier::Key(EcPublicKey::from_pem_file(&public).unwrap());
        assert_eq!(verify_model(&dir, &verifier, &sig).unwrap(), signed);
        // The PEM is 64 columns, with a final newline: the hint hashes it.
        let text = std::fs::read_to_string(&public).unwrap();
        assert!(text.lines().all(|l| l.len() <= 64) && text.ends_with("-----END PUBLIC KEY-----\n"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}

#[test]
fn the_bundle_layout_is_model_signing_s() {
    let root = temp("layout");
    let dir = model(&root);
    let (private, public) = key_files(&root, false);
    let sig = root.join("outside.sig");
    let signer = ModelSigner::Key(EcSigningKey::from_pem_file(&private).unwrap());
    sign_model(&dir, &signer, &sig, &SignModelOptions::default()).unwrap();
    let bundle: serde_json::Value = serde_json::from_slice(&std::fs::read(&sig).unwrap()).unwrap();
    assert_eq!(bundle["mediaType"], "application/vnd.dev.sigstore.bundle.v0.3+json");
    let hint = EcPublicKey::from_pem_file(&public).unwrap().hint();
    assert_eq!(bundle["verificationMaterial"]["publicKey"]["hint"], hint.as_str());
    let env = &bundle["dsseEnvelope"];
    assert_eq!(env["payloadType"], "application/vnd.in-toto+json");
    let payload = base64::engine::general_purpose::STANDARD.decode(env["payload"].as_str().unwrap()).unwrap();
    let statement: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(statement["predicateType"], "https://model_signing/signature/v1.0");
    assert_eq!(statement["subject"][0]["name"], "model");
    let resources = statement["predicate"]["resources"].as_array().unwrap();
    let mut concat = Vec::new();
    for r in resources {
        assert_eq!(r["algorithm"], "sha256");
        let hex = r["digest"].as_str().unwrap();
        concat.extend((0..32).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()));
    }
    let subject = ring::digest::digest(&ring::digest::SHA256, &concat);
    let subject_hex: String = subject.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(statement["subject"][0]["digest"]["sha256"], subject_hex.as_str());
    let weights = resources.iter().find(|r| r["name"] == "weights.bin").unwrap();
    let digest = ring::digest::digest(&ring::digest::SHA256, &vec![7u8; 300_000]);
    let digest_hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(weights["digest"], digest_hex.as_str());
    let ser = &statement["predicate"]["serialization"];
    assert_eq!(ser["method"], "files");
    assert_eq!(ser["hash_type"], "sha256");
    assert_eq!(ser["allow_symlinks"], false);
    // Outside the directory: only the git paths are ignored.
    let mut ignored: Vec<&str> = ser["ignore_paths"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    ignored.sort();
    assert_eq!(ignored, [".git", ".gitattributes", ".github", ".gitignore"]);
    // The signature is ECDSA P-256 SHA-256 (DER) over DSSE's PAE.
    let pae =
        [format!("DSSEv1 28 application/vnd.in-toto+json {} ", payload.len()).into_bytes(), payload.clone()].concat();
    let sig_der =
        base64::engine::general_purpose::STANDARD.decode(env["signatures"][0]["sig"].as_str().unwrap()).unwrap();
    let key = EcSigningKey::from_pem_file(&private).unwrap();
    let spki = rustls_der_point(&key.public().to_pem());
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_ASN1, &spki[26..])
        .verify(&pae, &sig_der)
        .unwrap();
    std::fs::remove_dir_all(&root).unwrap();
}

/// The DER inside a PEM.
fn rustls_der_point(pem_text: &str) -> Vec<u8> {
    let body: String = pem_text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD.decode(body).unwrap()
}

#[test]
fn tampering_is_refused_naming_the_file_or_the_reason() {
    let root = temp("tamper");
    let (private, public) = key_files(&root, false);
    let (_, other_public) = key_files(&root, true);
    let signer = ModelSigner::Key(EcSigningKey::from_pem_file(&private).unwrap());
    let verifier = ModelVerifier::Key(EcPublicKey::from_pem_file(&public).unwrap());
    let fresh = |name: &str| {
        let d = root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let dir = model(&d);
        sign_model(&dir, &signer, &dir.join("model.sig"), &SignModelOptions::default()).unwrap();
        dir
    };

    let dir = fresh("changed");
    std::fs::write(dir.join("weights.bin"), vec![8u8; 300_000]).unwrap();
    let e = verify_model(&dir, &verifier, &dir.join("model.sig")).unwrap_err();
    assert!(mismatch(&e).contains("changed (SHA-256 differs): weights.bin"), "{e}");

    let dir = fresh("added");
    std::fs::write(dir.join("nested/new.txt"), b"x").unwrap();
    std::fs::write(dir.join(".gitignore"), b"x").unwrap(); // ignored
    let e = verify_model(&dir, &verifier, &dir.join("model.sig")).unwrap_err();
    assert_eq!(mismatch(&e), "not in the signature: nested/new.txt");

    let dir = fresh("removed");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let e = verify_model(&dir, &verifier, &dir.join("model.sig")).unwrap_err();
    assert_eq!(mismatch(&e), "missing: config.json");

    let dir = fresh("renamed");
    std::fs::rename(dir.join("config.json"), dir.join("config2.json")).unwrap();
    let e = verify_model(&dir, &verifier, &dir.join("model.sig")).unwrap_err();
    assert_eq!(mismatch(&e), "missing: config.json; not in the signature: config2.json");

    let dir = fresh("byte");
    let sig = dir.join("model.sig");
    let mut bytes = std::fs::read(&sig).unwrap();
    let at = bytes.windows(9).position(|w| w == b"\"payload\"").unwrap() + 20;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    std::fs::write(&sig, &bytes).unwrap();
    let e = verify_model(&dir, &verifier, &sig).unwrap_err();
    assert!(refused(&e).contains("does not verify"), "{e}");
    std::fs::write(&sig, b"{not json").unwrap();
    let e = verify_model(&dir, &verifier, &sig).unwrap_err();
    assert!(refused(&e).contains("not a Sigstore bundle"), "{e}");

    let dir = fresh("wrong-key");
    let wrong = ModelVerifier::Key(EcPublicKey::from_pem_file(&other_public).unwrap());
    let e = verify_model(&dir, &wrong, &dir.join("model.sig")).unwrap_err();
    assert!(refused(&e).contains("signed by another key"), "{e}");
    // Without its hint, the signature itself must fail.
    let sig = dir.join("model.sig");
    let text = std::fs::read_to_string(&sig).unwrap();
    let start = text.find("\"hint\":\"").unwrap() + 8;
    let no_hint = format!("{}{}", &text[..start], &text[start + 64..]);
    std::fs::write(&sig, no_hint).unwrap();
    verify_model(&dir, &verifier, &sig).unwrap();
    let e = verify_model(&dir, &wrong, &sig).unwrap_err();
    assert!(refused(&e).contains("does not verify"), "{e}");

    let a = fresh("dir-a");
    let b = root.join("dir-b");
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(b.join("config.json"), b"{}").unwrap();
    let e = verify_model(&b, &verifier, &a.join("model.sig")).unwrap_err();
    let m = mismatch(&e);
    assert!(
        m.contains("changed (SHA-256 differs): config.json") && m.contains("missing: nested/deeper/vocab.txt"),
        "{m}"
    );

    // The statement alone needs no directory.
    assert_eq!(verify_bundle(&verifier, &a.join("model.sig")).unwrap().files.len(), 3);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn keys_it_does_not_take_are_refused_with_what_it_takes() {
    let root = temp("keys");
    let jwk = root.join("k.jwk");
    std::fs::write(&jwk, b"{\"kty\":\"OKP\",\"crv\":\"Ed25519\"}").unwrap();
    let e = EcSigningKey::from_pem_file(&jwk).unwrap_err();
    assert!(e.to_string().contains("ECDSA key on P-256 or P-384 in PEM"), "{e}");
    let e = EcPublicKey::from_pem_file(&jwk).unwrap_err();
    assert!(e.to_string().contains("ECDSA key on P-256 or P-384 in PEM"), "{e}");
    std::fs::remove_dir_all(&root).unwrap();
}
