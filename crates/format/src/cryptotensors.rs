//! cryptotensors 0.2.3 files (`docs/FORMAT.md` section 12): safetensors
//! files whose `__metadata__` holds four JSON documents as strings,
//! `__encryption__`, `__crypto_keys__`, `__policy__` and `__signature__`.
//! This module decodes and checks them strictly, encodes them, and lays out
//! what cryptotensors' ciphers and signature consume: its chunk nonces and
//! the re-serialised header it signs. Cipher work is `deathtensors-io`'s.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use base64::Engine;

use crate::crypt::chunk_count;
use crate::header::Header;
use crate::json::{escape, uint};
use crate::tensor::{Format, Metadata};
use crate::tree::Tree;
use crate::{Error, ErrorKind, Result};

/// The reserved `__metadata__` keys.
pub const CT_ENCRYPTION: &str = "__encryption__";
/// The key descriptors and layout version.
pub const CT_CRYPTO_KEYS: &str = "__crypto_keys__";
/// The Rego policies.
pub const CT_POLICY: &str = "__policy__";
/// The Ed25519 signature.
pub const CT_SIGNATURE: &str = "__signature__";
/// The four reserved keys, which writers regenerate.
pub const CT_RESERVED: &[&str] = &[CT_CRYPTO_KEYS, CT_ENCRYPTION, CT_POLICY, CT_SIGNATURE];
/// The chunk size of version 2 files that do not say theirs.
pub const CT_DEFAULT_CHUNK_SIZE: u64 = 2 << 20;
/// The policy cryptotensors writes when none is given: allow everything.
pub const CT_DEFAULT_POLICY: &str = "package model\nallow = true";

/// A cryptotensors cipher, by its normalised `alg` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtAlg {
    /// `aes128gcm`: AES-128-GCM, 16-byte keys.
    Aes128Gcm,
    /// `aes256gcm`: AES-256-GCM, 32-byte keys (cryptotensors' default).
    Aes256Gcm,
    /// `chacha20poly1305`: ChaCha20-Poly1305 (RFC 8439), 32-byte keys.
    ChaCha20Poly1305,
}

impl CtAlg {
    /// The cipher of an `alg` as cryptotensors reads it: dashes removed,
    /// case ignored (`AES-256-GCM` is `aes256gcm`).
    pub fn parse(alg: &str) -> Option<CtAlg> {
        let norm: String = alg.chars().filter(|&c| c != '-').flat_map(char::to_lowercase).collect();
        match norm.as_str() {
            "aes128gcm" => Some(CtAlg::Aes128Gcm),
            "aes256gcm" => Some(CtAlg::Aes256Gcm),
            "chacha20poly1305" => Some(CtAlg::ChaCha20Poly1305),
            _ => None,
        }
    }

    /// The normalised name.
    pub const fn name(self) -> &'static str {
        match self {
            CtAlg::Aes128Gcm => "aes128gcm",
            CtAlg::Aes256Gcm => "aes256gcm",
            CtAlg::ChaCha20Poly1305 => "chacha20poly1305",
        }
    }

    /// The key length in bytes.
    pub const fn key_len(self) -> usize {
        match self {
            CtAlg::Aes128Gcm => 16,
            CtAlg::Aes256Gcm | CtAlg::ChaCha20Poly1305 => 32,
        }
    }
}

/// A key descriptor of `__crypto_keys__`: no key material, only how to find
/// the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtKeyRef {
    /// The algorithm, verbatim.
    pub alg: String,
    /// The key id.
    pub kid: Option<String>,
    /// The JWK set URL.
    pub jku: Option<String>,
}

/// How a tensor's data is encrypted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CtData {
    /// Version 1: one AEAD call; `None` for an empty tensor (no call).
    Whole(Option<([u8; 12], [u8; 16])>),
    /// Chunked: nonces from `base_iv`, one tag per chunk.
    Chunked {
        /// The base nonce.
        base_iv: [u8; 12],
        /// The tags, 16 bytes per chunk, in order.
        tags: Vec<u8>,
    },
}

/// One tensor of `__encryption__`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtTensor {
    /// The tensor's own key, wrapped under the master key (no tag).
    pub wrapped_key: Vec<u8>,
    /// The nonce of the wrap.
    pub key_iv: [u8; 12],
    /// The tag of the wrap.
    pub key_tag: [u8; 16],
    /// The data's nonces and tags.
    pub data: CtData,
}

/// The `__policy__` document: Rego sources.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtPolicy {
    /// Evaluated before keys are released (`data.model.allow`).
    pub local: String,
    /// For a key service; stored and signed, never evaluated locally.
    pub remote: String,
}

