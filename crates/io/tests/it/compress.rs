//! Compressed files: tensors in chunks (flag bit 5) and the whole blob as
//! one zstd frame (flag bit 0, as deathtensors 0.3.0 writes it). Round trips
//! of every dtype, slices across chunk edges, tensors that do not shrink,
//! determinism, and hostile chunks (bombs, short, corrupt, truncated frames).

use deathtensors_format::{
    Codec, Compression, Dtype, Flags, Head, Header, Limits, Metadata, TensorSpec, DEFAULT_COMPRESSION_CHUNK,
};
use deathtensors_io::{save, save_from, Compress, ErrorKind, Reader, WriteOptions};
use deathtensors_testkit::bytes::noise;

const MIB: usize = 1 << 20;

/// Compressible bytes: small floats-like values with a slowly varying high
/// byte, different per seed.
fn smooth(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| if i % 2 == 1 { 0x3c + (i / 4096 % 3) as u8 } else { (i as u8).wrapping_mul(seed | 1) }).collect()
}

fn options(compress: Compress, checksum: bool) -> WriteOptions {
    WriteOptions { compress, checksum, durable: false, ..WriteOptions::default() }
}

/// Every dtype, at sizes around chunk edges, plus tiny, empty and noisy tensors.
fn corpus() -> Vec<(TensorSpec, Vec<u8>)> {
    let mut out = Vec::new();
    for (k, dtype) in Dtype::ALL.iter().enumerate() {
        // 2 MiB + a few elements: three chunks, the last one short.
        // Whole bytes for sub-byte dtypes: a multiple of 8 elements.
        let elems: u64 = (2 * MIB as u64 + 24) * 8 / dtype.bits() / 8 * 8;
        let len = dtype.byte_len(elems).unwrap() as usize;
        out.push((TensorSpec::new(format!("t.{}", dtype.name()), *dtype, [elems]), smooth(k as u8, len)));
    }
    out.push((TensorSpec::new("tiny", Dtype::F32, [3]), smooth(7, 12)));
    out.push((TensorSpec::new("odd", Dtype::U8, [5000, 3]), smooth(9, 15_000)));
    out.push((TensorSpec::new("empty", Dtype::F32, [0, 4]), vec![]));
    out.push((TensorSpec::new("noise", Dtype::F32, [300_000]), noise(5, 1_200_000)));
    out
}

fn borrowed(c: &[(TensorSpec, Vec<u8>)]) -> Vec<(TensorSpec, &[u8])> {
    c.iter().map(|(s, b)| (s.clone(), &b[..])).collect()
}

#[track_caller]
fn check_reads(path: &std::path::Path, corpus: &[(TensorSpec, Vec<u8>)]) {
    let r = Reader::open(path).unwrap();
    assert!(r.is_compressed());
    for (spec, bytes) in corpus {
        assert_eq!(&r.read(&spec.name).unwrap(), bytes, "{}", spec.name);
    }
    // The whole file at once, on all cores, at the places `data_layout` says.
    let (layout, len) = r.data_layout();
    let mut all = vec![1u8; len as usize];
    r.read_data_into(&mut all).unwrap();
    for (i, t) in r.header().tensors().iter().enumerate() {
        let (start, end) = layout[i];
        let want = &corpus.iter().find(|(s, _)| s.name == t.name).unwrap().1;
        assert_eq!(&all[start as usize..end as usize], &want[..], "{}", t.name);
    }
}

#[test]
fn chunked_roundtrip_every_dtype() {
    let dir = crate::scratch("compress-roundtrip");
    let corpus = corpus();
    let path = dir.join("c.dt");
    let header = save(&path, borrowed(&corpus), &options(Compress::Chunked { level: 3 }, true)).unwrap();
    check_reads(&path, &corpus);
    let r = Reader::open(&path).unwrap();
    r.verify().unwrap();
    assert!(r.head().is_chunk_compressed());
    // Tiny, empty and noisy tensors are stored raw, with no table entry.
    for name in ["tiny", "empty", "noise"] {
        assert!(!r.is_tensor_compressed(name), "{name}");
    }
    assert!(r.is_tensor_compressed("t.BF16") && r.is_tensor_compressed("odd"));
    let bf16 = r.header().get("t.BF16").unwrap();
    assert!(bf16.stored_len() < bf16.byte_len() / 2, "{} of {}", bf16.stored_len(), bf16.byte_len());
    assert_eq!(header, *r.header());
    // Digests are of the raw bytes.
    let t = r.header().get("odd").unwrap();
    assert_eq!(*t.sha256.as_deref().unwrap(), ring_sha(&corpus.iter().find(|(s, _)| s.name == "odd").unwrap().1));
    // Compressed tensors cannot be borrowed or mapped.
    let m = unsafe { Reader::open_mmap(&path) }.unwrap();
    let e = m.bytes("odd").unwrap_err();
    assert!(e.to_string().contains("compressed"), "{e}");
    assert!(m.bytes("tiny").is_ok());
    assert!(unsafe { m.map_private() }.is_err());
}

