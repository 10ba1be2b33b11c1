//! Packet fixtures through BPF_PROG_TEST_RUN (Katran style): each case is
//! {description, input frame, expected verdict, expected output frame,
//! expected counter deltas}, run through the real XDP balancer or TC program
//! with maps filled from a YAML config. Expected bytes are written out field
//! by field in `common`, independently of the C code. Needs root; skipped
//! (one line on stderr) without it.

mod common;

use std::net::Ipv4Addr;

use common::*;
use nilb::config::Config;
use nilb::control::ControlPlane;
use nilb::hash::{IPPROTO_TCP, IPPROTO_UDP};

struct Fixture {
    description: &'static str,
    input: Vec<u8>,
    verdict: u32,
    /// None: the frame must come out unchanged.
    output: Option<Vec<u8>>,
    counters: &'static [(&'static str, u64)],
}

/// The same frame with 4 bytes of outer IPv4 options (NOPs), lengths and
/// checksum fixed.
fn with_outer_options(frame: &[u8]) -> Vec<u8> {
    let mut f = frame[..14 + 20].to_vec();
    f[14] = 0x46;
    f.extend_from_slice(&[1, 1, 1, 1]);
    f.extend_from_slice(&frame[14 + 20..]);
    let total = (f.len() - 14) as u16;
    put16(&mut f, 16, total);
    fix_ip_csum(&mut f, 14);
    f
}

fn run_xdp_fixtures(l: &Loaded, ifindex: u32, fixtures: &[Fixture]) {
    for f in fixtures {
        let ((verdict, out), deltas) = l.counted(|| l.dp.run_xdp(&f.input, ifindex).unwrap());
        assert_eq!(verdict, f.verdict, "{}: verdict", f.description);
        let want = f.output.as_ref().unwrap_or(&f.input);
        assert_bytes(f.description, &out, want);
        assert_eq!(deltas, f.counters.to_vec(), "{}: counters", f.description);
    }
}

fn run_tc_fixtures(l: &Loaded, ifindex: u32, fixtures: &[Fixture]) {
    for f in fixtures {
        let ((verdict, out), deltas) = l.counted(|| l.dp.run_tc(&f.input, ifindex).unwrap());
        assert_eq!(verdict, f.verdict, "{}: verdict", f.description);
        let want = f.output.as_ref().unwrap_or(&f.input);
        assert_bytes(f.description, &out, want);
        assert_eq!(deltas, f.counters.to_vec(), "{}: counters", f.description);
    }
}

#[test]
fn xdp_syn_to_vip_is_encapsulated_byte_for_byte() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let input = client_frame(net.mac, &inner);
    let sport = sport_of(CLIENT, VIP, 40000, 80, IPPROTO_TCP);
    let want = encapsulated(MAC12, net.mac, B12, &[], sport, &inner);

    let ((verdict, out), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(verdict, XDP_TX);
    assert_bytes("SYN to VIP", &out, &want);
    assert_eq!(deltas, vec![("xdp_encap_tx", 1)]);

    // Every outer and GUE byte, spelled out once more against docs/design.md
    // "GUE wire format".
    let o = &out[14..];
    assert_eq!(&o[0..2], &[0x45, 0x00], "version 4, IHL 5, TOS 0");
    assert_eq!(
        u16::from_be_bytes([o[2], o[3]]) as usize,
        36 + inner.len(),
        "total length"
    );
    assert_eq!(&o[4..8], &[0, 0, 0x40, 0], "ID 0, DF");
    assert_eq!(&o[8..10], &[64, 17], "TTL 64, UDP");
    assert_eq!(csum(&o[..20]), 0, "valid IPv4 checksum");
    assert_eq!(&o[12..16], &NODE.octets(), "outer source = this node");
    assert_eq!(&o[16..20], &B12.octets(), "outer destination = first hop");
    assert_eq!(u16::from_be_bytes([o[20], o[21]]), sport);
    assert!(sport & 0x8000 != 0);
    assert_eq!(u16::from_be_bytes([o[22], o[23]]), GUE_PORT, "GUE port");
    assert_eq!(
        u16::from_be_bytes([o[24], o[25]]) as usize,
        16 + inner.len(),
        "UDP length"
    );
    assert_eq!(
        u16::from_be_bytes([o[26], o[27]]),
        lco_check(
            &[&o[12..20], &[0, 17], &o[24..26]].concat(),
            &o[20..20 + 16 + inner.len()]
        ),
        "UDP checksum by local checksum offload"
    );
    assert_eq!(
        &o[28..36],
        &[0x01, 4, 0, 0, 0, 0, 0, 0],
        "GUE: hlen 1, IPv4, no hops"
    );
    assert_eq!(&o[36..], &inner[..], "inner packet unchanged");

    // The same flow twice gives identical output.
    let (v2, out2) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!((v2, &out2), (verdict, &out));

    // Per-backend balancer counters: two SYNs to .12.
    let key = l.cp.config().services[0].key();
    let slot = l.cp.service(&key).unwrap().backends[&B12.into()].slot;
    let bs = l.dp.backend_stats(slot).unwrap();
    assert_eq!(
        (bs.packets, bs.bytes, bs.syns),
        (2, 2 * inner.len() as u64, 2)
    );
}

