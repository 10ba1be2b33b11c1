/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * too_big.h: the balancer's answer to a client packet that no longer fits
 * the wire once GUE is added (packet + 36 + 4N > MTU; docs/design.md
 * "Balancer (XDP)"). With DF set it gets ICMP "fragmentation needed"
 * (RFC 792, RFC 1191) built in place from the packet and sent back out of
 * the receiving interface (XDP_TX), rate-limited per CPU:
 *
 *   Ethernet  the packet's MACs swapped
 *   IPv4      20 bytes: TOS 0xc0 (internetwork control, as routers send
 *             ICMP errors), ID 0, DF, TTL 64, protocol 1, a valid checksum;
 *             source = the packet's destination (the VIP), destination =
 *             the packet's source
 *   ICMP      type 3, code 4, a valid checksum, 16 unused bits 0, next-hop
 *             MTU = MTU - (36 + 4N), at least NILB_MIN_IPV4_MTU
 *   quote     the packet's IPv4 header with its options and the first 8
 *             bytes after it (RFC 792's minimum, 28 to 68 bytes: enough for
 *             the ports and the TCP sequence number the sender checks)
 *
 * Without DF, about an ICMP error (RFC 1122 3.2.2: never an error about an
 * error) or from a source that is not a unicast host (0/8, 127/8, 224/3;
 * RFC 1812 4.3.2.7) the packet is dropped instead.
 */
#ifndef NILB_TOO_BIG_H
#define NILB_TOO_BIG_H

#include "common.h"
#include "ipv6.h"

#define PTB_ICMP_TYPE 3    /* destination unreachable */
#define PTB_ICMP_CODE 4    /* fragmentation needed and DF set */
#define PTB_TOS 0xc0
#define PTB_TTL 64
/* Bytes put in front of the quote: IPv4 header and ICMP header. */
#define PTB_GROW (sizeof(struct iphdr) + 8)
/* 32-bit words of the longest ICMP message: header, 60-byte IPv4 header, 8. */
#define PTB_MAX_WORDS ((8 + 60 + 8) / 4)
#define NSEC_PER_SEC 1000000000ULL

/* Token bucket of this CPU: may one more reply go out now? `rate` replies
 * per second refill it, one second's worth is the most it holds (the
 * burst), and a reply costs 1e9 / rate ns of credit.
 * Returns: non-zero if the reply may be sent (its cost taken). */
static __always_inline int ptb_allowed(__u32 rate)
{
	struct nilb_icmp_limit *l;
	__u64 now, credit, cost;
	__u32 zero = 0;

	if (!rate)
		return 0;
	l = bpf_map_lookup_elem(&icmp_limit, &zero);
	if (!l)
		return 0;
	now = bpf_ktime_get_ns();
	cost = NSEC_PER_SEC / rate;
	credit = l->credit_ns + (now - l->last_ns);
	if (credit > NSEC_PER_SEC)
		credit = NSEC_PER_SEC;
	l->last_ns = now;
	if (credit < cost) {
		l->credit_ns = credit;
		return 0;
	}
	l->credit_ns = credit - cost;
	return 1;
}

/* Returns: non-zero if saddr (network order) may receive an ICMP error: not
 * 0.0.0.0/8, 127.0.0.0/8, multicast, class E or broadcast. */
static __always_inline int ptb_unicast_source(__u32 saddr)
{
	__u32 first = bpf_ntohl(saddr) >> 24;

	return first != 0 && first != 127 && first < 224;
}

/* Fold a sum of 32-bit words into the one's complement checksum. Summing
 * 32-bit words and folding gives the 16-bit sum in the bytes' own order
 * (RFC 1071), so the result is stored as it is.
 * Returns: the checksum. */
static __always_inline __u16 ptb_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* One's complement checksum of the ICMP message of the reply in ctx
 * (after Ethernet and the 20-byte IPv4 header): `words` 32-bit words, at
 * most PTB_MAX_WORDS, within the frame.
 * Returns: the checksum. */
static __always_inline __u16 ptb_icmp_csum(struct xdp_md *ctx, __u32 words)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const __u32 *w = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < PTB_MAX_WORDS; i++) {
		if (i < words && (const void *)(w + i + 1) <= data_end)
			sum += w[i];
	}
	return ptb_fold(sum);
}

/*
 * The packet in ctx, already encapsulated (Ethernet, `overhead` bytes of
 * outer IPv4, UDP and GUE, then the client's packet: an IPv4 header the
 * balancer checked, with at least 8 bytes of L4 header), does not fit the
 * MTU `mtu`. is_icmp: the client's packet is an ICMP error; macs: its
 * destination and source MACs. A subprogram: the path is rare, and the
 * balancer's common path keeps its registers.
 * Returns: XDP_TX with the reply built in place (counted:
 * C_XDP_ICMP_TOO_BIG), or XDP_DROP (counted: C_XDP_DROP_TOO_BIG,
 * C_XDP_DROP_TOO_BIG_LIMITED, or C_XDP_DROP_ADJUST_FAILED).
 */
