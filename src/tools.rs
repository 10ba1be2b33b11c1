//! Operator commands that do not run the daemon: `nilb check`, `nilb lookup`,
//! `nilb stats` and `nilb tables`. Each writes its human-readable report to
//! a writer so that tests can read it; `lookup`, `stats` and `tables` also
//! build a report struct that `--json` prints (see [`JSON_SCHEMA`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde::Serialize;

use crate::config::{BackendState, Config, Protocol, ServiceKey};
use crate::control::ControlPlane;
use crate::dataplane::abi::{self, COUNTER_HELP, COUNTER_NAMES};
use crate::dataplane::PinnedMaps;
use crate::hash::{bucket_of, flow_hash, gue_source_port, FlowTuple};
use crate::table::Bucket;

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
    writeln!(out, "balancers: {}", balancers.join(", "))?;
    for s in &config.services {
        let key = s.key();
        let table = &cp.service(&key).expect("service in control plane").table;
        let shares = table.shares();
        writeln!(
            out,
            "service {} {} table {} buckets, health check {}{}",
            s.name,
            key,
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
        for b in &s.backends {
            let n = shares.get(&b.dip).copied().unwrap_or(0);
            writeln!(
                out,
                "  {:<15} {:<20} weight {:>5} {:<8} {:>6} buckets {:>5.1}%",
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

/// Version of the JSON documents that `nilb status|stats|tables|lookup
/// --json` print (their top-level `schema` field). It is raised when a field
/// changes meaning, type or goes away; new fields may appear without a raise.
/// docs/operations.md ("Machine-readable output") describes every field.
pub const JSON_SCHEMA: u32 = 1;

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
    pub src: SocketAddrV4,
    /// VIP and port.
    pub dst: SocketAddrV4,
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
    pub first_hop: Option<Ipv4Addr>,
    /// Its hostname in the config, if it has one.
    pub first_hop_hostname: Option<String>,
    /// Second hop of the bucket (its newest previous owner), if any: the
    /// first element of `previous_hops`, kept for readers of schema 1.
    pub second_hop: Option<Ipv4Addr>,
    /// Its hostname in the config, if it has one.
    pub second_hop_hostname: Option<String>,
    /// The bucket's previous owners, newest first (those known down after
    /// the others): the hops second chance walks after the first hop.
    pub previous_hops: Vec<Ipv4Addr>,
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
    src: SocketAddrV4,
    dst: SocketAddrV4,
    protocol: Protocol,
    source: TableSource<'_>,
) -> Result<LookupReport> {
    let key = ServiceKey {
        vip: *dst.ip(),
        port: dst.port(),
        protocol,
    };
    let service = config
        .service(&key)
        .with_context(|| format!("no service for {key} in the configuration"))?;
    let flow = FlowTuple {
        saddr: *src.ip(),
        daddr: *dst.ip(),
        sport: src.port(),
        dport: dst.port(),
        proto: protocol.number(),
    };
    let (seed, buckets, table, pin_dir) = match source {
        TableSource::Config => {
            let cp = ControlPlane::new(config.clone(), 0);
            let t = cp.service(&key).expect("configured").table.buckets();
            (config.cluster.hash_seed, t, "config", None)
        }
        TableSource::Live(dir) => {
            let pins = PinnedMaps::open(dir)?;
            let seed = pins.settings()?.hash_seed;
            let (_, live) = pins
                .tables()?
                .into_iter()
                .find(|(k, _)| *k == key)
                .with_context(|| format!("the running data plane has no table for {key}"))?;
            (seed, live.buckets, "live", Some(dir.display().to_string()))
        }
    };
    let hash = flow_hash(&flow, seed);
    let bucket = bucket_of(hash, buckets.len() as u32);
    let b = buckets[bucket as usize];
    let hostname = |a: Option<Ipv4Addr>| {
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
        table_size: buckets.len() as u32,
        first_hop: b.first(),
        first_hop_hostname: hostname(b.first()),
        second_hop: b.second(),
        second_hop_hostname: hostname(b.second()),
        previous_hops: b.previous().collect(),
        previous_hop_hostnames: b.previous().map(|p| hostname(Some(p))).collect(),
        gue_source_port: gue_source_port(hash),
        filters: None,
    })
}

/// Print which service, bucket and hops a client flow maps to.
pub fn lookup(
    config: &Config,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    protocol: Protocol,
    source: TableSource<'_>,
    out: &mut dyn Write,
) -> Result<Bucket> {
    let r = lookup_report(config, src, dst, protocol, source)?;
    print_lookup(config, &r, out)
}

/// Print a lookup report (and its filter part, if it has one).
pub fn print_lookup(config: &Config, r: &LookupReport, out: &mut dyn Write) -> Result<Bucket> {
    let (src, dst) = (r.src, r.dst);
    let protocol = parse_protocol(&r.protocol)?;
    let service = config
        .service(&ServiceKey {
            vip: *dst.ip(),
            port: dst.port(),
            protocol,
        })
        .context("service vanished from the configuration")?;
    let label = |a: Option<Ipv4Addr>| match a {
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
    let previous: Vec<String> = r.previous_hops.iter().map(|p| label(Some(*p))).collect();
    writeln!(
        out,
        "previous hops {}",
        if previous.is_empty() {
            "none".to_string()
        } else {
            previous.join(", ")
        }
    )?;
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
    Ok(Bucket::new(r.first_hop, r.previous_hops.iter().copied()))
}

/// One service's inner bucket array as the BPF programs see it.
#[derive(Clone, Debug)]
pub struct RawTable {
    /// The service.
    pub key: ServiceKey,
    /// Kernel id of the inner array.
    pub map_id: u32,
    /// Element 0: table mask and service index.
    pub header: abi::sys::nilb_table_header,
    /// Elements 1 ..= table size.
    pub buckets: Vec<abi::sys::nilb_bucket>,
}

/// Every installed service's inner array, raw, in key order.
pub fn read_raw_tables(pins: &PinnedMaps) -> Result<Vec<RawTable>> {
    let mut out = Vec::new();
    for k in pins.services.keys() {
        let Some(key) = abi::parse_service_key(&k)? else {
            continue;
        };
        let Some(id) = pins.services.lookup(&k, MapFlags::ANY)? else {
            continue;
        };
        let map_id = u32::from_ne_bytes(id[..4].try_into().context("short map id")?);
        let inner = MapHandle::from_map_id(map_id)
            .with_context(|| format!("opening the table of {key} (map id {map_id})"))?;
        let (header, buckets) = abi::read_inner_table(&inner)
            .with_context(|| format!("reading the table of {key} (map id {map_id})"))?;
        out.push(RawTable {
            key,
            map_id,
            header,
            buckets,
        });
    }
    out.sort_by_key(|t| t.key);
    Ok(out)
}

/// `nilb tables --json`: the live tables of a running data plane.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TablesReport {
    /// [`JSON_SCHEMA`].
    pub schema: u32,
    /// Pin directory read.
    pub pin_dir: String,
    /// The node's address as the data plane has it.
    pub node: Ipv4Addr,
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
    /// VIP.
    pub vip: Ipv4Addr,
    /// Port.
    pub port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
    /// Kernel id of the inner array (changes whenever a table is swapped in).
    pub map_id: u32,
    /// Index into `service_stats`.
    pub service_index: u32,
    /// Buckets.
    pub table_size: u32,
    /// Every address that is first or second hop of some bucket, in address
    /// order.
    pub backends: Vec<TableBackend>,
    /// Buckets in index order (the bucket index is the position).
    pub buckets: Vec<BucketReport>,
}

/// Per-backend summary of a live table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableBackend {
    /// Backend address.
    pub dip: Ipv4Addr,
    /// Buckets where it is first hop.
    pub buckets: u32,
    /// Their share of the table, percent (0.1 precision).
    pub share_percent: f64,
    /// Buckets where it is second hop.
    pub second_hop_buckets: u32,
    /// Their share of the table, percent (0.1 precision).
    pub second_hop_percent: f64,
    /// Buckets where it is a previous owner (any position of the hop list).
    pub previous_hop_buckets: u32,
    /// `backend_stats` slot of its first-hop buckets (`null` if it is no
    /// bucket's first hop).
    pub counter_slot: Option<u32>,
}

/// One bucket of a live table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BucketReport {
    /// Gets new connections; `null`: the balancer drops the packets.
    pub first_hop: Option<Ipv4Addr>,
    /// Gets packets the first hop does not know; `null`: none. The first
    /// element of `previous_hops`, kept for readers of schema 1.
    pub second_hop: Option<Ipv4Addr>,
    /// Previous owners, newest first: the hops second chance walks after
    /// the first hop.
    pub previous_hops: Vec<Ipv4Addr>,
    /// `backend_stats` slot the balancer counts this bucket's packets in
    /// (`null` without a first hop).
    pub counter_slot: Option<u32>,
    /// When the first hop last changed, as stored: seconds of the kernel's
    /// boot-time clock (`CLOCK_BOOTTIME`; tables written by older daemons
    /// hold Unix seconds); `null`: never since the table was first built.
    pub moved_at_s: Option<u32>,
}

