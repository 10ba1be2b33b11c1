//! Edge filter fixtures through BPF_PROG_TEST_RUN (docs/design.md "Edge
//! filters"): for each rule kind (global deny inline and from a list file,
//! service allow and deny, rate limits per address and per subnet, packets
//! and SYNs), longest-prefix semantics, allow and deny together, dry run,
//! cluster addresses, and a swap of lists by reload: input frame, expected
//! verdict, expected counter deltas, and per-rule counters. Needs root;
//! skipped (one line on stderr) without it.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;

use common::*;
use nilb::config::Config;
use nilb::control::{ControlPlane, Plan};
use nilb::filters::{lists, FilterSet};
use nilb::hash::{IPPROTO_TCP, IPPROTO_UDP};

const OTHER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 50);

/// The test config (web TCP :80 and dns UDP :53 on the VIP, backend .12)
/// with `filters` (YAML at the top level) and `web_filters` (YAML lines of
/// web's `filters:` block, indented 6).
fn filtered_config(filters: &str, web_filters: &str) -> String {
    let mut y = config(&[(B12, 1, "active")], "drop");
    if !web_filters.is_empty() {
        y = y.replace(
            "  - name: web\n",
            &format!("  - name: web\n    filters:\n{web_filters}"),
        );
    }
    y + filters
}

/// A data plane filled from `yaml` with its filters compiled (list files
/// relative to `dir`).
fn load_filtered(yaml: &str, dir: &std::path::Path) -> Loaded {
    let mut l = load(yaml, NODE);
    set_filters(&mut l, dir);
    l
}

fn set_filters(l: &mut Loaded, dir: &std::path::Path) {
    let c = l.cp.config().clone();
    let lists = lists::load_lists(&c, dir).expect("list files");
    let set = FilterSet::compile(&c, &lists, &l.cp.filters().ids()).expect("compile");
    l.cp.set_filters(Arc::new(set));
    let plan = Plan {
        filters: true,
        ..Plan::default()
    };
    l.cp.apply(&mut l.dp, NODE.into(), &plan)
        .expect("installing filters");
}

fn reload_filtered(l: &mut Loaded, yaml: &str, dir: &std::path::Path) {
    let plan = l.cp.update(Config::parse(yaml).expect("test config"), 2);
    l.cp.apply(&mut l.dp, NODE.into(), &plan).expect("applying");
    set_filters(l, dir);
}

fn syn_from(src: Ipv4Addr, sport: u16, mac: [u8; 6]) -> Vec<u8> {
    client_frame(mac, &l3(src, VIP, IPPROTO_TCP, &tcp(sport, 80, SYN, b"")))
}

fn ack_from(src: Ipv4Addr, sport: u16, mac: [u8; 6]) -> Vec<u8> {
    client_frame(
        mac,
        &l3(src, VIP, IPPROTO_TCP, &tcp(sport, 80, ACK, b"hello")),
    )
}

fn dns_from(src: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
    client_frame(mac, &l3(src, VIP, IPPROTO_UDP, &udp(5353, 53, b"q")))
}

fn to_node_from(src: Ipv4Addr, mac: [u8; 6]) -> Vec<u8> {
    client_frame(mac, &l3(src, NODE, IPPROTO_TCP, &tcp(40000, 22, SYN, b"")))
}

/// Rule id by name.
fn rule(l: &Loaded, name: &str) -> u16 {
    l.cp.filters()
        .rules
        .iter()
        .find(|r| r.ident.name == name)
        .unwrap_or_else(|| panic!("no rule {name}"))
        .id
}

/// (packets, bytes) a rule counted.
fn rule_count(l: &Loaded, name: &str) -> (u64, u64) {
    let s = l.dp.filter_stats(rule(l, name)).unwrap();
    (s.packets, s.bytes)
}

