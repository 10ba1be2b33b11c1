//! Restarts (docs/design.md "Restarts and adoption"): a daemon killed with
//! -9 and restarted on its pinned maps moves no bucket, keeps who is down
//! (17.1) and keeps every backend its predecessor still owed connections
//! to (17.2); unknown backends gain nothing; the slots adoption gives out
//! are zeroed.

use super::fake::{Call, FakeDataplane};
use super::*;

const NODE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

/// Three backends of weight 1, 1024 buckets, paced steps of 10 % every
/// 200 ms with `min_age` ms of minimum bucket age.
fn three(min_age: u64) -> Config {
    cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        1024,
        (200, 10, min_age),
    )
}

/// A running state at `now` with all three up and then .13 down.
fn node3_down(now: u64) -> ControlPlane {
    let mut cp = ControlPlane::new(three(0), now);
    for d in [B11, B12, B13] {
        pass(&mut cp, d, now);
    }
    fail(&mut cp, B13, now + 1000);
    fail(&mut cp, B13, now + 2000).expect("down after fall_count");
    assert_eq!(owned(&cp, B13), 0);
    cp
}

/// 17.1: node3 is down (0 buckets); node1's daemon is killed and restarted
/// three times, the first check results arriving in a different order each
/// time. The restarted daemon restores node3's verdict from the records:
/// no bucket moves, and node3 gets none before (or after) its first check.
#[test]
fn a_restart_keeps_who_is_down_and_moves_no_bucket() {
    let mut now = 1_000_000;
    let mut cp = node3_down(now);
    let orders = [[B11, B12, B13], [B13, B12, B11], [B12, B13, B11]];
    for (run, order) in orders.iter().enumerate() {
        now += 60_000;
        let before = table(&cp).clone();
        let (mut a, plan) = ControlPlane::adopt(three(0), pinned(&cp), cp.records(), now);
        let mut dp = FakeDataplane::default();
        a.apply(&mut dp, NODE, &plan).unwrap();
        assert_eq!(dp.services[&key()].buckets, before.buckets(), "adopted");
        let s = a.service(&key()).unwrap();
        assert_eq!(s.backends[&B13].health.health, Health::Down, "restored");
        assert_eq!(s.backends[&B11].health.health, Health::Up, "restored");
        // Ten seconds of ticks (200 ms, as the daemon) with the first
        // results arriving 300 ms apart: .13 keeps failing.
        let mut most = 0;
        let mut before_first_check = 0;
        for step in 1..=50u64 {
            let t = now + step * 200;
            a.tick(t);
            let arriving = (step % 2 == 0)
                .then(|| order.get(step as usize / 2 - 1))
                .flatten();
            if let Some(&d) = arriving {
                if d == B13 {
                    before_first_check = owned(&a, B13);
                    fail(&mut a, d, t);
                } else {
                    pass(&mut a, d, t);
                }
            }
            most = most.max(owned(&a, B13));
        }
        let moved = table(&a)
            .buckets()
            .iter()
            .zip(before.buckets())
            .filter(|(x, y)| x.first() != y.first())
            .count();
        println!(
            "restart {run}: node3 had {before_first_check} buckets before its first check, at most {most} in 10 s; {moved} buckets moved"
        );
        assert_eq!((before_first_check, most, moved), (0, 0, 0));
        cp = a;
    }
}

/// 17.1 without records (the pins of a daemon that kept none): every
/// backend restarts unknown, and unknown never attracts buckets, so node3
/// (0 buckets) stays at 0 until a check passes; the others keep theirs.
#[test]
fn without_records_unknown_backends_gain_nothing_until_a_check_passes() {
    let now = 1_000_000;
    let cp = node3_down(now);
    let before = table(&cp).clone();
    let (mut a, _) = ControlPlane::adopt(three(0), pinned(&cp), BTreeMap::new(), now + 5000);
    for d in [B11, B12, B13] {
        assert_eq!(
            a.service(&key()).unwrap().backends[&d].health.health,
            Health::Unknown
        );
    }
    let mut most = 0;
    for step in 1..=25u64 {
        let t = now + 5000 + step * 200;
        a.tick(t);
        if step == 5 {
            pass(&mut a, B11, t);
        }
        if step == 10 {
            pass(&mut a, B12, t);
        }
        most = most.max(owned(&a, B13));
    }
    println!("no records: node3 got at most {most} buckets before its first check");
    assert_eq!(most, 0);
    assert_eq!(table(&a).buckets(), before.buckets(), "nothing moved");
    // Its first result decides (a restart, not a new backend), and then it
    // gets its share back in paced swaps.
    pass(&mut a, B13, now + 11_000).expect("up");
    let mut t = now + 11_000;
    while a.service(&key()).unwrap().pending > 0 {
        t += 200;
        a.tick(t);
        assert!(t < now + 60_000);
    }
    assert_eq!(owned(&a, B13), 341);
}

