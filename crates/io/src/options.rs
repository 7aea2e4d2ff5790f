//! The options of reading and writing, and their validation: each rule
//! that refuses a combination of options is here, once, with the error the
//! user sees.

use std::path::Path;
use std::sync::Arc;

use deathtensors_format::{
    Format, Header, Limits, Metadata, TensorSpec, COMPRESSION_LEVELS, CREATED_BY, DEFAULT_ALIGNMENT, MAX_CHUNK_SIZE,
    MIN_CHUNK_SIZE,
};

use crate::error::{Error, Result};
use crate::trust::crypt::{EncryptOptions, KeyRing, SigningKey, VerifyingKey};

/// What a refused write was doing, in its error.
const DOING: &str = "cannot write";

/// Options for opening a file.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Caps for the untrusted header.
    pub limits: Limits,
    /// The largest data blob a compressed file may decompress to. Default
    /// 16 GiB: a compressed file declares its decompressed size in its header,
    /// and a small hostile file must not expand into unbounded memory.
    pub max_decompressed_len: u64,
    /// Keys for encrypted files. Without one, an encrypted file opens (its
    /// header is in the clear) but its tensors cannot be read.
    pub keys: KeyRing,
    /// Signers to trust: a file must carry a valid signature by one of them.
    pub trusted_signers: Vec<VerifyingKey>,
    /// Refuse a file without a valid signature.
    pub require_signature: bool,
    /// Refuse a file that is not encrypted.
    pub require_encryption: bool,
    /// The `input` a file's Rego policy is evaluated against before its
    /// keys are released (cryptotensors' `__policy__`, or ours).
    pub policy_input: Option<serde_json::Value>,
    /// The most Argon2 work one open may spend deriving keys from
    /// passphrases, in KiB of memory times passes, summed over the
    /// derivations it runs (one per passphrase entry tried, at most 4).
    /// Default [`ReadOptions::DEFAULT_MAX_KDF_WORK`]: a file's header sets
    /// the cost of its entries (up to 1 GiB and 16 passes each), so a
    /// hostile file could otherwise hold a reader for about a minute.
    pub max_kdf_work: u64,
    /// A verified model signature's commitments
    /// ([`crate::open_signed_model`]): the file must be one of the model's,
    /// its head is checked on open and each tensor as it is read.
    pub signed_model: Option<std::sync::Arc<crate::ModelCommitments>>,
    /// Whether whole tensors of a local file are mapped copy-on-write
    /// (`Some(true)`) or read into memory the caller owns (`Some(false)`),
    /// where the file allows a mapping at all ([`crate::Reader::maps_tensors`]);
    /// `None` (the default) decides by the file system: mapped on a local
    /// one, read with large parallel positioned reads on a network or
    /// user-space one (NFS, SMB, Lustre, GPFS, Ceph, 9p, FUSE), where each
    /// page fault of a mapping is a round trip.
    pub map_tensors: Option<bool>,
}

impl ReadOptions {
    /// 4 GiB-passes (4,194,304 KiB × passes): one derivation of RFC 9106's
    /// first recommendation (2 GiB, 1 pass), or 21 of our writer's default
    /// (64 MiB, 3 passes); about 3.5 s of Argon2 on one core here.
    pub const DEFAULT_MAX_KDF_WORK: u64 = 4 << 20;

    /// These options with a header limit of `len` bytes
    /// ([`Limits::max_header_len`]; default 4 GiB).
    ///
    /// # Errors
    /// A message naming the ceiling if `len` is 0 or above
    /// [`Limits::MAX_HEADER_LEN`] (64 GiB).
    pub fn with_max_header_len(mut self, len: u64) -> std::result::Result<ReadOptions, String> {
        if len == 0 || len > Limits::MAX_HEADER_LEN {
            return Err(format!("max_header_len {len} is not between 1 and {}", Limits::MAX_HEADER_LEN));
        }
        self.limits.max_header_len = len;
        Ok(self)
    }

    /// These options without keys, trusted signers, requirements or policy
    /// input: the limits only, to read a file's header (a sharded
    /// checkpoint's index, which the shards' requirements are not for).
    pub fn limits_only(&self) -> ReadOptions {
        ReadOptions {
            limits: self.limits.clone(),
            max_decompressed_len: self.max_decompressed_len,
            max_kdf_work: self.max_kdf_work,
            // A sharded checkpoint's index is checked against the model's
            // signature too.
            signed_model: self.signed_model.clone(),
            ..ReadOptions::default()
        }
    }
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            limits: Limits::DEFAULT,
            max_decompressed_len: 16 << 30,
            keys: KeyRing::new(),
            trusted_signers: Vec::new(),
            require_signature: false,
            require_encryption: false,
            policy_input: None,
            max_kdf_work: ReadOptions::DEFAULT_MAX_KDF_WORK,
            signed_model: None,
            map_tensors: None,
        }
    }
}

