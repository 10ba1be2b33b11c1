use std::net::Ipv4Addr;

use super::*;

const GOOD: &str = r#"
version: 1
cluster:
  hash_seed: 0x5eed1234
  balancers: [10.0.0.11]
  gue_port: 19523
  unknown_flow: drop
defaults:
  table_size: 4096
services:
  - name: web
    vip: 10.0.0.100
    port: 80
    protocol: tcp
    backends:
      - {dip: 10.0.0.11, hostname: edge-11, weight: 100}
      - {dip: 10.0.0.12, hostname: edge-12, weight: 100, state: drained}
  - name: dns
    vip: 10.0.0.100
    port: 53
    protocol: udp
    table_size: 256
    backends:
      - {dip: 10.0.0.13}
"#;

fn problems(src: &str) -> Vec<Problem> {
    Config::parse(src)
        .expect_err("config should be rejected")
        .problems
}

/// The one problem of `src`, asserting its path.
fn one_problem(src: &str, path: &str) -> Problem {
    let p = problems(src);
    assert_eq!(p.len(), 1, "expected one problem, got {p:#?}");
    assert_eq!(p[0].path, path, "{p:#?}");
    p[0].clone()
}

#[test]
fn good_config_parses_with_defaults() {
    let c = Config::parse(GOOD).unwrap();
    assert_eq!(c.cluster.hash_seed, 0x5eed1234);
    assert_eq!(c.cluster.balancers, vec![Ipv4Addr::new(10, 0, 0, 11)]);
    assert_eq!(c.cluster.gue_port, 19523);
    assert_eq!(c.cluster.unknown_flow, UnknownFlow::Drop);
    assert_eq!(c.services.len(), 2);
    let web = &c.services[0];
    assert_eq!(web.table_size, 4096);
    assert_eq!(web.backends[1].state, BackendState::Drained);
    assert_eq!(web.backends[0].hostname.as_deref(), Some("edge-11"));
    let dns = &c.services[1];
    assert_eq!(dns.protocol, Protocol::Udp);
    assert_eq!(dns.table_size, 256);
    assert_eq!(dns.backends[0].weight, DEFAULT_WEIGHT);
    assert_eq!(dns.backends[0].state, BackendState::Active);
    assert_eq!(c.cluster_addresses().len(), 3);
    assert_eq!(c.vips().len(), 1);
}

#[test]
fn unknown_field_is_named_with_position() {
    let src = GOOD.replace("    port: 80\n", "    port: 80\n    colour: blue\n");
    let p = one_problem(&src, "services[0].colour");
    assert!(p.message.starts_with("unknown field `colour`"), "{p}");
    assert_eq!(p.position.map(|p| p.line), Some(14));
}

#[test]
fn string_where_number_expected() {
    let src = GOOD.replace("weight: 100}", "weight: heavy}");
    let p = one_problem(&src, "services[0].backends[0].weight");
    assert!(p.message.contains("invalid type: string"), "{p}");
    assert!(p.position.is_some());
}

#[test]
fn duplicate_key_is_an_error() {
    let src = GOOD.replace("    port: 80\n", "    port: 80\n    port: 81\n");
    let p = problems(&src);
    assert!(p[0].message.contains("duplicate"), "{p:#?}");
}

#[test]
fn missing_required_field() {
    let src = GOOD.replace("    vip: 10.0.0.100\n    port: 80\n", "    port: 80\n");
    let p = one_problem(&src, "services[0]");
    assert!(p.message.contains("missing field `vip`"), "{p}");
}

#[test]
fn syntax_error_has_position() {
    let p = problems("version: 1\ncluster: [unclosed\n");
    assert_eq!(p.len(), 1);
    assert!(p[0].position.is_some(), "{p:#?}");
}

#[test]
fn unknown_flow_modes_parse() {
    for (text, mode) in [
        ("drop", UnknownFlow::Drop),
        ("local", UnknownFlow::Local),
        ("rst", UnknownFlow::Rst),
    ] {
        let src = GOOD.replace("unknown_flow: drop", &format!("unknown_flow: {text}"));
        let c = Config::parse(&src).unwrap();
        assert_eq!(c.cluster.unknown_flow, mode);
        assert_eq!(mode.name(), text);
    }
}

#[test]
fn unknown_enum_value() {
    let src = GOOD.replace("protocol: tcp", "protocol: sctp");
    let p = one_problem(&src, "services[0].protocol");
    assert!(p.message.contains("unknown variant `sctp`"), "{p}");
    let src = GOOD.replace("unknown_flow: drop", "unknown_flow: bounce");
    one_problem(&src, "cluster.unknown_flow");
    let src = GOOD.replace("state: drained", "state: sleepy");
    one_problem(&src, "services[0].backends[1].state");
}

