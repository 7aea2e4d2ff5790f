//! Parsing, validation, layout and encoding of the headers of deathtensors v1,
//! safetensors and bintensors 0.2 files.
//!
//! This crate is sans-IO: bytes in, typed values or errors out. It never
//! panics on any input, checks every size and offset computation, and bounds
//! every allocation by [`Limits`] and the input length. `deathtensors-io`
//! builds files on it.
//!
//! # Example
//!
//! ```
//! use deathtensors_format::{Dtype, Flags, Head, Header, Limits, Metadata, TensorSpec};
//!
//! let specs = vec![
//!     TensorSpec::new("weight", Dtype::F32, [2, 2]),
//!     TensorSpec::new("bias", Dtype::F32, [2]),
//! ];
//! let header = Header::new_deathtensors(specs, Metadata::new(), 64, None, &Limits::DEFAULT)?;
//! let mut file = Head::encode(&header, Flags::EMPTY)?;
//! assert_eq!(file.len() % 64, 0);
//! file.resize(file.len() + header.data_len() as usize, 0);
//!
//! let head = Head::parse(&file, file.len() as u64, &Limits::DEFAULT)?;
//! assert_eq!(head.header, header);
//! assert_eq!(head.header.get("bias").unwrap().data_offsets, (64, 72));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Crate features
//! - `std` (default): parses headers up to 4 MiB with simd-json, several
//!   times faster on large headers, and longer ones with serde_json, which
//!   streams (a hostile header costs no more than its text). Without it the
//!   crate is `no_std` + `alloc` and parses with serde_json.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

// Modules, bottom to top: each uses only modules named before it (rustfmt
// keeps the `mod` lines sorted, so the order is written here):
// limits, error, fork, dtype, dtype_names (every framework's names), reader (the byte cursor), varint (bincode's),
// sniff, prefix, signature; shape, name, tensor (plain types), layout, region, tree, json; crypt
// (the encryption section), compression (the compression section and chunk
// tables), raw, fast, de, bintensors (the decoders, and
// bintensors' encoder); index (the name index); header (`Header`), enc, head (`Head`),
// cryptotensors, collection, checkpoint_names (the files of checkpoints of
// several files); pickle (torch checkpoints' pickles, read
// without running them), zip (their container, and numpy's .npz) and npy
// (numpy's arrays, their header read as literals), on dtype alone.
mod bintensors;
mod checkpoint_names;
mod collection;
mod compression;
mod crypt;
mod cryptotensors;
mod de;
mod dtype;
mod dtype_names;
mod enc;
mod error;
mod fast;
mod fork;
mod head;
mod header;
mod index;
mod json;
mod layout;
mod limits;
mod name;
pub mod npy;
pub mod pickle;
mod prefix;
mod raw;
mod reader;
mod region;
mod shape;
mod signature;
mod sniff;
mod tensor;
mod tree;
mod varint;
pub mod zip;

pub use crate::{
    checkpoint_names::{
        block_name, is_checkpoint_document, is_save_id, parse_rank_file_name, parse_rank_metadata_name,
        parse_save_marker_name, rank_file_name, rank_metadata_name, save_marker_name, DCP_METADATA, INDEX_SUFFIX,
    },
    collection::{
        check_block_name, BlockRef, Manifest, RowLayout, BLOCK_ALIGNMENT, BLOCK_TENSOR, COLLECTION_FORMAT,
        DEFAULT_BLOCK_ROWS, LOCK_NAME, MANIFEST_NAME, MAX_BLOCKS, MAX_BLOCK_BYTES, MAX_BLOCK_NAME_LEN,
        MAX_MANIFEST_LEN,
    },
    compression::{
        byte_planes, compression_chunk_count, group_bytes, ungroup_bytes, Chunk, ChunkTable, Codec, Compression,
        COMPRESSION_LEVELS, DEFAULT_COMPRESSION_CHUNK, MAX_COMPRESSION_CHUNK, MAX_EXPANSION, MIN_COMPRESSED_TENSOR,
        MIN_COMPRESSION_CHUNK,
    },
    crypt::{
        chunk_count, chunk_nonce, chunk_range, mac_prefix, sealed_aad, sealed_nonce, wrap_info, Argon2Params, ChunkAad,
        Cipher, Encryption, Label, Recipient, TableLayout, DEFAULT_CHUNK_SIZE, HEADER_MAC_LEN, MAX_CHUNK_SIZE,
        MAX_KID_LEN, MAX_RECIPIENTS, MIN_CHUNK_SIZE, TAG_LEN, WRAPPED_KEY_LEN, WRAP_AAD,
    },
    cryptotensors::{
        ct_chunk_nonce, ct_signed_message, Cryptotensors, CtAlg, CtData, CtKeyRef, CtPolicy, CtTensor, CT_CRYPTO_KEYS,
        CT_DEFAULT_CHUNK_SIZE, CT_DEFAULT_POLICY, CT_ENCRYPTION, CT_POLICY, CT_RESERVED, CT_SIGNATURE,
    },
    dtype::Dtype,
    dtype_names::{DtypeNames, DTYPE_NAMES},
    error::{Error, ErrorKind, Result},
    fork::{Fork, Serial, PREFAULT_MIN_ENTRIES, RELEASE_STEP},
    head::{Head, FOOTER_LEN, PROBE_LEN},
    header::{Header, CREATED_BY},
    limits::{Limits, BINTENSORS_MAX_HEADER, DEFAULT_ALIGNMENT, MAX_ALIGNMENT, SAFETENSORS_MAX_HEADER},
    name::Name,
    prefix::{Flags, Prefix, MAGIC, VERSION},
    region::{Region, Runs},
    shape::Shape,
    signature::{
        encode_signatures, parse_signatures, signature_block_len, signed_file_truncated, signed_message,
        SignatureRecord, MAX_SIGNATURES, SIGNATURE_MAGIC, SIGNATURE_RECORD_LEN, SIGNATURE_TRAILER_LEN,
    },
    tensor::{Format, Metadata, TensorInfo, TensorSpec},
};

/// Formats a digest as 64 lowercase hex digits, as headers store it.
pub fn hex_digest(digest: &[u8; 32]) -> alloc::string::String {
    let mut out = alloc::vec::Vec::with_capacity(64);
    json::hex(&mut out, digest);
    // Hex digits are ASCII.
    alloc::string::String::from_utf8(out).unwrap_or_default()
}

/// Parses 64 lowercase hex digits into a digest.
pub fn parse_hex_digest(hex: &str) -> Option<[u8; 32]> {
    de::parse_digest(hex)
}

// The README's examples compile and run as doc tests, and so does the
// Rust block of the repository's own README (its other blocks are not
// Rust: rustdoc leaves them alone).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct RepositoryReadmeDoctests;
