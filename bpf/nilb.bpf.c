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
 *   icmp.h    ICMP "fragmentation needed" -> the flow it is about
 *   hash.h    the flow hash (twin of src/hash.rs)
 *   filter.h  edge filters: deny and allow lists, rate limits
 *
 * XDP balancer (nilb_xdp_balancer), on nodes that receive VIP traffic:
 *   IPv4 TCP/UDP to a configured (VIP, port, protocol) -> flow hash -> bucket
 *   -> GUE to the bucket's first hop, listing the second hop. ICMP
 *   "fragmentation needed" about a VIP flow is hashed on the embedded flow.
 *   Fragments and malformed packets to a VIP are dropped. Everything else
 *   passes untouched. Edge filters (when loaded) drop what the operator
 *   names: the global stage before the service lookup (every IPv4 packet
 *   but cluster addresses), the service stage after it.
 *
 * TC second chance (nilb_tc_second_chance), clsact ingress on every node:
 *   GUE for this node from a cluster address -> decapsulate if the inner
 *   packet opens or belongs to a local connection, else forward to the next
 *   listed hop; everything else passes untouched.
 */
#include "common.h"
#include "gue.h"
#include "icmp.h"
#include "hash.h"
#include "filter.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- XDP balancer -------------------------------------------------------- */

/* Hand a GUE packet built here to our own TC program (XDP_PASS), marked with
 * NILB_XDP_MARK in the XDP metadata so that TC can tell it from a forged
 * packet claiming this node's address.
 * Returns: XDP_PASS (counted as `counter`), or XDP_DROP if the driver has no
 * room for metadata (counted: C_XDP_DROP_NO_META). */
static __always_inline int xdp_to_tc(struct xdp_md *ctx, __u32 counter)
{
	void *data, *meta;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u32))) {
		count(C_XDP_DROP_NO_META);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	meta = (void *)(long)ctx->data_meta;
	if (meta + sizeof(__u32) > data) {
		count(C_XDP_DROP_NO_META);
		return XDP_DROP;
	}
	*(__u32 *)meta = NILB_XDP_MARK;
	count(counter);
	return XDP_PASS;
}

/*
 * Service lookup and hash of a flow (client -> VIP).
 * Returns: the service's bucket array, with *hash set to the flow hash; or
 * NULL if the flow is for no service.
 */
static __always_inline void *xdp_flow_service(const struct flow4 *flow, __u32 seed, __u32 *hash)
{
	void *table = service_table(flow->daddr, flow->dport, flow->proto);

	if (table)
		*hash = nilb_flow_hash(flow->saddr, flow->daddr, flow->sport, flow->dport,
				       flow->proto, seed);
	return table;
}

/*
 * xdp_flow_service of a TCP or UDP packet (iph; l4: its L4 header, whose
 * first 4 bytes, the ports in both, are checked to lie in the packet).
 * Callers pass proto as a constant, so that the hash folds it.
 * Returns: as xdp_flow_service.
 */
