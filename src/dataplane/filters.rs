//! The edge filters in the maps (docs/design.md "Edge filters"): installing
//! a [`FilterSet`] as a new generation and flipping to it, and reading what
//! is installed (rules, counters, rate-limit states, live verdicts) for the
//! daemon and for the tools that read the pins.
//!
//! Install order: counters of new rule ids zeroed, every rule's
//! `filter_rules` entry written (ids are stable, so the live generation
//! never sees a rule change meaning), then the other generation built
//! completely (verdicts, scopes, flat table, long table, service trie, each
//! inner map filled before it is put in its outer slot), then one write of
//! `nilb_config` flips `NILB_F_FILTER_GEN1`; after an RCU grace period no
//! program can still use the old generation, so its maps are released and
//! the removed rules' entries cleared. A failure before the flip leaves the
//! live generation as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::time::Instant;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};
use serde::{Deserialize, Serialize};

use super::abi::{self, sys};
use crate::filters::{Digest, FilterSet, RuleKind, Verdict};
use crate::types::ServiceKey;

use sys::nilb_config_flags as cf;
use sys::nilb_limits as lim;

/// The config flags that belong to the filters.
pub const FILTER_FLAGS: u32 = cf::NILB_F_FILTER_GEN1
    | cf::NILB_F_FILTER_GLOBAL_LIST
    | cf::NILB_F_FILTER_GLOBAL_RATE
    | cf::NILB_F_FILTER_SERVICES
    | cf::NILB_F_FILTER_LONG_LARGE;

/// What an install of the filters did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterInstall {
    /// The generation now live (0 or 1).
    pub generation: u32,
    /// Time to build the maps and flip, ms (the compile is not included).
    pub maps_ms: u64,
    /// Memory the kernel charges for the live generation's maps, bytes.
    pub bytes: u64,
    /// Rules installed.
    pub rules: usize,
    /// Addresses in the long table.
    pub long_entries: usize,
    /// Entries of the service trie.
    pub trie_entries: usize,
}

/// Filter state a data plane tracks between installs.
#[derive(Default)]
pub(super) struct FilterState {
    /// The filter bits of `nilb_config.flags` as last written.
    pub(super) flags: u32,
    /// Digest of the installed set (with its service indexes); None:
    /// unknown (a fresh or adopted data plane).
    pub(super) digest: Option<u64>,
    /// Rule ids with a `filter_rules` entry.
    pub(super) ids: BTreeSet<u16>,
    /// Size of the rate-limit LRU in `filter_rate_lru`, if one is there.
    pub(super) rate_size: Option<u32>,
    /// The last install.
    pub(super) last: Option<FilterInstall>,
    /// For waiting out an RCU grace period.
    pub(super) rcu: Option<abi::RcuBarrier>,
}

/// A map slot value for an inner map.
fn fd_value(m: &MapHandle) -> [u8; 4] {
    abi::map_fd_value(m.as_fd())
}

/// Delete a slot of an outer map; an empty slot is not an error.
fn clear_slot(outer: &dyn MapCore, slot: u32) -> Result<()> {
    match outer.delete(&slot.to_ne_bytes()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e)
            .with_context(|| format!("clearing slot {slot} of {}", outer.name().to_string_lossy())),
    }
}

