//! What bounds a policy's stack where no child process can hold it (off
//! Linux): Rust cannot catch a stack overflow, so a policy whose
//! evaluation could overflow is refused before it runs. The engine's
//! depth grows with brackets nested in the text and with rules calling
//! rules; both are bounded here, on the policy's tokens:
//!
//! - no rule or function calls itself, directly or through others (Rego
//!   forbids recursion: OPA refuses such a module; regorus does not check
//!   functions, and `f(x) := f(x + 1)` overflows its stack);
//! - no chain of rules calling rules is longer than [`MAX_CHAIN`];
//! - brackets nest at most [`MAX_NESTING`] deep.
//!
//! Names are matched as words, so a local variable named as a rule counts
//! as a call: a policy is then refused that OPA would take (fail closed).

use std::collections::BTreeMap;

/// The deepest nesting of brackets (`(`, `[`, `{`) a policy may use.
pub(super) const MAX_NESTING: usize = 32;

/// The longest chain of rules calling rules.
pub(super) const MAX_CHAIN: usize = 32;

/// Why `rego` is refused, or `None` if its depth is bounded.
pub(super) fn check(rego: &str) -> Option<String> {
    let tokens = match tokens(rego) {
        Ok(t) => t,
        Err(why) => return Some(why),
    };
    // Statements start at depth 0 on a new line; a rule's name is the first
    // word of its statement (after `default`).
    let mut rules: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut current: Option<&str> = None;
    let mut depth = 0usize;
    let mut line_start = true;
    let mut head_word = 0;
    for t in &tokens {
        match *t {
            Token::Open => depth += 1,
            Token::Close => depth = depth.saturating_sub(1),
            Token::Newline => {
                if depth == 0 {
                    line_start = true;
                    head_word = 0;
                }
                continue;
            }
            Token::Word(w) => {
                if line_start && depth == 0 && head_word == 0 && w == "default" {
                    head_word = 1;
                    continue;
                }
                if line_start && depth == 0 && !matches!(w, "else" | "if" | "contains") {
                    current = if matches!(w, "package" | "import") { None } else { Some(w) };
                    if let Some(name) = current {
                        rules.entry(name).or_default();
                    }
                    line_start = false;
                    continue;
                }
                if let Some(rule) = current {
                    rules.entry(rule).or_default().push(w);
                }
            }
            Token::Other => {}
        }
        line_start = false;
    }
    if depth > 0 {
        return None; // unbalanced: the parser says what is wrong
    }
    // Longest chain from each rule, refusing a cycle.
    let mut longest: BTreeMap<&str, usize> = BTreeMap::new();
    for rule in rules.keys() {
        if let Err(why) = chain(rule, &rules, &mut longest, &mut Vec::new()) {
            return Some(why);
        }
    }
    None
}

/// The length of the longest chain of calls from `rule`.
fn chain<'a>(
    rule: &'a str,
    rules: &BTreeMap<&'a str, Vec<&'a str>>,
    longest: &mut BTreeMap<&'a str, usize>,
    path: &mut Vec<&'a str>,
) -> Result<usize, String> {
    if let Some(&n) = longest.get(rule) {
        return Ok(n);
    }
    if let Some(from) = path.iter().position(|r| *r == rule) {
        let cycle = [&path[from..], &[rule]].concat();
        return Err(format!("it recurses ({}), which Rego forbids", cycle.join(" -> ")));
    }
    if path.len() >= MAX_CHAIN {
        return Err(format!("its rules call each other more than {MAX_CHAIN} deep"));
    }
    path.push(rule);
    let mut n = 0;
    for called in rules.get(rule).into_iter().flatten().filter(|w| rules.contains_key(*w)) {
        n = n.max(1 + chain(called, rules, longest, path)?);
    }
    path.pop();
    longest.insert(rule, n);
    Ok(n)
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Token<'a> {
    Word(&'a str),
    Open,
    Close,
    Newline,
    Other,
}

/// The policy's tokens, comments and strings left out; why it is refused
/// if brackets nest deeper than [`MAX_NESTING`].
fn tokens(rego: &str) -> Result<Vec<Token<'_>>, String> {
    let bytes = rego.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'`' {
                    i += 1;
                }
            }
            b'\n' => out.push(Token::Newline),
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(format!("its brackets nest more than {MAX_NESTING} deep"));
                }
                out.push(Token::Open);
            }
            b')' | b']' | b'}' => {
                depth = depth.saturating_sub(1);
                out.push(Token::Close);
            }
            _ if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                out.push(Token::Word(&rego[start..i]));
                continue;
            }
            _ if c.is_ascii_whitespace() => {}
            _ => out.push(Token::Other),
        }
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recursion_direct_or_through_others_is_refused() {
        let direct = "package model\nimport rego.v1\nf(x) := f(x + 1)\nallow if f(1) > 0\n";
        assert!(check(direct).is_some_and(|e| e.contains("recurses (f -> f)")), "{:?}", check(direct));
        let mutual = "package model\nimport rego.v1\na(x) := b(x)\nb(x) := a(x)\nallow if a(1)\n";
        assert!(check(mutual).is_some_and(|e| e.contains("recurses")), "{:?}", check(mutual));
    }

    #[test]
    fn ordinary_policies_pass() {
        for rego in [
            "package model\nimport rego.v1\ndefault allow := false\nallow if input.user == \"alice\"\n",
            "package model\nimport rego.v1\nadmin(u) if u in {\"a\", \"b\"}\nallow if admin(input.user)\n\
             # allow calls allow in a comment\nallow if { x := \"allow\"; x != \"\" }\n",
            "package model\nallow if {\n  input.n > 1\n} else = false\n",
        ] {
            assert_eq!(check(rego), None, "{rego}");
        }
    }

    #[test]
    fn long_chains_and_deep_nesting_are_refused() {
        let mut rego = String::from("package model\nimport rego.v1\n");
        for k in 0..=MAX_CHAIN {
            rego.push_str(&format!("r{k} if r{}\n", k + 1));
        }
        rego.push_str(&format!("r{} := true\nallow if r0\n", MAX_CHAIN + 1));
        assert!(check(&rego).is_some_and(|e| e.contains("deep")), "{:?}", check(&rego));
        let nested =
            format!("package model\nallow if {}1{}\n", "(".repeat(MAX_NESTING + 1), ")".repeat(MAX_NESTING + 1));
        assert!(check(&nested).is_some_and(|e| e.contains("nest")), "{:?}", check(&nested));
    }
}
