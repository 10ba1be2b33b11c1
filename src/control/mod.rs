//! Control-plane state: the running configuration, and per service its
//! [`Table`], its backends' health and administrative state, and the pacing
//! of voluntary table changes. Pure logic driven by events with the caller's
//! clock (ms; the daemon's is the boot-time clock, [`crate::clock`]):
//! [`ControlPlane::update`] (reload), [`ControlPlane::observe`] (a
//! health-check result) and [`ControlPlane::tick`] (time passes). Each
//! returns a [`Plan`]; [`ControlPlane::apply`] is the one place that writes a
//! plan into the data plane, through [`DataplaneOps`] (the BPF maps in the
//! daemon, a recording fake in the unit tests). [`ControlPlane::reload`]
//! makes a whole reload (tables, XDP role, health checks) one transaction,
//! and [`ControlPlane::adopt`] rebuilds the state a killed daemon left in the
//! pinned maps.
//!
//! Rules (docs/design.md "Control plane", "Tables and pacing", "Health
//! checks", "Restarts and adoption"; docs/config.md "Backend states",
//! "Reload (SIGHUP)"):
//! - first hops are the active backends that are up, in proportion to
//!   weight; an unknown backend (no verdict yet) keeps the buckets it owns
//!   but gains none, unless no active backend is up (then the buckets nobody
//!   owns are spread over the unknown ones by weight), see [`Mode`];
//! - a health failure or `offline` moves buckets away at once (forced); a
//!   failed backend stays second hop, an offline one does not;
//! - weight changes, recoveries and drains move buckets voluntarily, in steps
//!   limited by `rebalance` (min interval, max share per step, min bucket
//!   age);
//! - below `panic_threshold_percent` of healthy active weight the service
//!   panics (every active backend by weight); with no active backend up or
//!   unknown, healthy drained backends serve; with no healthy backend at all
//!   the service fails open to every backend not offline; panic and fail-open
//!   are entered at once and left in paced steps that at most double what the
//!   healthy backends own per step;
//! - a reload carries health state over for backends whose address and check
//!   did not change (a changed check keeps the verdict and restarts its
//!   streaks); backends added to an existing service, back from `offline` or
//!   back in the file while being removed start unknown and need
//!   `rise_count` passes; backends of a new service start unknown and their
//!   first result decides, like at daemon start;
//! - a backend that disappears from the file is drained like `drained`, and
//!   removed (from second hops and the cluster set) once it has owned no
//!   bucket for `min_bucket_age_ms`;
//! - counter slots and stats indexes freed by a plan are given out again
//!   only by a later reload, so a plan never zeroes or shares a counter that
//!   a table it replaces or removes still counts into;
//! - what a restarted daemon needs (health, administrative state, removing
//!   backends and their times) is written to the pinned `control_state` map
//!   with every plan that changes it.

mod apply;
mod follow;
mod persist;
mod reload;
mod targets;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::config::{Backend, BackendState, Checker, Config, DynamicWeight, Rebalance, Service};
use crate::dataplane::NodeSettings;
use crate::filters::FilterSet;
use crate::health::checker::CheckTarget;
use crate::health::{Health, HealthState};
use crate::limits;
use crate::table::{Moves, Rules, StepLimits, Table};
use crate::types::{LoadSample, ServiceKey};
use crate::weights::{self, BackendLoad};

pub use reload::{ReloadError, ReloadStage, ReloadTimes};

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
    /// Health for the encapsulated check (`encap_check`); `unchecked` (up)
    /// when the service has none. Only `Down` keeps the backend out:
    /// "unknown" does not (docs/config.md "Health checks").
    pub encap: HealthState,
    /// Slot of this (service, backend) in the `backend_stats` and
    /// `control_state` maps.
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
            encap: HealthState::unchecked(health.since_ms),
            health,
            slot,
            effective_weight: config.weight as f64,
            load: LoadState::default(),
        }
    }

    /// In the file and not offline: may be a target in some [`Mode`].
    fn is_live(&self) -> bool {
        self.removed_at_ms.is_none() && self.config.state != BackendState::Offline
    }

    /// The verdict the table follows: down when either check (the regular
    /// one, or the encapsulated one) says down; else the regular check's
    /// (an encapsulated check without a verdict keeps nobody out).
    pub fn verdict(&self) -> Health {
        if self.encap.health == Health::Down {
            Health::Down
        } else {
            self.health.health
        }
    }

    /// Active, in the file and not known down (dynamic weights adjust
    /// these).
    fn is_weighted(&self) -> bool {
        self.is_live()
            && self.config.state == BackendState::Active
            && self.verdict() != Health::Down
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

/// Which backends a service's table uses (docs/design.md "Tables and
/// pacing"). Backends set `offline` or being removed are never targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Active backends that are up, by weight; unknown active backends keep
    /// the buckets they own but gain none (when no active backend is up,
    /// the buckets nobody can keep go to the unknown ones by weight).
    #[default]
    Normal,
    /// No active backend is up or unknown, but drained ones are up: the
    /// healthy drained backends serve, by weight, rather than failing open
    /// onto backends known to fail.
    DrainedFallback,
    /// Up and unknown active backends hold less than
    /// `panic_threshold_percent` of the active weight: every active backend
    /// is used by weight, healthy or not (Envoy's panic threshold), so the
    /// few healthy ones are not crushed.
    Panic,
    /// No backend is up at all: every backend not offline is used by weight.
    FailOpen,
}

