use super::*;

fn cfg(weights: &[(u8, u32, &str)], table_size: u32) -> Config {
    let mut y = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.11], hash_seed: 7}}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    table_size: {table_size}\n    backends:\n"
    );
    for (last, w, state) in weights {
        y += &format!("      - {{dip: 10.0.0.{last}, weight: {w}, state: {state}}}\n");
    }
    Config::parse(&y).unwrap()
}

fn key() -> ServiceKey {
    ServiceKey {
        vip: Ipv4Addr::new(10, 0, 0, 100),
        port: 80,
        protocol: crate::config::Protocol::Tcp,
    }
}

#[test]
fn unchanged_config_changes_nothing() {
    let c = cfg(&[(11, 1, "active"), (12, 1, "active")], 64);
    let mut cp = ControlPlane::new(c.clone());
    assert!(cp.update(c).is_empty());
}

#[test]
fn weight_change_installs_with_second_hops() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64));
    let before = cp.service(&key()).unwrap().table.clone();
    let plan = cp.update(cfg(&[(11, 3, "active"), (12, 1, "active")], 64));
    assert_eq!(plan.install[&key()].moved, 16);
    let after = &cp.service(&key()).unwrap().table;
    for (o, n) in before.buckets().iter().zip(after.buckets()) {
        if o.first != n.first {
            assert_eq!(n.second, o.first);
        }
    }
}

#[test]
fn drain_and_offline() {
    let ip12 = Ipv4Addr::new(10, 0, 0, 12);
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 1, "active")], 64));
    cp.update(cfg(&[(11, 1, "active"), (12, 1, "drained")], 64));
    let t = &cp.service(&key()).unwrap().table;
    assert_eq!(t.shares().get(&ip12), None, "drained: no first hop");
    assert_eq!(t.second_shares()[&ip12], 32, "drained: still second hop");
    cp.update(cfg(&[(11, 1, "active"), (12, 1, "offline")], 64));
    let t = &cp.service(&key()).unwrap().table;
    assert_eq!(t.second_shares().get(&ip12), None, "offline: no hop at all");
}

#[test]
fn growing_the_table_keeps_flows() {
    let mut cp = ControlPlane::new(cfg(&[(11, 1, "active"), (12, 3, "active")], 64));
    let small = cp.service(&key()).unwrap().table.clone();
    cp.update(cfg(&[(11, 1, "active"), (12, 3, "active")], 256));
    let big = &cp.service(&key()).unwrap().table;
    assert_eq!(big.size(), 256);
    for (i, b) in big.buckets().iter().enumerate() {
        assert_eq!(b.first, small.buckets()[i % 64].first, "bucket {i}");
    }
}

#[test]
fn indexes_are_stable_and_reused() {
    let two = Config::parse(
        "version: 1\ncluster: {balancers: [10.0.0.11]}\nservices:\n  - {name: a, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 16}\n  - {name: b, vip: 10.0.0.100, port: 443, protocol: tcp, table_size: 16}\n",
    )
    .unwrap();
    let mut cp = ControlPlane::new(two.clone());
    let b_key = two.services[1].key();
    let b_index = cp.service(&b_key).unwrap().index;
    let only_b = Config {
        services: vec![two.services[1].clone()],
        ..two.clone()
    };
    let plan = cp.update(only_b);
    assert_eq!(plan.remove, vec![two.services[0].key()]);
    assert!(plan.install.is_empty());
    assert_eq!(cp.service(&b_key).unwrap().index, b_index);
    cp.update(two.clone());
    assert_eq!(cp.service(&two.services[0].key()).unwrap().index, 0);
}