static __always_inline void *xdp_l4_service(const struct iphdr *iph, const __u16 *ports,
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

/* The hops a bucket gives a flow. */
struct xdp_hops {
	__u32 first;   /* IPv4 network order, non-zero */
	__u32 second;  /* IPv4 network order; 0: none, or the same as first */
	__u32 slot;    /* backend slot of (service, first hop) */
};

/*
 * Bucket lookup: the bucket `hash` selects in a service's table (its header
 * gives the size), and the balancer's counters of the bucket's first hop
 * (one packet of inner_len L3 bytes; syn: a TCP SYN without ACK).
 * Returns: 0 with *hops filled, or -1 if there is no first hop (counted:
 * C_XDP_DROP_NO_BACKEND, and the service's xdp_drops unless the table has
 * no header).
 */
static __always_inline int xdp_bucket(void *table, __u32 hash, __u32 inner_len, __u8 syn,
				      struct xdp_hops *hops)
{
	struct nilb_table_header *hdr;
	struct nilb_backend_stats *bs;
	struct nilb_bucket *b;
	__u32 zero = 0, idx, first, second;

	hdr = bpf_map_lookup_elem(table, &zero);
	if (!hdr) {
		count(C_XDP_DROP_NO_BACKEND);
		return -1;
	}
	idx = 1 + (hash & hdr->table_mask);
	b = bpf_map_lookup_elem(table, &idx);
	if (!b || !b->first_hop) {
		struct nilb_service_stats *st = service_stats_of(hdr);

		if (st)
			st->xdp_drops++;
		count(C_XDP_DROP_NO_BACKEND);
		return -1;
	}
	first = b->first_hop;
	second = b->second_hop;
	hops->first = first;
	hops->second = second == first ? 0 : second;
	hops->slot = b->first_slot;
	bs = bpf_map_lookup_elem(&backend_stats, &hops->slot);
	if (bs) {
		bs->packets++;
		bs->bytes += inner_len;
		bs->syns += syn;
	}
	return 0;
}

/*
 * Encapsulation: cut Ethernet padding so that the inner packet is exactly
 * inner_len bytes (frame_len: the frame as received, eth its checked
 * Ethernet header), make room in front and write outer IPv4, UDP and GUE to
 * hops->first, listing hops->second (gue_write). macs receives the frame's
 * destination and source MACs.
 * Returns: the new Ethernet header (MACs still to write), or NULL if the
 * packet could not be resized (counted: C_XDP_DROP_ADJUST_FAILED).
 */
static __always_inline struct ethhdr *xdp_encap(struct xdp_md *ctx, struct ethhdr *eth,
						const struct nilb_config *cfg,
						const struct xdp_hops *hops, __u32 hash,
						__u32 inner_len, __u32 frame_len, __u8 *macs)
{
	void *data_end;

	copy_macs(macs, eth);
	if (frame_len > sizeof(*eth) + inner_len &&
	    bpf_xdp_adjust_tail(ctx, (int)(sizeof(*eth) + inner_len) - (int)frame_len)) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return NULL;
	}
	if (bpf_xdp_adjust_head(ctx, -(int)gue_overhead(hops->second ? 1 : 0))) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return NULL;
	}
	eth = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* Outer headers + GUE with one hop + the inner IPv4 header (always
	 * there after adjust_head succeeded; the verifier needs the check). */
	if ((void *)eth + sizeof(*eth) + NILB_GUE_BASE_OVERHEAD + 4 * NILB_TX_HOPS +
		    sizeof(struct iphdr) > data_end)
		return NULL;
	gue_write(eth, cfg, hops->first, hops->second, hash, inner_len);
	return eth;
}

/*
 * Next-hop resolution for an encapsulated packet (eth, out_len L3 bytes) to
 * hops->first: our own TC program if this node is the first hop; else the
 * slot's hop cache entry if it is fresh; else a FIB lookup (which refreshes
 * the entry); without a neighbour entry or with forwarding off, the slow
 * path through our TC program. Packets that go up to TC keep the original
 * MACs (macs); the others get the next hop's.
 * Returns: the XDP verdict (counted).
 */
