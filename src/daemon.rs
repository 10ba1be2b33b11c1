//! `nilb run`: load the data plane, fill it from the config, attach it to an
//! interface, then serve events until told to stop.
//!
//! Events (one control loop on the main thread; checks run on their own
//! runtime so a slow check never delays the loop):
//! - SIGHUP: re-read and validate the whole file; on any problem keep the
//!   running config and tables untouched, log every problem and record the
//!   failed reload in the state file; otherwise apply the difference service
//!   by service (one atomic swap each), then the node's role (XDP attached
//!   or detached) and the health checks, as one transaction: if any part
//!   fails the running state is restored and the reload is recorded as
//!   failed with its reason (state file, `nilb status`, metrics). Signals
//!   that arrive during a reload are merged into one more reload.
//! - a health-check result: update the backend's state machine; a failure
//!   moves buckets at once, a recovery in paced steps.
//! - a tick (every 200 ms): paced voluntary steps, removals of drained-out
//!   backends, the state file (encoded and written on a thread of its own,
//!   so the loop never waits for it).
//! - SIGINT, SIGTERM: detach everything this process attached, remove its
//!   pins, exit 0.
//!
//! The XDP balancer is attached and health checks run only when this node's
//! address is one of `cluster.balancers`; other nodes get the backend XDP
//! program (native mode only; it decapsulates GUE before GRO, and without it
//! TC does all the work); the TC program is attached on every node. The role
//! shown in the state file and metrics is the one the kernel reports (our XDP
//! balancer attached or not), not the one the file asks for.
//!
//! Time: the control plane runs on the boot-time clock ([`crate::clock`]), so
//! a step of the wall clock changes no pacing, and the move times and
//! removal times kept in the pinned maps mean the same to the next daemon.

use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::clock::{self, Clock, SystemClock};

use anyhow::{bail, Context, Result};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::config::{Config, ConfigError, Protocol, ServiceKey};
use crate::control::{ControlPlane, Mode, Plan, ReloadTimes};
use crate::dataplane::{Dataplane, DataplaneOps, XdpMode};
use crate::filters::{lists, FilterSet, RuleIdent, Scope};
use crate::health::checker::{CheckResult, Checkers};
use crate::health::encap::{EncapCheckers, EncapResult};
use crate::health::load::{LoadResult, Scrapers};
use crate::limits;
use crate::metrics::{self, HostCpu};
use crate::status::{rfc3339, FiltersStatus, ReloadStatus, Status};

/// Tables an event logs one INFO line each for; more are summed up in one
/// line (see `Daemon::log_installs`).
const TABLE_LINES_MAX: usize = 8;

/// A publication that took this long (from the apply that changed the
/// tables to etcd's answer, ms) is logged as a warning.
const SLOW_PUBLICATION_MS: u64 = 500;

/// Options of `nilb run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// YAML configuration file.
    pub config: PathBuf,
    /// Interface to attach to.
    pub interface: String,
    /// This node's address, of the cluster network's family; default:
    /// [`interface_address`].
    pub node_address: Option<IpAddr>,
    /// XDP attach mode.
    pub xdp_mode: XdpMode,
    /// Directory (on bpffs) for the pinned maps.
    pub pin_dir: PathBuf,
    /// Where the state file is written.
    pub state_file: PathBuf,
    /// Threads that run health checks, load scrapes and the metrics server.
    pub check_threads: usize,
    /// Where to serve Prometheus metrics (None: not at all).
    pub metrics_address: Option<std::net::SocketAddr>,
    /// On SIGTERM/SIGINT leave programs attached and maps pinned (upgrade:
    /// the next `nilb run` adopts them with no gap).
    pub keep_dataplane: bool,
}

/// The address of `interface` nilb uses as this node's ([`pick_node_address`]
/// of its addresses): one the configuration names as a cluster address
/// (`cluster`: balancers and DIPs) if it has one, else its first IPv4
/// address, or (`ipv6`: an IPv6 cluster network) its first global or
/// unique-local IPv6 address.
pub fn interface_address(
    interface: &str,
    ipv6: bool,
    cluster: &std::collections::BTreeSet<IpAddr>,
) -> Result<IpAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing interface addresses")?;
    let mut all = Vec::new();
    for a in addrs {
        if a.interface_name != interface {
            continue;
        }
        let Some(s) = a.address.as_ref() else {
            continue;
        };
        if let Some(sin) = s.as_sockaddr_in() {
            all.push(IpAddr::V4(sin.ip()));
        } else if let Some(sin6) = s.as_sockaddr_in6() {
            all.push(IpAddr::V6(sin6.ip()));
        }
    }
    if let Some(a) = pick_node_address(&all, ipv6, cluster) {
        return Ok(a);
    }
    if ipv6 {
        bail!("interface {interface} has no global or unique-local IPv6 address (the cluster network is IPv6); pass --node-address")
    }
    bail!("interface {interface} has no IPv4 address; pass --node-address")
}

/// This node's address among an interface's addresses `addrs` (in the
/// kernel's order) on a cluster network of family `ipv6`: the first that
/// the configuration names (`cluster`), so that a host with several
/// addresses (a second prefix, a deprecated or temporary IPv6 address)
/// is the node the file means; else the first IPv4 address, or the first
/// IPv6 one that can be a node's ([`node_address6`]). Pure.
pub fn pick_node_address(
    addrs: &[IpAddr],
    ipv6: bool,
    cluster: &std::collections::BTreeSet<IpAddr>,
) -> Option<IpAddr> {
    let of_family = || addrs.iter().copied().filter(|a| a.is_ipv6() == ipv6);
    if let Some(a) = of_family().find(|a| cluster.contains(a)) {
        return Some(a);
    }
    if ipv6 {
        let v6: Vec<Ipv6Addr> = of_family()
            .filter_map(|a| match a {
                IpAddr::V6(a) => Some(a),
                IpAddr::V4(_) => None,
            })
            .collect();
        return node_address6(&v6).map(IpAddr::V6);
    }
    of_family().next()
}

/// The first of an interface's IPv6 addresses that can be a node's address
/// on an IPv6 cluster network: global unicast or unique local (not
/// link-local, loopback, multicast or IPv4-mapped). Pure.
pub fn node_address6(addrs: &[Ipv6Addr]) -> Option<Ipv6Addr> {
    addrs
        .iter()
        .copied()
        .find(|a| crate::config::unusable_address6(*a).is_none())
}

/// Whether `addr` is assigned to any interface of this network namespace.
fn is_local_address(addr: IpAddr) -> bool {
    nix::ifaddrs::getifaddrs().is_ok_and(|mut it| {
        it.any(|a| {
            a.address.as_ref().is_some_and(|s| {
                s.as_sockaddr_in()
                    .is_some_and(|sin| IpAddr::V4(sin.ip()) == addr)
                    || s.as_sockaddr_in6()
                        .is_some_and(|sin6| IpAddr::V6(sin6.ip()) == addr)
            })
        })
    })
}

/// Why this node's address does not fit the configuration's cluster
/// network (None: it fits): every cluster address is of one family
/// (docs/config.md "IPv6 cluster network"). Pure.
pub fn node_family_problem(config: &Config, node: IpAddr) -> Option<String> {
    let cluster_v6 = config.cluster.is_ipv6();
    (node.is_ipv6() != cluster_v6).then(|| {
        let (have, want) = if cluster_v6 {
            ("IPv4", "IPv6")
        } else {
            ("IPv6", "IPv4")
        };
        format!(
            "this node's address {node} is {have} but the configuration's cluster network (cluster.balancers, backend DIPs) is {want}: give --node-address an {want} address of this node"
        )
    })
}

/// Why pins of a data plane whose node address was `pinned` cannot be
/// adopted by a daemon with node address `node` (None: they can): a
/// cluster network never changes family in place. Pure.
pub fn pinned_family_problem(pinned: IpAddr, node: IpAddr, pin_dir: &Path) -> Option<String> {
    if pinned.is_unspecified() || pinned.is_ipv6() == node.is_ipv6() {
        return None;
    }
    let family = |a: IpAddr| if a.is_ipv6() { "IPv6" } else { "IPv4" };
    Some(format!(
        "the pinned maps in {} belong to a data plane of an {} cluster network (node address {pinned}) and this configuration's is {}: nilb does not adopt them across a change of family. Stop the old daemon, remove its programs and pins (`nilb cleanup --interface IF --pin-dir {}`), then start again: tables are rebuilt and flows through this node are rebalanced",
        pin_dir.display(),
        family(pinned),
        family(node),
        pin_dir.display()
    ))
}

/// Whether `a` and `b` name the same existing file (same device and inode,
/// so links count).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => false,
    }
}

/// One `nilb run` per interface and network namespace: an exclusive lock on
/// `/run/nilb/<netns inode>-if<ifindex>.lock`, held for the daemon's life
/// (released by the kernel if it dies). By index, not name: an alternative
/// name (`ip link property add ... altname`) or a rename must not let a
/// second daemon in. A second daemon would replace the first one's
/// programs and remove them again when it stops.
fn lock_path(ifindex: i32) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let netns = std::fs::metadata("/proc/self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0);
    Path::new("/run/nilb").join(format!("{netns}-if{ifindex}.lock"))
}

fn lock_interface(interface: &str, ifindex: i32) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let path = lock_path(ifindex);
    lock_file(
        &path,
        &format!("on {interface} (ifindex {ifindex}) in this network namespace"),
    )
}

/// One `nilb run` per pin directory, whatever interface, network or mount
/// namespace it serves: an exclusive `flock` on the directory itself
/// (created if missing), which lives on the bpffs every daemon shares even
/// where `/run` is private (a container). Two daemons on one pin directory
/// would adopt each other's maps and overwrite each other's tables. The
/// holder's process ID goes to `/run/nilb/pins-<device>-<inode>.pid` (by the
/// directory's identity, so `/proc/1/root/...` and `/sys/fs/bpf/...` are
/// the same) for the message a second daemon prints. Returns the lock and
/// that file's path (removed at exit).
fn lock_pin_dir(dir: &Path) -> Result<(nix::fcntl::Flock<std::fs::File>, PathBuf)> {
    lock_pin_dir_in(dir, Path::new("/run/nilb"))
}

/// [`lock_pin_dir`] with its process-ID file under `locks` (tests).
fn lock_pin_dir_in(
    dir: &Path,
    locks: &Path,
) -> Result<(nix::fcntl::Flock<std::fs::File>, PathBuf)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the pin directory {}", dir.display()))?;
    let m = std::fs::metadata(dir)
        .with_context(|| format!("reading the pin directory {}", dir.display()))?;
    let pid_path = locks.join(format!("pins-{}-{}.pid", m.dev(), m.ino()));
    let handle = std::fs::File::open(dir)
        .with_context(|| format!("opening the pin directory {}", dir.display()))?;
    match nix::fcntl::Flock::lock(handle, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(lock) => {
            // Best effort: only the message of a second daemon needs it.
            let _ = std::fs::create_dir_all(locks);
            let _ = std::fs::write(&pid_path, std::process::id().to_string());
            Ok((lock, pid_path))
        }
        Err((_, e)) => {
            let pid = std::fs::read_to_string(&pid_path).unwrap_or_else(|_| "unknown".into());
            bail!(
                "another nilb (pid {}) already runs with the pin directory {} (it holds a lock on the directory: {e}); stop it first",
                pid.trim(),
                dir.display()
            )
        }
    }
}

/// An exclusive, non-blocking lock on `path` (created with its parents)
/// holding this process's ID; `what` completes "another nilb (pid N)
/// already runs ..." in the error when another process holds it.
fn lock_file(path: &Path, what: &str) -> Result<nix::fcntl::Flock<std::fs::File>> {
    use std::io::{Read, Seek, Write};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            let _ = lock.set_len(0);
            let _ = lock.rewind();
            let _ = write!(lock, "{}", std::process::id());
            Ok(lock)
        }
        Err((mut file, _)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            bail!(
                "another nilb (pid {}) already runs {what} (lock {}); stop it first",
                pid.trim(),
                path.display()
            )
        }
    }
}

