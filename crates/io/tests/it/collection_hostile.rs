//! Appendable collections that are damaged or hostile, and calls that misuse
//! the API: each must fail with a clear error (the right `ErrorKind`, and a
//! message naming the file and the problem), never panic and never return
//! wrong rows.

use std::path::{Path, PathBuf};

use deathtensors_io::format::{Dtype, ErrorKind as FormatKind, Format, RowLayout, TensorSpec};
use deathtensors_io::{Collection, CollectionOptions, Error, ErrorKind, WriteOptions};

/// Rows of the test collections: `[i, 255 - i]` for row `i`.
const WIDTH: usize = 2;

fn row_bytes(range: std::ops::Range<u64>) -> Vec<u8> {
    range.flat_map(|i| [i as u8, 255 - i as u8]).collect()
}

/// A committed collection of `rows` U8 x 2 rows in blocks of 3.
fn made(name: &str, rows: u64) -> crate::Scratch {
    made_with(name, RowLayout::new(Dtype::U8, vec![WIDTH as u64], 3).unwrap(), rows)
}

fn made_with(name: &str, layout: RowLayout, rows: u64) -> crate::Scratch {
    let dir = crate::scratch(&format!("coll-hostile-{name}"));
    let rb = layout.row_bytes() as usize;
    let mut w = Collection::create(&dir, layout, CollectionOptions { durable: false }).unwrap();
    // Row i is [i, 255 - i] repeated to the row's width.
    let bytes: Vec<u8> = row_bytes(0..rows).chunks(WIDTH).flat_map(|r| r.repeat(rb / WIDTH)).collect();
    w.write_rows(0, &bytes).unwrap();
    w.flush().unwrap();
    dir
}

/// The block files of the committed collection at `dir`, in row order.
fn block_paths(dir: &Path) -> Vec<PathBuf> {
    Collection::open(dir).unwrap().blocks().into_iter().map(|b| b.path).collect()
}

fn manifest(dir: &Path) -> PathBuf {
    dir.join("collection.json")
}

fn read_manifest(dir: &Path) -> String {
    std::fs::read_to_string(manifest(dir)).unwrap()
}

fn write_manifest(dir: &Path, text: &str) {
    std::fs::write(manifest(dir), text).unwrap();
}

/// A manifest for U8 x 2 rows in blocks of 3, with these blocks.
fn manifest_text(rows: u64, blocks: &[(&str, u64)]) -> String {
    let list: Vec<String> = blocks.iter().map(|(f, r)| format!("{{\"file\":{f:?},\"rows\":{r}}}")).collect();
    format!(
        "{{\"format\":\"deathtensors-collection\",\"format_version\":1,\"dtype\":\"U8\",\"row_shape\":[2],\
         \"block_rows\":3,\"rows\":{rows},\"generation\":1,\"blocks\":[{}]}}",
        list.join(",")
    )
}

/// Asserts that `result` failed, that `kind` accepts its kind, and that its
/// message contains every one of `needles`.
#[track_caller]
fn check<T>(result: Result<T, Error>, kind: impl Fn(&ErrorKind) -> bool, needles: &[&str]) -> Error {
    let Err(err) = result else { panic!("must fail with one of {needles:?}") };
    let msg = err.to_string();
    assert!(kind(err.kind()), "wrong kind {:?}: {msg}", err.kind());
    for n in needles {
        assert!(msg.contains(n), "{msg:?} does not contain {n:?}");
    }
    err
}

/// The format-level kind inside an io error, if any.
fn format_kind(kind: &ErrorKind) -> Option<&FormatKind> {
    match kind {
        ErrorKind::Format(e) => Some(e.kind()),
        _ => None,
    }
}

fn is_collection(kind: &ErrorKind) -> bool {
    matches!(format_kind(kind), Some(FormatKind::InvalidCollection { .. }))
}

