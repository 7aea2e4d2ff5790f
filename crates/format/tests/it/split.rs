//! Large headers decoded in two halves (`Head::parse_with` and a `Fork`):
//! always the result of one decoder from the start, whatever the input.
//! Debug builds also check every fast-path result against the full decoder.

use std::sync::atomic::{AtomicUsize, Ordering};

use deathtensors_format::{Dtype, ErrorKind, Flags, Fork, Format, Head, Header, Limits, Metadata, TensorSpec};

/// Runs the two jobs on two threads, counting the calls.
struct Threads(AtomicUsize);

impl Fork for Threads {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        self.0.fetch_add(1, Ordering::Relaxed);
        std::thread::scope(|s| {
            let h = s.spawn(b);
            a();
            h.join().unwrap();
        });
    }
}

fn threads() -> Threads {
    Threads(AtomicUsize::new(0))
}

/// A header of `n` tensors with 40-byte names (about 100 bytes of JSON each).
fn specs(n: usize) -> Vec<TensorSpec> {
    (0..n)
        .map(|i| {
            let mut s = TensorSpec::new(format!("model.layers.{i:06}.mlp.experts.gate_proj"), Dtype::F32, [4]);
            if i % 7 == 0 {
                s.metadata.insert("k".into(), format!("v{i}"));
            }
            s
        })
        .collect()
}

fn file(header: &Header) -> Vec<u8> {
    let mut bytes = Head::encode(header, Flags::EMPTY).unwrap();
    bytes.resize(bytes.len() + header.data_len() as usize, 0);
    bytes
}

#[test]
fn both_formats_decode_the_same_in_two_halves() {
    let dt = Header::new_deathtensors(specs(6000), Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let mut global = Metadata::new();
    global.insert("format".into(), "pt".into());
    let st = Header::new_safetensors(specs(6000), Some(global), &Limits::DEFAULT).unwrap();
    for header in [dt, st] {
        let bytes = file(&header);
        let fork = threads();
        let split = Head::parse_with(&bytes, bytes.len() as u64, &Limits::DEFAULT, &fork).unwrap();
        // One join splits the entries, one builds the index while the
        // layout is checked.
        assert_eq!(fork.0.load(Ordering::Relaxed), 2, "a 600 KB header is split");
        assert_eq!(split.header, header);
        assert_eq!(Head::parse(&bytes, bytes.len() as u64, &Limits::DEFAULT).unwrap().header, header);
    }
}

/// A fork that is not parallel (it would run the jobs one after the
/// other), counting the calls.
struct OneThread(AtomicUsize);

impl Fork for OneThread {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        self.0.fetch_add(1, Ordering::Relaxed);
        a();
        b();
    }

    fn is_parallel(&self) -> bool {
        false
    }
}

#[test]
fn a_fork_that_is_not_parallel_is_never_asked_to_join() {
    // Split work run on one thread costs more than the whole: the decoder
    // decodes in one pass instead, to the same result.
    let header = Header::new_deathtensors(specs(6000), Metadata::new(), 64, None, &Limits::DEFAULT).unwrap();
    let bytes = file(&header);
    let fork = OneThread(AtomicUsize::new(0));
    let head = Head::parse_with(&bytes, bytes.len() as u64, &Limits::DEFAULT, &fork).unwrap();
    assert_eq!(fork.0.load(Ordering::Relaxed), 0);
    assert_eq!(head.header, header);
    assert!(!deathtensors_format::Serial.is_parallel() && threads().is_parallel());
}

/// A safetensors header written by hand: `entries` tensors of one F32
/// each, with `insert` placed at member `at` (a raw JSON member).
fn st_json(entries: usize, insert: &str, at: usize) -> Vec<u8> {
    let mut members = Vec::new();
    for i in 0..entries {
        if i == at {
            members.push(insert.to_string());
        }
        let o = i * 4;
        members.push(format!(
            "\"tensor.{i:08}.padding_to_make_the_names_long\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[{o},{}]}}",
            o + 4
        ));
    }
    let json = format!("{{{}}}", members.join(","));
    let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(json.as_bytes());
    bytes.resize(bytes.len() + entries * 4, 0);
    bytes
}

fn parse_both(bytes: &[u8]) -> (deathtensors_format::Result<Head>, deathtensors_format::Result<Head>, usize) {
    let fork = threads();
    let split = Head::parse_with(bytes, bytes.len() as u64, &Limits::DEFAULT, &fork);
    let serial = Head::parse(bytes, bytes.len() as u64, &Limits::DEFAULT);
    (split, serial, fork.0.load(Ordering::Relaxed))
}

