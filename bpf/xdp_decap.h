/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * xdp_decap.h: the backends' receive path in XDP, before GRO
 * (docs/design.md "Second chance (TC)"). GUE for this node whose inner
 * packet XDP can decide on its own is decapsulated here, so that the inner
 * TCP stream reaches GRO and is merged: a TCP SYN without ACK (TC accepts
 * every one), and a TCP segment of a local socket that owns its flow.
 * Everything else for this node (UDP, ICMP, SYN-cookie ACKs, TIME_WAIT,
 * second chance, anything TC drops) passes untouched to the TC program,
 * which applies its rules as before. Before decapsulating, XDP applies
 * every rule TC applies before it decapsulates: a source in the cluster
 * and not this node's own address (our own XDP's packets never come back
 * through XDP), no outer options, the GUE header and inner lengths
 * (gue_parse), an inner destination that is a VIP, and a whole TCP header
 * within the inner packet. Used by both XDP programs: the balancer's, and
 * nilb_xdp_backend on the nodes that are not balancers.
 */
#ifndef NILB_XDP_DECAP_H
#define NILB_XDP_DECAP_H

#include "common.h"
#include "gue.h"
#include "nat.h"
#include "ipv6.h"

/*
 * What the backend path does with a TCP segment to a service that reached
 * this node (iph, th: its checked IPv4 and TCP headers; svc: the service,
 * NULL if none): is it TC's first acceptance rule, a SYN without ACK or a
 * segment of a local owning socket? For a NAT-mode service the socket is
 * looked up, and the flow tracked (nat_track), by the translated tuple,
 * and *nat is set non-zero: the caller rewrites the segment
 * (nat_xdp_tcp_in) once it has taken the outer headers off.
 * Returns: C_XDP_DECAP_SYN, C_XDP_DECAP_ESTABLISHED, -1 (neither: TC's),
 * or -2 (NAT collision or table full, counted: drop it).
 */
static __always_inline int xdp_tcp_accepts(struct xdp_md *ctx, const struct iphdr *iph,
					   const struct tcphdr *th, const struct nilb_service *svc,
					   __u32 node, int *nat)
{
	struct flow4 f = {
		.saddr = iph->saddr,
		.daddr = iph->daddr,
		.sport = th->source,
		.dport = th->dest,
		.proto = IPPROTO_TCP,
	};
	int syn = th->syn && !th->ack;

	*nat = nat_active(svc, iph->daddr, th->dest, node);
	if (*nat) {
		f.daddr = node;
		f.dport = svc->nat_port;
	}
	if (!syn && !tcp_flow_owned(ctx, &f))
		return -1;
	if (*nat && nat_track(ctx, &f, iph->daddr, th->dest, syn) < 0)
		return -2;
	/* A NAT service on this node's own address and port: untranslated,
	 * like a direct packet to the node. */
	if (!*nat && svc && (svc->flags & NILB_SVC_F_NAT) && nat_direct_check(ctx, &f, syn))
		return -2;
	return syn ? C_XDP_DECAP_SYN : C_XDP_DECAP_ESTABLISHED;
}

/*
 * xdp_gue_receive for GUE protocol 41 (inner IPv6; docs/design.md "IPv6"),
 * once the outer rules passed (cluster source, not this node, no outer
 * options, the GUE header): decapsulated here if the inner packet is a
 * whole IPv6 packet filling the GUE payload, its extension headers walk to
 * TCP, its destination is an IPv6 VIP, and it is a SYN without ACK or a
 * segment of a local owning socket; else TC's. o6: the outer header is
 * IPv6 (an IPv6 cluster network: 16-byte hops), else IPv4 without options.
 * Returns: XDP_PASS (counted: C_XDP_DECAP_SYN or C_XDP_DECAP_ESTABLISHED
 * and the service's tc_decap, or C_XDP_GUE_TO_TC).
 */
