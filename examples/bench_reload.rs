//! SIGHUP-to-live benchmark of `nilb run` (part 4 of BENCHMARKS.md), run by
//! `scripts/bench.sh`.
//!
//!   bench_reload gen --dir DIR [--services 100]
//!       writes DIR/a.yaml (every backend active), DIR/one.yaml (the first
//!       service drains backend .13) and DIR/all.yaml (every service drains
//!       it); VIP 10.98.0.100, ports 1000.., balancer 10.98.0.1.
//!   bench_reload measure --pid PID --config PATH --dir DIR --log FILE
//!       [--pin-dir /sys/fs/bpf/nilb] [--reps 5] [--out FILE.json]
//!       with `nilb run --config PATH` running as PID on a.yaml: per
//!       repetition a -> one -> a -> all -> a. Each step copies the variant
//!       over PATH (rename), sends SIGHUP and polls the pinned tables until
//!       every service that must change has the variant's table: backend .13
//!       owns no bucket (drained) or some (active) (the daemon writes the
//!       changed buckets in place, so the table is live once they are
//!       written); the other services must keep theirs. It takes the
//!       daemon's own "reload applied elapsed_us=N cpu_us=M" from its log
//!       (M: the loop thread's CPU time for the reload).
//!
//!   bench_reload breakdown [--services 1000] [--reps 5] [--out FILE.json]
//!       in-process, on a data plane of its own (root): where the time of a
//!       reload goes, step by step as the daemon runs them (read + parse +
//!       validate the file, copy the running state, `ControlPlane::update`,
//!       `ControlPlane::apply` (the map writes), handing the state to the
//!       state file's writer thread, the metrics snapshot (built by the
//!       metrics server when scraped, off the loop; timed here for its
//!       cost), dropping the replaced state; `total` is file to live, and the writer thread's
//!       encode + write is timed apart), for a reload that
//!       changes nothing, one service, or every service; and a health
//!       failure of one backend of one service (`observe` + apply). Also the
//!       process's RSS with the running state built.
//!
//! Run `measure` in the daemon's mount namespace (nsenter --target PID
//! --mount --net): `ip netns exec` gives the daemon its own /sys.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nilb::config::{Protocol, ServiceKey};
use nilb::dataplane::PinnedMaps;

mod bench_common;
use bench_common::*;

const VIP: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 100);
const DRAINED: std::net::IpAddr = std::net::IpAddr::V4(Ipv4Addr::new(10, 98, 0, 13));

fn config(services: u16, drain: u16) -> String {
    let mut s = String::from(
        "version: 1\n\
         cluster: {hash_seed: 0x5eed1234, balancers: [10.98.0.1], gue_port: 19523, unknown_flow: drop}\n\
         defaults:\n  table_size: 4096\n  \
         rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}\n\
         services:\n",
    );
    for i in 0..services {
        let port = 1000 + i;
        let state = if i < drain { "drained" } else { "active" };
        let _ = writeln!(
            s,
            "  - name: s{port}\n    vip: {VIP}\n    port: {port}\n    protocol: tcp\n    \
             health_check: {{none: {{}}}}\n    backends:\n      \
             - {{dip: 10.98.0.11}}\n      - {{dip: 10.98.0.12}}\n      \
             - {{dip: {DRAINED}, state: {state}}}"
        );
    }
    s
}

fn key(port: u16) -> ServiceKey {
    ServiceKey {
        vip: std::net::IpAddr::V4(VIP),
        port,
        protocol: Protocol::Tcp,
    }
}

/// Buckets of service `port` whose first hop is the drained backend.
fn drained(pins: &PinnedMaps, port: u16) -> Result<u32> {
    let t = pins
        .table(&key(port))?
        .context("service missing from the services map")?;
    Ok(t.chains.iter().filter(|c| c.0 == Some(DRAINED)).count() as u32)
}

/// [`drained`] of every service in `ports`, from one read of the pool.
fn drained_many(pins: &PinnedMaps, ports: &[u16]) -> Result<Vec<(u16, u32)>> {
    let (tables, backends) = pins.raw_tables()?;
    let slots: Vec<u16> = (0..backends.len())
        .filter(|&s| backends[s] == Some(DRAINED))
        .map(|s| s as u16)
        .collect();
    ports
        .iter()
        .map(|&p| {
            let k = key(p);
            let t = tables
                .iter()
                .find(|t| t.key == k)
                .context("service missing from the services map")?;
            let n = t.buckets.iter().filter(|h| slots.contains(&h[0])).count();
            Ok((p, n as u32))
        })
        .collect()
}

