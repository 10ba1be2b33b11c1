//! Announcing the VIPs over BGP through BIRD (docs/design.md "Several
//! balancers", docs/config.md "Routing").
//!
//! nilb does not speak BGP. It decides which VIPs this balancer should
//! announce ([`decide`], pure), renders them as BIRD static routes
//! ([`render_routes`]) into the file BIRD's config includes inside nilb's
//! static protocol, and asks BIRD to re-read its config (`birdc configure`)
//! from a worker thread ([`bird::Announcer`]). BIRD's BGP sessions carry the
//! routes to the router; the router's ECMP spreads the VIPs' traffic over
//! every balancer that announces them.
//!
//! A VIP is announced when the XDP balancer is attached, the balancer is not
//! drained or stopping, and one of the VIP's services has a healthy backend
//! (or fails open and `withdraw_on_fail_open` is off, once it was announced).
//! A SIGKILLed nilb leaves the file and BIRD as they were: the routes stay
//! and the data plane keeps forwarding (fail-static).

pub mod bird;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// What the decision needs to know of one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceView {
    /// The service's VIP.
    pub vip: Ipv4Addr,
    /// At least one backend not offline passes its health check.
    pub healthy: bool,
    /// The service fails open (no backend healthy: every backend not
    /// offline is used).
    pub fail_open: bool,
}

/// What the decision needs to know of the balancer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeView {
    /// Our XDP balancer is attached (the data plane is ready).
    pub dataplane_ready: bool,
    /// `routing.drained`: every VIP withdrawn.
    pub drained: bool,
    /// The daemon is stopping (SIGTERM without `--keep-dataplane`).
    pub stopping: bool,
    /// `routing.withdraw_on_fail_open`.
    pub withdraw_on_fail_open: bool,
}

/// The decision for one VIP, with its reason (shown by `nilb status`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VipDecision {
    /// The VIP.
    pub vip: Ipv4Addr,
    /// Announce (true) or withdraw.
    pub announce: bool,
    /// Why, in words.
    pub reason: String,
}

/// Decide, VIP by VIP, what to announce. `previous` is the set announced so
/// far: a service that fails open keeps its VIP announced (unless
/// `withdraw_on_fail_open`) but does not bring it up.
pub fn decide(
    node: NodeView,
    services: &[ServiceView],
    previous: &BTreeSet<Ipv4Addr>,
) -> Vec<VipDecision> {
    let mut by_vip: BTreeMap<Ipv4Addr, Vec<&ServiceView>> = BTreeMap::new();
    for s in services {
        by_vip.entry(s.vip).or_default().push(s);
    }
    by_vip
        .into_iter()
        .map(|(vip, svcs)| {
            let (announce, reason) = if node.stopping {
                (false, "stopping")
            } else if node.drained {
                (
                    false,
                    "balancer drained (routing.drained or the drain file)",
                )
            } else if !node.dataplane_ready {
                (false, "XDP balancer not attached")
            } else if svcs.iter().any(|s| s.healthy) {
                (true, "a backend is healthy")
            } else if svcs.iter().any(|s| s.fail_open) {
                if node.withdraw_on_fail_open {
                    (false, "no backend healthy (withdraw_on_fail_open)")
                } else if previous.contains(&vip) {
                    (true, "no backend healthy: failing open")
                } else {
                    (false, "no backend healthy yet")
                }
            } else {
                (false, "no backend healthy yet")
            };
            VipDecision {
                vip,
                announce,
                reason: reason.to_string(),
            }
        })
        .collect()
}

/// The VIPs a decision announces.
pub fn announced(decisions: &[VipDecision]) -> BTreeSet<Ipv4Addr> {
    decisions
        .iter()
        .filter(|d| d.announce)
        .map(|d| d.vip)
        .collect()
}

/// The routes file: one BIRD static route per announced VIP. BIRD's config
/// includes it inside nilb's `protocol static` (deploy/bird-balancer.conf).
/// The route is a blackhole in BIRD's own table only: the balancer's kernel
/// never gets it (no kernel export of that protocol), XDP takes the packets
/// before routing.
pub fn render_routes(vips: &BTreeSet<Ipv4Addr>) -> String {
    let mut out = String::from(
        "# Written by nilb: the VIPs this balancer announces (docs/config.md \"Routing\").\n",
    );
    for v in vips {
        out.push_str(&format!("route {v}/32 blackhole;\n"));
    }
    out
}

