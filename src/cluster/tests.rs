//! The published encoding, the keys and the election's rules (no etcd, no
//! root).

use super::*;
use crate::table::Target;

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 12));
const C: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 13));
const LEADER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

fn key() -> ServiceKey {
    ServiceKey {
        vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
        port: 443,
        protocol: crate::types::Protocol::Udp,
    }
}

/// A table with previous owners and move times: three backends, then C
/// taken out and B re-weighted (every bucket that moved remembers where it
/// was).
fn table_with_history() -> Table {
    table_with_history_of(A, B, C)
}

/// [`table_with_history`] of backends `a`, `b`, `c`.
fn table_with_history_of(a: IpAddr, b: IpAddr, c: IpAddr) -> Table {
    let t = Table::build(
        256,
        &[
            Target { dip: a, weight: 1 },
            Target { dip: b, weight: 1 },
            Target { dip: c, weight: 2 },
        ],
    );
    let rules_keep = |_: IpAddr| true;
    let rules_out = |d: IpAddr| d == c;
    let rules_down = |d: IpAddr| d == c;
    let rules = crate::table::Rules {
        keep: &rules_keep,
        forced_out: &rules_out,
        down: &rules_down,
    };
    let (t, m) = t.rebalance(
        &[Target { dip: a, weight: 1 }, Target { dip: b, weight: 3 }],
        &rules,
        5_000_000,
        crate::table::StepLimits::NONE,
    );
    assert!(m.moved > 0);
    t
}

#[test]
fn a_published_table_decodes_to_the_same_buckets_and_move_times() {
    let t = table_with_history();
    // The leader's control clock is 1e9 ms behind the wall clock; the
    // follower's 0.5e9 ms: the move times travel as Unix time.
    let p = PublishedTable::encode(&key(), &t, LEADER, 7, &|m| m + 1_000_000_000);
    assert_eq!(p.service_key(), Some(key()));
    let json = serde_json::to_string(&p).unwrap();
    let back: PublishedTable = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    let f = back.decode().unwrap();
    assert_eq!(f.buckets, t.buckets());
    assert_eq!(f.previous, t.previous_owners());
    let follower = f.to_table(1, &|u| u - 500_000_000);
    assert_eq!(follower.buckets(), t.buckets(), "bucket for bucket");
    for i in 0..t.size() as usize {
        match (t.moved_at(i), follower.moved_at(i)) {
            (None, None) => {}
            (Some(a), Some(b)) => {
                let a_wall = a + 1_000_000_000;
                let b_wall = b + 500_000_000;
                assert!(
                    a_wall.abs_diff(b_wall) <= 1000,
                    "bucket {i}: {a_wall} vs {b_wall}"
                );
            }
            other => panic!("bucket {i}: {other:?}"),
        }
    }
    // Encoding the decoded table again gives the same publication (what
    // a new leader compares before publishing: no needless revision).
    let again = PublishedTable::encode(&key(), &follower, C, 9, &|m| m + 500_000_000);
    assert!(again.same_table(&p));
    assert_ne!(again, p, "leader and time differ");
}

#[test]
fn a_damaged_publication_is_refused() {
    let t = table_with_history();
    let good = PublishedTable::encode(&key(), &t, LEADER, 7, &|m| m);
    let mut p = good.clone();
    p.format = 2;
    assert!(p.decode().unwrap_err().contains("format 2"));
    let mut p = good.clone();
    p.size = 255;
    assert!(p.decode().unwrap_err().contains("power of two"));
    let mut p = good.clone();
    p.size = 512;
    assert!(p.decode().unwrap_err().contains("for 512 buckets"));
    let mut p = good.clone();
    p.hops.pop();
    assert!(p.decode().unwrap_err().contains("names no hop"));
    let mut p = good.clone();
    p.buckets = "***".into();
    assert!(p.decode().unwrap_err().contains("buckets"));
    assert!(!good.same_table(&p));
}

