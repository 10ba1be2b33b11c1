//! What the repository cites exists: every citation of a document
//! (`docs/<name>.md "Section"`, README's sections) names a file and a
//! heading it has, and every source path a comment or a document names is
//! a file of the repository. (That the docs list what the tools print:
//! tests/docs_agree.rs.) No root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

// Citations
//
// The repository cites documents by file and section, the way a reader
// looks them up: `docs/design.md "Maps"`, `docs/config.md, "Panic
// threshold"`, `(docs/operations.md), "Health-check cost"`, a list
// `docs/design.md ("Packet path", "Second chance (TC)")`, `docs/operations.md
// section 3`, a link `docs/config.md#filters`, and README's sections as
// `README "GUE wire format"` or `README.md "Packet path"`. Comments and
// documents name source files the same way (src/abi_sys.rs, bpf/nilb.h,
// netns-harness/lib.sh). Sections and files get renamed and moved; these
// tests keep every such name pointing at something that exists.

/// The directories never read: build output, git's own, and what the
/// repository's .gitignore ignores by a plain name (`/target`,
/// `/netns-harness/out/`, `__pycache__/`): (paths from the root, names
/// anywhere).
fn ignored() -> (Vec<String>, Vec<String>) {
    let mut rooted = vec!["target".to_string(), ".git".to_string()];
    let mut names = Vec::new();
    for line in read(".gitignore").lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', '!']) || line.contains(['*', '?', '[']) {
            continue;
        }
        let path = line.trim_end_matches('/');
        match path.strip_prefix('/') {
            Some(p) => rooted.push(p.to_string()),
            None if !path.contains('/') => names.push(path.to_string()),
            None => {}
        }
    }
    (rooted, names)
}

/// Every text file of the working tree (not only what git tracks: a new
/// file cites as much as a committed one), as (path from the root with `/`
/// separators, text), in path order. Files that are not UTF-8 (captures,
/// images) are left out.
fn repo_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (rooted, names) = ignored();
    let mut out = Vec::new();
    let mut dirs = vec![String::new()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                if !rooted.contains(&rel) && !names.contains(&name) {
                    dirs.push(rel);
                }
            } else if kind.is_file() {
                if let Ok(text) = std::fs::read_to_string(entry.path()) {
                    out.push((rel, text));
                }
            }
        }
    }
    out.sort();
    out
}

/// The headings of a Markdown text: the text after one to six `#` and a
/// space, trimmed, outside fenced code blocks.
fn headings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !fenced && (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
            out.push(line[hashes..].trim().to_string());
        }
    }
    out
}

/// A heading without its section number: "6. Troubleshooting" is
/// "Troubleshooting".
fn unnumbered(heading: &str) -> &str {
    let digits = heading.len()
        - heading
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    match heading[digits..].strip_prefix(". ") {
        Some(rest) if digits > 0 => rest,
        _ => heading,
    }
}

/// The rule for a quoted section: `cited` names `heading` when the
/// heading, with or without its section number, begins with the cited
/// text (case and backticks as written, runs of white space as one space)
/// and the next character, if any, is not a letter or digit. So "Panic
/// threshold" names "Panic threshold and fail-open", "QUIC-LB" names
/// "QUIC-LB (`quic_lb`)", "Several balancers" names "7. Several balancers";
/// "Cluster" does not name "IPv6 cluster network", nor "Edge filters"
/// "Filters", nor "Hash" "Hashing".
fn heading_names(heading: &str, cited: &str) -> bool {
    [heading, unnumbered(heading)].iter().any(|h| {
        h.strip_prefix(cited)
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_alphanumeric()))
    })
}

/// GitHub's anchor of a heading: lower case, letters, digits, `-` and `_`
/// kept, spaces made `-`, everything else dropped; a repeated heading gets
/// `-1`, `-2`, ...
fn anchors(headings: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for h in headings {
        let slug: String = h
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// One citation of a document.
#[derive(Debug, PartialEq)]
struct Citation {
    /// `path:line` of the citing file.
    at: String,
    /// The cited file from the root: `docs/<name>.md` or `README.md`.
    file: String,
    /// The quoted sections, white space made single spaces.
    sections: Vec<String>,
    /// `section N`.
    number: Option<u32>,
    /// `#anchor` of a link.
    anchor: Option<String>,
}

fn is_path_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'/' | b'-')
}

