//! Operator commands that do not run the daemon: `nilb check`, `nilb lookup`,
//! `nilb stats` and `nilb tables`. Each writes its human-readable report to
//! a writer so that tests can read it; `lookup`, `stats` and `tables` also
//! build a report struct that `--json` prints (see [`JSON_SCHEMA`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::config::{BackendState, Config, Protocol, ServiceKey};
use crate::control::ControlPlane;
use crate::dataplane::abi::{self, COUNTER_HELP, COUNTER_NAMES};
use crate::dataplane::{LiveTable, PinnedMaps, RawTable};
use crate::hash::{bucket_of, flow_hash, gue_source_port, FlowTuple};

/// Print a summary of a valid configuration: services, backends and the
/// share of buckets each backend gets in a freshly built table.
pub fn check_summary(config: &Config, out: &mut dyn Write) -> Result<()> {
    let cp = ControlPlane::new(config.clone(), 0);
    let backends: usize = config.services.iter().map(|s| s.backends.len()).sum();
    writeln!(
        out,
        "configuration valid: {} service(s), {} backend(s), {} cluster address(es); hash seed {:#010x}, GUE port {}, unknown_flow {}",
        config.services.len(),
        backends,
        config.cluster_addresses().len(),
        config.cluster.hash_seed,
        config.cluster.gue_port,
        config.cluster.unknown_flow.name(),
    )?;
    let r = &config.rebalance;
    writeln!(
        out,
        "rebalance: voluntary steps at most every {} ms, {}% of buckets each, buckets at least {} ms old",
        r.min_interval_ms, r.max_step_percent, r.min_bucket_age_ms
    )?;
    let balancers: Vec<String> = config
        .cluster
        .balancers
        .iter()
        .map(|b| b.to_string())
        .collect();
    writeln!(
        out,
        "balancers: {}{}",
        balancers.join(", "),
        if config.cluster.is_ipv6() {
            " (IPv6 cluster network: GUE in outer IPv6, 16-byte hops)"
        } else {
            ""
        }
    )?;
    for s in &config.services {
        let key = s.key();
        let table = &cp.service(&key).expect("service in control plane").table;
        let shares = table.shares();
        writeln!(
            out,
            "service {} {}{} table {} buckets, health check {}{}",
            s.name,
            key,
            if s.mode == crate::types::ServiceMode::Nat {
                format!(
                    " NAT mode (backends listen on their own address, port {})",
                    s.target_port
                )
            } else {
                String::new()
            },
            s.table_size,
            describe_check(&s.health_check),
            if s.encap_check {
                ", plus the encapsulated check (GUE SYN to the VIP)"
            } else {
                ""
            }
        )?;
        let active = s.backends.iter().any(|b| b.state == BackendState::Active);
        if s.backends.is_empty() {
            writeln!(
                out,
                "  warning: no backends: every packet to this service is dropped"
            )?;
        } else if !active && s.backends.iter().any(|b| b.state == BackendState::Drained) {
            writeln!(
                out,
                "  warning: no active backend: the service fails open to its drained backends"
            )?;
        } else if !active {
            writeln!(
                out,
                "  warning: every backend is offline: every packet to this service is dropped"
            )?;
        }
        if let Some(q) = &s.quic_lb {
            writeln!(
                out,
                "  quic_lb: {}, codepoint {}, server ID {} byte(s) + nonce {} byte(s): connection IDs of {} bytes{}{}",
                q.algorithm.name(),
                q.codepoint,
                q.server_id_len,
                q.nonce_len,
                q.cid_len(),
                if q.self_encode_length {
                    ", length self-encoded"
                } else {
                    ""
                },
                q.key_file
                    .as_ref()
                    .map(|f| format!(", key from {}", f.display()))
                    .unwrap_or_default(),
            )?;
        }
        let w = crate::report::address_width(s.backends.iter().map(|b| &b.dip));
        for b in &s.backends {
            let n = shares.get(&b.dip).copied().unwrap_or(0);
            // A QUIC-LB backend's server ID: what its QUIC server must
            // put in the connection IDs it issues.
            let sid = s
                .quic_lb
                .as_ref()
                .and_then(|q| q.server_ids.iter().find(|x| x.dip == b.dip))
                .map(|x| {
                    format!(
                        " server_id {}{}",
                        x.server_id,
                        if x.assigned { " (assigned)" } else { "" }
                    )
                })
                .unwrap_or_default();
            writeln!(
                out,
                "  {:<w$} {:<20} weight {:>5} {:<8} {:>6} buckets {:>5.1}%{sid}",
                b.dip.to_string(),
                b.label(),
                b.weight,
                b.state.to_string(),
                n,
                100.0 * n as f64 / s.table_size as f64
            )?;
        }
    }
    Ok(())
}

/// One-line description of a health check.
pub fn describe_check(h: &crate::config::HealthCheck) -> String {
    use crate::config::{Checker, Scheme};
    let what = match &h.checker {
        Checker::None => return "none".into(),
        Checker::Tcp { port } => format!("tcp connect :{port}"),
        Checker::Http {
            scheme,
            uri,
            port,
            codes,
            tls,
            ..
        } => format!(
            "{} GET :{port}{uri} expecting {codes:?}{}",
            match scheme {
                Scheme::Http => "http",
                Scheme::Https => "https",
            },
            match (scheme, &tls.sni, &tls.ca_file) {
                (Scheme::Http, _, _) => String::new(),
                (_, sni, ca) => format!(
                    " (SNI {}, certificate {})",
                    sni.as_deref().unwrap_or("none"),
                    ca.as_ref().map_or("not verified".to_string(), |c| format!(
                        "verified against {}",
                        c.display()
                    ))
                ),
            }
        ),
    };
    format!(
        "{what} every {} ms (timeout {} ms, rise {}, fall {})",
        h.interval_ms, h.timeout_ms, h.rise_count, h.fall_count
    )
}

/// Parse `tcp`/`udp`.
pub fn parse_protocol(s: &str) -> Result<Protocol> {
    match s.to_ascii_lowercase().as_str() {
        "tcp" => Ok(Protocol::Tcp),
        "udp" => Ok(Protocol::Udp),
        _ => bail!("protocol must be tcp or udp, not `{s}`"),
    }
}

/// Where `nilb lookup` takes the table from.
pub enum TableSource<'a> {
    /// A table freshly built from the config (no history).
    Config,
    /// The running daemon's table, from its pinned maps.
    Live(&'a Path),
}

pub use crate::report::JSON_SCHEMA;

