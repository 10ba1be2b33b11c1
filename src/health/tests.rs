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
    assert!(h.eligible());
    assert!(h.observe(ok(), 3, 2, 1), "first result decides at start");
    assert_eq!(h.health, Health::Up);
    assert!(!h.observe(bad(), 3, 2, 2));
    assert!(h.eligible(), "one failure of two is not enough");
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
fn start_failure_takes_out_at_once_and_added_needs_rise() {
    let mut h = HealthState::at_start(0);
    assert!(h.observe(bad(), 2, 2, 1));
    assert!(!h.eligible());
    let mut n = HealthState::added(0);
    assert!(!n.eligible(), "a backend added by reload starts down");
    assert!(!n.observe(ok(), 2, 2, 1));
    assert!(n.observe(ok(), 2, 2, 2));
    assert!(n.eligible());
}

#[test]
fn failures_while_down_reset_the_rise_streak() {
    let mut h = HealthState::added(0);
    h.observe(ok(), 2, 2, 1);
    h.observe(bad(), 2, 2, 2);
    assert!(!h.observe(ok(), 2, 2, 3));
    assert!(h.observe(ok(), 2, 2, 4));
}
