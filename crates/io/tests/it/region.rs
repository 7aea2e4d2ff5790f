//! `Reader::read_region_into`: a region of a tensor gathered as it is read,
//! from plain, digested, signed, encrypted and compressed files, checked
//! against the stored digest or one the caller gives.

use std::sync::Arc;

use deathtensors_format::{Cipher, Dtype, TensorSpec};
use deathtensors_io::{
    save, Compress, EncryptOptions, ErrorKind, KeyRing, ReadOptions, Reader, RecipientKey, RegionCheck, SigningKey,
    SymmetricKey, WriteOptions,
};

use crate::scratch;

/// A `rows x cols` matrix of u32 whose element `(r, c)` is `r * 100_000 + c`.
fn matrix(rows: u64, cols: u64) -> (TensorSpec, Vec<u8>) {
    let bytes = (0..rows).flat_map(|r| (0..cols).flat_map(move |c| ((r * 100_000 + c) as u32).to_le_bytes())).collect();
    (TensorSpec::new("m", Dtype::U32, [rows, cols]), bytes)
}

/// The region, element by element, as it must come out.
fn expected(start: [u64; 2], len: [u64; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in start[0]..start[0] + len[0] {
        for c in start[1]..start[1] + len[1] {
            out.extend(((r * 100_000 + c) as u32).to_le_bytes());
        }
    }
    out
}

fn region(r: &Reader, start: [u64; 2], len: [u64; 2], check: RegionCheck) -> deathtensors_io::Result<Vec<u8>> {
    let mut buf = vec![0xAA; (len[0] * len[1] * 4) as usize];
    r.read_region_into("m", &start, &len, &mut buf, check).map(|()| buf)
}

/// Regions a resharded load asks for: column bands, row bands, single
/// rows and elements, the whole tensor, empty ones.
const REGIONS: &[([u64; 2], [u64; 2])] = &[
    ([0, 0], [300, 517]),
    ([0, 0], [300, 258]),
    ([0, 258], [300, 259]),
    ([17, 100], [250, 3]),
    ([120, 0], [64, 517]),
    ([299, 516], [1, 1]),
    ([5, 7], [0, 9]),
];

#[test]
fn regions_of_plain_and_digested_files_match_the_elements() {
    let dir = scratch("region-plain");
    // 300 x 517 x 4 bytes: about 600 KiB, three 256 KiB pieces, rows that
    // straddle pieces.
    let (spec, bytes) = matrix(300, 517);
    let plain = dir.join("plain.dt");
    let digested = dir.join("digested.dt");
    save(&plain, vec![(spec.clone(), &bytes[..])], &WriteOptions::default()).unwrap();
    save(
        &digested,
        vec![(spec, &bytes[..])],
        &WriteOptions { checksum: true, footer: false, ..WriteOptions::default() },
    )
    .unwrap();
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref().try_into().unwrap();
    for &(start, len) in REGIONS {
        let want = expected(start, len);
        let p = Reader::open(&plain).unwrap();
        assert_eq!(region(&p, start, len, RegionCheck::Unchecked).unwrap(), want, "{start:?} {len:?}");
        assert_eq!(region(&p, start, len, RegionCheck::Digest(digest)).unwrap(), want);
        let d = Reader::open(&digested).unwrap();
        assert_eq!(region(&d, start, len, RegionCheck::Stored).unwrap(), want);
        assert_eq!(region(&d, start, len, RegionCheck::Unchecked).unwrap(), want);
    }
    // No digest in the file: nothing to check against.
    let err = region(&Reader::open(&plain).unwrap(), [0, 0], [1, 1], RegionCheck::Stored).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NoChecksum { .. }), "{err}");
}

