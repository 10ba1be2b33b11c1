//! The edge filters in the operator commands (docs/operations.md "Edge
//! filters"): `nilb filters` (rules with their counters and the sources
//! rate limits hit most), the filter part of `nilb stats`, `nilb lookup`
//! (which rule decides a source) and `nilb check` (what the lists hold).
//! Human-readable text and `--json` documents, like [`crate::tools`].

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use libbpf_rs::MapCore;
use serde::Serialize;

use crate::config::{Config, ConfigError, RatePer, ServiceKey};
use crate::dataplane::abi::{self, sys};
use crate::dataplane::filters::{live_verdicts, read_rules, rules_by_id, top_sources, LiveRule};
use crate::dataplane::PinnedMaps;
use crate::filters::{FilterSet, RuleKind, Verdict};
use crate::report::JSON_SCHEMA;

/// Counters of one filter rule, as `nilb stats --json` and `nilb filters
/// --json` print them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleStatsReport {
    /// Rule id.
    pub id: u16,
    /// Name.
    pub name: String,
    /// `global`, or the service's `VIP:PORT/PROTOCOL`.
    pub scope: String,
    /// `deny`, `allow` or `rate_limit`.
    pub kind: &'static str,
    /// Counts without dropping: `packets` and `bytes` are what it would
    /// have dropped.
    pub dry_run: bool,
    /// Packets dropped (dry run: that would have been).
    pub packets: u64,
    /// Their L3 bytes.
    pub bytes: u64,
}

/// Scope label of a live rule: `global` or the key of the service whose
/// stats index is `scope - 1` (`?N` if none has it).
fn scope_label(scope: u32, keys: &BTreeMap<u32, ServiceKey>) -> String {
    match scope {
        0 => "global".into(),
        s => keys
            .get(&(s - 1))
            .map_or(format!("?{}", s - 1), |k| k.to_string()),
    }
}

/// Service keys by stats index, from the live tables.
fn keys_by_index(pins: &PinnedMaps) -> Result<BTreeMap<u32, ServiceKey>> {
    Ok(pins
        .tables()?
        .into_iter()
        .map(|(k, t)| (t.service_index, k))
        .collect())
}

/// Every rule of the running data plane with its counters.
pub fn rule_stats(pins: &PinnedMaps) -> Result<Vec<RuleStatsReport>> {
    let keys = keys_by_index(pins)?;
    let stats = pins.filter_map("filter_stats");
    read_rules(pins.filter_map("filter_rules"))?
        .into_iter()
        .map(|r| {
            let c = abi::read_percpu(stats, r.id as u32, abi::sum_filter_stats)?;
            Ok(RuleStatsReport {
                id: r.id,
                scope: scope_label(r.scope, &keys),
                kind: r.kind.as_str(),
                dry_run: r.dry_run,
                packets: c.packets,
                bytes: c.bytes,
                name: r.name,
            })
        })
        .collect()
}

