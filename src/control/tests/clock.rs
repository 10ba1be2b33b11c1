//! 17.7: pacing does not follow the wall clock. The daemon feeds the
//! control plane [`crate::clock::control_ms`] (the boot-time clock); a
//! simulated daemon loop here runs a paced drain and its undo under a
//! wall-clock step of ±1 h, once on that clock and once on the wall clock
//! (what the daemon used to feed), and prints both.

use super::*;
use crate::clock::tests::SimClock;
use crate::clock::{control_ms, Clock};

/// What a run did, in boot-time ms since the drain.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// When .13 owned no bucket any more (None: not within the run).
    drained_after_ms: Option<u64>,
    /// Buckets of .13 drained 3 s after the drain began.
    drained_at_3s: u32,
    /// Buckets whose first hop changed twice within `min_bucket_age_ms`
    /// (30 s) of real time: connections of their first owner are lost.
    moved_twice_too_soon: usize,
    /// The table at the end.
    end: Vec<crate::table::Bucket>,
}

/// A daemon loop: tick every 200 ms on `now(clock)`; .13 drained at boot
/// +0, the wall clock stepped by `wall_step_ms` at +1 s, the drain undone
/// at +6 s, run until +40 s.
fn run(now: fn(&SimClock) -> u64, wall_step_ms: i64) -> Outcome {
    let clock = SimClock::new(5_000_000, 1_750_000_000_000);
    let states = |s13: &str| {
        cfg_with(
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, s13)],
            1024,
            (500, 5, 30_000),
        )
    };
    let mut cp = ControlPlane::new(states("active"), now(&clock));
    for d in [B11, B12, B13] {
        pass(&mut cp, d, now(&clock));
    }
    let start = clock.boot_ms();
    let mut last_move: Vec<Option<u64>> = vec![None; 1024];
    let mut twice = BTreeSet::new();
    let mut prev = table(&cp).clone();
    let mut out = Outcome {
        drained_after_ms: None,
        drained_at_3s: 0,
        moved_twice_too_soon: 0,
        end: Vec::new(),
    };
    cp.update(states("drained"), now(&clock));
    loop {
        let t = clock.boot_ms() - start;
        // Real (boot) time of each bucket's moves.
        for (i, (a, b)) in prev.buckets().iter().zip(table(&cp).buckets()).enumerate() {
            if a.first() != b.first() {
                if last_move[i].is_some_and(|m| t - m < 30_000) {
                    twice.insert(i);
                }
                last_move[i] = Some(t);
            }
        }
        prev = table(&cp).clone();
        if out.drained_after_ms.is_none() && owned(&cp, B13) == 0 {
            out.drained_after_ms = Some(t);
        }
        if t == 3000 {
            out.drained_at_3s = 341 - owned(&cp, B13);
        }
        if t == 1000 {
            clock.step_wall(wall_step_ms);
        }
        if t == 6000 {
            cp.update(states("active"), now(&clock));
        }
        if t >= 40_000 {
            break;
        }
        clock.advance(200);
        cp.tick(now(&clock));
    }
    out.moved_twice_too_soon = twice.len();
    out.end = table(&cp).buckets().to_vec();
    out
}

#[test]
fn a_wall_clock_step_changes_no_pacing() {
    let wall: fn(&SimClock) -> u64 = |c| c.wall_ms();
    let boot: fn(&SimClock) -> u64 = |c| control_ms(c);
    let reference = run(boot, 0);
    println!(
        "no step: drained 341 buckets after {:?} ms, {} moved twice within 30 s",
        reference.drained_after_ms, reference.moved_twice_too_soon
    );
    for step in [-3_600_000i64, 3_600_000] {
        let old = run(wall, step);
        let new = run(boot, step);
        println!(
            "wall clock {:+} h: on the wall clock (before) drained {}/341 after 3 s, all after {:?} ms, {} buckets moved twice within 30 s; on the boot clock (now) {}/341, all after {:?} ms, {} moved twice",
            step / 3_600_000,
            old.drained_at_3s,
            old.drained_after_ms,
            old.moved_twice_too_soon,
            new.drained_at_3s,
            new.drained_after_ms,
            new.moved_twice_too_soon
        );
        assert_eq!(new, reference, "the step changed something");
    }
    assert!(reference.drained_after_ms.is_some_and(|t| t <= 4000));
    assert_eq!(reference.moved_twice_too_soon, 0);
}
