/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * ipv6.h: IPv6 as both programs read it (docs/design.md "IPv6"):
 *
 *   - the flow tuple (struct flow6, laid out as bpf_sock_tuple.ipv6) and
 *     the lookups of `services6` and `vips6`;
 *   - the walk over extension headers to the L4 header: hop-by-hop
 *     options (0), routing (43) and destination options (60), at most
 *     NILB_IPV6_MAX_EXT of them; a fragment header (44) ends the walk
 *     (IPv6 fragments to a VIP are dropped, as IPv4 fragments are); a
 *     hop-by-hop header anywhere but first (RFC 8200 4.1) and a routing
 *     header with segments left (the VIP is not the final destination;
 *     type 0 is deprecated by RFC 5095) are malformed: the backend's stack
 *     would drop them, so they are not carried there;
 *   - ICMPv6 to a VIP: an error (destination unreachable 1, packet too big
 *     2, time exceeded 3, parameter problem 4; RFC 4443) that quotes a
 *     TCP/UDP packet the VIP sent is about that flow, as for IPv4
 *     (icmp.h); an echo request (128) is answered where it lands.
 */
#ifndef NILB_IPV6_H
#define NILB_IPV6_H

#include "common.h"
#include "icmp.h"

#define ETH_P_IPV6 0x86DD
#define AF_INET6 10
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_ICMPV6 58
#define NEXTHDR_DEST 60
#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PKT_TOOBIG 2
#define ICMPV6_TIME_EXCEED 3
#define ICMPV6_PARAMPROB 4
#define ICMPV6_ECHO_REQUEST 128

/* An IPv6 flow in its client's direction (client -> VIP). Addresses and
 * ports in network order. */
struct flow6 {
	__u32 saddr[4];
	__u32 daddr[4];
	__u16 sport;
	__u16 dport;
	__u8 proto;   /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad[3];
};

_Static_assert(__builtin_offsetof(struct flow6, daddr) ==
		       __builtin_offsetof(struct bpf_sock_tuple, ipv6.daddr) &&
	       __builtin_offsetof(struct flow6, dport) ==
		       __builtin_offsetof(struct bpf_sock_tuple, ipv6.dport),
	       "flow6 starts like bpf_sock_tuple.ipv6");

/* Size of the IPv6 part of struct bpf_sock_tuple (the socket lookups'
 * tuple_size). */
#define SOCK_TUPLE6_LEN sizeof(((struct bpf_sock_tuple *)0)->ipv6)

/* Copy a 16-byte address as four words (either side may be packet or
 * stack memory). */
static __always_inline void addr6_copy(__u32 *dst, const __u32 *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
}

/* Returns: non-zero if the two addresses are equal. */
static __always_inline int addr6_eq(const __u32 *a, const __u32 *b)
{
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]));
}

/* Returns: the nilb_addr_info flags of IPv6 VIP addr (four network-order
 * words), or -1 if it is no VIP. */
static __always_inline int vip6_flags(const __u32 *addr)
{
	struct nilb_addr6 key;
	struct nilb_addr_info *a;

	addr6_copy((__u32 *)key.addr, addr);
	a = bpf_map_lookup_elem(&vips6, &key);
	return a ? (int)(a->flags & 0xffff) : -1;
}

/* Fill IPv6 address-cache entry e with addr's entry a (NULL: none) of map
 * `which`: addr_fill (bpf/common.h) for IPv6. Returns: as addr_fill. */
static __always_inline int addr6_fill(struct nilb_addr6_cache *e, const struct nilb_addr_info *a,
				      const __u32 *addr, __u32 which, __u32 gen, __u64 now)
{
	if (!a || !e)
		return -1;
	addr6_copy(e->addr, addr);
	e->map = which;
	e->flags = a->flags;
	e->gen = gen;
	e->expires = now + NILB_SERVICE_CACHE_JIFFIES;
	return (int)(a->flags & 0xffff);
}

/* addr6_cached's miss for `vips6` (a subprogram, like service_fill; one
 * per map, as vip_fill and cluster_fill). Returns: as addr_fill. */
static __noinline int vip6_fill(struct nilb_addr6_cache *e, const __u32 *addr, __u32 gen,
				__u64 now)
{
	struct nilb_addr6 key;

	addr6_copy((__u32 *)key.addr, addr);
	return addr6_fill(e, bpf_map_lookup_elem(&vips6, &key), addr, NILB_ADDR_CACHE_VIPS, gen,
			  now);
}

/* addr6_cached's miss for `cluster_nodes6`. Returns: as addr_fill. */
static __noinline int cluster6_fill(struct nilb_addr6_cache *e, const __u32 *addr, __u32 gen,
				    __u64 now)
{
	struct nilb_addr6 key;

	addr6_copy((__u32 *)key.addr, addr);
	return addr6_fill(e, bpf_map_lookup_elem(&cluster_nodes6, &key), addr,
			  NILB_ADDR_CACHE_CLUSTER, gen, now);
}

