//! A region of a row-major tensor (a start and a length in each dimension)
//! as the contiguous byte runs of the tensor it covers, in order: what a
//! reader copies to gather a slice of a stored tensor into a contiguous
//! buffer, one pass over the tensor's bytes.
//!
//! Trailing dimensions the region covers whole merge into each run, so a
//! block of whole rows is one run, and half of every row of a matrix is one
//! run a row.

use alloc::format;
use alloc::vec::Vec;

use crate::{Dtype, Error, ErrorKind, Result};

/// The runs of a region: [`Region::count`] runs of [`Region::run_len`]
/// bytes each, the `k`-th (in row-major order of the region) at the byte of
/// the tensor that the `k`-th item of [`Region::runs`] gives, and at
/// `k * run_len` of a contiguous buffer of the region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Bytes of one run.
    run_len: u64,
    /// Number of runs.
    count: u64,
    /// Byte offset in the tensor of the first run.
    base: u64,
    /// Per outer dimension (those before the run's): its length in the
    /// region and its stride in the tensor, in bytes.
    outer: Vec<(u64, u64)>,
}

fn invalid(message: alloc::string::String) -> Error {
    Error::new(ErrorKind::InvalidRegion { message: message.into() })
}

impl Region {
    /// The region `start[d] .. start[d] + len[d]` of each dimension `d` of a
    /// tensor of `dtype` and `shape`.
    ///
    /// # Errors
    /// `InvalidRegion` if `start` or `len` has another number of dimensions
    /// than `shape`, if the region passes the end of a dimension, or if it
    /// splits the bytes of a sub-byte dtype; `Overflow` for sizes past `u64`.
    pub fn new(dtype: Dtype, shape: &[u64], start: &[u64], len: &[u64]) -> Result<Region> {
        if start.len() != shape.len() || len.len() != shape.len() {
            return Err(invalid(format!(
                "the tensor has {} dimensions, the region {} starts and {} lengths",
                shape.len(),
                start.len(),
                len.len()
            )));
        }
        for (d, ((&s, &l), &n)) in start.iter().zip(len).zip(shape).enumerate() {
            if s.checked_add(l).is_none_or(|end| end > n) {
                return Err(invalid(format!("dimension {d} is {n} long, the region takes {l} from {s}")));
            }
        }
        // Dimensions from `cut` on are taken whole: they merge into each run.
        let mut cut = shape.len();
        while cut > 0 && start[cut - 1] == 0 && len[cut - 1] == shape[cut - 1] {
            cut -= 1;
        }
        let bits = dtype.bits();
        let whole_elems = shape[cut..]
            .iter()
            .try_fold(1u64, |a, &n| a.checked_mul(n))
            .ok_or_else(|| Error::overflow("region size"))?;
        // The bytes (in bits) of one step along each dimension, innermost last.
        let mut strides = Vec::with_capacity(cut);
        let mut step = whole_elems.checked_mul(bits).ok_or_else(|| Error::overflow("region size"))?;
        for d in (0..cut).rev() {
            strides.push(step);
            step = step.checked_mul(shape[d]).ok_or_else(|| Error::overflow("region size"))?;
        }
        strides.reverse();
        let bytes = |b: u64, what: &str| -> Result<u64> {
            if !b.is_multiple_of(8) {
                return Err(invalid(format!("{what} splits the bytes of {}", dtype.name())));
            }
            Ok(b / 8)
        };
        if cut == 0 {
            // The whole tensor, or a tensor of no elements.
            let run_len = bytes(step, "the tensor")?;
            return Ok(Region { run_len, count: u64::from(run_len > 0), base: 0, outer: Vec::new() });
        }
        let inner = cut - 1;
        let run_len =
            bytes(len[inner].checked_mul(strides[inner]).ok_or_else(|| Error::overflow("region size"))?, "the region")?;
        let mut base = 0u64;
        let mut count = 1u64;
        let mut outer = Vec::with_capacity(inner);
        for d in 0..cut {
            let stride = bytes(strides[d], "the region")?;
            base = start[d]
                .checked_mul(stride)
                .and_then(|o| o.checked_add(base))
                .ok_or_else(|| Error::overflow("region offset"))?;
            if d < inner {
                count = count.checked_mul(len[d]).ok_or_else(|| Error::overflow("region size"))?;
                outer.push((len[d], stride));
            }
        }
        if run_len == 0 {
            count = 0;
        }
        Ok(Region { run_len, count, base, outer })
    }

    /// Bytes of each run.
    pub fn run_len(&self) -> u64 {
        self.run_len
    }

    /// Number of runs (0 for an empty region).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Bytes of the region: those of a contiguous buffer holding it.
    pub fn byte_len(&self) -> u64 {
        // Cannot overflow: the region lies within the tensor.
        self.run_len * self.count
    }

    /// The tensor's bytes from the first run's start to the last run's end,
    /// as `[start, end)` (empty for an empty region).
    pub fn span(&self) -> (u64, u64) {
        if self.count == 0 {
            return (0, 0);
        }
        let last = self.outer.iter().map(|&(len, stride)| (len - 1) * stride).sum::<u64>();
        (self.base, self.base + last + self.run_len)
    }

    /// Byte offsets in the tensor of the runs, in order (ascending).
    pub fn runs(&self) -> Runs<'_> {
        Runs { region: self, index: alloc::vec![0; self.outer.len()], next: self.base, left: self.count }
    }
}

/// The start of each run of a [`Region`], in order.
#[derive(Clone, Debug)]
pub struct Runs<'a> {
    region: &'a Region,
    /// The run's index in each outer dimension.
    index: Vec<u64>,
    next: u64,
    left: u64,
}

