//! Followers of a cluster's leader ([`ControlPlane::follow`]): the
//! published tables replace their own, bucket for bucket, and a leader
//! change moves no bucket.

use super::*;
use crate::cluster::PublishedTable;

/// What a follower receives of `leader`'s tables: published (leader clock
/// + `leader_wall` = Unix time) and decoded.
fn published(
    leader: &ControlPlane,
    leader_wall: u64,
) -> BTreeMap<ServiceKey, crate::cluster::FollowedTable> {
    leader
        .services()
        .iter()
        .map(|(k, st)| {
            let p = PublishedTable::encode(k, &st.table, B11, 0, &|m| m + leader_wall);
            let json = serde_json::to_string(&p).unwrap();
            let p: PublishedTable = serde_json::from_str(&json).unwrap();
            (*k, p.decode().unwrap())
        })
        .collect()
}

fn hops(cp: &ControlPlane) -> Vec<(Option<IpAddr>, Option<IpAddr>)> {
    let t = table(cp);
    (0..t.size() as usize)
        .map(|i| (t.first(i), t.second(i)))
        .collect()
}

/// A leader that took B13 out (failed) and back (paced), then saw new
/// weights: buckets with previous owners and move times.
fn leader_with_history() -> ControlPlane {
    let c = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 2, "active")],
        1024,
        (0, 100, 0),
    );
    let mut l = ControlPlane::new(c, 0);
    for d in [B11, B12, B13] {
        pass(&mut l, d, 10);
    }
    fail(&mut l, B13, 1000);
    fail(&mut l, B13, 2000);
    pass(&mut l, B13, 3000);
    pass(&mut l, B13, 4000);
    let mut now = 4000;
    while l.service(&key()).unwrap().pending > 0 {
        now += 1000;
        l.tick(now);
    }
    l.update(
        cfg_with(
            &[(11, 3, "active"), (12, 1, "active"), (13, 2, "active")],
            1024,
            (0, 100, 0),
        ),
        now + 1000,
    );
    l
}

#[test]
fn a_follower_installs_the_leaders_table_bucket_for_bucket() {
    let l = leader_with_history();
    assert!(table(&l).second_shares().values().sum::<u32>() > 0);
    // The follower has another history: B12 failed here, B13 never
    // answered; its own table differs.
    let mut f = ControlPlane::new(
        cfg_with(
            &[(11, 3, "active"), (12, 1, "active"), (13, 2, "active")],
            1024,
            (0, 100, 0),
        ),
        0,
    );
    pass(&mut f, B11, 10);
    fail(&mut f, B12, 10);
    assert_ne!(hops(&f), hops(&l));
    let tables = published(&l, 1_000_000);
    let plan = f.follow(&tables, &|u| u.saturating_sub(1_000_000), 20_000);
    assert!(plan.install.contains_key(&key()));
    let changed = &plan.changed[&key()];
    assert!(!changed.is_empty() && changed.len() <= 1024);
    assert_eq!(hops(&f), hops(&l), "first and second hop of every bucket");
    assert_eq!(table(&f).buckets(), table(&l).buckets(), "whole chains");
    // The same publication again installs nothing.
    let again = f.follow(&tables, &|u| u.saturating_sub(1_000_000), 20_100);
    assert!(again.install.is_empty(), "{again:?}");
    // A publication for a table size the follower's config does not ask
    // for (a leader on another config) is left out.
    let mut other = ControlPlane::new(
        cfg_with(&[(11, 1, "active"), (12, 1, "active")], 512, (0, 100, 0)),
        0,
    );
    let before = hops(&other);
    assert!(other.follow(&tables, &|u| u, 1).install.is_empty());
    assert_eq!(hops(&other), before);
}

