//! Appendable collections against a model: random sequences of writes,
//! truncates, commits, crashes (a writer dropped without flush), extends and
//! reopens, checked after every step against a `Vec` of rows and a copy of
//! it taken at each commit.
//!
//! Besides the rows, each step checks the copy-on-write promise: readers
//! opened at earlier commits (with every block already open) keep reading
//! their rows whatever the writer does. After each commit the directory holds
//! exactly the manifest, the lock and the blocks the manifest names, and the
//! committed state verifies.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use deathtensors_io::format::{Dtype, Metadata, RowLayout};
use deathtensors_io::{Collection, CollectionOptions};
use proptest::prelude::*;

/// Where extended rows come from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Another collection's writer, some of its rows not committed.
    OtherWriter,
    /// A reader of another collection's committed rows.
    OtherReader,
    /// A fresh reader of this collection's committed rows.
    SelfReader,
    /// The oldest reader snapshot of this collection.
    Snapshot,
}

#[derive(Clone, Debug)]
enum Op {
    /// Writes `rows` rows from `at % (rows() + 1)`, or with `near_end` from
    /// `at % (2 * block_rows + 1)` rows before the end: overwrite and append.
    Write {
        at: u16,
        near_end: bool,
        rows: u8,
    },
    /// Writes `rows` rows at the end.
    Append {
        rows: u8,
    },
    /// Truncates to `at % (rows() + 1)`, or with `near_end` by
    /// `at % (2 * block_rows + 1)` rows.
    Truncate {
        at: u16,
        near_end: bool,
    },
    Flush,
    /// Drops the writer without flushing, then reopens it.
    Crash,
    /// Appends another collection's rows with `extend_rows`. For another
    /// collection: `rows` rows of which `committed` are flushed, in blocks
    /// of `block_rows`.
    ExtendRows {
        source: Source,
        rows: u8,
        committed: u8,
        block_rows: u8,
    },
    /// Appends another collection's rows with `extend_blocks`.
    ExtendBlocks {
        source: Source,
        rows: u8,
        committed: u8,
    },
    /// Opens a fresh reader and checks it shows the committed state.
    Reopen,
    /// Refreshes the oldest snapshot.
    Refresh,
    /// Drops the writer and creates the collection afresh over the old one.
    CreateOver,
    /// Replaces the metadata.
    Metadata(u8),
}

fn source() -> impl Strategy<Value = Source> {
    prop_oneof![Just(Source::OtherWriter), Just(Source::OtherReader), Just(Source::SelfReader), Just(Source::Snapshot)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u16>(), any::<bool>(), 0u8..9).prop_map(|(at, near_end, rows)| Op::Write { at, near_end, rows }),
        3 => (1u8..9).prop_map(|rows| Op::Append { rows }),
        3 => (any::<u16>(), any::<bool>()).prop_map(|(at, near_end)| Op::Truncate { at, near_end }),
        4 => Just(Op::Flush),
        2 => Just(Op::Crash),
        1 => (source(), 0u8..12, any::<u8>(), 1u8..6).prop_map(|(source, rows, c, block_rows)| {
            Op::ExtendRows { source, rows, committed: c % (rows + 1), block_rows }
        }),
        2 => (source(), 0u8..16, any::<u8>()).prop_map(|(source, rows, c)| {
            Op::ExtendBlocks { source, rows, committed: c % (rows + 1) }
        }),
        1 => Just(Op::Reopen),
        1 => Just(Op::Refresh),
        1 => Just(Op::CreateOver),
        1 => any::<u8>().prop_map(Op::Metadata),
    ]
}

static CASE: AtomicUsize = AtomicUsize::new(0);

/// Removes a directory when dropped, also when a check panics.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The collection under test and its model.
struct Harness {
    dir: PathBuf,
    layout: RowLayout,
    options: CollectionOptions,
    /// Bytes per row.
    width: usize,
    w: Option<Collection>,
    /// The writer's rows, one after another.
    model: Vec<u8>,
    metadata: Metadata,
    /// The rows and metadata of the last commit.
    committed: Vec<u8>,
    committed_metadata: Metadata,
    /// Readers opened at earlier commits, every block opened, with the rows
    /// they must keep showing (oldest first).
    snapshots: Vec<(Collection, Vec<u8>)>,
    /// Makes the bytes of every write different.
    tag: u32,
    /// Numbers the other collections.
    others: usize,
}

