// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * nilb data plane: the XDP balancer and the TC second-chance program, in one
 * object so that they share maps. Packet rules and the GUE wire format are
 * those of DESIGN.md ("Packet path", "GUE wire format (glb-director
 * compatible)"); map layouts are in nilb.h.
 *
 * XDP balancer (nilb_xdp_balancer), on nodes that receive VIP traffic:
 *   IPv4 TCP/UDP to a configured (VIP, port, protocol) -> flow hash -> bucket
 *   -> GUE to the bucket's first hop, listing the second hop. ICMP
 *   "fragmentation needed" about a VIP flow is hashed on the embedded flow.
 *   Fragments and malformed packets to a VIP are dropped. Everything else
 *   passes untouched.
 *
 * TC second chance (nilb_tc_second_chance), clsact ingress on every node:
 *   GUE for this node from a cluster address -> decapsulate if the inner
 *   packet opens or belongs to a local connection, else forward to the next
 *   listed hop; everything else passes untouched.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "nilb.h"
#include "hash.h"

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_ALEN 6
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#define IP_MF 0x2000
#define IP_OFFSET 0x1FFF
#define IP_DF 0x4000
#define AF_INET 2
#define PACKET_HOST 0
#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4
#define GUE_PROTO_IPV4 4
#define GUE_PROTO_IPV6 41

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* ---- maps ---------------------------------------------------------------- */

/* Template of a service's bucket array. BPF_F_INNER_MAP lets each service
 * have its own table size; BPF_F_MMAPABLE lets the control plane fill a new
 * array with one memory copy. Element 0 is struct nilb_table_header. */
struct inner_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct nilb_bucket));
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, NILB_MAX_SERVICES);
	__type(key, struct nilb_service_key);
	__array(values, struct inner_table);
} services SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_CLUSTER_NODES);
	__type(key, __u32);
	__type(value, struct nilb_addr_info);
} cluster_nodes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NILB_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct nilb_addr_info);
} vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nilb_config);
} nilb_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct nilb_service_stats);
} service_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_backend_stats);
} backend_stats SEC(".maps");

/* The control plane's state per backend slot (struct nilb_control_state):
 * pinned so it survives a daemon restart; never read by the programs. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_control_state);
} control_state SEC(".maps");

/* Shared by all CPUs: a racing refresh writes the same answer. Not pinned:
 * a restarted daemon starts with an empty cache. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NILB_MAX_BACKEND_SLOTS);
	__type(key, __u32);
	__type(value, struct nilb_hop_cache);
} hop_cache SEC(".maps");

/* ---- helpers ------------------------------------------------------------- */

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);

	if (v)
		*v += 1;
}

static __always_inline struct nilb_config *get_config(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&nilb_config, &zero);
}

static __always_inline int is_vip(__u32 addr)
{
	return bpf_map_lookup_elem(&vips, &addr) != NULL;
}

static __always_inline int is_fragment(const struct iphdr *iph)
{
	return (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET)) != 0;
}

/* Copy the 12 MAC bytes of an Ethernet header as three 32-bit words (the
 * verifier allows unaligned packet access on this architecture). */
static __always_inline void copy_macs(void *dst, const void *src)
{
	((__u32 *)dst)[0] = ((const __u32 *)src)[0];
	((__u32 *)dst)[1] = ((const __u32 *)src)[1];
	((__u32 *)dst)[2] = ((const __u32 *)src)[2];
}

/* RFC 1624 incremental update of a 16-bit one's complement checksum when a
 * 32-bit field changes from `from` to `to`. */
