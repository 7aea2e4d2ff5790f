//! `Reader::read_region_into` and `read_regions_into`: regions of tensors
//! gathered as they are read (two at a time in a batch), from plain,
//! digested, signed, encrypted and compressed files, checked against the
//! stored digest or one the caller gives.

use std::sync::Arc;

use deathtensors_format::{Dtype, TensorSpec};
use deathtensors_io::{
    save, Compress, ErrorKind, KeyRing, PlacedRead, Placement, ReadOptions, Reader, RegionCheck, RegionRead,
    SigningKey, SymmetricKey, WriteOptions,
};

use crate::scratch;

/// A `rows x cols` matrix of u32 whose element `(r, c)` is `r * 100_000 + c`.
fn matrix(rows: u64, cols: u64) -> (TensorSpec, Vec<u8>) {
    let bytes = (0..rows).flat_map(|r| (0..cols).flat_map(move |c| ((r * 100_000 + c) as u32).to_le_bytes())).collect();
    (TensorSpec::new("m", Dtype::U32, [rows, cols]), bytes)
}

/// The region, element by element, as it must come out.
fn expected(start: [u64; 2], len: [u64; 2]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in start[0]..start[0] + len[0] {
        for c in start[1]..start[1] + len[1] {
            out.extend(((r * 100_000 + c) as u32).to_le_bytes());
        }
    }
    out
}

fn region(r: &Reader, start: [u64; 2], len: [u64; 2], check: RegionCheck) -> deathtensors_io::Result<Vec<u8>> {
    let mut buf = vec![0xAA; (len[0] * len[1] * 4) as usize];
    r.read_region_into("m", &start, &len, &mut buf, check).map(|()| buf)
}

/// Regions a resharded load asks for: column bands, row bands, single
/// rows and elements, the whole tensor, empty ones.
const REGIONS: &[([u64; 2], [u64; 2])] = &[
    ([0, 0], [300, 517]),
    ([0, 0], [300, 258]),
    ([0, 258], [300, 259]),
    ([17, 100], [250, 3]),
    ([120, 0], [64, 517]),
    ([299, 516], [1, 1]),
    ([5, 7], [0, 9]),
];

#[test]
fn regions_of_plain_and_digested_files_match_the_elements() {
    let dir = scratch("region-plain");
    // 300 x 517 x 4 bytes: about 600 KiB, three 256 KiB pieces, rows that
    // straddle pieces.
    let (spec, bytes) = matrix(300, 517);
    let plain = dir.join("plain.dt");
    let digested = dir.join("digested.dt");
    save(&plain, vec![(spec.clone(), &bytes[..])], &WriteOptions::default()).unwrap();
    save(
        &digested,
        vec![(spec, &bytes[..])],
        &WriteOptions { checksum: true, footer: false, ..WriteOptions::default() },
    )
    .unwrap();
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref().try_into().unwrap();
    for &(start, len) in REGIONS {
        let want = expected(start, len);
        let p = Reader::open(&plain).unwrap();
        assert_eq!(region(&p, start, len, RegionCheck::Unchecked).unwrap(), want, "{start:?} {len:?}");
        assert_eq!(region(&p, start, len, RegionCheck::Digest(digest)).unwrap(), want);
        let d = Reader::open(&digested).unwrap();
        assert_eq!(region(&d, start, len, RegionCheck::Stored).unwrap(), want);
        assert_eq!(region(&d, start, len, RegionCheck::Unchecked).unwrap(), want);
    }
    // No digest in the file: nothing to check against.
    let err = region(&Reader::open(&plain).unwrap(), [0, 0], [1, 1], RegionCheck::Stored).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NoChecksum { .. }), "{err}");
}

