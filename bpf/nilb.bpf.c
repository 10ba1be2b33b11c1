// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * nilb data plane: the XDP balancer and the TC second-chance program, in one
 * object so that they share maps. Packet rules: docs/design.md "Packet path",
 * "Balancer (XDP)" and "Second chance (TC)". Headers, one per concern:
 *
 *   nilb.h    map keys and values, counters, limits (shared with Rust)
 *   maps.h    the maps
 *   common.h  constants, flow tuple, counters, configuration and service
 *             lookups, checksum and MAC helpers
 *   gue.h     GUE: written by the balancer; parsed, hop list and forward
 *             rewrite for second chance
 *   icmp.h    ICMP to a VIP -> the flow it is about (errors), echo, none
 *   hash.h    the flow hash (twin of src/hash.rs)
 *   too_big.h the balancer's ICMP "fragmentation needed" reply to packets
 *             too big for the encapsulation
 *   quic_lb.h QUIC-LB: the server ID in a QUIC connection ID (parse,
 *             plaintext and AES decoding; twin of src/quic_lb.rs)
 *   filter.h  edge filters: deny and allow lists, rate limits
 *   xdp_decap.h GUE for this node decapsulated in XDP, before GRO
 *   ipv6.h    IPv6: flow tuple, extension headers, ICMPv6 to a VIP
 *
 * XDP balancer (nilb_xdp_balancer), on nodes that receive VIP traffic:
 *   IPv4 TCP/UDP to a configured (VIP, port, protocol) -> flow hash -> bucket
 *   of the service's region of the pool -> GUE to the bucket's first hop,
 *   listing its previous owners (and for UDP the first hop again after
 *   them). A QUIC packet to a service with quic_lb whose connection ID
 *   carries a known server ID goes to that backend instead, no bucket
 *   involved. ICMP errors about a VIP flow are hashed on the quoted flow.
 *   Fragments and malformed packets to a VIP are dropped; packets too big
 *   for the encapsulation are answered with ICMP "fragmentation needed"
 *   (DF) or dropped. Everything else passes untouched. Edge filters (when
 *   loaded) drop what the operator names: the global stage before the
 *   service lookup (every IPv4 packet but cluster addresses), the service
 *   stage after it.
 *
 * TC second chance (nilb_tc_second_chance), clsact ingress on every node:
 *   GUE for this node from a cluster address -> decapsulate if the inner
 *   packet opens or belongs to a local connection, else forward to the next
 *   listed hop; at the last hop, unknown_flow decides (drop, local, or a
 *   RST from the VIP). Everything else passes untouched.
 *
 * XDP before GRO (bpf/xdp_decap.h), in the balancer's program and in
 * nilb_xdp_backend on the other nodes: GUE for this node whose inner packet
 * is a TCP SYN or belongs to a local socket is decapsulated in XDP, so that
 * GRO merges the inner stream; all other GUE goes to TC untouched. A
 * balancer that is a flow's first hop passes such packets on without GUE.
 */
#include "common.h"
#include "gue.h"
#include "icmp.h"
#include "hash.h"
#include "too_big.h"
#include "filter.h"
#include "xdp_decap.h"
#include "ipv6.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- XDP balancer -------------------------------------------------------- */

/* Hand a GUE packet built here (eth: its Ethernet header) to our own TC
 * program (XDP_PASS), marked with the hand-off mark as its source MAC
 * (struct nilb_handoff) so that TC can tell it from a forged packet
 * claiming this node's address. TC sends a slow-path packet out of the
 * interface the FIB gives it (tc_slow_path_ifindex).
 * Returns: XDP_PASS (not counted: the caller counts the verdict), or
 * XDP_DROP while the daemon has not written the mark (counted:
 * C_XDP_DROP_NO_META). */
static __always_inline int xdp_to_tc(struct ethhdr *eth)
{
	const __u16 *mark = get_handoff();
	__u16 *src = (__u16 *)eth->h_source;

	if (!mark) {
		count(C_XDP_DROP_NO_META);
		return XDP_DROP;
	}
	src[0] = mark[0];
	src[1] = mark[1];
	src[2] = mark[2];
	return XDP_PASS;
}

/*
 * Service lookup and hash of a flow (client -> VIP).
 * Returns: the service's bucket array, with *hash set to the flow hash; or
 * NULL if the flow is for no service.
 */
static __always_inline struct nilb_service *xdp_flow_service(const struct flow4 *flow,
							      __u32 seed, __u32 *hash)
{
	struct nilb_service *svc = service_cached(flow->daddr, flow->dport, flow->proto);

	if (svc)
		*hash = nilb_flow_hash(flow->saddr, flow->daddr, flow->sport, flow->dport,
				       flow->proto, seed);
	return svc;
}

/*
 * xdp_flow_service of a TCP or UDP packet (iph; l4: its L4 header, whose
 * first 4 bytes, the ports in both, are checked to lie in the packet).
 * Callers pass proto as a constant, so that the hash folds it.
 * Returns: as xdp_flow_service.
 */
static __always_inline struct nilb_service *xdp_l4_service(const struct iphdr *iph, const __u16 *ports,
					    __u8 proto, __u32 seed, __u32 *hash)
{
	struct flow4 flow = {
		.saddr = iph->saddr,
		.daddr = iph->daddr,
		.sport = ports[0],
		.dport = ports[1],
		.proto = proto,
	};

	return xdp_flow_service(&flow, seed, hash);
}

/* Returns: non-zero if a TCP or UDP packet to daddr is this node's own
 * traffic and can be no service's: daddr is this node's address (IPv4
 * cluster network) and no service is in NAT mode, the only mode in which
 * a node's own address may be a service address (the config refuses it
 * otherwise). Such packets pass without a service lookup. */
static __always_inline int xdp_own_traffic(const struct nilb_config *cfg, __u32 daddr)
{
	return daddr == cfg->node_addr && daddr && !(cfg->flags & NILB_F_NAT);
}

/* The hops a bucket gives a flow. A hop is named by its IPv4 address
 * (network order) on an IPv4 cluster network, by its backend slot on an
 * IPv6 one (c6: the programs built for it), whose 16-byte address gue_write6
 * reads from `backends`. */
struct xdp_hops {
	__u32 first;     /* the first hop, non-zero */
	/* Hops listed in GUE: the bucket's previous owners
	 * newest first (without the first hop, each once), and for UDP, when
	 * any is listed, the first hop again after them (docs/design.md
	 * "Second chance (TC)"). */
	__u32 list[NILB_TX_HOPS];
	__u32 nhops;     /* entries of list used */
	__u32 slot;      /* backend slot of (service, first hop) */
	__u32 overhead;  /* GUE bytes with the hops listed: gue_overhead_of(nhops, c6) */
	/* The balancer's counters of the first hop (backend_stats[slot]),
	 * bumped once the packet is on its way; NULL if the slot has none. */
	struct nilb_backend_stats *stats;
	/* Set by xdp_next_hop for an IPv6 packet too big for the wire (it
	 * then returns XDP_NEXT_HOP_TOO_BIG6): the MTU it met. */
	__u32 mtu;
	/* The frame's own MACs (destination, source), saved before the
	 * encapsulation. Here, not in a local of the entry programs: in the
	 * struct's tail they take 8 bytes less of its frame, which keeps
	 * every call chain within 512 bytes of stack on kernels that round
	 * each frame up to 32 bytes (6.1; newer ones round to 16). */
	__u8 macs[2 * ETH_ALEN];
};

/* xdp_next_hop's answer for an IPv6 packet too big for the wire (not an XDP
 * verdict): the IPv6 program answers it with xdp_too_big6 from its own
 * frame (three frames deep the stack would exceed the verifier's limit). */
#define XDP_NEXT_HOP_TOO_BIG6 0x100

/* Returns: the name of backend slot `slot` as a hop (struct xdp_hops): its
 * IPv4 address (network order), or on an IPv6 cluster network (c6) the
 * slot itself if it has an IPv6 address; 0 if the slot has no address. */
static __always_inline __u32 backend_addr(__u32 slot, int c6)
{
	struct nilb_backend *be = bpf_map_lookup_elem(&backends, &slot);

	if (c6)
		return be && be->family == NILB_FAMILY_IPV6 ? slot : 0;
	return be ? be->addr[0] : 0;
}

/* Add `prev` (a hop, 0: none) to the hops listed in *l (l[0..2],
 * filled in order, 0 after the last) unless it is 0, the first hop or
 * listed already. Constant indexes only: the verifier refuses a stack
 * write at a variable offset of this shape. */
static __always_inline void list_once(__u32 *l, __u32 first, __u32 prev)
{
	if (!prev || prev == first || prev == l[0] || prev == l[1])
		return;
	if (!l[0])
		l[0] = prev;
	else if (!l[1])
		l[1] = prev;
	else
		l[2] = prev;
}

/*
 * The hops listed for a bucket whose previous owners' slots are `chain`
 * (hops[1..] in its low 48 bits), first hop
 * `first`: the previous owners up to the first empty slot, newest first,
 * each once and none equal to the first hop (slots without an address are
 * skipped); for UDP, when any is listed, the first hop again after them.
 * Fills hops->list, nhops and overhead.
 */
static __always_inline void xdp_previous_owners(__u64 chain, __u32 first, __u8 udp,
						struct xdp_hops *hops, int c6)
{
	__u32 *l = hops->list;
	__u32 s, n;

	l[0] = l[1] = l[2] = l[3] = 0;
	_Static_assert(NILB_MAX_OWNERS == 4, "three previous owners");
	s = chain & 0xffff;
	if (s) {
		list_once(l, first, backend_addr(s, c6));
		s = (chain >> 16) & 0xffff;
		if (s) {
			list_once(l, first, backend_addr(s, c6));
			s = (chain >> 32) & 0xffff;
			if (s)
				list_once(l, first, backend_addr(s, c6));
		}
	}
	n = !!l[0] + !!l[1] + !!l[2];
	if (udp && n) {
		if (n == 1)
			l[1] = first;
		else if (n == 2)
			l[2] = first;
		else
			l[3] = first;
		n++;
	}
	hops->nhops = n;
	hops->overhead = gue_overhead_of(n, c6);
}

/*
 * Bucket lookup: the bucket `hash` selects in service svc's region of the
 * pool. Its `bucket_first` entry first (2 bytes: the hot data of many
 * tables fits in cache); only a bucket that lists previous owners is read
 * itself, as one word (a chain written concurrently is seen whole). The
 * control plane writes the bucket before its entry, so either read gives
 * the bucket as it was before a change or as it is after. Slots are turned
 * into addresses. udp: the flow is UDP, whose packets come back to the
 * first hop when no listed hop has a connected socket for them: the first
 * hop is listed again at the end.
 * Returns: 0 with *hops filled, or -1 if there is no first hop (counted:
 * C_XDP_DROP_NO_BACKEND and the service's xdp_drops).
 */
static __always_inline int xdp_bucket(const struct nilb_service *svc, __u32 hash, __u8 udp,
				      struct xdp_hops *hops, int c6)
{
	struct nilb_bucket *b;
	__u32 idx, elem, first, slot;
	__u64 chain = 0;
	__u16 *f;

	idx = svc->table_base + (hash & svc->table_mask);
	elem = idx / NILB_FIRST_HOPS_PER_ELEM;
	f = bpf_map_lookup_elem(&bucket_first, &elem);
	slot = f ? ((volatile __u16 *)f)[idx % NILB_FIRST_HOPS_PER_ELEM] : 0;
	if (slot & NILB_FIRST_HOP_CHAIN) {
		b = bpf_map_lookup_elem(&buckets, &idx);
		chain = b ? *(volatile __u64 *)b : 0;
		slot = chain & 0xffff;
		chain >>= 16;
	}
	first = slot ? backend_addr(slot, c6) : 0;
	if (!first) {
		struct nilb_service_stats *st = service_stats_of(svc);

		if (st)
			st->xdp_drops++;
		count(C_XDP_DROP_NO_BACKEND);
		return -1;
	}
	hops->first = first;
	hops->slot = slot;
	if (!chain) {
		/* The common case: a bucket that never moved lists no hop. */
		hops->nhops = 0;
		hops->overhead = gue_overhead_of(0, c6);
	} else {
		xdp_previous_owners(chain, first, udp, hops, c6);
	}
	hops->stats = bpf_map_lookup_elem(&backend_stats, &hops->slot);
	return 0;
}

/*
 * QUIC-LB (bpf/quic_lb.h; docs/design.md "Balancer (XDP)"): for a UDP
 * packet to a service with `quic_lb` (idx: its service index; the UDP
 * payload at [off, end) of the frame), the backend whose server ID the QUIC
 * destination connection ID carries, whatever the packet's 4-tuple.
 * c6: an IPv6 cluster network (the hop is the backend's slot).
 * Returns: 0 with *hops filled (no other hop listed: the server ID names
 * the one backend that knows the connection; counted C_XDP_QUIC_ROUTED),
 * else -1: the bucket table decides, as for any UDP packet (counted by
 * outcome, nothing for a service without quic_lb).
 * Called through xdp_quic_hops, not inlined: its locals would push the
 * balancer's stack, with the edge filters' calls, over the verifier's 512
 * bytes.
 */
