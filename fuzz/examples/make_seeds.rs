//! Writes the seeds that reach encryption and signatures (FORMAT.md 10 and
//! 11) into `seeds/`: whole encrypted and signed files for `file`, their
//! JSON headers for `deathtensors_header`, and signature blocks for
//! `signatures`. Run from `fuzz/` after a change to those sections:
//!
//! ```text
//! cargo run --example make_seeds
//! ```
//!
//! Every value that would be random or a digest is a fixed made-up pattern,
//! so the seeds are the same on every run: the parser checks their layout,
//! not their cryptography. The tag table, header MAC, blob and footer are
//! zeros of the right length (FORMAT.md 10.1), and the signatures are not
//! valid Ed25519 signatures.

use std::path::Path;

use deathtensors_format::{
    chunk_count, encode_signatures, Argon2Params, Cipher, Codec, Compression, Dtype, Encryption, Flags, Head, Header,
    Limits, Metadata, Recipient, SignatureRecord, TensorSpec, FOOTER_LEN, MIN_CHUNK_SIZE, TAG_LEN,
};

/// A header of compressed tensors (flag bit 5): a BF16 tensor of three
/// 4 KiB chunks (one raw), an F32 one of one chunk, a tiny raw one.
fn compressed(checksum: bool) -> Header {
    let mut specs = vec![
        TensorSpec::new("h", Dtype::BF16, [5000]),
        TensorSpec::new("w", Dtype::F32, [1000]),
        TensorSpec::new("b", Dtype::U8, [8]),
    ];
    if checksum {
        for (i, s) in specs.iter_mut().enumerate() {
            s.sha256 = Some([i as u8; 32]);
        }
    }
    let tables = vec![Some(vec![4096, 17, 1808]), Some(vec![900]), None];
    let c = Compression { codec: Codec::Zstd, level: 3, chunk_size: 4096 };
    Header::new_compressed(specs, Metadata::new(), 64, Some("seeds".into()), c, tables, &Limits::DEFAULT).unwrap()
}

fn symmetric(kid: &str) -> Recipient {
    Recipient::Symmetric { kid: kid.into(), wrapped_key: [0x11; 48] }
}

fn x25519(kid: &str) -> Recipient {
    Recipient::X25519 { kid: kid.into(), ephemeral_public_key: [0x22; 32], wrapped_key: [0x33; 48] }
}

fn passphrase() -> Recipient {
    Recipient::Passphrase { kdf: Argon2Params::DEFAULT, salt: [0x44; 16], wrapped_key: [0x55; 48] }
}

fn record(n: u8) -> SignatureRecord {
    let mut public_key = [0xd7; 32];
    public_key[0] = n;
    SignatureRecord { public_key, signature: [n ^ 0xa5; 64] }
}

/// The tensors of the seeds: a 2×2 matrix, an empty tensor (one empty
/// chunk), and with `big` a tensor of two chunks, the second partial.
fn specs(big: bool, digests: bool) -> Vec<TensorSpec> {
    let mut specs = vec![
        TensorSpec::new("model.w", Dtype::F32, [2, 2]),
        TensorSpec::new("empty", Dtype::BF16, [0, 3]),
        TensorSpec::new("bias", Dtype::I8, [3]),
    ];
    if big {
        specs.push(TensorSpec::new("big", Dtype::U8, [MIN_CHUNK_SIZE + 100]));
    }
    if digests {
        for (i, s) in specs.iter_mut().enumerate() {
            s.sha256 = Some([0xc0 + i as u8; 32]);
        }
    }
    specs
}

fn header(specs: Vec<TensorSpec>, alignment: u64, encryption: Option<(Cipher, Vec<Recipient>)>) -> Header {
    let mut metadata = Metadata::new();
    metadata.insert("license".into(), "MIT".into());
    let header = Header::new_deathtensors(specs, metadata, alignment, Some("seeds".into()), &Limits::DEFAULT).unwrap();
    let Some((cipher, recipients)) = encryption else {
        return header;
    };
    let chunks: u64 = header.tensors().iter().map(|t| chunk_count(t.byte_len(), MIN_CHUNK_SIZE)).sum();
    let section = Encryption {
        cipher,
        chunk_size: MIN_CHUNK_SIZE,
        file_id: *b"seed file id 16b",
        nonce_salt: *b"nonce salt12",
        tag_table_len: chunks * TAG_LEN as u64,
        tag_table_sha256: [0x66; 32],
        recipients,
        sealed_header: None,
    };
    header.with_encryption(section).unwrap()
}

