//! IPv6 cluster network fixtures (docs/design.md "IPv6 cluster network" and
//! "GUE wire format"): the balancer (`nilb_xdp_balancer_c6` and its IPv6
//! twin) sends IPv4 and IPv6 client packets in outer IPv6/UDP/GUE with
//! 16-byte hops; the backends' TC program and XDP receive path take outer
//! IPv6 GUE in, forward it over IPv6 and apply every rule of the IPv4 outer
//! path. Each case is an input frame, the verdict, the output bytes built
//! here field by field and the counter deltas, run through the real
//! programs with maps filled from a YAML config whose cluster addresses are
//! IPv6. Needs root; skipped (one line on stderr) without it.

mod common;

use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use libbpf_rs::OpenObject;
use nilb::config::Config;
use nilb::control::ControlPlane;
use nilb::dataplane::Dataplane;
use nilb::hash::{flow_hash, FlowTuple, IPPROTO_TCP, IPPROTO_UDP};

const N6: &str = "fd00::11";
const B12_6: &str = "fd00::12";
const B13_6: &str = "fd00::13";
const VIP6: &str = "2001:db8::100";
const CLIENT6: &str = "2001:db8:1::1";

fn a6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// TestNet plus this node's IPv6 cluster address on nt0, permanent IPv6
/// neighbours for the two backends (the IPv4 ones' MACs) and IPv6
/// forwarding (the FIB answers only on a forwarding interface).
fn net6() -> TestNet {
    let net = TestNet::new();
    ip(&format!("-6 addr add {N6}/64 dev nt0 nodad"));
    ip(&format!(
        "-6 neigh replace {B12_6} lladdr 02:00:00:00:00:12 dev nt0 nud permanent"
    ));
    ip(&format!(
        "-6 neigh replace {B13_6} lladdr 02:00:00:00:00:13 dev nt0 nud permanent"
    ));
    for f in ["all", "nt0"] {
        std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/forwarding"), "1")
            .expect("IPv6 forwarding");
    }
    net
}

/// An IPv6 cluster network's config: balancer N6; TCP 10.0.0.100:80
/// (`web`), UDP 10.0.0.100:53 (`dns`) and TCP [VIP6]:80 (`web6`), each
/// with `backends` (`dip weight state`); no pacing.
fn config6(backends: &[(&str, u32, &str)], unknown_flow: &str) -> String {
    let mut y = format!(
        "version: 1\ncluster:\n  hash_seed: {HASH_SEED:#x}\n  balancers: [\"{N6}\"]\n  unknown_flow: {unknown_flow}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n"
    );
    for (name, vip, port, proto) in [
        ("web", "10.0.0.100", 80, "tcp"),
        ("dns", "10.0.0.100", 53, "udp"),
        ("web6", "\"2001:db8::100\"", 80, "tcp"),
    ] {
        y += &format!(
            "  - name: {name}\n    vip: {vip}\n    port: {port}\n    protocol: {proto}\n    table_size: 256\n    backends:\n"
        );
        for (d, w, s) in backends {
            y += &format!("      - {{dip: \"{d}\", weight: {w}, state: {s}}}\n");
        }
    }
    y
}

/// Load the programs and fill them from `yaml` for this node (N6).
fn load6(yaml: &str) -> Loaded {
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut dp = Dataplane::load(storage).expect("loading BPF (root needed)");
    dp.set_handoff_mark(MARK)
        .expect("writing the hand-off mark");
    let cp = ControlPlane::new(Config::parse(yaml).expect("test config"), 0);
    cp.apply(&mut dp, IpAddr::V6(a6(N6)), &cp.full_plan())
        .expect("filling maps");
    Loaded { dp, cp }
}

fn reload6(l: &mut Loaded, yaml: &str) {
    let plan = l.cp.update(Config::parse(yaml).expect("test config"), 1);
    l.cp.apply(&mut l.dp, IpAddr::V6(a6(N6)), &plan)
        .expect("applying");
}

/// The flow hash of a client flow (either family) with HASH_SEED.
fn hash(s: IpAddr, d: IpAddr, sp: u16, dp: u16, proto: u8) -> u32 {
    flow_hash(
        &FlowTuple {
            saddr: s,
            daddr: d,
            sport: sp,
            dport: dp,
            proto,
        },
        HASH_SEED,
    )
}

