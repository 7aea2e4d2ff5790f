//! The one error type of this crate.

use std::fmt;
use std::path::{Path, PathBuf};

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from reading, writing or verifying a file: what went wrong, the
/// file, and what was being done.
#[derive(Clone, Debug)]
pub struct Error(Box<Inner>);

#[derive(Clone, Debug)]
struct Inner {
    kind: ErrorKind,
    path: Option<PathBuf>,
    doing: &'static str,
}

/// What went wrong. New variants may be added in minor releases. A clone of
/// an `Io` error keeps its kind, its OS error code and its message.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file is malformed or hostile; the inner error says what and where.
    Format(deathtensors_format::Error),
    /// The operating system reported an error.
    Io(std::io::Error),
    /// The SHA-256 footer does not match the file's contents.
    ChecksumMismatch {
        /// The digest stored in the footer.
        expected: [u8; 32],
        /// The digest of the contents.
        actual: [u8; 32],
    },
    /// A tensor's bytes do not match its `sha256` digest (the header's, or
    /// one the caller gave).
    TensorDigestMismatch {
        /// The tensor.
        tensor: String,
        /// The digest it must have: the header's, or one the caller holds
        /// (a checkpoint's metadata, say).
        expected: [u8; 32],
        /// The digest of the bytes.
        actual: [u8; 32],
    },
    /// A collection's block does not match the `sha256` its manifest records.
    BlockDigestMismatch {
        /// The block: its number and file name.
        block: String,
        /// The digest in the manifest.
        expected: [u8; 32],
        /// The digest of its rows.
        actual: [u8; 32],
    },
    /// There is no tensor of this name in the file.
    TensorNotFound(String),
    /// The file has no checksum of the requested kind.
    NoChecksum {
        /// The kind of checksum: footer or per-tensor digests.
        what: &'static str,
    },
    /// A compressed data blob could not be decompressed, or decompressed to a
    /// size other than the header declares.
    Decompress(String),
    /// A chunk of a compressed tensor (`docs/FORMAT.md` section 15) could not
    /// be decompressed, or decompressed to a size other than the header
    /// declares.
    DecompressChunk {
        /// The tensor.
        tensor: String,
        /// The chunk's index in the tensor's table.
        chunk: u64,
        /// What is wrong.
        message: String,
    },
    /// The caller gave a writer bytes that do not match the specs, or called
    /// it out of order.
    InvalidInput(String),
    /// A key is malformed (wrong length, bad JWK, bad key id).
    InvalidKey(String),
    /// The file is encrypted and none of the keys given is one of its
    /// recipients.
    NoKey {
        /// The recipients the file lists (key ids, or "a passphrase").
        recipients: Vec<String>,
    },
    /// Decryption failed: a wrong key, or data or header that were changed.
    /// Deliberately says where, never why.
    Decrypt {
        /// What failed to decrypt: "the data key", "the header", or a
        /// tensor and chunk.
        what: String,
    },
    /// The tag table does not match the digest in the header.
    TagTableMismatch,
    /// A signature in the file does not verify.
    BadSignature {
        /// The signer's fingerprint.
        signer: String,
    },
    /// A signature was required and the file has none.
    Unsigned,
    /// A signature was required of a file whose signature can be checked
    /// only with a public key it does not hold (a cryptotensors file names
    /// its signer by key id), and no key given is it.
    SignerKeyNeeded {
        /// The signer, as the file names it.
        signer: String,
    },
    /// None of the file's signers is trusted.
    UntrustedSigner {
        /// The fingerprints of the file's signers.
        signers: Vec<String>,
    },
    /// Encryption was required and the file is not encrypted.
    NotEncrypted,
    /// The file's Rego policy refuses access for the caller's input.
    PolicyDenied(String),
    /// Deriving keys from the file's passphrase entries would take more
    /// Argon2 work (KiB × passes) than the reader allows
    /// (`ReadOptions::max_kdf_work`).
    KdfBudget {
        /// The work the open would have come to with the next derivation.
        needed: u64,
        /// The reader's budget.
        budget: u64,
    },
    /// Another writer holds a collection's lock; the message names it.
    Locked(String),
    /// A collection is damaged beyond its manifest: a block file it names
    /// is missing, say. The message names the file.
    DamagedCollection(String),
    /// A distributed checkpoint's metadata is malformed or hostile, or its
    /// rank files do not match it (another checkpoint's, the wrong size, a
    /// block of the wrong length). The message says what.
    InvalidCheckpoint(String),
    /// A model directory's signature bundle is refused (another key, an
    /// untrusted chain, modified, unsupported); the message says why.
    ModelSignature(String),
    /// A model directory does not match its signature; the message names
    /// the files changed, missing and added.
    ModelMismatch(String),
}