#[test]
fn bad_addresses_are_named() {
    for (bad, why) in [
        ("10.0.0.300", "not an IPv4 or IPv6 address"),
        ("0.0.0.0", "unspecified"),
        ("127.0.0.1", "loopback"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("fe80::1", "link-local"),
        ("ff02::1", "multicast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("::ffff:10.0.0.1", "IPv4-mapped"),
        ("::10.0.0.1", "IPv4-compatible"),
    ] {
        let src = GOOD.replace(
            "vip: 10.0.0.100\n    port: 80",
            &format!("vip: \"{bad}\"\n    port: 80"),
        );
        let p = one_problem(&src, "services[0].vip");
        assert!(p.message.contains(why), "{bad}: {p}");
        assert_eq!(p.position.map(|p| p.line), Some(12), "{p}");
    }
    let src = GOOD.replace("dip: 10.0.0.12", "dip: 127.0.0.2");
    one_problem(&src, "services[0].backends[1].dip");
    // An IPv6 VIP is fine; an IPv6 backend address is not (the cluster
    // network is IPv4).
    let src = GOOD.replace(
        "vip: 10.0.0.100\n    port: 80",
        "vip: \"2001:db8::100\"\n    port: 80",
    );
    let c = crate::config::Config::parse(&src).expect("IPv6 VIP");
    assert_eq!(
        c.services[0].vip,
        "2001:db8::100".parse::<std::net::IpAddr>().unwrap()
    );
    let src = GOOD.replace("dip: 10.0.0.12", "dip: \"2001:db8::12\"");
    one_problem(&src, "services[0].backends[1].dip");
    let src = GOOD.replace("balancers: [10.0.0.11]", "balancers: [10.0.0.11, 0.0.0.0]");
    one_problem(&src, "cluster.balancers[1]");
}

#[test]
fn ports_and_weights_out_of_range() {
    let src = GOOD.replace("port: 80", "port: 0");
    one_problem(&src, "services[0].port");
    let src = GOOD.replace("port: 80", "port: 65536");
    one_problem(&src, "services[0].port");
    let src = GOOD.replace("weight: 100}", "weight: 0}");
    let p = one_problem(&src, "services[0].backends[0].weight");
    assert!(p.message.contains("outside 1-65535"));
    let src = GOOD.replace("weight: 100}", "weight: 70000}");
    one_problem(&src, "services[0].backends[0].weight");
    let src = GOOD.replace("gue_port: 19523", "gue_port: 0");
    one_problem(&src, "cluster.gue_port");
}

#[test]
fn duplicates_are_caught() {
    let src = GOOD.replace("name: dns", "name: web");
    let p = one_problem(&src, "services[1].name");
    assert!(p.message.contains("services[0]"));
    let src = GOOD.replace("port: 53\n    protocol: udp", "port: 80\n    protocol: tcp");
    let p = one_problem(&src, "services[1]");
    assert!(p.message.contains("already served by services[0]"), "{p}");
    let src = GOOD.replace("dip: 10.0.0.12", "dip: 10.0.0.11");
    one_problem(&src, "services[0].backends[1].dip");
    let src = GOOD.replace(
        "balancers: [10.0.0.11]",
        "balancers: [10.0.0.11, 10.0.0.11]",
    );
    one_problem(&src, "cluster.balancers[1]");
}

#[test]
fn table_sizes() {
    let src = GOOD.replace("table_size: 4096", "table_size: 1000");
    let p = one_problem(&src, "defaults.table_size");
    assert!(p.message.contains("power of two"));
    let src = GOOD.replace("table_size: 256", "table_size: 8");
    one_problem(&src, "services[1].table_size");
    let src = GOOD.replace("table_size: 4096", "table_size: 131072");
    one_problem(&src, "defaults.table_size");
    // 2 backends need 32 buckets.
    let src = GOOD.replace("table_size: 4096", "table_size: 16");
    let p = one_problem(&src, "defaults.table_size");
    assert!(
        p.message
            .contains("too small for 2 backends (service `web`)"),
        "{p}"
    );
    assert_eq!(p.position.map(|p| p.line), Some(9));
}

#[test]
fn version_and_names() {
    let src = GOOD.replace("version: 1", "version: 2");
    one_problem(&src, "version");
    let src = GOOD.replace("name: web", "name: \"we b\"");
    one_problem(&src, "services[0].name");
}

#[test]
fn all_semantic_problems_are_reported_together() {
    let src = GOOD
        .replace("port: 80", "port: 0")
        .replace("weight: 100}", "weight: 0}")
        .replace(
            "vip: 10.0.0.100\n    port: 53",
            "vip: 127.0.0.1\n    port: 53",
        );
    let p = problems(&src);
    let paths: Vec<_> = p.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"services[0].port"), "{paths:?}");
    assert!(
        paths.contains(&"services[0].backends[0].weight"),
        "{paths:?}"
    );
    assert!(paths.contains(&"services[1].vip"), "{paths:?}");
    let text = ConfigError { problems: p }.to_string();
    assert!(
        text.starts_with("invalid configuration (3 problems)"),
        "{text}"
    );
}

