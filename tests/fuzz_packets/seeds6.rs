//! IPv6 seeds for both programs and their systematic sweeps: client frames
//! to the IPv6 VIPs (TCP, UDP, ICMPv6 errors and echo requests, extension
//! header chains, fragments, other destinations) and GUE protocol 41 frames
//! for the TC program (hop lists, cluster and other sources).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::model6::NEXTHDR_ICMPV6;
use super::*;

/// An IPv6 header (class and label 0, hop limit 64).
pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload_len: usize) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(payload_len as u16).to_be_bytes());
    h.push(next);
    h.push(64);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    h
}

/// An IPv6 packet: header (next header `next`), `ext` (chained by the
/// caller), `l4`.
pub fn l3v6(src: Ipv6Addr, dst: Ipv6Addr, next: u8, ext: &[u8], l4: &[u8]) -> Vec<u8> {
    let mut p = ipv6(src, dst, next, ext.len() + l4.len());
    p.extend_from_slice(ext);
    p.extend_from_slice(l4);
    p
}

/// A chain of extension headers of `kinds` (each 0, 43, 60 or 44), each
/// (h[1] + 1) x 8 bytes long with h[1] from `lens` (a fragment header is
/// always 8), ending with next header `last`. Returns (first next header,
/// bytes).
pub fn ext_chain(kinds: &[u8], lens: &[u8], last: u8) -> (u8, Vec<u8>) {
    let mut v = Vec::new();
    for (i, _) in kinds.iter().enumerate() {
        let next = kinds.get(i + 1).copied().unwrap_or(last);
        if kinds[i] == 44 {
            v.extend_from_slice(&[next, 0, 0, 1, 0, 0, 0, 7]);
            continue;
        }
        let len = lens.get(i).copied().unwrap_or(0);
        let mut h = vec![next, len];
        // PadN covering the rest (options) / zeros (routing).
        h.resize((len as usize + 1) * 8, 0);
        if kinds[i] != 43 {
            h[2] = 1;
            h[3] = (len as usize * 8 + 4) as u8;
        }
        v.extend_from_slice(&h);
    }
    (kinds.first().copied().unwrap_or(last), v)
}

/// A client's IPv6 frame: Ethernet from `CLIENT_MAC` to `mac`.
pub fn frame6(mac: [u8; 6], l3: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, CLIENT_MAC, 0x86dd);
    f.extend_from_slice(l3);
    f
}

/// An ICMPv6 message with a valid checksum from `src` to `dst`.
pub fn icmp6(src: Ipv6Addr, dst: Ipv6Addr, ty: u8, code: u8, word: u32, body: &[u8]) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0];
    m.extend_from_slice(&word.to_be_bytes());
    m.extend_from_slice(body);
    let c = super::model6::icmp6_csum(&src.octets(), &dst.octets(), &m);
    put16(&mut m, 2, c);
    m
}

/// An ICMPv6 error (`ty`/`code`) from `ROUTER6` to `to` quoting a TCP/UDP
/// packet qsrc:sp -> qdst:dp (its IPv6 header and 20 bytes of L4).
#[allow(clippy::too_many_arguments)]
pub fn icmp6_error(
    ty: u8,
    code: u8,
    to: Ipv6Addr,
    qsrc: Ipv6Addr,
    qdst: Ipv6Addr,
    proto: u8,
    sp: u16,
    dp: u16,
) -> Vec<u8> {
    let l4 = if proto == IPPROTO_TCP {
        tcp(sp, dp, ACK, &[])
    } else {
        udp(sp, dp, &[0; 12])
    };
    let mut q = ipv6(qsrc, qdst, proto, 1400);
    q.extend_from_slice(&l4);
    let word = if ty == 2 { 1280 } else { 0 };
    l3v6(
        ROUTER6,
        to,
        NEXTHDR_ICMPV6,
        &[],
        &icmp6(ROUTER6, to, ty, code, word, &q),
    )
}

