//! What a durable write hands to the disk and when it waits, and that the
//! bytes land where they belong either way.

use std::io::BufWriter;
use std::path::PathBuf;

use super::SyncRange::{Start, Wait};
use super::*;

const MIB: u64 = 1 << 20;

fn bytes(len: u64, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

/// A new empty file for one test, and where it is.
fn scratch(tag: &str) -> (PathBuf, File) {
    let dir = std::env::temp_dir().join(format!("dt-writeback-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f");
    let file = File::options().create(true).truncate(true).read(true).write(true).open(&path).unwrap();
    (dir, file)
}

/// The file holds `expected`; closes and removes it (Windows removes no
/// folder with an open file in it).
#[track_caller]
fn check(dir: PathBuf, file: File, expected: &[u8]) {
    drop(file);
    let got = std::fs::read(dir.join("f")).unwrap();
    assert!(got == expected, "the file differs from what was written ({} vs {} bytes)", got.len(), expected.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[track_caller]
fn check_log(w: &Writeback, expected: &[(SyncRange, Range<u64>)]) {
    if cfg!(target_os = "linux") {
        assert_eq!(w.log, expected);
    } else {
        assert!(w.log.is_empty());
    }
}

#[test]
fn a_sequential_write_hands_over_every_chunk_and_the_cursor_ends_at_its_end() {
    let (dir, file) = scratch("sequential");
    let pieces = [bytes(100, 1), bytes(10 * MIB + 3, 2), bytes(5, 3), bytes(3 * MIB, 4)];
    let mut out = BufWriter::with_capacity(MIB as usize, Sequential::for_write(&file, &WriteOptions::default(), 0));
    for p in &pieces {
        out.write_all(p).unwrap();
    }
    out.flush().unwrap();
    let writeback = out.into_inner().unwrap().writeback;
    // A write through the cursor after it (the footer) lands at the end.
    (&file).write_all(b"footer").unwrap();
    // The buffer passes large pieces straight through, cut at multiples of
    // a chunk; the last MiB is left to the fsync.
    check_log(&writeback, &[(Start, 0..CHUNK), (Start, CHUNK..2 * CHUNK), (Start, 2 * CHUNK..3 * CHUNK)]);
    let mut expected = pieces.concat();
    expected.extend_from_slice(b"footer");
    check(dir, file, &expected);
}

#[test]
fn the_writer_waits_for_the_ranges_it_wrote_lag_bytes_before() {
    let (dir, file) = scratch("lag");
    let data = bytes(LAG + 2 * CHUNK, 5);
    let mut w = Writeback::new(true);
    for (k, piece) in data.chunks(MIB as usize).enumerate() {
        w.write_at(&file, piece, k as u64 * MIB).unwrap();
    }
    let chunks = (LAG + 2 * CHUNK) / CHUNK;
    let mut expected: Vec<_> = (0..chunks).map(|k| (Start, k * CHUNK..(k + 1) * CHUNK)).collect();
    // Started LAG + CHUNK bytes: the oldest chunk is waited for, and so on.
    expected.insert(33, (Wait, 0..CHUNK));
    expected.push((Wait, CHUNK..2 * CHUNK));
    check_log(&w, &expected);
    check(dir, file, &data);
}

#[test]
fn scattered_writes_hand_over_large_ranges_and_leave_small_ones_to_the_fsync() {
    let (dir, file) = scratch("scattered");
    let mut w = Writeback::new(true);
    let mut expected = vec![0u8; (20 * MIB + 100) as usize];
    let mut write = |at: u64, data: Vec<u8>| {
        w.write_at(&file, &data, at).unwrap();
        expected[at as usize..at as usize + data.len()].copy_from_slice(&data);
    };
    write(10 * MIB, bytes(5 * MIB, 6)); // up to the chunk boundary at 12 MiB goes
    write(0, bytes(100, 7)); // elsewhere: the pending 3 MiB go
    write(164, bytes(MIB, 8)); // after a gap of 64 bytes: the same range
    write(20 * MIB, bytes(100, 9)); // elsewhere: 0..1 MiB + 164 goes
    write(5 * MIB, bytes(100, 10)); // elsewhere: 100 bytes stay for the fsync
    check_log(&w, &[(Start, 10 * MIB..12 * MIB), (Start, 12 * MIB..15 * MIB), (Start, 0..MIB + 164)]);
    check(dir, file, &expected);
}

#[test]
fn a_write_that_is_not_durable_hands_nothing_over() {
    let (dir, file) = scratch("not-durable");
    let data = bytes(3 * CHUNK, 11);
    let mut w = Writeback::new(false);
    w.write_at(&file, &data, 0).unwrap();
    assert!(w.log.is_empty());
    // Sequential writes at the file's position, which Windows' positioned
    // writes move (unix's do not): put it where `for_write` is told it is.
    std::io::Seek::seek(&mut &file, std::io::SeekFrom::Start(0)).unwrap();
    let mut seq = Sequential::for_write(&file, &WriteOptions { durable: false, ..WriteOptions::default() }, 0);
    // The whole buffer in one write, as without a writeback.
    assert_eq!(seq.write(&data).unwrap(), data.len());
    assert!(seq.writeback.log.is_empty());
    check(dir, file, &data);
}

#[test]
fn a_file_without_writeback_turns_it_off() {
    // /dev/null takes writes but not sync_file_range (ESPIPE).
    let Ok(null) = File::options().write(true).open("/dev/null") else { return };
    let mut w = Writeback::new(true);
    w.write_at(&null, &bytes(2 * CHUNK, 12), 0).unwrap();
    assert!(!w.on);
    assert!(w.log.is_empty());
}

#[test]
fn dropping_cache_drops_each_range_once_it_has_waited_for_it() {
    let (dir, file) = scratch("drop");
    let data = bytes(LAG + 3 * CHUNK, 13);
    let mut w = Writeback::new(true).dropping_cache(true);
    for (k, piece) in data.chunks(MIB as usize).enumerate() {
        w.write_at(&file, piece, k as u64 * MIB).unwrap();
    }
    let waited: Vec<Range<u64>> = w.log.iter().filter(|(how, _)| *how == Wait).map(|(_, r)| r.clone()).collect();
    if cfg!(target_os = "linux") {
        assert_eq!(waited, [0..CHUNK, CHUNK..2 * CHUNK, 2 * CHUNK..3 * CHUNK]);
    }
    assert_eq!(w.dropped, waited, "every range waited for, and only those, leaves the cache");
    check(dir, file, &data);
}

#[test]
fn a_write_that_is_not_durable_drops_nothing() {
    let (dir, file) = scratch("no-drop");
    let data = bytes(LAG + 2 * CHUNK, 14);
    let mut w = Writeback::new(false).dropping_cache(true);
    assert!(!w.drop_cache);
    w.write_at(&file, &data, 0).unwrap();
    assert!(w.dropped.is_empty());
    // Durable without the option: waits, and drops nothing.
    let mut kept = Writeback::new(true);
    kept.write_at(&file, &data, 0).unwrap();
    assert!(kept.dropped.is_empty());
    check(dir, file, &data);
}
