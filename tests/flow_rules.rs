//! Fixtures for the rules that decide whose flow a packet is, through
//! BPF_PROG_TEST_RUN of the real programs (docs/design.md "Packet path",
//! "Second chance (TC)"): ICMP to a VIP (errors follow the quoted flow, echo
//! requests are answered by the first hop, the rest is dropped), UDP second
//! chance (the balancer lists the first hop again after the second), which
//! TCP socket states own a packet while a hop is left, `unknown_flow: rst`,
//! checksums after a forward, and headers the TC program must make linear.
//! Expected bytes are written out here, independently of the C code. Needs
//! root; skipped (one line on stderr) without it.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, UdpSocket};

use common::*;
use nilb::hash::{IPPROTO_TCP, IPPROTO_UDP};

const IPPROTO_ICMP: u8 = 1;
const ROUTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// A second VIP (only in [`two_vips`]).
const VIP2: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 101);

/// What a router quotes of a packet the VIP sent: its IPv4 header (with
/// `options`) and the first 8 bytes of its L4 header.
fn quote(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    sport: u16,
    dport: u16,
    options: &[u8],
) -> Vec<u8> {
    let l4 = if proto == IPPROTO_TCP {
        tcp(sport, dport, ACK, b"")
    } else {
        udp(sport, dport, &[0; 12])
    };
    let mut q = ipv4(src, dst, proto, l4.len(), 0x4000, options);
    q.extend_from_slice(&l4[..8]);
    q
}

/// An ICMP message (type, code, 4 bytes of rest, body) with its checksum.
fn icmp(typ: u8, code: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![typ, code, 0, 0, 0, 0, 0x05, 0x78];
    m.extend_from_slice(body);
    let c = csum(&m);
    put16(&mut m, 2, c);
    m
}

/// An ICMP error from a router to `to` quoting VIP-side packet `q`.
fn icmp_error(typ: u8, code: u8, to: Ipv4Addr, q: &[u8]) -> Vec<u8> {
    l3(ROUTER, to, IPPROTO_ICMP, &icmp(typ, code, q))
}

/// Ethernet (this node's MAC <- MAC12) + `inner`: what decapsulation of a
/// `gue_frame(mac, MAC12, ..)` leaves.
fn decapsulated(mac: [u8; 6], inner: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, MAC12, 0x0800);
    f.extend_from_slice(inner);
    f
}

/// Service index of the service with this port.
fn index_of(l: &Loaded, port: u16) -> u32 {
    let key =
        l.cp.config()
            .services
            .iter()
            .find(|s| s.port == port)
            .expect("service")
            .key();
    l.cp.service(&key).unwrap().index
}

/// The config of `common::config` with a second VIP whose TCP:80 service
/// has backends .12 and .13.
fn two_vips() -> String {
    config(&[(B12, 1, "active"), (B13, 1, "active")], "drop")
        + "  - name: web2\n    vip: 10.0.0.101\n    port: 80\n    protocol: tcp\n    table_size: 256\n    backends:\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.13}\n"
}

/// A config where every bucket of web (TCP 80) and dns (UDP 53) has first
/// hop .13 and second hop .12 (after the reload that drains .12).
fn moved_config(l: &mut Loaded) {
    let yaml = |state: &str| {
        format!(
            "version: 1\ncluster:\n  hash_seed: {HASH_SEED:#x}\n  balancers: [10.0.0.11]\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: 256\n    backends:\n      - {{dip: 10.0.0.12, state: {state}}}\n      - {{dip: 10.0.0.13}}\n  - name: dns\n    vip: 10.0.0.100\n    port: 53\n    protocol: udp\n    table_size: 256\n    backends:\n      - {{dip: 10.0.0.12, state: {state}}}\n      - {{dip: 10.0.0.13}}\n"
        )
    };
    l.reload(&yaml("active"), NODE);
    l.reload(&yaml("drained"), NODE);
}

// ---- ICMP at the balancer ------------------------------------------------------------