#[test]
fn a_damaged_tensor_fails_any_checked_region_and_zeroes_the_buffer() {
    let dir = scratch("region-damaged");
    let (spec, bytes) = matrix(300, 517);
    let path = dir.join("m.dt");
    save(&path, vec![(spec, &bytes[..])], &WriteOptions { checksum: true, footer: false, ..WriteOptions::default() })
        .unwrap();
    // Damage a byte in the last rows, far from the region read below.
    let at = Reader::open(&path).unwrap().tensor("m").unwrap().file_offset as usize + bytes.len() - 10;
    let mut file = std::fs::read(&path).unwrap();
    file[at] ^= 0x01;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open(&path).unwrap();
    let mut buf = vec![0xAA; 10 * 20 * 4];
    let err = r.read_region_into("m", &[0, 0], &[10, 20], &mut buf, RegionCheck::Stored).unwrap_err();
    match err.kind() {
        ErrorKind::TensorDigestMismatch { tensor, .. } => assert_eq!(tensor, "m"),
        other => panic!("{other:?}"),
    }
    assert!(buf.iter().all(|&b| b == 0));
    // The caller's digest (of the undamaged bytes) fails too.
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref().try_into().unwrap();
    let err = region(&r, [0, 0], [10, 20], RegionCheck::Digest(digest)).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    // Unchecked, only the region's bytes are read: the damage is outside.
    assert_eq!(region(&r, [0, 0], [10, 20], RegionCheck::Unchecked).unwrap(), expected([0, 0], [10, 20]));
}

#[test]
fn regions_that_do_not_fit_are_refused_naming_the_dimension() {
    let dir = scratch("region-bad");
    let (spec, bytes) = matrix(4, 6);
    let path = dir.join("m.dt");
    save(&path, vec![(spec, &bytes[..])], &WriteOptions::default()).unwrap();
    let r = Reader::open(&path).unwrap();
    let mut buf = vec![0u8; 4];
    let err = r.read_region_into("m", &[0, 5], &[1, 2], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("dimension 1 is 6 long") && err.to_string().contains("\"m\""), "{err}");
    let err = r.read_region_into("m", &[0], &[1], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(err.to_string().contains("2 dimensions"), "{err}");
    let err = r.read_region_into("m", &[0, 0], &[1, 2], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(err.to_string().contains("buffer is 4 bytes"), "{err}");
    let err = r.read_region_into("nope", &[0, 0], &[1, 1], &mut buf, RegionCheck::Unchecked).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorNotFound(_)), "{err}");
}

#[test]
fn encrypted_compressed_and_signed_files_give_the_same_regions() {
    let dir = scratch("region-kinds");
    let (spec, bytes) = matrix(300, 517);
    let key = Arc::new(SymmetricKey::new("team", &[7u8; 32]).unwrap());
    let signer = Arc::new(SigningKey::generate());
    let kinds = [
        ("encrypted", crate::encrypted_for(&key)),
        (
            "compressed",
            WriteOptions { compress: Compress::Chunked { level: 1 }, checksum: true, ..WriteOptions::default() },
        ),
        ("signed", WriteOptions { signers: vec![signer.clone()], ..WriteOptions::default() }),
    ];
    for (name, options) in kinds {
        let path = dir.join(format!("{name}.dt"));
        save(&path, vec![(spec.clone(), &bytes[..])], &options).unwrap();
        let mut keys = KeyRing::new();
        keys.add_symmetric(key.clone());
        let read = ReadOptions { keys, trusted_signers: vec![signer.verifying_key()], ..ReadOptions::default() };
        let read = if name == "signed" { read } else { ReadOptions { trusted_signers: vec![], ..read } };
        let r = Reader::open_with(&path, read).unwrap();
        for &(start, len) in REGIONS {
            let got = region(&r, start, len, RegionCheck::Unchecked).unwrap();
            assert_eq!(got, expected(start, len), "{name} {start:?} {len:?}");
        }
    }
    // A signed file read under its signer checks every read, asked or not:
    // a damaged byte outside the region still fails it.
    let path = dir.join("signed.dt");
    let at = Reader::open(&path).unwrap().tensor("m").unwrap().file_offset as usize + 100;
    let mut file = std::fs::read(&path).unwrap();
    file[at] ^= 0x01;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open_with(
        &path,
        ReadOptions { trusted_signers: vec![signer.verifying_key()], ..ReadOptions::default() },
    )
    .unwrap();
    let err = region(&r, [200, 0], [10, 10], RegionCheck::Unchecked).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    // A caller's digest of the damaged bytes does not stand in for the
    // signed one.
    let t = r.tensor("m").unwrap();
    let start = t.file_offset as usize;
    let damaged = &file[start..start + t.info.byte_len() as usize];
    let digest: [u8; 32] = ring::digest::digest(&ring::digest::SHA256, damaged).as_ref().try_into().unwrap();
    let err = region(&r, [200, 0], [10, 10], RegionCheck::Digest(digest)).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
}

