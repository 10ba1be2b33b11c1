//! Map key and value layouts: the `Plain` impls that let the generated
//! structs be viewed as bytes, and the conversions between nilb's types and
//! the header's structs (addresses and ports in network order).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use anyhow::Result;

use super::sys;
use crate::dataplane::ops::{ControlRecord, RecordAdmin, RecordHealth};
use crate::types::{Protocol, ServiceKey};

// SAFETY: plain C structs of integers (and integer arrays) without padding
// holes that matter for reading; any bit pattern is a valid value.
unsafe impl plain::Plain for sys::nilb_service_key {}
unsafe impl plain::Plain for sys::nilb_service6_key {}
unsafe impl plain::Plain for sys::nilb_addr6 {}
unsafe impl plain::Plain for sys::nilb_config6 {}
unsafe impl plain::Plain for sys::nilb_hash_probe6 {}
unsafe impl plain::Plain for sys::nilb_bucket {}
unsafe impl plain::Plain for sys::nilb_service {}
unsafe impl plain::Plain for sys::nilb_backend {}
unsafe impl plain::Plain for sys::nilb_config {}
unsafe impl plain::Plain for sys::nilb_service_stats {}
unsafe impl plain::Plain for sys::nilb_backend_stats {}
unsafe impl plain::Plain for sys::nilb_hash_probe {}
unsafe impl plain::Plain for sys::nilb_addr_info {}
unsafe impl plain::Plain for sys::nilb_control_state {}
unsafe impl plain::Plain for sys::nilb_filter_rule {}
unsafe impl plain::Plain for sys::nilb_filter_stats {}
unsafe impl plain::Plain for sys::nilb_filter_scope {}
unsafe impl plain::Plain for sys::nilb_filter_v4_key {}
unsafe impl plain::Plain for sys::nilb_rate_key {}
unsafe impl plain::Plain for sys::nilb_rate_state {}
unsafe impl plain::Plain for sys::nilb_nat_key {}
unsafe impl plain::Plain for sys::nilb_nat_flow {}
unsafe impl plain::Plain for sys::nilb_handoff {}

/// The `handoff` value for the mark `mac`, made a locally administered
/// unicast MAC (bit 1 of the first byte set, bit 0 clear): the form the
/// programs take for a written mark (bpf/common.h `get_handoff`).
pub fn handoff_value(mut mac: [u8; 6]) -> sys::nilb_handoff {
    mac[0] = (mac[0] & 0xfc) | 0x02;
    sys::nilb_handoff { mac, pad: [0; 2] }
}

/// The mark a `handoff` value holds, or None while it is unwritten (its
/// locally administered bit clear, as in an empty map) or short.
pub fn handoff_mark(value: &[u8]) -> Option<[u8; 6]> {
    let h: sys::nilb_handoff = read_struct(value).ok()?;
    (h.mac[0] & 0x02 != 0).then_some(h.mac)
}

/// View a plain struct as its bytes.
pub fn bytes_of<T: plain::Plain>(v: &T) -> &[u8] {
    // SAFETY: T is Plain (no invalid bit patterns, no references); the slice
    // covers exactly the value and lives as long as the borrow.
    unsafe { plain::as_bytes(v) }
}

/// Copy a plain struct out of bytes (shorter input is an error).
pub fn read_struct<T: plain::Plain + Default>(bytes: &[u8]) -> Result<T> {
    let mut v = T::default();
    plain::copy_from_bytes(&mut v, bytes).map_err(|e| {
        anyhow::anyhow!("short map value for {}: {e:?}", std::any::type_name::<T>())
    })?;
    Ok(v)
}

/// The value of a `vips` entry with `flags` (`enum nilb_addr_flags`).
pub fn vip_value(flags: u32) -> sys::nilb_addr_info {
    sys::nilb_addr_info { flags }
}

/// Network-order u32 of an address as stored in maps (the wire bytes).
pub fn addr_be(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets())
}

/// Inverse of [`addr_be`].
pub fn addr_from_be(v: u32) -> Ipv4Addr {
    Ipv4Addr::from(v.to_ne_bytes())
}

/// Which services map holds a service: `services` (IPv4 VIP, key
/// `nilb_service_key`, 8 bytes) or `services6` (IPv6, `nilb_service6_key`,
/// 20 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServicesMap {
    /// `services`.
    V4,
    /// `services6`.
    V6,
}

