//! Encrypted and signed files: round trips through every recipient kind and
//! cipher, chunk boundaries, requirements, and the tamper matrix of
//! `docs/FORMAT.md` sections 10 and 11 (every tampering gives its own
//! error, and nothing tampered is returned as data).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use deathtensors_format::{Argon2Params, Cipher, Dtype, Flags, TensorSpec};
use deathtensors_io::{
    save, sign_file, EncryptOptions, ErrorKind, KeyRing, Passphrase, ReadOptions, Reader, RecipientKey, ShardedReader,
    SigningKey, SymmetricKey, VerifyingKey, WriteOptions, X25519SecretKey,
};

use crate::scratch;

const CHUNK: u64 = 4096;

/// Tensors whose sizes sit on and around chunk boundaries, empty included.
fn tensors() -> Vec<(TensorSpec, Vec<u8>)> {
    let sizes = [0u64, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let bytes: Vec<u8> = (0..n).map(|k| (k as u8).wrapping_mul(31).wrapping_add(i as u8)).collect();
            (TensorSpec::new(format!("t{i}"), Dtype::U8, [n]), bytes)
        })
        .collect()
}

fn key() -> Arc<SymmetricKey> {
    Arc::new(SymmetricKey::new("team", &[7u8; 32]).unwrap())
}

fn write(path: &Path, data: &[(TensorSpec, Vec<u8>)], options: &WriteOptions) {
    let list = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    save(path, list, options).unwrap();
}

fn encrypted_options(recipients: Vec<RecipientKey>, cipher: Cipher) -> WriteOptions {
    WriteOptions {
        encryption: Some(EncryptOptions { cipher, chunk_size: CHUNK, recipients, seal_header: false }),
        ..WriteOptions::default()
    }
}

fn with_key(k: Arc<SymmetricKey>) -> ReadOptions {
    let mut keys = KeyRing::new();
    keys.add_symmetric(k);
    ReadOptions { keys, ..ReadOptions::default() }
}

/// Every tensor read whole, in slices and as a blob equals what was saved.
#[track_caller]
fn check_contents(r: &Reader, data: &[(TensorSpec, Vec<u8>)]) {
    for (spec, bytes) in data {
        assert_eq!(&r.read(&spec.name).unwrap(), bytes, "{}", spec.name);
        let n = bytes.len() as u64;
        for (a, b) in [(0, n), (0, n / 2), (n / 3, n), (n.saturating_sub(1), n), (CHUNK.min(n), n)] {
            if a > b {
                continue;
            }
            let mut buf = vec![0u8; (b - a) as usize];
            r.read_range_into(&spec.name, a, &mut buf).unwrap();
            assert_eq!(&buf[..], &bytes[a as usize..b as usize], "{} [{a}, {b})", spec.name);
        }
    }
    let mut blob = vec![1u8; r.header().data_len() as usize];
    r.read_data_into(&mut blob).unwrap();
    for (spec, bytes) in data {
        let (s, e) = r.header().get(&spec.name).unwrap().data_offsets;
        assert_eq!(&blob[s as usize..e as usize], &bytes[..]);
    }
}

fn kind_of(e: &deathtensors_io::Error) -> String {
    format!("{:?}", e.kind())
}

#[track_caller]
fn expect_err<T>(r: deathtensors_io::Result<T>, want: &str) {
    match r {
        Ok(_) => panic!("expected an error {want}, got Ok"),
        Err(e) => assert!(kind_of(&e).starts_with(want), "expected {want}, got {} ({e})", kind_of(&e)),
    }
}

#[test]
fn round_trip_both_ciphers_and_chunk_boundaries() {
    let dir = scratch("crypt-roundtrip");
    let data = tensors();
    for cipher in [Cipher::Aes256Gcm, Cipher::ChaCha20Poly1305] {
        let path = dir.join(format!("{}.dt", cipher.name()));
        write(&path, &data, &encrypted_options(vec![RecipientKey::Symmetric(key())], cipher));
        let r = Reader::open_with(&path, with_key(key())).unwrap();
        assert!(r.is_encrypted() && r.can_decrypt());
        assert_eq!(r.header().encryption().unwrap().cipher, cipher);
        check_contents(&r, &data);
    }
}

#[test]
fn large_tensor_decrypts_on_all_cores() {
    let dir = scratch("crypt-large");
    let n = 64 * CHUNK + 17;
    let bytes: Vec<u8> = (0..n).map(|k| (k % 251) as u8).collect();
    let data = vec![(TensorSpec::new("big", Dtype::U8, [n]), bytes)];
    let path = dir.join("big.dt");
    write(&path, &data, &encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm));
    check_contents(&Reader::open_with(&path, with_key(key())).unwrap(), &data);
}

