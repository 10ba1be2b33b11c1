//! The XDP programs' per-CPU lookup caches (docs/design.md "Lookup
//! caches"): every change the control plane makes to `services`,
//! `services6`, `vips` or `cluster_nodes` is seen by the very next packet
//! on a CPU whose cache holds the old entry, because each change
//! increments `cache_gen`. The cases: a table of another size (a new
//! region of the pool; the old one, still holding the old buckets, is
//! quarantined for a second, so a cache that missed the change would send
//! the packet to the old first hop), a removed service, the same for an
//! IPv6 service, a balancer that left the cluster and a removed VIP (the
//! backends' receive path). All on one CPU, the cache filled first; each
//! test fails with the increment left out. Needs root; skipped (one line
//! on stderr) without it.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::*;
use nilb::hash::IPPROTO_TCP;

/// `config` with the web service's table of `size` buckets.
fn sized(backends: &[(Ipv4Addr, u32, &str)], size: u32) -> String {
    config(backends, "drop").replacen("table_size: 256", &format!("table_size: {size}"), 1)
}

#[test]
fn a_new_table_size_reaches_the_next_packet() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let mut l = load(&sized(&[(B12, 1, "active")], 256), NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40100, 80, ACK, b"x"));
    let input = client_frame(net.mac, &inner);
    let sport = sport_of(CLIENT, VIP, 40100, 80, IPPROTO_TCP);
    for i in 0..3 {
        let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
        assert_eq!((v, d), (XDP_TX, vec![("xdp_encap_tx", 1)]), "packet {i}");
        assert_bytes(
            "to .12, cache filled",
            &out,
            &encapsulated(MAC12, net.mac, B12, &[], sport, &inner),
        );
    }

    // 512 buckets, .13 only: a new region, a new `services` value (.12 the
    // previous owner in every bucket). The old region keeps .12 as first
    // hop during its quarantine.
    l.reload(&sized(&[(B13, 1, "active")], 512), NODE);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!((v, d), (XDP_TX, vec![("xdp_encap_tx", 1)]));
    assert_bytes(
        "to .13 at once (a stale cache entry would name .12)",
        &out,
        &encapsulated(MAC13, net.mac, B13, &[B12], sport, &inner),
    );

    // And back to 256 buckets (the first region may be taken again).
    l.reload(&sized(&[(B12, 1, "active")], 256), NODE);
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!(v, XDP_TX);
    assert_bytes(
        "to .12 again",
        &out,
        &encapsulated(MAC12, net.mac, B12, &[B13], sport, &inner),
    );
}

#[test]
fn a_removed_service_is_not_served_from_the_cache() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let yaml = config(&[(B12, 1, "active")], "drop");
    let mut l = load(&yaml, NODE);
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40101, 80, ACK, b"x"));
    let input = client_frame(net.mac, &inner);
    for _ in 0..2 {
        assert_eq!(l.dp.run_xdp(&input, net.ifindex).unwrap().0, XDP_TX);
    }
    // Only the dns service left (the VIP stays a VIP).
    let start = yaml.find("  - name: web").expect("web in the config");
    let end = yaml.find("  - name: dns").expect("dns in the config");
    let dns_only = format!("{}{}", &yaml[..start], &yaml[end..]);
    l.reload(&dns_only, NODE);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_pass_not_service", 1)]),
        "no service any more: passed untouched"
    );
    assert_bytes("untouched", &out, &input);
    // Back again: balanced from the next packet on.
    l.reload(&yaml, NODE);
    assert_eq!(l.dp.run_xdp(&input, net.ifindex).unwrap().0, XDP_TX);
}