impl super::Dataplane<'_> {
    /// Adopted pins: take the filter flags, rule ids and LRU size from the
    /// maps, so that the next install builds the other generation and keeps
    /// the ids.
    pub(super) fn adopt_filters(&mut self) {
        let maps = &self.skel.maps;
        if let Ok(Some(v)) = maps.nilb_config.lookup(&0u32.to_ne_bytes(), MapFlags::ANY) {
            if let Ok(c) = abi::read_struct::<sys::nilb_config>(&v) {
                self.filters.flags = c.flags & FILTER_FLAGS;
            }
        }
        self.filters.ids = read_rules(&maps.filter_rules)
            .map(|r| r.into_iter().map(|r| r.id).collect())
            .unwrap_or_default();
        self.filters.rate_size = inner_of(&maps.filter_rate_lru, 0).map(|m| m.max_entries());
    }

    /// The live filter rules' ids by (scope, kind, name), as installed
    /// (scope 0 global, 1 + service index).
    pub fn live_filter_rules(&self) -> Result<Vec<LiveRule>> {
        read_rules(&self.skel.maps.filter_rules)
    }

    /// What the last [`DataplaneOps::install_filters`](super::DataplaneOps::install_filters) did.
    pub fn last_filter_install(&self) -> Option<&FilterInstall> {
        self.filters.last.as_ref()
    }

    /// Counters of filter rule `id`, summed over CPUs.
    pub fn filter_stats(&self, id: u16) -> Result<sys::nilb_filter_stats> {
        abi::read_percpu(
            &self.skel.maps.filter_stats,
            id as u32,
            abi::sum_filter_stats,
        )
    }

    /// Rate-limit states, most dropped first (at most `top`).
    pub fn rate_limited_sources(&self, top: usize) -> Result<Vec<RateSource>> {
        top_sources(&self.skel.maps.filter_rate_lru, top)
    }

    pub(super) fn install_filter_set(
        &mut self,
        set: &FilterSet,
        index_of: &dyn Fn(&ServiceKey) -> Option<u32>,
    ) -> Result<()> {
        let scope_of = |s: &crate::filters::Scope| -> Option<u32> {
            match s {
                crate::filters::Scope::Global => Some(0),
                crate::filters::Scope::Service(k) => index_of(k).map(|i| 1 + i),
            }
        };
        let mut d = Digest::default();
        d.word(set.digest);
        for r in &set.rules {
            d.word(scope_of(&r.ident.scope).map_or(u64::MAX, u64::from));
        }
        let digest = d.finish();
        if self.filters.digest == Some(digest) {
            return Ok(());
        }
        let started = Instant::now();
        let live = u32::from(self.filters.flags & cf::NILB_F_FILTER_GEN1 != 0);
        let next = 1 - live;
        let maps = &self.skel.maps;

        // Rules: counters of new ids zeroed, then every entry written.
        let cpus = libbpf_rs::num_possible_cpus()?;
        let zero = vec![vec![0u8; std::mem::size_of::<sys::nilb_filter_stats>()]; cpus];
        for r in &set.rules {
            if !self.filters.ids.contains(&r.id) {
                maps.filter_stats
                    .update_percpu(&(r.id as u32).to_ne_bytes(), &zero, MapFlags::ANY)
                    .with_context(|| format!("resetting the counters of filter rule {}", r.id))?;
            }
            let Some(scope) = scope_of(&r.ident.scope) else {
                anyhow::bail!(
                    "filter rule {} of {} has no service index",
                    r.ident.name,
                    r.ident.scope
                );
            };
            let v = abi::filter_rule_value(r, scope);
            maps.filter_rules
                .update(
                    &(r.id as u32).to_ne_bytes(),
                    abi::bytes_of(&v),
                    MapFlags::ANY,
                )
                .with_context(|| format!("writing filter rule {}", r.id))?;
            self.filters.ids.insert(r.id);
        }

        // The other generation: verdicts and scopes.
        let mut bytes = 0u64;
        let mut flags = if next == 1 { cf::NILB_F_FILTER_GEN1 } else { 0 };
        let vbase = next * lim::NILB_FILTER_VERDICTS;
        if let Some(g) = &set.global {
            let keys: Vec<u8> = (0..g.verdicts.len() as u32)
                .flat_map(|i| (vbase + i).to_ne_bytes())
                .collect();
            let vals: Vec<u8> = g.verdicts.iter().flat_map(|v| v.to_ne_bytes()).collect();
            maps.filter_verdicts
                .update_batch(
                    &keys,
                    &vals,
                    g.verdicts.len() as u32,
                    MapFlags::ANY,
                    MapFlags::ANY,
                )
                .context("writing filter verdicts")?;
        }
        let sbase = next * lim::NILB_FILTER_SCOPES;
        let mut scopes = vec![sys::nilb_filter_scope::default(); lim::NILB_FILTER_SCOPES as usize];
        let rates = |ids: &[u16]| {
            let mut r = [0u16; lim::NILB_FILTER_RATE_RULES as usize];
            for (slot, id) in r.iter_mut().zip(ids) {
                *slot = *id;
            }
            r
        };
        scopes[0].rate = rates(&set.global_rates);
        if let Some(g) = &set.global {
            flags |= cf::NILB_F_FILTER_GLOBAL_LIST;
            if g.large {
                flags |= cf::NILB_F_FILTER_LONG_LARGE;
            }
        }
        if !set.global_rates.is_empty() {
            flags |= cf::NILB_F_FILTER_GLOBAL_RATE;
        }
        let mut trie_entries: Vec<(sys::nilb_filter_v4_key, u32)> = Vec::new();
        for (key, s) in &set.services {
            let Some(scope) = index_of(key).map(|i| 1 + i) else {
                anyhow::bail!("service {key} has filters but no service index");
            };
            let sc = &mut scopes[scope as usize];
            sc.no_match = s.no_match;
            sc.rate = rates(&s.rates);
            if !s.entries.is_empty() {
                sc.flags = sys::nilb_filter_bits::NILB_FS_PREFIXES as u16;
            }
            trie_entries.extend(
                s.entries
                    .iter()
                    .map(|(p, v)| (abi::filter_trie_key(scope, p), *v)),
            );
            flags |= cf::NILB_F_FILTER_SERVICES;
        }
        let keys: Vec<u8> = (0..scopes.len() as u32)
            .flat_map(|i| (sbase + i).to_ne_bytes())
            .collect();
        let vals: Vec<u8> = scopes
            .iter()
            .flat_map(|s| abi::bytes_of(s).to_vec())
            .collect();
        maps.filter_scopes
            .update_batch(
                &keys,
                &vals,
                scopes.len() as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .context("writing filter scopes")?;

        // The other generation: flat and long tables, service trie.
        let mut long_entries = 0;
        match &set.global {
            Some(g) => {
                let flat = abi::create_map(
                    MapType::Array,
                    &format!("nilb_flat{next}"),
                    4,
                    8,
                    lim::NILB_FILTER_FLAT_ELEMS,
                    libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
                )?;
                abi::fill_array(&flat, &g.flat_bytes()).context("filling the flat filter table")?;
                bytes += abi::map_memlock(&flat).unwrap_or(0);
                maps.filter_flat
                    .update(&next.to_ne_bytes(), &fd_value(&flat), MapFlags::ANY)
                    .context("putting the flat filter table in place")?;
                clear_slot(&maps.filter_long, next)?;
                clear_slot(&maps.filter_long_small, next)?;
                if g.long_entries > 0 {
                    let lng = abi::create_map(
                        MapType::Array,
                        &format!("nilb_long{next}"),
                        4,
                        std::mem::size_of::<sys::nilb_filter_bucket>() as u32,
                        g.buckets.len() as u32,
                        libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
                    )?;
                    abi::fill_array(&lng, &g.bucket_bytes())
                        .context("filling the long filter table")?;
                    bytes += abi::map_memlock(&lng).unwrap_or(0);
                    let outer = if g.large {
                        &maps.filter_long
                    } else {
                        &maps.filter_long_small
                    };
                    outer
                        .update(&next.to_ne_bytes(), &fd_value(&lng), MapFlags::ANY)
                        .context("putting the long filter table in place")?;
                    long_entries = g.long_entries;
                }
            }
            None => {
                clear_slot(&maps.filter_flat, next)?;
                clear_slot(&maps.filter_long, next)?;
                clear_slot(&maps.filter_long_small, next)?;
            }
        }
        if trie_entries.is_empty() {
            clear_slot(&maps.filter_trie, next)?;
        } else {
            let trie = abi::create_map(
                MapType::LpmTrie,
                &format!("nilb_trie{next}"),
                std::mem::size_of::<sys::nilb_filter_v4_key>() as u32,
                4,
                trie_entries.len() as u32,
                libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
            )?;
            let keys: Vec<u8> = trie_entries
                .iter()
                .flat_map(|(k, _)| abi::bytes_of(k).to_vec())
                .collect();
            let vals: Vec<u8> = trie_entries
                .iter()
                .flat_map(|(_, v)| v.to_ne_bytes())
                .collect();
            trie.update_batch(
                &keys,
                &vals,
                trie_entries.len() as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .context("filling the service filter trie")?;
            bytes += abi::map_memlock(&trie).unwrap_or(0);
            maps.filter_trie
                .update(&next.to_ne_bytes(), &fd_value(&trie), MapFlags::ANY)
                .context("putting the service filter trie in place")?;
        }

        // Rate-limit state: one LRU of the configured size while any rule
        // needs it (a new size starts empty).
        let any_rate =
            !set.global_rates.is_empty() || set.services.values().any(|s| !s.rates.is_empty());
        if any_rate && self.filters.rate_size != Some(set.rate_limit_sources) {
            let lru = abi::create_map(
                MapType::LruHash,
                "nilb_rate",
                std::mem::size_of::<sys::nilb_rate_key>() as u32,
                std::mem::size_of::<sys::nilb_rate_state>() as u32,
                set.rate_limit_sources,
                0,
            )?;
            maps.filter_rate_lru
                .update(&0u32.to_ne_bytes(), &fd_value(&lru), MapFlags::ANY)
                .context("putting the rate-limit state in place")?;
            self.filters.rate_size = Some(set.rate_limit_sources);
        }

        // The flip: one write of nilb_config.
        self.filters.flags = flags;
        self.write_config()?;
        // No program runs on the old generation after a grace period.
        if self.filters.rcu.is_none() {
            self.filters.rcu = Some(abi::RcuBarrier::new()?);
        }
        self.filters.rcu.as_ref().expect("created").wait()?;
        let maps = &self.skel.maps;
        clear_slot(&maps.filter_flat, live)?;
        clear_slot(&maps.filter_long, live)?;
        clear_slot(&maps.filter_long_small, live)?;
        clear_slot(&maps.filter_trie, live)?;
        if !any_rate && self.filters.rate_size.is_some() {
            clear_slot(&maps.filter_rate_lru, 0)?;
            self.filters.rate_size = None;
        }
        if let Some(m) = inner_of(&maps.filter_rate_lru, 0) {
            bytes += abi::map_memlock(&m).unwrap_or(0);
        }
        let keep: BTreeSet<u16> = set.rules.iter().map(|r| r.id).collect();
        let empty = sys::nilb_filter_rule::default();
        for id in self.filters.ids.difference(&keep) {
            maps.filter_rules
                .update(
                    &(*id as u32).to_ne_bytes(),
                    abi::bytes_of(&empty),
                    MapFlags::ANY,
                )
                .with_context(|| format!("clearing filter rule {id}"))?;
        }
        self.filters.ids = keep;
        self.filters.digest = Some(digest);
        self.filters.last = Some(FilterInstall {
            generation: next,
            maps_ms: started.elapsed().as_millis() as u64,
            bytes,
            rules: set.rules.len(),
            long_entries,
            trie_entries: trie_entries.len(),
        });
        Ok(())
    }
}

/// The inner map in `slot` of an outer map, if any.
pub(super) fn inner_of(outer: &dyn MapCore, slot: u32) -> Option<MapHandle> {
    let v = outer.lookup(&slot.to_ne_bytes(), MapFlags::ANY).ok()??;
    let id = u32::from_ne_bytes(v.get(..4)?.try_into().ok()?);
    MapHandle::from_map_id(id).ok()
}

/// A rule as the data plane holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveRule {
    /// Rule id.
    pub id: u16,
    /// 0 global, 1 + service index.
    pub scope: u32,
    /// What it does.
    pub kind: RuleKind,
    /// Its name.
    pub name: String,
    /// Counts without dropping.
    pub dry_run: bool,
    /// Covers cluster addresses (exempted).
    pub covers_cluster: bool,
    /// Rate limits: (packets, SYNs) GCRA interval and tolerance, ns.
    pub rate: Option<[u64; 4]>,
    /// Rate limits: the key mask (`255.255.255.255` per address,
    /// `255.255.255.0` per subnet).
    pub mask: Ipv4Addr,
}