/// The map a service's key goes in and the key's bytes (addresses and
/// ports in network order).
pub fn service_key(k: &ServiceKey) -> (ServicesMap, Vec<u8>) {
    match k.vip {
        IpAddr::V4(v) => {
            let raw = sys::nilb_service_key {
                vip: addr_be(v),
                port: k.port.to_be(),
                proto: k.protocol.number(),
                pad: 0,
            };
            (ServicesMap::V4, bytes_of(&raw).to_vec())
        }
        IpAddr::V6(v) => {
            let raw = sys::nilb_service6_key {
                vip: v.octets(),
                port: k.port.to_be(),
                proto: k.protocol.number(),
                pad: 0,
            };
            (ServicesMap::V6, bytes_of(&raw).to_vec())
        }
    }
}

fn protocol_of(proto: u8) -> Option<Protocol> {
    match proto {
        crate::hash::IPPROTO_TCP => Some(Protocol::Tcp),
        crate::hash::IPPROTO_UDP => Some(Protocol::Udp),
        _ => None,
    }
}

/// Decode a `services` (8 bytes) or `services6` (20 bytes) map key; None
/// for a protocol nilb does not use. Other lengths are an error.
pub fn parse_service_key(bytes: &[u8]) -> Result<Option<ServiceKey>> {
    if bytes.len() == std::mem::size_of::<sys::nilb_service6_key>() {
        let k: sys::nilb_service6_key = read_struct(bytes)?;
        return Ok(protocol_of(k.proto).map(|protocol| ServiceKey {
            vip: IpAddr::V6(Ipv6Addr::from(k.vip)),
            port: u16::from_be(k.port),
            protocol,
        }));
    }
    anyhow::ensure!(
        bytes.len() == std::mem::size_of::<sys::nilb_service_key>(),
        "a services key of {} bytes",
        bytes.len()
    );
    let k: sys::nilb_service_key = read_struct(bytes)?;
    Ok(protocol_of(k.proto).map(|protocol| ServiceKey {
        vip: IpAddr::V4(addr_from_be(k.vip)),
        port: u16::from_be(k.port),
        protocol,
    }))
}

/// Key of `vips6` for an IPv6 address.
pub fn addr6_key(a: Ipv6Addr) -> sys::nilb_addr6 {
    sys::nilb_addr6 { addr: a.octets() }
}

/// Bytes a bucket takes in the pool (`struct nilb_bucket`).
pub const BUCKET_BYTES: usize = std::mem::size_of::<sys::nilb_bucket>();

/// Bytes a bucket's move time takes in `bucket_moved` (a `u32` per bucket,
/// at byte `4 * index` through the mapping).
pub const MOVED_BYTES: usize = 4;

/// Bytes a bucket's entry takes in `bucket_first` (a `u16` per bucket, at
/// byte `2 * index` through the mapping, host order).
pub const FIRST_BYTES: usize = 2;

/// Buckets per `bucket_first` element (its max_entries is the pool's
/// buckets divided by this).
pub const FIRST_HOPS_PER_ELEM: u32 = sys::nilb_limits::NILB_FIRST_HOPS_PER_ELEM;

/// Bit of a `bucket_first` entry: the bucket lists previous owners.
pub const FIRST_HOP_CHAIN: u16 = sys::nilb_limits::NILB_FIRST_HOP_CHAIN as u16;

/// The `bucket_first` entry of the bucket whose word is `word`
/// ([`bucket_word`]): the first hop's slot, with [`FIRST_HOP_CHAIN`] when
/// a previous owner follows it (bpf/maps.h `bucket_first`).
pub fn first_hop_entry(word: u64) -> u16 {
    let hops = bucket_hops(word);
    hops[0] | if hops[1] != 0 { FIRST_HOP_CHAIN } else { 0 }
}

/// Bytes between two `backends` elements through the mapping (an ARRAY
/// element is its value rounded up to 8 bytes).
pub const BACKEND_STRIDE: usize = std::mem::size_of::<sys::nilb_backend>().div_ceil(8) * 8;

/// Hops a bucket holds: the first hop and the previous owners.
pub const MAX_OWNERS: usize = sys::nilb_limits::NILB_MAX_OWNERS as usize;

/// Value of the `services` map for a service whose table is the `size`
/// buckets from `base` in the pool, with stats index `service_index` and
/// attributes `attrs` (the value's last four bytes as one number, see
/// [`service_attrs`]).
pub fn service_value(base: u32, size: u32, service_index: u32, attrs: u32) -> sys::nilb_service {
    sys::nilb_service {
        table_base: base,
        table_mask: size - 1,
        service_index,
        flags: attrs as u16,
        nat_port: (attrs >> 16) as u16,
    }
}

