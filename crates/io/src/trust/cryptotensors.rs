//! cryptotensors 0.2.3 files (`docs/FORMAT.md` section 12): reading them
//! (the signature over the re-serialised header, the Rego policy, each
//! tensor's own key unwrapped under the master key, v1 and chunked v2
//! data) and writing them for its users. The fields themselves are decoded
//! by `deathtensors_format::Cryptotensors`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use deathtensors_format::{ct_chunk_nonce, ct_signed_message, Cryptotensors, CtAlg, CtData, Head, TensorInfo};
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
use zeroize::Zeroizing;

use crate::error::{Error, ErrorKind, Result};
use crate::fs::pread::{read_exact_at, ReadAt};
use crate::trust::crypt::{KeyRing, SymmetricKey, VerifyingKey};

/// An opened cryptotensors file: its tensors' keys, unwrapped.
pub(crate) struct CtFile {
    chunked: Option<u64>,
    tensors: HashMap<String, TensorKey>,
}

/// An encrypted tensor's key and where its chunks' nonces and tags are.
type TensorKey = (LessSafeKey, CtData);

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
/// The keys of `keys` that a file naming `kid` may use, in order: those of
/// that kid, or all when the file names none. Several may share a kid (a
/// rotated key, say): each is tried, as for our own files.
fn by_kid<'a, T>(keys: impl Iterator<Item = (Option<&'a str>, T)>, kid: Option<&str>) -> Vec<T> {
    keys.filter(|(k, _)| kid.is_none() || *k == kid).map(|(_, t)| t).collect()
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
/// clear) and its encrypted tensors cannot be read. The signature is
/// checked with the Ed25519 key of `keys` that the file's `sign.kid` names
/// or, failing that, with the `trusted` keys (cryptotensors names its
/// signer by key id only): checking it needs no master key.
pub(crate) fn open(
    ct: &Cryptotensors,
    head: &Head,
    path: &Path,
    keys: &KeyRing,
    trusted: &[VerifyingKey],
    policy_input: Option<&serde_json::Value>,
) -> Result<Opened> {
    let verifying: Vec<(Option<&str>, VerifyingKey)> =
        keys.verifying_keys().iter().map(|(kid, k)| (kid.as_deref(), *k)).collect();
    let masters: Vec<Arc<SymmetricKey>> =
        by_kid(keys.symmetric_keys().map(|k| (k.has_kid().then(|| k.kid()), k.clone())), ct.enc.kid.as_deref());
    let sign_kid = ct.sign.kid.as_deref().unwrap_or("(any)");
    // The signature first: nothing else is trusted before it.
    let metadata = head.header.metadata().cloned().unwrap_or_default();
    let message = ct_signed_message(&head.header, &metadata);
    let verifies = |k: &VerifyingKey| crate::trust::crypt::verify_ed25519(&k.0, &message, &ct.signature);
    let named = by_kid(verifying.into_iter(), ct.sign.kid.as_deref());
    let signer = match named.iter().find(|k| verifies(k)) {
        Some(k) => Some(*k),
        // No key the file names verifies it: changed since signed.
        None if !named.is_empty() => {
            let signer = named.iter().map(VerifyingKey::fingerprint).collect::<Vec<_>>().join(", ");
            return Err(err(ErrorKind::BadSignature { signer }, path));
        }
        None => match trusted.iter().find(|k| verifies(k)) {
            Some(k) => Some(*k),
            None if !trusted.is_empty() => {
                let signer = format!(
                    "key {sign_kid:?} (cryptotensors names its signer by key id only: the signature verifies \
                     with none of the trusted keys, so it is by another key, or the file was modified)"
                );
                return Err(err(ErrorKind::UntrustedSigner { signers: vec![signer] }, path));
            }
            None => None,
        },
    };
    if masters.is_empty() || signer.is_none() {
        if keys.is_empty() && keys.verifying_keys().is_empty() {
            return Ok(Opened { file: None, signer });
        }
        // Only the keys that are missing: a cryptotensors file needs both.
        let mut wanted = Vec::new();
        if masters.is_empty() {
            wanted.push(format!("symmetric key {:?}", ct.enc.kid.as_deref().unwrap_or("(any)")));
        }
        if signer.is_none() {
            wanted.push(format!(
                "Ed25519 key {sign_kid:?}, whose public half verifies the file's signature before any key is used"
            ));
        }
        return Err(err(ErrorKind::NoKey { recipients: wanted }, path));
    }
    crate::trust::policy::evaluate(&ct.policy.local, policy_input)
        .map_err(|m| err(ErrorKind::PolicyDenied(m), path))?;
    // The first of the keys the file may use that unwraps every tensor's key.
    let mut failure = None;
    for master in &masters {
        match unwrap_tensor_keys(ct, master, path) {
            Ok(tensors) => return Ok(Opened { file: Some(CtFile { chunked: ct.chunked(), tensors }), signer }),
            Err(e) => failure = Some(e),
        }
    }
    Err(failure.unwrap_or_else(|| err(ErrorKind::Decrypt { what: "the tensors' keys".into() }, path)))
}

/// Every encrypted tensor's key, unwrapped with `master`.
fn unwrap_tensor_keys(ct: &Cryptotensors, master: &SymmetricKey, path: &Path) -> Result<HashMap<String, TensorKey>> {
    // The key's own alg wins over the header's, as in cryptotensors.
    let alg =
        master.alg().and_then(CtAlg::parse).or_else(|| ct.alg()).ok_or_else(|| {
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
        let key = key_of(alg, &dek)
            .ok_or_else(|| err(ErrorKind::Decrypt { what: format!("the key of tensor {name:?}") }, path))?;
        tensors.insert(name.clone(), (key, t.data.clone()));
    }
    Ok(tensors)
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
    pub(crate) fn decrypt(
        &self,
        file: &dyn ReadAt,
        path: &Path,
        info: &TensorInfo,
        file_offset: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let doing = "cannot read";
        let fail = |what: String| Error::new(ErrorKind::Decrypt { what }, Some(path), doing);
        let io = |e| Error::io(e, path, doing);
        let Some((key, data)) = self.tensors.get(info.name.as_str()) else {
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
                    key.open_in_place_separate_tag(
                        Nonce::assume_unique_for_key(*base_iv),
                        Aad::empty(),
                        Tag::from(tag),
                        &mut [],
                        0..,
                    )
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
                    crate::fs::par::each_chunk(range, out, out_start, (offset, end), ranges, |i, (cs, _), target| {
                        read_exact_at(file, target, file_offset + cs).map_err(io)?;
                        let chunk = || fail(format!("tensor {:?} chunk {i}", info.name));
                        let nonce = ct_chunk_nonce(base_iv, i).ok_or_else(chunk)?;
                        let t = (i as usize) * 16;
                        let tag: [u8; 16] = tags[t..t + 16].try_into().map_err(|_| chunk())?;
                        key.open_in_place_separate_tag(
                            Nonce::assume_unique_for_key(nonce),
                            Aad::empty(),
                            Tag::from(tag),
                            target,
                            0..,
                        )
                        .map_err(|_| chunk())?;
                        Ok(())
                    })
                };
                crate::fs::par::split_chunks(first, last, size, offset, end, buf, &work)
            }
        };
        if out.is_err() {
            buf.fill(0);
        }
        out
    }
}

