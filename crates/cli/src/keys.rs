//! Keys given on the command line: `--key FILE` (JWK files, repeatable) and
//! `--passphrase-env VAR` for every command that reads, plus the
//! `DEATHTENSORS_KEYS` and `CRYPTOTENSOR_KEYS` environment variables (JWK
//! JSON). Every command opens
//! files through [`open`], so encrypted files read wherever plain ones do.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use deathtensors_io::{KeyRing, Passphrase, ReadOptions, Reader};

/// The keys of this run. Every run of `main_with_args` sets them anew: the
/// same `main` runs in-process from Python (`deathtensors.main`), and a
/// second run must not keep the first one's keys.
static KEYS: RwLock<Option<KeyRing>> = RwLock::new(None);

/// The `--policy-input` of this run (set anew by every run, as [`KEYS`]).
static POLICY_INPUT: RwLock<Option<serde_json::Value>> = RwLock::new(None);

/// The variables read for keys besides `--key`, as JWK JSON: ours, and
/// cryptotensors' (as the Python package reads them).
pub const ENV: [&str; 2] = ["DEATHTENSORS_KEYS", "CRYPTOTENSOR_KEYS"];

/// Loads the keys of `--key` files, the passphrase in `--passphrase-env`'s
/// variable, and those of [`ENV`]. A variable that is not JWK JSON is
/// warned about and ignored: it must not stop commands that need no key.
pub fn load(files: &[PathBuf], passphrase_env: Option<&str>) -> anyhow::Result<KeyRing> {
    let mut ring = KeyRing::new();
    for f in files {
        ring.add_jwk_file(f)?;
    }
    if let Some(var) = passphrase_env {
        ring.add_passphrase(Arc::new(passphrase(var)?));
    }
    for var in ENV {
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

/// Makes `ring` the keys of this run, in place of any earlier run's.
pub fn set(ring: KeyRing) {
    *KEYS.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(ring);
}

/// The keys of this run.
pub fn ring() -> KeyRing {
    KEYS.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_default()
}

/// Reads `--policy-input`: JSON text, or `@FILE` for a file holding it.
pub fn set_policy_input(arg: Option<&str>) -> anyhow::Result<()> {
    let mut slot = POLICY_INPUT.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    *slot = None;
    let Some(arg) = arg else { return Ok(()) };
    let text = match arg.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file).with_context(|| format!("cannot read --policy-input {file}"))?,
        None => arg.to_string(),
    };
    let value = serde_json::from_str(&text).context("--policy-input is not JSON")?;
    *slot = Some(value);
    Ok(())
}

/// How files are opened in this run: its keys, and its policy input.
pub fn read_options() -> ReadOptions {
    let policy_input = POLICY_INPUT.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    ReadOptions { keys: ring(), policy_input, ..ReadOptions::default() }
}

/// Opens a file with the keys (and policy input) of this run; a URL that a
/// check opened already is not opened again.
pub fn open(path: &Path) -> deathtensors_io::Result<Reader> {
    crate::remote::open_with_keys(path, read_options)
}

/// The Ed25519 public keys of `--signer` JWK files, for `trusted_signers`.
///
/// # Errors
/// A file that cannot be read, or holds no Ed25519 key.
pub fn signers(files: &[PathBuf]) -> anyhow::Result<Vec<deathtensors_io::VerifyingKey>> {
    let mut trusted = Vec::new();
    for f in files {
        let mut ring = deathtensors_io::KeyRing::new();
        ring.add_jwk_file(f)?;
        if ring.verifying_keys().is_empty() {
            anyhow::bail!("{} holds no Ed25519 key", f.display());
        }
        trusted.extend(ring.verifying_keys().iter().map(|(_, k)| *k));
    }
    Ok(trusted)
}

/// [`read_options`] with the signature requirements of `--signer` and
/// `--require-signature`.
///
/// # Errors
/// As [`signers`].
pub fn read_options_requiring(signer: &[PathBuf], require_signature: bool) -> anyhow::Result<ReadOptions> {
    Ok(ReadOptions { trusted_signers: signers(signer)?, require_signature, ..read_options() })
}
