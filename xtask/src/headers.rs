//! What each release artifact is built for, read from its bytes: the CLI's
//! binary header (ELF, PE or Mach-O: machine, and the macOS version it
//! needs) and a wheel's `WHEEL` tags and extension module header, checked
//! against the target its name gives. `cargo xtask verify-dist` runs it on
//! every artifact, so a wheel tagged for one system that holds a library of
//! another is caught wherever the dist is checked.

use std::path::Path;
use std::process::Command;

/// The wheels' platform tag (glibc 2.17).
pub const MANYLINUX: &str = "manylinux2014";

/// The systems a release binary is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Os {
    Linux,
    Windows,
    /// macOS, with the oldest version it runs on (major, minor).
    Mac(u32, u32),
}

/// What a target's binaries must be: system and CPU (`x86_64`, `aarch64`).
pub fn target_facts(target: &str) -> Option<(Os, &'static str)> {
    let arch = if target.starts_with("x86_64-") {
        "x86_64"
    } else if target.starts_with("aarch64-") {
        "aarch64"
    } else {
        return None;
    };
    let os = if target.contains("-linux-") {
        Os::Linux
    } else if target.ends_with("-windows-gnu") {
        Os::Windows
    } else if target.ends_with("-apple-darwin") {
        let (major, minor) = macos_min(arch);
        Os::Mac(major, minor)
    } else {
        return None;
    };
    Some((os, arch))
}

/// The oldest macOS our builds support: Rust's minimum for x86_64 (10.12),
/// and 11.0, the first with Apple silicon.
pub fn macos_min(arch: &str) -> (u32, u32) {
    if arch == "aarch64" {
        (11, 0)
    } else {
        (10, 12)
    }
}

/// The wheel platform tag of a target (macOS and Windows; Linux wheels
/// carry manylinux's two tags, checked by `dist_test.rs`).
pub fn wheel_platform(os: Os, arch: &str) -> Option<String> {
    match os {
        Os::Linux => None,
        Os::Windows => (arch == "x86_64").then(|| "win_amd64".to_string()),
        Os::Mac(major, minor) => {
            Some(format!("macosx_{major}_{minor}_{}", if arch == "aarch64" { "arm64" } else { "x86_64" }))
        }
    }
}

/// Checks that `binary` (a file's bytes) is an executable or library for
/// `os` on `arch`; `what` names it in errors.
pub fn check_binary(what: &str, binary: &[u8], os: Os, arch: &str) -> Result<(), String> {
    match os {
        Os::Linux => {
            let machine = (binary.get(..5) == Some(b"\x7fELF\x02".as_slice()))
                .then(|| binary.get(0x12..0x14).map(|m| u16::from_le_bytes([m[0], m[1]])))
                .flatten()
                .ok_or(format!("{what}: not a 64-bit ELF file"))?;
            let want = if arch == "aarch64" { 183 } else { 62 };
            (machine == want).then_some(()).ok_or(format!("{what}: ELF machine {machine}, want {want} ({arch})"))
        }
        Os::Windows => {
            let machine = pe_machine(binary).ok_or(format!("{what}: not a PE file (MZ, PE\\0\\0)"))?;
            let want = if arch == "aarch64" { 0xaa64 } else { 0x8664 };
            (machine == want).then_some(()).ok_or(format!("{what}: PE machine {machine:#x}, want {want:#x} ({arch})"))
        }
        Os::Mac(major, minor) => {
            let (cpu, minos) = macho_facts(binary).ok_or(format!("{what}: not a 64-bit little-endian Mach-O file"))?;
            let want = if arch == "aarch64" { 0x0100_000c } else { 0x0100_0007 };
            if cpu != want {
                return Err(format!("{what}: Mach-O CPU type {cpu:#x}, want {want:#x} ({arch})"));
            }
            let minos = minos.ok_or(format!("{what}: no LC_BUILD_VERSION or LC_VERSION_MIN_MACOSX"))?;
            if minos != (major, minor) {
                return Err(format!(
                    "{what}: needs macOS {}.{}, the wheel and docs say {major}.{minor}",
                    minos.0, minos.1
                ));
            }
            Ok(())
        }
    }
}

/// A PE file's machine field.
fn pe_machine(b: &[u8]) -> Option<u16> {
    if b.get(..2)? != b"MZ" {
        return None;
    }
    let pe = u32::from_le_bytes(b.get(0x3c..0x40)?.try_into().ok()?) as usize;
    if b.get(pe..pe.checked_add(4)?)? != b"PE\0\0" {
        return None;
    }
    Some(u16::from_le_bytes(b.get(pe + 4..pe + 6)?.try_into().ok()?))
}