#[test]
fn udp_service_on_gue_port_is_rejected() {
    let src = GOOD.replace("port: 53", "port: 19523");
    one_problem(&src, "services[1].port");
}

#[test]
fn vip_conflicts() {
    let src = GOOD.replace("dip: 10.0.0.13", "dip: 10.0.0.100");
    one_problem(&src, "services[1].backends[0].dip");
    let src = GOOD.replace("balancers: [10.0.0.11]", "balancers: [10.0.0.100]");
    let p = problems(&src);
    assert!(p.iter().any(|p| p.path == "services[0].vip"), "{p:#?}");
}

#[test]
fn empty_service_list_is_valid() {
    let c = Config::parse("version: 1\ncluster: {balancers: [10.0.0.1]}\n").unwrap();
    assert!(c.services.is_empty());
    assert_eq!(c.cluster.gue_port, DEFAULT_GUE_PORT);
    assert_eq!(c.cluster.hash_seed, 0);
    assert_eq!(c.cluster.icmp_too_big_rate, 1000);
}

#[test]
fn icmp_too_big_rate_is_16_bits() {
    let rate = |v: &str| {
        Config::parse(&format!(
            "version: 1\ncluster: {{balancers: [10.0.0.1], icmp_too_big_rate: {v}}}\n"
        ))
        .map(|c| c.cluster.icmp_too_big_rate)
    };
    assert_eq!(rate("0").unwrap(), 0);
    assert_eq!(rate("65535").unwrap(), 65535);
    let e = rate("65536").unwrap_err();
    assert_eq!(e.problems[0].path, "cluster.icmp_too_big_rate", "{e:?}");
}

#[test]
fn never_panics_on_garbage() {
    // A cheap property check; the fuzz target in issue 6 goes further.
    let seeds = [
        GOOD,
        "",
        "---",
        "[]",
        "version: [",
        "\u{0}\u{1}",
        "services: 5",
    ];
    let mut state = 0x1234_5678u32;
    for seed in seeds {
        let bytes = seed.as_bytes();
        for _ in 0..200 {
            let mut b = bytes.to_vec();
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                if !b.is_empty() {
                    let i = state as usize % b.len();
                    b[i] = (state >> 8) as u8;
                }
            }
            let s = String::from_utf8_lossy(&b);
            let _ = Config::parse(&s);
        }
    }
}

fn with_check(block: &str) -> String {
    GOOD.replace(
        "    protocol: tcp\n",
        &format!("    protocol: tcp\n{block}"),
    )
}

#[test]
fn health_check_forms() {
    // Default: TCP connect to the service port; UDP services: none.
    let c = Config::parse(GOOD).unwrap();
    assert_eq!(
        c.services[0].health_check.checker,
        Checker::Tcp { port: 80 }
    );
    assert_eq!(c.services[1].health_check.checker, Checker::None);
    assert_eq!(c.services[0].health_check.interval_ms, DEFAULT_INTERVAL_MS);
    assert_eq!(c.rebalance, Rebalance::default());

    // The shape of docs/config.md.
    let src = with_check("    health_check:\n      http: {scheme: https, uri: /healthz, check_port: 9080, codes: [200, 204], host: web.example}\n      fall_count: 3\n      interval_ms: 500\n      timeout_ms: 200\n      rise_count: 4\n");
    let hc = &Config::parse(&src).unwrap().services[0].health_check;
    assert_eq!(
        hc.checker,
        Checker::Http {
            scheme: Scheme::Https,
            uri: "/healthz".into(),
            port: 9080,
            codes: vec![200, 204],
            host: Some("web.example".into()),
            // The host name is also the TLS server name (SNI).
            tls: TlsOptions {
                sni: Some("web.example".into()),
                ca_file: None
            }
        }
    );
    assert_eq!(
        (hc.interval_ms, hc.timeout_ms, hc.rise_count, hc.fall_count),
        (500, 200, 4, 3)
    );

    // Ni/kglb nesting, as written in kglb configs.
    let src = with_check("    health_check:\n      checker:\n        http: {scheme: http, uri: /status, check_port: 80, codes: [200]}\n      fall_count: 2\n      interval_ms: 1000\n      rise_count: 2\n");
    let hc = &Config::parse(&src).unwrap().services[0].health_check;
    assert!(matches!(&hc.checker, Checker::Http { uri, .. } if uri == "/status"));

    let src = with_check("    health_check: {tcp: {check_port: 8080}}\n");
    assert_eq!(
        Config::parse(&src).unwrap().services[0]
            .health_check
            .checker,
        Checker::Tcp { port: 8080 }
    );
    let src = with_check("    health_check: {none: {}}\n");
    assert_eq!(
        Config::parse(&src).unwrap().services[0]
            .health_check
            .checker,
        Checker::None
    );

    // Defaults apply under a service's own block.
    let src = GOOD.replace("  table_size: 4096\n", "  table_size: 4096\n  health_check: {interval_ms: 700, timeout_ms: 300}\n  rebalance: {min_interval_ms: 1000, max_step_percent: 10, min_bucket_age_ms: 5000}\n");
    let c = Config::parse(&src).unwrap();
    assert_eq!(c.services[0].health_check.interval_ms, 700);
    assert_eq!(c.rebalance.max_step_percent, 10);
}

