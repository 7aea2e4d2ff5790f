//! Writing compressed files: tensors compressed one by one in chunks (flag
//! bit 5, `docs/FORMAT.md` section 15), or the whole blob as one zstd frame
//! (flag bit 0, what deathtensors 0.3.0 writes and reads).
//!
//! Both stream: memory stays a few chunks per core whatever the model's
//! size. A file of compressed tensors cannot know its header before its
//! chunks are compressed (the header lists their lengths), so the writer
//! reserves the head of the largest header they can need (every chunk at
//! its raw length), writes the blob after it, and writes the real head, padded
//! with spaces to the same length, in its place at the end. The footer is
//! then hashed back from the file (the page cache).

use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use deathtensors_format::{
    Codec, Compression, Flags, Head, Header, TensorSpec, DEFAULT_COMPRESSION_CHUNK, MIN_COMPRESSED_TENSOR,
};

use crate::error::{Error, Result};
use crate::fs::atomic::TempFile;
use crate::fs::hash::{self, Hasher};
use crate::fs::pread::{read_exact_at, write_all_at};
use crate::fs::writeback::Sequential;
use crate::options::WriteOptions;

const DOING: &str = "cannot write";

/// Where a compressing writer takes tensor bytes from: the caller's buffers,
/// or a function that fills a buffer with `len` bytes of tensor `i` from an
/// offset (a conversion reading another file).
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    Slices(&'a [&'a [u8]]),
    Fill(&'a Fill<'a>),
}

/// Fills a buffer with bytes of tensor `i` from an offset.
pub(crate) type Fill<'a> = dyn Fn(usize, u64, &mut [u8]) -> Result<()> + Sync + 'a;

impl Source<'_> {
    /// `len` bytes of tensor `i` from `offset`: borrowed, or filled into `buf`.
    fn get<'b>(&'b self, i: usize, offset: u64, len: usize, buf: &'b mut Vec<u8>) -> Result<&'b [u8]> {
        match self {
            Source::Slices(s) => Ok(&s[i][offset as usize..offset as usize + len]),
            Source::Fill(fill) => {
                buf.resize(len, 0);
                fill(i, offset, buf)?;
                Ok(&buf[..])
            }
        }
    }
}

fn flags_for(options: &WriteOptions, base: Flags) -> (Flags, bool) {
    let sign = !options.signers.is_empty();
    let hashing = options.checksum || sign;
    let mut flags = base;
    if hashing {
        flags = flags | Flags::CHECKSUM;
    }
    if sign {
        flags = flags | Flags::SIGNED;
    }
    (flags, hashing)
}

/// Zero bytes for alignment gaps.
fn write_zeros(out: &mut impl Write, n: u64) -> std::io::Result<()> {
    static ZEROS: [u8; 4096] = [0; 4096];
    let mut left = n;
    while left > 0 {
        let k = left.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..k])?;
        left -= k as u64;
    }
    Ok(())
}

/// One piece of the blob, in order: a raw tensor, or a chunk of one.
#[derive(Clone, Copy)]
enum Item {
    Raw(usize),
    Chunk(usize, u64),
}

/// A chunk, compressed by a worker: its raw bytes if the source had to fill
/// them (hashed and, if it did not shrink, written by the main thread), and
/// its frame, if it shrank. The buffers go back to a pool once written, so
/// that no chunk pays for fresh memory.
#[derive(Default)]
struct Done {
    raw: Vec<u8>,
    frame: Vec<u8>,
    shrank: bool,
}

