use super::*;

/// The last octet of a test address (every one is 10.0.0.x or ends like it).
pub(crate) fn last_octet(d: IpAddr) -> u8 {
    match d {
        IpAddr::V4(a) => a.octets()[3],
        IpAddr::V6(a) => a.octets()[15],
    }
}

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
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

/// Buckets that must change owner to go from `a` to `b` shares.
fn optimal(a: &BTreeMap<IpAddr, u32>, b: &BTreeMap<IpAddr, u32>) -> u32 {
    b.iter()
        .map(|(d, &n)| n.saturating_sub(*a.get(d).unwrap_or(&0)))
        .sum()
}

fn free(t: &Table, spec: &[(u8, u32)], now: u64) -> (Table, Moves) {
    t.rebalance(&targets(spec), &Rules::default(), now, StepLimits::NONE)
}

#[test]
fn quotas_are_within_one_and_sum_to_size() {
    let t = targets(&[(1, 1), (2, 1), (3, 1)]);
    let q = quotas(16, &t);
    assert_eq!(q.iter().sum::<u32>(), 16);
    assert_eq!(q, vec![6, 5, 5], "ties go to the lower address");
    let t = targets(&[(1, 3), (2, 65535), (3, 7)]);
    assert_eq!(quotas(4096, &t).iter().sum::<u32>(), 4096);
    assert_eq!(quotas(16, &targets(&[(1, 0)])), vec![0]);
}

#[test]
fn budget_is_shared_in_proportion() {
    let e = [(ip(1), 30), (ip(2), 10)];
    assert_eq!(share_budget(8, &e), vec![6, 2]);
    assert_eq!(share_budget(100, &e), vec![30, 10]);
    assert_eq!(share_budget(1, &e), vec![1, 0]);
}

#[test]
fn build_is_proportional_contiguous_and_deterministic() {
    let spec = [(11, 1), (12, 1), (13, 2)];
    let t = Table::build(1024, &targets(&spec));
    assert_proportional(&t, &spec);
    for &(l, _) in &spec {
        assert_eq!(t.ranges(ip(l)), 1, "backend {l} should own one range");
    }
    assert!(t.buckets().iter().all(|b| b.second().is_none()));
    let mut rev = targets(&spec);
    rev.reverse();
    assert_eq!(Table::build(1024, &rev).buckets(), t.buckets());
}

#[test]
fn weight_change_moves_minimum_and_keeps_second_hop() {
    let before = [(11, 1), (12, 1), (13, 2)];
    let after = [(11, 3), (12, 1), (13, 1)];
    let old = Table::build(1024, &targets(&before));
    let (new, moves) = free(&old, &after, 1);
    assert_proportional(&new, &after);
    assert_eq!(moves.moved as u32, optimal(&old.shares(), &new.shares()));
    assert_eq!((moves.forced, moves.pending), (0, 0));
    for (o, n) in old.buckets().iter().zip(new.buckets()) {
        if o.first() != n.first() {
            assert_eq!(
                n.second(),
                o.first(),
                "a moved bucket keeps its old owner as second hop"
            );
        } else {
            assert_eq!(n.second(), o.second());
        }
    }
    for &(l, _) in &after {
        assert!(
            new.ranges(ip(l)) <= 2,
            "backend {l}: {} ranges",
            new.ranges(ip(l))
        );
    }
}

#[test]
fn removing_one_of_n_moves_exactly_its_buckets() {
    for n in [2u8, 3, 5, 10] {
        let spec: Vec<(u8, u32)> = (1..=n).map(|l| (l, 1)).collect();
        let old = Table::build(4096, &targets(&spec));
        let owned = old.shares()[&ip(2)];
        let rest: Vec<(u8, u32)> = spec.iter().copied().filter(|s| s.0 != 2).collect();
        // Failure: forced out, still allowed as second hop.
        let (new, moves) = old.rebalance(
            &targets(&rest),
            &Rules {
                forced_out: &|d| d == ip(2),
                ..Rules::default()
            },
            5,
            StepLimits {
                max_moves: 0,
                min_age_ms: 1_000_000,
            },
        );
        println!(
            "remove 1 of {n}: moved {} optimal {owned} ratio {:.2} (forced {})",
            moves.moved,
            moves.moved as f64 / owned as f64,
            moves.forced
        );
        assert_eq!(moves.moved as u32, owned, "moved / optimal = 1.00");
        assert_eq!(
            moves.forced, moves.moved,
            "failure moves are forced, not budgeted"
        );
        assert_proportional(&new, &rest);
        assert!(new
            .buckets()
            .iter()
            .zip(old.buckets())
            .all(|(n, o)| o.first() != Some(ip(2)) || n.second() == Some(ip(2))));
    }
}

