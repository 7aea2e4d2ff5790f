//! Key types. Secret keys never implement `Debug` or `Clone`, are wiped
//! from memory when dropped, and compare in constant time; share them with
//! `Arc`. Public keys are plain values. Their JWK text (`to_jwk`) is
//! written in `jwk.rs` and `VerifyingKey::verify_detached` in `sign.rs`:
//! those files name these types, never the other way round.

use std::sync::Arc;

use deathtensors_format::Argon2Params;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::error::{Error, Result};

fn bad_key(message: impl Into<String>) -> Error {
    Error::new(crate::ErrorKind::InvalidKey(message.into()), None, "invalid key")
}

/// Checks a key id as the format does (1 to 256 bytes, no control character).
pub(crate) fn check_kid(kid: &str) -> Result<()> {
    if kid.is_empty() || kid.len() > deathtensors_format::MAX_KID_LEN || kid.chars().any(char::is_control) {
        return Err(bad_key(format!("key id {kid:?} must be 1 to 256 bytes with no control character")));
    }
    Ok(())
}

/// A symmetric key, known to writer and readers by its id.
// Secret: no `Debug`, by design (the workspace lint asks for one).
#[allow(missing_debug_implementations)]
pub struct SymmetricKey {
    kid: String,
    bytes: Zeroizing<Vec<u8>>,
    alg: Option<String>,
}

impl SymmetricKey {
    /// A key from its bytes (16 to 64 of them).
    ///
    /// # Errors
    /// `InvalidKey` for another length or a bad key id.
    pub fn new(kid: impl Into<String>, bytes: &[u8]) -> Result<SymmetricKey> {
        let kid = kid.into();
        check_kid(&kid)?;
        if !(16..=64).contains(&bytes.len()) {
            return Err(bad_key(format!("symmetric key {kid:?} has {} bytes; 16 to 64 are allowed", bytes.len())));
        }
        Ok(SymmetricKey { kid, bytes: Zeroizing::new(bytes.to_vec()), alg: None })
    }

    /// A key without a key id, as cryptotensors' JWKs may be: it reads
    /// (and writes) cryptotensors files that name no key, and can be no
    /// recipient of a deathtensors file, whose readers find their entry by
    /// key id. Its [`SymmetricKey::kid`] is empty.
    ///
    /// # Errors
    /// `InvalidKey` for a length other than 16 to 64 bytes.
    pub fn without_kid(bytes: &[u8]) -> Result<SymmetricKey> {
        if !(16..=64).contains(&bytes.len()) {
            return Err(bad_key(format!("a symmetric key has {} bytes; 16 to 64 are allowed", bytes.len())));
        }
        Ok(SymmetricKey { kid: String::new(), bytes: Zeroizing::new(bytes.to_vec()), alg: None })
    }

    /// Whether the key has a key id (see [`SymmetricKey::without_kid`]).
    pub fn has_kid(&self) -> bool {
        !self.kid.is_empty()
    }

    /// The key with the algorithm its JWK names (`alg`), which cryptotensors
    /// files take over the one their header names.
    pub fn with_alg(mut self, alg: Option<String>) -> SymmetricKey {
        self.alg = alg;
        self
    }

    /// The algorithm its JWK named, if any.
    pub fn alg(&self) -> Option<&str> {
        self.alg.as_deref()
    }