/// The warning for an interface MTU that cannot carry a 1500-byte client
/// packet with GUE: a TCP flow's packets list at most `previous` hops (the
/// previous owners a bucket keeps), a UDP flow's one more, the first hop
/// again (`udp`: the config has a UDP service). None if it can.
fn mtu_warning(mtu: u32, previous: u32, udp: bool, cluster_ipv6: bool) -> Option<String> {
    let tcp = limits::gue_overhead_of(previous, cluster_ipv6);
    let overhead = limits::gue_overhead_of(previous + udp as u32, cluster_ipv6);
    let need = 1500 + overhead;
    if mtu >= need {
        return None;
    }
    let what = match (udp, previous) {
        (true, 1) => " (a UDP flow whose bucket has a second hop lists two hops)".to_string(),
        (true, n) => format!(
            " (a UDP flow whose bucket has {n} previous owners lists {} hops)",
            n + 1
        ),
        (false, 1) => String::new(),
        (false, n) => format!(" (a bucket with {n} previous owners lists {n} hops)"),
    };
    let mut s = format!(
        "MTU {mtu} cannot carry a 1500-byte client packet plus {overhead} bytes of GUE{what}: raise the MTU between nodes to {need}"
    );
    if mtu < 1500 + tcp {
        s += &format!(
            " or clamp the TCP MSS of the VIPs to {} ({} for IPv6 clients)",
            mtu.saturating_sub(tcp + 40),
            mtu.saturating_sub(tcp + 60)
        );
    }
    if udp {
        s += "; until then too big UDP datagrams are answered with ICMP \"fragmentation needed\"";
    }
    Some(s)
}

/// The warning for an interface MTU below what IPv6 clients need (`ipv6`:
/// the config has an IPv6 service): every IPv6 link carries 1280 bytes
/// (RFC 8200), and an ICMPv6 Packet Too Big cannot ask a client for less,
/// so a cluster MTU under 1280 + GUE leaves IPv6 clients sending packets
/// the balancer can only refuse, forever (path MTU discovery loops). None
/// if it is large enough (or no IPv6 service).
fn mtu_warning_ipv6(
    mtu: u32,
    previous: u32,
    udp: bool,
    ipv6: bool,
    cluster_ipv6: bool,
) -> Option<String> {
    let need = 1280 + limits::gue_overhead_of(previous + udp as u32, cluster_ipv6);
    (ipv6 && mtu < need).then(|| {
        format!(
            "MTU {mtu} is below {need}, what IPv6 clients need (1280, the least an IPv6 link carries, plus GUE): larger IPv6 packets get a Packet Too Big that cannot report less than 1280, so their senders never fit; raise the MTU between nodes to at least {need}"
        )
    })
}

/// What decides the GUE overhead of a configuration: the previous owners a
/// bucket keeps (`rebalance.previous_owners`: a TCP flow's packets list that
/// many hops), whether a UDP service exists (a UDP flow lists one more) and
/// whether an IPv6 service exists (its clients need 1280 + GUE), and
/// whether the cluster network is IPv6 (outer IPv6, 16-byte hops).
fn gue_hops_of(config: &Config) -> (u32, bool, bool, bool) {
    let udp = config.services.iter().any(|s| s.protocol == Protocol::Udp);
    let ipv6 = config.services.iter().any(|s| s.vip.is_ipv6());
    (
        config.rebalance.previous_owners,
        udp,
        ipv6,
        config.cluster.is_ipv6(),
    )
}

/// Warn (once per call) when `interface`'s MTU cannot carry a 1500-byte
/// client packet with the GUE overhead of `previous` hops (+1 for `udp`),
/// and, more loudly, when it is below what IPv6 clients need (`ipv6`).
/// Called at start and after a reload that lengthens the hop list or adds
/// the first IPv6 service.
fn check_mtu(interface: &str, (previous, udp, ipv6, cluster_ipv6): (u32, bool, bool, bool)) {
    if let Some(mtu) = std::fs::read_to_string(format!("/sys/class/net/{interface}/mtu"))
        .ok()
        .and_then(|m| m.trim().parse::<u32>().ok())
    {
        if let Some(w) = mtu_warning_ipv6(mtu, previous, udp, ipv6, cluster_ipv6) {
            error!(interface, mtu, "{w}");
        }
        if let Some(w) = mtu_warning(mtu, previous, udp, cluster_ipv6) {
            warn!(interface, mtu, "{w}");
        }
    }
}

/// Ports of NAT services on this node's own address (`node`) that lie in
/// the kernel's ephemeral range (`low..=high`, net.ipv4.ip_local_port_range)
/// and are not reserved (`reserved`, net.ipv4.ip_local_reserved_ports): the
/// node's own outgoing connections may take such a port as their source, and
/// their replies (to the node's address and that port) would be balanced as
/// the service's. Pure: the caller reads the sysctls.
pub fn nat_ports_at_risk(
    config: &Config,
    node: IpAddr,
    (low, high): (u16, u16),
    reserved: &dyn Fn(u16) -> bool,
) -> Vec<(String, u16)> {
    config
        .services
        .iter()
        .filter(|s| s.mode == crate::types::ServiceMode::Nat && s.vip == node)
        .filter(|s| (low..=high).contains(&s.port) && !reserved(s.port))
        .map(|s| (s.name.clone(), s.port))
        .collect()
}

/// Services (by key) whose `mode` differs between `old` and `new`: name,
/// old mode, new mode.
pub fn mode_changes(
    old: &Config,
    new: &Config,
) -> Vec<(String, crate::types::ServiceMode, crate::types::ServiceMode)> {
    new.services
        .iter()
        .filter_map(|s| {
            let o = old.service(&s.key())?;
            (o.mode != s.mode).then(|| (s.name.clone(), o.mode, s.mode))
        })
        .collect()
}

/// Ports some socket of this host listens on (TCP LISTEN in /proc/net/tcp,
/// bound UDP in /proc/net/udp) at `node` or at any address, as (protocol,
/// port) with protocol 6 or 17. Lines that do not parse are skipped.
fn own_listening_ports(node: IpAddr) -> std::collections::BTreeSet<(u8, u16)> {
    let mut out = std::collections::BTreeSet::new();
    // NAT services (what this is for) need an IPv4 cluster network.
    let IpAddr::V4(node) = node else {
        return out;
    };
    for (file, proto) in [("/proc/net/tcp", 6u8), ("/proc/net/udp", 17u8)] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        out.extend(
            listening_in(&text, proto, node)
                .into_iter()
                .map(|p| (proto, p)),
        );
    }
    out
}

/// The local ports of `text` (the format of /proc/net/tcp and /proc/net/udp:
/// `sl local_address rem_address st ...`, addresses as little-endian hex
/// `AABBCCDD:PPPP`) bound at `node` or 0.0.0.0 that listen: TCP state 0A
/// (LISTEN), UDP state 07 (unconnected, bound). Pure.
pub fn listening_in(text: &str, proto: u8, node: Ipv4Addr) -> Vec<u16> {
    let want_state = if proto == 6 { "0A" } else { "07" };
    let node_hex = format!("{:08X}", u32::from_le_bytes(node.octets()));
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let local = f.nth(1)?;
            let state = f.nth(1)?;
            let (addr, port) = local.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            (state == want_state && (addr == node_hex || addr == "00000000")).then_some(port)
        })
        .collect()
}

/// Parse net.ipv4.ip_local_reserved_ports ("8080,9000-9100" or empty).
/// Returns: whether `port` is in it.
fn port_reserved(list: &str, port: u16) -> bool {
    list.trim().split(',').filter(|p| !p.is_empty()).any(|p| {
        let mut it = p.split('-').map(|x| x.trim().parse::<u16>().ok());
        match (it.next().flatten(), it.next().flatten()) {
            (Some(a), Some(b)) => (a..=b).contains(&port),
            (Some(a), None) => a == port,
            _ => false,
        }
    })
}

/// Warn about NAT services on this node's own address whose port the
/// kernel may give its own outgoing connections ([`nat_ports_at_risk`]).
fn check_nat_ports(config: &Config, node: IpAddr) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| {
            let mut it = r.split_whitespace().map(|x| x.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        });
    // A service on this node's own address and port takes every packet to
    // them: a socket of the node's own there (SSH, BGP, metrics) is cut off.
    let own = own_listening_ports(node);
    for svc in config.services.iter().filter(|s| {
        s.mode == crate::types::ServiceMode::Nat && s.vip == node && s.target_port != s.port
    }) {
        if own.contains(&(svc.protocol.number(), svc.port)) {
            warn!(
                service = %svc.name,
                port = svc.port,
                "this node itself listens on the NAT service's port {} of its own address: the balancer takes every packet to it, so that local service is cut off (choose another port for the service)",
                svc.port
            );
        }
    }
    let Some(range) = range else { return };
    let reserved =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_reserved_ports").unwrap_or_default();
    for (name, port) in nat_ports_at_risk(config, node, range, &|p| port_reserved(&reserved, p)) {
        warn!(
            service = %name,
            port,
            "NAT service on this node's own address uses port {port}, which is in the kernel's ephemeral range {}-{}: an outgoing connection of this node from that port would have its replies balanced as the service's; reserve it (sysctl -w net.ipv4.ip_local_reserved_ports={port}) or use a port outside the range",
            range.0,
            range.1
        );
    }
}

/// Warnings about the interface that the operator must hear at start
/// (`udp`: the config has a UDP service).
fn check_interface(interface: &str, balancer: bool, hops: (u32, bool, bool, bool)) {
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    check_mtu(interface, hops);
    // The FIB lookups are of the outer destination: IPv6 on an IPv6
    // cluster network.
    let family = if hops.3 { "ipv6" } else { "ipv4" };
    if balancer {
        if let Some("0") = read(format!(
            "/proc/sys/net/{family}/conf/{interface}/forwarding"
        ))
        .as_deref()
        {
            warn!(
                interface,
                "net.{family}.conf.{interface}.forwarding is 0: bpf_fib_lookup refuses to answer, so every balanced packet takes the slower TC path; set it to 1 for the XDP fast path"
            );
        }
    }
}

/// The periodic probes of a balancer: health checks and load scrapes.
struct Probes<'a> {
    node: IpAddr,
    ifindex: i32,
    checkers: Option<Checkers>,
    scrapers: Option<Scrapers>,
    /// Encapsulated checks (None: no service has them, not a balancer, or
    /// the packet socket could not be opened).
    encap: Option<EncapCheckers>,
    encap_results: mpsc::Sender<EncapResult>,
    /// Why the encapsulated checks cannot run, once logged.
    encap_unavailable: Option<String>,
    runtime: &'a tokio::runtime::Runtime,
    results: mpsc::Sender<CheckResult>,
    loads: mpsc::Sender<LoadResult>,
}

impl Probes<'_> {
    /// Make the probes match `cp`: on a balancer, a check (and an
    /// encapsulated check where configured) per backend in the file that is
    /// not offline and a scrape per dynamic-weights backend; on other nodes
    /// none (backends do not build tables from health).
    fn sync(&mut self, cp: &ControlPlane) -> Result<()> {
        if !cp.is_balancer(self.node) {
            self.checkers = None;
            self.scrapers = None;
            self.encap = None;
            return Ok(());
        }
        let handle = self.runtime.handle().clone();
        if self.checkers.is_none() {
            self.checkers = Some(Checkers::new(handle.clone(), self.results.clone())?);
        }
        if self.scrapers.is_none() {
            self.scrapers = Some(Scrapers::new(handle, self.loads.clone())?);
        }
        let targets = cp.check_targets();
        if let Some(c) = self.checkers.as_mut() {
            c.sync(&targets);
        }
        let loads = cp.load_targets();
        if let Some(s) = self.scrapers.as_mut() {
            s.sync(&loads);
        }
        self.sync_encap(cp);
        Ok(())
    }

    /// Encapsulated checks for the services that have them (balancers only,
    /// like every check). Their sockets are opened once; if that fails
    /// (no CAP_NET_RAW), the error is logged once and backends are judged
    /// by their regular check alone.
    fn sync_encap(&mut self, cp: &ControlPlane) {
        let targets = cp.encap_targets();
        let gue_port = cp.config().cluster.gue_port;
        // The configuration gives no service of an IPv6 cluster network
        // the check (its probe is GUE over outer IPv4).
        let IpAddr::V4(node) = self.node else {
            self.encap = None;
            return;
        };
        if targets.is_empty() {
            self.encap = None;
            return;
        }
        if !self
            .encap
            .as_ref()
            .is_some_and(|e| e.matches(node, gue_port))
        {
            self.encap = None;
            match EncapCheckers::new(
                self.runtime.handle().clone(),
                node,
                gue_port,
                self.ifindex,
                self.encap_results.clone(),
            ) {
                Ok(e) => {
                    self.encap = Some(e);
                    self.encap_unavailable = None;
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    if self.encap_unavailable.as_deref() != Some(why.as_str()) {
                        error!("encapsulated health checks cannot run, backends are judged by their regular check only: {why}");
                        self.encap_unavailable = Some(why);
                    }
                    return;
                }
            }
        }
        if let Some(e) = self.encap.as_mut() {
            e.sync(&targets);
        }
    }
}