fn hop(v: u32) -> Option<Ipv4Addr> {
    (v != 0).then(|| abi::addr_from_be(v))
}

/// A live table as reported by `nilb tables`.
pub fn table_report(t: &RawTable) -> TableReport {
    let size = t.header.table_mask.wrapping_add(1);
    let buckets: Vec<BucketReport> = t
        .buckets
        .iter()
        .map(|b| BucketReport {
            first_hop: hop(b.first_hop),
            second_hop: hop(b.second_hop),
            previous_hops: hop(b.second_hop).into_iter().collect(),
            counter_slot: (b.first_hop != 0).then_some(b.first_slot),
            moved_at_s: (b.moved_at_s != 0).then_some(b.moved_at_s),
        })
        .collect();
    // dip -> (first, second, previous, slot)
    let mut by_dip: BTreeMap<Ipv4Addr, (u32, u32, u32, Option<u32>)> = BTreeMap::new();
    for b in &buckets {
        if let Some(f) = b.first_hop {
            let e = by_dip.entry(f).or_default();
            e.0 += 1;
            e.3 = e.3.or(b.counter_slot);
        }
        if let Some(s) = b.second_hop {
            by_dip.entry(s).or_default().1 += 1;
        }
        for p in &b.previous_hops {
            by_dip.entry(*p).or_default().2 += 1;
        }
    }
    TableReport {
        key: t.key.to_string(),
        vip: t.key.vip,
        port: t.key.port,
        protocol: t.key.protocol.to_string(),
        map_id: t.map_id,
        service_index: t.header.service_index,
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
    }
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
        services: read_raw_tables(&pins)?.iter().map(table_report).collect(),
    })
}

