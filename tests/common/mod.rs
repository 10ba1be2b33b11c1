//! Shared pieces of the BPF tests: a private network namespace per test,
//! packet builders that write every byte explicitly, and a loaded data plane
//! filled from a YAML config. Needs root (BPF, netns): tests that use it
//! start with `require_root!`, which skips them without root.

#![allow(dead_code)]

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::Command;

use libbpf_rs::OpenObject;
use nilb::config::Config;
use nilb::control::ControlPlane;
use nilb::dataplane::abi::COUNTER_NAMES;
use nilb::dataplane::Dataplane;
use nilb::hash::{flow_hash, FlowTuple};

/// A hop of an IPv4 cluster network's table (every fixture's).
pub fn v4(a: std::net::IpAddr) -> Ipv4Addr {
    match a {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(a) => panic!("hop {a} on an IPv4 cluster network"),
    }
}

pub const XDP_ABORTED: u32 = 0;
pub const XDP_DROP: u32 = 1;
pub const XDP_PASS: u32 = 2;
pub const XDP_TX: u32 = 3;
pub const XDP_REDIRECT: u32 = 4;
pub const TC_ACT_OK: u32 = 0;
pub const TC_ACT_SHOT: u32 = 2;
pub const TC_ACT_REDIRECT: u32 = 7;

/// Whether this process may load BPF programs and create network
/// namespaces: an effective uid of 0. `scripts/test.sh` and
/// `scripts/fuzz.sh` run as root, so nothing is skipped there.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Print the one line of a test skipped for want of root. It goes to the
/// process's stderr, not through the test harness's capture, so that plain
/// `cargo test` shows it.
pub fn skip_without_root(why: &str) {
    use std::io::Write;
    let test = std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .map(|n| format!(" {n}"))
        .unwrap_or_default();
    let _ = writeln!(std::io::stderr(), "skipping{test}: needs root ({why})");
}

/// First statement of a test that needs root (BPF_PROG_TEST_RUN, maps,
/// network namespaces): without root it prints one line and returns.
/// `require_root!("BPF, network namespace")`; the argument says what for.
macro_rules! require_root {
    ($why:expr) => {
        if !$crate::common::is_root() {
            $crate::common::skip_without_root($why);
            return;
        }
    };
}
pub(crate) use require_root;

/// This node (the balancer under test) and its neighbours.
pub const NODE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 11);
pub const B12: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 12);
pub const B13: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 13);
pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);
pub const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const MAC12: [u8; 6] = [0x02, 0, 0, 0, 0, 0x12];
pub const MAC13: [u8; 6] = [0x02, 0, 0, 0, 0, 0x13];
pub const CLIENT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// The GUE UDP port (the default `gue_port`).
pub const GUE_PORT: u16 = 19523;
/// `cluster.hash_seed` of the test configurations.
pub const HASH_SEED: u32 = 0x5eed1234;
/// The hand-off mark of the tests' data planes (`struct nilb_handoff`: the
/// source MAC of frames the balancer hands to its own node's TC program);
/// [`load`] writes it, a daemon makes a random one.
pub const MARK: [u8; 6] = [0x02, 0x6e, 0x69, 0x6c, 0x62, 0x01];

/// A private network namespace for the calling thread: veth `nt0` (this
/// node, 10.0.0.11/24, forwarding on) and `nt1`, static neighbours for
/// 10.0.0.12 and .13, the VIP on `lo`. It disappears with the thread.
pub struct TestNet {
    /// ifindex of nt0.
    pub ifindex: u32,
    /// MAC of nt0.
    pub mac: [u8; 6],
}

/// Run `ip ARGS` (split on whitespace); panics if it fails.
pub fn ip(args: &str) {
    let st = Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .expect("running ip");
    assert!(st.success(), "ip {args} failed");
}

