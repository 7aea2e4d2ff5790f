//! `cargo xtask compat`: safetensors 0.8.0's own Python test suite, run
//! against our drop-in (`deathtensors.safetensors`).
//!
//! The suite comes from the safetensors source distribution on PyPI. It runs
//! in a throwaway copy under `target/compat/run`, with the drop-in's shim
//! directory on `PYTHONPATH` so that `import safetensors` gives ours, and a
//! `conftest.py` that refuses to run if it does not. numpy and torch, CPU
//! only; the GPU tests and those of other frameworks skip, as they do for
//! safetensors itself.

use std::path::Path;
use std::process::Command;

use crate::python::python;
use crate::util::{exec, root};

const VERSION: &str = "0.8.0";

/// What safetensors 0.8.0 itself passes of its suite on this kind of machine
/// (CPU, numpy and torch installed; 26 tests skip).
const REFERENCE_PASSED: u64 = 66;

/// These import jax and tensorflow at module level.
const IGNORED: &[&str] = &["tests/test_flax_comparison.py", "tests/test_tf_comparison.py"];

/// Makes the numbers come from the drop-in, never the real package.
const CONFTEST: &str = r#""""Written by `cargo xtask compat`: the suite must see the drop-in."""

import safetensors
import safetensors.numpy
import safetensors.torch

import deathtensors.safetensors as dropin

assert safetensors is dropin, f"`import safetensors` gives {safetensors.__file__}, not deathtensors.safetensors"
assert safetensors.torch is dropin.torch and safetensors.numpy is dropin.numpy
assert safetensors.safe_open.__module__.startswith("deathtensors.")


def pytest_report_header(config):
    return f"safetensors is the deathtensors drop-in: {dropin.__file__}"
"#;

pub fn run() -> Result<(), String> {
    crate::python::setup()?;
    crate::python::install_wheel()?;
    let dir = root().join("target/compat");
    let sdist = dir.join(format!("safetensors-{VERSION}.tar.gz"));
    if !sdist.exists() {
        exec(
            Command::new(python())
                .args(["-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps"])
                .arg(format!("safetensors=={VERSION}"))
                .arg("-d")
                .arg(&dir),
        )?;
    }
    let run = dir.join("run");
    prepare(&sdist, &run)?;
    let shim = output(Command::new(python()).args(["-c", "import deathtensors.safetensors as s; print(s.SHIM_PATH)"]))?;
    let mut pytest = Command::new(python());
    pytest.args(["-m", "pytest", "tests", "-q", "-rfE", "-p", "no:cacheprovider"]);
    for file in IGNORED {
        pytest.arg(format!("--ignore={file}"));
    }
    pytest.current_dir(&run).env("PYTHONPATH", shim.trim());
    eprintln!("$ cd {} && PYTHONPATH={} python -m pytest tests ...", run.display(), shim.trim());
    let out = pytest.output().map_err(|e| format!("cannot run pytest: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let counts = Counts::parse(&stdout).ok_or("no pytest summary line in the output")?;
    println!(
        "compat: {} passed, {} failed, {} skipped (safetensors {VERSION} itself: {REFERENCE_PASSED} passed)",
        counts.passed,
        counts.failed + counts.errors,
        counts.skipped
    );
    for line in stdout.lines().filter(|l| l.starts_with("FAILED ") || l.starts_with("ERROR ")) {
        println!("  {line}");
    }
    if counts.failed + counts.errors > 0 || counts.passed < REFERENCE_PASSED {
        return Err(format!("the drop-in must pass safetensors {VERSION}'s {REFERENCE_PASSED} tests and fail none"));
    }
    Ok(())
}

/// Extracts the suite from the source distribution into a fresh `run`.
fn prepare(sdist: &Path, run: &Path) -> Result<(), String> {
    let script = "import pathlib, shutil, sys, tarfile
sdist, run, version = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
src = run.parent / 'src'
for d in (run, src):
    shutil.rmtree(d, ignore_errors=True)
with tarfile.open(sdist) as t:
    t.extractall(src, filter='data')
shutil.copytree(src / f'safetensors-{version}' / 'bindings' / 'python' / 'tests', run / 'tests')";
    exec(Command::new(python()).args(["-c", script]).arg(sdist).arg(run).arg(VERSION))?;
    let write = |name: &str, text: &str| {
        std::fs::write(run.join(name), text).map_err(|e| format!("cannot write {}: {e}", run.join(name).display()))
    };
    write("tests/conftest.py", CONFTEST)?;
    // Pins pytest's rootdir here, away from any configuration above.
    write("pytest.ini", "[pytest]\n")
}

/// A command's standard output; fails if the command does.
fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.current_dir(root()).output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The numbers of pytest's summary line ("66 passed, 26 skipped in 9.1s").
#[derive(Debug, Default, PartialEq)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
    errors: u64,
}

impl Counts {
    fn parse(stdout: &str) -> Option<Counts> {
        let line =
            stdout.lines().rev().find(|l| l.contains(" in ") && (l.contains("passed") || l.contains("failed")))?;
        let line = line.trim_matches(|c: char| c == '=' || c.is_whitespace());
        let (counts, _time) = line.rsplit_once(" in ")?;
        let mut out = Counts::default();
        for part in counts.split(", ") {
            let (n, what) = part.trim().split_once(' ')?;
            let n: u64 = n.parse().ok()?;
            match what {
                "passed" => out.passed = n,
                "failed" => out.failed = n,
                "skipped" => out.skipped = n,
                "error" | "errors" => out.errors = n,
                _ => {}
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[track_caller]
    fn check(stdout: &str, expected: Option<(u64, u64, u64, u64)>) {
        let got = Counts::parse(stdout).map(|c| (c.passed, c.failed, c.skipped, c.errors));
        assert_eq!(got, expected);
    }

    #[test]
    fn summary_lines() {
        check("..s\n66 passed, 26 skipped, 1 warning in 13.58s\n", Some((66, 0, 26, 0)));
        check("== 1 failed, 65 passed, 26 skipped in 2.00s ==", Some((65, 1, 26, 0)));
        check("2 failed, 3 passed, 1 error in 0.5s", Some((3, 2, 0, 1)));
        check("no tests ran in 0.01s", None);
    }
}
