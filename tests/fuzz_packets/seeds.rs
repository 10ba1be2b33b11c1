//! Valid seed frames for both programs and their systematic sweeps
//! (truncations, every value of every header field of interest).

use std::net::Ipv4Addr;

use super::*;

pub fn icmp_frag_needed(
    emb_src: Ipv4Addr,
    emb_dst: Ipv4Addr,
    proto: u8,
    sp: u16,
    dp: u16,
) -> Vec<u8> {
    icmp_error(3, 4, emb_src, emb_dst, proto, sp, dp)
}

/// An ICMP error of `ty`/`code` quoting a TCP/UDP packet emb_src:sp ->
/// emb_dst:dp (its IPv4 header and first 8 L4 bytes).
pub fn icmp_error(
    ty: u8,
    code: u8,
    emb_src: Ipv4Addr,
    emb_dst: Ipv4Addr,
    proto: u8,
    sp: u16,
    dp: u16,
) -> Vec<u8> {
    let l4 = if proto == IPPROTO_TCP {
        tcp(sp, dp, ACK, &[])
    } else {
        udp(sp, dp, &[0; 12])
    };
    let mut emb = ipv4(emb_src, emb_dst, proto, l4.len(), 0x4000, &[]);
    emb.extend_from_slice(&l4[..8]);
    let mut icmp = vec![ty, code, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&emb);
    let c = csum(&icmp);
    put16(&mut icmp, 2, c);
    icmp
}

pub fn xdp_seeds(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
    let syn = |dst, dport| l3(CLIENT, dst, IPPROTO_TCP, &tcp(40000, dport, SYN, b""));
    let mut v: Vec<(String, Vec<u8>)> = vec![
        ("tcp syn VIP:80".into(), client_frame(mac, &syn(VIP, 80))),
        (
            "tcp data VIP:80".into(),
            client_frame(
                mac,
                &l3(
                    CLIENT,
                    VIP,
                    IPPROTO_TCP,
                    &tcp(40001, 80, ACK | PSH, &[0x41; 100]),
                ),
            ),
        ),
        (
            "tcp syn VIP3:8080".into(),
            client_frame(mac, &syn(VIP3, 8080)),
        ),
        (
            "tcp syn VIP2:443 (no backend)".into(),
            client_frame(mac, &syn(VIP2, 443)),
        ),
        (
            "udp VIP:53".into(),
            client_frame(mac, &l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"query"))),
        ),
        (
            "udp VIP2:53".into(),
            client_frame(mac, &l3(CLIENT, VIP2, IPPROTO_UDP, &udp(5353, 53, b"q"))),
        ),
        (
            "icmp frag-needed tcp".into(),
            client_frame(
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
            client_frame(
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
            "icmp time exceeded tcp".into(),
            client_frame(
                mac,
                &l3(
                    ROUTER,
                    VIP,
                    IPPROTO_ICMP,
                    &icmp_error(11, 0, VIP, CLIENT, IPPROTO_TCP, 80, 41000),
                ),
            ),
        ),
        (
            "icmp port unreachable udp, quote of another VIP".into(),
            client_frame(
                mac,
                &l3(
                    ROUTER,
                    VIP,
                    IPPROTO_ICMP,
                    &icmp_error(3, 3, VIP2, CLIENT, IPPROTO_UDP, 53, 5353),
                ),
            ),
        ),
        (
            "udp VIP2:53 (second hop, first again)".into(),
            client_frame(mac, &l3(CLIENT, VIP2, IPPROTO_UDP, &udp(5354, 53, b"q"))),
        ),
        (
            "icmp echo VIP".into(),
            client_frame(
                mac,
                &l3(CLIENT, VIP, IPPROTO_ICMP, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]),
            ),
        ),
        ("tcp syn non-VIP".into(), client_frame(mac, &syn(OTHER, 80))),
        (
            "udp GUE to node".into(),
            client_frame(
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
            client_frame(mac, &p)
        }),
        (
            "big tcp VIP:80".into(),
            client_frame(
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
            let mut f = client_frame(
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
            client_frame(mac, &p)
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
        client_frame(
            mac,
            &l3(NODE, VIP, IPPROTO_TCP, &tcp(EST_PORT, 80, ACK, b"x")),
        ),
    ));
    v
}

pub fn tc_seeds(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
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
        ("icmp echo 1 hop".into(), g(B12, 0, &[B13], &echo)),
        (
            "icmp time exceeded established".into(),
            g(
                B12,
                0,
                &[B13],
                &l3(
                    ROUTER,
                    VIP,
                    IPPROTO_ICMP,
                    &icmp_error(11, 0, VIP, NODE, IPPROTO_TCP, 80, EST_PORT),
                ),
            ),
        ),
        (
            "icmp udp listener last hop".into(),
            g(
                B12,
                1,
                &[B13],
                &l3(
                    ROUTER,
                    VIP,
                    IPPROTO_ICMP,
                    &icmp_error(3, 4, VIP, CLIENT, IPPROTO_UDP, 53, 5353),
                ),
            ),
        ),
        (
            "udp listener 2 hops (second, first)".into(),
            g(B12, 0, &[B13, B12], &dns),
        ),
        (
            "data with UDP checksum (forward)".into(),
            with_udp_checksum(g(B12, 0, &[B13], &data)),
        ),
        (
            "fin no ack last hop".into(),
            g(
                B12,
                1,
                &[B13],
                &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40011, 80, FIN, b"bye")),
            ),
        ),
        ("inner not VIP".into(), g(B12, 0, &[], &not_vip)),
        ("from outsider".into(), g(OUTSIDER, 0, &[], &syn)),
        ("from node".into(), g(NODE, 0, &[], &syn)),
        // Marked as the balancer hands frames to its own TC: a local first
        // hop's packet (second chance as on any backend), the slow path
        // (GUE from this node to another: sent on), and a mark one bit off.
        (
            "from node, marked".into(),
            gue_frame(mac, MARK, NODE, NODE, 0, &[B13], &data),
        ),
        (
            "slow path, marked".into(),
            gue_frame(mac, MARK, NODE, B13, 0, &[], &syn),
        ),
        ("slow path, mark one bit off".into(), {
            let mut m = MARK;
            m[5] ^= 1;
            gue_frame(mac, m, NODE, B13, 0, &[], &syn)
        }),
        (
            "slow path, marked, from another node".into(),
            gue_frame(mac, MARK, B12, B13, 0, &[], &syn),
        ),
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
            client_frame(mac, &l3(B12, NODE, IPPROTO_UDP, &udp(1234, 5000, b"hello"))),
        ),
        (
            "tcp to node".into(),
            client_frame(
                mac,
                &l3(B12, NODE, IPPROTO_TCP, &tcp(1234, GUE_PORT, SYN, b"")),
            ),
        ),
    ];
    let arp = xdp_seeds(mac)
        .into_iter()
        .find(|(n, _)| n == "arp")
        .expect("arp seed");
    v.push(arp);
    v
}