/// Run XDP on `frame`: verdict and counter deltas.
fn run(l: &Loaded, ifindex: u32, frame: &[u8]) -> (u32, Vec<(&'static str, u64)>) {
    let ((v, _), d) = l.counted(|| l.dp.run_xdp(frame, ifindex).unwrap());
    (v, d)
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "nilb-filter-fixtures-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn global_deny_drops_every_packet_of_a_listed_source_by_longest_prefix() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("global");
    std::fs::write(
        dir.join("feed.txt"),
        "# a threat list\n198.51.100.0/24\n203.0.113.77 ; one host\n2001:db8::/32\n",
    )
    .unwrap();
    let y = filtered_config(
        "filters:\n  deny:\n    - {name: wide, prefixes: [198.0.0.0/8]}\n    - {name: feed, files: [feed.txt]}\n    - {name: host, prefixes: [198.51.100.7/32, 198.51.100.64/27]}\n",
        "",
    );
    let l = load_filtered(&y, &dir);
    let m = net.mac;
    let host = Ipv4Addr::new(198, 51, 100, 7);
    let in_27 = Ipv4Addr::new(198, 51, 100, 70);
    let in_24 = Ipv4Addr::new(198, 51, 100, 200);
    let in_8 = Ipv4Addr::new(198, 1, 2, 3);
    let listed = Ipv4Addr::new(203, 0, 113, 77);
    let drop = vec![("xdp_drop_filter", 1)];
    // VIP traffic, the node's own traffic: the global stage drops both.
    let frame = syn_from(host, 40000, m);
    let len = (frame.len() - 14) as u64;
    assert_eq!(
        run(&l, net.ifindex, &frame),
        (XDP_DROP, drop.clone()),
        "/32"
    );
    assert_eq!(
        run(&l, net.ifindex, &syn_from(in_27, 40000, m)),
        (XDP_DROP, drop.clone()),
        "/27"
    );
    assert_eq!(
        run(&l, net.ifindex, &to_node_from(in_24, m)),
        (XDP_DROP, drop.clone()),
        "/24 to the node"
    );
    assert_eq!(
        run(&l, net.ifindex, &syn_from(in_8, 40000, m)),
        (XDP_DROP, drop.clone()),
        "/8"
    );
    assert_eq!(
        run(&l, net.ifindex, &dns_from(listed, m)),
        (XDP_DROP, drop.clone()),
        "file /32"
    );
    // The longest prefix decides which rule counts.
    assert_eq!(rule_count(&l, "host"), (2, 2 * len));
    assert_eq!(rule_count(&l, "feed").0, 2);
    assert_eq!(rule_count(&l, "wide"), (1, len));
    // Others are untouched: balanced or passed exactly as without filters.
    let plain = load(&config(&[(B12, 1, "active")], "drop"), NODE);
    for f in [
        syn_from(CLIENT, 40000, m),
        syn_from(Ipv4Addr::new(199, 51, 101, 1), 40001, m),
        to_node_from(Ipv4Addr::new(199, 0, 0, 1), m),
        dns_from(Ipv4Addr::new(203, 0, 113, 78), m),
    ] {
        let want = plain.dp.run_xdp(&f, net.ifindex).unwrap();
        assert_eq!(l.dp.run_xdp(&f, net.ifindex).unwrap(), want);
    }
    // Not IPv4: not filtered.
    assert_eq!(
        run(&l, net.ifindex, &f_arp(m)),
        (XDP_PASS, vec![("xdp_pass_non_ip", 1)])
    );
    std::fs::remove_dir_all(&dir).ok();
}

fn f_arp(mac: [u8; 6]) -> Vec<u8> {
    let mut f = eth(mac, CLIENT_MAC, 0x0806);
    f.extend_from_slice(&[0u8; 28]);
    f
}

#[test]
fn service_allow_lets_only_listed_sources_reach_it_and_deny_inside_wins() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("allow");
    let y = filtered_config(
        "",
        "      allow: {name: partners, prefixes: [192.0.2.0/24, 198.51.100.0/24, 203.0.113.8/29]}\n      deny:\n        - {name: bad, prefixes: [192.0.2.128/25, 203.0.113.0/24]}\n",
    );
    let l = load_filtered(&y, &dir);
    let m = net.mac;
    let pass = |v: &(u32, Vec<(&'static str, u64)>)| v.0 == XDP_TX;
    // listed: reaches web
    assert!(pass(&run(&l, net.ifindex, &syn_from(CLIENT, 40000, m))));
    assert!(pass(&run(
        &l,
        net.ifindex,
        &ack_from(Ipv4Addr::new(198, 51, 100, 3), 40000, m)
    )));
    // a deny more specific than the allow: dropped by the deny
    assert_eq!(
        run(
            &l,
            net.ifindex,
            &syn_from(Ipv4Addr::new(192, 0, 2, 200), 40000, m)
        ),
        (XDP_DROP, vec![("xdp_drop_filter", 1)])
    );
    // an allow more specific than the deny: reaches web
    assert!(pass(&run(
        &l,
        net.ifindex,
        &syn_from(Ipv4Addr::new(203, 0, 113, 9), 40000, m)
    )));
    assert_eq!(
        run(
            &l,
            net.ifindex,
            &syn_from(Ipv4Addr::new(203, 0, 113, 20), 40000, m)
        )
        .0,
        XDP_DROP
    );
    // not listed: dropped by the allow rule
    assert_eq!(
        run(
            &l,
            net.ifindex,
            &syn_from(Ipv4Addr::new(8, 8, 8, 8), 40000, m)
        ),
        (XDP_DROP, vec![("xdp_drop_filter", 1)])
    );
    assert_eq!(rule_count(&l, "partners").0, 1);
    assert_eq!(rule_count(&l, "bad").0, 2);
    // the allow list is web's: dns and the node's own traffic are untouched
    let (v, d) = run(&l, net.ifindex, &dns_from(Ipv4Addr::new(8, 8, 8, 8), m));
    assert_eq!((v, d), (XDP_TX, vec![("xdp_encap_tx", 1)]));
    assert_eq!(
        run(&l, net.ifindex, &to_node_from(Ipv4Addr::new(8, 8, 8, 8), m)),
        (XDP_PASS, vec![("xdp_pass_not_service", 1)])
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn dry_run_counts_what_it_would_drop_and_drops_nothing() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("dry");
    let y = filtered_config(
        "filters:\n  deny:\n    - {name: live, prefixes: [198.51.0.0/16]}\n    - {name: trial, prefixes: [198.51.100.0/24, 203.0.113.0/24], dry_run: true}\n",
        "      allow: {name: maybe, prefixes: [192.0.2.0/24], dry_run: true}\n",
    );
    let l = load_filtered(&y, &dir);
    let m = net.mac;
    // a dry-run rule alone: passes, counted as would-drop
    let (v, d) = run(
        &l,
        net.ifindex,
        &syn_from(Ipv4Addr::new(203, 0, 113, 5), 40000, m),
    );
    assert_eq!(v, XDP_TX);
    assert_eq!(
        d,
        vec![("xdp_encap_tx", 1), ("xdp_filter_dry_run", 2)],
        "trial and maybe"
    );
    // dry-run inside a live rule: the live rule drops, the dry one counts too
    assert_eq!(
        run(
            &l,
            net.ifindex,
            &syn_from(Ipv4Addr::new(198, 51, 100, 5), 40000, m)
        ),
        (
            XDP_DROP,
            vec![("xdp_drop_filter", 1), ("xdp_filter_dry_run", 1)]
        )
    );
    // a dry-run allow: listed sources are not counted
    assert_eq!(
        run(&l, net.ifindex, &syn_from(CLIENT, 40000, m)),
        (XDP_TX, vec![("xdp_encap_tx", 1)])
    );
    assert_eq!(rule_count(&l, "trial").0, 2);
    assert_eq!(rule_count(&l, "maybe").0, 1);
    assert_eq!(rule_count(&l, "live").0, 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn cluster_addresses_are_never_filtered() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("cluster");
    // Without the mark a rule over cluster addresses is refused.
    let unmarked = filtered_config(
        "filters:\n  deny:\n    - {name: lan, prefixes: [10.0.0.0/24]}\n",
        "",
    );
    let e = Config::parse(&unmarked).unwrap_err();
    assert!(
        e.to_string().contains("covers cluster address 10.0.0.11"),
        "{e}"
    );
    let y = filtered_config(
        "filters:\n  deny:\n    - {name: lan, prefixes: [10.0.0.0/24], covers_cluster: true}\n  rate_limit:\n    - {name: everyone, packets_per_second: 1, burst_packets: 1}\n",
        "",
    );
    let l = load_filtered(&y, &dir);
    let m = net.mac;
    // GUE from a backend (a cluster address): exempt from the deny rule
    // (and then decapsulated before GRO: an inner SYN)
    let inner = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40000, 80, SYN, b""));
    let gue = gue_frame(m, MAC12, B12, NODE, 0, &[], &inner);
    let (v, d) = run(&l, net.ifindex, &gue);
    assert_eq!(v, XDP_PASS);
    assert_eq!(d, vec![("xdp_filter_exempt", 1), ("xdp_decap_syn", 1)]);
    // and from the global rate limit, however often
    for _ in 0..5 {
        assert_eq!(run(&l, net.ifindex, &gue).0, XDP_PASS);
    }
    // another address in the same prefix: dropped
    assert_eq!(
        run(&l, net.ifindex, &to_node_from(OTHER, m)),
        (XDP_DROP, vec![("xdp_drop_filter", 1)])
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn rate_limits_count_per_source_or_subnet_packets_and_syns() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("rate");
    let y = filtered_config(
        "filters:\n  rate_limit_sources: 4096\n",
        "      rate_limit:\n        - {name: syns, per: address, syns_per_second: 1, burst_syns: 3}\n        - {name: subnet, per: subnet, packets_per_second: 1, burst_packets: 20}\n        - {name: watch, per: address, packets_per_second: 1, burst_packets: 2, dry_run: true}\n",
    );
    let l = load_filtered(&y, &dir);
    let m = net.mac;
    let a = Ipv4Addr::new(198, 51, 100, 1);
    // SYNs from one address: three pass (the burst), the rest are dropped
    let mut verdicts = Vec::new();
    for i in 0..6 {
        verdicts.push(run(&l, net.ifindex, &syn_from(a, 41000 + i, m)).0);
    }
    assert_eq!(
        verdicts,
        [XDP_TX, XDP_TX, XDP_TX, XDP_DROP, XDP_DROP, XDP_DROP]
    );
    // non-SYN packets of the same source are not limited by the SYN limit
    assert_eq!(run(&l, net.ifindex, &ack_from(a, 41000, m)).0, XDP_TX);
    // another address: its own SYN bucket
    assert_eq!(
        run(
            &l,
            net.ifindex,
            &syn_from(Ipv4Addr::new(198, 51, 100, 2), 42000, m)
        )
        .0,
        XDP_TX
    );
    assert_eq!(rule_count(&l, "syns").0, 3);
    // Limits apply in order and the first that drops decides: the dry-run
    // limit (2 packets per address) saw the 3 SYNs and the ACK that `syns`
    // let through from .1, and counted the 3rd and 4th as would-drops.
    assert_eq!(rule_count(&l, "watch").0, 2);
    // per subnet: the /24 shares one bucket of 20 packets; 5 were used
    let mut passed = 0;
    for i in 0..30 {
        let src = Ipv4Addr::new(198, 51, 100, 10 + (i % 5));
        if run(&l, net.ifindex, &ack_from(src, 43000 + i as u16, m)).0 == XDP_TX {
            passed += 1;
        }
    }
    assert_eq!(
        passed,
        20 - 5,
        "5 packets of 198.51.100.0/24 passed the subnet limit before"
    );
    // 5 sources x 3 packets passed: each one's 3rd counted by `watch`
    assert_eq!(rule_count(&l, "watch").0, 2 + 5);
    let (v, d) = run(
        &l,
        net.ifindex,
        &ack_from(Ipv4Addr::new(198, 51, 100, 99), 44000, m),
    );
    assert_eq!(v, XDP_DROP);
    assert_eq!(d, vec![("xdp_drop_rate_limit", 1)]);
    assert_eq!(rule_count(&l, "subnet").0, 15 + 1);
    // another /24 is not affected
    assert_eq!(
        run(
            &l,
            net.ifindex,
            &ack_from(Ipv4Addr::new(198, 51, 101, 1), 45000, m)
        )
        .0,
        XDP_TX
    );
    // the sources the limits hit most
    let top = l.dp.rate_limited_sources(10).unwrap();
    let first = &top[0];
    assert_eq!(
        (first.rule, first.source),
        (rule(&l, "subnet"), Ipv4Addr::new(198, 51, 100, 0))
    );
    assert_eq!(first.dropped, 16);
    assert!(top
        .iter()
        .any(|s| s.rule == rule(&l, "syns") && s.source == a && s.dropped == 3));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_reload_swaps_the_lists_at_once_and_keeps_counters_of_kept_rules() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("swap");
    std::fs::write(dir.join("feed.txt"), "198.51.100.0/24\n").unwrap();
    let y = filtered_config(
        "filters:\n  deny:\n    - {name: feed, files: [feed.txt]}\n",
        "",
    );
    let mut l = load_filtered(&y, &dir);
    let m = net.mac;
    let old = Ipv4Addr::new(198, 51, 100, 9);
    let new = Ipv4Addr::new(203, 0, 113, 9);
    assert_eq!(run(&l, net.ifindex, &syn_from(old, 40000, m)).0, XDP_DROP);
    assert_eq!(run(&l, net.ifindex, &syn_from(new, 40000, m)).0, XDP_TX);
    let gen0 = l.dp.last_filter_install().unwrap().generation;
    let id = rule(&l, "feed");
    // a changed list file: the new list, the other generation, same rule id
    std::fs::write(dir.join("feed.txt"), "203.0.113.0/24\n").unwrap();
    reload_filtered(&mut l, &y, &dir);
    assert_ne!(l.dp.last_filter_install().unwrap().generation, gen0);
    assert_eq!(rule(&l, "feed"), id);
    assert_eq!(run(&l, net.ifindex, &syn_from(old, 40000, m)).0, XDP_TX);
    assert_eq!(run(&l, net.ifindex, &syn_from(new, 40000, m)).0, XDP_DROP);
    assert_eq!(rule_count(&l, "feed").0, 2, "counters carry over");
    // a bad list file: the reload is refused and the lists in force stay
    std::fs::write(dir.join("feed.txt"), "203.0.113.0/24\n203.0.113.300\n").unwrap();
    let e = lists::load_lists(l.cp.config(), &dir).unwrap_err();
    assert!(e[0].message.contains("feed.txt: line 2"), "{e:?}");
    assert_eq!(run(&l, net.ifindex, &syn_from(new, 40000, m)).0, XDP_DROP);
    // no filters any more: everything passes, the rule is gone
    reload_filtered(&mut l, &config(&[(B12, 1, "active")], "drop"), &dir);
    assert_eq!(run(&l, net.ifindex, &syn_from(new, 40000, m)).0, XDP_TX);
    assert!(l.dp.live_filter_rules().unwrap().is_empty());
    // an unchanged set is not installed again
    let before = l.dp.last_filter_install().cloned();
    let cp: &mut ControlPlane = &mut l.cp;
    let same = cp.filters().clone();
    assert!(!cp.set_filters(same));
    assert_eq!(l.dp.last_filter_install().cloned(), before);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn icmp_errors_from_routers_pass_a_services_allow_list() {
    require_root!("BPF, network namespace");
    let net = TestNet::new();
    let dir = tmpdir("icmp");
    let y = filtered_config("", "      allow: {name: only, prefixes: [192.0.2.0/24]}\n");
    let l = load_filtered(&y, &dir);
    // frag-needed from a router outside the allow list, about an allowed flow
    let quoted = l3(VIP, CLIENT, IPPROTO_TCP, &tcp(80, 40000, ACK, b""));
    let mut icmp = vec![3u8, 4, 0, 0, 0, 0, 0x05, 0xdc];
    icmp.extend_from_slice(&quoted[..28]);
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let frame = client_frame(net.mac, &l3(Ipv4Addr::new(198, 51, 100, 1), VIP, 1, &icmp));
    let (v, d) = run(&l, net.ifindex, &frame);
    assert_eq!(v, XDP_TX, "{d:?}");
    assert!(d.contains(&("xdp_icmp_forwarded", 1)), "{d:?}");
    std::fs::remove_dir_all(&dir).ok();
}