static __always_inline int xdp_gue_receive6_of(struct xdp_md *ctx, const int o6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_service_stats *st = NULL;
	struct nilb_service *svc;
	struct ethhdr *eth = data;
	__u32 ip_len = o6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 hop_len = o6 ? NILB_GUE6_HOP_LEN : 4;
	struct udphdr *udp = (void *)(eth + 1) + ip_len;
	struct gue_hdr *gue = (void *)(udp + 1);
	struct ipv6hdr *in6;
	struct tcphdr *th;
	struct flow6 f;
	__u32 gue_len, in_len, l4_off = 0, hdr_len;
	__u8 macs[2 * ETH_ALEN];
	__u8 proto = 0;
	int syn;

	if ((void *)(gue + 1) > data_end ||
	    gue->hop_count > (o6 ? NILB_MAX_GUE_HOPS6 : NILB_MAX_GUE_HOPS))
		goto to_tc;
	gue_len = sizeof(*gue) + hop_len * (__u32)gue->hop_count;
	hdr_len = ip_len + sizeof(*udp) + gue_len;
	in6 = (void *)gue + gue_len;
	if ((void *)(in6 + 1) > data_end)
		goto to_tc;
	in_len = sizeof(*in6) + bpf_ntohs(in6->payload_len);
	if (in6->version != 6 || in_len != bpf_ntohs(udp->len) - sizeof(*udp) - gue_len ||
	    ipv6_walk(in6, data_end, in_len - sizeof(*in6), &l4_off, &proto) != IP6_L4 ||
	    proto != IPPROTO_TCP || l4_off > sizeof(*in6) + NILB_IPV6_MAX_EXT * 2048 ||
	    vip6_flags_cached((__u32 *)&in6->daddr) < 0)
		goto to_tc;
	th = (void *)in6 + l4_off;
	if ((void *)(th + 1) > data_end || in_len - l4_off < sizeof(*th) || th->doff < 5 ||
	    th->doff * 4 > in_len - l4_off)
		goto to_tc;
	__builtin_memset(&f, 0, sizeof(f));
	addr6_copy(f.saddr, (__u32 *)&in6->saddr);
	addr6_copy(f.daddr, (__u32 *)&in6->daddr);
	f.sport = th->source;
	f.dport = th->dest;
	f.proto = IPPROTO_TCP;
	syn = th->syn && !th->ack;
	if (!syn && !tcp_flow_owned6(ctx, &f))
		goto to_tc;
	svc = service6_cached(f.daddr, f.dport, IPPROTO_TCP);
	if (svc)
		st = service_stats_of(svc);

	copy_macs(macs, eth);
	if (bpf_xdp_adjust_head(ctx, (int)hdr_len))
		goto to_tc; /* never seen: the inner packet is longer than Ethernet */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS; /* checked by the kernel; the verifier needs it */
	copy_macs(eth, macs);
	eth->h_proto = bpf_htons(ETH_P_IPV6);
	count(syn ? C_XDP_DECAP_SYN : C_XDP_DECAP_ESTABLISHED);
	if (st)
		st->tc_decap++;
	return XDP_PASS;
to_tc:
	count(C_XDP_GUE_TO_TC);
	return XDP_PASS;
}

/* xdp_gue_receive6_of under outer IPv4: a subprogram, so that its stack
 * does not add to the IPv4 path's. */
static __noinline int xdp_gue_receive6(struct xdp_md *ctx)
{
	return xdp_gue_receive6_of(ctx, 0);
}

/* xdp_gue_receive6_of under outer IPv6. */
static __noinline int xdp_gue_receive6_o6(struct xdp_md *ctx)
{
	return xdp_gue_receive6_of(ctx, 1);
}

/*
 * The inner IPv4 packet (in: its header, gue_parse* accepted it) of GUE
 * addressed to this node whose outer rules passed, hdr_len the bytes in
 * front of it after Ethernet: decapsulated here if TC would accept it at
 * once (xdp_gue_receive's rules from the inner destination on). node: this
 * node's IPv4 address (0 on an IPv6 cluster network, where no service is
 * in NAT mode).
 * Returns: as xdp_gue_receive.
 */
static __always_inline int xdp_gue_receive_in4(struct xdp_md *ctx, struct iphdr *in,
					       __u32 hdr_len, __u32 node)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_service_stats *st = NULL;
	struct nilb_service *svc;
	__u32 l4_len;
	struct tcphdr *th;
	struct ethhdr *eth;
	__u8 macs[2 * ETH_ALEN];
	int counter, nat, vflags;

	vflags = vip_flags_cached(in->daddr);
	if (in->protocol != IPPROTO_TCP || vflags < 0)
		goto to_tc;
	th = (void *)in + in->ihl * 4;
	l4_len = bpf_ntohs(in->tot_len) - in->ihl * 4;
	if ((void *)(th + 1) > data_end || l4_len < sizeof(*th) || th->doff < 5 ||
	    th->doff * 4 > l4_len)
		goto to_tc;
	svc = service_cached(in->daddr, th->dest, IPPROTO_TCP);
	/* A NAT-only address without its NAT service: TC drops it. */
	if ((vflags & NILB_ADDR_F_NAT_ONLY) && !(svc && (svc->flags & NILB_SVC_F_NAT)))
		goto to_tc;
	counter = xdp_tcp_accepts(ctx, in, th, svc, node, &nat);
	if (counter == -2)
		return XDP_DROP;
	if (counter < 0)
		goto to_tc;
	if (svc)
		st = service_stats_of(svc);

	/* Keep the Ethernet header (type IPv4) and drop the outer IP header,
	 * UDP and GUE behind it. */
	eth = data;
	if ((void *)(eth + 1) > data_end)
		goto to_tc; /* checked by the caller; the verifier needs it */
	copy_macs(macs, eth);
	if (bpf_xdp_adjust_head(ctx, (int)hdr_len))
		goto to_tc; /* never seen: the inner packet is longer than Ethernet */
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS; /* checked by the kernel; the verifier needs it */
	copy_macs(eth, macs);
	eth->h_proto = bpf_htons(ETH_P_IP);
	if (nat && svc) {
		in = (void *)(eth + 1);
		if ((void *)(in + 1) > data_end)
			return XDP_PASS; /* checked before; the verifier needs it */
		th = (void *)in + in->ihl * 4;
		if ((void *)(th + 1) > data_end)
			return XDP_PASS;
		nat_xdp_tcp_in(in, th, node, svc->nat_port);
		count(C_NAT_IN);
	}
	count(counter);
	if (st)
		st->tc_decap++;
	return XDP_PASS;
