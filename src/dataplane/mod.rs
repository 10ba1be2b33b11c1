//! The BPF data plane: loading the programs, filling their maps, attaching
//! them to an interface and reading counters back (docs/design.md "Maps").
//!
//! Programs (bpf/nilb.bpf.c): `nilb_xdp_balancer` on balancer nodes
//! (`nilb_xdp_balancer_c6` on an IPv6 cluster network, see
//! [`xdp_balancer_programs`]),
//! `nilb_xdp_backend` (native mode) on the other nodes (both decapsulate
//! GUE for the node before GRO when XDP can decide it, docs/design.md
//! "Second chance (TC)"), `nilb_tc_second_chance` on clsact ingress of
//! every node.
//!
//! Maps (layouts in bpf/nilb.h):
//! - `services`: HASH_OF_MAPS from {VIP, port, protocol} to one bucket
//!   ARRAY per service (`BPF_F_MMAPABLE`), whose element 0 is the table
//!   header (mask, service index) and element 1 + i bucket i (first and
//!   second hop, the first hop's `backend_stats` slot, when it last moved);
//! - `cluster_nodes`, `vips`: address sets (who may send GUE; which
//!   addresses are VIPs); `cluster_nodes6` holds the senders instead on an
//!   IPv6 cluster network;
//! - `nilb_config`: this node's address, the hash seed, the GUE port, the
//!   ICMP too-big rate, flags and the outer checksum base; on an IPv6
//!   cluster network `NILB_F_CLUSTER_IPV6`, no IPv4 address and checksum
//!   base, and the node's address in `config6`;
//! - `backends`: the address of each backend slot (family 4 or 6);
//! - `counters` (per-CPU, one per event), `service_stats` (per-CPU, by
//!   service index), `backend_stats` (per-CPU, by (service, backend) slot);
//! - `control_state`: the control plane's own state per (service, backend)
//!   slot (health verdict, administrative state, removal times), pinned so
//!   a restarted daemon keeps it; the programs never read it; an IPv6 VIP
//!   or DIP of a record is in `control_vip6` or `control_dip6`;
//! - `hop_cache`: the XDP program's cached FIB and neighbour answer per
//!   backend slot and CPU, and `icmp_limit`: its per-CPU token bucket for
//!   ICMP "fragmentation needed" replies (neither pinned nor written from
//!   user space);
//! - `rst_budget`: the TC program's RST rate limit for `unknown_flow: rst`
//!   (per CPU, not pinned, not written from user space);
//! - the edge filters' maps (`filter_*`, see [`filters`]): two generations
//!   of prefix tables, rules, their counters and the rate-limit state.
//!
//! A service's table is replaced by building a complete new inner array and
//! swapping it into the outer map in one update, so the programs never see an
//! empty or half-written table.
//!
//! Files: [`abi`] (layouts, raw kernel calls, test runs: all of nilb's
//! `unsafe`), [`ops`] (the [`DataplaneOps`] seam the control plane writes
//! through), [`pinned`] (the pinned maps' names and readers), [`filters`]
//! (installing and reading the edge filters).

pub mod abi;
pub mod filters;
pub mod hints;
pub mod install;
pub mod libbpf_log;
pub mod nat;
pub mod ops;
pub mod pinned;
pub mod pins;
pub mod pool;
pub mod probe;
mod quic;

use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, TcHook, TcHookBuilder, Xdp, XdpFlags};
use tracing::{info, warn};

use crate::config::Config;
use crate::limits;
use crate::table::Table;
use crate::types::{ServiceKey, UnknownFlow};
use abi::skel::{NilbSkel, NilbSkelBuilder};
pub use install::{ChainSource, Chains, RawTable};
pub use ops::{
    ControlRecord, DataplaneOps, NatPlan, NodeSettings, QuicRoute, RecordAdmin, RecordHealth,
    TableInstall,
};
use pinned::read_control_state;
pub use pinned::{LiveTable, PinnedMaps, ADOPT_WITHOUT, PINNED_MAPS, POOL_MAPS};

/// XDP attach mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpMode {
    /// Driver (native) mode: the fast path.
    Native,
    /// Generic (skb) mode: works everywhere, much slower.
    Generic,
}

impl XdpMode {
    fn flags(self) -> XdpFlags {
        match self {
            XdpMode::Native => XdpFlags::DRV_MODE,
            XdpMode::Generic => XdpFlags::SKB_MODE,
        }
    }
}

struct TcAttachment {
    hook: TcHook,
    /// NAT mode's reply program on clsact egress of the same interface.
    egress: Option<TcHook>,
    ifindex: i32,
    created_qdisc: bool,
}

/// A loaded data plane: programs verified, maps created (and optionally
/// pinned and attached). Dropping it detaches and unpins what it attached
/// and pinned.
pub struct Dataplane<'obj> {
    skel: NilbSkel<'obj>,
    xdp: Option<(i32, XdpMode)>,
    /// Interface this data plane attached `nilb_xdp_backend` to (native).
    xdp_backend: Option<i32>,
    /// Interface and mode [`DataplaneOps::set_xdp`] and
    /// [`DataplaneOps::xdp_attached`] work on.
    interface: Option<(i32, XdpMode)>,
    tc: Option<TcAttachment>,
    pin_dir: Option<PathBuf>,
    vips: BTreeSet<IpAddr>,
    nodes: BTreeSet<IpAddr>,
    /// What the QUIC-LB maps hold (they are not pinned: empty at load).
    quic: quic::QuicInstalled,
    adopted: bool,
    book: install::PoolBook,
    grew: Option<(u32, u32)>,
    settings: Option<NodeSettings>,
    filters: filters::FilterState,
    /// What NAT mode last wrote.
    nat: nat::NatState,
    /// The sweep of `nat_flows` ([`Dataplane::sync_nat_sweep`]) and the
    /// UDP timeout it runs with.
    nat_sweeper: Option<nat::Sweeper>,
    nat_sweep_timeout: Option<u64>,
    /// Its counts.
    nat_stats: std::sync::Arc<nat::SweepStats>,
}

/// Pool size of [`Dataplane::load`]: four chunks (262,144 buckets).
pub const DEFAULT_POOL_BUCKETS: u32 = 4 * pool::CHUNK_BUCKETS;

/// Buckets of the pool for `config`: every service's table plus one of the
/// largest, in whole chunks (docs/design.md "Maps").
pub fn pool_buckets(config: &Config) -> u32 {
    pool::pool_buckets_for(config.services.iter().map(|s| s.table_size))
}

/// Buckets of the pool for a start with `config` on the pins under
/// `pin_dir`: [`pool_buckets`], or more when the pinned pool's regions and
/// the new regions the start installs (new services, new table sizes) do
/// not fit that together ([`pool::pool_buckets_at_start`]; a restart that
/// resizes several tables at once needs each old region beside its new
/// one). Pins that cannot be read count as none: the load then replaces
/// or adopts them and reports why.
pub fn start_pool_buckets(config: &Config, pin_dir: Option<&Path>) -> u32 {
    let wanted: Vec<(ServiceKey, u32)> = config
        .services
        .iter()
        .map(|s| (s.key(), s.table_size))
        .collect();
    match pin_dir.and_then(|d| pinned::pinned_regions(d).ok()) {
        Some((pinned_pool, pinned)) => pool::pool_buckets_at_start(pinned_pool, &pinned, &wanted),
        None => pool_buckets(config),
    }
}

fn pool_maps<'a>(skel: &'a NilbSkel<'_>) -> install::PoolMaps<'a> {
    install::PoolMaps {
        services: &skel.maps.services,
        services6: Some(&skel.maps.services6),
        buckets: &skel.maps.buckets,
        first: Some(&skel.maps.bucket_first),
        moved: &skel.maps.bucket_moved,
        backends: &skel.maps.backends,
        cache_gen: Some(&skel.maps.cache_gen),
    }
}

/// Replace the pool maps pinned under `dir` (`old` buckets) by maps of
/// `new` buckets holding the old contents in their prefix: each new map is
/// created, filled, pinned beside the old pin and renamed over it (bpffs
/// renames atomically), so that a crash in between leaves a usable pin.
/// `bucket_first` grows with them when it is pinned at the old size.
fn grow_pinned_pool(dir: &Path, old: u32, new: u32) -> Result<()> {
    let per = abi::FIRST_HOPS_PER_ELEM;
    let first = libbpf_rs::MapHandle::from_pinned_path(dir.join(pinned::BUCKET_FIRST))
        .is_ok_and(|m| m.max_entries() == old / per);
    let first = first.then_some((pinned::BUCKET_FIRST, new / per));
    for (name, entries_new) in [(pinned::BUCKETS, new), (pinned::BUCKET_MOVED, new / 2)]
        .into_iter()
        .chain(first)
    {
        grow_pinned_map(dir, name, entries_new)?;
    }
    Ok(())
}