/// A `services` value's attributes as one number: `flags` (`enum
/// nilb_service_flags`) in the low 16 bits, `nat_port` (as stored: network
/// order) in the high 16 bits. The control plane keeps them so between
/// writes.
pub fn service_attrs(v: &sys::nilb_service) -> u32 {
    v.flags as u32 | (v.nat_port as u32) << 16
}

/// `attrs` ([`service_attrs`]) with NAT mode set to `nat_port` (host
/// order; the service's listening port on the backends) or cleared
/// (None); the other flags unchanged.
pub fn with_nat(attrs: u32, nat_port: Option<u16>) -> u32 {
    let rest = attrs & 0xffff & !SERVICE_FLAG_NAT;
    match nat_port {
        Some(p) => rest | SERVICE_FLAG_NAT | (p.to_be() as u32) << 16,
        None => rest,
    }
}

/// `nilb_service.flags` bit: the service has `quic_lb`.
pub const SERVICE_FLAG_QUIC_LB: u32 = sys::nilb_service_flags::NILB_SVC_F_QUIC_LB;
/// `nilb_service.flags` bit: the service is in NAT mode.
pub const SERVICE_FLAG_NAT: u32 = sys::nilb_service_flags::NILB_SVC_F_NAT;

/// A bucket's slots (`hops[]`: the first hop's, then the previous owners',
/// 0 after the last) as the one 8-byte word the programs read and the
/// control plane stores.
pub fn bucket_word(hops: [u16; MAX_OWNERS]) -> u64 {
    let v = sys::nilb_bucket { hops };
    u64::from_ne_bytes(bytes_of(&v).try_into().expect("8-byte bucket"))
}

/// Inverse of [`bucket_word`].
pub fn bucket_hops(word: u64) -> [u16; MAX_OWNERS] {
    let v: sys::nilb_bucket = read_struct(&word.to_ne_bytes()).expect("8-byte bucket");
    v.hops
}

/// A move time as `bucket_moved` keeps it: the table's clock, which the
/// daemon runs on boot-time milliseconds ([`crate::clock`]), as whole
/// seconds (at least 1: 0 is "never").
pub fn moved_value(ms: Option<u64>) -> u32 {
    ms.map_or(0, |ms| (ms / 1000).clamp(1, u32::MAX as u64) as u32)
}

