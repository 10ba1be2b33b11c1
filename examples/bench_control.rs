//! Control-plane benchmarks of nilb (part 4 of BENCHMARKS.md), run by
//! `scripts/bench.sh`:
//!
//! - `Table::build` for (backends, buckets) = (10, 4096), (100, 65536),
//!   (1000, 65536);
//! - `Table::rebalance` after one backend fails (forced moves) and after one
//!   backend's weight doubles (voluntary moves, no step limit);
//! - `ControlPlane::new` and `ControlPlane::update` (a reload that doubles one
//!   weight) for one service of that shape;
//! - map synchronisation: `Dataplane::install_table` of the full table
//!   (every bucket written in place through the pool's mapping), and of the
//!   buckets a weight change moved alone (`TableInstall::changed`);
//!   `ControlPlane::apply` of a full plan for 100 services of 4096 buckets.
//!
//!   bench_control [--reps 7] [--out FILE.json]
//!
//! Needs root (BPF maps). Prints a JSON document.

use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::time::Instant;

use anyhow::Result;
use nilb::config::{Config, Protocol, ServiceKey};
use nilb::control::ControlPlane;
use nilb::dataplane::{Dataplane, DataplaneOps};
use nilb::table::{Rules, StepLimits, Table, Target};

mod bench_common;
use bench_common::*;

/// Run `f` `reps` times (after one warm-up run); milliseconds per run.
fn time_ms<T>(reps: usize, mut f: impl FnMut() -> T) -> Vec<f64> {
    std::hint::black_box(f());
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn dip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 1, 0, 0)) + i + 1)
}

fn targets(n: u32) -> Vec<Target> {
    (0..n)
        .map(|i| Target {
            dip: dip(i).into(),
            weight: 100,
        })
        .collect()
}

fn config(services: &[(u16, u32, u32)], first_weight: u32) -> String {
    let mut s = String::from(
        "version: 1\n\
         cluster: {hash_seed: 0x5eed1234, balancers: [10.0.0.1]}\n\
         defaults:\n  \
         rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}\n\
         services:\n",
    );
    for (port, n, size) in services {
        let _ = writeln!(
            s,
            "  - name: s{port}\n    vip: 10.0.0.100\n    port: {port}\n    protocol: tcp\n    \
             table_size: {size}\n    health_check: {{none: {{}}}}\n    backends:"
        );
        for i in 0..*n {
            let w = if i == 0 { first_weight } else { 100 };
            let _ = writeln!(s, "      - {{dip: {}, weight: {w}}}", dip(i));
        }
    }
    s
}

fn parse(y: &str) -> Result<Config> {
    Config::parse(y).map_err(|e| anyhow::anyhow!("bench config invalid: {e}"))
}

fn stat(name: &str, v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:.4}")).collect();
    format!(
        "\"{name}\": {{\"median_ms\": {:.4}, \"runs_ms\": [{}]}}",
        median(v),
        items.join(", ")
    )
}