impl Iterator for Runs<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.next;
        // Advance the innermost outer index, carrying outwards.
        for (i, &(len, stride)) in self.index.iter_mut().zip(&self.region.outer).rev() {
            *i += 1;
            self.next += stride;
            if *i < len {
                break;
            }
            self.next -= len * stride;
            *i = 0;
        }
        Some(at)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.left).unwrap_or(usize::MAX);
        (n, usize::try_from(self.left).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn runs(r: &Region) -> Vec<u64> {
        r.runs().collect()
    }

    /// The region's bytes gathered from a tensor whose byte `i` is `i`,
    /// element by element: what the runs must produce.
    fn gather_naive(shape: &[u64], start: &[u64], len: &[u64], elem: u64) -> Vec<u64> {
        let n: u64 = len.iter().product();
        let mut out = Vec::new();
        for flat in 0..n {
            let (mut rest, mut off, mut stride) = (flat, 0, elem);
            for d in (0..shape.len()).rev() {
                off += (start[d] + rest % len[d]) * stride;
                rest /= len[d];
                stride *= shape[d];
            }
            out.extend(off..off + elem);
        }
        out
    }

    fn gather(r: &Region) -> Vec<u64> {
        r.runs().flat_map(|at| at..at + r.run_len()).collect()
    }

    #[test]
    fn whole_rows_are_one_run() {
        let r = Region::new(Dtype::F32, &[8, 4], &[2, 0], &[3, 4]).unwrap();
        assert_eq!((r.run_len(), r.count(), r.span()), (48, 1, (32, 80)));
        assert_eq!(runs(&r), vec![32]);
    }

    #[test]
    fn a_column_band_is_a_run_a_row() {
        let r = Region::new(Dtype::F32, &[3, 4], &[0, 2], &[3, 2]).unwrap();
        assert_eq!((r.run_len(), r.count(), r.byte_len()), (8, 3, 24));
        assert_eq!(runs(&r), vec![8, 24, 40]);
        assert_eq!(r.span(), (8, 48));
    }

    #[test]
    fn matches_an_element_by_element_gather() {
        let cases: &[(&[u64], &[u64], &[u64])] = &[
            (&[4, 5, 6], &[1, 2, 3], &[2, 3, 3]),
            (&[4, 5, 6], &[0, 0, 0], &[4, 5, 6]),
            (&[4, 5, 6], &[1, 0, 0], &[2, 5, 6]),
            (&[4, 5, 6], &[0, 1, 0], &[4, 3, 6]),
            (&[4, 5, 6], &[3, 4, 5], &[1, 1, 1]),
            (&[2, 3, 4, 5], &[1, 0, 2, 0], &[1, 3, 2, 5]),
            (&[7], &[2], &[4]),
            (&[1, 1, 9], &[0, 0, 4], &[1, 1, 5]),
        ];
        for &(shape, start, len) in cases {
            for dtype in [Dtype::U8, Dtype::BF16, Dtype::F64] {
                let r = Region::new(dtype, shape, start, len).unwrap();
                let elem = dtype.bits() / 8;
                assert_eq!(gather(&r), gather_naive(shape, start, len, elem), "{shape:?} {start:?} {len:?} {dtype:?}");
                assert_eq!(r.byte_len(), len.iter().product::<u64>() * elem);
                let (s, e) = r.span();
                assert!(r.runs().all(|at| at >= s && at + r.run_len() <= e));
            }
        }
    }

    #[test]
    fn scalars_and_empty_regions() {
        let r = Region::new(Dtype::F32, &[], &[], &[]).unwrap();
        assert_eq!((runs(&r), r.run_len(), r.span()), (vec![0], 4, (0, 4)));
        let r = Region::new(Dtype::F32, &[3, 4], &[1, 2], &[0, 2]).unwrap();
        assert_eq!((r.count(), r.byte_len(), r.span(), runs(&r)), (0, 0, (0, 0), vec![]));
        let r = Region::new(Dtype::F32, &[3, 4], &[1, 4], &[2, 0]).unwrap();
        assert_eq!((r.count(), r.byte_len()), (0, 0));
        let r = Region::new(Dtype::F32, &[0, 4], &[0, 0], &[0, 4]).unwrap();
        assert_eq!(r.byte_len(), 0);
    }

    #[test]
    fn refuses_what_does_not_fit() {
        let bad = |shape: &[u64], start: &[u64], len: &[u64]| {
            let e = Region::new(Dtype::F32, shape, start, len).unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::InvalidRegion { .. }), "{e}");
            alloc::string::ToString::to_string(&e)
        };
        assert!(bad(&[3, 4], &[0], &[3]).contains("2 dimensions"));
        assert!(bad(&[3, 4], &[0, 3], &[3, 2]).contains("dimension 1 is 4 long"));
        assert!(bad(&[3, 4], &[u64::MAX, 0], &[2, 4]).contains("dimension 0"));
        let e = Region::new(Dtype::F4, &[2, 3], &[0, 1], &[2, 1]).unwrap_err();
        assert!(alloc::string::ToString::to_string(&e).contains("splits the bytes"), "{e}");
        // Whole rows of a sub-byte dtype are fine when they end on bytes.
        assert!(Region::new(Dtype::F4, &[2, 4], &[1, 0], &[1, 4]).is_ok());
    }

    #[test]
    fn huge_shapes_overflow_cleanly() {
        let e = Region::new(Dtype::F64, &[u64::MAX, u64::MAX], &[0, 1], &[1, 1]).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::Overflow { .. }), "{e}");
    }
}