/// A GUE frame, protocol 41, from `src` to this node.
pub fn gue6(mac: [u8; 6], src: Ipv4Addr, next: u8, hops: &[Ipv4Addr], inner: &[u8]) -> Vec<u8> {
    let mut gi = gue_header(41, next, hops);
    gi.extend_from_slice(inner);
    let mut f = eth(mac, MAC12, 0x0800);
    f.extend_from_slice(&gue_outer(src, NODE, 0x8123, GUE_PORT, &gi));
    f
}

pub fn xdp_seeds6(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
    let tcp6 = |dst, sp, dp, flags, data: &[u8]| {
        frame6(
            mac,
            &l3v6(CLIENT6, dst, IPPROTO_TCP, &[], &tcp(sp, dp, flags, data)),
        )
    };
    let udp6 = |dst, sp, dp, data: &[u8]| {
        frame6(
            mac,
            &l3v6(CLIENT6, dst, IPPROTO_UDP, &[], &udp(sp, dp, data)),
        )
    };
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("v6 tcp syn VIP6:80".into(), tcp6(VIP6, 40000, 80, SYN, b"")),
        (
            "v6 tcp data VIP6:80".into(),
            tcp6(VIP6, 40001, 80, ACK | PSH, &[0x41; 100]),
        ),
        (
            "v6 tcp syn VIP6B:8080".into(),
            tcp6(VIP6B, 40002, 8080, SYN, b""),
        ),
        (
            "v6 tcp syn VIP6B:443 (no backend)".into(),
            tcp6(VIP6B, 40003, 443, SYN, b""),
        ),
        (
            "v6 tcp syn VIP6:81 (no service)".into(),
            tcp6(VIP6, 40004, 81, SYN, b""),
        ),
        ("v6 udp VIP6:53".into(), udp6(VIP6, 5353, 53, b"query")),
        ("v6 udp VIP6:53 other".into(), udp6(VIP6, 5354, 53, b"q")),
        (
            "v6 tcp syn non-VIP".into(),
            tcp6(OTHER6, 40005, 80, SYN, b""),
        ),
        (
            "v6 big tcp VIP6:80".into(),
            tcp6(VIP6, 40006, 80, ACK, &[0x42; 1420]),
        ),
        ("v6 padded tcp VIP6:80".into(), {
            let mut f = tcp6(VIP6, 40007, 80, ACK, b"");
            f.extend_from_slice(&[0; 10]);
            f
        }),
        (
            "v6 echo request VIP6".into(),
            frame6(
                mac,
                &l3v6(
                    CLIENT6,
                    VIP6,
                    NEXTHDR_ICMPV6,
                    &[],
                    &icmp6(CLIENT6, VIP6, 128, 0, 0x0001_0001, b"ping"),
                ),
            ),
        ),
        (
            "v6 echo reply VIP6".into(),
            frame6(
                mac,
                &l3v6(
                    CLIENT6,
                    VIP6,
                    NEXTHDR_ICMPV6,
                    &[],
                    &icmp6(CLIENT6, VIP6, 129, 0, 0x0001_0001, b"pong"),
                ),
            ),
        ),
    ];
    for (ty, code, proto, sp, dp) in [
        (2, 0, IPPROTO_TCP, 80, 41000),
        (1, 4, IPPROTO_UDP, 53, 5353),
        (3, 0, IPPROTO_TCP, 80, 41001),
        (4, 0, IPPROTO_UDP, 53, 5354),
        (1, 0, IPPROTO_TCP, 8080, 41002),
    ] {
        let q = if dp == 41002 { VIP6B } else { VIP6 };
        v.push((
            format!("v6 icmp6 type {ty} quoting {proto}/{sp}"),
            frame6(mac, &icmp6_error(ty, code, q, q, CLIENT6, proto, sp, dp)),
        ));
    }
    v.push((
        "v6 icmp6 quoting another VIP".into(),
        frame6(
            mac,
            &icmp6_error(2, 0, VIP6, VIP6B, CLIENT6, IPPROTO_TCP, 8080, 41003),
        ),
    ));
    v.push(("v6 icmp6 quote with an extension header".into(), {
        let mut f = frame6(
            mac,
            &icmp6_error(2, 0, VIP6, VIP6, CLIENT6, IPPROTO_TCP, 80, 41004),
        );
        f[14 + 48 + 6] = 60;
        f
    }));
    // Extension header chains of 0-6 headers before TCP, UDP and ICMPv6.
    let kinds = [0u8, 43, 60, 60, 43, 0];
    for k in 0..=6usize {
        let lens: Vec<u8> = (0..k).map(|i| (i % 3) as u8).collect();
        let (first, ext) = ext_chain(&kinds[..k], &lens, IPPROTO_TCP);
        v.push((
            format!("v6 {k} extension headers, tcp syn"),
            frame6(
                mac,
                &l3v6(CLIENT6, VIP6, first, &ext, &tcp(40010, 80, SYN, b"")),
            ),
        ));
        let (first, ext) = ext_chain(&kinds[..k], &lens, IPPROTO_UDP);
        v.push((
            format!("v6 {k} extension headers, udp"),
            frame6(mac, &l3v6(CLIENT6, VIP6, first, &ext, &udp(5355, 53, b"q"))),
        ));
    }
    let (first, ext) = ext_chain(&[60], &[0], NEXTHDR_ICMPV6);
    let mut q = ipv6(VIP6, CLIENT6, IPPROTO_TCP, 20);
    q.extend_from_slice(&tcp(80, 41005, ACK, &[]));
    v.push((
        "v6 icmp6 error after an extension header".into(),
        frame6(
            mac,
            &l3v6(
                ROUTER6,
                VIP6,
                first,
                &ext,
                &icmp6(ROUTER6, VIP6, 2, 0, 1280, &q),
            ),
        ),
    ));
    for (name, kinds) in [
        ("fragment header", &[44u8][..]),
        ("hop-by-hop + fragment", &[0, 44]),
        ("4 + fragment", &[0, 43, 60, 60, 44]),
    ] {
        let (first, ext) = ext_chain(kinds, &[], IPPROTO_TCP);
        v.push((
            format!("v6 {name}"),
            frame6(
                mac,
                &l3v6(CLIENT6, VIP6, first, &ext, &tcp(40011, 80, ACK, b"abc")),
            ),
        ));
    }
    v
}