/// IPv6 hops as the generic GUE builder takes them.
fn v6s(hops: &[Ipv6Addr]) -> Vec<IpAddr> {
    hops.iter().map(|h| IpAddr::V6(*h)).collect()
}

/// What the balancer sends for `inner` (protocol 4 or 41) of a flow with
/// `hash` to `first`, listing `hops`.
fn encapsulated6(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    first: Ipv6Addr,
    hops: &[Ipv6Addr],
    hash: u32,
    inner_proto: u8,
    inner: &[u8],
) -> Vec<u8> {
    let mut gi = gue_header_any(inner_proto, 0, &v6s(hops));
    gi.extend_from_slice(inner);
    let mut f = eth(dst_mac, src_mac, 0x86dd);
    f.extend_from_slice(&gue_outer6(a6(N6), first, hash, gue_sport(hash), &gi));
    f
}

/// A GUE frame in outer IPv6 from `src` to this node (N6).
fn gue6_frame(
    mac: [u8; 6],
    src: Ipv6Addr,
    next: u8,
    hops: &[Ipv6Addr],
    proto: u8,
    inner: &[u8],
) -> Vec<u8> {
    let mut gi = gue_header_any(proto, next, &v6s(hops));
    gi.extend_from_slice(inner);
    let mut f = eth(mac, MAC12, 0x86dd);
    f.extend_from_slice(&gue_outer6(src, a6(N6), 0x12345, 0x8123, &gi));
    f
}

/// An IPv6 packet (no extension headers, hop limit 64).
fn l3v6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    p.extend_from_slice(&[next, 64]);
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(l4);
    p
}

/// `eth` (Ethernet type `ty`) + `l3`: what decapsulation leaves.
fn bare(mac: [u8; 6], ty: u16, l3: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, MAC12, ty);
    f.extend_from_slice(l3);
    f
}