static __always_inline int xdp_next_hop(struct xdp_md *ctx, struct ethhdr *eth, __u32 node,
					const struct xdp_hops *hops, __u32 out_len,
					const __u8 *macs)
{
	__u32 first = hops->first, slot = hops->slot;
	struct bpf_fib_lookup fib;
	struct nilb_hop_cache *hc;
	__u64 now;

	if (first == node) {
		/* This node is the first hop: hand the GUE packet to our own TC
		 * program, which applies second chance like on any backend. */
		copy_macs(eth, macs);
		return xdp_to_tc(ctx, C_XDP_ENCAP_LOCAL);
	}

	/* Most packets reuse the hop's recent FIB answer: a FIB and
	 * neighbour lookup costs more than all the rest of the path. Larger
	 * packets than the answer was checked for ask the FIB again (MTU). */
	now = bpf_ktime_get_coarse_ns();
	hc = bpf_map_lookup_elem(&hop_cache, &slot);
	if (hc && hc->hop == first && hc->in_ifindex == ctx->ingress_ifindex &&
	    hc->expires_ns > now && out_len <= hc->max_len) {
		copy_macs(eth, hc->macs);
		if (hc->out_ifindex == ctx->ingress_ifindex) {
			count(C_XDP_ENCAP_TX);
			return XDP_TX;
		}
		count(C_XDP_ENCAP_REDIRECT);
		return bpf_redirect(hc->out_ifindex, 0);
	}

	__builtin_memset(&fib, 0, sizeof(fib));
	fib.family = AF_INET;
	fib.l4_protocol = IPPROTO_UDP;
	fib.tot_len = out_len;
	fib.ipv4_src = node;
	fib.ipv4_dst = first;
	fib.ifindex = ctx->ingress_ifindex;
	switch (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0)) {
	case BPF_FIB_LKUP_RET_SUCCESS:
		__builtin_memcpy(eth->h_dest, fib.dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, fib.smac, ETH_ALEN);
		if (hc) {
			__u32 max_len = out_len;

			if (hc->hop == first && hc->expires_ns > now && hc->max_len > max_len)
				max_len = hc->max_len;
			hc->hop = first;
			hc->in_ifindex = ctx->ingress_ifindex;
			hc->out_ifindex = fib.ifindex;
			hc->max_len = max_len;
			__builtin_memcpy(hc->macs, fib.dmac, ETH_ALEN);
			__builtin_memcpy(hc->macs + ETH_ALEN, fib.smac, ETH_ALEN);
			hc->expires_ns = now + NILB_HOP_CACHE_NS;
		}
		if (fib.ifindex == ctx->ingress_ifindex) {
			count(C_XDP_ENCAP_TX);
			return XDP_TX;
		}
		count(C_XDP_ENCAP_REDIRECT);
		return bpf_redirect(fib.ifindex, 0);
	case BPF_FIB_LKUP_RET_NO_NEIGH:
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		/* XDP cannot queue a packet while ARP resolves, so the
		 * encapsulated packet goes up to our TC program, which sends it
		 * with bpf_redirect_neigh (the kernel resolves and queues). The
		 * same slow path serves interfaces without forwarding enabled,
		 * where bpf_fib_lookup refuses to answer (docs/design.md
		 * "Balancer (XDP)"). */
		copy_macs(eth, macs);
		return xdp_to_tc(ctx, C_XDP_ENCAP_SLOW_PATH);
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		count(C_XDP_DROP_TOO_BIG);
		return XDP_DROP;
	default:
		count(C_XDP_DROP_NO_ROUTE);
		return XDP_DROP;
	}
}

SEC("xdp")
int nilb_xdp_balancer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct nilb_config *cfg;
	struct xdp_hops hops;
	struct flow4 flow;
	struct iphdr *iph;
	__u32 ihl_len, tot_len, frame_len, hash;
	__u8 macs[2 * ETH_ALEN];
	__u8 syn = 0;
	void *l4, *table;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP)) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	cfg = get_config();
	/* Edge filters, global stage: every IPv4 frame, VIP or not, before
	 * anything else is looked at (a denied source costs as little as
	 * possible). Most sources are in no list: their /24's flat entry,
	 * read here, is 0. A /24 a live rule denies, the common case of a
	 * list, is dropped right here. */
	if (cfg && (cfg->flags & NILB_F_FILTER_ANY_GLOBAL)) {
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
		if (!is_vip(iph->daddr))
			goto not_service;
		count(C_XDP_DROP_FRAGMENT);
		return XDP_DROP;
	}
	l4 = (void *)iph + ihl_len;

	if (!cfg) {
		count(C_XDP_PASS_NO_CONFIG);
		return XDP_PASS;
	}

	/* The L4 header must lie within the frame and within tot_len (not in
	 * Ethernet padding); a short one is only a VIP's business. */
	switch (iph->protocol) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end || ihl_len + sizeof(*th) > tot_len)
			goto malformed;
		table = xdp_l4_service(iph, l4, IPPROTO_TCP, cfg->hash_seed, &hash);
		syn = th->syn && !th->ack;
		break;
	}
	case IPPROTO_UDP:
		if (l4 + sizeof(struct udphdr) > data_end ||
		    ihl_len + sizeof(struct udphdr) > tot_len)
			goto malformed;
		table = xdp_l4_service(iph, l4, IPPROTO_UDP, cfg->hash_seed, &hash);
		break;
	case IPPROTO_ICMP:
		if (!is_vip(iph->daddr))
			goto not_service;
		switch (icmp_frag_needed_flow(l4, tot_len - ihl_len, data_end, &flow)) {
		case ICMP_FLOW_OK:
			break;
		case ICMP_FLOW_MALFORMED:
			count(C_XDP_DROP_MALFORMED);
			return XDP_DROP;
		default: /* ICMP_FLOW_NONE, ICMP_FLOW_NONE_SHORT */
			goto not_service;
		}
		table = xdp_flow_service(&flow, cfg->hash_seed, &hash);
		if (!table)
			goto not_service;
		count(C_XDP_ICMP_FORWARDED);
		break;
	default:
		goto not_service;
	}
	if (!table)
		goto not_service;
	/* Edge filters, service stage: the service's own TCP and UDP packets
	 * (an ICMP error comes from a router, not from the client). */
	if ((cfg->flags & NILB_F_FILTER_SERVICES) && iph->protocol != IPPROTO_ICMP &&
	    filter_service(cfg->flags, table, iph->saddr, tot_len, syn))
		return XDP_DROP;
	if (xdp_bucket(table, hash, tot_len, syn, &hops))
		return XDP_DROP;
	eth = xdp_encap(ctx, eth, cfg, &hops, hash, tot_len, frame_len, macs);
	if (!eth)
		return XDP_DROP;
	return xdp_next_hop(ctx, eth, cfg->node_addr, &hops,
			    tot_len + gue_overhead(hops.second ? 1 : 0), macs);