static __always_inline __u16 csum_replace4(__u16 check, __u32 from, __u32 to)
{
	__u32 sum = (__u16)~check;

	sum += (__u16)~(from & 0xffff);
	sum += (__u16)~(from >> 16);
	sum += to & 0xffff;
	sum += to >> 16;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* ---- XDP balancer -------------------------------------------------------- */

/* Hand a GUE packet built here to our own TC program (XDP_PASS), marked with
 * NILB_XDP_MARK in the XDP metadata so that TC can tell it from a forged
 * packet claiming this node's address. */
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

/* A flow chosen for balancing: the service's table and the hash. */
struct xdp_flow {
	void *table;
	__u32 hash;
	__u8 syn;
};

/*
 * Parse the embedded header of an ICMP "fragmentation needed" sent to a VIP.
 * The embedded packet is one the backend sent (VIP:port -> client:port), so
 * the service key uses its source and the hash the reversed tuple, which is
 * the client's original flow. Returns 0 and fills *flow if it is about a
 * service, 1 if not, -1 if malformed.
 */
static __always_inline int xdp_icmp_flow(void *l4, __u32 l4_len, void *data_end, __u32 seed,
					 struct xdp_flow *flow)
{
	struct icmphdr *icmp = l4;
	struct iphdr *emb;
	__u16 *ports;
	struct nilb_service_key key = {};

	if ((void *)(icmp + 1) > data_end || l4_len < sizeof(*icmp))
		return -1;
	if (icmp->type != ICMP_DEST_UNREACH || icmp->code != ICMP_FRAG_NEEDED)
		return 1;
	emb = (void *)(icmp + 1);
	if ((void *)(emb + 1) > data_end || l4_len < sizeof(*icmp) + sizeof(*emb))
		return -1;
	if (emb->version != 4 || emb->ihl < 5)
		return -1;
	if (emb->protocol != IPPROTO_TCP && emb->protocol != IPPROTO_UDP)
		return 1;
	/* A later fragment carries no ports: nothing to steer by. */
	if (emb->frag_off & bpf_htons(IP_OFFSET))
		return 1;
	ports = (void *)emb + emb->ihl * 4;
	if ((void *)(ports + 2) > data_end ||
	    sizeof(*icmp) + emb->ihl * 4 + 2 * sizeof(__u16) > l4_len)
		return -1;
	key.vip = emb->saddr;
	key.port = ports[0];
	key.proto = emb->protocol;
	flow->table = bpf_map_lookup_elem(&services, &key);
	if (!flow->table)
		return 1;
	flow->hash = nilb_flow_hash(emb->daddr, emb->saddr, ports[1], ports[0],
				    emb->protocol, seed);
	flow->syn = 0;
	return 0;
}

/* Encapsulate the packet (Ethernet + IPv4 at `data`, L3 length inner_len)
 * to the first hop of its bucket and choose the XDP verdict. */
static __always_inline int xdp_encap(struct xdp_md *ctx, const struct nilb_config *cfg,
				     struct xdp_flow *flow, __u32 inner_len, __u32 frame_len)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *oip;
	struct udphdr *udp;
	__u8 *gue;
	struct nilb_table_header *hdr;
	struct nilb_bucket *b;
	struct nilb_backend_stats *bs;
	struct bpf_fib_lookup fib;
	__u8 macs[2 * ETH_ALEN];
	__u32 zero = 0, idx, first, second, nhops, overhead, node, slot, out_len;
	struct nilb_hop_cache *hc;
	__u64 now;
	__u16 gue_port;
	int rc;

	hdr = bpf_map_lookup_elem(flow->table, &zero);
	if (!hdr) {
		count(C_XDP_DROP_NO_BACKEND);
		return XDP_DROP;
	}
	idx = 1 + (flow->hash & hdr->table_mask);
	b = bpf_map_lookup_elem(flow->table, &idx);
	if (!b || !b->first_hop) {
		struct nilb_service_stats *st;

		idx = hdr->service_index;
		st = bpf_map_lookup_elem(&service_stats, &idx);
		if (st)
			st->xdp_drops++;
		count(C_XDP_DROP_NO_BACKEND);
		return XDP_DROP;
	}
	first = b->first_hop;
	second = b->second_hop;
	if (second == first)
		second = 0;
	nhops = second ? 1 : 0;
	overhead = NILB_GUE_BASE_OVERHEAD + 4 * nhops;
	node = cfg->node_addr;
	gue_port = cfg->gue_port;
	slot = b->first_slot;
	bs = bpf_map_lookup_elem(&backend_stats, &slot);
	if (bs) {
		bs->packets++;
		bs->bytes += inner_len;
		bs->syns += flow->syn;
	}

	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	copy_macs(macs, eth);

	/* Cut Ethernet padding so that the inner packet is exactly tot_len. */
	if (frame_len > sizeof(struct ethhdr) + inner_len) {
		if (bpf_xdp_adjust_tail(ctx, (int)(sizeof(struct ethhdr) + inner_len) - (int)frame_len)) {
			count(C_XDP_DROP_ADJUST_FAILED);
			return XDP_DROP;
		}
	}
	if (bpf_xdp_adjust_head(ctx, -(int)overhead)) {
		count(C_XDP_DROP_ADJUST_FAILED);
		return XDP_DROP;
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	oip = (void *)(eth + 1);
	udp = (void *)(oip + 1);
	gue = (void *)(udp + 1);
	/* Outer headers + GUE with one hop + the inner IPv4 header. */
	if ((void *)eth + sizeof(*eth) + NILB_GUE_BASE_OVERHEAD + 4 * NILB_TX_HOPS +
		    sizeof(struct iphdr) > data_end)
		return XDP_DROP;

	eth->h_proto = bpf_htons(ETH_P_IP);

	*(__u16 *)oip = bpf_htons(0x4500); /* version 4, IHL 5, TOS 0 */
	oip->tot_len = bpf_htons(inner_len + overhead);
	oip->id = 0;
	oip->frag_off = bpf_htons(IP_DF);
	oip->ttl = NILB_OUTER_TTL;
	oip->protocol = IPPROTO_UDP;
	oip->saddr = node;
	oip->daddr = first;
	{
		/* The constant words' sum comes precomputed (nilb_config). */
		__u32 sum = cfg->outer_csum_base + oip->tot_len + (first & 0xffff) + (first >> 16);

		sum = (sum & 0xffff) + (sum >> 16);
		sum = (sum & 0xffff) + (sum >> 16);
		oip->check = (__u16)~sum;
	}

	udp->source = bpf_htons(0x8000 | (flow->hash & 0x7fff));
	udp->dest = gue_port;
	udp->len = bpf_htons(inner_len + overhead - sizeof(struct iphdr));
	udp->check = 0;

	/* [version 0, C 0, hlen = 1 + N] [inner protocol] [flags 0 0]
	 * [private type 0 0] [next hop index 0] [hop count N] */
	*(__u32 *)gue = bpf_htonl(((1 + nhops) << 24) | (GUE_PROTO_IPV4 << 16));
	*(__u32 *)(gue + 4) = bpf_htonl(nhops);
	if (nhops)
		*(__u32 *)(gue + 8) = second;

	if (first == node) {
		/* This node is the first hop: hand the GUE packet to our own TC
		 * program, which applies second chance like on any backend. */
		copy_macs(eth, macs);
		return xdp_to_tc(ctx, C_XDP_ENCAP_LOCAL);
	}

	/* Most packets reuse the hop's recent FIB answer: a FIB and
	 * neighbour lookup costs more than all the rest of the path. Larger
	 * packets than the answer was checked for ask the FIB again (MTU). */
	out_len = inner_len + overhead;
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
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	switch (rc) {
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
		/* Decision (DESIGN.md "L2 for the outer packet"): XDP cannot
		 * queue a packet while ARP resolves, so the encapsulated packet
		 * goes up to our TC program, which sends it with
		 * bpf_redirect_neigh (the kernel resolves and queues). The
		 * same slow path serves interfaces without forwarding enabled,
		 * where bpf_fib_lookup refuses to answer. */
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
	struct nilb_service_key key = {};
	struct xdp_flow flow = {};
	struct nilb_config *cfg;
	struct iphdr *iph;
	__u32 ihl_len, tot_len, frame_len;
	void *l4;
	int rc;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP)) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
	}
	iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end) {
		count(C_XDP_PASS_NON_IP);
		return XDP_PASS;
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

	cfg = get_config();
	if (!cfg) {
		count(C_XDP_PASS_NO_CONFIG);
		return XDP_PASS;
	}

	switch (iph->protocol) {
	case IPPROTO_TCP: {
		struct tcphdr *th = l4;

		/* The header must lie within the frame and within tot_len (not
		 * in Ethernet padding); a short one is only a VIP's business. */
		if ((void *)(th + 1) > data_end || ihl_len + sizeof(*th) > tot_len)
			goto malformed;
		key.vip = iph->daddr;
		key.port = th->dest;
		key.proto = IPPROTO_TCP;
		flow.table = bpf_map_lookup_elem(&services, &key);
		if (!flow.table)
			goto not_service;
		flow.hash = nilb_flow_hash(iph->saddr, iph->daddr, th->source, th->dest,
					   IPPROTO_TCP, cfg->hash_seed);
		flow.syn = th->syn && !th->ack;
		break;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end || ihl_len + sizeof(*uh) > tot_len)
			goto malformed;
		key.vip = iph->daddr;
		key.port = uh->dest;
		key.proto = IPPROTO_UDP;
		flow.table = bpf_map_lookup_elem(&services, &key);
		if (!flow.table)
			goto not_service;
		flow.hash = nilb_flow_hash(iph->saddr, iph->daddr, uh->source, uh->dest,
					   IPPROTO_UDP, cfg->hash_seed);
		break;
	}
	case IPPROTO_ICMP:
		if (!is_vip(iph->daddr))
			goto not_service;
		rc = xdp_icmp_flow(l4, tot_len - ihl_len, data_end, cfg->hash_seed, &flow);
		if (rc > 0)
			goto not_service;
		if (rc < 0) {
			count(C_XDP_DROP_MALFORMED);
			return XDP_DROP;
		}
		count(C_XDP_ICMP_FORWARDED);
		break;
	default:
		goto not_service;
	}
	return xdp_encap(ctx, cfg, &flow, tot_len, frame_len);

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


