//! Appendable collections with readers and writers at once: what a reader
//! opened at an older commit sees (its rows, whether or not it had read
//! them before the commit, never rows of another commit), readers opening
//! while a writer commits, and the one-writer lock across threads.

use std::path::Path;
use std::sync::{Arc, Barrier};

use deathtensors_io::format::{Dtype, RowLayout};
use deathtensors_io::{Collection, CollectionOptions, ErrorKind};

const WIDTH: usize = 2;

/// Row `i` with a `salt` that tells commits apart.
fn rows(range: std::ops::Range<u64>, salt: u8) -> Vec<u8> {
    range.flat_map(|i| [i as u8, salt]).collect()
}

fn read(c: &Collection, start: u64, n: u64) -> Vec<u8> {
    let mut out = vec![0u8; n as usize * WIDTH];
    c.read_rows(start, &mut out).unwrap();
    out
}

/// A collection of `n` rows (salt 0) in blocks of 3, committed, and its
/// writer.
fn made(name: &str, n: u64) -> (crate::Scratch, Collection) {
    let dir = crate::scratch(&format!("coll-snap-{name}"));
    let layout = RowLayout::new(Dtype::U8, vec![WIDTH as u64], 3).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions { durable: false }).unwrap();
    w.write_rows(0, &rows(0..n, 0)).unwrap();
    w.flush().unwrap();
    (dir, w)
}