#[test]
fn keys_and_leader_values() {
    assert_eq!(leader_key("/nilb/s1"), "/nilb/s1/leader");
    assert_eq!(
        table_key("/nilb/s1", &key()),
        "/nilb/s1/tables/10.0.0.100:443/udp"
    );
    assert_eq!(parse_service_key("10.0.0.100:443/udp"), Some(key()));
    assert_eq!(parse_service_key("10.0.0.100:443/sctp"), None);
    assert_eq!(parse_service_key("10.0.0.100/tcp"), None);
    let v = leader_value(A, 7587899276270269191);
    assert_eq!(v, "10.0.0.11 7587899276270269191");
    assert_eq!(leader_node(&v), Some(A));
    assert_eq!(leader_node("garbage"), None);
    assert_eq!(etcd::prefix_end("/nilb/tables/"), b"/nilb/tables0".to_vec());
    assert_eq!(etcd::prefix_end("a\u{7f}"), b"a\x80".to_vec());
}

#[test]
fn a_leader_stops_acting_before_its_lease_can_run_out() {
    let mut e = Election::new(3000);
    assert!(!e.is_leader(0), "no lease");
    e.granted(42, 1000);
    assert!(!e.is_leader(1000), "a lease but not the key");
    e.holds_key = true;
    assert!(e.is_leader(1000));
    assert!(!e.keepalive_due(1999));
    assert!(e.keepalive_due(2000), "a third of the TTL");
    // etcd unreachable: no keepalive answers. Leadership ends at two
    // thirds of the TTL, before etcd can let another balancer win.
    assert!(e.is_leader(2999));
    assert!(!e.is_leader(3000));
    // Back: a keepalive that finds the lease alive restores it.
    e.kept_alive(2000, 3500);
    assert!(e.is_leader(3500));
    // A keepalive that finds it gone (expired while unreachable).
    e.kept_alive(0, 4000);
    assert_eq!(e.lease, None);
    assert!(!e.is_leader(4000) && !e.holds_key);
}

#[test]
fn the_status_prints_role_revision_and_errors() {
    let s = ClusterStatus {
        endpoints: vec!["http://10.0.0.5:2379".into()],
        prefix: "/nilb".into(),
        connected: false,
        role: Role::Follower,
        leader: Some(A),
        revision: 17,
        pending: 0,
        lag_ms: Some(42),
        last_contact: None,
        error: Some("connection refused".into()),
        updates: 3,
    };
    let mut out = Vec::new();
    s.print(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("NOT CONNECTED, role follower, leader 10.0.0.11"),
        "{text}"
    );
    assert!(
        text.contains("revision 17, 0 pending, lag 42 ms, 3 installs"),
        "{text}"
    );
    assert!(text.contains("connection refused"), "{text}");
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["role"], "follower");
}

