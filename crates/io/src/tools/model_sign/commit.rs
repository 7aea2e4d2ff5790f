//! The per-tensor commitments a deathtensors signer adds to the statement
//! (`predicate.deathtensors`; `docs/SECURITY.md`, "Lazy per-tensor
//! verification"): made when signing, read back from a verified statement.
//! The model-signing v1.0 predicate tells verifiers to ignore fields other
//! than `serialization` and `resources`, so `model_signing` verifies such
//! bundles as any other.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::error::{Error, Result};
use crate::file::reader::Reader;
use crate::fs::sha_lanes::{digests, Input};
use crate::trust::commitment::FileCommitment;

/// The predicate field's name.
pub(crate) const FIELD: &str = "deathtensors";
/// Its version.
const VERSION: u64 = 1;

/// The commitments of the file at `path`, if it is a plain (not encrypted,
/// not compressed) tensor file: its head's SHA-256, and the SHA-256 of each
/// tensor whose header records no digest. Other files get none (they are
/// covered whole only).
///
/// # Errors
/// `Io` if a tensor file cannot be read.
pub(crate) fn commit_file(path: &Path) -> Result<Option<FileCommitment>> {
    let Ok(reader) = Reader::open(path) else {
        return Ok(None);
    };
    if reader.is_encrypted() || reader.head().is_compressed() || reader.head().is_chunk_compressed() {
        return Ok(None);
    }
    let doing = "cannot sign the model";
    let file = std::fs::File::open(path).map_err(|e| Error::io(e, path, doing))?;
    let head_len = reader.head().data_start;
    let mut head = vec![0u8; head_len as usize];
    crate::fs::pread::read_exact_at(&file, &mut head, 0).map_err(|e| Error::io(e, path, doing))?;
    let undigested: Vec<(&str, u64, u64)> = reader
        .header()
        .tensors()
        .iter()
        .filter(|t| t.sha256.is_none())
        .map(|t| (t.name.as_str(), head_len + t.data_offsets.0, t.byte_len()))
        .collect();
    let inputs: Vec<Input<'_>> =
        undigested.iter().map(|&(_, offset, len)| Input::File { file: &file, offset, len }).collect();
    let found = digests(&inputs).map_err(|e| Error::io(e, path, doing))?;
    let tensors = undigested.iter().zip(found).map(|(&(name, _, _), d)| (name.to_string(), d)).collect();
    Ok(Some(FileCommitment { head_len, head_sha256: crate::fs::hash::sha256(&head), tensors }))
}

fn hex(d: &[u8; 32]) -> String {
    deathtensors_format::hex_digest(d)
}

/// The predicate field for these files' commitments.
pub(crate) fn to_json(files: &BTreeMap<String, FileCommitment>) -> Value {
    let files: Vec<Value> = files
        .iter()
        .map(|(name, c)| {
            let tensors: Map<String, Value> = c.tensors.iter().map(|(n, d)| (n.clone(), json!(hex(d)))).collect();
            json!({"name": name, "head_len": c.head_len, "head_sha256": hex(&c.head_sha256), "tensors": tensors})
        })
        .collect();
    json!({"version": VERSION, "files": files})
}

/// The commitments of a signed predicate field; `None` for a version this
/// reader does not know.
///
/// # Errors
/// A message if the field is malformed.
pub(crate) fn from_json(
    v: &Value,
    unhex: impl Fn(&str) -> Option<[u8; 32]>,
) -> Result<Option<BTreeMap<String, FileCommitment>>, String> {
    if v.get("version").and_then(Value::as_u64) != Some(VERSION) {
        return Ok(None);
    }
    let bad = |what: &str| format!("the statement's {FIELD} commitments are malformed: {what}");
    let mut out = BTreeMap::new();
    for f in v.get("files").and_then(Value::as_array).ok_or_else(|| bad("no list of files"))? {
        let name = f.get("name").and_then(Value::as_str).ok_or_else(|| bad("a file without a name"))?;
        let head_len = f.get("head_len").and_then(Value::as_u64).ok_or_else(|| bad("no head_len"))?;
        let head_sha256 =
            f.get("head_sha256").and_then(Value::as_str).and_then(&unhex).ok_or_else(|| bad("no head_sha256"))?;
        let mut tensors = BTreeMap::new();
        for (t, d) in f.get("tensors").and_then(Value::as_object).ok_or_else(|| bad("no tensors"))? {
            let d = d.as_str().and_then(&unhex).ok_or_else(|| bad("a tensor digest"))?;
            tensors.insert(t.clone(), d);
        }
        if out.insert(name.to_string(), FileCommitment { head_len, head_sha256, tensors }).is_some() {
            return Err(bad("a file listed twice"));
        }
    }
    Ok(Some(out))
}
