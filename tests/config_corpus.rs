//! Hostile configuration files: a corpus of invalid YAML in
//! tests/data/configs/, each rejected with the field path and a message
//! naming the problem, plus generated ones (limits, file size) and a
//! property test that the loader never panics and never accepts a
//! configuration that breaks its own rules.
//!
//! Corpus format: the first line of every file is a comment,
//!   `# expect: PATH: FRAGMENT`  rejected; one problem has exactly this field
//!                               path (`-` for the file itself) and a message
//!                               containing FRAGMENT; unless the file says
//!                               `# problems: N`, it is the only problem;
//!   `# valid`                   accepted.
//! A line ending in `#<` marks where the problem is: its position must be on
//! that line. Whenever the field named by the path (its last key) occurs in
//! the file, a position must be reported.
//!
//! No root needed. NILB_CONFIG_CASES sets the property-test cases (default
//! 1500 per property).

use std::path::{Path, PathBuf};

use nilb::config::{Config, ConfigError, Problem};
use proptest::prelude::*;
use proptest::test_runner::{Config as PropConfig, TestRunner};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/configs")
}

enum Expect {
    Valid,
    Invalid {
        path: String,
        fragment: String,
        problems: usize,
    },
}

fn expectation(file: &Path, text: &str) -> Expect {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.lines().next().unwrap_or_default();
    if first.trim() == "# valid" {
        return Expect::Valid;
    }
    let rest = first.strip_prefix("# expect: ").unwrap_or_else(|| {
        panic!(
            "{}: the first line must be `# expect: PATH: FRAGMENT` or `# valid`",
            file.display()
        )
    });
    let (path, fragment) = rest
        .split_once(": ")
        .unwrap_or_else(|| panic!("{}: `# expect: PATH: FRAGMENT`", file.display()));
    let problems = text
        .lines()
        .find_map(|l| l.strip_prefix("# problems: "))
        .map_or(1, |n| n.trim().parse().expect("# problems: N"));
    Expect::Invalid {
        path: if path == "-" {
            String::new()
        } else {
            path.to_string()
        },
        fragment: fragment.to_string(),
        problems,
    }
}

/// The key a field path ends in: `services[0].backends[1].weight` ->
/// `weight`, `services[1]` -> `services`, `` -> None.
fn last_key(path: &str) -> Option<&str> {
    let last = path.rsplit('.').next()?;
    let key = last.split('[').next()?;
    (!key.is_empty()).then_some(key)
}

/// 1-based line of the `#<` marker, if any.
fn marker_line(text: &str) -> Option<usize> {
    text.lines()
        .position(|l| l.trim_end().ends_with("#<"))
        .map(|i| i + 1)
}

/// Check one rejected file; returns a description of what is wrong.
fn check_rejection(
    text: &str,
    err: &ConfigError,
    path: &str,
    fragment: &str,
    problems: usize,
) -> Result<(), String> {
    let show = || format!("{err}\n{:#?}", err.problems);
    let p: &Problem = err
        .problems
        .iter()
        .find(|p| p.path == path && p.message.contains(fragment))
        .ok_or_else(|| {
            format!(
                "no problem with path `{path}` and message containing `{fragment}`; got:\n{}",
                show()
            )
        })?;
    if err.problems.len() != problems {
        return Err(format!(
            "expected {problems} problem(s), got {}:\n{}",
            err.problems.len(),
            show()
        ));
    }
    if p.message.trim().is_empty() {
        return Err("empty message".into());
    }
    // The report names the field.
    let display = err.to_string();
    if !path.is_empty() && !display.contains(&format!("{path}: ")) {
        return Err(format!("the report does not name `{path}`:\n{display}"));
    }
    if let Some(line) = marker_line(text) {
        match p.position {
            Some(pos) if pos.line == line => {}
            other => {
                return Err(format!(
                    "expected a position on line {line} (the `#<` marker), got {other:?}:\n{}",
                    show()
                ))
            }
        }
    }
    if let Some(key) = last_key(path) {
        let present = text.lines().any(|l| {
            let l = l.trim_start().trim_start_matches("- ");
            l.starts_with(&format!("{key}:"))
                || l.contains(&format!("{{{key}:"))
                || l.contains(&format!(", {key}:"))
        });
        if present && p.position.is_none() {
            return Err(format!(
                "`{key}` is in the file but the problem has no position:\n{}",
                show()
            ));
        }
    }
    if let Some(pos) = p.position {
        let lines = text.lines().count().max(1);
        if pos.line == 0 || pos.line > lines + 1 || pos.column == 0 {
            return Err(format!("position {pos:?} is outside the file"));
        }
    }
    Ok(())
}

