//! Control-plane state: the running configuration, and per service its
//! [`Table`], its backends' health and administrative state, and the pacing
//! of voluntary table changes. Pure logic driven by events with the caller's
//! clock (ms): [`ControlPlane::update`] (reload), [`ControlPlane::observe`]
//! (a health-check result) and [`ControlPlane::tick`] (time passes). Each
//! returns a [`Plan`]; [`ControlPlane::apply`] is the one place that writes a
//! plan into the data plane, through [`DataplaneOps`] (the BPF maps in the
//! daemon, a recording fake in the unit tests).
//!
//! Rules (docs/design.md "Control plane"; docs/config.md "Backend states" and
//! "Reload (SIGHUP)"):
//! - first hops are the active, healthy backends, in proportion to weight;
//! - a health failure or `offline` moves buckets away at once (forced); a
//!   failed backend stays second hop, an offline one does not;
//! - weight changes, recoveries and drains move buckets voluntarily, in steps
//!   limited by `rebalance` (min interval, max share per step, min bucket
//!   age);
//! - if no backend is healthy the service fails open to every backend not
//!   set offline;
//! - a reload carries health state over for backends whose address and check
//!   did not change (a changed check keeps the verdict and restarts its
//!   streaks); backends added to an existing service need `rise_count`
//!   successes; backends of a new service start unknown (first result
//!   decides), like at daemon start;
//! - a backend that disappears from the file is drained like `drained`, and
//!   removed (from second hops and the cluster set) once it has owned no
//!   bucket for `min_bucket_age_ms`.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use anyhow::Result;

use crate::config::{
    Backend, BackendState, Checker, Config, DynamicWeight, HealthCheck, Rebalance, Service,
    UnknownFlow,
};
use crate::dataplane::{DataplaneOps, LiveTable, NodeSettings, TableInstall};
use crate::filters::FilterSet;
use crate::health::checker::CheckTarget;
use crate::health::{Health, HealthState};
use crate::limits;
use crate::table::{Moves, StepLimits, Table, Target};
use crate::types::{LoadSample, ServiceKey};
use crate::weights::{self, BackendLoad};

/// Runtime state of one backend of one service.
#[derive(Clone, Debug)]
pub struct BackendRuntime {
    /// Its configuration (the last one, if it was removed).
    pub config: Backend,
    /// Set when the backend disappeared from the file: it is draining out.
    pub removed_at_ms: Option<u64>,
    /// Since when a removed backend owns no bucket.
    pub empty_since_ms: Option<u64>,
    /// Health for this service's check.
    pub health: HealthState,
    /// Slot of this (service, backend) in the `backend_stats` map.
    pub slot: u32,
    /// Effective weight (dynamic weights), starting at the configured one.
    pub effective_weight: f64,
    /// Load state for dynamic weights.
    pub load: LoadState,
}

/// What dynamic weights know about a backend's load.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadState {
    /// Last usable reading: utilisation 0..1 (cpu) or new connections per
    /// second (qps), and when it was taken (caller's clock, ms).
    pub reading: Option<(f64, u64)>,
    /// Previous cumulative sample, to turn counters into rates: (value, ms)
    /// for connection counts, ((busy, total) seconds) for CPU counters.
    prev_counter: Option<(f64, f64, u64)>,
    /// Readings that failed so far.
    pub errors: u64,
    /// Why the last reading failed, if it did.
    pub last_error: Option<String>,
}

impl BackendRuntime {
    /// A backend in the file, with its health state and counter slot.
    fn new(config: &Backend, health: HealthState, slot: u32) -> Self {
        BackendRuntime {
            config: config.clone(),
            removed_at_ms: None,
            empty_since_ms: None,
            health,
            slot,
            effective_weight: config.weight as f64,
            load: LoadState::default(),
        }
    }

    /// Active, in the file and not down.
    fn is_first_hop_candidate(&self) -> bool {
        self.removed_at_ms.is_none()
            && self.config.state == BackendState::Active
            && self.health.eligible()
    }

