// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Baselines and probes for nilb's benchmarks (scripts/bench.sh,
 * examples/bench_dataplane.rs). Compiled by scripts/bench.sh with clang; not
 * part of nilb itself.
 *
 *   gen_tail      live-frames driver: restores the frame's first 64 bytes,
 *                 varies the L4 ports, tail-calls the program under test
 *                 (prog array `target`, slot 0). Needed because in
 *                 BPF_F_TEST_XDP_LIVE_FRAMES mode recycled pages keep what
 *                 the previous program wrote into them (nilb's GUE header
 *                 overwrites the original Ethernet header), and it lets every
 *                 program under test see the same, varying, flows.
 *   gen_repeat    repeat-mode driver, where the kernel refuses live frames
 *                 (BPF_PROG_TEST_RUN without them, a large `repeat`: each
 *                 run starts from what the previous one left, nothing is
 *                 transmitted): moves the frame's start back to its
 *                 original length (bpf_xdp_adjust_head by the length the
 *                 program under test added, 0 if none: called on every
 *                 run, so the driver costs the same whatever the target
 *                 did), then does what gen_tail does. Restores programs
 *                 that change the frame's length at its head only (nilb's
 *                 and the baselines' encapsulation); its own cost is
 *                 measured with the empty target xdp_pass_only.
 *   macswap_tx    baseline of the XDP VIP path: swap MACs, XDP_TX.
 *   encap_tx      the nearest thing to the VIP path that does no balancing:
 *                 the same 36 bytes of outer IPv4, UDP and GUE nilb writes
 *                 (lengths and IPv4 checksum per packet) to one fixed hop,
 *                 MACs swapped, XDP_TX; no parsing, hash or lookup.
 *   floor_lb1, floor_lb100  the least a balancer of nilb's kind can do
 *                 (issue 12: how far the VIP path is from it): check that
 *                 the frame is an unfragmented IPv4 TCP packet without IP
 *                 options to the VIP, pick the service by a range check of
 *                 the destination port (1 service at port 80, or 100 at
 *                 ports 1000-1099), nilb's flow hash, one 2-byte read of the
 *                 bucket (4096 per service, in one array as nilb's
 *                 bucket_first), one read of the slot's hop address, then
 *                 the 36 bytes of outer IPv4, UDP and GUE to it with the
 *                 hash's UDP source port, written as nilb writes them (MACs
 *                 and checksum base a word at a time). No length or TCP
 *                 checks, no counters, no statistics, no FIB or neighbour
 *                 cache (MACs swapped), no second hop, no configuration
 *                 read: each is something nilb does.
 *   floor_lb100_64 .. floor_lb100_8192  the 100-service floor with 64 to
 *                 8192 buckets per service (12.5 KiB to 1.6 MiB of 2-byte
 *                 entries): how its cost follows the tables' footprint.
 *   xdp_pass_only baseline of the non-VIP path: XDP_PASS.
 *   count_drop    the counting peer: count per CPU, XDP_DROP.
 *   tc_pass_only  baseline of the TC path: TC_ACT_OK.
 *   drop_only     baseline of a denied packet: XDP_DROP (edge filters).
 *   probe_trie    the alternative design for the global deny list: one
 *                 LPM_TRIE lookup of the source, XDP_DROP on a hit
 *                 (examples/bench_filters.rs compares it with nilb).
 *   probe_sk_lookup  bpf_skc_lookup_tcp + bpf_sk_release of the frame's
 *                 TCP 4-tuple (the backend receive path's socket check).
 *   probe_*       single operations of nilb's fast path, for the cost
 *                 breakdown (run with BPF_PROG_TEST_RUN repeat, packet
 *                 unchanged).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "../../bpf/hash.h"

#define TC_ACT_OK 0
#define AF_INET 2
#define ETH_P_IP 0x0800
#define ENCAP_LEN 36 /* outer IPv4 20 + UDP 8 + GUE 8, no hop listed */
#define L4_OFF 34 /* Ethernet 14 + IPv4 20 */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set from user space (the .bss map, key 0) after load. */
struct gen_cfg {
	__u8 frame[64];    /* the frame's first 64 bytes as built */
	__u32 vary_sport;  /* 1: pseudo-random source port per packet */
	__u32 dport_count; /* > 0: destination port = dport_base + seq % count */
	__u32 dport_base;  /* host order */
	__u32 seq;         /* packets generated */
	/* probe_fib parameters (network order addresses) */
	__u32 fib_src;
	__u32 fib_dst;
	__u32 sink;        /* keeps probe results alive */
	__u16 gue_port;    /* encap_tx: UDP destination port, network order */
	__u16 frame_len;   /* gen_repeat: the frame's length as built, bytes */
};

struct gen_cfg gen;

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rx_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} probe_hash_map SEC(".maps");