#[test]
fn corpus_files_are_rejected_with_path_message_and_position() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/data/configs")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    let (mut invalid, mut valid) = (0, 0);
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let loaded = Config::load(file);
        // Config::parse of the same text agrees (when the file is UTF-8).
        if let Ok(s) = std::str::from_utf8(&bytes) {
            let parsed = Config::parse(s);
            if parsed != loaded {
                failures.push(format!(
                    "{}: Config::load and Config::parse disagree",
                    file.display()
                ));
            }
        }
        let name = file.file_name().unwrap().to_string_lossy();
        match (expectation(file, &text), loaded) {
            (Expect::Valid, Ok(_)) => valid += 1,
            (Expect::Valid, Err(e)) => failures.push(format!("{name}: rejected:\n{e}")),
            (Expect::Invalid { .. }, Ok(_)) => failures.push(format!("{name}: accepted")),
            (
                Expect::Invalid {
                    path,
                    fragment,
                    problems,
                },
                Err(e),
            ) => {
                invalid += 1;
                if let Err(why) = check_rejection(&text, &e, &path, &fragment, problems) {
                    failures.push(format!("{name}: {why}"));
                }
            }
        }
    }
    println!("config corpus: {invalid} invalid and {valid} valid files checked");
    assert!(
        invalid >= 30,
        "the corpus should hold at least 30 invalid files"
    );
    assert!(
        failures.is_empty(),
        "{} of {} files failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn example_config_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/nilb.yaml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("examples/nilb.yaml: {e}"));
    assert_eq!(c.services.len(), 2);
}

// ---- generated configurations (limits, size) ---------------------------------------------

const HEAD: &str = "version: 1\ncluster:\n  balancers: [10.0.0.1, 10.0.0.2]\nservices:\n";

/// `n` services; service `i` gets VIP `vip(i)`, port `port(i)` and the
/// backends `dips(i)` (flow style).
fn services(
    n: usize,
    table: u32,
    vip: impl Fn(usize) -> String,
    port: impl Fn(usize) -> usize,
    dips: impl Fn(usize) -> Vec<String>,
) -> String {
    let mut y = String::from(HEAD);
    for i in 0..n {
        let b: Vec<String> = dips(i)
            .into_iter()
            .map(|d| format!("{{dip: {d}}}"))
            .collect();
        y += &format!(
            "  - {{name: s{i}, vip: {}, port: {}, protocol: tcp, table_size: {table}, health_check: {{none: {{}}}}, backends: [{}]}}\n",
            vip(i),
            port(i),
            b.join(", ")
        );
    }
    y
}

fn addr(i: usize) -> String {
    format!("10.{}.{}.{}", 64 + i / 65536, (i / 256) % 256, i % 256)
}

fn one(src: &str, path: &str, fragment: &str) {
    let e = Config::parse(src).expect_err("should be rejected");
    check_rejection(src, &e, path, fragment, 1).unwrap_or_else(|why| panic!("{why}"));
}

#[test]
fn more_than_1024_services_are_rejected() {
    let vip = |_| "10.0.0.100".to_string();
    let ok = services(1024, 16, vip, |i| i + 1, |_| vec![]);
    Config::parse(&ok).expect("1024 services are allowed");
    let bad = services(1025, 16, vip, |i| i + 1, |_| vec![]);
    one(
        &bad,
        "services",
        "1025 services exceed the data plane's limit of 1024",
    );
    // With distinct VIPs the VIP limit is named too.
    let bad = services(
        1025,
        16,
        |i| format!("192.0.{}.{}", i / 250, i % 250 + 1),
        |_| 80,
        |_| vec![],
    );
    let e = Config::parse(&bad).expect_err("1025 VIPs");
    for fragment in [
        "1025 services exceed",
        "1025 distinct IPv4 VIPs exceed the data plane's limit of 1024",
    ] {
        assert!(
            e.problems
                .iter()
                .any(|p| p.path == "services" && p.message.contains(fragment)),
            "{fragment}: {e}"
        );
    }
}

