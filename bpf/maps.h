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

/* Every configured VIP address. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct nilb_addr_info);
} vips SEC(".maps");

/* Key 0: this node's struct nilb_config. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nilb_config);
} nilb_config SEC(".maps");

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
 * and NILB_HOP_CACHE_NS. Not pinned: a restarted daemon starts cold. */
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

#endif /* NILB_MAPS_H */
