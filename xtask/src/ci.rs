//! Everything CI checks, in the order that fails fastest: the tests
//! (`cargo xtask test`), then the slower checks (`cargo xtask checks`);
//! `cargo xtask ci` runs both, as `.ci/run` does.

use std::process::Command;

use crate::setup::NO_STD_TARGET;
use crate::steps::Steps;
use crate::util::{cargo, cargo_bin, exec};

/// The seconds each fuzz target runs in `checks`: `--fuzz-seconds N`, 5 by
/// default (a smoke test: `cargo xtask fuzz` is the long run).
fn fuzz_seconds(args: &[String]) -> Result<u64, String> {
    match args {
        [] => Ok(5),
        [flag, n] if flag == "--fuzz-seconds" => n.parse().map_err(|_| format!("bad number {n:?}")),
        _ => Err(format!("unexpected arguments {args:?}")),
    }
}

/// `cargo xtask test`: every test, Rust (a dev build) and Python (the
/// host's release wheel, built as `dist` builds it).
pub fn run_test(args: &[String]) -> Result<(), String> {
    if !args.is_empty() {
        return Err(format!("test: unexpected arguments {args:?}"));
    }
    let mut steps = Steps::new("cargo xtask test");
    test_steps(&mut steps)?;
    eprintln!("xtask: all tests passed");
    Ok(())
}

/// `cargo xtask checks`: lints, docs, the no_std and MSRV builds, the
/// host's release artifacts, safetensors' own suite on that wheel, fuzz.
pub fn run_checks(args: &[String]) -> Result<(), String> {
    let fuzz = fuzz_seconds(args)?;
    let mut steps = Steps::new("cargo xtask checks");
    // Alone, it needs what `test` installs first (both are no-ops when done).
    steps.run("setup (rustup targets, Debian packages, Azurite)", crate::setup::run_setup)?;
    steps.run("python venv (.venv from PyPI)", crate::python::setup)?;
    check_steps(&mut steps, fuzz)?;
    eprintln!("xtask: all checks passed");
    Ok(())
}

/// `cargo xtask ci` (what `.ci/run` runs): `test`, then `checks`, with one
/// table of steps.
pub fn run_ci(args: &[String]) -> Result<(), String> {
    let fuzz = fuzz_seconds(args)?;
    disk_report("at the start");
    // Each step's time is printed at the end, pass or fail.
    let mut steps = Steps::new("cargo xtask ci (test, then checks)");
    test_steps(&mut steps)?;
    check_steps(&mut steps, fuzz)?;
    disk_report("at the end");
    eprintln!("xtask: all checks passed");
    Ok(())
}

/// The tests: what a change is waited for.
fn test_steps(steps: &mut Steps) -> Result<(), String> {
    steps.run("setup (rustup targets, Debian packages, Azurite)", crate::setup::run_setup)?;
    // Before the Rust tests: they start moto's S3 server from `.venv`.
    steps.run("python venv (.venv from PyPI)", crate::python::setup)?;
    steps.run("cargo fmt --check", || cargo(&["fmt", "--all", "--", "--check"]))?;
    // Every server the tests start must be there: a missing one fails the
    // test naming it (`crates/testkit/src/servers.rs`), never a silent pass.
    steps.run("cargo test --workspace", || {
        exec(Command::new(cargo_bin()).args(["test", "--workspace"]).env("DEATHTENSORS_REQUIRE_SERVERS", "1"))
    })?;
    // The wheel that ships, not a dev build, whose unoptimised Rust makes
    // pytest slower (6:12 against 5:20 on one worker, warm); the `dist` of
    // `checks` then finds it built.
    steps.run("python: the host's release wheel into .venv", crate::wheel::install)?;
    let not_slow = format!("not {}", crate::python::SLOW);
    steps.run("pytest (all but the slow crash tests)", || crate::python::pytest(Some(&not_slow)))
}

