//! Where tensors sit in the data blob: planning offsets and checking them.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::limits::MAX_ALIGNMENT;
use crate::tensor::{check_name, numel, TensorInfo, TensorSpec};
use crate::{Error, ErrorKind, Limits, Result};

pub(crate) fn check_alignment(alignment: u64) -> Result<u64> {
    if alignment.is_power_of_two() && alignment <= MAX_ALIGNMENT {
        Ok(alignment)
    } else {
        Err(Error::new(ErrorKind::InvalidAlignment(alignment)))
    }
}

/// Rounds `offset` up to a multiple of `alignment` (a power of two).
pub(crate) fn align_up(offset: u64, alignment: u64, what: &'static str) -> Result<u64> {
    let mask = alignment - 1;
    offset.checked_add(mask).map(|v| v & !mask).ok_or_else(|| Error::overflow(what))
}

/// Bytes taken by a tensor of this dtype and shape.
fn tensor_bytes(dtype: crate::Dtype, shape: &[u64]) -> Result<u64> {
    let n = numel(shape).ok_or_else(|| Error::overflow("element count"))?;
    dtype.byte_len(n)
}

/// Assigns offsets to `specs` in order, each tensor at the next multiple of
/// `alignment`.
pub(crate) fn plan(specs: Vec<TensorSpec>, alignment: u64, limits: &Limits) -> Result<Vec<TensorInfo>> {
    plan_stored(specs, alignment, limits, &[])
}

/// [`plan`], with tensor `i` taking `stored[i]` bytes where that is `Some`
/// (a compressed tensor) instead of its dtype and shape's byte length.
pub(crate) fn plan_stored(
    specs: Vec<TensorSpec>,
    alignment: u64,
    limits: &Limits,
    stored: &[Option<u64>],
) -> Result<Vec<TensorInfo>> {
    if specs.len() as u64 > limits.max_tensors {
        return Err(Error::limit("tensor count", specs.len() as u64, limits.max_tensors));
    }
    let mut offset = 0u64;
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let located = |e: Error| e.with_tensor(&spec.name);
        check_name(&spec.name, limits).map_err(located)?;
        if spec.shape.len() as u64 > limits.max_rank {
            return Err(located(Error::limit("tensor rank", spec.shape.len() as u64, limits.max_rank)));
        }
        let raw = tensor_bytes(spec.dtype, &spec.shape).map_err(located)?;
        let len = stored.get(i).copied().flatten().unwrap_or(raw);
        let start = align_up(offset, alignment, "tensor start").map_err(located)?;
        let end = start.checked_add(len).ok_or_else(|| located(Error::overflow("tensor end")))?;
        offset = end;
        out.push(TensorInfo {
            name: spec.name.into(),
            dtype: spec.dtype,
            shape: spec.shape.into(),
            data_offsets: (start, end),
            metadata: spec.metadata,
            sha256: spec.sha256.map(Box::new),
        });
    }
    Ok(out)
}

