//! docs/ARCHITECTURE.md's code map stays true: every source file of the
//! house is named in it, and every file it names exists.
//!
//! A file is named by its path inside its source folder, in backticks:
//! `reader/report.rs` for `crates/io/src/reader/report.rs`, `_file.py` for
//! `bindings/python/py_src/deathtensors/_file.py`; by its file name alone
//! where no other file of its source folder has that name (`verify.rs` for
//! `reader/verify.rs`, but `crypt/keys.rs` beside `model_sign/keys.rs`). Tables of contents (`lib.rs`, `main.rs`, `mod.rs`,
//! `__init__.py`) are named by their folder, and a module's unit tests
//! (`tests.rs`) by the module: neither needs a line of its own.

use std::collections::BTreeSet;
use std::path::Path;

/// The source folders the map covers: every crate's and the Python
/// package's, as the module graph reads them.
fn sources() -> impl Iterator<Item = &'static str> {
    crate::modgraph::RUST_SOURCES.iter().copied().chain([crate::modgraph::PYTHON_PACKAGE])
}

const EXEMPT: &[&str] = &["lib.rs", "main.rs", "mod.rs", "__init__.py", "tests.rs"];

/// Every source file under `folder` (`.rs` and `.py`), as paths relative
/// to it with `/`, sorted.
fn files(folder: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "__pycache__") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs" || e == "py") {
                let rel = path.strip_prefix(folder).map_err(|e| e.to_string())?;
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The backticked words of `doc` that end in `.rs` or `.py`.
fn named(doc: &str) -> BTreeSet<String> {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| !w.contains(char::is_whitespace) && (w.ends_with(".rs") || w.ends_with(".py")))
        .map(str::to_string)
        .collect()
}

/// What is wrong with the map: files it does not name, and names of files
/// that do not exist.
///
/// # Errors
/// A folder or the document that cannot be read.
pub fn check(root: &Path) -> Result<Vec<String>, String> {
    let doc_path = root.join("docs/ARCHITECTURE.md");
    let doc = std::fs::read_to_string(&doc_path).map_err(|e| format!("{}: {e}", doc_path.display()))?;
    let names = named(&doc);
    let mut problems = Vec::new();
    let mut every = BTreeSet::new();
    for folder in sources() {
        let all = files(&root.join(folder))?;
        for rel in &all {
            every.insert(rel.clone());
            let base = rel.rsplit('/').next().unwrap_or(rel);
            every.insert(base.to_string());
            if EXEMPT.contains(&base) {
                continue;
            }
            let unique = all.iter().filter(|r| r.rsplit('/').next() == Some(base)).count() == 1;
            let full = names.iter().any(|n| n == rel || n.ends_with(&format!("/{rel}")));
            if !(full || (unique && names.contains(base))) {
                problems.push(format!("{folder}/{rel} is not named in docs/ARCHITECTURE.md (as `{rel}`)"));
            }
        }
    }
    // Every name is a file of the repository (any folder: tests, testdata
    // and docs are named too); `cmd/<subcommand>.rs` stands for a kind.
    let listed = crate::util::output(std::process::Command::new("git").arg("-C").arg(root).arg("ls-files"))?;
    let tracked: Vec<&str> = listed.lines().collect();
    for n in names.iter().filter(|n| !n.contains('<')) {
        let exists = tracked.iter().any(|t| t == n || t.ends_with(&format!("/{n}"))) || every.contains(n.as_str());
        if !exists {
            problems.push(format!("docs/ARCHITECTURE.md names `{n}`, which is no file of the repository"));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_backticked_source_files() {
        let doc = "`a.rs` and `x/b.py`, not `c.toml` nor `two words.rs`; `d.rs`";
        assert_eq!(named(doc).into_iter().collect::<Vec<_>>(), ["a.rs", "d.rs", "x/b.py"]);
    }

    /// The map of the house: every file named, every name a file.
    #[test]
    fn the_architecture_names_every_source_file() {
        let problems = check(&crate::util::root()).unwrap();
        assert!(problems.is_empty(), "{} problems:\n{}", problems.len(), problems.join("\n"));
    }
}
