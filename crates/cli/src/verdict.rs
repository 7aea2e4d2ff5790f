//! What `verify` reports whatever it verifies (one file, or each shard of
//! a sharded checkpoint): the JSON document of a failure, and the refusal
//! of tensors a required signature does not cover.

use serde_json::json;

use crate::exit::CheckFailed;
use crate::out::Out;

/// With `--json`, a failed verification of `path` (a file, a sharded
/// checkpoint's index) is still one JSON document on stdout, `ok` false;
/// the error goes on as usual (stderr, exit code).
pub(crate) fn report_json(path: &std::path::Path, as_json: bool, err: anyhow::Error) -> anyhow::Error {
    if as_json {
        let mut out = Out::new();
        let doc = json!({ "path": path.to_string_lossy(), "ok": false, "error": crate::exit::one_line(&err) });
        // If stdout is gone, the error still reaches stderr.
        let _ = out.json(&doc).and_then(|()| out.finish());
    }
    err
}

/// For a reader that required a signature: fails if some tensors are
/// covered by nothing a signature signs, stored in the clear without a
/// digest or a footer (a partly encrypted cryptotensors file's plaintext
/// tensors; its signature covers the header only).
pub(crate) fn unsigned_tensors(reader: &deathtensors_io::Reader) -> anyhow::Result<()> {
    if reader.head().checksummed().is_some() {
        return Ok(());
    }
    let clear: Vec<&str> = reader
        .header()
        .tensors()
        .iter()
        .filter(|t| t.sha256.is_none() && !reader.is_tensor_encrypted(&t.name))
        .map(|t| t.name.as_str())
        .collect();
    if clear.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = clear.iter().take(8).map(|n| format!("{n:?}")).collect();
    if clear.len() > 8 {
        names.push(format!("and {} more", clear.len() - 8));
    }
    let count = if clear.len() == 1 { "1 tensor is".to_string() } else { format!("{} tensors are", clear.len()) };
    Err(CheckFailed(format!(
        "{}: a signature was required, and {count} covered by nothing it signs (stored in the clear, \
         without a digest): {}",
        reader.path().display(),
        names.join(", ")
    ))
    .into())
}
