//! `cargo xtask compat`: safetensors 0.8.0's own Python test suite, run
//! against our drop-in (`deathtensors.safetensors`).
//!
//! The suite comes from the safetensors source distribution on PyPI. It runs
//! in a throwaway copy under `target/compat/run`, with the drop-in's shim
//! directory on `PYTHONPATH` so that `import safetensors` gives ours, and a
//! `conftest.py` that refuses to run if it does not. numpy and torch, CPU
//! only; the GPU tests skip, as they do for safetensors itself. The test
//! files of the other frameworks (JAX/Flax, TensorFlow, Paddle, MLX) run
//! after, each in a process of its own: TensorFlow then Paddle in one
//! process kills it. MLX's file skips off macOS upstream; it runs here on
//! mlx's Linux CPU build, with its platform checks taken out.

use std::path::Path;
use std::process::Command;

use crate::python::python;
use crate::util::{exec, root};

const VERSION: &str = "0.8.0";

/// What safetensors 0.8.0 itself passes of its suite on this kind of machine
/// (CPU, numpy and torch installed; 26 tests skip).
const REFERENCE_PASSED: u64 = 66;

/// One test file of another framework, run in a process of its own.
struct FrameworkFile {
    file: &'static str,
    /// The module whose absence skips the file (machines without the wheel).
    module: &'static str,
    /// What safetensors 0.8.0 itself passes of the file here, each test run
    /// in its own process (measured with the versions `python.rs` pins).
    reference_passed: u64,
    /// Tests that fail with safetensors 0.8.0 too, and why.
    known_failures: &'static [&'static str],
}

/// The other frameworks' files. Paddle: safetensors 0.8.0 passes 5; its
/// `test_paddle_slice_cpu` aborts the process (`slice_[list()]`, an empty
/// selection, made into a tensor by `paddle.MmapStorage`), which ours
/// passes; the two GPU tests fail on a CPU-only Paddle for both, and
/// `test_zero_sized` is an expected failure for both.
const FRAMEWORK_FILES: &[FrameworkFile] = &[
    FrameworkFile { file: "tests/test_flax_comparison.py", module: "flax", reference_passed: 4, known_failures: &[] },
    FrameworkFile {
        file: "tests/test_tf_comparison.py",
        module: "tensorflow",
        reference_passed: 4,
        known_failures: &[],
    },
    FrameworkFile {
        file: "tests/test_paddle_comparison.py",
        module: "paddle",
        reference_passed: 5,
        known_failures: &["::test_paddle_tensor_gpu", "::test_paddle_slice_gpu"],
    },
    FrameworkFile { file: MLX_ANY_OS, module: "mlx.core", reference_passed: 3, known_failures: &[] },
];

/// safetensors' `test_mlx_comparison.py` with its macOS checks taken out.
const MLX_ANY_OS: &str = "tests/test_mlx_comparison_anyos.py";

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
    crate::wheel::install()?;
    run_suite()
}

/// The suite on the host's wheel of `target/dist` (`cargo xtask checks`
/// runs it after `dist --host`, which built and tested that wheel): no wheel of
/// its own to build.
pub fn run_on_dist_wheel() -> Result<(), String> {
    crate::python::setup()?;
    crate::python::install_dist_wheel()?;
    run_suite()
}

/// Runs the suite against the wheel installed in `.venv`.
fn run_suite() -> Result<(), String> {
    let dir = root().join("target/compat");
    let sdist = dir.join(format!("safetensors-{VERSION}.tar.gz"));
    if !sdist.exists() {
        // Only safetensors from source: its build tool (maturin) as a wheel,
        // where `:all:` built maturin from source to read the sdist's
        // metadata (minutes of cargo on two cores).
        exec(
            Command::new(python())
                .args(["-m", "pip", "download", "--quiet", "--no-binary", "safetensors", "--no-deps"])
                .arg(format!("safetensors=={VERSION}"))
                .arg("-d")
                .arg(&dir),
        )?;
    }
    let run = dir.join("run");
    prepare(&sdist, &run)?;
    let shim = output(Command::new(python()).args(["-c", "import deathtensors.safetensors as s; print(s.SHIM_PATH)"]))?;
    let shim = shim.trim();
    let mut main = vec!["tests".to_string()];
    main.extend(["tests/test_mlx_comparison.py", MLX_ANY_OS].iter().map(|f| format!("--ignore={f}")));
    main.extend(FRAMEWORK_FILES.iter().map(|f| format!("--ignore={}", f.file)));
    let mut failures = Vec::new();
    if let Err(e) = pytest(&run, shim, "compat", &main, REFERENCE_PASSED, &[]) {
        failures.push(e);
    }
    for f in FRAMEWORK_FILES {
        let check = format!("import importlib.util, sys; sys.exit(importlib.util.find_spec('{}') is None)", f.module);
        if !crate::util::succeeds(Command::new(python()).args(["-c", &check])) {
            println!("compat {}: skipped, {} is not installed", f.file, f.module);
            continue;
        }
        if let Err(e) = pytest(&run, shim, f.file, &[f.file.to_string()], f.reference_passed, f.known_failures) {
            failures.push(e);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// Runs pytest on `args` in `run` with the drop-in's shim first on the
/// path; fails unless it passes at least `reference` tests and fails only
/// those named in `known` (which fail with safetensors itself).
fn pytest(run: &Path, shim: &str, what: &str, args: &[String], reference: u64, known: &[&str]) -> Result<(), String> {
    let mut pytest = Command::new(python());
    pytest.args(["-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider"]).args(args);
    // TensorFlow and JAX are quiet, and keep to one thread pool.
    pytest.current_dir(run).env("PYTHONPATH", shim).env("TF_CPP_MIN_LOG_LEVEL", "3").env("GLOG_minloglevel", "3");
    eprintln!("$ cd {} && PYTHONPATH={shim} python -m pytest {} ...", run.display(), args[0]);
    let out = pytest.output().map_err(|e| format!("cannot run pytest: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    let counts = Counts::parse(&stdout).ok_or_else(|| format!("{what}: no pytest summary line in the output"))?;
    println!(
        "{what}: {} passed, {} failed, {} skipped (safetensors {VERSION} itself: {reference} passed)",
        counts.passed,
        counts.failed + counts.errors,
        counts.skipped
    );
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAILED ") || l.starts_with("ERROR ")).collect();
    let mut unexpected = 0;
    for line in &failed {
        let expected = known.iter().any(|k| line.split(' ').nth(1).is_some_and(|t| t.ends_with(k)));
        println!("  {line}{}", if expected { " (fails with safetensors too)" } else { "" });
        unexpected += u64::from(!expected);
    }
    if unexpected > 0 || counts.failed + counts.errors > failed.len() as u64 || counts.passed < reference {
        return Err(format!(
            "{what}: the drop-in must pass safetensors {VERSION}'s {reference} tests and fail no other"
        ));
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
    let mlx = std::fs::read_to_string(run.join("tests/test_mlx_comparison.py"))
        .map_err(|e| format!("cannot read the mlx tests: {e}"))?;
    write(
        MLX_ANY_OS,
        &mlx.replace(r#"platform.system() == "Darwin""#, "True").replace(r#"platform.system() != "Darwin""#, "False"),
    )?;
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
