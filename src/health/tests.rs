use super::*;

fn ok() -> Result<(), String> {
    Ok(())
}
fn bad() -> Result<(), String> {
    Err("connection refused".into())
}

#[test]
fn falls_after_fall_count_and_rises_after_rise_count() {
    let mut h = HealthState::at_start(0);
    assert_eq!(h.health, Health::Unknown);
    assert!(h.observe(ok(), 3, 2, 1), "first result decides at start");
    assert_eq!(h.health, Health::Up);
    assert!(!h.observe(bad(), 3, 2, 2));
    assert!(h.is_up(), "one failure of two is not enough");
    assert!(
        !h.observe(ok(), 3, 2, 3),
        "a success resets the failure streak"
    );
    assert!(!h.observe(bad(), 3, 2, 4));
    assert!(h.observe(bad(), 3, 2, 5));
    assert_eq!(h.health, Health::Down);
    assert_eq!(h.last_error.as_deref(), Some("connection refused"));
    assert!(!h.observe(ok(), 3, 2, 6));
    assert!(!h.observe(ok(), 3, 2, 7));
    assert!(h.observe(ok(), 3, 2, 8), "third success brings it back");
    assert_eq!((h.health, h.transitions, h.since_ms), (Health::Up, 3, 8));
    assert_eq!(h.last_error, None);
}

#[test]
fn start_failure_takes_out_at_once_and_recheck_needs_rise() {
    let mut h = HealthState::at_start(0);
    assert!(h.observe(bad(), 2, 2, 1));
    assert!(h.is_down());
    let mut n = HealthState::recheck(0);
    assert_eq!(n.health, Health::Unknown, "no verdict yet, not down");
    assert!(!n.observe(ok(), 2, 2, 1), "one pass of rise_count 2");
    assert_eq!(n.health, Health::Unknown);
    assert!(n.observe(ok(), 2, 2, 2));
    assert!(n.is_up());
    let mut f = HealthState::recheck(0);
    assert!(f.observe(bad(), 2, 2, 1), "one failure takes it down");
    assert!(f.is_down());
}

#[test]
fn failures_while_down_reset_the_rise_streak() {
    let mut h = HealthState::recheck(0);
    h.observe(ok(), 2, 2, 1);
    h.observe(bad(), 2, 2, 2);
    assert!(h.is_down());
    assert!(!h.observe(ok(), 2, 2, 3));
    assert!(h.observe(ok(), 2, 2, 4));
}

#[test]
fn a_restored_verdict_holds_until_fresh_results_say_otherwise() {
    let mut h = HealthState::restored(Health::Down, 5, 100, true);
    assert!(h.is_down());
    assert_eq!((h.transitions, h.since_ms), (5, 100));
    assert!(!h.observe(ok(), 2, 2, 200), "down needs rise_count passes");
    assert!(h.observe(ok(), 2, 2, 300));
    assert_eq!(h.transitions, 6);
}