/// Write `doc` as one line of JSON followed by a newline.
pub fn write_json<T: Serialize>(doc: &T, out: &mut dyn Write) -> Result<()> {
    let mut line = serde_json::to_vec(doc).context("encoding JSON")?;
    line.push(b'\n');
    out.write_all(&line)?;
    Ok(())
}

/// Percentage of `n` in `of`, rounded to 0.1 (as in the state file).
fn percent(n: u32, of: u32) -> f64 {
    (1000.0 * n as f64 / of.max(1) as f64).round() / 10.0
}

/// `nilb lookup --json`: where one client flow goes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LookupReport {
    /// [`JSON_SCHEMA`].
    pub schema: u32,
    /// Client address and port.
    pub src: SocketAddr,
    /// VIP and port.
    pub dst: SocketAddr,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Service name from the config.
    pub service: String,
    /// Service key, `VIP:PORT/PROTOCOL`.
    pub key: String,
    /// `config` (a table built fresh from the config) or `live` (the running
    /// daemon's table, read from its pins).
    pub table: &'static str,
    /// Pin directory read (`live` only).
    pub pin_dir: Option<String>,
    /// Hash seed used.
    pub hash_seed: u32,
    /// Flow hash.
    pub hash: u32,
    /// Bucket index, `0 .. table_size`.
    pub bucket: u32,
    /// Buckets in the table.
    pub table_size: u32,
    /// First hop of the bucket; `null`: the balancer drops the packet.
    pub first_hop: Option<IpAddr>,
    /// Its hostname in the config, if it has one.
    pub first_hop_hostname: Option<String>,
    /// Second hop of the bucket (its newest previous owner), if any: the
    /// first element of `previous_hops`, kept for readers of schema 1.
    pub second_hop: Option<IpAddr>,
    /// Its hostname in the config, if it has one.
    pub second_hop_hostname: Option<String>,
    /// Every previous owner of the bucket, newest first (those known down
    /// after the others): the hops the balancer lists in GUE after the first
    /// hop, which second chance walks in this order.
    pub previous_hops: Vec<IpAddr>,
    /// Their hostnames in the config (`null` where none), in the same order.
    pub previous_hop_hostnames: Vec<Option<String>>,
    /// UDP source port of the GUE packet (from the hash).
    pub gue_source_port: u16,
    /// Which edge filter rules decide the client's source (`null`: no
    /// filter is configured); see docs/operations.md "Edge filters".
    pub filters: Option<crate::filter_report::FilterLookup>,
}

/// Which service, bucket and hops a client flow maps to.
pub fn lookup_report(
    config: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    protocol: Protocol,
    source: TableSource<'_>,
) -> Result<LookupReport> {
    let key = ServiceKey {
        vip: dst.ip(),
        port: dst.port(),
        protocol,
    };
    anyhow::ensure!(
        src.is_ipv4() == dst.is_ipv4(),
        "{src} and {dst} are not of the same address family"
    );
    let service = config
        .service(&key)
        .with_context(|| format!("no service for {key} in the configuration"))?;
    let flow = FlowTuple {
        saddr: src.ip(),
        daddr: dst.ip(),
        sport: src.port(),
        dport: dst.port(),
        proto: protocol.number(),
    };
    let (seed, size, table, pin_dir, chain) = match source {
        TableSource::Config => {
            let cp = ControlPlane::new(config.clone(), 0);
            let t = &cp.service(&key).expect("configured").table;
            let seed = config.cluster.hash_seed;
            let i = bucket_of(flow_hash(&flow, seed), t.size()) as usize;
            let chain = (t.first(i), t.previous(i).collect::<Vec<_>>());
            (seed, t.size(), "config", None, chain)
        }
        TableSource::Live(dir) => {
            let pins = PinnedMaps::open(dir)?;
            let seed = pins.settings()?.hash_seed;
            let (_, live) = pins
                .tables()?
                .into_iter()
                .find(|(k, _)| *k == key)
                .with_context(|| format!("the running data plane has no table for {key}"))?;
            let size = live.size() as u32;
            let i = bucket_of(flow_hash(&flow, seed), size) as usize;
            let chain = live.chains[i].clone();
            (seed, size, "live", Some(dir.display().to_string()), chain)
        }
    };
    let hash = flow_hash(&flow, seed);
    let bucket = bucket_of(hash, size);
    let (first, previous) = chain;
    let second = previous.first().copied();
    let hostname = |a: Option<IpAddr>| {
        a.and_then(|a| service.backends.iter().find(|x| x.dip == a))
            .and_then(|x| x.hostname.clone())
    };
    Ok(LookupReport {
        schema: JSON_SCHEMA,
        src,
        dst,
        protocol: protocol.to_string(),
        service: service.name.clone(),
        key: key.to_string(),
        table,
        pin_dir,
        hash_seed: seed,
        hash,
        bucket,
        table_size: size,
        first_hop: first,
        first_hop_hostname: hostname(first),
        second_hop: second,
        second_hop_hostname: hostname(second),
        previous_hop_hostnames: previous.iter().map(|&p| hostname(Some(p))).collect(),
        previous_hops: previous,
        gue_source_port: gue_source_port(hash),
        filters: None,
    })
}

/// Print which service, bucket and hops a client flow maps to.
/// Returns: the report printed.
pub fn lookup(
    config: &Config,
    src: SocketAddr,
    dst: SocketAddr,
    protocol: Protocol,
    source: TableSource<'_>,
    out: &mut dyn Write,
) -> Result<LookupReport> {
    let r = lookup_report(config, src, dst, protocol, source)?;
    print_lookup(config, &r, out)?;
    Ok(r)
}

/// Print a lookup report (and its filter part, if it has one).
pub fn print_lookup(config: &Config, r: &LookupReport, out: &mut dyn Write) -> Result<()> {
    let (src, dst) = (r.src, r.dst);
    let protocol = parse_protocol(&r.protocol)?;
    let service = config
        .service(&ServiceKey {
            vip: dst.ip(),
            port: dst.port(),
            protocol,
        })
        .context("service vanished from the configuration")?;
    let label = |a: Option<IpAddr>| match a {
        None => "none".to_string(),
        Some(a) => match service.backends.iter().find(|x| x.dip == a) {
            Some(x) => format!("{a} ({})", x.label()),
            None => a.to_string(),
        },
    };
    let origin = match &r.pin_dir {
        None => "built from the config (fresh, no history)".to_string(),
        Some(dir) => format!("live, from {dir}"),
    };
    writeln!(out, "flow      {src} -> {dst} {protocol}")?;
    writeln!(out, "service   {} ({})", r.service, r.key)?;
    writeln!(out, "table     {origin}")?;
    writeln!(
        out,
        "hash      {:#010x} (seed {:#010x})",
        r.hash, r.hash_seed
    )?;
    writeln!(out, "bucket    {} of {}", r.bucket, r.table_size)?;
    writeln!(out, "first hop {}", label(r.first_hop))?;
    writeln!(out, "second hop {}", label(r.second_hop))?;
    if r.previous_hops.len() > 1 {
        let older: Vec<String> = r.previous_hops[1..]
            .iter()
            .map(|&a| label(Some(a)))
            .collect();
        writeln!(out, "older hops {}", older.join(", "))?;
    }
    writeln!(out, "GUE source port {}", r.gue_source_port)?;
    if r.first_hop.is_none() {
        writeln!(
            out,
            "note: this bucket has no first hop; the balancer drops the packet"
        )?;
    }
    if let Some(f) = &r.filters {
        crate::filter_report::print_lookup(f, out)?;
    }
    Ok(())
}

