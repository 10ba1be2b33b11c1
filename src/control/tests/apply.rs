//! [`ControlPlane::apply`] against the recording fake: the order of the
//! writes, and what a failure half way leaves behind.
//!
//! The fake checks after every call that each installed table has its VIP
//! in `vips` and its hops in `cluster_nodes`; every test asserts that no
//! call left an unsafe state, besides its own ordering rule.

use super::fake::{Call, FakeDataplane};
use super::*;
use crate::dataplane::DataplaneOps;

const NODE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const WEB: ServiceKey = ServiceKey {
    vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
    port: 80,
    protocol: crate::types::Protocol::Tcp,
};
const DNS: ServiceKey = ServiceKey {
    vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 101)),
    port: 53,
    protocol: crate::types::Protocol::Udp,
};
/// Sorts before [`WEB`], so it comes first in a batch.
const API: ServiceKey = ServiceKey {
    vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 90)),
    port: 443,
    protocol: crate::types::Protocol::Tcp,
};

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
}

/// A config with balancer 10.0.0.1, no pacing (`min_bucket_age_ms` as
/// given), no health checks, and `services` (YAML flow mappings, one per
/// line).
fn config(min_bucket_age_ms: u64, services: &[&str]) -> Config {
    let mut y = format!(
        "version: 1\ncluster: {{balancers: [10.0.0.1], hash_seed: 7}}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: {min_bucket_age_ms}}}\nservices:\n"
    );
    for s in services {
        y += &format!("  - {s}\n");
    }
    Config::parse(&y).unwrap()
}

const WEB_11_12: &str = "{name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {none: {}}, backends: [{dip: 10.0.0.11}, {dip: 10.0.0.12}]}";
const WEB_11_12_14: &str = "{name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {none: {}}, backends: [{dip: 10.0.0.11}, {dip: 10.0.0.12, weight: 300}, {dip: 10.0.0.14}]}";
const WEB_11: &str = "{name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {none: {}}, backends: [{dip: 10.0.0.11}]}";
const DNS_13: &str = "{name: dns, vip: 10.0.0.101, port: 53, protocol: udp, table_size: 16, health_check: {none: {}}, backends: [{dip: 10.0.0.13}]}";
const API_15: &str = "{name: api, vip: 10.0.0.90, port: 443, protocol: tcp, table_size: 16, health_check: {none: {}}, backends: [{dip: 10.0.0.15}]}";

/// The maps hold exactly `cp`'s state: its tables (with their indexes and
/// slots), its VIPs and its cluster addresses.
fn assert_mirrors(dp: &FakeDataplane, cp: &ControlPlane) {
    let keys: Vec<ServiceKey> = dp.services.keys().copied().collect();
    let want: Vec<ServiceKey> = cp.services().keys().copied().collect();
    assert_eq!(keys, want, "installed services");
    for (key, st) in cp.services() {
        let t = &dp.services[key];
        assert_eq!(t.index, st.index, "index of {key}");
        assert_eq!(t.buckets, st.table.buckets(), "buckets of {key}");
        for (dip, slot) in &t.slots {
            assert_eq!(*slot, st.backends[dip].slot, "slot of {dip} in {key}");
        }
    }
    assert_eq!(dp.vips, cp.config().vips(), "vips");
    assert_eq!(dp.nodes, cp.cluster_addresses(), "cluster_nodes");
}

