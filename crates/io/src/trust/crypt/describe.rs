//! What a JWK file holds, said without its secret: each key's kind, key
//! id, fingerprint and public half. The command line's `deathtensors key`
//! and `keygen` print it.

use std::path::Path;

use serde_json::Value;

use super::jwk::{self, Jwk};
use super::keys::fingerprint_of;
use crate::error::{Error, ErrorKind, Result};

/// One key of a JWK file, without its secret.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySummary {
    /// `symmetric`, `x25519` or `ed25519`.
    pub kind: &'static str,
    /// Whether the file holds the secret (or, for a symmetric key, the key itself).
    pub secret: bool,
    /// The key id, if the JWK has one.
    pub kid: Option<String>,
    /// 16 hex digits of SHA-256 of the public key (how files and errors
    /// name a signer); `None` for a symmetric key, which has no public half.
    pub fingerprint: Option<String>,
    /// The public half as a JWK, to share; `None` for a symmetric key.
    pub public_jwk: Option<Value>,
}

/// Describes every key of the JWK JSON `v` (one JWK, a set or an array).
///
/// # Errors
/// `InvalidKey` naming what is wrong with a key.
pub fn describe_keys(v: &Value, path: Option<&Path>) -> Result<Vec<KeySummary>> {
    let keys = jwk::decode_all(v).map_err(|m| Error::new(ErrorKind::InvalidKey(m), path, "invalid key"))?;
    Ok(keys
        .into_iter()
        .map(|k| match k {
            Jwk::Symmetric(k) => KeySummary {
                kind: "symmetric",
                secret: true,
                kid: k.has_kid().then(|| k.kid().to_string()),
                fingerprint: None,
                public_jwk: None,
            },
            Jwk::X25519Secret(k) => {
                let public = k.public_key();
                KeySummary {
                    kind: "x25519",
                    secret: true,
                    kid: Some(k.kid().to_string()),
                    fingerprint: Some(fingerprint_of(public.bytes())),
                    public_jwk: Some(public.to_jwk()),
                }
            }
            Jwk::X25519Public(k) => KeySummary {
                kind: "x25519",
                secret: false,
                kid: Some(k.kid().to_string()),
                fingerprint: Some(fingerprint_of(k.bytes())),
                public_jwk: Some(k.to_jwk()),
            },
            Jwk::Signing(kid, k) => {
                let public = k.verifying_key();
                KeySummary {
                    kind: "ed25519",
                    secret: true,
                    fingerprint: Some(public.fingerprint()),
                    public_jwk: Some(public.to_jwk(kid.as_deref())),
                    kid,
                }
            }
            Jwk::Verifying(kid, k) => KeySummary {
                kind: "ed25519",
                secret: false,
                fingerprint: Some(k.fingerprint()),
                public_jwk: Some(k.to_jwk(kid.as_deref())),
                kid,
            },
        })
        .collect())
}

/// [`describe_keys`] of a JWK file.
///
/// # Errors
/// `Io` if it cannot be read; `InvalidKey` as [`describe_keys`].
pub fn describe_key_file(path: &Path) -> Result<Vec<KeySummary>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(e, path, "cannot read keys from"))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Error::new(ErrorKind::InvalidKey(format!("not JWK JSON: {e}")), Some(path), "invalid key"))?;
    describe_keys(&v, Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::crypt::{SigningKey, SymmetricKey, X25519SecretKey};

    #[test]
    fn no_secret_in_a_summary() {
        let signing = SigningKey::generate();
        let v = signing.to_jwk(Some("mallory"), true);
        let [s] = &describe_keys(&v, None).unwrap()[..] else { panic!("one key") };
        assert_eq!((s.kind, s.secret, s.kid.as_deref()), ("ed25519", true, Some("mallory")));
        assert_eq!(s.fingerprint.as_deref(), Some(signing.verifying_key().fingerprint().as_str()));
        assert!(s.public_jwk.as_ref().unwrap().get("d").is_none());

        let x = X25519SecretKey::generate("alice").unwrap();
        let [s] = &describe_keys(&x.to_jwk(true), None).unwrap()[..] else { panic!("one key") };
        assert_eq!((s.kind, s.secret), ("x25519", true));
        assert!(s.public_jwk.as_ref().unwrap().get("d").is_none());

        let k = SymmetricKey::generate("team").unwrap();
        let [s] = &describe_keys(&k.to_jwk(), None).unwrap()[..] else { panic!("one key") };
        assert_eq!((s.kind, s.fingerprint.as_ref(), s.public_jwk.as_ref()), ("symmetric", None, None));
        assert!(!format!("{s:?}").contains(k.to_jwk()["k"].as_str().unwrap()));
    }
}