/*
 * Does a local socket make this node the right place for the inner packet?
 * Returns the counter to bump on acceptance, or -1 if not known here.
 * *udp_listener is set when a UDP socket is bound but not connected.
 */
static __always_inline int tc_local_match(struct __sk_buff *skb, struct iphdr *in,
					  void *data_end, int *udp_listener)
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
			return -2;
		if (th->syn && !th->ack)
			return C_TC_DECAP_SYN;
		t.ipv4.saddr = in->saddr;
		t.ipv4.daddr = in->daddr;
		t.ipv4.sport = th->source;
		t.ipv4.dport = th->dest;
		sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return -1;
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
		return -1;
	}
	case IPPROTO_UDP: {
		struct udphdr *uh = l4;
		int connected;

		if ((void *)(uh + 1) > data_end || l4_len < sizeof(*uh))
			return -2;
		t.ipv4.saddr = in->saddr;
		t.ipv4.daddr = in->daddr;
		t.ipv4.sport = uh->source;
		t.ipv4.dport = uh->dest;
		sk = bpf_sk_lookup_udp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return -1;
		connected = sk->dst_port != 0;
		bpf_sk_release(sk);
		if (connected)
			return C_TC_DECAP_UDP;
		*udp_listener = 1;
		return -1;
	}
	case IPPROTO_ICMP: {
		struct icmphdr *icmp = l4;
		struct iphdr *emb;
		__u16 *ports;
		int state;

		if ((void *)(icmp + 1) > data_end || l4_len < sizeof(*icmp))
			return -2;
		if (icmp->type != ICMP_DEST_UNREACH || icmp->code != ICMP_FRAG_NEEDED)
			return -3;
		emb = (void *)(icmp + 1);
		if ((void *)(emb + 1) > data_end || l4_len < sizeof(*icmp) + sizeof(*emb) ||
		    emb->version != 4 || emb->ihl < 5)
			return -2;
		if (emb->frag_off & bpf_htons(IP_OFFSET))
			return -3;
		ports = (void *)emb + emb->ihl * 4;
		if ((void *)(ports + 2) > data_end ||
		    sizeof(*icmp) + emb->ihl * 4 + 2 * sizeof(__u16) > l4_len)
			return -2;
		/* The embedded packet is ours (VIP -> client): look up the
		 * connection from the client's side. */
		t.ipv4.saddr = emb->daddr;
		t.ipv4.daddr = emb->saddr;
		t.ipv4.sport = ports[1];
		t.ipv4.dport = ports[0];
		if (emb->protocol == IPPROTO_TCP) {
			sk = bpf_skc_lookup_tcp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
			if (!sk)
				return -1;
			state = sk->state;
			bpf_sk_release(sk);
			return state == BPF_TCP_LISTEN ? -1 : C_TC_DECAP_ICMP;
		}
		if (emb->protocol == IPPROTO_UDP) {
			int connected;

			sk = bpf_sk_lookup_udp(skb, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
			if (!sk)
				return -1;
			connected = sk->dst_port != 0;
			bpf_sk_release(sk);
			return connected ? C_TC_DECAP_ICMP : -1;
		}
		return -3;
	}
	default:
		return -3;
	}
}

