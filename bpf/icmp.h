/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * icmp.h: ICMP "fragmentation needed" (path MTU discovery) about a VIP flow.
 * A router on the way back to the client sends it to the VIP; the balancer
 * steers it to the flow's backend (it hashes the quoted flow), and TC accepts
 * it where a local socket has the flow. docs/design.md "Packet path".
 */
#ifndef NILB_ICMP_H
#define NILB_ICMP_H

#include "common.h"

#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4

/* Result of icmp_frag_needed_flow. */
enum icmp_flow_result {
	/* *flow holds the quoted TCP/UDP flow, in the client's direction. */
	ICMP_FLOW_OK,
	/* ICMP header, quoted IPv4 header or quoted TCP/UDP ports cut short
	 * (by the frame or by l4_len), or quoted version/IHL invalid. */
	ICMP_FLOW_MALFORMED,
	/* No flow to steer by: another ICMP type or code, the quoted packet is
	 * a later fragment (no ports), or it is neither TCP nor UDP. */
	ICMP_FLOW_NONE,
	/* As ICMP_FLOW_NONE (neither TCP nor UDP), and fewer than 4 bytes
	 * follow the quoted header: the balancer passes it as ICMP_FLOW_NONE,
	 * TC counts it malformed. */
	ICMP_FLOW_NONE_SHORT,
};

/*
 * The flow an ICMP "fragmentation needed" is about. The message quotes a
 * packet the backend sent (VIP:port -> client:port); *flow gets the client's
 * direction of it (client:port -> VIP:port), the one the balancer hashes and
 * TC looks sockets up in. icmp: the ICMP header, bounds not yet checked;
 * l4_len: bytes of the ICMP message within the IPv4 total length.
 * Returns: enum icmp_flow_result (*flow is set only with ICMP_FLOW_OK).
 */
static __always_inline enum icmp_flow_result
icmp_frag_needed_flow(struct icmphdr *icmp, __u32 l4_len, void *data_end, struct flow4 *flow)
{
	struct iphdr *emb;
	__u16 *ports;

	if ((void *)(icmp + 1) > data_end || l4_len < sizeof(*icmp))
		return ICMP_FLOW_MALFORMED;
	if (icmp->type != ICMP_DEST_UNREACH || icmp->code != ICMP_FRAG_NEEDED)
		return ICMP_FLOW_NONE;
	emb = (void *)(icmp + 1);
	if ((void *)(emb + 1) > data_end || l4_len < sizeof(*icmp) + sizeof(*emb) ||
	    emb->version != 4 || emb->ihl < 5)
		return ICMP_FLOW_MALFORMED;
	/* A later fragment carries no ports: nothing to steer by. */
	if (emb->frag_off & bpf_htons(IP_OFFSET))
		return ICMP_FLOW_NONE;
	ports = (void *)emb + emb->ihl * 4;
	if ((void *)(ports + 2) > data_end ||
	    sizeof(*icmp) + emb->ihl * 4 + 2 * sizeof(__u16) > l4_len) {
		if (emb->protocol != IPPROTO_TCP && emb->protocol != IPPROTO_UDP)
			return ICMP_FLOW_NONE_SHORT;
		return ICMP_FLOW_MALFORMED;
	}
	if (emb->protocol != IPPROTO_TCP && emb->protocol != IPPROTO_UDP)
		return ICMP_FLOW_NONE;
	flow->saddr = emb->daddr;
	flow->daddr = emb->saddr;
	flow->sport = ports[1];
	flow->dport = ports[0];
	flow->proto = emb->protocol;
	return ICMP_FLOW_OK;
}

#endif /* NILB_ICMP_H */
