//! Writing a [`Plan`] into the data plane ([`ControlPlane::apply`]) and the
//! plan that writes everything ([`ControlPlane::full_plan`]).

use std::collections::BTreeMap;
use std::net::IpAddr;

use anyhow::Result;

use super::{ControlPlane, Plan, ServiceState, OVERFLOW_SLOT};
use crate::config::BackendState;
use crate::dataplane::{ControlRecord, DataplaneOps, NatPlan, QuicRoute, TableInstall};
use crate::limits;
use crate::table::Moves;
use crate::types::{ServiceKey, ServiceMode};

impl ControlPlane {
    /// Write `plan` into `dp`. Order keeps traffic safe:
    /// 1. the node settings, if the plan changed them, then the NAT-mode
    ///    state ([`Self::nat_plan`]: only what changed is written);
    /// 2. the VIP and cluster-address sets widen to the union of what the
    ///    maps hold and what the new state needs, so no table installed next
    ///    points at an address the programs would reject;
    /// 3. fresh counter slots and service indexes are zeroed, before the
    ///    tables that count into them; the edge filters are installed (a
    ///    new generation flipped in, or nothing if they are the ones
    ///    installed), before the tables of services they name;
    /// 4. changed `control_state` records are written (before the tables,
    ///    so a daemon killed in between restarts with the verdicts that the
    ///    tables follow);
    /// 5. all changed tables in one [`DataplaneOps::install_tables`] call
    ///    (one atomic swap each, one RCU wait for the batch), each with the
    ///    buckets that changed (`Plan::changed`) so the data plane can write
    ///    only those;
    /// 6. the QUIC-LB routes ([`Self::quic_routes`]) are written (only
    ///    what changed);
    /// 7. services the maps hold that this state does not know are removed
    ///    (the plan's removals; for a plan with removals or a full plan also
    ///    any left by a failed apply of another state or by an earlier
    ///    daemon whose pins were adopted);
    /// 8. the two sets narrow to what the new state needs.
    ///
    /// On an error nothing after the failing step runs and the error is
    /// returned: the sets stay widened and nothing is removed, so every
    /// table in the maps (old, new, or a prefix of a failed batch) still has
    /// its VIP and hops in the sets. The caller re-applies a full plan (of
    /// this state, or of the previous one after a failed reload); step 7
    /// then removes what the failed apply added.
    pub fn apply(&self, dp: &mut dyn DataplaneOps, node: IpAddr, plan: &Plan) -> Result<()> {
        if plan.settings_changed {
            dp.set_settings(&self.settings(node))?;
        }
        // NAT mode first: the node-address flags of VIPs added next, and
        // the NAT flag of services whose table does not change.
        let nat = self.nat_plan();
        dp.set_nat(&nat)?;
        let vips = self.config.vips();
        let nodes = self.cluster_addresses();
        let vips_before = dp.vips().clone();
        let nodes_before = dp.cluster_nodes().clone();
        dp.set_vips(&vips.union(&vips_before).copied().collect())?;
        dp.set_cluster_nodes(&nodes.union(&nodes_before).copied().collect())?;
        for &slot in &plan.fresh_slots {
            dp.zero_backend_stats(slot)?;
        }
        for &index in &plan.fresh_service_indexes {
            dp.zero_service_stats(index)?;
        }
        let index_of = |k: &ServiceKey| self.services.get(k).map(|s| s.index);
        dp.install_filters(&self.filters, &index_of)?;
        let records = self.records_of(plan);
        if !records.is_empty() {
            dp.write_control_state(&records)?;
        }
        // All changed tables in one batch (one RCU wait in the kernel).
        let installs: Vec<(ServiceKey, &ServiceState)> = plan
            .install
            .keys()
            .filter_map(|key| self.services.get(key).map(|st| (*key, &**st)))
            .collect();
        let slot_fns: Vec<Box<dyn Fn(IpAddr) -> u32 + '_>> = installs
            .iter()
            .map(|(_, st)| {
                let f = move |d: IpAddr| st.backends.get(&d).map_or(OVERFLOW_SLOT, |b| b.slot);
                Box::new(f) as Box<dyn Fn(IpAddr) -> u32 + '_>
            })
            .collect();
        let items: Vec<TableInstall<'_>> = installs
            .iter()
            .zip(&slot_fns)
            .map(|((key, st), f)| TableInstall {
                key: *key,
                index: st.index,
                nat_port: nat.services.get(key).copied(),
                table: &st.table,
                slot_of: f.as_ref(),
                changed: plan.changed.get(key).map(|c| &c[..]),
            })
            .collect();
        dp.install_tables(&items)?;
        dp.set_quic(&self.quic_routes())?;
        // Every service the maps hold that this state does not know: the
        // plan's removals, and (full plans) whatever a failed apply of
        // another state left (a failed reload restores the running state
        // with its full plan) or an earlier daemon whose pins were adopted
        // ran. Other plans remove nothing, and asking the map for every key
        // would cost one system call per service.
        if !plan.remove.is_empty() || plan.all_records {
            for key in dp.installed_services()? {
                if !self.services.contains_key(&key) {
                    dp.remove_service(&key)?;
                }
            }
        }
        dp.set_vips(&vips)?;
        dp.set_cluster_nodes(&nodes)?;
        Ok(())
    }