/// web and dns installed; then a reload that removes dns (its VIP and
/// backend go), adds api at a new VIP, adds a backend to web and changes
/// a weight. Returns the state after the reload's `update`, the fake with
/// the first config applied (log cleared), the plan, and the state before.
fn reload() -> (ControlPlane, FakeDataplane, Plan, ControlPlane) {
    let mut cp = ControlPlane::new(config(0, &[WEB_11_12, DNS_13]), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    assert_mirrors(&dp, &cp);
    assert_eq!(dp.violations, []);
    dp.calls.clear();
    let before = cp.clone();
    let plan = cp.update(config(0, &[API_15, WEB_11_12_14]), 1000);
    assert_eq!(plan.remove, [DNS]);
    assert_eq!(plan.install.keys().copied().collect::<Vec<_>>(), [API, WEB]);
    (cp, dp, plan, before)
}

#[test]
fn apply_widens_zeroes_installs_removes_then_narrows() {
    let (cp, mut dp, plan, _) = reload();
    cp.apply(&mut dp, NODE, &plan).unwrap();
    // dns's index (1) and slot (3) are retiring: the dns table counts into
    // them until it is removed, so api takes index 2 and slot 4 (.15), and
    // web's new .14 takes 5 (slot 0 is never given out: it ends a bucket's
    // chain in the data plane). Records: .12's weight changed, .13's is
    // cleared, .15 and .14 are new; .11's is unchanged.
    assert_eq!(plan.fresh_service_indexes, [2]);
    assert_eq!(plan.fresh_slots, [4, 5]);
    let all_vips = BTreeSet::from([API.vip, WEB.vip, DNS.vip]);
    let all_nodes = BTreeSet::from([NODE, ip(11), ip(12), ip(13), ip(14), ip(15)]);
    assert_eq!(
        dp.calls,
        [
            Call::SetVips(all_vips),
            Call::SetClusterNodes(all_nodes),
            Call::ZeroBackendStats(4),
            Call::ZeroBackendStats(5),
            Call::ZeroServiceStats(2),
            Call::WriteControlState(4, vec![2, 4, 5]),
            Call::InstallTables(vec![API, WEB]),
            Call::RemoveService(DNS),
            Call::SetVips(BTreeSet::from([API.vip, WEB.vip])),
            Call::SetClusterNodes(BTreeSet::from([NODE, ip(11), ip(12), ip(14), ip(15)])),
        ]
    );
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &cp);
}

#[test]
fn a_drained_out_backend_leaves_the_cluster_set_after_the_table_that_drops_it() {
    let mut cp = ControlPlane::new(config(5000, &[WEB_11_12]), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    // .12 leaves the file: drained at once, kept as second hop.
    let plan = cp.update(config(5000, &[WEB_11]), 10_000);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert!(dp.nodes.contains(&ip(12)), "still a second hop");
    assert!(cp.tick(11_000).removed_backends.is_empty());
    dp.calls.clear();
    // Owned nothing for min_bucket_age_ms: dropped from second hops and
    // from the cluster set, in that order.
    let plan = cp.tick(16_001);
    assert_eq!(plan.removed_backends, [(WEB, ip(12))]);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    let install = dp
        .position(|c| *c == Call::InstallTables(vec![WEB]))
        .unwrap();
    let narrow = dp
        .position(|c| matches!(c, Call::SetClusterNodes(s) if !s.contains(&ip(12))))
        .unwrap();
    assert!(install < narrow, "{:?}", dp.calls);
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &cp);
}

