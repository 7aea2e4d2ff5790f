//! An optional local cache of fetched ranges: content-checked (each entry
//! carries the SHA-256 of its bytes, checked on every hit) and bounded
//! (least recently used entries are removed past a byte budget).

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use ring::digest::{digest, SHA256};

/// A directory of cached byte ranges of remote objects, keyed by URL, ETag
/// and range: an object replaced on the store (another ETag) never hits.
/// Only objects with an ETag are cached. Each entry is its bytes' SHA-256
/// then the bytes; a hit whose digest fails is removed and fetched again.
/// After each insertion, the least recently used entries are removed until
/// the directory holds at most `max_bytes`.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
}

/// The prefix of entry files (others in the directory are left alone).
const PREFIX: &str = "dtr-";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Cache {
    /// A cache in `dir` (created when first written) of at most `max_bytes`.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> Cache {
        Cache { dir: dir.into(), max_bytes }
    }

    fn path(&self, url: &str, etag: &str, offset: u64, len: usize) -> PathBuf {
        let key = format!("{url}\0{etag}\0{offset}\0{len}");
        self.dir.join(format!("{PREFIX}{}", hex(&digest(&SHA256, key.as_bytes()).as_ref()[..20])))
    }

    /// Fills `buf` from the entry for this range, if there is one whose
    /// bytes match their digest (a failing entry is removed).
    pub(crate) fn get(&self, url: &str, etag: &str, offset: u64, buf: &mut [u8]) -> bool {
        let path = self.path(url, etag, offset, buf.len());
        let Ok(entry) = fs::read(&path) else { return false };
        let ok = entry.len() == 32 + buf.len() && digest(&SHA256, &entry[32..]).as_ref() == &entry[..32];
        if !ok {
            let _ = fs::remove_file(&path);
            return false;
        }
        buf.copy_from_slice(&entry[32..]);
        // Recently used: eviction goes by modification time.
        if let Ok(f) = fs::File::options().append(true).open(&path) {
            let _ = f.set_modified(SystemTime::now());
        }
        true
    }

    /// Stores a range (best effort: a cache that cannot be written is
    /// skipped), then trims the directory to the budget.
    pub(crate) fn put(&self, url: &str, etag: &str, offset: u64, bytes: &[u8]) {
        if bytes.len() as u64 + 32 > self.max_bytes || fs::create_dir_all(&self.dir).is_err() {
            return;
        }
        let path = self.path(url, etag, offset, bytes.len());
        // Written aside, then renamed: a reader never sees half an entry.
        let temp = self.dir.join(format!(".tmp-{}-{:?}", std::process::id(), std::thread::current().id()));
        let written = fs::File::create(&temp).and_then(|mut f| {
            f.write_all(digest(&SHA256, bytes).as_ref())?;
            f.write_all(bytes)
        });
        if written.and_then(|()| fs::rename(&temp, &path)).is_err() {
            let _ = fs::remove_file(&temp);
            return;
        }
        self.trim();
    }

    /// Removes the least recently used entries until the total is within
    /// the budget.
    fn trim(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else { return };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = dir
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(PREFIX))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}
