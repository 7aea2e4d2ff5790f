//! Reading regions of tensors (a start and a length in each dimension)
//! into contiguous buffers: a column band of a matrix, say, which a
//! resharded load of a checkpoint needs from each stored block. From a
//! plain local file each tensor is read once, in pieces small enough to
//! stay in the core's cache, each piece hashed (when checked) and its part
//! of the region copied out before the next is read: no tensor-sized
//! buffer, and no second pass over the bytes. A batch of reads hashes two
//! tensors at a time on one core (the SHA extensions' two lanes,
//! `sha_lanes`): more bytes per second than one stream, by how much
//! depending on the core (1.13x on this project's AMD machine).

use deathtensors_format::Region;

use super::{Reader, TensorRef};
use crate::error::{Error, Result};
use crate::hash;
use crate::pread::read_exact_at;
use crate::sha_lanes::TwoStreams;

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
        let result = self.regions(reads);
        if result.is_err() {
            for r in reads.iter_mut() {
                r.buf.fill(0);
            }
        }
        result
    }

    fn regions(&self, reads: &mut [RegionRead<'_>]) -> Result<()> {
        let mut planned = Vec::with_capacity(reads.len());
        for r in reads.iter() {
            planned.push(self.plan_region(r)?);
        }
        let mut streamed = Vec::new();
        for (i, (t, region)) in planned.iter().enumerate() {
            let name = reads[i].name;
            if !self.stored_plain(name) {
                self.read_whole_region(&mut reads[i], region)?;
                continue;
            }
            let hashing = reads[i].check != RegionCheck::Unchecked || self.checks_every_read(name);
            let (from, to) = if hashing { (0, t.info.byte_len()) } else { region.span() };
            streamed.push(Job {
                read: i,
                file_offset: t.file_offset,
                at: from,
                to,
                hashing,
                // The whole tensor, in order: read straight into the buffer.
                direct: region.byte_len() == t.info.byte_len(),
                gather: Gather::new(region),
            });
        }
        if !streamed.is_empty() {
            self.stream_regions(reads, streamed)?;
        }
        Ok(())
    }

    /// The tensor and region of a read, checked against each other and the
    /// buffer before anything is read.
    fn plan_region(&self, r: &RegionRead<'_>) -> Result<(TensorRef<'_>, Region)> {
        let name = r.name;
        let t = self.tensor(name)?;
        let region = Region::new(t.info.dtype, &t.info.shape, r.start, r.len)
            .map_err(|e| Error::input(format!("tensor {name:?}: {e}"), &self.path, "cannot read"))?;
        self.check_buffer(r.buf, region.byte_len(), &format!("the region of tensor {name:?} is"))?;
        if r.check == RegionCheck::Stored && t.info.sha256.is_none() {
            // The error read_verified_into gives, before reading anything.
            self.check_digest(name, |_| Ok([0; 32]))?;
        }
        Ok((t, region))
    }

    /// A tensor decrypted, decompressed or fetched whole (and checked as
    /// read_into checks each source), then gathered.
    fn read_whole_region(&self, r: &mut RegionRead<'_>, region: &Region) -> Result<()> {
        let mut whole = vec![0u8; self.unpacked_tensor_len(r.name)? as usize];
        if r.check == RegionCheck::Stored {
            self.read_verified_into(r.name, &mut whole)?;
        } else {
            self.read_into(r.name, &mut whole)?;
        }
        if let RegionCheck::Digest(expected) = r.check {
            self.check_against(r.name, expected, hash::sha256(&whole))?;
        }
        Gather::new(region).piece(&whole, 0, r.buf);
        Ok(())
    }

    /// Reads the jobs' tensors from the local file piece by piece, two at a
    /// time (one in each hashing lane), hashing and gathering each piece as
    /// it lands.
    fn stream_regions(&self, reads: &mut [RegionRead<'_>], jobs: Vec<Job<'_>>) -> Result<()> {
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
                    &mut reads[job.read].buf[job.at as usize..job.at as usize + n[k]]
                } else {
                    &mut pieces[k][..n[k]]
                };
                read_exact_at(&self.file, dst, job.file_offset + job.at)
                    .map_err(|e| Error::io(e, &self.path, "cannot read"))?;
            }
            let bytes = |k: usize| -> &[u8] {
                match &lanes[k] {
                    Some(job) if job.direct => &reads[job.read].buf[job.at as usize..job.at as usize + n[k]],
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
                    job.gather.piece(&pieces[k][..n[k]], job.at, reads[job.read].buf);
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

    /// Copies into `out` (the region, contiguous) what `piece`, the
    /// tensor's bytes from `at`, holds of the runs not copied yet.
    fn piece(&mut self, piece: &[u8], at: u64, out: &mut [u8]) {
        let end = at + piece.len() as u64;
        while let Some(&(k, start)) = self.runs.peek() {
            if start >= end {
                return;
            }
            let run_end = start + self.run_len;
            let (lo, hi) = (start.max(at), run_end.min(end));
            if lo < hi {
                let dst = k as u64 * self.run_len + (lo - start);
                out[dst as usize..(dst + hi - lo) as usize]
                    .copy_from_slice(&piece[(lo - at) as usize..(hi - at) as usize]);
            }
            if run_end > end {
                // The run goes on in the next piece.
                return;
            }
            self.runs.next();
        }
    }
}
