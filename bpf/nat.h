/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * nat.h: NAT mode on the backends (docs/design.md "NAT mode"). A service
 * with `mode: nat` needs no address on the backends: a backend that accepts
 * one of its packets rewrites the destination from the service address and
 * port to its own address (cfg->node_addr) and the service's listening port
 * (nilb_service.nat_port), and records the flow in `nat_flows` as its stack
 * sees it; its egress program gives the replies (and ICMP errors about the
 * flow) the service address and port back. Second chance looks sockets up by
 * the translated tuple. No netfilter, no conntrack: the only state is
 * nat_flows, one entry per flow, removed by the control plane once the
 * flow's TCP socket is gone (or, UDP, after nat.udp_timeout of silence).
 *
 * Rules, each with its counter:
 *   - a new flow whose translated 4-tuple is a live TCP socket here (a
 *     direct connection to this node from the same client address and port)
 *     or another service's live NAT flow is a collision: its packet is
 *     dropped (C_NAT_DROP_COLLISION), never merged into the other
 *     connection; so is a direct packet to this node whose 4-tuple
 *     nat_flows holds, unless it is a TCP SYN and the translated
 *     connection no longer owns a socket (then its entry goes:
 *     nat_direct_check);
 *   - a new flow when nat_flows is full: its packet is dropped
 *     (C_NAT_DROP_TABLE_FULL); flows already tracked are unaffected.
 * A service whose address is this node's own and whose port is its listening
 * port needs no translation here (its packets are already what the stack
 * expects): nothing is rewritten or tracked for it on this node.
 *
 * Checksums: XDP rewrites in place with RFC 1624 updates (no skb yet); TC
 * uses bpf_l3/l4_csum_replace for TCP and UDP, which keep a CHECKSUM_PARTIAL
 * (egress) or CHECKSUM_COMPLETE (ingress) skb right, and updates ICMP
 * errors in place (every change lies inside the ICMP message and its
 * checksum balances it).
 */
#ifndef NILB_NAT_H
#define NILB_NAT_H

#include "common.h"
#include "icmp.h"

/* Why nat_track refuses a flow (its counter is counted). */
enum nat_refusal {
	NAT_COLLISION = -1, /* C_NAT_DROP_COLLISION */
	NAT_FULL = -2,      /* C_NAT_DROP_TABLE_FULL */
};

/* Returns: non-zero if packets of svc (whose address and port are vip and
 * port, network order) are translated on this node (node: its address):
 * a NAT-mode service, unless it is this node's own address and port. */
static __always_inline int nat_active(const struct nilb_service *svc, __u32 vip, __u16 port,
				      __u32 node)
{
	return svc && (svc->flags & NILB_SVC_F_NAT) && (vip != node || svc->nat_port != port);
}

/* Returns: non-zero if some NAT-mode service listens on `port` (network
 * order) on the backends (nat_ports). */
static __always_inline int nat_port_listed(__u16 port)
{
	__u32 p = bpf_ntohs(port), word = p >> 6;
	__u64 *bits = bpf_map_lookup_elem(&nat_ports, &word);

	return bits && ((*bits >> (p & 63)) & 1);
}

/* Returns: the coarse monotonic clock in seconds (nilb_nat_flow.seen_s). */
static __always_inline __u32 nat_now_s(void)
{
	return bpf_ktime_get_coarse_ns() / 1000000000ULL;
}

/* The nat_flows key of flow f as this node's stack sees it (f: client ->
 * this node's address and listening port, already translated). */
static __always_inline void nat_key_of(struct nilb_nat_key *k, const struct flow4 *f)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->client = f->saddr;
	k->local = f->daddr;
	k->client_port = f->sport;
	k->local_port = f->dport;
	k->proto = f->proto;
}

/*
 * Flow f (translated: client -> this node's address and listening port) of
 * the service (vip, port) is accepted here: refresh its nat_flows entry, or
 * create it. A flow without an entry whose translated tuple a live TCP
 * socket already has (an owning state) belongs to a direct connection: a
 * collision, whatever the packet (a forged segment or ICMP error must not
 * make a direct connection's replies leave with the service's address); a
 * TIME_WAIT socket's flow is over and may be taken. ctx: the program's
 * context (XDP or TC), for the socket lookup.
 * Returns: 0, or enum nat_refusal (counted; the caller drops the packet).
 */