impl Harness {
    fn new(dir: PathBuf, width: usize, block_rows: u64, durable: bool) -> Harness {
        let layout = RowLayout::new(Dtype::U8, vec![width as u64], block_rows).unwrap();
        let options = CollectionOptions { durable };
        let w = Collection::create(&dir, layout.clone(), options.clone()).unwrap();
        let h = Harness {
            dir,
            layout,
            options,
            width,
            w: Some(w),
            model: Vec::new(),
            metadata: Metadata::new(),
            committed: Vec::new(),
            committed_metadata: Metadata::new(),
            snapshots: Vec::new(),
            tag: 0,
            others: 0,
        };
        h.check_committed();
        h
    }

    fn w(&mut self) -> &mut Collection {
        self.w.as_mut().unwrap()
    }

    fn rows(&self) -> u64 {
        (self.model.len() / self.width) as u64
    }

    /// `n` rows no write has made before.
    fn fresh_rows(&mut self, n: usize) -> Vec<u8> {
        self.tag += 1;
        let tag = self.tag;
        (0..n * self.width)
            .map(|i| (tag.wrapping_mul(89) ^ (i as u32).wrapping_mul(7)).wrapping_add(i as u32) as u8)
            .collect()
    }

    /// A row from 0 to `rows()`, within two blocks of the end if `near_end`.
    fn pick(&self, at: u16, near_end: bool) -> u64 {
        if near_end {
            self.rows().saturating_sub(u64::from(at) % (2 * self.layout.block_rows + 1))
        } else {
            u64::from(at) % (self.rows() + 1)
        }
    }

    fn apply(&mut self, op: &Op) {
        let width = self.width;
        match *op {
            Op::Write { at, near_end, rows } => {
                let start = self.pick(at, near_end);
                let data = self.fresh_rows(rows as usize);
                self.w().write_rows(start, &data).unwrap();
                let s = start as usize * width;
                let keep = self.model.len().min(s + data.len());
                self.model.splice(s..keep, data);
            }
            Op::Append { rows } => {
                let data = self.fresh_rows(rows as usize);
                let end = self.rows();
                self.w().write_rows(end, &data).unwrap();
                self.model.extend_from_slice(&data);
            }
            Op::Truncate { at, near_end } => {
                let rows = self.pick(at, near_end);
                self.w().truncate(rows).unwrap();
                self.model.truncate(rows as usize * width);
            }
            Op::Flush => self.flush(),
            Op::Crash => {
                drop(self.w.take());
                self.model = self.committed.clone();
                self.metadata = self.committed_metadata.clone();
                check_reader(&Collection::open(&self.dir).unwrap(), &self.committed, width);
                self.w = Some(Collection::open_writable(&self.dir, self.options.clone()).unwrap());
                // Opening for writing removed what the dropped writer left.
                self.check_files();
            }
            Op::ExtendRows { source, rows, committed, block_rows } => {
                self.extend(source, rows, committed, u64::from(block_rows), false);
            }
            Op::ExtendBlocks { source, rows, committed } => {
                let block_rows = self.layout.block_rows;
                self.extend(source, rows, committed, block_rows, true);
            }
            Op::Reopen => self.check_committed(),
            Op::Refresh => {
                if self.snapshots.is_empty() {
                    return;
                }
                let (mut r, _) = self.snapshots.remove(0);
                r.refresh().unwrap();
                assert_eq!(r.generation(), self.w.as_ref().unwrap().generation());
                check_reader(&r, &self.committed, width);
                assert_eq!(r.metadata(), &self.committed_metadata);
                self.snapshots.push((r, self.committed.clone()));
            }
            Op::CreateOver => {
                drop(self.w.take());
                self.w = Some(Collection::create(&self.dir, self.layout.clone(), self.options.clone()).unwrap());
                self.model.clear();
                self.metadata.clear();
                // Until the next commit the old rows stay committed.
                check_reader(&Collection::open(&self.dir).unwrap(), &self.committed, width);
                self.check_files();
            }
            Op::Metadata(v) => {
                let metadata: Metadata = [("v".to_string(), v.to_string())].into();
                self.w().set_metadata(metadata.clone()).unwrap();
                self.metadata = metadata;
            }
        }
    }

