//! NAT mode's maps seen from the control plane (docs/design.md "NAT mode";
//! the programs are in bpf/nat.h): what [`NatPlan`] writes (the ports
//! bitmap `nat_ports`, service and address flags), and the sweep that
//! removes the `nat_flows` entries of connections that ended.
//!
//! The sweep runs on its own thread every [`SWEEP_INTERVAL`]: it bumps the
//! sweep number in `nat_gc_pass`, runs the TCP socket iterator (the program
//! `nilb_nat_sweep_tcp` stamps the entry of every flow whose connection is
//! live here, not in TIME_WAIT), then walks `nat_flows` and removes TCP
//! entries the iterator did not stamp and that saw no packet since the
//! sweep began (their socket is gone), and UDP entries idle for longer than
//! `cluster.nat.udp_timeout_ms`. An entry is looked up once more just
//! before it is removed, and kept if a packet refreshed it meanwhile.

use std::collections::BTreeSet;
use std::io::Read;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use tracing::{debug, warn};

use super::abi;
use super::ops::NatPlan;

/// How often the sweep runs.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Elements of `nat_ports`.
pub const PORT_WORDS: usize = abi::sys::nilb_limits::NILB_NAT_PORT_WORDS as usize;

/// The `nat_ports` words for the listening ports of `plan`'s services:
/// bit `port & 63` of word `port >> 6`.
pub fn port_words(plan: &NatPlan) -> Vec<u64> {
    let mut words = vec![0u64; PORT_WORDS];
    for &p in plan.services.values() {
        words[p as usize >> 6] |= 1u64 << (p & 63);
    }
    words
}

/// What the data plane last wrote for NAT mode.
#[derive(Debug, Default)]
pub(super) struct NatState {
    /// The last plan written.
    pub plan: NatPlan,
    /// The `nat_ports` words as written (empty: never written).
    pub words: Vec<u64>,
    /// `vips` flags written at least once (a first call writes every
    /// entry's: an adopted map may hold another file's).
    pub synced: bool,
}

/// Counts of the sweep, shared with the metrics.
#[derive(Debug, Default)]
pub struct SweepStats {
    /// Entries in `nat_flows` at the last sweep.
    pub flows: AtomicU64,
    /// TCP entries removed (their socket was gone), total.
    pub removed_tcp: AtomicU64,
    /// UDP entries removed (idle past the timeout), total.
    pub removed_udp: AtomicU64,
    /// Sweeps run.
    pub sweeps: AtomicU64,
    /// Microseconds the last sweep took.
    pub last_sweep_us: AtomicU64,
}

/// One entry of `nat_flows` as the sweep reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowEntry {
    /// IPPROTO_TCP or IPPROTO_UDP.
    pub proto: u8,
    /// The client's address and port.
    pub client: (Ipv4Addr, u16),
    /// This node's address and listening port.
    pub local: (Ipv4Addr, u16),
    /// The service address and port the replies get.
    pub service: (Ipv4Addr, u16),
    /// Last packet, coarse monotonic seconds.
    pub seen_s: u32,
    /// Last sweep that found the flow's TCP socket.
    pub gc_pass: u32,
}

impl FlowEntry {
    /// Decode a key and value of `nat_flows` (layouts of bpf/nilb.h).
    pub fn parse(key: &[u8], value: &[u8]) -> Option<FlowEntry> {
        let k: abi::sys::nilb_nat_key = abi::read_struct(key).ok()?;
        let v: abi::sys::nilb_nat_flow = abi::read_struct(value).ok()?;
        Some(FlowEntry {
            proto: k.proto,
            client: (abi::addr_from_be(k.client), u16::from_be(k.client_port)),
            local: (abi::addr_from_be(k.local), u16::from_be(k.local_port)),
            service: (abi::addr_from_be(v.vip), u16::from_be(v.port)),
            seen_s: v.seen_s,
            gc_pass: v.gc_pass,
        })
    }
}

/// Whether the sweep removes an entry (pure rule, unit-tested): a TCP
/// entry the sweep `pass` did not stamp and with no packet since the
/// sweep began (`start_s`); a UDP entry idle for more than `udp_timeout_s`
/// at `now_s`. All times in coarse monotonic seconds.
pub fn expired(e: &FlowEntry, pass: u32, start_s: u32, now_s: u32, udp_timeout_s: u32) -> bool {
    match e.proto {
        6 => e.gc_pass != pass && e.seen_s < start_s,
        17 => now_s.saturating_sub(e.seen_s) > udp_timeout_s,
        _ => true,
    }
}

/// The coarse monotonic clock in seconds, as the programs read it
/// (`bpf_ktime_get_coarse_ns() / 1e9`).
fn monotonic_s() -> u32 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE)
        .map(|t| t.tv_sec() as u32)
        .unwrap_or(0)
}

