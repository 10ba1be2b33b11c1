//! The only module that touches YAML libraries (serde_yaml is
//! deprecated upstream; swapping it for a maintained fork is a change here).
//!
//! Two jobs: deserialize a document into a serde type with the failing field's
//! path (`services[1].backends[0].weight`) and position, and map field paths
//! to their line and column so that semantic errors found later can point at
//! the file too.

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

/// A line and column in the YAML source, both 1-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
}

/// Failure to turn the text into the schema's shape (syntax, unknown or
/// duplicate keys, missing fields, wrong types).
#[derive(Debug)]
pub struct ShapeError {
    /// Field path, e.g. `services[1].port`; empty for the document root.
    pub path: String,
    /// What is wrong, without the position.
    pub message: String,
    /// Where, when the parser knows it.
    pub position: Option<Position>,
}

/// The problem of a failed deserialization, with its field path and the
/// parser's position.
fn shape_error(e: serde_path_to_error::Error<serde_yaml::Error>) -> ShapeError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let position = inner.location().map(|l| Position {
        line: l.line(),
        column: l.column(),
    });
    // serde_yaml appends " at line L column C"; the position is kept
    // separately so that every message has one format.
    let mut message = inner.to_string();
    if let Some(i) = message.find(" at line ") {
        message.truncate(i);
    }
    // ... and may prefix its own (shorter) path: "services[0]: unknown field".
    if let Some((prefix, rest)) = message.split_once(": ") {
        if !prefix.is_empty() && !prefix.contains(' ') {
            message = rest.to_string();
        }
    }
    let message = plain_expectation(&message);
    // The deserializer names a syntax error's unknown field `?`.
    let path = path
        .trim_end_matches(".?")
        .trim_end_matches('?')
        .to_string();
    ShapeError {
        path: if path == "." { String::new() } else { path },
        message,
        position,
    }
}

/// serde's "expected ..." in an operator's words: Rust type names
/// (`struct RawRouting`, `u32`, `f64`, `a boolean`...) say nothing to
/// someone writing YAML. Other messages are returned unchanged.
fn plain_expectation(message: &str) -> String {
    let Some(i) = message.find(", expected ") else {
        return message.to_string();
    };
    let (head, want) = message.split_at(i + ", expected ".len());
    let head = head.replace(" as u128,", ",").replace(" as i128,", ",");
    let plain = match want {
        w if w.starts_with("struct ") || w.starts_with("a map") => {
            "a mapping (`key: value` entries)".to_string()
        }
        "u8" => "a whole number from 0 to 255".to_string(),
        "u16" => "a whole number from 0 to 65535".to_string(),
        "u32" => "a whole number from 0 to 4294967295".to_string(),
        "u64" | "usize" => "a whole number of 0 or more".to_string(),
        "i32" | "i64" => "a whole number".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "a boolean" | "bool" => "true or false".to_string(),
        w if w.starts_with("enum ") => "one of the documented values (docs/config.md)".to_string(),
        w => w.to_string(),
    };
    format!("{head}{plain}")
}

/// Problems of shape found by [`from_str_all`], and the field paths it had
/// to patch to go on (semantic problems at or under them are not reported:
/// they would be consequences of the shape problems).
#[derive(Debug, Default)]
pub struct ShapeProblems {
    /// Every shape problem found, in the order found.
    pub errors: Vec<ShapeError>,
    /// Paths removed or replaced by a placeholder.
    pub patched: Vec<String>,
    /// The file could not be read to its end (a syntax error or a
    /// duplicate key): later problems are not reported.
    pub stopped: bool,
}

/// Most shape problems collected from one file.
const MAX_SHAPE_PROBLEMS: usize = 100;

