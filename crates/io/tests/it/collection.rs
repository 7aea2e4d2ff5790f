//! Appendable collections: the basics (the model-based and hostile-input
//! tests are in `collection_model.rs` and `collection_hostile.rs`).

use deathtensors_io::format::{Dtype, RowLayout};
use deathtensors_io::{Collection, CollectionOptions, ErrorKind};

/// A path for a collection that does not exist yet, in a scratch
/// directory removed when the test ends.
fn tmp(name: &str) -> crate::Scratch {
    let dir = crate::scratch(&format!("coll-{name}"));
    std::fs::remove_dir(&dir).unwrap();
    dir
}

fn rows(start: u8, n: usize, width: usize) -> Vec<u8> {
    (0..n).flat_map(|i| vec![start.wrapping_add(i as u8); width]).collect()
}

#[test]
fn durable_appends_larger_than_a_writeback_range_read_back() {
    // Rows of 3,000 bytes in batches of 1,000 rows: 4 MiB ranges go to the
    // disk as they fill, cut across rows and batches; blocks of 5,000 rows.
    let dir = tmp("durable-appends");
    let layout = RowLayout::new(Dtype::U8, vec![3000], 5000).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions { durable: true }).unwrap();
    let batches: Vec<Vec<u8>> = (0..12).map(|b| rows(b * 7, 1000, 3000)).collect();
    for (b, batch) in batches.iter().enumerate() {
        w.write_rows(b as u64 * 1000, batch).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let r = Collection::open(&dir).unwrap();
    let mut all = vec![0u8; 12_000 * 3000];
    r.read_rows(0, &mut all).unwrap();
    assert!(all == batches.concat());
}

#[test]
fn append_flush_reopen_and_overwrite_copies_committed_blocks() {
    let dir = tmp("basic");
    let layout = RowLayout::new(Dtype::U8, vec![4], 3).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions::default()).unwrap();
    w.write_rows(0, &rows(0, 7, 4)).unwrap();
    assert_eq!(w.rows(), 7);
    // Not committed yet: a reader sees the empty collection.
    assert_eq!(Collection::open(&dir).unwrap().rows(), 0);
    w.flush().unwrap();
    let r = Collection::open(&dir).unwrap();
    assert_eq!(r.rows(), 7);
    // Overwrite committed rows 2..5, spanning two blocks.
    w.write_rows(2, &rows(100, 3, 4)).unwrap();
    let mut all = vec![0u8; 28];
    r.read_rows(0, &mut all).unwrap();
    assert_eq!(all, rows(0, 7, 4), "the reader's snapshot must not change before the commit");
    w.flush().unwrap();
    // The old reader still reads its snapshot through open handles...
    r.read_rows(0, &mut all).unwrap();
    assert_eq!(all, rows(0, 7, 4));
    // ...and a new one the new state.
    let r2 = Collection::open(&dir).unwrap();
    r2.read_rows(0, &mut all).unwrap();
    let mut want = rows(0, 7, 4);
    want[8..20].copy_from_slice(&rows(100, 3, 4));
    assert_eq!(all, want);
    assert_eq!(r2.verify().unwrap(), 2, "two full blocks have digests");
}