/// Tensors of several sizes around the piece (256 KiB) and the hash block
/// (64 bytes): so that the two lanes of a batch end at different points
/// and each takes the next read mid-way through the other's.
/// A tensor of a batch's file: name, rows, columns, bytes.
type Stored = (String, u64, u64, Vec<u8>);
/// A read of a batch: tensor, start, length, the bytes it must give.
type Wanted = (String, [u64; 2], [u64; 2], Vec<u8>);

fn batch_file(dir: &std::path::Path) -> (std::path::PathBuf, Vec<Stored>) {
    let shapes = [(300u64, 517u64), (1, 1), (64, 1024), (0, 5), (513, 129), (7, 3), (65, 4096), (2, 17)];
    let tensors: Vec<Stored> = shapes
        .iter()
        .enumerate()
        .map(|(k, &(rows, cols))| {
            let bytes = (0..rows * cols).flat_map(|i| ((i * 7 + k as u64) as u32).to_le_bytes()).collect();
            (format!("t{k}"), rows, cols, bytes)
        })
        .collect();
    let path = dir.join("batch.dt");
    let specs = tensors.iter().map(|(n, r, c, b)| (TensorSpec::new(n.clone(), Dtype::U32, [*r, *c]), &b[..])).collect();
    save(&path, specs, &WriteOptions { checksum: true, footer: false, ..WriteOptions::default() }).unwrap();
    (path, tensors)
}

/// Each tensor's left column band, its whole self and a middle block,
/// element by element.
fn batch_regions(tensors: &[Stored]) -> Vec<Wanted> {
    let mut out = Vec::new();
    for (name, rows, cols, bytes) in tensors {
        let (rows, cols) = (*rows, *cols);
        for (start, len) in
            [([0, 0], [rows, cols.div_ceil(2)]), ([0, 0], [rows, cols]), ([rows / 3, cols / 4], [rows / 2, cols / 2])]
        {
            let mut want = Vec::new();
            for r in start[0]..start[0] + len[0] {
                let at = ((r * cols + start[1]) * 4) as usize;
                want.extend_from_slice(&bytes[at..at + (len[1] * 4) as usize]);
            }
            out.push((name.clone(), start, len, want));
        }
    }
    out
}