    /// State shown to operators: the configured state, or `removing`.
    pub fn admin_state(&self) -> &'static str {
        match (self.removed_at_ms, self.config.state) {
            (Some(_), _) => "removing",
            (None, BackendState::Active) => "active",
            (None, BackendState::Drained) => "drained",
            (None, BackendState::Offline) => "offline",
        }
    }
}

/// One service's control state.
#[derive(Clone, Debug)]
pub struct ServiceState {
    /// Index into the per-service stats map; stable while the key exists.
    pub index: u32,
    /// Current table.
    pub table: Table,
    /// Backends by DIP (including ones being removed).
    pub backends: BTreeMap<Ipv4Addr, BackendRuntime>,
    /// When the last voluntary step happened.
    pub last_step_ms: Option<u64>,
    /// Voluntary moves still needed to reach the targets.
    pub pending: usize,
    /// No backend is healthy: every backend not offline is used.
    pub fail_open: bool,
    /// When the table last changed (caller's clock, ms).
    pub changed_at_ms: u64,
    /// When dynamic weights last ran a round.
    pub last_adjust_ms: Option<u64>,
    /// Buckets moved so far: (forced, voluntary, of which swaps).
    pub moves_total: (u64, u64, u64),
}

impl ServiceState {
    /// Effective weights that reproduce the table's current shares exactly
    /// (weight proportional to buckets owned, on the scale of the configured
    /// weights), so that an adopted table under dynamic weights does not
    /// move. Backends that own nothing keep their configured weight.
    fn effective_weights_from_shares(&mut self, dw: &DynamicWeight) {
        let shares = self.table.shares();
        let total: f64 = self.backends.values().map(|b| b.config.weight as f64).sum();
        // Table weights are integers (effective * WEIGHT_SCALE): make them
        // exact multiples of the bucket counts so quotas equal the shares.
        let per_bucket = (weights::WEIGHT_SCALE * total / self.table.size() as f64)
            .round()
            .max(1.0);
        for b in self.backends.values_mut() {
            if let Some(&n) = shares.get(&b.config.dip) {
                let configured = b.config.weight as f64;
                let w = n as f64 * per_bucket / weights::WEIGHT_SCALE;
                let lo = configured * dw.min_weight_percent as f64 / 100.0;
                let hi = configured * dw.max_weight_percent as f64 / 100.0;
                b.effective_weight = w.clamp(lo, hi);
            }
        }
    }
}

/// What an event changes in the data plane.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Services whose table is new or different, with the buckets moved.
    pub install: BTreeMap<ServiceKey, Moves>,
    /// Services no longer configured ([`ControlPlane::apply`] removes every
    /// installed service the state does not know, these included).
    pub remove: Vec<ServiceKey>,
    /// Node settings changed (hash seed, GUE port, unknown_flow).
    pub settings_changed: bool,
    /// Services whose fail-open state changed, with the new state.
    pub fail_open_changed: Vec<(ServiceKey, bool)>,
    /// Backends removed for good after draining out.
    pub removed_backends: Vec<(ServiceKey, Ipv4Addr)>,
    /// Counter slots (backend, service index) newly given out: zero them
    /// before the tables that use them are installed.
    pub fresh_slots: Vec<u32>,
    /// Service stats indexes newly given out.
    pub fresh_service_indexes: Vec<u32>,
    /// Dynamic-weight rounds that changed weights: per service, each
    /// backend's (address, load reading, old and new effective weight).
    pub reweighted: Vec<(ServiceKey, Vec<Reweight>)>,
    /// The edge filters changed ([`ControlPlane::set_filters`]).
    pub filters: bool,
}

/// One backend's change in a dynamic-weights round.
#[derive(Clone, Debug, PartialEq)]
pub struct Reweight {
    /// The backend.
    pub dip: Ipv4Addr,
    /// The load reading used (None: unreadable, weight kept).
    pub load: Option<f64>,
    /// Effective weight before the round.
    pub from: f64,
    /// Effective weight after it.
    pub to: f64,
}