#[test]
fn fresh_slots_and_indexes_are_zeroed_before_the_tables_that_use_them() {
    let (cp, mut dp, plan, _) = reload();
    cp.apply(&mut dp, NODE, &plan).unwrap();
    let install = dp
        .position(|c| matches!(c, Call::InstallTables(_)))
        .unwrap();
    let mut checked = 0;
    for key in plan.install.keys() {
        let t = &dp.services[key];
        if plan.fresh_service_indexes.contains(&t.index) {
            let zero = dp.position(|c| *c == Call::ZeroServiceStats(t.index));
            assert!(zero.is_some_and(|z| z < install), "index of {key}");
            checked += 1;
        }
        for (dip, slot) in &t.slots {
            if plan.fresh_slots.contains(slot) {
                let zero = dp.position(|c| *c == Call::ZeroBackendStats(*slot));
                assert!(zero.is_some_and(|z| z < install), "slot of {dip}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 3, "api's index, .15's and .14's slots");
    assert_eq!(dp.violations, []);
}

#[test]
fn one_batch_of_installs_per_plan() {
    let cp = ControlPlane::new(config(0, &[API_15, WEB_11_12, DNS_13]), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    let batches: Vec<&Call> = dp
        .calls
        .iter()
        .filter(|c| matches!(c, Call::InstallTables(_)))
        .collect();
    assert_eq!(batches, [&Call::InstallTables(vec![API, WEB, DNS])]);

    let (cp, mut dp, plan, _) = reload();
    cp.apply(&mut dp, NODE, &plan).unwrap();
    let batches = dp
        .calls
        .iter()
        .filter(|c| matches!(c, Call::InstallTables(_)))
        .count();
    assert_eq!(batches, 1);
}

/// The batch fails after its first table (api): the error comes back,
/// nothing after the install runs (no removal, no narrowing), so the sets
/// stay the union of old and new and every table in the maps (api new, web
/// old, dns old) can still forward.
#[test]
fn install_failing_half_way_keeps_the_sets_wide_and_removes_nothing() {
    let (cp, mut dp, plan, before) = reload();
    let web_before = dp.services[&WEB].clone();
    dp.fail_install_after = Some(1);
    let err = cp.apply(&mut dp, NODE, &plan).unwrap_err();
    assert!(err.to_string().contains("injected"), "{err:#}");
    assert!(matches!(dp.calls.last(), Some(Call::InstallTables(_))));
    assert_eq!(dp.position(|c| matches!(c, Call::RemoveService(_))), None);
    assert_eq!(dp.vips, BTreeSet::from([API.vip, WEB.vip, DNS.vip]));
    assert_eq!(
        dp.nodes,
        cp.cluster_addresses()
            .union(&before.cluster_addresses())
            .copied()
            .collect()
    );
    assert_eq!(
        dp.services[&API].buckets,
        cp.service(&API).unwrap().table.buckets()
    );
    assert_eq!(dp.services[&WEB], web_before, "web: the old table");
    assert!(dp.services.contains_key(&DNS));
    assert_eq!(dp.violations, []);
}

/// A removal that fails leaves the sets wide too.
#[test]
fn removal_failing_keeps_the_sets_wide() {
    let (cp, mut dp, plan, _) = reload();
    dp.fail_remove = Some(DNS);
    cp.apply(&mut dp, NODE, &plan).unwrap_err();
    assert_eq!(dp.calls.last(), Some(&Call::RemoveService(DNS)));
    assert!(dp.vips.contains(&DNS.vip));
    assert!(dp.nodes.contains(&ip(13)));
    assert_eq!(dp.violations, []);
}

/// What the daemon does when a plan fails (not a reload): apply the full
/// plan of the same state. The sets stay wide until it succeeds.
#[test]
fn a_failed_plan_is_repaired_by_the_full_plan() {
    let mut cp = ControlPlane::new(config(5000, &[WEB_11_12]), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    let plan = cp.update(config(5000, &[WEB_11]), 10_000);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert!(cp.tick(11_000).removed_backends.is_empty());
    let plan = cp.tick(16_001);
    assert_eq!(plan.removed_backends, [(WEB, ip(12))]);
    dp.fail_install_after = Some(0);
    cp.apply(&mut dp, NODE, &plan).unwrap_err();
    assert!(dp.nodes.contains(&ip(12)), "the old table still uses .12");
    assert_eq!(dp.violations, []);
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &cp);
}

/// The fake's check catches writes in an unsafe order, so the tests above
/// can fail: narrowing before the table that still uses an address is
/// replaced, or before the service that uses a VIP is removed.
#[test]
fn the_fake_sees_unsafe_orders() {
    let (_, mut dp, _, _) = reload();
    dp.set_cluster_nodes(&BTreeSet::from([NODE, ip(11)]))
        .unwrap();
    dp.set_vips(&BTreeSet::from([WEB.vip])).unwrap();
    let seen: Vec<&str> = dp.violations.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(
        seen,
        [
            "10.0.0.12, a hop of 10.0.0.100:80/tcp, is not in cluster_nodes",
            "10.0.0.13, a hop of 10.0.0.101:53/udp, is not in cluster_nodes",
            "10.0.0.12, a hop of 10.0.0.100:80/tcp, is not in cluster_nodes",
            "10.0.0.101:53/udp is installed but its VIP is not in vips",
            "10.0.0.13, a hop of 10.0.0.101:53/udp, is not in cluster_nodes",
        ]
    );
}

/// What the daemon does when a reload fails while applying: re-apply the
/// running state's full plan. The failed batch left its first table (api,
/// new in the reload) in the maps; the restore removes it before it
/// narrows the sets, so the maps hold the running state again and no table
/// is left whose VIP is out of `vips`.
#[test]
fn restoring_after_a_failed_reload_removes_what_the_reload_installed() {
    let (next, mut dp, plan, running) = reload();
    dp.fail_install_after = Some(1);
    next.apply(&mut dp, NODE, &plan).unwrap_err();
    assert!(dp.services.contains_key(&API));
    running.apply(&mut dp, NODE, &running.full_plan()).unwrap();
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &running);

    // Failing at the removal instead: api and web are new, dns still there.
    let (next, mut dp, plan, running) = reload();
    dp.fail_remove = Some(DNS);
    next.apply(&mut dp, NODE, &plan).unwrap_err();
    running.apply(&mut dp, NODE, &running.full_plan()).unwrap();
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &running);
}

/// Maps that hold a service the state does not know (a restarted daemon
/// adopting the pins of one that ran an older config): the full plan at
/// start removes it, after installing and before narrowing.
#[test]
fn a_full_plan_removes_services_the_state_does_not_know() {
    let earlier = ControlPlane::new(config(0, &[WEB_11_12, DNS_13]), 0);
    let mut dp = FakeDataplane::default();
    earlier.apply(&mut dp, NODE, &earlier.full_plan()).unwrap();
    dp.calls.clear();
    let cp = ControlPlane::new(config(0, &[WEB_11_12]), 0);
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    let remove = dp.position(|c| *c == Call::RemoveService(DNS)).unwrap();
    let install = dp
        .position(|c| matches!(c, Call::InstallTables(_)))
        .unwrap();
    let narrow = dp
        .position(|c| matches!(c, Call::SetVips(v) if !v.contains(&DNS.vip)))
        .unwrap();
    assert!(install < remove && remove < narrow, "{:?}", dp.calls);
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &cp);
}

/// Review (2): a plan that removes a service and adds another gives the new
/// one neither the removed one's stats index nor its counter slots: the
/// removed table counts into them until step 6 removes it, after the new
/// tables were installed and their counters zeroed.
#[test]
fn a_removed_service_s_counters_are_not_reused_by_the_same_plan() {
    let (cp, mut dp, plan, before) = reload();
    let dns = before.service(&DNS).unwrap();
    let dns_slots: Vec<u32> = dns.backends.values().map(|b| b.slot).collect();
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert!(!plan.fresh_service_indexes.contains(&dns.index));
    assert!(plan.fresh_slots.iter().all(|s| !dns_slots.contains(s)));
    assert_eq!(dp.violations, [], "zeroed while counted into");
    // The next reload may use them: dns's table is gone by then.
    let mut cp = cp;
    let plan = cp.update(config(0, &[API_15, WEB_11_12_14, DNS_13]), 2000);
    assert_eq!(cp.service(&DNS).unwrap().index, dns.index);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert_eq!(dp.violations, []);
}

/// Review (3): a reload whose apply fails zeroes no counter of a service
/// the running configuration still has (here dns, which the reload
/// removes, and which the restore puts back with its counters).
#[test]
fn a_failed_reload_zeroes_no_counter_of_the_running_state() {
    let (next, mut dp, plan, running) = reload();
    dp.fail_install_after = Some(1);
    next.apply(&mut dp, NODE, &plan).unwrap_err();
    running.apply(&mut dp, NODE, &running.full_plan()).unwrap();
    let slots: BTreeSet<u32> = running
        .services()
        .values()
        .flat_map(|s| s.backends.values().map(|b| b.slot))
        .collect();
    let indexes: BTreeSet<u32> = running.services().values().map(|s| s.index).collect();
    let hit: Vec<&u32> = dp
        .zeroed_slots
        .iter()
        .filter(|s| slots.contains(s))
        .collect();
    let hit_idx: Vec<&u32> = dp
        .zeroed_indexes
        .iter()
        .filter(|i| indexes.contains(i))
        .collect();
    assert_eq!((hit, hit_idx), (vec![], vec![]), "running counters zeroed");
    assert_mirrors(&dp, &running);
}

/// Review (4): merging plans keeps every field, dynamic-weight rounds too.
#[test]
fn merging_plans_keeps_reweights_and_records() {
    let mut a = Plan::default();
    let b = Plan {
        reweighted: vec![(
            WEB,
            vec![Reweight {
                dip: ip(11),
                load: Some(0.5),
                from: 100.0,
                to: 90.0,
            }],
        )],
        records: BTreeSet::from([3]),
        mode_changed: vec![(WEB, Mode::FailOpen)],
        ..Plan::default()
    };
    a.merge(b.clone());
    assert_eq!(a, b);
}

/// Review (5): `nilb_config` is written by plans that change the node's
/// settings (and full plans), not by every plan.
#[test]
fn only_plans_that_change_settings_write_nilb_config() {
    let mut cp = ControlPlane::new(config(5000, &[WEB_11_12]), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    assert!(dp.position(|c| matches!(c, Call::Settings(_))).is_some());
    dp.calls.clear();
    let plan = cp.update(config(5000, &[WEB_11]), 10_000);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    let plan = cp.tick(16_001);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert_eq!(dp.position(|c| matches!(c, Call::Settings(_))), None);
    let seeded = Config::parse(
        &(String::from("version: 1\ncluster: {balancers: [10.0.0.1], hash_seed: 8}\ndefaults:\n  rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 5000}\nservices:\n  - ")
            + WEB_11
            + "\n"),
    )
    .unwrap();
    let plan = cp.update(seeded, 20_000);
    assert!(plan.settings_changed);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    let s = dp.settings.unwrap();
    assert_eq!(s.hash_seed, 8);
}

/// A reload that adds a service with an allow list: the filters that name
/// it are installed (at its index) before its table, so no packet reaches
/// the new service unfiltered; an unchanged filter set is not installed
/// again.
#[test]
fn filters_of_a_new_service_are_in_place_before_its_table() {
    use crate::filters::{FilterSet, Lists};
    let compile = |c: &Config, prev: &ControlPlane| {
        std::sync::Arc::new(FilterSet::compile(c, &Lists::new(), &prev.filters().ids()).unwrap())
    };
    let one = config(0, &[WEB_11_12]);
    let mut cp = ControlPlane::new(one.clone(), 0);
    let f = compile(&one, &cp);
    cp.set_filters(f);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    dp.calls.clear();
    let api = API_15.replace(
        "backends:",
        "filters: {allow: {name: office, prefixes: [192.0.2.0/24]}}, backends:",
    );
    let two = config(0, &[api.as_str(), WEB_11_12]);
    let mut plan = cp.update(two.clone(), 1000);
    let f = compile(&two, &cp);
    plan.filters = cp.set_filters(f);
    assert!(plan.filters);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    let filters = dp
        .position(|c| matches!(c, Call::InstallFilters(_, s) if s.contains_key(&API)))
        .expect("filters installed");
    let tables = dp
        .position(|c| matches!(c, Call::InstallTables(k) if k.contains(&API)))
        .expect("api installed");
    assert!(filters < tables, "{:?}", dp.calls);
    assert_eq!(
        dp.filters.as_ref().unwrap().1[&API],
        cp.service(&API).unwrap().index
    );
    assert_eq!(dp.violations, []);
    // The same set again: nothing to install.
    dp.calls.clear();
    let plan = cp.update(two.clone(), 2000);
    let f = compile(&two, &cp);
    assert!(!cp.set_filters(f));
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert_eq!(dp.position(|c| matches!(c, Call::InstallFilters(..))), None);
}

/// 50 services; a reload that changes one weight of one of them installs
/// only that service, with the list of the buckets that moved (the fake
/// writes only those, and then holds exactly the control plane's tables);
/// the same file again installs nothing; a new `previous_owners` rewrites
/// only the tables whose chains it cuts (here none: s7's chains list one
/// previous owner).
#[test]
fn a_reload_installs_what_changed_and_only_the_buckets_that_moved() {
    let service = |i: u16, w12: u32| {
        format!(
            "{{name: s{i}, vip: 10.0.0.100, port: {}, protocol: tcp, table_size: 256, health_check: {{none: {{}}}}, backends: [{{dip: 10.0.0.11}}, {{dip: 10.0.0.12, weight: {w12}}}, {{dip: 10.0.0.13}}]}}",
            1000 + i
        )
    };
    let file = |changed: Option<u16>| {
        let s: Vec<String> = (0..50)
            .map(|i| service(i, if Some(i) == changed { 300 } else { 100 }))
            .collect();
        let refs: Vec<&str> = s.iter().map(String::as_str).collect();
        config(0, &refs)
    };
    let mut cp = ControlPlane::new(file(None), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    dp.writes.clear();
    let key = ServiceKey {
        vip: ip(100),
        port: 1007,
        protocol: crate::types::Protocol::Tcp,
    };
    let before = cp.service(&key).unwrap().table.clone();
    let plan = cp.update(file(Some(7)), 1000);
    assert_eq!(plan.install.keys().copied().collect::<Vec<_>>(), [key]);
    let moved = plan.install[&key].moved;
    assert!(moved > 0);
    let changed = &plan.changed[&key];
    assert_eq!(
        changed,
        &cp.service(&key).unwrap().table.changed_from(&before)
    );
    assert_eq!(changed.len(), moved);
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert_eq!(dp.writes, [(key, Some(moved))]);
    assert_mirrors(&dp, &cp);
    assert_eq!(dp.violations, []);
    // Nothing changed: nothing installed.
    let plan = cp.update(file(Some(7)), 2000);
    assert!(plan.install.is_empty() && plan.is_empty(), "{plan:?}");
    // previous_owners 3 -> 1: every table remembers 1, none changes.
    let mut c = file(Some(7));
    c.rebalance.previous_owners = 1;
    let plan = cp.update(c, 3000);
    assert!(plan.install.is_empty(), "{plan:?}");
    assert!(cp
        .services()
        .values()
        .all(|s| s.table.previous_owners() == 1));
    cp.apply(&mut dp, NODE, &plan).unwrap();
    assert_mirrors(&dp, &cp);
    assert_eq!(dp.violations, []);
}

/// An IPv6 cluster network (balancer and DIPs IPv6; one IPv4 and one IPv6
/// VIP): the same writes in the same order as an IPv4 one, the maps hold
/// IPv6 hops and cluster addresses, a failed DIP's buckets move, the
/// records carry IPv6 DIPs and a restarted daemon adopts them.
#[test]
fn an_ipv6_cluster_network_is_written_like_an_ipv4_one() {
    let six = |a: &str| -> IpAddr { a.parse().unwrap() };
    let config6 = |backends: &str| {
        Config::parse(&format!(
            "version: 1\ncluster: {{balancers: [\"2001:db8:c::1\"], hash_seed: 7}}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n  - {{name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {{tcp: {{}}, rise_count: 1, fall_count: 1}}, backends: [{backends}]}}\n  - {{name: web6, vip: \"2001:db8:100::80\", port: 80, protocol: tcp, table_size: 64, health_check: {{none: {{}}}}, backends: [{{dip: \"2001:db8:c::12\"}}]}}\n"
        ))
        .unwrap()
    };
    let node = six("2001:db8:c::1");
    let (b11, b12, b13) = (
        six("2001:db8:c::11"),
        six("2001:db8:c::12"),
        six("fd00:c::13"),
    );
    let mut cp = ControlPlane::new(
        config6(r#"{dip: "2001:db8:c::11"}, {dip: "2001:db8:c::12"}, {dip: "fd00:c::13"}"#),
        0,
    );
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, node, &cp.full_plan()).unwrap();
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &cp);
    assert_eq!(dp.settings.map(|s| s.node), Some(node));
    assert_eq!(dp.nodes, BTreeSet::from([node, b11, b12, b13]));
    assert!(dp.backends.values().all(IpAddr::is_ipv6));
    let web = cp.config().services[0].key();
    assert_eq!(
        dp.services[&web]
            .slots
            .keys()
            .copied()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([b11, b12, b13])
    );
    let dips: BTreeSet<IpAddr> = dp.control.values().map(|r| r.dip).collect();
    assert_eq!(dips, BTreeSet::from([b11, b12, b13]));

    // The IPv4 twin of this configuration makes the same calls: the family
    // changes the addresses, not what is written when.
    let v4 = |a: &IpAddr| match a {
        IpAddr::V6(a) => ip(a.octets()[15]),
        IpAddr::V4(a) => panic!("{a}"),
    };
    let config4 = Config::parse(
        "version: 1\ncluster: {balancers: [10.0.0.1], hash_seed: 7}\ndefaults:\n  rebalance: {min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}\nservices:\n  - {name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {tcp: {}, rise_count: 1, fall_count: 1}, backends: [{dip: 10.0.0.17}, {dip: 10.0.0.18}, {dip: 10.0.0.19}]}\n  - {name: web6, vip: \"2001:db8:100::80\", port: 80, protocol: tcp, table_size: 64, health_check: {none: {}}, backends: [{dip: 10.0.0.18}]}\n",
    )
    .unwrap();
    let cp4 = ControlPlane::new(config4, 0);
    let mut dp4 = FakeDataplane::default();
    cp4.apply(&mut dp4, ip(1), &cp4.full_plan()).unwrap();
    let shape = |calls: &[Call]| -> Vec<String> {
        calls
            .iter()
            .map(|c| match c {
                Call::SetClusterNodes(s) => format!("nodes {}", s.len()),
                Call::Settings(_) => "settings".into(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(shape(&dp.calls), shape(&dp4.calls));
    for (key, t) in &dp.services {
        let t4 = &dp4.services[key];
        let mapped: Vec<Vec<IpAddr>> = t
            .buckets
            .iter()
            .map(|b| b.hops().map(|h| v4(&h)).collect())
            .collect();
        let want: Vec<Vec<IpAddr>> = t4.buckets.iter().map(|b| b.hops().collect()).collect();
        assert_eq!(mapped, want, "{key}: the same buckets as 10.0.0.17-19");
    }

    // fd00:c::13 fails its check: its buckets move to the others and it
    // stays their previous owner.
    dp.calls.clear();
    let owned13 = owned(&cp, b13);
    assert!(owned13 > 0);
    let plan = cp
        .observe(&web, b13, Err("refused".into()), 1_000)
        .expect("a plan");
    cp.apply(&mut dp, node, &plan).unwrap();
    assert_eq!(dp.violations, []);
    assert_mirrors(&dp, &cp);
    assert_eq!(owned(&cp, b13), 0);
    let seconds = dp.services[&web]
        .buckets
        .iter()
        .filter(|b| b.second() == Some(b13))
        .count();
    assert_eq!(seconds as u32, owned13);

    // A restarted daemon adopts the tables and the records: nothing moves.
    let records = cp.records();
    assert!(records.values().any(|r| r.dip == b13));
    let (adopted, _) = ControlPlane::adopt(cp.config().clone(), pinned(&cp), records, 2_000);
    for (key, st) in cp.services() {
        assert_eq!(adopted.services()[key].table.buckets(), st.table.buckets());
    }
    assert_eq!(owned(&adopted, b13), 0, "the verdict carried over");
}
