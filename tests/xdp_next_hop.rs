//! The balancer's verdicts and counters around the next hop
//! (docs/design.md "Balancer (XDP)"): the slow path carries the FIB's
//! egress interface to TC, per-backend statistics and `xdp_icmp_forwarded`
//! count only what is sent, TCP with a data offset below 5 is malformed at
//! the balancer, an empty config map passes everything, and each CPU has
//! its own hop cache. Needs root; skipped (one line on stderr) without it.

mod common;

use std::mem::MaybeUninit;
use std::net::Ipv4Addr;

use common::*;
use nilb::dataplane::{Dataplane, DataplaneOps};
use nilb::hash::IPPROTO_TCP;

/// A backend without a route.
const FAR: Ipv4Addr = Ipv4Addr::new(172, 16, 0, 5);

/// A second interface `nt2` (10.1.0.1/24, peer `nt3`) in the test's
/// namespace; returns its ifindex and MAC.
fn second_link() -> (u32, [u8; 6]) {
    ip("link add nt2 type veth peer name nt3");
    ip("addr add 10.1.0.1/24 dev nt2");
    ip("link set nt2 up");
    ip("link set nt3 up");
    std::fs::write("/proc/sys/net/ipv4/conf/nt2/forwarding", "1").unwrap();
    let idx = nix::net::if_::if_nametoindex("nt2").unwrap();
    (idx, mac_from_ip_link("nt2"))
}

fn backend_packets(l: &Loaded, dip: Ipv4Addr) -> (u64, u64, u64) {
    let key = l.cp.config().services[0].key();
    let slot = l.cp.service(&key).unwrap().backends[&dip.into()].slot;
    let bs = l.dp.backend_stats(slot).unwrap();
    (bs.packets, bs.bytes, bs.syns)
}

/// The slow path: XDP hands TC the encapsulated frame with the hand-off
/// mark as its source MAC and no metadata; TC sends a marked frame on
/// (out of the interface the FIB chooses: the end-to-end test below sees
/// which) and takes an unmarked one that claims this node for a forgery.
#[test]
fn xdp_slow_path_hands_tc_a_marked_frame() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let (_nt2, _) = second_link();
    let r7 = Ipv4Addr::new(10, 1, 0, 7);
    let l = load(&config(&[(r7, 1, "active")], "drop"), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(42000, 80, SYN, b""));
    let input = client_frame(net.mac, &inner);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_PASS, vec![("xdp_encap_slow_path", 1)]));
    let sport = sport_of(CLIENT, VIP, 42000, 80, IPPROTO_TCP);
    let want = encapsulated(net.mac, CLIENT_MAC, r7, &[], sport, &inner);
    assert_bytes("slow path via nt2", &out, &marked(&want));
    let split = l.dp.run_xdp_split(&input, net.ifindex).unwrap();
    assert!(split.meta.is_empty(), "no XDP metadata: {:?}", split.meta);

    let ((v, _), d) = l.counted(|| l.dp.run_tc(&out, net.ifindex).unwrap());
    assert_eq!((v, d), (TC_ACT_REDIRECT, vec![("tc_slow_path_sent", 1)]));
    // The same frame with any other source MAC is not ours: it passes.
    let ((v, _), d) = l.counted(|| l.dp.run_tc(&want, net.ifindex).unwrap());
    assert_eq!((v, d), (TC_ACT_OK, vec![("tc_pass_other", 1)]));
    // Nor with a mark other than this node's (another node's, an old one).
    let mut other = out.clone();
    other[11] ^= 0x80;
    let ((v, _), d) = l.counted(|| l.dp.run_tc(&other, net.ifindex).unwrap());
    assert_eq!((v, d), (TC_ACT_OK, vec![("tc_pass_other", 1)]));
}