/// The whole file: head, zero tag table, MAC, padding and blob, a zero
/// footer with flag bit 1, and a block of `signers` records with bit 3.
fn file(header: &Header, flags: Flags, signers: u8) -> Vec<u8> {
    let mut out = Head::encode(header, flags).unwrap();
    let tables = Head::tables_for(header, out.len() as u64).unwrap();
    let data_start = tables.map_or(out.len() as u64, |t| t.data_start);
    let footer = if flags.contains(Flags::CHECKSUM) { FOOTER_LEN } else { 0 };
    out.resize((data_start + header.data_len() + footer) as usize, 0);
    if flags.contains(Flags::SIGNED) {
        let records: Vec<_> = (1..=signers).map(record).collect();
        out.extend_from_slice(&encode_signatures(&records).unwrap());
    }
    // The seed must be what the reader accepts.
    let body = out.len() as u64 - if flags.contains(Flags::SIGNED) { 16 + 96 * u64::from(signers) } else { 0 };
    let head = Head::parse(&out, body, &Limits::DEFAULT).unwrap();
    assert_eq!(&head.header, header);
    out
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let path = dir.join(target).join(name);
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    println!("{} ({} bytes)", path.display(), bytes.len());
}

fn main() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    std::fs::create_dir_all(seeds.join("signatures")).unwrap();
    let aes = Cipher::Aes256Gcm;
    let chacha = Cipher::ChaCha20Poly1305;
    let enc = Flags::ENCRYPTED;
    let cases: Vec<(&str, Header, Flags, u8)> = vec![
        ("dt-enc-symmetric", header(specs(false, false), 64, Some((aes, vec![symmetric("team key")]))), enc, 0),
        (
            "dt-enc-x25519-chacha-checksum",
            header(specs(true, true), 128, Some((chacha, vec![x25519("alice@example")]))),
            enc | Flags::CHECKSUM,
            0,
        ),
        (
            "dt-enc-passphrase-signed",
            header(specs(false, true), 64, Some((aes, vec![passphrase()]))),
            enc | Flags::CHECKSUM | Flags::SIGNED,
            2,
        ),
        (
            "dt-enc-every-recipient-kind",
            header(
                specs(true, true),
                256,
                Some((chacha, vec![symmetric("k1"), x25519("bob \u{e9}"), passphrase(), symmetric("k2")])),
            ),
            enc | Flags::SIGNED,
            1,
        ),
        ("dt-signed-plain", header(specs(false, true), 64, None), Flags::CHECKSUM | Flags::SIGNED, 1),
        ("dt-signed-plain-no-footer", header(specs(false, true), 64, None), Flags::SIGNED, 3),
        ("dt-compressed", compressed(false), Flags::COMPRESSED, 0),
        ("dt-compressed-checksum-signed", compressed(true), Flags::COMPRESSED | Flags::CHECKSUM | Flags::SIGNED, 1),
    ];
    for (name, header, flags, signers) in &cases {
        let bytes = file(header, *flags, *signers);
        write(&seeds, "file", name, &bytes);
        if header.encryption().is_some() || header.compression().is_some() {
            let head = Head::encode(header, *flags).unwrap();
            write(&seeds, "deathtensors_header", name, &head[24..]);
        }
        if flags.contains(Flags::SIGNED) && *signers > 1 {
            // A signed file as a whole: the block at its end.
            write(&seeds, "signatures", &format!("file-{name}"), &bytes);
        }
    }
    for n in [1u8, 2, 64] {
        let records: Vec<_> = (1..=n).map(record).collect();
        write(&seeds, "signatures", &format!("block-{n}"), &encode_signatures(&records).unwrap());
    }
}
