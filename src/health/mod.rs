//! Backend health (kglb style): a per-backend state machine fed by check
//! results ([`HealthState::observe`], pure) and the checkers that produce them
//! ([`checker`], async I/O).
//!
//! Rules (docs/design.md "Health checks"): a backend leaves the table after
//! `fall_count` consecutive failures and returns after `rise_count`
//! consecutive successes. A backend with no verdict yet is **unknown**:
//! - at daemon start (nothing known, nothing adopted) and in a service new
//!   to the running state, its first result decides (one success is enough,
//!   one failure takes it out);
//! - a backend added to a running service, one back from `offline`, or one
//!   back in the file while being removed needs `rise_count` fresh passes
//!   (one failure takes it out);
//! - a restarted daemon restores the last verdict from the pinned
//!   `control_state` map; fresh results then count as usual.
//!
//! Unknown never attracts buckets: the control plane lets an unknown backend
//! keep buckets it owns but gives it none, unless the service would
//! otherwise have no first hop (docs/design.md "Tables and pacing").
pub mod checker;
pub mod encap;
pub mod load;
pub mod periodic;

#[cfg(test)]
mod tests;

use serde::Serialize;

/// Health of one backend for one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No verdict yet: keeps buckets it owns, gains none (unless the
    /// service would otherwise have none).
    Unknown,
    /// Passing.
    Up,
    /// Failed `fall_count` times (or never passed `rise_count` times).
    Down,
}

impl std::fmt::Display for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Health::Unknown => "unknown",
            Health::Up => "up",
            Health::Down => "down",
        })
    }
}

/// The state machine of one (service, backend) pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthState {
    /// Current verdict.
    pub health: Health,
    /// Consecutive successes (while down or unknown) or 0.
    pub ok_streak: u32,
    /// Consecutive failures (while up) or 0.
    pub fail_streak: u32,
    /// Up/down transitions so far.
    pub transitions: u64,
    /// Text of the last failure, if the last check failed.
    pub last_error: Option<String>,
    /// Caller's clock (ms) at the last result and at the last transition.
    pub last_check_ms: Option<u64>,
    /// When `health` last changed.
    pub since_ms: u64,
    /// While unknown: the first result decides (daemon start, new service)
    /// instead of `rise_count` passes (added, back from offline).
    pub first_result_decides: bool,
}

impl HealthState {
    /// State of a backend at daemon start or in a new service: unknown, the
    /// first result decides.
    pub fn at_start(now_ms: u64) -> Self {
        Self::with(Health::Unknown, now_ms)
    }

    /// State of a backend that must prove itself again: added to a running
    /// service, back from `offline`, or back in the file while being
    /// removed. Unknown until `rise_count` consecutive passes; one failure
    /// takes it down.
    pub fn recheck(now_ms: u64) -> Self {
        HealthState {
            first_result_decides: false,
            ..Self::with(Health::Unknown, now_ms)
        }
    }

    /// State of a backend that is not checked (`none` checker).
    pub fn unchecked(now_ms: u64) -> Self {
        Self::with(Health::Up, now_ms)
    }

    /// A verdict restored from the pinned `control_state` map after a
    /// restart: the verdict, its transitions and since when it holds; the
    /// streaks start over.
    pub fn restored(
        health: Health,
        transitions: u64,
        since_ms: u64,
        first_result_decides: bool,
    ) -> Self {
        HealthState {
            transitions,
            first_result_decides,
            ..Self::with(health, since_ms)
        }
    }

    fn with(health: Health, now_ms: u64) -> Self {
        HealthState {
            health,
            ok_streak: 0,
            fail_streak: 0,
            transitions: 0,
            last_error: None,
            last_check_ms: None,
            since_ms: now_ms,
            first_result_decides: true,
        }
    }

    /// Passing its checks.
    pub fn is_up(&self) -> bool {
        self.health == Health::Up
    }

    /// Known to fail its checks.
    pub fn is_down(&self) -> bool {
        self.health == Health::Down
    }

    /// Keep the verdict but restart the streaks (the check itself changed).
    pub fn restart_streaks(&mut self) {
        self.ok_streak = 0;
        self.fail_streak = 0;
    }

    /// Record one result. Returns true when `health` changed.
    pub fn observe(
        &mut self,
        result: Result<(), String>,
        rise_count: u32,
        fall_count: u32,
        now_ms: u64,
    ) -> bool {
        self.last_check_ms = Some(now_ms);
        let ok = result.is_ok();
        self.last_error = result.err();
        let next = match (self.health, ok) {
            (Health::Unknown, true) => {
                self.ok_streak += 1;
                if self.first_result_decides || self.ok_streak >= rise_count {
                    Health::Up
                } else {
                    Health::Unknown
                }
            }
            (Health::Unknown, false) => Health::Down,
            (Health::Up, true) => {
                self.fail_streak = 0;
                Health::Up
            }
            (Health::Up, false) => {
                self.fail_streak += 1;
                if self.fail_streak >= fall_count {
                    Health::Down
                } else {
                    Health::Up
                }
            }
            (Health::Down, false) => {
                self.ok_streak = 0;
                Health::Down
            }
            (Health::Down, true) => {
                self.ok_streak += 1;
                if self.ok_streak >= rise_count {
                    Health::Up
                } else {
                    Health::Down
                }
            }
        };
        if next == self.health {
            return false;
        }
        self.health = next;
        self.ok_streak = 0;
        self.fail_streak = 0;
        self.transitions += 1;
        self.since_ms = now_ms;
        true
    }
}
