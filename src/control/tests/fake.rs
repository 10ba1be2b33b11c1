//! A recording [`DataplaneOps`]: the maps' contents in memory, a log of
//! every call, failures on request, and a check after every call that what
//! it holds is safe for traffic.
//!
//! Safe means what the programs need to forward the packets of every
//! installed table: the service's VIP is in `vips` (the TC program drops an
//! inner packet to an address that is not a VIP) and every hop of its
//! buckets is in `cluster_nodes` (the TC program drops GUE from a source
//! outside the set; a hop is the source of what it forwards), and every
//! hop has a counter slot of its own that no other address of any installed
//! table holds (the data plane names hops by slot), and that slot's address
//! in the fake's `backends` map is the hop's. Like the data plane, the fake
//! keeps the slot each bucket was written with and writes a slot's address
//! when an install names it: a bucket left unwritten keeps naming its old
//! slot, so a slot given to another backend while such a bucket names it
//! shows up as a hop whose slot holds another address. The check looks at
//! state only, so it holds whatever order the control plane writes in.
//!
//! An install with a list of changed buckets writes only those, as the
//! data plane does: a list that misses a bucket leaves the fake's table
//! different from the control plane's, which the tests compare.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use anyhow::{bail, Result};

use crate::dataplane::{
    ControlRecord, DataplaneOps, NatPlan, NodeSettings, QuicRoute, TableInstall,
};
use crate::filters::FilterSet;
use crate::table::{Bucket, MAX_OWNERS};
use crate::types::ServiceKey;

/// The hops of `b` with the slots they were written with (`slots`: first
/// hop's, then the previous owners').
fn named(b: &Bucket, slots: &[u32; MAX_OWNERS]) -> Vec<(IpAddr, u32)> {
    let first = b.first().map(|f| (f, slots[0]));
    first
        .into_iter()
        .chain(b.previous().zip(slots[1..].iter().copied()))
        .collect()
}

/// One call the control plane made, with its argument.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Call {
    Settings(NodeSettings),
    SetVips(BTreeSet<std::net::IpAddr>),
    SetClusterNodes(BTreeSet<IpAddr>),
    ZeroBackendStats(u32),
    ZeroServiceStats(u32),
    /// The keys of one batch, in order.
    InstallTables(Vec<ServiceKey>),
    RemoveService(ServiceKey),
    /// How many slots one batch wrote, and which of them got a record.
    WriteControlState(usize, Vec<u32>),
    SetXdp(bool),
    /// QUIC-LB routes that differ from what the fake held: (service
    /// index, server IDs routed).
    SetQuic(Vec<(u32, usize)>),
    /// A filter set that differs from the installed one: its digest and
    /// each filtered service's index.
    InstallFilters(u64, BTreeMap<ServiceKey, u32>),
    /// A NAT plan that differs from the one the fake held.
    SetNat(NatPlan),
}

/// A table as the fake holds it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Installed {
    pub index: u32,
    pub buckets: Vec<Bucket>,
    /// Per bucket, the slot of each hop as it was written (first hop, then
    /// the previous owners; 0 after the last).
    pub hop_slots: Vec<[u32; MAX_OWNERS]>,
    /// Counter slot of each hop (first hops and previous owners), from
    /// `hop_slots`.
    pub slots: BTreeMap<IpAddr, u32>,
}

