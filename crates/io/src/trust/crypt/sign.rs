//! Ed25519 signatures over a file's signed message (`docs/FORMAT.md` 11).

use deathtensors_format::SignatureRecord;
use ring::signature::{UnparsedPublicKey, ED25519};

use super::keys::{SigningKey, VerifyingKey};

/// Signs `message` with `key`.
pub(crate) fn sign_message(key: &SigningKey, message: &[u8]) -> SignatureRecord {
    SignatureRecord { public_key: key.verifying_key().0, signature: key.sign(message) }
}

/// Checks every record against `message`; returns the signers, or the
/// first signer whose signature does not verify.
pub(crate) fn verify_signatures(
    records: &[SignatureRecord],
    message: &[u8],
) -> Result<Vec<VerifyingKey>, VerifyingKey> {
    records
        .iter()
        .map(|r| {
            let key = VerifyingKey(r.public_key);
            if verify_ed25519(&r.public_key, message, &r.signature) {
                Ok(key)
            } else {
                Err(key)
            }
        })
        .collect()
}

/// Whether `signature` is `public_key`'s Ed25519 signature of `message`,
/// strictly: besides ring's check (which also refuses a non-canonical `S`),
/// a public key or an `R` of small order is refused. With those, anyone can
/// make a "signature" that verifies without any secret key: the identity
/// key with `R` the identity and `S` zero verifies for every message.
pub(crate) fn verify_ed25519(public_key: &[u8; 32], message: &[u8], signature: &[u8]) -> bool {
    let Some(r) = signature.get(..32).and_then(|r| <[u8; 32]>::try_from(r).ok()) else {
        return false;
    };
    !small_order(public_key)
        && !small_order(&r)
        && UnparsedPublicKey::new(&ED25519, public_key).verify(message, signature).is_ok()
}

/// Whether `point` encodes a point of small order (or no point at all).
fn small_order(point: &[u8; 32]) -> bool {
    curve25519_dalek::edwards::CompressedEdwardsY(*point).decompress().is_none_or(|p| p.is_small_order())
}

impl VerifyingKey {
    /// Whether `signature` is this key's Ed25519 signature of `message`
    /// (the counterpart of [`SigningKey::sign_detached`]).
    pub fn verify_detached(&self, message: &[u8], signature: &[u8]) -> bool {
        verify_ed25519(&self.0, message, signature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight points of small order, in their canonical encodings (y
    /// little-endian, x's sign in the top bit).
    fn small_order_points() -> Vec<[u8; 32]> {
        curve25519_dalek::constants::EIGHT_TORSION.iter().map(|p| p.compress().to_bytes()).collect()
    }

    #[test]
    fn a_signature_by_a_small_order_key_is_refused() {
        let identity = {
            let mut b = [0u8; 32];
            b[0] = 1;
            b
        };
        // R = identity, S = 0: [S]B = R + [k]A holds for every message when
        // A is the identity, so ring alone accepts it.
        let mut forged = [0u8; 64];
        forged[..32].copy_from_slice(&identity);
        for message in [&b""[..], b"any message", &[7u8; 1000][..]] {
            assert!(UnparsedPublicKey::new(&ED25519, &identity).verify(message, &forged).is_ok());
            assert!(!verify_ed25519(&identity, message, &forged));
        }
        for point in small_order_points() {
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(&point);
            assert!(!verify_ed25519(&point, b"m", &sig), "{point:02x?}");
            assert!(!verify_ed25519(&identity, b"m", &sig));
        }
        assert!(!verify_ed25519(&[0u8; 32], b"m", &[0u8; 64]));
    }

    #[test]
    fn real_signatures_still_verify() {
        let key = SigningKey::generate();
        let record = sign_message(&key, b"the message");
        assert!(verify_ed25519(&record.public_key, b"the message", &record.signature));
        assert!(!verify_ed25519(&record.public_key, b"the messagE", &record.signature));
        assert!(verify_signatures(&[record], b"the message").is_ok_and(|k| k.len() == 1));
    }
}