    fn flush(&mut self) {
        self.w().flush().unwrap();
        assert!(!self.w.as_ref().unwrap().has_changes());
        self.committed = self.model.clone();
        self.committed_metadata = self.metadata.clone();
        self.check_committed();
        self.check_files();
        let r = Collection::open(&self.dir).unwrap();
        // Reading every row opens every block: from now on the snapshot
        // reads through its open files.
        check_reader(&r, &self.committed, self.width);
        self.snapshots.push((r, self.committed.clone()));
        if self.snapshots.len() > 3 {
            self.snapshots.remove(0);
        }
    }

    /// Extends from `source`; `blocks` picks `extend_blocks` over
    /// `extend_rows`.
    fn extend(&mut self, source: Source, rows: u8, committed: u8, block_rows: u64, blocks: bool) {
        let width = self.width;
        let cap = self.layout.block_rows as usize * width;
        // Returns the rows that may share files with the source.
        let apply = |model: &mut Vec<u8>, theirs: &[u8]| {
            if blocks {
                // Our full blocks, their full blocks, then both tails.
                let (mine_full, their_full) = (model.len() / cap * cap, theirs.len() / cap * cap);
                let tail = model.split_off(mine_full);
                model.extend_from_slice(&theirs[..their_full]);
                model.extend_from_slice(&tail);
                model.extend_from_slice(&theirs[their_full..]);
                (mine_full / width) as u64..((mine_full + their_full) / width) as u64
            } else {
                model.extend_from_slice(theirs);
                0..0
            }
        };
        let run = |w: &mut Collection, other: &Collection| {
            if blocks {
                w.extend_blocks(other).unwrap();
            } else {
                w.extend_rows(other).unwrap();
            }
        };
        match source {
            Source::SelfReader => {
                let r = Collection::open(&self.dir).unwrap();
                run(self.w.as_mut().unwrap(), &r);
                apply(&mut self.model, &self.committed);
            }
            Source::Snapshot => {
                let Some((r, theirs)) = self.snapshots.first() else { return };
                run(self.w.as_mut().unwrap(), r);
                apply(&mut self.model, theirs);
            }
            Source::OtherWriter | Source::OtherReader => {
                self.others += 1;
                let other_dir = PathBuf::from(format!("{}-other-{}", self.dir.display(), self.others));
                let _cleanup = Scratch(other_dir.clone());
                let layout = RowLayout::new(Dtype::U8, vec![width as u64], block_rows).unwrap();
                let mut ow = Collection::create(&other_dir, layout, CollectionOptions { durable: false }).unwrap();
                let data = self.fresh_rows(rows as usize);
                let split = committed as usize * width;
                ow.write_rows(0, &data[..split]).unwrap();
                ow.flush().unwrap();
                ow.write_rows(committed.into(), &data[split..]).unwrap();
                let shared = if let Source::OtherWriter = source {
                    run(self.w.as_mut().unwrap(), &ow);
                    apply(&mut self.model, &data)
                } else {
                    let r = Collection::open(&other_dir).unwrap();
                    run(self.w.as_mut().unwrap(), &r);
                    apply(&mut self.model, &data[..split])
                };
                self.check_writer();
                // Blocks shared with the other collection are never changed
                // in place: not by our writer...
                let new = self.fresh_rows((shared.end - shared.start) as usize);
                self.w().write_rows(shared.start, &new).unwrap();
                let at = shared.start as usize * width;
                self.model[at..at + new.len()].copy_from_slice(&new);
                check_reader(&Collection::open(&other_dir).unwrap(), &data[..split], width);
                check_reader(&ow, &data, width);
                // ...and not by its writer.
                let junk = self.fresh_rows(rows as usize);
                ow.write_rows(0, &junk).unwrap();
                ow.flush().unwrap();
                self.check_writer();
                check_reader(&Collection::open(&other_dir).unwrap(), &junk, width);
                drop(ow);
            }
        }
    }