fn is_name_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-')
}

/// Past white space that may run on to the next line, and there past the
/// indentation and a comment's leader (`//!`, `///`, `//`, `*`, `#`), as
/// a citation wraps in a comment.
fn skip_gap(b: &[u8], mut i: usize) -> usize {
    loop {
        while i < b.len() && matches!(b[i], b' ' | b'\t') {
            i += 1;
        }
        if i < b.len() && b[i] == b'\n' {
            i += 1;
            while i < b.len() && matches!(b[i], b' ' | b'\t') {
                i += 1;
            }
            for leader in ["//!", "///", "//", "#"] {
                if b[i..].starts_with(leader.as_bytes()) {
                    i += leader.len();
                    break;
                }
            }
            if b[i..].starts_with(b"*") && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            continue;
        }
        return i;
    }
}

/// A quoted section's text as a reader sees it: line breaks, comment
/// leaders and indentation of a wrapped citation made single spaces.
fn squeeze(raw: &str) -> String {
    let mut words = Vec::new();
    for (k, line) in raw.split('\n').enumerate() {
        let mut line = line.trim();
        if k > 0 {
            for leader in ["//!", "///", "//", "#", "*"] {
                if let Some(rest) = line.strip_prefix(leader) {
                    line = rest;
                    break;
                }
            }
        }
        words.extend(line.split_whitespace());
    }
    words.join(" ")
}

/// The citations in `text` of the file `path`. A citation starts with a
/// document's path, `docs/<name>.md` or `README.md` (or plain `README`), not
/// preceded by a path character (so `netns-harness/README.md` and
/// `/usr/share/doc/nilb/docs/x.md` are not citations of these). Then, in
/// this order: an optional `#anchor`; an optional `)` and an optional `,`;
/// white space, which may wrap to the next line of a comment; an optional
/// `(`; and a section: a quoted text (`"..."`, or `\"...\"` inside a
/// string literal), several of them separated by `, `, or `section N`.
/// Without that white space (`"docs/config.md", "..."` is a list of
/// files) or a quote, the citation names the file alone.
fn citations(path: &str, text: &str) -> Vec<Citation> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let line_of = |i: usize| text[..i].matches('\n').count() + 1;
    let mut i = 0;
    while i < b.len() {
        let start = i;
        i += 1;
        if !text.is_char_boundary(start) || (start > 0 && is_path_byte(b[start - 1])) {
            continue;
        }
        let rest = &text[start..];
        let (file, end) = if let Some(name) = rest.strip_prefix("docs/") {
            let n = name.bytes().take_while(|c| is_name_byte(*c)).count();
            if n == 0 || !name[n..].starts_with(".md") {
                continue;
            }
            (format!("docs/{}.md", &name[..n]), start + 5 + n + 3)
        } else if rest.starts_with("README.md") {
            ("README.md".to_string(), start + 9)
        } else if rest.starts_with("README") {
            ("README.md".to_string(), start + 6)
        } else {
            continue;
        };
        if end < b.len() && (is_name_byte(b[end]) || b[end] == b'/') {
            continue;
        }
        if end < b.len() && b[end] == b'.' && b.get(end + 1).is_some_and(|c| is_name_byte(*c)) {
            continue; // README.txt, a backup's name.md.orig
        }
        let mut c = Citation {
            at: format!("{path}:{}", line_of(start)),
            file,
            sections: Vec::new(),
            number: None,
            anchor: None,
        };
        let mut j = end;
        if b.get(j) == Some(&b'#') {
            let n = b[j + 1..].iter().take_while(|c| is_name_byte(**c)).count();
            c.anchor = Some(text[j + 1..j + 1 + n].to_string());
            j += 1 + n;
        }
        if b.get(j) == Some(&b')') {
            j += 1;
        }
        if b.get(j) == Some(&b',') {
            j += 1;
        }
        let k = skip_gap(b, j);
        if k > j {
            let mut k = k;
            if b.get(k) == Some(&b'(') {
                k += 1;
            }
            let quote = if text[k..].starts_with("\\\"") {
                Some("\\\"")
            } else if text[k..].starts_with('"') {
                Some("\"")
            } else {
                None
            };
            match quote {
                Some(q) => loop {
                    let from = k + q.len();
                    // A section title is short; a quote that does not close
                    // within 160 bytes is no section.
                    let Some(len) = text[from..(from + 160).min(b.len())].find(q) else {
                        break;
                    };
                    c.sections.push(squeeze(&text[from..from + len]));
                    let after = from + len + q.len();
                    if b.get(after) == Some(&b',') {
                        let next = skip_gap(b, after + 1);
                        if next > after + 1 && text[next..].starts_with(q) {
                            k = next;
                            continue;
                        }
                    }
                    break;
                },
                None => {
                    if let Some(num) = text[k..].strip_prefix("section ") {
                        let n = num.bytes().take_while(u8::is_ascii_digit).count();
                        if n > 0 {
                            c.number = num[..n].parse().ok();
                        }
                    }
                }
            }
        }
        out.push(c);
    }
    out
}

