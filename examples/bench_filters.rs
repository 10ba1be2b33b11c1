//! Edge-filter benchmarks (BENCHMARKS.md "Edge filters"), run by
//! `scripts/bench.sh --only filters` in a namespace it prepared like the
//! data-plane bench (gen0 10.99.0.1/24 <-veth-> sink0 with `count_drop`,
//! neighbours 10.99.0.11-13, the VIP 10.99.0.100 on lo):
//!
//! 1. load: two lists of `--prefixes` prefixes (default 1,000,000: 95 %
//!    /32, 4.5 % /24, 0.5 % /20-/23, none in 10/8) are written as list
//!    files; a balancer's filters are read, compiled and installed from list
//!    A (time per phase, kernel memory, the process's peak RSS growth);
//!    then A and B are swapped in turn `--reps` times the way a SIGHUP
//!    does (read, compile, build the other generation, flip);
//! 2. live frames (driver `gen_tail` of bench/bpf/bench.bpf.c, source
//!    ports varied, same-run ratios, order alternating):
//!    - a denied source (a /32 of the list, and one under a /24) to the VIP:
//!      nilb's XDP_DROP against a bare `drop_only`;
//!    - an allowed source to the VIP: nilb with the list loaded against the
//!      same nilb without filters (both XDP_TX, counted on the peer);
//!    - the design not taken: the same prefixes in one LPM_TRIE
//!      (`probe_trie`) against `drop_only`, and its fill time.
//!
//!    Where the kernel refuses live frames (probed as bench_dataplane does,
//!    bench_common::xdp_method), or with `--method repeat`, the same pairs
//!    in repeat mode (driver `gen_repeat`, `--frames` runs per
//!    measurement, program cost only, nothing transmitted): raw ns per
//!    packet (driver and program), the driver alone with the empty target
//!    `xdp_pass_only` in every repetition, net = raw - driver; ratios
//!    baseline ns / nilb ns, raw and net.
//!
//!   bench_filters --obj bench.bpf.o --dir DIR [--prefixes N] [--reps N]
//!       [--frames N] [--out FILE.json] [--method auto|live|repeat]
//!
//! Needs root.

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, ObjectBuilder, Xdp, XdpFlags};
use nilb::config::Config;
use nilb::control::{ControlPlane, Plan};
use nilb::dataplane::abi::{self, COUNTER_NAMES};
use nilb::dataplane::Dataplane;
use nilb::filters::lists;

mod bench_common;
use bench_common::*;

const NODE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 100);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 50);
const XDP_TX: u32 = 3;
const XDP_DROP: u32 = 1;
const XDP_PASS: u32 = 2;
const PROG_TYPE_XDP: u32 = 6;

fn config_yaml(filters: bool) -> String {
    let mut s = String::from(
        "version: 1\n\
         cluster: {hash_seed: 0x5eed1234, balancers: [10.99.0.1], gue_port: 19523, unknown_flow: drop}\n\
         defaults:\n  table_size: 4096\n\
         services:\n  - name: web\n    vip: 10.99.0.100\n    port: 80\n    protocol: tcp\n    \
         health_check: {none: {}}\n    backends: [{dip: 10.99.0.11}, {dip: 10.99.0.12}, {dip: 10.99.0.13}]\n",
    );
    if filters {
        s += "filters:\n  deny:\n    - {name: feed, files: [list.txt]}\n";
    }
    s
}

/// xorshift64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A list of `n` distinct prefixes (95 % /32, 4.5 % /24, 0.5 % /20-/23)
/// outside 0/8, 10/8, 127/8 and 224/3; returns its text, one denied /32 and
/// one address under a denied /24.
fn make_list(seed: u64, n: usize) -> (String, Ipv4Addr, Ipv4Addr) {
    let mut r = Rng(seed);
    let mut seen = BTreeSet::new();
    let mut text = String::with_capacity(n * 16);
    let (mut host, mut net) = (None, None);
    while seen.len() < n {
        let a = r.next() as u32;
        let first = a >> 24;
        if first == 0 || first == 10 || first == 127 || first >= 224 {
            continue;
        }
        let k = seen.len() % 200;
        let len = if k < 190 {
            32
        } else if k < 199 {
            24
        } else {
            20 + (a & 3) as u8
        };
        let p = nilb::prefix::Prefix4::new(Ipv4Addr::from(a), len);
        if !seen.insert((p.first(), p.len)) {
            continue;
        }
        if len == 32 && host.is_none() {
            host = Some(p.addr);
        }
        if len == 24 && net.is_none() {
            net = Some(Ipv4Addr::from(p.first() + 77));
        }
        let _ = writeln!(text, "{p}");
    }
    (text, host.expect("a /32"), net.expect("a /24"))
}

