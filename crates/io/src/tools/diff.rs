//! What differs between two open files or sharded checkpoints, across
//! formats: tensors added, removed, retyped or reshaped, values and
//! metadata. `deathtensors diff` prints it; the Python `diff` returns it.

use std::collections::{BTreeSet, HashMap, HashSet};

use deathtensors_format::{Dtype, Metadata, TensorInfo};

use crate::error::Result;
use crate::file::reader::Reader;
use crate::tools::copy::COPY_CHUNK;
use crate::tools::tensor_set::TensorSet;
use crate::{fs::par, tools::values};

/// Bytes of a tensor one thread compares at a time.
const UNIT: u64 = 64 << 20;

/// Elements decoded at a time when comparing with a tolerance.
const BATCH: usize = 4096;

/// How two values are compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Compare {
    /// Byte for byte.
    Exact,
    /// |a - b| <= atol + rtol * |b|, as `numpy.isclose`, NaNs equal to NaNs
    /// (sub-byte dtypes are compared byte for byte).
    Close {
        /// The absolute tolerance.
        atol: f64,
        /// The relative tolerance.
        rtol: f64,
    },
}

impl Compare {
    /// The comparison of the tolerances a caller gave: `Exact` without
    /// either, else `Close` with the other one 0.
    ///
    /// # Errors
    /// A message for a tolerance that is negative or not a number.
    pub fn tolerances(atol: Option<f64>, rtol: Option<f64>) -> std::result::Result<Compare, String> {
        if atol.is_none() && rtol.is_none() {
            return Ok(Compare::Exact);
        }
        let (atol, rtol) = (atol.unwrap_or(0.0), rtol.unwrap_or(0.0));
        if !(atol >= 0.0 && rtol >= 0.0) {
            return Err(format!("atol and rtol must be non-negative numbers, got atol={atol}, rtol={rtol}"));
        }
        Ok(Compare::Close { atol, rtol })
    }
}

impl Compare {
    fn close(self, a: f64, b: f64) -> bool {
        match self {
            Compare::Exact => a.to_bits() == b.to_bits(),
            Compare::Close { atol, rtol } => {
                a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= atol + rtol * b.abs()
            }
        }
    }
}

/// How the values of one tensor present in both files compare.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ValueDiff {
    /// Elements that differ (for sub-byte dtypes: bytes).
    pub differing: u64,
    /// The largest |a - b| over differing finite values, if any.
    pub max_abs_diff: Option<f64>,
}

impl ValueDiff {
    fn merge(&mut self, other: ValueDiff) {
        self.differing += other.differing;
        self.max_abs_diff = match (self.max_abs_diff, other.max_abs_diff) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

/// A metadata key whose value differs: `None` where it is absent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataChange {
    /// The key.
    pub key: String,
    /// Its value in the first file.
    pub a: Option<String>,
    /// Its value in the second file.
    pub b: Option<String>,
}

/// What differs between two files. Names are in the first file's order
/// (added ones in the second's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diff {
    /// Tensors only in the first file.
    pub removed: Vec<String>,
    /// Tensors only in the second file.
    pub added: Vec<String>,
    /// Tensors in both whose dtype or shape differs (values not compared).
    pub retyped: Vec<String>,
    /// Tensors in both, same dtype and shape, whose values differ.
    pub values: Vec<(String, ValueDiff)>,
    /// Changes of the global metadata.
    pub metadata: Vec<MetadataChange>,
    /// Changes of the metadata of tensors in both files.
    pub tensor_metadata: Vec<(String, Vec<MetadataChange>)>,
}

impl Diff {
    /// Whether the two files hold the same tensors, values and metadata.
    pub fn identical(&self) -> bool {
        self.removed.is_empty()
            && self.added.is_empty()
            && self.retyped.is_empty()
            && self.values.is_empty()
            && self.metadata.is_empty()
            && self.tensor_metadata.is_empty()
    }
}

/// Differences of two metadata maps: added, removed and changed keys.
fn metadata_diff(a: &Metadata, b: &Metadata) -> Vec<MetadataChange> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| MetadataChange { key: k.clone(), a: a.get(k).cloned(), b: b.get(k).cloned() })
        .collect()
}

/// A tensor and the reader that holds it.
type Held<'a> = (&'a TensorInfo, &'a Reader);

/// Each tensor of `set` with its reader, in order.
fn held(set: &dyn TensorSet) -> Result<Vec<Held<'_>>> {
    set.names().into_iter().map(|n| set.reader_of(n).and_then(|r| Ok((r.tensor(n)?.info, r)))).collect()
}

