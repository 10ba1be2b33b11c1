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
    config6_with(backends, "drop")
}

/// [`config6`] with `cluster.unknown_flow` set.
fn config6_with(backends: &[Ipv4Addr], unknown_flow: &str) -> String {
    let mut y = config(&[(B12, 1, "active")], unknown_flow);
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

    // 2b. A hop-by-hop header after another one, and a routing header with
    // segments left (the VIP is not the final destination): malformed,
    // dropped (the backend's stack would drop them). A routing header with
    // 0 segments left is walked like any.
    let mut late_hop = ext8(0);
    late_hop.extend(ext8(IPPROTO_TCP));
    let late_hop = l3v6(client6(), vip6(), 60, &late_hop, &tcp(40000, 80, SYN, b""));
    let routed = l3v6(
        client6(),
        vip6(),
        43,
        &[IPPROTO_TCP, 0, 4, 1, 0, 0, 0, 0],
        &tcp(40000, 80, SYN, b""),
    );
    for (what, p) in [
        ("hop-by-hop not first", &late_hop),
        ("routing, 1 segment left", &routed),
    ] {
        let ((v, _), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, p), net.ifindex).unwrap());
        assert_eq!(
            (v, d),
            (XDP_DROP, vec![("xdp_drop_malformed", 1)]),
            "{what}"
        );
    }
    let done = l3v6(
        client6(),
        vip6(),
        43,
        &[IPPROTO_TCP, 0, 4, 0, 0, 0, 0, 0],
        &tcp(40000, 80, SYN, b""),
    );
    let (v, out) = l.dp.run_xdp(&frame6(net.mac, &done), net.ifindex).unwrap();
    assert_eq!(v, XDP_TX, "routing, 0 segments left");
    assert_bytes(
        "routing, 0 segments left",
        &out,
        &encapsulated6(MAC12, net.mac, B12, sport, &done),
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
        let first = v4(table.first((h & (table.size() - 1)) as usize).unwrap());
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

    // 5. The backends' XDP program (before GRO): a SYN is decapsulated
    // there exactly as TC does it; a segment of no local socket goes to TC
    // untouched.
    let ((v, out), d) = l.counted(|| {
        l.dp.run_xdp_backend(&gue_frame6(B13, 0, &[B13], &syn), net.ifindex)
            .unwrap()
    });
    assert_eq!(v, XDP_PASS, "XDP: SYN");
    assert_bytes("XDP: SYN decapsulated", &out, &decapsulated(&syn));
    assert_eq!(d, vec![("xdp_decap_syn", 1)]);
    let input = gue_frame6(B13, 0, &[B13], &data);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&input, net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS, "XDP: no socket");
    assert_bytes("XDP: no socket, untouched", &out, &input);
    assert_eq!(d, vec![("xdp_gue_to_tc", 1)]);

    // 6. GUE from outside the cluster: dropped before the inner packet is
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

/// ICMPv6 checksum of `msg` (checksum field zero) from `src` to `dst`
/// (RFC 8200 8.1 pseudo-header), written out independently of the C code.
fn icmp6_csum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let mut b = Vec::new();
    b.extend_from_slice(&src.octets());
    b.extend_from_slice(&dst.octets());
    b.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    b.extend_from_slice(&[0, 0, 0, NEXTHDR_ICMPV6]);
    b.extend_from_slice(msg);
    csum(&b)
}

#[test]
fn xdp_ipv6_too_big_answers_packet_too_big_from_the_vip() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config6(&[B12]), NODE);
    let packet = |sport: u16, tot: usize| {
        let t = tcp(sport, 80, ACK | PSH, &vec![0xab; tot - 40 - 20]);
        l3v6(client6(), vip6(), IPPROTO_TCP, &[], &t)
    };
    // 1464 + 36 = 1500 fits the veth's MTU exactly.
    let fits = packet(41000, 1464);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &fits), net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_TX, vec![("xdp_encap_tx", 1)]), "1464 bytes");
    assert_bytes(
        "1464 bytes",
        &out,
        &encapsulated6(
            MAC12,
            net.mac,
            B12,
            gue_sport(hash6(41000, 80, IPPROTO_TCP)),
            &fits,
        ),
    );

    // 1465 + 36 > 1500: Packet Too Big, MTU 1464, from the VIP, quoting
    // the packet's first 184 bytes.
    let big = packet(41001, 1465);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &big), net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_TX, vec![("xdp_icmp6_too_big", 1)]),
        "1465 bytes"
    );
    let mut msg = vec![2, 0, 0, 0];
    msg.extend_from_slice(&1464u32.to_be_bytes());
    msg.extend_from_slice(&big[..184]);
    let c = icmp6_csum(vip6(), client6(), &msg);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut want = eth(CLIENT_MAC, net.mac, 0x86dd);
    want.extend_from_slice(&ipv6(vip6(), client6(), NEXTHDR_ICMPV6, msg.len()));
    want.extend_from_slice(&msg);
    assert_bytes("Packet Too Big", &out, &want);

    // About an ICMPv6 error: never an error about an error (RFC 4443 2.4).
    let reply = l3v6(
        vip6(),
        client6(),
        IPPROTO_TCP,
        &[],
        &tcp(80, 41001, ACK, &vec![0; 1360]),
    );
    let mut icmp = vec![1, 4, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&reply);
    let err = l3v6(
        "2001:db8:ff::1".parse().unwrap(),
        vip6(),
        NEXTHDR_ICMPV6,
        &[],
        &icmp,
    );
    assert!(err.len() + 36 > 1500);
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &err), net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_DROP, vec![("xdp_drop_too_big", 1)]),
        "ICMPv6 error too big"
    );
}