/// Print rules with counters (`nilb stats`, `nilb filters`).
pub fn print_rule_stats(rules: &[RuleStatsReport], out: &mut dyn Write) -> Result<()> {
    if rules.is_empty() {
        writeln!(out, "  (no filter rules)")?;
        return Ok(());
    }
    writeln!(
        out,
        "  {:>4} {:<24} {:<22} {:<10} {:>14} {:>16}",
        "id", "rule", "scope", "kind", "dropped pkts", "dropped bytes"
    )?;
    for r in rules {
        writeln!(
            out,
            "  {:>4} {:<24} {:<22} {:<10} {:>14} {:>16}{}",
            r.id,
            r.name,
            r.scope,
            r.kind,
            r.packets,
            r.bytes,
            if r.dry_run {
                "  (dry run: would have dropped)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}

/// One source a rate limit hit.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RateSourceReport {
    /// The rate limit's name.
    pub rule: String,
    /// Its scope.
    pub scope: String,
    /// The source address, or its /24 (`per: subnet`).
    pub source: String,
    /// Packets it lost to the rule (dry run: would have).
    pub dropped: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
}

/// `nilb filters --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FiltersReport {
    /// [`JSON_SCHEMA`].
    pub schema: u32,
    /// Pin directory read.
    pub pin_dir: String,
    /// The live generation of the filter maps, `null` if none is loaded.
    pub generation: Option<u32>,
    /// Packets the filters dropped, by counter (`xdp_drop_filter`,
    /// `xdp_drop_rate_limit`, `xdp_filter_dry_run`, `xdp_filter_exempt`).
    pub counters: BTreeMap<&'static str, u64>,
    /// Every rule with its counters.
    pub rules: Vec<RuleStatsReport>,
    /// The sources rate limits dropped most (at most `--top`), most first.
    pub top_sources: Vec<RateSourceReport>,
}

/// The filters of the data plane pinned under `dir`, with the `top`
/// sources rate limits dropped most.
pub fn filters_report(dir: &Path, top: usize) -> Result<FiltersReport> {
    let pins = PinnedMaps::open(dir)?;
    let flags = pins.config_flags()?;
    let keys = keys_by_index(&pins)?;
    let live = read_rules(pins.filter_map("filter_rules"))?;
    let by_id = rules_by_id(&live);
    let values = abi::read_counters(&pins.counters)?;
    let counters = abi::COUNTER_NAMES
        .iter()
        .copied()
        .zip(values)
        .filter(|(n, _)| n.contains("filter") || n.contains("rate_limit"))
        .collect();
    let top_sources = top_sources(pins.filter_map("filter_rate_lru"), top)?
        .into_iter()
        .map(|s| {
            let r = by_id.get(&s.rule);
            let subnet = r.is_some_and(|r| r.mask != Ipv4Addr::BROADCAST);
            RateSourceReport {
                rule: r.map_or(format!("#{}", s.rule), |r| r.name.clone()),
                scope: r.map_or("?".into(), |r| scope_label(r.scope, &keys)),
                source: if subnet {
                    format!("{}/24", s.source)
                } else {
                    s.source.to_string()
                },
                dropped: s.dropped,
                dropped_bytes: s.dropped_bytes,
            }
        })
        .collect();
    let loaded = flags
        & crate::dataplane::filters::FILTER_FLAGS
        & !sys::nilb_config_flags::NILB_F_FILTER_GEN1
        != 0;
    Ok(FiltersReport {
        schema: JSON_SCHEMA,
        pin_dir: dir.display().to_string(),
        generation: loaded.then_some(u32::from(
            flags & sys::nilb_config_flags::NILB_F_FILTER_GEN1 != 0,
        )),
        counters,
        rules: rule_stats(&pins)?,
        top_sources,
    })
}

/// Print `nilb filters`.
pub fn filters(dir: &Path, top: usize, out: &mut dyn Write) -> Result<()> {
    let r = filters_report(dir, top)?;
    writeln!(
        out,
        "filters of the data plane under {}: {}",
        r.pin_dir,
        match r.generation {
            Some(g) => format!("generation {g} live"),
            None => "none loaded (no rule, or not a balancer)".into(),
        }
    )?;
    for (name, v) in &r.counters {
        writeln!(out, "  {name:<24} {v:>14}")?;
    }
    writeln!(out, "rules:")?;
    print_rule_stats(&r.rules, out)?;
    writeln!(out, "sources rate limits dropped most (top {top}):")?;
    if r.top_sources.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for s in &r.top_sources {
        writeln!(
            out,
            "  {:<18} {:>12} packets {:>14} bytes  rule {} ({})",
            s.source, s.dropped, s.dropped_bytes, s.rule, s.scope
        )?;
    }
    Ok(())
}

/// A rule as named in a lookup.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleRef {
    /// Rule id.
    pub id: u16,
    /// Name.
    pub name: String,
    /// `deny`, `allow` or `rate_limit`.
    pub kind: &'static str,
}

/// What one filter stage decides for a source.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StageLookup {
    /// The most specific prefix that matched (from the configuration;
    /// `null` in a live lookup or when none matched).
    pub matched: Option<String>,
    /// The rule that drops the source; `null`: the stage lets it through.
    pub dropped_by: Option<RuleRef>,
    /// A dry-run rule that counts the source as one it would drop.
    pub dry_run: Option<RuleRef>,
    /// The deciding rule covers cluster addresses and this source is one:
    /// the data plane exempts it.
    pub exempt_cluster_address: bool,
    /// Rate limits the source then passes through, in order.
    pub rate_limits: Vec<RuleRef>,
}

