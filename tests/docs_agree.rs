//! What the docs list is what the tools print, so the two cannot drift
//! apart again: the counters in docs/counters.md against the data plane's
//! counter names; the columns of `nilb status` and the fields of `nilb
//! status --json` against docs/operations.md; the metric families of
//! `/metrics` against docs/operations.md; the defaults table of
//! docs/config.md against what the configuration loader fills in; and the
//! systemd unit's documentation paths against the documented install.
//! And what the repository cites exists: every citation of a document
//! (`docs/<name>.md "Section"`, README's sections) names a file and a
//! heading it has, and every source path a comment or a document names is
//! a file of the repository (see "Citations" below). No root needed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::Result;
use nilb::abi_sys::{nilb_backend_stats, nilb_service_stats};
use nilb::config::{Checker, Config, Protocol, Scheme, ServiceKey};
use nilb::control::ControlPlane;
use nilb::dataplane::abi::COUNTER_NAMES;
use nilb::filters::{FilterSet, Lists};
use nilb::metrics::{self, CpuTimes, DaemonFacts, StatsSource};
use nilb::status::{Status, BACKEND_COLUMNS};
use nilb::types::LoadSample;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel))
        .unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// The text of the section that starts with the heading line `heading`
/// (exactly), up to the next heading of the same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no heading `{heading}`"))
        + 1;
    let level = heading.chars().take_while(|c| *c == '#').count();
    let body = &text[start + heading.len()..];
    let mut end = body.len();
    let mut offset = 0;
    let mut fenced = false;
    for line in body.split_inclusive('\n') {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !fenced && hashes > 0 && hashes <= level && line[hashes..].starts_with(' ') {
            end = offset;
            break;
        }
        offset += line.len();
    }
    &body[..end]
}

/// The first cell of every row of the first table in `text`, without its
/// backticks (header and separator rows skipped).
fn first_column(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if !in_table {
            in_table = true; // the header row
            continue;
        }
        if cells[0].starts_with("---") {
            continue;
        }
        out.push(cells[0].trim_matches('`').to_string());
    }
    out
}

/// Rows of the first table in `text` as (first cell, second cell), backticks
/// removed.
fn two_columns(text: &str) -> Vec<(String, String)> {
    let firsts = first_column(text);
    let mut seconds = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            if in_table {
                break;
            }
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if !in_table {
            in_table = true;
            continue;
        }
        if cells[0].starts_with("---") {
            continue;
        }
        seconds.push(cells.get(1).unwrap_or(&"").trim_matches('`').to_string());
    }
    firsts.into_iter().zip(seconds).collect()
}

fn diff(what: &str, documented: &BTreeSet<String>, actual: &BTreeSet<String>) {
    let missing: Vec<_> = actual.difference(documented).collect();
    let extra: Vec<_> = documented.difference(actual).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: not documented: {missing:?}; documented but not there: {extra:?}"
    );
}

/// The documents the name checks below read: README.md and every
/// docs/*.md.
fn documents() -> Vec<String> {
    let mut docs = vec!["README.md".to_string()];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    docs.extend(names.into_iter().map(|n| format!("docs/{n}")));
    docs
}

#[test]
fn counters_md_lists_every_counter() {
    let counters = read("docs/counters.md");
    let documented: BTreeSet<String> = first_column(section(&counters, "## Counters"))
        .into_iter()
        .collect();
    let actual: BTreeSet<String> = COUNTER_NAMES.iter().map(|s| s.to_string()).collect();
    diff(
        "docs/counters.md counters vs enum nilb_counter",
        &documented,
        &actual,
    );
    // Every counter named anywhere in the docs exists.
    for doc in documents() {
        let text = read(&doc);
        for word in text.split('`').skip(1).step_by(2) {
            let looks_like_counter = (word.starts_with("xdp_") || word.starts_with("tc_"))
                && !word.ends_with('_')
                && word
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if looks_like_counter {
                assert!(
                    actual.contains(word),
                    "{doc} names counter `{word}`, which nilb does not have"
                );
            }
        }
    }
}