/// Deserialize `src` into `T`, collecting every shape problem: the text is
/// parsed once into a YAML tree; each time the schema rejects a node, the
/// problem is recorded and the node removed (or, for a required field,
/// replaced by a placeholder of an accepted type) and deserialization runs
/// again. Syntax errors and duplicate keys stop it (reported with
/// [`ShapeProblems::stopped`]). Returns the value when the tree is usable,
/// also after patches (so semantic checks can run on the rest).
pub fn from_str_all<T: DeserializeOwned>(src: &str) -> (Option<T>, ShapeProblems) {
    let mut out = ShapeProblems::default();
    // The first attempt reads the text itself (messages and positions as
    // the parser gives them); later ones read the patched tree written
    // back as YAML, so scalars are read as leniently as in the file (a
    // number where a string is expected is that string).
    let mut err = match attempt::<T>(src) {
        Ok(v) => return (Some(v), out),
        Err(e) => e,
    };
    let mut tree: serde_yaml::Value = match serde_yaml::from_str(src) {
        Ok(v) => v,
        Err(_) => {
            out.errors.push(err.error);
            out.stopped = true;
            return (None, out);
        }
    };
    // Expected variants of an enum field whose value was removed, by path:
    // candidates for its placeholder.
    let mut variants: std::collections::HashMap<String, Vec<String>> = Default::default();
    loop {
        let path = err.error.path.clone();
        let missing = err
            .error
            .message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
            .map(str::to_string);
        // The node to patch: the field itself (for a missing field, the
        // one absent from the mapping at `path`).
        let mut target = err.segs.clone();
        if let Some(field) = &missing {
            target.push(Seg::Key(field.clone()));
        }
        let target_path = path_text(&target);
        let under_patch = out.patched.iter().any(|p| {
            path == *p || path.starts_with(&format!("{p}.")) || path.starts_with(&format!("{p}["))
        });
        let already = out.patched.contains(&target_path);
        if !under_patch && !already {
            if let Some(v) = expected_variants(&err.error.message) {
                variants.insert(target_path.clone(), v);
            }
            out.errors.push(err.error);
        }
        if out.errors.len() >= MAX_SHAPE_PROBLEMS || out.patched.len() > 4 * MAX_SHAPE_PROBLEMS {
            out.stopped = true;
            return (None, out);
        }
        let patched = if missing.is_some() || already {
            // A required field: give it a value the schema accepts.
            let mut candidates: Vec<serde_yaml::Value> = variants
                .get(&target_path)
                .map(|v| {
                    v.iter()
                        .map(|s| serde_yaml::Value::String(s.clone()))
                        .collect()
                })
                .unwrap_or_default();
            candidates.extend([
                serde_yaml::Value::String("x".into()),
                serde_yaml::Value::Number(1.into()),
                serde_yaml::Value::Sequence(Vec::new()),
                serde_yaml::Value::Mapping(Default::default()),
            ]);
            place_first_accepted::<T>(&mut tree, &target, candidates)
        } else {
            remove_at(&mut tree, &target)
        };
        if !patched {
            out.stopped = true;
            return (None, out);
        }
        if !out.patched.contains(&target_path) {
            out.patched.push(target_path);
        }
        let Ok(text) = serde_yaml::to_string(&tree) else {
            out.stopped = true;
            return (None, out);
        };
        err = match attempt::<T>(&text) {
            Ok(v) => return (Some(v), out),
            Err(mut e) => {
                // Positions in the rewritten text mean nothing.
                e.error.position = None;
                e
            }
        };
    }
}

/// A failed attempt: the problem and its path as segments.
struct Attempt {
    error: ShapeError,
    segs: Vec<Seg>,
}

fn attempt<T: DeserializeOwned>(text: &str) -> Result<T, Attempt> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let segs: Vec<Seg> = e
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                serde_path_to_error::Segment::Map { key } if key != "?" => {
                    Some(Seg::Key(key.clone()))
                }
                _ => None,
            })
            .collect();
        Attempt {
            error: shape_error(e),
            segs,
        }
    })
}

/// A segment of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn path_text(segs: &[Seg]) -> String {
    let mut s = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// The node at `segs` (None if absent).