static __always_inline int xdp_quic_hops_of(struct xdp_md *ctx, __u32 idx, __u32 off,
					    __u32 end, struct xdp_hops *hops, const int c6)
{
	struct nilb_quic_backend *b;
	struct quic_lb_scratch *s;
	struct quic_lb_crypto *c;
	struct nilb_quic_lb *q;
	__u32 zero = 0, cid_len = 0;
	int r;

	q = bpf_map_lookup_elem(&quic_config, &idx);
	if (!q || q->algorithm == NILB_QUIC_OFF)
		return -1;
	s = bpf_map_lookup_elem(&quic_scratch, &zero);
	if (!s)
		return -1;
	switch (quic_lb_cid(ctx, off, end, q, s, &cid_len)) {
	case QUIC_CID_FOUND:
		break;
	case QUIC_CID_INITIAL:
		count(C_XDP_QUIC_INITIAL);
		return -1;
	default:
		count(C_XDP_QUIC_UNPARSEABLE);
		return -1;
	}
	c = NULL;
	if (q->algorithm != NILB_QUIC_PLAINTEXT)
		c = bpf_map_lookup_elem(&quic_crypto, &idx);
	r = quic_lb_decode(q, c ? c->ctx : NULL, s, cid_len);
	if (r == NILB_QD_NO_KEY || r == NILB_QD_CRYPTO_FAILED) {
		count(C_XDP_QUIC_NO_KEY);
		return -1;
	}
	if (r != NILB_QD_OK)
		goto unknown;
	s->key.service_index = idx;
	b = bpf_map_lookup_elem(&quic_servers, &s->key);
	if (!b || !(c6 ? backend_addr(b->slot, 1) : b->dip))
		goto unknown;
	hops->first = c6 ? b->slot : b->dip;
	hops->nhops = 0;
	hops->overhead = gue_overhead_of(0, c6);
	hops->slot = b->slot;
	hops->stats = bpf_map_lookup_elem(&backend_stats, &hops->slot);
	count(C_XDP_QUIC_ROUTED);
	return 0;
unknown:
	count(C_XDP_QUIC_UNKNOWN);
	return -1;
}

/* xdp_quic_hops_of as a subprogram (over an IPv4 cluster network, or with
 * c6 over an IPv6 one: a subprogram takes five arguments at most). */
static __noinline int xdp_quic_hops4(struct xdp_md *ctx, __u32 idx, __u32 off, __u32 end,
				     struct xdp_hops *hops)
{
	return xdp_quic_hops_of(ctx, idx, off, end, hops, 0);
}

static __noinline int xdp_quic_hops6(struct xdp_md *ctx, __u32 idx, __u32 off, __u32 end,
				     struct xdp_hops *hops)
{
	return xdp_quic_hops_of(ctx, idx, off, end, hops, 1);
}

/* Returns: as xdp_quic_hops_of, through the subprogram for c6. */
static __always_inline int xdp_quic_hops(struct xdp_md *ctx, __u32 idx, __u32 off, __u32 end,
					 struct xdp_hops *hops, const int c6)
{
	return c6 ? xdp_quic_hops6(ctx, idx, off, end, hops)
		  : xdp_quic_hops4(ctx, idx, off, end, hops);
}

/*
 * Encapsulation: cut Ethernet padding so that the inner packet is exactly
 * inner_len bytes (frame_len: the frame as received, eth its checked
 * Ethernet header), make room in front and write outer IPv4, UDP and GUE to
 * hops->first, listing hops->nhops hops (gue_write). macs
 * receives the frame's destination and source MACs.
 * inner_proto: GUE_PROTO_IPV4 or GUE_PROTO_IPV6. c6: an IPv6 cluster
 * network: outer IPv6 from this node's config6 address (gue_write6).
 * The outer UDP checksum by LCO (gue.h).
 * Returns: the new Ethernet header (MACs still to write), or NULL if the
 * packet could not be resized (counted: C_XDP_DROP_ADJUST_FAILED).
 */
static __always_inline struct ethhdr *xdp_encap(struct xdp_md *ctx, struct ethhdr *eth,
						const struct nilb_config *cfg,
						const struct xdp_hops *hops, __u32 hash,
						__u32 inner_len, __u32 frame_len, __u8 *macs,
						__u8 inner_proto, int c6)
{
	struct nilb_backend *be;
	void *data_end;
	__u32 *node6;

	copy_macs(macs, eth);
	if (frame_len > sizeof(*eth) + inner_len &&
	    bpf_xdp_adjust_tail(ctx, (int)(sizeof(*eth) + inner_len) - (int)frame_len)) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return NULL;
	}
	if (bpf_xdp_adjust_head(ctx, -(int)hops->overhead)) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return NULL;
	}
	eth = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (c6) {
		/* The hops are checked one by one: with 16 bytes each, a short
		 * inner packet leaves no room for those not listed. */
		node6 = get_node6();
		be = bpf_map_lookup_elem(&backends, &hops->slot);
		if (!node6 || !be ||
		    (void *)eth + sizeof(*eth) + NILB_GUE6_BASE_OVERHEAD > data_end ||
		    gue_write6(eth, data_end, cfg, node6, be->addr, hops->list, hops->nhops, hash,
			       inner_len, inner_proto)) {
			count(C_XDP_DROP_ADJUST_FAILED);
			return NULL;
		}
		return eth;
	}
	/* Outer headers + GUE with NILB_TX_HOPS hops: always there after
	 * adjust_head succeeded (the inner packet has at least 20 bytes of
	 * IPv4 and 8 of L4, more than the 4 of each hop not listed). Only the
	 * verifier needs this check; should it ever fail, the drop is counted
	 * like a failed resize. */
	if ((void *)eth + sizeof(*eth) + NILB_GUE_BASE_OVERHEAD + 4 * NILB_TX_HOPS > data_end) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return NULL;
	}
	gue_write(eth, data_end, cfg, hops->first, hops->list, hops->nhops, hash, inner_len,
		  inner_proto);
	return eth;
}

/* What the balancer knows of the inner packet when it picks the next hop:
 * bits of xdp_next_hop's `what`. */
enum xdp_what {
	/* A TCP SYN without ACK (a new connection, for backend_stats). */
	WHAT_SYN = 1,
	/* An ICMP error balanced like the flow it quotes. */
	WHAT_ICMP = 2,
	/* The inner packet is IPv6. */
	WHAT_IPV6 = 4,
};

/* A packet is on its way: count `counter`, and for its first hop
 * (backend_stats: only what is sent counts) and, if ICMP, in
 * C_XDP_ICMP_FORWARDED. inner_len: its L3 bytes; what: enum xdp_what.
 * Returns: verdict. */
static __always_inline int xdp_sent(const struct xdp_hops *hops, __u32 inner_len, __u32 what,
				    __u32 counter, int verdict)
{
	struct nilb_backend_stats *bs = hops->stats;

	count(counter);
	if (bs) {
		bs->packets++;
		bs->bytes += inner_len;
		bs->syns += what & WHAT_SYN;
	}
	if (what & WHAT_ICMP)
		count(C_XDP_ICMP_FORWARDED);
	return verdict;
}

/*
 * This node is the first hop of the packet just encapsulated (overhead:
 * the GUE bytes in front of the inner packet; macs: the frame's own
 * MACs). If TC's first rule accepts the inner packet here (a TCP SYN
 * without ACK, or a local socket owns the flow; xdp_tcp_accepts), TC would
 * only take the GUE off again: take it off now and pass the packet as it
 * came, counted in the service's tc_decap (a NAT-mode service's translated
 * to this node's address `node` and listening port). Checked here, after
 * the encapsulation, so that packets for other hops pay nothing for it.
 * Returns: 0 if the packet is to pass without GUE (not counted: the caller
 * counts C_XDP_LOCAL_DIRECT), -1 if TC is to have it (nothing changed), 1
 * if the kernel refused to resize it (counted: C_XDP_DROP_ADJUST_FAILED;
 * never seen; the frame is no longer the one the caller checked), 2 for a
 * NAT collision or a full nat_flows (counted; nothing changed).
 */
static __always_inline int xdp_local_direct(struct xdp_md *ctx, __u32 overhead, const __u8 *macs,
					    __u32 node)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_service_stats *st = NULL;
	struct nilb_service *svc;
	struct ethhdr *eth;
	struct tcphdr *th;
	struct iphdr *in;
	int nat, verdict;

	if (overhead > gue_overhead_of(NILB_TX_HOPS, 1))
		return -1; /* never: the verifier needs the bound */
	/* The bound again on the register that is added (a no-op: at most
	 * 120 already): clang may reload overhead from the stack for the
	 * addition, and 6.1's verifier does not carry the check over to the
	 * reloaded copy ("invalid access to packet"). */
	barrier_var(overhead);
	overhead &= 0x7f;
	in = data + sizeof(struct ethhdr) + overhead;
	/* IPv6 is TC's (tc_gue_ipv6). */
	if ((void *)(in + 1) > data_end || in->version != 4 || in->protocol != IPPROTO_TCP)
		return -1;
	th = (void *)in + in->ihl * 4;
	if ((void *)(th + 1) > data_end)
		return -1;
	svc = service_cached(in->daddr, th->dest, IPPROTO_TCP);
	verdict = xdp_tcp_accepts(ctx, in, th, svc, node, &nat);
	if (verdict == -2)
		return 2;
	if (verdict < 0)
		return -1;
	if (svc)
		st = service_stats_of(svc);
	if (bpf_xdp_adjust_head(ctx, (int)overhead)) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return 1;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) <= data_end) {
		copy_macs(eth, macs);
		eth->h_proto = bpf_htons(ETH_P_IP);
	}
	if (nat && svc) {
		in = (void *)(eth + 1);
		if ((void *)(in + 1) > data_end)
			return 0; /* checked before; the verifier needs it */
		th = (void *)in + in->ihl * 4;
		if ((void *)(th + 1) > data_end)
			return 0;
		nat_xdp_tcp_in(in, th, node, svc->nat_port);
		count(C_NAT_IN);
	}
	if (st)
		st->tc_decap++;
	return 0;
}

/* Does an IPv4 packet of len bytes exceed the MTU of the receiving
 * interface (the wire our TC sends on: slow path with forwarding off, and
 * second chance)? Sets *mtu to that MTU if so.
 * Returns: non-zero if it does. */
static __always_inline int xdp_wire_too_big(struct xdp_md *ctx, __u32 len, __u32 *mtu)
{
	__u32 mtu_len = len;

	if (bpf_check_mtu(ctx, 0, &mtu_len, 0, 0) != BPF_MTU_CHK_RET_FRAG_NEEDED)
		return 0;
	*mtu = mtu_len;
	return 1;
}

/*
 * Next hop of an encapsulated packet (eth; inner_len L3 bytes inside GUE
 * for hops->first): our own TC program if this node is the first hop; else
 * this CPU's hop cache entry of the slot if it is fresh; else a FIB lookup
 * (which refreshes the entry); without a neighbour entry or with forwarding
 * off, the slow path through our TC program, which sends it out of the
 * interface its FIB lookup chooses (or the receiving one). Packets that go
 * up to TC keep the destination MAC they came with (macs) and carry the
 * hand-off mark as their source MAC (xdp_to_tc); the others get the next
 * hop's MACs.
 *
 * Every way checks the MTU the packet will meet: the FIB's (route or
 * interface MTU, checked also before it looks for a neighbour); the
 * cache's (outer lengths up to max_len fit; longer ones than the MTU the
 * FIB reported are too big; the common case is one compare); the
 * receiving interface's where our TC sends it on (forwarding off; a local
 * first hop with a hop listed, which TC may forward). Too big: xdp_too_big.
 * Sent packets count for their first hop (backend_stats) and, if ICMP, in
 * C_XDP_ICMP_FORWARDED; what: enum xdp_what bits. c6: an IPv6 cluster
 * network (hops are slots; the hop's address, the cache's check and the
 * FIB lookup are IPv6).
 * Returns: the XDP verdict (counted).
 */
static __always_inline int xdp_next_hop(struct xdp_md *ctx, struct ethhdr *eth,
					const struct nilb_config *cfg, struct xdp_hops *hops,
					__u32 inner_len, __u32 what, const __u8 *macs, int c6)
{
	__u32 first = hops->first, in = ctx->ingress_ifindex;
	__u32 overhead = hops->overhead;
	__u32 out_len = inner_len + overhead;
	__u32 counter, mtu = 0;
	__u32 *addr6 = NULL, *node6 = NULL;
	struct bpf_fib_lookup fib;
	struct nilb_hop_cache *hc;
	int verdict, local;
	__u64 now;

	if (c6) {
		struct nilb_backend *be = bpf_map_lookup_elem(&backends, &hops->slot);

		node6 = get_node6();
		if (!be || !node6) {
			/* Never: slots lie within the map; for the verifier. */
			count(C_XDP_DROP_NO_ROUTE);
			return XDP_DROP;
		}
		addr6 = be->addr;
		local = addr6_eq(addr6, node6);
	} else {
		local = first == cfg->node_addr;
	}
	if (local) {
		/* This node is the first hop: a packet TC would accept at once
		 * goes to the stack as it came; else hand the GUE packet to our
		 * own TC program, which applies second chance like on any
		 * backend. */
		verdict = xdp_local_direct(ctx, overhead, macs, cfg->node_addr);
		if (verdict == 0)
			return xdp_sent(hops, inner_len, what, C_XDP_LOCAL_DIRECT, XDP_PASS);
		if (verdict > 0)
			return XDP_DROP;
		if (hops->nhops && xdp_wire_too_big(ctx, out_len, &mtu))
			goto too_big;
		copy_macs(eth, macs);
		counter = C_XDP_ENCAP_LOCAL;
		goto to_tc;
	}

	/* Most packets reuse the hop's recent FIB answer: a FIB and
	 * neighbour lookup costs more than all the rest of the path. */
	now = bpf_jiffies64();
	hc = bpf_map_lookup_elem(&hop_cache, &hops->slot);
	if (!hc) {
		/* Slots lie within the map: only the verifier needs this. */
		count(C_XDP_DROP_NO_ROUTE);
		return XDP_DROP;
	}
	if ((c6 ? addr6_eq(hc->hop, addr6) : hc->hop[0] == first) && hc->in_ifindex == in &&
	    hc->expires > now) {
		if (out_len <= hc->max_len)
			goto wire;
		if (hc->mtu) {
			mtu = hc->mtu;
			goto too_big;
		}
	}

	__builtin_memset(&fib, 0, sizeof(fib));
	fib.l4_protocol = IPPROTO_UDP;
	fib.tot_len = out_len;
	fib.ifindex = in;
	if (c6) {
		fib.family = AF_INET6;
		addr6_copy(fib.ipv6_src, node6);
		addr6_copy(fib.ipv6_dst, addr6);
	} else {
		fib.family = AF_INET;
		fib.ipv4_src = cfg->node_addr;
		fib.ipv4_dst = first;
	}
	switch (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0)) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		/* A fresh entry for the hop held a smaller max_len (else it had
		 * answered): this length is the new one. */
		if (c6)
			addr6_copy(hc->hop, addr6);
		else
			hc->hop[0] = first;
		hc->in_ifindex = in;
		hc->out_ifindex = fib.ifindex;
		hc->max_len = out_len;
		hc->mtu = 0;
		__builtin_memcpy(hc->macs, fib.dmac, ETH_ALEN);
		__builtin_memcpy(hc->macs + ETH_ALEN, fib.smac, ETH_ALEN);
		hc->expires = now + NILB_HOP_CACHE_JIFFIES;
		goto wire;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		/* XDP cannot queue a packet while ARP resolves, so the
		 * encapsulated packet goes up to our TC program, which sends it
		 * with bpf_redirect_neigh out of the interface the FIB chooses
		 * (the kernel resolves and queues). The FIB checked the MTU
		 * before it looked for the neighbour. */
		break;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		/* The FIB refuses to answer on an interface without forwarding
		 * (docs/design.md "Balancer (XDP)"): the same slow path, out of
		 * the receiving interface, whose MTU is checked here. */
		if (xdp_wire_too_big(ctx, out_len, &mtu))
			goto too_big;
		break;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		/* Longer than the route's MTU: a fresh entry remembers it, so
		 * that the next such packets are answered without the FIB. */
		mtu = fib.mtu_result;
		if ((c6 ? addr6_eq(hc->hop, addr6) : hc->hop[0] == first) &&
		    hc->in_ifindex == in && hc->expires > now) {
			hc->mtu = mtu;
			hc->max_len = mtu;
		}
		goto too_big;
	default:
		count(C_XDP_DROP_NO_ROUTE);
		return XDP_DROP;
	}
	copy_macs(eth, macs);
	counter = C_XDP_ENCAP_SLOW_PATH;
