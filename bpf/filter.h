/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * filter.h: the XDP balancer's edge filters (docs/design.md "Edge
 * filters"): the global stage (every IPv4 packet, before the service
 * lookup: the global prefix table, then global rate limits) and the service
 * stage (a service's TCP and UDP packets, after the service lookup: its
 * allow and deny prefixes, then its rate limits). Each stage answers
 * "drop" or "go on"; drops, would-be drops of dry-run rules and cluster
 * exemptions are counted per rule (filter_stats) and globally (counters).
 *
 * Cost when no filter is loaded: one test of nilb_config.flags per stage.
 */
#ifndef NILB_FILTER_H
#define NILB_FILTER_H

#include "common.h"

#define NILB_F_FILTER_ANY_GLOBAL (NILB_F_FILTER_GLOBAL_LIST | NILB_F_FILTER_GLOBAL_RATE)

/* Returns: the live filter generation (0 or 1) named by config flags. */
static __always_inline __u32 filter_gen(__u32 flags)
{
	return (flags & NILB_F_FILTER_GEN1) ? 1 : 0;
}

/* Returns: non-zero if saddr (network order) is a cluster address. */
static __always_inline int is_cluster(__u32 saddr)
{
	return bpf_map_lookup_elem(&cluster_nodes, &saddr) != NULL;
}

/* Add one packet of len L3 bytes to rule rid's counters.
 * Returns: nothing. */
static __always_inline void filter_count(__u32 rid, __u32 len)
{
	struct nilb_filter_stats *st = bpf_map_lookup_elem(&filter_stats, &rid);

	if (st) {
		st->packets++;
		st->bytes += len;
	}
}

/* Look addr (network order) up in one bucket of a long table.
 * Returns: its verdict word, or 0 if the bucket does not hold it. */
static __always_inline __u32 filter_bucket_find(const struct nilb_filter_bucket *b, __u32 addr)
{
#pragma unroll
	for (int i = 0; i < NILB_FILTER_BUCKET_SLOTS; i++)
		if (b->addr[i] == addr && b->verdict[i])
			return b->verdict[i];
	return 0;
}

/* The flat-table entry of saddr's /24 (network order) in generation gen.
 * Returns: the entry (NILB_FV_FLAT_*), 0 if none or no table. */
static __always_inline __u32 filter_flat_entry(__u32 gen, __u32 saddr)
{
	__u32 slash24 = bpf_ntohl(saddr) >> 8, idx = slash24 >> 2;
	void *flat;
	__u64 *e;

	flat = bpf_map_lookup_elem(&filter_flat, &gen);
	if (!flat)
		return 0;
	e = bpf_map_lookup_elem(flat, &idx);
	if (!e)
		return 0;
	return (__u16)(*e >> (16 * (slash24 & 3)));
}

/* Look saddr (network order) up in the long table `lng` of
 * 2^(32 - shift) buckets: its first candidate bucket, then its second.
 * Returns: its verdict word, or 0 if the table does not hold it. */
#define FILTER_LONG_FIND(lng, saddr, shift, out)                                \
	do {                                                                    \
		__u32 __i = ((saddr) * (__u32)NILB_FH_MUL1) >> (shift);          \
		const struct nilb_filter_bucket *__b = bpf_map_lookup_elem(lng, &__i); \
		(out) = __b ? filter_bucket_find(__b, saddr) : 0;                \
		if (!(out)) {                                                   \
			__i = ((saddr) * (__u32)NILB_FH_MUL2) >> (shift);        \
			__b = bpf_map_lookup_elem(lng, &__i);                   \
			(out) = __b ? filter_bucket_find(__b, saddr) : 0;        \
		}                                                               \
	} while (0)

/*
 * Verdict word of the global prefix table of the live generation (flags:
 * nilb_config.flags) for saddr (network order) whose /24 has the non-zero
 * flat entry `entry`: when that /24 has longer prefixes, the address's own
 * entry in the long table if it has one; else the entry's verdict. The
 * two sizes of long table have a lookup each (a fixed map per call site is
 * what lets the verifier inline it).
 * Returns: the verdict word (0: no rule matches).
 */