/// A fresh daemon (nothing adopted): every backend is unknown, the table is
/// built over all of them, and results arriving one by one do not swing it
/// to the first backend that reports up. A backend whose first result is a
/// failure while nobody is up yet gives its buckets to the unknown ones by
/// weight.
#[test]
fn a_fresh_start_does_not_swing_to_the_first_backend_to_report() {
    let mut cp = ControlPlane::new(three(0), 0);
    let built = table(&cp).clone();
    assert_eq!(
        built.shares().values().copied().collect::<Vec<_>>(),
        [342, 341, 341]
    );
    for (i, d) in [B12, B13, B11].into_iter().enumerate() {
        let plan = pass(&mut cp, d, 100 * (i as u64 + 1)).expect("unknown -> up");
        assert!(plan.install.is_empty(), "{d} up moved buckets");
    }
    assert_eq!(table(&cp), &built);

    let mut cp = ControlPlane::new(three(0), 0);
    fail(&mut cp, B11, 100).expect("down");
    let s = table(&cp).shares();
    println!("first result a failure: {s:?}");
    assert_eq!((s.get(&B11), s[&B12], s[&B13]), (None, 512, 512));
    pass(&mut cp, B13, 200);
    pass(&mut cp, B12, 300);
    assert_eq!(table(&cp).shares(), s, "ups move nothing");
}

/// 17.2: a backend deleted from the file keeps serving its connections as
/// second hop until it has owned no bucket for `min_bucket_age_ms`. A
/// restart in the middle keeps it: still second hop of its 341 buckets,
/// still in the cluster set, and removed only when its (recorded) time is
/// up.
#[test]
fn a_restart_keeps_backends_being_removed() {
    let min_age = 60_000;
    let c3 = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        1024,
        (0, 100, min_age),
    );
    let c2 = cfg_with(
        &[(11, 1, "active"), (12, 1, "active")],
        1024,
        (0, 100, min_age),
    );
    let mut cp = ControlPlane::new(c3, 0);
    for d in [B11, B12, B13] {
        pass(&mut cp, d, 0);
    }
    cp.update(c2.clone(), 10_000);
    cp.tick(10_200);
    assert_eq!(owned(&cp, B13), 0);
    assert_eq!(table(&cp).second_shares()[&B13], 341);

    for (records, label) in [(cp.records(), "records"), (BTreeMap::new(), "no records")] {
        // kill -9 at +20 s, restarted on the pins.
        let (mut a, plan) = ControlPlane::adopt(c2.clone(), pinned(&cp), records, 20_000);
        let mut dp = FakeDataplane::default();
        a.apply(&mut dp, NODE, &plan).unwrap();
        let s = a.service(&key()).unwrap();
        let second = table(&a).second_shares().get(&B13).copied().unwrap_or(0);
        println!(
            "restart while removing ({label}): .13 {} , second hop of {second} buckets, in cluster_nodes: {}",
            s.backends.get(&B13).map_or("forgotten", |b| b.admin_state()),
            dp.nodes.contains(&B13)
        );
        assert_eq!(s.backends[&B13].admin_state(), "removing");
        assert_eq!(second, 341);
        assert!(dp.nodes.contains(&B13), "may still forward GUE");
        // Removed once it has owned nothing for min_bucket_age_ms: with
        // the records, counted from when the first daemon saw it empty
        // (10.2 s); without them, from the restart.
        let due = if label == "records" {
            10_200 + min_age
        } else {
            20_200 + min_age
        };
        let mut t = 20_000;
        let removed_at = loop {
            t += 200;
            let p = a.tick(t);
            if !p.removed_backends.is_empty() {
                a.apply(&mut dp, NODE, &p).unwrap();
                break t;
            }
            assert!(t < 200_000);
        };
        assert!(
            (due..due + 400).contains(&removed_at),
            "{label}: removed at {removed_at}, due {due}"
        );
        assert_eq!(table(&a).second_shares().get(&B13), None);
        assert!(!dp.nodes.contains(&B13));
        assert!(!dp.control.values().any(|r| r.dip == B13), "record cleared");
    }
}

