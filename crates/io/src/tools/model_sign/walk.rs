//! The files of a model directory, as `model_signing` lists them, hashed
//! whole on all cores.

use std::fs::File;
use std::io::Read;
use std::path::{Component, Path};

use super::bundle::Resource;
use crate::error::{Error, ErrorKind, Result};
use crate::fs::sha_lanes::{digests, Input};

/// Files open at once while hashing: bounded, for directories of many
/// files.
const BATCH: usize = 256;

/// `path`'s components, if it is plain relative `a/b/c`; `None` for
/// paths that are absolute or climb (`..`): such ignore entries match no
/// file, as in `model_signing`.
fn components(path: &str) -> Option<Vec<&str>> {
    if path.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.contains(&"..") {
        return None;
    }
    Some(parts)
}

/// The path of `file` relative to `dir` (`/`-separated), if it is inside.
pub(super) fn relative_inside(dir: &Path, file: &Path) -> Option<String> {
    let dir = std::fs::canonicalize(dir).ok()?;
    let file = match std::fs::canonicalize(file) {
        Ok(f) => f,
        // Not written yet: its parent exists.
        Err(_) => {
            std::fs::canonicalize(file.parent().filter(|p| !p.as_os_str().is_empty())?).ok()?.join(file.file_name()?)
        }
    };
    let rel = file.strip_prefix(&dir).ok()?;
    let parts: Option<Vec<&str>> = rel
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let parts = parts?;
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Reads at most `max` bytes of a small file (a bundle).
pub(super) fn read_bounded(path: &Path, max: u64, doing: &'static str) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(|e| Error::io(e, path, doing))?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes).map_err(|e| Error::io(e, path, doing))?;
    if bytes.len() as u64 > max {
        return Err(Error::new(
            ErrorKind::ModelSignature(format!("the signature file is larger than {max} bytes")),
            Some(path),
            doing,
        ));
    }
    Ok(bytes)
}

/// Every regular file below `dir` outside `ignore`, by relative name,
/// sorted as `model_signing` sorts them (by path components), with its
/// SHA-256.
pub(super) fn hash_directory(
    dir: &Path,
    ignore: &[String],
    allow_symlinks: bool,
    doing: &'static str,
) -> Result<Vec<Resource>> {
    let ignore: Vec<Vec<&str>> = ignore.iter().filter_map(|p| components(p)).collect();
    let meta = std::fs::metadata(dir).map_err(|e| Error::io(e, dir, doing))?;
    if !meta.is_dir() {
        return Err(Error::input("not a directory: a model signature covers a directory", dir, doing));
    }
    let mut files: Vec<Vec<String>> = Vec::new();
    let mut stack: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(rel) = stack.pop() {
        let here = rel.iter().fold(dir.to_path_buf(), |p, c| p.join(c));
        let entries = std::fs::read_dir(&here).map_err(|e| Error::io(e, &here, doing))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(e, &here, doing))?;
            let path = entry.path();
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                return Err(Error::input("a file name is not UTF-8 (a signature names files in UTF-8)", &path, doing));
            };
            let mut child = rel.clone();
            child.push(name);
            let ignored =
                ignore.iter().any(|ig| ig.len() <= child.len() && ig.iter().zip(&child).all(|(a, b)| *a == b));
            if ignored {
                continue;
            }
            let kind = entry.file_type().map_err(|e| Error::io(e, &path, doing))?;
            let kind = if kind.is_symlink() {
                if !allow_symlinks {
                    return Err(Error::input(
                        "a symbolic link, and the signature does not allow them (allow_symlinks)",
                        &path,
                        doing,
                    ));
                }
                std::fs::metadata(&path).map_err(|e| Error::io(e, &path, doing))?.file_type()
            } else {
                kind
            };
            if kind.is_dir() {
                stack.push(child);
            } else if kind.is_file() {
                files.push(child);
            } else {
                return Err(Error::input("neither a file nor a directory (a device, socket or pipe)", &path, doing));
            }
        }
    }
    files.sort();
    let mut out = Vec::with_capacity(files.len());
    for batch in files.chunks(BATCH) {
        let mut opened = Vec::with_capacity(batch.len());
        for rel in batch {
            let path = rel.iter().fold(dir.to_path_buf(), |p, c| p.join(c));
            let file = File::open(&path).map_err(|e| Error::io(e, &path, doing))?;
            let len = file.metadata().map_err(|e| Error::io(e, &path, doing))?.len();
            opened.push((file, len));
        }
        let inputs: Vec<Input<'_>> =
            opened.iter().map(|(f, len)| Input::File { file: f, offset: 0, len: *len }).collect();
        let found = digests(&inputs).map_err(|e| Error::io(e, dir, doing))?;
        out.extend(batch.iter().zip(found).map(|(rel, digest)| Resource { name: rel.join("/"), digest }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_sort_by_path_components_as_model_signing_sorts_them() {
        let dir = std::env::temp_dir().join(format!("dt-walk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a.txt"), b"1").unwrap();
        std::fs::write(dir.join("a").join("b"), b"2").unwrap();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        std::fs::write(dir.join(".git").join("HEAD"), b"3").unwrap();
        let found = hash_directory(&dir, &[".git".into()], false, "test").unwrap();
        let names: Vec<&str> = found.iter().map(|r| r.name.as_str()).collect();
        // By components ["a", "b"] < ["a.txt"]; as strings "a.txt" < "a/b".
        assert_eq!(names, ["a/b", "a.txt"]);
        assert_eq!(found[0].digest, crate::fs::hash::sha256(b"2"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ignore_entries_that_climb_or_are_absolute_match_nothing() {
        assert_eq!(components("a/./b/"), Some(vec!["a", "b"]));
        assert_eq!(components("../x"), None);
        assert_eq!(components("/etc"), None);
    }
}
