//! The data key of a file and its recipients (`docs/FORMAT.md` 10.3): a
//! fresh key per file, wrapped under a key-encryption key derived for each
//! recipient.

use deathtensors_format::{
    wrap_info, Cipher, Encryption, Label, Recipient, DEFAULT_CHUNK_SIZE, WRAPPED_KEY_LEN, WRAP_AAD,
};
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, CHACHA20_POLY1305};
use ring::hkdf;
use zeroize::Zeroizing;

use super::keyring::KeyRing;
use super::keys::RecipientKey;

/// How a writer encrypts: the cipher, the chunk size and the recipients.
#[derive(Clone, Debug)]
pub struct EncryptOptions {
    /// The AEAD. Default AES-256-GCM.
    pub cipher: Cipher,
    /// Plaintext bytes per chunk. Default 1 MiB.
    pub chunk_size: u64,
    /// Who can decrypt (at least one).
    pub recipients: Vec<RecipientKey>,
    /// Encrypt the header too (names, shapes, metadata; `docs/FORMAT.md`
    /// 10.8). Default off.
    pub seal_header: bool,
}

impl EncryptOptions {
    /// AES-256-GCM in 1 MiB chunks for these recipients.
    pub fn new(recipients: Vec<RecipientKey>) -> EncryptOptions {
        EncryptOptions { cipher: Cipher::Aes256Gcm, chunk_size: DEFAULT_CHUNK_SIZE, recipients, seal_header: false }
    }

    /// The encryption a save asked for, from its parts as front ends take
    /// them: `None` without recipients (not encrypted).
    ///
    /// # Errors
    /// A message for `seal_header` without recipients: a header is sealed
    /// for the file's recipients, and a file without any has none.
    pub fn requested(
        recipients: Option<Vec<RecipientKey>>,
        cipher: Cipher,
        chunk_size: u64,
        seal_header: bool,
    ) -> std::result::Result<Option<EncryptOptions>, String> {
        match recipients {
            Some(recipients) => Ok(Some(EncryptOptions { cipher, chunk_size, recipients, seal_header })),
            None if seal_header => {
                Err("seal_header=True needs encrypt= (the header is sealed for its recipients)".to_string())
            }
            None => Ok(None),
        }
    }
}

/// A file's 32-byte data key; wiped when dropped.
pub(crate) struct DataKey(Zeroizing<[u8; 32]>);

impl DataKey {
    /// A key derived from the data key for one use.
    pub(crate) fn derive(&self, file_id: &[u8; 16], label: Label) -> Zeroizing<[u8; 32]> {
        hkdf32(file_id, &self.0[..], label.info())
    }
}

struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-SHA256 with 32 bytes of output.
fn hkdf32(salt: &[u8], ikm: &[u8], info: &[u8]) -> Zeroizing<[u8; 32]> {
    let mut out = Zeroizing::new([0u8; 32]);
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(ikm);
    let info = [info];
    // 32 bytes is far below HKDF's limit of 255 blocks: neither call can fail.
    prk.expand(&info, Len(32)).and_then(|okm| okm.fill(&mut out[..])).expect("HKDF of 32 bytes cannot fail");
    out
}

/// The ring key of an AEAD for 32 key bytes.
pub(crate) fn aead_key(cipher: Cipher, key: &[u8; 32]) -> LessSafeKey {
    let alg = match cipher {
        Cipher::Aes256Gcm => &AES_256_GCM,
        Cipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
    };
    // Both algorithms take 32-byte keys.
    LessSafeKey::new(UnboundKey::new(alg, key).expect("a 32-byte key fits both ciphers"))
}

/// The key-encryption key of one recipient.
fn kek(file_id: &[u8; 16], ikm: &[u8], kind: &str, context: &[u8]) -> Zeroizing<[u8; 32]> {
    hkdf32(file_id, ikm, &wrap_info(kind, context))
}

fn argon2(passphrase: &[u8], salt: &[u8; 16], p: &deathtensors_format::Argon2Params) -> Option<Zeroizing<[u8; 32]>> {
    let params = argon2::Params::new(p.memory_kib, p.iterations, p.parallelism, Some(32)).ok()?;
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = Zeroizing::new([0u8; 32]);
    a.hash_password_into(passphrase, salt, &mut out[..]).ok()?;
    Some(out)
}

fn wrap(cipher: Cipher, kek: &[u8; 32], dk: &DataKey) -> [u8; WRAPPED_KEY_LEN] {
    let mut out = [0u8; WRAPPED_KEY_LEN];
    out[..32].copy_from_slice(&dk.0[..]);
    let nonce = Nonce::assume_unique_for_key([0; 12]);
    // Sealing 32 bytes cannot exceed the cipher's limits.
    let tag =
        aead_key(cipher, kek).seal_in_place_separate_tag(nonce, Aad::from(WRAP_AAD), &mut out[..32]).expect("seal");
    out[32..].copy_from_slice(tag.as_ref());
    out
}

fn unwrap(cipher: Cipher, kek: &[u8; 32], wrapped: &[u8; WRAPPED_KEY_LEN]) -> Option<DataKey> {
    let mut buf = Zeroizing::new(*wrapped);
    let nonce = Nonce::assume_unique_for_key([0; 12]);
    let plain = aead_key(cipher, kek).open_in_place(nonce, Aad::from(WRAP_AAD), &mut buf[..]).ok()?;
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(plain);
    Some(DataKey(key))
}

/// The secrets and random values of a new encrypted file.
pub(crate) struct FileKeys {
    pub(crate) data_key: DataKey,
    pub(crate) file_id: [u8; 16],
    pub(crate) nonce_salt: [u8; 12],
    pub(crate) recipients: Vec<Recipient>,
}

