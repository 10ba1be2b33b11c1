//! Which backends a table uses when health is missing or bad
//! (docs/design.md "Tables and pacing"): healthy drained backends before
//! fail-open (10.4), a fresh verdict after `offline` and for new backends
//! (10.5), the panic threshold and the paced exit from panic and fail-open
//! (17.9). Simulations print their numbers (`--nocapture`).

use super::*;

/// Shares of .11, .12, .13 (0 for none).
fn shares3(cp: &ControlPlane) -> [u32; 3] {
    [owned(cp, B11), owned(cp, B12), owned(cp, B13)]
}

/// 10.4: .11 drained but healthy, .12 and .13 active and failing. The
/// healthy drained backend serves rather than the service failing open
/// onto the two dead ones; fail-open comes only when .11 fails too.
#[test]
fn a_healthy_drained_backend_is_preferred_over_failing_open() {
    let c = cfg(
        &[(11, 1, "drained"), (12, 1, "active"), (13, 1, "active")],
        1024,
    );
    let mut cp = ControlPlane::new(c, 0);
    pass(&mut cp, B11, 10);
    fail(&mut cp, B12, 20).expect("down");
    let plan = fail(&mut cp, B13, 30).expect("down");
    let s = cp.service(&key()).unwrap();
    println!(
        "no active backend healthy, .11 drained and up: mode {}, shares {:?} (dead backends: {} of 1024)",
        s.mode.name(),
        shares3(&cp),
        owned(&cp, B12) + owned(&cp, B13)
    );
    assert_eq!(plan.mode_changed, [(key(), Mode::DrainedFallback)]);
    assert_eq!(shares3(&cp), [1024, 0, 0]);
    assert!(!s.fail_open());
    // .11 fails as well: now nothing is healthy, the service fails open.
    fail(&mut cp, B11, 40);
    let plan = fail(&mut cp, B11, 50).expect("down");
    assert_eq!(plan.mode_changed, [(key(), Mode::FailOpen)]);
    assert_eq!(shares3(&cp), [342, 341, 341]);
    // An active backend recovers: normal again.
    pass(&mut cp, B12, 60);
    let plan = pass(&mut cp, B12, 70).expect("up");
    assert_eq!(plan.mode_changed, [(key(), Mode::Normal)]);
}

/// 10.5: a backend set offline and active again by reload starts from
/// unknown with a fresh check: with its check failing it never gets a
/// bucket; with passing checks it needs rise_count (2) of them.
#[test]
fn back_from_offline_needs_fresh_passes_and_gets_nothing_while_failing() {
    let states = |s3: &str| cfg(&[(11, 1, "active"), (12, 1, "active"), (13, 1, s3)], 1024);
    for failing in [true, false] {
        let mut cp = ControlPlane::new(states("active"), 0);
        for d in [B11, B12, B13] {
            pass(&mut cp, d, 0);
        }
        cp.update(states("offline"), 1000);
        assert_eq!(owned(&cp, B13), 0);
        assert!(!cp.check_targets().iter().any(|t| t.dip == B13));
        cp.update(states("active"), 2000);
        let h = &cp.service(&key()).unwrap().backends[&B13].health;
        assert_eq!(h.health, Health::Unknown, "its old verdict is stale");
        let mut most = owned(&cp, B13);
        let mut t = 2000;
        for step in 1..=20 {
            t += 200;
            cp.tick(t);
            if step % 5 == 0 {
                if failing {
                    fail(&mut cp, B13, t);
                } else {
                    pass(&mut cp, B13, t);
                }
                if !failing && step == 5 {
                    assert_eq!(owned(&cp, B13), 0, "one pass of rise_count 2");
                }
            }
            most = most.max(owned(&cp, B13));
        }
        println!(
            "offline -> active, check {}: at most {most} buckets while failing/unproven, {} at the end",
            if failing { "failing" } else { "passing" },
            owned(&cp, B13)
        );
        if failing {
            assert_eq!(most, 0);
        } else {
            assert_eq!(owned(&cp, B13), 341);
        }
    }
}