/// The outer UDP checksum (local checksum offload, docs/design.md
/// "Checksums") verifies, summed over every byte, exactly when the inner
/// packet's own checksums do: a NIC that checks it hands the backend the
/// inner packet's verdict. A UDP flow without a checksum gets 0.
#[test]
fn xdp_outer_udp_checksum_verifies_exactly_when_the_inner_does() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let mut cases = Vec::new();
    for (what, proto, l4) in [
        ("TCP SYN", IPPROTO_TCP, tcp(40000, 80, SYN, b"")),
        (
            "TCP data",
            IPPROTO_TCP,
            tcp(40001, 80, ACK | PSH, b"hello, backend"),
        ),
        ("TCP odd length", IPPROTO_TCP, tcp(40002, 80, ACK, b"odd")),
        ("UDP", IPPROTO_UDP, udp(40003, 53, b"query")),
    ] {
        let mut good = l3(CLIENT, VIP, proto, &l4);
        fix_l4_csum(&mut good);
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0x40; // corrupted on the way to the balancer
        let mut bad_ip = good.clone();
        bad_ip[10] ^= 1; // inner IPv4 header checksum wrong
        cases.push((format!("{what}, checksums valid"), good, true));
        cases.push((format!("{what}, payload corrupted"), bad, false));
        cases.push((format!("{what}, inner IPv4 checksum wrong"), bad_ip, false));
    }
    for (what, inner, valid) in &cases {
        let (verdict, out) =
            l.dp.run_xdp(&client_frame(net.mac, inner), net.ifindex)
                .unwrap();
        assert_eq!(verdict, XDP_TX, "{what}");
        assert_ne!(
            &out[14 + 26..14 + 28],
            &[0, 0],
            "{what}: a checksum is sent"
        );
        assert_eq!(outer_udp_verifies(&out), *valid, "{what}: outer verifies");
        assert_eq!(&out[14 + 36..], &inner[..], "{what}: inner unchanged");
    }
    // UDP without a checksum: nothing to derive the outer one from.
    let none = l3(CLIENT, VIP, IPPROTO_UDP, &udp(40004, 53, b"query"));
    let (verdict, out) =
        l.dp.run_xdp(&client_frame(net.mac, &none), net.ifindex)
            .unwrap();
    assert_eq!(verdict, XDP_TX);
    assert_eq!(
        &out[14 + 26..14 + 28],
        &[0, 0],
        "UDP without checksum: outer 0"
    );
}

#[test]
fn tc_counts_per_service() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    for (next, hops, inner) in [
        (0u8, &[B13][..], &syn),
        (0, &[B13][..], &data),
        (1, &[B13][..], &data),
    ] {
        l.dp.run_tc(
            &gue_frame(net.mac, MAC12, B12, NODE, next, hops, inner),
            net.ifindex,
        )
        .unwrap();
    }
    let index =
        l.cp.service(&l.cp.config().services[0].key())
            .unwrap()
            .index;
    let st = l.dp.service_stats(index).unwrap();
    assert_eq!(
        (st.tc_decap, st.tc_forward, st.tc_drops, st.xdp_drops),
        (1, 1, 1, 0)
    );
}

#[test]
fn xdp_second_hop_listed_only_when_set() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let mut l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let input = client_frame(net.mac, &inner);
    let sport = sport_of(CLIENT, VIP, 40001, 80, IPPROTO_TCP);

    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!(v, XDP_TX);
    assert_bytes(
        "no second hop",
        &out,
        &encapsulated(MAC12, net.mac, B12, &[], sport, &inner),
    );

    // Drain .12 in favour of .13: every bucket moves, .12 becomes second hop.
    l.reload(
        &config(&[(B12, 1, "drained"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!(v, XDP_TX);
    let want = encapsulated(MAC13, net.mac, B13, &[B12], sport, &inner);
    assert_bytes("with second hop", &out, &want);
    assert_eq!(
        &out[14 + 28..14 + 40],
        &[0x02, 4, 0, 0, 0, 0, 0, 1, 10, 0, 0, 12]
    );
}

/// A control plane that does not know a service the maps hold (a daemon
/// adopting the pins of one that ran an older config, or the restore after
/// a reload that failed half way) removes it with its full plan, so that
/// the service's packets pass again.
#[test]
fn full_plan_removes_services_the_state_does_not_know() {
    let net = TestNet::new();
    let yaml = config(&[(B12, 1, "active")], "drop");
    let mut l = load(&yaml, NODE);
    let dns = client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"q")));
    assert_eq!(l.dp.run_xdp(&dns, net.ifindex).unwrap().0, XDP_TX);

    let web_only = &yaml[..yaml.find("  - name: dns").expect("dns in the config")];
    let cp = ControlPlane::new(Config::parse(web_only).unwrap(), 0);
    cp.apply(&mut l.dp, NODE.into(), &cp.full_plan()).unwrap();
    let ports: Vec<u16> =
        l.dp.live_tables()
            .unwrap()
            .iter()
            .map(|(k, _)| k.port)
            .collect();
    assert_eq!(ports, [80]);
    let (verdict, out) = l.dp.run_xdp(&dns, net.ifindex).unwrap();
    assert_eq!((verdict, out), (XDP_PASS, dns));
}