/// Review (1): a slot that adoption gives out (here to a backend that
/// owned no bucket, so the live table does not name its slot) is zeroed
/// before any table counts into it: the adopted plan carries it.
#[test]
fn slots_given_out_at_adoption_are_zeroed() {
    let cp = node3_down(1_000_000);
    let mut live = pinned(&cp);
    // The slot .13 had is taken by nobody in the tables: give it to a
    // removed backend's leftover counts, as a reused slot would hold.
    assert!(!live[0].1.slots.contains_key(&B13));
    live[0].1.slots.remove(&B12);
    let (a, plan) = ControlPlane::adopt(three(0), live, BTreeMap::new(), 1_010_000);
    let mut dp = FakeDataplane::default();
    a.apply(&mut dp, NODE, &plan).unwrap();
    let s = a.service(&key()).unwrap();
    let install = dp
        .position(|c| matches!(c, Call::InstallTables(_)))
        .unwrap();
    for d in [B12, B13] {
        let slot = s.backends[&d].slot;
        let zero = dp.position(|c| *c == Call::ZeroBackendStats(slot));
        assert!(
            zero.is_some_and(|z| z < install),
            "slot {slot} of {d}, given out at adoption, is not zeroed first: {:?}",
            plan.fresh_slots
        );
    }
    let kept = s.backends[&B11].slot;
    assert!(
        !plan.fresh_slots.contains(&kept),
        "kept slots keep their counters"
    );
}

/// 17.1 with the encapsulated check: a backend out because its GUE path
/// fails (its regular check passes) stays out across a restart.
#[test]
fn a_restart_keeps_a_failed_encapsulated_check() {
    let now = 1_000_000;
    let mut cp = ControlPlane::new(three(0), now);
    for d in [B11, B12, B13] {
        pass(&mut cp, d, now);
        cp.observe_encap(&key(), d, Ok(()), now);
    }
    cp.observe_encap(&key(), B13, Err("no SYN-ACK".into()), now + 1000);
    cp.observe_encap(&key(), B13, Err("no SYN-ACK".into()), now + 2000)
        .expect("out");
    assert_eq!(owned(&cp, B13), 0);
    let (mut a, _) = ControlPlane::adopt(three(0), pinned(&cp), cp.records(), now + 10_000);
    let b = &a.service(&key()).unwrap().backends[&B13];
    assert_eq!(
        (b.health.health, b.encap.health),
        (Health::Up, Health::Down)
    );
    for step in 1..=20u64 {
        a.tick(now + 10_000 + step * 200);
        pass(&mut a, B13, now + 10_000 + step * 200);
        assert_eq!(
            owned(&a, B13),
            0,
            "regular passes alone do not bring it back"
        );
    }
}

/// A service removed from the file while no daemon ran: its table is still
/// in the adopted data plane until the plan removes it (after installing
/// the others), so a service added at the same time gets none of the slots
/// or the stats index it names (found by a hostile trial: the daemon could
/// not start, "slot 1 is given to .. while 256 bucket entries of installed
/// tables still name it").
#[test]
fn a_service_removed_while_down_keeps_its_slots_until_its_table_goes() {
    let now = 1_000_000;
    let mut cp = ControlPlane::new(three(0), now);
    for d in [B11, B12, B13] {
        pass(&mut cp, d, now);
    }
    let live = pinned(&cp);
    let old_slots: BTreeSet<u32> = live[0].1.slots.values().copied().collect();
    let old_index = live[0].1.service_index;
    // `web` (10.0.0.100:80) removed, `web81` added with an old and a new
    // backend.
    let other = Config::parse(
        "version: 1\ncluster: {balancers: [10.0.0.11], hash_seed: 7}\nservices:\n  - name: web81\n    vip: 10.0.0.100\n    port: 81\n    protocol: tcp\n    table_size: 1024\n    backends:\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.14}\n",
    )
    .unwrap();
    let (a, plan) = ControlPlane::adopt(other, live, cp.records(), now + 10_000);
    assert!(plan.all_records, "a full plan: apply removes the old table");
    for (k, st) in a.services() {
        assert_ne!(
            st.index, old_index,
            "{k} got the removed service's stats index"
        );
        for (d, b) in &st.backends {
            assert!(
                !old_slots.contains(&b.slot),
                "{k} {d} got slot {} which the removed table still names",
                b.slot
            );
        }
    }
    let mut dp = FakeDataplane::default();
    a.apply(&mut dp, NODE, &plan).unwrap();
    assert!(dp.violations.is_empty(), "{:?}", dp.violations);
}