malformed:
	if (is_vip(iph->daddr)) {
		count(C_XDP_DROP_MALFORMED);
		return XDP_DROP;
	}
not_service:
	count(C_XDP_PASS_NOT_SERVICE);
	return XDP_PASS;
}

/* ---- TC second chance ---------------------------------------------------- */

/* Why tc_local_match does not accept a packet. Negative: its acceptances
 * are counters (enum nilb_counter, >= 0). */
enum local_miss {
	/* No local socket has the flow: second chance. */
	LOCAL_UNKNOWN = -1,
	/* Only a UDP socket bound but not connected: accepted at the last hop. */
	LOCAL_UDP_LISTENER = -2,
	/* Inner TCP/UDP/ICMP header cut short, or the ICMP quote invalid. */
	LOCAL_MALFORMED = -3,
	/* Inner protocol not handled: ICMP other than frag-needed, or about a
	 * later fragment or a protocol other than TCP/UDP. */
	LOCAL_UNSUPPORTED = -4,
};

/*
 * Does a local socket make this node the right place for the inner packet
 * (in: checked IPv4 header whose tot_len fills the GUE payload)?
 * Returns: the counter (enum nilb_counter, >= 0) to accept the packet under
 * (C_TC_DECAP_SYN, _ESTABLISHED, _SYNCOOKIE, _UDP or _ICMP), else a
 * negative enum local_miss.
 */
static __always_inline int tc_local_match(struct __sk_buff *skb, struct iphdr *in, void *data_end)
{
	void *l4 = (void *)in + in->ihl * 4;
	/* L4 bytes within the inner packet (its tot_len was checked against
	 * the GUE length, so headers must fit in them, not in what follows). */
	__u32 l4_len = bpf_ntohs(in->tot_len) - in->ihl * 4;
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;

	switch (in->protocol) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;
		int state;

		if ((void *)(th + 1) > data_end || l4_len < sizeof(*th) || th->doff < 5)
			return LOCAL_MALFORMED;
		if (th->syn && !th->ack)
			return C_TC_DECAP_SYN;
		t.ipv4.saddr = in->saddr;
		t.ipv4.daddr = in->daddr;
		t.ipv4.sport = th->source;
		t.ipv4.dport = th->dest;
		sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return LOCAL_UNKNOWN;
		state = sk->state;
		if (state != BPF_TCP_LISTEN) {
			bpf_sk_release(sk);
			return C_TC_DECAP_ESTABLISHED;
		}
		if (th->ack && !th->syn && !th->rst &&
		    bpf_tcp_check_syncookie(sk, in, sizeof(*in), th, sizeof(*th)) == 0) {
			bpf_sk_release(sk);
			return C_TC_DECAP_SYNCOOKIE;
		}
		bpf_sk_release(sk);
		return LOCAL_UNKNOWN;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = l4;
		int connected;

		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh))
			return LOCAL_MALFORMED;
		t.ipv4.saddr = in->saddr;
		t.ipv4.daddr = in->daddr;
		t.ipv4.sport = uh->source;
		t.ipv4.dport = uh->dest;
		sk = bpf_sk_lookup_udp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return LOCAL_UNKNOWN;
		connected = sk->dst_port != 0;
		bpf_sk_release(sk);
		return connected ? C_TC_DECAP_UDP : LOCAL_UDP_LISTENER;
	}
	case IPPROTO_ICMP: {
		struct flow4 f;
		int state, connected;

		switch (icmp_frag_needed_flow(l4, l4_len, data_end, &f)) {
		case ICMP_FLOW_OK:
			break;
		case ICMP_FLOW_NONE:
			return LOCAL_UNSUPPORTED;
		default: /* ICMP_FLOW_MALFORMED, ICMP_FLOW_NONE_SHORT */
			return LOCAL_MALFORMED;
		}
		/* The quoted packet is ours (VIP -> client): the connection
		 * seen from the client's side. */
		t.ipv4.saddr = f.saddr;
		t.ipv4.daddr = f.daddr;
		t.ipv4.sport = f.sport;
		t.ipv4.dport = f.dport;
		if (f.proto == IPPROTO_TCP) {
			sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
			if (!sk)
				return LOCAL_UNKNOWN;
			state = sk->state;
			bpf_sk_release(sk);
			return state == BPF_TCP_LISTEN ? LOCAL_UNKNOWN : C_TC_DECAP_ICMP;
		}
		sk = bpf_sk_lookup_udp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return LOCAL_UNKNOWN;
		connected = sk->dst_port != 0;
		bpf_sk_release(sk);
		return connected ? C_TC_DECAP_ICMP : LOCAL_UNKNOWN;
	}
	default:
		return LOCAL_UNSUPPORTED;
	}
}