/// Every ICMP error that quotes a flow (destination unreachable of any
/// code, time exceeded, parameter problem) is balanced exactly like the
/// flow's own packets: same first hop, same outer source port, and for UDP
/// the same hop list.
#[test]
fn xdp_icmp_errors_follow_the_quoted_flow() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let mut l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    moved_config(&mut l);
    for (proto, port) in [(IPPROTO_TCP, 80u16), (IPPROTO_UDP, 53)] {
        // The flow's own packet, client:41000 -> VIP:port.
        let l4 = if proto == IPPROTO_TCP {
            tcp(41000, port, ACK, b"x")
        } else {
            udp(41000, port, b"query")
        };
        let own = l3(CLIENT, VIP, proto, &l4);
        let (v, out) =
            l.dp.run_xdp(&client_frame(net.mac, &own), net.ifindex)
                .unwrap();
        assert_eq!(v, XDP_TX);
        let flow_headers = out[..14 + 36 + 4 * out[14 + 28 + 7] as usize].to_vec();
        for (typ, code) in [
            (3u8, 0u8),
            (3, 1),
            (3, 3),
            (3, 4),
            (3, 13),
            (11, 0),
            (11, 1),
            (12, 0),
        ] {
            let q = quote(VIP, CLIENT, proto, port, 41000, &[]);
            let inner = icmp_error(typ, code, VIP, &q);
            let ((v, out), deltas) = l.counted(|| {
                l.dp.run_xdp(&client_frame(net.mac, &inner), net.ifindex)
                    .unwrap()
            });
            let what = format!("ICMP type {typ} code {code} about proto {proto}");
            assert_eq!(v, XDP_TX, "{what}");
            assert_eq!(
                deltas,
                vec![("xdp_encap_tx", 1), ("xdp_icmp_forwarded", 1)],
                "{what}"
            );
            // Same MACs, first hop, source port and hop list as the flow; the
            // lengths and the outer checksum differ with the inner size.
            let n = flow_headers.len();
            assert_eq!(out[..16], flow_headers[..16], "{what}: MACs");
            assert_eq!(
                out[14 + 12..14 + 20],
                flow_headers[14 + 12..14 + 20],
                "{what}: addresses"
            );
            assert_eq!(
                out[14 + 20..14 + 24],
                flow_headers[14 + 20..14 + 24],
                "{what}: ports"
            );
            assert_eq!(
                out[14 + 28..n],
                flow_headers[14 + 28..n],
                "{what}: GUE and hops"
            );
            assert_eq!(&out[n..], &inner[..], "{what}: inner");
            assert_eq!(csum(&out[14..34]), 0, "{what}: outer checksum");
        }
    }
}

/// Echo requests and ICMP that quotes no flow pass to the balancer's own
/// stack (it holds the VIP too); an error quoting a packet from another VIP
/// than the one it was sent to is not about any flow of this VIP: dropped.
#[test]
fn xdp_icmp_without_a_flow_passes_and_a_foreign_quote_is_dropped() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&two_vips(), NODE);
    let echo = l3(CLIENT, VIP, IPPROTO_ICMP, &icmp(8, 0, b"ping"));
    let timestamp = l3(CLIENT, VIP, IPPROTO_ICMP, &icmp(13, 0, &[0; 12]));
    let redirect = icmp_error(5, 1, VIP, &quote(VIP, CLIENT, IPPROTO_TCP, 80, 41000, &[]));
    // A quote of an ICMP packet: an error about no TCP/UDP flow.
    let about_icmp = {
        let mut q = ipv4(VIP, CLIENT, IPPROTO_ICMP, 8, 0, &[]);
        q.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 1]);
        icmp_error(3, 1, VIP, &q)
    };
    for (what, inner) in [
        ("echo request", &echo),
        ("timestamp request", &timestamp),
        ("redirect", &redirect),
        ("unreachable about ICMP", &about_icmp),
    ] {
        let frame = client_frame(net.mac, inner);
        let ((v, out), deltas) = l.counted(|| l.dp.run_xdp(&frame, net.ifindex).unwrap());
        assert_eq!((v, &out), (XDP_PASS, &frame), "{what}");
        assert_eq!(deltas, vec![("xdp_pass_not_service", 1)], "{what}");
    }
    // Sent to VIP2 but quoting VIP's flow (a service of both VIPs): today's
    // balancer steered it with VIP's table.
    let foreign = icmp_error(3, 4, VIP2, &quote(VIP, CLIENT, IPPROTO_TCP, 80, 41000, &[]));
    let ((v, _), deltas) = l.counted(|| {
        l.dp.run_xdp(&client_frame(net.mac, &foreign), net.ifindex)
            .unwrap()
    });
    assert_eq!((v, deltas), (XDP_DROP, vec![("xdp_drop_malformed", 1)]));
}