/// Replace the array pinned under `dir` as `name` by one of `entries_new`
/// elements holding its contents in the prefix: created, filled, pinned as
/// [`pinned::grown_pin`] and renamed over the old pin.
fn grow_pinned_map(dir: &Path, name: &str, entries_new: u32) -> Result<()> {
    let path = dir.join(name);
    let from = libbpf_rs::MapHandle::from_pinned_path(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    let bytes = from.max_entries() as usize * from.value_size() as usize;
    let mut to = abi::create_mmapable_array(name, from.value_size(), entries_new)?;
    let src = abi::ArrayMapping::new(from.as_fd(), 0, bytes, false)?;
    let dst = abi::ArrayMapping::new(to.as_fd(), 0, bytes, true)?;
    dst.write(0, &src.read(0, bytes));
    drop((src, dst));
    // bpffs refuses names with a dot.
    let tmp = dir.join(pinned::grown_pin(name));
    let _ = std::fs::remove_file(&tmp);
    to.pin(&tmp)
        .with_context(|| format!("pinning the grown {name}"))?;
    std::fs::rename(&tmp, &path)
        .with_context(|| format!("replacing {} by the grown pool", path.display()))
}

/// Finish a growth of the pool pinned under `dir` that an earlier start
/// did not (killed between [`grow_pinned_pool`]'s renames: `buckets` at the
/// new size, `bucket_moved` still at the old one), so that the pins adopt
/// as one pool instead of being replaced; and remove the `_grown` pins
/// such a start leaves. `bucket_moved` takes its grown copy if that has
/// the pool's size, else it grows from its own prefix: nothing wrote
/// either since (a growth runs before a start writes anything; the
/// programs never write these maps). `bucket_first` of another size is
/// made anew from the buckets at adoption. Returns what was done (for the
/// log); nothing if the pins are not such a pool.
fn finish_pool_growth(dir: &Path) -> Result<Vec<String>> {
    let mut done = Vec::new();
    let open = |n: &str| libbpf_rs::MapHandle::from_pinned_path(dir.join(n)).ok();
    let pool = open(pinned::BUCKETS)
        .map(|b| b.max_entries())
        .filter(|&p| p > 0 && p % pool::CHUNK_BUCKETS == 0);
    if let (Some(p), Some(moved)) = (pool, open(pinned::BUCKET_MOVED)) {
        let want = p / 2;
        if moved.max_entries() < want {
            let grown = open(&pinned::grown_pin(pinned::BUCKET_MOVED));
            if grown
                .is_some_and(|g| g.max_entries() == want && g.value_size() == moved.value_size())
            {
                std::fs::rename(
                    dir.join(pinned::grown_pin(pinned::BUCKET_MOVED)),
                    dir.join(pinned::BUCKET_MOVED),
                )
                .context("renaming the grown bucket_moved over the old pin")?;
                done.push(format!(
                    "bucket_moved: took the grown copy of {want} elements an earlier start left"
                ));
            } else {
                grow_pinned_map(dir, pinned::BUCKET_MOVED, want)?;
                done.push(format!(
                    "bucket_moved: grown from {} to {want} elements, as buckets was",
                    moved.max_entries()
                ));
            }
        }
    }
    for n in [pinned::BUCKETS, pinned::BUCKET_MOVED, pinned::BUCKET_FIRST] {
        let g = dir.join(pinned::grown_pin(n));
        if g.exists() {
            std::fs::remove_file(&g).with_context(|| format!("removing {}", g.display()))?;
            done.push(format!("removed {}, left by an earlier start", g.display()));
        }
    }
    Ok(done)
}

/// TC filter handle and priority nilb uses on clsact ingress ("ni").
pub const TC_HANDLE: u32 = 0x6e69;
/// TC filter priority nilb uses.
pub const TC_PRIORITY: u32 = 1;

/// Remove every nilb program from `ifindex` (XDP in either mode, the TC
/// filter) and the pins under `pin_dir`, whoever left them: what an operator
/// runs to take a node out after `--keep-dataplane` or a crash. Programs that
/// are not nilb's are left alone. Returns what was removed.
pub fn cleanup(ifindex: i32, pin_dir: &Path) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for (flag, mode) in [
        (libbpf_rs::libbpf_sys::XDP_FLAGS_DRV_MODE, "native"),
        (libbpf_rs::libbpf_sys::XDP_FLAGS_SKB_MODE, "generic"),
    ] {
        let id = abi::xdp_prog_id(ifindex, flag)?;
        if id == 0 {
            continue;
        }
        let name = program_name(id).unwrap_or_default();
        if name.starts_with("nilb_xdp") {
            abi::xdp_detach(ifindex, flag)?;
            done.push(format!(
                "detached XDP program {name} (id {id}, {mode} mode)"
            ));
        } else {
            done.push(format!("left XDP program {name} (id {id}): not nilb's"));
        }
    }
    // (no filter is a normal answer: libbpf's warning about it is not one)
    let tc = libbpf_log::expect_failure(|| abi::tc_filter_prog_id(ifindex, TC_HANDLE, TC_PRIORITY));
    if let Some(id) = tc {
        let name = program_name(id).unwrap_or_default();
        if name.starts_with("nilb_tc") {
            abi::tc_filter_detach(ifindex, TC_HANDLE, TC_PRIORITY)?;
            done.push(format!("detached TC ingress filter {name} (id {id})"));
        } else {
            done.push(format!("left TC filter {name} (id {id}): not nilb's"));
        }
    }
    let eg = libbpf_log::expect_failure(|| abi::tc_egress_prog_id(ifindex, TC_HANDLE, TC_PRIORITY));
    if let Some(id) = eg {
        let name = program_name(id).unwrap_or_default();
        if name.starts_with("nilb_tc") {
            abi::tc_egress_detach(ifindex, TC_HANDLE, TC_PRIORITY)?;
            done.push(format!("detached TC egress filter {name} (id {id})"));
        } else {
            done.push(format!(
                "left TC egress filter {name} (id {id}): not nilb's"
            ));
        }
    }
    let transient = pinned::transient_pins();
    for name in PINNED_MAPS
        .iter()
        .copied()
        .chain(transient.iter().map(String::as_str))
    {
        let path = pin_dir.join(name);
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            done.push(format!("removed pin {}", path.display()));
        }
    }
    let _ = std::fs::remove_dir(pin_dir);
    Ok(done)
}

/// After a native XDP attach: warn when the driver runs XDP_TX and
/// redirects in a slower locked mode for want of queues
/// ([`hints::xdp_tx_locked`]).
fn warn_locked_xdp_tx(ifindex: i32) {
    let Ok(name) = nix::net::if_::if_indextoname(ifindex as u32) else {
        return;
    };
    if let Some(w) = hints::xdp_tx_locked(&name.to_string_lossy()) {
        warn!("{w}");
    }
}

impl<'obj> Dataplane<'obj> {
    /// Open and load the BPF object (the verifier runs here), with no pins
    /// and a pool of [`DEFAULT_POOL_BUCKETS`] (replay, tests). `storage`
    /// must outlive the data plane (libbpf-rs skeleton rule).
    pub fn load(storage: &'obj mut MaybeUninit<OpenObject>) -> Result<Self> {
        Self::load_pinned(storage, None, DEFAULT_POOL_BUCKETS)
    }

    /// [`Dataplane::load`] with a pool sized for `config`'s tables
    /// ([`pool_buckets`]) and its `cluster.nat.max_flows`.
    pub fn load_for(storage: &'obj mut MaybeUninit<OpenObject>, config: &Config) -> Result<Self> {
        Self::load_pinned_sized(
            storage,
            None,
            pool_buckets(config),
            config.cluster.nat.max_flows,
        )
    }

    /// Load with the shared maps pinned under `pin_dir` and a bucket pool of
    /// `pool_buckets` (rounded up to whole chunks; [`pool_buckets`] sizes it
    /// for a config). Maps already pinned there by an earlier daemon
    /// (killed, or stopped with `--keep-dataplane`) are adopted: the new
    /// programs use the very same maps, so tables, counters and the cluster
    /// set carry over and no bucket moves. A pinned pool smaller than
    /// `pool_buckets` grows first: copied into the prefix of a new, larger
    /// pool (every region stays where it is, `services` is unchanged) that
    /// replaces the pin; until the new programs are attached the old ones
    /// read the old pool ([`Dataplane::pool_grew`]). A larger pinned pool
    /// keeps its size. Pins whose layout does not match this binary's maps
    /// (an upgrade that changed them) are replaced, with a warning.
    /// [`Dataplane::adopted`] tells which happened.
    pub fn load_pinned(
        storage: &'obj mut MaybeUninit<OpenObject>,
        pin_dir: Option<&Path>,
        pool_buckets: u32,
    ) -> Result<Self> {
        Self::load_pinned_sized(storage, pin_dir, pool_buckets, limits::NAT_DEFAULT_FLOWS)
    }

