/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * quic_lb.h: the QUIC-LB decoder of the data plane: the server ID a QUIC
 * connection ID carries (draft-ietf-quic-load-balancers-21, the revision
 * src/quic_lb.rs follows; docs/config.md "QUIC-LB"). Twin of
 * `nilb::quic_lb::Config::decode`; tests/quic_lb_identity.rs runs this code
 * (through bpf/quic_lb_probe.bpf.c) against the Rust library on 10,000
 * random connection IDs per configuration.
 *
 * The keyed algorithms use the kernel's crypto through the BPF crypto kfuncs:
 * one `ecb(aes)` context per service, created by a BPF_PROG_TYPE_SYSCALL
 * program (the only program type that may call bpf_crypto_ctx_create) and
 * kept as a kernel pointer (__kptr) in an ARRAY map; the XDP program reads it
 * under RCU and calls bpf_crypto_decrypt / bpf_crypto_encrypt on 16-byte
 * buffers of a per-CPU map value (stack memory is refused for dynptrs).
 *   plaintext:   the server ID is the block's first bytes, no AES
 *   single-pass: one AES-128 decryption of the 16-byte block
 *   four-pass:   three AES-128 encryptions (four when the server ID is
 *                longer than half the block): the Feistel rounds of §5.5.2
 * Maps are the includer's; this header only defines types and functions.
 */
#ifndef NILB_QUIC_LB_H
#define NILB_QUIC_LB_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nilb.h"

/* The BPF crypto kfuncs (Linux 6.10). Weak: on a kernel without them
 * libbpf resolves them to 0 and every call below sits behind
 * quic_lb_crypto_ok(), whose constant false the verifier prunes, so the
 * object still loads there; the keyed algorithms are then off
 * (src/features.rs, docs/design.md "Kernel features"). */
extern struct bpf_crypto_ctx *bpf_crypto_ctx_create(const struct bpf_crypto_params *params,
						    __u32 params__sz, int *err) __ksym __weak;
extern void bpf_crypto_ctx_release(struct bpf_crypto_ctx *ctx) __ksym __weak;
extern int bpf_crypto_encrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src,
			      const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv__nullable) __ksym __weak;
extern int bpf_crypto_decrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src,
			      const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv__nullable) __ksym __weak;

/* Returns: non-zero if this kernel has the crypto kfuncs the keyed
 * algorithms call (a load-time constant). */
static __always_inline int quic_lb_crypto_ok(void)
{
	return bpf_ksym_exists(bpf_crypto_ctx_create) && bpf_ksym_exists(bpf_crypto_ctx_release) &&
	       bpf_ksym_exists(bpf_crypto_encrypt) && bpf_ksym_exists(bpf_crypto_decrypt);
}

/* Value of a map of AES contexts (ARRAY, key: service index). Written only
 * by quic_lb_install_key (a syscall program); NULL: no key. */
struct quic_lb_crypto {
	struct bpf_crypto_ctx __kptr *ctx;
};

/* Per-CPU working memory of one decode (a PERCPU_ARRAY value: the crypto
 * kfuncs take dynptrs over map memory, not over the stack). */
struct quic_lb_scratch {
	__u8 cid[32];    /* in: the connection ID (20 bytes at most); four-pass
			  * writes the plaintext block back over it */
	__u8 left[16];   /* four-pass halves */
	__u8 right[16];
	__u8 blk[16];    /* AES input; quic_lb_cid's copy of the header before */
	__u8 res[16];    /* AES output */
	struct nilb_quic_sid_key key; /* out: service index + server ID */
};

/*
 * Create an ecb(aes) context for args->key and store it at args->index of
 * `crypto` (an ARRAY of struct quic_lb_crypto), releasing the one it
 * replaces; with args->clear, only remove the context there. Syscall
 * programs only. args->status: 0 done, else a negative errno (-ENOENT:
 * index outside the map; -EOPNOTSUPP: no crypto kfuncs in this kernel;
 * the creation's error otherwise).
 * Returns: 0.
 */
