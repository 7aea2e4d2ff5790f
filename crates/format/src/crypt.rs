//! Encryption of tensor data (flag bit 2, `docs/FORMAT.md` section 10): the
//! header's `encryption` section, where the tag table and header MAC sit,
//! and the byte strings that the ciphers in `deathtensors-io` consume:
//! nonces, associated data and key-derivation labels. No cryptography
//! happens here: this module only lays out bytes.

mod chunks;
mod labels;
mod section;

pub use self::chunks::{
    chunk_count, chunk_nonce, chunk_range, mac_prefix, ChunkAad, TableLayout, HEADER_MAC_LEN, TAG_LEN,
};
pub use self::labels::{sealed_aad, sealed_nonce, wrap_info, Label, WRAP_AAD};
pub use self::section::{
    Argon2Params, Cipher, Encryption, Recipient, DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE, MAX_KID_LEN, MAX_RECIPIENTS,
    MIN_CHUNK_SIZE, WRAPPED_KEY_LEN,
};

pub(crate) use self::chunks::chunk_bases;
pub(crate) use self::section::{decode, encode};