#[test]
fn offline_clears_both_hops() {
    let old = Table::build(256, &targets(&[(1, 1), (2, 1)]));
    let (mid, _) = free(&old, &[(1, 1), (2, 3)], 1);
    assert!(mid.second_shares()[&ip(1)] > 0);
    let (new, moves) = mid.rebalance(
        &targets(&[(2, 1)]),
        &Rules {
            keep: &|d| d != ip(1),
            forced_out: &|d| d == ip(1),
            ..Rules::default()
        },
        2,
        StepLimits::NONE,
    );
    assert_eq!(moves.forced, mid.shares()[&ip(1)] as usize);
    assert!(new
        .buckets()
        .iter()
        .all(|b| b.first() != Some(ip(1)) && b.second() != Some(ip(1))));
}

#[test]
fn drained_backend_leaves_voluntarily_and_stays_second_hop() {
    let old = Table::build(256, &targets(&[(1, 1), (2, 1)]));
    let lim = StepLimits {
        max_moves: 32,
        min_age_ms: 0,
    };
    let mut t = old.clone();
    let mut steps = 0;
    loop {
        let (n, m) = t.rebalance(&targets(&[(1, 1)]), &Rules::default(), steps, lim);
        assert!(m.moved <= 32, "step exceeds its budget");
        assert_eq!(m.forced, 0, "a drain is voluntary");
        t = n;
        steps += 1;
        if m.pending == 0 {
            break;
        }
    }
    assert_eq!(steps, 4, "128 buckets at 32 per step");
    for (o, n) in old.buckets().iter().zip(t.buckets()) {
        if o.first() == Some(ip(2)) {
            assert_eq!((n.first(), n.second()), (Some(ip(1)), Some(ip(2))));
        }
    }
}

#[test]
fn weight_change_in_limited_steps_reaches_exact_shares() {
    let size = 4096u32;
    let max_step_percent = 2;
    let lim = StepLimits {
        max_moves: (size * max_step_percent / 100) as usize,
        min_age_ms: 0,
    };
    let before = [(1, 1), (2, 1), (3, 1), (4, 1)];
    let after = [(1, 4), (2, 1), (3, 1), (4, 1)];
    let mut t = Table::build(size, &targets(&before));
    let start = t.shares();
    let mut steps = 0;
    let mut total = 0;
    loop {
        let (n, m) = t.rebalance(&targets(&after), &Rules::default(), steps as u64, lim);
        assert!(m.moved <= lim.max_moves, "step {steps} moved {}", m.moved);
        total += m.moved;
        t = n;
        steps += 1;
        if m.pending == 0 {
            break;
        }
        assert!(steps < 1000);
    }
    assert_proportional(&t, &after);
    let opt = optimal(&start, &t.shares());
    println!(
        "weight 1:1:1:1 -> 4:1:1:1 on {size} buckets at {max_step_percent}% per step: {steps} steps, {total} moves (optimal {opt}), at most {} per step",
        lim.max_moves
    );
    assert_eq!(total as u32, opt);
}