/// `nilb tables --json`: the live tables of a running data plane.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TablesReport {
    /// [`JSON_SCHEMA`].
    pub schema: u32,
    /// Pin directory read.
    pub pin_dir: String,
    /// The node's address as the data plane has it.
    pub node: IpAddr,
    /// Hash seed in the data plane.
    pub hash_seed: u32,
    /// Services in key order.
    pub services: Vec<TableReport>,
}

/// One service's live table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableReport {
    /// `VIP:PORT/PROTOCOL`.
    pub key: String,
    /// VIP (IPv4 or IPv6).
    pub vip: IpAddr,
    /// Port.
    pub port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// First bucket of the service's region of the bucket pool (changes
    /// when the table gets a new region: a new size).
    pub table_base: u32,
    /// Index into `service_stats`.
    pub service_index: u32,
    /// Buckets.
    pub table_size: u32,
    /// Every address that is a hop of some bucket (first hop or previous
    /// owner), in address order.
    pub backends: Vec<TableBackend>,
    /// Buckets in index order (the bucket index is the position).
    pub buckets: Vec<BucketReport>,
    /// Buckets whose `bucket_first` entry (what the balancer reads first)
    /// is not the one their bucket gives: 0 unless a daemon died between
    /// a bucket and its entry (the balancer then forwards by the entry
    /// until the next daemon's start rewrites it) or read during an
    /// install; `null`: pins without `bucket_first`.
    pub first_hop_entries_lagging: Option<usize>,
}

/// Per-backend summary of a live table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableBackend {
    /// Backend address.
    pub dip: IpAddr,
    /// Buckets where it is first hop.
    pub buckets: u32,
    /// Their share of the table, percent (0.1 precision).
    pub share_percent: f64,
    /// Buckets where it is second hop.
    pub second_hop_buckets: u32,
    /// Their share of the table, percent (0.1 precision).
    pub second_hop_percent: f64,
    /// Buckets where it is a previous owner at any place in the chain
    /// (second hop or older).
    pub previous_hop_buckets: u32,
    /// `backend_stats` slot of its first-hop buckets (`null` if it is no
    /// bucket's first hop).
    pub counter_slot: Option<u32>,
}

/// One bucket of a live table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BucketReport {
    /// Gets new connections; `null`: the balancer drops the packets.
    pub first_hop: Option<IpAddr>,
    /// Gets packets the first hop does not know (the newest previous
    /// owner); `null`: none. The first element of `previous_hops`, kept for
    /// readers of schema 1.
    pub second_hop: Option<IpAddr>,
    /// Every previous owner, newest first: the hops the balancer lists in
    /// GUE, tried in this order (`second_hop` is the first).
    pub previous_hops: Vec<IpAddr>,
    /// `backend_stats` slot the balancer counts this bucket's packets in
    /// (`null` without a first hop).
    pub counter_slot: Option<u32>,
    /// When the first hop last changed, as stored: seconds of the kernel's
    /// boot-time clock (`CLOCK_BOOTTIME`; tables written by older daemons
    /// hold Unix seconds); `null`: never since the table was first built.
    pub moved_at_s: Option<u32>,
}

/// A live table as reported by `nilb tables` (`backends`: the address of
/// every backend slot, index = slot).
pub fn table_report(t: &RawTable, backends: &[Option<IpAddr>]) -> TableReport {
    let size = t.service.table_mask.wrapping_add(1);
    let live = LiveTable::from_raw(t, backends);
    let buckets: Vec<BucketReport> = live
        .chains
        .iter()
        .zip(&t.buckets)
        .zip(&t.moved_s)
        .map(|(((first, previous), hops), &moved)| BucketReport {
            first_hop: *first,
            second_hop: previous.first().copied(),
            previous_hops: previous.clone(),
            counter_slot: first.map(|_| hops[0] as u32),
            moved_at_s: (moved != 0).then_some(moved),
        })
        .collect();
    // dip -> (first, second, any previous place, slot)
    let mut by_dip: BTreeMap<IpAddr, (u32, u32, u32, Option<u32>)> = BTreeMap::new();
    for b in &buckets {
        if let Some(f) = b.first_hop {
            let e = by_dip.entry(f).or_default();
            e.0 += 1;
            e.3 = e.3.or(b.counter_slot);
        }
        for (i, p) in b.previous_hops.iter().enumerate() {
            let e = by_dip.entry(*p).or_default();
            e.1 += (i == 0) as u32;
            e.2 += 1;
        }
    }
    TableReport {
        key: t.key.to_string(),
        vip: t.key.vip,
        port: t.key.port,
        protocol: t.key.protocol.to_string(),
        table_base: t.service.table_base,
        service_index: t.service.service_index,
        table_size: size,
        backends: by_dip
            .into_iter()
            .map(|(dip, (first, second, previous, slot))| TableBackend {
                dip,
                buckets: first,
                share_percent: percent(first, size),
                second_hop_buckets: second,
                second_hop_percent: percent(second, size),
                previous_hop_buckets: previous,
                counter_slot: slot,
            })
            .collect(),
        buckets,
        first_hop_entries_lagging: (!t.first.is_empty()).then(|| {
            t.buckets
                .iter()
                .zip(&t.first)
                .filter(|(h, f)| abi::first_hop_entry(abi::bucket_word(**h)) != **f)
                .count()
        }),
    }
}

/// Every live table of the data plane pinned under `dir`, reported.
fn table_reports(pins: &PinnedMaps) -> Result<Vec<TableReport>> {
    let (tables, backends) = pins.raw_tables()?;
    Ok(tables.iter().map(|t| table_report(t, &backends)).collect())
}

