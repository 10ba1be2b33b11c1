//! The seam between control plane and data plane: [`DataplaneOps`] is
//! everything [`crate::control::ControlPlane::apply`] needs from the maps,
//! and nothing else. [`super::Dataplane`] implements it on the BPF maps; the
//! control plane's unit tests implement it with a recording fake, so the
//! ordering rules of an apply are tested without root or BPF (the way kglb
//! tests its control plane against a mock data-plane client).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use anyhow::Result;

use crate::filters::FilterSet;
use crate::table::Table;
use crate::types::ServiceKey;

/// Per-node settings of the `nilb_config` map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSettings {
    /// This node's address: outer source of what it sends, "me" for GUE.
    pub node: Ipv4Addr,
    /// Cluster hash seed.
    pub hash_seed: u32,
    /// GUE UDP port, host order.
    pub gue_port: u16,
    /// `cluster.unknown_flow: local`.
    pub unknown_flow_local: bool,
}

/// One table to install: service key, stats index, buckets and the
/// `backend_stats` slot of each first hop.
pub struct TableInstall<'a> {
    /// The service.
    pub key: ServiceKey,
    /// Its index in `service_stats`.
    pub index: u32,
    /// Its buckets.
    pub table: &'a Table,
    /// Counter slot of a first hop.
    pub slot_of: &'a dyn Fn(Ipv4Addr) -> u32,
}

/// What the control plane writes into the data plane's maps (and the two
/// address sets it reads back to diff against). Every method either does
/// all of its work or returns an error; [`DataplaneOps::install_tables`] is
/// the exception, see there.
pub trait DataplaneOps {
    /// Write this node's settings (`nilb_config`).
    fn set_settings(&mut self, settings: &NodeSettings) -> Result<()>;

    /// VIPs the `vips` map holds.
    fn vips(&self) -> &BTreeSet<Ipv4Addr>;

    /// Make the `vips` map equal `want`.
    fn set_vips(&mut self, want: &BTreeSet<Ipv4Addr>) -> Result<()>;

    /// Addresses the `cluster_nodes` map holds (allowed to send GUE).
    fn cluster_nodes(&self) -> &BTreeSet<Ipv4Addr>;

    /// Make the `cluster_nodes` map equal `want`.
    fn set_cluster_nodes(&mut self, want: &BTreeSet<Ipv4Addr>) -> Result<()>;

    /// Zero the `backend_stats` counters of `slot` (before a new
    /// (service, backend) pair uses it).
    fn zero_backend_stats(&mut self, slot: u32) -> Result<()>;

    /// Zero the `service_stats` counters of `index` (before a new service
    /// uses it).
    fn zero_service_stats(&mut self, index: u32) -> Result<()>;

    /// Services the `services` map holds.
    fn installed_services(&self) -> Result<BTreeSet<ServiceKey>>;

    /// Install several tables in one batch; each swap is atomic on its own.
    /// On an error a prefix of `items` may already be installed (the kernel
    /// stops a batch update at the first failing element).
    fn install_tables(&mut self, items: &[TableInstall<'_>]) -> Result<()>;

    /// Remove a service from the `services` map (its packets then pass).
    fn remove_service(&mut self, key: &ServiceKey) -> Result<()>;

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
