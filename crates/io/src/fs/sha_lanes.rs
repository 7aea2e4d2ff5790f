//! SHA-256 of many independent inputs, two at a time on each core.
//!
//! One SHA-256 stream cannot go faster than the latency of the x86 SHA
//! extensions' round instruction allows: a core can issue the rounds of a
//! second, independent stream in the gaps, and so hashes two streams in
//! less than twice the time of one. How much less depends on the core: on
//! this project's AMD EPYC machine (2026-11-29, 64 MiB in memory), two
//! lanes hash 3.2 GB/s together, one `ring` stream 1.8 and one lane alone
//! ([`x86::compress1`]) 1.8; a lane left alone (the last input, a tail)
//! runs one-lane code, not two lanes with one idle. The last 16 message
//! words stay in registers, moved along by value each step: kept in an
//! array indexed `r % 4` they went through the stack, and the store and
//! reload sat on the schedule's chain, which then set the pace (2.3 GB/s
//! for two lanes, 1.5 for one). The per-tensor digests of a save are
//! such independent streams, as are the tensors of a batch of checked reads
//! (`reader/region.rs`); the
//! footer is one stream and stays with `ring`. No maintained crate offers
//! multi-buffer SHA-256, hence this module: the rounds are the standard use
//! of the SHA extensions (Intel's "SHA extensions" white paper), written for
//! two lanes, and tested against `ring` on every length around the block
//! boundaries.
//!
//! On CPUs without the extensions (and on other architectures) each input
//! is hashed by `ring`, one per core.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[cfg(target_arch = "x86_64")]
use crate::fs::pread::read_exact_at;
use crate::fs::pread::ReadAt;
use crate::fs::strided::{Strided, TensorBytes};

/// The chunk a `File` input is read in (by the two-lane x86 path): two
/// lanes' chunks stay in a core's L2 cache between the read that fills them
/// and the hashing.
#[cfg(any(target_arch = "x86_64", test))]
const CHUNK: usize = 256 << 10;

/// An input to hash: bytes in memory, or a range of a file, read in chunks
/// of [`CHUNK`] bytes with positioned reads.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Input<'a> {
    Bytes(&'a [u8]),
    File {
        file: &'a dyn ReadAt,
        offset: u64,
        len: u64,
    },
    /// Strided runs in memory (rows of a view): hashed where they are when
    /// each run is whole 64-byte blocks, else gathered chunk by chunk.
    Runs(Strided<'a>),
}

impl Input<'_> {
    fn len(&self) -> u64 {
        match *self {
            Input::Bytes(b) => b.len() as u64,
            Input::File { len, .. } => len,
            Input::Runs(s) => s.len() as u64,
        }
    }
}

/// Digests by input index, as one worker found them.
type Found = Vec<(usize, [u8; 32])>;