/// The live tables of the data plane pinned under `dir`.
pub fn tables_report(dir: &Path) -> Result<TablesReport> {
    let pins = PinnedMaps::open(dir)?;
    let s = pins.settings()?;
    Ok(TablesReport {
        schema: JSON_SCHEMA,
        pin_dir: dir.display().to_string(),
        node: s.node,
        hash_seed: s.hash_seed,
        services: table_reports(&pins)?,
    })
}

/// A stored bucket move time (boot-time seconds) as an RFC 3339 wall time.
fn wall_time(stored_s: u32) -> String {
    use crate::clock::Clock;
    let c = crate::clock::SystemClock;
    let ms = crate::clock::move_time_on_wall(stored_s as u64 * 1000, c.boot_ms(), c.wall_ms());
    crate::report::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

/// Print the live tables of the data plane pinned under `dir`: per service
/// the backends' shares, and with `buckets` every bucket.
pub fn tables(dir: &Path, buckets: bool, out: &mut dyn Write) -> Result<()> {
    let r = tables_report(dir)?;
    writeln!(
        out,
        "node {} (hash seed {:#010x}), pins {}",
        r.node, r.hash_seed, r.pin_dir
    )?;
    for s in &r.services {
        let moved = s.buckets.iter().filter_map(|b| b.moved_at_s).count();
        let last = s.buckets.iter().filter_map(|b| b.moved_at_s).max();
        writeln!(
            out,
            "service {}: {} buckets at {} of the pool, service index {}, {} with a second hop, {} moved since built{}",
            s.key,
            s.table_size,
            s.table_base,
            s.service_index,
            s.buckets.iter().filter(|b| b.second_hop.is_some()).count(),
            moved,
            match last {
                Some(t) => format!(" (last {})", wall_time(t)),
                None => String::new(),
            }
        )?;
        let w = crate::report::address_width(s.backends.iter().map(|b| &b.dip));
        writeln!(
            out,
            "  {:<w$} {:>8} {:>7} {:>8} {:>7} {:>6}",
            "backend", "buckets", "share", "2nd hop", "share", "slot"
        )?;
        for b in &s.backends {
            writeln!(
                out,
                "  {:<w$} {:>8} {:>6.1}% {:>8} {:>6.1}% {:>6}",
                b.dip.to_string(),
                b.buckets,
                b.share_percent,
                b.second_hop_buckets,
                b.second_hop_percent,
                b.counter_slot.map_or("-".to_string(), |x| x.to_string())
            )?;
        }
        let empty = s.buckets.iter().filter(|b| b.first_hop.is_none()).count();
        if empty > 0 {
            writeln!(
                out,
                "  {empty} bucket(s) without a first hop: the balancer drops their packets"
            )?;
        }
        if let Some(n) = s.first_hop_entries_lagging.filter(|&n| n > 0) {
            writeln!(
                out,
                "  {n} bucket(s) whose bucket_first entry differs from the bucket (the balancer forwards by the entry's first hop until `nilb run` starts again and rewrites it)"
            )?;
        }
        if buckets {
            writeln!(
                out,
                "  {:>6}  {:<w$} {:<w$} {:>6}  {:<25} older hops",
                "bucket", "first hop", "second hop", "slot", "moved at"
            )?;
            for (i, b) in s.buckets.iter().enumerate() {
                let a = |x: Option<IpAddr>| x.map_or("-".to_string(), |x| x.to_string());
                let older: Vec<String> = b
                    .previous_hops
                    .iter()
                    .skip(1)
                    .map(|x| x.to_string())
                    .collect();
                writeln!(
                    out,
                    "  {:>6}  {:<w$} {:<w$} {:>6}  {:<25} {}",
                    i,
                    a(b.first_hop),
                    a(b.second_hop),
                    b.counter_slot.map_or("-".to_string(), |x| x.to_string()),
                    b.moved_at_s.map_or("-".to_string(), wall_time),
                    if older.is_empty() {
                        "-".to_string()
                    } else {
                        older.join(",")
                    }
                )?;
            }
        }
    }
    Ok(())
}

/// `nilb stats --json`: the counters of a running data plane.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsReport {
    /// [`JSON_SCHEMA`].
    pub schema: u32,
    /// Pin directory read.
    pub pin_dir: String,
    /// The node's address as the data plane has it.
    pub node: IpAddr,
    /// Hash seed in the data plane.
    pub hash_seed: u32,
    /// GUE UDP port.
    pub gue_port: u16,
    /// `drop`, `local` or `rst` (`cluster.unknown_flow`).
    pub unknown_flow: &'static str,
    /// Every global counter by name (zeros included): packets since the
    /// data plane was loaded, summed over CPUs.
    pub counters: BTreeMap<&'static str, u64>,
    /// Per service, in key order.
    pub services: Vec<ServiceStatsReport>,
    /// Every edge filter rule with what it dropped.
    pub filters: Vec<crate::filter_report::RuleStatsReport>,
    /// NAT mode's flow table on this node (None: the pins have none).
    pub nat_flows: Option<NatFlowsReport>,
}

/// NAT mode's flow table (`nat_flows`, docs/design.md "NAT mode") as read
/// from the pins: flows this node accepted for `mode: nat` services whose
/// entry the sweep has not removed yet.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NatFlowsReport {
    /// Entries now.
    pub flows: u64,
    /// Of which TCP.
    pub tcp: u64,
    /// Of which UDP.
    pub udp: u64,
    /// Its size (`cluster.nat.max_flows` when it was created).
    pub max_flows: u32,
}

/// Count the entries of the pinned `nat_flows` under `dir`, if any.
fn nat_flows_report(dir: &Path) -> Option<NatFlowsReport> {
    use libbpf_rs::MapCore;
    let h = libbpf_rs::MapHandle::from_pinned_path(dir.join(crate::dataplane::pinned::NAT_FLOWS))
        .ok()?;
    let mut r = NatFlowsReport {
        flows: 0,
        tcp: 0,
        udp: 0,
        max_flows: h.max_entries(),
    };
    for key in h.keys() {
        r.flows += 1;
        match abi::read_struct::<abi::sys::nilb_nat_key>(&key).map(|k| k.proto) {
            Ok(6) => r.tcp += 1,
            Ok(17) => r.udp += 1,
            _ => {}
        }
    }
    Some(r)
}

