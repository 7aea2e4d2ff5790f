//! A reader's keys: given in code, read from JWK files, or from an
//! environment variable holding JWK JSON. Lookup is by key id.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::jwk::{self, Jwk};
use super::keys::{Passphrase, SigningKey, SymmetricKey, VerifyingKey, X25519PublicKey, X25519SecretKey};
use crate::error::{Error, ErrorKind, Result};

/// The environment variables read for keys (JWK JSON, or a key file's
/// path) when a file is
/// opened without keys given: ours, then cryptotensors' (the one its Python
/// package reads). The command line and the Python package both read these.
pub const KEY_ENV_VARS: [&str; 2] = ["DEATHTENSORS_KEYS", "CRYPTOTENSOR_KEYS"];

/// The keys a reader may use, and the signers it may find in key files.
/// Cloning shares the keys.
#[derive(Clone, Default)]
pub struct KeyRing {
    symmetric: Vec<Arc<SymmetricKey>>,
    x25519: Vec<Arc<X25519SecretKey>>,
    x25519_public: Vec<X25519PublicKey>,
    passphrases: Vec<Arc<Passphrase>>,
    signing: Vec<(Option<String>, Arc<SigningKey>)>,
    verifying: Vec<(Option<String>, VerifyingKey)>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key ids and counts only: never secret bytes.
        f.debug_struct("KeyRing")
            .field("symmetric", &self.symmetric.iter().map(|k| k.kid()).collect::<Vec<_>>())
            .field("x25519", &self.x25519.iter().map(|k| k.kid()).collect::<Vec<_>>())
            .field("passphrases", &self.passphrases.len())
            .field("signing", &self.signing.len())
            .field("verifying", &self.verifying.len())
            .finish()
    }
}

impl std::fmt::Display for KeyRing {
    /// For people (Python's `repr`): each key's kind and key id, and the
    /// fingerprints of public keys; never secret bytes. `KeyRing(empty)`,
    /// `KeyRing(symmetric "team"; X25519 "alice"; 1 passphrase)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kid = |k: Option<&str>| k.map_or_else(|| "(no key id)".to_string(), |k| format!("{k:?}"));
        let mut parts: Vec<String> = Vec::new();
        parts.extend(self.symmetric.iter().map(|k| format!("symmetric {}", kid(k.has_kid().then(|| k.kid())))));
        parts.extend(self.x25519.iter().map(|k| format!("X25519 {}", kid(Some(k.kid())))));
        parts.extend(self.x25519_public.iter().map(|k| format!("X25519 public {}", kid(Some(k.kid())))));
        match self.passphrases.len() {
            0 => {}
            1 => parts.push("1 passphrase".into()),
            n => parts.push(format!("{n} passphrases")),
        }
        for (id, k) in &self.verifying {
            let signing = self.signing.iter().any(|(_, s)| s.verifying_key() == *k);
            let what = if signing { "Ed25519 signing" } else { "Ed25519 public" };
            parts.push(format!("{what} {} (fingerprint {})", kid(id.as_deref()), k.fingerprint()));
        }
        if parts.is_empty() {
            return write!(f, "KeyRing(empty)");
        }
        write!(f, "KeyRing({})", parts.join("; "))
    }
}

fn key_error(message: String, path: Option<&Path>) -> Error {
    Error::new(ErrorKind::InvalidKey(message), path, "invalid key")
}

impl KeyRing {
    /// An empty key ring.
    pub fn new() -> KeyRing {
        KeyRing::default()
    }

    /// Whether the ring holds no key that can decrypt.
    pub fn is_empty(&self) -> bool {
        self.symmetric.is_empty() && self.x25519.is_empty() && self.passphrases.is_empty()
    }

    /// Adds a symmetric key.
    pub fn add_symmetric(&mut self, key: Arc<SymmetricKey>) {
        self.symmetric.push(key);
    }

    /// Adds an X25519 secret key.
    pub fn add_x25519(&mut self, key: Arc<X25519SecretKey>) {
        self.x25519.push(key);
    }

    /// Adds a passphrase.
    pub fn add_passphrase(&mut self, passphrase: Arc<Passphrase>) {
        self.passphrases.push(passphrase);
    }

    /// Adds a signing key (found in key files; a reader does not need it).
    pub fn add_signing(&mut self, kid: Option<String>, key: Arc<SigningKey>) {
        self.signing.push((kid, key));
    }

    /// Adds keys from JWK JSON text: one JWK, a JWK set or an array.
    ///
    /// # Errors
    /// `InvalidKey` naming what is wrong with a key.
    pub fn add_jwk_json(&mut self, json: &str) -> Result<()> {
        let v: Value = serde_json::from_str(json).map_err(|e| key_error(format!("not JWK JSON: {e}"), None))?;
        self.add_jwk_value(&v, None)
    }

