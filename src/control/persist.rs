//! What survives a restart (docs/design.md "Restarts and adoption"): the
//! `control_state` records the running state writes ([`ControlPlane::records`])
//! and the state a restarted daemon rebuilds from the pinned maps
//! ([`ControlPlane::adopt`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{
    fresh_health, targets, BackendRuntime, ControlPlane, Plan, ServiceState, OVERFLOW_SLOT,
};
use crate::config::{Backend, BackendState, Checker, Config};
use crate::dataplane::{ControlRecord, LiveTable, RecordAdmin, RecordHealth};
use crate::health::{Health, HealthState};
use crate::limits;
use crate::table::{Bucket, Table};
use crate::types::ServiceKey;

fn record_health(h: Health) -> RecordHealth {
    match h {
        Health::Unknown => RecordHealth::Unknown,
        Health::Up => RecordHealth::Up,
        Health::Down => RecordHealth::Down,
    }
}

fn health_of(h: RecordHealth) -> Health {
    match h {
        RecordHealth::Unknown => Health::Unknown,
        RecordHealth::Up => Health::Up,
        RecordHealth::Down => Health::Down,
    }
}

impl ControlPlane {
    /// The `control_state` record of every backend that has a slot of its
    /// own, by slot.
    pub fn records(&self) -> BTreeMap<u32, ControlRecord> {
        let mut out = BTreeMap::new();
        for key in self.services.keys() {
            out.extend(self.service_records(key));
        }
        out
    }

    /// The `control_state` records of one service's backends, by slot.
    pub(super) fn service_records(&self, key: &ServiceKey) -> BTreeMap<u32, ControlRecord> {
        let mut out = BTreeMap::new();
        if let Some(st) = self.services.get(key) {
            for b in st.backends.values().filter(|b| b.slot != OVERFLOW_SLOT) {
                let admin = match (b.removed_at_ms, b.config.state) {
                    (Some(_), _) => RecordAdmin::Removing,
                    (None, BackendState::Active) => RecordAdmin::Active,
                    (None, BackendState::Drained) => RecordAdmin::Drained,
                    (None, BackendState::Offline) => RecordAdmin::Offline,
                };
                out.insert(
                    b.slot,
                    ControlRecord {
                        service: *key,
                        dip: b.config.dip,
                        weight: b.config.weight,
                        admin,
                        health: record_health(b.health.health),
                        encap: record_health(b.encap.health),
                        first_result_decides: b.health.first_result_decides,
                        transitions: b.health.transitions,
                        since_ms: b.health.since_ms,
                        removed_at_ms: b.removed_at_ms,
                        empty_since_ms: b.empty_since_ms,
                    },
                );
            }
        }
        out
    }