#[test]
fn total_buckets_are_limited() {
    let vip = |_| "10.0.0.100".to_string();
    Config::parse(&services(64, 65536, vip, |i| i + 1, |_| vec![])).expect("64 x 65536 buckets");
    one(
        &services(65, 65536, vip, |i| i + 1, |_| vec![]),
        "services",
        "4259840 buckets over all services exceed the limit of 4194304",
    );
}

#[test]
fn backend_slots_and_cluster_addresses_are_limited() {
    let vip = |_| "10.0.0.100".to_string();
    // 16 services x 1024 backends (the same 1024 addresses): 16384 pairs.
    let same = |_| (0..1024).map(addr).collect::<Vec<_>>();
    one(
        &services(16, 16384, vip, |i| i + 1, same),
        "services",
        "16384 backends over all services exceed the data plane's limit of 16383",
    );
    // 16383 pairs are fine.
    let fewer = |i| {
        (0..if i == 15 { 1023 } else { 1024 })
            .map(addr)
            .collect::<Vec<_>>()
    };
    Config::parse(&services(16, 16384, vip, |i| i + 1, fewer)).expect("16383 pairs");
    // 16383 distinct backends + 2 balancers: 16385 cluster addresses.
    let distinct = |i: usize| {
        let n = if i == 15 { 1023 } else { 1024 };
        (0..n).map(|j| addr(i * 1024 + j)).collect::<Vec<_>>()
    };
    one(
        &services(16, 16384, vip, |i| i + 1, distinct),
        "services",
        "16385 cluster addresses (balancers and backends) exceed the data plane's limit of 16384",
    );
}

