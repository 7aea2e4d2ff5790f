//! Tests of what `dist` built, not only that it built: each CLI runs a
//! round trip on the fixtures (aarch64 ones under qemu-user), each wheel
//! installs into a fresh venv and reads every fixture (aarch64 under
//! qemu-user with an arm64 CPython), the host's wheel runs the pytest suite,
//! and the sdist and crates hold what a build from them needs.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use crate::headers::MANYLINUX;
use crate::util::{exec, host, output, root, workspace_version};
use crate::{python, tools};

/// Tests every artifact in `dist`; with `from_sdist`, also builds a wheel
/// from the sdist (a release build: minutes) and smoke-tests it; with
/// `pytest`, the host's wheel also runs the whole pytest suite (CI runs it
/// once, in `cargo xtask test`, and leaves it out here).
pub fn run(dist: &Path, from_sdist: bool, pytest: bool) -> Result<(), String> {
    let version = workspace_version()?;
    let work = root().join("target/dist-test");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let mut names: Vec<String> = std::fs::read_dir(dist)
        .map_err(|e| format!("{}: {e}", dist.display()))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut tested = 0;
    for name in &names {
        let path = dist.join(name);
        let cli = name.strip_prefix(&format!("deathtensors-{version}-"));
        if let Some(target) = cli.and_then(|s| s.strip_suffix(".zip")) {
            test_windows_cli(&path, target, &version, &work)?;
        } else if let Some(target) = cli.and_then(|s| s.strip_suffix(".tar.gz")) {
            if target.ends_with("-apple-darwin") {
                // Nothing runs a Mac binary here: its header is checked
                // (headers.rs), its run is the macOS runners' (.github).
                eprintln!("xtask: {name}: not run here (macOS)");
            } else {
                test_cli(&path, target, &version, &work)?;
            }
        } else if name.ends_with(".whl") {
            test_wheel(&path, name, &version, &work, pytest)?;
        } else if name == &format!("deathtensors-{version}.tar.gz") {
            test_sdist(&path, &version)?;
            if from_sdist {
                wheel_from_sdist(&path, &version, &work)?;
            }
        } else if name.ends_with(".crate") {
            test_crate(&path, name)?;
        } else {
            continue;
        }
        tested += 1;
    }
    eprintln!("xtask: {tested} artifacts tested");
    Ok(())
}

/// How to run a binary of `target` here: directly, or under qemu-user.
fn runner(target: &str) -> Result<Vec<OsString>, String> {
    let arch = target.split('-').next().unwrap_or_default();
    let host_arch = host();
    if host_arch.starts_with(arch) {
        return Ok(vec![]);
    }
    if arch != "aarch64" {
        return Err(format!("no way to run {target} binaries on {host_arch}"));
    }
    tools::qemu()?;
    Ok(vec!["qemu-aarch64".into(), "-L".into(), tools::ARM64_GLIBC.into()])
}

