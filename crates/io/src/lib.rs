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
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod atomic;
mod collection;
mod compress;
mod crypt;
mod cryptotensors;
mod error;
mod fork;
mod hash;
mod mmap;
mod pack;
mod policy;
mod pread;
mod reader;
mod seal;
mod sha_lanes;
mod sharded;
mod signing;
mod trust;
mod writeback;
mod writer;

pub use crate::{
    collection::{
        convert_collection, detect as detect_collection, dtype_from_name, BlockInfo, Collection, CollectionKind,
        CollectionOptions, RowsView, LOCK_NAME,
    },
    crypt::{
        EncryptOptions, KeyRing, Passphrase, RecipientKey, SigningKey, SymmetricKey, VerifyingKey, X25519PublicKey,
        X25519SecretKey,
    },
    cryptotensors::{save_cryptotensors, CryptotensorsOptions},
    error::{Error, ErrorKind, Result},
    mmap::PrivateMap,
    pack::{save_from, Compress},
    reader::{ReadOptions, Reader, TensorRef},
    sharded::{save_sharded, write_index, ShardedReader, INDEX_SUFFIX},
    signing::sign_file,
    writer::{save, WriteOptions, Writer},
};
pub use deathtensors_format as format;
