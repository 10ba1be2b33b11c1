//! Fresh neighbour entries for the hops the data plane uses
//! (docs/design.md "Balancer (XDP)").
//!
//! The XDP fast path takes a hop's MAC address from the kernel's neighbour
//! table (`bpf_fib_lookup`), but its packets never confirm the entry the way
//! the stack's own traffic does: an entry goes STALE about 30 s after it was
//! last confirmed and stays STALE, and the kernel would re-validate it only
//! when the stack itself sends through it. A STALE entry with a wrong MAC
//! (a backend replaced, a NIC swapped, a failover that sent no gratuitous
//! ARP) would be used by XDP for ever.
//!
//! So once a second the daemon lists the neighbour entries of its interface
//! and, for every hop in its tables whose entry is not known good, asks the
//! kernel to resolve it again: entries that are STALE, DELAY or PROBE (the
//! kernel itself would re-validate them before trusting them) are deleted
//! and re-created with `NTF_USE`, which sends a broadcast ARP request at
//! once; a wrong MAC is corrected within about a second. Meanwhile XDP finds
//! no entry and takes the slow path, where the kernel queues the packets
//! until the answer arrives. (`NTF_USE` on the STALE entry alone only moves
//! it to DELAY: the kernel then waits `delay_first_probe_time`, 5 s, and
//! probes the old MAC by unicast first, about 8 s in all.) Missing and
//! FAILED entries get `NTF_USE` too, at most every 10 s. REACHABLE,
//! PERMANENT, NOARP and INCOMPLETE entries are left alone.
//!
//! The hops of an IPv6 cluster network are handled the same way through
//! their NDP entries (the same states; `NTF_USE` sends a neighbour
//! solicitation instead of an ARP request).
//!
//! Cost: about one broadcast ARP request and its answer per hop per
//! `base_reachable_time` (15-45 s), plus one netlink dump per second.
//!
//! [`plan`] is the pure decision; [`Refresher`] does the netlink I/O.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use anyhow::Result;
use tracing::{debug, warn};

use crate::netlink::{Neighbour, Nud, Rtnl};

/// Least time between two refreshes of one hop whose entry is STALE, DELAY
/// or PROBE, ms.
pub const MIN_REFRESH_GAP_MS: u64 = 2_000;
/// Least time between two resolution requests for a hop with no entry or a
/// FAILED one (a dead host: the kernel's own resolution already failed), ms.
pub const MIN_RESOLVE_GAP_MS: u64 = 10_000;

/// What to do for one hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delete the entry and resolve again (its MAC is not trusted).
    Refresh(IpAddr),
    /// Resolve (no entry, or a failed one).
    Resolve(IpAddr),
}

/// The actions for `hops` given the interface's `entries`, the time of
/// each hop's last action and `now_ms`.
pub fn plan(
    entries: &[Neighbour],
    hops: &BTreeSet<IpAddr>,
    last: &HashMap<IpAddr, u64>,
    now_ms: u64,
) -> Vec<Action> {
    let mut out = Vec::new();
    for hop in hops {
        let entry = entries.iter().find(|e| e.addr == *hop);
        let (action, gap) = match entry.map(|e| e.state) {
            Some(Nud::Stale | Nud::Delay | Nud::Probe) => {
                (Action::Refresh(*hop), MIN_REFRESH_GAP_MS)
            }
            None | Some(Nud::Failed | Nud::Other) => (Action::Resolve(*hop), MIN_RESOLVE_GAP_MS),
            Some(Nud::Reachable | Nud::Static | Nud::Incomplete) => continue,
        };
        if last
            .get(hop)
            .is_some_and(|t| now_ms.saturating_sub(*t) < gap)
        {
            continue;
        }
        out.push(action);
    }
    out
}

/// Keeps the neighbour entries of the data plane's hops on one interface
/// fresh (see the module documentation).
pub struct Refresher {
    ifindex: u32,
    rtnl: Option<Rtnl>,
    last: HashMap<IpAddr, u64>,
    /// MAC of each refreshed entry before its refresh, to report changes.
    before: HashMap<IpAddr, Vec<u8>>,
    /// Entries refreshed (deleted and resolved again) so far.
    pub refreshes: u64,
    /// Resolutions requested for missing or failed entries so far.
    pub resolves: u64,
    /// Refreshes that found a different MAC.
    pub changed: u64,
    failed_once: bool,
}