pub fn tc_seeds6(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
    let t = |sp, dp, fl, d: &[u8]| l3v6(CLIENT6, VIP6, IPPROTO_TCP, &[], &tcp(sp, dp, fl, d));
    let syn = t(40000, 80, SYN, b"");
    let data = t(40001, 80, ACK | PSH, b"GET / HTTP/1.1\r\n");
    let dns = l3v6(CLIENT6, VIP6, IPPROTO_UDP, &[], &udp(5353, 53, b"query"));
    let icmp = icmp6_error(2, 0, VIP6, VIP6, CLIENT6, IPPROTO_TCP, 80, 41000);
    let echo = l3v6(
        CLIENT6,
        VIP6,
        NEXTHDR_ICMPV6,
        &[],
        &icmp6(CLIENT6, VIP6, 128, 0, 1, b"ping"),
    );
    let g = |src, next, hops: &[Ipv4Addr], inner: &[u8]| gue6(mac, src, next, hops, inner);
    let eight = [B13, B12, B14, R5, FAR, NODE, B13, B12];
    let (first, ext) = ext_chain(&[0, 60], &[0, 1], IPPROTO_TCP);
    let with_ext = l3v6(CLIENT6, VIP6, first, &ext, &tcp(40002, 80, ACK, b"x"));
    let (first, ext) = ext_chain(&[0, 44], &[0], IPPROTO_TCP);
    let frag = l3v6(CLIENT6, VIP6, first, &ext, &tcp(40003, 80, ACK, b"x"));
    let (first, ext) = ext_chain(&[0, 43, 60, 60, 43], &[], IPPROTO_TCP);
    let five = l3v6(CLIENT6, VIP6, first, &ext, &tcp(40004, 80, SYN, b""));
    let est = |d: &[u8]| {
        l3v6(
            VIP6B,
            VIP6,
            IPPROTO_TCP,
            &[],
            &tcp(EST_PORT, 80, ACK | PSH, d),
        )
    };
    let not_vip = l3v6(CLIENT6, OTHER6, IPPROTO_TCP, &[], &tcp(1, 80, SYN, b""));
    vec![
        ("v6 syn no hop".into(), g(B12, 0, &[], &syn)),
        ("v6 syn 1 hop".into(), g(B12, 0, &[B13], &syn)),
        ("v6 data 1 hop (forward)".into(), g(B12, 0, &[B13], &data)),
        ("v6 data last hop".into(), g(B12, 1, &[B13], &data)),
        ("v6 data loop guard".into(), g(B12, 0, &[NODE], &data)),
        ("v6 data 8 hops next 3".into(), g(B13, 3, &eight, &data)),
        ("v6 data 8 hops next 8".into(), g(B13, 8, &eight, &data)),
        ("v6 udp 1 hop".into(), g(B12, 0, &[B13], &dns)),
        ("v6 udp last hop".into(), g(B12, 0, &[], &dns)),
        ("v6 udp 2 hops".into(), g(B12, 0, &[B13, B12], &dns)),
        ("v6 icmp6 error 1 hop".into(), g(B12, 0, &[B13], &icmp)),
        ("v6 icmp6 error last hop".into(), g(B12, 1, &[B13], &icmp)),
        ("v6 echo".into(), g(B12, 0, &[], &echo)),
        ("v6 echo 1 hop".into(), g(B12, 0, &[B13], &echo)),
        ("v6 inner not VIP".into(), g(B12, 0, &[], &not_vip)),
        ("v6 from outsider".into(), g(OUTSIDER, 0, &[], &syn)),
        ("v6 from node".into(), g(NODE, 0, &[], &syn)),
        (
            "v6 hop 0".into(),
            g(B12, 0, &[Ipv4Addr::UNSPECIFIED], &data),
        ),
        (
            "v6 hop loopback".into(),
            g(B12, 0, &[Ipv4Addr::LOCALHOST], &data),
        ),
        ("v6 hop VIP".into(), g(B12, 0, &[VIP], &data)),
        (
            "v6 extension headers 1 hop".into(),
            g(B12, 0, &[B13], &with_ext),
        ),
        ("v6 inner fragment".into(), g(B12, 0, &[B13], &frag)),
        ("v6 inner 5 extension headers".into(), g(B12, 0, &[], &five)),
        (
            "v6 data with UDP checksum (forward)".into(),
            with_udp_checksum(g(B12, 0, &[B13], &data)),
        ),
        (
            "v6 wild syn".into(),
            g(
                R5,
                0,
                &[B12],
                &l3v6(
                    CLIENT6,
                    VIP6B,
                    IPPROTO_TCP,
                    &[],
                    &tcp(40005, 8080, SYN, b""),
                ),
            ),
        ),
        (
            "v6 rst last hop".into(),
            g(B12, 1, &[B13], &t(40006, 80, RST, b"")),
        ),
        ("v6 established".into(), g(B12, 0, &[B13], &est(b"more"))),
        (
            "v6 established after extension headers".into(),
            g(B12, 0, &[B13], &{
                let (first, ext) = ext_chain(&[0, 60], &[0, 0], IPPROTO_TCP);
                l3v6(VIP6B, VIP6, first, &ext, &tcp(EST_PORT, 80, ACK, b"m"))
            }),
        ),
        (
            "v6 udp connected".into(),
            g(
                B12,
                0,
                &[B13],
                &l3v6(
                    CLIENT6,
                    VIP6,
                    IPPROTO_UDP,
                    &[],
                    &udp(UDP_PEER_PORT, UDP_CONN_PORT, b"hi"),
                ),
            ),
        ),
        (
            "v6 icmp6 about the established flow".into(),
            g(
                B12,
                0,
                &[B13],
                &icmp6_error(2, 0, VIP6, VIP6, VIP6B, IPPROTO_TCP, 80, EST_PORT),
            ),
        ),
        (
            "v6 icmp6 about the connected udp flow".into(),
            g(
                B12,
                0,
                &[B13],
                &icmp6_error(
                    1,
                    4,
                    VIP6,
                    VIP6,
                    CLIENT6,
                    IPPROTO_UDP,
                    UDP_CONN_PORT,
                    UDP_PEER_PORT,
                ),
            ),
        ),
        (
            "v6 icmp6 about a udp listener's flow, last hop".into(),
            g(
                B12,
                1,
                &[B13],
                &icmp6_error(1, 4, VIP6, VIP6, CLIENT6, IPPROTO_UDP, 53, 5353),
            ),
        ),
        (
            "v6 ack to the listener, last hop".into(),
            g(B12, 1, &[B13], &t(40007, 80, ACK, b"")),
        ),
    ]
}