/// Saves tensors compressed one by one in chunks (flag bit 5). Same
/// tensors and options, same bytes.
pub(crate) fn save_chunked(
    path: &Path,
    mut specs: Vec<TensorSpec>,
    source: Source<'_>,
    options: &WriteOptions,
    level: i32,
) -> Result<Header> {
    options.check_compress(level, path)?;
    let fmt = |e| Error::format(e, path, DOING);
    let io = |e| Error::io(e, path, DOING);
    let (flags, hashing) = flags_for(options, Flags::COMPRESSED);
    for s in &mut specs {
        // Placeholders of the digests' length, for the reserved header.
        s.sha256 = hashing.then_some([0; 32]);
    }
    let chunk = DEFAULT_COMPRESSION_CHUNK;
    let compression = Compression { codec: Codec::Zstd, level: level as u32, chunk_size: chunk };
    let raw_lens =
        specs.iter().map(|s| s.byte_len()).collect::<deathtensors_format::Result<Vec<u64>>>().map_err(fmt)?;
    let eligible: Vec<bool> = raw_lens.iter().map(|&n| n >= MIN_COMPRESSED_TENSOR).collect();
    // The largest header: every eligible tensor listed, every chunk at its raw length.
    let widest = raw_lens
        .iter()
        .zip(&eligible)
        .map(|(&n, &e)| e.then(|| (0..n.div_ceil(chunk)).map(|j| (n - j * chunk).min(chunk)).collect()))
        .collect();
    let metadata = options.metadata.clone().unwrap_or_default();
    let widest = Header::new_compressed(
        specs.clone(),
        metadata.clone(),
        options.alignment,
        options.created_by.clone(),
        compression,
        widest,
        &options.limits,
    )
    .map_err(fmt)?;
    let reserved = Head::encode(&widest, flags).map_err(fmt)?.len() as u64;
    drop(widest);

    let mut items = Vec::new();
    for (i, &n) in raw_lens.iter().enumerate() {
        if eligible[i] {
            items.extend((0..n.div_ceil(chunk)).map(|j| Item::Chunk(i, j)));
        } else {
            items.push(Item::Raw(i));
        }
    }
    let threads = hash::threads();
    let window = (threads * 4).max(1);

    let temp = TempFile::for_write(path, options).map_err(io)?;
    let mut file = temp.file();
    file.seek(SeekFrom::Start(reserved)).map_err(io)?;
    let mut out = BufWriter::with_capacity(1 << 20, Sequential::for_write(temp.file(), options, reserved));
    let alignment = options.alignment.max(1);
    let mut at = 0u64;
    let mut tables: Vec<Option<Vec<u64>>> = vec![None; specs.len()];
    let mut current: Option<(usize, Option<Hasher>, Vec<u64>)> = None;
    let mut digests: Vec<Option<[u8; 32]>> = vec![None; specs.len()];
    let mut fill_buf = Vec::new();
    let finish_tensor = |cur: (usize, Option<Hasher>, Vec<u64>),
                         tables: &mut Vec<Option<Vec<u64>>>,
                         digests: &mut Vec<Option<[u8; 32]>>| {
        let (i, hasher, lens) = cur;
        let shrank = lens.iter().zip(0u64..).any(|(&s, j)| s < (raw_lens[i] - j * chunk).min(chunk));
        if eligible[i] && shrank {
            tables[i] = Some(lens);
        }
        digests[i] = hasher.map(Hasher::finish);
    };
    let mut pool: Vec<Done> = Vec::new();
    for window_items in items.chunks(window) {
        // Compress this window's chunks on all cores.
        let mut done: Vec<Done> = window_items.iter().map(|_| pool.pop().unwrap_or_default()).collect();
        let jobs: Vec<(Item, &mut Done)> =
            window_items.iter().copied().zip(done.iter_mut()).filter(|(it, _)| matches!(it, Item::Chunk(..))).collect();
        crate::file::compress::parallel(jobs, threads, |codec, (item, slot)| {
            let Item::Chunk(i, j) = item else { return Ok(()) };
            let start = j * chunk;
            let len = (raw_lens[i] - start).min(chunk) as usize;
            let mut buf = std::mem::take(&mut slot.raw);
            let raw = source.get(i, start, len, &mut buf)?;
            slot.shrank = codec.compress(specs[i].dtype, raw, level, &mut slot.frame).map_err(io)?;
            slot.raw = buf;
            Ok(())
        })?;
        // Write them in order, hashing the raw bytes.
        for (item, slot) in window_items.iter().copied().zip(done) {
            let (i, j) = match item {
                Item::Raw(i) => (i, 0),
                Item::Chunk(i, j) => (i, j),
            };
            if j == 0 {
                if let Some(cur) = current.take() {
                    finish_tensor(cur, &mut tables, &mut digests);
                }
                let start = at.div_ceil(alignment) * alignment;
                write_zeros(&mut out, start - at).map_err(io)?;
                at = start;
                current = Some((i, hashing.then(Hasher::new), Vec::new()));
            }
            let Some((_, hasher, lens)) = current.as_mut() else {
                pool.push(slot);
                continue;
            };
            match item {
                Item::Raw(i) => {
                    let mut offset = 0u64;
                    while offset < raw_lens[i] {
                        let n = (raw_lens[i] - offset).min(hash::CHUNK as u64) as usize;
                        let bytes = source.get(i, offset, n, &mut fill_buf)?;
                        if let Some(h) = hasher {
                            h.update(bytes);
                        }
                        out.write_all(bytes).map_err(io)?;
                        offset += n as u64;
                    }
                    at += raw_lens[i];
                }
                Item::Chunk(i, j) => {
                    let start = j * chunk;
                    let len = (raw_lens[i] - start).min(chunk) as usize;
                    let raw: &[u8] = match source {
                        Source::Slices(s) => &s[i][start as usize..start as usize + len],
                        Source::Fill(_) => &slot.raw,
                    };
                    if let Some(h) = hasher {
                        h.update(raw);
                    }
                    let stored = if slot.shrank { &slot.frame[..] } else { raw };
                    out.write_all(stored).map_err(io)?;
                    lens.push(stored.len() as u64);
                    at += stored.len() as u64;
                }
            }
            pool.push(slot);
        }
    }
    if let Some(cur) = current.take() {
        finish_tensor(cur, &mut tables, &mut digests);
    }
    out.flush().map_err(io)?;
    drop(out);
    for (s, d) in specs.iter_mut().zip(digests) {
        s.sha256 = d;
    }
    let header = Header::new_compressed(
        specs,
        metadata,
        options.alignment,
        options.created_by.clone(),
        compression,
        tables,
        &options.limits,
    )
    .map_err(fmt)?;
    if header.data_len() != at {
        return Err(Error::input(
            format!("internal error: wrote {at} bytes of data, the header lays out {}", header.data_len()),
            path,
            DOING,
        ));
    }
    let head = Head::encode_reserved(&header, flags, reserved).map_err(fmt)?;
    write_all_at(temp.file(), &head, 0).map_err(io)?;
    if flags.contains(Flags::CHECKSUM) {
        // The footer covers the final header and the data: hash it back
        // from the file (page cache).
        let mut h = Hasher::new();
        h.update(&head[24..]);
        let mut buf = vec![0u8; hash::CHUNK];
        let end = reserved + at;
        let mut pos = reserved;
        while pos < end {
            let n = (end - pos).min(buf.len() as u64) as usize;
            read_exact_at(temp.file(), &mut buf[..n], pos).map_err(io)?;
            h.update(&buf[..n]);
            pos += n as u64;
        }
        let footer = h.finish();
        write_all_at(temp.file(), &footer, end).map_err(io)?;
        if flags.contains(Flags::SIGNED) {
            let block = crate::file::signing::signature_block(&options.signers, &head, Some(&footer)).map_err(fmt)?;
            write_all_at(temp.file(), &block, end + 32).map_err(io)?;
        }
    }
    temp.persist().map_err(io)?;
    Ok(header)
}

