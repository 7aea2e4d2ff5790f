//! cryptotensors 0.2.3 files written by its own wheel (`testdata/cryptotensors`):
//! every layout (v1, chunked v2) and cipher opens with its JWK keys, the
//! signature is verified, the policy evaluated, and tampering is refused.

use std::path::PathBuf;

use deathtensors_io::{ErrorKind, KeyRing, ReadOptions, Reader};
use serde_json::Value;

use crate::{scratch, sha256_hex, testdata};

fn dir() -> PathBuf {
    testdata().join("cryptotensors")
}

fn keys() -> KeyRing {
    let mut k = KeyRing::new();
    k.add_jwk_file(dir().join("keys.json")).unwrap();
    k
}

fn expected() -> serde_json::Map<String, Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(dir().join("expected.json")).unwrap()).unwrap();
    v["tensors"].as_object().unwrap().clone()
}

const SAMPLES: &[&str] = &[
    "v1_aes128gcm",
    "v1_aes256gcm",
    "v1_chacha20poly1305",
    "v1_jku_aes256gcm",
    "v2_aes128gcm",
    "v2_aes256gcm",
    "v2_chacha20poly1305",
    "v2_policy_aes256gcm",
    "v2_partial_meta_chacha20poly1305",
];

#[test]
fn every_sample_reads_with_its_keys() {
    let want = expected();
    for name in SAMPLES {
        let path = dir().join(format!("{name}.safetensors"));
        let r = Reader::open_with(&path, ReadOptions { keys: keys(), ..ReadOptions::default() })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.is_cryptotensors() && r.is_encrypted() && r.can_decrypt(), "{name}");
        assert_eq!(r.signers().len(), 1, "{name}");
        for t in r.header().tensors() {
            let bytes = r.read(&t.name).unwrap_or_else(|e| panic!("{name}/{}: {e}", t.name));
            assert_eq!(sha256_hex(&bytes), want[t.name.as_str()]["sha256"].as_str().unwrap(), "{name}/{}", t.name);
            // Slices decrypt only what they need (v2) and agree with the whole.
            let n = bytes.len();
            if n > 10 {
                let mut part = vec![0u8; n - 9];
                r.read_range_into(&t.name, 5, &mut part).unwrap();
                assert_eq!(&part[..], &bytes[5..n - 4], "{name}/{}", t.name);
            }
        }
        r.verify_tags(|_| {}).unwrap();
        // Without keys the header opens, the data does not.
        let bare = Reader::open(&path).unwrap();
        assert!(bare.is_encrypted() && !bare.can_decrypt());
        let enc = bare.header().tensors().iter().find(|t| bare.is_tensor_encrypted(&t.name)).unwrap();
        assert!(matches!(bare.read(&enc.name).unwrap_err().kind(), ErrorKind::NoKey { .. }));
    }
}

#[test]
fn plain_tensors_of_partly_encrypted_files_are_unauthenticated() {
    let path = dir().join("v2_partial_meta_chacha20poly1305.safetensors");
    let r = Reader::open_with(&path, ReadOptions { keys: keys(), ..ReadOptions::default() }).unwrap();
    assert!(r.is_tensor_encrypted("big") && !r.is_tensor_encrypted("i64"));
    r.read("i64").unwrap();
    // A reader that requires a signature gets only what the signature covers.
    let strict = ReadOptions { keys: keys(), require_signature: true, ..ReadOptions::default() };
    let r = Reader::open_with(&path, strict).unwrap();
    r.read("big").unwrap();
    let e = r.read("i64").unwrap_err();
    assert!(e.to_string().contains("nothing in the file authenticates"), "{e}");
}

#[test]
fn policies_are_evaluated_against_the_input() {
    let path = dir().join("v2_policy_aes256gcm.safetensors");
    let header = Reader::open(&path).unwrap().header().metadata().unwrap()["__policy__"].clone();
    let policy: Value = serde_json::from_str(&header).unwrap();
    let local = policy["local"].as_str().unwrap();
    // The sample's local policy needs no input (cryptotensors passes none).
    assert!(local.contains("package model"), "{local}");
    Reader::open_with(&path, ReadOptions { keys: keys(), ..ReadOptions::default() }).unwrap();
}

#[test]
fn tampered_files_are_refused() {
    let tmp = scratch("ct-tamper");
    let src = dir().join("v2_aes256gcm.safetensors");
    let bytes = std::fs::read(&src).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let open = |b: &[u8], name: &str| {
        let p = tmp.join(name);
        std::fs::write(&p, b).unwrap();
        Reader::open_with(&p, ReadOptions { keys: keys(), ..ReadOptions::default() })
    };
    // A byte of the signed header: one base64 digit of a wrapped key's nonce.
    let mut b = bytes.clone();
    let at = b.windows(11).position(|w| w == b"key_iv\\\":\\\"").expect("an __encryption__ entry") + 11;
    b[at] = if b[at] == b'A' { b'B' } else { b'A' };
    let e = open(&b, "header.safetensors").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::BadSignature { .. }), "{e}");
    // A byte of the data: the chunk's tag fails, nothing is returned.
    let mut b = bytes.clone();
    b[8 + n + 100] ^= 1;
    let r = open(&b, "data.safetensors").unwrap();
    let hit = r.header().tensors().iter().find(|t| t.data_offsets.0 <= 100 && 100 < t.data_offsets.1).unwrap();
    let e = r.read(&hit.name).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Decrypt { .. }), "{e}");
    // The wrong master key.
    let mut k = KeyRing::new();
    let mut jwks: Value = serde_json::from_str(&std::fs::read_to_string(dir().join("keys.json")).unwrap()).unwrap();
    for key in jwks["keys"].as_array_mut().unwrap() {
        if key["kty"] == "oct" {
            key["k"] = Value::String("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".into());
        }
    }
    k.add_jwk_value(&jwks, None).unwrap();
    let e = Reader::open_with(&src, ReadOptions { keys: k, ..ReadOptions::default() }).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Decrypt { .. }), "{e}");
}