/// Log the filters about to be installed: per rule its prefixes and
/// sources; on a node that is not a balancer, that none are loaded.
fn log_filters(set: &FilterSet, compile_ms: u64, balancer: bool, config: &Config) {
    let configured = !config.filters.deny.is_empty()
        || !config.filters.rate_limit.is_empty()
        || config.services.iter().any(|s| !s.filters.is_empty());
    if !balancer {
        if configured {
            info!("filters are configured but apply where the XDP balancer runs; this node is not a balancer");
        }
        return;
    }
    if set.is_empty() {
        return;
    }
    info!(
        rules = set.rules.len(),
        prefixes = set.prefixes(),
        compile_ms,
        "filters compiled"
    );
    for r in &set.rules {
        let sources: Vec<String> = r
            .sources
            .iter()
            .map(|s| {
                if s.ipv6_ignored > 0 {
                    format!(
                        "{}: {} (+{} IPv6 ignored: not filtered yet)",
                        s.origin, s.prefixes, s.ipv6_ignored
                    )
                } else {
                    format!("{}: {}", s.origin, s.prefixes)
                }
            })
            .collect();
        info!(
            id = r.id,
            scope = %r.ident.scope,
            kind = r.ident.kind.as_str(),
            name = %r.ident.name,
            dry_run = r.dry_run,
            "filter rule: {}",
            if sources.is_empty() { "rate limit".to_string() } else { sources.join(", ") }
        );
    }
}

/// Rule ids of an adopted data plane's rules, by identity (scope 0 global,
/// 1 + a service index of `cp`).
fn adopted_rule_ids(dp: &Dataplane<'_>, cp: &ControlPlane) -> BTreeMap<RuleIdent, u16> {
    let by_index: BTreeMap<u32, ServiceKey> =
        cp.services().iter().map(|(k, s)| (s.index, *k)).collect();
    dp.live_filter_rules()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| {
            let scope = match r.scope {
                0 => Scope::Global,
                s => Scope::Service(*by_index.get(&(s - 1))?),
            };
            Some((
                RuleIdent {
                    scope,
                    kind: r.kind,
                    name: r.name,
                },
                r.id,
            ))
        })
        .collect()
}

/// Everything the control loop owns.
struct Daemon<'a, 'obj> {
    opts: &'a RunOptions,
    node: IpAddr,
    clock: SystemClock,
    dp: Dataplane<'obj>,
    cp: ControlPlane,
    probes: Probes<'a>,
    /// Keeps the hops' neighbour entries fresh (once a second).
    neighbours: crate::neighbours::Refresher,
    last_neighbours: Instant,
    metrics: metrics::Shared,
    host_cpu: HostCpu,
    last_snapshot: Instant,
    last_qps_ms: u64,
    last_reload: Option<ReloadStatus>,
    reloads: (u64, u64),
    state_dirty: bool,
    state_written: Instant,
    /// Encodes and writes the state file off the event loop.
    state_writer: StateWriter,
    /// Milliseconds the last read and compile of the filter lists took.
    filters_compile_ms: u64,
    /// VIP announcements through BIRD (`routing:`; docs/design.md "Several
    /// balancers").
    routing: Option<RoutingHook>,
    /// Tables shared through etcd (`cluster.etcd`; docs/design.md
    /// "Several balancers").
    cluster: Option<ClusterHook>,
    /// Where the etcd task sends its events.
    cluster_events: mpsc::UnboundedSender<crate::cluster::etcd::Event>,
    /// Where the reload thread sends what it read.
    reload_reads: mpsc::Sender<(u64, ReloadRead, Instant)>,
    /// Number of the latest reload read (an abandoned one's result is
    /// ignored).
    reload_seq: u64,
    /// A reload's read under way, since when.
    reload_reading: Option<Instant>,
    /// A SIGHUP came while a read was under way: read again after it.
    reload_again: bool,
    /// When to read the file again after a reload that found no room in
    /// the bucket pool while regions released by the change before it
    /// waited out their quarantine (once: a retry that fails the same way
    /// is not retried).
    reload_retry_at: Option<Instant>,
    /// The reload under way is such a retry.
    reload_is_retry: bool,
}

/// Longest a reload's read of the files may take before it is abandoned.
const RELOAD_READ_LIMIT: Duration = Duration::from_secs(30);

/// What the reload thread read ([`Daemon::start_reload`]).
enum ReloadRead {
    /// The file is unreadable or invalid.
    Config(ConfigError),
    /// The file is valid; a list file it names is not (or the lists cover a
    /// cluster address).
    Lists(ConfigError),
    /// Both read and checked; the lists compiled (`compile_ms`). Read and
    /// validated in `parse_us`, with the lists in `read_us` (from the
    /// start of the read), using `read_cpu_us` of the thread's CPU time.
    Ready {
        config: Box<Config>,
        filters: Arc<FilterSet>,
        compile_ms: u64,
        parse_us: u64,
        read_us: u64,
        read_cpu_us: u64,
    },
}

/// The announcer of `routing:` and what it was last told.
struct RoutingHook {
    config: crate::config::Routing,
    announcer: crate::routing::bird::Announcer,
    decisions: Vec<crate::routing::VipDecision>,
    announced: std::collections::BTreeSet<Ipv4Addr>,
    /// The announcer was told at least once.
    told: bool,
    /// Drained (config or drain file) at the last decision.
    drained: bool,
    /// BIRD reconfigurations (ok, failed) the state file shows.
    applies: (u64, u64),
}

/// The etcd task of `cluster.etcd` and what this balancer follows.
struct ClusterHook {
    sync: crate::cluster::etcd::ClusterSync,
    role: crate::cluster::Role,
    /// The published tables seen, by service, with their mod revisions.
    published: crate::cluster::Published,
    /// The same, decoded (what [`ControlPlane::follow`] installs).
    followed: BTreeMap<ServiceKey, crate::cluster::FollowedTable>,
    /// Newest revision of the tables in force here.
    revision: i64,
    lag_ms: Option<u64>,
    updates: u64,
    /// Leader: a publication asked for and not yet acknowledged, since.
    publishing_since: Option<Instant>,
    /// What the state file last showed of the task (connected, leader,
    /// an error): a change is written at the next tick.
    shown: (bool, Option<IpAddr>, bool),
    /// Follower: the revision of each published table the data plane
    /// holds. A plan of this node's own logic (a health result, a paced
    /// step) that the published table overrides writes nothing for it.
    installed: BTreeMap<ServiceKey, i64>,
}

/// One state file to write: what [`Status::of`] reads.
struct StateJob {
    cp: ControlPlane,
    node: IpAddr,
    role: crate::status::Role,
    config: PathBuf,
    last_reload: Option<ReloadStatus>,
    filters: Option<FiltersStatus>,
    routing: Option<crate::routing::RoutingStatus>,
    cluster: Option<crate::cluster::ClusterStatus>,
    /// After writing, give the allocator's free memory back to the system
    /// (after a reload: the replaced state's tables are free by then).
    trim: bool,
}

/// Writes the state file on a thread of its own, so that a reload's swap
/// or a health event's install never waits for the encoding (tens of ms
/// with 1,000 services) and the disk. Jobs still queued when the thread
/// gets to them are skipped for the newest one.
struct StateWriter {
    tx: Option<std::sync::mpsc::Sender<StateJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The next job also returns freed memory to the system.
    trim_next: bool,
}

impl StateWriter {
    fn start(path: PathBuf) -> StateWriter {
        let (tx, rx) = std::sync::mpsc::channel::<StateJob>();
        let thread = std::thread::Builder::new()
            .name("nilb-state".into())
            .spawn(move || {
                // Warn once per run of failures, not every 5 s.
                let mut failing = false;
                while let Ok(mut job) = rx.recv() {
                    let mut trim = job.trim;
                    while let Ok(newer) = rx.try_recv() {
                        job = newer;
                        trim |= job.trim;
                    }
                    let written = {
                        let mut status =
                            Status::of(&job.cp, job.node, job.role, &job.config, job.last_reload);
                        status.filters = job.filters;
                        status.routing = job.routing;
                        status.cluster = job.cluster;
                        status.kernel = Some(crate::features::KernelStatus::of(
                            crate::dataplane::probe::kernel_features(),
                            job.cp.refused(),
                        ));
                        status.write(&path)
                    };
                    match written {
                        Ok(()) => failing = false,
                        Err(e) if !failing => {
                            failing = true;
                            warn!("writing the state file: {e:#}");
                        }
                        Err(_) => {}
                    }
                    // The state's copy goes before the trim (the encoding
                    // went with the block above).
                    drop(job.cp);
                    if trim {
                        crate::dataplane::abi::release_free_memory();
                    }
                }
            })
            .ok();
        if thread.is_none() {
            warn!("could not start the state file writer thread: the state file is not written");
        }
        StateWriter {
            tx: thread.is_some().then_some(tx),
            thread,
            trim_next: false,
        }
    }

    fn queue(&mut self, mut job: StateJob) {
        job.trim |= std::mem::take(&mut self.trim_next);
        if let Some(tx) = &self.tx {
            let _ = tx.send(job);
        }
    }

    /// Have the next job return freed memory to the system.
    fn trim_after_next(&mut self) {
        self.trim_next = true;
    }

