//! Reading regions of tensors (a start and a length in each dimension)
//! into contiguous buffers, or to their places in larger ones (rows at a
//! stride): a column band of a matrix, say, which a resharded load of a
//! checkpoint needs from each stored tile, or a column tile going to its
//! columns of the tensor being loaded. From a
//! plain local file each tensor is read once, in pieces small enough to
//! stay in the core's cache, each piece hashed (when checked) and its part
//! of the region copied out before the next is read: no tensor-sized
//! buffer, and no second pass over the bytes. A batch of reads hashes two
//! tensors at a time on one core (the SHA extensions' two lanes,
//! `sha_lanes`): more bytes per second than one stream, by how much
//! depending on the core (on this project's AMD machine a batch of checked
//! reads goes 1.3x as fast as one `ring` stream hashes the same bytes in
//! memory: `cargo bench --bench io -- checked_reads`).

use deathtensors_format::Region;

use super::{Reader, TensorRef};
use crate::error::{Error, Result};
use crate::fs::hash;
use crate::fs::pread::read_exact_at;
use crate::fs::sha_lanes::TwoStreams;
use crate::fs::strided::Strided;

/// What a region read checks the tensor's bytes against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionCheck {
    /// Nothing the caller asks for (a file read under a signature or
    /// requirement, or a remote tensor with a digest, is still checked as
    /// every read of it is).
    Unchecked,
    /// The tensor's `sha256` digest in the header.
    Stored,
    /// A digest the caller holds (a checkpoint's metadata, say).
    Digest([u8; 32]),
}

/// One read of a batch ([`Reader::read_regions_into`]).
#[derive(Debug)]
pub struct RegionRead<'a> {
    /// The tensor.
    pub name: &'a str,
    /// The region's first element in each dimension.
    pub start: &'a [u64],
    /// The region's length in each dimension.
    pub len: &'a [u64],
    /// Exactly the region's bytes, filled in row-major order.
    pub buf: &'a mut [u8],
    /// What the tensor's bytes are checked against.
    pub check: RegionCheck,
}

/// Where a read of [`Reader::read_regions_placed`] puts its region's bytes
/// in its buffer: those bytes in row-major order, cut every `run` bytes
/// into rows that go `stride` bytes apart, from `offset` (for a part of a
/// larger tensor, `run` is the bytes of one index of the region's first
/// dimension and `stride` the larger tensor's). A region of a stored tensor goes straight into its part of a
/// larger tensor this way (a column tile into its columns), with no
/// tile-sized buffer and no second copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Where the first row starts in the buffer.
    pub offset: usize,
    /// The bytes of a row.
    pub run: usize,
    /// From the start of one row to the start of the next.
    pub stride: usize,
}

impl Placement {
    /// All `len` bytes in a row from `offset`.
    #[must_use]
    pub fn contiguous(offset: usize, len: usize) -> Placement {
        Placement { offset, run: len, stride: len }
    }

    /// The end in the buffer of a region of `len` bytes placed so, if its
    /// rows are whole and do not overlap.
    fn end(&self, len: u64) -> Option<usize> {
        let len = usize::try_from(len).ok()?;
        if len == 0 {
            return Some(self.offset);
        }
        if self.run == 0 || !len.is_multiple_of(self.run) {
            return None;
        }
        Strided::span_len(self.run, self.stride, len / self.run)?.checked_add(self.offset)
    }

    /// Whether a region of `len` bytes lands in consecutive bytes (one row,
    /// or rows with no gap), so that it can be read straight into place.
    fn consecutive(&self, len: u64) -> bool {
        self.stride == self.run || len <= self.run as u64
    }

    /// Copies `src`, the region's bytes from `at`, to their places in `out`
    /// (checked by `end` to fit).
    fn put(&self, out: &mut [u8], at: u64, mut src: &[u8]) {
        let mut at = at as usize;
        if self.stride == self.run {
            out[self.offset + at..self.offset + at + src.len()].copy_from_slice(src);
            return;
        }
        while !src.is_empty() {
            let (row, within) = (at / self.run, at % self.run);
            let n = (self.run - within).min(src.len());
            let o = self.offset + row * self.stride + within;
            out[o..o + n].copy_from_slice(&src[..n]);
            src = &src[n..];
            at += n;
        }
    }

    /// Zeroes the bytes a region of `len` bytes is placed in (those that
    /// fit in `out`).
    fn zero(&self, out: &mut [u8], len: u64) {
        if len > 0 && self.end(len).is_some_and(|e| e <= out.len()) {
            for row in 0..len as usize / self.run {
                let o = self.offset + row * self.stride;
                out[o..o + self.run].fill(0);
            }
        }
    }
}

