/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * common.h: what both programs of bpf/nilb.bpf.c use: constants vmlinux.h
 * lacks, the flow tuple, counters, configuration and service lookups, and
 * header-rewriting helpers.
 */
#ifndef NILB_COMMON_H
#define NILB_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "nilb.h"
#include "maps.h"

#define ETH_P_IP 0x0800
#define ETH_ALEN 6
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#define IP_DF 0x4000
#define AF_INET 2

/* An IPv4 flow in the direction its client sends it (client -> VIP).
 * Addresses and ports in network order. */
struct flow4 {
	__u32 saddr;
	__u32 daddr;
	__u16 sport;
	__u16 dport;
	__u8 proto;   /* IPPROTO_TCP or IPPROTO_UDP */
};

/* Add one to counter idx (enum nilb_counter) of this CPU.
 * Returns: nothing. */
static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v += 1;
}

/* Returns: this node's configuration, or NULL while the daemon has not
 * written it (an ARRAY element always exists: unwritten, it is zeros, and
 * no node has address 0.0.0.0). */
static __always_inline struct nilb_config *get_config(void)
{
	struct nilb_config *cfg;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&nilb_config, &zero);
	if (cfg && !cfg->node_addr)
		return NULL;
	return cfg;
}

/* Returns: non-zero if addr (network order) is a configured VIP. */
static __always_inline int is_vip(__u32 addr)
{
	return bpf_map_lookup_elem(&vips, &addr) != NULL;
}

/* Returns: the service (vip, port, proto) (network order), or NULL if no
 * such service is configured. */
static __always_inline struct nilb_service *service_of(__u32 vip, __u16 port, __u8 proto)
{
	struct nilb_service_key key = { .vip = vip, .port = port, .proto = proto };

	return bpf_map_lookup_elem(&services, &key);
}

/* Returns: the per-service counters of svc, or NULL. */
static __always_inline struct nilb_service_stats *
service_stats_of(const struct nilb_service *svc)
{
	__u32 idx = svc->service_index;

	return bpf_map_lookup_elem(&service_stats, &idx);
}

/* Returns: non-zero if iph is a fragment (more fragments or an offset). */
static __always_inline int is_fragment(const struct iphdr *iph)
{
	return (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET)) != 0;
}

/* Copy the 12 MAC bytes of an Ethernet header as three 32-bit words (the
 * verifier allows unaligned packet access on this architecture).
 * Returns: nothing. */
static __always_inline void copy_macs(void *dst, const void *src)
{
	((__u32 *)dst)[0] = ((const __u32 *)src)[0];
	((__u32 *)dst)[1] = ((const __u32 *)src)[1];
	((__u32 *)dst)[2] = ((const __u32 *)src)[2];
}

/* RFC 1624 incremental update of a 16-bit one's complement checksum when a
 * 32-bit field changes from `from` to `to`.
 * Returns: the new checksum. */
static __always_inline __u16 csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~(from & 0xffff);
	sum += (__u16)~(from >> 16);
	sum += to & 0xffff;
	sum += to >> 16;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* RFC 1624 incremental update of a 16-bit one's complement checksum when a
 * 16-bit field changes from `from` to `to` (both as they sit in memory, like
 * the checksum).
 * Returns: the new checksum. */
static __always_inline __u16 csum_replace2(__u16 check, __u16 from, __u16 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~from;
	sum += to;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Returns: the one's complement checksum of an unfolded 32-bit sum of
 * 16-bit words. */
static __always_inline __u16 csum_fold32(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

#endif /* NILB_COMMON_H */