/// A start that grew the adopted bucket pool (docs/design.md "Restarts and
/// adoption"): the installs that need a region of their own, a new service
/// and one whose size changed, wait for the new programs; the adopted table
/// of the same size and everything else (settings, records) go first.
#[test]
fn a_grown_pool_installs_new_and_resized_tables_after_the_attach() {
    let now = 1_000_000;
    let cp = node3_down(now);
    let two = |web_size: u32| {
        let mut y = String::from(
            "version: 1\ncluster: {balancers: [10.0.0.11], hash_seed: 7}\nservices:\n",
        );
        for (name, vip, size) in [("web", 100, web_size), ("api", 101, 1024)] {
            y += &format!(
                "  - name: {name}\n    vip: 10.0.0.{vip}\n    port: 80\n    protocol: tcp\n    table_size: {size}\n    health_check: {{tcp: {{}}}}\n    backends:\n      - {{dip: 10.0.0.11}}\n      - {{dip: 10.0.0.12}}\n      - {{dip: 10.0.0.13}}\n"
            );
        }
        Config::parse(&y).unwrap()
    };
    let api = ServiceKey {
        vip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 101)),
        ..key()
    };
    // What the pins hold: web at 1024 buckets.
    let held: BTreeMap<ServiceKey, u32> = pinned(&cp)
        .iter()
        .map(|(k, lt)| (*k, lt.chains.len() as u32))
        .collect();
    assert_eq!(held, [(key(), 1024)].into());
    for (web_size, later_keys) in [(4096, vec![key(), api]), (1024, vec![api])] {
        let (a, mut plan) = ControlPlane::adopt(two(web_size), pinned(&cp), cp.records(), now);
        let first: BTreeSet<ServiceKey> = plan.install.keys().copied().collect();
        let later = plan.take_new_regions(&a, &|k| held.get(k).copied());
        let later_got: Vec<ServiceKey> = later.install.keys().copied().collect();
        let mut want = later_keys;
        want.sort();
        assert_eq!(later_got, want, "web at {web_size}");
        // Nothing is lost or written twice; the rest of the plan stays.
        let now_first: BTreeSet<ServiceKey> = plan.install.keys().copied().collect();
        assert!(now_first.is_disjoint(&later_got.iter().copied().collect()));
        assert_eq!(
            now_first.len() + later_got.len(),
            first.len(),
            "web at {web_size}"
        );
        assert!(later.records.is_empty() && !later.all_records && !later.settings_changed);
        // Both applied in order leave the data plane as the whole plan does.
        let mut dp = FakeDataplane::default();
        a.apply(&mut dp, NODE, &plan).unwrap();
        for k in &later_got {
            assert!(
                !dp.services.contains_key(k),
                "{k} not installed before the attach"
            );
        }
        a.apply(&mut dp, NODE, &later).unwrap();
        for (k, st) in a.services() {
            assert_eq!(dp.services[k].buckets, st.table.buckets(), "{k}");
        }
    }
}

/// A restart whose file changed the table size meanwhile resizes the live
/// table as a reload would: grown, every flow keeps its first hop and
/// previous owners; nothing is built anew (which would move most flows).
#[test]
fn a_restart_with_a_new_table_size_keeps_the_flows() {
    let now = 1_000_000;
    let cp = node3_down(now);
    let live = table(&cp).clone();
    let bigger = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        4096,
        (200, 10, 0),
    );
    let (a, plan) = ControlPlane::adopt(bigger, pinned(&cp), cp.records(), now + 60_000);
    let t = table(&a);
    assert_eq!(t.size(), 4096);
    let moved = (0..4096)
        .filter(|&i| t.first(i) != live.first(i % 1024) || t.second(i) != live.second(i % 1024))
        .count();
    assert_eq!(moved, 0, "buckets whose hops differ from the live table's");
    assert!(
        plan.install.contains_key(&key()),
        "the resized table is installed"
    );
    let s = a.service(&key()).unwrap();
    assert_eq!(
        s.index,
        cp.service(&key()).unwrap().index,
        "stats index kept"
    );
    assert_eq!(
        s.backends[&B11].slot,
        cp.service(&key()).unwrap().backends[&B11].slot,
        "counter slots kept"
    );
}
