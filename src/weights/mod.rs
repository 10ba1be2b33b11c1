//! Dynamic weights: a controller that nudges each backend's effective weight
//! so that the backends' loads converge (pure logic, no I/O).
//!
//! Load per backend: CPU utilisation (0..1) for `source: cpu`, or the rate of
//! new connections per unit of configured weight for `source: qps`. Each
//! round, every backend with a reading is compared with the mean:
//! - within the deadband (half of `deadband_percent` on either side; for cpu
//!   in percentage points, for qps in percent of the mean) nothing changes,
//!   unless a cpu backend is above `target_percent` and above the mean;
//! - otherwise its effective weight is multiplied by `(mean / load)^0.5`
//!   (half the correction: damped, so shares settle instead of oscillating),
//!   clamped to +- `max_change_percent` per round and to
//!   [`min_weight_percent`, `max_weight_percent`] of its configured weight.
//!
//! A backend without a reading keeps its weight (and is counted by the
//! caller). Rounds should run only once the table has caught up with the
//! previous round's weights, so that loads reflect them (see
//! `control::ControlPlane::tick`).

#[cfg(test)]
mod tests;

use crate::config::{DynamicWeight, LoadSource};

/// Exponent of the correction: 1 would jump to the estimated equilibrium at
/// once; one half converges geometrically without overshoot.
pub const GAIN: f64 = 0.5;

/// One backend's input to a round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackendLoad {
    /// Configured weight.
    pub configured: u32,
    /// Current effective weight.
    pub effective: f64,
    /// Load reading: utilisation 0..1 (cpu) or connections per second (qps);
    /// None when it could not be read.
    pub reading: Option<f64>,
}

/// Normalised load of a backend (what the controller equalises).
fn load_of(source: LoadSource, b: &BackendLoad) -> Option<f64> {
    let r = b.reading?;
    if !r.is_finite() || r < 0.0 {
        return None;
    }
    Some(match source {
        LoadSource::Cpu => r.min(1.0),
        LoadSource::Qps => r / b.configured.max(1) as f64,
    })
}

/// One round: the new effective weight of each backend (same order).
pub fn adjust(cfg: &DynamicWeight, backends: &[BackendLoad]) -> Vec<f64> {
    let loads: Vec<Option<f64>> = backends.iter().map(|b| load_of(cfg.source, b)).collect();
    let known: Vec<f64> = loads.iter().flatten().copied().collect();
    if known.len() < 2 {
        return backends.iter().map(|b| b.effective).collect();
    }
    let mean = known.iter().sum::<f64>() / known.len() as f64;
    let half_band = match cfg.source {
        LoadSource::Cpu => cfg.deadband_percent as f64 / 200.0,
        LoadSource::Qps => mean * cfg.deadband_percent as f64 / 200.0,
    };
    let target = cfg.target_percent as f64 / 100.0;
    let max_change = cfg.max_change_percent as f64 / 100.0;
    backends
        .iter()
        .zip(&loads)
        .map(|(b, load)| {
            let Some(load) = *load else {
                return b.effective;
            };
            let dev = load - mean;
            let hot = cfg.source == LoadSource::Cpu && load > target && dev > 0.0;
            if dev.abs() <= half_band && !hot {
                return b.effective;
            }
            let factor = if load <= f64::EPSILON {
                1.0 + max_change
            } else {
                (mean / load).powf(GAIN)
            };
            let factor = factor.clamp(1.0 - max_change, 1.0 + max_change);
            let lo = b.configured as f64 * cfg.min_weight_percent as f64 / 100.0;
            let hi = b.configured as f64 * cfg.max_weight_percent as f64 / 100.0;
            (b.effective * factor).clamp(lo, hi)
        })
        .collect()
}

/// CPU utilisation from two samples of cumulative CPU seconds (busy, total),
/// as node_exporter's `node_cpu_seconds_total` gives them. None when the
/// counters did not advance or went backwards (a restart).
pub fn utilisation_between(prev: (f64, f64), cur: (f64, f64)) -> Option<f64> {
    let busy = cur.0 - prev.0;
    let total = cur.1 - prev.1;
    if total <= 0.0 || busy < 0.0 {
        return None;
    }
    Some((busy / total).clamp(0.0, 1.0))
}

/// Scale of effective weights in table targets (integers): weight 100 at
/// 100 % becomes 100_000.
pub const WEIGHT_SCALE: f64 = 1000.0;

/// Integer table weight for an effective weight.
pub fn table_weight(effective: f64) -> u32 {
    (effective * WEIGHT_SCALE)
        .round()
        .clamp(1.0, u32::MAX as f64) as u32
}
