//! Hostile-input fuzzing of both BPF programs through BPF_PROG_TEST_RUN.
//!
//! Every frame (fully random, structured random, mutations of valid seeds,
//! and systematic sweeps: truncation at every offset, every IHL, version,
//! protocol and GUE byte value, hop lists of 0-31 entries...) is run through
//! the real XDP balancer or TC program, and the result is checked against a
//! reference parser written here from the documented rules (README "GUE wire
//! format", the comments of `bpf/nilb.bpf.c` are not consulted by it):
//!
//! - hard invariants: the verdict is one the program may return; nothing the
//!   reference parser calls malformed is encapsulated (XDP), decapsulated or
//!   forwarded (TC); TC passes a frame untouched only when it is not GUE for
//!   this node; every run moves exactly one verdict counter by one (XDP may
//!   also move `xdp_icmp_forwarded`, only with a verdict that sent it); an
//!   ICMP "fragmentation needed" the balancer sends back is well-formed,
//!   from the VIP, quotes the packet, and answers only a DF packet that does
//!   not fit the wire with GUE;
//! - the XDP receive path (TC runs): every TC frame also goes through the
//!   backends' XDP program first, which must pass it, untouched or
//!   decapsulated exactly as TC alone does it, and only what TC alone
//!   accepts as a SYN or an established flow's (all of those); what it
//!   decapsulates, TC then passes untouched; one XDP counter per run;
//! - the model: the exact verdict, counters and output bytes the reference
//!   predicts (encapsulation byte for byte, decapsulation, second-chance
//!   rewrite), and at the end of each worker the per-service and per-backend
//!   statistics summed over the run.
//!
//! IPv6 (`model6.rs`, `seeds6.rs`, `generate6.rs`): the configuration has
//! IPv6 services over the same IPv4 backends; client frames to the IPv6
//! VIPs (extension header chains, fragments, ICMPv6 errors and echo
//! requests, sizes around the MTU) for XDP, GUE protocol 41 frames for TC,
//! all under the same invariants (the documented extras: `tc_decap_ipv6`
//! and `tc_forward_ipv6` besides TC's verdict counter) and the same exact
//! model. An IPv6 packet: EtherType 0x86DD (XDP), GUE protocol 41 (TC).
//!
//! Environment:
//!   NILB_FUZZ_PACKETS  packets per program (default 20000; sweeps included)
//!   NILB_FUZZ_IPV6_PACKETS  IPv6 packets among them, at least (default half
//!                      of NILB_FUZZ_PACKETS; IPv6 sweeps thinned to half of
//!                      it when they are more); the filter test runs the
//!                      rest (at least 20000)
//!   NILB_FUZZ_CLUSTER6_PACKETS  packets per program over the IPv6 cluster
//!                      network besides (default half of the default
//!                      NILB_FUZZ_PACKETS)
//!   NILB_FUZZ_THREADS  workers per program, each in its own netns (default 1)
//!   NILB_FUZZ_SEED     base seed (default fixed, so plain `cargo test` is
//!                      deterministic); printed with every failure
//!   NILB_FUZZ_FRAME    hex of one Ethernet frame: run only it (with
//!   NILB_FUZZ_PROGRAM  xdp | tc) and print what happened and what the model says
//!   NILB_FUZZ_CLUSTER  6: replay on the IPv6 cluster network's data plane
//!
//! IPv6 cluster network (`cluster.rs`): the same namespace holds data
//! planes loaded with the same services over IPv6 cluster addresses (the
//! node, balancer and DIPs are `cluster::host6` of the IPv4 ones), run
//! after the IPv4 cluster's share: client frames of both families for the
//! `_c6` balancer (outer IPv6 GUE: 16-byte hops, flow label of the hash,
//! UDP checksum 0), outer-IPv6 GUE for the node for TC and the backends'
//! XDP program (every IPv4-cluster seed and generated frame turned into
//! its outer-IPv6 twin by `cluster::to_o6`, then outer-IPv6 mutations,
//! seeds and sweeps), all under the same invariants and model, which take
//! the family from the frame and the world (`Fam`).
//!
//! Needs root (BPF, network namespaces); skipped (one line on stderr) without
//! it. `scripts/fuzz.sh` drives the long run.
//!
//! Edge filters (`filters.rs`): a data plane with filters and one without
//! run the same XDP frames (and variants with chosen sources): a denied
//! source is dropped and counted to its rule, never sent to a backend;
//! anything else comes out exactly as without filters.
//!
//! Files: `main.rs` runs the workers, tallies and reports (and holds the
//! tests, the constants and the byte helpers every file uses); `env.rs`
//! builds a worker's namespace and data planes; `seeds.rs` (valid seeds and
//! systematic sweeps) and `generate.rs` (random frames and mutations) make
//! the packets, `seeds6.rs` and `generate6.rs` the IPv6 ones, `cluster.rs`
//! the IPv6 cluster network's (and what differs by family); `model.rs`
//! is the reference parser with the outcome it expects, `model6.rs` its
//! IPv6 part; `invariants.rs` checks one run against both.

mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod env;
mod filters;
mod generate;
mod generate6;
mod invariants;
mod model;
mod model6;
mod seeds;
mod seeds6;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use cluster::*;
use common::*;
use env::*;
use generate::*;
use invariants::*;
use model::*;
use nilb::dataplane::abi::COUNTER_NAMES;
use seeds::*;
use seeds6::*;

/// MTU of nt0 and nt2.
pub const MTU: usize = 1500;

pub const VIP2: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
pub const VIP3: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 102);
/// Backend on nt0's subnet without a neighbour entry: XDP slow path.
pub const B14: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 14);
/// Backend behind a second interface (nt2): XDP_REDIRECT.
pub const R5: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);
/// Backend without a route.
pub const FAR: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 5);
/// Not in the cluster.
pub const OUTSIDER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);
/// Not a VIP.
pub const OTHER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 50);
pub const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
pub const MAC_R5: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x05];
/// IPv6 VIPs (web6, dns6; empty6, wild6), a client, a router sending
/// ICMPv6 errors, an address that is no VIP.
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x100);
pub const VIP6B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x101);
pub const CLIENT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
pub const ROUTER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0xff, 0, 0, 0, 0, 1);
pub const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x200);
/// Sockets in every worker's namespace: an established TCP connection
/// NODE:EST_PORT -> VIP:80 (listener on VIP:80), a wildcard listener on 8080,
/// an unconnected UDP socket on VIP:53 and a UDP socket VIP:5353 connected to
/// B12:4444.
pub const EST_PORT: u16 = 45678;
pub const UDP_CONN_PORT: u16 = 5353;
pub const UDP_PEER_PORT: u16 = 4444;

const DEFAULT_SEED: u64 = 0x6e69_6c62_0f22;
const DEFAULT_PACKETS: u64 = 20_000;
/// Violations printed in full (all are counted).
const SHOWN: usize = 10;

pub const IPPROTO_ICMP: u8 = 1;
pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