/// One read of [`Reader::read_regions_placed`]: a region of a tensor into
/// buffer `buf` of the call, at `place`.
#[derive(Clone, Copy, Debug)]
pub struct PlacedRead<'a> {
    /// The tensor.
    pub name: &'a str,
    /// The region's first element in each dimension.
    pub start: &'a [u64],
    /// The region's length in each dimension.
    pub len: &'a [u64],
    /// The index of the buffer the region goes into.
    pub buf: usize,
    /// Where in that buffer.
    pub place: Placement,
    /// What the tensor's bytes are checked against.
    pub check: RegionCheck,
}

/// Bytes read at a time: a piece and its hash stay in a core's cache.
const PIECE: usize = 256 << 10;

impl Reader {
    /// Reads the region `start[d] .. start[d] + len[d]` (in elements) of each
    /// dimension `d` of the tensor into `buf`, in row-major order: `buf` is
    /// exactly the region's bytes. With a check other than
    /// [`RegionCheck::Unchecked`] every byte of the tensor is read and hashed
    /// (a digest covers the whole tensor); without, only the bytes from the
    /// region's first to its last. A failed check zeroes `buf`.
    ///
    /// # Errors
    /// - `TensorNotFound`; `InvalidInput` for a region that does not fit the
    ///   tensor (naming the dimension) or a buffer of another length.
    /// - `NoChecksum` for [`RegionCheck::Stored`] on a tensor without a
    ///   digest; `TensorDigestMismatch` if the bytes do not match.
    /// - As [`Reader::read_into`] otherwise.
    pub fn read_region_into(
        &self,
        name: &str,
        start: &[u64],
        len: &[u64],
        buf: &mut [u8],
        check: RegionCheck,
    ) -> Result<()> {
        self.read_regions_into(&mut [RegionRead { name, start, len, buf, check }])
    }