const CONFIG: &str = r#"
version: 1
cluster: {balancers: [10.0.0.11]}
services:
  - name: web
    vip: 10.0.0.100
    port: 80
    protocol: tcp
    health_check: {http: {}}
    dynamic_weight: {source: qps}
    backends:
      - {dip: 10.0.0.11, hostname: edge-11}
      - {dip: 10.0.0.12, weight: 200}
filters:
  deny:
    - {name: feed, prefixes: [192.0.2.0/24]}
routing: {}
"#;

fn control_plane() -> ControlPlane {
    let config = Config::parse(CONFIG).unwrap();
    let mut cp = ControlPlane::new(config.clone(), 0);
    // A filter rule, so that its metrics and status fields are built too.
    let filters = FilterSet::compile(&config, &Lists::new(), &BTreeMap::new()).unwrap();
    cp.set_filters(std::sync::Arc::new(filters));
    let key = ServiceKey {
        vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
        port: 80,
        protocol: Protocol::Tcp,
    };
    // Two load samples give a reading (a rate).
    for (t, n) in [(1000, 10), (2000, 30)] {
        cp.record_load(
            &key,
            Ipv4Addr::new(10, 0, 0, 12).into(),
            Ok(LoadSample::Connections(n)),
            t,
        );
    }
    cp
}

fn sample_status() -> Status {
    let mut s = Status::of(
        &control_plane(),
        Ipv4Addr::new(10, 0, 0, 11).into(),
        nilb::status::Role {
            running: true,
            configured: true,
        },
        Path::new("/etc/nilb/nilb.yaml"),
        Some(nilb::status::ReloadStatus {
            at: "2025-01-01T00:00:00Z".into(),
            ok: true,
            error: None,
            succeeded: 1,
            failed: 0,
        }),
    );
    s.stopped = Some("at 2025-01-01T00:00:00Z with --keep-dataplane".into());
    // A kernel without the crypto kfuncs, with a probe that could not tell
    // (the first feature: the docs name fields by the first element) and a
    // refused part of the config: every field shows.
    let mut k = nilb::features::KernelFeatures::new(
        "6.1.0-57-amd64",
        nilb::features::FEATURES
            .iter()
            .map(|f| f.name != nilb::features::QUIC_LB_CRYPTO)
            .collect(),
    );
    k.errors = vec![("btf", "Operation not permitted".into())];
    let mut kernel = nilb::features::KernelStatus::of(&k, vec![]);
    kernel.refused = vec![nilb::features::Refusal {
        service: "quic".into(),
        what: "quic_lb single-pass".into(),
        feature: nilb::features::QUIC_LB_CRYPTO.into(),
        reason: "needs the crypto kfuncs".into(),
        instead: "its packets follow the bucket table".into(),
    }];
    s.kernel = Some(kernel);
    let cp = control_plane();
    let install = nilb::dataplane::filters::FilterInstall {
        generation: 1,
        maps_ms: 3,
        bytes: 33_554_432,
        rules: 1,
        long_entries: 0,
        trie_entries: 0,
    };
    s.filters = Some(nilb::status::FiltersStatus::of(
        cp.filters(),
        2,
        Some(&install),
    ));
    s.routing = Some(nilb::routing::RoutingStatus {
        daemon: "bird".into(),
        bird_socket: "/run/bird/bird.ctl".into(),
        routes_file: "/run/nilb/bird-routes.conf".into(),
        drained: false,
        withdraw_on_fail_open: false,
        vips: vec![nilb::routing::VipDecision {
            vip: Ipv4Addr::new(10, 0, 0, 100),
            announce: true,
            reason: "a backend is healthy".into(),
        }],
        bird: nilb::routing::bird::BirdStatus {
            last_apply: Some(nilb::routing::bird::ApplyStatus {
                at: "2025-01-01T00:00:00Z".into(),
                ok: true,
                error: None,
                ms: 3,
                vips: vec![Ipv4Addr::new(10, 0, 0, 100)],
            }),
            applies: (1, 0),
            protocols: vec![nilb::routing::Session {
                name: "uplink".into(),
                proto: "BGP".into(),
                state: "up".into(),
                since: "19:33:28.975".into(),
                info: "Established".into(),
            }],
            poll_error: None,
        },
    });
    s.cluster = Some(nilb::cluster::ClusterStatus {
        endpoints: vec!["http://10.0.0.5:2379".into()],
        prefix: "/nilb".into(),
        connected: true,
        role: nilb::cluster::Role::Follower,
        leader: Some(Ipv4Addr::new(10, 0, 0, 11).into()),
        revision: 42,
        pending: 0,
        lag_ms: Some(120),
        last_contact: Some("2025-01-01T00:00:00Z".into()),
        error: None,
        updates: 7,
    });
    s
}

