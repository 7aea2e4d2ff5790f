//! Per-tensor chunked compression (`docs/FORMAT.md` section 15): one
//! chunk's codec (byte planes, then zstd; or stored raw), and reads of
//! compressed tensors that touch only the chunks asked for, decompressed on
//! all cores. `deathtensors-format` says where chunks are; this module turns
//! them into bytes. Writing is in `pack.rs`.

use std::path::Path;
use std::sync::Mutex;

use deathtensors_format::{byte_planes, group_bytes, ungroup_bytes, Chunk, ChunkTable, Dtype};
use zstd::bulk::{Compressor, Decompressor};
use zstd::stream::raw::CParameter;

use crate::error::{Error, ErrorKind, Result};
use crate::fs::hash::{self, Hasher};
use crate::fs::pread::{read_exact_at, ReadAt};

/// Below this many raw bytes, a read decompresses on one thread: spreading
/// a few chunks costs more in thread starts than it saves.
const PARALLEL_MIN: u64 = 4 << 20;

/// One thread's codec state and buffers, reused from chunk to chunk.
pub(crate) struct ChunkCodec {
    decompressor: Option<Decompressor<'static>>,
    compressor: Option<(i32, bool, Compressor<'static>)>,
    /// Stored bytes read from the file.
    stored: Vec<u8>,
    /// A whole raw chunk, for reads that need part of one.
    whole: Vec<u8>,
    /// Byte planes, before grouping or after decompression.
    planes: Vec<u8>,
}

impl ChunkCodec {
    pub(crate) fn new() -> ChunkCodec {
        ChunkCodec { decompressor: None, compressor: None, stored: Vec::new(), whole: Vec::new(), planes: Vec::new() }
    }

    /// Decompresses one chunk (`stored`, as the table says) into `out`, which
    /// is exactly the chunk's raw length. Never writes past `out`: a frame
    /// that holds more is an error, as is one that holds less, a corrupt
    /// frame and bytes after it.
    pub(crate) fn decompress(
        &mut self,
        dtype: Dtype,
        stored: &[u8],
        out: &mut [u8],
    ) -> std::result::Result<(), String> {
        let len = out.len();
        if stored.len() == len {
            out.copy_from_slice(stored);
            return Ok(());
        }
        match zstd::zstd_safe::find_frame_compressed_size(stored) {
            Ok(n) if n == stored.len() => {}
            Ok(n) => return Err(format!("{} bytes follow the zstd frame", stored.len().saturating_sub(n))),
            Err(_) => return Err("not a whole zstd frame (corrupt or truncated)".to_string()),
        }
        if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(stored) {
            if size != len as u64 {
                return Err(format!("the zstd frame holds {size} bytes, the header declares {len}"));
            }
        }
        let planes = byte_planes(dtype);
        let decompressor = match &mut self.decompressor {
            Some(d) => d,
            slot => slot.insert(Decompressor::new().map_err(|e| e.to_string())?),
        };
        // Four planes are decoded into `out` and put back together through
        // `self.planes` (see `ungroup4`); two or eight go the other way.
        let four = planes == 4 && len.is_multiple_of(4);
        let target: &mut [u8] = if planes > 1 && !four {
            self.planes.resize(len, 0);
            &mut self.planes[..]
        } else {
            &mut *out
        };
        // The buffer is exactly the declared size: a bomb stops there.
        let n = decompressor.decompress_to_buffer(stored, target).map_err(|e| {
            if e.to_string().contains("too small") {
                format!("the zstd frame holds more than the {len} bytes the header declares")
            } else {
                format!("corrupt zstd frame: {e}")
            }
        })?;
        if n != len {
            return Err(format!("the zstd frame holds {n} bytes, the header declares {len}"));
        }
        if four {
            self.planes.resize(len, 0);
            ungroup4(out, &mut self.planes);
        } else if planes > 1 {
            ungroup_bytes(&self.planes, planes, out);
        }
        Ok(())
    }

