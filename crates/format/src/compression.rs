//! Per-tensor chunked compression (flag bit 5, `docs/FORMAT.md` section
//! 15): the `compression` section, the chunk tables, where each chunk sits
//! and how floating-point chunks are grouped into byte planes. This module
//! lays out and checks; `deathtensors-io` compresses and decompresses.

use alloc::string::String;
use alloc::vec::Vec;

use crate::json::{escape, uint};
use crate::{Dtype, Error, ErrorKind, Result};

/// The smallest `chunk_size` a `compression` section may declare.
pub const MIN_COMPRESSION_CHUNK: u64 = 4096;
/// The largest `chunk_size`: 64 MiB, so that one chunk's buffer stays small.
pub const MAX_COMPRESSION_CHUNK: u64 = 64 << 20;
/// The chunk size our writer uses: 1 MiB, large enough for zstd to find its
/// ratio, small enough that a slice decompresses little it does not need
/// and that a 1 GiB tensor is 1,024 chunks for all cores to share.
pub const DEFAULT_COMPRESSION_CHUNK: u64 = 1 << 20;
/// Tensors shorter than this are stored raw by our writer (no table entry):
/// they barely shrink and each entry costs header bytes.
pub const MIN_COMPRESSED_TENSOR: u64 = 4096;
/// The most raw bytes one stored byte of a zstd frame can stand for: a
/// block of at most 128 KiB repeats one byte (RLE) for 4 bytes of frame,
/// and no block does better. A chunk table that claims more describes no
/// frame, and would let a small file declare huge tensors.
pub const MAX_EXPANSION: u64 = 32_768;
/// The zstd levels a section may declare (zstd's own range of positive levels).
pub const COMPRESSION_LEVELS: core::ops::RangeInclusive<u32> = 1..=22;

/// The codec of a `compression` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Codec {
    /// Zstandard (RFC 8878), one frame per chunk.
    Zstd,
}

impl Codec {
    /// The codec's name in the header.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Zstd => "zstd",
        }
    }

    /// The codec of this name.
    ///
    /// # Errors
    /// `InvalidCompression { what: "codec" }` for any other name.
    pub fn from_name(name: &str) -> Result<Codec> {
        match name {
            "zstd" => Ok(Codec::Zstd),
            _ => Err(invalid("codec")),
        }
    }
}

/// The file-wide fields of a `compression` section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Compression {
    /// The codec of every compressed chunk.
    pub codec: Codec,
    /// The level the writer used (1 to 22); readers do not need it.
    pub level: u32,
    /// Raw bytes per chunk: a power of two from [`MIN_COMPRESSION_CHUNK`] to
    /// [`MAX_COMPRESSION_CHUNK`].
    pub chunk_size: u64,
}

impl Compression {
    /// zstd at `level` in chunks of [`DEFAULT_COMPRESSION_CHUNK`].
    pub fn zstd(level: u32) -> Compression {
        Compression { codec: Codec::Zstd, level, chunk_size: DEFAULT_COMPRESSION_CHUNK }
    }

    /// Checks the fields against `docs/FORMAT.md` section 15.2.
    ///
    /// # Errors
    /// `InvalidCompression` naming the field: a level outside 1 to 22, a
    /// chunk size that is not a power of two in range.
    pub fn check(&self) -> Result<()> {
        if !COMPRESSION_LEVELS.contains(&self.level) {
            return Err(invalid("level"));
        }
        let c = self.chunk_size;
        if !c.is_power_of_two() || !(MIN_COMPRESSION_CHUNK..=MAX_COMPRESSION_CHUNK).contains(&c) {
            return Err(invalid("chunk_size"));
        }
        Ok(())
    }
}

/// The error for a field of the section that breaks a rule.
pub(crate) fn invalid(what: &'static str) -> Error {
    Error::new(ErrorKind::InvalidCompression { what })
}

/// The number of chunks of a tensor of `raw_len` bytes.
pub fn compression_chunk_count(raw_len: u64, chunk_size: u64) -> u64 {
    raw_len.div_ceil(chunk_size.max(1))
}

/// How many byte planes a chunk of `dtype` is grouped into before it is
/// compressed: the element size for F16, BF16, F32 and F64, else 1 (no
/// grouping).
pub fn byte_planes(dtype: Dtype) -> usize {
    match dtype {
        Dtype::F16 | Dtype::BF16 => 2,
        Dtype::F32 => 4,
        Dtype::F64 => 8,
        _ => 1,
    }
}