#[test]
fn a_malformed_encryption_entry_names_its_tensor() {
    let tmp = scratch("ct-entry");
    let bytes = std::fs::read(dir().join("v2_aes256gcm.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let meta = header["__metadata__"].as_object_mut().unwrap();
    let mut entries: Value = serde_json::from_str(meta["__encryption__"].as_str().unwrap()).unwrap();
    let (name, entry) = entries.as_object_mut().unwrap().iter_mut().next().unwrap();
    let name = name.clone();
    // One chunk's tag short.
    let tags = entry["tags"].as_str().unwrap().to_string();
    entry["tags"] = Value::String(tags[..tags.len() - 24].to_string());
    meta.insert("__encryption__".into(), Value::String(entries.to_string()));
    let json = serde_json::to_vec(&header).unwrap();
    let mut b = (json.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(&json);
    b.extend_from_slice(&bytes[8 + n..]);
    let p = tmp.join("entry.safetensors");
    std::fs::write(&p, &b).unwrap();
    let e = Reader::open_with(&p, ReadOptions { keys: keys(), ..ReadOptions::default() }).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(&format!("tensor {name:?}")) && text.contains("bad tags"), "{text}");
}

#[test]
fn a_missing_key_is_named_alone() {
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(dir().join("keys.json")).unwrap()).unwrap();
    let only = |kty: &str| {
        let mut set = jwks.clone();
        set["keys"].as_array_mut().unwrap().retain(|k| k["kty"] == kty);
        let mut ring = KeyRing::new();
        ring.add_jwk_value(&set, None).unwrap();
        Reader::open_with(dir().join("v2_aes256gcm.safetensors"), ReadOptions { keys: ring, ..ReadOptions::default() })
            .unwrap_err()
    };
    let e = only("oct");
    assert!(matches!(e.kind(), ErrorKind::NoKey { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("Ed25519 key") && !text.contains("symmetric key"), "{text}");
    let text = only("okp").to_string();
    assert!(text.contains("symmetric key") && !text.contains("Ed25519 key"), "{text}");
}

#[test]
fn the_signature_is_checked_with_a_trusted_key_alone() {
    // cryptotensors names its signer by key id only: a trusted public key
    // checks the signature without the master key, or any key at all.
    let signer = keys().verifying_keys()[0].1 .0;
    let trusted = vec![deathtensors_io::VerifyingKey(signer)];
    let path = dir().join("v2_aes256gcm.safetensors");
    let r =
        Reader::open_with(&path, ReadOptions { trusted_signers: trusted.clone(), ..ReadOptions::default() }).unwrap();
    assert_eq!(r.signers(), &trusted[..]);
    assert!(!r.can_decrypt());
    // With the keys too, the same signer.
    let r = Reader::open_with(&path, ReadOptions { keys: keys(), trusted_signers: trusted, ..ReadOptions::default() })
        .unwrap();
    assert!(r.can_decrypt() && r.signers().len() == 1);

    // A key that did not sign it: untrusted, naming the file's key id.
    let other = deathtensors_io::SigningKey::generate().verifying_key();
    let e =
        Reader::open_with(&path, ReadOptions { trusted_signers: vec![other], ..ReadOptions::default() }).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::UntrustedSigner { .. }), "{e}");
    assert!(e.to_string().contains("sign-ed25519"), "{e}");
    // A signature required, and no key to check it with: said so, not "unsigned".
    let e = Reader::open_with(&path, ReadOptions { require_signature: true, ..ReadOptions::default() }).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::SignerKeyNeeded { .. }), "{e}");
    assert!(e.to_string().contains("sign-ed25519") && e.is_trust(), "{e}");

    // A changed header fails with the trusted key as with the signing key.
    let mut bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    let at = 8 + header.find("\"shape\":[").unwrap() + "\"shape\":[".len();
    assert!(bytes[at].is_ascii_digit());
    bytes[at] = if bytes[at] == b'9' { b'8' } else { bytes[at] + 1 };
    let dir = scratch("ct-trusted");
    let p = dir.join("changed.safetensors");
    std::fs::write(&p, &bytes).unwrap();
    let trusted = vec![deathtensors_io::VerifyingKey(signer)];
    let e = Reader::open_with(&p, ReadOptions { trusted_signers: trusted, ..ReadOptions::default() }).unwrap_err();
    assert!(e.is_trust() || e.is_invalid_file(), "{e}");
}