/// The crypto fields of a cryptotensors file, decoded and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cryptotensors {
    /// The layout version, 1 or 2.
    pub version: u8,
    /// The chunk size, if the file says one.
    pub chunk_size: Option<u64>,
    /// The master (key-encryption) key descriptor.
    pub enc: CtKeyRef,
    /// The signing key descriptor.
    pub sign: CtKeyRef,
    /// The encrypted tensors, by name; tensors not listed are plaintext.
    pub tensors: BTreeMap<String, CtTensor>,
    /// The policies.
    pub policy: CtPolicy,
    /// The Ed25519 signature.
    pub signature: [u8; 64],
}

fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::InvalidCryptotensors { what })
}

fn b64(s: &str, what: &'static str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).map_err(|_| invalid(what))
}

fn b64_array<const N: usize>(s: &str, what: &'static str) -> Result<[u8; N]> {
    b64(s, what)?.try_into().map_err(|_| invalid(what))
}

fn b64_enc(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn object<'a>(tree: &'a Tree, what: &'static str) -> Result<&'a [(String, Tree)]> {
    match tree {
        Tree::Object(f) => Ok(f),
        _ => Err(invalid(what)),
    }
}

fn field<'a>(fields: &'a [(String, Tree)], name: &str) -> Option<&'a Tree> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn string<'a>(fields: &'a [(String, Tree)], name: &str, what: &'static str) -> Result<Option<&'a str>> {
    match field(fields, name) {
        None | Some(Tree::Null) => Ok(None),
        Some(Tree::Str(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(what)),
    }
}

fn key_ref(tree: &Tree, kty: &str, what: &'static str) -> Result<CtKeyRef> {
    let f = object(tree, what)?;
    if string(f, "kty", what)? != Some(kty) {
        return Err(invalid(what));
    }
    // Key material in a descriptor would be a key published in the file.
    if ["k", "x", "d"].iter().any(|k| field(f, k).is_some()) {
        return Err(invalid(what));
    }
    let alg = string(f, "alg", what)?.ok_or_else(|| invalid(what))?.to_string();
    Ok(CtKeyRef {
        alg,
        kid: string(f, "kid", what)?.map(str::to_string),
        jku: string(f, "jku", what)?.map(str::to_string),
    })
}

impl Cryptotensors {
    /// Decodes the crypto fields of a safetensors header: `None` for a file
    /// without `__encryption__` (plain safetensors).
    ///
    /// Stricter than cryptotensors: every field has its exact length, every
    /// entry names a tensor of the file whose tags are exactly one per
    /// chunk, keys of the nested JSON are unique, and descriptors hold no
    /// key material.
    ///
    /// # Errors
    /// `InvalidCryptotensors` naming the field at fault; `MissingField` for
    /// a missing reserved entry.
    pub fn from_header(header: &Header) -> Result<Option<Cryptotensors>> {
        let Some(meta) = header.metadata() else { return Ok(None) };
        let Some(enc_json) = meta.get(CT_ENCRYPTION) else { return Ok(None) };
        if header.format() != Format::Safetensors {
            return Ok(None);
        }
        let need = |k: &'static str| meta.get(k).ok_or(Error::new(ErrorKind::MissingField { field: k }));
        let keys = crate::de::tree(need(CT_CRYPTO_KEYS)?.as_bytes(), CT_CRYPTO_KEYS)?;
        let kf = object(&keys, "__crypto_keys__")?;
        let version = match string(kf, "version", "version")? {
            Some("1") => 1,
            Some("2") => 2,
            _ => return Err(invalid("version")),
        };
        let chunk_size = match field(kf, "chunk_size") {
            None => None,
            Some(Tree::Uint(c)) if *c > 0 => Some(*c),
            Some(_) => return Err(invalid("chunk_size")),
        };
        let enc = key_ref(field(kf, "enc").ok_or_else(|| invalid("enc"))?, "oct", "enc")?;
        let sign = key_ref(field(kf, "sign").ok_or_else(|| invalid("sign"))?, "okp", "sign")?;
        let alg = CtAlg::parse(&enc.alg).ok_or_else(|| invalid("enc.alg"))?;
        if !sign.alg.eq_ignore_ascii_case("ed25519") {
            return Err(invalid("sign.alg"));
        }
        let policy_tree = crate::de::tree(need(CT_POLICY)?.as_bytes(), CT_POLICY)?;
        let pf = object(&policy_tree, "__policy__")?;
        let policy = CtPolicy {
            local: string(pf, "local", "policy.local")?.ok_or_else(|| invalid("policy.local"))?.to_string(),
            remote: string(pf, "remote", "policy.remote")?.ok_or_else(|| invalid("policy.remote"))?.to_string(),
        };
        let signature = b64_array::<64>(need(CT_SIGNATURE)?, "__signature__")?;
        let mut out = Cryptotensors { version, chunk_size, enc, sign, tensors: BTreeMap::new(), policy, signature };
        let chunk = out.chunked();
        let entries = crate::de::tree(enc_json.as_bytes(), CT_ENCRYPTION)?;
        for (name, entry) in object(&entries, "__encryption__")? {
            let tensor = Self::tensor_entry(header, name, entry, alg, chunk).map_err(|e| e.with_tensor(name))?;
            out.tensors.insert(name.clone(), tensor);
        }
        if out.tensors.is_empty() {
            return Err(invalid("__encryption__"));
        }
        Ok(Some(out))
    }