    /// Compresses one raw chunk at `level` into `out` (whose memory is
    /// reused from chunk to chunk): true if its zstd frame (of its byte
    /// planes, for floats) is shorter than the chunk, false to store it raw.
    pub(crate) fn compress(
        &mut self,
        dtype: Dtype,
        raw: &[u8],
        level: i32,
        out: &mut Vec<u8>,
    ) -> std::io::Result<bool> {
        out.clear();
        if raw.len() < 2 {
            return Ok(false);
        }
        let planes = byte_planes(dtype);
        let compressor = match &mut self.compressor {
            Some((l, p, c)) if *l == level && *p == (planes > 1) => c,
            slot => {
                let mut c = Compressor::new(level)?;
                // The footer and digests cover integrity, and the header
                // declares every size: the frame needs neither.
                c.include_checksum(false)?;
                c.include_contentsize(false)?;
                c.include_dictid(false)?;
                if planes > 1 {
                    // Byte planes of floats hardly repeat: their gain is in
                    // the entropy coder, and the match finder costs time and
                    // even ratio (short matches cost more than the literals
                    // they replace). So only 7-byte matches (zstd's longest
                    // minimum), in 256-entry tables, and up to level 3 zstd's
                    // fastest strategy: on MiniLM's BF16 weights, 0.672 of
                    // raw at level 3 instead of 0.708 with zstd's defaults,
                    // compressed 4x and decompressed 1.9x as fast per core;
                    // level 19 gains only 0.1% more.
                    c.set_parameter(CParameter::MinMatch(7))?;
                    c.set_parameter(CParameter::HashLog(8))?;
                    c.set_parameter(CParameter::ChainLog(8))?;
                    if level <= 3 {
                        c.set_parameter(CParameter::Strategy(zstd::zstd_safe::Strategy::ZSTD_fast))?;
                    }
                }
                &mut slot.insert((level, planes > 1, c)).2
            }
        };
        let src: &[u8] = if planes == 4 && raw.len().is_multiple_of(4) {
            self.planes.resize(raw.len(), 0);
            self.whole.resize(raw.len(), 0);
            group4(raw, &mut self.whole, &mut self.planes);
            &self.planes
        } else if planes > 1 {
            self.planes.resize(raw.len(), 0);
            group_bytes(raw, planes, &mut self.planes);
            &self.planes
        } else {
            raw
        };
        // Room for one byte less than raw: a frame that does not fit did not shrink.
        // Room for one byte less than raw: a frame that does not fit did
        // not shrink (a buffer kept from a longer chunk may be larger).
        out.reserve(raw.len() - 1);
        match compressor.compress_to_buffer(src, out) {
            Ok(n) => Ok(n < raw.len()),
            Err(e) if e.to_string().contains("too small") => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// `out[2i] = a[i]`, `out[2i + 1] = b[i]`: the compiler vectorizes this
/// two-way byte interleave (about 20 GB/s in cache), not a four-way one.
fn interleave(a: &[u8], b: &[u8], out: &mut [u8]) {
    for ((e, x), y) in out.chunks_exact_mut(2).zip(a).zip(b) {
        e[0] = *x;
        e[1] = *y;
    }
}

/// Puts four byte planes (`grouped`, a multiple of 4 bytes) back together
/// in place, through `scratch` of the same length, with three two-way
/// interleaves: (plane 0, plane 2) and (plane 1, plane 3), then the two
/// results. The same bytes as `ungroup_bytes(grouped, 4, ..)`, about twice
/// as fast.
fn ungroup4(grouped: &mut [u8], scratch: &mut [u8]) {
    let m = grouped.len() / 4;
    {
        let (p01, p23) = grouped.split_at(2 * m);
        let (p0, p1) = p01.split_at(m);
        let (p2, p3) = p23.split_at(m);
        let (c, d) = scratch.split_at_mut(2 * m);
        interleave(p0, p2, c);
        interleave(p1, p3, d);
    }
    let (c, d) = scratch.split_at(2 * m);
    interleave(c, d, grouped);
}

/// Groups `raw` (a multiple of 4 bytes) into four byte planes in `out`,
/// through `scratch` of the same length, with two-way splits (fast for
/// `group_bytes(.., 2, ..)`): even and odd bytes, then each of those, then
/// planes 2 and 1 swapped into place. The same bytes as
/// `group_bytes(raw, 4, ..)`, about twice as fast.
fn group4(raw: &[u8], scratch: &mut [u8], out: &mut [u8]) {
    let m = raw.len() / 4;
    group_bytes(raw, 2, scratch);
    let (even, odd) = scratch.split_at(2 * m);
    let (p02, p13) = out.split_at_mut(2 * m);
    group_bytes(even, 2, p02);
    group_bytes(odd, 2, p13);
    // Now planes 0, 2, 1, 3: swap the middle two.
    let (_, p2) = p02.split_at_mut(m);
    let (p1, _) = p13.split_at_mut(m);
    p2.swap_with_slice(p1);
}

/// Runs `work` on every item, items shared out to `threads` threads as each
/// finishes one; each thread has its own codec. Stops at the first error.
pub(crate) fn parallel<T: Send>(
    items: Vec<T>,
    threads: usize,
    work: impl Fn(&mut ChunkCodec, T) -> Result<()> + Sync,
) -> Result<()> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        let mut codec = ChunkCodec::new();
        return items.into_iter().try_for_each(|item| work(&mut codec, item));
    }
    let queue = Mutex::new(items.into_iter());
    let failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let mut codec = ChunkCodec::new();
                    loop {
                        if failed.load(std::sync::atomic::Ordering::Relaxed) {
                            return Ok(());
                        }
                        let next = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next();
                        let Some(item) = next else { return Ok(()) };
                        if let Err(e) = work(&mut codec, item) {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

/// A compressed tensor in an open file: what reading its chunks needs.
#[derive(Clone, Copy)]
pub(crate) struct Packed<'a> {
    pub(crate) file: &'a dyn ReadAt,
    pub(crate) path: &'a Path,
    pub(crate) name: &'a str,
    pub(crate) dtype: Dtype,
    pub(crate) table: ChunkTable<'a>,
    /// The file offset of its first stored byte.
    pub(crate) file_offset: u64,
}

impl Packed<'_> {
    fn chunk_error(&self, chunk: u64, message: String) -> Error {
        Error::new(
            ErrorKind::DecompressChunk { tensor: self.name.to_string(), chunk, message },
            Some(self.path),
            "cannot read",
        )
    }

    /// Reads chunk `c` and decompresses the raw bytes `[from, from + out.len())`
    /// of it (relative to the chunk) into `out`.
    pub(crate) fn read_chunk(&self, codec: &mut ChunkCodec, c: Chunk, from: u64, out: &mut [u8]) -> Result<()> {
        let stored_len = (c.stored.1 - c.stored.0) as usize;
        let raw_len = (c.raw.1 - c.raw.0) as usize;
        let mut stored = std::mem::take(&mut codec.stored);
        stored.resize(stored_len, 0);
        let read = read_exact_at(self.file, &mut stored, self.file_offset + c.stored.0);
        let result = read.map_err(|e| Error::io(e, self.path, "cannot read")).and_then(|()| {
            if from == 0 && out.len() == raw_len {
                codec.decompress(self.dtype, &stored, out).map_err(|m| self.chunk_error(c.index, m))
            } else {
                let mut whole = std::mem::take(&mut codec.whole);
                whole.resize(raw_len, 0);
                let done = codec.decompress(self.dtype, &stored, &mut whole).map_err(|m| self.chunk_error(c.index, m));
                if done.is_ok() {
                    out.copy_from_slice(&whole[from as usize..from as usize + out.len()]);
                }
                codec.whole = whole;
                done
            }
        });
        codec.stored = stored;
        result
    }

    /// The jobs that fill `buf` with raw bytes `[offset, offset + buf.len())`
    /// of the tensor: one per chunk that holds any of them.
    pub(crate) fn jobs<'b>(&self, offset: u64, buf: &'b mut [u8]) -> Vec<(Chunk, u64, &'b mut [u8])> {
        let end = offset + buf.len() as u64;
        let mut rest = buf;
        let mut jobs = Vec::new();
        for c in self.table.covering(offset, end) {
            let from = c.raw.0.max(offset);
            let to = c.raw.1.min(end);
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut((to - from) as usize);
            jobs.push((c, from - c.raw.0, mine));
            rest = tail;
        }
        jobs
    }

    /// Fills `buf` with raw bytes `[offset, offset + buf.len())`, reading
    /// only the chunks that hold them, on all cores when there are many.
    /// On an error, `buf` is zeroed.
    pub(crate) fn read_range(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let threads = if (buf.len() as u64) < PARALLEL_MIN { 1 } else { hash::threads() };
        let jobs = self.jobs(offset, buf);
        let result = parallel(jobs, threads, |codec, (c, from, out)| self.read_chunk(codec, c, from, out));
        if result.is_err() {
            buf.fill(0);
        }
        result
    }

    /// The SHA-256 of the tensor's raw bytes, chunk by chunk in one buffer.
    pub(crate) fn digest(&self, codec: &mut ChunkCodec) -> Result<[u8; 32]> {
        let mut h = Hasher::new();
        let mut buf = Vec::new();
        for c in self.table.chunks() {
            buf.resize((c.raw.1 - c.raw.0) as usize, 0);
            self.read_chunk(codec, c, 0, &mut buf)?;
            h.update(&buf);
        }
        Ok(h.finish())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn group4_is_group_bytes() {
        for n in [0usize, 4, 8, 60, 64, 4096, 4100] {
            let raw: Vec<u8> = (0..n).map(|i| (i * 37 + i / 7) as u8).collect();
            let mut want = vec![0u8; n];
            deathtensors_format::group_bytes(&raw, 4, &mut want);
            let (mut scratch, mut got) = (vec![0u8; n], vec![0u8; n]);
            super::group4(&raw, &mut scratch, &mut got);
            assert_eq!(got, want, "{n}");
        }
    }

    #[test]
    fn ungroup4_is_ungroup_bytes() {
        for n in [0usize, 4, 8, 60, 64, 4096, 4100] {
            let raw: Vec<u8> = (0..n).map(|i| (i * 37 + i / 7) as u8).collect();
            let mut grouped = vec![0u8; n];
            deathtensors_format::group_bytes(&raw, 4, &mut grouped);
            let mut scratch = vec![0u8; n];
            super::ungroup4(&mut grouped, &mut scratch);
            assert_eq!(grouped, raw, "{n}");
        }
    }
}