#[test]
fn citations_are_read_in_every_form() {
    let text = "// docs/design.md \"Hash\"; docs/config.md, \"Panic threshold\"\n\
                /// (docs/design.md\n\
                /// \"The bucket pool\", \"Restarts and\n\
                /// adoption\"), docs/README.md\n\
                msg(\"docs/config.md \\\"Filters\\\"\");\n\
                [docs/operations.md](docs/operations.md), \"Health-check cost\"\n\
                see README \"Packet path\" and docs/operations.md section 3, \
                [x](docs/config.md#filters)\n\
                [\"docs/operations.md\", \"docs/config.md\"] netns-harness/README.md \"x\"\n";
    // Each citation as `line file "section"... section N #anchor`.
    let got: Vec<String> = citations("t.rs", text)
        .into_iter()
        .map(|c| {
            let mut s = format!("{} {}", &c.at["t.rs:".len()..], c.file);
            for section in &c.sections {
                s += &format!(" \"{section}\"");
            }
            if let Some(n) = c.number {
                s += &format!(" section {n}");
            }
            if let Some(a) = &c.anchor {
                s += &format!(" #{a}");
            }
            s
        })
        .collect();
    let want = [
        r#"1 docs/design.md "Hash""#,
        r#"1 docs/config.md "Panic threshold""#,
        r#"2 docs/design.md "The bucket pool" "Restarts and adoption""#,
        r#"4 docs/README.md"#,
        r#"5 docs/config.md "Filters""#,
        r#"6 docs/operations.md"#,
        r#"6 docs/operations.md "Health-check cost""#,
        r#"7 README.md "Packet path""#,
        r#"7 docs/operations.md section 3"#,
        r#"7 docs/config.md #filters"#,
        r#"8 docs/operations.md"#,
        r#"8 docs/config.md"#,
    ];
    assert_eq!(got, want);
    assert!(heading_names(
        "Panic threshold and fail-open",
        "Panic threshold"
    ));
    assert!(heading_names("7. Several balancers", "Several balancers"));
    assert!(heading_names("QUIC-LB (`quic_lb`)", "QUIC-LB"));
    assert!(!heading_names("IPv6 cluster network", "Cluster"));
    assert!(!heading_names("Filters", "Edge filters"));
    assert!(!heading_names("Hashing", "Hash"));
    let a = anchors(&[
        "9. Machine-readable output".into(),
        "QUIC-LB (`quic_lb`)".into(),
    ]);
    assert!(a.contains("9-machine-readable-output") && a.contains("quic-lb-quic_lb"));
}

