//! IPv6 packet fixtures (docs/design.md "IPv6"), Katran style like
//! tests/packet_fixtures.rs: each case is an input frame, the verdict, the
//! output bytes built here field by field, and the counter deltas, run
//! through the real XDP balancer (which tail-calls its IPv6 program) and TC
//! program with maps filled from a YAML config. Needs root; skipped (one
//! line on stderr) without it.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::*;
use nilb::hash::{flow_hash, FlowTuple, IPPROTO_TCP, IPPROTO_UDP};

const VIP6: &str = "2001:db8::100";
const CLIENT6: &str = "2001:db8:1::1";
const NEXTHDR_ICMPV6: u8 = 58;

fn vip6() -> Ipv6Addr {
    VIP6.parse().unwrap()
}
fn client6() -> Ipv6Addr {
    CLIENT6.parse().unwrap()
}

/// A config with the IPv6 TCP service [VIP6]:80 and UDP [VIP6]:53, both with
/// `backends` (one backend: a deterministic first hop), and the IPv4 web
/// service of `common::config`.
fn config6(backends: &[Ipv4Addr]) -> String {
    let mut y = config(&[(B12, 1, "active")], "drop");
    for (name, port, proto) in [("web6", 80, "tcp"), ("dns6", 53, "udp")] {
        y += &format!(
            "  - name: {name}\n    vip: \"{VIP6}\"\n    port: {port}\n    protocol: {proto}\n    table_size: 256\n    backends:\n"
        );
        for b in backends {
            y += &format!("      - {{dip: {b}}}\n");
        }
    }
    y
}

/// An IPv6 header (traffic class and flow label 0, hop limit 64) for a
/// payload of `payload_len` bytes.
fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload_len: usize) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload_len as u16).to_be_bytes());
    h.push(next);
    h.push(64);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h
}

/// An IPv6 packet: header, then `ext` (extension headers, chained by the
/// caller), then `l4`.
fn l3v6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
    let mut p = ipv6(src, dst, next, ext.len() + l4.len());
    p.extend_from_slice(ext);
    p.extend_from_slice(l4);
    p
}

/// An 8-byte extension header (options/routing: padding only) whose next
/// header is `next`.
fn ext8(next: u8) -> Vec<u8> {
    vec![next, 0, 1, 4, 0, 0, 0, 0]
}

fn frame6(dst_mac: [u8; 6], l3: &[u8]) -> Vec<u8> {
    let mut f = eth(dst_mac, CLIENT_MAC, 0x86dd);
    f.extend_from_slice(l3);
    f
}

fn hash6(sp: u16, dp: u16, proto: u8) -> u32 {
    flow_hash(
        &FlowTuple {
            saddr: client6().into(),
            daddr: vip6().into(),
            sport: sp,
            dport: dp,
            proto,
        },
        HASH_SEED,
    )
}

/// What the balancer sends for an IPv6 packet: outer IPv4 + UDP + GUE
/// protocol 41 to `first`.
fn encapsulated6(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    first: Ipv4Addr,
    sport: u16,
    inner: &[u8],
) -> Vec<u8> {
    let mut gi = gue_header(41, 0, &[]);
    gi.extend_from_slice(inner);
    let mut f = eth(dst_mac, src_mac, 0x0800);
    f.extend_from_slice(&gue_outer(NODE, first, sport, GUE_PORT, &gi));
    f
}

/// A GUE frame (protocol 41) from `src` to this node with `hops`.
fn gue_frame6(src: Ipv4Addr, next: u8, hops: &[Ipv4Addr], inner: &[u8]) -> Vec<u8> {
    let mut gi = gue_header(41, next, hops);
    gi.extend_from_slice(inner);
    let mut f = eth(MAC12, MAC13, 0x0800);
    f.extend_from_slice(&gue_outer(src, NODE, 0x8123, GUE_PORT, &gi));
    f
}

