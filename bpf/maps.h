/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * maps.h: every map of bpf/nilb.bpf.c, shared by its two programs (keys and
 * values in nilb.h; what fills them: docs/design.md "Maps"). This header
 * defines the maps, so exactly one BPF object includes it.
 */
#ifndef NILB_MAPS_H
#define NILB_MAPS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nilb.h"
#include "quic_lb.h"

/* (VIP, port, protocol) -> the service's region of the bucket pool and its
 * stats index. BPF_F_NO_PREALLOC: a replaced value is freed only after an
 * RCU grace period, so a program that looked it up reads it whole. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nilb_service_key);
	__type(value, struct nilb_service);
} services SEC(".maps");

/* The same for IPv6 services (docs/design.md "IPv6"): a map of its own, so
 * that the IPv4 path's key stays 8 bytes and old pins stay adoptable. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_SERVICES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nilb_service6_key);
	__type(value, struct nilb_service);
} services6 SEC(".maps");

/* Key 0: the generation of the maps the XDP programs cache (`services`,
 * `services6`, `vips`, `cluster_nodes`), incremented (never to 0) by the
 * control plane after each update or delete in any of them, so that the
 * caches drop what they hold (struct nilb_service_cache, struct
 * nilb_addr_cache). Not pinned, like the caches: a new load starts both
 * at 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cache_gen SEC(".maps");

/* Per CPU: the XDP programs' cache of `services` (bpf/common.h
 * service_cached), NILB_SERVICE_CACHE_SLOTS entries. Each entry is written
 * only by the CPU that reads it, within one program run. Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_SERVICE_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_service_cache);
} service_cache SEC(".maps");

/* Per CPU: the XDP programs' cache of IPv4 addresses found in `vips` or
 * `cluster_nodes` (bpf/common.h vip_flags_cached, cluster_node_cached),
 * NILB_ADDR_CACHE_SLOTS entries. Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_ADDR_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_addr_cache);
} addr_cache SEC(".maps");

/* The same for IPv6 addresses in `vips6` or `cluster_nodes6` (bpf/ipv6.h
 * vip6_flags_cached, cluster_node6_cached). Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_ADDR_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_addr6_cache);
} addr_cache6 SEC(".maps");

/* The same for `services6` (bpf/ipv6.h service6_cached). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_SERVICE_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_service6_cache);
} service_cache6 SEC(".maps");

/* The bucket pool: every service's buckets, at table_base + (hash &
 * table_mask). A plain ARRAY, so the verifier inlines its lookups; sized by
 * the control plane when it creates the map (max_entries here is a
 * placeholder); BPF_F_MMAPABLE so that it writes changed buckets in place. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct nilb_bucket);
} buckets SEC(".maps");

/* Parallel to `buckets`: each bucket's first hop as the balancer reads it
 * first, a __u16 per bucket, four per element (an ARRAY element takes 8
 * bytes at least), so that through the mapping it is a flat array of __u16
 * with the buckets' indexes: the backend slot of hops[0], with
 * NILB_FIRST_HOP_CHAIN set when the bucket lists previous owners (then the
 * balancer reads the bucket itself). A quarter of the buckets' bytes, so
 * that the hot data of many tables stays in cache (docs/design.md "The
 * hot first-hop array"). The control plane writes a bucket before its entry here;
 * the bucket is the truth (adoption rewrites this array from it). Sized
 * with the pool. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} bucket_first SEC(".maps");

/* Parallel to `buckets`: CLOCK_BOOTTIME seconds of each bucket's last
 * first-hop change (0: never), a __u32 per bucket, two per element (an
 * ARRAY element takes 8 bytes at least), so that through the mapping it is
 * a flat array of __u32 with the buckets' indexes. The control plane's
 * history (it paces voluntary moves); the programs never read it, so it
 * stays out of the buckets' cache lines. Sized with the pool. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} bucket_moved SEC(".maps");

/* Backend slot -> address (struct nilb_backend): what hops[] name. Written
 * by the control plane through the mapping before any bucket names the
 * slot. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct nilb_backend);
} backends SEC(".maps");

/* Addresses allowed to send GUE to this node. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_CLUSTER_NODES);
	__type(key, __u32);
	__type(value, struct nilb_addr_info);
} cluster_nodes SEC(".maps");

/* Addresses allowed to send GUE to this node over an IPv6 cluster network
 * (NILB_F_CLUSTER_IPV6; empty otherwise). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_CLUSTER_NODES);
	__type(key, struct nilb_addr6);
	__type(value, struct nilb_addr_info);
} cluster_nodes6 SEC(".maps");

/* Every configured VIP address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct nilb_addr_info);
} vips SEC(".maps");

/* Every configured IPv6 VIP address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_VIPS);
	__type(key, struct nilb_addr6);
	__type(value, struct nilb_addr_info);
} vips6 SEC(".maps");

/* Key 0: this node's struct nilb_config. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nilb_config);
} nilb_config SEC(".maps");

/* Key 0: struct nilb_config6, this node's IPv6 cluster address (all zero
 * on an IPv4 cluster network). A map of its own: nilb_config keeps the
 * layout older pins have. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nilb_config6);
} config6 SEC(".maps");

/* Key 0: struct nilb_handoff, the mark of frames the balancer hands to
 * this node's TC program. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nilb_handoff);
} handoff SEC(".maps");

/* enum nilb_counter -> packets, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* nilb_service.service_index -> per-service counters. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct nilb_service_stats);
} service_stats SEC(".maps");

/* Backend slot (nilb_bucket.hops[0]) -> what the balancer sent to that
 * backend as first hop. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_backend_stats);
} backend_stats SEC(".maps");

/* Backend slot (nilb_bucket.hops[0]) -> this CPU's last FIB answer for
 * that hop. Per
 * CPU: each entry is written only by the CPU that reads it, so no reader
 * sees half of another CPU's update (a new hop with old MACs). Costs
 * NILB_MAX_BACKEND_SLOTS * 40 bytes per CPU and one FIB lookup per hop, CPU
 * and NILB_HOP_CACHE_JIFFIES. Not pinned: a restarted daemon starts cold. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_hop_cache);
} hop_cache SEC(".maps");

/* backend slot -> the control plane's state of that (service, backend)
 * (struct nilb_control_state): pinned so it survives a daemon restart;
 * never read by the programs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_control_state);
} control_state SEC(".maps");

/* backend slot -> the IPv6 VIP of the slot's control_state record when
 * that service is IPv6 (struct nilb_control_state). Pinned; never read by
 * the programs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_addr6);
} control_vip6 SEC(".maps");

/* backend slot -> the IPv6 DIP of the slot's control_state record when
 * the cluster network is IPv6 (NILB_CS_DIP6). Pinned; never read by the
 * programs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_addr6);
} control_dip6 SEC(".maps");

/* Key 0: this CPU's token bucket for ICMP "fragmentation needed" replies
 * (nilb_config.icmp_too_big_rate). Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nilb_icmp_limit);
} icmp_limit SEC(".maps");

/* Key 0: the TC program's RST rate limit (`unknown_flow: rst`) on this CPU:
 * the theoretical arrival time, in bpf_ktime_get_coarse_ns() nanoseconds,
 * of the next RST within the rate (GCRA). Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rst_budget SEC(".maps");
/* ---- edge filters (docs/design.md "Edge filters") ------------------------
 * Lists live in two generations (index 0 and 1 of each outer map and of
 * the per-generation arrays); nilb_config.flags names the live one, so a
 * reload builds the other one completely and then flips one bit. Inner maps
 * are created by the control plane; templates declare sizes only. */

