//! `cargo xtask release X.Y.Z [--dry-run] [--signing-key KEY.jwk]`.
//!
//! Refuses a dirty tree, a version that does not increase and a
//! `CHANGELOG.md` without a section for it; bumps the version everywhere it
//! lives (the workspace's `version`, the crates' inter-dependencies, both
//! lock files; the Python package and the CLI's `--version` take it from
//! Cargo) and commits; runs the full CI, `cargo publish --dry-run` of every
//! published crate (in dependency order, in one run so that each finds the
//! others), reviews `cargo package --list`, builds and tests the dist, and
//! tags `vX.Y.Z` (annotated). Nothing is uploaded: the upload commands are
//! printed for a maintainer.
//!
//! `--dry-run` does all of that in a detached worktree of HEAD
//! (`target/release-dry-run`), so the checkout, its branch and its tags are
//! left as they were; the tag is only printed.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{cargo_bin, exec, output, root};

pub fn run(args: &[String]) -> Result<(), String> {
    let mut version = None;
    let mut dry_run = false;
    let mut signing_key = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dry-run" => dry_run = true,
            "--signing-key" => signing_key = Some(it.next().ok_or("--signing-key needs a key file")?.clone()),
            v if version.is_none() && !v.starts_with('-') => version = Some(v.to_string()),
            other => return Err(format!("release: unexpected argument {other:?}\n\n{HELP}")),
        }
    }
    let new = version.ok_or(format!("release: which version?\n\n{HELP}"))?;
    let new_v = Version::parse(&new).ok_or(format!("release: {new:?} is not a version X.Y.Z"))?;
    let old = crate::util::workspace_version()?;
    let old_v = Version::parse(&old).ok_or(format!("Cargo.toml's version {old:?} is not X.Y.Z"))?;
    if new_v <= old_v {
        return Err(format!("release: {new} does not increase the version ({old})"));
    }
    let status = output(Command::new("git").args(["status", "--porcelain"]))?;
    if !status.trim().is_empty() {
        return Err(format!("release: the work tree is not clean:\n{status}"));
    }
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).map_err(|e| format!("CHANGELOG.md: {e}"))?;
    if !has_changelog_section(&changelog, &new) {
        return Err(format!("release: CHANGELOG.md has no section `## {new}` (or `## [{new}]`)"));
    }
    let tag = format!("v{new}");
    if output(Command::new("git").args(["tag", "--list", &tag]))?.trim() == tag {
        return Err(format!("release: the tag {tag} exists already"));
    }

    let tree = if dry_run { dry_run_worktree()? } else { root() };
    eprintln!("xtask: release {old} -> {new} in {}", tree.display());
    bump(&tree, &old, &new)?;
    let run_in = |program: &str, args: &[&str]| exec(Command::new(program).args(args).current_dir(&tree));
    let subject = format!("Release {new}");
    if dry_run {
        // The throwaway commit of a dry run needs no one's identity.
        let who = ["-c", "user.name=deathtensors release dry run", "-c", "user.email=dry-run@invalid"];
        run_in("git", &[&who[..], &["commit", "--quiet", "-am", &subject]].concat())?;
    } else {
        run_in("git", &["commit", "--quiet", "-am", &subject])?;
    }
    let cargo = cargo_bin();
    run_in(&cargo, &["xtask", "ci"])?;
    let crates = published_crates_in(&tree)?;
    forget_unpublished_sources(&crates, &new)?;
    let mut publish: Vec<&str> = vec!["publish", "--dry-run", "--locked"];
    for c in &crates {
        publish.extend(["-p", c.as_str()]);
    }
    run_in(&cargo, &publish)?;
    for c in &crates {
        review_package_list(&tree, c)?;
    }
    // A release runs the whole pytest suite on its own wheel too.
    let mut dist: Vec<&str> = vec!["xtask", "dist", "--pytest"];
    if let Some(k) = &signing_key {
        dist.extend(["--signing-key", k.as_str()]);
    }
    run_in(&cargo, &dist)?;
    let message = format!("deathtensors {new}");
    if dry_run {
        eprintln!("xtask: dry run: would tag {tag} (`git tag -a {tag} -m {message:?}`) on the release commit");
    } else {
        run_in("git", &["tag", "-a", &tag, "-m", &message])?;
    }
    let dist_dir = tree.join("target/dist");
    println!(
        "\nRelease {new} is ready{}. Nothing was uploaded; a maintainer does that:\n  \
         git push origin HEAD {tag}\n  \
         cargo publish -p {}\n  \
         python -m twine upload {}/*.whl {}/deathtensors-{new}.tar.gz\n  \
         attach {}/* to the release page (SHA256SUMS, its signature and public key included)",
        if dry_run { " (dry run: nothing tagged, checkout untouched)" } else { "" },
        crates.join(" && cargo publish -p "),
        dist_dir.display(),
        dist_dir.display(),
        dist_dir.display()
    );
    Ok(())
}

