//! The maps a daemon pins so that they outlive it: the one list of their
//! names (loading, adoption, `nilb cleanup` and unpinning all use it), and
//! reading them from another process (`nilb stats`, `nilb tables`, `nilb
//! lookup --live`) or from an adopted data plane ([`LiveTable`]), all
//! through one reader of the tables ([`PinnedMaps::raw_tables`]).
//! `hop_cache`, the service caches and `cache_gen` are not pinned: a
//! restarted daemon's programs start with empty caches.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::abi;
use super::install::{read_raw, read_regions, Chains, PoolMaps, RawTable};
use super::ops::{ControlRecord, NodeSettings};
use super::pool::Region;
use crate::types::{ServiceKey, UnknownFlow};

/// `services`: HASH from (VIP, port, protocol) to the service's region of
/// the bucket pool and its stats index.
pub const SERVICES: &str = "services";
/// `services6`: the same for IPv6 services.
pub const SERVICES6: &str = "services6";
/// `vips6`: the IPv6 VIP addresses.
pub const VIPS6: &str = "vips6";
/// `control_vip6`: the IPv6 VIP of each IPv6 service's `control_state`
/// record.
pub const CONTROL_VIP6: &str = "control_vip6";
/// `control_dip6`: the IPv6 DIP of each `control_state` record of an IPv6
/// cluster network.
pub const CONTROL_DIP6: &str = "control_dip6";
/// `ipv6_balancer`: the prog array the XDP balancer tail-calls for IPv6.
/// Pinned so that it outlives the daemon: the kernel empties a prog array
/// when its last user reference goes, and IPv6 would then stop being
/// balanced while IPv4 goes on (fail-static). A new load puts its own
/// IPv6 program into the adopted array.
pub const IPV6_BALANCER: &str = "ipv6_balancer";
/// `buckets`: the bucket pool (every service's buckets).
pub const BUCKETS: &str = "buckets";
/// `bucket_first`: each bucket's first hop as the balancer reads it first
/// (a `u16` per bucket, with a bit for "lists previous owners"), rewritten
/// from `buckets` on adoption.
pub const BUCKET_FIRST: &str = "bucket_first";
/// `bucket_moved`: each bucket's last first-hop change (control plane only).
pub const BUCKET_MOVED: &str = "bucket_moved";
/// `backends`: each backend slot's address.
pub const BACKENDS: &str = "backends";
/// `cluster_nodes`: addresses allowed to send GUE.
pub const CLUSTER_NODES: &str = "cluster_nodes";
/// GUE senders of an IPv6 cluster network (key: 16-byte address).
pub const CLUSTER_NODES6: &str = "cluster_nodes6";
/// This node's IPv6 cluster address (`struct nilb_config6`).
pub const CONFIG6: &str = "config6";
/// `vips`: the VIP addresses.
pub const VIPS: &str = "vips";
/// `handoff`: the mark of frames the XDP balancer hands to this node's TC
/// program (`struct nilb_handoff`), pinned so that old and new programs
/// agree on it across a restart.
pub const HANDOFF: &str = "handoff";
/// `nilb_config`: this node's settings.
pub const CONFIG: &str = "nilb_config";
/// `counters`: per-CPU event counters.
pub const COUNTERS: &str = "counters";
/// `service_stats`: per-CPU counters by service index.
pub const SERVICE_STATS: &str = "service_stats";
/// `backend_stats`: per-CPU counters by (service, backend) slot.
pub const BACKEND_STATS: &str = "backend_stats";
/// `control_state`: the control plane's state per (service, backend) slot
/// (health verdict, administrative state, removal times), so that a
/// restarted daemon keeps them; the programs never read it.
pub const CONTROL_STATE: &str = "control_state";

/// The edge filters' maps (docs/design.md "Edge filters"): both
/// generations of the flat and long tables and the service trie, the
/// rate-limit state, verdicts, scopes, rules and their counters.
pub const FILTER_MAPS: [&str; 9] = [
    "filter_flat",
    "filter_long",
    "filter_long_small",
    "filter_trie",
    "filter_rate_lru",
    "filter_verdicts",
    "filter_scopes",
    "filter_rules",
    "filter_stats",
];

