//! What an operator should do when attaching XDP fails: the kernel's own
//! explanation (its extended ack, passed on from libbpf's log, see
//! [`super::libbpf_log`]) and the fix for the driver at hand. The same
//! errno means different things on different drivers: EOPNOTSUPP from
//! virtio_net usually means the host enabled guest offloads, not that the
//! driver lacks XDP. Generic mode is named only as the last resort.
//!
//! [`xdp_attach_hint`] is pure (unit-tested on recorded kernel messages);
//! [`driver_of`] reads the interface's driver from sysfs.

use std::path::Path;

/// What is known about a failed XDP attach.
#[derive(Clone, Copy, Debug)]
pub struct XdpAttachFailure<'a> {
    /// Interface name.
    pub interface: &'a str,
    /// errno of the failure, if known.
    pub errno: Option<i32>,
    /// The kernel's message (netlink extended ack), if it gave one.
    pub kernel_message: Option<&'a str>,
    /// The interface's driver (`virtio_net`, `veth`, `mlx5_core`, ...).
    pub driver: Option<&'a str>,
    /// Whether native (driver) mode was asked for.
    pub native: bool,
}

const EPERM: i32 = 1;
const EOPNOTSUPP: i32 = 95;

/// The one-paragraph hint for a failed XDP attach: what the kernel said and
/// what to do about it on this driver.
pub fn xdp_attach_hint(f: &XdpAttachFailure<'_>) -> String {
    let iface = f.interface;
    let msg = f.kernel_message.unwrap_or("");
    let lower = msg.to_ascii_lowercase();
    let driver = f.driver.unwrap_or("unknown");
    let said = if msg.is_empty() {
        String::new()
    } else {
        format!("the kernel says \"{msg}\"; ")
    };
    let last_resort =
        "only as a last resort, --xdp-mode generic works on any driver but is far slower";
    let fix = if f.errno == Some(EPERM) {
        "permission denied: run as root, or with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_SYS_ADMIN".to_string()
    } else if lower.contains("native and generic xdp can't be active") {
        format!(
            "another XDP program is attached to {iface} in the other mode: remove it first (`ip link set dev {iface} xdpgeneric off` or `xdpdrv off`; see `ip -d link show {iface}`)"
        )
    } else if lower.contains("does not support xdp in native mode") {
        format!(
            "the driver of {iface} ({driver}) has no native XDP: use a NIC whose driver has it (mlx5, ice, i40e, ixgbe, bnxt, virtio_net, ...); {last_resort}"
        )
    } else if driver == "virtio_net" {
        virtio_fix(iface, &lower, last_resort)
    } else if driver == "veth" {
        veth_fix(iface, &lower, last_resort)
    } else if lower.contains("mtu") {
        format!(
            "lower the MTU of {iface} (`ip link set dev {iface} mtu 1500`; many drivers allow XDP only for frames that fit one page); {last_resort}"
        )
    } else if f.errno == Some(EOPNOTSUPP) && f.native {
        format!(
            "the {driver} driver of {iface} refused native XDP; if the kernel gave no reason, check the driver's XDP requirements (offloads such as LRO, the MTU, the number of queues) in its documentation; {last_resort}"
        )
    } else {
        format!("check the interface's driver ({driver}) and its XDP requirements; {last_resort}")
    };
    format!("attaching XDP to {iface} failed: {said}{fix}")
}