#[test]
fn durable_saves_larger_than_a_writeback_range_read_back() {
    // Each worker's run of chunks goes to the disk in 4 MiB ranges as it is
    // written: tensors across several, at unaligned offsets.
    let dir = scratch("crypt-durable");
    let pattern = |n: u64, seed: u64| (0..n).map(|k| ((k * 7 + seed) % 253) as u8).collect::<Vec<u8>>();
    let data = vec![
        (TensorSpec::new("a", Dtype::U8, [(9 << 20) + 5]), pattern((9 << 20) + 5, 1)),
        (TensorSpec::new("b", Dtype::U8, [3]), pattern(3, 2)),
        (TensorSpec::new("c", Dtype::U8, [6 << 20]), pattern(6 << 20, 3)),
    ];
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    assert!(options.durable);
    options.encryption.as_mut().unwrap().chunk_size = 1 << 20;
    let path = dir.join("durable.dt");
    write(&path, &data, &options);
    check_contents(&Reader::open_with(&path, with_key(key())).unwrap(), &data);
    // cryptotensors' files, chunked and whole, written the same way.
    for version in [1, 2] {
        let signer = Arc::new(SigningKey::generate());
        let ct = deathtensors_io::CryptotensorsOptions {
            master: key(),
            alg: deathtensors_format::CtAlg::Aes256Gcm,
            signer: signer.clone(),
            sign_kid: Some("signer".into()),
            version,
            chunk_size: 2 << 20,
            policy: None,
            tensors: Some(vec!["a".into(), "c".into()]),
            durable: true,
        };
        let path = dir.join(format!("durable-v{version}.safetensors"));
        let borrowed = data.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
        deathtensors_io::save_cryptotensors(&path, borrowed, None, &ct).unwrap();
        let mut keys = KeyRing::new();
        keys.add_symmetric(key());
        keys.add_jwk_value(&signer.verifying_key().to_jwk(Some("signer")), None).unwrap();
        let r = Reader::open_with(&path, ReadOptions { keys, ..ReadOptions::default() }).unwrap();
        for (spec, bytes) in &data {
            assert_eq!(&r.read(&spec.name).unwrap(), bytes, "v{version} {}", spec.name);
        }
    }
}

#[test]
fn every_recipient_kind_unwraps_and_others_do_not() {
    let dir = scratch("crypt-recipients");
    let data = tensors();
    let x = Arc::new(X25519SecretKey::generate("alice").unwrap());
    let pass = Arc::new(Passphrase::new("correct horse").unwrap());
    let weak = Argon2Params { memory_kib: 64, iterations: 1, parallelism: 1 };
    let recipients = vec![
        RecipientKey::Symmetric(key()),
        RecipientKey::X25519(x.public_key()),
        RecipientKey::Passphrase(pass.clone(), weak),
    ];
    let path = dir.join("multi.dt");
    write(&path, &data, &encrypted_options(recipients, Cipher::Aes256Gcm));
    let kinds: Vec<_> =
        Reader::open(&path).unwrap().header().encryption().unwrap().recipients.iter().map(|r| r.kind()).collect();
    assert_eq!(kinds, ["symmetric", "x25519", "passphrase"]);

    let mut k = KeyRing::new();
    k.add_x25519(x.clone());
    check_contents(&Reader::open_with(&path, ReadOptions { keys: k, ..ReadOptions::default() }).unwrap(), &data);
    let mut k = KeyRing::new();
    k.add_passphrase(pass);
    check_contents(&Reader::open_with(&path, ReadOptions { keys: k, ..ReadOptions::default() }).unwrap(), &data);

    // The right id with the wrong secret: one decryption error, no detail.
    let wrong = Arc::new(SymmetricKey::new("team", &[8u8; 32]).unwrap());
    expect_err(Reader::open_with(&path, with_key(wrong)), "Decrypt");
    let mut k = KeyRing::new();
    k.add_passphrase(Arc::new(Passphrase::new("wrong horse").unwrap()));
    expect_err(Reader::open_with(&path, ReadOptions { keys: k, ..ReadOptions::default() }), "Decrypt");
    let mut k = KeyRing::new();
    k.add_x25519(Arc::new(X25519SecretKey::generate("alice").unwrap()));
    expect_err(Reader::open_with(&path, ReadOptions { keys: k, ..ReadOptions::default() }), "Decrypt");
    // An id that is not a recipient.
    let other = Arc::new(SymmetricKey::new("other", &[7u8; 32]).unwrap());
    let e = Reader::open_with(dir.join("multi.dt"), with_key(other)).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::NoKey { recipients } if recipients.len() == 3), "{e}");
    assert!(e.to_string().contains("\"team\""), "{e}");
}

#[test]
fn passphrase_derivations_stop_at_the_readers_argon2_budget() {
    let dir = scratch("crypt-kdf-budget");
    let data = tensors();
    // 64 KiB and 2 passes: 128 KiB-passes an entry.
    let params = Argon2Params { memory_kib: 64, iterations: 2, parallelism: 1 };
    let pass = |p: &str| Arc::new(Passphrase::new(p).unwrap());
    let open = |path: &Path, p: &str, max_kdf_work: u64| {
        let mut keys = KeyRing::new();
        keys.add_passphrase(pass(p));
        Reader::open_with(path, ReadOptions { keys, max_kdf_work, ..ReadOptions::default() })
    };
    let one = dir.join("one.dt");
    write(&one, &data, &encrypted_options(vec![RecipientKey::Passphrase(pass("right"), params)], Cipher::Aes256Gcm));
    // Exactly the work of the entry is enough; one less refuses before deriving.
    check_contents(&open(&one, "right", 128).unwrap(), &data);
    let e = open(&one, "right", 127).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::KdfBudget { needed: 128, budget: 127 }), "{e}");
    assert!(e.to_string().contains("max_kdf_work"), "{e}");
    assert!(!e.is_invalid_file(), "a costly entry is not a malformed file: {e}");

    // Three entries for other passphrases: the work adds up over the tries.
    let three = dir.join("three.dt");
    let recipients = ["a", "b", "c"].map(|p| RecipientKey::Passphrase(pass(p), params)).to_vec();
    write(&three, &data, &encrypted_options(recipients, Cipher::Aes256Gcm));
    let e = open(&three, "wrong", 256).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::KdfBudget { needed: 384, budget: 256 }), "{e}");
    expect_err(open(&three, "wrong", ReadOptions::DEFAULT_MAX_KDF_WORK), "Decrypt");
    check_contents(&open(&three, "c", 384).unwrap(), &data);

    // The default covers four entries of our writer's cost, and
    // is less than one entry at the format's most (1 GiB, 16 passes).
    const OURS: u64 = Argon2Params::DEFAULT.memory_kib as u64 * Argon2Params::DEFAULT.iterations as u64;
    const { assert!(4 * OURS <= ReadOptions::DEFAULT_MAX_KDF_WORK && (1 << 20) * 16 > ReadOptions::DEFAULT_MAX_KDF_WORK) };
}