/// `nat_flows`: NAT mode's flows (bpf/nat.h).
pub const NAT_FLOWS: &str = "nat_flows";
/// The pin an older `nat_flows` of another size is renamed to while its
/// flows are copied into the new one (bpffs names take no dot).
pub const NAT_FLOWS_RESIZING: &str = "nat_flows_resizing";

/// Pins that exist only while a start replaces a map (a daemon that dies
/// in between leaves them): `nat_flows` renamed for its copy, and each
/// grown pool map pinned before it is renamed over the old pin. What
/// `nilb cleanup` and a clean stop remove besides [`PINNED_MAPS`].
pub fn transient_pins() -> Vec<String> {
    let mut v = vec![NAT_FLOWS_RESIZING.to_string()];
    v.extend(
        [BUCKETS, BUCKET_MOVED, BUCKET_FIRST]
            .iter()
            .map(|n| grown_pin(n)),
    );
    v
}

/// The pin a grown pool map `name` is made under before it replaces the
/// old pin (bpffs names take no dot).
pub fn grown_pin(name: &str) -> String {
    format!("{name}_grown")
}

/// Names of the maps pinned under the pin directory, as the BPF object
/// names them.
pub const PINNED_MAPS: [&str; 30] = [
    SERVICES,
    IPV6_BALANCER,
    SERVICES6,
    VIPS6,
    CONTROL_VIP6,
    CONTROL_DIP6,
    BUCKETS,
    BUCKET_FIRST,
    BUCKET_MOVED,
    BACKENDS,
    CLUSTER_NODES,
    CLUSTER_NODES6,
    VIPS,
    CONFIG,
    CONFIG6,
    HANDOFF,
    COUNTERS,
    SERVICE_STATS,
    BACKEND_STATS,
    CONTROL_STATE,
    FILTER_MAPS[0],
    FILTER_MAPS[1],
    FILTER_MAPS[2],
    FILTER_MAPS[3],
    FILTER_MAPS[4],
    FILTER_MAPS[5],
    FILTER_MAPS[6],
    FILTER_MAPS[7],
    FILTER_MAPS[8],
    NAT_FLOWS,
];

/// Pinned maps a daemon may adopt the others without: pins of an older
/// daemon that did not have them are completed with empty ones (the
/// forwarding state, which is in the other maps, carries over).
pub const ADOPT_WITHOUT: [&str; 21] = [
    CONTROL_STATE,
    // Rewritten from `buckets` on adoption (an older daemon had none).
    BUCKET_FIRST,
    IPV6_BALANCER,
    // IPv6: an older daemon had no IPv6 services.
    SERVICES6,
    VIPS6,
    CONTROL_VIP6,
    // IPv6 cluster network: an older daemon had an IPv4 one.
    CLUSTER_NODES6,
    CONTROL_DIP6,
    CONFIG6,
    // Made with a new mark (pins of a version that marked frames in XDP
    // metadata instead).
    HANDOFF,
    // Counters restart from zero when an upgrade adds some.
    COUNTERS,
    // Resized by copying (Dataplane::load_pinned_sized); an older daemon
    // had none.
    NAT_FLOWS,
    FILTER_MAPS[0],
    FILTER_MAPS[1],
    FILTER_MAPS[2],
    FILTER_MAPS[3],
    FILTER_MAPS[4],
    FILTER_MAPS[5],
    FILTER_MAPS[6],
    FILTER_MAPS[7],
    FILTER_MAPS[8],
];

/// Pinned maps sized with the pool: adopted when at least as large as this
/// daemon wants (their size then stays), grown (copied into the prefix of a
/// larger map) when smaller. `bucket_first` follows them (a quarter of the
/// pool's elements) but is optional: one that is missing or of another size
/// is made anew and filled from `buckets`.
pub const POOL_MAPS: [&str; 2] = [BUCKETS, BUCKET_MOVED];