fn test_cli(archive: &Path, target: &str, version: &str, work: &Path) -> Result<(), String> {
    let dir = work.join(target);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    exec(Command::new("tar").arg("-xzf").arg(archive).arg("-C").arg(&dir))?;
    let top = dir.join(format!("deathtensors-{version}-{target}"));
    for doc in ["README.md", "LICENSE", "CHANGELOG.md"] {
        if !top.join(doc).is_file() {
            return Err(format!("{}: no {doc}", archive.display()));
        }
    }
    let binary = top.join("deathtensors");
    let elf = std::fs::read(&binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let (machine, interp) = elf_facts(&elf).ok_or_else(|| format!("{}: not a 64-bit ELF", binary.display()))?;
    let want = if target.starts_with("aarch64") { 183 } else { 62 };
    if machine != want {
        return Err(format!("{}: ELF machine {machine}, want {want} for {target}", binary.display()));
    }
    if target.ends_with("musl") && interp {
        return Err(format!("{}: a musl build with a dynamic loader: not static", binary.display()));
    }
    let run = runner(target)?;
    let cli = |args: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut c = match run.split_first() {
            Some((q, rest)) => {
                let mut c = Command::new(q);
                c.args(rest).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        c.args(args.iter().map(|a| a.as_ref()));
        c
    };
    let printed = output(&mut cli(&[&"--version"]))?;
    if printed.trim() != format!("deathtensors {version}") {
        return Err(format!("{target}: --version printed {printed:?}"));
    }
    // A round trip through deathtensors, checked three ways.
    let src = root().join("testdata/valid/safetensors-0.8.0/all_dtypes.safetensors");
    let (dt, back) = (dir.join("all_dtypes.dt"), dir.join("back.safetensors"));
    exec(&mut cli(&[&"convert", &src, &dt, &"--checksum"]))?;
    exec(&mut cli(&[&"verify", &dt]))?;
    exec(&mut cli(&[&"convert", &dt, &back]))?;
    exec(&mut cli(&[&"diff", &src, &back]))?;
    let listing = output(&mut cli(&[&"inspect", &dt]))?;
    if !listing.contains("u64") || !listing.contains("bf16") && !listing.contains("BF16") {
        return Err(format!("{target}: inspect does not list the tensors:\n{listing}"));
    }
    // A flipped data byte must fail `verify`.
    let mut bytes = std::fs::read(&dt).map_err(|e| e.to_string())?;
    let at = bytes.len() - 40;
    bytes[at] ^= 0x55;
    let bad = dir.join("flipped.dt");
    std::fs::write(&bad, &bytes).map_err(|e| e.to_string())?;
    let status = cli(&[&"verify", &bad]).output().map_err(|e| e.to_string())?.status;
    if status.success() {
        return Err(format!("{target}: verify accepted a file with a flipped byte"));
    }
    eprintln!("xtask: {target} CLI: version, convert, verify, diff, inspect and a refused flip ok");
    Ok(())
}

/// The ELF machine and whether the file names a dynamic loader (PT_INTERP).
fn elf_facts(elf: &[u8]) -> Option<(u16, bool)> {
    if elf.get(..5)? != b"\x7fELF\x02" || elf[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    let machine = u16_at(0x12)?;
    let (phoff, phentsize, phnum) = (usize::try_from(u64_at(0x20)?).ok()?, usize::from(u16_at(0x36)?), u16_at(0x38)?);
    let mut interp = false;
    for i in 0..usize::from(phnum) {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        interp |= u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?) == 3;
    }
    Some((machine, interp))
}

/// The Windows CLI, under Wine (`wine.rs`'s prefix), on `C:\` paths written
/// with backslashes: a round trip safetensors -> deathtensors ->
/// safetensors that gives the input's bytes back, verify, inspect, a
/// refused flipped byte, encrypt and decrypt, and the in-place rewrites
/// (sign, meta --set, convert onto itself), each checked by a verify.
fn test_windows_cli(archive: &Path, target: &str, version: &str, work: &Path) -> Result<(), String> {
    crate::wine::setup()?;
    let top = format!("deathtensors-{version}-{target}");
    let members = crate::headers::zip_members(archive, "")?;
    for doc in ["README.md", "LICENSE", "CHANGELOG.md", "deathtensors.exe"] {
        if !members.iter().any(|(n, _)| *n == format!("{top}/{doc}")) {
            return Err(format!("{}: no {top}/{doc}", archive.display()));
        }
    }
    // C:\dt-dist is this folder of the Wine prefix.
    let drive = crate::wine::prefix().join("drive_c/dt-dist");
    let _ = std::fs::remove_dir_all(&drive);
    std::fs::create_dir_all(&drive).map_err(|e| format!("{}: {e}", drive.display()))?;
    for (name, bytes) in &members {
        let file = name.rsplit('/').next().unwrap_or(name);
        std::fs::write(drive.join(file), bytes).map_err(|e| format!("{}: {e}", drive.join(file).display()))?;
    }
    let src = root().join("testdata/valid/safetensors-0.8.0/all_dtypes.safetensors");
    let input = std::fs::read(&src).map_err(|e| format!("{}: {e}", src.display()))?;
    std::fs::write(drive.join("in.safetensors"), &input).map_err(|e| e.to_string())?;
    let c = |file: &str| format!("C:\\dt-dist\\{file}");
    let cli = |args: &[&str]| {
        let mut cmd = Command::new(crate::wine::WINE);
        cmd.arg(c("deathtensors.exe")).args(args).envs(crate::wine::env());
        cmd
    };
    let printed = output(&mut cli(&["--version"]))?;
    if printed.trim() != format!("deathtensors {version}") {
        return Err(format!("{target}: --version printed {printed:?}"));
    }
    let (inp, dt, back) = (c("in.safetensors"), c("m.dt"), c("back.safetensors"));
    exec(&mut cli(&["convert", &inp, &dt, "--checksum"]))?;
    exec(&mut cli(&["verify", &dt]))?;
    exec(&mut cli(&["convert", &dt, &back]))?;
    if std::fs::read(drive.join("back.safetensors")).map_err(|e| e.to_string())? != input {
        return Err(format!("{target}: safetensors -> deathtensors -> safetensors changed the bytes"));
    }
    let listing = output(&mut cli(&["inspect", &dt]))?;
    if !listing.contains("u64") || !listing.contains("bf16") && !listing.contains("BF16") {
        return Err(format!("{target}: inspect does not list the tensors:\n{listing}"));
    }
    let mut bytes = std::fs::read(drive.join("m.dt")).map_err(|e| e.to_string())?;
    let at = bytes.len() - 40;
    bytes[at] ^= 0x55;
    std::fs::write(drive.join("flipped.dt"), &bytes).map_err(|e| e.to_string())?;
    if cli(&["verify", &c("flipped.dt")]).output().map_err(|e| e.to_string())?.status.success() {
        return Err(format!("{target}: verify accepted a file with a flipped byte"));
    }
    // Encrypted and decrypted: the same tensors again.
    let (key, enc, dec, dec_st) = (c("k.jwk"), c("enc.dt"), c("dec.dt"), c("dec.safetensors"));
    exec(&mut cli(&["keygen", "--type", "symmetric", "--kid", "k", "--out", &key]))?;
    exec(&mut cli(&["encrypt", &dt, &enc, "--recipient", &key]))?;
    exec(&mut cli(&["decrypt", &enc, &dec, "--key", &key]))?;
    exec(&mut cli(&["convert", &dec, &dec_st]))?;
    if std::fs::read(drive.join("dec.safetensors")).map_err(|e| e.to_string())? != input {
        return Err(format!("{target}: encrypt then decrypt changed the tensors"));
    }
    // In place: meta --set, convert onto itself, then sign (a signed file's
    // header is not rewritten by meta).
    exec(&mut cli(&["meta", &dt, "--set", "where=wine"]))?;
    exec(&mut cli(&["convert", &dt, &dt]))?;
    exec(&mut cli(&["verify", &dt]))?;
    let (signer, public) = (c("s.jwk"), c("s.pub.jwk"));
    exec(&mut cli(&["keygen", "--type", "ed25519", "--out", &signer, "--public-out", &public]))?;
    exec(&mut cli(&["sign", "--with", &signer, &dt]))?;
    exec(&mut cli(&["verify", &dt, "--signer", &public]))?;
    let meta = output(&mut cli(&["meta", &dt]))?;
    if !meta.contains("wine") {
        return Err(format!("{target}: meta --set did not stay through the rewrites:\n{meta}"));
    }
    let leftovers: Vec<String> = std::fs::read_dir(&drive)
        .map_err(|e| e.to_string())?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with('.'))
        .collect();
    if !leftovers.is_empty() {
        return Err(format!("{target}: temp files left beside the rewritten file: {leftovers:?}"));
    }
    let _ = std::fs::remove_dir_all(&drive);
    let _ = std::fs::remove_dir_all(work.join(target));
    eprintln!(
        "xtask: {target} CLI under Wine, C:\\ paths: version, a byte-identical round trip, verify, inspect, \
         a refused flip, encrypt/decrypt, sign, meta --set and convert in place ok"
    );
    Ok(())
}

fn test_wheel(wheel: &Path, name: &str, version: &str, work: &Path, pytest: bool) -> Result<(), String> {
    if !name.contains("manylinux") {
        // Tags and the module's header are checked (headers.rs); no Python
        // of macOS or Windows runs here: the runners' pytest (.github).
        eprintln!("xtask: {name}: not imported here (no Python for its system)");
        return Ok(());
    }
    let arch = if name.contains("aarch64") { "aarch64" } else { "x86_64" };
    // `<name>-<version>-cp311-abi3-<platform tags>.whl`, the platform tags
    // being glibc 2.17's two names, in either order.
    let platforms = name
        .strip_prefix(&format!("deathtensors-{version}-cp311-abi3-"))
        .and_then(|r| r.strip_suffix(".whl"))
        .map(|p| {
            let mut tags: Vec<&str> = p.split('.').collect();
            tags.sort_unstable();
            tags
        });
    let want = [format!("{MANYLINUX}_{arch}"), format!("manylinux_2_17_{arch}")];
    if platforms.is_none_or(|tags| tags != want) {
        return Err(format!("wheel {name}: want an abi3 cp311 wheel tagged {} for {version}", want.join(".")));
    }
    let valid = root().join("testdata/valid");
    let smoke = root().join("xtask/assets/wheel_smoke.py");
    let venv = work.join(format!("venv-{arch}"));
    let smoke_work = work.join(format!("wheel-{arch}"));
    let site = venv.join("lib/python3.11/site-packages");
    if host().starts_with(arch) {
        exec(Command::new(python::base_python()).args(["-m", "venv"]).arg(&venv))?;
        let py = venv.join("bin/python");
        exec(Command::new(&py).args(["-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]).arg(wheel))?;
        exec(Command::new(&py).arg(&smoke).arg(&valid).arg(&smoke_work).arg(version))?;
        // The README's Python examples as a new user runs them with the wheel
        // alone (no torch, no numpy): those that need none run; pytest is the
        // only other package (from PyPI).
        exec(Command::new(&py).args(["-m", "pip", "install", "--quiet", "pytest"]))?;
        exec(
            Command::new(&py)
                .args(["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
                .arg(root().join("bindings/python/tests/test_readme.py"))
                .current_dir(work),
        )?;
        if pytest {
            // The pytest suite, against this wheel: the test dependencies
            // come from the project's .venv, after the wheel on sys.path.
            python::setup()?;
            let deps = output(
                Command::new(python::python())
                    .args(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]),
            )?;
            std::fs::write(site.join("zz_test_deps.pth"), deps.trim()).map_err(|e| e.to_string())?;
            let ours = "import deathtensors, os, sys; p = os.path.realpath(deathtensors.__file__); \
                        assert p.startswith(os.path.realpath(sys.prefix)), p";
            exec(Command::new(&py).args(["-c", ours]))?;
            exec(
                Command::new(&py)
                    // The slowest tests are listed, so that the next slow one is seen.
                    .args(["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--durations=15"])
                    .arg(root().join("bindings/python/tests")),
            )?;
        }
    } else {
        // An arm64 CPython under qemu-user: a venv of its own, the wheel put
        // in it by the host's pip for the wheel's platform.
        tools::qemu()?;
        let arm = tools::arm64_root()?;
        let qemu = |c: &mut Command| {
            let mut q = Command::new("qemu-aarch64");
            q.arg("-L").arg(&arm).arg(c.get_program()).args(c.get_args());
            q
        };
        let arm_python = arm.join("usr/bin/python3.11");
        exec(&mut qemu(Command::new(&arm_python).args(["-m", "venv", "--without-pip"]).arg(&venv)))?;
        exec(
            Command::new(python::base_python())
                .args(["-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--only-binary=:all:"])
                .args([
                    "--platform",
                    &format!("{MANYLINUX}_{arch}"),
                    "--python-version",
                    "3.11",
                    "--implementation",
                    "cp",
                ])
                .arg("--target")
                .arg(&site)
                .arg(wheel),
        )?;
        exec(&mut qemu(Command::new(venv.join("bin/python")).arg(&smoke).arg(&valid).arg(&smoke_work).arg(version)))?;
    }
    eprintln!("xtask: {name}: installed in a fresh venv, imported, fixtures read");
    Ok(())
}

fn archive_listing(path: &Path) -> Result<Vec<String>, String> {
    Ok(output(Command::new("tar").arg("-tzf").arg(path))?.lines().map(str::to_string).collect())
}

/// The sdist builds the wheel from itself: it must carry every crate the
/// extension depends on.
fn test_sdist(path: &Path, version: &str) -> Result<(), String> {
    let files = archive_listing(path)?;
    let top = format!("deathtensors-{version}");
    let mut want: Vec<String> =
        ["pyproject.toml", "Cargo.toml", "Cargo.lock", "PKG-INFO"].iter().map(|f| format!("{top}/{f}")).collect();
    for krate in crate::release::published_crates()? {
        let dir = krate.strip_prefix("deathtensors-").unwrap_or(&krate);
        if dir != "cli" {
            want.push(format!("{top}/crates/{dir}/Cargo.toml"));
            want.push(format!("{top}/crates/{dir}/src/lib.rs"));
        }
    }
    want.push(format!("{top}/bindings/python/src/lib.rs"));
    want.push(format!("{top}/py_src/deathtensors/__init__.py"));
    for w in &want {
        if !files.contains(w) {
            return Err(format!("{}: no {w}", path.display()));
        }
    }
    eprintln!("xtask: sdist: the {} files a build needs are there ({} files)", want.len(), files.len());
    Ok(())
}

/// `pip wheel` of the sdist, in a venv of its own with maturin, and the
/// smoke test of what it built: the sdist is complete.
///
/// The check is that the sdist holds everything a build needs, not how fast
/// its wheel runs: it builds with cargo's `dev` profile, into the
/// workspace's own `target/` (as `cargo test` did: the dependencies are
/// compiled already), where a release build in a directory of its own
/// compiled every dependency a third time (minutes on two cores).
fn wheel_from_sdist(sdist: &Path, version: &str, work: &Path) -> Result<(), String> {
    let venv = work.join("venv-sdist");
    exec(Command::new(python::base_python()).args(["-m", "venv"]).arg(&venv))?;
    let py = venv.join("bin/python");
    let out = work.join("wheel-from-sdist");
    exec(
        Command::new(&py)
            .args(["-m", "pip", "wheel", "--quiet", "--no-deps", "-w"])
            .arg(&out)
            .arg(sdist)
            .env("MATURIN_PEP517_ARGS", "--profile dev")
            .env("CARGO_TARGET_DIR", root().join("target")),
    )?;
    let wheel = crate::util::wheel_in(&out, "").map_err(|e| format!("pip built no wheel from the sdist: {e}"))?;
    exec(Command::new(&py).args(["-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]).arg(&wheel))?;
    let smoke = root().join("xtask/assets/wheel_smoke.py");
    exec(Command::new(&py).arg(smoke).arg(root().join("testdata/valid")).arg(work.join("wheel-sdist")).arg(version))?;
    eprintln!("xtask: the sdist builds a wheel that passes the smoke test");
    Ok(())
}

fn test_crate(path: &Path, name: &str) -> Result<(), String> {
    let files = archive_listing(path)?;
    let top = name.trim_end_matches(".crate");
    for w in ["Cargo.toml", "Cargo.toml.orig", "README.md", "LICENSE"] {
        if !files.contains(&format!("{top}/{w}")) {
            return Err(format!("{}: no {w}", path.display()));
        }
    }
    if !files.iter().any(|f| f == &format!("{top}/src/lib.rs") || f == &format!("{top}/src/main.rs")) {
        return Err(format!("{}: no src/lib.rs or src/main.rs", path.display()));
    }
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    // crates.io refuses crates over 10 MB.
    if size > 10 << 20 {
        return Err(format!("{}: {size} bytes, over crates.io's 10 MB", path.display()));
    }
    eprintln!("xtask: {name}: {} files, {size} bytes", files.len());
    Ok(())
}
