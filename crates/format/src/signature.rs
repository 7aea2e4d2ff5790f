//! The signature block of a signed file (flag bit 3, `docs/FORMAT.md`
//! section 11) and the message its Ed25519 signatures sign. Verifying is
//! `deathtensors-io`'s job; this module only lays out bytes.

use alloc::vec::Vec;

use crate::reader::Reader;
use crate::{Error, ErrorKind, Result};

/// The last 8 bytes of a signed file.
pub const SIGNATURE_MAGIC: [u8; 8] = *b"DTSIGEND";
/// Bytes of the block's trailer: count, reserved, magic.
pub const SIGNATURE_TRAILER_LEN: u64 = 16;
/// Bytes of one record: public key and signature.
pub const SIGNATURE_RECORD_LEN: u64 = 96;
/// The most signatures one file may carry.
pub const MAX_SIGNATURES: u32 = 64;

/// What every signed message starts with.
const SIGNATURE_CONTEXT: &[u8] = b"deathtensors v1 signature\0";

/// One Ed25519 signature and the public key that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureRecord {
    /// The signer's Ed25519 public key.
    pub public_key: [u8; 32],
    /// The signature.
    pub signature: [u8; 64],
}

fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::InvalidSignatureBlock { what })
}

/// Decodes the trailer (the last 16 bytes of a signed file of `file_len`
/// bytes) and returns the length of the whole block, trailer included.
///
/// # Errors
/// `InvalidSignatureBlock` for a bad magic, a nonzero reserved field, or a
/// count of 0 or over [`MAX_SIGNATURES`]; `Truncated` for fewer than 16
/// bytes, or a block longer than the file.
pub fn signature_block_len(trailer: &[u8], file_len: u64) -> Result<u64> {
    let mut r = Reader::new(trailer);
    let count = r.u32_le("signature count")?;
    let reserved = r.u32_le("signature block reserved field")?;
    if r.array::<8>("signature block magic")? != SIGNATURE_MAGIC {
        return Err(invalid("magic"));
    }
    if reserved != 0 {
        return Err(invalid("reserved field"));
    }
    if count == 0 || count > MAX_SIGNATURES {
        return Err(invalid("signature count"));
    }
    let len = u64::from(count) * SIGNATURE_RECORD_LEN + SIGNATURE_TRAILER_LEN;
    if len > file_len {
        return Err(Error::truncated("signature block", len, file_len));
    }
    Ok(len)
}

/// For a signed file whose signature block does not decode: the error to
/// report if the file is shorter than its body (`body_end`: where the data,
/// and the footer if any, end) plus the smallest signature block, i.e.
/// if it was cut short, rather than the block's own complaint.
pub fn signed_file_truncated(body_end: u64, file_len: u64) -> Option<Error> {
    let needed = body_end.checked_add(SIGNATURE_RECORD_LEN + SIGNATURE_TRAILER_LEN)?;
    (needed > file_len).then(|| Error::truncated("signed file (data, footer and signature block)", needed, file_len))
}

/// Decodes a whole block (records and trailer).
///
/// # Errors
/// As [`signature_block_len`], `InvalidSignatureBlock` if the length does
/// not match the count or a public key appears twice.
pub fn parse_signatures(block: &[u8]) -> Result<Vec<SignatureRecord>> {
    let trailer_at = block
        .len()
        .checked_sub(SIGNATURE_TRAILER_LEN as usize)
        .ok_or_else(|| Error::truncated("signature block", SIGNATURE_TRAILER_LEN, block.len() as u64))?;
    let len = signature_block_len(&block[trailer_at..], block.len() as u64)?;
    if len != block.len() as u64 {
        return Err(invalid("length"));
    }
    let mut r = Reader::new(&block[..trailer_at]);
    let mut out: Vec<SignatureRecord> = Vec::with_capacity(trailer_at / SIGNATURE_RECORD_LEN as usize);
    for _ in 0..trailer_at / SIGNATURE_RECORD_LEN as usize {
        let public_key = r.array::<32>("signer public key")?;
        let signature = r.array::<64>("signature")?;
        if out.iter().any(|s| s.public_key == public_key) {
            return Err(invalid("duplicate signer"));
        }
        out.push(SignatureRecord { public_key, signature });
    }
    Ok(out)
}

/// Encodes a block of signatures.
///
/// # Errors
/// `InvalidSignatureBlock` for no record, over [`MAX_SIGNATURES`], or a
/// public key that appears twice.
pub fn encode_signatures(records: &[SignatureRecord]) -> Result<Vec<u8>> {
    if records.is_empty() || records.len() > MAX_SIGNATURES as usize {
        return Err(invalid("signature count"));
    }
    for (i, s) in records.iter().enumerate() {
        if records[..i].iter().any(|p| p.public_key == s.public_key) {
            return Err(invalid("duplicate signer"));
        }
    }
    let mut out = Vec::with_capacity(records.len() * SIGNATURE_RECORD_LEN as usize + SIGNATURE_TRAILER_LEN as usize);
    for s in records {
        out.extend_from_slice(&s.public_key);
        out.extend_from_slice(&s.signature);
    }
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&SIGNATURE_MAGIC);
    Ok(out)
}

/// The message a signature signs: a context string, the file's prefix and
/// JSON header as stored (`file[0 .. 24 + L]`, bit 3 set), then the footer
/// if the file has one.
pub fn signed_message(head: &[u8], footer: Option<&[u8; 32]>) -> Vec<u8> {
    let mut m = Vec::with_capacity(SIGNATURE_CONTEXT.len() + head.len() + 32);
    m.extend_from_slice(SIGNATURE_CONTEXT);
    m.extend_from_slice(head);
    if let Some(f) = footer {
        m.extend_from_slice(f);
    }
    m
}
