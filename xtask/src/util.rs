//! Running commands.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The cargo that runs us.
pub fn cargo_bin() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

/// Runs `cmd` in the directory it names, or else in the workspace root.
fn in_root(cmd: &mut Command) -> &mut Command {
    if cmd.get_current_dir().is_none() {
        cmd.current_dir(root());
    }
    cmd
}

/// Runs a command (in the workspace root unless it names a directory),
/// echoing it, and fails if it fails.
pub fn exec(cmd: &mut Command) -> Result<(), String> {
    in_root(cmd);
    eprintln!("$ {}", display(cmd));
    let status = cmd.status().map_err(|e| format!("cannot run {}: {e}", display(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {status}", display(cmd)))
    }
}

/// Runs cargo with `args` in the workspace root.
pub fn cargo(args: &[&str]) -> Result<(), String> {
    exec(Command::new(cargo_bin()).args(args))
}

/// Whether a command can be run and succeeds (output discarded).
pub fn succeeds(cmd: &mut Command) -> bool {
    in_root(cmd)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn display(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command (in the workspace root unless it names a directory) and
/// returns its standard output; fails if it fails.
pub fn output(cmd: &mut Command) -> Result<String, String> {
    in_root(cmd);
    let out = cmd.output().map_err(|e| format!("cannot run {}: {e}", display(cmd)))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed: {}\n{}",
            display(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ));
    }
    String::from_utf8(out.stdout).map_err(|_| format!("`{}` printed bytes that are not UTF-8", display(cmd)))
}

/// A field of `[workspace.package]` in the workspace's `Cargo.toml`.
pub fn workspace_package(key: &str) -> Result<String, String> {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    workspace_package_in(&toml, key).ok_or_else(|| format!("no {key} in Cargo.toml's [workspace.package]"))
}

/// A string field of `[workspace.package]` in a `Cargo.toml`'s text.
pub fn workspace_package_in(toml: &str, key: &str) -> Option<String> {
    let mut in_section = false;
    for line in toml.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_section = t == "[workspace.package]";
        } else if in_section {
            let value = t.strip_prefix(key).map(str::trim_start).and_then(|r| r.strip_prefix('='));
            if let Some(v) = value.map(str::trim).and_then(|r| r.strip_prefix('"')?.strip_suffix('"')) {
                return Some(v.to_string());
            }
        }
    }
    None
}

/// The host's target triple.
pub fn host() -> String {
    let v = output(Command::new("rustc").arg("-vV")).unwrap_or_default();
    v.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or("x86_64-unknown-linux-gnu").to_string()
}

/// The workspace's version (`[workspace.package] version`).
pub fn workspace_version() -> Result<String, String> {
    workspace_package("version")
}

/// The first wheel in `dir` whose file name contains `part` (any wheel for
/// `""`); the error names the folder.
pub fn wheel_in(dir: &std::path::Path, part: &str) -> Result<PathBuf, String> {
    std::fs::read_dir(dir)
        .map_err(|e| format!("no wheel in {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "whl")
                && p.file_name().is_some_and(|n| n.to_string_lossy().contains(part))
        })
        .ok_or_else(|| {
            let kind = if part.is_empty() { String::new() } else { format!("{part} ") };
            format!("no {kind}wheel in {}", dir.display())
        })
}
