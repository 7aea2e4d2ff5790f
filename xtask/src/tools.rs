//! The tools release builds need, installed by the project from the
//! registries this machine reaches: rustup targets, pinned PyPI tools in a
//! venv of their own (maturin, zig, cargo-zigbuild), Debian's qemu-user and
//! an arm64 Debian root for running what was cross-built.

use std::path::PathBuf;
use std::process::Command;

use crate::util::{exec, root, succeeds};

/// Release tools, pinned: the same versions give the same artifacts.
/// ziglang is the C compiler and linker of every target (glibc 2.17 for
/// manylinux2014, musl for static builds); cargo-zigbuild drives it for
/// the CLI, maturin's `--zig` for wheels.
const PYPI_TOOLS: &[&str] = &["maturin==1.16.0", "ziglang==0.17.1", "cargo-zigbuild==0.24.1"];

/// The venv of the release tools.
pub fn venv() -> PathBuf {
    root().join("target/dist-tools/venv")
}

/// `venv()/bin/<name>`.
pub fn bin(name: &str) -> PathBuf {
    venv().join("bin").join(name)
}

/// PATH with the tools' venv first (cargo-zigbuild finds zig through the
/// venv's `python3 -m ziglang`).
pub fn path_env() -> std::ffi::OsString {
    let mut dirs = vec![venv().join("bin")];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH entries without separators")
}

/// Installs the pinned PyPI tools (once) and the rustup `targets`.
pub fn install(targets: &[&str]) -> Result<(), String> {
    let python = bin("python");
    if !python.exists() {
        exec(Command::new(crate::python::base_python()).args(["-m", "venv"]).arg(venv()))?;
    }
    let pinned = PYPI_TOOLS.iter().all(|spec| {
        let (name, version) = spec.split_once("==").expect("pinned");
        succeeds(Command::new(&python).args([
            "-c",
            &format!("import importlib.metadata as m, sys; sys.exit(m.version({name:?}) != {version:?})"),
        ]))
    });
    if !pinned {
        exec(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
                .args(PYPI_TOOLS),
        )?;
    }
    install_targets(targets)
}

/// Adds the rustup `targets` not installed yet.
pub fn install_targets(targets: &[&str]) -> Result<(), String> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    let have = installed.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let missing: Vec<&str> = targets.iter().copied().filter(|t| !have.lines().any(|l| l.trim() == *t)).collect();
    if !missing.is_empty() {
        exec(Command::new("rustup").args(["target", "add"]).args(&missing))?;
    }
    Ok(())
}

/// Installs the Debian `packages` that are not installed yet (apt, as
/// root).
pub fn debian(packages: &[&str]) -> Result<(), String> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !debian_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let apt = |args: &[&str]| exec(as_root("apt-get").args(args).env("DEBIAN_FRONTEND", "noninteractive"));
    apt(&["update", "-qq"])?;
    let mut install = vec!["install", "-y", "-qq", "--no-install-recommends"];
    install.extend(&missing);
    apt(&install).map_err(|e| format!("{e} (installing Debian packages {})", missing.join(", ")))
}

/// `program` as root: directly when we are root, else through `sudo -n`
/// (CI runners' passwordless sudo), which fails at once rather than ask.
fn as_root(program: &str) -> Command {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    if root || !on_path("sudo") {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", "--preserve-env=DEBIAN_FRONTEND", program]);
        c
    }
}

fn debian_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).ends_with("installed"))
}

/// qemu-user and the arm64 glibc that runs a dynamically linked aarch64
/// binary (`qemu-aarch64 -L /usr/aarch64-linux-gnu`).
pub fn qemu() -> Result<(), String> {
    debian(&["qemu-user", "libc6-arm64-cross", "libgcc-s1-arm64-cross"])
}

/// Where `qemu()`'s arm64 glibc lives.
pub const ARM64_GLIBC: &str = "/usr/aarch64-linux-gnu";

/// An arm64 Debian root holding CPython 3.11, for importing the aarch64
/// wheel under qemu-user: debootstrap's first stage downloads the packages
/// (it cannot run their scripts without binfmt), and they are unpacked.
pub fn arm64_root() -> Result<PathBuf, String> {
    let dir = root().join("target/dist-tools/arm64-root");
    let python = dir.join("usr/bin/python3.11");
    if python.exists() {
        return Ok(dir);
    }
    debian(&["debootstrap"])?;
    let _ = std::fs::remove_dir_all(&dir);
    let suite = debian_suite();
    exec(
        as_root("debootstrap")
            .args(["--foreign", "--arch=arm64", "--variant=minbase", "--include=python3.11,libpython3.11-stdlib"])
            .arg(&suite)
            .arg(&dir)
            .arg("http://deb.debian.org/debian"),
    )?;
    let archives = dir.join("var/cache/apt/archives");
    let mut debs: Vec<PathBuf> = std::fs::read_dir(&archives)
        .map_err(|e| format!("{}: {e}", archives.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    debs.sort();
    for deb in &debs {
        exec(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&dir))?;
    }
    if !python.exists() {
        return Err(format!("no python3.11 in {} after unpacking {} packages", dir.display(), debs.len()));
    }
    Ok(dir)
}

/// This machine's Debian suite (the arm64 root matches it), bookworm when
/// it cannot be told.
fn debian_suite() -> String {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    release
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|s| s.trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "bookworm".to_string())
}

/// Whether `bin` is a file in a PATH directory.
pub fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}