#[test]
fn xdp_ipv6_paths() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config6(&[B12]), NODE);
    let syn = l3v6(
        client6(),
        vip6(),
        IPPROTO_TCP,
        &[],
        &tcp(40000, 80, SYN, b""),
    );
    let sport = gue_sport(hash6(40000, 80, IPPROTO_TCP));

    // 1. A SYN to the IPv6 VIP: GUE protocol 41 around the packet, as is.
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &syn), net.ifindex).unwrap());
    assert_eq!(v, XDP_TX, "SYN to VIP6");
    assert_bytes(
        "SYN to VIP6",
        &out,
        &encapsulated6(MAC12, net.mac, B12, sport, &syn),
    );
    assert_eq!(d, vec![("xdp_encap_tx", 1)]);
    assert_eq!(
        &out[14 + 28..14 + 30],
        &[0x01, 41],
        "GUE hlen 1, protocol 41"
    );

    // 2. Extension headers (hop-by-hop, destination options) before TCP:
    // walked, the flow hashed on its ports, the packet carried unchanged.
    let mut ext = ext8(60);
    ext.extend(ext8(IPPROTO_TCP));
    let with_ext = l3v6(client6(), vip6(), 0, &ext, &tcp(40000, 80, ACK, b"data"));
    let (v, out) =
        l.dp.run_xdp(&frame6(net.mac, &with_ext), net.ifindex)
            .unwrap();
    assert_eq!(v, XDP_TX, "two extension headers");
    assert_bytes(
        "two extension headers",
        &out,
        &encapsulated6(MAC12, net.mac, B12, sport, &with_ext),
    );

    // 3. More extension headers than NILB_IPV6_MAX_EXT (4): dropped.
    let mut ext5 = Vec::new();
    for _ in 0..4 {
        ext5.extend(ext8(60));
    }
    ext5.extend(ext8(IPPROTO_TCP));
    let too_many = l3v6(client6(), vip6(), 60, &ext5, &tcp(40000, 80, SYN, b""));
    let ((v, _), d) = l.counted(|| {
        l.dp.run_xdp(&frame6(net.mac, &too_many), net.ifindex)
            .unwrap()
    });
    assert_eq!(
        (v, d),
        (XDP_DROP, vec![("xdp_drop_ipv6_ext", 1)]),
        "five extension headers"
    );

    // 4. A fragment header: dropped, counted as a fragment.
    let frag = l3v6(
        client6(),
        vip6(),
        44,
        &[IPPROTO_TCP, 0, 0, 1, 0, 0, 0, 7],
        &tcp(40000, 80, SYN, b""),
    );
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &frag), net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_DROP, vec![("xdp_drop_fragment", 1)]),
        "fragment"
    );

    // 5. Payload length past the frame: malformed, dropped.
    let mut short = syn.clone();
    short[4..6].copy_from_slice(&200u16.to_be_bytes());
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &short), net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_DROP, vec![("xdp_drop_malformed", 1)]),
        "payload length too long"
    );

    // 6. Not a VIP, another port, or an echo request: passed untouched.
    let other = l3v6(
        client6(),
        "2001:db8::200".parse().unwrap(),
        IPPROTO_TCP,
        &[],
        &tcp(1, 80, SYN, b""),
    );
    let port = l3v6(client6(), vip6(), IPPROTO_TCP, &[], &tcp(1, 81, SYN, b""));
    let echo = l3v6(
        client6(),
        vip6(),
        NEXTHDR_ICMPV6,
        &[],
        &[128, 0, 0, 0, 0, 1, 0, 1],
    );
    for (what, p) in [
        ("not a VIP", &other),
        ("no service", &port),
        ("echo request", &echo),
    ] {
        let input = frame6(net.mac, p);
        let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
        assert_eq!(v, XDP_PASS, "{what}");
        assert_bytes(what, &out, &input);
        assert_eq!(d, vec![("xdp_pass_not_service", 1)], "{what}");
    }

    // 7. ICMPv6 Packet Too Big from a router about the backend's reply
    // (VIP6:80 -> client:40000): hashed on the quoted flow, so it goes
    // where the flow goes (the same outer UDP source port).
    let reply = l3v6(
        vip6(),
        client6(),
        IPPROTO_TCP,
        &[],
        &tcp(80, 40000, ACK, b""),
    );
    let mut icmp = vec![2, 0, 0, 0, 0, 0, 0x05, 0x00];
    icmp.extend_from_slice(&reply);
    let ptb = l3v6(
        "2001:db8:ff::1".parse().unwrap(),
        vip6(),
        NEXTHDR_ICMPV6,
        &[],
        &icmp,
    );
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &ptb), net.ifindex).unwrap());
    assert_eq!(v, XDP_TX, "PTB about a VIP6 flow");
    assert_bytes(
        "PTB",
        &out,
        &encapsulated6(MAC12, net.mac, B12, sport, &ptb),
    );
    assert_eq!(d, vec![("xdp_encap_tx", 1), ("xdp_icmp_forwarded", 1)]);

    // 8. UDP to [VIP6]:53 and a UDP length past the payload.
    let dns = l3v6(
        client6(),
        vip6(),
        IPPROTO_UDP,
        &[],
        &udp(5353, 53, b"query"),
    );
    let (v, out) = l.dp.run_xdp(&frame6(net.mac, &dns), net.ifindex).unwrap();
    assert_eq!(v, XDP_TX, "UDP to VIP6");
    let usport = gue_sport(hash6(5353, 53, IPPROTO_UDP));
    assert_bytes(
        "UDP to VIP6",
        &out,
        &encapsulated6(MAC12, net.mac, B12, usport, &dns),
    );
    let mut bad = dns.clone();
    bad[40 + 4..40 + 6].copy_from_slice(&100u16.to_be_bytes());
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &bad), net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_DROP, vec![("xdp_drop_malformed", 1)]),
        "UDP length past the payload"
    );
}