#[test]
fn a_leader_change_moves_no_bucket() {
    let c = cfg_with(
        &[(11, 3, "active"), (12, 1, "active"), (13, 2, "active")],
        1024,
        (0, 100, 0),
    );
    let mut l = leader_with_history();
    let mut now = 100_000;
    while l.service(&key()).unwrap().pending > 0 {
        now += 1000;
        l.tick(now);
    }
    // A follower with the same verdicts but its own start-up history (B13
    // came up late, weights arrived in another order).
    let mut f = ControlPlane::new(
        cfg_with(
            &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
            1024,
            (0, 100, 0),
        ),
        0,
    );
    pass(&mut f, B11, 10);
    pass(&mut f, B12, 10);
    pass(&mut f, B13, 50_000);
    f.update(c, 60_000);
    for t in (61_000..now).step_by(1000) {
        f.tick(t);
    }
    assert_ne!(table(&f).buckets(), table(&l).buckets(), "histories differ");
    f.follow(&published(&l, 7), &|u| u - 7, now);
    let installed = table(&f).buckets();
    assert_eq!(installed, table(&l).buckets());
    // The old leader is gone; the follower now runs the table logic itself,
    // starting from the published table: nothing moves.
    for t in 1..=20 {
        let plan = f.tick(now + t * 1000);
        assert!(plan.install.is_empty(), "step {t}: {plan:?}");
    }
    assert_eq!(table(&f).buckets(), installed);
    // And it goes on as the old leader would have: the same event gives
    // the same table on both.
    let pl = fail(&mut l, B12, now + 30_000)
        .into_iter()
        .chain(fail(&mut l, B12, now + 31_000));
    let pf = fail(&mut f, B12, now + 30_000)
        .into_iter()
        .chain(fail(&mut f, B12, now + 31_000));
    assert_eq!(pl.count(), pf.count());
    assert_eq!(table(&f).buckets(), table(&l).buckets());
}

#[test]
fn a_hop_the_follower_does_not_know_gets_a_slot_and_stays_a_cluster_address() {
    // The leader still drains out B13, removed from its file; the follower
    // started with the new file and never knew B13.
    let c3 = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 1, "active")],
        256,
        (0, 100, 3_600_000),
    );
    let c2 = cfg_with(
        &[(11, 1, "active"), (12, 1, "active")],
        256,
        (0, 100, 3_600_000),
    );
    let mut l = ControlPlane::new(c3, 0);
    for d in [B11, B12, B13] {
        pass(&mut l, d, 10);
    }
    l.update(c2.clone(), 1000);
    assert!(
        table(&l).hops().contains(&B13),
        "B13 stays a previous owner while it drains out"
    );
    let mut f = ControlPlane::new(c2, 0);
    assert!(!f.cluster_addresses().contains(&B13));
    let plan = f.follow(&published(&l, 0), &|u| u, 2000);
    assert_eq!(table(&f).buckets(), table(&l).buckets());
    assert!(
        f.cluster_addresses().contains(&B13),
        "GUE from B13 accepted"
    );
    let b13 = &f.service(&key()).unwrap().backends[&B13];
    assert!(b13.removed_at_ms.is_some(), "known as being removed");
    assert!(plan.fresh_slots.contains(&b13.slot), "its counters zeroed");
}

#[test]
fn a_leader_that_follows_its_own_publication_changes_nothing() {
    // What a leader cut off from etcd does: it installs the last published
    // tables. Move times went out as whole Unix seconds (the wall clock
    // 777 ms off a whole second from the control clock): no bucket is
    // rewritten, not even its move time.
    let mut l = leader_with_history();
    let before = table(&l).clone();
    let wall = 1_700_000_000_777;
    let plan = l.follow(&published(&l, wall), &|u| u - wall, 200_000);
    assert!(plan.install.is_empty(), "{plan:?}");
    assert!(table(&l).changed_from(&before).is_empty());
}