// ---- byte helpers ---------------------------------------------------------------------

pub fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

pub fn addr(b: &[u8], o: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3])
}

pub fn short_hex(b: &[u8]) -> String {
    if b.len() <= 256 {
        hex(b)
    } else {
        format!("{}\n... ({} bytes)", hex(&b[..256]), b.len())
    }
}

fn one_line_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn from_hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Prog {
    Xdp,
    Tc,
}

// ---- tallies ------------------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    packets: u64,
    /// IPv6 packets among them (`is_ipv6`).
    ipv6: u64,
    /// Packets run over the IPv6 cluster network among them.
    cluster6: u64,
    /// IPv6 seeds and sweeps run, and how many there are.
    sweeps6: (u64, u64),
    verdicts: BTreeMap<u32, u64>,
    counters: BTreeMap<&'static str, u64>,
    /// Reference classes seen (coverage).
    classes: BTreeMap<String, u64>,
    /// Tolerated deviations: count and the first frame (hex).
    observations: BTreeMap<&'static str, (u64, String)>,
    violations: u64,
    /// TC frames the kernel's test run refuses (see `kernel_refuses_tc`).
    refused: u64,
    shown: Vec<String>,
    /// Expected statistics: backend slot -> (packets, bytes, syns); service
    /// index -> [xdp_drops, tc_decap, tc_forward, tc_drops], per data plane.
    backend: HashMap<u32, (u64, u64, u64)>,
    service: [HashMap<u32, [u64; 4]>; 3],
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.packets += o.packets;
        self.ipv6 += o.ipv6;
        self.cluster6 += o.cluster6;
        self.sweeps6.0 += o.sweeps6.0;
        self.sweeps6.1 += o.sweeps6.1;
        for (k, v) in o.verdicts {
            *self.verdicts.entry(k).or_default() += v;
        }
        for (k, v) in o.counters {
            *self.counters.entry(k).or_default() += v;
        }
        for (k, v) in o.classes {
            *self.classes.entry(k).or_default() += v;
        }
        for (k, (n, example)) in o.observations {
            self.observations.entry(k).or_insert((0, example)).0 += n;
        }
        self.violations += o.violations;
        self.refused += o.refused;
        for s in o.shown {
            if self.shown.len() < SHOWN {
                self.shown.push(s);
            }
        }
    }

    fn violation(&mut self, text: String) {
        self.violations += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(text);
        }
    }
}

fn verdict_name(prog: Prog, v: u32) -> String {
    match (prog, v) {
        (Prog::Xdp, 0) => "ABORTED".into(),
        (Prog::Xdp, 1) => "DROP".into(),
        (Prog::Xdp, 2) => "PASS".into(),
        (Prog::Xdp, 3) => "TX".into(),
        (Prog::Xdp, 4) => "REDIRECT".into(),
        (Prog::Tc, 0) => "OK".into(),
        (Prog::Tc, 2) => "SHOT".into(),
        (Prog::Tc, 7) => "REDIRECT".into(),
        (_, v) => format!("verdict {v}"),
    }
}

struct Ctx {
    prog: Prog,
    seed: u64,
    worker: usize,
    /// The cluster network's family of the data planes run.
    fam: Fam,
}