to_tc:
	if (xdp_to_tc(eth) == XDP_DROP)
		return XDP_DROP;
	return xdp_sent(hops, inner_len, what, counter, XDP_PASS);
wire:
	copy_macs(eth, hc->macs);
	if (hc->out_ifindex == in)
		return xdp_sent(hops, inner_len, what, C_XDP_ENCAP_TX, XDP_TX);
	verdict = bpf_redirect(hc->out_ifindex, 0);
	return xdp_sent(hops, inner_len, what, C_XDP_ENCAP_REDIRECT, verdict);
too_big:
	if (what & WHAT_IPV6) {
		hops->mtu = mtu;
		return XDP_NEXT_HOP_TOO_BIG6;
	}
	return xdp_too_big(ctx, mtu, overhead, what & WHAT_ICMP, macs);
}

/* Returns: non-zero if addr (four network-order words) is an IPv6 VIP.
 * A subprogram for the IPv6 program's rare paths (a packet that fails a
 * check): its key takes no room in that program's frame. */
static __noinline int xdp_vip6(const __u32 *addr)
{
	return vip6_flags(addr) >= 0;
}

/* xdp_next_hop for the IPv6 program, as a subprogram: its FIB lookup
 * argument and locals then take a frame of their own, not the IPv6
 * program's, which leaves room under the verifier's 512 bytes for the
 * QUIC-LB decoder's frame. Returns: as xdp_next_hop (for a packet too big,
 * XDP_NEXT_HOP_TOO_BIG6 with hops->mtu set). */
static __always_inline int xdp_next_hop6_of(struct xdp_md *ctx, struct xdp_hops *hops,
					    __u32 inner_len, __u32 what, const __u8 *macs, int c6)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	/* An array lookup the verifier inlines (five arguments at most). */
	struct nilb_config *cfg = get_config();

	if (!cfg || (void *)(eth + 1) > (void *)(long)ctx->data_end)
		return XDP_DROP; /* never: checked by the caller; for the verifier */
	/* WHAT_IPV6 is always set here; said again so that the compiler drops
	 * the IPv4 reply (xdp_too_big) from the IPv6 programs: its frame would
	 * take their longest call chain over 512 bytes of stack on 6.1. */
	return xdp_next_hop(ctx, eth, cfg, hops, inner_len, what | WHAT_IPV6, macs, c6);
}

/* xdp_next_hop6_of over an IPv4 cluster network. */
static __noinline int xdp_next_hop6(struct xdp_md *ctx, struct xdp_hops *hops,
				    __u32 inner_len, __u32 what, const __u8 *macs)
{
	return xdp_next_hop6_of(ctx, hops, inner_len, what, macs, 0);
}

/* xdp_next_hop6_of over an IPv6 cluster network. */
static __noinline int xdp_next_hop6_c6(struct xdp_md *ctx, struct xdp_hops *hops,
				       __u32 inner_len, __u32 what, const __u8 *macs)
{
	return xdp_next_hop6_of(ctx, hops, inner_len, what, macs, 1);
}

/*
 * The balancer's IPv6 path (docs/design.md "IPv6"): IPv6 TCP/UDP to a
 * configured IPv6 (VIP, port, protocol), and ICMPv6 errors about such a
 * flow, hashed (nilb_flow_hash6) to the service's bucket and sent in GUE
 * (protocol 41) over the IPv4 cluster network exactly as IPv4 is; too big
 * for the encapsulation: ICMPv6 Packet Too Big. Fragments, packets with
 * more than NILB_IPV6_MAX_EXT extension headers and malformed packets to a
 * VIP are dropped; everything else passes untouched. Edge filters do not
 * look at IPv6 (docs/config.md "Edge filters"). A program of its own,
 * which nilb_xdp_balancer tail-calls for IPv6 frames (ipv6_balancer): its
 * stack is its own (a subprogram's would add to the IPv4 path's, over the
 * verifier's 512 bytes), and IPv4 packets never enter it. c6: built for
 * an IPv6 cluster network (nilb_xdp_balancer6_c6): GUE in outer IPv6, and
 * GUE for this node's IPv6 address taken in (xdp_gue_receive_o6).
 * Returns: the XDP verdict (counted).
 */
static __always_inline int xdp_balancer6(struct xdp_md *ctx, const int c6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6 = (void *)(eth + 1), *emb = NULL;
	struct nilb_service *table;
	struct nilb_config *cfg;
	struct xdp_hops hops;
	__u32 l4_off = 0, tot_len, frame_len, hash, what = WHAT_IPV6, udp_len = 0;
	__u32 *saddr, *daddr;
	__u16 sport, dport;
	__u8 proto = 0, fproto;
	int verdict;
	void *l4;

	if ((void *)(ip6 + 1) > data_end) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	cfg = get_config();
	if (!cfg) {
		count(C_XDP_PASS_NO_CONFIG);
		return XDP_PASS;
	}
	saddr = (__u32 *)&ip6->saddr;
	daddr = (__u32 *)&ip6->daddr;
	/* No VIP lookup up front: the service lookup below decides for valid
	 * packets (one lookup on the VIP path); only a packet that fails a
	 * check looks its destination up in vips6 (a VIP's is dropped, any
	 * other passes to the stack, which judges it). */
	frame_len = data_end - data;
	tot_len = sizeof(*ip6) + bpf_ntohs(ip6->payload_len);
	if (ip6->version != 6 || sizeof(*eth) + tot_len > frame_len)
		goto malformed;
	switch (ipv6_walk(ip6, data_end, tot_len - sizeof(*ip6), &l4_off, &proto)) {
	case IP6_L4:
		break;
	case IP6_FRAGMENT:
		if (!xdp_vip6(daddr))
			goto not_service;
		count(C_XDP_DROP_FRAGMENT);
		return XDP_DROP;
	case IP6_TOO_MANY:
		if (!xdp_vip6(daddr))
			goto not_service;
		count(C_XDP_DROP_IPV6_EXT);
		return XDP_DROP;
	default:
		goto malformed;
	}
	if (l4_off > sizeof(*ip6) + NILB_IPV6_MAX_EXT * 2048)
		goto malformed; /* never: ipv6_walk's bound, for the verifier */
	l4 = (void *)ip6 + l4_off;

	/* The flow (client -> VIP): addresses and ports where they lie in
	 * the packet (in the quote for an ICMPv6 error). */
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end || l4_off + sizeof(*th) > tot_len ||
		    ((__u8 *)th)[12] < 5 << 4 || l4_off + (((__u8 *)th)[12] >> 4) * 4 > tot_len)
			goto malformed;
		sport = th->source;
		dport = th->dest;
		fproto = IPPROTO_TCP;
		what |= th->syn && !th->ack ? WHAT_SYN : 0;
		break;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end || l4_off + sizeof(*uh) > tot_len)
			goto malformed;
		udp_len = bpf_ntohs(uh->len);
		sport = uh->source;
		dport = uh->dest;
		fproto = IPPROTO_UDP;
		/* GUE for this node over an IPv6 cluster network: decapsulated
		 * before GRO if XDP can decide it, else TC's (xdp_decap.h). */
		if (c6 && dport == cfg->gue_port && l4_off == sizeof(*ip6)) {
			__u32 *node6 = get_node6();

			if (node6 && addr6_eq(daddr, node6))
				return xdp_gue_receive_o6(ctx);
		}
		break;
	}
	case NEXTHDR_ICMPV6:
		switch (icmp6_classify(l4, tot_len - l4_off, daddr, data_end, &emb)) {
		case ICMP_FLOW:
			break;
		case ICMP_MALFORMED:
			goto malformed;
		default: /* ICMP_PING, ICMP_NO_FLOW */
			goto not_service;
		}
		if (!emb || (void *)(emb + 1) + 4 > data_end)
			goto malformed; /* checked by icmp6_classify; for the verifier */
		saddr = (__u32 *)&emb->daddr;
		daddr = (__u32 *)&emb->saddr;
		sport = ((__u16 *)(emb + 1))[1];
		dport = ((__u16 *)(emb + 1))[0];
		fproto = emb->nexthdr;
		what |= WHAT_ICMP; /* C_XDP_ICMP_FORWARDED once sent */
		break;
	default:
		goto not_service;
	}
	table = service6_cached(daddr, dport, fproto);
	if (!table)
		goto not_service;
	/* A service's datagram: its UDP length covers the header and lies
	 * within the payload (as for IPv4). */
	if (proto == IPPROTO_UDP &&
	    (udp_len < sizeof(struct udphdr) || l4_off + udp_len > tot_len))
		goto malformed;
	hash = nilb_flow_hash6(saddr, daddr, sport, dport, fproto, cfg->hash_seed);
	/* QUIC-LB (a UDP service with quic_lb): the backend the connection
	 * ID names; else the bucket. */
	if (!(proto == IPPROTO_UDP && (table->flags & NILB_SVC_F_QUIC_LB) &&
	      xdp_quic_hops(ctx, table->service_index, (l4 - data) + sizeof(struct udphdr),
			    (l4 - data) + udp_len, &hops, c6) == 0) &&
	    xdp_bucket(table, hash, fproto == IPPROTO_UDP, &hops, c6))
		return XDP_DROP;
	eth = xdp_encap(ctx, eth, cfg, &hops, hash, tot_len, frame_len, hops.macs, GUE_PROTO_IPV6, c6);
	if (!eth)
		return XDP_DROP;
	if (c6)
		verdict = xdp_next_hop6_c6(ctx, &hops, tot_len, what, hops.macs);
	else
		verdict = xdp_next_hop6(ctx, &hops, tot_len, what, hops.macs);
	if (verdict == XDP_NEXT_HOP_TOO_BIG6)
		return xdp_too_big6(ctx, hops.mtu, hops.overhead, what & WHAT_ICMP, hops.macs);
	return verdict;

malformed:
	if (!xdp_vip6((__u32 *)&ip6->daddr))
		goto not_service;
	count(C_XDP_DROP_MALFORMED);
	return XDP_DROP;
not_service:
	count(C_XDP_PASS_NOT_SERVICE);
	return XDP_PASS;
}

/* xdp_balancer6 over an IPv4 cluster network. */
SEC("xdp")
int nilb_xdp_balancer6(struct xdp_md *ctx)
{
	return xdp_balancer6(ctx, 0);
}

/* xdp_balancer6 over an IPv6 cluster network (NILB_F_CLUSTER_IPV6): the
 * daemon puts it into ipv6_balancer in place of nilb_xdp_balancer6. */
SEC("xdp")
int nilb_xdp_balancer6_c6(struct xdp_md *ctx)
{
	return xdp_balancer6(ctx, 1);
}

/* Slot 0: the IPv6 program of the node's cluster family,
 * nilb_xdp_balancer6 or nilb_xdp_balancer6_c6, written by the daemon with
 * the node settings, before any interface is attached. Not filled by
 * libbpf at load: it would overwrite an adopted array's program of the
 * other family until the daemon wrote it back, and a restarting daemon's
 * predecessor's program serves until then. Empty (a node whose settings
 * were never written): IPv6 passes (C_XDP_PASS_NON_IP). Pinned: the kernel
 * empties a prog array when its last user reference goes, which would stop
 * IPv6 while a daemon is down. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	/* Sizes, not BTF types: the kernel takes no BTF for a prog array
	 * (libbpf would log a failed attempt at every load). */
	__uint(key_size, sizeof(__u32));
	__array(values, int(struct xdp_md *));
} ipv6_balancer SEC(".maps");

/*
 * The balancer (see the top of this file): IPv4 here, IPv6 frames
 * tail-called into ipv6_balancer. c6: built for an IPv6 cluster network
 * (nilb_xdp_balancer_c6): GUE in outer IPv6 to hops named by slot.
 * Returns: the XDP verdict (counted).
 */
