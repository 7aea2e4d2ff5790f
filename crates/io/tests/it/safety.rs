//! Nothing is lost on failure: failed or abandoned writes leave the old file
//! and no temp file; a writer killed with SIGKILL leaves the old file or the
//! complete new one; a file truncated while open gives errors, not SIGBUS.

use deathtensors_format::{Dtype, TensorSpec};
use deathtensors_io::{save, ErrorKind, Reader, WriteOptions, Writer};

#[test]
fn failed_save_keeps_the_old_file_and_leaves_no_temp() {
    let dir = crate::scratch("failed-save");
    let path = dir.join("m.dt");
    save(&path, vec![(TensorSpec::new("a", Dtype::U8, [3]), &[1, 2, 3][..])], &WriteOptions::default()).unwrap();
    let before = std::fs::read(&path).unwrap();
    // A length mismatch fails before writing; a name with a control
    // character fails in the header.
    assert!(save(&path, vec![(TensorSpec::new("a", Dtype::U8, [3]), &[1][..])], &WriteOptions::default()).is_err());
    assert!(save(&path, vec![(TensorSpec::new("a\n", Dtype::U8, [1]), &[1][..])], &WriteOptions::default()).is_err());
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(crate::entries(&dir), ["m.dt"]);
}

#[test]
fn dropped_writer_keeps_the_old_file_and_leaves_no_temp() {
    let dir = crate::scratch("dropped-writer");
    let path = dir.join("m.dt");
    save(&path, vec![(TensorSpec::new("a", Dtype::U8, [3]), &[1, 2, 3][..])], &WriteOptions::default()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut w =
        Writer::create(&path, vec![TensorSpec::new("b", Dtype::U8, [1 << 20])], &WriteOptions::default()).unwrap();
    w.write_tensor("b", &vec![7u8; 1 << 20]).unwrap();
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(crate::entries(&dir), ["m.dt"]);
}

#[cfg(unix)]
#[test]
fn replacing_a_file_keeps_its_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = crate::scratch("keep-mode");
    let path = dir.join("m.dt");
    let tensors = || vec![(TensorSpec::new("a", Dtype::U8, [3]), &[1u8, 2, 3][..])];
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    save(&path, tensors(), &WriteOptions::default()).unwrap();
    let fresh = mode(&path);
    assert_eq!(fresh & 0o600, 0o600, "a new file is the owner's to read and write: {fresh:o}");
    for private in [0o600, 0o640, 0o400] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(private)).unwrap();
        for durable in [true, false] {
            save(&path, tensors(), &WriteOptions { durable, ..WriteOptions::default() }).unwrap();
            assert_eq!(mode(&path), private, "durable={durable}");
            assert_eq!(Reader::open(&path).unwrap().read("a").unwrap(), [1, 2, 3]);
        }
    }
    assert_eq!(crate::entries(&dir), ["m.dt"]);
}

#[test]
fn save_into_a_missing_directory_is_an_io_error_naming_the_path() {
    let dir = crate::scratch("missing-dir");
    let path = dir.join("no/such/dir/m.dt");
    let err = save(&path, vec![], &WriteOptions::default()).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io(_)));
    assert!(err.to_string().contains("no/such/dir/m.dt"), "{err}");
}

#[test]
fn truncation_while_open_is_an_error_not_a_crash() {
    let dir = crate::scratch("truncate");
    let path = dir.join("m.dt");
    let data = vec![5u8; 1 << 20];
    save(&path, vec![(TensorSpec::new("big", Dtype::U8, [1 << 20]), &data[..])], &WriteOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    // SAFETY: the mapping is never touched after the truncation below; this
    // test checks that owned reads of a mapped reader do not use it.
    let mapped = unsafe { Reader::open_mmap(&path) }.unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
    for r in [&reader, &mapped] {
        let err = r.read("big").unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::Io(_)), "{err}");
        assert!(err.to_string().contains("truncated"), "{err}");
    }
}

/// The environment variable that turns the test binary into the writer
/// child of `killed_writer_leaves_old_or_new_file`.
const CHILD_ENV: &str = "DEATHTENSORS_CRASH_CHILD";

fn generation_file(path: &std::path::Path, generation: u8) {
    let data = vec![generation; 24 << 20];
    let mut meta = deathtensors_format::Metadata::new();
    meta.insert("generation".into(), generation.to_string());
    let options = WriteOptions { checksum: true, durable: false, metadata: Some(meta), ..WriteOptions::default() };
    let tensors = vec![
        (TensorSpec::new("a", Dtype::U8, [12 << 20]), &data[..12 << 20]),
        (TensorSpec::new("b", Dtype::U8, [12 << 20]), &data[12 << 20..]),
    ];
    save(path, tensors, &options).unwrap();
}

#[test]
fn killed_writer_leaves_old_or_new_file() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        // The child: save new generations over the target until killed.
        for g in 1.. {
            generation_file(std::path::Path::new(&path), g);
        }
        return;
    }
    let dir = crate::scratch("sigkill");
    let path = dir.join("m.dt");
    generation_file(&path, 0);
    let exe = std::env::current_exe().unwrap();
    for round in 0..25u64 {
        let mut child = std::process::Command::new(&exe)
            .args(["--exact", "safety::killed_writer_leaves_old_or_new_file", "--test-threads=1", "--nocapture"])
            .env(CHILD_ENV, &path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Spread the kills over the child's start-up and many points of its saves.
        std::thread::sleep(std::time::Duration::from_millis(20 + (round * 37) % 400));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let reader = Reader::open(&path).unwrap_or_else(|e| panic!("round {round}: {e}"));
        reader.verify().unwrap_or_else(|e| panic!("round {round}: {e}"));
        let generation: u8 = reader.header().metadata().unwrap()["generation"].parse().unwrap();
        assert!(reader.read("b").unwrap().iter().all(|&b| b == generation), "round {round}");
        // Stale temp files of killed writers are removed by the next save.
        generation_file(&dir.join("probe.dt"), 0);
        assert_eq!(crate::entries(&dir), ["m.dt", "probe.dt"], "round {round}");
        std::fs::remove_file(dir.join("probe.dt")).unwrap();
    }
}
