//! `SHA256SUMS` of a dist, its Ed25519 signature, and `cargo xtask
//! verify-dist`.
//!
//! `SHA256SUMS` is in `sha256sum`'s format (`sha256sum -c` checks it);
//! `SHA256SUMS.sig` is the raw 64-byte Ed25519 signature of its bytes, made
//! with deathtensors' own signing keys (JWK files of `deathtensors keygen
//! --type ed25519`); the public key is written beside it as a JWK and as
//! PEM, so `openssl pkeyutl -verify -pubin -inkey signing-key.pub.pem
//! -rawin -in SHA256SUMS -sigfile SHA256SUMS.sig` checks it too.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deathtensors_io::{KeyRing, SigningKey, VerifyingKey};

use crate::util::root;

pub const SUMS: &str = "SHA256SUMS";
pub const SIG: &str = "SHA256SUMS.sig";
pub const PUB_JWK: &str = "signing-key.pub.jwk";
pub const PUB_PEM: &str = "signing-key.pub.pem";

/// The files of a dist that are not artifacts.
const NOT_ARTIFACTS: &[&str] = &[SUMS, SIG, PUB_JWK, PUB_PEM];

/// The development key of unsigned builds (never committed: `target/`).
fn dev_key_path() -> PathBuf {
    root().join("target/dist-tools/dev-signing-key.jwk")
}

/// The key that signs the sums: `path`'s, or the development key (made
/// once, so that repeated runs sign alike).
pub fn signing_key(path: Option<&Path>) -> Result<Arc<SigningKey>, String> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let p = dev_key_path();
            if !p.exists() {
                let key = SigningKey::generate();
                let jwk = key.to_jwk(Some("deathtensors-dev-release"), true).to_string();
                write_private(&p, jwk.as_bytes())?;
            }
            eprintln!("xtask: signing with the development key {} (pass --signing-key for a release)", p.display());
            p
        }
    };
    let mut ring = KeyRing::new();
    ring.add_jwk_file(&path).map_err(|e| format!("signing key {}: {e}", path.display()))?;
    match ring.signing_keys() {
        [(_, key)] => Ok(key.clone()),
        [] => Err(format!("{} holds no Ed25519 secret key", path.display())),
        _ => Err(format!("{} holds several Ed25519 secret keys: give one", path.display())),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `SHA256SUMS` over every artifact in `dir`, its signature and the
/// public key.
pub fn write(dir: &Path, key: &SigningKey) -> Result<(), String> {
    let mut sums = String::new();
    for name in artifacts(dir)? {
        sums.push_str(&format!("{}  {name}\n", hex(&sha256_file(&dir.join(&name))?)));
    }
    let put = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).map_err(|e| format!("{name}: {e}"));
    put(SUMS, sums.as_bytes())?;
    put(SIG, &key.sign_detached(sums.as_bytes()))?;
    let public = key.verifying_key();
    put(PUB_JWK, format!("{}\n", public.to_jwk(None)).as_bytes())?;
    put(PUB_PEM, pem(&public).as_bytes())
}

/// The artifacts of `dir`, sorted by name.
fn artifacts(dir: &Path) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let name = entry.file_name().into_string().map_err(|n| format!("a file name that is not UTF-8: {n:?}"))?;
        if !entry.file_type().map_err(|e| e.to_string())?.is_file() {
            return Err(format!("{}: not a file", dir.join(&name).display()));
        }
        if !NOT_ARTIFACTS.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// `cargo xtask verify-dist [DIR] [--signer KEY.jwk]`.
pub fn run_verify(args: &[String]) -> Result<(), String> {
    let mut dir = root().join("target/dist");
    let mut signer = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--signer" => signer = Some(PathBuf::from(it.next().ok_or("--signer needs a key file")?)),
            s if !s.starts_with('-') => dir = PathBuf::from(s),
            other => return Err(format!("verify-dist: unexpected argument {other:?}")),
        }
    }
    verify(&dir, signer.as_deref())?;
    crate::headers::verify_dir(&dir)
}