struct probe_lpm_key {
	__u32 prefixlen;
	__u32 addr;
};

/* Filled by bench_filters with the same prefixes as nilb's list. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 4000000);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct probe_lpm_key);
	__type(value, __u32);
} probe_trie_map SEC(".maps");

/* gen_tail's and gen_repeat's work: restore the first 64 bytes, vary the
 * ports, tail-call the target. */
static __always_inline int gen_restore_call(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 s, r;

	if (data + 64 > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(data, gen.frame, 64);
	s = gen.seq++;
	if (gen.vary_sport) {
		r = s * 2654435761u;
		*(__u16 *)(data + L4_OFF) = (__u16)(r >> 16);
	}
	if (gen.dport_count)
		*(__u16 *)(data + L4_OFF + 2) = bpf_htons((__u16)(gen.dport_base + s % gen.dport_count));
	bpf_tail_call(ctx, &target, 0);
	return XDP_ABORTED;
}

SEC("xdp")
int gen_tail(struct xdp_md *ctx)
{
	return gen_restore_call(ctx);
}

SEC("xdp")
int gen_repeat(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	if (bpf_xdp_adjust_head(ctx, (int)(data_end - data) - (int)gen.frame_len))
		return XDP_ABORTED;
	return gen_restore_call(ctx);
}

SEC("xdp")
int macswap_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u8 tmp[6];

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, tmp, 6);
	return XDP_TX;
}

SEC("xdp")
int encap_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *oip;
	struct udphdr *udp;
	__u32 *gue, len, sum, i;
	__u16 *w;
	__u8 macs[12];

	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(macs, eth->h_source, 6);
	__builtin_memcpy(macs + 6, eth->h_dest, 6);
	len = (data_end - data) - sizeof(*eth) + ENCAP_LEN;
	if (bpf_xdp_adjust_head(ctx, -ENCAP_LEN))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	oip = (void *)(eth + 1);
	udp = (void *)(oip + 1);
	gue = (void *)(udp + 1);
	if ((void *)(gue + 2) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth, macs, 12);
	eth->h_proto = bpf_htons(ETH_P_IP);
	*(__u16 *)oip = bpf_htons(0x4500);
	oip->tot_len = bpf_htons(len);
	oip->id = 0;
	oip->frag_off = bpf_htons(0x4000);
	oip->ttl = 64;
	oip->protocol = IPPROTO_UDP;
	oip->check = 0;
	oip->saddr = gen.fib_src;
	oip->daddr = gen.fib_dst;
	w = (__u16 *)oip;
	sum = 0;
	for (i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	oip->check = (__u16)~sum;
	udp->source = bpf_htons(0xc000);
	udp->dest = gen.gue_port;
	udp->len = bpf_htons(len - sizeof(*oip));
	udp->check = 0;
	gue[0] = bpf_htonl((1 << 24) | (IPPROTO_IPIP << 16));
	gue[1] = 0;
	return XDP_TX;
}

/* floor_lb: buckets per service (as nilb's default table_size), services
 * at most, and hop slots (filled by examples/bench_dataplane.rs: bucket i
 * of every service holds slot 1 + i % 3, slots 1-3 the bench's backends). */
#define FLOOR_TABLE_BITS 12
#define FLOOR_MAX_BITS 13 /* the largest table of the footprint sweep */
#define FLOOR_SERVICES 100
#define FLOOR_SLOTS 4
#define FLOOR_VIP 0x0a630064 /* 10.99.0.100, the bench's VIP (host order) */

/* Four 2-byte first-hop slots per element, as nilb's bucket_first. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, (FLOOR_SERVICES << FLOOR_MAX_BITS) / 4);
	__type(key, __u32);
	__type(value, __u16[4]);
} floor_first SEC(".maps");

/* The same with 1-byte slots, eight per element (floor_lb100_u8: what a
 * bucket layout of half the bytes would give). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, (FLOOR_SERVICES << FLOOR_TABLE_BITS) / 8);
	__type(key, __u32);
	__type(value, __u8[8]);
} floor_first8 SEC(".maps");

/* Hop slot -> IPv4 address (network order). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FLOOR_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} floor_hops SEC(".maps");

/* The floor balancer for `services` services at destination ports
 * port_base.. (host order), 2^bits buckets each, 1-byte slots (floor_first8)
 * if u8 else 2-byte (floor_first): see the file's head. Returns: XDP_TX,
 * XDP_PASS (not IPv4 TCP without options, or no service), XDP_DROP (no
 * hop). */