/// How to write a cryptotensors file (for readers that use cryptotensors).
#[derive(Clone)]
pub struct CryptotensorsOptions {
    /// The master key: its id goes in the header; its bytes wrap each
    /// tensor's key.
    pub master: Arc<SymmetricKey>,
    /// The cipher (for the master key and the data).
    pub alg: CtAlg,
    /// The signing key (cryptotensors refuses unsigned encrypted files).
    pub signer: Arc<crate::trust::crypt::SigningKey>,
    /// The signing key's id, for readers' key lookup.
    pub sign_kid: Option<String>,
    /// 1 (whole tensors) or 2 (chunked, the default).
    pub version: u8,
    /// Chunk size of version 2 (cryptotensors' default: 2 MiB).
    pub chunk_size: u64,
    /// Rego policies (default: allow).
    pub policy: Option<deathtensors_format::CtPolicy>,
    /// The tensors to encrypt (default: all).
    pub tensors: Option<Vec<String>>,
    /// fsync before the rename.
    pub durable: bool,
}

impl std::fmt::Debug for CryptotensorsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CryptotensorsOptions")
            .field("master", &self.master.kid())
            .field("alg", &self.alg)
            .field("signer", &self.signer.verifying_key().fingerprint())
            .field("version", &self.version)
            .field("chunk_size", &self.chunk_size)
            .finish()
    }
}

