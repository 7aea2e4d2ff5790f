//! Known-answer vectors of `testdata/crypto`, made by `reference.py`, an
//! implementation of `docs/FORMAT.md` sections 10 and 11 written from the
//! spec alone: every vector file opens with the keys of `keys.json` and
//! reads back to its expected plaintext, and the sans-IO pieces of
//! `deathtensors-format` (nonces, associated data, labels, the signed
//! message) give the same bytes as the oracle.

use std::path::PathBuf;
use std::sync::Arc;

use deathtensors_format::{
    chunk_count, chunk_nonce, chunk_range, signed_message, wrap_info, ChunkAad, Label, Recipient, TAG_LEN, WRAP_AAD,
};
use deathtensors_io::{KeyRing, Passphrase, ReadOptions, Reader, VerifyingKey};
use serde_json::Value;

fn dir() -> PathBuf {
    crate::testdata().join("crypto")
}

fn vectors() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("vectors.json")).unwrap()).unwrap()
}

fn hex(v: &Value) -> Vec<u8> {
    let s = v.as_str().unwrap_or_else(|| panic!("not a hex string: {v}"));
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn array<const N: usize>(v: &Value) -> [u8; N] {
    hex(v).try_into().unwrap()
}

fn range(bytes: &[u8], (a, b): (u64, u64)) -> &[u8] {
    &bytes[a as usize..b as usize]
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys of `keys.json` plus the passphrase of `vectors.json`; the
/// signers of the file, trusted, if it is signed.
fn options(v: &Value, file: &Value) -> ReadOptions {
    let mut keys = KeyRing::new();
    keys.add_jwk_file(dir().join(v["keys"].as_str().unwrap())).unwrap();
    keys.add_passphrase(Arc::new(Passphrase::new(v["passphrase"].as_str().unwrap()).unwrap()));
    let trusted_signers = match file.get("signers") {
        Some(list) => list.as_array().unwrap().iter().map(|k| VerifyingKey(array(k))).collect(),
        None => Vec::new(),
    };
    let known: Vec<VerifyingKey> = keys.verifying_keys().iter().map(|(_, k)| *k).collect();
    assert!(trusted_signers.iter().all(|k| known.contains(k)), "keys.json lacks a signer");
    ReadOptions { keys, trusted_signers, ..ReadOptions::default() }
}

#[test]
fn every_vector_file_reads_back_to_its_plaintext() {
    let v = vectors();
    let files = v["files"].as_array().unwrap();
    assert!(files.len() >= 3);
    for file in files {
        let name = file["file"].as_str().unwrap();
        let path = dir().join(name);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(crate::sha256_hex(&bytes), file["file_sha256"].as_str().unwrap(), "{name}");
        let r = Reader::open_with(&path, options(&v, file)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(r.is_encrypted() && r.can_decrypt(), "{name}");
        assert_eq!(r.signatures().len(), file.get("signers").map_or(0, |s| s.as_array().unwrap().len()), "{name}");
        let header = r.header();
        let expected = file["tensors"].as_array().unwrap();
        assert_eq!(header.len(), expected.len(), "{name}");
        for t in expected {
            let tensor = t["name"].as_str().unwrap();
            assert_eq!(header.position(tensor), Some(t["index"].as_u64().unwrap() as usize), "{name} {tensor}");
            let plain = r.read(tensor).unwrap_or_else(|e| panic!("{name} {tensor}: {e}"));
            assert_eq!(plain.len() as u64, t["len"].as_u64().unwrap(), "{name} {tensor}");
            assert_eq!(crate::sha256_hex(&plain), t["plaintext_sha256"].as_str().unwrap(), "{name} {tensor}");
            if let Some(p) = t.get("plaintext") {
                assert_eq!(plain, hex(p), "{name} {tensor}");
            }
        }
        if r.has_footer() {
            r.verify().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn headers_hold_the_vectors_values() {
    let v = vectors();
    for file in v["files"].as_array().unwrap() {
        let name = file["file"].as_str().unwrap();
        let r = Reader::open(dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let e = r.header().encryption().unwrap();
        assert_eq!(e.cipher.name(), file["cipher"].as_str().unwrap(), "{name}");
        assert_eq!(e.chunk_size, file["chunk_size"].as_u64().unwrap(), "{name}");
        assert_eq!(e.file_id, array::<16>(&file["file_id"]), "{name}");
        assert_eq!(e.nonce_salt, array::<12>(&file["nonce_salt"]), "{name}");
        assert_eq!(e.tag_table_len, file["tag_table_len"].as_u64().unwrap(), "{name}");
        assert_eq!(e.tag_table_sha256, array::<32>(&file["tag_table_sha256"]), "{name}");
        let recipients = file["recipients"].as_array().unwrap();
        assert_eq!(e.recipients.len(), recipients.len(), "{name}");
        for (got, want) in e.recipients.iter().zip(recipients) {
            assert_eq!(got.kind(), want["kind"].as_str().unwrap(), "{name}");
            assert_eq!(got.kid(), want.get("kid").and_then(Value::as_str), "{name}");
            assert_eq!(&got.wrapped_key()[..], hex(&want["wrapped_key"]), "{name}");
            let context = match got {
                Recipient::X25519 { ephemeral_public_key, .. } => {
                    assert_eq!(to_hex(ephemeral_public_key), want["ephemeral_public_key"].as_str().unwrap());
                    [&ephemeral_public_key[..], &hex(&want["public_key"])].concat()
                }
                Recipient::Symmetric { kid, .. } => kid.as_bytes().to_vec(),
                _ => Vec::new(),
            };
            assert_eq!(wrap_info(got.kind(), &context), hex(&want["wrap_info"]), "{name}");
        }
        // The tag table and the header MAC sit where the oracle put them.
        let bytes = std::fs::read(dir().join(name)).unwrap();
        assert_eq!(bytes.len() as u64, file["file_len"].as_u64().unwrap(), "{name}");
        let tables = r.head().tables.unwrap();
        let (tags, mac) = (range(&bytes, tables.tags), range(&bytes, tables.mac));
        assert_eq!(crate::sha256_hex(tags), to_hex(&e.tag_table_sha256), "{name}");
        assert_eq!(mac, hex(&file["header_mac"]), "{name}");
        if let Some(footer) = file.get("footer") {
            assert_eq!(range(&bytes, r.head().footer().unwrap()), hex(footer), "{name}");
        }
    }
}

#[test]
fn labels_match_the_vectors() {
    let v = vectors();
    assert_eq!(Label::Chunks.info(), hex(&v["labels"]["chunks"]));
    assert_eq!(Label::HeaderMac.info(), hex(&v["labels"]["header_mac"]));
    assert_eq!(WRAP_AAD, hex(&v["labels"]["wrap_aad"]));
}

#[test]
fn nonces_and_associated_data_match_the_vectors() {
    let v = vectors();
    let mut checked = 0;
    for file in v["files"].as_array().unwrap() {
        let name = file["file"].as_str().unwrap();
        let r = Reader::open(dir().join(name)).unwrap();
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let table = range(&bytes, r.head().tables.unwrap().tags);
        let chunk_size = file["chunk_size"].as_u64().unwrap();
        let file_id = array::<16>(&file["file_id"]);
        let salt = array::<12>(&file["nonce_salt"]);
        for t in file["tensors"].as_array().unwrap() {
            let len = t["len"].as_u64().unwrap();
            let count = chunk_count(len, chunk_size);
            assert_eq!(count, t["chunks"].as_u64().unwrap(), "{name} {t}");
            let (_, end) = chunk_range(len, chunk_size, count - 1);
            assert_eq!(end, len);
        }
        for c in file["chunks"].as_array().unwrap() {
            let tensor = c["tensor"].as_str().unwrap();
            let i = c["i"].as_u64().unwrap() as u32;
            let j = c["j"].as_u64().unwrap();
            let last = c["last"].as_bool().unwrap();
            let info = r.header().get(tensor).unwrap();
            assert_eq!(r.header().position(tensor), Some(i as usize), "{name} {tensor}");
            assert_eq!(to_hex(&chunk_nonce(&salt, i, j)), c["nonce"].as_str().unwrap(), "{name} {tensor} {j}");
            let mut aad = ChunkAad::new(&file_id, i, info);
            assert_eq!(to_hex(aad.for_chunk(j, last)), c["aad"].as_str().unwrap(), "{name} {tensor} {j}");
            // Tensor i's chunk j has its tag at 16 · (base_i + j) in the table.
            let at = (r.header().chunk_base(i as usize).unwrap() + j) as usize * TAG_LEN;
            assert_eq!(to_hex(&table[at..at + TAG_LEN]), c["tag"].as_str().unwrap(), "{name} {tensor} {j}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} chunks checked");
}

#[test]
fn signed_messages_match_the_vectors() {
    let v = vectors();
    let mut checked = 0;
    for file in v["files"].as_array().unwrap() {
        let Some(digest) = file.get("signed_message_sha256") else { continue };
        let name = file["file"].as_str().unwrap();
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let r = Reader::open(dir().join(name)).unwrap();
        let head_len = 24 + u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
        let footer = file.get("footer").map(array::<32>);
        let message = signed_message(&bytes[..head_len], footer.as_ref());
        assert_eq!(crate::sha256_hex(&message), digest.as_str().unwrap(), "{name}");
        let want: Vec<Vec<u8>> = file["signatures"].as_array().unwrap().iter().map(hex).collect();
        let got: Vec<Vec<u8>> = r.signatures().iter().map(|s| s.signature.to_vec()).collect();
        assert_eq!(got, want, "{name}");
        checked += 1;
    }
    assert!(checked >= 1);
}

#[test]
fn heads_reencode_to_the_oracles_bytes() {
    // The oracle writes the header as section 5 says our encoder does, so
    // `Head::encode` gives back the same bytes, up to the tag table.
    let v = vectors();
    for file in v["files"].as_array().unwrap() {
        let name = file["file"].as_str().unwrap();
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let r = Reader::open(dir().join(name)).unwrap();
        let head = deathtensors_format::Head::encode(r.header(), r.head().flags).unwrap();
        assert_eq!(head.len() as u64, r.head().tables.unwrap().tags.0, "{name}");
        assert_eq!(head, bytes[..head.len()], "{name}");
    }
}

#[test]
fn each_recipient_opens_its_file_alone() {
    // With only one recipient's key, so that every kind of entry is what
    // unwraps the data key at least once (the X25519 entry "bob" has no
    // secret in keys.json: only "alice" opens that file).
    let v = vectors();
    let jwks: Value = serde_json::from_str(&std::fs::read_to_string(dir().join("keys.json")).unwrap()).unwrap();
    let mut opened = Vec::new();
    for file in v["files"].as_array().unwrap() {
        let name = file["file"].as_str().unwrap();
        for recipient in file["recipients"].as_array().unwrap() {
            let mut keys = KeyRing::new();
            match recipient.get("kid") {
                Some(kid) => {
                    let Some(jwk) = jwks["keys"].as_array().unwrap().iter().find(|k| k.get("kid") == Some(kid)) else {
                        continue;
                    };
                    keys.add_jwk_value(jwk, None).unwrap();
                }
                None => keys.add_passphrase(Arc::new(Passphrase::new(v["passphrase"].as_str().unwrap()).unwrap())),
            }
            let r = Reader::open_with(dir().join(name), ReadOptions { keys, ..ReadOptions::default() })
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let t = file["tensors"].as_array().unwrap().last().unwrap();
            let plain = r.read(t["name"].as_str().unwrap()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(crate::sha256_hex(&plain), t["plaintext_sha256"].as_str().unwrap(), "{name}");
            opened.push(recipient["kind"].as_str().unwrap().to_string());
        }
    }
    opened.sort();
    opened.dedup();
    assert_eq!(opened, ["passphrase", "symmetric", "x25519"]);
}

/// RFC 8032 section 7.1, TEST 1: the detached signatures of release files
/// (`SHA256SUMS.sig`) are plain Ed25519.
#[test]
fn detached_signatures_are_rfc_8032_ed25519() {
    let seed = array::<32>(&Value::from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"));
    let key = deathtensors_io::SigningKey::from_seed(seed).unwrap();
    let public = key.verifying_key();
    assert_eq!(to_hex(&public.0), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
    let signature = key.sign_detached(b"");
    assert_eq!(
        to_hex(&signature),
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    );
    assert!(public.verify_detached(b"", &signature));
    assert!(!public.verify_detached(b"x", &signature), "another message");
    let mut bent = signature;
    bent[10] ^= 1;
    assert!(!public.verify_detached(b"", &bent), "a changed signature");
    assert!(!public.verify_detached(b"", &signature[..63]), "a short signature");
    let other = deathtensors_io::SigningKey::generate().verifying_key();
    assert!(!other.verify_detached(b"", &signature), "another signer");
}