impl TestNet {
    pub fn new() -> TestNet {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .expect("unshare(CLONE_NEWNET): tests need root");
        ip("link set lo up");
        ip("link add nt0 type veth peer name nt1");
        ip("addr add 10.0.0.11/24 dev nt0");
        ip("addr add 10.0.0.100/32 dev lo");
        ip("link set nt0 up");
        ip("link set nt1 up");
        ip("neigh replace 10.0.0.12 lladdr 02:00:00:00:00:12 dev nt0 nud permanent");
        ip("neigh replace 10.0.0.13 lladdr 02:00:00:00:00:13 dev nt0 nud permanent");
        std::fs::write("/proc/sys/net/ipv4/conf/nt0/forwarding", "1").expect("forwarding");
        let ifindex = nix::net::if_::if_nametoindex("nt0").expect("nt0") as u32;
        let mac_text = std::fs::read_to_string("/sys/class/net/nt0/address").unwrap_or_default();
        let mac = parse_mac(mac_text.trim()).unwrap_or_else(|| mac_from_ip_link("nt0"));
        TestNet { ifindex, mac }
    }
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .map(|p| u8::from_str_radix(p, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    v.try_into().ok()
}

/// MAC address of `dev` in this network namespace. /sys belongs to the
/// process's original namespace; ask `ip` instead.
pub fn mac_from_ip_link(dev: &str) -> [u8; 6] {
    let out = Command::new("ip")
        .args(["-o", "link", "show", dev])
        .output()
        .expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout);
    let mac = text
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .expect("link/ether in ip link output");
    parse_mac(mac).expect("MAC")
}

/// Internet checksum (RFC 1071) of `data`.
pub fn csum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += w as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Write `v` big-endian at `b[o..o + 2]`.
pub fn put16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_be_bytes());
}

/// Recompute the IPv4 header checksum of the header at `o` (IHL bytes).
pub fn fix_ip_csum(f: &mut [u8], o: usize) {
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

/// Ethernet header.
pub fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut v = Vec::with_capacity(14);
    v.extend_from_slice(&dst);
    v.extend_from_slice(&src);
    v.extend_from_slice(&ethertype.to_be_bytes());
    v
}

/// An IPv4 header (with `options`, padded to 4 bytes by the caller) with a
/// correct checksum for a payload of `payload_len` bytes.
pub fn ipv4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    payload_len: usize,
    frag: u16,
    options: &[u8],
) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let ihl = 5 + options.len() / 4;
    let total = ihl * 4 + payload_len;
    let mut h = vec![0x40 | ihl as u8, 0];
    h.extend_from_slice(&(total as u16).to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34]); // id
    h.extend_from_slice(&frag.to_be_bytes());
    h.push(64);
    h.push(proto);
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(options);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// A 20-byte TCP header (checksum left 0; nothing on the path checks it)
/// followed by `payload`.
pub fn tcp(sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(20 + payload.len());
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&1000u32.to_be_bytes());
    t.extend_from_slice(&(if flags & ACK != 0 { 2000u32 } else { 0 }).to_be_bytes());
    t.push(5 << 4);
    t.push(flags);
    t.extend_from_slice(&65535u16.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

/// A UDP header + payload (checksum 0).
pub fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// Set the TCP or UDP checksum of the IPv4 packet `p` (L3, no options
/// read beyond IHL) to the valid one.
pub fn fix_l4_csum(p: &mut [u8]) {
    let ihl = (p[0] & 15) as usize * 4;
    let at = ihl + if p[9] == 6 { 16 } else { 6 };
    p[at] = 0;
    p[at + 1] = 0;
    let mut v = p[12..20].to_vec();
    v.extend_from_slice(&[0, p[9]]);
    v.extend_from_slice(&((p.len() - ihl) as u16).to_be_bytes());
    v.extend_from_slice(&p[ihl..]);
    let c = match csum(&v) {
        0 if p[9] == 17 => 0xffff,
        c => c,
    };
    put16(p, at, c);
}

/// Does the outer UDP checksum of an outer-IPv4 frame verify (pseudo-header
/// and the whole datagram, summed byte by byte)?
pub fn outer_udp_verifies(f: &[u8]) -> bool {
    let o = &f[14..];
    let len = u16::from_be_bytes([o[24], o[25]]) as usize;
    let mut v = o[12..20].to_vec();
    v.extend_from_slice(&[0, 17]);
    v.extend_from_slice(&(len as u16).to_be_bytes());
    v.extend_from_slice(&o[20..20 + len]);
    csum(&v) == 0
}

/// An IPv4 packet (L3) from its parts.
pub fn l3(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = ipv4(src, dst, proto, l4.len(), 0, &[]);
    p.extend_from_slice(l4);
    p
}

/// A client's frame: Ethernet from `CLIENT_MAC` to `mac` around `l3`.
pub fn client_frame(mac: [u8; 6], l3: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, CLIENT_MAC, 0x0800);
    f.extend_from_slice(l3);
    f
}