    /// State for `config` built on what a running data plane already holds
    /// (a restarted daemon adopting pinned maps), with the plan that
    /// installs it: every table, every record, and the counter slots and
    /// stats indexes given out here (zeroed before use).
    ///
    /// Each service keeps its buckets, their move history, its stats index
    /// and counter slots, so nothing moves that the earlier daemon would
    /// not have moved; a table whose size the file changed meanwhile is
    /// resized from there as a reload would resize it (when it grows, every
    /// flow keeps its hops). From `records` (the
    /// `control_state` map) each backend keeps its slot, health verdict,
    /// administrative state and removal times; backends still being removed
    /// (in a record, or a hop of the live table that the file no longer
    /// lists) are kept as removing, so they stay second hop until they have
    /// owned no bucket for `min_bucket_age_ms`. Without a record a backend
    /// starts unknown (first result decides) and, like every unknown
    /// backend, gains no bucket. A service whose failed backends still own
    /// buckets (a restart while leaving panic or fail-open) resumes the
    /// paced exit. Then the difference to `config` applies as a reload
    /// would. `now_ms` must be on the clock of the history (the boot-time
    /// clock, [`crate::clock`]).
    pub fn adopt(
        config: Config,
        live: Vec<(ServiceKey, LiveTable)>,
        records: BTreeMap<u32, ControlRecord>,
        now_ms: u64,
    ) -> (Self, Plan) {
        let mut cp = ControlPlane::empty(&config);
        let mut extra = Plan::default();
        let mut by_service: BTreeMap<ServiceKey, Vec<(u32, &ControlRecord)>> = BTreeMap::new();
        for (slot, r) in &records {
            by_service.entry(r.service).or_default().push((*slot, r));
        }
        let mut adopted_services = Vec::new();
        for (key, lt) in live {
            let Some(service) = config.service(&key) else {
                // Gone from the file while no daemon ran: the plan removes
                // its table after installing the others, which must not be
                // given the slots and index it still names.
                cp.orphan_slots
                    .extend(lt.slots.values().copied().filter(|s| *s < OVERFLOW_SLOT));
                cp.orphan_indexes.insert(lt.service_index);
                continue;
            };
            // A table of another size than the file now asks for is adopted
            // at its own size: the update below resizes it as a reload would
            // (`Table::resized`: the same flows keep their hops when it
            // grows), where building it anew would move most flows.
            let live_size = lt.chains.len();
            if !live_size.is_power_of_two()
                || live_size > limits::MAX_TABLE_SIZE as usize
                || lt.service_index >= limits::MAX_SERVICES
                || cp.services.values().any(|s| s.index == lt.service_index)
            {
                continue;
            }
            let check = &service.health_check.checker;
            let in_file: BTreeMap<IpAddr, &Backend> =
                service.backends.iter().map(|b| (b.dip, b)).collect();
            let mut backends = BTreeMap::new();
            // 1. Backends with a record: as the earlier daemon left them.
            for &(slot, r) in by_service.get(&key).map_or(&[][..], |v| &v[..]) {
                if slot >= OVERFLOW_SLOT
                    || backends.contains_key(&r.dip)
                    || !cp.used_slots.insert(slot)
                {
                    continue;
                }
                let state = match r.admin {
                    RecordAdmin::Drained => BackendState::Drained,
                    RecordAdmin::Offline => BackendState::Offline,
                    RecordAdmin::Active | RecordAdmin::Removing => BackendState::Active,
                };
                let cfg = Backend {
                    dip: r.dip,
                    hostname: in_file.get(&r.dip).and_then(|b| b.hostname.clone()),
                    weight: r.weight.max(1),
                    state,
                };
                let health = if *check == Checker::None {
                    HealthState::unchecked(now_ms)
                } else {
                    HealthState::restored(
                        health_of(r.health),
                        r.transitions,
                        r.since_ms.min(now_ms),
                        r.first_result_decides,
                    )
                };
                let mut rt = BackendRuntime::new(&cfg, health, slot);
                // A failed encapsulated check keeps the backend out as before
                // the restart; otherwise the check starts over (a verdict
                // other than down keeps nobody out).
                if r.encap == RecordHealth::Down && service.encap_check {
                    rt.encap = HealthState::restored(Health::Down, 0, r.since_ms.min(now_ms), true);
                }
                if r.admin == RecordAdmin::Removing {
                    rt.removed_at_ms = Some(r.removed_at_ms.unwrap_or(now_ms).min(now_ms));
                    rt.empty_since_ms = r.empty_since_ms.map(|t| t.min(now_ms));
                }
                backends.insert(r.dip, rt);
            }
            // 2. Backends in the file without a record: the slot the live
            // table counts their buckets into; no slot: `update` below
            // gives a fresh one.
            for b in &service.backends {
                if backends.contains_key(&b.dip) {
                    continue;
                }
                if let Some(&slot) = lt.slots.get(&b.dip) {
                    if slot < OVERFLOW_SLOT && cp.used_slots.insert(slot) {
                        backends.insert(
                            b.dip,
                            BackendRuntime::new(b, fresh_health(check, now_ms, false), slot),
                        );
                    }
                }
            }
            // 3. Hops of the live table that neither lists: backends the
            // earlier daemon was draining out (or that left the file while
            // no daemon ran). Connections may still depend on them.
            let hops: BTreeSet<IpAddr> = lt
                .chains
                .iter()
                .flat_map(|(f, p)| f.iter().chain(p.iter()).copied())
                .collect();
            for dip in hops {
                if backends.contains_key(&dip) || in_file.contains_key(&dip) {
                    continue;
                }
                let slot = match lt.slots.get(&dip) {
                    Some(&s) if s < OVERFLOW_SLOT && cp.used_slots.insert(s) => s,
                    _ => cp.take_slot(&mut extra),
                };
                let cfg = Backend {
                    dip,
                    hostname: None,
                    weight: 1,
                    state: BackendState::Active,
                };
                let mut rt = BackendRuntime::new(&cfg, HealthState::at_start(now_ms), slot);
                rt.removed_at_ms = Some(now_ms);
                backends.insert(dip, rt);
            }
            // The chains as the data plane holds them; a different
            // `previous_owners` in the file trims or widens them in the
            // update below (a step, installed like any change).
            let previous = lt.chains.iter().map(|(_, p)| p.len()).max();
            let previous = previous
                .unwrap_or(0)
                .max(config.rebalance.previous_owners as usize);
            let mut st = ServiceState::new(
                lt.service_index,
                Table::adopt(
                    lt.chains
                        .into_iter()
                        .map(|(first, previous)| Bucket::new(first, previous))
                        .collect(),
                    lt.moved_at,
                    previous,
                ),
                backends,
                now_ms,
            );
            if let Some(dw) = &service.dynamic_weight {
                st.effective_weights_from_shares(dw);
            }
            // The mode the table is in already (no "entering" spread), and
            // a paced exit if failed backends still own buckets outside it.
            st.mode = targets::choose(&st, service.panic_threshold_percent).mode;
            st.exiting = st.failed_owners_left();
            let mut as_recorded = service.clone();
            as_recorded.table_size = live_size as u32;
            as_recorded.backends = st
                .backends
                .values()
                .filter(|b| b.removed_at_ms.is_none())
                .map(|b| b.config.clone())
                .collect();
            adopted_services.push(as_recorded);
            cp.services.insert(key, std::sync::Arc::new(st));
        }
        let mut as_adopted = cp.config().clone();
        as_adopted.services = adopted_services;
        cp.set_config(as_adopted);
        let before: BTreeSet<(ServiceKey, IpAddr)> = cp
            .services
            .iter()
            .flat_map(|(k, s)| s.backends.keys().map(move |d| (*k, *d)))
            .collect();
        let adopted: BTreeSet<ServiceKey> = cp.services.keys().copied().collect();
        let update = cp.update(config, now_ms);
        // Backends that `update` added to adopted services are not new to
        // the cluster: unknown with the first result deciding, like at any
        // start, rather than reload additions that need rise_count.
        for key in adopted.iter() {
            let Some(st) = cp.state_mut(key) else {
                continue;
            };
            for (dip, b) in st.backends.iter_mut() {
                if !before.contains(&(*key, *dip)) && b.health.health == Health::Unknown {
                    b.health = HealthState::at_start(now_ms);
                }
            }
        }
        let mut plan = cp.full_plan();
        plan.fresh_slots = extra.fresh_slots;
        plan.fresh_slots.extend(update.fresh_slots);
        plan.fresh_service_indexes = update.fresh_service_indexes;
        plan.mode_changed = update.mode_changed;
        (cp, plan)
    }
}