static __always_inline int quic_lb_install_key(void *crypto, struct nilb_quic_key_args *args)
{
	struct bpf_crypto_params params = {
		.type = "skcipher",
		.algo = "ecb(aes)",
		.key_len = NILB_QUIC_KEY_LEN,
	};
	struct bpf_crypto_ctx *cc = NULL, *old;
	struct quic_lb_crypto *v;
	__u32 index = args->index;
	int err = 0;

	if (!quic_lb_crypto_ok()) {
		args->status = -95; /* -EOPNOTSUPP */
		return 0;
	}
	v = bpf_map_lookup_elem(crypto, &index);
	if (!v) {
		args->status = -2; /* -ENOENT */
		return 0;
	}
	if (!args->clear) {
		__builtin_memcpy(params.key, args->key, NILB_QUIC_KEY_LEN);
		cc = bpf_crypto_ctx_create(&params, sizeof(params), &err);
		if (!cc) {
			args->status = err ? err : -22; /* -EINVAL */
			return 0;
		}
	}
	old = bpf_kptr_xchg(&v->ctx, cc);
	if (old)
		bpf_crypto_ctx_release(old);
	args->status = 0;
	return 0;
}

/* One Feistel round (§5.4.2): dst ^= AES(expand(len, pass, src)) over the
 * first `half` bytes; to_left: src is the right half, dst the left.
 * Returns: 0, or the crypto kfunc's error. */
static __always_inline int quic_lb_round(struct bpf_crypto_ctx *cc, struct quic_lb_scratch *s,
					 int to_left, __u32 half, __u8 len, __u8 pass)
{
	struct bpf_dynptr in, out;
	__u8 *src = to_left ? s->right : s->left;
	__u8 *dst = to_left ? s->left : s->right;
	int err;

	__builtin_memset(s->blk, 0, 16);
#pragma unroll
	for (int i = 0; i < 10; i++)
		if (i < half)
			s->blk[i] = src[i];
	s->blk[14] = len;
	s->blk[15] = pass;
	bpf_dynptr_from_mem(s->blk, 16, 0, &in);
	bpf_dynptr_from_mem(s->res, 16, 0, &out);
	err = bpf_crypto_encrypt(cc, &in, &out, NULL);
	if (err)
		return err;
#pragma unroll
	for (int i = 0; i < 10; i++)
		if (i < half)
			dst[i] ^= s->res[i];
	return 0;
}

/*
 * The server ID of the connection ID in s->cid (cid_len bytes; for a short
 * header the service's CID length, for a long header the DCID length field)
 * under configuration q, with AES context cc (NULL: none). Checks as the
 * library's Config::decode (§4.1): codepoint not 0b111 and q's, length at
 * least 1 + server ID + nonce, and with self-encoded lengths the first
 * octet's low 5 bits equal to cid_len - 1.
 * Returns: NILB_QD_OK with s->key.sid holding the server ID (its
 * server_id_len bytes, zeros after), else the enum nilb_quic_decode reason.
 */
static __always_inline int quic_lb_decode(const struct nilb_quic_lb *q, struct bpf_crypto_ctx *cc,
					  struct quic_lb_scratch *s, __u32 cid_len)
{
	__u32 sid_len = q->server_id_len, plen = sid_len + q->nonce_len, half, odd;
	__u8 first = s->cid[0], alg = q->algorithm;
	struct bpf_dynptr in, out;
	int err;

	if (cid_len == 0 || cid_len > NILB_QUIC_MAX_CID_LEN)
		return NILB_QD_BAD_LENGTH;
	if ((first >> 5) == NILB_QUIC_UNROUTABLE_CODEPOINT)
		return NILB_QD_UNROUTABLE;
	if ((first >> 5) != q->codepoint)
		return NILB_QD_OTHER_CODEPOINT;
	if (sid_len < 1 || sid_len > 15 || plen > NILB_QUIC_MAX_CID_LEN - 1 || cid_len < 1 + plen)
		return NILB_QD_BAD_LENGTH;
	if ((q->flags & NILB_QUIC_SELF_ENCODE_LENGTH) && (first & 0x1f) != cid_len - 1)
		return NILB_QD_BAD_LENGTH;

