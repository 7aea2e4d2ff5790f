//! `cargo xtask dist`: the release artifacts, in `target/dist/`.
//!
//! - the CLI for x86_64 and aarch64 Linux, glibc (2.17 and later) and static
//!   musl, and macOS (arm64 from 11.0, x86_64 from 10.12), as
//!   `deathtensors-<version>-<target>.tar.gz`; for Windows (x86_64, mingw)
//!   as `deathtensors-<version>-x86_64-pc-windows-gnu.zip`;
//! - abi3 wheels (CPython >= 3.11): manylinux2014 x86_64 and aarch64 (their
//!   tag checked by maturin's auditwheel), `macosx_11_0_arm64`,
//!   `macosx_10_12_x86_64` and `win_amd64`;
//! - the Python sdist and the `.crate` of every published crate;
//! - `SHA256SUMS`, signed (`SHA256SUMS.sig`, Ed25519), with the public key
//!   beside it.
//!
//! Linux and macOS builds are cross-compiled with zig (`tools.rs`), Windows
//! builds with Debian's mingw-w64 (the toolchain the Windows tests run
//! with under Wine: zig's Windows target cannot link the Python import
//! library pyo3 generates with mingw's dlltool), so that the same
//! commit gives the same bytes on any x86_64 Linux machine: a fixed
//! `SOURCE_DATE_EPOCH` (the commit's time), paths remapped out of the
//! binaries, sorted archives with fixed owners and times. Then
//! `dist_test.rs` tests what was built, and `sums.rs` checks the sums.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::headers::MANYLINUX;
use crate::util::{cargo_bin, exec, host, output, root, workspace_version};
use crate::{dist_test, sums, tools};

/// The CLI's targets: Rust's name, and the name zig builds it under (glibc
/// 2.17 is manylinux2014's, so the binaries run on any current Linux; the
/// macOS version is `MACOSX_DEPLOYMENT_TARGET`'s; Windows is built by
/// mingw, not zig).
const CLI_TARGETS: &[(&str, &str)] = &[
    ("x86_64-unknown-linux-gnu", "x86_64-unknown-linux-gnu.2.17"),
    ("aarch64-unknown-linux-gnu", "aarch64-unknown-linux-gnu.2.17"),
    ("x86_64-unknown-linux-musl", "x86_64-unknown-linux-musl"),
    ("aarch64-unknown-linux-musl", "aarch64-unknown-linux-musl"),
    ("aarch64-apple-darwin", "aarch64-apple-darwin"),
    ("x86_64-apple-darwin", "x86_64-apple-darwin"),
    (crate::wine::WINDOWS, crate::wine::WINDOWS),
];

/// The wheels' targets.
const WHEEL_TARGETS: &[&str] = &[
    "x86_64-unknown-linux-gnu",
    "aarch64-unknown-linux-gnu",
    "aarch64-apple-darwin",
    "x86_64-apple-darwin",
    crate::wine::WINDOWS,
];

/// What to build, from the command line.
#[derive(Debug)]
struct Options {
    /// The targets to build (with the sdist and crates); all when empty.
    /// CI builds only the host's.
    targets: Vec<String>,
    signing_key: Option<PathBuf>,
    test: bool,
    /// Whether the host's wheel runs the whole pytest suite as well: a
    /// separate step (`cargo xtask ci` runs it in its test half), since it
    /// installs every framework (jax, tensorflow, paddle, mlx) into `.venv`.
    pytest: bool,
    allow_dirty: bool,
    compare: Option<PathBuf>,
    /// Test (and verify) a dist that is there already, without building.
    test_only: bool,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        targets: Vec::new(),
        signing_key: None,
        test: true,
        pytest: false,
        allow_dirty: false,
        compare: None,
        test_only: false,
        out: root().join("target/dist"),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--host" => o.targets.push(host()),
            "--target" => o.targets.push(value(a)?),
            "--no-test" => o.test = false,
            "--pytest" => o.pytest = true,
            // The default now; still accepted from older scripts.
            "--no-pytest" => o.pytest = false,
            "--test-only" => o.test_only = true,
            "--allow-dirty" => o.allow_dirty = true,
            "--signing-key" => o.signing_key = Some(PathBuf::from(value(a)?)),
            "--compare" => o.compare = Some(PathBuf::from(value(a)?)),
            "--out" => o.out = PathBuf::from(value(a)?),
            other => return Err(format!("dist: unexpected argument {other:?}\n\n{HELP}")),
        }
    }
    Ok(o)
}

