//! 10.2: [`ControlPlane::reload`] as one transaction against the recording
//! fake: a reload whose XDP attach, map writes or health-check start fail
//! is reported as failed with its stage and reason, and leaves the running
//! state (tables, role, checks) as it was; the state file shows the role
//! that actually runs.

use std::path::Path;

use super::fake::{Call, FakeDataplane};
use super::*;
use crate::status::{ReloadStatus, Role, Status};

const NODE: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const OTHER: &str = "10.0.0.2";
const WEB: &str = "{name: web, vip: 10.0.0.100, port: 80, protocol: tcp, table_size: 64, health_check: {none: {}}, backends: [{dip: 10.0.0.11}, {dip: 10.0.0.12}]}";
const API: &str = "{name: api, vip: 10.0.0.90, port: 443, protocol: tcp, table_size: 16, health_check: {none: {}}, backends: [{dip: 10.0.0.15}]}";

/// A config whose balancers are `balancers`, with these services.
fn config(balancers: &[&str], services: &[&str]) -> Config {
    let mut y = format!(
        "version: 1\ncluster: {{balancers: [{}], hash_seed: 7}}\ndefaults:\n  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}\nservices:\n",
        balancers.join(", ")
    );
    for s in services {
        y += &format!("  - {s}\n");
    }
    Config::parse(&y).unwrap()
}

/// A running state (this node a backend only) applied to a fake.
fn running() -> (ControlPlane, FakeDataplane) {
    let cp = ControlPlane::new(config(&[OTHER], &[WEB]), 0);
    let mut dp = FakeDataplane::default();
    cp.apply(&mut dp, NODE, &cp.full_plan()).unwrap();
    dp.calls.clear();
    (cp, dp)
}

/// The maps hold `cp`'s tables and sets.
fn mirrors(dp: &FakeDataplane, cp: &ControlPlane) {
    let keys: Vec<ServiceKey> = dp.services.keys().copied().collect();
    assert_eq!(keys, cp.services().keys().copied().collect::<Vec<_>>());
    for (key, st) in cp.services() {
        assert_eq!(dp.services[key].buckets, st.table.buckets(), "{key}");
    }
    assert_eq!(dp.vips, cp.config().vips());
    assert_eq!(dp.nodes, cp.cluster_addresses());
    assert_eq!(dp.control, cp.records(), "control_state");
}

/// Each call of the health-check hook: the number of services it saw.
type Checks = Vec<usize>;

#[test]
fn a_reload_that_makes_the_node_a_balancer_attaches_xdp_and_starts_checks() {
    let (cp, mut dp) = running();
    let mut seen: Checks = Vec::new();
    let (next, plan) = cp
        .reload(
            config(&["10.0.0.1", OTHER], &[WEB, API]),
            1000,
            &mut dp,
            NODE,
            &mut |c| {
                seen.push(c.services().len());
                Ok(())
            },
        )
        .unwrap();
    assert!(plan.install.len() == 1 && dp.xdp);
    assert_eq!(seen, [2]);
    mirrors(&dp, &next);
    // And back: no longer a balancer, XDP detached.
    let (back, _) = next
        .reload(config(&[OTHER], &[WEB]), 2000, &mut dp, NODE, &mut |_| {
            Ok(())
        })
        .unwrap();
    assert!(!dp.xdp);
    mirrors(&dp, &back);
}

