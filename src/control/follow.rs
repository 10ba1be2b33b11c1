//! A follower of a cluster's leader (docs/design.md "Several balancers"):
//! the published tables replace the ones this state computed
//! ([`ControlPlane::follow`]), so that every balancer installs the same
//! buckets, first hop and previous owners.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::{BackendRuntime, ControlPlane, Plan};
use crate::cluster::FollowedTable;
use crate::config::{Backend, BackendState};
use crate::health::HealthState;
use crate::table::{Moves, Table};

/// How far a published move time may lie from the one installed here and
/// still be the same move (whole seconds on the way, and two clocks).
const MOVE_TIME_SLACK_MS: u64 = 1500;
use crate::types::ServiceKey;

impl ControlPlane {
    /// Make `tables` (published by the leader) the tables of their
    /// services, and return the plan that installs the buckets that differ
    /// from this state's. A published table of a service this state does
    /// not run, or of another size than the configuration asks for (a
    /// leader still on another config), is left out: the service keeps its
    /// own table until the leader publishes one that fits. A hop this state
    /// does not know (a backend the leader is still draining out) is added
    /// as a backend being removed, with a counter slot of its own.
    /// `from_unix_ms` turns the published move times (Unix ms) into this
    /// state's clock.
    pub fn follow(
        &mut self,
        tables: &BTreeMap<ServiceKey, FollowedTable>,
        from_unix_ms: &dyn Fn(u64) -> u64,
        now_ms: u64,
    ) -> Plan {
        let mut plan = Plan::default();
        let previous = self.config.rebalance.previous_owners as usize;
        for (key, ft) in tables {
            let Some(size) = self.service_config(key).map(|s| s.table_size) else {
                continue;
            };
            if ft.buckets.len() != size as usize || !self.services.contains_key(key) {
                continue;
            }
            // Move times travel as whole Unix seconds: a bucket whose hops
            // are the ones installed here keeps its own move time when the
            // published one is the same to within that rounding (a leader
            // that follows its own last publication changes nothing).
            let table = {
                let own = &self.services[key].table;
                let moved: Vec<Option<u64>> = ft
                    .moved_unix_ms
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let published = m.map(from_unix_ms);
                        let local = own.moved_at(i);
                        match (published, local) {
                            (Some(p), Some(l))
                                if p.abs_diff(l) <= MOVE_TIME_SLACK_MS
                                    && i < own.size() as usize
                                    && own.bucket(i) == ft.buckets[i] =>
                            {
                                Some(l)
                            }
                            _ => published,
                        }
                    })
                    .collect();
                Table::adopt(ft.buckets.clone(), moved, previous.max(ft.previous))
            };
            let unknown: Vec<IpAddr> = table
                .hops()
                .into_iter()
                .filter(|d| !self.services[key].backends.contains_key(d))
                .collect();
            for dip in unknown {
                let slot = self.take_slot(&mut plan);
                let cfg = Backend {
                    dip,
                    hostname: None,
                    weight: 1,
                    state: BackendState::Active,
                };
                let mut rt = BackendRuntime::new(&cfg, HealthState::at_start(now_ms), slot);
                rt.removed_at_ms = Some(now_ms);
                let state = self.state_mut(key).expect("service");
                state.backends.insert(dip, rt);
                plan.records.insert(slot);
            }
            let state = self.state_mut(key).expect("service");
            let changed = table.changed_from(&state.table);
            if changed.is_empty() && table.previous_owners() == state.table.previous_owners() {
                continue;
            }
            state.table = Arc::new(table);
            state.changed_at_ms = now_ms;
            plan.add_install(*key, Moves::default(), Some(changed));
        }
        plan
    }
}