impl Plan {
    /// True when nothing needs to be written to the data plane (tables,
    /// settings, or the cluster set after a removal).
    pub fn is_empty(&self) -> bool {
        self.install.is_empty()
            && self.remove.is_empty()
            && !self.settings_changed
            && self.removed_backends.is_empty()
            && !self.filters
    }

    fn merge(&mut self, other: Plan) {
        self.install.extend(other.install);
        self.remove.extend(other.remove);
        self.settings_changed |= other.settings_changed;
        self.fail_open_changed.extend(other.fail_open_changed);
        self.removed_backends.extend(other.removed_backends);
        self.fresh_slots.extend(other.fresh_slots);
        self.fresh_service_indexes
            .extend(other.fresh_service_indexes);
        self.filters |= other.filters;
    }
}

/// The running configuration and everything derived from it.
#[derive(Clone, Debug)]
pub struct ControlPlane {
    config: Config,
    services: BTreeMap<ServiceKey, ServiceState>,
    used_slots: BTreeSet<u32>,
    /// The edge filters compiled from the config and its lists (shared:
    /// a 1M-prefix set is large, and a reload clones the state).
    filters: Arc<FilterSet>,
}

/// The `backend_stats` slot shared by backends that found no free slot (the
/// config limit keeps this from happening unless removals pile up).
pub const OVERFLOW_SLOT: u32 = limits::MAX_BACKEND_SLOTS - 1;

fn fresh_health(check: &Checker, now_ms: u64, added: bool) -> HealthState {
    match (check, added) {
        (Checker::None, _) => HealthState::unchecked(now_ms),
        (_, true) => HealthState::added(now_ms),
        (_, false) => HealthState::at_start(now_ms),
    }
}

impl ControlPlane {
    /// No services yet, `config`'s cluster and rebalance settings; `update`
    /// then adds the services.
    fn empty(config: &Config) -> Self {
        ControlPlane {
            config: Config {
                cluster: config.cluster.clone(),
                rebalance: config.rebalance,
                services: Vec::new(),
                filters: config.filters.clone(),
            },
            services: BTreeMap::new(),
            used_slots: BTreeSet::new(),
            filters: Arc::new(FilterSet::default()),
        }
    }

    /// State for `config` at daemon start (time `now_ms`): fresh tables,
    /// health unknown.
    pub fn new(config: Config, now_ms: u64) -> Self {
        let mut cp = ControlPlane::empty(&config);
        cp.update(config, now_ms);
        cp
    }

    /// The lowest free counter slot (or the shared overflow slot).
    fn take_slot(used: &mut BTreeSet<u32>, plan: &mut Plan) -> u32 {
        let slot = (0..OVERFLOW_SLOT)
            .find(|s| !used.contains(s))
            .unwrap_or(OVERFLOW_SLOT);
        if slot != OVERFLOW_SLOT {
            used.insert(slot);
            plan.fresh_slots.push(slot);
        }
        slot
    }