static __always_inline __u32 filter_global_verdict(__u32 flags, __u32 saddr, __u32 entry)
{
	__u32 gen = filter_gen(flags), idx, v = 0, *w;
	void *lng;

	if (entry & NILB_FV_FLAT_EXT) {
		if (flags & NILB_F_FILTER_LONG_LARGE) {
			lng = bpf_map_lookup_elem(&filter_long, &gen);
			if (lng)
				FILTER_LONG_FIND(lng, saddr, 32 - NILB_FILTER_LONG_LARGE_BITS, v);
		} else {
			lng = bpf_map_lookup_elem(&filter_long_small, &gen);
			if (lng)
				FILTER_LONG_FIND(lng, saddr, 32 - NILB_FILTER_LONG_SMALL_BITS, v);
		}
		if (v)
			return v;
	}
	if (entry & NILB_FV_FLAT_DIRECT)
		return entry & NILB_FV_RULE_MASK;
	if (!(entry & NILB_FV_FLAT_INDEX))
		return 0;
	idx = gen * NILB_FILTER_VERDICTS + (entry & NILB_FV_FLAT_INDEX);
	w = bpf_map_lookup_elem(&filter_verdicts, &idx);
	return w ? *w : 0;
}

/*
 * Act on verdict word v for a packet from saddr of len L3 bytes: count a
 * dry-run rule's would-be drop, then drop if a live rule says so. A rule
 * marked to cover cluster addresses never acts on one (counted:
 * C_XDP_FILTER_EXEMPT).
 * Returns: 1 to drop (counted: C_XDP_DROP_FILTER and the rule), else 0.
 */
static __always_inline int filter_act(__u32 v, __u32 saddr, __u32 len)
{
	__u32 dry = v >> NILB_FV_DRY_SHIFT, rid = v & NILB_FV_RULE_MASK;

	/* The common case first: a live rule that drops, nothing else. */
	if (!(v & ~(__u32)NILB_FV_RULE_MASK)) {
		if (!rid)
			return 0;
		filter_count(rid, len);
		count(C_XDP_DROP_FILTER);
		return 1;
	}
	if (dry & NILB_FV_RULE_MASK) {
		if ((dry & NILB_FV_COVERS_CLUSTER) && is_cluster(saddr)) {
			count(C_XDP_FILTER_EXEMPT);
		} else {
			filter_count(dry & NILB_FV_RULE_MASK, len);
			count(C_XDP_FILTER_DRY_RUN);
		}
	}
	if (!rid)
		return 0;
	if ((v & NILB_FV_COVERS_CLUSTER) && is_cluster(saddr)) {
		count(C_XDP_FILTER_EXEMPT);
		return 0;
	}
	filter_count(rid, len);
	count(C_XDP_DROP_FILTER);
	return 1;
}

/*
 * One rate-limit rule (rid) for a packet from saddr (network order) of
 * len L3 bytes; syn: a TCP SYN without ACK; exempt: the global stage, where
 * cluster addresses are never limited. The source's state (key: rule and
 * the source under the rule's mask) is a GCRA per dimension: a packet
 * conforms if the bucket's theoretical arrival time is at most the burst
 * tolerance ahead of now; a conforming packet moves it on by one interval,
 * a limited one leaves it alone. A subprogram: up to NILB_FILTER_RATE_RULES
 * calls per stage share one copy.
 * Returns: 1 to drop (counted: C_XDP_DROP_RATE_LIMIT, the rule and the
 * source's state), else 0 (a dry-run rule counts C_XDP_FILTER_DRY_RUN).
 */
static __noinline int filter_rate_limit(__u32 rid, __u32 saddr, __u32 len, __u32 syn, __u32 exempt)
{
	struct nilb_rate_state init = {}, *st;
	struct nilb_rate_key key = {};
	struct nilb_filter_rule *r;
	__u64 now, pt = 0, stt = 0;
	__u32 zero = 0;
	int limited = 0;
	void *lru;

	r = bpf_map_lookup_elem(&filter_rules, &rid);
	lru = bpf_map_lookup_elem(&filter_rate_lru, &zero);
	if (!r || !lru)
		return 0;
	key.rule = rid;
	key.family = AF_INET;
	key.addr[0] = saddr & r->mask_v4;
	now = bpf_ktime_get_ns();
	st = bpf_map_lookup_elem(lru, &key);
	if (!st) {
		init.pkt_tat_ns = now;
		init.syn_tat_ns = now;
		bpf_map_update_elem(lru, &key, &init, BPF_NOEXIST);
		st = bpf_map_lookup_elem(lru, &key);
		if (!st)
			return 0;
	}
	if (r->pkt_interval_ns) {
		pt = st->pkt_tat_ns;
		if (pt < now)
			pt = now;
		if (pt - now > r->pkt_tolerance_ns)
			limited = 1;
	}
	if (syn && r->syn_interval_ns) {
		stt = st->syn_tat_ns;
		if (stt < now)
			stt = now;
		if (stt - now > r->syn_tolerance_ns)
			limited = 1;
	}
	if (!limited) {
		if (r->pkt_interval_ns)
			st->pkt_tat_ns = pt + r->pkt_interval_ns;
		if (syn && r->syn_interval_ns)
			st->syn_tat_ns = stt + r->syn_interval_ns;
		return 0;
	}
	if (exempt && is_cluster(saddr)) {
		count(C_XDP_FILTER_EXEMPT);
		return 0;
	}
	__sync_fetch_and_add(&st->dropped, 1);
	__sync_fetch_and_add(&st->dropped_bytes, len);
	filter_count(rid, len);
	if (r->flags & NILB_FR_DRY_RUN) {
		count(C_XDP_FILTER_DRY_RUN);
		return 0;
	}
	count(C_XDP_DROP_RATE_LIMIT);
	return 1;
}