/* Per-service stats of the inner packet's service (TCP/UDP). Read before
 * the packet changes; map value pointers stay valid afterwards.
 * Returns: the service's counters, or NULL if the inner packet belongs to
 * no service. */
static __always_inline struct nilb_service_stats *tc_service_stats(struct iphdr *in,
								    void *data_end)
{
	__u16 *ports = (void *)in + in->ihl * 4;
	struct nilb_table_header *hdr;
	__u32 zero = 0;
	void *table;

	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return NULL;
	if ((void *)(ports + 2) > data_end)
		return NULL;
	table = service_table(in->daddr, ports[1], in->protocol);
	if (!table)
		return NULL;
	hdr = bpf_map_lookup_elem(table, &zero);
	if (!hdr)
		return NULL;
	return service_stats_of(hdr);
}

/* Remove outer IPv4 + UDP + GUE (hdr_len bytes after Ethernet) and count
 * the packet as `counter` (and in st's tc_decap if st).
 * Returns: TC_ACT_OK, or TC_ACT_SHOT if the kernel refused (counted:
 * C_TC_DROP_ADJUST_FAILED). */
static __always_inline int tc_decap(struct __sk_buff *skb, __u32 hdr_len, __u32 counter,
				    struct nilb_service_stats *st)
{
	if (bpf_skb_adjust_room(skb, -(__s32)hdr_len, BPF_ADJ_ROOM_MAC, 0)) {
		count(C_TC_DROP_ADJUST_FAILED);
		return TC_ACT_SHOT;
	}
	count(counter);
	if (st)
		st->tc_decap++;
	return TC_ACT_OK;
}

/* Bytes of headers the TC program reads: Ethernet, outer IPv4, UDP, GUE with
 * NILB_MAX_GUE_HOPS hops, inner IPv4 with options, TCP. */
#define TC_HEADERS_LEN (14 + 20 + 8 + 8 + 4 * NILB_MAX_GUE_HOPS + 60 + 20)

/* Some drivers leave only part of the headers in the linear area: make them
 * directly readable (rarely needed; a no-op otherwise). A subprogram, so
 * that the caller reads the context's data pointers once, after it.
 * Returns: 0, or bpf_skb_pull_data's error (ignored: the bounds checks that
 * follow see what is readable). */
static __noinline int tc_linearize_headers(struct __sk_buff *skb)
{
	__u32 linear = skb->data_end - skb->data;

	if (linear < TC_HEADERS_LEN && linear < skb->len)
		return bpf_skb_pull_data(skb, skb->len < TC_HEADERS_LEN ? skb->len : TC_HEADERS_LEN);
	return 0;
}