impl Mode {
    /// Spread over backends known to fail (panic, fail-open): entered at
    /// once, left in paced steps.
    pub fn spreads_over_failures(self) -> bool {
        matches!(self, Mode::Panic | Mode::FailOpen)
    }

    /// Name in status, metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::DrainedFallback => "drained-fallback",
            Mode::Panic => "panic",
            Mode::FailOpen => "fail-open",
        }
    }
}

/// One service's control state.
#[derive(Clone, Debug)]
pub struct ServiceState {
    /// Index into the per-service stats map; stable while the key exists.
    pub index: u32,
    /// Current table (shared: a copy of the state made to change it does
    /// not copy the table, which a step replaces anyway).
    pub table: Arc<Table>,
    /// Backends by DIP (including ones being removed).
    pub backends: BTreeMap<IpAddr, BackendRuntime>,
    /// When the last voluntary step happened.
    pub last_step_ms: Option<u64>,
    /// Voluntary moves still needed to reach the targets.
    pub pending: usize,
    /// Which backends the table uses.
    pub mode: Mode,
    /// Leaving panic or fail-open: backends known to fail still own
    /// buckets and give them up in paced steps.
    pub exiting: bool,
    /// When the table last changed (caller's clock, ms).
    pub changed_at_ms: u64,
    /// When dynamic weights last ran a round.
    pub last_adjust_ms: Option<u64>,
    /// Buckets moved so far: (forced, voluntary, of which swaps).
    pub moves_total: (u64, u64, u64),
}

impl ServiceState {
    /// A new service: empty table, these backends.
    fn new(
        index: u32,
        table: Table,
        backends: BTreeMap<IpAddr, BackendRuntime>,
        now_ms: u64,
    ) -> Self {
        ServiceState {
            index,
            table: Arc::new(table),
            backends,
            last_step_ms: None,
            pending: 0,
            mode: Mode::Normal,
            exiting: false,
            changed_at_ms: now_ms,
            last_adjust_ms: None,
            moves_total: (0, 0, 0),
        }
    }

    /// No backend is healthy: every backend not offline is used.
    pub fn fail_open(&self) -> bool {
        self.mode == Mode::FailOpen
    }

    /// Whether a backend known to fail owns buckets without being a target
    /// of `mode` (what a paced exit from panic or fail-open moves away).
    fn failed_owners_left(&self) -> bool {
        if self.mode.spreads_over_failures() {
            return false;
        }
        let shares = self.table.shares();
        shares.keys().any(|d| {
            self.backends
                .get(d)
                .is_some_and(|b| b.verdict() == Health::Down && b.is_live())
        })
    }

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
    /// Of the services in `install`, those whose table changed only in
    /// some buckets since it was last installed: the indexes of those
    /// buckets, ascending. A service in `install` without an entry here is
    /// written whole (a new table, a new size, or a full plan).
    pub changed: BTreeMap<ServiceKey, Vec<u32>>,
    /// Services no longer configured ([`ControlPlane::apply`] removes every
    /// installed service the state does not know, these included).
    pub remove: Vec<ServiceKey>,
    /// Node settings changed (hash seed, GUE port, unknown_flow,
    /// icmp_too_big_rate): only then does [`ControlPlane::apply`] write
    /// `nilb_config`.
    pub settings_changed: bool,
    /// Services whose mode changed, with the new mode.
    pub mode_changed: Vec<(ServiceKey, Mode)>,
    /// Backends removed for good after draining out.
    pub removed_backends: Vec<(ServiceKey, IpAddr)>,
    /// Counter slots (backend, service index) newly given out: zero them
    /// before the tables that use them are installed.
    pub fresh_slots: Vec<u32>,
    /// Service stats indexes newly given out.
    pub fresh_service_indexes: Vec<u32>,
    /// Dynamic-weight rounds that changed weights: per service, each
    /// backend's (address, load reading, old and new effective weight).
    pub reweighted: Vec<(ServiceKey, Vec<Reweight>)>,
    /// Slots whose `control_state` record changed (written from the state,
    /// or cleared when no backend holds the slot any more).
    pub records: BTreeSet<u32>,
    /// Rewrite every slot of `control_state` (a full plan).
    pub all_records: bool,
    /// The edge filters changed ([`ControlPlane::set_filters`]).
    pub filters: bool,
}

/// One backend's change in a dynamic-weights round.
#[derive(Clone, Debug, PartialEq)]
pub struct Reweight {
    /// The backend.
    pub dip: IpAddr,
    /// The load reading used (None: unreadable, weight kept).
    pub load: Option<f64>,
    /// Effective weight before the round.
    pub from: f64,
    /// Effective weight after it.
    pub to: f64,
}

impl Plan {
    /// True when nothing needs to be written to the data plane (tables,
    /// settings, the cluster set after a removal, or control records).
    pub fn is_empty(&self) -> bool {
        self.install.is_empty()
            && self.remove.is_empty()
            && !self.settings_changed
            && self.removed_backends.is_empty()
            && self.fresh_slots.is_empty()
            && self.fresh_service_indexes.is_empty()
            && self.records.is_empty()
            && !self.all_records
            && !self.filters
    }