    /// Write what is queued, then stop the thread.
    fn finish(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What nilb needs from the host, each missing piece explained in one line.
fn preflight() -> Result<()> {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("the kernel has no BTF (/sys/kernel/btf/vmlinux): nilb's CO-RE programs need a kernel built with CONFIG_DEBUG_INFO_BTF=y");
    }
    if !nix::unistd::geteuid().is_root() {
        warn!("not running as root: loading BPF needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (and CAP_SYS_ADMIN to mount bpffs)");
    }
    Ok(())
}

/// Turn a permission error at load/attach time into the one-line
/// explanation an operator needs (XDP attach failures carry their own hint,
/// see [`crate::dataplane::hints`]).
fn explain(e: anyhow::Error) -> anyhow::Error {
    if crate::netlink::errno_in(&e) == Some(nix::errno::Errno::EPERM as i32) {
        e.context("permission denied: run as root, or with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_SYS_ADMIN")
    } else {
        e
    }
}

/// Run the daemon until SIGINT/SIGTERM.
pub fn run(opts: &RunOptions) -> Result<()> {
    preflight()?;
    let config = Config::load(&opts.config).map_err(anyhow::Error::new)?;
    let ifindex = nix::net::if_::if_nametoindex(opts.interface.as_str())
        .with_context(|| format!("no interface named {}", opts.interface))?
        as i32;
    let node = match opts.node_address {
        Some(a) => a,
        None => interface_address(
            &opts.interface,
            config.cluster.is_ipv6(),
            &config.cluster_addresses(),
        )?,
    };
    if let Some(problem) = node_family_problem(&config, node) {
        bail!("{problem}");
    }
    if !is_local_address(node) {
        bail!("--node-address {node} is not an address of this host; GUE sent to it would never arrive here");
    }
    // The state file is rewritten while nilb runs and removed when it stops:
    // never the configuration itself (also through a link).
    if same_file(&opts.state_file, &opts.config) {
        bail!(
            "--state-file {} is the configuration file {}: nilb rewrites its state file and removes it when it stops; give it a path of its own",
            opts.state_file.display(),
            opts.config.display()
        );
    }
    let lock = lock_interface(&opts.interface, ifindex as i32)?;
    let balancer = config.cluster.balancers.contains(&node);
    if !config.cluster_addresses().contains(&node) {
        warn!(%node, "this node is neither a balancer nor a backend in the config; GUE from it will be rejected by others");
    }
    check_interface(&opts.interface, balancer, gue_hops_of(&config));
    check_nat_ports(&config, node);
    // Pins where a restarted daemon finds them (dataplane::pins).
    let placement = crate::dataplane::pins::prepare(&opts.pin_dir)?;
    let (pin_lock, pin_lock_path) = lock_pin_dir(&placement.dir)?;
    let opts = &RunOptions {
        pin_dir: placement.dir,
        ..opts.clone()
    };

    let control = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the control runtime")?;
    let checks = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.check_threads.max(1))
        .thread_name("nilb-health")
        .enable_all()
        .build()
        .context("starting the health-check runtime")?;
    let result = control
        .block_on(serve(opts, config, ifindex, node, &checks))
        .map_err(explain);
    // Remove the lock file while still holding the lock (a daemon that
    // starts now opens a fresh file).
    let _ = std::fs::remove_file(lock_path(ifindex as i32));
    let _ = std::fs::remove_file(&pin_lock_path);
    drop(lock);
    drop(pin_lock);
    checks.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(
    opts: &RunOptions,
    config: Config,
    ifindex: i32,
    node: IpAddr,
    checks: &tokio::runtime::Runtime,
) -> Result<()> {
    // Signals first, so that a SIGTERM during start-up still detaches.
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;

    let balancer = config.cluster.balancers.contains(&node);
    let clock = SystemClock;
    let mut storage = MaybeUninit::uninit();
    // The bucket pool holds every table of the config plus one of the
    // largest (a resize), in whole chunks, and at a restart the pinned
    // regions beside the new ones this start installs; adopted pins that
    // are smaller grow, larger ones keep their size (docs/design.md "Maps").
    let pool = crate::dataplane::start_pool_buckets(&config, Some(&opts.pin_dir));
    let usual = crate::dataplane::pool_buckets(&config);
    if pool > usual {
        info!(
            buckets = pool,
            tables_plus_largest = usual,
            "bucket pool sized for the pinned tables beside their new regions: this start installs tables of new sizes while the old ones are in use"
        );
    }
    if let Some(problem) = crate::dataplane::PinnedMaps::open(&opts.pin_dir)
        .ok()
        .and_then(|p| p.settings().ok())
        .and_then(|s| pinned_family_problem(s.node, node, &opts.pin_dir))
    {
        bail!("{problem}");
    }
    let mut dp = Dataplane::load_pinned_sized(
        &mut storage,
        Some(&opts.pin_dir),
        pool,
        config.cluster.nat.max_flows,
    )?;
    dp.set_interface(ifindex, opts.xdp_mode);
    let now = clock::control_ms(&clock);
    let (mut cp, mut plan) = if dp.adopted() {
        let mut live = dp.live_tables().context("reading the adopted tables")?;
        // Move times written by an older daemon are Unix seconds.
        let (boot, wall) = (clock.boot_ms(), clock.wall_ms());
        for (_, lt) in &mut live {
            for m in &mut lt.moved_at {
                *m = clock::adopted_move_time(*m, boot, wall);
            }
        }
        let records = dp
            .control_state()
            .context("reading the adopted control state")?;
        let n_records = records.len();
        let (cp, plan) = ControlPlane::adopt(config, live, records, now);
        let removing: usize = cp
            .services()
            .values()
            .flat_map(|s| s.backends.values())
            .filter(|b| b.removed_at_ms.is_some())
            .count();
        info!(
            services = cp.services().len(),
            records = n_records,
            removing,
            "adopted the pinned maps of an earlier daemon: tables, health verdicts, backends being removed, counters and cluster set carry over"
        );
        (cp, plan)
    } else {
        let cp = ControlPlane::new(config, now);
        let plan = cp.full_plan();
        (cp, plan)
    };
    // What this kernel lacks: one line per feature that is off, and the
    // parts of the config that need one are left out of every plan.
    crate::features::log_start(dp.kernel_features());
    cp.set_kernel_features(dp.kernel_features());
    crate::features::log_refusals(&cp.refused());
    // The edge filters: an adopted data plane keeps filtering with the
    // lists it has until the new generation is flipped in.
    let prev = if dp.adopted() {
        adopted_rule_ids(&dp, &cp)
    } else {
        BTreeMap::new()
    };
    let (filters, filters_compile_ms) = lists::prepare(
        cp.config(),
        &opts.config,
        &crate::config::ipv4_only(&cp.cluster_addresses()),
        balancer,
        None,
        &prev,
    )
    .map_err(anyhow::Error::new)?;
    log_filters(&filters, filters_compile_ms, balancer, cp.config());
    cp.set_filters(filters);
    // At start the filters are always written: an adopted data plane may
    // hold an earlier daemon's rules that this config no longer has.
    plan.filters = true;
    // A grown pool: the programs still attached read the old one, so a
    // table that needs a region of its own (a new service, a new size) is
    // installed only once the new programs are attached; until then its
    // `services` entry keeps naming the region the old pool holds.
    // The same when an earlier start grew the pins and was stopped before
    // it attached: the attached programs read the pool it replaced.
    let other_pool = dp.adopted()
        && dp.attached_reads_another_pool(ifindex).unwrap_or_else(|e| {
            // Not known: deferring is the safe side (those tables wait
            // for the attach, a few ms).
            warn!("reading which maps the attached XDP program uses: {e:#}");
            true
        });
    let after_attach = if dp.pool_grew().is_some() || other_pool {
        let later = plan.take_new_regions(&cp, &|k| dp.table_size(k));
        if !later.install.is_empty() {
            let (old, new) = dp.pool_grew().unzip();
            info!(
                old_buckets = old,
                new_buckets = new,
                attached_reads_another_pool = other_pool,
                tables = later.install.len(),
                "bucket pool grown: new and resized tables are installed once the new programs are attached"
            );
        }
        later
    } else {
        Plan::default()
    };
    // Re-installing adopted tables writes the same buckets: no flow moves.
    cp.apply(&mut dp, node, &plan)
        .context("filling the data plane maps")?;
    if let Some(i) = dp
        .last_filter_install()
        .filter(|_| !cp.filters().is_empty())
    {
        info!(
            generation = i.generation,
            maps_ms = i.maps_ms,
            bytes = i.bytes,
            long_entries = i.long_entries,
            trie_entries = i.trie_entries,
            "filters installed"
        );
    }
    // New programs replace the old ones atomically; the maps stay.
    dp.attach_tc(ifindex)?;
    dp.sync_nat_sweep(cp.config())?;
    if balancer {
        if opts.xdp_mode == XdpMode::Generic {
            warn!("XDP in generic (skb) mode: correct but far slower than native mode");
        }
        dp.attach_xdp(ifindex, opts.xdp_mode)?;
    } else {
        // Not a balancer: the backend XDP program (it replaces a stale
        // balancer left by an earlier daemon), else TC alone.
        let backend = if opts.xdp_mode == XdpMode::Native {
            dp.attach_xdp_backend(ifindex)
        } else {
            Err(anyhow::anyhow!("XDP mode is generic"))
        };
        match backend {
            Ok(()) => {
                info!("backend XDP program attached (native mode): GUE decapsulated before GRO")
            }
            Err(e) => {
                warn!(
                    "backend XDP program not attached ({e:#}): TC decapsulates all GUE, after GRO"
                );
                if let Some(id) = dp.remove_stale_xdp(ifindex)? {
                    warn!(
                        id,
                        "removed a nilb XDP program left by an earlier daemon: this node is not a balancer"
                    );
                }
            }
        }
    }
    if !after_attach.is_empty() {
        cp.apply(&mut dp, node, &after_attach)
            .context("installing the new and resized tables in the grown bucket pool")?;
    }
    let (tx, mut rx) = mpsc::channel::<CheckResult>(4096);
    let (load_tx, mut load_rx) = mpsc::channel::<LoadResult>(4096);
    let (encap_tx, mut encap_rx) = mpsc::channel::<EncapResult>(4096);
    let (reload_tx, mut reload_rx) = mpsc::channel::<(u64, ReloadRead, Instant)>(2);
    let (cluster_tx, mut cluster_rx) = mpsc::unbounded_channel::<crate::cluster::etcd::Event>();
    let shared = metrics::Shared::default();
    if let Some(addr) = opts.metrics_address {
        shared.set_source(std::sync::Arc::new(dp.stats_maps()?));
        metrics::serve(checks, addr, shared.clone())?;
    }
    let mut d = Daemon {
        opts,
        node,
        clock,
        dp,
        cp,
        probes: Probes {
            node,
            ifindex,
            checkers: None,
            scrapers: None,
            encap: None,
            encap_results: encap_tx,
            encap_unavailable: None,
            runtime: checks,
            results: tx,
            loads: load_tx,
        },
        neighbours: crate::neighbours::Refresher::new(ifindex as u32),
        last_neighbours: Instant::now(),
        metrics: shared,
        host_cpu: HostCpu::default(),
        last_snapshot: Instant::now() - Duration::from_secs(10),
        last_qps_ms: 0,
        last_reload: None,
        reloads: (0, 0),
        state_dirty: true,
        state_written: Instant::now(),
        state_writer: StateWriter::start(opts.state_file.clone()),
        filters_compile_ms,
        routing: None,
        cluster: None,
        cluster_events: cluster_tx,
        reload_reads: reload_tx,
        reload_seq: 0,
        reload_reading: None,
        reload_again: false,
        reload_retry_at: None,
        reload_is_retry: false,
    };
    d.probes.sync(&d.cp)?;
    for (key, st) in d.cp.services() {
        if st.mode != Mode::Normal || st.exiting {
            d.log_mode(key, st.mode, st.exiting);
        }
    }
    // What building the tables freed (the helper threads' temporaries,
    // see crate::split) goes back to the system once the first state is
    // written.
    d.state_writer.trim_after_next();
    d.write_state();
    info!(
        %node,
        interface = %opts.interface,
        balancer,
        services = d.cp.config().services.len(),
        checks = d.probes.checkers.as_ref().map_or(0, |c| c.len()),
        pin_dir = %opts.pin_dir.display(),
        state_file = %opts.state_file.display(),
        "ready: {}",
        if balancer {
            "XDP balancer and TC second chance attached"
        } else if d.dp.xdp_backend_attached().unwrap_or(false) {
            "backend XDP and TC second chance attached (not a balancer)"
        } else {
            "TC second chance attached (not a balancer)"
        }
    );
    d.update_routing(false);
    d.update_cluster();

    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = hup.recv() => d.start_reload(),
            Some((seq, read, started)) = reload_rx.recv() => d.reload(seq, read, started),
            _ = term.recv() => break,
            _ = int.recv() => break,
            Some(first) = rx.recv() => {
                d.on_result(first);
                // Take whatever else is queued in the same pass.
                while let Ok(r) = rx.try_recv() {
                    d.on_result(r);
                }
            }
            Some(first) = encap_rx.recv() => {
                d.on_encap_result(first);
                while let Ok(r) = encap_rx.try_recv() {
                    d.on_encap_result(r);
                }
            }
            Some(first) = load_rx.recv() => {
                d.on_load(first);
                while let Ok(r) = load_rx.try_recv() {
                    d.on_load(r);
                }
            }
            Some(first) = cluster_rx.recv() => {
                d.on_cluster_event(first);
                while let Ok(e) = cluster_rx.try_recv() {
                    d.on_cluster_event(e);
                }
            }
            _ = tick.tick() => d.on_tick(),
        }
    }

    d.probes.checkers = None;
    d.probes.scrapers = None;
    d.probes.encap = None;
    if !opts.keep_dataplane {
        d.withdraw_for_stop();
    }
    // A leader hands over at once (its lease revoked) rather than after
    // the lease runs out.
    if let Some(hook) = d.cluster.take() {
        hook.sync.stop(Duration::from_secs(2));
    }
    // Queued state writes finish first: the last state file below must
    // not be overwritten, nor a removed one written again.
    d.state_writer.finish();
    if opts.keep_dataplane {
        info!(
            pin_dir = %opts.pin_dir.display(),
            "stopping, data plane kept: programs stay attached and maps pinned for the next nilb to adopt"
        );
        d.dp.keep_on_exit();
        // `nilb status` keeps answering from the last state, marked as such
        // (the data plane still forwards with these tables).
        d.write_state_stopped();
    } else {
        info!("stopping: detaching and removing pins");
        d.dp.detach()?;
        d.dp.unpin()?;
        let _ = std::fs::remove_file(&opts.state_file);
    }
    info!("stopped");
    Ok(())
}

impl Daemon<'_, '_> {
    /// The control plane's clock: boot-time ms, so that a step of the wall
    /// clock changes nothing and the times kept in the maps survive a
    /// restart.
    fn now_ms(&self) -> u64 {
        clock::control_ms(&self.clock)
    }

    /// Whether the running config makes this node a balancer.
    fn is_balancer(&self) -> bool {
        self.cp.is_balancer(self.node)
    }

    /// Whether our XDP balancer is attached, as the kernel says (false if
    /// it cannot be asked).
    fn xdp_running(&self) -> bool {
        match self.dp.xdp_attached() {
            Ok(a) => a,
            Err(e) => {
                warn!("asking whether XDP is attached: {e:#}");
                false
            }
        }
    }

