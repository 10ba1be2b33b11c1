//! Packets too big for the encapsulation (docs/design.md "Balancer (XDP)"):
//! a client packet that does not fit the wire once GUE's 36 + 4N bytes are
//! added (packet + 36 + 4N > MTU) is answered, if it has DF set, with ICMP
//! "fragmentation needed" from the VIP carrying MTU − (36 + 4N), rate-limited
//! per CPU; without DF it is dropped. Every way a packet can leave the
//! balancer is covered: FIB answer, hop cache, slow path (forwarding off, no
//! neighbour), and this node as first hop with a hop listed (our TC may
//! forward it). Expected bytes come from `common::icmp_frag_needed_reply`.
//! Needs root; skipped (one line on stderr) without it.

mod common;

use std::net::Ipv4Addr;

use common::*;
use nilb::hash::IPPROTO_TCP;

/// IPv4 flags word with DF set.
const DF: u16 = 0x4000;

/// A client's TCP packet to VIP:80 of exactly `tot` bytes (IPv4 total
/// length) with IPv4 flags `frag` and `options`.
fn tcp_packet(src: Ipv4Addr, sport: u16, tot: usize, frag: u16, options: &[u8]) -> Vec<u8> {
    let payload = vec![0xab; tot - 20 - options.len() - 20];
    let t = tcp(sport, 80, ACK | PSH, &payload);
    let mut p = ipv4(src, VIP, IPPROTO_TCP, t.len(), frag, options);
    p.extend_from_slice(&t);
    assert_eq!(p.len(), tot);
    p
}

/// The same with DF, from the client.
fn df_packet(sport: u16, tot: usize) -> Vec<u8> {
    tcp_packet(CLIENT, sport, tot, DF, &[])
}

/// `config()` with `cluster.icmp_too_big_rate` set.
fn with_rate(yaml: &str, rate: u32) -> String {
    let out = yaml.replacen(
        "  unknown_flow: ",
        &format!("  icmp_too_big_rate: {rate}\n  unknown_flow: "),
        1,
    );
    assert_ne!(out, yaml);
    out
}

fn set_mtu(dev: &str, mtu: u32) {
    ip(&format!("link set {dev} mtu {mtu}"));
}

fn backend_packets(l: &Loaded, dip: Ipv4Addr) -> (u64, u64, u64) {
    let key = l.cp.config().services[0].key();
    let slot = l.cp.service(&key).unwrap().backends[&dip.into()].slot;
    let bs = l.dp.backend_stats(slot).unwrap();
    (bs.packets, bs.bytes, bs.syns)
}

/// Two client ports of CLIENT -> VIP:80 flows whose bucket has `first` as
/// first hop and `second` as second hop.
fn flows_with_hops(l: &Loaded, first: Ipv4Addr, second: Ipv4Addr) -> Vec<u16> {
    let buckets =
        l.dp.live_tables()
            .unwrap()
            .into_iter()
            .find(|(k, _)| k.port == 80)
            .unwrap()
            .1
            .chains;
    let sports: Vec<u16> = (41100..43100u16)
        .filter(|&p| {
            let b = &buckets[hash_of((CLIENT, VIP, p, 80, IPPROTO_TCP)) as usize % buckets.len()];
            (b.0, b.1.first().copied()) == (Some(first.into()), Some(second.into()))
        })
        .take(2)
        .collect();
    assert_eq!(sports.len(), 2, "flows with hops {first}, {second}");
    sports
}

/// Run one frame; return verdict, output and counter deltas.
fn run(l: &Loaded, frame: &[u8], ifindex: u32) -> (u32, Vec<u8>, Vec<(&'static str, u64)>) {
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(frame, ifindex).unwrap());
    (v, out, d)
}

