//! The ECDSA keys of model signing: PEM files (PKCS#8 or SEC1 private
//! keys, SubjectPublicKeyInfo public keys) on P-256 and P-384, the hash
//! chosen by the curve as `model_signing` chooses it.

use std::path::Path;

use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};

use crate::error::{Error, ErrorKind, Result};

/// The key kinds these commands take, for messages.
pub(crate) const ACCEPTED: &str = "an ECDSA key on P-256 or P-384 in PEM (PKCS#8 \"PRIVATE KEY\" or SEC1 \
                                   \"EC PRIVATE KEY\"; \"PUBLIC KEY\" to verify)";

/// A curve: P-256 signs with SHA-256, P-384 with SHA-384.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Curve {
    P256,
    P384,
}

impl Curve {
    /// The DER of SubjectPublicKeyInfo before the uncompressed point:
    /// `SEQUENCE { SEQUENCE { id-ecPublicKey, curve }, BIT STRING }`.
    fn spki_prefix(self) -> &'static [u8] {
        match self {
            Curve::P256 => &[
                0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86,
                0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
            ],
            Curve::P384 => &[
                0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b, 0x81,
                0x04, 0x00, 0x22, 0x03, 0x62, 0x00,
            ],
        }
    }

    /// The length of an uncompressed point.
    fn point_len(self) -> usize {
        match self {
            Curve::P256 => 65,
            Curve::P384 => 97,
        }
    }

    fn signing(self) -> &'static signature::EcdsaSigningAlgorithm {
        match self {
            Curve::P256 => &signature::ECDSA_P256_SHA256_ASN1_SIGNING,
            Curve::P384 => &signature::ECDSA_P384_SHA384_ASN1_SIGNING,
        }
    }

    fn verifying(self) -> &'static signature::EcdsaVerificationAlgorithm {
        match self {
            Curve::P256 => &signature::ECDSA_P256_SHA256_ASN1,
            Curve::P384 => &signature::ECDSA_P384_SHA384_ASN1,
        }
    }
}

/// The DER prefix of SEC1 and PKCS#8 algorithm identifiers of P-521, to
/// say why such a key is refused.
const P521_OID: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23];

fn key_error(path: &Path, doing: &'static str, message: String) -> Error {
    Error::new(ErrorKind::InvalidKey(message), Some(path), doing)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// An ECDSA private key that signs model directories.
pub struct EcSigningKey {
    pair: EcdsaKeyPair,
    curve: Curve,
}

impl std::fmt::Debug for EcSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EcSigningKey({:?}, public {})", self.curve, self.public().hint())
    }
}

impl EcSigningKey {
    /// Reads a PEM private key (PKCS#8 or SEC1, P-256 or P-384).
    ///
    /// # Errors
    /// `Io` if the file cannot be read; `InvalidKey` naming what it is
    /// otherwise (an RSA key, P-521, an encrypted key, not PEM).
    pub fn from_pem_file(path: &Path) -> Result<EcSigningKey> {
        const DOING: &str = "cannot read the private key";
        let text = std::fs::read(path).map_err(|e| Error::io(e, path, DOING))?;
        if contains(&text, b"ENCRYPTED PRIVATE KEY") {
            return Err(key_error(path, DOING, format!("an encrypted key is not supported; give {ACCEPTED}")));
        }
        let der = PrivateKeyDer::from_pem_slice(&text)
            .map_err(|e| key_error(path, DOING, format!("not a PEM private key ({e}); give {ACCEPTED}")))?;
        let rng = SystemRandom::new();
        let pkcs8: Vec<u8> = match &der {
            PrivateKeyDer::Pkcs8(k) => k.secret_pkcs8_der().to_vec(),
            PrivateKeyDer::Sec1(k) => {
                let sec1 = k.secret_sec1_der();
                if contains(sec1, P521_OID) {
                    return Err(key_error(path, DOING, format!("P-521 keys are not supported; give {ACCEPTED}")));
                }
                let curve = if contains(sec1, &Curve::P384.spki_prefix()[13..20]) { Curve::P384 } else { Curve::P256 };
                wrap_sec1(curve, sec1)
            }
            PrivateKeyDer::Pkcs1(_) => {
                return Err(key_error(path, DOING, format!("an RSA key is not supported; give {ACCEPTED}")))
            }
            _ => return Err(key_error(path, DOING, format!("unsupported key kind; give {ACCEPTED}"))),
        };
        let scrub = zeroize::Zeroizing::new(pkcs8);
        for curve in [Curve::P256, Curve::P384] {
            if let Ok(pair) = EcdsaKeyPair::from_pkcs8(curve.signing(), &scrub, &rng) {
                return Ok(EcSigningKey { pair, curve });
            }
        }
        let why =
            if contains(&scrub, P521_OID) { "P-521 keys are not supported" } else { "not an ECDSA key ring reads" };
        Err(key_error(path, DOING, format!("{why}; give {ACCEPTED}")))
    }

