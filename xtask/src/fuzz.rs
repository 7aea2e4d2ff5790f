//! `cargo xtask fuzz [--seconds N] [TARGET]`: coverage-guided fuzzing of the
//! targets in `fuzz/`, and the short run `cargo xtask ci` does.
//!
//! Fuzzing needs cargo-fuzz and a nightly toolchain (for `-Zsanitizer` and
//! the coverage instrumentation libFuzzer feeds on). Without nightly, the
//! stable toolchain is tried with `RUSTC_BOOTSTRAP=1`; if that cannot build
//! the targets either, the targets are built as plain programs on stable and
//! only replay the seeds and the regression files, and this says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{cargo_bin, exec, root, succeeds};

/// The fuzz targets, as named in `fuzz/Cargo.toml` and `fuzz/seeds/`.
const TARGETS: &[&str] =
    &["deathtensors_header", "safetensors_header", "file", "signatures", "manifest", "bintensors", "pickle"];

/// Seconds each target is fuzzed for by `cargo xtask fuzz`.
const DEFAULT_SECONDS: u64 = 60;

/// libFuzzer's memory cap per process. Its default, 2048, is the same; saying
/// it keeps the cap if that default ever changes. `Limits::DEFAULT` allows
/// 100 MiB headers, well within it.
const RSS_LIMIT_MB: u64 = 2048;

pub fn run(args: &[String]) -> Result<(), String> {
    let mut seconds = DEFAULT_SECONDS;
    let mut only: Option<&str> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--seconds" => {
                let n = rest.next().ok_or("--seconds needs a number")?;
                seconds = n.parse().map_err(|_| format!("bad number {n:?}"))?;
            }
            target if only.is_none() && TARGETS.contains(&target) => only = Some(target),
            other => return Err(format!("unexpected argument {other:?} (targets: {})", TARGETS.join(", "))),
        }
    }
    let targets: Vec<&str> = match only {
        Some(t) => vec![t],
        None => TARGETS.to_vec(),
    };
    replay(&targets)?;
    fuzz(&targets, seconds)
}

/// What `cargo xtask ci` runs: replay the regression files and the seeds,
/// then fuzz each target for `seconds` seconds.
pub fn smoke(seconds: u64) -> Result<(), String> {
    replay(TARGETS)?;
    fuzz(TARGETS, seconds)
}

/// How the targets can be built for libFuzzer.
#[derive(Clone, Copy)]
enum Fuzzer {
    /// `rustup run nightly cargo fuzz`.
    Nightly,
    /// The default (stable) toolchain with `RUSTC_BOOTSTRAP=1`, which lets it
    /// take the `-Z` flags cargo-fuzz passes.
    Bootstrap,
}

impl Fuzzer {
    /// A `cargo fuzz <subcommand>` command for this toolchain.
    fn cargo_fuzz(self, subcommand: &str) -> Command {
        let mut cmd = match self {
            Fuzzer::Nightly => {
                let mut cmd = Command::new("rustup");
                cmd.args(["run", "nightly", "cargo"]);
                cmd
            }
            Fuzzer::Bootstrap => {
                let mut cmd = Command::new(cargo_bin());
                cmd.env("RUSTC_BOOTSTRAP", "1");
                cmd
            }
        };
        // `cargo run` pointed these at the toolchain that runs us; cargo-fuzz
        // and the cargo it spawns must pick their own.
        cmd.env_remove("CARGO").env_remove("RUSTUP_TOOLCHAIN");
        cmd.args(["fuzz", subcommand, "--fuzz-dir", "fuzz"]);
        cmd
    }

    /// How a person runs cargo-fuzz with this toolchain.
    fn shell(self) -> &'static str {
        match self {
            Fuzzer::Nightly => "cargo +nightly fuzz",
            Fuzzer::Bootstrap => "RUSTC_BOOTSTRAP=1 cargo fuzz",
        }
    }
}

/// Fuzzes each target for `seconds` seconds, all of them even if one
/// crashes; fails if any did, naming the artifacts libFuzzer saved.
fn fuzz(targets: &[&str], seconds: u64) -> Result<(), String> {
    if seconds == 0 {
        // libFuzzer reads `-max_total_time=0` as "no limit".
        return Ok(());
    }
    let fuzzer = match find_fuzzer() {
        Ok(fuzzer) => fuzzer,
        Err(why) => {
            eprintln!(
                "xtask: SKIPPED coverage-guided fuzzing: {why}. \
                 Only the seeds and testdata/fuzz/ were replayed."
            );
            return Ok(());
        }
    };
    let mut failures = Vec::new();
    for &target in targets {
        let artifacts = root().join("fuzz/artifacts").join(target);
        let before = files_in(&artifacts);
        // libFuzzer refuses a corpus folder that does not exist.
        let corpus = root().join("fuzz/corpus").join(target);
        std::fs::create_dir_all(&corpus).map_err(|e| format!("cannot create {}: {e}", corpus.display()))?;
        let result = exec(
            fuzzer
                .cargo_fuzz("run")
                .arg(target)
                // The first folder receives the inputs that add coverage; the
                // seeds are read but never written.
                .arg(format!("fuzz/corpus/{target}"))
                .arg(format!("fuzz/seeds/{target}"))
                .args([
                    "--".to_string(),
                    format!("-max_total_time={seconds}"),
                    format!("-rss_limit_mb={RSS_LIMIT_MB}"),
                    // Crashes and the final stats only, not every new input.
                    "-verbosity=0".to_string(),
                    "-print_final_stats=1".to_string(),
                ]),
        );
        if let Err(e) = result {
            let new: Vec<PathBuf> = files_in(&artifacts).into_iter().filter(|p| !before.contains(p)).collect();
            eprintln!("xtask: fuzz target {target} failed: {e}");
            for artifact in &new {
                let rel = artifact.strip_prefix(root()).unwrap_or(artifact);
                eprintln!("xtask: artifact {}", rel.display());
                eprintln!("xtask:   minimise: {} tmin --fuzz-dir fuzz {target} {}", fuzzer.shell(), rel.display());
                eprintln!(
                    "xtask:   replay:   cargo run --release --manifest-path fuzz/Cargo.toml \
                     --bin {target} -- {}",
                    rel.display()
                );
            }
            if new.is_empty() {
                eprintln!("xtask: no new artifact in {}: the run failed before fuzzing", artifacts.display());
            } else {
                eprintln!("xtask:   then copy it to testdata/fuzz/{target}-<hash> (see testdata/fuzz/README.md)");
            }
            failures.push(target);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("fuzzing found failures in: {}", failures.join(", ")))
    }
}

