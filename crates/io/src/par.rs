//! Work spread over all cores.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Runs `job(i)` for every `i` in `0..n` on all cores and returns the
/// results in index order; stops at the first error, which it returns.
pub(crate) fn map<T, E, F>(n: usize, job: F) -> Result<Vec<T>, E>
where
    T: Send,
    E: Send,
    F: Fn(usize) -> Result<T, E> + Sync,
{
    let workers = crate::hash::threads().min(n.max(1));
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