/// An IPv6 VIP's frame: Ethernet, IPv6 (hop limit 64), TCP.
fn frame6(mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, l4: &[u8]) -> Vec<u8> {
    let mut f = eth(mac, CLIENT_MAC, 0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    f.extend_from_slice(&[IPPROTO_TCP, 64]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(l4);
    f
}

#[test]
fn an_ipv6_service_change_reaches_the_next_packet() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let yaml = |dip: Ipv4Addr, size: u32| {
        config(&[(B12, 1, "active")], "drop")
            + &format!(
                "  - name: web6\n    vip: \"2001:db8::100\"\n    port: 80\n    protocol: tcp\n    table_size: {size}\n    backends:\n      - {{dip: {dip}}}\n"
            )
    };
    let mut l = load(&yaml(B12, 256), NODE);
    let vip6: Ipv6Addr = "2001:db8::100".parse().unwrap();
    let client6: Ipv6Addr = "2001:db8:1::1".parse().unwrap();
    let input = frame6(net.mac, client6, vip6, &tcp(40102, 80, ACK, b"x"));
    // The outer IPv4 destination: bytes 30..34 of the encapsulated frame.
    let outer_dst = |out: &[u8]| Ipv4Addr::new(out[30], out[31], out[32], out[33]);
    for _ in 0..2 {
        let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
        assert_eq!((v, outer_dst(&out)), (XDP_TX, B12));
    }
    l.reload(&yaml(B13, 512), NODE);
    let (v, out) = l.dp.run_xdp(&input, net.ifindex).unwrap();
    assert_eq!(
        (v, outer_dst(&out)),
        (XDP_TX, B13),
        "the new table at once (a stale cache entry would name .12)"
    );
    l.reload(&config(&[(B12, 1, "active")], "drop"), NODE);
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(&input, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_pass_not_service", 1)]),
        "web6 removed"
    );
}

/// A SYN from CLIENT to VIP:80 in GUE from `src` to `node`, no hop listed.
fn gue_syn(mac: [u8; 6], src: Ipv4Addr, node: Ipv4Addr, sport: u16) -> Vec<u8> {
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(sport, 80, SYN, b""));
    gue_frame(mac, CLIENT_MAC, src, node, 0, &[], &inner)
}

/// The address cache (`vips`, `cluster_nodes`) of the backends' XDP
/// receive path: a balancer removed from the cluster, and a VIP removed,
/// are each seen by the very next packet after the cache held them.
#[test]
fn a_removed_cluster_node_or_vip_reaches_the_next_packet() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let b14 = Ipv4Addr::new(10, 0, 0, 14);
    // This node is backend .12; the balancer is .11 (NODE).
    let yaml = config(&[(B12, 1, "active")], "drop");
    let mut l = load(&yaml, B12);
    let from11 = gue_syn(net.mac, NODE, B12, 40200);
    for _ in 0..2 {
        let ((v, _), d) = l.counted(|| l.dp.run_xdp_backend(&from11, net.ifindex).unwrap());
        assert_eq!(
            (v, d),
            (XDP_PASS, vec![("xdp_decap_syn", 1)]),
            "from the balancer"
        );
    }
    // The balancer is .14 now: .11 is no cluster node.
    let yaml14 = yaml.replace("balancers: [10.0.0.11]", "balancers: [10.0.0.14]");
    l.reload(&yaml14, B12);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&from11, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_gue_to_tc", 1)]),
        ".11 left the cluster: TC's to judge (it drops it), not decapsulated from the cache"
    );
    assert_bytes("untouched", &out, &from11);

    // The VIP: every service of 10.0.0.100 moved to 10.0.0.101.
    let from14 = gue_syn(net.mac, b14, B12, 40201);
    for _ in 0..2 {
        let ((v, _), d) = l.counted(|| l.dp.run_xdp_backend(&from14, net.ifindex).unwrap());
        assert_eq!((v, d), (XDP_PASS, vec![("xdp_decap_syn", 1)]), "to a VIP");
    }
    l.reload(&yaml14.replace("vip: 10.0.0.100", "vip: 10.0.0.101"), B12);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&from14, net.ifindex).unwrap());
    assert_eq!(
        (v, d),
        (XDP_PASS, vec![("xdp_gue_to_tc", 1)]),
        "10.0.0.100 is no VIP any more: TC's (it drops it), not decapsulated from the cache"
    );
    assert_bytes("untouched", &out, &from14);
}

