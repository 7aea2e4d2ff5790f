//! Integration tests of the `deathtensors` binary: each runs the built
//! binary on the fixtures in `testdata/` or on files generated with
//! `deathtensors_io::save`, and checks its stdout, stderr and exit code.

mod cat;
mod collection;
mod consolidate;
mod convert;
mod crypt;
mod dead_server;
mod diff;
mod errors;
mod first_hour;
mod inspect;
mod integrity;
mod meta;
mod remote;
mod sharded;
mod stats;
mod torch;
mod verify;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use deathtensors_io::format::{Dtype, TensorSpec};
use deathtensors_io::{save, Reader, WriteOptions};
use serde_json::Value;
// The test servers of deathtensors-remote's suite (moto, nginx, Azurite,
// fake-gcs-server), from the shared testkit; the CLI's tests use moto.
pub use deathtensors_testkit::servers;

/// What a run of the binary gave.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub bytes: Vec<u8>,
}

/// The binary, ready to run.
pub fn command() -> Command {
    Command::new(env!("CARGO_BIN_EXE_deathtensors"))
}

/// Runs the binary with `args`.
pub fn run<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    let mut output = command().args(&args).output();
    // Wine's CreateProcess now and then fails with ERROR_INTERNAL_ERROR
    // (1359) on a loaded machine: the start is tried again, twice at most.
    for _ in 0..2 {
        match &output {
            Err(e) if cfg!(windows) && e.raw_os_error() == Some(1359) => output = command().args(&args).output(),
            _ => break,
        }
    }
    let output = output.expect("the binary runs");
    Run {
        code: output.status.code().expect("the binary exits"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        bytes: output.stdout,
    }
}

/// Runs the binary, expecting `code`, and returns the run.
#[track_caller]
pub fn check<I, S>(args: I, code: i32) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    let r = run(&args);
    assert_eq!(r.code, code, "deathtensors {args:?}\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

/// Runs the binary with `--json` added, expecting `code`, and parses stdout.
#[track_caller]
pub fn json<I, S>(args: I, code: i32) -> Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    args.insert(1, "--json".into());
    let r = check(&args, code);
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
}

/// Asserts that stderr is one error line that contains every one of `parts`.
#[track_caller]
pub fn assert_one_error_line(r: &Run, parts: &[&str]) {
    let lines: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("deathtensors: error: ")).collect();
    assert_eq!(lines.len(), 1, "stderr: {}", r.stderr);
    for part in parts {
        assert!(lines[0].contains(part), "{part:?} not in {:?}", lines[0]);
    }
}

/// The repository's `testdata/` folder.
pub fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// A file of `testdata/valid/`.
pub fn valid(name: &str) -> PathBuf {
    testdata().join("valid").join(name)
}

/// `testdata/valid/manifest.json`'s `files`.
pub fn manifest() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(testdata().join("valid/manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    manifest["files"].as_object().unwrap().clone()
}

/// A fresh empty directory for one test, removed when dropped.
#[derive(Debug)]
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("dt-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Names of the directory's entries, sorted.
    pub fn entries(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Little-endian bytes of `f32`s.
pub fn f32s(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Saves tensors given as `(name, dtype, shape, bytes)`.
pub fn write(path: &Path, tensors: &[(&str, Dtype, &[u64], Vec<u8>)], options: &WriteOptions) {
    let specs = tensors
        .iter()
        .map(|(name, dtype, shape, bytes)| (TensorSpec::new(*name, *dtype, shape.to_vec()), &bytes[..]))
        .collect();
    save(path, specs, options).unwrap();
}

/// Every tensor of a file, with its bytes, in header order.
pub fn tensors(path: &Path) -> Vec<(String, Dtype, Vec<u64>, Vec<u8>)> {
    let reader = Reader::open(path).unwrap();
    reader
        .header()
        .tensors()
        .iter()
        .map(|t| (t.name.to_string(), t.dtype, t.shape.to_vec(), reader.read(&t.name).unwrap()))
        .collect()
}

/// Asserts that two files hold the same tensors (names, dtypes, shapes and
/// bytes), whatever their order and format.
#[track_caller]
pub fn assert_same_tensors(a: &Path, b: &Path) {
    let mut ta = tensors(a);
    let mut tb = tensors(b);
    ta.sort();
    tb.sort();
    assert_eq!(ta.len(), tb.len(), "{} vs {}", a.display(), b.display());
    for (x, y) in ta.iter().zip(&tb) {
        assert_eq!(x, y, "tensor {} of {} vs {}", x.0, a.display(), b.display());
    }
}

/// Whether a manifest entry is a deathtensors 0.3.0 sharded index (a file
/// with no tensors that lists its shards).
pub fn is_legacy_index(entry: &Value) -> bool {
    entry["global_metadata"]["deathtensors.sharded"] == "true"
}