/*
 * The entry of IPv6 address addr (four network-order words) in `vips6`
 * (which: NILB_ADDR_CACHE_VIPS, a constant) or `cluster_nodes6`
 * (NILB_ADDR_CACHE_CLUSTER) through this CPU's IPv6 address cache: the
 * rules of addr_cached (bpf/common.h: generation, expiry, XDP only; an
 * address found in neither map is looked up every time).
 * Returns: the entry's flags (low 16 bits), or -1 if addr is not in the
 * map.
 */
static __always_inline int addr6_cached(const __u32 *addr, const __u32 which)
{
	__u32 slot = service_cache_slot(addr[0] ^ addr[1] ^ addr[2] ^ addr[3] ^ which) >>
		     (NILB_SERVICE_CACHE_BITS - NILB_ADDR_CACHE_BITS);
	__u32 gen = cache_generation();
	struct nilb_addr6_cache *e;
	__u64 now;

	e = bpf_map_lookup_elem(&addr_cache6, &slot);
	if (!e)
		return -1; /* never: slot < the map's size */
	now = bpf_jiffies64();
	if (addr6_eq(e->addr, addr) && e->map == which && e->gen == gen && e->expires > now)
		return (int)(e->flags & 0xffff);
	return which == NILB_ADDR_CACHE_VIPS ? vip6_fill(e, addr, gen, now)
					     : cluster6_fill(e, addr, gen, now);
}

/* Returns: vip6_flags(addr), through this CPU's IPv6 address cache (XDP
 * only). */
static __always_inline int vip6_flags_cached(const __u32 *addr)
{
	return addr6_cached(addr, NILB_ADDR_CACHE_VIPS);
}

/* Returns: non-zero if addr (four network-order words) is in
 * `cluster_nodes6`, through this CPU's IPv6 address cache (XDP only). */
static __always_inline int cluster_node6_cached(const __u32 *addr)
{
	return addr6_cached(addr, NILB_ADDR_CACHE_CLUSTER) >= 0;
}

/* Returns: the IPv6 service (vip: four network-order words; port network
 * order), or NULL if none. */
static __always_inline struct nilb_service *service6_of(const __u32 *vip, __u16 port, __u8 proto)
{
	struct nilb_service6_key key;

	addr6_copy((__u32 *)key.vip, vip);
	key.port = port;
	key.proto = proto;
	key.pad = 0;
	return bpf_map_lookup_elem(&services6, &key);
}

/* service6_cached's miss: service_fill for IPv6 (vip: four network-order
 * words; pp: the port, network order, in bits 0-15 and the protocol in
 * bits 16-23, one argument: a subprogram takes five). A subprogram, like
 * service_fill.
 * Returns: 1 if e now holds the service, 0 if no such service. */
static __noinline int service6_fill(struct nilb_service6_cache *e, const __u32 *vip, __u32 pp,
				    __u32 gen, __u64 now)
{
	struct nilb_service *svc;

	if (!e)
		return 0;
	/* The key is built in the entry itself and looked up from there (a
	 * map value may be a key): no key on the stack, whose frame would
	 * take the IPv6 program's longest call chain over 512 bytes on 6.1.
	 * The entry is invalid until it is filled. */
	e->expires = 0;
	addr6_copy((__u32 *)e->key.vip, vip);
	e->key.port = pp & 0xffff;
	e->key.proto = pp >> 16;
	e->key.pad = 0;
	svc = bpf_map_lookup_elem(&services6, &e->key);
	if (!svc)
		return 0;
	e->svc = *svc;
	e->gen = gen;
	e->expires = now + NILB_SERVICE_CACHE_JIFFIES;
	return 1;
}

/* service6_of through this CPU's IPv6 service cache: service_cached
 * (common.h) for IPv6 services. Returns: as service_cached. */
static __always_inline struct nilb_service *service6_cached(const __u32 *vip, __u16 port,
							    __u8 proto)
{
	__u32 slot = service_cache_slot(vip[0] ^ vip[1] ^ vip[2] ^ vip[3] ^ ((__u32)port << 8) ^
					proto);
	__u32 gen = cache_generation();
	struct nilb_service6_cache *e;
	__u64 now;

	e = bpf_map_lookup_elem(&service_cache6, &slot);
	if (!e)
		return NULL; /* never: slot < the map's size */
	now = bpf_jiffies64();
	if (addr6_eq((__u32 *)e->key.vip, vip) && e->key.port == port && e->key.proto == proto &&
	    e->gen == gen && e->expires > now)
		return &e->svc;
	return service6_fill(e, vip, port | (__u32)proto << 16, gen, now) ? &e->svc : NULL;
}

/* tcp_tuple_owned (common.h) of an IPv6 flow f. Returns: as said. */
static __always_inline int tcp_flow_owned6(void *ctx, struct flow6 *f)
{
	return tcp_tuple_owned(ctx, f, SOCK_TUPLE6_LEN);
}