#[test]
fn without_a_key_the_header_opens_and_the_data_does_not() {
    let dir = scratch("crypt-nokey");
    let data = tensors();
    let path = dir.join("a.dt");
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    options.checksum = true;
    write(&path, &data, &options);
    let r = Reader::open(&path).unwrap();
    assert!(r.is_encrypted() && !r.can_decrypt());
    assert_eq!(r.header().len(), data.len());
    expect_err(r.read("t1"), "NoKey");
    expect_err(r.bytes("t1"), "InvalidInput");
    // The digests are of the ciphertext: anyone can check every byte.
    r.verify().unwrap();
    // And the ciphertext is not the plaintext.
    let raw = std::fs::read(&path).unwrap();
    let t = r.tensor("t5").unwrap();
    let stored = &raw[t.file_offset as usize..(t.file_offset + t.info.byte_len()) as usize];
    assert_ne!(stored, &data[5].1[..]);
}

/// Flips one bit at `at` in a copy of `src`.
fn flipped(src: &Path, dir: &Path, name: &str, at: u64) -> PathBuf {
    let mut bytes = std::fs::read(src).unwrap();
    bytes[at as usize] ^= 0x01;
    let out = dir.join(name);
    std::fs::write(&out, bytes).unwrap();
    out
}

#[test]
fn tamper_matrix_encrypted_and_signed() {
    let dir = scratch("crypt-tamper");
    let data = tensors();
    let signer = Arc::new(SigningKey::generate());
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    options.checksum = true;
    options.signers = vec![signer.clone()];
    let path = dir.join("good.dt");
    write(&path, &data, &options);
    let trusted = || ReadOptions { trusted_signers: vec![signer.verifying_key()], ..with_key(key()) };
    let good = Reader::open_with(&path, trusted()).unwrap();
    assert_eq!(good.signers(), &[signer.verifying_key()]);
    check_contents(&good, &data);
    let head = good.head().clone();
    let tables = head.tables.unwrap();
    let file_len = std::fs::metadata(&path).unwrap().len();
    let t5 = good.tensor("t5").unwrap().file_offset;
    drop(good);

    // The prefix: clearing the encryption flag leaves a header with an encryption section.
    let p = dir.join("flag.dt");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[12] &= !(Flags::ENCRYPTED.bits() as u8);
    std::fs::write(&p, &bytes).unwrap();
    expect_err(Reader::open_with(&p, with_key(key())), "Format");
    // The header: a byte of the JSON (inside the file id's hex digits, so it stays valid JSON).
    let json = std::fs::read(&path).unwrap();
    let at = json.windows(9).position(|w| w == b"\"file_id\"").unwrap() + 12;
    let mut bytes = json.clone();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    let p = dir.join("header.dt");
    std::fs::write(&p, &bytes).unwrap();
    expect_err(Reader::open_with(&p, with_key(key())), "BadSignature");
    // Without the signature requirement the key holder's MAC catches it as well.
    let mut plain = std::fs::read(&p).unwrap();
    let unsigned_len = plain.len() - (96 + 16);
    plain.truncate(unsigned_len);
    plain[12] &= !(Flags::SIGNED.bits() as u8);
    let q = dir.join("header-unsigned.dt");
    std::fs::write(&q, &plain).unwrap();
    expect_err(Reader::open_with(&q, with_key(key())), "Decrypt");
    // The tag table.
    let p = flipped(&path, &dir, "tags.dt", tables.tags.0 + 3);
    expect_err(Reader::open_with(&p, with_key(key())), "TagTableMismatch");
    // The header MAC (signatures do not cover it; the key holder checks it).
    let p = flipped(&path, &dir, "mac.dt", tables.mac.0 + 5);
    expect_err(Reader::open_with(&p, with_key(key())), "Decrypt");
    // The ciphertext: its signed digest fails before the chunk is decrypted
    // (FORMAT 11.2: a signed file is checked on every read), with or
    // without a key.
    let p = flipped(&path, &dir, "cipher.dt", t5 + CHUNK + 2);
    let r = Reader::open_with(&p, with_key(key())).unwrap();
    let e = r.read("t5").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "t5"), "{e}");
    expect_err(Reader::open(&p).unwrap().verify(), "TensorDigestMismatch");
    let mut buf = vec![9u8; 10];
    expect_err(r.read_range_into("t5", CHUNK, &mut buf), "TensorDigestMismatch");
    assert_eq!(buf, vec![0u8; 10], "nothing unverified is returned");
    // The signature.
    let p = flipped(&path, &dir, "sig.dt", file_len - 16 - 10);
    expect_err(Reader::open(&p), "BadSignature");
    // Truncated, extended.
    let p = dir.join("short.dt");
    std::fs::write(&p, &std::fs::read(&path).unwrap()[..(file_len - 1) as usize]).unwrap();
    assert!(Reader::open(&p).is_err());
    let p = dir.join("long.dt");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0; 7]);
    std::fs::write(&p, &bytes).unwrap();
    assert!(Reader::open(&p).is_err());
}