/// 10.5, the rule for new services: a service added by reload has no
/// healthy backend, so (like at daemon start) its table is built over all
/// of its unknown backends; the first result of each decides, and a
/// failure moves its buckets at once.
#[test]
fn a_new_service_is_built_over_its_unknown_backends_and_first_results_decide() {
    let one = cfg(&[(11, 1, "active")], 1024);
    let mut cp = ControlPlane::new(one, 0);
    pass(&mut cp, B11, 0);
    let mut two = cfg(&[(11, 1, "active")], 1024);
    let mut api = two.services[0].clone();
    api.name = "api".into();
    api.port = 443;
    api.backends = cfg(&[(12, 1, "active"), (13, 1, "active")], 1024).services[0]
        .backends
        .clone();
    two.services.push(api.clone());
    let plan = cp.update(two, 1000);
    let k = api.key();
    assert!(plan.install.contains_key(&k));
    let s = cp.service(&k).unwrap();
    let shares = s.table.shares();
    assert_eq!((shares[&B12], shares[&B13]), (512, 512));
    assert!(s
        .backends
        .values()
        .all(|b| b.health.health == Health::Unknown && b.health.first_result_decides));
    let plan = cp
        .observe(&k, B13, Err("refused".into()), 1100)
        .expect("down");
    assert_eq!(plan.install[&k].forced, 512, "a failure moves at once");
    assert_eq!(cp.service(&k).unwrap().table.shares()[&B12], 1024);
}

/// A backend added to a running service that has healthy backends gets no
/// bucket until it has passed rise_count checks.
#[test]
fn a_backend_added_to_a_running_service_gains_nothing_until_it_rises() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 1024), 0);
    pass(&mut cp, B11, 0);
    pass(&mut cp, B12, 0);
    let plan = cp.update(
        cfg(
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            1024,
        ),
        1000,
    );
    assert!(plan.install.is_empty(), "{plan:?}");
    assert_eq!(owned(&cp, B13), 0);
    assert!(pass(&mut cp, B13, 1100).is_none(), "1 of rise_count 2");
    assert_eq!(owned(&cp, B13), 0);
    pass(&mut cp, B13, 1200).expect("up");
    assert_eq!(owned(&cp, B13), 341, "no pacing configured here");
}

/// 17.9: backends fail one by one. Without a panic threshold the last
/// healthy one takes every bucket (3x its share); with 50 % the service
/// panics once less than half the weight is healthy and keeps every
/// active backend in the table.
#[test]
fn below_the_panic_threshold_every_active_backend_is_used() {
    for threshold in [0, 50] {
        let c = cfg_full(
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            1024,
            (0, 100, 0),
            threshold,
        );
        let mut cp = ControlPlane::new(c, 0);
        for d in [B11, B12, B13] {
            pass(&mut cp, d, 0);
        }
        let mut line = vec![format!("{:?}", shares3(&cp))];
        for (i, d) in [B13, B12].into_iter().enumerate() {
            let t = 1000 * (i as u64 + 1);
            fail(&mut cp, d, t);
            fail(&mut cp, d, t + 1);
            let s = cp.service(&key()).unwrap();
            line.push(format!("{:?} {}", shares3(&cp), s.mode.name()));
        }
        println!("panic_threshold_percent {threshold}: {}", line.join(" -> "));
        let s = cp.service(&key()).unwrap();
        if threshold == 0 {
            assert_eq!(shares3(&cp), [1024, 0, 0], "0 disables panic");
            assert_eq!(s.mode, Mode::Normal);
        } else {
            assert_eq!(s.mode, Mode::Panic);
            assert_eq!(shares3(&cp), [342, 341, 341]);
        }
    }
}