/// The sweep's thread: started by [`super::Dataplane::start_nat_sweep`],
/// stopped when dropped.
pub struct Sweeper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// What one sweep needs: the iterator link and the two maps.
pub(super) struct SweepMaps {
    pub link: libbpf_rs::Link,
    pub flows: MapHandle,
    pub pass: MapHandle,
}

impl Sweeper {
    /// Run the sweep every [`SWEEP_INTERVAL`] with `udp_timeout_ms`,
    /// counting into `stats`.
    pub(super) fn start(maps: SweepMaps, udp_timeout_ms: u64, stats: Arc<SweepStats>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let udp_timeout_s = (udp_timeout_ms / 1000).max(1) as u32;
        let thread = std::thread::Builder::new()
            .name("nilb-nat-sweep".into())
            .spawn(move || {
                let mut pass = 0u32;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::park_timeout(SWEEP_INTERVAL);
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    // The sweep number is the monotonic second it starts
                    // in: never one an earlier daemon stamped entries with
                    // (the pinned entries outlive it).
                    pass = monotonic_s().max(pass.wrapping_add(1)).max(1);
                    if let Err(e) = sweep_once(&maps, pass, udp_timeout_s, &stats) {
                        warn!("NAT flow sweep failed (retried in {SWEEP_INTERVAL:?}): {e:#}");
                    }
                }
            })
            .expect("spawning the NAT sweep thread");
        Sweeper {
            stop,
            thread: Some(thread),
        }
    }
}

