//! Unit tests of the control plane's state machine (tables, health,
//! reloads, adoption); [`apply`] tests how a plan is written through
//! [`DataplaneOps`] into the recording [`fake`].

mod apply;
mod clock;
mod encap;
mod fake;
mod follow;
mod kernel;
mod modes;
mod reload;
mod restart;

use super::*;
use std::net::Ipv4Addr;

const B11: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11));
const B12: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 12));
const B13: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 13));

/// One TCP service with the given backends (`last octet, weight, state`),
/// a TCP check, and rebalance limits (interval ms, percent, min age ms).
fn cfg_with(weights: &[(u8, u32, &str)], table_size: u32, rebalance: (u64, u32, u64)) -> Config {
    cfg_full(weights, table_size, rebalance, 0)
}

/// [`cfg_with`] plus a panic threshold.
fn cfg_full(
    weights: &[(u8, u32, &str)],
    table_size: u32,
    rebalance: (u64, u32, u64),
    panic_threshold_percent: u32,
) -> Config {
    let mut y = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.11], hash_seed: 7}}\ndefaults:\n  rebalance: {{min_interval_ms: {}, max_step_percent: {}, min_bucket_age_ms: {}}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: {table_size}\n    panic_threshold_percent: {panic_threshold_percent}\n    health_check: {{tcp: {{}}, interval_ms: 1000, timeout_ms: 500, rise_count: 2, fall_count: 2}}\n    backends:\n",
        rebalance.0, rebalance.1, rebalance.2
    );
    for (last, w, state) in weights {
        y += &format!("      - {{dip: 10.0.0.{last}, weight: {w}, state: {state}}}\n");
    }
    Config::parse(&y).unwrap()
}

/// What a restarted daemon reads from the pins of `cp`'s data plane: each
/// table with its move times as stored (whole seconds, at least 1) and the
/// counter slot of each first hop (as `read_tables` finds them).
fn pinned(cp: &ControlPlane) -> Vec<(ServiceKey, crate::dataplane::LiveTable)> {
    cp.services()
        .iter()
        .map(|(key, st)| {
            let t = &st.table;
            (
                *key,
                crate::dataplane::LiveTable {
                    service_index: st.index,
                    chains: crate::dataplane::LiveTable::chains_of(t),
                    moved_at: (0..t.size() as usize)
                        .map(|i| t.moved_at(i).map(|ms| (ms / 1000).max(1) * 1000))
                        .collect(),
                    slots: t
                        .shares()
                        .keys()
                        .map(|d| (*d, st.backends[d].slot))
                        .collect(),
                },
            )
        })
        .collect()
}

/// Buckets `dip` owns as first hop.
fn owned(cp: &ControlPlane, dip: IpAddr) -> u32 {
    table(cp).shares().get(&dip).copied().unwrap_or(0)
}

/// No rate limits.
fn cfg(weights: &[(u8, u32, &str)], table_size: u32) -> Config {
    cfg_with(weights, table_size, (0, 100, 0))
}

fn key() -> ServiceKey {
    ServiceKey {
        vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
        port: 80,
        protocol: crate::config::Protocol::Tcp,
    }
}

fn table(cp: &ControlPlane) -> &Table {
    &cp.service(&key()).unwrap().table
}

fn fail(cp: &mut ControlPlane, dip: IpAddr, now: u64) -> Option<Plan> {
    cp.observe(&key(), dip, Err("refused".into()), now)
}

fn pass(cp: &mut ControlPlane, dip: IpAddr, now: u64) -> Option<Plan> {
    cp.observe(&key(), dip, Ok(()), now)
}

#[test]
fn unchanged_config_changes_nothing() {
    let c = cfg(&[(11, 1, "active"), (12, 1, "active")], 64);
    let mut cp = ControlPlane::new(c.clone(), 0);
    assert!(cp.update(c, 1).is_empty());
}