/// Counters of one service.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServiceStatsReport {
    /// `VIP:PORT/PROTOCOL`.
    pub key: String,
    /// VIP (IPv4 or IPv6).
    pub vip: IpAddr,
    /// Port.
    pub port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Index into `service_stats`.
    pub service_index: u32,
    /// Buckets.
    pub table_size: u32,
    /// Buckets that have a second hop.
    pub buckets_with_second_hop: u32,
    /// Balancer: packets dropped because their bucket had no first hop.
    pub xdp_drops: u64,
    /// This node: GUE packets decapsulated and delivered here.
    pub tc_decap: u64,
    /// This node: GUE packets passed on to the next hop (second chance).
    pub tc_forward: u64,
    /// This node: GUE packets dropped (unknown flow, no hop left).
    pub tc_drops: u64,
    /// What the balancer sent to each current first hop.
    pub backends: Vec<BackendStatsReport>,
}

/// What the balancer sent to one backend of one service as first hop.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BackendStatsReport {
    /// Backend address.
    pub dip: IpAddr,
    /// Its `backend_stats` slot.
    pub counter_slot: u32,
    /// Buckets where it is first hop now.
    pub buckets: u32,
    /// Packets encapsulated to it.
    pub packets: u64,
    /// Their bytes (IP packet before encapsulation).
    pub bytes: u64,
    /// TCP SYNs without ACK among them (new connections).
    pub new_connections: u64,
}

/// The counters of the running data plane pinned under `dir`.
pub fn stats_report(dir: &Path) -> Result<StatsReport> {
    let pins = PinnedMaps::open(dir)?;
    let s = pins.settings()?;
    let values = abi::read_counters(&pins.counters)?;
    let mut services = Vec::new();
    for table in table_reports(&pins)? {
        let st = abi::read_percpu(
            &pins.service_stats,
            table.service_index,
            abi::sum_service_stats,
        )?;
        let mut backends = Vec::new();
        for b in &table.backends {
            let Some(slot) = b.counter_slot else {
                continue;
            };
            let c = abi::read_percpu(&pins.backend_stats, slot, abi::sum_backend_stats)?;
            backends.push(BackendStatsReport {
                dip: b.dip,
                counter_slot: slot,
                buckets: b.buckets,
                packets: c.packets,
                bytes: c.bytes,
                new_connections: c.syns,
            });
        }
        services.push(ServiceStatsReport {
            key: table.key,
            vip: table.vip,
            port: table.port,
            protocol: table.protocol,
            service_index: table.service_index,
            table_size: table.table_size,
            buckets_with_second_hop: table
                .buckets
                .iter()
                .filter(|b| b.second_hop.is_some())
                .count() as u32,
            xdp_drops: st.xdp_drops,
            tc_decap: st.tc_decap,
            tc_forward: st.tc_forward,
            tc_drops: st.tc_drops,
            backends,
        });
    }
    Ok(StatsReport {
        schema: JSON_SCHEMA,
        pin_dir: dir.display().to_string(),
        node: s.node,
        hash_seed: s.hash_seed,
        gue_port: s.gue_port,
        unknown_flow: s.unknown_flow.name(),
        counters: COUNTER_NAMES.iter().copied().zip(values).collect(),
        services,
        filters: crate::filter_report::rule_stats(&pins)?,
        nat_flows: nat_flows_report(dir),
    })
}