    /// True when the plan has nothing to write nor to report.
    pub fn is_idle(&self) -> bool {
        self.is_empty() && self.mode_changed.is_empty() && self.reweighted.is_empty()
    }

    /// Take out the installs of the services that need a region of their
    /// own in a data plane whose installed tables have `held(key)` buckets
    /// (None: no table): a service it lacks or holds at another size than
    /// `state` gives it. Returns them as a plan of their own; everything
    /// else (settings, records, removals, the other installs) stays here.
    ///
    /// At a start that grew the adopted bucket pool, the programs still
    /// attached read the old pool until the new ones replace them: this
    /// plan runs before the attach (every `services` entry keeps naming a
    /// region the old pool holds), the one returned after it
    /// (docs/design.md "Maps", sizing).
    pub fn take_new_regions(
        &mut self,
        state: &ControlPlane,
        held: &dyn Fn(&ServiceKey) -> Option<u32>,
    ) -> Plan {
        let keys: Vec<ServiceKey> = self
            .install
            .keys()
            .filter(|k| {
                let size = state.service(k).map(|s| s.table.size());
                size.is_some() && held(k) != size
            })
            .copied()
            .collect();
        let mut out = Plan::default();
        for key in keys {
            let moves = self.install.remove(&key).expect("listed above");
            let changed = self.changed.remove(&key);
            out.add_install(key, moves, changed);
        }
        out
    }

    /// Add an install of `key` (`changed`: the buckets that differ from
    /// the installed table; None: all of them) to what the plan installs.
    fn add_install(&mut self, key: ServiceKey, moves: Moves, changed: Option<Vec<u32>>) {
        let known = self.install.insert(key, moves).is_some();
        match (known, changed) {
            (false, Some(c)) => {
                self.changed.insert(key, c);
            }
            (true, Some(c)) => {
                if let Some(have) = self.changed.get_mut(&key) {
                    have.extend(c);
                    have.sort_unstable();
                    have.dedup();
                }
            }
            (_, None) => {
                self.changed.remove(&key);
            }
        }
    }

    /// Add what `other` does to this plan (tables installed by either are
    /// written from the state the plans lead to).
    pub fn merge(&mut self, other: Plan) {
        for (key, moves) in other.install {
            let changed = other.changed.get(&key).cloned();
            self.add_install(key, moves, changed);
        }
        self.remove.extend(other.remove);
        self.settings_changed |= other.settings_changed;
        self.mode_changed.extend(other.mode_changed);
        self.removed_backends.extend(other.removed_backends);
        self.fresh_slots.extend(other.fresh_slots);
        self.fresh_service_indexes
            .extend(other.fresh_service_indexes);
        self.reweighted.extend(other.reweighted);
        self.records.extend(other.records);
        self.all_records |= other.all_records;
        self.filters |= other.filters;
    }
}

/// The running configuration and everything derived from it.
///
/// Cloning is cheap: the configuration and each service's state are shared
/// (`Arc`) and copied only when changed (copy on write), so a reload that
/// computes the next state beside the running one copies only the services
/// it changes.
#[derive(Clone, Debug)]
pub struct ControlPlane {
    config: Arc<Config>,
    /// Position of each service in `config.services`.
    by_key: Arc<HashMap<ServiceKey, usize>>,
    services: BTreeMap<ServiceKey, Arc<ServiceState>>,
    used_slots: BTreeSet<u32>,
    /// Slots and stats indexes freed by the last plans: the tables those
    /// plans replace or remove may count into them until the plans are
    /// applied, so only the next reload gives them out again.
    retiring_slots: BTreeSet<u32>,
    retiring_indexes: BTreeSet<u32>,
    /// Counter slots and stats indexes of tables an adopted data plane
    /// holds for services the configuration no longer has ([`Self::adopt`]):
    /// retiring during the update that removes those tables, so that no
    /// new backend or service is given them while the tables still name
    /// them (the plan installs before it removes).
    orphan_slots: BTreeSet<u32>,
    orphan_indexes: BTreeSet<u32>,
    /// QUIC-LB server IDs of backends that left the file (still draining
    /// out: their connections keep reaching them by server ID).
    quic_left: BTreeMap<(ServiceKey, IpAddr), crate::quic_lb::ServerId>,
    /// The edge filters compiled from the config and its lists (shared:
    /// a 1M-prefix set is large, and a reload clones the state).
    filters: Arc<FilterSet>,
    /// Whether the kernel runs the QUIC-LB keyed algorithms
    /// ([`crate::features::KernelFeatures::quic_lb_keyed`]); without them a
    /// service's keyed `quic_lb` is refused ([`Self::refused`]) and its
    /// packets follow the bucket table.
    quic_lb_keyed: bool,
}

pub use crate::features::Refusal;

/// Buckets of tables to step per thread, at least, before a reload's
/// steps are split over threads (a step costs some 20 ns per bucket; a
/// thread some 50 µs to start).
const STEP_BUCKETS_PER_THREAD: usize = 64 * 1024;

