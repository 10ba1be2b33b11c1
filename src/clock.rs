//! The control plane's clock (docs/design.md "Tables and pacing", "Restarts
//! and adoption").
//!
//! Every duration the control plane measures (pacing steps, minimum bucket
//! age, health timing, removals) and every time it keeps in the maps (bucket
//! move times, the `control_state` map) is on the kernel's boot-time clock
//! (`CLOCK_BOOTTIME`, milliseconds): it never steps when the wall clock is
//! set, it keeps counting while the machine is suspended, and it is the same
//! clock for every process on the machine, so a restarted daemon reads the
//! times its predecessor wrote. The wall clock is used only for what people
//! read (timestamps in the state file and logs) and to convert move times
//! that an older nilb stored as Unix seconds ([`adopted_move_time`]).
//!
//! [`Clock`] is the seam: the daemon reads [`SystemClock`]; tests inject a
//! clock whose wall time jumps.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where the daemon reads time.
pub trait Clock {
    /// `CLOCK_BOOTTIME` in milliseconds: monotonic, never stepped.
    fn boot_ms(&self) -> u64;
    /// The wall clock (Unix time) in milliseconds: may jump either way.
    fn wall_ms(&self) -> u64;
}

/// The machine's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn boot_ms(&self) -> u64 {
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
            .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
            .expect("CLOCK_BOOTTIME is always readable on Linux")
    }

    fn wall_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// The time the control plane runs on: boot-time milliseconds. The daemon
/// passes this to every [`crate::control::ControlPlane`] event.
pub fn control_ms(clock: &dyn Clock) -> u64 {
    clock.boot_ms()
}

/// A bucket move time read from a live table (stored as whole seconds, here
/// in milliseconds), on the control plane's clock.
///
/// nilb stores boot-time seconds. Older versions stored Unix seconds; such a
/// value lies in the future of the boot clock (a boot-time value cannot:
/// pinned maps do not outlive a reboot), so anything later than now is
/// taken as Unix time and converted by its age on the wall clock. A Unix
/// time in the future of the wall clock counts as "now" (the bucket is
/// treated as just moved: the safe side); one older than the boot counts as
/// "at boot".
pub fn adopted_move_time(
    stored_ms: Option<u64>,
    boot_now_ms: u64,
    wall_now_ms: u64,
) -> Option<u64> {
    let t = stored_ms?;
    // One second of slack: stored values are truncated to seconds.
    if t <= boot_now_ms + 1000 {
        return Some(t.min(boot_now_ms));
    }
    let age = wall_now_ms.saturating_sub(t);
    Some(boot_now_ms.saturating_sub(age))
}

/// Wall-clock time (Unix ms) of a bucket move time as stored (seconds, in
/// ms here), for people to read: boot-time values are placed by their age,
/// Unix values of older daemons (see [`adopted_move_time`]) taken as they
/// are.
pub fn move_time_on_wall(stored_ms: u64, boot_now_ms: u64, wall_now_ms: u64) -> u64 {
    if stored_ms > boot_now_ms + 1000 {
        return stored_ms;
    }
    wall_now_ms.saturating_sub(boot_now_ms.saturating_sub(stored_ms))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::Cell;

    /// A clock for tests: boot time advances only when told; the wall clock
    /// is boot time plus an offset that a test can step.
    #[derive(Debug)]
    pub(crate) struct SimClock {
        pub boot: Cell<u64>,
        pub wall_offset: Cell<i64>,
    }

    impl SimClock {
        pub(crate) fn new(boot_ms: u64, wall_ms: u64) -> Self {
            SimClock {
                boot: Cell::new(boot_ms),
                wall_offset: Cell::new(wall_ms as i64 - boot_ms as i64),
            }
        }

        pub(crate) fn advance(&self, ms: u64) {
            self.boot.set(self.boot.get() + ms);
        }

        /// Set the wall clock by `delta_ms` (`date -s`), boot time unchanged.
        pub(crate) fn step_wall(&self, delta_ms: i64) {
            self.wall_offset.set(self.wall_offset.get() + delta_ms);
        }
    }

    impl Clock for SimClock {
        fn boot_ms(&self) -> u64 {
            self.boot.get()
        }
        fn wall_ms(&self) -> u64 {
            (self.boot.get() as i64 + self.wall_offset.get()) as u64
        }
    }

    #[test]
    fn the_system_boot_clock_is_monotonic_and_not_the_wall_clock() {
        let c = SystemClock;
        let (a, w) = (c.boot_ms(), c.wall_ms());
        let b = c.boot_ms();
        assert!(b >= a);
        // Boot time is far below Unix time (decades apart).
        assert!(w > a + 1_000_000_000_000, "boot {a} wall {w}");
        assert_eq!(control_ms(&c) / 1000, c.boot_ms() / 1000);
    }

    #[test]
    fn move_times_read_on_the_wall_clock() {
        let (boot, wall) = (3_600_000, 1_750_000_000_000);
        assert_eq!(move_time_on_wall(3_000_000, boot, wall), wall - 600_000);
        assert_eq!(move_time_on_wall(wall - 5000, boot, wall), wall - 5000);
    }

    #[test]
    fn move_times_of_older_daemons_are_converted_by_their_age() {
        let boot_now = 3_600_000; // one hour after boot
        let wall_now = 1_750_000_000_000;
        // Our own format passes through.
        assert_eq!(
            adopted_move_time(Some(3_000_000), boot_now, wall_now),
            Some(3_000_000)
        );
        assert_eq!(adopted_move_time(None, boot_now, wall_now), None);
        // Unix seconds written 20 s ago: 20 s before now on the boot clock.
        assert_eq!(
            adopted_move_time(Some(wall_now - 20_000), boot_now, wall_now),
            Some(boot_now - 20_000)
        );
        // Written "in the future" (the wall clock went back since): now.
        assert_eq!(
            adopted_move_time(Some(wall_now + 3_600_000), boot_now, wall_now),
            Some(boot_now)
        );
        // Older than the boot (the wall clock went forward since): at boot.
        assert_eq!(
            adopted_move_time(Some(wall_now - 7_200_000), boot_now, wall_now),
            Some(0)
        );
    }
}