/// The VIPs a routes file announces (what [`render_routes`] wrote; other
/// lines are ignored).
pub fn parse_routes(text: &str) -> BTreeSet<Ipv4Addr> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("route ")?;
            let (addr, _) = rest.split_once("/32")?;
            addr.trim().parse().ok()
        })
        .collect()
}

/// `{node}` in a configured path replaced by this node's address (several
/// nodes sharing one file system, as in the test harness).
pub fn node_path(path: &std::path::Path, node: std::net::IpAddr) -> std::path::PathBuf {
    std::path::PathBuf::from(path.to_string_lossy().replace("{node}", &node.to_string()))
}

/// One routing protocol of BIRD, as `birdc show protocols` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The protocol's name in BIRD's config.
    pub name: String,
    /// BGP, Static, Kernel, ...
    pub proto: String,
    /// up, down, start, ...
    pub state: String,
    /// Since when (BIRD's format).
    pub since: String,
    /// Detail: for BGP the session state (`Established`, `Active`, ...).
    pub info: String,
}

/// Parse `birdc show protocols`: the header line, then one line per
/// protocol (`name proto table state since info`); BIRD's reply codes
/// (`0001 ...`) and the banner are skipped.
pub fn parse_protocols(text: &str) -> Vec<Session> {
    let mut out = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        let t = line.trim_end();
        if t.starts_with("Name ") && t.contains("Proto") {
            in_table = true;
            continue;
        }
        if !in_table || t.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        // `since` is one field (time) or two (date and time).
        let (since, info_at) = if f.len() > 5 && f[5].contains(':') && !f[4].contains(':') {
            (format!("{} {}", f[4], f[5]), 6)
        } else {
            (f[4].to_string(), 5)
        };
        out.push(Session {
            name: f[0].to_string(),
            proto: f[1].to_string(),
            state: f[3].to_string(),
            since,
            info: f.get(info_at..).map(|r| r.join(" ")).unwrap_or_default(),
        });
    }
    out
}

/// Whether `birdc configure`'s reply says the new config is in force.
pub fn configure_ok(reply: &str) -> Result<(), String> {
    if reply.contains("Reconfigured") || reply.contains("Reconfiguration in progress") {
        Ok(())
    } else {
        let msg = reply
            .lines()
            .filter(|l| !l.starts_with("BIRD ") && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        Err(if msg.is_empty() {
            "no reply from BIRD".to_string()
        } else {
            msg
        })
    }
}

/// `routing` in the state file and `nilb status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoutingStatus {
    /// The routing daemon nilb drives (`bird`).
    pub daemon: String,
    /// BIRD's control socket.
    pub bird_socket: String,
    /// The routes file nilb writes.
    pub routes_file: String,
    /// `routing.drained`.
    pub drained: bool,
    /// `routing.withdraw_on_fail_open`.
    pub withdraw_on_fail_open: bool,
    /// The decision per VIP.
    pub vips: Vec<VipDecision>,
    /// What BIRD took and its protocols.
    pub bird: bird::BirdStatus,
}

impl RoutingStatus {
    /// Human-readable lines for `nilb status`.
    pub fn print(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
        writeln!(
            out,
            "routing: {} via {} (routes file {}){}",
            self.daemon,
            self.bird_socket,
            self.routes_file,
            if self.drained {
                ", balancer DRAINED: every VIP withdrawn"
            } else {
                ""
            }
        )?;
        for v in &self.vips {
            writeln!(
                out,
                "  VIP {:<15} {}  ({})",
                v.vip,
                if v.announce { "announced" } else { "WITHDRAWN" },
                v.reason
            )?;
        }
        match &self.bird.last_apply {
            None => writeln!(out, "  BIRD: routes file unchanged since start")?,
            Some(a) if a.ok => writeln!(
                out,
                "  BIRD: reconfigured {} in {} ms ({} ok, {} failed so far)",
                a.at, a.ms, self.bird.applies.0, self.bird.applies.1
            )?,
            Some(a) => writeln!(
                out,
                "  BIRD: reconfiguration FAILED {} ({} ok, {} failed so far): {}",
                a.at,
                self.bird.applies.0,
                self.bird.applies.1,
                a.error.as_deref().unwrap_or("?")
            )?,
        }
        if let Some(e) = &self.bird.poll_error {
            writeln!(out, "  BIRD: NOT REACHABLE: {e}")?;
        }
        for p in self.bird.protocols.iter().filter(|p| p.proto == "BGP") {
            writeln!(
                out,
                "  BGP {:<12} {:<5} since {}  {}",
                p.name, p.state, p.since, p.info
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