/// Print the counters of the running data plane pinned under `dir`.
pub fn stats(dir: &Path, all: bool, out: &mut dyn Write) -> Result<()> {
    let r = stats_report(dir)?;
    writeln!(
        out,
        "node {} (hash seed {:#010x}, GUE port {}, unknown_flow {})",
        r.node, r.hash_seed, r.gue_port, r.unknown_flow
    )?;
    writeln!(out, "counters (packets since the data plane was loaded):")?;
    for (name, help) in COUNTER_NAMES.iter().zip(COUNTER_HELP) {
        let v = r.counters.get(name).copied().unwrap_or(0);
        if all || v != 0 {
            writeln!(out, "  {name:<26} {v:>14}  {help}")?;
        }
    }
    writeln!(out, "services:")?;
    for s in &r.services {
        // The balancer counts per (service, first hop): the service's
        // totals are the sum over its current first hops.
        let (packets, bytes, syns) = s.backends.iter().fold((0, 0, 0), |(p, b, n), x| {
            (p + x.packets, b + x.bytes, n + x.new_connections)
        });
        writeln!(
            out,
            "  {}: {} buckets ({} with second hop); balanced (sum over its first hops): packets {packets}, bytes {bytes}, new connections {syns}; balancer drops (no backend) {}; here: decapsulated {}, second-chance forwards {}, unknown-flow drops {}",
            s.key,
            s.table_size,
            s.buckets_with_second_hop,
            s.xdp_drops,
            s.tc_decap,
            s.tc_forward,
            s.tc_drops
        )?;
        let w = crate::report::address_width(s.backends.iter().map(|b| &b.dip));
        for b in &s.backends {
            writeln!(
                out,
                "    -> {:<w$} buckets {:>6}  packets {:>12}  bytes {:>14}  new connections {:>10}",
                b.dip.to_string(),
                b.buckets,
                b.packets,
                b.bytes,
                b.new_connections
            )?;
        }
    }
    if let Some(n) = r.nat_flows.as_ref().filter(|n| all || n.flows > 0) {
        writeln!(
            out,
            "NAT flows (mode: nat): {} of {} ({} TCP, {} UDP)",
            n.flows, n.max_flows, n.tcp, n.udp
        )?;
    }
    if all || !r.filters.is_empty() {
        writeln!(
            out,
            "filter rules (nilb filters adds the sources rate limits hit most):"
        )?;
        crate::filter_report::print_rule_stats(&r.filters, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::abi::sys;
    use std::net::Ipv4Addr;

    const B11: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11));
    const B12: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 12));
    const B13: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 13));

    fn key() -> ServiceKey {
        ServiceKey {
            vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            port: 80,
            protocol: Protocol::Tcp,
        }
    }

    /// Backend slots: 7 -> B11, 9 -> B12, 11 -> B13.
    fn slots() -> Vec<Option<IpAddr>> {
        let mut v = vec![None; 16];
        v[7] = Some(B11);
        v[9] = Some(B12);
        v[11] = Some(B13);
        v
    }

    #[test]
    fn table_report_decodes_buckets_and_sums_shares() {
        let raw = RawTable {
            key: key(),
            service: sys::nilb_service {
                table_base: 4096,
                table_mask: 3,
                service_index: 5,
                flags: 0,
                nat_port: 0,
            },
            buckets: vec![[7, 0, 0, 0], [9, 7, 0, 0], [7, 11, 9, 0], [0, 9, 0, 0]],
            moved_s: vec![0, 1_700_000_000, 0, 1_700_000_100],
            first: vec![],
        };
        let r = table_report(&raw, &slots());
        assert_eq!(r.key, "10.0.0.100:80/tcp");
        assert_eq!((r.vip, r.port, r.protocol.as_str()), (key().vip, 80, "tcp"));
        assert_eq!((r.table_base, r.service_index, r.table_size), (4096, 5, 4));
        assert_eq!(
            r.buckets[2].previous_hops,
            vec![B13, B12],
            "the whole chain, newest first"
        );
        assert_eq!(
            r.buckets[1],
            BucketReport {
                first_hop: Some(B12),
                second_hop: Some(B11),
                previous_hops: vec![B11],
                counter_slot: Some(9),
                moved_at_s: Some(1_700_000_000),
            }
        );
        assert_eq!(
            r.buckets[3],
            BucketReport {
                first_hop: None,
                second_hop: Some(B12),
                previous_hops: vec![B12],
                counter_slot: None,
                moved_at_s: Some(1_700_000_100),
            }
        );
        assert_eq!(r.buckets[0].moved_at_s, None);
        let summary: Vec<_> = r
            .backends
            .iter()
            .map(|b| {
                (
                    b.dip,
                    b.buckets,
                    b.second_hop_buckets,
                    b.previous_hop_buckets,
                    b.counter_slot,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![
                (B11, 2, 1, 1, Some(7)),
                (B12, 1, 1, 2, Some(9)),
                (B13, 0, 1, 1, None)
            ]
        );
        assert_eq!(r.backends[0].share_percent, 50.0);
        assert_eq!(r.backends[2].second_hop_percent, 25.0);
        // Field names and nulls as documented.
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["buckets"][3]["first_hop"], serde_json::Value::Null);
        assert_eq!(v["buckets"][1]["second_hop"], "10.0.0.11");
        assert_eq!(v["backends"][1]["counter_slot"], 9);
    }

    /// `nilb lookup` and `nilb tables` on an IPv6 cluster network: hops
    /// are IPv6 addresses, in the text (with hostnames) and in the JSON.
    #[test]
    fn lookup_and_tables_show_ipv6_hops() {
        let config = Config::parse(
            "version: 1\ncluster: {balancers: [\"2001:db8:c::1\"], hash_seed: 7}\nservices:\n  - {name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, backends: [{dip: \"2001:db8:c::11\", hostname: n11}, {dip: \"2001:db8:c::12\"}]}\n",
        )
        .unwrap();
        let src: SocketAddr = "192.0.2.1:40000".parse().unwrap();
        let dst: SocketAddr = "10.0.0.100:80".parse().unwrap();
        let r = lookup_report(&config, src, dst, Protocol::Tcp, TableSource::Config).unwrap();
        let first = r.first_hop.expect("a first hop");
        assert!(first.is_ipv6());
        let mut text = Vec::new();
        print_lookup(&config, &r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        let want = if first.to_string() == "2001:db8:c::11" {
            "first hop 2001:db8:c::11 (n11)"
        } else {
            "first hop 2001:db8:c::12"
        };
        assert!(text.contains(want), "{text}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["first_hop"], first.to_string());
        let mut summary = Vec::new();
        check_summary(&config, &mut summary).unwrap();
        let summary = String::from_utf8(summary).unwrap();
        assert!(
            summary.contains("balancers: 2001:db8:c::1 (IPv6 cluster network"),
            "{summary}"
        );

        let b6: IpAddr = "2001:db8:c::11".parse().unwrap();
        let mut slots = vec![None; 8];
        slots[3] = Some(b6);
        let raw = RawTable {
            key: key(),
            service: sys::nilb_service {
                table_base: 0,
                table_mask: 1,
                service_index: 0,
                flags: 0,
                nat_port: 0,
            },
            buckets: vec![[3, 0, 0, 0], [0, 3, 0, 0]],
            moved_s: vec![0, 0],
            first: vec![],
        };
        let t = table_report(&raw, &slots);
        assert_eq!(t.buckets[0].first_hop, Some(b6));
        assert_eq!(t.buckets[1].second_hop, Some(b6));
        assert_eq!(t.backends[0].dip, b6);
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["buckets"][0]["first_hop"], "2001:db8:c::11");
    }

    /// Run `f` on a thread of its own in a private mount namespace with a
    /// fresh bpffs mounted at a temporary directory (root only), so that
    /// pins never touch the host's /sys/fs/bpf.
    fn with_private_bpffs(f: impl FnOnce(&Path) + Send + 'static) {
        use nix::mount::{mount, MsFlags};
        use nix::sched::{unshare, CloneFlags};
        let dir = std::env::temp_dir().join(format!(
            "nilb-tools-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.clone();
        let r = std::thread::spawn(move || {
            unshare(CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS) (tests run as root)");
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .unwrap();
            mount(Some("bpf"), &d, Some("bpf"), MsFlags::empty(), None::<&str>).unwrap();
            f(&d.join("nilb"));
        })
        .join();
        let _ = std::fs::remove_dir(&dir);
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    }

    /// One TCP service 10.0.0.100:80 of `table_size` buckets over backends
    /// 10.0.0.11-13 (hostnames n1-n3) of weights `w`, balancer 10.0.0.11,
    /// hash seed `seed`, no pacing (a reload reaches its targets at once).
    fn web_of_three(seed: u32, table_size: u32, w: [u32; 3]) -> Config {
        let mut y = format!("version: 1\ncluster: {{balancers: [10.0.0.11], hash_seed: {seed:#x}}}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: {table_size}\n    backends:\n");
        for (i, w) in w.iter().enumerate() {
            y += &format!(
                "      - {{dip: 10.0.0.{}, hostname: n{}, weight: {w}}}\n",
                11 + i,
                i + 1
            );
        }
        Config::parse(&y).unwrap()
    }

    /// Buckets of the pinned tables whose `bucket_first` entry is not the
    /// one their bucket gives ([`abi::first_hop_entry`]), and the buckets
    /// read.
    fn first_entries_off(pins: &Path) -> (usize, usize) {
        use crate::dataplane::abi;
        let (tables, _) = PinnedMaps::open(pins).unwrap().raw_tables().unwrap();
        let mut off = 0;
        let mut n = 0;
        for t in &tables {
            assert_eq!(
                t.first.len(),
                t.buckets.len(),
                "{}: bucket_first read",
                t.key
            );
            for (h, f) in t.buckets.iter().zip(&t.first) {
                n += 1;
                off += usize::from(abi::first_hop_entry(abi::bucket_word(*h)) != *f);
            }
        }
        (off, n)
    }

    /// Overwrite the first `elems` elements of the pinned `bucket_first`
    /// (four entries each) with `v` in every entry.
    fn smudge_first_entries(pins: &Path, elems: u32, v: u16) {
        use libbpf_rs::MapCore;
        let m = libbpf_rs::MapHandle::from_pinned_path(pins.join("bucket_first")).unwrap();
        let word = [v; 4].map(u16::to_ne_bytes).concat();
        for i in 0..elems {
            m.update(&i.to_ne_bytes(), &word, libbpf_rs::MapFlags::ANY)
                .unwrap();
        }
    }

    /// A daemon killed between a bucket and its `bucket_first` entry, or
    /// an older one without `bucket_first` (its pin missing): the next
    /// daemon's adoption rewrites every entry from the buckets before its
    /// programs run, and the installs that follow keep them so.
    #[test]
    fn adoption_rewrites_bucket_first_from_the_buckets() {
        with_private_bpffs(|pins| {
            use crate::dataplane::Dataplane;
            let cfg = |w: [u32; 3]| web_of_three(7, 256, w);
            let now = 1_700_000_000_000;
            let mut storage = std::mem::MaybeUninit::uninit();
            let mut dp = Dataplane::load_pinned(&mut storage, Some(pins), 65536).unwrap();
            let mut cp = ControlPlane::new(cfg([1, 1, 2]), now);
            for i in 0..3u8 {
                cp.observe(&key(), Ipv4Addr::new(10, 0, 0, 11 + i).into(), Ok(()), now);
            }
            cp.apply(&mut dp, B11, &cp.full_plan()).unwrap();
            // previous owners in some buckets: entries with the chain bit
            let plan = cp.update(cfg([3, 1, 1]), now + 5_000);
            cp.apply(&mut dp, B11, &plan).unwrap();
            let (off, n) = first_entries_off(pins);
            assert_eq!((off, n), (0, 256), "after the installs");
            let chained = cp
                .service(&key())
                .unwrap()
                .table
                .buckets()
                .iter()
                .filter(|b| b.second().is_some())
                .count();
            assert!(chained > 0, "no bucket lists a previous owner");

            // Killed half way: entries that name no backend.
            smudge_first_entries(pins, 64, 0);
            assert_eq!(first_entries_off(pins).0, 256);
            let lagging =
                |pins: &Path| tables_report(pins).unwrap().services[0].first_hop_entries_lagging;
            assert_eq!(lagging(pins), Some(256), "nilb tables shows them");
            std::mem::forget(dp);
            let mut storage2 = std::mem::MaybeUninit::uninit();
            let dp2 = Dataplane::load_pinned(&mut storage2, Some(pins), 65536).unwrap();
            assert!(dp2.adopted());
            assert_eq!(first_entries_off(pins), (0, 256), "adoption rewrote them");
            assert_eq!(lagging(pins), Some(0));

            // An older daemon's pins: no bucket_first at all.
            std::mem::forget(dp2);
            std::fs::remove_file(pins.join("bucket_first")).unwrap();
            let mut storage3 = std::mem::MaybeUninit::uninit();
            let mut dp3 = Dataplane::load_pinned(&mut storage3, Some(pins), 65536).unwrap();
            assert!(dp3.adopted(), "bucket_first is not needed to adopt");
            assert_eq!(first_entries_off(pins), (0, 256), "made and filled");
            let live = dp3.live_tables().unwrap();
            let records = dp3.control_state().unwrap();
            let (mut cp3, plan) = ControlPlane::adopt(cfg([3, 1, 1]), live, records, now + 6_000);
            cp3.apply(&mut dp3, B11, &plan).unwrap();
            let plan = cp3.update(cfg([1, 3, 1]), now + 7_000);
            cp3.apply(&mut dp3, B11, &plan).unwrap();
            assert_eq!(first_entries_off(pins), (0, 256), "after more installs");
            drop(dp3);
        });
    }

    /// An IPv6 cluster network in the real maps: `nilb_config` flagged
    /// with the node in `config6`, `cluster_nodes6` holding the cluster
    /// (`cluster_nodes` empty), `backends` of family 6 read back as the
    /// tables' hops, and the records' IPv6 DIPs through `control_dip6`
    /// (a QUIC-LB service among them); `nilb tables` and
    /// `lookup --live` show them.
    #[test]
    fn an_ipv6_cluster_network_in_the_pinned_maps() {
        with_private_bpffs(|pins| {
            use crate::dataplane::{abi, Dataplane};
            use libbpf_rs::MapCore;
            let config = Config::parse(
                "version: 1\ncluster: {balancers: [\"2001:db8:c::1\"], hash_seed: 7}\nservices:\n  - {name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {none: {}}, backends: [{dip: \"2001:db8:c::11\", hostname: n11}, {dip: \"2001:db8:c::12\"}]}\n  - {name: q, vip: \"2001:db8:100::1\", port: 443, protocol: udp, table_size: 64, health_check: {none: {}}, quic_lb: {codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}, backends: [{dip: \"2001:db8:c::12\"}]}\n",
            )
            .unwrap();
            let node: IpAddr = "2001:db8:c::1".parse().unwrap();
            let mut storage = std::mem::MaybeUninit::uninit();
            let mut dp = Dataplane::load_pinned(&mut storage, Some(pins), 65536).unwrap();
            let cp = ControlPlane::new(config.clone(), 0);
            cp.apply(&mut dp, node, &cp.full_plan()).unwrap();

            let p = PinnedMaps::open(pins).unwrap();
            assert_eq!(p.settings().unwrap().node, node);
            let c: sys::nilb_config = abi::read_struct(
                &p.config
                    .lookup(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
                    .unwrap()
                    .unwrap(),
            )
            .unwrap();
            assert_ne!(c.flags & sys::nilb_config_flags::NILB_F_CLUSTER_IPV6, 0);
            assert_eq!((c.node_addr, c.outer_csum_base), (0, 0));
            let open =
                |name: &str| libbpf_rs::MapHandle::from_pinned_path(pins.join(name)).unwrap();
            let nodes6: std::collections::BTreeSet<IpAddr> = open("cluster_nodes6")
                .keys()
                .map(|k| IpAddr::from(<[u8; 16]>::try_from(&k[..]).unwrap()))
                .collect();
            assert_eq!(nodes6, cp.cluster_addresses());
            assert_eq!(open("cluster_nodes").keys().count(), 0);
            // The tables read back through `backends` (family 6).
            let t = tables_report(pins).unwrap();
            assert_eq!(t.node, node);
            for s in &t.services {
                let key = cp
                    .services()
                    .keys()
                    .find(|k| k.to_string() == s.key)
                    .unwrap();
                let want = &cp.service(key).unwrap().table;
                for (got, b) in s.buckets.iter().zip(want.buckets()) {
                    assert_eq!((got.first_hop, got.second_hop), (b.first(), b.second()));
                    assert!(got.first_hop.is_some_and(|h| h.is_ipv6()));
                }
            }
            let src = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 40000));
            let dst = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 100), 80));
            let live =
                lookup_report(&config, src, dst, Protocol::Tcp, TableSource::Live(pins)).unwrap();
            let fresh =
                lookup_report(&config, src, dst, Protocol::Tcp, TableSource::Config).unwrap();
            assert_eq!(live.first_hop, fresh.first_hop);
            assert!(live.first_hop.unwrap().is_ipv6());

            // The records of IPv6 DIPs come back from control_state and
            // control_dip6.
            let records = dp.control_state().unwrap();
            assert_eq!(records, cp.records());
            assert!(records.values().all(|r| r.dip.is_ipv6()));
            assert_eq!(records.len(), 3);
            assert_eq!(
                crate::daemon::pinned_family_problem(p.settings().unwrap().node, node, pins),
                None
            );
        });
    }

    #[test]
    fn reports_read_the_pinned_maps_of_a_data_plane() {
        with_private_bpffs(|pins| {
            use crate::dataplane::Dataplane;
            let cfg = |w: [u32; 3]| web_of_three(0x5eed1234, 64, w);
            let now = 1_700_000_000_000;
            let mut storage = std::mem::MaybeUninit::uninit();
            let mut dp = Dataplane::load_pinned(&mut storage, Some(pins), 65536).unwrap();
            let mut cp = ControlPlane::new(cfg([1, 1, 2]), now);
            // Up (unknown backends gain no buckets from a weight change).
            for i in 0..3u8 {
                cp.observe(&key(), Ipv4Addr::new(10, 0, 0, 11 + i).into(), Ok(()), now);
            }
            cp.apply(&mut dp, B11, &cp.full_plan()).unwrap();
            let plan = cp.update(cfg([3, 1, 1]), now + 5_000);
            cp.apply(&mut dp, B11, &plan).unwrap();
            let want = &cp.service(&key()).unwrap().table;

            let t = tables_report(pins).unwrap();
            assert_eq!(
                (t.schema, t.node, t.hash_seed),
                (JSON_SCHEMA, B11, 0x5eed1234)
            );
            assert_eq!(t.services.len(), 1);
            let s = &t.services[0];
            assert_eq!((s.key.as_str(), s.table_size), ("10.0.0.100:80/tcp", 64));
            let mut moved = 0;
            for (i, (got, b)) in s.buckets.iter().zip(want.buckets()).enumerate() {
                assert_eq!(
                    (got.first_hop, got.second_hop),
                    (b.first(), b.second()),
                    "bucket {i}"
                );
                assert_eq!(
                    got.moved_at_s.map(u64::from),
                    want.moved_at(i).map(|ms| ms / 1000),
                    "bucket {i}"
                );
                moved += usize::from(got.moved_at_s.is_some());
            }
            assert!(moved > 0, "the weight change moved no bucket");
            let shares = want.shares();
            for b in &s.backends {
                assert_eq!(b.buckets, shares.get(&b.dip).copied().unwrap_or(0));
            }
            // one counter slot per first hop, the same in every bucket
            for b in &s.buckets {
                let owner = s
                    .backends
                    .iter()
                    .find(|x| Some(x.dip) == b.first_hop)
                    .unwrap();
                assert_eq!(b.counter_slot, owner.counter_slot);
            }

            let st = stats_report(pins).unwrap();
            assert_eq!(st.counters.len(), COUNTER_NAMES.len());
            assert!(st.counters.values().all(|&v| v == 0));
            assert_eq!(st.unknown_flow, "drop");
            assert_eq!(st.services.len(), 1);
            assert_eq!(
                (
                    st.services[0].vip,
                    st.services[0].port,
                    st.services[0].protocol.as_str()
                ),
                (key().vip, 80, "tcp")
            );
            let firsts: Vec<_> = st.services[0]
                .backends
                .iter()
                .map(|b| (b.dip, b.buckets))
                .collect();
            assert_eq!(
                firsts,
                s.backends
                    .iter()
                    .filter(|b| b.buckets > 0)
                    .map(|b| (b.dip, b.buckets))
                    .collect::<Vec<_>>()
            );

            let c = cfg([3, 1, 1]);
            for sport in [40000, 40001, 40002, 40003] {
                let src = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), sport));
                let dst = SocketAddr::new(key().vip, 80);
                let live =
                    lookup_report(&c, src, dst, Protocol::Tcp, TableSource::Live(pins)).unwrap();
                let b = &s.buckets[live.bucket as usize];
                assert_eq!(
                    (live.first_hop, live.second_hop),
                    (b.first_hop, b.second_hop)
                );
                assert_eq!(live.table, "live");
                let host = live
                    .first_hop
                    .map(|a| format!("n{}", crate::table::tests::last_octet(a) - 10));
                assert_eq!(live.first_hop_hostname, host);
            }

            // kill -9 and restart with a config that wants a larger pool: the
            // next data plane adopts the pins, copies the pool into a larger
            // one (every region where it was; `bucket_first` too), and
            // installing the adopted state stores no bucket word.
            let before = tables_report(pins).unwrap();
            assert_eq!(first_entries_off(pins), (0, 64));
            assert!(dp.bucket_stores() > 0);
            // A crash: no clean-up runs (dropping would unpin).
            std::mem::forget(dp);
            let mut storage2 = std::mem::MaybeUninit::uninit();
            let mut dp2 = Dataplane::load_pinned(&mut storage2, Some(pins), 3 * 65536).unwrap();
            assert!(dp2.adopted());
            assert_eq!(dp2.pool_grew(), Some((65536, 3 * 65536)));
            assert_eq!(tables_report(pins).unwrap().services, before.services);
            assert_eq!(first_entries_off(pins), (0, 64));
            {
                use libbpf_rs::MapCore;
                let f = libbpf_rs::MapHandle::from_pinned_path(pins.join("bucket_first")).unwrap();
                assert_eq!(f.max_entries(), 3 * 65536 / 4, "bucket_first grew");
            }
            let live = dp2.live_tables().unwrap();
            let records = dp2.control_state().unwrap();
            let (cp2, plan) = ControlPlane::adopt(c.clone(), live, records, now + 6_000);
            cp2.apply(&mut dp2, B11, &plan).unwrap();
            assert_eq!(dp2.bucket_stores(), 0, "the adopted state wrote no bucket");
            assert_eq!(tables_report(pins).unwrap().services, before.services);
            assert_eq!(dp2.pool_usage().buckets, 3 * 65536);
            drop(dp2);
        });
    }
}
