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
//!   also move `xdp_icmp_forwarded`);
//! - the model: the exact verdict, counters and output bytes the reference
//!   predicts (encapsulation byte for byte, decapsulation, second-chance
//!   rewrite), and at the end of each worker the per-service and per-backend
//!   statistics summed over the run.
//!
//! Environment:
//!   NILB_FUZZ_PACKETS  packets per program (default 20000; sweeps included)
//!   NILB_FUZZ_THREADS  workers per program, each in its own netns (default 1)
//!   NILB_FUZZ_SEED     base seed (default fixed, so plain `cargo test` is
//!                      deterministic); printed with every failure
//!   NILB_FUZZ_FRAME    hex of one Ethernet frame: run only it (with
//!   NILB_FUZZ_PROGRAM  xdp | tc) and print what happened and what the model says
//!
//! Needs root (BPF, network namespaces). `scripts/fuzz.sh` drives the long run.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::time::Instant;

use common::*;
use nilb::dataplane::abi::COUNTER_NAMES;
use nilb::hash::{flow_hash, FlowTuple};
use rand::Rng;

const XDP_ABORTED: u32 = 0;
const XDP_REDIRECT: u32 = 4;
const GUE_PORT: u16 = 19523;
const HASH_SEED: u32 = 0x5eed1234;
/// `NILB_XDP_MARK` of bpf/nilb.h ("nilb"), in the 4 bytes of XDP metadata.
const MARK: u32 = 0x6e69_6c62;
/// MTU of nt0 and nt2.
const MTU: usize = 1500;

const VIP2: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);
const VIP3: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 102);
/// Backend on nt0's subnet without a neighbour entry: XDP slow path.
const B14: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 14);
/// Backend behind a second interface (nt2): XDP_REDIRECT.
const R5: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 5);
/// Backend without a route.
const FAR: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 5);
/// Not in the cluster.
const OUTSIDER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 99);
/// Not a VIP.
const OTHER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 50);
const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const MAC_R5: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x05];
/// Sockets in every worker's namespace: an established TCP connection
/// NODE:EST_PORT -> VIP:80 (listener on VIP:80), a wildcard listener on 8080,
/// an unconnected UDP socket on VIP:53 and a UDP socket VIP:5353 connected to
/// B12:4444.
const EST_PORT: u16 = 45678;
const UDP_CONN_PORT: u16 = 5353;
const UDP_PEER_PORT: u16 = 4444;

const DEFAULT_SEED: u64 = 0x6e69_6c62_0f22;
const DEFAULT_PACKETS: u64 = 20_000;
/// Violations printed in full (all are counted).
const SHOWN: usize = 10;

const IPPROTO_ICMP: u8 = 1;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;

// ---- configuration and environment -------------------------------------------------

/// Services: web (TCP VIP:80, six backends reaching every XDP verdict: this
/// node, two neighbours, one without neighbour entry, one behind nt2, one
/// without route), dns (UDP VIP:53), empty (no backend), alt-dns, wild.
/// `drained`: the reload that gives buckets a second hop.
fn fuzz_config(unknown_flow: &str, drained: bool) -> String {
    let (s13, s12) = if drained {
        ("drained", "drained")
    } else {
        ("active", "active")
    };
    format!(
        "version: 1
cluster:
  hash_seed: 0x5eed1234
  balancers: [10.0.0.11]
  unknown_flow: {unknown_flow}
defaults:
  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}
services:
  - name: web
    vip: 10.0.0.100
    port: 80
    protocol: tcp
    table_size: 256
    backends:
      - {{dip: 10.0.0.11}}
      - {{dip: 10.0.0.12}}
      - {{dip: 10.0.0.13, state: {s13}}}
      - {{dip: 10.0.0.14}}
      - {{dip: 10.1.0.5}}
      - {{dip: 172.16.0.5}}
  - name: dns
    vip: 10.0.0.100
    port: 53
    protocol: udp
    table_size: 64
    backends: [{{dip: 10.0.0.12}}, {{dip: 10.0.0.14}}]
  - name: empty
    vip: 10.0.0.101
    port: 443
    protocol: tcp
    table_size: 16
    backends: []
  - name: alt-dns
    vip: 10.0.0.101
    port: 53
    protocol: udp
    table_size: 16
    backends: [{{dip: 10.0.0.13}}]
  - name: wild
    vip: 10.0.0.102
    port: 8080
    protocol: tcp
    table_size: 64
    backends: [{{dip: 10.0.0.11}}, {{dip: 10.0.0.12, state: {s12}}}]
"
    )
}

/// One table as installed in the data plane.
struct Svc {
    index: u32,
    buckets: Vec<(Option<Ipv4Addr>, Option<Ipv4Addr>)>,
    slots: BTreeMap<Ipv4Addr, u32>,
}

/// What the reference needs to know about a loaded data plane.
struct World {
    nt0_mac: [u8; 6],
    nt2_mac: [u8; 6],
    services: HashMap<(Ipv4Addr, u16, u8), Svc>,
    vips: HashSet<Ipv4Addr>,
    cluster: HashSet<Ipv4Addr>,
    unknown_local: bool,
}

enum Route {
    Tx([u8; 6]),
    Redirect([u8; 6]),
    NoNeigh,
    Unroutable,
}

impl World {
    fn new(l: &Loaded, nt0_mac: [u8; 6], nt2_mac: [u8; 6], unknown_local: bool) -> World {
        let mut services = HashMap::new();
        for (k, t) in l.dp.live_tables().expect("live tables") {
            services.insert(
                (k.vip, k.port, k.protocol.number()),
                Svc {
                    index: t.service_index,
                    buckets: t.buckets.iter().map(|b| (b.first, b.second)).collect(),
                    slots: t.slots.clone(),
                },
            );
        }
        let cfg = l.cp.config();
        World {
            nt0_mac,
            nt2_mac,
            services,
            vips: cfg.vips().into_iter().collect(),
            cluster: cfg.cluster_addresses().into_iter().collect(),
            unknown_local,
        }
    }

    fn is_vip(&self, a: Ipv4Addr) -> bool {
        self.vips.contains(&a)
    }

    /// The netns of `Env`: 10.0.0.0/24 on nt0 with neighbours .12 and .13,
    /// 10.1.0.0/24 on nt2 with neighbour .5, nothing else.
    fn route(&self, hop: Ipv4Addr) -> Route {
        let o = hop.octets();
        match (o[0], o[1], o[2], o[3]) {
            (10, 0, 0, 12) => Route::Tx(MAC12),
            (10, 0, 0, 13) => Route::Tx(MAC13),
            (10, 0, 0, _) => Route::NoNeigh,
            (10, 1, 0, 5) => Route::Redirect(MAC_R5),
            (10, 1, 0, _) => Route::NoNeigh,
            _ => Route::Unroutable,
        }
    }
}

/// Sockets held open for the whole run (the TC program looks them up).
struct Sockets {
    _listener: TcpListener,
    _wild: TcpListener,
    _client: TcpStream,
    _server: TcpStream,
    _udp53: UdpSocket,
    _udpc: UdpSocket,
}

/// A worker's namespace with the data planes loaded: `a` (unknown_flow:
/// drop) serves XDP and TC, `b` (unknown_flow: local) serves TC.
struct Env {
    ifindex: u32,
    a: Loaded,
    b: Loaded,
    wa: World,
    wb: World,
    /// Counters of `a` and `b` after the last run.
    last: [std::cell::RefCell<Vec<u64>>; 2],
    _socks: Sockets,
}

fn setup() -> Env {
    let net = TestNet::new();
    ip("link add nt2 type veth peer name nt3");
    ip("addr add 10.1.0.1/24 dev nt2");
    ip("link set nt2 up");
    ip("link set nt3 up");
    ip("neigh replace 10.1.0.5 lladdr 02:00:00:00:01:05 dev nt2 nud permanent");
    let nt2_mac = mac_from_ip_link("nt2");

    let mut a = load(&fuzz_config("drop", false), NODE);
    a.reload(&fuzz_config("drop", true), NODE);
    let mut b = load(&fuzz_config("local", false), NODE);
    b.reload(&fuzz_config("local", true), NODE);
    let wa = World::new(&a, net.mac, nt2_mac, false);
    let wb = World::new(&b, net.mac, nt2_mac, true);
    // The reload must have produced buckets with a second hop.
    assert!(
        wa.services[&(VIP, 80, IPPROTO_TCP)]
            .buckets
            .iter()
            .any(|b| b.1.is_some()),
        "no second hops after the reload"
    );

    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let wild = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080)).unwrap();
    let client = connect_from(NODE, EST_PORT, VIP, 80);
    let (server, _) = listener.accept().unwrap();
    let udp53 = UdpSocket::bind(SocketAddrV4::new(VIP, 53)).unwrap();
    let udpc = UdpSocket::bind(SocketAddrV4::new(VIP, UDP_CONN_PORT)).unwrap();
    udpc.connect(SocketAddrV4::new(B12, UDP_PEER_PORT)).unwrap();
    let last = [
        std::cell::RefCell::new(a.dp.counters().unwrap()),
        std::cell::RefCell::new(b.dp.counters().unwrap()),
    ];
    Env {
        ifindex: net.ifindex,
        a,
        b,
        wa,
        wb,
        last,
        _socks: Sockets {
            _listener: listener,
            _wild: wild,
            _client: client,
            _server: server,
            _udp53: udp53,
            _udpc: udpc,
        },
    }
}

// ---- byte helpers ---------------------------------------------------------------------

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn addr(b: &[u8], o: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[o], b[o + 1], b[o + 2], b[o + 3])
}

fn put16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

/// Recompute the IPv4 header checksum of the header at `o` (IHL bytes).
fn fix_ip_csum(f: &mut [u8], o: usize) {
    if o + 20 > f.len() {
        return;
    }
    let ihl = ((f[o] & 15) as usize * 4).max(20);
    if o + ihl > f.len() {
        return;
    }
    f[o + 10] = 0;
    f[o + 11] = 0;
    let c = csum(&f[o..o + ihl]);
    put16(f, o + 10, c);
}

fn short_hex(b: &[u8]) -> String {
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

// ---- expected outcomes ------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Out {
    /// The output frame equals the input.
    Unchanged,
    /// Not looked at (dropped packets).
    Any,
    /// Exactly these bytes.
    Exact(Vec<u8>),
    /// These bytes; the IPv4 checksum at [14+10, 14+12) must verify when the
    /// input's did, and is not compared otherwise (incremental update).
    Rewritten(Vec<u8>, bool),
}

/// Statistics a run moves besides the global counters.
#[derive(Clone, Copy, Debug)]
enum Stat {
    None,
    XdpBackend { slot: u32, bytes: u64, syn: bool },
    XdpServiceDrop(u32),
    TcDecap(Option<u32>),
    TcForward(Option<u32>),
    TcDrop(Option<u32>),
}

#[derive(Clone, Debug)]
struct Outcome {
    verdict: u32,
    counters: Vec<&'static str>,
    out: Out,
    stat: Stat,
}