	__builtin_memset(s->key.sid, 0, sizeof(s->key.sid));
	if (alg == NILB_QUIC_PLAINTEXT) {
#pragma unroll
		for (int i = 0; i < 15; i++)
			if (i < sid_len)
				s->key.sid[i] = s->cid[1 + i];
		return NILB_QD_OK;
	}
	/* Without the crypto kfuncs no key can be installed. */
	if (!cc || !quic_lb_crypto_ok())
		return NILB_QD_NO_KEY;
	if (alg == NILB_QUIC_SINGLE_PASS) {
		if (plen != 16)
			return NILB_QD_BAD_LENGTH;
		bpf_dynptr_from_mem(s->cid + 1, 16, 0, &in);
		bpf_dynptr_from_mem(s->res, 16, 0, &out);
		if (bpf_crypto_decrypt(cc, &in, &out, NULL))
			return NILB_QD_CRYPTO_FAILED;
#pragma unroll
		for (int i = 0; i < 15; i++)
			if (i < sid_len)
				s->key.sid[i] = s->res[i];
		return NILB_QD_OK;
	}
	if (alg != NILB_QUIC_FOUR_PASS || plen == 16)
		return NILB_QD_BAD_LENGTH;

	/* Four-pass decryption (§5.5.2): halves of ceil(plen/2) bytes; for an
	 * odd plen they share the middle byte, the left half keeping its high
	 * nibble, the right half its low nibble. */
	half = (plen + 1) / 2;
	odd = plen & 1;
	__builtin_memset(s->left, 0, 16);
	__builtin_memset(s->right, 0, 16);
#pragma unroll
	for (int i = 0; i < 10; i++) {
		if (i < half) {
			__u32 pos = 1 + plen - half + i;

			barrier_var(pos);
			s->left[i] = s->cid[1 + i];
			s->right[i] = s->cid[pos & 31];
		}
	}
	if (odd) {
		s->left[(half - 1) & 15] &= 0xf0;
		s->right[0] &= 0x0f;
	}
	err = quic_lb_round(cc, s, 1, half, plen, 4);
	if (odd)
		s->left[(half - 1) & 15] &= 0xf0;
	err = err ?: quic_lb_round(cc, s, 0, half, plen, 3);
	if (odd)
		s->right[0] &= 0x0f;
	err = err ?: quic_lb_round(cc, s, 1, half, plen, 2);
	if (odd)
		s->left[(half - 1) & 15] &= 0xf0;
	/* A server ID longer than floor(plen/2) reaches into the right half,
	 * which pass 1 recovers. */
	if (!err && sid_len > plen / 2) {
		err = quic_lb_round(cc, s, 0, half, plen, 1);
		if (odd)
			s->right[0] &= 0x0f;
	}
	if (err)
		return NILB_QD_CRYPTO_FAILED;
	/* Join the halves back into s->cid[1..]: the left half, then the
	 * right half from byte half (even) or ORed into the shared byte
	 * half - 1 (odd). barrier_var keeps the index masks, which the
	 * verifier needs and the compiler would drop as provably redundant. */
#pragma unroll
	for (int i = 0; i < 10; i++)
		if (i < half)
			s->cid[1 + i] = s->left[i];
#pragma unroll
	for (int i = 0; i < 10; i++) {
		if (i < half) {
			__u32 pos = 1 + half - odd + i;
			__u8 b = s->right[i];

			if (odd && i == 0)
				b |= s->left[(half - 1) & 15];
			barrier_var(pos);
			s->cid[pos & 31] = b;
		}
	}
#pragma unroll
	for (int i = 0; i < 15; i++)
		if (i < sid_len)
			s->key.sid[i] = s->cid[1 + i];
	return NILB_QD_OK;
}

