//! Control-plane benchmarks of nilb (part 4 of BENCHMARKS.md), run by
//! `scripts/bench.sh`:
//!
//! - `Table::build` for (backends, buckets) = (10, 4096), (100, 65536),
//!   (1000, 65536);
//! - `Table::rebalance` after one backend fails (forced moves) and after one
//!   backend's weight doubles (voluntary moves, no step limit);
//! - `ControlPlane::new` and `ControlPlane::update` (a reload that doubles one
//!   weight) for one service of that shape;
//! - map synchronisation: `Dataplane::install_table` of the full table, and
//!   its steps (serialise, create the inner array, batch fill, swap into the
//!   outer map) replayed on a separately loaded skeleton; `ControlPlane::apply`
//!   of a full plan for 100 services of 4096 buckets.
//!
//!   bench_control [--reps 7] [--out FILE.json]
//!
//! Needs root (BPF maps). Prints a JSON document.

use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::time::Instant;

use anyhow::{Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags};
use nilb::config::{Config, Protocol, ServiceKey};
use nilb::control::ControlPlane;
use nilb::dataplane::abi::{self, skel::NilbSkelBuilder};
use nilb::dataplane::Dataplane;
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
            dip: dip(i),
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

/// Size of one element of a bucket array (header or bucket).
const BUCKET: usize = std::mem::size_of::<abi::sys::nilb_bucket>();

/// Keys and values of a bucket array as install_table builds them
/// (header, then first and second hop of every bucket; other fields 0).
fn serialise(t: &Table) -> (Vec<u8>, Vec<u8>) {
    let n = t.size() as usize + 1;
    let mut keys = Vec::with_capacity(n * 4);
    for i in 0..n as u32 {
        keys.extend_from_slice(&i.to_ne_bytes());
    }
    let mut values = vec![0u8; n * BUCKET];
    values[..4].copy_from_slice(&(t.size() - 1).to_ne_bytes());
    for i in 0..t.size() as usize {
        let v = &mut values[(i + 1) * BUCKET..];
        v[..4].copy_from_slice(&t.first(i).map_or(0, abi::addr_be).to_ne_bytes());
        v[4..8].copy_from_slice(&t.second(i).map_or(0, abi::addr_be).to_ne_bytes());
    }
    (keys, values)
}

extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
}

