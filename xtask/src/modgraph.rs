//! The module graph of the house: which module names which, and the
//! circles in it. A circle means two ideas that cannot be understood (or
//! changed) one without the other; the tests here keep every crate of the
//! workspace and the Python package free of them.
//!
//! Every file is a node. In Rust, `a.rs`, `a/mod.rs` are the module `a` and
//! `a/b.rs` is `a::b`, a node of its own; an inline `mod tests { .. }`
//! belongs to its file. An edge is a path that names another module:
//! `crate::`, `super::`, `self::` and a child module's name, `use` groups
//! included. The crate root (`lib.rs`, `main.rs`) and a module's `mod x;`
//! and `pub use` lines are tables of contents, not edges; a path through a
//! re-export leads to the module that defines the name.
//!
//! In Python, `pkg/x.py` is `pkg.x` and `pkg/__init__.py` is `pkg`. Every
//! `import` / `from .. import` of the package counts, relative or absolute,
//! including those inside functions: a lazy import only defers the circle,
//! the two modules still cannot be read one without the other. The
//! top-level imports of an `__init__.py` are its table of contents (like
//! `pub use`): they are no edges, and an import of a name through the
//! package leads to the module that defines it.
//!
//! Across the seam, the native module (`deathtensors._native`, built from
//! `bindings/python/src`) is a node of the Python graph: the package's
//! imports of it are edges to it, and each module of the package that the
//! Rust code imports (`py.import("deathtensors.x")`, any string literal
//! naming a module of the package) an edge from it. The package imports
//! `_native` everywhere, so any such import back is a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module -> the modules it names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The `src` folders whose modules must form no circle: every crate of
/// the workspace (the fuzz targets are one file each, with no modules).
pub const RUST_SOURCES: &[&str] = &[
    "crates/format/src",
    "crates/io/src",
    "crates/remote/src",
    "crates/cli/src",
    "crates/testkit/src",
    "bindings/python/src",
    "xtask/src",
];

/// The Python package whose modules must form no circle.
pub const PYTHON_PACKAGE: &str = "bindings/python/py_src/deathtensors";

/// The native module's source, and its name in the package.
pub const NATIVE_SOURCE: (&str, &str) = ("bindings/python/src", "_native");

/// Every circle of the house, as `where: [modules]` lines.
///
/// # Errors
/// A folder or file that cannot be read.
pub fn house(root: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for src in RUST_SOURCES {
        for c in circles(&read(&root.join(src))?) {
            out.push(format!("{src}: {c:?}"));
        }
    }
    let (native_src, native) = NATIVE_SOURCE;
    let seam = native_imports(&root.join(native_src), "deathtensors")?;
    for c in circles(&read_python_across(&root.join(PYTHON_PACKAGE), native, &seam)?) {
        out.push(format!("{PYTHON_PACKAGE}: {c:?}"));
    }
    Ok(out)
}

// ---------------------------------------------------------------- Rust

/// One Rust file, read.
struct RustModule {
    /// Paths it names outside its table of contents, each as segments.
    paths: Vec<(Vec<String>, Vec<String>)>,
    /// Name -> the path it re-exports (`pub use a::B;`), unresolved, with
    /// the module it is relative to.
    reexports: BTreeMap<String, (Vec<String>, Vec<String>)>,
}

/// Reads the graph of the crate whose `src` folder is `src`.
///
/// # Errors
/// A folder or file that cannot be read.
pub fn read(src: &Path) -> Result<Graph, String> {
    let mut files = Vec::new();
    collect(src, "rs", &mut files)?;
    let mut modules = BTreeMap::new();
    for f in &files {
        // The crate roots (`lib.rs`, `main.rs`) are tables of contents, no nodes.
        let Some(path) = rust_module(src, f).filter(|p| !p.is_empty()) else { continue };
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        modules.insert(path.clone(), scan_rust(&strip_rust(&text), &path));
    }
    // The roots' `pub use` lead names to their modules as well.
    let mut roots = BTreeMap::new();
    for root in ["lib.rs", "main.rs"] {
        if let Ok(text) = std::fs::read_to_string(src.join(root)) {
            roots.extend(scan_rust(&strip_rust(&text), &[]).reexports);
        }
    }
    let nodes: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let resolver = Resolver { nodes: &nodes, modules: &modules, roots: &roots };
    let mut graph = Graph::new();
    for (from, m) in &modules {
        let named = graph.entry(from.join("::")).or_default();
        for (base, path) in &m.paths {
            let Some(abs) = absolute(base, path, &nodes) else { continue };
            if let Some(to) = resolver.node(&abs, 0).filter(|to| to != from) {
                named.insert(to.join("::"));
            }
        }
    }
    Ok(graph)
}