pub const HELP: &str = "usage: cargo xtask release X.Y.Z [--dry-run] [--signing-key KEY.jwk]";

/// A detached worktree of HEAD for a dry run, made afresh.
fn dry_run_worktree() -> Result<PathBuf, String> {
    let dir = root().join("target/release-dry-run");
    if dir.exists() {
        let _ = exec(Command::new("git").args(["worktree", "remove", "--force"]).arg(&dir));
        let _ = std::fs::remove_dir_all(&dir);
    }
    exec(Command::new("git").args(["worktree", "prune"]))?;
    exec(Command::new("git").args(["worktree", "add", "--detach"]).arg(&dir).arg("HEAD"))?;
    Ok(dir)
}

/// A version `X.Y.Z`, ordered numerically.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(u64, u64, u64);

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        let mut parts = s.split('.').map(|p| {
            if p.is_empty() || (p.len() > 1 && p.starts_with('0')) || !p.bytes().all(|b| b.is_ascii_digit()) {
                None
            } else {
                p.parse().ok()
            }
        });
        let v = Version(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }
}

pub fn has_changelog_section(changelog: &str, version: &str) -> bool {
    changelog.lines().any(|l| {
        let Some(rest) = l.strip_prefix("## ") else { return false };
        let rest = rest.trim_start_matches('[');
        rest.strip_prefix(version).is_some_and(|after| after.is_empty() || after.starts_with([']', ' ']))
    })
}

/// The workspace `Cargo.toml` with `old` replaced by `new` as the
/// workspace's version and in the `deathtensors-*` entries of
/// `[workspace.dependencies]`; every other byte kept.
pub fn bump_manifest(toml: &str, old: &str, new: &str) -> Result<String, String> {
    let (from, to) = (format!("version = \"{old}\""), format!("version = \"{new}\""));
    let mut section = String::new();
    let mut changed = 0;
    let out: Vec<String> = toml
        .split_inclusive('\n')
        .map(|line| {
            let t = line.trim();
            if t.starts_with('[') {
                section = t.to_string();
            }
            let ours = (section == "[workspace.package]" && t.starts_with("version ="))
                || (section == "[workspace.dependencies]" && t.starts_with("deathtensors-"));
            if ours && line.contains(&from) {
                changed += 1;
                line.replacen(&from, &to, 1)
            } else {
                line.to_string()
            }
        })
        .collect();
    if changed < 2 {
        return Err(format!(
            "Cargo.toml: found the version {old} in {changed} places, want the workspace's and its crates'"
        ));
    }
    Ok(out.concat())
}

/// A `Cargo.lock` with the `deathtensors-*` packages at `old` moved to
/// `new`.
pub fn bump_lock(lock: &str, old: &str, new: &str) -> String {
    let mut out = String::with_capacity(lock.len());
    let mut ours = false;
    for line in lock.split_inclusive('\n') {
        if let Some(name) = line.strip_prefix("name = \"") {
            ours = name.starts_with("deathtensors-");
        }
        if ours && line.trim_end() == format!("version = \"{old}\"") {
            out.push_str(&format!("version = \"{new}\"\n"));
            ours = false;
        } else {
            out.push_str(line);
        }
    }
    out
}