#[test]
fn second_writer_is_refused_naming_the_lock() {
    let dir = tmp("lock");
    let layout = RowLayout::new(Dtype::F32, vec![2], 8).unwrap();
    let w = Collection::create(&dir, layout, CollectionOptions::default()).unwrap();
    let err = Collection::open_writable(&dir, CollectionOptions::default()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Locked(_)), "{err}");
    assert!(err.to_string().contains("writer.lock"), "{err}");
    drop(w);
    Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn committed_rows_map_copy_on_write_across_blocks() {
    let dir = tmp("map");
    // 1024 rows of 16 bytes: 16 KiB blocks, page multiples.
    let layout = RowLayout::new(Dtype::U8, vec![16], 1024).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions::default()).unwrap();
    let data: Vec<u8> = (0..3000 * 16).map(|i| (i * 7 % 251) as u8).collect();
    w.write_rows(0, &data).unwrap();
    // Not committed: never mapped (the writer may still change those bytes).
    assert!(unsafe { w.map_rows(0, 10) }.unwrap().is_none());
    w.flush().unwrap();
    // From mid-block, across two block boundaries, to the partial last block.
    let Some(mut map) = unsafe { w.map_rows(5, 2990) }.unwrap() else {
        // Off unix rows are never mapped (documented): callers read them.
        #[cfg(unix)]
        panic!("page-aligned blocks map");
        #[cfg(not(unix))]
        return;
    };
    assert_eq!(map.as_slice(), &data[5 * 16..2995 * 16]);
    // Writes stay in the mapping.
    map.as_mut_slice()[0] ^= 0xff;
    let mut row = [0u8; 16];
    w.read_rows(5, &mut row).unwrap();
    assert_eq!(row, data[80..96]);
    // Overwriting a mapped committed row copies its block: the mapping keeps the old bytes.
    w.write_rows(1100, &[9u8; 16]).unwrap();
    w.flush().unwrap();
    assert_eq!(&map.as_slice()[(1100 - 5) * 16..(1101 - 5) * 16], &data[1100 * 16..1101 * 16]);
    drop(w);
    // Blocks that are not whole pages are read instead.
    let odd = tmp("map-odd");
    let mut w =
        Collection::create(&odd, RowLayout::new(Dtype::U8, vec![3], 5).unwrap(), CollectionOptions::default()).unwrap();
    w.write_rows(0, &[1u8; 30]).unwrap();
    w.flush().unwrap();
    assert!(unsafe { w.map_rows(0, 10) }.unwrap().is_none());
    assert!(unsafe { w.map_rows(0, 11) }.is_err(), "past the end");
}

#[test]
fn a_block_rewritten_after_it_filled_gets_the_digest_of_its_final_rows() {
    let dir = tmp("bg-hash");
    let layout = RowLayout::new(Dtype::U8, vec![4096], 64).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions { durable: false }).unwrap();
    for round in 0..3u8 {
        // Fill two blocks (each queued for background hashing when full)...
        let start = w.rows();
        w.write_rows(start, &rows(round, 128, 4096)).unwrap();
        // ...then rewrite rows of both before the commit: the queued digests
        // are of bytes that changed, and must not be used.
        w.write_rows(start + 3, &rows(200, 1, 4096)).unwrap();
        w.write_rows(start + 100, &rows(201, 2, 4096)).unwrap();
        w.flush().unwrap();
        assert_eq!(Collection::open(&dir).unwrap().verify().unwrap(), 2 * (round as u64 + 1));
    }
}

/// Removing a collection is its writer's act: refused while another
/// writer holds it (nothing removed), then the manifest, blocks, stray
/// blocks and lock go; other files keep the directory.
#[test]
fn removing_a_collection_takes_its_writers_lock() {
    let dir = tmp("remove");
    let layout = RowLayout::new(Dtype::U8, vec![4], 3).unwrap();
    let mut w = Collection::create(&dir, layout.clone(), CollectionOptions::default()).unwrap();
    w.write_rows(0, &rows(0, 7, 4)).unwrap();
    w.flush().unwrap();
    let before = crate::entries(&dir);
    let e = deathtensors_io::remove_collection(&dir).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Locked(_)), "{e}");
    assert_eq!(crate::entries(&dir), before, "nothing removed while a writer holds the lock");
    drop(w);
    // A block file a crashed writer left, and a file of someone else's.
    std::fs::write(dir.join("blk-99999.dt"), b"partial").unwrap();
    std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
    assert!(!deathtensors_io::remove_collection(&dir).unwrap(), "another file keeps the directory");
    assert_eq!(crate::entries(&dir), ["notes.txt"]);
    std::fs::remove_file(dir.join("notes.txt")).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions::default()).unwrap();
    w.write_rows(0, &rows(0, 2, 4)).unwrap();
    w.flush().unwrap();
    drop(w);
    assert!(deathtensors_io::remove_collection(&dir).unwrap());
    assert!(!dir.exists());
}
