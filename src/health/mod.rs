//! Backend health (kglb style): a per-backend state machine fed by check
//! results ([`HealthState::observe`], pure) and the checkers that produce them
//! ([`checker`], async I/O).
//!
//! Rules: a backend leaves the table after `fall_count` consecutive failures
//! and returns after `rise_count` consecutive successes. At daemon start a
//! backend's state is unknown and its first result decides (one success is
//! enough, one failure takes it out); a backend added by a reload starts down
//! and needs `rise_count` successes.

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
    /// Not checked yet (daemon start): treated as healthy.
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
    /// Consecutive successes (while down) or 0.
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
}

impl HealthState {
    /// State of a backend known at daemon start.
    pub fn at_start(now_ms: u64) -> Self {
        Self::with(Health::Unknown, now_ms)
    }

    /// State of a backend added by a reload: down until `rise_count` passes.
    pub fn added(now_ms: u64) -> Self {
        Self::with(Health::Down, now_ms)
    }

    /// State of a backend that is not checked (`none` checker).
    pub fn unchecked(now_ms: u64) -> Self {
        Self::with(Health::Up, now_ms)
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
        }
    }

    /// May this backend be a first hop?
    pub fn eligible(&self) -> bool {
        self.health != Health::Down
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
            (Health::Unknown, true) => Health::Up,
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