fn block_name(c: &Collection, b: usize) -> String {
    c.blocks()[b].path.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn reader_keeps_its_snapshot_read_or_not_after_newer_commits() {
    let (dir, mut w) = made("keep", 7);
    let mut r = Collection::open(&dir).unwrap();
    let (a, b, c) = (block_name(&r, 0), block_name(&r, 1), block_name(&r, 2));
    let generation = r.generation();
    // The reader opens blocks 0 and 2, not block 1.
    assert_eq!(read(&r, 0, 3), rows(0..3, 0));
    assert_eq!(read(&r, 6, 1), rows(6..7, 0));

    // Overwrite in block 0, truncate into block 1 (dropping block 2), commit.
    w.write_rows(1, &rows(1..2, 1)).unwrap();
    w.truncate(5).unwrap();
    // Before the commit nothing changes for readers.
    assert_eq!(read(&Collection::open(&dir).unwrap(), 0, 7), rows(0..7, 0));
    assert_eq!(read(&r, 0, 3), rows(0..3, 0));
    w.flush().unwrap();
    let now: Vec<String> = (0..2).map(|i| block_name(&w, i)).collect();
    assert!(!now.contains(&a) && !now.contains(&b), "blocks 0 and 1 were copied: {now:?}");
    for old in [&a, &b, &c] {
        // Windows removes no file a reader has open: there they go at the
        // first commit after the reader closed them (below).
        assert!(cfg!(windows) || !dir.join(old).exists(), "{old} must be removed by the commit");
    }

    // The blocks it opened still read its rows, copied or mapped.
    assert_eq!(r.rows(), 7);
    assert_eq!(r.generation(), generation);
    assert_eq!(read(&r, 0, 3), rows(0..3, 0));
    assert_eq!(read(&r, 6, 1), rows(6..7, 0));
    let mut out = vec![0u8; 2 * WIDTH];
    r.gather(&[6, 2], &mut out).unwrap();
    assert_eq!(out, [rows(6..7, 0), rows(2..3, 0)].concat());
    // SAFETY: committed rows are never changed in place.
    let view = unsafe { r.view(0, 3) }.unwrap();
    assert_eq!(view.bytes(), rows(0..3, 0));

    // Block 1 it never read was pinned when it opened: its rows, whichever
    // way it asks, though the commit removed the file.
    assert_eq!(read(&r, 3, 1), rows(3..4, 0));
    assert_eq!(read(&r, 0, 7), rows(0..7, 0));
    let mut out = vec![0u8; 2 * WIDTH];
    r.gather(&[0, 4], &mut out).unwrap();
    assert_eq!(out, [rows(0..1, 0), rows(4..5, 0)].concat());
    // SAFETY: as above.
    assert_eq!(unsafe { r.view(3, 1) }.unwrap().bytes(), rows(3..4, 0));
    assert_eq!(r.verify().unwrap(), 2, "both full blocks of the snapshot hashed");

    // refresh() shows the new state, the view of the old one still lives.
    assert!(r.refresh().unwrap());
    assert_eq!(r.generation(), w.generation());
    assert_eq!(r.rows(), 5);
    let mut want = rows(0..5, 0);
    want[WIDTH..2 * WIDTH].copy_from_slice(&rows(1..2, 1));
    assert_eq!(read(&r, 0, 5), want);
    assert_eq!(r.verify().unwrap(), 1);
    assert!(!r.refresh().unwrap(), "nothing new");
    assert_eq!(view.bytes(), rows(0..3, 0));
    drop(view);
    assert_eq!(read(&Collection::open(&dir).unwrap(), 0, 5), want);
    // The old blocks are closed now (refreshed, the view dropped): on every
    // system none is left after the next commit.
    w.write_rows(5, &rows(5..6, 0)).unwrap();
    w.flush().unwrap();
    for old in [&a, &b, &c] {
        assert!(!dir.join(old).exists(), "{old} must be removed once closed");
    }
    drop((r, w));
}

#[test]
fn reader_of_a_partial_block_ignores_rows_appended_in_place() {
    let (dir, mut w) = made("append", 4);
    let mut r = Collection::open(&dir).unwrap();
    assert_eq!(read(&r, 0, 4), rows(0..4, 0));
    let partial = block_name(&r, 1);
    // Appending fills the committed partial block in place.
    w.write_rows(4, &rows(4..8, 0)).unwrap();
    assert_eq!(block_name(&w, 1), partial, "an append past the committed rows is made in place");
    w.flush().unwrap();
    assert_eq!(r.rows(), 4);
    assert_eq!(read(&r, 0, 4), rows(0..4, 0));
    let past = r.read_rows(4, &mut [0u8; WIDTH]).unwrap_err();
    assert!(matches!(past.kind(), ErrorKind::InvalidInput(_)) && past.to_string().contains("past the end"), "{past}");
    assert!(r.refresh().unwrap());
    assert_eq!(read(&r, 0, 8), rows(0..8, 0));
    r.verify().unwrap();
    drop(w);
}

#[test]
fn reader_does_not_see_uncommitted_writes_nor_a_writer_dropped_without_flush() {
    let (dir, mut w) = made("uncommitted", 5);
    let r = Collection::open(&dir).unwrap();
    assert_eq!(read(&r, 0, 5), rows(0..5, 0));
    w.write_rows(2, &rows(2..9, 7)).unwrap();
    w.truncate(8).unwrap();
    assert_eq!(w.rows(), 8);
    assert_eq!(read(&w, 0, 8), [rows(0..2, 0), rows(2..8, 7)].concat());
    let fresh = Collection::open(&dir).unwrap();
    assert_eq!(fresh.rows(), 5);
    assert_eq!(read(&fresh, 0, 5), rows(0..5, 0));
    drop(w);
    let mut fresh = Collection::open(&dir).unwrap();
    assert!(!fresh.refresh().unwrap());
    assert_eq!(read(&fresh, 0, 5), rows(0..5, 0));
    assert_eq!(read(&r, 0, 5), rows(0..5, 0));
    // The next writer starts from the commit.
    let w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    assert_eq!(read(&w, 0, 5), rows(0..5, 0));
}

#[test]
fn refresh_after_the_collection_is_replaced_with_another_layout() {
    let (dir, w) = made("replaced", 5);
    let mut r = Collection::open(&dir).unwrap();
    drop(w);
    let layout = RowLayout::new(Dtype::F32, vec![1], 2).unwrap();
    let mut w = Collection::create(&dir, layout.clone(), CollectionOptions::default()).unwrap();
    w.write_rows(0, &1.5f32.to_le_bytes()).unwrap();
    assert!(!r.refresh().unwrap(), "not committed yet");
    assert_eq!(r.layout().dtype, Dtype::U8);
    w.flush().unwrap();
    assert!(r.refresh().unwrap());
    assert_eq!(r.layout(), &layout);
    assert_eq!(r.rows(), 1);
    let mut out = [0u8; 4];
    r.read_rows(0, &mut out).unwrap();
    assert_eq!(f32::from_le_bytes(out), 1.5);
    drop(w);
}

fn is_locked(dir: &Path) -> bool {
    match Collection::open_writable(dir, CollectionOptions::default()) {
        Ok(_) => false,
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e.kind(), ErrorKind::Locked(_)), "{msg}");
            assert!(msg.contains("writer.lock") && msg.contains("one writer at a time"), "{msg}");
            assert!(!e.is_invalid_file());
            true
        }
    }
}

