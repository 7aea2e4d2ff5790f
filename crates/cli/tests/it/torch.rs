//! `scan` and `convert` of torch pickle checkpoints (`testdata/torch/`,
//! made by its `make.py`): read with deathtensors' own pickle machine,
//! nothing run (docs/PICKLE.md).

use deathtensors_io::format::Dtype;
use deathtensors_io::Reader;

use crate::{assert_one_error_line, check, testdata, Scratch};

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn scan_says_plain_or_names_what_a_pickle_would_call() {
    let dir = testdata().join("torch");
    let plain = check(["scan".as_ref(), dir.join("views.pt").as_os_str()], 0);
    assert!(
        plain.stdout.contains("views.pt: a plain tensor checkpoint (3 tensors, pickle protocol 2)"),
        "{}",
        plain.stdout
    );
    let hostile = check(["scan".as_ref(), dir.join("os-system.pt").as_os_str()], 1);
    assert!(hostile.stdout.contains("refers to os.system (byte 2), not on the allow list"), "{}", hostile.stdout);
    assert!(hostile.stdout.contains("would call os.system (byte 23)"), "{}", hostile.stdout);
    // Several files: 1 if any is not plain; --json, one object each.
    let both = check(
        ["scan".as_ref(), "--json".as_ref(), dir.join("views.pt").as_os_str(), dir.join("os-system.pt").as_os_str()],
        1,
    );
    assert_eq!(both.stdout.matches("\"plain\": true").count(), 1, "{}", both.stdout);
    assert_eq!(both.stdout.matches("\"plain\": false").count(), 1, "{}", both.stdout);
    // Not a pickle at all: said, exit 1.
    let other = check(["scan".as_ref(), testdata().join("torch/make.py").as_os_str()], 1);
    assert!(other.stdout.contains("make.py: cannot be read"), "{}", other.stdout);
}

#[test]
fn convert_reads_a_torch_checkpoint_without_running_it() {
    let scratch = Scratch::new("torch-convert");
    let out = scratch.path("views.safetensors");
    for input in ["views.pt", "legacy.pt"] {
        let r = check(["convert".as_ref(), testdata().join("torch").join(input).as_os_str(), out.as_os_str()], 0);
        assert!(r.stdout.contains("3 tensors of a torch checkpoint"), "{}", r.stdout);
        same_views(&out);
    }
    // To deathtensors with a checksum.
    let dt = scratch.path("views.dt");
    check(
        ["convert".as_ref(), testdata().join("torch/views.pt").as_os_str(), dt.as_os_str(), "--checksum".as_ref()],
        0,
    );
    Reader::open(&dt).unwrap().verify().unwrap();
    // A hostile pickle: refused naming the global, nothing written.
    let bad = scratch.path("bad.safetensors");
    let r = check(["convert".as_ref(), testdata().join("torch/os-system.pt").as_os_str(), bad.as_os_str()], 1);
    assert_one_error_line(&r, &["os-system.pt", "refers to os.system, which is not on the allow list", "byte 2"]);
    assert!(!bad.exists());
}

/// `views.pt`'s values, converted to `out`.
fn same_views(out: &std::path::Path) {
    let reader = Reader::open(out).unwrap();
    assert_eq!(f32s(&reader.read("a").unwrap()), [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // The transposed view, with the values the caller sees.
    assert_eq!(f32s(&reader.read("t").unwrap()), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_eq!(reader.header().get("t").unwrap().shape.to_vec(), [3, 2]);
    assert_eq!(reader.header().get("b").unwrap().dtype, Dtype::BF16);
    assert_eq!(reader.read("b").unwrap(), [0x80, 0x3f, 0x00, 0x40]);
    let meta = reader.header().metadata().unwrap();
    assert_eq!((meta["step"].as_str(), meta["name"].as_str()), ("7", "run"));
}

#[test]
fn inspect_ls_stats_cat_and_diff_read_a_torch_checkpoint_lazily() {
    let dir = testdata().join("torch");
    let scratch = Scratch::new("torch-readers");
    let converted = scratch.path("views.safetensors");
    check(["convert".as_ref(), dir.join("views.pt").as_os_str(), converted.as_os_str()], 0);
    for input in ["views.pt", "legacy.pt"] {
        let path = dir.join(input);
        let inspect = check(["inspect".as_ref(), path.as_os_str()], 0).stdout;
        assert!(inspect.contains("torch.save pickle, read without running it"), "{inspect}");
        let json = crate::json(["inspect".as_ref(), path.as_os_str()], 0);
        assert_eq!(json["format"], "torch", "{json}");
        // The same names, values and statistics as the conversion's.
        for sub in ["ls", "stats"] {
            let ours = check([sub.as_ref(), path.as_os_str()], 0).stdout;
            assert_eq!(ours, check([sub.as_ref(), converted.as_os_str()], 0).stdout, "{sub} {input}");
        }
        for name in check(["ls".as_ref(), path.as_os_str()], 0).stdout.lines() {
            let ours = check(["cat".as_ref(), path.as_os_str(), name.as_ref()], 0).stdout;
            assert_eq!(ours, check(["cat".as_ref(), converted.as_os_str(), name.as_ref()], 0).stdout, "{name}");
        }
        check(["diff".as_ref(), path.as_os_str(), converted.as_os_str()], 0);
    }
    // A hostile pickle: refused naming the global (an invalid file).
    let r = check(["inspect".as_ref(), dir.join("os-system.pt").as_os_str()], 1);
    assert_one_error_line(&r, &["os-system.pt", "os.system"]);
    // A storage whose bytes fail their CRC-32: listing works (nothing is
    // read), reading that tensor is an invalid file, exit 1.
    let mut bytes = std::fs::read(dir.join("views.pt")).unwrap();
    // The member's local header: its name and extra field lengths at 26
    // and 28, its data after them.
    let member = find(&bytes, b"/data/0").expect("a storage member");
    let header = bytes[..member].windows(4).rposition(|w| w == b"PK\x03\x04").expect("its local header");
    let field = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    let data_start = header + 30 + field(header + 26) + field(header + 28);
    bytes[data_start] ^= 0x40;
    let damaged = scratch.path("damaged.pt");
    std::fs::write(&damaged, &bytes).unwrap();
    check(["ls".as_ref(), damaged.as_os_str()], 0);
    let r = check(["stats".as_ref(), damaged.as_os_str()], 1);
    assert_one_error_line(&r, &["damaged.pt", "does not match its CRC-32"]);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
