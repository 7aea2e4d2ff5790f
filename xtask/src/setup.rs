//! Installs what the build needs on a fresh machine.

use std::process::Command;

use crate::util::exec;

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
    Ok(())
}

/// Debian packages the tests use, installed when missing and possible (as
/// root, with apt): strace kills a writer at each system call of a commit in
/// the crash tests of collections (they skip without it); nginx serves files
/// with Range support to the tests of `deathtensors-remote` (`http://`, on
/// loopback, started and stopped by the tests).
fn debian_packages() {
    const PACKAGES: &[(&str, &str)] = &[("strace", "strace"), ("nginx", "nginx")];
    let missing: Vec<&str> = PACKAGES.iter().filter(|(bin, _)| !on_path(bin)).map(|(_, pkg)| *pkg).collect();
    if missing.is_empty() || !on_path("apt-get") {
        return;
    }
    let quiet = |c: &mut Command| c.env("DEBIAN_FRONTEND", "noninteractive").status().is_ok_and(|s| s.success());
    let ok = quiet(Command::new("apt-get").args(["update", "-qq"]))
        && quiet(Command::new("apt-get").args(["install", "-y", "-qq", "--no-install-recommends"]).args(&missing));
    if !ok {
        eprintln!("xtask: could not install {} (tests that need them skip)", missing.join(", "));
    }
}

fn on_path(bin: &str) -> bool {
    // /usr/sbin: where Debian puts nginx, not on every user's PATH.
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
        || std::path::Path::new("/usr/sbin").join(bin).is_file()
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