/// Every citation of a document in the repository's sources, scripts and
/// documents names a file that exists and, where it names a section, a
/// heading of that file: quoted sections by `heading_names`, `section N`
/// a heading numbered N, an anchor one of the file's GitHub anchors.
#[test]
fn cited_documents_and_sections_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = 0;
    let mut sections = 0;
    let mut broken = Vec::new();
    let mut cache: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, text) in repo_files() {
        for c in citations(&path, &text) {
            files += 1;
            if !root.join(&c.file).is_file() {
                broken.push(format!("{}: {} does not exist", c.at, c.file));
                continue;
            }
            let hs = cache
                .entry(c.file.clone())
                .or_insert_with(|| headings(&read(&c.file)));
            for s in &c.sections {
                sections += 1;
                if !hs.iter().any(|h| heading_names(h, s)) {
                    broken.push(format!("{}: {} has no section \"{s}\"", c.at, c.file));
                }
            }
            if let Some(n) = c.number {
                sections += 1;
                let prefix = format!("{n}. ");
                if !hs.iter().any(|h| h.starts_with(&prefix)) {
                    broken.push(format!("{}: {} has no section {n}", c.at, c.file));
                }
            }
            if let Some(a) = &c.anchor {
                sections += 1;
                if !anchors(hs).contains(a) {
                    broken.push(format!("{}: {} has no heading #{a}", c.at, c.file));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken citations:\n{}",
        broken.len(),
        broken.join("\n")
    );
    eprintln!("{files} citations of documents, {sections} sections among them");
    // Not vacuous: the repository cites documents a few hundred times.
    assert!(files >= 200, "only {files} citations of documents found");
    assert!(sections >= 150, "only {sections} cited sections found");
}

/// The comments of a file, as (line, text): `//` and `/* */` in Rust and
/// C (strings, raw strings and character literals skipped); `#` comments
/// (a `#` that starts a word, outside quotes) in shell, Python, YAML, TOML
/// and other configuration files and scripts with a `#!` line, and
/// Python's triple-quoted strings (docstrings); all of a Markdown file.
/// None: a file without comments to read (data, lock files).
fn comments(path: &str, text: &str) -> Option<Vec<(usize, String)>> {
    let name = path.rsplit('/').next().unwrap();
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "md" => Some(
            text.lines()
                .enumerate()
                .map(|(n, l)| (n + 1, l.to_string()))
                .collect(),
        ),
        "rs" => Some(c_comments(text, true)),
        "c" | "h" => Some(c_comments(text, false)),
        "py" => Some(py_comments(text)),
        "sh" | "yaml" | "yml" | "toml" | "conf" | "service" | "default" => {
            Some(hash_comments(text))
        }
        "" if text.starts_with("#!") => Some(hash_comments(text)),
        _ => None,
    }
}

fn c_comments(text: &str, rust: bool) -> Vec<(usize, String)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident = |i: usize| i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
    while i < b.len() {
        match b[i] {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |e| i + e);
                out.push((line, text[i + 2..end].to_string()));
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (from, at) = (i + 2, line);
                let mut depth = 1;
                i += 2;
                while i < b.len() && depth > 0 {
                    if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                    } else if rust && b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else {
                        line += usize::from(b[i] == b'\n');
                        i += 1;
                    }
                }
                let to = if depth == 0 { i - 2 } else { i };
                out.push((at, text[from..to].to_string()));
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    line += usize::from(b[i] == b'\n');
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'r' if rust && !ident(i) && matches!(b.get(i + 1), Some(b'"' | b'#')) => {
                let hashes = b[i + 1..].iter().take_while(|c| **c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let from = i + 2 + hashes;
                let len = text[from..].find(&close).unwrap_or(b.len() - from);
                line += text[from..from + len].matches('\n').count();
                i = from + len + close.len();
            }
            b'\'' => {
                // A character literal ('x', '\n', '\''), or in Rust a
                // lifetime ('a), which has no closing quote.
                let ch = text[i + 1..].chars().next().map_or(0, char::len_utf8);
                if b.get(i + 1) == Some(&b'\\') {
                    let len = b[i + 3..]
                        .iter()
                        .position(|c| *c == b'\'')
                        .map_or(0, |l| l + 1);
                    i += 3 + len;
                } else if b.get(i + 1 + ch) == Some(&b'\'') {
                    i += 2 + ch;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out
}

fn hash_comments(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut quote: Option<char> = None;
        let mut prev = ' ';
        for (k, c) in line.char_indices() {
            match quote {
                Some(q) if c == q && prev != '\\' => quote = None,
                Some(_) => {}
                None if c == '"' || c == '\'' => quote = Some(c),
                None if c == '#' && prev.is_whitespace() => {
                    out.push((n + 1, line[k + 1..].to_string()));
                    break;
                }
                None => {}
            }
            prev = c;
        }
    }
    out
}

fn py_comments(text: &str) -> Vec<(usize, String)> {
    // Docstrings first, then the `#` comments of what is left (the
    // docstrings blanked out, line breaks kept).
    let mut out = Vec::new();
    let mut rest = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let q = ["\"\"\"", "'''"]
            .into_iter()
            .filter_map(|q| text[i..].find(q).map(|at| (at, q)))
            .min();
        let Some((at, q)) = q else {
            rest.push_str(&text[i..]);
            break;
        };
        let from = i + at + 3;
        let len = text[from..].find(q).unwrap_or(text.len() - from);
        rest.push_str(&text[i..i + at]);
        let body = &text[from..from + len];
        out.push((text[..from].matches('\n').count() + 1, body.to_string()));
        rest.extend(body.chars().filter(|c| *c == '\n'));
        i = (from + len + 3).min(text.len());
    }
    out.extend(hash_comments(&rest));
    out
}

/// The source paths named in `text`: a run of path characters that starts
/// with a top-level directory of the repository and `/` (bpf/nilb.h,
/// src/dataplane/, netns-harness/scenarios/quic.sh), not preceded by a path
/// character, `$` or `~` (so /sys/fs/bpf/nilb and $OUT/bench/x are not
/// ours), without its final `.` (a sentence's end). Left out: patterns (a
/// `*`, `{`, `<`, `$` or `%` right after: deploy/bird-*.conf), and names
/// whose last part has no extension and no final `/` (examples/quic_server
/// is the example's binary, scripts/extract-vmlinux the kernel's).
fn source_paths<'a>(text: &'a str, tops: &[String]) -> Vec<&'a str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        i += 1;
        if start > 0 && (is_path_byte(b[start - 1]) || matches!(b[start - 1], b'$' | b'~')) {
            continue;
        }
        if !tops
            .iter()
            .any(|t| b[start..].starts_with(t.as_bytes()) && b.get(start + t.len()) == Some(&b'/'))
        {
            continue;
        }
        let len = b[start..].iter().take_while(|c| is_path_byte(**c)).count();
        i = start + len;
        if b.get(i)
            .is_some_and(|c| matches!(c, b'*' | b'{' | b'<' | b'$' | b'%'))
        {
            continue;
        }
        let p = text[start..i].trim_end_matches('.');
        let last = p.rsplit('/').next().unwrap();
        let has_ext = last.rsplit_once('.').is_some_and(|(stem, e)| {
            !stem.is_empty() && !e.is_empty() && e.bytes().all(|c| c.is_ascii_alphanumeric())
        });
        if p.ends_with('/') || has_ext {
            out.push(p);
        }
    }
    out
}