    /// One tensor's `__encryption__` entry, checked against its header entry.
    fn tensor_entry(header: &Header, name: &str, entry: &Tree, alg: CtAlg, chunk: Option<u64>) -> Result<CtTensor> {
        let info =
            header.get(name).ok_or_else(|| invalid("__encryption__ entry for a tensor the file does not have"))?;
        let f = object(entry, "__encryption__ entry")?;
        let text = |k: &'static str| string(f, k, k);
        let wrapped_key = b64(text("wrapped_key")?.ok_or_else(|| invalid("wrapped_key"))?, "wrapped_key")?;
        if wrapped_key.len() != alg.key_len() {
            return Err(invalid("wrapped_key"));
        }
        let key_iv = b64_array(text("key_iv")?.ok_or_else(|| invalid("key_iv"))?, "key_iv")?;
        let key_tag = b64_array(text("key_tag")?.ok_or_else(|| invalid("key_tag"))?, "key_tag")?;
        let data = match chunk {
            Some(c) => {
                let base_iv = b64_array(text("base_iv")?.ok_or_else(|| invalid("base_iv"))?, "base_iv")?;
                let tags = b64(text("tags")?.ok_or_else(|| invalid("tags"))?, "tags")?;
                if tags.len() as u64 != 16 * chunk_count(info.byte_len(), c) {
                    return Err(invalid("tags (one 16-byte tag per chunk of chunk_size bytes)"));
                }
                // Nonces count up from base_iv; cryptotensors refuses to wrap around.
                if ct_chunk_nonce(&base_iv, chunk_count(info.byte_len(), c) - 1).is_none() {
                    return Err(invalid("base_iv"));
                }
                CtData::Chunked { base_iv, tags }
            }
            None => match (text("iv")?, text("tag")?) {
                (Some(""), Some("")) if info.byte_len() == 0 => CtData::Whole(None),
                (Some(iv), Some(tag)) if info.byte_len() > 0 => {
                    CtData::Whole(Some((b64_array(iv, "iv")?, b64_array(tag, "tag")?)))
                }
                _ => return Err(invalid("iv")),
            },
        };
        Ok(CtTensor { wrapped_key, key_iv, key_tag, data })
    }

    /// The chunk size if the data is chunked: when the file says one
    /// (whatever its version, as cryptotensors reads it), or 2 MiB for
    /// version 2.
    pub fn chunked(&self) -> Option<u64> {
        match (self.chunk_size, self.version) {
            (Some(c), _) => Some(c),
            (None, 2) => Some(CT_DEFAULT_CHUNK_SIZE),
            (None, _) => None,
        }
    }

    /// The cipher of the master key's descriptor.
    pub fn alg(&self) -> Option<CtAlg> {
        CtAlg::parse(&self.enc.alg)
    }

