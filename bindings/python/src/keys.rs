//! Keys for encrypted and signed files: `KeyRing` (JWK JSON, key files,
//! environment variables, passphrases) and key generation. Keys cross into
//! Python only as JWK JSON text, which the Python layer turns into dicts.

use std::sync::Arc;

use deathtensors_io::{KeyRing, Passphrase, SigningKey, SymmetricKey, X25519SecretKey};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::IntoPy;

/// A set of keys: to decrypt (symmetric, X25519, passphrases), to encrypt
/// to (the same, and X25519 public keys) and to sign or trust (Ed25519).
#[pyclass(name = "KeyRing", module = "deathtensors._native")]
#[derive(Clone, Debug, Default)]
pub struct PyKeyRing {
    pub(crate) inner: KeyRing,
}

#[pymethods]
impl PyKeyRing {
    #[new]
    fn new() -> PyKeyRing {
        PyKeyRing::default()
    }

    /// Adds keys from JWK JSON: one JWK, a JWK set or an array of JWKs.
    fn add_jwk_json(&mut self, py: Python<'_>, json: &str) -> PyResult<()> {
        self.inner.add_jwk_json(json).py(py)
    }

    /// Adds the keys of a JWK file.
    fn add_jwk_file(&mut self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        self.inner.add_jwk_file(&path).py(py)
    }

    /// Adds the keys an environment variable holds as JWK JSON; whether it
    /// was set.
    fn add_env(&mut self, py: Python<'_>, var: &str) -> PyResult<bool> {
        self.inner.add_env(var).py(py)
    }

    /// Adds a passphrase.
    fn add_passphrase(&mut self, py: Python<'_>, passphrase: String) -> PyResult<()> {
        let p = Passphrase::new(passphrase).py(py)?;
        self.inner.add_passphrase(Arc::new(p));
        Ok(())
    }

    /// Adds every key of another ring.
    fn extend(&mut self, other: &PyKeyRing) {
        self.inner.extend(&other.inner);
    }

    /// Whether no key can decrypt.
    fn can_decrypt(&self) -> bool {
        !self.inner.is_empty()
    }

    /// The Ed25519 public keys known (of signing keys too), as 32-byte strings.
    fn verifying_keys<'py>(&self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        self.inner.verifying_keys().iter().map(|(_, k)| PyBytes::new(py, &k.0)).collect()
    }

    /// How many signing keys the ring holds.
    fn signing_count(&self) -> usize {
        self.inner.signing_keys().len()
    }

    /// How many recipients a writer would encrypt to.
    fn recipient_count(&self) -> usize {
        self.inner.recipients(deathtensors_io::format::Argon2Params::DEFAULT).len()
    }

    fn __repr__(&self) -> String {
        self.inner.to_string()
    }
}

/// A new key as JWK JSON, secret included: `kind` is `symmetric` (32
/// random bytes), `x25519` or `ed25519`.
#[pyfunction]
#[pyo3(signature = (kind, kid = None))]
pub fn generate_key(py: Python<'_>, kind: &str, kid: Option<String>) -> PyResult<String> {
    let value = match kind {
        "symmetric" => SymmetricKey::generate(kid.unwrap_or_else(|| "key".into())).py(py)?.to_jwk(),
        "x25519" => X25519SecretKey::generate(kid.unwrap_or_else(|| "key".into())).py(py)?.to_jwk(true),
        "ed25519" => SigningKey::generate().to_jwk(kid.as_deref(), true),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown key kind {other:?}: use 'symmetric', 'x25519' or 'ed25519'"
            )))
        }
    };
    Ok(value.to_string())
}

