//! Sharded checkpoints as deathtensors 0.3.0 writes them: the index is a
//! `.deathtensors` file without tensors at the path the caller gives, whose
//! global metadata lists the shards; the shards sit beside it.

use std::path::{Path, PathBuf};

use deathtensors_format::{Format, TensorSpec};

use crate::error::{Error, Result};
use crate::file::writer::save;
use crate::fs::staged::StagedFiles;
use crate::options::WriteOptions;

/// Saves tensors as deathtensors 0.3.0's `save_sharded(path, ...)` does:
/// shards of at most `max_shard_bytes` of tensor data (a larger tensor gets
/// a shard of its own) named `<stem>-00001-of-000N<ext>` (five digits, then
/// four), each with `deathtensors.shard.index` and `deathtensors.shard.count`
/// added to the global metadata, and the index at `path`: a file without
/// tensors whose global metadata adds `deathtensors.sharded = "true"`,
/// `deathtensors.shard.count` and `deathtensors.shards`, the JSON list of
/// `{"path", "tensors", "bytes"}` written as Python's `json.dumps` writes it.
/// `<ext>` is `path`'s if it is `.deathtensors` or `.dt` (any case), else
/// `.deathtensors` after the whole path.
///
/// Every shard and the index are written under temp names, then renamed
/// into place, the index last ([`StagedFiles`]): a reader never sees an
/// index naming missing shards, and a failed save leaves nothing it wrote
/// and replaces nothing. Returns the shard paths.
///
/// # Errors
/// As [`save`]; `InvalidInput` if `max_shard_bytes` is 0 or the format is
/// not deathtensors.
pub fn save_sharded_legacy(
    path: impl AsRef<Path>,
    tensors: Vec<(TensorSpec, &[u8])>,
    max_shard_bytes: u64,
    options: &WriteOptions,
) -> Result<Vec<PathBuf>> {
    let path = path.as_ref();
    let doing = "cannot write";
    if max_shard_bytes == 0 {
        return Err(Error::input("max_shard_bytes must be positive", path, doing));
    }
    if options.format != Format::Deathtensors {
        return Err(Error::input("deathtensors 0.3.0's sharded layout holds deathtensors files", path, doing));
    }
    super::create_parent(path)?;
    let (stem, ext) = split_extension(&path.to_string_lossy());
    let mut groups: Vec<Vec<(TensorSpec, &[u8])>> = Vec::new();
    let mut size = 0u64;
    for (spec, bytes) in tensors {
        let n = bytes.len() as u64;
        match groups.last_mut() {
            Some(g) if size + n <= max_shard_bytes => g.push((spec, bytes)),
            _ => {
                groups.push(vec![(spec, bytes)]);
                size = 0;
            }
        }
        size += n;
    }
    let count = groups.len();
    let base = options.metadata.clone().unwrap_or_default();
    let mut paths = Vec::with_capacity(count);
    let mut listing = Vec::with_capacity(count);
    let mut staged = StagedFiles::new(options.durable);
    for (i, group) in groups.into_iter().enumerate() {
        let shard_path = PathBuf::from(format!("{stem}-{:05}-of-{count:04}{ext}", i + 1));
        let file = shard_path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        let names: Vec<String> = group.iter().map(|(s, _)| s.name.clone()).collect();
        let bytes: u64 = group.iter().map(|(_, b)| b.len() as u64).sum();
        let mut metadata = base.clone();
        metadata.insert("deathtensors.shard.index".into(), i.to_string());
        metadata.insert("deathtensors.shard.count".into(), count.to_string());
        staged
            .write(&shard_path, |at| save(at, group, &WriteOptions { metadata: Some(metadata), ..options.clone() }))?;
        listing.push(format!(
            "{{\"path\": {}, \"tensors\": [{}], \"bytes\": {bytes}}}",
            py_json_string(&file),
            names.iter().map(|n| py_json_string(n)).collect::<Vec<_>>().join(", ")
        ));
        paths.push(shard_path);
    }
    let mut metadata = base;
    metadata.insert(super::LEGACY_INDEX_MARKER.into(), "true".into());
    metadata.insert("deathtensors.shard.count".into(), count.to_string());
    metadata.insert("deathtensors.shards".into(), format!("[{}]", listing.join(", ")));
    staged.write(path, |at| save(at, Vec::new(), &WriteOptions { metadata: Some(metadata), ..options.clone() }))?;
    staged.commit()?;
    Ok(paths)
}

/// `os.path.splitext` as deathtensors 0.3.0 uses it: the stem and an
/// extension that is `.deathtensors` or `.dt`, else the whole path and
/// `.deathtensors`.
fn split_extension(path: &str) -> (String, String) {
    let name_start = path.rfind(['/', '\\']).map_or(0, |i| i + 1);
    let name = &path[name_start..];
    // A leading dot does not start an extension (".dt" is a name).
    let dot = name.trim_start_matches('.').rfind('.').map(|i| i + (name.len() - name.trim_start_matches('.').len()));
    if let Some(dot) = dot {
        let ext = &name[dot..];
        if ext.eq_ignore_ascii_case(".deathtensors") || ext.eq_ignore_ascii_case(".dt") {
            return (path[..name_start + dot].to_string(), ext.to_string());
        }
        return (path.to_string(), ".deathtensors".to_string());
    }
    (path.to_string(), ".deathtensors".to_string())
}

/// A string as Python's `json.dumps` writes it by default (`ensure_ascii`):
/// non-ASCII as `\uXXXX` escapes (surrogate pairs above U+FFFF).
fn py_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_split_as_deathtensors_0_3_0_splits_them() {
        let split = |p: &str| split_extension(p);
        assert_eq!(split("dir/model.deathtensors"), ("dir/model".into(), ".deathtensors".into()));
        assert_eq!(split("dir/model.DT"), ("dir/model".into(), ".DT".into()));
        assert_eq!(split("dir/model.bin"), ("dir/model.bin".into(), ".deathtensors".into()));
        assert_eq!(split("dir/model"), ("dir/model".into(), ".deathtensors".into()));
        assert_eq!(split("dir.x/.dt"), ("dir.x/.dt".into(), ".deathtensors".into()));
        assert_eq!(split("a.b/m.c.dt"), ("a.b/m.c".into(), ".dt".into()));
    }

    #[test]
    fn strings_are_escaped_as_python_json_dumps_escapes_them() {
        assert_eq!(py_json_string("a.b"), r#""a.b""#);
        assert_eq!(py_json_string("q\"\\\n\t\u{1}"), r#""q\"\\\n\t\u0001""#);
        assert_eq!(py_json_string("é✓😀"), r#""\u00e9\u2713\ud83d\ude00""#);
        assert_eq!(py_json_string("\u{7f}"), r#""\u007f""#);
    }
}