#[test]
fn bad_health_checks_are_named() {
    let cases = [
        (
            "    health_check: {http: {scheme: gopher}}\n",
            "services[0].health_check.http.scheme",
            "unknown scheme",
        ),
        (
            "    health_check: {http: {uri: healthz}}\n",
            "services[0].health_check.http.uri",
            "request path",
        ),
        (
            "    health_check: {http: {codes: [99]}}\n",
            "services[0].health_check.http.codes[0]",
            "status code",
        ),
        (
            "    health_check: {http: {codes: []}}\n",
            "services[0].health_check.http.codes",
            "at least one",
        ),
        (
            "    health_check: {http: {check_port: 0}}\n",
            "services[0].health_check.http.check_port",
            "outside",
        ),
        (
            "    health_check: {tcp: {}, interval_ms: 50}\n",
            "services[0].health_check.interval_ms",
            "below the minimum",
        ),
        (
            "    health_check: {tcp: {}, interval_ms: 1000, timeout_ms: 2000}\n",
            "services[0].health_check.timeout_ms",
            "longer than the interval",
        ),
        (
            "    health_check: {tcp: {}, rise_count: 0}\n",
            "services[0].health_check.rise_count",
            "outside 1-100",
        ),
        (
            "    health_check: {tcp: {}, fall_count: 0}\n",
            "services[0].health_check.fall_count",
            "outside 1-100",
        ),
        (
            "    health_check: {tcp: {}, http: {}}\n",
            "services[0].health_check",
            "exactly one",
        ),
        (
            "    health_check: {interval_ms: 1000}\n",
            "services[0].health_check",
            "needs a checker",
        ),
        (
            "    health_check: {checker: {}}\n",
            "services[0].health_check.checker",
            "needs one of",
        ),
    ];
    for (block, path, msg) in cases {
        let p = one_problem(&with_check(block), path);
        assert!(p.message.contains(msg), "{block}: {p}");
    }
    let p = one_problem(
        &with_check("    health_check: {tcp: {}, grace: 1}\n"),
        "services[0].health_check.grace",
    );
    assert!(p.message.contains("unknown field"));
    let src = GOOD.replace(
        "  table_size: 4096\n",
        "  table_size: 4096\n  rebalance: {max_step_percent: 0}\n",
    );
    one_problem(&src, "defaults.rebalance.max_step_percent");
    let src = GOOD.replace(
        "  table_size: 4096\n",
        "  table_size: 4096\n  health_check: {interval_ms: 10}\n",
    );
    let p = problems(&src);
    assert!(
        p.iter()
            .all(|p| p.path == "defaults.health_check.interval_ms"),
        "{p:#?}"
    );
}

#[test]
fn panic_threshold_defaults_to_off_and_services_override_the_default() {
    let c = Config::parse(GOOD).unwrap();
    assert_eq!(c.services[0].panic_threshold_percent, 0, "off by default");
    assert_eq!(DEFAULT_PANIC_THRESHOLD_PERCENT, 0);
    let src = GOOD
        .replace(
            "  table_size: 4096\n",
            "  table_size: 4096\n  panic_threshold_percent: 50\n",
        )
        .replace(
            "    table_size: 256\n",
            "    table_size: 256\n    panic_threshold_percent: 0\n",
        );
    let c = Config::parse(&src).unwrap();
    assert_eq!(c.services[0].panic_threshold_percent, 50, "from defaults");
    assert_eq!(c.services[1].panic_threshold_percent, 0, "its own");
    let p = one_problem(
        &GOOD.replace(
            "    port: 80\n",
            "    port: 80\n    panic_threshold_percent: 101\n",
        ),
        "services[0].panic_threshold_percent",
    );
    assert!(p.message.contains("outside 0-100"), "{p}");
}