/// An error quoting a protocol other than TCP/UDP with fewer than 4 bytes
/// after the quoted header: both programs see "no flow" (XDP passes it, TC
/// drops it as unsupported); they used to disagree (TC: malformed).
#[test]
fn icmp_short_quote_without_a_flow_agrees_in_xdp_and_tc() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let mut q = ipv4(VIP, CLIENT, 47, 2, 0, &[]); // GRE, 2 bytes quoted
    q.extend_from_slice(&[0, 0]);
    let inner = icmp_error(3, 4, VIP, &q);
    let frame = client_frame(net.mac, &inner);
    let ((v, _), deltas) = l.counted(|| l.dp.run_xdp(&frame, net.ifindex).unwrap());
    assert_eq!((v, deltas), (XDP_PASS, vec![("xdp_pass_not_service", 1)]));
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &inner);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!((v, deltas), (TC_ACT_SHOT, vec![("tc_drop_unsupported", 1)]));
}

// ---- ICMP inside GUE -----------------------------------------------------------------

/// An echo request to a VIP inside GUE is decapsulated by the first hop,
/// hops left or not (glb-director's director encapsulates pings this way).
#[test]
fn tc_icmp_echo_is_answered_by_the_first_hop() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let echo = l3(CLIENT, VIP, IPPROTO_ICMP, &icmp(8, 0, b"abcdefgh"));
    for next in [0u8, 1] {
        let g = gue_frame(net.mac, MAC12, B12, NODE, next, &[B13], &echo);
        let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(v, TC_ACT_OK, "next hop index {next}");
        assert_bytes("echo decapsulated", &out, &decapsulated(net.mac, &echo));
        assert_eq!(deltas, vec![("tc_decap_ping", 1)]);
    }
}

/// ICMP errors inside GUE follow the quoted TCP flow: kept where a socket
/// owns it, forwarded while a hop is left, dropped as unknown at the last
/// hop; ICMP that is about no flow is dropped as unsupported. Per-service
/// counters count them under the quoted flow's service.
#[test]
fn tc_icmp_errors_follow_the_quoted_tcp_flow() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let client = connect_from(NODE, 0, VIP, 80);
    let (_server, _) = listener.accept().unwrap();
    let cport = client.local_addr().unwrap().port();
    let web = index_of(&l, 80);
    let stats = |l: &Loaded| {
        let s = l.dp.service_stats(web).unwrap();
        (s.tc_decap, s.tc_forward, s.tc_drops)
    };

    for (typ, code) in [(3u8, 1u8), (3, 3), (3, 4), (11, 0), (12, 0)] {
        let what = format!("type {typ} code {code}");
        let known = icmp_error(
            typ,
            code,
            VIP,
            &quote(VIP, NODE, IPPROTO_TCP, 80, cport, &[]),
        );
        let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &known);
        let before = stats(&l);
        let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(v, TC_ACT_OK, "{what}: established");
        assert_bytes(&what, &out, &decapsulated(net.mac, &known));
        assert_eq!(deltas, vec![("tc_decap_icmp", 1)], "{what}");
        assert_eq!(stats(&l).0, before.0 + 1, "{what}: per-service decap");

        let unknown = icmp_error(
            typ,
            code,
            VIP,
            &quote(VIP, CLIENT, IPPROTO_TCP, 80, 41000, &[]),
        );
        let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &unknown);
        let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(
            (v, deltas),
            (TC_ACT_REDIRECT, vec![("tc_forward", 1)]),
            "{what}: unknown"
        );
        assert_eq!(
            &out[14 + 16..14 + 20],
            &B13.octets(),
            "{what}: to the second hop"
        );
        assert_eq!(stats(&l).1, before.1 + 1, "{what}: per-service forward");

        let g = gue_frame(net.mac, MAC12, B12, NODE, 1, &[B13], &unknown);
        let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(
            (v, deltas),
            (TC_ACT_SHOT, vec![("tc_drop_unknown_flow", 1)]),
            "{what}: last hop"
        );
        assert_eq!(stats(&l).2, before.2 + 1, "{what}: per-service drop");
    }

    for (what, inner) in [
        (
            "echo reply",
            l3(CLIENT, VIP, IPPROTO_ICMP, &icmp(0, 0, b"x")),
        ),
        (
            "timestamp",
            l3(CLIENT, VIP, IPPROTO_ICMP, &icmp(13, 0, &[0; 12])),
        ),
        (
            "redirect",
            icmp_error(5, 1, VIP, &quote(VIP, NODE, IPPROTO_TCP, 80, cport, &[])),
        ),
    ] {
        let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &inner);
        let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(
            (v, deltas),
            (TC_ACT_SHOT, vec![("tc_drop_unsupported", 1)]),
            "{what}"
        );
    }
    // Quoting another VIP's packet: invalid.
    let foreign = icmp_error(3, 4, VIP, &quote(VIP2, NODE, IPPROTO_TCP, 80, cport, &[]));
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &foreign);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!((v, deltas), (TC_ACT_SHOT, vec![("tc_drop_malformed", 1)]));
}