/// `lookup`'s filter part: both stages, and the outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FilterLookup {
    /// The global stage (every packet).
    pub global: StageLookup,
    /// The service stage (the service's TCP and UDP packets).
    pub service: StageLookup,
    /// `dropped by RULE (global|service)`, `rate limits apply` or `passes`.
    pub outcome: String,
}

fn rule_ref(id: u16, name: &dyn Fn(u16) -> Option<(String, RuleKind)>) -> RuleRef {
    let (n, k) = name(id).unwrap_or((format!("#{id}"), RuleKind::Deny));
    RuleRef {
        id,
        name: n,
        kind: k.as_str(),
    }
}

fn stage(
    v: Verdict,
    matched: Option<String>,
    addr: Ipv4Addr,
    cluster: &dyn Fn(Ipv4Addr) -> bool,
    rates: &[u16],
    name: &dyn Fn(u16) -> Option<(String, RuleKind)>,
) -> StageLookup {
    let exempt_drop = v.drop.is_some() && v.drop_covers_cluster && cluster(addr);
    let exempt_dry = v.dry.is_some() && v.dry_covers_cluster && cluster(addr);
    StageLookup {
        matched,
        dropped_by: v.drop.filter(|_| !exempt_drop).map(|i| rule_ref(i, name)),
        dry_run: v.dry.filter(|_| !exempt_dry).map(|i| rule_ref(i, name)),
        exempt_cluster_address: exempt_drop || exempt_dry,
        rate_limits: rates.iter().map(|i| rule_ref(*i, name)).collect(),
    }
}

fn outcome(global: &StageLookup, service: &StageLookup) -> String {
    if let Some(r) = &global.dropped_by {
        format!("dropped by {} `{}` (global)", r.kind, r.name)
    } else if let Some(r) = &service.dropped_by {
        format!("dropped by {} `{}` (service)", r.kind, r.name)
    } else if !global.rate_limits.is_empty() || !service.rate_limits.is_empty() {
        "passes the lists; rate limits apply".into()
    } else {
        "passes".into()
    }
}

/// Which rules decide `addr` for `key`, from a compiled set (the
/// configuration and its list files).
pub fn lookup_in_set(
    set: &FilterSet,
    config: &Config,
    key: &ServiceKey,
    addr: Ipv4Addr,
) -> FilterLookup {
    let name = |id: u16| set.rule(id).map(|r| (r.ident.name.clone(), r.ident.kind));
    let cluster = config.cluster_addresses_v4();
    let is_cluster = |a: Ipv4Addr| cluster.contains(&a);
    let g = set.decide(None, addr);
    let s = set.decide(Some(key), addr);
    let global = stage(
        g.verdict,
        g.matched.map(|p| p.to_string()),
        addr,
        &is_cluster,
        set.rates(None),
        &name,
    );
    let service = stage(
        s.verdict,
        s.matched.map(|p| p.to_string()),
        addr,
        &|_| false,
        set.rates(Some(key)),
        &name,
    );
    FilterLookup {
        outcome: outcome(&global, &service),
        global,
        service,
    }
}