static __always_inline int xdp_balancer(struct xdp_md *ctx, const int c6)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct nilb_config *cfg;
	struct xdp_hops hops;
	struct flow4 flow;
	struct iphdr *iph;
	__u32 ihl_len, tot_len, frame_len, hash = 0, what = 0;
	__u8 udp = 0;
	struct nilb_service *table;
	void *l4;

	if ((void *)(eth + 1) > data_end) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	if (eth->h_proto != bpf_htons(ETH_P_IP)) {
		if (eth->h_proto == bpf_htons(ETH_P_IPV6))
			bpf_tail_call(ctx, &ipv6_balancer, 0);
		/* Not IP (or the IPv6 program missing: never, libbpf fills the
		 * slot at load). */
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	/* Without its configuration the balancer does nothing to IPv4, not
	 * even drop fragments or malformed packets to VIPs (nor filter). */
	cfg = get_config();
	if (!cfg) {
		count(C_XDP_PASS_NO_CONFIG);
		return XDP_PASS;
	}
	/* Edge filters, global stage: every IPv4 frame, VIP or not, before
	 * anything else is looked at (a denied source costs as little as
	 * possible). Most sources are in no list: their /24's flat entry,
	 * read here, is 0. A /24 a live rule denies, the common case of a
	 * list, is dropped right here. */
	if (cfg->flags & NILB_F_FILTER_ANY_GLOBAL) {
		__u32 flags = cfg->flags, entry = 0;

		if (flags & NILB_F_FILTER_GLOBAL_LIST)
			entry = filter_flat_entry(filter_gen(flags), iph->saddr);
		if (entry) {
			__u32 v = filter_global_verdict(flags, iph->saddr, entry);

			if (v && !(v & ~(__u32)NILB_FV_RULE_MASK)) {
				filter_count(v, bpf_ntohs(iph->tot_len));
				count(C_XDP_DROP_FILTER);
				return XDP_DROP;
			}
		}
		if ((entry || (flags & NILB_F_FILTER_GLOBAL_RATE)) &&
		    filter_global(flags, iph, bpf_ntohs(iph->tot_len), data_end, entry))
			return XDP_DROP;
	}
	frame_len = data_end - data;
	ihl_len = iph->ihl * 4;
	tot_len = bpf_ntohs(iph->tot_len);
	if (iph->version != 4 || ihl_len < sizeof(*iph) || tot_len < ihl_len ||
	    sizeof(*eth) + tot_len > frame_len)
		goto malformed;
	if (is_fragment(iph)) {
		if (!is_vip_only(iph->daddr))
			goto not_service;
		count(C_XDP_DROP_FRAGMENT);
		return XDP_DROP;
	}
	l4 = (void *)iph + ihl_len;

	/* The L4 header must lie within the frame and within tot_len (not in
	 * Ethernet padding); a short one is only a VIP's business. */
	switch (iph->protocol) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;

		/* A data offset below 5 words (the byte holding it below 0x50)
		 * or past the segment: the backend's TC would drop it (it could
		 * not read the header the offset claims). */
		if ((void *)(th + 1) > data_end || ihl_len + sizeof(*th) > tot_len ||
		    ((__u8 *)th)[12] < 5 << 4 ||
		    ihl_len + (((__u8 *)th)[12] >> 4) * 4 > tot_len)
			goto malformed;
		if (xdp_own_traffic(cfg, iph->daddr))
			goto not_service;
		table = xdp_l4_service(iph, l4, IPPROTO_TCP, cfg->hash_seed, &hash);
		what = th->syn && !th->ack ? WHAT_SYN : 0;
		break;
	}
	case IPPROTO_UDP:
		if (l4 + sizeof(struct udphdr) > data_end ||
		    ihl_len + sizeof(struct udphdr) > tot_len)
			goto malformed;
		/* GUE for this node (it may be a backend too): decapsulated
		 * before GRO if XDP can decide it, else TC's (xdp_decap.h). */
		if (!c6 && iph->daddr == cfg->node_addr &&
		    ((struct udphdr *)l4)->dest == cfg->gue_port)
			return xdp_gue_receive(ctx, cfg, iph);
		if (xdp_own_traffic(cfg, iph->daddr))
			goto not_service;
		table = xdp_l4_service(iph, l4, IPPROTO_UDP, cfg->hash_seed, &hash);
		/* A service's datagram (the node's own traffic pays nothing):
		 * its UDP length covers the header and lies within the IP
		 * payload. A shorter one is legal: the stack trims the rest,
		 * and so the QUIC-LB decoder reads only up to it. */
		if (table) {
			__u32 udp_len = bpf_ntohs(((struct udphdr *)l4)->len);

			if (udp_len < sizeof(struct udphdr) || ihl_len + udp_len > tot_len)
				goto malformed;
		}
		udp = 1;
		break;
	case IPPROTO_ICMP:
		if (!is_vip(iph->daddr))
			goto not_service;
		/* Errors follow the flow they quote; echo requests and the rest
		 * are the balancer node's own (docs/design.md "Packet path"). */
		switch (icmp_classify(l4, tot_len - ihl_len, iph->daddr, data_end, &flow)) {
		case ICMP_FLOW:
			break;
		case ICMP_MALFORMED:
			if (!is_vip_only(iph->daddr))
				goto not_service;
			count(C_XDP_DROP_MALFORMED);
			return XDP_DROP;
		default: /* ICMP_PING, ICMP_NO_FLOW */
			goto not_service;
		}
		table = xdp_flow_service(&flow, cfg->hash_seed, &hash);
		if (!table)
			goto not_service;
		udp = flow.proto == IPPROTO_UDP;
		what = WHAT_ICMP; /* C_XDP_ICMP_FORWARDED once sent */
		break;
	default:
		goto not_service;
	}
	if (!table)
		goto not_service;
	/* Edge filters, service stage: the service's own TCP and UDP packets
	 * (an ICMP error comes from a router, not from the client). */
	if ((cfg->flags & NILB_F_FILTER_SERVICES) && !(what & WHAT_ICMP) &&
	    filter_service(cfg->flags, table, iph->saddr, tot_len, what & WHAT_SYN))
		return XDP_DROP;
	/* QUIC-LB (a service with quic_lb): the backend the connection ID
	 * names; else the bucket. */
	if (!(udp && (table->flags & NILB_SVC_F_QUIC_LB) && iph->protocol == IPPROTO_UDP &&
	      xdp_quic_hops(ctx, table->service_index, (l4 - data) + sizeof(struct udphdr),
			    (l4 - data) + bpf_ntohs(((struct udphdr *)l4)->len), &hops, c6) == 0) &&
	    xdp_bucket(table, hash, udp, &hops, c6))
		return XDP_DROP;
	eth = xdp_encap(ctx, eth, cfg, &hops, hash, tot_len, frame_len, hops.macs, GUE_PROTO_IPV4, c6);
	if (!eth)
		return XDP_DROP;
	return xdp_next_hop(ctx, eth, cfg, &hops, tot_len, what, hops.macs, c6);

malformed:
	if (is_vip_only(iph->daddr)) {
		count(C_XDP_DROP_MALFORMED);
		return XDP_DROP;
	}
not_service:
	/* NAT mode: a direct packet to this node must not join a translated
	 * flow of the same 4-tuple (bpf/nat.h). */
	if ((cfg->flags & NILB_F_NAT) && nat_direct_drop(ctx, iph, data_end, cfg->node_addr))
		return XDP_DROP;
	count(C_XDP_PASS_NOT_SERVICE);
	return XDP_PASS;
}

/* The balancer over an IPv4 cluster network. */
SEC("xdp")
int nilb_xdp_balancer(struct xdp_md *ctx)
{
	return xdp_balancer(ctx, 0);
}

/* The balancer over an IPv6 cluster network (NILB_F_CLUSTER_IPV6): the
 * daemon attaches it in place of nilb_xdp_balancer. */
SEC("xdp")
int nilb_xdp_balancer_c6(struct xdp_md *ctx)
{
	return xdp_balancer(ctx, 1);
}

/* ---- XDP on backends ----------------------------------------------------- */

/*
 * The XDP program of nodes that are not balancers (a balancer's program
 * does the same in its UDP branch): GUE for this node is decapsulated
 * before GRO when XDP can decide it (bpf/xdp_decap.h), everything else
 * passes untouched. Frags-aware: a multi-buffer frame (a GRO super-frame a
 * veth hands on, jumbo frames) passes like any other; GUE in one is TC's,
 * since gue_parse sees only the first buffer and finds it cut short.
 */
SEC("xdp.frags")
int nilb_xdp_backend(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_config *cfg;
	struct iphdr *oip;
	struct udphdr *udp;
	__u32 ihl_len;

	oip = outer_udp4(data, data_end, &udp, &ihl_len);
	cfg = get_config();
	if (!cfg) {
		count(C_XDP_PASS_NO_CONFIG);
		return XDP_PASS;
	}
	if (oip) {
		if (oip->daddr == cfg->node_addr && udp->dest == cfg->gue_port)
			return xdp_gue_receive(ctx, cfg, oip);
	} else if (cfg->flags & NILB_F_CLUSTER_IPV6) {
		/* An IPv6 cluster network: GUE in outer IPv6 for this node. */
		struct ipv6hdr *oip6 = outer_udp6(data, data_end, &udp);
		__u32 *node6 = get_node6();

		if (oip6 && node6 && udp->dest == cfg->gue_port &&
		    addr6_eq((__u32 *)&oip6->daddr, node6))
			return xdp_gue_receive_o6(ctx);
	}
	/* NAT mode: a direct packet to this node must not join a translated
	 * flow of the same 4-tuple (bpf/nat.h). */
	if (cfg->flags & NILB_F_NAT) {
		struct ethhdr *eth = data;
		struct iphdr *iph = (void *)(eth + 1);

		if ((void *)(iph + 1) <= data_end && eth->h_proto == bpf_htons(ETH_P_IP) &&
		    nat_direct_drop(ctx, iph, data_end, cfg->node_addr))
			return XDP_DROP;
	}
	count(C_XDP_BACKEND_PASS);
	return XDP_PASS;
}

/* Install (or clear) the ecb(aes) context of a QUIC-LB service with a keyed
 * algorithm in quic_crypto (bpf/quic_lb.h quic_lb_install_key). Run by the
 * control plane with BPF_PROG_TEST_RUN: only syscall programs may create
 * crypto contexts. */
SEC("syscall")
int nilb_quic_set_key(struct nilb_quic_key_args *args)
{
	return quic_lb_install_key(&quic_crypto, args);
}

/* ---- TC second chance ---------------------------------------------------- */

/* Why tc_local_match does not accept a packet at once. Negative: its
 * acceptances are counters (enum nilb_counter, >= 0). */
enum local_miss {
	/* No local socket owns the flow: second chance, else unknown_flow. */
	LOCAL_UNKNOWN = -1,
	/* UDP (or an ICMP error about UDP) with only an unconnected socket:
	 * second chance, else the last hop keeps it. */
	LOCAL_UDP_LISTENER = -2,
	/* Inner TCP/UDP/ICMP header cut short, or the ICMP quote invalid. */
	LOCAL_MALFORMED = -3,
	/* Inner protocol not handled, or ICMP about no flow. */
	LOCAL_UNSUPPORTED = -4,
	/* A TCP socket that no longer owns packets (TIME_WAIT, CLOSE): second
	 * chance, else the last hop hands the packet to the stack. */
	LOCAL_CLOSED = -5,
};

/* TCP_OWNING_STATES and the flow4/bpf_sock_tuple layout: bpf/common.h. */

/*
 * What the local TCP socket of the flow `tuple` (client -> VIP, a struct
 * bpf_sock_tuple of tuple_len bytes: IPv4 or IPv6) makes of a packet:
 * owned by an established or handshake socket (returns `owned`); a valid
 * SYN-cookie ACK for a listener (ip, ip_len: the packet's IP header; th: the
 * segment, NULL for an ICMP error; returns C_TC_DECAP_SYNCOOKIE); a socket
 * that no longer owns packets (LOCAL_CLOSED); or nothing (LOCAL_UNKNOWN, a
 * listener alone included).
 * Returns: as said.
 */