/// The `backend_stats` slot shared by backends that found no free slot (the
/// config limit keeps this from happening unless removals pile up).
pub const OVERFLOW_SLOT: u32 = limits::MAX_BACKEND_SLOTS - 1;

/// Health of a backend new to the running state: unchecked, must prove
/// itself (`added`: a running service's new backend), or first result
/// decides (new service, daemon start).
fn fresh_health(check: &Checker, now_ms: u64, added: bool) -> HealthState {
    match (check, added) {
        (Checker::None, _) => HealthState::unchecked(now_ms),
        (_, true) => HealthState::recheck(now_ms),
        (_, false) => HealthState::at_start(now_ms),
    }
}

/// The encapsulated checks' state of a service after a reload (or start):
/// without `encap_check` its backends hold the `unchecked` placeholder;
/// with it, a backend that still holds the placeholder (new, or its service
/// just turned the check on) starts unknown: its first result decides, and
/// until then its regular health alone does (the first encapsulated check
/// runs within a second, before a new backend can pass `rise_count` regular
/// checks). Others carry over.
fn sync_encap(state: &mut ServiceState, service: &Service, now_ms: u64) {
    let placeholder =
        |h: &HealthState| h.health == Health::Up && h.last_check_ms.is_none() && h.transitions == 0;
    for rt in state.backends.values_mut() {
        if !service.encap_check {
            if !placeholder(&rt.encap) {
                rt.encap = HealthState::unchecked(now_ms);
            }
        } else if placeholder(&rt.encap) {
            rt.encap = HealthState::at_start(now_ms);
        }
    }
}

impl ControlPlane {
    /// No services yet, `config`'s cluster and rebalance settings; `update`
    /// then adds the services.
    fn empty(config: &Config) -> Self {
        ControlPlane {
            config: Arc::new(Config {
                cluster: config.cluster.clone(),
                rebalance: config.rebalance,
                services: Vec::new(),
                filters: config.filters.clone(),
                routing: config.routing.clone(),
            }),
            by_key: Arc::new(HashMap::new()),
            services: BTreeMap::new(),
            used_slots: BTreeSet::new(),
            retiring_slots: BTreeSet::new(),
            retiring_indexes: BTreeSet::new(),
            orphan_slots: BTreeSet::new(),
            orphan_indexes: BTreeSet::new(),
            quic_left: BTreeMap::new(),
            filters: Arc::new(FilterSet::default()),
            quic_lb_keyed: true,
        }
    }

    /// Tell the control plane what the kernel runs (the daemon does, after
    /// loading the data plane, before its first plan): parts of the config
    /// that need a missing feature are left out of every plan and listed
    /// by [`Self::refused`].
    pub fn set_kernel_features(&mut self, k: &crate::features::KernelFeatures) {
        self.quic_lb_keyed = k.quic_lb_keyed();
    }

    /// The parts of the running config this kernel cannot run (empty on a
    /// kernel with every optional feature).
    pub fn refused(&self) -> Vec<Refusal> {
        use crate::features::{describe, feature, QUIC_LB_CRYPTO};
        if self.quic_lb_keyed {
            return Vec::new();
        }
        let feature = feature(QUIC_LB_CRYPTO).expect("in the table").absent();
        self.config
            .services
            .iter()
            .filter_map(|svc| {
                let lb = svc.quic_lb.as_ref()?;
                (lb.algorithm != crate::quic_lb::Algorithm::Plaintext).then(|| Refusal {
                    service: svc.name.clone(),
                    what: format!("quic_lb {}", lb.algorithm.name()),
                    feature: QUIC_LB_CRYPTO.into(),
                    reason: describe(&feature),
                    instead: "its packets follow the bucket table (no routing by server ID)".into(),
                })
            })
            .collect()
    }

    /// State for `config` at daemon start (time `now_ms`) on maps nobody
    /// used before: fresh tables, health unknown. Its [`Self::full_plan`]
    /// fills the maps.
    pub fn new(config: Config, now_ms: u64) -> Self {
        let mut cp = ControlPlane::empty(&config);
        cp.update(config, now_ms);
        cp
    }

    /// The lowest counter slot neither in use nor retiring (or the shared
    /// overflow slot). Slot 0 is never given out: it ends a bucket's chain
    /// in the data plane.
    fn take_slot(&mut self, plan: &mut Plan) -> u32 {
        let slot = (1..OVERFLOW_SLOT)
            .find(|s| !self.used_slots.contains(s) && !self.retiring_slots.contains(s))
            .unwrap_or(OVERFLOW_SLOT);
        if slot != OVERFLOW_SLOT {
            self.used_slots.insert(slot);
            plan.fresh_slots.push(slot);
        }
        slot
    }

    /// Give up a backend's slot: retiring until the next reload.
    fn retire_slot(&mut self, slot: u32, plan: &mut Plan) {
        if slot != OVERFLOW_SLOT && self.used_slots.remove(&slot) {
            self.retiring_slots.insert(slot);
            plan.records.insert(slot);
        }
    }

    /// The running configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Make `config` the running configuration.
    fn set_config(&mut self, config: Config) {
        self.by_key = Arc::new(
            config
                .services
                .iter()
                .enumerate()
                .map(|(i, s)| (s.key(), i))
                .collect(),
        );
        self.config = Arc::new(config);
    }