fn outcome(verdict: u32, counters: &[&'static str], out: Out) -> Outcome {
    Outcome {
        verdict,
        counters: counters.to_vec(),
        out,
        stat: Stat::None,
    }
}

// ---- XDP reference --------------------------------------------------------------------------

/// A flow the balancer must encapsulate.
#[derive(Clone, Debug)]
struct Flow {
    key: (Ipv4Addr, u16, u8),
    tuple: (Ipv4Addr, Ipv4Addr, u16, u16, u8),
    tot: usize,
    syn: bool,
    icmp: bool,
}

#[derive(Clone, Debug)]
enum XdpClass {
    NonIp,
    /// Broken IPv4 or L4 header; dropped if addressed to a VIP.
    Malformed {
        vip: bool,
        why: &'static str,
    },
    Fragment {
        vip: bool,
    },
    NotService(&'static str),
    /// ICMP to a VIP whose (frag-needed) headers are broken.
    IcmpMalformed(&'static str),
    Balance(Flow),
}

impl XdpClass {
    /// Short name for the coverage tally.
    fn label(&self) -> String {
        match self {
            XdpClass::NonIp => "non-IP".into(),
            XdpClass::Malformed { vip, why } => {
                format!("malformed ({why}){}", if *vip { " to VIP" } else { "" })
            }
            XdpClass::Fragment { vip } => {
                format!("fragment{}", if *vip { " to VIP" } else { "" })
            }
            XdpClass::NotService(why) => format!("not a service ({why})"),
            XdpClass::IcmpMalformed(why) => format!("ICMP malformed ({why})"),
            XdpClass::Balance(f) => format!(
                "balance {}:{}/{}{}",
                f.key.0,
                f.key.1,
                f.key.2,
                if f.icmp { " (ICMP)" } else { "" }
            ),
        }
    }
}

/// The reference parser for frames reaching the balancer.
fn parse_xdp(w: &World, f: &[u8]) -> XdpClass {
    if f.len() < 14 || be16(f, 12) != 0x0800 || f.len() < 34 {
        return XdpClass::NonIp;
    }
    let ip = &f[14..];
    let ver = ip[0] >> 4;
    let ihl = (ip[0] & 15) as usize * 4;
    let tot = be16(ip, 2) as usize;
    let saddr = addr(ip, 12);
    let daddr = addr(ip, 16);
    let vip = w.is_vip(daddr);
    let bad = |why| XdpClass::Malformed { vip, why };
    if ver != 4 {
        return bad("IP version");
    }
    if ihl < 20 {
        return bad("IHL < 5");
    }
    if tot < ihl {
        return bad("total length < IHL");
    }
    if 14 + tot > f.len() {
        return bad("total length beyond the frame");
    }
    if be16(ip, 6) & 0x3fff != 0 {
        return XdpClass::Fragment { vip };
    }
    let l4 = &ip[ihl..tot];
    match ip[9] {
        IPPROTO_TCP | IPPROTO_UDP => {
            let proto = ip[9];
            let need = if proto == IPPROTO_TCP { 20 } else { 8 };
            if l4.len() < need {
                return bad("L4 header beyond the total length");
            }
            let (sport, dport) = (be16(l4, 0), be16(l4, 2));
            let key = (daddr, dport, proto);
            if !w.services.contains_key(&key) {
                return XdpClass::NotService("no such (VIP, port, protocol)");
            }
            let syn = proto == IPPROTO_TCP && l4[13] & SYN != 0 && l4[13] & ACK == 0;
            XdpClass::Balance(Flow {
                key,
                tuple: (saddr, daddr, sport, dport, proto),
                tot,
                syn,
                icmp: false,
            })
        }
        IPPROTO_ICMP => {
            if !vip {
                return XdpClass::NotService("ICMP not to a VIP");
            }
            if l4.len() < 8 {
                return XdpClass::IcmpMalformed("ICMP header beyond the total length");
            }
            if l4[0] != 3 || l4[1] != 4 {
                return XdpClass::NotService("ICMP other than frag-needed");
            }
            let emb = &l4[8..];
            if emb.len() < 20 {
                return XdpClass::IcmpMalformed("embedded IPv4 header truncated");
            }
            let eihl = (emb[0] & 15) as usize * 4;
            if emb[0] >> 4 != 4 || eihl < 20 {
                return XdpClass::IcmpMalformed("embedded IPv4 version/IHL");
            }
            let eproto = emb[9];
            if eproto != IPPROTO_TCP && eproto != IPPROTO_UDP {
                return XdpClass::NotService("embedded protocol not TCP/UDP");
            }
            if be16(emb, 6) & 0x1fff != 0 {
                return XdpClass::NotService("embedded later fragment");
            }
            if emb.len() < eihl + 4 {
                return XdpClass::IcmpMalformed("embedded ports truncated");
            }
            let (esaddr, edaddr) = (addr(emb, 12), addr(emb, 16));
            let (esport, edport) = (be16(emb, eihl), be16(emb, eihl + 2));
            let key = (esaddr, esport, eproto);
            if !w.services.contains_key(&key) {
                return XdpClass::NotService("embedded flow of no service");
            }
            XdpClass::Balance(Flow {
                key,
                tuple: (edaddr, esaddr, edport, esport, eproto),
                tot,
                syn: false,
                icmp: true,
            })
        }
        _ => XdpClass::NotService("protocol not TCP/UDP/ICMP"),
    }
}

fn hash_of(t: (Ipv4Addr, Ipv4Addr, u16, u16, u8)) -> u32 {
    flow_hash(
        &FlowTuple {
            saddr: t.0,
            daddr: t.1,
            sport: t.2,
            dport: t.3,
            proto: t.4,
        },
        HASH_SEED,
    )
}

/// Ethernet + outer IPv4 + UDP + GUE (no hop or one) + `inner`, as the
/// README specifies.
fn encapsulation(
    dmac: &[u8],
    smac: &[u8],
    first: Ipv4Addr,
    second: Option<Ipv4Addr>,
    hash: u32,
    inner: &[u8],
) -> Vec<u8> {
    let hops: Vec<Ipv4Addr> = second.into_iter().collect();
    let mut gi = gue_header(4, 0, &hops);
    gi.extend_from_slice(inner);
    let mut f = Vec::with_capacity(14 + 36 + 4 + inner.len());
    f.extend_from_slice(&dmac[..6]);
    f.extend_from_slice(&smac[..6]);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&gue_outer(
        NODE,
        first,
        0x8000 | (hash & 0x7fff) as u16,
        GUE_PORT,
        &gi,
    ));
    f
}

fn marked(frame: &[u8]) -> Vec<u8> {
    let mut v = MARK.to_ne_bytes().to_vec();
    v.extend_from_slice(frame);
    v
}

fn expect_xdp(w: &World, f: &[u8], class: &XdpClass) -> Outcome {
    match class {
        XdpClass::NonIp => outcome(XDP_PASS, &["xdp_pass_non_ip"], Out::Unchanged),
        XdpClass::Malformed { vip: true, .. } | XdpClass::IcmpMalformed(_) => {
            outcome(XDP_DROP, &["xdp_drop_malformed"], Out::Any)
        }
        XdpClass::Fragment { vip: true } => outcome(XDP_DROP, &["xdp_drop_fragment"], Out::Any),
        XdpClass::Malformed { vip: false, .. }
        | XdpClass::Fragment { vip: false }
        | XdpClass::NotService(_) => outcome(XDP_PASS, &["xdp_pass_not_service"], Out::Unchanged),
        XdpClass::Balance(flow) => {
            let svc = &w.services[&flow.key];
            let hash = hash_of(flow.tuple);
            let (first, second) = svc.buckets[(hash as usize) & (svc.buckets.len() - 1)];
            let mut counters = vec![];
            if flow.icmp {
                counters.push("xdp_icmp_forwarded");
            }
            let Some(first) = first else {
                counters.push("xdp_drop_no_backend");
                return Outcome {
                    verdict: XDP_DROP,
                    counters,
                    out: Out::Any,
                    stat: Stat::XdpServiceDrop(svc.index),
                };
            };
            let second = second.filter(|s| *s != first);
            let overhead = 36 + if second.is_some() { 4 } else { 0 };
            let inner = &f[14..14 + flow.tot];
            let stat = Stat::XdpBackend {
                slot: svc.slots[&first],
                bytes: flow.tot as u64,
                syn: flow.syn,
            };
            let too_big = flow.tot + overhead > MTU;
            let (verdict, counter, out) = if first == NODE {
                let e = encapsulation(&f[0..6], &f[6..12], first, second, hash, inner);
                (XDP_PASS, "xdp_encap_local", Out::Exact(marked(&e)))
            } else {
                match w.route(first) {
                    _ if too_big && !matches!(w.route(first), Route::Unroutable) => {
                        (XDP_DROP, "xdp_drop_too_big", Out::Any)
                    }
                    Route::Tx(mac) => {
                        let e = encapsulation(&mac, &w.nt0_mac, first, second, hash, inner);
                        (XDP_TX, "xdp_encap_tx", Out::Exact(e))
                    }
                    Route::Redirect(mac) => {
                        let e = encapsulation(&mac, &w.nt2_mac, first, second, hash, inner);
                        (XDP_REDIRECT, "xdp_encap_redirect", Out::Exact(e))
                    }
                    Route::NoNeigh => {
                        let e = encapsulation(&f[0..6], &f[6..12], first, second, hash, inner);
                        (XDP_PASS, "xdp_encap_slow_path", Out::Exact(marked(&e)))
                    }
                    Route::Unroutable => (XDP_DROP, "xdp_drop_no_route", Out::Any),
                }
            };
            counters.push(counter);
            Outcome {
                verdict,
                counters,
                out,
                stat,
            }
        }
    }
}

/// Independent structural check of an encapsulation the balancer produced
/// (`out` without the mark): returns what is wrong, if anything.
fn check_encapsulation(frame: &[u8], tot: usize, out: &[u8]) -> Option<String> {
    if out.len() < 14 + 36 + 20 {
        return Some("shorter than Ethernet + GUE + IPv4".into());
    }
    let o = &out[14..];
    let n = o[28 + 7] as usize;
    let checks: [(bool, &str); 12] = [
        (be16(out, 12) == 0x0800, "ethertype"),
        (o[0] == 0x45 && o[1] == 0, "outer version/IHL/TOS"),
        (be16(o, 2) as usize == o.len(), "outer total length"),
        (
            o[4..10] == [0, 0, 0x40, 0, 64, 17],
            "outer ID/DF/TTL/protocol",
        ),
        (csum(&o[..20]) == 0, "outer checksum"),
        (addr(o, 12) == NODE, "outer source"),
        (
            be16(o, 20) & 0x8000 != 0 && be16(o, 22) == GUE_PORT,
            "UDP ports",
        ),
        (be16(o, 24) as usize == o.len() - 20, "UDP length"),
        (be16(o, 26) == 0, "UDP checksum"),
        (n <= 1 && o[28] as usize == 1 + n, "GUE hlen/N"),
        (o[29..35] == [4, 0, 0, 0, 0, 0], "GUE proto/flags/type/next"),
        (
            o.get(36 + 4 * n..) == Some(&frame[14..14 + tot]),
            "inner packet",
        ),
    ];
    checks
        .iter()
        .find(|(ok, _)| !ok)
        .map(|(_, what)| format!("bad encapsulation: {what}"))
}

// ---- TC reference -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Local {
    Syn,
    Established,
    UdpConnected,
    UdpListener,
    IcmpKnown,
    Unknown,
}

#[derive(Clone, Debug)]
struct Gue {
    n: usize,
    next: usize,
    hops: Vec<Ipv4Addr>,
    hdr_len: usize,
    stats: Option<u32>,
    local: Local,
}

#[derive(Clone, Debug)]
enum TcClass {
    /// Not GUE addressed to this node: passes untouched.
    NotForUs(&'static str),
    NotCluster,
    SelfUnmarked,
    Malformed(&'static str),
    Unsupported(&'static str),
    InnerNotVip,
    Valid(Gue),
}

impl TcClass {
    /// Short name for the coverage tally.
    fn label(&self) -> String {
        match self {
            TcClass::NotForUs(why) => format!("not for us ({why})"),
            TcClass::NotCluster => "not cluster".into(),
            TcClass::SelfUnmarked => "self unmarked".into(),
            TcClass::Malformed(why) => format!("malformed ({why})"),
            TcClass::Unsupported(why) => format!("unsupported ({why})"),
            TcClass::InnerNotVip => "inner not VIP".into(),
            TcClass::Valid(g) => format!(
                "valid {:?}, {}",
                g.local,
                if g.next < g.n {
                    "hop left"
                } else {
                    "no hop left"
                }
            ),
        }
    }
}

#[derive(PartialEq)]
enum Sock {
    None,
    Listen,
    Established,
}

/// TCP socket lookup in the worker's namespace, as for an incoming packet.
fn tcp_lookup(s: Ipv4Addr, d: Ipv4Addr, sp: u16, dp: u16) -> Sock {
    if (s, sp, d, dp) == (NODE, EST_PORT, VIP, 80) || (s, sp, d, dp) == (VIP, 80, NODE, EST_PORT) {
        Sock::Established
    } else if (d == VIP && dp == 80) || dp == 8080 {
        Sock::Listen
    } else {
        Sock::None
    }
}

#[derive(PartialEq)]
enum USock {
    None,
    Unconnected,
    Connected,
}

fn udp_lookup(s: Ipv4Addr, d: Ipv4Addr, sp: u16, dp: u16) -> USock {
    if (s, sp, d, dp) == (B12, UDP_PEER_PORT, VIP, UDP_CONN_PORT) {
        USock::Connected
    } else if d == VIP && dp == 53 {
        USock::Unconnected
    } else {
        USock::None
    }
}

/// The reference parser for frames reaching the TC program (test runs carry
/// no XDP metadata, so nothing is "marked").
fn parse_tc(w: &World, f: &[u8]) -> TcClass {
    use TcClass::*;
    if f.len() < 34 || be16(f, 12) != 0x0800 || f[14 + 9] != IPPROTO_UDP {
        return NotForUs("not IPv4/UDP");
    }
    let o = &f[14..];
    let oihl = (o[0] & 15) as usize * 4;
    if oihl < 20 {
        return NotForUs("outer IHL < 5");
    }
    if 14 + oihl + 8 > f.len() {
        return NotForUs("no UDP header");
    }
    if be16(o, oihl + 2) != GUE_PORT {
        return NotForUs("not the GUE port");
    }
    let (saddr, daddr) = (addr(o, 12), addr(o, 16));
    if daddr != NODE {
        return NotForUs("GUE to another node");
    }
    if !w.cluster.contains(&saddr) {
        return NotCluster;
    }
    if saddr == NODE {
        return SelfUnmarked;
    }
    if oihl != 20 {
        return Malformed("outer IP options");
    }
    let tot = be16(o, 2) as usize;
    let udp_len = be16(o, 24) as usize;
    if o[0] >> 4 != 4 {
        return Malformed("outer version");
    }
    if be16(o, 6) & 0x3fff != 0 {
        return Malformed("outer fragment");
    }
    if tot < 20 || udp_len != tot - 20 {
        return Malformed("UDP length != IP length - 20");
    }
    if 14 + tot > f.len() {
        return Malformed("outer total length beyond the frame");
    }
    if udp_len < 16 {
        return Malformed("GUE header beyond the UDP length");
    }
    let g = &o[28..];
    let n = g[7] as usize;
    let next = g[6] as usize;
    if g[0] >> 6 != 0 {
        return Malformed("GUE version");
    }
    if g[0] & 0x20 != 0 {
        return Malformed("GUE C bit");
    }
    if g[2] != 0 || g[3] != 0 {
        return Malformed("GUE flags");
    }
    if g[4] != 0 || g[5] != 0 {
        return Malformed("GUE private type");
    }
    if n > 8 {
        return Malformed("more than 8 hops");
    }
    if (g[0] & 0x1f) as usize != 1 + n {
        return Malformed("hlen != 1 + N");
    }
    if next > n {
        return Malformed("next hop index > N");
    }
    if g[1] == 41 {
        return Unsupported("inner IPv6");
    }
    if g[1] != 4 {
        return Malformed("inner protocol not 4");
    }
    let gue_len = 8 + 4 * n;
    if udp_len < 8 + gue_len + 20 {
        return Malformed("inner IPv4 header beyond the UDP length");
    }
    let hops: Vec<Ipv4Addr> = (0..n).map(|i| addr(g, 8 + 4 * i)).collect();
    let inner = &g[gue_len..];
    let itot = be16(inner, 2) as usize;
    let iihl = (inner[0] & 15) as usize * 4;
    if inner[0] >> 4 != 4 {
        return Malformed("inner version");
    }
    if iihl < 20 {
        return Malformed("inner IHL < 5");
    }
    if be16(inner, 6) & 0x3fff != 0 {
        return Malformed("inner fragment");
    }
    if itot != udp_len - 8 - gue_len {
        return Malformed("inner length != UDP length - GUE");
    }
    if itot < iihl {
        return Malformed("inner total length < IHL");
    }
    let (is, id) = (addr(inner, 12), addr(inner, 16));
    if !w.is_vip(id) {
        return InnerNotVip;
    }
    let proto = inner[9];
    let l4 = &inner[iihl..itot];
    let stats = if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) && l4.len() >= 4 {
        w.services.get(&(id, be16(l4, 2), proto)).map(|s| s.index)
    } else {
        None
    };
    let local = match proto {
        IPPROTO_TCP => {
            if l4.len() < 20 || l4[12] >> 4 < 5 {
                return Malformed("inner TCP header");
            }
            let fl = l4[13];
            if fl & SYN != 0 && fl & ACK == 0 {
                Local::Syn
            } else {
                match tcp_lookup(is, id, be16(l4, 0), be16(l4, 2)) {
                    Sock::Established => Local::Established,
                    // A SYN-cookie ACK is never valid here (no recent
                    // listen queue overflow).
                    _ => Local::Unknown,
                }
            }
        }
        IPPROTO_UDP => {
            if l4.len() < 8 {
                return Malformed("inner UDP header");
            }
            match udp_lookup(is, id, be16(l4, 0), be16(l4, 2)) {
                USock::Connected => Local::UdpConnected,
                USock::Unconnected => Local::UdpListener,
                USock::None => Local::Unknown,
            }
        }
        IPPROTO_ICMP => {
            if l4.len() < 8 {
                return Malformed("inner ICMP header");
            }
            if l4[0] != 3 || l4[1] != 4 {
                return Unsupported("inner ICMP other than frag-needed");
            }
            let emb = &l4[8..];
            if emb.len() < 20 {
                return Malformed("embedded IPv4 header truncated");
            }
            let eihl = (emb[0] & 15) as usize * 4;
            if emb[0] >> 4 != 4 || eihl < 20 {
                return Malformed("embedded version/IHL");
            }
            if be16(emb, 6) & 0x1fff != 0 {
                return Unsupported("embedded later fragment");
            }
            if emb.len() < eihl + 4 {
                return Malformed("embedded ports truncated");
            }
            let (es, ed) = (addr(emb, 12), addr(emb, 16));
            let (esp, edp) = (be16(emb, eihl), be16(emb, eihl + 2));
            match emb[9] {
                IPPROTO_TCP => {
                    if tcp_lookup(ed, es, edp, esp) == Sock::Established {
                        Local::IcmpKnown
                    } else {
                        Local::Unknown
                    }
                }
                IPPROTO_UDP => {
                    if udp_lookup(ed, es, edp, esp) == USock::Connected {
                        Local::IcmpKnown
                    } else {
                        Local::Unknown
                    }
                }
                _ => return Unsupported("embedded protocol not TCP/UDP"),
            }
        }
        _ => return Unsupported("inner protocol not TCP/UDP/ICMP"),
    };
    Valid(Gue {
        n,
        next,
        hops,
        hdr_len: 28 + gue_len,
        stats,
        local,
    })
}

fn decapsulated(f: &[u8], hdr_len: usize) -> Vec<u8> {
    let mut v = f[..14].to_vec();
    v.extend_from_slice(&f[14 + hdr_len..]);
    v
}

fn expect_tc(w: &World, f: &[u8], class: &TcClass) -> Outcome {
    let shot = |c: &'static str| outcome(TC_ACT_SHOT, &[c], Out::Any);
    match class {
        TcClass::NotForUs(_) => outcome(TC_ACT_OK, &["tc_pass_other"], Out::Unchanged),
        TcClass::NotCluster => shot("tc_drop_not_cluster"),
        TcClass::SelfUnmarked => shot("tc_drop_self_unmarked"),
        TcClass::Malformed(_) => shot("tc_drop_malformed"),
        TcClass::Unsupported(_) => shot("tc_drop_unsupported"),
        TcClass::InnerNotVip => shot("tc_drop_inner_not_vip"),
        TcClass::Valid(g) => {
            let decap = |c: &'static str| Outcome {
                verdict: TC_ACT_OK,
                counters: vec![c],
                out: Out::Exact(decapsulated(f, g.hdr_len)),
                stat: Stat::TcDecap(g.stats),
            };
            match g.local {
                Local::Syn => return decap("tc_decap_syn"),
                Local::Established => return decap("tc_decap_established"),
                Local::UdpConnected => return decap("tc_decap_udp"),
                Local::IcmpKnown => return decap("tc_decap_icmp"),
                Local::UdpListener | Local::Unknown => {}
            }
            if g.next < g.n {
                let hop = g.hops[g.next];
                if hop == NODE {
                    return decap("tc_decap_loop_guard");
                }
                if hop == Ipv4Addr::UNSPECIFIED {
                    return shot("tc_drop_malformed");
                }
                let mut v = f.to_vec();
                v[14 + 12..14 + 16].copy_from_slice(&NODE.octets());
                v[14 + 16..14 + 20].copy_from_slice(&hop.octets());
                v[14 + 28 + 6] = g.next as u8 + 1;
                let had_valid_csum = csum(&f[14..34]) == 0;
                if had_valid_csum {
                    fix_ip_csum(&mut v, 14);
                }
                return Outcome {
                    verdict: TC_ACT_REDIRECT,
                    counters: vec!["tc_forward"],
                    out: Out::Rewritten(v, had_valid_csum),
                    stat: Stat::TcForward(g.stats),
                };
            }
            if g.local == Local::UdpListener {
                return decap("tc_decap_udp");
            }
            if w.unknown_local {
                return decap("tc_decap_unknown_local");
            }
            Outcome {
                verdict: TC_ACT_SHOT,
                counters: vec!["tc_drop_unknown_flow"],
                out: Out::Any,
                stat: Stat::TcDrop(g.stats),
            }
        }
    }
}

// ---- tolerated deviations ---------------------------------------------------------------------

/// Where nilb is known to differ from the reference without forwarding
/// anything it should not, the outcome it produces instead and a name for
/// the deviation (reported as an observation with an example, not as a
/// violation). Both concern headers nilb reads from bytes past the end of
/// the packet's own length (Ethernet padding): their verdict or counter
/// then depends on the padding.
fn tolerated(prog: Prog, f: &[u8], class_label: &str) -> Option<(Outcome, &'static str)> {
    match prog {
        Prog::Xdp if class_label == "ICMP malformed (embedded IPv4 header truncated)" => {
            // nilb bounds the embedded header by the frame, not by the ICMP
            // payload; a "later fragment" or non-TCP/UDP protocol read from
            // the padding makes it pass instead of drop.
            let ihl = (f[14] & 15) as usize * 4;
            let emb = f.get(14 + ihl + 8..)?;
            if emb.len() >= 20
                && emb[0] >> 4 == 4
                && emb[0] & 15 >= 5
                && (![IPPROTO_TCP, IPPROTO_UDP].contains(&emb[9]) || be16(emb, 6) & 0x1fff != 0)
            {
                return Some((
                    outcome(XDP_PASS, &["xdp_pass_not_service"], Out::Unchanged),
                    "tolerated: xdp: ICMP frag-needed to a VIP with its embedded header cut by the IP total length passes (header read from the padding)",
                ));
            }
            None
        }
        Prog::Tc if class_label == "malformed (embedded IPv4 header truncated)" => {
            let n = f[49] as usize;
            let inner = 14 + 28 + 8 + 4 * n;
            let iihl = (f[inner] & 15) as usize * 4;
            let emb = f.get(inner + iihl + 8..)?;
            if emb.len() >= 20 && emb[0] >> 4 == 4 && emb[0] & 15 >= 5 && be16(emb, 6) & 0x1fff != 0
            {
                return Some((
                    outcome(TC_ACT_SHOT, &["tc_drop_unsupported"], Out::Any),
                    "tolerated: tc: inner ICMP with its embedded header cut by the inner length counted unsupported, not malformed (header read from the padding)",
                ));
            }
            None
        }
        Prog::Tc if class_label == "malformed (GUE header beyond the UDP length)" => {
            let g = f.get(42..50)?;
            let n = g[7] as usize;
            if g[0] & 0xe0 == 0
                && g[2..6] == [0, 0, 0, 0]
                && n <= 8
                && (g[0] & 0x1f) as usize == 1 + n
                && g[6] as usize <= n
                && g[1] == 41
            {
                return Some((
                    outcome(TC_ACT_SHOT, &["tc_drop_unsupported"], Out::Any),
                    "tolerated: tc: GUE header past the UDP length counted unsupported (inner IPv6 read from the padding), not malformed",
                ));
            }
            None
        }
        _ => None,
    }
}

/// Facts about what nilb accepted that no documented rule forbids, worth a
/// line in the report (counted with a first example, never violations).
fn xdp_notes(frame: &[u8], flow: &Flow) -> Vec<&'static str> {
    let mut v = Vec::new();
    let ip = &frame[14..];
    let ihl = (ip[0] & 15) as usize * 4;
    let l4 = &ip[ihl..flow.tot];
    if csum(&ip[..ihl]) != 0 {
        v.push("note: xdp encapsulates packets whose IPv4 header checksum is wrong (not verified)");
    }
    if flow.icmp {
        let emb_src = addr(l4, 8 + 12);
        if emb_src != addr(ip, 16) {
            v.push("note: xdp balances an ICMP frag-needed sent to one VIP about a flow of another VIP");
        }
    } else if ip[9] == IPPROTO_TCP {
        let doff = (l4[12] >> 4) as usize;
        if doff < 5 {
            v.push("note: xdp encapsulates TCP with a data offset below 5 (the backend's TC drops it as malformed)");
        } else if doff * 4 > l4.len() {
            v.push("note: xdp encapsulates TCP whose data offset points past the segment");
        }
    } else if be16(l4, 4) as usize != l4.len() {
        v.push("note: xdp encapsulates UDP whose length field disagrees with the IP length");
    }
    v
}

fn tc_notes(w: &World, frame: &[u8], g: &Gue, verdict: u32) -> Vec<&'static str> {
    let mut v = Vec::new();
    if csum(&frame[14..34]) != 0 {
        v.push(
            "note: tc decapsulates/forwards GUE whose outer IPv4 checksum is wrong (not verified)",
        );
    }
    let inner = &frame[14 + g.hdr_len..];
    let iihl = (inner[0] & 15) as usize * 4;
    let itot = be16(inner, 2) as usize;
    let l4 = &inner[iihl..itot];
    if csum(&inner[..iihl]) != 0 && verdict == TC_ACT_OK {
        v.push("note: tc decapsulates inner packets whose IPv4 checksum is wrong (the stack drops them)");
    }
    match inner[9] {
        IPPROTO_TCP if (l4[12] >> 4) as usize * 4 > l4.len() => {
            v.push("note: tc accepts inner TCP whose data offset points past the segment")
        }
        IPPROTO_UDP if be16(l4, 4) as usize != l4.len() => {
            v.push("note: tc accepts inner UDP whose length field disagrees with the IP length")
        }
        _ => {}
    }
    if verdict == TC_ACT_REDIRECT {
        let hop = g.hops[g.next];
        if !w.cluster.contains(&hop) {
            v.push("note: tc second chance forwards to a listed hop outside the cluster addresses");
        }
    }
    v
}

