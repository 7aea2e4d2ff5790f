//! Encrypted headers (`docs/FORMAT.md` section 10): any valid `encryption`
//! section on any tensor list survives encode then parse unchanged, chunks
//! tile their tensor, and hostile sections that `testdata/invalid` does not
//! cover are refused (or, at the edge of a rule, accepted).

use deathtensors_format::{
    chunk_count, chunk_nonce, chunk_range, Argon2Params, Cipher, Dtype, Encryption, Flags, Head, Header, Limits,
    Metadata, Recipient, TensorSpec, MAX_CHUNK_SIZE, MAX_KID_LEN, MAX_RECIPIENTS, MIN_CHUNK_SIZE, TAG_LEN,
};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A key id: 1 to 256 bytes of text without control characters, with the
/// characters that stress JSON escaping and byte counting.
fn kid() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[a-zA-Z0-9._\"\\\\/ éü✓\u{2028}\u{1F600}-]{1,300}").unwrap().prop_map(|mut s| {
        while s.len() > MAX_KID_LEN {
            s.pop();
        }
        s
    })
}

fn argon2() -> impl Strategy<Value = Argon2Params> {
    // Argon2 needs at least 8 KiB a lane.
    (1u32..=16).prop_flat_map(|parallelism| {
        (8 * parallelism..=1 << 20, 1u32..=16).prop_map(move |(memory_kib, iterations)| Argon2Params {
            memory_kib,
            iterations,
            parallelism,
        })
    })
}

fn recipient() -> impl Strategy<Value = Recipient> {
    prop_oneof![
        (kid(), any::<[u8; 48]>()).prop_map(|(kid, wrapped_key)| Recipient::Symmetric { kid, wrapped_key }),
        (kid(), any::<[u8; 32]>(), any::<[u8; 48]>()).prop_map(|(kid, ephemeral_public_key, wrapped_key)| {
            Recipient::X25519 { kid, ephemeral_public_key, wrapped_key }
        }),
        (argon2(), any::<[u8; 16]>(), any::<[u8; 48]>()).prop_map(|(kdf, salt, wrapped_key)| Recipient::Passphrase {
            kdf,
            salt,
            wrapped_key
        }),
    ]
}

fn cipher() -> impl Strategy<Value = Cipher> {
    prop_oneof![Just(Cipher::Aes256Gcm), Just(Cipher::ChaCha20Poly1305)]
}

/// A power of two from 4 KiB to 64 MiB.
fn chunk_size() -> impl Strategy<Value = u64> {
    (MIN_CHUNK_SIZE.trailing_zeros()..=MAX_CHUNK_SIZE.trailing_zeros()).prop_map(|p| 1u64 << p)
}

/// Tensors of up to a megabyte, so that small chunk sizes give many chunks.
fn specs() -> impl Strategy<Value = Vec<TensorSpec>> {
    let dtype = proptest::sample::select(Dtype::ALL.to_vec());
    let name = proptest::string::string_regex("[a-zA-Z0-9._\"\\\\/ é✓\u{1F600}-]{1,16}").unwrap();
    let spec = (name, dtype, proptest::collection::vec(0u64..40, 0..4)).prop_map(|(name, dtype, mut shape)| {
        // Sub-byte dtypes need whole bytes.
        if dtype.bits() < 8 {
            shape.push(4);
        }
        TensorSpec::new(name, dtype, shape)
    });
    proptest::collection::vec(spec, 0..10).prop_map(|mut v| {
        let mut seen = std::collections::HashSet::new();
        v.retain(|s| seen.insert(s.name.clone()));
        v
    })
}

/// The section for `header`'s tensors, with its tag table length computed.
fn section(
    header: &Header,
    cipher: Cipher,
    chunk_size: u64,
    ids: ([u8; 16], [u8; 12], [u8; 32]),
    r: Vec<Recipient>,
) -> Encryption {
    let chunks: u64 = header.tensors().iter().map(|t| chunk_count(t.byte_len(), chunk_size)).sum();
    Encryption {
        cipher,
        chunk_size,
        file_id: ids.0,
        nonce_salt: ids.1,
        tag_table_len: chunks * TAG_LEN as u64,
        tag_table_sha256: ids.2,
        recipients: r,
        sealed_header: None,
    }
}