/*
 * The rate limits of scope sc, in order; the first that drops decides.
 * Returns: 1 to drop, else 0.
 */
static __always_inline int filter_rates(const struct nilb_filter_scope *sc, __u32 saddr,
					__u32 len, __u32 syn, __u32 exempt)
{
	__u16 r0 = sc->rate[0], r1 = sc->rate[1], r2 = sc->rate[2], r3 = sc->rate[3];

	if (!r0)
		return 0;
	if (filter_rate_limit(r0, saddr, len, syn, exempt))
		return 1;
	if (!r1)
		return 0;
	if (filter_rate_limit(r1, saddr, len, syn, exempt))
		return 1;
	if (!r2)
		return 0;
	if (filter_rate_limit(r2, saddr, len, syn, exempt))
		return 1;
	if (!r3)
		return 0;
	return filter_rate_limit(r3, saddr, len, syn, exempt);
}

/*
 * Global stage for an IPv4 header iph (its 20 bytes checked to lie in the
 * frame, nothing else; tot_len: its total length field, the bytes counted;
 * the frame ends at data_end), flags: nilb_config.flags with some NILB_F_FILTER_ANY_GLOBAL
 * bit set; entry: the source's flat-table entry (filter_flat_entry, which
 * the caller reads inline so that most packets never call this). Global
 * rate limits see SYNs of unfragmented TCP.
 * Returns: 1 to drop, else 0.
 */
static __noinline int filter_global(__u32 flags, const struct iphdr *iph, __u32 tot_len,
				    void *data_end, __u32 entry)
{
	__u32 gen = filter_gen(flags), key, syn = 0;
	struct nilb_filter_scope *sc;
	struct tcphdr *th;

	if (entry && filter_act(filter_global_verdict(flags, iph->saddr, entry), iph->saddr, tot_len))
		return 1;
	if (!(flags & NILB_F_FILTER_GLOBAL_RATE))
		return 0;
	key = gen * NILB_FILTER_SCOPES;
	sc = bpf_map_lookup_elem(&filter_scopes, &key);
	if (!sc)
		return 0;
	if (iph->protocol == IPPROTO_TCP && !is_fragment(iph) && iph->ihl >= 5) {
		th = (void *)iph + iph->ihl * 4;
		if ((void *)(th + 1) <= data_end)
			syn = th->syn && !th->ack;
	}
	return filter_rates(sc, iph->saddr, tot_len, syn, 1);
}

/*
 * Service stage for a TCP or UDP packet from saddr (len L3 bytes; syn: a
 * TCP SYN without ACK) to service svc (its stats index names its scope); flags:
 * nilb_config.flags with NILB_F_FILTER_SERVICES set. The service's prefixes
 * (allow and deny, longest prefix decides) or, when none matches, the
 * scope's no-match verdict (its allow list's default); then its rate limits.
 * Returns: 1 to drop, else 0.
 */
static __noinline int filter_service(__u32 flags, const struct nilb_service *svc, __u32 saddr,
					  __u32 len, __u32 syn)
{
	struct nilb_filter_v4_key k = {};
	struct nilb_filter_scope *sc;
	__u32 gen = filter_gen(flags), index = svc->service_index, key, v, *w;
	void *trie;

	key = gen * NILB_FILTER_SCOPES + 1 + index;
	sc = bpf_map_lookup_elem(&filter_scopes, &key);
	if (!sc)
		return 0;
	v = sc->no_match;
	if (sc->flags & NILB_FS_PREFIXES) {
		trie = bpf_map_lookup_elem(&filter_trie, &gen);
		if (trie) {
			k.prefixlen = 64;
			k.scope = 1 + index;
			k.addr = saddr;
			w = bpf_map_lookup_elem(trie, &k);
			if (w)
				v = *w;
		}
	}
	if (v && filter_act(v, saddr, len))
		return 1;
	return filter_rates(sc, saddr, len, syn, 0);
}

#endif /* NILB_FILTER_H */
