//! Appendable collections of same-shaped rows (docs/FORMAT.md section 13):
//! a directory with a manifest and block files, written by one writer at a
//! time and read by any number of readers, that survives a crash at any
//! instant in the state of its last commit.
//!
//! # Crash safety
//! The manifest (`collection.json`) is the only source of truth, replaced
//! atomically by [`Collection::flush`]: rows written since then live in
//! block files the manifest does not count yet, so a crash shows exactly
//! the last committed state. Rows a manifest counts are never written in
//! place: overwriting or truncating them copies the block first (copy on
//! write), so readers of any committed state always see consistent rows.
//!
//! # Example
//! ```
//! use deathtensors_io::{Collection, CollectionOptions};
//! use deathtensors_io::format::{Dtype, RowLayout};
//!
//! let dir = std::env::temp_dir().join(format!("dt-coll-doc-{}", std::process::id()));
//! # let _ = std::fs::remove_dir_all(&dir);
//! let layout = RowLayout::new(Dtype::U8, vec![4], 2)?;
//! let mut c = Collection::create(&dir, layout, CollectionOptions::default())?;
//! c.write_rows(0, &[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3])?;
//! c.flush()?;
//! drop(c);
//!
//! let r = Collection::open(&dir)?;
//! assert_eq!(r.rows(), 3);
//! let mut row = [0u8; 4];
//! r.read_rows(2, &mut row)?;
//! assert_eq!(row, [3, 3, 3, 3]);
//! # drop(r);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod block;
mod commit;
mod hasher;
mod lock;
mod snapshot;
mod state;
mod tensorblob;
mod transfer;
mod view;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use deathtensors_format::{Manifest, Metadata, RowLayout, MANIFEST_NAME};

use self::block::BlockFile;
use self::lock::WriterLock;
pub use self::lock::LOCK_NAME;
pub use self::state::{Collection, CollectionKind};
use self::state::{Slot, WriterState};
pub use self::transfer::convert_collection;
pub use self::view::RowsView;
use crate::error::{Error, Result};

/// How a writer commits.
#[derive(Clone, Debug)]
pub struct CollectionOptions {
    /// Whether [`Collection::flush`] waits for the disk (fsync of the block
    /// files, the manifest and the directory). Default true; without it a
    /// commit is atomic against crashes of the process but not of the
    /// machine.
    pub durable: bool,
}

impl Default for CollectionOptions {
    fn default() -> CollectionOptions {
        CollectionOptions { durable: true }
    }
}

/// One block of a collection as the caller sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// The block file's path.
    pub path: PathBuf,
    /// Rows of the collection in it.
    pub rows: u64,
    /// The recorded SHA-256 of those rows, if any (full blocks).
    pub sha256: Option<[u8; 32]>,
    /// Whether the rows are committed (false: written since the last flush).
    pub committed: bool,
}

impl Collection {
    /// Opens the collection at `dir` read-only: a snapshot of its last
    /// committed state (see [`Collection::refresh`]), whose block files are
    /// held open (one descriptor each) so that later commits never take its
    /// rows away. A commit that replaces a block while the snapshot is being
    /// taken makes it start over from the newer state, a bounded number of
    /// times. Opens tensorblob directories too.
    ///
    /// # Errors
    /// `Io` if there is no collection; `Format` naming the manifest and what
    /// is wrong with it.
    pub fn open(dir: impl AsRef<Path>) -> Result<Collection> {
        let dir = dir.as_ref();
        match detect(dir)? {
            CollectionKind::Tensorblob => tensorblob::open(dir),
            CollectionKind::Deathtensors => snapshot::open(dir),
        }
    }

    /// Opens an existing collection for writing (modes `a` and `r+`): takes
    /// the writer lock, then removes what an interrupted commit left.
    ///
    /// # Errors
    /// `Locked` if another writer has it, naming the lock; as
    /// [`Collection::open`] otherwise.
    pub fn open_writable(dir: impl AsRef<Path>, options: CollectionOptions) -> Result<Collection> {
        let dir = dir.as_ref();
        if detect(dir)? == CollectionKind::Tensorblob {
            return Err(Error::input(
                "this is a tensorblob directory, which opens read-only: convert it first \
                 (`deathtensors blob convert` or TensorBlob.convert)",
                dir,
                "cannot open for writing",
            ));
        }
        let lock = WriterLock::acquire(dir)?;
        let manifest = commit::read_manifest(dir)?;
        commit::clean(dir, &manifest);
        let writer = WriterState::new(lock, &manifest.layout, options)?;
        Ok(Collection::from_manifest(dir, manifest, Some(writer)))
    }