fn main() -> Result<()> {
    let reps: usize = arg("--reps", "7").parse()?;
    let out_path = arg("--out", "");
    let node = std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

    let mut storage = MaybeUninit::uninit();
    // A pool for the largest case (1000 x 65536) and 100 x 4096 at once.
    let mut dp = Dataplane::load_pinned(&mut storage, None, 16 * 65536)?;

    let mut cases_json = Vec::new();
    for (n, size) in [(10u32, 4096u32), (100, 65536), (1000, 65536)] {
        let t = targets(n);
        let build = time_ms(reps, || Table::build(size, &t));
        let base = Table::build(size, &t);
        let failed = t[0].dip;
        let rest: Vec<Target> = t[1..].to_vec();
        let fail = time_ms(reps, || {
            base.rebalance(
                &rest,
                &Rules {
                    forced_out: &|d| d == failed,
                    ..Rules::default()
                },
                1000,
                StepLimits::NONE,
            )
        });
        let mut heavier = t.clone();
        heavier[0].weight = 200;
        let weight = time_ms(reps, || {
            base.rebalance(&heavier, &Rules::default(), 1000, StepLimits::NONE)
        });
        let (_, moves) = base.rebalance(&heavier, &Rules::default(), 1000, StepLimits::NONE);

        let c0 = parse(&config(&[(80, n, size)], 100))?;
        let c1 = parse(&config(&[(80, n, size)], 200))?;
        let cp_new = time_ms(reps, || ControlPlane::new(c0.clone(), 0));
        let cp = ControlPlane::new(c0.clone(), 0);
        let mut upd = Vec::new();
        for _ in 0..=reps {
            let mut next = cp.clone();
            let c = c1.clone();
            let t0 = Instant::now();
            let plan = next.update(c, 1000);
            upd.push(t0.elapsed().as_secs_f64() * 1e3);
            std::hint::black_box(plan);
        }
        upd.remove(0);

        // Map synchronisation of the full table.
        let key = ServiceKey {
            vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            port: 80,
            protocol: Protocol::Tcp,
        };
        // Slots: backend i has slot i + 1.
        let slot_of = |d: std::net::IpAddr| match d {
            std::net::IpAddr::V4(d) => u32::from(d) - u32::from(dip(0)) + 1,
            std::net::IpAddr::V6(_) => 0,
        };
        let install = time_ms(reps, || dp.install_table(&key, 0, &base, &slot_of).unwrap());
        // The buckets the weight change moved, written alone, back and forth.
        let (moved_table, _) = base.rebalance(&heavier, &Rules::default(), 1000, StepLimits::NONE);
        let changed: Vec<u32> = moved_table.changed_from(&base);
        let mut flip = false;
        let install_changed = time_ms(reps, || {
            flip = !flip;
            let t = if flip { &moved_table } else { &base };
            dp.install_tables(&[nilb::dataplane::TableInstall {
                key,
                index: 0,
                nat_port: None,
                table: t,
                slot_of: &slot_of,
                changed: Some(&changed),
            }])
            .unwrap()
        });
        eprintln!(
            "{n} x {size}: build {:.2} ms, fail {:.2} ms, weight {:.2} ms ({} moved), update {:.2} ms, install {:.2} ms (changed buckets alone {:.3} ms)",
            median(&build),
            median(&fail),
            median(&weight),
            moves.moved,
            median(&upd),
            median(&install),
            median(&install_changed)
        );
        cases_json.push(format!(
            "{{\"backends\": {n}, \"buckets\": {size}, \"weight_change_moved\": {}, \"changed_buckets\": {}, {}, {}, {}, {}, {}, {}, {}}}",
            moves.moved,
            changed.len(),
            stat("build", &build),
            stat("rebalance_failure", &fail),
            stat("rebalance_weight", &weight),
            stat("cp_new", &cp_new),
            stat("cp_update", &upd),
            stat("install_table", &install),
            stat("install_changed", &install_changed),
        ));
        dp.remove_service(&key)?;
    }

    // Full plan of 100 services x 4096 buckets, 3 backends each.
    let services: Vec<(u16, u32, u32)> = (1000..1100).map(|p| (p, 3, 4096)).collect();
    let c100 = parse(&config(&services, 100))?;
    let cp100 = ControlPlane::new(c100.clone(), 0);
    let full = time_ms(reps.min(5), || {
        cp100.apply(&mut dp, node, &cp100.full_plan()).unwrap()
    });
    let c100b = parse(&config(&services, 200))?;
    let mut upd100 = Vec::new();
    let mut apply100 = Vec::new();
    for _ in 0..reps.min(5) {
        let mut next = cp100.clone();
        let t0 = Instant::now();
        let plan = next.update(c100b.clone(), 1000);
        let t1 = Instant::now();
        next.apply(&mut dp, node, &plan)?;
        let t2 = Instant::now();
        upd100.push((t1 - t0).as_secs_f64() * 1e3);
        apply100.push((t2 - t1).as_secs_f64() * 1e3);
        // back to the running state for the next repetition
        cp100.apply(&mut dp, node, &cp100.full_plan())?;
    }
    // A reload in which one service of the 100 changes (what SIGHUP costs
    // inside the daemon besides signal delivery): parse + validate the file,
    // ControlPlane::update, apply.
    let yaml100 = config(&services, 100);
    let parse100 = time_ms(reps.min(5), || parse(&yaml100).unwrap());
    let c100one = parse(&yaml100.replacen("weight: 100}", "weight: 200}", 1))?;
    let mut upd_one = Vec::new();
    let mut apply_one = Vec::new();
    for _ in 0..reps.min(5) {
        let mut next = cp100.clone();
        let t0 = Instant::now();
        let plan = next.update(c100one.clone(), 1000);
        let t1 = Instant::now();
        next.apply(&mut dp, node, &plan)?;
        let t2 = Instant::now();
        assert_eq!(plan.install.len(), 1);
        upd_one.push((t1 - t0).as_secs_f64() * 1e3);
        apply_one.push((t2 - t1).as_secs_f64() * 1e3);
        cp100.apply(&mut dp, node, &cp100.full_plan())?;
    }
    eprintln!(
        "100 services x 4096: full apply {:.1} ms, update {:.1} ms + apply {:.1} ms; one changed: parse {:.1} ms, update {:.1} ms, apply {:.1} ms",
        median(&full),
        median(&upd100),
        median(&apply100),
        median(&parse100),
        median(&upd_one),
        median(&apply_one)
    );

    let doc = format!(
        "{{\"reps\": {reps},\n\"tables\": [\n  {}\n],\n\"hundred_services\": {{{}, {}, {}, {}, {}, {}}}}}\n",
        cases_json.join(",\n  "),
        stat("full_apply", &full),
        stat("update_all", &upd100),
        stat("apply_all", &apply100),
        stat("parse", &parse100),
        stat("update_one", &upd_one),
        stat("apply_one", &apply_one),
    );
    if out_path.is_empty() {
        print!("{doc}");
    } else {
        std::fs::write(&out_path, doc)?;
    }
    Ok(())
}