#[test]
fn status_columns_are_the_documented_ones_in_order() {
    let ops = read("docs/operations.md");
    let documented = first_column(section(&ops, "### What `nilb status` shows"));
    assert_eq!(
        documented, BACKEND_COLUMNS,
        "docs/operations.md vs nilb status"
    );
    let mut out = Vec::new();
    sample_status().print(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("backend "))
        .expect("a backend table header");
    let mut rest = header;
    for col in BACKEND_COLUMNS {
        let at = rest
            .find(col)
            .unwrap_or_else(|| panic!("column `{col}` not in order in `{header}`"));
        rest = &rest[at + col.len()..];
    }
    assert!(text.contains("DAEMON STOPPED"), "{text}");
}

/// Field paths of a JSON document as docs/operations.md writes them:
/// `services`, `services[].name`, `backends[].dip` (arrays of objects
/// inside `services[]` are named by their own key), `last_reload.at`.
fn json_fields(v: &serde_json::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let serde_json::Value::Object(m) = v {
        for (k, child) in m {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            out.insert(path.clone());
            match child {
                serde_json::Value::Object(_) => json_fields(child, &path, out),
                serde_json::Value::Array(items) => {
                    // arrays are documented under their own name:
                    // `services[].key`, `backends[].dip`
                    if let Some(first) = items.first() {
                        json_fields(first, &format!("{k}[]"), out);
                    }
                }
                _ => {}
            }
        }
    }
}

#[test]
fn status_json_fields_are_documented() {
    let ops = read("docs/operations.md");
    let sec = section(&ops, "### `nilb status --json [--state-file F]`");
    let documented: BTreeSet<String> = first_column(sec).into_iter().collect();
    let v: serde_json::Value = serde_json::from_str(&sample_status().to_json().unwrap()).unwrap();
    let mut actual = BTreeSet::new();
    json_fields(&v, "", &mut actual);
    diff(
        "nilb status --json vs docs/operations.md",
        &documented,
        &actual,
    );
}

/// A data plane whose counters are all zero.
struct Zeros;

impl StatsSource for Zeros {
    fn counters(&self) -> Result<Vec<u64>> {
        Ok(vec![0; COUNTER_NAMES.len()])
    }
    fn service_stats(&self, _index: u32) -> Result<nilb_service_stats> {
        Ok(nilb_service_stats::default())
    }
    fn backend_stats(&self, _slot: u32) -> Result<nilb_backend_stats> {
        Ok(nilb_backend_stats::default())
    }
    fn filter_stats(&self, _id: u16) -> Result<nilb::abi_sys::nilb_filter_stats> {
        Ok(nilb::abi_sys::nilb_filter_stats::default())
    }
    /// As on a node with NAT services (its sweep ran): every family shows.
    fn nat_sweep(&self) -> Option<(u64, u64, u64)> {
        Some((0, 0, 0))
    }
    fn kernel_features(&self) -> Option<&nilb::features::KernelFeatures> {
        static ALL: std::sync::OnceLock<nilb::features::KernelFeatures> =
            std::sync::OnceLock::new();
        Some(ALL.get_or_init(nilb::features::KernelFeatures::all))
    }
}