/// End to end through the kernel: XDP and TC attached to nt0, a frame sent
/// into it from nt1; the slow path's ARP request for a hop behind nt2 must
/// go out of nt2 (seen on its peer nt3), not out of nt0 (seen on nt1).
#[test]
fn slow_path_leaves_through_the_fib_egress_interface() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let _ = second_link();
    let r7 = Ipv4Addr::new(10, 1, 0, 7);
    let mut l = load(&config(&[(r7, 1, "active")], "drop"), NODE);
    l.dp.attach_xdp(net.ifindex as i32, nilb::dataplane::XdpMode::Native)
        .unwrap();
    l.dp.attach_tc(net.ifindex as i32).unwrap();
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(42001, 80, SYN, b""));
    let frame = client_frame(net.mac, &inner);
    // python3's AF_PACKET sockets: send the frame into nt0 from nt1 and
    // report on which wire an ARP request for r7 shows up within 3 s.
    let script = format!(
        r#"
import select, socket, time
def sock(dev):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((dev, 0))
    return s
watch = {{"nt3": sock("nt3"), "nt1": sock("nt1")}}
watch["nt1"].send(bytes.fromhex("{frame}"))
seen, end = set(), time.time() + 3
while time.time() < end and "nt3" not in seen:
    ready, _, _ = select.select(list(watch.values()), [], [], 0.1)
    for dev, s in watch.items():
        if s in ready:
            f = s.recv(2048)
            if f[12:14] == b"\x08\x06" and f[20:22] == b"\x00\x01" and f[38:42] == bytes([{a}]):
                seen.add(dev)
print(" ".join(sorted(seen)) or "none")
"#,
        frame = frame.iter().map(|b| format!("{b:02x}")).collect::<String>(),
        a = r7.octets().map(|o| o.to_string()).join(","),
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3");
    let seen = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let counters = l.dp.counters().unwrap();
    let by_name = |n: &str| {
        let i = nilb::dataplane::abi::COUNTER_NAMES
            .iter()
            .position(|c| *c == n)
            .unwrap();
        counters[i]
    };
    assert_eq!(
        (by_name("xdp_encap_slow_path"), by_name("tc_slow_path_sent")),
        (1, 1),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(seen, "nt3", "wires with an ARP request for {r7}");
}

/// backend_stats count what was sent to a backend, not what was dropped
/// on the way (no route; too big: tests/xdp_mtu.rs).
#[test]
fn xdp_backend_stats_count_only_sent_packets() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(FAR, 1, "active")], "drop"), NODE);
    let syn = client_frame(
        net.mac,
        &l3(CLIENT, VIP, IPPROTO_TCP, &tcp(42010, 80, SYN, b"")),
    );
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&syn, net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_no_route", 1)]));
    assert_eq!(backend_packets(&l, FAR), (0, 0, 0));

    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let (v, _) = l.dp.run_xdp(&syn, net.ifindex).unwrap();
    assert_eq!(v, XDP_TX);
    assert_eq!(backend_packets(&l, B12), (1, 40, 1));
}

/// An ICMP frag-needed that quotes a flow of the service.
fn frag_needed_about(cport: u16) -> Vec<u8> {
    let emb_tcp = tcp(80, cport, ACK, b"");
    let mut emb = ipv4(VIP, CLIENT, IPPROTO_TCP, emb_tcp.len(), 0, &[]);
    emb.extend_from_slice(&emb_tcp[..8]);
    let mut icmp = vec![3, 4, 0, 0, 0, 0, 0x05, 0x78];
    icmp.extend_from_slice(&emb);
    let c = csum(&icmp);
    put16(&mut icmp, 2, c);
    l3(Ipv4Addr::new(198, 51, 100, 1), VIP, 1, &icmp)
}

/// `xdp_icmp_forwarded` counts ICMP that was encapsulated and sent, not
/// ICMP then dropped for want of a backend or a route.
#[test]
fn xdp_icmp_forwarded_counts_only_sent_messages() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let f = client_frame(net.mac, &frag_needed_about(42020));
    let l = load(&config(&[(FAR, 1, "active")], "drop"), NODE);
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&f, net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_no_route", 1)]));
    let l = load(&config(&[], "drop"), NODE);
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&f, net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_DROP, vec![("xdp_drop_no_backend", 1)]));
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&f, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_TX, vec![("xdp_encap_tx", 1), ("xdp_icmp_forwarded", 1)])
    );
}

