//! The maps a daemon pins so that they outlive it: the one list of their
//! names (loading, adoption, `nilb cleanup` and unpinning all use it), and
//! reading them from another process (`nilb stats`, `nilb lookup --live`)
//! or from an adopted data plane ([`LiveTable`]). `hop_cache` is not pinned:
//! a restarted daemon starts with an empty cache.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::abi;
use super::ops::{ControlRecord, NodeSettings};
use crate::table::Bucket;
use crate::types::{ServiceKey, UnknownFlow};

/// `services`: HASH_OF_MAPS from (VIP, port, protocol) to the service's
/// bucket array.
pub const SERVICES: &str = "services";
/// `cluster_nodes`: addresses allowed to send GUE.
pub const CLUSTER_NODES: &str = "cluster_nodes";
/// `vips`: the VIP addresses.
pub const VIPS: &str = "vips";
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

/// Names of the maps pinned under the pin directory, as the BPF object
/// names them.
pub const PINNED_MAPS: [&str; 17] = [
    SERVICES,
    CLUSTER_NODES,
    VIPS,
    CONFIG,
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
];

/// Pinned maps a daemon may adopt the others without: pins of an older
/// daemon that did not have them are completed with empty ones (the
/// forwarding state, which is in the other maps, carries over).
pub const ADOPT_WITHOUT: [&str; 10] = [
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
];

/// Maps of a running daemon, opened from their pins (for `nilb stats` and
/// `nilb lookup --live`).
pub struct PinnedMaps {
    /// `services` (outer table).
    pub services: libbpf_rs::MapHandle,
    /// `counters`.
    pub counters: libbpf_rs::MapHandle,
    /// `service_stats`.
    pub service_stats: libbpf_rs::MapHandle,
    /// `backend_stats`.
    pub backend_stats: libbpf_rs::MapHandle,
    /// `nilb_config`.
    pub config: libbpf_rs::MapHandle,
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
        Ok(PinnedMaps {
            services: open(SERVICES)?,
            counters: open(COUNTERS)?,
            service_stats: open(SERVICE_STATS)?,
            backend_stats: open(BACKEND_STATS)?,
            config: open(CONFIG)?,
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
        Ok(NodeSettings {
            node: abi::addr_from_be(c.node_addr),
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

    /// Installed services with their header and buckets, read from the
    /// live inner arrays.
    pub fn tables(&self) -> Result<Vec<(ServiceKey, LiveTable)>> {
        read_tables(&self.services)
    }
}

/// Every service in a `services` map with its inner table.
pub(super) fn read_tables(services: &dyn MapCore) -> Result<Vec<(ServiceKey, LiveTable)>> {
    let mut out = Vec::new();
    for key in services.keys() {
        let Some(service) = abi::parse_service_key(&key)? else {
            continue;
        };
        let Some(id) = services.lookup(&key, MapFlags::ANY)? else {
            continue;
        };
        let id = u32::from_ne_bytes(id[..4].try_into().expect("4-byte map id"));
        let inner = libbpf_rs::MapHandle::from_map_id(id)
            .with_context(|| format!("opening the table of {service} (map id {id})"))?;
        let (hdr, buckets) = abi::read_inner_table(&inner)?;
        let mut slots = BTreeMap::new();
        for b in &buckets {
            if b.first_hop != 0 {
                slots.insert(abi::addr_from_be(b.first_hop), b.first_slot);
            }
        }
        out.push((
            service,
            LiveTable {
                service_index: hdr.service_index,
                buckets: buckets
                    .iter()
                    .map(|b| {
                        Bucket::new(
                            (b.first_hop != 0).then(|| abi::addr_from_be(b.first_hop)),
                            (b.second_hop != 0).then(|| abi::addr_from_be(b.second_hop)),
                        )
                    })
                    .collect(),
                moved_at: buckets
                    .iter()
                    .map(|b| (b.moved_at_s != 0).then(|| b.moved_at_s as u64 * 1000))
                    .collect(),
                slots,
            },
        ));
    }
    out.sort_by_key(|(k, _)| *k);
    Ok(out)
}

/// Every used slot of a `control_state` map with its record.
pub(super) fn read_control_state(map: &dyn MapCore) -> Result<BTreeMap<u32, ControlRecord>> {
    let mut out = BTreeMap::new();
    for slot in 0..crate::limits::MAX_BACKEND_SLOTS {
        let Some(v) = map
            .lookup(&slot.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("reading control_state slot {slot}"))?
        else {
            continue;
        };
        if let Some(r) = abi::parse_control_state(&v)? {
            out.insert(slot, r);
        }
    }
    Ok(out)
}

/// A service table as installed in the data plane.
#[derive(Clone, Debug)]
pub struct LiveTable {
    /// Index into `service_stats`.
    pub service_index: u32,
    /// Buckets in index order.
    pub buckets: Vec<Bucket>,
    /// When each bucket's first hop last changed, in milliseconds with
    /// seconds precision, as the daemon stored it: boot-time, or Unix time
    /// if an older daemon wrote it ([`crate::clock::adopted_move_time`]
    /// tells them apart).
    pub moved_at: Vec<Option<u64>>,
    /// `backend_stats` slot of each first hop.
    pub slots: BTreeMap<Ipv4Addr, u32>,
}