fn my_prog_fds() -> Vec<(i32, u32, u32)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/fdinfo") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse::<u32>().ok())
        };
        if let (Some(id), Some(ty)) = (field("prog_id:"), field("prog_type:")) {
            out.push((fd, id, ty));
        }
    }
    out
}

/// A loaded nilb data plane, its control state and its XDP program's fd.
struct Loaded {
    dp: Dataplane<'static>,
    cp: ControlPlane,
    xdp: OwnedFd,
}

fn load_nilb(yaml: &str) -> Result<Loaded> {
    let before: BTreeSet<i32> = my_prog_fds().iter().map(|p| p.0).collect();
    let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
        Box::leak(Box::new(MaybeUninit::uninit()));
    let mut dp = Dataplane::load(storage)?;
    let mut xdp = None;
    for (fd, id, ty) in my_prog_fds() {
        // The balancer, not nilb_xdp_backend, its IPv6 program or the IPv6
        // cluster network's variants.
        let balancer = prog_func_name(id).as_deref() == Some("nilb_xdp_balancer");
        if !before.contains(&fd) && ty == PROG_TYPE_XDP && balancer {
            // SAFETY: fd belongs to the data plane just loaded; duplicated at once.
            xdp = Some(unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?);
        }
    }
    let cfg = Config::parse(yaml).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cp = ControlPlane::new(cfg, 0);
    cp.apply(&mut dp, NODE.into(), &cp.full_plan())?;
    Ok(Loaded {
        dp,
        cp,
        xdp: xdp.context("nilb's XDP program not found")?,
    })
}

/// Timings of one load or swap of the lists, ms.
#[derive(Default)]
struct Swap {
    read_compile_ms: f64,
    install_ms: f64,
    maps_ms: f64,
    bytes: u64,
}

/// Read, compile and install the filters of `l`'s config from `dir` (what
/// a SIGHUP does), timed.
fn install(l: &mut Loaded, dir: &Path) -> Result<Swap> {
    let t = Instant::now();
    let c = l.cp.config().clone();
    let (set, _) = lists::prepare(
        &c,
        &dir.join("nilb.yaml"),
        &c.cluster_addresses_v4(),
        true,
        Some(l.cp.filters()),
        &l.cp.filters().ids(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let read_compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    l.cp.set_filters(set);
    let plan = Plan {
        filters: true,
        ..Plan::default()
    };
    l.cp.apply(&mut l.dp, NODE.into(), &plan)?;
    let install_ms = t.elapsed().as_secs_f64() * 1e3;
    let i = l.dp.last_filter_install().context("no filter install")?;
    Ok(Swap {
        read_compile_ms,
        install_ms,
        maps_ms: i.maps_ms as f64,
        bytes: i.bytes,
    })
}

/// kB of a /proc/self/status field.
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn test_run(
    prog: BorrowedFd<'_>,
    data: &[u8],
    ifindex: u32,
    repeat: u32,
    flags: u32,
) -> Result<(u32, u32)> {
    let r = xdp_test_run(prog, data, ifindex, repeat, flags)
        .map_err(|e| anyhow::anyhow!("BPF_PROG_TEST_RUN: {e}"))?;
    Ok((r.retval, r.duration_ns))
}

fn csum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32)
        .sum();
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// 64-byte TCP ACK from `src` to VIP:80 with 10 bytes of payload.
fn frame(gen_mac: [u8; 6], src: Ipv4Addr) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&gen_mac);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x50, 0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 50, 0, 1, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&VIP.octets());
    let c = csum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut t = vec![0u8; 30];
    t[0..2].copy_from_slice(&40000u16.to_be_bytes());
    t[2..4].copy_from_slice(&80u16.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x10;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    f.extend_from_slice(&t);
    f
}

/// The bench object: the driver, baselines, the trie probe.
struct Bench {
    obj: libbpf_rs::Object,
    gen_if: u32,
}