/// Every used entry of a `filter_rules` map.
pub fn read_rules(map: &dyn MapCore) -> Result<Vec<LiveRule>> {
    let mut out = Vec::new();
    for id in 1..lim::NILB_MAX_FILTER_RULES {
        let Some(v) = map.lookup(&id.to_ne_bytes(), MapFlags::ANY)? else {
            continue;
        };
        let r: sys::nilb_filter_rule = abi::read_struct(&v)?;
        let Some(kind) = RuleKind::from_code(r.kind) else {
            continue;
        };
        out.push(LiveRule {
            id: id as u16,
            scope: r.scope,
            kind,
            name: abi::filter_rule_name(&r),
            dry_run: r.flags & sys::nilb_filter_bits::NILB_FR_DRY_RUN as u8 != 0,
            covers_cluster: r.flags & sys::nilb_filter_bits::NILB_FR_COVERS_CLUSTER as u8 != 0,
            rate: (kind == RuleKind::Rate).then_some([
                r.pkt_interval_ns,
                r.pkt_tolerance_ns,
                r.syn_interval_ns,
                r.syn_tolerance_ns,
            ]),
            mask: abi::addr_from_be(r.mask_v4),
        });
    }
    Ok(out)
}

/// One source's rate-limit state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateSource {
    /// Rule id.
    pub rule: u16,
    /// The source (or its /24) as keyed.
    pub source: Ipv4Addr,
    /// Packets it lost to the rule (dry run: would have).
    pub dropped: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
}