#[test]
fn chunks_swapped_within_and_across_tensors_and_files_are_detected() {
    let dir = scratch("crypt-swap");
    let data = tensors();
    let options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    let a = dir.join("a.dt");
    let b = dir.join("b.dt");
    write(&a, &data, &options);
    write(&b, &data, &options);
    let ra = Reader::open(&a).unwrap();
    let t5 = ra.tensor("t5").unwrap().file_offset;
    let t3 = ra.tensor("t3").unwrap().file_offset;
    let tags = ra.head().tables.unwrap().tags.0;
    let base5 = ra.header().chunk_base(5).unwrap();
    let base3 = ra.header().chunk_base(3).unwrap();
    drop(ra);
    let swap = |name: &str, f: &dyn Fn(&mut Vec<u8>, &[u8])| -> PathBuf {
        let mut bytes = std::fs::read(&a).unwrap();
        let other = std::fs::read(&b).unwrap();
        f(&mut bytes, &other);
        let p = dir.join(name);
        std::fs::write(&p, &bytes).unwrap();
        p
    };
    let c = CHUNK as usize;
    let move_chunk = |bytes: &mut Vec<u8>, from: &[u8], dst: u64, src: u64| {
        bytes[dst as usize..dst as usize + c].copy_from_slice(&from[src as usize..src as usize + c]);
    };
    // Within a tensor: chunk 1 takes chunk 0's ciphertext (tags untouched: the table digest holds).
    let p = swap("within.dt", &|bytes, _| {
        let copy = bytes.clone();
        move_chunk(bytes, &copy, t5 + CHUNK, t5);
    });
    expect_err(Reader::open_with(&p, with_key(key())).unwrap().read("t5"), "Decrypt");
    // Across tensors: t3's only chunk takes t5's first.
    let p = swap("across.dt", &|bytes, _| {
        let copy = bytes.clone();
        move_chunk(bytes, &copy, t3, t5);
    });
    expect_err(Reader::open_with(&p, with_key(key())).unwrap().read("t3"), "Decrypt");
    // Across files under the same recipient key: b's ciphertext in a's place.
    let p = swap("files.dt", &|bytes, other| move_chunk(bytes, other, t5, t5));
    expect_err(Reader::open_with(&p, with_key(key())).unwrap().read("t5"), "Decrypt");
    // Swapping tags along with the ciphertext changes the table, which the header commits to.
    let p = swap("tags.dt", &|bytes, _| {
        let copy = bytes.clone();
        move_chunk(bytes, &copy, t5 + CHUNK, t5);
        let (x, y) = ((tags + 16 * (base5 + 1)) as usize, (tags + 16 * base5) as usize);
        let tag = copy[y..y + 16].to_vec();
        bytes[x..x + 16].copy_from_slice(&tag);
        let _ = base3;
    });
    expect_err(Reader::open_with(&p, with_key(key())), "TagTableMismatch");
}

#[test]
fn signature_requirements_and_downgrades() {
    let dir = scratch("crypt-sign");
    let data = tensors();
    let publisher = Arc::new(SigningKey::generate());
    let auditor = SigningKey::generate();
    let stranger = SigningKey::generate();
    let path = dir.join("signed.dt");
    write(&path, &data, &WriteOptions { signers: vec![publisher.clone()], ..WriteOptions::default() });
    let trust = |k: &SigningKey| ReadOptions { trusted_signers: vec![k.verifying_key()], ..ReadOptions::default() };
    // Signing a plaintext file records digests and a footer.
    let r = Reader::open_with(&path, trust(&publisher)).unwrap();
    assert!(r.header().has_tensor_digests() && r.has_footer());
    check_contents(&r, &data);
    r.verify().unwrap();
    expect_err(Reader::open_with(&path, trust(&stranger)), "UntrustedSigner");
    expect_err(
        Reader::open_with(&path, ReadOptions { require_encryption: true, ..ReadOptions::default() }),
        "NotEncrypted",
    );

    // A second signature leaves the first valid and the data as it was.
    drop(r); // Windows refuses to replace an open file.
    let before = std::fs::read(&path).unwrap();
    sign_file(&path, &auditor, false).unwrap();
    let after = std::fs::read(&path).unwrap();
    let body = Reader::open(&path).unwrap().head().data_end as usize + 32;
    assert_eq!(&before[24..body], &after[24..body]);
    let r = Reader::open_with(&path, trust(&auditor)).unwrap();
    assert_eq!(r.signers(), &[publisher.verifying_key(), auditor.verifying_key()]);
    expect_err(sign_file(&path, &auditor, false), "InvalidInput");

    // Stripping the block and clearing the flag: an unsigned file, refused when a signature is required.
    let mut stripped = after[..body].to_vec();
    stripped[12] &= !(Flags::SIGNED.bits() as u8);
    let p = dir.join("stripped.dt");
    std::fs::write(&p, &stripped).unwrap();
    expect_err(Reader::open_with(&p, ReadOptions { require_signature: true, ..ReadOptions::default() }), "Unsigned");
    expect_err(Reader::open_with(&p, trust(&publisher)), "Unsigned");
    Reader::open(&p).unwrap();
    // Clearing the flag but keeping the block: trailing bytes no tensor owns.
    let mut cleared = after.clone();
    cleared[12] &= !(Flags::SIGNED.bits() as u8);
    let p = dir.join("cleared.dt");
    std::fs::write(&p, &cleared).unwrap();
    expect_err(Reader::open(&p), "Format");

    // An old signed header over new data: the checked read refuses the bytes.
    let mut mixed = after.clone();
    let t = Reader::open(&path).unwrap().tensor("t4").unwrap().file_offset as usize;
    mixed[t] ^= 0xff;
    let p = dir.join("mixed.dt");
    std::fs::write(&p, &mixed).unwrap();
    let r = Reader::open_with(&p, trust(&publisher)).unwrap();
    expect_err(r.read("t4"), "TensorDigestMismatch");
    let mut buf = vec![0u8; 4];
    expect_err(r.read_range_into("t4", 0, &mut buf), "TensorDigestMismatch");
    let mut blob = vec![0u8; r.header().data_len() as usize];
    expect_err(r.read_data_into(&mut blob), "TensorDigestMismatch");
    // Without a requirement too: every tensor returned from a signed file
    // has been checked against its signed digest, and nothing is mapped.
    let r = Reader::open(&p).unwrap();
    assert!(r.checked_reads());
    expect_err(r.read("t4"), "TensorDigestMismatch");
    expect_err(r.read_data_into(&mut blob), "TensorDigestMismatch");
    assert_eq!(r.read("t3").unwrap(), Reader::open(&path).unwrap().read("t3").unwrap(), "untouched tensors read");
    // Once the signature is stripped, the file is unsigned and nothing is promised.
    assert!(!Reader::open(dir.join("stripped.dt")).unwrap().checked_reads());
}