fn node_mut<'a>(v: &'a mut serde_yaml::Value, segs: &[Seg]) -> Option<&'a mut serde_yaml::Value> {
    let mut cur = v;
    for seg in segs {
        cur = match (seg, cur) {
            (Seg::Key(k), serde_yaml::Value::Mapping(m)) => m.get_mut(k.as_str())?,
            (Seg::Index(i), serde_yaml::Value::Sequence(s)) => s.get_mut(*i)?,
            (_, serde_yaml::Value::Tagged(t)) => {
                return node_mut(&mut t.value, std::slice::from_ref(seg))
            }
            _ => return None,
        };
    }
    Some(cur)
}

/// Remove the node at `segs`: a mapping entry is deleted; a sequence item,
/// the document root or a node that cannot be found gives false.
fn remove_at(tree: &mut serde_yaml::Value, segs: &[Seg]) -> bool {
    let Some((last, parent)) = segs.split_last() else {
        return false;
    };
    match (last, node_mut(tree, parent)) {
        (Seg::Key(k), Some(serde_yaml::Value::Mapping(m))) => m.remove(k.as_str()).is_some(),
        // A sequence item cannot go (later paths would shift): the caller
        // replaces it instead.
        (Seg::Index(_), Some(serde_yaml::Value::Sequence(_))) => {
            place(tree, segs, serde_yaml::Value::Mapping(Default::default()))
        }
        _ => false,
    }
}

fn place(tree: &mut serde_yaml::Value, segs: &[Seg], value: serde_yaml::Value) -> bool {
    let Some((last, parent)) = segs.split_last() else {
        return false;
    };
    match (last, node_mut(tree, parent)) {
        (Seg::Key(k), Some(serde_yaml::Value::Mapping(m))) => {
            m.insert(serde_yaml::Value::String(k.clone()), value);
            true
        }
        (Seg::Index(i), Some(serde_yaml::Value::Sequence(s))) if *i < s.len() => {
            s[*i] = value;
            true
        }
        _ => false,
    }
}

/// Put the first of `candidates` that the schema accepts at `segs` (one
/// after which deserialization no longer fails at that node).
fn place_first_accepted<T: DeserializeOwned>(
    tree: &mut serde_yaml::Value,
    segs: &[Seg],
    candidates: Vec<serde_yaml::Value>,
) -> bool {
    for c in candidates {
        let mut trial = tree.clone();
        if !place(&mut trial, segs, c) {
            return false;
        }
        let Ok(text) = serde_yaml::to_string(&trial) else {
            return false;
        };
        let still = match attempt::<T>(&text) {
            Ok(_) => false,
            Err(e) => {
                let mut at = e.segs.clone();
                if let Some(f) = e
                    .error
                    .message
                    .strip_prefix("missing field `")
                    .and_then(|m| m.split('`').next())
                {
                    at.push(Seg::Key(f.to_string()));
                }
                at == segs
            }
        };
        if !still {
            *tree = trial;
            return true;
        }
    }
    false
}

/// The variants an "unknown variant" message lists (`expected `a` or `b``,
/// `expected one of `a`, `b``).
fn expected_variants(message: &str) -> Option<Vec<String>> {
    let rest = &message[message.find("expected")?..];
    let v: Vec<String> = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    (!v.is_empty() && message.contains("variant")).then_some(v)
}

/// Largest nesting depth accepted (real configs need about 6).
pub const MAX_DEPTH: usize = 64;
/// Largest number of YAML nodes after expanding aliases (a config with 1024
/// services of 16 backends has about 100,000).
pub const MAX_NODES: u64 = 1_000_000;

/// Positions of every key and value in `src`, by field path in the same
/// notation as [`ShapeError::path`]; for a key with a value, the value's
/// position wins. Also enforces [`MAX_DEPTH`] and [`MAX_NODES`] (alias
/// bombs) before anything expands the document. Unparseable input gives an
/// empty map (the deserializer reports the syntax error).
pub fn positions(src: &str) -> Result<HashMap<String, Position>, ShapeError> {
    locate(src, true)
}

