use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::table::{Rules, StepLimits, Table, Target};

fn cpu_cfg() -> DynamicWeight {
    DynamicWeight {
        source: LoadSource::Cpu,
        metrics_port: 9100,
        metrics_path: "/metrics".into(),
        target_percent: 70,
        interval_ms: 2000,
        deadband_percent: 5,
        max_change_percent: 20,
        min_weight_percent: 10,
        max_weight_percent: 400,
    }
}

fn b(effective: f64, reading: Option<f64>) -> BackendLoad {
    BackendLoad {
        configured: 100,
        effective,
        reading,
    }
}

#[test]
fn deadband_bounds_and_missing_readings() {
    let c = cpu_cfg();
    // Within +-2.5 points of the mean: nothing moves.
    let w = adjust(
        &c,
        &[
            b(100.0, Some(0.40)),
            b(100.0, Some(0.42)),
            b(100.0, Some(0.39)),
        ],
    );
    assert_eq!(w, vec![100.0, 100.0, 100.0]);
    // Hot backend: weight falls, by at most 20 %; cold ones rise.
    let w = adjust(
        &c,
        &[
            b(100.0, Some(0.95)),
            b(100.0, Some(0.30)),
            b(100.0, Some(0.30)),
        ],
    );
    assert!((w[0] - 80.0).abs() < 1e-9, "{w:?}");
    assert!(w[1] > 100.0 && w[1] <= 120.0, "{w:?}");
    // Unreadable: unchanged, and does not count in the mean.
    let w = adjust(
        &c,
        &[b(100.0, Some(0.9)), b(100.0, None), b(100.0, Some(0.3))],
    );
    assert_eq!(w[1], 100.0);
    assert!(w[0] < 100.0 && w[2] > 100.0);
    // Bounds relative to the configured weight.
    let w = adjust(&c, &[b(10.5, Some(1.0)), b(399.0, Some(0.0))]);
    assert_eq!(w, vec![10.0, 400.0]);
    // One reading alone balances nothing.
    assert_eq!(
        adjust(&c, &[b(100.0, Some(0.99)), b(100.0, None)]),
        vec![100.0, 100.0]
    );
}

#[test]
fn hot_backend_sheds_inside_the_deadband() {
    let c = cpu_cfg();
    let w = adjust(
        &c,
        &[
            b(100.0, Some(0.80)),
            b(100.0, Some(0.78)),
            b(100.0, Some(0.78)),
        ],
    );
    assert!(
        w[0] < 100.0,
        "above target_percent and above the mean: {w:?}"
    );
    assert_eq!(w[1], 100.0);
}

#[test]
fn qps_equalises_per_configured_weight() {
    let c = DynamicWeight {
        source: LoadSource::Qps,
        ..cpu_cfg()
    };
    let mut x = b(100.0, Some(300.0));
    x.configured = 100;
    let mut y = b(200.0, Some(300.0));
    y.configured = 200;
    // Same rate on half the configured weight: x is overloaded.
    let w = adjust(&c, &[x, y]);
    assert!(w[0] < 100.0 && w[1] > 200.0, "{w:?}");
}

#[test]
fn counters_to_utilisation() {
    assert_eq!(utilisation_between((10.0, 100.0), (15.0, 110.0)), Some(0.5));
    assert_eq!(utilisation_between((10.0, 100.0), (10.0, 100.0)), None);
    assert_eq!(
        utilisation_between((10.0, 100.0), (5.0, 50.0)),
        None,
        "counter reset"
    );
}

/// The load model of the issue: backends with capacities 1:1:2:2:4 (equal
/// configured weights) share a total demand in proportion to their buckets;
/// utilisation = demand * share / capacity. Each round the controller runs
/// (once the table has caught up) and the table moves at most 5 % of its
/// buckets.
struct Sim {
    capacity: Vec<f64>,
    demand: f64,
    weights: Vec<f64>,
    table: Table,
    now: u64,
    moved: usize,
}

fn ip(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1 + i as u8))
}

impl Sim {
    fn new(capacity: &[f64], demand: f64) -> Sim {
        let weights = vec![100.0; capacity.len()];
        let targets: Vec<Target> = (0..capacity.len())
            .map(|i| Target {
                dip: ip(i),
                weight: table_weight(100.0),
            })
            .collect();
        Sim {
            capacity: capacity.to_vec(),
            demand,
            weights,
            table: Table::build(4096, &targets),
            now: 0,
            moved: 0,
        }
    }