fn bump(tree: &Path, old: &str, new: &str) -> Result<(), String> {
    let edit = |rel: &str, f: &dyn Fn(&str) -> Result<String, String>| -> Result<(), String> {
        let path = tree.join(rel);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, f(&text)?).map_err(|e| format!("{}: {e}", path.display()))
    };
    edit("Cargo.toml", &|t| bump_manifest(t, old, new))?;
    edit("Cargo.lock", &|t| Ok(bump_lock(t, old, new)))?;
    edit("fuzz/Cargo.lock", &|t| Ok(bump_lock(t, old, new)))?;
    // Every crate of the workspace must now say `new`.
    let stale: Vec<String> = workspace_packages(tree)?
        .into_iter()
        .filter(|(name, version, _)| name.starts_with("deathtensors") && version != new)
        .map(|(name, version, _)| format!("{name} {version}"))
        .collect();
    if !stale.is_empty() {
        return Err(format!("after the bump, still not {new}: {}", stale.join(", ")));
    }
    Ok(())
}

/// Removes what an earlier `cargo publish --dry-run` of the same version
/// left in cargo's registry folders: the verification of one crate builds
/// the others from a local overlay of crates.io, and cargo extracts them to
/// `registry/src/<crates.io>/NAME-VERSION`, which it reuses by name and
/// version alone. A second dry run of that version would then build
/// against the first one's sources (seen: a crate verified against an
/// older `deathtensors-io` 0.5.0 that lacked an API it uses). The version
/// being released is newer than any published one; were it on crates.io
/// after all, cargo would only download it again.
fn forget_unpublished_sources(crates: &[String], version: &str) -> Result<(), String> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    for (kind, suffix) in [("src", ""), ("cache", ".crate")] {
        let Ok(registries) = std::fs::read_dir(home.join("registry").join(kind)) else { continue };
        for registry in registries.flatten() {
            for krate in crates {
                let stale = registry.path().join(format!("{krate}-{version}{suffix}"));
                if stale.exists() {
                    eprintln!("xtask: removing {} (left by an earlier dry run)", stale.display());
                    let removed =
                        if suffix.is_empty() { std::fs::remove_dir_all(&stale) } else { std::fs::remove_file(&stale) };
                    removed.map_err(|e| format!("cannot remove {}: {e}", stale.display()))?;
                }
            }
        }
    }
    Ok(())
}

/// `(name, version, publishable)` of each workspace member.
fn workspace_packages(tree: &Path) -> Result<Vec<(String, String, Vec<String>)>, String> {
    let json = output(
        Command::new(cargo_bin())
            .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
            .current_dir(tree),
    )?;
    let v: serde_json::Value = serde_json::from_str(&json).map_err(|e| format!("cargo metadata: {e}"))?;
    let packages = v["packages"].as_array().ok_or("cargo metadata: no packages")?;
    let mut out = Vec::new();
    for p in packages {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        let version = p["version"].as_str().unwrap_or_default().to_string();
        // `publish: []` is `publish = false`; null is anywhere.
        if p["publish"].as_array().is_some_and(|a| a.is_empty()) {
            continue;
        }
        let deps = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["path"].is_string() && d["kind"].is_null())
            .filter_map(|d| d["name"].as_str().map(str::to_string))
            .collect();
        out.push((name, version, deps));
    }
    Ok(out)
}

/// The published crates of the workspace, each after the crates it needs.
pub fn published_crates() -> Result<Vec<String>, String> {
    published_crates_in(&root())
}

fn published_crates_in(tree: &Path) -> Result<Vec<String>, String> {
    let mut left = workspace_packages(tree)?;
    left.sort();
    let mut order: Vec<String> = Vec::new();
    while !left.is_empty() {
        let ready = left
            .iter()
            .position(|(_, _, deps)| deps.iter().all(|d| order.contains(d) || !left.iter().any(|(n, _, _)| n == d)))
            .ok_or("the workspace's crates depend on each other in a circle")?;
        order.push(left.remove(ready).0);
    }
    Ok(order)
}