#[test]
fn a_second_writer_in_another_thread_is_refused_until_the_first_is_dropped() {
    let (dir, w) = made("lock-thread", 2);
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        assert!(is_locked(&d));
        let layout = RowLayout::new(Dtype::U8, vec![WIDTH as u64], 3).unwrap();
        let err = Collection::create(&d, layout, CollectionOptions::default()).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Locked(_)), "{err}");
        // Readers need no lock.
        assert_eq!(Collection::open(&d).unwrap().rows(), 2);
    })
    .join()
    .unwrap();
    // The refused attempts changed nothing.
    assert_eq!(read(&w, 0, 2), rows(0..2, 0));
    drop(w);
    let d = dir.to_path_buf();
    std::thread::spawn(move || {
        let mut w = Collection::open_writable(&d, CollectionOptions::default()).unwrap();
        w.write_rows(2, &rows(2..3, 0)).unwrap();
        w.flush().unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(read(&Collection::open(&dir).unwrap(), 0, 3), rows(0..3, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writers_racing_for_the_lock_get_it_one_at_a_time() {
    let (dir, w) = made("lock-race", 1);
    drop(w);
    const THREADS: usize = 8;
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let (dir, barrier) = (dir.to_path_buf(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let got = Collection::open_writable(&dir, CollectionOptions::default());
                if let Err(e) = &got {
                    assert!(matches!(e.kind(), ErrorKind::Locked(_)), "{e}");
                }
                // Hold the lock until every thread has tried.
                barrier.wait();
                got.is_ok()
            })
        })
        .collect();
    let winners = handles.into_iter().map(|h| h.join().unwrap()).filter(|&won| won).count();
    assert_eq!(winners, 1);
    assert!(!is_locked(&dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_writer_that_panics_releases_the_lock() {
    let (dir, w) = made("lock-panic", 1);
    drop(w);
    let d = dir.to_path_buf();
    let panicked = std::thread::spawn(move || {
        let mut w = Collection::open_writable(&d, CollectionOptions::default()).unwrap();
        w.write_rows(1, &rows(1..2, 9)).unwrap();
        // The writer dies before its commit (unwinding without the panic
        // hook keeps the test output quiet).
        std::panic::resume_unwind(Box::new(()));
    })
    .join();
    assert!(panicked.is_err());
    assert!(!is_locked(&dir));
    assert_eq!(read(&Collection::open(&dir).unwrap(), 0, 1), rows(0..1, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn readers_opening_while_a_writer_commits_always_get_a_committed_state() {
    // The writer rewrites every row (each commit replaces every block file
    // and removes the old ones) and appends, as fast as it can; readers
    // open, refresh and read all the while. Each read must be one commit's
    // rows: row i is [i, salt], one salt throughout.
    let (dir, mut w) = made("race", 9);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|k| {
            let (dir, stop) = (dir.to_path_buf(), stop.clone());
            std::thread::spawn(move || {
                let (mut opens, mut reads) = (0u64, 0u64);
                let mut r: Option<Collection> = None;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let c = match r.as_mut() {
                        Some(c) if (opens + reads + k) % 3 == 0 => {
                            c.refresh().unwrap_or_else(|e| panic!("refresh failed: {e}"));
                            c
                        }
                        _ => {
                            opens += 1;
                            r.insert(Collection::open(&dir).unwrap_or_else(|e| panic!("open failed: {e}")))
                        }
                    };
                    let n = c.rows();
                    let mut out = vec![0u8; n as usize * WIDTH];
                    c.read_rows(0, &mut out).unwrap_or_else(|e| panic!("read failed: {e}"));
                    reads += 1;
                    let salt = out.get(1).copied().unwrap_or(0);
                    assert_eq!(out, rows(0..n, salt), "a read mixed commits");
                    if reads % 2 == 0 {
                        r = None;
                    }
                }
                (opens, reads)
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut n = 9;
    let mut commits = 0u64;
    while std::time::Instant::now() < deadline {
        commits += 1;
        let salt = (commits % 250) as u8 + 1;
        if commits.is_multiple_of(5) {
            n += 2;
        }
        w.write_rows(0, &rows(0..n, salt)).unwrap();
        w.flush().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut opens, mut reads) = (0, 0);
    for r in readers {
        let (o, k) = r.join().expect("a reader failed");
        opens += o;
        reads += k;
    }
    eprintln!("{commits} commits; readers: {opens} opens, {reads} reads, 0 failures");
    assert!(commits > 20 && reads > 20, "{commits} commits, {reads} reads: no race was run");
    drop(w);
    std::fs::remove_dir_all(&dir).unwrap();
}
