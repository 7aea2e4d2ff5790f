//! Chunks of encrypted tensors: how a tensor is cut, where its tags are,
//! and each chunk's nonce and associated data (`docs/FORMAT.md` 10.1, 10.4
//! and 10.5).

use alloc::vec::Vec;

use crate::layout::align_up;
use crate::tensor::TensorInfo;
use crate::{Error, Result};

/// Bytes of one AEAD tag in the tag table.
pub const TAG_LEN: usize = 16;
/// Bytes of the header MAC (HMAC-SHA256) after the tag table.
pub const HEADER_MAC_LEN: usize = 32;

/// How many chunks a tensor of `byte_len` bytes has: at least one, so that
/// an empty tensor is authenticated too.
/// A `chunk_size` of 0 (never valid in a header) counts as 1, so that this
/// never divides by zero.
pub const fn chunk_count(byte_len: u64, chunk_size: u64) -> u64 {
    let size = if chunk_size == 0 { 1 } else { chunk_size };
    if byte_len == 0 {
        1
    } else {
        byte_len.div_ceil(size)
    }
}

/// The byte range `[start, end)` of chunk `j` within a tensor of `byte_len`
/// bytes (empty for the one chunk of an empty tensor).
pub fn chunk_range(byte_len: u64, chunk_size: u64, j: u64) -> (u64, u64) {
    let start = j.saturating_mul(chunk_size).min(byte_len);
    (start, start.saturating_add(chunk_size).min(byte_len))
}

/// The nonce of chunk `j` of tensor `i` (header order):
/// `nonce_salt XOR (u32_le(i) || u64_le(j))`.
pub fn chunk_nonce(nonce_salt: &[u8; 12], tensor: u32, chunk: u64) -> [u8; 12] {
    let mut n = *nonce_salt;
    for (b, x) in n.iter_mut().zip(tensor.to_le_bytes().iter().chain(chunk.to_le_bytes().iter())) {
        *b ^= x;
    }
    n
}

/// The associated data of one tensor's chunks. Built once per tensor; each
/// chunk rewrites only its last 9 bytes ([`ChunkAad::for_chunk`]).
#[derive(Clone, Debug)]
pub struct ChunkAad {
    bytes: Vec<u8>,
}

/// What every chunk's associated data starts with.
const CHUNK_CONTEXT: &[u8] = b"deathtensors v1 chunk";

impl ChunkAad {
    /// The associated data of tensor `tensor` (its index in header order)
    /// of the file `file_id`.
    pub fn new(file_id: &[u8; 16], tensor: u32, info: &TensorInfo) -> ChunkAad {
        let dtype = info.dtype.name().as_bytes();
        let mut b = Vec::with_capacity(
            CHUNK_CONTEXT.len() + 16 + 4 + 8 + info.name.len() + 1 + dtype.len() + 8 * (2 + info.shape.len()) + 9,
        );
        b.extend_from_slice(CHUNK_CONTEXT);
        b.extend_from_slice(file_id);
        b.extend_from_slice(&tensor.to_le_bytes());
        b.extend_from_slice(&(info.name.len() as u64).to_le_bytes());
        b.extend_from_slice(info.name.as_bytes());
        // Dtype names are at most 11 ASCII bytes.
        b.push(dtype.len() as u8);
        b.extend_from_slice(dtype);
        b.extend_from_slice(&(info.shape.len() as u64).to_le_bytes());
        for d in &info.shape {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&[0; 9]);
        ChunkAad { bytes: b }
    }

    /// The associated data of chunk `j`, `last` if it ends the tensor.
    pub fn for_chunk(&mut self, j: u64, last: bool) -> &[u8] {
        let n = self.bytes.len();
        self.bytes[n - 9..n - 1].copy_from_slice(&j.to_le_bytes());
        self.bytes[n - 1] = u8::from(last);
        &self.bytes
    }
}

/// Where an encrypted file's tag table, header MAC and data blob sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableLayout {
    /// File range of the tag table.
    pub tags: (u64, u64),
    /// File range of the header MAC.
    pub mac: (u64, u64),
    /// File offset of the data blob.
    pub data_start: u64,
}

impl TableLayout {
    /// The layout for a tag table of `table_len` bytes after a head (prefix,
    /// header, NUL padding) ending at `table_start`, for tensors aligned to
    /// `alignment`.
    ///
    /// # Errors
    /// `Overflow` if an offset does not fit in a `u64`.
    pub fn new(table_start: u64, table_len: u64, alignment: u64) -> Result<TableLayout> {
        let tags_end = table_start.checked_add(table_len).ok_or_else(|| Error::overflow("tag table end"))?;
        let mac_end = tags_end.checked_add(HEADER_MAC_LEN as u64).ok_or_else(|| Error::overflow("header MAC end"))?;
        let data_start = align_up(mac_end, alignment.max(64), "data start")?;
        Ok(TableLayout { tags: (table_start, tags_end), mac: (tags_end, mac_end), data_start })
    }

    /// Checks the padding between the header MAC and the blob (the bytes
    /// `[mac.1, data_start)`), which must be zero.
    ///
    /// # Errors
    /// `NonZeroPadding` at the first nonzero byte.
    pub fn check_padding(&self, padding: &[u8]) -> Result<()> {
        match padding.iter().position(|&b| b != 0) {
            Some(i) => Err(Error::at(crate::ErrorKind::NonZeroPadding, self.mac.1 + i as u64)),
            None => Ok(()),
        }
    }
}

/// The first chunk index of each tensor in the tag table, and the total.
///
/// # Errors
/// `Overflow` if the count does not fit in a `u64`.
pub(crate) fn chunk_bases(tensors: &[TensorInfo], chunk_size: u64) -> Result<(Vec<u64>, u64)> {
    let mut bases = Vec::with_capacity(tensors.len());
    let mut total = 0u64;
    for t in tensors {
        bases.push(total);
        total =
            total.checked_add(chunk_count(t.byte_len(), chunk_size)).ok_or_else(|| Error::overflow("chunk count"))?;
    }
    Ok((bases, total))
}

/// The prefix as the header MAC covers it: with flag bit 3 (`SIGNED`)
/// cleared, so that adding the first signature to an encrypted file (which
/// sets the bit) leaves its MAC valid. Every other bit is covered.
pub fn mac_prefix(prefix: &[u8; 24]) -> [u8; 24] {
    let mut p = *prefix;
    p[12] &= !(crate::Flags::SIGNED.bits() as u8);
    p
}
