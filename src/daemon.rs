//! `nilb run`: load the data plane, fill it from the config, attach it to an
//! interface, then serve signals until told to stop.
//!
//! - SIGHUP: re-read and validate the whole file; on any problem keep the
//!   running config and tables untouched and log every problem; otherwise
//!   apply the difference service by service (one atomic swap each). Signals
//!   that arrive during a reload are merged into one more reload.
//! - SIGINT, SIGTERM: detach everything this process attached, remove its
//!   pins, exit 0.
//!
//! XDP is attached only when this node's address is one of
//! `cluster.balancers`; the TC program is attached on every node.

use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::control::{ControlPlane, Plan};
use crate::dataplane::{limits, Dataplane, XdpMode};

/// Options of `nilb run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// YAML configuration file.
    pub config: PathBuf,
    /// Interface to attach to.
    pub interface: String,
    /// This node's address; default: the interface's first IPv4 address.
    pub node_address: Option<Ipv4Addr>,
    /// XDP attach mode.
    pub xdp_mode: XdpMode,
    /// Directory (on bpffs) for the pinned maps.
    pub pin_dir: PathBuf,
}

/// The first IPv4 address of `interface`.
pub fn interface_address(interface: &str) -> Result<Ipv4Addr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing interface addresses")?;
    for a in addrs {
        if a.interface_name != interface {
            continue;
        }
        if let Some(sin) = a.address.as_ref().and_then(|s| s.as_sockaddr_in()) {
            return Ok(sin.ip());
        }
    }
    bail!("interface {interface} has no IPv4 address; pass --node-address")
}

/// Mount bpffs at /sys/fs/bpf when `pin_dir` lives there and nothing is
/// mounted (fresh machines, and `ip netns exec`, which remounts /sys).
fn ensure_bpffs(pin_dir: &Path) -> Result<()> {
    const BPF_FS_MAGIC: i64 = 0xcafe4a11;
    let root = Path::new("/sys/fs/bpf");
    let is_bpffs = |p: &Path| {
        nix::sys::statfs::statfs(p)
            .map(|s| s.filesystem_type().0 == BPF_FS_MAGIC)
            .unwrap_or(false)
    };
    if pin_dir.starts_with(root) {
        if !is_bpffs(root) {
            nix::mount::mount(
                Some("bpf"),
                root,
                Some("bpf"),
                nix::mount::MsFlags::empty(),
                None::<&str>,
            )
            .context("mounting bpffs at /sys/fs/bpf")?;
            info!("mounted bpffs at /sys/fs/bpf");
        }
    } else {
        let parent = pin_dir.parent().unwrap_or(pin_dir);
        if !is_bpffs(parent) && !is_bpffs(pin_dir) {
            bail!(
                "pin directory {} is not on a bpffs mount",
                pin_dir.display()
            );
        }
    }
    Ok(())
}

/// Warnings about the interface that the operator must hear at start.
fn check_interface(interface: &str, balancer: bool) {
    let read = |p: String| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    if let Some(mtu) =
        read(format!("/sys/class/net/{interface}/mtu")).and_then(|m| m.parse::<u32>().ok())
    {
        let need = 1500 + limits::GUE_OVERHEAD;
        if mtu < need {
            warn!(
                interface,
                mtu,
                "MTU {mtu} cannot carry a 1500-byte client packet plus {} bytes of GUE: raise the MTU between nodes to {need} or clamp the TCP MSS of the VIPs to {}",
                limits::GUE_OVERHEAD,
                mtu - limits::GUE_OVERHEAD - 40
            );
        }
    }
    if balancer {
        if let Some("0") =
            read(format!("/proc/sys/net/ipv4/conf/{interface}/forwarding")).as_deref()
        {
            warn!(
                interface,
                "net.ipv4.conf.{interface}.forwarding is 0: bpf_fib_lookup refuses to answer, so every balanced packet takes the slower TC path; set it to 1 for the XDP fast path"
            );
        }
    }
}