/* Per-service stats of the inner packet's service (TCP/UDP), or NULL. Read
 * before the packet changes; map value pointers stay valid afterwards. */
static __always_inline struct nilb_service_stats *tc_service_stats(struct iphdr *in,
								    void *data_end)
{
	struct nilb_service_key key = {};
	struct nilb_table_header *hdr;
	__u16 *ports = (void *)in + in->ihl * 4;
	__u32 zero = 0, idx;
	void *table;

	if (in->protocol != IPPROTO_TCP && in->protocol != IPPROTO_UDP)
		return NULL;
	if ((void *)(ports + 2) > data_end)
		return NULL;
	key.vip = in->daddr;
	key.port = ports[1];
	key.proto = in->protocol;
	table = bpf_map_lookup_elem(&services, &key);
	if (!table)
		return NULL;
	hdr = bpf_map_lookup_elem(table, &zero);
	if (!hdr)
		return NULL;
	idx = hdr->service_index;
	return bpf_map_lookup_elem(&service_stats, &idx);
}

/* Remove outer IPv4 + UDP + GUE (hdr_len bytes after Ethernet). */
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
 * that the caller reads the context's data pointers once, after it. */
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
	void *data, *data_end, *meta;

	tc_linearize_headers(skb);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	meta = (void *)(long)skb->data_meta;
	struct ethhdr *eth;
	struct nilb_service_stats *st;
	struct nilb_config *cfg;
	struct iphdr *oip, *in;
	struct udphdr *udp;
	__u8 *gue;
	__u32 node, saddr, ihl_len, tot_len, udp_len, gue_len, hop, hdr_len;
	__u8 hlen, nhops, next;
	int verdict, udp_listener = 0, marked;

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
	 * program, which marks them in the XDP metadata. */
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
	udp = (void *)(oip + 1);
	if ((void *)(udp + 1) > data_end)
		goto malformed;
	tot_len = bpf_ntohs(oip->tot_len);
	udp_len = bpf_ntohs(udp->len);
	if (oip->version != 4 || is_fragment(oip) || udp_len != tot_len - sizeof(*oip) ||
	    sizeof(*eth) + tot_len > skb->len)
		goto malformed;
	gue = (void *)(udp + 1);
	if ((void *)(gue + 8) > data_end)
		goto malformed;
	hlen = gue[0] & 0x1f;
	nhops = gue[7];
	next = gue[6];
	/* version 0, C 0, flags 0, private type 0, hlen = 1 + N, index <= N */
	if ((gue[0] & 0xe0) || gue[2] || gue[3] || gue[4] || gue[5] ||
	    nhops > NILB_MAX_GUE_HOPS || hlen != 1 + nhops || next > nhops)
		goto malformed;
	if (gue[1] == GUE_PROTO_IPV6) {
		count(C_TC_DROP_UNSUPPORTED);
		return TC_ACT_SHOT;
	}
	if (gue[1] != GUE_PROTO_IPV4)
		goto malformed;
	gue_len = 8 + 4 * (__u32)nhops;
	hdr_len = sizeof(*oip) + sizeof(*udp) + gue_len;
	in = (void *)gue + gue_len;
	if ((void *)(in + 1) > data_end)
		goto malformed;
	if (in->version != 4 || in->ihl < 5 || is_fragment(in) ||
	    bpf_ntohs(in->tot_len) != udp_len - sizeof(*udp) - gue_len ||
	    bpf_ntohs(in->tot_len) < in->ihl * 4)
		goto malformed;
	if (!is_vip(in->daddr)) {
		count(C_TC_DROP_INNER_NOT_VIP);
		return TC_ACT_SHOT;
	}

	st = tc_service_stats(in, data_end);
	verdict = tc_local_match(skb, in, data_end, &udp_listener);
	if (verdict >= 0)
		return tc_decap(skb, hdr_len, verdict, st);
	if (verdict == -2)
		goto malformed;
	if (verdict == -3) {
		count(C_TC_DROP_UNSUPPORTED);
		return TC_ACT_SHOT;
	}

	/* Not known here. */
	if (next < nhops) {
		__u32 *hops = (void *)(gue + 8);

		if (next >= NILB_MAX_GUE_HOPS || (void *)(hops + next + 1) > data_end)
			goto malformed;
		hop = hops[next];
		if (hop == node)
			return tc_decap(skb, hdr_len, C_TC_DECAP_LOOP_GUARD, st);
		if (!hop)
			goto malformed;
		/* Second chance: outer source := this node, destination := the
		 * next hop, index + 1, IPv4 checksum updated (RFC 1624). */
		oip->check = csum_replace4(oip->check, oip->saddr, node);
		oip->saddr = node;
		oip->check = csum_replace4(oip->check, oip->daddr, hop);
		oip->daddr = hop;
		gue[6] = next + 1;
		count(C_TC_FORWARD);
		if (st)
			st->tc_forward++;
		return bpf_redirect_neigh(skb->ifindex, NULL, 0, 0);
	}
	if (udp_listener)
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