fn is_input(kind: &ErrorKind) -> bool {
    matches!(kind, ErrorKind::InvalidInput(_))
}

/// Opening the collection at `dir`, read-only and for writing, fails the
/// same way; the directory is left as it was.
#[track_caller]
fn check_open(dir: &Path, kind: impl Fn(&ErrorKind) -> bool, needles: &[&str]) {
    let before = crate::entries(dir);
    check(Collection::open(dir), &kind, needles);
    check(Collection::open_writable(dir, CollectionOptions::default()), &kind, needles);
    let mut after = crate::entries(dir);
    after.retain(|e| e != "writer.lock");
    let mut before = before;
    before.retain(|e| e != "writer.lock");
    assert_eq!(before, after, "a refused open must not remove files");
}

/// A manifest-level problem: replace `from` by `to` in a good manifest, and
/// check the open fails naming the manifest and `needles`.
#[track_caller]
fn check_edit(name: &str, from: &str, to: &str, kind: impl Fn(&ErrorKind) -> bool, needles: &[&str]) {
    let dir = made(name, 4);
    let text = read_manifest(&dir);
    assert!(text.contains(from), "{from:?} not in {text}");
    write_manifest(&dir, &text.replacen(from, to, 1));
    let mut all = vec!["collection.json"];
    all.extend_from_slice(needles);
    check_open(&dir, kind, &all);
    std::fs::remove_dir_all(&dir).unwrap();
}

// Manifests.