/// Run the daemon until SIGINT/SIGTERM.
pub fn run(opts: &RunOptions) -> Result<()> {
    let config = Config::load(&opts.config).map_err(anyhow::Error::new)?;
    let ifindex = nix::net::if_::if_nametoindex(opts.interface.as_str())
        .with_context(|| format!("no interface named {}", opts.interface))?
        as i32;
    let node = match opts.node_address {
        Some(a) => a,
        None => interface_address(&opts.interface)?,
    };
    let balancer = config.cluster.balancers.contains(&node);
    if !config.cluster_addresses().contains(&node) {
        warn!(%node, "this node is neither a balancer nor a backend in the config; GUE from it will be rejected by others");
    }
    check_interface(&opts.interface, balancer);
    ensure_bpffs(&opts.pin_dir)?;

    // Signals first, so that a SIGTERM during start-up still detaches.
    let mut signals =
        Signals::new([SIGHUP, SIGINT, SIGTERM]).context("installing signal handlers")?;

    let mut storage = MaybeUninit::uninit();
    let mut dp = Dataplane::load(&mut storage)?;
    let mut cp = ControlPlane::new(config);
    cp.apply(&mut dp, node, &cp.full_plan())
        .context("filling the data plane maps")?;
    dp.pin(&opts.pin_dir)?;
    dp.attach_tc(ifindex)?;
    if balancer {
        if opts.xdp_mode == XdpMode::Generic {
            warn!("XDP in generic (skb) mode: correct but far slower than native mode");
        }
        dp.attach_xdp(ifindex, opts.xdp_mode)?;
    }
    info!(
        %node,
        interface = %opts.interface,
        balancer,
        services = cp.config().services.len(),
        pin_dir = %opts.pin_dir.display(),
        "ready: {}",
        if balancer { "XDP balancer and TC second chance attached" } else { "TC second chance attached (not a balancer)" }
    );

    'serve: loop {
        let mut reload = false;
        let mut stop = false;
        for sig in signals.wait() {
            match sig {
                SIGHUP => reload = true,
                _ => stop = true,
            }
        }
        while reload && !stop {
            reload = false;
            cp = reload_config(opts, ifindex, cp, &mut dp, node);
            // Signals that came in meanwhile: HUPs merge into one more reload.
            for sig in signals.pending() {
                match sig {
                    SIGHUP => reload = true,
                    _ => stop = true,
                }
            }
        }
        if stop {
            break 'serve;
        }
    }

    info!("stopping: detaching and removing pins");
    dp.detach()?;
    dp.unpin()?;
    info!("stopped");
    Ok(())
}

/// One SIGHUP: validate, build, apply; on any error keep `cp` as it was.
fn reload_config(
    opts: &RunOptions,
    ifindex: i32,
    cp: ControlPlane,
    dp: &mut Dataplane<'_>,
    node: Ipv4Addr,
) -> ControlPlane {
    let started = Instant::now();
    let config = match Config::load(&opts.config) {
        Ok(c) => c,
        Err(e) => {
            error!(
                problems = e.problems.len(),
                "reload rejected, running configuration kept: {e}"
            );
            return cp;
        }
    };
    let was_balancer = cp.config().cluster.balancers.contains(&node);
    let is_balancer = config.cluster.balancers.contains(&node);
    let mut next = cp.clone();
    let plan = next.update(config);
    if plan.is_empty() && was_balancer == is_balancer {
        info!("reload: configuration valid, nothing changed");
        return next;
    }
    if let Err(e) = next.apply(dp, node, &plan) {
        error!("reload failed while applying: {e:#}; restoring the previous tables");
        if let Err(e) = cp.apply(dp, node, &cp.full_plan()) {
            error!("restoring the previous tables failed too: {e:#}");
        }
        return cp;
    }
    if is_balancer && !was_balancer {
        match dp.attach_xdp(ifindex, opts.xdp_mode) {
            Ok(()) => info!(%node, "this node became a balancer: XDP attached"),
            Err(e) => error!("this node became a balancer but attaching XDP failed: {e:#}"),
        }
    } else if was_balancer && !is_balancer {
        match dp.detach_xdp() {
            Ok(()) => info!(%node, "this node is no longer a balancer: XDP detached"),
            Err(e) => error!("detaching XDP failed: {e:#}"),
        }
    }
    log_plan(&plan, &next, started);
    next
}

fn log_plan(plan: &Plan, cp: &ControlPlane, started: Instant) {
    for (key, moves) in &plan.install {
        let name = cp
            .config()
            .service(key)
            .map(|s| s.name.as_str())
            .unwrap_or("?");
        info!(
            service = name,
            %key,
            moved = moves.moved,
            swapped = moves.swapped,
            "table installed"
        );
    }
    for key in &plan.remove {
        info!(%key, "service removed");
    }
    info!(
        installed = plan.install.len(),
        removed = plan.remove.len(),
        elapsed_us = started.elapsed().as_micros() as u64,
        "reload applied"
    );
}