impl Bench {
    fn prog(&self, name: &str) -> Result<BorrowedFd<'_>> {
        let p = self
            .obj
            .progs()
            .find(|p| p.name() == name)
            .with_context(|| format!("program {name} not in the bench object"))?;
        // SAFETY: the program lives as long as self.obj; the borrow is tied to &self.
        Ok(unsafe { BorrowedFd::borrow_raw(p.as_fd().as_raw_fd()) })
    }

    fn map(&self, suffix: &str) -> Result<libbpf_rs::Map<'_>> {
        self.obj
            .maps()
            .find(|m| m.name().to_string_lossy().ends_with(suffix))
            .with_context(|| format!("map {suffix} not in the bench object"))
    }

    /// Point the driver at `target` on `frame` (gen_cfg: the frame, source
    /// ports varied, its length).
    fn set(&self, target: BorrowedFd<'_>, frame: &[u8]) -> Result<()> {
        let mut g = vec![0u8; 96];
        g[..64].copy_from_slice(&frame[..64]);
        g[64..68].copy_from_slice(&1u32.to_ne_bytes());
        g[94..96].copy_from_slice(&(frame.len() as u16).to_ne_bytes());
        self.map(".bss")?
            .update(&0u32.to_ne_bytes(), &g, MapFlags::ANY)?;
        self.map("target")?.update(
            &0u32.to_ne_bytes(),
            &(target.as_raw_fd() as u32).to_ne_bytes(),
            MapFlags::ANY,
        )?;
        Ok(())
    }

    /// Repeat-mode measurement of `sides` (program, verdict) on `frame`,
    /// each driven by gen_repeat for `runs` runs in calls of at most
    /// REPEAT_CALL runs, round-robin over the sides (each round from side
    /// `rep % len`): per side ns per packet, driver and program, the median
    /// over its calls of bench_common::XdpRun::cpu_ns. Fails unless every
    /// call's last verdict is the side's.
    fn repeat(
        &self,
        rep: usize,
        sides: &[(BorrowedFd<'_>, u32)],
        frame: &[u8],
        runs: u32,
    ) -> Result<Vec<f64>> {
        let driver = self.prog("gen_repeat")?;
        repeat_sides(driver, self.gen_if, rep, sides, runs, |fd| {
            self.set(fd, frame)?;
            Ok(frame)
        })
    }

    /// One live-frames run of `target` behind `gen_tail`: (Mpps delivered
    /// to the peer, Mpps generated).
    fn live(&self, target: BorrowedFd<'_>, frame: &[u8], frames: u32) -> Result<(f64, f64)> {
        self.set(target, frame)?;
        let rx = || -> Result<u64> {
            let v = self
                .map("rx_count")?
                .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?
                .context("rx_count")?;
            Ok(abi::sum_percpu_u64(&v))
        };
        let before = rx()?;
        let t = Instant::now();
        test_run(
            self.prog("gen_tail")?,
            frame,
            self.gen_if,
            frames,
            libbpf_sys::BPF_F_TEST_XDP_LIVE_FRAMES,
        )?;
        let el = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(5));
        Ok(((rx()? - before) as f64 / el / 1e6, frames as f64 / el / 1e6))
    }
}