    /// The running configuration of one service (a lookup, not a scan).
    pub fn service_config(&self, key: &ServiceKey) -> Option<&Service> {
        self.by_key.get(key).map(|&i| &self.config.services[i])
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
        self.services.get(key).map(|s| &**s)
    }

    /// All services' state.
    pub fn services(&self) -> &BTreeMap<ServiceKey, Arc<ServiceState>> {
        &self.services
    }

    /// One service's state to change (copied first if another state still
    /// shares it).
    fn state_mut(&mut self, key: &ServiceKey) -> Option<&mut ServiceState> {
        self.services.get_mut(key).map(Arc::make_mut)
    }

    /// Whether the running configuration makes the node at `node` a
    /// balancer (XDP attached, health checks run).
    pub fn is_balancer(&self, node: IpAddr) -> bool {
        self.config.cluster.balancers.contains(&node)
    }

    /// Switch to `config` (a reload). Health carries over as the module
    /// documentation says; tables step towards the new targets (forced moves
    /// now, voluntary ones within the rebalance limits).
    ///
    /// The work follows what changed: a service whose configuration is the
    /// same as the running one (and whose tables keep the same number of
    /// previous owners) is not touched at all (no state copied, no
    /// rebalance, nothing installed); its paced steps go on at the next
    /// [`ControlPlane::tick`].
    pub fn update(&mut self, config: Config, now_ms: u64) -> Plan {
        self.update_timed(config, now_ms).0
    }