    /// State for `config` built on the tables a running data plane already
    /// has (a restarted daemon adopting pinned maps): each service whose
    /// table size still matches keeps its buckets, their move history, its
    /// stats index and counter slots, so nothing moves. Forced changes (a
    /// backend now offline or gone) still apply; `now_ms` must be on the
    /// same clock as the history (the daemon uses Unix milliseconds).
    pub fn adopt(config: Config, live: Vec<(ServiceKey, LiveTable)>, now_ms: u64) -> Self {
        let mut cp = ControlPlane::empty(&config);
        for (key, lt) in live {
            let Some(service) = config.service(&key) else {
                continue;
            };
            if lt.buckets.len() != service.table_size as usize
                || lt.service_index >= limits::MAX_SERVICES
                || cp.services.values().any(|s| s.index == lt.service_index)
            {
                continue;
            }
            let check = &service.health_check.checker;
            let mut backends = BTreeMap::new();
            for b in &service.backends {
                let slot = match lt.slots.get(&b.dip) {
                    Some(&slot) if slot < OVERFLOW_SLOT && cp.used_slots.insert(slot) => slot,
                    _ => continue, // given a fresh slot by `update` below
                };
                backends.insert(
                    b.dip,
                    BackendRuntime::new(b, fresh_health(check, now_ms, false), slot),
                );
            }
            cp.services.insert(
                key,
                ServiceState {
                    index: lt.service_index,
                    table: Table::adopt(lt.buckets, lt.moved_at),
                    backends,
                    last_step_ms: None,
                    pending: 0,
                    fail_open: false,
                    changed_at_ms: now_ms,
                    last_adjust_ms: None,
                    moves_total: (0, 0, 0),
                },
            );
            cp.config.services.push(service.clone());
            if let Some(dw) = &service.dynamic_weight {
                cp.services
                    .get_mut(&key)
                    .expect("just inserted")
                    .effective_weights_from_shares(dw);
            }
        }
        // Backends of adopted services without a slot, and services without
        // an adoptable table, come in as usual; the config is the same, so
        // health checks start from "unknown" like at any start.
        let mut adopted_services = cp.config.services.clone();
        for s in &mut adopted_services {
            let known = &cp.services[&s.key()].backends;
            s.backends.retain(|b| known.contains_key(&b.dip));
        }
        cp.config.services = adopted_services;
        cp.update(config, now_ms);
        // Backends that `update` added to adopted services are not new to
        // the cluster: treat them like the rest (unknown, first result
        // decides) rather than as reload additions that need rise_count.
        for st in cp.services.values_mut() {
            for b in st.backends.values_mut() {
                if b.health.health == Health::Down && b.health.transitions == 0 {
                    b.health = HealthState::at_start(now_ms);
                }
            }
        }
        cp
    }

    /// The running configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The edge filters in force.
    pub fn filters(&self) -> &Arc<FilterSet> {
        &self.filters
    }

    /// Use `set` as the edge filters (compiled from this state's config and
    /// its list files; the daemon passes an empty set on nodes that do not
    /// run the XDP balancer). Returns whether it differs from the set in
    /// force; the caller then marks its plan (`Plan::filters`).
    pub fn set_filters(&mut self, set: Arc<FilterSet>) -> bool {
        let changed = set.digest != self.filters.digest || set.rules != self.filters.rules;
        self.filters = set;
        changed
    }

    /// State of one service.
    pub fn service(&self, key: &ServiceKey) -> Option<&ServiceState> {
        self.services.get(key)
    }

    /// All services' state.
    pub fn services(&self) -> &BTreeMap<ServiceKey, ServiceState> {
        &self.services
    }

