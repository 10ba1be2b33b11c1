//! Simulations of chains (docs/design.md "Tables and pacing"): sequences of
//! weight changes and failures driven through paced steps, with
//! connections born in every bucket at every step and living a fixed
//! time. A connection is lost when, before it ends, its backend is no
//! longer among its bucket's hops (first hop or a remembered previous
//! owner): second chance then has nowhere to send its packets. Run with
//! `cargo test --lib table::sim -- --nocapture` for the numbers.

use super::*;

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

/// xorshift32: the same sequence on every run.
struct Rng(u32);

impl Rng {
    fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0 % n
    }
}

/// Pacing as the control plane runs it (`rebalance` settings).
#[derive(Clone, Copy)]
struct Pacing {
    min_interval_ms: u64,
    max_step_percent: usize,
    min_age_ms: u64,
}

/// One event of a scenario: at `at_ms`, the weights (0: down) become these.
struct Event {
    at_ms: u64,
    weights: Vec<u32>,
}

/// What a run measured.
#[derive(Debug, Default)]
struct Outcome {
    /// Connection cohorts (one per bucket and step) and how many of them
    /// lost their backend before their lifetime ended.
    cohorts: u64,
    lost: u64,
    /// Buckets whose distinct owners within one connection lifetime
    /// exceeded the first hop plus the previous owners remembered.
    too_many_owners: u64,
    /// Buckets moved, and the least any table could have moved.
    moved: u64,
    optimal: u64,
    forgotten: u64,
    /// Buckets by previous owners listed, summed over steps.
    chains: [u64; MAX_OWNERS],
    steps: u64,
}

impl Outcome {
    fn lost_percent(&self) -> f64 {
        100.0 * self.lost as f64 / self.cohorts.max(1) as f64
    }
}

fn targets_of(weights: &[u32]) -> Vec<Target> {
    weights
        .iter()
        .enumerate()
        .filter(|(_, &w)| w > 0)
        .map(|(i, &w)| Target {
            dip: ip(i as u8 + 1),
            weight: w,
        })
        .collect()
}

/// Drive `events` through paced steps every `tick_ms` until `end_ms`, on a
/// table of `size` buckets remembering `previous` owners, with connections
/// living `lifetime_ms`. A backend whose weight is 0 is down: forced out,
/// kept in chains, listed last.
fn run(
    size: u32,
    previous: usize,
    events: &[Event],
    pacing: Pacing,
    lifetime_ms: u64,
    tick_ms: u64,
    end_ms: u64,
) -> Outcome {
    let mut out = Outcome::default();
    let mut weights = events[0].weights.clone();
    let mut t = Table::build(size, &targets_of(&weights)).with_previous_owners(previous);
    let mut next_event = 1;
    let mut last_step: Option<u64> = None;
    let mut pending = 0;
    // Per bucket: cohorts (owner, born) still alive, and every (time,
    // owner) it had within the last lifetime.
    let mut cohorts: Vec<Vec<(Ipv4Addr, u64)>> = vec![Vec::new(); size as usize];
    let mut owners: Vec<Vec<(u64, Ipv4Addr)>> = vec![Vec::new(); size as usize];
    let mut flagged = vec![false; size as usize];
    let mut now = 0;
    while now <= end_ms {
        let mut changed = false;
        while next_event < events.len() && events[next_event].at_ms <= now {
            weights = events[next_event].weights.clone();
            next_event += 1;
            changed = true;
        }
        let allowed = last_step.is_none_or(|s| now - s >= pacing.min_interval_ms);
        if changed || (pending > 0 && allowed) {
            let w = weights.clone();
            let down = move |d: Ipv4Addr| w[(d.octets()[3] - 1) as usize] == 0;
            let rules = Rules {
                forced_out: &down,
                down: &down,
                ..Rules::default()
            };
            let limits = StepLimits {
                max_moves: if allowed {
                    (size as usize * pacing.max_step_percent / 100).max(1)
                } else {
                    0
                },
                min_age_ms: pacing.min_age_ms,
            };
            let before = t.shares();
            let (n, m) = t.rebalance(&targets_of(&weights), &rules, now, limits);
            let after = n.shares();
            out.optimal += after
                .iter()
                .map(|(d, &k)| k.saturating_sub(*before.get(d).unwrap_or(&0)) as u64)
                .sum::<u64>();
            out.moved += m.moved as u64;
            out.forgotten += m.forgotten as u64;
            if m.moved > m.forced {
                last_step = Some(now);
            }
            pending = m.pending;
            t = n;
        }
        out.steps += 1;
        for (k, c) in t.chain_lengths().iter().enumerate() {
            out.chains[k] += *c as u64;
        }
        for i in 0..size as usize {
            let hops: Vec<Ipv4Addr> = t.bucket(i).hops().collect();
            cohorts[i].retain(|&(o, born)| {
                if now - born >= lifetime_ms {
                    return false;
                }
                if hops.contains(&o) {
                    return true;
                }
                out.lost += 1;
                false
            });
            if let Some(f) = t.first(i) {
                cohorts[i].push((f, now));
                out.cohorts += 1;
                let list = &mut owners[i];
                list.retain(|&(at, _)| now - at < lifetime_ms);
                if list.last().map(|x| x.1) != Some(f) {
                    list.push((now, f));
                }
                let mut distinct: Vec<Ipv4Addr> = list.iter().map(|x| x.1).collect();
                distinct.sort();
                distinct.dedup();
                if distinct.len() > 1 + previous && !flagged[i] {
                    flagged[i] = true;
                    out.too_many_owners += 1;
                }
            }
        }
        now += tick_ms;
    }
    out
}

