//! `deathtensors key` (and `inspect KEY.jwk`): what a JWK file holds, each
//! key's kind, key id, fingerprint and public half; never its secret.

use std::io::{Read, Write};
use std::path::Path;

use deathtensors_io::KeySummary;
use serde_json::{json, Value};

use crate::args::KeyArgs;
use crate::exit::ExitCode;
use crate::out::{self, Out};

pub fn run(args: KeyArgs) -> anyhow::Result<ExitCode> {
    show(&args.file, args.json)
}

/// Whether `path` is a local file holding a JWK (or a JWK set): a JSON
/// object with a `kty` or a `keys` member. Reads at most 64 KiB.
pub fn is_key_file(path: &Path) -> bool {
    if crate::remote::url(path).is_some() || !path.is_file() {
        return false;
    }
    let mut text = String::new();
    let Ok(file) = std::fs::File::open(path) else { return false };
    if file.take(64 << 10).read_to_string(&mut text).is_err() {
        return false;
    }
    serde_json::from_str::<Value>(&text)
        .is_ok_and(|v| v.get("kty").is_some_and(Value::is_string) || v.get("keys").is_some_and(Value::is_array))
}

/// Prints the keys of the JWK file `path`.
pub fn show(path: &Path, as_json: bool) -> anyhow::Result<ExitCode> {
    let keys = deathtensors_io::describe_key_file(path)?;
    let mut out = Out::new();
    if as_json {
        let keys: Vec<Value> = keys.iter().map(to_json).collect();
        out.json(&json!({"path": path.to_string_lossy(), "keys": keys}))?;
    } else {
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            write!(out, "{}", out::table(&rows(path, k)))?;
        }
    }
    out.finish()?;
    Ok(ExitCode::Success)
}

/// One key as `keygen` and `key` print it.
pub fn rows(path: &Path, k: &KeySummary) -> Vec<Vec<String>> {
    let kind = match (k.kind, k.secret) {
        ("symmetric", _) => "symmetric key (AES-256-GCM / ChaCha20-Poly1305): secret, share it privately".to_string(),
        ("x25519", true) => "X25519 secret key (decrypts files encrypted to its public half)".into(),
        ("x25519", false) => "X25519 public key (encrypt to it: --recipient)".into(),
        ("ed25519", true) => "Ed25519 secret key (signs: sign --with)".into(),
        (_, _) => "Ed25519 public key (trust its signatures: --signer)".into(),
    };
    let mut rows = vec![
        vec!["file".to_string(), path.display().to_string()],
        vec!["kind".into(), kind],
        vec!["kid".into(), k.kid.clone().unwrap_or_else(|| "none".into())],
        vec![
            "fingerprint".into(),
            k.fingerprint.clone().unwrap_or_else(|| "none (a symmetric key has no public half)".into()),
        ],
    ];
    if let Some(public) = &k.public_jwk {
        rows.push(vec!["public key".into(), public.to_string()]);
    }
    rows
}

fn to_json(k: &KeySummary) -> Value {
    json!({"kind": k.kind, "secret": k.secret, "kid": k.kid, "fingerprint": k.fingerprint, "public_jwk": k.public_jwk})
}