/// The SHA-256 of every input, in input order, on all cores.
///
/// # Errors
/// The first read error of a file input.
pub(crate) fn digests(inputs: &[Input<'_>]) -> std::io::Result<Vec<[u8; 32]>> {
    digests_with(inputs, &|_| {})
}

/// The SHA-256 of each of `inputs`, in order, on all cores: two
/// interleaved streams per core where the CPU has the SHA extensions (as
/// the library computes per-tensor digests), `ring` otherwise.
///
/// # Example
/// ```
/// let digests = deathtensors_io::sha256_many(&[&b"abc"[..], b""]);
/// assert_eq!(digests[0][..4], [0xba, 0x78, 0x16, 0xbf]);
/// assert_eq!(digests[1][..4], [0xe3, 0xb0, 0xc4, 0x42]);
/// ```
pub fn sha256_many<B: AsRef<[u8]> + Sync>(inputs: &[B]) -> Vec<[u8; 32]> {
    let views: Vec<TensorBytes<'_>> = inputs.iter().map(|b| TensorBytes::Contiguous(b.as_ref())).collect();
    sha256_views(&views)
}

/// [`sha256_many`] of tensors' bytes as the writers take them: rows of a
/// view (a column tile of a matrix) are hashed where they are, without a
/// contiguous copy first.
///
/// # Example
/// ```
/// use deathtensors_io::{sha256_many, sha256_views, Strided, TensorBytes};
/// // Columns 1..3 of a 3 x 4 matrix of bytes: rows of 2 bytes, 4 apart.
/// let matrix = *b"abcdefghijkl";
/// let tile = Strided::new(&matrix[1..], 2, 4, 3).unwrap();
/// let digests = sha256_views(&[TensorBytes::Strided(tile)]);
/// assert_eq!(digests, sha256_many(&[b"bcfgjk"]));
/// ```
pub fn sha256_views(views: &[TensorBytes<'_>]) -> Vec<[u8; 32]> {
    let inputs: Vec<Input<'_>> = views
        .iter()
        .map(|v| match *v {
            TensorBytes::Contiguous(b) => Input::Bytes(b),
            TensorBytes::Strided(s) => Input::Runs(s),
        })
        .collect();
    // Only file inputs can fail to be read; these are all in memory.
    digests(&inputs).unwrap_or_else(|_| views.iter().map(|v| crate::fs::hash::sha256(&v.to_cow())).collect())
}

/// [`digests`], calling `progress` with the number of bytes hashed as the
/// work goes (from any thread).
///
/// # Errors
/// As [`digests`].
pub(crate) fn digests_with(inputs: &[Input<'_>], progress: &(dyn Fn(u64) + Sync)) -> std::io::Result<Vec<[u8; 32]>> {
    // Biggest first, so that no core is left with a large input at the end.
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].len()));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let take = || {
        if failed.load(Ordering::Relaxed) {
            return None;
        }
        order.get(next.fetch_add(1, Ordering::Relaxed)).copied()
    };
    let workers = crate::fs::hash::threads().min(inputs.len()).max(1);
    let found: Vec<std::io::Result<Found>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let r = worker(inputs, &take, &|| failed.load(Ordering::Relaxed), progress);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut out = vec![[0u8; 32]; inputs.len()];
    for part in found {
        for (i, d) in part? {
            out[i] = d;
        }
    }
    Ok(out)
}

/// Hashes inputs taken from `take` until there are none left.
///
/// `stop` turns true when another worker failed: the result is thrown away
/// then, so a worker stops reading at its next chunk rather than finishing
/// the (possibly huge) inputs it holds.
fn worker(
    inputs: &[Input<'_>],
    take: &(dyn Fn() -> Option<usize> + Sync),
    stop: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(u64) + Sync),
) -> std::io::Result<Found> {
    #[cfg(target_arch = "x86_64")]
    if x86::available() {
        return x86::worker(inputs, take, stop, progress);
    }
    one_at_a_time(inputs, take, stop, progress)
}

/// The portable path: one input after the other, with `ring`.
fn one_at_a_time(
    inputs: &[Input<'_>],
    take: &(dyn Fn() -> Option<usize> + Sync),
    stop: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(u64) + Sync),
) -> std::io::Result<Found> {
    let mut buf = Vec::new();
    std::iter::from_fn(|| if stop() { None } else { take() })
        .map(|i| {
            let digest = match inputs[i] {
                Input::Bytes(b) => {
                    let d = crate::fs::hash::sha256(b);
                    progress(b.len() as u64);
                    d
                }
                Input::File { file, offset, len } => {
                    crate::fs::hash::sha256_file_range(file, offset, len, &mut buf, &mut |n| progress(n))?
                }
                Input::Runs(s) => {
                    let mut h = crate::fs::hash::Hasher::new();
                    for run in s.runs() {
                        h.update(run);
                    }
                    progress(s.len() as u64);
                    h.finish()
                }
            };
            Ok((i, digest))
        })
        .collect()
}

/// One input being hashed: its chaining value, and the bytes at hand (all
/// of a `Bytes` input, the last chunk read of a `File` input, the current
/// run of `Runs` of whole blocks).
#[cfg(target_arch = "x86_64")]
struct Lane<'a> {
    index: usize,
    input: Input<'a>,
    state: [u32; 8],
    /// Bytes of the input loaded so far (read, or all of `Bytes`).
    loaded: u64,
    /// The chunk buffer of a `File` input (and of `Runs` gathered).
    buf: Vec<u8>,
    /// The run at hand of `Runs` hashed where they are.
    run: &'a [u8],
    /// The unhashed bytes at hand: `pos..end` of the input's bytes, of
    /// `run` or of `buf`.
    pos: usize,
    end: usize,
}