#[test]
fn xdp_fixture_table() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let mac = net.mac;
    let other = Ipv4Addr::new(10, 0, 0, 50);

    let syn = |dst: Ipv4Addr, dport: u16| {
        client_frame(
            net.mac,
            &l3(CLIENT, dst, IPPROTO_TCP, &tcp(40000, dport, SYN, b"")),
        )
    };
    let with_options = {
        let t = tcp(40002, 80, SYN, b"");
        let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, t.len(), 0, &[1, 1, 1, 0]);
        p.extend_from_slice(&t);
        p
    };
    let fragment = |frag: u16| {
        let t = tcp(40003, 80, ACK, b"0123456789abcdef");
        let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, t.len(), frag, &[]);
        p.extend_from_slice(&t);
        client_frame(net.mac, &p)
    };
    let truncated_tcp = |dst: Ipv4Addr| {
        // IPv4 says TCP but carries only 8 bytes of it.
        let mut p = ipv4(CLIENT, dst, IPPROTO_TCP, 8, 0, &[]);
        p.extend_from_slice(&tcp(40004, 80, SYN, b"")[..8]);
        client_frame(net.mac, &p)
    };
    let dns = l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"query"));
    let mut arp = eth([0xff; 6], CLIENT_MAC, 0x0806);
    arp.extend_from_slice(&[0u8; 28]);
    let mut bad_ihl = client_frame(
        net.mac,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40005, 80, SYN, b"")),
    );
    bad_ihl[14] = 0x44; // IHL 4

    let fixtures = vec![
        Fixture {
            description: "IPv4 with options to a VIP is balanced on its real ports",
            input: client_frame(net.mac, &with_options),
            verdict: XDP_TX,
            output: Some(encapsulated(
                MAC12,
                mac,
                B12,
                &[],
                sport_of(CLIENT, VIP, 40002, 80, IPPROTO_TCP),
                &with_options,
            )),
            counters: &[("xdp_encap_tx", 1)],
        },
        Fixture {
            description: "UDP to a UDP service is balanced",
            input: client_frame(net.mac, &dns),
            verdict: XDP_TX,
            output: Some(encapsulated(
                MAC12,
                mac,
                B12,
                &[],
                sport_of(CLIENT, VIP, 5353, 53, IPPROTO_UDP),
                &dns,
            )),
            counters: &[("xdp_encap_tx", 1)],
        },
        Fixture {
            description: "TCP to a non-VIP address passes untouched",
            input: syn(other, 80),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_not_service", 1)],
        },
        Fixture {
            description: "TCP to a VIP's other port passes untouched",
            input: syn(VIP, 8080),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_not_service", 1)],
        },
        Fixture {
            description: "UDP to a TCP service's port passes untouched",
            input: client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_UDP, &udp(1000, 80, b"x"))),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_not_service", 1)],
        },
        Fixture {
            description: "non-IP (ARP) passes untouched",
            input: arp,
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_non_ip", 1)],
        },
        Fixture {
            description: "ICMP echo to a VIP passes (not balanced)",
            input: client_frame(
                net.mac,
                &l3(CLIENT, VIP, 1, &[8, 0, 0xf7, 0xff, 0, 0, 0, 0]),
            ),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_not_service", 1)],
        },
        Fixture {
            description: "first fragment (MF) of VIP traffic is dropped",
            input: fragment(0x2000),
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_fragment", 1)],
        },
        Fixture {
            description: "later fragment (offset) of VIP traffic is dropped",
            input: fragment(0x0010),
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_fragment", 1)],
        },
        Fixture {
            description: "fragment to a non-VIP address passes",
            input: {
                let t = tcp(1, 2, ACK, b"");
                let mut p = ipv4(CLIENT, other, IPPROTO_TCP, t.len(), 0x2000, &[]);
                p.extend_from_slice(&t);
                client_frame(net.mac, &p)
            },
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_not_service", 1)],
        },
        Fixture {
            description: "truncated TCP header to a VIP is dropped",
            input: truncated_tcp(VIP),
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_malformed", 1)],
        },
        Fixture {
            description: "truncated TCP header to another address passes",
            input: truncated_tcp(other),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_pass_not_service", 1)],
        },
        Fixture {
            description: "TCP header beyond the IPv4 total length (in padding) to a VIP is dropped",
            input: {
                let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, 8, 0, &[]);
                p.extend_from_slice(&tcp(40007, 80, SYN, b""));
                client_frame(net.mac, &p)
            },
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_malformed", 1)],
        },
        Fixture {
            description: "TCP data offset past the segment to a VIP is dropped",
            input: {
                let mut t = tcp(40007, 80, ACK, b"");
                t[12] = 15 << 4;
                client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_TCP, &t))
            },
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_malformed", 1)],
        },
        Fixture {
            description: "UDP length past the IPv4 payload to a VIP is dropped",
            input: {
                let mut u = udp(5353, 53, b"q");
                u[4..6].copy_from_slice(&10u16.to_be_bytes());
                client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_UDP, &u))
            },
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_malformed", 1)],
        },
        Fixture {
            description: "UDP length below its header to a VIP is dropped",
            input: {
                let mut u = udp(5353, 53, b"q");
                u[4..6].copy_from_slice(&7u16.to_be_bytes());
                client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_UDP, &u))
            },
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_malformed", 1)],
        },
        Fixture {
            description: "IHL below 5 to a VIP is dropped",
            input: bad_ihl,
            verdict: XDP_DROP,
            output: None,
            counters: &[("xdp_drop_malformed", 1)],
        },
    ];
    run_xdp_fixtures(&l, net.ifindex, &fixtures);
}

#[test]
fn xdp_ethernet_padding_is_not_carried() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40006, 80, ACK, b""));
    let mut input = client_frame(net.mac, &inner);
    input.resize(60, 0); // minimum Ethernet frame
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!(v, XDP_TX);
    let want = encapsulated(
        MAC12,
        net.mac,
        B12,
        &[],
        sport_of(CLIENT, VIP, 40006, 80, IPPROTO_TCP),
        &inner,
    );
    assert_bytes("padded frame", &out, &want);
}

#[test]
fn xdp_icmp_frag_needed_follows_the_embedded_flow() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let table =
        l.cp.service(&l.cp.config().services[0].key())
            .unwrap()
            .table
            .clone();
    let router = Ipv4Addr::new(198, 51, 100, 1);
    let mut seen = std::collections::BTreeSet::new();
    for cport in 41000..41016u16 {
        // What the backend sent: VIP:80 -> client:cport, first 8 bytes of TCP.
        let emb_tcp = tcp(80, cport, ACK, b"");
        let mut emb = ipv4(VIP, CLIENT, IPPROTO_TCP, emb_tcp.len(), 0, &[]);
        emb.extend_from_slice(&emb_tcp[..8]);
        let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78]; // frag needed, MTU 1400
        icmp.extend_from_slice(&emb);
        let c = csum(&icmp);
        icmp[2..4].copy_from_slice(&c.to_be_bytes());
        let inner = l3(router, VIP, 1, &icmp);

        // The client's flow is client:cport -> VIP:80.
        let h = hash_of((CLIENT, VIP, cport, 80, IPPROTO_TCP));
        let first = v4(table.first((h & (table.size() - 1)) as usize).unwrap());
        let mac = if first == B12 { MAC12 } else { MAC13 };
        seen.insert(first);
        let want = encapsulated(mac, net.mac, first, &[], gue_sport(h), &inner);
        let ((v, out), deltas) = l.counted(|| {
            l.dp.run_xdp(&client_frame(net.mac, &inner), net.ifindex)
                .unwrap()
        });
        assert_eq!(v, XDP_TX, "ICMP for port {cport}");
        assert_bytes("ICMP frag needed", &out, &want);
        assert_eq!(deltas, vec![("xdp_encap_tx", 1), ("xdp_icmp_forwarded", 1)]);
    }
    assert_eq!(seen.len(), 2, "the sample should reach both backends");
}