/// Maps of a running daemon, opened from their pins (for `nilb stats`,
/// `nilb tables` and `nilb lookup --live`).
pub struct PinnedMaps {
    /// `services`.
    pub services: libbpf_rs::MapHandle,
    /// `services6` (None: pins of a daemon without IPv6).
    pub services6: Option<libbpf_rs::MapHandle>,
    /// `buckets` (the pool).
    pub buckets: libbpf_rs::MapHandle,
    /// `bucket_first` (None: pins of a daemon without it).
    pub bucket_first: Option<libbpf_rs::MapHandle>,
    /// `bucket_moved`.
    pub bucket_moved: libbpf_rs::MapHandle,
    /// `backends`.
    pub backends: libbpf_rs::MapHandle,
    /// `counters`.
    pub counters: libbpf_rs::MapHandle,
    /// `service_stats`.
    pub service_stats: libbpf_rs::MapHandle,
    /// `backend_stats`.
    pub backend_stats: libbpf_rs::MapHandle,
    /// `nilb_config`.
    pub config: libbpf_rs::MapHandle,
    /// `config6` (None: pins of a daemon without an IPv6 cluster network).
    pub config6: Option<libbpf_rs::MapHandle>,
    /// The edge filters' maps, by name ([`FILTER_MAPS`]).
    pub filter: BTreeMap<&'static str, libbpf_rs::MapHandle>,
    /// The pin directory.
    pub dir: std::path::PathBuf,
}

impl PinnedMaps {
    /// Open the pins under `dir`.
    pub fn open(dir: &Path) -> Result<Self> {
        let open = |name: &str| {
            let p = dir.join(name);
            libbpf_rs::MapHandle::from_pinned_path(&p).with_context(|| {
                format!(
                    "opening {} (is `nilb run` running with --pin-dir {}?)",
                    p.display(),
                    dir.display()
                )
            })
        };
        let buckets = open(BUCKETS)?;
        // Only one of this pool's shape (a pin left by another version may
        // have another size).
        let bucket_first = libbpf_rs::MapHandle::from_pinned_path(dir.join(BUCKET_FIRST))
            .ok()
            .filter(|m| {
                m.value_size() == 8
                    && m.max_entries() == buckets.max_entries() / abi::FIRST_HOPS_PER_ELEM
            });
        Ok(PinnedMaps {
            services: open(SERVICES)?,
            services6: libbpf_rs::MapHandle::from_pinned_path(dir.join(SERVICES6)).ok(),
            buckets,
            bucket_first,
            bucket_moved: open(BUCKET_MOVED)?,
            backends: open(BACKENDS)?,
            counters: open(COUNTERS)?,
            service_stats: open(SERVICE_STATS)?,
            backend_stats: open(BACKEND_STATS)?,
            config: open(CONFIG)?,
            config6: libbpf_rs::MapHandle::from_pinned_path(dir.join(CONFIG6)).ok(),
            filter: FILTER_MAPS
                .iter()
                .map(|n| Ok((*n, open(n)?)))
                .collect::<Result<_>>()?,
            dir: dir.to_path_buf(),
        })
    }

    /// A filter map by name (one of [`FILTER_MAPS`]).
    pub fn filter_map(&self, name: &str) -> &libbpf_rs::MapHandle {
        &self.filter[name]
    }

    /// `nilb_config.flags` as the daemon wrote them.
    pub fn config_flags(&self) -> Result<u32> {
        let v = self
            .config
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .context("nilb_config is empty")?;
        let c: abi::sys::nilb_config = abi::read_struct(&v)?;
        Ok(c.flags)
    }