/// Create a BPF_F_MMAPABLE array of `entries` buckets (creation included in
/// the time, as in install_table) and fill it with `values` through mmap
/// instead of BPF_MAP_UPDATE_BATCH.
fn mmap_fill(entries: u32, values: &[u8]) -> Result<libbpf_rs::MapHandle> {
    use std::os::fd::AsRawFd;
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_INNER_MAP | libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    let m = libbpf_rs::MapHandle::create(
        libbpf_rs::MapType::Array,
        Some("nilb_mmap"),
        4,
        BUCKET as u32,
        entries,
        &opts,
    )?;
    let len = values.len().div_ceil(4096) * 4096;
    // SAFETY: mapping a fresh BPF array of at least `len` bytes read-write
    // and shared; the copy stays inside it; unmapped before returning.
    unsafe {
        let p = mmap(std::ptr::null_mut(), len, 3, 1, m.as_fd().as_raw_fd(), 0);
        if p as isize == -1 {
            anyhow::bail!("mmap of a BPF_F_MMAPABLE array failed");
        }
        std::ptr::copy_nonoverlapping(values.as_ptr(), p, values.len());
        munmap(p, len);
    }
    Ok(m)
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
    let node = Ipv4Addr::new(10, 0, 0, 1);

    let mut storage = MaybeUninit::uninit();
    let mut dp = Dataplane::load(&mut storage)?;
    // A second copy of the object, only for its `services` map: the steps of
    // install_table, timed one by one.
    let mut storage2 = MaybeUninit::uninit();
    let skel = NilbSkelBuilder::default()
        .open(&mut storage2)
        .context("opening the skeleton")?
        .load()
        .context("loading the skeleton")?;

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
            vip: Ipv4Addr::new(10, 0, 0, 100),
            port: 80,
            protocol: Protocol::Tcp,
        };
        let install = time_ms(reps, || dp.install_table(&key, 0, &base, &|_| 0).unwrap());
        let (mut ser, mut create, mut fill, mut swap) = (vec![], vec![], vec![], vec![]);
        let k = abi::service_key(&key);
        for _ in 0..reps {
            let t0 = Instant::now();
            let (keys, values) = serialise(&base);
            let t1 = Instant::now();
            let inner = abi::create_array("nilb_bench", BUCKET as u32, size + 1)?;
            let t2 = Instant::now();
            inner.update_batch(&keys, &values, size + 1, MapFlags::ANY, MapFlags::ANY)?;
            let t3 = Instant::now();
            skel.maps.services.update(
                abi::bytes_of(&k),
                &abi::map_fd_value(inner.as_fd()),
                MapFlags::ANY,
            )?;
            let t4 = Instant::now();
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            ser.push(ms(t0, t1));
            create.push(ms(t1, t2));
            fill.push(ms(t2, t3));
            swap.push(ms(t3, t4));
        }
        // Experiment: the same fill through mmap of a BPF_F_MMAPABLE array.
        let mut fill_mmap = Vec::new();
        for _ in 0..reps {
            let (_, values) = serialise(&base);
            let t0 = Instant::now();
            mmap_fill(size + 1, &values)?;
            fill_mmap.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        eprintln!(
            "{n} x {size}: build {:.2} ms, fail {:.2} ms, weight {:.2} ms ({} moved), update {:.2} ms, install {:.2} ms (swap {:.2} ms)",
            median(&build),
            median(&fail),
            median(&weight),
            moves.moved,
            median(&upd),
            median(&install),
            median(&swap)
        );
        cases_json.push(format!(
            "{{\"backends\": {n}, \"buckets\": {size}, \"weight_change_moved\": {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}}}",
            moves.moved,
            stat("build", &build),
            stat("rebalance_failure", &fail),
            stat("rebalance_weight", &weight),
            stat("cp_new", &cp_new),
            stat("cp_update", &upd),
            stat("install_table", &install),
            stat("install_serialise", &ser),
            stat("install_create", &create),
            stat("install_fill", &fill),
            stat("install_swap", &swap),
            stat("fill_mmap_experiment", &fill_mmap),
        ));
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

    // Swapping 100 bucket arrays into the outer map: one update per service
    // (what install_table does), one BPF_MAP_UPDATE_BATCH, and one update
    // per service from 100 threads at once.
    let outer = libbpf_rs::MapHandle::try_from(&skel.maps.services)?;
    let inners: Vec<libbpf_rs::MapHandle> = (0..100)
        .map(|i| abi::create_array(&format!("nilb_b{i}"), BUCKET as u32, 4097))
        .collect::<Result<_>>()?;
    let keys: Vec<Vec<u8>> = (1000..1100u16)
        .map(|port| {
            let k = abi::service_key(&ServiceKey {
                vip: Ipv4Addr::new(10, 0, 0, 100),
                port,
                protocol: Protocol::Tcp,
            });
            abi::bytes_of(&k).to_vec()
        })
        .collect();
    let vals: Vec<[u8; 4]> = inners
        .iter()
        .map(|m| abi::map_fd_value(m.as_fd()))
        .collect();
    let one_by_one = time_ms(reps.min(5), || {
        for (k, v) in keys.iter().zip(&vals) {
            outer.update(k, v, MapFlags::ANY).unwrap();
        }
    });
    let all_keys: Vec<u8> = keys.concat();
    let all_vals: Vec<u8> = vals.concat();
    let batch = time_ms(reps.min(5), || {
        outer
            .update_batch(&all_keys, &all_vals, 100, MapFlags::ANY, MapFlags::ANY)
            .unwrap()
    });
    let parallel = time_ms(reps.min(5), || {
        std::thread::scope(|s| {
            for (k, v) in keys.iter().zip(&vals) {
                let outer = &outer;
                s.spawn(move || outer.update(k, v, MapFlags::ANY).unwrap());
            }
        })
    });
    eprintln!(
        "swap 100 arrays: one by one {:.1} ms, one batch {:.1} ms, 100 threads {:.1} ms",
        median(&one_by_one),
        median(&batch),
        median(&parallel)
    );

    let doc = format!(
        "{{\"reps\": {reps},\n\"tables\": [\n  {}\n],\n\"hundred_services\": {{{}, {}, {}, {}, {}, {}}},\n\"swap_100\": {{{}, {}, {}}}}}\n",
        cases_json.join(",\n  "),
        stat("full_apply", &full),
        stat("update_all", &upd100),
        stat("apply_all", &apply100),
        stat("parse", &parse100),
        stat("update_one", &upd_one),
        stat("apply_one", &apply_one),
        stat("one_by_one", &one_by_one),
        stat("batch", &batch),
        stat("threads", &parallel),
    );
    if out_path.is_empty() {
        print!("{doc}");
    } else {
        std::fs::write(&out_path, doc)?;
    }
    Ok(())
}