#[test]
fn xdp_service_without_backend_drops() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[], "drop"), NODE);
    let input = client_frame(
        net.mac,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b"")),
    );
    let ((v, _), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(v, XDP_DROP);
    assert_eq!(deltas, vec![("xdp_drop_no_backend", 1)]);
    let stats = l.dp.service_stats(0).unwrap();
    assert_eq!(stats.xdp_drops, 1);
}

#[test]
fn xdp_local_first_hop_is_marked_for_our_tc() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(NODE, 1, "active")], "drop"), NODE);
    // Not a SYN and no local socket: TC decides (second chance, unknown
    // flow), so it goes up encapsulated.
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, ACK, b"x"));
    let input = client_frame(net.mac, &inner);
    let ((v, out), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS);
    assert_eq!(deltas, vec![("xdp_encap_local", 1)]);
    // Original MACs, outer destination = this node, marked for our TC.
    let sport = sport_of(CLIENT, VIP, 40000, 80, IPPROTO_TCP);
    let want = encapsulated(net.mac, CLIENT_MAC, NODE, &[], sport, &inner);
    assert_bytes("local first hop", &out, &marked(&want));
    // No XDP metadata: the mark is in the frame.
    let split = l.dp.run_xdp_split(&input, net.ifindex).unwrap();
    assert_eq!(split.verdict, XDP_PASS);
    assert!(split.meta.is_empty(), "no XDP metadata: {:?}", split.meta);
    assert_bytes("local first hop, split", &split.frame, &marked(&want));
    // Marked, our TC applies second chance: no socket, no hop left, and
    // unknown_flow drop.
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&out, net.ifindex).unwrap());
    assert_eq!(v, TC_ACT_SHOT);
    assert_eq!(deltas, vec![("tc_drop_unknown_flow", 1)]);
    // A marked frame TC keeps leaves it without the mark: a SYN (decapsulated
    // to the stack) gets the fixed source MAC 02:00:00:6e:69:6c.
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40009, 80, SYN, b""));
    let syn_frame = marked(&encapsulated(
        net.mac,
        CLIENT_MAC,
        NODE,
        &[],
        sport_of(CLIENT, VIP, 40009, 80, IPPROTO_TCP),
        &syn,
    ));
    let ((v, kept), deltas) = l.counted(|| l.dp.run_tc(&syn_frame, net.ifindex).unwrap());
    assert_eq!((v, deltas), (TC_ACT_OK, vec![("tc_decap_syn", 1)]));
    assert_eq!(&kept[..6], &net.mac, "destination MAC kept");
    assert_eq!(
        &kept[6..12],
        &[0x02, 0, 0, 0x6e, 0x69, 0x6c],
        "no mark past TC"
    );
    assert_eq!(&kept[14..], &syn[..], "decapsulated");
    // Without the mark (a forged copy from the wire) our TC refuses it.
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&want, net.ifindex).unwrap());
    assert_eq!(v, TC_ACT_SHOT);
    assert_eq!(deltas, vec![("tc_drop_self_unmarked", 1)]);
}

#[test]
fn xdp_unknown_neighbour_takes_the_tc_slow_path() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let b14 = Ipv4Addr::new(10, 0, 0, 14); // on-link, no neighbour entry
    let l = load(&config(&[(b14, 1, "active")], "drop"), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let input = client_frame(net.mac, &inner);
    let ((v, out), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS);
    assert_eq!(deltas, vec![("xdp_encap_slow_path", 1)]);
    let sport = sport_of(CLIENT, VIP, 40000, 80, IPPROTO_TCP);
    let want = encapsulated(net.mac, CLIENT_MAC, b14, &[], sport, &inner);
    assert_bytes("slow path", &out, &marked(&want));
    // Unmarked, the same frame is not relayed: TC is no open relay for
    // packets that merely claim this node's address.
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&want, net.ifindex).unwrap());
    assert_eq!(v, TC_ACT_OK);
    assert_eq!(deltas, vec![("tc_pass_other", 1)]);
    assert_bytes("unmarked slow-path frame passes", &out, &want);
}

// ---- TC second chance ---------------------------------------------------------

fn backend_config(unknown_flow: &str) -> String {
    config(
        &[(B12, 1, "active"), (B13, 1, "active"), (NODE, 1, "active")],
        unknown_flow,
    )
}

