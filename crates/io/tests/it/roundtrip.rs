//! Writes then reads: every dtype and edge shape, both formats, both
//! writers, checksums, determinism, and byte-identity with safetensors.

use deathtensors_format::{Dtype, Format, Metadata, TensorSpec};
use deathtensors_io::{save, ErrorKind, Reader, WriteOptions, Writer};

/// Bytes that differ per tensor and per position.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// One tensor of every dtype plus edge shapes: scalars, zero-size, and huge
/// dimensions with zero elements.
fn corpus() -> Vec<(TensorSpec, Vec<u8>)> {
    let mut out = Vec::new();
    for (k, dtype) in Dtype::ALL.iter().enumerate() {
        // Sub-byte dtypes need whole bytes.
        let shape = if dtype.bits() < 8 { vec![3, 8] } else { vec![3, 5] };
        let len = dtype.byte_len(shape.iter().product()).unwrap() as usize;
        out.push((TensorSpec::new(format!("t.{}", dtype.name()), *dtype, shape), pattern(k as u8, len)));
    }
    out.push((TensorSpec::new("scalar", Dtype::F64, []), pattern(99, 8)));
    out.push((TensorSpec::new("zero", Dtype::F32, [0, 4]), vec![]));
    out.push((TensorSpec::new("huge-but-empty", Dtype::BF16, [u64::MAX, 0, 1 << 40]), vec![]));
    out
}

fn borrowed(c: &[(TensorSpec, Vec<u8>)]) -> Vec<(TensorSpec, &[u8])> {
    c.iter().map(|(s, b)| (s.clone(), &b[..])).collect()
}

#[track_caller]
fn check_reads(path: &std::path::Path, corpus: &[(TensorSpec, Vec<u8>)]) {
    let reader = Reader::open(path).unwrap();
    assert_eq!(reader.header().len(), corpus.len());
    for (spec, bytes) in corpus {
        let info = reader.tensor(&spec.name).unwrap().info;
        assert_eq!(info.dtype, spec.dtype);
        assert_eq!(info.shape, spec.shape);
        assert_eq!(&reader.read(&spec.name).unwrap(), bytes, "{}", spec.name);
    }
}

#[test]
fn every_dtype_and_edge_shape_round_trips_in_both_formats() {
    let dir = crate::scratch("all-dtypes");
    let corpus = corpus();
    for (format, checksum) in
        [(Format::Deathtensors, false), (Format::Deathtensors, true), (Format::Safetensors, false)]
    {
        let path = dir.join(format!("{format:?}-{checksum}"));
        let options = WriteOptions { format, checksum, durable: false, ..WriteOptions::default() };
        // safetensors has every dtype but C128.
        let corpus: Vec<_> =
            corpus.iter().filter(|(s, _)| format == Format::Deathtensors || s.dtype != Dtype::C128).cloned().collect();
        save(&path, borrowed(&corpus), &options).unwrap();
        check_reads(&path, &corpus);
        let reader = Reader::open(&path).unwrap();
        assert_eq!(reader.format(), format);
        if checksum {
            reader.verify().unwrap();
            for (spec, _) in &corpus {
                assert_eq!(
                    reader.read_verified(&spec.name).unwrap().len(),
                    reader.tensor(&spec.name).unwrap().info.byte_len() as usize
                );
            }
            // Every tensor start is 64-byte aligned in the file.
            for t in reader.header().tensors() {
                assert_eq!(reader.tensor(&t.name).unwrap().file_offset % 64, 0, "{}", t.name);
            }
        }
    }
}

#[test]
fn empty_files_round_trip() {
    let dir = crate::scratch("empty");
    for format in [Format::Deathtensors, Format::Safetensors] {
        let path = dir.join(format!("{format:?}"));
        save(&path, vec![], &WriteOptions { format, ..WriteOptions::default() }).unwrap();
        let reader = Reader::open(&path).unwrap();
        assert!(reader.header().is_empty());
    }
    let st = std::fs::read(dir.join("Safetensors")).unwrap();
    assert_eq!(st, std::fs::read(crate::testdata().join("valid/safetensors-0.8.0/empty.safetensors")).unwrap());
}