impl Clone for ErrorKind {
    fn clone(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            K::Io(e) => K::Io(match e.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code),
                None => std::io::Error::new(e.kind(), e.to_string()),
            }),
            K::Format(e) => K::Format(e.clone()),
            K::ChecksumMismatch { expected, actual } => K::ChecksumMismatch { expected: *expected, actual: *actual },
            K::TensorDigestMismatch { tensor, expected, actual } => {
                K::TensorDigestMismatch { tensor: tensor.clone(), expected: *expected, actual: *actual }
            }
            K::BlockDigestMismatch { block, expected, actual } => {
                K::BlockDigestMismatch { block: block.clone(), expected: *expected, actual: *actual }
            }
            K::TensorNotFound(name) => K::TensorNotFound(name.clone()),
            K::NoChecksum { what } => K::NoChecksum { what },
            K::Decompress(m) => K::Decompress(m.clone()),
            K::DecompressChunk { tensor, chunk, message } => {
                K::DecompressChunk { tensor: tensor.clone(), chunk: *chunk, message: message.clone() }
            }
            K::InvalidInput(m) => K::InvalidInput(m.clone()),
            K::InvalidKey(m) => K::InvalidKey(m.clone()),
            K::NoKey { recipients } => K::NoKey { recipients: recipients.clone() },
            K::Decrypt { what } => K::Decrypt { what: what.clone() },
            K::TagTableMismatch => K::TagTableMismatch,
            K::BadSignature { signer } => K::BadSignature { signer: signer.clone() },
            K::Unsigned => K::Unsigned,
            K::SignerKeyNeeded { signer } => K::SignerKeyNeeded { signer: signer.clone() },
            K::UntrustedSigner { signers } => K::UntrustedSigner { signers: signers.clone() },
            K::NotEncrypted => K::NotEncrypted,
            K::PolicyDenied(m) => K::PolicyDenied(m.clone()),
            K::KdfBudget { needed, budget } => K::KdfBudget { needed: *needed, budget: *budget },
            K::Locked(m) => K::Locked(m.clone()),
            K::DamagedCollection(m) => K::DamagedCollection(m.clone()),
            K::InvalidCheckpoint(m) => K::InvalidCheckpoint(m.clone()),
            K::ModelSignature(m) => K::ModelSignature(m.clone()),
            K::ModelMismatch(m) => K::ModelMismatch(m.clone()),
        }
    }
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, path: Option<&Path>, doing: &'static str) -> Error {
        Error(Box::new(Inner { kind, path: path.map(Path::to_path_buf), doing }))
    }

    /// An I/O error of the file at `path` (or of the object at a URL, for
    /// sources other than files: `deathtensors-remote`), while `doing`
    /// (`"cannot open"`, `"cannot read"`).
    pub fn from_io(e: std::io::Error, path: &Path, doing: &'static str) -> Error {
        Error::io(e, path, doing)
    }

    pub(crate) fn io(e: std::io::Error, path: &Path, doing: &'static str) -> Error {
        // A source of bytes that reports damage through a read (a torch
        // checkpoint's storage failing its CRC, `converted.rs`) carries
        // this crate's error: it is that error, not an I/O one.
        let e = if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            let kind = e.kind();
            match e.into_inner().map(|inner| inner.downcast::<Error>()) {
                Some(Ok(inner)) => return *inner,
                Some(Err(other)) => std::io::Error::new(kind, other),
                None => std::io::Error::from(kind),
            }
        } else {
            e
        };
        Error::new(ErrorKind::Io(e), Some(path), doing)
    }

    pub(crate) fn format(e: deathtensors_format::Error, path: &Path, doing: &'static str) -> Error {
        Error::new(ErrorKind::Format(e), Some(path), doing)
    }

    pub(crate) fn input(message: impl Into<String>, path: &Path, doing: &'static str) -> Error {
        Error::new(ErrorKind::InvalidInput(message.into()), Some(path), doing)
    }

    /// An [`ErrorKind::InvalidCheckpoint`] about `path`.
    pub(crate) fn checkpoint(message: impl Into<String>, path: &Path, doing: &'static str) -> Error {
        Error::new(ErrorKind::InvalidCheckpoint(message.into()), Some(path), doing)
    }

    /// This error, naming `path` instead of the file it named: a file
    /// written under a temp name (`crate::fs::staged`) is named by its target.
    pub(crate) fn with_path(mut self, path: &Path) -> Error {
        self.0.path = Some(path.to_path_buf());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// What was being done, as a phrase: "cannot open", "cannot write", ...
    pub fn doing(&self) -> &'static str {
        self.0.doing
    }

    /// The file concerned, if any.
    pub fn path(&self) -> Option<&Path> {
        self.0.path.as_deref()
    }

    /// Whether this error means the file is invalid or failed a check (as
    /// opposed to an I/O or usage error).
    pub fn is_invalid_file(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::Format(_)
                | ErrorKind::ChecksumMismatch { .. }
                | ErrorKind::TensorDigestMismatch { .. }
                | ErrorKind::BlockDigestMismatch { .. }
                | ErrorKind::DamagedCollection(_)
                | ErrorKind::InvalidCheckpoint(_)
                | ErrorKind::Decompress(_)
                | ErrorKind::DecompressChunk { .. }
                | ErrorKind::Decrypt { .. }
                | ErrorKind::TagTableMismatch
                | ErrorKind::BadSignature { .. }
                | ErrorKind::Unsigned
                | ErrorKind::SignerKeyNeeded { .. }
                | ErrorKind::UntrustedSigner { .. }
                | ErrorKind::NotEncrypted
                | ErrorKind::PolicyDenied(_)
                | ErrorKind::ModelSignature(_)
                | ErrorKind::ModelMismatch(_)
        )
    }

    /// Whether this error is an integrity failure (footer or tensor digest).
    pub fn is_integrity(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::ChecksumMismatch { .. }
                | ErrorKind::TensorDigestMismatch { .. }
                | ErrorKind::BlockDigestMismatch { .. }
                | ErrorKind::TagTableMismatch
                | ErrorKind::Decrypt { .. }
                | ErrorKind::BadSignature { .. }
                | ErrorKind::ModelSignature(_)
                | ErrorKind::ModelMismatch(_)
        )
    }

    /// Whether this error is about trust: a signature or encryption that was
    /// required and is missing, untrusted or invalid.
    pub fn is_trust(&self) -> bool {
        matches!(
            self.0.kind,
            ErrorKind::BadSignature { .. }
                | ErrorKind::Unsigned
                | ErrorKind::SignerKeyNeeded { .. }
                | ErrorKind::UntrustedSigner { .. }
                | ErrorKind::NotEncrypted
                | ErrorKind::ModelSignature(_)
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use deathtensors_format::hex_digest;
        let Inner { kind, path, doing } = &*self.0;
        match path {
            Some(p) => write!(f, "{doing} {}: ", p.display())?,
            None => write!(f, "{doing}: ")?,
        }
        match kind {
            // Writing, the problem is in what was given (an empty tensor
            // name, say), not in a file.
            ErrorKind::Format(e) if *doing == "cannot write" => write!(f, "invalid tensors: {e}"),
            ErrorKind::Format(e) => write!(f, "invalid file: {e}"),
            ErrorKind::Io(e) => write!(f, "{e}"),
            ErrorKind::ChecksumMismatch { expected, actual } => write!(
                f,
                "SHA-256 footer mismatch: file says {}, contents hash to {}",
                hex_digest(expected),
                hex_digest(actual)
            ),
            ErrorKind::TensorDigestMismatch { tensor, expected, actual } => write!(
                f,
                "tensor {tensor:?} is corrupt: its digest is sha256 {}, its bytes hash to {}",
                hex_digest(expected),
                hex_digest(actual)
            ),
            ErrorKind::BlockDigestMismatch { block, expected, actual } => write!(
                f,
                "{block} is corrupt: the manifest says sha256 {}, its rows hash to {}",
                hex_digest(expected),
                hex_digest(actual)
            ),
            ErrorKind::TensorNotFound(name) => write!(f, "no tensor named {name:?}"),
            ErrorKind::NoChecksum { what } => write!(f, "the file has no {what}"),
            ErrorKind::Decompress(m) => write!(f, "cannot decompress the data blob: {m}"),
            ErrorKind::DecompressChunk { tensor, chunk, message } => {
                write!(f, "cannot decompress tensor {tensor:?}, chunk {chunk}: {message}")
            }
            ErrorKind::InvalidInput(m) => write!(f, "{m}"),
            ErrorKind::InvalidKey(m) => write!(f, "{m}"),
            ErrorKind::NoKey { recipients } => {
                write!(f, "the file is encrypted and no key given matches its recipients ({})", recipients.join(", "))
            }
            ErrorKind::Decrypt { what } => write!(f, "cannot decrypt {what} (wrong key, or the file was modified)"),
            ErrorKind::KdfBudget { needed, budget } => write!(
                f,
                "its passphrase entries need {needed} KiB-passes of Argon2 work, more than this reader allows \
                 ({budget}; raise max_kdf_work to open it)"
            ),
            ErrorKind::TagTableMismatch => {
                f.write_str("the tag table does not match its digest in the header (the file was modified)")
            }
            ErrorKind::BadSignature { signer } => {
                write!(f, "the signature by {signer} does not verify (the file was modified)")
            }
            ErrorKind::Unsigned => f.write_str("a signature is required and the file is not signed"),
            ErrorKind::SignerKeyNeeded { signer } => write!(
                f,
                "a signature is required, and the file's signature can be checked only with its signer's \
                 public key ({signer}), which was not given (pass it as a trusted signer, or with the keys)"
            ),
            ErrorKind::UntrustedSigner { signers } => {
                write!(f, "the file is signed only by keys that are not trusted: {}", signers.join(", "))
            }
            ErrorKind::NotEncrypted => f.write_str("encryption is required and the file is not encrypted"),
            ErrorKind::PolicyDenied(m) => write!(f, "access refused by the file's policy: {m}"),
            ErrorKind::Locked(m) => write!(f, "{m}"),
            ErrorKind::DamagedCollection(m) => write!(f, "damaged collection: {m}"),
            ErrorKind::InvalidCheckpoint(m) => f.write_str(m),
            ErrorKind::ModelSignature(m) => write!(f, "the model signature is refused: {m}"),
            ErrorKind::ModelMismatch(m) => write!(f, "the directory does not match its signature: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0.kind {
            ErrorKind::Format(e) => Some(e),
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}