    /// The maps a live filter lookup reads.
    pub fn live_filter_maps(&self) -> super::filters::LiveFilterMaps<'_> {
        super::filters::LiveFilterMaps {
            flat: self.filter_map("filter_flat"),
            long: self.filter_map("filter_long"),
            long_small: self.filter_map("filter_long_small"),
            trie: self.filter_map("filter_trie"),
            scopes: self.filter_map("filter_scopes"),
            verdicts: self.filter_map("filter_verdicts"),
        }
    }

    /// Node settings the daemon wrote.
    pub fn settings(&self) -> Result<NodeSettings> {
        let v = self
            .config
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .context("nilb_config is empty")?;
        let c: abi::sys::nilb_config = abi::read_struct(&v)?;
        let c6: Option<abi::sys::nilb_config6> = match &self.config6 {
            Some(m) => match m.lookup(&0u32.to_ne_bytes(), MapFlags::ANY)? {
                Some(b) => Some(abi::read_struct(&b)?),
                None => None,
            },
            None => None,
        };
        let node = abi::node_of(&c, c6.as_ref())
            .context("nilb_config names an IPv6 cluster network but config6 is missing")?;
        Ok(NodeSettings {
            node,
            hash_seed: c.hash_seed,
            gue_port: u16::from_be(c.gue_port),
            unknown_flow: if c.flags & abi::sys::nilb_config_flags::NILB_F_UNKNOWN_FLOW_RST != 0 {
                UnknownFlow::Rst
            } else if c.flags & abi::sys::nilb_config_flags::NILB_F_UNKNOWN_FLOW_LOCAL != 0 {
                UnknownFlow::Local
            } else {
                UnknownFlow::Drop
            },
            icmp_too_big_rate: c.icmp_too_big_rate,
        })
    }

    fn pool_maps(&self) -> PoolMaps<'_> {
        PoolMaps {
            services: &self.services,
            services6: self.services6.as_ref().map(|m| m as &dyn MapCore),
            buckets: &self.buckets,
            first: self.bucket_first.as_ref().map(|m| m as &dyn MapCore),
            moved: &self.bucket_moved,
            backends: &self.backends,
            // Read only: these pins are never written through this view.
            cache_gen: None,
        }
    }

    /// Every installed service's table, raw, in key order, and the address
    /// of every backend slot (index = slot).
    pub fn raw_tables(&self) -> Result<(Vec<RawTable>, Vec<Option<IpAddr>>)> {
        let (tables, backends, errors) = read_raw(&self.pool_maps(), None)?;
        if let Some(e) = errors.first() {
            anyhow::bail!("the pinned tables are inconsistent: {e}");
        }
        Ok((tables, backends))
    }

    /// The installed table of `key` (None: not installed), read from the
    /// pool.
    pub fn table(&self, key: &ServiceKey) -> Result<Option<LiveTable>> {
        let (tables, backends, errors) = read_raw(&self.pool_maps(), Some(key))?;
        if let Some(e) = errors.first() {
            anyhow::bail!("the pinned table is inconsistent: {e}");
        }
        Ok(tables.first().map(|t| LiveTable::from_raw(t, &backends)))
    }

    /// Installed services with their buckets, read from the pool.
    pub fn tables(&self) -> Result<Vec<(ServiceKey, LiveTable)>> {
        let (tables, backends) = self.raw_tables()?;
        Ok(tables
            .iter()
            .map(|t| (t.key, LiveTable::from_raw(t, &backends)))
            .collect())
    }
}

/// The size (buckets) of the pool pinned under `dir` and every installed
/// service's region of it, in key order, read from the pins of `buckets`,
/// `services` and `services6` alone (no bucket is read; pins of an older
/// version without other maps do). A region that does not lie within the
/// pool is left out (adoption installs that table anew).
/// Errors: `buckets` or `services` is not pinned there, or a map read
/// fails.
pub fn pinned_regions(dir: &Path) -> Result<(u32, Vec<(ServiceKey, Region)>)> {
    let open = |name: &str| {
        let p = dir.join(name);
        libbpf_rs::MapHandle::from_pinned_path(&p)
            .with_context(|| format!("opening {}", p.display()))
    };
    let (buckets, services) = (open(BUCKETS)?, open(SERVICES)?);
    let services6 = open(SERVICES6).ok();
    let pool = buckets.max_entries();
    let (found, _) = read_regions(
        &services,
        services6.as_ref().map(|m| m as &dyn MapCore),
        pool,
        None,
    )?;
    Ok((pool, found.into_iter().map(|(k, _, r)| (k, r)).collect()))
}