#[test]
fn weight_change_installs_with_second_hops() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64), 0);
    pass(&mut cp, B11, 0);
    pass(&mut cp, B12, 0);
    let before = table(&cp).clone();
    let plan = cp.update(cfg(&[(11, 3, "active"), (12, 1, "active")], 64), 1);
    assert_eq!(plan.install[&key()].moved, 16);
    for (o, n) in before.buckets().iter().zip(table(&cp).buckets()) {
        if o.first() != n.first() {
            assert_eq!(n.second(), o.first());
        }
    }
}

#[test]
fn drain_and_offline() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64), 0);
    cp.update(cfg(&[(11, 1, "active"), (12, 1, "drained")], 64), 1);
    assert_eq!(table(&cp).shares().get(&B12), None, "drained: no first hop");
    assert_eq!(
        table(&cp).second_shares()[&B12],
        32,
        "drained: still second hop"
    );
    cp.update(cfg(&[(11, 1, "active"), (12, 1, "offline")], 64), 2);
    assert_eq!(
        table(&cp).second_shares().get(&B12),
        None,
        "offline: no hop at all"
    );
    assert!(
        !cp.check_targets().iter().any(|t| t.dip == B12),
        "offline: not checked"
    );
}

#[test]
fn failure_is_immediate_and_keeps_second_hop_recovery_is_paced() {
    // 2 % of 4096 = 82 buckets per step, at most every 10 s.
    let c = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        4096,
        (10_000, 2, 0),
    );
    let mut cp = ControlPlane::new(c, 0);
    for d in [B11, B12, B13] {
        assert!(
            pass(&mut cp, d, 10).is_some_and(|p| p.install.is_empty()),
            "unknown -> up changes no table (only the record)"
        );
    }
    let owned = table(&cp).shares()[&B13] as usize;
    assert!(fail(&mut cp, B13, 1000).is_none(), "one failure of two");
    let plan = fail(&mut cp, B13, 2000).expect("second failure takes it out");
    let m = plan.install[&key()];
    println!(
        "failure of 1 of 3: {} buckets moved at once (owned {owned}), forced {}",
        m.moved, m.forced
    );
    assert_eq!((m.moved, m.forced), (owned, owned));
    assert_eq!(table(&cp).second_shares()[&B13] as usize, owned);

    // Recovery: two successes, then steps of <= 82 buckets every >= 10 s.
    assert!(pass(&mut cp, B13, 3000).is_none());
    let plan = pass(&mut cp, B13, 4000).expect("back up");
    let first = plan.install[&key()];
    assert!(first.moved <= 82 && first.forced == 0, "{first:?}");
    let mut now = 4000;
    let mut steps = 1;
    let mut swapped = first.swapped;
    let mut moved = first.moved;
    while cp.service(&key()).unwrap().pending > 0 {
        now += 1000;
        let p = cp.tick(now);
        if let Some(m) = p.install.get(&key()) {
            assert!(now - cp.service(&key()).unwrap().last_step_ms.unwrap() == 0);
            assert!(m.moved <= 82);
            steps += 1;
            swapped += m.swapped;
            moved += m.moved;
        }
        assert!(now < 10_000_000);
    }
    println!(
        "recovery: {steps} steps over {} s, {moved} moves of which {swapped} swaps ({:.0}%)",
        (now - 4000) / 1000,
        100.0 * swapped as f64 / moved as f64
    );
    assert_eq!(table(&cp).shares()[&B13] as usize, owned);
    assert!(swapped * 100 >= moved * 95, "recovery should be swaps");
    assert!(steps >= owned / 82, "paced");
}

#[test]
fn all_down_fails_open_and_recovers() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "drained")], 64), 0);
    let plan = fail(&mut cp, B11, 1).expect("down");
    assert_eq!(plan.mode_changed, vec![(key(), Mode::FailOpen)]);
    assert!(cp.service(&key()).unwrap().fail_open());
    let shares = table(&cp).shares();
    assert_eq!(
        shares.len(),
        2,
        "fail open uses every backend not offline: {shares:?}"
    );
    assert!(pass(&mut cp, B11, 2).is_none(), "rise_count is 2");
    let plan = pass(&mut cp, B11, 3).expect("one backend back is enough");
    assert_eq!(plan.mode_changed, vec![(key(), Mode::Normal)]);
    fail(&mut cp, B12, 4);
    let plan = pass(&mut cp, B12, 5);
    assert!(
        plan.is_none(),
        "a drained backend's health does not change the table"
    );
}