#[test]
fn a_batch_of_regions_reads_what_each_read_alone_reads() {
    let dir = scratch("region-batch");
    let (path, tensors) = batch_file(&dir);
    let regions = batch_regions(&tensors);
    let digests: std::collections::HashMap<&str, [u8; 32]> = tensors
        .iter()
        .map(|(n, _, _, b)| (n.as_str(), ring::digest::digest(&ring::digest::SHA256, b).as_ref().try_into().unwrap()))
        .collect();
    let r = Reader::open(&path).unwrap();
    // Every check in turn, and all three mixed in one batch.
    let checks = [
        |_: &str, _: usize| RegionCheck::Stored,
        |_: &str, _: usize| RegionCheck::Unchecked,
        |_: &str, k: usize| if k.is_multiple_of(3) { RegionCheck::Unchecked } else { RegionCheck::Stored },
    ];
    for (c, check) in checks.iter().enumerate() {
        let mut bufs: Vec<Vec<u8>> = regions.iter().map(|(_, _, _, want)| vec![0xAA; want.len()]).collect();
        let mut reads: Vec<RegionRead<'_>> = regions
            .iter()
            .zip(bufs.iter_mut())
            .enumerate()
            .map(|(k, ((name, start, len, _), buf))| RegionRead { name, start, len, buf, check: check(name, k) })
            .collect();
        r.read_regions_into(&mut reads).unwrap();
        for ((name, start, len, want), got) in regions.iter().zip(&bufs) {
            assert!(got == want, "check {c}: {name} {start:?} {len:?}");
        }
    }
    let mut bufs: Vec<Vec<u8>> = regions.iter().map(|(_, _, _, want)| vec![0; want.len()]).collect();
    let mut reads: Vec<RegionRead<'_>> = regions
        .iter()
        .zip(bufs.iter_mut())
        .map(|((name, start, len, _), buf)| RegionRead {
            name,
            start,
            len,
            buf,
            check: RegionCheck::Digest(digests[name.as_str()]),
        })
        .collect();
    r.read_regions_into(&mut reads).unwrap();
    assert!(regions.iter().zip(&bufs).all(|((_, _, _, want), got)| got == want));
}

#[test]
fn a_damaged_tensor_fails_its_batch_naming_it_and_zeroes_every_buffer() {
    let dir = scratch("region-batch-damaged");
    let (path, tensors) = batch_file(&dir);
    let regions = batch_regions(&tensors);
    // Damage the last byte of t6 (65 x 4096: the largest, read in the
    // second lane while t5 and t7 pass through the first).
    let end = {
        let r = Reader::open(&path).unwrap();
        let t = r.tensor("t6").unwrap();
        t.file_offset + t.info.byte_len() - 1
    };
    let mut file = std::fs::read(&path).unwrap();
    file[end as usize] ^= 0x80;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open(&path).unwrap();
    let mut bufs: Vec<Vec<u8>> = regions.iter().map(|(_, _, _, want)| vec![0xAA; want.len()]).collect();
    let mut reads: Vec<RegionRead<'_>> = regions
        .iter()
        .zip(bufs.iter_mut())
        .map(|((name, start, len, _), buf)| RegionRead { name, start, len, buf, check: RegionCheck::Stored })
        .collect();
    let err = r.read_regions_into(&mut reads).unwrap_err();
    match err.kind() {
        ErrorKind::TensorDigestMismatch { tensor, .. } => assert_eq!(tensor, "t6"),
        other => panic!("{other:?}"),
    }
    assert!(bufs.iter().all(|b| b.iter().all(|&x| x == 0)), "a buffer kept bytes after the batch failed");
    // Unchecked, the band left of the damage reads as it is.
    let mut buf = vec![0u8; 65 * 2048 * 4];
    r.read_regions_into(&mut [RegionRead {
        name: "t6",
        start: &[0, 0],
        len: &[65, 2048],
        buf: &mut buf,
        check: RegionCheck::Unchecked,
    }])
    .unwrap();
    assert!(buf == regions.iter().find(|(n, s, l, _)| n == "t6" && *s == [0, 0] && *l == [65, 2048]).unwrap().3);
}

#[test]
fn a_batch_is_checked_whole_before_any_byte_is_read() {
    let dir = scratch("region-batch-bad");
    let (path, _) = batch_file(&dir);
    let r = Reader::open(&path).unwrap();
    let mut good = vec![0xAA; 4];
    let mut bad = vec![0u8; 4];
    let err = r
        .read_regions_into(&mut [
            RegionRead { name: "t1", start: &[0, 0], len: &[1, 1], buf: &mut good, check: RegionCheck::Stored },
            RegionRead { name: "t7", start: &[1, 16], len: &[1, 2], buf: &mut bad, check: RegionCheck::Stored },
        ])
        .unwrap_err();
    assert!(err.to_string().contains("\"t7\"") && err.to_string().contains("dimension 1 is 17 long"), "{err}");
    assert_eq!(good, [0; 4]);
    // An empty batch reads nothing and succeeds.
    r.read_regions_into(&mut []).unwrap();
}

