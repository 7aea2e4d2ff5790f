//! Windows, here: the crates cross-built for `x86_64-pc-windows-gnu` with
//! Debian's mingw-w64, and their tests run under Debian's Wine as cargo's
//! runner (`cargo xtask wine-test`).
//!
//! Wine 8 (Debian 12's) lacks `ProcessPrng` of `bcryptprimitives.dll`,
//! which Rust's standard library imports on Windows: `xtask/wine/
//! bcryptprimitives.c`, a stand-in over `RtlGenRandom`, is built with mingw
//! into the `system32` of a Wine prefix of our own (`target/wine-prefix`).
//! It is a file of the test environment, never of a release.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{cargo_bin, exec, root};

/// The Windows target.
pub const WINDOWS: &str = "x86_64-pc-windows-gnu";

/// Debian's Wine (the `wine64` package puts it outside PATH).
pub const WINE: &str = "/usr/lib/wine/wine64";

/// The crates whose tests run under Wine.
const CRATES: &[&str] = &["deathtensors-format", "deathtensors-io", "deathtensors-cli"];

/// The Wine prefix the tests run in.
pub fn prefix() -> PathBuf {
    root().join("target/wine-prefix")
}

/// Installs mingw-w64 and Wine (Debian), the rustup target, and makes the
/// Wine prefix with the `ProcessPrng` stand-in. Errors say what is missing.
pub fn setup() -> Result<(), String> {
    crate::tools::debian(&["gcc-mingw-w64-x86-64", "wine64"])?;
    crate::tools::install_targets(&[WINDOWS])?;
    let system32 = prefix().join("drive_c/windows/system32");
    if !system32.is_dir() {
        exec(Command::new(WINE).args(["wineboot", "--init"]).envs(env()))?;
    }
    let dll = system32.join("bcryptprimitives.dll");
    let source = root().join("xtask/wine/bcryptprimitives.c");
    let fresh = |d: &std::path::Path| {
        let time = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        time(d).is_some() && time(d) >= time(&source)
    };
    if !fresh(&dll) {
        exec(
            Command::new("x86_64-w64-mingw32-gcc")
                .args(["-shared", "-O2", "-s", "-o"])
                .arg(&dll)
                .arg(&source)
                .arg("-ladvapi32"),
        )?;
    }
    Ok(())
}

/// The environment of a run under Wine: our prefix, Wine quiet, and Wine
/// as cargo's runner for the Windows target (set here, for our commands
/// only: a global runner would change every other build).
pub fn env() -> Vec<(&'static str, std::ffi::OsString)> {
    vec![
        ("WINEPREFIX", prefix().into()),
        ("WINEDEBUG", "-all".into()),
        ("CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER", WINE.into()),
    ]
}

/// `cargo xtask wine-test`: the tests of format, io and cli for Windows,
/// under Wine. Arguments go to `cargo test` (a filter, `--release`, ...).
pub fn run(args: &[String]) -> Result<(), String> {
    setup()?;
    // Wine gives processes the same small ids run after run, and the tests
    // name their scratch folders by process id: clear what a killed run left.
    let temp =
        prefix().join("drive_c/users").join(std::env::var("USER").unwrap_or_else(|_| "root".into())).join("Temp");
    let _ = std::fs::remove_dir_all(&temp);
    let _ = std::fs::create_dir_all(&temp);
    let mut c = Command::new(cargo_bin());
    c.args(["test", "--target", WINDOWS]);
    for name in CRATES {
        c.args(["-p", name]);
    }
    c.args(args).envs(env());
    let result = exec(&mut c);
    // Wine's server outlives the run by a few seconds: end it now.
    let _ = Command::new("/usr/lib/wine/wineserver").arg("-k").envs(env()).status();
    stop_leftovers();
    result
}

/// Stops the Linux programs the Windows tests started through Wine (moto's
/// S3 server, run as `Z:\...\moto_server`): a test stops its server when
/// it ends, but under Wine that ends only the Windows side of it, and the
/// Linux process it started would run on. They are found by the prefix's
/// drive path in their command line.
fn stop_leftovers() {
    let mark = prefix().join("dosdevices");
    let mark = mark.to_string_lossy();
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name.to_str().filter(|n| n.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Ok(cmdline) = std::fs::read(p.path().join("cmdline")) else { continue };
        if String::from_utf8_lossy(&cmdline).contains(&*mark) {
            eprintln!(
                "xtask: stopping {} (pid {pid}), left running by a Windows test",
                String::from_utf8_lossy(&cmdline).replace('\0', " ").trim()
            );
            let _ = Command::new("kill").arg(pid).status();
        }
    }
}