/// Compares two files (or sharded checkpoints): their tensors by name, the values of those of the
/// same dtype and shape (streaming, in units spread over all cores), and
/// their metadata. `progress` is told the bytes compared, from any thread.
///
/// # Errors
/// `NoKey` for a sealed file opened without its key; the reads' errors.
pub fn diff(a: &dyn TensorSet, b: &dyn TensorSet, compare: Compare, progress: impl Fn(u64) + Sync) -> Result<Diff> {
    a.check_listed()?;
    b.check_listed()?;
    let (ha, hb) = (held(a)?, held(b)?);
    let in_a: HashSet<&str> = ha.iter().map(|(t, _)| t.name.as_str()).collect();
    let in_b: HashMap<&str, Held<'_>> = hb.iter().map(|&(t, r)| (t.name.as_str(), (t, r))).collect();
    let removed =
        ha.iter().filter(|(t, _)| !in_b.contains_key(t.name.as_str())).map(|(t, _)| t.name.to_string()).collect();
    let added = hb.iter().filter(|(t, _)| !in_a.contains(t.name.as_str())).map(|(t, _)| t.name.to_string()).collect();
    let both: Vec<(Held<'_>, Held<'_>)> =
        ha.iter().filter_map(|&(ta, ra)| in_b.get(ta.name.as_str()).map(|&held_b| ((ta, ra), held_b))).collect();
    let same = |ta: &TensorInfo, tb: &TensorInfo| ta.dtype == tb.dtype && ta.shape == tb.shape;
    let retyped =
        both.iter().filter(|((ta, _), (tb, _))| !same(ta, tb)).map(|((ta, _), _)| ta.name.to_string()).collect();
    let comparable: Vec<(Held<'_>, Held<'_>)> =
        both.iter().copied().filter(|((ta, _), (tb, _))| same(ta, tb)).collect();
    let compared = compare_values(&comparable, compare, progress)?;
    let values = comparable
        .iter()
        .zip(compared)
        .filter(|(_, v)| v.differing > 0)
        .map(|(((t, _), _), v)| (t.name.to_string(), v))
        .collect();
    let metadata = metadata_diff(&a.global_metadata(), &b.global_metadata());
    let tensor_metadata = both
        .iter()
        .map(|((ta, _), (tb, _))| (ta.name.to_string(), metadata_diff(&ta.metadata, &tb.metadata)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    Ok(Diff { removed, added, retyped, values, metadata, tensor_metadata })
}

fn compare_values(
    tensors: &[(Held<'_>, Held<'_>)],
    compare: Compare,
    progress: impl Fn(u64) + Sync,
) -> Result<Vec<ValueDiff>> {
    let mut units = Vec::new();
    for (i, ((t, _), _)) in tensors.iter().enumerate() {
        let size = values::element_size(t.dtype).unwrap_or(1) as u64;
        units.extend(par::ranges(t.byte_len(), UNIT, size).into_iter().map(|r| (i, r)));
    }
    let partial = par::map(units.len(), |u| {
        let (i, (start, end)) = units[u];
        let ((t, a), (_, b)) = tensors[i];
        let v = compare_unit(a, b, t, start, end, compare)?;
        progress(end - start);
        Ok(v)
    })?;
    let mut all = vec![ValueDiff::default(); tensors.len()];
    for ((i, _), v) in units.iter().zip(partial) {
        all[*i].merge(v);
    }
    Ok(all)
}

fn compare_unit(a: &Reader, b: &Reader, t: &TensorInfo, start: u64, end: u64, compare: Compare) -> Result<ValueDiff> {
    let size = values::element_size(t.dtype);
    let step = size.unwrap_or(1);
    let chunk = (COPY_CHUNK / step * step) as u64;
    let len = chunk.min(end - start) as usize;
    let (mut buf_a, mut buf_b) = (vec![0u8; len], vec![0u8; len]);
    let mut result = ValueDiff::default();
    let mut at = start;
    while at < end {
        let n = (end - at).min(chunk) as usize;
        a.read_range_into(&t.name, at, &mut buf_a[..n])?;
        b.read_range_into(&t.name, at, &mut buf_b[..n])?;
        at += n as u64;
        let (ca, cb) = (&buf_a[..n], &buf_b[..n]);
        // Exactly equal bytes are equal under any tolerance.
        if ca == cb {
            continue;
        }
        match size {
            None => result.differing += ca.iter().zip(cb).filter(|(x, y)| x != y).count() as u64,
            Some(size) => result.merge(compare_elements(t.dtype, size, ca, cb, compare)),
        }
    }
    Ok(result)
}

/// Compares whole elements of a whole-byte dtype.
fn compare_elements(dtype: Dtype, size: usize, a: &[u8], b: &[u8], compare: Compare) -> ValueDiff {
    let parts = values::components(dtype);
    let mut result = ValueDiff::default();
    let (mut va, mut vb) = (Vec::with_capacity(BATCH * parts), Vec::with_capacity(BATCH * parts));
    for (ba, bb) in a.chunks(BATCH * size).zip(b.chunks(BATCH * size)) {
        if ba == bb {
            continue;
        }
        va.clear();
        vb.clear();
        values::decode(dtype, ba, &mut va);
        values::decode(dtype, bb, &mut vb);
        for (k, (ea, eb)) in ba.chunks_exact(size).zip(bb.chunks_exact(size)).enumerate() {
            let pa = &va[k * parts..(k + 1) * parts];
            let pb = &vb[k * parts..(k + 1) * parts];
            let differs = match compare {
                Compare::Exact => ea != eb,
                Compare::Close { .. } => pa.iter().zip(pb).any(|(&x, &y)| !compare.close(x, y)),
            };
            if !differs {
                continue;
            }
            result.differing += 1;
            for (&x, &y) in pa.iter().zip(pb) {
                let d = (x - y).abs();
                if d.is_finite() {
                    result.max_abs_diff = Some(result.max_abs_diff.map_or(d, |m: f64| m.max(d)));
                }
            }
        }
    }
    result
}
