//! `deathtensors stats`: per-tensor statistics, streaming and on all cores.

use std::io::Write;

use deathtensors_io::format::{Dtype, TensorInfo};
use deathtensors_io::Reader;
use serde_json::{json, Value};

use crate::args::StatsArgs;
use crate::exit::ExitCode;
use crate::out::{self, Out};
use crate::{copy, par, progress, values};

/// Bytes of a tensor one thread takes at a time: big tensors are shared
/// out among the cores too.
const UNIT: u64 = 64 << 20;

/// Elements decoded at a time, into a buffer that stays in L1/L2.
const BATCH: usize = 4096;

/// Running statistics, merged across chunks with Chan et al.'s formula
/// (Welford's, for batches): exact enough for billions of values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Acc {
    /// Values seen, NaN and Inf included.
    count: u64,
    /// Finite values, over which min, max, mean and std are.
    finite: u64,
    mean: f64,
    /// Sum of squared differences from the mean.
    m2: f64,
    min: f64,
    max: f64,
    zeros: u64,
    nan: u64,
    inf: u64,
}

impl Acc {
    fn add_batch(&mut self, values: &[f64]) {
        let mut batch =
            Acc { count: values.len() as u64, min: f64::INFINITY, max: f64::NEG_INFINITY, ..Acc::default() };
        let mut sum = 0.0;
        for &x in values {
            if x.is_finite() {
                batch.finite += 1;
                sum += x;
                batch.min = batch.min.min(x);
                batch.max = batch.max.max(x);
                batch.zeros += u64::from(x == 0.0);
            } else if x.is_nan() {
                batch.nan += 1;
            } else {
                batch.inf += 1;
            }
        }
        if batch.finite > 0 {
            batch.mean = sum / batch.finite as f64;
            batch.m2 = values.iter().filter(|x| x.is_finite()).map(|&x| (x - batch.mean) * (x - batch.mean)).sum();
        }
        self.merge(&batch);
    }

    fn merge(&mut self, other: &Acc) {
        let n = self.finite + other.finite;
        if other.finite > 0 {
            if self.finite == 0 {
                (self.mean, self.m2, self.min, self.max) = (other.mean, other.m2, other.min, other.max);
            } else {
                let (na, nb) = (self.finite as f64, other.finite as f64);
                let delta = other.mean - self.mean;
                self.mean += delta * nb / n as f64;
                self.m2 += other.m2 + delta * delta * na * nb / n as f64;
                self.min = self.min.min(other.min);
                self.max = self.max.max(other.max);
            }
        }
        self.finite = n;
        self.count += other.count;
        self.zeros += other.zeros;
        self.nan += other.nan;
        self.inf += other.inf;
    }

    /// min, max, mean, std (population), or `None` without finite values.
    fn summary(&self) -> Option<[f64; 4]> {
        (self.finite > 0).then(|| [self.min, self.max, self.mean, (self.m2 / self.finite as f64).sqrt()])
    }
}

/// What `stats` finds for one tensor.
enum Outcome {
    Stats(Acc),
    Unsupported,
}

const COMPLEX_NOTE: &str = "complex: statistics over real and imaginary parts";

