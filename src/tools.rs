//! Operator commands that do not run the daemon: `nilb check`, `nilb lookup`
//! and `nilb stats`. Each writes its human-readable report to a writer so
//! that tests can read it.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use anyhow::{bail, Context, Result};

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
        match config.cluster.unknown_flow {
            crate::config::UnknownFlow::Drop => "drop",
            crate::config::UnknownFlow::Local => "local",
        },
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
            "service {} {} table {} buckets, health check {}",
            s.name,
            key,
            s.table_size,
            describe_check(&s.health_check)
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
            ..
        } => format!(
            "{} GET :{port}{uri} expecting {codes:?}",
            match scheme {
                Scheme::Http => "http",
                Scheme::Https => "https",
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

/// Print which service, bucket and hops a client flow maps to.
pub fn lookup(
    config: &Config,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    protocol: Protocol,
    source: TableSource<'_>,
    out: &mut dyn Write,
) -> Result<Bucket> {
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
    let (seed, buckets, origin) = match source {
        TableSource::Config => {
            let cp = ControlPlane::new(config.clone(), 0);
            let t = cp
                .service(&key)
                .expect("configured")
                .table
                .buckets()
                .to_vec();
            (
                config.cluster.hash_seed,
                t,
                "built from the config (fresh, no history)".to_string(),
            )
        }
        TableSource::Live(dir) => {
            let pins = PinnedMaps::open(dir)?;
            let seed = pins.settings()?.hash_seed;
            let (_, live) = pins
                .tables()?
                .into_iter()
                .find(|(k, _)| *k == key)
                .with_context(|| format!("the running data plane has no table for {key}"))?;
            (seed, live.buckets, format!("live, from {}", dir.display()))
        }
    };
    let hash = flow_hash(&flow, seed);
    let bucket = bucket_of(hash, buckets.len() as u32);
    let b = buckets[bucket as usize];
    let label = |a: Option<Ipv4Addr>| match a {
        None => "none".to_string(),
        Some(a) => match service.backends.iter().find(|x| x.dip == a) {
            Some(x) => format!("{a} ({})", x.label()),
            None => a.to_string(),
        },
    };
    writeln!(out, "flow      {src} -> {dst} {protocol}")?;
    writeln!(out, "service   {} ({key})", service.name)?;
    writeln!(out, "table     {origin}")?;
    writeln!(out, "hash      {hash:#010x} (seed {seed:#010x})")?;
    writeln!(out, "bucket    {bucket} of {}", buckets.len())?;
    writeln!(out, "first hop {}", label(b.first))?;
    writeln!(out, "second hop {}", label(b.second))?;
    writeln!(out, "GUE source port {}", gue_source_port(hash))?;
    if b.first.is_none() {
        writeln!(
            out,
            "note: this bucket has no first hop; the balancer drops the packet"
        )?;
    }
    Ok(b)
}

/// Print the counters of the running data plane pinned under `dir`.
pub fn stats(dir: &Path, all: bool, out: &mut dyn Write) -> Result<()> {
    let pins = PinnedMaps::open(dir)?;
    let s = pins.settings()?;
    writeln!(
        out,
        "node {} (hash seed {:#010x}, GUE port {}, unknown_flow {})",
        s.node,
        s.hash_seed,
        s.gue_port,
        if s.unknown_flow_local {
            "local"
        } else {
            "drop"
        }
    )?;
    writeln!(out, "counters (packets since the data plane was loaded):")?;
    let values = abi::read_counters(&pins.counters)?;
    for ((name, help), v) in COUNTER_NAMES.iter().zip(COUNTER_HELP).zip(values) {
        if all || v != 0 {
            writeln!(out, "  {name:<26} {v:>14}  {help}")?;
        }
    }
    writeln!(out, "services:")?;
    for (key, table) in pins.tables()? {
        let st = abi::read_percpu(
            &pins.service_stats,
            table.service_index,
            abi::sum_service_stats,
        )?;
        let with_second = table.buckets.iter().filter(|b| b.second.is_some()).count();
        writeln!(
            out,
            "  {key}: {} buckets ({} with second hop); balancer drops (no backend) {}; here: decapsulated {}, second-chance forwards {}, unknown-flow drops {}",
            table.buckets.len(),
            with_second,
            st.xdp_drops,
            st.tc_decap,
            st.tc_forward,
            st.tc_drops
        )?;
        let shares = {
            let mut m = std::collections::BTreeMap::new();
            for b in &table.buckets {
                if let Some(f) = b.first {
                    *m.entry(f).or_insert(0u32) += 1;
                }
            }
            m
        };
        for (dip, slot) in &table.slots {
            let b = abi::read_percpu(&pins.backend_stats, *slot, abi::sum_backend_stats)?;
            writeln!(
                out,
                "    -> {:<15} buckets {:>6}  packets {:>12}  bytes {:>14}  new connections {:>10}",
                dip.to_string(),
                shares.get(dip).copied().unwrap_or(0),
                b.packets,
                b.bytes,
                b.syns
            )?;
        }
    }
    Ok(())
}