struct Resolver<'a> {
    nodes: &'a BTreeSet<Vec<String>>,
    modules: &'a BTreeMap<Vec<String>, RustModule>,
    roots: &'a BTreeMap<String, (Vec<String>, Vec<String>)>,
}

impl Resolver<'_> {
    /// The module an absolute path leads to: the longest prefix that is a
    /// module, unless the next segment is a name that module re-exports.
    fn node(&self, abs: &[String], depth: usize) -> Option<Vec<String>> {
        let k = (0..=abs.len()).rev().find(|&k| k == 0 || self.nodes.contains(&abs[..k]))?;
        let reexports = if k == 0 { Some(self.roots) } else { self.modules.get(&abs[..k]).map(|m| &m.reexports) };
        if let (Some(name), Some(reexports)) = (abs.get(k), reexports) {
            if let Some((base, target)) = reexports.get(name).filter(|_| depth < 8) {
                if let Some(mut to) = absolute(base, target, self.nodes) {
                    to.extend(abs[k + 1..].iter().cloned());
                    return self.node(&to, depth + 1);
                }
            }
        }
        (k > 0).then(|| abs[..k].to_vec())
    }
}

/// `path` named in module `base`, made absolute (`crate::`, `super::`,
/// `self::`, a child module); `None` for other crates and local names.
fn absolute(base: &[String], path: &[String], nodes: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut out: Vec<String>;
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" => out = Vec::new(),
        "self" => out = base.to_vec(),
        "super" => {
            out = base.to_vec();
            out.pop()?;
            while rest.first().is_some_and(|s| s == "super") {
                out.pop()?;
                rest = &rest[1..];
            }
        }
        _ => {
            let mut child = base.to_vec();
            child.push(first.clone());
            if !nodes.contains(&child) {
                return None;
            }
            out = base.to_vec();
            rest = path;
        }
    }
    out.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(out)
}

fn collect(dir: &Path, ext: &str, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            collect(&path, ext, files)?;
        } else if path.extension().is_some_and(|x| x == ext) {
            files.push(path);
        }
    }
    Ok(())
}

/// `reader.rs` and `reader/mod.rs` are `[reader]`, `reader/open.rs` is
/// `[reader, open]`; `lib.rs` and `main.rs` are the crate root `[]`.
fn rust_module(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") || (parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main")) {
        parts.pop();
    }
    Some(parts)
}