    /// Adds keys from a decoded JSON value (one JWK, a set or an array).
    ///
    /// # Errors
    /// As [`KeyRing::add_jwk_json`].
    pub fn add_jwk_value(&mut self, v: &Value, path: Option<&Path>) -> Result<()> {
        for k in jwk::decode_all(v).map_err(|m| key_error(m, path))? {
            match k {
                Jwk::Symmetric(k) => self.symmetric.push(Arc::new(k)),
                Jwk::X25519Secret(k) => self.x25519.push(Arc::new(k)),
                Jwk::X25519Public(k) => self.x25519_public.push(k),
                Jwk::Signing(kid, k) => {
                    self.verifying.push((kid.clone(), k.verifying_key()));
                    self.signing.push((kid, Arc::new(k)));
                }
                Jwk::Verifying(kid, k) => self.verifying.push((kid, k)),
            }
        }
        Ok(())
    }

    /// Adds the keys of a JWK file.
    ///
    /// # Errors
    /// `Io` if it cannot be read; `InvalidKey` as [`KeyRing::add_jwk_json`].
    pub fn add_jwk_file(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(e, path, "cannot read keys from"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| key_error(format!("not JWK JSON: {e}"), Some(path)))?;
        self.add_jwk_value(&v, Some(path))
    }

    /// Adds the keys held by an environment variable: JWK JSON (text
    /// starting with `{` or `[`), or the path of a JWK key file. Returns
    /// whether the variable was set.
    ///
    /// # Errors
    /// `InvalidKey` (or `Io` for a path that cannot be read) naming the
    /// variable.
    pub fn add_env(&mut self, var: &str) -> Result<bool> {
        let Ok(text) = std::env::var(var) else {
            return Ok(false);
        };
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') || trimmed.starts_with('[') {
            self.add_jwk_json(&text).map_err(|e| key_error(format!("environment variable {var}: {e}"), None))?;
        } else {
            self.add_jwk_file(Path::new(&text)).map_err(|e| {
                key_error(format!("environment variable {var} (JWK JSON, or a key file's path): {e}"), None)
            })?;
        }
        Ok(true)
    }

    pub(crate) fn symmetric(&self) -> impl Iterator<Item = &SymmetricKey> {
        self.symmetric.iter().map(|k| &**k)
    }

    pub(crate) fn symmetric_keys(&self) -> impl Iterator<Item = &Arc<SymmetricKey>> {
        self.symmetric.iter()
    }

    pub(crate) fn x25519(&self) -> impl Iterator<Item = &X25519SecretKey> {
        self.x25519.iter().map(|k| &**k)
    }

    pub(crate) fn passphrases(&self) -> impl Iterator<Item = &Passphrase> {
        self.passphrases.iter().map(|k| &**k)
    }

    /// The symmetric keys, in the order they were added.
    pub fn symmetric_keys_list(&self) -> Vec<Arc<SymmetricKey>> {
        self.symmetric.clone()
    }

    /// The symmetric key with this id.
    pub fn symmetric_key(&self, kid: &str) -> Option<Arc<SymmetricKey>> {
        self.symmetric.iter().find(|k| k.kid() == kid).cloned()
    }

    /// The X25519 public keys known: the public halves of the secret keys
    /// and the public-only keys.
    pub fn x25519_public_keys(&self) -> Vec<X25519PublicKey> {
        let mut out: Vec<_> = self.x25519.iter().map(|k| k.public_key()).collect();
        out.extend(self.x25519_public.iter().cloned());
        out
    }

    /// The recipients a writer encrypts to with these keys: every
    /// symmetric key, every X25519 key (its public half), and every
    /// passphrase through Argon2id with `params`.
    pub fn recipients(&self, params: deathtensors_format::Argon2Params) -> Vec<super::keys::RecipientKey> {
        use super::keys::RecipientKey;
        let mut out: Vec<RecipientKey> = self.symmetric.iter().cloned().map(RecipientKey::Symmetric).collect();
        out.extend(self.x25519_public_keys().into_iter().map(RecipientKey::X25519));
        out.extend(self.passphrases.iter().cloned().map(|p| RecipientKey::Passphrase(p, params)));
        out
    }