static __always_inline int tc_tcp_lookup(struct __sk_buff *skb, void *tuple, __u32 tuple_len,
					 int owned, void *ip, __u32 ip_len, struct tcphdr *th)
{
	struct bpf_sock *sk;
	__u32 state;
	int cookie;

	sk = bpf_skc_lookup_tcp(skb, tuple, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return LOCAL_UNKNOWN;
	state = sk->state;
	if (state == BPF_TCP_LISTEN) {
		cookie = th && th->ack && !th->syn && !th->rst &&
			 bpf_tcp_check_syncookie(sk, ip, ip_len, th, sizeof(*th)) == 0;
		bpf_sk_release(sk);
		return cookie ? C_TC_DECAP_SYNCOOKIE : LOCAL_UNKNOWN;
	}
	bpf_sk_release(sk);
	if (state < 32 && ((1u << state) & TCP_OWNING_STATES))
		return owned;
	return LOCAL_CLOSED;
}

/* tc_tcp_lookup of an IPv4 flow (in: its IPv4 header). Returns: as said. */
static __always_inline int tc_tcp_socket(struct __sk_buff *skb, struct flow4 *f, int owned,
					 struct iphdr *in, struct tcphdr *th)
{
	return tc_tcp_lookup(skb, f, sizeof(((struct bpf_sock_tuple *)0)->ipv4), owned, in,
			     sizeof(*in), th);
}

/* What the local UDP socket of the flow `tuple` (client -> VIP, a struct
 * bpf_sock_tuple of tuple_len bytes) makes of a packet: owned by a
 * connected socket (returns `owned`), only an unconnected one
 * (LOCAL_UDP_LISTENER), or none (LOCAL_UNKNOWN).
 * Returns: as said. */
static __always_inline int tc_udp_lookup(struct __sk_buff *skb, void *tuple, __u32 tuple_len,
					 int owned)
{
	struct bpf_sock *sk;
	int connected;

	sk = bpf_sk_lookup_udp(skb, tuple, tuple_len, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return LOCAL_UNKNOWN;
	connected = sk->dst_port != 0;
	bpf_sk_release(sk);
	return connected ? owned : LOCAL_UDP_LISTENER;
}

/* tc_udp_lookup of an IPv4 flow. Returns: as said. */
static __always_inline int tc_udp_socket(struct __sk_buff *skb, struct flow4 *f, int owned)
{
	return tc_udp_lookup(skb, f, sizeof(((struct bpf_sock_tuple *)0)->ipv4), owned);
}

/* The service of a flow TC looks at, and its NAT translation here. */
struct tc_nat {
	struct nilb_service *svc; /* the flow's service, NULL if none */
	__u32 node;               /* this node's address */
	__u32 vip;                /* the service address (network order) */
	__u16 port;               /* the service port (network order) */
	__u16 nat_port;           /* its listening port on the backends (network order) */
	__u8 active;              /* translated here (nat_active) */
	__u8 is_nat;              /* the service is in NAT mode (translated here or not) */
	__u8 syn;                 /* a TCP SYN without ACK */
};

/* Look up the service of flow f (client -> VIP) into n and, for a NAT-mode
 * service translated here, make f the tuple this node's stack sees
 * (destination: n->node and the service's listening port).
 * Returns: nothing. */
static __always_inline void tc_nat_flow(struct tc_nat *n, struct flow4 *f)
{
	n->vip = f->daddr;
	n->port = f->dport;
	n->svc = service_of(f->daddr, f->dport, f->proto);
	n->active = nat_active(n->svc, f->daddr, f->dport, n->node);
	n->is_nat = n->svc && (n->svc->flags & NILB_SVC_F_NAT);
	if (n->active && n->svc) {
		n->nat_port = n->svc->nat_port;
		f->daddr = n->node;
		f->dport = n->nat_port;
	}
}

/*
 * Does a local socket make this node the right place for the inner packet
 * (in: checked IPv4 header whose tot_len fills the GUE payload)? *f gets
 * the flow the packet belongs to (client -> VIP; for an ICMP error the
 * quoted flow; for a NAT-mode service the translated tuple, which sockets
 * are looked up by), proto 0 if none; *n its service (tc_nat_flow).
 * Returns: the counter (enum nilb_counter, >= 0) to accept the packet under
 * (C_TC_DECAP_SYN, _ESTABLISHED, _SYNCOOKIE, _UDP, _ICMP or _PING), else a
 * negative enum local_miss.
 */
static __always_inline int tc_local_match(struct __sk_buff *skb, struct iphdr *in, void *data_end,
					  struct flow4 *f, struct tc_nat *n)
{
	void *l4 = (void *)in + in->ihl * 4;
	/* L4 bytes within the inner packet (its tot_len was checked against
	 * the GUE length, so headers must fit in them, not in what follows). */
	__u32 l4_len = bpf_ntohs(in->tot_len) - in->ihl * 4;

	f->proto = 0;
	switch (in->protocol) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end || l4_len < sizeof(*th) || th->doff < 5 ||
		    th->doff * 4 > l4_len)
			return LOCAL_MALFORMED;
		f->saddr = in->saddr;
		f->daddr = in->daddr;
		f->sport = th->source;
		f->dport = th->dest;
		f->proto = IPPROTO_TCP;
		tc_nat_flow(n, f);
		n->syn = th->syn && !th->ack;
		if (n->syn)
			return C_TC_DECAP_SYN;
		return tc_tcp_socket(skb, f, C_TC_DECAP_ESTABLISHED, in, th);
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh) ||
		    bpf_ntohs(uh->len) < sizeof(*uh) || bpf_ntohs(uh->len) > l4_len)
			return LOCAL_MALFORMED;
		f->saddr = in->saddr;
		f->daddr = in->daddr;
		f->sport = uh->source;
		f->dport = uh->dest;
		f->proto = IPPROTO_UDP;
		tc_nat_flow(n, f);
		return tc_udp_socket(skb, f, C_TC_DECAP_UDP);
	}
	case IPPROTO_ICMP:
		/* An error follows the rules of the flow it quotes (a packet of
		 * ours, VIP -> client: the connection seen from the client's
		 * side); an echo request is answered here, the first hop. */
		switch (icmp_classify(l4, l4_len, in->daddr, data_end, f)) {
		case ICMP_FLOW:
			break;
		case ICMP_PING:
			return C_TC_DECAP_PING;
		case ICMP_NO_FLOW:
			return LOCAL_UNSUPPORTED;
		default: /* ICMP_MALFORMED */
			return LOCAL_MALFORMED;
		}
		tc_nat_flow(n, f);
		if (f->proto == IPPROTO_TCP)
			return tc_tcp_socket(skb, f, C_TC_DECAP_ICMP, in, NULL);
		return tc_udp_socket(skb, f, C_TC_DECAP_ICMP);
	default:
		return LOCAL_UNSUPPORTED;
	}
}

/* Take off hdr_len bytes after Ethernet (outer headers + GUE) in front of
 * an inner packet of the other family than the outer one: the skb becomes
 * IPv6 (to6) or IPv4 (skb->protocol; the caller writes the Ethernet type).
 * With BPF_F_ADJ_ROOM_DECAP_L3_* (Linux 6.3) in one step; an older kernel
 * refuses the flag (-EINVAL, the skb untouched), and there the family is
 * changed by bpf_skb_change_proto, which inserts (to IPv6) or removes (to
 * IPv4) 20 bytes after Ethernet: to IPv6 they go in first and come off
 * with the outer headers, to IPv4 the outer headers but 20 bytes come off
 * first and the last 20 with the change (Debian 12's 6.1: the kernel lane).
 * Returns: 0, or the kernel's error. */
static __always_inline int tc_strip_across(struct __sk_buff *skb, __u32 hdr_len, const int to6)
{
	int err;

	err = bpf_skb_adjust_room(skb, -(__s32)hdr_len, BPF_ADJ_ROOM_MAC,
				  to6 ? BPF_F_ADJ_ROOM_DECAP_L3_IPV6 : BPF_F_ADJ_ROOM_DECAP_L3_IPV4);
	if (err != -22) /* -EINVAL: the flag is unknown here */
		return err;
	if (to6)
		return bpf_skb_change_proto(skb, bpf_htons(ETH_P_IPV6), 0) ?:
		       bpf_skb_adjust_room(skb, -(__s32)(hdr_len + 20), BPF_ADJ_ROOM_MAC, 0);
	if (hdr_len < 20)
		return -22;
	return bpf_skb_adjust_room(skb, -(__s32)(hdr_len - 20), BPF_ADJ_ROOM_MAC, 0) ?:
	       bpf_skb_change_proto(skb, bpf_htons(ETH_P_IP), 0);
}

/* Take off hdr_len bytes after Ethernet in front of an inner IPv4 packet:
 * outer IPv4 + UDP + GUE, or with o6 outer IPv6 + UDP + GUE (the packet
 * then changes family: skb->protocol and the Ethernet type become IPv4).
 * Returns: 0, or the kernel's error. */
static __always_inline int tc_strip4(struct __sk_buff *skb, __u32 hdr_len, const int o6)
{
	__u16 type = bpf_htons(ETH_P_IP);

	if (!o6)
		return bpf_skb_adjust_room(skb, -(__s32)hdr_len, BPF_ADJ_ROOM_MAC, 0);
	return tc_strip_across(skb, hdr_len, 0) ||
	       bpf_skb_store_bytes(skb, __builtin_offsetof(struct ethhdr, h_proto), &type,
				   sizeof(type), 0);
}

/* Remove the outer headers + GUE (hdr_len bytes after Ethernet; o6: outer
 * IPv6, tc_strip4) and count the packet as `counter` (and in st's tc_decap
 * if st).
 * Returns: TC_ACT_OK, or TC_ACT_SHOT if the kernel refused (counted:
 * C_TC_DROP_ADJUST_FAILED). */
static __always_inline int tc_decap(struct __sk_buff *skb, __u32 hdr_len, __u32 counter,
				    struct nilb_service_stats *st, const int o6)
{
	if (tc_strip4(skb, hdr_len, o6)) {
		count(C_TC_DROP_ADJUST_FAILED);
		return TC_ACT_SHOT;
	}
	count(counter);
	if (st)
		st->tc_decap++;
	return TC_ACT_OK;
}

/*
 * Accept the GUE packet here (tc_decap) and, for a flow of a NAT-mode
 * service translated here (n->active; f: its translated tuple), first
 * track it (nat_track) and then rewrite the decapsulated packet's
 * destination (TCP, UDP) or, for an ICMP error about the flow, its outer
 * destination and quoted source (bpf/nat.h).
 * o6: the outer header is IPv6 (tc_decap).
 * Returns: TC_ACT_OK, or TC_ACT_SHOT (counted: a NAT collision or full
 * nat_flows, or C_TC_DROP_ADJUST_FAILED if the kernel refused a change).
 */
static __always_inline int tc_accept(struct __sk_buff *skb, __u32 hdr_len, __u32 counter,
				     struct nilb_service_stats *st, const struct tc_nat *n,
				     const struct flow4 *f, const int o6)
{
	void *data, *data_end;
	struct iphdr *ip;
	int verdict;

	if (n->active && nat_track(skb, f, n->vip, n->port, n->syn) < 0)
		return TC_ACT_SHOT;
	/* A NAT service on this node's own address and port: untranslated,
	 * like a direct packet to the node (an ICMP error opens nothing and
	 * is not checked). */
	if (n->is_nat && !n->active && counter != C_TC_DECAP_ICMP &&
	    nat_direct_check(skb, (struct flow4 *)f, n->syn))
		return TC_ACT_SHOT;
	verdict = tc_decap(skb, hdr_len, counter, st, o6);
	if (verdict != TC_ACT_OK || !n->active)
		return verdict;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	ip = data + sizeof(struct ethhdr);
	if ((void *)(ip + 1) > data_end)
		goto refused;
	if (ip->protocol == IPPROTO_ICMP) {
		if (nat_icmp(ip, data_end, 0, n->vip, n->node, n->port, n->nat_port))
			goto refused;
	} else if (nat_tc_l4(skb, sizeof(struct ethhdr), sizeof(struct ethhdr) + ip->ihl * 4,
			     ip->protocol, 0, n->vip, n->node, n->port, n->nat_port)) {
		goto refused;
	}
	count(C_NAT_IN);
	return TC_ACT_OK;
refused:
	count(C_TC_DROP_ADJUST_FAILED);
	return TC_ACT_SHOT;
}

/* A RST from the VIP: IPv4 and TCP, no options. */
struct tc_rst {
	struct iphdr ip;
	struct tcphdr tcp;
};

/* Returns: non-zero if the RST rate limit (NILB_RST_INTERVAL_NS on
 * average, bursts of NILB_RST_BURST, per CPU) allows one more RST now, which
 * it then counts (GCRA on rst_budget). */
static __always_inline int tc_rst_allowed(void)
{
	__u32 zero = 0;
	__u64 now, *tat;

	tat = bpf_map_lookup_elem(&rst_budget, &zero);
	if (!tat)
		return 0;
	now = bpf_ktime_get_coarse_ns();
	if (*tat < now)
		*tat = now;
	if (*tat - now > (__u64)(NILB_RST_BURST - 1) * NILB_RST_INTERVAL_NS)
		return 0;
	*tat += NILB_RST_INTERVAL_NS;
	return 1;
}

/*
 * The RST's numbers for segment th (l4_len: its TCP bytes, header
 * included), as RFC 793 says for a segment of no connection: with ACK, a RST
 * whose sequence number is the segment's acknowledgment number; without, a
 * RST+ACK acknowledging its sequence number plus its length (data, SYN,
 * FIN); *flags the RST's TCP flags. A RST is never answered, and RSTs are
 * rate-limited (tc_rst_allowed).
 * Returns: 0 with *seq, *ack (network order) and *flags set, or non-zero
 * if no RST goes out (counted: C_TC_DROP_UNKNOWN_FLOW for a RST,
 * C_TC_DROP_RST_LIMITED over the rate).
 */
static __always_inline int tc_rst_numbers(const struct tcphdr *th, __u32 l4_len, __u32 *seq,
					  __u32 *ack, __u16 *flags)
{
	__u32 data_len;

	if (th->rst) {
		count(C_TC_DROP_UNKNOWN_FLOW);
		return 1;
	}
	if (!tc_rst_allowed()) {
		count(C_TC_DROP_RST_LIMITED);
		return 1;
	}
	if (th->ack) {
		*seq = th->ack_seq;
		*ack = 0;
		*flags = 0x04; /* RST */
	} else {
		data_len = l4_len > th->doff * 4 ? l4_len - th->doff * 4 : 0;
		*seq = 0;
		*ack = bpf_htonl(bpf_ntohl(th->seq) + data_len + th->syn + th->fin);
		*flags = 0x14; /* RST, ACK */
	}
	return 0;
}

/*
 * unknown_flow: rst. Answer the inner TCP segment `in` (checked header,
 * hdr_len bytes of outer headers before it, outer IPv6 with o6) as RFC 793 says for a segment
 * of no connection: with ACK, a RST whose sequence number is the segment's
 * acknowledgment number; without, a RST+ACK acknowledging the segment's
 * sequence number plus its length (data, SYN, FIN). A RST is never
 * answered. The packet itself becomes the reply (VIP -> client, no
 * options, both checksums computed) and leaves with bpf_redirect_neigh
 * through the interface it came in on, as a reply would (DSR).
 * Returns: TC_ACT_REDIRECT (C_TC_RST_SENT), or TC_ACT_SHOT (counted:
 * C_TC_DROP_UNKNOWN_FLOW for a RST, C_TC_DROP_RST_LIMITED over the rate,
 * C_TC_DROP_ADJUST_FAILED if the kernel refused a change).
 */
