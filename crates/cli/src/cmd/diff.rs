//! `deathtensors diff`: what differs between two files, across formats.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::bail;
use deathtensors_io::format::{Dtype, Metadata, TensorInfo};
use deathtensors_io::Reader;
use serde_json::{json, Value};

use crate::args::DiffArgs;
use crate::exit::ExitCode;
use crate::out::{self, Out};
use crate::{copy, par, progress, values};

/// Bytes of a tensor one thread compares at a time.
const UNIT: u64 = 64 << 20;

/// Elements decoded at a time when comparing with a tolerance.
const BATCH: usize = 4096;

/// How two values are compared.
#[derive(Clone, Copy, Debug)]
enum Compare {
    /// Byte for byte.
    Exact,
    /// |a - b| <= atol + rtol * |b|, as `numpy.isclose`, NaNs equal to NaNs.
    Close { atol: f64, rtol: f64 },
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
#[derive(Clone, Copy, Debug, Default)]
struct Values {
    /// Elements that differ (for sub-byte dtypes compared exactly: bytes).
    differing: u64,
    /// The largest |a - b| over differing finite values, if any.
    max_abs_diff: Option<f64>,
}

impl Values {
    fn merge(&mut self, other: Values) {
        self.differing += other.differing;
        self.max_abs_diff = match (self.max_abs_diff, other.max_abs_diff) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Differences of two metadata maps: added, removed and changed keys.
fn metadata_diff(a: &Metadata, b: &Metadata) -> Vec<(String, Option<String>, Option<String>)> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| ((*k).clone(), a.get(k).cloned(), b.get(k).cloned()))
        .collect()
}

fn metadata_json(changes: &[(String, Option<String>, Option<String>)]) -> Value {
    changes.iter().map(|(k, a, b)| json!({ "key": k, "a": a, "b": b })).collect::<Vec<_>>().into()
}

fn describe_change(key: &str, a: &Option<String>, b: &Option<String>) -> String {
    match (a, b) {
        (None, Some(b)) => format!("{key:?} added: {b:?}"),
        (Some(a), None) => format!("{key:?} removed (was {a:?})"),
        (Some(a), Some(b)) => format!("{key:?}: {a:?} -> {b:?}"),
        (None, None) => key.to_string(),
    }
}

pub fn run(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let compare = match (args.atol, args.rtol) {
        (None, None) => Compare::Exact,
        (atol, rtol) => {
            let (atol, rtol) = (atol.unwrap_or(0.0), rtol.unwrap_or(0.0));
            if !(atol >= 0.0 && rtol >= 0.0) {
                bail!("--atol and --rtol must be non-negative numbers");
            }
            Compare::Close { atol, rtol }
        }
    };
    let a = crate::keys::open(&args.a)?;
    let b = crate::keys::open(&args.b)?;
    let (ha, hb) = (a.header(), b.header());

    let removed: Vec<&TensorInfo> = ha.tensors().iter().filter(|t| hb.get(&t.name).is_none()).collect();
    let added: Vec<&TensorInfo> = hb.tensors().iter().filter(|t| ha.get(&t.name).is_none()).collect();
    let both: Vec<(&TensorInfo, &TensorInfo)> =
        ha.tensors().iter().filter_map(|ta| hb.get(&ta.name).map(|tb| (ta, tb))).collect();
    let retyped: Vec<&(&TensorInfo, &TensorInfo)> =
        both.iter().filter(|(ta, tb)| ta.dtype != tb.dtype || ta.shape != tb.shape).collect();
    let comparable: Vec<&TensorInfo> =
        both.iter().filter(|(ta, tb)| ta.dtype == tb.dtype && ta.shape == tb.shape).map(|(ta, _)| *ta).collect();
    let changed = compare_values(&a, &b, &comparable, compare)?;
    let changed: Vec<(&TensorInfo, Values)> =
        comparable.iter().zip(changed).filter(|(_, v)| v.differing > 0).map(|(t, v)| (*t, v)).collect();
    let empty = Metadata::new();
    let global = metadata_diff(ha.metadata().unwrap_or(&empty), hb.metadata().unwrap_or(&empty));
    let per_tensor: Vec<(&str, Vec<_>)> = both
        .iter()
        .map(|(ta, tb)| (ta.name.as_str(), metadata_diff(&ta.metadata, &tb.metadata)))
        .filter(|(_, d)| !d.is_empty())
        .collect();
    let identical = removed.is_empty()
        && added.is_empty()
        && retyped.is_empty()
        && changed.is_empty()
        && global.is_empty()
        && per_tensor.is_empty();

    let mut out = Out::new();
    if args.json {
        let brief = |t: &TensorInfo| json!({ "name": t.name, "dtype": t.dtype.name(), "shape": t.shape });
        let doc = json!({
            "a": args.a.to_string_lossy(),
            "b": args.b.to_string_lossy(),
            "identical": identical,
            "comparison": match compare {
                Compare::Exact => json!("exact"),
                Compare::Close { atol, rtol } => json!({ "atol": atol, "rtol": rtol }),
            },
            "removed": removed.iter().map(|t| brief(t)).collect::<Vec<_>>(),
            "added": added.iter().map(|t| brief(t)).collect::<Vec<_>>(),
            "dtype_or_shape": retyped.iter().map(|(ta, tb)| json!({
                "name": ta.name,
                "a": { "dtype": ta.dtype.name(), "shape": ta.shape },
                "b": { "dtype": tb.dtype.name(), "shape": tb.shape },
            })).collect::<Vec<_>>(),
            "values": changed.iter().map(|(t, v)| json!({
                "name": t.name,
                "dtype": t.dtype.name(),
                "elements": t.numel(),
                "differing": v.differing,
                "unit": if values::element_size(t.dtype).is_some() { "elements" } else { "bytes" },
                "max_abs_diff": v.max_abs_diff,
            })).collect::<Vec<_>>(),
            "metadata": metadata_json(&global),
            "tensor_metadata": per_tensor.iter().map(|(name, d)| json!({
                "name": name, "changes": metadata_json(d),
            })).collect::<Vec<_>>(),
        });
        out.json(&doc)?;
    } else if identical {
        writeln!(out, "identical: {}, and the same metadata", out::count(ha.len(), "tensor"))?;
    } else {
        writeln!(out, "--- {}", args.a.display())?;
        writeln!(out, "+++ {}", args.b.display())?;
        for t in &removed {
            writeln!(out, "- {}  {} {}", t.name, t.dtype, out::shape(&t.shape))?;
        }
        for t in &added {
            writeln!(out, "+ {}  {} {}", t.name, t.dtype, out::shape(&t.shape))?;
        }
        for (ta, tb) in &retyped {
            let mut what = Vec::new();
            if ta.dtype != tb.dtype {
                what.push(format!("dtype {} -> {}", ta.dtype, tb.dtype));
            }
            if ta.shape != tb.shape {
                what.push(format!("shape {} -> {}", out::shape(&ta.shape), out::shape(&tb.shape)));
            }
            writeln!(out, "~ {}  {}", ta.name, what.join(", "))?;
        }
        for (t, v) in &changed {
            let (unit, total) = match values::element_size(t.dtype) {
                Some(_) => ("elements", t.numel()),
                None => ("bytes", t.byte_len()),
            };
            let max = v.max_abs_diff.map_or(String::new(), |m| format!(", max |a - b| = {}", out::g(m)));
            writeln!(out, "~ {}  values: {} of {total} {unit} differ{max}", t.name, v.differing)?;
        }
        for (k, va, vb) in &global {
            writeln!(out, "~ metadata  {}", describe_change(k, va, vb))?;
        }
        for (name, d) in &per_tensor {
            for (k, va, vb) in d {
                writeln!(out, "~ {name}  metadata {}", describe_change(k, va, vb))?;
            }
        }
    }
    out.finish()?;
    Ok(if identical { ExitCode::Success } else { ExitCode::Failure })
}

/// Compares the values of tensors of the same name, dtype and shape in both
/// files, in units spread over all cores.
fn compare_values(a: &Reader, b: &Reader, tensors: &[&TensorInfo], compare: Compare) -> anyhow::Result<Vec<Values>> {
    let mut units = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        let size = values::element_size(t.dtype).unwrap_or(1) as u64;
        units.extend(par::ranges(t.byte_len(), UNIT, size).into_iter().map(|r| (i, r)));
    }
    let total = units.iter().map(|(_, (start, end))| end - start).sum();
    let bar = progress::bar(total, "comparing");
    let partial = par::map(units.len(), |u| {
        let (i, (start, end)) = units[u];
        let v = compare_unit(a, b, tensors[i], start, end, compare)?;
        bar.inc(end - start);
        Ok(v)
    })?;
    bar.finish_and_clear();
    let mut all = vec![Values::default(); tensors.len()];
    for ((i, _), v) in units.iter().zip(partial) {
        all[*i].merge(v);
    }
    Ok(all)
}

fn compare_unit(
    a: &Reader,
    b: &Reader,
    t: &TensorInfo,
    start: u64,
    end: u64,
    compare: Compare,
) -> anyhow::Result<Values> {
    let size = values::element_size(t.dtype);
    let step = size.unwrap_or(1);
    let chunk = (copy::CHUNK / step * step) as u64;
    let len = chunk.min(end - start) as usize;
    let (mut buf_a, mut buf_b) = (vec![0u8; len], vec![0u8; len]);
    let mut result = Values::default();
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
fn compare_elements(dtype: Dtype, size: usize, a: &[u8], b: &[u8], compare: Compare) -> Values {
    let parts = values::components(dtype);
    let mut result = Values::default();
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