#[test]
fn files_over_4_mib_are_refused_before_parsing() {
    let limit = 4 << 20;
    let good = "version: 1\ncluster:\n  balancers: [10.0.0.11]\n";
    // Exactly at the limit: parsed (a long comment).
    let mut at = String::from(good);
    at += "#";
    at += &"x".repeat(limit - at.len() - 1);
    at += "\n";
    assert_eq!(at.len(), limit);
    Config::parse(&at).expect("a file of exactly 4 MiB is read");
    // One byte more: refused, with the size, through parse and load.
    let over = format!("{at}\n");
    let e = Config::parse(&over).expect_err("4 MiB + 1");
    check_rejection(
        &over,
        &e,
        "",
        &format!(
            "the file has {} bytes; nilb reads at most {limit}",
            limit + 1
        ),
        1,
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("nilb-config-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.yaml");
    std::fs::write(&file, &over).unwrap();
    let loaded = Config::load(&file);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(loaded, Err(e));
    // A file that does not exist: named.
    let e = Config::load(Path::new("/nonexistent/nilb.yaml")).expect_err("missing file");
    assert!(
        e.problems[0]
            .message
            .contains("cannot read /nonexistent/nilb.yaml"),
        "{e}"
    );
}

#[test]
fn nesting_depth_limit_is_exact() {
    // 64 levels are read (and fail on shape), 65 are refused as too deep.
    let nest = |n: usize| format!("a: {}{}\n", "[".repeat(n), "]".repeat(n));
    let e = Config::parse(&nest(63)).expect_err("shape");
    assert!(
        !e.problems[0].message.contains("nested deeper"),
        "63 + 1 levels: {e}"
    );
    let e = Config::parse(&nest(64)).expect_err("too deep");
    assert!(
        e.problems[0]
            .message
            .contains("nested deeper than 64 levels"),
        "{e}"
    );
}

// ---- property tests: the loader never panics -------------------------------------------------

fn cases() -> u32 {
    std::env::var("NILB_CONFIG_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

fn runner() -> TestRunner {
    TestRunner::new(PropConfig {
        cases: cases(),
        // Nothing is written under tests/ (proptest-regressions).
        failure_persistence: None,
        ..PropConfig::default()
    })
}

/// What every accepted configuration satisfies (docs/config.md).
fn accepted_is_valid(src: &str) -> Result<(), TestCaseError> {
    match Config::parse(src) {
        Ok(c) => {
            prop_assert!(!c.cluster.balancers.is_empty());
            prop_assert!(c.cluster.gue_port != 0);
            prop_assert!(c.services.len() <= 1024);
            // Filters: valid rule names, rules with something in them, rates
            // of at least one per second, at most 4 rate limits a scope, and
            // no unmarked top-level deny over a cluster address.
            let cluster = c.cluster_addresses();
            let mut scopes = vec![(&c.filters.deny, &c.filters.rate_limit, None)];
            for s in &c.services {
                scopes.push((
                    &s.filters.deny,
                    &s.filters.rate_limit,
                    s.filters.allow.as_ref(),
                ));
            }
            for (gi, (deny, rates, allow)) in scopes.into_iter().enumerate() {
                prop_assert!(rates.len() <= 4);
                let mut seen = std::collections::HashSet::new();
                for r in deny.iter().chain(allow) {
                    prop_assert!(!r.name.is_empty() && r.name.len() <= 31);
                    prop_assert!(seen.insert(r.name.clone()), "rule name {} twice", r.name);
                    prop_assert!(!r.prefixes.is_empty() || !r.files.is_empty());
                    if gi == 0 && !r.covers_cluster {
                        for (p, _) in &r.prefixes {
                            prop_assert!(
                                !cluster.iter().any(
                                    |a| matches!(a, std::net::IpAddr::V4(a) if p.contains(*a))
                                ),
                                "{p} covers the cluster"
                            );
                        }
                    }
                    prop_assert!(gi == 0 || !r.covers_cluster);
                }
                for r in rates {
                    prop_assert!(seen.insert(r.name.clone()), "rule name {} twice", r.name);
                    prop_assert!(r.packets.is_some() || r.syns.is_some());
                    for rate in r.packets.iter().chain(&r.syns) {
                        prop_assert!(rate.per_second >= 1 && rate.burst >= 1);
                    }
                }
            }
            let mut names = std::collections::HashSet::new();
            let mut keys = std::collections::HashSet::new();
            for s in &c.services {
                prop_assert!(names.insert(s.name.clone()), "duplicate name {}", s.name);
                prop_assert!(keys.insert(s.key()), "duplicate key {}", s.key());
                prop_assert!(!s.name.is_empty() && s.name.len() <= 64);
                prop_assert!(!c.cluster.balancers.contains(&s.vip));
                prop_assert!(
                    !s.vip.is_loopback() && !s.vip.is_unspecified() && !s.vip.is_multicast()
                );
                prop_assert!(
                    s.protocol != nilb::config::Protocol::Udp || s.port != c.cluster.gue_port
                );
                prop_assert!(s.port != 0);
                prop_assert!(s.table_size.is_power_of_two());
                prop_assert!((16..=65536).contains(&s.table_size));
                prop_assert!(s.backends.len() as u32 * 16 <= s.table_size);
                prop_assert!(s.health_check.timeout_ms <= s.health_check.interval_ms);
                prop_assert!(s.health_check.interval_ms >= 100);
                prop_assert!((1..=100).contains(&s.health_check.rise_count));
                prop_assert!((1..=100).contains(&s.health_check.fall_count));
                let mut dips = std::collections::HashSet::new();
                for b in &s.backends {
                    prop_assert!((1..=65535).contains(&b.weight));
                    prop_assert!(b.dip != s.vip);
                    prop_assert!(dips.insert(b.dip), "duplicate backend {}", b.dip);
                    prop_assert!(!b.dip.is_loopback() && !b.dip.is_unspecified());
                }
            }
            Ok(())
        }
        Err(e) => {
            prop_assert!(!e.problems.is_empty());
            for p in &e.problems {
                prop_assert!(!p.message.is_empty(), "empty message: {e:?}");
            }
            let _ = e.to_string();
            Ok(())
        }
    }
}

const EXAMPLE: &str = include_str!("../examples/nilb.yaml");

/// YAML fragments that change structure when spliced into a document.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "-",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "&b ",
    "*b",
    "!!str ",
    "!!int ",
    "!!map ",
    "!custom ",
    "~",
    "null",
    "\n",
    "\n  ",
    "\n    ",
    "\t",
    "  ",
    "0x",
    "-1",
    "0",
    "65536",
    "99999999999999999999",
    "1e9",
    ".inf",
    "'",
    "\"",
    "#",
    "---\n",
    "...\n",
    "? ",
    "|\n",
    ">\n",
    "<<: *a\n",
    "yes",
    "\u{feff}",
    "\u{0}",
    "\u{85}",
    "é",
    "💥",
    "%YAML 1.2\n",
    "%TAG ! tag:x:\n",
    "version: 1\n",
    "services:\n",
    "backends: []",
    "health_check: ",
    "{http: {}}",
    "dynamic_weight: {source: cpu}",
    "table_size: 3",
    "port: 19523",
    "protocol: udp",
    "- {dip: 10.0.0.12}",
    "127.0.0.1",
    "::1",
    "[[[[[[[[",
    "]]]]]]]]",
];

#[derive(Clone, Debug)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    Replace(usize, u8),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    Indent(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Edit::Insert(a, t)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Edit::Replace(a, b)),
        any::<usize>().prop_map(Edit::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::SwapLines(a, b)),
        (any::<usize>(), 0usize..6).prop_map(|(a, n)| Edit::Indent(a, n)),
    ]
}

