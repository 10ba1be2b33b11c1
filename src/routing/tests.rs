use super::*;

const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP2: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 101);

fn node() -> NodeView {
    NodeView {
        dataplane_ready: true,
        drained: false,
        stopping: false,
        withdraw_on_fail_open: false,
    }
}

fn svc(vip: Ipv4Addr, healthy: bool, fail_open: bool) -> ServiceView {
    ServiceView {
        vip,
        healthy,
        fail_open,
    }
}

fn set(v: &[Ipv4Addr]) -> BTreeSet<Ipv4Addr> {
    v.iter().copied().collect()
}

#[test]
fn announces_once_ready_and_healthy() {
    let d = decide(node(), &[svc(VIP, true, false)], &set(&[]));
    assert_eq!(announced(&d), set(&[VIP]));
    let not_ready = NodeView {
        dataplane_ready: false,
        ..node()
    };
    let d = decide(not_ready, &[svc(VIP, true, false)], &set(&[]));
    assert!(announced(&d).is_empty());
    assert_eq!(d[0].reason, "XDP balancer not attached");
    // Health not known yet: nothing announced.
    let d = decide(node(), &[svc(VIP, false, false)], &set(&[]));
    assert!(announced(&d).is_empty());
}

#[test]
fn drain_and_stop_withdraw_everything() {
    let svcs = [svc(VIP, true, false), svc(VIP2, true, false)];
    let prev = set(&[VIP, VIP2]);
    for n in [
        NodeView {
            drained: true,
            ..node()
        },
        NodeView {
            stopping: true,
            ..node()
        },
    ] {
        let d = decide(n, &svcs, &prev);
        assert_eq!(d.len(), 2);
        assert!(announced(&d).is_empty(), "{d:?}");
    }
}

#[test]
fn fail_open_keeps_an_announced_vip_unless_told_to_withdraw() {
    let svcs = [svc(VIP, false, true)];
    let d = decide(node(), &svcs, &set(&[VIP]));
    assert_eq!(announced(&d), set(&[VIP]));
    assert_eq!(d[0].reason, "no backend healthy: failing open");
    // Fail-open never brings a VIP up.
    let d = decide(node(), &svcs, &set(&[]));
    assert!(announced(&d).is_empty());
    let withdraw = NodeView {
        withdraw_on_fail_open: true,
        ..node()
    };
    let d = decide(withdraw, &svcs, &set(&[VIP]));
    assert!(announced(&d).is_empty());
    assert_eq!(d[0].reason, "no backend healthy (withdraw_on_fail_open)");
}

#[test]
fn a_vip_stays_while_any_of_its_services_is_healthy() {
    let withdraw = NodeView {
        withdraw_on_fail_open: true,
        ..node()
    };
    // Port 80 dead, port 443 healthy on the same VIP; another VIP dead.
    let svcs = [
        svc(VIP, false, true),
        svc(VIP, true, false),
        svc(VIP2, false, true),
    ];
    let d = decide(withdraw, &svcs, &set(&[VIP, VIP2]));
    assert_eq!(announced(&d), set(&[VIP]));
}

#[test]
fn routes_file_round_trips() {
    let vips = set(&[VIP2, VIP]);
    let text = render_routes(&vips);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("route "))
            .collect::<Vec<_>>(),
        [
            "route 10.77.0.100/32 blackhole;",
            "route 10.77.0.101/32 blackhole;"
        ]
    );
    assert_eq!(parse_routes(&text), vips);
    assert!(parse_routes(&render_routes(&set(&[]))).is_empty());
}

#[test]
fn node_path_substitutes_the_address() {
    let p = node_path(
        std::path::Path::new("/run/bird-{node}.ctl"),
        Ipv4Addr::new(10, 77, 0, 11).into(),
    );
    assert_eq!(p, std::path::PathBuf::from("/run/bird-10.77.0.11.ctl"));
}

#[test]
fn parses_birdc_show_protocols() {
    // As BIRD 2.0.12 prints it.
    let text = "BIRD 2.0.12 ready.\n\
Name       Proto      Table      State  Since         Info\n\
device1    Device     ---        up     19:33:28.975  \n\
nilb_vips  Static     master4    up     19:33:28.975  \n\
r1         BGP        ---        down   19:33:28.982  Error: Invalid next hop\n\
router     BGP        ---        up     2026-11-30 19:33:29  Established   \n";
    let s = parse_protocols(text);
    assert_eq!(s.len(), 4);
    assert_eq!(s[1].name, "nilb_vips");
    assert_eq!(s[1].state, "up");
    assert_eq!(s[2].info, "Error: Invalid next hop");
    assert_eq!(s[2].state, "down");
    assert_eq!(s[3].since, "2026-11-30 19:33:29");
    assert_eq!(s[3].info, "Established");
    assert!(parse_protocols("BIRD 2.0.12 ready.\n").is_empty());
}

#[test]
fn configure_reply() {
    assert!(
        configure_ok("BIRD 2.0.12 ready.\nReading configuration from b.conf\nReconfigured\n")
            .is_ok()
    );
    let e = configure_ok(
        "BIRD 2.0.12 ready.\nReading configuration from b.conf\n/tmp/r.conf:1:7 syntax error, unexpected NUM\n",
    )
    .unwrap_err();
    assert!(e.contains("syntax error"), "{e}");
    assert_eq!(configure_ok("").unwrap_err(), "no reply from BIRD");
}

#[test]
fn status_lines_name_each_vip_and_bgp_session() {
    let st = RoutingStatus {
        daemon: "bird".into(),
        bird_socket: "/run/bird/bird.ctl".into(),
        routes_file: "/run/nilb/bird-routes.conf".into(),
        drained: true,
        withdraw_on_fail_open: false,
        vips: decide(
            NodeView {
                drained: true,
                ..node()
            },
            &[svc(VIP, true, false)],
            &set(&[VIP]),
        ),
        bird: bird::BirdStatus {
            last_apply: None,
            applies: (0, 0),
            protocols: parse_protocols(
                "Name Proto Table State Since Info\nuplink BGP --- up 19:33:28.975 Established\nnilb_vips Static master4 up 19:33:28.975\n",
            ),
            poll_error: Some("Unable to connect".into()),
        },
    };
    let mut out = Vec::new();
    st.print(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("balancer DRAINED"), "{text}");
    assert!(
        text.contains(
            "VIP 10.77.0.100     WITHDRAWN  (balancer drained (routing.drained or the drain file))"
        ),
        "{text}"
    );
    assert!(text.contains("BGP uplink"), "{text}");
    assert!(text.contains("Established"), "{text}");
    assert!(
        !text.contains("nilb_vips"),
        "only BGP sessions are listed: {text}"
    );
    assert!(text.contains("NOT REACHABLE: Unable to connect"), "{text}");
}
