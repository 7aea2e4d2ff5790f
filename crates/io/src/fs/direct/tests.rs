//! A direct write puts the same bytes in the file as a buffered one, at any
//! length and however the bytes come, and leaves the cursor at the end.

use std::io::Read;
use std::path::PathBuf;

use super::*;

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8).collect()
}

/// A new empty file for one test, in `dir` (the temp directory if `None`).
fn scratch(tag: &str, dir: Option<&str>) -> (PathBuf, File) {
    let base = dir.map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = base.join(format!("dt-direct-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = File::options().create(true).truncate(true).read(true).write(true).open(dir.join("f")).unwrap();
    (dir, file)
}

fn durable_dropping() -> WriteOptions {
    WriteOptions { durable: true, drop_cache: true, ..WriteOptions::default() }
}

/// Writes `data` in pieces of `piece` bytes (then a tail after `finish`,
/// through the cursor), optionally turning direct writes off after
/// `turn_off_at` bytes; checks the file, and returns whether the writes
/// were direct.
#[track_caller]
fn round_trip(tag: &str, data: &[u8], piece: usize, turn_off_at: Option<usize>, dir: Option<&str>) -> bool {
    let (dir, file) = scratch(tag, dir);
    let mut was_direct = false;
    match Direct::for_write(&file, &durable_dropping()) {
        Some(mut w) => {
            was_direct = w.direct;
            let mut done = 0;
            for chunk in data.chunks(piece.max(1)) {
                if turn_off_at.is_some_and(|at| done >= at) && w.direct {
                    w.turn_off().unwrap();
                }
                w.write_all(chunk).unwrap();
                done += chunk.len();
            }
            assert_eq!(w.finish().unwrap(), data.len() as u64);
        }
        // The file system refuses O_DIRECT: the caller writes buffered.
        None => (&file).write_all(data).unwrap(),
    }
    // The cursor is at the end: a footer written after lands there.
    (&file).write_all(b"FOOTER").unwrap();
    file.sync_all().unwrap();
    let mut got = Vec::new();
    File::open(dir.join("f")).unwrap().read_to_end(&mut got).unwrap();
    let mut expected = data.to_vec();
    expected.extend_from_slice(b"FOOTER");
    assert!(got == expected, "{tag}: the file differs ({} bytes, {} expected)", got.len(), expected.len());
    // Closed first: Windows removes no folder with an open file in it.
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
    was_direct
}

#[test]
fn every_length_around_blocks_and_chunks_lands_whole() {
    for len in [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 12_345] {
        let data = bytes(len, len as u8);
        let direct = round_trip(&format!("len-{len}"), &data, 1 << 20, None, None);
        // O_DIRECT is Linux's; elsewhere the buffered path wrote the file.
        #[cfg(target_os = "linux")]
        {
            // The test's temp directory is on a disk here (not tmpfs) in CI.
            let fs = rustix::fs::statfs(std::env::temp_dir().as_path()).unwrap();
            if !matches!(fs.f_type as i64, 0x0102_1994 | 0x8584_58f6) {
                assert!(direct, "O_DIRECT was refused on the temp directory's file system");
            }
        }
        #[cfg(not(target_os = "linux"))]
        assert!(!direct, "O_DIRECT reported off Linux");
    }
}

#[test]
fn pieces_of_any_size_make_the_same_file() {
    let data = bytes(2 * CHUNK + 777, 9);
    for piece in [1, 3, 4095, 4097, 65_536 + 13, CHUNK + 1, 8 * CHUNK] {
        if piece == 1 {
            // Byte by byte over a small file only: the rest would be slow.
            round_trip("piece-1", &data[..3 * BLOCK + 5], 1, None, None);
            continue;
        }
        round_trip(&format!("piece-{piece}"), &data, piece, None, None);
    }
}

#[test]
fn going_on_buffered_mid_file_keeps_every_byte() {
    let data = bytes(2 * CHUNK + 4321, 3);
    for at in [0, BLOCK, CHUNK - 5, CHUNK + 7, 2 * CHUNK] {
        round_trip(&format!("off-{at}"), &data, 65_536 + 11, Some(at), None);
    }
}

#[test]
fn only_durable_saves_out_of_the_page_cache_write_directly() {
    let (dir, file) = scratch("options", None);
    for (durable, drop_cache) in [(false, false), (true, false), (false, true)] {
        let options = WriteOptions { durable, drop_cache, ..WriteOptions::default() };
        assert!(Direct::for_write(&file, &options).is_none(), "durable {durable}, drop_cache {drop_cache}");
    }
    // Nothing was changed on the file: a buffered write of any length works.
    (&file).write_all(b"abc").unwrap();
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"abc");
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tmpfs_writes_the_same_file_direct_or_not() {
    // tmpfs takes O_DIRECT from Linux 6.6 on, and refuses it before.
    if std::path::Path::new("/dev/shm").is_dir() {
        round_trip("shm", &bytes(CHUNK + 99, 5), 1 << 20, None, Some("/dev/shm"));
    }
}

#[test]
fn a_write_the_file_system_refuses_goes_on_buffered() {
    // An offset of 1 is aligned to no block: the file system answers EINVAL.
    let (dir, file) = scratch("einval", None);
    (&file).write_all(b"X").unwrap();
    let Some(mut w) = Direct::for_write(&file, &durable_dropping()) else {
        drop(file);
        std::fs::remove_dir_all(&dir).unwrap();
        return;
    };
    w.at = 1;
    let data = bytes(CHUNK + 5000, 7);
    w.write_all(&data).unwrap();
    assert!(!w.direct, "the refused write did not turn O_DIRECT off");
    assert_eq!(w.finish().unwrap(), 1 + data.len() as u64);
    let got = std::fs::read(dir.join("f")).unwrap();
    assert!(got[0] == b'X' && got[1..] == data[..], "the file differs after the fallback");
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
}
