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
    if !crate::tools::on_path("apt-get") {
        return;
    }
    if let Err(e) = crate::tools::debian(&["strace", "nginx"]) {
        eprintln!("xtask: {e} (tests that need them skip)");
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