#[test]
fn a_damaged_tensor_fails_any_checked_region_and_zeroes_the_buffer() {
    let dir = scratch("region-damaged");
    let (spec, bytes) = matrix(300, 517);
    let path = dir.join("m.dt");
    save(&path, vec![(spec, &bytes[..])], &WriteOptions { checksum: true, footer: false, ..WriteOptions::default() })
        .unwrap();
    // Damage a byte in the last rows, far from the region read below.
    let at = Reader::open(&path).unwrap().tensor("m").unwrap().file_offset as usize + bytes.len() - 10;
    let mut file = std::fs::read(&path).unwrap();
    file[at] ^= 0x01;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open(&path).unwrap();
    let mut buf = vec![0xAA; 10 * 20 * 4];
    let err = r.read_region_into("m", &[0, 0], &[10, 20], &mut buf, RegionCheck::Stored).unwrap_err();
    match err.kind() {
        ErrorKind::TensorDigestMismatch { tensor, .. } => assert_eq!(tensor, "m"),
        other => panic!("{other:?}"),
    }
    assert!(buf.iter().all(|&b| b == 0));
    // The caller's digest (of the undamaged bytes) fails too.
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref().try_into().unwrap();
    let err = region(&r, [0, 0], [10, 20], RegionCheck::Digest(digest)).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    // Unchecked, only the region's bytes are read: the damage is outside.
    assert_eq!(region(&r, [0, 0], [10, 20], RegionCheck::Unchecked).unwrap(), expected([0, 0], [10, 20]));
}

#[test]
fn regions_that_do_not_fit_are_refused_naming_the_dimension() {
    let dir = scratch("region-bad");
    let (spec, bytes) = matrix(4, 6);
    let path = dir.join("m.dt");
    save(&path, vec![(spec, &bytes[..])], &WriteOptions::default()).unwrap();
    let r = Reader::open(&path).unwrap();
    let mut buf = vec![0u8; 4];
    let err = r.read_region_into("m", &[0, 5], &[1, 2], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("dimension 1 is 6 long") && err.to_string().contains("\"m\""), "{err}");
    let err = r.read_region_into("m", &[0], &[1], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(err.to_string().contains("2 dimensions"), "{err}");
    let err = r.read_region_into("m", &[0, 0], &[1, 2], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(err.to_string().contains("buffer is 4 bytes"), "{err}");
    let err = r.read_region_into("nope", &[0, 0], &[1, 1], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorNotFound(_)), "{err}");
}

#[test]
fn encrypted_compressed_and_signed_files_give_the_same_regions() {
    let dir = scratch("region-kinds");
    let (spec, bytes) = matrix(300, 517);
    let key = Arc::new(SymmetricKey::new("team", &[7u8; 32]).unwrap());
    let signer = Arc::new(SigningKey::generate());
    let kinds = [
        (
            "encrypted",
            WriteOptions {
                encryption: Some(EncryptOptions {
                    cipher: Cipher::Aes256Gcm,
                    chunk_size: 4096,
                    recipients: vec![RecipientKey::Symmetric(key.clone())],
                    seal_header: false,
                }),
                ..WriteOptions::default()
            },
        ),
        (
            "compressed",
            WriteOptions { compress: Compress::Chunked { level: 1 }, checksum: true, ..WriteOptions::default() },
        ),
        ("signed", WriteOptions { signers: vec![signer.clone()], ..WriteOptions::default() }),
    ];
    for (name, options) in kinds {
        let path = dir.join(format!("{name}.dt"));
        save(&path, vec![(spec.clone(), &bytes[..])], &options).unwrap();
        let mut keys = KeyRing::new();
        keys.add_symmetric(key.clone());
        let read = ReadOptions { keys, trusted_signers: vec![signer.verifying_key()], ..ReadOptions::default() };
        let read = if name == "signed" { read } else { ReadOptions { trusted_signers: vec![], ..read } };
        let r = Reader::open_with(&path, read).unwrap();
        for &(start, len) in REGIONS {
            let got = region(&r, start, len, RegionCheck::Unchecked).unwrap();
            assert_eq!(got, expected(start, len), "{name} {start:?} {len:?}");
        }
    }
    // A signed file read under its signer checks every read, asked or not:
    // a damaged byte outside the region still fails it.
    let path = dir.join("signed.dt");
    let at = Reader::open(&path).unwrap().tensor("m").unwrap().file_offset as usize + 100;
    let mut file = std::fs::read(&path).unwrap();
    file[at] ^= 0x01;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open_with(
        &path,
        ReadOptions { trusted_signers: vec![signer.verifying_key()], ..ReadOptions::default() },
    )
    .unwrap();
    let err = region(&r, [200, 0], [10, 10], RegionCheck::Unchecked).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    // A caller's digest of the damaged bytes does not stand in for the
    // signed one.
    let t = r.tensor("m").unwrap();
    let start = t.file_offset as usize;
    let damaged = &file[start..start + t.info.byte_len() as usize];
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, damaged).as_ref().try_into().unwrap();
    let err = region(&r, [200, 0], [10, 10], RegionCheck::Digest(digest)).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
}