/// The TC program's fixtures on a backend (NODE, unknown_flow: drop) whose
/// interface has MAC `mac`; also the inputs of the XDP receive path's
/// equivalence test.
fn tc_fixtures(mac: [u8; 6]) -> Vec<Fixture> {
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let data = l3(
        CLIENT,
        VIP,
        IPPROTO_TCP,
        &tcp(40001, 80, ACK | PSH, b"GET / HTTP/1.1\r\n"),
    );
    let frame = |src: Ipv4Addr, next: u8, hops: &[Ipv4Addr], inner: &[u8]| {
        gue_frame(mac, MAC12, src, NODE, next, hops, inner)
    };
    let decapsulated = |inner: &[u8]| {
        let mut f = eth(mac, MAC12, 0x0800);
        f.extend_from_slice(inner);
        f
    };
    let with_gue_byte = |i: usize, v: u8| {
        let mut f = frame(B12, 0, &[B13], &data);
        f[14 + 28 + i] = v;
        f
    };
    let mut wrong_inner_len = frame(B12, 0, &[B13], &data);
    let tl = 14 + 28 + 12 + 2;
    wrong_inner_len[tl + 1] ^= 1;
    let mut truncated = frame(B12, 0, &[B13], &data);
    truncated.truncate(14 + 28 + 10);
    let mut ipv6_inner = frame(B12, 0, &[], &data);
    ipv6_inner[14 + 28 + 1] = 41;
    let not_vip = l3(
        CLIENT,
        Ipv4Addr::new(10, 0, 0, 50),
        IPPROTO_TCP,
        &tcp(1, 80, SYN, b""),
    );
    // IPv4 says 28 bytes (8 of TCP) but 20 bytes of TCP follow.
    let short_inner = {
        let mut p = ipv4(CLIENT, VIP, IPPROTO_TCP, 8, 0, &[]);
        p.extend_from_slice(&tcp(40009, 80, SYN, b""));
        p
    };
    let mut udp_other_port = eth(mac, MAC12, 0x0800);
    udp_other_port.extend_from_slice(&l3(B12, NODE, IPPROTO_UDP, &udp(1234, 5000, b"hello")));
    let mut to_other_node = frame(B12, 0, &[], &syn);
    to_other_node.splice(14 + 16..14 + 20, B13.octets());
    fix_ip_csum(&mut to_other_node, 14);

    vec![
        Fixture {
            description: "SYN is decapsulated back to the exact original packet",
            input: frame(B12, 0, &[B13], &syn),
            verdict: TC_ACT_OK,
            output: Some(decapsulated(&syn)),
            counters: &[("tc_decap_syn", 1)],
        },
        Fixture {
            description: "GUE claiming this node's address without our XDP's mark is dropped",
            input: frame(NODE, 0, &[], &syn),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_self_unmarked", 1)],
        },
        Fixture {
            description: "GUE to this node with outer IP options is malformed",
            input: with_outer_options(&frame(B12, 0, &[B13], &syn)),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "inner TCP header beyond the inner total length is malformed",
            input: frame(B12, 0, &[B13], &short_inner),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description:
                "inner TCP data offset past the segment is malformed (never answered with a RST)",
            input: frame(B12, 0, &[B13], &{
                let mut t = tcp(40007, 80, ACK, b"");
                t[12] = 15 << 4;
                l3(CLIENT, VIP, IPPROTO_TCP, &t)
            }),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "inner UDP length past the inner payload is malformed",
            input: frame(B12, 0, &[B13], &{
                let mut u = udp(5353, 53, b"q");
                u[4..6].copy_from_slice(&10u16.to_be_bytes());
                l3(CLIENT, VIP, IPPROTO_UDP, &u)
            }),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "unknown non-SYN is forwarded to the next hop, outer rewritten",
            input: frame(B12, 0, &[B13], &data),
            verdict: TC_ACT_REDIRECT,
            output: Some(gue_frame(mac, MAC12, NODE, B13, 1, &[B13], &data)),
            counters: &[("tc_forward", 1)],
        },
        Fixture {
            description: "a next hop on loopback is never relayed to",
            input: frame(B12, 0, &[Ipv4Addr::new(127, 0, 0, 1)], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_bad_next_hop", 1)],
        },
        Fixture {
            description: "a broadcast next hop is never relayed to",
            input: frame(B12, 0, &[Ipv4Addr::BROADCAST], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_bad_next_hop", 1)],
        },
        Fixture {
            description: "a multicast next hop is never relayed to",
            input: frame(B12, 0, &[Ipv4Addr::new(239, 1, 2, 3)], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_bad_next_hop", 1)],
        },
        Fixture {
            description: "a VIP as next hop is never relayed to",
            input: frame(B12, 0, &[VIP], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_bad_next_hop", 1)],
        },
        Fixture {
            description: "unknown non-SYN with no hop left is dropped",
            input: frame(B12, 1, &[B13], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_unknown_flow", 1)],
        },
        Fixture {
            description: "unknown non-SYN with an empty hop list is dropped",
            input: frame(B12, 0, &[], &data),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_unknown_flow", 1)],
        },
        Fixture {
            description: "next hop equal to this node is accepted locally (loop guard)",
            input: frame(B12, 0, &[NODE], &data),
            verdict: TC_ACT_OK,
            output: Some(decapsulated(&data)),
            counters: &[("tc_decap_loop_guard", 1)],
        },
        Fixture {
            description: "GUE from an address outside the cluster is dropped",
            input: frame(Ipv4Addr::new(10, 0, 0, 99), 0, &[], &syn),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_not_cluster", 1)],
        },
        Fixture {
            description: "inner destination that is not a VIP is dropped",
            input: frame(B12, 0, &[], &not_vip),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_inner_not_vip", 1)],
        },
        Fixture {
            description: "GUE protocol 41 (IPv6) around an IPv4 packet is malformed",
            input: ipv6_inner,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: hlen != 1 + N",
            input: with_gue_byte(0, 0x01),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: version 1",
            input: with_gue_byte(0, 0x42),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: C bit set",
            input: with_gue_byte(0, 0x22),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: flags set",
            input: with_gue_byte(2, 0x80),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: private type != 0",
            input: with_gue_byte(5, 1),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: next hop index > N",
            input: with_gue_byte(6, 2),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: inner protocol 6",
            input: with_gue_byte(1, 6),
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: inner length disagrees with UDP length",
            input: wrong_inner_len,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "malformed GUE: truncated before the inner header",
            input: truncated,
            verdict: TC_ACT_SHOT,
            output: None,
            counters: &[("tc_drop_malformed", 1)],
        },
        Fixture {
            description: "UDP to another port passes untouched",
            input: udp_other_port,
            verdict: TC_ACT_OK,
            output: None,
            counters: &[("tc_pass_other", 1)],
        },
        Fixture {
            description: "GUE addressed to another node passes untouched",
            input: to_other_node,
            verdict: TC_ACT_OK,
            output: None,
            counters: &[("tc_pass_other", 1)],
        },
    ]
}

#[test]
fn tc_fixture_table() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    run_tc_fixtures(&l, net.ifindex, &tc_fixtures(net.mac));
}

#[test]
fn tc_unknown_flow_local_accepts_at_the_last_hop() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&backend_config("local"), NODE);
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let input = gue_frame(net.mac, MAC12, B12, NODE, 1, &[B13], &data);
    let mut want = eth(net.mac, MAC12, 0x0800);
    want.extend_from_slice(&data);
    run_tc_fixtures(
        &l,
        net.ifindex,
        &[Fixture {
            description: "no hop left, unknown_flow: local",
            input,
            verdict: TC_ACT_OK,
            output: Some(want),
            counters: &[("tc_decap_unknown_local", 1)],
        }],
    );
}

#[test]
fn tc_established_local_connection_is_decapsulated() {
    require_root!("BPF, network namespace");
    use std::net::{SocketAddrV4, TcpListener, TcpStream};
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    // A real connection: NODE:ephemeral -> VIP:80 in this namespace.
    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let client = connect_from(NODE, 0, VIP, 80);
    let (_server_side, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();

    let data = l3(NODE, VIP, IPPROTO_TCP, &tcp(cport, 80, ACK | PSH, b"more"));
    let input = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data);
    let mut want = eth(net.mac, MAC12, 0x0800);
    want.extend_from_slice(&data);
    run_tc_fixtures(
        &l,
        net.ifindex,
        &[Fixture {
            description: "packet of an established local connection",
            input,
            verdict: TC_ACT_OK,
            output: Some(want),
            counters: &[("tc_decap_established", 1)],
        }],
    );

    // A flow of the listener's port without a connection is not "known":
    // the listener alone must not capture it.
    let stray = l3(
        NODE,
        VIP,
        IPPROTO_TCP,
        &tcp(cport.wrapping_add(1), 80, ACK, b""),
    );
    let input = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &stray);
    let (v, _) = l.dp.run_tc(&input, net.ifindex).unwrap();
    assert_eq!(v, TC_ACT_REDIRECT, "listener only: second chance");
    drop::<TcpStream>(client);
}

#[test]
fn xdp_hop_cache_still_checks_the_mtu() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let st = std::process::Command::new("ip")
        .args(["link", "set", "nt0", "mtu", "300"])
        .status()
        .unwrap();
    assert!(st.success());
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let small = client_frame(
        net.mac,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b"")),
    );
    // The first packet asks the FIB and fills the cache; the second uses it.
    for _ in 0..2 {
        let ((v, _), deltas) = l.counted(|| l.dp.run_xdp(&small, net.ifindex).unwrap());
        assert_eq!((v, deltas), (XDP_TX, vec![("xdp_encap_tx", 1)]));
    }
    // A packet that fits the client's MTU but not this link with GUE: the
    // cached answer covered only smaller packets, so the FIB is asked again.
    let big = client_frame(
        net.mac,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, ACK, &[0u8; 250])),
    );
    let ((v, _), deltas) = l.counted(|| l.dp.run_xdp(&big, net.ifindex).unwrap());
    assert_eq!((v, deltas), (XDP_DROP, vec![("xdp_drop_too_big", 1)]));
    // And small packets still use the cache.
    let ((v, _), _) = l.counted(|| l.dp.run_xdp(&small, net.ifindex).unwrap());
    assert_eq!(v, XDP_TX);
}