/// Every source path a comment (or a document) names exists: a file, or
/// with a final `/` a directory, from the repository's root or from the
/// naming file's own directory (in bench/README.md, bpf/ is bench/bpf/).
/// Paths under what .gitignore ignores (netns-harness/out/) are made by
/// runs and not checked.
#[test]
fn source_paths_in_comments_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (rooted, _) = ignored();
    let mut tops: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && !rooted.contains(n))
        .collect();
    tops.sort();
    assert!(tops.len() >= 8, "top-level directories: {tops:?}");
    let mut checked = 0;
    let mut broken = Vec::new();
    for (path, text) in repo_files() {
        let Some(pieces) = comments(&path, &text) else {
            continue;
        };
        let here = Path::new(&path).parent().unwrap();
        for (line, piece) in pieces {
            for p in source_paths(&piece, &tops) {
                let at = p.as_ptr() as usize - piece.as_ptr() as usize;
                let line = line + piece[..at].matches('\n').count();
                if rooted.iter().any(|r| p.starts_with(&format!("{r}/"))) {
                    continue;
                }
                checked += 1;
                let ok = |base: &Path| {
                    let f = base.join(p);
                    if p.ends_with('/') {
                        f.is_dir()
                    } else {
                        f.exists()
                    }
                };
                if !ok(root) && !ok(&root.join(here)) {
                    broken.push(format!("{path}:{line}: {p}"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} source paths that do not exist:\n{}",
        broken.len(),
        broken.join("\n")
    );
    eprintln!("{checked} source paths");
    // Not vacuous: comments and documents name source files hundreds of times.
    assert!(checked >= 300, "only {checked} source paths found");
}
