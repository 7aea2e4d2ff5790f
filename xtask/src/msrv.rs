//! `cargo xtask msrv`: the `rust-version` of Cargo.toml, tested with that
//! exact toolchain (installed by rustup): every crate's library, binaries
//! and examples check (what a user of the crates builds; the tests and
//! benches need only the toolchain this machine has), and the format
//! crate's tests pass.

use std::process::Command;

use crate::util::{exec, workspace_package};

pub fn run() -> Result<(), String> {
    let version = workspace_package("rust-version")?;
    let installed = Command::new("rustup").args(["toolchain", "list"]).output();
    let have = installed.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    if !have.lines().any(|l| l.starts_with(&format!("{version}-"))) {
        exec(Command::new("rustup").args(["toolchain", "install", &version, "--profile", "minimal"]))?;
    }
    let cargo = |args: &[&str]| {
        let mut c = Command::new("rustup");
        c.args(["run", &version, "cargo"]).args(args).args(["--locked", "--target-dir", "target/msrv"]);
        // What the outer cargo set would pick its toolchain instead.
        for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER"] {
            c.env_remove(var);
        }
        exec(&mut c)
    };
    cargo(&["check", "--workspace", "--lib", "--bins", "--examples"])?;
    cargo(&["test", "-p", "deathtensors-format"])?;
    eprintln!("xtask: Rust {version} (the rust-version) builds the workspace and passes the format tests");
    Ok(())
}
