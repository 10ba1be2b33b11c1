/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * gue.h: glb-director's GUE encapsulation, as the balancer writes it and the
 * second-chance program reads and forwards it (docs/design.md "GUE wire
 * format"):
 *
 *   outer IPv4   20 bytes, no options, DF, TTL NILB_OUTER_TTL, proto UDP
 *   UDP          source 0x8000 | (flow hash & 0x7fff), destination the GUE
 *                port, checksum by local checksum offload (gue_lco_*: valid
 *                exactly when the inner packet's own checksums are; 0 when
 *                the inner packet has none to derive it from); a received
 *                non-zero checksum is kept valid when forwarding
 *   GUE          version 0, C 0, hlen 1 + N, proto 4 (IPv4) or 41 (IPv6),
 *                flags 0
 *   private      type 0, next hop index, hop count N
 *   hops         N IPv4 addresses, network order: the bucket's previous
 *                owners, newest first, and for a UDP flow the first hop
 *                again after them
 *   inner IPv4 or IPv6 packet
 *
 * Over an IPv6 cluster network (NILB_F_CLUSTER_IPV6; docs/design.md "IPv6
 * cluster network") the outer header is IPv6 instead and each hop 16 bytes:
 *
 *   outer IPv6   40 bytes, no extension headers, traffic class 0, flow
 *                label the low 20 bits of the flow hash (RFC 6438), hop
 *                limit NILB_OUTER_TTL, next header UDP
 *   UDP          as above (the checksum over the outer IPv6 pseudo-header;
 *                0 only where the inner packet has no checksum to derive
 *                it from, RFC 6935 and 6936: the receivers are nilb's own
 *                programs)
 *   GUE          as above with hlen 1 + 4N
 *   hops         N IPv6 addresses, network order, the same hops
 */
#ifndef NILB_GUE_H
#define NILB_GUE_H

#include "common.h"
#include "ipv6.h"

#define GUE_PROTO_IPV4 4
#define GUE_PROTO_IPV6 41

/* GUE base header and glb-director's private word; the hop list follows. */
struct gue_hdr {
	__u8 hlen;        /* version (2 bits), C (1), hlen: 32-bit words after
			   * the base header (1 + hop count) */
	__u8 proto;       /* inner protocol: GUE_PROTO_IPV4 or _IPV6 */
	__u16 flags;      /* 0 */
	__u16 priv_type;  /* 0 */
	__u8 next_hop;    /* index in hops of the next hop to try */
	__u8 hop_count;   /* hops listed */
	__u32 hops[];
};

/*
 * Local checksum offload (LCO; the kernel's
 * Documentation/networking/checksum-offloads.rst, as Katran's GUE
 * encapsulation does): the outer UDP checksum covers the inner packet, but
 * an inner packet whose checksums are valid has a known one's complement
 * sum without reading it: an IPv4 header sums to 0 (negative zero), a TCP
 * or UDP segment to minus its pseudo-header's sum, an ICMP message to 0.
 * So the outer checksum is computed from headers only, and it verifies
 * exactly when the inner checksums do (a client's segment corrupted on the
 * way to the balancer stays detectable end to end). Why it matters: a NIC
 * that verified a UDP checksum (or saw 0, "none") marks the frame
 * CHECKSUM_UNNECESSARY, and after XDP decapsulation (xdp_decap.h) that
 * mark applies to the inner TCP segment, which the stack then trusts: with
 * a checksum 0 a corrupted segment would be accepted; with LCO the NIC's
 * verdict is the inner packet's (docs/design.md "Checksums").
 *
 * GUE_NO_LCO: the inner packet has no checksum the outer one can be derived
 * from (UDP without checksum, a UDP length short of the packet, IPv6
 * extension headers): the outer UDP checksum is 0 then, as before.
 */
#define GUE_NO_LCO (~0ULL)

/* A multiple of 0xffff (so 0 in one's complement) above any sum of the few
 * words below: minus a sum x is GUE_NEG - x, without folding first. */
#define GUE_NEG (0xffffULL << 20)

/* Returns: the 16-bit one's complement sum (folded, not inverted) of a sum
 * below 2^63 of 16- or 32-bit words. */
static __always_inline __u32 csum_fold64(__u64 s)
{
	__u32 t;

	s = (s & 0xffffffff) + (s >> 32);            /* < 2^33 */
	t = (__u32)(s & 0xffff) + (__u32)(s >> 16); /* < 0x30000 */
	t = (t & 0xffff) + (t >> 16);                /* <= 0x10001 */
	return (t & 0xffff) + (t >> 16);
}

/* The sum (unfolded, below 2^37) of an inner IPv4 packet (addresses
 * saddr, daddr as in memory, protocol proto, l4_len bytes after its header;
 * udp_check, udp_len: its UDP checksum as in memory and length field, host
 * order, if UDP) if its checksums are valid: the header 0, the segment
 * minus its pseudo-header's sum.
 * Returns: that sum, or GUE_NO_LCO (UDP without checksum, or whose length
 * is not the rest of the packet). */
static __always_inline __u64 gue_lco_inner4(__u32 saddr, __u32 daddr, __u8 proto, __u32 l4_len,
					    __u16 udp_check, __u32 udp_len)
{
	if (proto == IPPROTO_ICMP)
		return 0;
	if (proto == IPPROTO_UDP && (!udp_check || udp_len != l4_len))
		return GUE_NO_LCO;
	return GUE_NEG - ((__u64)saddr + daddr + bpf_htons(proto) + bpf_htons(l4_len));
}

/* The same for an inner IPv6 packet without extension headers (first8:
 * its first two 32-bit words as in memory; the addresses of its
 * pseudo-header cancel against the header's own), proto TCP, UDP or
 * ICMPv6, l4_len its payload length.
 * Returns: that sum, or GUE_NO_LCO (UDP without checksum or whose length
 * is not the payload's). */
static __always_inline __u64 gue_lco_inner6(const __u32 *first8, __u8 proto, __u32 l4_len,
					    __u16 udp_check, __u32 udp_len)
{
	if (proto == IPPROTO_UDP && (!udp_check || udp_len != l4_len))
		return GUE_NO_LCO;
	return (__u64)first8[0] + first8[1] + GUE_NEG - bpf_htons(l4_len) - bpf_htons(proto);
}

/* The outer UDP checksum's share of the inner packet at `inner`, of
 * inner_len bytes (inner_proto: GUE_PROTO_IPV4 or _IPV6; its headers
 * checked by the balancer before it was encapsulated; data_end for the
 * verifier).
 * Returns: gue_lco_inner4/6's sum, or GUE_NO_LCO (as they say, and for an
 * IPv6 packet with extension headers, which are not summed here). */
static __always_inline __u64 gue_lco_inner(void *inner, void *data_end, __u32 inner_len,
					   __u8 inner_proto)
{
	struct udphdr *uh;
	__u8 proto;

	if (inner_proto == GUE_PROTO_IPV4) {
		struct iphdr *iph = inner;
		__u32 ihl_len;

		if ((void *)(iph + 1) > data_end)
			return GUE_NO_LCO; /* never: checked by the balancer */
		ihl_len = iph->ihl * 4;
		proto = iph->protocol;
		if (proto != IPPROTO_UDP)
			return gue_lco_inner4(iph->saddr, iph->daddr, proto, inner_len - ihl_len, 0, 0);
		uh = inner + ihl_len;
		if ((void *)(uh + 1) > data_end)
			return GUE_NO_LCO; /* never: checked by the balancer */
		return gue_lco_inner4(iph->saddr, iph->daddr, proto, inner_len - ihl_len, uh->check,
				      bpf_ntohs(uh->len));
	} else {
		struct ipv6hdr *ip6 = inner;

		if ((void *)(ip6 + 1) > data_end)
			return GUE_NO_LCO; /* never: checked by the balancer */
		proto = ip6->nexthdr;
		if (proto != IPPROTO_UDP)
			return proto == IPPROTO_TCP || proto == NEXTHDR_ICMPV6 ?
				       gue_lco_inner6(inner, proto, inner_len - sizeof(*ip6), 0, 0) :
				       GUE_NO_LCO;
		uh = (void *)(ip6 + 1);
		if ((void *)(uh + 1) > data_end)
			return GUE_NO_LCO; /* never: checked by the balancer */
		return gue_lco_inner6(inner, proto, inner_len - sizeof(*ip6), uh->check,
				      bpf_ntohs(uh->len));
	}
}

/* Returns: the sum of the four 32-bit words of an IPv6 address (not
 * folded). */
static __always_inline __u64 addr6_sum(const __u32 *a)
{
	return (__u64)a[0] + a[1] + a[2] + a[3];
}

/* Returns: the UDP checksum to write for a sum (not folded) of everything
 * it covers, the outer pseudo-header included: never 0 (RFC 768: 0 means
 * none; 0xffff is the same value). */
static __always_inline __u16 gue_udp_check(__u64 s)
{
	__u16 c = ~csum_fold64(s) & 0xffff;

	return c ? c : 0xffff;
}

/* Returns: the bytes outer IPv4 + UDP + GUE take with nhops hops listed. */
static __always_inline __u32 gue_overhead(__u32 nhops)
{
	return NILB_GUE_BASE_OVERHEAD + 4 * nhops;
}

/* Returns: the bytes outer headers + UDP + GUE take with nhops hops listed,
 * over an IPv4 (c6 0) or IPv6 (c6 non-zero) cluster network. */
static __always_inline __u32 gue_overhead_of(__u32 nhops, int c6)
{
	return c6 ? NILB_GUE6_BASE_OVERHEAD + NILB_GUE6_HOP_LEN * nhops : gue_overhead(nhops);
}

/*
 * Write the Ethernet type, outer IPv4 (cfg->node_addr -> daddr), UDP and GUE
 * in front of an inner packet of inner_len bytes (inner_proto:
 * GUE_PROTO_IPV4 or GUE_PROTO_IPV6), listing the first
 * nhops (at most NILB_TX_HOPS) addresses of `list`; the UDP checksum by
 * LCO (gue_lco_inner; 0 for GUE_NO_LCO). The caller has checked that the
 * headers and NILB_TX_HOPS hops lie within the packet (data_end); the MACs
 * are the caller's.
 * Returns: nothing.
 */
static __always_inline void gue_write(struct ethhdr *eth, void *data_end,
				      const struct nilb_config *cfg, __u32 daddr, const __u32 *list,
				      __u32 nhops, __u32 hash, __u32 inner_len, __u8 inner_proto)
{
	struct iphdr *oip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(oip + 1);
	struct gue_hdr *gue = (void *)(udp + 1);
	__u32 len = inner_len + gue_overhead(nhops);
	__u32 sum;
	__u64 inner_sum;

	_Static_assert(NILB_TX_HOPS == 4, "gue_write lists up to four hops");
	eth->h_proto = bpf_htons(ETH_P_IP);

	*(__u16 *)oip = bpf_htons(0x4500); /* version 4, IHL 5, TOS 0 */
	oip->tot_len = bpf_htons(len);
	oip->id = 0;
	oip->frag_off = bpf_htons(IP_DF);
	oip->ttl = NILB_OUTER_TTL;
	oip->protocol = IPPROTO_UDP;
	oip->saddr = cfg->node_addr;
	oip->daddr = daddr;
	/* The constant words' sum comes precomputed (nilb_config). */
	sum = cfg->outer_csum_base + oip->tot_len + (daddr & 0xffff) + (daddr >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	oip->check = (__u16)~sum;

	udp->source = bpf_htons(0x8000 | (hash & 0x7fff));
	udp->dest = cfg->gue_port;
	udp->len = bpf_htons(len - sizeof(struct iphdr));
	udp->check = 0;

	/* [hlen][proto][flags 0 0] [private type 0 0][next hop 0][hop count] */
	((__u32 *)gue)[0] = bpf_htonl(((1 + nhops) << 24) | ((__u32)inner_proto << 16));
	((__u32 *)gue)[1] = bpf_htonl(nhops);
	if (nhops > 0)
		gue->hops[0] = list[0];
	if (nhops > 1)
		gue->hops[1] = list[1];
	if (nhops > 2)
		gue->hops[2] = list[2];
	if (nhops > 3)
		gue->hops[3] = list[3];
	inner_sum = gue_lco_inner((void *)gue->hops + 4 * (nhops & 7), data_end, inner_len,
				  inner_proto);
	if (inner_sum != GUE_NO_LCO) {
		/* Pseudo-header (addresses, protocol, length), the UDP header
		 * (its length again), GUE and the hops, the inner packet. */
		__u64 s = inner_sum + cfg->node_addr + daddr + bpf_htons(IPPROTO_UDP) +
			  2 * (__u32)udp->len + *(__u32 *)udp + ((__u32 *)gue)[0] +
			  ((__u32 *)gue)[1];

		if (nhops) { /* nested: a bucket that never moved pays one test */
			s += list[0];
			if (nhops > 1) {
				s += list[1];
				if (nhops > 2) {
					s += list[2];
					if (nhops > 3)
						s += list[3];
				}
			}
		}
		udp->check = gue_udp_check(s);
	}
}

/* Copy the IPv6 address of backend slot `slot` to dst (packet memory).
 * Returns: 0, or -1 if the slot has no IPv6 address (never for a slot
 * xdp_bucket listed). */
static __always_inline int gue_slot_addr6(__u32 *dst, __u32 slot)
{
	struct nilb_backend *be = bpf_map_lookup_elem(&backends, &slot);

	if (!be || be->family != NILB_FAMILY_IPV6)
		return -1;
	addr6_copy(dst, be->addr);
	return 0;
}

/* Write the IPv6 address of backend slot `slot` as the hop at `hop`
 * (packet memory, checked against data_end here) and add it to the partial
 * sum gue_write6 keeps folded in udp->check.
 * Returns: 0, or -1 if the hop does not fit or the slot has no IPv6
 * address. */
static __always_inline int gue_put_hop6(__u32 *hop, void *data_end, __u32 slot,
					struct udphdr *udp)
{
	if ((void *)(hop + 4) > data_end || gue_slot_addr6(hop, slot))
		return -1;
	udp->check = csum_fold64((__u64)udp->check + addr6_sum(hop));
	return 0;
}

/*
 * gue_write over an IPv6 cluster network: Ethernet type, outer IPv6 (node6
 * -> daddr, both four network-order words), UDP and GUE in front of an
 * inner packet of inner_len bytes, listing the IPv6 addresses of the first
 * nhops (at most NILB_TX_HOPS) backend slots of `slots`. The caller has
 * checked that the outer headers and GUE base header lie within the
 * packet (data_end); each hop is checked here (a short inner packet leaves
 * no room for hops not listed). The UDP checksum as gue_write's. The MACs
 * are the caller's.
 * Returns: 0, or -1 if a hop does not fit or a slot has no IPv6 address
 * (neither happens: the verifier needs the checks).
 */
static __always_inline int gue_write6(struct ethhdr *eth, void *data_end,
				      const struct nilb_config *cfg, const __u32 *node6,
				      const __u32 *daddr, const __u32 *slots, __u32 nhops,
				      __u32 hash, __u32 inner_len, __u8 inner_proto)
{
	struct ipv6hdr *oip6 = (void *)(eth + 1);
	struct udphdr *udp = (void *)(oip6 + 1);
	struct gue_hdr *gue = (void *)(udp + 1);
	__u32 *hop = gue->hops;
	/* UDP header, GUE base header and hops, inner packet. */
	__u32 len = inner_len + gue_overhead_of(nhops, 1) - sizeof(*oip6);
	__u64 inner_sum;

	_Static_assert(NILB_TX_HOPS == 4, "gue_write6 lists up to four hops");
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	/* Version 6, traffic class 0, flow label from the flow hash. */
	*(__u32 *)oip6 = bpf_htonl(0x60000000 | (hash & 0xfffff));
	oip6->payload_len = bpf_htons(len);
	oip6->nexthdr = IPPROTO_UDP;
	oip6->hop_limit = NILB_OUTER_TTL;
	addr6_copy((__u32 *)&oip6->saddr, node6);
	addr6_copy((__u32 *)&oip6->daddr, daddr);

	udp->source = bpf_htons(0x8000 | (hash & 0x7fff));
	udp->dest = cfg->gue_port;
	udp->len = bpf_htons(len);
	udp->check = 0;

	((__u32 *)gue)[0] = bpf_htonl(((1 + 4 * nhops) << 24) | ((__u32)inner_proto << 16));
	((__u32 *)gue)[1] = bpf_htonl(nhops);
	/* gue_write's sum, over the IPv6 pseudo-header (the length as a
	 * 32-bit word: the UDP length's 16 bits), kept folded in the checksum
	 * field while each hop is added as it is written (gue_put_hop6) and
	 * until the inner packet is (nothing kept on the stack across the
	 * hops' lookups). */
	udp->check = csum_fold64(addr6_sum(node6) + addr6_sum(daddr) + bpf_htons(IPPROTO_UDP) +
				 2 * (__u32)udp->len + *(__u32 *)udp + ((__u32 *)gue)[0] +
				 ((__u32 *)gue)[1]);
	if (nhops > 0) {
		if (gue_put_hop6(hop, data_end, slots[0], udp))
			return -1;
		hop += 4;
	}
	if (nhops > 1) {
		if (gue_put_hop6(hop, data_end, slots[1], udp))
			return -1;
		hop += 4;
	}
	if (nhops > 2) {
		if (gue_put_hop6(hop, data_end, slots[2], udp))
			return -1;
		hop += 4;
	}
	if (nhops > 3) {
		if (gue_put_hop6(hop, data_end, slots[3], udp))
			return -1;
		hop += 4;
	}
	inner_sum = gue_lco_inner(hop, data_end, inner_len, inner_proto);
	if (inner_sum == GUE_NO_LCO) {
		udp->check = 0;
		return 0;
	}
	udp->check = gue_udp_check(inner_sum + udp->check);
	return 0;
}

/* Result of gue_parse. */
enum gue_parse_result {
	/* A valid GUE packet; *inner is set. */
	GUE_OK,
	/* Outer IPv4 version, fragment or lengths, the GUE header, or the
	 * inner IPv4 header invalid or cut short. */
	GUE_MALFORMED,
	/* A valid GUE header around IPv6 (protocol 41): the inner packet is
	 * not checked yet (tc_gue_ipv6). */
	GUE_INNER_IPV6,
};

/* Returns: the GUE header of a packet whose outer IPv4 header oip has no
 * options (the UDP header comes between them). */
static __always_inline struct gue_hdr *gue_of(struct iphdr *oip)
{
	return (void *)(oip + 1) + sizeof(struct udphdr);
}

/*
 * The GUE header gue and what follows it, in a UDP payload of payload_len
 * bytes (lying within the frame: checked by the caller): the GUE header as
 * glb-director and nilb write it, with up to max_hops hops of hop_len bytes
 * (4 under outer IPv4, NILB_GUE6_HOP_LEN under outer IPv6: hlen counts
 * hop_len / 4 words per hop), and for protocol 4 an unfragmented inner
 * IPv4 packet filling the rest exactly.
 * Returns: enum gue_parse_result (*inner is set only with GUE_OK: the
 * inner IPv4 header, its 20 bytes within the packet).
 */
static __always_inline enum gue_parse_result gue_parse_payload(struct gue_hdr *gue,
								__u32 payload_len, __u32 max_hops,
								__u32 hop_len, void *data_end,
								struct iphdr **inner)
{
	struct iphdr *in;
	__u32 gue_len;
	__u8 hlen, nhops, next;

	if ((void *)(gue + 1) > data_end)
		return GUE_MALFORMED;
	hlen = gue->hlen & 0x1f;
	nhops = gue->hop_count;
	next = gue->next_hop;
	if ((gue->hlen & 0xe0) || gue->flags || gue->priv_type || nhops > max_hops ||
	    hlen != 1 + nhops * (hop_len / 4) || next > nhops)
		return GUE_MALFORMED;
	if (gue->proto == GUE_PROTO_IPV6)
		return GUE_INNER_IPV6;
	if (gue->proto != GUE_PROTO_IPV4)
		return GUE_MALFORMED;
	gue_len = sizeof(*gue) + hop_len * (__u32)nhops;
	in = (void *)gue + gue_len;
	if ((void *)(in + 1) > data_end)
		return GUE_MALFORMED;
	if (in->version != 4 || in->ihl < 5 || is_fragment(in) ||
	    bpf_ntohs(in->tot_len) != payload_len - gue_len ||
	    bpf_ntohs(in->tot_len) < in->ihl * 4)
		return GUE_MALFORMED;
	*inner = in;
	return GUE_OK;
}

/*
 * Validate a received GUE packet: outer IPv4 header oip (20 bytes, no
 * options, both checked by the caller) and UDP to the GUE port, the GUE
 * header as glb-director and nilb write it, and an unfragmented inner IPv4
 * packet filling the UDP payload exactly. frame_len: the frame's length
 * (the outer packet must lie within it).
 * Returns: enum gue_parse_result (*inner is set only with GUE_OK: the
 * inner IPv4 header, its 20 bytes within the packet).
 */
static __always_inline enum gue_parse_result gue_parse(struct iphdr *oip, void *data_end,
							__u32 frame_len,
							struct iphdr **inner)
{
	struct udphdr *udp = (void *)(oip + 1);
	__u32 tot_len, udp_len;

	if ((void *)(udp + 1) > data_end)
		return GUE_MALFORMED;
	tot_len = bpf_ntohs(oip->tot_len);
	udp_len = bpf_ntohs(udp->len);
	if (oip->version != 4 || is_fragment(oip) || udp_len != tot_len - sizeof(*oip) ||
	    sizeof(struct ethhdr) + tot_len > frame_len)
		return GUE_MALFORMED;
	return gue_parse_payload(gue_of(oip), udp_len - sizeof(*udp), NILB_MAX_GUE_HOPS, 4,
				 data_end, inner);
}

/* Returns: the GUE header of a packet whose outer header is IPv6 without
 * extension headers (oip6; the UDP header comes between them). */
static __always_inline struct gue_hdr *gue_of6(struct ipv6hdr *oip6)
{
	return (void *)(oip6 + 1) + sizeof(struct udphdr);
}

/*
 * gue_parse under outer IPv6 (an IPv6 cluster network): oip6 (40 bytes
 * within the frame, next header UDP: checked by the caller, so no
 * extension headers, which nilb never sends) and UDP to the GUE port
 * filling its payload exactly, then gue_parse_payload with 16-byte hops.
 * Returns: as gue_parse.
 */
static __always_inline enum gue_parse_result gue_parse6(struct ipv6hdr *oip6, void *data_end,
							 __u32 frame_len, struct iphdr **inner)
{
	struct udphdr *udp = (void *)(oip6 + 1);
	__u32 payload_len, udp_len;

	if ((void *)(udp + 1) > data_end)
		return GUE_MALFORMED;
	payload_len = bpf_ntohs(oip6->payload_len);
	udp_len = bpf_ntohs(udp->len);
	if (oip6->version != 6 || udp_len != payload_len || udp_len < sizeof(*udp) ||
	    sizeof(struct ethhdr) + sizeof(*oip6) + payload_len > frame_len)
		return GUE_MALFORMED;
	return gue_parse_payload(gue_of6(oip6), udp_len - sizeof(*udp), NILB_MAX_GUE_HOPS6,
				 NILB_GUE6_HOP_LEN, data_end, inner);
}

/* Returns: the bytes outer IPv4 + UDP + GUE take in a packet gue_parse
 * accepted (what decapsulation removes). */
static __always_inline __u32 gue_encap_len(const struct gue_hdr *gue)
{
	return gue_overhead(gue->hop_count);
}

/* The outer headers of a frame that may carry GUE over an IPv6 cluster
 * network: Ethernet, IPv6 whose next header is UDP, the UDP header within
 * the frame (outer_udp4's twin; nilb sends no outer extension headers, so
 * a frame with any is not nilb's GUE).
 * Returns: the IPv6 header, with the UDP header in *udp; NULL if the frame
 * is anything else. */
static __always_inline struct ipv6hdr *outer_udp6(void *data, void *data_end,
						  struct udphdr **udp)
{
	struct ethhdr *eth = data;
	struct ipv6hdr *oip6;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return NULL;
	oip6 = (void *)(eth + 1);
	if ((void *)(oip6 + 1) > data_end || oip6->nexthdr != IPPROTO_UDP)
		return NULL;
	*udp = (void *)(oip6 + 1);
	if ((void *)(*udp + 1) > data_end)
		return NULL;
	return oip6;
}

/* The outer headers of a frame that may carry GUE: Ethernet, IPv4 with a
 * valid IHL, UDP with its whole header in the frame (both programs' first
 * step; what GUE it is, if any, is the caller's to check).
 * Returns: the IPv4 header, with the UDP header in *udp and the IPv4
 * header's bytes in *ihl_len; NULL if the frame is anything else (pass it:
 * the stack judges it). */
static __always_inline struct iphdr *outer_udp4(void *data, void *data_end, struct udphdr **udp,
						 __u32 *ihl_len)
{
	struct ethhdr *eth = data;
	struct iphdr *oip;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return NULL;
	oip = (void *)(eth + 1);
	if ((void *)(oip + 1) > data_end || oip->protocol != IPPROTO_UDP)
		return NULL;
	*ihl_len = oip->ihl * 4;
	if (*ihl_len < sizeof(*oip))
		return NULL; /* not a valid IPv4 header: the stack drops it */
	*udp = (void *)oip + *ihl_len;
	if ((void *)(*udp + 1) > data_end)
		return NULL;
	return oip;
}

/* Returns: where hop `idx` of the GUE header's list lies, or NULL if beyond
 * NILB_MAX_GUE_HOPS or the packet (never for idx < hop_count after
 * gue_parse; the verifier needs the check). */
static __always_inline __u32 *gue_hop(struct gue_hdr *gue, __u32 idx, void *data_end)
{
	__u32 *hop = gue->hops + idx;

	if (idx >= NILB_MAX_GUE_HOPS || (void *)(hop + 1) > data_end)
		return NULL;
	return hop;
}

/* gue_hop under outer IPv6: where hop `idx` (16 bytes) lies, or NULL if
 * beyond NILB_MAX_GUE_HOPS6 or the packet. */
static __always_inline __u32 *gue_hop6(struct gue_hdr *gue, __u32 idx, void *data_end)
{
	__u32 *hop = gue->hops + 4 * idx;

	if (idx >= NILB_MAX_GUE_HOPS6 || (void *)(hop + 4) > data_end)
		return NULL;
	return hop;
}

/* gue_hop_relayable for an IPv6 hop (four network-order words): refused
 * are ::/96 (the unspecified address, ::1, IPv4-compatible), ::ffff:0:0/96
 * (IPv4-mapped), fe80::/10 (link-local), ff00::/8 (multicast) and any
 * configured IPv6 VIP that is not a cluster address; the same reasons as
 * for IPv4.
 * Returns: non-zero if the packet may be relayed to `hop`. */
static __always_inline int gue_hop_relayable6(const __u32 *hop)
{
	__u32 w0 = bpf_ntohl(hop[0]);
	struct nilb_addr6 key;

	if ((w0 >> 24) == 0xff || (w0 >> 22) == 0x3fa)
		return 0;
	if (!hop[0] && !hop[1] && (!hop[2] || hop[2] == bpf_htonl(0xffff)))
		return 0;
	if (vip6_flags(hop) < 0)
		return 1;
	addr6_copy((__u32 *)key.addr, hop);
	return bpf_map_lookup_elem(&cluster_nodes6, &key) != NULL;
}

/* Whether a second-chance packet may be sent on to `hop` (network order).
 * The hop list is trusted as far as its sender is (the cluster-source check
 * admitted it), but a node must not be made to relay packets from its own
 * address to a non-unicast destination or to a VIP, whatever the list says:
 * 0.0.0.0/8, 127.0.0.0/8 (the node itself), 169.254.0.0/16 (link-local:
 * never a cluster address, and where cloud metadata services answer),
 * 224.0.0.0/4 (multicast) and 240.0.0.0/4 (reserved, 255.255.255.255) are
 * refused, and so is any configured VIP that is not a cluster address (a
 * node's own address is a VIP when a NAT-mode service uses it, and its
 * connections still need their second chance there). Membership of the
 * cluster set is not required otherwise: a backend being removed may still
 * own connections after a node's own configuration dropped it
 * (docs/design.md "Second chance (TC)").
 * Returns: non-zero if the packet may be relayed to `hop`. */
static __always_inline int gue_hop_relayable(__u32 hop)
{
	__u32 h = bpf_ntohl(hop);
	__u8 first = h >> 24;

	if (first == 0 || first == 127 || first >= 224 || (h >> 16) == 0xa9fe)
		return 0;
	return !is_vip(hop) || bpf_map_lookup_elem(&cluster_nodes, &hop) != NULL;
}

/* Second chance: readdress the outer IPv4 header from this node (`node`)
 * to `hop` and move the GUE next-hop index past `next`, the index of `hop`.
 * Every checksum stays valid: the IPv4 header's, and a non-zero UDP
 * checksum (whose pseudo-header holds both addresses and whose data holds
 * the index) are updated incrementally (RFC 1624), so a packet corrupted
 * before it reached this node still fails the check at the next one. A
 * zero UDP checksum (a sender without one; nilb's balancer sends 0 only
 * when the inner packet has no checksum, gue_lco_inner) stays zero: there
 * is nothing to keep.
 * Returns: nothing. */
static __always_inline void gue_forward(struct iphdr *oip, struct gue_hdr *gue, __u8 next,
					__u32 node, __u32 hop)
{
	struct udphdr *udp = (void *)(oip + 1);
	/* The 16-bit word [next hop][hop count], as in memory. */
	__u16 *word = (__u16 *)&gue->next_hop;
	__u32 saddr = oip->saddr, daddr = oip->daddr;
	__u16 old_word = *word, check;

	oip->check = csum_replace4(oip->check, saddr, node);
	oip->saddr = node;
	oip->check = csum_replace4(oip->check, daddr, hop);
	oip->daddr = hop;
	gue->next_hop = next + 1;
	check = udp->check;
	if (check) {
		check = csum_replace4(check, saddr, node);
		check = csum_replace4(check, daddr, hop);
		check = csum_replace2(check, old_word, *word);
		/* A computed zero is sent as all ones (RFC 768). */
		udp->check = check ? check : 0xffff;
	}
}

/* gue_forward under outer IPv6: readdress oip6 from this node (node6) to
 * `hop` (both four network-order words; hop may lie in the packet's hop
 * list) and move the next-hop index past `next`; a non-zero UDP checksum
 * is updated incrementally (RFC 1624), a zero one stays zero.
 * Returns: nothing. */
static __always_inline void gue_forward6(struct ipv6hdr *oip6, struct gue_hdr *gue, __u8 next,
					 const __u32 *node6, const __u32 *hop)
{
	struct udphdr *udp = (void *)(oip6 + 1);
	__u32 *s = (__u32 *)&oip6->saddr, *d = (__u32 *)&oip6->daddr;
	__u16 *word = (__u16 *)&gue->next_hop;
	__u16 old_word = *word, check = udp->check;
	/* Whether the sender set one: a sum passing through 0 on the way
	 * (after the addresses, before the index) must not end the update. */
	const int summed = check != 0;

	if (summed) {
		check = csum_replace4(check, s[0], node6[0]);
		check = csum_replace4(check, s[1], node6[1]);
		check = csum_replace4(check, s[2], node6[2]);
		check = csum_replace4(check, s[3], node6[3]);
		check = csum_replace4(check, d[0], hop[0]);
		check = csum_replace4(check, d[1], hop[1]);
		check = csum_replace4(check, d[2], hop[2]);
		check = csum_replace4(check, d[3], hop[3]);
	}
	addr6_copy(s, node6);
	addr6_copy(d, hop);
	gue->next_hop = next + 1;
	if (summed) {
		check = csum_replace2(check, old_word, *word);
		/* A computed zero is sent as all ones (RFC 768). */
		udp->check = check ? check : 0xffff;
	}
}

#endif /* NILB_GUE_H */