pub const HELP: &str = "usage: cargo xtask dist [--host | --target TRIPLE ...] [--signing-key KEY.jwk] [--no-test]
                         [--pytest] [--allow-dirty] [--compare OTHER_DIST_DIR] [--out DIR]

  --host          only the host's CLI and wheel (and the sdist and crates)
  --target T      only target T's CLI and wheel (repeatable): x86_64-unknown-linux-gnu,
                  aarch64-unknown-linux-gnu, x86_64-unknown-linux-musl, aarch64-unknown-linux-musl,
                  aarch64-apple-darwin, x86_64-apple-darwin, x86_64-pc-windows-gnu
  --signing-key   an Ed25519 JWK (`deathtensors keygen --type ed25519`) that signs
                  SHA256SUMS [default: a development key in target/dist-tools/]
  --no-test       build, sum and sign without testing the artifacts
  --pytest        also run the whole pytest suite on the host's wheel, after installing
                  every test dependency (jax, tensorflow, paddle, mlx, moto) into .venv;
                  without it the artifacts get their own checks only (smoke tests, the
                  README's examples in a venv holding only the wheel); `cargo xtask ci`
                  runs the suite once, in its test half
  --test-only     test and verify the dist in --out as it is, building nothing
  --allow-dirty   build from uncommitted changes (the artifacts are then not a commit's)
  --compare DIR   after building, report every artifact that differs from DIR's
  --out DIR       where the artifacts go [default: target/dist]";

pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    if !o.test_only {
        build(&o)?;
    }
    if o.test {
        // A full dist also builds a wheel from its sdist.
        dist_test::run(&o.out, o.targets.is_empty(), o.pytest)?;
    }
    sums::verify(&o.out, None)?;
    crate::headers::verify_dir(&o.out)?;
    if let Some(other) = &o.compare {
        sums::compare(&o.out, other)?;
    }
    eprintln!("xtask: dist ready in {}", o.out.display());
    Ok(())
}

fn build(o: &Options) -> Result<(), String> {
    if !o.allow_dirty && !output(Command::new("git").args(["status", "--porcelain"]))?.trim().is_empty() {
        return Err("dist: the work tree has uncommitted changes: commit them, or pass --allow-dirty".into());
    }
    let wanted = |t: &str| o.targets.is_empty() || o.targets.iter().any(|w| w == t);
    if let Some(unknown) = o.targets.iter().find(|t| !CLI_TARGETS.iter().any(|(c, _)| c == t)) {
        return Err(format!("dist: {unknown} is not a release target ({HELP})"));
    }
    let cli: Vec<(&str, &str)> = CLI_TARGETS.iter().copied().filter(|(t, _)| wanted(t)).collect();
    let wheels: Vec<&str> = WHEEL_TARGETS.iter().copied().filter(|t| wanted(t)).collect();
    let mut rust_targets: Vec<&str> = cli.iter().map(|(t, _)| *t).chain(wheels.iter().copied()).collect();
    rust_targets.sort_unstable();
    rust_targets.dedup();
    tools::install(&rust_targets)?;
    if rust_targets.contains(&crate::wine::WINDOWS) {
        // mingw-w64 builds it, Wine runs it in the tests.
        crate::wine::setup()?;
    }

    let _ = std::fs::remove_dir_all(&o.out);
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    let env = BuildEnv::new()?;
    let version = workspace_version()?;
    for (target, zig) in &cli {
        build_cli(&env, &version, target, zig, &o.out)?;
    }
    for target in &wheels {
        build_wheel(&env, target, &o.out)?;
    }
    build_sdist(&env, &o.out)?;
    build_crates(&env, o.allow_dirty, &o.out)?;
    let key = sums::signing_key(o.signing_key.as_deref())?;
    sums::write(&o.out, &key)
}

/// The environment every build of the dist runs in.
#[derive(Debug)]
struct BuildEnv {
    vars: Vec<(String, std::ffi::OsString)>,
}

impl BuildEnv {
    fn new() -> Result<BuildEnv, String> {
        let root = root();
        let cargo_home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"));
        // The commit's time: every run from one commit stamps the same.
        let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(e) => e,
            Err(_) => output(Command::new("git").args(["log", "-1", "--format=%ct"]))?.trim().to_string(),
        };
        let remap =
            |flag: &str| format!("{flag}{}=/deathtensors {flag}{}=/cargo", root.display(), cargo_home.display());
        let vars = vec![
            ("SOURCE_DATE_EPOCH".to_string(), epoch.into()),
            ("RUSTFLAGS".to_string(), remap("--remap-path-prefix=").into()),
            ("CFLAGS".to_string(), remap("-ffile-prefix-map=").into()),
            ("CARGO_TARGET_DIR".to_string(), root.join("target/dist-build").into()),
            ("PATH".to_string(), tools::path_env()),
            ("VIRTUAL_ENV".to_string(), tools::venv().into()),
        ];
        Ok(BuildEnv { vars })
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(program);
        // Flags of the caller's environment would change the bytes.
        for var in ["CARGO_ENCODED_RUSTFLAGS", "CARGO_BUILD_RUSTFLAGS", "CXXFLAGS"] {
            c.env_remove(var);
        }
        c.envs(self.vars.iter().map(|(k, v)| (k, v)));
        c
    }

    fn epoch(&self) -> &std::ffi::OsStr {
        &self.vars[0].1
    }
}

