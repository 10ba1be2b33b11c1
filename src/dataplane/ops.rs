//! The seam between control plane and data plane: [`DataplaneOps`] is
//! everything [`crate::control::ControlPlane::apply`] needs from the maps,
//! and nothing else. [`super::Dataplane`] implements it on the BPF maps; the
//! control plane's unit tests implement it with a recording fake, so the
//! ordering rules of an apply are tested without root or BPF (the way kglb
//! tests its control plane against a mock data-plane client).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use anyhow::Result;

use crate::config::QuicLb;
use crate::filters::FilterSet;
use crate::quic_lb::ServerId;
use crate::table::Table;
use crate::types::{ServiceKey, UnknownFlow};

/// Per-node settings of the `nilb_config` map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSettings {
    /// This node's address: outer source of what it sends, "me" for GUE.
    pub node: IpAddr,
    /// Cluster hash seed.
    pub hash_seed: u32,
    /// GUE UDP port, host order.
    pub gue_port: u16,
    /// `cluster.unknown_flow`.
    pub unknown_flow: UnknownFlow,
    /// `cluster.icmp_too_big_rate`: ICMP "fragmentation needed" replies
    /// per second per CPU.
    pub icmp_too_big_rate: u16,
}

/// Health verdict as kept in a [`ControlRecord`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordHealth {
    /// No verdict yet.
    #[default]
    Unknown,
    /// Passing.
    Up,
    /// Failing.
    Down,
}

/// Administrative state as kept in a [`ControlRecord`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordAdmin {
    /// `state: active`.
    #[default]
    Active,
    /// `state: drained`.
    Drained,
    /// `state: offline`.
    Offline,
    /// Gone from the file, draining out (`removing`).
    Removing,
}

/// What the control plane owes one (service, backend) pair across a
/// restart, kept in the pinned `control_state` map under the pair's counter
/// slot (`struct nilb_control_state`; the BPF programs never read it).
/// Times are boot-time milliseconds ([`crate::clock`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlRecord {
    /// The service.
    pub service: ServiceKey,
    /// The backend.
    pub dip: IpAddr,
    /// Its configured weight.
    pub weight: u32,
    /// Its administrative state.
    pub admin: RecordAdmin,
    /// Its health verdict.
    pub health: RecordHealth,
    /// The verdict of its encapsulated check (`encap_check`).
    pub encap: RecordHealth,
    /// While unknown: whether the first result decides (else `rise_count`
    /// passes are needed).
    pub first_result_decides: bool,
    /// Up/down transitions so far.
    pub transitions: u64,
    /// Since when the verdict holds.
    pub since_ms: u64,
    /// When it left the file (removing).
    pub removed_at_ms: Option<u64>,
    /// Since when a removing backend owns no bucket.
    pub empty_since_ms: Option<u64>,
}

/// One table to install: service key, stats index, buckets, the backend
/// slot of each hop and which buckets changed.
pub struct TableInstall<'a> {
    /// The service.
    pub key: ServiceKey,
    /// Its index in `service_stats`.
    pub index: u32,
    /// NAT mode: the port its backends listen on (host order); None: DSR.
    /// Written into its `services` value with the table.
    pub nat_port: Option<u16>,
    /// Its buckets.
    pub table: &'a Table,
    /// Backend slot of a hop (first hop or previous owner): its address in
    /// `backends`, its `backend_stats` and `hop_cache` entries. Never 0;
    /// one backend per slot.
    pub slot_of: &'a dyn Fn(IpAddr) -> u32,
    /// Indexes of the buckets that changed (hops or move time) since this
    /// service's last install, ascending; None: all of them. Only these are
    /// written when the table keeps its size.
    pub changed: Option<&'a [u32]>,
}

/// A service with `quic_lb` as the XDP balancer routes it (docs/design.md
/// "Balancer (XDP)"): its decoder parameters and key (`quic_config`,
/// `quic_crypto`) and the backends its server IDs reach (`quic_servers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicRoute {
    /// The service (its `services` value gets the QUIC-LB flag).
    pub key: ServiceKey,
    /// The service's index (its table header's, as in `service_stats`).
    pub index: u32,
    /// Its `quic_lb` configuration (parameters and key; `server_ids` is
    /// not read: `servers` says where each ID goes).
    pub lb: QuicLb,
    /// Server ID -> (backend, its `backend_stats` slot), for the backends
    /// that may receive packets now.
    pub servers: BTreeMap<ServerId, (IpAddr, u32)>,
}