#[test]
fn fail_and_recover_swaps_most_buckets_back() {
    let all = targets(&[(1, 1), (2, 1), (3, 1), (4, 1)]);
    let t0 = Table::build(4096, &all);
    let owned_before: Vec<usize> = (0..4096).filter(|&i| t0.first(i) == Some(ip(3))).collect();
    let rest = targets(&[(1, 1), (2, 1), (4, 1)]);
    let (t1, _) = t0.rebalance(
        &rest,
        &Rules {
            forced_out: &|d| d == ip(3),
            ..Rules::default()
        },
        10,
        StepLimits::NONE,
    );
    // Recovery is voluntary: limited steps, 2 % each, buckets at least 0 ms old.
    let lim = StepLimits {
        max_moves: 82,
        min_age_ms: 0,
    };
    let mut t = t1;
    let mut now = 20;
    let (mut moved, mut swapped) = (0, 0);
    loop {
        let (n, m) = t.rebalance(&all, &Rules::default(), now, lim);
        moved += m.moved;
        swapped += m.swapped;
        t = n;
        now += 10;
        if m.pending == 0 {
            break;
        }
    }
    let back = owned_before
        .iter()
        .filter(|&&i| t.first(i) == Some(ip(3)))
        .count();
    let share = back as f64 / owned_before.len() as f64;
    println!(
        "fail + recover: {back}/{} old buckets back ({:.1}%), {swapped}/{moved} moves were swaps",
        owned_before.len(),
        100.0 * share
    );
    assert!(share > 0.95, "most old buckets come back: {share}");
    assert_eq!(swapped, moved);
}

#[test]
fn no_bucket_moves_voluntarily_twice_within_min_age() {
    let min_age = 300_000u64;
    let lim = StepLimits {
        max_moves: 200,
        min_age_ms: min_age,
    };
    let mut t = Table::build(2048, &targets(&[(1, 1), (2, 1), (3, 1)]));
    let mut last_move: Vec<Option<u64>> = vec![None; 2048];
    let mut state = 0x2545_f491u32;
    let mut now = 1_000u64;
    let mut violations = 0;
    for step in 0..400 {
        if step % 20 == 0 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
        }
        let w = |k: u32| 1 + (state >> (k * 5)) % 8;
        let spec = [(1, w(0)), (2, w(1)), (3, w(2))];
        let (n, _) = t.rebalance(&targets(&spec), &Rules::default(), now, lim);
        for (i, last) in last_move.iter_mut().enumerate() {
            if n.first(i) != t.first(i) {
                if let Some(prev) = *last {
                    if now - prev < min_age {
                        violations += 1;
                    }
                }
                *last = Some(now);
            }
        }
        t = n;
        now += 10_000;
    }
    assert_eq!(violations, 0);
}

#[test]
fn no_targets_drops_but_keeps_previous_owner() {
    let t0 = Table::build(64, &targets(&[(1, 1)]));
    let (t1, _) = t0.rebalance(
        &[],
        &Rules {
            forced_out: &|_| true,
            ..Rules::default()
        },
        1,
        StepLimits::NONE,
    );
    assert!(t1
        .buckets()
        .iter()
        .all(|b| b.first().is_none() && b.second() == Some(ip(1))));
    let (t2, _) = free(&t1, &[(1, 1)], 2);
    assert!(t2.buckets().iter().all(|b| b.first() == Some(ip(1))));
}

/// 1000 random events (weight changes, failures, recoveries) on 8
/// backends, with 1, 2 and 3 previous owners: every step moves the optimal
/// number of buckets and each backend's buckets stay in few ranges.
#[test]
fn thousand_random_events_keep_ranges_bounded() {
    for previous in 1..=MAX_PREVIOUS {
        let mut state = 0x9e37_79b9u32;
        let mut rnd = move |n: u32| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state % n
        };
        let n = 8u8;
        let mut weights: Vec<u32> = vec![100; n as usize];
        let mut up: Vec<bool> = vec![true; n as usize];
        let mut t = Table::build(
            4096,
            &targets(&(1..=n).map(|l| (l, 100)).collect::<Vec<_>>()),
        )
        .with_previous_owners(previous);
        let mut worst = 0;
        for event in 0..1000u64 {
            let i = rnd(n as u32) as usize;
            match rnd(3) {
                0 => weights[i] = 1 + rnd(400),
                1 => up[i] = false,
                _ => up[i] = true,
            }
            if !up.iter().any(|&u| u) {
                up[i] = true;
            }
            let spec: Vec<(u8, u32)> = (0..n as usize)
                .filter(|&k| up[k])
                .map(|k| (k as u8 + 1, weights[k]))
                .collect();
            let before = t.shares();
            let down = |d: IpAddr| !up[(last_octet(d) - 1) as usize];
            let rules = Rules {
                forced_out: &down,
                down: &down,
                ..Rules::default()
            };
            let (nt, moves) = t.rebalance(&targets(&spec), &rules, event, StepLimits::NONE);
            assert_proportional(&nt, &spec);
            assert_eq!(
                moves.moved as u32,
                optimal(&before, &nt.shares()),
                "event {event}"
            );
            t = nt;
            worst = worst.max((1..=n).map(|l| t.ranges(ip(l))).max().unwrap());
        }
        let now_max = (1..=n).map(|l| t.ranges(ip(l))).max().unwrap();
        println!("1000 random events on 8 backends x 4096 buckets, {previous} previous owner(s): at most {worst} ranges per backend at any time, {now_max} at the end");
        assert!(worst <= 96, "ranges per backend exploded: {worst}");
    }
}

