use super::*;

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

fn targets(spec: &[(u8, u32)]) -> Vec<Target> {
    spec.iter()
        .map(|&(l, w)| Target {
            dip: ip(l),
            weight: w,
        })
        .collect()
}

/// Every share within one bucket of exact.
fn assert_proportional(t: &Table, spec: &[(u8, u32)]) {
    let total: u32 = spec.iter().map(|s| s.1).sum();
    let shares = t.shares();
    for &(l, w) in spec {
        let exact = t.size() as f64 * w as f64 / total as f64;
        let got = *shares.get(&ip(l)).unwrap_or(&0) as f64;
        assert!(
            (got - exact).abs() < 1.0,
            "backend {l}: {got} buckets, exact {exact:.2}"
        );
    }
    assert_eq!(shares.values().sum::<u32>(), t.size());
}

#[test]
fn quotas_are_within_one_and_sum_to_size() {
    let t = targets(&[(1, 1), (2, 1), (3, 1)]);
    let q = quotas(16, &t);
    assert_eq!(q.iter().sum::<u32>(), 16);
    assert_eq!(q, vec![6, 5, 5], "ties go to the lower address");
    let t = targets(&[(1, 3), (2, 65535), (3, 7)]);
    let q = quotas(4096, &t);
    assert_eq!(q.iter().sum::<u32>(), 4096);
    assert_eq!(quotas(16, &targets(&[(1, 0)])), vec![0]);
}

#[test]
fn build_is_proportional_contiguous_and_deterministic() {
    let spec = [(11, 1), (12, 1), (13, 2)];
    let t = Table::build(1024, &targets(&spec));
    assert_proportional(&t, &spec);
    for &(l, _) in &spec {
        assert_eq!(t.ranges(ip(l)), 1, "backend {l} should own one range");
    }
    assert!(t.buckets().iter().all(|b| b.second.is_none()));
    // Same input, same table; input order does not matter.
    let mut rev = targets(&spec);
    rev.reverse();
    assert_eq!(Table::build(1024, &rev).buckets(), t.buckets());
}

#[test]
fn weight_change_moves_minimum_and_keeps_second_hop() {
    let before = [(11, 1), (12, 1), (13, 2)];
    let after = [(11, 3), (12, 1), (13, 1)];
    let old = Table::build(1024, &targets(&before));
    let (new, moves) = old.rebalance(&targets(&after), |_| true);
    assert_proportional(&new, &after);

    // Minimum moves: sum of positive share changes.
    let (os, ns) = (old.shares(), new.shares());
    let optimal: u32 = ns
        .iter()
        .map(|(d, &n)| n.saturating_sub(*os.get(d).unwrap_or(&0)))
        .sum();
    assert_eq!(moves.moved as u32, optimal);

    for (o, n) in old.buckets().iter().zip(new.buckets()) {
        if o.first != n.first {
            assert_eq!(
                n.second, o.first,
                "a moved bucket keeps its old owner as second hop"
            );
        } else {
            assert_eq!(n.second, o.second);
        }
    }
    // Contiguity survives one change: at most 2 ranges each.
    for &(l, _) in &after {
        assert!(
            new.ranges(ip(l)) <= 2,
            "backend {l}: {} ranges",
            new.ranges(ip(l))
        );
    }
}

#[test]
fn removing_a_backend_moves_exactly_its_buckets() {
    let spec = [(1, 1), (2, 1), (3, 1), (4, 1)];
    let old = Table::build(4096, &targets(&spec));
    let owned = old.shares()[&ip(3)];
    let rest = [(1, 1), (2, 1), (4, 1)];
    let (new, moves) = old.rebalance(&targets(&rest), |d| d != ip(3));
    assert_eq!(moves.moved as u32, owned, "moved / optimal = 1.00");
    assert_proportional(&new, &rest);
    assert!(
        new.buckets().iter().all(|b| b.second != Some(ip(3))),
        "offline: not a second hop"
    );
}

#[test]
fn drained_backend_stays_second_hop() {
    let old = Table::build(256, &targets(&[(1, 1), (2, 1)]));
    let (new, _) = old.rebalance(&targets(&[(1, 1)]), |_| true);
    let moved: Vec<_> = old
        .buckets()
        .iter()
        .zip(new.buckets())
        .filter(|(o, _)| o.first == Some(ip(2)))
        .collect();
    assert_eq!(moved.len(), 128);
    assert!(moved
        .iter()
        .all(|(_, n)| n.first == Some(ip(1)) && n.second == Some(ip(2))));
}

#[test]
fn recovery_swaps_back() {
    let all = targets(&[(1, 1), (2, 1), (3, 1)]);
    let t0 = Table::build(1024, &all);
    let (t1, _) = t0.rebalance(&targets(&[(1, 1), (2, 1)]), |_| true);
    let (t2, moves) = t1.rebalance(&all, |_| true);
    assert_eq!(t2.shares(), t0.shares());
    assert_eq!(moves.swapped, moves.moved, "every bucket came back by swap");
    // Every bucket is owned by its original owner again.
    assert_eq!(
        t0.buckets().iter().map(|b| b.first).collect::<Vec<_>>(),
        t2.buckets().iter().map(|b| b.first).collect::<Vec<_>>()
    );
}

#[test]
fn no_targets_drops_but_keeps_previous_owner() {
    let t0 = Table::build(64, &targets(&[(1, 1)]));
    let (t1, _) = t0.rebalance(&[], |_| true);
    assert!(t1
        .buckets()
        .iter()
        .all(|b| b.first.is_none() && b.second == Some(ip(1))));
    let (t2, _) = t1.rebalance(&targets(&[(1, 1)]), |_| true);
    assert!(t2.buckets().iter().all(|b| b.first == Some(ip(1))));
}

#[test]
fn random_changes_stay_proportional_and_bounded() {
    let mut state = 0x9e37_79b9u32;
    let mut rnd = move |n: u32| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state % n
    };
    let mut weights: Vec<(u8, u32)> = (1..=8).map(|l| (l, 100)).collect();
    let mut t = Table::build(4096, &targets(&weights));
    for _ in 0..300 {
        let i = rnd(8) as usize;
        weights[i].1 = 1 + rnd(400);
        let before = t.shares();
        let (n, moves) = t.rebalance(&targets(&weights), |_| true);
        assert_proportional(&n, &weights);
        let after = n.shares();
        let optimal: u32 = after
            .iter()
            .map(|(d, &c)| c.saturating_sub(*before.get(d).unwrap_or(&0)))
            .sum();
        assert_eq!(moves.moved as u32, optimal, "never more moves than needed");
        t = n;
    }
    let max_ranges = (1..=8).map(|l| t.ranges(ip(l))).max().unwrap();
    println!("after 300 random weight changes: at most {max_ranges} ranges per backend");
    assert!(
        max_ranges < 200,
        "ranges per backend exploded: {max_ranges}"
    );
}