/// A new file's data key, id, nonce salt and recipient entries.
pub(crate) fn new_file_keys(options: &EncryptOptions) -> Result<FileKeys, String> {
    if options.recipients.is_empty() {
        return Err("encryption needs at least one recipient".into());
    }
    let dk = DataKey(Zeroizing::new(super::random::<32>()));
    let file_id = super::random::<16>();
    let nonce_salt = super::random::<12>();
    let mut out = Vec::with_capacity(options.recipients.len());
    for r in &options.recipients {
        out.push(match r {
            RecipientKey::Symmetric(k) => {
                let kek = kek(&file_id, k.secret_bytes(), "symmetric", k.kid().as_bytes());
                Recipient::Symmetric { kid: k.kid().to_string(), wrapped_key: wrap(options.cipher, &kek, &dk) }
            }
            RecipientKey::X25519(pk) => {
                let eph = x25519_dalek::StaticSecret::from(super::random::<32>());
                let epk = x25519_dalek::PublicKey::from(&eph).to_bytes();
                let shared = eph.diffie_hellman(&x25519_dalek::PublicKey::from(*pk.bytes()));
                if !shared.was_contributory() {
                    return Err(format!("X25519 key {:?} is a low-order point, not a public key", pk.kid()));
                }
                let mut context = [0u8; 64];
                context[..32].copy_from_slice(&epk);
                context[32..].copy_from_slice(pk.bytes());
                let kek = kek(&file_id, shared.as_bytes(), "x25519", &context);
                Recipient::X25519 {
                    kid: pk.kid().to_string(),
                    ephemeral_public_key: epk,
                    wrapped_key: wrap(options.cipher, &kek, &dk),
                }
            }
            RecipientKey::Passphrase(p, params) => {
                let salt = super::random::<16>();
                let ikm = argon2(p.bytes(), &salt, params).ok_or("invalid Argon2 parameters")?;
                let kek = kek(&file_id, &ikm[..], "passphrase", b"");
                Recipient::Passphrase { kdf: *params, salt, wrapped_key: wrap(options.cipher, &kek, &dk) }
            }
        });
    }
    Ok(FileKeys { data_key: dk, file_id, nonce_salt, recipients: out })
}

/// Why no data key came out of a file's recipients.
pub(crate) enum UnwrapError {
    /// None of the keys given matches a recipient.
    NoKey,
    /// A key matched a recipient but did not unwrap: wrong key or tampering.
    Failed,
    /// The next passphrase derivation would take the Argon2 work of this
    /// open past the reader's budget: what it would have come to, and the
    /// budget (`ReadOptions::max_kdf_work`).
    Budget { needed: u64, budget: u64 },
    /// This many passphrase derivations failed, the most one open runs;
    /// passphrases given after them were not tried.
    Tries(usize),
}

/// How many passphrase entries one open tries: a hostile file may list 64.
const MAX_PASSPHRASE_TRIES: usize = 4;

/// The Argon2 work of one derivation: memory (KiB) times passes, the
/// measure of its time (lanes share the memory, they do not add to it).
fn kdf_work(p: &deathtensors_format::Argon2Params) -> u64 {
    u64::from(p.memory_kib) * u64::from(p.iterations)
}

/// Unwraps the data key with the first of `keys` that matches a recipient.
/// Passphrase derivations stop at `MAX_PASSPHRASE_TRIES` and before their
/// summed [`kdf_work`] would pass `max_kdf_work`.
pub(crate) fn unwrap_data_key(enc: &Encryption, keys: &KeyRing, max_kdf_work: u64) -> Result<DataKey, UnwrapError> {
    let mut tried = false;
    let mut argon2_runs = 0usize;
    let mut work = 0u64;
    for r in &enc.recipients {
        match r {
            Recipient::Symmetric { kid, wrapped_key } => {
                for k in keys.symmetric().filter(|k| k.kid() == kid) {
                    tried = true;
                    let kek = kek(&enc.file_id, k.secret_bytes(), "symmetric", kid.as_bytes());
                    if let Some(dk) = unwrap(enc.cipher, &kek, wrapped_key) {
                        return Ok(dk);
                    }
                }
            }
            Recipient::X25519 { kid, ephemeral_public_key, wrapped_key } => {
                for k in keys.x25519().filter(|k| k.kid() == kid) {
                    tried = true;
                    let shared = k.secret().diffie_hellman(&x25519_dalek::PublicKey::from(*ephemeral_public_key));
                    if !shared.was_contributory() {
                        continue;
                    }
                    let mut context = [0u8; 64];
                    context[..32].copy_from_slice(ephemeral_public_key);
                    context[32..].copy_from_slice(k.public_key().bytes());
                    let kek = kek(&enc.file_id, shared.as_bytes(), "x25519", &context);
                    if let Some(dk) = unwrap(enc.cipher, &kek, wrapped_key) {
                        return Ok(dk);
                    }
                }
            }
            Recipient::Passphrase { kdf, salt, wrapped_key } => {
                for p in keys.passphrases() {
                    tried = true;
                    if argon2_runs == MAX_PASSPHRASE_TRIES {
                        return Err(UnwrapError::Tries(argon2_runs));
                    }
                    let needed = work.saturating_add(kdf_work(kdf));
                    if needed > max_kdf_work {
                        return Err(UnwrapError::Budget { needed, budget: max_kdf_work });
                    }
                    argon2_runs += 1;
                    work = needed;
                    let Some(ikm) = argon2(p.bytes(), salt, kdf) else { continue };
                    let kek = kek(&enc.file_id, &ikm[..], "passphrase", b"");
                    if let Some(dk) = unwrap(enc.cipher, &kek, wrapped_key) {
                        return Ok(dk);
                    }
                }
            }
        }
    }
    Err(if tried { UnwrapError::Failed } else { UnwrapError::NoKey })
}