#[test]
fn a_followers_reload_writes_the_published_buckets_only() {
    // New weights arrive by SIGHUP on every balancer at once: the leader
    // steps its table and publishes it; a follower's reload must not put its
    // own step into the data plane, even for a moment.
    use super::fake::FakeDataplane;
    let node: IpAddr = Ipv4Addr::new(10, 0, 0, 11).into();
    let c1 = cfg_with(
        &[(11, 1, "active"), (12, 1, "active"), (13, 2, "active")],
        1024,
        (0, 100, 0),
    );
    let mut f = ControlPlane::new(c1.clone(), 0);
    for d in [B11, B12, B13] {
        pass(&mut f, d, 10);
    }
    let mut dp = FakeDataplane::default();
    f.apply(&mut dp, node, &f.full_plan()).unwrap();
    let published_before = published(&f, 0);
    // What the follower's own step would do with the new weights.
    let c2 = cfg_with(
        &[(11, 3, "active"), (12, 1, "active"), (13, 2, "active")],
        1024,
        (0, 100, 0),
    );
    let mut own = f.clone();
    own.update(c2.clone(), 20_000);
    assert_ne!(
        table(&own).buckets(),
        table(&f).buckets(),
        "its own step moves buckets"
    );
    let (next, _) = f
        .reload_adjusted(
            c2,
            None,
            20_000,
            &mut dp,
            node,
            &mut |_| Ok(()),
            &mut ReloadTimes::default(),
            &mut |n| n.follow(&published_before, &|u| u, 20_000),
        )
        .unwrap();
    // The leader has not published the new weights yet: the maps hold the
    // last published table, bucket for bucket.
    let differing = |a: &[crate::table::Bucket], b: &[crate::table::Bucket]| {
        a.iter().zip(b).filter(|(x, y)| x != y).count()
    };
    assert_eq!(
        differing(&dp.services[&key()].buckets, &table(&f).buckets()),
        0,
        "buckets of the maps that are not the published ones"
    );
    assert_eq!(differing(&table(&next).buckets(), &table(&f).buckets()), 0);
}

/// What the daemon does with a follower's plan (`Daemon::apply`): its own
/// step, then the published tables over it; nothing written for a table
/// the data plane holds at the published revision already. `installed`:
/// the revision the data plane holds; `rev`: the one published.
#[allow(clippy::too_many_arguments)]
fn follower_apply(
    f: &mut ControlPlane,
    dp: &mut super::fake::FakeDataplane,
    own: Option<Plan>,
    published: &BTreeMap<ServiceKey, crate::cluster::FollowedTable>,
    installed: &mut u64,
    rev: u64,
    now: u64,
    from_unix: &dyn Fn(u64) -> u64,
) {
    let node: IpAddr = Ipv4Addr::new(10, 0, 0, 13).into();
    let mut p = own.unwrap_or_default();
    p.merge(f.follow(published, from_unix, now));
    if *installed == rev {
        p.install.remove(&key());
        p.changed.remove(&key());
    }
    if p.is_idle() {
        return;
    }
    f.apply(dp, node, &p).unwrap();
    *installed = rev;
}