#[test]
fn a_signature_anyone_can_make_is_refused() {
    // ring alone accepts the identity key with R the identity and S = 0 for
    // every message: a "signature" made without any secret key. Swapping it
    // in for the real record must not give a verified, signed file.
    let dir = scratch("crypt-sign-forged");
    let data = tensors();
    let path = dir.join("signed.dt");
    let publisher = Arc::new(SigningKey::generate());
    write(&path, &data, &WriteOptions { signers: vec![publisher], ..WriteOptions::default() });
    let signed = std::fs::read(&path).unwrap();
    let records_at = signed.len() - 16 - 96;
    let mut identity = [0u8; 32];
    identity[0] = 1;
    for (key, r) in [(identity, identity), ([0u8; 32], [0u8; 32])] {
        let mut forged = signed.clone();
        forged[records_at..records_at + 32].copy_from_slice(&key);
        forged[records_at + 32..records_at + 64].copy_from_slice(&r);
        forged[records_at + 64..records_at + 96].fill(0);
        let p = dir.join("forged.dt");
        std::fs::write(&p, &forged).unwrap();
        expect_err(Reader::open(&p), "BadSignature");
        expect_err(
            Reader::open_with(&p, ReadOptions { require_signature: true, ..ReadOptions::default() }),
            "BadSignature",
        );
        let trusted = ReadOptions { trusted_signers: vec![VerifyingKey(key)], ..ReadOptions::default() };
        expect_err(Reader::open_with(&p, trusted), "BadSignature");
    }
}

#[test]
fn unsigned_plain_files_cannot_be_signed_without_digests() {
    let dir = scratch("crypt-sign-nodigest");
    let path = dir.join("plain.dt");
    write(&path, &tensors(), &WriteOptions::default());
    expect_err(sign_file(&path, &SigningKey::generate(), false), "InvalidInput");
    let st = dir.join("plain.safetensors");
    let o = WriteOptions { format: deathtensors_format::Format::Safetensors, ..WriteOptions::default() };
    write(&st, &tensors(), &o);
    expect_err(sign_file(&st, &SigningKey::generate(), false), "InvalidInput");
    let o = WriteOptions {
        format: deathtensors_format::Format::Safetensors,
        signers: vec![Arc::new(SigningKey::generate())],
        ..WriteOptions::default()
    };
    let list = tensors().iter().map(|(s, b)| (s.clone(), b.clone())).collect::<Vec<_>>();
    let list2: Vec<(TensorSpec, &[u8])> = list.iter().map(|(s, b)| (s.clone(), &b[..])).collect();
    expect_err(save(&st, list2, &o), "InvalidInput");
}

#[test]
fn a_policy_is_evaluated_against_the_input_before_keys_are_released() {
    let dir = scratch("crypt-policy");
    let path = dir.join("p.dt");
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    let rego = "package model\nimport rego.v1\ndefault allow := false\nallow if input.user == \"alice\"\n";
    options.metadata = Some([("__policy__".to_string(), rego.to_string())].into_iter().collect());
    write(&path, &tensors(), &options);
    let with_input =
        |user: &str| ReadOptions { policy_input: Some(serde_json::json!({"user": user})), ..with_key(key()) };
    check_contents(&Reader::open_with(&path, with_input("alice")).unwrap(), &tensors());
    let e = Reader::open_with(&path, with_input("bob")).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::PolicyDenied(m) if m.contains("denies")), "{e}");
    expect_err(Reader::open_with(&path, with_key(key())), "PolicyDenied");
    // Without a key nothing is released, so nothing is evaluated: the header opens.
    Reader::open(&path).unwrap();
}

