//! Statistics of tensor values, computed streaming and on all cores: what
//! `deathtensors stats` prints and `DtFile.stats` returns.

use deathtensors_format::{Dtype, TensorInfo};

use crate::error::Result;
use crate::file::reader::Reader;
use crate::tools::copy::COPY_CHUNK;
use crate::{fs::par, tools::values};

/// Bytes of a tensor one thread takes at a time: big tensors are shared
/// out among the cores too.
const UNIT: u64 = 64 << 20;

/// Elements decoded at a time, into a buffer that stays in L1/L2.
const BATCH: usize = 4096;

/// Statistics of a tensor's values, merged across chunks with Chan et al.'s
/// formula (Welford's, for batches): exact enough for billions of values.
///
/// Complex tensors count their real and imaginary parts as separate values;
/// BOOL counts false as 0 and true as 1.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Stats {
    /// Values seen, NaN and Inf included.
    pub count: u64,
    /// Finite values, over which min, max, mean and std are.
    pub finite: u64,
    /// Finite values equal to zero.
    pub zeros: u64,
    /// NaN values.
    pub nan: u64,
    /// Infinite values.
    pub inf: u64,
    mean: f64,
    /// Sum of squared differences from the mean.
    m2: f64,
    min: f64,
    max: f64,
}

impl Stats {
    /// The statistics of `values`.
    pub fn of(values: &[f64]) -> Stats {
        let mut batch =
            Stats { count: values.len() as u64, min: f64::INFINITY, max: f64::NEG_INFINITY, ..Stats::default() };
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
        batch
    }

    /// Adds the statistics of other values.
    pub fn merge(&mut self, other: &Stats) {
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

    /// min, max, mean, std (population) of the finite values, or `None`
    /// without finite values.
    pub fn summary(&self) -> Option<[f64; 4]> {
        (self.finite > 0).then(|| [self.min, self.max, self.mean, (self.m2 / self.finite as f64).sqrt()])
    }

    /// Finite values that are not zero.
    pub fn nonzero(&self) -> u64 {
        self.finite - self.zeros
    }
}

/// The statistics of each of `tensors` of `reader`, in their order, or
/// `None` for the packed sub-byte dtypes (F4, F6), whose values are not
/// decoded. The work is split in units of at most 64 MiB spread over all
/// cores, each read in chunks, so memory stays bounded. `progress` is told
/// the bytes as they are read, from any thread.
///
/// # Errors
/// The reads' errors (an encrypted file without its key, a failed
/// decompression, I/O).
pub fn tensor_stats(
    reader: &Reader,
    tensors: &[&TensorInfo],
    progress: impl Fn(u64) + Sync,
) -> Result<Vec<Option<Stats>>> {
    let mut units = Vec::new();
    for (i, t) in tensors.iter().enumerate() {
        if let Some(size) = values::element_size(t.dtype) {
            units.extend(par::ranges(t.byte_len(), UNIT, size as u64).into_iter().map(|r| (i, r)));
        }
    }
    let partial = par::map(units.len(), |u| {
        let (i, (start, end)) = units[u];
        let t = tensors[i];
        let stats = unit_stats(reader, t.name.as_str(), t.dtype, start, end)?;
        progress(end - start);
        Ok(stats)
    })?;
    let mut all: Vec<Option<Stats>> =
        tensors.iter().map(|t| values::element_size(t.dtype).map(|_| Stats::default())).collect();
    for ((i, _), stats) in units.iter().zip(partial) {
        if let Some(total) = &mut all[*i] {
            total.merge(&stats);
        }
    }
    Ok(all)
}

fn unit_stats(reader: &Reader, name: &str, dtype: Dtype, start: u64, end: u64) -> Result<Stats> {
    let size = values::element_size(dtype).unwrap_or(1);
    // A whole number of elements per chunk and per batch.
    let chunk = (COPY_CHUNK / size * size) as u64;
    let mut buf = vec![0u8; chunk.min(end - start) as usize];
    let mut decoded = Vec::with_capacity(BATCH * 2);
    let mut stats = Stats::default();
    let mut at = start;
    while at < end {
        let n = (end - at).min(chunk) as usize;
        reader.read_range_into(name, at, &mut buf[..n])?;
        for batch in buf[..n].chunks(BATCH * size) {
            decoded.clear();
            values::decode(dtype, batch, &mut decoded);
            stats.merge(&Stats::of(&decoded));
        }
        at += n as u64;
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_merge_to_the_statistics_of_the_whole() {
        let values: Vec<f64> = (0..10_000).map(|i| ((i * 7919) % 1000) as f64 / 7.0 - 50.0).collect();
        let whole = Stats::of(&values);
        let mut parts = Stats::default();
        for chunk in values.chunks(333) {
            parts.merge(&Stats::of(chunk));
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let std = (values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
        for stats in [whole, parts] {
            let [min, max, m, s] = stats.summary().unwrap();
            assert_eq!((min, max), (-50.0, 999.0 / 7.0 - 50.0));
            assert!((m - mean).abs() < 1e-9 && (s - std).abs() < 1e-9, "{m} {s}");
        }
    }

    #[test]
    fn nan_and_inf_are_counted_apart() {
        let stats = Stats::of(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, 2.0]);
        assert_eq!((stats.count, stats.finite, stats.nan, stats.inf, stats.zeros), (5, 2, 1, 2, 1));
        assert_eq!(stats.nonzero(), 1);
        assert_eq!(stats.summary(), Some([0.0, 2.0, 1.0, 1.0]));
        assert_eq!(Stats::of(&[f64::NAN]).summary(), None);
    }
}