/// The daemon's "reload applied" lines: (elapsed_us, cpu_us) each (cpu_us
/// 0 if the line has none).
fn reload_lines(log: &Path) -> Vec<(u64, u64)> {
    let field = |l: &str, name: &str| -> Option<u64> {
        let i = l.find(name)?;
        l[i + name.len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect::<String>()
            .parse()
            .ok()
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("reload applied"))
        .filter_map(|l| Some((field(l, " elapsed_us=")?, field(l, " cpu_us=").unwrap_or(0))))
        .collect()
}

struct Step {
    changed: usize,
    first_ms: f64,
    all_ms: f64,
    daemon_ms: f64,
    /// CPU time of the daemon's loop thread for the reload.
    daemon_cpu_ms: f64,
    drained_buckets: u32,
}

#[allow(clippy::too_many_arguments)]
fn step(
    pid: i32,
    cfg: &Path,
    dir: &Path,
    variant: &'static str,
    expect_changed: &[u16],
    pins: &PinnedMaps,
    ports: &[u16],
    log: &Path,
) -> Result<Step> {
    let before: Vec<u32> = ports
        .iter()
        .map(|p| drained(pins, *p))
        .collect::<Result<_>>()?;
    let want_drained = variant != "a";
    let done = |n: u32| (n == 0) == want_drained;
    let lines_before = reload_lines(log).len();
    let tmp = cfg.with_extension("bench-tmp");
    std::fs::copy(dir.join(format!("{variant}.yaml")), &tmp)?;
    std::fs::rename(&tmp, cfg)?;
    let mut pending: Vec<u16> = expect_changed.to_vec();
    let t0 = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGHUP,
    )?;
    let mut first = None;
    let mut last = None;
    // The daemon installs a reload's tables in one batch, in key (port)
    // order: the first pending service is polled until it is live, then
    // the last one; then one read of the whole pool checks them all (and
    // is repeated until they are). A poll of one service reads one table
    // (a mapping of its region), so the poller hardly competes with the
    // daemon for the CPU.
    let mut probe = 0usize;
    while !pending.is_empty() {
        if probe < 2 && pending.len() > 1 {
            let p = if probe == 0 {
                pending[0]
            } else {
                pending[pending.len() - 1]
            };
            if done(drained(pins, p)?) {
                if probe == 0 {
                    first = Some(t0.elapsed());
                } else {
                    last = Some(t0.elapsed());
                }
                probe += 1;
                continue;
            }
        } else {
            let counts = if pending.len() > 8 {
                drained_many(pins, &pending)?
            } else {
                pending
                    .iter()
                    .map(|&p| Ok((p, drained(pins, p)?)))
                    .collect::<Result<_>>()?
            };
            let before = pending.len();
            pending = counts
                .into_iter()
                .filter(|&(_, n)| !done(n))
                .map(|(p, _)| p)
                .collect();
            if pending.len() < before {
                first.get_or_insert_with(|| t0.elapsed());
            }
            if pending.is_empty() {
                break;
            }
            // The last one was live but others are not: keep polling the
            // whole set.
            last = None;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!(
                "{variant}: {} services still without the new table after 10 s",
                pending.len()
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    // Live when the last table was seen live (the check of the whole set
    // after it found every one live).
    let all = last.unwrap_or_else(|| t0.elapsed());
    // Services that must not change did not.
    for (i, p) in ports.iter().enumerate() {
        if !expect_changed.contains(p) && drained(pins, *p)? != before[i] {
            bail!("{variant}: service port {p} changed although its config did not");
        }
    }
    let drained_buckets = drained(pins, expect_changed[0])?;
    // The daemon's own measurement.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (daemon, daemon_cpu) = loop {
        let l = reload_lines(log);
        if let Some(&(e, c)) = l.last().filter(|_| l.len() > lines_before) {
            break (e as f64 / 1e3, c as f64 / 1e3);
        }
        if Instant::now() > deadline {
            break (f64::NAN, f64::NAN);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ok(Step {
        changed: expect_changed.len(),
        first_ms: first.unwrap_or(all).as_secs_f64() * 1e3,
        all_ms: all.as_secs_f64() * 1e3,
        daemon_ms: daemon,
        daemon_cpu_ms: daemon_cpu,
        drained_buckets,
    })
}

/// Resident set size of this process, kB (VmRSS).
fn rss_kb(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// `breakdown`: the daemon's reload steps, timed one by one in-process.
fn breakdown(n: u16, reps: usize, out_path: &str) -> Result<()> {
    use nilb::control::ControlPlane;
    use nilb::status::{Role, Status};
    use std::mem::MaybeUninit;
    let node = std::net::IpAddr::V4(Ipv4Addr::new(10, 98, 0, 1));
    let dir = std::env::temp_dir().join(format!("nilb-breakdown-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let variants = [
        ("a", config(n, 0)),
        ("one", config(n, 1)),
        ("all", config(n, n)),
    ];
    for (name, text) in &variants {
        std::fs::write(dir.join(format!("{name}.yaml")), text)?;
    }
    let path = |v: &str| dir.join(format!("{v}.yaml"));
    let rss_before = rss_kb("self");
    let mut storage = MaybeUninit::uninit();
    // A pool sized for the configuration, as the daemon sizes it at start.
    let sizing = nilb::config::Config::load(&path("a")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut dp = nilb::dataplane::Dataplane::load_for(&mut storage, &sizing)?;
    let t = Instant::now();
    let base = nilb::config::Config::load(&path("a")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut cp = ControlPlane::new(base, 0);
    let plan = cp.full_plan();
    let new_ms = ms_since(t);
    let t = Instant::now();
    cp.apply(&mut dp, node, &plan)?;
    let start_apply_ms = ms_since(t);
    let rss_state = rss_kb("self");
    let state_file = dir.join("state.yaml");
    let role = Role {
        running: true,
        configured: true,
    };
    // (variant, step) -> runs
    type Steps = Vec<(&'static str, Vec<f64>)>;
    let mut rows: Vec<(&'static str, usize, Steps)> = Vec::new();
    let mut now = 1_000u64;
    for (variant, back) in [("a", false), ("one", true), ("all", true)] {
        let mut steps: Vec<(&'static str, Vec<f64>)> = [
            "parse",
            "clone",
            "update",
            "apply",
            "state_handover",
            "metrics",
            "drop_old",
            "total",
            "state_write_background",
        ]
        .iter()
        .map(|s| (*s, Vec::new()))
        .collect();
        let mut installed = 0;
        for _ in 0..reps {
            for target in if back {
                vec![variant, "a"]
            } else {
                vec![variant]
            } {
                now += 1_000;
                let t0 = Instant::now();
                let config = nilb::config::Config::load(&path(target))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let t1 = Instant::now();
                let mut next = cp.clone();
                let t2 = Instant::now();
                let plan = next.update(config, now);
                let t3 = Instant::now();
                next.apply(&mut dp, node, &plan)?;
                let t4 = Instant::now();
                let old = std::mem::replace(&mut cp, next);
                // What the daemon's loop does for the state file: hand a
                // copy of the state to its writer thread.
                let handed = std::hint::black_box(cp.clone());
                let t5 = Instant::now();
                std::hint::black_box(nilb::metrics::build(
                    &dp,
                    &cp,
                    nilb::metrics::DaemonFacts {
                        reloads: (0, 0),
                        balancer: true,
                        balancer_configured: true,
                        last_reload_ok: Some(true),
                        neighbour_refreshes: (0, 0, 0),
                    },
                    None,
                ));
                let t6 = Instant::now();
                drop(old);
                let t7 = Instant::now();
                // What the writer thread then does, off the loop.
                Status::of(&handed, node, role, &path(target), None).write(&state_file)?;
                let t8 = Instant::now();
                if target == variant {
                    installed = plan.install.len();
                    let d = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
                    for (i, v) in [
                        d(t0, t1),
                        d(t1, t2),
                        d(t2, t3),
                        d(t3, t4),
                        d(t4, t5),
                        d(t5, t6),
                        d(t6, t7),
                        d(t0, t5),
                        d(t7, t8),
                    ]
                    .into_iter()
                    .enumerate()
                    {
                        steps[i].1.push(v);
                    }
                }
            }
        }
        let label = match variant {
            "a" => "nothing_changed",
            "one" => "one_changed",
            _ => "all_changed",
        };
        eprintln!(
            "{n} services, {label} ({installed} installed): {}",
            steps
                .iter()
                .map(|(s, v)| format!("{s} {:.2}", median(v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rows.push((label, installed, steps));
    }
    // A health failure of one backend of one service, and its recovery.
    let key = ServiceKey {
        vip: std::net::IpAddr::V4(VIP),
        port: 1000,
        protocol: Protocol::Tcp,
    };
    let mut health = Vec::new();
    for _ in 0..reps {
        // Results until the verdict flips (fall_count / rise_count): the
        // one that flips it is timed with its apply.
        for ok in [false, true] {
            for _ in 0..10 {
                now += 60_000;
                let result = if ok { Ok(()) } else { Err("down".to_string()) };
                let t0 = Instant::now();
                let plan = cp.observe(&key, DRAINED, result, now);
                let Some(plan) = plan.filter(|p| !p.install.is_empty()) else {
                    continue;
                };
                cp.apply(&mut dp, node, &plan)?;
                health.push(ms_since(t0));
                break;
            }
        }
    }
    let rss_end = rss_kb("self");
    // What the daemon's state file writer does after a reload: free memory
    // back to the system.
    let t = Instant::now();
    nilb::dataplane::abi::release_free_memory();
    let trim_ms = ms_since(t);
    let rss_trimmed = rss_kb("self");
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{n} services: ControlPlane::new {new_ms:.1} ms, first full apply {start_apply_ms:.1} ms; \
         health event + apply {:.2} ms; RSS {} kB before, {} kB with the state, {} kB at the end, \
         {} kB after returning free memory ({trim_ms:.1} ms)",
        median(&health),
        rss_before,
        rss_state,
        rss_end,
        rss_trimmed
    );
    let mut doc = format!(
        "{{\"services\": {n}, \"reps\": {reps}, \"cp_new_ms\": {new_ms:.2}, \"start_apply_ms\": {start_apply_ms:.2}, \
         \"health_event_ms_median\": {:.3}, \"rss_kb_before\": {rss_before}, \"rss_kb_state\": {rss_state}, \"rss_kb_end\": {rss_end}, \
         \"rss_kb_trimmed\": {rss_trimmed}, \"trim_ms\": {trim_ms:.2}",
        median(&health)
    );
    for (label, installed, steps) in &rows {
        let _ = write!(doc, ", \"{label}\": {{\"installed\": {installed}");
        for (s, v) in steps {
            let _ = write!(doc, ", \"{s}_ms\": {:.3}", median(v));
        }
        doc.push('}');
    }
    doc.push_str("}\n");
    if out_path.is_empty() {
        print!("{doc}");
    } else {
        std::fs::write(out_path, doc)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let n: u16 = arg("--services", "100").parse()?;
    let dir = PathBuf::from(arg("--dir", "."));
    match mode.as_str() {
        "gen" => {
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("a.yaml"), config(n, 0))?;
            std::fs::write(dir.join("one.yaml"), config(n, 1))?;
            std::fs::write(dir.join("all.yaml"), config(n, n))?;
            Ok(())
        }
        "measure" => {
            let pid: i32 = arg("--pid", "0").parse()?;
            let cfg = PathBuf::from(arg("--config", ""));
            let log = PathBuf::from(arg("--log", ""));
            let pin = PathBuf::from(arg("--pin-dir", "/sys/fs/bpf/nilb"));
            let reps: usize = arg("--reps", "5").parse()?;
            let out_path = arg("--out", "");
            let pins = PinnedMaps::open(&pin)?;
            let ports: Vec<u16> = (1000..1000 + n).collect();
            let mut steps = Vec::new();
            for rep in 0..reps {
                for (variant, changed) in [
                    ("one", vec![1000u16]),
                    ("a", vec![1000u16]),
                    ("all", ports.clone()),
                    ("a", ports.clone()),
                ] {
                    let s = step(pid, &cfg, &dir, variant, &changed, &pins, &ports, &log)?;
                    eprintln!(
                        "rep {rep} -> {variant}: {} services changed, first {:.1} ms, all {:.1} ms, daemon says {:.1} ms ({:.1} ms of CPU); drained backend owns {} buckets",
                        s.changed, s.first_ms, s.all_ms, s.daemon_ms, s.daemon_cpu_ms, s.drained_buckets
                    );
                    steps.push(s);
                    std::thread::sleep(Duration::from_millis(300));
                }
            }
            let pick = |one: bool, f: fn(&Step) -> f64| -> Vec<f64> {
                steps
                    .iter()
                    .filter(|s| (s.changed == 1) == one)
                    .map(f)
                    .collect()
            };
            let list = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut doc = format!("{{\"services\": {n}, \"reps\": {reps}");
            for (label, one) in [("one_changed", true), ("all_changed", false)] {
                let all = pick(one, |s| s.all_ms);
                let first = pick(one, |s| s.first_ms);
                let daemon = pick(one, |s| s.daemon_ms);
                let cpu = pick(one, |s| s.daemon_cpu_ms);
                let _ = write!(
                    doc,
                    ", \"{label}\": {{\"live_ms_median\": {:.2}, \"first_ms_median\": {:.2}, \"daemon_ms_median\": {:.2}, \
                     \"daemon_cpu_ms_median\": {:.2}, \"live_ms\": [{}], \"daemon_ms\": [{}], \"daemon_cpu_ms\": [{}]}}",
                    median(&all),
                    median(&first),
                    median(&daemon),
                    median(&cpu),
                    list(&all),
                    list(&daemon),
                    list(&cpu)
                );
            }
            doc.push_str("}\n");
            if out_path.is_empty() {
                print!("{doc}");
            } else {
                std::fs::write(&out_path, doc)?;
            }
            Ok(())
        }
        "breakdown" => {
            let reps: usize = arg("--reps", "5").parse()?;
            breakdown(n, reps, &arg("--out", ""))
        }
        _ => bail!("usage: bench_reload gen|measure|breakdown ... (see the source)"),
    }
}