/// A writer that also hashes what goes through it.
struct Tee<W: Write> {
    inner: W,
    hasher: Option<Hasher>,
}

impl<W: Write> Write for Tee<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        if let Some(h) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Saves tensors with the whole blob as one zstd frame (flag bit 0), as
/// deathtensors 0.3.0 writes it, streaming through the encoder (on all
/// cores). Same tensors and options, same bytes.
pub(crate) fn save_blob(
    path: &Path,
    mut specs: Vec<TensorSpec>,
    source: Source<'_>,
    options: &WriteOptions,
    level: i32,
) -> Result<Header> {
    options.check_compress(level, path)?;
    let fmt = |e| Error::format(e, path, DOING);
    let io = |e| Error::io(e, path, DOING);
    let (flags, hashing) = flags_for(options, Flags::ZSTD);
    let raw_lens =
        specs.iter().map(|s| s.byte_len()).collect::<deathtensors_format::Result<Vec<u64>>>().map_err(fmt)?;
    if hashing {
        // The digests go in the header, which comes first.
        let digests = match source {
            Source::Slices(s) => crate::fs::sha_lanes::sha256_many(s),
            Source::Fill(_) => {
                let mut buf = Vec::new();
                let mut out = Vec::with_capacity(specs.len());
                for (i, &n) in raw_lens.iter().enumerate() {
                    let mut h = Hasher::new();
                    let mut offset = 0;
                    while offset < n {
                        let k = (n - offset).min(hash::CHUNK as u64) as usize;
                        h.update(source.get(i, offset, k, &mut buf)?);
                        offset += k as u64;
                    }
                    out.push(h.finish());
                }
                out
            }
        };
        for (s, d) in specs.iter_mut().zip(digests) {
            s.sha256 = Some(d);
        }
    }
    let header = options.deathtensors_header(specs).map_err(fmt)?;
    let head = Head::encode(&header, flags).map_err(fmt)?;
    let temp = TempFile::for_write(path, options).map_err(io)?;
    let hasher = {
        let mut out = BufWriter::with_capacity(1 << 20, Sequential::for_write(temp.file(), options, 0));
        out.write_all(&head).map_err(io)?;
        let hasher = flags.contains(Flags::CHECKSUM).then(|| {
            let mut h = Hasher::new();
            h.update(&head[24..]);
            h
        });
        let tee = Tee { inner: out, hasher };
        let mut enc = zstd::stream::Encoder::new(tee, level).map_err(io)?;
        enc.include_checksum(false).map_err(io)?;
        enc.set_pledged_src_size(Some(header.data_len())).map_err(io)?;
        enc.include_contentsize(true).map_err(io)?;
        // zstd's multi-threaded output does not depend on the number of workers.
        enc.multithread(hash::threads() as u32).map_err(io)?;
        let mut at = 0u64;
        let mut buf = Vec::new();
        for (i, t) in header.tensors().iter().enumerate() {
            write_zeros(&mut enc, t.data_offsets.0 - at).map_err(io)?;
            let mut offset = 0;
            while offset < raw_lens[i] {
                let k = (raw_lens[i] - offset).min(hash::CHUNK as u64) as usize;
                enc.write_all(source.get(i, offset, k, &mut buf)?).map_err(io)?;
                offset += k as u64;
            }
            at = t.data_offsets.1;
        }
        let tee = enc.finish().map_err(io)?;
        let Tee { inner: mut out, hasher } = tee;
        out.flush().map_err(io)?;
        hasher
    };
    if let Some(h) = hasher {
        let footer = h.finish();
        let mut f = temp.file();
        f.seek(SeekFrom::End(0)).map_err(io)?;
        f.write_all(&footer).map_err(io)?;
        if flags.contains(Flags::SIGNED) {
            let block = crate::file::signing::signature_block(&options.signers, &head, Some(&footer)).map_err(fmt)?;
            f.write_all(&block).map_err(io)?;
        }
    }
    temp.persist().map_err(io)?;
    Ok(header)
}