/// One chunk of a compressed tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Its index in the tensor's table.
    pub index: u64,
    /// Its raw bytes, `[start, end)` within the tensor's raw bytes.
    pub raw: (u64, u64),
    /// Its stored bytes, `[start, end)` relative to the tensor's first stored byte.
    pub stored: (u64, u64),
}

impl Chunk {
    /// Whether the chunk is stored as it is (it did not shrink); otherwise
    /// it is one frame of the codec.
    pub fn is_raw(&self) -> bool {
        self.stored.1 - self.stored.0 == self.raw.1 - self.raw.0
    }
}

/// A validated chunk table: a compressed tensor's chunks, raw and stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkTable<'a> {
    raw_len: u64,
    chunk_size: u64,
    stored: &'a [u64],
}

impl<'a> ChunkTable<'a> {
    /// A table a `Header` has validated.
    pub(crate) fn new(raw_len: u64, chunk_size: u64, stored: &'a [u64]) -> ChunkTable<'a> {
        ChunkTable { raw_len, chunk_size, stored }
    }

    /// The stored length of each chunk, in order.
    pub fn stored_lens(&self) -> &'a [u64] {
        self.stored
    }

    /// The number of chunks.
    pub fn len(&self) -> usize {
        self.stored.len()
    }

    /// Whether there is no chunk (never, for a table a header holds).
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
    }

    /// The raw bytes per chunk (the last may be shorter).
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// The chunks in order. Sums were checked when the header was built, so
    /// nothing here overflows.
    pub fn chunks(&self) -> impl Iterator<Item = Chunk> + 'a {
        let (raw_len, size) = (self.raw_len, self.chunk_size);
        let mut at = 0u64;
        self.stored.iter().enumerate().map(move |(j, &s)| {
            let raw_start = (j as u64).saturating_mul(size);
            let chunk = Chunk {
                index: j as u64,
                raw: (raw_start, raw_start.saturating_add(size).min(raw_len)),
                stored: (at, at.saturating_add(s)),
            };
            at = at.saturating_add(s);
            chunk
        })
    }

    /// The chunks that hold any raw byte of `[start, end)`.
    pub fn covering(&self, start: u64, end: u64) -> impl Iterator<Item = Chunk> + 'a {
        self.chunks().filter(move |c| c.raw.0 < end && start < c.raw.1)
    }
}

/// Checks one tensor's chunk table against its raw length and returns the
/// sum of its stored lengths (what its `data_offsets` must span).
pub(crate) fn check_table(raw_len: u64, chunk_size: u64, stored: &[u64]) -> Result<u64> {
    if stored.len() as u64 != compression_chunk_count(raw_len, chunk_size) || stored.is_empty() {
        return Err(invalid("chunk count"));
    }
    let table = ChunkTable::new(raw_len, chunk_size, stored);
    let mut sum = 0u64;
    for c in table.chunks() {
        let s = c.stored.1 - c.stored.0;
        let raw = c.raw.1 - c.raw.0;
        if s == 0 || s > raw || s.saturating_mul(MAX_EXPANSION) < raw {
            return Err(invalid("chunk length"));
        }
        sum = sum.checked_add(s).ok_or_else(|| Error::overflow("stored length"))?;
    }
    Ok(sum)
}

/// A `compression` section as decoded, before its tables are matched to
/// the header's tensors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawCompression {
    pub(crate) compression: Compression,
    pub(crate) tensors: Vec<(String, Vec<u64>)>,
}

/// Writes the section: `"codec"`, `"level"`, `"chunk_size"`, then the tables
/// of `tables` (name, stored lengths) in the order given.
pub(crate) fn encode<'a>(out: &mut Vec<u8>, c: &Compression, tables: impl Iterator<Item = (&'a str, &'a [u64])>) {
    out.extend_from_slice(b"{\"codec\":");
    escape(out, c.codec.name());
    out.extend_from_slice(b",\"level\":");
    uint(out, u64::from(c.level));
    out.extend_from_slice(b",\"chunk_size\":");
    uint(out, c.chunk_size);
    out.extend_from_slice(b",\"tensors\":{");
    for (i, (name, lens)) in tables.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        escape(out, name);
        out.extend_from_slice(b":[");
        for (k, &l) in lens.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            uint(out, l);
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}}");
}

