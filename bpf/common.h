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
 * the GUE port is never 0; node_addr is 0 on an IPv6 cluster network,
 * whose config6 is written before). */
static __always_inline struct nilb_config *get_config(void)
{
	struct nilb_config *cfg;
	__u32 zero = 0;

	cfg = bpf_map_lookup_elem(&nilb_config, &zero);
	if (cfg && !cfg->gue_port)
		return NULL;
	return cfg;
}

/* Returns: this node's IPv6 cluster address (four network-order words;
 * all zero on an IPv4 cluster network), or NULL (never: an ARRAY element;
 * for the verifier). */
static __always_inline __u32 *get_node6(void)
{
	struct nilb_config6 *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&config6, &zero);
	return c ? (__u32 *)c->node_addr : NULL;
}

/* Returns: the hand-off mark (struct nilb_handoff: a MAC, 2-byte aligned),
 * or NULL while the daemon has not written it (its locally administered
 * bit is then clear; a written mark is always unicast too). */
static __always_inline const __u16 *get_handoff(void)
{
	struct nilb_handoff *h;
	__u32 zero = 0;

	h = bpf_map_lookup_elem(&handoff, &zero);
	if (!h || (h->mac[0] & 0x03) != 0x02)
		return NULL;
	return (const __u16 *)h->mac;
}

/* Returns: non-zero if the Ethernet frame at eth (its 14 bytes checked to
 * lie in the packet) carries the hand-off mark as its source MAC: this
 * node's XDP balancer built it (struct nilb_handoff). */
static __always_inline int handed_off(const struct ethhdr *eth)
{
	const __u16 *mark = get_handoff();
	const __u16 *src = (const __u16 *)eth->h_source;

	return mark && src[0] == mark[0] && src[1] == mark[1] && src[2] == mark[2];
}

/* Replace the hand-off mark in the source MAC of a frame TC accepted as
 * handed off (eth: its 14 bytes checked to lie in the packet) by the fixed
 * locally administered unicast MAC 02:00:00:6e:69:6c, which no host has
 * ("nil"): the mark must not go on past TC, where a bridge would learn it
 * (brforward shows it to any user) or forward it to other ports. TC
 * redirects rewrite both MACs anyway (bpf_redirect_neigh).
 * Returns: nothing. */
static __always_inline void unmark(struct ethhdr *eth)
{
	__u16 *src = (__u16 *)eth->h_source;

	src[0] = bpf_htons(0x0200);
	src[1] = bpf_htons(0x006e);
	src[2] = bpf_htons(0x696c);
}

/* Returns: non-zero if addr (network order) is a configured VIP. */
static __always_inline int is_vip(__u32 addr)
{
	return bpf_map_lookup_elem(&vips, &addr) != NULL;
}

/* Returns: the nilb_addr_info flags of VIP addr (network order), or -1 if
 * addr is no configured VIP. */
static __always_inline int vip_flags(__u32 addr)
{
	struct nilb_addr_info *a = bpf_map_lookup_elem(&vips, &addr);

	return a ? (int)(a->flags & 0xffff) : -1;
}

/* Returns: non-zero if addr (network order) is a configured VIP that is
 * no node's own address (NILB_ADDR_F_NODE): all of its fragments,
 * malformed packets and ICMP errors are nilb's to judge, where a node
 * address's that belong to no service are the node's. */
static __always_inline int is_vip_only(__u32 addr)
{
	struct nilb_addr_info *a = bpf_map_lookup_elem(&vips, &addr);

	return a && !(a->flags & NILB_ADDR_F_NODE);
}

/* Returns: the service (vip, port, proto) (network order), or NULL if no
 * such service is configured. */
static __always_inline struct nilb_service *service_of(__u32 vip, __u16 port, __u8 proto)
{
	struct nilb_service_key key = { .vip = vip, .port = port, .proto = proto };

	return bpf_map_lookup_elem(&services, &key);
}

/* Returns: the slot of the service caches for a key whose words fold
 * (XOR) to w: its top NILB_SERVICE_CACHE_BITS bits times 2^32 / phi
 * (Knuth's multiplicative hash). */
static __always_inline __u32 service_cache_slot(__u32 w)
{
	return (w * 0x9e3779b1u) >> (32 - NILB_SERVICE_CACHE_BITS);
}