/// One packet through one program: verdict, output (None: unchanged) and
/// counter deltas.
struct Case {
    what: &'static str,
    input: Vec<u8>,
    verdict: u32,
    output: Option<Vec<u8>>,
    counters: Vec<(&'static str, u64)>,
}

#[derive(Clone, Copy)]
enum Prog {
    Xdp,
    XdpBackend,
    Tc,
}

fn run(l: &Loaded, ifindex: u32, prog: Prog, cases: &[Case]) {
    for c in cases {
        let ((v, out), d) = l.counted(|| match prog {
            Prog::Xdp => l.dp.run_xdp(&c.input, ifindex).unwrap(),
            Prog::XdpBackend => l.dp.run_xdp_backend(&c.input, ifindex).unwrap(),
            Prog::Tc => l.dp.run_tc(&c.input, ifindex).unwrap(),
        });
        assert_eq!(v, c.verdict, "{}: verdict", c.what);
        assert_eq!(d, c.counters, "{}: counters", c.what);
        assert_bytes(c.what, &out, c.output.as_ref().unwrap_or(&c.input));
    }
}

#[test]
fn xdp_balancer_sends_outer_ipv6() {
    require_root!("BPF, network namespace");
    let net = net6();
    let mut l = load6(&config6(&[(B12_6, 1, "active")], "drop"));
    let (c4, v4) = (IpAddr::V4(CLIENT), IpAddr::V4(VIP));
    let (c6, v6) = (IpAddr::V6(a6(CLIENT6)), IpAddr::V6(a6(VIP6)));
    let syn4 = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let syn6 = l3v6(
        a6(CLIENT6),
        a6(VIP6),
        IPPROTO_TCP,
        &tcp(40000, 80, SYN, b""),
    );
    let dns = l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"query"));
    let h4 = hash(c4, v4, 40000, 80, IPPROTO_TCP);
    let h6 = hash(c6, v6, 40000, 80, IPPROTO_TCP);
    let hu = hash(c4, v4, 5353, 53, IPPROTO_UDP);
    let frame6 = |p: &[u8]| {
        let mut f = eth(net.mac, CLIENT_MAC, 0x86dd);
        f.extend_from_slice(p);
        f
    };
    run(
        &l,
        net.ifindex,
        Prog::Xdp,
        &[
            Case {
                what: "IPv4 SYN: GUE protocol 4 in outer IPv6, no hop",
                input: client_frame(net.mac, &syn4),
                verdict: XDP_TX,
                output: Some(encapsulated6(MAC12, net.mac, a6(B12_6), &[], h4, 4, &syn4)),
                counters: vec![("xdp_encap_tx", 1)],
            },
            Case {
                what: "IPv6 SYN: GUE protocol 41 in outer IPv6",
                input: frame6(&syn6),
                verdict: XDP_TX,
                output: Some(encapsulated6(MAC12, net.mac, a6(B12_6), &[], h6, 41, &syn6)),
                counters: vec![("xdp_encap_tx", 1)],
            },
            Case {
                what: "UDP, no hop",
                input: client_frame(net.mac, &dns),
                verdict: XDP_TX,
                output: Some(encapsulated6(MAC12, net.mac, a6(B12_6), &[], hu, 4, &dns)),
                counters: vec![("xdp_encap_tx", 1)],
            },
        ],
    );
    // The header once more, byte by byte against docs/design.md.
    let (_, out) =
        l.dp.run_xdp(&client_frame(net.mac, &syn4), net.ifindex)
            .unwrap();
    let o = &out[14..];
    assert_eq!(o[0] >> 4, 6, "version 6");
    assert_eq!(
        u32::from_be_bytes([o[0], o[1], o[2], o[3]]) & 0x0fff_ffff,
        h4 & 0xfffff,
        "traffic class 0, flow label = hash & 0xfffff"
    );
    assert_eq!(&o[6..8], &[17, 64], "next header UDP, hop limit 64");
    assert_eq!(&o[8..24], &a6(N6).octets(), "source: this node");
    assert_eq!(
        u16::from_be_bytes([o[46], o[47]]),
        lco_check(
            &[
                &o[8..40],
                &(u16::from_be_bytes([o[44], o[45]]) as u32).to_be_bytes()[..],
                &[0, 0, 0, 17],
            ]
            .concat(),
            &o[40..]
        ),
        "UDP checksum by local checksum offload"
    );
    assert_eq!(
        &o[48..56],
        &[1, 4, 0, 0, 0, 0, 0, 0],
        "GUE: hlen 1, proto 4, no hop"
    );

    // Drain .12 for .13: every bucket moves, .12 is listed as a 16-byte
    // hop (hlen 1 + 4); a UDP flow lists the first hop again after it.
    reload6(
        &mut l,
        &config6(&[(B12_6, 1, "drained"), (B13_6, 1, "active")], "drop"),
    );
    run(
        &l,
        net.ifindex,
        Prog::Xdp,
        &[
            Case {
                what: "IPv4 SYN, previous owner listed",
                input: client_frame(net.mac, &syn4),
                verdict: XDP_TX,
                output: Some(encapsulated6(
                    MAC13,
                    net.mac,
                    a6(B13_6),
                    &[a6(B12_6)],
                    h4,
                    4,
                    &syn4,
                )),
                counters: vec![("xdp_encap_tx", 1)],
            },
            Case {
                what: "IPv6 SYN, previous owner listed",
                input: frame6(&syn6),
                verdict: XDP_TX,
                output: Some(encapsulated6(
                    MAC13,
                    net.mac,
                    a6(B13_6),
                    &[a6(B12_6)],
                    h6,
                    41,
                    &syn6,
                )),
                counters: vec![("xdp_encap_tx", 1)],
            },
            Case {
                what: "UDP: previous owner, then the first hop again",
                input: client_frame(net.mac, &dns),
                verdict: XDP_TX,
                output: Some(encapsulated6(
                    MAC13,
                    net.mac,
                    a6(B13_6),
                    &[a6(B12_6), a6(B13_6)],
                    hu,
                    4,
                    &dns,
                )),
                counters: vec![("xdp_encap_tx", 1)],
            },
        ],
    );
    let (_, out) =
        l.dp.run_xdp(&client_frame(net.mac, &syn4), net.ifindex)
            .unwrap();
    assert_eq!(
        &out[14 + 48..14 + 56],
        &[5, 4, 0, 0, 0, 0, 0, 1],
        "hlen 1 + 4, one hop"
    );
    assert_eq!(&out[14 + 56..14 + 72], &a6(B12_6).octets());
}