#[cfg(target_arch = "x86_64")]
impl<'a> Lane<'a> {
    fn new(index: usize, input: Input<'a>, buf: Vec<u8>) -> Lane<'a> {
        let (loaded, end) = match input {
            Input::Bytes(b) => (b.len() as u64, b.len()),
            Input::File { .. } | Input::Runs(_) => (0, 0),
        };
        Lane { index, input, state: INITIAL, loaded, buf, run: &[], pos: 0, end }
    }

    /// Whether this lane hashes its runs where they are (each run whole
    /// 64-byte blocks), rather than gathered into `buf`.
    fn runs_in_place(&self) -> Option<Strided<'a>> {
        match self.input {
            Input::Runs(s) if s.run_len().is_multiple_of(64) => Some(s),
            _ => None,
        }
    }

    /// The chaining value and the bytes at hand, borrowed together.
    fn parts(&mut self) -> (&mut [u32; 8], &[u8]) {
        let data = match self.input {
            Input::Bytes(b) => b,
            Input::Runs(_) if self.runs_in_place().is_some() => self.run,
            Input::File { .. } | Input::Runs(_) => &self.buf[..],
        };
        (&mut self.state, &data[self.pos..self.end])
    }

    fn full_blocks(&self) -> usize {
        (self.end - self.pos) / 64
    }

    /// Reads the next chunk when the bytes at hand are used up; false when
    /// the input has no more bytes to load (only its tail is left).
    fn refill(&mut self) -> std::io::Result<bool> {
        if let Some(s) = self.runs_in_place() {
            if self.loaded == s.len() as u64 {
                return Ok(false);
            }
            // The next run (the runs are not empty: some bytes are left).
            self.run = s.run(self.loaded as usize / s.run_len());
            self.loaded += self.run.len() as u64;
            (self.pos, self.end) = (0, self.run.len());
            return Ok(true);
        }
        let (file, offset, len): (&dyn ReadAt, u64, u64) = match &self.input {
            Input::Bytes(_) => return Ok(false),
            Input::File { file, offset, len } => (*file, *offset, *len),
            Input::Runs(s) => (s, 0, s.len() as u64),
        };
        if self.loaded == len {
            return Ok(false);
        }
        // Chunks are whole blocks, so nothing is left over between them.
        debug_assert_eq!(self.pos, self.end);
        // Whole blocks: a source's own chunk is rounded down to 64 bytes.
        let chunk = file.stream_chunk().map_or(CHUNK, |c| (c / 64 * 64).max(64));
        let n = (len - self.loaded).min(chunk as u64) as usize;
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        read_exact_at(file, &mut self.buf[..n], offset + self.loaded)?;
        self.loaded += n as u64;
        (self.pos, self.end) = (0, n);
        Ok(true)
    }
}

/// Two SHA-256 streams that a caller feeds together, as it reads two inputs
/// side by side (a reader hashing ciphertext chunk by chunk as it decrypts
/// it): two lanes on one core where the CPU has the SHA extensions, two
/// `ring` contexts elsewhere.
pub(crate) struct TwoStreams {
    #[cfg(target_arch = "x86_64")]
    lanes: Option<([[u32; 8]; 2], [u64; 2])>,
    ring: [ring::digest::Context; 2],
}

impl TwoStreams {
    /// Two empty streams.
    pub(crate) fn new() -> TwoStreams {
        let ctx = || ring::digest::Context::new(&ring::digest::SHA256);
        TwoStreams {
            #[cfg(target_arch = "x86_64")]
            lanes: x86::available().then_some(([INITIAL; 2], [0; 2])),
            ring: [ctx(), ctx()],
        }
    }

    /// Feeds whole 64-byte blocks: `a` to stream 0, `b` to stream 1 (either
    /// may be empty; their lengths must be multiples of 64).
    pub(crate) fn update(&mut self, a: &[u8], b: &[u8]) {
        debug_assert!(a.len().is_multiple_of(64) && b.len().is_multiple_of(64));
        #[cfg(target_arch = "x86_64")]
        if let Some((states, lens)) = &mut self.lanes {
            let (a, b) = (a.as_chunks::<64>().0, b.as_chunks::<64>().0);
            let n = a.len().min(b.len());
            let [sa, sb] = states;
            // SAFETY: `lanes` is set only where `available()` said yes.
            unsafe { x86::compress2(sa, &a[..n], sb, &b[..n]) };
            // The longer one's rest, the other lane idle.
            let (state, rest) = if a.len() > n { (&mut *sa, &a[n..]) } else { (&mut *sb, &b[n..]) };
            if !rest.is_empty() {
                // SAFETY: as above.
                unsafe { x86::compress1(state, rest) };
            }
            lens[0] += (a.len() * 64) as u64;
            lens[1] += (b.len() * 64) as u64;
            return;
        }
        self.ring[0].update(a);
        self.ring[1].update(b);
    }

