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

mod append;
mod atomic;
mod collection;
mod commitment;
mod compress;
mod converted;
mod copy;
mod crypt;
mod cryptotensors;
mod dcp;
mod diff;
mod direct;
mod error;
mod foreign;
mod fork;
mod hash;
mod huge_pages;
mod mmap;
mod model_sign;
mod numpy_file;
mod options;
mod pack;
mod par;
mod policy;
mod pread;
mod prefault;
mod protection;
mod reader;
mod seal;
mod sha_lanes;
mod sharded;
mod sidecar;
mod signing;
mod staged;
mod stats;
mod stream_check;
mod strided;
mod tensor_set;
mod torch_checkpoint;
mod trust;
pub mod values;
mod writeback;
mod writer;

pub use crate::{
    append::append,
    atomic::write_file_atomic,
    collection::{
        convert_collection, detect as detect_collection, dtype_from_name, remove_collection, BlockInfo, Collection,
        CollectionKind, CollectionOptions, RowsView, LOCK_NAME,
    },
    commitment::{FileCommitment, ModelCommitments},
    converted::{open_converted, Container, ConvertedSource},
    copy::{copy_tensors, COPY_CHUNK},
    crypt::{
        cryptotensors_jwk, describe_key_file, describe_keys, EncryptOptions, KeyRing, KeySummary, Passphrase,
        RecipientKey, SigningKey, SymmetricKey, VerifyingKey, X25519PublicKey, X25519SecretKey, KEY_ENV_VARS,
    },
    cryptotensors::{save_cryptotensors, CryptotensorsOptions},
    dcp::{
        block_name, check_checkpoint_metadata, check_chunk_cover, check_rank_checkpoint_metadata, chunk_tiles,
        consolidate, consolidate_from, parse_rank_file_name, parse_rank_metadata_name, rank_file_name,
        rank_metadata_name, CheckpointDir, CheckpointSource, ConsolidateOptions, Tile, DCP_METADATA,
        DEFAULT_MAX_SHARD_BYTES, MAX_METADATA_BYTES, MAX_RANK, MAX_TILES,
    },
    diff::{diff, Compare, Diff, MetadataChange, ValueDiff},
    error::{Error, ErrorKind, Result},
    foreign::{describe_file, open_converted_file},
    huge_pages::{huge_pages_pay, HUGE_PAGE},
    mmap::PrivateMap,
    model_sign::{
        open_signed_model, sign_model, verify_bundle, verify_model, EcPublicKey, EcSigningKey, ModelSigner,
        ModelVerifier, SignModelOptions, SignedFile, SignedModel,
    },
    numpy_file::{convert_numpy_file, is_numpy_file, open_numpy_file, NumpyFile},
    options::{Compress, ReadOptions, WriteOptions},
    pread::ReadAt,
    protection::{EncryptionInfo, SignatureCovers},
    reader::{
        FooterCheck, Mismatch, PlacedRead, Placement, Reader, RegionCheck, RegionRead, TagCheck, TensorRef, Verdict,
        VerifyReport,
    },
    sha_lanes::{sha256_many, sha256_views},
    sharded::{
        is_json_index, is_legacy_index, save_sharded, save_sharded_legacy, write_index, LocalOpener, Opener,
        ShardedReader, INDEX_SUFFIX, LEGACY_INDEX_MARKER,
    },
    sidecar::{manifest, write_manifest},
    signing::{sign_file, sign_file_with},
    staged::StagedFiles,
    stats::{tensor_stats, Stats},
    strided::{Strided, TensorBytes},
    tensor_set::TensorSet,
    torch_checkpoint::{
        convert_torch_checkpoint, convert_torch_index, is_torch_checkpoint, is_torch_index, open_torch_checkpoint,
        scan_pickle, TorchCheckpoint, TorchTensor, MAX_VIEW_EXPANSION,
    },
    writer::{save, save_from, save_views, save_with_progress, Writer},
};
pub use deathtensors_format as format;

// The README's examples compile and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