/// Random weight changes of one backend at a time, every `every_ms`.
fn weight_churn(rng: &mut Rng, backends: usize, every_ms: u64, end_ms: u64) -> Vec<Event> {
    let mut w = vec![100u32; backends];
    let mut events = vec![Event {
        at_ms: 0,
        weights: w.clone(),
    }];
    let mut at = every_ms;
    while at <= end_ms {
        let i = rng.below(backends as u32) as usize;
        w[i] = 50 + rng.below(151);
        events.push(Event {
            at_ms: at,
            weights: w.clone(),
        });
        at += every_ms;
    }
    events
}

/// Failures (weight 0) and recoveries of random backends, every
/// `every_ms`, never all down.
fn failures(rng: &mut Rng, backends: usize, every_ms: u64, end_ms: u64) -> Vec<Event> {
    let mut w = vec![100u32; backends];
    let mut events = vec![Event {
        at_ms: 0,
        weights: w.clone(),
    }];
    let mut at = every_ms;
    while at <= end_ms {
        let i = rng.below(backends as u32) as usize;
        w[i] = if w[i] == 0 { 100 } else { 0 };
        if w.iter().all(|&x| x == 0) {
            w[i] = 100;
        }
        events.push(Event {
            at_ms: at,
            weights: w.clone(),
        });
        at += every_ms;
    }
    events
}

fn report(label: &str, runs: &[(usize, Outcome)]) {
    for (previous, o) in runs {
        let total: u64 = o.chains.iter().sum();
        let dist: Vec<String> = o
            .chains
            .iter()
            .map(|&c| format!("{:.1}%", 100.0 * c as f64 / total.max(1) as f64))
            .collect();
        println!(
            "{label}, {previous} previous owner(s): {} of {} connection cohorts lost ({:.3}%), {} buckets had more than {} owners within a lifetime, moved {} (optimal {}), {} chain entries forgotten; buckets by previous owners listed (0..3): {}",
            o.lost,
            o.cohorts,
            o.lost_percent(),
            o.too_many_owners,
            1 + previous,
            o.moved,
            o.optimal,
            o.forgotten,
            dist.join(" ")
        );
    }
}