    /// The public half.
    pub fn public(&self) -> EcPublicKey {
        let mut spki = self.curve.spki_prefix().to_vec();
        spki.extend_from_slice(self.pair.public_key().as_ref());
        EcPublicKey { spki, curve: self.curve }
    }

    /// An ASN.1 DER ECDSA signature of `message`.
    pub(crate) fn sign(&self, message: &[u8]) -> Result<Vec<u8>> {
        let rng = SystemRandom::new();
        self.pair.sign(&rng, message).map(|s| s.as_ref().to_vec()).map_err(|_| {
            Error::new(ErrorKind::InvalidKey("ECDSA signing failed".into()), None, "cannot sign the model")
        })
    }
}

/// `ECPrivateKey` (SEC1) wrapped as PKCS#8 v1, which ring reads.
fn wrap_sec1(curve: Curve, sec1: &[u8]) -> Vec<u8> {
    // AlgorithmIdentifier: the SPKI prefix's inner SEQUENCE.
    let alg = match curve {
        Curve::P256 => &curve.spki_prefix()[2..23],
        Curve::P384 => &curve.spki_prefix()[2..20],
    };
    let mut body = vec![0x02, 0x01, 0x00];
    body.extend_from_slice(alg);
    body.push(0x04);
    push_len(&mut body, sec1.len());
    body.extend_from_slice(sec1);
    let mut out = vec![0x30];
    push_len(&mut out, body.len());
    out.extend_from_slice(&body);
    out
}

fn push_len(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else if len < 0x100 {
        out.extend_from_slice(&[0x81, len as u8]);
    } else {
        out.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]);
    }
}

/// An ECDSA public key that verifies model directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcPublicKey {
    spki: Vec<u8>,
    curve: Curve,
}

impl EcPublicKey {
    /// Reads a PEM public key (SubjectPublicKeyInfo, P-256 or P-384).
    ///
    /// # Errors
    /// `Io` if the file cannot be read; `InvalidKey` saying what it is
    /// otherwise.
    pub fn from_pem_file(path: &Path) -> Result<EcPublicKey> {
        const DOING: &str = "cannot read the public key";
        let text = std::fs::read(path).map_err(|e| Error::io(e, path, DOING))?;
        let der = SubjectPublicKeyInfoDer::from_pem_slice(&text)
            .map_err(|e| key_error(path, DOING, format!("not a PEM public key ({e}); give {ACCEPTED}")))?;
        EcPublicKey::from_spki(der.as_ref()).map_err(|m| key_error(path, DOING, m))
    }

    /// A public key from the DER of its SubjectPublicKeyInfo.
    pub(crate) fn from_spki(spki: &[u8]) -> std::result::Result<EcPublicKey, String> {
        for curve in [Curve::P256, Curve::P384] {
            let prefix = curve.spki_prefix();
            if spki.len() == prefix.len() + curve.point_len() && spki.starts_with(prefix) && spki[prefix.len()] == 4 {
                return Ok(EcPublicKey { spki: spki.to_vec(), curve });
            }
        }
        if contains(spki, P521_OID) {
            return Err(format!("P-521 keys are not supported; give {ACCEPTED}"));
        }
        Err(format!("not an uncompressed ECDSA P-256 or P-384 public key; give {ACCEPTED}"))
    }

    /// The key as `cryptography` writes it: PEM, 64 base64 columns.
    pub fn to_pem(&self) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.spki);
        let mut pem = String::from("-----BEGIN PUBLIC KEY-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END PUBLIC KEY-----\n");
        pem
    }

    /// model_signing's key hint: the hex SHA-256 of [`Self::to_pem`].
    pub fn hint(&self) -> String {
        deathtensors_format::hex_digest(&crate::fs::hash::sha256(self.to_pem().as_bytes()))
    }

    /// Whether `sig` (ASN.1 DER) is this key's signature of `message`.
    pub(crate) fn verifies(&self, message: &[u8], sig: &[u8]) -> bool {
        let point = &self.spki[self.curve.spki_prefix().len()..];
        signature::UnparsedPublicKey::new(self.curve.verifying(), point).verify(message, sig).is_ok()
    }
}