    /// [`Dataplane::load_pinned`] with a `nat_flows` of `nat_flows` entries
    /// (`cluster.nat.max_flows`). A pinned `nat_flows` of another size is
    /// copied into the new one (every flow, as far as it fits: the rest
    /// is dropped with a warning) and replaces it.
    pub fn load_pinned_sized(
        storage: &'obj mut MaybeUninit<OpenObject>,
        pin_dir: Option<&Path>,
        pool_buckets: u32,
        nat_flows: u32,
    ) -> Result<Self> {
        let chunk = pool::CHUNK_BUCKETS;
        let mut resized_flows: Option<libbpf_rs::MapHandle> = None;
        let mut pool_size = pool_buckets.div_ceil(chunk).max(1) * chunk;
        let kernel = probe::kernel_features();
        if let Some(e) = kernel.base_error() {
            bail!("{e}");
        }
        let mut open = NilbSkelBuilder::default()
            .open(storage)
            .context("opening the BPF object")?;
        // Programs of optional features the kernel lacks stay unloaded (the
        // others call their kfuncs behind bpf_ksym_exists, which the
        // verifier prunes): bpf/quic_lb.h.
        if !kernel.quic_lb_keyed() {
            open.progs.nilb_quic_set_key.set_autoload(false);
        }
        let mut adopted = false;
        let mut grew = None;
        if let Some(dir) = pin_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let finished = finish_pool_growth(dir)?;
            if !finished.is_empty() {
                warn!(
                    pin_dir = %dir.display(),
                    done = %finished.join("; "),
                    "an earlier start was stopped while it grew the pinned bucket pool: its growth is finished"
                );
            }
            let mut maps: Vec<libbpf_rs::OpenMapMut<'_>> = open
                .open_object_mut()
                .maps_mut()
                .filter(|m| PINNED_MAPS.iter().any(|n| m.name() == *n))
                .collect();
            if maps.len() != PINNED_MAPS.len() {
                bail!("the BPF object does not have all of the maps {PINNED_MAPS:?}");
            }
            let name = |m: &libbpf_rs::OpenMapMut<'_>| m.name().to_string_lossy().into_owned();
            let pinned = |m: &libbpf_rs::OpenMapMut<'_>| {
                libbpf_rs::MapHandle::from_pinned_path(dir.join(name(m))).ok()
            };
            // The pinned pool's size, if its two maps agree on one.
            let pinned_pool = {
                let b = maps
                    .iter()
                    .find(|m| name(m) == pinned::BUCKETS)
                    .and_then(pinned);
                let mv = maps
                    .iter()
                    .find(|m| name(m) == pinned::BUCKET_MOVED)
                    .and_then(pinned);
                match (b, mv) {
                    (Some(b), Some(mv))
                        if b.max_entries() % chunk == 0
                            && b.max_entries() > 0
                            && mv.max_entries() == b.max_entries() / 2 =>
                    {
                        Some(b.max_entries())
                    }
                    _ => None,
                }
            };
            // A nat_flows of another size: its pin renamed (not removed, so
            // that a daemon that dies before the copy is done leaves it for
            // the next one), kept open to copy from; the new map is created
            // and pinned. A renamed pin left by such a daemon is copied too.
            let flows_pin = dir.join(pinned::NAT_FLOWS);
            let resizing_pin = dir.join(pinned::NAT_FLOWS_RESIZING);
            if let Ok(h) = libbpf_rs::MapHandle::from_pinned_path(&resizing_pin) {
                resized_flows = Some(h);
            } else if let Ok(h) = libbpf_rs::MapHandle::from_pinned_path(&flows_pin) {
                let same_layout = maps.iter().any(|m| {
                    name(m) == pinned::NAT_FLOWS
                        && h.key_size() == m.key_size()
                        && h.value_size() == m.value_size()
                        && h.map_type() == m.map_type()
                });
                if same_layout && h.max_entries() != nat_flows {
                    std::fs::rename(&flows_pin, &resizing_pin)
                        .with_context(|| format!("replacing {}", flows_pin.display()))?;
                    resized_flows = Some(h);
                }
            }
            let is_pool = |m: &libbpf_rs::OpenMapMut<'_>| POOL_MAPS.contains(&name(m).as_str());
            let is_first = |m: &libbpf_rs::OpenMapMut<'_>| name(m) == pinned::BUCKET_FIRST;
            let matches = |map: &libbpf_rs::OpenMapMut<'_>| {
                pinned(map).is_some_and(|h| {
                    h.map_type() == map.map_type()
                        && h.key_size() == map.key_size()
                        && h.value_size() == map.value_size()
                        // libbpf refuses to reuse a pin of other flags
                        // (e.g. without BPF_F_MMAPABLE): such a pin is
                        // replaced, not a failed start
                        && h.info().is_ok_and(|i| i.info.map_flags == map.map_flags())
                        && if is_first(map) {
                            pinned_pool
                                .is_some_and(|p| h.max_entries() == p / abi::FIRST_HOPS_PER_ELEM)
                        } else {
                            h.max_entries() == map.max_entries()
                                || (is_pool(map) && pinned_pool.is_some())
                        }
                })
            };
            let optional =
                |m: &libbpf_rs::OpenMapMut<'_>| ADOPT_WITHOUT.contains(&name(m).as_str());
            let present = maps.iter().filter(|m| dir.join(name(m)).exists()).count();
            // The forwarding state: every map that is not optional is there
            // and fits this binary.
            let required_ok = maps.iter().filter(|m| !optional(m)).all(matches);
            if present > 0 && !required_ok {
                let unfit: Vec<String> = maps
                    .iter()
                    .filter(|m| !optional(m) && !matches(m))
                    .map(|m| {
                        let why = if dir.join(name(m)).exists() {
                            "another layout or size than this binary's"
                        } else {
                            "missing"
                        };
                        format!("{} ({why})", name(m))
                    })
                    .collect();
                warn!(
                    pin_dir = %dir.display(),
                    unfit = %unfit.join(", "),
                    "pinned maps from an earlier run cannot be adopted; replacing them all (tables are rebuilt, buckets may move)"
                );
                for name in PINNED_MAPS {
                    let _ = std::fs::remove_file(dir.join(name));
                }
            } else if required_ok {
                // Optional maps that are missing are created; ones with
                // another layout are replaced (their state is lost, the
                // forwarding state is kept).
                for map in maps.iter().filter(|m| optional(m)) {
                    let path = dir.join(name(map));
                    if path.exists() && !matches(map) {
                        let lost = if name(map) == pinned::BUCKET_FIRST {
                            "made anew and filled from buckets"
                        } else {
                            "its state is lost"
                        };
                        warn!(map = %name(map), "pinned map does not match this binary or the pool; replacing it ({lost})");
                        let _ = std::fs::remove_file(&path);
                    } else if !path.exists() {
                        let made = match name(map).as_str() {
                            pinned::SERVICES6 => "made anew, empty: the IPv6 tables are built anew (their flows may move)",
                            pinned::BUCKET_FIRST => "made anew and filled from buckets",
                            _ => "made anew, empty",
                        };
                        warn!(
                            map = %name(map),
                            "pinned map missing (pins of an older version, or removed): {made}"
                        );
                    }
                }
                let old = pinned_pool.expect("the pool maps matched");
                if old < pool_size {
                    grow_pinned_pool(dir, old, pool_size)?;
                    grew = Some((old, pool_size));
                    info!(
                        from = old,
                        to = pool_size,
                        "the configuration needs a larger bucket pool: the pinned pool was copied into a larger one (no bucket moved)"
                    );
                }
                pool_size = pool_size.max(old);
            }
            adopted = required_ok;
            for map in &mut maps {
                let name = name(map);
                map.set_pin_path(dir.join(&name))
                    .with_context(|| format!("pin path of {name}"))?;
            }
        }
        open.maps
            .buckets
            .set_max_entries(pool_size)
            .context("sizing the bucket pool")?;
        open.maps
            .bucket_moved
            .set_max_entries(pool_size / 2)
            .context("sizing bucket_moved")?;
        open.maps
            .bucket_first
            .set_max_entries(pool_size / abi::FIRST_HOPS_PER_ELEM)
            .context("sizing bucket_first")?;
        open.maps
            .nat_flows
            .set_max_entries(nat_flows)
            .context("sizing nat_flows")?;
        let skel = open
            .load()
            .context("loading the BPF programs (verifier log above, if any)")?;
        if let Some(old) = resized_flows {
            let (copied, dropped) = nat::copy_flows(&old, &skel.maps.nat_flows)
                .context("copying the NAT flows into the resized nat_flows")?;
            if let Some(dir) = pin_dir {
                let _ = std::fs::remove_file(dir.join(pinned::NAT_FLOWS_RESIZING));
            }
            info!(
                from = old.max_entries(),
                to = nat_flows,
                copied,
                "nat_flows resized (cluster.nat.max_flows): the NAT flows were copied"
            );
            if dropped > 0 {
                warn!(
                    dropped,
                    "the resized nat_flows is too small for every NAT flow: the rest lose their translation"
                );
            }
        }
        let book = if adopted {
            let (book, errors) = install::PoolBook::adopt(&pool_maps(&skel))
                .context("reading the adopted tables")?;
            for e in errors {
                warn!("adopted table not taken over, it is installed anew: {e}");
            }
            book
        } else {
            install::PoolBook::new(pool_size)
        };
        let mut dp = Dataplane {
            skel,
            xdp: None,
            xdp_backend: None,
            interface: None,
            tc: None,
            pin_dir: pin_dir.map(Path::to_path_buf),
            vips: BTreeSet::new(),
            nodes: BTreeSet::new(),
            quic: quic::QuicInstalled::new(),
            adopted,
            book,
            grew,
            settings: None,
            filters: filters::FilterState::default(),
            nat: nat::NatState::default(),
            nat_sweeper: None,
            nat_sweep_timeout: None,
            nat_stats: Default::default(),
        };
        if adopted {
            // Start the set diffs from what the maps hold.
            dp.vips = address_keys(&dp.skel.maps.vips)
                .into_iter()
                .map(IpAddr::V4)
                .chain(address6_keys(&dp.skel.maps.vips6).map(IpAddr::V6))
                .collect();
            dp.nodes = address_keys(&dp.skel.maps.cluster_nodes)
                .into_iter()
                .map(IpAddr::V4)
                .chain(address6_keys(&dp.skel.maps.cluster_nodes6).map(IpAddr::V6))
                .collect();
            dp.adopt_filters();
        }
        dp.ensure_handoff_mark()
            .context("writing the hand-off mark (handoff)")?;
        Ok(dp)
    }

    /// Make sure `handoff` holds a mark (`struct nilb_handoff`): the one an
    /// adopted pin carries is kept (the programs still attached use it),
    /// else a random locally administered unicast MAC is written (46
    /// random bits, from the operating system's generator). Until it is
    /// written the balancer drops what it would hand to TC.
    fn ensure_handoff_mark(&mut self) -> Result<()> {
        if self.handoff_mark()?.is_some() {
            return Ok(());
        }
        let mut mac = [0u8; 6];
        rand::Rng::fill(&mut rand::rngs::OsRng, &mut mac[..]);
        self.set_handoff_mark(mac)
    }

    /// The hand-off mark: the source MAC of frames the XDP balancer hands
    /// to this node's TC program (`struct nilb_handoff`); None while none
    /// is written.
    pub fn handoff_mark(&self) -> Result<Option<[u8; 6]>> {
        let v = self
            .skel
            .maps
            .handoff
            .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
            .context("reading handoff")?
            .unwrap_or_default();
        Ok(abi::handoff_mark(&v))
    }

    /// Write `mac` as the hand-off mark, made a locally administered
    /// unicast address (bit 1 of the first byte set, bit 0 clear), the
    /// form the programs check for. Tests and `nilb replay` fix it to a
    /// known value; a daemon keeps the random one of
    /// [`Dataplane::load_pinned`].
    pub fn set_handoff_mark(&mut self, mac: [u8; 6]) -> Result<()> {
        let v = abi::handoff_value(mac);
        self.skel
            .maps
            .handoff
            .update(&0u32.to_ne_bytes(), abi::bytes_of(&v), MapFlags::ANY)
            .context("writing handoff")
    }

    /// The pool's buckets: in tables, in quarantine, free.
    pub fn pool_usage(&self) -> pool::Usage {
        self.book.usage()
    }

    /// Bytes of BPF map memory the pool takes: buckets, their
    /// `bucket_first` entries and their move times (14 bytes a bucket).
    pub fn pool_bytes(&self) -> u64 {
        self.book.usage().buckets as u64
            * (abi::BUCKET_BYTES + abi::FIRST_BYTES + abi::MOVED_BYTES) as u64
    }

    /// `(old, new)` pool size if loading grew the adopted pool: the
    /// programs attached before still read the old pool, so a table that
    /// needs a region of its own is written only once the new ones are
    /// attached ([`crate::control::Plan::take_new_regions`]).
    pub fn pool_grew(&self) -> Option<(u32, u32)> {
        self.grew
    }

    /// Whether a nilb XDP program attached to `ifindex` (an earlier
    /// daemon's) reads this data plane's `services` with another `buckets`
    /// map: the pool pins were replaced by a grown copy, by this start
    /// ([`Dataplane::pool_grew`]) or by an earlier one stopped before it
    /// attached, and the attached programs read the old pool until the new
    /// ones replace them. A table that needs a region of its own must wait
    /// for the attach then ([`crate::control::Plan::take_new_regions`]).
    /// False when no XDP program is attached, or it reads another
    /// `services` (its maps were replaced: it never sees these writes).
    /// Errors: the kernel's map or program information cannot be read.
    pub fn attached_reads_another_pool(&self, ifindex: i32) -> Result<bool> {
        let services = self.skel.maps.services.info()?.info.id;
        let buckets = self.skel.maps.buckets.info()?.info.id;
        let opts = libbpf_rs::query::ProgInfoQueryOptions::default().include_map_ids(true);
        for flag in [
            libbpf_rs::libbpf_sys::XDP_FLAGS_DRV_MODE,
            libbpf_rs::libbpf_sys::XDP_FLAGS_SKB_MODE,
        ] {
            let id = abi::xdp_prog_id(ifindex, flag)?;
            if id == 0 {
                continue;
            }
            let Some(p) =
                libbpf_rs::query::ProgInfoIter::with_query_opts(opts.clone()).find(|p| p.id == id)
            else {
                continue;
            };
            if p.map_ids.contains(&services) && !p.map_ids.contains(&buckets) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Buckets of the table installed for `key` (None: none): what
    /// [`crate::control::Plan::take_new_regions`] asks.
    pub fn table_size(&self, key: &ServiceKey) -> Option<u32> {
        self.book.region_size(key)
    }

    /// Bucket words this data plane stored into the pool so far (installs
    /// store only the words that differ from the installed ones).
    pub fn bucket_stores(&self) -> u64 {
        self.book.stores()
    }

    /// Bucket entries of the installed tables that name backend `slot`.
    pub fn slot_refs(&self, slot: u32) -> u32 {
        self.book.refs(slot)
    }

    /// The interface (and XDP mode) [`DataplaneOps::set_xdp`] attaches to
    /// and [`DataplaneOps::xdp_attached`] asks about.
    pub fn set_interface(&mut self, ifindex: i32, mode: XdpMode) {
        self.interface = Some((ifindex, mode));
    }

    /// The control plane's records in `control_state`, by slot (an adopted
    /// data plane holds its predecessor's).
    pub fn control_state(&self) -> Result<std::collections::BTreeMap<u32, ControlRecord>> {
        read_control_state(
            &self.skel.maps.control_state,
            Some(&self.skel.maps.control_vip6),
            Some(&self.skel.maps.control_dip6),
        )
    }

    /// The running kernel's features ([`probe::kernel_features`]): what
    /// this data plane loaded and what is off.
    pub fn kernel_features(&self) -> &'static crate::features::KernelFeatures {
        probe::kernel_features()
    }

    /// The object's programs: (loaded, left unloaded because their
    /// features are off in this kernel), by name.
    pub fn programs(&self) -> (Vec<String>, Vec<String>) {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for p in self.skel.object().progs() {
            let name = p.name().to_string_lossy().into_owned();
            if p.autoload() {
                on.push(name);
            } else {
                off.push(name);
            }
        }
        (on, off)
    }

    /// Whether [`Dataplane::load_pinned`] adopted an earlier daemon's maps.
    pub fn adopted(&self) -> bool {
        self.adopted
    }

    /// The installed tables (as `nilb lookup --live` reads them), from this
    /// data plane's own maps.
    pub fn live_tables(&self) -> Result<Vec<(ServiceKey, LiveTable)>> {
        let (tables, backends, _) = install::read_raw(&pool_maps(&self.skel), None)?;
        Ok(tables
            .iter()
            .filter(|t| self.book.has(&t.key))
            .map(|t| (t.key, LiveTable::from_raw(t, &backends)))
            .collect())
    }

    /// Install `table` for `key` with stats index `index` (`slot_of(dip)`:
    /// the `backend_stats` slot of each first hop): build a new bucket array,
    /// fill it, swap it in atomically.
    pub fn install_table(
        &mut self,
        key: &ServiceKey,
        index: u32,
        table: &Table,
        slot_of: &dyn Fn(IpAddr) -> u32,
    ) -> Result<()> {
        DataplaneOps::install_tables(
            self,
            &[TableInstall {
                key: *key,
                index,
                nat_port: None,
                table,
                slot_of,
                changed: None,
            }],
        )
    }

    /// Install buckets given by their hops for `key` with stats index
    /// `index` (`slot_of(dip)`: the slot of every hop; `changed`: the
    /// buckets that differ from the installed table, None: all). What
    /// [`Dataplane::install_table`] does for a [`Table`], for chains the
    /// control plane does not make (fixtures) or a [`LiveTable`] put back.
    pub fn install_chains(
        &mut self,
        key: &ServiceKey,
        index: u32,
        chains: &Chains,
        slot_of: &dyn Fn(IpAddr) -> u32,
        changed: Option<&[u32]>,
    ) -> Result<()> {
        let maps = pool_maps(&self.skel);
        self.book.install(
            &maps,
            &[install::Install {
                key: *key,
                index,
                nat_port: None,
                table: chains,
                slot_of,
                changed,
            }],
        )
    }

    /// Attach the XDP balancer to `ifindex` (netlink; it stays attached if
    /// the process dies, so forwarding survives a daemon crash). Refuses to
    /// replace an XDP program that is not nilb's.
    pub fn attach_xdp(&mut self, ifindex: i32, mode: XdpMode) -> Result<()> {
        // Our backend program is replaced in place (native); in generic
        // mode it must go first (one mode per interface).
        if mode != XdpMode::Native {
            self.detach_xdp_backend()?;
        }
        self.set_ipv6_balancer()?;
        let prog = &self.xdp_balancer()?;
        let xdp = Xdp::new(prog.as_fd());
        for (m, id) in nilb_xdp_programs(&xdp, ifindex)? {
            if m != mode {
                bail!("a previous nilb XDP program (id {id}) is attached in {m:?} mode; detach it first (ip link set dev IF xdp off)");
            }
            if self.xdp_backend != Some(ifindex) {
                warn!(id, "replacing a previous nilb XDP program");
            }
        }
        libbpf_log::clear_kernel_message();
        if let Err(e) = xdp.attach(ifindex, mode.flags()) {
            let name = nix::net::if_::if_indextoname(ifindex as u32)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("ifindex {ifindex}"));
            let kernel = libbpf_log::take_kernel_message();
            let driver = hints::driver_of(&name);
            let hint = hints::xdp_attach_hint(&hints::XdpAttachFailure {
                interface: &name,
                errno: hints::os_error(&e.to_string()),
                kernel_message: kernel.as_deref(),
                driver: driver.as_deref(),
                native: mode == XdpMode::Native,
            });
            return Err(anyhow::Error::new(e)
                .context(format!("attaching XDP in {mode:?} mode to {name}"))
                .context(hint));
        }
        self.xdp = Some((ifindex, mode));
        self.xdp_backend = None;
        if mode == XdpMode::Native {
            warn_locked_xdp_tx(ifindex);
        }
        Ok(())
    }

    /// Attach `nilb_xdp_backend` to `ifindex` in native mode: the XDP
    /// receive path of a node that is not a balancer (GUE for this node
    /// decapsulated before GRO; docs/design.md "Second chance (TC)"). It
    /// replaces a nilb XDP program left in native mode (a balancer's, from
    /// a daemon that died or a node that is no longer a balancer) and
    /// removes one left in generic mode; it refuses to replace another
    /// program. Not in generic mode: there XDP runs after GRO, so it would
    /// merge nothing and only copy every GRO super-frame. Without it the
    /// TC program does all the work, as on any interface without XDP.
    pub fn attach_xdp_backend(&mut self, ifindex: i32) -> Result<()> {
        let prog = &self.skel.progs.nilb_xdp_backend;
        let xdp = Xdp::new(prog.as_fd());
        for (m, id) in nilb_xdp_programs(&xdp, ifindex)? {
            if m == XdpMode::Generic {
                xdp.detach(ifindex, m.flags()).with_context(|| {
                    format!("detaching a nilb XDP program in generic mode (id {id})")
                })?;
            }
        }
        libbpf_log::clear_kernel_message();
        if let Err(e) = xdp.attach(ifindex, XdpFlags::DRV_MODE) {
            let kernel = libbpf_log::take_kernel_message().unwrap_or_default();
            return Err(anyhow::Error::new(e).context(format!(
                "attaching the backend XDP program in native mode to ifindex {ifindex} {kernel}"
            )));
        }
        self.xdp = None;
        self.xdp_backend = Some(ifindex);
        warn_locked_xdp_tx(ifindex);
        Ok(())
    }

    /// Whether `nilb_xdp_backend` of this data plane is attached to its
    /// interface now (asked of the kernel).
    pub fn xdp_backend_attached(&self) -> Result<bool> {
        let Some((ifindex, _)) = self.interface else {
            return Ok(false);
        };
        let prog = &self.skel.progs.nilb_xdp_backend;
        let ours = Self::prog_id(prog)?;
        let id = Xdp::new(prog.as_fd())
            .query_id(ifindex, XdpFlags::DRV_MODE)
            .with_context(|| format!("querying XDP on ifindex {ifindex}"))?;
        Ok(id == ours)
    }

    /// Detach `nilb_xdp_backend`, if this data plane attached it and it is
    /// still the program on the interface.
    pub fn detach_xdp_backend(&mut self) -> Result<()> {
        let Some(ifindex) = self.xdp_backend.take() else {
            return Ok(());
        };
        let prog = &self.skel.progs.nilb_xdp_backend;
        let ours = Self::prog_id(prog)?;
        let xdp = Xdp::new(prog.as_fd());
        match xdp.query_id(ifindex, XdpFlags::DRV_MODE) {
            Ok(id) if id == ours => xdp.detach(ifindex, XdpFlags::DRV_MODE).with_context(|| {
                format!("detaching the backend XDP program from ifindex {ifindex}")
            }),
            Ok(_) => Ok(()),
            Err(e) => {
                Err(anyhow::Error::new(e).context(format!("querying XDP on ifindex {ifindex}")))
            }
        }
    }

    /// Attach the TC second-chance program to clsact ingress of `ifindex`.
    pub fn attach_tc(&mut self, ifindex: i32) -> Result<()> {
        // An existing clsact (a restart, or another user) is expected:
        // libbpf's warning about it is not one for the operator.
        let created_qdisc = libbpf_log::expect_failure(|| abi::create_clsact(ifindex))?;
        let attach = |prog: &libbpf_rs::ProgramMut<'_>, point, what: &str| {
            TcHookBuilder::new(prog.as_fd())
                .ifindex(ifindex)
                .replace(true)
                .handle(TC_HANDLE)
                .priority(TC_PRIORITY)
                .hook(point)
                .attach()
                .with_context(|| format!("attaching TC {what} to ifindex {ifindex}"))
        };
        let hook = attach(
            &self.skel.progs.nilb_tc_second_chance,
            libbpf_rs::TC_INGRESS,
            "ingress",
        )?;
        // NAT mode's replies: egress of the same interface (the program
        // returns at once on a node without NAT services).
        let egress = attach(
            &self.skel.progs.nilb_tc_nat_egress,
            libbpf_rs::TC_EGRESS,
            "egress",
        )?;
        self.tc = Some(TcAttachment {
            hook,
            egress: Some(egress),
            ifindex,
            created_qdisc,
        });
        Ok(())
    }

    /// Run the sweep of `nat_flows` (module [`nat`]) while `config` has a
    /// NAT-mode service, with its `cluster.nat.udp_timeout_ms` (restarted
    /// when that changes); stop it otherwise. A change of
    /// `cluster.nat.max_flows` takes effect at the next start (warned).
    pub fn sync_nat_sweep(&mut self, config: &Config) -> Result<()> {
        let want = config
            .services
            .iter()
            .any(|s| s.mode == crate::types::ServiceMode::Nat)
            .then_some(config.cluster.nat.udp_timeout_ms);
        let max = self.skel.maps.nat_flows.max_entries();
        if want.is_some() && config.cluster.nat.max_flows != max {
            warn!(
                running = max,
                configured = config.cluster.nat.max_flows,
                "cluster.nat.max_flows changes at the next start of nilb (the flows are copied then)"
            );
        }
        if want == self.nat_sweep_timeout {
            return Ok(());
        }
        self.nat_sweeper = None;
        self.nat_sweep_timeout = None;
        if let Some(t) = want {
            self.start_nat_sweep(t)?;
            self.nat_sweep_timeout = Some(t);
        }
        Ok(())
    }

    /// Start the sweep of `nat_flows` with `udp_timeout_ms`.
    fn start_nat_sweep(&mut self, udp_timeout_ms: u64) -> Result<()> {
        let link = self
            .skel
            .progs
            .nilb_nat_sweep_tcp
            .attach()
            .context("attaching the TCP socket iterator of the NAT sweep")?;
        let maps = nat::SweepMaps {
            link,
            flows: libbpf_rs::MapHandle::try_from(&self.skel.maps.nat_flows)
                .context("opening nat_flows")?,
            pass: libbpf_rs::MapHandle::try_from(&self.skel.maps.nat_gc_pass)
                .context("opening nat_gc_pass")?,
        };
        self.nat_sweeper = Some(nat::Sweeper::start(
            maps,
            udp_timeout_ms,
            self.nat_stats.clone(),
        ));
        Ok(())
    }

    /// The NAT sweep's counts (zero until it has run).
    pub fn nat_stats(&self) -> std::sync::Arc<nat::SweepStats> {
        self.nat_stats.clone()
    }

    /// Kernel id of one of our programs.
    /// Whether this node's settings name an IPv6 cluster network.
    fn cluster_ipv6(&self) -> bool {
        self.settings.is_some_and(|s| s.node.is_ipv6())
    }

    /// The XDP balancer for this node's cluster network.
    fn xdp_balancer(&self) -> Result<libbpf_rs::ProgramMut<'_>> {
        program_named(&self.skel, xdp_balancer_programs(self.cluster_ipv6()).0)
    }

    /// Put the IPv6 VIPs' balancer built for this node's cluster network
    /// into `ipv6_balancer` (libbpf leaves the array alone at load: an
    /// adopted one keeps the previous daemon's program until this write).
    fn set_ipv6_balancer(&self) -> Result<()> {
        let name = xdp_balancer_programs(self.cluster_ipv6()).1;
        let prog = program_named(&self.skel, name)?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&prog.as_fd());
        self.skel
            .maps
            .ipv6_balancer
            .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .with_context(|| format!("putting {name} into ipv6_balancer"))
    }

    fn prog_id(prog: &libbpf_rs::ProgramMut<'_>) -> Result<u32> {
        Ok(libbpf_rs::ProgramHandle::try_from(prog)
            .context("querying our program's id")?
            .id())
    }

    /// Forget what was attached and pinned, so that dropping this data plane
    /// leaves programs attached and maps pinned (for the next daemon).
    pub fn keep_on_exit(&mut self) {
        self.xdp = None;
        self.xdp_backend = None;
        self.tc = None;
        self.pin_dir = None;
    }

    /// Detach the XDP balancer, if attached, and only if the program on the
    /// interface is still ours (another nilb may have replaced it).
    pub fn detach_xdp(&mut self) -> Result<()> {
        let Some((ifindex, mode)) = self.xdp.take() else {
            return Ok(());
        };
        let prog = &self.xdp_balancer()?;
        let ours = Self::prog_id(prog)?;
        let xdp = Xdp::new(prog.as_fd());
        match xdp.query_id(ifindex, mode.flags()) {
            Ok(id) if id == ours => xdp
                .detach(ifindex, mode.flags())
                .with_context(|| format!("detaching XDP from ifindex {ifindex}")),
            Ok(0) => Ok(()),
            Ok(id) => {
                warn!(
                    id,
                    ours, "the XDP program on the interface is no longer ours; leaving it"
                );
                Ok(())
            }
            Err(e) => {
                Err(anyhow::Error::new(e).context(format!("querying XDP on ifindex {ifindex}")))
            }
        }
    }

    /// Detach a nilb XDP program left on `ifindex` by an earlier daemon that
    /// died (a node that is no longer a balancer must not keep balancing with
    /// frozen tables). Returns its id if one was removed.
    pub fn remove_stale_xdp(&self, ifindex: i32) -> Result<Option<u32>> {
        // Any program serves for the query and the detach by mode.
        let prog = &self.skel.progs.nilb_xdp_balancer;
        let xdp = Xdp::new(prog.as_fd());
        for m in [XdpMode::Native, XdpMode::Generic] {
            let Ok(id) = xdp.query_id(ifindex, m.flags()) else {
                continue;
            };
            if id != 0 && program_name(id).is_some_and(|n| n.starts_with("nilb_xdp")) {
                xdp.detach(ifindex, m.flags())
                    .with_context(|| format!("detaching a stale nilb XDP program (id {id})"))?;
                return Ok(Some(id));
            }
        }
        Ok(None)
    }

    /// Detach everything this data plane attached. Errors are collected, not
    /// short-circuited, so one failure does not leave the other attached.
    pub fn detach(&mut self) -> Result<()> {
        let mut errors = Vec::new();
        if let Err(e) = self.detach_xdp() {
            errors.push(format!("{e:#}"));
        }
        if let Err(e) = self.detach_xdp_backend() {
            errors.push(format!("{e:#}"));
        }
        if let Some(mut tc) = self.tc.take() {
            // Only our own filter: another nilb may have replaced it.
            let ours = Self::prog_id(&self.skel.progs.nilb_tc_second_chance).ok();
            // (a filter removed by someone else is handled below)
            match libbpf_log::expect_failure(|| tc.hook.query()) {
                Ok(id) if Some(id) == ours => {
                    if let Err(e) = tc.hook.detach() {
                        errors.push(format!("detaching TC from ifindex {}: {e}", tc.ifindex));
                    }
                }
                Ok(id) => warn!(
                    id,
                    "the TC filter on the interface is no longer ours; leaving it"
                ),
                Err(_) => {} // already gone
            }
            if let Some(mut eg) = tc.egress.take() {
                let ours = Self::prog_id(&self.skel.progs.nilb_tc_nat_egress).ok();
                if let Ok(id) = libbpf_log::expect_failure(|| eg.query()) {
                    if Some(id) == ours {
                        if let Err(e) = eg.detach() {
                            errors.push(format!(
                                "detaching TC egress from ifindex {}: {e}",
                                tc.ifindex
                            ));
                        }
                    }
                }
            }
            if tc.created_qdisc {
                let mut all = tc.hook;
                all.attach_point(libbpf_rs::TC_INGRESS | libbpf_rs::TC_EGRESS);
                if let Err(e) = all.destroy() {
                    errors.push(format!("removing clsact from ifindex {}: {e}", tc.ifindex));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            bail!(errors.join("; "))
        }
    }

    /// Remove the pins (unless the data plane is to outlive this process).
    pub fn unpin(&mut self) -> Result<()> {
        let Some(dir) = self.pin_dir.take() else {
            return Ok(());
        };
        let transient = pinned::transient_pins();
        for name in PINNED_MAPS
            .iter()
            .copied()
            .chain(transient.iter().map(String::as_str))
        {
            let path = dir.join(name);
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing pin {}", path.display()))?;
            }
        }
        let _ = std::fs::remove_dir(&dir);
        Ok(())
    }

    /// All counters, in [`abi::COUNTER_NAMES`] order.
    pub fn counters(&self) -> Result<Vec<u64>> {
        abi::read_counters(&self.skel.maps.counters)
    }

    /// Stats of the service with stats index `index`, summed over CPUs.
    pub fn service_stats(&self, index: u32) -> Result<abi::sys::nilb_service_stats> {
        abi::read_percpu(&self.skel.maps.service_stats, index, abi::sum_service_stats)
    }

    /// Balancer stats of backend slot `slot`, summed over CPUs.
    pub fn backend_stats(&self, slot: u32) -> Result<abi::sys::nilb_backend_stats> {
        abi::read_percpu(&self.skel.maps.backend_stats, slot, abi::sum_backend_stats)
    }

    /// Handles of the counter maps (their own file descriptors), for
    /// reading the counters on another thread (the metrics server).
    pub fn stats_maps(&self) -> Result<StatsMaps> {
        let m = &self.skel.maps;
        let ctx = "duplicating a counter map's descriptor";
        Ok(StatsMaps {
            counters: libbpf_rs::MapHandle::try_from(&m.counters).context(ctx)?,
            service_stats: libbpf_rs::MapHandle::try_from(&m.service_stats).context(ctx)?,
            backend_stats: libbpf_rs::MapHandle::try_from(&m.backend_stats).context(ctx)?,
            filter_stats: libbpf_rs::MapHandle::try_from(&m.filter_stats).context(ctx)?,
            nat: self.nat_stats.clone(),
        })
    }

    /// Run the XDP balancer (the one for this node's cluster network, as
    /// [`Dataplane::attach_xdp`] attaches) on one frame (BPF_PROG_TEST_RUN).
    pub fn run_xdp(&self, frame: &[u8], ingress_ifindex: u32) -> Result<(u32, Vec<u8>)> {
        abi::test_run_xdp(&self.xdp_balancer()?, frame, ingress_ifindex)
    }

    /// Run the XDP program on one frame, with the XDP metadata (nilb's mark
    /// and egress ifindex on packets handed to TC) split off the resulting
    /// frame.
    pub fn run_xdp_split(&self, frame: &[u8], ingress_ifindex: u32) -> Result<abi::XdpRun> {
        abi::test_run_xdp_split(&self.xdp_balancer()?, frame, ingress_ifindex)
    }

    /// Run the backends' XDP program (`nilb_xdp_backend`) on one frame
    /// (BPF_PROG_TEST_RUN).
    pub fn run_xdp_backend(&self, frame: &[u8], ingress_ifindex: u32) -> Result<(u32, Vec<u8>)> {
        abi::test_run_xdp(&self.skel.progs.nilb_xdp_backend, frame, ingress_ifindex)
    }

    /// Run the TC program on one frame (BPF_PROG_TEST_RUN).
    pub fn run_tc(&self, frame: &[u8], ifindex: u32) -> Result<(u32, Vec<u8>)> {
        abi::test_run_tc(&self.skel.progs.nilb_tc_second_chance, frame, ifindex)
    }

    /// Run NAT mode's egress program (`nilb_tc_nat_egress`) on one frame
    /// leaving this node (BPF_PROG_TEST_RUN).
    pub fn run_tc_egress(&self, frame: &[u8], ifindex: u32) -> Result<(u32, Vec<u8>)> {
        abi::test_run_tc(&self.skel.progs.nilb_tc_nat_egress, frame, ifindex)
    }

    /// Run one sweep of `nat_flows` now (module [`nat`]), as sweep number
    /// `pass` with a UDP timeout of `udp_timeout_s`; returns the entries
    /// removed. Tests and benchmarks; the daemon's sweep runs on its own.
    pub fn sweep_nat_flows(&self, pass: u32, udp_timeout_s: u32) -> Result<u64> {
        let maps = nat::SweepMaps {
            link: self
                .skel
                .progs
                .nilb_nat_sweep_tcp
                .attach()
                .context("attaching the TCP socket iterator")?,
            flows: libbpf_rs::MapHandle::try_from(&self.skel.maps.nat_flows)?,
            pass: libbpf_rs::MapHandle::try_from(&self.skel.maps.nat_gc_pass)?,
        };
        nat::sweep_once(&maps, pass, udp_timeout_s, &self.nat_stats)
    }

    /// Kernel memory `nat_flows` takes now, in bytes, as the kernel
    /// accounts it (`memlock` of the map's fdinfo: for this hash without
    /// preallocation, what its elements use).
    pub fn nat_flows_memlock(&self) -> Result<u64> {
        use std::os::fd::AsRawFd;
        let fd = self.skel.maps.nat_flows.as_fd().as_raw_fd();
        let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
            .context("reading nat_flows' fdinfo")?;
        text.lines()
            .find_map(|l| l.strip_prefix("memlock:"))
            .and_then(|v| v.trim().parse().ok())
            .context("no memlock in nat_flows' fdinfo")
    }

    /// The entries of `nat_flows` now.
    pub fn nat_flows(&self) -> Result<Vec<nat::FlowEntry>> {
        let mut out = Vec::new();
        for key in self.skel.maps.nat_flows.keys() {
            if let Some(v) = self.skel.maps.nat_flows.lookup(&key, MapFlags::ANY)? {
                out.extend(nat::FlowEntry::parse(&key, &v));
            }
        }
        Ok(out)
    }
}

