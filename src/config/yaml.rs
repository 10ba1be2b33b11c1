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

/// Deserialize `src` into `T`, reporting the first error with its field path.
pub fn from_str<T: DeserializeOwned>(src: &str) -> Result<T, ShapeError> {
    let de = serde_yaml::Deserializer::from_str(src);
    serde_path_to_error::deserialize(de).map_err(|e| {
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
    })
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
    let mut rx = Locator::default();
    let mut parser = Parser::new_from_str(src);
    let parsed = parser.load(&mut rx, false);
    if let Some(e) = rx.limit_error {
        return Err(e);
    }
    if parsed.is_err() {
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

    #[test]
    fn deep_nesting_is_refused() {
        let deep = format!("a: {}{}\n", "[".repeat(100), "]".repeat(100));
        let e = positions(&deep).unwrap_err();
        assert!(e.message.contains("nested deeper"), "{}", e.message);
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
