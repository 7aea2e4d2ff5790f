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
