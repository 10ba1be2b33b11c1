//! Which backends a service's table uses, and how many buckets each should
//! own ([`choose`]): the [`Mode`] rules of docs/design.md "Tables and
//! pacing". Pure: a function of the service's state and its panic
//! threshold. Health here is a backend's [`BackendRuntime::verdict`] (down
//! if either the regular or the encapsulated check says so).

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::{BackendRuntime, Mode, ServiceState};
use crate::config::BackendState;
use crate::health::Health;
use crate::table::{capped_quotas, quotas, Target};
use crate::weights;

/// The mode a service is in and its targets, each target's weight being
/// the exact number of buckets it should own (so the table's own
/// apportionment reproduces them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Choice {
    pub mode: Mode,
    pub targets: Vec<Target>,
}

fn weight(b: &BackendRuntime) -> u32 {
    weights::table_weight(b.effective_weight)
}

fn target(b: &BackendRuntime) -> Target {
    Target {
        dip: b.config.dip,
        weight: weight(b),
    }
}

/// Bucket counts as targets (zero counts dropped).
fn counted(bs: &[&BackendRuntime], counts: &[u32]) -> Vec<Target> {
    bs.iter()
        .zip(counts)
        .filter(|(_, &n)| n > 0)
        .map(|(b, &n)| Target {
            dip: b.config.dip,
            weight: n,
        })
        .collect()
}

/// `bs` by weight.
fn spread(size: u32, bs: &[&BackendRuntime]) -> Vec<Target> {
    let ts: Vec<Target> = bs.iter().map(|b| target(b)).collect();
    counted(bs, &quotas(size, &ts))
}

/// The mode of `state` and its targets (`threshold`: the service's
/// `panic_threshold_percent`, 0 = never panic). With `L` the backends in
/// the file and not offline, and among the active ones `U` up, `K` unknown
/// and `D` down:
/// - `U` or `K` not empty: **panic** when `U ∪ K` hold less than `threshold`
///   percent of the active weight (every active backend by weight), else
///   **normal**: with `U` not empty, `U` by weight and each unknown backend
///   capped at what it owns now ([`capped_quotas`]); with only `K`, each
///   unknown backend keeps what it owns and the buckets nobody in `K` owns
///   are apportioned over `K` by weight (at daemon start that is every
///   bucket: the table is built over all of them);
/// - else drained backends that are up: **drained-fallback**, those by
///   weight;
/// - else `L` not empty: **fail-open**, `L` by weight;
/// - else normal with no target (every bucket drops).
pub(super) fn choose(state: &ServiceState, threshold: u32) -> Choice {
    let size = state.table.size();
    let owned: BTreeMap<IpAddr, u32> = state.table.shares();
    let owns = |b: &BackendRuntime| owned.get(&b.config.dip).copied().unwrap_or(0);
    let live: Vec<&BackendRuntime> = state.backends.values().filter(|b| b.is_live()).collect();
    let active: Vec<&BackendRuntime> = live
        .iter()
        .copied()
        .filter(|b| b.config.state == BackendState::Active)
        .collect();
    let up: Vec<&BackendRuntime> = active
        .iter()
        .copied()
        .filter(|b| b.verdict() == Health::Up)
        .collect();
    let unknown: Vec<&BackendRuntime> = active
        .iter()
        .copied()
        .filter(|b| b.verdict() == Health::Unknown)
        .collect();
    if !up.is_empty() || !unknown.is_empty() {
        let total: u64 = active.iter().map(|b| weight(b) as u64).sum();
        let alive: u64 = up.iter().chain(&unknown).map(|b| weight(b) as u64).sum();
        if threshold > 0 && alive * 100 < threshold as u64 * total {
            return Choice {
                mode: Mode::Panic,
                targets: spread(size, &active),
            };
        }
        let targets = if !up.is_empty() {
            let all: Vec<&BackendRuntime> = up.iter().chain(&unknown).copied().collect();
            let ts: Vec<Target> = all.iter().map(|b| target(b)).collect();
            let caps: Vec<Option<u32>> = all
                .iter()
                .map(|b| (b.verdict() == Health::Unknown).then(|| owns(b)))
                .collect();
            counted(&all, &capped_quotas(size, &ts, &caps))
        } else {
            let kept: u32 = unknown.iter().map(|b| owns(b)).sum();
            let ts: Vec<Target> = unknown.iter().map(|b| target(b)).collect();
            let extra = quotas(size - kept, &ts);
            let counts: Vec<u32> = unknown
                .iter()
                .zip(extra)
                .map(|(b, e)| owns(b) + e)
                .collect();
            counted(&unknown, &counts)
        };
        return Choice {
            mode: Mode::Normal,
            targets,
        };
    }
    let drained_up: Vec<&BackendRuntime> = live
        .iter()
        .copied()
        .filter(|b| b.config.state == BackendState::Drained && b.verdict() == Health::Up)
        .collect();
    if !drained_up.is_empty() {
        return Choice {
            mode: Mode::DrainedFallback,
            targets: spread(size, &drained_up),
        };
    }
    if !live.is_empty() {
        return Choice {
            mode: Mode::FailOpen,
            targets: spread(size, &live),
        };
    }
    Choice {
        mode: Mode::Normal,
        targets: Vec::new(),
    }
}
