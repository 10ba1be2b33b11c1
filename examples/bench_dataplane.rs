//! Data-plane benchmarks of nilb (part 1 and 2 of BENCHMARKS.md), run by
//! `scripts/bench.sh` inside a network namespace it prepared:
//!
//!   gen0 (10.99.0.1/24, forwarding=1) <-veth-> sink0 (XDP `count_drop`)
//!   neighbours 10.99.0.11-16 and .50 -> sink0's MAC (permanent)
//!   10.99.0.100 (VIP) and 10.99.0.2 (a client) on lo
//!
//! XDP: live frames. `BPF_PROG_TEST_RUN` with `BPF_F_TEST_XDP_LIVE_FRAMES` of
//! the driver program `gen_tail` (bench/bpf/bench.bpf.c) on gen0: it restores
//! the 64-byte frame, varies the ports, and tail-calls the program under test
//! (nilb's balancer, or a baseline). Frames sent with XDP_TX leave gen0 and are
//! counted and dropped by `count_drop` on sink0; packets per second =
//! frames counted / wall time of the syscall. XDP_PASS frames go up gen0's
//! stack (UDP to the node's address, no listener). Baseline and nilb run
//! back to back in each repetition, order alternating.
//!
//! Where the kernel refuses live frames (probed at start: one live-frames
//! run of `macswap_tx`, repeat 1, into gen0; EPERM, EOPNOTSUPP or EINVAL),
//! or with `--method repeat`, the same cases and pairs are measured in
//! repeat mode: `BPF_PROG_TEST_RUN` without live frames, `--frames` runs
//! per call, of the driver `gen_repeat` (restores the frame's length and
//! bytes, then as gen_tail) and the program under test: ns per packet =
//! CPU time of the call / runs (raw: driver and program), and in every
//! repetition the driver with the empty target `xdp_pass_only` (its own
//! cost); net = raw - driver. Ratios: reference ns / nilb ns (packets per
//! CPU second, as the live ratio), raw and net. Program cost only, nothing
//! transmitted.
//!
//! Program cost: `BPF_PROG_TEST_RUN` (no live frames) of each program alone,
//! one run per syscall (the kernel's own per-run duration), median of many;
//! the same for nilb's TC program on GUE packets, against a TC program that
//! only passes. Probes of single operations run with `repeat`.
//!
//!   bench_dataplane --obj bench.bpf.o [--gen gen0] [--sink sink0]
//!       [--frames 2000000] [--reps 5] [--runs 3000] [--out FILE.json]
//!       [--method auto|live|repeat]
//!
//! Needs root. Prints a JSON document (to --out or stdout).

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, ObjectBuilder, Xdp, XdpFlags};
use nilb::config::Config;
use nilb::control::ControlPlane;
use nilb::dataplane::abi::{self, skel::types::__sk_buff, COUNTER_NAMES};
use nilb::dataplane::Dataplane;

mod bench_common;
use bench_common::*;

const NODE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const TC_NODE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 12);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 100);
const REMOTE_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 50);
const LOCAL_CLIENT: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const GUE_PORT: u16 = 19523;
const XDP_TX: u32 = 3;
const XDP_PASS: u32 = 2;
const TC_ACT_OK: u32 = 0;
const TC_ACT_REDIRECT: u32 = 7;
const PROG_TYPE_XDP: u32 = 6;
const PROG_TYPE_SCHED_CLS: u32 = 3;

fn json_list(v: &[f64]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x:.4}")).collect();
    format!("[{}]", items.join(", "))
}

// ---- configs ---------------------------------------------------------------

fn config_yaml(services: &[(u16, Vec<(&str, &str)>)]) -> String {
    let mut s = String::from(
        "version: 1\n\
         cluster: {hash_seed: 0x5eed1234, balancers: [10.99.0.1], gue_port: 19523, unknown_flow: drop}\n\
         defaults:\n  table_size: 4096\n  \
         rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}\n\
         services:\n",
    );
    for (port, backends) in services {
        let _ = writeln!(
            s,
            "  - name: svc{port}\n    vip: 10.99.0.100\n    port: {port}\n    protocol: tcp\n    \
             health_check: {{none: {{}}}}\n    backends:"
        );
        for (dip, state) in backends {
            let _ = writeln!(s, "      - {{dip: {dip}, state: {state}}}");
        }
    }
    s
}

/// One UDP service on port 443 with `quic_lb` (`lb`: the block's fields),
/// backends .11-.13 with server IDs 0b0b.., 0c0c.., 0d0d.. (server_id_len
/// bytes of the address's last byte).
fn quic_yaml(lb: &str, sid_len: usize) -> String {
    let mut s = config_yaml(&[]);
    let _ = writeln!(
        s,
        "  - name: quic\n    vip: 10.99.0.100\n    port: 443\n    protocol: udp\n    \
         health_check: {{none: {{}}}}\n    quic_lb: {{{lb}}}\n    backends:"
    );
    for last in [11u8, 12, 13] {
        let sid: String = std::iter::repeat_n(format!("{last:02x}"), sid_len).collect();
        let _ = writeln!(s, "      - {{dip: 10.99.0.{last}, server_id: \"{sid}\"}}");
    }
    s
}

/// 64-byte short-header QUIC packet to VIP:443 whose connection ID carries
/// backend .11's server ID under `cfg`.
fn quic_frame(gen_mac: [u8; 6], cfg: &nilb::quic_lb::Config) -> Vec<u8> {
    let sid = vec![11u8; cfg.server_id_len()];
    let nonce: Vec<u8> = (0..cfg.nonce_len() as u8).collect();
    let cid = cfg.encode(&sid, &nonce).expect("bench CID");
    let mut u = udp(40000, 443, 22);
    u[8] = 0x41;
    u[9..9 + cid.len()].copy_from_slice(cid.as_bytes());
    eth(gen_mac, CLIENT_MAC, &ipv4(REMOTE_CLIENT, VIP, 17, &u))
}

fn three() -> Vec<(&'static str, &'static str)> {
    vec![
        ("10.99.0.11", "active"),
        ("10.99.0.12", "active"),
        ("10.99.0.13", "active"),
    ]
}

fn parse(y: &str) -> Result<Config> {
    Config::parse(y).map_err(|e| anyhow::anyhow!("bench config invalid: {e}\n{y}"))
}

// ---- program discovery -----------------------------------------------------

/// BPF program fds of this process: fd -> (prog id, prog type), from
/// /proc/self/fdinfo.
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

/// A loaded nilb data plane plus owned fds of its two programs (found as
/// the programs that appeared in this process during the load; the library
/// does not expose them).
struct Loaded {
    dp: Dataplane<'static>,
    xdp: OwnedFd,
    /// The backends' XDP program (`nilb_xdp_backend`).
    xdp_backend: OwnedFd,
    tc: OwnedFd,
    /// NAT mode's egress program (`nilb_tc_nat_egress`).
    tc_egress: OwnedFd,
    xdp_id: u32,
    tc_id: u32,
}

fn load_nilb(pin: Option<&std::path::Path>, cluster6: bool) -> Result<Loaded> {
    let balancer = nilb::dataplane::xdp_balancer_programs(cluster6).0;
    let before: BTreeSet<i32> = my_prog_fds().iter().map(|p| p.0).collect();
    let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> =
        Box::leak(Box::new(MaybeUninit::uninit()));
    let dp = Dataplane::load_pinned(storage, pin, 16 * 65536)?;
    let mut xdp = None;
    let mut xdp_backend = None;
    let mut tc = None;
    let mut tc_egress = None;
    for (fd, id, ty) in my_prog_fds() {
        if before.contains(&fd) {
            continue;
        }
        // SAFETY: fd is open in this process (it is the data plane's
        // program, alive as long as `dp`); we duplicate it at once.
        let owned = unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()?;
        match ty {
            PROG_TYPE_XDP => match prog_func_name(id).as_deref() {
                Some("nilb_xdp_backend") => xdp_backend = Some(owned),
                Some(n) if n == balancer => xdp = Some((owned, id)),
                // The IPv6 program (tail-called) and the IPv6 cluster
                // network's variants.
                _ => {}
            },
            PROG_TYPE_SCHED_CLS => {
                let egress = libbpf_rs::query::ProgInfoIter::default()
                    .find(|p| p.id == id)
                    .is_some_and(|p| p.name.to_string_lossy().starts_with("nilb_tc_nat_egr"));
                if egress {
                    tc_egress = Some(owned);
                } else {
                    tc = Some((owned, id));
                }
            }
            _ => {}
        }
    }
    let (xdp, xdp_id) = xdp.context("nilb's XDP program not found among new fds")?;
    let (tc, tc_id) = tc.context("nilb's TC program not found among new fds")?;
    let xdp_backend = xdp_backend.context("nilb's backend XDP program not found among new fds")?;
    let tc_egress = tc_egress.context("nilb's NAT egress program not found among new fds")?;
    Ok(Loaded {
        dp,
        xdp,
        xdp_backend,
        tc,
        tc_egress,
        xdp_id,
        tc_id,
    })
}

fn configured(cfgs: &[&str], node: impl Into<std::net::IpAddr>) -> Result<(Loaded, ControlPlane)> {
    configured_pinned(cfgs, node.into(), None)
}

fn configured_pinned(
    cfgs: &[&str],
    node: std::net::IpAddr,
    pin: Option<&std::path::Path>,
) -> Result<(Loaded, ControlPlane)> {
    let mut l = load_nilb(pin, node.is_ipv6())?;
    let mut cp = ControlPlane::new(parse(cfgs[0])?, 0);
    cp.apply(&mut l.dp, node, &cp.full_plan())?;
    for (i, c) in cfgs.iter().enumerate().skip(1) {
        let plan = cp.update(parse(c)?, 1000 * i as u64);
        cp.apply(&mut l.dp, node, &plan)?;
    }
    Ok((l, cp))
}