    /// The writer shows the model, and every snapshot its rows.
    fn check_writer(&self) {
        let w = self.w.as_ref().unwrap();
        assert!(w.is_writable());
        assert_eq!(w.metadata(), &self.metadata);
        check_reader(w, &self.model, self.width);
        for (r, rows) in &self.snapshots {
            let mut out = vec![0u8; rows.len()];
            r.read_rows(0, &mut out).unwrap();
            assert!(out == *rows, "a snapshot of generation {} changed", r.generation());
        }
    }

    /// A fresh reader shows the committed state, which verifies, and whose
    /// committed rows map.
    fn check_committed(&self) {
        let r = Collection::open(&self.dir).unwrap();
        assert!(!r.is_writable());
        check_reader(&r, &self.committed, self.width);
        assert_eq!(r.metadata(), &self.committed_metadata);
        let cap = self.layout.block_rows;
        let rows = r.rows();
        // After a commit every full block has a digest.
        assert_eq!(r.verify().unwrap(), rows / cap);
        let blocks = r.blocks();
        assert_eq!(blocks.len() as u64, rows.div_ceil(cap));
        for (b, info) in blocks.iter().enumerate() {
            assert!(info.committed);
            assert_eq!(info.sha256.is_some(), info.rows == cap, "block {b}");
            let start = b as u64 * cap;
            // SAFETY: our writer never changes committed rows in place, and
            // nothing else touches the directory.
            let view = unsafe { r.view(start, info.rows) }.unwrap();
            let at = start as usize * self.width;
            assert!(view.bytes() == &self.committed[at..at + view.bytes().len()], "view of block {b}");
        }
    }