/// ICMP errors quoting a UDP flow follow the UDP rules: a connected socket
/// keeps it; with only an unconnected socket (DNS-style) it goes on while a
/// hop is left and the last hop keeps it (it used to be dropped there, so
/// no path MTU was learned).
#[test]
fn tc_icmp_about_a_udp_flow_follows_the_udp_rules() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let _dns = UdpSocket::bind(SocketAddrV4::new(VIP, 53)).unwrap();
    let conn = UdpSocket::bind(SocketAddrV4::new(VIP, 5353)).unwrap();
    conn.connect(SocketAddrV4::new(B12, 4444)).unwrap();
    let dns_index = index_of(&l, 53);

    let about_dns = icmp_error(3, 4, VIP, &quote(VIP, CLIENT, IPPROTO_UDP, 53, 41000, &[]));
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &about_dns);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_REDIRECT, vec![("tc_forward", 1)]),
        "listener, hop left"
    );
    let g = gue_frame(net.mac, MAC12, B12, NODE, 1, &[B13], &about_dns);
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_OK, vec![("tc_decap_icmp", 1)]),
        "listener, last hop"
    );
    assert_bytes("ICMP about DNS", &out, &decapsulated(net.mac, &about_dns));
    let s = l.dp.service_stats(dns_index).unwrap();
    assert_eq!(
        (s.tc_forward, s.tc_decap),
        (1, 1),
        "counted for the dns service"
    );

    let about_conn = icmp_error(3, 4, VIP, &quote(VIP, B12, IPPROTO_UDP, 5353, 4444, &[]));
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &about_conn);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_OK, vec![("tc_decap_icmp", 1)]),
        "connected socket"
    );
}

// ---- UDP second chance -----------------------------------------------------------------

/// For a UDP flow whose bucket has a second hop the balancer lists the
/// first hop again after it, so a packet no connected socket owns comes
/// back to the table's choice; TCP lists the second hop only.
#[test]
fn xdp_udp_lists_the_first_hop_again_after_the_second() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let mut l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let dns = l3(CLIENT, VIP, IPPROTO_UDP, &udp(5353, 53, b"query"));
    let web = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, ACK, b""));
    let dns_sport = sport_of(CLIENT, VIP, 5353, 53, IPPROTO_UDP);
    let web_sport = sport_of(CLIENT, VIP, 40000, 80, IPPROTO_TCP);
    let (v, out) =
        l.dp.run_xdp(&client_frame(net.mac, &dns), net.ifindex)
            .unwrap();
    assert_eq!(v, XDP_TX);
    assert_bytes(
        "UDP, no second hop",
        &out,
        &encapsulated(MAC12, net.mac, B12, &[], dns_sport, &dns),
    );

    moved_config(&mut l);
    let (v, out) =
        l.dp.run_xdp(&client_frame(net.mac, &dns), net.ifindex)
            .unwrap();
    assert_eq!(v, XDP_TX);
    assert_bytes(
        "UDP: second hop, then the first again",
        &out,
        &encapsulated(MAC13, net.mac, B13, &[B12, B13], dns_sport, &dns),
    );
    let (v, out) =
        l.dp.run_xdp(&client_frame(net.mac, &web), net.ifindex)
            .unwrap();
    assert_eq!(v, XDP_TX);
    assert_bytes(
        "TCP: second hop only",
        &out,
        &encapsulated(MAC13, net.mac, B13, &[B12], web_sport, &web),
    );
}