#[test]
fn tls_server_name_and_ca_file() {
    let check = |http: &str| with_check(&format!("    health_check:\n      http: {{{http}}}\n"));
    let tls_of = |src: &str| match &Config::parse(src).unwrap().services[0].health_check.checker {
        Checker::Http { tls, .. } => tls.clone(),
        other => panic!("{other:?}"),
    };
    // The host's name without its port; an address is never a server name.
    let t = tls_of(&check("scheme: https, host: \"web.example:8443\""));
    assert_eq!(t.sni.as_deref(), Some("web.example"));
    assert_eq!(tls_of(&check("scheme: https, host: 10.0.0.5")).sni, None);
    assert_eq!(tls_of(&check("scheme: https")).sni, None);
    // An explicit sni wins.
    let t = tls_of(&check("scheme: https, host: web.example, sni: api.example"));
    assert_eq!(t.sni.as_deref(), Some("api.example"));
    let p = one_problem(
        &check("scheme: https, sni: 10.0.0.5"),
        "services[0].health_check.http.sni",
    );
    assert!(p.message.contains("not a DNS name"), "{p}");
    let p = one_problem(
        &check("scheme: http, sni: web.example"),
        "services[0].health_check.http.sni",
    );
    assert!(p.message.contains("only HTTPS"), "{p}");
    let p = one_problem(
        &check("scheme: https, ca_file: ca.pem"),
        "services[0].health_check.http.ca_file",
    );
    assert!(p.message.contains("not an absolute path"), "{p}");
    let p = one_problem(
        &check("scheme: https, ca_file: /nonexistent/nilb-ca.pem"),
        "services[0].health_check.http.ca_file",
    );
    assert!(p.message.contains("cannot read"), "{p}");
}

#[test]
fn encap_check_defaults_and_udp() {
    let c = Config::parse(GOOD).unwrap();
    assert!(c.services[0].encap_check, "on by default for TCP services");
    assert!(!c.services[1].encap_check, "never for UDP services");
    let off = GOOD.replace("defaults:\n", "defaults:\n  encap_check: false\n");
    let c = Config::parse(&off).unwrap();
    assert!(!c.services[0].encap_check, "defaults.encap_check: false");
    let src = GOOD.replace("protocol: udp", "protocol: udp\n    encap_check: true");
    let p = one_problem(&src, "services[1].encap_check");
    assert!(p.message.contains("UDP service"), "{p}");
    let none = with_check("    health_check: {none: {}}\n");
    assert!(
        !Config::parse(&none).unwrap().services[0].encap_check,
        "no checker: no encapsulated check either"
    );
    let forced = with_check("    health_check: {none: {}}\n    encap_check: true\n");
    assert!(Config::parse(&forced).unwrap().services[0].encap_check);
}

#[test]
fn every_shape_problem_is_reported_not_only_the_first() {
    // Before: only `cluster.bogus` was reported.
    let src = GOOD
        .replace("  gue_port: 19523\n", "  gue_port: 19523\n  bogus: 1\n")
        .replace("table_size: 4096", "table_size: big")
        .replace("protocol: tcp", "protocol: tcpp\n    colour: red")
        .replace(
            "{dip: 10.0.0.11, hostname: edge-11, weight: 100}",
            "{dip: 10.0.0.11, hostname: edge-11, weight: x}",
        )
        .replace("{dip: 10.0.0.13}", "{dip: 10.0.0.13, weight: 0}");
    let p = problems(&src);
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    for want in [
        "cluster.bogus",
        "defaults.table_size",
        "services[0].protocol",
        "services[0].colour",
        "services[0].backends[0].weight",
        "services[1].backends[0].weight",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    assert_eq!(p.len(), 6, "no follow-on problems: {p:#?}");
    assert!(p.iter().all(|p| p.position.is_some()), "{p:#?}");
    // A syntax error stops the reading, and says so.
    let p = problems(&GOOD.replace("port: 80", "port: [80"));
    assert_eq!(p.len(), 1);
    assert!(
        p[0].message
            .contains("cannot read the file past this point"),
        "{p:#?}"
    );
    // A missing required field is reported at its mapping, once.
    let p = problems(&GOOD.replace("    vip: 10.0.0.100\n    port: 80\n", "    port: 80\n"));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(
        (p[0].path.as_str(), p[0].message.as_str()),
        ("services[0]", "missing field `vip`")
    );
}

/// A QUIC-LB service on UDP 443 with `quic` as its quic_lb block and
/// `backends` as its backend list (YAML flow mappings).
fn quic_service(quic: &str, backends: &[&str]) -> String {
    let mut y = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.11]}}\nservices:\n  - name: quic\n    vip: 10.0.0.100\n    port: 443\n    protocol: udp\n    quic_lb: {quic}\n    backends:\n"
    );
    for b in backends {
        y += &format!("      - {b}\n");
    }
    y
}