fn ring_sha(bytes: &[u8]) -> [u8; 32] {
    let hex = crate::sha256_hex(bytes);
    deathtensors_format::parse_hex_digest(&hex).unwrap()
}

#[test]
fn slices_touch_their_chunks() {
    let dir = crate::scratch("compress-slices");
    let bytes = smooth(3, 3 * MIB + 100);
    let spec = TensorSpec::new("w", Dtype::BF16, [(3 * MIB as u64 + 100) / 2]);
    let path = dir.join("s.dt");
    save(&path, vec![(spec, &bytes[..])], &options(Compress::Chunked { level: 1 }, false)).unwrap();
    let r = Reader::open(&path).unwrap();
    let c = DEFAULT_COMPRESSION_CHUNK as usize;
    for (start, len) in [(0, 1), (c - 3, 7), (c - 1, c + 2), (2 * c, c + 100), (3 * c + 99, 1), (5, 3 * c)] {
        let mut buf = vec![0u8; len];
        r.read_range_into("w", start as u64, &mut buf).unwrap();
        assert_eq!(&buf[..], &bytes[start..start + len], "{start}+{len}");
    }
    let mut buf = vec![0u8; 2];
    assert!(r.read_range_into("w", (3 * c + 99) as u64, &mut buf).is_err());
    // A slice reads only its chunks: corrupt chunk 0, and a slice of chunk 2 still reads.
    let table = r.header().chunk_table(0).unwrap();
    let first = table.chunks().next().unwrap();
    let mut file = std::fs::read(&path).unwrap();
    let at = r.head().data_start as usize + first.stored.0 as usize + 10;
    file[at] ^= 0xff;
    file[at + 1] ^= 0xff;
    std::fs::write(&path, &file).unwrap();
    let r = Reader::open(&path).unwrap();
    let mut buf = vec![0u8; 100];
    r.read_range_into("w", 2 * c as u64, &mut buf).unwrap();
    assert_eq!(&buf[..], &bytes[2 * c..2 * c + 100]);
    let e = r.read("w").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::DecompressChunk { chunk: 0, .. }), "{e}");
    assert!(e.to_string().contains("tensor \"w\", chunk 0"), "{e}");
}

#[test]
fn saves_are_deterministic_and_streamed_saves_agree() {
    let dir = crate::scratch("compress-determinism");
    let corpus = corpus();
    let (a, b, c) = (dir.join("a.dt"), dir.join("b.dt"), dir.join("c.dt"));
    let o = options(Compress::Chunked { level: 3 }, true);
    save(&a, borrowed(&corpus), &o).unwrap();
    save(&b, borrowed(&corpus), &o).unwrap();
    let specs: Vec<TensorSpec> = corpus.iter().map(|(s, _)| s.clone()).collect();
    save_from(&c, specs, &o, |name, offset, buf| {
        let bytes = &corpus.iter().find(|(s, _)| s.name == name).unwrap().1;
        buf.copy_from_slice(&bytes[offset as usize..offset as usize + buf.len()]);
        Ok(())
    })
    .unwrap();
    let fa = std::fs::read(&a).unwrap();
    assert_eq!(fa, std::fs::read(&b).unwrap());
    assert_eq!(fa, std::fs::read(&c).unwrap());
    assert_eq!(crate::entries(&dir), ["a.dt", "b.dt", "c.dt"]);
}

#[test]
fn blob_mode_roundtrip() {
    let dir = crate::scratch("compress-blob");
    let corpus: Vec<_> = corpus().into_iter().filter(|(s, _)| s.dtype.is_legacy()).collect();
    let path = dir.join("b.dt");
    save(&path, borrowed(&corpus), &options(Compress::Blob { level: 3 }, true)).unwrap();
    let r = Reader::open(&path).unwrap();
    assert!(r.head().is_compressed() && !r.head().is_chunk_compressed());
    assert!(r.head().flags.contains(Flags::ZSTD | Flags::CHECKSUM));
    r.verify().unwrap();
    check_reads(&path, &corpus);
    assert!((std::fs::metadata(&path).unwrap().len() as usize) < corpus.iter().map(|(_, b)| b.len()).sum::<usize>());
}