/// [`positions`]' limits only ([`MAX_DEPTH`], [`MAX_NODES`]), without
/// recording any position: about half the cost of a parse of a large file.
/// The positions are asked for only where a problem is reported.
pub fn check_limits(src: &str) -> Result<(), ShapeError> {
    locate(src, false).map(|_| ())
}

fn locate(src: &str, paths: bool) -> Result<HashMap<String, Position>, ShapeError> {
    let mut rx = Locator {
        skip_paths: !paths,
        ..Locator::default()
    };
    let mut parser = Parser::new_from_str(src);
    // The events one at a time, stopping at the first limit: the parser's
    // own `load` recurses once per nesting level (a 24 KB file of nested
    // block sequences overflowed a thread's stack before the depth limit
    // could stop it).
    let parsed = (|| loop {
        let (ev, mark) = parser.next_token()?;
        let end = matches!(ev, Event::DocumentEnd | Event::StreamEnd);
        rx.on_event(ev, mark);
        if end || rx.limit_error.is_some() {
            return Ok::<(), yaml_rust2::ScanError>(());
        }
    })();
    if let Some(e) = rx.limit_error {
        return Err(e);
    }
    if let Err(e) = parsed {
        // The scanner refuses flow collections nested 256 deep before the
        // parser emits their start events: the same limit, said the same
        // way (serde_yaml would take seconds on such input, quadratic in
        // the depth, before failing on it).
        if e.info().contains("recursion limit") {
            return Err(ShapeError {
                path: String::new(),
                message: format!("nested deeper than {MAX_DEPTH} levels"),
                position: Some(Position {
                    line: e.marker().line(),
                    column: e.marker().col() + 1,
                }),
            });
        }
        return Ok(HashMap::new());
    }
    Ok(rx.out)
}

enum Frame {
    /// In a mapping: the path of the mapping, and the key waiting for its
    /// value (None while a key is expected).
    Map { path: String, key: Option<String> },
    /// In a sequence: the path of the sequence and the next index.
    Seq { path: String, next: usize },
}

#[derive(Default)]
struct Locator {
    stack: Vec<Frame>,
    out: HashMap<String, Position>,
    /// Nodes so far, counting an alias as the size of its anchor.
    nodes: u64,
    /// Size in nodes of each anchored node.
    anchor_sizes: HashMap<usize, u64>,
    /// (anchor id, nodes at start) of open collections.
    open: Vec<(usize, u64)>,
    limit_error: Option<ShapeError>,
    /// Only account for the limits (no paths, no positions).
    skip_paths: bool,
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl Locator {
    /// Path of the node that starts now (a value or sequence item); None if
    /// the node is a mapping key.
    fn value_path(&mut self) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Map { path, key }) => key.take().map(|k| join(path, &k)),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some(p)
            }
        }
    }
}

impl Locator {
    fn limit(&mut self, pos: Position, message: String) {
        if self.limit_error.is_none() {
            self.limit_error = Some(ShapeError {
                path: String::new(),
                message,
                position: Some(pos),
            });
        }
    }

    /// Count nodes and anchors; report the first limit exceeded.
    fn account(&mut self, ev: &Event, pos: Position) {
        match ev {
            Event::Scalar(_, _, anchor, _) => {
                self.nodes += 1;
                if *anchor > 0 {
                    self.anchor_sizes.insert(*anchor, 1);
                }
            }
            Event::MappingStart(anchor, _) | Event::SequenceStart(anchor, _) => {
                self.nodes += 1;
                self.open.push((*anchor, self.nodes - 1));
                if self.open.len() > MAX_DEPTH {
                    self.limit(pos, format!("nested deeper than {MAX_DEPTH} levels"));
                }
            }
            Event::MappingEnd | Event::SequenceEnd => {
                if let Some((anchor, start)) = self.open.pop() {
                    if anchor > 0 {
                        self.anchor_sizes.insert(anchor, self.nodes - start);
                    }
                }
            }
            Event::Alias(id) => {
                self.nodes += self.anchor_sizes.get(id).copied().unwrap_or(1);
            }
            _ => {}
        }
        if self.nodes > MAX_NODES {
            self.limit(
                pos,
                format!("expands to more than {MAX_NODES} YAML nodes (aliases included); nilb configs are far smaller"),
            );
        }
    }
}