/// A key file in a fresh private directory; returns its absolute path.
fn key_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nilb-quic-test-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("quic.key");
    std::fs::write(&p, contents).unwrap();
    p
}

#[test]
fn quic_lb_keyed_configurations_read_their_key_file() {
    use crate::quic_lb::{Algorithm, CidGenerator};
    let hex = "8f95f09245765f80256934e50c66207f";
    let f = key_file("keyed", &format!("{hex}\n"));
    for (alg, sid, nonce, want) in [
        ("single-pass", 3, 13, Algorithm::SinglePass),
        ("four-pass", 2, 6, Algorithm::FourPass),
    ] {
        let src = quic_service(
            &format!(
                "{{codepoint: 2, server_id_len: {sid}, nonce_len: {nonce}, algorithm: {alg}, key_file: {}}}",
                f.display()
            ),
            &["{dip: 10.0.0.12}", "{dip: 10.0.0.13, server_id: 7}"],
        );
        let c = Config::parse(&src).unwrap();
        let q = c.services[0].quic_lb.as_ref().unwrap();
        assert_eq!(q.algorithm, want);
        assert_eq!(q.key.as_ref().unwrap().as_bytes()[0], 0x8f);
        assert_eq!(q.key_file.as_deref(), Some(f.as_path()));
        assert!(!q.self_encode_length);
        // The library configuration is the one servers share: a CID a
        // server issues decodes to its server ID, as the balancer will.
        let lib = q.config();
        assert_eq!(lib.algorithm(), want);
        assert_eq!(lib.cid_len(), q.cid_len());
        let b13 = q.server_id_of(Ipv4Addr::new(10, 0, 0, 13).into()).unwrap();
        assert_eq!(b13.as_bytes()[..sid - 1], vec![0; sid - 1][..]);
        assert_eq!(b13.as_bytes()[sid - 1], 7);
        let cid = CidGenerator::new(lib.clone(), b13)
            .unwrap()
            .generate()
            .unwrap();
        assert_eq!(lib.decode(cid.as_bytes()), Ok(b13));
    }
    // Key rotation: the same file with another key gives another config
    // (a reload sees the service changed).
    let src = quic_service(
        &format!(
            "{{codepoint: 2, server_id_len: 2, nonce_len: 6, algorithm: four-pass, key_file: {}}}",
            f.display()
        ),
        &["{dip: 10.0.0.12}"],
    );
    let before = Config::parse(&src).unwrap();
    std::fs::write(&f, "fdf726a9893ec05c0632d3956680baf0").unwrap();
    let after = Config::parse(&src).unwrap();
    assert_ne!(before, after);
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
}

#[test]
fn quic_lb_key_file_problems_never_show_the_key() {
    // 31 hex digits: not a key, and the message must not quote them.
    let secret = "8f95f09245765f80256934e50c66207";
    let f = key_file("short", secret);
    let src = quic_service(
        &format!(
            "{{codepoint: 0, server_id_len: 1, nonce_len: 4, algorithm: four-pass, key_file: {}}}",
            f.display()
        ),
        &["{dip: 10.0.0.12}"],
    );
    let p = one_problem(&src, "services[0].quic_lb.key_file");
    assert!(p.message.contains("32 hex digits"), "{p}");
    assert!(!p.to_string().contains(secret), "{p}");
    let shown = format!("{:?}", Config::parse(&src));
    assert!(!shown.contains(secret));
    std::fs::write(&f, format!("{secret}0")).unwrap();
    let c = Config::parse(&src).unwrap();
    assert!(
        !format!("{c:?}").contains(&format!("{secret}0")),
        "Debug redacts the key"
    );
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
}

