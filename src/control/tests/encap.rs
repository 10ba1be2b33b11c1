//! The encapsulated check in the control plane: a backend is eligible only
//! while neither its regular check nor its encapsulated check is down; both
//! have rise and fall; and the rounding of `max_step_percent`.

use super::*;

fn encap_fail(cp: &mut ControlPlane, dip: IpAddr, now: u64) -> Option<Plan> {
    cp.observe_encap(&key(), dip, Err("no SYN-ACK".into()), now)
}

fn encap_pass(cp: &mut ControlPlane, dip: IpAddr, now: u64) -> Option<Plan> {
    cp.observe_encap(&key(), dip, Ok(()), now)
}

#[test]
fn a_backend_whose_encapsulated_check_fails_is_taken_out_at_once() {
    let mut cp = ControlPlane::new(
        cfg(
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            64,
        ),
        0,
    );
    for b in [B11, B12, B13] {
        pass(&mut cp, b, 1);
        encap_pass(&mut cp, b, 1);
    }
    assert_eq!(table(&cp).shares()[&B13], 21);
    // The regular (HTTP/TCP) check keeps passing; the GUE path is broken.
    assert!(encap_fail(&mut cp, B13, 2).is_none(), "fall_count = 2");
    pass(&mut cp, B13, 2);
    let plan = encap_fail(&mut cp, B13, 3).expect("second failure: out");
    assert_eq!(plan.install[&key()].forced, 21, "forced, at once");
    assert_eq!(table(&cp).shares().get(&B13), None);
    assert_eq!(table(&cp).second_shares()[&B13], 21, "stays second hop");
    let b = &cp.service(&key()).unwrap().backends[&B13];
    assert_eq!(
        (b.health.health, b.encap.health),
        (Health::Up, Health::Down)
    );
    // Back after rise_count encapsulated passes (paced: no limits here).
    assert!(encap_pass(&mut cp, B13, 4).is_none());
    assert!(encap_pass(&mut cp, B13, 5).is_some());
    assert_eq!(table(&cp).shares()[&B13], 21);
}

#[test]
fn unknown_encapsulated_state_does_not_keep_a_backend_out() {
    // At start (and for backends added later) only Down counts: a restart
    // must not move buckets before the first encapsulated result.
    let cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64), 0);
    let b = &cp.service(&key()).unwrap().backends[&B12];
    assert_eq!(b.encap.health, Health::Unknown);
    assert_eq!(table(&cp).shares()[&B12], 32);
    let targets = cp.encap_targets();
    assert_eq!(targets.len(), 2, "both backends are checked through GUE");
}

#[test]
fn turning_the_check_off_forgets_its_verdict() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64), 0);
    // Regular checks up (an unknown backend would gain no bucket back).
    pass(&mut cp, B11, 0);
    pass(&mut cp, B12, 0);
    encap_fail(&mut cp, B12, 1);
    assert_eq!(table(&cp).shares().get(&B12), None);
    let mut off = cfg(&[(11, 1, "active"), (12, 1, "active")], 64);
    off.services[0].encap_check = false;
    cp.update(off, 2);
    let b = &cp.service(&key()).unwrap().backends[&B12];
    assert_eq!(b.encap.health, Health::Up, "not checked: no verdict");
    assert!(cp.encap_targets().is_empty());
    assert!(
        encap_fail(&mut cp, B12, 3).is_none(),
        "results of a stopped check are ignored"
    );
    assert_eq!(
        table(&cp).shares()[&B12],
        32,
        "regular health alone decides"
    );
}

#[test]
fn max_step_percent_is_at_most() {
    // 10 % of 256 buckets: at most 25 per step (not 26).
    let mut cp = ControlPlane::new(
        cfg_with(&[(11, 1, "active"), (12, 1, "active")], 256, (0, 10, 0)),
        0,
    );
    // Up (a weight change moves no bucket among backends without a verdict).
    pass(&mut cp, B11, 0);
    pass(&mut cp, B12, 0);
    let plan = cp.update(
        cfg_with(&[(11, 3, "active"), (12, 1, "active")], 256, (0, 10, 0)),
        1,
    );
    assert_eq!(plan.install[&key()].moved, 25);
    // A table too small for one percent still moves one bucket per step.
    let mut cp = ControlPlane::new(
        cfg_with(&[(11, 1, "active"), (12, 1, "active")], 32, (0, 1, 0)),
        0,
    );
    pass(&mut cp, B11, 0);
    pass(&mut cp, B12, 0);
    let plan = cp.update(
        cfg_with(&[(11, 3, "active"), (12, 1, "active")], 32, (0, 1, 0)),
        1,
    );
    assert_eq!(plan.install[&key()].moved, 1);
}
