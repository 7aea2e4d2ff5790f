//! How every command names a signer and says what its signature proves.
//!
//! A signed file carries its signers' public keys: a signature that
//! verifies proves the file is unchanged since that key signed it, not who
//! signed it. Only a key the caller trusts (`--signer KEY.jwk`) makes it
//! "verified"; the key's id comes from that file (files carry no key id).

use std::path::PathBuf;

use anyhow::bail;
use deathtensors_io::VerifyingKey;
use serde_json::{json, Value};

/// The keys of `--signer` files, with their key ids.
pub struct Trusted(Vec<(Option<String>, VerifyingKey)>);

impl Trusted {
    /// The Ed25519 public keys of `--signer` JWK files.
    ///
    /// # Errors
    /// A file that cannot be read, or holds no Ed25519 key.
    pub fn load(files: &[PathBuf]) -> anyhow::Result<Trusted> {
        let mut keys = Vec::new();
        for f in files {
            let mut ring = deathtensors_io::KeyRing::new();
            ring.add_jwk_file(f)?;
            if ring.verifying_keys().is_empty() {
                bail!("--signer {} holds no Ed25519 key", f.display());
            }
            keys.extend(ring.verifying_keys().iter().cloned());
        }
        Ok(Trusted(keys))
    }

    /// The keys, for `ReadOptions::trusted_signers`.
    pub fn keys(&self) -> Vec<VerifyingKey> {
        self.0.iter().map(|(_, k)| *k).collect()
    }

    /// Whether no key was given.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key id a trusted key was given under.
    fn kid(&self, key: &VerifyingKey) -> Option<Option<&str>> {
        self.0.iter().find(|(_, k)| k == key).map(|(kid, _)| kid.as_deref())
    }

    /// A signer, named: `"mallory" (fingerprint 0dbd29f1100eeb98)`, or
    /// `fingerprint 0dbd29f1100eeb98` when no trusted key names it.
    pub fn name(&self, key: &VerifyingKey) -> String {
        match self.kid(key).flatten() {
            Some(kid) => format!("{kid:?} (fingerprint {})", key.fingerprint()),
            None => format!("fingerprint {}", key.fingerprint()),
        }
    }

    /// Whether `key` is one the caller trusts.
    pub fn trusts(&self, key: &VerifyingKey) -> bool {
        self.kid(key).is_some()
    }

    /// What a valid signature by `key` proves, in one phrase.
    pub fn proves(&self, key: &VerifyingKey) -> String {
        self.proves_checked(key, "verified")
    }

    /// As [`Trusted::proves`], saying what was checked (`verified`: the
    /// whole file; `header signature verified`: the header only, as
    /// `inspect` checks it).
    pub fn proves_checked(&self, key: &VerifyingKey, checked: &str) -> String {
        if self.trusts(key) {
            format!("{}: {checked}, a key you trust (--signer)", self.name(key))
        } else if self.is_empty() {
            format!(
                "{}: signature valid, but its key is not trusted: the key is carried in the file, so this proves \
                 the file is unchanged since that key signed it, not who signed it (--signer KEY.pub.jwk checks \
                 it is a key you trust)",
                self.name(key)
            )
        } else {
            format!(
                "{}: signature valid, but not by a key you trust (--signer): it proves the file is unchanged since \
                 that key signed it, not who signed it",
                self.name(key)
            )
        }
    }

    /// A signer as JSON: fingerprint, key id (from --signer), trusted.
    pub fn to_json(&self, key: &VerifyingKey) -> Value {
        json!({"fingerprint": key.fingerprint(), "kid": self.kid(key).flatten(), "trusted": self.trusts(key)})
    }
}
