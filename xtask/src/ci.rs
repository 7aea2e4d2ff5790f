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
    crate::python::test()?;
    // safetensors 0.8.0's own test suite against our drop-in.
    crate::compat::run()?;
    // The release artifacts CI has time for: the host's CLI and wheel (the
    // wheel runs the pytest suite), the sdist and crates, signed sums.
    crate::dist::run(&["--host".to_string()])?;
    crate::fuzz::smoke(fuzz_seconds)?;
    eprintln!("xtask: all checks passed");
    Ok(())
}

pub fn run(args: &[String]) -> Result<(), String> {
    run_ci(args)
}