impl MarkedEventReceiver for Locator {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        let pos = Position {
            line: mark.line(),
            column: mark.col() + 1,
        };
        if self.limit_error.is_some() {
            return;
        }
        self.account(&ev, pos);
        if self.skip_paths {
            return;
        }
        match ev {
            Event::Scalar(text, ..) => match self.value_path() {
                Some(p) => {
                    self.out.insert(p, pos);
                }
                None => {
                    if let Some(Frame::Map { path, key }) = self.stack.last_mut() {
                        self.out.entry(join(path, &text)).or_insert(pos);
                        *key = Some(text);
                    }
                }
            },
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let p = self.value_path().unwrap_or_default();
                self.out.entry(p.clone()).or_insert(pos);
                self.stack.push(if matches!(ev, Event::MappingStart(..)) {
                    Frame::Map { path: p, key: None }
                } else {
                    Frame::Seq { path: p, next: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            Event::Alias(_) => {
                self.value_path();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_paths() {
        let src = "a: 1\nlist:\n  - x: 2\n    y: [3, 4]\n  - {x: 5}\n";
        let p = positions(src).unwrap();
        assert_eq!(p["a"], Position { line: 1, column: 4 });
        assert_eq!(p["list[0].x"].line, 3);
        assert_eq!(p["list[0].y[1]"].line, 4);
        assert_eq!(p["list[1].x"].line, 5);
    }
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    /// Messages name what YAML should hold, not Rust types.
    #[test]
    fn expectations_are_in_yaml_words() {
        for (raw, want) in [
            (
                "invalid type: integer `3`, expected struct RawRouting",
                "invalid type: integer `3`, expected a mapping (`key: value` entries)",
            ),
            (
                "invalid type: string \"abc\", expected u32",
                "invalid type: string \"abc\", expected a whole number from 0 to 4294967295",
            ),
            (
                "invalid value: integer `70000`, expected u16",
                "invalid value: integer `70000`, expected a whole number from 0 to 65535",
            ),
            (
                "invalid type: integer `5`, expected a sequence",
                "invalid type: integer `5`, expected a sequence",
            ),
            (
                "unknown field `x`, expected one of `a`, `b`",
                "unknown field `x`, expected one of `a`, `b`",
            ),
        ] {
            assert_eq!(plain_expectation(raw), want);
        }
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
        let e = positions(&deep).unwrap_err();
        assert!(e.message.contains("nested deeper"), "{}", e.message);
    }

    /// Block nesting far beyond the limit (12,000 levels in 24 KB) is
    /// refused without recursing once per level (it overflowed the reload
    /// thread's stack).
    #[test]
    fn very_deep_block_nesting_is_refused_without_recursion() {
        let deep = format!("x:\n{}a\n", "- ".repeat(12_000));
        let e = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || positions(&deep).unwrap_err())
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert!(e.message.contains("nested deeper"), "{}", e.message);
    }

    /// Flow collections 256 and more deep stop the scanner before any
    /// event: still refused as too deep, at once (serde_yaml took 5 s on
    /// 30,000 levels before this check).
    #[test]
    fn very_deep_flow_nesting_is_refused_quickly() {
        for n in [256, 300, 100_000] {
            let deep = format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
            let started = std::time::Instant::now();
            let e = positions(&deep).unwrap_err();
            assert!(e.message.contains("nested deeper"), "{n}: {}", e.message);
            assert!(started.elapsed() < std::time::Duration::from_secs(1), "{n}");
        }
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut y = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let prev = format!("*a{}", i - 1);
            let list = vec![prev; 10].join(", ");
            y += &format!("a{i}: &a{i} [{list}]\n");
        }
        let e = positions(&y).unwrap_err();
        assert!(e.message.contains("expands to more than"), "{}", e.message);
    }
}