/* Result of ipv6_walk. */
enum ip6_walk {
	IP6_L4,        /* *l4_off and *proto are set */
	IP6_FRAGMENT,  /* a fragment header before the L4 header */
	IP6_TOO_MANY,  /* more than NILB_IPV6_MAX_EXT extension headers */
	IP6_MALFORMED, /* an extension header cut short by the frame or by
			* the payload length */
};

/*
 * Walk the extension headers of ip6 (its fixed header within the frame,
 * payload_len: the bytes its payload length says, checked against the
 * frame by the caller) to the L4 header.
 * Returns: enum ip6_walk (IP6_MALFORMED also for a hop-by-hop header that
 * is not first and a routing header with segments left); with IP6_L4,
 * *l4_off is the L4 header's offset
 * from ip6 (at most 40 + NILB_IPV6_MAX_EXT x 2048, within 40 +
 * payload_len) and *proto its protocol (any value but 0, 43, 44, 60).
 */
static __always_inline enum ip6_walk ipv6_walk(struct ipv6hdr *ip6, void *data_end,
					       __u32 payload_len, __u32 *l4_off, __u8 *proto)
{
	__u32 off = sizeof(*ip6);
	__u8 nh = ip6->nexthdr;
	__u8 *h;

#pragma unroll
	for (int i = 0; i < NILB_IPV6_MAX_EXT; i++) {
		if (nh != NEXTHDR_HOP && nh != NEXTHDR_ROUTING && nh != NEXTHDR_DEST)
			break;
		if (nh == NEXTHDR_HOP && i > 0)
			return IP6_MALFORMED;
		h = (void *)ip6 + off;
		if ((void *)(h + 4) > data_end || off + 8 > sizeof(*ip6) + payload_len)
			return IP6_MALFORMED;
		if (nh == NEXTHDR_ROUTING && h[3] != 0)
			return IP6_MALFORMED; /* segments left */
		nh = h[0];
		off += ((__u32)h[1] + 1) * 8;
	}
	if (nh == NEXTHDR_HOP || nh == NEXTHDR_ROUTING || nh == NEXTHDR_DEST)
		return IP6_TOO_MANY;
	if (nh == NEXTHDR_FRAGMENT)
		return IP6_FRAGMENT;
	if (off > sizeof(*ip6) + payload_len)
		return IP6_MALFORMED;
	*l4_off = off;
	*proto = nh;
	return IP6_L4;
}

/*
 * Classify an ICMPv6 message sent to `vip` (four network-order words): as
 * icmp_classify for IPv4. An error quotes a packet the backend sent (VIP ->
 * client); its quoted IPv6 header must come with its source the VIP and
 * its L4 protocol TCP or UDP directly after it (a quote with extension
 * headers is about no flow), ports within the quote. icmp: the ICMPv6
 * header, bounds not yet checked; l4_len: the message's bytes within the
 * IPv6 payload. Every byte read lies within both.
 * Returns: enum icmp_class; with ICMP_FLOW *quoted is the quoted IPv6
 * header, whose 4 bytes of ports after it lie within the packet (the flow
 * in the client's direction: icmp6_flow).
 */
static __always_inline enum icmp_class icmp6_classify(__u8 *icmp, __u32 l4_len, const __u32 *vip,
						       void *data_end, struct ipv6hdr **quoted)
{
	struct ipv6hdr *emb;
	__u8 type;

	if ((void *)(icmp + 8) > data_end || l4_len < 8)
		return ICMP_MALFORMED;
	type = icmp[0];
	if (type == ICMPV6_ECHO_REQUEST)
		return ICMP_PING;
	if (type < ICMPV6_DEST_UNREACH || type > ICMPV6_PARAMPROB)
		return ICMP_NO_FLOW;
	emb = (void *)(icmp + 8);
	if ((void *)(emb + 1) > data_end || l4_len < 8 + sizeof(*emb) || emb->version != 6 ||
	    !addr6_eq((__u32 *)&emb->saddr, vip))
		return ICMP_MALFORMED;
	if (emb->nexthdr != IPPROTO_TCP && emb->nexthdr != IPPROTO_UDP)
		return ICMP_NO_FLOW;
	if ((void *)(emb + 1) + 4 > data_end || l4_len < 8 + sizeof(*emb) + 4)
		return ICMP_MALFORMED;
	*quoted = emb;
	return ICMP_FLOW;
}

/* The flow a quoted packet (VIP -> client; icmp6_classify's *quoted, its
 * ports within the packet) belongs to, in the client's direction.
 * Returns: nothing. */
static __always_inline void icmp6_flow(struct ipv6hdr *emb, struct flow6 *flow)
{
	__u16 *ports = (void *)(emb + 1);

	addr6_copy(flow->saddr, (__u32 *)&emb->daddr);
	addr6_copy(flow->daddr, (__u32 *)&emb->saddr);
	flow->sport = ports[1];
	flow->dport = ports[0];
	flow->proto = emb->nexthdr;
}

#endif /* NILB_IPV6_H */
