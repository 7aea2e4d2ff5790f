//! Reading a region of a tensor (a start and a length in each dimension)
//! into a contiguous buffer: a column band of a matrix, say, which a
//! resharded load of a checkpoint needs from each stored block. From a
//! plain local file the tensor is read once, in pieces small enough to stay
//! in the core's cache, each piece hashed (when checked) and its part of the
//! region copied out before the next is read: no tensor-sized buffer, and no
//! second pass over the bytes.

use deathtensors_format::Region;

use super::Reader;
use crate::error::{Error, Result};
use crate::hash;
use crate::pread::read_exact_at;

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
        let t = self.tensor(name)?;
        let region = Region::new(t.info.dtype, &t.info.shape, start, len)
            .map_err(|e| Error::input(format!("tensor {name:?}: {e}"), &self.path, "cannot read"))?;
        self.check_buffer(buf, region.byte_len(), &format!("the region of tensor {name:?} is"))?;
        let streamed = self.stored_plain(name);
        let hashing = check != RegionCheck::Unchecked || self.checks_every_read(name);
        if !streamed {
            // Decrypted, decompressed or fetched whole (and checked as
            // read_into checks each source), then gathered.
            let mut whole = vec![0u8; self.unpacked_tensor_len(name)? as usize];
            if check == RegionCheck::Stored {
                self.read_verified_into(name, &mut whole)?;
            } else {
                self.read_into(name, &mut whole)?;
            }
            if let RegionCheck::Digest(expected) = check {
                self.check_against(name, expected, hash::sha256(&whole))?;
            }
            Gather::new(&region).piece(&whole, 0, buf);
            return Ok(());
        }
        if check == RegionCheck::Stored && t.info.sha256.is_none() {
            // The error read_verified_into gives, before reading anything.
            return self.check_digest(name, |_| Ok([0; 32]));
        }
        let (from, to) = if hashing { (0, t.info.byte_len()) } else { region.span() };
        let mut piece = vec![0u8; PIECE.min((to - from) as usize)];
        let mut h = hashing.then(hash::Hasher::new);
        let mut gather = Gather::new(&region);
        let mut at = from;
        while at < to {
            let n = PIECE.min((to - at) as usize);
            let piece = &mut piece[..n];
            read_exact_at(&self.file, piece, t.file_offset + at)
                .map_err(|e| Error::io(e, &self.path, "cannot read"))?;
            if let Some(h) = h.as_mut() {
                h.update(piece);
            }
            gather.piece(piece, at, buf);
            at += n as u64;
        }
        let Some(h) = h else { return Ok(()) };
        let actual = h.finish();
        let result = match check {
            // The caller's digest, and the header's too where every read is
            // checked against it (a signature commits to it, not to the
            // caller's).
            RegionCheck::Digest(expected) => self.check_against(name, expected, actual).and_then(|()| {
                if self.checks_every_read(name) {
                    self.check_digest(name, |_| Ok(actual))
                } else {
                    Ok(())
                }
            }),
            _ => self.check_digest(name, |_| Ok(actual)),
        };
        if result.is_err() {
            buf.fill(0);
        }
        result
    }
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
