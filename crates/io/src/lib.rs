//! Files for deathtensors: a lazy reader, a streaming atomic writer and
//! SHA-256 integrity, for deathtensors v1 and safetensors files.
//!
//! # Example
//!
//! ```
//! use deathtensors_io::{save, Reader, WriteOptions};
//! use deathtensors_format::{Dtype, TensorSpec};
//!
//! let dir = std::env::temp_dir().join(format!("dt-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("model.dt");
//! let weight: Vec<u8> = (0..16u8).collect();
//! let options = WriteOptions { checksum: true, ..WriteOptions::default() };
//! save(&path, vec![(TensorSpec::new("weight", Dtype::F32, [2, 2]), &weight[..])], &options)?;
//!
//! let reader = Reader::open(&path)?;
//! assert_eq!(reader.read("weight")?, weight);
//! reader.verify()?;
//! # drop(reader);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

// Rooms, bottom to top: each uses only those named before it, and all of
// them the crate's seam (`error`: its one error type; `options`: the
// options of reading and writing, validated once). `fs` (the machine and
// the file system), `trust` (keys, ciphers, policies), `file` (the reader
// and the writers), `tools` (what is built on files), `foreign` (other
// kinds of files, read as ours). Each room's `mod.rs` is its table of
// contents. `options` names `trust`'s key types and a model's commitments.
mod error;
mod options;

mod file;
mod foreign;
mod fs;
mod tools;
mod trust;

pub use crate::error::{Error, ErrorKind, Result};
pub use crate::options::{Compress, ReadOptions, WriteOptions};

// The machine and the file system.
pub use crate::fs::{
    atomic::write_file_atomic,
    huge_pages::{huge_pages_pay, HUGE_PAGE},
    mmap::PrivateMap,
    mount::Mount,
    pread::ReadAt,
    sha_lanes::{sha256_many, sha256_views},
    staged::StagedFiles,
    strided::{Strided, TensorBytes},
};

// Trust.
pub use crate::trust::{
    commitment::{FileCommitment, ModelCommitments},
    crypt::{
        cryptotensors_jwk, describe_key_file, describe_keys, EncryptOptions, KeyRing, KeySummary, Passphrase,
        RecipientKey, SigningKey, SymmetricKey, VerifyingKey, X25519PublicKey, X25519SecretKey, KEY_ENV_VARS,
    },
    cryptotensors::{save_cryptotensors, CryptotensorsOptions},
};

// The file.
pub use crate::file::{
    protection::{EncryptionInfo, SignatureCovers},
    reader::{
        FooterCheck, Mismatch, PlacedRead, Placement, Reader, RegionCheck, RegionRead, TagCheck, TensorRef, Verdict,
        VerifyReport,
    },
    signing::{sign_file, sign_file_with},
    writer::{save, save_from, save_views, save_with_progress, Writer},
};

// Built on files.
pub use crate::tools::{
    append::append,
    collection::{
        convert_collection, detect as detect_collection, dtype_from_name, remove_collection, BlockInfo, Collection,
        CollectionKind, CollectionOptions, RowsView, LOCK_NAME,
    },
    copy::{copy_tensors, COPY_CHUNK},
    dcp::{
        after_commit_files, block_name, check_checkpoint_metadata, check_chunk_cover, check_rank_checkpoint_metadata,
        check_rank_file, chunk_tiles, consolidate, consolidate_from, metadata_documents, parse_rank_file_name,
        parse_rank_metadata_name, parse_save_marker_name, rank_file_name, rank_metadata_name, save_marker_name,
        uncommitted_files, CheckpointDir, CheckpointSource, ConsolidateOptions, SaveCaller, SaveListing, SaveMarker,
        Tile, DCP_METADATA, DCP_VERSION, DEFAULT_MAX_SHARD_BYTES, DEFAULT_STALE_AFTER, MAX_METADATA_BYTES, MAX_RANK,
        MAX_TILES,
    },
    diff::{diff, Compare, Diff, MetadataChange, ValueDiff},
    model_sign::{
        open_signed_model, sign_model, verify_bundle, verify_model, EcPublicKey, EcSigningKey, ModelSigner,
        ModelVerifier, SignModelOptions, SignedFile, SignedModel,
    },
    sharded::{
        is_json_index, is_legacy_index, save_sharded, save_sharded_legacy, write_index, LocalOpener, Opener,
        ShardedReader, INDEX_SUFFIX, LEGACY_INDEX_MARKER,
    },
    sidecar::{manifest, write_manifest},
    stats::{tensor_stats, Stats},
    tensor_set::TensorSet,
    values,
};

// Other kinds of files.
pub use crate::foreign::{
    converted::{open_converted, Container, ConvertedSource},
    numpy_file::{convert_numpy_file, is_numpy_file, open_numpy_file, NumpyFile},
    open::{describe_file, open_converted_file},
    torch_checkpoint::{
        convert_torch_checkpoint, convert_torch_index, is_torch_checkpoint, is_torch_index, open_torch_checkpoint,
        scan_pickle, TorchCheckpoint, TorchTensor, MAX_VIEW_EXPANSION,
    },
};
pub use deathtensors_format as format;

// The README's examples compile and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
