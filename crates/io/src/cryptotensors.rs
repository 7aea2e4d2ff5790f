//! cryptotensors 0.2.3 files (`docs/FORMAT.md` section 12): reading them
//! (the signature over the re-serialised header, the Rego policy, each
//! tensor's own key unwrapped under the master key, v1 and chunked v2
//! data) and writing them for its users. The fields themselves are decoded
//! by `deathtensors_format::Cryptotensors`.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use deathtensors_format::{ct_chunk_nonce, ct_signed_message, CtAlg, CtData, Cryptotensors, Head, TensorInfo};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
use ring::signature::{UnparsedPublicKey, ED25519};
use zeroize::Zeroizing;

use crate::crypt::{KeyRing, SymmetricKey, VerifyingKey};
use crate::error::{Error, ErrorKind, Result};
use crate::pread::read_exact_at;

/// An opened cryptotensors file: its tensors' keys, unwrapped.
pub(crate) struct CtFile {
    chunked: Option<u64>,
    tensors: HashMap<String, (LessSafeKey, CtData)>,
}

impl std::fmt::Debug for CtFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CtFile({} encrypted tensors)", self.tensors.len())
    }
}

fn key_of(alg: CtAlg, bytes: &[u8]) -> Option<LessSafeKey> {
    let a = match alg {
        CtAlg::Aes128Gcm => &AES_128_GCM,
        CtAlg::Aes256Gcm => &AES_256_GCM,
        CtAlg::ChaCha20Poly1305 => &CHACHA20_POLY1305,
    };
    UnboundKey::new(a, bytes).ok().map(LessSafeKey::new)
}

/// The key of `ring` that `kid` names, or the first of its kind when the
/// file names none (cryptotensors' lookup).
fn by_kid<'a, T>(mut keys: impl Iterator<Item = (Option<&'a str>, T)>, kid: Option<&str>) -> Option<T> {
    keys.find(|(k, _)| kid.is_none() || *k == kid).map(|(_, t)| t)
}

/// What opening a cryptotensors file gives the reader.
pub(crate) struct Opened {
    pub(crate) file: Option<CtFile>,
    pub(crate) signer: Option<VerifyingKey>,
}

fn err(kind: ErrorKind, path: &Path) -> Error {
    Error::new(kind, Some(path), "cannot open")
}

/// Checks a cryptotensors file's signature and policy, and unwraps its
/// tensors' keys. Without any key, the file opens (its header is in the
/// clear) and its encrypted tensors cannot be read.
pub(crate) fn open(
    ct: &Cryptotensors,
    head: &Head,
    path: &Path,
    keys: &KeyRing,
    policy_input: Option<&serde_json::Value>,
) -> Result<Opened> {
    let verifying: Vec<(Option<&str>, VerifyingKey)> =
        keys.verifying_keys().iter().map(|(kid, k)| (kid.as_deref(), *k)).collect();
    let master: Option<Arc<SymmetricKey>> = by_kid(keys.symmetric_keys().map(|k| (Some(k.kid()), k.clone())), ct.enc.kid.as_deref());
    let verify_key = by_kid(verifying.into_iter(), ct.sign.kid.as_deref());
    let (Some(verify_key), Some(master)) = (verify_key, master) else {
        if keys.is_empty() && keys.verifying_keys().is_empty() {
            return Ok(Opened { file: None, signer: None });
        }
        let mut wanted = Vec::new();
        wanted.push(format!("symmetric key {:?}", ct.enc.kid.as_deref().unwrap_or("(any)")));
        wanted.push(format!("Ed25519 key {:?}", ct.sign.kid.as_deref().unwrap_or("(any)")));
        return Err(err(ErrorKind::NoKey { recipients: wanted }, path));
    };
    // The signature first: nothing else is trusted before it.
    let metadata = head.header.metadata().cloned().unwrap_or_default();
    let message = ct_signed_message(&head.header, &metadata);
    if UnparsedPublicKey::new(&ED25519, &verify_key.0).verify(&message, &ct.signature).is_err() {
        return Err(err(ErrorKind::BadSignature { signer: verify_key.fingerprint() }, path));
    }
    crate::policy::evaluate(&ct.policy.local, policy_input)
        .map_err(|m| err(ErrorKind::PolicyDenied(m), path))?;
    // The key's own alg wins over the header's, as in cryptotensors.
    let alg = master.alg().and_then(CtAlg::parse).or_else(|| ct.alg()).ok_or_else(|| {
        err(ErrorKind::InvalidKey(format!("unknown cryptotensors algorithm {:?}", ct.enc.alg)), path)
    })?;
    let kek = key_of(alg, master.secret_bytes()).ok_or_else(|| {
        err(
            ErrorKind::InvalidKey(format!(
                "key {:?} has {} bytes; {} needs {}",
                master.kid(),
                master.secret_bytes().len(),
                alg.name(),
                alg.key_len()
            )),
            path,
        )
    })?;
    let mut tensors = HashMap::with_capacity(ct.tensors.len());
    for (name, t) in &ct.tensors {
        let mut dek = Zeroizing::new(t.wrapped_key.clone());
        let tag = Tag::from(t.key_tag);
        let nonce = Nonce::assume_unique_for_key(t.key_iv);
        if kek.open_in_place_separate_tag(nonce, Aad::empty(), tag, &mut dek[..], 0..).is_err() {
            return Err(err(ErrorKind::Decrypt { what: format!("the key of tensor {name:?}") }, path));
        }
        let key = key_of(alg, &dek).ok_or_else(|| err(ErrorKind::Decrypt { what: format!("the key of tensor {name:?}") }, path))?;
        tensors.insert(name.clone(), (key, t.data.clone()));
    }
    Ok(Opened { file: Some(CtFile { chunked: ct.chunked(), tensors }), signer: Some(verify_key) })
}