// ---- test runs ------------------------------------------------------------

struct RunOut {
    retval: u32,
    duration_ns: u32,
}

fn test_run(
    prog: BorrowedFd<'_>,
    data: &[u8],
    ctx: Option<&mut [u8]>,
    repeat: u32,
    flags: u32,
) -> Result<RunOut> {
    // SAFETY: zeroed is a valid bpf_test_run_opts; every pointer set below
    // points into a live borrow for the duration of the call.
    let mut opts: libbpf_sys::bpf_test_run_opts = unsafe { std::mem::zeroed() };
    opts.sz = std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _;
    opts.data_in = data.as_ptr().cast();
    opts.data_size_in = data.len() as u32;
    if let Some(c) = ctx {
        opts.ctx_in = c.as_ptr().cast();
        opts.ctx_size_in = c.len() as u32;
    }
    opts.repeat = repeat as i32;
    opts.flags = flags;
    // SAFETY: see above.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    if rc != 0 {
        bail!(
            "BPF_PROG_TEST_RUN failed: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(RunOut {
        retval: opts.retval,
        duration_ns: opts.duration,
    })
}

fn xdp_ctx(len: usize, ifindex: u32) -> Vec<u8> {
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
    // rx_queue_index, egress_ifindex (all u32); zero padding.
    let mut c = vec![0u8; 24];
    c[4..8].copy_from_slice(&(len as u32).to_ne_bytes());
    c[12..16].copy_from_slice(&ifindex.to_ne_bytes());
    c
}

fn skb_ctx(ifindex: u32) -> Vec<u8> {
    let mut c = vec![0u8; std::mem::size_of::<__sk_buff>()];
    let off = std::mem::offset_of!(__sk_buff, ifindex);
    c[off..off + 4].copy_from_slice(&ifindex.to_ne_bytes());
    c
}

/// Median per-run duration (ns) of `runs` single-run syscalls, checking the
/// verdict of each.
fn per_run_ns(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ctx: &[u8],
    runs: usize,
    want: u32,
) -> Result<Vec<f64>> {
    let mut d = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut c = ctx.to_vec();
        let r = test_run(prog, frame, Some(&mut c), 1, 0)?;
        if r.retval != want {
            bail!("verdict {} instead of {want}", r.retval);
        }
        d.push(r.duration_ns as f64);
    }
    Ok(d)
}

// ---- frames ---------------------------------------------------------------

fn csum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, payload: &[u8]) -> Vec<u8> {
    let tot = 20 + payload.len();
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&(tot as u16).to_be_bytes());
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

fn tcp(sport: u16, dport: u16, flags: u8, payload_len: usize) -> Vec<u8> {
    let mut t = vec![0u8; 20 + payload_len];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&1000u32.to_be_bytes());
    t[8..12].copy_from_slice(&2000u32.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    t
}

fn udp(sport: u16, dport: u16, payload_len: usize) -> Vec<u8> {
    let mut u = vec![0u8; 8 + payload_len];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    u
}

fn eth(dst: [u8; 6], src: [u8; 6], l3: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + l3.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(l3);
    f
}

const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x50];
const TCP_SYN: u8 = 0x02;
const TCP_ACK: u8 = 0x10;

/// 64-byte TCP frame to the VIP (ACK, 10 bytes of payload).
fn vip_frame(gen_mac: [u8; 6], dport: u16) -> Vec<u8> {
    eth(
        gen_mac,
        CLIENT_MAC,
        &ipv4(REMOTE_CLIENT, VIP, 6, &tcp(40000, dport, TCP_ACK, 10)),
    )
}

/// The IPv6 VIP of the `vip_ipv6` case (docs/design.md "IPv6").
const VIP6: &str = "2001:db8:99::100";
/// The node's address on the IPv6 cluster network of the `*_c6` cases
/// (backends fd99::11-13 are neighbours on gen0, set up by scripts/bench.sh).
const NODE6: &str = "fd99::1";