/// What NAT mode needs in the maps (docs/design.md "NAT mode"), written
/// by [`DataplaneOps::set_nat`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatPlan {
    /// Each NAT-mode service and the port its backends listen on (host
    /// order): its `services` value's NAT flag and port, and `nat_ports`.
    pub services: BTreeMap<ServiceKey, u16>,
    /// Service addresses that are a node's own address (`vips` flag
    /// `NILB_ADDR_F_NODE`: what belongs to no service passes).
    pub node_addresses: BTreeSet<Ipv4Addr>,
    /// Service addresses whose every service is in NAT mode (`vips` flag
    /// `NILB_ADDR_F_NAT_ONLY`: no backend holds them, so a backend
    /// delivers only NAT services' packets to them, translated).
    pub nat_only: BTreeSet<Ipv4Addr>,
}

impl NatPlan {
    /// The `vips` flags of `addr` under this plan.
    pub fn vip_flags(&self, addr: Ipv4Addr) -> u32 {
        use crate::abi_sys::nilb_addr_flags as f;
        let mut flags = 0;
        if self.node_addresses.contains(&addr) {
            flags |= f::NILB_ADDR_F_NODE;
        }
        if self.nat_only.contains(&addr) {
            flags |= f::NILB_ADDR_F_NAT_ONLY;
        }
        flags
    }
}

/// What the control plane writes into the data plane's maps (and the two
/// address sets it reads back to diff against). Every method either does
/// all of its work or returns an error; [`DataplaneOps::install_tables`] is
/// the exception, see there.
pub trait DataplaneOps {
    /// Write this node's settings (`nilb_config`).
    fn set_settings(&mut self, settings: &NodeSettings) -> Result<()>;

    /// VIPs the `vips` (IPv4) and `vips6` (IPv6) maps hold.
    fn vips(&self) -> &BTreeSet<IpAddr>;

    /// Make the `vips` and `vips6` maps equal `want`.
    fn set_vips(&mut self, want: &BTreeSet<IpAddr>) -> Result<()>;

    /// Addresses the `cluster_nodes` map holds (allowed to send GUE).
    fn cluster_nodes(&self) -> &BTreeSet<IpAddr>;

    /// Make the `cluster_nodes` map equal `want`.
    fn set_cluster_nodes(&mut self, want: &BTreeSet<IpAddr>) -> Result<()>;

    /// Zero the `backend_stats` counters of `slot` (before a new
    /// (service, backend) pair uses it).
    fn zero_backend_stats(&mut self, slot: u32) -> Result<()>;

    /// Zero the `service_stats` counters of `index` (before a new service
    /// uses it).
    fn zero_service_stats(&mut self, index: u32) -> Result<()>;

    /// Services the `services` map holds.
    fn installed_services(&self) -> Result<BTreeSet<ServiceKey>>;

    /// Install several tables in one batch; each bucket changes at once
    /// (its whole chain), each new region with one `services` update. A
    /// batch that does not fit the bucket pool fails before anything is
    /// written; on another error a prefix of `items` may already be
    /// installed.
    fn install_tables(&mut self, items: &[TableInstall<'_>]) -> Result<()>;

    /// Remove a service from the `services` map (its packets then pass).
    fn remove_service(&mut self, key: &ServiceKey) -> Result<()>;

    /// Make the NAT-mode state what `plan` says: the NAT flag and port of
    /// every installed service's `services` value, `nat_ports`, the
    /// node-address flag of `vips` entries (also for entries
    /// [`Self::set_vips`] adds later) and the node's NAT flag in
    /// `nilb_config`. Writes only what differs from the last call.
    fn set_nat(&mut self, plan: &NatPlan) -> Result<()>;

    /// Make the QUIC-LB maps route exactly `routes` (one per service with
    /// `quic_lb`; every other service index gets no QUIC-LB routing).
    /// Writes only what differs from the last call.
    fn set_quic(&mut self, routes: &[QuicRoute]) -> Result<()>;

    /// Write these slots of the `control_state` map (None: the slot is
    /// unused, its record is cleared), in one batch.
    fn write_control_state(&mut self, records: &[(u32, Option<ControlRecord>)]) -> Result<()>;

    /// Whether this data plane's XDP balancer is attached to its interface
    /// now (asked of the kernel, not remembered).
    fn xdp_attached(&self) -> Result<bool>;

    /// Attach (`true`) or detach (`false`) the XDP balancer on the
    /// interface the data plane was given; attaching refuses to replace
    /// another program.
    fn set_xdp(&mut self, attached: bool) -> Result<()>;
    /// Make `set` the live edge filters (docs/design.md "Edge filters"):
    /// build the generation that is not live, then flip to it in one
    /// write, so that no packet sees an empty or half-built list;
    /// `index_of` gives each service's stats index (its filter scope). A
    /// set equal to the installed one (same digest and indexes) is not
    /// rebuilt. On an error before the flip the live filters stay.
    fn install_filters(
        &mut self,
        set: &FilterSet,
        index_of: &dyn Fn(&ServiceKey) -> Option<u32>,
    ) -> Result<()>;
}