    /// The directory holds the manifest, the lock and the committed blocks,
    /// nothing else.
    fn check_files(&self) {
        let r = Collection::open(&self.dir).unwrap();
        let mut want: BTreeSet<String> =
            r.blocks().iter().map(|b| b.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        want.insert("collection.json".into());
        want.insert("writer.lock".into());
        let have: BTreeSet<String> = crate::entries(&self.dir).into_iter().collect();
        if cfg!(windows) {
            // Windows removes no file a reader has open: block files the
            // snapshots' readers held at a commit outlive it (the first
            // commit after they closed removes them). Nothing else is left.
            assert!(want.is_subset(&have), "files in {}: {have:?}, {want:?} expected", self.dir.display());
            let extra: Vec<&String> =
                have.difference(&want).filter(|f| !(f.starts_with("blk-") && f.ends_with(".dt"))).collect();
            assert!(extra.is_empty(), "files in {}: {extra:?} are not superseded blocks", self.dir.display());
            return;
        }
        assert_eq!(have, want, "files in {}", self.dir.display());
    }
}

/// `r` holds `model`: its row count, all rows at once, windows across block
/// boundaries, and gathers.
#[track_caller]
fn check_reader(r: &Collection, model: &[u8], width: usize) {
    let rows = (model.len() / width) as u64;
    assert_eq!(r.rows(), rows);
    let mut out = vec![0u8; model.len()];
    r.read_rows(0, &mut out).unwrap();
    assert!(out == model, "rows differ: {out:?} != {model:?}");
    if rows == 0 {
        return;
    }
    let row = |i: u64| &model[i as usize * width..(i as usize + 1) * width];
    // Windows of a few lengths from about 30 starts (all of them in small
    // collections), the last rows included.
    let step = 1 + rows as usize / 30;
    for start in (0..rows).rev().step_by(step) {
        let n = (rows - start).min(1 + start % 7);
        let mut out = vec![0u8; n as usize * width];
        r.read_rows(start, &mut out).unwrap();
        assert!(out == model[start as usize * width..(start + n) as usize * width], "rows {start}..{}", start + n);
    }
    // Gathers: backwards, a consecutive run crossing blocks, repeats.
    let mut indices: Vec<u64> = (0..rows).rev().collect();
    indices.extend(rows / 3..rows.min(rows / 3 + 6));
    indices.extend([rows - 1, 0, rows - 1, rows / 2]);
    let mut out = vec![0u8; indices.len() * width];
    r.gather(&indices, &mut out).unwrap();
    let want: Vec<u8> = indices.iter().flat_map(|&i| row(i).to_vec()).collect();
    assert!(out == want, "gather {indices:?}");
}

fn run(ops: &[Op], width: usize, block_rows: u64, durable: bool) {
    let n = CASE.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("dt-io-{}-coll-model-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _cleanup = Scratch(dir.clone());
    let mut h = Harness::new(dir, width, block_rows, durable);
    for op in ops {
        h.apply(op);
        h.check_writer();
    }
    h.flush();
    drop(h.w.take());
    h.check_files();
    // A last writer finds nothing to clean.
    let w = Collection::open_writable(&h.dir, h.options.clone()).unwrap();
    assert!(!w.has_changes());
    check_reader(&w, &h.committed, width);
    drop(w);
    h.check_files();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn collection_matches_its_model(
        width in 1usize..5,
        block_rows in 1u64..6,
        durable in proptest::bool::weighted(0.1),
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        run(&ops, width, block_rows, durable);
    }
}

/// Sequences that once found or nearly found problems, kept as plain tests.
#[test]
fn model_regressions() {
    use Op::*;
    let cases: Vec<(usize, u64, Vec<Op>)> = vec![
        // Overwrite a committed partial block, append in place past it,
        // truncate below the committed rows, crash.
        (
            2,
            3,
            vec![
                Append { rows: 2 },
                Flush,
                Write { at: 1, near_end: false, rows: 3 },
                Truncate { at: 1, near_end: false },
                Crash,
                Append { rows: 4 },
            ],
        ),
        // Append in place to a committed partial block, then overwrite its
        // committed rows: the copy must take the new rows too.
        (2, 4, vec![Append { rows: 1 }, Flush, Append { rows: 2 }, Write { at: 0, near_end: false, rows: 1 }, Flush]),
        // Truncate into a committed block, commit, append in place: the
        // older commit's rows must not change (the truncate copied).
        (1, 4, vec![Append { rows: 3 }, Flush, Truncate { at: 1, near_end: false }, Flush, Append { rows: 2 }]),
        // Extend from our own committed blocks (hard links in the same
        // directory), then overwrite the originals.
        (
            1,
            2,
            vec![
                Append { rows: 5 },
                Flush,
                ExtendBlocks { source: Source::SelfReader, rows: 0, committed: 0 },
                Write { at: 0, near_end: false, rows: 4 },
                Flush,
                Truncate { at: 3, near_end: false },
                Flush,
            ],
        ),
        // Extend from a snapshot whose blocks a later commit superseded.
        (
            3,
            1,
            vec![
                Append { rows: 3 },
                Flush,
                Write { at: 0, near_end: false, rows: 3 },
                Flush,
                ExtendBlocks { source: Source::Snapshot, rows: 0, committed: 0 },
                ExtendRows { source: Source::Snapshot, rows: 0, committed: 0, block_rows: 1 },
                Flush,
            ],
        ),
        // Blocks made and dropped before any commit leave no file.
        (3, 1, vec![Append { rows: 3 }, Truncate { at: 1, near_end: false }, Flush]),
        // Share another collection's committed blocks, then write to them.
        (
            2,
            2,
            vec![
                Append { rows: 1 },
                ExtendBlocks { source: Source::OtherReader, rows: 5, committed: 4 },
                ExtendBlocks { source: Source::OtherWriter, rows: 5, committed: 2 },
                Flush,
            ],
        ),
        // Replace the collection, crash before the commit, then replace and
        // commit.
        (2, 4, vec![Append { rows: 6 }, Flush, CreateOver, Append { rows: 1 }, Crash, CreateOver, Flush]),
    ];
    for (width, block_rows, ops) in cases {
        run(&ops, width, block_rows, false);
    }
}