/// How a writer compresses tensor data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compress {
    /// Not compressed (the default).
    #[default]
    Off,
    /// Each tensor compressed on its own in 1 MiB chunks, at this zstd
    /// level (1 to 22): loading a tensor reads only its chunks (flag bit 5;
    /// deathtensors 0.3.0 refuses such files).
    Chunked {
        /// The zstd level.
        level: i32,
    },
    /// The whole data blob as one zstd frame at this level, as deathtensors
    /// 0.2 and 0.3 write it (flag bit 0): 0.3.0 reads the file, but loading
    /// one tensor decompresses the blob.
    Blob {
        /// The zstd level.
        level: i32,
    },
}

impl Compress {
    /// The zstd level when none is given: the CLI's `--compress`, Python's
    /// `compress_level=` and an append to a file with no level recorded.
    pub const DEFAULT_LEVEL: i32 = 3;

    /// Whether files take the zstd level `level` (1 to 22): the one rule,
    /// for io's own check and for the front ends that read a level from
    /// their users before a save starts.
    pub fn is_valid_level(level: i32) -> bool {
        u32::try_from(level).is_ok_and(|l| COMPRESSION_LEVELS.contains(&l))
    }
}

/// Options for writing a file.
#[derive(Clone)]
pub struct WriteOptions {
    /// The file format. Default deathtensors.
    pub format: Format,
    /// Where tensors start in the data blob: multiples of this power of two
    /// (deathtensors only; safetensors and bintensors pack). Default 64.
    pub alignment: u64,
    /// Record a SHA-256 digest of every tensor in the header and a SHA-256
    /// footer over the file (deathtensors only). Default off.
    pub checksum: bool,
    /// With `checksum`: the footer too. Off records the per-tensor digests
    /// alone, which hashes every byte once instead of twice (the footer
    /// covers the header, so it is a second pass once the digests are in
    /// it): for files read tensor by tensor against their digests, such as
    /// the rank files of distributed checkpoints. Such a file opens in
    /// deathtensors 0.3.0; `verify` checks its tensors. Plain saves only
    /// (signed files always have a footer; compressed and encrypted saves
    /// refuse it off). Default on.
    pub footer: bool,
    /// fsync the file before it replaces the target, and the directory
    /// after. Default on: without it a power loss can leave an empty or
    /// partial file under the target's name. Off only skips the fsyncs; the
    /// write stays atomic for crashes of the process. On Linux a durable
    /// write hands its data to the disk as it goes, so that the fsync at the
    /// end has little left to do: it costs about the disk's own time.
    pub durable: bool,
    /// With `durable`, on Linux: the file does not stay in the page cache.
    /// A save written front to back (`save`, `save_views`) goes around it
    /// with `O_DIRECT` where the file system takes it: no page allocated,
    /// none to free (a 2 GiB checkpoint on 4 ranks saved in a third of the
    /// buffered time on this project's VM). Elsewhere, and for the other
    /// savers, the file's pages leave the cache once they are on the disk,
    /// part by part as the writer hands them to it, and all of them after
    /// the fsync (the kernel frees them during the write, which costs it
    /// time). For large files written for safekeeping (checkpoints): the
    /// write neither evicts what the machine had cached nor holds the file
    /// in memory, and a read of the file soon after comes from the disk. No
    /// effect on a write that is not durable (its pages are not on the disk
    /// yet). Default off.
    pub drop_cache: bool,
    /// Global metadata (`global_metadata` / `__metadata__` / bintensors'
    /// optional map, where `None` and an empty map are different files).
    pub metadata: Option<Metadata>,
    /// The `created_by` field of deathtensors headers. Default
    /// [`deathtensors_format::CREATED_BY`].
    pub created_by: Option<String>,
    /// Limits the header must satisfy.
    pub limits: Limits,
    /// Encrypt the tensors for these recipients (deathtensors only;
    /// `docs/FORMAT.md` section 10). Default none.
    pub encryption: Option<EncryptOptions>,
    /// Compress the tensor data (deathtensors only): each tensor in chunks
    /// (`docs/FORMAT.md` section 15), or the whole blob as deathtensors 0.3.0
    /// does. Default off. Not with encryption.
    pub compress: Compress,
    /// Sign the file with these keys (deathtensors only; section 11).
    /// Signing a plaintext file implies `checksum`: the signature commits to
    /// the data through the per-tensor digests.
    pub signers: Vec<Arc<SigningKey>>,
}

impl std::fmt::Debug for WriteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Signing keys are never printed: only their public halves.
        f.debug_struct("WriteOptions")
            .field("format", &self.format)
            .field("alignment", &self.alignment)
            .field("checksum", &self.checksum)
            .field("footer", &self.footer)
            .field("durable", &self.durable)
            .field("drop_cache", &self.drop_cache)
            .field("metadata", &self.metadata)
            .field("created_by", &self.created_by)
            .field("limits", &self.limits)
            .field("encryption", &self.encryption)
            .field("compress", &self.compress)
            .field("signers", &self.signers.iter().map(|k| k.verifying_key().fingerprint()).collect::<Vec<_>>())
            .finish()
    }
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions {
            format: Format::Deathtensors,
            alignment: DEFAULT_ALIGNMENT,
            checksum: false,
            footer: true,
            durable: true,
            drop_cache: false,
            metadata: None,
            created_by: Some(CREATED_BY.to_string()),
            limits: Limits::DEFAULT,
            encryption: None,
            compress: Compress::Off,
            signers: Vec::new(),
        }
    }
}

