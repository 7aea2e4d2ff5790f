//! `drop_cache`: a durable save whose pages leave the page cache once they
//! are on the disk, and the same file, byte for byte, as without it.

use deathtensors_format::{Dtype, TensorSpec};
use deathtensors_io::{save, save_views, Compress, Reader, Strided, TensorBytes, WriteOptions, Writer};

/// The fraction of `path`'s pages in the page cache; `None` where that
/// cannot be told or the cache is the file's only home (tmpfs, ramfs).
#[cfg(target_os = "linux")]
fn resident(path: &std::path::Path) -> Option<f64> {
    let file = std::fs::File::open(path).unwrap();
    // tmpfs and ramfs pages never leave: the test means nothing there.
    let fs = rustix::fs::fstatfs(&file).ok()?;
    if matches!(fs.f_type as i64, 0x0102_1994 | 0x8584_58f6) {
        return None;
    }
    // SAFETY: a private read-only map of a file no one truncates during the
    // test; only its residency is asked, no byte is read.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let page = rustix::param::page_size();
    let pages = map.len().div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte for each page of the mapping.
    let r = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, map.len(), vec.as_mut_ptr()) };
    (r == 0).then(|| vec.iter().filter(|b| *b & 1 == 1).count() as f64 / pages as f64)
}

#[cfg(not(target_os = "linux"))]
fn resident(_path: &std::path::Path) -> Option<f64> {
    None
}

/// 24 MiB in three tensors, one of them a strided view (rows at a stride).
fn tensors(m: &[u8]) -> Vec<(TensorSpec, TensorBytes<'_>)> {
    let spec = |name: &str, shape: Vec<u64>| TensorSpec::new(name, Dtype::U8, shape);
    vec![
        (spec("a", vec![8 << 20]), TensorBytes::Contiguous(&m[..8 << 20])),
        (spec("b", vec![4096, 1024]), Strided::new(&m[8 << 20..], 1024, 2048, 4096).unwrap().into()),
        (spec("c", vec![8 << 20]), TensorBytes::Contiguous(&m[m.len() - (8 << 20)..])),
    ]
}

fn data() -> Vec<u8> {
    (0..24usize << 20).map(|i| (i * 31 + i / 4093) as u8).collect()
}

/// Asserts that at most 5% of `path` is in the page cache, where that can
/// be told.
#[track_caller]
fn assert_uncached(path: &std::path::Path, what: &str) {
    if let Some(cached) = resident(path) {
        assert!(cached < 0.05, "{what}: {:.0}% of the file is still in the page cache", cached * 100.0);
    }
}

#[test]
fn a_durable_save_with_drop_cache_leaves_the_page_cache_and_writes_the_same_file() {
    let dir = crate::scratch("drop-cache");
    let m = data();
    let kinds = [
        ("plain", WriteOptions::default()),
        ("digests", WriteOptions { checksum: true, footer: false, ..WriteOptions::default() }),
        ("footer", WriteOptions { checksum: true, ..WriteOptions::default() }),
        ("zstd", WriteOptions { compress: Compress::Chunked { level: 1 }, ..WriteOptions::default() }),
    ];
    for (kind, options) in kinds {
        let kept = dir.join(format!("{kind}-kept.dt"));
        let dropped = dir.join(format!("{kind}-dropped.dt"));
        save_views(&kept, tensors(&m), &options).unwrap();
        save_views(&dropped, tensors(&m), &WriteOptions { drop_cache: true, ..options.clone() }).unwrap();
        // Before anything reads it back (which caches it again).
        assert_uncached(&dropped, kind);
        assert!(std::fs::read(&kept).unwrap() == std::fs::read(&dropped).unwrap(), "{kind}: the files differ");
        let r = Reader::open(&dropped).unwrap();
        assert!(r.read("b").unwrap() == tensors(&m)[1].1.to_cow().as_ref(), "{kind}: tensor b differs");
    }
}

#[test]
fn drop_cache_covers_the_streaming_writer_and_is_refused_without_durable() {
    let dir = crate::scratch("drop-cache-writer");
    let m = data();
    let specs = || vec![TensorSpec::new("x", Dtype::U8, vec![m.len() as u64])];
    let streamed = dir.join("streamed.dt");
    let options = WriteOptions { checksum: true, drop_cache: true, ..WriteOptions::default() };
    let mut w = Writer::create(&streamed, specs(), &options).unwrap();
    w.write_tensor("x", &m).unwrap();
    w.finish().unwrap();
    assert_uncached(&streamed, "the streaming writer");
    let whole = dir.join("whole.dt");
    save(&whole, vec![(specs().remove(0), &m[..])], &options).unwrap();
    assert!(std::fs::read(&streamed).unwrap() == std::fs::read(&whole).unwrap(), "the streamed file differs");

    // Not durable: no page is on the disk yet, so none could leave the
    // cache; io refuses the pair (one rule for every front end, as the
    // binding did alone), before anything is written.
    let fast = WriteOptions { durable: false, ..WriteOptions::default() };
    let b = dir.join("b.dt");
    let e = save(&b, vec![(specs().remove(0), &m[..])], &WriteOptions { drop_cache: true, ..fast }).unwrap_err();
    assert!(e.to_string().contains("drop_cache needs durable"), "{e}");
    assert!(!b.exists());
}
