//! What `verify` reports whatever it verifies (a file, a sharded
//! checkpoint, a collection; `verify-model` a model directory): one JSON
//! shape for all four ([`Report`]), the document of a failure in that
//! shape, and the refusal of tensors a required signature does not cover.

use serde_json::{json, Value};

use crate::exit::CheckFailed;
use crate::out::Out;

/// What was verified.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    File,
    Sharded,
    Collection,
    Model,
}

/// The one shape of `verify --json` and `verify-model --json`, whatever
/// was verified: `path`, `kind` (`file`, `sharded`, `collection`,
/// `model`), `ok`, `verdict`, `checked` (what was checked, counted; its
/// fields are the kind's), `unverified` (tensors nothing checked),
/// `signers` and `signer_keys`, `failures` (each mismatch, named) and
/// `error` (the error that ended the check, or null). The verdicts are
/// io's; this only renders them.
pub(crate) struct Report {
    pub path: String,
    pub kind: Kind,
    pub verdict: &'static str,
    pub checked: Value,
    pub unverified: Vec<String>,
    pub signers: Vec<String>,
    pub signer_keys: Vec<Value>,
    pub failures: Vec<Value>,
    pub error: Option<String>,
}

impl Report {
    /// A report of `kind` for `path` that found nothing wrong: `checked`
    /// says what it checked.
    pub fn ok(path: &std::path::Path, kind: Kind, checked: Value) -> Report {
        Report {
            path: path.to_string_lossy().into_owned(),
            kind,
            verdict: "ok",
            checked,
            unverified: Vec::new(),
            signers: Vec::new(),
            signer_keys: Vec::new(),
            failures: Vec::new(),
            error: None,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "path": self.path,
            "kind": match self.kind {
                Kind::File => "file",
                Kind::Sharded => "sharded",
                Kind::Collection => "collection",
                Kind::Model => "model",
            },
            "ok": self.failures.is_empty() && self.error.is_none(),
            "verdict": self.verdict,
            "checked": self.checked,
            "unverified": self.unverified,
            "signers": self.signers,
            "signer_keys": self.signer_keys,
            "failures": self.failures,
            "error": self.error,
        })
    }
}

/// With `--json`, a failed verification of `path` is still one JSON
/// document on stdout, in [`Report`]'s shape: `ok` false, `verdict`
/// `failed`, `error` the message. The error goes on as usual (stderr,
/// exit code).
pub(crate) fn report_json(path: &std::path::Path, kind: Kind, as_json: bool, err: anyhow::Error) -> anyhow::Error {
    if as_json {
        let mut out = Out::new();
        let mut report = Report::ok(path, kind, json!({}));
        report.verdict = "failed";
        report.error = Some(crate::exit::one_line(&err));
        // If stdout is gone, the error still reaches stderr.
        let _ = out.json(&report.to_json()).and_then(|()| out.finish());
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