/// A whole file for an encrypted `header`: head, a zero tag table, a zero
/// MAC, zero padding, a zero blob and a footer if flagged (and no signature
/// block: `Head::parse` is given the file without it).
fn file(header: &Header, flags: Flags) -> Vec<u8> {
    let mut bytes = Head::encode(header, flags).unwrap();
    let tables = Head::tables_for(header, bytes.len() as u64).unwrap().unwrap();
    assert_eq!(tables.tags.0, bytes.len() as u64);
    bytes.resize((tables.data_start + header.data_len()) as usize, 0);
    if flags.contains(Flags::CHECKSUM) {
        bytes.extend_from_slice(&[0; 32]);
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn encrypted_headers_roundtrip(
        specs in specs(),
        alignment in (0u32..13).prop_map(|p| 1u64 << p),
        cipher in cipher(),
        chunk_size in chunk_size(),
        ids in any::<([u8; 16], [u8; 12], [u8; 32])>(),
        recipients in proptest::collection::vec(recipient(), 1..=MAX_RECIPIENTS),
        checksum in any::<bool>(),
        signed in any::<bool>(),
    ) {
        let plain = Header::new_deathtensors(specs, Metadata::new(), alignment, None, &Limits::DEFAULT).unwrap();
        let enc = section(&plain, cipher, chunk_size, ids, recipients);
        let header = plain.with_encryption(enc.clone()).unwrap();
        let mut flags = Flags::ENCRYPTED;
        if checksum {
            flags = flags | Flags::CHECKSUM;
        }
        // A signed file needs every tensor's digest (FORMAT.md 11).
        if signed && header.has_tensor_digests() {
            flags = flags | Flags::SIGNED;
        }
        let bytes = file(&header, flags);
        let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
        prop_assert_eq!(&head.header, &header);
        prop_assert_eq!(head.header.encryption(), Some(&enc));
        prop_assert_eq!(head.flags, flags);
        let tables = head.tables.unwrap();
        prop_assert_eq!(tables.tags.1 - tables.tags.0, enc.tag_table_len);
        prop_assert_eq!(tables.mac, (tables.tags.1, tables.tags.1 + 32));
        prop_assert_eq!(head.data_start, tables.data_start);
        prop_assert_eq!(head.data_start % 64.max(alignment), 0);
        prop_assert_eq!(head.header_end % 8, 0);
        // The chunk bases count the chunks of the tensors before each one.
        let mut base = 0;
        for (i, t) in header.tensors().iter().enumerate() {
            prop_assert_eq!(header.chunk_base(i), Some(base));
            base += chunk_count(t.byte_len(), chunk_size);
        }
        prop_assert_eq!(base * TAG_LEN as u64, enc.tag_table_len);
        prop_assert_eq!(file(&head.header, flags), bytes);
    }

    #[test]
    fn chunks_tile_their_tensor(len in prop_oneof![0u64..20_000, any::<u64>()], chunk_size in chunk_size()) {
        let count = chunk_count(len, chunk_size);
        prop_assert_eq!(count, len.div_ceil(chunk_size).max(1));
        prop_assert_eq!(chunk_range(len, chunk_size, 0).0, 0);
        prop_assert_eq!(chunk_range(len, chunk_size, count - 1).1, len);
        for j in [0, 1, count / 2, count.saturating_sub(2)] {
            if j + 1 < count {
                let (a, b) = chunk_range(len, chunk_size, j);
                prop_assert_eq!(b - a, chunk_size);
                prop_assert_eq!(chunk_range(len, chunk_size, j + 1).0, b);
            }
        }
    }

    #[test]
    fn nonces_are_the_salt_xor_the_position(salt in any::<[u8; 12]>(), i in any::<u32>(), j in any::<u64>()) {
        let n = chunk_nonce(&salt, i, j);
        let mut position = [0u8; 12];
        position[..4].copy_from_slice(&i.to_le_bytes());
        position[4..].copy_from_slice(&j.to_le_bytes());
        for k in 0..12 {
            prop_assert_eq!(n[k] ^ salt[k], position[k]);
        }
    }
}

/// A well-formed section for the one 8-byte tensor of [`hostile`] (one chunk).
fn good() -> Value {
    json!({
        "cipher": "AES-256-GCM", "chunk_size": 4096, "file_id": "11".repeat(16), "nonce_salt": "22".repeat(12),
        "tag_table": {"length": 16, "sha256": "33".repeat(32)},
        "recipients": [{"kind": "symmetric", "kid": "k", "wrapped_key": "44".repeat(48)}],
    })
}

fn symmetric(kid: &str) -> Value {
    json!({"kind": "symmetric", "kid": kid, "wrapped_key": "44".repeat(48)})
}

fn passphrase(memory_kib: u64, iterations: u64, parallelism: u64) -> Value {
    json!({"kind": "passphrase", "kdf": "argon2id", "memory_kib": memory_kib, "iterations": iterations,
           "parallelism": parallelism, "salt": "55".repeat(16), "wrapped_key": "44".repeat(48)})
}

/// `good()` with one top-level field replaced.
fn with(field: &str, value: Value) -> Value {
    let mut s = good();
    s[field] = value;
    s
}

/// An encrypted file, written by hand, whose header has this `encryption`
/// section and the tensors `w` (8 bytes) and, if `big` is given, `big` (U8
/// of that many elements; its blob is not in the file).
fn hostile(section: &Value, big: Option<u64>) -> (Vec<u8>, u64) {
    let mut tensors = json!({"w": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8], "metadata": {}}});
    if let Some(n) = big {
        tensors["big"] = json!({"dtype": "U8", "shape": [n], "data_offsets": [64, 64 + n], "metadata": {}});
    }
    let header = format!(
        r#"{{"format":"deathtensors","format_version":1,"alignment":64,"encryption":{section},"global_metadata":{{}},"tensors":{tensors}}}"#
    );
    let len = (24 + header.len()).next_multiple_of(64) - 24;
    let mut bytes = b"DTLEGION".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&Flags::ENCRYPTED.bits().to_le_bytes());
    bytes.extend_from_slice(&(len as u64).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(24 + len, b' ');
    let table = section["tag_table"]["length"].as_u64().unwrap_or(0).min(1 << 20);
    bytes.resize(((bytes.len() as u64 + table + 32).next_multiple_of(64)) as usize, 0);
    let data = 8 + big.map_or(0, |n| 56 + n);
    let file_len = bytes.len() as u64 + data;
    bytes.resize(bytes.len() + 8, 0);
    (bytes, file_len)
}