    /// The recipients of [`KeyRing::recipients`], for a writer asked to
    /// encrypt to exactly the keys of this ring: a key that cannot be a
    /// recipient (an Ed25519 key signs) is an error, not dropped; the same
    /// key given twice is one recipient; two different keys under one key
    /// id are an error (readers find their entry by key id).
    ///
    /// # Errors
    /// `InvalidKey`, naming the key; `InvalidInput` if there is none.
    pub fn encrypt_to(&self, params: deathtensors_format::Argon2Params) -> Result<Vec<super::keys::RecipientKey>> {
        use super::keys::RecipientKey;
        if let Some(kid) =
            self.signing.iter().map(|(kid, _)| kid).chain(self.verifying.iter().map(|(kid, _)| kid)).next()
        {
            let which = kid.as_deref().map_or_else(|| "an Ed25519 key".to_string(), |k| format!("Ed25519 key {k:?}"));
            return Err(key_error(
                format!(
                    "{which} cannot be a recipient: it signs (sign= / --sign); encrypt to a symmetric or X25519 key, \
                     or a passphrase"
                ),
                None,
            ));
        }
        if self.symmetric.iter().any(|k| !k.has_kid()) {
            return Err(key_error(
                "a symmetric key without a key id cannot be a recipient: readers find their entry by key id \
                 (give the JWK a \"kid\")"
                    .into(),
                None,
            ));
        }
        let mut out: Vec<RecipientKey> = Vec::new();
        for r in self.recipients(params) {
            // Another recipient under the same key id: (whether it is the same key, the kid).
            let clash = out.iter().find_map(|o| match (o, &r) {
                (RecipientKey::Symmetric(a), RecipientKey::Symmetric(b)) if a.kid() == b.kid() => {
                    Some((**a == **b, b.kid().to_string()))
                }
                (RecipientKey::X25519(a), RecipientKey::X25519(b)) if a.kid() == b.kid() => {
                    Some((a.bytes() == b.bytes(), b.kid().to_string()))
                }
                _ => None,
            });
            match clash {
                None => out.push(r),
                Some((true, _)) => {} // the same key again: one recipient
                Some((false, kid)) => {
                    return Err(key_error(
                        format!(
                            "two different keys have the key id {kid:?}: a reader could not tell their entries apart"
                        ),
                        None,
                    ))
                }
            }
        }
        if out.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidInput(
                    "no key to encrypt to: give a symmetric key, an X25519 key or a passphrase".into(),
                ),
                None,
                "cannot write",
            ));
        }
        Ok(out)
    }

    /// Adds every key of `other`.
    pub fn extend(&mut self, other: &KeyRing) {
        self.symmetric.extend(other.symmetric.iter().cloned());
        self.x25519.extend(other.x25519.iter().cloned());
        self.x25519_public.extend(other.x25519_public.iter().cloned());
        self.passphrases.extend(other.passphrases.iter().cloned());
        self.signing.extend(other.signing.iter().cloned());
        self.verifying.extend(other.verifying.iter().cloned());
    }

    /// The signing keys found, with their key ids.
    pub fn signing_keys(&self) -> &[(Option<String>, Arc<SigningKey>)] {
        &self.signing
    }

    /// The signing keys of a ring given to sign with (`--sign`, `sign=`):
    /// a ring that holds none is refused, with an `InvalidKey` error whose
    /// message ("holds no Ed25519 signing key ...") the caller prefixes
    /// with where the ring came from.
    ///
    /// # Errors
    /// `InvalidKey` if the ring holds no signing key.
    pub fn signers(&self) -> Result<Vec<Arc<SigningKey>>> {
        if self.signing.is_empty() {
            let why = "holds no Ed25519 signing key (a JWK with \"d\")".to_string();
            return Err(Error::new(ErrorKind::InvalidKey(why), None, "cannot sign with"));
        }
        Ok(self.signing.iter().map(|(_, k)| k.clone()).collect())
    }

    /// The Ed25519 public keys found (of signing keys too), with their ids.
    pub fn verifying_keys(&self) -> &[(Option<String>, VerifyingKey)] {
        &self.verifying
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_keys_never_secrets() {
        assert_eq!(KeyRing::new().to_string(), "KeyRing(empty)");
        let mut ring = KeyRing::new();
        let team = Arc::new(SymmetricKey::generate("team").unwrap());
        ring.add_symmetric(team.clone());
        let signing = SigningKey::generate();
        ring.add_jwk_value(&signing.to_jwk(Some("pub"), true), None).unwrap();
        ring.add_passphrase(Arc::new(Passphrase::new("correct horse battery").unwrap()));
        let text = ring.to_string();
        let fp = signing.verifying_key().fingerprint();
        assert_eq!(
            text,
            format!("KeyRing(symmetric \"team\"; 1 passphrase; Ed25519 signing \"pub\" (fingerprint {fp}))")
        );
        assert!(!text.contains("correct horse"));
        assert!(!text.contains(team.to_jwk()["k"].as_str().unwrap()));
    }

    #[test]
    fn signers_refuses_a_ring_without_a_signing_key() {
        let mut ring = KeyRing::new();
        ring.add_symmetric(Arc::new(SymmetricKey::generate("team").unwrap()));
        let signing = SigningKey::generate();
        // The public half only: it verifies, it cannot sign.
        ring.add_jwk_value(&signing.to_jwk(Some("pub"), false), None).unwrap();
        let e = ring.signers().err().unwrap();
        assert!(matches!(e.kind(), ErrorKind::InvalidKey(m) if m.contains("no Ed25519 signing key")), "{e}");
        ring.add_jwk_value(&signing.to_jwk(Some("me"), true), None).unwrap();
        let keys = ring.signers().unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].verifying_key().fingerprint(), signing.verifying_key().fingerprint());
    }
}