    /// The digest of stream `k` (0 or 1) once `tail` (any length) is added;
    /// the stream then starts again, empty.
    pub(crate) fn finish(&mut self, k: usize, tail: &[u8]) -> [u8; 32] {
        #[cfg(target_arch = "x86_64")]
        if let Some((states, lens)) = &mut self.lanes {
            let whole = tail.len() / 64 * 64;
            let (blocks, rest) = tail.split_at(whole);
            let mut state = states[k];
            let blocks = blocks.as_chunks::<64>().0;
            // SAFETY: as in `update`.
            unsafe { x86::compress1(&mut state, blocks) };
            let (buf, n) = padding(rest, lens[k] + tail.len() as u64);
            let last = &buf.as_chunks::<64>().0[..n];
            // SAFETY: as above.
            unsafe { x86::compress1(&mut state, last) };
            states[k] = INITIAL;
            lens[k] = 0;
            let mut out = [0u8; 32];
            for (o, w) in out.chunks_exact_mut(4).zip(state) {
                o.copy_from_slice(&w.to_be_bytes());
            }
            return out;
        }
        let mut ctx = std::mem::replace(&mut self.ring[k], ring::digest::Context::new(&ring::digest::SHA256));
        ctx.update(tail);
        crate::fs::hash::finish(ctx.finish())
    }
}

/// The state of SHA-256 before any input (FIPS 180-4, 5.3.3).
#[cfg(target_arch = "x86_64")]
const INITIAL: [u32; 8] =
    [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];