/// The TC side of UDP second chance, hop by hop, for hop list [second,
/// first]: this node as first hop with only a listener passes the packet
/// on; as second hop with only a listener passes it back; as first hop
/// again (no hop left) keeps it; a connected socket keeps its flow at any
/// hop.
#[test]
fn tc_udp_goes_back_to_the_first_hop_unless_a_socket_is_connected() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let _dns = UdpSocket::bind(SocketAddrV4::new(VIP, 53)).unwrap();
    let conn = UdpSocket::bind(SocketAddrV4::new(VIP, 5353)).unwrap();
    conn.connect(SocketAddrV4::new(B12, 4444)).unwrap();
    let query = l3(CLIENT, VIP, IPPROTO_UDP, &udp(41000, 53, b"query"));
    let owned = l3(B12, VIP, IPPROTO_UDP, &udp(4444, 5353, b"more"));

    // First hop (from the balancer .12): on to the second hop .13.
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13, NODE], &query);
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!((v, deltas), (TC_ACT_REDIRECT, vec![("tc_forward", 1)]));
    assert_eq!(
        (&out[14 + 16..14 + 20], out[14 + 28 + 6]),
        (&B13.octets()[..], 1)
    );
    // Second hop (from first hop .12, list [NODE, .12]): back to .12.
    let g = gue_frame(net.mac, MAC12, B12, NODE, 1, &[NODE, B12], &query);
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!((v, deltas), (TC_ACT_REDIRECT, vec![("tc_forward", 1)]));
    assert_eq!(
        (&out[14 + 16..14 + 20], out[14 + 28 + 6]),
        (&B12.octets()[..], 2)
    );
    // First hop again, no hop left: the listener serves it.
    let g = gue_frame(net.mac, MAC12, B12, NODE, 2, &[B13, NODE], &query);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!((v, deltas), (TC_ACT_OK, vec![("tc_decap_udp", 1)]));
    // A connected socket keeps its flow at the first and the second hop.
    for (next, hops) in [(0u8, [B13, NODE]), (1, [NODE, B12])] {
        let g = gue_frame(net.mac, MAC12, B12, NODE, next, &hops, &owned);
        let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(
            (v, deltas),
            (TC_ACT_OK, vec![("tc_decap_udp", 1)]),
            "next {next}"
        );
    }
}

// ---- TCP socket states -----------------------------------------------------------------

/// TCP states of the sockets in this thread's namespace whose local end is
/// VIP:80 and remote end NODE:`port` (/proc/thread-self/net/tcp).
fn server_state(port: u16) -> Option<u8> {
    let text = std::fs::read_to_string("/proc/thread-self/net/tcp").unwrap();
    let local = format!("{:08X}:{:04X}", u32::from_le_bytes(VIP.octets()), 80);
    let remote = format!("{:08X}:{:04X}", u32::from_le_bytes(NODE.octets()), port);
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f[1] == local && f[2] == remote).then(|| u8::from_str_radix(f[3], 16).unwrap())
    })
}

fn wait_state(port: u16, state: u8) {
    for _ in 0..200 {
        if server_state(port) == Some(state) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!(
        "VIP:80 <- NODE:{port}: state {:?}, wanted {state:#x}",
        server_state(port)
    );
}

/// A TIME_WAIT socket for the 4-tuple (a client reusing its source port
/// while its live connection is on the second hop) does not keep a packet
/// while a hop is left; at the last hop the stack gets it.
#[test]
fn tc_time_wait_does_not_keep_packets_while_a_hop_is_left() {
    require_root!("BPF, network namespace");
    use std::io::Read;
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let mut client = connect_from(NODE, 0, VIP, 80);
    let port = client.local_addr().unwrap().port();
    let (server, _) = listener.accept().unwrap();
    // The server closes first (as an HTTP server with Connection: close
    // does), the client then: the server's end ends in TIME_WAIT.
    server.shutdown(std::net::Shutdown::Write).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(client.read(&mut buf).unwrap(), 0);
    drop(client);
    drop(server);
    wait_state(port, 0x06);

    let data = l3(NODE, VIP, IPPROTO_TCP, &tcp(port, 80, ACK | PSH, b"live"));
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data);
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_REDIRECT, vec![("tc_forward", 1)]),
        "hop left"
    );
    assert_eq!(&out[14 + 16..14 + 20], &B13.octets());
    let g = gue_frame(net.mac, MAC12, B12, NODE, 1, &[B13], &data);
    let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_OK, vec![("tc_decap_time_wait", 1)]),
        "last hop"
    );
    assert_bytes(
        "TIME_WAIT at the last hop",
        &out,
        &decapsulated(net.mac, &data),
    );
    // An ICMP error about it: the same rules.
    let err = icmp_error(3, 4, VIP, &quote(VIP, NODE, IPPROTO_TCP, 80, port, &[]));
    let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &err);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_REDIRECT, vec![("tc_forward", 1)]),
        "ICMP, hop left"
    );
    let g = gue_frame(net.mac, MAC12, B12, NODE, 1, &[B13], &err);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_OK, vec![("tc_decap_icmp", 1)]),
        "ICMP, last hop"
    );
}