    fn utilisation(&self) -> Vec<f64> {
        let shares = self.table.shares();
        (0..self.capacity.len())
            .map(|i| {
                let share = *shares.get(&ip(i)).unwrap_or(&0) as f64 / self.table.size() as f64;
                (self.demand * share / self.capacity[i]).min(1.0)
            })
            .collect()
    }

    fn spread(&self) -> f64 {
        let u = self.utilisation();
        u.iter().cloned().fold(0.0, f64::max) - u.iter().cloned().fold(1.0, f64::min)
    }

    /// One control interval. Returns whether the weights changed.
    fn round(&mut self, cfg: &DynamicWeight, pending: &mut usize) -> bool {
        self.now += cfg.interval_ms;
        let mut changed = false;
        if *pending == 0 {
            let u = self.utilisation();
            let input: Vec<BackendLoad> = (0..u.len())
                .map(|i| BackendLoad {
                    configured: 100,
                    effective: self.weights[i],
                    reading: Some(u[i]),
                })
                .collect();
            let next = adjust(cfg, &input);
            changed = next != self.weights;
            self.weights = next;
        }
        let targets: Vec<Target> = (0..self.weights.len())
            .map(|i| Target {
                dip: ip(i),
                weight: table_weight(self.weights[i]),
            })
            .collect();
        let limits = StepLimits {
            max_moves: 4096 * 5 / 100,
            min_age_ms: 0,
        };
        let (t, m) = self
            .table
            .rebalance(&targets, &Rules::default(), self.now, limits);
        self.table = t;
        self.moved += m.moved;
        *pending = m.pending;
        changed
    }

    /// Rounds until the utilisation spread is within 5 points.
    fn converge(&mut self, cfg: &DynamicWeight, pending: &mut usize, max_rounds: usize) -> usize {
        for r in 1..=max_rounds {
            self.round(cfg, pending);
            if *pending == 0 && self.spread() <= 0.05 {
                return r;
            }
        }
        panic!(
            "no convergence in {max_rounds} rounds: utilisation {:?}, weights {:?}",
            self.utilisation(),
            self.weights
        );
    }
}

#[test]
fn load_model_converges_settles_and_absorbs_a_capacity_loss() {
    let cfg = cpu_cfg();
    let mut sim = Sim::new(&[1.0, 1.0, 2.0, 2.0, 4.0], 4.0);
    let start = sim.utilisation();
    let mut pending = 0;
    let rounds = sim.converge(&cfg, &mut pending, 200);
    let moved = sim.moved;
    println!(
        "capacities 1:1:2:2:4, demand 40% of total: utilisation {:?} -> {:?} in {rounds} rounds, {moved} buckets moved, weights {:?}",
        pct(&start),
        pct(&sim.utilisation()),
        sim.weights.iter().map(|w| w.round()).collect::<Vec<_>>()
    );

    // Settled: 50 more rounds without any weight change or bucket move.
    let (w, m) = (sim.weights.clone(), sim.moved);
    let mut changes = 0;
    for _ in 0..50 {
        if sim.round(&cfg, &mut pending) {
            changes += 1;
        }
        assert!(
            sim.spread() <= 0.05,
            "left the band: {:?}",
            sim.utilisation()
        );
    }
    println!(
        "after convergence: {changes} weight changes and {} buckets moved in 50 rounds",
        sim.moved - m
    );
    assert_eq!(
        changes, 0,
        "oscillation: weights {:?} -> {:?}",
        w, sim.weights
    );

    // The biggest machine loses three quarters of its capacity.
    sim.capacity[4] = 1.0;
    let before = sim.moved;
    let hot = sim.utilisation();
    let rounds = sim.converge(&cfg, &mut pending, 200);
    println!(
        "capacity loss 4 -> 1 on backend 5: utilisation {:?} -> {:?} in {rounds} rounds, {} buckets moved",
        pct(&hot),
        pct(&sim.utilisation()),
        sim.moved - before
    );
}

fn pct(u: &[f64]) -> Vec<u32> {
    u.iter().map(|x| (x * 100.0).round() as u32).collect()
}
