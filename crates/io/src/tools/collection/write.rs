//! The write side of a collection's handle: rows written, overwritten
//! (committed rows copied first) and truncated, blocks shared with another
//! collection, and the block files of the working state.

use std::sync::{Arc, Mutex, OnceLock};

use super::state::Slot;
use super::{BlockFile, Collection, CollectionKind};
use crate::error::Result;
use crate::fs::writeback::Writeback;

impl Collection {
    /// Writes rows from row `start`, which is at most [`Collection::rows`]:
    /// overwrites rows before the end and appends the rest. Committed rows
    /// are never changed in place (their block is copied first).
    ///
    /// # Errors
    /// `InvalidInput` for a read-only handle, a start past the end, or bytes
    /// that are not whole rows; `Io` naming the block file.
    pub fn write_rows(&mut self, start: u64, data: &[u8]) -> Result<()> {
        let doing = "cannot write to";
        self.writer_mut(doing)?;
        let n = self.whole_rows(data.len(), doing)?;
        let rows = self.rows();
        if start > rows {
            return Err(
                self.input(format!("row {start} is past the end ({rows} rows): write at most at the end"), doing)
            );
        }
        let rb = self.layout.row_bytes() as usize;
        let cap = self.layout.block_rows;
        let mut done = 0u64;
        while done < n {
            let r = start + done;
            let (b, o) = ((r / cap) as usize, r % cap);
            let take = (cap - o).min(n - done);
            let part = &data[done as usize * rb..(done + take) as usize * rb];
            if b == self.slots.len() {
                let slot = self.new_slot()?;
                self.slots.push(slot);
            } else if o < self.slots[b].frozen {
                self.copy_on_write(b, self.slots[b].rows)?;
            }
            let block = self.block(b)?;
            let durable = self.writer.as_ref().is_some_and(|w| w.durable);
            let slot = &mut self.slots[b];
            block.write(&self.layout, o, part, slot.writeback.get_or_insert_with(|| Writeback::new(durable)))?;
            slot.rows = slot.rows.max(o + take);
            slot.dirty = true;
            slot.sha256 = None;
            slot.version += 1;
            if slot.rows == cap {
                // Full: hash it in the background, for the commit.
                let key = (slot.file.clone(), slot.version);
                let len = self.layout.block_bytes();
                if let Some(w) = self.writer.as_mut() {
                    w.hasher.submit(key, block, len);
                }
            }
            done += take;
        }
        if n > 0 {
            self.writer_mut(doing)?.changed = true;
        }
        Ok(())
    }

    /// Cuts the collection to its first `rows` rows (committed by the next
    /// flush).
    ///
    /// # Errors
    /// `InvalidInput` for a read-only handle or `rows` past the end.
    pub fn truncate(&mut self, rows: u64) -> Result<()> {
        let doing = "cannot truncate";
        self.writer_mut(doing)?;
        let now = self.rows();
        if rows > now {
            return Err(self.input(format!("cannot truncate to {rows} rows: there are {now}"), doing));
        }
        if rows == now {
            return Ok(());
        }
        let cap = self.layout.block_rows;
        let keep = rows.div_ceil(cap) as usize;
        let dropped: Vec<Slot> = self.slots.drain(keep..).collect();
        for slot in dropped {
            self.discard(slot);
        }
        if keep > 0 {
            let last_rows = rows - (keep as u64 - 1) * cap;
            if last_rows < self.slots[keep - 1].frozen {
                // Rows a committed state counts never shrink in their file.
                self.copy_on_write(keep - 1, last_rows)?;
            }
            let slot = &mut self.slots[keep - 1];
            slot.rows = last_rows;
            slot.sha256 = None;
            slot.version += 1;
        }
        self.writer_mut(doing)?.changed = true;
        Ok(())
    }

    /// Appends `other`'s rows as tensorblob's `extend(maintain_order=False)`
    /// does: this collection's full blocks, then `other`'s full blocks
    /// (shared with a hard link when committed, else copied), then the rows
    /// of both partial last blocks. Needs the same layout, block size
    /// included.
    ///
    /// # Errors
    /// `InvalidInput` if the layouts differ.
    pub fn extend_blocks(&mut self, other: &Collection) -> Result<()> {
        let doing = "cannot extend";
        self.writer_mut(doing)?;
        if other.layout != self.layout {
            return Err(self.input(
                format!(
                    "the other collection has {} rows of {:?} in blocks of {}; this one {} rows of {:?} in blocks of {}",
                    other.layout.dtype,
                    other.layout.shape,
                    other.layout.block_rows,
                    self.layout.dtype,
                    self.layout.shape,
                    self.layout.block_rows
                ),
                doing,
            ));
        }
        let cap = self.layout.block_rows;
        let rb = self.layout.row_bytes() as usize;
        let (mine, theirs) = (self.rows(), other.rows());
        let (my_full, their_full) = (mine / cap * cap, theirs / cap * cap);
        let mut tail = vec![0u8; ((mine - my_full) + (theirs - their_full)) as usize * rb];
        let split = (mine - my_full) as usize * rb;
        self.read_rows(my_full, &mut tail[..split])?;
        other.read_rows(their_full, &mut tail[split..])?;
        self.truncate(my_full)?;
        for b in 0..(their_full / cap) as usize {
            let slot = self.shared_slot(other, b)?;
            self.slots.push(slot);
        }
        let end = self.rows();
        self.write_rows(end, &tail)?;
        self.writer_mut(doing)?.changed = true;
        Ok(())
    }

