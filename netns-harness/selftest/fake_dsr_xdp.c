// SPDX-License-Identifier: GPL-2.0
// Stand-in data plane used ONLY to test the netns harness itself (not nilb).
// XDP: L2 direct-server-return for VIP:80/tcp. bucket = top 10 bits of
// sport * 2654435761; buckets are split between the three harness nodes in
// proportion to W1:W2:W3 (-D at compile time). A packet whose owner is this
// node passes; others get their destination MAC rewritten to the owner's
// (harness MACs are 02:77:00:00:00:1N) and are sent back out with XDP_TX.
// No second chance: moving a bucket resets its connections (which is what the
// harness must detect). TC: a pass-through program, so the harness sees a
// clsact ingress filter to check for after shutdown.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>

#define SEC(n) __attribute__((section(n), used))
#ifndef W1
#define W1 1
#endif
#ifndef W2
#define W2 1
#endif
#ifndef W3
#define W3 2
#endif
#ifndef SELF
#define SELF 1
#endif
#define VIP_BE __builtin_bswap32(0x0a4d0064) /* 10.77.0.100 */
#define PORT_BE __builtin_bswap16(80)
#define TOTAL (W1 + W2 + W3)
#define T1 ((1024 * W1) / TOTAL)
#define T2 ((1024 * (W1 + W2)) / TOTAL)

SEC("xdp")
int fake_dsr(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct tcphdr *tcp;
	unsigned int bucket, owner;

	if ((void *)(eth + 1) > end || eth->h_proto != __builtin_bswap16(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_TCP || ip->daddr != VIP_BE)
		return XDP_PASS;
	tcp = (void *)(ip + 1);
	if ((void *)(tcp + 1) > end || tcp->dest != PORT_BE)
		return XDP_PASS;
	bucket = ((unsigned int)__builtin_bswap16(tcp->source) * 2654435761u) >> 22;
	owner = bucket < T1 ? 1 : (bucket < T2 ? 2 : 3);
	if (owner == SELF)
		return XDP_PASS;
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	eth->h_dest[0] = 0x02; eth->h_dest[1] = 0x77; eth->h_dest[2] = 0;
	eth->h_dest[3] = 0; eth->h_dest[4] = 0; eth->h_dest[5] = 0x10 + owner;
	return XDP_TX;
}

SEC("tc")
int fake_tc(struct __sk_buff *skb)
{
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