/// The counter maps of a data plane, by handles of their own
/// ([`Dataplane::stats_maps`]): what the metrics server reads, off the
/// control loop.
pub struct StatsMaps {
    counters: libbpf_rs::MapHandle,
    service_stats: libbpf_rs::MapHandle,
    backend_stats: libbpf_rs::MapHandle,
    filter_stats: libbpf_rs::MapHandle,
    nat: std::sync::Arc<nat::SweepStats>,
}

impl StatsMaps {
    /// NAT mode's sweep: flows at the last sweep, TCP and UDP entries
    /// removed so far; None before the first sweep.
    pub fn nat_sweep(&self) -> Option<(u64, u64, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        (self.nat.sweeps.load(Relaxed) > 0).then(|| {
            (
                self.nat.flows.load(Relaxed),
                self.nat.removed_tcp.load(Relaxed),
                self.nat.removed_udp.load(Relaxed),
            )
        })
    }

    /// All counters, in [`abi::COUNTER_NAMES`] order.
    pub fn counters(&self) -> Result<Vec<u64>> {
        abi::read_counters(&self.counters)
    }

    /// Stats of the service with stats index `index`, summed over CPUs.
    pub fn service_stats(&self, index: u32) -> Result<abi::sys::nilb_service_stats> {
        abi::read_percpu(&self.service_stats, index, abi::sum_service_stats)
    }