#[test]
fn xdp_balancer_c6_too_big_local_and_slow_path() {
    require_root!("BPF, network namespace");
    let net = net6();
    // 56 bytes of GUE: a 1500-byte frame MTU leaves 1444 for the client.
    let l = load6(&config6(&[(B12_6, 1, "active")], "drop"));
    let mut big = ipv4(CLIENT, VIP, IPPROTO_TCP, 20 + 1430, 0x4000, &[]);
    big.extend_from_slice(&tcp(40000, 80, ACK, &[0u8; 1430]));
    let input = client_frame(net.mac, &big);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_TX, vec![("xdp_icmp_too_big", 1)]),
        "1450 + 56 > 1500"
    );
    assert_bytes(
        "frag needed, MTU 1444",
        &out,
        &icmp_frag_needed_reply(&input, 1444),
    );
    let mut fits = ipv4(CLIENT, VIP, IPPROTO_TCP, 20 + 1424, 0x4000, &[]);
    fits.extend_from_slice(&tcp(40000, 80, ACK, &[0u8; 1424]));
    let (v, _) =
        l.dp.run_xdp(&client_frame(net.mac, &fits), net.ifindex)
            .unwrap();
    assert_eq!(v, XDP_TX, "1444 + 56 fits");

    // This node is the first hop: a SYN passes to the stack without GUE.
    let l = load6(&config6(&[(N6, 1, "active")], "drop"));
    let syn4 = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let input = client_frame(net.mac, &syn4);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_local_direct", 1)]),
        "local first hop"
    );
    assert_bytes("local first hop", &out, &input);

    // A hop without a neighbour entry: the marked slow path through TC.
    let b14 = "fd00::14";
    let l = load6(&config6(&[(b14, 1, "active")], "drop"));
    let h4 = hash(IpAddr::V4(CLIENT), IpAddr::V4(VIP), 40000, 80, IPPROTO_TCP);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_PASS, vec![("xdp_encap_slow_path", 1)]));
    let want = encapsulated6(net.mac, CLIENT_MAC, a6(b14), &[], h4, 4, &syn4);
    assert_bytes("slow path", &out, &marked(&want));
    // Marked, TC sends it on (bpf_redirect_neigh out of the FIB's
    // interface for fd00::14: nt0).
    let ((v, _), d) = l.counted(|| l.dp.run_tc(&out, net.ifindex).unwrap());
    assert_eq!((v, d), (TC_ACT_REDIRECT, vec![("tc_slow_path_sent", 1)]));
    // Unmarked, TC does not relay a frame that merely claims this node.
    let ((v, _), d) = l.counted(|| l.dp.run_tc(&want, net.ifindex).unwrap());
    assert_eq!((v, d), (TC_ACT_OK, vec![("tc_pass_other", 1)]));
}