static __always_inline int tc_reset(struct __sk_buff *skb, struct iphdr *in, void *data_end,
				    __u32 hdr_len, const int o6)
{
	struct tcphdr *th = (void *)in + in->ihl * 4;
	__u32 l4_len = bpf_ntohs(in->tot_len) - in->ihl * 4;
	__u32 saddr, daddr, addrs, seq = 0, ack = 0, sum;
	struct tc_rst r;
	__u16 flags;

	if ((void *)(th + 1) > data_end)
		return TC_ACT_SHOT; /* checked before; the verifier needs it */
	if (tc_rst_numbers(th, l4_len, &seq, &ack, &flags))
		return TC_ACT_SHOT;
	saddr = in->daddr;
	daddr = in->saddr;
	addrs = (saddr & 0xffff) + (saddr >> 16) + (daddr & 0xffff) + (daddr >> 16);

	__builtin_memset(&r, 0, sizeof(r));
	*(__u16 *)&r.ip = bpf_htons(0x4500); /* version 4, IHL 5, TOS 0 */
	r.ip.tot_len = bpf_htons(sizeof(r));
	r.ip.frag_off = bpf_htons(IP_DF);
	r.ip.ttl = 64;
	r.ip.protocol = IPPROTO_TCP;
	r.ip.saddr = saddr;
	r.ip.daddr = daddr;
	r.ip.check = csum_fold32(bpf_htons(0x4500) + r.ip.tot_len + r.ip.frag_off +
				 bpf_htons((64 << 8) | IPPROTO_TCP) + addrs);
	r.tcp.source = th->dest;
	r.tcp.dest = th->source;
	r.tcp.seq = seq;
	r.tcp.ack_seq = ack;
	((__u16 *)&r.tcp)[6] = bpf_htons((5 << 12) | flags); /* data offset 5, flags */
	/* Pseudo-header (addresses, protocol, TCP length) and the header's
	 * non-zero words (window, checksum, urgent pointer are 0). */
	sum = addrs + bpf_htons(IPPROTO_TCP) + bpf_htons(sizeof(r.tcp)) + r.tcp.source +
	      r.tcp.dest + (seq & 0xffff) + (seq >> 16) + (ack & 0xffff) + (ack >> 16) +
	      ((__u16 *)&r.tcp)[6];
	r.tcp.check = csum_fold32(sum);

	if (tc_strip4(skb, hdr_len, o6) ||
	    bpf_skb_change_tail(skb, sizeof(struct ethhdr) + sizeof(r), 0) ||
	    bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &r, sizeof(r), BPF_F_RECOMPUTE_CSUM)) {
		count(C_TC_DROP_ADJUST_FAILED);
		return TC_ACT_SHOT;
	}
	count(C_TC_RST_SENT);
	return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
}

/* Some drivers leave only part of the headers in the linear area: make
 * NILB_TC_HEADERS_LEN bytes directly readable (rarely needed; a no-op
 * otherwise). A subprogram, so that the caller reads the context's data
 * pointers once, after it.
 * Returns: 0, or bpf_skb_pull_data's error (ignored: the bounds checks that
 * follow see what is readable). */
static __noinline int tc_linearize_headers(struct __sk_buff *skb)
{
	__u32 linear = skb->data_end - skb->data;

	if (linear < NILB_TC_HEADERS_LEN && linear < skb->len)
		return bpf_skb_pull_data(skb, skb->len < NILB_TC_HEADERS_LEN ? skb->len
									  : NILB_TC_HEADERS_LEN);
	return 0;
}

/* The interface a marked slow-path packet (our XDP balancer's GUE from this
 * node to another, whose neighbour the FIB had not resolved, or from an
 * interface with forwarding off) leaves through: the one the FIB chooses
 * for its outer destination (o6: outer IPv6 at data + 14, else IPv4), as the
 * balancer's own lookup did; the receiving interface where the FIB gives
 * none (forwarding off there, as the balancer found too). A subprogram: its
 * FIB argument takes a frame of its own, off the TC program's stack.
 * Returns: an ifindex. */
static __noinline __u32 tc_slow_path_ifindex(struct __sk_buff *skb, int o6)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	/* Read once: a context field read on several paths may be compiled
	 * to a computed context offset, which the verifier refuses. */
	__u32 in = skb->ifindex;
	struct bpf_fib_lookup fib;

	__builtin_memset(&fib, 0, sizeof(fib));
	fib.l4_protocol = IPPROTO_UDP;
	fib.ifindex = in;
	if (o6) {
		struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);

		if ((void *)(ip6 + 1) > data_end)
			return in;
		fib.family = AF_INET6;
		addr6_copy(fib.ipv6_src, (__u32 *)&ip6->saddr);
		addr6_copy(fib.ipv6_dst, (__u32 *)&ip6->daddr);
	} else {
		struct iphdr *ip = data + sizeof(struct ethhdr);

		if ((void *)(ip + 1) > data_end)
			return in;
		fib.family = AF_INET;
		fib.ipv4_src = ip->saddr;
		fib.ipv4_dst = ip->daddr;
	}
	fib.tot_len = skb->len - sizeof(struct ethhdr);
	switch (bpf_fib_lookup(skb, &fib, sizeof(fib), 0)) {
	case BPF_FIB_LKUP_RET_SUCCESS:
	case BPF_FIB_LKUP_RET_NO_NEIGH:
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return fib.ifindex;
	default:
		return in;
	}
}

/* What tc_next_hop did with a packet no local socket owns. */
enum tc_hop {
	HOP_FORWARDED, /* readdressed to the next listed hop: redirect it */
	HOP_SELF,      /* the next hop is this node: accept it (loop guard) */
	HOP_MALFORMED, /* the hop lies beyond the packet or is all zero */
	HOP_REFUSED,   /* a hop no node may relay to (gue_hop_relayable*) */
};

/*
 * Second chance: the listed hop `next` (< hop count) of GUE header gue,
 * checked and, unless it is this node, written as the outer destination
 * with this node as the source (outer: the outer IPv4 header, or with o6
 * the outer IPv6 header, 16-byte hops; node: this node's IPv4 address,
 * the IPv6 one comes from config6).
 * Returns: enum tc_hop.
 */
static __always_inline int tc_next_hop(void *outer, struct gue_hdr *gue, __u8 next,
				       void *data_end, __u32 node, const int o6)
{
	__u32 hop, *hop_at;

	if (o6) {
		__u32 *node6 = get_node6();

		hop_at = gue_hop6(gue, next, data_end);
		if (!hop_at || !node6)
			return HOP_MALFORMED;
		if (addr6_eq(hop_at, node6))
			return HOP_SELF;
		if (!(hop_at[0] | hop_at[1] | hop_at[2] | hop_at[3]))
			return HOP_MALFORMED;
		if (!gue_hop_relayable6(hop_at))
			return HOP_REFUSED;
		gue_forward6(outer, gue, next, node6, hop_at);
		return HOP_FORWARDED;
	}
	hop_at = gue_hop(gue, next, data_end);
	if (!hop_at)
		return HOP_MALFORMED;
	hop = *hop_at;
	if (hop == node)
		return HOP_SELF;
	if (!hop)
		return HOP_MALFORMED;
	if (!gue_hop_relayable(hop))
		return HOP_REFUSED;
	gue_forward(outer, gue, next, node, hop);
	return HOP_FORWARDED;
}

/* ---- TC second chance, IPv6 inside GUE ------------------------------------ */

/* tc_tcp_lookup of an IPv6 flow (in6: its IPv6 header; th NULL for an
 * ICMPv6 error). Returns: as tc_tcp_lookup. */
static __always_inline int tc_tcp_socket6(struct __sk_buff *skb, struct flow6 *f, int owned,
					  struct ipv6hdr *in6, struct tcphdr *th)
{
	return tc_tcp_lookup(skb, f, SOCK_TUPLE6_LEN, owned, in6, sizeof(*in6), th);
}

/*
 * tc_local_match for an inner IPv6 packet (in6: its header, checked, its
 * L4 header at l4_off of l4 bytes after ipv6_walk; proto its protocol):
 * the same rules, with the IPv6 socket lookups. *f gets the flow.
 * Returns: as tc_local_match.
 */
static __always_inline int tc_local_match6(struct __sk_buff *skb, struct ipv6hdr *in6,
					   void *data_end, __u32 l4_off, __u32 l4_len, __u8 proto,
					   struct flow6 *f)
{
	void *l4 = (void *)in6 + l4_off;

	f->proto = 0;
	switch (proto) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end || l4_len < sizeof(*th) || th->doff < 5 ||
		    th->doff * 4 > l4_len)
			return LOCAL_MALFORMED;
		addr6_copy(f->saddr, (__u32 *)&in6->saddr);
		addr6_copy(f->daddr, (__u32 *)&in6->daddr);
		f->sport = th->source;
		f->dport = th->dest;
		f->proto = IPPROTO_TCP;
		if (th->syn && !th->ack)
			return C_TC_DECAP_SYN;
		/* The SYN-cookie check needs the TCP header right after the
		 * IPv6 one (no extension headers), as the stack's. */
		return tc_tcp_socket6(skb, f, C_TC_DECAP_ESTABLISHED, in6,
				      l4_off == sizeof(*in6) ? th : NULL);
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh) ||
		    bpf_ntohs(uh->len) < sizeof(*uh) || bpf_ntohs(uh->len) > l4_len)
			return LOCAL_MALFORMED;
		addr6_copy(f->saddr, (__u32 *)&in6->saddr);
		addr6_copy(f->daddr, (__u32 *)&in6->daddr);
		f->sport = uh->source;
		f->dport = uh->dest;
		f->proto = IPPROTO_UDP;
		return tc_udp_lookup(skb, f, SOCK_TUPLE6_LEN, C_TC_DECAP_UDP);
	}
	case NEXTHDR_ICMPV6: {
		struct ipv6hdr *emb = NULL;

		switch (icmp6_classify(l4, l4_len, (__u32 *)&in6->daddr, data_end, &emb)) {
		case ICMP_FLOW:
			break;
		case ICMP_PING:
			return C_TC_DECAP_PING;
		case ICMP_NO_FLOW:
			return LOCAL_UNSUPPORTED;
		default: /* ICMP_MALFORMED */
			return LOCAL_MALFORMED;
		}
		if (!emb || (void *)(emb + 1) + 4 > data_end)
			return LOCAL_MALFORMED; /* checked; for the verifier */
		icmp6_flow(emb, f);
		if (f->proto == IPPROTO_TCP)
			return tc_tcp_socket6(skb, f, C_TC_DECAP_ICMP, in6, NULL);
		return tc_udp_lookup(skb, f, SOCK_TUPLE6_LEN, C_TC_DECAP_ICMP);
	}
	default:
		return LOCAL_UNSUPPORTED;
	}
}

/* Remove outer IPv4 + UDP + GUE (hdr_len bytes after Ethernet) from a
 * packet carrying IPv6: the skb becomes IPv6 (protocol and Ethernet type)
 * and is counted as `counter` and C_TC_DECAP_IPV6 (and in st's tc_decap).
 * Returns: TC_ACT_OK, or TC_ACT_SHOT if the kernel refused (counted:
 * C_TC_DROP_ADJUST_FAILED). */
static __always_inline int tc_decap6(struct __sk_buff *skb, __u32 hdr_len, __u32 counter,
				     struct nilb_service_stats *st)
{
	__u16 type = bpf_htons(ETH_P_IPV6);

	if (tc_strip_across(skb, hdr_len, 1) ||
	    bpf_skb_store_bytes(skb, __builtin_offsetof(struct ethhdr, h_proto), &type,
				sizeof(type), 0)) {
		count(C_TC_DROP_ADJUST_FAILED);
		return TC_ACT_SHOT;
	}
	count(counter);
	count(C_TC_DECAP_IPV6);
	if (st)
		st->tc_decap++;
	return TC_ACT_OK;
}

/* A RST from an IPv6 VIP: IPv6 and TCP, no options. */
struct tc_rst6 {
	struct ipv6hdr ip;
	struct tcphdr tcp;
};

/*
 * unknown_flow: rst for an inner IPv6 segment (tc_reset's rules, RFC 793):
 * in6, th: its checked headers (l4_len: TCP bytes, header included), hdr_len
 * the outer bytes before it. The packet becomes the reply (VIP -> client,
 * hop limit 64, flow label 0, no options, TCP checksum over the RFC 8200
 * pseudo-header) and leaves with bpf_redirect_neigh through the interface it
 * came in on.
 * Returns: as tc_reset.
 */
static __always_inline int tc_reset6(struct __sk_buff *skb, struct ipv6hdr *in6,
				     struct tcphdr *th, __u32 l4_len, __u32 hdr_len)
{
	__u16 type = bpf_htons(ETH_P_IPV6);
	__u32 seq = 0, ack = 0, *w;
	struct tc_rst6 r;
	__u16 flags;
	__u64 sum;