// ---- checking one run -----------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Debug)]
enum Prog {
    Xdp,
    Tc,
}

/// What went wrong with one frame (hard invariants first, then the model).
fn check(
    prog: Prog,
    w: &World,
    frame: &[u8],
    verdict: u32,
    out: &[u8],
    deltas: &[(&'static str, u64)],
) -> Checked {
    let mut bad = Vec::new();
    let mut observations = Vec::new();
    let (class_text, want) = match prog {
        Prog::Xdp => {
            let class = parse_xdp(w, frame);
            // Hard: verdicts.
            if !(1..=4).contains(&verdict) {
                bad.push(format!(
                    "verdict {verdict} is not DROP/PASS/TX/REDIRECT{}",
                    if verdict == XDP_ABORTED {
                        " (XDP_ABORTED)"
                    } else {
                        ""
                    }
                ));
            }
            // Hard: counters.
            let main: Vec<_> = deltas
                .iter()
                .filter(|(n, _)| *n != "xdp_icmp_forwarded")
                .collect();
            let icmp_ok = deltas
                .iter()
                .all(|(n, v)| *n != "xdp_icmp_forwarded" || *v == 1);
            if main.len() != 1 || main[0].1 != 1 || !main[0].0.starts_with("xdp_") || !icmp_ok {
                bad.push(format!("counters do not add up to one verdict: {deltas:?}"));
            }
            // Hard: nothing malformed is encapsulated.
            let encap = match verdict {
                XDP_TX | XDP_REDIRECT => Some(out),
                XDP_PASS if out != frame => {
                    if out.len() >= 4 && out[..4] == MARK.to_ne_bytes() {
                        Some(&out[4..])
                    } else {
                        bad.push("XDP_PASS changed the frame without nilb's mark".into());
                        None
                    }
                }
                _ => None,
            };
            if let Some(e) = encap {
                match &class {
                    XdpClass::Balance(flow) => {
                        if let Some(why) = check_encapsulation(frame, flow.tot, e) {
                            bad.push(why);
                        }
                        observations.extend(xdp_notes(frame, flow));
                    }
                    other => bad.push(format!(
                        "encapsulated a frame the reference rejects: {other:?}"
                    )),
                }
            }
            (
                (format!("{class:?}"), class.label()),
                expect_xdp(w, frame, &class),
            )
        }
        Prog::Tc => {
            let class = parse_tc(w, frame);
            if ![TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT].contains(&verdict) {
                bad.push(format!("verdict {verdict} is not OK/SHOT/REDIRECT"));
            }
            if deltas.len() != 1 || deltas[0].1 != 1 || !deltas[0].0.starts_with("tc_") {
                bad.push(format!("counters do not add up to one verdict: {deltas:?}"));
            }
            match (verdict, &class) {
                (TC_ACT_OK, TcClass::NotForUs(_)) if out == frame => {}
                (TC_ACT_OK, c) if out == frame => {
                    bad.push(format!("passed untouched GUE for this node: {c:?}"))
                }
                (TC_ACT_OK, TcClass::Valid(g)) => {
                    if out != decapsulated(frame, g.hdr_len) {
                        bad.push("TC_ACT_OK with an output that is not the decapsulation".into());
                    }
                    observations.extend(tc_notes(w, frame, g, verdict));
                }
                (TC_ACT_OK, c) => bad.push(format!("decapsulated an invalid frame: {c:?}")),
                (TC_ACT_REDIRECT, TcClass::Valid(g)) => {
                    let hop = g.hops.get(g.next).copied();
                    if hop.is_none() || hop == Some(NODE) || hop == Some(Ipv4Addr::UNSPECIFIED) {
                        bad.push(format!("forwarded without a usable next hop: {g:?}"));
                    } else {
                        observations.extend(tc_notes(w, frame, g, verdict));
                    }
                }
                (TC_ACT_REDIRECT, c) => bad.push(format!("forwarded an invalid frame: {c:?}")),
                _ => {}
            }
            (
                (format!("{class:?}"), class.label()),
                expect_tc(w, frame, &class),
            )
        }
    };

    // The model: verdict, counters, output; or a tolerated deviation.
    let mut got_counters: Vec<&str> = deltas
        .iter()
        .flat_map(|(n, v)| std::iter::repeat_n(*n, *v as usize))
        .collect();
    got_counters.sort();
    let matches = |want: &Outcome| {
        let mut want_counters = want.counters.clone();
        want_counters.sort();
        let out_ok = match &want.out {
            Out::Any => true,
            Out::Unchanged => out == frame,
            Out::Exact(v) => out == &v[..],
            Out::Rewritten(v, csum_valid) => {
                out.len() == v.len()
                    && out[..24] == v[..24]
                    && out[26..] == v[26..]
                    && (!csum_valid || csum(&out[14..34]) == 0)
            }
        };
        (
            verdict == want.verdict && got_counters == want_counters && out_ok,
            want_counters,
            out_ok,
        )
    };
    let (ok, want_counters, out_ok) = matches(&want);
    if !ok {
        match tolerated(prog, frame, &class_text.1) {
            Some((alt, name)) if matches(&alt).0 => observations.push(name),
            _ => {
                let want_out = match &want.out {
                    Out::Any => "(any)".to_string(),
                    Out::Unchanged => "(unchanged)".to_string(),
                    Out::Exact(v) | Out::Rewritten(v, _) => short_hex(v),
                };
                bad.push(format!(
                    "model: expected verdict {} counters {:?} output {}; got verdict {verdict} counters {:?} output {}",
                    want.verdict,
                    want_counters,
                    want_out,
                    got_counters,
                    if out_ok { "(as expected)".to_string() } else { short_hex(out) }
                ));
            }
        }
    }
    Checked {
        bad,
        want,
        class: class_text.0,
        label: class_text.1,
        observations,
    }
}

/// The verdict of the reference on one run.
struct Checked {
    /// Violations.
    bad: Vec<String>,
    /// The outcome the reference expects.
    want: Outcome,
    /// The reference class (Debug) and its short label.
    class: String,
    label: String,
    /// Tolerated deviations and notes.
    observations: Vec<&'static str>,
}

// ---- tallies ------------------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    packets: u64,
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
    service: [HashMap<u32, [u64; 4]>; 2],
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.packets += o.packets;
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
}

/// Run one frame, check it, record it.
fn run_one(env: &Env, ctx: &Ctx, t: &mut Tally, index: u64, origin: &str, frame: &[u8]) {
    // TC alternates between the data plane with unknown_flow drop and local.
    let use_b = ctx.prog == Prog::Tc && index % 2 == 1;
    let (l, w, which) = if use_b {
        (&env.b, &env.wb, 1)
    } else {
        (&env.a, &env.wa, 0)
    };
    // `Loaded::counted` reads every counter before and after the run; here
    // the snapshot after one run is the one before the next (the data plane
    // is this worker's alone), which halves the map reads of a run.
    let r = match ctx.prog {
        Prog::Xdp => l.dp.run_xdp(frame, env.ifindex),
        Prog::Tc => l.dp.run_tc(frame, env.ifindex),
    };
    let deltas = {
        let mut last = env.last[which].borrow_mut();
        let now = l.dp.counters().expect("reading counters");
        let d: Vec<(&'static str, u64)> = COUNTER_NAMES
            .iter()
            .zip(last.iter().zip(&now))
            .filter(|(_, (b, a))| a != b)
            .map(|(n, (b, a))| (*n, a.wrapping_sub(*b)))
            .collect();
        *last = now;
        d
    };
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
            t.violation(format!(
                "{:?} seed {:#x} worker {} packet {index} ({origin}): test run failed: {e:#}\nframe ({} bytes):\n{}",
                ctx.prog, ctx.seed, ctx.worker, frame.len(), short_hex(frame)
            ));
            return;
        }
    };
    t.packets += 1;
    *t.verdicts.entry(verdict).or_default() += 1;
    for (n, v) in &deltas {
        *t.counters.entry(n).or_default() += v;
    }
    let Checked {
        bad,
        want,
        class,
        label,
        observations,
    } = check(ctx.prog, w, frame, verdict, &out, &deltas);
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
        Stat::XdpServiceDrop(i) => t.service[which].entry(i).or_default()[0] += 1,
        Stat::TcDecap(Some(i)) => t.service[which].entry(i).or_default()[1] += 1,
        Stat::TcForward(Some(i)) => t.service[which].entry(i).or_default()[2] += 1,
        Stat::TcDrop(Some(i)) => t.service[which].entry(i).or_default()[3] += 1,
        Stat::TcDecap(None) | Stat::TcForward(None) | Stat::TcDrop(None) => {}
    }
    if !bad.is_empty() {
        t.violation(format!(
            "{:?} seed {:#x} worker {} packet {index} ({origin}{}): {}\n  reference: {class}\n  frame ({} bytes): {}\n{}\n  verdict {} counters {:?}\n  output ({} bytes):\n{}",
            ctx.prog,
            ctx.seed,
            ctx.worker,
            if use_b { ", unknown_flow: local" } else { "" },
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

/// Frames `BPF_PROG_TEST_RUN` of a TC program rejects with EINVAL.
fn kernel_refuses_tc(f: &[u8]) -> bool {
    match be16(f, 12) {
        0x0800 => f.len() < 14 + 20,
        0x86dd => f.len() < 14 + 40,
        _ => false,
    }
}

/// Compare the statistics maps with what the model expected over the run.
fn check_stats(env: &Env, ctx: &Ctx, t: &mut Tally) {
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
    for (which, (l, w)) in [(&env.a, &env.wa), (&env.b, &env.wb)]
        .into_iter()
        .enumerate()
    {
        if ctx.prog == Prog::Xdp && which == 1 {
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
            "{:?} seed {:#x} worker {}: statistics: {p}",
            ctx.prog, ctx.seed, ctx.worker
        ));
    }
}

// ---- generators ---------------------------------------------------------------------------------

const U8S: &[u8] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 0x1f, 0x20, 0x21, 0x29, 0x3f, 0x40, 0x41, 0x44, 0x45,
    0x46, 0x4f, 0x60, 0x7f, 0x80, 0xc0, 0xe0, 0xfe, 0xff,
];
const U16S: &[u16] = &[
    0, 1, 2, 7, 8, 15, 16, 19, 20, 21, 27, 28, 35, 36, 39, 40, 44, 48, 59, 60, 61, 64, 80, 0x0800,
    0x2000, 0x3fff, 0x4000, 0x7fff, 0x8000, 0xfffe, 0xffff, GUE_PORT,
];

/// SplitMix64: a small, fast, seedable generator (the fuzz loop runs in a
/// debug build, where ChaCha costs more than the test run itself).
struct SplitMix(u64);

impl rand::RngCore for SplitMix {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand_core_fill(self, dest)
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        rand_core_fill(self, dest);
        Ok(())
    }
}