#[test]
fn bad_options_are_refused_and_leave_nothing() {
    let dir = crate::scratch("compress-refused");
    let path = dir.join("x.dt");
    let data = smooth(1, 8192);
    let t = || vec![(TensorSpec::new("w", Dtype::U8, [8192]), &data[..])];
    for level in [0, 23, -1] {
        let e = save(&path, t(), &options(Compress::Chunked { level }, false)).unwrap_err();
        assert!(e.to_string().contains("level"), "{e}");
    }
    let st = WriteOptions {
        format: deathtensors_format::Format::Safetensors,
        ..options(Compress::Chunked { level: 3 }, false)
    };
    assert!(save(&path, t(), &st).is_err());
    assert!(deathtensors_io::Writer::create(
        &path,
        vec![t()[0].0.clone()],
        &options(Compress::Blob { level: 3 }, false)
    )
    .is_err());
    assert!(crate::entries(&dir).is_empty());
}

/// A file of one U8 tensor of 8,192 bytes in two 4,096-byte chunks whose
/// stored bytes are `chunks`, as a hostile writer would make it.
fn hostile(path: &std::path::Path, chunks: [&[u8]; 2]) {
    let tables = vec![Some(vec![chunks[0].len() as u64, chunks[1].len() as u64])];
    let c = Compression { codec: Codec::Zstd, level: 3, chunk_size: 4096 };
    let specs = vec![TensorSpec::new("w", Dtype::U8, [8192])];
    let h = Header::new_compressed(specs, Metadata::new(), 64, None, c, tables, &Limits::DEFAULT).unwrap();
    let mut f = Head::encode(&h, Flags::COMPRESSED).unwrap();
    f.extend_from_slice(chunks[0]);
    f.extend_from_slice(chunks[1]);
    std::fs::write(path, f).unwrap();
}

#[test]
fn hostile_chunks_are_refused_naming_tensor_and_chunk() {
    let dir = crate::scratch("compress-hostile");
    let path = dir.join("h.dt");
    let good = zstd::bulk::compress(&[7u8; 4096], 3).unwrap();
    let bomb = zstd::bulk::compress(&vec![0u8; 64 << 20], 19).unwrap();
    let short = zstd::bulk::compress(&[7u8; 4000], 3).unwrap();
    let mut trailing = good.clone();
    trailing.extend_from_slice(&good);
    let truncated = &good[..good.len() - 2];
    let mut corrupt = good.clone();
    let n = corrupt.len();
    corrupt[n / 2] ^= 0x55;
    corrupt[n - 1] ^= 0x55;
    let garbage = [0x42u8; 40];
    for (what, chunk) in [
        ("bomb", &bomb[..]),
        ("short", &short[..]),
        ("trailing", &trailing[..]),
        ("truncated", truncated),
        ("garbage", &garbage[..]),
    ] {
        hostile(&path, [&good, chunk]);
        let r = Reader::open(&path).unwrap();
        let e = r.read("w").unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::DecompressChunk { chunk: 1, .. }), "{what}: {e}");
        assert!(e.is_invalid_file(), "{what}");
        let mut all = vec![0u8; r.data_layout().1 as usize];
        assert!(r.read_data_into(&mut all).is_err(), "{what}");
        assert!(all.iter().all(|&b| b == 0), "{what}: a failed read leaves zeros");
        // The first chunk still reads.
        let mut buf = vec![0u8; 4096];
        r.read_range_into("w", 0, &mut buf).unwrap();
        assert_eq!(buf, [7u8; 4096]);
    }
    // A corrupt frame whose damage zstd notices.
    hostile(&path, [&good, &corrupt]);
    let r = Reader::open(&path).unwrap();
    if let Ok(bytes) = r.read("w") {
        // zstd without a checksum may decode damaged literals: the bytes then differ.
        assert_ne!(&bytes[4096..], &[7u8; 4096][..]);
    }
}

/// `testdata/invalid-data`: valid heads, hostile chunks. Each read of the
/// tensor fails with the manifest's kind, naming tensor and chunk; the good
/// chunk before it still reads.
#[test]
fn every_hostile_data_file_is_refused_on_read() {
    let dir = crate::testdata().join("invalid-data");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let files = manifest["files"].as_object().unwrap();
    assert!(files.len() >= 10);
    for (name, entry) in files {
        assert_eq!(entry["kind"], "DecompressChunk", "{name}");
        let r = Reader::open(dir.join(name)).unwrap_or_else(|e| panic!("{name}: the head must parse: {e}"));
        let tensor = entry["tensor"].as_str().unwrap();
        let e = r.read(tensor).unwrap_err();
        match e.kind() {
            ErrorKind::DecompressChunk { tensor: t, chunk, .. } => {
                assert_eq!((t.as_str(), *chunk), (tensor, entry["chunk"].as_u64().unwrap()), "{name}: {e}");
            }
            other => panic!("{name}: wrong kind {other:?}: {e}"),
        }
        let message = e.to_string();
        assert!(!message.contains('\n') && message.contains("chunk 1"), "{name}: {message}");
        let mut first = vec![0u8; 4096];
        r.read_range_into(tensor, 0, &mut first).unwrap();
        assert_eq!(first, [7u8; 4096], "{name}");
        assert!(r.verify_tensor(tensor).is_err(), "{name}");
    }
}

