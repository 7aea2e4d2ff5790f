//! The state of an open collection: its rows' blocks (`Slot`), a writer's
//! state beside them, and the `Collection` that holds both. The types stand
//! alone so that the files implementing a collection (`commit.rs`,
//! `snapshot.rs`, `tensorblob.rs`) and `collection.rs`'s methods all name
//! them, and none of those files the others' parent.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use deathtensors_format::{BlockRef, Metadata, RowLayout};

use super::block::BlockFile;
use super::hasher;
use super::lock::WriterLock;
use crate::fs::writeback::Writeback;

/// What the directory at a path holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CollectionKind {
    /// A deathtensors collection (`collection.json`).
    Deathtensors,
    /// A directory written by tensorblob (`.conf` and `.stat`): read-only.
    Tensorblob,
}

/// One block in the working state.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) file: String,
    pub(super) rows: u64,
    pub(super) sha256: Option<[u8; 32]>,
    /// Rows that must not be written in place: those a committed manifest
    /// counts, or all of a block shared with another collection.
    pub(super) frozen: u64,
    /// Whether the last committed manifest names this file.
    pub(super) committed: bool,
    /// Whether the file has writes not yet synced.
    pub(super) dirty: bool,
    /// Counts writes to the block (keys background digests).
    pub(super) version: u64,
    pub(super) handle: OnceLock<Arc<BlockFile>>,
    /// A reader's descriptor of the block file, opened with its snapshot
    /// (see `snapshot.rs`) and checked into `handle` when first read.
    pub(super) pinned: Mutex<Option<std::fs::File>>,
    /// Hands the rows written since the last commit to the disk (durable
    /// writers), so that the commit's sync finds little left.
    pub(super) writeback: Option<Writeback>,
}

impl Slot {
    pub(super) fn from_ref(b: &BlockRef) -> Slot {
        Slot {
            file: b.file.clone(),
            rows: b.rows,
            sha256: b.sha256,
            frozen: b.rows,
            committed: true,
            dirty: false,
            version: 0,
            handle: OnceLock::new(),
            pinned: Mutex::new(None),
            writeback: None,
        }
    }
}

/// A writer's state beside the rows.
#[derive(Debug)]
pub(super) struct WriterState {
    pub(super) _lock: WriterLock,
    pub(super) durable: bool,
    /// The start of every new block file.
    pub(super) header: Vec<u8>,
    /// Committed files no longer in the working state: removed once a
    /// commit no longer names them.
    pub(super) superseded: Vec<String>,
    /// Names new block files.
    pub(super) seq: u64,
    /// Whether the working state differs from the committed one.
    pub(super) changed: bool,
    /// Hashes blocks as they fill.
    pub(super) hasher: hasher::Hasher,
}

/// An open collection: a snapshot of a committed state for a reader, the
/// working state (committed rows plus writes since) for the writer.
#[derive(Debug)]
pub struct Collection {
    pub(super) dir: PathBuf,
    pub(super) kind: CollectionKind,
    pub(super) layout: RowLayout,
    pub(super) metadata: Metadata,
    pub(super) generation: u64,
    pub(super) slots: Vec<Slot>,
    pub(super) writer: Option<WriterState>,
}