/// `m` (300 x 517 u32) stored as column tiles of 130 (the last 127), rows
/// 0..300, each a tensor `m@0,<first column>` with its digest: as a
/// distributed checkpoint stores a chunk.
fn tiled(dir: &std::path::Path) -> (std::path::PathBuf, Vec<(String, u64, u64)>) {
    tiles_of(dir, 300, &[130, 130, 130, 127])
}

#[test]
fn placed_reads_fill_their_parts_of_one_buffer() {
    let dir = scratch("region-placed");
    let (path, tiles) = tiled(&dir);
    let r = Reader::open(&path).unwrap();
    // Whole tiles into their columns of the whole matrix (the same
    // placement loaded again), checked.
    let lens: Vec<[u64; 2]> = tiles.iter().map(|(_, c0, c1)| [300, c1 - c0]).collect();
    let reads = into_columns(&tiles, &lens, 517, RegionCheck::Stored);
    let mut full = vec![0xAA; 300 * 517 * 4];
    r.read_regions_placed(&reads, &mut [&mut full]).unwrap();
    assert!(full == expected([0, 0], [300, 517]));
    // Columns 200..400 of rows 10..250 (another placement: parts of tiles
    // 130.., 260.. and 390..) into a [240, 200] buffer, next to a second
    // buffer that one read fills contiguously.
    let want = expected([10, 200], [240, 200]);
    let parts = [
        ("m@0,130", [10u64, 70], [240u64, 60], 0usize),
        ("m@0,260", [10, 0], [240, 130], 60),
        ("m@0,390", [10, 0], [240, 10], 190),
    ];
    let mut band = vec![0xAA; want.len()];
    let mut other = vec![0xAA; 4 * 5 * 7];
    let mut reads: Vec<PlacedRead<'_>> = parts
        .iter()
        .map(|(name, start, len, col)| PlacedRead {
            name,
            start,
            len,
            buf: 1,
            place: Placement { offset: col * 4, run: (len[1] * 4) as usize, stride: 200 * 4 },
            check: RegionCheck::Stored,
        })
        .collect();
    reads.push(PlacedRead {
        name: "m@0,0",
        start: &[3, 2],
        len: &[5, 7],
        buf: 0,
        place: Placement::contiguous(0, 140),
        check: RegionCheck::Unchecked,
    });
    r.read_regions_placed(&reads, &mut [&mut other, &mut band]).unwrap();
    assert!(band == want);
    assert!(other == expected([3, 2], [5, 7]));
}

#[test]
fn placements_that_do_not_fit_are_refused_before_any_read() {
    let dir = scratch("region-placed-bad");
    let (path, _) = tiled(&dir);
    let r = Reader::open(&path).unwrap();
    let read = |place: Placement, buf: usize| PlacedRead {
        name: "m@0,0",
        start: &[0, 0],
        len: &[2, 130],
        buf,
        place,
        check: RegionCheck::Stored,
    };
    let mut buf = vec![0xAA; 2 * 520];
    for (place, index, message) in [
        (Placement { offset: 0, run: 520, stride: 520 }, 1, "no buffer 1"),
        (Placement { offset: 4, run: 520, stride: 520 }, 0, "does not fit"),
        (Placement { offset: 0, run: 520, stride: 600 }, 0, "does not fit"),
        (Placement { offset: 0, run: 520, stride: 100 }, 0, "does not fit"), // rows overlap
        (Placement { offset: 0, run: 300, stride: 520 }, 0, "does not fit"), // not whole rows
        (Placement { offset: 0, run: 0, stride: 0 }, 0, "does not fit"),
    ] {
        let err = r.read_regions_placed(&[read(place, index)], &mut [&mut buf]).unwrap_err();
        assert!(err.to_string().contains(message) && err.to_string().contains("m@0,0"), "{place:?}: {err}");
        assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err:?}");
    }
}