static __noinline int xdp_too_big(struct xdp_md *ctx, __u32 mtu, __u32 overhead, __u32 is_icmp,
				  const __u8 *macs)
{
	struct nilb_config *cfg = get_config();
	__u32 quote_len, frame_len, next_mtu, saddr, daddr;
	void *data, *data_end;
	__u16 check;
	struct iphdr *ip, *quote;
	struct icmphdr *icmp;
	struct ethhdr *eth;

	/* Drop the outer headers but the 28 bytes the new IPv4 and ICMP
	 * headers take: the client's IPv4 header, where it is, becomes the
	 * quote. */
	if (!cfg || overhead < PTB_GROW ||
	    bpf_xdp_adjust_head(ctx, (int)overhead - (int)PTB_GROW))
		goto short_frame;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	icmp = (void *)(ip + 1);
	quote = (void *)(icmp + 1);
	if ((void *)(quote + 1) > data_end)
		goto short_frame; /* never: the caller's packet is there */
	if (is_icmp || !(quote->frag_off & bpf_htons(IP_DF)) ||
	    !ptb_unicast_source(quote->saddr)) {
		count(C_XDP_DROP_TOO_BIG);
		return XDP_DROP;
	}
	quote_len = quote->ihl * 4 + 8;
	frame_len = data_end - data;
	if (sizeof(*eth) + PTB_GROW + quote_len > frame_len)
		goto short_frame; /* never: the caller checked the L4 header */
	if (!ptb_allowed(cfg->icmp_too_big_rate)) {
		count(C_XDP_DROP_TOO_BIG_LIMITED);
		return XDP_DROP;
	}
	next_mtu = mtu > overhead + NILB_MIN_IPV4_MTU ? mtu - overhead : NILB_MIN_IPV4_MTU;

	/* Cut the frame after the quote. */
	if (bpf_xdp_adjust_tail(ctx, (int)(sizeof(*eth) + PTB_GROW + quote_len) - (int)frame_len))
		goto short_frame;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	icmp = (void *)(ip + 1);
	quote = (void *)(icmp + 1);
	if ((void *)(quote + 1) + 8 > data_end)
		goto short_frame; /* never after the checks above */

	/* Back to the sender, from the address it was sent to. */
	__builtin_memcpy(eth->h_dest, macs + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(eth->h_source, macs, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	saddr = quote->daddr;
	daddr = quote->saddr;
	*(__u16 *)ip = bpf_htons(0x4500 | PTB_TOS); /* version 4, IHL 5, TOS */
	ip->tot_len = bpf_htons(PTB_GROW + quote_len);
	ip->id = 0;
	ip->frag_off = bpf_htons(IP_DF);
	ip->ttl = PTB_TTL;
	ip->protocol = IPPROTO_ICMP;
	ip->check = 0;
	ip->saddr = saddr;
	ip->daddr = daddr;
	ip->check = ptb_fold((__u64)((__u32 *)ip)[0] + ((__u32 *)ip)[1] + ((__u32 *)ip)[2] +
			     ((__u32 *)ip)[3] + ((__u32 *)ip)[4]);

	icmp->type = PTB_ICMP_TYPE;
	icmp->code = PTB_ICMP_CODE;
	icmp->checksum = 0;
	((__u32 *)icmp)[1] = bpf_htonl(next_mtu); /* 16 unused bits, MTU */
	check = ptb_icmp_csum(ctx, (8 + quote_len) / 4);
	/* Fresh pointers for the store: the sum's bounds checks leave the
	 * verifier unsure of the old ones. */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	icmp = data + sizeof(*eth) + sizeof(*ip);
	if ((void *)(icmp + 1) > data_end)
		goto short_frame; /* never */
	icmp->checksum = check;

	count(C_XDP_ICMP_TOO_BIG);
	return XDP_TX;

short_frame:
	count(C_XDP_DROP_ADJUST_FAILED);
	return XDP_DROP;
}

/*
 * IPv6 (RFC 8200 5, RFC 4443 3.2, RFC 8201): routers never fragment IPv6,
 * so an IPv6 packet too big for the encapsulation always gets an ICMPv6
 * Packet Too Big, built in place like the IPv4 reply and rate-limited by
 * the same token bucket:
 *
 *   Ethernet  the packet's MACs swapped, type IPv6
 *   IPv6      traffic class 0, flow label 0, next header 58, hop limit 64;
 *             source = the packet's destination (the VIP), destination =
 *             the packet's source
 *   ICMPv6    type 2, code 0, a valid checksum (pseudo-header included),
 *             MTU = MTU - (36 + 4N), at least NILB_MIN_IPV6_MTU
 *   quote     the packet's first PTB6_QUOTE bytes (its IPv6 header, any
 *             extension headers and the start of the L4 header: what the
 *             sender needs to find its connection), whole 32-bit words
 *
 * About an ICMPv6 error (RFC 4443 2.4 (e)), or from a multicast or
 * unspecified source, the packet is dropped instead.
 */
#define PTB6_GROW (sizeof(struct ipv6hdr) + 8)
#define PTB6_QUOTE 184
#define PTB6_MAX_WORDS ((8 + PTB6_QUOTE) / 4)

/* The packet in ctx, encapsulated as for xdp_too_big, is IPv6 (the
 * balancer checked its header and L4 header); as xdp_too_big otherwise.
 * Returns: XDP_TX (counted: C_XDP_ICMP6_TOO_BIG), or XDP_DROP (counted:
 * C_XDP_DROP_TOO_BIG, C_XDP_DROP_TOO_BIG_LIMITED, or
 * C_XDP_DROP_ADJUST_FAILED). */
static __noinline int xdp_too_big6(struct xdp_md *ctx, __u32 mtu, __u32 overhead, __u32 is_icmp,
				   const __u8 *macs)
{
	struct nilb_config *cfg = get_config();
	__u32 quote_len, frame_len, next_mtu, *a;
	void *data, *data_end;
	struct ipv6hdr *ip6, *quote;
	struct ethhdr *eth;
	__u8 *icmp;
	__u64 sum;
	__u32 *w;

	/* The reply's headers (48 bytes) take more room than GUE with fewer
	 * than 3 hops (36 + 4N): the head then grows into the headroom. */
	if (!cfg || bpf_xdp_adjust_head(ctx, (int)overhead - (int)PTB6_GROW))
		goto short_frame;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = (void *)(eth + 1);
	icmp = (void *)(ip6 + 1);
	quote = (void *)(icmp + 8);
	if ((void *)(quote + 1) > data_end)
		goto short_frame; /* never: the caller's packet is there */
	/* Multicast (ff00::/8) or unspecified (::) sources get no error. */
	if (is_icmp || ((__u8 *)&quote->saddr)[0] == 0xff ||
	    !(((__u32 *)&quote->saddr)[0] | ((__u32 *)&quote->saddr)[1] |
	      ((__u32 *)&quote->saddr)[2] | ((__u32 *)&quote->saddr)[3])) {
		count(C_XDP_DROP_TOO_BIG);
		return XDP_DROP;
	}
	frame_len = data_end - data;
	quote_len = sizeof(*quote) + bpf_ntohs(quote->payload_len);
	if (quote_len > PTB6_QUOTE)
		quote_len = PTB6_QUOTE;
	quote_len &= ~3u;
	if (sizeof(*eth) + PTB6_GROW + quote_len > frame_len)
		goto short_frame; /* never: the caller checked the lengths */
	if (!ptb_allowed(cfg->icmp_too_big_rate)) {
		count(C_XDP_DROP_TOO_BIG_LIMITED);
		return XDP_DROP;
	}
	next_mtu = mtu > overhead + NILB_MIN_IPV6_MTU ? mtu - overhead : NILB_MIN_IPV6_MTU;
	/* The reply's addresses now, from the quote, which the header being
	 * written does not overlap (the quote starts after it). */
	addr6_copy((__u32 *)&ip6->saddr, (__u32 *)&quote->daddr);
	addr6_copy((__u32 *)&ip6->daddr, (__u32 *)&quote->saddr);

	if (bpf_xdp_adjust_tail(ctx, (int)(sizeof(*eth) + PTB6_GROW + quote_len) - (int)frame_len))
		goto short_frame;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip6 = (void *)(eth + 1);
	icmp = (void *)(ip6 + 1);
	if ((void *)(icmp + 8) > data_end)
		goto short_frame; /* never after the checks above */

	__builtin_memcpy(eth->h_dest, macs + ETH_ALEN, ETH_ALEN);
	__builtin_memcpy(eth->h_source, macs, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	*(__u32 *)ip6 = bpf_htonl(0x60000000); /* version 6, class 0, label 0 */
	ip6->payload_len = bpf_htons(8 + quote_len);
	ip6->nexthdr = NEXTHDR_ICMPV6;
	ip6->hop_limit = PTB_TTL;
	icmp[0] = ICMPV6_PKT_TOOBIG;
	icmp[1] = 0;
	*(__u16 *)(icmp + 2) = 0;
	*(__u32 *)(icmp + 4) = bpf_htonl(next_mtu);

	/* Pseudo-header (RFC 8200 8.1): addresses, upper-layer length, next
	 * header; then the ICMPv6 message. */
	a = (__u32 *)&ip6->saddr; /* saddr then daddr: 8 words */
	sum = (__u64)a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7] +
	      bpf_htonl(8 + quote_len) + bpf_htonl(NEXTHDR_ICMPV6);
	w = (void *)icmp;
#pragma unroll
	for (int i = 0; i < PTB6_MAX_WORDS; i++) {
		if (i < (8 + quote_len) / 4 && (void *)(w + i + 1) <= data_end)
			sum += w[i];
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	icmp = data + sizeof(*eth) + sizeof(*ip6);
	if ((void *)(icmp + 8) > data_end)
		goto short_frame; /* never */
	*(__u16 *)(icmp + 2) = ptb_fold(sum);

	count(C_XDP_ICMP6_TOO_BIG);
	return XDP_TX;

short_frame:
	count(C_XDP_DROP_ADJUST_FAILED);
	return XDP_DROP;
}

#endif /* NILB_TOO_BIG_H */