/* Returns: cache_gen (0 before the control plane's first change). */
static __always_inline __u32 cache_generation(void)
{
	__u32 zero = 0, *gen = bpf_map_lookup_elem(&cache_gen, &zero);

	return gen ? *(volatile __u32 *)gen : 0;
}

/* service_cached's miss: look the key k (struct nilb_service_key as one
 * word) up in `services` and, if found, fill e with it, generation gen,
 * fresh until now + NILB_SERVICE_CACHE_JIFFIES. A subprogram, so that
 * the key takes no room in the frames of the programs' fast paths.
 * Returns: 1 if e now holds the service, 0 if no such service. */
static __noinline int service_fill(struct nilb_service_cache *e, __u64 k, __u32 gen, __u64 now)
{
	struct nilb_service *svc = bpf_map_lookup_elem(&services, &k);

	if (!svc || !e)
		return 0;
	e->svc = *svc;
	e->key = k;
	e->gen = gen;
	e->expires = now + NILB_SERVICE_CACHE_JIFFIES;
	return 1;
}

/*
 * service_of through this CPU's service cache (docs/design.md "Lookup
 * caches"), for the XDP programs: a hit is an entry of the same key and
 * the current cache_gen, younger than NILB_SERVICE_CACHE_JIFFIES; a
 * miss looks `services` up and fills the entry. The generation is read
 * before the lookup: an entry filled while the control plane changes the
 * map carries the older generation and serves no packet after the
 * increment. For the XDP programs, which run one at a time on a CPU (as
 * the hop cache assumes); TC keeps the plain lookup.
 * Returns: the service's value (a copy in the cache entry, valid for this
 * program run), or NULL if no such service is configured.
 */
static __always_inline struct nilb_service *service_cached(__u32 vip, __u16 port, __u8 proto)
{
	/* struct nilb_service_key as one word (little-endian layout: vip,
	 * port, proto, pad 0). */
	__u64 k = (__u64)vip | (__u64)port << 32 | (__u64)proto << 48;
	__u32 slot = service_cache_slot(vip ^ ((__u32)port << 8) ^ proto);
	__u32 gen = cache_generation();
	struct nilb_service_cache *e;
	__u64 now;

	e = bpf_map_lookup_elem(&service_cache, &slot);
	if (!e)
		return NULL; /* never: slot < the map's size */
	now = bpf_jiffies64();
	if (e->key == k && e->gen == gen && e->expires > now)
		return &e->svc;
	return service_fill(e, k, gen, now) ? &e->svc : NULL;
}

/* Fill address-cache entry e with addr's entry a (NULL: none) of map
 * `which` (enum nilb_addr_cache_map), generation gen, fresh until now +
 * NILB_SERVICE_CACHE_JIFFIES. Returns: a's flags (low 16 bits), or -1 if
 * a is NULL (e left as it was). */
static __always_inline int addr_fill(struct nilb_addr_cache *e, const struct nilb_addr_info *a,
				     __u32 addr, __u32 which, __u32 gen, __u64 now)
{
	if (!a || !e)
		return -1;
	e->addr = addr;
	e->map = which;
	e->flags = a->flags;
	e->gen = gen;
	e->expires = now + NILB_SERVICE_CACHE_JIFFIES;
	return (int)(a->flags & 0xffff);
}

/* addr_cached's miss for `vips` (a subprogram, like service_fill; one per
 * map: a lookup's map must be known where it is made). Returns: as
 * addr_fill. */
static __noinline int vip_fill(struct nilb_addr_cache *e, __u32 addr, __u32 gen, __u64 now)
{
	return addr_fill(e, bpf_map_lookup_elem(&vips, &addr), addr, NILB_ADDR_CACHE_VIPS, gen, now);
}

/* addr_cached's miss for `cluster_nodes`. Returns: as addr_fill. */
static __noinline int cluster_fill(struct nilb_addr_cache *e, __u32 addr, __u32 gen, __u64 now)
{
	return addr_fill(e, bpf_map_lookup_elem(&cluster_nodes, &addr), addr,
			 NILB_ADDR_CACHE_CLUSTER, gen, now);
}