/// One sweep (see the module's docs). Returns the number of entries
/// removed.
pub(super) fn sweep_once(
    maps: &SweepMaps,
    pass: u32,
    udp_timeout_s: u32,
    stats: &SweepStats,
) -> Result<u64> {
    let t0 = Instant::now();
    let start_s = monotonic_s();
    maps.pass
        .update(&0u32.to_ne_bytes(), &pass.to_ne_bytes(), MapFlags::ANY)
        .context("writing the sweep number")?;
    let mut it = libbpf_rs::Iter::new(&maps.link).context("starting the TCP socket iterator")?;
    let mut sink = [0u8; 256];
    while it
        .read(&mut sink)
        .context("running the TCP socket iterator")?
        > 0
    {}
    let now_s = monotonic_s();
    let mut doomed = Vec::new();
    let mut total = 0u64;
    for key in maps.flows.keys() {
        total += 1;
        let Some(value) = maps.flows.lookup(&key, MapFlags::ANY)? else {
            continue;
        };
        if let Some(e) = FlowEntry::parse(&key, &value) {
            if expired(&e, pass, start_s, now_s, udp_timeout_s) {
                doomed.push((key, e.seen_s));
            }
        }
    }
    let (mut tcp, mut udp) = (0u64, 0u64);
    for (key, seen_s) in doomed {
        // A packet since the walk (a port reused at once) keeps it.
        let Some(value) = maps.flows.lookup(&key, MapFlags::ANY)? else {
            continue;
        };
        match FlowEntry::parse(&key, &value) {
            Some(e) if e.seen_s == seen_s && maps.flows.delete(&key).is_ok() => {
                if e.proto == 17 {
                    udp += 1;
                } else {
                    tcp += 1;
                }
            }
            _ => {}
        }
    }
    stats.flows.store(total - tcp - udp, Ordering::Relaxed);
    stats.removed_tcp.fetch_add(tcp, Ordering::Relaxed);
    stats.removed_udp.fetch_add(udp, Ordering::Relaxed);
    stats.sweeps.fetch_add(1, Ordering::Relaxed);
    stats
        .last_sweep_us
        .store(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
    if tcp + udp > 0 {
        debug!(
            pass,
            flows = total,
            removed_tcp = tcp,
            removed_udp = udp,
            "NAT flow sweep"
        );
    }
    Ok(tcp + udp)
}

/// Copy the entries of `from` (an earlier daemon's `nat_flows` of another
/// size) into `to`, the ones that matter first: the TCP flows the last
/// sweep found a live socket for (the highest sweep stamp), then the rest
/// by their last packet, newest first. Entries beyond `to`'s size are
/// dropped and counted in the return value `(copied, dropped)`.
pub(super) fn copy_flows(from: &MapHandle, to: &dyn MapCore) -> Result<(u64, u64)> {
    let mut entries = Vec::new();
    for key in from.keys() {
        let Some(value) = from.lookup(&key, MapFlags::ANY)? else {
            continue;
        };
        let rank = FlowEntry::parse(&key, &value).map_or((0, 0), |e| (e.gc_pass, e.seen_s));
        entries.push((rank, key, value));
    }
    copy_order(&mut entries);
    let (mut ok, mut full) = (0u64, 0u64);
    for (_, key, value) in entries {
        if to.update(&key, &value, MapFlags::NO_EXIST).is_ok() {
            ok += 1;
        } else {
            full += 1;
        }
    }
    Ok((ok, full))
}

/// Order entries ranked (sweep stamp, last packet) for copying: the latest
/// stamp first (live connections), then by last packet, newest first.
fn copy_order<T>(entries: &mut [((u32, u32), T, T)]) {
    let last = entries.iter().map(|e| e.0 .0).max().unwrap_or(0);
    entries.sort_by(|a, b| {
        let live = |e: &((u32, u32), T, T)| last != 0 && e.0 .0 == last;
        live(b).cmp(&live(a)).then(b.0 .1.cmp(&a.0 .1))
    });
}

/// The `vips` entries among `have` whose flags must be (re)written going
/// from plan `old` to plan `new` (`all`: every one), with their new flags.
pub fn vip_flag_changes(
    have: &BTreeSet<Ipv4Addr>,
    old: &NatPlan,
    new: &NatPlan,
    all: bool,
) -> Vec<(Ipv4Addr, u32)> {
    have.iter()
        .filter(|a| all || old.vip_flags(**a) != new.vip_flags(**a))
        .map(|a| (*a, new.vip_flags(*a)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(proto: u8, seen_s: u32, gc_pass: u32) -> FlowEntry {
        FlowEntry {
            proto,
            client: (Ipv4Addr::new(10, 0, 0, 9), 40000),
            local: (Ipv4Addr::new(10, 0, 0, 2), 8080),
            service: (Ipv4Addr::new(10, 0, 0, 1), 80),
            seen_s,
            gc_pass,
        }
    }

    #[test]
    fn tcp_entries_live_while_the_sweep_finds_their_socket() {
        // Stamped by this pass: kept however old.
        assert!(!expired(&entry(6, 10, 7), 7, 1000, 1000, 120));
        // Not stamped, no packet since the sweep began: removed.
        assert!(expired(&entry(6, 999, 6), 7, 1000, 1001, 120));
        // Not stamped but created after the sweep began (the iterator may
        // have passed before its socket existed): kept.
        assert!(!expired(&entry(6, 1000, 0), 7, 1000, 1001, 120));
    }

    #[test]
    fn udp_entries_expire_after_the_timeout() {
        assert!(!expired(&entry(17, 880, 0), 7, 1000, 1000, 120));
        assert!(expired(&entry(17, 879, 0), 7, 1000, 1000, 120));
        // gc_pass means nothing for UDP.
        assert!(expired(&entry(17, 0, 7), 7, 1000, 1000, 120));
    }

    #[test]
    fn live_connections_are_copied_first() {
        // (sweep stamp, last packet): stamp 9 is the last sweep's.
        let mut e = vec![
            ((0, 50), 1, 1),
            ((9, 10), 2, 2),
            ((3, 99), 3, 3),
            ((9, 20), 4, 4),
            ((0, 60), 5, 5),
        ];
        copy_order(&mut e);
        let order: Vec<i32> = e.iter().map(|x| x.1).collect();
        assert_eq!(order, vec![4, 2, 3, 5, 1]);
    }

    #[test]
    fn port_words_set_one_bit_per_port() {
        let key = |port| crate::types::ServiceKey {
            vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            port,
            protocol: crate::types::Protocol::Tcp,
        };
        let mut plan = NatPlan::default();
        plan.services.insert(key(80), 8080);
        plan.services.insert(key(81), 63);
        plan.services.insert(key(82), 64);
        let w = port_words(&plan);
        assert_eq!(w.len(), 1024);
        assert_eq!(w[0], 1 << 63);
        assert_eq!(w[1], 1);
        assert_eq!(w[8080 >> 6], 1 << (8080 & 63));
        assert_eq!(w.iter().map(|x| x.count_ones()).sum::<u32>(), 3);
    }

    #[test]
    fn vip_flags_change_only_where_the_plan_does() {
        use crate::abi_sys::nilb_addr_flags as f;
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        let have: BTreeSet<_> = [a, b].into();
        let old = NatPlan {
            node_addresses: [a].into(),
            nat_only: [a].into(),
            ..Default::default()
        };
        let new = NatPlan {
            node_addresses: [b].into(),
            nat_only: [a, b].into(),
            ..Default::default()
        };
        let both = f::NILB_ADDR_F_NODE | f::NILB_ADDR_F_NAT_ONLY;
        assert_eq!(
            vip_flag_changes(&have, &old, &new, false),
            vec![(a, f::NILB_ADDR_F_NAT_ONLY), (b, both)]
        );
        assert_eq!(vip_flag_changes(&have, &new, &new, false), vec![]);
        assert_eq!(
            vip_flag_changes(&have, &new, &new, true),
            vec![(a, f::NILB_ADDR_F_NAT_ONLY), (b, both)]
        );
    }
}
