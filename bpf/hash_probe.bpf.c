// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Test-only program: runs nilb_flow_hash (bpf/hash.h) on a struct
 * nilb_hash_probe given as packet data and writes the hash into `out`.
 * tests/hash_identity.rs drives it with BPF_PROG_TEST_RUN to prove that the
 * C hash and src/hash.rs agree bit for bit.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nilb.h"
#include "hash.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int nilb_hash_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_hash_probe *p = data;

	if ((void *)(p + 1) > data_end)
		return XDP_ABORTED;
	p->out = nilb_flow_hash(p->saddr, p->daddr, p->sport, p->dport, p->proto, p->seed);
	return XDP_PASS;
}

/* The same for nilb_flow_hash6 on a struct nilb_hash_probe6. */
SEC("xdp")
int nilb_hash_probe6(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_hash_probe6 *p = data;

	if ((void *)(p + 1) > data_end)
		return XDP_ABORTED;
	p->out = nilb_flow_hash6(p->saddr, p->daddr, p->sport, p->dport, p->proto, p->seed);
	return XDP_PASS;
}