pub fn run(args: StatsArgs) -> anyhow::Result<ExitCode> {
    let reader = crate::keys::open(&args.file)?;
    let tensors: Vec<&TensorInfo> = if args.names.is_empty() {
        reader.header().tensors().iter().collect()
    } else {
        args.names.iter().map(|name| Ok(reader.tensor(name)?.info)).collect::<anyhow::Result<_>>()?
    };
    let outcomes = compute(&reader, &tensors)?;

    let mut out = Out::new();
    if args.json {
        let rows: Vec<Value> = tensors.iter().zip(&outcomes).map(|(t, o)| to_json(t, o)).collect();
        out.json(&json!({ "path": args.file.to_string_lossy(), "tensors": rows }))?;
    } else {
        let mut rows = vec![["name", "dtype", "count", "min", "max", "mean", "std", "zeros", "nan", "inf"]
            .map(String::from)
            .to_vec()];
        let mut complex = false;
        for (t, outcome) in tensors.iter().zip(&outcomes) {
            let mut row = vec![t.name.clone(), t.dtype.name().to_string()];
            match outcome {
                Outcome::Unsupported => {
                    row.extend(["-"; 8].map(String::from));
                    row.push(values::SUB_BYTE.to_string());
                }
                Outcome::Stats(acc) => {
                    complex |= values::components(t.dtype) == 2;
                    row.push(acc.count.to_string());
                    match acc.summary() {
                        Some(s) => row.extend(s.iter().map(|&x| out::g(x))),
                        None => row.extend(["-"; 4].map(String::from)),
                    }
                    row.extend([acc.zeros, acc.nan, acc.inf].map(|n| n.to_string()));
                }
            }
            rows.push(row);
        }
        write!(out, "{}", out::table(&rows))?;
        if complex {
            writeln!(out, "({COMPLEX_NOTE})")?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

fn to_json(t: &TensorInfo, outcome: &Outcome) -> Value {
    let mut row = json!({ "name": t.name, "dtype": t.dtype.name() });
    match outcome {
        Outcome::Unsupported => row["error"] = values::SUB_BYTE.into(),
        Outcome::Stats(acc) => {
            let [min, max, mean, std] =
                acc.summary().map_or([Value::Null, Value::Null, Value::Null, Value::Null], |s| {
                    s.map(|x| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number))
                });
            let fields = json!({
                "count": acc.count, "min": min, "max": max, "mean": mean, "std": std,
                "zeros": acc.zeros, "nan": acc.nan, "inf": acc.inf,
            });
            if let (Value::Object(row), Value::Object(fields)) = (&mut row, fields) {
                row.extend(fields);
            }
            if values::components(t.dtype) == 2 {
                row["note"] = COMPLEX_NOTE.into();
            }
        }
    }
    row
}

/// Statistics of every tensor, the work split in units of at most [`UNIT`]
/// bytes spread over all cores, each read in chunks.
fn compute(reader: &Reader, tensors: &[&TensorInfo]) -> anyhow::Result<Vec<Outcome>> {
    let mut units = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        if let Some(size) = values::element_size(t.dtype) {
            units.extend(par::ranges(t.byte_len(), UNIT, size as u64).into_iter().map(|r| (i, r)));
        }
    }
    let total = units.iter().map(|(_, (start, end))| end - start).sum();
    let bar = progress::bar(total, "computing");
    let partial = par::map(units.len(), |u| {
        let (i, (start, end)) = units[u];
        let t = tensors[i];
        let acc = unit_stats(reader, t.name.as_str(), t.dtype, start, end)?;
        bar.inc(end - start);
        Ok(acc)
    })?;
    bar.finish_and_clear();
    let mut outcomes: Vec<Outcome> = tensors
        .iter()
        .map(|t| match values::element_size(t.dtype) {
            Some(_) => Outcome::Stats(Acc::default()),
            None => Outcome::Unsupported,
        })
        .collect();
    for ((i, _), acc) in units.iter().zip(partial) {
        if let Outcome::Stats(total) = &mut outcomes[*i] {
            total.merge(&acc);
        }
    }
    Ok(outcomes)
}

fn unit_stats(reader: &Reader, name: &str, dtype: Dtype, start: u64, end: u64) -> anyhow::Result<Acc> {
    let size = values::element_size(dtype).unwrap_or(1);
    // A whole number of elements per chunk and per batch.
    let chunk = (copy::CHUNK / size * size) as u64;
    let mut buf = vec![0u8; chunk.min(end - start) as usize];
    let mut decoded = Vec::with_capacity(BATCH * 2);
    let mut acc = Acc::default();
    let mut at = start;
    while at < end {
        let n = (end - at).min(chunk) as usize;
        reader.read_range_into(name, at, &mut buf[..n])?;
        for batch in buf[..n].chunks(BATCH * size) {
            decoded.clear();
            values::decode(dtype, batch, &mut decoded);
            acc.add_batch(&decoded);
        }
        at += n as u64;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_merge_to_the_statistics_of_the_whole() {
        let values: Vec<f64> = (0..10_000).map(|i| ((i * 7919) % 1000) as f64 / 7.0 - 50.0).collect();
        let mut whole = Acc::default();
        whole.add_batch(&values);
        let mut parts = Acc::default();
        for chunk in values.chunks(333) {
            let mut acc = Acc::default();
            acc.add_batch(chunk);
            parts.merge(&acc);
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let std = (values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
        for acc in [whole, parts] {
            let [min, max, m, s] = acc.summary().unwrap();
            assert_eq!((min, max), (-50.0, 999.0 / 7.0 - 50.0));
            assert!((m - mean).abs() < 1e-9 && (s - std).abs() < 1e-9, "{m} {s}");
        }
    }

    #[test]
    fn nan_and_inf_are_counted_apart() {
        let mut acc = Acc::default();
        acc.add_batch(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, 2.0]);
        assert_eq!((acc.count, acc.finite, acc.nan, acc.inf, acc.zeros), (5, 2, 1, 2, 1));
        assert_eq!(acc.summary(), Some([0.0, 2.0, 1.0, 1.0]));
        let mut empty = Acc::default();
        empty.add_batch(&[f64::NAN]);
        assert_eq!(empty.summary(), None);
    }
}