/// Which rules decide `addr` for the service with stats index `index`, read
/// from the running data plane's maps.
pub fn lookup_live(pins: &PinnedMaps, index: u32, addr: Ipv4Addr) -> Result<FilterLookup> {
    let flags = pins.config_flags()?;
    let rules = read_rules(pins.filter_map("filter_rules"))?;
    let by_id = rules_by_id(&rules);
    let name = |id: u16| by_id.get(&id).map(|r: &&LiveRule| (r.name.clone(), r.kind));
    let (g, s) = live_verdicts(flags, &pins.live_filter_maps(), addr, Some(1 + index))?;
    let gen = u32::from(flags & sys::nilb_config_flags::NILB_F_FILTER_GEN1 != 0);
    let rates_of = |scope: u32| -> Vec<u16> {
        let k = gen * sys::nilb_limits::NILB_FILTER_SCOPES + scope;
        pins.filter_map("filter_scopes")
            .lookup(&k.to_ne_bytes(), libbpf_rs::MapFlags::ANY)
            .ok()
            .flatten()
            .and_then(|v| abi::read_struct::<sys::nilb_filter_scope>(&v).ok())
            .map(|sc| sc.rate.iter().copied().take_while(|r| *r != 0).collect())
            .unwrap_or_default()
    };
    let global_rates = if flags & sys::nilb_config_flags::NILB_F_FILTER_GLOBAL_RATE != 0 {
        rates_of(0)
    } else {
        Vec::new()
    };
    let service_rates = if flags & sys::nilb_config_flags::NILB_F_FILTER_SERVICES != 0 {
        rates_of(1 + index)
    } else {
        Vec::new()
    };
    let cluster_map = libbpf_rs::MapHandle::from_pinned_path(pins.dir.join("cluster_nodes")).ok();
    let is_cluster = |a: Ipv4Addr| {
        cluster_map.as_ref().is_some_and(|m| {
            libbpf_rs::MapCore::lookup(m, &abi::addr_be(a).to_ne_bytes(), libbpf_rs::MapFlags::ANY)
                .ok()
                .flatten()
                .is_some()
        })
    };
    let global = stage(g, None, addr, &is_cluster, &global_rates, &name);
    let service = stage(
        s.unwrap_or_default(),
        None,
        addr,
        &|_| false,
        &service_rates,
        &name,
    );
    Ok(FilterLookup {
        outcome: outcome(&global, &service),
        global,
        service,
    })
}

/// The filter part of `nilb lookup` for the flow `src` -> `dst`: from the
/// configuration and its list files, or (`live`: a pin directory) from the
/// running data plane's maps. None when no filter is configured (config) or
/// loaded (live).
pub fn lookup_filters(
    config: &Config,
    config_path: &Path,
    src: std::net::SocketAddrV4,
    dst: std::net::SocketAddrV4,
    protocol: crate::config::Protocol,
    live: Option<&Path>,
) -> Result<Option<FilterLookup>> {
    let key = ServiceKey {
        vip: std::net::IpAddr::V4(*dst.ip()),
        port: dst.port(),
        protocol,
    };
    match live {
        Some(dir) => {
            let pins = PinnedMaps::open(dir)?;
            let flags = pins.config_flags()?;
            if flags
                & crate::dataplane::filters::FILTER_FLAGS
                & !sys::nilb_config_flags::NILB_F_FILTER_GEN1
                == 0
            {
                return Ok(None);
            }
            let index = pins
                .tables()?
                .into_iter()
                .find(|(k, _)| *k == key)
                .map(|(_, t)| t.service_index);
            let Some(index) = index else {
                return Ok(None);
            };
            Ok(Some(lookup_live(&pins, index, *src.ip())?))
        }
        None => {
            let (set, _) = crate::filters::lists::prepare(
                config,
                config_path,
                &config.cluster_addresses_v4(),
                true,
                None,
                &BTreeMap::new(),
            )
            .map_err(anyhow::Error::new)?;
            if set.is_empty() {
                return Ok(None);
            }
            Ok(Some(lookup_in_set(&set, config, &key, *src.ip())))
        }
    }
}