/// A 64-bit Mach-O file's CPU type and the macOS version it needs
/// (`LC_BUILD_VERSION`'s or `LC_VERSION_MIN_MACOSX`'s minos).
fn macho_facts(b: &[u8]) -> Option<(u32, Option<(u32, u32)>)> {
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o.checked_add(4)?)?.try_into().ok()?));
    if u32_at(0)? != 0xfeed_facf {
        return None;
    }
    let (cpu, ncmds) = (u32_at(4)?, u32_at(16)?);
    let mut at = 32usize;
    let mut minos = None;
    for _ in 0..ncmds {
        let (cmd, size) = (u32_at(at)?, u32_at(at + 4)? as usize);
        // LC_BUILD_VERSION: platform, then minos; LC_VERSION_MIN_MACOSX: version.
        let version = match cmd {
            0x32 if u32_at(at + 8)? == 1 => Some(u32_at(at + 12)?),
            0x24 => Some(u32_at(at + 8)?),
            _ => None,
        };
        if let Some(v) = version {
            minos = Some((v >> 16, (v >> 8) & 0xff));
        }
        at = at.checked_add(size.max(8))?;
    }
    Some((cpu, minos))
}

/// The bytes of the members of a zip archive whose names satisfy `pick`
/// (read with Python's zipfile: xtask has no zip reader of its own).
pub fn zip_members(archive: &Path, pick: &str) -> Result<Vec<(String, Vec<u8>)>, String> {
    // Members as `name\0length\0bytes`, one after the other.
    let script = "import sys, zipfile, re\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  for n in sorted(z.namelist()):\n    \
                      if re.search(sys.argv[2], n):\n        \
                          d = z.read(n); sys.stdout.buffer.write(n.encode() + b'\\0' + str(len(d)).encode() + b'\\0' + d)\n";
    let out = Command::new(crate::python::base_python())
        .args(["-c", script])
        .arg(archive)
        .arg(pick)
        .output()
        .map_err(|e| format!("cannot run python: {e}"))?;
    if !out.status.success() {
        return Err(format!("{}: not a zip archive: {}", archive.display(), String::from_utf8_lossy(&out.stderr)));
    }
    let mut rest = &out.stdout[..];
    let mut members = Vec::new();
    while !rest.is_empty() {
        let field =
            |r: &[u8]| r.iter().position(|&c| c == 0).map(|i| (String::from_utf8_lossy(&r[..i]).into_owned(), i));
        let (name, i) = field(rest).ok_or("a malformed member listing")?;
        rest = &rest[i + 1..];
        let (len, j) = field(rest).ok_or("a malformed member listing")?;
        let len: usize = len.parse().map_err(|_| "a malformed member length")?;
        rest = &rest[j + 1..];
        let data = rest.get(..len).ok_or("a truncated member")?.to_vec();
        rest = &rest[len..];
        members.push((name, data));
    }
    Ok(members)
}

/// Checks a dist artifact named `name` in `dir` against the target its name
/// gives: the CLI archives' binaries and the wheels' tags and extension
/// modules. Other artifacts (sdist, crates) pass. Returns whether it checked.
pub fn check_artifact(dir: &Path, name: &str, version: &str) -> Result<bool, String> {
    let path = dir.join(name);
    let cli = name.strip_prefix(&format!("deathtensors-{version}-")).filter(|_| !name.ends_with(".whl"));
    if let Some(target) = cli {
        let (target, zip) = match (target.strip_suffix(".zip"), target.strip_suffix(".tar.gz")) {
            (Some(t), _) => (t, true),
            (_, Some(t)) => (t, false),
            _ => return Ok(false),
        };
        let Some((os, arch)) = target_facts(target) else { return Ok(false) };
        let exe = if os == Os::Windows { "deathtensors.exe" } else { "deathtensors" };
        let member = format!("deathtensors-{version}-{target}/{exe}");
        let binary = if zip {
            let found = zip_members(&path, &format!("^{}$", member.replace('.', "\\.")))?;
            found.into_iter().next().map(|(_, d)| d).ok_or(format!("{name}: no {member}"))?
        } else {
            let out = Command::new("tar")
                .arg("-xzOf")
                .arg(&path)
                .arg(&member)
                .output()
                .map_err(|e| format!("cannot run tar: {e}"))?;
            if !out.status.success() {
                return Err(format!("{name}: no {member}"));
            }
            out.stdout
        };
        check_binary(&format!("{name}: {member}"), &binary, os, arch)?;
        return Ok(true);
    }
    if !name.ends_with(".whl") {
        return Ok(false);
    }
    // `deathtensors-<version>-cp311-abi3-<platforms>.whl`.
    let platforms = name
        .strip_prefix(&format!("deathtensors-{version}-cp311-abi3-"))
        .and_then(|r| r.strip_suffix(".whl"))
        .ok_or(format!("{name}: not an abi3 cp311 wheel of {version}"))?;
    let wheel = zip_members(&path, r"\.dist-info/WHEEL$")?;
    let (_, text) = wheel.first().ok_or(format!("{name}: no .dist-info/WHEEL"))?;
    let text = String::from_utf8_lossy(text);
    let mut tags: Vec<String> =
        text.lines().filter_map(|l| l.strip_prefix("Tag: ")).map(|t| t.trim().to_string()).collect();
    tags.sort();
    let mut want: Vec<String> = platforms.split('.').map(|p| format!("cp311-abi3-{p}")).collect();
    want.sort();
    if tags != want {
        return Err(format!("{name}: WHEEL's tags {tags:?} are not its name's {want:?}"));
    }
    if !text.lines().any(|l| l.trim() == "Root-Is-Purelib: false") {
        return Err(format!("{name}: WHEEL does not say Root-Is-Purelib: false"));
    }
    let (os, arch) = wheel_facts(platforms).ok_or(format!("{name}: unknown platform tags {platforms}"))?;
    if let Some(tag) = wheel_platform(os, arch) {
        if platforms != tag {
            return Err(format!("{name}: tagged {platforms}, want {tag}"));
        }
    }
    let modules = zip_members(&path, r"\.(so|pyd)$")?;
    if modules.is_empty() {
        return Err(format!("{name}: no extension module (.so, .pyd)"));
    }
    for (member, bytes) in &modules {
        check_binary(&format!("{name}: {member}"), bytes, os, arch)?;
    }
    Ok(true)
}

