//! A tensor's bytes as the writers take them: one contiguous slice, or
//! equal runs at a fixed stride (a view of rows of a larger tensor, such as
//! a column tile of a matrix), written and hashed from where they are,
//! without a contiguous copy first.

use std::borrow::Cow;
use std::io;

use crate::fs::pread::ReadAt;

/// Equal runs of bytes at a fixed stride in one slice: run `k` is
/// `span[k * stride..k * stride + run]`. The bytes it stands for are the
/// runs in order.
#[derive(Clone, Copy)]
pub struct Strided<'a> {
    span: &'a [u8],
    run: usize,
    stride: usize,
    count: usize,
}

impl std::fmt::Debug for Strided<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Strided")
            .field("run", &self.run)
            .field("stride", &self.stride)
            .field("count", &self.count)
            .finish()
    }
}

impl<'a> Strided<'a> {
    /// `count` runs of `run` bytes, `stride` bytes apart, in `span`; `None`
    /// if they do not fit in `span` or overlap (`stride < run` with more
    /// than one run).
    #[must_use]
    pub fn new(span: &'a [u8], run: usize, stride: usize, count: usize) -> Option<Strided<'a>> {
        let end = Strided::span_len(run, stride, count)?;
        (end <= span.len()).then_some(Strided { span, run, stride, count })
    }

    /// The bytes from the start of the first of `count` runs of `run` bytes,
    /// `stride` apart, to the end of the last; `None` if that overflows or
    /// the runs overlap (`stride < run` with more than one run).
    #[must_use]
    pub fn span_len(run: usize, stride: usize, count: usize) -> Option<usize> {
        match count {
            0 => Some(0),
            1 => Some(run),
            _ if stride < run => None,
            n => (n - 1).checked_mul(stride)?.checked_add(run),
        }
    }

    /// The number of bytes the runs hold.
    #[must_use]
    pub fn len(&self) -> usize {
        self.run * self.count
    }

    /// Whether there are no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The length of each run (for the x86_64 SHA-256 lanes).
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn run_len(&self) -> usize {
        self.run
    }

    /// Run `k` (`k < count`; for the x86_64 SHA-256 lanes).
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn run(&self, k: usize) -> &'a [u8] {
        &self.span[k * self.stride..k * self.stride + self.run]
    }

    /// The runs, in order.
    pub fn runs(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        let (span, run, stride) = (self.span, self.run, self.stride);
        (0..if run == 0 { 0 } else { self.count }).map(move |k| &span[k * stride..k * stride + run])
    }
}

/// Hashing reads a strided tensor as it reads a file: in chunks, each
/// gathered from the runs into the hasher's buffer.
impl ReadAt for Strided<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.len() as u64) {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of a strided tensor"));
        }
        let mut at = offset as usize;
        let mut out = &mut buf[..];
        while !out.is_empty() {
            let (k, within) = (at / self.run, at % self.run);
            let n = (self.run - within).min(out.len());
            let src = k * self.stride + within;
            out[..n].copy_from_slice(&self.span[src..src + n]);
            out = &mut out[n..];
            at += n;
        }
        Ok(())
    }
}

/// A tensor's bytes for [`crate::save_views`]: a slice, or strided runs.
#[derive(Clone, Copy, Debug)]
pub enum TensorBytes<'a> {
    /// The bytes, contiguous.
    Contiguous(&'a [u8]),
    /// Equal runs at a stride (rows of a view).
    Strided(Strided<'a>),
}

impl<'a> TensorBytes<'a> {
    /// The number of bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            TensorBytes::Contiguous(b) => b.len(),
            TensorBytes::Strided(s) => s.len(),
        }
    }

    /// Whether there are no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as one slice, if they are contiguous.
    #[must_use]
    pub fn as_contiguous(&self) -> Option<&'a [u8]> {
        match self {
            TensorBytes::Contiguous(b) => Some(b),
            TensorBytes::Strided(_) => None,
        }
    }

    /// The runs the bytes are, in order (one for contiguous bytes).
    pub fn runs(&self) -> Box<dyn Iterator<Item = &'a [u8]> + '_> {
        match self {
            TensorBytes::Contiguous(b) => Box::new(std::iter::once(*b)),
            TensorBytes::Strided(s) => Box::new(s.runs()),
        }
    }

    /// The bytes as one slice: borrowed when contiguous, else copied into
    /// one buffer (for writers that need a slice: compression, encryption).
    #[must_use]
    pub fn to_cow(&self) -> Cow<'a, [u8]> {
        match self {
            TensorBytes::Contiguous(b) => Cow::Borrowed(b),
            TensorBytes::Strided(s) => {
                let mut out = Vec::with_capacity(s.len());
                for run in s.runs() {
                    out.extend_from_slice(run);
                }
                Cow::Owned(out)
            }
        }
    }
}

impl<'a> From<&'a [u8]> for TensorBytes<'a> {
    fn from(b: &'a [u8]) -> TensorBytes<'a> {
        TensorBytes::Contiguous(b)
    }
}

impl<'a> From<&'a Vec<u8>> for TensorBytes<'a> {
    fn from(b: &'a Vec<u8>) -> TensorBytes<'a> {
        TensorBytes::Contiguous(b)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for TensorBytes<'a> {
    fn from(b: &'a [u8; N]) -> TensorBytes<'a> {
        TensorBytes::Contiguous(b)
    }
}

impl<'a> From<Strided<'a>> for TensorBytes<'a> {
    fn from(s: Strided<'a>) -> TensorBytes<'a> {
        TensorBytes::Strided(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_reads_gather_the_view() {
        let span: Vec<u8> = (0..40).collect();
        // Rows of 10, the middle 4 bytes of each.
        let s = Strided::new(&span[3..], 4, 10, 4).unwrap();
        let want: Vec<u8> = (0..4u8).flat_map(|r| (3 + r * 10..7 + r * 10).collect::<Vec<_>>()).collect();
        assert_eq!(s.runs().flatten().copied().collect::<Vec<_>>(), want);
        assert_eq!(TensorBytes::from(s).to_cow(), want);
        for offset in 0..want.len() {
            for len in 0..=want.len() - offset {
                let mut buf = vec![0; len];
                s.read_exact_at(&mut buf, offset as u64).unwrap();
                assert_eq!(buf, want[offset..offset + len], "offset {offset} len {len}");
            }
        }
        let mut buf = [0; 2];
        assert_eq!(s.read_exact_at(&mut buf, 15).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn runs_that_do_not_fit_or_overlap_are_refused() {
        let span = [0u8; 40];
        assert!(Strided::new(&span, 4, 10, 4).is_some()); // last run ends at 34
        assert!(Strided::new(&span, 10, 10, 4).is_some()); // exactly the span
        assert!(Strided::new(&span, 11, 10, 4).is_none()); // runs overlap
        assert!(Strided::new(&span, 4, 10, 5).is_none()); // past the end
        assert!(Strided::new(&span, 4, usize::MAX, 3).is_none()); // overflow
        assert!(Strided::new(&span, 50, 0, 1).is_none());
        assert!(Strided::new(&span, 50, 0, 0).unwrap().is_empty());
        assert!(Strided::new(&span, 0, 0, 1000).unwrap().is_empty());
    }
}