/// The field fault: the reload makes this node a balancer (and adds a
/// service), attaching XDP fails. Today's answer: a failed reload, XDP not
/// attached, the running tables (without the new service) back in place,
/// the checks untouched; the state file says FAILED with the reason and
/// shows the node as what it runs (backend only).
#[test]
fn a_reload_whose_xdp_attach_fails_is_a_failed_reload() {
    let (cp, mut dp) = running();
    dp.fail_xdp_attach = true;
    let mut seen: Checks = Vec::new();
    let err = cp
        .reload(
            config(&["10.0.0.1", OTHER], &[WEB, API]),
            1000,
            &mut dp,
            NODE,
            &mut |c| {
                seen.push(c.services().len());
                Ok(())
            },
        )
        .unwrap_err();
    println!("reload error: {err}");
    assert_eq!(err.stage, ReloadStage::AttachXdp);
    assert!(err.reason.contains("Operation not supported"), "{err}");
    assert!(err.restore_errors.is_empty());
    assert!(!dp.xdp);
    assert!(seen.is_empty(), "checks never started for the failed state");
    mirrors(&dp, &cp);
    assert!(dp.position(|c| *c == Call::SetXdp(true)).is_some());

    let status = Status::of(
        &cp,
        NODE,
        Role {
            running: dp.xdp,
            configured: cp.is_balancer(NODE),
        },
        Path::new("/etc/nilb/nilb.yaml"),
        Some(ReloadStatus {
            at: "2025-01-01T00:00:00Z".into(),
            ok: false,
            error: Some(err.to_string()),
            succeeded: 0,
            failed: 1,
        }),
    );
    let mut out = Vec::new();
    status.print(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    println!("{text}");
    assert!(text.contains("(backend only)"), "{text}");
    assert!(
        text.contains("last reload: 2025-01-01T00:00:00Z FAILED"),
        "{text}"
    );
    assert!(text.contains("attaching XDP"), "{text}");
    assert!(
        !text.contains("api"),
        "the failed reload's service is not shown"
    );
}

/// The role shown is the one running: configured as a balancer but XDP not
/// attached (someone detached it, or an attach at start was lost) says so.
#[test]
fn status_shows_the_role_that_runs() {
    let (cp, _) = running();
    let text = |running: bool, configured: bool| {
        let s = Status::of(
            &cp,
            NODE,
            Role {
                running,
                configured,
            },
            Path::new("c"),
            None,
        );
        let mut out = Vec::new();
        s.print(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    assert!(text(true, true).contains("(balancer)"));
    assert!(text(false, false).contains("(backend only)"));
    assert!(text(false, true).contains("XDP is NOT attached"));
    assert!(text(true, false).contains("XDP is still attached"));
}

/// Starting the health checks fails (the HTTP client cannot be built):
/// the XDP attached by this reload is detached again, the running tables
/// are restored, and the running state's checks are restarted.
#[test]
fn a_reload_whose_health_checks_cannot_start_is_rolled_back() {
    let (cp, mut dp) = running();
    let mut seen: Checks = Vec::new();
    let err = cp
        .reload(
            config(&["10.0.0.1", OTHER], &[WEB, API]),
            1000,
            &mut dp,
            NODE,
            &mut |c| {
                seen.push(c.services().len());
                if c.services().len() == 2 {
                    anyhow::bail!("building the HTTP client: no TLS roots")
                }
                Ok(())
            },
        )
        .unwrap_err();
    assert_eq!(err.stage, ReloadStage::HealthChecks);
    assert_eq!(seen, [2, 1], "new state's checks, then the running state's");
    assert!(!dp.xdp, "attached by the reload, detached again");
    assert_eq!(
        dp.calls
            .iter()
            .filter(|c| matches!(c, Call::SetXdp(_)))
            .collect::<Vec<_>>(),
        [&Call::SetXdp(true), &Call::SetXdp(false)]
    );
    mirrors(&dp, &cp);
    assert_eq!(dp.violations, []);
}

/// A map write fails: nothing else is tried, the running state is back.
#[test]
fn a_reload_that_cannot_apply_keeps_everything() {
    let (cp, mut dp) = running();
    dp.fail_install_after = Some(0);
    let mut seen: Checks = Vec::new();
    let err = cp
        .reload(
            config(&["10.0.0.1", OTHER], &[WEB, API]),
            1000,
            &mut dp,
            NODE,
            &mut |c| {
                seen.push(c.services().len());
                Ok(())
            },
        )
        .unwrap_err();
    assert_eq!(err.stage, ReloadStage::Apply);
    assert!(
        err.to_string()
            .starts_with("applying the tables failed: injected"),
        "{err}"
    );
    assert!(seen.is_empty() && !dp.xdp);
    assert_eq!(dp.position(|c| matches!(c, Call::SetXdp(_))), None);
    mirrors(&dp, &cp);
    assert_eq!(dp.violations, []);
}

/// A reload that fails because the bucket pool has no room says so by its
/// kind (the daemon retries it once quarantined regions are free), not by
/// its text; another failure does not.
#[test]
fn a_reload_without_room_in_the_pool_says_so_by_kind() {
    let (cp, mut dp) = running();
    dp.fail_install_no_room = true;
    let e = cp
        .reload(
            config(&[OTHER], &[WEB, API]),
            1000,
            &mut dp,
            NODE,
            &mut |_| Ok(()),
        )
        .expect_err("no room");
    assert!(e.no_room, "{e}");
    assert!(e.reason.contains("no room for the table of"), "{e}");
    mirrors(&dp, &cp);
    dp.fail_install_after = Some(0);
    let e = cp
        .reload(
            config(&[OTHER], &[WEB, API]),
            2000,
            &mut dp,
            NODE,
            &mut |_| Ok(()),
        )
        .expect_err("failed install");
    assert!(!e.no_room, "{e}");
}