fn rand_core_fill(r: &mut SplitMix, dest: &mut [u8]) {
    use rand::RngCore;
    for chunk in dest.chunks_mut(8) {
        let v = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

struct Gen {
    rng: SplitMix,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: SplitMix(seed),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn below(&mut self, n: usize) -> usize {
        self.rng.gen_range(0..n)
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        rand::RngCore::fill_bytes(&mut self.rng, &mut v);
        v
    }

    fn u8i(&mut self) -> u8 {
        if self.chance(0.5) {
            self.pick(U8S)
        } else {
            self.rng.gen()
        }
    }

    fn u16i(&mut self) -> u16 {
        if self.chance(0.5) {
            self.pick(U16S)
        } else {
            self.rng.gen()
        }
    }

    fn any_addr(&mut self) -> Ipv4Addr {
        if self.chance(0.2) {
            Ipv4Addr::from(self.rng.gen::<u32>())
        } else {
            self.pick(&[
                VIP,
                VIP2,
                VIP3,
                NODE,
                B12,
                B13,
                B14,
                R5,
                FAR,
                CLIENT,
                OUTSIDER,
                OTHER,
                Ipv4Addr::UNSPECIFIED,
                Ipv4Addr::BROADCAST,
                Ipv4Addr::new(224, 0, 0, 1),
                Ipv4Addr::LOCALHOST,
            ])
        }
    }

    fn port(&mut self) -> u16 {
        if self.chance(0.3) {
            self.rng.gen()
        } else {
            self.pick(&[
                80,
                80,
                80,
                53,
                53,
                443,
                8080,
                UDP_CONN_PORT,
                UDP_PEER_PORT,
                EST_PORT,
                GUE_PORT,
                0,
                1,
                65535,
            ])
        }
    }

    fn payload_len(&mut self) -> usize {
        match self.below(10) {
            0..=4 => 0,
            5..=7 => self.below(64),
            8 => 64 + self.below(600),
            _ => 1380 + self.below(140),
        }
    }

    /// An IPv4 header for `l4_len` bytes of payload with optional options,
    /// fragment field, and (sometimes) lies in version, IHL or total length.
    fn ip_header(&mut self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4_len: usize) -> Vec<u8> {
        let opts = if self.chance(0.1) {
            let n = 4 * (1 + self.below(10));
            let mut o = self.bytes(n);
            if self.chance(0.5) {
                o.iter_mut().for_each(|b| *b = 1); // NOPs
            }
            o
        } else {
            vec![]
        };
        let frag = match self.below(20) {
            0..=13 => 0,
            14..=16 => 0x4000,
            17 => 0x2000,
            18 => 1 + self.below(0x1fff) as u16,
            _ => self.rng.gen(),
        };
        let mut h = ipv4(src, dst, proto, l4_len, frag, &opts);
        if self.chance(0.05) {
            h[0] = (h[0] & 0x0f) | (self.below(16) as u8) << 4;
        }
        if self.chance(0.05) {
            h[0] = (h[0] & 0xf0) | self.below(16) as u8;
        }
        if self.chance(0.07) {
            let v = self.u16i();
            put16(&mut h, 2, v);
        }
        if self.chance(0.05) {
            h[1] = self.rng.gen(); // TOS
        }
        fix_ip_csum(&mut h, 0);
        if self.chance(0.05) {
            h[10] ^= 0x5a; // bad checksum: nobody on the path should care
        }
        h
    }

    fn tcp_l4(&mut self, sport: u16, dport: u16) -> Vec<u8> {
        let flags = match self.below(12) {
            0..=3 => SYN,
            4 => ACK,
            5 => ACK | PSH,
            6 => SYN | ACK,
            7 => RST,
            8 => FIN | ACK,
            9 => RST | ACK,
            _ => self.rng.gen(),
        };
        let plen = self.payload_len();
        let payload = self.bytes(plen);
        let mut t = tcp(sport, dport, flags, &[]);
        match self.below(20) {
            0 => t[12] = (self.below(16) as u8) << 4, // doff lies
            1 => {
                let n = 1 + self.below(10);
                t[12] = ((5 + n) as u8) << 4;
                let opts = self.bytes(4 * n);
                t.extend_from_slice(&opts);
            }
            _ => {}
        }
        t.extend_from_slice(&payload);
        t
    }

    fn udp_l4(&mut self, sport: u16, dport: u16) -> Vec<u8> {
        let plen = self.payload_len();
        let payload = self.bytes(plen);
        let mut u = udp(sport, dport, &payload);
        if self.chance(0.1) {
            let v = self.u16i();
            put16(&mut u, 4, v);
        }
        u
    }

    /// An embedded IPv4 packet as an ICMP error quotes it.
    fn embedded(&mut self) -> Vec<u8> {
        let (src, dst, proto, sport, dport) = match self.below(8) {
            0 => (VIP, NODE, IPPROTO_TCP, 80, EST_PORT),
            1 => (VIP, B12, IPPROTO_UDP, UDP_CONN_PORT, UDP_PEER_PORT),
            2 => (VIP, CLIENT, IPPROTO_TCP, 80, self.rng.gen()),
            3 => (VIP, CLIENT, IPPROTO_UDP, 53, self.rng.gen()),
            4 => (VIP3, CLIENT, IPPROTO_TCP, 8080, self.rng.gen()),
            _ => {
                let proto = match self.below(6) {
                    0..=2 => IPPROTO_TCP,
                    3 | 4 => IPPROTO_UDP,
                    _ => self.rng.gen(),
                };
                (
                    self.any_addr(),
                    self.any_addr(),
                    proto,
                    self.port(),
                    self.port(),
                )
            }
        };
        let quoted = match self.below(10) {
            0 => self.below(8),
            1 | 2 => 20 + self.below(40),
            _ => 8,
        };
        let l4 = match proto {
            IPPROTO_TCP => tcp(sport, dport, ACK, &[]),
            IPPROTO_UDP => udp(sport, dport, &[0; 12]),
            _ => self.bytes(20),
        };
        let mut full = l4.clone();
        full.resize(quoted.max(l4.len()), 0);
        let claimed = 20 + self.below(1400);
        let mut e = self.ip_header(src, dst, proto, claimed);
        e.extend_from_slice(&full[..quoted]);
        e
    }

    fn icmp_l4(&mut self) -> Vec<u8> {
        let (ty, code) = match self.below(12) {
            0..=6 => (3, 4),
            7 => (8, 0),
            8 => (0, 0),
            9 => (3, self.rng.gen()),
            10 => (11, 0),
            _ => (self.rng.gen(), self.rng.gen()),
        };
        let mut m = vec![ty, code, 0, 0, 0, 0, 0x05, 0x78];
        if ty == 3 || self.chance(0.2) {
            let e = self.embedded();
            m.extend_from_slice(&e);
        } else {
            let n = self.below(64);
            let b = self.bytes(n);
            m.extend_from_slice(&b);
        }
        let c = csum(&m);
        put16(&mut m, 2, c);
        m
    }

    /// A random IPv4 packet (L3), biased towards the services and sockets.
    fn l3_packet(&mut self) -> Vec<u8> {
        let (src, dst, proto, sport, dport) = match self.below(20) {
            0 => (NODE, VIP, IPPROTO_TCP, EST_PORT, 80),
            1 => (B12, VIP, IPPROTO_UDP, UDP_PEER_PORT, UDP_CONN_PORT),
            _ => {
                let src = if self.chance(0.5) {
                    CLIENT
                } else {
                    self.any_addr()
                };
                let dst = match self.below(10) {
                    0..=3 => VIP,
                    4 => VIP2,
                    5 => VIP3,
                    _ => self.any_addr(),
                };
                let proto = match self.below(20) {
                    0..=7 => IPPROTO_TCP,
                    8..=12 => IPPROTO_UDP,
                    13..=16 => IPPROTO_ICMP,
                    17 => 41,
                    _ => self.rng.gen(),
                };
                let sport = if self.chance(0.7) {
                    self.rng.gen_range(1024..=65535)
                } else {
                    self.port()
                };
                (src, dst, proto, sport, self.port())
            }
        };
        let l4 = match proto {
            IPPROTO_TCP => self.tcp_l4(sport, dport),
            IPPROTO_UDP => self.udp_l4(sport, dport),
            IPPROTO_ICMP => self.icmp_l4(),
            _ => {
                let n = self.below(80);
                self.bytes(n)
            }
        };
        let mut p = self.ip_header(src, dst, proto, l4.len());
        p.extend_from_slice(&l4);
        p
    }

    fn padding(&mut self) -> Vec<u8> {
        match self.below(10) {
            0 => vec![0; 1 + self.below(46)],
            1 => {
                let n = 1 + self.below(46);
                self.bytes(n)
            }
            _ => vec![],
        }
    }

    /// A frame for the balancer.
    fn xdp_frame(&mut self, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
        let f = match self.below(20) {
            0 => {
                let n = 14 + self.below(300);
                ("random".to_string(), self.bytes(n))
            }
            1 => {
                let n = 34 + self.below(300);
                let mut f = self.bytes(n);
                put16(&mut f, 12, 0x0800);
                ("random IPv4".to_string(), f)
            }
            2 => {
                let et = self.pick(&[0x0806, 0x86dd, 0x8100, 0x88a8, 0x0800, 0x0000, 0xffff]);
                let mut f = eth(MAC12, CLIENT_MAC, et);
                let p = self.l3_packet();
                if et == 0x8100 || et == 0x88a8 {
                    f.extend_from_slice(&[0, 1, 0x08, 0x00]); // VLAN 1, IPv4
                }
                f.extend_from_slice(&p);
                (format!("ethertype {et:#06x}"), f)
            }
            3..=13 => {
                let mut f = eth(MAC12, CLIENT_MAC, 0x0800);
                let p = self.l3_packet();
                f.extend_from_slice(&p);
                let pad = self.padding();
                f.extend_from_slice(&pad);
                ("structured".to_string(), f)
            }
            _ => self.mutated_seed(seeds, false),
        };
        self.finish(f, false)
    }

    /// A GUE frame for the TC program, mostly well-formed around a random
    /// inner packet, with every field sometimes wrong.
    /// A random seed with 1-4 mutations (`gue`: mutations aware of GUE).
    fn mutated_seed(&mut self, seeds: &[(String, Vec<u8>)], gue: bool) -> (String, Vec<u8>) {
        let (name, s) = &seeds[self.below(seeds.len())];
        let mut f = s.clone();
        for _ in 0..1 + self.below(4) {
            self.mutate(&mut f, gue);
        }
        (format!("mutated seed {name}"), f)
    }

    /// Last touch on every generated frame: one more mutation one time in
    /// ten, then the size clamp.
    fn finish(&mut self, mut f: (String, Vec<u8>), gue: bool) -> (String, Vec<u8>) {
        if self.chance(0.1) {
            self.mutate(&mut f.1, gue);
        }
        self.clamp(&mut f.1);
        f
    }

    fn gue_frame(&mut self) -> Vec<u8> {
        let src = match self.below(10) {
            0..=5 => B12,
            6 => B13,
            7 => self.pick(&[B14, R5, FAR, NODE]),
            _ => self.any_addr(),
        };
        let dst = if self.chance(0.92) {
            NODE
        } else {
            self.any_addr()
        };
        let n = match self.below(20) {
            0..=5 => 0,
            6..=13 => 1,
            14..=17 => 2 + self.below(7),
            _ => 9 + self.below(23),
        };
        let hops: Vec<Ipv4Addr> = (0..n)
            .map(|_| match self.below(10) {
                0..=4 => B13,
                5 => NODE,
                6 => Ipv4Addr::UNSPECIFIED,
                7 => R5,
                _ => self.any_addr(),
            })
            .collect();
        let next = if self.chance(0.85) {
            self.below(n + 1)
        } else {
            self.u8i() as usize
        };
        let inner = if self.chance(0.05) {
            // Nested GUE: the inner packet is itself GUE, to a VIP.
            let mut gi = gue_header(4, 0, &[B13]);
            let p = self.l3_packet();
            gi.extend_from_slice(&p);
            gue_outer(B12, VIP, 0x8001, GUE_PORT, &gi)
        } else {
            self.l3_packet()
        };
        let mut g = gue_header(4, next as u8, &hops);
        if self.chance(0.05) {
            g[0] = self.u8i();
        }
        if self.chance(0.05) {
            g[1] = self.pick(&[41, 0, 6, 17, 94, 255]);
        }
        for b in &mut g[2..6] {
            if self.chance(0.02) {
                *b = self.u8i();
            }
        }
        if self.chance(0.03) {
            // Hop list and N disagree.
            let extra = self.below(4);
            for _ in 0..extra {
                g.extend_from_slice(&B13.octets());
            }
            if self.chance(0.5) && g.len() >= 12 {
                g.truncate(g.len() - 4);
            }
        }
        g.extend_from_slice(&inner);
        let sport = self.rng.gen::<u16>() | 0x8000;
        let dport = if self.chance(0.95) {
            GUE_PORT
        } else {
            self.port()
        };
        let mut o = gue_outer(src, dst, sport, dport, &g);
        if self.chance(0.04) {
            // Outer options (lengths fixed).
            let k = 1 + self.below(10);
            let opts = vec![1u8; 4 * k];
            o.splice(20..20, opts);
            o[0] = 0x45 + k as u8;
            let tot = o.len() as u16;
            put16(&mut o, 2, tot);
        }
        if self.chance(0.03) {
            o[0] = (self.below(16) as u8) << 4 | (o[0] & 15);
        }
        if self.chance(0.03) {
            o[0] = (o[0] & 0xf0) | self.below(16) as u8;
        }
        if self.chance(0.03) {
            let v = self.pick(&[0x2000, 0x0001, 0x1fff, 0x6000, 0x8000]);
            put16(&mut o, 6, v);
        }
        if self.chance(0.04) {
            let v = self.u16i();
            put16(&mut o, 2, v);
        }
        if self.chance(0.04) {
            let ihl = (o[0] & 15) as usize * 4;
            if ihl >= 20 && ihl + 8 <= o.len() {
                let v = self.u16i();
                put16(&mut o, ihl + 4, v);
            }
        }
        fix_ip_csum(&mut o, 0);
        if self.chance(0.03) {
            o[11] ^= 0x33;
        }
        let mut f = eth(MAC12, CLIENT_MAC, 0x0800);
        f.extend_from_slice(&o);
        let pad = self.padding();
        f.extend_from_slice(&pad);
        f
    }

    /// A frame for the TC program.
    fn tc_frame(&mut self, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
        let f = match self.below(20) {
            0 => {
                let n = 14 + self.below(300);
                ("random".to_string(), self.bytes(n))
            }
            1 => {
                // Random bytes that pass the "GUE for this node" test.
                let n = 50 + self.below(200);
                let mut f = self.bytes(n);
                put16(&mut f, 12, 0x0800);
                f[14] = 0x45;
                f[14 + 9] = IPPROTO_UDP;
                let s = self.pick(&[B12, B13, NODE]);
                f[26..30].copy_from_slice(&s.octets());
                f[30..34].copy_from_slice(&NODE.octets());
                put16(&mut f, 36, GUE_PORT);
                ("random GUE-shaped".to_string(), f)
            }
            2 => {
                let mut f = eth(MAC12, CLIENT_MAC, 0x0800);
                let p = self.l3_packet();
                f.extend_from_slice(&p);
                ("plain IPv4".to_string(), f)
            }
            3..=14 => ("structured GUE".to_string(), self.gue_frame()),
            _ => self.mutated_seed(seeds, true),
        };
        self.finish(f, true)
    }

    /// Test runs need at least an Ethernet header; keep frames below a page.
    fn clamp(&mut self, f: &mut Vec<u8>) {
        if f.len() < 14 {
            let n = 14 - f.len();
            let b = self.bytes(n);
            f.extend_from_slice(&b);
        }
        f.truncate(3000);
    }

    /// One mutation; `gue`: also GUE- and inner-aware ones. Lengths and
    /// checksums are repaired half of the time so that deeper checks run.
    fn mutate(&mut self, f: &mut Vec<u8>, gue: bool) {
        let len = f.len();
        let inner_at = |f: &[u8]| {
            if f.len() >= 50 {
                Some(14 + 20 + 8 + 8 + 4 * f[49] as usize)
            } else {
                None
            }
        };
        let mut repair = self.chance(0.5);
        match self.below(if gue { 14 } else { 10 }) {
            0 => {
                let i = self.below(len);
                f[i] ^= 1 << self.below(8);
            }
            1 => {
                let i = self.below(len);
                f[i] = self.u8i();
            }
            2 if len >= 2 => {
                let i = self.below(len - 1);
                let v = self.u16i();
                put16(f, i, v);
            }
            3 => {
                let n = 14 + self.below(len.saturating_sub(14).max(1));
                f.truncate(n);
                repair = false;
            }
            4 => {
                let n = 1 + self.below(64);
                let b = self.bytes(n);
                f.extend_from_slice(&b);
            }
            5 if len > 14 => {
                let at = 14 + self.below(len - 14);
                let n = 1 + self.below(8);
                let b = self.bytes(n);
                f.splice(at..at, b);
            }
            6 if len > 15 => {
                let at = 14 + self.below(len - 14);
                let n = (1 + self.below(8)).min(len - at);
                f.drain(at..at + n);
            }
            7 if len >= 34 => {
                // Outer IPv4 fields.
                match self.below(7) {
                    0 => f[14] = self.u8i(),
                    1 => {
                        let v = self.u16i();
                        put16(f, 16, v);
                        repair = false;
                    }
                    2 => {
                        let v =
                            self.pick(&[0x2000, 0x0001, 0x1fff, 0x4000, 0x6000, 0x8000, 0xffff]);
                        put16(f, 20, v);
                    }
                    3 => f[23] = self.u8i(),
                    4 => {
                        let a = self.any_addr();
                        f[26..30].copy_from_slice(&a.octets());
                    }
                    5 => {
                        let a = self.any_addr();
                        f[30..34].copy_from_slice(&a.octets());
                    }
                    _ => put16(f, 12, 0x0800),
                }
            }
            8 if len >= 14 + 20 + 4 => {
                // L4 ports / flags behind the (claimed) IPv4 header.
                let ihl = (f[14] & 15) as usize * 4;
                let at = 14 + ihl.max(20);
                if at + 14 <= len {
                    match self.below(3) {
                        0 => {
                            let p = self.port();
                            put16(f, at + 2, p);
                        }
                        1 => f[at + 13] = self.u8i(),
                        _ => f[at + 12] = self.u8i(),
                    }
                }
            }
            9 => {
                let n = 1 + self.below(16);
                for _ in 0..n {
                    let i = self.below(len);
                    f[i] = self.rng.gen();
                }
            }
            10 if len >= 50 => {
                // A GUE byte.
                let i = 42 + self.below(8);
                f[i] = self.u8i();
                if i == 49 && self.chance(0.5) {
                    f[42] = (f[42] & 0xe0) | ((1 + f[49] as usize) & 0x1f) as u8;
                }
            }
            11 if len >= 50 => {
                // Change N, keep hlen consistent, add or remove hop words.
                let old = f[49] as usize;
                let new = self.below(12);
                f[49] = new as u8;
                f[42] = (f[42] & 0xe0) | ((1 + new) & 0x1f) as u8;
                if new > old {
                    let words: Vec<u8> = (0..new - old)
                        .flat_map(|_| self.any_addr().octets())
                        .collect();
                    let at = (50 + 4 * old).min(f.len());
                    f.splice(at..at, words);
                } else if self.chance(0.7) {
                    let at = (50 + 4 * new).min(f.len());
                    let end = (50 + 4 * old).min(f.len());
                    f.drain(at..end);
                }
                if self.chance(0.5) {
                    f[48] = self.below(new + 2) as u8;
                }
            }
            12 if len >= 50 => {
                // A hop word.
                let n = f[49] as usize;
                if n > 0 && 50 + 4 * n <= len {
                    let k = self.below(n);
                    let a = self.any_addr();
                    f[50 + 4 * k..54 + 4 * k].copy_from_slice(&a.octets());
                }
            }
            13 => {
                // An inner IPv4 field.
                if let Some(at) = inner_at(f) {
                    if at + 20 <= f.len() {
                        match self.below(6) {
                            0 => f[at] = self.u8i(),
                            1 => {
                                let v = self.u16i();
                                put16(f, at + 2, v);
                                repair = false;
                            }
                            2 => {
                                let v = self.pick(&[0x2000, 0x0001, 0x1fff, 0x4000, 0x8000]);
                                put16(f, at + 6, v);
                            }
                            3 => f[at + 9] = self.u8i(),
                            4 => {
                                let a = self.any_addr();
                                f[at + 12..at + 16].copy_from_slice(&a.octets());
                            }
                            _ => {
                                let a = self.any_addr();
                                f[at + 16..at + 20].copy_from_slice(&a.octets());
                            }
                        }
                    }
                }
            }
            _ => {
                let i = self.below(len);
                f[i] = !f[i];
            }
        }
        if repair {
            if gue {
                fix_gue_lengths(f);
            } else {
                fix_ip_lengths(f);
            }
        }
    }
}

/// Make the IPv4 total length cover the frame and the checksum valid.
fn fix_ip_lengths(f: &mut [u8]) {
    if f.len() >= 34 && f.len() - 14 <= 0xffff {
        let tot = (f.len() - 14) as u16;
        put16(f, 16, tot);
        fix_ip_csum(f, 14);
    }
}

/// Make outer, UDP and inner lengths consistent with the frame (assuming an
/// outer header without options and no padding), checksums valid.
fn fix_gue_lengths(f: &mut [u8]) {
    if f.len() < 50 || f.len() - 14 > 0xffff {
        return;
    }
    let tot = f.len() - 14;
    put16(f, 16, tot as u16);
    put16(f, 38, (tot - 20) as u16);
    fix_ip_csum(f, 14);
    let at = 50 + 4 * f[49] as usize;
    if at + 20 <= f.len() {
        put16(f, at + 2, (f.len() - at) as u16);
        fix_ip_csum(f, at);
    }
}

// ---- seeds and sweeps -----------------------------------------------------------------------------

fn client(mac: [u8; 6], l3: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, CLIENT_MAC, 0x0800);
    f.extend_from_slice(l3);
    f
}

fn icmp_frag_needed(emb_src: Ipv4Addr, emb_dst: Ipv4Addr, proto: u8, sp: u16, dp: u16) -> Vec<u8> {
    let l4 = if proto == IPPROTO_TCP {
        tcp(sp, dp, ACK, &[])
    } else {
        udp(sp, dp, &[0; 12])
    };
    let mut emb = ipv4(emb_src, emb_dst, proto, l4.len(), 0x4000, &[]);
    emb.extend_from_slice(&l4[..8]);
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&emb);
    let c = csum(&icmp);
    put16(&mut icmp, 2, c);
    icmp
}