    /// Balancer stats of backend slot `slot`, summed over CPUs.
    pub fn backend_stats(&self, slot: u32) -> Result<abi::sys::nilb_backend_stats> {
        abi::read_percpu(&self.backend_stats, slot, abi::sum_backend_stats)
    }

    /// Counters of filter rule `id`, summed over CPUs.
    pub fn filter_stats(&self, id: u16) -> Result<abi::sys::nilb_filter_stats> {
        abi::read_percpu(&self.filter_stats, id as u32, abi::sum_filter_stats)
    }
}

impl Dataplane<'_> {
    /// Write `nilb_config` from the last settings and the filter flags.
    fn write_config(&mut self) -> Result<()> {
        let Some(s) = self.settings else {
            bail!("node settings must be written before the filters");
        };
        let mut flags = self.filters.flags & filters::FILTER_FLAGS;
        flags |= match s.unknown_flow {
            UnknownFlow::Drop => 0,
            UnknownFlow::Local => abi::sys::nilb_config_flags::NILB_F_UNKNOWN_FLOW_LOCAL,
            UnknownFlow::Rst => abi::sys::nilb_config_flags::NILB_F_UNKNOWN_FLOW_RST,
        };
        if !self.nat.plan.services.is_empty() {
            flags |= abi::sys::nilb_config_flags::NILB_F_NAT;
        }
        let (v, v6) =
            abi::config_value(s.node, s.hash_seed, s.gue_port, flags, s.icmp_too_big_rate);
        // The IPv6 VIPs' program of the cluster's family and config6 first:
        // the programs use them once nilb_config says so (also when no
        // interface is attached yet, as in BPF_PROG_TEST_RUN).
        self.set_ipv6_balancer()?;
        self.skel
            .maps
            .config6
            .update(&0u32.to_ne_bytes(), abi::bytes_of(&v6), MapFlags::ANY)
            .context("writing config6")?;
        self.skel
            .maps
            .nilb_config
            .update(&0u32.to_ne_bytes(), abi::bytes_of(&v), MapFlags::ANY)
            .context("writing nilb_config")
    }
}