/// `text` without comments, string and character literals (kept as
/// blanks), so that neither braces nor paths inside them count.
fn strip_rust(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !b[..i].last().is_some_and(|p| ident_char(*p))
        {
            // A raw string: r"..", r#".."#.
            let mut j = i + 1;
            while b.get(j) == Some(&'#') {
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            j += 1;
            while j < b.len() && !(b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#'))) {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            // A character literal, not a lifetime.
            i += 1;
            while i < b.len() && b[i] != '\'' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of one module's code (inline modules as modules of their own,
/// which resolve to the same file), and its `pub use` re-exports.
fn scan_rust(code: &str, module: &[String]) -> RustModule {
    let mut m = RustModule { paths: Vec::new(), reexports: BTreeMap::new() };
    scan_into(code, module, &mut m);
    m
}

fn scan_into(code: &str, module: &[String], m: &mut RustModule) {
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut i = 0;
    let mut plain = String::new();
    while i < chars.len() {
        let (at, c) = chars[i];
        let starts_word = ident_char(c) && (i == 0 || !ident_char(chars[i - 1].1));
        if starts_word {
            let rest = &code[at..];
            // `mod name { .. }`: an inline module, scanned as its own.
            if let Some(after) = rest.strip_prefix("mod ") {
                let name = ident(after.trim_start()).unwrap_or("");
                let tail = after.trim_start()[name.len()..].trim_start();
                if !name.is_empty() && tail.starts_with('{') {
                    let open = code.len() - tail.len();
                    let body_end = matching_brace(&code[open + 1..]).map_or(code.len(), |e| open + 1 + e);
                    let mut inner = module.to_vec();
                    inner.push(name.to_string());
                    scan_into(&code[open + 1..body_end], &inner, m);
                    i = chars.partition_point(|(p, _)| *p <= body_end);
                    continue;
                }
                // `mod name;` declares, it does not name.
                let end = rest.find(';').map_or(code.len(), |e| at + e + 1);
                i = chars.partition_point(|(p, _)| *p < end);
                continue;
            }
            // `pub use ..;`, `pub(crate) use ..;`: a table of contents.
            let reexport = rest.strip_prefix("pub").map(str::trim_start).and_then(|r| {
                let r = match r.strip_prefix('(') {
                    Some(v) => v[v.find(')')? + 1..].trim_start(),
                    None => r,
                };
                r.strip_prefix("use ")
            });
            if let Some(statement) = reexport {
                let end = statement.find(';').unwrap_or(statement.len());
                let base = module.to_vec();
                for (path, alias) in use_tree(&statement[..end]) {
                    if let Some(name) = alias.or_else(|| path.last().cloned()).filter(|n| n != "*" && n != "self") {
                        m.reexports.insert(name, (base.clone(), path));
                    }
                }
                let stop = code.len() - statement.len() + end;
                i = chars.partition_point(|(p, _)| *p < stop);
                continue;
            }
        }
        plain.push(c);
        i += 1;
    }
    for path in paths_in(&plain) {
        m.paths.push((module.to_vec(), path));
    }
}

/// Every `a::b::c` path of `code` (at least two segments; `use` groups
/// expanded), `$crate::` and paths after `::` or `.` skipped.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let c = rest.chars().next().unwrap_or(' ');
        let prev = code[..i].chars().next_back();
        if ident_char(c) && !prev.is_some_and(|p| ident_char(p) || p == '$' || p == ':') {
            let id = ident(rest).unwrap_or("");
            let after = &rest[id.len()..];
            if after.starts_with("::") {
                let tree_end = path_end(rest);
                for (path, _) in use_tree(&rest[..tree_end]) {
                    if path.len() > 1 {
                        out.push(path);
                    }
                }
                i += tree_end.max(id.len());
                continue;
            }
            i += id.len().max(1);
            continue;
        }
        i += c.len_utf8();
    }
    out
}

/// Where the path starting `s` ends: after its last segment or group.
fn path_end(s: &str) -> usize {
    let mut i = 0;
    loop {
        let rest = &s[i..];
        if let Some(group) = rest.strip_prefix('{') {
            return i + 1 + matching_brace(group).map_or(group.len(), |e| e + 1);
        }
        let id = ident(rest).map_or(usize::from(rest.starts_with('*')), str::len);
        if id == 0 {
            return i;
        }
        i += id;
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            return i;
        }
    }
}

/// The paths of a use tree (`a::{b, c::{d as e}}`), each with its alias.
fn use_tree(s: &str) -> Vec<(Vec<String>, Option<String>)> {
    let s = s.trim();
    let mut prefix = Vec::new();
    let mut rest = s;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group).unwrap_or(group.len());
            let mut out = Vec::new();
            for item in split_top_level(&group[..end]) {
                for (mut path, alias) in use_tree(item) {
                    if path.is_empty() {
                        continue;
                    }
                    let mut full = prefix.clone();
                    full.append(&mut path);
                    if full.len() > 1 && full.last().is_some_and(|l| l == "self") {
                        full.pop();
                    }
                    out.push((full, alias));
                }
            }
            return out;
        }
        if rest.starts_with('*') {
            prefix.push("*".to_string());
            return vec![(prefix, None)];
        }
        let Some(id) = ident(rest) else { return if prefix.is_empty() { Vec::new() } else { vec![(prefix, None)] } };
        // `a::{self, b}`: `self` is `a`.
        if id != "self" || prefix.is_empty() {
            prefix.push(id.to_string());
        }
        rest = rest[id.len()..].trim_start();
        if let Some(r) = rest.strip_prefix("::") {
            rest = r.trim_start();
        } else {
            let alias = rest.strip_prefix("as ").and_then(|a| ident(a.trim_start())).map(str::to_string);
            return vec![(prefix, alias)];
        }
    }
}