#[test]
fn saving_is_deterministic() {
    let dir = crate::scratch("determinism");
    let corpus = corpus();
    let mut meta = Metadata::new();
    meta.insert("b".into(), "2".into());
    meta.insert("a".into(), "1".into());
    let options = WriteOptions { checksum: true, metadata: Some(meta), durable: false, ..WriteOptions::default() };
    save(dir.join("one"), borrowed(&corpus), &options).unwrap();
    save(dir.join("two"), borrowed(&corpus), &options).unwrap();
    assert_eq!(std::fs::read(dir.join("one")).unwrap(), std::fs::read(dir.join("two")).unwrap());
}

#[test]
fn safetensors_output_is_byte_identical_to_safetensors() {
    // Re-save the tensors of files safetensors 0.8.0 wrote: same bytes.
    let dir = crate::scratch("st-identity");
    for rel in ["all_dtypes.safetensors", "sharded/model-00001-of-00002.safetensors"] {
        let original = crate::testdata().join("valid/safetensors-0.8.0").join(rel);
        let reader = Reader::open(&original).unwrap();
        let data: Vec<(TensorSpec, Vec<u8>)> = reader
            .header()
            .tensors()
            .iter()
            .rev()
            .map(|t| (TensorSpec::new(t.name.clone(), t.dtype, t.shape.clone()), reader.read(&t.name).unwrap()))
            .collect();
        let out = dir.join("out.safetensors");
        let options = WriteOptions {
            format: Format::Safetensors,
            metadata: reader.header().metadata().cloned(),
            ..WriteOptions::default()
        };
        save(&out, borrowed(&data), &options).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&original).unwrap(), "{rel}");
    }
}

#[test]
fn incremental_writer_matches_save_whatever_the_order() {
    let dir = crate::scratch("incremental");
    let corpus = corpus();
    for (checksum, footer) in [(false, true), (true, true), (true, false)] {
        let options = WriteOptions { checksum, footer, durable: false, ..WriteOptions::default() };
        save(dir.join("saved"), borrowed(&corpus), &options).unwrap();
        let specs = corpus.iter().map(|(s, _)| s.clone()).collect();
        let mut w = Writer::create(dir.join("streamed"), specs, &options).unwrap();
        for (spec, bytes) in corpus.iter().rev() {
            w.write_tensor(&spec.name, bytes).unwrap();
        }
        w.finish().unwrap();
        assert_eq!(
            std::fs::read(dir.join("saved")).unwrap(),
            std::fs::read(dir.join("streamed")).unwrap(),
            "checksum={checksum} footer={footer}"
        );
    }
}

#[test]
fn incremental_writer_rejects_misuse_and_leaves_nothing() {
    let dir = crate::scratch("incremental-misuse");
    let specs = vec![TensorSpec::new("a", Dtype::U8, [2]), TensorSpec::new("b", Dtype::U8, [1])];
    let mut w = Writer::create(dir.join("x"), specs, &WriteOptions::default()).unwrap();
    assert!(matches!(w.write_tensor("nope", &[1]).unwrap_err().kind(), ErrorKind::InvalidInput(_)));
    assert!(matches!(w.write_tensor("a", &[1]).unwrap_err().kind(), ErrorKind::InvalidInput(_)));
    w.write_tensor("a", &[1, 2]).unwrap();
    assert!(w.write_tensor("a", &[1, 2]).unwrap_err().to_string().contains("twice"));
    let err = w.finish().unwrap_err();
    assert!(err.to_string().contains("\"b\" was never written"), "{err}");
    assert_eq!(crate::entries(&dir), Vec::<String>::new());
}