/* QUIC versions whose long-header packet types quic_lb_cid knows. */
#define QUIC_V1 0x00000001
#define QUIC_V2 0x6b3343cf

/* What quic_lb_cid found in a UDP payload. */
enum quic_lb_cid_result {
	QUIC_CID_FOUND = 0,       /* a destination connection ID to decode */
	QUIC_CID_INITIAL = 1,     /* long-header Initial or 0-RTT (QUIC v1, v2), or a
				   * version whose packet types are unknown here: the
				   * client may have chosen the DCID */
	QUIC_CID_UNPARSEABLE = 2, /* too short for its header, or a DCID over 20 bytes */
};

/*
 * The destination connection ID of the QUIC packet in the UDP payload at
 * [off, end) of the frame (offsets from ctx->data), under QUIC-LB
 * configuration q, copied into s->cid (RFC 8999, the version-independent
 * invariants; RFC 9000 and RFC 9369 for the packet types):
 *   short header (first bit 0): the DCID has the length this configuration
 *     issues, 1 + server ID + nonce, or with self-encoded lengths the first
 *     octet's low 5 bits + 1;
 *   long header (first bit 1): version, DCID length, DCID. Initial and
 *     0-RTT packets (and unknown versions) are not decoded: a client picks
 *     their DCID, which may look like one of ours by chance, and a new
 *     connection must follow the bucket table (weights, drains).
 * Returns: QUIC_CID_FOUND with *cid_len set, else the enum
 * quic_lb_cid_result reason.
 */
static __always_inline int quic_lb_cid(struct xdp_md *ctx, __u32 off, __u32 end,
				       const struct nilb_quic_lb *q, struct quic_lb_scratch *s,
				       __u32 *cid_len)
{
	__u8 *p = s->blk; /* free until quic_lb_decode; not the stack, which
			   * the XDP program has little of left */
	__u32 len, version, type;

	/* The first 6 bytes: a long header's up to its DCID length (a
	 * helper copy: the verifier loses track of packet bounds at offsets
	 * computed from the IPv4 header length). */
	if (off + 6 > end || bpf_xdp_load_bytes(ctx, off, p, 6))
		return QUIC_CID_UNPARSEABLE;
	if (!(p[0] & 0x80)) {
		len = 1 + q->server_id_len + q->nonce_len;
		if (q->flags & NILB_QUIC_SELF_ENCODE_LENGTH)
			len = (p[1] & 0x1f) + 1;
		off += 1;
	} else {
		version = ((__u32)p[1] << 24) | ((__u32)p[2] << 16) | ((__u32)p[3] << 8) | p[4];
		type = (p[0] >> 4) & 3;
		if (version == QUIC_V1) {
			if (type <= 1) /* Initial, 0-RTT */
				return QUIC_CID_INITIAL;
		} else if (version == QUIC_V2) {
			if (type == 1 || type == 2) /* Initial, 0-RTT */
				return QUIC_CID_INITIAL;
		} else {
			return QUIC_CID_INITIAL;
		}
		len = p[5];
		off += 6;
	}
	if (len > NILB_QUIC_MAX_CID_LEN || off + len > end)
		return QUIC_CID_UNPARSEABLE;
	*cid_len = len;
	/* An empty DCID (long header) is QUIC, just not one of ours:
	 * quic_lb_decode reports its length. */
	if (!len)
		return QUIC_CID_FOUND;
	/* 1..20 already; the mask (kept by barrier_var) shows the verifier
	 * that the copy stays within s->cid. */
	barrier_var(len);
	len = ((len - 1) & 0x1f) + 1;
	if (bpf_xdp_load_bytes(ctx, off, s->cid, len))
		return QUIC_CID_UNPARSEABLE;
	return QUIC_CID_FOUND;
}

#endif /* NILB_QUIC_LB_H */