fn ident(s: &str) -> Option<&str> {
    let end = s.find(|c: char| !ident_char(c)).unwrap_or(s.len());
    (end > 0).then(|| &s[..end])
}

/// The index of the `}` closing a group whose `{` came just before `s`.
fn matching_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn split_top_level(s: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0usize, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    items
}

// -------------------------------------------------------------- Python

/// Reads the import graph of the Python package in folder `pkg` (the
/// folder's name is the package's).
///
/// # Errors
/// A folder or file that cannot be read.
#[cfg(test)]
pub fn read_python(pkg: &Path) -> Result<Graph, String> {
    read_python_across(pkg, "_native", &BTreeSet::new())
}

/// The modules of package `package` that the Rust files under `src`
/// import (`py.import("deathtensors.errors")`), as dotted names.
///
/// # Errors
/// A folder or file that cannot be read.
pub fn native_imports(src: &Path, package: &str) -> Result<BTreeSet<String>, String> {
    let mut files = Vec::new();
    collect(src, "rs", &mut files)?;
    let mut out = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        // `import("x")`, `import_bound("x")`, `PyModule::import(py, "x")`.
        for (at, _) in text.match_indices("import") {
            let rest = &text[at + "import".len()..];
            let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
            let Some(args) = rest.strip_prefix('(') else { continue };
            let args = args.trim_start_matches(|c: char| c != '"' && c != ')');
            let Some(literal) = args.strip_prefix('"').and_then(|a| a.split('"').next()) else { continue };
            let is_module = literal == package
                || literal.strip_prefix(package).is_some_and(|rest| {
                    rest.starts_with('.') && rest[1..].split('.').all(|p| !p.is_empty() && p.chars().all(ident_char))
                });
            if is_module {
                out.insert(literal.to_string());
            }
        }
    }
    Ok(out)
}