/// The public half of a JWK (X25519 or Ed25519), as JWK JSON; a symmetric
/// key has none.
#[pyfunction]
pub fn public_jwk(py: Python<'_>, json: &str) -> PyResult<String> {
    let mut ring = KeyRing::new();
    ring.add_jwk_json(json).py(py)?;
    if let Some(k) = ring.x25519_public_keys().first() {
        return Ok(k.to_jwk().to_string());
    }
    if let Some((kid, k)) = ring.verifying_keys().first() {
        return Ok(k.to_jwk(kid.as_deref()).to_string());
    }
    Err(PyValueError::new_err("a symmetric key has no public half: share it only with the readers"))
}

/// A JWK (JSON) in cryptotensors' dialect (`deathtensors_io::cryptotensors_jwk`).
#[pyfunction]
pub fn cryptotensors_jwk(py: Python<'_>, json: &str) -> PyResult<String> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| crate::errors::error(py, format!("not JWK JSON: {e}")))?;
    deathtensors_io::cryptotensors_jwk(&value).map(|v| v.to_string()).map_err(|m| crate::errors::error(py, m))
}

/// The fingerprint of an Ed25519 public key (32 bytes): how files, errors
/// and `inspect` name a signer.
#[pyfunction]
pub fn fingerprint(key: [u8; 32]) -> String {
    deathtensors_io::VerifyingKey(key).fingerprint()
}

/// Adds a signature to an existing file (atomically; the data is copied,
/// not re-encoded).
#[pyfunction]
#[pyo3(signature = (path, key, durable = true))]
pub fn sign_file(py: Python<'_>, path: std::path::PathBuf, key: PyKeyRing, durable: bool) -> PyResult<()> {
    let keys = key.inner.signing_keys().to_vec();
    if keys.is_empty() {
        return Err(crate::errors::error(py, "no Ed25519 signing key (a JWK with \"d\") was given".into()));
    }
    py.allow_threads(|| keys.iter().try_for_each(|(_, k)| deathtensors_io::sign_file(&path, k, durable))).py(py)
}

/// Saves a cryptotensors 0.2.3 file (for readers that use cryptotensors):
/// `enc` holds the master (symmetric) key, `sign` the Ed25519 key.
#[pyfunction]
#[pyo3(signature = (path, tensors, metadata, enc, sign, alg = None, version = 2, chunk_size = 2 << 20, policy = None, only = None, durable = true))]
#[allow(clippy::too_many_arguments)]
pub fn save_cryptotensors(
    py: Python<'_>,
    path: std::path::PathBuf,
    tensors: Bound<'_, PyAny>,
    metadata: Option<deathtensors_io::format::Metadata>,
    enc: PyKeyRing,
    sign: PyKeyRing,
    alg: Option<String>,
    version: u8,
    chunk_size: u64,
    policy: Option<(String, String)>,
    only: Option<Vec<String>>,
    durable: bool,
) -> PyResult<()> {
    use deathtensors_io::format::{CtAlg, CtPolicy};
    let master = enc
        .inner
        .symmetric_keys_list()
        .into_iter()
        .next()
        .ok_or_else(|| crate::errors::error(py, "cryptotensors needs a symmetric master key (enc_key)".into()))?;
    let name = alg.or_else(|| master.alg().map(str::to_string)).unwrap_or_else(|| "aes256gcm".into());
    let alg = CtAlg::parse(&name)
        .ok_or_else(|| crate::errors::error(py, format!("unknown cryptotensors algorithm {name:?}")))?;
    let (sign_kid, signer) =
        sign.inner.signing_keys().first().cloned().ok_or_else(|| {
            crate::errors::error(py, "cryptotensors signs every encrypted file: give sign_key".into())
        })?;
    let options = deathtensors_io::CryptotensorsOptions {
        master,
        alg,
        signer,
        sign_kid,
        version,
        chunk_size,
        policy: policy.map(|(local, remote)| CtPolicy { local, remote }),
        tensors: only,
        durable,
    };
    crate::tensors::with_tensors(py, &tensors, None, |data| {
        deathtensors_io::save_cryptotensors(&path, data, metadata, &options).map(|_| ())
    })
}