fn xdp_seeds(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
    let syn = |dst, dport| l3(CLIENT, dst, IPPROTO_TCP, &tcp(40000, dport, SYN, b""));
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("tcp syn VIP:80".into(), client(mac, &syn(VIP, 80))),
        (
            "tcp data VIP:80".into(),
            client(
                mac,
                &l3(
                    CLIENT,
                    VIP,
                    IPPROTO_TCP,
                    &tcp(40001, 80, ACK | PSH, &[0x41; 100]),
                ),
            ),
        ),
        ("tcp syn VIP3:8080".into(), client(mac, &syn(VIP3, 8080))),
        (
            "tcp syn VIP2:443 (no backend)".into(),
            client(mac, &syn(VIP2, 443)),
        ),
        (
            "udp VIP:53".into(),
            client(mac, &l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"query"))),
        ),
        (
            "udp VIP2:53".into(),
            client(mac, &l3(CLIENT, VIP2, IPPROTO_UDP, &udp(5353, 53, b"q"))),
        ),
        (
            "icmp frag-needed tcp".into(),
            client(
                mac,
                &l3(
                    ROUTER,
                    VIP,
                    IPPROTO_ICMP,
                    &icmp_frag_needed(VIP, CLIENT, IPPROTO_TCP, 80, 41000),
                ),
            ),
        ),
        (
            "icmp frag-needed udp".into(),
            client(
                mac,
                &l3(
                    ROUTER,
                    VIP,
                    IPPROTO_ICMP,
                    &icmp_frag_needed(VIP, CLIENT, IPPROTO_UDP, 53, 5353),
                ),
            ),
        ),
        (
            "icmp echo VIP".into(),
            client(
                mac,
                &l3(CLIENT, VIP, IPPROTO_ICMP, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]),
            ),
        ),
        ("tcp syn non-VIP".into(), client(mac, &syn(OTHER, 80))),
        (
            "udp GUE to node".into(),
            client(
                mac,
                &l3(
                    B12,
                    NODE,
                    IPPROTO_UDP,
                    &udp(0x8123, GUE_PORT, &[1, 4, 0, 0, 0, 0, 0, 0]),
                ),
            ),
        ),
        ("arp".into(), {
            let mut f = eth([0xff; 6], CLIENT_MAC, 0x0806);
            f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&CLIENT_MAC);
            f.extend_from_slice(&CLIENT.octets());
            f.extend_from_slice(&[0; 6]);
            f.extend_from_slice(&VIP.octets());
            f
        }),
        ("ip options VIP:80".into(), {
            let t = tcp(40002, 80, SYN, b"");
            let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, t.len(), 0, &[1, 1, 1, 0]);
            p.extend_from_slice(&t);
            client(mac, &p)
        }),
        (
            "big tcp VIP:80".into(),
            client(
                mac,
                &l3(
                    CLIENT,
                    VIP,
                    IPPROTO_TCP,
                    &tcp(40003, 80, ACK, &[0x42; 1440]),
                ),
            ),
        ),
        ("padded tcp VIP:80".into(), {
            let mut f = client(
                mac,
                &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40004, 80, ACK, b"")),
            );
            f.resize(60, 0);
            f
        }),
        ("fragment VIP".into(), {
            let t = tcp(40005, 80, ACK, b"0123456789abcdef");
            let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, t.len(), 0x2000, &[]);
            p.extend_from_slice(&t);
            client(mac, &p)
        }),
        ("vlan tcp VIP".into(), {
            let mut f = eth(mac, CLIENT_MAC, 0x8100);
            f.extend_from_slice(&[0, 7, 8, 0]);
            f.extend_from_slice(&syn(VIP, 80));
            f
        }),
        ("ipv6".into(), {
            let mut f = eth(mac, CLIENT_MAC, 0x86dd);
            f.extend_from_slice(&[0x60, 0, 0, 0, 0, 20, 6, 64]);
            f.extend_from_slice(&[0; 32]);
            f.extend_from_slice(&tcp(1, 80, SYN, b""));
            f
        }),
    ];
    // The established flow's packets (also used for TC seeds).
    v.push((
        "tcp established tuple".into(),
        client(
            mac,
            &l3(NODE, VIP, IPPROTO_TCP, &tcp(EST_PORT, 80, ACK, b"x")),
        ),
    ));
    v
}

