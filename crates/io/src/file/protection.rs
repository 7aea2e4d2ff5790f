//! What a file's header says of its protection, needing no key: how it is
//! encrypted (ours, or cryptotensors'), who can decrypt it, its policy, and
//! what its signature covers. For `inspect` and the Python `encryption()`,
//! `policy()` and `signature_covers()`, described once.

use deathtensors_format::{Cryptotensors, CtAlg};

use crate::file::reader::Reader;
use crate::trust::access::POLICY_KEY;

/// How an encrypted file is encrypted, as its header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncryptionInfo {
    /// `"deathtensors"` (`docs/FORMAT.md` section 10) or `"cryptotensors"`
    /// (section 12).
    pub scheme: &'static str,
    /// The cipher: `AES-256-GCM` or `CHACHA20-POLY1305` (ours); also
    /// `AES-128-GCM`, or the `alg` verbatim when unknown (cryptotensors').
    pub cipher: String,
    /// The chunk size; None for a cryptotensors file of one AEAD message
    /// per tensor (its version 1).
    pub chunk_size: Option<u64>,
    /// Who can decrypt it: each recipient's kind (`symmetric`, `x25519`,
    /// `passphrase`) and key id, if any.
    pub recipients: Vec<(&'static str, Option<String>)>,
    /// How many tensors are stored encrypted (all of ours; those a
    /// cryptotensors file lists).
    pub encrypted_tensors: usize,
    /// The key id of a cryptotensors file's signer: its signature is
    /// checked with that key's public half only (ours carry the key).
    pub signer_kid: Option<String>,
}

/// The usual name of a cryptotensors `alg`.
fn ct_cipher(ct: &Cryptotensors) -> String {
    match ct.alg() {
        Some(CtAlg::Aes128Gcm) => "AES-128-GCM".into(),
        Some(CtAlg::Aes256Gcm) => "AES-256-GCM".into(),
        Some(CtAlg::ChaCha20Poly1305) => "CHACHA20-POLY1305".into(),
        None => ct.enc.alg.clone(),
    }
}

impl Reader {
    /// How the file is encrypted, or None; needs no key.
    pub fn encryption_info(&self) -> Option<EncryptionInfo> {
        let header = self.header();
        if let Some(e) = header.encryption() {
            return Some(EncryptionInfo {
                scheme: "deathtensors",
                cipher: e.cipher.name().into(),
                chunk_size: Some(e.chunk_size),
                recipients: e.recipients.iter().map(|r| (r.kind(), r.kid().map(str::to_string))).collect(),
                encrypted_tensors: header.len(),
                signer_kid: None,
            });
        }
        let ct = Cryptotensors::from_header(header).ok().flatten()?;
        Some(EncryptionInfo {
            scheme: "cryptotensors",
            cipher: ct_cipher(&ct),
            chunk_size: ct.chunked(),
            recipients: vec![("symmetric", ct.enc.kid.clone())],
            encrypted_tensors: ct.tensors.len(),
            signer_kid: ct.sign.kid.clone(),
        })
    }

    /// The Rego policy a key holder's open evaluates, or None: ours in the
    /// `__policy__` metadata (of the inner header, when sealed and opened
    /// with the key), a cryptotensors file's local policy.
    pub fn policy(&self) -> Option<String> {
        if let Some(ct) = Cryptotensors::from_header(self.header()).ok().flatten() {
            return Some(ct.policy.local);
        }
        if !self.is_encrypted() {
            return None;
        }
        self.header().metadata().and_then(|m| m.get(POLICY_KEY)).cloned()
    }

    /// What a signature of this file commits a reader to, or None for an
    /// unsigned file: [`SignatureCovers::HeaderAndData`] for ours (every
    /// tensor read is checked against the digests it signs, encrypted or
    /// not: `docs/FORMAT.md` 11.2), [`SignatureCovers::Header`] for a
    /// cryptotensors file (its signature covers the header and no digest of
    /// the data: a holder of its master key can change tensor bytes). Says
    /// what the format commits to; [`Reader::signers`] says which
    /// signatures were verified.
    pub fn signature_covers(&self) -> Option<SignatureCovers> {
        if self.is_cryptotensors() {
            return Some(SignatureCovers::Header);
        }
        (!self.signatures().is_empty()).then_some(SignatureCovers::HeaderAndData)
    }
}

/// What a file's signature commits to ([`Reader::signature_covers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignatureCovers {
    /// The header only (cryptotensors files).
    Header,
    /// The header and, through its digests, every tensor byte a reader
    /// returns (ours).
    HeaderAndData,
}

impl SignatureCovers {
    /// `"header"` or `"header and data"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SignatureCovers::Header => "header",
            SignatureCovers::HeaderAndData => "header and data",
        }
    }
}
