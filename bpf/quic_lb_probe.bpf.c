// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Test-only programs: the QUIC-LB decoder (bpf/quic_lb.h) on a struct
 * nilb_quic_lb_probe given as packet data, its result written back into the
 * record; and the syscall program that installs AES keys the same way the
 * data plane does. tests/quic_lb_identity.rs drives both with
 * BPF_PROG_TEST_RUN to prove the C decoder and src/quic_lb.rs agree.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nilb.h"
#include "quic_lb.h"

/* The kfuncs take a GPL-only licence. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, struct quic_lb_crypto);
} probe_crypto SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct quic_lb_scratch);
} probe_scratch SEC(".maps");

SEC("syscall")
int quic_lb_probe_set_key(struct nilb_quic_key_args *args)
{
	return quic_lb_install_key(&probe_crypto, args);
}

SEC("xdp")
int quic_lb_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct nilb_quic_lb_probe *p = data;
	struct quic_lb_crypto *c;
	struct quic_lb_scratch *s;
	__u32 zero = 0, idx;
	int r;

	if ((void *)(p + 1) > data_end)
		return XDP_ABORTED;
	s = bpf_map_lookup_elem(&probe_scratch, &zero);
	if (!s)
		return XDP_ABORTED;
	__builtin_memcpy(s->cid, p->cid, sizeof(p->cid));
	idx = p->crypto_index;
	c = bpf_map_lookup_elem(&probe_crypto, &idx);
	r = quic_lb_decode(&p->cfg, c ? c->ctx : NULL, s, p->cid_len);
	p->result = r;
	__builtin_memcpy(p->sid, s->key.sid, sizeof(p->sid));
	return XDP_PASS;
}