/// `config` with `cluster.nat` and the service natweb 10.0.0.200:80/tcp
/// on backends .11, .12, .13: `mode: nat` with `target_port` if `target`,
/// else a DSR service.
fn natweb(target: Option<u16>) -> String {
    let mut y = config(&[(B12, 1, "active")], "drop").replace(
        "  unknown_flow:",
        "  nat: {max_flows: 1024}\n  unknown_flow:",
    );
    y += "  - name: natweb\n    vip: 10.0.0.200\n    port: 80\n    protocol: tcp\n    table_size: 256\n";
    if let Some(t) = target {
        y += &format!("    mode: nat\n    target_port: {t}\n");
    }
    y += "    backends:\n      - {dip: 10.0.0.11}\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.13}\n";
    y
}

/// The TCP destination port of a decapsulated IPv4 frame (no options).
fn inner_dport(out: &[u8]) -> u16 {
    u16::from_be_bytes([out[36], out[37]])
}

/// A change of only the attributes of a `services` value (a NAT target
/// port, NAT mode itself, and with it the VIP's flags in `vips`) reaches
/// the very next packet of the backends' XDP receive path and of the
/// balancer's local first hop (`xdp_local_direct`), after the cache held
/// the old value.
#[test]
fn a_nat_attribute_change_reaches_the_next_packet() {
    require_root!("BPF, network namespace");
    assert!(pin_to_cpu(0), "pinning to CPU 0");
    let net = TestNet::new();
    let nat_vip = Ipv4Addr::new(10, 0, 0, 200);
    let mut l = load(&natweb(Some(8080)), NODE);
    let gue = |sport: u16| {
        let inner = l3(CLIENT, nat_vip, IPPROTO_TCP, &tcp(sport, 80, SYN, b""));
        gue_frame(net.mac, MAC12, B12, NODE, 0, &[], &inner)
    };
    for sport in [45000, 45001] {
        let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&gue(sport), net.ifindex).unwrap());
        assert_eq!(v, XDP_PASS);
        assert!(d.contains(&("nat_in", 1)), "translated: {d:?}");
        assert_eq!(inner_dport(&out), 8080, "to the target port");
    }
    // Only the target port changes: the same region, flags and index.
    l.reload(&natweb(Some(9090)), NODE);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&gue(45002), net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS);
    assert!(d.contains(&("nat_in", 1)), "translated: {d:?}");
    assert_eq!(
        inner_dport(&out),
        9090,
        "the new target port at once (a stale cache entry would say 8080)"
    );
    // NAT mode off: a DSR service, the VIP no longer NAT-only.
    l.reload(&natweb(None), NODE);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp_backend(&gue(45003), net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS);
    assert_eq!(d, vec![("xdp_decap_syn", 1)], "decapsulated, untranslated");
    assert_eq!(inner_dport(&out), 80);
    // And on again.
    l.reload(&natweb(Some(8080)), NODE);
    let ((_, out), d) = l.counted(|| l.dp.run_xdp_backend(&gue(45004), net.ifindex).unwrap());
    assert!(d.contains(&("nat_in", 1)), "translated again: {d:?}");
    assert_eq!(inner_dport(&out), 8080);

    // The balancer's local first hop: only this node as natweb's backend.
    let only_me = |t| {
        natweb(t).replace(
            "      - {dip: 10.0.0.11}\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.13}\n",
            "      - {dip: 10.0.0.11}\n",
        )
    };
    l.reload(&only_me(Some(8080)), NODE);
    let direct = |sport: u16| {
        client_frame(
            net.mac,
            &l3(CLIENT, nat_vip, IPPROTO_TCP, &tcp(sport, 80, SYN, b"")),
        )
    };
    for sport in [45100, 45101] {
        let ((v, out), d) = l.counted(|| l.dp.run_xdp(&direct(sport), net.ifindex).unwrap());
        assert_eq!(v, XDP_PASS);
        assert!(d.contains(&("xdp_local_direct", 1)), "{d:?}");
        assert_eq!(inner_dport(&out), 8080);
    }
    l.reload(&only_me(Some(9090)), NODE);
    let ((v, out), d) = l.counted(|| l.dp.run_xdp(&direct(45102), net.ifindex).unwrap());
    assert_eq!(v, XDP_PASS);
    assert!(d.contains(&("xdp_local_direct", 1)), "{d:?}");
    assert_eq!(
        inner_dport(&out),
        9090,
        "local first hop: the new target port at once"
    );
}