/// TCP segment (ACK, 10 bytes of data) from an IPv6 client to VIP6:dport:
/// 84 bytes. The generator's "source port" bytes (offset 34) fall in the
/// IPv6 source address, so the flows vary there.
fn vip6_frame(gen_mac: [u8; 6], dport: u16) -> Vec<u8> {
    let t = tcp(40000, dport, TCP_ACK, 10);
    let mut l3 = vec![0x60, 0, 0, 0];
    l3.extend_from_slice(&(t.len() as u16).to_be_bytes());
    l3.extend_from_slice(&[6, 64]);
    l3.extend_from_slice(
        &"2001:db8:50::50"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    l3.extend_from_slice(&VIP6.parse::<std::net::Ipv6Addr>().unwrap().octets());
    l3.extend_from_slice(&t);
    let mut f = eth(gen_mac, CLIENT_MAC, &l3);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f
}

/// 64-byte UDP frame to the node's own address, port 9 (nothing listens).
fn node_frame(gen_mac: [u8; 6]) -> Vec<u8> {
    eth(
        gen_mac,
        CLIENT_MAC,
        &ipv4(REMOTE_CLIENT, NODE, 17, &udp(40000, 9, 22)),
    )
}

/// GUE packet from the balancer to TC_NODE carrying a TCP segment from
/// LOCAL_CLIENT:sport to VIP:80, listing `hop` as second hop.
fn gue_frame(gen_mac: [u8; 6], sport: u16, flags: u8, hop: Ipv4Addr) -> Vec<u8> {
    let inner = ipv4(LOCAL_CLIENT, VIP, 6, &tcp(sport, 80, flags, 10));
    let mut gue = vec![2u8, 4, 0, 0, 0, 0, 0, 1];
    gue.extend_from_slice(&hop.octets());
    gue.extend_from_slice(&inner);
    let mut u = udp(0x8000 | 1234, GUE_PORT, gue.len());
    u.truncate(8);
    u.extend_from_slice(&gue);
    eth(
        gen_mac,
        [0x02, 0, 0, 0, 0, 0x01],
        &ipv4(NODE, TC_NODE, 17, &u),
    )
}

/// A GUE frame over the IPv6 cluster network of the `*_c6` cases: outer
/// IPv6 from backend fd99::11 to the node (NODE6), UDP (checksum 0) to the
/// GUE port, GUE with no hop listed around `inner` (GUE protocol
/// `inner_proto`: 4 or 41).
fn gue6_frame(gen_mac: [u8; 6], inner_proto: u8, inner: &[u8]) -> Vec<u8> {
    let mut g = vec![1u8, inner_proto, 0, 0, 0, 0, 0, 0];
    g.extend_from_slice(inner);
    let udp_len = 8 + g.len();
    let mut l3 = vec![0x60, 0, 0, 0];
    l3.extend_from_slice(&(udp_len as u16).to_be_bytes());
    l3.extend_from_slice(&[17, 64]);
    l3.extend_from_slice(&"fd99::11".parse::<std::net::Ipv6Addr>().unwrap().octets());
    l3.extend_from_slice(&NODE6.parse::<std::net::Ipv6Addr>().unwrap().octets());
    l3.extend_from_slice(&(0x8000u16 | 1234).to_be_bytes());
    l3.extend_from_slice(&GUE_PORT.to_be_bytes());
    l3.extend_from_slice(&(udp_len as u16).to_be_bytes());
    l3.extend_from_slice(&[0, 0]);
    l3.extend_from_slice(&g);
    let mut f = eth(gen_mac, [0x02, 0, 0, 0, 0, 0x01], &l3);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f
}

/// Recompute the IPv4 header checksum of the (20-byte) header at `o`.
fn fix_inner_ip_csum(f: &mut [u8], o: usize) {
    f[o + 10] = 0;
    f[o + 11] = 0;
    let c = csum(&f[o..o + 20]);
    f[o + 10..o + 12].copy_from_slice(&c.to_be_bytes());
}

// ---- the benchmark object --------------------------------------------------

/// Layout of `struct gen_cfg` in bench.bpf.c (the only .bss variable).
fn gen_value(frame: &[u8], vary_sport: bool, dport_count: u32, dport_base: u32) -> Vec<u8> {
    let mut v = vec![0u8; 96];
    v[..64].copy_from_slice(&frame[..64]);
    v[64..68].copy_from_slice(&(vary_sport as u32).to_ne_bytes());
    v[68..72].copy_from_slice(&dport_count.to_ne_bytes());
    v[72..76].copy_from_slice(&dport_base.to_ne_bytes());
    // fib probe: node -> backend .11
    v[80..84].copy_from_slice(&NODE.octets());
    v[84..88].copy_from_slice(&Ipv4Addr::new(10, 99, 0, 11).octets());
    // encap_tx: the GUE port (network order)
    v[92..94].copy_from_slice(&GUE_PORT.to_be_bytes());
    // gen_repeat: the frame's length
    v[94..96].copy_from_slice(&(frame.len() as u16).to_ne_bytes());
    v
}

/// Fill the floor balancer's tables of a loaded bench object (bench.bpf.c
/// floor_lb): bucket i of every service holds slot 1 + i % 3, slots 1-3
/// the backends .11-.13.
fn fill_floor(obj: &libbpf_rs::Object) -> Result<()> {
    let map = |name: &str| {
        obj.maps()
            .find(|m| m.name().to_string_lossy() == name)
            .with_context(|| format!("map {name} not in the bench object"))
    };
    let first = map("floor_first")?;
    for e in 0..first.max_entries() {
        let v: Vec<u8> = (0..4u32)
            .flat_map(|k| (1 + (e * 4 + k) % 3).to_ne_bytes()[..2].to_vec())
            .collect();
        first.update(&e.to_ne_bytes(), &v, MapFlags::ANY)?;
    }
    let first8 = map("floor_first8")?;
    for e in 0..first8.max_entries() {
        let v: Vec<u8> = (0..8u32).map(|k| (1 + (e * 8 + k) % 3) as u8).collect();
        first8.update(&e.to_ne_bytes(), &v, MapFlags::ANY)?;
    }
    let hops = map("floor_hops")?;
    for slot in 1..4u32 {
        hops.update(
            &slot.to_ne_bytes(),
            &Ipv4Addr::new(10, 99, 0, 10 + slot as u8).octets(),
            MapFlags::ANY,
        )?;
    }
    Ok(())
}

/// A co-runner for `--pressure-kib`: a thread on one CPU that, while on,
/// reads a buffer of `kib` KiB one byte per 64-byte line, over and over;
/// while off it sleeps (200 us at a time). Stopped and joined on drop.
struct Pressure {
    on: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Pressure {
    fn start(kib: usize, cpu: usize) -> Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let on = std::sync::Arc::new(AtomicBool::new(false));
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).context("--pressure-cpu")?;
        let (on2, stop2) = (on.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            // The bench itself runs pinned elsewhere (taskset): the
            // co-runner moves to its own CPU, or runs where it may.
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
            let buf = vec![1u8; kib * 1024];
            let mut sum = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                if !on2.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                // 256 KiB at a time, so that turning it off takes effect
                // within microseconds, not after a pass over the buffer.
                for chunk in buf.chunks(256 * 1024) {
                    if !on2.load(Ordering::Relaxed) {
                        break;
                    }
                    for i in (0..chunk.len()).step_by(64) {
                        sum = sum.wrapping_add(u64::from(chunk[i]));
                    }
                }
                std::hint::black_box(sum);
            }
        });
        Ok(Pressure {
            on,
            stop,
            thread: Some(thread),
        })
    }

    /// Turn the co-runner on or off, and give it 20 ms to get going.
    fn set(&self, on: bool) {
        self.on.store(on, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Pressure {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A program under test on a generator config (`gen_value`) and frame.
struct Side<'a> {
    name: &'a str,
    fd: BorrowedFd<'a>,
    gen: &'a [u8],
    frame: &'a [u8],
}

struct Bench {
    obj: libbpf_rs::Object,
    gen_if: u32,
    _gen_mac: [u8; 6],
}

impl Bench {
    fn prog(&self, name: &str) -> Result<BorrowedFd<'_>> {
        for p in self.obj.progs() {
            if p.name() == name {
                // SAFETY: the program lives as long as self.obj; the
                // borrow is tied to &self.
                return Ok(unsafe { BorrowedFd::borrow_raw(p.as_fd().as_raw_fd()) });
            }
        }
        bail!("program {name} not in the bench object")
    }

    fn map(&self, suffix: &str) -> Result<libbpf_rs::Map<'_>> {
        self.obj
            .maps()
            .find(|m| m.name().to_string_lossy().ends_with(suffix))
            .with_context(|| format!("map {suffix} not in the bench object"))
    }

    fn set_gen(&self, v: &[u8]) -> Result<()> {
        self.map(".bss")?
            .update(&0u32.to_ne_bytes(), v, MapFlags::ANY)
            .context("writing gen_cfg")
    }

    fn set_target(&self, prog: BorrowedFd<'_>) -> Result<()> {
        self.map("target")?
            .update(
                &0u32.to_ne_bytes(),
                &(prog.as_raw_fd() as u32).to_ne_bytes(),
                MapFlags::ANY,
            )
            .context("setting the tail-call target")
    }

    fn rx_count(&self) -> Result<u64> {
        let v = self
            .map("rx_count")?
            .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)?
            .context("rx_count empty")?;
        Ok(abi::sum_percpu_u64(&v))
    }

    /// One live-frames run of `target` driven by gen_tail: (Mpps delivered
    /// to the peer, Mpps generated).
    fn live(
        &self,
        target: BorrowedFd<'_>,
        gen: &[u8],
        frame: &[u8],
        frames: u32,
    ) -> Result<(f64, f64)> {
        self.set_gen(gen)?;
        self.set_target(target)?;
        let before = self.rx_count()?;
        let mut ctx = xdp_ctx(frame.len(), self.gen_if);
        let t = Instant::now();
        test_run(
            self.prog("gen_tail")?,
            frame,
            Some(&mut ctx),
            frames,
            libbpf_sys::BPF_F_TEST_XDP_LIVE_FRAMES,
        )?;
        let el = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(5));
        let got = self.rx_count()? - before;
        Ok((got as f64 / el / 1e6, frames as f64 / el / 1e6))
    }

    /// Repeat-mode measurement of `sides` (a program on a generator config
    /// and frame, and its verdict), each driven by gen_repeat for
    /// `runs` runs in calls of at most REPEAT_CALL runs, the calls
    /// round-robin over the sides (each round from side `rep % len`), so
    /// that a change of the shared host's load touches every side alike.
    /// Per side: ns per packet, driver and target, the median over its
    /// calls of bench_common::XdpRun::cpu_ns. Fails unless every call's
    /// last verdict is the side's.
    fn repeat(&self, rep: usize, sides: &[(&Side<'_>, u32)], runs: u32) -> Result<Vec<f64>> {
        let driver = self.prog("gen_repeat")?;
        repeat_sides(driver, self.gen_if, rep, sides, runs, |s| {
            self.set_gen(s.gen)?;
            self.set_target(s.fd)?;
            Ok(s.frame)
        })
        .with_context(|| {
            format!(
                "sides {:?}",
                sides.iter().map(|(s, _)| s.name).collect::<Vec<_>>()
            )
        })
    }
}

/// Per case: Mpps (live frames) or raw ns per packet (repeat mode) of nilb
/// and of the baseline per repetition, their ratio (repeat mode: also the
/// driver alone, ns, and the ratio net of it), and the program cost per
/// run (ns).
#[derive(Default)]
struct CaseResult {
    nilb: Vec<f64>,
    base: Vec<f64>,
    drv: Vec<f64>,
    ratio: Vec<f64>,
    ratio_net: Vec<f64>,
    nilb_ns: f64,
    base_ns: f64,
}

fn counters(l: &Loaded) -> Result<Vec<u64>> {
    l.dp.counters()
}

fn counter_delta(a: &[u64], b: &[u64]) -> String {
    let mut parts = Vec::new();
    for (i, name) in COUNTER_NAMES.iter().enumerate() {
        let d = b[i] - a[i];
        if d > 0 {
            parts.push(format!("{name}={d}"));
        }
    }
    parts.join(" ")
}

fn prog_info(id: u32) -> Option<(usize, usize, u32)> {
    use libbpf_rs::query::{ProgInfoIter, ProgInfoQueryOptions};
    ProgInfoIter::with_query_opts(
        ProgInfoQueryOptions::default()
            .include_xlated_prog_insns(true)
            .include_jited_prog_insns(true),
    )
    .find(|p| p.id == id)
    .map(|p| {
        (
            p.xlated_prog_insns.len() / 8,
            p.jited_prog_insns.len(),
            p.verified_insns,
        )
    })
}

fn read_mac(ifname: &str) -> Result<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/address"))
        .with_context(|| format!("reading the MAC of {ifname}"))?;
    let b: Vec<u8> = s
        .trim()
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()?;
    b.try_into().map_err(|_| anyhow::anyhow!("bad MAC {s}"))
}

/// An established TCP connection LOCAL_CLIENT:port -> VIP:80 in this
/// namespace (so the TC program's socket lookup finds it). Returns the
/// client port and the sockets to keep alive.
fn established() -> Result<(u16, Vec<OwnedFd>)> {
    use nix::sys::socket::{
        accept, bind, connect, getsockname, listen, setsockopt, socket, sockopt, AddressFamily,
        Backlog, SockFlag, SockType, SockaddrIn,
    };
    let l = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )?;
    setsockopt(&l, sockopt::ReuseAddr, &true)?;
    bind(
        l.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(VIP, 80)),
    )
    .context("binding VIP:80 (is the VIP on lo?)")?;
    listen(&l, Backlog::new(16)?)?;
    let c = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )?;
    bind(
        c.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(LOCAL_CLIENT, 0)),
    )
    .context("binding the client address (is 10.99.0.2 on lo?)")?;
    connect(
        c.as_raw_fd(),
        &SockaddrIn::from(std::net::SocketAddrV4::new(VIP, 80)),
    )?;
    let a = accept(l.as_raw_fd())?;
    // SAFETY: accept returned a fresh fd that nothing else owns.
    let a = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(a) };
    let name: SockaddrIn = getsockname(c.as_raw_fd())?;
    Ok((name.port(), vec![l, c, a]))
}