/// A file forged by a holder of the data key (`testdata/crypto`, made by
/// the reference implementation): tensor `weight`'s first chunk changed
/// so that its AES-GCM tag still verifies (GHASH is linear once the key is
/// known). The publisher's signature covers the ciphertext's digest, which
/// every reader of the signed file checks on the bytes it decrypts, with or
/// without a requirement (FORMAT 11.2).
#[test]
fn a_co_recipient_cannot_forge_a_signed_file() {
    let dir = crate::testdata().join("crypto");
    let mut keys = KeyRing::new();
    keys.add_jwk_file(dir.join("keys.json")).unwrap();
    let publisher = keys.verifying_keys()[0].1;
    let path = dir.join("forged-by-co-recipient.dt");
    let options = ReadOptions { keys: keys.clone(), trusted_signers: vec![publisher], ..ReadOptions::default() };
    let r = Reader::open_with(&path, options).unwrap();
    // The other tensors are intact and read.
    r.read("scalar").unwrap();
    let e = r.read("weight").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "weight"), "{e}");
    let mut part = vec![7u8; 8];
    expect_err(r.read_range_into("weight", 4, &mut part), "TensorDigestMismatch");
    assert_eq!(part, vec![0u8; 8]);
    // The tag alone does not see it; the digest is checked without a
    // requirement too, on every path: whole, in part, all at once.
    let lax = Reader::open_with(&path, ReadOptions { keys, ..ReadOptions::default() }).unwrap();
    assert_eq!(lax.signers(), &[publisher]);
    assert_eq!(lax.signature_covers(), Some(deathtensors_io::SignatureCovers::HeaderAndData));
    let e = lax.read("weight").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "weight"), "{e}");
    expect_err(lax.read_range_into("weight", 4, &mut part), "TensorDigestMismatch");
    let mut all = vec![7u8; lax.unpacked_len().unwrap() as usize];
    let e = lax.read_data_into(&mut all).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "weight"), "{e}");
    assert!(all.iter().all(|&b| b == 0), "nothing of a failed load is returned");
    lax.read("scalar").unwrap();
    expect_err(lax.verify(), "TensorDigestMismatch");
}

#[test]
fn signing_an_encrypted_file_keeps_it_readable() {
    let dir = scratch("crypt-sign-encrypted");
    let path = dir.join("e.dt");
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    options.checksum = true;
    write(&path, &tensors(), &options);
    let signer = SigningKey::generate();
    sign_file(&path, &signer, false).unwrap();
    let trusted = ReadOptions { trusted_signers: vec![signer.verifying_key()], ..with_key(key()) };
    check_contents(&Reader::open_with(&path, trusted).unwrap(), &tensors());
    // Encrypted without digests: the signature could not bind a co-recipient.
    let bare = dir.join("bare.dt");
    write(&bare, &tensors(), &encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm));
    expect_err(sign_file(&bare, &signer, false), "InvalidInput");
}

#[test]
fn sealed_headers_hide_names_and_open_with_a_key() {
    let dir = scratch("crypt-sealed");
    let data = tensors();
    let signer = Arc::new(SigningKey::generate());
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::ChaCha20Poly1305);
    options.encryption.as_mut().unwrap().seal_header = true;
    options.metadata = Some([("architecture".to_string(), "secret-moe-v3".to_string())].into_iter().collect());
    options.signers = vec![signer.clone()];
    let path = dir.join("sealed.dt");
    write(&path, &data, &options);
    // Nothing of the header is in the file in the clear.
    let raw = std::fs::read(&path).unwrap();
    for needle in [&b"secret-moe-v3"[..], b"\"t5\"", b"\"shape\""] {
        assert!(
            !raw.windows(needle.len()).any(|w| w == needle),
            "{:?} is in the clear",
            String::from_utf8_lossy(needle)
        );
    }
    // Without a key: a sealed file of no tensors, its recipients and signer.
    let bare = Reader::open(&path).unwrap();
    assert!(bare.is_sealed() && bare.is_encrypted() && bare.header().is_empty());
    assert_eq!(bare.signers(), &[signer.verifying_key()]);
    expect_err(bare.read("t1"), "NoKey");
    // Its digests are sealed too: without a key, verify() cannot check its
    // tensors, and says so rather than passing it for a file of none.
    expect_err(bare.verify(), "NoKey");
    expect_err(bare.check_not_hidden(), "NoKey");
    expect_err(deathtensors_io::diff(&bare, &bare, deathtensors_io::Compare::Exact, |_| ()), "NoKey");
    // With the key: the file as if it were not sealed, signature checked.
    let trusted = ReadOptions { trusted_signers: vec![signer.verifying_key()], ..with_key(key()) };
    let r = Reader::open_with(&path, trusted).unwrap();
    assert!(r.is_sealed() && r.header().len() == data.len());
    assert_eq!(r.header().metadata().unwrap()["architecture"], "secret-moe-v3");
    check_contents(&r, &data);
    r.verify_tags(|_| {}).unwrap();
    r.verify().unwrap();
    let sealed = r.head().sealed.unwrap();
    drop(r);
    // A byte of the sealed header: the MAC (and the signature) catch it.
    let p = flipped(&path, &dir, "sealed-flip.dt", sealed.0 + 7);
    expect_err(Reader::open_with(&p, with_key(key())), "BadSignature");
    // The sealed header of another file under the same recipient key.
    let other = dir.join("other.dt");
    write(&other, &data, &options);
    let mut bytes = std::fs::read(&path).unwrap();
    let theirs = std::fs::read(&other).unwrap();
    bytes[sealed.0 as usize..sealed.1 as usize].copy_from_slice(&theirs[sealed.0 as usize..sealed.1 as usize]);
    let len = bytes.len() - (96 + 16);
    bytes.truncate(len);
    bytes[12] &= !(Flags::SIGNED.bits() as u8);
    let p = dir.join("swapped.dt");
    std::fs::write(&p, &bytes).unwrap();
    expect_err(Reader::open_with(&p, with_key(key())), "Decrypt");
    // Signed later: the sealed file must carry its digests (checksum).
    let later = dir.join("later.dt");
    let mut o = options.clone();
    o.signers = Vec::new();
    o.checksum = true;
    write(&later, &data, &o);
    sign_file(&later, &signer, false).unwrap();
    let trusted = ReadOptions { trusted_signers: vec![signer.verifying_key()], ..with_key(key()) };
    check_contents(&Reader::open_with(&later, trusted).unwrap(), &data);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any tensors of any dtype (empty, scalar, on and around chunk
    /// boundaries), either cipher, any chunk size, sealed or not: what is
    /// read back, whole, in slices and as a blob, is what was saved.
    #[test]
    fn encrypted_round_trips(
        tensors in proptest::collection::vec(
            (proptest::sample::select(Dtype::ALL.to_vec()), proptest::collection::vec(0u64..5, 0..3), 0u64..3),
            0..6,
        ),
        chacha in proptest::prelude::any::<bool>(),
        chunk_pow in 12u32..15,
        seal in proptest::prelude::any::<bool>(),
        seed in proptest::prelude::any::<u8>(),
    ) {
        let chunk = 1u64 << chunk_pow;
        let mut data = Vec::new();
        for (i, (dtype, mut shape, chunks)) in tensors.into_iter().enumerate() {
            // Some tensors span chunks: widen the first dimension.
            if chunks > 0 && !shape.is_empty() {
                shape[0] += chunks * chunk;
            }
            let spec = TensorSpec::new(format!("t{i}"), dtype, shape);
            let Ok(n) = spec.byte_len() else { continue };
            let bytes: Vec<u8> = (0..n).map(|k| (k as u8).wrapping_mul(seed | 1).wrapping_add(i as u8)).collect();
            data.push((spec, bytes));
        }
        let dir = scratch("crypt-prop");
        let path = dir.join(format!("p{seed}-{chunk_pow}.dt"));
        let cipher = if chacha { Cipher::ChaCha20Poly1305 } else { Cipher::Aes256Gcm };
        let mut options = WriteOptions {
            encryption: Some(EncryptOptions { cipher, chunk_size: chunk, recipients: vec![RecipientKey::Symmetric(key())], seal_header: seal }),
            ..WriteOptions::default()
        };
        options.checksum = seed % 2 == 0;
        write(&path, &data, &options);
        let r = Reader::open_with(&path, with_key(key())).unwrap();
        check_contents(&r, &data);
        r.verify_tags(|_| {}).unwrap();
        let _ = std::fs::remove_file(&path);
    }
}

