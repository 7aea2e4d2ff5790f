//! The `encryption` section of a deathtensors header: its types, their
//! validation, and its JSON (`docs/FORMAT.md` sections 10.2 and 10.3).

use alloc::string::String;
use alloc::vec::Vec;

use crate::json::{escape, hex, parse_hex, uint};
use crate::tree::Tree;
use crate::{Error, ErrorKind, Result};

/// The smallest chunk a header may declare: one page.
pub const MIN_CHUNK_SIZE: u64 = 4096;
/// The largest chunk a header may declare: 64 MiB, so that a reader's
/// per-chunk buffers stay bounded.
pub const MAX_CHUNK_SIZE: u64 = 64 << 20;
/// The chunk size our writer uses: 1 MiB, small enough that one tensor of a
/// few MiB decrypts on every core and a slice touches little more than it
/// needs, large enough that tags cost 16 bytes per MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 1 << 20;
/// The most recipients one file may list: unwrapping tries each, so a
/// hostile file must not list millions.
pub const MAX_RECIPIENTS: usize = 64;
/// The longest key id, in bytes.
pub const MAX_KID_LEN: usize = 256;
/// A wrapped data key: 32 bytes of ciphertext and a 16-byte tag.
pub const WRAPPED_KEY_LEN: usize = 48;

/// Argon2 bounds: a hostile file must not make a reader allocate more than
/// 1 GiB or spin for minutes before anything is checked.
const ARGON2_MEMORY_KIB: (u32, u32) = (8, 1 << 20);
const ARGON2_ITERATIONS: (u32, u32) = (1, 16);
const ARGON2_PARALLELISM: (u32, u32) = (1, 16);

/// The AEAD that encrypts chunks and wraps data keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-256-GCM (NIST SP 800-38D), the default: fastest with AES-NI.
    Aes256Gcm,
    /// ChaCha20-Poly1305 (RFC 8439): fast without AES hardware.
    ChaCha20Poly1305,
}

impl Cipher {
    /// The name the header uses.
    pub const fn name(self) -> &'static str {
        match self {
            Cipher::Aes256Gcm => "AES-256-GCM",
            Cipher::ChaCha20Poly1305 => "CHACHA20-POLY1305",
        }
    }

    /// The cipher of a header name.
    pub fn from_name(name: &str) -> Option<Cipher> {
        match name {
            "AES-256-GCM" => Some(Cipher::Aes256Gcm),
            "CHACHA20-POLY1305" => Some(Cipher::ChaCha20Poly1305),
            _ => None,
        }
    }
}

/// Argon2id parameters of a passphrase recipient.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Argon2Params {
    /// Memory in KiB (8 to 1,048,576, and at least 8 per lane, as
    /// Argon2 (RFC 9106) requires).
    pub memory_kib: u32,
    /// Passes over the memory (1 to 16).
    pub iterations: u32,
    /// Lanes (1 to 16).
    pub parallelism: u32,
}

impl Argon2Params {
    /// What our writer uses: 64 MiB, 3 passes, 1 lane (about 0.2 s here).
    pub const DEFAULT: Argon2Params = Argon2Params { memory_kib: 64 * 1024, iterations: 3, parallelism: 1 };

    fn check(&self) -> Result<()> {
        let within = |v: u32, (lo, hi): (u32, u32)| (lo..=hi).contains(&v);
        if within(self.memory_kib, ARGON2_MEMORY_KIB)
            && within(self.iterations, ARGON2_ITERATIONS)
            && within(self.parallelism, ARGON2_PARALLELISM)
            && self.memory_kib / 8 >= self.parallelism
        {
            Ok(())
        } else {
            Err(invalid("kdf"))
        }
    }
}