#[test]
fn xdp_ipv6_first_hops_follow_the_rust_table() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config6(&[B12, B13]), NODE);
    let key = l.cp.config().services[2].key();
    assert!(key.vip.is_ipv6());
    let table = l.cp.service(&key).unwrap().table.clone();
    for sp in 1000..1200u16 {
        let syn = l3v6(client6(), vip6(), IPPROTO_TCP, &[], &tcp(sp, 80, SYN, b""));
        let (v, out) = l.dp.run_xdp(&frame6(net.mac, &syn), net.ifindex).unwrap();
        assert_eq!(v, XDP_TX);
        let h = hash6(sp, 80, IPPROTO_TCP);
        let first = table.first((h & (table.size() - 1)) as usize).unwrap();
        assert_eq!(
            &out[14 + 16..14 + 20],
            &first.octets(),
            "first hop of port {sp}"
        );
        assert_eq!(u16::from_be_bytes([out[34], out[35]]), gue_sport(h));
    }
}

#[test]
fn tc_ipv6_second_chance() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config6(&[NODE, B13]), NODE);
    let syn = l3v6(
        client6(),
        vip6(),
        IPPROTO_TCP,
        &[],
        &tcp(40000, 80, SYN, b""),
    );
    let data = l3v6(
        client6(),
        vip6(),
        IPPROTO_TCP,
        &[],
        &tcp(40001, 80, ACK, b"x"),
    );
    let decapsulated = |inner: &[u8]| {
        let mut f = eth(MAC12, MAC13, 0x86dd);
        f.extend_from_slice(inner);
        f
    };

    // 1. A SYN: accepted here, the skb becomes IPv6.
    let ((v, out), d) = l.counted(|| {
        l.dp.run_tc(&gue_frame6(B13, 0, &[B13], &syn), net.ifindex)
            .unwrap()
    });
    assert_eq!(v, TC_ACT_OK, "SYN");
    assert_bytes("SYN decapsulated", &out, &decapsulated(&syn));
    assert_eq!(d, vec![("tc_decap_syn", 1), ("tc_decap_ipv6", 1)]);

    // 2. A segment of no local connection with a hop left: forwarded to it,
    // outer addresses and next-hop index rewritten, inner untouched.
    let input = gue_frame6(B13, 0, &[B13], &data);
    let ((v, out), d) = l.counted(|| l.dp.run_tc(&input, net.ifindex).unwrap());
    assert_eq!(v, TC_ACT_REDIRECT, "forwarded");
    let mut gi = gue_header(41, 1, &[B13]);
    gi.extend_from_slice(&data);
    let mut want = eth(MAC12, MAC13, 0x0800);
    want.extend_from_slice(&gue_outer(NODE, B13, 0x8123, GUE_PORT, &gi));
    assert_bytes("forwarded", &out, &want);
    assert_eq!(d, vec![("tc_forward", 1), ("tc_forward_ipv6", 1)]);

    // 3. No hop left, unknown_flow drop.
    let ((v, _), d) = l.counted(|| {
        l.dp.run_tc(&gue_frame6(B13, 1, &[B13], &data), net.ifindex)
            .unwrap()
    });
    assert_eq!(
        (v, d),
        (TC_ACT_SHOT, vec![("tc_drop_unknown_flow", 1)]),
        "last hop"
    );

    // 4. Inner destination not an IPv6 VIP; inner length not filling the
    // GUE payload; a fragment inside; a hop list naming this node.
    let stray = l3v6(
        client6(),
        "2001:db8::200".parse().unwrap(),
        IPPROTO_TCP,
        &[],
        &tcp(1, 80, SYN, b""),
    );
    let ((v, _), d) = l.counted(|| {
        l.dp.run_tc(&gue_frame6(B13, 0, &[], &stray), net.ifindex)
            .unwrap()
    });
    assert_eq!(
        (v, d),
        (TC_ACT_SHOT, vec![("tc_drop_inner_not_vip", 1)]),
        "not a VIP"
    );
    let mut long = syn.clone();
    long.extend_from_slice(&[0; 4]);
    let ((v, _), d) = l.counted(|| {
        l.dp.run_tc(&gue_frame6(B13, 0, &[], &long), net.ifindex)
            .unwrap()
    });
    assert_eq!(
        (v, d),
        (TC_ACT_SHOT, vec![("tc_drop_malformed", 1)]),
        "inner shorter than GUE payload"
    );
    let frag = l3v6(
        client6(),
        vip6(),
        44,
        &[IPPROTO_TCP, 0, 0, 1, 0, 0, 0, 7],
        &tcp(40000, 80, SYN, b""),
    );
    let ((v, _), d) = l.counted(|| {
        l.dp.run_tc(&gue_frame6(B13, 0, &[], &frag), net.ifindex)
            .unwrap()
    });
    assert_eq!(
        (v, d),
        (TC_ACT_SHOT, vec![("tc_drop_malformed", 1)]),
        "inner fragment"
    );
    let ((v, out), d) = l.counted(|| {
        l.dp.run_tc(&gue_frame6(B13, 0, &[NODE], &data), net.ifindex)
            .unwrap()
    });
    assert_eq!(v, TC_ACT_OK, "loop guard");
    assert_bytes("loop guard", &out, &decapsulated(&data));
    assert_eq!(d, vec![("tc_decap_loop_guard", 1), ("tc_decap_ipv6", 1)]);

    // 5. GUE from outside the cluster: dropped before the inner packet is
    // looked at (the IPv4 rule applies to IPv6 inside).
    let ((v, _), d) = l.counted(|| {
        l.dp.run_tc(
            &gue_frame6(Ipv4Addr::new(10, 9, 9, 9), 0, &[], &syn),
            net.ifindex,
        )
        .unwrap()
    });
    assert_eq!(
        (v, d),
        (TC_ACT_SHOT, vec![("tc_drop_not_cluster", 1)]),
        "not a cluster node"
    );
}