/// A compressed plaintext file signs like any other: the header commits to
/// the raw digests, the footer to the stored bytes. A signed file read under
/// a signature requirement returns only checked bytes.
#[test]
fn compressed_files_sign_and_verify() {
    use deathtensors_io::{sign_file, ReadOptions, SigningKey};
    use std::sync::Arc;

    let dir = crate::scratch("compress-signed");
    let corpus: Vec<_> = corpus().into_iter().filter(|(s, _)| s.dtype.is_legacy()).collect();
    let signer = Arc::new(SigningKey::generate());
    let trusted = || ReadOptions {
        trusted_signers: vec![signer.verifying_key()],
        require_signature: true,
        ..ReadOptions::default()
    };
    for compress in [Compress::Chunked { level: 3 }, Compress::Blob { level: 3 }] {
        let path = dir.join("s.dt");
        let options = WriteOptions { signers: vec![signer.clone()], ..options(compress, false) };
        save(&path, borrowed(&corpus), &options).unwrap();
        let r = Reader::open_with(&path, trusted()).unwrap();
        assert_eq!(r.signers(), &[signer.verifying_key()]);
        assert!(r.checked_reads());
        for (spec, bytes) in &corpus {
            assert_eq!(&r.read(&spec.name).unwrap(), bytes, "{compress:?} {}", spec.name);
        }
        let (_, len) = r.data_layout();
        let mut all = vec![0u8; len as usize];
        r.read_data_into(&mut all).unwrap();
        r.verify().unwrap();
        drop(r);
        // A stored byte changed: the footer fails, and so does the signature check at open.
        let mut bytes = std::fs::read(&path).unwrap();
        let start = Reader::open(&path).unwrap().head().data_start as usize;
        bytes[start + 100] ^= 1;
        let bad = dir.join("bad.dt");
        std::fs::write(&bad, &bytes).unwrap();
        let opened = Reader::open_with(&bad, trusted());
        let failed = match &opened {
            Err(_) => true,
            Ok(r) => r.verify().is_err() && corpus.iter().any(|(s, _)| r.read(&s.name).is_err()),
        };
        assert!(failed, "{compress:?}: a changed byte went unnoticed");
    }
    // sign_file adds a signature to a compressed file made without one.
    let path = dir.join("later.dt");
    save(&path, borrowed(&corpus), &options(Compress::Chunked { level: 1 }, true)).unwrap();
    sign_file(&path, &signer, false).unwrap();
    let r = Reader::open_with(&path, trusted()).unwrap();
    assert_eq!(&r.read("odd").unwrap(), &corpus.iter().find(|(s, _)| s.name == "odd").unwrap().1);
}

/// Memory this crate allocates for decompressed tensors is bounded by
/// `max_decompressed_len`, whatever the header declares; a failed read
/// leaves the caller's buffer zeroed.
#[test]
fn decompressed_sizes_are_bounded_and_failures_zero_the_buffer() {
    use deathtensors_io::ReadOptions;

    let dir = crate::scratch("compress-bounded");
    let path = dir.join("h.dt");
    let good = zstd::bulk::compress(&[7u8; 4096], 3).unwrap();
    hostile(&path, [&good, &good]);
    let small = ReadOptions { max_decompressed_len: 4096, ..ReadOptions::default() };
    let r = Reader::open_with(&path, small).unwrap();
    for e in [r.read("w").unwrap_err(), r.unpacked_len().unwrap_err(), r.unpacked_tensor_len("w").unwrap_err()] {
        assert!(matches!(e.kind(), ErrorKind::Decompress(_)) && e.to_string().contains("max_decompressed_len"), "{e}");
    }
    // A caller's own buffer is the caller's: reading into it works.
    let mut buf = vec![0u8; 8192];
    r.read_into("w", &mut buf).unwrap();
    assert_eq!(buf, [7u8; 8192]);
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.unpacked_len().unwrap(), 8192);
    // A bad second chunk: nothing of the first stays in the buffer.
    hostile(&path, [&good, &[0x42u8; 40]]);
    let r = Reader::open(&path).unwrap();
    let mut buf = vec![1u8; 8192];
    assert!(r.read_into("w", &mut buf).is_err());
    assert!(buf.iter().all(|&b| b == 0));
}