fn mac(l: &[u8]) -> String {
    l.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl Refresher {
    /// A refresher for interface `ifindex` (netlink is opened on first use).
    pub fn new(ifindex: u32) -> Self {
        Refresher {
            ifindex,
            rtnl: None,
            last: HashMap::new(),
            before: HashMap::new(),
            refreshes: 0,
            resolves: 0,
            changed: 0,
            failed_once: false,
        }
    }

    /// One round for `hops` at `now_ms`. Errors are logged (once) and
    /// retried next round.
    pub fn round(&mut self, hops: &BTreeSet<IpAddr>, now_ms: u64) {
        if let Err(e) = self.try_round(hops, now_ms) {
            self.rtnl = None;
            if !self.failed_once {
                warn!(
                    "refreshing the hops' neighbour entries failed (retried every second): {e:#}"
                );
                self.failed_once = true;
            }
        }
    }

    fn try_round(&mut self, hops: &BTreeSet<IpAddr>, now_ms: u64) -> Result<()> {
        if hops.is_empty() {
            return Ok(());
        }
        if self.rtnl.is_none() {
            self.rtnl = Some(Rtnl::open()?);
        }
        let rtnl = self.rtnl.as_mut().expect("opened");
        // ARP entries for IPv4 hops, NDP ones for IPv6 hops (an IPv6
        // cluster network).
        let mut entries = Vec::new();
        for ipv6 in [false, true] {
            if hops.iter().any(|h| h.is_ipv6() == ipv6) {
                entries.extend(rtnl.neighbours(self.ifindex, ipv6)?);
            }
        }
        for e in &entries {
            if e.state != Nud::Reachable {
                continue;
            }
            if let (Some(old), Some(new)) = (self.before.get(&e.addr), &e.lladdr) {
                if old != new {
                    self.changed += 1;
                    warn!(hop = %e.addr, from = %mac(old), to = %mac(new), "a hop's MAC address changed; its stale entry was refreshed");
                }
                self.before.remove(&e.addr);
            }
        }
        self.last.retain(|a, _| hops.contains(a));
        self.before.retain(|a, _| hops.contains(a));
        for action in plan(&entries, hops, &self.last, now_ms) {
            match action {
                Action::Refresh(a) => {
                    if let Some(l) = entries
                        .iter()
                        .find(|e| e.addr == a)
                        .and_then(|e| e.lladdr.clone())
                    {
                        self.before.insert(a, l);
                    }
                    debug!(hop = %a, "neighbour entry not confirmed: resolving it again");
                    rtnl.delete_neighbour(self.ifindex, a)?;
                    rtnl.use_neighbour(self.ifindex, a)?;
                    self.refreshes += 1;
                }
                Action::Resolve(a) => {
                    rtnl.use_neighbour(self.ifindex, a)?;
                    self.resolves += 1;
                }
            }
            self.last.insert(
                match action {
                    Action::Refresh(a) | Action::Resolve(a) => a,
                },
                now_ms,
            );
        }
        self.failed_once = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn a(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, last))
    }

    fn a6(last: u16) -> IpAddr {
        IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, last))
    }

    fn n(addr: IpAddr, state: Nud) -> Neighbour {
        Neighbour {
            addr,
            state,
            lladdr: Some(vec![2, 0, 0, 0, 0, 1]),
        }
    }

    #[test]
    fn only_entries_the_kernel_would_revalidate_are_refreshed() {
        let entries = [
            n(a(1), Nud::Reachable),
            n(a(2), Nud::Stale),
            n(a(3), Nud::Delay),
            n(a(4), Nud::Probe),
            n(a(5), Nud::Static),
            n(a(6), Nud::Incomplete),
            n(a(7), Nud::Failed),
            n(a(9), Nud::Stale), // not a hop
        ];
        let hops: BTreeSet<IpAddr> = (1..=8).map(a).collect();
        let got = plan(&entries, &hops, &HashMap::new(), 100_000);
        assert_eq!(
            got,
            vec![
                Action::Refresh(a(2)),
                Action::Refresh(a(3)),
                Action::Refresh(a(4)),
                Action::Resolve(a(7)),
                Action::Resolve(a(8)),
            ]
        );
    }

    /// The hops of an IPv6 cluster network by their NDP entries: the same
    /// states decide, and an IPv4 entry with the same last octet is not
    /// taken for an IPv6 hop's.
    #[test]
    fn ipv6_hops_are_planned_by_their_ndp_entries() {
        let entries = [
            n(a6(1), Nud::Reachable),
            n(a6(2), Nud::Stale),
            n(a6(3), Nud::Probe),
            n(a6(4), Nud::Failed),
            n(a(5), Nud::Reachable),
            n(a6(6), Nud::Static),
        ];
        let hops: BTreeSet<IpAddr> = [1, 2, 3, 4, 5, 6].map(a6).into();
        assert_eq!(
            plan(&entries, &hops, &HashMap::new(), 100_000),
            vec![
                Action::Refresh(a6(2)),
                Action::Refresh(a6(3)),
                Action::Resolve(a6(4)),
                Action::Resolve(a6(5)),
            ]
        );
        let mut last = HashMap::new();
        last.insert(a6(2), 99_000);
        last.insert(a6(4), 95_000);
        assert_eq!(
            plan(&entries, &hops, &last, 100_000),
            vec![Action::Refresh(a6(3)), Action::Resolve(a6(5))]
        );
    }

    #[test]
    fn refreshes_are_spaced() {
        let entries = [n(a(2), Nud::Stale), n(a(7), Nud::Failed)];
        let hops: BTreeSet<IpAddr> = [2, 7].map(a).into();
        let mut last = HashMap::new();
        last.insert(a(2), 100_000);
        last.insert(a(7), 100_000);
        assert!(plan(&entries, &hops, &last, 101_000).is_empty());
        assert_eq!(
            plan(&entries, &hops, &last, 102_000),
            vec![Action::Refresh(a(2))]
        );
        assert_eq!(plan(&entries, &hops, &last, 110_000).len(), 2);
    }
}