/// Parses a file with `section`: `Ok` or the name of the error kind.
#[track_caller]
fn check(section: Value, expected: Result<(), &str>) {
    check_with(section, None, expected);
}

#[track_caller]
fn check_with(section: Value, big: Option<u64>, expected: Result<(), &str>) {
    let (bytes, file_len) = hostile(&section, big);
    let got = Head::parse(&bytes, file_len, &Limits::DEFAULT).map(|_| ()).map_err(|e| {
        let debug = format!("{:?}", e.kind());
        debug[..debug.find([' ', '{', '(']).unwrap_or(debug.len())].to_string()
    });
    assert_eq!(got, expected.map_err(str::to_string), "{section}");
}

#[test]
fn the_well_formed_section_is_accepted() {
    check(good(), Ok(()));
    check(with("cipher", json!("CHACHA20-POLY1305")), Ok(()));
}

#[test]
fn chunk_sizes_at_the_bounds_are_accepted() {
    check(with("chunk_size", json!(MIN_CHUNK_SIZE)), Ok(()));
    check(with("chunk_size", json!(MAX_CHUNK_SIZE)), Ok(()));
}

#[test]
fn kids_are_counted_in_bytes() {
    check(with("recipients", json!([symmetric(&"k".repeat(256))])), Ok(()));
    check(with("recipients", json!([symmetric(&"é".repeat(128))])), Ok(()));
    check(with("recipients", json!([symmetric(&format!("{}k", "é".repeat(128)))])), Err("InvalidEncryption"));
}

#[test]
fn kids_refuse_every_control_character_as_names_do() {
    check(with("recipients", json!([symmetric("a\u{7f}")])), Err("InvalidEncryption"));
    check(with("recipients", json!([symmetric("a\u{85}")])), Err("InvalidEncryption"));
    check(with("recipients", json!([symmetric("a\u{1f}")])), Err("InvalidEncryption"));
    check(with("recipients", json!([symmetric("a\u{2028}b")])), Ok(()));
}

#[test]
fn sixty_four_recipients_of_every_kind_are_accepted() {
    let list: Vec<Value> = (0..64)
        .map(|i| match i % 3 {
            0 => symmetric(&format!("k{i}")),
            1 => json!({"kind": "x25519", "kid": format!("x{i}"), "ephemeral_public_key": "66".repeat(32),
                        "wrapped_key": "44".repeat(48)}),
            _ => passphrase(64, 1, 1),
        })
        .collect();
    check(with("recipients", Value::Array(list)), Ok(()));
}

#[test]
fn recipients_may_share_a_kid() {
    check(with("recipients", json!([symmetric("k"), symmetric("k")])), Ok(()));
}

#[test]
fn argon2_parameters_at_the_bounds_are_accepted() {
    check(with("recipients", json!([passphrase(8, 1, 1)])), Ok(()));
    check(with("recipients", json!([passphrase(1 << 20, 16, 16)])), Ok(()));
}

#[test]
fn argon2_parameters_past_the_bounds_are_refused() {
    check(with("recipients", json!([passphrase(7, 1, 1)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(64, 17, 1)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(64, 1, 17)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(64, 0, 1)])), Err("InvalidEncryption"));
    // Less than 8 KiB a lane: no Argon2 implementation derives it.
    check(with("recipients", json!([passphrase(8, 1, 16)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(127, 1, 16)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(128, 1, 16)])), Ok(()));
}

