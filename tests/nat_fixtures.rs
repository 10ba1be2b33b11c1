//! NAT mode's packet fixtures (docs/design.md "NAT mode"; bpf/nat.h),
//! through BPF_PROG_TEST_RUN like tests/packet_fixtures.rs: every rewrite
//! in both directions, byte for byte against packets built from scratch
//! here with their checksums computed in full (so the programs' incremental
//! updates are checked, TCP, UDP and ICMP alike), with the verdict and the
//! counter deltas; then the flow table: collisions, a full table, and the
//! sweep. Needs root; skipped (one line on stderr) without it.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};

use common::*;
use nilb::hash::{IPPROTO_TCP, IPPROTO_UDP};

/// The NAT services' address: a VIP only the balancers hold.
const NAT_VIP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 200);

/// Backend NODE (10.0.0.11) with NAT services NAT_VIP:80/tcp -> 8080 and
/// NAT_VIP:53/udp -> 5353, a NAT service on the node's own address
/// (NODE:443 -> 8443) and on its own address and port (NODE:22, no
/// translation here), and the DSR service of `config` for comparison.
fn nat_config(unknown_flow: &str, max_flows: u32) -> String {
    let b = "    backends:\n      - {dip: 10.0.0.11}\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.13}\n";
    let mut y = config(&[(B12, 1, "active"), (NODE, 1, "active")], unknown_flow);
    y = y.replace(
        "  unknown_flow:",
        &format!("  nat: {{max_flows: {max_flows}}}\n  unknown_flow:"),
    );
    for (name, vip, port, proto, target) in [
        ("natweb", NAT_VIP, 80, "tcp", Some(8080)),
        ("natdns", NAT_VIP, 53, "udp", Some(5353)),
        ("natown", NODE, 443, "tcp", Some(8443)),
        ("natsame", NODE, 22, "tcp", None),
    ] {
        y += &format!(
            "  - name: {name}\n    vip: {vip}\n    port: {port}\n    protocol: {proto}\n    mode: nat\n    table_size: 256\n"
        );
        if let Some(t) = target {
            y += &format!("    target_port: {t}\n");
        }
        y += b;
    }
    y
}

/// One's complement sum of the pseudo-header and `l4` for a checksum.
fn l4_csum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4: &[u8]) -> u16 {
    let mut p = Vec::new();
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    p.extend_from_slice(&[0, proto]);
    p.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    p.extend_from_slice(l4);
    csum(&p)
}

/// A TCP/UDP packet with both checksums computed in full.
fn packet(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, mut l4: Vec<u8>) -> Vec<u8> {
    let at = if proto == IPPROTO_TCP { 16 } else { 6 };
    l4[at..at + 2].copy_from_slice(&[0, 0]);
    let mut c = l4_csum(src, dst, proto, &l4);
    if proto == IPPROTO_UDP && c == 0 {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    l3(src, dst, proto, &l4)
}

/// An ICMP error (`type`, `code`) from `src` to `dst` quoting `quoted` (an
/// IPv4 packet: its header and the first `keep` bytes after it).
fn icmp_error(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ty: u8,
    code: u8,
    quoted: &[u8],
    keep: usize,
) -> Vec<u8> {
    let mut icmp = vec![ty, code, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&quoted[..20 + keep]);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    l3(src, dst, 1, &icmp)
}

fn frame(mac: [u8; 6], l3: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, MAC12, 0x0800);
    f.extend_from_slice(l3);
    f
}

/// Run `input` through `run`, check verdict, bytes and counters.
fn check(
    l: &Loaded,
    what: &str,
    run: impl FnOnce() -> (u32, Vec<u8>),
    verdict: u32,
    want: &[u8],
    counters: &[(&str, u64)],
) {
    let ((v, out), deltas) = l.counted(run);
    assert_eq!(v, verdict, "{what}: verdict");
    assert_bytes(what, &out, want);
    let want_counters: Vec<(&str, u64)> = counters.to_vec();
    assert_eq!(deltas, want_counters, "{what}: counters");
}