#[test]
fn corrupted_tensor_is_named_by_verification() {
    let dir = crate::scratch("corrupt");
    let corpus = corpus();
    let path = dir.join("m.dt");
    save(&path, borrowed(&corpus), &WriteOptions { checksum: true, ..WriteOptions::default() }).unwrap();
    let reader = Reader::open(&path).unwrap();
    let victim = reader.tensor("t.F32").unwrap().file_offset;
    drop(reader);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[victim as usize + 3] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let reader = Reader::open(&path).unwrap();
    let err = reader.verify().unwrap_err();
    match err.kind() {
        ErrorKind::TensorDigestMismatch { tensor, .. } => assert_eq!(tensor, "t.F32"),
        other => panic!("{other:?}"),
    }
    assert!(reader.read_verified("t.F32").is_err());
    reader.read_verified("t.F64").unwrap();
    assert!(matches!(reader.verify_footer().unwrap_err().kind(), ErrorKind::ChecksumMismatch { .. }));
    // The one-pass read: the same bytes where the digest holds, an error
    // naming the tensor and a zeroed buffer where it does not.
    for (spec, bytes) in &corpus {
        let mut buf = vec![0xAAu8; bytes.len()];
        let got = reader.read_verified_into(&spec.name, &mut buf);
        if spec.name == "t.F32" {
            match got.unwrap_err().kind() {
                ErrorKind::TensorDigestMismatch { tensor, .. } => assert_eq!(tensor, "t.F32"),
                other => panic!("{other:?}"),
            }
            assert!(buf.iter().all(|&b| b == 0));
        } else {
            got.unwrap();
            assert!(&buf == bytes, "{}", spec.name);
        }
    }
    let mut short = vec![0u8; 3];
    assert!(reader.read_verified_into("t.F64", &mut short).is_err());
    // A tensor of several pieces (256 KiB each), damaged in its third.
    let big = dir.join("big.dt");
    let bytes = pattern(7, (1 << 20) + 3);
    let spec = TensorSpec::new("big", Dtype::U8, [bytes.len() as u64]);
    save(&big, vec![(spec, &bytes[..])], &WriteOptions { checksum: true, ..WriteOptions::default() }).unwrap();
    let mut buf = vec![0u8; bytes.len()];
    Reader::open(&big).unwrap().read_verified_into("big", &mut buf).unwrap();
    assert!(buf == bytes);
    let at = Reader::open(&big).unwrap().tensor("big").unwrap().file_offset as usize + (600 << 10);
    let mut file = std::fs::read(&big).unwrap();
    file[at] ^= 0x40;
    std::fs::write(&big, &file).unwrap();
    let err = Reader::open(&big).unwrap().read_verified_into("big", &mut buf).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::TensorDigestMismatch { .. }), "{err}");
    // Without digests there is nothing to check against.
    let plain = dir.join("plain.dt");
    save(&plain, borrowed(&corpus), &WriteOptions::default()).unwrap();
    let mut buf = vec![0u8; corpus[0].1.len()];
    let err = Reader::open(&plain).unwrap().read_verified_into(&corpus[0].0.name, &mut buf).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::NoChecksum { .. }), "{err}");
}

#[test]
fn digests_without_a_footer_are_the_same_file_less_the_footer_and_still_checked() {
    let dir = crate::scratch("no-footer");
    let corpus = corpus();
    let full = dir.join("full.dt");
    let lean = dir.join("lean.dt");
    save(&full, borrowed(&corpus), &WriteOptions { checksum: true, ..WriteOptions::default() }).unwrap();
    // Its digests are computed while the data is written, then written over
    // placeholders in the header.
    let written =
        save(&lean, borrowed(&corpus), &WriteOptions { checksum: true, footer: false, ..WriteOptions::default() })
            .unwrap();
    // The same header (digests included) but for the CHECKSUM flag, the
    // same data, and no footer.
    let (f, l) = (std::fs::read(&full).unwrap(), std::fs::read(&lean).unwrap());
    assert_eq!(l.len() + 32, f.len());
    // Bytes 12 to 15 are the flags (u32 LE); bit 1 is CHECKSUM.
    assert_eq!(f[..12], l[..12], "magic, version");
    assert_eq!((f[12], l[12]), (0x2, 0x0), "CHECKSUM flag");
    assert_eq!(f[13..f.len() - 32], l[13..]);
    let reader = Reader::open(&lean).unwrap();
    assert!(!reader.has_footer());
    assert!(reader.header().tensors().iter().all(|t| t.sha256.is_some()));
    assert!(written
        .tensors()
        .iter()
        .zip(reader.header().tensors())
        .all(|(w, r)| w.sha256 == r.sha256 && w.name == r.name));
    for (spec, bytes) in &corpus {
        let t = reader.header().get(&spec.name).unwrap();
        assert_eq!(t.sha256.as_deref().copied(), Some(deathtensors_io::sha256_many(&[bytes])[0]), "{}", spec.name);
    }
    reader.verify().unwrap();
    let victim = reader.tensor("t.F32").unwrap().file_offset as usize;
    drop(reader);
    let mut bad = l.clone();
    bad[victim] ^= 1;
    std::fs::write(&lean, &bad).unwrap();
    let reader = Reader::open(&lean).unwrap();
    match reader.verify().unwrap_err().kind() {
        ErrorKind::TensorDigestMismatch { tensor, .. } => assert_eq!(tensor, "t.F32"),
        other => panic!("{other:?}"),
    }
    assert!(reader.read_verified("t.F32").is_err());
    // Only plain saves leave the footer out.
    let compressed = WriteOptions {
        checksum: true,
        footer: false,
        compress: deathtensors_io::Compress::Chunked { level: 3 },
        ..WriteOptions::default()
    };
    let err = save(dir.join("z.dt"), borrowed(&corpus), &compressed).unwrap_err();
    assert!(err.to_string().contains("without a footer are for plain saves, not compressed"), "{err}");
    assert!(!dir.join("z.dt").exists());
}