static __always_inline int nat_track(void *ctx, const struct flow4 *f, __u32 vip, __u16 port,
				     int syn)
{
	struct nilb_nat_flow *v, nv;
	struct nilb_nat_key k;
	__u32 now = nat_now_s();

	nat_key_of(&k, f);
	v = bpf_map_lookup_elem(&nat_flows, &k);
	if (v) {
		if (v->vip != vip || v->port != port) {
			/* Another service's flow of this tuple: over unless its
			 * socket still owns packets; a new connection takes the
			 * entry over. */
			if (!syn || f->proto != IPPROTO_TCP || tcp_flow_owned(ctx, (struct flow4 *)f)) {
				count(C_NAT_DROP_COLLISION);
				return NAT_COLLISION;
			}
			v->vip = vip;
			v->port = port;
		}
		if (v->seen_s != now)
			v->seen_s = now;
		return 0;
	}
	if (f->proto == IPPROTO_TCP && tcp_flow_owned(ctx, (struct flow4 *)f)) {
		count(C_NAT_DROP_COLLISION);
		return NAT_COLLISION;
	}
	__builtin_memset(&nv, 0, sizeof(nv));
	nv.vip = vip;
	nv.port = port;
	nv.seen_s = now;
	if (bpf_map_update_elem(&nat_flows, &k, &nv, BPF_NOEXIST) == 0) {
		count(C_NAT_NEW_FLOW);
		return 0;
	}
	/* Another CPU created it first (EEXIST), or the map is full. */
	v = bpf_map_lookup_elem(&nat_flows, &k);
	if (v) {
		if (v->vip == vip && v->port == port)
			return 0;
		count(C_NAT_DROP_COLLISION);
		return NAT_COLLISION;
	}
	count(C_NAT_DROP_TABLE_FULL);
	return NAT_FULL;
}

/*
 * A packet that reaches this node's stack untranslated (a direct packet to
 * this node, or one of a NAT service on this node's own address and port),
 * flow f (TCP or UDP, destination this node's address): it must not join a
 * translated flow of the same 4-tuple. A TCP SYN (without ACK) whose entry
 * is left over from a translated connection that no longer owns a socket
 * here (TIME_WAIT, or gone) removes the entry: a new connection starts,
 * and its replies must not be translated. Only ports in nat_ports are
 * looked up. A UDP datagram removes the entry (C_NAT_UDP_SWITCHED): the
 * replies follow the latest request's way. ctx: the program's context (XDP
 * or TC).
 * Returns: non-zero to drop the packet (counted: C_NAT_DROP_COLLISION).
 */
static __always_inline int nat_direct_check(void *ctx, struct flow4 *f, int syn)
{
	struct nilb_nat_key k;

	if (!nat_port_listed(f->dport))
		return 0;
	nat_key_of(&k, f);
	if (!bpf_map_lookup_elem(&nat_flows, &k))
		return 0;
	if (syn && f->proto == IPPROTO_TCP && !tcp_flow_owned(ctx, f)) {
		bpf_map_delete_elem(&nat_flows, &k);
		return 0;
	}
	/* UDP has no connection to tell the older flow: the latest request
	 * decides the way its replies take (request/response protocols, DNS,
	 * NTP, answer each request as it came). */
	if (f->proto == IPPROTO_UDP) {
		bpf_map_delete_elem(&nat_flows, &k);
		count(C_NAT_UDP_SWITCHED);
		return 0;
	}
	count(C_NAT_DROP_COLLISION);
	return 1;
}

/* A packet to this node that no service takes (iph: its IPv4 header,
 * within the frame; node: this node's address): nat_direct_check for a
 * TCP or UDP one (first fragments included; later ones have no ports).
 * Returns: non-zero to drop it (counted). */
static __always_inline int nat_direct_drop(void *ctx, const struct iphdr *iph, void *data_end,
					   __u32 node)
{
	struct flow4 f;
	__u8 *l4;
	int syn = 0;

	if (iph->daddr != node || iph->ihl < 5 || (iph->frag_off & bpf_htons(IP_OFFSET)) ||
	    (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP))
		return 0;
	l4 = (void *)iph + iph->ihl * 4;
	if ((void *)(l4 + 4) > data_end)
		return 0;
	__builtin_memset(&f, 0, sizeof(f));
	f.saddr = iph->saddr;
	f.daddr = iph->daddr;
	f.sport = *(__u16 *)l4;
	f.dport = *(__u16 *)(l4 + 2);
	f.proto = iph->protocol;
	/* TCP flags: byte 13; a SYN (0x02) without ACK (0x10). A TCP header
	 * cut short counts as no SYN (the stack drops it anyway). */
	if (iph->protocol == IPPROTO_TCP && (void *)(l4 + 14) <= data_end)
		syn = (l4[13] & 0x12) == 0x02;
	return nat_direct_check(ctx, &f, syn);
}

/* XDP, ingress: the destination of a TCP segment (iph, th: checked headers
 * in the frame) becomes this node's address and listening port, both
 * checksums updated in place (RFC 1624).
 * Returns: nothing. */