/// The backend side: TC's rules on outer IPv6 GUE, inner IPv4 and IPv6.
/// RFC 1624 update of a checksum as `bpf/common.h` `csum_replace4` does it:
/// `check` and the words as they sit in memory (little-endian reads).
fn csum_replace4_mem(check: u16, from: u32, to: u32) -> u16 {
    let mut sum = (!check) as u32;
    sum += (!(from as u16)) as u32 + (!((from >> 16) as u16)) as u32;
    sum += (to & 0xffff) + (to >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// The data plane of node N6 with B12_6, B13_6 and itself as backends,
/// unknown flows dropped (the TC tables' and forwards' tests).
fn load_three6() -> Loaded {
    load6(&config6(
        &[
            (B12_6, 1, "active"),
            (B13_6, 1, "active"),
            (N6, 1, "active"),
        ],
        "drop",
    ))
}

/// A second-chance forward over IPv6 whose UDP checksum passes through 0
/// between the address update and the next-hop index update still leaves
/// a valid checksum (a breaker's finding: the update used to stop at the
/// zero and send the old checksum; with local checksum offload every
/// same-length packet of such a flow and hop would have been hit).
#[test]
fn tc_forward6_checksum_through_zero_stays_valid() {
    require_root!("BPF, network namespace");
    let net = net6();
    let l = load_three6();
    let (b12, b13, n6) = (a6(B12_6), a6(B13_6), a6(N6));
    let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let mut hits = 0;
    for i in 0..=0xffffu32 {
        // The client's address moves the outer checksum (its share is
        // derived from the inner pseudo-header); a valid inner checksum.
        let client = Ipv4Addr::new(192, 0, (i >> 8) as u8, i as u8);
        let mut inner = l3(
            client,
            VIP,
            IPPROTO_TCP,
            &tcp(40001, 80, ACK | PSH, b"GET /"),
        );
        fix_l4_csum(&mut inner);
        let f = gue6_frame(net.mac, b12, 0, &[b13], 4, &inner);
        let o = &f[14..];
        let mut c = u16::from_le_bytes([o[46], o[47]]);
        for k in 0..4 {
            c = csum_replace4_mem(c, le(&o[8 + 4 * k..]), le(&n6.octets()[4 * k..]));
        }
        for k in 0..4 {
            c = csum_replace4_mem(c, le(&o[24 + 4 * k..]), le(&b13.octets()[4 * k..]));
        }
        if c != 0 {
            continue;
        }
        hits += 1;
        let verifies = |f: &[u8]| {
            let o = &f[14..];
            let len = u16::from_be_bytes([o[44], o[45]]) as usize;
            let p = [&o[8..40], &(len as u32).to_be_bytes()[..], &[0, 0, 0, 17]].concat();
            csum(&[&p[..], &o[40..40 + len]].concat()) == 0
        };
        assert!(verifies(&f), "client {client}: the input verifies");
        let (v, out) = l.dp.run_tc(&f, net.ifindex).unwrap();
        assert_eq!(v, TC_ACT_REDIRECT, "client {client}: forwarded");
        assert_eq!(&out[14 + 24..14 + 40], &b13.octets(), "to the hop");
        assert!(
            verifies(&out),
            "client {client}: UDP checksum after the forward"
        );
    }
    assert!(hits > 0, "no client address takes the sum through 0");
}

#[test]
fn tc_outer_ipv6_fixture_table() {
    require_root!("BPF, network namespace");
    let net = net6();
    let l = load_three6();
    let mac = net.mac;
    let (b12, b13, n6) = (a6(B12_6), a6(B13_6), a6(N6));
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let data = l3(
        CLIENT,
        VIP,
        IPPROTO_TCP,
        &tcp(40001, 80, ACK | PSH, b"GET /"),
    );
    let syn6 = l3v6(
        a6(CLIENT6),
        a6(VIP6),
        IPPROTO_TCP,
        &tcp(40000, 80, SYN, b""),
    );
    let data6 = l3v6(
        a6(CLIENT6),
        a6(VIP6),
        IPPROTO_TCP,
        &tcp(40001, 80, ACK, b"x"),
    );
    let g4 = |src: Ipv6Addr, next: u8, hops: &[Ipv6Addr], inner: &[u8]| {
        gue6_frame(mac, src, next, hops, 4, inner)
    };
    let g6 = |src: Ipv6Addr, next: u8, hops: &[Ipv6Addr], inner: &[u8]| {
        gue6_frame(mac, src, next, hops, 41, inner)
    };
    // Forwarded: outer source this node, destination the hop, next hop + 1.
    let forwarded = |f: &[u8], hop: Ipv6Addr| {
        let mut o = f.to_vec();
        o[14 + 8..14 + 24].copy_from_slice(&n6.octets());
        o[14 + 24..14 + 40].copy_from_slice(&hop.octets());
        o[14 + 48 + 6] += 1;
        // The UDP checksum kept valid (RFC 1624): what local checksum
        // offload gives for the new addresses and next-hop index.
        let len = u16::from_be_bytes([o[14 + 44], o[14 + 45]]) as usize;
        let pseudo = [
            &o[14 + 8..14 + 40],
            &(len as u32).to_be_bytes()[..],
            &[0, 0, 0, 17],
        ]
        .concat();
        let c = lco_check(&pseudo, &o[14 + 40..14 + 40 + len]);
        o[14 + 46..14 + 48].copy_from_slice(&c.to_be_bytes());
        o
    };
    let fwd4 = g4(b12, 0, &[b13], &data);
    let fwd6 = g6(b12, 0, &[b13], &data6);
    let mut hlen_v4_style = g4(b12, 0, &[b13], &data);
    hlen_v4_style[14 + 48] = 2; // 1 + N, as under outer IPv4
    let mut udp_len = g4(b12, 0, &[], &syn);
    udp_len[14 + 44 + 1] ^= 1;
    let mut ext_cut = g4(b12, 0, &[], &syn);
    ext_cut[14 + 6] = 60; // a destination-options header claimed, none there
                          // Outer extension or fragment headers before the UDP header (nilb
                          // never sends them): a destination-options header (8 bytes of
                          // padding), and a first fragment.
    let with_outer = |next: u8, hdr: [u8; 8]| {
        let f = g4(b12, 0, &[], &syn);
        let mut o = f[..14 + 40].to_vec();
        o[14 + 6] = next;
        let pl = u16::from_be_bytes([o[14 + 4], o[14 + 5]]) + 8;
        o[14 + 4..14 + 6].copy_from_slice(&pl.to_be_bytes());
        o.extend_from_slice(&hdr);
        o.extend_from_slice(&f[14 + 40..]);
        o
    };
    let ext = with_outer(60, [17, 0, 1, 4, 0, 0, 0, 0]);
    let frag = with_outer(44, [17, 0, 0, 1, 0, 0, 0, 9]);
    let frag_later = with_outer(44, [17, 0, 0, 0x19, 0, 0, 0, 9]);
    let mut other_dst = g4(b12, 0, &[], &syn);
    other_dst[14 + 24 + 15] = 0x77;
    let mut csum = fwd4.clone();
    csum[14 + 46..14 + 48].copy_from_slice(&[0x12, 0x34]);
    let mut csum_fwd = forwarded(&csum, b13);
    // RFC 1624 over the addresses and the next-hop word, recomputed here
    // the long way: the pseudo-header sum moves by the address change.
    let fix = |f: &mut Vec<u8>, old: &[u8]| {
        let mut sum: u32 = (!u16::from_be_bytes([old[14 + 46], old[14 + 47]])) as u32;
        let words = |b: &[u8], r: std::ops::Range<usize>| -> u32 {
            b[r].chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
                .sum()
        };
        sum += 0xffff * 40 - words(old, 14 + 8..14 + 40) + words(f, 14 + 8..14 + 40);
        sum += 0xffff - words(old, 14 + 54..14 + 56) + words(f, 14 + 54..14 + 56);
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let c = !(sum as u16);
        f[14 + 46..14 + 48].copy_from_slice(&(if c == 0 { 0xffff } else { c }).to_be_bytes());
    };
    fix(&mut csum_fwd, &csum);
    let cases = vec![
        Case {
            what: "inner IPv4 SYN: decapsulated, Ethernet type IPv4",
            input: g4(b12, 0, &[b13], &syn),
            verdict: TC_ACT_OK,
            output: Some(bare(mac, 0x0800, &syn)),
            counters: vec![("tc_decap_syn", 1)],
        },
        Case {
            what: "inner IPv6 SYN: decapsulated, Ethernet type IPv6",
            input: g6(b12, 0, &[b13], &syn6),
            verdict: TC_ACT_OK,
            output: Some(bare(mac, 0x86dd, &syn6)),
            counters: vec![("tc_decap_syn", 1), ("tc_decap_ipv6", 1)],
        },
        Case {
            what: "inner IPv4, unknown flow: forwarded to the IPv6 hop",
            input: fwd4.clone(),
            verdict: TC_ACT_REDIRECT,
            output: Some(forwarded(&fwd4, b13)),
            counters: vec![("tc_forward", 1)],
        },
        Case {
            what: "inner IPv6, unknown flow: forwarded to the IPv6 hop",
            input: fwd6.clone(),
            verdict: TC_ACT_REDIRECT,
            output: Some(forwarded(&fwd6, b13)),
            counters: vec![("tc_forward", 1), ("tc_forward_ipv6", 1)],
        },
        Case {
            what: "a non-zero UDP checksum stays valid when forwarding",
            input: csum,
            verdict: TC_ACT_REDIRECT,
            output: Some(csum_fwd),
            counters: vec![("tc_forward", 1)],
        },
        Case {
            what: "next hop is this node: accepted (loop guard)",
            input: g4(b12, 0, &[n6], &data),
            verdict: TC_ACT_OK,
            output: Some(bare(mac, 0x0800, &data)),
            counters: vec![("tc_decap_loop_guard", 1)],
        },
        Case {
            what: "no hop left, unknown_flow drop",
            input: g4(b12, 1, &[b13], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_unknown_flow", 1)],
        },
        Case {
            what: "source not in cluster_nodes6",
            input: g4(a6("fd00::99"), 0, &[], &syn),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_not_cluster", 1)],
        },
        Case {
            what: "this node's own source, unmarked",
            input: g4(n6, 0, &[], &syn),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_self_unmarked", 1)],
        },
        Case {
            what: "hlen 1 + N (IPv4 hops' count) under outer IPv6: malformed",
            input: hlen_v4_style,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_malformed", 1)],
        },
        Case {
            what: "UDP length other than the IPv6 payload length: malformed",
            input: udp_len,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_malformed", 1)],
        },
        Case {
            what: "outer destination options before UDP to the GUE port: malformed",
            input: ext,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_malformed", 1)],
        },
        Case {
            what: "outer first fragment of UDP to the GUE port: malformed",
            input: frag,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: vec![("tc_drop_malformed", 1)],
        },
        Case {
            what: "a later outer fragment cannot be told from others: passes",
            input: frag_later,
            verdict: TC_ACT_OK,
            output: None,
            counters: vec![("tc_pass_other", 1)],
        },
        Case {
            what: "an outer extension header cut short: not GUE, passes",
            input: ext_cut,
            verdict: TC_ACT_OK,
            output: None,
            counters: vec![("tc_pass_other", 1)],
        },
        Case {
            what: "GUE for another IPv6 address passes",
            input: other_dst,
            verdict: TC_ACT_OK,
            output: None,
            counters: vec![("tc_pass_other", 1)],
        },
    ];
    run(&l, net.ifindex, Prog::Tc, &cases);

    // Hops no node may relay to.
    for bad in ["::", "::1", "::ffff:10.0.0.12", "fe80::12", "ff02::1", VIP6] {
        let what = format!("relay to {bad}");
        let input = g4(b12, 0, &[a6(bad)], &data);
        let ((v, _), d) = l.counted(|| l.dp.run_tc(&input, net.ifindex).unwrap());
        let want = if bad == "::" {
            "tc_drop_malformed"
        } else {
            "tc_drop_bad_next_hop"
        };
        assert_eq!((v, d), (TC_ACT_SHOT, vec![(want, 1)]), "{what}");
    }
}

#[test]
fn tc_outer_ipv6_unknown_flow_rst() {
    require_root!("BPF, network namespace");
    let net = net6();
    let l = load6(&config6(&[(B12_6, 1, "active")], "rst"));
    let mut t = tcp(40006, 80, ACK, b"x");
    t[8..12].copy_from_slice(&777u32.to_be_bytes());
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &t);
    let input = gue6_frame(net.mac, a6(B12_6), 1, &[a6(B13_6)], 4, &data);
    // With ACK: a RST whose sequence number is the segment's ack (777).
    run(
        &l,
        net.ifindex,
        Prog::Tc,
        &[Case {
            what: "last hop, unknown flow: a RST from the IPv4 VIP out of outer IPv6",
            input,
            verdict: TC_ACT_REDIRECT,
            output: Some(rst_frame(net.mac, CLIENT, 80, 40006, 777, None)),
            counters: vec![("tc_rst_sent", 1)],
        }],
    );
}

/// The backends' XDP program: SYNs decapsulated before GRO, the rest TC's.
#[test]
fn xdp_backend_receives_outer_ipv6() {
    require_root!("BPF, network namespace");
    let net = net6();
    let l = load6(&config6(&[(B12_6, 1, "active"), (N6, 1, "active")], "drop"));
    let mac = net.mac;
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let syn6 = l3v6(
        a6(CLIENT6),
        a6(VIP6),
        IPPROTO_TCP,
        &tcp(40000, 80, SYN, b""),
    );
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let cases = vec![
        Case {
            what: "inner IPv4 SYN: decapsulated in XDP",
            input: gue6_frame(mac, a6(B12_6), 0, &[], 4, &syn),
            verdict: XDP_PASS,
            output: Some(bare(mac, 0x0800, &syn)),
            counters: vec![("xdp_decap_syn", 1)],
        },
        Case {
            what: "inner IPv6 SYN with a hop listed: decapsulated in XDP",
            input: gue6_frame(mac, a6(B12_6), 0, &[a6(B13_6)], 41, &syn6),
            verdict: XDP_PASS,
            output: Some(bare(mac, 0x86dd, &syn6)),
            counters: vec![("xdp_decap_syn", 1)],
        },
        Case {
            what: "no local socket: TC's",
            input: gue6_frame(mac, a6(B12_6), 0, &[a6(B13_6)], 4, &data),
            verdict: XDP_PASS,
            output: None,
            counters: vec![("xdp_gue_to_tc", 1)],
        },
        Case {
            what: "source not in the cluster: TC's (which drops it)",
            input: gue6_frame(mac, a6("fd00::99"), 0, &[], 4, &syn),
            verdict: XDP_PASS,
            output: None,
            counters: vec![("xdp_gue_to_tc", 1)],
        },
    ];
    run(&l, net.ifindex, Prog::XdpBackend, &cases);
    // The balancer's own program takes the same frames in (this node is a
    // balancer and a backend).
    let mut bal = cases;
    bal.truncate(2);
    run(&l, net.ifindex, Prog::Xdp, &bal);
}

/// The backends' XDP receive path reads `cluster_nodes6` and `vips6`
/// through this CPU's IPv6 address cache (docs/design.md "Lookup caches"):
/// a node that left the cluster, and an IPv6 VIP that was removed, are
/// each seen by the very next packet after the cache held them (the
/// change increments `cache_gen`). On one CPU, the cache filled first.
#[test]
fn an_ipv6_cluster_node_or_vip_change_reaches_the_next_packet() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = net6();
    let mac = net.mac;
    // A second balancer, fd00::15, which then leaves the cluster.
    let yaml = config6(&[(B12_6, 1, "active"), (N6, 1, "active")], "drop");
    let two = yaml.replace(
        &format!("balancers: [\"{N6}\"]"),
        &format!("balancers: [\"{N6}\", \"fd00::15\"]"),
    );
    assert_ne!(two, yaml);
    let mut l = load6(&two);
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40300, 80, SYN, b""));
    let from15 = gue6_frame(mac, a6("fd00::15"), 0, &[], 4, &syn);
    for _ in 0..2 {
        let ((v, _), d) = l.counted(|| l.dp.run_xdp_backend(&from15, net.ifindex).unwrap());
        assert_eq!(
            (v, d),
            (XDP_PASS, vec![("xdp_decap_syn", 1)]),
            "from a balancer"
        );
    }
    reload6(&mut l, &yaml);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&from15, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_gue_to_tc", 1)]),
        "fd00::15 left the cluster: TC's to judge (it drops it), not decapsulated from the cache"
    );
    assert_bytes("untouched", &out, &from15);

    // The IPv6 VIP: web6 moved from 2001:db8::100 to 2001:db8::101.
    let syn6 = l3v6(
        a6(CLIENT6),
        a6(VIP6),
        IPPROTO_TCP,
        &tcp(40301, 80, SYN, b""),
    );
    let from12 = gue6_frame(mac, a6(B12_6), 0, &[], 41, &syn6);
    for _ in 0..2 {
        let ((v, _), d) = l.counted(|| l.dp.run_xdp_backend(&from12, net.ifindex).unwrap());
        assert_eq!((v, d), (XDP_PASS, vec![("xdp_decap_syn", 1)]), "to a VIP");
    }
    reload6(&mut l, &yaml.replace("2001:db8::100", "2001:db8::101"));
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&from12, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_gue_to_tc", 1)]),
        "2001:db8::100 is no VIP any more: TC's, not decapsulated from the cache"
    );
    assert_bytes("untouched", &out, &from12);
}

/// An IPv4 cluster network ignores outer IPv6 GUE (its programs never look).
#[test]
fn ipv4_cluster_passes_outer_ipv6_gue() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let input = gue6_frame(net.mac, a6(B12_6), 0, &[], 4, &syn);
    let ((v, out), d) = l.counted(|| l.dp.run_tc(&input, net.ifindex).unwrap());
    assert_eq!((v, d), (TC_ACT_OK, vec![("tc_pass_other", 1)]));
    assert_bytes("outer IPv6 on an IPv4 cluster", &out, &input);
    let _ = Ipv4Addr::UNSPECIFIED;
}