#[test]
fn wrong_lengths_and_bad_specs_are_refused() {
    let dir = crate::scratch("bad-input");
    let err =
        save(dir.join("x"), vec![(TensorSpec::new("a", Dtype::F32, [2]), &[0u8; 7][..])], &WriteOptions::default())
            .unwrap_err();
    assert!(err.to_string().contains("7 bytes given, its dtype and shape need 8"), "{err}");
    let dup =
        vec![(TensorSpec::new("a", Dtype::U8, [1]), &[0u8][..]), (TensorSpec::new("a", Dtype::U8, [1]), &[0u8][..])];
    assert!(matches!(save(dir.join("x"), dup, &WriteOptions::default()).unwrap_err().kind(), ErrorKind::Format(_)));
    let st = WriteOptions { format: Format::Safetensors, checksum: true, ..WriteOptions::default() };
    assert!(save(dir.join("x"), vec![], &st).is_err());
    assert_eq!(crate::entries(&dir), Vec::<String>::new());
}

#[test]
fn chunked_streaming_copy_matches_save() {
    // A conversion streams each tensor through a small buffer: the result
    // must equal a direct save, in both directions between the formats.
    let dir = crate::scratch("chunked");
    let corpus: Vec<_> = corpus().into_iter().filter(|(s, _)| s.dtype != Dtype::C128).collect();
    let src = dir.join("src.dt");
    save(&src, borrowed(&corpus), &WriteOptions::default()).unwrap();
    let reader = Reader::open(&src).unwrap();
    for (format, checksum) in [(Format::Safetensors, false), (Format::Deathtensors, true)] {
        let options = WriteOptions { format, checksum, durable: false, ..WriteOptions::default() };
        let specs = reader
            .header()
            .tensors()
            .iter()
            .map(|t| TensorSpec::new(t.name.clone(), t.dtype, t.shape.clone()))
            .collect();
        let out = dir.join(format!("streamed-{format:?}"));
        let mut w = Writer::create(&out, specs, &options).unwrap();
        for t in reader.header().tensors() {
            w.write_tensor_with(&t.name, 7, |off, buf| reader.read_range_into(&t.name, off, buf)).unwrap();
        }
        w.finish().unwrap();
        let direct = dir.join(format!("direct-{format:?}"));
        save(&direct, borrowed(&corpus), &options).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&direct).unwrap(), "{format:?}");
    }
    let mut buf = [0u8; 4];
    assert!(reader.read_range_into("t.U8", 14, &mut buf).is_err(), "range past the tensor must fail");
}