/// Checks every artifact of `dir` against `SHA256SUMS`, that nothing else
/// is there, and the signature: by `signer`'s key, or by the key shipped in
/// `dir` (which shows the sums were not changed since signing, not who
/// signed them).
pub fn verify(dir: &Path, signer: Option<&Path>) -> Result<(), String> {
    let sums = std::fs::read(dir.join(SUMS)).map_err(|e| format!("{}: {e}", dir.join(SUMS).display()))?;
    let text = std::str::from_utf8(&sums).map_err(|_| format!("{SUMS} is not UTF-8"))?;
    let listed = parse_sums(text)?;
    let present = artifacts(dir)?;
    for name in &present {
        if !listed.iter().any(|(n, _)| n == name) {
            return Err(format!("{}: not in {SUMS}", dir.join(name).display()));
        }
    }
    for (name, digest) in &listed {
        let path = dir.join(name);
        if !path.is_file() {
            return Err(format!("{SUMS} lists {name}, which is missing from {}", dir.display()));
        }
        if hex(&sha256_file(&path)?) != *digest {
            return Err(format!("{}: its SHA-256 is not the one in {SUMS}", path.display()));
        }
    }
    let key = match signer {
        Some(path) => public_key(path)?,
        None => {
            eprintln!("xtask: no --signer: checking the signature with the key shipped in the dist");
            public_key(&dir.join(PUB_JWK))?
        }
    };
    let signature = std::fs::read(dir.join(SIG)).map_err(|e| format!("{}: {e}", dir.join(SIG).display()))?;
    if !key.verify_detached(&sums, &signature) {
        return Err(format!("{SIG} is not a signature of {SUMS} by the key {}", key.fingerprint()));
    }
    eprintln!("xtask: {} artifacts match {SUMS}, signed by {}", listed.len(), key.fingerprint());
    Ok(())
}

/// `(name, hex digest)` per line; names are plain file names.
fn parse_sums(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = || format!("{SUMS} line {}: not `<64 hex digits>  <file name>`: {line:?}", i + 1);
        let (digest, name) = line.split_once("  ").ok_or_else(bad)?;
        let hex_ok = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex_ok || name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(bad());
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(format!("{SUMS} lists {name} twice"));
        }
        out.push((name.to_string(), digest.to_string()));
    }
    Ok(out)
}

