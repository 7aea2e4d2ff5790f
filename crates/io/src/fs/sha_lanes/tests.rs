//! The lanes against one SHA-256 stream, on inputs of every length and
//! alignment, and the file and strided inputs.

use std::fs::File;

use super::*;

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

fn ring(b: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, b).as_ref().to_vec()
}

/// Writes the inputs to `file`, back to back after a 7-byte prefix (so
/// that no range is aligned), and returns their (offset, length).
fn write_all(inputs: &[Vec<u8>], file: &std::fs::File) -> Vec<(u64, u64)> {
    use std::io::Write;
    let mut f = file;
    f.write_all(b"prefix!").unwrap();
    let mut at = 7u64;
    let mut ranges = Vec::new();
    for v in inputs {
        f.write_all(v).unwrap();
        ranges.push((at, v.len() as u64));
        at += v.len() as u64;
    }
    ranges
}

#[track_caller]
fn check(inputs: &[Vec<u8>], tag: &str) {
    let as_bytes: Vec<Input<'_>> = inputs.iter().map(|v| Input::Bytes(v)).collect();
    let dir = std::env::temp_dir().join(format!("dt-lanes-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = File::options().create(true).truncate(true).read(true).write(true).open(dir.join("f")).unwrap();
    let ranges = write_all(inputs, &file);
    let as_file: Vec<Input<'_>> =
        ranges.iter().map(|&(offset, len)| Input::File { file: &file, offset, len }).collect();
    // Mixed: even inputs from memory, odd ones from the file.
    let mixed: Vec<Input<'_>> = (0..inputs.len()).map(|i| if i % 2 == 0 { as_bytes[i] } else { as_file[i] }).collect();
    for set in [&as_bytes, &as_file, &mixed] {
        for (i, d) in digests(set).unwrap().iter().enumerate() {
            assert_eq!(d.to_vec(), ring(&inputs[i]), "{tag}: input {i} of {} bytes", inputs[i].len());
        }
    }
    // The public entry point: memory inputs only.
    for (i, d) in sha256_many(inputs).iter().enumerate() {
        assert_eq!(d.to_vec(), ring(&inputs[i]), "{tag}: sha256_many, input {i}");
    }
    // Closed first: Windows removes no folder with an open file in it.
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_portable_path_hashes_what_it_takes() {
    // Memory and file inputs, as on CPUs without the SHA extensions.
    let inputs = [bytes(100, 1), bytes(0, 2), bytes(64, 3), bytes(CHUNK + 5, 4)];
    let dir = std::env::temp_dir().join(format!("dt-lanes-{}-portable", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = File::options().create(true).truncate(true).read(true).write(true).open(dir.join("f")).unwrap();
    let ranges = write_all(&inputs, &file);
    let slices: Vec<Input<'_>> = vec![
        Input::Bytes(&inputs[0]),
        Input::File { file: &file, offset: ranges[1].0, len: ranges[1].1 },
        Input::Bytes(&inputs[2]),
        Input::File { file: &file, offset: ranges[3].0, len: ranges[3].1 },
    ];
    let next = AtomicUsize::new(0);
    let order = [2, 0, 3, 1];
    let take = || order.get(next.fetch_add(1, Ordering::Relaxed)).copied();
    let got = one_at_a_time(&slices, &take, &|| false, &|_| {}).unwrap();
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), order);
    for (i, d) in got {
        assert_eq!(d.to_vec(), ring(&inputs[i]));
    }
    // Told to stop, it takes nothing more.
    next.store(0, Ordering::Relaxed);
    assert!(one_at_a_time(&slices, &take, &|| true, &|_| {}).unwrap().is_empty());
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_streams_fed_unevenly_match_ring() {
    // Two messages fed block-wise at different paces, one ending while
    // the other goes on, then both again from empty.
    for (la, lb) in [(0usize, 0usize), (64, 0), (4096 * 3 + 17, 4096), (63, 12345), (8192, 8192 + 55)] {
        let (a, b) = (bytes(la, 1), bytes(lb, 2));
        let mut s = TwoStreams::new();
        for _ in 0..2 {
            let (wa, wb) = (la / 64 * 64, lb / 64 * 64);
            let (mut pa, mut pb) = (0, 0);
            while pa < wa || pb < wb {
                let na = (wa - pa).min(4096);
                let nb = (wb - pb).min(64 * 3);
                s.update(&a[pa..pa + na], &b[pb..pb + nb]);
                pa += na;
                pb += nb;
            }
            assert_eq!(s.finish(0, &a[wa..]).to_vec(), ring(&a), "{la}");
            assert_eq!(s.finish(1, &b[wb..]).to_vec(), ring(&b), "{lb}");
        }
        // A tail of whole blocks is hashed by `finish` too.
        assert_eq!(s.finish(0, &a).to_vec(), ring(&a), "{la} whole");
    }
}

#[test]
fn strided_runs_match_ring_of_their_gathered_bytes() {
    // Runs of whole blocks (hashed in place, long and short), of other
    // lengths (gathered), one run, none, empty runs; each next to
    // contiguous inputs so that lanes pair them with everything.
    let span = bytes(3 * CHUNK + 4096, 42);
    let shapes = [
        (1024, 4096, 150),
        (64, 100, 2000),
        (128, 128, 1000),
        (1000, 1500, 400),
        (1, 3, 5000),
        (CHUNK + 64, CHUNK + 64, 2),
        (4096, 4096, 1),
        (0, 64, 10),
        (64, 64, 0),
    ];
    let runs: Vec<Strided<'_>> =
        shapes.iter().map(|&(run, stride, count)| Strided::new(&span, run, stride, count).unwrap()).collect();
    let gathered: Vec<Vec<u8>> = runs.iter().map(|r| r.runs().flatten().copied().collect()).collect();
    let plain: Vec<Vec<u8>> = (0..runs.len()).map(|i| bytes(i * 777, i as u8)).collect();
    let mut inputs = Vec::new();
    let mut want = Vec::new();
    for i in 0..runs.len() {
        inputs.extend([Input::Runs(runs[i]), Input::Bytes(&plain[i])]);
        want.extend([ring(&gathered[i]), ring(&plain[i])]);
    }
    for (i, d) in digests(&inputs).unwrap().iter().enumerate() {
        assert_eq!(d.to_vec(), want[i], "input {i}");
    }
    // Alone (one lane), and on the portable path.
    for (r, g) in runs.iter().zip(&gathered) {
        assert_eq!(digests(&[Input::Runs(*r)]).unwrap()[0].to_vec(), ring(g));
    }
    let next = AtomicUsize::new(0);
    let take = || (next.fetch_add(1, Ordering::Relaxed) < inputs.len()).then(|| next.load(Ordering::Relaxed) - 1);
    for (i, d) in one_at_a_time(&inputs, &take, &|| false, &|_| {}).unwrap() {
        assert_eq!(d.to_vec(), want[i], "portable, input {i}");
    }
}

#[test]
fn padding_fills_one_or_two_blocks() {
    let (buf, blocks) = padding(&[7; 55], 55);
    assert_eq!(blocks, 1);
    assert_eq!((buf[55], &buf[56..64]), (0x80, &(55u64 * 8).to_be_bytes()[..]));
    let (buf, blocks) = padding(&[7; 56], 120);
    assert_eq!(blocks, 2);
    assert_eq!((buf[56], &buf[120..128]), (0x80, &(120u64 * 8).to_be_bytes()[..]));
}

#[test]
fn every_length_around_the_block_boundaries_matches_ring() {
    // Lengths 0..=300 cover tails of every size and 0 to 4 whole blocks;
    // hashed together, lanes pair inputs of different lengths and take
    // new inputs as others finish.
    let inputs: Vec<Vec<u8>> = (0..=300).map(|n| bytes(n, n as u8)).collect();
    check(&inputs, "lengths");
}

#[test]
fn large_and_uneven_inputs_match_ring() {
    // Around the chunk size of file inputs too.
    let inputs = [
        bytes(3 << 20, 1),
        bytes(1, 2),
        bytes((1 << 20) + 63, 3),
        bytes(0, 4),
        bytes(5 << 20, 5),
        bytes(1 << 20, 6),
        bytes((1 << 20) - 1, 7),
        bytes((2 << 20) + 56, 8),
        bytes(CHUNK - 1, 9),
        bytes(CHUNK, 10),
        bytes(CHUNK + 1, 11),
        bytes(3 * CHUNK + 64, 12),
    ];
    check(&inputs, "large");
    assert!(digests(&[]).unwrap().is_empty());
    // A known answer: SHA-256("abc").
    let abc = digests(&[Input::Bytes(b"abc")]).unwrap()[0];
    assert_eq!(crate::format::hex_digest(&abc), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

#[test]
fn progress_counts_every_byte_once() {
    let inputs: Vec<Vec<u8>> =
        [0, 1, 63, 64, 65, 1 << 20, (1 << 20) + 100, 5000].iter().map(|&n| bytes(n, 9)).collect();
    let slices: Vec<Input<'_>> = inputs.iter().map(|v| Input::Bytes(v)).collect();
    let seen = std::sync::atomic::AtomicU64::new(0);
    digests_with(&slices, &|n| {
        seen.fetch_add(n, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(seen.into_inner(), inputs.iter().map(|v| v.len() as u64).sum::<u64>());
}

#[test]
fn a_short_file_is_a_read_error() {
    let dir = std::env::temp_dir().join(format!("dt-lanes-{}-short", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("f"), bytes(1000, 1)).unwrap();
    let file = File::open(dir.join("f")).unwrap();
    let inputs =
        [Input::File { file: &file, offset: 0, len: 1000 }, Input::File { file: &file, offset: 500, len: 600 }];
    let err = digests(&inputs).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    drop(file);
    std::fs::remove_dir_all(&dir).unwrap();
}