fn virtio_fix(iface: &str, lower: &str, last_resort: &str) -> String {
    if lower.contains("gro_hw") || lower.contains("lro") || lower.contains("csum") {
        format!(
            "the host enabled guest offloads on this virtio_net device, and XDP needs them off: run `ethtool -K {iface} rx-gro-hw off` (older kernels: `ethtool -K {iface} lro off`); if ethtool reports the feature [fixed], the guest cannot change it and the hypervisor must turn the guest offloads off (QEMU: -device virtio-net-pci,...,guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off,guest_csum=off; libvirt: <driver><guest tso4='off' tso6='off' ecn='off' ufo='off' csum='off'/></driver>); {last_resort}"
        )
    } else if lower.contains("queue") || lower.contains("ring") {
        format!(
            "XDP on virtio_net needs a TX queue per CPU besides the normal ones: give the VM more queues (QEMU: -device virtio-net-pci,mq=on,vectors=2N+2 with queues=N on the netdev; libvirt: <driver queues='N'/>, N = 2 x vCPUs) and enable them with `ethtool -L {iface} combined N`; {last_resort}"
        )
    } else if lower.contains("without frags") {
        format!(
            "the MTU of {iface} is above what one page holds (about 3,500 bytes on virtio_net), and the balancer's XDP program takes single-buffer frames only (its encapsulation writes the whole frame): lower the MTU (`ip link set dev {iface} mtu 1500`, or at most about 3,500); mergeable buffers do not help; a node that is only a backend runs nilb's multi-buffer receive program and takes any MTU; {last_resort}"
        )
    } else if lower.contains("mtu") {
        format!(
            "XDP on virtio_net needs each frame in one page: lower the MTU of {iface} (`ip link set dev {iface} mtu 1500`), or give the device mergeable buffers; {last_resort}"
        )
    } else if lower.contains("any_header_sg") {
        format!(
            "the hypervisor's virtio-net device lacks VIRTIO_F_ANY_LAYOUT (any_header_sg), which XDP on virtio_net needs: use a newer hypervisor or device model; {last_resort}"
        )
    } else {
        format!(
            "virtio_net supports native XDP; the usual obstacles are guest offloads enabled by the host (`ethtool -k {iface} | grep -e gro-hw -e lro`: turn them off, or have the hypervisor do it if they are fixed) and too few queues (`ethtool -l {iface}`); {last_resort}"
        )
    }
}

fn veth_fix(iface: &str, lower: &str, last_resort: &str) -> String {
    if lower.contains("peer mtu") {
        format!(
            "native XDP on a veth needs frames that fit one page: lower the MTU of the veth peer of {iface} (e.g. to 1500); {last_resort}"
        )
    } else if lower.contains("rx queues") {
        format!(
            "XDP on a veth needs at least as many RX queues on {iface} as its peer has TX queues: recreate the pair with matching queue counts (`ip link add ... numrxqueues N numtxqueues N`); {last_resort}"
        )
    } else if lower.contains("peer is detached") {
        format!("the veth peer of {iface} is gone: recreate the pair")
    } else {
        format!(
            "veth supports native XDP; frames sent back out (XDP_TX) also need an XDP program on the peer, and the peer's MTU must fit one page; {last_resort}"
        )
    }
}

/// After a native XDP attach on virtio_net: the driver wants one queue per
/// possible CPU for XDP_TX and redirects beside the queue pairs in use, and
/// with fewer free queues it falls back to shared queues under a lock (the
/// kernel logs "XDP_TX and XDP_REDIRECT will operate in a slower locked tx
/// mode" once, and the attach succeeds). With queues of its own one of the
/// real queue counts grows by `cpus` (the RX count, as sysfs showed on
/// Debian's 6.1 and 6.12 in the kernel lane: rx 4, tx 2 with 2 vCPUs); in
/// the locked mode neither does. tx, rx: the interface's real queue
/// counts (sysfs); cpus: possible CPUs.
/// Returns: the warning, or None when XDP has queues of its own.
pub fn virtio_locked_xdp_tx(iface: &str, tx: u32, rx: u32, cpus: u32) -> Option<String> {
    if tx.max(rx) >= tx.min(rx) + cpus {
        return None;
    }
    let want = 2 * cpus.max(tx.min(rx));
    Some(format!(
        "XDP_TX and redirects on {iface} (virtio_net) run in the driver's slower locked mode: it has {rx} RX and {tx} TX queues for {cpus} CPUs, and XDP needs one queue per CPU of its own beside those in use; give the VM at least {want} queue pairs (QEMU: -netdev tap,...,queues={want} -device virtio-net-pci,mq=on,vectors={}; libvirt: <driver queues='{want}'/>) and keep `ethtool -l {iface}` combined at the vCPU count",
        2 * want + 2
    ))
}