/// Checks the layout of `tensors` and returns the length of the data blob
/// they describe.
///
/// Sorted by offsets, each tensor must own exactly the bytes its dtype and
/// shape need, start exactly where the canonical layout puts it (the end of
/// the previous tensor rounded up to `alignment`), and so overlap nothing
/// and leave no hole. A compressed tensor (`stored[i]` is `Some`, see
/// `docs/FORMAT.md` section 15) owns its stored length instead.
pub(crate) fn check(tensors: &[TensorInfo], alignment: u64, stored: &[Option<u64>]) -> Result<u64> {
    // Headers written by both formats list tensors in offset order; sort only
    // when they do not. One pass over the entries checks each and the order.
    let mut sorted = true;
    let mut last = (0, 0);
    for (i, t) in tensors.iter().enumerate() {
        let (start, end) = t.data_offsets;
        let located = |e: Error| e.with_tensor(&t.name);
        if end < start {
            return Err(located(Error::new(ErrorKind::OffsetsReversed { start, end })));
        }
        let raw = tensor_bytes(t.dtype, &t.shape).map_err(located)?;
        let expected = stored.get(i).copied().flatten().unwrap_or(raw);
        if end - start != expected {
            return Err(located(Error::new(ErrorKind::ByteLengthMismatch { expected, actual: end - start })));
        }
        sorted &= last <= t.data_offsets;
        last = t.data_offsets;
    }
    let mut order: Vec<u32> = Vec::new();
    if !sorted {
        order = (0..tensors.len() as u32).collect();
        order.sort_unstable_by_key(|&i| tensors[i as usize].data_offsets);
    }
    let nth = |k: usize| -> &TensorInfo {
        if sorted {
            &tensors[k]
        } else {
            &tensors[order[k] as usize]
        }
    };
    let mut prev: Option<&TensorInfo> = None;
    let mut covered = 0u64;
    for k in 0..tensors.len() {
        let t = nth(k);
        let (start, end) = t.data_offsets;
        if start < covered {
            let other = prev.map_or("", |p| p.name.as_str());
            return Err(Error::new(ErrorKind::Overlap { other: other.into() }).with_tensor(&t.name));
        }
        let expected = align_up(covered, alignment, "tensor start").map_err(|e| e.with_tensor(&t.name))?;
        if start != expected {
            return Err(Error::new(ErrorKind::UnexpectedGap { expected, actual: start }).with_tensor(&t.name));
        }
        covered = end;
        prev = Some(t);
    }
    Ok(covered)
}

/// Checks the layout of bintensors' `tensors` and returns the length of the
/// data blob they describe: in header order, each tensor starts where the
/// previous one ended (the first at 0) and owns exactly the bytes its dtype
/// and shape need. bintensors' reader checks the same, in the same order.
pub(crate) fn check_in_order(tensors: &[TensorInfo]) -> Result<u64> {
    let mut covered = 0u64;
    let mut prev: Option<&TensorInfo> = None;
    for t in tensors {
        let (start, end) = t.data_offsets;
        let located = |e: Error| e.with_tensor(&t.name);
        if end < start {
            return Err(located(Error::new(ErrorKind::OffsetsReversed { start, end })));
        }
        if start < covered {
            let other = prev.map_or("", |p| p.name.as_str());
            return Err(located(Error::new(ErrorKind::Overlap { other: other.into() })));
        }
        if start > covered {
            return Err(located(Error::new(ErrorKind::UnexpectedGap { expected: covered, actual: start })));
        }
        let expected = tensor_bytes(t.dtype, &t.shape).map_err(located)?;
        if end - start != expected {
            return Err(located(Error::new(ErrorKind::ByteLengthMismatch { expected, actual: end - start })));
        }
        covered = end;
        prev = Some(t);
    }
    Ok(covered)
}

/// Checks that a data blob of `blob_len` bytes holds exactly the tensors of
/// a header whose layout ends at `data_len`; `outside` is the length of the
/// file's other parts (head, tables, footer), for the file's sizes in the
/// error of a blob cut short.
pub(crate) fn check_blob(tensors: &[TensorInfo], data_len: u64, blob_len: u64, outside: u64) -> Result<()> {
    if blob_len > data_len {
        return Err(Error::new(ErrorKind::UnownedBytes { covered: data_len, data_len: blob_len }));
    }
    if blob_len < data_len {
        // The first tensor (by offset) that does not fit.
        let t = tensors.iter().filter(|t| t.data_offsets.1 > blob_len).min_by_key(|t| t.data_offsets);
        let (name, end) = t.map_or(("", data_len), |t| (t.name.as_str(), t.data_offsets.1));
        let (file_needed, file_len) = (data_len.saturating_add(outside), blob_len.saturating_add(outside));
        return Err(Error::new(ErrorKind::OffsetOutOfBounds { end, data_len: blob_len, file_needed, file_len })
            .with_tensor(name));
    }
    Ok(())
}