#[test]
fn argon2_parameters_that_wrap_a_u32_are_refused() {
    // 2^32 + 64 would be 64 KiB, a valid value, if truncated to a u32.
    check(with("recipients", json!([passphrase((1 << 32) + 64, 1, 1)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(64, (1 << 32) + 1, 1)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(64, 1, (1 << 32) + 1)])), Err("InvalidEncryption"));
    check(with("recipients", json!([passphrase(u64::MAX, 1, 1)])), Err("InvalidEncryption"));
}

#[test]
fn recipient_fields_are_exact() {
    let x25519 =
        |epk: &str| json!({"kind": "x25519", "kid": "x", "ephemeral_public_key": epk, "wrapped_key": "44".repeat(48)});
    check(with("recipients", json!([x25519(&"66".repeat(31))])), Err("InvalidEncryption"));
    check(with("recipients", json!([x25519(&"66".repeat(33))])), Err("InvalidEncryption"));
    check(with("recipients", json!([x25519(&"6G".repeat(32))])), Err("InvalidEncryption"));
    let no_epk = json!({"kind": "x25519", "kid": "x", "wrapped_key": "44".repeat(48)});
    check(with("recipients", json!([no_epk])), Err("MissingField"));
    let mut short_salt = passphrase(64, 1, 1);
    short_salt["salt"] = json!("55".repeat(15));
    check(with("recipients", json!([short_salt])), Err("InvalidEncryption"));
    let mut with_kid = passphrase(64, 1, 1);
    with_kid["kid"] = json!("p");
    check(with("recipients", json!([with_kid])), Err("UnknownField"));
    let mut with_salt = symmetric("k");
    with_salt["salt"] = json!("55".repeat(16));
    check(with("recipients", json!([with_salt])), Err("UnknownField"));
    check(
        with("recipients", json!([{"kind": 1, "kid": "k", "wrapped_key": "44".repeat(48)}])),
        Err("InvalidEncryption"),
    );
    check(with("recipients", json!([symmetric("k"), "k"])), Err("WrongType"));
}

#[test]
fn hex_fields_are_exact() {
    check(with("nonce_salt", json!("22".repeat(13))), Err("InvalidEncryption"));
    check(with("file_id", json!("zz".repeat(16))), Err("InvalidEncryption"));
    check(with("tag_table", json!({"length": 16, "sha256": "AB".repeat(32)})), Err("InvalidEncryption"));
    check(with("tag_table", json!({"length": 16})), Err("InvalidEncryption"));
    let mut wrapped = symmetric("k");
    wrapped["wrapped_key"] = json!("44".repeat(49));
    check(with("recipients", json!([wrapped])), Err("InvalidEncryption"));
}

#[test]
fn tag_table_lengths_that_overflow_or_exceed_the_limit_are_refused() {
    // Bounded before it is compared with the tensors' chunks.
    check(with("tag_table", json!({"length": u64::MAX - 15, "sha256": "33".repeat(32)})), Err("LimitExceeded"));
    // 16 bytes per 4 KiB chunk: 6,553,601 chunks need 100 MiB + 16 bytes of tags.
    let chunks = Limits::DEFAULT.max_header_len / TAG_LEN as u64 + 1;
    let table = json!({"length": (chunks + 1) * TAG_LEN as u64, "sha256": "33".repeat(32)});
    check_with(with("tag_table", table), Some(chunks * 4096), Err("LimitExceeded"));
}

#[test]
fn a_file_without_tensors_has_an_empty_tag_table() {
    let plain = Header::new_deathtensors(Vec::new(), Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let r = vec![Recipient::Symmetric { kid: "k".into(), wrapped_key: [0; 48] }];
    let enc = section(&plain, Cipher::Aes256Gcm, 4096, ([1; 16], [2; 12], [3; 32]), r);
    assert_eq!(enc.tag_table_len, 0);
    let header = plain.with_encryption(enc).unwrap();
    let bytes = file(&header, Flags::ENCRYPTED);
    let head = Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap();
    assert_eq!(head.header, header);
    let tables = head.tables.unwrap();
    assert_eq!(tables.tags.0, tables.tags.1);
}

/// A sealed file's outer header lists no tensor, and its tag table, which
/// readers read before any key is checked, is still bounded by the limits.
#[test]
fn a_sealed_outer_header_bounds_its_tag_table() {
    let empty = Header::new_deathtensors(Vec::new(), Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let mut enc = section(
        &empty,
        Cipher::Aes256Gcm,
        4096,
        ([1; 16], [2; 12], [3; 32]),
        vec![Recipient::Symmetric { kid: "k".into(), wrapped_key: [0; 48] }],
    );
    enc.sealed_header = Some(100);
    enc.tag_table_len = 2_000_000_000 * TAG_LEN as u64;
    let e = empty.with_encryption(enc).unwrap_err();
    assert!(matches!(e.kind(), deathtensors_format::ErrorKind::LimitExceeded { what: "tag table length", .. }), "{e}");
}