/// One TC case: `prog` of data plane `l` and the pass-only baseline, 4
/// alternating rounds of `runs / 4` runs each on `frame` (verdict `want`);
/// `counter` must move once per run (empty: no counter may move).
/// Returns: the case's JSON object.
fn tc_case(
    l: &Loaded,
    prog: BorrowedFd<'_>,
    tc_pass: BorrowedFd<'_>,
    sctx: &[u8],
    runs: usize,
    (name, what, frame, want, counter): (&str, &str, &[u8], u32, &str),
) -> Result<String> {
    let before = counters(l)?;
    let mut n = Vec::new();
    let mut b = Vec::new();
    for round in 0..4 {
        let nn = per_run_ns(prog, frame, sctx, runs / 4, want)?;
        let bb = per_run_ns(tc_pass, frame, sctx, runs / 4, TC_ACT_OK)?;
        if round % 2 == 0 {
            n.extend(nn);
            b.extend(bb);
        } else {
            b.extend(bb);
            n.extend(nn);
        }
    }
    let after = counters(l)?;
    if counter.is_empty() {
        if before != after {
            bail!(
                "TC {name}: counters moved: {}",
                counter_delta(&before, &after)
            );
        }
    } else {
        let idx = COUNTER_NAMES.iter().position(|c| *c == counter).unwrap();
        let moved = after[idx] - before[idx];
        if moved as usize != n.len() {
            bail!(
                "TC {name}: {counter} moved by {moved}, expected {}; counters {}",
                n.len(),
                counter_delta(&before, &after)
            );
        }
    }
    eprintln!(
        "tc {name}: nilb {:.0} ns, tc_pass_only {:.0} ns",
        median(&n),
        median(&b)
    );
    Ok(format!(
        "{{\"case\": \"{name}\", \"what\": \"{what}\", \"nilb_ns\": {:.1}, \"base_ns\": {:.1}, \"frame_bytes\": {}}}",
        median(&n),
        median(&b),
        frame.len()
    ))
}

