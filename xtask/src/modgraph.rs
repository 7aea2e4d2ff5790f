//! The module graph of a crate: which of its top-level modules name which
//! (`use crate::x`, `crate::x::f`), and the circles in it. A circle means
//! two ideas that cannot be understood (or changed) one without the other;
//! the crates where layering matters are kept free of them by a test here.
//! A folder module (`reader/`) is one node: its files may name each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module -> the top-level modules it names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Reads the graph of the crate whose `src` folder is `src`.
///
/// # Errors
/// A folder or file that cannot be read.
pub fn read(src: &Path) -> Result<Graph, String> {
    let mut files = Vec::new();
    collect(src, &mut files)?;
    let mut modules = BTreeSet::new();
    for f in &files {
        if let Some(m) = top_module(src, f) {
            modules.insert(m);
        }
    }
    // `crate::Reader` names the module `lib.rs` re-exports it from.
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let reexported = reexports(&lib);
    let mut graph = Graph::new();
    for f in &files {
        let Some(from) = top_module(src, f) else { continue };
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        // Doc links (`[`crate::Reader`]`) name, but do not use.
        let code: String = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
        let named = graph.entry(from.clone()).or_default();
        for name in named_modules(&code) {
            let to = if modules.contains(&name) { Some(name) } else { reexported.get(&name).cloned() };
            if let Some(to) = to.filter(|to| *to != from && modules.contains(to)) {
                named.insert(to);
            }
        }
    }
    Ok(graph)
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// `reader.rs`, `reader/mod.rs` and `reader/open.rs` are all `reader`;
/// `lib.rs` (the table of contents) is no module of its own.
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// The first segment of every `crate::` path in `text`, `use crate::{a,
/// b::c}` groups included.
fn named_modules(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        // `deathtensors_io::crate::` does not occur; `$crate::` (macros) is skipped.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group).unwrap_or(group.len());
            for item in split_top_level(&group[..end]) {
                if let Some(id) = ident(item.trim_start()) {
                    out.insert(id.to_string());
                }
            }
        } else if let Some(id) = ident(rest) {
            out.insert(id.to_string());
        }
    }
    out
}

/// Name -> module, for every name of `lib.rs`'s `pub use crate::{...}`.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = lib;
    while let Some(at) = rest.find("pub use crate::") {
        rest = &rest[at + "pub use crate::".len()..];
        let end = rest.find(';').unwrap_or(rest.len());
        let statement = &rest[..end];
        let items = match statement.strip_prefix('{') {
            Some(group) => split_top_level(&group[..matching_brace(group).unwrap_or(group.len())]),
            None => vec![statement],
        };
        for item in items {
            let item = item.trim();
            let Some(module) = ident(item) else { continue };
            let names = item[module.len()..].split(|c: char| !(c.is_alphanumeric() || c == '_'));
            for name in names.filter(|n| !n.is_empty() && *n != "self" && *n != "as") {
                out.insert(name.to_string(), module.to_string());
            }
        }
    }
    out
}

fn ident(s: &str) -> Option<&str> {
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len());
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

    #[test]
    fn paths_and_groups_name_their_first_segment() {
        let text = "use crate::error::{Error, Result};\nuse crate::{par::chunks, trust::{self, Trust}, options};\n\
                    fn f() { crate::mmap::Mmap::new(); $crate::x(); deathtensors_io::y(); }";
        let named: Vec<String> = named_modules(text).into_iter().collect();
        assert_eq!(named, ["error", "mmap", "options", "par", "trust"]);
    }

    #[test]
    fn reexported_names_lead_to_their_module() {
        let lib = "mod a;\npub use crate::{\n    a::{Alpha, beta as b},\n    c::Gamma,\n};\npub use crate::d::Delta;";
        let map = reexports(lib);
        assert_eq!(map.get("Alpha").map(String::as_str), Some("a"));
        assert_eq!(map.get("b").map(String::as_str), Some("a"));
        assert_eq!(map.get("Gamma").map(String::as_str), Some("c"));
        assert_eq!(map.get("Delta").map(String::as_str), Some("d"));
    }

    #[test]
    fn circles_are_found_and_chains_are_not() {
        assert!(circles(&graph(&[("a", "b"), ("b", "c")])).is_empty());
        let found = circles(&graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d")]));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.contains(&vec!["a".to_string(), "b".into(), "c".into()]));
        assert!(found.contains(&vec!["d".to_string(), "e".into()]));
    }

    /// The layering of issue #33: options are built and validated in one
    /// place and passed down, so the modules of io and of the bindings form
    /// no circle (a folder module is one node).
    #[test]
    fn io_and_the_bindings_have_no_module_circle() {
        let root = crate::util::root();
        for src in ["crates/io/src", "bindings/python/src"] {
            let found = circles(&read(&root.join(src)).unwrap());
            assert!(found.is_empty(), "{src}: modules naming each other in a circle: {found:?}");
        }
    }
}