/// A TCP header whose data offset is below 5 words is malformed: the
/// backend's TC would drop it, so the balancer does (and counts it).
#[test]
fn xdp_tcp_data_offset_below_5_is_malformed() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    for doff in 0..5u8 {
        let mut t = tcp(42030, 80, SYN, b"");
        t[12] = doff << 4;
        let f = client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_TCP, &t));
        let ((v, _), d) = l.counted(|| l.dp.run_xdp(&f, net.ifindex).unwrap());
        assert_eq!(
            (v, d),
            (XDP_DROP, vec![("xdp_drop_malformed", 1)]),
            "data offset {doff}"
        );
    }
    assert_eq!(backend_packets(&l, B12), (0, 0, 0));
}

/// With the config map empty (daemon not ready) everything IPv4 passes and
/// is counted as such, also fragments and malformed packets to a VIP.
#[test]
fn xdp_without_config_passes_everything() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut dp = Dataplane::load(storage).unwrap();
    dp.set_vips(&[std::net::IpAddr::V4(VIP)].into_iter().collect())
        .unwrap();
    let t = tcp(42040, 80, ACK, b"0123456789abcdef");
    let mut frag = ipv4(CLIENT, VIP, IPPROTO_TCP, t.len(), 0x2000, &[]);
    frag.extend_from_slice(&t);
    let mut bad_ihl = client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_TCP, &t));
    bad_ihl[14] = 0x44;
    let mut short_tcp = ipv4(CLIENT, VIP, IPPROTO_TCP, 8, 0, &[]);
    short_tcp.extend_from_slice(&t[..8]);
    for (what, f) in [
        ("fragment to a VIP", client_frame(net.mac, &frag)),
        ("IHL 4 to a VIP", bad_ihl),
        ("truncated TCP to a VIP", client_frame(net.mac, &short_tcp)),
        (
            "TCP to a VIP",
            client_frame(net.mac, &l3(CLIENT, VIP, IPPROTO_TCP, &t)),
        ),
    ] {
        let before = dp.counters().unwrap();
        let (v, out) = dp.run_xdp(&f, net.ifindex).unwrap();
        let after = dp.counters().unwrap();
        let moved: Vec<_> = nilb::dataplane::abi::COUNTER_NAMES
            .iter()
            .zip(before.iter().zip(&after))
            .filter(|(_, (b, a))| a != b)
            .map(|(n, (b, a))| (*n, a - b))
            .collect();
        assert_eq!(v, XDP_PASS, "{what}");
        assert_eq!(out, f, "{what}: untouched");
        assert_eq!(moved, vec![("xdp_pass_no_config", 1)], "{what}");
    }
}

/// Each CPU keeps its own hop cache (no torn entries between CPUs): a CPU
/// that has not asked the FIB yet sees a changed neighbour at once, while
/// another still uses its own recent answer.
#[test]
fn xdp_hop_cache_is_per_cpu() {
    require_root!("BPF, network namespace");
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if cpus < 2 || !pin_to_cpu(1) {
        eprintln!("skipping xdp_hop_cache_is_per_cpu: needs two CPUs");
        return;
    }
    assert!(pin_to_cpu(0));
    let net = TestNet::new();
    let l = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(42050, 80, ACK, b""));
    let input = client_frame(net.mac, &inner);
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!((v, &out[..6]), (XDP_TX, &MAC12[..]), "CPU 0 caches MAC12");
    let moved = [0x02, 0, 0, 0, 0, 0x77];
    ip("neigh replace 10.0.0.12 lladdr 02:00:00:00:00:77 dev nt0 nud permanent");
    assert!(pin_to_cpu(1));
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!((v, &out[..6]), (XDP_TX, &moved[..]), "CPU 1 asks the FIB");
    assert!(pin_to_cpu(0));
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!(
        (v, &out[..6]),
        (XDP_TX, &MAC12[..]),
        "CPU 0 keeps its own answer until it expires"
    );
}