/// [`virtio_locked_xdp_tx`] for `iface` as sysfs shows it now; None for
/// other drivers or when sysfs cannot tell.
pub fn xdp_tx_locked(iface: &str) -> Option<String> {
    if driver_of(iface).as_deref() != Some("virtio_net") {
        return None;
    }
    let queues = |prefix: &str| -> Option<u32> {
        let dir = Path::new("/sys/class/net").join(iface).join("queues");
        let n = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .count();
        u32::try_from(n).ok()
    };
    let cpus = possible_cpus(&std::fs::read_to_string("/sys/devices/system/cpu/possible").ok()?)?;
    virtio_locked_xdp_tx(iface, queues("tx-")?, queues("rx-")?, cpus)
}

/// The number of CPUs in a kernel CPU list ("0-3", "0,2-5").
pub fn possible_cpus(list: &str) -> Option<u32> {
    let mut n = 0;
    for part in list.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => b.parse::<u32>().ok()?.checked_sub(a.parse().ok()?)? + 1,
            None => {
                part.parse::<u32>().ok()?;
                1
            }
        };
    }
    Some(n)
}

/// The errno in an error text ("... (os error 95)"), as std and libbpf-rs
/// print it.
pub fn os_error(text: &str) -> Option<i32> {
    let start = text.rfind("(os error ")? + "(os error ".len();
    text[start..].split(')').next()?.parse().ok()
}