/*
 * The entry of IPv4 address addr (network order) in `vips` (which:
 * NILB_ADDR_CACHE_VIPS, a constant) or `cluster_nodes`
 * (NILB_ADDR_CACHE_CLUSTER) through this CPU's address cache: the rules
 * of service_cached (generation, expiry, XDP only); an address found in
 * neither map is looked up every time.
 * Returns: the entry's flags (low 16 bits), or -1 if addr is not in the
 * map.
 */
static __always_inline int addr_cached(__u32 addr, const __u32 which)
{
	__u32 slot = service_cache_slot(addr ^ which) >> (NILB_SERVICE_CACHE_BITS - NILB_ADDR_CACHE_BITS);
	__u32 gen = cache_generation();
	struct nilb_addr_cache *e;
	__u64 now;

	e = bpf_map_lookup_elem(&addr_cache, &slot);
	if (!e)
		return -1; /* never: slot < the map's size */
	now = bpf_jiffies64();
	if (e->addr == addr && e->map == which && e->gen == gen && e->expires > now)
		return (int)(e->flags & 0xffff);
	return which == NILB_ADDR_CACHE_VIPS ? vip_fill(e, addr, gen, now)
					     : cluster_fill(e, addr, gen, now);
}

/* Returns: vip_flags(addr), through this CPU's address cache (XDP only). */
static __always_inline int vip_flags_cached(__u32 addr)
{
	return addr_cached(addr, NILB_ADDR_CACHE_VIPS);
}

/* Returns: non-zero if addr (network order) is in `cluster_nodes`, through
 * this CPU's address cache (XDP only). */
static __always_inline int cluster_node_cached(__u32 addr)
{
	return addr_cached(addr, NILB_ADDR_CACHE_CLUSTER) >= 0;
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

/* TCP states (BPF_TCP_*) in which a socket owns the packets of its 4-tuple
 * while a hop is left: the handshake, and a connection that can still
 * receive data or must still receive the ACK of its own FIN. Not TIME_WAIT
 * (which also covers the kernel's orphaned FIN_WAIT2 minisockets) and not
 * CLOSE: docs/design.md "Second chance (TC)" argues each state. Shared by
 * XDP (tcp_flow_owned) and TC (tc_tcp_socket). */
#define TCP_OWNING_STATES                                                                 \
	((1u << BPF_TCP_ESTABLISHED) | (1u << BPF_TCP_SYN_SENT) | (1u << BPF_TCP_SYN_RECV) | \
	 (1u << BPF_TCP_NEW_SYN_RECV) | (1u << BPF_TCP_FIN_WAIT1) |                          \
	 (1u << BPF_TCP_FIN_WAIT2) | (1u << BPF_TCP_CLOSE_WAIT) | (1u << BPF_TCP_CLOSING) |  \
	 (1u << BPF_TCP_LAST_ACK))

/* struct flow4 is passed to the socket lookups as a struct bpf_sock_tuple:
 * the IPv4 part has the same layout. */
_Static_assert(__builtin_offsetof(struct flow4, saddr) ==
		       __builtin_offsetof(struct bpf_sock_tuple, ipv4.saddr) &&
	       __builtin_offsetof(struct flow4, dport) ==
		       __builtin_offsetof(struct bpf_sock_tuple, ipv4.dport),
	       "flow4 starts like bpf_sock_tuple.ipv4");

/* Returns: non-zero if a local TCP socket in an owning state (not a
 * listener, not TIME_WAIT or CLOSE) has the flow `tuple` (client -> VIP, or
 * the translated tuple of a NAT service: a struct bpf_sock_tuple of
 * tuple_len bytes, IPv4 or IPv6). ctx: an XDP or TC context. */
static __always_inline int tcp_tuple_owned(void *ctx, void *tuple, __u32 tuple_len)
{
	struct bpf_sock *sk;
	__u32 state;

	sk = bpf_skc_lookup_tcp(ctx, tuple, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	state = sk->state;
	bpf_sk_release(sk);
	return state < 32 && ((1u << state) & TCP_OWNING_STATES);
}

/* tcp_tuple_owned of an IPv4 flow f. Returns: as said. */
static __always_inline int tcp_flow_owned(void *ctx, struct flow4 *f)
{
	return tcp_tuple_owned(ctx, f, sizeof(((struct bpf_sock_tuple *)0)->ipv4));
}

#endif /* NILB_COMMON_H */