#[test]
fn capped_quotas_give_what_a_capped_target_cannot_take_to_the_others() {
    let t = targets(&[(1, 1), (2, 1), (3, 1)]);
    // No caps: plain quotas.
    assert_eq!(capped_quotas(1024, &t, &[None; 3]), quotas(1024, &t));
    // .3 may keep 0 (it owns none): .1 and .2 share everything.
    assert_eq!(
        capped_quotas(1024, &t, &[None, None, Some(0)]),
        vec![512, 512, 0]
    );
    // A cap above the fair share does not bind.
    assert_eq!(
        capped_quotas(1024, &t, &[None, Some(600), None]),
        quotas(1024, &t)
    );
    // Caps below the fair share bind, the rest goes by weight.
    let w = targets(&[(1, 3), (2, 1), (3, 1)]);
    assert_eq!(
        capped_quotas(1000, &w, &[None, Some(100), Some(150)]),
        vec![750, 100, 150]
    );
    // Everyone capped below the size: the caps.
    assert_eq!(
        capped_quotas(64, &t, &[Some(10), Some(20), Some(5)]),
        vec![10, 20, 5]
    );
}

/// Move every bucket of a 1-backend table to `to` (forced: the owner is
/// out), at time `now`.
fn move_all(t: &Table, to: u8, now: u64) -> (Table, Moves) {
    let from: Vec<IpAddr> = t.shares().keys().copied().collect();
    t.rebalance(
        &targets(&[(to, 1)]),
        &Rules {
            forced_out: &|d| from.contains(&d),
            ..Rules::default()
        },
        now,
        StepLimits::NONE,
    )
}

#[test]
fn chains_remember_the_last_owners_newest_first_and_forget_the_oldest() {
    let mut t = Table::build(16, &targets(&[(1, 1)]));
    assert_eq!(t.previous_owners(), MAX_PREVIOUS);
    for (k, to) in [2u8, 3, 4].into_iter().enumerate() {
        let (n, m) = move_all(&t, to, k as u64 + 1);
        assert_eq!((m.moved, m.forgotten), (16, 0));
        t = n;
    }
    for i in 0..16 {
        assert_eq!(t.first(i), Some(ip(4)));
        assert_eq!(t.previous(i).collect::<Vec<_>>(), [ip(3), ip(2), ip(1)]);
    }
    assert_eq!(t.chain_lengths(), [0, 0, 0, 16]);
    // A fifth owner: the oldest (.1) is forgotten.
    let (t5, m) = move_all(&t, 5, 10);
    assert_eq!(m.forgotten, 16);
    assert_eq!(
        t5.previous(0).collect::<Vec<_>>(),
        [ip(4), ip(3), ip(2)],
        "newest first, the oldest forgotten"
    );
    // Remembering 1: every chain is cut to its newest entry.
    let short = t.with_previous_owners(1);
    assert_eq!(short.previous(3).collect::<Vec<_>>(), [ip(3)]);
    assert_eq!(short.changed_from(&t).len(), 16);
    let (s, m) = move_all(&short, 5, 10);
    assert_eq!(m.forgotten, 16);
    assert_eq!(s.previous(0).collect::<Vec<_>>(), [ip(4)]);
}