/// Counter deltas of data plane `which` since the last snapshot (which
/// becomes this one).
fn deltas_since(p: &Planes, l: &Loaded, which: usize) -> Vec<(&'static str, u64)> {
    let mut last = p.last[which].borrow_mut();
    let now = l.dp.counters().expect("reading counters");
    let d: Vec<(&'static str, u64)> = COUNTER_NAMES
        .iter()
        .zip(last.iter().zip(&now))
        .filter(|(_, (b, a))| a != b)
        .map(|(n, (b, a))| (*n, a.wrapping_sub(*b)))
        .collect();
    *last = now;
    d
}

/// Counter deltas of one run.
type Deltas = Vec<(&'static str, u64)>;

/// What the backends' XDP program did with a TC frame, run before TC.
struct XdpFirst {
    verdict: u32,
    out: Vec<u8>,
    deltas: Deltas,
    /// The TC run on XDP's output, when XDP changed the frame.
    tc_after: Option<(u32, Vec<u8>, Deltas)>,
}

/// Run `frame` through `nilb_xdp_backend` (and TC on what it decapsulated).
/// Err: the test run failed (frames shorter than Ethernet: refused).
fn xdp_first(p: &Planes, l: &Loaded, which: usize, frame: &[u8]) -> Result<XdpFirst, String> {
    let (verdict, out) =
        l.dp.run_xdp_backend(frame, p.ifindex)
            .map_err(|e| format!("{e:#}"))?;
    let deltas = deltas_since(p, l, which);
    let tc_after = if out != frame {
        let r =
            l.dp.run_tc(&out, p.ifindex)
                .map_err(|e| format!("TC after XDP: {e:#}"))?;
        Some((r.0, r.1, deltas_since(p, l, which)))
    } else {
        None
    };
    Ok(XdpFirst {
        verdict,
        out,
        deltas,
        tc_after,
    })
}

/// The XDP receive path against TC alone on the same frame (TC's verdict,
/// output and counters): the differential invariants of the module's
/// documentation. Returns the problems.
fn check_xdp_first(
    w: &World,
    frame: &[u8],
    x: &XdpFirst,
    verdict: u32,
    out: &[u8],
    deltas: &[(&'static str, u64)],
) -> Vec<String> {
    let mut bad = Vec::new();
    if x.verdict != XDP_PASS {
        bad.push(format!("backend XDP verdict {} (not PASS)", x.verdict));
    }
    // (Inner IPv6 too: TC counts tc_decap_ipv6 besides.)
    let tc_accepts = match deltas {
        [("tc_decap_syn", 1)] | [("tc_decap_syn", 1), ("tc_decap_ipv6", 1)] => {
            Some("xdp_decap_syn")
        }
        [("tc_decap_established", 1)] | [("tc_decap_established", 1), ("tc_decap_ipv6", 1)] => {
            Some("xdp_decap_established")
        }
        _ => None,
    };
    // (The node's IPv4 address is 0.0.0.0 in the data plane of an IPv6
    // cluster network; outer IPv6 is looked at only there.)
    let gue_for_node = (frame.len() >= 14 + 28
        && be16(frame, 12) == 0x0800
        && frame[14 + 9] == IPPROTO_UDP
        && (frame[14] & 0x0f) >= 5
        && addr(frame, 14 + 16) == w.node4
        && frame.len() >= 14 + (frame[14] as usize & 0x0f) * 4 + 8
        && be16(frame, 14 + (frame[14] as usize & 0x0f) * 4 + 2) == GUE_PORT)
        || (w.fam == Fam::V6
            && frame.len() >= 14 + 48
            && be16(frame, 12) == 0x86dd
            && frame[14 + 6] == IPPROTO_UDP
            && IpAddr::V6(addr16(frame, 14 + 24)) == w.node
            && be16(frame, 14 + 42) == GUE_PORT);
    match &x.tc_after {
        Some((tv, tout, tdeltas)) => {
            if tc_accepts.map(|c| vec![(c, 1)]) != Some(x.deltas.clone()) {
                bad.push(format!(
                    "XDP decapsulated ({:?}) what TC alone does not accept as SYN or established ({deltas:?})",
                    x.deltas
                ));
            }
            if verdict != TC_ACT_OK || x.out != out {
                bad.push("XDP's decapsulation differs from TC's".into());
            }
            if *tv != TC_ACT_OK || tout != &x.out || tdeltas != &vec![("tc_pass_other", 1)] {
                bad.push(format!(
                    "TC after XDP's decapsulation: verdict {tv}, counters {tdeltas:?}, frame changed {}",
                    tout != &x.out
                ));
            }
        }
        None => {
            if tc_accepts.is_some() {
                bad.push(format!(
                    "XDP left to TC a frame TC accepts at once ({deltas:?}): not decapsulated before GRO"
                ));
            }
            let want = if gue_for_node {
                "xdp_gue_to_tc"
            } else {
                "xdp_backend_pass"
            };
            if x.deltas != vec![(want, 1)] {
                bad.push(format!(
                    "backend XDP counters {:?}, expected {want} (GUE for this node: {gue_for_node})",
                    x.deltas
                ));
            }
        }
    }
    bad
}

/// Run one frame on the data planes `env` (one cluster network's), check
/// it, record it.
fn run_one(env: &Planes, ctx: &Ctx, t: &mut Tally, index: u64, origin: &str, frame: &[u8]) {
    // TC takes turns with the data planes of unknown_flow drop, local, rst.
    let which = if ctx.prog == Prog::Tc {
        (index % 3) as usize
    } else {
        0
    };
    let (l, w) = match which {
        1 => (&env.b, &env.wb),
        2 => (&env.c, &env.wc),
        _ => (&env.a, &env.wa),
    };
    // The XDP receive path first (TC frames), on the same data plane.
    let first = match ctx.prog {
        Prog::Tc if frame.len() >= 14 => Some(xdp_first(env, l, which, frame)),
        _ => None,
    };
    // `Loaded::counted` reads every counter before and after the run; here
    // the snapshot after one run is the one before the next (the data plane
    // is this worker's alone), which halves the map reads of a run.
    let r = match ctx.prog {
        Prog::Xdp => l.dp.run_xdp(frame, env.ifindex),
        Prog::Tc => l.dp.run_tc(frame, env.ifindex),
    };
    let deltas = deltas_since(env, l, which);
    let (verdict, out) = match r {
        Ok(x) => x,
        // BPF_PROG_TEST_RUN of an skb refuses IPv4 frames too short for an
        // IPv4 header and IPv6 frames too short for an IPv6 header (EINVAL):
        // the kernel cannot run them, the verifier-checked bounds cover them.
        Err(_) if ctx.prog == Prog::Tc && kernel_refuses_tc(frame) => {
            t.refused += 1;
            return;
        }
        Err(e) => {
            t.packets += 1;
            t.ipv6 += is_ipv6(ctx.prog, frame) as u64;
            t.violation(format!(
                "{:?} seed {:#x} worker {} packet {index} ({origin}): test run failed: {e:#}\nframe ({} bytes):\n{}",
                ctx.prog, ctx.seed, ctx.worker, frame.len(), short_hex(frame)
            ));
            return;
        }
    };
    t.packets += 1;
    t.ipv6 += is_ipv6(ctx.prog, frame) as u64;
    *t.verdicts.entry(verdict).or_default() += 1;
    for (n, v) in &deltas {
        *t.counters.entry(n).or_default() += v;
    }
    let Checked {
        mut bad,
        want,
        class,
        label,
        observations,
    } = check(ctx.prog, w, frame, verdict, &out, &deltas);
    match &first {
        Some(Ok(x)) => {
            bad.extend(check_xdp_first(w, frame, x, verdict, &out, &deltas));
            for (n, v) in &x.deltas {
                *t.counters.entry(n).or_default() += v;
            }
            if x.tc_after.is_some() {
                // XDP's decapsulation counts for the service like TC's.
                if let Stat::TcDecap(Some(i)) = want.stat {
                    t.service[which].entry(i).or_default()[1] += 1;
                }
            }
        }
        Some(Err(e)) => bad.push(format!("backend XDP test run failed: {e}")),
        None => {}
    }
    *t.classes.entry(label).or_default() += 1;
    for name in observations {
        let e = t
            .observations
            .entry(name)
            .or_insert_with(|| (0, one_line_hex(frame)));
        e.0 += 1;
    }
    match want.stat {
        Stat::None => {}
        Stat::XdpBackend { slot, bytes, syn } => {
            let e = t.backend.entry(slot).or_default();
            e.0 += 1;
            e.1 += bytes;
            e.2 += syn as u64;
        }
        Stat::XdpLocalDirect {
            slot,
            bytes,
            syn,
            service,
        } => {
            let e = t.backend.entry(slot).or_default();
            e.0 += 1;
            e.1 += bytes;
            e.2 += syn as u64;
            t.service[which].entry(service).or_default()[1] += 1;
        }
        Stat::XdpServiceDrop(i) => t.service[which].entry(i).or_default()[0] += 1,
        Stat::TcDecap(Some(i)) => t.service[which].entry(i).or_default()[1] += 1,
        Stat::TcForward(Some(i)) => t.service[which].entry(i).or_default()[2] += 1,
        Stat::TcDrop(Some(i)) => t.service[which].entry(i).or_default()[3] += 1,
        Stat::TcDecap(None) | Stat::TcForward(None) | Stat::TcDrop(None) => {}
    }
    if !bad.is_empty() {
        t.violation(format!(
            "{:?} seed {:#x} worker {} packet {index} ({origin}{}{}): {}\n  reference: {class}\n  frame ({} bytes): {}\n{}\n  verdict {} counters {:?}\n  output ({} bytes):\n{}",
            ctx.prog,
            ctx.seed,
            ctx.worker,
            if ctx.fam == Fam::V6 {
                ", IPv6 cluster network (NILB_FUZZ_CLUSTER=6 to replay)"
            } else {
                ""
            },
            match (ctx.prog, which) {
                (Prog::Xdp, _) => "",
                (_, 0) => ", unknown_flow: drop",
                (_, 1) => ", unknown_flow: local",
                _ => ", unknown_flow: rst",
            },
            bad.join("\n    "),
            frame.len(),
            one_line_hex(frame),
            short_hex(frame),
            verdict_name(ctx.prog, verdict),
            deltas,
            out.len(),
            short_hex(&out),
        ));
    }
}

/// An IPv6 packet for `prog`: EtherType 0x86DD for XDP; for TC, IPv4/UDP
/// or IPv6/UDP whose GUE header says protocol 41.
pub fn is_ipv6(prog: Prog, f: &[u8]) -> bool {
    match prog {
        Prog::Xdp => f.len() >= 14 && be16(f, 12) == 0x86dd,
        Prog::Tc if f.len() >= 14 && be16(f, 12) == 0x86dd => {
            f.len() > 14 + 49 && f[14 + 6] == IPPROTO_UDP && f[14 + 49] == 41
        }
        Prog::Tc => {
            let ihl = f.get(14).map(|b| (b & 15) as usize * 4).unwrap_or(0);
            f.len() > 14 + ihl + 9
                && ihl >= 20
                && be16(f, 12) == 0x0800
                && f[23] == IPPROTO_UDP
                && f[14 + ihl + 9] == 41
        }
    }
}

/// Frames `BPF_PROG_TEST_RUN` of a TC program rejects with EINVAL.
fn kernel_refuses_tc(f: &[u8]) -> bool {
    match be16(f, 12) {
        0x0800 => f.len() < 14 + 20,
        0x86dd => f.len() < 14 + 40,
        _ => false,
    }
}

/// Compare the statistics maps with what the model expected over the run.
fn check_stats(env: &Planes, ctx: &Ctx, t: &mut Tally) {
    let mut problems = Vec::new();
    if ctx.prog == Prog::Xdp {
        let slots: HashSet<u32> = env
            .wa
            .services
            .values()
            .flat_map(|s| s.slots.values().copied())
            .collect();
        for slot in slots {
            let got = env.a.dp.backend_stats(slot).unwrap();
            let want = t.backend.get(&slot).copied().unwrap_or_default();
            if (got.packets, got.bytes, got.syns) != want {
                problems.push(format!(
                    "backend slot {slot}: got (packets, bytes, syns) {:?}, expected {want:?}",
                    (got.packets, got.bytes, got.syns)
                ));
            }
        }
    }
    for (which, (l, w)) in [(&env.a, &env.wa), (&env.b, &env.wb), (&env.c, &env.wc)]
        .into_iter()
        .enumerate()
    {
        if ctx.prog == Prog::Xdp && which > 0 {
            continue;
        }
        for (key, svc) in &w.services {
            let got = l.dp.service_stats(svc.index).unwrap();
            let got = [got.xdp_drops, got.tc_decap, got.tc_forward, got.tc_drops];
            let want = t.service[which]
                .get(&svc.index)
                .copied()
                .unwrap_or_default();
            if got != want {
                problems.push(format!(
                    "service {key:?} (plane {which}): got [xdp_drops, tc_decap, tc_forward, tc_drops] {got:?}, expected {want:?}"
                ));
            }
        }
    }
    for p in problems {
        t.violation(format!(
            "{:?} seed {:#x} worker {} ({:?} cluster network): statistics: {p}",
            ctx.prog, ctx.seed, ctx.worker, ctx.fam
        ));
    }
}

// ---- driver -----------------------------------------------------------------------------------------

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim().replace('_', "");
            if let Some(h) = v.strip_prefix("0x") {
                u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("{name}={v}"))
            } else {
                v.parse().unwrap_or_else(|_| panic!("{name}={v}"))
            }
        }
        Err(_) => default,
    }
}