#[test]
fn metrics_are_the_documented_ones() {
    let snap = metrics::build(
        &Zeros,
        &control_plane(),
        DaemonFacts::default(),
        Some((CpuTimes::default(), Some(0.25))),
    );
    let actual: BTreeSet<String> = snap.families().iter().map(|f| f.name.clone()).collect();
    let ops = read("docs/operations.md");
    let documented: BTreeSet<String> = first_column(section(&ops, "### Metrics"))
        .into_iter()
        .collect();
    diff("/metrics vs docs/operations.md", &documented, &actual);
    // Every metric named anywhere in the docs exists.
    // (docs/design.md names maps and structs the same way, e.g. `nilb_config`.)
    for doc in documents().into_iter().filter(|d| d != "docs/design.md") {
        let text = read(&doc);
        for word in text.split('`').skip(1).step_by(2) {
            let word = word.trim_start_matches("rate(");
            let name = word.split(['{', '[', '(', ')', ' ']).next().unwrap_or("");
            if name.starts_with("nilb_") && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            {
                assert!(
                    actual.contains(name),
                    "{doc} names metric `{name}`, which /metrics does not export"
                );
            }
        }
    }
}

#[test]
fn documented_defaults_are_the_loaders() {
    let config_md = read("docs/config.md");
    let rows = two_columns(section(&config_md, "## Defaults"));
    // The least configuration that reaches every defaulted field.
    let c = Config::parse(CONFIG).unwrap();
    let s = &c.services[0];
    let dw = s.dynamic_weight.as_ref().unwrap();
    let r = c.routing.as_ref().unwrap();
    let etcd_config = Config::parse(
        "version: 1\ncluster: {balancers: [10.0.0.11], etcd: {endpoints: [http://10.0.0.5:2379]}}\n",
    )
    .unwrap();
    let etcd = etcd_config.cluster.etcd.as_ref().unwrap();
    let quic_config = Config::parse(
        "version: 1\ncluster: {balancers: [10.0.0.11]}\nservices:\n  - {name: q, vip: 10.0.0.100, port: 443, protocol: udp, quic_lb: {codepoint: 0, server_id_len: 1, nonce_len: 4, algorithm: plaintext}, backends: [{dip: 10.0.0.12}]}\n",
    )
    .unwrap();
    let quic = quic_config.services[0].quic_lb.as_ref().unwrap();
    let (scheme, uri, codes) = match &s.health_check.checker {
        Checker::Http {
            scheme, uri, codes, ..
        } => (*scheme, uri.clone(), codes.clone()),
        other => panic!("{other:?}"),
    };
    let actual = |field: &str| -> Option<String> {
        Some(match field {
            "cluster.hash_seed" => c.cluster.hash_seed.to_string(),
            "cluster.gue_port" => c.cluster.gue_port.to_string(),
            "cluster.unknown_flow" => format!("{:?}", c.cluster.unknown_flow).to_lowercase(),
            "cluster.icmp_too_big_rate" => c.cluster.icmp_too_big_rate.to_string(),
            "cluster.etcd.prefix" => etcd.prefix.clone(),
            "cluster.etcd.lease_ttl_ms" => etcd.lease_ttl_ms.to_string(),
            "defaults.table_size" => s.table_size.to_string(),
            "defaults.health_check.interval_ms" => s.health_check.interval_ms.to_string(),
            "defaults.health_check.timeout_ms" => s.health_check.timeout_ms.to_string(),
            "defaults.health_check.rise_count" => s.health_check.rise_count.to_string(),
            "defaults.health_check.fall_count" => s.health_check.fall_count.to_string(),
            "defaults.rebalance.min_interval_ms" => c.rebalance.min_interval_ms.to_string(),
            "defaults.rebalance.max_step_percent" => c.rebalance.max_step_percent.to_string(),
            "defaults.rebalance.min_bucket_age_ms" => c.rebalance.min_bucket_age_ms.to_string(),
            "defaults.rebalance.previous_owners" => c.rebalance.previous_owners.to_string(),
            "defaults.encap_check" => s.encap_check.to_string(),
            "defaults.panic_threshold_percent" => s.panic_threshold_percent.to_string(),
            "backends[].weight" => s.backends[0].weight.to_string(),
            "backends[].state" => s.backends[0].state.to_string(),
            "http.scheme" => match scheme {
                Scheme::Http => "http".into(),
                Scheme::Https => "https".into(),
            },
            "http.uri" => uri.clone(),
            "http.codes" => format!("{codes:?}"),
            "dynamic_weight.metrics_path" => dw.metrics_path.clone(),
            "dynamic_weight.target_percent" => dw.target_percent.to_string(),
            "dynamic_weight.interval_ms" => dw.interval_ms.to_string(),
            "dynamic_weight.deadband_percent" => dw.deadband_percent.to_string(),
            "dynamic_weight.max_change_percent" => dw.max_change_percent.to_string(),
            "dynamic_weight.min_weight_percent" => dw.min_weight_percent.to_string(),
            "dynamic_weight.max_weight_percent" => dw.max_weight_percent.to_string(),
            "routing.bird_socket" => r.bird_socket.display().to_string(),
            "routing.routes_file" => r.routes_file.display().to_string(),
            "routing.birdc" => r.birdc.display().to_string(),
            "routing.drain_file" => r.drain_file.display().to_string(),
            "routing.drained" => r.drained.to_string(),
            "routing.withdraw_on_fail_open" => r.withdraw_on_fail_open.to_string(),
            "routing.withdraw_grace_ms" => r.withdraw_grace_ms.to_string(),
            "quic_lb.self_encode_length" => quic.self_encode_length.to_string(),
            _ => return None,
        })
    };
    assert!(rows.len() >= 20, "the defaults table: {rows:?}");
    for (field, default) in &rows {
        let got = actual(field).unwrap_or_else(|| {
            panic!("docs/config.md documents a default for `{field}`: teach tests/docs_agree.rs to read it")
        });
        assert_eq!(
            &got, default,
            "default of `{field}`: docs/config.md vs the loader"
        );
    }
    // And the schema block at the top of config.md is itself a valid file.
    let schema = config_md
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    Config::parse(schema).expect("the schema example in docs/config.md is valid");
}

#[test]
fn the_unit_documents_files_the_install_creates() {
    let unit = read("deploy/nilb.service");
    let ops = read("docs/operations.md");
    let install = section(&ops, "## 1. Install");
    for line in unit.lines().filter(|l| l.starts_with("Documentation=")) {
        for url in line["Documentation=".len()..].split_whitespace() {
            let Some(path) = url.strip_prefix("file://") else {
                continue;
            };
            let file = Path::new(path)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let dir = Path::new(path).parent().unwrap().display().to_string();
            assert!(
                install.contains(&format!("install -d {dir}")),
                "{url}: the install in docs/operations.md creates no {dir}"
            );
            let shipped = install.lines().any(|l| {
                l.contains(&dir)
                    && (l.contains(&format!(" {file} "))
                        || l.contains(&format!("docs/{file}"))
                        || (l.contains("docs/*.md")
                            && Path::new(env!("CARGO_MANIFEST_DIR"))
                                .join("docs")
                                .join(&file)
                                .exists()))
            });
            assert!(
                shipped,
                "{url}: the install in docs/operations.md does not install {file}"
            );
        }
    }
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