fn tc_seeds(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let data = l3(
        CLIENT,
        VIP,
        IPPROTO_TCP,
        &tcp(40001, 80, ACK | PSH, b"GET / HTTP/1.1\r\n"),
    );
    let est = l3(
        NODE,
        VIP,
        IPPROTO_TCP,
        &tcp(EST_PORT, 80, ACK | PSH, b"more"),
    );
    let dns = l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"query"));
    let connected = l3(
        B12,
        VIP,
        IPPROTO_UDP,
        &udp(UDP_PEER_PORT, UDP_CONN_PORT, b"hi"),
    );
    let icmp_est = l3(
        ROUTER,
        VIP,
        IPPROTO_ICMP,
        &icmp_frag_needed(VIP, NODE, IPPROTO_TCP, 80, EST_PORT),
    );
    let icmp_udp = l3(
        ROUTER,
        VIP,
        IPPROTO_ICMP,
        &icmp_frag_needed(VIP, B12, IPPROTO_UDP, UDP_CONN_PORT, UDP_PEER_PORT),
    );
    let icmp_listener = l3(
        ROUTER,
        VIP,
        IPPROTO_ICMP,
        &icmp_frag_needed(VIP, CLIENT, IPPROTO_TCP, 80, 41000),
    );
    let echo = l3(CLIENT, VIP, IPPROTO_ICMP, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]);
    let not_vip = l3(CLIENT, OTHER, IPPROTO_TCP, &tcp(1, 80, SYN, b""));
    let wild = l3(CLIENT, VIP3, IPPROTO_TCP, &tcp(40007, 8080, ACK, b""));
    let g = |src: Ipv4Addr, next: u8, hops: &[Ipv4Addr], inner: &[u8]| {
        gue_frame(mac, MAC12, src, NODE, next, hops, inner)
    };
    let eight = [B13, B12, B14, R5, FAR, NODE, B13, B12];
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("syn no hop".into(), g(B12, 0, &[], &syn)),
        ("syn 1 hop".into(), g(B12, 0, &[B13], &syn)),
        ("data 1 hop (forward)".into(), g(B12, 0, &[B13], &data)),
        ("data last hop".into(), g(B12, 1, &[B13], &data)),
        ("data loop guard".into(), g(B12, 0, &[NODE], &data)),
        ("data 8 hops next 3".into(), g(B13, 3, &eight, &data)),
        ("data 8 hops next 8".into(), g(B13, 8, &eight, &data)),
        ("established".into(), g(B12, 0, &[B13], &est)),
        ("udp listener last hop".into(), g(B12, 0, &[], &dns)),
        ("udp listener 1 hop".into(), g(B12, 0, &[B13], &dns)),
        ("udp connected".into(), g(B12, 0, &[B13], &connected)),
        ("icmp established".into(), g(B12, 0, &[B13], &icmp_est)),
        ("icmp connected udp".into(), g(B12, 0, &[B13], &icmp_udp)),
        ("icmp listener".into(), g(B12, 0, &[B13], &icmp_listener)),
        ("icmp echo".into(), g(B12, 0, &[], &echo)),
        ("inner not VIP".into(), g(B12, 0, &[], &not_vip)),
        ("from outsider".into(), g(OUTSIDER, 0, &[], &syn)),
        ("from node".into(), g(NODE, 0, &[], &syn)),
        ("wildcard listener".into(), g(R5, 0, &[B12], &wild)),
        ("hop 0".into(), g(B12, 0, &[Ipv4Addr::UNSPECIFIED], &data)),
        ("nested GUE".into(), {
            let mut gi = gue_header(4, 0, &[B13]);
            gi.extend_from_slice(&data);
            g(B12, 0, &[B13], &gue_outer(B12, VIP, 0x8001, GUE_PORT, &gi))
        }),
        ("inner ipv6".into(), {
            let mut f = g(B12, 0, &[], &data);
            f[43] = 41;
            f
        }),
        (
            "to other node".into(),
            gue_frame(mac, MAC12, B12, B13, 0, &[], &syn),
        ),
        (
            "udp other port".into(),
            client(mac, &l3(B12, NODE, IPPROTO_UDP, &udp(1234, 5000, b"hello"))),
        ),
        (
            "tcp to node".into(),
            client(
                mac,
                &l3(B12, NODE, IPPROTO_TCP, &tcp(1234, GUE_PORT, SYN, b"")),
            ),
        ),
    ];
    v.push(("arp".into(), xdp_seeds(mac)[11].1.clone()));
    v
}