    /// Log what a service's mode means for its traffic.
    fn log_mode(&self, key: &ServiceKey, mode: Mode, exiting: bool) {
        let service = self.service_name(key);
        let st = self.cp.service(key);
        let names = |f: &dyn Fn(&crate::control::BackendRuntime) -> bool| -> String {
            st.map(|s| {
                s.backends
                    .values()
                    .filter(|b| f(b))
                    .map(|b| b.config.label())
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
        };
        match mode {
            Mode::FailOpen => {
                error!(%service, %key, "FAIL-OPEN: no backend is healthy; using every backend not offline")
            }
            Mode::Panic => {
                let threshold = self
                    .cp
                    .config()
                    .service(key)
                    .map_or(0, |s| s.panic_threshold_percent);
                error!(%service, %key, threshold, "PANIC: healthy active backends hold less than panic_threshold_percent of the weight; using every active backend, healthy or not")
            }
            Mode::DrainedFallback => warn!(
                %service,
                %key,
                serving = %names(&|b| b.config.state == crate::config::BackendState::Drained && b.health.is_up()),
                "no active backend is healthy: healthy drained backends serve instead of failing open onto failing ones"
            ),
            Mode::Normal if exiting => {
                warn!(%service, %key, "healthy backends again: leaving fail-open/panic in paced steps (what the healthy backends own at most doubles per step)")
            }
            Mode::Normal => info!(%service, %key, "healthy backends again: normal mode"),
        }
    }

    fn on_encap_result(&mut self, r: EncapResult) {
        if !self.probes.encap.as_ref().is_some_and(|c| c.is_current(&r)) {
            return;
        }
        let now = self.now_ms();
        let encap_of = |cp: &ControlPlane| {
            cp.service(&r.service)
                .and_then(|s| s.backends.get(&r.dip))
                .map(|b| b.encap.health)
        };
        let before = encap_of(&self.cp);
        let error_text = r.result.as_ref().err().cloned();
        let plan = self.cp.observe_encap(&r.service, r.dip, r.result, now);
        let after = encap_of(&self.cp);
        if before != after {
            let service = self.service_name(&r.service);
            match (after, error_text) {
                (Some(h), Some(e)) => {
                    warn!(%service, dip = %r.dip, encap = %h, error = %e, "backend encapsulated check changed")
                }
                (Some(h), None) => {
                    info!(%service, dip = %r.dip, encap = %h, "backend encapsulated check changed")
                }
                _ => {}
            }
            self.state_dirty = true;
        }
        if let Some(plan) = plan {
            self.apply(&plan, "encapsulated check");
        }
    }

    /// Every hop in the tables (first hops and previous owners), but this
    /// node.
    fn hops(&self) -> std::collections::BTreeSet<IpAddr> {
        let mut hops = std::collections::BTreeSet::new();
        for st in self.cp.services().values() {
            hops.extend(st.table.hops());
        }
        hops.remove(&self.node);
        hops
    }

    fn on_load(&mut self, r: LoadResult) {
        if !self
            .probes
            .scrapers
            .as_ref()
            .is_some_and(|s| s.is_current(&r))
        {
            return;
        }
        if let Err(e) = &r.sample {
            tracing::debug!(dip = %r.dip, error = %e, "load reading failed");
        }
        let now = self.now_ms();
        self.cp.record_load(&r.service, r.dip, r.sample, now);
    }

    /// `source: qps`: sample each backend's new-connection counter.
    fn sample_connections(&mut self) {
        let now = self.now_ms();
        let mut samples = Vec::new();
        for s in &self.cp.config().services {
            let Some(dw) = &s.dynamic_weight else {
                continue;
            };
            if dw.source != crate::config::LoadSource::Qps
                || now.saturating_sub(self.last_qps_ms) < dw.interval_ms
            {
                continue;
            }
            let Some(st) = self.cp.service(&s.key()) else {
                continue;
            };
            for b in st.backends.values() {
                let sample = self
                    .dp
                    .backend_stats(b.slot)
                    .map(|x| crate::types::LoadSample::Connections(x.syns))
                    .map_err(|e| format!("{e:#}"));
                samples.push((s.key(), b.config.dip, sample));
            }
        }
        if samples.is_empty() {
            return;
        }
        self.last_qps_ms = now;
        for (key, dip, sample) in samples {
            self.cp.record_load(&key, dip, sample, now);
        }
    }

    /// Hand the metrics server the state its snapshot is built from
    /// (about once a second, and at once with `now`): a copy of the
    /// control plane (one reference count per service) and the daemon's
    /// facts. The server reads the counters and encodes when scraped, off
    /// this loop.
    fn publish_metrics(&mut self, now: bool) {
        if self.opts.metrics_address.is_none()
            || (!now && self.last_snapshot.elapsed() < Duration::from_millis(900))
        {
            return;
        }
        self.last_snapshot = Instant::now();
        let cpu = self
            .host_cpu
            .sample()
            .map(|t| (t, self.host_cpu.utilisation()));
        let facts = metrics::DaemonFacts {
            reloads: self.reloads,
            balancer: self.xdp_running(),
            balancer_configured: self.is_balancer(),
            last_reload_ok: self.last_reload.as_ref().map(|r| r.ok),
            neighbour_refreshes: (
                self.neighbours.refreshes,
                self.neighbours.resolves,
                self.neighbours.changed,
            ),
        };
        self.metrics.publish(self.cp.clone(), facts, cpu);
    }

    /// Log the tables `plan` installed: one INFO line each up to
    /// [`TABLE_LINES_MAX`]; beyond that one INFO line with the sums (a
    /// reload of 1,000 services writes one line, not 1,000) and each table
    /// at DEBUG.
    fn log_installs(&self, plan: &Plan, why: &str) {
        let many = plan.install.len() > TABLE_LINES_MAX;
        for (key, moves) in &plan.install {
            // Buckets the install compares with the maps (and stores where
            // they differ): the changed ones, or the whole table.
            let written = match plan.changed.get(key) {
                Some(c) => c.len(),
                None => self.cp.service(key).map_or(0, |s| s.table.size() as usize),
            };
            if many {
                debug!(service = %self.service_name(key), %key, moved = moves.moved, forced = moves.forced, swapped = moves.swapped, pending = moves.pending, written, reason = why, "table installed");
            } else {
                info!(service = %self.service_name(key), %key, moved = moves.moved, forced = moves.forced, swapped = moves.swapped, pending = moves.pending, written, reason = why, "table installed");
            }
        }
        if many {
            let sum = |f: fn(&crate::table::Moves) -> usize| -> usize {
                plan.install.values().map(f).sum()
            };
            info!(
                tables = plan.install.len(),
                moved = sum(|m| m.moved),
                forced = sum(|m| m.forced),
                swapped = sum(|m| m.swapped),
                pending = sum(|m| m.pending),
                reason = why,
                "tables installed (each at debug level)"
            );
        }
    }

    /// Apply `plan`; on failure re-install the full running state.
    fn apply(&mut self, plan: &Plan, why: &str) {
        // A follower installs the published tables, whatever its own
        // logic just did to them.
        let followed;
        let following = self.follow_plan();
        let is_following = following.is_some();
        let plan = match following {
            Some(extra) => {
                let mut p = plan.clone();
                p.merge(extra);
                // Tables the data plane already holds as published: this
                // node's own step was undone in the state, nothing to write
                // (no map writes and no log line per tick while its own
                // verdicts differ from the leader's).
                for key in self.installed_as_published() {
                    p.install.remove(&key);
                    p.changed.remove(&key);
                }
                followed = p;
                &followed
            }
            None => plan,
        };
        if plan.is_idle() {
            return;
        }
        for (key, mode) in &plan.mode_changed {
            let exiting = self.cp.service(key).is_some_and(|s| s.exiting);
            self.log_mode(key, *mode, exiting);
        }
        for (key, changes) in &plan.reweighted {
            let service = self.service_name(key);
            let summary: Vec<String> = changes
                .iter()
                .map(|c| match c.load {
                    Some(l) => format!("{} load {l:.3} weight {:.1}->{:.1}", c.dip, c.from, c.to),
                    None => format!("{} load unreadable weight {:.1}", c.dip, c.from),
                })
                .collect();
            info!(%service, "dynamic weights: {}", summary.join(", "));
            self.state_dirty = true;
        }
        for (key, dip) in &plan.removed_backends {
            info!(service = %self.service_name(key), %dip, "removed backend drained out and dropped");
        }
        let mut written = true;
        if let Err(e) = self.cp.apply(&mut self.dp, self.node, plan) {
            error!("applying table changes ({why}) failed: {e:#}; re-installing the running state");
            if let Err(e) = self.cp.apply(&mut self.dp, self.node, &self.cp.full_plan()) {
                error!("re-installing failed too: {e:#}");
                written = false;
            }
        }
        if written && is_following {
            self.note_installed();
        }
        self.publish(plan.install.keys().copied().collect(), &plan.remove);
        self.log_installs(plan, why);
        self.state_dirty = true;
    }

    /// Start, restart or stop the etcd task to match `cluster.etcd` of the
    /// running config (docs/design.md "Several balancers").
    /// Only balancers take part: a node that is only a backend runs no
    /// health checks and forwards no VIP traffic, so it must never lead.
    fn update_cluster(&mut self) {
        let wanted = self
            .cp
            .config()
            .cluster
            .etcd
            .clone()
            .filter(|_| self.is_balancer());
        if self.cluster.as_ref().map(|h| &h.sync.config) == wanted.as_ref() {
            return;
        }
        if let Some(old) = self.cluster.take() {
            info!("cluster.etcd changed: leaving the cluster");
            old.sync.stop(Duration::from_secs(2));
        }
        let Some(config) = wanted else { return };
        match crate::cluster::etcd::ClusterSync::start(
            self.probes.runtime,
            config.clone(),
            self.node,
            self.cluster_events.clone(),
        ) {
            Ok(sync) => {
                info!(
                    endpoints = %config.endpoints.join(","),
                    prefix = %config.prefix,
                    "sharing tables through etcd: the elected leader publishes, the others follow"
                );
                self.cluster = Some(ClusterHook {
                    sync,
                    role: crate::cluster::Role::Unknown,
                    published: BTreeMap::new(),
                    followed: BTreeMap::new(),
                    revision: 0,
                    lag_ms: None,
                    updates: 0,
                    publishing_since: None,
                    shown: (false, None, false),
                    installed: BTreeMap::new(),
                });
            }
            Err(e) => error!("cannot start the etcd client: {e:#}; tables are not shared"),
        }
        self.state_dirty = true;
    }

    /// Wall-clock ms of a move time of the control plane's clock, and back.
    fn clock_offsets(&self) -> (u64, u64) {
        (self.clock.boot_ms(), self.clock.wall_ms())
    }

    /// The plan that installs the published tables over this state's
    /// (None: not a follower, or nothing published).
    fn follow_plan(&mut self) -> Option<Plan> {
        let hook = self.cluster.as_ref()?;
        if hook.role == crate::cluster::Role::Leader || hook.followed.is_empty() {
            return None;
        }
        let (boot, wall) = self.clock_offsets();
        let from_unix = move |u: u64| boot.saturating_sub(wall.saturating_sub(u)).min(boot);
        let now = self.now_ms();
        Some(self.cp.follow(&hook.followed, &from_unix, now))
    }

    /// Follower: the services whose published table (of a size this
    /// config runs, so [`ControlPlane::follow`] took it) is in the data
    /// plane already, at the revision seen last.
    fn installed_as_published(&self) -> Vec<ServiceKey> {
        let Some(hook) = self.cluster.as_ref() else {
            return Vec::new();
        };
        hook.published
            .iter()
            .filter(|(key, (rev, _))| hook.installed.get(*key) == Some(rev) && self.follows(key))
            .map(|(key, _)| *key)
            .collect()
    }

    /// Whether the published table of `key` is the one in force here (it
    /// was seen, and its size is the one the config asks for).
    fn follows(&self, key: &ServiceKey) -> bool {
        let Some(hook) = self.cluster.as_ref() else {
            return false;
        };
        let size = self.cp.service_config(key).map(|s| s.table_size as usize);
        self.cp.service(key).is_some()
            && hook
                .followed
                .get(key)
                .is_some_and(|f| Some(f.buckets.len()) == size)
    }

    /// Follower: the data plane now holds every followed table.
    fn note_installed(&mut self) {
        let keys: Vec<(ServiceKey, i64)> = match self.cluster.as_ref() {
            Some(hook) => hook
                .published
                .iter()
                .map(|(k, (rev, _))| (*k, *rev))
                .collect(),
            None => return,
        };
        let keys: Vec<(ServiceKey, i64)> =
            keys.into_iter().filter(|(k, _)| self.follows(k)).collect();
        if let Some(hook) = self.cluster.as_mut() {
            hook.installed = keys.into_iter().collect();
        }
    }

    /// Leader: publish the tables of `keys` (those that differ from what
    /// is published) and delete the keys of `removed` services.
    fn publish(&mut self, keys: Vec<ServiceKey>, removed: &[ServiceKey]) {
        let Some(hook) = self.cluster.as_mut() else {
            return;
        };
        if hook.role != crate::cluster::Role::Leader {
            return;
        }
        let (boot, wall) = (self.clock.boot_ms(), self.clock.wall_ms());
        let to_unix = move |m: u64| wall.saturating_sub(boot.saturating_sub(m));
        let mut tables = Vec::new();
        for key in keys {
            let Some(st) = self.cp.service(&key) else {
                continue;
            };
            let t =
                crate::cluster::PublishedTable::encode(&key, &st.table, self.node, wall, &to_unix);
            if hook
                .published
                .get(&key)
                .is_some_and(|(_, p)| p.same_table(&t))
            {
                continue;
            }
            if let Ok(f) = t.decode() {
                hook.followed.insert(key, f);
            }
            hook.published.insert(key, (hook.revision, t.clone()));
            tables.push(t);
        }
        let removed: Vec<ServiceKey> = removed
            .iter()
            .filter(|k| hook.published.remove(k).is_some())
            .copied()
            .collect();
        for k in &removed {
            hook.followed.remove(k);
        }
        if tables.is_empty() && removed.is_empty() {
            return;
        }
        hook.publishing_since.get_or_insert_with(Instant::now);
        hook.sync.publish(tables, removed);
    }

    fn on_cluster_event(&mut self, e: crate::cluster::etcd::Event) {
        use crate::cluster::{etcd::Event, Role};
        let Some(hook) = self.cluster.as_mut() else {
            return;
        };
        match e {
            Event::Tables {
                tables,
                all,
                revision: _,
            } => {
                if all {
                    hook.published.clear();
                    hook.followed.clear();
                    hook.installed.clear();
                }
                let wall = self.clock.wall_ms();
                let mut newest: Option<(i64, u64)> = None;
                for (rev, t) in tables {
                    let Some(key) = t.service_key() else { continue };
                    if hook.published.get(&key).is_some_and(|(r, _)| *r > rev) {
                        continue;
                    }
                    if let Some(why) = t.family_problem(self.node.is_ipv6()) {
                        error!(%key, leader = %t.leader, "a published table cannot be installed here: {why}; the running table stays");
                        continue;
                    }
                    match t.decode() {
                        Ok(f) => {
                            hook.followed.insert(key, f);
                        }
                        Err(e) => {
                            warn!(%key, error = %e, "a published table does not decode; ignored");
                            continue;
                        }
                    }
                    if newest.is_none_or(|(r, _)| rev > r) {
                        newest = Some((rev, t.at_ms));
                    }
                    hook.published.insert(key, (rev, t));
                }
                if let Some((rev, at)) = newest {
                    hook.revision = hook.revision.max(rev);
                    if hook.role != Role::Leader {
                        hook.lag_ms = Some(wall.saturating_sub(at));
                        hook.updates += 1;
                    }
                }
                if hook.role != Role::Leader {
                    let why = match newest {
                        Some((rev, _)) => {
                            format!("published by the cluster's leader (etcd revision {rev})")
                        }
                        None => "published by the cluster's leader".to_string(),
                    };
                    self.apply(&Plan::default(), &why);
                }
                self.state_dirty = true;
            }
            Event::Role(role) => {
                hook.role = role;
                hook.installed.clear();
                self.state_dirty = true;
                match role {
                    Role::Leader => {
                        info!("cluster leader: computing and publishing the tables (starting from the published ones)");
                        // The snapshot came first: install it, then go on
                        // from it and publish whatever differs.
                        hook.role = Role::Follower;
                        self.apply(&Plan::default(), "published by the previous leader");
                        if let Some(h) = self.cluster.as_mut() {
                            h.role = Role::Leader;
                        }
                        let keys = self.cp.services().keys().copied().collect();
                        let gone: Vec<ServiceKey> = self
                            .cluster
                            .as_ref()
                            .map(|h| {
                                h.published
                                    .keys()
                                    .filter(|k| self.cp.service(k).is_none())
                                    .copied()
                                    .collect()
                            })
                            .unwrap_or_default();
                        self.publish(keys, &gone);
                    }
                    _ => {
                        info!(
                            role = role.name(),
                            "cluster follower: installing the tables the leader publishes"
                        );
                        self.apply(&Plan::default(), "published by the cluster's leader");
                    }
                }
            }
            Event::Published(revision) => {
                hook.revision = hook.revision.max(revision);
                if let Some(since) = hook.publishing_since.take() {
                    let ms = since.elapsed().as_millis() as u64;
                    hook.lag_ms = Some(ms);
                    if ms >= SLOW_PUBLICATION_MS {
                        // The followers install it no earlier: say where the
                        // time went (a slow etcd, or a busy host).
                        warn!(
                            ms,
                            revision,
                            "publishing the tables to etcd took {ms} ms (followers forward by the previous ones until they read them)"
                        );
                    }
                }
                hook.updates += 1;
                self.state_dirty = true;
            }
        }
    }

    /// `cluster` of the state file.
    fn cluster_status(&self) -> Option<crate::cluster::ClusterStatus> {
        let hook = self.cluster.as_ref()?;
        let task = hook.sync.status();
        let pending = match hook.role {
            crate::cluster::Role::Leader => usize::from(hook.publishing_since.is_some()),
            _ => self
                .cp
                .services()
                .keys()
                .filter(|k| !hook.followed.contains_key(k))
                .count(),
        };
        Some(crate::cluster::ClusterStatus {
            endpoints: hook.sync.config.endpoints.clone(),
            prefix: hook.sync.config.prefix.clone(),
            connected: task.connected,
            role: hook.role,
            leader: task.leader,
            revision: hook.revision,
            pending,
            lag_ms: hook.lag_ms,
            last_contact: task.last_contact.map(rfc3339),
            error: task.error,
            updates: hook.updates,
        })
    }

    fn service_name(&self, key: &ServiceKey) -> String {
        self.cp
            .config()
            .service(key)
            .map(|s| s.name.clone())
            .unwrap_or_else(|| key.to_string())
    }

    fn on_result(&mut self, r: CheckResult) {
        if !self
            .probes
            .checkers
            .as_ref()
            .is_some_and(|c| c.is_current(&r))
        {
            return;
        }
        let now = self.now_ms();
        let seen = |cp: &ControlPlane| {
            cp.service(&r.service)
                .and_then(|s| s.backends.get(&r.dip))
                .map(|b| (b.health.health, b.health.last_error.clone()))
        };
        let before = seen(&self.cp);
        let error_text = r.result.as_ref().err().cloned();
        let plan = self.cp.observe(&r.service, r.dip, r.result, now);
        let seen_after = seen(&self.cp);
        // A new error text (a first failure, or another reason) is news for
        // the state file even when the verdict stays.
        if before.as_ref().map(|b| &b.1) != seen_after.as_ref().map(|b| &b.1) {
            self.state_dirty = true;
        }
        let (before, after) = (before.map(|b| b.0), seen_after.map(|b| b.0));
        if before != after {
            let service = self.service_name(&r.service);
            match (after, error_text) {
                (Some(h), Some(e)) => {
                    warn!(%service, dip = %r.dip, health = %h, error = %e, "backend health changed")
                }
                (Some(h), None) => {
                    info!(%service, dip = %r.dip, health = %h, "backend health changed")
                }
                _ => {}
            }
            self.state_dirty = true;
        }
        if let Some(plan) = plan {
            self.apply(&plan, "health");
        }
    }

    fn on_tick(&mut self) {
        self.check_reload_read();
        if self.reload_retry_at.is_some_and(|t| Instant::now() >= t) {
            self.reload_retry_at = None;
            self.reload_is_retry = true;
            info!("reading the configuration again: the regions the change before released are free now");
            self.start_reload();
        }
        if self.is_balancer() {
            self.sample_connections();
        }
        if self.last_neighbours.elapsed() >= Duration::from_secs(1) {
            self.last_neighbours = Instant::now();
            let hops = self.hops();
            let now = self.now_ms();
            self.neighbours.round(&hops, now);
        }
        let plan = self.cp.tick(self.now_ms());
        self.apply(&plan, "paced step");
        self.publish_metrics(false);
        self.update_routing(false);
        if let Some(hook) = self.cluster.as_mut() {
            let t = hook.sync.status();
            let shown = (t.connected, t.leader, t.error.is_some());
            if shown != hook.shown {
                hook.shown = shown;
                self.state_dirty = true;
            }
        }
        if self.state_dirty || self.state_written.elapsed() >= Duration::from_secs(5) {
            self.write_state();
        }
    }

    /// Start, restart or stop the announcer to match `routing:` of the
    /// running config, decide what to announce and tell BIRD when that
    /// changed (crate::routing). `stopping`: withdraw everything.
    fn update_routing(&mut self, stopping: bool) {
        use crate::routing::{self, bird};
        let wanted = self.cp.config().routing.clone();
        // A change of the decision's settings (drained, fail-open, grace)
        // keeps the announcer and what it announces: no flap.
        let same_bird = |a: &crate::config::Routing, b: &crate::config::Routing| {
            (&a.bird_socket, &a.routes_file, &a.birdc) == (&b.bird_socket, &b.routes_file, &b.birdc)
        };
        if let (Some(hook), Some(w)) = (self.routing.as_mut(), wanted.as_ref()) {
            if hook.config != *w && same_bird(&hook.config, w) {
                hook.config = w.clone();
                self.state_dirty = true;
            }
        }
        if self.routing.as_ref().map(|h| &h.config) != wanted.as_ref() {
            if let Some(old) = self.routing.take() {
                let same_file = wanted.as_ref().is_some_and(|w| {
                    routing::node_path(&w.routes_file, self.node)
                        == old.announcer.paths().routes_file
                });
                if same_file {
                    // The new announcer takes over the same routes file:
                    // nothing is withdrawn (no flap), but what the old
                    // worker still has queued must be written before the
                    // new one reads the file (bounded: each birdc call is).
                    let _ = old.announcer.flush(Duration::from_secs(2));
                } else {
                    // Leave nothing announced behind an announcer nilb no
                    // longer drives (routing removed or moved elsewhere).
                    // Its worker withdraws on its own thread once dropped:
                    // the loop does not wait for BIRD.
                    old.announcer.announce(Default::default());
                }
                drop(old);
            }
            if let Some(config) = wanted {
                let paths = bird::BirdPaths {
                    birdc: config.birdc.clone(),
                    socket: routing::node_path(&config.bird_socket, self.node),
                    routes_file: routing::node_path(&config.routes_file, self.node),
                };
                match bird::Announcer::start(paths) {
                    Ok(announcer) => {
                        info!(
                            socket = %announcer.paths().socket.display(),
                            routes_file = %announcer.paths().routes_file.display(),
                            "announcing VIPs through BIRD"
                        );
                        self.routing = Some(RoutingHook {
                            config,
                            announcer,
                            decisions: Vec::new(),
                            announced: Default::default(),
                            told: false,
                            drained: false,
                            applies: (0, 0),
                        });
                    }
                    Err(e) => error!("starting the BIRD announcer: {e}"),
                }
            }
            self.state_dirty = true;
        }
        if self.routing.is_none() {
            return;
        }
        let ready = !stopping && self.xdp_running();
        let Some(hook) = self.routing.as_mut() else {
            return;
        };
        // BIRD announces IPv4 VIPs (its routes file is an IPv4 static
        // protocol's include): IPv6 VIPs are routed by the operator
        // (docs/operations.md "Several balancers").
        let views: Vec<routing::ServiceView> = self
            .cp
            .services()
            .iter()
            .filter_map(|(key, st)| {
                let std::net::IpAddr::V4(vip) = key.vip else {
                    return None;
                };
                Some(routing::ServiceView {
                    vip,
                    healthy: st.backends.values().any(|b| {
                        b.config.state != crate::config::BackendState::Offline
                            && b.health.health == crate::health::Health::Up
                    }),
                    fail_open: st.fail_open(),
                })
            })
            .collect();
        let drain_file = routing::node_path(&hook.config.drain_file, self.node);
        let drained = hook.config.drained || drain_file.exists();
        if drained != hook.drained {
            info!(
                drained,
                drain_file = %drain_file.display(),
                "balancer {}",
                if drained { "drained: withdrawing every VIP" } else { "no longer drained" }
            );
            hook.drained = drained;
        }
        let node = routing::NodeView {
            dataplane_ready: ready,
            drained,
            stopping,
            withdraw_on_fail_open: hook.config.withdraw_on_fail_open,
        };
        let decisions = routing::decide(node, &views, &hook.announced);
        let announced = routing::announced(&decisions);
        if decisions != hook.decisions {
            for dcs in &decisions {
                if hook.decisions.iter().all(|o| o != dcs) {
                    info!(vip = %dcs.vip, announce = dcs.announce, reason = %dcs.reason, "VIP {}", if dcs.announce { "announced" } else { "withdrawn" });
                }
            }
            hook.decisions = decisions;
            self.state_dirty = true;
        }
        // The state file follows BIRD's reconfigurations at once (the
        // worker reports them asynchronously).
        let applies = hook.announcer.status().applies;
        if applies != hook.applies {
            hook.applies = applies;
            self.state_dirty = true;
        }
        if announced != hook.announced || !hook.told {
            hook.told = true;
            hook.announced = announced.clone();
            hook.announcer.announce(announced);
        }
    }

    /// SIGTERM: withdraw every VIP, wait until BIRD took it, then keep
    /// forwarding for `withdraw_grace_ms` while the router moves the
    /// traffic to the other balancers.
    fn withdraw_for_stop(&mut self) {
        if self.routing.is_none() {
            return;
        }
        self.update_routing(true);
        let Some(hook) = &self.routing else { return };
        let started = Instant::now();
        match hook.announcer.flush(Duration::from_secs(5)) {
            Ok(()) => info!(
                ms = started.elapsed().as_millis() as u64,
                grace_ms = hook.config.withdraw_grace_ms,
                "VIPs withdrawn; forwarding on during the grace time"
            ),
            Err(e) => warn!("withdrawing the VIPs: {e}"),
        }
        let grace = Duration::from_millis(hook.config.withdraw_grace_ms);
        self.write_state();
        std::thread::sleep(grace);
    }

    /// `routing` of the state file.
    fn routing_status(&self) -> Option<crate::routing::RoutingStatus> {
        let hook = self.routing.as_ref()?;
        Some(crate::routing::RoutingStatus {
            daemon: "bird".into(),
            bird_socket: hook.announcer.paths().socket.display().to_string(),
            routes_file: hook.announcer.paths().routes_file.display().to_string(),
            drained: hook.drained,
            withdraw_on_fail_open: hook.config.withdraw_on_fail_open,
            vips: hook.decisions.clone(),
            bird: hook.announcer.status(),
        })
    }

    /// The last state file of a daemon that stops and leaves the data plane
    /// running: marked as stopped, kept for `nilb status`.
    fn write_state_stopped(&mut self) {
        let mut status = Status::of(
            &self.cp,
            self.node,
            crate::status::Role {
                running: self.xdp_running(),
                configured: self.is_balancer(),
            },
            &self.opts.config,
            self.last_reload.clone(),
        );
        status.stopped = Some(format!(
            "at {} with --keep-dataplane",
            rfc3339(SystemTime::now())
        ));
        if let Err(e) = status.write(&self.opts.state_file) {
            warn!("writing the state file: {e:#}");
        }
    }

    /// Hand the state to the writer thread (a copy of the control plane
    /// costs one reference count per service): the file follows within
    /// the time its encoding takes, and the loop does not wait for it.
    fn write_state(&mut self) {
        let filters = (!self.cp.filters().is_empty()).then(|| {
            FiltersStatus::of(
                self.cp.filters(),
                self.filters_compile_ms,
                self.dp.last_filter_install(),
            )
        });
        self.state_writer.queue(StateJob {
            cp: self.cp.clone(),
            node: self.node,
            role: crate::status::Role {
                running: self.xdp_running(),
                configured: self.is_balancer(),
            },
            config: self.opts.config.clone(),
            last_reload: self.last_reload.clone(),
            filters,
            routing: self.routing_status(),
            cluster: self.cluster_status(),
            trim: false,
        });
        self.state_dirty = false;
        self.state_written = Instant::now();
    }

    fn record_reload(&mut self, error: Option<String>) {
        if error.is_some() {
            self.reloads.1 += 1;
        } else {
            self.reloads.0 += 1;
        }
        self.last_reload = Some(ReloadStatus {
            at: rfc3339(SystemTime::now()),
            ok: error.is_none(),
            error,
            succeeded: self.reloads.0,
            failed: self.reloads.1,
        });
        self.state_dirty = true;
    }

    /// One SIGHUP: validate, then [`ControlPlane::reload`] (tables, role,
    /// health checks as one transaction); on any error keep everything and
    /// record the failure with its reason.
    /// SIGHUP: read the file and its filter lists on a thread of their
    /// own, so that a slow or hung file system (NFS) or a large list to
    /// compile never stops the loop (health events, signals, pacing); the
    /// result comes back through `reload_reads` to [`Daemon::reload`]. A
    /// SIGHUP while a read is under way asks for one more read after it
    /// (the file may have changed again), not one per signal.
    fn start_reload(&mut self) {
        if let Some(since) = self.reload_reading {
            if since.elapsed() >= Duration::from_secs(5) && !self.reload_again {
                warn!(
                    reading_s = since.elapsed().as_secs(),
                    "SIGHUP while the previous reload is still reading the files (a slow or hung file system?): it reads again once that one ends or is abandoned after {} s",
                    RELOAD_READ_LIMIT.as_secs()
                );
            }
            self.reload_again = true;
            return;
        }
        let started = Instant::now();
        self.reload_reading = Some(started);
        self.reload_seq += 1;
        let seq = self.reload_seq;
        let path = self.opts.config.clone();
        let known = self.cp.cluster_addresses();
        let running = self.cp.filters().clone();
        let prev = self.cp.filters().ids();
        let node = self.node;
        let tx = self.reload_reads.clone();
        let spawned = std::thread::Builder::new()
            .name("nilb-reload".into())
            // Parsing is iterative (config::yaml); a large stack is a second
            // line of defence against input that recurses.
            .stack_size(16 << 20)
            .spawn(move || {
                let cpu0 = crate::split::thread_cpu_us();
                let read = match Config::load(&path) {
                    Err(e) => ReloadRead::Config(e),
                    // The cluster network keeps its family while nilb runs
                    // (the node's address and the pinned maps have it).
                    Ok(config) if node_family_problem(&config, node).is_some() => {
                        ReloadRead::Config(ConfigError {
                            problems: vec![crate::config::Problem {
                                path: "cluster.balancers".into(),
                                message: node_family_problem(&config, node).unwrap_or_default(),
                                position: None,
                            }],
                        })
                    }
                    Ok(config) => {
                        let parse_us = started.elapsed().as_micros() as u64;
                        // The lists are read and checked before anything
                        // changes: a bad list file rejects the reload like
                        // a bad configuration, and the lists in force stay.
                        let is_balancer = config.cluster.balancers.contains(&node);
                        let mut cluster = config.cluster_addresses();
                        cluster.extend(known);
                        match lists::prepare(
                            &config,
                            &path,
                            &crate::config::ipv4_only(&cluster),
                            is_balancer,
                            Some(&running),
                            &prev,
                        ) {
                            Ok((filters, compile_ms)) => ReloadRead::Ready {
                                config: Box::new(config),
                                filters,
                                compile_ms,
                                parse_us,
                                read_us: started.elapsed().as_micros() as u64,
                                read_cpu_us: crate::split::thread_cpu_us().saturating_sub(cpu0),
                            },
                            Err(e) => ReloadRead::Lists(e),
                        }
                    }
                };
                let _ = tx.blocking_send((seq, read, started));
            });
        if let Err(e) = spawned {
            self.reload_reading = None;
            error!("reload not started, running configuration kept: cannot start its thread: {e}");
            self.record_reload(Some(format!("cannot start the reload thread: {e}")));
            self.write_state();
        }
    }

    /// Apply what [`Daemon::start_reload`] read (`started`: when it began;
    /// `seq`: which read, a read abandoned by [`Daemon::check_reload_read`]
    /// is ignored when it ends after all).
    fn reload(&mut self, seq: u64, read: ReloadRead, started: Instant) {
        if seq != self.reload_seq || self.reload_reading.is_none() {
            warn!(
                after_s = started.elapsed().as_secs(),
                "an abandoned reload read ended after all; ignored (a later SIGHUP reads the file again)"
            );
            return;
        }
        self.reload_reading = None;
        self.apply_reload(read, started);
        if std::mem::take(&mut self.reload_again) {
            self.start_reload();
        }
    }

    /// Give up on a reload read that has taken more than
    /// [`RELOAD_READ_LIMIT`] (its thread is left to end on its own): the
    /// reload is recorded as failed, the running configuration stays, and
    /// the next SIGHUP (or one that came meanwhile) reads again.
    fn check_reload_read(&mut self) {
        let Some(since) = self.reload_reading else {
            return;
        };
        if since.elapsed() < RELOAD_READ_LIMIT {
            return;
        }
        let why = format!(
            "reading the configuration and its list files did not finish within {} s (a hung file system?); abandoned, running configuration kept",
            RELOAD_READ_LIMIT.as_secs()
        );
        error!("reload failed: {why}");
        self.reload_reading = None;
        self.record_reload(Some(why));
        self.write_state();
        if std::mem::take(&mut self.reload_again) {
            self.start_reload();
        }
    }

    fn apply_reload(&mut self, read: ReloadRead, started: Instant) {
        let cpu_started = crate::split::thread_cpu_us();
        let (config, filters, compile_ms, parse_us, read_us, read_cpu_us) = match read {
            ReloadRead::Ready {
                config,
                filters,
                compile_ms,
                parse_us,
                read_us,
                read_cpu_us,
            } => (*config, filters, compile_ms, parse_us, read_us, read_cpu_us),
            ReloadRead::Config(e) => {
                error!(
                    problems = e.problems.len(),
                    "reload rejected, running configuration kept: {}",
                    e.one_line()
                );
                self.record_reload(Some(e.one_line()));
                self.write_state();
                return;
            }
            ReloadRead::Lists(e) => {
                error!(
                    problems = e.problems.len(),
                    "reload rejected, running configuration and filter lists kept: {}",
                    e.one_line()
                );
                self.record_reload(Some(e.one_line()));
                self.write_state();
                return;
            }
        };
        let was_balancer = self.xdp_running();
        let is_balancer = config.cluster.balancers.contains(&self.node);
        let hops_before = gue_hops_of(self.cp.config());
        let hops_after = gue_hops_of(&config);
        for (name, from, to) in mode_changes(self.cp.config(), &config) {
            warn!(
                service = %name,
                %from,
                %to,
                "the service changes mode: its established connections end (their packets no longer reach the sockets they belong to); new connections take the new mode"
            );
        }
        let now = self.now_ms();
        // A follower's reload installs the published tables, not its own
        // steps (a service the leader has not published yet keeps its own).
        let following = self
            .cluster
            .as_ref()
            .filter(|h| h.role != crate::cluster::Role::Leader && !h.followed.is_empty())
            .map(|h| h.followed.clone());
        let (boot, wall) = self.clock_offsets();
        let from_unix = move |u: u64| boot.saturating_sub(wall.saturating_sub(u)).min(boot);
        let probes = &mut self.probes;
        let mut times = ReloadTimes::default();
        let result = self.cp.reload_adjusted(
            config,
            Some(filters),
            now,
            &mut self.dp,
            self.node,
            &mut |cp| probes.sync(cp),
            &mut times,
            &mut |next| match &following {
                Some(f) => next.follow(f, &from_unix, now),
                None => Plan::default(),
            },
        );
        let live_us = started.elapsed().as_micros() as u64;
        let plan = match result {
            Ok((next, plan)) => {
                self.reload_retry_at = None;
                self.reload_is_retry = false;
                // The replaced state goes now (what only it held: the
                // tables of the services that changed), not at the next
                // hand-over of the metrics.
                self.cp = next;
                self.publish_metrics(true);
                // Shared tables: start or stop the etcd task; a follower
                // puts the published tables back over what the reload
                // stepped, a leader publishes what it changed.
                self.update_cluster();
                self.apply(&Plan::default(), "published by the cluster's leader");
                self.publish(plan.install.keys().copied().collect(), &plan.remove);
                plan
            }
            Err(e) => {
                error!(stage = ?e.stage, "reload failed, running configuration and filters kept: {e}");
                self.record_reload(Some(e.to_string()));
                self.write_state();
                // Regions released less than QUARANTINE_MS ago are free
                // again after it: a change that found no room for that
                // reason alone gets one more try then.
                let quarantined = self.dp.pool_usage().quarantined;
                let was_retry = std::mem::take(&mut self.reload_is_retry);
                if e.no_room && quarantined > 0 && !was_retry {
                    let wait = Duration::from_millis(crate::dataplane::pool::QUARANTINE_MS + 200);
                    warn!(
                        quarantined,
                        retry_in_ms = wait.as_millis() as u64,
                        "the bucket pool holds regions the change before released less than {} ms ago: the file is read again once they are free",
                        crate::dataplane::pool::QUARANTINE_MS
                    );
                    self.reload_retry_at = Some(Instant::now() + wait);
                }
                return;
            }
        };
        let t = Instant::now();
        if plan.filters {
            self.filters_compile_ms = compile_ms;
            log_filters(self.cp.filters(), compile_ms, is_balancer, self.cp.config());
            if let Some(i) = self.dp.last_filter_install() {
                info!(
                    generation = i.generation,
                    maps_ms = i.maps_ms,
                    bytes = i.bytes,
                    "filters swapped in"
                );
            }
        }
        if let Err(e) = self.dp.sync_nat_sweep(self.cp.config()) {
            warn!("starting the NAT flow sweep: {e:#}");
        }
        check_nat_ports(self.cp.config(), self.node);
        // A reload that lengthens the hop list (more previous owners, a
        // first UDP service) needs a larger MTU between nodes: say so now,
        // not at the next start.
        if hops_after.0 + hops_after.1 as u32 > hops_before.0 + hops_before.1 as u32
            || (hops_after.2 && !hops_before.2)
        {
            check_mtu(&self.opts.interface, hops_after);
        }
        match (was_balancer, self.xdp_running()) {
            (false, true) => info!(node = %self.node, "this node became a balancer: XDP attached"),
            (true, false) => {
                info!(node = %self.node, "this node is no longer a balancer: XDP detached")
            }
            _ => {}
        }
        self.log_installs(&plan, "reload");
        crate::features::log_refusals(&self.cp.refused());
        if plan.remove.len() > TABLE_LINES_MAX {
            for key in &plan.remove {
                debug!(%key, "service removed");
            }
            info!(
                services = plan.remove.len(),
                "services removed (each at debug level)"
            );
        } else {
            for key in &plan.remove {
                info!(%key, "service removed");
            }
        }
        for (key, mode) in &plan.mode_changed {
            let exiting = self.cp.service(key).is_some_and(|s| s.exiting);
            self.log_mode(key, *mode, exiting);
        }
        let log_us = t.elapsed().as_micros() as u64;
        self.record_reload(None);
        // The writer thread gives the memory of the replaced state back to
        // the system once it has written this state.
        self.state_writer.trim_after_next();
        self.write_state();
        info!(
            installed = plan.install.len(),
            removed = plan.remove.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            cpu_us = read_cpu_us
                + crate::split::thread_cpu_us().saturating_sub(cpu_started)
                + times.helper_cpu_us,
            helper_cpu_us = times.helper_cpu_us,
            live_us,
            parse_us,
            read_us,
            update_us = times.update_us,
            apply_us = times.apply_us,
            role_us = times.role_us,
            checks_us = times.checks_us,
            log_us,
            "reload applied"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{
        listening_in, lock_pin_dir_in, mtu_warning, mtu_warning_ipv6, nat_ports_at_risk,
        node_address6, node_family_problem, pick_node_address, pinned_family_problem,
        port_reserved,
    };
    use std::net::{IpAddr, Ipv6Addr};

    /// The node address of an IPv6 cluster network found on the interface:
    /// the first global or unique-local one.
    #[test]
    fn an_interface_s_first_global_ipv6_address_is_the_node_s() {
        let a = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(
            node_address6(&[a("fe80::1"), a("::1"), a("2001:db8::11"), a("fd00::11")]),
            Some(a("2001:db8::11"))
        );
        assert_eq!(
            node_address6(&[a("fe80::1"), a("fd00::11")]),
            Some(a("fd00::11"))
        );
        assert_eq!(
            node_address6(&[a("fe80::1"), a("ff02::1"), a("::ffff:10.0.0.1")]),
            None
        );
        assert_eq!(node_address6(&[]), None);
    }

    /// An interface with several addresses: the one the configuration
    /// names is the node's (not a deprecated or second prefix's address
    /// listed before it); else the first usable of the family.
    #[test]
    fn the_configured_address_of_an_interface_is_the_node_s() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let on_if = [
            ip("10.0.0.5"),
            ip("fe80::1"),
            ip("2001:db8::bb"),
            ip("fd00::11"),
            ip("10.0.0.11"),
        ];
        let cluster = [ip("fd00::11"), ip("fd00::12")].into_iter().collect();
        assert_eq!(
            pick_node_address(&on_if, true, &cluster),
            Some(ip("fd00::11"))
        );
        let none = Default::default();
        assert_eq!(
            pick_node_address(&on_if, true, &none),
            Some(ip("2001:db8::bb"))
        );
        let cluster4 = [ip("10.0.0.11")].into_iter().collect();
        assert_eq!(
            pick_node_address(&on_if, false, &cluster4),
            Some(ip("10.0.0.11"))
        );
        assert_eq!(
            pick_node_address(&on_if, false, &none),
            Some(ip("10.0.0.5"))
        );
        assert_eq!(pick_node_address(&[ip("fe80::1")], true, &none), None);
    }

    /// The node's address is of the configuration's family, and pins of
    /// the other family are not adopted.
    #[test]
    fn the_node_and_the_pins_keep_the_cluster_network_s_family() {
        let c4 = crate::config::Config::parse(
            "version: 1\ncluster: {balancers: [10.0.0.11], hash_seed: 1}\nservices: []\n",
        )
        .unwrap();
        let c6 = crate::config::Config::parse(
            "version: 1\ncluster: {balancers: [\"2001:db8::11\"], hash_seed: 1}\nservices: []\n",
        )
        .unwrap();
        let n4: IpAddr = "10.0.0.11".parse().unwrap();
        let n6: IpAddr = "2001:db8::11".parse().unwrap();
        assert_eq!(node_family_problem(&c4, n4), None);
        assert_eq!(node_family_problem(&c6, n6), None);
        let p = node_family_problem(&c6, n4).unwrap();
        assert!(
            p.contains("10.0.0.11 is IPv4") && p.contains("is IPv6"),
            "{p}"
        );
        assert!(p.contains("--node-address an IPv6 address"), "{p}");
        assert!(node_family_problem(&c4, n6).is_some());
        let dir = std::path::Path::new("/sys/fs/bpf/nilb");
        assert_eq!(pinned_family_problem(n4, n4, dir), None);
        assert_eq!(pinned_family_problem(n6, n6, dir), None);
        // Pins whose nilb_config was never written say nothing.
        assert_eq!(
            pinned_family_problem("0.0.0.0".parse().unwrap(), n6, dir),
            None
        );
        let p = pinned_family_problem(n4, n6, dir).unwrap();
        assert!(p.contains("IPv4 cluster network"), "{p}");
        assert!(
            p.contains("nilb cleanup --interface IF --pin-dir /sys/fs/bpf/nilb"),
            "{p}"
        );
        assert!(pinned_family_problem(n6, n4, dir).is_some());
    }

    /// On an IPv6 cluster network GUE takes outer IPv6 (40) and 16 bytes
    /// per hop: one hop is 72 bytes, not 40.
    #[test]
    fn mtu_warnings_of_an_ipv6_cluster_network_count_its_larger_headers() {
        assert_eq!(mtu_warning(1572, 1, false, true), None);
        let w = mtu_warning(1540, 1, false, true).unwrap();
        assert!(w.contains("plus 72 bytes of GUE"), "{w}");
        assert!(w.contains("raise the MTU between nodes to 1572"), "{w}");
        let w = mtu_warning(1572, 1, true, true).unwrap();
        assert!(w.contains("plus 88 bytes"), "{w}");
        assert!(mtu_warning_ipv6(1351, 1, false, true, true).is_some());
        assert_eq!(mtu_warning_ipv6(1352, 1, false, true, true), None);
    }

    /// /proc/net/tcp lines: LISTEN sockets at the node's address or any.
    #[test]
    fn listening_ports_of_the_node() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue\n\
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n\
   1: 0B00000A:00B3 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n\
   2: 0C00000A:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n\
   3: 0B00000A:1F90 0200000A:9C40 01 00000000:00000000 00:00000000 00000000     0\n";
        let node = "10.0.0.11".parse().unwrap();
        assert_eq!(listening_in(text, 6, node), vec![22, 179]);
    }

    /// NAT services on this node's own address whose port the kernel may
    /// give outgoing connections are named, unless reserved; other nodes'
    /// addresses, DSR services and ports outside the range are not.
    #[test]
    fn nat_ports_in_the_ephemeral_range_are_named() {
        let y = "version: 1\ncluster:\n  balancers: [10.0.0.11]\nservices:\n\
  - {name: low, vip: 10.0.0.11, port: 443, protocol: tcp, mode: nat, backends: [{dip: 10.0.0.12}]}\n\
  - {name: high, vip: 10.0.0.11, port: 40000, protocol: tcp, mode: nat, backends: [{dip: 10.0.0.12}]}\n\
  - {name: kept, vip: 10.0.0.11, port: 40001, protocol: udp, mode: nat, backends: [{dip: 10.0.0.12}]}\n\
  - {name: other, vip: 10.0.0.200, port: 40002, protocol: tcp, mode: nat, backends: [{dip: 10.0.0.13}]}\n\
  - {name: dsr, vip: 10.0.0.100, port: 40003, protocol: tcp, backends: [{dip: 10.0.0.13}]}\n";
        let c = crate::config::Config::parse(y).unwrap();
        let node = "10.0.0.11".parse().unwrap();
        let got = nat_ports_at_risk(&c, node, (32768, 60999), &|p| {
            port_reserved("40001,50000-50010", p)
        });
        assert_eq!(got, vec![("high".to_string(), 40000)]);
        assert!(port_reserved("8080, 9000-9100", 9050));
        assert!(!port_reserved("", 9050));
        assert!(!port_reserved("9000-9100", 9101));
    }

    /// A second daemon on the same pin directory, even reached through
    /// another path, is refused and named; another directory is not.
    #[test]
    fn one_daemon_per_pin_directory() {
        let base = std::env::temp_dir().join(format!("nilb-pinlock-{}", std::process::id()));
        let (pins, locks) = (base.join("pins"), base.join("locks"));
        let (first, _) = lock_pin_dir_in(&pins, &locks).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&pins, &link).unwrap();
        // (a lock is per open file: the same process opening it again is
        // refused as another process would be)
        let e = lock_pin_dir_in(&link, &locks).unwrap_err().to_string();
        assert!(
            e.contains("already runs with the pin directory")
                && e.contains(&std::process::id().to_string()),
            "{e}"
        );
        lock_pin_dir_in(&base.join("other"), &locks).unwrap();
        drop(first);
        lock_pin_dir_in(&link, &locks).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn mtu_warning_counts_two_hops_for_udp_services() {
        // TCP only: one hop at most, 1540 carries a 1500-byte packet.
        assert_eq!(mtu_warning(1540, 1, false, false), None);
        let w = mtu_warning(1500, 1, false, false).unwrap();
        assert!(w.contains("raise the MTU between nodes to 1540"), "{w}");
        assert!(w.contains("clamp the TCP MSS of the VIPs to 1420"), "{w}");
        // A UDP service: [second, first] adds 44 bytes; 1540 is 4 short.
        let w = mtu_warning(1540, 1, true, false).unwrap();
        assert!(w.contains("plus 44 bytes of GUE"), "{w}");
        assert!(w.contains("raise the MTU between nodes to 1544"), "{w}");
        assert!(!w.contains("MSS"), "TCP fits at 1540: {w}");
        assert_eq!(mtu_warning(1544, 1, true, false), None);
        let w = mtu_warning(1500, 1, true, false).unwrap();
        assert!(w.contains("clamp the TCP MSS of the VIPs to 1420"), "{w}");
    }

    #[test]
    fn mtu_warning_for_ipv6_clients_below_1280_plus_gue() {
        // Found by the IPv6 hostile trial: at MTU 1300 clients learn 1280
        // from Packet Too Big and still do not fit (1280 + 36 > 1300).
        let w = mtu_warning_ipv6(1300, 1, false, true, false).unwrap();
        assert!(
            w.contains("raise the MTU between nodes to at least 1320"),
            "{w}"
        );
        assert_eq!(mtu_warning_ipv6(1320, 1, false, true, false), None);
        // A UDP service and three previous owners: 1280 + 36 + 16.
        assert!(mtu_warning_ipv6(1331, 3, true, true, false).is_some());
        assert_eq!(mtu_warning_ipv6(1332, 3, true, true, false), None);
        assert_eq!(
            mtu_warning_ipv6(1300, 1, false, false, false),
            None,
            "no IPv6 service"
        );
    }

    #[test]
    fn mtu_warning_counts_every_previous_owner_listed() {
        // Three previous owners: TCP lists three hops (48 bytes), UDP four.
        assert_eq!(mtu_warning(1548, 3, false, false), None);
        let w = mtu_warning(1544, 3, false, false).unwrap();
        assert!(w.contains("plus 48 bytes of GUE"), "{w}");
        assert!(w.contains("raise the MTU between nodes to 1548"), "{w}");
        assert!(w.contains("clamp the TCP MSS of the VIPs to 1456"), "{w}");
        let w = mtu_warning(1548, 3, true, false).unwrap();
        assert!(w.contains("plus 52 bytes of GUE"), "{w}");
        assert!(w.contains("lists 4 hops"), "{w}");
        assert!(!w.contains("MSS"), "TCP fits at 1548: {w}");
        assert_eq!(mtu_warning(1552, 3, true, false), None);
        assert_eq!(
            crate::limits::GUE_OVERHEAD_MAX,
            crate::limits::gue_overhead(crate::limits::MAX_PREVIOUS_OWNERS + 1)
        );
    }
}