static __always_inline int floor_lb(struct xdp_md *ctx, __u32 port_base, __u32 services,
				    __u32 bits, int u8)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1), *oip;
	__u16 *ports = (void *)(iph + 1), *f;
	struct udphdr *udp;
	__u32 *gue, *hop, len, sum, svc, hash, idx, elem, slot, addr, src;
	__u16 macs[6], *m;

	if ((void *)(ports + 2) > data_end || eth->h_proto != bpf_htons(ETH_P_IP) ||
	    *(__u8 *)iph != 0x45 || iph->protocol != IPPROTO_TCP ||
	    iph->daddr != bpf_htonl(FLOOR_VIP) || (iph->frag_off & bpf_htons(0x3fff)))
		return XDP_PASS;
	svc = bpf_ntohs(ports[1]) - port_base;
	if (svc >= services)
		return XDP_PASS;
	hash = nilb_flow_hash(iph->saddr, iph->daddr, ports[0], ports[1], IPPROTO_TCP, 0x5eed);
	idx = (svc << bits) | (hash & ((1 << bits) - 1));
	if (u8) {
		__u8 *f8;

		elem = idx / 8;
		f8 = bpf_map_lookup_elem(&floor_first8, &elem);
		slot = f8 ? f8[idx % 8] : 0;
	} else {
		elem = idx / 4;
		f = bpf_map_lookup_elem(&floor_first, &elem);
		slot = f ? f[idx % 4] : 0;
	}
	hop = bpf_map_lookup_elem(&floor_hops, &slot);
	addr = hop ? *hop : 0;
	if (!addr)
		return XDP_DROP;
	/* The MACs swapped, as 16-bit words: source first, then destination. */
	m = (__u16 *)eth;
	macs[0] = m[3];
	macs[1] = m[4];
	macs[2] = m[5];
	macs[3] = m[0];
	macs[4] = m[1];
	macs[5] = m[2];
	len = (data_end - data) - sizeof(*eth) + ENCAP_LEN;
	if (bpf_xdp_adjust_head(ctx, -ENCAP_LEN))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	oip = (void *)(eth + 1);
	udp = (void *)(oip + 1);
	gue = (void *)(udp + 1);
	if ((void *)(gue + 2) > data_end)
		return XDP_DROP;
	m = (__u16 *)eth;
	m[0] = macs[0];
	m[1] = macs[1];
	m[2] = macs[2];
	m[3] = macs[3];
	m[4] = macs[4];
	m[5] = macs[5];
	eth->h_proto = bpf_htons(ETH_P_IP);
	src = gen.fib_src;
	*(__u16 *)oip = bpf_htons(0x4500);
	oip->tot_len = bpf_htons(len);
	oip->id = 0;
	oip->frag_off = bpf_htons(0x4000);
	oip->ttl = 64;
	oip->protocol = IPPROTO_UDP;
	oip->saddr = src;
	oip->daddr = addr;
	/* The constant words' sum and the per-packet ones (as nilb's
	 * outer_csum_base), each 16-bit word as it sits in memory. */
	sum = bpf_htons(0x4500) + bpf_htons(0x4000) + bpf_htons((64 << 8) | IPPROTO_UDP) +
	      (src & 0xffff) + (src >> 16) + bpf_htons(len) + (addr & 0xffff) + (addr >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	oip->check = (__u16)~sum;
	udp->source = bpf_htons(0x8000 | (hash & 0x7fff));
	udp->dest = gen.gue_port;
	udp->len = bpf_htons(len - sizeof(*oip));
	udp->check = 0;
	gue[0] = bpf_htonl((1 << 24) | (IPPROTO_IPIP << 16));
	gue[1] = 0;
	return XDP_TX;
}

SEC("xdp")
int floor_lb1(struct xdp_md *ctx)
{
	return floor_lb(ctx, 80, 1, FLOOR_TABLE_BITS, 0);
}

SEC("xdp")
int floor_lb100(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, FLOOR_TABLE_BITS, 0);
}