/// Systematic variants of the XDP seeds.
fn xdp_sweeps(seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, s) in seeds {
        // Truncation at every offset (big frames: every offset of the first
        // 160 bytes, then every 13th).
        for n in 14..s.len() {
            if n <= 160 || n % 13 == 0 {
                out.push((format!("{name} truncated to {n}"), s[..n].to_vec()));
            }
        }
        if be16(s, 12) != 0x0800 {
            continue;
        }
        let ihl = (s[14] & 15) as usize * 4;
        let real = s.len() - 14;
        for v in 0..16u8 {
            let mut f = s.clone();
            f[14] = (f[14] & 0xf0) | v;
            out.push((format!("{name} IHL {v}"), f.clone()));
            fix_ip_csum(&mut f, 14);
            out.push((format!("{name} IHL {v}, checksum fixed"), f));
            let mut f = s.clone();
            f[14] = (v << 4) | (f[14] & 15);
            fix_ip_csum(&mut f, 14);
            out.push((format!("{name} version {v}"), f));
        }
        let tots = [
            0,
            1,
            19,
            20,
            21,
            ihl.saturating_sub(1),
            ihl,
            ihl + 4,
            ihl + 7,
            ihl + 8,
            ihl + 19,
            ihl + 20,
            real - 1,
            real,
            real + 1,
            0xffff,
        ];
        for t in tots {
            let mut f = s.clone();
            put16(&mut f, 16, t as u16);
            fix_ip_csum(&mut f, 14);
            out.push((format!("{name} total length {t}"), f));
        }
        for fr in [
            0x2000u16, 0x0001, 0x1fff, 0x4000, 0x6000, 0x8000, 0xffff, 0x2001,
        ] {
            let mut f = s.clone();
            put16(&mut f, 20, fr);
            fix_ip_csum(&mut f, 14);
            out.push((format!("{name} frag {fr:#06x}"), f));
        }
    }
    // Every protocol number to a VIP and to another address.
    for (dst, name) in [(VIP, "VIP"), (OTHER, "other")] {
        let base = client(
            MAC12,
            &l3(
                CLIENT,
                dst,
                IPPROTO_TCP,
                &tcp(40000, 80, SYN, b"0123456789"),
            ),
        );
        for p in 0..=255u8 {
            let mut f = base.clone();
            f[23] = p;
            fix_ip_csum(&mut f, 14);
            out.push((format!("protocol {p} to {name}"), f));
        }
    }
    // The embedded header of an ICMP frag-needed: every IHL, version,
    // protocol, and the quoted length cut at every byte.
    let icmp = client(
        MAC12,
        &l3(
            ROUTER,
            VIP,
            IPPROTO_ICMP,
            &icmp_frag_needed(VIP, CLIENT, IPPROTO_TCP, 80, 41000),
        ),
    );
    let emb = 14 + 20 + 8;
    for v in 0..=255u8 {
        let mut f = icmp.clone();
        f[emb] = v;
        out.push((format!("icmp embedded byte 0 = {v:#04x}"), f));
        let mut f = icmp.clone();
        f[emb + 9] = v;
        out.push((format!("icmp embedded protocol {v}"), f));
    }
    for t in 20..=(icmp.len() - 14 + 4) {
        let mut f = icmp.clone();
        put16(&mut f, 16, t as u16);
        fix_ip_csum(&mut f, 14);
        out.push((format!("icmp total length {t}"), f));
    }
    for code in 0..=255u8 {
        let mut f = icmp.clone();
        f[14 + 20 + 1] = code;
        out.push((format!("icmp type 3 code {code}"), f));
    }
    // Sizes around the MTU (1500 - 36 without a listed hop, - 40 with one),
    // over many flows so that every kind of first hop is met.
    for sport in 50000..50048u16 {
        for tot in [1458usize, 1459, 1460, 1461, 1463, 1464, 1465, 1480, 1500] {
            let t = tcp(sport, 80, ACK, &vec![0x55; tot - 40]);
            out.push((
                format!("TCP VIP:80 from port {sport}, total length {tot}"),
                client(MAC12, &l3(CLIENT, VIP, IPPROTO_TCP, &t)),
            ));
        }
    }
    out
}