to_tc:
	count(C_XDP_GUE_TO_TC);
	return XDP_PASS;
}

/*
 * GUE addressed to this node (oip: its outer IPv4 header, 20 bytes within
 * the frame, protocol UDP, destination cfg->node_addr; the UDP destination
 * port is cfg->gue_port): decapsulate it here if TC would accept it at
 * once (a SYN, or a local socket owns the flow), else leave it to TC. A
 * NAT-mode service's segment is translated as it is decapsulated.
 * Returns: XDP_PASS in both cases; decapsulated: counted
 * C_XDP_DECAP_SYN or C_XDP_DECAP_ESTABLISHED (and the service's
 * tc_decap; C_NAT_IN if translated); untouched: C_XDP_GUE_TO_TC; or
 * XDP_DROP for a NAT collision or a full nat_flows (counted).
 */
static __always_inline int xdp_gue_receive(struct xdp_md *ctx, const struct nilb_config *cfg,
					   struct iphdr *oip)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 saddr = oip->saddr;
	struct iphdr *in;

	/* TC's rules before it decapsulates, in its order. A packet from
	 * this node's own address is TC's to judge (our XDP's are marked and
	 * never pass here; anything else is forged). */
	if (saddr == cfg->node_addr || !cluster_node_cached(saddr))
		goto to_tc;
	if (oip->ihl != 5)
		goto to_tc;
	switch (gue_parse(oip, data_end, data_end - data, &in)) {
	case GUE_OK:
		break;
	case GUE_INNER_IPV6:
		return xdp_gue_receive6(ctx);
	default:
		goto to_tc;
	}
	return xdp_gue_receive_in4(ctx, in, gue_encap_len(gue_of(oip)), cfg->node_addr);
to_tc:
	count(C_XDP_GUE_TO_TC);
	return XDP_PASS;
}

/*
 * xdp_gue_receive over an IPv6 cluster network: GUE in outer IPv6 (no
 * extension headers, next header UDP to cfg->gue_port) addressed to this
 * node's config6 address. The same rules (source in cluster_nodes6 and not
 * this node, gue_parse6, then the inner packet's), hops of 16 bytes. A
 * subprogram: IPv4 frames never enter it.
 * Returns: as xdp_gue_receive.
 */
static __noinline int xdp_gue_receive_o6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *oip6 = (void *)(eth + 1);
	struct gue_hdr *gue;
	struct iphdr *in;
	__u32 *node6 = get_node6();

	if (!node6 || (void *)(oip6 + 1) > data_end)
		goto to_tc; /* never: checked by the caller; for the verifier */
	if (addr6_eq((__u32 *)&oip6->saddr, node6))
		goto to_tc;
	if (!cluster_node6_cached((__u32 *)&oip6->saddr))
		goto to_tc;
	switch (gue_parse6(oip6, data_end, data_end - data, &in)) {
	case GUE_OK:
		break;
	case GUE_INNER_IPV6:
		return xdp_gue_receive6_o6(ctx);
	default:
		goto to_tc;
	}
	gue = gue_of6(oip6);
	if ((void *)(gue + 1) > data_end)
		goto to_tc; /* checked by gue_parse6; for the verifier */
	return xdp_gue_receive_in4(ctx, in, gue_overhead_of(gue->hop_count, 1), 0);
to_tc:
	count(C_XDP_GUE_TO_TC);
	return XDP_PASS;
}

#endif /* NILB_XDP_DECAP_H */