/// What `cargo package --list` would publish of `krate`: its manifest and
/// sources, nothing from outside the crate's directory but the license,
/// no build output, secrets or large data.
fn review_package_list(tree: &Path, krate: &str) -> Result<(), String> {
    let listing = output(
        Command::new(cargo_bin())
            .args(["package", "--list", "--locked", "--allow-dirty", "-p", krate])
            .current_dir(tree),
    )?;
    let files: Vec<&str> = listing.lines().collect();
    for must in ["Cargo.toml", "README.md", "LICENSE"] {
        if !files.contains(&must) {
            return Err(format!("{krate}: `cargo package --list` has no {must}"));
        }
    }
    for f in &files {
        let bad = f.starts_with("target/")
            || f.contains(".venv")
            || f.ends_with(".jwk")
            || f.ends_with(".pem")
            || f.ends_with(".whl")
            || f.contains("__pycache__");
        if bad {
            return Err(format!("{krate}: `cargo package --list` would publish {f}"));
        }
    }
    eprintln!("xtask: {krate}: {} files to publish, reviewed", files.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_numerically_and_parse_strictly() {
        assert!(Version::parse("0.10.0") > Version::parse("0.9.9"));
        assert!(Version::parse("1.0.0") > Version::parse("0.99.99"));
        assert_eq!(Version::parse("0.5.0"), Some(Version(0, 5, 0)));
        for bad in ["0.5", "0.5.0.1", "v0.5.0", "0.05.0", "0.5.x", "", "0..5"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn changelog_sections_are_found_exactly() {
        let log = "# Changelog\n\n## [0.5.0] - 2026-11-24\n\n## 0.4.0\n";
        assert!(has_changelog_section(log, "0.5.0"));
        assert!(has_changelog_section(log, "0.4.0"));
        assert!(!has_changelog_section(log, "0.5"));
        assert!(!has_changelog_section(log, "0.4.01"));
        assert!(!has_changelog_section("text 0.6.0\n### 0.6.0\n", "0.6.0"));
    }

    #[test]
    fn the_manifest_bump_touches_only_our_versions() {
        let toml = "[workspace.package]\nversion = \"0.4.0\"\n\n[workspace.dependencies]\n\
                    deathtensors-format = { path = \"crates/format\", version = \"0.4.0\" }\n\
                    other = { version = \"0.4.0\" }\n\n[package]\nversion = \"0.4.0\"\n";
        let out = bump_manifest(toml, "0.4.0", "0.5.0").unwrap();
        assert_eq!(
            out,
            "[workspace.package]\nversion = \"0.5.0\"\n\n[workspace.dependencies]\n\
             deathtensors-format = { path = \"crates/format\", version = \"0.5.0\" }\n\
             other = { version = \"0.4.0\" }\n\n[package]\nversion = \"0.4.0\"\n"
        );
        assert_eq!(crate::util::workspace_package_in(&out, "version").as_deref(), Some("0.5.0"));
        assert!(bump_manifest(toml, "0.3.0", "0.5.0").is_err(), "an old version that is not there");
    }

    #[test]
    fn the_lock_bump_touches_only_our_packages() {
        let lock = "[[package]]\nname = \"deathtensors-io\"\nversion = \"0.4.0\"\n\n\
                    [[package]]\nname = \"itoa\"\nversion = \"0.4.0\"\n";
        assert_eq!(
            bump_lock(lock, "0.4.0", "0.5.0"),
            "[[package]]\nname = \"deathtensors-io\"\nversion = \"0.5.0\"\n\n\
             [[package]]\nname = \"itoa\"\nversion = \"0.4.0\"\n"
        );
    }

    #[test]
    fn published_crates_come_after_their_dependencies() {
        let order = published_crates().unwrap();
        let at = |n: &str| order.iter().position(|c| c == n).unwrap_or_else(|| panic!("{n} not in {order:?}"));
        assert!(at("deathtensors-format") < at("deathtensors-io"));
        assert!(at("deathtensors-io") < at("deathtensors-cli"));
        assert!(
            at("deathtensors-io") < at("deathtensors-remote") && at("deathtensors-remote") < at("deathtensors-cli")
        );
        assert!(!order.iter().any(|c| c == "xtask" || c == "deathtensors-python"), "{order:?}");
    }
}