/// Where the CLIs are built: not the wheels' target directory. cargo-zigbuild
/// and maturin's own zig each link through a wrapper of their own, and
/// cargo counts the linker in every crate's fingerprint: in one directory
/// each build would redo every crate the other built (the wheel that
/// `cargo xtask test` builds, then the CLI, then the wheel again, in CI).
const CLI_TARGET_DIR: &str = "target/dist-build-cli";

fn build_cli(env: &BuildEnv, version: &str, target: &str, zig: &str, out: &Path) -> Result<(), String> {
    let windows = target == crate::wine::WINDOWS;
    let mut build = if windows {
        let mut c = env.command(cargo_bin());
        c.args(["build", "--locked", "--profile", "dist", "-p", "deathtensors-cli", "--target", target]);
        c
    } else {
        let mut c = env.command(tools::bin("cargo-zigbuild"));
        c.args(["zigbuild", "--locked", "--profile", "dist", "-p", "deathtensors-cli", "--target", zig]);
        c
    };
    exec(macos_env(&mut build, target)?.env("CARGO_TARGET_DIR", root().join(CLI_TARGET_DIR)))?;
    let exe = if windows { "deathtensors.exe" } else { "deathtensors" };
    let binary = root().join(CLI_TARGET_DIR).join(target).join("dist").join(exe);
    let name = format!("deathtensors-{version}-{target}");
    let stage = root().join("target/dist-stage").join(&name);
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).map_err(|e| format!("{}: {e}", stage.display()))?;
    let mut files = vec![(binary, exe, 0o755)];
    for doc in ["README.md", "LICENSE", "CHANGELOG.md"] {
        files.push((root().join(doc), doc, 0o644));
    }
    for (from, to, mode) in files {
        let dest = stage.join(to);
        std::fs::copy(&from, &dest).map_err(|e| format!("{}: {e}", from.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode)).map_err(|e| e.to_string())?;
    }
    if windows {
        return zip(env, &stage, &out.join(format!("{name}.zip")));
    }
    let archive = out.join(format!("{name}.tar.gz"));
    let mtime = format!("--mtime=@{}", env.epoch().to_string_lossy());
    exec(
        env.command("tar")
            .args(["--sort=name", &mtime, "--owner=0", "--group=0", "--numeric-owner", "--format=gnu"])
            .args(["--use-compress-program=gzip -9n", "-cf"])
            .arg(&archive)
            .arg("-C")
            .arg(stage.parent().expect("stage has a parent"))
            .arg(&name),
    )
}