/// A GUE frame with its outer UDP checksum computed (nilb sends 0; other
/// senders may not).
pub fn with_udp_checksum(mut f: Vec<u8>) -> Vec<u8> {
    put16(&mut f, 14 + 26, 0);
    let o = &f[14..];
    let len = be16(o, 24) as usize;
    let mut p = o[12..20].to_vec();
    p.extend_from_slice(&[0, IPPROTO_UDP]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p.extend_from_slice(&o[20..20 + len]);
    let c = match csum(&p) {
        0 => 0xffff,
        c => c,
    };
    put16(&mut f, 14 + 26, c);
    f
}

/// Systematic variants of the XDP seeds.
pub fn xdp_sweeps(seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
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
        let base = client_frame(
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
    let icmp = client_frame(
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
    // Sizes around the MTU (1500 - 36 - 4N with N listed hops, N up to 3
    // previous owners for TCP, and the first hop again for UDP),
    // over many flows so that every kind of first hop is met; without DF
    // (dropped when too big) and with DF (ICMP "fragmentation needed"),
    // from the client and from sources that get no reply.
    for sport in 50000..50048u16 {
        for tot in [
            1447usize, 1448, 1449, 1451, 1452, 1453, 1455, 1456, 1457, 1458, 1459, 1460, 1461,
            1463, 1464, 1465, 1480, 1500,
        ] {
            let t = tcp(sport, 80, ACK, &vec![0x55; tot - 40]);
            out.push((
                format!("TCP VIP:80 from port {sport}, total length {tot}"),
                client_frame(MAC12, &l3(CLIENT, VIP, IPPROTO_TCP, &t)),
            ));
            let src = match sport % 8 {
                0 => Ipv4Addr::new(0, 1, 2, 3),
                1 => Ipv4Addr::new(224, 0, 0, 9),
                _ => CLIENT,
            };
            let opts: &[u8] = if sport % 3 == 0 { &[1, 1, 1, 0] } else { &[] };
            let t = tcp(sport, 80, ACK, &vec![0x55; tot - 40 - opts.len()]);
            let mut p = ipv4(src, VIP, IPPROTO_TCP, t.len(), 0x4000, opts);
            p.extend_from_slice(&t);
            out.push((
                format!("TCP VIP:80 from {src}:{sport}, DF, total length {tot}"),
                client_frame(MAC12, &p),
            ));
        }
    }
    // UDP around the MTU: a UDP flow lists one hop more (the first hop
    // again), up to four.
    for sport in 51000..51032u16 {
        for tot in [1447usize, 1448, 1449, 1451, 1452, 1453, 1456, 1460, 1464] {
            let u = udp(sport, 53, &vec![0x55; tot - 28]);
            let mut p = ipv4(CLIENT, VIP, IPPROTO_UDP, u.len(), 0x4000, &[]);
            p.extend_from_slice(&u);
            out.push((
                format!("UDP VIP:53 from port {sport}, DF, total length {tot}"),
                client_frame(MAC12, &p),
            ));
        }
    }
    out
}

/// Systematic variants of the TC seeds.
pub fn tc_sweeps(mac: [u8; 6], seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
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