#[test]
fn private_map_reads_every_tensor_and_never_writes_the_file() {
    let dir = crate::scratch("private-map");
    let corpus = corpus();
    for (format, checksum) in [(Format::Deathtensors, true), (Format::Safetensors, false)] {
        let path = dir.join(format!("{format:?}"));
        let corpus: Vec<_> =
            corpus.iter().filter(|(s, _)| format == Format::Deathtensors || s.dtype != Dtype::C128).cloned().collect();
        let options = WriteOptions { format, checksum, durable: false, ..WriteOptions::default() };
        save(&path, borrowed(&corpus), &options).unwrap();
        let before = std::fs::read(&path).unwrap();
        let reader = Reader::open(&path).unwrap();
        // SAFETY: this test alone uses the file.
        let mut map = unsafe { reader.map_private() }.unwrap();
        assert_eq!(map.len() as u64, reader.header().data_len());
        for (spec, bytes) in &corpus {
            let (start, end) = reader.tensor(&spec.name).unwrap().info.data_offsets;
            assert_eq!(&map.as_slice()[start as usize..end as usize], &bytes[..], "{}", spec.name);
        }
        // Each tensor on its own, in a mapping of its own.
        let mut singles = Vec::new();
        for (spec, bytes) in &corpus {
            // SAFETY: as above.
            let one = unsafe { reader.map_tensor_private(&spec.name) }.unwrap();
            assert_eq!(one.as_slice(), &bytes[..], "{}", spec.name);
            assert_eq!(one.as_slice().as_ptr() as u64 % 64, reader.tensor(&spec.name).unwrap().file_offset % 64);
            singles.push(one);
        }
        // Writes land in their own mapping only.
        map.as_mut_slice().fill(0xA5);
        assert!(map.as_slice().iter().all(|&b| b == 0xA5));
        for ((spec, bytes), one) in corpus.iter().zip(&singles) {
            assert_eq!(one.as_slice(), &bytes[..], "{}", spec.name);
        }
        drop(map);
        drop(singles);
        assert_eq!(std::fs::read(&path).unwrap(), before);
        if checksum {
            reader.verify().unwrap();
        }
    }
}

#[test]
fn private_map_refuses_compressed_and_resized_files() {
    let path = crate::testdata().join("valid/deathtensors-0.3.0/all_dtypes_zstd_checksum.deathtensors");
    let reader = Reader::open(&path).unwrap();
    // SAFETY: the fixture is not modified.
    let err = unsafe { reader.map_private() }.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::InvalidInput(_)), "{err}");
    assert!(err.to_string().contains("compressed"), "{err}");

    let dir = crate::scratch("private-map-resized");
    let path = dir.join("m.dt");
    let weight = pattern(1, 64);
    let options = WriteOptions { durable: false, ..WriteOptions::default() };
    save(&path, vec![(TensorSpec::new("w", Dtype::F32, [16]), &weight[..])], &options).unwrap();
    let reader = Reader::open(&path).unwrap();
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().set_len(reader.file_len() - 8).unwrap();
    // SAFETY: the file is not modified while mapped (the map is refused).
    let err = unsafe { reader.map_private() }.unwrap_err();
    assert!(err.to_string().contains("changed size"), "{err}");
}

#[test]
fn digests_are_written_under_the_limits_the_header_was_planned_with() {
    // A name longer than the default limit allows, under a larger one: the
    // header written again with its digests is checked against the same
    // limits, by both the incremental writer and a save without a footer.
    let dir = crate::scratch("digest-limits");
    let limits = deathtensors_format::Limits { max_name_len: 8192, ..deathtensors_format::Limits::DEFAULT };
    let name = "w".repeat(5000);
    let bytes = [7u8; 12];
    let options = WriteOptions { checksum: true, footer: false, limits: limits.clone(), ..WriteOptions::default() };
    let streamed = dir.join("streamed.dt");
    let mut w = Writer::create(&streamed, vec![TensorSpec::new(name.clone(), Dtype::F32, [3])], &options).unwrap();
    w.write_tensor(&name, &bytes).unwrap();
    w.finish().unwrap();
    let saved = dir.join("saved.dt");
    save(&saved, vec![(TensorSpec::new(name.clone(), Dtype::F32, [3]), &bytes[..])], &options).unwrap();
    assert_eq!(std::fs::read(&streamed).unwrap(), std::fs::read(&saved).unwrap());
    let read = deathtensors_io::ReadOptions { limits, ..deathtensors_io::ReadOptions::default() };
    let r = Reader::open_with(&saved, read).unwrap();
    r.verify().unwrap();
    assert_eq!(r.read_verified(&name).unwrap(), bytes);
}