/// Systematic variants of the IPv6 XDP seeds.
pub fn xdp_sweeps6(mac: [u8; 6], seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, s) in seeds {
        // Truncation at every offset (big frames: the first 200 bytes,
        // then every 13th).
        for n in 14..s.len() {
            if n <= 200 || n % 13 == 0 {
                out.push((format!("{name} truncated to {n}"), s[..n].to_vec()));
            }
        }
        // Every byte of the first 104 after Ethernet, a few values.
        for i in 14..s.len().min(14 + 104) {
            for v in [0u8, 0xff, s[i] ^ 1, s[i] ^ 0x80] {
                if v != s[i] {
                    let mut f = s.clone();
                    f[i] = v;
                    out.push((format!("{name} byte {i} = {v:#04x}"), f));
                }
            }
        }
        // Payload length off by +-N.
        let plen = be16(s, 18) as i64;
        for d in [
            -1000i64, -100, -41, -40, -21, -20, -12, -9, -8, -7, -4, -2, -1, 1, 2, 4, 7, 8, 9, 40,
            1000,
        ] {
            let v = (plen + d).clamp(0, 0xffff) as u16;
            let mut f = s.clone();
            put16(&mut f, 18, v);
            out.push((format!("{name} payload length {v}"), f));
        }
        for v in 0..16u8 {
            let mut f = s.clone();
            f[14] = v << 4;
            out.push((format!("{name} version {v}"), f));
        }
    }
    // Every next header value to a VIP and to another address.
    for (dst, name) in [(VIP6, "VIP6"), (OTHER6, "other")] {
        let base = frame6(
            mac,
            &l3v6(
                CLIENT6,
                dst,
                IPPROTO_TCP,
                &[],
                &tcp(40000, 80, SYN, b"0123456789abcdef0123456789abcdef"),
            ),
        );
        for p in 0..=255u8 {
            let mut f = base.clone();
            f[20] = p;
            out.push((format!("v6 next header {p} to {name}"), f));
        }
    }
    // Extension header lengths: every header of chains of 1-4, lengths
    // 0-16 and large, before TCP with 40 bytes of data.
    let kinds = [0u8, 43, 60, 60];
    for k in 1..=4usize {
        let (first, ext) = ext_chain(&kinds[..k], &[], IPPROTO_TCP);
        let base = frame6(
            mac,
            &l3v6(CLIENT6, VIP6, first, &ext, &tcp(40020, 80, SYN, &[7; 40])),
        );
        for h in 0..k {
            for len in (0..=16u8).chain([31, 63, 127, 255]) {
                let mut f = base.clone();
                f[14 + 40 + 8 * h + 1] = len;
                out.push((format!("v6 {k} ext headers, header {h} length {len}"), f));
            }
            for nh in [0u8, 6, 17, 43, 44, 58, 59, 60, 135, 255] {
                let mut f = base.clone();
                f[14 + 40 + 8 * h] = nh;
                out.push((format!("v6 {k} ext headers, header {h} next {nh}"), f));
            }
        }
    }
    // ICMPv6: every type; the quote's first byte and next header; the
    // payload length cut at every byte of the message.
    let icmp = frame6(
        mac,
        &icmp6_error(2, 0, VIP6, VIP6, CLIENT6, IPPROTO_TCP, 80, 41000),
    );
    let q = 14 + 40 + 8;
    for v in 0..=255u8 {
        let mut f = icmp.clone();
        f[14 + 40] = v;
        out.push((format!("v6 icmp6 type {v}"), f));
        let mut f = icmp.clone();
        f[q] = v;
        out.push((format!("v6 icmp6 quote byte 0 = {v:#04x}"), f));
        let mut f = icmp.clone();
        f[q + 6] = v;
        out.push((format!("v6 icmp6 quoted next header {v}"), f));
    }
    for plen in 0..=(icmp.len() - 14 - 40 + 4) {
        let mut f = icmp.clone();
        put16(&mut f, 18, plen as u16);
        out.push((format!("v6 icmp6 payload length {plen}"), f));
    }
    // Sizes around the MTU (1500 - 36 - 4N), over many flows (every kind
    // of first hop), from the client and from sources that get no reply
    // (multicast, unspecified); ICMPv6 errors that big are dropped.
    let mcast: Ipv6Addr = "ff02::1".parse().unwrap();
    for sport in 50000..50040u16 {
        for tot in [
            1447usize, 1448, 1449, 1451, 1452, 1453, 1455, 1456, 1457, 1460, 1461, 1464, 1465,
            1480, 1500,
        ] {
            let src = match sport % 8 {
                0 => mcast,
                1 => Ipv6Addr::UNSPECIFIED,
                _ => CLIENT6,
            };
            let t = tcp(sport, 80, ACK, &vec![0x55; tot - 60]);
            out.push((
                format!("v6 TCP VIP6:80 from [{src}]:{sport}, {tot} bytes"),
                frame6(mac, &l3v6(src, VIP6, IPPROTO_TCP, &[], &t)),
            ));
        }
    }
    for sport in 51000..51024u16 {
        for tot in [1447usize, 1448, 1449, 1451, 1452, 1453, 1456, 1460, 1464] {
            let u = udp(sport, 53, &vec![0x55; tot - 48]);
            out.push((
                format!("v6 UDP VIP6:53 from port {sport}, {tot} bytes"),
                frame6(mac, &l3v6(CLIENT6, VIP6, IPPROTO_UDP, &[], &u)),
            ));
        }
    }
    for dp in 41000..41016u16 {
        let mut f = frame6(
            mac,
            &icmp6_error(1, 0, VIP6, VIP6, CLIENT6, IPPROTO_TCP, 80, dp),
        );
        let extra = 1500 - (f.len() - 14);
        f.extend(std::iter::repeat_n(0x66, extra));
        let plen = (f.len() - 54) as u16;
        put16(&mut f, 18, plen);
        out.push((format!("v6 big ICMPv6 error quoting port {dp}"), f));
    }
    out
}