#[test]
fn a_failed_placed_read_zeroes_only_the_bytes_it_places() {
    let dir = scratch("region-placed-damaged");
    let (path, _) = tiled(&dir);
    let end = {
        let r = Reader::open(&path).unwrap();
        let t = r.tensor("m@0,130").unwrap();
        t.file_offset + t.info.byte_len() - 1
    };
    let mut file = std::fs::read(&path).unwrap();
    file[end as usize] ^= 0x01;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open(&path).unwrap();
    let row = 517 * 4;
    let mut full = vec![0xAA; 300 * row];
    // Two whole tiles, into columns 0..130 and 130..260; the second damaged.
    let reads = [("m@0,0", 0usize), ("m@0,130", 130)].map(|(name, c0)| PlacedRead {
        name,
        start: &[0, 0],
        len: &[300, 130],
        buf: 0,
        place: Placement { offset: c0 * 4, run: 130 * 4, stride: row },
        check: RegionCheck::Stored,
    });
    let err = r.read_regions_placed(&reads, &mut [&mut full]).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "m@0,130"), "{err}");
    for line in full.chunks(row) {
        assert!(line[..260 * 4].iter().all(|&b| b == 0), "a placed byte kept what was read");
        assert!(line[260 * 4..].iter().all(|&b| b == 0xAA), "a byte no read places was touched");
    }
}

/// Tiles `m@0,{c0}` of `rows` rows and the given widths (u32 columns),
/// side by side, with their digests. Tiles of 256 columns span several
/// of the 256 KiB pieces a tile is read in, and rows end inside a piece.
fn tiles_of(dir: &std::path::Path, rows: u64, widths: &[u64]) -> (std::path::PathBuf, Vec<(String, u64, u64)>) {
    let mut tiles = Vec::new();
    let mut c0 = 0;
    for &w in widths {
        tiles.push((format!("m@0,{c0}"), c0, c0 + w));
        c0 += w;
    }
    let data: Vec<(TensorSpec, Vec<u8>)> = tiles
        .iter()
        .map(|(name, c0, c1)| {
            (TensorSpec::new(name.as_str(), Dtype::U32, [rows, c1 - c0]), expected([0, *c0], [rows, c1 - c0]))
        })
        .collect();
    let path = dir.join("tiles.dt");
    let options = WriteOptions { checksum: true, footer: false, ..WriteOptions::default() };
    save(&path, data.iter().map(|(s, b)| (s.clone(), &b[..])).collect(), &options).unwrap();
    (path, tiles)
}

/// Whole tiles into their columns of a `[rows, cols]` matrix.
fn into_columns<'a>(
    tiles: &'a [(String, u64, u64)],
    shapes: &'a [[u64; 2]],
    cols: u64,
    check: RegionCheck,
) -> Vec<PlacedRead<'a>> {
    tiles
        .iter()
        .zip(shapes)
        .map(|((name, c0, c1), len)| PlacedRead {
            name,
            start: &[0, 0],
            len,
            buf: 0,
            place: Placement { offset: *c0 as usize * 4, run: ((c1 - c0) * 4) as usize, stride: cols as usize * 4 },
            check,
        })
        .collect()
}