    /// Creates a collection at `dir` for writing (modes `w` and `w+`). A new
    /// directory gets an empty committed collection at once. An existing
    /// collection is replaced by an empty one of `layout` at the next
    /// [`Collection::flush`]: until then its committed rows stay.
    ///
    /// # Errors
    /// `Locked` if another writer has it; `InvalidInput` if `dir` is a
    /// non-empty directory that is not a collection (nothing is written
    /// there), or a tensorblob directory.
    pub fn create(dir: impl AsRef<Path>, layout: RowLayout, options: CollectionOptions) -> Result<Collection> {
        let dir = dir.as_ref();
        let doing = "cannot create collection";
        if !dir.join(MANIFEST_NAME).exists() && dir.exists() {
            let entries = std::fs::read_dir(dir).map_err(|e| Error::io(e, dir, doing))?;
            let others = entries.flatten().any(|e| e.file_name() != lock::LOCK_NAME);
            if others {
                let what = if detect(dir).ok() == Some(CollectionKind::Tensorblob) {
                    "this is a tensorblob directory: convert it instead (`deathtensors blob convert`)"
                } else {
                    "the directory exists, is not empty and is not a collection: nothing was written"
                };
                return Err(Error::input(what, dir, doing));
            }
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(e, dir, doing))?;
        let lock = WriterLock::acquire(dir)?;
        // Decided under the lock: another writer may have created it meanwhile.
        let existing = dir.join(MANIFEST_NAME).exists();
        let mut writer = WriterState::new(lock, &layout, options)?;
        if existing {
            let old = commit::read_manifest(dir)?;
            commit::clean(dir, &old);
            writer.superseded = old.blocks.into_iter().map(|b| b.file).collect();
            writer.changed = true;
            let mut c = Collection::from_manifest(dir, Manifest::new(layout), Some(writer));
            c.generation = old.generation;
            return Ok(c);
        }
        let mut c = Collection::from_manifest(dir, Manifest::new(layout), Some(writer));
        if let Some(w) = c.writer.as_mut() {
            w.changed = true;
        }
        c.flush()?;
        Ok(c)
    }

    fn from_manifest(dir: &Path, manifest: Manifest, writer: Option<WriterState>) -> Collection {
        Collection {
            dir: dir.to_path_buf(),
            kind: CollectionKind::Deathtensors,
            slots: manifest.blocks.iter().map(Slot::from_ref).collect(),
            layout: manifest.layout,
            metadata: manifest.metadata,
            generation: manifest.generation,
            writer,
        }
    }

    /// The collection's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether this is one of ours or a tensorblob directory.
    pub fn kind(&self) -> CollectionKind {
        self.kind
    }

    /// The rows' dtype, shape and rows per block.
    pub fn layout(&self) -> &RowLayout {
        &self.layout
    }

    /// Rows in the collection (for the writer, with those not yet committed).
    pub fn rows(&self) -> u64 {
        match self.slots.split_last() {
            None => 0,
            Some((last, full)) => full.len() as u64 * self.layout.block_rows + last.rows,
        }
    }

    /// The number of the last commit this handle knows.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether this handle holds the writer lock.
    pub fn is_writable(&self) -> bool {
        self.writer.is_some()
    }