/// The `top` states with the most drops of the LRU in `outer` slot 0.
pub fn top_sources(outer: &dyn MapCore, top: usize) -> Result<Vec<RateSource>> {
    let Some(lru) = inner_of(outer, 0) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for k in lru.keys() {
        let Some(v) = lru.lookup(&k, MapFlags::ANY)? else {
            continue;
        };
        let key: sys::nilb_rate_key = abi::read_struct(&k)?;
        let st: sys::nilb_rate_state = abi::read_struct(&v)?;
        if st.dropped == 0 {
            continue;
        }
        out.push(RateSource {
            rule: key.rule,
            source: abi::addr_from_be(key.addr[0]),
            dropped: st.dropped,
            dropped_bytes: st.dropped_bytes,
        });
    }
    out.sort_by(|a, b| b.dropped.cmp(&a.dropped).then(a.source.cmp(&b.source)));
    out.truncate(top);
    Ok(out)
}

/// The live generation's verdict for a source, read from the maps the way
/// the XDP program reads them: (global verdict, service verdict for the
/// scope `service_scope` = 1 + service index, if given).
pub fn live_verdicts(
    flags: u32,
    maps: &LiveFilterMaps<'_>,
    addr: Ipv4Addr,
    service_scope: Option<u32>,
) -> Result<(Verdict, Option<Verdict>)> {
    let gen = u32::from(flags & cf::NILB_F_FILTER_GEN1 != 0);
    let scope = |s: u32| -> Result<sys::nilb_filter_scope> {
        let k = gen * lim::NILB_FILTER_SCOPES + s;
        let v = maps
            .scopes
            .lookup(&k.to_ne_bytes(), MapFlags::ANY)?
            .context("filter_scopes element missing")?;
        abi::read_struct(&v)
    };
    let mut global = 0u32;
    if flags & cf::NILB_F_FILTER_GLOBAL_LIST != 0 {
        if let Some(flat) = inner_of(maps.flat, gen) {
            let slash24 = u32::from(addr) >> 8;
            let e = flat
                .lookup(&(slash24 >> 2).to_ne_bytes(), MapFlags::ANY)?
                .context("flat table element missing")?;
            let w = u64::from_ne_bytes(e[..8].try_into().expect("8 bytes"));
            let entry = (w >> (16 * (slash24 & 3))) as u16;
            let mut found = None;
            let (long, bits) = if flags & cf::NILB_F_FILTER_LONG_LARGE != 0 {
                (maps.long, lim::NILB_FILTER_LONG_LARGE_BITS)
            } else {
                (maps.long_small, lim::NILB_FILTER_LONG_SMALL_BITS)
            };
            if entry & sys::nilb_filter_bits::NILB_FV_FLAT_EXT as u16 != 0 {
                if let Some(lng) = inner_of(long, gen) {
                    let shift = 32 - bits;
                    let a = crate::filters::wire_u32(addr);
                    for mul in [
                        sys::nilb_filter_bits::NILB_FH_MUL1,
                        sys::nilb_filter_bits::NILB_FH_MUL2,
                    ] {
                        let idx = a.wrapping_mul(mul) >> shift;
                        if let Some(b) = lng.lookup(&idx.to_ne_bytes(), MapFlags::ANY)? {
                            let words: Vec<u32> = b
                                .chunks_exact(4)
                                .map(|c| u32::from_ne_bytes(c.try_into().expect("4")))
                                .collect();
                            let n = words.len() / 2;
                            if let Some(i) = (0..n).find(|&i| words[i] == a && words[n + i] != 0) {
                                found = Some(words[n + i]);
                                break;
                            }
                        }
                    }
                }
            }
            global = match found {
                Some(v) => v,
                None => crate::filters::flat_verdict(entry, |i| {
                    let k = gen * lim::NILB_FILTER_VERDICTS + i as u32;
                    maps.verdicts
                        .lookup(&k.to_ne_bytes(), MapFlags::ANY)
                        .ok()
                        .flatten()
                        .map_or(0, |v| u32::from_ne_bytes(v[..4].try_into().expect("4")))
                }),
            };
        }
    }
    let service = match service_scope {
        Some(s) if flags & cf::NILB_F_FILTER_SERVICES != 0 => {
            let sc = scope(s)?;
            let mut v = sc.no_match;
            if sc.flags & sys::nilb_filter_bits::NILB_FS_PREFIXES as u16 != 0 {
                if let Some(trie) = inner_of(maps.trie, gen) {
                    let k = abi::filter_trie_key(s, &crate::prefix::Prefix4::new(addr, 32));
                    if let Some(w) = trie.lookup(abi::bytes_of(&k), MapFlags::ANY)? {
                        v = u32::from_ne_bytes(w[..4].try_into().expect("4"));
                    }
                }
            }
            Some(Verdict::decode(v))
        }
        _ => None,
    };
    Ok((Verdict::decode(global), service))
}

/// The filter maps a live lookup reads.
pub struct LiveFilterMaps<'a> {
    /// `filter_flat`.
    pub flat: &'a dyn MapCore,
    /// `filter_long`.
    pub long: &'a dyn MapCore,
    /// `filter_long_small`.
    pub long_small: &'a dyn MapCore,
    /// `filter_trie`.
    pub trie: &'a dyn MapCore,
    /// `filter_scopes`.
    pub scopes: &'a dyn MapCore,
    /// `filter_verdicts`.
    pub verdicts: &'a dyn MapCore,
}

/// Rules by id, for naming verdicts.
pub fn rules_by_id(rules: &[LiveRule]) -> BTreeMap<u16, &LiveRule> {
    rules.iter().map(|r| (r.id, r)).collect()
}