/// The final one or two blocks of a message whose last `tail.len() < 64`
/// bytes are `tail` and whose whole length is `len` bytes: the tail, the
/// 0x80 marker, zeros, and the length in bits, big-endian (FIPS 180-4, 5.1.1).
#[cfg(any(target_arch = "x86_64", test))]
fn padding(tail: &[u8], len: u64) -> ([u8; 128], usize) {
    debug_assert!(tail.len() < 64);
    let mut buf = [0u8; 128];
    buf[..tail.len()].copy_from_slice(tail);
    buf[tail.len()] = 0x80;
    let blocks = if tail.len() < 56 { 1 } else { 2 };
    buf[blocks * 64 - 8..blocks * 64].copy_from_slice(&len.wrapping_mul(8).to_be_bytes());
    (buf, blocks)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{padding, Found, Input, Lane};

    /// The round constants (FIPS 180-4, 4.2.2).
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    /// Whether this CPU has what [`compress2`] uses.
    pub(crate) fn available() -> bool {
        is_x86_feature_detected!("sha") && is_x86_feature_detected!("sse4.1") && is_x86_feature_detected!("ssse3")
    }

    /// Hashes the padded tail of a lane and returns its digest and buffer.
    fn finish(mut lane: Lane<'_>) -> ((usize, [u8; 32]), Vec<u8>) {
        let len = lane.input.len();
        let (state, tail) = lane.parts();
        let (buf, blocks) = padding(tail, len);
        let blocks = &buf.as_chunks::<64>().0[..blocks];
        // SAFETY: `worker` runs only where `available()` said yes.
        unsafe { compress1(state, blocks) };
        let mut out = [0u8; 32];
        for (o, w) in out.chunks_exact_mut(4).zip(lane.state) {
            o.copy_from_slice(&w.to_be_bytes());
        }
        ((lane.index, out), lane.buf)
    }

    /// Hashes inputs from `take`, two at a time.
    pub(super) fn worker(
        inputs: &[Input<'_>],
        take: &(dyn Fn() -> Option<usize> + Sync),
        stop: &(dyn Fn() -> bool + Sync),
        progress: &(dyn Fn(u64) + Sync),
    ) -> std::io::Result<Found> {
        let mut done = Vec::new();
        let mut lanes: [Option<Lane<'_>>; 2] = [None, None];
        let mut spare: Vec<Vec<u8>> = Vec::new();
        loop {
            if stop() {
                return Ok(done);
            }
            for slot in &mut lanes {
                // A lane with less than a block at hand reads more, or is
                // finished and takes the next input.
                loop {
                    if let Some(l) = slot {
                        if l.full_blocks() > 0 {
                            break;
                        }
                        if l.refill()? {
                            continue;
                        }
                    }
                    if let Some(l) = slot.take() {
                        let tail = (l.end - l.pos) as u64;
                        let (digest, buf) = finish(l);
                        progress(tail);
                        done.push(digest);
                        spare.push(buf);
                    }
                    match take() {
                        Some(i) => *slot = Some(Lane::new(i, inputs[i], spare.pop().unwrap_or_default())),
                        None => break,
                    }
                }
            }
            match &mut lanes {
                [Some(a), Some(b)] => {
                    // Both lanes advance by as many blocks as the shorter has.
                    let n = a.full_blocks().min(b.full_blocks()) * 64;
                    let ((sa, da), (sb, db)) = (a.parts(), b.parts());
                    let (ablocks, bblocks) = (da[..n].as_chunks::<64>().0, db[..n].as_chunks::<64>().0);
                    // SAFETY: `worker` runs only where `available()` said yes.
                    unsafe { compress2(sa, ablocks, sb, bblocks) };
                    a.pos += n;
                    b.pos += n;
                    progress(2 * n as u64);
                }
                [Some(l), None] | [None, Some(l)] => {
                    // The last input: one stream, on one lane.
                    let n = l.full_blocks() * 64;
                    let (state, data) = l.parts();
                    let blocks = data[..n].as_chunks::<64>().0;
                    // SAFETY: as above.
                    unsafe { compress1(state, blocks) };
                    l.pos += n;
                    progress(n as u64);
                }
                [None, None] => return Ok(done),
            }
        }
    }

    /// Loads a chaining value into the two registers the round instruction
    /// takes (`ABEF`, `CDGH`).
    ///
    /// # Safety
    /// The CPU must have SSSE3 and SSE4.1.
    #[inline]
    #[target_feature(enable = "sse2,ssse3,sse4.1")]
    unsafe fn load(state: &[u32; 8]) -> (__m128i, __m128i) {
        // SAFETY: unaligned 16-byte loads from a 32-byte array.
        unsafe {
            let p = state.as_ptr().cast::<__m128i>();
            let dcba = _mm_loadu_si128(p);
            let hgfe = _mm_loadu_si128(p.add(1));
            let cdab = _mm_shuffle_epi32(dcba, 0xB1);
            let efgh = _mm_shuffle_epi32(hgfe, 0x1B);
            (_mm_alignr_epi8(cdab, efgh, 8), _mm_blend_epi16(efgh, cdab, 0xF0))
        }
    }

    /// The inverse of [`load`].
    ///
    /// # Safety
    /// As [`load`].
    #[inline]
    #[target_feature(enable = "sse2,ssse3,sse4.1")]
    unsafe fn store(state: &mut [u32; 8], abef: __m128i, cdgh: __m128i) {
        // SAFETY: unaligned 16-byte stores into a 32-byte array.
        unsafe {
            let feba = _mm_shuffle_epi32(abef, 0x1B);
            let dchg = _mm_shuffle_epi32(cdgh, 0xB1);
            let p = state.as_mut_ptr().cast::<__m128i>();
            _mm_storeu_si128(p, _mm_blend_epi16(feba, dchg, 0xF0));
            _mm_storeu_si128(p.add(1), _mm_alignr_epi8(dchg, feba, 8));
        }
    }

    /// The 16 message words of a block, big-endian, as four vectors.
    #[inline]
    #[target_feature(enable = "sse2,ssse3")]
    fn words(block: &[u8; 64], swap: __m128i) -> [__m128i; 4] {
        // SAFETY: 16-byte unaligned loads within a 64-byte block.
        let at = |i: usize| unsafe { _mm_loadu_si128(block.as_ptr().add(16 * i).cast::<__m128i>()) };
        [0, 1, 2, 3].map(|i| _mm_shuffle_epi8(at(i), swap))
    }

    /// The next 4 message words from the last 16 (`w`, oldest first):
    /// `w` moved along by one, the new words last.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3")]
    fn schedule(w: [__m128i; 4]) -> [__m128i; 4] {
        let sigma0 = _mm_sha256msg1_epu32(w[0], w[1]);
        let w7 = _mm_alignr_epi8(w[3], w[2], 4);
        [w[1], w[2], w[3], _mm_sha256msg2_epu32(_mm_add_epi32(sigma0, w7), w[3])]
    }

    /// Runs the SHA-256 compression function over `a` into `sa` and over
    /// `b` into `sb`, interleaved; `a` and `b` have the same number of blocks.
    ///
    /// # Safety
    /// The CPU must have the SHA extensions, SSSE3 and SSE4.1 ([`available`]).
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn compress2(sa: &mut [u32; 8], a: &[[u8; 64]], sb: &mut [u32; 8], b: &[[u8; 64]]) {
        debug_assert_eq!(a.len(), b.len());
        // Message words are big-endian.
        let swap = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
        // SAFETY: `compress2`'s own features include theirs.
        let ((mut abef0, mut cdgh0), (mut abef1, mut cdgh1)) = unsafe { (load(sa), load(sb)) };
        for (ba, bb) in a.iter().zip(b) {
            let saved = (abef0, cdgh0, abef1, cdgh1);
            let (mut w0, mut w1) = (words(ba, swap), words(bb, swap));
            // 16 steps of 4 rounds; from the fifth, the schedule makes the
            // next 4 message words from the last 16 (`w`, oldest first,
            // moved along by value so that they stay in registers).
            for r in 0..16 {
                if r >= 4 {
                    w0 = schedule(w0);
                    w1 = schedule(w1);
                }
                // SAFETY: K has 64 words; 4 * r + 3 < 64.
                let k = unsafe { _mm_loadu_si128(K.as_ptr().add(4 * r).cast::<__m128i>()) };
                let j = if r >= 4 { 3 } else { r };
                let (t0, t1) = (_mm_add_epi32(w0[j], k), _mm_add_epi32(w1[j], k));
                cdgh0 = _mm_sha256rnds2_epu32(cdgh0, abef0, t0);
                cdgh1 = _mm_sha256rnds2_epu32(cdgh1, abef1, t1);
                abef0 = _mm_sha256rnds2_epu32(abef0, cdgh0, _mm_shuffle_epi32(t0, 0x0E));
                abef1 = _mm_sha256rnds2_epu32(abef1, cdgh1, _mm_shuffle_epi32(t1, 0x0E));
            }
            abef0 = _mm_add_epi32(abef0, saved.0);
            cdgh0 = _mm_add_epi32(cdgh0, saved.1);
            abef1 = _mm_add_epi32(abef1, saved.2);
            cdgh1 = _mm_add_epi32(cdgh1, saved.3);
        }
        // SAFETY: as for `load`.
        unsafe {
            store(sa, abef0, cdgh0);
            store(sb, abef1, cdgh1);
        }
    }

    /// [`compress2`] for one stream: a lane running alone (the last input,
    /// a tail) goes at the speed of one stream, not at half of two.
    ///
    /// # Safety
    /// As [`compress2`].
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn compress1(sa: &mut [u32; 8], a: &[[u8; 64]]) {
        let swap = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
        // SAFETY: `compress1`'s own features include `load`'s.
        let (mut abef, mut cdgh) = unsafe { load(sa) };
        for block in a {
            let saved = (abef, cdgh);
            let mut w = words(block, swap);
            // As in `compress2`, one lane.
            for r in 0..16 {
                if r >= 4 {
                    w = schedule(w);
                }
                // SAFETY: K has 64 words; 4 * r + 3 < 64.
                let k = unsafe { _mm_loadu_si128(K.as_ptr().add(4 * r).cast::<__m128i>()) };
                let t = _mm_add_epi32(w[if r >= 4 { 3 } else { r }], k);
                cdgh = _mm_sha256rnds2_epu32(cdgh, abef, t);
                abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(t, 0x0E));
            }
            abef = _mm_add_epi32(abef, saved.0);
            cdgh = _mm_add_epi32(cdgh, saved.1);
        }
        // SAFETY: as for `load`.
        unsafe { store(sa, abef, cdgh) };
    }
}

#[cfg(test)]
mod tests;