#[test]
fn tc_translates_each_protocol_on_the_way_in() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&nat_config("local", 1024), NODE);
    let mac = net.mac;
    let gue = |inner: &[u8], hops: &[Ipv4Addr]| gue_frame(mac, MAC12, B12, NODE, 0, hops, inner);

    // TCP SYN: destination NAT_VIP:80 -> NODE:8080, checksums updated.
    let syn = |src_port| tcp(src_port, 80, SYN, b"");
    let syn_in = packet(CLIENT, NAT_VIP, IPPROTO_TCP, syn(40000));
    let mut syn_t = syn(40000);
    syn_t[2..4].copy_from_slice(&8080u16.to_be_bytes());
    let syn_out = packet(CLIENT, NODE, IPPROTO_TCP, syn_t);
    check(
        &l,
        "TCP SYN, destination translated",
        || l.dp.run_tc(&gue(&syn_in, &[B13]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &syn_out),
        &[("tc_decap_syn", 1), ("nat_new_flow", 1), ("nat_in", 1)],
    );
    // The retransmitted SYN finds its entry (no new flow).
    check(
        &l,
        "TCP SYN again",
        || l.dp.run_tc(&gue(&syn_in, &[B13]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &syn_out),
        &[("tc_decap_syn", 1), ("nat_in", 1)],
    );
    let flows = l.dp.nat_flows().unwrap();
    assert_eq!(flows.len(), 1);
    assert_eq!(flows[0].client, (CLIENT, 40000));
    assert_eq!(flows[0].local, (NODE, 8080));
    assert_eq!(flows[0].service, (NAT_VIP, 80));

    // UDP to a listener bound to the node's own address and port 5353, the
    // last hop: kept and translated.
    let _sock = UdpSocket::bind(SocketAddrV4::new(NODE, 5353)).unwrap();
    let q = udp(40002, 53, b"query");
    let q_in = packet(CLIENT, NAT_VIP, IPPROTO_UDP, q.clone());
    let mut q_t = q;
    q_t[2..4].copy_from_slice(&5353u16.to_be_bytes());
    let q_out = packet(CLIENT, NODE, IPPROTO_UDP, q_t);
    check(
        &l,
        "UDP to the listening port, destination translated",
        || l.dp.run_tc(&gue(&q_in, &[]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &q_out),
        &[("tc_decap_udp", 1), ("nat_new_flow", 1), ("nat_in", 1)],
    );
    // UDP without a checksum keeps none.
    let q0 = l3(CLIENT, NAT_VIP, IPPROTO_UDP, &udp(40003, 53, b"q0"));
    let q0_out = l3(CLIENT, NODE, IPPROTO_UDP, &udp(40003, 5353, b"q0"));
    check(
        &l,
        "UDP without a checksum",
        || l.dp.run_tc(&gue(&q0, &[]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &q0_out),
        &[("tc_decap_udp", 1), ("nat_new_flow", 1), ("nat_in", 1)],
    );

    // ICMP "fragmentation needed" about a reply of the flow (NAT_VIP:80 ->
    // client): outer destination and quoted source and port translated,
    // every checksum (outer, quoted IPv4, quoted TCP, ICMP) right. The
    // flow has no socket: unknown_flow local keeps it at the last hop.
    let router = Ipv4Addr::new(198, 51, 100, 1);
    let reply = packet(NAT_VIP, CLIENT, IPPROTO_TCP, tcp(80, 40000, ACK, b"abc"));
    let mut reply_t = tcp(8080, 40000, ACK, b"abc");
    reply_t[16..18].copy_from_slice(&[0, 0]);
    let reply_here = packet(NODE, CLIENT, IPPROTO_TCP, reply_t);
    for keep in [8, 20, 23] {
        let icmp_in = icmp_error(router, NAT_VIP, 3, 4, &reply, keep);
        let icmp_out = icmp_error(router, NODE, 3, 4, &reply_here, keep);
        check(
            &l,
            &format!("ICMP frag needed quoting {keep} bytes of TCP"),
            || l.dp.run_tc(&gue(&icmp_in, &[]), net.ifindex).unwrap(),
            TC_ACT_OK,
            &frame(mac, &icmp_out),
            &[("tc_decap_unknown_local", 1), ("nat_in", 1)],
        );
    }

    // A service on this node's own address and its own port: nothing to do.
    let ssh = packet(CLIENT, NODE, IPPROTO_TCP, tcp(40010, 22, SYN, b""));
    check(
        &l,
        "service on the node's own address and port: not translated",
        || l.dp.run_tc(&gue(&ssh, &[]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &ssh),
        &[("tc_decap_syn", 1)],
    );
    // On its own address with another listening port: the port only.
    let own = packet(CLIENT, NODE, IPPROTO_TCP, tcp(40011, 443, SYN, b""));
    let own_out = packet(CLIENT, NODE, IPPROTO_TCP, tcp(40011, 8443, SYN, b""));
    check(
        &l,
        "service on the node's own address: port translated",
        || l.dp.run_tc(&gue(&own, &[]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &own_out),
        &[("tc_decap_syn", 1), ("nat_new_flow", 1), ("nat_in", 1)],
    );
    // A DSR service's packet is left as it is.
    let dsr = packet(CLIENT, VIP, IPPROTO_TCP, tcp(40012, 80, SYN, b""));
    check(
        &l,
        "DSR service: not translated",
        || l.dp.run_tc(&gue(&dsr, &[]), net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &dsr),
        &[("tc_decap_syn", 1)],
    );
}

#[test]
fn xdp_translates_like_tc_before_gro() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&nat_config("drop", 1024), NODE);
    let mac = net.mac;
    let syn_in = packet(CLIENT, NAT_VIP, IPPROTO_TCP, tcp(41000, 80, SYN, b""));
    let syn_out = packet(CLIENT, NODE, IPPROTO_TCP, tcp(41000, 8080, SYN, b""));
    let input = gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &syn_in);
    check(
        &l,
        "XDP: SYN decapsulated and translated",
        || l.dp.run_xdp_backend(&input, net.ifindex).unwrap(),
        XDP_PASS,
        &frame(mac, &syn_out),
        &[("xdp_decap_syn", 1), ("nat_new_flow", 1), ("nat_in", 1)],
    );
    // TC on the same input gives the same bytes (the flow is known now).
    check(
        &l,
        "TC: the same SYN, the same bytes",
        || l.dp.run_tc(&input, net.ifindex).unwrap(),
        TC_ACT_OK,
        &frame(mac, &syn_out),
        &[("tc_decap_syn", 1), ("nat_in", 1)],
    );

    // An established connection: socket looked up by the translated tuple.
    let listener = TcpListener::bind(SocketAddrV4::new(NODE, 8080)).unwrap();
    let client = connect_from(VIP, 0, NODE, 8080);
    let (_server, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();
    // (the connection is direct: tracked as if translated, to look up)
    let seg =
        |dst: Ipv4Addr, dport: u16| packet(VIP, dst, IPPROTO_TCP, tcp(cport, dport, ACK, b"d"));
    // Its SYN would be a collision: a direct socket has the tuple.
    let syn_collide = packet(VIP, NAT_VIP, IPPROTO_TCP, tcp(cport, 80, SYN, b""));
    let input = gue_frame(mac, MAC12, B12, NODE, 0, &[], &syn_collide);
    check(
        &l,
        "XDP: SYN whose translated tuple is a direct connection's",
        || l.dp.run_xdp_backend(&input, net.ifindex).unwrap(),
        XDP_DROP,
        &input,
        &[("nat_drop_collision", 1)],
    );
    check(
        &l,
        "TC: the same collision",
        || l.dp.run_tc(&input, net.ifindex).unwrap(),
        TC_ACT_SHOT,
        &input,
        &[("nat_drop_collision", 1)],
    );
    // A segment (not a SYN) of a socket with no entry: the entry was lost
    // (e.g. a table replaced): re-created, and translated.
    let input = gue_frame(mac, MAC12, B12, NODE, 0, &[B13], &seg(NAT_VIP, 80));
    check(
        &l,
        "XDP: segment of a local socket by its translated tuple",
        || l.dp.run_xdp_backend(&input, net.ifindex).unwrap(),
        XDP_PASS,
        &frame(mac, &seg(NODE, 8080)),
        &[
            ("xdp_decap_established", 1),
            ("nat_new_flow", 1),
            ("nat_in", 1),
        ],
    );
    // Now the direct connection's own packets collide with that entry.
    let direct = client_frame(mac, &seg(NODE, 8080));
    check(
        &l,
        "XDP: direct packet whose 4-tuple is a translated flow's",
        || l.dp.run_xdp_backend(&direct, net.ifindex).unwrap(),
        XDP_DROP,
        &direct,
        &[("nat_drop_collision", 1)],
    );
    let other = client_frame(mac, &packet(VIP, NODE, IPPROTO_TCP, tcp(1, 8080, ACK, b"")));
    check(
        &l,
        "XDP: direct packet of another tuple passes",
        || l.dp.run_xdp_backend(&other, net.ifindex).unwrap(),
        XDP_PASS,
        &other,
        &[("xdp_backend_pass", 1)],
    );
    drop(client);
}

#[test]
fn egress_gives_replies_the_service_address_back() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&nat_config("local", 1024), NODE);
    let mac = net.mac;
    // Flows first: a TCP SYN and a UDP query accepted here.
    let syn = packet(CLIENT, NAT_VIP, IPPROTO_TCP, tcp(42000, 80, SYN, b""));
    let q = packet(CLIENT, NAT_VIP, IPPROTO_UDP, udp(42001, 53, b"q"));
    for p in [&syn, &q] {
        let (v, _) =
            l.dp.run_tc(&gue_frame(mac, MAC12, B12, NODE, 0, &[], p), net.ifindex)
                .unwrap();
        assert_eq!(v, TC_ACT_OK);
    }
    let out_frame = |l3: &[u8]| {
        let mut f = eth(MAC12, mac, 0x0800);
        f.extend_from_slice(l3);
        f
    };

    let synack = tcp(8080, 42000, SYN | ACK, b"");
    let mut synack_svc = synack.clone();
    synack_svc[0..2].copy_from_slice(&80u16.to_be_bytes());
    check(
        &l,
        "egress: SYN-ACK gets the service address and port",
        || {
            l.dp.run_tc_egress(
                &out_frame(&packet(NODE, CLIENT, IPPROTO_TCP, synack.clone())),
                net.ifindex,
            )
            .unwrap()
        },
        TC_ACT_OK,
        &out_frame(&packet(NAT_VIP, CLIENT, IPPROTO_TCP, synack_svc)),
        &[("nat_out", 1)],
    );
    let answer = udp(5353, 42001, b"answer");
    let mut answer_svc = answer.clone();
    answer_svc[0..2].copy_from_slice(&53u16.to_be_bytes());
    check(
        &l,
        "egress: UDP answer gets the service address and port",
        || {
            l.dp.run_tc_egress(
                &out_frame(&packet(NODE, CLIENT, IPPROTO_UDP, answer.clone())),
                net.ifindex,
            )
            .unwrap()
        },
        TC_ACT_OK,
        &out_frame(&packet(NAT_VIP, CLIENT, IPPROTO_UDP, answer_svc)),
        &[("nat_out", 1)],
    );
    // ICMP port unreachable this node sends about the client's query.
    let q_here = packet(CLIENT, NODE, IPPROTO_UDP, udp(42001, 5353, b"q"));
    let q_svc = packet(CLIENT, NAT_VIP, IPPROTO_UDP, udp(42001, 53, b"q"));
    check(
        &l,
        "egress: ICMP error about the flow: source and quote translated",
        || {
            l.dp.run_tc_egress(
                &out_frame(&icmp_error(NODE, CLIENT, 3, 3, &q_here, 9)),
                net.ifindex,
            )
            .unwrap()
        },
        TC_ACT_OK,
        &out_frame(&icmp_error(NAT_VIP, CLIENT, 3, 3, &q_svc, 9)),
        &[("nat_out", 1)],
    );
    // Not NAT flows: untouched, nothing counted.
    for (what, p) in [
        (
            "egress: a direct flow of the same port (a health check)",
            packet(NODE, B12, IPPROTO_TCP, tcp(8080, 50000, ACK, b"")),
        ),
        (
            "egress: another port of this node",
            packet(NODE, CLIENT, IPPROTO_TCP, tcp(22, 42000, ACK, b"")),
        ),
        (
            "egress: another source address",
            packet(VIP, CLIENT, IPPROTO_TCP, tcp(8080, 42000, ACK, b"")),
        ),
    ] {
        let f = out_frame(&p);
        check(
            &l,
            what,
            || l.dp.run_tc_egress(&f, net.ifindex).unwrap(),
            TC_ACT_OK,
            &f,
            &[],
        );
    }
}

#[test]
fn full_table_drops_new_flows_only_and_the_sweep_empties_it() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load_sized(&nat_config("local", 1024), NODE);
    let mac = net.mac;
    let syn = |i: u16| {
        let c = Ipv4Addr::new(198, 18, (i >> 8) as u8, i as u8);
        gue_frame(
            mac,
            MAC12,
            B12,
            NODE,
            0,
            &[],
            &packet(c, NAT_VIP, IPPROTO_TCP, tcp(40000, 80, SYN, b"")),
        )
    };
    for i in 0..1024u16 {
        let (v, _) = l.dp.run_tc(&syn(i), net.ifindex).unwrap();
        assert_eq!(v, TC_ACT_OK, "flow {i}");
    }
    let f = syn(1024);
    check(
        &l,
        "new flow with nat_flows full",
        || l.dp.run_tc(&f, net.ifindex).unwrap(),
        TC_ACT_SHOT,
        &f,
        &[("nat_drop_table_full", 1)],
    );
    // A tracked flow still goes through.
    let (v, _) = l.dp.run_tc(&syn(7), net.ifindex).unwrap();
    assert_eq!(v, TC_ACT_OK, "tracked flow with the table full");

    // A UDP flow, then the sweep: no socket has any of these TCP flows,
    // and the UDP one is idle past a 1 s timeout once 2 s passed.
    let _sock = UdpSocket::bind(SocketAddrV4::new(NODE, 5353)).unwrap();
    let listener = TcpListener::bind(SocketAddrV4::new(NODE, 8080)).unwrap();
    let client = connect_from(VIP, 0, NODE, 8080);
    let (_server, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();
    // The live connection's entry (created as a lost entry would be).
    let seg = packet(VIP, NAT_VIP, IPPROTO_TCP, tcp(cport, 80, ACK, b""));
    // (room for it: sweep the SYNs first)
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let removed = l.dp.sweep_nat_flows(1, 1).unwrap();
    assert_eq!(removed, 1024, "every SYN-only flow (no socket) is removed");
    let (v, _) =
        l.dp.run_tc(&gue_frame(mac, MAC12, B12, NODE, 0, &[], &seg), net.ifindex)
            .unwrap();
    assert_eq!(v, TC_ACT_OK);
    let q = packet(CLIENT, NAT_VIP, IPPROTO_UDP, udp(43000, 53, b"q"));
    let (v, _) =
        l.dp.run_tc(&gue_frame(mac, MAC12, B12, NODE, 0, &[], &q), net.ifindex)
            .unwrap();
    assert_eq!(v, TC_ACT_OK);
    assert_eq!(l.dp.nat_flows().unwrap().len(), 2);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert_eq!(l.dp.sweep_nat_flows(2, 1).unwrap(), 1, "the idle UDP flow");
    let left = l.dp.nat_flows().unwrap();
    assert_eq!(
        left.len(),
        1,
        "the connection with a socket stays: {left:?}"
    );
    assert_eq!(left[0].client, (VIP, cport));
    assert_eq!(left[0].gc_pass, 2, "stamped by the socket iterator");
    drop(client);
}
