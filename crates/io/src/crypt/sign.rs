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
            UnparsedPublicKey::new(&ED25519, &r.public_key).verify(message, &r.signature).map(|_| key).map_err(|_| key)
        })
        .collect()
}