/// Apply edits to the example, at char boundaries.
fn mutate(edits: &[Edit]) -> String {
    let mut s = EXAMPLE.to_string();
    let at = |s: &str, i: usize| {
        let mut i = if s.is_empty() { 0 } else { i % (s.len() + 1) };
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    for e in edits {
        match *e {
            Edit::Delete(a, n) => {
                let i = at(&s, a);
                let j = at(&s, (i + n).min(s.len()));
                s.replace_range(i..j, "");
            }
            Edit::Insert(a, t) => {
                let i = at(&s, a);
                s.insert_str(i, TOKENS[t]);
            }
            Edit::Replace(a, b) => {
                let i = at(&s, a);
                if i < s.len() {
                    let c = s[i..].chars().next().unwrap();
                    s.replace_range(i..i + c.len_utf8(), &char::from(b).to_string());
                }
            }
            Edit::DuplicateLine(a) | Edit::SwapLines(a, _) | Edit::Indent(a, _) => {
                let mut lines: Vec<String> = s.lines().map(String::from).collect();
                if lines.is_empty() {
                    continue;
                }
                let i = a % lines.len();
                match *e {
                    Edit::DuplicateLine(_) => {
                        let l = lines[i].clone();
                        lines.insert(i, l);
                    }
                    Edit::SwapLines(_, b) => {
                        let j = b % lines.len();
                        lines.swap(i, j);
                    }
                    Edit::Indent(_, n) => lines[i].insert_str(0, &" ".repeat(n)),
                    _ => unreachable!(),
                }
                s = lines.join("\n") + "\n";
            }
        }
    }
    s
}

#[test]
fn loader_never_panics_on_arbitrary_bytes() {
    runner()
        .run(&proptest::collection::vec(any::<u8>(), 0..600), |bytes| {
            let s = String::from_utf8_lossy(&bytes);
            accepted_is_valid(&s)
        })
        .unwrap();
}

#[test]
fn loader_never_panics_on_yaml_like_text() {
    // Printable ASCII plus newlines and tabs: mostly YAML-shaped noise.
    runner()
        .run(&"[ -~\n\t]{0,400}", |s| accepted_is_valid(&s))
        .unwrap();
    // Documents built from structural tokens.
    runner()
        .run(&proptest::collection::vec(0..TOKENS.len(), 0..60), |toks| {
            let s: String = toks.iter().map(|&t| TOKENS[t]).collect();
            accepted_is_valid(&s)
        })
        .unwrap();
}

#[test]
fn loader_never_panics_on_mutated_example() {
    Config::parse(EXAMPLE).expect("the example parses");
    runner()
        .run(&proptest::collection::vec(edit(), 1..8), |edits| {
            accepted_is_valid(&mutate(&edits))
        })
        .unwrap();
}

#[test]
fn loader_never_panics_on_mutated_example_values() {
    // Every scalar value of the example replaced by hostile values.
    let values = prop_oneof![
        Just("".to_string()),
        Just("~".to_string()),
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("4294967296".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1.5".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("*x".to_string()),
        Just("\"\\u0000\"".to_string()),
        any::<u32>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        "[a-z0-9./:-]{0,20}",
    ];
    runner()
        .run(
            &(any::<usize>(), proptest::collection::vec(values, 1..4)),
            |(start, vals)| {
                // Replace the values of a few `key: value` pairs.
                let mut lines: Vec<String> = EXAMPLE.lines().map(String::from).collect();
                for (k, v) in vals.iter().enumerate() {
                    let i = (start + k * 7) % lines.len();
                    if let Some((key, _)) = lines[i].split_once(": ") {
                        lines[i] = format!("{key}: {v}");
                    }
                }
                accepted_is_valid(&(lines.join("\n") + "\n"))
            },
        )
        .unwrap();
}