#[test]
fn metadata_in_the_second_half_is_found_and_a_second_copy_refused() {
    let n = 5000;
    let bytes = st_json(n, "\"__metadata__\":{\"a\":\"b\"}", n - 10);
    let (split, serial, forks) = parse_both(&bytes);
    assert_eq!(forks, 2);
    let split = split.unwrap();
    assert_eq!(split.header.metadata().unwrap()["a"], "b");
    assert_eq!(split.header, serial.unwrap().header);

    // One `__metadata__` near the start, one in the second half.
    let mut json = String::from_utf8(bytes[8..].to_vec()).unwrap();
    json.insert_str(1, "\"__metadata__\":{},");
    let json = json.trim_end_matches('\0');
    let mut dup = (json.len() as u64).to_le_bytes().to_vec();
    dup.extend_from_slice(json.as_bytes());
    dup.resize(dup.len() + n * 4, 0);
    let (split, serial, _) = parse_both(&dup);
    let (a, b) = (split.unwrap_err(), serial.unwrap_err());
    assert!(matches!(a.kind(), ErrorKind::DuplicateKey { .. }), "{a}");
    assert_eq!(a.to_string(), b.to_string());
}

#[test]
fn errors_in_either_half_are_the_serial_decoders() {
    let n = 5000;
    // A duplicate name, one copy in each half.
    let dup =
        "\"tensor.00000001.padding_to_make_the_names_long\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
    // An entry the fast path leaves to the full decoder (an escape), and
    // one that is wrong (a negative dimension), both late in the header.
    let escaped = "\"esc\\u0061ped\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
    let wrong = "\"wrong\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}";
    for (insert, at) in [(dup, n - 5), (escaped, n - 5), (wrong, n - 5), (wrong, 3)] {
        let bytes = st_json(n, insert, at);
        let (split, serial, _) = parse_both(&bytes);
        match (split, serial) {
            (Ok(a), Ok(b)) => assert_eq!(a.header, b.header),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("split {:?} against serial {:?}", a.map(|h| h.header.len()), b.map(|h| h.header.len())),
        }
    }
    // The full decoder decodes the escaped name.
    let bytes = st_json(n, escaped, n - 5);
    assert!(parse_both(&bytes).0.unwrap().header.get("escaped").is_some());
}

#[test]
fn the_tensor_limit_counts_both_halves() {
    let header = Header::new_safetensors(specs(5000), None, &Limits::DEFAULT).unwrap();
    let bytes = file(&header);
    let limits = Limits { max_tensors: 4999, ..Limits::DEFAULT };
    let err = Head::parse_with(&bytes, bytes.len() as u64, &limits, &threads()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::LimitExceeded { .. }), "{err}");
    let limits = Limits { max_tensors: 5000, ..Limits::DEFAULT };
    assert_eq!(Head::parse_with(&bytes, bytes.len() as u64, &limits, &threads()).unwrap().header.len(), 5000);
    assert_eq!(header.format(), Format::Safetensors);
}

/// A large header's name index and layout check run at once: a header
/// with both a repeated name and a layout error still reports the name,
/// as the serial decoder does, and a layout error alone is the same too.
#[test]
fn index_and_layout_errors_are_those_of_the_serial_decoder() {
    let n = 5000;
    let both = st_json(
        n,
        "\"tensor.00000003.padding_to_make_the_names_long\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}",
        4000,
    );
    let (split, serial, forks) = parse_both(&both);
    let (a, b) = (split.unwrap_err(), serial.unwrap_err());
    assert!(matches!(a.kind(), ErrorKind::DuplicateKey { .. }), "{a}");
    assert_eq!(a.to_string(), b.to_string());
    assert_eq!(forks, 2, "decoded in halves, then indexed while the layout was checked");
    let overlap = st_json(n, "\"overlapping\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4000);
    let (split, serial, _) = parse_both(&overlap);
    let (a, b) = (split.unwrap_err(), serial.unwrap_err());
    assert!(matches!(a.kind(), ErrorKind::Overlap { .. }), "{a}");
    assert_eq!(a.to_string(), b.to_string());
}

#[test]
fn names_of_every_length_read_back_across_blocks_of_names() {
    // Names from 1 byte to longer than a block of names (32 KiB), some not
    // ASCII, so that blocks fill at every offset and a name can need a
    // block of its own; decoded on one thread and in two halves.
    let limits = Limits { max_name_len: 100_000, ..Limits::DEFAULT };
    let mut specs: Vec<TensorSpec> = (0..6000)
        .map(|i| {
            let len = 1 + (i * 7919) % 400;
            let name: String =
                format!("{i}.é{}", "x".repeat(len)).chars().take(len.max(i.to_string().len() + 2)).collect();
            TensorSpec::new(name, Dtype::U8, [1])
        })
        .collect();
    for (k, len) in [32 << 10, (32 << 10) + 1, 90_000].into_iter().enumerate() {
        specs.insert(k * 2000, TensorSpec::new(format!("long{k}.{}", "y".repeat(len)), Dtype::U8, [2]));
    }
    let header = Header::new_deathtensors(specs.clone(), Metadata::new(), 64, None, &limits).unwrap();
    let bytes = file(&header);
    for fork in [&threads() as &dyn Fork, &deathtensors_format::Serial] {
        let head = Head::parse_with(&bytes, bytes.len() as u64, &limits, fork).unwrap();
        assert_eq!(head.header, header);
        for spec in &specs {
            let t = head
                .header
                .get(&spec.name)
                .unwrap_or_else(|| panic!("{} missing", &spec.name[..20.min(spec.name.len())]));
            assert_eq!(t.name, spec.name);
        }
    }
}
