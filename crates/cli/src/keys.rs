//! Keys given on the command line: `--key FILE` (JWK files, repeatable) and
//! `--passphrase-env VAR` for every command that reads, plus the
//! `DEATHTENSORS_KEYS` and `CRYPTOTENSOR_KEYS` environment variables (JWK
//! JSON), loaded once per run into its
//! [`crate::context::RunContext`]; every command opens files through it, so
//! encrypted files read wherever plain ones do.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use deathtensors_io::{KeyRing, Passphrase};

/// Loads the keys of `--key` files, the passphrase in `--passphrase-env`'s
/// variable, and those of the variables io names
/// ([`deathtensors_io::KEY_ENV_VARS`], as the Python package). A variable that is not JWK JSON is
/// warned about and ignored: it must not stop commands that need no key.
pub fn load(files: &[PathBuf], passphrase_env: Option<&str>) -> anyhow::Result<KeyRing> {
    let mut ring = KeyRing::new();
    for f in files {
        ring.add_jwk_file(f)?;
        // An X25519 public key opens nothing: a file encrypted to it opens
        // with its secret half. (An Ed25519 public key is a signer's, which
        // a cryptotensors file's signature is checked with.)
        let summaries = deathtensors_io::describe_key_file(f)?;
        if let Some(k) = summaries.iter().find(|k| k.kind == "x25519" && !k.secret) {
            let kid = k.kid.as_deref().map_or(String::new(), |kid| format!(" {kid:?}"));
            anyhow::bail!(
                "--key {}: this is the public X25519 key{kid}; decrypting needs the secret key (the JWK with \"d\", \
                 e.g. the file keygen --out wrote)",
                f.display()
            );
        }
    }
    if let Some(var) = passphrase_env {
        ring.add_passphrase(Arc::new(passphrase(var)?));
    }
    for var in deathtensors_io::KEY_ENV_VARS {
        if let Err(e) = ring.add_env(var) {
            crate::out::warn(&format!("{e}; its keys are ignored"));
        }
    }
    Ok(ring)
}

/// The passphrase held by an environment variable.
pub fn passphrase(var: &str) -> anyhow::Result<Passphrase> {
    let value =
        std::env::var(var).with_context(|| format!("environment variable {var} (the passphrase) is not set"))?;
    Ok(Passphrase::new(value)?)
}

/// Reads `--policy-input`: JSON text, or `@FILE` for a file holding it.
///
/// # Errors
/// A file that cannot be read; text that is not JSON.
pub fn policy_input(arg: Option<&str>) -> anyhow::Result<Option<serde_json::Value>> {
    let Some(arg) = arg else { return Ok(None) };
    let text = match arg.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file).with_context(|| format!("cannot read --policy-input {file}"))?,
        None => arg.to_string(),
    };
    Ok(Some(serde_json::from_str(&text).context("--policy-input is not JSON")?))
}
