/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * icmp.h: what an ICMP message addressed to a VIP is about, one rule for
 * both programs (docs/design.md "Packet path", ICMP to a VIP):
 *
 *   - an error that quotes a packet the VIP sent (destination unreachable
 *     of any code, time exceeded, parameter problem) is about the quoted
 *     TCP or UDP flow: the balancer hashes it on that flow and TC keeps or
 *     forwards it by that flow's rules;
 *   - an echo request is answered by the node it reaches (for GUE: the
 *     first hop);
 *   - anything else (other types, errors quoting a later fragment or a
 *     protocol other than TCP/UDP) belongs to no flow.
 *
 * An error whose quoted source is not the VIP it was sent to is invalid:
 * an ICMP error goes to the source of the packet it quotes.
 */
#ifndef NILB_ICMP_H
#define NILB_ICMP_H

#include "common.h"

#define ICMP_ECHOREPLY 0
#define ICMP_DEST_UNREACH 3
#define ICMP_ECHO 8
#define ICMP_TIME_EXCEEDED 11
#define ICMP_PARAMETERPROB 12

/* Result of icmp_classify. */
enum icmp_class {
	/* An error quoting a TCP/UDP packet of the VIP: *flow holds the
	 * quoted flow in the client's direction. */
	ICMP_FLOW,
	/* An echo request. */
	ICMP_PING,
	/* About no flow: another type, or an error quoting a later fragment
	 * (no ports) or a protocol other than TCP/UDP. */
	ICMP_NO_FLOW,
	/* ICMP header or quoted IPv4 header cut short (by the frame or by
	 * l4_len), quoted version/IHL invalid, quoted source not the VIP, or
	 * the quoted TCP/UDP ports cut short. */
	ICMP_MALFORMED,
};

/*
 * Classify an ICMP message sent to `vip` (network order). An error quotes a
 * packet the backend sent (VIP:port -> client:port); *flow gets the client's
 * direction of it (client:port -> VIP:port), the one the balancer hashes and
 * TC looks sockets up in. icmp: the ICMP header, bounds not yet checked;
 * l4_len: bytes of the ICMP message within the IPv4 total length. Every
 * byte read lies within both the frame and l4_len, so XDP and TC, which
 * call this alike, always agree.
 * Returns: enum icmp_class (*flow is set only with ICMP_FLOW).
 */
static __always_inline enum icmp_class icmp_classify(struct icmphdr *icmp, __u32 l4_len,
						      __u32 vip, void *data_end,
						      struct flow4 *flow)
{
	struct iphdr *emb;
	__u16 *ports;
	__u32 emb_len;
	__u8 type;

	if ((void *)(icmp + 1) > data_end || l4_len < sizeof(*icmp))
		return ICMP_MALFORMED;
	type = icmp->type;
	if (type == ICMP_ECHO)
		return ICMP_PING;
	if (type != ICMP_DEST_UNREACH && type != ICMP_TIME_EXCEEDED && type != ICMP_PARAMETERPROB)
		return ICMP_NO_FLOW;
	emb = (void *)(icmp + 1);
	if ((void *)(emb + 1) > data_end || l4_len < sizeof(*icmp) + sizeof(*emb) ||
	    emb->version != 4 || emb->ihl < 5 || emb->saddr != vip)
		return ICMP_MALFORMED;
	/* A later fragment carries no ports; nor does a protocol other than
	 * TCP/UDP have a flow nilb balances: nothing to steer by. */
	if ((emb->frag_off & bpf_htons(IP_OFFSET)) ||
	    (emb->protocol != IPPROTO_TCP && emb->protocol != IPPROTO_UDP))
		return ICMP_NO_FLOW;
	emb_len = emb->ihl * 4;
	ports = (void *)emb + emb_len;
	if ((void *)(ports + 2) > data_end ||
	    sizeof(*icmp) + emb_len + 2 * sizeof(__u16) > l4_len)
		return ICMP_MALFORMED;
	flow->saddr = emb->daddr;
	flow->daddr = emb->saddr;
	flow->sport = ports[1];
	flow->dport = ports[0];
	flow->proto = emb->protocol;
	return ICMP_FLOW;
}

#endif /* NILB_ICMP_H */