/// The checks that rarely fail and take long: lints, docs, other builds,
/// the release artifacts.
fn check_steps(steps: &mut Steps, fuzz_seconds: u64) -> Result<(), String> {
    steps.run("clippy -D warnings", || cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    // Windows and macOS: Linux-only code is cfg-gated there, not dead.
    steps.run("clippy -D warnings (Windows, macOS, aarch64 Linux)", cross_clippy)?;
    // The Windows tests of format, io and cli under Wine: 5:12 on 2 shared
    // cores with the Windows test build warm (the tests' own time: cli 2:04,
    // io 1:21, format 0:52); a fresh clone adds the Windows debug build of
    // the dependencies.
    steps.run("wine-test (format, io, cli for Windows, under Wine)", || crate::wine::run(&[]))?;
    steps.run("format crate: serde_json backend tests, no_std builds, example", || {
        // The serde_json backend of the no_std build, with the same tests.
        cargo(&["test", "-p", "deathtensors-format", "--no-default-features"])?;
        // no_std proofs: the host without std, and a bare-metal target.
        cargo(&["build", "-p", "deathtensors-format", "--no-default-features"])?;
        cargo(&["build", "-p", "deathtensors-format", "--no-default-features", "--target", NO_STD_TARGET])?;
        format_example()
    })?;
    steps.run("rustdoc -D warnings", || {
        exec(Command::new(cargo_bin()).args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"))
    })?;
    // The rust-version, with that toolchain; its separate build is then
    // done with: give the disk back before the release builds.
    steps.run("msrv (rust-version toolchain)", crate::msrv::run)?;
    let _ = std::fs::remove_dir_all(crate::util::root().join("target/msrv"));
    // The release artifacts CI has time for: the host's CLI and wheel, the
    // sdist (which builds a wheel of its own) and crates, signed sums; each
    // tested, but pytest ran in the test steps already.
    steps.run("dist --host (CLI, wheel, sdist, crates)", || crate::dist::run(&["--host".to_string()]))?;
    // safetensors 0.8.0's own test suite against our drop-in, on that wheel.
    steps.run("compat (safetensors 0.8.0's suite)", crate::compat::run_on_dist_wheel)?;
    // The Python tests `test` leaves out, on that release wheel.
    steps.run("pytest: the slow crash tests (release wheel)", || crate::python::pytest(Some(crate::python::SLOW)))?;
    steps.run("fuzz smoke", || crate::fuzz::smoke(fuzz_seconds))?;
    // The README's first command, as a new user runs it (last: it installs
    // a dev build of the package into .venv, which `test` replaces again).
    steps.run("demo (README's `cargo xtask demo`)", crate::demo::run_steps)
}

/// The bindings checked for another system: pyo3 configures itself for
/// the abi3 floor without that system's Python.
const PYO3_CROSS: (&str, &str) = ("PYO3_CROSS_PYTHON_VERSION", "3.11");

/// clippy with warnings denied for the other systems' targets: the library
/// crates, the CLI and the Python bindings, with their tests and examples
/// (the benches measure Linux). macOS and aarch64 Linux go through
/// cargo-zigbuild, whose zig compiles the C of ring and zstd for them:
/// clippy only checks, so no Apple SDK is needed.
fn cross_clippy() -> Result<(), String> {
    let args = [
        "--lib",
        "--bins",
        "--tests",
        "--examples",
        "-p",
        "deathtensors-format",
        "-p",
        "deathtensors-io",
        "-p",
        "deathtensors-remote",
        "-p",
        "deathtensors-cli",
        "-p",
        "deathtensors-python",
        "--",
        "-D",
        "warnings",
    ];
    crate::tools::install(crate::setup::CROSS_CHECK_TARGETS)?;
    for target in crate::setup::CROSS_CHECK_TARGETS {
        // Zig is the C cross compiler of the macOS and aarch64 Linux
        // builds (ring and zstd compile C), as in `dist`.
        if target.contains("apple") || target.starts_with("aarch64-unknown-linux") {
            exec(
                Command::new(crate::tools::bin("cargo-zigbuild"))
                    .args(["clippy", "--target", target])
                    .args(args)
                    .env("PATH", crate::tools::path_env())
                    .env(PYO3_CROSS.0, PYO3_CROSS.1),
            )?;
        } else {
            exec(
                Command::new(cargo_bin())
                    .args(["clippy", "--target", target])
                    .args(args)
                    .env(PYO3_CROSS.0, PYO3_CROSS.1),
            )?;
        }
    }
    Ok(())
}

/// The format crate alone (no I/O crate), on files written by the
/// reference implementations: its `inspect` example.
pub fn format_example() -> Result<(), String> {
    for file in [
        "testdata/valid/deathtensors-0.3.0/all_dtypes_checksum.deathtensors",
        "testdata/valid/safetensors-0.8.0/all_dtypes.safetensors",
    ] {
        cargo(&["run", "--quiet", "-p", "deathtensors-format", "--example", "inspect", "--", file])?;
    }
    Ok(())
}

/// Prints the free space and the size of `target/`, so that a run that
/// fills the disk says so before a compiler's "No space left on device".
fn disk_report(when: &str) {
    let df = Command::new("df").args(["-Pk", "."]).current_dir(crate::util::root()).output();
    let free_kib = df
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.lines().nth(1)?.split_whitespace().nth(3)?.parse::<u64>().ok());
    let du = Command::new("du").args(["-sk", "target"]).current_dir(crate::util::root()).output();
    let target_kib = du
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.split_whitespace().next()?.parse::<u64>().ok());
    let gib = |k: Option<u64>| k.map_or("?".to_string(), |k| format!("{:.1} GiB", k as f64 / (1 << 20) as f64));
    eprintln!("xtask: disk {when}: {} free, target/ holds {}", gib(free_kib), gib(target_kib));
    if free_kib.is_some_and(|k| k < 10 << 20) {
        eprintln!("xtask: warning: less than 10 GiB free; a full CI run builds about that much");
    }
}