impl WriteOptions {
    /// The deathtensors header these options give `specs`: laid out with
    /// their alignment, global metadata, `created_by` and limits.
    pub(crate) fn deathtensors_header(&self, specs: Vec<TensorSpec>) -> deathtensors_format::Result<Header> {
        Header::new_deathtensors(
            specs,
            self.metadata.clone().unwrap_or_default(),
            self.alignment,
            self.created_by.clone(),
            &self.limits,
        )
    }
}

impl WriteOptions {
    /// Refuses a checksum, encryption or signatures for `format`, whose
    /// files (safetensors, bintensors) have no place for them.
    pub(crate) fn check_plain(&self, format: &str, path: &Path) -> Result<()> {
        if self.checksum {
            return Err(Error::input(format!("{format} files have no checksum; write deathtensors"), path, DOING));
        }
        if self.encryption.is_some() || !self.signers.is_empty() {
            let message = format!("{format} files cannot be encrypted or signed; write deathtensors");
            return Err(Error::input(message, path, DOING));
        }
        Ok(())
    }

    /// The rules of these options, checked once here for every front end
    /// (the binding calls it when its options are built, every save when
    /// it starts): `drop_cache` needs `durable`, and a compression level is
    /// from 1 to 22. `None` when they hold.
    pub fn broken_rule(&self) -> Option<String> {
        if self.drop_cache && !self.durable {
            return Some(
                "drop_cache needs durable: a file's pages leave the page cache once they are on the disk, \
                 and a save that is not durable does not wait for that"
                    .into(),
            );
        }
        match self.compress {
            Compress::Chunked { level } | Compress::Blob { level } if !Compress::is_valid_level(level) => {
                Some(format!("compression level {level} is not between 1 and 22"))
            }
            _ => None,
        }
    }

    /// Whether the file leaves the page cache: `drop_cache`, which only a
    /// durable save honours (its pages are on the disk).
    pub(crate) fn drops_cache(&self) -> bool {
        self.durable && self.drop_cache
    }

    /// Whether the file gets the SHA-256 footer (flag `CHECKSUM`): asked
    /// for, or signed (a signature covers the footer).
    pub(crate) fn writes_footer(&self) -> bool {
        self.checksum && self.footer || !self.signers.is_empty()
    }

    /// Refuses `footer` off where the file is not a plain save.
    pub(crate) fn check_footer(&self, what: &str, path: &Path) -> Result<()> {
        if self.checksum && !self.footer {
            return Err(Error::input(
                format!("per-tensor digests without a footer are for plain saves, not {what} ones"),
                path,
                DOING,
            ));
        }
        Ok(())
    }

    /// Refuses what compression at `level` does not combine with.
    pub(crate) fn check_compress(&self, level: i32, path: &Path) -> Result<()> {
        self.check_footer("compressed", path)?;
        if self.format != Format::Deathtensors {
            return Err(Error::input("only deathtensors files can be compressed", path, DOING));
        }
        if self.encryption.is_some() {
            return Err(Error::input(
                "compression with encryption is not supported (docs/FORMAT.md section 15.4): save compressed or encrypted",
                path,
                DOING,
            ));
        }
        if !Compress::is_valid_level(level) {
            return Err(Error::input(format!("compression level {level} is not between 1 and 22"), path, DOING));
        }
        Ok(())
    }

    /// Refuses what the incremental [`crate::Writer`] does not do:
    /// encryption, signatures and compression.
    pub(crate) fn check_incremental(&self, path: &Path) -> Result<()> {
        if self.encryption.is_some() || !self.signers.is_empty() {
            return Err(Error::input(
                "the incremental writer does not encrypt or sign yet: use save(), or sign the finished file with sign_file()",
                path,
                DOING,
            ));
        }
        if self.compress != Compress::Off {
            return Err(Error::input(
                "the incremental writer does not compress: use save() or save_from()",
                path,
                DOING,
            ));
        }
        Ok(())
    }
}

/// Refuses an encryption chunk size that is not a power of two from 4 KiB
/// to 64 MiB (`docs/FORMAT.md` section 10).
pub(crate) fn check_encryption(enc: &EncryptOptions, path: &Path) -> Result<()> {
    let c = enc.chunk_size;
    if !(c.is_power_of_two() && (MIN_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&c)) {
        let why = format!(
            "chunk_size must be a power of two from {MIN_CHUNK_SIZE} (4 KiB) to {MAX_CHUNK_SIZE} (64 MiB), got {c}"
        );
        return Err(Error::input(why, path, DOING));
    }
    Ok(())
}