/// Every used slot of a `control_state` map with its record.
/// `vip6`, `dip6`: `control_vip6` and `control_dip6`, if the maps have
/// them.
pub(super) fn read_control_state(
    map: &dyn MapCore,
    vip6: Option<&dyn MapCore>,
    dip6: Option<&dyn MapCore>,
) -> Result<BTreeMap<u32, ControlRecord>> {
    let mut out = BTreeMap::new();
    for slot in 0..crate::limits::MAX_BACKEND_SLOTS {
        let Some(v) = map
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("reading control_state slot {slot}"))?
        else {
            continue;
        };
        let v6 = match vip6 {
            Some(m) => m
                .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
                .with_context(|| format!("reading control_vip6 slot {slot}"))?,
            None => None,
        };
        let d6 = match dip6 {
            Some(m) => m
                .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
                .with_context(|| format!("reading control_dip6 slot {slot}"))?,
            None => None,
        };
        if let Some(r) = abi::parse_control_state(&v, v6.as_deref(), d6.as_deref())? {
            out.insert(slot, r);
        }
    }
    Ok(out)
}

/// A service table as installed in the data plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTable {
    /// Index into `service_stats`.
    pub service_index: u32,
    /// Per bucket, in index order: the first hop and the previous owners,
    /// newest first (a slot without an address is left out).
    pub chains: Vec<(Option<IpAddr>, Vec<IpAddr>)>,
    /// When each bucket's first hop last changed, in milliseconds with
    /// seconds precision, as the daemon stored it: boot-time, or Unix time
    /// if an older daemon wrote it ([`crate::clock::adopted_move_time`]
    /// tells them apart).
    pub moved_at: Vec<Option<u64>>,
    /// Backend slot of every hop the buckets name (first hops and previous
    /// owners).
    pub slots: BTreeMap<IpAddr, u32>,
}

impl LiveTable {
    /// The table of `raw`, its slots resolved with `backends` (index =
    /// slot).
    pub fn from_raw(raw: &RawTable, backends: &[Option<IpAddr>]) -> LiveTable {
        // A first hop's slot wins over a previous owner's (a chain the
        // control plane did not write may name another slot of the address).
        let mut slots = BTreeMap::new();
        let mut addr = |s: u16, first: bool| {
            let a = backends.get(s as usize).copied().flatten();
            if let Some(a) = a {
                if first {
                    slots.insert(a, s as u32);
                } else {
                    slots.entry(a).or_insert(s as u32);
                }
            }
            a
        };
        let chains: Vec<_> = raw
            .buckets
            .iter()
            .map(|h| {
                let first = if h[0] != 0 { addr(h[0], true) } else { None };
                let previous = h[1..]
                    .iter()
                    .take_while(|&&s| s != 0)
                    .filter_map(|&s| addr(s, false))
                    .collect();
                (first, previous)
            })
            .collect();
        LiveTable {
            service_index: raw.service.service_index,
            chains,
            moved_at: raw
                .moved_s
                .iter()
                .map(|&s| (s != 0).then_some(s as u64 * 1000))
                .collect(),
            slots,
        }
    }

    /// The chains of `t` as [`LiveTable::chains`] holds them (what a table
    /// installed from `t` reads back as, slots permitting).
    pub fn chains_of(t: &crate::table::Table) -> Vec<(Option<IpAddr>, Vec<IpAddr>)> {
        (0..t.size() as usize)
            .map(|i| (t.first(i), t.previous(i).collect()))
            .collect()
    }

    /// Buckets.
    pub fn size(&self) -> usize {
        self.chains.len()
    }

    /// The table as the data plane installs it (hops and move times).
    pub fn to_chains(&self) -> Chains {
        Chains {
            chains: self.chains.clone(),
            moved_at: self.moved_at.clone(),
        }
    }
}