/// A `.zip` of the folder `stage` (the folder itself at its top), as
/// reproducible as the `.tar.gz`s: sorted names, the commit's time, no
/// owners (Python's zipfile: no zip tool is needed).
fn zip(env: &BuildEnv, stage: &Path, archive: &Path) -> Result<(), String> {
    let script = "import os, sys, time, zipfile\n\
                  stage, archive, epoch = sys.argv[1], sys.argv[2], max(int(sys.argv[3]), 315532800)\n\
                  top = os.path.basename(stage)\n\
                  stamp = time.gmtime(epoch)[:6]\n\
                  with zipfile.ZipFile(archive, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as z:\n    \
                      for name in sorted(os.listdir(stage)):\n        \
                          info = zipfile.ZipInfo(top + '/' + name, stamp)\n        \
                          info.external_attr = (0o100755 if name.endswith('.exe') else 0o100644) << 16\n        \
                          info.compress_type = zipfile.ZIP_DEFLATED\n        \
                          z.writestr(info, open(os.path.join(stage, name), 'rb').read())\n";
    exec(env.command(crate::python::base_python()).args(["-c", script]).arg(stage).arg(archive).arg(env.epoch()))
}

/// macOS builds: the oldest macOS they run on, and the stand-in SDK that
/// links them (`macos.rs`). Other targets: `c` as it is.
fn macos_env<'c>(c: &'c mut Command, target: &str) -> Result<&'c mut Command, String> {
    let Some((crate::headers::Os::Mac(major, minor), _)) = crate::headers::target_facts(target) else {
        return Ok(c);
    };
    Ok(c.env("MACOSX_DEPLOYMENT_TARGET", format!("{major}.{minor}")).env("SDKROOT", crate::macos::sdk()?))
}

/// The host's wheel, built exactly as `dist` builds it (same profile,
/// flags, target directory and zig), into `out`: `cargo xtask test` runs
/// pytest on it, and the `dist` that follows finds it built. The work tree
/// may be dirty: it is for the tests, not a release. False, having built
/// nothing, on a host `dist` builds no wheel for (only Linux x86_64 and
/// aarch64).
pub fn host_wheel(out: &Path) -> Result<bool, String> {
    let host = host();
    if !WHEEL_TARGETS.contains(&host.as_str()) {
        return Ok(false);
    }
    tools::install(&[&host])?;
    build_wheel(&BuildEnv::new()?, &host, out)?;
    Ok(true)
}

fn build_wheel(env: &BuildEnv, target: &str, out: &Path) -> Result<(), String> {
    let mut c = env.command(tools::bin("maturin"));
    c.args(["build", "--locked", "--profile", "dist", "--target", target]);
    if target.contains("-linux-") {
        c.args(["--zig", "--compatibility", MANYLINUX, "--auditwheel", "check"]);
    } else if target.ends_with("-apple-darwin") {
        // The platform tag is MACOSX_DEPLOYMENT_TARGET's (macos_env).
        c.arg("--zig");
    }
    // Windows: mingw-w64 links, against the import library of python3.dll
    // that pyo3 generates (its generate-import-lib feature).
    c.args(["--quiet", "-m", "bindings/python/Cargo.toml", "-o"]).arg(out);
    exec(macos_env(&mut c, target)?)
}

fn build_sdist(env: &BuildEnv, out: &Path) -> Result<(), String> {
    exec(env.command(tools::bin("maturin")).args(["sdist", "-m", "bindings/python/Cargo.toml", "-o"]).arg(out))
}

/// The `.crate` of every published crate (`cargo package`, all at once so
/// that each finds the others in a local registry). They are built and
/// tested by CI and by `release` (`cargo publish --dry-run`), so not here.
fn build_crates(env: &BuildEnv, allow_dirty: bool, out: &Path) -> Result<(), String> {
    let crates = crate::release::published_crates()?;
    let mut c = env.command(cargo_bin());
    c.args(["package", "--locked", "--no-verify"]);
    if allow_dirty {
        c.arg("--allow-dirty");
    }
    for name in &crates {
        c.args(["-p", name]);
    }
    exec(&mut c)?;
    let version = workspace_version()?;
    for name in &crates {
        let file = format!("{name}-{version}.crate");
        let from = root().join("target/dist-build/package").join(&file);
        std::fs::copy(&from, out.join(&file)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    Ok(())
}