#[test]
fn a_swap_back_turns_the_chain_and_forgets_nobody() {
    let mut t = Table::build(16, &targets(&[(1, 1)]));
    for (k, to) in [2u8, 3].into_iter().enumerate() {
        t = move_all(&t, to, k as u64 + 1).0;
    }
    // .1, a previous owner, must gain everything again.
    let (n, m) = t.rebalance(&targets(&[(1, 1)]), &Rules::default(), 5, StepLimits::NONE);
    assert_eq!((m.moved, m.swapped, m.forgotten), (16, 16, 0));
    for i in 0..16 {
        assert_eq!(n.first(i), Some(ip(1)));
        assert_eq!(
            n.previous(i).collect::<Vec<_>>(),
            [ip(3), ip(2)],
            "the new first hop leaves the previous owners"
        );
    }
}

#[test]
fn down_previous_owners_go_last_and_offline_ones_leave() {
    let mut t = Table::build(16, &targets(&[(1, 1)]));
    for (k, to) in [2u8, 3, 4].into_iter().enumerate() {
        t = move_all(&t, to, k as u64 + 1).0;
    }
    // .3 (the newest previous owner) is known down: listed last.
    let (n, m) = t.rebalance(
        &targets(&[(4, 1)]),
        &Rules {
            down: &|d| d == ip(3),
            ..Rules::default()
        },
        10,
        StepLimits::NONE,
    );
    assert_eq!(m.moved, 0);
    assert_eq!(n.previous(0).collect::<Vec<_>>(), [ip(2), ip(1), ip(3)]);
    assert_eq!(n.changed_from(&t).len(), 16, "every chain was reordered");
    // .2 goes offline: it leaves every chain, the rest keep their order.
    let (o, _) = n.rebalance(
        &targets(&[(4, 1)]),
        &Rules {
            keep: &|d| d != ip(2),
            down: &|d| d == ip(3),
            ..Rules::default()
        },
        11,
        StepLimits::NONE,
    );
    assert_eq!(o.previous(0).collect::<Vec<_>>(), [ip(1), ip(3)]);
    assert!(!o.hops().contains(&ip(2)), "no chain names it");
}

#[test]
fn voluntary_moves_take_buckets_whose_chain_has_room_first() {
    // .1 and .2 share 64 buckets; 8 of .1's buckets already moved once
    // (from .3), so their chain of 1 previous owner is full.
    let t = Table::build(64, &targets(&[(3, 1), (1, 7)])).with_previous_owners(1);
    let (t, _) = t.rebalance(&targets(&[(1, 1)]), &Rules::default(), 1, StepLimits::NONE);
    let full: Vec<usize> = (0..64).filter(|&i| t.second(i).is_some()).collect();
    assert_eq!(full.len(), 8);
    // .2 joins and must take 32 of .1's 64: none of the 8 full ones move
    // (moving them would forget .3).
    let (n, m) = t.rebalance(
        &targets(&[(1, 1), (2, 1)]),
        &Rules::default(),
        2,
        StepLimits::NONE,
    );
    assert_eq!((m.moved, m.forgotten), (32, 0));
    for &i in &full {
        assert_eq!(
            n.first(i),
            Some(ip(1)),
            "bucket {i} with a full chain moved"
        );
    }
}

#[test]
fn changed_from_lists_exactly_the_buckets_that_differ() {
    let old = Table::build(256, &targets(&[(1, 1), (2, 1)]));
    let (new, m) = free(&old, &[(1, 1), (2, 3)], 7);
    let changed = new.changed_from(&old);
    let differ: Vec<u32> = (0..256u32)
        .filter(|&i| {
            let i = i as usize;
            old.bucket(i) != new.bucket(i) || old.moved_at(i) != new.moved_at(i)
        })
        .collect();
    assert_eq!(changed, differ);
    assert_eq!(changed.len(), m.moved);
    assert!(old.changed_from(&old).is_empty());
    // Rebuilt from the same buckets (other host numbering): equal.
    let again = Table::adopt(
        new.buckets(),
        (0..256).map(|i| new.moved_at(i)).collect(),
        MAX_PREVIOUS,
    );
    assert!(again.changed_from(&new).is_empty());
    assert_eq!(again, new);
}

#[test]
fn a_bucket_costs_twelve_bytes() {
    let t = Table::build(4096, &targets(&[(1, 1), (2, 1), (3, 1)]));
    let per_bucket = t.heap_bytes() as f64 / 4096.0;
    // 12 bytes, and a fraction of a byte for the chunks' pointers and counts.
    assert!(
        (12.0..12.3).contains(&per_bucket),
        "{per_bucket} bytes per bucket"
    );
}