/// A bucket's chain as the balancer lists it in GUE: every previous owner,
/// newest first, each once and never the first hop, up to the three a
/// bucket holds; for UDP the first hop again after them (four hops, 52
/// bytes of GUE). Chains the control plane would take several moves to
/// make are written straight into the pool; a partial install writes only
/// the buckets it names.
#[test]
fn xdp_lists_every_previous_owner_newest_first() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let b14 = Ipv4Addr::new(10, 0, 0, 14);
    let mut l = load(
        &config(
            &[(B12, 1, "active"), (B13, 1, "active"), (b14, 1, "active")],
            "drop",
        ),
        NODE,
    );
    let live = l.dp.live_tables().unwrap();
    let (web, dns) = (live[1].clone(), live[0].clone());
    assert_eq!((web.0.port, dns.0.port), (80, 53));
    // Slots: each service's own, else web's, and a free one for the
    // balancer node.
    let web_slots = web.1.slots.clone();
    let slot = move |t: &(nilb::config::ServiceKey, nilb::dataplane::LiveTable), d: Ipv4Addr| {
        t.1.slots
            .get(&d.into())
            .or(web_slots.get(&d.into()))
            .copied()
            .unwrap_or(100)
    };
    let chains = |previous: &[Ipv4Addr], n: usize| nilb::dataplane::Chains {
        chains: vec![
            (
                Some(B12.into()),
                previous.iter().map(|&p| p.into()).collect()
            );
            n
        ],
        moved_at: vec![Some(5_000); n],
    };
    let install = |l: &mut Loaded,
                   t: &(nilb::config::ServiceKey, nilb::dataplane::LiveTable),
                   previous: &[Ipv4Addr],
                   changed: Option<&[u32]>| {
        let s = |d| slot(t, v4(d));
        l.dp.install_chains(&t.0, t.1.service_index, &chains(previous, 256), &s, changed)
            .unwrap();
    };
    let tcp_in = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let tcp_frame = client_frame(net.mac, &tcp_in);
    let tcp_sport = sport_of(CLIENT, VIP, 40001, 80, IPPROTO_TCP);
    let udp_in = l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"q"));
    let udp_frame = client_frame(net.mac, &udp_in);
    let udp_sport = sport_of(CLIENT, VIP, 5353, 53, IPPROTO_UDP);

    // (what, previous owners, hops listed for TCP, for UDP)
    type Case<'a> = (&'a str, &'a [Ipv4Addr], &'a [Ipv4Addr], &'a [Ipv4Addr]);
    let cases: [Case<'_>; 5] = [
        (
            "three previous owners",
            &[B13, b14, NODE],
            &[B13, b14, NODE],
            &[B13, b14, NODE, B12],
        ),
        ("two", &[b14, B13], &[b14, B13], &[b14, B13, B12]),
        (
            "the first hop and repeats left out",
            &[B13, B12, B13],
            &[B13],
            &[B13, B12],
        ),
        ("only the first hop: nothing listed", &[B12], &[], &[]),
        ("none", &[], &[], &[]),
    ];
    for (what, previous, tcp_hops, udp_hops) in cases {
        install(&mut l, &web, previous, None);
        install(&mut l, &dns, previous, None);
        let (v, out) = l.dp.run_xdp(&tcp_frame, net.ifindex).unwrap();
        assert_eq!(v, XDP_TX, "{what}: TCP verdict");
        assert_bytes(
            &format!("{what}: TCP"),
            &out,
            &encapsulated(MAC12, net.mac, B12, tcp_hops, tcp_sport, &tcp_in),
        );
        let (v, out) = l.dp.run_xdp(&udp_frame, net.ifindex).unwrap();
        assert_eq!(v, XDP_TX, "{what}: UDP verdict");
        assert_bytes(
            &format!("{what}: UDP"),
            &out,
            &encapsulated(MAC12, net.mac, B12, udp_hops, udp_sport, &udp_in),
        );
    }
    // Four hops: GUE hlen 5, hop count 4, 52 bytes of outer headers.
    install(&mut l, &dns, &[B13, b14, NODE], None);
    let (_, out) = l.dp.run_xdp(&udp_frame, net.ifindex).unwrap();
    assert_eq!(out.len(), udp_frame.len() + 52);
    assert_eq!(&out[14 + 28..14 + 36], &[0x05, 4, 0, 0, 0, 0, 0, 4]);

    // A partial install writes the buckets it names and no other: the TCP
    // flow's bucket changes, every other bucket keeps [B13].
    install(&mut l, &web, &[B13], None);
    let i = hash_of((CLIENT, VIP, 40001, 80, IPPROTO_TCP)) & 255;
    install(&mut l, &web, &[b14, B13], Some(&[i]));
    let (_, out) = l.dp.run_xdp(&tcp_frame, net.ifindex).unwrap();
    assert_bytes(
        "partial install: the changed bucket",
        &out,
        &encapsulated(MAC12, net.mac, B12, &[b14, B13], tcp_sport, &tcp_in),
    );
    let read = l.dp.live_tables().unwrap();
    let web_now = &read.iter().find(|(k, _)| k.port == 80).unwrap().1;
    for (j, c) in web_now.chains.iter().enumerate() {
        let want: &[Ipv4Addr] = if j as u32 == i { &[b14, B13] } else { &[B13] };
        let want: Vec<std::net::IpAddr> = want.iter().map(|&w| w.into()).collect();
        assert_eq!(c, &(Some(B12.into()), want), "bucket {j} read back");
    }
    assert_eq!(
        web_now.moved_at[0],
        Some(5_000),
        "move times stored in seconds"
    );
}