#[test]
fn a_large_header_decoded_from_the_mapping_reads_the_same_once_its_pages_are_dropped() {
    // ~9 MB of header: decoded straight from the file's mapping, whose
    // pages the decoder drops from memory 4 MiB at a time as it leaves
    // them behind (`Fork::release`). What was decoded, and every later
    // read through the mapping, must be what a copy of the bytes gives.
    let dir = crate::scratch("mapped-header");
    let path = dir.join("many.dt");
    let n = 100_000usize;
    let data: Vec<Vec<u8>> = (0..n).map(|i| pattern(i as u8, 4)).collect();
    let tensors: Vec<(TensorSpec, &[u8])> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            (TensorSpec::new(format!("model.layers.{}.block.{}.weight", i / 1000, i % 1000), Dtype::U8, [4]), &d[..])
        })
        .collect();
    let options = WriteOptions { alignment: 1, durable: false, ..WriteOptions::default() };
    let written = save(&path, tensors, &options).unwrap();
    let head_len = Reader::open(&path).unwrap().head().data_start;
    assert!(head_len > 2 * deathtensors_format::RELEASE_STEP as u64, "{head_len}");
    let mapped = unsafe { Reader::open_mmap(&path) }.unwrap();
    assert_eq!(mapped.header(), &written);
    let bytes = std::fs::read(&path).unwrap();
    let copied = deathtensors_format::Head::parse(&bytes, bytes.len() as u64, &Default::default()).unwrap();
    assert_eq!(mapped.header(), &copied.header);
    for i in [0, 1, n / 2, n - 1] {
        let name = format!("model.layers.{}.block.{}.weight", i / 1000, i % 1000);
        assert_eq!(mapped.bytes(&name).unwrap(), &data[i][..], "{name}");
    }
}

/// `append` to a file that another handle holds open does what
/// docs/PLATFORMS.md says: on Windows the replacement is refused with an
/// error that names the file and says it is open, the file is unchanged
/// and no temp file is left; elsewhere the append succeeds and the open
/// handle keeps reading the old bytes.
#[test]
fn an_append_to_a_file_held_open_is_what_the_platform_doc_says() {
    use std::io::Read;
    let dir = crate::scratch("append-held-open");
    let path = dir.join("m.dt");
    let a = pattern(1, 16);
    save(&path, vec![(TensorSpec::new("a", Dtype::F32, [4]), &a[..])], &WriteOptions::default()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut held = std::fs::File::open(&path).unwrap();
    let b = pattern(2, 8);
    let result = deathtensors_io::append(&path, vec![(TensorSpec::new("b", Dtype::U8, [8]), &b[..])], None, false);
    if cfg!(windows) {
        let err = result.unwrap_err().to_string();
        assert!(err.contains("m.dt") && err.contains("refuses to replace an open file"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), before, "the file changed");
    } else {
        result.unwrap();
        assert!(Reader::open(&path).unwrap().tensor("b").is_ok());
    }
    let mut seen = Vec::new();
    held.read_to_end(&mut seen).unwrap();
    assert_eq!(seen, before);
    drop(held);
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["m.dt"], "a temp file was left");
}

/// The options' rules are io's, checked by every save before it writes
/// (the binding asks the same `broken_rule` when its options are built).
#[test]
fn options_that_break_a_rule_are_refused_before_anything_is_written() {
    let dir = crate::scratch("broken-rule");
    let path = dir.join("x.dt");
    let data = corpus();
    let cases = [
        (WriteOptions { durable: false, drop_cache: true, ..WriteOptions::default() }, "drop_cache needs durable"),
        (
            WriteOptions { compress: deathtensors_io::Compress::Chunked { level: 23 }, ..WriteOptions::default() },
            "compression level 23 is not between 1 and 22",
        ),
        (
            WriteOptions { compress: deathtensors_io::Compress::Blob { level: 0 }, ..WriteOptions::default() },
            "compression level 0 is not between 1 and 22",
        ),
    ];
    for (options, says) in cases {
        assert_eq!(options.broken_rule().as_deref().map(|w| w.contains(says)), Some(true), "{says}");
        let e = save(&path, borrowed(&data), &options).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidInput(_)) && e.to_string().contains(says), "{e}");
        assert!(crate::entries(&dir).is_empty(), "{says}: {:?}", crate::entries(&dir));
    }
    assert_eq!(WriteOptions::default().broken_rule(), None);
}