#[test]
fn fail_open_spreads_at_once_by_weight() {
    // Paced: 2 % of 64 = 2 buckets per step, at most every 10 s.
    let c = cfg_with(&[(11, 1, "active"), (12, 1, "active")], 64, (10_000, 2, 0));
    let mut cp = ControlPlane::new(c, 0);
    pass(&mut cp, B11, 1);
    fail(&mut cp, B12, 1).expect("B12 down (unknown falls at once)");
    assert_eq!(table(&cp).shares()[&B11], 64, "B12's buckets forced out");
    assert!(fail(&mut cp, B11, 3).is_none(), "fall_count is 2");
    let plan = fail(&mut cp, B11, 4).expect("all down");
    assert_eq!(plan.mode_changed, vec![(key(), Mode::FailOpen)]);
    let shares = table(&cp).shares();
    assert_eq!(
        (shares.get(&B11), shares.get(&B12)),
        (Some(&32), Some(&32)),
        "fail-open is not paced by max_step_percent"
    );
    assert_eq!(cp.service(&key()).unwrap().pending, 0);
}

#[test]
fn reload_carries_health_and_new_backends_start_unknown_and_need_rise() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64), 0);
    pass(&mut cp, B11, 1);
    fail(&mut cp, B12, 1);
    assert_eq!(
        cp.service(&key()).unwrap().backends[&B12].health.health,
        Health::Down
    );
    cp.update(
        cfg(
            &[(11, 1, "active"), (12, 2, "active"), (13, 1, "active")],
            64,
        ),
        2,
    );
    let s = cp.service(&key()).unwrap();
    assert_eq!(s.backends[&B11].health.health, Health::Up, "carried over");
    assert_eq!(s.backends[&B12].health.health, Health::Down, "carried over");
    assert_eq!(
        s.backends[&B13].health.health,
        Health::Unknown,
        "new: no verdict yet, needs rise_count"
    );
    assert_eq!(table(&cp).shares().len(), 1, "unknown gains no bucket");
    assert!(pass(&mut cp, B13, 3).is_none());
    assert!(pass(&mut cp, B13, 4).is_some(), "rise_count = 2");
}

#[test]
fn removed_backend_is_drained_then_removed() {
    let c = cfg_with(&[(11, 1, "active"), (12, 1, "active")], 64, (0, 100, 5000));
    let mut cp = ControlPlane::new(c, 0);
    cp.update(cfg_with(&[(11, 1, "active")], 64, (0, 100, 5000)), 10_000);
    let s = cp.service(&key()).unwrap();
    assert_eq!(s.backends[&B12].admin_state(), "removing");
    assert_eq!(
        table(&cp).shares().get(&B12),
        None,
        "drained at once (no pacing here)"
    );
    assert_eq!(table(&cp).second_shares()[&B12], 32, "kept as second hop");
    assert!(
        cp.cluster_addresses().contains(&B12),
        "still allowed to send GUE"
    );
    assert!(cp.tick(11_000).removed_backends.is_empty());
    let plan = cp.tick(16_001);
    assert_eq!(plan.removed_backends, vec![(key(), B12)]);
    assert!(plan.install.contains_key(&key()), "second hops cleared");
    assert_eq!(table(&cp).second_shares().get(&B12), None);
    assert!(!cp.cluster_addresses().contains(&B12));
}

#[test]
fn growing_the_table_keeps_flows() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 3, "active")], 64), 0);
    let small = table(&cp).clone();
    cp.update(cfg(&[(11, 1, "active"), (12, 3, "active")], 256), 1);
    let big = table(&cp);
    assert_eq!(big.size(), 256);
    for (i, b) in big.buckets().iter().enumerate() {
        assert_eq!(b.first(), small.buckets()[i % 64].first(), "bucket {i}");
    }
}

