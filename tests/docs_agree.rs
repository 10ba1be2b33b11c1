//! What the docs list is what the tools print, so the two cannot drift
//! apart again: the counters in docs/counters.md against the data plane's
//! counter names; the columns of `nilb status` and the fields of `nilb
//! status --json` against docs/operations.md; the metric families of
//! `/metrics` against docs/operations.md; the defaults table of
//! docs/config.md against what the configuration loader fills in; and the
//! systemd unit's documentation paths against the documented install.
//! (That what the repository cites exists: tests/docs_citations.rs.) No
//! root needed.

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