    /// What NAT mode needs written for this state: each `mode: nat`
    /// service's listening port, the service addresses that are a node's
    /// own (a balancer's or any backend's address), and those with NAT
    /// services only.
    pub fn nat_plan(&self) -> NatPlan {
        let mut plan = NatPlan::default();
        for s in &self.config.services {
            if s.mode == ServiceMode::Nat {
                plan.services.insert(s.key(), s.target_port);
            }
        }
        if !plan.services.is_empty() {
            let nodes = self.config.cluster_addresses();
            plan.node_addresses = self
                .config
                .vips()
                .into_iter()
                .filter_map(|v| match v {
                    std::net::IpAddr::V4(v) if nodes.contains(&v.into()) => Some(v),
                    _ => None,
                })
                .collect();
            let dsr: std::collections::BTreeSet<std::net::IpAddr> = self
                .config
                .services
                .iter()
                .filter(|s| s.mode == ServiceMode::Dsr)
                .map(|s| s.vip)
                .collect();
            plan.nat_only = plan
                .services
                .keys()
                .filter(|k| !dsr.contains(&k.vip))
                .filter_map(|k| match k.vip {
                    std::net::IpAddr::V4(v) => Some(v),
                    std::net::IpAddr::V6(_) => None,
                })
                .collect();
        }
        plan
    }

    /// The QUIC-LB routes of this state: for each service with `quic_lb`,
    /// the server ID of each backend that is not `offline`: in the file
    /// (its configured or assigned ID) or being removed (the ID it had).
    /// Health does not matter: a connection lives on its server only, so
    /// its packets go there as long as the operator lets the server
    /// receive anything (a dead server loses its connections either way).
    /// A packet whose server ID is not listed follows the bucket table.
    /// A keyed algorithm the kernel cannot run gives no route
    /// ([`ControlPlane::refused`]).
    pub fn quic_routes(&self) -> Vec<QuicRoute> {
        let mut out = Vec::new();
        for svc in &self.config.services {
            let Some(lb) = &svc.quic_lb else { continue };
            if !self.quic_lb_keyed && lb.algorithm != crate::quic_lb::Algorithm::Plaintext {
                continue;
            }
            let key = svc.key();
            let Some(st) = self.services.get(&key) else {
                continue;
            };
            let file: BTreeMap<IpAddr, _> =
                lb.server_ids.iter().map(|s| (s.dip, s.server_id)).collect();
            let mut servers = BTreeMap::new();
            for (dip, b) in &st.backends {
                if b.config.state == BackendState::Offline {
                    continue;
                }
                let sid = match (b.removed_at_ms, file.get(dip)) {
                    (None, Some(sid)) => *sid,
                    (Some(_), _) => match self.quic_left.get(&(key, *dip)) {
                        // An ID a backend of the file now carries is
                        // theirs.
                        Some(sid) if !file.values().any(|f| f == sid) => *sid,
                        _ => continue,
                    },
                    (None, None) => continue,
                };
                servers.insert(sid, (*dip, b.slot));
            }
            out.push(QuicRoute {
                key,
                index: st.index,
                lb: lb.clone(),
                servers,
            });
        }
        out
    }

    /// The `control_state` records `plan` writes: each listed slot's record
    /// from the state (None: no backend holds it), every slot for a full
    /// plan.
    fn records_of(&self, plan: &Plan) -> Vec<(u32, Option<ControlRecord>)> {
        if plan.records.is_empty() && !plan.all_records {
            return Vec::new();
        }
        let held = self.records();
        let slots: Box<dyn Iterator<Item = u32>> = if plan.all_records {
            Box::new(0..limits::MAX_BACKEND_SLOTS)
        } else {
            Box::new(plan.records.iter().copied())
        };
        slots.map(|s| (s, held.get(&s).cloned())).collect()
    }

    /// A plan that installs everything (first start, a new data plane, or
    /// repairing the maps after a failed apply): every table, the settings,
    /// every `control_state` record.
    pub fn full_plan(&self) -> Plan {
        Plan {
            install: self
                .services
                .keys()
                .map(|k| (*k, Moves::default()))
                .collect(),
            settings_changed: true,
            all_records: true,
            filters: true,
            ..Plan::default()
        }
    }
}