    /// [`Self::update`], also returning the CPU time (µs) of the threads
    /// that helped step the tables (see [`Self::step_many`]).
    pub fn update_timed(&mut self, config: Config, now_ms: u64) -> (Plan, u64) {
        let mut plan = Plan {
            settings_changed: config.cluster.hash_seed != self.config.cluster.hash_seed
                || config.cluster.gue_port != self.config.cluster.gue_port
                || config.cluster.unknown_flow != self.config.cluster.unknown_flow
                || config.cluster.icmp_too_big_rate != self.config.cluster.icmp_too_big_rate,
            ..Plan::default()
        };
        // What earlier plans freed is no longer counted into: free again.
        // An adopted data plane's tables of services that are gone still
        // name theirs until this plan removes them.
        self.retiring_slots = std::mem::take(&mut self.orphan_slots);
        self.retiring_indexes = std::mem::take(&mut self.orphan_indexes);
        let keys: HashSet<ServiceKey> = config.services.iter().map(Service::key).collect();
        plan.remove = self
            .services
            .keys()
            .filter(|k| !keys.contains(k))
            .copied()
            .collect();
        for k in plan.remove.clone() {
            if let Some(st) = self.services.remove(&k) {
                for b in st.backends.values() {
                    self.retire_slot(b.slot, &mut plan);
                }
                self.retiring_indexes.insert(st.index);
            }
        }
        let previous = config.rebalance.previous_owners as usize;
        let memory_changed = config.rebalance.previous_owners
            != self.config.rebalance.previous_owners
            || self
                .services
                .values()
                .any(|s| s.table.previous_owners() != previous);
        let mut used: BTreeSet<u32> = self.services.values().map(|s| s.index).collect();
        used.extend(&self.retiring_indexes);
        // Services to step, and whether their table is new.
        let mut touched: Vec<(ServiceKey, bool)> = Vec::new();
        for service in &config.services {
            let key = service.key();
            let check = &service.health_check.checker;
            if !self.services.contains_key(&key) {
                let index = (0..limits::MAX_SERVICES)
                    .find(|i| !used.contains(i))
                    .expect("config validation bounds the number of services");
                used.insert(index);
                plan.fresh_service_indexes.push(index);
                let mut backends = BTreeMap::new();
                for b in &service.backends {
                    let slot = self.take_slot(&mut plan);
                    backends.insert(
                        b.dip,
                        BackendRuntime::new(b, fresh_health(check, now_ms, false), slot),
                    );
                }
                let table = Table::empty(service.table_size).with_previous_owners(previous);
                let mut state = ServiceState::new(index, table, backends, now_ms);
                sync_encap(&mut state, service, now_ms);
                self.services.insert(key, Arc::new(state));
                plan.records.extend(self.service_records(&key).into_keys());
                touched.push((key, true));
                continue;
            }
            let running = self.service_config(&key);
            if running == Some(service) {
                if memory_changed {
                    touched.push((key, false));
                }
                continue;
            }
            let check_changed = running.map(|s| &s.health_check) != Some(&service.health_check);
            let records_before = self.service_records(&key);
            let listed: BTreeSet<IpAddr> = service.backends.iter().map(|b| b.dip).collect();
            for b in &service.backends {
                let known = self.services[&key]
                    .backends
                    .get(&b.dip)
                    .map(|rt| (rt.removed_at_ms.is_some(), rt.config.state));
                match known {
                    Some((false, was)) => {
                        let state = self.state_mut(&key).expect("service");
                        let rt = state.backends.get_mut(&b.dip).expect("backend");
                        if *check == Checker::None {
                            if !rt.health.is_up() {
                                rt.health = HealthState::unchecked(now_ms);
                            }
                        } else if was == BackendState::Offline && b.state != BackendState::Offline {
                            // Back from offline: its old verdict is stale.
                            rt.health = HealthState::recheck(now_ms);
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
                    Some((true, _)) => {
                        // Back in the file while draining out.
                        let state = self.state_mut(&key).expect("service");
                        let rt = state.backends.get_mut(&b.dip).expect("backend");
                        rt.effective_weight = b.weight as f64;
                        rt.config = b.clone();
                        rt.removed_at_ms = None;
                        rt.empty_since_ms = None;
                        rt.health = fresh_health(check, now_ms, true);
                    }
                    None => {
                        let slot = self.take_slot(&mut plan);
                        let state = self.state_mut(&key).expect("service");
                        state.backends.insert(
                            b.dip,
                            BackendRuntime::new(b, fresh_health(check, now_ms, true), slot),
                        );
                    }
                }
            }
            let state = self.state_mut(&key).expect("service");
            for (dip, rt) in state.backends.iter_mut() {
                if !listed.contains(dip) && rt.removed_at_ms.is_none() {
                    rt.removed_at_ms = Some(now_ms);
                }
            }
            sync_encap(state, service, now_ms);
            // Records that changed (state, weight, health, slots given out).
            let records_after = self.service_records(&key);
            for (slot, r) in &records_after {
                if records_before.get(slot) != Some(r) {
                    plan.records.insert(*slot);
                }
            }
            plan.records.extend(
                records_before
                    .keys()
                    .filter(|s| !records_after.contains_key(s)),
            );
            touched.push((key, false));
        }
        // Server IDs of the outgoing file, for backends that leave it.
        for s in &self.config.services {
            if let Some(q) = &s.quic_lb {
                for id in &q.server_ids {
                    self.quic_left.insert((s.key(), id.dip), id.server_id);
                }
            }
        }
        self.set_config(config);
        let services = &self.services;
        self.quic_left.retain(|(k, dip), _| {
            services
                .get(k)
                .and_then(|st| st.backends.get(dip))
                .is_some_and(|b| b.removed_at_ms.is_some())
        });
        let (plans, helper_cpu_us) = self.step_many(&touched, now_ms);
        for p in plans {
            plan.merge(p);
        }
        (plan, helper_cpu_us)
    }

    /// One step of each service in `touched` (with whether its table is
    /// new), their plans in the same order. Many large tables (a reload
    /// that changes most services) are stepped on several threads
    /// ([`crate::split`]): each step reads the configuration and changes
    /// its own service's state only. Also returns the CPU time (µs) of
    /// the helper threads.
    fn step_many(&mut self, touched: &[(ServiceKey, bool)], now_ms: u64) -> (Vec<Plan>, u64) {
        let inputs: HashMap<ServiceKey, StepInput> = touched
            .iter()
            .map(|(key, fresh)| (*key, self.step_input(key, now_ms, *fresh)))
            .collect();
        let mut work: Vec<(ServiceKey, &mut ServiceState, StepInput)> = self
            .services
            .iter_mut()
            .filter_map(|(key, st)| {
                let input = *inputs.get(key)?;
                Some((*key, Arc::make_mut(st), input))
            })
            .collect();
        // In the order of `touched` (the order of the file).
        let position: HashMap<ServiceKey, usize> = touched
            .iter()
            .enumerate()
            .map(|(i, (key, _))| (*key, i))
            .collect();
        work.sort_by_key(|(key, _, _)| position[key]);
        crate::split::map(
            work,
            |(_, st, input)| st.table.size().max(input.size) as usize,
            STEP_BUCKETS_PER_THREAD,
            |(key, st, input)| step_state(&key, st, &input, now_ms),
        )
    }

    /// Record an encapsulated-check result for (`service`, `dip`)
    /// (docs/config.md "Health checks"): rise and fall as for the regular
    /// check; either check down takes the backend out. Returns a plan when
    /// the result changes the table or the fail-open state.
    pub fn observe_encap(
        &mut self,
        service: &ServiceKey,
        dip: IpAddr,
        result: Result<(), String>,
        now_ms: u64,
    ) -> Option<Plan> {
        let svc = self.service_config(service)?;
        if !svc.encap_check {
            return None;
        }
        let (rise, fall) = (svc.health_check.rise_count, svc.health_check.fall_count);
        let rt = self.state_mut(service)?.backends.get_mut(&dip)?;
        if rt.removed_at_ms.is_some() || !rt.encap.observe(result, rise, fall, now_ms) {
            return None;
        }
        let slot = rt.slot;
        let mut plan = self.step(service, now_ms, false);
        if slot != OVERFLOW_SLOT {
            plan.records.insert(slot);
        }
        Some(plan)
    }

    /// The encapsulated checks to run: every backend in the file that is not
    /// offline, of services with `encap_check`, with the check's cadence.
    pub fn encap_targets(&self) -> Vec<CheckTarget> {
        let mut out = Vec::new();
        for s in self.config.services.iter().filter(|s| s.encap_check) {
            for b in s
                .backends
                .iter()
                .filter(|b| b.state != BackendState::Offline)
            {
                out.push(CheckTarget {
                    service: s.key(),
                    dip: b.dip,
                    check: s.health_check.clone(),
                });
            }
        }
        out
    }

    /// Record a health-check result for (`service`, `dip`). Returns a plan
    /// when the result changes the backend's verdict (its record, and the
    /// table or the mode when they change with it).
    pub fn observe(
        &mut self,
        service: &ServiceKey,
        dip: IpAddr,
        result: Result<(), String>,
        now_ms: u64,
    ) -> Option<Plan> {
        let check = &self.service_config(service)?.health_check;
        let (rise, fall) = (check.rise_count, check.fall_count);
        let state = self.state_mut(service)?;
        let rt = state.backends.get_mut(&dip)?;
        if rt.removed_at_ms.is_some() {
            return None;
        }
        if !rt.health.observe(result, rise, fall, now_ms) {
            return None;
        }
        let slot = rt.slot;
        let mut plan = self.step(service, now_ms, false);
        if slot != OVERFLOW_SLOT {
            plan.records.insert(slot);
        }
        Some(plan)
    }

    /// Time passes: take due voluntary steps and finish removals.
    pub fn tick(&mut self, now_ms: u64) -> Plan {
        let mut plan = Plan::default();
        let min_age = self.config.rebalance.min_bucket_age_ms;
        let keys: Vec<ServiceKey> = self.services.keys().copied().collect();
        for key in keys {
            let removing = self.services[&key]
                .backends
                .values()
                .any(|b| b.removed_at_ms.is_some());
            let mut gone: Vec<IpAddr> = Vec::new();
            if removing {
                gone = self.finish_removals(&key, min_age, now_ms, &mut plan);
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

    /// Of `key`'s backends being removed, note since when each owns no
    /// bucket, and drop those that have owned none for `min_age` ms
    /// (returned; their slots retire).
    fn finish_removals(
        &mut self,
        key: &ServiceKey,
        min_age: u64,
        now_ms: u64,
        plan: &mut Plan,
    ) -> Vec<IpAddr> {
        let key = *key;
        {
            let state = self.state_mut(&key).expect("key");
            let shares = state.table.shares();
            let mut touched = Vec::new();
            let gone: Vec<IpAddr> = state
                .backends
                .iter_mut()
                .filter(|(_, rt)| rt.removed_at_ms.is_some())
                .filter_map(|(dip, rt)| {
                    if shares.contains_key(dip) {
                        if rt.empty_since_ms.take().is_some() {
                            touched.push(rt.slot);
                        }
                        return None;
                    }
                    let since = match rt.empty_since_ms {
                        Some(t) => t,
                        None => {
                            touched.push(rt.slot);
                            *rt.empty_since_ms.insert(now_ms)
                        }
                    };
                    (now_ms.saturating_sub(since) >= min_age).then_some(*dip)
                })
                .collect();
            let mut removed_slots = Vec::new();
            for dip in &gone {
                if let Some(b) = state.backends.remove(dip) {
                    removed_slots.push(b.slot);
                }
                plan.removed_backends.push((key, *dip));
            }
            for slot in removed_slots {
                self.retire_slot(slot, plan);
            }
            plan.records
                .extend(touched.into_iter().filter(|&s| s != OVERFLOW_SLOT));
            gone
        }
    }

    /// Record a load sample of (`service`, `dip`) taken at `now_ms`; an
    /// error counts as an unreadable backend (its weight then stays).
    pub fn record_load(
        &mut self,
        service: &ServiceKey,
        dip: IpAddr,
        sample: Result<LoadSample, String>,
        now_ms: u64,
    ) {
        let Some(rt) = self
            .state_mut(service)
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
            .service_config(key)
            .and_then(|s| s.dynamic_weight.clone())
        else {
            return Vec::new();
        };
        let interval = dw.interval_ms;
        let state = &self.services[key];
        let due = state
            .last_adjust_ms
            .is_none_or(|t| now_ms.saturating_sub(t) >= interval)
            && state.pending == 0
            && now_ms.saturating_sub(state.changed_at_ms) >= interval;
        if !due {
            return Vec::new();
        }
        let state = self.state_mut(key).expect("service state");
        state.last_adjust_ms = Some(now_ms);
        let settled_since = state.changed_at_ms;
        let dips: Vec<IpAddr> = state
            .backends
            .values()
            .filter(|b| b.is_weighted())
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
        let input = self.step_input(key, now_ms, fresh);
        let state = self.state_mut(key).expect("service state");
        step_state(key, state, &input, now_ms)
    }

    /// What [`step_state`] needs of the running configuration for `key`.
    fn step_input(&self, key: &ServiceKey, now_ms: u64, fresh: bool) -> StepInput {
        let config = self.service_config(key);
        StepInput {
            rebalance: self.config.rebalance,
            threshold: config.map_or(0, |s| s.panic_threshold_percent),
            size: config.map_or(self.services[key].table.size(), |s| s.table_size),
            previous: self.config.rebalance.previous_owners as usize,
            allowed: fresh || self.voluntary_allowed(key, now_ms),
            fresh,
        }
    }
    /// Backends whose load dynamic weights read: (service, backend, settings)
    /// for every backend in the file that is not offline.
    pub fn load_targets(&self) -> Vec<(ServiceKey, IpAddr, DynamicWeight)> {
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
    pub fn cluster_addresses(&self) -> BTreeSet<IpAddr> {
        let mut set = self.config.cluster_addresses();
        for s in self.services.values() {
            set.extend(s.backends.keys().copied());
        }
        set
    }

    /// Node settings for the data plane of the node at `node`.
    pub fn settings(&self, node: IpAddr) -> NodeSettings {
        NodeSettings {
            node,
            hash_seed: self.config.cluster.hash_seed,
            gue_port: self.config.cluster.gue_port,
            unknown_flow: self.config.cluster.unknown_flow,
            icmp_too_big_rate: self.config.cluster.icmp_too_big_rate,
        }
    }
}

/// What one step of a service's table needs of the running configuration
/// ([`ControlPlane::step_input`]).
#[derive(Clone, Copy, Debug)]
struct StepInput {
    rebalance: Rebalance,
    threshold: u32,
    /// The table size the configuration asks for.
    size: u32,
    /// Previous owners a bucket remembers.
    previous: usize,
    /// Voluntary moves are allowed now (or the table is new).
    allowed: bool,
    /// A new table, built without limits.
    fresh: bool,
}

/// One step of `key`'s table (`state`) towards its targets, with what
/// `input` says of the configuration: touches this service's state only,
/// so that the steps of a reload can run on several threads.
fn step_state(key: &ServiceKey, state: &mut ServiceState, input: &StepInput, now_ms: u64) -> Plan {
    let StepInput {
        rebalance,
        threshold,
        size,
        previous,
        allowed,
        fresh,
    } = *input;
    // A new size (the same flows keep their hops, see `Table::resized`)
    // or a new number of previous owners: the step starts from the
    // reshaped table, and what it installs is compared with the old one.
    let mut installed: Option<Arc<Table>> = None;
    if state.table.size() != size || state.table.previous_owners() != previous {
        let mut t = state.table.resized(size);
        if t.previous_owners() != previous {
            t = t.with_previous_owners(previous);
        }
        installed = Some(std::mem::replace(&mut state.table, Arc::new(t)));
    }

    let choice = targets::choose(state, threshold);
    let mode = choice.mode;
    let entering = mode.spreads_over_failures() && mode != state.mode;
    if mode.spreads_over_failures() {
        state.exiting = false;
    } else if state.mode.spreads_over_failures() && !fresh {
        state.exiting = true;
    }
    let exiting = state.exiting;
    let targets = choice.targets;
    let target_set: BTreeSet<IpAddr> = targets.iter().map(|t| t.dip).collect();
    let backends = &state.backends;
    // A backend known to fail loses its buckets at once, except while
    // the service leaves panic or fail-open: then it gives them up in
    // paced steps (they were its buckets while the service spread).
    let forced_out = |d: IpAddr| match backends.get(&d) {
        None => true,
        Some(b) => {
            !target_set.contains(&d)
                && (b.config.state == BackendState::Offline
                    || (b.verdict() == Health::Down && !(exiting && b.is_live())))
        }
    };
    // Offline and gone backends leave every chain; backends known down
    // stay (their connections may be alive) but are listed last.
    let keep = |d: IpAddr| {
        backends
            .get(&d)
            .is_some_and(|b| b.config.state != BackendState::Offline)
    };
    let down = |d: IpAddr| {
        backends
            .get(&d)
            .is_some_and(|b| b.verdict() == Health::Down)
    };
    // Entering panic or fail-open spreads at once: the backends left are
    // failing or overloaded, so there is nothing to protect by pacing,
    // and second chance keeps whatever connections they still serve.
    let limits = if fresh || entering {
        StepLimits::NONE
    } else if allowed {
        let mut l = StepLimits {
            max_moves: (size as usize * rebalance.max_step_percent as usize / 100).max(1),
            min_age_ms: rebalance.min_bucket_age_ms,
        };
        if exiting {
            // Leaving panic or fail-open: what the healthy targets own
            // may at most double per step (slow start), and the buckets
            // of the failed backends moved when the service spread, so
            // their age does not hold them back.
            let shares = state.table.shares();
            let owned: usize = target_set
                .iter()
                .map(|d| shares.get(d).copied().unwrap_or(0) as usize)
                .sum();
            l.max_moves = l.max_moves.max(owned);
            l.min_age_ms = 0;
        }
        l
    } else {
        StepLimits {
            max_moves: 0,
            min_age_ms: rebalance.min_bucket_age_ms,
        }
    };
    let rules = Rules {
        keep: &keep,
        forced_out: &forced_out,
        down: &down,
    };
    let (table, moves) = state.table.rebalance(&targets, &rules, now_ms, limits);

    let mut plan = Plan::default();
    if mode != state.mode {
        plan.mode_changed.push((*key, mode));
        state.mode = mode;
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
    let old = installed.as_ref().unwrap_or(&state.table);
    if fresh || table.size() != old.size() {
        plan.add_install(*key, moves, None);
        state.changed_at_ms = now_ms;
    } else {
        let changed = table.changed_from(old);
        if !changed.is_empty() {
            plan.add_install(*key, moves, Some(changed));
            state.changed_at_ms = now_ms;
        }
    }
    state.table = Arc::new(table);
    if state.exiting && !state.failed_owners_left() {
        state.exiting = false;
    }
    plan
}
