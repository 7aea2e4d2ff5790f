//! Shared code of the fuzz targets: the properties they check, and the
//! replay `main` they use when built without libFuzzer.
//!
//! Each target in `fuzz_targets/` is a two-line wrapper around a function of
//! [`properties`]. Built by `cargo fuzz` (nightly, `--cfg fuzzing`) it is a
//! libFuzzer target; built by a plain `cargo build` (stable) it is a program
//! that runs the property on the files or folders named on its command line:
//!
//! ```text
//! cd fuzz && cargo run --release --bin file -- artifacts/file/crash-1234
//! ```

// The properties live in the workspace's testkit, so that format's
// regression tests replay exactly what the fuzzer checks.
pub use deathtensors_testkit::properties;

use std::path::{Path, PathBuf};

/// Runs `property` on every file named in the command-line arguments, and
/// on every file directly inside a named folder, in sorted order. Prints each
/// file before running it, so a panic is easy to pin on its input.
pub fn replay(property: properties::Property) {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if args.is_empty() {
        eprintln!("usage: <target> FILE_OR_DIR...\nruns the target's property on each input");
        std::process::exit(2);
    }
    let mut count = 0usize;
    for arg in &args {
        for path in inputs(arg) {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| {
                eprintln!("cannot read {}: {e}", path.display());
                std::process::exit(2);
            });
            eprintln!("replaying {}", path.display());
            property(&bytes);
            count += 1;
        }
    }
    eprintln!("{count} inputs replayed, the property held for each");
}

/// The file itself, or the files directly inside a folder, sorted.
fn inputs(path: &Path) -> Vec<PathBuf> {
    if !path.is_dir() {
        return vec![path.to_path_buf()];
    }
    let entries = std::fs::read_dir(path).unwrap_or_else(|e| {
        eprintln!("cannot list {}: {e}", path.display());
        std::process::exit(2);
    });
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    files.sort();
    files
}