    /// Appends all of `other`'s rows in order, a block-sized buffer at a time.
    ///
    /// # Errors
    /// `InvalidInput` if the row dtype or shape differ.
    pub fn extend_rows(&mut self, other: &Collection) -> Result<()> {
        let doing = "cannot extend";
        self.writer_mut(doing)?;
        if other.layout.dtype != self.layout.dtype || other.layout.shape != self.layout.shape {
            return Err(self.input(
                format!(
                    "the other collection has rows of {} {:?}, this one {} {:?}",
                    other.layout.dtype, other.layout.shape, self.layout.dtype, self.layout.shape
                ),
                doing,
            ));
        }
        let rb = self.layout.row_bytes();
        let step = (self.layout.block_rows.min((8 << 20) / rb)).max(1);
        let mut buf = vec![0u8; (step.min(other.rows()) * rb) as usize];
        let mut at = 0;
        while at < other.rows() {
            let n = step.min(other.rows() - at);
            let part = &mut buf[..(n * rb) as usize];
            other.read_rows(at, part)?;
            let end = self.rows();
            self.write_rows(end, part)?;
            at += n;
        }
        Ok(())
    }

    /// A new, empty block file for the working state.
    fn new_slot(&mut self) -> Result<Slot> {
        let generation = self.generation + 1;
        let header = self.writer_mut("cannot write to")?.header.clone();
        let (file, path) = loop {
            let w = self.writer_mut("cannot write to")?;
            w.seq += 1;
            let file = format!("blk-{generation:016x}-{:08x}.dt", w.seq);
            let path = self.dir.join(&file);
            // A name can be taken only by a block an earlier writer could
            // not remove (Windows removes no file a reader has open): the
            // next one is free.
            if std::fs::symlink_metadata(&path).is_err() {
                break (file, path);
            }
        };
        let handle = BlockFile::create(&path, &self.layout, &header)?;
        let slot = Slot {
            file,
            rows: 0,
            sha256: None,
            frozen: 0,
            committed: false,
            dirty: true,
            version: 0,
            handle: OnceLock::new(),
            pinned: Mutex::new(None),
            writeback: None,
        };
        let _ = slot.handle.set(Arc::new(handle));
        Ok(slot)
    }

    /// Replaces block `b` by a copy of its first `rows` rows in a new file.
    fn copy_on_write(&mut self, b: usize, rows: u64) -> Result<()> {
        let old = self.block(b)?;
        let mut slot = self.new_slot()?;
        slot.handle.get().map(|h| h.copy_rows_from(&old, &self.layout, rows)).transpose()?;
        slot.rows = rows;
        let previous = std::mem::replace(&mut self.slots[b], slot);
        drop(old);
        self.discard(previous);
        Ok(())
    }

    /// A block of `other` shared into this collection: hard-linked when
    /// `other` committed all of it (so its rows never change), else copied.
    fn shared_slot(&mut self, other: &Collection, b: usize) -> Result<Slot> {
        let theirs = &other.slots[b];
        let cap = self.layout.block_rows;
        if theirs.committed && theirs.frozen == cap && other.kind == CollectionKind::Deathtensors {
            let generation = self.generation + 1;
            let w = self.writer_mut("cannot extend")?;
            w.seq += 1;
            let file = format!("blk-{generation:016x}-{:08x}.dt", w.seq);
            let path = self.dir.join(&file);
            if std::fs::hard_link(other.dir.join(&theirs.file), &path).is_ok() {
                // Shared: never written in place, by either collection.
                return Ok(Slot {
                    file,
                    rows: cap,
                    sha256: theirs.sha256,
                    frozen: cap,
                    committed: false,
                    dirty: false,
                    version: 0,
                    handle: OnceLock::new(),
                    pinned: Mutex::new(None),
                    writeback: None,
                });
            }
        }
        let src = other.block(b)?;
        let mut slot = self.new_slot()?;
        slot.handle.get().map(|h| h.copy_rows_from(&src, &self.layout, cap)).transpose()?;
        slot.rows = cap;
        slot.sha256 = theirs.sha256.filter(|_| theirs.frozen == cap);
        Ok(slot)
    }

    /// Lets go of a block no longer in the working state: a committed file
    /// is removed after the next commit, any other at once.
    fn discard(&mut self, slot: Slot) {
        let Some(w) = self.writer.as_mut() else { return };
        if slot.committed {
            w.superseded.push(slot.file);
        } else {
            drop(slot.handle);
            let _ = std::fs::remove_file(self.dir.join(&slot.file));
        }
    }
}