/// 17.9: leaving fail-open (and panic) is paced and weighted. All three
/// fail (fail-open, 1/3 each); .11 recovers: what the healthy backends own
/// at most doubles per step (one step per min_interval_ms), instead of
/// 1024 buckets at once; .12 recovering during the exit shares by weight.
#[test]
fn leaving_fail_open_is_paced_and_weighted() {
    let c = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        1024,
        (10_000, 2, 300_000),
    );
    let mut cp = ControlPlane::new(c, 0);
    for d in [B11, B12, B13] {
        fail(&mut cp, d, 0);
    }
    assert!(cp.service(&key()).unwrap().fail_open());
    assert_eq!(shares3(&cp), [342, 341, 341]);
    pass(&mut cp, B11, 20_000);
    let plan = pass(&mut cp, B11, 21_000).expect("up");
    assert_eq!(plan.mode_changed, [(key(), Mode::Normal)]);
    let mut steps = vec![(21_000, shares3(&cp))];
    let mut t = 21_000;
    let mut prev = 342;
    while cp.service(&key()).unwrap().exiting {
        t += 200;
        cp.tick(t);
        let now = owned(&cp, B11);
        if now != prev {
            assert!(now <= 2 * prev, "more than doubled: {prev} -> {now}");
            steps.push((t, shares3(&cp)));
            prev = now;
        }
        assert!(t < 200_000);
    }
    println!("fail-open exit, .11 back (t ms, shares): {steps:?}");
    assert!(steps[0].1[0] <= 684, "first step at most doubles");
    assert_eq!(shares3(&cp), [1024, 0, 0]);
    assert!(steps.len() >= 2, "paced: {steps:?}");

    // Weighted: four backends fail, .11 comes back and .12 follows half
    // way through the exit; the failed ones' buckets go to both by weight.
    let c = cfg_with(
        &[
            (11, 1, "active"),
            (12, 1, "active"),
            (13, 1, "active"),
            (14, 1, "active"),
        ],
        1024,
        (10_000, 2, 300_000),
    );
    let b14: IpAddr = Ipv4Addr::new(10, 0, 0, 14).into();
    let mut cp = ControlPlane::new(c, 0);
    for d in [B11, B12, B13, b14] {
        fail(&mut cp, d, 0);
    }
    pass(&mut cp, B11, 20_000);
    pass(&mut cp, B11, 21_000).expect("up");
    let four = |cp: &ControlPlane| {
        [
            owned(cp, B11),
            owned(cp, B12),
            owned(cp, B13),
            owned(cp, b14),
        ]
    };
    let mut log = vec![(21_000, four(&cp))];
    let mut t = 21_000;
    while cp.service(&key()).unwrap().exiting || cp.service(&key()).unwrap().pending > 0 {
        t += 1000;
        if t == 25_000 {
            pass(&mut cp, B12, t);
        }
        if t == 26_000 {
            pass(&mut cp, B12, t).expect("up");
        }
        cp.tick(t);
        if log.last().map(|l| l.1) != Some(four(&cp)) {
            log.push((t, four(&cp)));
        }
        assert!(t < 2_000_000);
    }
    println!("4 backends, .11 back at 21 s, .12 at 26 s (t ms, shares): {log:?}");
    assert_eq!(
        log[0].1,
        [512, 170, 171, 171],
        "first step: .11 doubles, the failed give alike"
    );
    assert_eq!(four(&cp), [512, 512, 0, 0]);
}

/// Leaving panic is paced the same way, and entering it spreads at once.
/// Five backends, threshold 30 %: four down (20 %) panics; one back (40 %)
/// leaves panic, what the two healthy ones own at most doubling per step.
#[test]
fn panic_is_entered_at_once_and_left_in_paced_steps() {
    let spec: Vec<(u8, u32, &str)> = (11..=15).map(|l| (l, 1, "active")).collect();
    let c = cfg_full(&spec, 1024, (10_000, 2, 300_000), 30);
    let ips: Vec<IpAddr> = (11..=15)
        .map(|l| Ipv4Addr::new(10, 0, 0, l).into())
        .collect();
    let mut cp = ControlPlane::new(c, 0);
    for &d in &ips {
        pass(&mut cp, d, 0);
    }
    for &d in &ips[1..] {
        fail(&mut cp, d, 100);
        fail(&mut cp, d, 200);
    }
    let s = cp.service(&key()).unwrap();
    assert_eq!(s.mode, Mode::Panic);
    assert_eq!(owned(&cp, B11), 205, "spread at once, not paced");
    pass(&mut cp, B12, 20_000);
    let plan = pass(&mut cp, B12, 21_000).expect("up");
    assert_eq!(plan.mode_changed, [(key(), Mode::Normal)]);
    let healthy = |cp: &ControlPlane| owned(cp, B11) + owned(cp, B12);
    let mut log = vec![(21_000, healthy(&cp))];
    let mut t = 21_000;
    while cp.service(&key()).unwrap().exiting {
        t += 200;
        if cp.tick(t).install.contains_key(&key()) {
            let (_, prev) = *log.last().unwrap();
            assert!(healthy(&cp) <= 2 * prev, "more than doubled");
            log.push((t, healthy(&cp)));
        }
        assert!(t < 200_000);
    }
    println!("panic exit, buckets of the two healthy backends (t ms, buckets): {log:?}");
    assert!(log[0].1 <= 2 * 410, "first step at most doubles: {log:?}");
    assert!(log.len() >= 2, "paced: {log:?}");
    assert_eq!((owned(&cp, B11), owned(&cp, B12)), (512, 512));
}
