//! SHA-256: the footer (one sequential pass) and per-tensor digests (all cores).

use ring::digest::{Context, SHA256};

use crate::fs::pread::{read_exact_at, ReadAt};

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
    file: &(impl ReadAt + ?Sized),
    offset: u64,
    len: u64,
    buf: &mut Vec<u8>,
    progress: &mut dyn FnMut(u64),
) -> std::io::Result<[u8; 32]> {
    let mut h = Hasher::new();
    let mut done = 0u64;
    // No bigger than the range: verifying 20,000 tiny tensors must not zero 20,000 MiB.
    let chunk = file.stream_chunk().unwrap_or(CHUNK).max(1);
    buf.resize(chunk.min(len as usize), 0);
    while done < len {
        let n = (len - done).min(chunk as u64) as usize;
        read_exact_at(file, &mut buf[..n], offset + done)?;
        h.update(&buf[..n]);
        done += n as u64;
        progress(n as u64);
    }
    Ok(h.finish())
}

/// Number of worker threads for work on all cores (hashing, decryption,
/// compression, the header decoder's check of its own threads): the cores
/// this process may use, read once (`available_parallelism` reads the
/// affinity mask and cgroup quota on every call).
pub(crate) fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