/// [`read_python`], with the native module `native` (a module of the
/// package built from Rust) as a node: imports of it are edges to it, and
/// `native_imports` (the package's modules its Rust code imports) edges
/// from it.
///
/// # Errors
/// A folder or file that cannot be read.
pub fn read_python_across(pkg: &Path, native: &str, native_imports: &BTreeSet<String>) -> Result<Graph, String> {
    let name = pkg.file_name().map(|n| n.to_string_lossy().into_owned()).ok_or("no package name")?;
    let mut files = Vec::new();
    collect(pkg, "py", &mut files)?;
    let mut modules = BTreeMap::new();
    let native = format!("{name}.{native}");
    let native_edges: Vec<PyImport> = native_imports
        .iter()
        .map(|m| PyImport { level: 0, module: m.clone(), names: Vec::new(), indented: true })
        .collect();
    modules.insert(native.clone(), (false, native_edges));
    for f in &files {
        let rel = f.strip_prefix(pkg).map_err(|e| e.to_string())?.with_extension("");
        let mut parts = vec![name.clone()];
        parts.extend(rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()));
        let is_package = parts.last().is_some_and(|l| l == "__init__");
        if is_package {
            parts.pop();
        }
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        modules.insert(parts.join("."), (is_package, python_imports(&text)));
    }
    // Names a package's top-level imports re-export: (package, name) -> module.
    let mut reexports = BTreeMap::new();
    for (module, (is_package, imports)) in &modules {
        if !*is_package {
            continue;
        }
        for imp in imports.iter().filter(|i| !i.indented) {
            let Some(from) = resolve_python(module, imp) else { continue };
            for n in &imp.names {
                let target = format!("{from}.{}", n.0);
                let target = if modules.contains_key(&target) { target } else { from.clone() };
                reexports.insert((module.clone(), n.1.clone()), target);
            }
        }
    }
    let mut graph = Graph::new();
    for (module, (is_package, imports)) in &modules {
        let package = if *is_package { module.clone() } else { parent(module) };
        let named = graph.entry(module.clone()).or_default();
        for imp in imports {
            if *is_package && !imp.indented {
                continue;
            }
            let Some(from) = resolve_python(&package, imp) else { continue };
            let mut targets = Vec::new();
            if imp.names.is_empty() {
                targets.push(from.clone());
            }
            for (n, _) in &imp.names {
                let sub = format!("{from}.{n}");
                if modules.contains_key(&sub) {
                    targets.push(sub);
                } else {
                    // Through a package's re-exports to the module that defines the name.
                    let mut at = from.clone();
                    for _ in 0..8 {
                        match reexports.get(&(at.clone(), n.clone())) {
                            Some(next) if *next != at => at = next.clone(),
                            _ => break,
                        }
                    }
                    targets.push(at);
                }
            }
            for t in targets {
                // `import a.b.c` names `a.b.c`, or the longest module it starts with.
                let mut t = t;
                while !modules.contains_key(&t) && t.contains('.') {
                    t = parent(&t);
                }
                if modules.contains_key(&t) && t != *module {
                    named.insert(t);
                }
            }
        }
    }
    Ok(graph)
}

fn parent(module: &str) -> String {
    module.rsplit_once('.').map_or(String::new(), |(p, _)| p.to_string())
}

/// One import statement.
#[derive(Debug, PartialEq)]
struct PyImport {
    /// Leading dots of `from ..x import`; 0 when absolute.
    level: usize,
    /// The module (`x.y`), empty for `from . import a`.
    module: String,
    /// The names of `from .. import a as b`: `(a, b)`; empty for `import x`.
    names: Vec<(String, String)>,
    /// Inside a function, class or block.
    indented: bool,
}

/// The module a `from`/`import` statement in `package` reads from, made
/// absolute; `None` when it is outside (another library).
fn resolve_python(package: &str, imp: &PyImport) -> Option<String> {
    if imp.level == 0 {
        return Some(imp.module.clone());
    }
    let mut base = package.to_string();
    for _ in 1..imp.level {
        base = parent(&base);
    }
    Some(if imp.module.is_empty() { base } else { format!("{base}.{}", imp.module) })
}

/// The import statements of a Python file (those inside triple-quoted
/// strings skipped).
fn python_imports(text: &str) -> Vec<PyImport> {
    let mut out = Vec::new();
    let mut in_string: Option<&str> = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(q) = in_string {
            if line.contains(q) {
                in_string = None;
            }
            continue;
        }
        let trimmed = line.trim_start();
        for q in ["\"\"\"", "'''"] {
            if trimmed.matches(q).count() % 2 == 1 {
                in_string = Some(q);
            }
        }
        if in_string.is_some() {
            continue;
        }
        let indented = trimmed.len() != line.len();
        let mut statement = trimmed.split('#').next().unwrap_or("").trim_end().to_string();
        if !(statement.starts_with("from ") || statement.starts_with("import ")) {
            continue;
        }
        while statement.contains('(') && !statement.contains(')') || statement.ends_with('\\') {
            let Some(next) = lines.next() else { break };
            statement = statement.trim_end_matches('\\').to_string();
            statement.push(' ');
            statement.push_str(next.split('#').next().unwrap_or("").trim());
        }
        if let Some(rest) = statement.strip_prefix("from ") {
            let Some((module, names)) = rest.split_once(" import ") else { continue };
            let module = module.trim();
            let level = module.len() - module.trim_start_matches('.').len();
            let names = names.trim().trim_start_matches('(').trim_end_matches(')');
            let names = names.split(',').filter_map(|n| {
                let mut w = n.split_whitespace();
                let name = w.next()?.to_string();
                let alias = if w.next() == Some("as") { w.next().map(str::to_string) } else { None };
                Some((name.clone(), alias.unwrap_or(name)))
            });
            out.push(PyImport {
                level,
                module: module.trim_start_matches('.').to_string(),
                names: names.collect(),
                indented,
            });
        } else if let Some(rest) = statement.strip_prefix("import ") {
            for part in rest.split(',') {
                let module = part.split_whitespace().next().unwrap_or("").to_string();
                out.push(PyImport { level: 0, module, names: Vec::new(), indented });
            }
        }
    }
    out
}