	if (tc_rst_numbers(th, l4_len, &seq, &ack, &flags))
		return TC_ACT_SHOT;
	__builtin_memset(&r, 0, sizeof(r));
	*(__u32 *)&r.ip = bpf_htonl(0x60000000); /* version 6, class 0, label 0 */
	r.ip.payload_len = bpf_htons(sizeof(r.tcp));
	r.ip.nexthdr = IPPROTO_TCP;
	r.ip.hop_limit = 64;
	addr6_copy((__u32 *)&r.ip.saddr, (__u32 *)&in6->daddr);
	addr6_copy((__u32 *)&r.ip.daddr, (__u32 *)&in6->saddr);
	r.tcp.source = th->dest;
	r.tcp.dest = th->source;
	r.tcp.seq = seq;
	r.tcp.ack_seq = ack;
	((__u16 *)&r.tcp)[6] = bpf_htons((5 << 12) | flags); /* data offset 5, flags */
	/* Pseudo-header (addresses, TCP length, next header), then the header
	 * (window, checksum, urgent pointer 0), as 32-bit words. */
	w = (__u32 *)&r.ip.saddr;
	sum = (__u64)w[0] + w[1] + w[2] + w[3] + w[4] + w[5] + w[6] + w[7] +
	      bpf_htonl(sizeof(r.tcp)) + bpf_htonl(IPPROTO_TCP);
	w = (__u32 *)&r.tcp;
	sum += (__u64)w[0] + w[1] + w[2] + w[3] + w[4];
	r.tcp.check = ptb_fold(sum);

	if (tc_strip_across(skb, hdr_len, 1) ||
	    bpf_skb_change_tail(skb, sizeof(struct ethhdr) + sizeof(r), 0) ||
	    bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &r, sizeof(r), BPF_F_RECOMPUTE_CSUM) ||
	    bpf_skb_store_bytes(skb, __builtin_offsetof(struct ethhdr, h_proto), &type,
				sizeof(type), 0)) {
		count(C_TC_DROP_ADJUST_FAILED);
		return TC_ACT_SHOT;
	}
	count(C_TC_RST_SENT);
	return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
}

/*
 * Second chance for GUE protocol 41 (docs/design.md "IPv6"): the outer
 * checks of nilb_tc_second_chance passed (cluster source, not forged from
 * this node, no outer options, GUE header); here the inner IPv6 packet is
 * checked (version, its length filling the GUE payload, extension headers
 * walked, no fragment), must be for an IPv6 VIP, and is kept, forwarded
 * or, at the last hop, judged by the same rules as IPv4 (unknown_flow: rst
 * with tc_reset6). o6: the outer header is IPv6 (16-byte hops), else IPv4
 * without options.
 * Returns: the TC verdict (counted).
 */
static __always_inline int tc_gue_ipv6_of(struct __sk_buff *skb, __u32 node, __u32 flags,
					  const int o6)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct nilb_service_stats *st = NULL;
	struct nilb_service *svc;
	struct ipv6hdr *in6;
	void *oip;
	struct udphdr *udp;
	struct gue_hdr *gue;
	struct flow6 f;
	__u32 ip_len = o6 ? sizeof(struct ipv6hdr) : sizeof(struct iphdr);
	__u32 hop_len = o6 ? NILB_GUE6_HOP_LEN : 4;
	__u32 gue_len, hdr_len, in_len, l4_off = 0;
	__u8 proto = 0, next;
	int verdict;

	oip = data + sizeof(struct ethhdr);
	udp = oip + ip_len;
	gue = (void *)(udp + 1);
	if ((void *)(gue + 1) > data_end ||
	    gue->hop_count > (o6 ? NILB_MAX_GUE_HOPS6 : NILB_MAX_GUE_HOPS))
		goto malformed; /* checked by gue_parse; the verifier needs it */
	gue_len = sizeof(*gue) + hop_len * (__u32)gue->hop_count;
	hdr_len = ip_len + sizeof(*udp) + gue_len;
	in6 = (void *)gue + gue_len;
	if ((void *)(in6 + 1) > data_end)
		goto malformed;
	in_len = sizeof(*in6) + bpf_ntohs(in6->payload_len);
	if (in6->version != 6 || in_len != bpf_ntohs(udp->len) - sizeof(*udp) - gue_len)
		goto malformed;
	if (ipv6_walk(in6, data_end, in_len - sizeof(*in6), &l4_off, &proto) != IP6_L4 ||
	    l4_off > sizeof(*in6) + NILB_IPV6_MAX_EXT * 2048)
		goto malformed;
	if (vip6_flags((__u32 *)&in6->daddr) < 0) {
		count(C_TC_DROP_INNER_NOT_VIP);
		return TC_ACT_SHOT;
	}
	__builtin_memset(&f, 0, sizeof(f));
	verdict = tc_local_match6(skb, in6, data_end, l4_off, in_len - l4_off, proto, &f);
	if (verdict == LOCAL_MALFORMED)
		goto malformed;
	if (verdict == LOCAL_UNSUPPORTED) {
		count(C_TC_DROP_UNSUPPORTED);
		return TC_ACT_SHOT;
	}
	svc = f.proto ? service6_of(f.daddr, f.dport, f.proto) : NULL;
	if (svc)
		st = service_stats_of(svc);
	if (verdict >= 0)
		return tc_decap6(skb, hdr_len, verdict, st);

	/* Not owned here: second chance if a hop is left. */
	next = gue->next_hop;
	if (next < gue->hop_count) {
		switch (tc_next_hop(oip, gue, next, data_end, node, o6)) {
		case HOP_FORWARDED:
			break;
		case HOP_SELF:
			return tc_decap6(skb, hdr_len, C_TC_DECAP_LOOP_GUARD, st);
		case HOP_REFUSED:
			count(C_TC_DROP_BAD_NEXT_HOP);
			return TC_ACT_SHOT;
		default:
			goto malformed;
		}
		count(C_TC_FORWARD);
		count(C_TC_FORWARD_IPV6);
		if (st)
			st->tc_forward++;
		return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
	}
	if (verdict == LOCAL_UDP_LISTENER || verdict == LOCAL_CLOSED)
		return tc_decap6(skb, hdr_len,
				 proto == NEXTHDR_ICMPV6	       ? C_TC_DECAP_ICMP
				 : verdict == LOCAL_UDP_LISTENER ? C_TC_DECAP_UDP
								 : C_TC_DECAP_TIME_WAIT,
				 st);
	if (flags & NILB_F_UNKNOWN_FLOW_LOCAL)
		return tc_decap6(skb, hdr_len, C_TC_DECAP_UNKNOWN_LOCAL, st);
	if (st)
		st->tc_drops++;
	if ((flags & NILB_F_UNKNOWN_FLOW_RST) && proto == IPPROTO_TCP) {
		struct tcphdr *th = (void *)in6 + l4_off;

		if ((void *)(th + 1) > data_end)
			goto malformed; /* checked by tc_local_match6; for the verifier */
		return tc_reset6(skb, in6, th, in_len - l4_off, hdr_len);
	}
	count(C_TC_DROP_UNKNOWN_FLOW);
	return TC_ACT_SHOT;

malformed:
	count(C_TC_DROP_MALFORMED);
	return TC_ACT_SHOT;
}

/* tc_gue_ipv6_of under outer IPv4; a subprogram: IPv4 never enters it. */
static __noinline int tc_gue_ipv6(struct __sk_buff *skb, __u32 node, __u32 flags)
{
	return tc_gue_ipv6_of(skb, node, flags, 0);
}

/* tc_gue_ipv6_of under outer IPv6. */
static __noinline int tc_gue_ipv6_o6(struct __sk_buff *skb, __u32 flags)
{
	return tc_gue_ipv6_of(skb, 0, flags, 1);
}

/*
 * Second chance for an inner IPv4 packet (in: its header, accepted by
 * gue_parse or gue_parse6) of GUE for this node whose outer checks passed
 * (cluster source, not forged from this node, the GUE header gue): kept
 * if it opens or belongs to a local connection, else forwarded to the
 * next listed hop; at the last hop, unknown_flow decides (docs/design.md
 * "Second chance (TC)"). outer: the outer IPv4 header, or with o6 the
 * outer IPv6 one (an IPv6 cluster network).
 * Returns: the TC verdict (counted).
 */
static __always_inline int tc_gue_in4(struct __sk_buff *skb, const struct nilb_config *cfg,
				      void *outer, struct gue_hdr *gue, struct iphdr *in,
				      void *data_end, const int o6)
{
	struct nilb_service_stats *st;
	struct tc_nat n;
	struct flow4 f;
	__u32 node = cfg->node_addr, hdr_len;
	__u8 next;
	int verdict, vflags;

	vflags = vip_flags(in->daddr);
	if (vflags < 0) {
		count(C_TC_DROP_INNER_NOT_VIP);
		return TC_ACT_SHOT;
	}
	hdr_len = gue_overhead_of(gue->hop_count, o6);

	__builtin_memset(&n, 0, sizeof(n));
	n.node = node;
	verdict = tc_local_match(skb, in, data_end, &f, &n);
	if (verdict == LOCAL_MALFORMED)
		goto malformed;
	if (verdict == LOCAL_UNSUPPORTED) {
		count(C_TC_DROP_UNSUPPORTED);
		return TC_ACT_SHOT;
	}
	/* No backend holds a NAT-only address: only a NAT service's packets,
	 * translated, may reach the stack. */
	if ((vflags & NILB_ADDR_F_NAT_ONLY) && !n.is_nat) {
		count(C_TC_DROP_INNER_NOT_VIP);
		return TC_ACT_SHOT;
	}
	st = n.svc ? service_stats_of(n.svc) : NULL;
	if (verdict >= 0)
		return tc_accept(skb, hdr_len, verdict, st, &n, &f, o6);

	/* Not owned here (LOCAL_UNKNOWN, _UDP_LISTENER or _CLOSED): second
	 * chance if a hop is left. */
	next = gue->next_hop;
	if (next < gue->hop_count) {
		switch (tc_next_hop(outer, gue, next, data_end, node, o6)) {
		case HOP_FORWARDED:
			break;
		case HOP_SELF:
			return tc_accept(skb, hdr_len, C_TC_DECAP_LOOP_GUARD, st, &n, &f, o6);
		case HOP_REFUSED:
			count(C_TC_DROP_BAD_NEXT_HOP);
			return TC_ACT_SHOT;
		default:
			goto malformed;
		}
		count(C_TC_FORWARD);
		if (st)
			st->tc_forward++;
		return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
	}
	/* The last hop: a UDP listener serves what no connected socket owns;
	 * the stack has what a closed TCP socket still matches. */
	if (verdict == LOCAL_UDP_LISTENER || verdict == LOCAL_CLOSED)
		return tc_accept(skb, hdr_len,
				 in->protocol == IPPROTO_ICMP	    ? C_TC_DECAP_ICMP
				 : verdict == LOCAL_UDP_LISTENER ? C_TC_DECAP_UDP
								 : C_TC_DECAP_TIME_WAIT,
				 st, &n, &f, o6);
	if (cfg->flags & NILB_F_UNKNOWN_FLOW_LOCAL)
		return tc_accept(skb, hdr_len, C_TC_DECAP_UNKNOWN_LOCAL, st, &n, &f, o6);
	if (st)
		st->tc_drops++;
	if ((cfg->flags & NILB_F_UNKNOWN_FLOW_RST) && in->protocol == IPPROTO_TCP)
		return tc_reset(skb, in, data_end, hdr_len, o6);
	count(C_TC_DROP_UNKNOWN_FLOW);
	return TC_ACT_SHOT;

malformed:
	count(C_TC_DROP_MALFORMED);
	return TC_ACT_SHOT;
}

/*
 * An IPv6 cluster network's frame to this node whose outer IPv6 header is
 * followed by an extension header (0, 43, 60) or a fragment header (44)
 * rather than UDP: nilb never sends either, so UDP to the GUE port behind
 * them is malformed GUE (the IPv4 twin: outer options or an outer fragment),
 * dropped before the stack sees it (which would answer a forged source
 * with ICMPv6 port unreachable, or hand it to any socket on the port
 * without the cluster-source check). A first fragment is judged by the UDP
 * header it carries; a later one cannot be, and passes like anything else.
 * A subprogram: only such IPv6 frames enter it.
 * Returns: TC_ACT_SHOT (counted: C_TC_DROP_MALFORMED) or TC_ACT_OK (not GUE
 * for this node; counted: C_TC_PASS_OTHER).
 */
static __noinline int tc_outer6_ext(struct __sk_buff *skb, __u16 gue_port)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ipv6hdr *oip6 = data + sizeof(struct ethhdr);
	__u32 *node6 = get_node6(), l4_off = 0, payload_len;
	struct udphdr *udp = NULL;
	__u8 proto = 0, *frag;

	if (!node6 || (void *)(oip6 + 1) > data_end ||
	    !addr6_eq((__u32 *)&oip6->daddr, node6))
		goto pass;
	payload_len = bpf_ntohs(oip6->payload_len);
	switch (ipv6_walk(oip6, data_end, payload_len, &l4_off, &proto)) {
	case IP6_L4:
		if (proto != IPPROTO_UDP || l4_off > sizeof(*oip6) + NILB_IPV6_MAX_EXT * 2048)
			goto pass;
		udp = (void *)oip6 + l4_off;
		break;
	case IP6_FRAGMENT:
		/* A fragment header right after the IPv6 header, first
		 * fragment (offset 0) of UDP. */
		frag = (void *)(oip6 + 1);
		if (oip6->nexthdr != NEXTHDR_FRAGMENT || (void *)(frag + 8) > data_end ||
		    frag[0] != IPPROTO_UDP || (bpf_ntohs(*(__u16 *)(frag + 2)) & ~7))
			goto pass;
		udp = (void *)(frag + 8);
		break;
	default:
		goto pass;
	}
	if ((void *)(udp + 1) > data_end || udp->dest != gue_port)
		goto pass;
	count(C_TC_DROP_MALFORMED);
	return TC_ACT_SHOT;
pass:
	count(C_TC_PASS_OTHER);
	return TC_ACT_OK;
}

/* tc_gue_o6's answer for inner IPv6 (not a TC verdict). */
#define TC_GUE_INNER_IPV6 0x100
/* tc_gue_o6's answer for our own balancer's marked slow path (not a TC
 * verdict): the caller sends it on (from tc_gue_o6 the FIB lookup's frame
 * would add to its own, over 512 bytes). */
#define TC_GUE_SLOW_PATH6 0x101