#[derive(Debug, Default)]
pub(super) struct FakeDataplane {
    pub calls: Vec<Call>,
    pub settings: Option<NodeSettings>,
    pub vips: BTreeSet<std::net::IpAddr>,
    pub nodes: BTreeSet<IpAddr>,
    pub services: BTreeMap<ServiceKey, Installed>,
    /// The `backends` map: the address of every slot an install named.
    pub backends: BTreeMap<u32, IpAddr>,
    /// The next `install_tables` installs only its first n items, then
    /// fails (as a batch update that stops at a failing element).
    pub fail_install_after: Option<usize>,
    /// The next `install_tables` finds no room in the bucket pool (the
    /// real data plane's `NoRoom`) and installs nothing.
    pub fail_install_no_room: bool,
    /// The next `remove_service` of this key fails.
    pub fail_remove: Option<ServiceKey>,
    /// Every backend slot and service index zeroed so far.
    pub zeroed_slots: Vec<u32>,
    pub zeroed_indexes: Vec<u32>,
    /// The `control_state` map (used slots only).
    pub control: BTreeMap<u32, ControlRecord>,
    /// The QUIC-LB routes (the `quic_*` maps).
    pub quic: Vec<QuicRoute>,
    /// The NAT-mode state last written.
    pub nat: NatPlan,
    /// Our XDP program is attached.
    pub xdp: bool,
    /// Attaching XDP fails (as on a device without native XDP, or with
    /// another program attached).
    pub fail_xdp_attach: bool,
    /// Every table install: the service and how many buckets it wrote
    /// (None: the whole table).
    pub writes: Vec<(ServiceKey, Option<usize>)>,
    /// Unsafe states seen: after which call (index into `calls`), and why.
    pub violations: Vec<(usize, String)>,
    /// The installed filters: digest and the index of each filtered
    /// service (like the real data plane, an equal set is not installed
    /// again).
    pub filters: Option<(u64, BTreeMap<ServiceKey, u32>)>,
}

impl FakeDataplane {
    /// Log `call`, then check the state it left.
    fn record(&mut self, call: Call) {
        self.calls.push(call);
        let at = self.calls.len() - 1;
        for (key, t) in &self.services {
            if !self.vips.contains(&key.vip) {
                self.violations
                    .push((at, format!("{key} is installed but its VIP is not in vips")));
            }
            let hops: BTreeSet<IpAddr> = t.buckets.iter().flat_map(|b| b.hops()).collect();
            for hop in hops.difference(&self.nodes) {
                self.violations.push((
                    at,
                    format!("{hop}, a hop of {key}, is not in cluster_nodes"),
                ));
            }
            if let Some(index) = self.filters.as_ref().and_then(|(_, s)| s.get(key)) {
                if *index != t.index {
                    self.violations.push((
                        at,
                        format!("{key} is installed with index {} but its filters are at scope index {index}", t.index),
                    ));
                }
            }
        }
        let mut by_slot: BTreeMap<u32, IpAddr> = BTreeMap::new();
        for (key, t) in &self.services {
            let mut unset = BTreeSet::new();
            for (b, slots) in t.buckets.iter().zip(&t.hop_slots) {
                for (hop, slot) in named(b, slots) {
                    if self.backends.get(&slot) != Some(&hop) {
                        unset.insert((hop, slot));
                    }
                }
            }
            for (hop, slot) in unset {
                self.violations.push((
                    at,
                    format!(
                        "{hop}, a hop of {key}, is named by slot {slot}, whose backend address is {}",
                        self.backends
                            .get(&slot)
                            .map_or("not set".to_string(), |a| a.to_string())
                    ),
                ));
            }
            for (&dip, &slot) in &t.slots {
                if slot == crate::control::OVERFLOW_SLOT {
                    self.violations
                        .push((at, format!("{dip}, a hop of {key}, has no slot of its own")));
                }
                if let Some(other) = by_slot.insert(slot, dip).filter(|&o| o != dip) {
                    self.violations.push((
                        at,
                        format!("slot {slot} names both {other} and {dip} (hop of {key})"),
                    ));
                }
            }
        }
    }

    /// Position of the first call that matches.
    pub fn position(&self, what: impl Fn(&Call) -> bool) -> Option<usize> {
        self.calls.iter().position(what)
    }
}

impl DataplaneOps for FakeDataplane {
    fn set_settings(&mut self, settings: &NodeSettings) -> Result<()> {
        self.settings = Some(*settings);
        self.record(Call::Settings(*settings));
        Ok(())
    }

    fn vips(&self) -> &BTreeSet<std::net::IpAddr> {
        &self.vips
    }

    fn set_vips(&mut self, want: &BTreeSet<std::net::IpAddr>) -> Result<()> {
        self.vips = want.clone();
        self.record(Call::SetVips(want.clone()));
        Ok(())
    }

    fn cluster_nodes(&self) -> &BTreeSet<IpAddr> {
        &self.nodes
    }

    fn set_cluster_nodes(&mut self, want: &BTreeSet<IpAddr>) -> Result<()> {
        self.nodes = want.clone();
        self.record(Call::SetClusterNodes(want.clone()));
        Ok(())
    }