/// ICMPv6 Packet Too Big (bpf/too_big.h) for an IPv6 packet that no longer
/// fits the 1500-byte wire with GUE, with no hop listed (36 bytes of GUE
/// overhead: fewer than the 48 bytes of IPv6 + ICMPv6 header the reply puts
/// before its quote). Built here field by field: MACs swapped; IPv6 from
/// the VIP to the client (class and label 0, next header 58, hop limit
/// 64); type 2, code 0, checksum over the pseudo-header, MTU 1500 - 36;
/// the packet's first 184 bytes. From a multicast source: dropped, counted
/// as too big.
#[test]
fn xdp_ipv6_packet_too_big_without_hops() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config6(&[B12]), NODE);
    let big = l3v6(
        client6(),
        vip6(),
        IPPROTO_TCP,
        &[],
        &tcp(40000, 80, ACK, &[0x42; 1420]),
    );
    assert_eq!(big.len(), 1480);
    let input = frame6(net.mac, &big);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());

    let mut msg = vec![2, 0, 0, 0];
    msg.extend_from_slice(&(1500u32 - 36).to_be_bytes());
    msg.extend_from_slice(&big[..184]);
    let mut pseudo = vip6().octets().to_vec();
    pseudo.extend_from_slice(&client6().octets());
    pseudo.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, NEXTHDR_ICMPV6]);
    pseudo.extend_from_slice(&msg);
    let c = csum(&pseudo);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut want = eth(CLIENT_MAC, net.mac, 0x86dd);
    want.extend_from_slice(&ipv6(vip6(), client6(), NEXTHDR_ICMPV6, msg.len()));
    want.extend_from_slice(&msg);
    assert_eq!(
        (v, &d[..]),
        (XDP_TX, &[("xdp_icmp6_too_big", 1)][..]),
        "packet too big, no hop listed"
    );
    assert_bytes("ICMPv6 Packet Too Big", &out, &want);

    let mut mcast = big.clone();
    mcast[8..24].copy_from_slice(&"ff02::1".parse::<Ipv6Addr>().unwrap().octets());
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &mcast), net.ifindex).unwrap());
    assert_eq!(
        (v, &d[..]),
        (XDP_DROP, &[("xdp_drop_too_big", 1)][..]),
        "too big from a multicast source"
    );
}