/// One way to unwrap the file's data key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recipient {
    /// A symmetric key known by its id.
    Symmetric {
        /// The key's id.
        kid: String,
        /// The data key, wrapped.
        wrapped_key: [u8; WRAPPED_KEY_LEN],
    },
    /// An X25519 public key, through an ephemeral key agreement.
    X25519 {
        /// The recipient key's id.
        kid: String,
        /// The writer's ephemeral public key.
        ephemeral_public_key: [u8; 32],
        /// The data key, wrapped.
        wrapped_key: [u8; WRAPPED_KEY_LEN],
    },
    /// A passphrase, through Argon2id.
    Passphrase {
        /// The KDF's parameters.
        kdf: Argon2Params,
        /// The KDF's salt.
        salt: [u8; 16],
        /// The data key, wrapped.
        wrapped_key: [u8; WRAPPED_KEY_LEN],
    },
}

impl Recipient {
    /// The `kind` field: `symmetric`, `x25519` or `passphrase`.
    pub fn kind(&self) -> &'static str {
        match self {
            Recipient::Symmetric { .. } => "symmetric",
            Recipient::X25519 { .. } => "x25519",
            Recipient::Passphrase { .. } => "passphrase",
        }
    }

    /// The key id, for the kinds that have one.
    pub fn kid(&self) -> Option<&str> {
        match self {
            Recipient::Symmetric { kid, .. } | Recipient::X25519 { kid, .. } => Some(kid),
            Recipient::Passphrase { .. } => None,
        }
    }

    /// The wrapped data key.
    pub fn wrapped_key(&self) -> &[u8; WRAPPED_KEY_LEN] {
        match self {
            Recipient::Symmetric { wrapped_key, .. }
            | Recipient::X25519 { wrapped_key, .. }
            | Recipient::Passphrase { wrapped_key, .. } => wrapped_key,
        }
    }

    fn check(&self) -> Result<()> {
        match self {
            Recipient::Symmetric { kid, .. } | Recipient::X25519 { kid, .. } => check_kid(kid),
            Recipient::Passphrase { kdf, .. } => kdf.check(),
        }
    }
}

/// Checks a key id: 1 to [`MAX_KID_LEN`] bytes, no control characters.
fn check_kid(kid: &str) -> Result<()> {
    let ok = !kid.is_empty() && kid.len() <= MAX_KID_LEN && !kid.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(invalid("kid"))
    }
}

/// The `encryption` section of a header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encryption {
    /// The AEAD.
    pub cipher: Cipher,
    /// Plaintext bytes per chunk: a power of two from [`MIN_CHUNK_SIZE`] to
    /// [`MAX_CHUNK_SIZE`].
    pub chunk_size: u64,
    /// Random per file.
    pub file_id: [u8; 16],
    /// Random per file, XORed into every nonce.
    pub nonce_salt: [u8; 12],
    /// Length of the tag table: 16 bytes per chunk of every tensor.
    pub tag_table_len: u64,
    /// SHA-256 of the tag table.
    pub tag_table_sha256: [u8; 32],
    /// Who can unwrap the data key (1 to [`MAX_RECIPIENTS`]).
    pub recipients: Vec<Recipient>,
    /// For a sealed header (flag bit 4): the length of the inner header,
    /// which follows the outer one encrypted (`docs/FORMAT.md` 10.8).
    pub sealed_header: Option<u64>,
}

impl Encryption {
    /// Checks every rule that does not depend on the tensors.
    ///
    /// # Errors
    /// `InvalidEncryption` naming the field that breaks a rule.
    pub fn check(&self) -> Result<()> {
        let c = self.chunk_size;
        if !(c.is_power_of_two() && (MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&c)) {
            return Err(invalid("chunk_size"));
        }
        if self.recipients.is_empty() || self.recipients.len() > MAX_RECIPIENTS {
            return Err(invalid("recipients"));
        }
        if self.sealed_header == Some(0) {
            return Err(invalid("sealed_header.length"));
        }
        if !self.tag_table_len.is_multiple_of(crate::crypt::TAG_LEN as u64) {
            return Err(invalid("tag_table.length"));
        }
        self.recipients.iter().try_for_each(Recipient::check)
    }
}

fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::InvalidEncryption { what })
}

/// The fields of a JSON object, each once (the tree builder refused
/// duplicates), checked against the fields allowed.
struct Fields<'a> {
    fields: &'a [(String, Tree)],
}

impl<'a> Fields<'a> {
    fn of(tree: &'a Tree, what: &'static str, allowed: &[&str]) -> Result<Fields<'a>> {
        let Tree::Object(fields) = tree else {
            return Err(Error::new(ErrorKind::WrongType { what, expected: "a JSON object" }));
        };
        if let Some((k, _)) = fields.iter().find(|(k, _)| !allowed.contains(&k.as_str())) {
            return Err(Error::new(ErrorKind::UnknownField { field: k.as_str().into() }));
        }
        Ok(Fields { fields })
    }

    fn get(&self, field: &'static str) -> Result<&'a Tree> {
        self.fields
            .iter()
            .find(|(k, _)| k == field)
            .map(|(_, v)| v)
            .ok_or(Error::new(ErrorKind::MissingField { field }))
    }

    fn str(&self, field: &'static str) -> Result<&'a str> {
        match self.get(field)? {
            Tree::Str(s) => Ok(s),
            _ => Err(invalid(field)),
        }
    }

    fn uint(&self, field: &'static str) -> Result<u64> {
        match self.get(field)? {
            Tree::Uint(v) => Ok(*v),
            _ => Err(invalid(field)),
        }
    }

    fn u32(&self, field: &'static str) -> Result<u32> {
        u32::try_from(self.uint(field)?).map_err(|_| invalid(field))
    }

    fn hex<const N: usize>(&self, field: &'static str) -> Result<[u8; N]> {
        parse_hex(self.str(field)?).ok_or_else(|| invalid(field))
    }
}

/// Decodes and checks the `encryption` section from its JSON value.
pub(crate) fn decode(tree: &Tree) -> Result<Encryption> {
    let f = Fields::of(
        tree,
        "field \"encryption\"",
        &["cipher", "chunk_size", "file_id", "nonce_salt", "tag_table", "recipients", "sealed_header"],
    )?;
    let cipher = Cipher::from_name(f.str("cipher")?).ok_or_else(|| invalid("cipher"))?;
    let table = Fields::of(f.get("tag_table")?, "field \"tag_table\"", &["length", "sha256"])?;
    let Tree::Array(list) = f.get("recipients")? else {
        return Err(invalid("recipients"));
    };
    if list.is_empty() || list.len() > MAX_RECIPIENTS {
        return Err(invalid("recipients"));
    }
    let recipients = list.iter().map(decode_recipient).collect::<Result<Vec<_>>>()?;
    let enc = Encryption {
        cipher,
        chunk_size: f.uint("chunk_size")?,
        file_id: f.hex("file_id")?,
        nonce_salt: f.hex("nonce_salt")?,
        tag_table_len: table.uint("length").map_err(|_| invalid("tag_table.length"))?,
        tag_table_sha256: table.hex("sha256").map_err(|_| invalid("tag_table.sha256"))?,
        recipients,
        sealed_header: match f.get("sealed_header") {
            Ok(tree) => {
                let sealed = Fields::of(tree, "field \"sealed_header\"", &["length"])?;
                Some(sealed.uint("length").map_err(|_| invalid("sealed_header.length"))?)
            }
            Err(_) => None,
        },
    };
    enc.check()?;
    Ok(enc)
}

fn decode_recipient(tree: &Tree) -> Result<Recipient> {
    let kind = match tree {
        Tree::Object(fields) => fields.iter().find(|(k, _)| k == "kind").map(|(_, v)| v),
        _ => return Err(Error::new(ErrorKind::WrongType { what: "recipient", expected: "a JSON object" })),
    };
    let kind = match kind {
        Some(Tree::Str(s)) => s.as_str(),
        Some(_) => return Err(invalid("recipient kind")),
        None => return Err(Error::new(ErrorKind::MissingField { field: "kind" })),
    };
    let r = match kind {
        "symmetric" => {
            let f = Fields::of(tree, "recipient", &["kind", "kid", "wrapped_key"])?;
            Recipient::Symmetric { kid: f.str("kid")?.into(), wrapped_key: f.hex("wrapped_key")? }
        }
        "x25519" => {
            let f = Fields::of(tree, "recipient", &["kind", "kid", "ephemeral_public_key", "wrapped_key"])?;
            Recipient::X25519 {
                kid: f.str("kid")?.into(),
                ephemeral_public_key: f.hex("ephemeral_public_key")?,
                wrapped_key: f.hex("wrapped_key")?,
            }
        }
        "passphrase" => {
            let f = Fields::of(
                tree,
                "recipient",
                &["kind", "kdf", "memory_kib", "iterations", "parallelism", "salt", "wrapped_key"],
            )?;
            if f.str("kdf")? != "argon2id" {
                return Err(invalid("kdf"));
            }
            let kdf = Argon2Params {
                memory_kib: f.u32("memory_kib").map_err(|_| invalid("kdf"))?,
                iterations: f.u32("iterations").map_err(|_| invalid("kdf"))?,
                parallelism: f.u32("parallelism").map_err(|_| invalid("kdf"))?,
            };
            Recipient::Passphrase { kdf, salt: f.hex("salt")?, wrapped_key: f.hex("wrapped_key")? }
        }
        _ => return Err(invalid("recipient kind")),
    };
    r.check()?;
    Ok(r)
}

/// Appends the section's JSON value (compact, fields in the spec's order).
pub(crate) fn encode(out: &mut Vec<u8>, e: &Encryption) {
    let field = |out: &mut Vec<u8>, name: &str, first: bool| {
        if !first {
            out.push(b',');
        }
        escape(out, name);
        out.push(b':');
    };
    let hex_str = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.push(b'"');
        hex(out, bytes);
        out.push(b'"');
    };
    out.push(b'{');
    field(out, "cipher", true);
    escape(out, e.cipher.name());
    field(out, "chunk_size", false);
    uint(out, e.chunk_size);
    field(out, "file_id", false);
    hex_str(out, &e.file_id);
    field(out, "nonce_salt", false);
    hex_str(out, &e.nonce_salt);
    field(out, "tag_table", false);
    out.push(b'{');
    field(out, "length", true);
    uint(out, e.tag_table_len);
    field(out, "sha256", false);
    hex_str(out, &e.tag_table_sha256);
    out.push(b'}');
    field(out, "recipients", false);
    out.push(b'[');
    for (i, r) in e.recipients.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        field(out, "kind", true);
        escape(out, r.kind());
        match r {
            Recipient::Symmetric { kid, .. } => {
                field(out, "kid", false);
                escape(out, kid);
            }
            Recipient::X25519 { kid, ephemeral_public_key, .. } => {
                field(out, "kid", false);
                escape(out, kid);
                field(out, "ephemeral_public_key", false);
                hex_str(out, ephemeral_public_key);
            }
            Recipient::Passphrase { kdf, salt, .. } => {
                field(out, "kdf", false);
                escape(out, "argon2id");
                field(out, "memory_kib", false);
                uint(out, kdf.memory_kib.into());
                field(out, "iterations", false);
                uint(out, kdf.iterations.into());
                field(out, "parallelism", false);
                uint(out, kdf.parallelism.into());
                field(out, "salt", false);
                hex_str(out, salt);
            }
        }
        field(out, "wrapped_key", false);
        hex_str(out, r.wrapped_key());
        out.push(b'}');
    }
    out.push(b']');
    if let Some(n) = e.sealed_header {
        field(out, "sealed_header", false);
        out.extend_from_slice(b"{\"length\":");
        uint(out, n);
        out.push(b'}');
    }
    out.push(b'}');
}