#[test]
fn indexes_are_stable_and_reused() {
    let two = Config::parse(
        "version: 1\ncluster: {balancers: [10.0.0.11]}\nservices:\n  - {name: a, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 16}\n  - {name: b, vip: 10.0.0.100, port: 443, protocol: tcp, table_size: 16}\n",
    )
    .unwrap();
    let mut cp = ControlPlane::new(two.clone(), 0);
    let b_key = two.services[1].key();
    let b_index = cp.service(&b_key).unwrap().index;
    let only_b = Config {
        services: vec![two.services[1].clone()],
        ..two.clone()
    };
    let plan = cp.update(only_b, 1);
    assert_eq!(plan.remove, vec![two.services[0].key()]);
    assert!(plan.install.is_empty());
    assert_eq!(cp.service(&b_key).unwrap().index, b_index);
    cp.update(two.clone(), 2);
    assert_eq!(cp.service(&two.services[0].key()).unwrap().index, 0);
}

#[test]
fn adopting_live_tables_moves_nothing_and_keeps_history() {
    let rb = (0, 100, 60_000);
    let c = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 2, "active")],
        256,
        rb,
    );
    let mut cp = ControlPlane::new(c, 1_000_000);
    for d in [B11, B12, B13] {
        pass(&mut cp, d, 1_000_000);
    }
    // Give the table some history: a weight change with second hops.
    let plan = cp.update(
        cfg_with(
            &[(11, 3, "active"), (12, 1, "active"), (13, 2, "active")],
            256,
            rb,
        ),
        1_010_000,
    );
    let moved = plan.install[&key()].moved;
    assert!(moved > 0);
    let running = cp.service(&key()).unwrap().clone();
    let live = vec![(
        key(),
        crate::dataplane::LiveTable {
            service_index: running.index,
            chains: crate::dataplane::LiveTable::chains_of(&running.table),
            moved_at: (0..running.table.size() as usize)
                .map(|i| running.table.moved_at(i))
                .collect(),
            slots: running
                .backends
                .values()
                .map(|b| (b.config.dip, b.slot))
                .collect(),
        },
    )];
    // The restarted daemon reads the same config, 20 s later.
    let (adopted, _) = ControlPlane::adopt(cp.config().clone(), live, cp.records(), 1_030_000);
    let s = adopted.service(&key()).unwrap();
    assert_eq!(
        s.table.buckets(),
        running.table.buckets(),
        "no bucket moved"
    );
    assert_eq!(s.index, running.index);
    for (dip, b) in &s.backends {
        assert_eq!(b.slot, running.backends[dip].slot, "counter slot of {dip}");
        assert_eq!(b.health.health, Health::Up, "verdict of {dip} restored");
    }
    // History carried over: the buckets moved 20 s before the restart may
    // not move again before 60 s; the others (never moved) may.
    let mut adopted = adopted;
    let plan = adopted.update(
        cfg_with(
            &[(11, 1, "active"), (12, 3, "active"), (13, 2, "active")],
            256,
            rb,
        ),
        1_031_000,
    );
    let t = &adopted.service(&key()).unwrap().table;
    for i in 0..256 {
        if running.table.moved_at(i) == Some(1_010_000) {
            assert_eq!(
                t.buckets()[i].first(),
                running.table.buckets()[i].first(),
                "bucket {i} moved twice"
            );
        }
    }
    assert!(
        plan.install.contains_key(&key()),
        "never-moved buckets may move at once"
    );
}

#[test]
fn fresh_tables_start_without_move_history() {
    let c = cfg_with(
        &[(11, 1, "active"), (12, 1, "active")],
        64,
        (0, 100, 300_000),
    );
    let mut cp = ControlPlane::new(c, 5_000);
    assert!((0..64).all(|i| table(&cp).moved_at(i).is_none()));
    // So a drain right after start is not held back by min_bucket_age.
    let plan = cp.update(
        cfg_with(
            &[(11, 1, "active"), (12, 1, "drained")],
            64,
            (0, 100, 300_000),
        ),
        6_000,
    );
    assert_eq!(plan.install[&key()].moved, 32);
}