impl CtFile {
    /// Whether the tensor is encrypted (listed in `__encryption__`).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Decrypts `buf.len()` bytes of tensor `info` from `offset`, reading
    /// the ciphertext at `file_offset`. Chunked tensors read and decrypt
    /// only the chunks the range touches, on all cores; version 1 tensors
    /// are one AEAD message, decrypted whole.
    pub(crate) fn decrypt(&self, file: &File, path: &Path, info: &TensorInfo, file_offset: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        let doing = "cannot read";
        let fail = |what: String| Error::new(ErrorKind::Decrypt { what }, Some(path), doing);
        let io = |e| Error::io(e, path, doing);
        let Some((key, data)) = self.tensors.get(&info.name) else {
            return Err(Error::input(format!("tensor {:?} is not encrypted", info.name), path, doing));
        };
        let len = info.byte_len();
        let out = match data {
            CtData::Whole(None) => Ok(()),
            CtData::Whole(Some((iv, tag))) => {
                let mut whole = vec![0u8; len as usize];
                read_exact_at(file, &mut whole, file_offset).map_err(io)?;
                let nonce = Nonce::assume_unique_for_key(*iv);
                key.open_in_place_separate_tag(nonce, Aad::empty(), Tag::from(*tag), &mut whole, 0..)
                    .map_err(|_| fail(format!("tensor {:?}", info.name)))?;
                buf.copy_from_slice(&whole[offset as usize..offset as usize + buf.len()]);
                Ok(())
            }
            CtData::Chunked { base_iv, tags } => {
                let size = self.chunked.unwrap_or(deathtensors_format::CT_DEFAULT_CHUNK_SIZE);
                if len == 0 {
                    // One tag over the empty string, with the base nonce itself.
                    let tag: [u8; 16] = tags[..16].try_into().unwrap_or([0; 16]);
                    key.open_in_place_separate_tag(Nonce::assume_unique_for_key(*base_iv), Aad::empty(), Tag::from(tag), &mut [], 0..)
                        .map_err(|_| fail(format!("tensor {:?} chunk 0", info.name)))?;
                    return Ok(());
                }
                if buf.is_empty() {
                    return Ok(());
                }
                let end = offset + buf.len() as u64;
                let (first, last) = (offset / size, (end - 1) / size);
                let work = |range: std::ops::Range<u64>, out: &mut [u8], out_start: u64| -> Result<()> {
                    let ranges = |i| deathtensors_format::chunk_range(len, size, i);
                    crate::trust::each_chunk(range, out, out_start, (offset, end), ranges, |i, (cs, _), target| {
                        read_exact_at(file, target, file_offset + cs).map_err(io)?;
                        let chunk = || fail(format!("tensor {:?} chunk {i}", info.name));
                        let nonce = ct_chunk_nonce(base_iv, i).ok_or_else(chunk)?;
                        let t = (i as usize) * 16;
                        let tag: [u8; 16] = tags[t..t + 16].try_into().map_err(|_| chunk())?;
                        key.open_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::empty(), Tag::from(tag), target, 0..)
                            .map_err(|_| chunk())?;
                        Ok(())
                    })
                };
                crate::trust::split_chunks(first, last, size, offset, end, buf, &work)
            }
        };
        if out.is_err() {
            buf.fill(0);
        }
        out
    }
}