/// Findings of the security review, kept as regressions.
mod review {
    use super::*;

    #[test]
    fn a_sealed_files_policy_is_evaluated() {
        let dir = scratch("review-sealed-policy");
        let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
        options.encryption.as_mut().unwrap().seal_header = true;
        let deny = "package model\nimport rego.v1\ndefault allow := false\n";
        options.metadata = Some([("__policy__".to_string(), deny.to_string())].into_iter().collect());
        let path = dir.join("sealed-deny.dt");
        write(&path, &tensors(), &options);
        expect_err(Reader::open_with(&path, with_key(key())), "PolicyDenied");
    }

    #[test]
    fn a_policy_slipped_into_an_unsigned_header_meets_the_mac_first() {
        let dir = scratch("review-policy-mac");
        let path = dir.join("e.dt");
        let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
        let filler = "x".repeat(80);
        options.metadata = Some([("note".to_string(), filler.clone())].into_iter().collect());
        write(&path, &tensors(), &options);
        // Someone without a key swaps the note for a policy of the same length.
        let mut bytes = std::fs::read(&path).unwrap();
        let from = format!("\"note\":\"{filler}\"");
        let policy = r#""__policy__":"package model\ndefault allow := false""#;
        let to = format!("{policy}{}", " ".repeat(from.len() - policy.len()));
        let at = bytes.windows(from.len()).position(|w| w == from.as_bytes()).unwrap();
        bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
        let p = dir.join("slipped.dt");
        std::fs::write(&p, &bytes).unwrap();
        assert!(Reader::open(&p).unwrap().header().metadata().unwrap().contains_key("__policy__"));
        // The header is authenticated before any policy in it is run.
        let e = Reader::open_with(&p, with_key(key())).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Decrypt { what } if what == "the header"), "{e}");
    }

    #[test]
    fn checked_reads_check_the_bytes_they_return_every_time() {
        let dir = scratch("review-checked-reads");
        let signer = Arc::new(SigningKey::generate());
        let path = dir.join("s.dt");
        write(&path, &tensors(), &WriteOptions { signers: vec![signer.clone()], ..WriteOptions::default() });
        let r = Reader::open_with(
            &path,
            ReadOptions { trusted_signers: vec![signer.verifying_key()], ..ReadOptions::default() },
        )
        .unwrap();
        assert_eq!(r.read("t4").unwrap(), tensors()[4].1);
        // The file changes in place after a first, good read.
        let at = r.tensor("t4").unwrap().file_offset;
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(at)).unwrap();
        std::io::Write::write_all(&mut f, &[0xee; 16]).unwrap();
        expect_err(r.read("t4"), "TensorDigestMismatch");
        let mut part = vec![0u8; 8];
        expect_err(r.read_range_into("t4", 0, &mut part), "TensorDigestMismatch");
        // Nothing is mapped under a requirement: a mapping is not checkable.
        expect_err(unsafe { r.map_tensor_private("t1") }, "InvalidInput");
    }
}