/// Closing states of a live connection still own their packets while a hop
/// is left: FIN_WAIT2 (our FIN acknowledged, the client may still send) and
/// CLOSE_WAIT (the client's FIN received, it still acknowledges our data).
#[test]
fn tc_live_closing_states_keep_their_packets() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();

    let c1 = connect_from(NODE, 0, VIP, 80);
    let (s1, _) = listener.accept().unwrap();
    s1.shutdown(std::net::Shutdown::Write).unwrap();
    let p1 = c1.local_addr().unwrap().port();
    wait_state(p1, 0x05); // FIN_WAIT2

    let c2 = connect_from(NODE, 0, VIP, 80);
    let (_s2, _) = listener.accept().unwrap();
    let p2 = c2.local_addr().unwrap().port();
    drop(c2);
    wait_state(p2, 0x08); // CLOSE_WAIT

    for (what, port) in [("FIN_WAIT2", p1), ("CLOSE_WAIT", p2)] {
        let data = l3(NODE, VIP, IPPROTO_TCP, &tcp(port, 80, ACK, b"x"));
        let g = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data);
        let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&g, net.ifindex).unwrap());
        assert_eq!(
            (v, deltas),
            (TC_ACT_OK, vec![("tc_decap_established", 1)]),
            "{what}"
        );
    }
    drop((c1, s1));
}

// ---- unknown_flow: rst -------------------------------------------------------------------

/// A TCP segment with sequence number `seq` and acknowledgment `ack`
/// (flags as given) from CLIENT:`sport` to VIP:80, in GUE with no hop left.
fn last_hop_segment(mac: [u8; 6], sport: u16, flags: u8, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut t = tcp(sport, 80, flags, payload);
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    gue_frame(
        mac,
        MAC12,
        B12,
        NODE,
        1,
        &[B13],
        &l3(CLIENT, VIP, IPPROTO_TCP, &t),
    )
}

/// `unknown_flow: rst`: at the last hop a TCP segment nobody owns is
/// answered by a RST from the VIP as RFC 793 says (with ACK: seq = its ack;
/// without: RST+ACK acknowledging seq + data + SYN + FIN); a RST is not
/// answered, nor is UDP; with a hop left the packet still goes on.
#[test]
fn tc_unknown_flow_rst_answers_as_rfc_793_says() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "rst"),
        NODE,
    );
    let m = net.mac;
    let cases = [
        (
            "data with ACK",
            last_hop_segment(m, 40001, ACK | PSH, 1000, b"GET /"),
            2000,
            None,
        ),
        (
            "pure ACK",
            last_hop_segment(m, 40002, ACK, 7, b""),
            2000,
            None,
        ),
        (
            "FIN+ACK",
            last_hop_segment(m, 40003, FIN | ACK, 7, b""),
            2000,
            None,
        ),
        (
            "data without ACK",
            last_hop_segment(m, 40004, PSH, 1000, b"abc"),
            0,
            Some(1003),
        ),
        (
            "FIN without ACK",
            last_hop_segment(m, 40005, FIN, 0xffff_ffff, b""),
            0,
            Some(0),
        ),
    ];
    for (what, frame, seq, ack) in cases {
        let cport = {
            let inner = &frame[14 + 40..];
            u16::from_be_bytes([inner[20], inner[21]])
        };
        let ((v, out), deltas) = l.counted(|| l.dp.run_tc(&frame, net.ifindex).unwrap());
        assert_eq!(
            (v, deltas),
            (TC_ACT_REDIRECT, vec![("tc_rst_sent", 1)]),
            "{what}"
        );
        assert_bytes(what, &out, &rst_frame(m, CLIENT, 80, cport, seq, ack));
    }
    let web = index_of(&l, 80);
    assert_eq!(l.dp.service_stats(web).unwrap().tc_drops, 5);

    let rst = last_hop_segment(m, 40006, RST | ACK, 1000, b"");
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&rst, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_SHOT, vec![("tc_drop_unknown_flow", 1)]),
        "RST"
    );
    let dns = gue_frame(
        m,
        MAC12,
        B12,
        NODE,
        0,
        &[],
        &l3(CLIENT, VIP, IPPROTO_UDP, &udp(1, 53, b"q")),
    );
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&dns, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_SHOT, vec![("tc_drop_unknown_flow", 1)]),
        "UDP"
    );
    let data = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40007, 80, ACK, b"x"));
    let hop_left = gue_frame(m, MAC12, B12, NODE, 0, &[B13], &data);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&hop_left, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_REDIRECT, vec![("tc_forward", 1)]),
        "hop left"
    );
}