/// The driver of `interface`: the sysfs `device/driver` link (physical and
/// virtio devices), else the link kind of a virtual device (`veth`, from
/// `/sys/class/net/IF/...`'s uevent or the kernel's link info, see
/// [`crate::netlink::link_kind`]).
pub fn driver_of(interface: &str) -> Option<String> {
    let link = Path::new("/sys/class/net")
        .join(interface)
        .join("device/driver");
    if let Some(name) = std::fs::read_link(&link)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    {
        return Some(name);
    }
    crate::netlink::link_kind(interface)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(driver: &str, errno: i32, msg: Option<&str>) -> String {
        xdp_attach_hint(&XdpAttachFailure {
            interface: "eth0",
            errno: Some(errno),
            kernel_message: msg,
            driver: Some(driver),
            native: true,
        })
    }

    // Kernel messages as drivers send them (virtio_net in kernels 4.x-6.x,
    // veth, the core's dev_xdp_attach), recorded from the kernel sources
    // and from libbpf's "Kernel error message:" lines.

    #[test]
    fn virtio_offloads_name_ethtool_and_the_hypervisor_not_generic_mode_first() {
        for msg in [
            "virtio_net: Can't set XDP while host is implementing GRO_HW/CSUM, disable GRO_HW/CSUM first",
            "virtio_net: Can't set XDP while host is implementing LRO/CSUM, disable LRO/CSUM first",
            "virtio_net: Can't set XDP while host is implementing GRO_HW, disable GRO_HW first",
            "virtio_net: Can't set XDP without frags while guest is implementing GUEST_CSUM",
        ] {
            let h = hint("virtio_net", EOPNOTSUPP, Some(msg));
            assert!(h.contains(msg), "the kernel's message is passed on: {h}");
            assert!(h.contains("ethtool -K eth0 rx-gro-hw off"), "{h}");
            assert!(h.contains("hypervisor must"), "{h}");
            assert!(!h.contains("has no native XDP"), "{h}");
            let generic = h.find("--xdp-mode generic").expect("named as last resort");
            assert!(h[..generic].contains("last resort"), "{h}");
        }
    }

    #[test]
    fn virtio_queues_and_mtu() {
        let h = hint(
            "virtio_net",
            12,
            Some("virtio_net: Too few free TX rings available"),
        );
        assert!(h.contains("ethtool -L eth0 combined"), "{h}");
        let h = hint(
            "virtio_net",
            22,
            Some("virtio_net: MTU too large to enable XDP"),
        );
        assert!(h.contains("lower the MTU of eth0"), "{h}");
        let h = hint(
            "virtio_net",
            22,
            Some("virtio_net: XDP expects header/data in single page, any_header_sg required"),
        );
        assert!(h.contains("ANY_LAYOUT"), "{h}");
        let h = hint("virtio_net", EOPNOTSUPP, None);
        assert!(h.contains("supports native XDP"), "{h}");
        assert!(h.contains("gro-hw"), "{h}");
    }

    #[test]
    fn virtio_mtu_above_a_page_names_the_mtu_not_mergeable_buffers() {
        let h = hint(
            "virtio_net",
            22,
            Some("virtio_net: MTU too large to enable XDP without frags"),
        );
        assert!(h.contains("lower the MTU"), "{h}");
        assert!(h.contains("mergeable buffers do not help"), "{h}");
    }

    #[test]
    fn virtio_locked_xdp_tx_is_told_with_the_queue_count_to_give() {
        // 2 vCPUs, 1 queue pair (QEMU's default): locked.
        let w = super::virtio_locked_xdp_tx("eth0", 1, 1, 2).expect("locked");
        assert!(w.contains("slower locked mode"), "{w}");
        assert!(w.contains("queues=4"), "{w}");
        // 2 vCPUs, 4 queue pairs, 2 in use: XDP took 2 of its own (sysfs
        // on 6.1 and 6.12: rx 4, tx 2).
        assert_eq!(super::virtio_locked_xdp_tx("eth0", 2, 4, 2), None);
        assert_eq!(super::virtio_locked_xdp_tx("eth0", 4, 2, 2), None);
        // 2 vCPUs, 2 queue pairs, both in use: nothing left for XDP.
        assert!(super::virtio_locked_xdp_tx("eth0", 2, 2, 2).is_some());
        assert_eq!(super::possible_cpus("0-1\n"), Some(2));
        assert_eq!(super::possible_cpus("0,2-5"), Some(5));
        assert_eq!(super::possible_cpus("x"), None);
        assert_eq!(super::possible_cpus("5-2"), None);
    }

    #[test]
    fn veth_messages() {
        let h = hint("veth", 34, Some("veth: Peer MTU is too large to set XDP"));
        assert!(h.contains("lower the MTU of the veth peer of eth0"), "{h}");
        let h = hint(
            "veth",
            28,
            Some("veth: XDP expects number of rx queues not less than peer tx queues"),
        );
        assert!(h.contains("numrxqueues"), "{h}");
    }

    #[test]
    fn only_a_driver_without_ndo_bpf_has_no_native_xdp() {
        let h = hint(
            "r8169",
            EOPNOTSUPP,
            Some("Underlying driver does not support XDP in native mode"),
        );
        assert!(h.contains("(r8169) has no native XDP"), "{h}");
        assert!(h.contains("--xdp-mode generic"), "{h}");
        let h = hint("mlx5_core", EOPNOTSUPP, None);
        assert!(
            !h.contains("has no native XDP"),
            "EOPNOTSUPP alone proves nothing: {h}"
        );
        assert!(h.contains("refused native XDP"), "{h}");
    }

    #[test]
    fn errno_from_text() {
        assert_eq!(os_error("Operation not supported (os error 95)"), Some(95));
        assert_eq!(os_error("no errno here"), None);
    }

    #[test]
    fn other_mode_and_permissions() {
        let h = hint(
            "veth",
            17,
            Some("Native and generic XDP can't be active at the same time."),
        );
        assert!(h.contains("xdpgeneric off"), "{h}");
        let h = hint("veth", EPERM, None);
        assert!(h.contains("CAP_BPF"), "{h}");
    }
}