/// The RST the last hop sends for an IPv6 segment (RFC 793 as for IPv4):
/// IPv6 VIP -> client (hop limit 64), TCP without options, window 0, the
/// checksum over the RFC 8200 pseudo-header; Ethernet as received.
fn rst6_frame(sport: u16, dport: u16, seq: u32, ack: Option<u32>) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&ack.unwrap_or(0).to_be_bytes());
    t.push(5 << 4);
    t.push(if ack.is_some() { RST | ACK } else { RST });
    t.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    let mut pseudo = vip6().octets().to_vec();
    pseudo.extend_from_slice(&client6().octets());
    pseudo.extend_from_slice(&[0, 0, 0, 20, 0, 0, 0, IPPROTO_TCP]);
    pseudo.extend_from_slice(&t);
    let c = csum(&pseudo);
    put16(&mut t, 16, c);
    let mut f = eth(MAC12, MAC13, 0x86dd);
    f.extend_from_slice(&ipv6(vip6(), client6(), IPPROTO_TCP, 20));
    f.extend_from_slice(&t);
    f
}

#[test]
fn tc_ipv6_unknown_flow_rst_answers_as_rfc_793_says() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config6_with(&[NODE, B13], "rst"), NODE);
    let segment = |sport: u16, flags: u8, seq: u32, payload: &[u8]| {
        let mut t = tcp(sport, 80, flags, payload);
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        gue_frame6(
            B13,
            1,
            &[B13],
            &l3v6(client6(), vip6(), IPPROTO_TCP, &[], &t),
        )
    };
    for (what, frame, seq, ack) in [
        (
            "data with ACK",
            segment(40001, ACK | PSH, 1000, b"GET /"),
            2000,
            None,
        ),
        (
            "data without ACK",
            segment(40002, PSH, 1000, b"abc"),
            0,
            Some(1003),
        ),
        (
            "FIN without ACK",
            segment(40003, FIN, 0xffff_ffff, b""),
            0,
            Some(0),
        ),
    ] {
        let cport = u16::from_be_bytes([frame[14 + 40 + 40], frame[14 + 40 + 41]]); // Ethernet, outer headers with one hop, IPv6
        let ((v, out), d) = l.counted(|| l.dp.run_tc(&frame, net.ifindex).unwrap());
        assert_eq!(
            (v, d),
            (TC_ACT_REDIRECT, vec![("tc_rst_sent", 1)]),
            "{what}"
        );
        assert_bytes(what, &out, &rst6_frame(80, cport, seq, ack));
    }
    let rst = segment(40004, RST | ACK, 1000, b"");
    let ((v, _), d) = l.counted(|| l.dp.run_tc(&rst, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (TC_ACT_SHOT, vec![("tc_drop_unknown_flow", 1)]),
        "RST"
    );
}

#[test]
fn xdp_ipv6_quic_lb_routes_by_server_id() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let mut y = config(&[(B12, 1, "active")], "drop");
    y += &format!(
        "  - name: quic6\n    vip: \"{VIP6}\"\n    port: 443\n    protocol: udp\n    table_size: 256\n    quic_lb: {{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: plaintext}}\n    backends:\n      - {{dip: 10.0.0.12, server_id: \"0a01\"}}\n      - {{dip: 10.0.0.13, server_id: \"0a02\", state: drained}}\n"
    );
    let l = load(&y, NODE);
    let lb = nilb::quic_lb::Config::new(&nilb::quic_lb::ConfigSpec {
        codepoint: 1,
        server_id_len: 2,
        nonce_len: 6,
        key: None,
        self_encode_length: false,
    })
    .unwrap();
    let cid13 = lb.encode(&[0x0a, 0x02], &[1, 2, 3, 4, 5, 6]).unwrap();
    // A short-header packet: first byte, the DCID, 24 bytes of the rest.
    let mut quic = vec![0x41];
    quic.extend_from_slice(cid13.as_bytes());
    quic.extend_from_slice(&[0x5a; 24]);
    for cport in [40000u16, 51234] {
        let p = l3v6(client6(), vip6(), IPPROTO_UDP, &[], &udp(cport, 443, &quic));
        let ((v, out), d) = l.counted(|| l.dp.run_xdp(&frame6(net.mac, &p), net.ifindex).unwrap());
        assert_eq!(v, XDP_TX, "port {cport}");
        // The drained .13 has no bucket: only its server ID leads there.
        let sport = gue_sport(hash6(cport, 443, IPPROTO_UDP));
        assert_bytes(
            "routed to .13",
            &out,
            &encapsulated6(MAC13, net.mac, B13, sport, &p),
        );
        assert_eq!(
            d,
            vec![("xdp_encap_tx", 1), ("xdp_quic_routed", 1)],
            "port {cport}"
        );
    }
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
