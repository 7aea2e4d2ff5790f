//! Everything CI checks, in the order that fails fastest.

use std::process::Command;

use crate::setup::NO_STD_TARGET;
use crate::util::{cargo, cargo_bin, exec};

pub fn run_ci(args: &[String]) -> Result<(), String> {
    let fuzz_seconds = match args {
        [] => 10,
        [flag, n] if flag == "--fuzz-seconds" => n.parse().map_err(|_| format!("bad number {n:?}"))?,
        _ => return Err(format!("unexpected arguments {args:?}")),
    };
    disk_report("at the start");
    crate::setup::run_setup()?;
    // Before the Rust tests: they start moto's S3 server from `.venv`.
    crate::python::setup()?;
    cargo(&["fmt", "--all", "--", "--check"])?;
    cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])?;
    cargo(&["test", "--workspace"])?;
    // The serde_json backend of the no_std build, with the same tests.
    cargo(&["test", "-p", "deathtensors-format", "--no-default-features"])?;
    // no_std proofs: the host without std, and a bare-metal target.
    cargo(&["build", "-p", "deathtensors-format", "--no-default-features"])?;
    cargo(&["build", "-p", "deathtensors-format", "--no-default-features", "--target", NO_STD_TARGET])?;
    exec(Command::new(cargo_bin()).args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"))?;
    // The rust-version, with that toolchain.
    crate::msrv::run()?;
    // Its separate build is done with: give the disk back before the
    // Python wheel, the compat suite and the release builds.
    let _ = std::fs::remove_dir_all(crate::util::root().join("target/msrv"));
    crate::python::test()?;
    // safetensors 0.8.0's own test suite against our drop-in.
    crate::compat::run()?;
    // The release artifacts CI has time for: the host's CLI and wheel (the
    // wheel runs the pytest suite), the sdist and crates, signed sums.
    crate::dist::run(&["--host".to_string()])?;
    crate::fuzz::smoke(fuzz_seconds)?;
    disk_report("at the end");
    eprintln!("xtask: all checks passed");
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

pub fn run(args: &[String]) -> Result<(), String> {
    run_ci(args)
}