/// The three unknown_flow modes side by side on the same segment at the
/// last hop: drop (dropped), local (to the stack, which resets), rst (a RST
/// from the VIP built here).
#[test]
fn tc_unknown_flow_modes() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let frame = last_hop_segment(net.mac, 40001, ACK, 1000, b"x");
    let inner = frame[14 + 40..].to_vec();
    for (mode, verdict, counter, out) in [
        ("drop", TC_ACT_SHOT, "tc_drop_unknown_flow", None),
        (
            "local",
            TC_ACT_OK,
            "tc_decap_unknown_local",
            Some(decapsulated(net.mac, &inner)),
        ),
        (
            "rst",
            TC_ACT_REDIRECT,
            "tc_rst_sent",
            Some(rst_frame(net.mac, CLIENT, 80, 40001, 2000, None)),
        ),
    ] {
        let l = load(
            &config(&[(B12, 1, "active"), (B13, 1, "active")], mode),
            NODE,
        );
        let ((v, o), deltas) = l.counted(|| l.dp.run_tc(&frame, net.ifindex).unwrap());
        assert_eq!((v, deltas), (verdict, vec![(counter, 1)]), "{mode}");
        if let Some(want) = out {
            assert_bytes(mode, &o, &want);
        }
    }
}

/// RSTs are rate-limited per CPU: a burst of NILB_RST_BURST (100), then
/// about one per NILB_RST_INTERVAL_NS (1 ms); the rest is dropped and
/// counted.
#[test]
fn tc_unknown_flow_rst_is_rate_limited() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    // One CPU, one budget.
    let mut cpus = nix::sched::CpuSet::new();
    cpus.set(0).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus).unwrap();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "rst"),
        NODE,
    );
    let frame = last_hop_segment(net.mac, 40001, ACK, 1000, b"x");
    let start = std::time::Instant::now();
    let (_, deltas) = l.counted(|| {
        for _ in 0..300 {
            l.dp.run_tc(&frame, net.ifindex).unwrap();
        }
    });
    let ms = start.elapsed().as_millis() as u64;
    let get = |n: &str| deltas.iter().find(|(c, _)| *c == n).map_or(0, |(_, v)| *v);
    let (sent, limited) = (get("tc_rst_sent"), get("tc_drop_rst_limited"));
    assert_eq!(sent + limited, 300, "{deltas:?}");
    // The coarse clock moves in jiffies (at most 10 ms).
    assert!(
        (100..=100 + ms + 10).contains(&sent),
        "{sent} RSTs sent, {limited} limited in {ms} ms"
    );
}

// ---- checksums ---------------------------------------------------------------------------

/// The outer UDP checksum of a GUE frame (0 if `frame` carries none).
fn udp_csum_of(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[14 + 26], frame[14 + 27]])
}

/// Set the outer UDP checksum of a GUE frame (corrupt: off by one).
fn with_udp_csum(frame: &[u8], corrupt: bool) -> Vec<u8> {
    let mut f = frame.to_vec();
    put16(&mut f, 14 + 26, 0);
    let o = &f[14..];
    let len = u16::from_be_bytes([o[24], o[25]]) as usize;
    let mut p = o[12..20].to_vec();
    p.extend_from_slice(&[0, 17]);
    p.extend_from_slice(&(len as u16).to_be_bytes());
    p.extend_from_slice(&o[20..20 + len]);
    let mut c = csum(&p);
    if c == 0 {
        c = 0xffff;
    }
    put16(&mut f, 14 + 26, if corrupt { c ^ 1 } else { c });
    f
}

/// Second chance rewrites the outer addresses and the hop index: a non-zero
/// outer UDP checksum must still verify (a plain Linux next hop drops the
/// packet otherwise), a corrupted one must still fail, a zero one stays 0.
#[test]
fn tc_forward_keeps_the_udp_checksum_valid() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    for sport in 40000..40020u16 {
        let data = l3(
            CLIENT,
            VIP,
            IPPROTO_TCP,
            &tcp(sport, 80, ACK | PSH, b"payload"),
        );
        let mut plain = gue_frame(net.mac, MAC12, B12, NODE, 0, &[B13], &data);
        put16(&mut plain, 14 + 26, 0); // a sender without a checksum
        let (v, out) = l.dp.run_tc(&plain, net.ifindex).unwrap();
        assert_eq!(
            (v, udp_csum_of(&out)),
            (TC_ACT_REDIRECT, 0),
            "zero stays zero"
        );

        let good = with_udp_csum(&plain, false);
        assert!(outer_udp_verifies(&good));
        let (v, out) = l.dp.run_tc(&good, net.ifindex).unwrap();
        assert_eq!(v, TC_ACT_REDIRECT);
        assert_eq!(&out[14 + 16..14 + 20], &B13.octets());
        assert!(
            outer_udp_verifies(&out),
            "port {sport}: UDP checksum after the forward"
        );
        assert_ne!(udp_csum_of(&out), 0);
        assert_eq!(csum(&out[14..34]), 0, "outer IPv4 checksum");

        let bad = with_udp_csum(&plain, true);
        let (_, out) = l.dp.run_tc(&bad, net.ifindex).unwrap();
        assert!(
            !outer_udp_verifies(&out),
            "a corrupted packet stays detectable"
        );
    }
}