fn json_list(v: &[f64]) -> String {
    format!(
        "[{}]",
        v.iter()
            .map(|x| format!("{x:.4}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn read_mac(ifname: &str) -> Result<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address"))?;
    let b: Vec<u8> = s
        .trim()
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()?;
    b.try_into().map_err(|_| anyhow::anyhow!("bad MAC {s}"))
}

fn counter(l: &Loaded, name: &str) -> Result<u64> {
    let i = COUNTER_NAMES
        .iter()
        .position(|n| *n == name)
        .context("counter")?;
    Ok(l.dp.counters()?[i])
}

fn main() -> Result<()> {
    let obj_path = arg("--obj", "bench.bpf.o");
    let dir = std::path::PathBuf::from(arg("--dir", "/tmp/nilb-bench-filters"));
    let n: usize = arg("--prefixes", "1000000").parse()?;
    let reps: usize = arg("--reps", "5").parse()?;
    let frames: u32 = arg("--frames", "1000000").parse()?;
    let out_path = arg("--out", "");
    std::fs::create_dir_all(&dir)?;
    let gen_if = nix::net::if_::if_nametoindex("gen0")?;
    let sink_if = nix::net::if_::if_nametoindex("sink0")?;
    let gen_mac = read_mac("gen0")?;

    // ---- lists
    let t = Instant::now();
    let (list_a, host, net) = make_list(0x0005_eeda, n);
    let (list_b, host_b, _) = make_list(0x0005_eedb, n);
    std::fs::write(dir.join("list-a.txt"), &list_a)?;
    std::fs::write(dir.join("list-b.txt"), &list_b)?;
    std::fs::write(dir.join("list.txt"), &list_a)?;
    std::fs::write(dir.join("nilb.yaml"), config_yaml(true))?;
    eprintln!(
        "lists: 2 x {n} prefixes written in {:.1} s ({} MiB each); denied /32 {host}, under a denied /24 {net}",
        t.elapsed().as_secs_f64(),
        list_a.len() >> 20
    );
    drop((list_a, list_b));

    // ---- load and swap
    let plain = load_nilb(&config_yaml(false))?;
    let mut filt = load_nilb(&config_yaml(true))?;
    let rss0 = status_kb("VmRSS:");
    let hwm0 = status_kb("VmHWM:");
    let first = install(&mut filt, &dir)?;
    let hwm1 = status_kb("VmHWM:");
    eprintln!(
        "first load of {n} prefixes: read + compile {:.0} ms, install {:.0} ms (maps {:.0} ms), kernel memory {:.1} MiB, process peak RSS +{:.0} MiB",
        first.read_compile_ms,
        first.install_ms,
        first.maps_ms,
        first.bytes as f64 / 1048576.0,
        hwm1.saturating_sub(hwm0) as f64 / 1024.0
    );
    let mut swaps = Vec::new();
    for i in 0..reps.max(2) {
        let src = if i % 2 == 0 {
            "list-b.txt"
        } else {
            "list-a.txt"
        };
        std::fs::copy(dir.join(src), dir.join("list.txt"))?;
        let s = install(&mut filt, &dir)?;
        eprintln!(
            "swap {i} ({src}): read + compile {:.0} ms, install {:.0} ms (maps {:.0} ms)",
            s.read_compile_ms, s.install_ms, s.maps_ms
        );
        swaps.push(s);
    }
    // End on list A; check both directions of the swap took.
    if reps.max(2) % 2 == 1 {
        std::fs::copy(dir.join("list-a.txt"), dir.join("list.txt"))?;
        install(&mut filt, &dir)?;
    }
    let hwm2 = status_kb("VmHWM:");
    let rss2 = status_kb("VmRSS:");
    let check = |src: Ipv4Addr| -> Result<u32> {
        Ok(test_run(filt.xdp.as_fd(), &frame(gen_mac, src), gen_if, 1, 0)?.0)
    };
    if check(host)? != XDP_DROP || check(net)? != XDP_DROP || check(CLIENT)? != XDP_TX {
        bail!("list A is not what the data plane filters");
    }
    if check(host_b)? == XDP_DROP {
        bail!("list B's {host_b} is still denied after swapping back to A");
    }

    // ---- live frames
    let obj = ObjectBuilder::default()
        .open_file(&obj_path)
        .with_context(|| format!("opening {obj_path}"))?
        .load()?;
    let bench = Bench { obj, gen_if };
    let peer = Xdp::new(bench.prog("count_drop")?);
    peer.attach(sink_if as i32, XdpFlags::DRV_MODE)?;
    let drop_only = bench.prog("drop_only")?;
    let pass = bench.prog("xdp_pass_only")?;
    // Live frames, or repeat mode where the kernel refuses them.
    let (method, refused) = xdp_method(bench.prog("macswap_tx")?, &frame(gen_mac, CLIENT), gen_if)?;
    let live = method == XdpMethod::Live;
    // The design not taken: the same list in an LPM_TRIE.
    let trie = bench.map("probe_trie_map")?;
    let set = filt.cp.filters().clone();
    let mut keys = Vec::with_capacity(set.global_entries.len() * 8);
    for (p, _) in &set.global_entries {
        keys.extend_from_slice(&(p.len as u32).to_ne_bytes());
        keys.extend_from_slice(&p.addr.octets());
    }
    let vals = vec![0u8; set.global_entries.len() * 4];
    let t = Instant::now();
    trie.update_batch(
        &keys,
        &vals,
        set.global_entries.len() as u32,
        MapFlags::ANY,
        MapFlags::ANY,
    )?;
    let trie_fill_ms = t.elapsed().as_secs_f64() * 1e3;
    let trie_bytes = abi::map_memlock(&trie).unwrap_or(0);
    eprintln!("LPM_TRIE with the same {} prefixes: BPF_MAP_UPDATE_BATCH {trie_fill_ms:.0} ms, memlock {:.1} MiB", set.global_entries.len(), trie_bytes as f64 / 1048576.0);
    drop((keys, vals));
    let probe_trie = bench.prog("probe_trie")?;
    let f_host = frame(gen_mac, host);
    let f_net = frame(gen_mac, net);
    let f_ok = frame(gen_mac, CLIENT);
    // Warm-up and path checks.
    let warm = |fd: BorrowedFd<'_>, frame: &[u8], want: u32| -> Result<()> {
        if live {
            bench.live(fd, frame, 200_000)?;
        } else {
            bench.repeat(0, &[(fd, want)], frame, 200_000)?;
        }
        Ok(())
    };
    let drops0 = counter(&filt, "xdp_drop_filter")?;
    warm(filt.xdp.as_fd(), &f_host, XDP_DROP)?;
    if counter(&filt, "xdp_drop_filter")? - drops0 < 199_000 {
        bail!("denied frames were not dropped by the filter");
    }
    let tx0 = counter(&filt, "xdp_encap_tx")?;
    warm(filt.xdp.as_fd(), &f_ok, XDP_TX)?;
    if counter(&filt, "xdp_encap_tx")? - tx0 < 199_000 {
        bail!("allowed frames were not balanced");
    }
    warm(plain.xdp.as_fd(), &f_ok, XDP_TX)?;
    warm(drop_only, &f_host, XDP_DROP)?;
    warm(probe_trie, &f_host, XDP_DROP)?;

    struct Case<'a> {
        name: &'static str,
        what: &'static str,
        nilb: BorrowedFd<'a>,
        base: BorrowedFd<'a>,
        base_name: &'static str,
        frame: &'a [u8],
        tx: bool,
    }
    let cases = [
        Case {
            name: "denied_host",
            what: "denied source (a /32 of the list) to the VIP: nilb with the list vs a bare XDP_DROP",
            nilb: filt.xdp.as_fd(),
            base: drop_only,
            base_name: "drop_only",
            frame: &f_host,
            tx: false,
        },
        Case {
            name: "denied_subnet",
            what: "denied source (under a /24 of the list) to the VIP: nilb with the list vs a bare XDP_DROP",
            nilb: filt.xdp.as_fd(),
            base: drop_only,
            base_name: "drop_only",
            frame: &f_net,
            tx: false,
        },
        Case {
            name: "allowed_vip",
            what: "allowed source to the VIP: nilb with the list vs nilb without filters",
            nilb: filt.xdp.as_fd(),
            base: plain.xdp.as_fd(),
            base_name: "nilb without filters",
            frame: &f_ok,
            tx: true,
        },
        Case {
            name: "trie_host",
            what: "the design not taken: one LPM_TRIE lookup of a denied /32 vs a bare XDP_DROP",
            nilb: probe_trie,
            base: drop_only,
            base_name: "drop_only",
            frame: &f_host,
            tx: false,
        },
    ];
    let mut live_json = Vec::new();
    for c in &cases {
        // a, b: nilb's and the baseline's Mpps (live) or raw ns (repeat
        // mode, with the driver alone in d and the net ratio in rn).
        let (mut a, mut b, mut r) = (Vec::new(), Vec::new(), Vec::new());
        let (mut d, mut rn) = (Vec::new(), Vec::new());
        let want = if c.tx { XDP_TX } else { XDP_DROP };
        for rep in 0..2 * reps {
            if live {
                let v = round(rep, &[c.base, c.nilb], |fd| {
                    let (d, g) = bench.live(fd, c.frame, frames)?;
                    Ok(if c.tx { d } else { g })
                })?;
                a.push(v[1]);
                b.push(v[0]);
                r.push(v[1] / v[0]);
                continue;
            }
            let sides = [(c.base, want), (c.nilb, want), (pass, XDP_PASS)];
            let v = bench.repeat(rep, &sides, c.frame, frames)?;
            a.push(v[1]);
            b.push(v[0]);
            d.push(v[2]);
            r.push(v[0] / v[1]);
            rn.push((v[0] - v[2]) / (v[1] - v[2]));
        }
        let mut ns = Vec::new();
        let mut bns = Vec::new();
        for _ in 0..5 {
            ns.push(test_run(c.nilb, c.frame, gen_if, 100_000, 0)?.1 as f64);
            bns.push(test_run(c.base, c.frame, gen_if, 100_000, 0)?.1 as f64);
        }
        let unit = if live { "Mpps" } else { "ns raw (repeat mode)" };
        eprintln!(
            "{}: {:.3} {unit} vs {} {:.3}, ratio {:.3} ({:.2}-{:.2}); program {:.0} ns vs {:.0} ns",
            c.name,
            median(&a),
            c.base_name,
            median(&b),
            median(&r),
            r.iter().cloned().fold(f64::MAX, f64::min),
            r.iter().cloned().fold(0.0, f64::max),
            median(&ns),
            median(&bns)
        );
        let figures = if live {
            format!(
                ", \"mpps\": {}, \"base_mpps\": {}, \"mpps_median\": {:.4}, \"base_mpps_median\": {:.4}",
                json_list(&a),
                json_list(&b),
                median(&a),
                median(&b)
            )
        } else {
            repeat_json(("nilb", &a), ("base", &b), &d, &rn)
        };
        live_json.push(format!(
            "{{\"case\": \"{}\", \"what\": \"{}\", \"baseline\": \"{}\", \"ratio\": {}, \"ratio_median\": {:.4}, \"prog_ns\": {:.1}, \"base_prog_ns\": {:.1}{figures}}}",
            c.name,
            c.what,
            c.base_name,
            json_list(&r),
            median(&r),
            median(&ns),
            median(&bns)
        ));
    }
    let _ = peer.detach(sink_if as i32, XdpFlags::DRV_MODE);

    let g = set.global.as_ref().context("global table")?;
    let med = |f: fn(&Swap) -> f64| median(&swaps.iter().map(f).collect::<Vec<_>>());
    let doc = format!(
        "{{\"prefixes\": {n}, \"distinct_prefixes\": {}, \"long_entries\": {}, \"buckets\": {}, \"reps\": {reps}, \"frames_per_run\": {frames},\n\
         \"first\": {{\"read_compile_ms\": {:.1}, \"install_ms\": {:.1}, \"maps_ms\": {:.1}, \"kernel_bytes\": {}}},\n\
         \"swap\": {{\"read_compile_ms\": {}, \"install_ms\": {}, \"maps_ms\": {}, \"read_compile_ms_median\": {:.1}, \"install_ms_median\": {:.1}, \"maps_ms_median\": {:.1}, \"total_ms_median\": {:.1}, \"kernel_bytes\": {}}},\n\
         \"process\": {{\"rss_before_kb\": {rss0}, \"rss_after_kb\": {rss2}, \"peak_growth_first_kb\": {}, \"peak_growth_all_kb\": {}}},\n\
         \"trie\": {{\"fill_ms\": {trie_fill_ms:.1}, \"memlock_bytes\": {trie_bytes}}},\n\
         \"xdp_method\": \"{}\", \"live_frames_refused\": {},\n\
         \"live\": [\n  {}\n]}}\n",
        set.global_entries.len(),
        g.long_entries,
        g.buckets.len(),
        first.read_compile_ms,
        first.install_ms,
        first.maps_ms,
        first.bytes,
        json_list(&swaps.iter().map(|s| s.read_compile_ms).collect::<Vec<_>>()),
        json_list(&swaps.iter().map(|s| s.install_ms).collect::<Vec<_>>()),
        json_list(&swaps.iter().map(|s| s.maps_ms).collect::<Vec<_>>()),
        med(|s| s.read_compile_ms),
        med(|s| s.install_ms),
        med(|s| s.maps_ms),
        med(|s| s.read_compile_ms + s.install_ms),
        swaps.last().map_or(0, |s| s.bytes),
        hwm1.saturating_sub(hwm0),
        hwm2.saturating_sub(hwm0),
        if live { "live" } else { "repeat" },
        refused.map_or("null".into(), |e| format!("\"{e}\"")),
        live_json.join(",\n  ")
    );
    if out_path.is_empty() {
        print!("{doc}");
    } else {
        std::fs::write(&out_path, doc)?;
    }
    drop((filt, plain));
    Ok(())
}