#[test]
fn manifest_that_is_not_json() {
    check_edit(
        "json",
        "\"blocks\":[",
        "\"blocks\":[[",
        |k| matches!(format_kind(k), Some(FormatKind::InvalidJson { .. })),
        &["JSON"],
    );
    let dir = made("json-empty", 1);
    write_manifest(&dir, "");
    check_open(&dir, |k| matches!(format_kind(k), Some(FormatKind::InvalidJson { .. })), &["collection.json"]);
    write_manifest(&dir, "[1, 2]");
    check_open(&dir, is_collection, &["collection.json", "not a JSON object"]);
    std::fs::write(manifest(&dir), [0xff, 0xfe, b'{', b'}']).unwrap();
    check_open(&dir, |k| format_kind(k).is_some(), &["collection.json"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn manifest_with_duplicate_keys() {
    let dup = |k: &ErrorKind| matches!(format_kind(k), Some(FormatKind::DuplicateKey { .. }));
    check_edit("dup-top", "\"rows\":4,", "\"rows\":4,\"rows\":4,", dup, &["duplicate key \"rows\""]);
    check_edit("dup-block", "\"rows\":3,", "\"rows\":3,\"rows\":3,", dup, &["duplicate key \"rows\""]);
    check_edit("dup-meta", "\"blocks\":[", "\"metadata\":{\"a\":\"1\",\"a\":\"2\"},\"blocks\":[", dup, &["\"a\""]);
}

#[test]
fn manifest_with_unknown_fields() {
    let unknown = |k: &ErrorKind| matches!(format_kind(k), Some(FormatKind::UnknownField { .. }));
    check_edit("unknown-top", "\"rows\":4,", "\"rows\":4,\"compression\":\"zstd\",", unknown, &["\"compression\""]);
    check_edit("unknown-block", "\"rows\":3,", "\"rows\":3,\"offset\":0,", unknown, &["\"offset\""]);
}

#[test]
fn manifest_with_wrong_values() {
    check_edit(
        "format",
        "deathtensors-collection",
        "tensorblob",
        is_collection,
        &["format is not \"deathtensors-collection\""],
    );
    check_edit(
        "version",
        "\"format_version\":1",
        "\"format_version\":2",
        |k| matches!(format_kind(k), Some(FormatKind::UnsupportedFormatVersion(2))),
        &["format_version 2"],
    );
    check_edit(
        "dtype",
        "\"dtype\":\"U8\"",
        "\"dtype\":\"U7\"",
        |k| matches!(format_kind(k), Some(FormatKind::UnknownDtype(_))),
        &["\"U7\""],
    );
    check_edit(
        "negative",
        "\"rows\":4",
        "\"rows\":-4",
        |k| matches!(format_kind(k), Some(FormatKind::WrongType { .. })),
        &["rows"],
    );
    check_edit(
        "shape-type",
        "\"row_shape\":[2]",
        "\"row_shape\":2",
        |k| matches!(format_kind(k), Some(FormatKind::WrongType { .. })),
        &["row_shape"],
    );
    check_edit("shape-zero", "\"row_shape\":[2]", "\"row_shape\":[0]", is_collection, &["no elements"]);
    check_edit(
        "missing",
        "\"generation\":2,",
        "",
        |k| matches!(format_kind(k), Some(FormatKind::MissingField { .. })),
        &["\"generation\""],
    );
    check_edit("block-rows-zero", "\"block_rows\":3", "\"block_rows\":0", is_collection, &["block_rows"]);
    check_edit(
        "sha-bad",
        "\"sha256\":\"",
        "\"sha256\":\"AB",
        is_collection,
        &["blocks[0].sha256 is not 64 lowercase hex digits"],
    );
    check_edit(
        "metadata-not-string",
        "\"blocks\":[",
        "\"metadata\":{\"a\":1},\"blocks\":[",
        |k| matches!(format_kind(k), Some(FormatKind::MetadataNotString { .. })),
        &["\"a\""],
    );
}

#[test]
fn manifest_rows_must_match_the_blocks() {
    check_edit("rows-more", "\"rows\":4,", "\"rows\":5,", is_collection, &["rows is 5 but the blocks hold 4"]);
    check_edit("rows-less", "\"rows\":4,", "\"rows\":3,", is_collection, &["rows is 3 but the blocks hold 4"]);
}

#[test]
fn manifest_blocks_must_be_full_but_the_last() {
    let dir = made("shape-of-blocks", 7);
    let names: Vec<String> =
        block_paths(&dir).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    let (a, b, c) = (names[0].as_str(), names[1].as_str(), names[2].as_str());
    // What the message says, and the rows of blocks a, b and c.
    let cases = [
        ("blocks[0] holds 2 rows", [2, 3, 1]),
        ("blocks[1] holds 4 rows", [3, 4, 1]),
        ("the last block holds 0 rows", [3, 3, 0]),
        ("the last block holds 4 rows", [3, 3, 4]),
    ];
    for (needle, [ra, rb, rc]) in cases {
        write_manifest(&dir, &manifest_text(ra + rb + rc, &[(a, ra), (b, rb), (c, rc)]));
        check_open(&dir, is_collection, &["collection.json", needle]);
    }
    // The same blocks written correctly open.
    write_manifest(&dir, &manifest_text(7, &[(a, 3), (b, 3), (c, 1)]));
    let r = Collection::open(&dir).unwrap();
    let mut out = vec![0u8; 7 * WIDTH];
    r.read_rows(0, &mut out).unwrap();
    assert_eq!(out, row_bytes(0..7));
}

#[test]
fn manifest_block_names_are_plain_file_names() {
    let dir = made("names", 2);
    for name in ["sub/blk.dt", "../outside.dt", "..", ".", ".hidden.dt", "/etc/passwd", "a\\b.dt", "", "é.dt", "a b"] {
        write_manifest(&dir, &manifest_text(1, &[(name, 1)]));
        check_open(&dir, is_collection, &["collection.json", "blocks[0].file", "a block file name"]);
    }
    let long = "b".repeat(129);
    write_manifest(&dir, &manifest_text(1, &[(&long, 1)]));
    check_open(&dir, is_collection, &["collection.json", "1 to 128 characters"]);
    write_manifest(&dir, &manifest_text(1, &[("collection.json", 1)]));
    check_open(&dir, is_collection, &["collection.json", "cannot be the manifest"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A manifest naming the writer's lock file as a block: either it is
/// refused, or the writer must still hold a lock after it supersedes that
/// "block" (here by truncating it away and committing, which removes the
/// file).
#[test]
fn manifest_cannot_name_the_lock_file() {
    let dir = made("lock-name", 1);
    write_manifest(&dir, &manifest_text(1, &[("writer.lock", 1)]));
    let mut w = match Collection::open_writable(&dir, CollectionOptions::default()) {
        Ok(w) => w,
        // Refused: as a damaged manifest, naming the file it names.
        Err(e) => {
            assert!(is_collection(e.kind()), "{e}");
            assert!(e.to_string().contains("writer.lock"), "{e}");
            std::fs::remove_dir_all(&dir).unwrap();
            return;
        }
    };
    w.truncate(0).unwrap();
    w.flush().unwrap();
    check(
        Collection::open_writable(&dir, CollectionOptions::default()),
        |k| matches!(k, ErrorKind::Locked(_)),
        &["writer.lock"],
    );
    drop(w);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn manifest_listing_a_block_twice() {
    let dir = made("twice", 6);
    let names: Vec<String> =
        block_paths(&dir).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    write_manifest(&dir, &manifest_text(6, &[(&names[0], 3), (&names[0], 3)]));
    check_open(&dir, is_collection, &["collection.json", "listed twice", &names[0]]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn manifest_over_the_length_limit() {
    let dir = made("huge", 1);
    // Sparse: 300 MiB of length, no blocks on disk.
    let f = std::fs::OpenOptions::new().write(true).truncate(true).open(manifest(&dir)).unwrap();
    f.set_len(300 << 20).unwrap();
    drop(f);
    check_open(
        &dir,
        |k| matches!(format_kind(k), Some(FormatKind::LimitExceeded { what: "manifest length", .. })),
        &["collection.json", "manifest length", "exceeds the limit"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn not_a_collection() {
    let dir = crate::scratch("coll-hostile-none");
    check(Collection::open(&dir), |k| matches!(k, ErrorKind::Io(_)), &["not a collection", "collection.json"]);
    check(
        Collection::open(dir.join("missing")),
        |k| matches!(k, ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound),
        &["no such collection directory"],
    );
    std::fs::write(dir.join("notes.txt"), "mine").unwrap();
    let layout = RowLayout::new(Dtype::U8, vec![2], 3).unwrap();
    check(
        Collection::create(&dir, layout, CollectionOptions::default()),
        is_input,
        &["not empty", "nothing was written"],
    );
    assert_eq!(crate::entries(&dir), ["notes.txt"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

// Block files.

/// Every way to read the collection at `dir` fails naming `file` and
/// `needles` (and rows before the bad block still read).
#[track_caller]
fn check_bad_block(dir: &Path, bad: usize, kind: impl Fn(&ErrorKind) -> bool, needles: &[&str]) {
    let file = block_paths(dir)[bad].file_name().unwrap().to_string_lossy().into_owned();
    let mut all = vec![file.as_str()];
    all.extend_from_slice(needles);
    let r = Collection::open(dir).unwrap();
    let mut out = vec![0u8; r.rows() as usize * WIDTH];
    check(r.read_rows(0, &mut out), &kind, &all);
    let start = bad as u64 * 3;
    check(r.read_rows(start, &mut [0u8; WIDTH]), &kind, &all);
    check(r.gather(&[0, start], &mut [0u8; 2 * WIDTH]), &kind, &all);
    check(r.verify(), &kind, &all);
    if bad > 0 {
        let mut first = vec![0u8; 3 * WIDTH];
        r.read_rows(0, &mut first).unwrap();
        assert_eq!(first, row_bytes(0..3));
    }
    // A writer must not write into it either (appending to a partial last
    // block writes in place, overwriting copies it first).
    let mut w = Collection::open_writable(dir, CollectionOptions::default()).unwrap();
    check(w.write_rows(start, &row_bytes(0..1)), &kind, &all);
    check(w.verify(), &kind, &all);
}

#[test]
fn missing_block_file() {
    let dir = made("missing-block", 7);
    let paths = block_paths(&dir);
    std::fs::remove_file(&paths[1]).unwrap();
    let file = paths[1].file_name().unwrap().to_string_lossy().into_owned();
    let r = Collection::open(&dir).unwrap();
    // No newer commit: the collection is damaged, and the error says which
    // file is missing (not that a commit replaced it).
    let not_found = |k: &ErrorKind| matches!(k, ErrorKind::DamagedCollection(m) if m.contains("is missing"));
    let err = check(r.read_rows(3, &mut [0u8; WIDTH]), not_found, &[&file]);
    assert!(!err.to_string().contains("newer commit"), "{err}");
    check(r.verify(), not_found, &[&file]);
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    check(w.read_rows(3, &mut [0u8; WIDTH]), not_found, &[&file]);
    check(w.write_rows(3, &row_bytes(0..1)), not_found, &[&file]);
    check(w.verify(), not_found, &[&file]);
}

#[test]
fn truncated_block_file() {
    let dir = made("truncated-block", 7);
    let paths = block_paths(&dir);
    let len = std::fs::metadata(&paths[1]).unwrap().len();
    for cut in [len - 1, 4096 + 2 * WIDTH as u64, 4096, 100, 10, 0] {
        std::fs::OpenOptions::new().write(true).open(&paths[1]).unwrap().set_len(cut).unwrap();
        check_bad_block(&dir, 1, |k| format_kind(k).is_some(), &["invalid file"]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn block_file_with_extra_bytes() {
    let dir = made("extended-block", 7);
    let paths = block_paths(&dir);
    let len = std::fs::metadata(&paths[2]).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&paths[2]).unwrap().set_len(len + 1).unwrap();
    check_bad_block(&dir, 2, |k| format_kind(k).is_some(), &["invalid file"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Replaces block `bad` of `dir` with the first block of a collection of
/// `layout`.
fn swap_block(dir: &Path, name: &str, bad: usize, layout: RowLayout) {
    let other = made_with(name, layout, 3);
    let theirs = block_paths(&other).remove(0);
    std::fs::copy(theirs, &block_paths(dir)[bad]).unwrap();
    std::fs::remove_dir_all(other).unwrap();
}

#[test]
fn block_file_of_another_dtype() {
    let dir = made("dtype-block", 7);
    swap_block(&dir, "dtype-block-other", 1, RowLayout::new(Dtype::I8, vec![2], 3).unwrap());
    check_bad_block(&dir, 1, is_collection, &["a block holds I8 rows, the collection U8"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn block_file_of_another_shape() {
    let dir = made("shape-block", 7);
    swap_block(&dir, "shape-block-rows", 0, RowLayout::new(Dtype::U8, vec![2], 4).unwrap());
    check_bad_block(&dir, 0, is_collection, &["a block has shape [4, 2], the collection's blocks [3, 2]"]);
    std::fs::remove_dir_all(&dir).unwrap();
    let dir = made("shape-block-2", 7);
    swap_block(&dir, "shape-block-row", 1, RowLayout::new(Dtype::U8, vec![1, 2], 3).unwrap());
    check_bad_block(&dir, 1, is_collection, &["a block has shape [3, 1, 2]"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn block_file_that_is_not_a_deathtensors_file() {
    let dir = made("garbage-block", 7);
    let paths = block_paths(&dir);
    std::fs::write(&paths[1], vec![0x5a; 4096 + 6]).unwrap();
    check_bad_block(&dir, 1, |k| format_kind(k).is_some(), &["invalid file"]);
    std::fs::write(&paths[1], b"version https://git-lfs.github.com/spec/v1\n").unwrap();
    check_bad_block(&dir, 1, |k| format_kind(k).is_some(), &["invalid file"]);
    // A deathtensors file, but not a block: two tensors, or one of another
    // name.
    let spec = |name: &str| TensorSpec::new(name, Dtype::U8, vec![3, 2]);
    let data = row_bytes(0..3);
    deathtensors_io::save(
        &paths[1],
        vec![(spec("rows"), &data[..]), (spec("more"), &data[..])],
        &WriteOptions::default(),
    )
    .unwrap();
    check_bad_block(&dir, 1, is_collection, &["a block file holds 2 tensors, expected 1"]);
    deathtensors_io::save(&paths[1], vec![(spec("weights"), &data[..])], &WriteOptions::default()).unwrap();
    check_bad_block(&dir, 1, is_collection, &["a block file's tensor is \"weights\", expected \"rows\""]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A safetensors file holding a tensor `rows` of the block's dtype and shape
/// is still not a block file (blocks are deathtensors v1 files).
#[test]
fn block_file_that_is_safetensors() {
    let dir = made("safetensors-block", 7);
    let paths = block_paths(&dir);
    let data = [7u8; 3 * WIDTH];
    let options = WriteOptions { format: Format::Safetensors, ..WriteOptions::default() };
    deathtensors_io::save(&paths[1], vec![(TensorSpec::new("rows", Dtype::U8, vec![3, 2]), &data[..])], &options)
        .unwrap();
    check_bad_block(&dir, 1, |k| format_kind(k).is_some(), &["invalid file"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn corrupt_full_block_fails_verify_naming_it() {
    let dir = made("digest", 7);
    let paths = block_paths(&dir);
    assert_eq!(Collection::open(&dir).unwrap().verify().unwrap(), 2);
    let mut bytes = std::fs::read(&paths[1]).unwrap();
    bytes[4096 + 3] ^= 1;
    std::fs::write(&paths[1], &bytes).unwrap();
    let file = paths[1].file_name().unwrap().to_string_lossy().into_owned();
    let err = check(
        Collection::open(&dir).unwrap().verify(),
        |k| matches!(k, ErrorKind::BlockDigestMismatch { .. }),
        &[&file, "block 1", "is corrupt"],
    );
    assert_eq!(err.path(), Some(paths[1].as_path()));
    assert!(err.is_integrity());
    // The writer's verify finds it too.
    let w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    check(w.verify(), |k| matches!(k, ErrorKind::BlockDigestMismatch { .. }), &[&file]);
}

#[test]
fn digest_in_the_manifest_that_does_not_match() {
    let dir = made("digest-manifest", 3);
    let text = read_manifest(&dir);
    let at = text.find("\"sha256\":\"").unwrap() + 10;
    let mut text = text.into_bytes();
    text[at] = if text[at] == b'0' { b'1' } else { b'0' };
    std::fs::write(manifest(&dir), text).unwrap();
    check(
        Collection::open(&dir).unwrap().verify(),
        |k| matches!(k, ErrorKind::BlockDigestMismatch { .. }),
        &["block 0 (blk-"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// Misuse.

#[test]
fn reading_past_the_end() {
    let dir = made("past-end", 7);
    let r = Collection::open(&dir).unwrap();
    let dirname = dir.to_string_lossy().into_owned();
    check(r.read_rows(6, &mut [0u8; 2 * WIDTH]), is_input, &[&dirname, "2 rows from row 6 run past the end (7 rows)"]);
    check(r.read_rows(7, &mut [0u8; WIDTH]), is_input, &["past the end"]);
    check(r.read_rows(1 << 40, &mut [0u8; WIDTH]), is_input, &["past the end"]);
    r.read_rows(7, &mut []).unwrap();
}

#[test]
fn reading_at_the_largest_start() {
    let dir = made("past-end-max", 7);
    let r = Collection::open(&dir).unwrap();
    check(r.read_rows(u64::MAX, &mut [0u8; WIDTH]), is_input, &["past the end"]);
    check(r.read_rows(u64::MAX - 1, &mut [0u8; 2 * WIDTH]), is_input, &["past the end"]);
}

#[test]
fn viewing_a_huge_count() {
    let dir = made("view-max", 7);
    let r = Collection::open(&dir).unwrap();
    // SAFETY: nothing changes the block files while the test runs.
    check(unsafe { r.view(1, u64::MAX) }, is_input, &["span"]);
    // SAFETY: as above.
    check(unsafe { r.view(u64::MAX, u64::MAX) }, is_input, &["past the end"]);
}

#[test]
fn views_only_of_committed_rows_in_one_block() {
    let dir = made("view", 7);
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    w.write_rows(7, &row_bytes(7..8)).unwrap();
    // SAFETY: nothing changes committed rows in place while the test runs.
    let v = unsafe { w.view(3, 3) }.unwrap();
    assert_eq!(v.bytes(), row_bytes(3..6));
    assert_eq!(v.rows(), 3);
    // SAFETY: as above.
    check(unsafe { w.view(6, 2) }, is_input, &["2 rows from row 6 are not committed yet: flush() first"]);
    // SAFETY: as above.
    check(unsafe { w.view(2, 2) }, is_input, &["2 rows from row 2 span more than one block of 3 rows"]);
    // SAFETY: as above.
    check(unsafe { w.view(9, 1) }, is_input, &["row 9 is past the end (8 rows)"]);
}

#[test]
fn gather_out_of_range() {
    let dir = made("gather", 7);
    let r = Collection::open(&dir).unwrap();
    check(r.gather(&[0, 7], &mut [0u8; 2 * WIDTH]), is_input, &["row 7 is out of range (7 rows)"]);
    check(r.gather(&[u64::MAX], &mut [0u8; WIDTH]), is_input, &["out of range"]);
    check(r.gather(&[0, 1], &mut [0u8; WIDTH]), is_input, &["2 indices but room for 1 rows"]);
    check(r.gather(&[0], &mut [0u8; WIDTH + 1]), is_input, &["3 bytes are not whole rows of 2 bytes"]);
    let mut out = [0u8; 4 * WIDTH];
    r.gather(&[6, 0, 6, 2], &mut out).unwrap();
    assert_eq!(out.to_vec(), [row_bytes(6..7), row_bytes(0..1), row_bytes(6..7), row_bytes(2..3)].concat());
}

#[test]
fn writing_non_whole_rows_or_past_the_end() {
    let dir = made("non-whole", 4);
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    check(w.write_rows(0, &[1, 2, 3]), is_input, &["3 bytes are not whole rows of 2 bytes"]);
    check(w.read_rows(0, &mut [0u8; 1]), is_input, &["1 bytes are not whole rows of 2 bytes"]);
    check(w.write_rows(5, &row_bytes(0..1)), is_input, &["row 5 is past the end (4 rows)"]);
    check(w.write_rows(u64::MAX, &row_bytes(0..1)), is_input, &["past the end"]);
    check(w.truncate(5), is_input, &["cannot truncate to 5 rows: there are 4"]);
    assert!(!w.has_changes());
    assert_eq!(w.rows(), 4);
    let mut out = vec![0u8; 4 * WIDTH];
    w.read_rows(0, &mut out).unwrap();
    assert_eq!(out, row_bytes(0..4));
}

#[test]
fn writing_on_a_read_only_handle() {
    let dir = made("read-only", 4);
    let before = read_manifest(&dir);
    let mut r = Collection::open(&dir).unwrap();
    assert!(!r.is_writable());
    let ro = &["read-only"][..];
    check(r.write_rows(0, &row_bytes(0..1)), is_input, ro);
    check(r.write_rows(4, &row_bytes(0..1)), is_input, ro);
    check(r.truncate(0), is_input, ro);
    check(r.flush(), is_input, ro);
    check(r.set_metadata(Default::default()), is_input, ro);
    let other = Collection::open(&dir).unwrap();
    check(r.extend_rows(&other), is_input, ro);
    check(r.extend_blocks(&other), is_input, ro);
    assert_eq!(read_manifest(&dir), before);
    assert_eq!(r.rows(), 4);
}

#[test]
fn extending_from_another_layout() {
    let dir = made("extend-layout", 4);
    let f32s = made_with("extend-layout-f32", RowLayout::new(Dtype::F32, vec![2], 3).unwrap(), 2);
    let blocks4 = made_with("extend-layout-blocks", RowLayout::new(Dtype::U8, vec![2], 4).unwrap(), 5);
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    let other = Collection::open(&f32s).unwrap();
    check(w.extend_rows(&other), is_input, &["cannot extend", "F32"]);
    check(w.extend_blocks(&other), is_input, &["cannot extend", "F32"]);
    // extend_blocks needs the same block size, extend_rows does not.
    let other = Collection::open(&blocks4).unwrap();
    check(w.extend_blocks(&other), is_input, &["in blocks of 4"]);
    assert_eq!(w.rows(), 4);
    w.extend_rows(&other).unwrap();
    let mut out = vec![0u8; 9 * WIDTH];
    w.read_rows(0, &mut out).unwrap();
    assert_eq!(out, [row_bytes(0..4), row_bytes(0..5)].concat());
}

#[test]
fn refresh_is_for_readers() {
    let dir = made("refresh-writer", 1);
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    check(w.refresh(), is_input, &["the writer's state is always the newest"]);
}

#[test]
fn block_that_is_a_directory() {
    let dir = made("dir-block", 7);
    let paths = block_paths(&dir);
    std::fs::remove_file(&paths[1]).unwrap();
    std::fs::create_dir(&paths[1]).unwrap();
    check_bad_block(&dir, 1, |k| matches!(k, ErrorKind::Io(_)), &[]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A block that is a symbolic link to a file outside the collection: the
/// writer appends to a committed partial block in place, so it must not
/// follow the link (refuse it, or copy the block first).
#[cfg(unix)]
#[test]
fn writer_does_not_write_through_a_symlinked_block() {
    let dir = made("symlink-block", 4);
    let outside_dir = crate::scratch("coll-hostile-symlink-outside");
    let outside = outside_dir.join("victim.dt");
    let paths = block_paths(&dir);
    std::fs::rename(&paths[1], &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &paths[1]).unwrap();
    let before = std::fs::read(&outside).unwrap();
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    // Either refused, or written somewhere else than the outside file.
    if w.write_rows(4, &row_bytes(4..6)).is_ok() {
        let _ = w.flush();
    }
    drop(w);
    assert!(std::fs::read(&outside).unwrap() == before, "the file outside the collection was written");
}

#[test]
fn writer_leaves_files_that_are_not_its_blocks_alone() {
    let dir = made("foreign", 4);
    let foreign = ["notes.txt", ".hidden", "blk-1-1.dt", "blk-0000000000000001-0000000g.dt", "data.dt"];
    for f in foreign {
        std::fs::write(dir.join(f), f).unwrap();
    }
    let mut w = Collection::open_writable(&dir, CollectionOptions::default()).unwrap();
    w.write_rows(0, &row_bytes(10..14)).unwrap();
    w.truncate(1).unwrap();
    w.flush().unwrap();
    drop(w);
    let layout = RowLayout::new(Dtype::U8, vec![WIDTH as u64], 3).unwrap();
    let mut w = Collection::create(&dir, layout, CollectionOptions::default()).unwrap();
    w.flush().unwrap();
    drop(w);
    for f in foreign {
        assert_eq!(std::fs::read_to_string(dir.join(f)).unwrap(), f);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