    /// [`Reader::read_region_into`] for each of `reads`, every one checked
    /// before any byte is read: from a plain local file two tensors are read
    /// and hashed side by side, so that a batch of checked reads goes faster
    /// than one read after the other (see `sha_lanes`). On an error every
    /// buffer of the batch is zeroed (none is left holding bytes that were
    /// not checked), and the error names the tensor.
    ///
    /// # Errors
    /// As [`Reader::read_region_into`], for the first read that fails.
    pub fn read_regions_into(&self, reads: &mut [RegionRead<'_>]) -> Result<()> {
        let placed: Vec<PlacedRead<'_>> = reads
            .iter()
            .enumerate()
            .map(|(i, r)| PlacedRead {
                name: r.name,
                start: r.start,
                len: r.len,
                buf: i,
                place: Placement::contiguous(0, r.buf.len()),
                check: r.check,
            })
            .collect();
        let mut bufs: Vec<&mut [u8]> = reads.iter_mut().map(|r| &mut *r.buf).collect();
        let result = self.read_regions_placed(&placed, &mut bufs);
        if result.is_err() {
            for b in bufs {
                b.fill(0);
            }
        }
        result
    }

    /// [`Reader::read_regions_into`] with each region going to a
    /// [`Placement`] in one of `bufs` (rows at a stride: a column tile into
    /// its columns of a larger tensor), so that several reads fill one
    /// buffer. Every read is checked first: its buffer exists, and its
    /// region, placed so, fits in it. Reads into one buffer should not
    /// overlap (the later one's bytes win). On an error the bytes every read
    /// places are zeroed.
    ///
    /// # Errors
    /// As [`Reader::read_region_into`]; `InvalidInput` for a placement that
    /// does not fit its buffer or a buffer index out of range.
    pub fn read_regions_placed(&self, reads: &[PlacedRead<'_>], bufs: &mut [&mut [u8]]) -> Result<()> {
        let result = self.regions(reads, bufs);
        if result.is_err() {
            for r in reads {
                let len = self.tensor(r.name).ok().and_then(|t| {
                    Region::new(t.info.dtype, &t.info.shape, r.start, r.len).ok().map(|region| region.byte_len())
                });
                if let (Some(len), Some(buf)) = (len, bufs.get_mut(r.buf)) {
                    r.place.zero(buf, len);
                }
            }
        }
        result
    }

    fn regions(&self, reads: &[PlacedRead<'_>], bufs: &mut [&mut [u8]]) -> Result<()> {
        let mut planned = Vec::with_capacity(reads.len());
        for r in reads {
            planned.push(self.plan_region(r, bufs)?);
        }
        let mut streamed = Vec::new();
        for (i, (t, region)) in planned.iter().enumerate() {
            let r = &reads[i];
            let name = r.name;
            if !self.stored_plain(name) {
                self.read_whole_region(r, region, bufs[r.buf])?;
                continue;
            }
            let hashing = r.check != RegionCheck::Unchecked || self.checks_every_read(name);
            let (from, to) = if hashing { (0, t.info.byte_len()) } else { region.span() };
            streamed.push(Job {
                read: i,
                file_offset: t.file_offset,
                at: from,
                to,
                hashing,
                // The whole tensor, in order, to consecutive bytes: read
                // straight into the buffer.
                direct: region.byte_len() == t.info.byte_len() && r.place.consecutive(region.byte_len()),
                gather: Gather::new(region),
            });
        }
        if !streamed.is_empty() {
            self.stream_regions(reads, bufs, streamed)?;
        }
        Ok(())
    }

    /// The tensor and region of a read, checked against each other and the
    /// buffer before anything is read.
    fn plan_region(&self, r: &PlacedRead<'_>, bufs: &[&mut [u8]]) -> Result<(TensorRef<'_>, Region)> {
        let name = r.name;
        let t = self.tensor(name)?;
        let region = Region::new(t.info.dtype, &t.info.shape, r.start, r.len)
            .map_err(|e| Error::input(format!("tensor {name:?}: {e}"), &self.path, "cannot read"))?;
        let bad = |why: String| Error::input(format!("tensor {name:?}: {why}"), &self.path, "cannot read");
        let buf = bufs.get(r.buf).ok_or_else(|| bad(format!("no buffer {} (there are {})", r.buf, bufs.len())))?;
        let len = region.byte_len();
        if r.place == Placement::contiguous(0, buf.len()) {
            self.check_buffer(buf, len, &format!("the region of tensor {name:?} is"))?;
        } else if r.place.end(len).is_none_or(|end| end > buf.len()) {
            let Placement { offset, run, stride } = r.place;
            return Err(bad(format!(
                "its region of {len} bytes does not fit a buffer of {} bytes as rows of {run} bytes, {stride} apart, from {offset}",
                buf.len()
            )));
        }
        if r.check == RegionCheck::Stored && t.info.sha256.is_none() {
            // The error read_verified_into gives, before reading anything.
            self.check_digest(name, |_| Ok([0; 32]))?;
        }
        Ok((t, region))
    }

    /// A tensor decrypted, decompressed or fetched whole (and checked as
    /// read_into checks each source), then gathered.
    fn read_whole_region(&self, r: &PlacedRead<'_>, region: &Region, out: &mut [u8]) -> Result<()> {
        let mut whole = vec![0u8; self.unpacked_tensor_len(r.name)? as usize];
        if r.check == RegionCheck::Stored {
            self.read_verified_into(r.name, &mut whole)?;
        } else {
            self.read_into(r.name, &mut whole)?;
        }
        if let RegionCheck::Digest(expected) = r.check {
            self.check_against(r.name, expected, hash::sha256(&whole))?;
        }
        Gather::new(region).piece(&whole, 0, out, r.place);
        Ok(())
    }

    /// Reads the jobs' tensors from the local file piece by piece, two at a
    /// time (one in each hashing lane), hashing and gathering each piece as
    /// it lands.
    fn stream_regions(&self, reads: &[PlacedRead<'_>], bufs: &mut [&mut [u8]], jobs: Vec<Job<'_>>) -> Result<()> {
        let piece_len = jobs.iter().filter(|j| !j.direct).map(|j| PIECE.min((j.to - j.at) as usize)).max().unwrap_or(0);
        let mut pieces = [vec![0u8; piece_len], vec![0u8; piece_len]];
        let mut hasher = jobs.iter().any(|j| j.hashing).then(|| Lanes::new(jobs.len()));
        let mut queue = jobs.into_iter();
        let mut lanes: [Option<Job<'_>>; 2] = [None, None];
        loop {
            for lane in lanes.iter_mut().filter(|l| l.is_none()) {
                *lane = queue.next();
            }
            if lanes.iter().all(Option::is_none) {
                return Ok(());
            }
            // Each lane's next piece: read, then its whole 64-byte blocks
            // hashed (only the last piece of a tensor has a tail).
            let mut n = [0usize; 2];
            for (k, lane) in lanes.iter().enumerate() {
                let Some(job) = lane else { continue };
                n[k] = PIECE.min((job.to - job.at) as usize);
                let dst = if job.direct {
                    let r = &reads[job.read];
                    let at = r.place.offset + job.at as usize;
                    &mut bufs[r.buf][at..at + n[k]]
                } else {
                    &mut pieces[k][..n[k]]
                };
                read_exact_at(&self.file, dst, job.file_offset + job.at)
                    .map_err(|e| Error::io(e, &self.path, "cannot read"))?;
            }
            let bytes = |k: usize| -> &[u8] {
                match &lanes[k] {
                    Some(job) if job.direct => {
                        let r = &reads[job.read];
                        let at = r.place.offset + job.at as usize;
                        &bufs[r.buf][at..at + n[k]]
                    }
                    Some(_) => &pieces[k][..n[k]],
                    None => &[],
                }
            };
            let whole = |k: usize| match &lanes[k] {
                Some(job) if job.hashing => n[k] / 64 * 64,
                _ => 0,
            };
            if let Some(h) = hasher.as_mut() {
                h.update(&bytes(0)[..whole(0)], &bytes(1)[..whole(1)]);
            }
            let mut digests = [None; 2];
            for k in 0..2 {
                let Some(job) = &lanes[k] else { continue };
                if job.hashing && job.at + n[k] as u64 == job.to {
                    let tail = &bytes(k)[whole(k)..];
                    digests[k] = hasher.as_mut().map(|h| h.finish(k, tail));
                }
            }
            for (k, lane) in lanes.iter_mut().enumerate() {
                let Some(job) = lane else { continue };
                if !job.direct {
                    let r = &reads[job.read];
                    job.gather.piece(&pieces[k][..n[k]], job.at, bufs[r.buf], r.place);
                }
                job.at += n[k] as u64;
                if job.at < job.to {
                    continue;
                }
                if let Some(actual) = digests[k] {
                    let r = &reads[job.read];
                    self.check_region(r.name, r.check, actual)?;
                }
                *lane = None;
            }
        }
    }

    /// Checks a tensor's digest as `check` asks: the caller's, and the
    /// header's too where every read is checked against it (a signature
    /// commits to it, not to the caller's).
    fn check_region(&self, name: &str, check: RegionCheck, actual: [u8; 32]) -> Result<()> {
        if let RegionCheck::Digest(expected) = check {
            self.check_against(name, expected, actual)?;
            if !self.checks_every_read(name) {
                return Ok(());
            }
        }
        self.check_digest(name, |_| Ok(actual))
    }
}

/// The hashing of a batch: two streams side by side, or one (`ring`,
/// faster than one lane of two) for a batch of one read.
// One a batch, on its stack: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
enum Lanes {
    One(hash::Hasher),
    Two(TwoStreams),
}

impl Lanes {
    fn new(reads: usize) -> Lanes {
        if reads == 1 {
            Lanes::One(hash::Hasher::new())
        } else {
            Lanes::Two(TwoStreams::new())
        }
    }

    /// Feeds whole 64-byte blocks to each stream (`b` is empty for one).
    fn update(&mut self, a: &[u8], b: &[u8]) {
        match self {
            Lanes::One(h) => h.update(a),
            Lanes::Two(t) => t.update(a, b),
        }
    }

    /// The digest of stream `k` once `tail` is added; it starts again empty.
    fn finish(&mut self, k: usize, tail: &[u8]) -> [u8; 32] {
        match self {
            Lanes::One(h) => {
                h.update(tail);
                std::mem::replace(h, hash::Hasher::new()).finish()
            }
            Lanes::Two(t) => t.finish(k, tail),
        }
    }
}

/// A read being streamed: where its tensor is, how far it has come.
struct Job<'a> {
    /// Its index in the batch.
    read: usize,
    file_offset: u64,
    /// The tensor's bytes still to read: `at..to`.
    at: u64,
    to: u64,
    hashing: bool,
    /// Read straight into the read's buffer (the region is the tensor).
    direct: bool,
    gather: Gather<'a>,
}
/// Copies a region's runs out of a tensor's bytes as they go by, in
/// ascending pieces that cover the region's span.
struct Gather<'a> {
    runs: std::iter::Peekable<std::iter::Enumerate<deathtensors_format::Runs<'a>>>,
    run_len: u64,
}

impl<'a> Gather<'a> {
    fn new(region: &'a Region) -> Gather<'a> {
        Gather { runs: region.runs().enumerate().peekable(), run_len: region.run_len() }
    }

    /// Copies into `out` (the region, at `place`) what `piece`, the
    /// tensor's bytes from `at`, holds of the runs not copied yet.
    fn piece(&mut self, piece: &[u8], at: u64, out: &mut [u8], place: Placement) {
        let end = at + piece.len() as u64;
        while let Some(&(k, start)) = self.runs.peek() {
            if start >= end {
                return;
            }
            let run_end = start + self.run_len;
            let (lo, hi) = (start.max(at), run_end.min(end));
            if lo < hi {
                let dst = k as u64 * self.run_len + (lo - start);
                place.put(out, dst, &piece[(lo - at) as usize..(hi - at) as usize]);
            }
            if run_end > end {
                // The run goes on in the next piece.
                return;
            }
            self.runs.next();
        }
    }
}