/// A stored bucket move time (boot-time seconds) as an RFC 3339 wall time.
fn wall_time(stored_s: u32) -> String {
    use crate::clock::Clock;
    let c = crate::clock::SystemClock;
    let ms = crate::clock::move_time_on_wall(stored_s as u64 * 1000, c.boot_ms(), c.wall_ms());
    crate::status::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
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
            "service {}: {} buckets, service index {}, inner map id {}, {} with a second hop, {} moved since built{}",
            s.key,
            s.table_size,
            s.service_index,
            s.map_id,
            s.buckets.iter().filter(|b| b.second_hop.is_some()).count(),
            moved,
            match last {
                Some(t) => format!(" (last {})", wall_time(t)),
                None => String::new(),
            }
        )?;
        writeln!(
            out,
            "  {:<15} {:>8} {:>7} {:>8} {:>7} {:>6}",
            "backend", "buckets", "share", "2nd hop", "share", "slot"
        )?;
        for b in &s.backends {
            writeln!(
                out,
                "  {:<15} {:>8} {:>6.1}% {:>8} {:>6.1}% {:>6}",
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
        if buckets {
            writeln!(
                out,
                "  {:>6}  {:<15} {:<15} {:>6}  {:<25} previous hops",
                "bucket", "first hop", "second hop", "slot", "moved at"
            )?;
            for (i, b) in s.buckets.iter().enumerate() {
                let a = |x: Option<Ipv4Addr>| x.map_or("-".to_string(), |x| x.to_string());
                let previous: Vec<String> = b.previous_hops.iter().map(|p| p.to_string()).collect();
                writeln!(
                    out,
                    "  {:>6}  {:<15} {:<15} {:>6}  {:<25} {}",
                    i,
                    a(b.first_hop),
                    a(b.second_hop),
                    b.counter_slot.map_or("-".to_string(), |x| x.to_string()),
                    b.moved_at_s.map_or("-".to_string(), wall_time),
                    if previous.is_empty() {
                        "-".to_string()
                    } else {
                        previous.join(",")
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
    pub node: Ipv4Addr,
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
}

/// Counters of one service.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServiceStatsReport {
    /// `VIP:PORT/PROTOCOL`.
    pub key: String,
    /// VIP.
    pub vip: Ipv4Addr,
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
    pub dip: Ipv4Addr,
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
    for t in read_raw_tables(&pins)? {
        let table = table_report(&t);
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
        for b in &s.backends {
            writeln!(
                out,
                "    -> {:<15} buckets {:>6}  packets {:>12}  bytes {:>14}  new connections {:>10}",
                b.dip.to_string(),
                b.buckets,
                b.packets,
                b.bytes,
                b.new_connections
            )?;
        }
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

    const B11: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);
    const B12: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 12);
    const B13: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 13);

    fn key() -> ServiceKey {
        ServiceKey {
            vip: Ipv4Addr::new(10, 0, 0, 100),
            port: 80,
            protocol: Protocol::Tcp,
        }
    }

    fn raw_bucket(
        first: Option<Ipv4Addr>,
        second: Option<Ipv4Addr>,
        slot: u32,
        moved: u32,
    ) -> sys::nilb_bucket {
        sys::nilb_bucket {
            first_hop: first.map_or(0, abi::addr_be),
            second_hop: second.map_or(0, abi::addr_be),
            first_slot: slot,
            moved_at_s: moved,
        }
    }

    #[test]
    fn table_report_decodes_buckets_and_sums_shares() {
        let raw = RawTable {
            key: key(),
            map_id: 42,
            header: sys::nilb_table_header {
                table_mask: 3,
                service_index: 5,
                pad: [0; 2],
            },
            buckets: vec![
                raw_bucket(Some(B11), None, 7, 0),
                raw_bucket(Some(B12), Some(B11), 9, 1_700_000_000),
                raw_bucket(Some(B11), Some(B13), 7, 0),
                raw_bucket(None, Some(B12), 0, 1_700_000_100),
            ],
        };
        let r = table_report(&raw);
        assert_eq!(r.key, "10.0.0.100:80/tcp");
        assert_eq!((r.vip, r.port, r.protocol.as_str()), (key().vip, 80, "tcp"));
        assert_eq!((r.map_id, r.service_index, r.table_size), (42, 5, 4));
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
            .map(|b| (b.dip, b.buckets, b.second_hop_buckets, b.counter_slot))
            .collect();
        assert_eq!(
            summary,
            vec![
                (B11, 2, 1, Some(7)),
                (B12, 1, 1, Some(9)),
                (B13, 0, 1, None)
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

    #[test]
    fn reports_read_the_pinned_maps_of_a_data_plane() {
        with_private_bpffs(|pins| {
            use crate::dataplane::Dataplane;
            let cfg = |w: [u32; 3]| {
                let mut y = "version: 1\ncluster: {balancers: [10.0.0.11], hash_seed: 0x5eed1234}\ndefaults:\n  rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: 64\n    backends:\n".to_string();
                for (i, w) in w.iter().enumerate() {
                    y += &format!(
                        "      - {{dip: 10.0.0.{}, hostname: n{}, weight: {w}}}\n",
                        11 + i,
                        i + 1
                    );
                }
                Config::parse(&y).unwrap()
            };
            let now = 1_700_000_000_000;
            let mut storage = std::mem::MaybeUninit::uninit();
            let mut dp = Dataplane::load_pinned(&mut storage, Some(pins)).unwrap();
            let mut cp = ControlPlane::new(cfg([1, 1, 2]), now);
            // Up (unknown backends gain no buckets from a weight change).
            for i in 0..3u8 {
                cp.observe(&key(), Ipv4Addr::new(10, 0, 0, 11 + i), Ok(()), now);
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
                let src = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), sport);
                let dst = SocketAddrV4::new(key().vip, 80);
                let live =
                    lookup_report(&c, src, dst, Protocol::Tcp, TableSource::Live(pins)).unwrap();
                let b = &s.buckets[live.bucket as usize];
                assert_eq!(
                    (live.first_hop, live.second_hop),
                    (b.first_hop, b.second_hop)
                );
                assert_eq!(live.table, "live");
                let host = live.first_hop.map(|a| format!("n{}", a.octets()[3] - 10));
                assert_eq!(live.first_hop_hostname, host);
            }
            drop(dp);
        });
    }
}