    /// Whether there are writes not yet committed.
    pub fn has_changes(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.changed)
    }

    /// The collection's string metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Replaces the metadata (committed by the next flush).
    ///
    /// # Errors
    /// `InvalidInput` for a read-only handle.
    pub fn set_metadata(&mut self, metadata: Metadata) -> Result<()> {
        self.writer_mut("cannot set metadata of")?.changed = true;
        self.metadata = metadata;
        Ok(())
    }

    /// The blocks, in row order.
    pub fn blocks(&self) -> Vec<BlockInfo> {
        self.slots
            .iter()
            .map(|s| BlockInfo {
                path: self.dir.join(&s.file),
                rows: s.rows,
                sha256: s.sha256,
                committed: s.committed && s.frozen == s.rows,
            })
            .collect()
    }

    /// Reads `out.len() / row_bytes` rows from row `start` into `out`: the
    /// only copy, from the page cache into the caller's memory.
    ///
    /// # Errors
    /// `InvalidInput` if `out` is not whole rows or runs past the end;
    /// `Io`/`Format` naming the block file that cannot be read.
    pub fn read_rows(&self, start: u64, out: &mut [u8]) -> Result<()> {
        let n = self.whole_rows(out.len(), "cannot read")?;
        if start.checked_add(n).is_none_or(|end| end > self.rows()) {
            return Err(
                self.input(format!("{n} rows from row {start} run past the end ({} rows)", self.rows()), "cannot read")
            );
        }
        let rb = self.layout.row_bytes() as usize;
        let cap = self.layout.block_rows;
        let mut done = 0u64;
        while done < n {
            let r = start + done;
            let (b, o) = (r / cap, r % cap);
            let take = (cap - o).min(n - done);
            let part = &mut out[done as usize * rb..(done + take) as usize * rb];
            self.block(b as usize)?.read(&self.layout, o, part)?;
            done += take;
        }
        Ok(())
    }

    /// Reads the rows at `indices` (any order, repeats allowed) into `out`,
    /// one after another.
    ///
    /// # Errors
    /// As [`Collection::read_rows`], naming an index out of range.
    pub fn gather(&self, indices: &[u64], out: &mut [u8]) -> Result<()> {
        let n = self.whole_rows(out.len(), "cannot gather")?;
        if n != indices.len() as u64 {
            return Err(self.input(format!("{} indices but room for {n} rows", indices.len()), "cannot gather"));
        }
        let rows = self.rows();
        if let Some(bad) = indices.iter().find(|&&i| i >= rows) {
            return Err(self.input(format!("row {bad} is out of range ({rows} rows)"), "cannot gather"));
        }
        let rb = self.layout.row_bytes() as usize;
        let cap = self.layout.block_rows;
        // In file order (each row still lands at its own place in `out`):
        // neighbouring reads hit neighbouring page-cache entries, and runs
        // of consecutive rows in one block are read with one call. One
        // thread: split over two, the reads contend and each takes longer
        // (1.0 against 1.4 µs a row here).
        let mut order: Vec<usize> = (0..indices.len()).collect();
        if !indices.is_sorted() {
            order.sort_unstable_by_key(|&k| indices[k]);
        }
        let mut k = 0;
        while k < order.len() {
            let first = order[k];
            let (b, o) = (indices[first] / cap, indices[first] % cap);
            // A run: the next rows of the file, wanted at the next places of `out`.
            let mut run = 1;
            while k + run < order.len()
                && order[k + run] == first + run
                && indices[first + run] == indices[first] + run as u64
                && o + (run as u64) < cap
            {
                run += 1;
            }
            self.block(b as usize)?.read(&self.layout, o, &mut out[first * rb..(first + run) * rb])?;
            k += run;
        }
        Ok(())
    }

    /// A zero-copy, read-only view of committed rows `start..start + count`,
    /// which must lie in one block.
    ///
    /// # Safety
    /// The block file must not be truncated or changed in place by another
    /// program while the view lives (a truncation would make reading the view
    /// raise SIGBUS). Our writers never do either to committed rows: they
    /// copy a block before changing it.
    ///
    /// # Errors
    /// `InvalidInput` if the rows span blocks or are not committed yet.
    pub unsafe fn view(&self, start: u64, count: u64) -> Result<RowsView> {
        let cap = self.layout.block_rows;
        let (b, o) = (start / cap, start % cap);
        let doing = "cannot map";
        let Some(slot) = self.slots.get(b as usize) else {
            return Err(self.input(format!("row {start} is past the end ({} rows)", self.rows()), doing));
        };
        let end = o.checked_add(count);
        if end.is_none_or(|end| end > slot.frozen.min(slot.rows)) {
            let why = if end.is_none_or(|end| end > cap) {
                format!("{count} rows from row {start} span more than one block of {cap} rows")
            } else if end.is_some_and(|end| end > slot.rows) {
                format!("{count} rows from row {start} run past the end ({} rows)", self.rows())
            } else {
                format!("{count} rows from row {start} are not committed yet: flush() first")
            };
            return Err(self.input(why, doing));
        }
        let block = self.block(b as usize)?;
        // SAFETY: forwarded to the caller (see `# Safety`).
        unsafe { RowsView::map(&block, &self.layout, o, count) }
    }

    /// Commits (as [`Collection::flush`]) and releases the writer lock; the
    /// handle stays open as a reader of the state just committed.
    ///
    /// # Errors
    /// As [`Collection::flush`]; the lock is kept if the commit fails.
    pub fn release_writer(&mut self) -> Result<()> {
        if self.writer.is_some() {
            commit::flush(self)?;
            self.writer = None;
        }
        Ok(())
    }

    /// Rereads the manifest (readers): the handle then shows the newest
    /// committed state, its block files held open as [`Collection::open`]
    /// holds them. Returns whether it changed; on an error the handle keeps
    /// the state it had.
    ///
    /// # Errors
    /// As [`Collection::open`]; `InvalidInput` for the writer, whose state
    /// is always the newest.
    pub fn refresh(&mut self) -> Result<bool> {
        if self.writer.is_some() {
            return Err(self.input("the writer's state is always the newest".to_string(), "cannot refresh"));
        }
        if self.kind == CollectionKind::Tensorblob {
            return Ok(false);
        }
        snapshot::refresh(self)
    }

    /// Commits the working state: syncs the written block files, records
    /// the digests of full blocks, and replaces the manifest atomically. A
    /// crash at any instant leaves either the previous committed state or
    /// this one. Without changes since the last commit it does nothing.
    ///
    /// # Errors
    /// `InvalidInput` for a read-only handle; `Io` naming the file. On error
    /// the previous commit stays in force and the working state is kept, so
    /// the flush may be retried.
    pub fn flush(&mut self) -> Result<()> {
        self.writer_mut("cannot flush")?;
        commit::flush(self)
    }

    /// Checks every block file against the manifest (header, size) and the
    /// recorded digests of full blocks; returns how many blocks had their
    /// rows hashed.
    ///
    /// # Errors
    /// The first problem found, naming the block file.
    pub fn verify(&self) -> Result<u64> {
        commit::verify(self)
    }

    /// [`Collection::verify`] for the blocks that hold rows `rows` only:
    /// what a read of those rows that passes them on checks first.
    ///
    /// # Errors
    /// As [`Collection::verify`].
    pub fn verify_rows(&self, rows: std::ops::Range<u64>) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let cap = self.layout.block_rows;
        let first = (rows.start / cap) as usize;
        let end = ((rows.end - 1) / cap + 1) as usize;
        commit::verify_blocks(self, first..end.min(self.slots.len()))
    }

    /// The open block file of block `b`.
    fn block(&self, b: usize) -> Result<Arc<BlockFile>> {
        let slot = &self.slots[b];
        if let Some(h) = slot.handle.get() {
            return Ok(h.clone());
        }
        // Held while the block is opened: a second thread waits for the
        // first's handle instead of opening by name what the snapshot pinned.
        let mut pinned = slot.pinned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(h) = slot.handle.get() {
            return Ok(h.clone());
        }
        let path = self.dir.join(&slot.file);
        let raw = self.kind == CollectionKind::Tensorblob;
        let opened = match pinned.take() {
            Some(file) => BlockFile::from_file(file, &path, &self.layout, raw),
            None => BlockFile::open(&path, &self.layout, self.writer.is_some(), raw),
        };
        let opened = opened.map_err(|e| {
            let gone = matches!(e.kind(), crate::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound);
            let newer = || commit::read_manifest(&self.dir).is_ok_and(|m| m.generation != self.generation);
            if gone && self.writer.is_none() && self.kind == CollectionKind::Deathtensors && newer() {
                self.input(
                    format!(
                        "block file {} is gone: a newer commit replaced it (reopen or refresh() to see that state)",
                        slot.file
                    ),
                    "cannot read",
                )
            } else if gone {
                Error::new(
                    crate::ErrorKind::DamagedCollection(format!(
                        "block file {} that the manifest names is missing",
                        slot.file
                    )),
                    Some(&path),
                    "cannot open",
                )
            } else {
                e
            }
        })?;
        let _ = slot.handle.set(Arc::new(opened));
        Ok(slot.handle.get().cloned().unwrap_or_else(|| unreachable!("set above")))
    }

    fn writer_mut(&mut self, doing: &'static str) -> Result<&mut WriterState> {
        let dir = self.dir.clone();
        self.writer.as_mut().ok_or_else(|| Error::input("the collection is open read-only", &dir, doing))
    }

    fn whole_rows(&self, len: usize, doing: &'static str) -> Result<u64> {
        let rb = self.layout.row_bytes();
        if !(len as u64).is_multiple_of(rb) {
            return Err(self.input(format!("{len} bytes are not whole rows of {rb} bytes"), doing));
        }
        Ok(len as u64 / rb)
    }

    fn input(&self, message: String, doing: &'static str) -> Error {
        Error::input(message, &self.dir, doing)
    }
}

