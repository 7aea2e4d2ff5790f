//! Encryption and signatures (`docs/FORMAT.md` sections 10 and 11): key
//! types and where they come from, wrapping the data key for recipients,
//! the chunk cipher, and Ed25519 signatures. The byte layouts (nonces,
//! associated data, labels, the signature block) are `deathtensors-format`'s;
//! this module runs the ciphers over them.

mod aead;
mod describe;
mod jwk;
mod keyring;
mod keys;
mod sign;
mod wrap;

pub use self::describe::{describe_key_file, describe_keys, KeySummary};
pub use self::jwk::to_cryptotensors as cryptotensors_jwk;
pub use self::keyring::{KeyRing, KEY_ENV_VARS};
pub use self::keys::{
    Passphrase, RecipientKey, SigningKey, SymmetricKey, VerifyingKey, X25519PublicKey, X25519SecretKey,
};
pub use self::wrap::EncryptOptions;

pub(crate) use self::aead::{ChunkCipher, TensorChunks};
pub(crate) use self::sign::{sign_message, verify_ed25519, verify_signatures};
pub(crate) use self::wrap::{aead_key, new_file_keys, unwrap_data_key, UnwrapError};

/// Fills `out` from the operating system's generator.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    use ring::rand::SecureRandom;
    let mut out = [0u8; N];
    // The system generator fails only if the OS has none, which no
    // supported platform lacks: treat it as fatal, not as an input error.
    ring::rand::SystemRandom::new().fill(&mut out).expect("the operating system's random generator failed");
    out
}