#[test]
fn the_gateways_answers_are_read_as_etcd_3_4_writes_them() {
    // Answers of etcd 3.4's JSON gateway, as received: int64 as strings,
    // keys and values base64, absent fields for zero and false.
    let range: serde_json::Value = serde_json::from_str(
        r#"{"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"3","raft_term":"2"},"kvs":[{"key":"L25pbGIvdC90YWJsZXMvYQ==","create_revision":"3","mod_revision":"3","version":"1","value":"bWU="}],"count":"1"}"#,
    )
    .unwrap();
    let kvs = etcd::kvs_of(&range);
    assert_eq!(kvs.len(), 1);
    assert_eq!(kvs[0].key, b"/nilb/t/tables/a");
    assert_eq!(kvs[0].value, b"me");
    assert_eq!((kvs[0].mod_revision, kvs[0].lease), (3, 0));
    assert_eq!(etcd::int(&range["header"]["revision"]), 3);
    // min_mod_revision filtered everything out: no `kvs`, a count anyway.
    let empty: serde_json::Value =
        serde_json::from_str(r#"{"header":{"revision":"3"},"count":"1"}"#).unwrap();
    assert!(etcd::kvs_of(&empty).is_empty());
    // A keepalive of a revoked lease: no TTL (0: etcd does not know it).
    let gone: serde_json::Value = serde_json::from_str(
        r#"{"result":{"header":{"revision":"4"},"ID":"7587899276270269191"}}"#,
    )
    .unwrap();
    assert_eq!(etcd::int(&gone["result"]["TTL"]), 0);
    assert_eq!(etcd::int(&gone["result"]["ID"]), 7587899276270269191);
}

#[test]
fn service_keys_of_both_families_round_trip_through_their_table_keys() {
    for k in [
        ServiceKey {
            vip: "10.0.0.100".parse().unwrap(),
            port: 80,
            protocol: crate::types::Protocol::Tcp,
        },
        ServiceKey {
            vip: "2001:db8::80".parse().unwrap(),
            port: 443,
            protocol: crate::types::Protocol::Udp,
        },
    ] {
        assert_eq!(super::parse_service_key(&k.to_string()), Some(k), "{k}");
    }
    assert_eq!(super::parse_service_key("2001:db8::80:443/udp"), None);
}

/// An IPv6 cluster network's table: hops and the leader's address travel
/// as IPv6 literals and come back the same; an IPv4 table's hops are
/// still written as before (dotted quads).
#[test]
fn ipv6_hops_round_trip_through_a_publication() {
    let [a6, b6, c6, leader6]: [IpAddr; 4] = [
        "2001:db8:c::11",
        "2001:db8:c::12",
        "fd00:c::13",
        "2001:db8:c::1",
    ]
    .map(|a| a.parse().unwrap());
    let t = table_with_history_of(a6, b6, c6);
    let p = PublishedTable::encode(&key(), &t, leader6, 7, &|m| m + 1_000_000_000);
    assert_eq!(p.leader, leader6);
    let json = serde_json::to_string(&p).unwrap();
    assert!(json.contains("\"2001:db8:c::11\""), "{json}");
    let back: PublishedTable = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    let f = back.decode().unwrap();
    assert_eq!(f.buckets, t.buckets());
    assert!(t.buckets().iter().any(|b| b.hops().any(|h| h == c6)));
    let follower = f.to_table(1, &|u| u - 500_000_000);
    assert_eq!(follower.buckets(), t.buckets());
    assert_eq!(leader_node(&leader_value(leader6, 42)), Some(leader6));

    let p4 = PublishedTable::encode(&key(), &table_with_history(), LEADER, 7, &|m| m);
    let json4 = serde_json::to_string(&p4).unwrap();
    assert!(
        json4.contains("\"hops\":[\"10.0.0.11\",\"10.0.0.12\",\"10.0.0.13\"]"),
        "{json4}"
    );
    assert!(json4.contains("\"leader\":\"10.0.0.1\""), "{json4}");
}

/// A table of the other cluster family (IPv4 and IPv6 clusters sharing a
/// prefix during a migration) is never installed: an IPv4 node would send
/// GUE to the first 4 bytes of an IPv6 DIP.
#[test]
fn a_table_of_the_other_family_is_refused() {
    let t = table_with_history();
    let p = PublishedTable::encode(&key(), &t, LEADER, 7, &|m| m);
    assert!(p.hops.iter().all(|h| h.is_ipv4()));
    assert_eq!(p.family_problem(false), None);
    let why = p.family_problem(true).expect("IPv4 hops on an IPv6 node");
    assert!(
        why.contains("an IPv4 address") && why.contains("cluster.etcd.prefix"),
        "{why}"
    );
    let mut q = p.clone();
    q.hops[0] = "fd00::21".parse().unwrap();
    assert!(q.family_problem(false).unwrap().contains("fd00::21"));
    let mut r = p.clone();
    r.leader = "fd00::11".parse().unwrap();
    assert!(r.family_problem(false).unwrap().contains("fd00::11"));
}