    fn zero_backend_stats(&mut self, slot: u32) -> Result<()> {
        // A table that counts into the slot would mix its counts with the
        // new pair's (or lose them).
        for (key, t) in &self.services {
            if t.slots.values().any(|&s| s == slot) {
                self.violations.push((
                    self.calls.len(),
                    format!("zeroing backend slot {slot} while {key} counts into it"),
                ));
            }
        }
        self.zeroed_slots.push(slot);
        self.record(Call::ZeroBackendStats(slot));
        Ok(())
    }

    fn zero_service_stats(&mut self, index: u32) -> Result<()> {
        for (key, t) in &self.services {
            if t.index == index {
                self.violations.push((
                    self.calls.len(),
                    format!("zeroing service index {index} while {key} counts into it"),
                ));
            }
        }
        self.zeroed_indexes.push(index);
        self.record(Call::ZeroServiceStats(index));
        Ok(())
    }

    fn installed_services(&self) -> Result<BTreeSet<ServiceKey>> {
        Ok(self.services.keys().copied().collect())
    }

    fn install_tables(&mut self, items: &[TableInstall<'_>]) -> Result<()> {
        if std::mem::take(&mut self.fail_install_no_room) {
            let key = items.first().map(|i| i.key).expect("something to install");
            return Err(anyhow::Error::new(crate::dataplane::install::NoRoom {
                key,
                reason: "the pool is full".into(),
                batch: 1024,
            })
            .context("installing tables"));
        }
        let fail_after = self.fail_install_after.take();
        for (i, item) in items.iter().enumerate() {
            if fail_after == Some(i) {
                break;
            }
            let table = item.table;
            let (mut buckets, mut hop_slots) = match (item.changed, self.services.get(&item.key)) {
                (Some(_), Some(have)) if have.buckets.len() == table.size() as usize => {
                    (have.buckets.clone(), have.hop_slots.clone())
                }
                (Some(_), _) => {
                    self.violations.push((
                        self.calls.len(),
                        format!(
                            "{}: a list of changed buckets for a table not installed at this size",
                            item.key
                        ),
                    ));
                    (
                        vec![Bucket::default(); table.size() as usize],
                        vec![[0; MAX_OWNERS]; table.size() as usize],
                    )
                }
                (None, _) => (
                    vec![Bucket::default(); table.size() as usize],
                    vec![[0; MAX_OWNERS]; table.size() as usize],
                ),
            };
            let all: Vec<u32>;
            let written = match item.changed {
                Some(c) => c,
                None => {
                    all = (0..table.size()).collect();
                    &all
                }
            };
            for &i in written {
                let (i, b) = (i as usize, table.bucket(i as usize));
                let mut slots = [0; MAX_OWNERS];
                let hops = b.first().into_iter().map(|f| (0, f));
                for (k, hop) in hops.chain(b.previous().enumerate().map(|(k, p)| (k + 1, p))) {
                    slots[k] = (item.slot_of)(hop);
                    // The data plane writes the slot's address before a
                    // bucket names it.
                    self.backends.insert(slots[k], hop);
                }
                buckets[i] = b;
                hop_slots[i] = slots;
            }
            let slots = buckets
                .iter()
                .zip(&hop_slots)
                .flat_map(|(b, s)| named(b, s))
                .collect();
            self.services.insert(
                item.key,
                Installed {
                    index: item.index,
                    buckets,
                    hop_slots,
                    slots,
                },
            );
        }
        self.writes
            .extend(items.iter().map(|i| (i.key, i.changed.map(|c| c.len()))));
        self.record(Call::InstallTables(items.iter().map(|i| i.key).collect()));
        match fail_after {
            Some(n) if n < items.len() => bail!("injected: batch failed at item {n}"),
            _ => Ok(()),
        }
    }

    /// A call that changes nothing is not logged (the real data plane
    /// writes nothing then either).
    fn set_quic(&mut self, routes: &[QuicRoute]) -> Result<()> {
        if self.quic != routes {
            self.quic = routes.to_vec();
            self.record(Call::SetQuic(
                routes.iter().map(|r| (r.index, r.servers.len())).collect(),
            ));
        }
        Ok(())
    }

    /// Like the real data plane, an equal plan writes nothing (and is not
    /// logged).
    fn set_nat(&mut self, plan: &NatPlan) -> Result<()> {
        if self.nat != *plan {
            self.nat = plan.clone();
            self.record(Call::SetNat(plan.clone()));
        }
        Ok(())
    }

    fn write_control_state(&mut self, records: &[(u32, Option<ControlRecord>)]) -> Result<()> {
        let mut written = Vec::new();
        for (slot, r) in records {
            match r {
                Some(r) => {
                    self.control.insert(*slot, r.clone());
                    written.push(*slot);
                }
                None => {
                    self.control.remove(slot);
                }
            }
        }
        self.record(Call::WriteControlState(records.len(), written));
        Ok(())
    }

    fn xdp_attached(&self) -> Result<bool> {
        Ok(self.xdp)
    }

    fn set_xdp(&mut self, attached: bool) -> Result<()> {
        self.record(Call::SetXdp(attached));
        if attached && self.fail_xdp_attach {
            bail!("injected: attaching XDP in Native mode: Operation not supported (os error 95)");
        }
        self.xdp = attached;
        Ok(())
    }

    fn install_filters(
        &mut self,
        set: &FilterSet,
        index_of: &dyn Fn(&ServiceKey) -> Option<u32>,
    ) -> Result<()> {
        let scopes: BTreeMap<ServiceKey, u32> = set
            .services
            .keys()
            .map(|k| (*k, index_of(k).unwrap_or(u32::MAX)))
            .collect();
        let want = (set.digest, scopes);
        if self.filters.as_ref() != Some(&want) {
            self.filters = Some(want.clone());
            self.record(Call::InstallFilters(want.0, want.1));
        }
        Ok(())
    }

    fn remove_service(&mut self, key: &ServiceKey) -> Result<()> {
        if self.fail_remove == Some(*key) {
            self.fail_remove = None;
            self.record(Call::RemoveService(*key));
            bail!("injected: removing {key} failed");
        }
        self.services.remove(key);
        self.record(Call::RemoveService(*key));
        Ok(())
    }
}

/// The fake's own check: a bucket an install leaves unwritten keeps the
/// slot it was written with, so giving that slot to another backend
/// leaves a hop whose slot holds another address.
#[test]
fn a_slot_given_away_while_an_unwritten_bucket_names_it_is_a_violation() {
    use super::{key, B11, B12, B13};
    use crate::table::Table;
    let table = |first0: IpAddr| {
        let mut b = vec![Bucket::new(Some(B12), [B11]); 4];
        b[0] = Bucket::new(Some(first0), []);
        Table::adopt(b, vec![None; 4], 3)
    };
    let mut f = FakeDataplane {
        vips: [key().vip].into(),
        nodes: [B11, B12, B13].into(),
        ..FakeDataplane::default()
    };
    let before = |d: IpAddr| u32::from(crate::table::tests::last_octet(d)) - 10;
    let install = |f: &mut FakeDataplane, t: &Table, slot_of: &dyn Fn(IpAddr) -> u32, changed| {
        f.install_tables(&[TableInstall {
            key: key(),
            index: 0,
            nat_port: None,
            table: t,
            slot_of,
            changed,
        }])
        .unwrap()
    };
    install(&mut f, &table(B11), &before, None);
    assert_eq!(f.violations, vec![]);
    assert_eq!(f.services[&key()].slots, [(B11, 1), (B12, 2)].into());
    // Bucket 0 alone rewritten, B13 given B12's slot: buckets 1-3 still
    // name slot 2 for B12.
    let after = |d: IpAddr| match d {
        B13 => 2,
        B11 => 1,
        _ => 3,
    };
    install(&mut f, &table(B13), &after, Some(&[0]));
    assert!(
        f.violations
            .iter()
            .any(|(_, v)| v.contains("10.0.0.12, a hop of")
                && v.contains("backend address is 10.0.0.13")),
        "{:?}",
        f.violations
    );
    // Written whole with the new slots, the table is safe again.
    f.violations.clear();
    install(&mut f, &table(B13), &after, None);
    assert_eq!(f.violations, vec![]);
}
