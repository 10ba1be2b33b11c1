//! The library's modules form layers (src/lib.rs lists them from the top
//! down): a module uses only modules of its own layer or further down, and
//! no module reaches itself through others. The edges are the `crate::X`
//! paths of the non-test code of each top-level module of src/ (comments,
//! strings, `#[cfg(test)]` code and test files left out). No root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers of src/lib.rs's module list, from the top down.
const LAYERS: &[&[&str]] = &[
    &["daemon"],
    &["tools", "filter_report", "replay", "metrics", "status"],
    &["control"],
    &[
        "dataplane",
        "neighbours",
        "health",
        "weights",
        "cluster",
        "routing",
    ],
    &["netlink", "filters"],
    &["config", "features"],
    &["table", "packet", "quic_lb", "report"],
    &[
        "hash", "prefix", "types", "limits", "abi_sys", "clock", "split",
    ],
];

/// `text` without comments, string and character-literal contents, and
/// without the items under `#[cfg(test)]` (a `mod` to its closing brace,
/// any other item to the end of its line or block).
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            i += 2;
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A character literal ('"', '\''): skipped; a lifetime is not.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    without_test_items(&out)
}

/// `code` (comments and strings gone) without each item that follows a
/// `#[cfg(test)]`: up to the end of its first `{...}` block if one opens
/// before a `;` ends it, else up to the `;`.
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let mut depth = 0usize;
        let mut end = item.len();
        for (j, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = j + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The modules `code` names as `crate::X`, `crate::{X, Y::..}`, or, in a
/// top-level file (`top`: whose parent is the crate root), `super::X`.
fn uses(code: &str, top: bool) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut prefixes = vec!["crate::"];
    if top {
        prefixes.push("super::");
    }
    for p in prefixes {
        for (at, m) in code.match_indices(p) {
            let after = &code[at + m.len()..];
            if let Some(group) = after.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                out.extend(inner.split(',').map(ident));
            } else {
                out.insert(ident(after));
            }
        }
    }
    out.retain(|m| !m.is_empty() && m != "self");
    out
}

/// Module -> the modules its non-test code uses (itself left out).
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "tests" {
                    walk(&p, files);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                files.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if top == "main" || top == "lib" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        // A file directly in src/ has the crate root as its parent.
        let at_root = rel.components().count() == 1;
        let entry = g.entry(top.clone()).or_default();
        entry.extend(uses(&code, at_root).into_iter().filter(|m| *m != top));
    }
    g
}

/// A cycle of `g`, if it has one (a path that returns to its start).
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn dfs(
        g: &BTreeMap<String, BTreeSet<String>>,
        v: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == v) {
            let mut c = path[at..].to_vec();
            c.push(v.to_string());
            return Some(c);
        }
        if done.contains(v) {
            return None;
        }
        path.push(v.to_string());
        for w in g.get(v).into_iter().flatten() {
            if let Some(c) = dfs(g, w, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(v.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys().find_map(|v| dfs(g, v, &mut Vec::new(), &mut done))
}

fn layer_of(m: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&m))
}

#[test]
fn modules_use_only_their_layer_and_those_below_without_cycles() {
    let g = edges(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let n: usize = g.values().map(BTreeSet::len).sum();
    assert!(n >= 60, "only {n} edges found: the scan is broken");
    let mut wrong = Vec::new();
    for (from, tos) in &g {
        let Some(lf) = layer_of(from) else {
            wrong.push(format!("{from} is in no layer of LAYERS (src/lib.rs)"));
            continue;
        };
        for to in tos {
            match layer_of(to) {
                None => wrong.push(format!("{to} (used by {from}) is in no layer")),
                Some(lt) if lt < lf => {
                    wrong.push(format!("{from} (layer {lf}) uses {to} (layer {lt}, above)"))
                }
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(cycle(&g), None, "an import cycle");
}

#[test]
fn the_scan_sees_uses_and_cycles() {
    let code = code_of(
        "use crate::a::X; // crate::b\n/* crate::c */ let s = \"crate::d\"; crate::e::f();\n#[cfg(test)] mod t { use crate::g; fn f() { crate::g2::x(); } }\n#[cfg(test)] use crate::h;\nuse crate::{i, j::K};\nlet q = '\"'; use super::k;\n#[cfg(test)]\nconst X: u8 = 1;\nuse crate::l;",
    );
    assert_eq!(
        uses(&code, true).into_iter().collect::<Vec<_>>(),
        ["a", "e", "i", "j", "k", "l"],
        "{code}"
    );
    assert!(!uses(&code, false).contains("k"), "super:: below the root");
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .iter()
        .map(|(f, t)| (f.to_string(), [t.to_string()].into()))
        .collect();
    assert_eq!(
        cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