fn main() -> Result<()> {
    let obj_path = arg("--obj", "bench.bpf.o");
    let gen_name = arg("--gen", "gen0");
    let sink_name = arg("--sink", "sink0");
    let frames: u32 = arg("--frames", "2000000").parse()?;
    let reps: usize = arg("--reps", "5").parse()?;
    let runs: usize = arg("--runs", "3000").parse()?;
    let out_path = arg("--out", "");

    let gen_if = nix::net::if_::if_nametoindex(gen_name.as_str())?;
    let sink_if = nix::net::if_::if_nametoindex(sink_name.as_str())?;
    let gen_mac = read_mac(&gen_name)?;

    let obj = ObjectBuilder::default()
        .open_file(&obj_path)
        .with_context(|| format!("opening {obj_path}"))?
        .load()
        .context("loading the bench object")?;
    let bench = Bench {
        obj,
        gen_if,
        _gen_mac: gen_mac,
    };
    // The counting peer.
    let count_drop = bench.prog("count_drop")?;
    let peer = Xdp::new(count_drop);
    peer.attach(sink_if as i32, XdpFlags::DRV_MODE)
        .context("attaching count_drop to the sink")?;
    // Live frames, or repeat mode where the kernel refuses them (probed
    // with one MAC-swapped VIP frame into gen0).
    let (method, refused) = xdp_method(bench.prog("macswap_tx")?, &vip_frame(gen_mac, 80), gen_if)?;
    let live = method == XdpMethod::Live;
    bench
        .map("probe_hash_map")?
        .update(&1u64.to_ne_bytes(), &7u64.to_ne_bytes(), MapFlags::ANY)?;
    fill_floor(&bench.obj)?;
    // --floor-instances N (pairs-only runs): N - 1 more copies of the bench
    // object, each with its own floor tables (other pages of memory), whose
    // floor_lb100 is measured as a pair of its own: how much the 100-service
    // floor depends on where its 800 KiB of entries happen to lie.
    let floor_copies: Vec<libbpf_rs::Object> = (1..arg("--floor-instances", "1")
        .parse::<usize>()?)
        .map(|_| -> Result<libbpf_rs::Object> {
            let o = ObjectBuilder::default()
                .open_file(&obj_path)?
                .load()
                .context("loading a copy of the bench object")?;
            fill_floor(&o)?;
            Ok(o)
        })
        .collect::<Result<_>>()?;

    // nilb data planes, filled through the control plane as the daemon does.
    let one = config_yaml(&[(80, three())]);
    let moved = config_yaml(&[(
        80,
        vec![
            ("10.99.0.11", "drained"),
            ("10.99.0.12", "drained"),
            ("10.99.0.13", "drained"),
            ("10.99.0.14", "active"),
            ("10.99.0.15", "active"),
            ("10.99.0.16", "active"),
        ],
    )]);
    // --table-size-100 N: bucket count of the 100 services (default 4096,
    // like the others); smaller tables show how much of that case is cache
    // and TLB misses on the bucket arrays.
    let hundred = config_yaml(&(1000..1100).map(|p| (p, three())).collect::<Vec<_>>()).replace(
        "table_size: 4096",
        &format!("table_size: {}", arg("--table-size-100", "4096")),
    );
    // The same 100 services with 1024 buckets each (800 KiB of buckets
    // instead of 3.2 MiB): what of the 100-service case is the bucket
    // arrays' cache and TLB misses (issue 12).
    let hundred_small = hundred.replace("table_size: 4096", "table_size: 1024");
    let (dp100s, _) = configured(&[&hundred_small], NODE)?;
    let (dp1, _) = configured(&[&one], NODE)?;
    // The same service on an IPv6 VIP beside the IPv4 one.
    let one6 = format!(
        "{one}{}",
        one.split_once("services:\n")
            .map(|(_, svc)| svc
                .replace("name: svc80", "name: svc80v6")
                .replace("vip: 10.99.0.100", &format!("vip: \"{VIP6}\""),))
            .unwrap_or_default()
    );
    let (dp6, _) = configured(&[&one6], NODE)?;
    // Both over an IPv6 cluster network (docs/design.md "IPv6 cluster
    // network"): the node fd99::1, the backends fd99::11-13 (neighbours on
    // gen0, set up by scripts/bench.sh).
    let one_c6 = one6
        .replace(
            "balancers: [10.99.0.1]",
            &format!("balancers: [\"{NODE6}\"]"),
        )
        .replace("{dip: 10.99.0.", "{dip: \"fd99::")
        .replace(", state: ", "\", state: ");
    let (dp_c6, _) = configured(&[&one_c6], NODE6.parse::<std::net::Ipv6Addr>()?)?;
    let (dp2, cp2) = configured(&[&one, &moved], NODE)?;
    let (dp100, _) = configured(&[&hundred], NODE)?;
    // Two and three previous owners in every bucket: the second-hop table
    // with longer chains written straight into the pool (the drained
    // backends .11-.13 have slots in the service).
    let chained = |n: usize| -> Result<Loaded> {
        let (mut l, _) = configured(&[&one, &moved], NODE)?;
        let (key, t) = l.dp.live_tables()?.remove(0);
        let older: Vec<std::net::IpAddr> = ["10.99.0.11", "10.99.0.12", "10.99.0.13"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let mut chains = t.to_chains();
        for c in &mut chains.chains {
            let mut prev = c.1.clone();
            prev.extend(older.iter().filter(|a| !c.1.contains(a)).copied());
            prev.truncate(n);
            c.1 = prev;
        }
        if chains.chains.iter().any(|c| c.1.len() != n) {
            bail!("chain setup failed: not every bucket has {n} previous owners");
        }
        l.dp.install_chains(&key, t.service_index, &chains, &|d| t.slots[&d], None)?;
        Ok(l)
    };
    let dp_prev2 = chained(2)?;
    let dp_prev3 = chained(3)?;
    let (dptc, _) = configured(&[&one], TC_NODE)?;
    // NAT mode: the same service with `mode: nat` (VIP:80 -> the node's own
    // address, port 8080).
    let one_nat = one.replacen(
        "protocol: tcp\n",
        "protocol: tcp\n    mode: nat\n    target_port: 8080\n",
        1,
    );
    if one_nat == one {
        bail!("NAT config: no TCP service to put in NAT mode");
    }
    let (dpnat, _) = configured(&[&one_nat], TC_NODE)?;
    let with_second: u32 = cp2
        .services()
        .values()
        .map(|s| s.table.second_shares().values().sum::<u32>())
        .sum();
    eprintln!("second-hop config: {with_second} of 4096 buckets have a second hop");
    if with_second != 4096 {
        bail!("second-hop setup failed: {with_second} buckets with a second hop");
    }

    // QUIC-LB: plaintext, four-pass (2 + 6 bytes: 3 AES), single-pass.
    const QUIC_KEY: &str = "8f95f09245765f80256934e50c66207f";
    let key_file = std::env::temp_dir().join(format!("nilb-bench-{}.key", std::process::id()));
    std::fs::write(&key_file, format!("{QUIC_KEY}\n"))?;
    let kf = key_file.display().to_string();
    let quic_cfgs = [
        ("codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext".to_string(), 2, 6, false),
        (format!("codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: four-pass, key_file: {kf}"), 2, 6, true),
        (format!("codepoint: 1, server_id_len: 4, nonce_len: 12, algorithm: single-pass, key_file: {kf}"), 4, 12, true),
    ];
    let mut quic_dps = Vec::new();
    let mut quic_frames = Vec::new();
    for (lb, sid_len, nonce_len, keyed) in &quic_cfgs {
        quic_dps.push(configured(&[&quic_yaml(lb, *sid_len)], NODE)?.0);
        let cfg = nilb::quic_lb::Config::new(&nilb::quic_lb::ConfigSpec {
            codepoint: 1,
            server_id_len: *sid_len,
            nonce_len: *nonce_len,
            key: keyed.then(|| nilb::quic_lb::Key::from_hex(QUIC_KEY).expect("key")),
            self_encode_length: false,
        })?;
        quic_frames.push(quic_frame(gen_mac, &cfg));
    }
    let _ = std::fs::remove_file(&key_file);
    let g_quic: Vec<Vec<u8>> = quic_frames
        .iter()
        .map(|f| gen_value(f, true, 0, 0))
        .collect();

    let vip = vip_frame(gen_mac, 80);
    let vip6 = vip6_frame(gen_mac, 80);
    let g_vip6 = gen_value(&vip6, true, 0, 0);
    let vip100 = vip_frame(gen_mac, 1000);
    let node = node_frame(gen_mac);
    let g_vip = gen_value(&vip, true, 0, 0);
    let g_vip100 = gen_value(&vip100, true, 100, 1000);
    let g_node = gen_value(&node, true, 0, 0);

    let macswap = bench.prog("macswap_tx")?;
    let encap = bench.prog("encap_tx")?;
    let pass = bench.prog("xdp_pass_only")?;

    struct Case<'a> {
        name: &'static str,
        what: &'static str,
        nilb: &'a Loaded,
        base: BorrowedFd<'a>,
        base_name: &'static str,
        gen: &'a [u8],
        frame: &'a [u8],
        expect: &'static str,
    }
    let cases = [
        Case {
            name: "vip",
            what: "TCP to a VIP, 1 service, no second hop",
            nilb: &dp1,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip,
            frame: &vip,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_vs_encap",
            what: "TCP to a VIP, 1 service, no second hop, against GUE encapsulation to one fixed hop without balancing",
            nilb: &dp1,
            base: encap,
            base_name: "encap_tx",
            gen: &g_vip,
            frame: &vip,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_ipv6",
            what: "TCP to an IPv6 VIP (GUE protocol 41 over IPv4), 1 service, no second hop",
            nilb: &dp6,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip6,
            frame: &vip6,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_c6",
            what: "TCP to an IPv4 VIP over an IPv6 cluster network (outer IPv6), 1 service, no second hop",
            nilb: &dp_c6,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip,
            frame: &vip,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip6_c6",
            what: "TCP to an IPv6 VIP over an IPv6 cluster network (outer IPv6), 1 service, no second hop",
            nilb: &dp_c6,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip6,
            frame: &vip6,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_second_hop",
            what: "TCP to a VIP, every bucket with a second hop",
            nilb: &dp2,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip,
            frame: &vip,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_prev2",
            what: "TCP to a VIP, every bucket with 2 previous owners",
            nilb: &dp_prev2,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip,
            frame: &vip,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_prev3",
            what: "TCP to a VIP, every bucket with 3 previous owners",
            nilb: &dp_prev3,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip,
            frame: &vip,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_100_services",
            what: "TCP to a VIP, 100 services (ports 1000-1099), packets spread over all",
            nilb: &dp100,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip100,
            frame: &vip100,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "vip_100_services_1024",
            what: "TCP to a VIP, 100 services of 1024 buckets (ports 1000-1099), packets spread over all",
            nilb: &dp100s,
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_vip100,
            frame: &vip100,
            expect: "xdp_encap_tx",
        },
        Case {
            name: "non_vip_pass",
            what: "UDP to the node's own address (not a service): XDP_PASS to the stack",
            nilb: &dp1,
            base: pass,
            base_name: "xdp_pass_only",
            gen: &g_node,
            frame: &node,
            expect: "xdp_pass_not_service",
        },
        Case {
            name: "quic_plaintext",
            what: "QUIC short header to a quic_lb service (plaintext), routed by server ID",
            nilb: &quic_dps[0],
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_quic[0],
            frame: &quic_frames[0],
            expect: "xdp_quic_routed",
        },
        Case {
            name: "quic_four_pass",
            what: "QUIC short header, four-pass (3 AES-128 in XDP), routed by server ID",
            nilb: &quic_dps[1],
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_quic[1],
            frame: &quic_frames[1],
            expect: "xdp_quic_routed",
        },
        Case {
            name: "quic_single_pass",
            what: "QUIC short header, single-pass (1 AES-128 in XDP), routed by server ID",
            nilb: &quic_dps[2],
            base: macswap,
            base_name: "macswap_tx",
            gen: &g_quic[2],
            frame: &quic_frames[2],
            expect: "xdp_quic_routed",
        },
    ];

    // --variant OBJ: a modified build of bpf/nilb.bpf.c (same maps, extra
    // maps allowed) run against the current program on the VIP cases, its
    // maps shared with the single-service data plane (pinned, then reused).
    // An experiment aid for changes to the XDP program; scripts/bench.sh does
    // not use it.
    let variant = arg("--variant", "");
    if !variant.is_empty() && !live {
        bail!("--variant needs live frames (this kernel refuses them)");
    }
    if !variant.is_empty() {
        let pin = std::path::PathBuf::from("/sys/fs/bpf");
        if nix::sys::statfs::statfs(&pin)
            .map(|s| s.filesystem_type().0 != 0xcafe4a11)
            .unwrap_or(true)
        {
            nix::mount::mount(
                Some("bpf"),
                &pin,
                Some("bpf"),
                nix::mount::MsFlags::empty(),
                None::<&str>,
            )?;
        }
        let pin = pin.join(format!("nilb-bench-variant-{}", std::process::id()));
        let (mut dpv, _) = configured_pinned(&[&one], NODE.into(), Some(&pin))?;
        let mut open = ObjectBuilder::default().open_file(&variant)?;
        for mut m in open.maps_mut() {
            let p = pin.join(m.name());
            if p.exists() {
                m.reuse_pinned_map(&p)?;
            }
        }
        let vobj = open.load().context("loading the variant")?;
        let vprog = vobj
            .progs()
            .find(|p| p.name() == "nilb_xdp_balancer")
            .context("variant has no nilb_xdp_balancer")?;
        // SAFETY: the program lives as long as vobj, which outlives its uses.
        let vfd = unsafe { BorrowedFd::borrow_raw(vprog.as_fd().as_raw_fd()) };
        for c in cases
            .iter()
            .filter(|c| c.name == "vip" || c.name == "non_vip_pass")
        {
            let tx = c.expect != "xdp_pass_not_service";
            let pick = |d: f64, g: f64| if tx { d } else { g };
            let (mut n, mut v, mut b) = (vec![], vec![], vec![]);
            for rep in 0..reps {
                let mut order = [0, 1, 2];
                order.rotate_left(rep % 3);
                for which in order {
                    let fd = [dpv.xdp.as_fd(), vfd, c.base][which];
                    let (d, g) = bench.live(fd, c.gen, c.frame, frames)?;
                    [&mut n, &mut v, &mut b][which].push(pick(d, g));
                }
            }
            let mut pn = Vec::new();
            let mut pv = Vec::new();
            for _ in 0..4 {
                let want = if tx { XDP_TX } else { XDP_PASS };
                pn.extend(per_run_ns(
                    dpv.xdp.as_fd(),
                    c.frame,
                    &xdp_ctx(64, gen_if),
                    runs / 4,
                    want,
                )?);
                pv.extend(per_run_ns(
                    vfd,
                    c.frame,
                    &xdp_ctx(64, gen_if),
                    runs / 4,
                    want,
                )?);
            }
            eprintln!(
                "{}: nilb {:.3} Mpps ({:.0} ns/run), variant {:.3} Mpps ({:.0} ns/run), {} {:.3} Mpps; ratios to baseline {:.3} -> {:.3}",
                c.name,
                median(&n),
                median(&pn),
                median(&v),
                median(&pv),
                c.base_name,
                median(&b),
                median(&n) / median(&b),
                median(&v) / median(&b)
            );
        }
        drop(vobj);
        dpv.dp.unpin()?;
        return Ok(());
    }

    // --only CASE: run only nilb on that case (for profiling with perf).
    let only = arg("--only", "");
    if !only.is_empty() {
        let c = cases
            .iter()
            .find(|c| c.name == only)
            .with_context(|| format!("no case {only}"))?;
        let target = if arg("--baseline", "0") == "1" {
            c.base
        } else {
            c.nilb.xdp.as_fd()
        };
        let want = if c.expect == "xdp_pass_not_service" {
            XDP_PASS
        } else {
            XDP_TX
        };
        for _ in 0..reps {
            if live {
                let (d, g) = bench.live(target, c.gen, c.frame, frames)?;
                eprintln!("{only}: {d:.3} Mpps delivered, {g:.3} Mpps generated");
            } else {
                let side = Side {
                    name: c.name,
                    fd: target,
                    gen: c.gen,
                    frame: c.frame,
                };
                let ns = bench.repeat(0, &[(&side, want)], frames)?[0];
                eprintln!("{only}: {ns:.2} ns per packet, driver included (repeat mode)");
            }
        }
        return Ok(());
    }

    // Warm-up (page pools, neighbour entries, caches) and path check.
    let warm = |fd: BorrowedFd<'_>, gen: &[u8], frame: &[u8], want: u32| -> Result<String> {
        if live {
            let (d, g) = bench.live(fd, gen, frame, 200_000)?;
            Ok(format!("{d:.3} Mpps delivered, {g:.3} generated"))
        } else {
            let side = Side {
                name: "warm-up",
                fd,
                gen,
                frame,
            };
            let ns = bench.repeat(0, &[(&side, want)], 200_000)?[0];
            Ok(format!("{ns:.1} ns per packet (repeat mode)"))
        }
    };
    let mut checks = String::new();
    for c in &cases {
        let want = if c.expect == "xdp_pass_not_service" {
            XDP_PASS
        } else {
            XDP_TX
        };
        let before = counters(c.nilb)?;
        let got = warm(c.nilb.xdp.as_fd(), c.gen, c.frame, want)?;
        let after = counters(c.nilb)?;
        let delta = counter_delta(&before, &after);
        eprintln!("warm-up {}: {got}; counters: {delta}", c.name);
        let idx = COUNTER_NAMES.iter().position(|n| *n == c.expect).unwrap();
        if after[idx] - before[idx] < 199_000 {
            bail!(
                "{}: nilb did not take the expected path ({} moved by {} of 200000; counters {delta})",
                c.name,
                c.expect,
                after[idx] - before[idx]
            );
        }
        let _ = write!(
            checks,
            "{}\"{}\": \"{}\"",
            if checks.is_empty() { "" } else { ", " },
            c.name,
            delta
        );
        warm(c.base, c.gen, c.frame, want)?;
    }

    // Live-frame repetitions, baseline and nilb adjacent, order alternating.
    let mut live_json = Vec::new();
    let mut results: Vec<CaseResult> = cases.iter().map(|_| CaseResult::default()).collect();
    // --pairs-only 1: only the back-to-back pairs below (e.g. many
    // repetitions of them alone); no report is written.
    let pairs_only = arg("--pairs-only", "0") == "1";
    // The cases with a target (issue 12) run TARGET_REPS times as many
    // repetitions, interleaved with the others: their per-repetition
    // ratios spread over +-10 % on this shared machine, and the median of
    // 10 moved by 0.02-0.03 between runs, as much as the distance to the
    // target (40 repetitions: about 0.01).
    const TARGET_REPS: usize = 4;
    let has_target = |c: &Case<'_>| matches!(c.name, "vip" | "vip_100_services");
    for rep in 0..if pairs_only { 0 } else { reps * TARGET_REPS } {
        for (ci, c) in cases.iter().enumerate() {
            if rep >= reps && !has_target(c) {
                continue;
            }
            let tx = c.expect != "xdp_pass_not_service";
            let r = &mut results[ci];
            if live {
                let v = round(rep, &[c.base, c.nilb.xdp.as_fd()], |fd| {
                    let (d, g) = bench.live(fd, c.gen, c.frame, frames)?;
                    // XDP_PASS frames are not counted by the peer: what was
                    // generated went up the stack.
                    Ok(if tx { d } else { g })
                })?;
                let (b, n) = (v[0], v[1]);
                r.nilb.push(n);
                r.base.push(b);
                r.ratio.push(n / b);
                eprintln!(
                    "rep {rep} {}: nilb {n:.3} Mpps, {} {b:.3} Mpps, ratio {:.3}",
                    c.name,
                    c.base_name,
                    n / b
                );
                continue;
            }
            // Repeat mode: nilb, the baseline and the driver alone.
            let want = if tx { XDP_TX } else { XDP_PASS };
            let side = |name, fd| Side {
                name,
                fd,
                gen: c.gen,
                frame: c.frame,
            };
            let (base, nilb, drv) = (
                side(c.base_name, c.base),
                side(c.name, c.nilb.xdp.as_fd()),
                side("gen_repeat alone", pass),
            );
            let v = bench.repeat(
                rep,
                &[(&base, want), (&nilb, want), (&drv, XDP_PASS)],
                frames,
            )?;
            let (b, n, d) = (v[0], v[1], v[2]);
            r.nilb.push(n);
            r.base.push(b);
            r.drv.push(d);
            r.ratio.push(b / n);
            r.ratio_net.push((b - d) / (n - d));
            eprintln!(
                "rep {rep} {}: nilb {n:.2} ns, {} {b:.2} ns, driver alone {d:.2} ns (raw, repeat mode); ratio {:.3}, net {:.3}",
                c.name,
                c.base_name,
                b / n,
                (b - d) / (n - d)
            );
        }
    }

    // Paired runs: two programs back to back in each repetition, order
    // alternating, so that the ratio of the two is not the ratio of two
    // cases measured minutes apart on a shared machine (issue 13: the IPv6
    // VIP path against the IPv4 one; issue 12: the encapsulation floor
    // against MAC swap). (name, side A, side B): ratio A / B; a side is a
    // case's nilb program, or a baseline program on a case's frames.
    /// The MAC-swap baseline on a case's generator and frame.
    fn macswap_side<'a>(fd: BorrowedFd<'a>, gen: &'a [u8], frame: &'a [u8]) -> Side<'a> {
        Side {
            name: "macswap_tx",
            fd,
            gen,
            frame,
        }
    }
    let nilb_side = |case: &str| -> Option<Side<'_>> {
        let c = cases.iter().find(|c| c.name == case)?;
        Some(Side {
            name: c.name,
            fd: c.nilb.xdp.as_fd(),
            gen: c.gen,
            frame: c.frame,
        })
    };
    let mut pairs: Vec<(&str, Side<'_>, Side<'_>)> = [
        ("ipv6_vs_ipv4", "vip_ipv6", "vip"),
        ("c6_vs_ipv4", "vip_c6", "vip"),
        ("c6_ipv6_vs_ipv4", "vip6_c6", "vip"),
    ]
    .iter()
    .filter_map(|(n, a, b)| Some((*n, nilb_side(a)?, nilb_side(b)?)))
    .collect();
    // The floor balancer (bench.bpf.c floor_lb: the least a balancer of
    // nilb's kind does) against MAC swap, and nilb against it, for 1 and
    // for 100 services.
    let floor1 = bench.prog("floor_lb1")?;
    let floor100 = bench.prog("floor_lb100")?;
    for (pair, nilb_case, floor_name, floor, gen, frame) in [
        ("vip_vs_floor", "vip", "floor_lb1", floor1, &g_vip, &vip),
        (
            "vip100_vs_floor100",
            "vip_100_services",
            "floor_lb100",
            floor100,
            &g_vip100,
            &vip100,
        ),
    ] {
        if let Some(n) = nilb_side(nilb_case) {
            pairs.push((
                pair,
                n,
                Side {
                    name: floor_name,
                    fd: floor,
                    gen,
                    frame,
                },
            ));
        }
        pairs.push((
            if floor_name == "floor_lb1" {
                "floor_vs_macswap"
            } else {
                "floor100_vs_macswap"
            },
            Side {
                name: floor_name,
                fd: floor,
                gen,
                frame,
            },
            macswap_side(macswap, gen, frame),
        ));
    }
    // The other tables: 1-byte entries, and the footprint sweep (64 to
    // 8192 buckets per service: how the floor's cost follows the bytes
    // its tables spread over).
    for (pair, prog) in [
        ("floor100_u8_vs_macswap", "floor_lb100_u8"),
        ("floor100_64_vs_macswap", "floor_lb100_64"),
        ("floor100_256_vs_macswap", "floor_lb100_256"),
        ("floor100_1024_vs_macswap", "floor_lb100_1024"),
        ("floor100_2048_vs_macswap", "floor_lb100_2048"),
        ("floor100_8192_vs_macswap", "floor_lb100_8192"),
    ] {
        pairs.push((
            pair,
            Side {
                name: prog,
                fd: bench.prog(prog)?,
                gen: &g_vip100,
                frame: &vip100,
            },
            macswap_side(macswap, &g_vip100, &vip100),
        ));
    }
    if let Some(n) = nilb_side("vip_100_services_1024") {
        pairs.push((
            "vip100_1024_vs_floor100_1024",
            n,
            Side {
                name: "floor_lb100_1024",
                fd: bench.prog("floor_lb100_1024")?,
                gen: &g_vip100,
                frame: &vip100,
            },
        ));
    }
    pairs.push((
        "encap_vs_macswap",
        Side {
            name: "encap_tx",
            fd: encap,
            gen: &g_vip,
            frame: &vip,
        },
        macswap_side(macswap, &g_vip, &vip),
    ));
    // In a pairs-only run, the two cases with targets as pairs too (the
    // same measurement as the cases' repetitions above).
    if pairs_only {
        for (pair, case) in [
            ("vip_vs_macswap", "vip"),
            ("vip100_vs_macswap", "vip_100_services"),
        ] {
            if let Some(n) = nilb_side(case) {
                let (gen, frame) = (n.gen, n.frame);
                pairs.push((pair, n, macswap_side(macswap, gen, frame)));
            }
        }
    }
    for (i, o) in floor_copies.iter().enumerate() {
        // The copy's floor reads its own .bss (source address, GUE port).
        o.maps()
            .find(|m| m.name().to_string_lossy().ends_with(".bss"))
            .context("no .bss in the copy")?
            .update(&0u32.to_ne_bytes(), &g_vip100, MapFlags::ANY)?;
        let p = o
            .progs()
            .find(|p| p.name() == "floor_lb100")
            .context("no floor_lb100 in the copy")?;
        // SAFETY: the program lives as long as floor_copies, which outlives
        // the pairs.
        let fd = unsafe { BorrowedFd::borrow_raw(p.as_fd().as_raw_fd()) };
        let name: &'static str =
            Box::leak(format!("floor100_copy{}_vs_macswap", i + 1).into_boxed_str());
        pairs.push((
            name,
            Side {
                name: "floor_lb100 (copy)",
                fd,
                gen: &g_vip100,
                frame: &vip100,
            },
            macswap_side(macswap, &g_vip100, &vip100),
        ));
    }
    // --pairs LIST: only these pairs (comma list of names).
    let pair_filter = arg("--pairs", "");
    if !pair_filter.is_empty() {
        pairs.retain(|(n, _, _)| pair_filter.split(',').any(|p| p == *n));
    }
    // Warm-up of both sides of every pair (the baselines' programs had none
    // above); every side sends what it gets (XDP_TX): a frame that did not
    // reach the peer would make a side look faster than it is.
    let sent_all = |name: &str, s: &Side<'_>, d: f64, g: f64| -> Result<()> {
        if !(0.99..=1.01).contains(&(d / g)) {
            bail!(
                "pair {name}: {} sent {:.1} % of the frames it got to the peer",
                s.name,
                d / g * 100.0
            );
        }
        Ok(())
    };
    for (name, sa, sb) in &pairs {
        for s in [sa, sb] {
            if live {
                let (d, g) = bench.live(s.fd, s.gen, s.frame, 200_000)?;
                sent_all(name, s, d, g)?;
            } else {
                bench.repeat(0, &[(s, XDP_TX)], 200_000)?;
            }
        }
    }
    // The floor pairs say how far the target cases are from the least a
    // balancer does: as many repetitions as those cases. Repetitions run
    // round-robin over the pairs, so that a slow drift of the machine
    // touches every pair alike.
    let pair_reps = |name: &str| {
        if matches!(
            name,
            "vip_vs_floor" | "floor_vs_macswap" | "vip100_vs_floor100" | "floor100_vs_macswap"
        ) || name.starts_with("floor100_copy")
        {
            reps * TARGET_REPS
        } else {
            reps
        }
    };
    // --pressure-kib N (a pairs-only aid): every pair repetition runs once
    // quiet and once while a co-runner on the other CPU reads N KiB over
    // and over, a cache line at a time (what another tenant's work does to
    // the caches the tables live in); the latter print as "<pair>
    // +pressure".
    let pressure_kib: usize = arg("--pressure-kib", "0").parse()?;
    let pressure = if pressure_kib > 0 && pairs_only {
        Some(Pressure::start(
            pressure_kib,
            arg("--pressure-cpu", "0").parse()?,
        )?)
    } else {
        None
    };
    // Per pair: ratio A / B per repetition (repeat mode: B's ns / A's ns,
    // raw and net of the driver, and the ns of A, B and the driver alone,
    // on B's frames).
    #[derive(Default)]
    struct PairResult {
        ratio: Vec<f64>,
        ratio_net: Vec<f64>,
        a: Vec<f64>,
        b: Vec<f64>,
        drv: Vec<f64>,
    }
    let mut pres: Vec<PairResult> = pairs.iter().map(|_| PairResult::default()).collect();
    for rep in 0..reps * TARGET_REPS {
        for (pi, (name, sa, sb)) in pairs.iter().enumerate() {
            if rep >= pair_reps(name) {
                continue;
            }
            for pressed in [false, true] {
                if pressed && pressure.is_none() {
                    continue;
                }
                if let Some(p) = &pressure {
                    p.set(pressed);
                }
                let label = if pressed { " +pressure" } else { "" };
                let pr = &mut pres[pi];
                if live {
                    let v = round(rep, &[sa, sb], |s| {
                        let (d, g) = bench.live(s.fd, s.gen, s.frame, frames)?;
                        sent_all(name, s, d, g)?;
                        Ok(d)
                    })?;
                    let (a, b) = (v[0], v[1]);
                    if !pressed {
                        pr.ratio.push(a / b);
                    }
                    eprintln!(
                        "pair {name}{label} rep {rep}: {} {a:.3} Mpps, {} {b:.3} Mpps, ratio {:.3}",
                        sa.name,
                        sb.name,
                        a / b
                    );
                    continue;
                }
                let drv = Side {
                    name: "gen_repeat alone",
                    fd: pass,
                    gen: sb.gen,
                    frame: sb.frame,
                };
                let v =
                    bench.repeat(rep, &[(sa, XDP_TX), (sb, XDP_TX), (&drv, XDP_PASS)], frames)?;
                let (a, b, d) = (v[0], v[1], v[2]);
                if !pressed {
                    pr.ratio.push(b / a);
                    pr.ratio_net.push((b - d) / (a - d));
                    pr.a.push(a);
                    pr.b.push(b);
                    pr.drv.push(d);
                }
                eprintln!(
                    "pair {name}{label} rep {rep}: {} {a:.2} ns, {} {b:.2} ns, driver alone {d:.2} ns (raw, repeat mode); ratio {:.3}, net {:.3}",
                    sa.name,
                    sb.name,
                    b / a,
                    (b - d) / (a - d)
                );
            }
        }
    }
    drop(pressure);
    let mut pair_json = Vec::new();
    for ((name, sa, sb), pr) in pairs.iter().zip(&pres) {
        pair_json.push(format!(
            "{{\"pair\": \"{name}\", \"a\": \"{}\", \"b\": \"{}\", \"ratio\": {}, \"ratio_median\": {:.4}{}}}",
            sa.name,
            sb.name,
            json_list(&pr.ratio),
            median(&pr.ratio),
            if live {
                String::new()
            } else {
                repeat_json(("a", &pr.a), ("b", &pr.b), &pr.drv, &pr.ratio_net)
            }
        ));
    }

    if pairs_only {
        return Ok(());
    }

    // Program cost per run (no live frames), same frames.
    let gctx = xdp_ctx(64, gen_if);
    for (ci, c) in cases.iter().enumerate() {
        let want = if c.expect != "xdp_pass_not_service" {
            XDP_TX
        } else {
            XDP_PASS
        };
        let mut n = Vec::new();
        let mut b = Vec::new();
        for round in 0..4 {
            // The whole frame (the IPv6 case's is 84 bytes).
            let cctx = xdp_ctx(c.frame.len(), gen_if);
            let nn = per_run_ns(c.nilb.xdp.as_fd(), c.frame, &cctx, runs / 4, want)?;
            let bb = per_run_ns(c.base, c.frame, &cctx, runs / 4, want)?;
            if round % 2 == 0 {
                n.extend(nn);
                b.extend(bb);
            } else {
                b.extend(bb);
                n.extend(nn);
            }
        }
        results[ci].nilb_ns = median(&n);
        results[ci].base_ns = median(&b);
    }
    for (ci, c) in cases.iter().enumerate() {
        let r = &results[ci];
        let figures = if live {
            format!(
                ", \"nilb_mpps\": {}, \"base_mpps\": {}, \"nilb_mpps_median\": {:.4}, \"base_mpps_median\": {:.4}",
                json_list(&r.nilb),
                json_list(&r.base),
                median(&r.nilb),
                median(&r.base)
            )
        } else {
            repeat_json(("nilb", &r.nilb), ("base", &r.base), &r.drv, &r.ratio_net)
        };
        live_json.push(format!(
            "{{\"case\": \"{}\", \"what\": \"{}\", \"baseline\": \"{}\", \"ratio\": {}, \"ratio_median\": {:.4}, \
             \"nilb_prog_ns\": {:.1}, \"base_prog_ns\": {:.1}{figures}}}",
            c.name,
            c.what,
            c.base_name,
            json_list(&r.ratio),
            median(&r.ratio),
            r.nilb_ns,
            r.base_ns
        ));
    }

    // ---- TC --------------------------------------------------------------
    let (cport, _socks) = established()?;
    let syn = gue_frame(gen_mac, 41000, TCP_SYN, Ipv4Addr::new(10, 99, 0, 13));
    let est = gue_frame(gen_mac, cport, TCP_ACK, Ipv4Addr::new(10, 99, 0, 13));
    let fwd = gue_frame(gen_mac, 41001, TCP_ACK, Ipv4Addr::new(10, 99, 0, 13));
    let tc_pass = bench.prog("tc_pass_only")?;
    let sctx = skb_ctx(gen_if);
    let tc_cases: [(&str, &str, &[u8], u32, &str); 3] = [
        (
            "decap_syn",
            "GUE, inner TCP SYN: decapsulate",
            &syn,
            TC_ACT_OK,
            "tc_decap_syn",
        ),
        (
            "decap_established",
            "GUE, inner segment of an established local socket: socket lookup, decapsulate",
            &est,
            TC_ACT_OK,
            "tc_decap_established",
        ),
        (
            "second_chance",
            "GUE, inner segment unknown here (listener only): forward to the second hop",
            &fwd,
            TC_ACT_REDIRECT,
            "tc_forward",
        ),
    ];
    let mut tc_json = Vec::new();
    // NAT mode on the same frames' SYN (its flow tracked after the first
    // run: each run looks the entry up and translates), and the egress
    // translation of a reply of that flow.
    let nat_syn = gue_frame(gen_mac, 41002, TCP_SYN, Ipv4Addr::new(10, 99, 0, 13));
    let nat_reply = eth(
        gen_mac,
        gen_mac,
        &ipv4(TC_NODE, LOCAL_CLIENT, 6, &tcp(8080, 41002, TCP_ACK, 10)),
    );
    let nat_pass = eth(
        gen_mac,
        gen_mac,
        &ipv4(TC_NODE, LOCAL_CLIENT, 6, &tcp(8081, 41002, TCP_ACK, 10)),
    );
    {
        let (v, _) = dpnat.dp.run_tc(&nat_syn, gen_if)?;
        if v != TC_ACT_OK {
            bail!("NAT SYN: verdict {v}");
        }
    }
    let nat_cases: [(&str, &str, &OwnedFd, &[u8], &str); 3] = [
        (
            "nat_decap_syn",
            "NAT mode: GUE, inner TCP SYN of a tracked flow: decapsulate, look the flow up, translate",
            &dpnat.tc,
            &nat_syn,
            "nat_in",
        ),
        (
            "nat_egress_reply",
            "NAT mode, egress: reply of a tracked flow: look it up, translate the source",
            &dpnat.tc_egress,
            &nat_reply,
            "nat_out",
        ),
        (
            "nat_egress_other",
            "NAT mode, egress: a packet of another port (not a NAT flow): passed",
            &dpnat.tc_egress,
            &nat_pass,
            "",
        ),
    ];
    for (name, what, prog, frame, counter) in nat_cases {
        tc_json.push(tc_case(
            &dpnat,
            prog.as_fd(),
            tc_pass,
            &sctx,
            runs,
            (name, what, frame, TC_ACT_OK, counter),
        )?);
    }
    // Kernel memory per tracked flow: nat_flows' own accounting (fdinfo
    // memlock: element memory for this no-prealloc hash) before and after
    // 10,000 more flows.
    let m0 = dpnat.dp.nat_flows_memlock()?;
    for i in 0..10_000u32 {
        let f = gue_frame(gen_mac, 0, TCP_SYN, Ipv4Addr::new(10, 99, 0, 13));
        let mut f = f;
        // distinct client addresses: 198.18.0.0/15 (inner source at 14+36+12)
        let o = 14 + 36 + 4 + 12;
        let c = 0xc612_0000u32 + i;
        f[o..o + 4].copy_from_slice(&c.to_be_bytes());
        fix_inner_ip_csum(&mut f, 14 + 36 + 4);
        let (v, _) = dpnat.dp.run_tc(&f, gen_if)?;
        if v != TC_ACT_OK {
            bail!("NAT flow {i}: verdict {v}");
        }
    }
    let m1 = dpnat.dp.nat_flows_memlock()?;
    let per_flow = (m1.saturating_sub(m0)) as f64 / 10_000.0;
    eprintln!("nat_flows: {per_flow:.1} bytes per flow (memlock {m0} -> {m1})");
    let nat_mem_json = format!(
        "{{\"bytes_per_flow\": {per_flow:.1}, \"flows_per_gib\": {:.0}}}",
        (1u64 << 30) as f64 / per_flow.max(1.0)
    );
    for (name, what, frame, want, counter) in tc_cases {
        tc_json.push(tc_case(
            &dptc,
            dptc.tc.as_fd(),
            tc_pass,
            &sctx,
            runs,
            (name, what, frame, want, counter),
        )?);
    }

    // ---- XDP receive path on a backend (before GRO) --------------------------
    // The same GUE frames through nilb_xdp_backend against an empty XDP
    // program: what decapsulating in XDP adds per packet.
    let xdp_pass = bench.prog("xdp_pass_only")?;
    let rx_cases: [(&str, &str, &[u8], &str); 3] = [
        (
            "xdp_decap_syn",
            "XDP, GUE, inner TCP SYN: decapsulate",
            &syn,
            "xdp_decap_syn",
        ),
        (
            "xdp_decap_established",
            "XDP, GUE, inner segment of an established local socket: socket lookup, decapsulate",
            &est,
            "xdp_decap_established",
        ),
        (
            "xdp_to_tc",
            "XDP, GUE, inner segment unknown here: checks and socket lookup, passed to TC untouched",
            &fwd,
            "xdp_gue_to_tc",
        ),
    ];
    // The same SYN over the IPv6 cluster network (outer IPv6 from a cluster
    // node: `cluster_nodes6`), and an IPv6 client's SYN to the IPv6 VIP in
    // it (`vips6`), on the `*_c6` cases' node.
    let syn_o6 = gue6_frame(
        gen_mac,
        4,
        &ipv4(LOCAL_CLIENT, VIP, 6, &tcp(41002, 80, TCP_SYN, 10)),
    );
    let syn6_o6 = {
        let f = vip6_frame(gen_mac, 80);
        let mut inner = f[14..].to_vec();
        inner[40 + 13] = TCP_SYN; // the TCP flags after the 40-byte IPv6 header
        gue6_frame(gen_mac, 41, &inner)
    };
    let rx6_cases: [(&str, &str, &[u8], &str); 2] = [
        (
            "xdp_decap_syn_o6",
            "XDP, GUE in outer IPv6 from a cluster node, inner TCP SYN: decapsulate",
            &syn_o6,
            "xdp_decap_syn",
        ),
        (
            "xdp_decap_syn6_o6",
            "XDP, GUE in outer IPv6 from a cluster node, inner IPv6 TCP SYN to an IPv6 VIP: decapsulate",
            &syn6_o6,
            "xdp_decap_syn",
        ),
    ];
    let rx_all = rx_cases
        .iter()
        .map(|c| (c, &dptc))
        .chain(rx6_cases.iter().map(|c| (c, &dp_c6)));
    for (&(name, what, frame, counter), dptc) in rx_all {
        let xctx = xdp_ctx(frame.len(), gen_if);
        let before = counters(dptc)?;
        let mut n = Vec::new();
        let mut b = Vec::new();
        for round in 0..4 {
            let nn = per_run_ns(dptc.xdp_backend.as_fd(), frame, &xctx, runs / 4, XDP_PASS)?;
            let bb = per_run_ns(xdp_pass, frame, &xctx, runs / 4, XDP_PASS)?;
            if round % 2 == 0 {
                n.extend(nn);
                b.extend(bb);
            } else {
                b.extend(bb);
                n.extend(nn);
            }
        }
        let after = counters(dptc)?;
        let idx = COUNTER_NAMES.iter().position(|c| *c == counter).unwrap();
        let moved = after[idx] - before[idx];
        if moved as usize != n.len() {
            bail!(
                "XDP {name}: {counter} moved by {moved}, expected {}; counters {}",
                n.len(),
                counter_delta(&before, &after)
            );
        }
        eprintln!(
            "xdp rx {name}: nilb {:.0} ns, xdp_pass_only {:.0} ns",
            median(&n),
            median(&b)
        );
        tc_json.push(format!(
            "{{\"case\": \"{name}\", \"what\": \"{what}\", \"nilb_ns\": {:.1}, \"base_ns\": {:.1}, \"frame_bytes\": {}, \"base\": \"XDP_PASS only\"}}",
            median(&n),
            median(&b),
            frame.len()
        ));
    }

    // ---- probes (single operations, repeat) --------------------------------
    let mut probe_json = Vec::new();
    bench.set_gen(&g_vip)?;
    // probe_sk_lookup runs on the inner segment of the established
    // connection the TC and XDP receive cases use (its verdict is XDP_PASS
    // only if the socket is found); the others on the VIP frame.
    let inner = eth(
        gen_mac,
        [0x02, 0, 0, 0, 0, 0x01],
        &ipv4(LOCAL_CLIENT, VIP, 6, &tcp(cport, 80, TCP_ACK, 10)),
    );
    for (name, what, frame) in [
        ("xdp_pass_only", "empty program (test-run floor)", &vip),
        ("probe_counter", "one per-CPU counter increment", &vip),
        ("probe_hash_lookup", "one HASH lookup, 8-byte key", &vip),
        (
            "probe_hash",
            "nilb_flow_hash (MurmurHash3 over the 5-tuple)",
            &vip,
        ),
        ("probe_adjust", "bpf_xdp_adjust_head -40 and +40", &vip),
        (
            "probe_fib",
            "bpf_fib_lookup of a backend (neighbour resolved)",
            &vip,
        ),
        (
            "probe_sk_lookup",
            "bpf_skc_lookup_tcp + bpf_sk_release, established socket",
            &inner,
        ),
    ] {
        let p = bench.prog(name)?;
        let mut v = Vec::new();
        for _ in 0..5 {
            let mut c = xdp_ctx(frame.len(), gen_if);
            let r = test_run(p, frame, Some(&mut c), 200_000, 0)?;
            if r.retval != XDP_PASS {
                bail!("probe {name}: verdict {}", r.retval);
            }
            v.push(r.duration_ns as f64);
        }
        probe_json.push(format!(
            "{{\"probe\": \"{name}\", \"what\": \"{what}\", \"ns\": {:.1}}}",
            median(&v)
        ));
    }
    // nilb's own paths with repeat (they leave the packet unchanged).
    for (name, fd, frame) in [("nilb_xdp_non_vip", dp1.xdp.as_fd(), &node)] {
        let mut v = Vec::new();
        for _ in 0..5 {
            let mut c = gctx.clone();
            v.push(test_run(fd, frame, Some(&mut c), 200_000, 0)?.duration_ns as f64);
        }
        probe_json.push(format!(
            "{{\"probe\": \"{name}\", \"what\": \"nilb XDP, UDP to the node address (pass)\", \"ns\": {:.1}}}",
            median(&v)
        ));
    }

    let mut progs = Vec::new();
    for (name, id) in [
        ("nilb_xdp_balancer", dp1.xdp_id),
        ("nilb_tc_second_chance", dp1.tc_id),
    ] {
        if let Some((x, j, v)) = prog_info(id) {
            progs.push(format!(
                "{{\"prog\": \"{name}\", \"id\": {id}, \"xlated_insns\": {x}, \"jited_bytes\": {j}, \"verified_insns\": {v}}}"
            ));
        }
    }

    let doc = format!(
        "{{\"frames_per_run\": {frames}, \"reps\": {reps}, \"runs\": {runs}, \"frame_bytes\": {},\n\
         \"xdp_method\": \"{}\", \"live_frames_refused\": {},\n\
         \"xdp_live\": [\n  {}\n],\n\"xdp_pairs\": [\n  {}\n],\n\"tc\": [\n  {}\n],\n\"nat_memory\": {},\n\"probes\": [\n  {}\n],\n\"progs\": [{}],\n\"path_checks\": {{{}}}}}\n",
        vip.len(),
        if live { "live" } else { "repeat" },
        refused.map_or("null".into(), |e| format!("\"{e}\"")),
        live_json.join(",\n  "),
        pair_json.join(",\n  "),
        tc_json.join(",\n  "),
        nat_mem_json,
        probe_json.join(",\n  "),
        progs.join(", "),
        checks
    );
    if out_path.is_empty() {
        print!("{doc}");
    } else {
        std::fs::write(&out_path, doc)?;
    }
    let _ = peer.detach(sink_if as i32, XdpFlags::DRV_MODE);
    drop((dp1, dp2, dp100, dp100s, dptc, dpnat));
    Ok(())
}