/// The GUE header: version 0, C 0, hlen 1+N, proto, flags 0, private type
/// 0, next hop index, N, hops.
pub fn gue_header(inner_proto: u8, next: u8, hops: &[Ipv4Addr]) -> Vec<u8> {
    let mut g = vec![
        1 + hops.len() as u8,
        inner_proto,
        0,
        0,
        0,
        0,
        next,
        hops.len() as u8,
    ];
    for h in hops {
        g.extend_from_slice(&h.octets());
    }
    g
}

/// One's complement sum (folded, not inverted) of `data` as 16-bit
/// big-endian words (a last odd byte padded with 0).
pub fn sum16(data: &[u8]) -> u16 {
    !csum(data)
}

/// Fold a sum of 16-bit words to 16 bits (one's complement).
fn fold(mut s: u64) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The outer UDP checksum nilb's balancer writes (docs/design.md
/// "Checksums", local checksum offload) for the UDP datagram `datagram`
/// (header, checksum field ignored, GUE with its hops, inner packet) under
/// the pseudo-header `pseudo`: the inner packet counted as its own
/// checksums say it sums (an IPv4 header 0, a TCP or UDP segment minus its
/// pseudo-header's sum, an ICMP message 0; an IPv6 header as it is, minus
/// its addresses), so the result is the datagram's true checksum exactly
/// when the inner checksums are valid. 0 when the inner packet has none to
/// derive it from: UDP with checksum 0 or a length short of the packet,
/// IPv6 with extension headers (or anything else not IPv4 or IPv6 with
/// TCP, UDP, ICMP).
///
/// A datagram cut short of the headers read (only a test's malformed
/// input can be) gets 0.
pub fn lco_check(pseudo: &[u8], datagram: &[u8]) -> u16 {
    let b16 = |b: &[u8], o: usize| u16::from_be_bytes([b[o], b[o + 1]]) as u64;
    let Some(g) = datagram.get(8..12) else {
        return 0;
    };
    let hdr_end = 8 + 4 + 4 * (g[0] & 0x3f) as usize;
    let inner = datagram.get(hdr_end..).unwrap_or(&[]);
    let short = match g[1] {
        4 => inner.len() < 20 || inner.len() < (inner[0] & 15) as usize * 4 + 8,
        41 => inner.len() < 48,
        _ => true,
    };
    if short {
        return 0;
    }
    let share = match g[1] {
        4 => {
            let ihl = (inner[0] & 15) as usize * 4;
            // As the balancer's 32-bit arithmetic (only malformed test
            // input has a total length below the header's).
            let l4_len = (b16(inner, 2) as u32).wrapping_sub(ihl as u32);
            let proto = inner[9];
            if proto == 17 && (b16(inner, ihl + 6) == 0 || b16(inner, ihl + 4) as u32 != l4_len) {
                return 0;
            }
            if proto == 1 {
                0
            } else {
                let p = sum16(&inner[12..20]) as u64 + proto as u64 + (l4_len & 0xffff) as u64;
                (!fold(p)) as u64
            }
        }
        41 => {
            let nh = inner[6];
            let l4_len = b16(inner, 4);
            if !matches!(nh, 6 | 17 | 58) {
                return 0;
            }
            if nh == 17 && (b16(inner, 40 + 6) == 0 || b16(inner, 40 + 4) != l4_len) {
                return 0;
            }
            let h = sum16(&inner[..8]);
            let p = fold(l4_len + nh as u64);
            fold(h as u64 + (!p) as u64) as u64
        }
        _ => return 0,
    };
    let mut head = datagram[..hdr_end].to_vec();
    head[6] = 0;
    head[7] = 0;
    let c = !fold(sum16(pseudo) as u64 + sum16(&head) as u64 + share);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// Outer IPv4 (DF, TTL 64, UDP, ID 0, TOS 0) + UDP (checksum by
/// [`lco_check`]) around `gue_and_inner`, as docs/design.md "GUE wire
/// format" specifies.
pub fn gue_outer(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    gue_port: u16,
    gue_and_inner: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + gue_and_inner.len();
    let total = 20 + udp_len;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&(total as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&gue_port.to_be_bytes());
    h.extend_from_slice(&(udp_len as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(gue_and_inner);
    let mut pseudo = h[12..20].to_vec();
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let c = lco_check(&pseudo, &h[20..]);
    h[26..28].copy_from_slice(&c.to_be_bytes());
    h
}

/// A full GUE frame: Ethernet + outer + GUE + inner.
pub fn gue_frame(
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    next: u8,
    hops: &[Ipv4Addr],
    inner: &[u8],
) -> Vec<u8> {
    let mut gi = gue_header(4, next, hops);
    gi.extend_from_slice(inner);
    let mut f = eth(eth_dst, eth_src, 0x0800);
    f.extend_from_slice(&gue_outer(src, dst, 0x8123, GUE_PORT, &gi));
    f
}

/// The flow hash of (saddr, daddr, sport, dport, proto) with `HASH_SEED`.
pub fn hash_of(t: (Ipv4Addr, Ipv4Addr, u16, u16, u8)) -> u32 {
    flow_hash(
        &FlowTuple {
            saddr: t.0.into(),
            daddr: t.1.into(),
            sport: t.2,
            dport: t.3,
            proto: t.4,
        },
        HASH_SEED,
    )
}

/// The outer UDP source port the balancer uses for a flow hash.
pub fn gue_sport(hash: u32) -> u16 {
    0x8000 | (hash & 0x7fff) as u16
}

/// Outer UDP source port the balancer must use for a client flow.
pub fn sport_of(src: Ipv4Addr, dst: Ipv4Addr, sp: u16, dp: u16, proto: u8) -> u16 {
    gue_sport(hash_of((src, dst, sp, dp, proto)))
}

/// The frame the balancer must emit for `inner` (L3) sent to `first` with
/// the given listed hops, with Ethernet from `src_mac` to `dst_mac`.
pub fn encapsulated(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    first: Ipv4Addr,
    hops: &[Ipv4Addr],
    sport: u16,
    inner: &[u8],
) -> Vec<u8> {
    let mut gi = gue_header(4, 0, hops);
    gi.extend_from_slice(inner);
    let mut f = eth(dst_mac, src_mac, 0x0800);
    f.extend_from_slice(&gue_outer(NODE, first, sport, GUE_PORT, &gi));
    f
}

/// What XDP test runs return for a packet the balancer hands to its own
/// TC program (a local first hop, or the slow path): `frame` with the
/// hand-off mark [`MARK`] as its source MAC, and no XDP metadata.
pub fn marked(frame: &[u8]) -> Vec<u8> {
    let mut v = frame.to_vec();
    v[6..12].copy_from_slice(&MARK);
    v
}

/// Pin the calling thread to `cpu`, so that per-CPU state of the programs
/// (hop cache, ICMP rate limit) is the same one across test runs. Returns
/// false if that CPU is not available.
pub fn pin_to_cpu(cpu: usize) -> bool {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_err() {
        return false;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok()
}

/// The ICMP "fragmentation needed" (type 3, code 4) the balancer must send
/// back for the client frame `frame` with next-hop MTU `mtu`, as
/// docs/design.md "Balancer (XDP)" specifies: MACs swapped; IPv4 header of
/// 20 bytes (TOS 0xc0, ID 0, DF, TTL 64, protocol 1) from the packet's
/// destination (the VIP) to its source; ICMP with the MTU in its second
/// word, quoting the packet's IPv4 header (options included) and the first
/// 8 bytes after it.
pub fn icmp_frag_needed_reply(frame: &[u8], mtu: u16) -> Vec<u8> {
    let ip = &frame[14..];
    let ihl = (ip[0] & 15) as usize * 4;
    let mut icmp = vec![3, 4, 0, 0, 0, 0];
    icmp.extend_from_slice(&mtu.to_be_bytes());
    icmp.extend_from_slice(&ip[..ihl + 8]);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut h = vec![0x45, 0xc0];
    h.extend_from_slice(&((20 + icmp.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0, 0x40, 0, 64, 1, 0, 0]);
    h.extend_from_slice(&ip[16..20]);
    h.extend_from_slice(&ip[12..16]);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = frame[6..12].to_vec();
    f.extend_from_slice(&frame[0..6]);
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&h);
    f.extend_from_slice(&icmp);
    f
}

/// A loaded data plane with its control state.
pub struct Loaded {
    pub dp: Dataplane<'static>,
    pub cp: ControlPlane,
}

/// Load the BPF object and fill it from `yaml` for node `node` (an
/// address of the config's cluster network: IPv4 or IPv6).
pub fn load(yaml: &str, node: impl Into<std::net::IpAddr>) -> Loaded {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut dp = Dataplane::load(storage).expect("loading BPF (root needed)");
    dp.set_handoff_mark(MARK)
        .expect("writing the hand-off mark");
    let cp = ControlPlane::new(Config::parse(yaml).expect("test config"), 0);
    cp.apply(&mut dp, node.into(), &cp.full_plan())
        .expect("filling maps");
    Loaded { dp, cp }
}

/// [`load`] with the maps sized for the config (`Dataplane::load_for`:
/// its bucket pool and `cluster.nat.max_flows`).
pub fn load_sized(yaml: &str, node: impl Into<std::net::IpAddr>) -> Loaded {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let config = Config::parse(yaml).expect("test config");
    let mut dp = Dataplane::load_for(storage, &config).expect("loading BPF (root needed)");
    dp.set_handoff_mark(MARK)
        .expect("writing the hand-off mark");
    let cp = ControlPlane::new(config, 0);
    cp.apply(&mut dp, node.into(), &cp.full_plan())
        .expect("filling maps");
    Loaded { dp, cp }
}

impl Loaded {
    /// Apply a new config (like SIGHUP).
    pub fn reload(&mut self, yaml: &str, node: impl Into<std::net::IpAddr>) {
        let plan = self.cp.update(Config::parse(yaml).expect("test config"), 1);
        self.cp
            .apply(&mut self.dp, node.into(), &plan)
            .expect("applying");
    }

    /// Counter deltas by name produced by `f`.
    pub fn counted<T>(&self, f: impl FnOnce() -> T) -> (T, Vec<(&'static str, u64)>) {
        let before = self.dp.counters().unwrap();
        let r = f();
        let after = self.dp.counters().unwrap();
        let deltas = COUNTER_NAMES
            .iter()
            .zip(before.iter().zip(after))
            .filter(|(_, (b, a))| a != *b)
            .map(|(n, (b, a))| (*n, a - b))
            .collect();
        (r, deltas)
    }
}

/// Config with one TCP service 10.0.0.100:80 and the given backends
/// (`dip weight state` triples), balancer 10.0.0.11, and no pacing of table
/// changes (a reload reaches its targets at once).
pub fn config(backends: &[(Ipv4Addr, u32, &str)], unknown_flow: &str) -> String {
    let mut y = format!(
        "version: 1\ncluster:\n  hash_seed: {HASH_SEED:#x}\n  balancers: [10.0.0.11]\n  unknown_flow: {unknown_flow}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: 256\n    backends:\n"
    );
    if backends.is_empty() {
        y = y.replace("    backends:\n", "    backends: []\n");
    }
    for (d, w, s) in backends {
        y += &format!("      - {{dip: {d}, weight: {w}, state: {s}}}\n");
    }
    y += "  - name: dns\n    vip: 10.0.0.100\n    port: 53\n    protocol: udp\n    table_size: 256\n    backends:\n      - {dip: 10.0.0.12}\n";
    y
}

/// The RST the last hop must send for a segment (RFC 793): IPv4 VIP ->
/// client (ID 0, DF, TTL 64), TCP without options, window 0, in a frame
/// whose Ethernet header is the received one's.
pub fn rst_frame(
    mac: [u8; 6],
    to: Ipv4Addr,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: Option<u32>,
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.unwrap_or(0).to_be_bytes());
    t.push(5 << 4);
    t.push(if ack.is_some() { RST | ACK } else { RST });
    t.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    let mut pseudo = VIP.octets().to_vec();
    pseudo.extend_from_slice(&to.octets());
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    pseudo.extend_from_slice(&t);
    let c = csum(&pseudo);
    put16(&mut t, 16, c);
    let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0];
    ip.extend_from_slice(&VIP.octets());
    ip.extend_from_slice(&to.octets());
    let c = csum(&ip);
    put16(&mut ip, 10, c);
    let mut f = eth(mac, MAC12, 0x0800);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&t);
    f
}

/// Bytes of an address (4 or 16).
pub fn octets(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// A GUE header (version 0, C 0, flags and type 0) listing `hops` of one
/// family: hlen 1 + N words of 4 or 1 + 4N of 16 bytes.
pub fn gue_header_any(inner_proto: u8, next: u8, hops: &[IpAddr]) -> Vec<u8> {
    let words: usize = hops.iter().map(|h| octets(*h).len() / 4).sum();
    let mut g = vec![
        (1 + words) as u8 & 0x1f,
        inner_proto,
        0,
        0,
        0,
        0,
        next,
        hops.len() as u8,
    ];
    for h in hops {
        g.extend_from_slice(&octets(*h));
    }
    g
}

/// Outer IPv6 (class 0, flow label `label`, next header UDP, hop limit 64)
/// + UDP (checksum by [`lco_check`]) around `gue_and_inner`.
pub fn gue_outer6(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    label: u32,
    sport: u16,
    gue_and_inner: &[u8],
) -> Vec<u8> {
    let udp_len = 8 + gue_and_inner.len();
    let mut h = (0x6000_0000u32 | (label & 0xfffff)).to_be_bytes().to_vec();
    h.extend_from_slice(&(udp_len as u16).to_be_bytes());
    h.extend_from_slice(&[17, 64]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h.extend_from_slice(&sport.to_be_bytes());
    h.extend_from_slice(&GUE_PORT.to_be_bytes());
    h.extend_from_slice(&(udp_len as u16).to_be_bytes());
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(gue_and_inner);
    let mut pseudo = h[8..40].to_vec();
    pseudo.extend_from_slice(&(udp_len as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 17]);
    let c = lco_check(&pseudo, &h[40..]);
    h[46..48].copy_from_slice(&c.to_be_bytes());
    h
}

/// Hex dump for assertion messages.
pub fn hex(b: &[u8]) -> String {
    b.chunks(16)
        .map(|c| {
            c.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Assert two frames are byte-identical, with a readable diff.
pub fn assert_bytes(what: &str, got: &[u8], want: &[u8]) {
    if got != want {
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        panic!(
            "{what}: output differs at byte {first} (got {} bytes, want {})\n got:\n{}\nwant:\n{}",
            got.len(),
            want.len(),
            hex(got),
            hex(want)
        );
    }
}

/// A TCP connection from `src`:`sport` (0: any port) to `dst`:`dport`;
/// panics on failure.
pub fn connect_from(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, dport: u16) -> std::net::TcpStream {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )
    .unwrap();
    let o = src.octets();
    bind(
        fd.as_raw_fd(),
        &SockaddrIn::new(o[0], o[1], o[2], o[3], sport),
    )
    .unwrap();
    let d = dst.octets();
    connect(
        fd.as_raw_fd(),
        &SockaddrIn::new(d[0], d[1], d[2], d[3], dport),
    )
    .unwrap();
    std::net::TcpStream::from(fd)
}