/// Systematic variants of the IPv6 TC seeds.
pub fn tc_sweeps6(mac: [u8; 6], seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (name, s) in seeds {
        for n in 14..s.len() {
            out.push((format!("{name} truncated to {n}"), s[..n].to_vec()));
        }
    }
    let data = l3v6(CLIENT6, VIP6, IPPROTO_TCP, &[], &tcp(40001, 80, ACK, b"x"));
    let base = gue6(mac, B12, 0, &[B13], &data);
    // Every value of every GUE byte.
    for i in 0..8 {
        for v in 0..=255u8 {
            let mut f = base.clone();
            f[42 + i] = v;
            out.push((format!("v6 data: GUE byte {i} = {v:#04x}"), f));
        }
    }
    // Hop lists of 0-8 entries (and beyond), every next index up to N + 1,
    // from a cluster node and from outside the cluster.
    for src in [B12, OUTSIDER] {
        for n in (0..=9usize).chain([16, 31]) {
            let hops: Vec<Ipv4Addr> = (0..n).map(|i| [B13, R5, FAR, B14, NODE][i % 5]).collect();
            for next in 0..=(n + 1) {
                let mut g = vec![((1 + n) & 0x1f) as u8, 41, 0, 0, 0, 0, next as u8, n as u8];
                for h in &hops {
                    g.extend_from_slice(&h.octets());
                }
                g.extend_from_slice(&data);
                let mut f = eth(mac, MAC12, 0x0800);
                f.extend_from_slice(&gue_outer(src, NODE, 0x8123, GUE_PORT, &g));
                out.push((format!("v6 from {src}: {n} hops, next {next}"), f));
            }
        }
    }
    let inner = 14 + 20 + 8 + 12;
    // Every byte of the inner IPv6 header and the first L4 bytes.
    for i in inner..base.len() {
        for v in [0u8, 0xff, base[i] ^ 1, base[i] ^ 0x80] {
            if v != base[i] {
                let mut f = base.clone();
                f[i] = v;
                out.push((format!("v6 inner byte {} = {v:#04x}", i - inner), f));
            }
        }
    }
    // Inner payload length off by +-N (and with the outer lengths made to
    // match).
    let plen = be16(&base, inner + 4) as i64;
    for d in [-40i64, -21, -20, -19, -13, -12, -8, -1, 1, 2, 8, 40, 1000] {
        let v = (plen + d).clamp(0, 0xffff) as u16;
        let mut f = base.clone();
        put16(&mut f, inner + 4, v);
        out.push((format!("v6 inner payload length {v}"), f.clone()));
        if d > -21 && d < 100 {
            f.resize((f.len() as i64 + d) as usize, 0x77);
            super::generate::fix_gue_lengths(&mut f);
            out.push((format!("v6 inner payload length {v}, lengths fixed"), f));
        }
    }
    // Every inner next header.
    for p in 0..=255u8 {
        let mut f = base.clone();
        f[inner + 6] = p;
        out.push((format!("v6 inner next header {p}"), f));
    }
    // Inner extension header chains and their lengths.
    let kinds = [0u8, 43, 60, 60, 0];
    for k in 0..=5usize {
        let (first, ext) = ext_chain(&kinds[..k], &[], IPPROTO_TCP);
        let p = l3v6(CLIENT6, VIP6, first, &ext, &tcp(40030, 80, SYN, &[3; 24]));
        let b = gue6(mac, B12, 0, &[B13], &p);
        out.push((format!("v6 inner {k} extension headers"), b.clone()));
        for h in 0..k {
            for len in [1u8, 2, 3, 4, 5, 255] {
                let mut f = b.clone();
                f[inner + 40 + 8 * h + 1] = len;
                out.push((
                    format!("v6 inner {k} ext headers, header {h} length {len}"),
                    f,
                ));
            }
        }
    }
    // Inner ICMPv6 types.
    let icmp = gue6(
        mac,
        B12,
        0,
        &[B13],
        &icmp6_error(2, 0, VIP6, VIP6, CLIENT6, IPPROTO_TCP, 80, 41000),
    );
    for v in 0..=255u8 {
        let mut f = icmp.clone();
        f[inner + 40] = v;
        out.push((format!("v6 inner icmp6 type {v}"), f));
    }
    // Outer sources, inner destinations and hops from the interesting set.
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
        out.push((format!("v6 outer source {a}"), f));
        let mut f = base.clone();
        f[50..54].copy_from_slice(&a.octets());
        out.push((format!("v6 hop {a}"), f));
    }
    for a in [VIP6, VIP6B, OTHER6, CLIENT6, Ipv6Addr::UNSPECIFIED] {
        let mut f = base.clone();
        f[inner + 24..inner + 40].copy_from_slice(&a.octets());
        out.push((format!("v6 inner destination {a}"), f));
    }
    for doff in 0..16u8 {
        let mut f = base.clone();
        f[inner + 40 + 12] = doff << 4;
        out.push((format!("v6 inner TCP doff {doff}"), f));
    }
    out
}