    /// Switch to `config` (a reload). Health carries over as the module
    /// documentation says; tables step towards the new targets (forced moves
    /// now, voluntary ones within the rebalance limits).
    pub fn update(&mut self, config: Config, now_ms: u64) -> Plan {
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
            if let Some(st) = self.services.remove(k) {
                for b in st.backends.values() {
                    self.used_slots.remove(&b.slot);
                }
            }
        }
        let old_checks: BTreeMap<ServiceKey, HealthCheck> = self
            .config
            .services
            .iter()
            .map(|s| (s.key(), s.health_check.clone()))
            .collect();
        let mut used: BTreeSet<u32> = self.services.values().map(|s| s.index).collect();
        for service in &config.services {
            let key = service.key();
            let check = &service.health_check.checker;
            match self.services.get_mut(&key) {
                Some(state) => {
                    let check_changed = old_checks.get(&key) != Some(&service.health_check);
                    let listed: BTreeSet<Ipv4Addr> =
                        service.backends.iter().map(|b| b.dip).collect();
                    for b in &service.backends {
                        match state.backends.get_mut(&b.dip) {
                            Some(rt) if rt.removed_at_ms.is_none() => {
                                if *check == Checker::None {
                                    rt.health = HealthState::unchecked(now_ms);
                                } else if check_changed {
                                    rt.health.restart_streaks();
                                }
                                // Dynamic weights keep their ratio to the
                                // configured weight; without them it is 1.
                                rt.effective_weight = match service.dynamic_weight {
                                    Some(_) => {
                                        rt.effective_weight * b.weight as f64
                                            / rt.config.weight.max(1) as f64
                                    }
                                    None => b.weight as f64,
                                };
                                rt.config = b.clone();
                            }
                            Some(rt) => {
                                // Back in the file while draining out.
                                rt.effective_weight = b.weight as f64;
                                rt.config = b.clone();
                                rt.removed_at_ms = None;
                                rt.empty_since_ms = None;
                                rt.health = fresh_health(check, now_ms, true);
                            }
                            None => {
                                let slot = Self::take_slot(&mut self.used_slots, &mut plan);
                                state.backends.insert(
                                    b.dip,
                                    BackendRuntime::new(b, fresh_health(check, now_ms, true), slot),
                                );
                            }
                        }
                    }
                    for (dip, rt) in state.backends.iter_mut() {
                        if !listed.contains(dip) && rt.removed_at_ms.is_none() {
                            rt.removed_at_ms = Some(now_ms);
                        }
                    }
                    if state.table.size() != service.table_size {
                        state.table = state.table.resized(service.table_size);
                    }
                }
                None => {
                    let index = (0..limits::MAX_SERVICES)
                        .find(|i| !used.contains(i))
                        .expect("config validation bounds the number of services");
                    used.insert(index);
                    plan.fresh_service_indexes.push(index);
                    let mut backends = BTreeMap::new();
                    for b in &service.backends {
                        let slot = Self::take_slot(&mut self.used_slots, &mut plan);
                        backends.insert(
                            b.dip,
                            BackendRuntime::new(b, fresh_health(check, now_ms, false), slot),
                        );
                    }
                    self.services.insert(
                        key,
                        ServiceState {
                            index,
                            table: Table::empty(service.table_size),
                            backends,
                            last_step_ms: None,
                            pending: 0,
                            fail_open: false,
                            changed_at_ms: now_ms,
                            last_adjust_ms: None,
                            moves_total: (0, 0, 0),
                        },
                    );
                    // A new table is built in one go.
                    plan.install.insert(key, Moves::default());
                }
            }
        }
        self.config = config;
        let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
        for key in keys {
            let fresh = plan.install.contains_key(&key);
            let p = self.step(&key, now_ms, fresh);
            plan.merge(p);
        }
        plan
    }

    /// Record a health-check result for (`service`, `dip`). Returns a plan
    /// when the result changes the table or the fail-open state.
    pub fn observe(
        &mut self,
        service: &ServiceKey,
        dip: Ipv4Addr,
        result: Result<(), String>,
        now_ms: u64,
    ) -> Option<Plan> {
        let check = &self.config.service(service)?.health_check;
        let (rise, fall) = (check.rise_count, check.fall_count);
        let state = self.services.get_mut(service)?;
        let rt = state.backends.get_mut(&dip)?;
        if rt.removed_at_ms.is_some() {
            return None;
        }
        if !rt.health.observe(result, rise, fall, now_ms) {
            return None;
        }
        let plan = self.step(service, now_ms, false);
        (!plan.is_empty() || !plan.fail_open_changed.is_empty()).then_some(plan)
    }

    /// Time passes: take due voluntary steps and finish removals.
    pub fn tick(&mut self, now_ms: u64) -> Plan {
        let mut plan = Plan::default();
        let min_age = self.config.rebalance.min_bucket_age_ms;
        let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
        for key in keys {
            let state = self.services.get_mut(&key).expect("key");
            let shares = state.table.shares();
            let gone: Vec<Ipv4Addr> = state
                .backends
                .iter_mut()
                .filter(|(_, rt)| rt.removed_at_ms.is_some())
                .filter_map(|(dip, rt)| {
                    if shares.contains_key(dip) {
                        rt.empty_since_ms = None;
                        return None;
                    }
                    let since = *rt.empty_since_ms.get_or_insert(now_ms);
                    (now_ms.saturating_sub(since) >= min_age).then_some(*dip)
                })
                .collect();
            for dip in &gone {
                if let Some(b) = state.backends.remove(dip) {
                    self.used_slots.remove(&b.slot);
                }
                plan.removed_backends.push((key, *dip));
            }
            let reweighted = self.adjust_weights(&key, now_ms);
            let changed = !reweighted.is_empty();
            if changed {
                plan.reweighted.push((key, reweighted));
            }
            let state = &self.services[&key];
            let due = state.pending > 0 && self.voluntary_allowed(&key, now_ms);
            if due || changed || !gone.is_empty() {
                let p = self.step(&key, now_ms, false);
                plan.merge(p);
            }
        }
        plan
    }

    /// Record a load sample of (`service`, `dip`) taken at `now_ms`; an
    /// error counts as an unreadable backend (its weight then stays).
    pub fn record_load(
        &mut self,
        service: &ServiceKey,
        dip: Ipv4Addr,
        sample: Result<LoadSample, String>,
        now_ms: u64,
    ) {
        let Some(rt) = self
            .services
            .get_mut(service)
            .and_then(|s| s.backends.get_mut(&dip))
        else {
            return;
        };
        let l = &mut rt.load;
        match sample {
            Err(e) => {
                l.errors += 1;
                l.last_error = Some(e);
            }
            Ok(LoadSample::Utilisation(u)) => {
                l.last_error = None;
                l.reading = Some((u.clamp(0.0, 1.0), now_ms));
            }
            Ok(LoadSample::CpuSeconds { busy, total }) => {
                l.last_error = None;
                if let Some((pb, pt, _)) = l.prev_counter {
                    if let Some(u) = weights::utilisation_between((pb, pt), (busy, total)) {
                        l.reading = Some((u, now_ms));
                    }
                }
                l.prev_counter = Some((busy, total, now_ms));
            }
            Ok(LoadSample::Connections(n)) => {
                l.last_error = None;
                if let Some((prev, _, at)) = l.prev_counter {
                    let dt = now_ms.saturating_sub(at) as f64 / 1000.0;
                    if dt > 0.0 && n as f64 >= prev {
                        l.reading = Some(((n as f64 - prev) / dt, now_ms));
                    }
                }
                l.prev_counter = Some((n as f64, 0.0, now_ms));
            }
        }
    }

    /// One dynamic-weights round for `key` when due: the table has caught up
    /// with the last round and loads were read since. Returns the changes
    /// (empty when no effective weight changed).
    fn adjust_weights(&mut self, key: &ServiceKey, now_ms: u64) -> Vec<Reweight> {
        let Some(dw) = self
            .config
            .service(key)
            .and_then(|s| s.dynamic_weight.clone())
        else {
            return Vec::new();
        };
        let state = self.services.get_mut(key).expect("service state");
        let interval = dw.interval_ms;
        let due = state
            .last_adjust_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= interval)
            && state.pending == 0
            && now_ms.saturating_sub(state.changed_at_ms) >= interval;
        if !due {
            return Vec::new();
        }
        state.last_adjust_ms = Some(now_ms);
        let settled_since = state.changed_at_ms;
        let dips: Vec<Ipv4Addr> = state
            .backends
            .values()
            .filter(|b| b.is_first_hop_candidate())
            .map(|b| b.config.dip)
            .collect();
        let input: Vec<BackendLoad> = dips
            .iter()
            .map(|d| {
                let b = &state.backends[d];
                BackendLoad {
                    configured: b.config.weight,
                    effective: b.effective_weight,
                    // Only readings taken after the table settled count.
                    reading: b
                        .load
                        .reading
                        .filter(|(_, at)| {
                            *at > settled_since && now_ms.saturating_sub(*at) <= 3 * interval
                        })
                        .map(|(v, _)| v),
                }
            })
            .collect();
        let next = weights::adjust(&dw, &input);
        if dips
            .iter()
            .zip(&next)
            .all(|(d, w)| (state.backends[d].effective_weight - w).abs() <= 1e-9)
        {
            return Vec::new();
        }
        let mut changes = Vec::with_capacity(dips.len());
        for ((d, w), inp) in dips.iter().zip(next).zip(&input) {
            let b = state.backends.get_mut(d).expect("backend");
            changes.push(Reweight {
                dip: *d,
                load: inp.reading,
                from: b.effective_weight,
                to: w,
            });
            b.effective_weight = w;
        }
        changes
    }

    fn voluntary_allowed(&self, key: &ServiceKey, now_ms: u64) -> bool {
        let min = self.config.rebalance.min_interval_ms;
        self.services[key]
            .last_step_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= min)
    }

    /// One step of `key`'s table towards its targets. `fresh`: a new table,
    /// built without limits.
    fn step(&mut self, key: &ServiceKey, now_ms: u64, fresh: bool) -> Plan {
        let rebalance: Rebalance = self.config.rebalance;
        let allowed = fresh || self.voluntary_allowed(key, now_ms);
        let state = self.services.get_mut(key).expect("service state");
        let size = state.table.size();

        let candidates: Vec<Target> = state
            .backends
            .values()
            .filter(|b| b.is_first_hop_candidate())
            .map(|b| Target {
                dip: b.config.dip,
                weight: weights::table_weight(b.effective_weight),
            })
            .collect();
        let fail_open = candidates.is_empty()
            && state
                .backends
                .values()
                .any(|b| b.removed_at_ms.is_none() && b.config.state != BackendState::Offline);
        let targets: Vec<Target> = if fail_open {
            state
                .backends
                .values()
                .filter(|b| b.removed_at_ms.is_none() && b.config.state != BackendState::Offline)
                .map(|b| Target {
                    dip: b.config.dip,
                    weight: weights::table_weight(b.effective_weight),
                })
                .collect()
        } else {
            candidates
        };
        let target_set: BTreeSet<Ipv4Addr> = targets.iter().map(|t| t.dip).collect();
        let backends = &state.backends;
        let forced_out = |d: Ipv4Addr| match backends.get(&d) {
            None => true,
            Some(b) => {
                !target_set.contains(&d)
                    && (b.config.state == BackendState::Offline || b.health.health == Health::Down)
            }
        };
        let second_ok = |d: Ipv4Addr| {
            backends
                .get(&d)
                .is_some_and(|b| b.config.state != BackendState::Offline)
        };
        // Entering fail-open spreads at once: every backend is already down,
        // so there is nothing to protect by pacing, and second chance keeps
        // whatever connections the last one still serves.
        let limits = if fresh || (fail_open && !state.fail_open) {
            StepLimits::NONE
        } else if allowed {
            StepLimits {
                max_moves: (size as usize * rebalance.max_step_percent as usize).div_ceil(100),
                min_age_ms: rebalance.min_bucket_age_ms,
            }
        } else {
            StepLimits {
                max_moves: 0,
                min_age_ms: rebalance.min_bucket_age_ms,
            }
        };
        let (table, moves) = state
            .table
            .rebalance(&targets, second_ok, forced_out, now_ms, limits);

        let mut plan = Plan::default();
        if fail_open != state.fail_open {
            plan.fail_open_changed.push((*key, fail_open));
            state.fail_open = fail_open;
        }
        if !fresh && moves.moved > moves.forced {
            state.last_step_ms = Some(now_ms);
        }
        if !fresh {
            state.moves_total.0 += moves.forced as u64;
            state.moves_total.1 += (moves.moved - moves.forced) as u64;
            state.moves_total.2 += moves.swapped as u64;
        }
        state.pending = moves.pending;
        if fresh || table.buckets() != state.table.buckets() {
            plan.install.insert(*key, moves);
            state.changed_at_ms = now_ms;
        }
        state.table = table;
        plan
    }

    /// Backends whose load dynamic weights read: (service, backend, settings)
    /// for every backend in the file that is not offline.
    pub fn load_targets(&self) -> Vec<(ServiceKey, Ipv4Addr, DynamicWeight)> {
        let mut out = Vec::new();
        for s in &self.config.services {
            let Some(dw) = &s.dynamic_weight else {
                continue;
            };
            for b in s
                .backends
                .iter()
                .filter(|b| b.state != BackendState::Offline)
            {
                out.push((s.key(), b.dip, dw.clone()));
            }
        }
        out
    }

    /// The checks to run: every backend in the file that is not offline, for
    /// services with a checker.
    pub fn check_targets(&self) -> Vec<CheckTarget> {
        let mut out = Vec::new();
        for s in &self.config.services {
            if s.health_check.checker == Checker::None {
                continue;
            }
            for b in &s.backends {
                if b.state != BackendState::Offline {
                    out.push(CheckTarget {
                        service: s.key(),
                        dip: b.dip,
                        check: s.health_check.clone(),
                    });
                }
            }
        }
        out
    }

    /// Addresses allowed to send GUE: the balancers and every backend still
    /// known (including backends draining out after removal).
    pub fn cluster_addresses(&self) -> BTreeSet<Ipv4Addr> {
        let mut set = self.config.cluster_addresses();
        for s in self.services.values() {
            set.extend(s.backends.keys().copied());
        }
        set
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

    /// Write `plan` into `dp`. Order keeps traffic safe:
    /// 1. the node settings;
    /// 2. the VIP and cluster-address sets widen to the union of what the
    ///    maps hold and what the new state needs, so no table installed next
    ///    points at an address the programs would reject;
    /// 3. fresh counter slots and service indexes are zeroed, before the
    ///    tables that count into them; the edge filters are installed
    ///    (a new generation flipped in, or nothing if they are the ones
    ///    installed), before the tables of services they name;
    /// 4. all changed tables in one [`DataplaneOps::install_tables`] call
    ///    (one atomic swap each, one RCU wait for the batch);
    /// 5. services the maps hold that this state does not know are removed
    ///    (the plan's removals, and any left by a failed apply of another
    ///    state or by an earlier daemon whose pins were adopted);
    /// 6. the two sets narrow to what the new state needs.
    ///
    /// On an error nothing after the failing step runs and the error is
    /// returned: the sets stay widened and nothing is removed, so every
    /// table in the maps (old, new, or a prefix of a failed batch) still has
    /// its VIP and hops in the sets. The caller re-applies a full plan (of
    /// this state, or of the previous one after a failed reload); step 5
    /// then removes what the failed apply added.
    pub fn apply(&self, dp: &mut dyn DataplaneOps, node: Ipv4Addr, plan: &Plan) -> Result<()> {
        dp.set_settings(&self.settings(node))?;
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
        // All changed tables in one batch (one RCU wait in the kernel).
        let installs: Vec<(ServiceKey, &ServiceState)> = plan
            .install
            .keys()
            .filter_map(|key| self.services.get(key).map(|st| (*key, st)))
            .collect();
        let slot_fns: Vec<Box<dyn Fn(Ipv4Addr) -> u32 + '_>> = installs
            .iter()
            .map(|(_, st)| {
                let f = move |d: Ipv4Addr| st.backends.get(&d).map_or(OVERFLOW_SLOT, |b| b.slot);
                Box::new(f) as Box<dyn Fn(Ipv4Addr) -> u32 + '_>
            })
            .collect();
        let items: Vec<TableInstall<'_>> = installs
            .iter()
            .zip(&slot_fns)
            .map(|((key, st), f)| TableInstall {
                key: *key,
                index: st.index,
                table: &st.table,
                slot_of: f.as_ref(),
            })
            .collect();
        dp.install_tables(&items)?;
        // Every service the maps hold that this state does not know: the
        // plan's removals, and whatever a failed apply of another state
        // left (a failed reload restores the running state with its full
        // plan) or an earlier daemon whose pins were adopted ran.
        for key in dp.installed_services()? {
            if !self.services.contains_key(&key) {
                dp.remove_service(&key)?;
            }
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
            settings_changed: true,
            filters: true,
            ..Plan::default()
        }
    }
}