static __always_inline void nat_xdp_tcp_in(struct iphdr *iph, struct tcphdr *th, __u32 node,
					   __u16 nat_port)
{
	__u32 old = iph->daddr;

	th->check = csum_replace2(csum_replace4(th->check, old, node), th->dest, nat_port);
	th->dest = nat_port;
	iph->check = csum_replace4(iph->check, old, node);
	iph->daddr = node;
}

/*
 * TC: rewrite one end of a TCP or UDP packet (IPv4 header at ip_off, L4
 * header at l4_off): the source (egress) or destination (ingress) address
 * from..to and port from_port..to_port, with bpf_l3/l4_csum_replace (a
 * UDP checksum of 0, none, stays 0).
 * Returns: 0, or a helper's negative error (the caller drops the packet).
 */
static __always_inline int nat_tc_l4(struct __sk_buff *skb, __u32 ip_off, __u32 l4_off, __u8 proto,
				     int egress, __u32 from, __u32 to, __u16 from_port, __u16 to_port)
{
	/* Byte offsets as constants: offsetof on the CO-RE types of
	 * vmlinux.h would be relocated. iphdr: check 10, saddr 12, daddr 16;
	 * tcphdr.check 16; udphdr.check 6. */
	__u32 addr_off = ip_off + (egress ? 12 : 16);
	__u32 port_off = l4_off + (egress ? 0 : 2);
	__u32 csum_off = l4_off + (proto == IPPROTO_TCP ? 16 : 6);
	__u64 mangled = proto == IPPROTO_UDP ? BPF_F_MARK_MANGLED_0 : 0;
	int err;

	err = bpf_l4_csum_replace(skb, csum_off, from, to, BPF_F_PSEUDO_HDR | mangled | 4);
	if (!err)
		err = bpf_l3_csum_replace(skb, ip_off + 10, from, to, 4);
	if (!err)
		err = bpf_skb_store_bytes(skb, addr_off, &to, 4, 0);
	if (!err && from_port != to_port) {
		err = bpf_l4_csum_replace(skb, csum_off, from_port, to_port, mangled | 2);
		if (!err)
			err = bpf_skb_store_bytes(skb, port_off, &to_port, 2, 0);
	}
	return err;
}

/*
 * An ICMP error about a NAT flow (ip: its IPv4 header, checked, within the
 * frame): on egress (from this node) the outer source, the quoted
 * destination and port change from this node's (from, from_port) to the
 * service's (to, to_port); on ingress (toward this node) the outer
 * destination, the quoted source and port from the service's to this
 * node's. The quoted IPv4 checksum, the quoted TCP/UDP checksum (when the
 * quote holds it; a UDP 0 stays 0) and the ICMP checksum are updated in
 * place (RFC 1624).
 * Returns: 0, or -1 if the quote is cut short (nothing changed).
 */
static __always_inline int nat_icmp(struct iphdr *ip, void *data_end, int egress, __u32 from,
				    __u32 to, __u16 from_port, __u16 to_port)
{
	struct icmphdr *icmp = (void *)ip + ip->ihl * 4;
	struct iphdr *q;
	__u16 *ports, *l4check = NULL, sum;
	__u32 *qaddr;

	if ((void *)(icmp + 1) > data_end)
		return -1;
	q = (void *)(icmp + 1);
	if ((void *)(q + 1) > data_end || q->ihl < 5)
		return -1;
	ports = (void *)q + q->ihl * 4;
	if ((void *)(ports + 2) > data_end)
		return -1;
	if (q->protocol == IPPROTO_TCP && (void *)(ports + 9) <= data_end)
		l4check = ports + 8; /* struct tcphdr.check, byte 16 */
	else if (q->protocol == IPPROTO_UDP && (void *)(ports + 4) <= data_end && ports[3])
		l4check = ports + 3; /* struct udphdr.check, byte 6 */

	/* Outer header: its own checksum. */
	if (egress) {
		ip->check = csum_replace4(ip->check, ip->saddr, to);
		ip->saddr = to;
	} else {
		ip->check = csum_replace4(ip->check, ip->daddr, to);
		ip->daddr = to;
	}
	/* The quote: every change is also one of the ICMP message's words. */
	qaddr = egress ? &q->daddr : &q->saddr;
	sum = csum_replace4(q->check, from, to);
	icmp->checksum = csum_replace2(csum_replace4(icmp->checksum, from, to), q->check, sum);
	q->check = sum;
	*qaddr = to;
	if (l4check) {
		sum = csum_replace2(csum_replace4(*l4check, from, to), from_port, to_port);
		if (q->protocol == IPPROTO_UDP && !sum)
			sum = 0xffff;
		icmp->checksum = csum_replace2(icmp->checksum, *l4check, sum);
		*l4check = sum;
	}
	icmp->checksum = csum_replace2(icmp->checksum, from_port, to_port);
	ports[egress ? 1 : 0] = to_port;
	return 0;
}

#endif /* NILB_NAT_H */