#[test]
fn adopting_under_dynamic_weights_keeps_the_shares() {
    let y = |w2: u32| {
        format!(
            "version: 1\ncluster: {{balancers: [10.0.0.11]}}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: 1024\n    dynamic_weight: {{source: qps}}\n    backends:\n      - {{dip: 10.0.0.11, weight: 100}}\n      - {{dip: 10.0.0.12, weight: {w2}}}\n      - {{dip: 10.0.0.13, weight: 100}}\n"
        )
    };
    let cfg = Config::parse(&y(100)).unwrap();
    let mut cp = ControlPlane::new(cfg.clone(), 1_000_000);
    for d in [B11, B12, B13] {
        pass(&mut cp, d, 1_000_000);
    }
    // Pretend dynamic weights moved load off .12: its effective weight fell.
    cp.state_mut(&key())
        .unwrap()
        .backends
        .get_mut(&B12)
        .unwrap()
        .effective_weight = 37.0;
    cp.step(&key(), 1_001_000, false);
    let running = cp.service(&key()).unwrap().clone();
    assert!(
        running.table.shares()[&B12] < 200,
        "{:?}",
        running.table.shares()
    );
    let live = vec![(
        key(),
        crate::dataplane::LiveTable {
            service_index: running.index,
            chains: crate::dataplane::LiveTable::chains_of(&running.table),
            moved_at: (0..1024).map(|i| running.table.moved_at(i)).collect(),
            slots: running
                .backends
                .values()
                .map(|b| (b.config.dip, b.slot))
                .collect(),
        },
    )];
    let (mut adopted, _) = ControlPlane::adopt(cfg, live, BTreeMap::new(), 1_002_000);
    assert_eq!(
        adopted.service(&key()).unwrap().table.buckets(),
        running.table.buckets()
    );
    // Nothing is pending: the next ticks move no bucket.
    assert_eq!(adopted.service(&key()).unwrap().pending, 0);
    let plan = adopted.tick(1_010_000);
    assert!(plan.install.is_empty(), "adopted table moved: {plan:?}");
}

/// A reload that changes many large tables (enough to be stepped on several
/// threads, see `crate::split`) gives every service the table it gets when
/// stepped alone, and plans the services in file order.
#[test]
fn many_services_step_as_each_would_alone() {
    let yaml = |ports: std::ops::Range<u16>, drained: bool| {
        let mut s = String::from(
            "version: 1\ncluster: {balancers: [10.0.0.11]}\ndefaults:\n  table_size: 4096\n  rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}\nservices:\n",
        );
        for port in ports {
            // A different weight per service: different tables.
            let w = 1 + port % 5;
            let state = if drained && port % 3 != 0 {
                "drained"
            } else {
                "active"
            };
            s.push_str(&format!(
                "  - name: s{port}\n    vip: 10.0.0.100\n    port: {port}\n    protocol: tcp\n    health_check: {{none: {{}}}}\n    backends:\n      - {{dip: 10.0.0.11, weight: {w}}}\n      - {{dip: 10.0.0.12}}\n      - {{dip: 10.0.0.13, state: {state}}}\n"
            ));
        }
        Config::parse(&s).unwrap()
    };
    let ports = 1000..1048;
    let mut cp = ControlPlane::new(yaml(ports.clone(), false), 1_000);
    let plan = cp.update(yaml(ports.clone(), true), 2_000);
    let keys: Vec<ServiceKey> = cp.config().services.iter().map(Service::key).collect();
    let installed: Vec<ServiceKey> = plan.install.keys().copied().collect();
    let mut expected: Vec<ServiceKey> = keys.iter().copied().filter(|k| k.port % 3 != 0).collect();
    expected.sort();
    assert_eq!(installed, expected);
    for port in ports {
        let mut alone = ControlPlane::new(yaml(port..port + 1, false), 1_000);
        let p = alone.update(yaml(port..port + 1, true), 2_000);
        let key = keys[(port - 1000) as usize];
        assert_eq!(
            cp.service(&key).unwrap().table,
            alone.service(&key).unwrap().table,
            "{key}"
        );
        assert_eq!(plan.changed.get(&key), p.changed.get(&key), "{key}");
        assert_eq!(plan.install.get(&key), p.install.get(&key), "{key}");
    }
}