/// The scenario of [`ipv4_tables_are_those_of_the_ipv4_only_code`]: a
/// build, a failure with a paced step after it, and a recovery with one
/// more backend, each table folded into an FNV-1a digest (the hops by
/// `key`, and the move times). `addr(x)` is backend 10.0.0.x or its
/// stand-in.
fn scenario_digests(addr: &dyn Fn(u8) -> IpAddr, key: &dyn Fn(IpAddr) -> Vec<u8>) -> Vec<u64> {
    let digest = |t: &Table, h: &mut u64| {
        let mut put = |b: &[u8]| {
            for x in b {
                *h ^= *x as u64;
                *h = h.wrapping_mul(0x100000001b3);
            }
        };
        for i in 0..t.size() as usize {
            put(&[0xff]);
            for hop in t.bucket(i).hops() {
                put(&key(hop));
            }
            put(&t.moved_at(i).unwrap_or(0).to_le_bytes());
        }
    };
    let w = [100u32, 100, 200, 50, 100, 300, 100];
    let targets: Vec<Target> = w
        .iter()
        .enumerate()
        .map(|(i, &w)| Target {
            dip: addr(11 + i as u8),
            weight: w,
        })
        .collect();
    let mut h = 0xcbf29ce484222325u64;
    let mut out = Vec::new();
    let t = Table::build(4096, &targets);
    digest(&t, &mut h);
    out.push(h);
    let mut t2: Vec<Target> = targets
        .iter()
        .copied()
        .filter(|t| t.dip != addr(13))
        .collect();
    for t in &mut t2 {
        if t.dip == addr(16) {
            t.weight = 120;
        }
    }
    let down = |d: IpAddr| d == addr(13);
    let rules = Rules {
        keep: &every,
        forced_out: &down,
        down: &down,
    };
    let limits = |min_age_ms| StepLimits {
        max_moves: 300,
        min_age_ms,
    };
    let (t3, m) = t.rebalance(&t2, &rules, 5_000, limits(0));
    assert_eq!((m.moved, m.forced, m.pending), (1162, 862, 132));
    digest(&t3, &mut h);
    out.push(h);
    let (t4, _) = t3.rebalance(&t2, &rules, 9_000, limits(1_000));
    digest(&t4, &mut h);
    out.push(h);
    let mut t5 = targets.clone();
    t5.push(Target {
        dip: addr(18),
        weight: 150,
    });
    let (t6, m) = t4.rebalance(&t5, &Rules::default(), 20_000, StepLimits::NONE);
    assert_eq!((m.moved, m.swapped), (1559, 1000));
    digest(&t6, &mut h);
    out.push(h);
    out
}

/// Tables of IPv4 backends are exactly what the code made before cluster
/// addresses could be IPv6: the digests were computed by the same
/// scenario on the IPv4-only table code (hops as `Ipv4Addr`).
#[test]
fn ipv4_tables_are_those_of_the_ipv4_only_code() {
    let key = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => panic!("{a} in an IPv4 table"),
    };
    assert_eq!(
        scenario_digests(&ip, &key),
        [
            0xcdf913c7fddbd72e,
            0x93c2704452476a90,
            0xcc5cc3150caf77b8,
            0xaeaa7512f926b6b8
        ]
    );
}

/// IPv6 backends (an IPv6 cluster network): a table depends on the
/// backends' order and weights only, so backends 2001:db8::x build, step
/// and recover exactly as 10.0.0.x do (same digests with each address
/// written as the IPv4 one it stands for).
#[test]
fn ipv6_backends_make_the_tables_their_ipv4_counterparts_make() {
    let ip6 = |last: u8| {
        IpAddr::V6(std::net::Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            0,
            last as u16,
        ))
    };
    let as_v4 = |a: IpAddr| match a {
        IpAddr::V6(a) => vec![10, 0, 0, a.octets()[15]],
        IpAddr::V4(a) => panic!("{a} in an IPv6 table"),
    };
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => panic!("{a} in an IPv4 table"),
    };
    assert_eq!(scenario_digests(&ip6, &as_v4), scenario_digests(&ip, &v4));
}
