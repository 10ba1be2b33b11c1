//! The XDP programs' per-CPU service cache (docs/design.md "Service
//! cache"): every change the control plane makes to `services` or
//! `services6` is seen by the very next packet on a CPU whose cache holds
//! the old value, because each change increments `services_gen`. The
//! cases are the changes that rewrite a service's value: a table of
//! another size (a new region of the pool; the old one, still holding the
//! old buckets, is quarantined for a second, so a cache that missed the
//! change would send the packet to the old first hop), a removal, and the
//! same for an IPv6 service. All on one CPU, the cache filled first. Needs
//! root; skipped (one line on stderr) without it.

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
