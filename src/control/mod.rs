//! Control-plane state: the running configuration, one [`Table`] per service
//! (with its move history) and a stable stats index per service. Pure logic;
//! [`ControlPlane::apply`] is the one place that writes the result into a
//! [`Dataplane`].
//!
//! A configuration update builds every new table off to the side first
//! ([`ControlPlane::update`]); only then are the changes applied, service by
//! service, each with one atomic map update.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use anyhow::Result;

use crate::config::{BackendState, Config, Service, ServiceKey, UnknownFlow};
use crate::dataplane::{limits, Dataplane, NodeSettings};
use crate::table::{Moves, Table, Target};

/// One service's control state.
#[derive(Clone, Debug)]
pub struct ServiceState {
    /// Index into the per-service stats map; stable while the key exists.
    pub index: u32,
    /// Current table.
    pub table: Table,
}

/// What an update changes in the data plane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Services whose table is new or different, with the buckets moved.
    pub install: BTreeMap<ServiceKey, Moves>,
    /// Services no longer configured.
    pub remove: Vec<ServiceKey>,
    /// Node settings changed (hash seed, GUE port, unknown_flow).
    pub settings_changed: bool,
}

impl Plan {
    /// True when nothing needs to be written.
    pub fn is_empty(&self) -> bool {
        self.install.is_empty() && self.remove.is_empty() && !self.settings_changed
    }
}

/// The running configuration and its tables.
#[derive(Clone, Debug)]
pub struct ControlPlane {
    config: Config,
    services: BTreeMap<ServiceKey, ServiceState>,
}

/// First-hop targets of a service: its active backends with their weights.
pub fn targets(service: &Service) -> Vec<Target> {
    service
        .backends
        .iter()
        .filter(|b| b.state == BackendState::Active)
        .map(|b| Target {
            dip: b.dip,
            weight: b.weight,
        })
        .collect()
}

/// Backends of a service that may be a second hop (listed, not offline).
fn second_hops(service: &Service) -> BTreeSet<Ipv4Addr> {
    service
        .backends
        .iter()
        .filter(|b| b.state != BackendState::Offline)
        .map(|b| b.dip)
        .collect()
}

impl ControlPlane {
    /// Fresh tables for `config`.
    pub fn new(config: Config) -> Self {
        let mut cp = ControlPlane {
            config: Config {
                cluster: config.cluster.clone(),
                services: Vec::new(),
            },
            services: BTreeMap::new(),
        };
        cp.update(config);
        cp
    }

    /// The running configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// State of one service.
    pub fn service(&self, key: &ServiceKey) -> Option<&ServiceState> {
        self.services.get(key)
    }

    /// Switch to `config`: compute each service's new table from its
    /// current one (fewest moves, second hops kept), allocate stats indexes
    /// for new services, and return what changed. Services are identified by
    /// (VIP, port, protocol); a changed table size re-maps the old table
    /// (growing keeps every flow in place).
    pub fn update(&mut self, config: Config) -> Plan {
        let mut plan = Plan {
            settings_changed: config.cluster.hash_seed != self.config.cluster.hash_seed
                || config.cluster.gue_port != self.config.cluster.gue_port
                || config.cluster.unknown_flow != self.config.cluster.unknown_flow,
            ..Plan::default()
        };
        let keys: BTreeSet<ServiceKey> = config.services.iter().map(Service::key).collect();
        plan.remove = self
            .services
            .keys()
            .filter(|k| !keys.contains(k))
            .copied()
            .collect();
        for k in &plan.remove {
            self.services.remove(k);
        }
        let mut used: BTreeSet<u32> = self.services.values().map(|s| s.index).collect();
        for service in &config.services {
            let key = service.key();
            let allowed = second_hops(service);
            let second_ok = |d: Ipv4Addr| allowed.contains(&d);
            let tgts = targets(service);
            match self.services.get_mut(&key) {
                Some(state) => {
                    let base = if state.table.size() == service.table_size {
                        state.table.clone()
                    } else {
                        state.table.resized(service.table_size)
                    };
                    let (table, moves) = base.rebalance(&tgts, second_ok);
                    if table.buckets() != state.table.buckets() {
                        plan.install.insert(key, moves);
                        state.table = table;
                    }
                }
                None => {
                    let index = (0..limits::MAX_SERVICES)
                        .find(|i| !used.contains(i))
                        .expect("config validation bounds the number of services");
                    used.insert(index);
                    let (table, moves) =
                        Table::empty(service.table_size).rebalance(&tgts, second_ok);
                    plan.install.insert(key, moves);
                    self.services.insert(key, ServiceState { index, table });
                }
            }
        }
        self.config = config;
        plan
    }

    /// Node settings for the data plane of the node at `node`.
    pub fn settings(&self, node: Ipv4Addr) -> NodeSettings {
        NodeSettings {
            node,
            hash_seed: self.config.cluster.hash_seed,
            gue_port: self.config.cluster.gue_port,
            unknown_flow_local: self.config.cluster.unknown_flow == UnknownFlow::Local,
        }
    }

    /// Write `plan` into `dp`. Order keeps traffic safe: settings, then new
    /// VIPs and cluster members, then tables (one atomic swap each), then
    /// removals of services, VIPs and members that are gone.
    pub fn apply(&self, dp: &mut Dataplane<'_>, node: Ipv4Addr, plan: &Plan) -> Result<()> {
        dp.set_settings(&self.settings(node))?;
        let vips = self.config.vips();
        let nodes = self.config.cluster_addresses();
        let vips_before = dp.vips().clone();
        let nodes_before = dp.cluster_nodes().clone();
        dp.set_vips(&vips.union(&vips_before).copied().collect())?;
        dp.set_cluster_nodes(&nodes.union(&nodes_before).copied().collect())?;
        for key in plan.install.keys() {
            let state = &self.services[key];
            dp.install_table(key, state.index, &state.table)?;
        }
        for key in &plan.remove {
            dp.remove_service(key)?;
        }
        dp.set_vips(&vips)?;
        dp.set_cluster_nodes(&nodes)?;
        Ok(())
    }

    /// A plan that installs everything (first start, or a new data plane).
    pub fn full_plan(&self) -> Plan {
        Plan {
            install: self
                .services
                .keys()
                .map(|k| (*k, Moves::default()))
                .collect(),
            remove: Vec::new(),
            settings_changed: true,
        }
    }
}