    /// A fresh random 32-byte key.
    ///
    /// # Errors
    /// `InvalidKey` for a bad key id.
    pub fn generate(kid: impl Into<String>) -> Result<SymmetricKey> {
        let bytes = Zeroizing::new(super::random::<32>());
        SymmetricKey::new(kid, &bytes[..])
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The secret bytes (for exporting the key).
    pub fn secret_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl PartialEq for SymmetricKey {
    fn eq(&self, other: &SymmetricKey) -> bool {
        self.kid == other.kid && bool::from(self.bytes.as_slice().ct_eq(other.bytes.as_slice()))
    }
}

/// An X25519 secret key: the private half of a recipient.
// Secret: no `Debug`, by design (the workspace lint asks for one).
#[allow(missing_debug_implementations)]
pub struct X25519SecretKey {
    kid: String,
    secret: x25519_dalek::StaticSecret,
}

impl X25519SecretKey {
    /// A key from its 32 secret bytes.
    ///
    /// # Errors
    /// `InvalidKey` for a bad key id.
    pub fn from_bytes(kid: impl Into<String>, bytes: [u8; 32]) -> Result<X25519SecretKey> {
        let kid = kid.into();
        check_kid(&kid)?;
        let bytes = Zeroizing::new(bytes);
        Ok(X25519SecretKey { kid, secret: x25519_dalek::StaticSecret::from(*bytes) })
    }

    /// A fresh random key.
    ///
    /// # Errors
    /// `InvalidKey` for a bad key id.
    pub fn generate(kid: impl Into<String>) -> Result<X25519SecretKey> {
        X25519SecretKey::from_bytes(kid, super::random::<32>())
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public half, to give to writers.
    pub fn public_key(&self) -> X25519PublicKey {
        X25519PublicKey { kid: self.kid.clone(), bytes: x25519_dalek::PublicKey::from(&self.secret).to_bytes() }
    }

    /// The secret bytes (for exporting the key).
    pub fn secret_bytes(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.secret.to_bytes())
    }

    pub(crate) fn secret(&self) -> &x25519_dalek::StaticSecret {
        &self.secret
    }
}

impl PartialEq for X25519SecretKey {
    fn eq(&self, other: &X25519SecretKey) -> bool {
        self.kid == other.kid && bool::from(self.secret.as_bytes().ct_eq(other.secret.as_bytes()))
    }
}

/// An X25519 public key: what a writer encrypts to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct X25519PublicKey {
    kid: String,
    bytes: [u8; 32],
}

impl X25519PublicKey {
    /// A key from its 32 bytes.
    ///
    /// # Errors
    /// `InvalidKey` for a bad key id.
    pub fn new(kid: impl Into<String>, bytes: [u8; 32]) -> Result<X25519PublicKey> {
        let kid = kid.into();
        check_kid(&kid)?;
        Ok(X25519PublicKey { kid, bytes })
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The key's bytes.
    pub fn bytes(&self) -> &[u8; 32] {
        &self.bytes
    }
}

/// A passphrase, for files that people open by typing it.
// Secret: no `Debug`, by design (the workspace lint asks for one).
#[allow(missing_debug_implementations)]
pub struct Passphrase(Zeroizing<String>);

impl Passphrase {
    /// Wraps a passphrase.
    ///
    /// # Errors
    /// `InvalidKey` for an empty passphrase.
    pub fn new(passphrase: impl Into<String>) -> Result<Passphrase> {
        let p = Zeroizing::new(passphrase.into());
        if p.is_empty() {
            return Err(bad_key("the passphrase is empty"));
        }
        Ok(Passphrase(p))
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// An Ed25519 key that signs files.
// Secret: no `Debug`, by design (the workspace lint asks for one).
#[allow(missing_debug_implementations)]
pub struct SigningKey {
    seed: Zeroizing<[u8; 32]>,
    pair: ring::signature::Ed25519KeyPair,
}

impl SigningKey {
    /// A key from its 32-byte seed (the JWK `d`).
    ///
    /// # Errors
    /// `InvalidKey` if the seed is refused.
    pub fn from_seed(seed: [u8; 32]) -> Result<SigningKey> {
        let seed = Zeroizing::new(seed);
        let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&seed[..])
            .map_err(|_| bad_key("not an Ed25519 seed"))?;
        Ok(SigningKey { seed, pair })
    }

    /// A fresh random key.
    pub fn generate() -> SigningKey {
        // A random 32-byte seed is always a valid Ed25519 seed.
        SigningKey::from_seed(super::random::<32>()).expect("any 32 bytes are an Ed25519 seed")
    }

    /// The public half, to give to readers.
    pub fn verifying_key(&self) -> VerifyingKey {
        use ring::signature::KeyPair;
        let mut out = [0u8; 32];
        out.copy_from_slice(self.pair.public_key().as_ref());
        VerifyingKey(out)
    }

    /// The seed (for exporting the key).
    pub fn seed(&self) -> &[u8; 32] {
        &self.seed
    }

    /// A detached Ed25519 signature of `message` (RFC 8032), for bytes that
    /// are not a deathtensors file (a release's `SHA256SUMS`, say).
    pub fn sign_detached(&self, message: &[u8]) -> [u8; 64] {
        self.sign(message)
    }

    pub(crate) fn sign(&self, message: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(message).as_ref());
        out
    }
}

impl PartialEq for SigningKey {
    fn eq(&self, other: &SigningKey) -> bool {
        bool::from(self.seed[..].ct_eq(&other.seed[..]))
    }
}

/// 16 hex digits of SHA-256 of a 32-byte public key (Ed25519 or X25519).
pub(crate) fn fingerprint_of(public: &[u8; 32]) -> String {
    deathtensors_format::hex_digest(&crate::fs::hash::sha256(public))[..16].to_string()
}

/// An Ed25519 public key: whom a reader trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VerifyingKey(pub [u8; 32]);

impl VerifyingKey {
    /// The first 16 hex digits of SHA-256 of the key: how files, errors and
    /// `inspect` name a signer.
    pub fn fingerprint(&self) -> String {
        fingerprint_of(&self.0)
    }
}

/// Someone a writer encrypts a file for.
#[derive(Clone)]
pub enum RecipientKey {
    /// Holders of this symmetric key.
    Symmetric(Arc<SymmetricKey>),
    /// The holder of the secret half of this X25519 key.
    X25519(X25519PublicKey),
    /// Whoever knows this passphrase; Argon2id with these parameters.
    Passphrase(Arc<Passphrase>, Argon2Params),
}

impl std::fmt::Debug for RecipientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names the recipient, never its secret.
        match self {
            RecipientKey::Symmetric(k) => write!(f, "Symmetric({:?})", k.kid()),
            RecipientKey::X25519(k) => write!(f, "X25519({:?})", k.kid()),
            RecipientKey::Passphrase(_, p) => write!(f, "Passphrase({p:?})"),
        }
    }
}
