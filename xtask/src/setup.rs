//! Installs what the build needs on a fresh machine.

use std::process::Command;

use crate::util::{exec, root};

/// The bare-metal target that proves `deathtensors-format` is `no_std`.
pub const NO_STD_TARGET: &str = "thumbv7em-none-eabihf";

/// Adds the rustup target and components the checks use, if missing.
pub fn run_setup() -> Result<(), String> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    let has_target =
        installed.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == NO_STD_TARGET));
    if !has_target {
        exec(Command::new("rustup").args(["target", "add", NO_STD_TARGET]))?;
    }
    for component in ["rustfmt", "clippy"] {
        if !component_installed(component) {
            exec(Command::new("rustup").args(["component", "add", component]))?;
        }
    }
    debian_packages();
    npm_tools();
    // The Windows cross build and Wine (`cargo xtask wine-test`, clippy of
    // the Windows and macOS targets in `checks`).
    crate::tools::install_targets(CROSS_CHECK_TARGETS)?;
    crate::wine::setup()
}

/// The targets `checks` runs clippy for besides the host's: every other
/// target a release ships (Linux-only code is `cfg`-gated, not dead, off
/// Linux); clippy only checks, so macOS needs no SDK. The musl builds share
/// the glibc builds' code (no `cfg` tells them apart), so they add nothing.
pub const CROSS_CHECK_TARGETS: &[&str] =
    &[crate::wine::WINDOWS, "aarch64-apple-darwin", "x86_64-apple-darwin", "aarch64-unknown-linux-gnu"];

/// Debian packages the tests use, installed when missing and possible (as
/// root, with apt): strace kills a writer at each system call of a commit in
/// the crash tests of collections (they skip without it); nginx serves files
/// with Range support to the tests of `deathtensors-remote` (`http://`, on
/// loopback, started and stopped by the tests).
fn debian_packages() {
    if !crate::tools::on_path("apt-get") {
        return;
    }
    if let Err(e) = crate::tools::debian(&["strace", "nginx"]) {
        eprintln!("xtask: {e} (tests that need them skip)");
    }
}

/// Azurite, the Azure Storage emulator the tests of `az://` URLs start
/// (`azurite-blob`, on loopback), pinned.
const AZURITE: &str = "3.37.0";

/// The directory npm installs Azurite into (the tests look there).
fn azurite_dir() -> std::path::PathBuf {
    root().join("target/test-tools/azurite")
}

/// npm packages the tests use, installed into `target/test-tools` when
/// missing or of another version; without npm, or when the install fails,
/// a message says so and the tests that need them skip.
fn npm_tools() {
    let dir = azurite_dir();
    let manifest = dir.join("node_modules/azurite/package.json");
    let version = format!("\"version\": \"{AZURITE}\"");
    if std::fs::read_to_string(&manifest).is_ok_and(|m| m.contains(&version)) {
        return;
    }
    if !crate::tools::on_path("npm") {
        eprintln!("xtask: npm is not installed: the az:// tests skip (they need Azurite {AZURITE})");
        return;
    }
    let installed = exec(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
            .arg(&dir)
            .arg(format!("azurite@{AZURITE}")),
    );
    if let Err(e) = installed {
        eprintln!("xtask: {e} (installing Azurite {AZURITE}: the az:// tests skip)");
    }
}

fn component_installed(name: &str) -> bool {
    Command::new("rustup")
        .args(["component", "list", "--installed"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.starts_with(name)))
}

pub fn run() -> Result<(), String> {
    run_setup()?;
    crate::python::setup()
}