#[test]
fn a_follower_holds_the_last_publication_whatever_came_before() {
    // What a follower holds does not depend on which publications it saw.
    // The sequence of a CI run of the harness's ecmp-churn (whose watcher,
    // not nilb, was wrong there): a backend fails on every balancer; the
    // followers see it first (their own steps are undone), all reload new
    // weights (paced); the leader publishes its reload (R1) and at once its
    // health change (R2). One follower installs R1, takes its own paced
    // steps, then installs R2; the other installs R2 alone; both then take
    // their own steps: both data planes must hold the leader's table.
    use super::fake::FakeDataplane;
    let node: IpAddr = Ipv4Addr::new(10, 0, 0, 13).into();
    let w = |a, b, c| {
        cfg_with(
            &[(11, a, "active"), (12, b, "active"), (13, c, "active")],
            1024,
            (200, 50, 2000),
        )
    };
    // Two clocks: the leader's wall clock is its control clock + LEADER,
    // the followers' + FOLLOWER; move times travel as whole Unix seconds.
    const LEADER: u64 = 1_700_000_000_333;
    const FOLLOWER: u64 = 1_700_000_000_777;
    let from_unix = |u: u64| u.saturating_sub(FOLLOWER);
    let mut seed = 0x5eed_u64;
    let mut rnd = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for round in 0..40 {
        let c1 = w(1 + rnd(3) as u32, 1 + rnd(3) as u32, 1 + rnd(3) as u32);
        let mut l = ControlPlane::new(c1.clone(), 0);
        for d in [B11, B12, B13] {
            pass(&mut l, d, 10);
            pass(&mut l, d, 20);
        }
        let mut lnow = 50_000 + rnd(1000);
        for t in (1000..lnow).step_by(200) {
            l.tick(t);
        }
        let r0 = published(&l, LEADER);
        let start = 70_000 + rnd(3000);
        let follower = || {
            let mut f = ControlPlane::new(c1.clone(), 0);
            for d in [B11, B12, B13] {
                pass(&mut f, d, 10);
                pass(&mut f, d, 20);
            }
            let mut dp = FakeDataplane::default();
            f.apply(&mut dp, node, &f.full_plan()).unwrap();
            let mut installed = 0;
            follower_apply(
                &mut f,
                &mut dp,
                None,
                &r0,
                &mut installed,
                1,
                start,
                &from_unix,
            );
            (f, dp, installed)
        };
        let (mut fa, mut dpa, mut ia) = follower();
        let (mut fb, mut dpb, mut ib) = follower();
        let sick = [B11, B12, B13][rnd(3) as usize];
        for (f, dp, i) in [(&mut fa, &mut dpa, &mut ia), (&mut fb, &mut dpb, &mut ib)] {
            let own = fail(f, sick, start);
            follower_apply(f, dp, own, &r0, i, 1, start, &from_unix);
            let own = fail(f, sick, start + 500);
            follower_apply(f, dp, own, &r0, i, 1, start + 500, &from_unix);
        }
        let now = start + 700;
        let c2 = w(1 + rnd(3) as u32, 1 + rnd(3) as u32, 1 + rnd(3) as u32);
        lnow += 1000;
        l.update(c2.clone(), lnow);
        let r1 = published(&l, LEADER);
        fail(&mut l, sick, lnow);
        fail(&mut l, sick, lnow);
        let r2 = published(&l, LEADER);
        for (f, dp) in [(&mut fa, &mut dpa), (&mut fb, &mut dpb)] {
            let (next, _) = f
                .reload_adjusted(
                    c2.clone(),
                    None,
                    now,
                    dp,
                    node,
                    &mut |_| Ok(()),
                    &mut ReloadTimes::default(),
                    &mut |n| n.follow(&r0, &from_unix, now),
                )
                .unwrap();
            *f = next;
        }
        // Follower a: R1, its own steps, R2; follower b: R2.
        for k in 0..5 {
            let own = Some(fa.tick(now + 7 + k * 20));
            follower_apply(
                &mut fa,
                &mut dpa,
                own,
                &r1,
                &mut ia,
                2,
                now + 7 + k * 20,
                &from_unix,
            );
        }
        follower_apply(
            &mut fa,
            &mut dpa,
            None,
            &r2,
            &mut ia,
            3,
            now + 100,
            &from_unix,
        );
        follower_apply(
            &mut fb,
            &mut dpb,
            None,
            &r2,
            &mut ib,
            3,
            now + 60,
            &from_unix,
        );
        for k in 1..10 {
            let t = now + 100 + k * 100;
            let own = Some(fa.tick(t));
            follower_apply(&mut fa, &mut dpa, own, &r2, &mut ia, 3, t, &from_unix);
            let own = Some(fb.tick(t));
            follower_apply(&mut fb, &mut dpb, own, &r2, &mut ib, 3, t, &from_unix);
        }
        let want = table(&l).buckets();
        for (name, dp) in [("R1 then R2", &dpa), ("R2 alone", &dpb)] {
            let differ = dp.services[&key()]
                .buckets
                .iter()
                .zip(&want)
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(
                differ, 0,
                "round {round}, {name}: buckets unlike the leader's"
            );
        }
    }
}