// -------------------------------------------------------------- circles

/// Every circle of the graph, each as the modules on it (the strongly
/// connected components of more than one module).
pub fn circles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm, recursive: module graphs are small.
    struct State<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    }

    /// A fresh folder holding `files` (path, text), removed when dropped.
    struct Tree(PathBuf);

    impl Tree {
        fn new(tag: &str, files: &[(&str, &str)]) -> Tree {
            let dir = std::env::temp_dir().join(format!("xtask-modgraph-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            for (path, text) in files {
                let path = dir.join(path);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
            Tree(dir)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn edges(g: &Graph) -> Vec<String> {
        g.iter().flat_map(|(a, bs)| bs.iter().map(move |b| format!("{a}->{b}"))).collect()
    }

    #[test]
    fn paths_and_groups_are_read_whole() {
        let code = strip_rust(
            "use crate::error::{Error, Result};\nuse crate::{par::chunks, trust::{self, Trust}, options};\n\
             fn f() { crate::mmap::Mmap::new(); $crate::x(); deathtensors_io::y(); let c = '{'; \"crate::z\"; }",
        );
        let paths: Vec<String> = paths_in(&code).iter().map(|p| p.join("::")).collect();
        assert_eq!(
            paths,
            [
                "crate::error::Error",
                "crate::error::Result",
                "crate::par::chunks",
                "crate::trust",
                "crate::trust::Trust",
                "crate::options",
                "crate::mmap::Mmap::new",
                "deathtensors_io::y"
            ]
        );
    }

    #[test]
    fn circles_are_found_and_chains_are_not() {
        assert!(circles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
        let found = circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d")]));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.contains(&vec!["a".to_string(), "b".into(), "c".into()]));
        assert!(found.contains(&vec!["d".to_string(), "e".into()]));
    }

    /// Files inside a folder module are nodes of their own; `super::`,
    /// `self::`, child names and re-exports lead where they should; `mod`
    /// and `pub use` lines and inline test modules add no edge.
    #[test]
    fn rust_files_are_nodes_and_paths_resolve() {
        let tree = Tree::new(
            "rust-resolve",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\npub use crate::c::Gamma;\n"),
                ("a.rs", "mod x;\nmod y;\npub use x::X;\nfn f() { y::g(); }\n"),
                ("a/x.rs", "use super::super::b::B;\npub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n"),
                ("a/y.rs", "use crate::Gamma;\npub fn g() { self::h(); }\nfn h() {}\n"),
                ("b/mod.rs", "pub struct B;\nfn f() { let _ = crate::a::X; }\n"),
                ("c.rs", "pub struct Gamma;\n"),
            ],
        );
        let g = read(&tree.0).unwrap();
        assert_eq!(edges(&g), ["a->a::y", "a::x->b", "a::y->c", "b->a::x"]);
        assert_eq!(circles(&g), [vec!["a::x".to_string(), "b".into()]]);
    }

    /// The check fails on a Rust circle made on purpose, even one inside a
    /// folder module.
    #[test]
    fn a_rust_circle_is_caught() {
        let tree = Tree::new(
            "rust-circle",
            &[
                ("main.rs", "mod cmd;\nfn main() {}\n"),
                ("cmd.rs", "mod verify;\nmod sharded;\npub fn report() {}\n"),
                ("cmd/verify.rs", "pub fn run() { super::sharded::run(); }\n"),
                ("cmd/sharded.rs", "use crate::cmd::verify;\npub fn run() {}\nfn again() { verify::run(); }\n"),
            ],
        );
        let found = circles(&read(&tree.0).unwrap());
        assert_eq!(found, [vec!["cmd::sharded".to_string(), "cmd::verify".into()]]);
    }

    #[test]
    fn python_imports_are_read() {
        let text = "from . import _a\nfrom ._b import (\n    x,\n    y as z,\n)\nimport deathtensors._c as c, os\n\
                    \"\"\"\nfrom ._d import nothing\n\"\"\"\ndef f():\n    from .._e import g  # lazy\n";
        let got = python_imports(text);
        let short: Vec<(usize, &str, usize, bool)> =
            got.iter().map(|i| (i.level, i.module.as_str(), i.names.len(), i.indented)).collect();
        assert_eq!(
            short,
            [
                (1, "", 1, false),
                (1, "_b", 2, false),
                (0, "deathtensors._c", 0, false),
                (0, "os", 0, false),
                (2, "_e", 1, true)
            ]
        );
        assert_eq!(got[1].names[1], ("y".to_string(), "z".to_string()));
    }

    /// The check fails on a Python circle made on purpose, relative or
    /// absolute, through a function-local import and through a package's
    /// re-exports; the `__init__.py` table of contents adds no edge.
    #[test]
    fn a_python_circle_is_caught() {
        let tree = Tree::new(
            "python-circle",
            &[
                ("pkg/__init__.py", "from ._a import a\nfrom .sub import b\n"),
                ("pkg/_a.py", "import os\nfrom .sub._b import b\n\ndef a():\n    return b()\n"),
                ("pkg/sub/__init__.py", "from ._b import b\n"),
                ("pkg/sub/_b.py", "def b():\n    from pkg import a  # lazy\n    return a\n"),
                ("pkg/_c.py", "import pkg.sub\n"),
            ],
        );
        let g = read_python(&tree.0.join("pkg")).unwrap();
        assert_eq!(edges(&g), ["pkg._a->pkg.sub._b", "pkg._c->pkg.sub", "pkg.sub._b->pkg._a"]);
        assert_eq!(circles(&g), [vec!["pkg._a".to_string(), "pkg.sub._b".into()]]);
    }

    /// The seam: a native module that imports the package back makes a
    /// circle with every module that imports it; a module's name in another
    /// string is no import.
    #[test]
    fn a_circle_across_the_seam_is_caught() {
        let tree = Tree::new(
            "seam-circle",
            &[
                (
                    "src/errors.rs",
                    "fn c(py: Python) { py.import(\"pkg.errors\")?; d.set(\"__module__\", \"pkg.x\"); }\n",
                ),
                ("src/other.rs", "fn f() { PyModule::import(py, \"sys\"); }\n"),
                ("pkg/__init__.py", "from .errors import E\n"),
                ("pkg/errors.py", "from ._native import E\n"),
                ("pkg/x.py", "from . import _native\n"),
            ],
        );
        let seam = native_imports(&tree.0.join("src"), "pkg").unwrap();
        assert_eq!(seam.iter().collect::<Vec<_>>(), ["pkg.errors"]);
        let g = read_python_across(&tree.0.join("pkg"), "_native", &seam).unwrap();
        assert_eq!(edges(&g), ["pkg._native->pkg.errors", "pkg.errors->pkg._native", "pkg.x->pkg._native"]);
        assert_eq!(circles(&g), [vec!["pkg._native".to_string(), "pkg.errors".into()]]);
        let none = read_python_across(&tree.0.join("pkg"), "_native", &BTreeSet::new()).unwrap();
        assert!(circles(&none).is_empty());
    }

    /// No circle anywhere in the house: every crate of the workspace, file
    /// by file, and the Python package.
    #[test]
    fn the_house_has_no_module_circle() {
        let found = house(&crate::util::root()).unwrap();
        assert!(found.is_empty(), "modules naming each other in a circle:\n{}", found.join("\n"));
    }
}