// ---- XDP receive path: GUE decapsulated before GRO ----------------------------

fn run_xdp_backend_fixtures(l: &Loaded, ifindex: u32, fixtures: &[Fixture]) {
    for f in fixtures {
        let ((verdict, out), deltas) =
            l.counted(|| l.dp.run_xdp_backend(&f.input, ifindex).unwrap());
        assert_eq!(verdict, f.verdict, "{}: verdict", f.description);
        let want = f.output.as_ref().unwrap_or(&f.input);
        assert_bytes(f.description, &out, want);
        assert_eq!(deltas, f.counters.to_vec(), "{}: counters", f.description);
    }
}

#[test]
fn xdp_backend_decapsulates_syn_and_leaves_the_rest_to_tc() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    let mac = net.mac;
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let udp_inner = l3(CLIENT, VIP, IPPROTO_UDP, &udp(40002, 53, b"q"));
    let mut syn_out = eth(mac, MAC12, 0x0800);
    syn_out.extend_from_slice(&syn);
    let mut padded = gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &syn);
    padded.extend_from_slice(&[0; 6]);
    let mut padded_out = syn_out.clone();
    padded_out.extend_from_slice(&[0; 6]);
    let mut not_ip = eth(mac, MAC12, 0x86dd);
    not_ip.extend_from_slice(&[0; 40]);
    let mut udp_other_port = eth(mac, MAC12, 0x0800);
    udp_other_port.extend_from_slice(&l3(B12, NODE, IPPROTO_UDP, &udp(1234, 5000, b"hello")));
    let fixtures = vec![
        Fixture {
            description: "XDP: SYN is decapsulated to the exact original packet",
            input: gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &syn),
            verdict: XDP_PASS,
            output: Some(syn_out.clone()),
            counters: &[("xdp_decap_syn", 1)],
        },
        Fixture {
            description:
                "XDP: SYN with the hop list exhausted is decapsulated too (TC accepts every SYN)",
            input: gue_frame(mac, MAC12, B13, NODE, 2, &[B13, B12], &syn),
            verdict: XDP_PASS,
            output: Some(syn_out),
            counters: &[("xdp_decap_syn", 1)],
        },
        Fixture {
            description: "XDP: Ethernet padding stays behind the inner packet (the stack trims it)",
            input: padded,
            verdict: XDP_PASS,
            output: Some(padded_out),
            counters: &[("xdp_decap_syn", 1)],
        },
        Fixture {
            description: "XDP: segment of no local socket goes to TC untouched (second chance)",
            input: gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &data),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_gue_to_tc", 1)],
        },
        Fixture {
            description: "XDP: inner UDP goes to TC untouched",
            input: gue_frame(mac, MAC12, B12, NODE, 0, &[], &udp_inner),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_gue_to_tc", 1)],
        },
        Fixture {
            description: "XDP: SYN from outside the cluster goes to TC untouched (TC drops it)",
            input: gue_frame(mac, MAC12, Ipv4Addr::new(10, 0, 0, 99), NODE, 0, &[], &syn),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_gue_to_tc", 1)],
        },
        Fixture {
            description:
                "XDP: SYN claiming this node's address goes to TC untouched (TC drops it unmarked)",
            input: gue_frame(mac, MAC12, NODE, NODE, 0, &[], &syn),
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_gue_to_tc", 1)],
        },
        Fixture {
            description: "XDP: UDP to another port passes untouched",
            input: udp_other_port,
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_backend_pass", 1)],
        },
        Fixture {
            description: "XDP: not IPv4 passes untouched",
            input: not_ip,
            verdict: XDP_PASS,
            output: None,
            counters: &[("xdp_backend_pass", 1)],
        },
    ];
    run_xdp_backend_fixtures(&l, net.ifindex, &fixtures);
    // XDP's decapsulations count as the service's (like TC's): 3 SYNs.
    let index =
        l.cp.service(&l.cp.config().services[0].key())
            .unwrap()
            .index;
    assert_eq!(l.dp.service_stats(index).unwrap().tc_decap, 3);
}

