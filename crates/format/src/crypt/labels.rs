//! The fixed byte strings that separate the uses of one secret
//! (`docs/FORMAT.md` 10.3): HKDF labels and the key-wrapping context.

use alloc::vec::Vec;

/// The associated data of every wrapped data key.
pub const WRAP_AAD: &[u8] = b"deathtensors v1 data key";

/// What a key derived from the data key is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    /// The key that encrypts chunks.
    Chunks,
    /// The key of the header MAC.
    HeaderMac,
    /// The key of a sealed header.
    SealedHeader,
}

impl Label {
    /// The HKDF `info` of this use.
    pub const fn info(self) -> &'static [u8] {
        match self {
            Label::Chunks => b"deathtensors v1 chunks",
            Label::HeaderMac => b"deathtensors v1 header mac",
            Label::SealedHeader => b"deathtensors v1 sealed header",
        }
    }
}

/// The HKDF `info` of a recipient's key-encryption key:
/// `"deathtensors v1 key wrap" || 0x00 || kind || 0x00 || context`.
pub fn wrap_info(kind: &str, context: &[u8]) -> Vec<u8> {
    const WRAP: &[u8] = b"deathtensors v1 key wrap";
    let mut info = Vec::with_capacity(WRAP.len() + 2 + kind.len() + context.len());
    info.extend_from_slice(WRAP);
    info.push(0);
    info.extend_from_slice(kind.as_bytes());
    info.push(0);
    info.extend_from_slice(context);
    info
}

/// The nonce of a sealed header: `nonce_salt XOR (u32_le(0xFFFFFFFF) ||
/// u64_le(0))`; no tensor has index 0xFFFFFFFF.
pub fn sealed_nonce(nonce_salt: &[u8; 12]) -> [u8; 12] {
    crate::crypt::chunk_nonce(nonce_salt, u32::MAX, 0)
}

/// The associated data of a sealed header of `len` bytes.
pub fn sealed_aad(file_id: &[u8; 16], len: u64) -> Vec<u8> {
    let label = Label::SealedHeader.info();
    let mut out = Vec::with_capacity(label.len() + 24);
    out.extend_from_slice(label);
    out.extend_from_slice(file_id);
    out.extend_from_slice(&len.to_le_bytes());
    out
}