// ---- linear headers -------------------------------------------------------------------------

/// An ICMP error inside GUE whose quote carries 40 bytes of IPv4 options,
/// with 8 hops listed, needs 174 bytes of headers: a driver that leaves
/// less in the linear area (here a tap with IFF_NAPI_FRAGS, 42 bytes) must
/// not make the TC program see a cut quote.
#[test]
fn tc_linearizes_an_icmp_quote_with_options() {
    require_root!("BPF, network namespace, tap device");
    let net = TestNet::new();
    let mut l = load(
        &config(&[(B12, 1, "active"), (B13, 1, "active")], "drop"),
        NODE,
    );
    let (tap, ifindex) = tap::open("ntap0");
    ip("link set ntap0 up");
    let tap_mac = mac_from_ip_link("ntap0");
    l.dp.attach_tc(ifindex as i32).unwrap();

    let hops: Vec<Ipv4Addr> = (1..=8).map(|i| Ipv4Addr::new(10, 0, 0, 20 + i)).collect();
    let options = [1u8; 40];
    let err = icmp_error(
        3,
        4,
        VIP,
        &quote(VIP, CLIENT, IPPROTO_TCP, 80, 41000, &options),
    );
    // No hop left and nobody owns the quoted flow: dropped as an unknown
    // flow, provided the quote's ports were read.
    let frame = gue_frame(tap_mac, MAC12, B12, NODE, 8, &hops, &err);
    let headers = 14 + 20 + 8 + 8 + 4 * 8 + 20 + 8 + 60 + 4;
    assert!(frame.len() > headers);
    let ((v, _), deltas) = l.counted(|| l.dp.run_tc(&frame, net.ifindex).unwrap());
    assert_eq!(
        (v, deltas),
        (TC_ACT_SHOT, vec![("tc_drop_unknown_flow", 1)]),
        "linear test run"
    );

    let (_, deltas) = l.counted(|| {
        tap::write_split(&tap, &frame, 42);
        std::thread::sleep(std::time::Duration::from_millis(50));
    });
    assert_eq!(
        deltas,
        vec![("tc_drop_unknown_flow", 1)],
        "through a tap, 42 bytes linear"
    );
    l.dp.detach().unwrap();
}

/// A tap device whose frames arrive as the first write segment in the
/// linear area and the rest in page fragments (IFF_NAPI_FRAGS), as a NIC's
/// driver with header split hands them to the stack.
mod tap {
    #![allow(unsafe_code)]
    use std::fs::File;
    use std::io::IoSlice;
    use std::os::fd::AsRawFd;

    const IFF_TAP: u16 = 0x0002;
    const IFF_NAPI: u16 = 0x0010;
    const IFF_NAPI_FRAGS: u16 = 0x0020;
    const IFF_NO_PI: u16 = 0x1000;

    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: u16,
        pad: [u8; 22],
    }

    /// TUNSETIFF, _IOW('T', 202, int).
    const TUNSETIFF: nix::libc::c_ulong = 0x4004_54ca;

    /// Create tap `name` in this thread's namespace: its file and ifindex.
    pub fn open(name: &str) -> (File, u32) {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .expect("/dev/net/tun");
        let mut req = IfReq {
            name: [0; 16],
            flags: IFF_TAP | IFF_NO_PI | IFF_NAPI | IFF_NAPI_FRAGS,
            pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads a struct ifreq, which IfReq lays out
        // (name, flags, padding to its 40 bytes).
        let rc = unsafe { nix::libc::ioctl(f.as_raw_fd(), TUNSETIFF, &req as *const IfReq) };
        assert_eq!(rc, 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
        let ifindex = nix::net::if_::if_nametoindex(name).expect("tap ifindex");
        (f, ifindex)
    }

    /// Write `frame` as two segments: the first `linear` bytes, the rest.
    pub fn write_split(f: &File, frame: &[u8], linear: usize) {
        let n = nix::sys::uio::writev(
            f,
            &[
                IoSlice::new(&frame[..linear]),
                IoSlice::new(&frame[linear..]),
            ],
        )
        .expect("writev to the tap");
        assert_eq!(n, frame.len());
    }
}