#[test]
fn quic_lb_assigns_server_ids_from_addresses() {
    for (len, want) in [
        (1, ["0c", "0d"]),
        (2, ["000c", "000d"]),
        (4, ["0a00000c", "0a00000d"]),
        (6, ["00000a00000c", "00000a00000d"]),
    ] {
        let src = quic_service(
            &format!("{{codepoint: 6, server_id_len: {len}, nonce_len: 4, algorithm: plaintext}}"),
            &["{dip: 10.0.0.12}", "{dip: 10.0.0.13}"],
        );
        let c = Config::parse(&src).unwrap();
        let q = c.services[0].quic_lb.as_ref().unwrap();
        let got: Vec<String> = q
            .server_ids
            .iter()
            .map(|s| s.server_id.to_string())
            .collect();
        assert_eq!(got, want, "length {len}");
        assert!(q.server_ids.iter().all(|s| s.assigned));
    }
    // Reordering and adding backends changes no assigned ID.
    let src = quic_service(
        "{codepoint: 6, server_id_len: 2, nonce_len: 4, algorithm: plaintext}",
        &["{dip: 10.0.0.14}", "{dip: 10.0.0.13}", "{dip: 10.0.0.12}"],
    );
    let c = Config::parse(&src).unwrap();
    let q = c.services[0].quic_lb.as_ref().unwrap();
    assert_eq!(
        q.server_id_of(Ipv4Addr::new(10, 0, 0, 12).into())
            .unwrap()
            .to_string(),
        "000c"
    );
    // Every rule at once is reported, each at its field.
    let src = quic_service(
        "{codepoint: 7, server_id_len: 16, nonce_len: 2, algorithm: two-pass, key: abc}",
        &["{dip: 10.0.0.12}"],
    );
    let paths: Vec<String> = problems(&src).into_iter().map(|p| p.path).collect();
    assert_eq!(
        paths,
        [
            "services[0].quic_lb.codepoint",
            "services[0].quic_lb.server_id_len",
            "services[0].quic_lb.nonce_len",
            "services[0].quic_lb.algorithm",
            "services[0].quic_lb.key",
        ]
    );
}

