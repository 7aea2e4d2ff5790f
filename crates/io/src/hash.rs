//! SHA-256: the footer (one sequential pass) and per-tensor digests (all cores).

use std::fs::File;
use std::sync::atomic::{AtomicUsize, Ordering};

use ring::digest::{Context, SHA256};

use crate::pread::read_exact_at;

/// Chunk size for hashing through positioned reads: large enough to amortise
/// the system call, small enough to stay in L2/L3 between read and hash.
pub(crate) const CHUNK: usize = 1 << 20;

pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    finish(ring::digest::digest(&SHA256, bytes))
}

pub(crate) fn finish(d: ring::digest::Digest) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// A running SHA-256.
pub(crate) struct Hasher(Context);

impl Hasher {
    pub(crate) fn new() -> Hasher {
        Hasher(Context::new(&SHA256))
    }
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    pub(crate) fn finish(self) -> [u8; 32] {
        finish(self.0.finish())
    }
}

/// Hashes `len` bytes of `file` from `offset` with positioned reads,
/// calling `progress` with the number of bytes of each chunk hashed.
pub(crate) fn sha256_file_range(
    file: &File,
    offset: u64,
    len: u64,
    buf: &mut Vec<u8>,
    progress: &mut dyn FnMut(u64),
) -> std::io::Result<[u8; 32]> {
    let mut h = Hasher::new();
    let mut done = 0u64;
    // No bigger than the range: verifying 20,000 tiny tensors must not zero 20,000 MiB.
    buf.resize(CHUNK.min(len as usize), 0);
    while done < len {
        let n = (len - done).min(CHUNK as u64) as usize;
        read_exact_at(file, &mut buf[..n], offset + done)?;
        h.update(&buf[..n]);
        done += n as u64;
        progress(n as u64);
    }
    Ok(h.finish())
}

/// Number of worker threads for parallel hashing.
pub(crate) fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `job(i)` for every `i` in `0..n` on all cores, biggest first (by
/// `size(i)`), and returns the results in index order. Stops early on the
/// first error.
pub(crate) fn parallel<T, E, F>(n: usize, size: impl Fn(usize) -> u64, job: F) -> Result<Vec<T>, E>
where
    T: Send + Default + Clone,
    E: Send,
    F: Fn(usize) -> Result<T, E> + Sync,
{
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(size(i)));
    let workers = threads().min(n.max(1));
    let next = AtomicUsize::new(0);
    let failed = std::sync::atomic::AtomicBool::new(false);
    let results: Vec<Result<Vec<(usize, T)>, E>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = order.get(k) else { break };
                        match job(i) {
                            Ok(v) => out.push((i, v)),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut all = vec![T::default(); n];
    for r in results {
        for (i, v) in r? {
            all[i] = v;
        }
    }
    Ok(all)
}
