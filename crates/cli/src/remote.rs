//! URLs wherever a path is accepted: `s3://`, `gs://`, `az://`,
//! `http(s)://` open through `deathtensors-remote` (ranged reads), with the
//! `--storage-option` entries of the run ([`crate::context::RunContext`])
//! and the environment.

use std::path::Path;

/// Parses `--storage-option` entries, `KEY=VALUE` each.
///
/// # Errors
/// An entry without `=`.
pub fn parse_storage_options(entries: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    entries
        .iter()
        .map(|e| match e.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.to_string())),
            None => anyhow::bail!("--storage-option {e:?} is not KEY=VALUE"),
        })
        .collect()
}

/// The URL `path` holds, if it is one.
pub fn url(path: &Path) -> Option<&str> {
    deathtensors_remote::url_of(path)
}