/*
 * nilb_tc_second_chance for a frame in outer IPv6 (an IPv6 cluster
 * network: oip6 its IPv6 header, next header UDP to cfg->gue_port, udp its
 * UDP header): our own XDP balancer's marked slow path (from this node's
 * config6 address to elsewhere) is sent on; GUE for this node from a
 * cluster_nodes6 address gets the IPv4 rules (no outer extension headers,
 * gue_parse6 with 16-byte hops) and then tc_gue_in4; anything else
 * passes. A subprogram: IPv4 frames never enter it.
 * Returns: the TC verdict (counted), or TC_GUE_INNER_IPV6 for valid outer
 * headers around an inner IPv6 packet: the caller calls tc_gue_ipv6_o6
 * (from here its frame would add to this one's, over 512 bytes); or
 * TC_GUE_SLOW_PATH6 for our balancer's marked slow path, which the caller
 * sends on (likewise, for tc_slow_path_ifindex's frame).
 */
static __noinline int tc_gue_o6(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct ipv6hdr *oip6 = (void *)(eth + 1);
	struct nilb_config *cfg = get_config();
	__u32 *node6 = get_node6();
	struct nilb_addr6 key;
	struct iphdr *in;

	if (!cfg || !node6 || (void *)(oip6 + 1) > data_end)
		goto pass; /* never: checked by the caller; for the verifier */
	if (!addr6_eq((__u32 *)&oip6->daddr, node6)) {
		/* Our own XDP balancer's slow path (tc's IPv4 twin). */
		if (addr6_eq((__u32 *)&oip6->saddr, node6) && handed_off(eth))
			return TC_GUE_SLOW_PATH6;
		goto pass;
	}
	/* GUE for this node: from here on nothing passes untouched. */
	addr6_copy((__u32 *)key.addr, (__u32 *)&oip6->saddr);
	if (!bpf_map_lookup_elem(&cluster_nodes6, &key)) {
		count(C_TC_DROP_NOT_CLUSTER);
		return TC_ACT_SHOT;
	}
	if (addr6_eq((__u32 *)&oip6->saddr, node6)) {
		if (!handed_off(eth)) {
			count(C_TC_DROP_SELF_UNMARKED);
			return TC_ACT_SHOT;
		}
		unmark(eth);
	}
	switch (gue_parse6(oip6, data_end, skb->len, &in)) {
	case GUE_OK:
		break;
	case GUE_INNER_IPV6:
		return TC_GUE_INNER_IPV6;
	default:
		count(C_TC_DROP_MALFORMED);
		return TC_ACT_SHOT;
	}
	return tc_gue_in4(skb, cfg, oip6, gue_of6(oip6), in, data_end, 1);
pass:
	count(C_TC_PASS_OTHER);
	return TC_ACT_OK;
}

SEC("tc")
int nilb_tc_second_chance(struct __sk_buff *skb)
{
	struct nilb_config *cfg;
	void *data, *data_end;
	struct iphdr *oip, *in;
	struct udphdr *udp;
	__u32 node, saddr, ihl_len;

	tc_linearize_headers(skb);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;

	oip = outer_udp4(data, data_end, &udp, &ihl_len);
	if (!oip) {
		/* An IPv6 cluster network's GUE (outer IPv6, UDP to the GUE
		 * port): tc_gue_o6. */
		struct ipv6hdr *oip6 = outer_udp6(data, data_end, &udp);
		int verdict;

		if (!oip6) {
			/* Outer extension or fragment headers to this node:
			 * malformed GUE if UDP to the GUE port follows. */
			struct ipv6hdr *ip6 = data + sizeof(struct ethhdr);
			__u8 nh;

			if ((void *)(ip6 + 1) > data_end ||
			    ((struct ethhdr *)data)->h_proto != bpf_htons(ETH_P_IPV6))
				goto pass;
			nh = ip6->nexthdr;
			if (nh != NEXTHDR_HOP && nh != NEXTHDR_ROUTING && nh != NEXTHDR_DEST &&
			    nh != NEXTHDR_FRAGMENT)
				goto pass;
			cfg = get_config();
			if (!cfg || !(cfg->flags & NILB_F_CLUSTER_IPV6))
				goto pass;
			return tc_outer6_ext(skb, cfg->gue_port);
		}
		cfg = get_config();
		if (!cfg || !(cfg->flags & NILB_F_CLUSTER_IPV6) || udp->dest != cfg->gue_port)
			goto pass;
		verdict = tc_gue_o6(skb);
		if (verdict == TC_GUE_INNER_IPV6)
			return tc_gue_ipv6_o6(skb, cfg->flags);
		if (verdict == TC_GUE_SLOW_PATH6) {
			count(C_TC_SLOW_PATH_SENT);
			return bpf_redirect_neigh(tc_slow_path_ifindex(skb, 1), NULL, 0, 0);
		}
		return verdict;
	}
	cfg = get_config();
	if (!cfg) {
		count(C_TC_PASS_NO_CONFIG);
		return TC_ACT_OK;
	}
	if (udp->dest != cfg->gue_port)
		goto pass;
	node = cfg->node_addr;
	saddr = oip->saddr;
	/* Packets claiming this node's address must come from our own XDP
	 * program, which marks them with the hand-off mark as their source
	 * MAC (outer_udp4 checked the Ethernet header to lie in the packet);
	 * the mark is read only for those, not for other nodes' GUE. */
	if (oip->daddr != node) {
		/* Our own XDP balancer's slow path: GUE from this node to a hop
		 * whose neighbour entry the FIB lookup could not give. */
		if (saddr == node && ihl_len == sizeof(*oip) && handed_off(data)) {
			__u32 out = tc_slow_path_ifindex(skb, 0);

			count(C_TC_SLOW_PATH_SENT);
			return bpf_redirect_neigh(out, NULL, 0, 0);
		}
		goto pass;
	}

	/* GUE for this node: from here on nothing passes untouched. */
	if (!bpf_map_lookup_elem(&cluster_nodes, &saddr)) {
		count(C_TC_DROP_NOT_CLUSTER);
		return TC_ACT_SHOT;
	}
	if (saddr == node) {
		if (!handed_off(data)) {
			count(C_TC_DROP_SELF_UNMARKED);
			return TC_ACT_SHOT;
		}
		unmark(data);
	}
	/* nilb and glb-director never send outer IP options. */
	if (ihl_len != sizeof(*oip))
		goto malformed;
	switch (gue_parse(oip, data_end, skb->len, &in)) {
	case GUE_OK:
		break;
	case GUE_INNER_IPV6:
		return tc_gue_ipv6(skb, node, cfg->flags);
	default:
		goto malformed;
	}
	return tc_gue_in4(skb, cfg, oip, gue_of(oip), in, data_end, 0);

malformed:
	count(C_TC_DROP_MALFORMED);
	return TC_ACT_SHOT;
pass:
	count(C_TC_PASS_OTHER);
	return TC_ACT_OK;
}

/* ---- NAT mode: replies (bpf/nat.h) --------------------------------------- */

/*
 * Egress of the node's interface: a reply of a NAT flow (TCP or UDP from
 * this node's address and a port in nat_ports, to a client whose flow
 * nat_flows holds) leaves with the service address and port as its
 * source; an ICMP error this node sends about such a flow gets the
 * service address as its source and in its quote. Everything else passes
 * untouched (a node without NAT services returns at the config flag).
 * Returns: TC_ACT_OK (C_NAT_OUT if translated), or TC_ACT_SHOT if the
 * kernel refused a change (counted: C_TC_DROP_ADJUST_FAILED).
 */
SEC("tc")
int nilb_tc_nat_egress(struct __sk_buff *skb)
{
	struct nilb_nat_flow *v;
	struct nilb_nat_key k;
	struct nilb_config *cfg;
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *ip, *q;
	__u32 now, ihl_len;
	__u16 *ports;

	cfg = get_config();
	if (!cfg || !(cfg->flags & NILB_F_NAT))
		return TC_ACT_OK;
	tc_linearize_headers(skb);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    ip->saddr != cfg->node_addr || ip->ihl < 5 || (ip->frag_off & bpf_htons(IP_OFFSET)))
		return TC_ACT_OK;
	ihl_len = ip->ihl * 4;
	__builtin_memset(&k, 0, sizeof(k));
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		ports = (void *)ip + ihl_len;
		if ((void *)(ports + 2) > data_end || !nat_port_listed(ports[0]))
			return TC_ACT_OK;
		/* GUE this node sends (second chance) is never a NAT reply. */
		if (ip->protocol == IPPROTO_UDP && ports[1] == cfg->gue_port)
			return TC_ACT_OK;
		k.client = ip->daddr;
		k.local = ip->saddr;
		k.client_port = ports[1];
		k.local_port = ports[0];
		k.proto = ip->protocol;
		q = NULL;
	} else if (ip->protocol == IPPROTO_ICMP) {
		struct icmphdr *icmp = (void *)ip + ihl_len;

		if ((void *)(icmp + 1) > data_end ||
		    (icmp->type != ICMP_DEST_UNREACH && icmp->type != ICMP_TIME_EXCEEDED &&
		     icmp->type != ICMP_PARAMETERPROB))
			return TC_ACT_OK;
		q = (void *)(icmp + 1);
		if ((void *)(q + 1) > data_end || q->ihl < 5 || q->daddr != ip->saddr ||
		    (q->frag_off & bpf_htons(IP_OFFSET)) ||
		    (q->protocol != IPPROTO_TCP && q->protocol != IPPROTO_UDP))
			return TC_ACT_OK;
		ports = (void *)q + q->ihl * 4;
		if ((void *)(ports + 2) > data_end || !nat_port_listed(ports[1]))
			return TC_ACT_OK;
		k.client = q->saddr;
		k.local = q->daddr;
		k.client_port = ports[0];
		k.local_port = ports[1];
		k.proto = q->protocol;
	} else {
		return TC_ACT_OK;
	}
	v = bpf_map_lookup_elem(&nat_flows, &k);
	if (!v)
		return TC_ACT_OK;
	now = nat_now_s();
	if (v->seen_s != now)
		v->seen_s = now;
	if (q) {
		if (nat_icmp(ip, data_end, 1, k.local, v->vip, k.local_port, v->port))
			return TC_ACT_OK;
	} else if (nat_tc_l4(skb, sizeof(struct ethhdr), sizeof(struct ethhdr) + ihl_len, k.proto, 1,
			     k.local, v->vip, k.local_port, v->port)) {
		count(C_TC_DROP_ADJUST_FAILED);
		return TC_ACT_SHOT;
	}
	count(C_NAT_OUT);
	return TC_ACT_OK;
}

/* Returns: non-zero if a is an IPv4-mapped IPv6 address (::ffff:0:0/96). */
static __always_inline int in6_v4mapped(const struct in6_addr *a)
{
	return a->in6_u.u6_addr32[0] == 0 && a->in6_u.u6_addr32[1] == 0 &&
	       a->in6_u.u6_addr32[2] == bpf_htonl(0x0000ffff);
}

/*
 * The control plane's sweep of nat_flows, TCP part: run as a BPF iterator
 * over this network namespace's TCP sockets (listeners, request sockets,
 * established and TIME_WAIT alike); each socket of a live IPv4 connection
 * (not TIME_WAIT or CLOSE) whose tuple nat_flows holds gets the current
 * sweep number (nat_gc_pass) in its entry. An IPv4 connection is an AF_INET
 * socket's, or an AF_INET6 socket's whose addresses are IPv4-mapped
 * (::ffff:a.b.c.d): the connections a dual-stack listener (bound to ::,
 * e.g. iperf3's) accepts over IPv4, which the IPv4 socket lookups of
 * nat_track find like any other. The control plane then removes the TCP
 * entries the sweep did not stamp and that saw no packet since it began:
 * their connection is over.
 * Returns: 0 (the iterator's contract; it writes no output).
 */
SEC("iter/tcp")
int nilb_nat_sweep_tcp(struct bpf_iter__tcp *ctx)
{
	struct sock_common *skc = ctx->sk_common;
	struct nilb_nat_flow *v;
	struct nilb_nat_key k;
	__u32 zero = 0, *pass;

	if (!skc)
		return 0;
	/* An IPv6 socket's IPv4 connection (both addresses IPv4-mapped): the
	 * kernel keeps its IPv4 addresses in skc_daddr and skc_rcv_saddr too,
	 * the fields an IPv4 lookup (nat_track's) matches it by. Skipping it
	 * left a dual-stack server's idle connection (iperf3's control
	 * connection) unstamped: the sweep removed its entry, and its next
	 * packet was a collision (no entry, a live socket). */
	if (skc->skc_family == AF_INET6) {
		if (!in6_v4mapped(&skc->skc_v6_daddr) || !in6_v4mapped(&skc->skc_v6_rcv_saddr))
			return 0;
	} else if (skc->skc_family != AF_INET) {
		return 0;
	}
	/* A connection in TIME_WAIT (or CLOSE) is over: its entry goes with
	 * the sweep. A late packet of it (a retransmitted FIN) makes a new
	 * entry as it is accepted (nat_track), so its answer is still
	 * translated. Keeping entries for TIME_WAIT would hold one per
	 * connection for 60 s where the server closes first: 840,000 at
	 * 14,000 new connections a second. */
	if (skc->skc_state == BPF_TCP_TIME_WAIT || skc->skc_state == BPF_TCP_CLOSE)
		return 0;
	__builtin_memset(&k, 0, sizeof(k));
	k.client = skc->skc_daddr;
	k.local = skc->skc_rcv_saddr;
	k.client_port = skc->skc_dport;
	k.local_port = bpf_htons(skc->skc_num);
	k.proto = IPPROTO_TCP;
	v = bpf_map_lookup_elem(&nat_flows, &k);
	if (!v)
		return 0;
	pass = bpf_map_lookup_elem(&nat_gc_pass, &zero);
	if (pass)
		v->gc_pass = *pass;
	return 0;
}