/// The BPF maps behind the control plane's writes.
impl DataplaneOps for Dataplane<'_> {
    fn set_settings(&mut self, s: &NodeSettings) -> Result<()> {
        self.settings = Some(*s);
        self.write_config()?;
        // libbpf filled `ipv6_balancer` (also an adopted one, which an
        // attached balancer of an IPv6 cluster network tail-calls) with the
        // IPv4 cluster network's program when the object loaded: put the
        // right one back as soon as the family is known. A build without
        // it fails at attach_xdp instead (a node that is not a balancer
        // needs none).
        if self.cluster_ipv6() && program_named(&self.skel, xdp_balancer_programs(true).1).is_ok() {
            self.set_ipv6_balancer()?;
        }
        Ok(())
    }

    fn install_filters(
        &mut self,
        set: &crate::filters::FilterSet,
        index_of: &dyn Fn(&ServiceKey) -> Option<u32>,
    ) -> Result<()> {
        self.install_filter_set(set, index_of)
    }

    fn vips(&self) -> &BTreeSet<IpAddr> {
        &self.vips
    }

    fn set_vips(&mut self, want: &BTreeSet<IpAddr>) -> Result<()> {
        let have = std::mem::take(&mut self.vips);
        let plan = &self.nat.plan;
        let (have4, have6) = split_families(&have);
        let (want4, want6) = split_families(want);
        let r = sync_set(&self.skel.maps.vips, &have4, &want4, "vips", &|a| {
            abi::vip_value(plan.vip_flags(a))
        })
        .and_then(|()| sync_set6(&self.skel.maps.vips6, &have6, &want6, "vips6"));
        // Whatever was written: the XDP address caches drop their copies.
        let bumped = if have != *want {
            install::bump_cache_gen(Some(&self.skel.maps.cache_gen))
        } else {
            Ok(())
        };
        self.vips = if r.is_ok() { want.clone() } else { have };
        r.and(bumped)
    }

    fn cluster_nodes(&self) -> &BTreeSet<IpAddr> {
        &self.nodes
    }

    fn set_cluster_nodes(&mut self, want: &BTreeSet<IpAddr>) -> Result<()> {
        let have = std::mem::take(&mut self.nodes);
        let (have4, have6) = split_families(&have);
        let (want4, want6) = split_families(want);
        let r = sync_set(
            &self.skel.maps.cluster_nodes,
            &have4,
            &want4,
            "cluster_nodes",
            &|_| abi::sys::nilb_addr_info::default(),
        )
        .and_then(|()| {
            sync_set6(
                &self.skel.maps.cluster_nodes6,
                &have6,
                &want6,
                "cluster_nodes6",
            )
        });
        let bumped = if have != *want {
            install::bump_cache_gen(Some(&self.skel.maps.cache_gen))
        } else {
            Ok(())
        };
        self.nodes = if r.is_ok() { want.clone() } else { have };
        r.and(bumped)
    }

    fn zero_backend_stats(&mut self, slot: u32) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus()?;
        let zero = vec![vec![0u8; std::mem::size_of::<abi::sys::nilb_backend_stats>()]; cpus];
        self.skel
            .maps
            .backend_stats
            .update_percpu(&slot.to_ne_bytes(), &zero, MapFlags::ANY)
            .with_context(|| format!("resetting backend slot {slot}"))
    }

    fn zero_service_stats(&mut self, index: u32) -> Result<()> {
        let cpus = libbpf_rs::num_possible_cpus()?;
        let zero = vec![vec![0u8; std::mem::size_of::<abi::sys::nilb_service_stats>()]; cpus];
        self.skel
            .maps
            .service_stats
            .update_percpu(&index.to_ne_bytes(), &zero, MapFlags::ANY)
            .with_context(|| format!("resetting service index {index}"))
    }

    fn installed_services(&self) -> Result<BTreeSet<ServiceKey>> {
        let mut out = BTreeSet::new();
        let maps = &self.skel.maps;
        for key in maps.services.keys().chain(maps.services6.keys()) {
            // A key with a protocol nilb does not use is not nilb's to remove.
            if let Some(k) = abi::parse_service_key(&key)? {
                out.insert(k);
            }
        }
        Ok(out)
    }

    /// Tables whose region keeps its size are written in place (their
    /// changed buckets, one 8-byte store each); new services and new sizes
    /// get a region of their own and one `services` update each. No update
    /// of a map-in-map, so no RCU wait (docs/design.md "Maps").
    fn install_tables(&mut self, items: &[TableInstall<'_>]) -> Result<()> {
        let items: Vec<install::Install<'_>> = items
            .iter()
            .map(|it| install::Install {
                key: it.key,
                index: it.index,
                nat_port: it.nat_port,
                table: it.table,
                slot_of: it.slot_of,
                changed: it.changed,
            })
            .collect();
        let maps = pool_maps(&self.skel);
        self.book.install(&maps, &items)
    }

    fn remove_service(&mut self, key: &ServiceKey) -> Result<()> {
        let maps = pool_maps(&self.skel);
        self.book.remove(&maps, key)
    }

    /// The QUIC-LB maps, and the flag that makes XDP call the decoder:
    /// cleared before a service's QUIC-LB state goes, set after it is
    /// written (a packet never reaches the decoder without its config).
    fn set_quic(&mut self, routes: &[QuicRoute]) -> Result<()> {
        let bit = abi::SERVICE_FLAG_QUIC_LB;
        let want: BTreeSet<ServiceKey> = routes.iter().map(|r| r.key).collect();
        let maps = pool_maps(&self.skel);
        for key in self.book.with_flags(bit) {
            if !want.contains(&key) {
                self.book.set_flag(&maps, &key, bit, false)?;
            }
        }
        quic::sync(&self.skel, &mut self.quic, routes)?;
        for key in &want {
            self.book.set_flag(&maps, key, bit, true)?;
        }
        Ok(())
    }

    fn set_nat(&mut self, plan: &NatPlan) -> Result<()> {
        // nat_ports: the words that differ.
        let words = nat::port_words(plan);
        for (i, w) in words.iter().enumerate() {
            if self.nat.words.get(i) != Some(w) {
                self.skel
                    .maps
                    .nat_ports
                    .update(&(i as u32).to_ne_bytes(), &w.to_ne_bytes(), MapFlags::ANY)
                    .context("writing nat_ports")?;
            }
        }
        self.nat.words = words;
        // vips flags of the addresses already in the map.
        let (vips4, _) = split_families(&self.vips);
        for (a, flags) in nat::vip_flag_changes(&vips4, &self.nat.plan, plan, !self.nat.synced) {
            self.skel
                .maps
                .vips
                .update(
                    &abi::addr_be(a).to_ne_bytes(),
                    abi::bytes_of(&abi::vip_value(flags)),
                    MapFlags::ANY,
                )
                .with_context(|| format!("flagging {a} in vips"))?;
            install::bump_cache_gen(Some(&self.skel.maps.cache_gen))?;
        }
        self.nat.synced = true;
        // Each installed service's NAT flag and port.
        let maps = pool_maps(&self.skel);
        for key in self.book.services() {
            let want = plan.services.get(&key).copied();
            self.book
                .set_attrs(&maps, &key, |a| abi::with_nat(a, want))?;
        }
        let was_on = !self.nat.plan.services.is_empty();
        let now_on = !plan.services.is_empty();
        self.nat.plan = plan.clone();
        if was_on != now_on && self.settings.is_some() {
            self.write_config()?;
        }
        Ok(())
    }

    fn write_control_state(&mut self, records: &[(u32, Option<ControlRecord>)]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let mut keys = Vec::with_capacity(records.len() * 4);
        let mut values = Vec::with_capacity(records.len() * 48);
        let mut values6 = Vec::with_capacity(records.len() * 16);
        let mut dips6 = Vec::with_capacity(records.len() * 16);
        for (slot, r) in records {
            keys.extend_from_slice(&slot.to_ne_bytes());
            let (v, v6, d6) = abi::control_state_value(r.as_ref());
            values.extend_from_slice(abi::bytes_of(&v));
            values6.extend_from_slice(abi::bytes_of(&v6));
            dips6.extend_from_slice(abi::bytes_of(&d6));
        }
        // The IPv6 VIPs and DIPs first: a record is never read without
        // them.
        self.skel
            .maps
            .control_dip6
            .update_batch(
                &keys,
                &dips6,
                records.len() as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .with_context(|| format!("writing {} control_dip6 value(s)", records.len()))?;
        self.skel
            .maps
            .control_vip6
            .update_batch(
                &keys,
                &values6,
                records.len() as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .with_context(|| format!("writing {} control_vip6 value(s)", records.len()))?;
        self.skel
            .maps
            .control_state
            .update_batch(
                &keys,
                &values,
                records.len() as u32,
                MapFlags::ANY,
                MapFlags::ANY,
            )
            .with_context(|| format!("writing {} control_state record(s)", records.len()))
    }

    fn xdp_attached(&self) -> Result<bool> {
        let Some((ifindex, _)) = self.interface else {
            return Ok(false);
        };
        // A build without the cluster family's balancer never attached it.
        let Ok(prog) = &self.xdp_balancer() else {
            return Ok(false);
        };
        let ours = Self::prog_id(prog)?;
        let xdp = Xdp::new(prog.as_fd());
        for m in [XdpMode::Native, XdpMode::Generic] {
            let id = xdp
                .query_id(ifindex, m.flags())
                .with_context(|| format!("querying XDP on ifindex {ifindex}"))?;
            if id == ours {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn set_xdp(&mut self, attached: bool) -> Result<()> {
        let Some((ifindex, mode)) = self.interface else {
            bail!("no interface to attach XDP to");
        };
        if attached {
            self.attach_xdp(ifindex, mode)
        } else if mode == XdpMode::Native {
            // The backend program replaces the balancer in one step.
            let balancer = self.xdp.take();
            match self.attach_xdp_backend(ifindex) {
                Ok(()) => Ok(()),
                Err(e) => {
                    warn!("{e:#}: GUE is decapsulated by TC alone");
                    self.xdp = balancer;
                    self.detach_xdp()
                }
            }
        } else {
            self.detach_xdp()
        }
    }
}

impl Drop for Dataplane<'_> {
    /// Clean up after an error before or during start-up. An adopted data
    /// plane was forwarding before this process and keeps doing so. (A
    /// panic aborts the process, see Cargo.toml, so a crash never gets here
    /// and leaves forwarding running.)
    fn drop(&mut self) {
        if self.adopted {
            return;
        }
        if let Err(e) = self.detach() {
            warn!("{e:#}");
        }
        if let Err(e) = self.unpin() {
            warn!("{e:#}");
        }
    }
}

/// The IPv4 and the IPv6 addresses of a set.
fn split_families(set: &BTreeSet<IpAddr>) -> (BTreeSet<Ipv4Addr>, BTreeSet<Ipv6Addr>) {
    let mut v4 = BTreeSet::new();
    let mut v6 = BTreeSet::new();
    for a in set {
        match a {
            IpAddr::V4(a) => v4.insert(*a),
            IpAddr::V6(a) => v6.insert(*a),
        };
    }
    (v4, v6)
}

/// [`sync_set`] for an IPv6 address set (`vips6`, `cluster_nodes6`:
/// flags 0).
fn sync_set6(
    map: &dyn MapCore,
    have: &BTreeSet<Ipv6Addr>,
    want: &BTreeSet<Ipv6Addr>,
    what: &str,
) -> Result<()> {
    let value = abi::sys::nilb_addr_info::default();
    for a in want.difference(have) {
        map.update(
            abi::bytes_of(&abi::addr6_key(*a)),
            abi::bytes_of(&value),
            MapFlags::ANY,
        )
        .with_context(|| format!("adding {a} to {what}"))?;
    }
    for a in have.difference(want) {
        map.delete(abi::bytes_of(&abi::addr6_key(*a)))
            .with_context(|| format!("removing {a} from {what}"))?;
    }
    Ok(())
}

fn sync_set(
    map: &dyn MapCore,
    have: &BTreeSet<Ipv4Addr>,
    want: &BTreeSet<Ipv4Addr>,
    what: &str,
    value: &dyn Fn(Ipv4Addr) -> abi::sys::nilb_addr_info,
) -> Result<()> {
    for a in want.difference(have) {
        map.update(
            &abi::addr_be(*a).to_ne_bytes(),
            abi::bytes_of(&value(*a)),
            MapFlags::ANY,
        )
        .with_context(|| format!("adding {a} to {what}"))?;
    }
    for a in have.difference(want) {
        map.delete(&abi::addr_be(*a).to_ne_bytes())
            .with_context(|| format!("removing {a} from {what}"))?;
    }
    Ok(())
}

/// Whether nilb's TC filter is attached to clsact ingress of `ifindex`: the
/// encapsulated check of this node's own backend, which its XDP program
/// hands to that filter inside the kernel.
pub fn tc_filter_check(ifindex: i32) -> std::result::Result<(), String> {
    let id = libbpf_log::expect_failure(|| abi::tc_filter_prog_id(ifindex, TC_HANDLE, TC_PRIORITY));
    match id {
        Some(id) => {
            let name = program_name(id).unwrap_or_default();
            if name.starts_with("nilb_tc") {
                Ok(())
            } else {
                Err(format!(
                    "the TC filter nilb uses on this node's interface runs `{name}` (id {id}), not nilb's program"
                ))
            }
        }
        None => Err(
            "nilb's TC filter is not attached to this node's interface (clsact ingress): GUE for this node is not decapsulated".into(),
        ),
    }
}

/// The nilb XDP programs attached to `ifindex`, by mode (native, generic),
/// with their IDs. Errors: another program is attached (nilb never
/// replaces a program that is not its own; the message names it).
fn nilb_xdp_programs(xdp: &Xdp<'_>, ifindex: i32) -> Result<Vec<(XdpMode, u32)>> {
    let mut out = Vec::new();
    for m in [XdpMode::Native, XdpMode::Generic] {
        let id = xdp.query_id(ifindex, m.flags()).unwrap_or(0);
        if id == 0 {
            continue;
        }
        let name = program_name(id).unwrap_or_else(|| "?".into());
        if !name.starts_with("nilb_xdp") {
            bail!(
                "interface already has XDP program `{name}` (id {id}, {m:?} mode); \
                 nilb does not replace another program: detach it first"
            );
        }
        out.push((m, id));
    }
    Ok(out)
}

/// The XDP balancer programs for a cluster network (`ipv6`: an IPv6 one,
/// `NILB_F_CLUSTER_IPV6`): the program attached to the interface and the
/// one its `ipv6_balancer` prog array holds for IPv6 VIPs. The backend XDP
/// program and the TC programs are the same for both families.
pub fn xdp_balancer_programs(ipv6: bool) -> (&'static str, &'static str) {
    if ipv6 {
        ("nilb_xdp_balancer_c6", "nilb_xdp_balancer6_c6")
    } else {
        ("nilb_xdp_balancer", "nilb_xdp_balancer6")
    }
}

/// The program `name` of the loaded object, looked up by name (the IPv6
/// cluster network's programs are not skeleton fields of every build).
fn program_named<'a>(skel: &'a NilbSkel<'_>, name: &str) -> Result<libbpf_rs::ProgramMut<'a>> {
    skel.object()
        .progs_mut()
        .find(|p| p.name() == name)
        .with_context(|| {
            format!("this build's BPF object has no program {name} (the XDP balancer of an IPv6 cluster network)")
        })
}

/// Name of the loaded BPF program with this id.
fn program_name(id: u32) -> Option<String> {
    libbpf_rs::query::ProgInfoIter::default()
        .find(|p| p.id == id)
        .map(|p| p.name.to_string_lossy().into_owned())
}

/// Keys of an IPv6 address-set map (`vips6`, `cluster_nodes6`).
fn address6_keys(map: &dyn MapCore) -> impl Iterator<Item = Ipv6Addr> + '_ {
    map.keys()
        .filter_map(|k| <[u8; 16]>::try_from(&k[..]).ok().map(Ipv6Addr::from))
}

/// Keys of an address-set map (`vips`, `cluster_nodes`).
fn address_keys(map: &dyn MapCore) -> BTreeSet<Ipv4Addr> {
    map.keys()
        .filter_map(|k| k.get(..4).map(|b| Ipv4Addr::new(b[0], b[1], b[2], b[3])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::xdp_balancer_programs;

    /// The balancer an IPv6 cluster network attaches and its IPv6 twin in
    /// `ipv6_balancer`; an IPv4 one keeps the programs it always had.
    #[test]
    fn each_cluster_family_has_its_xdp_balancer() {
        assert_eq!(
            xdp_balancer_programs(false),
            ("nilb_xdp_balancer", "nilb_xdp_balancer6")
        );
        assert_eq!(
            xdp_balancer_programs(true),
            ("nilb_xdp_balancer_c6", "nilb_xdp_balancer6_c6")
        );
    }
}