/* Flat IPv4 table of one generation: one u16 per /24 (NILB_FV_FLAT_*),
 * four per element. A fixed size (no BPF_F_INNER_MAP), so the verifier
 * inlines its lookups; libbpf creates the template only while it creates
 * the outer map. */
struct filter_flat_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_FILTER_FLAT_ELEMS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct filter_flat_inner);
} filter_flat SEC(".maps");

/* Addresses of /24s with longer prefixes -> verdict word, one generation:
 * struct nilb_filter_bucket per element, filled with one memory copy. Two
 * fixed sizes (lookups inlined): a small table for short lists, a large
 * one for threat feeds; nilb_config.flags says which one is live. */
struct filter_long_small_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << NILB_FILTER_LONG_SMALL_BITS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct nilb_filter_bucket));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct filter_long_small_inner);
} filter_long_small SEC(".maps");

struct filter_long_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << NILB_FILTER_LONG_LARGE_BITS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct nilb_filter_bucket));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct filter_long_inner);
} filter_long SEC(".maps");

/* Services' allow and deny prefixes of one generation:
 * struct nilb_filter_v4_key -> verdict word. */
struct filter_trie_inner {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(struct nilb_filter_v4_key));
	__uint(value_size, sizeof(__u32));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct filter_trie_inner);
} filter_trie SEC(".maps");