/// An address as the four words of `struct nilb_backend.addr` and
/// `struct nilb_hop_cache.hop` (network order; IPv4 in word 0, the rest 0).
pub fn addr_words(a: IpAddr) -> [u32; 4] {
    match a {
        IpAddr::V4(v) => [addr_be(v), 0, 0, 0],
        IpAddr::V6(v) => {
            let o = v.octets();
            let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

/// Value of the `quic_servers` map for backend `dip` at `slot`. An IPv6
/// DIP has no 32-bit form: on an IPv6 cluster network the programs find
/// the backend by its slot, and `dip` is 0.
pub fn quic_backend_value(dip: IpAddr, slot: u32) -> sys::nilb_quic_backend {
    sys::nilb_quic_backend {
        dip: match dip {
            IpAddr::V4(d) => addr_be(d),
            IpAddr::V6(_) => 0,
        },
        slot,
    }
}

/// Value of the `backends` map for a slot whose backend is `a`
/// (NILB_FAMILY_IPV4 or NILB_FAMILY_IPV6).
pub fn backend_value(a: IpAddr) -> sys::nilb_backend {
    sys::nilb_backend {
        addr: addr_words(a),
        family: match a {
            IpAddr::V4(_) => sys::nilb_family::NILB_FAMILY_IPV4,
            IpAddr::V6(_) => sys::nilb_family::NILB_FAMILY_IPV6,
        },
    }
}

/// The address of a `backends` value, None for an unused slot (or one of
/// an unknown family).
pub fn backend_of(v: &sys::nilb_backend) -> Option<IpAddr> {
    match v.family {
        sys::nilb_family::NILB_FAMILY_IPV4 if v.addr[0] != 0 => {
            Some(IpAddr::V4(addr_from_be(v.addr[0])))
        }
        sys::nilb_family::NILB_FAMILY_IPV6 if v.addr != [0; 4] => {
            let mut o = [0u8; 16];
            for (i, w) in v.addr.iter().enumerate() {
                o[i * 4..i * 4 + 4].copy_from_slice(&w.to_ne_bytes());
            }
            Some(IpAddr::V6(Ipv6Addr::from(o)))
        }
        _ => None,
    }
}

fn health_value(h: RecordHealth) -> u8 {
    use sys::nilb_control_health as v;
    (match h {
        RecordHealth::Unknown => v::NILB_HEALTH_UNKNOWN,
        RecordHealth::Up => v::NILB_HEALTH_UP,
        RecordHealth::Down => v::NILB_HEALTH_DOWN,
    }) as u8
}

fn health_of(v: u8) -> Option<RecordHealth> {
    use sys::nilb_control_health as h;
    Some(match v as u32 {
        h::NILB_HEALTH_UNKNOWN => RecordHealth::Unknown,
        h::NILB_HEALTH_UP => RecordHealth::Up,
        h::NILB_HEALTH_DOWN => RecordHealth::Down,
        _ => return None,
    })
}

/// `nilb_control_state.service.pad` of an IPv6 service's record (its VIP
/// is in `control_vip6`).
const CONTROL_V6: u8 = 6;

/// Values of the `control_state`, `control_vip6` and `control_dip6` maps
/// for one slot (all zero: unused; `control_vip6` is zero for an IPv4
/// service, `control_dip6` for an IPv4 DIP).
pub fn control_state_value(
    r: Option<&ControlRecord>,
) -> (sys::nilb_control_state, sys::nilb_addr6, sys::nilb_addr6) {
    use sys::nilb_control_admin as a;
    use sys::nilb_control_flags as f;
    let Some(r) = r else {
        return Default::default();
    };
    let (service, vip6) = match r.service.vip {
        IpAddr::V4(v) => (
            sys::nilb_service_key {
                vip: addr_be(v),
                port: r.service.port.to_be(),
                proto: r.service.protocol.number(),
                pad: 0,
            },
            sys::nilb_addr6::default(),
        ),
        IpAddr::V6(v) => (
            sys::nilb_service_key {
                vip: 0,
                port: r.service.port.to_be(),
                proto: r.service.protocol.number(),
                pad: CONTROL_V6,
            },
            addr6_key(v),
        ),
    };
    let mut flags = 0;
    if r.removed_at_ms.is_some() {
        flags |= f::NILB_CS_REMOVED_AT;
    }
    if r.empty_since_ms.is_some() {
        flags |= f::NILB_CS_EMPTY_SINCE;
    }
    if r.first_result_decides {
        flags |= f::NILB_CS_FIRST_DECIDES;
    }
    let (dip, dip6) = match r.dip {
        IpAddr::V4(d) => (addr_be(d), sys::nilb_addr6::default()),
        IpAddr::V6(d) => {
            flags |= f::NILB_CS_DIP6;
            (0, addr6_key(d))
        }
    };
    let state = sys::nilb_control_state {
        service,
        dip,
        weight: r.weight,
        health: health_value(r.health),
        admin: match r.admin {
            RecordAdmin::Active => a::NILB_ADMIN_ACTIVE,
            RecordAdmin::Drained => a::NILB_ADMIN_DRAINED,
            RecordAdmin::Offline => a::NILB_ADMIN_OFFLINE,
            RecordAdmin::Removing => a::NILB_ADMIN_REMOVING,
        } as u8,
        flags: flags as u8,
        encap_health: health_value(r.encap),
        transitions: r.transitions.min(u32::MAX as u64) as u32,
        since_ms: r.since_ms,
        removed_at_ms: r.removed_at_ms.unwrap_or(0),
        empty_since_ms: r.empty_since_ms.unwrap_or(0),
    };
    (state, vip6, dip6)
}

/// Decode a `control_state` value (with the slot's `control_vip6` and
/// `control_dip6` values, if those maps exist); None for an unused slot or
/// one that nilb cannot read (unknown protocol or enum value, an IPv6
/// record without its VIP or DIP).
pub fn parse_control_state(
    bytes: &[u8],
    vip6: Option<&[u8]>,
    dip6: Option<&[u8]>,
) -> Result<Option<ControlRecord>> {
    use sys::nilb_control_admin as a;
    use sys::nilb_control_flags as f;
    let v: sys::nilb_control_state = read_struct(bytes)?;
    let dip = if v.flags as u32 & f::NILB_CS_DIP6 != 0 {
        let Some(b) = dip6 else {
            return Ok(None);
        };
        let a: sys::nilb_addr6 = read_struct(b)?;
        let d = Ipv6Addr::from(a.addr);
        if d.is_unspecified() {
            return Ok(None);
        }
        IpAddr::V6(d)
    } else if v.dip == 0 {
        return Ok(None);
    } else {
        IpAddr::V4(addr_from_be(v.dip))
    };
    let Some(mut service) = parse_service_key(bytes_of(&v.service))? else {
        return Ok(None);
    };
    if v.service.pad == CONTROL_V6 {
        let Some(b) = vip6 else {
            return Ok(None);
        };
        let a: sys::nilb_addr6 = read_struct(b)?;
        service.vip = IpAddr::V6(Ipv6Addr::from(a.addr));
    }
    let (Some(health), Some(encap)) = (health_of(v.health), health_of(v.encap_health)) else {
        return Ok(None);
    };
    let admin = match v.admin as u32 {
        a::NILB_ADMIN_ACTIVE => RecordAdmin::Active,
        a::NILB_ADMIN_DRAINED => RecordAdmin::Drained,
        a::NILB_ADMIN_OFFLINE => RecordAdmin::Offline,
        a::NILB_ADMIN_REMOVING => RecordAdmin::Removing,
        _ => return Ok(None),
    };
    let flag = |b: u32| v.flags as u32 & b != 0;
    Ok(Some(ControlRecord {
        service,
        dip,
        weight: v.weight,
        admin,
        health,
        encap,
        first_result_decides: flag(f::NILB_CS_FIRST_DECIDES),
        transitions: v.transitions as u64,
        since_ms: v.since_ms,
        removed_at_ms: flag(f::NILB_CS_REMOVED_AT).then_some(v.removed_at_ms),
        empty_since_ms: flag(f::NILB_CS_EMPTY_SINCE).then_some(v.empty_since_ms),
    }))
}

/// Values of the `nilb_config` and `config6` maps (`icmp_too_big_rate`:
/// replies per second per CPU). An IPv4 `node`: its address and checksum
/// base in `nilb_config`, `config6` all zero. An IPv6 one (IPv6 cluster
/// network): `NILB_F_CLUSTER_IPV6` set, `node_addr` and `outer_csum_base`
/// 0, the address in `config6`.
pub fn config_value(
    node: IpAddr,
    hash_seed: u32,
    gue_port: u16,
    flags: u32,
    icmp_too_big_rate: u16,
) -> (sys::nilb_config, sys::nilb_config6) {
    let (node_addr, csum, flags, six) = match node {
        IpAddr::V4(n) => (
            addr_be(n),
            outer_csum_base(n),
            flags & !sys::nilb_config_flags::NILB_F_CLUSTER_IPV6,
            sys::nilb_config6::default(),
        ),
        IpAddr::V6(n) => (
            0,
            0,
            flags | sys::nilb_config_flags::NILB_F_CLUSTER_IPV6,
            sys::nilb_config6 {
                node_addr: n.octets(),
            },
        ),
    };
    (
        sys::nilb_config {
            node_addr,
            hash_seed,
            gue_port: gue_port.to_be(),
            icmp_too_big_rate,
            flags,
            outer_csum_base: csum,
        },
        six,
    )
}

/// The node address `nilb_config` and `config6` hold: `config6`'s under
/// `NILB_F_CLUSTER_IPV6` (None: that map is missing), else `node_addr`.
pub fn node_of(c: &sys::nilb_config, c6: Option<&sys::nilb_config6>) -> Option<IpAddr> {
    if c.flags & sys::nilb_config_flags::NILB_F_CLUSTER_IPV6 != 0 {
        c6.map(|c6| IpAddr::V6(Ipv6Addr::from(c6.node_addr)))
    } else {
        Some(IpAddr::V4(addr_from_be(c.node_addr)))
    }
}

/// Sum of the constant 16-bit words of nilb's outer IPv4 header (version 4,
/// IHL 5, TOS 0; ID 0; DF; TTL 64, UDP; source `node`) as native-order loads
/// of the wire bytes, the way the XDP program sums the per-packet words.
pub fn outer_csum_base(node: Ipv4Addr) -> u32 {
    let ttl = sys::nilb_wire::NILB_OUTER_TTL as u8;
    let o = node.octets();
    [
        [0x45, 0x00],
        [0x00, 0x00],
        [0x40, 0x00],
        [ttl, 17],
        [o[0], o[1]],
        [o[2], o[3]],
    ]
    .iter()
    .map(|w| u16::from_ne_bytes(*w) as u32)
    .sum()
}

/// Value that makes a map-in-map slot point at `inner` (the edge filters'
/// tables).
pub fn map_fd_value(inner: std::os::fd::BorrowedFd<'_>) -> [u8; 4] {
    use std::os::fd::AsRawFd;
    (inner.as_raw_fd() as u32).to_ne_bytes()
}

/// Sum of a per-CPU u64 counter.
pub fn sum_percpu_u64(values: &[Vec<u8>]) -> u64 {
    values
        .iter()
        .filter_map(|v| v.get(..8))
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .sum()
}

/// Per-CPU service stats summed over CPUs.
pub fn sum_service_stats(values: &[Vec<u8>]) -> Result<sys::nilb_service_stats> {
    let mut total = sys::nilb_service_stats::default();
    for v in values {
        let s: sys::nilb_service_stats = read_struct(v)?;
        total.xdp_drops += s.xdp_drops;
        total.tc_decap += s.tc_decap;
        total.tc_forward += s.tc_forward;
        total.tc_drops += s.tc_drops;
    }
    Ok(total)
}

/// Per-CPU filter rule stats summed over CPUs.
pub fn sum_filter_stats(values: &[Vec<u8>]) -> Result<sys::nilb_filter_stats> {
    let mut total = sys::nilb_filter_stats::default();
    for v in values {
        let s: sys::nilb_filter_stats = read_struct(v)?;
        total.packets += s.packets;
        total.bytes += s.bytes;
    }
    Ok(total)
}

/// The `filter_rules` value of a rule (`scope`: 0 global, 1 + service
/// index).
pub fn filter_rule_value(rule: &crate::filters::Rule, scope: u32) -> sys::nilb_filter_rule {
    use crate::filters::{gcra, rate_mask};
    let mut f = 0u8;
    if rule.dry_run {
        f |= sys::nilb_filter_bits::NILB_FR_DRY_RUN as u8;
    }
    if rule.covers_cluster {
        f |= sys::nilb_filter_bits::NILB_FR_COVERS_CLUSTER as u8;
    }
    let mut v = sys::nilb_filter_rule {
        kind: rule.ident.kind.code(),
        flags: f,
        scope,
        ..Default::default()
    };
    if let Some((per, packets, syns)) = &rule.rate {
        v.mask_v4 = rate_mask(*per);
        v.prefix_v6 = match per {
            crate::config::RatePer::Address => 128,
            crate::config::RatePer::Subnet => 64,
        };
        if let Some(r) = packets {
            (v.pkt_interval_ns, v.pkt_tolerance_ns) = gcra(r);
        }
        if let Some(r) = syns {
            (v.syn_interval_ns, v.syn_tolerance_ns) = gcra(r);
        }
    }
    let n = rule.ident.name.len().min(v.name.len() - 1);
    v.name[..n].copy_from_slice(&rule.ident.name.as_bytes()[..n]);
    v
}

/// A rule's name from its `filter_rules` value.
pub fn filter_rule_name(v: &sys::nilb_filter_rule) -> String {
    let end = v.name.iter().position(|&b| b == 0).unwrap_or(v.name.len());
    String::from_utf8_lossy(&v.name[..end]).into_owned()
}

/// Key of the service prefix trie for `prefix` in scope `scope` (1 +
/// service index).
pub fn filter_trie_key(scope: u32, prefix: &crate::prefix::Prefix4) -> sys::nilb_filter_v4_key {
    sys::nilb_filter_v4_key {
        prefixlen: 32 + prefix.len as u32,
        scope,
        addr: addr_be(prefix.addr),
    }
}

/// Per-CPU backend stats summed over CPUs.
pub fn sum_backend_stats(values: &[Vec<u8>]) -> Result<sys::nilb_backend_stats> {
    let mut total = sys::nilb_backend_stats::default();
    for v in values {
        let s: sys::nilb_backend_stats = read_struct(v)?;
        total.packets += s.packets;
        total.bytes += s.bytes;
        total.syns += s.syns;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::abi::{skel, COUNTER_HELP, COUNTER_NAMES};

    #[test]
    fn layouts_match_the_header() {
        assert_eq!(std::mem::size_of::<sys::nilb_service_key>(), 8);
        assert_eq!(std::mem::size_of::<sys::nilb_service6_key>(), 20);
        assert_eq!(std::mem::size_of::<sys::nilb_addr6>(), 16);
        assert_eq!(std::mem::size_of::<sys::nilb_bucket>(), 8);
        assert_eq!(std::mem::size_of::<sys::nilb_service>(), 16);
        assert_eq!(std::mem::size_of::<sys::nilb_backend>(), 20);
        assert_eq!(std::mem::size_of::<sys::nilb_backend_stats>(), 24);
        assert_eq!(std::mem::size_of::<sys::nilb_config>(), 20);
        assert_eq!(std::mem::size_of::<sys::nilb_service_stats>(), 32);
        assert_eq!(std::mem::size_of::<sys::nilb_control_state>(), 48);
        assert_eq!(std::mem::size_of::<skel::types::xdp_md>(), 24);
        assert_eq!(std::mem::size_of::<sys::nilb_filter_rule>(), 80);
        assert_eq!(std::mem::size_of::<sys::nilb_filter_scope>(), 16);
        assert_eq!(std::mem::size_of::<sys::nilb_filter_v4_key>(), 12);
        assert_eq!(std::mem::size_of::<sys::nilb_rate_key>(), 20);
        assert_eq!(std::mem::size_of::<sys::nilb_rate_state>(), 32);
        assert_eq!(
            std::mem::size_of::<sys::nilb_filter_bucket>(),
            8 * crate::filters::BUCKET_SLOTS
        );
    }

    #[test]
    fn counter_names_follow_the_enum() {
        assert_eq!(
            COUNTER_NAMES.len(),
            sys::nilb_counter::NILB_COUNTER_MAX as usize
        );
        assert_eq!(
            COUNTER_NAMES[sys::nilb_counter::C_TC_FORWARD as usize],
            "tc_forward"
        );
        assert_eq!(
            COUNTER_NAMES[sys::nilb_counter::C_XDP_DROP_FRAGMENT as usize],
            "xdp_drop_fragment"
        );
        assert!(COUNTER_HELP.iter().all(|h| !h.is_empty()));
    }

    #[test]
    fn service_key_bytes_are_network_order() {
        let k = ServiceKey {
            vip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            port: 80,
            protocol: Protocol::Tcp,
        };
        let (map, raw) = service_key(&k);
        assert_eq!(map, ServicesMap::V4);
        assert_eq!(raw, &[10, 0, 0, 100, 0, 80, 6, 0]);
        assert_eq!(parse_service_key(&raw).unwrap(), Some(k));
        let k6 = ServiceKey {
            vip: "2001:db8::1".parse().unwrap(),
            port: 443,
            protocol: Protocol::Udp,
        };
        let (map, raw) = service_key(&k6);
        assert_eq!(map, ServicesMap::V6);
        let mut want = vec![0x20, 0x01, 0x0d, 0xb8];
        want.extend([0; 11]);
        want.extend([1, 0x01, 0xbb, 17, 0]);
        assert_eq!(raw, want);
        assert_eq!(parse_service_key(&raw).unwrap(), Some(k6));
        assert!(parse_service_key(&raw[..12]).is_err());
    }

    #[test]
    fn control_records_round_trip() {
        let r = ControlRecord {
            service: ServiceKey {
                vip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
                port: 80,
                protocol: Protocol::Tcp,
            },
            dip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 13)),
            weight: 300,
            admin: RecordAdmin::Removing,
            health: RecordHealth::Down,
            encap: RecordHealth::Up,
            first_result_decides: false,
            transitions: 7,
            since_ms: 0,
            removed_at_ms: Some(0),
            empty_since_ms: None,
        };
        let (v, v6, d6) = control_state_value(Some(&r));
        assert_eq!(&bytes_of(&v)[8..12], &[10, 0, 0, 13]);
        assert_eq!(bytes_of(&v6), &[0; 16]);
        assert_eq!(bytes_of(&d6), &[0; 16]);
        assert_eq!(v.flags as u32 & sys::nilb_control_flags::NILB_CS_DIP6, 0);
        assert_eq!(
            parse_control_state(bytes_of(&v), Some(bytes_of(&v6)), Some(bytes_of(&d6))).unwrap(),
            Some(r.clone())
        );
        assert_eq!(
            parse_control_state(bytes_of(&v), None, None).unwrap(),
            Some(r.clone())
        );
        let (unused, _, _) = control_state_value(None);
        assert_eq!(
            parse_control_state(bytes_of(&unused), None, None).unwrap(),
            None
        );
        // An IPv6 service: its VIP in control_vip6; without that map's
        // value the record cannot be read.
        let mut r6 = r;
        r6.service.vip = "2001:db8::100".parse().unwrap();
        let (v, v6, _) = control_state_value(Some(&r6));
        assert_eq!(&bytes_of(&v)[..4], &[0; 4]);
        assert_eq!(
            parse_control_state(bytes_of(&v), Some(bytes_of(&v6)), None).unwrap(),
            Some(r6.clone())
        );
        assert_eq!(parse_control_state(bytes_of(&v), None, None).unwrap(), None);
        // An IPv6 DIP (IPv6 cluster network): dip 0 and NILB_CS_DIP6, the
        // address in control_dip6; without that map's value the record
        // cannot be read (and an older daemon sees an unused slot).
        let mut d = r6;
        d.dip = "2001:db8:1::13".parse().unwrap();
        let (v, v6, d6) = control_state_value(Some(&d));
        assert_eq!(v.dip, 0);
        assert_ne!(v.flags as u32 & sys::nilb_control_flags::NILB_CS_DIP6, 0);
        assert_eq!(
            bytes_of(&d6),
            &"2001:db8:1::13".parse::<Ipv6Addr>().unwrap().octets()
        );
        assert_eq!(
            parse_control_state(bytes_of(&v), Some(bytes_of(&v6)), Some(bytes_of(&d6))).unwrap(),
            Some(d.clone())
        );
        assert_eq!(
            parse_control_state(bytes_of(&v), Some(bytes_of(&v6)), None).unwrap(),
            None
        );
        assert_eq!(
            parse_control_state(bytes_of(&v), Some(bytes_of(&v6)), Some(&[0; 16])).unwrap(),
            None
        );
    }

    #[test]
    fn node_settings_of_either_cluster_family() {
        use sys::nilb_config_flags::NILB_F_CLUSTER_IPV6;
        let n4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 11));
        let (c, c6) = config_value(n4, 7, 6080, 0x1, 100);
        assert_eq!(c.node_addr, addr_be(Ipv4Addr::new(10, 0, 0, 11)));
        assert_eq!(
            c.outer_csum_base,
            outer_csum_base(Ipv4Addr::new(10, 0, 0, 11))
        );
        assert_eq!(c.flags, 0x1);
        assert_eq!(bytes_of(&c6), &[0; 16]);
        assert_eq!(node_of(&c, Some(&c6)), Some(n4));
        assert_eq!(node_of(&c, None), Some(n4));
        let n6: IpAddr = "2001:db8::11".parse().unwrap();
        let (c, c6) = config_value(n6, 7, 6080, 0x1, 100);
        assert_eq!((c.node_addr, c.outer_csum_base), (0, 0));
        assert_eq!(c.flags, 0x1 | NILB_F_CLUSTER_IPV6);
        assert_eq!((c.hash_seed, u16::from_be(c.gue_port)), (7, 6080));
        assert_eq!(IpAddr::V6(Ipv6Addr::from(c6.node_addr)), n6);
        assert_eq!(node_of(&c, Some(&c6)), Some(n6));
        assert_eq!(node_of(&c, None), None);
        // The flag follows the node, whatever the caller passed.
        let (c, _) = config_value(n4, 7, 6080, NILB_F_CLUSTER_IPV6, 100);
        assert_eq!(c.flags, 0);
    }

    #[test]
    fn bucket_words_are_the_hops_in_memory_order() {
        let w = bucket_word([7, 9, 0, 0]);
        assert_eq!(
            &w.to_ne_bytes(),
            &[7u16.to_ne_bytes(), 9u16.to_ne_bytes(), [0, 0], [0, 0]].concat()[..]
        );
        assert_eq!(bucket_hops(w), [7, 9, 0, 0]);
        // What the XDP program reads: hops[i] = (word >> 16 i) & 0xffff on
        // the little-endian machines nilb runs on.
        if cfg!(target_endian = "little") {
            assert_eq!(w & 0xffff, 7);
            assert_eq!((w >> 16) & 0xffff, 9);
        }
        assert_eq!(moved_value(None), 0);
        assert_eq!(moved_value(Some(999)), 1);
        assert_eq!(moved_value(Some(12_345_678)), 12_345);
        let b = backend_value(Ipv4Addr::new(10, 0, 0, 12).into());
        assert_eq!(&bytes_of(&b)[..4], &[10, 0, 0, 12]);
        assert_eq!(&bytes_of(&b)[4..16], &[0; 12]);
        assert_eq!(b.family, sys::nilb_family::NILB_FAMILY_IPV4);
        assert_eq!(backend_of(&b), Some(Ipv4Addr::new(10, 0, 0, 12).into()));
        assert_eq!(backend_of(&sys::nilb_backend::default()), None);
        // An IPv6 DIP: the 16 bytes in network order, family 6.
        let d6: Ipv6Addr = "2001:db8::c".parse().unwrap();
        let b = backend_value(d6.into());
        assert_eq!(&bytes_of(&b)[..16], &d6.octets());
        assert_eq!(b.family, sys::nilb_family::NILB_FAMILY_IPV6);
        assert_eq!(backend_of(&b), Some(d6.into()));
        assert_eq!(addr_words(d6.into()), b.addr);
        let q = quic_backend_value(Ipv4Addr::new(10, 0, 0, 12).into(), 9);
        assert_eq!((q.dip, q.slot), (addr_be(Ipv4Addr::new(10, 0, 0, 12)), 9));
        let q = quic_backend_value(d6.into(), 9);
        assert_eq!((q.dip, q.slot), (0, 9));
        assert_eq!(BACKEND_STRIDE, 24);
    }
}
