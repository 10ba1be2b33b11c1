//! Capacities compiled into the BPF object (`enum nilb_limits` in
//! bpf/nilb.h), read from the generated bindings: configuration validation
//! checks a file against them, the control plane hands out service indexes
//! and counter slots within them.

use crate::abi_sys::{nilb_limits as l, nilb_wire};

/// Services the `services` map holds.
pub const MAX_SERVICES: u32 = l::NILB_MAX_SERVICES;
/// Addresses the `cluster_nodes` map holds.
pub const MAX_CLUSTER_NODES: u32 = l::NILB_MAX_CLUSTER_NODES;
/// Distinct VIP addresses the `vips` map holds.
pub const MAX_VIPS: u32 = l::NILB_MAX_VIPS;
/// Largest table (buckets) of one service.
pub const MAX_TABLE_SIZE: u32 = l::NILB_MAX_TABLE_SIZE;
/// (service, backend) pairs with their own counters, over all services.
pub const MAX_BACKEND_SLOTS: u32 = l::NILB_MAX_BACKEND_SLOTS;
/// Filter rules over all scopes (rule id 0 means none, so one less is usable).
pub const MAX_FILTER_RULES: u32 = l::NILB_MAX_FILTER_RULES;
/// Rate-limit rules one scope may have.
pub const FILTER_RATE_RULES: u32 = l::NILB_FILTER_RATE_RULES;
/// Bytes added by GUE listing `hops` hops (outer IPv4 + UDP + GUE + 4 per
/// hop).
pub const fn gue_overhead(hops: u32) -> u32 {
    nilb_wire::NILB_GUE_BASE_OVERHEAD + 4 * hops
}
/// Bytes added by GUE listing `hops` hops on a cluster network of either
/// family (`cluster_ipv6`: outer IPv6 + UDP + GUE + 16 per hop).
pub const fn gue_overhead_of(hops: u32, cluster_ipv6: bool) -> u32 {
    if cluster_ipv6 {
        nilb_wire::NILB_GUE6_BASE_OVERHEAD + nilb_wire::NILB_GUE6_HOP_LEN * hops
    } else {
        gue_overhead(hops)
    }
}
/// Bytes added by GUE with one listed hop: the most a TCP flow's packets
/// carry when buckets keep one previous owner.
pub const GUE_OVERHEAD: u32 = gue_overhead(1);
/// Bytes added by GUE with the most hops the balancer lists: a UDP flow whose
/// bucket has every previous owner it can hold lists them and then the
/// first hop again.
pub const GUE_OVERHEAD_MAX: u32 = gue_overhead(l::NILB_TX_HOPS);
/// Previous owners a bucket holds at most (`NILB_MAX_OWNERS - 1`): the
/// most hops the balancer lists for a TCP flow.
pub const MAX_PREVIOUS_OWNERS: u32 = l::NILB_MAX_OWNERS - 1;
/// Default ICMP "fragmentation needed" replies per second per CPU
/// (`cluster.icmp_too_big_rate`).
pub const ICMP_TOO_BIG_RATE_DEFAULT: u16 = nilb_wire::NILB_ICMP_TOO_BIG_RATE_DEFAULT as u16;
/// Largest `cluster.icmp_too_big_rate`: the data plane keeps 16 bits.
pub const ICMP_TOO_BIG_RATE_MAX: u32 = nilb_wire::NILB_ICMP_TOO_BIG_RATE_MAX;
/// Default size of the NAT flow table (`cluster.nat.max_flows`).
pub const NAT_DEFAULT_FLOWS: u32 = l::NILB_NAT_DEFAULT_FLOWS;
/// Largest `cluster.nat.max_flows`: 2^24 entries (a few GiB of kernel
/// memory when full; docs/operations.md "Limits").
pub const NAT_MAX_FLOWS: u32 = 1 << 24;