/// Groups `raw` (whole elements of `planes` bytes) into byte planes in
/// `out`: plane `b` holds byte `b` of every element. With one plane, or
/// lengths that do not fit that rule, the bytes are copied as they are.
pub fn group_bytes(raw: &[u8], planes: usize, out: &mut [u8]) {
    if planes <= 1 || raw.is_empty() || raw.len() != out.len() || !raw.len().is_multiple_of(planes) {
        copy_prefix(out, raw);
        return;
    }
    let m = raw.len() / planes;
    match planes {
        2 => {
            let (p0, p1) = out.split_at_mut(m);
            // 8 elements at a time in two words, their bytes gathered with
            // shifts and masks (the compiler does not vectorize a byte
            // deinterleave): about 2.5x the speed of a byte at a time.
            let words = raw.chunks_exact(16).zip(p0.chunks_exact_mut(8)).zip(p1.chunks_exact_mut(8));
            for ((e, a), b) in words {
                let (lo, hi) = e.split_at(8);
                let x = u64::from_le_bytes(lo.try_into().unwrap_or([0; 8]));
                let y = u64::from_le_bytes(hi.try_into().unwrap_or([0; 8]));
                a.copy_from_slice(&(even_bytes(x) | even_bytes(y) << 32).to_le_bytes());
                b.copy_from_slice(&(even_bytes(x >> 8) | even_bytes(y >> 8) << 32).to_le_bytes());
            }
            let done = m / 8 * 8;
            let tail = raw.chunks_exact(2).skip(done).zip(p0.iter_mut().skip(done)).zip(p1.iter_mut().skip(done));
            for ((e, a), b) in tail {
                *a = e[0];
                *b = e[1];
            }
        }
        4 => {
            let (p0, rest) = out.split_at_mut(m);
            let (p1, rest) = rest.split_at_mut(m);
            let (p2, p3) = rest.split_at_mut(m);
            for ((((e, a), b), c), d) in raw.chunks_exact(4).zip(p0).zip(p1).zip(p2).zip(p3) {
                *a = e[0];
                *b = e[1];
                *c = e[2];
                *d = e[3];
            }
        }
        _ => {
            for (b, plane) in out.chunks_exact_mut(m).enumerate() {
                for (slot, e) in plane.iter_mut().zip(raw.chunks_exact(planes)) {
                    *slot = e.get(b).copied().unwrap_or(0);
                }
            }
        }
    }
}

/// Bytes 0, 2, 4 and 6 of `x`, packed into the low 32 bits.
fn even_bytes(x: u64) -> u64 {
    let x = x & 0x00ff_00ff_00ff_00ff;
    let x = (x | x >> 8) & 0x0000_ffff_0000_ffff;
    (x | x >> 16) & 0x0000_0000_ffff_ffff
}

/// The inverse of [`group_bytes`].
pub fn ungroup_bytes(grouped: &[u8], planes: usize, out: &mut [u8]) {
    if planes <= 1 || grouped.is_empty() || grouped.len() != out.len() || !grouped.len().is_multiple_of(planes) {
        copy_prefix(out, grouped);
        return;
    }
    let m = grouped.len() / planes;
    match planes {
        2 => {
            let (p0, p1) = grouped.split_at(m);
            for ((e, a), b) in out.chunks_exact_mut(2).zip(p0).zip(p1) {
                e[0] = *a;
                e[1] = *b;
            }
        }
        4 => {
            let (p0, rest) = grouped.split_at(m);
            let (p1, rest) = rest.split_at(m);
            let (p2, p3) = rest.split_at(m);
            for ((((e, a), b), c), d) in out.chunks_exact_mut(4).zip(p0).zip(p1).zip(p2).zip(p3) {
                e[0] = *a;
                e[1] = *b;
                e[2] = *c;
                e[3] = *d;
            }
        }
        _ => {
            for (b, plane) in grouped.chunks_exact(m).enumerate() {
                for (e, &v) in out.chunks_exact_mut(planes).zip(plane) {
                    if let Some(slot) = e.get_mut(b) {
                        *slot = v;
                    }
                }
            }
        }
    }
}

/// Copies the common prefix of `src` into `dst` (callers pass equal lengths).
fn copy_prefix(dst: &mut [u8], src: &[u8]) {
    let n = dst.len().min(src.len());
    dst[..n].copy_from_slice(&src[..n]);
}