/* Rate-limit state, one LRU (sized by filters.rate_limit_sources; a new
 * size swaps in a new map): struct nilb_rate_key -> struct nilb_rate_state. */
struct filter_rate_inner {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(struct nilb_rate_key));
	__uint(value_size, sizeof(struct nilb_rate_state));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct filter_rate_inner);
} filter_rate_lru SEC(".maps");

/* gen x NILB_FILTER_VERDICTS + index -> verdict word (flat table entries). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * NILB_FILTER_VERDICTS);
	__type(key, __u32);
	__type(value, __u32);
} filter_verdicts SEC(".maps");

/* gen x NILB_FILTER_SCOPES + scope -> struct nilb_filter_scope. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * NILB_FILTER_SCOPES);
	__type(key, __u32);
	__type(value, struct nilb_filter_scope);
} filter_scopes SEC(".maps");

/* Rule id -> struct nilb_filter_rule (ids are stable across reloads). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_FILTER_RULES);
	__type(key, __u32);
	__type(value, struct nilb_filter_rule);
} filter_rules SEC(".maps");

/* Rule id -> what the rule dropped, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_MAX_FILTER_RULES);
	__type(key, __u32);
	__type(value, struct nilb_filter_stats);
} filter_stats SEC(".maps");

/* ---- QUIC-LB (bpf/quic_lb.h; docs/design.md "Balancer (XDP)") ---------- */

/* Service index -> the service's QUIC-LB configuration; algorithm
 * NILB_QUIC_OFF (all zeros): not a QUIC-LB service. Not pinned: every
 * daemon fills it from the file before it attaches its programs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct nilb_quic_lb);
} quic_config SEC(".maps");

/* (service index, server ID) -> the backend it routes to. Holds the
 * backends that may receive packets (not offline, not down). Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, struct nilb_quic_sid_key);
	__type(value, struct nilb_quic_backend);
} quic_servers SEC(".maps");

/* Service index -> its ecb(aes) context (keyed algorithms), written only
 * by the syscall program nilb_quic_set_key. Not pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct quic_lb_crypto);
} quic_crypto SEC(".maps");

/* Key 0: this CPU's working memory for one QUIC-LB decode. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct quic_lb_scratch);
} quic_scratch SEC(".maps");

/* ---- NAT mode (bpf/nat.h; docs/design.md "NAT mode") ------------------ */

/* The flows of NAT-mode services this node accepted, as its stack sees
 * them (struct nilb_nat_key) -> the service address and port their replies
 * leave with. max_entries: nat.max_flows, set by the control plane at
 * creation. BPF_F_NO_PREALLOC: memory follows the flows tracked (a node
 * without NAT services pays nothing). Pinned: a restart keeps every
 * translated connection. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_NAT_DEFAULT_FLOWS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct nilb_nat_key);
	__type(value, struct nilb_nat_flow);
} nat_flows SEC(".maps");

/* Port >> 6 -> bit (port & 63) set if some NAT-mode service listens on
 * that port (host order) on the backends: the only source ports whose
 * replies the egress program looks up, and the only destination ports XDP
 * checks for collisions. Not pinned: filled from the file at start. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_NAT_PORT_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} nat_ports SEC(".maps");

/* Key 0: the number of the control plane's current sweep of nat_flows
 * (struct nilb_nat_flow.gc_pass), read by the TCP socket iterator. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nat_gc_pass SEC(".maps");

#endif /* NILB_MAPS_H */
