//! Work spread over all cores: jobs by index, byte ranges, and the chunks
//! of an encrypted tensor (ours and cryptotensors').

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::error;

/// Runs `job(i)` for every `i` in `0..n` on all cores and returns the
/// results in index order; stops at the first error, which it returns.
pub(crate) fn map<T, E, F>(n: usize, job: F) -> Result<Vec<T>, E>
where
    T: Send,
    E: Send,
    F: Fn(usize) -> Result<T, E> + Sync,
{
    let workers = crate::fs::hash::threads().min(n.max(1));
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let per_worker: Vec<Result<Vec<(usize, T)>, E>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    while !failed.load(Ordering::Relaxed) {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        match job(i) {
                            Ok(v) => done.push((i, v)),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut all: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for done in per_worker {
        for (i, v) in done? {
            all[i] = Some(v);
        }
    }
    Ok(all.into_iter().flatten().collect())
}

/// Splits `len` bytes into ranges of at most `unit` bytes, each a whole
/// number of `element`-byte elements, so that big tensors are shared out too.
pub(crate) fn ranges(len: u64, unit: u64, element: u64) -> Vec<(u64, u64)> {
    let unit = (unit / element.max(1)).max(1) * element.max(1);
    (0..len.div_ceil(unit)).map(|k| (k * unit, ((k + 1) * unit).min(len))).collect()
}

/// For each chunk `j` of `range` (its bytes `ranges(j)` within the tensor):
/// `open(j, range, target)` fills `target` with its plaintext, then the
/// bytes of `wanted` land in `out` (which starts at tensor byte
/// `out_start`). A chunk wanted whole is opened in place in `out`; one
/// wanted in part, in a scratch buffer.
pub(crate) fn each_chunk(
    range: std::ops::Range<u64>,
    out: &mut [u8],
    out_start: u64,
    wanted: (u64, u64),
    ranges: impl Fn(u64) -> (u64, u64),
    mut open: impl FnMut(u64, (u64, u64), &mut [u8]) -> error::Result<()>,
) -> error::Result<()> {
    let mut scratch = Vec::new();
    for j in range {
        let (cs, ce) = ranges(j);
        let (ws, we) = (cs.max(wanted.0), ce.min(wanted.1));
        if ws == cs && we == ce {
            open(j, (cs, ce), &mut out[(cs - out_start) as usize..(ce - out_start) as usize])?;
        } else {
            scratch.resize((ce - cs) as usize, 0);
            open(j, (cs, ce), &mut scratch)?;
            out[(ws - out_start) as usize..(we - out_start) as usize]
                .copy_from_slice(&scratch[(ws - cs) as usize..(we - cs) as usize]);
        }
    }
    Ok(())
}

/// Decrypts a run of chunks into `out`, whose first byte is tensor byte
/// `out_start`.
pub(crate) type ChunkWork<'a> = dyn Fn(std::ops::Range<u64>, &mut [u8], u64) -> error::Result<()> + Sync + 'a;

/// Runs `work(chunks, out, out_start)` over chunks `first..=last` of a
/// tensor (chunks of `size` bytes; the bytes wanted are `[offset, end)`,
/// which `buf` receives): contiguous runs of chunks on all cores when there
/// are several, `buf` split at chunk boundaries. On any error `buf` is
/// zeroed: nothing, not even the chunks that did verify, is returned.
pub(crate) fn split_chunks(
    first: u64,
    last: u64,
    size: u64,
    offset: u64,
    end: u64,
    buf: &mut [u8],
    work: &ChunkWork<'_>,
) -> error::Result<()> {
    let n = last - first + 1;
    let threads = (crate::fs::hash::threads() as u64).min(n / 2).max(1);
    let out = if threads == 1 {
        work(first..last + 1, buf, offset)
    } else {
        let per = n.div_ceil(threads);
        let results = std::thread::scope(|s| {
            let mut rest: &mut [u8] = &mut *buf;
            let mut at = offset;
            let mut handles = Vec::new();
            let mut j = first;
            while j <= last {
                let stop = (j + per).min(last + 1);
                let run_end = (stop * size).min(end);
                let (mine, tail) = std::mem::take(&mut rest).split_at_mut((run_end - at) as usize);
                rest = tail;
                let start = at;
                handles.push(s.spawn(move || work(j..stop, mine, start)));
                at = run_end;
                j = stop;
            }
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect::<Vec<_>>()
        });
        results.into_iter().collect::<error::Result<()>>()
    };
    if out.is_err() {
        buf.fill(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_keeps_order_and_stops_on_errors() {
        let doubled: Result<Vec<usize>, String> = map(100, |i| Ok(i * 2));
        assert_eq!(doubled.unwrap(), (0..100).map(|i| i * 2).collect::<Vec<_>>());
        assert!(map::<usize, String, _>(0, Ok).unwrap().is_empty());
        let err = map(100, |i| if i == 42 { Err(format!("no {i}")) } else { Ok(i) }).unwrap_err();
        assert_eq!(err, "no 42");
    }

    #[test]
    fn ranges_cover_whole_elements() {
        assert_eq!(ranges(10, 4, 1), [(0, 4), (4, 8), (8, 10)]);
        assert_eq!(ranges(12, 5, 2), [(0, 4), (4, 8), (8, 12)]);
        assert_eq!(ranges(16, 3, 8), [(0, 8), (8, 16)]);
        assert!(ranges(0, 4, 1).is_empty());
    }
}