SEC("tc")
int nilb_tc_second_chance(struct __sk_buff *skb)
{
	struct nilb_service_stats *st;
	struct nilb_config *cfg;
	void *data, *data_end, *meta;
	struct ethhdr *eth;
	struct iphdr *oip, *in;
	struct udphdr *udp;
	struct gue_hdr *gue;
	__u32 node, saddr, ihl_len, hdr_len, hop, *hop_at;
	__u8 next;
	int verdict, marked;

	tc_linearize_headers(skb);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;

	eth = data;
	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		goto pass;
	oip = (void *)(eth + 1);
	if ((void *)(oip + 1) > data_end || oip->protocol != IPPROTO_UDP)
		goto pass;
	ihl_len = oip->ihl * 4;
	if (ihl_len < sizeof(*oip))
		goto pass; /* not a valid IPv4 header: the stack drops it */
	udp = (void *)oip + ihl_len;
	if ((void *)(udp + 1) > data_end)
		goto pass;
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
	 * program, which marks them in the XDP metadata. (Read here, not
	 * with data: fewer registers live on the path of other traffic.) */
	meta = (void *)(long)skb->data_meta;
	marked = meta + sizeof(__u32) <= data && *(__u32 *)meta == NILB_XDP_MARK;
	if (oip->daddr != node) {
		/* Our own XDP balancer's slow path: GUE from this node to a hop
		 * whose neighbour entry the FIB lookup could not give. */
		if (saddr == node && marked && ihl_len == sizeof(*oip)) {
			count(C_TC_SLOW_PATH_SENT);
			return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
		}
		goto pass;
	}

	/* GUE for this node: from here on nothing passes untouched. */
	if (!bpf_map_lookup_elem(&cluster_nodes, &saddr)) {
		count(C_TC_DROP_NOT_CLUSTER);
		return TC_ACT_SHOT;
	}
	if (saddr == node && !marked) {
		count(C_TC_DROP_SELF_UNMARKED);
		return TC_ACT_SHOT;
	}
	/* nilb and glb-director never send outer IP options. */
	if (ihl_len != sizeof(*oip))
		goto malformed;
	switch (gue_parse(oip, data_end, skb->len, &in)) {
	case GUE_OK:
		break;
	case GUE_INNER_IPV6:
		count(C_TC_DROP_UNSUPPORTED);
		return TC_ACT_SHOT;
	default:
		goto malformed;
	}
	if (!is_vip(in->daddr)) {
		count(C_TC_DROP_INNER_NOT_VIP);
		return TC_ACT_SHOT;
	}
	gue = gue_of(oip);
	hdr_len = gue_encap_len(gue);

	st = tc_service_stats(in, data_end);
	verdict = tc_local_match(skb, in, data_end);
	if (verdict >= 0)
		return tc_decap(skb, hdr_len, verdict, st);
	if (verdict == LOCAL_MALFORMED)
		goto malformed;
	if (verdict == LOCAL_UNSUPPORTED) {
		count(C_TC_DROP_UNSUPPORTED);
		return TC_ACT_SHOT;
	}

	/* Not known here (LOCAL_UNKNOWN or LOCAL_UDP_LISTENER): second chance
	 * if a hop is left. */
	next = gue->next_hop;
	if (next < gue->hop_count) {
		hop_at = gue_hop(gue, next, data_end);
		if (!hop_at)
			goto malformed;
		hop = *hop_at;
		if (hop == node)
			return tc_decap(skb, hdr_len, C_TC_DECAP_LOOP_GUARD, st);
		if (!hop)
			goto malformed;
		gue_forward(oip, gue, next, node, hop);
		count(C_TC_FORWARD);
		if (st)
			st->tc_forward++;
		return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
	}
	if (verdict == LOCAL_UDP_LISTENER)
		return tc_decap(skb, hdr_len, C_TC_DECAP_UDP, st);
	if (cfg->flags & NILB_F_UNKNOWN_FLOW_LOCAL)
		return tc_decap(skb, hdr_len, C_TC_DECAP_UNKNOWN_LOCAL, st);
	count(C_TC_DROP_UNKNOWN_FLOW);
	if (st)
		st->tc_drops++;
	return TC_ACT_SHOT;

malformed:
	count(C_TC_DROP_MALFORMED);
	return TC_ACT_SHOT;
pass:
	count(C_TC_PASS_OTHER);
	return TC_ACT_OK;
}