/// Every input of the TC fixture table through XDP first, then TC: the end
/// result (verdict class, bytes out) is TC's alone. What XDP decapsulates
/// is exactly what TC would have decapsulated, to the same bytes, and TC
/// then passes the inner packet untouched; everything else reaches TC
/// unchanged, so every drop rule (malformed, outside the cluster, forged
/// self address, not a VIP, IPv6) gives TC's verdict and counter.
#[test]
fn xdp_then_tc_ends_like_tc_alone() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    let mut decapsulated = 0;
    for f in tc_fixtures(net.mac) {
        let ((xv, xout), xdeltas) =
            l.counted(|| l.dp.run_xdp_backend(&f.input, net.ifindex).unwrap());
        assert_eq!(xv, XDP_PASS, "{}: XDP verdict", f.description);
        if xout != f.input {
            decapsulated += 1;
            assert_eq!(
                f.verdict, TC_ACT_OK,
                "{}: XDP decapsulated what TC refuses",
                f.description
            );
            assert_bytes(f.description, &xout, f.output.as_ref().unwrap());
            let ((tv, tout), tdeltas) = l.counted(|| l.dp.run_tc(&xout, net.ifindex).unwrap());
            assert_eq!(tv, TC_ACT_OK, "{}: TC after XDP", f.description);
            assert_bytes(f.description, &tout, &xout);
            assert_eq!(tdeltas, vec![("tc_pass_other", 1)], "{}", f.description);
        } else {
            assert!(
                xdeltas == vec![("xdp_gue_to_tc", 1)] || xdeltas == vec![("xdp_backend_pass", 1)],
                "{}: XDP counters {xdeltas:?}",
                f.description
            );
            let ((tv, tout), tdeltas) = l.counted(|| l.dp.run_tc(&xout, net.ifindex).unwrap());
            assert_eq!(tv, f.verdict, "{}: TC verdict after XDP", f.description);
            assert_bytes(f.description, &tout, f.output.as_ref().unwrap_or(&f.input));
            assert_eq!(
                tdeltas,
                f.counters.to_vec(),
                "{}: TC counters",
                f.description
            );
        }
    }
    // The SYN; the loop guard's packet (no socket, hop = this node) is TC's.
    assert_eq!(decapsulated, 1);
}

#[test]
fn xdp_established_local_connection_is_decapsulated() {
    require_root!("BPF, network namespace");
    use std::net::{SocketAddrV4, TcpListener};
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let client = connect_from(NODE, 0, VIP, 80);
    let (_server_side, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();
    let data = l3(NODE, VIP, IPPROTO_TCP, &tcp(cport, 80, ACK | PSH, b"more"));
    let mut want = eth(net.mac, MAC12, 0x0800);
    want.extend_from_slice(&data);
    let stray = l3(
        NODE,
        VIP,
        IPPROTO_TCP,
        &tcp(cport.wrapping_add(1), 80, ACK, b""),
    );
    run_xdp_backend_fixtures(
        &l,
        net.ifindex,
        &[
            Fixture {
                description: "XDP: segment of an established local connection is decapsulated",
                input: gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data),
                verdict: XDP_PASS,
                output: Some(want.clone()),
                counters: &[("xdp_decap_established", 1)],
            },
            Fixture {
                description: "XDP: the listener alone does not own a flow: TC's (second chance)",
                input: gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &stray),
                verdict: XDP_PASS,
                output: None,
                counters: &[("xdp_gue_to_tc", 1)],
            },
        ],
    );
    // The balancer's program does the same with GUE for its own node.
    let input = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data);
    let ((v, out), deltas) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS);
    assert_bytes("balancer: GUE for this node, established", &out, &want);
    assert_eq!(deltas, vec![("xdp_decap_established", 1)]);
    drop(client);
}

#[test]
fn xdp_balancer_decapsulates_gue_for_its_own_node() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&backend_config("drop"), NODE);
    let syn = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let mut syn_out = eth(net.mac, MAC12, 0x0800);
    syn_out.extend_from_slice(&syn);
    run_xdp_fixtures(
        &l,
        net.ifindex,
        &[
            Fixture {
                description: "balancer: GUE SYN for this node is decapsulated",
                input: gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &syn),
                verdict: XDP_PASS,
                output: Some(syn_out),
                counters: &[("xdp_decap_syn", 1)],
            },
            Fixture {
                description: "balancer: GUE of no local socket goes to TC untouched",
                input: gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data),
                verdict: XDP_PASS,
                output: None,
                counters: &[("xdp_gue_to_tc", 1)],
            },
            Fixture {
                description:
                    "balancer: GUE with outer options goes to TC untouched (TC: malformed)",
                input: with_outer_options(&gue_frame(net.mac, MAC12, B12, NODE, 0, &[], &syn)),
                verdict: XDP_PASS,
                output: None,
                counters: &[("xdp_gue_to_tc", 1)],
            },
        ],
    );
}

#[test]
fn xdp_local_first_hop_syn_skips_the_encapsulation() {
    require_root!("BPF, network namespace");
    use std::net::{SocketAddrV4, TcpListener};
    let net = TestNet::new();
    let l = load(&config(&[(NODE, 1, "active")], "drop"), NODE);
    let syn = client_frame(
        net.mac,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b"")),
    );
    // A real connection owns its flow: its segments skip GUE too.
    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let client = connect_from(NODE, 0, VIP, 80);
    let (_server_side, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();
    let est = client_frame(
        net.mac,
        &l3(NODE, VIP, IPPROTO_TCP, &tcp(cport, 80, ACK, b"y")),
    );
    run_xdp_fixtures(
        &l,
        net.ifindex,
        &[
            Fixture {
                description: "local first hop, SYN: passed as it came, no GUE",
                input: syn.clone(),
                verdict: XDP_PASS,
                output: None,
                counters: &[("xdp_local_direct", 1)],
            },
            Fixture {
                description: "local first hop, established local connection: passed as it came",
                input: est,
                verdict: XDP_PASS,
                output: None,
                counters: &[("xdp_local_direct", 1)],
            },
        ],
    );
    // They count as sent to the first hop and accepted by the service.
    let key = l.cp.config().services[0].key();
    let svc = l.cp.service(&key).unwrap();
    let bs = l.dp.backend_stats(svc.backends[&NODE.into()].slot).unwrap();
    assert_eq!((bs.packets, bs.syns), (2, 1));
    assert_eq!(l.dp.service_stats(svc.index).unwrap().tc_decap, 2);
    // TC passes the unencapsulated packet untouched.
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&syn, net.ifindex).unwrap());
    assert_eq!(v, TC_ACT_OK);
    assert_bytes("TC after local direct", &out, &syn);
    assert_eq!(deltas, vec![("tc_pass_other", 1)]);
    drop(client);
}
