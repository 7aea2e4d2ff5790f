//! `cargo xtask`: the project's automation. One file per task.
//!
//! - `cargo xtask test`: every test, Rust (a dev build) and Python (the
//!   host's release wheel).
//! - `cargo xtask checks`: lints, docs, no_std and MSRV builds, release
//!   artifacts, safetensors' suite, fuzz smoke.
//! - `cargo xtask ci`: `test` then `checks` (what `.ci/run` runs).
//! - `cargo xtask demo`: the README's main job.
//! - `cargo xtask setup`: install what the build needs (rustup targets, ...).
//! - `cargo xtask fuzz [--seconds N] [TARGET]`: run the fuzz targets.
//! - `cargo xtask bench`: run the benchmarks.
//! - `cargo xtask msrv`: the rust-version toolchain builds and tests.
//! - `cargo xtask dist`: build, test, sum and sign the release artifacts.
//! - `cargo xtask verify-dist`: check a dist's sums, signature, binary headers and wheel tags.
//! - `cargo xtask wine-test`: the Windows tests of format, io and cli, under Wine.
//! - `cargo xtask release X.Y.Z`: bump, check, build and tag a release.

mod bench;
mod ci;
#[cfg(test)]
mod codemap;
mod compat;
mod demo;
mod dist;
mod dist_test;
mod fuzz;
mod headers;
mod macos;
#[cfg(test)]
mod modgraph;
mod msrv;
mod python;
mod release;
mod setup;
mod steps;
mod sums;
mod tools;
mod util;
mod wheel;
mod wine;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((task, rest)) => (task.as_str(), rest),
        None => ("help", &[][..]),
    };
    let result = match task {
        "test" => ci::run_test(rest),
        "checks" => ci::run_checks(rest),
        "ci" => ci::run_ci(rest),
        "setup" => setup::run(),
        "demo" => demo::run(),
        "python" => wheel::test(),
        "compat" => compat::run(),
        "fuzz" => fuzz::run(rest),
        "bench" => bench::run(rest),
        "dist" => dist::run(rest),
        "msrv" => msrv::run(),
        "verify-dist" => sums::run_verify(rest),
        "wine-test" => wine::run(rest),
        "release" => release::run(rest),
        "help" | "--help" | "-h" => {
            println!("{}", HELP);
            Ok(())
        }
        other => Err(format!("unknown task {other:?}\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

const HELP: &str = "usage: cargo xtask <task>

tasks:
  test               every test: setup, fmt, cargo test, the host's release wheel and pytest (on every
                     core); prints how long each step took
  checks [--fuzz-seconds N]
                     the slower checks: clippy, no_std builds, rustdoc, msrv, the host's release
                     artifacts (each tested), safetensors' suite on that wheel, fuzz smoke
  ci [--fuzz-seconds N]
                     test, then checks: everything CI runs (.ci/run)
  demo               the main job: build the package (one dev build) and show it at work on a model
  python             build the wheel, install it into .venv and run pytest
  compat             run safetensors 0.8.0's Python test suite against the deathtensors.safetensors drop-in
  setup              install rustup targets and tools the build needs
  fuzz [--seconds N] [TARGET]
                     fuzz every target (or TARGET) for N seconds each (default 60)
  bench [--rust|--python|--compress|--remote|--dcp] [ARGS]
                     criterion benches, then the Python comparison (bindings/python/benches/bench.py ARGS);
                     --compress, --remote, --dcp: only that benchmark (--dcp: torch.distributed.checkpoint, 4 ranks)
  msrv               check the workspace and test the format crate with the rust-version toolchain
  dist [--host] [--signing-key KEY.jwk] [--no-test] [--allow-dirty] [--compare DIR]
                     release artifacts in target/dist: CLI (x86_64/aarch64, glibc/musl; macOS
                     arm64/x86_64; Windows x86_64 .zip), abi3 wheels (manylinux2014 x86_64/aarch64,
                     macosx_11_0_arm64, macosx_10_12_x86_64, win_amd64), sdist, crates, signed
                     SHA256SUMS; each tested (Windows under Wine, macOS by its headers only)
  wine-test [ARGS]   cargo test of format, io and cli for x86_64-pc-windows-gnu, run under Wine
                     (setup installs mingw-w64 and Wine); ARGS go to cargo test
  verify-dist [DIR] [--signer KEY.pub.jwk]
                     check a dist against its SHA256SUMS and the signature, and each binary's
                     header (ELF, PE, Mach-O) and wheel's WHEEL tags against its target
  release X.Y.Z [--dry-run] [--signing-key KEY.jwk]
                     bump the version, run CI, publish --dry-run, build the dist, tag vX.Y.Z";