#[test]
fn xdp_too_big_fib_path_answers_icmp_from_the_vip() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let mac = net.mac;

    // 1464 + 36 = 1500: fits exactly.
    let fits = df_packet(41000, 1464);
    let (v, out, d) = run(&l, &client_frame(mac, &fits), net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_encap_tx", 1)]));
    let sport = sport_of(CLIENT, VIP, 41000, 80, IPPROTO_TCP);
    assert_bytes(
        "1464 bytes",
        &out,
        &encapsulated(MAC12, mac, B12, &[], sport, &fits),
    );

    // 1465 + 36 > 1500: ICMP frag-needed, MTU 1500 - 36, from the VIP.
    let big = client_frame(mac, &df_packet(41001, 1465));
    for round in 0..2 {
        let (v, out, d) = run(&l, &big, net.ifindex);
        assert_eq!(v, XDP_TX, "round {round}");
        assert_bytes(
            "ICMP frag-needed",
            &out,
            &icmp_frag_needed_reply(&big, 1464),
        );
        assert_eq!(d, vec![("xdp_icmp_too_big", 1)], "round {round}");
    }
    // Spelled out once against the RFCs: type 3 code 4, MTU, quote.
    let (_, out, _) = run(&l, &big, net.ifindex);
    assert_eq!(&out[0..6], &CLIENT_MAC, "back to the sender's MAC");
    assert_eq!(&out[6..12], &mac, "from the MAC it was sent to");
    let ip = &out[14..];
    assert_eq!(csum(&ip[..20]), 0, "IPv4 checksum");
    assert_eq!(&ip[12..16], &VIP.octets(), "source = the VIP");
    assert_eq!(&ip[16..20], &CLIENT.octets(), "destination = the client");
    assert_eq!(ip[9], 1, "ICMP");
    let icmp = &ip[20..];
    assert_eq!(csum(icmp), 0, "ICMP checksum");
    assert_eq!(&icmp[..2], &[3, 4]);
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1464);
    assert_eq!(&icmp[8..], &big[14..14 + 28], "IPv4 header + 8 bytes");

    // IP options are quoted with the header.
    let opts = client_frame(mac, &tcp_packet(CLIENT, 41002, 1480, DF, &[1, 1, 1, 0]));
    let (v, out, d) = run(&l, &opts, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes(
        "reply quoting options",
        &out,
        &icmp_frag_needed_reply(&opts, 1464),
    );

    // Without DF: dropped and counted, no reply.
    let no_df = client_frame(mac, &tcp_packet(CLIENT, 41003, 1465, 0, &[]));
    let (v, _, d) = run(&l, &no_df, net.ifindex);
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_too_big", 1)]));

    // Only the packet that was sent counts for the backend.
    assert_eq!(backend_packets(&l, B12), (1, 1464, 0));
}