#[test]
fn tiles_of_many_widths_go_to_their_columns() {
    let dir = scratch("region-widths");
    let rows = 700;
    let widths = [128, 256, 130, 16, 256, 128, 1];
    let (path, tiles) = tiles_of(&dir, rows, &widths);
    let cols: u64 = widths.iter().sum();
    let r = Reader::open(&path).unwrap();
    let shapes: Vec<[u64; 2]> = widths.iter().map(|&w| [rows, w]).collect();
    let want = expected([0, 0], [rows, cols]);
    // Checked and unchecked; every tile at once (two lanes, then one
    // alone), and in batches of one, two and three (one lane; two lanes
    // ending together or apart).
    for check in [RegionCheck::Stored, RegionCheck::Unchecked] {
        let reads = into_columns(&tiles, &shapes, cols, check);
        for batch in [reads.len(), 1, 2, 3] {
            let mut full = vec![0xAA; want.len()];
            for part in reads.chunks(batch) {
                r.read_regions_placed(part, &mut [&mut full]).unwrap();
            }
            assert!(full == want, "{check:?}, batches of {batch}");
        }
    }
    // A tile's digest given by the caller.
    let digest = {
        let t = r.tensor("m@0,128").unwrap();
        **t.info.sha256.as_ref().unwrap()
    };
    let mut full = vec![0xAA; want.len()];
    let mut reads = into_columns(&tiles[1..2], &shapes[1..2], cols, RegionCheck::Digest(digest));
    r.read_regions_placed(&reads, &mut [&mut full]).unwrap();
    let mut wrong = digest;
    wrong[0] ^= 1;
    reads[0].check = RegionCheck::Digest(wrong);
    let err = r.read_regions_placed(&reads, &mut [&mut full]).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "m@0,128"), "{err}");
}

#[test]
fn a_tile_damaged_past_its_first_piece_is_refused_and_its_places_zeroed() {
    let dir = scratch("region-widths-damaged");
    let rows = 700;
    let widths = [128, 256, 128];
    let (path, tiles) = tiles_of(&dir, rows, &widths);
    let cols: u64 = widths.iter().sum();
    // A byte in the middle of the second tile (its second 256 KiB piece).
    let at = {
        let r = Reader::open(&path).unwrap();
        let t = r.tensor("m@0,128").unwrap();
        t.file_offset + (300 << 10) + 5
    };
    let mut file = std::fs::read(&path).unwrap();
    file[at as usize] ^= 0x10;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open(&path).unwrap();
    let shapes: Vec<[u64; 2]> = widths.iter().map(|&w| [rows, w]).collect();
    // The first two tiles only: the third's columns are no read's.
    let reads = into_columns(&tiles[..2], &shapes[..2], cols, RegionCheck::Stored);
    let mut full = vec![0xAA; (rows * cols * 4) as usize];
    let err = r.read_regions_placed(&reads, &mut [&mut full]).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { tensor, .. } if tensor == "m@0,128"), "{err}");
    for line in full.chunks(cols as usize * 4) {
        assert!(line[..384 * 4].iter().all(|&b| b == 0), "a placed byte kept what was read");
        assert!(line[384 * 4..].iter().all(|&b| b == 0xAA), "a byte no read places was touched");
    }
}

#[test]
fn a_file_cut_short_under_a_placed_read_is_an_error_not_a_short_tensor() {
    let dir = scratch("region-widths-cut");
    let rows = 700;
    let (path, tiles) = tiles_of(&dir, rows, &[256]);
    let r = Reader::open(&path).unwrap();
    let end = {
        let t = r.tensor("m@0,0").unwrap();
        t.file_offset + t.info.byte_len() / 2
    };
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(end).unwrap();
    let shapes = [[rows, 256]];
    let reads = into_columns(&tiles, &shapes, 512, RegionCheck::Unchecked);
    let mut full = vec![0xAA; (rows * 512 * 4) as usize];
    let err = r.read_regions_placed(&reads, &mut [&mut full]).unwrap_err();
    assert!(err.to_string().contains("file ends at byte"), "{err}");
    for line in full.chunks(512 * 4) {
        assert!(line[..256 * 4].iter().all(|&b| b == 0), "a placed byte kept what was read");
        assert!(line[256 * 4..].iter().all(|&b| b == 0xAA), "a byte no read places was touched");
    }
}