#[test]
fn sharded_checkpoints_apply_keys_and_requirements_to_every_shard() {
    let dir = scratch("crypt-sharded");
    let data = tensors();
    let list = || data.iter().map(|(s, b)| (s.clone(), &b[..])).collect::<Vec<_>>();
    let publisher = Arc::new(SigningKey::generate());
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    options.signers = vec![publisher.clone()];
    options.encryption.as_mut().unwrap().seal_header = true;
    let (index, shards) = deathtensors_io::save_sharded(dir.join("model"), list(), 3 * CHUNK, &options).unwrap();
    assert!(shards.len() >= 2);

    // Sealed shards show their tensors to the reader that holds the key.
    let trusted = ReadOptions { trusted_signers: vec![publisher.verifying_key()], ..with_key(key()) };
    let r = ShardedReader::open_with(&index, trusted.clone()).unwrap();
    for (spec, bytes) in &data {
        assert_eq!(&r.read(&spec.name).unwrap(), bytes, "{}", spec.name);
    }
    r.verify().unwrap();
    // Without the key the index still opens; a shard's tensors are hidden.
    // (Each reader is closed before the next: Windows refuses to replace a
    // file that one still holds, below.)
    drop(r);
    let r = ShardedReader::open(&index).unwrap();
    expect_err(r.read("t1"), "NoKey");
    drop(r);

    // A signer that is not trusted fails every read and the verification,
    // with the shard's own error.
    let stranger = ReadOptions { trusted_signers: vec![SigningKey::generate().verifying_key()], ..with_key(key()) };
    let r = ShardedReader::open_with(&index, stranger).unwrap();
    expect_err(r.read("t1"), "UntrustedSigner");
    expect_err(r.verify(), "UntrustedSigner");
    expect_err(r.verify(), "UntrustedSigner"); // the same error again, not a string of it

    // A shard replaced by an unsigned encrypted file: refused under the requirement.
    drop(r); // Windows refuses to replace an open file.
    let mut unsigned = options.clone();
    unsigned.signers.clear();
    let first: Vec<_> = list()
        .into_iter()
        .filter(|(s, _)| Reader::open_with(&shards[0], with_key(key())).unwrap().header().get(&s.name).is_some())
        .collect();
    save(&shards[0], first, &unsigned).unwrap();
    expect_err(ShardedReader::open_with(&index, trusted.clone()).unwrap().verify(), "Unsigned");
    ShardedReader::open_with(&index, with_key(key())).unwrap().verify().unwrap();

    // verify() checks every tag for a key holder: a flipped ciphertext byte
    // of a file with no digests (not signed) fails it.
    let path = dir.join("plain-digests.dt");
    let enc = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    write(&path, &data, &enc);
    let r = Reader::open_with(&path, with_key(key())).unwrap();
    assert!(r.header().tensors().iter().all(|t| t.sha256.is_none()));
    r.verify().unwrap();
    let at = r.tensor("t5").unwrap().file_offset as usize + 7;
    drop(r);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[at] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    expect_err(Reader::open_with(&path, with_key(key())).unwrap().verify(), "Decrypt");
    expect_err(Reader::open(&path).unwrap().verify(), "NoChecksum");
}

#[test]
fn a_writer_encrypts_to_exactly_the_keys_given() {
    let params = Argon2Params::DEFAULT;
    let mut ring = KeyRing::new();
    ring.add_symmetric(key());
    // The same key twice is one recipient.
    ring.add_symmetric(key());
    assert_eq!(ring.encrypt_to(params).unwrap().len(), 1);
    // A signing key cannot be a recipient: an error, not dropped.
    let mut signing = ring.clone();
    signing.add_signing(Some("publisher".into()), Arc::new(SigningKey::generate()));
    let e = signing.encrypt_to(params).unwrap_err();
    assert!(e.to_string().contains("\"publisher\"") && e.to_string().contains("cannot be a recipient"), "{e}");
    // Two different keys under one key id could not be told apart.
    let mut clash = ring.clone();
    clash.add_symmetric(Arc::new(SymmetricKey::new("team", &[8u8; 32]).unwrap()));
    let e = clash.encrypt_to(params).unwrap_err();
    assert!(e.to_string().contains("two different keys") && e.to_string().contains("\"team\""), "{e}");
    expect_err(KeyRing::new().encrypt_to(params), "InvalidInput");

    // A chunk size outside the format's range is refused before anything is written.
    let dir = scratch("crypt-chunk-size");
    let path = dir.join("x.dt");
    let mut options = encrypted_options(vec![RecipientKey::Symmetric(key())], Cipher::Aes256Gcm);
    options.encryption.as_mut().unwrap().chunk_size = 1000;
    let list = tensors();
    let e = save(&path, list.iter().map(|(s, b)| (s.clone(), &b[..])).collect(), &options).unwrap_err();
    assert!(e.to_string().contains("power of two from 4096"), "{e}");
    assert!(!path.exists());
}

#[test]
fn too_many_wrong_passphrases_say_so() {
    let dir = scratch("crypt-kdf-tries");
    let data = tensors();
    let params = Argon2Params { memory_kib: 64, iterations: 1, parallelism: 1 };
    let path = dir.join("p.dt");
    let right = Arc::new(Passphrase::new("right").unwrap());
    write(&path, &data, &encrypted_options(vec![RecipientKey::Passphrase(right.clone(), params)], Cipher::Aes256Gcm));
    let mut keys = KeyRing::new();
    for p in ["a", "b", "c", "d"] {
        keys.add_passphrase(Arc::new(Passphrase::new(p).unwrap()));
    }
    keys.add_passphrase(right);
    let e = Reader::open_with(&path, ReadOptions { keys, ..ReadOptions::default() }).unwrap_err();
    assert!(e.to_string().contains("4 passphrases were tried"), "{e}");
}