/// The Ed25519 public key of a JWK file (public, or secret: its public
/// half).
fn public_key(path: &Path) -> Result<VerifyingKey, String> {
    let mut ring = KeyRing::new();
    ring.add_jwk_file(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let keys: Vec<VerifyingKey> = ring
        .verifying_keys()
        .iter()
        .map(|(_, k)| *k)
        .chain(ring.signing_keys().iter().map(|(_, k)| k.verifying_key()))
        .collect();
    match keys.as_slice() {
        [key] => Ok(*key),
        [] => Err(format!("{} holds no Ed25519 key", path.display())),
        _ => Err(format!("{} holds several Ed25519 keys: give one", path.display())),
    }
}

/// Every artifact of `ours` that is not byte-identical in `reference` (the
/// reproducibility check); artifacts only the reference has were not built
/// here and are only counted.
pub fn compare(ours: &Path, reference: &Path) -> Result<(), String> {
    let read = |d: &Path| {
        let text = std::fs::read_to_string(d.join(SUMS)).map_err(|e| format!("{}: {e}", d.join(SUMS).display()))?;
        parse_sums(&text)
    };
    let (left, right) = (read(ours)?, read(reference)?);
    let mut differ = Vec::new();
    for (name, digest) in &left {
        match right.iter().find(|(n, _)| n == name) {
            Some((_, other)) if other == digest => {}
            Some(_) => differ.push(format!("{name}: different bytes")),
            None => differ.push(format!("{name}: not in {}", reference.display())),
        }
    }
    if !differ.is_empty() {
        return Err(format!("not reproduced:\n  {}", differ.join("\n  ")));
    }
    eprintln!(
        "xtask: all {} artifacts built here are byte-identical to {} ({} more there were not built here)",
        left.len(),
        reference.display(),
        right.len() - left.len()
    );
    Ok(())
}

pub fn sha256_file(path: &Path) -> Result<[u8; 32], String> {
    let mut f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key as an X.509 SubjectPublicKeyInfo PEM (RFC 8410), for openssl.
fn pem(key: &VerifyingKey) -> String {
    const ED25519_SPKI: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
    let mut der = ED25519_SPKI.to_vec();
    der.extend_from_slice(&key.0);
    format!("-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n", base64(&der))
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_lines_are_strict() {
        let d = "a".repeat(64);
        assert_eq!(parse_sums(&format!("{d}  x.whl\n")).unwrap(), vec![("x.whl".to_string(), d.clone())]);
        for bad in [
            format!("{d} x.whl"),
            format!("{}  x.whl", &d[1..]),
            format!("{}  x.whl", "A".repeat(64)),
            format!("{d}  ../x.whl"),
            format!("{d}  a/x.whl"),
            format!("{d}  "),
            format!("{d}  x\n{d}  x"),
        ] {
            assert!(parse_sums(&bad).is_err(), "accepted {bad:?}");
        }
    }

    /// A dist in a fresh directory, signed by a fresh key.
    fn signed_dist(tag: &str) -> (PathBuf, SigningKey) {
        let dir = std::env::temp_dir().join(format!("xtask-sums-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.whl"), b"wheel bytes").unwrap();
        std::fs::write(dir.join("b.tar.gz"), b"archive bytes").unwrap();
        let key = SigningKey::generate();
        write(&dir, &key).unwrap();
        (dir, key)
    }

    #[test]
    fn a_signed_dist_verifies_and_every_change_is_caught() {
        let (dir, key) = signed_dist("tamper");
        verify(&dir, None).unwrap();
        let sums = std::fs::read_to_string(dir.join(SUMS)).unwrap();
        assert_eq!(sums.lines().count(), 2, "{sums}");

        // A changed artifact.
        std::fs::write(dir.join("a.whl"), b"wheel bytez").unwrap();
        assert!(verify(&dir, None).unwrap_err().contains("a.whl"));
        std::fs::write(dir.join("a.whl"), b"wheel bytes").unwrap();
        // An artifact that is not listed, and one that is gone.
        std::fs::write(dir.join("c.crate"), b"extra").unwrap();
        assert!(verify(&dir, None).unwrap_err().contains("not in SHA256SUMS"));
        std::fs::remove_file(dir.join("c.crate")).unwrap();
        std::fs::remove_file(dir.join("b.tar.gz")).unwrap();
        assert!(verify(&dir, None).unwrap_err().contains("missing"));
        std::fs::write(dir.join("b.tar.gz"), b"archive bytes").unwrap();
        verify(&dir, None).unwrap();
        // Sums edited to match a new artifact: the signature no longer holds.
        std::fs::write(dir.join("a.whl"), b"evil").unwrap();
        let evil = sums.replace(&sums[..64], &hex(&sha256_file(&dir.join("a.whl")).unwrap()));
        std::fs::write(dir.join(SUMS), &evil).unwrap();
        assert!(verify(&dir, None).unwrap_err().contains("not a signature"));
        std::fs::write(dir.join("a.whl"), b"wheel bytes").unwrap();
        std::fs::write(dir.join(SUMS), &sums).unwrap();
        // Re-signed by someone else: refused when the signer is named.
        let signer = dir.with_extension("pub.jwk");
        std::fs::write(&signer, key.verifying_key().to_jwk(None).to_string()).unwrap();
        verify(&dir, Some(&signer)).unwrap();
        write(&dir, &SigningKey::generate()).unwrap();
        verify(&dir, None).unwrap();
        assert!(verify(&dir, Some(&signer)).unwrap_err().contains("not a signature"));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&signer).unwrap();
    }

    #[test]
    fn compare_names_the_artifacts_that_differ() {
        let (a, _) = signed_dist("cmp-a");
        let (b, _) = signed_dist("cmp-b");
        compare(&a, &b).unwrap();
        std::fs::write(b.join("a.whl"), b"other").unwrap();
        write(&b, &SigningKey::generate()).unwrap();
        let err = compare(&a, &b).unwrap_err();
        assert!(err.contains("a.whl: different bytes") && !err.contains("b.tar.gz"), "{err}");
        // Fewer artifacts here than in the reference is fine; more is not.
        std::fs::remove_file(a.join("a.whl")).unwrap();
        write(&a, &SigningKey::generate()).unwrap();
        compare(&a, &b).unwrap();
        let err = compare(&b, &a).unwrap_err();
        assert!(err.contains("a.whl: not in"), "{err}");
        std::fs::remove_dir_all(&a).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn pem_is_rfc_8410() {
        // RFC 8410 section 10.1's example public key.
        let key = VerifyingKey([
            0x19, 0xbf, 0x44, 0x09, 0x69, 0x84, 0xcd, 0xfe, 0x85, 0x41, 0xba, 0xc1, 0x67, 0xdc, 0x3b, 0x96, 0xc8, 0x50,
            0x86, 0xaa, 0x30, 0xb6, 0xb6, 0xcb, 0x0c, 0x5c, 0x38, 0xad, 0x70, 0x31, 0x66, 0xe1,
        ]);
        assert_eq!(
            pem(&key),
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n"
        );
    }
}