/// Print a lookup's filter part.
pub fn print_lookup(f: &FilterLookup, out: &mut dyn Write) -> Result<()> {
    for (label, s) in [("global", &f.global), ("service", &f.service)] {
        let mut parts = Vec::new();
        if let Some(m) = &s.matched {
            parts.push(format!("matches {m}"));
        }
        match &s.dropped_by {
            Some(r) => parts.push(format!(
                "dropped by {} `{}` (rule {})",
                r.kind, r.name, r.id
            )),
            None => parts.push("no list drops it".into()),
        }
        if let Some(r) = &s.dry_run {
            parts.push(format!(
                "dry-run {} `{}` (rule {}) would drop it",
                r.kind, r.name, r.id
            ));
        }
        if s.exempt_cluster_address {
            parts.push("cluster address: exempt".into());
        }
        if !s.rate_limits.is_empty() {
            let names: Vec<String> = s
                .rate_limits
                .iter()
                .map(|r| format!("`{}`", r.name))
                .collect();
            parts.push(format!("rate limits {}", names.join(", ")));
        }
        writeln!(out, "filters ({label}) {}", parts.join("; "))?;
    }
    writeln!(out, "filters   {}", f.outcome)?;
    Ok(())
}

/// `nilb check`'s filter part: read the list files, check them, compile,
/// and print per rule what it holds. Returns the compiled set, or the
/// problems (a list that cannot be read or parsed, a rule that covers a
/// cluster address, a limit).
pub fn check_filters(
    config: &Config,
    config_path: &Path,
    out: &mut dyn Write,
) -> Result<std::result::Result<Arc<FilterSet>, ConfigError>> {
    let (set, ms) = match crate::filters::lists::prepare(
        config,
        config_path,
        &config.cluster_addresses_v4(),
        true,
        None,
        &BTreeMap::new(),
    ) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    if set.is_empty() {
        return Ok(Ok(set));
    }
    writeln!(
        out,
        "filters: {} rule(s), {} IPv4 prefixes, read and compiled in {ms} ms (they apply on the balancers, where XDP runs)",
        set.rules.len(),
        set.prefixes()
    )?;
    for r in &set.rules {
        let what = match &r.rate {
            Some((per, packets, syns)) => {
                let mut v = vec![format!(
                    "per {}",
                    match per {
                        RatePer::Address => "address",
                        RatePer::Subnet => "/24",
                    }
                )];
                if let Some(p) = packets {
                    v.push(format!("{} packets/s burst {}", p.per_second, p.burst));
                }
                if let Some(s) = syns {
                    v.push(format!("{} SYNs/s burst {}", s.per_second, s.burst));
                }
                v.join(", ")
            }
            None => r
                .sources
                .iter()
                .map(|s| {
                    let mut t = format!("{}: {} prefixes", s.origin, s.prefixes);
                    if s.ipv6_ignored > 0 {
                        t += &format!(" ({} IPv6 ignored: not filtered yet)", s.ipv6_ignored);
                    }
                    t
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        writeln!(
            out,
            "  {} {} `{}`{}{}: {what}",
            r.ident.scope,
            r.ident.kind.as_str(),
            r.ident.name,
            if r.dry_run { " (dry run)" } else { "" },
            if r.covers_cluster {
                " (covers cluster addresses: exempted)"
            } else {
                ""
            }
        )?;
    }
    if let Some(g) = &set.global {
        let mut line = format!(
            "  global table: {} of 16777216 /24s covered",
            g.flat.iter().filter(|e| **e != 0).count()
        );
        if g.long_entries > 0 {
            line += &format!(
                ", {} addresses of prefixes longer than /24 in {} buckets ({} KiB)",
                g.long_entries,
                g.buckets.len(),
                g.buckets.len() * 64 / 1024
            );
        }
        writeln!(out, "{line}")?;
    }
    for (k, s) in &set.services {
        if let Some(a) = set.rules.iter().find(|r| {
            r.ident.kind == RuleKind::Allow && r.ident.scope == crate::filters::Scope::Service(*k)
        }) {
            if a.prefixes() == 0 {
                writeln!(
                    out,
                    "  warning: {k}: allow rule `{}` lists no prefix: every packet to the service is dropped{}",
                    a.ident.name,
                    if a.dry_run { " (dry run: counted)" } else { "" }
                )?;
            }
        }
        let _ = s;
    }
    Ok(Ok(set))
}
