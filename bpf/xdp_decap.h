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

/* TCP states (BPF_TCP_*) in which a socket owns the packets of its 4-tuple
 * while a hop is left: the handshake, and a connection that can still
 * receive data or must still receive the ACK of its own FIN. Not TIME_WAIT
 * (which also covers the kernel's orphaned FIN_WAIT2 minisockets) and not
 * CLOSE: docs/design.md "Second chance (TC)" argues each state. Shared by
 * XDP (xdp_tcp_owned) and TC (tc_tcp_socket). */
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
 * listener, not TIME_WAIT or CLOSE) has flow f (client -> VIP). */
static __always_inline int xdp_tcp_owned(struct xdp_md *ctx, struct flow4 *f)
{
	struct bpf_sock *sk;
	__u32 state;

	sk = bpf_skc_lookup_tcp(ctx, (struct bpf_sock_tuple *)f,
				sizeof(((struct bpf_sock_tuple *)0)->ipv4), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	state = sk->state;
	bpf_sk_release(sk);
	return state < 32 && ((1u << state) & TCP_OWNING_STATES);
}

/* What the backend path does with a TCP packet to a VIP it received
 * itself, not encapsulated (the balancer's local first hop; th: its
 * checked TCP header, iph its IPv4 header): is it TC's first acceptance
 * rule, a SYN without ACK or a segment of a local owning socket?
 * Returns: C_XDP_DECAP_SYN, C_XDP_DECAP_ESTABLISHED, or -1 (neither). */
static __always_inline int xdp_tcp_accepts(struct xdp_md *ctx, const struct iphdr *iph,
					   const struct tcphdr *th)
{
	struct flow4 f = {
		.saddr = iph->saddr,
		.daddr = iph->daddr,
		.sport = th->source,
		.dport = th->dest,
		.proto = IPPROTO_TCP,
	};

	if (th->syn && !th->ack)
		return C_XDP_DECAP_SYN;
	if (xdp_tcp_owned(ctx, &f))
		return C_XDP_DECAP_ESTABLISHED;
	return -1;
}

/*
 * GUE addressed to this node (oip: its outer IPv4 header, 20 bytes within
 * the frame, protocol UDP, destination cfg->node_addr; the UDP destination
 * port is cfg->gue_port): decapsulate it here if TC would accept it at
 * once (a SYN, or a local socket owns the flow), else leave it to TC.
 * Returns: XDP_PASS in both cases; decapsulated: counted
 * C_XDP_DECAP_SYN or C_XDP_DECAP_ESTABLISHED (and the service's
 * tc_decap); untouched: C_XDP_GUE_TO_TC.
 */
static __always_inline int xdp_gue_receive(struct xdp_md *ctx, const struct nilb_config *cfg,
					   struct iphdr *oip)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_service_stats *st = NULL;
	struct nilb_service *svc;
	__u32 saddr = oip->saddr, hdr_len, l4_len;
	struct iphdr *in;
	struct tcphdr *th;
	struct ethhdr *eth;
	__u8 macs[2 * ETH_ALEN];
	int counter;

	/* TC's rules before it decapsulates, in its order. A packet from
	 * this node's own address is TC's to judge (our XDP's are marked and
	 * never pass here; anything else is forged). */
	if (saddr == cfg->node_addr || !bpf_map_lookup_elem(&cluster_nodes, &saddr))
		goto to_tc;
	if (oip->ihl != 5 || gue_parse(oip, data_end, data_end - data, &in) != GUE_OK)
		goto to_tc;
	if (in->protocol != IPPROTO_TCP || !is_vip(in->daddr))
		goto to_tc;
	th = (void *)in + in->ihl * 4;
	l4_len = bpf_ntohs(in->tot_len) - in->ihl * 4;
	if ((void *)(th + 1) > data_end || l4_len < sizeof(*th) || th->doff < 5 ||
	    th->doff * 4 > l4_len)
		goto to_tc;
	counter = xdp_tcp_accepts(ctx, in, th);
	if (counter < 0)
		goto to_tc;
	svc = service_of(in->daddr, th->dest, IPPROTO_TCP);
	if (svc)
		st = service_stats_of(svc);
	hdr_len = gue_encap_len(gue_of(oip));

	/* Keep the Ethernet header (type IPv4, as before) and drop outer
	 * IPv4, UDP and GUE behind it. */
	eth = data;
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
	count(counter);
	if (st)
		st->tc_decap++;
	return XDP_PASS;
to_tc:
	count(C_XDP_GUE_TO_TC);
	return XDP_PASS;
}

#endif /* NILB_XDP_DECAP_H */