#[test]
fn xdp_too_big_with_a_second_hop_counts_its_four_bytes() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let mut l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    // Draining .12 moves its buckets to .13, .12 listed: 40 bytes.
    l.reload(
        &config(&[(B12, 1, "drained"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let sports = flows_with_hops(&l, B13, B12);
    let fits = df_packet(sports[0], 1460);
    let (v, out, d) = run(&l, &client_frame(net.mac, &fits), net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_encap_tx", 1)]));
    let sport = sport_of(CLIENT, VIP, sports[0], 80, IPPROTO_TCP);
    assert_bytes(
        "1460 bytes, one hop listed",
        &out,
        &encapsulated(MAC13, net.mac, B13, &[B12], sport, &fits),
    );
    let big = client_frame(net.mac, &df_packet(sports[1], 1461));
    let (v, out, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes("MTU 1500 - 40", &out, &icmp_frag_needed_reply(&big, 1460));
}

/// After the FIB has said "too big" for a hop, the hop cache answers alone
/// until it expires: a raised MTU is seen only after NILB_HOP_CACHE_JIFFIES
/// (25 jiffies: at most 250 ms, at HZ 100).
#[test]
fn xdp_too_big_hop_cache_answers_without_the_fib() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let small = client_frame(net.mac, &df_packet(41020, 100));
    let big = client_frame(net.mac, &df_packet(41021, 1480));
    let (v, _, _) = run(&l, &small, net.ifindex);
    assert_eq!(v, XDP_TX, "fills the hop cache");
    let (v, out, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes("from the FIB", &out, &icmp_frag_needed_reply(&big, 1464));
    set_mtu("nt0", 9000);
    let (v, out, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes(
        "from the hop cache (the FIB would accept it now)",
        &out,
        &icmp_frag_needed_reply(&big, 1464),
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (v, _, d) = run(&l, &big, net.ifindex);
    assert_eq!(
        (v, d),
        (XDP_TX, vec![("xdp_encap_tx", 1)]),
        "the expired entry asks the FIB again"
    );
}

/// Forwarding off: the FIB helper refuses to answer (no MTU check), the
/// packet would go to our TC and be dropped by the kernel. The wire's MTU
/// is checked before.
#[test]
fn xdp_too_big_slow_path_forwarding_off() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    std::fs::write("/proc/sys/net/ipv4/conf/nt0/forwarding", "0").unwrap();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let fits = df_packet(41030, 1464);
    let (v, out, d) = run(&l, &client_frame(net.mac, &fits), net.ifindex);
    assert_eq!((v, d), (XDP_PASS, vec![("xdp_encap_slow_path", 1)]));
    let sport = sport_of(CLIENT, VIP, 41030, 80, IPPROTO_TCP);
    assert_bytes(
        "slow path, fits",
        &out,
        &marked(&encapsulated(net.mac, CLIENT_MAC, B12, &[], sport, &fits)),
    );
    let big = client_frame(net.mac, &df_packet(41031, 1465));
    let (v, out, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes(
        "slow path, too big",
        &out,
        &icmp_frag_needed_reply(&big, 1464),
    );
    let no_df = client_frame(net.mac, &tcp_packet(CLIENT, 41032, 1465, 0, &[]));
    let (v, _, d) = run(&l, &no_df, net.ifindex);
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_too_big", 1)]));
    assert_eq!(backend_packets(&l, B12), (1, 1464, 0));
}

/// No neighbour entry: the FIB checks the MTU before it looks for the
/// neighbour, so a packet that would take the slow path is answered too.
#[test]
fn xdp_too_big_slow_path_no_neighbour() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let b14 = Ipv4Addr::new(10, 0, 0, 14);
    let l = load(&config(&[(b14, 1, "active")], "drop"), NODE);
    let big = client_frame(net.mac, &df_packet(41040, 1465));
    let (v, out, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes(
        "no neighbour, too big",
        &out,
        &icmp_frag_needed_reply(&big, 1464),
    );
}

/// This node is the first hop and a second hop is listed: our TC may
/// forward the packet out of the receiving interface, so its MTU applies.
/// Without a listed hop the packet never leaves the node.
#[test]
fn xdp_too_big_local_first_hop_with_a_second_hop() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let mut l = load(
        &config(&[(B12, 1, "active"), (NODE, 1, "active")], "drop"),
        NODE,
    );
    // Draining .12 moves its buckets to this node, .12 listed second.
    l.reload(
        &config(&[(B12, 1, "drained"), (NODE, 1, "active")], "drop"),
        NODE,
    );
    let sports = flows_with_hops(&l, NODE, B12);
    let fits = df_packet(sports[0], 1460);
    let (v, out, d) = run(&l, &client_frame(net.mac, &fits), net.ifindex);
    assert_eq!((v, d), (XDP_PASS, vec![("xdp_encap_local", 1)]));
    let sport = sport_of(CLIENT, VIP, sports[0], 80, IPPROTO_TCP);
    assert_bytes(
        "local, 1460 + 40",
        &out,
        &marked(&encapsulated(
            net.mac,
            CLIENT_MAC,
            NODE,
            &[B12],
            sport,
            &fits,
        )),
    );
    let big = client_frame(net.mac, &df_packet(sports[1], 1461));
    let (v, out, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    assert_bytes("local, too big", &out, &icmp_frag_needed_reply(&big, 1460));

    // No hop listed: kept on this node whatever its size.
    let l = load(&config(&[(NODE, 1, "active")], "drop"), NODE);
    let full = df_packet(41052, 1500);
    let (v, out, d) = run(&l, &client_frame(net.mac, &full), net.ifindex);
    assert_eq!((v, d), (XDP_PASS, vec![("xdp_encap_local", 1)]));
    let sport = sport_of(CLIENT, VIP, 41052, 80, IPPROTO_TCP);
    assert_bytes(
        "local, no hop",
        &out,
        &marked(&encapsulated(net.mac, CLIENT_MAC, NODE, &[], sport, &full)),
    );
}

/// A token bucket per CPU: `icmp_too_big_rate` replies per second, as many
/// in a burst; the rest are dropped and counted. Rate 0: no replies.
#[test]
fn xdp_too_big_replies_are_rate_limited() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let l = load(&with_rate(&config(&[(B12, 1, "active")], "drop"), 3), NODE);
    let big = client_frame(net.mac, &df_packet(41060, 1480));
    for i in 0..3 {
        let (v, out, d) = run(&l, &big, net.ifindex);
        assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]), "reply {i}");
        assert_bytes("reply", &out, &icmp_frag_needed_reply(&big, 1464));
    }
    let (v, _, d) = run(&l, &big, net.ifindex);
    assert_eq!(
        (v, d),
        (XDP_DROP, vec![("xdp_drop_too_big_limited", 1)]),
        "the 4th within a second"
    );
    // One token comes back after 1/3 s.
    std::thread::sleep(std::time::Duration::from_millis(400));
    let (v, _, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_TX, vec![("xdp_icmp_too_big", 1)]));
    let (v, _, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_too_big_limited", 1)]));

    let l = load(&with_rate(&config(&[(B12, 1, "active")], "drop"), 0), NODE);
    let (v, _, d) = run(&l, &big, net.ifindex);
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_too_big_limited", 1)]));
}

/// No ICMP error about an ICMP error (RFC 1122 3.2.2), nor to a source that
/// is not a unicast host (RFC 1812 4.3.2.7): dropped as too big.
#[test]
fn xdp_too_big_without_a_reply() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    for src in [
        Ipv4Addr::new(0, 0, 0, 0),
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(224, 0, 0, 5),
        Ipv4Addr::new(255, 255, 255, 255),
    ] {
        let f = client_frame(net.mac, &tcp_packet(src, 41070, 1480, DF, &[]));
        let (v, _, d) = run(&l, &f, net.ifindex);
        assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_too_big", 1)]), "{src}");
    }
    // A frag-needed quoting a flow of the service, padded to 1480 bytes.
    let emb_tcp = tcp(80, 41071, ACK, b"");
    let mut emb = ipv4(VIP, CLIENT, IPPROTO_TCP, emb_tcp.len(), 0, &[]);
    emb.extend_from_slice(&emb_tcp[..8]);
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&emb);
    icmp.resize(1480 - 20, 0);
    let c = csum(&icmp);
    put16(&mut icmp, 2, c);
    let mut p = ipv4(Ipv4Addr::new(198, 51, 100, 1), VIP, 1, icmp.len(), DF, &[]);
    p.extend_from_slice(&icmp);
    let f = client_frame(net.mac, &p);
    let (v, _, d) = run(&l, &f, net.ifindex);
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_too_big", 1)]));
}