SEC("xdp")
int floor_lb100_u8(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, FLOOR_TABLE_BITS, 1);
}

SEC("xdp")
int floor_lb100_1024(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, 10, 0);
}

/* The footprint sweep: the same floor, 2^6 .. 2^13 buckets per service
 * (with floor_lb100_1024 and floor_lb100). */
SEC("xdp")
int floor_lb100_64(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, 6, 0);
}

SEC("xdp")
int floor_lb100_256(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, 8, 0);
}

SEC("xdp")
int floor_lb100_2048(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, 11, 0);
}

SEC("xdp")
int floor_lb100_8192(struct xdp_md *ctx)
{
	return floor_lb(ctx, 1000, FLOOR_SERVICES, FLOOR_MAX_BITS, 0);
}

SEC("xdp")
int xdp_pass_only(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int count_drop(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&rx_count, &zero);

	if (v)
		*v += 1;
	return XDP_DROP;
}

SEC("tc")
int tc_pass_only(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

SEC("xdp")
int drop_only(struct xdp_md *ctx)
{
	return XDP_DROP;
}

SEC("xdp")
int probe_trie(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + 14;
	struct probe_lpm_key k = { .prefixlen = 32 };
	__u32 *v;

	if ((void *)(iph + 1) > data_end)
		return XDP_ABORTED;
	k.addr = iph->saddr;
	v = bpf_map_lookup_elem(&probe_trie_map, &k);
	if (v) {
		gen.sink += *v;
		return XDP_DROP;
	}
	return XDP_PASS;
}

/* ---- probes: one operation each, packet left unchanged ----------------- */

/* bpf_fib_lookup as nilb does it for the outer packet. */
SEC("xdp")
int probe_fib(struct xdp_md *ctx)
{
	struct bpf_fib_lookup fib = {};
	int rc;

	fib.family = AF_INET;
	fib.l4_protocol = IPPROTO_UDP;
	fib.tot_len = 100;
	fib.ipv4_src = gen.fib_src;
	fib.ipv4_dst = gen.fib_dst;
	fib.ifindex = ctx->ingress_ifindex;
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	gen.sink += fib.dmac[5];
	return rc == BPF_FIB_LKUP_RET_SUCCESS ? XDP_PASS : XDP_DROP;
}

/* nilb's flow hash over the packet's 5-tuple. */
SEC("xdp")
int probe_hash(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + 14;
	__u16 *ports = data + L4_OFF;

	if ((void *)(ports + 2) > data_end)
		return XDP_DROP;
	gen.sink += nilb_flow_hash(iph->saddr, iph->daddr, ports[0], ports[1], iph->protocol, 0x5eed1234);
	return XDP_PASS;
}

/* Grow the headroom by a GUE header with one hop and shrink it back. */
SEC("xdp")
int probe_adjust(struct xdp_md *ctx)
{
	if (bpf_xdp_adjust_head(ctx, -40))
		return XDP_DROP;
	if (bpf_xdp_adjust_head(ctx, 40))
		return XDP_DROP;
	return XDP_PASS;
}

/* One lookup in a HASH map with an 8-byte key (like `services`, which is
 * a hash of maps keyed by {vip, port, proto}), present key. */
SEC("xdp")
int probe_hash_lookup(struct xdp_md *ctx)
{
	__u64 key = 1;
	__u64 *v = bpf_map_lookup_elem(&probe_hash_map, &key);

	if (v)
		gen.sink += (__u32)*v;
	return XDP_PASS;
}

/* The socket check of the backend receive path: bpf_skc_lookup_tcp of
 * the frame's TCP 4-tuple (Ethernet, IPv4 without options, TCP) in this
 * namespace, then bpf_sk_release. XDP_PASS if a socket was found. */
SEC("xdp")
int probe_sk_lookup(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct iphdr *iph = data + 14;
	__u16 *ports = data + L4_OFF;
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk;

	if ((void *)(ports + 2) > data_end)
		return XDP_DROP;
	t.ipv4.saddr = iph->saddr;
	t.ipv4.daddr = iph->daddr;
	t.ipv4.sport = ports[0];
	t.ipv4.dport = ports[1];
	sk = bpf_skc_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_DROP;
	bpf_sk_release(sk);
	return XDP_PASS;
}

/* One per-CPU array lookup and increment (a nilb counter). */
SEC("xdp")
int probe_counter(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&rx_count, &zero);

	if (v)
		*v += 1;
	return XDP_PASS;
}