/// One worker: `share` packets, of them at least `share6` IPv6, over the
/// IPv4 cluster network, then `share_c6` over the IPv6 one (`worker_c6`);
/// the tallies of each.
fn worker(prog: Prog, seed: u64, w: usize, shares: [u64; 3]) -> (Tally, Tally) {
    let [share, share6, share_c6] = shares;
    let env = setup();
    let ctx = Ctx {
        prog,
        seed,
        worker: w,
        fam: Fam::V4,
    };
    let mut t = Tally::default();
    let mac = env.wa.nt0_mac;
    let seeds = match prog {
        // GUE for this node too: the balancer's XDP receive path.
        Prog::Xdp => xdp_seeds(mac).into_iter().chain(tc_seeds(mac)).collect(),
        Prog::Tc => tc_seeds(mac),
    };
    let seeds6: Vec<(String, Vec<u8>)> = match prog {
        Prog::Xdp => xdp_seeds6(mac).into_iter().chain(tc_seeds6(mac)).collect(),
        Prog::Tc => tc_seeds6(mac),
    };
    let mut index = 0u64;
    if w == 0 {
        // Seeds as they are, then the sweeps.
        let sweeps = match prog {
            Prog::Xdp => xdp_sweeps(&seeds),
            Prog::Tc => tc_sweeps(mac, &seeds),
        };
        for (name, f) in seeds.iter().chain(sweeps.iter()) {
            run_one(&env, &ctx, &mut t, index, name, f);
            index += 1;
        }
        // The IPv6 ones, every k-th when they are more than half of the
        // IPv6 share (short runs).
        let sweeps6 = match prog {
            Prog::Xdp => xdp_sweeps6(mac, &seeds6),
            Prog::Tc => tc_sweeps6(mac, &seeds6),
        };
        let all: Vec<&(String, Vec<u8>)> = seeds6.iter().chain(sweeps6.iter()).collect();
        let k = (all.len() as u64).div_ceil((share6 / 2).max(1)).max(1) as usize;
        t.sweeps6.1 = all.len() as u64;
        for (name, f) in all.into_iter().step_by(k) {
            run_one(&env, &ctx, &mut t, index, name, f);
            t.sweeps6.0 += 1;
            index += 1;
        }
    }
    let salt = match prog {
        Prog::Xdp => 0x1111_0000,
        Prog::Tc => 0x2222_0000,
    };
    let mut g = Gen::new(seed ^ salt ^ (w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    // IPv4 (and whatever the IPv4 generator makes) up to the share without
    // the IPv6 one, then IPv6 until there are share6 IPv6 packets.
    while index < share.saturating_sub(share6) {
        let (origin, f) = match prog {
            Prog::Xdp => g.xdp_frame(&seeds),
            Prog::Tc => g.tc_frame(&seeds),
        };
        run_one(&env, &ctx, &mut t, index, &origin, &f);
        index += 1;
    }
    while t.ipv6 < share6 {
        let (origin, f) = match prog {
            Prog::Xdp => g.xdp_frame6(&seeds6),
            Prog::Tc => g.tc_frame6(&seeds6),
        };
        run_one(&env, &ctx, &mut t, index, &origin, &f);
        index += 1;
    }
    check_stats(&env, &ctx, &mut t);
    let t6 = worker_c6(&env, prog, seed, w, share_c6);
    (t, t6)
}

/// `share` packets over the IPv6 cluster network (`env.p6`): client
/// frames of both families to the VIPs for XDP, and outer-IPv6 GUE
/// (inner IPv4 and IPv6) for TC and the backends' XDP program (and the
/// balancer's receive path). Worker 0 runs the seeds and sweeps first,
/// every k-th when they are more than half of the share.
fn worker_c6(env: &Env, prog: Prog, seed: u64, w: usize, share: u64) -> Tally {
    let ctx = Ctx {
        prog,
        seed,
        worker: w,
        fam: Fam::V6,
    };
    let p = &env.p6;
    let mut t = Tally::default();
    if share == 0 {
        return t;
    }
    let mac = p.wa.nt0_mac;
    let (tc4, tc6) = (tc_seeds(mac), tc_seeds6(mac));
    let mut gue: Vec<(String, Vec<u8>)> = tc4
        .iter()
        .chain(&tc6)
        .map(|(n, f)| (format!("o6 {n}"), to_o6(f)))
        .collect();
    gue.extend(tc_seeds_o6(mac));
    // XDP: client frames as they are (IPv4, IPv6), GUE for this node among
    // the IPv6 ones (mutate6 walks its outer header).
    let (seeds4, seeds6): (Vec<_>, Vec<_>) = match prog {
        Prog::Xdp => (
            xdp_seeds(mac),
            xdp_seeds6(mac).into_iter().chain(gue.clone()).collect(),
        ),
        Prog::Tc => (tc4.clone(), tc6.clone()),
    };
    let mut index = 0u64;
    let mut run = |t: &mut Tally, origin: &str, f: &[u8]| {
        run_one(p, &ctx, t, index, origin, f);
        index += 1;
    };
    if w == 0 {
        let sweeps = tc_sweeps_o6(&tc_seeds_o6(mac));
        let all: Vec<&(String, Vec<u8>)> = match prog {
            Prog::Xdp => seeds4.iter().chain(&seeds6).chain(&sweeps).collect(),
            Prog::Tc => gue.iter().chain(&sweeps).collect(),
        };
        let k = (all.len() as u64).div_ceil((share / 2).max(1)).max(1) as usize;
        t.sweeps6.1 = all.len() as u64;
        for (name, f) in all.into_iter().step_by(k) {
            run(&mut t, name, f);
            t.sweeps6.0 += 1;
        }
    }
    let salt = match prog {
        Prog::Xdp => 0x6666_1111_0000,
        Prog::Tc => 0x6666_2222_0000,
    };
    let mut g = Gen::new(seed ^ salt ^ (w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    while t.packets + t.refused < share {
        let (origin, f) = match (prog, g.below(20)) {
            (Prog::Xdp, 0..=7) => g.xdp_frame(&seeds4),
            (Prog::Xdp, 8..=15) => g.xdp_frame6(&seeds6),
            (Prog::Xdp, 16 | 17) => {
                let f = g.tc_frame(&seeds4);
                g.o6(f)
            }
            (Prog::Xdp, _) => {
                let f = g.tc_frame6(&tc6);
                g.o6(f)
            }
            (Prog::Tc, 0..=8) => {
                let f = g.tc_frame(&seeds4);
                g.o6(f)
            }
            (Prog::Tc, 9..=15) => {
                let f = g.tc_frame6(&seeds6);
                g.o6(f)
            }
            (Prog::Tc, _) => {
                let (name, s) = &gue[g.below(gue.len())];
                let mut f = s.clone();
                for _ in 0..1 + g.below(4) {
                    g.mutate_o6(&mut f);
                }
                g.clamp(&mut f);
                (format!("mutated seed {name}"), f)
            }
        };
        run(&mut t, &origin, &f);
    }
    check_stats(p, &ctx, &mut t);
    t.cluster6 = t.packets;
    t
}

fn fuzz(prog: Prog) {
    for n in [
        "xdp_pass_non_ip",
        "xdp_pass_not_service",
        "xdp_encap_tx",
        "xdp_encap_redirect",
        "xdp_encap_local",
        "xdp_encap_slow_path",
        "xdp_icmp_forwarded",
        "xdp_drop_fragment",
        "xdp_drop_no_backend",
        "xdp_drop_malformed",
        "xdp_drop_no_route",
        "xdp_drop_too_big",
        "xdp_icmp_too_big",
        "xdp_drop_too_big_limited",
        "xdp_drop_ipv6_ext",
        "xdp_icmp6_too_big",
        "tc_decap_ipv6",
        "tc_forward_ipv6",
        "tc_pass_other",
        "tc_decap_syn",
        "tc_decap_established",
        "tc_decap_udp",
        "tc_decap_icmp",
        "tc_decap_loop_guard",
        "tc_decap_unknown_local",
        "tc_forward",
        "tc_drop_unknown_flow",
        "tc_drop_not_cluster",
        "tc_drop_self_unmarked",
        "tc_drop_malformed",
        "tc_drop_inner_not_vip",
        "tc_drop_unsupported",
        "tc_decap_ping",
        "tc_decap_time_wait",
        "tc_rst_sent",
        "tc_drop_rst_limited",
        "xdp_decap_syn",
        "xdp_decap_established",
        "xdp_gue_to_tc",
        "xdp_backend_pass",
    ] {
        assert!(COUNTER_NAMES.contains(&n), "counter {n} unknown to nilb");
    }
    let name = match prog {
        Prog::Xdp => "xdp",
        Prog::Tc => "tc",
    };

    if let Ok(hexframe) = std::env::var("NILB_FUZZ_FRAME") {
        let want = std::env::var("NILB_FUZZ_PROGRAM").unwrap_or_default();
        if want == name {
            replay(prog, &from_hex(&hexframe));
        }
        return;
    }

    let packets = env_u64("NILB_FUZZ_PACKETS", DEFAULT_PACKETS);
    let packets6 = env_u64("NILB_FUZZ_IPV6_PACKETS", packets / 2);
    let threads = env_u64("NILB_FUZZ_THREADS", 1).max(1) as usize;
    let packets_c6 = env_u64("NILB_FUZZ_CLUSTER6_PACKETS", DEFAULT_PACKETS / 2);
    let seed = env_u64("NILB_FUZZ_SEED", DEFAULT_SEED);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|w| {
            // Worker 0 takes the remainders.
            let shares = [packets, packets6, packets_c6].map(|n| {
                let per = n / threads as u64;
                if w == 0 {
                    n - per * (threads as u64 - 1)
                } else {
                    per
                }
            });
            std::thread::spawn(move || worker(prog, seed, w, shares))
        })
        .collect();
    let mut total = Tally::default();
    let mut total6 = Tally::default();
    for h in handles {
        let (t, t6) = h.join().expect("fuzz worker panicked");
        let mut copy = Tally {
            packets: t6.packets,
            ipv6: t6.ipv6,
            cluster6: t6.cluster6,
            verdicts: t6.verdicts.clone(),
            counters: t6.counters.clone(),
            classes: t6.classes.clone(),
            ..Tally::default()
        };
        copy.refused = t6.refused;
        total.merge(t);
        total.merge(t6);
        total6.merge(copy);
    }
    let secs = start.elapsed().as_secs_f64();

    let verdicts: Vec<String> = total
        .verdicts
        .iter()
        .map(|(v, n)| format!("{} {n}", verdict_name(prog, *v)))
        .collect();
    let counters: Vec<String> = total
        .counters
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    println!(
        "\nfuzz {name}: {} packets, of them {} IPv6 and {} over the IPv6 cluster network (IPv6 and IPv6-cluster seeds and sweeps: {} of {}), seed {seed:#x}, {threads} worker(s), {secs:.1} s ({:.1} us/packet/worker){}",
        total.packets,
        total.ipv6,
        total.cluster6,
        total.sweeps6.0,
        total.sweeps6.1,
        secs * 1e6 * threads as f64 / total.packets.max(1) as f64,
        if total.refused > 0 {
            format!(
                "; {} more refused by the kernel's test run (IPv4/IPv6 frames shorter than the IP header)",
                total.refused
            )
        } else {
            String::new()
        }
    );
    println!("fuzz {name}: verdicts: {}", verdicts.join(", "));
    println!("fuzz {name}: counters: {}", counters.join(", "));
    let classes: Vec<String> = total
        .classes
        .iter()
        .map(|(c, n)| format!("{c}: {n}"))
        .collect();
    println!("fuzz {name}: reference classes: {}", classes.join("; "));
    // The IPv6 cluster network's share on its own (included above).
    let verdicts6: Vec<String> = total6
        .verdicts
        .iter()
        .map(|(v, n)| format!("{} {n}", verdict_name(prog, *v)))
        .collect();
    let counters6: Vec<String> = total6
        .counters
        .iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect();
    println!(
        "fuzz {name} (IPv6 cluster): {} packets, {} with inner IPv6; verdicts: {}",
        total6.packets,
        total6.ipv6,
        verdicts6.join(", ")
    );
    println!(
        "fuzz {name} (IPv6 cluster): counters: {}",
        counters6.join(", ")
    );
    println!(
        "fuzz {name} (IPv6 cluster): reference classes: {}",
        total6
            .classes
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect::<Vec<_>>()
            .join("; ")
    );
    for (what, (n, example)) in &total.observations {
        println!("fuzz {name}: {what} ({n}x); first frame: {example}");
    }
    println!("fuzz {name}: violations: {}", total.violations);
    for s in &total.shown {
        println!("fuzz {name}: VIOLATION {s}\n");
    }
    assert_eq!(
        total.violations, 0,
        "{} violation(s) in {name} fuzzing (seed {seed:#x}); first ones printed above",
        total.violations
    );
}

/// NILB_FUZZ_FRAME: run one frame, print everything.
/// NILB_FUZZ_CLUSTER=6: on the IPv6 cluster network's data plane.
fn replay(prog: Prog, frame: &[u8]) {
    let all = setup();
    let env = if std::env::var("NILB_FUZZ_CLUSTER").as_deref() == Ok("6") {
        &all.p6
    } else {
        &all.p4
    };
    let (r, deltas) = env.a.counted(|| match prog {
        Prog::Xdp => env.a.dp.run_xdp(frame, env.ifindex),
        Prog::Tc => env.a.dp.run_tc(frame, env.ifindex),
    });
    let (verdict, out) = r.expect("test run");
    let Checked {
        bad,
        want,
        class,
        observations,
        ..
    } = check(prog, &env.wa, frame, verdict, &out, &deltas);
    println!(
        "replay {prog:?}: {} bytes\n{}\nreference: {class}\nexpected: verdict {} counters {:?}\ngot: verdict {} counters {deltas:?}\noutput:\n{}\ntolerated deviations and notes: {observations:#?}\nproblems: {bad:#?}",
        frame.len(),
        hex(frame),
        verdict_name(prog, want.verdict),
        want.counters,
        verdict_name(prog, verdict),
        hex(&out)
    );
}

#[test]
fn fuzz_xdp_balancer() {
    require_root!("BPF, network namespaces");
    fuzz(Prog::Xdp);
}

#[test]
fn fuzz_xdp_filters() {
    require_root!("BPF, network namespaces");
    // Filters are IPv4's: the IPv4 share of NILB_FUZZ_PACKETS, at least the
    // default (a fifth of the random frames are IPv6 nonetheless).
    let packets = env_u64("NILB_FUZZ_PACKETS", DEFAULT_PACKETS);
    let packets = packets
        .saturating_sub(env_u64("NILB_FUZZ_IPV6_PACKETS", packets / 2))
        .max(DEFAULT_PACKETS);
    let seed = env_u64("NILB_FUZZ_SEED", DEFAULT_SEED);
    let start = Instant::now();
    let t = filters::fuzz_filters(seed, packets);
    println!(
        "\nfuzz filters: {} frames (seed {seed:#x}, {:.1} s): {} dropped by a rule, {} unaffected; {} dry-run counts, {} cluster exemptions; violations {}",
        t.frames,
        start.elapsed().as_secs_f64(),
        t.dropped,
        t.unaffected,
        t.dry,
        t.exempt,
        t.violation_count
    );
    for v in &t.violations {
        println!("fuzz filters: VIOLATION {v}\n");
    }
    assert_eq!(
        t.violation_count, 0,
        "filter fuzzing found violations (printed above)"
    );
    assert!(
        t.dropped > 0 && t.unaffected > 0 && t.dry > 0 && t.exempt > 0,
        "every case must occur: dropped {}, unaffected {}, dry {}, exempt {}",
        t.dropped,
        t.unaffected,
        t.dry,
        t.exempt
    );
}

#[test]
fn fuzz_tc_second_chance() {
    require_root!("BPF, network namespaces");
    fuzz(Prog::Tc);
}

/// The checker itself: tampered results of real runs must be flagged.
#[test]
fn checker_flags_tampered_results() {
    require_root!("BPF, network namespaces");
    let env = setup();
    let mac = env.wa.nt0_mac;
    let w = &env.wa;
    // A SYN that is sent out (XDP_TX).
    let (syn, v, out, d) = (40000..41000u16)
        .find_map(|sport| {
            let syn = client_frame(
                mac,
                &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(sport, 80, SYN, b"")),
            );
            let (r, d) = env
                .a
                .counted(|| env.a.dp.run_xdp(&syn, env.ifindex).unwrap());
            (r.0 == XDP_TX).then_some((syn, r.0, r.1, d))
        })
        .expect("a flow to a neighbour");
    assert!(check(Prog::Xdp, w, &syn, v, &out, &d).bad.is_empty());
    // Wrong verdict, a flipped output byte, an extra counter, no counter.
    assert!(!check(Prog::Xdp, w, &syn, XDP_ABORTED, &out, &d)
        .bad
        .is_empty());
    let mut flipped = out.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(!check(Prog::Xdp, w, &syn, v, &flipped, &d).bad.is_empty());
    // An outer UDP checksum other than local checksum offload's, or 0.
    for c in [[out[40] ^ 1, out[41]], [0, 0]] {
        let mut wrong = out.clone();
        wrong[40..42].copy_from_slice(&c);
        let bad = check(Prog::Xdp, w, &syn, v, &wrong, &d).bad;
        assert!(bad.iter().any(|b| b.contains("UDP checksum")), "{bad:?}");
    }
    let mut two = d.clone();
    two.push(("xdp_drop_malformed", 1));
    assert!(!check(Prog::Xdp, w, &syn, v, &out, &two).bad.is_empty());
    assert!(!check(Prog::Xdp, w, &syn, v, &out, &[]).bad.is_empty());
    // An encapsulation of a fragment is flagged as a hard violation.
    let mut frag = syn.clone();
    put16(&mut frag, 20, 0x2000);
    fix_ip_csum(&mut frag, 14);
    let bad = check(Prog::Xdp, w, &frag, v, &out, &d).bad;
    assert!(
        bad.iter().any(|b| b.contains("reference rejects")),
        "{bad:?}"
    );

    // TC: a decapsulation claimed for GUE with flags set is flagged.
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let good = gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &data);
    let (r, d) = env
        .a
        .counted(|| env.a.dp.run_tc(&good, env.ifindex).unwrap());
    assert_eq!(r.0, TC_ACT_REDIRECT);
    assert!(check(Prog::Tc, w, &good, r.0, &r.1, &d).bad.is_empty());
    // The XDP receive path: a real run passes; a decapsulation of what TC
    // forwards, and a SYN left to TC, are flagged.
    let _ = deltas_since(&env, &env.a, 0); // (this test's runs so far)
    let x = xdp_first(&env, &env.a, 0, &good).unwrap();
    assert!(check_xdp_first(w, &good, &x, r.0, &r.1, &d).is_empty());
    let inner = decapsulated(&good, 40);
    let stolen = XdpFirst {
        verdict: XDP_PASS,
        out: inner.clone(),
        deltas: vec![("xdp_decap_established", 1)],
        tc_after: Some((TC_ACT_OK, inner, vec![("tc_pass_other", 1)])),
    };
    assert!(!check_xdp_first(w, &good, &stolen, r.0, &r.1, &d).is_empty());
    let syn_gue = gue_frame(
        mac,
        MAC12,
        B12,
        NODE,
        0,
        &[B13],
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40002, 80, SYN, b"")),
    );
    let left = XdpFirst {
        verdict: XDP_PASS,
        out: syn_gue.clone(),
        deltas: vec![("xdp_gue_to_tc", 1)],
        tc_after: None,
    };
    assert!(!check_xdp_first(
        w,
        &syn_gue,
        &left,
        TC_ACT_OK,
        &decapsulated(&syn_gue, 40),
        &[("tc_decap_syn", 1)]
    )
    .is_empty());

    let mut flags = good.clone();
    flags[44] = 0x80;
    let bad = check(
        Prog::Tc,
        w,
        &flags,
        TC_ACT_OK,
        &decapsulated(&flags, 40),
        &[("tc_decap_syn", 1)],
    )
    .bad;
    assert!(
        bad.iter()
            .any(|b| b.contains("decapsulated an invalid frame")),
        "{bad:?}"
    );
    // Passing GUE for this node untouched is flagged.
    let bad = check(
        Prog::Tc,
        w,
        &good,
        TC_ACT_OK,
        &good,
        &[("tc_pass_other", 1)],
    )
    .bad;
    assert!(
        bad.iter().any(|b| b.contains("passed untouched")),
        "{bad:?}"
    );
    // A forward with a wrong rewritten destination is flagged by the model.
    let mut fwd = r.1.clone();
    fwd[33] ^= 1;
    assert!(!check(Prog::Tc, w, &good, r.0, &fwd, &d).bad.is_empty());
    // A forward of GUE with a UDP checksum: valid after the rewrite; a stale
    // or zeroed one is flagged by the checksum invariant.
    let summed = with_udp_checksum(good.clone());
    let (r, d) = env
        .a
        .counted(|| env.a.dp.run_tc(&summed, env.ifindex).unwrap());
    assert_eq!(r.0, TC_ACT_REDIRECT);
    assert!(check(Prog::Tc, w, &summed, r.0, &r.1, &d).bad.is_empty());
    for stale in [&summed[40..42], &[0, 0][..]] {
        let mut fwd = r.1.clone();
        fwd[40..42].copy_from_slice(stale);
        let bad = check(Prog::Tc, w, &summed, r.0, &fwd, &d).bad;
        assert!(bad.iter().any(|b| b.contains("checksum")), "{bad:?}");
    }

    // ICMP "fragmentation needed" for a DF packet too big for the wire: the
    // real reply passes; a wrong MTU, a reply to the same packet without
    // DF, or to one that fits, is flagged as a hard violation.
    let big = |frag: u16, tot: usize| {
        let t = tcp(50001, 80, ACK, &vec![0x55; tot - 40]);
        let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, t.len(), frag, &[]);
        p.extend_from_slice(&t);
        client_frame(mac, &p)
    };
    let (df, plain) = (big(0x4000, 1480), big(0, 1480));
    let (r, d) = env
        .a
        .counted(|| env.a.dp.run_xdp(&df, env.ifindex).unwrap());
    assert_eq!((r.0, &d[..]), (XDP_TX, &[("xdp_icmp_too_big", 1)][..]));
    assert!(check(Prog::Xdp, w, &df, r.0, &r.1, &d).bad.is_empty());
    let mut wrong_mtu = r.1.clone();
    wrong_mtu[14 + 20 + 7] ^= 1;
    let bad = check(Prog::Xdp, w, &df, r.0, &wrong_mtu, &d).bad;
    assert!(bad.iter().any(|b| b.contains("bad ICMP reply")), "{bad:?}");
    let bad = check(Prog::Xdp, w, &plain, r.0, &r.1, &d).bad;
    assert!(bad.iter().any(|b| b.contains("without DF")), "{bad:?}");
    let small = big(0x4000, 1400);
    let bad = check(Prog::Xdp, w, &small, r.0, &r.1, &d).bad;
    assert!(bad.iter().any(|b| b.contains("fits")), "{bad:?}");

    // IPv6: a SYN to [VIP6]:80 sent out; a flipped byte and a GUE
    // protocol 4 instead of 41 are flagged.
    let (syn6, v, out, d) = (42000..43000u16)
        .find_map(|sport| {
            let f = frame6(
                mac,
                &l3v6(CLIENT6, VIP6, IPPROTO_TCP, &[], &tcp(sport, 80, SYN, b"")),
            );
            let (r, d) = env.a.counted(|| env.a.dp.run_xdp(&f, env.ifindex).unwrap());
            (r.0 == XDP_TX).then_some((f, r.0, r.1, d))
        })
        .expect("an IPv6 flow to a neighbour");
    assert!(check(Prog::Xdp, w, &syn6, v, &out, &d).bad.is_empty());
    let mut flipped = out.clone();
    flipped[out.len() - 1] ^= 1;
    assert!(!check(Prog::Xdp, w, &syn6, v, &flipped, &d).bad.is_empty());
    let mut proto4 = out.clone();
    proto4[14 + 29] = 4;
    let bad = check(Prog::Xdp, w, &syn6, v, &proto4, &d).bad;
    assert!(bad.iter().any(|b| b.contains("GUE proto")), "{bad:?}");
    // ICMPv6 Packet Too Big: the real reply passes; a broken checksum, and
    // the same reply to a multicast source, are flagged.
    let big6 = |src: Ipv6Addr| {
        frame6(
            mac,
            &l3v6(
                src,
                VIP6,
                IPPROTO_TCP,
                &[],
                &tcp(50001, 80, ACK, &[0x55; 1420]),
            ),
        )
    };
    let ptb = big6(CLIENT6);
    let (r, d) = env
        .a
        .counted(|| env.a.dp.run_xdp(&ptb, env.ifindex).unwrap());
    assert_eq!((r.0, &d[..]), (XDP_TX, &[("xdp_icmp6_too_big", 1)][..]));
    assert!(check(Prog::Xdp, w, &ptb, r.0, &r.1, &d).bad.is_empty());
    let mut sum = r.1.clone();
    sum[14 + 40 + 2] ^= 1;
    let bad = check(Prog::Xdp, w, &ptb, r.0, &sum, &d).bad;
    assert!(
        bad.iter().any(|b| b.contains("bad ICMPv6 reply")),
        "{bad:?}"
    );
    let mcast = big6("ff02::1".parse().unwrap());
    let bad = check(Prog::Xdp, w, &mcast, r.0, &r.1, &d).bad;
    assert!(bad.iter().any(|b| b.contains("multicast")), "{bad:?}");

    // TC, GUE protocol 41: a SYN decapsulated with tc_decap_ipv6 passes;
    // without it, with the EtherType left IPv4, or tc_decap_ipv6 on an
    // IPv4 decapsulation, flagged.
    let g6 = gue6(
        mac,
        B12,
        0,
        &[B13],
        &l3v6(CLIENT6, VIP6, IPPROTO_TCP, &[], &tcp(40000, 80, SYN, b"")),
    );
    let (r, d) = env.a.counted(|| env.a.dp.run_tc(&g6, env.ifindex).unwrap());
    assert_eq!(r.0, TC_ACT_OK);
    assert!(check(Prog::Tc, w, &g6, r.0, &r.1, &d).bad.is_empty());
    assert!(!check(Prog::Tc, w, &g6, r.0, &r.1, &[("tc_decap_syn", 1)])
        .bad
        .is_empty());
    let mut v4type = r.1.clone();
    v4type[12..14].copy_from_slice(&[8, 0]);
    assert!(!check(Prog::Tc, w, &g6, r.0, &v4type, &d).bad.is_empty());
    let bad = check(
        Prog::Tc,
        w,
        &syn_gue,
        TC_ACT_OK,
        &decapsulated(&syn_gue, 40),
        &[("tc_decap_syn", 1), ("tc_decap_ipv6", 1)],
    )
    .bad;
    assert!(bad.iter().any(|b| b.contains("one verdict")), "{bad:?}");

    // The IPv6 cluster network (`env.p6`): a SYN to VIP:80 in outer IPv6
    // sent out passes; a flow label of another hash, a non-zero UDP
    // checksum, or outer IPv4 GUE instead, are flagged.
    let p6 = &env.p6;
    let w6 = &p6.wa;
    let (syn, v, out, d) = (40000..41000u16)
        .find_map(|sport| {
            let syn = client_frame(
                mac,
                &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(sport, 80, SYN, b"")),
            );
            let (r, d) = p6.a.counted(|| p6.a.dp.run_xdp(&syn, p6.ifindex).unwrap());
            (r.0 == XDP_TX).then_some((syn, r.0, r.1, d))
        })
        .expect("a flow to a neighbour over IPv6");
    assert_eq!(be16(&out, 12), 0x86dd);
    assert!(check(Prog::Xdp, w6, &syn, v, &out, &d).bad.is_empty());
    let mut label = out.clone();
    label[14 + 3] ^= 1;
    let bad = check(Prog::Xdp, w6, &syn, v, &label, &d).bad;
    assert!(bad.iter().any(|b| b.contains("flow label")), "{bad:?}");
    let mut summed = out.clone();
    summed[14 + 47] = 1;
    let bad = check(Prog::Xdp, w6, &syn, v, &summed, &d).bad;
    assert!(bad.iter().any(|b| b.contains("UDP checksum")), "{bad:?}");
    let (_, out4, _) = {
        let (r, d) = env
            .a
            .counted(|| env.a.dp.run_xdp(&syn, env.ifindex).unwrap());
        (r.0, r.1, d)
    };
    assert!(!check(Prog::Xdp, w6, &syn, v, &out4, &d).bad.is_empty());

    // TC over it: an ACK no socket owns, to be forwarded to B13's twin
    // with a non-zero UDP checksum: the real forward passes; a stale
    // checksum, a wrong destination, or the same "forward" to fe80::1
    // (no node may relay there), are flagged; inner IPv4 decapsulated
    // from outer IPv6 must say 0x0800.
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let fwd = with_udp6_checksum(gue_frame_o6(mac, host6(B12), 0, &[host6(B13)], 4, &data));
    let (r, d) = p6.a.counted(|| p6.a.dp.run_tc(&fwd, p6.ifindex).unwrap());
    assert_eq!((r.0, &d[..]), (TC_ACT_REDIRECT, &[("tc_forward", 1)][..]));
    assert!(check(Prog::Tc, w6, &fwd, r.0, &r.1, &d).bad.is_empty());
    let mut stale = r.1.clone();
    stale[14 + 46..14 + 48].copy_from_slice(&fwd[14 + 46..14 + 48]);
    let bad = check(Prog::Tc, w6, &fwd, r.0, &stale, &d).bad;
    assert!(bad.iter().any(|b| b.contains("checksum")), "{bad:?}");
    let mut wrong = r.1.clone();
    wrong[14 + 39] ^= 1;
    assert!(!check(Prog::Tc, w6, &fwd, r.0, &wrong, &d).bad.is_empty());
    let link_local = gue_frame_o6(mac, host6(B12), 0, &["fe80::1".parse().unwrap()], 4, &data);
    let bad = check(Prog::Tc, w6, &link_local, r.0, &r.1, &d).bad;
    assert!(bad.iter().any(|b| b.contains("usable next hop")), "{bad:?}");
    let syn6 = gue_frame_o6(
        mac,
        host6(B12),
        0,
        &[],
        4,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40002, 80, SYN, b"")),
    );
    let (r, d) = p6.a.counted(|| p6.a.dp.run_tc(&syn6, p6.ifindex).unwrap());
    assert_eq!((r.0, &d[..]), (TC_ACT_OK, &[("tc_decap_syn", 1)][..]));
    assert_eq!(be16(&r.1, 12), 0x0800);
    assert!(check(Prog::Tc, w6, &syn6, r.0, &r.1, &d).bad.is_empty());
    let mut v6type = r.1.clone();
    v6type[12..14].copy_from_slice(&[0x86, 0xdd]);
    assert!(!check(Prog::Tc, w6, &syn6, r.0, &v6type, &d).bad.is_empty());
}