/// Writes a cryptotensors 0.2.3 file (a safetensors file cryptotensors
/// opens): each selected tensor under a key of its own, wrapped by the
/// master key, the header signed. It keeps cryptotensors' weaknesses (see
/// `docs/SECURITY.md`): empty associated data, a signature over a
/// re-serialised header, and plaintext tensors that nothing authenticates.
/// Streaming and atomic, as `save`: ciphertext goes straight to its place
/// in a temp file (the header's length is known before its tags are).
///
/// # Errors
/// `InvalidInput` for a key of the wrong length for `alg`, a bad version or
/// chunk size, or buffers that do not match their specs; `Format`; `Io`.
pub fn save_cryptotensors(
    path: impl AsRef<Path>,
    tensors: Vec<(deathtensors_format::TensorSpec, &[u8])>,
    metadata: Option<deathtensors_format::Metadata>,
    options: &CryptotensorsOptions,
) -> Result<deathtensors_format::Header> {
    use deathtensors_format::{chunk_count, CtKeyRef, CtPolicy, CtTensor, Flags, Header, Limits, CT_DEFAULT_POLICY};
    let path = path.as_ref();
    let doing = "cannot write";
    let input = |m: String| Error::input(m, path, doing);
    let fmt = |e| Error::format(e, path, doing);
    let io = |e| Error::io(e, path, doing);
    if options.master.secret_bytes().len() != options.alg.key_len() {
        return Err(input(format!(
            "{} needs a {}-byte key; {:?} has {}",
            options.alg.name(),
            options.alg.key_len(),
            options.master.kid(),
            options.master.secret_bytes().len()
        )));
    }
    let chunked = match options.version {
        1 => None,
        2 if options.chunk_size > 0 => Some(options.chunk_size),
        _ => return Err(input("cryptotensors versions are 1 and 2, with a chunk size above 0".into())),
    };
    let kek = key_of(options.alg, options.master.secret_bytes()).ok_or_else(|| input("bad master key".into()))?;
    let mut by_name: HashMap<String, &[u8]> = HashMap::with_capacity(tensors.len());
    let mut specs = Vec::with_capacity(tensors.len());
    for (spec, bytes) in tensors {
        if bytes.len() as u64 != spec.byte_len().map_err(fmt)? {
            return Err(input(format!(
                "tensor {:?}: {} bytes do not match its dtype and shape",
                spec.name,
                bytes.len()
            )));
        }
        by_name.insert(spec.name.clone(), bytes);
        specs.push(spec);
    }
    let selected = |name: &str| options.tensors.as_ref().is_none_or(|list| list.iter().any(|n| n == name));
    // Random keys and nonces, as cryptotensors makes them; tags come later.
    let mut deks: HashMap<String, (Zeroizing<Vec<u8>>, CtTensor)> = HashMap::new();
    for s in specs.iter().filter(|s| selected(&s.name)) {
        let dek = Zeroizing::new(crate::trust::crypt::random::<32>()[..options.alg.key_len()].to_vec());
        let key_iv = crate::trust::crypt::random::<12>();
        let mut wrapped = dek.to_vec();
        let tag = kek
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(key_iv), Aad::empty(), &mut wrapped)
            .map_err(|_| input("cannot wrap a key".into()))?;
        let len = s.byte_len().map_err(fmt)?;
        let data = match chunked {
            None => CtData::Whole((len > 0).then(|| (crate::trust::crypt::random::<12>(), [0u8; 16]))),
            Some(c) => {
                // A base nonce whose counter cannot overflow (cryptotensors refuses to wrap).
                let mut base_iv = crate::trust::crypt::random::<12>();
                base_iv[8] &= 0x7f;
                CtData::Chunked { base_iv, tags: vec![0; 16 * chunk_count(len, c) as usize] }
            }
        };
        let mut key_tag = [0u8; 16];
        key_tag.copy_from_slice(tag.as_ref());
        deks.insert(s.name.clone(), (dek, CtTensor { wrapped_key: wrapped, key_iv, key_tag, data }));
    }
    let mut ct = Cryptotensors {
        version: options.version,
        chunk_size: chunked,
        enc: CtKeyRef {
            alg: options.alg.name().into(),
            kid: options.master.has_kid().then(|| options.master.kid().into()),
            jku: None,
        },
        sign: CtKeyRef { alg: "ed25519".into(), kid: options.sign_kid.clone(), jku: None },
        tensors: deks.iter().map(|(k, (_, t))| (k.clone(), t.clone())).collect(),
        policy: options
            .policy
            .clone()
            .unwrap_or(CtPolicy { local: CT_DEFAULT_POLICY.into(), remote: CT_DEFAULT_POLICY.into() }),
        signature: [0; 64],
    };
    let mut meta = metadata.unwrap_or_default();
    for k in deathtensors_format::CT_RESERVED {
        meta.remove(*k);
    }
    let build = |ct: &Cryptotensors, meta: &deathtensors_format::Metadata| -> Result<(Header, Vec<u8>)> {
        let mut m = meta.clone();
        m.extend(ct.metadata_entries());
        let header = Header::new_safetensors(specs.clone(), Some(m), &Limits::DEFAULT).map_err(fmt)?;
        let head = Head::encode(&header, Flags::EMPTY).map_err(fmt)?;
        Ok((header, head))
    };
    let (header, head) = build(&ct, &meta)?;
    let temp = crate::fs::atomic::TempFile::create(path, options.durable).map_err(io)?;
    temp.file().set_len(head.len() as u64 + header.data_len()).map_err(io)?;
    // Each tensor encrypted into its place, tensors spread over all cores.
    let tasks: Vec<_> =
        header.tensors().iter().filter(|t| deks.contains_key(t.name.as_str()) || t.byte_len() > 0).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::io::Result<Vec<(String, CtData)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..crate::fs::hash::threads())
            .map(|_| {
                s.spawn(|| -> std::io::Result<Vec<(String, CtData)>> {
                    let mut done = Vec::new();
                    let mut writeback = crate::fs::writeback::Writeback::new(options.durable);
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(t) = tasks.get(i) else { return Ok(done) };
                        let plain = by_name[t.name.as_str()];
                        let at = head.len() as u64 + t.data_offsets.0;
                        let Some((dek, entry)) = deks.get(t.name.as_str()) else {
                            writeback.write_at(temp.file(), plain, at)?;
                            continue;
                        };
                        let key = key_of(options.alg, dek).expect("a key of the cipher's length");
                        let mut data = entry.data.clone();
                        match &mut data {
                            CtData::Whole(None) => {}
                            CtData::Whole(Some((iv, tag))) => {
                                let mut buf = plain.to_vec();
                                let t = key
                                    .seal_in_place_separate_tag(
                                        Nonce::assume_unique_for_key(*iv),
                                        Aad::empty(),
                                        &mut buf,
                                    )
                                    .expect("within limits");
                                tag.copy_from_slice(t.as_ref());
                                writeback.write_at(temp.file(), &buf, at)?;
                            }
                            CtData::Chunked { base_iv, tags } => {
                                let c = chunked.unwrap_or(deathtensors_format::CT_DEFAULT_CHUNK_SIZE);
                                let len = plain.len() as u64;
                                let mut buf = Vec::new();
                                for j in 0..chunk_count(len, c) {
                                    let (cs, ce) = deathtensors_format::chunk_range(len, c, j);
                                    buf.clear();
                                    buf.extend_from_slice(&plain[cs as usize..ce as usize]);
                                    // An empty tensor's one chunk uses the base nonce itself.
                                    let nonce = if len == 0 {
                                        *base_iv
                                    } else {
                                        ct_chunk_nonce(base_iv, j).expect("counter checked")
                                    };
                                    let t = key
                                        .seal_in_place_separate_tag(
                                            Nonce::assume_unique_for_key(nonce),
                                            Aad::empty(),
                                            &mut buf,
                                        )
                                        .expect("within limits");
                                    tags[16 * j as usize..16 * (j as usize + 1)].copy_from_slice(t.as_ref());
                                    writeback.write_at(temp.file(), &buf, at + cs)?;
                                }
                            }
                        }
                        done.push((String::from(&t.name), data));
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    for r in results {
        for (name, data) in r.map_err(io)? {
            if let Some(t) = ct.tensors.get_mut(&name) {
                t.data = data;
            }
        }
    }
    // Sign the re-serialised header without its signature, as cryptotensors does.
    let (unsigned, _) = build(&ct, &meta)?;
    let mut all = meta.clone();
    all.extend(ct.metadata_entries());
    ct.signature = options.signer.sign(&ct_signed_message(&unsigned, &all));
    let (header, final_head) = build(&ct, &meta)?;
    if final_head.len() != head.len() {
        return Err(input("internal error: the header changed length".into()));
    }
    crate::fs::pread::write_all_at(temp.file(), &final_head, 0).map_err(io)?;
    temp.persist().map_err(io)?;
    Ok(header)
}