/// [`check_artifact`] on every file of `dir`: every CLI archive and wheel
/// must be checked (one of a target we cannot tell is an error).
pub fn verify_dir(dir: &Path) -> Result<(), String> {
    let version = crate::util::workspace_version()?;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    let mut checked = 0;
    for name in &names {
        let built = name.ends_with(".whl") || name.ends_with(".zip") || name.ends_with(".tar.gz");
        if check_artifact(dir, name, &version)? {
            checked += 1;
        } else if built && name != &format!("deathtensors-{version}.tar.gz") {
            return Err(format!("{}: an artifact of no known target", dir.join(name).display()));
        }
    }
    eprintln!("xtask: {checked} binaries and wheels are for the targets their names say");
    Ok(())
}

/// The system and CPU of a wheel's platform tags.
fn wheel_facts(platforms: &str) -> Option<(Os, &'static str)> {
    let arch = if platforms.ends_with("x86_64") || platforms == "win_amd64" {
        "x86_64"
    } else if platforms.ends_with("aarch64") || platforms.ends_with("arm64") {
        "aarch64"
    } else {
        return None;
    };
    if platforms.starts_with("manylinux") {
        Some((Os::Linux, arch))
    } else if platforms == "win_amd64" {
        Some((Os::Windows, arch))
    } else if platforms.starts_with("macosx_") {
        let (major, minor) = macos_min(arch);
        Some((Os::Mac(major, minor), arch))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_tags() {
        assert_eq!(target_facts("x86_64-pc-windows-gnu"), Some((Os::Windows, "x86_64")));
        assert_eq!(target_facts("aarch64-apple-darwin"), Some((Os::Mac(11, 0), "aarch64")));
        assert_eq!(wheel_platform(Os::Mac(10, 12), "x86_64").unwrap(), "macosx_10_12_x86_64");
        assert_eq!(wheel_platform(Os::Mac(11, 0), "aarch64").unwrap(), "macosx_11_0_arm64");
        assert_eq!(wheel_facts("manylinux2014_aarch64.manylinux_2_17_aarch64"), Some((Os::Linux, "aarch64")));
        assert_eq!(wheel_facts("win_amd64"), Some((Os::Windows, "x86_64")));
    }

    #[test]
    fn headers_are_told_apart() {
        // A minimal PE: MZ, e_lfanew = 0x40, PE\0\0, machine.
        let mut pe = vec![0u8; 0x48];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c] = 0x40;
        pe[0x40..0x44].copy_from_slice(b"PE\0\0");
        pe[0x44..0x46].copy_from_slice(&0x8664u16.to_le_bytes());
        check_binary("pe", &pe, Os::Windows, "x86_64").unwrap();
        assert!(check_binary("pe", &pe, Os::Windows, "aarch64").is_err());
        assert!(check_binary("pe", &pe, Os::Linux, "x86_64").is_err());
        // A Mach-O arm64 header with one LC_BUILD_VERSION (macOS 11.0).
        let mut m = Vec::new();
        for v in [0xfeed_facfu32, 0x0100_000c, 0, 6, 1, 24, 0, 0] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x32u32, 24, 1, 11 << 16, 0, 0] {
            m.extend_from_slice(&v.to_le_bytes());
        }
        check_binary("macho", &m, Os::Mac(11, 0), "aarch64").unwrap();
        assert!(check_binary("macho", &m, Os::Mac(10, 12), "x86_64").is_err());
        let err = check_binary("macho", &m, Os::Mac(10, 12), "aarch64").unwrap_err();
        assert!(err.contains("CPU type") || err.contains("macOS"), "{err}");
        assert!(check_binary("macho", &pe, Os::Mac(11, 0), "aarch64").is_err());
    }
}