/// The harness case in the table alone: 20 weight changes 1 s
/// apart, `min_bucket_age_ms` 2000, unpaced steps, keep-alive connections
/// living the whole run. With 3 backends, 2 previous owners cover every
/// backend, so nothing is lost; with 1, buckets that move twice lose their
/// first owner's connections. With 8 backends the third previous owner
/// matters.
#[test]
fn twenty_weight_changes_one_second_apart() {
    let pacing = Pacing {
        min_interval_ms: 0,
        max_step_percent: 100,
        min_age_ms: 2000,
    };
    for backends in [3usize, 8] {
        let mut runs = Vec::new();
        for previous in 1..=MAX_PREVIOUS {
            let mut rng = Rng(0x2545_f491);
            let events = weight_churn(&mut rng, backends, 1000, 20_000);
            let o = run(4096, previous, &events, pacing, 3_600_000, 200, 25_000);
            assert_eq!(o.moved, o.optimal, "every step moves the optimal number");
            runs.push((previous, o));
        }
        report(&format!("20 changes 1 s apart, {backends} backends"), &runs);
        let lost: Vec<u64> = runs.iter().map(|r| r.1.lost).collect();
        assert!(
            lost[0] > 0,
            "one previous owner loses connections: {lost:?}"
        );
        if backends == 3 {
            assert_eq!(lost[1..], [0, 0], "2 previous owners cover 3 backends");
        } else {
            assert!(
                lost[2] < lost[0] / 2,
                "3 previous owners lose less: {lost:?}"
            );
        }
    }
}

/// Hours of paced weight churn (one backend's weight every minute, the
/// default pacing: 2 % per 10 s, buckets at least 300 s old), connections
/// living an hour: the table moves the optimal number of buckets, and each
/// previous owner remembered loses fewer connections.
#[test]
fn weight_churn_with_default_pacing() {
    let pacing = Pacing {
        min_interval_ms: 10_000,
        max_step_percent: 2,
        min_age_ms: 300_000,
    };
    let mut runs = Vec::new();
    for previous in 1..=MAX_PREVIOUS {
        let mut rng = Rng(0x9e37_79b9);
        let events = weight_churn(&mut rng, 6, 60_000, 6 * 3_600_000);
        let o = run(
            4096,
            previous,
            &events,
            pacing,
            3_600_000,
            10_000,
            6 * 3_600_000,
        );
        assert_eq!(o.moved, o.optimal, "weight changes move the optimal number");
        runs.push((previous, o));
    }
    report("6 h of weight changes every 60 s, 6 backends", &runs);
    let lost: Vec<f64> = runs.iter().map(|r| r.1.lost_percent()).collect();
    assert!(
        lost[0] > lost[1] && lost[1] > lost[2],
        "each previous owner more loses less: {lost:?}"
    );
}

/// Failures and recoveries (a random backend of 6 every 2 minutes), the
/// default pacing, connections living an hour.
#[test]
fn failures_and_recoveries() {
    let pacing = Pacing {
        min_interval_ms: 10_000,
        max_step_percent: 2,
        min_age_ms: 300_000,
    };
    let mut runs = Vec::new();
    for previous in 1..=MAX_PREVIOUS {
        let mut rng = Rng(0x1234_5678);
        let events = failures(&mut rng, 6, 120_000, 6 * 3_600_000);
        let o = run(
            4096,
            previous,
            &events,
            pacing,
            3_600_000,
            10_000,
            6 * 3_600_000,
        );
        runs.push((previous, o));
    }
    report(
        "6 h of failures and recoveries every 2 min, 6 backends",
        &runs,
    );
    let lost: Vec<u64> = runs.iter().map(|r| r.1.lost).collect();
    assert!(
        lost[2] <= lost[1] && lost[1] < lost[0],
        "more previous owners lose fewer: {lost:?}"
    );
}