    /// The four reserved metadata entries for these fields, as a writer
    /// stores them (compact JSON, keys sorted, as cryptotensors writes).
    pub fn metadata_entries(&self) -> [(String, String); 4] {
        let key = |out: &mut Vec<u8>, r: &CtKeyRef, kty: &str| {
            out.extend_from_slice(b"{\"alg\":");
            escape(out, &r.alg);
            if let Some(j) = &r.jku {
                out.extend_from_slice(b",\"jku\":");
                escape(out, j);
            }
            if let Some(k) = &r.kid {
                out.extend_from_slice(b",\"kid\":");
                escape(out, k);
            }
            out.extend_from_slice(b",\"kty\":");
            escape(out, kty);
            out.push(b'}');
        };
        let mut keys = Vec::new();
        keys.push(b'{');
        if let Some(c) = self.chunk_size {
            keys.extend_from_slice(b"\"chunk_size\":");
            uint(&mut keys, c);
            keys.push(b',');
        }
        keys.extend_from_slice(b"\"enc\":");
        key(&mut keys, &self.enc, "oct");
        keys.extend_from_slice(b",\"sign\":");
        key(&mut keys, &self.sign, "okp");
        keys.extend_from_slice(b",\"version\":");
        escape(&mut keys, if self.version == 1 { "1" } else { "2" });
        keys.push(b'}');

        let mut enc = Vec::new();
        enc.push(b'{');
        for (i, (name, t)) in self.tensors.iter().enumerate() {
            if i > 0 {
                enc.push(b',');
            }
            escape(&mut enc, name);
            enc.extend_from_slice(b":{\"wrapped_key\":");
            escape(&mut enc, &b64_enc(&t.wrapped_key));
            enc.extend_from_slice(b",\"key_iv\":");
            escape(&mut enc, &b64_enc(&t.key_iv));
            enc.extend_from_slice(b",\"key_tag\":");
            escape(&mut enc, &b64_enc(&t.key_tag));
            match &t.data {
                CtData::Whole(v) => {
                    let (iv, tag) = v.map_or((String::new(), String::new()), |(iv, tag)| (b64_enc(&iv), b64_enc(&tag)));
                    enc.extend_from_slice(b",\"iv\":");
                    escape(&mut enc, &iv);
                    enc.extend_from_slice(b",\"tag\":");
                    escape(&mut enc, &tag);
                }
                CtData::Chunked { base_iv, tags } => {
                    enc.extend_from_slice(b",\"base_iv\":");
                    escape(&mut enc, &b64_enc(base_iv));
                    enc.extend_from_slice(b",\"tags\":");
                    escape(&mut enc, &b64_enc(tags));
                }
            }
            enc.push(b'}');
        }
        enc.push(b'}');

        let mut policy = Vec::new();
        policy.extend_from_slice(b"{\"local\":");
        escape(&mut policy, &self.policy.local);
        policy.extend_from_slice(b",\"remote\":");
        escape(&mut policy, &self.policy.remote);
        policy.push(b'}');

        // The writer made these from valid UTF-8 strings and ASCII.
        let text = |v: Vec<u8>| String::from_utf8(v).unwrap_or_default();
        [
            (CT_CRYPTO_KEYS.to_string(), text(keys)),
            (CT_ENCRYPTION.to_string(), text(enc)),
            (CT_POLICY.to_string(), text(policy)),
            (CT_SIGNATURE.to_string(), b64_enc(&self.signature)),
        ]
    }
}

/// The nonce of chunk `i` of a tensor whose base nonce is `base_iv`: its
/// first 8 bytes, then its last 4 as a big-endian counter plus `i`; `None`
/// where the counter would overflow (cryptotensors refuses to wrap).
pub fn ct_chunk_nonce(base_iv: &[u8; 12], i: u64) -> Option<[u8; 12]> {
    let counter = u32::from_be_bytes([base_iv[8], base_iv[9], base_iv[10], base_iv[11]]);
    let n = u32::try_from(i).ok().and_then(|i| counter.checked_add(i))?;
    let mut out = *base_iv;
    out[8..].copy_from_slice(&n.to_be_bytes());
    Some(out)
}

/// What cryptotensors signs: the header re-serialised as compact JSON,
/// `{"__metadata__":{...}}` first with its keys sorted and without
/// `__signature__`, then the tensors in the order of their offsets, each
/// `"name":{"dtype":..,"shape":[..],"data_offsets":[a,b]}`; strings escaped
/// as serde_json escapes them. Ties in offsets (empty tensors) keep the
/// order cryptotensors' writer uses: dtype descending, then name.
pub fn ct_signed_message(header: &Header, metadata: &Metadata) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + header.len() * 80);
    out.extend_from_slice(b"{\"__metadata__\":{");
    let mut first = true;
    for (k, v) in metadata.iter().filter(|(k, _)| k.as_str() != CT_SIGNATURE) {
        if !first {
            out.push(b',');
        }
        first = false;
        escape(&mut out, k);
        out.push(b':');
        escape(&mut out, v);
    }
    out.push(b'}');
    let mut order: Vec<&crate::TensorInfo> = header.tensors().iter().collect();
    order.sort_by(|a, b| a.data_offsets.cmp(&b.data_offsets).then(b.dtype.cmp(&a.dtype)).then(a.name.cmp(&b.name)));
    for t in order {
        out.push(b',');
        escape(&mut out, &t.name);
        out.extend_from_slice(b":{\"dtype\":\"");
        out.extend_from_slice(t.dtype.name().as_bytes());
        out.extend_from_slice(b"\",\"shape\":[");
        for (i, d) in t.shape.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            uint(&mut out, *d);
        }
        out.extend_from_slice(b"],\"data_offsets\":[");
        uint(&mut out, t.data_offsets.0);
        out.push(b',');
        uint(&mut out, t.data_offsets.1);
        out.extend_from_slice(b"]}");
    }
    out.push(b'}');
    out
}