impl WriterState {
    fn new(lock: WriterLock, layout: &RowLayout, options: CollectionOptions) -> Result<WriterState> {
        let header =
            layout.block_header().map_err(|e| Error::new(crate::ErrorKind::Format(e), None, "cannot create"))?;
        Ok(WriterState {
            _lock: lock,
            durable: options.durable,
            header,
            superseded: Vec::new(),
            seq: 0,
            changed: false,
            hasher: hasher::Hasher::default(),
        })
    }
}

/// The dtype of a name: ours (`"F32"`, `"BF16"`) or torch's, as tensorblob
/// stores them (`"float32"`, `"bfloat16"`, `"float"`).
pub fn dtype_from_name(name: &str) -> Option<deathtensors_format::Dtype> {
    deathtensors_format::Dtype::from_name(name).or_else(|| tensorblob::dtype_of_torch_name(name))
}

/// Deletes our collection at `dir`, as its writer: under the writer's lock
/// (only the writer holding it removes files), the manifest first (synced:
/// a crash from then on leaves no collection, only files to clean), then
/// every block, any block file a crashed writer left, and the lock file,
/// before the lock is released; then the directory. `Ok(true)` when the
/// directory is gone, `Ok(false)` when files of others keep it.
///
/// # Errors
/// `Locked` while another writer holds the collection; `Io`; the open's
/// errors for a damaged manifest (nothing is removed then).
pub fn remove_collection(dir: &Path) -> Result<bool> {
    const DOING: &str = "cannot remove collection";
    let c = Collection::open_writable(dir, CollectionOptions::default())?;
    let io = |e: std::io::Error, path: &Path| Error::io(e, path, DOING);
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    let manifest = dir.join(MANIFEST_NAME);
    std::fs::remove_file(&manifest).map_err(|e| io(e, &manifest))?;
    crate::fs::atomic::sync_dir(dir).map_err(|e| io(e, dir))?;
    for b in c.blocks() {
        gone(std::fs::remove_file(&b.path)).map_err(|e| io(e, &b.path))?;
    }
    let entries = std::fs::read_dir(dir).map_err(|e| io(e, dir))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // The names our writer gives blocks (`blk-*.dt`), as a crashed one left them.
        if deathtensors_format::check_block_name(&name).is_ok() && name.starts_with("blk-") && name.ends_with(".dt") {
            gone(std::fs::remove_file(entry.path())).map_err(|e| io(e, &entry.path()))?;
        }
    }
    let lock = dir.join(LOCK_NAME);
    gone(std::fs::remove_file(&lock)).map_err(|e| io(e, &lock))?;
    drop(c);
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
        Err(_) if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) => Ok(false),
        Err(e) => Err(io(e, dir)),
    }
}

/// What the directory at `dir` holds: one of our collections, or a
/// tensorblob directory.
///
/// # Errors
/// `Io` (not found) when it is neither.
pub fn detect(dir: &Path) -> Result<CollectionKind> {
    if dir.join(MANIFEST_NAME).is_file() {
        return Ok(CollectionKind::Deathtensors);
    }
    if tensorblob::is_tensorblob(dir) {
        return Ok(CollectionKind::Tensorblob);
    }
    let why = if dir.is_dir() {
        format!("not a collection: no {MANIFEST_NAME} (nor tensorblob's .conf and .stat)")
    } else {
        "no such collection directory".to_string()
    };
    Err(Error::io(std::io::Error::new(std::io::ErrorKind::NotFound, why), dir, "cannot open collection"))
}