/// Systematic variants of the TC seeds.
fn tc_sweeps(mac: [u8; 6], seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, s) in seeds {
        for n in 14..s.len() {
            out.push((format!("{name} truncated to {n}"), s[..n].to_vec()));
        }
    }
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    // Every value of every GUE byte, on a forwardable and a SYN packet.
    for (what, inner) in [("data", &data), ("syn", &syn)] {
        let base = gue_frame(mac, MAC12, B12, NODE, 0, &[B13], inner);
        for i in 0..8 {
            for v in 0..=255u8 {
                let mut f = base.clone();
                f[42 + i] = v;
                out.push((format!("{what}: GUE byte {i} = {v:#04x}"), f));
            }
        }
    }
    // Hop lists of 0-31 entries (and N beyond hlen's 5 bits), every next
    // index up to N + 1, lengths consistent.
    for n in (0..=31usize).chain([32, 33, 63, 64, 255]) {
        let hops: Vec<Ipv4Addr> = (0..n).map(|i| [B13, R5, FAR, B14][i % 4]).collect();
        for next in 0..=(n + 1).min(34) {
            // Built by hand: gue_header's hlen (1 + N) overflows for N 255.
            let mut g = vec![((1 + n) & 0x1f) as u8, 4, 0, 0, 0, 0, next as u8, n as u8];
            for h in &hops {
                g.extend_from_slice(&h.octets());
            }
            g.extend_from_slice(&data);
            let mut f = eth(mac, MAC12, 0x0800);
            f.extend_from_slice(&gue_outer(B12, NODE, 0x8123, GUE_PORT, &g));
            out.push((format!("{n} hops, next {next}"), f));
        }
    }
    // Hop words present beyond or short of N, lengths consistent.
    for (n, words) in [
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 2),
        (1, 3),
        (2, 1),
        (8, 9),
        (8, 7),
    ] {
        let mut g = gue_header(4, 0, &[]);
        g[0] = 1 + n as u8;
        g[7] = n as u8;
        for _ in 0..words {
            g.extend_from_slice(&B13.octets());
        }
        g.extend_from_slice(&data);
        let mut f = eth(mac, MAC12, 0x0800);
        f.extend_from_slice(&gue_outer(B12, NODE, 0x8123, GUE_PORT, &g));
        out.push((format!("N {n} with {words} hop words"), f));
    }
    let base = gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &data);
    let inner = 14 + 20 + 8 + 12;
    for v in 0..16u8 {
        // Outer IHL, with and without lengths fixed.
        let mut f = base.clone();
        f[14] = 0x40 | v;
        out.push((format!("outer IHL {v}"), f.clone()));
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer IHL {v}, checksum fixed"), f));
        // Outer version.
        let mut f = base.clone();
        f[14] = v << 4 | 5;
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer version {v}"), f));
        // Inner IHL and version.
        let mut f = base.clone();
        f[inner] = 0x40 | v;
        fix_ip_csum(&mut f, inner);
        out.push((format!("inner IHL {v}"), f));
        let mut f = base.clone();
        f[inner] = v << 4 | 5;
        out.push((format!("inner version {v}"), f));
    }
    let tot = base.len() - 14;
    for t in [
        0,
        8,
        19,
        20,
        27,
        28,
        35,
        36,
        40,
        55,
        56,
        tot - 1,
        tot + 1,
        0xffff,
    ] {
        let mut f = base.clone();
        put16(&mut f, 16, t as u16);
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer total length {t}"), f));
        let mut f = base.clone();
        put16(&mut f, 38, t as u16);
        out.push((format!("UDP length {t}"), f));
        let mut f = base.clone();
        put16(&mut f, 16, t as u16);
        put16(&mut f, 38, (t as u16).wrapping_sub(20));
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer and UDP length {t} (consistent)"), f));
        let mut f = base.clone();
        put16(&mut f, inner + 2, t as u16);
        fix_ip_csum(&mut f, inner);
        out.push((format!("inner total length {t}"), f));
    }
    for fr in [0x2000u16, 0x0001, 0x1fff, 0x6000, 0x8000, 0xffff] {
        let mut f = base.clone();
        put16(&mut f, 20, fr);
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer frag {fr:#06x}"), f));
        let mut f = base.clone();
        put16(&mut f, inner + 6, fr);
        fix_ip_csum(&mut f, inner);
        out.push((format!("inner frag {fr:#06x}"), f));
    }
    for p in 0..=255u8 {
        let mut f = base.clone();
        f[inner + 9] = p;
        fix_ip_csum(&mut f, inner);
        out.push((format!("inner protocol {p}"), f));
    }
    // Outer source and destination from the interesting set.
    let addrs = [
        VIP,
        VIP2,
        NODE,
        B12,
        B13,
        B14,
        R5,
        FAR,
        CLIENT,
        OUTSIDER,
        OTHER,
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::BROADCAST,
    ];
    for a in addrs {
        let mut f = base.clone();
        f[26..30].copy_from_slice(&a.octets());
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer source {a}"), f));
        let mut f = base.clone();
        f[30..34].copy_from_slice(&a.octets());
        fix_ip_csum(&mut f, 14);
        out.push((format!("outer destination {a}"), f));
        let mut f = base.clone();
        f[inner + 16..inner + 20].copy_from_slice(&a.octets());
        fix_ip_csum(&mut f, inner);
        out.push((format!("inner destination {a}"), f));
        let mut f = base.clone();
        f[50..54].copy_from_slice(&a.octets());
        out.push((format!("hop {a}"), f));
    }
    // Inner TCP data offsets.
    for doff in 0..16u8 {
        let mut f = base.clone();
        f[inner + 20 + 12] = doff << 4;
        out.push((format!("inner TCP doff {doff}"), f));
    }
    out
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

fn worker(prog: Prog, seed: u64, w: usize, share: u64) -> Tally {
    let env = setup();
    let ctx = Ctx {
        prog,
        seed,
        worker: w,
    };
    let mut t = Tally::default();
    let mac = env.wa.nt0_mac;
    let seeds = match prog {
        Prog::Xdp => xdp_seeds(mac),
        Prog::Tc => tc_seeds(mac),
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
    }
    let salt = match prog {
        Prog::Xdp => 0x1111_0000,
        Prog::Tc => 0x2222_0000,
    };
    let mut g = Gen::new(seed ^ salt ^ (w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    while index < share {
        let (origin, f) = match prog {
            Prog::Xdp => g.xdp_frame(&seeds),
            Prog::Tc => g.tc_frame(&seeds),
        };
        run_one(&env, &ctx, &mut t, index, &origin, &f);
        index += 1;
    }
    check_stats(&env, &ctx, &mut t);
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
    ] {
        assert!(COUNTER_NAMES.contains(&n), "counter {n} unknown to nilb");
    }
    assert_eq!(MARK, nilb::dataplane::abi::sys::nilb_wire::NILB_XDP_MARK);
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
    let threads = env_u64("NILB_FUZZ_THREADS", 1).max(1) as usize;
    let seed = env_u64("NILB_FUZZ_SEED", DEFAULT_SEED);
    let start = Instant::now();
    let per = packets / threads as u64;
    let handles: Vec<_> = (0..threads)
        .map(|w| {
            let share = if w == 0 {
                packets - per * (threads as u64 - 1)
            } else {
                per
            };
            std::thread::spawn(move || worker(prog, seed, w, share))
        })
        .collect();
    let mut total = Tally::default();
    for h in handles {
        total.merge(h.join().expect("fuzz worker panicked"));
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
        "\nfuzz {name}: {} packets, seed {seed:#x}, {threads} worker(s), {secs:.1} s ({:.1} us/packet/worker){}",
        total.packets,
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
fn replay(prog: Prog, frame: &[u8]) {
    let env = setup();
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
    fuzz(Prog::Xdp);
}

#[test]
fn fuzz_tc_second_chance() {
    fuzz(Prog::Tc);
}

/// The checker itself: tampered results of real runs must be flagged.
#[test]
fn checker_flags_tampered_results() {
    let env = setup();
    let mac = env.wa.nt0_mac;
    let w = &env.wa;
    // A SYN that is sent out (XDP_TX).
    let (syn, v, out, d) = (40000..41000u16)
        .find_map(|sport| {
            let syn = client(
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
}