/// The toolchain to fuzz with, installing cargo-fuzz if it is missing, or
/// why there is none: cargo-fuzz cannot be installed, or there is no nightly
/// and stable with `RUSTC_BOOTSTRAP=1` cannot build the targets.
fn find_fuzzer() -> Result<Fuzzer, String> {
    if !succeeds(Command::new(cargo_bin()).args(["fuzz", "--help"])) {
        exec(Command::new(cargo_bin()).args(["install", "cargo-fuzz", "--locked"]))
            .map_err(|e| format!("cargo-fuzz is not installed and installing it failed ({e})"))?;
    }
    if succeeds(Command::new("rustup").args(["run", "nightly", "rustc", "--version"])) {
        return Ok(Fuzzer::Nightly);
    }
    eprintln!("xtask: no nightly toolchain; trying cargo-fuzz on stable with RUSTC_BOOTSTRAP=1");
    exec(&mut Fuzzer::Bootstrap.cargo_fuzz("build")).map_err(|_| {
        "no nightly toolchain is installed (`rustup toolchain install nightly`), \
         and stable with RUSTC_BOOTSTRAP=1 cannot build the targets"
            .to_string()
    })?;
    Ok(Fuzzer::Bootstrap)
}

/// Builds the targets as plain programs (stable, no libFuzzer) and runs each
/// on its seeds and on its files in `testdata/fuzz/`.
fn replay(targets: &[&str]) -> Result<(), String> {
    let manifest = "fuzz/Cargo.toml";
    exec(Command::new(cargo_bin()).args(["build", "--release", "--manifest-path", manifest]))?;
    let regressions = files_in(&root().join("testdata/fuzz"));
    for &target in targets {
        let prefix = format!("{target}-");
        let mine = regressions
            .iter()
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)));
        exec(
            Command::new(cargo_bin())
                .args(["run", "--quiet", "--release", "--manifest-path", manifest])
                .args(["--bin", target, "--"])
                .arg(format!("fuzz/seeds/{target}"))
                .args(mine.map(|p| p.strip_prefix(root()).unwrap_or(p))),
        )?;
    }
    Ok(())
}

/// The files directly in `dir`, sorted; none if it does not exist.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::TARGETS;
    use crate::util::root;

    fn sorted(mut names: Vec<String>) -> Vec<String> {
        names.sort();
        names
    }

    /// The names of the entries of `dir` that `keep` accepts, as it maps them.
    fn entries(dir: &Path, keep: impl Fn(&Path) -> Option<String>) -> Vec<String> {
        let list = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        sorted(list.filter_map(|e| keep(&e.unwrap().path())).collect())
    }

    /// A target named here and nowhere else would never be built, replayed
    /// or fuzzed, and one missing here would never run in CI: every target
    /// is a `[[bin]]` of `fuzz/Cargo.toml`, a file of `fuzz/fuzz_targets/`,
    /// a non-empty folder of `fuzz/seeds/` and an entry of the properties'
    /// `TARGETS` (which `cargo test` replays `testdata/fuzz/` through), and
    /// each of those is a target.
    #[test]
    fn fuzz_targets_are_registered_everywhere() {
        let fuzz = root().join("fuzz");
        let expected = sorted(TARGETS.iter().map(|t| t.to_string()).collect());

        let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
        let bins: Vec<String> = manifest
            .split("[[bin]]")
            .skip(1)
            .filter_map(|bin| bin.lines().find_map(|l| l.strip_prefix("name = \"")?.strip_suffix('"')))
            .map(String::from)
            .collect();
        assert_eq!(sorted(bins), expected, "[[bin]] targets of fuzz/Cargo.toml");

        let files = entries(&fuzz.join("fuzz_targets"), |p| {
            (p.extension()? == "rs").then(|| p.file_stem()?.to_str().map(String::from))?
        });
        assert_eq!(files, expected, "files of fuzz/fuzz_targets/");

        let seeds = entries(&fuzz.join("seeds"), |p| p.is_dir().then(|| p.file_name()?.to_str().map(String::from))?);
        assert_eq!(seeds, expected, "folders of fuzz/seeds/");
        for target in TARGETS {
            let dir = fuzz.join("seeds").join(target);
            assert!(!entries(&dir, |p| p.is_file().then(String::new)).is_empty(), "no seed in {}", dir.display());
        }

        let properties = std::fs::read_to_string(root().join("crates/testkit/src/properties.rs")).unwrap();
        for target in TARGETS {
            assert!(
                properties.contains(&format!("(\"{target}\", {target})")),
                "crates/testkit/src/properties.rs: TARGETS has no entry (\"{target}\", {target})"
            );
        }
    }
}