/// A FIFO as the configuration (or as a list or key file, which are read
/// through the same function) is refused at once instead of blocking the
/// daemon until a writer opens it.
#[test]
fn a_fifo_is_refused_without_blocking() {
    let dir = std::env::temp_dir().join(format!("nilb-fifo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("nilb.yaml");
    let _ = std::fs::remove_file(&fifo);
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = super::open_regular_file(&fifo).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let err = Config::load(&fifo).unwrap_err().to_string();
    assert!(err.contains("not a regular file"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A regular key file whose contents are not 32 hex digits is named, and
/// its contents are not quoted.
#[test]
fn a_key_file_without_a_key_is_refused() {
    let dir = std::env::temp_dir().join(format!("nilb-key-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("quic.key");
    std::fs::write(&key, "secret-but-not-hex\n").unwrap();
    let yaml = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.11]}}\nservices:\n  - name: quic\n    vip: 10.0.0.100\n    port: 443\n    protocol: udp\n    quic_lb: {{codepoint: 1, server_id_len: 2, nonce_len: 6, algorithm: four-pass, key_file: {}}}\n    backends: [{{dip: 10.0.0.12}}]\n",
        key.display()
    );
    let err = Config::parse(&yaml).unwrap_err().to_string();
    assert!(err.contains("does not hold a QUIC-LB key"), "{err}");
    assert!(!err.contains("secret-but-not-hex"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A routing file that is the configuration file itself (through a
/// symbolic link too) is refused: nilb would overwrite its own
/// configuration with BIRD routes, or stay drained while the file exists.
#[test]
fn routing_files_must_not_be_the_config() {
    let dir = std::env::temp_dir().join(format!("nilb-routes-self-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("nilb.yaml");
    let link = dir.join("link.yaml");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&cfg, &link).unwrap();
    for (field, target) in [("routes_file", &cfg), ("drain_file", &link)] {
        let yaml = format!("{GOOD}routing:\n  {field}: {}\n", target.display());
        std::fs::write(&cfg, yaml).unwrap();
        let err = Config::load(&cfg).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert_eq!(err.problems[0].path, format!("routing.{field}"));
        assert!(
            err.problems[0]
                .message
                .contains("is the configuration file itself"),
            "{err}"
        );
    }
    // As a balancer sees it: `{node}` replaced by its address (GOOD's
    // balancer is 10.0.0.11), and a hard link to the file.
    let node_cfg = dir.join("10.0.0.11.yaml");
    let yaml = format!(
        "{GOOD}routing:\n  routes_file: {}\n",
        dir.join("{node}.yaml").display()
    );
    std::fs::write(&node_cfg, &yaml).unwrap();
    let err = Config::load(&node_cfg).unwrap_err();
    assert_eq!(err.problems[0].path, "routing.routes_file", "{err}");
    assert!(
        err.problems[0].message.contains("on balancer 10.0.0.11"),
        "{err}"
    );
    let hard = dir.join("hard.yaml");
    let _ = std::fs::remove_file(&hard);
    std::fs::hard_link(&cfg, &hard).unwrap();
    std::fs::write(
        &cfg,
        format!("{GOOD}routing:\n  drain_file: {}\n", hard.display()),
    )
    .unwrap();
    assert_eq!(
        Config::load(&cfg).unwrap_err().problems[0].path,
        "routing.drain_file"
    );
    // routes_file and drain_file that differ as written but not on a node.
    let yaml = format!(
        "{GOOD}routing:\n  routes_file: {}\n  drain_file: {}\n",
        dir.join("{node}.x").display(),
        dir.join("10.0.0.11.x").display()
    );
    std::fs::write(&cfg, yaml).unwrap();
    let err = Config::load(&cfg).unwrap_err();
    assert_eq!(err.problems[0].path, "routing.drain_file", "{err}");
    assert!(
        err.problems[0]
            .message
            .contains("is also routing.routes_file"),
        "{err}"
    );
    // Its own path is fine.
    let yaml = format!(
        "{GOOD}routing:\n  routes_file: {}\n",
        dir.join("vips.conf").display()
    );
    std::fs::write(&cfg, yaml).unwrap();
    Config::load(&cfg).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

const CLUSTER6: &str = r#"
version: 1
cluster:
  hash_seed: 0x5eed1234
  balancers: ["2001:db8:c::11"]
services:
  - name: web
    vip: 10.0.0.100
    port: 80
    protocol: tcp
    health_check:
      tcp: {}
    backends:
      - {dip: "2001:db8:c::12"}
      - {dip: "2001:db8:c::13"}
  - name: web6
    vip: "2001:db8:100::80"
    port: 80
    protocol: tcp
    backends:
      - {dip: "2001:db8:c::12"}
"#;

#[test]
fn an_ipv6_cluster_network_is_one_family() {
    let c = Config::parse(CLUSTER6).unwrap();
    assert!(c.cluster.is_ipv6());
    let want: std::collections::BTreeSet<std::net::IpAddr> =
        ["2001:db8:c::11", "2001:db8:c::12", "2001:db8:c::13"]
            .map(|a| a.parse().unwrap())
            .into();
    assert_eq!(c.cluster_addresses(), want);
    // The edge filters match IPv4 sources: nothing of the cluster for them.
    assert!(c.cluster_addresses_v4().is_empty());
    // The encapsulated check is off by default there (GUE over outer IPv4).
    assert!(c.services.iter().all(|s| !s.encap_check));
    let c4 = Config::parse(GOOD).unwrap();
    assert!(!c4.cluster.is_ipv6());
    assert_eq!(
        c4.cluster_addresses_v4().len(),
        c4.cluster_addresses().len()
    );
}

#[test]
fn server_ids_of_ipv6_dips_are_their_last_bytes() {
    let d: std::net::IpAddr = "2001:db8::1:abcd".parse().unwrap();
    assert_eq!(assigned_server_id(d, 2).as_bytes(), &[0xab, 0xcd]);
    assert_eq!(assigned_server_id(d, 4).as_bytes(), &[0, 1, 0xab, 0xcd]);
    let all = assigned_server_id(d, 15);
    assert_eq!(
        all.as_bytes(),
        &"2001:db8::1:abcd"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()[1..]
    );
    // IPv4 unchanged: zero-extended in front beyond 4 bytes.
    let d4 = std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 12));
    assert_eq!(assigned_server_id(d4, 1).as_bytes(), &[12]);
    assert_eq!(assigned_server_id(d4, 6).as_bytes(), &[0, 0, 10, 0, 0, 12]);
}

#[test]
fn etcd_endpoints_may_be_bracketed_ipv6() {
    use super::validate::etcd_endpoint;
    assert_eq!(
        etcd_endpoint("http://[2001:db8::5]:2379/").unwrap(),
        "http://[2001:db8::5]:2379"
    );
    assert!(etcd_endpoint("http://[etcd.example]:2379")
        .unwrap_err()
        .contains("bracket"));
    assert!(etcd_endpoint("http://2001:db8::5:2379").is_err());
    assert_eq!(
        etcd_endpoint("http://10.0.0.5:2379").unwrap(),
        "http://10.0.0.5:2379"
    );
}
