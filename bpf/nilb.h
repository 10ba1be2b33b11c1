/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nilb.h: the one header shared by the BPF programs (bpf/nilb.bpf.c) and Rust.
 * build.rs runs bindgen on it (src/abi_sys.rs, `abi::sys`: the structs, limits
 * and counters) and generates the counter names from enum nilb_counter. Every
 * struct here is a map key or value, except the hash probe's input record.
 * Layouts are an ABI: change comments freely, layouts only with Rust.
 *
 * Byte order: every IPv4 address and port stored in a map is in network byte
 * order (as on the wire). Counters and indexes are host order.
 * Layout rules: explicit padding fields, no implicit holes, keys zeroed in C.
 */
#ifndef NILB_H
#define NILB_H

/* Constants live in enums so that they appear in BTF and in Rust. */
enum nilb_limits {
	/* Services (VIP, port, protocol) the outer table holds. */
	NILB_MAX_SERVICES = 1024,
	/* Addresses allowed to send GUE to a node (balancers + all backends). */
	NILB_MAX_CLUSTER_NODES = 16384,
	/* Distinct VIP addresses. */
	NILB_MAX_VIPS = 1024,
	/* Largest bucket table a service can have (buckets, power of two). */
	NILB_MAX_TABLE_SIZE = 65536,
	/* Hops a received GUE header may list (glb-director sends at most a few). */
	NILB_MAX_GUE_HOPS = 8,
	/* Owners a bucket remembers: its first hop and up to three previous
	 * owners (struct nilb_bucket). */
	NILB_MAX_OWNERS = 4,
	/* Buckets per element of `bucket_first` (a __u16 each). */
	NILB_FIRST_HOPS_PER_ELEM = 4,
	/* Bit of a `bucket_first` entry: the bucket lists previous owners
	 * (slots are below NILB_MAX_BACKEND_SLOTS, so the bit is free). */
	NILB_FIRST_HOP_CHAIN = 0x8000,
	/* Most hops nilb's balancer lists: a bucket's previous owners other
	 * than its first hop (up to NILB_MAX_OWNERS - 1), and for a UDP flow
	 * with any listed the first hop again after them (docs/design.md
	 * "Second chance (TC)"). */
	NILB_TX_HOPS = NILB_MAX_OWNERS,
	/* Backend slots: (service, backend) pairs, each with its address in
	 * `backends` and its own balancer counters. Slot 0 is never given out
	 * (it ends a bucket's chain). Slot ids fit the 16 bits of a hop. */
	NILB_MAX_BACKEND_SLOTS = 16384,
	/* Edge filters (docs/design.md "Edge filters"): rules over all scopes
	 * (deny and allow lists, rate limits); rule id 0 means "no rule". */
	NILB_MAX_FILTER_RULES = 4096,
	/* Rate-limit rules one scope (global, or one service) may have. */
	NILB_FILTER_RATE_RULES = 4,
	/* Elements of a generation's flat IPv4 table: one u16 entry per /24,
	 * four entries per 8-byte element (an array element takes at least
	 * 8 bytes: a u16 each would take 128 MiB instead of 32). */
	NILB_FILTER_FLAT_ELEMS = 16777216 / 4,
	/* Slots of a bucket of the long table (struct nilb_filter_bucket). */
	NILB_FILTER_BUCKET_SLOTS = 8,
	/* Buckets of the two sizes of long table (fixed sizes, so that the
	 * verifier inlines their lookups): 256 KiB and 32 MiB. */
	NILB_FILTER_LONG_SMALL_BITS = 12,
	NILB_FILTER_LONG_LARGE_BITS = 19,
	/* Verdict words one generation's flat table can name. */
	NILB_FILTER_VERDICTS = 16384,
	/* Filter scopes per generation: 0 global, 1 + service index. */
	NILB_FILTER_SCOPES = 1 + NILB_MAX_SERVICES,
	/* Elements of `nat_ports`: one bit per port, 64 per element. */
	NILB_NAT_PORT_WORDS = 65536 / 64,
	/* Default size of `nat_flows` (nat.max_flows in the config). */
	NILB_NAT_DEFAULT_FLOWS = 262144,
	/* IPv6 extension headers (hop-by-hop options, destination options,
	 * routing) the programs walk before the L4 header; a packet to a VIP
	 * with more is dropped (C_XDP_DROP_IPV6_EXT). */
	NILB_IPV6_MAX_EXT = 4,
};

enum nilb_wire {
	/* Default GUE UDP port, as in glb-director. */
	NILB_GUE_PORT_DEFAULT = 19523,
	/* Outer IPv4 (20) + UDP (8) + GUE base header and private word (8),
	 * whatever the inner packet (IPv4, or IPv6 as GUE protocol 41). */
	NILB_GUE_BASE_OVERHEAD = 36,
	/* The same over an IPv6 cluster network (NILB_F_CLUSTER_IPV6): outer
	 * IPv6 (40) + UDP (8) + GUE base header and private word (8); each
	 * hop listed then takes NILB_GUE6_HOP_LEN bytes instead of 4. */
	NILB_GUE6_BASE_OVERHEAD = 56,
	/* Bytes of one hop of the GUE hop list when the outer header is IPv6:
	 * an IPv6 address, network order (docs/design.md "GUE wire format"). */
	NILB_GUE6_HOP_LEN = 16,
	/* Hops a received GUE header with outer IPv6 may list: GUE's 5-bit
	 * hlen counts 32-bit words, 1 + 4 per hop <= 31. */
	NILB_MAX_GUE_HOPS6 = 7,
	/* Smallest MTU an IPv6 link may have (RFC 8200): the lowest MTU the
	 * balancer's ICMPv6 Packet Too Big reports. */
	NILB_MIN_IPV6_MTU = 1280,
	/* Outer TTL of encapsulated packets. */
	NILB_OUTER_TTL = 64,
	/* How long the balancer reuses a hop's FIB/neighbour answer, in
	 * jiffies (bpf_jiffies64, which the verifier inlines to one load; the
	 * ktime helpers cost a call, 20 ns per packet here, docs/design.md
	 * "Data-plane cost"): 25 ms at HZ 1000, 100 ms at 250, 250 ms at 100.
	 * One FIB lookup per hop, CPU and lifetime costs nothing measurable
	 * at any of them. */
	NILB_HOP_CACHE_JIFFIES = 25,
	/* Smallest MTU an IPv4 link may have (RFC 791); the lowest next-hop
	 * MTU the balancer's ICMP "fragmentation needed" reports. */
	NILB_MIN_IPV4_MTU = 68,
	/* Default of cluster.icmp_too_big_rate: ICMP "fragmentation needed"
	 * replies per second per CPU (and the burst: one second's worth). */
	NILB_ICMP_TOO_BIG_RATE_DEFAULT = 1000,
	/* Largest cluster.icmp_too_big_rate (a 16-bit field). */
	NILB_ICMP_TOO_BIG_RATE_MAX = 65535,
	/* Bytes of headers the TC program reads, made linear before it reads
	 * them: Ethernet 14, the larger outer headers (IPv6 40, UDP 8, GUE 8 +
	 * 16 x NILB_MAX_GUE_HOPS6; outer IPv4 takes 20 + 8 + 8 + 4 x
	 * NILB_MAX_GUE_HOPS), inner IPv4 with options 60, then the larger of
	 * TCP (20) and an ICMP error (8) quoting IPv4 with options (60) and its
	 * ports (4). */
	NILB_TC_HEADERS_LEN = 14 + 40 + 8 + 8 + 16 * NILB_MAX_GUE_HOPS6 + 60 + 8 + 60 + 4,
	/* unknown_flow: rst: per CPU, at most one RST per NILB_RST_INTERVAL_NS
	 * on average (1000/s), in bursts of up to NILB_RST_BURST. */
	NILB_RST_INTERVAL_NS = 1000000,
	NILB_RST_BURST = 100,
};

/* Flags in struct nilb_config.flags. */
enum nilb_config_flags {
	/* The last hop accepts unknown flows locally (the stack answers RST)
	 * instead of dropping them (`cluster.unknown_flow: local`). */
	NILB_F_UNKNOWN_FLOW_LOCAL = 1,
	/* The last hop answers a TCP segment (not RST, not SYN) of an unknown
	 * flow with a RST from the VIP, rate-limited (`unknown_flow: rst`). */
	NILB_F_UNKNOWN_FLOW_RST = 2,
	/* Edge filters (docs/design.md "Edge filters"). The live generation
	 * of the filter maps is 1 (else 0); flipping this bit swaps every
	 * list at once. */
	NILB_F_FILTER_GEN1 = 0x100,
	/* The live generation has a global prefix table (filter_flat). */
	NILB_F_FILTER_GLOBAL_LIST = 0x200,
	/* The global scope has rate limits. */
	NILB_F_FILTER_GLOBAL_RATE = 0x400,
	/* Some service has filters (filter_scopes of the live generation). */
	NILB_F_FILTER_SERVICES = 0x800,
	/* The live generation's long table is the large one (filter_long). */
	NILB_F_FILTER_LONG_LARGE = 0x1000,
	/* Some service is in NAT mode: the egress program translates replies
	 * and XDP checks direct packets to this node for NAT collisions
	 * (`nat_ports`, `nat_flows`). Without it neither looks at a packet. */
	NILB_F_NAT = 0x2000,
	/* The cluster network is IPv6 (docs/design.md "IPv6 cluster network"):
	 * GUE travels in IPv6/UDP, hops are listed as 16-byte addresses,
	 * `backends` holds IPv6 addresses, this node's address is in `config6`
	 * (node_addr here is 0) and GUE senders are checked against
	 * `cluster_nodes6`. The daemon attaches the XDP programs built for it
	 * (nilb_xdp_balancer_c6 and its IPv6 twin); the TC and backend XDP
	 * programs read the outer family of each packet. */
	NILB_F_CLUSTER_IPV6 = 0x4000,
};

/*
 * Edge filters: a verdict word (u32) says what the prefix lists decide for
 * a source. Bits 0-12: the rule that drops it (0: none); bit 13: that
 * rule is marked to cover cluster addresses, so the source is checked
 * against cluster_nodes first (which are never filtered). Bits 16-29: the
 * same for a dry-run rule that would drop it (counted, not dropped).
 * Entries of the flat table (u16, entry i = the /24 i): bit 15 says "the
 * /24 has longer prefixes: look the address up in filter_long"; with bit
 * 14 set, bits 0-12 are the verdict itself (a live rule that drops, nothing
 * else: the common case, one lookup less); else bits 0-13 index the
 * generation's filter_verdicts (0: no verdict). filter_long is a
 * hash table of addresses with two choices of bucket (the first unless it
 * is full): (addr x NILB_FH_MUL1) >> shift and (addr x NILB_FH_MUL2) >> shift, in
 * 32-bit arithmetic on the network-order address as loaded on a
 * little-endian machine, shift = 32 - log2(buckets); a generation's long
 * table is filter_long_small or, with NILB_F_FILTER_LONG_LARGE,
 * filter_long.
 */
enum nilb_filter_bits {
	NILB_FV_RULE_MASK = 0x1fff,
	NILB_FV_COVERS_CLUSTER = 0x2000,
	NILB_FV_DRY_SHIFT = 16,
	NILB_FV_FLAT_EXT = 0x8000,
	NILB_FV_FLAT_DIRECT = 0x4000,
	NILB_FV_FLAT_INDEX = 0x3fff,
	NILB_FH_MUL1 = 0x9e3779b1,
	NILB_FH_MUL2 = 0x85ebca77,
	/* struct nilb_filter_scope.flags: look the source up in filter_trie. */
	NILB_FS_PREFIXES = 1,
	/* struct nilb_filter_rule.flags */
	NILB_FR_DRY_RUN = 1,
	NILB_FR_COVERS_CLUSTER = 2,
};

/* struct nilb_filter_rule.kind */
enum nilb_filter_kind {
	NILB_FK_DENY = 1,
	NILB_FK_ALLOW = 2,
	NILB_FK_RATE = 3,
};

/*
 * Per-CPU counters, index into the `counters` map (PERCPU_ARRAY of __u64).
 * Every verdict and every drop reason of both programs has one. build.rs
 * generates Rust's COUNTER_NAMES and COUNTER_HELP from this enum: each
 * `C_NAME,` line gives a name (lower case, without C_) and its trailing
 * comment the help text, so keep one counter per line, commented.
 */
enum nilb_counter {
	/* XDP balancer */
	C_XDP_PASS_NON_IP = 0,      /* neither IPv4 nor IPv6 (or VLAN-tagged): passed untouched */
	C_XDP_PASS_NOT_SERVICE,     /* IPv4 or IPv6 not for a configured (VIP, port, protocol) */
	C_XDP_ENCAP_TX,             /* encapsulated, sent back out (XDP_TX) */
	C_XDP_ENCAP_REDIRECT,       /* encapsulated, redirected to another interface */
	C_XDP_ENCAP_LOCAL,          /* first hop is this node: passed to TC locally */
	C_XDP_ENCAP_SLOW_PATH,      /* neighbour unknown / forwarding off: sent via TC */
	C_XDP_ICMP_FORWARDED,       /* ICMP error (unreachable, time exceeded, parameter problem) sent on like the flow it quotes (a verdict is counted too) */
	C_XDP_DROP_FRAGMENT,        /* fragment of VIP traffic, IPv4 or IPv6 (no reassembly) */
	C_XDP_DROP_NO_BACKEND,      /* bucket has no first hop */
	C_XDP_DROP_MALFORMED,       /* broken IPv4/IPv6/L4 header addressed to a VIP */
	C_XDP_DROP_NO_ROUTE,        /* FIB has no route to the hop */
	C_XDP_DROP_TOO_BIG,         /* packet + GUE exceeds the MTU, no ICMP reply (IPv4 without DF, an ICMP error, source not unicast): dropped */
	C_XDP_DROP_ADJUST_FAILED,   /* bpf_xdp_adjust_head/tail failed (or the resized frame is short: never seen) */
	C_XDP_DROP_NO_META,         /* hand-off mark not written yet (struct nilb_handoff): local/slow path impossible */
	C_XDP_PASS_NO_CONFIG,       /* config map empty (daemon not ready): every packet passed */
	C_XDP_ICMP_TOO_BIG,         /* DF packet + GUE exceeds the MTU: ICMP frag-needed sent back from the VIP */
	C_XDP_DROP_TOO_BIG_LIMITED, /* DF packet too big, its ICMP reply over icmp_too_big_rate: dropped */
	C_XDP_DROP_FILTER,          /* dropped by a deny rule, or by a service's allow list */
	C_XDP_DROP_RATE_LIMIT,      /* dropped by a rate limit */
	C_XDP_FILTER_DRY_RUN,       /* a dry-run rule would have dropped it: counted, not dropped (a verdict is counted too) */
	C_XDP_FILTER_EXEMPT,        /* a rule matched a cluster address, which is never filtered (a verdict is counted too) */
	C_XDP_QUIC_ROUTED,          /* QUIC-LB service: the connection ID carries a known server ID: sent to that backend, no bucket table (a verdict is counted too) */
	C_XDP_QUIC_INITIAL,         /* QUIC-LB service: long-header Initial or 0-RTT (QUIC v1, v2; the client may have chosen the DCID), or another version: bucket table */
	C_XDP_QUIC_UNKNOWN,         /* QUIC-LB service: another or the reserved codepoint, a server ID no routable backend has, an empty DCID or one of the wrong length: bucket table */
	C_XDP_QUIC_UNPARSEABLE,     /* QUIC-LB service: not a QUIC packet (too short for its header, DCID over 20 bytes): bucket table */
	C_XDP_QUIC_NO_KEY,          /* QUIC-LB service: keyed algorithm without an AES context, or the crypto kfunc failed: bucket table */
	/* TC second chance */
	C_TC_PASS_OTHER,            /* not GUE addressed to this node: passed untouched */
	C_TC_DECAP_SYN,             /* TCP SYN: accepted (new connection) */
	C_TC_DECAP_ESTABLISHED,     /* local socket (not LISTEN) for the flow */
	C_TC_DECAP_SYNCOOKIE,       /* valid SYN-cookie ACK */
	C_TC_DECAP_UDP,             /* UDP: connected socket, or last hop with a listener */
	C_TC_DECAP_ICMP,            /* ICMP error about a flow kept here (the quoted flow's rules) */
	C_TC_DECAP_LOOP_GUARD,      /* next hop is this node: accepted locally */
	C_TC_DECAP_UNKNOWN_LOCAL,   /* no hop left, unknown_flow=local */
	C_TC_FORWARD,               /* second chance: forwarded to the next hop */
	C_TC_SLOW_PATH_SENT,        /* XDP slow-path packet sent with redirect_neigh */
	C_TC_DROP_UNKNOWN_FLOW,     /* no hop left, unknown_flow=drop */
	C_TC_DROP_NOT_CLUSTER,      /* GUE from an address outside the cluster */
	C_TC_DROP_SELF_UNMARKED,    /* GUE from this node's address not handed over by our XDP */
	C_TC_DROP_MALFORMED,        /* GUE header or inner packet invalid */
	C_TC_DROP_INNER_NOT_VIP,    /* inner destination is not a configured VIP, or is a NAT-only address and the packet no NAT service's */
	C_TC_DROP_UNSUPPORTED,      /* inner protocol not handled, or ICMP/ICMPv6 about no flow */
	C_TC_DROP_ADJUST_FAILED,    /* bpf_skb_adjust_room failed */
	C_TC_PASS_NO_CONFIG,        /* config map empty: passed */
	C_TC_DECAP_PING,            /* ICMP echo request to a VIP: answered here */
	C_TC_DECAP_TIME_WAIT,       /* TCP socket in TIME_WAIT/CLOSE and no hop left: to the stack */
	C_TC_RST_SENT,              /* no hop left, unknown_flow=rst: answered with a RST from the VIP */
	C_TC_DROP_RST_LIMITED,      /* no hop left, unknown_flow=rst, over the RST rate limit */
	C_TC_DROP_BAD_NEXT_HOP,     /* next hop not a unicast address (0/8, loopback, link-local, multicast, 240/4, broadcast) or a VIP: never relayed */
	/* XDP receive path of GUE for this node, before GRO (bpf/xdp_decap.h) */
	C_XDP_DECAP_SYN,            /* GUE from a cluster address, inner TCP SYN to a VIP: decapsulated in XDP (before GRO) */
	C_XDP_DECAP_ESTABLISHED,    /* GUE from a cluster address, inner TCP of a local socket (not LISTEN, TIME_WAIT, CLOSE): decapsulated in XDP */
	C_XDP_GUE_TO_TC,            /* GUE for this node XDP does not decide (second chance, UDP, ICMP, SYN cookie, TIME_WAIT, invalid): passed untouched to TC */
	C_XDP_LOCAL_DIRECT,         /* balancer: first hop is this node and the packet is a SYN or a local socket's: passed to the stack without encapsulation */
	C_XDP_BACKEND_PASS,         /* backend XDP program (not a balancer): not GUE for this node, passed untouched */
	/* NAT mode (bpf/nat.h) */
	C_NAT_NEW_FLOW,             /* NAT service: a flow accepted here for the first time (nat_flows entry created) */
	C_NAT_IN,                   /* NAT service: packet accepted here, destination rewritten to this node's address and port */
	C_NAT_OUT,                  /* NAT service: reply (or ICMP error about the flow) leaving with the service address and port */
	C_NAT_DROP_COLLISION,       /* NAT: a translated flow and a direct one to this node would share a 4-tuple: the newer one's packet dropped */
	C_NAT_DROP_TABLE_FULL,      /* NAT: nat_flows full (nat.max_flows): a new flow's packet dropped, tracked flows unaffected */
	C_NAT_UDP_SWITCHED,         /* NAT: a direct UDP datagram to this node for a tuple nat_flows held: entry removed, replies leave untranslated (the latest request's way) */
	/* IPv6 (docs/design.md "IPv6") */
	C_XDP_DROP_IPV6_EXT,        /* IPv6 to a VIP with more than NILB_IPV6_MAX_EXT extension headers before its L4 header, or one cut short */
	C_XDP_ICMP6_TOO_BIG,        /* IPv6 packet + GUE exceeds the MTU: ICMPv6 Packet Too Big sent back from the VIP */
	C_TC_DECAP_IPV6,            /* among the accepted packets above: inner IPv6 (GUE protocol 41) */
	C_TC_FORWARD_IPV6,          /* among the forwarded packets: inner IPv6 */
	NILB_COUNTER_MAX,
};

/* Key of the `services` map (HASH). 8 bytes. */
struct nilb_service_key {
	__u32 vip;     /* IPv4, network order */
	__u16 port;    /* network order */
	__u8 proto;    /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;      /* always 0 */
};

/* Key of the `services6` map (HASH): an IPv6 service. 20 bytes. */
struct nilb_service6_key {
	__u8 vip[16];  /* IPv6, network order */
	__u16 port;    /* network order */
	__u8 proto;    /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;      /* always 0 */
};

/* Key of the `vips6` map (HASH, value struct nilb_addr_info) and value of
 * `control_vip6`: an IPv6 address, network order. 16 bytes. */
struct nilb_addr6 {
	__u8 addr[16];
};

/* Value of the `services` and `services6` maps: where the service's
 * buckets are in the pool and which counters are its. 16 bytes. A service whose table changes
 * size (or a new service) gets a new region and a new value in one update;
 * other changes are written into its buckets in place. */
struct nilb_service {
	__u32 table_base;     /* first bucket of its region of `buckets` */
	__u32 table_mask;     /* table_size - 1; table_size a power of two */
	__u32 service_index;  /* index into `service_stats` */
	__u16 flags;          /* enum nilb_service_flags */
	/* NILB_SVC_F_NAT: the port the backends' service listens on (network
	 * order; the service's own port if none is configured). 0 otherwise.
	 * (Was the high half of a 32-bit flags word, always 0: the layout, and
	 * so the pinned map, is unchanged on little-endian hosts.) */
	__u16 nat_port;
};

/* The XDP programs' per-CPU caches of `services` and `services6`, and of
 * `vips` and `cluster_nodes` (docs/design.md "Lookup caches"): direct-mapped
 * arrays per CPU, indexed by a multiplicative hash of the key. An entry
 * serves while its generation equals `cache_gen` (which the control plane
 * increments after every change to any of those maps) and for at most
 * NILB_SERVICE_CACHE_JIFFIES: a HASH lookup costs a call and 20 ns per
 * packet here, a cache hit two inlined array reads and a compare. */
enum {
	NILB_SERVICE_CACHE_BITS = 10,
	NILB_SERVICE_CACHE_SLOTS = 1 << NILB_SERVICE_CACHE_BITS,
	NILB_ADDR_CACHE_BITS = 8,
	NILB_ADDR_CACHE_SLOTS = 1 << NILB_ADDR_CACHE_BITS,
	/* 25 ms at HZ 1000, 100 ms at 250, 250 ms at 100: far below the
	 * second a released region of the pool waits before another service
	 * gets it (the bound if the control plane could not increment
	 * cache_gen, e.g. killed between a write and the increment). */
	NILB_SERVICE_CACHE_JIFFIES = 25,
};

/* Value of `service_cache` (PERCPU_ARRAY): one IPv4 service. 40 bytes. */
struct nilb_service_cache {
	__u64 expires;                /* bpf_jiffies64() deadline */
	__u64 key;                    /* struct nilb_service_key, as one word */
	__u32 gen;                    /* cache_gen when it was filled */
	struct nilb_service svc;      /* the `services` value */
	__u32 pad;
};

/* What an `addr_cache` entry caches: the IPv4 address's entry in `vips`
 * or in `cluster_nodes`. */
enum nilb_addr_cache_map {
	NILB_ADDR_CACHE_VIPS = 1,
	NILB_ADDR_CACHE_CLUSTER = 2,
};

/* Value of `addr_cache` (PERCPU_ARRAY): an IPv4 address found in `vips`
 * or `cluster_nodes` (absent addresses are not cached). 24 bytes. */
struct nilb_addr_cache {
	__u64 expires;                /* bpf_jiffies64() deadline */
	__u32 addr;                   /* IPv4, network order */
	__u32 map;                    /* enum nilb_addr_cache_map */
	__u32 gen;                    /* cache_gen when it was filled */
	__u32 flags;                  /* that map's nilb_addr_info.flags */
};

/* Value of `addr_cache6` (PERCPU_ARRAY): an IPv6 address found in `vips6`
 * or `cluster_nodes6` (absent addresses are not cached). 40 bytes. */
struct nilb_addr6_cache {
	__u64 expires;                /* bpf_jiffies64() deadline */
	__u32 addr[4];                /* IPv6, four network-order words */
	__u32 map;                    /* enum nilb_addr_cache_map */
	__u32 gen;                    /* cache_gen when it was filled */
	__u32 flags;                  /* that map's nilb_addr_info.flags */
	__u32 pad;
};

/* Value of `service_cache6` (PERCPU_ARRAY): one IPv6 service. 56 bytes. */
struct nilb_service6_cache {
	__u64 expires;                /* bpf_jiffies64() deadline */
	struct nilb_service6_key key;
	__u32 gen;                    /* cache_gen when it was filled */
	struct nilb_service svc;      /* the `services6` value */
	__u32 pad;
};

/* Bits of nilb_service.flags. */
enum nilb_service_flags {
	/* The service has `quic_lb`: its UDP packets go through the QUIC-LB
	 * decoder (quic_config is written before the bit is set and removed
	 * after it is cleared). Without it the decoder is not called. */
	NILB_SVC_F_QUIC_LB = 1,
	/* mode: nat (docs/design.md "NAT mode"): a backend rewrites the
	 * destination of the service's packets to its own address and
	 * nat_port on the way in, and the source of the replies back to the
	 * service address and port on the way out (struct nilb_nat_flow). */
	NILB_SVC_F_NAT = 2,
};

/*
 * Element of the `buckets` pool: bucket table_base + (hash & table_mask)
 * of a service. 8 bytes, read by the programs as one __u64 and written by
 * the control plane with one aligned 8-byte store, so a chain is never
 * seen half written. hops[0]: backend slot of the first hop (0: none,
 * packets are dropped); hops[1..]: slots of the previous owners, newest
 * first, ending at the first 0. Addresses are in `backends`; the last move
 * time, which only the control plane reads, in `bucket_moved`.
 */
struct nilb_bucket {
	__u16 hops[NILB_MAX_OWNERS];
};

/* Family of struct nilb_backend. */
enum nilb_family {
	NILB_FAMILY_NONE = 0,  /* slot unused */
	NILB_FAMILY_IPV4 = 4,
	NILB_FAMILY_IPV6 = 6,  /* reserved */
};

/* Value of the `backends` map (ARRAY, key backend slot): the address of
 * the slot's backend, written before any bucket names the slot. 20 bytes,
 * IPv6-ready. */
struct nilb_backend {
	__u32 addr[4];   /* IPv4 in addr[0], network order; the rest 0 */
	__u32 family;    /* enum nilb_family */
};

/* The only element of the `config` map (ARRAY, key 0). Network order for
 * addresses and ports. */
struct nilb_config {
	__u32 node_addr;   /* this node's IPv4 address (outer source, "me") */
	__u32 hash_seed;   /* cluster.hash_seed (host order) */
	__u16 gue_port;    /* network order */
	/* cluster.icmp_too_big_rate: ICMP "fragmentation needed" replies per
	 * second per CPU, also the burst; 0: never reply. (Was padding: the
	 * layout, and so the pinned map, is unchanged.) */
	__u16 icmp_too_big_rate;
	__u32 flags;       /* enum nilb_config_flags */
	/* One's complement sum (not folded) of the outer IPv4 header's constant
	 * 16-bit words as they sit in memory: version/IHL/TOS, ID, DF, TTL and
	 * protocol, source address. The XDP program adds total length and
	 * destination per packet instead of summing all ten words. */
	__u32 outer_csum_base;
};

/* The only element of the `config6` map (ARRAY, key 0): what an IPv6
 * cluster network adds to struct nilb_config (which keeps its layout, so
 * that old pins stay adoptable). All zero on an IPv4 cluster network. */
struct nilb_config6 {
	__u8 node_addr[16];   /* this node's IPv6 address, network order */
};

/* Value of the `service_stats` map (PERCPU_ARRAY, key service index):
 * what happened to a service's packets on this node beyond balancing. */
struct nilb_service_stats {
	__u64 xdp_drops;    /* balancer: dropped, bucket without first hop */
	__u64 tc_decap;     /* accepted here: decapsulated by TC or XDP (SYN, local socket, loop guard...), or a local first hop's packet XDP passed unencapsulated */
	__u64 tc_forward;   /* TC: passed on to the next hop (second chance) */
	__u64 tc_drops;     /* TC: dropped, unknown flow and no hop left */
};

/* Value of the `backend_stats` map (PERCPU_ARRAY, key backend slot): what the
 * balancer sent to one backend of one service as first hop. */
struct nilb_backend_stats {
	__u64 packets;   /* packets encapsulated to it */
	__u64 bytes;     /* their L3 bytes before encapsulation */
	__u64 syns;      /* TCP SYN without ACK among them (new connections) */
};

/* Value of the `hop_cache` map (PERCPU_ARRAY, key backend slot): this
 * CPU's recent bpf_fib_lookup answer for the slot's hop, so that most
 * packets skip the FIB and neighbour lookup. Per CPU so that an entry is
 * only ever written by the CPU that reads it (never torn). Entries expire
 * after NILB_HOP_CACHE_JIFFIES and are checked against the hop and the
 * ingress interface. */
struct nilb_hop_cache {
	__u64 expires;      /* bpf_jiffies64() deadline */
	__u32 hop[4];       /* address this answer is for, network order (IPv4:
			     * hop[0], the rest 0; as struct nilb_backend) */
	__u32 in_ifindex;   /* interface the packets came in on */
	__u32 out_ifindex;  /* interface the FIB chose */
	__u32 max_len;      /* outer lengths up to this are known to fit */
	__u8 macs[12];      /* destination then source MAC, as in Ethernet */
	__u32 mtu;          /* the route's MTU once the FIB reported it (too
			     * big), then also max_len; 0: not known */
};

/* The only element of the `handoff` map (ARRAY, key 0, pinned): the mark
 * by which TC tells a GUE frame this node's own XDP balancer built and
 * passed up (XDP_PASS: this node is the first hop, or the slow path) from
 * a forged one claiming this node's address. The balancer writes it as
 * the frame's source MAC; no frame from the wire carries it, because it is
 * random (46 bits: a locally administered unicast MAC), made by the daemon
 * when it creates the pin and kept across restarts. A frame keeps its
 * MACs from XDP to TC on every driver; XDP metadata
 * (bpf_xdp_adjust_meta), which did this job before, is refused by some
 * kernels and drivers (docs/design.md "Hand-off from XDP to TC"). */
struct nilb_handoff {
	__u8 mac[6];     /* the mark; all zero until the daemon writes it, when
			  * the balancer drops what it would hand off
			  * (C_XDP_DROP_NO_META) and TC trusts no frame */
	__u8 pad[2];
};

/* Value of the `icmp_limit` map (PERCPU_ARRAY, key 0): the token bucket of
 * the balancer's ICMP "fragmentation needed" replies on this CPU. */
struct nilb_icmp_limit {
	__u64 last_ns;     /* bpf_ktime_get_ns() of the last update */
	__u64 credit_ns;   /* saved credit, at most one second; a reply costs
			    * 1e9 / icmp_too_big_rate ns of it */
};

/* Value of the `cluster_nodes` and `vips` maps (HASH, key IPv4 __u32) and
 * of `cluster_nodes6` and `vips6` (key struct nilb_addr6). */
struct nilb_addr_info {
	__u32 flags;     /* enum nilb_addr_flags */
};

/* Bits of nilb_addr_info.flags in `vips`. */
enum nilb_addr_flags {
	/* The service address is a node's own address (NAT-mode services
	 * only): its fragments, malformed packets and ICMP that belong to no
	 * service are the node's own business and pass, where a VIP's are
	 * dropped. */
	NILB_ADDR_F_NODE = 1,
	/* Every service of the address is in NAT mode: no backend holds it, so
	 * a backend delivers an inner packet to it only translated, as a NAT
	 * service's; anything else to it (no service's port, an echo request)
	 * is dropped (C_TC_DROP_INNER_NOT_VIP), never handed to a stack that
	 * does not own the address. */
	NILB_ADDR_F_NAT_ONLY = 2,
};

/*
 * Key of the `nat_flows` map (HASH): a flow of a NAT-mode service as the
 * backend's stack sees it, the client's address and port and the
 * backend's own address and the port its service listens on. 16 bytes,
 * addresses and ports in network order; pad always 0.
 */
struct nilb_nat_key {
	__u32 client;       /* the client's address */
	__u32 local;        /* this backend's own address */
	__u16 client_port;
	__u16 local_port;   /* the service's listening port here */
	__u8 proto;         /* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad[3];
};

/*
 * Value of `nat_flows`: the service address and port the client talks to,
 * which the backend's replies get back as their source. Created by the
 * backend's programs when they accept the flow's first packet, removed by
 * the control plane (TCP: once no socket of the flow is left; UDP: after
 * nat.udp_timeout of silence). 16 bytes.
 */
struct nilb_nat_flow {
	__u32 vip;          /* service address, network order */
	__u16 port;         /* service port, network order */
	__u16 pad;
	__u32 seen_s;       /* last packet either way, bpf_ktime_get_coarse_ns() / 1e9 */
	__u32 gc_pass;      /* the control plane's last sweep that found its TCP socket */
};

/* Values of struct nilb_control_state.health. */
enum nilb_control_health {
	NILB_HEALTH_UNKNOWN = 0,
	NILB_HEALTH_UP = 1,
	NILB_HEALTH_DOWN = 2,
};

/* Values of struct nilb_control_state.admin. */
enum nilb_control_admin {
	NILB_ADMIN_ACTIVE = 0,
	NILB_ADMIN_DRAINED = 1,
	NILB_ADMIN_OFFLINE = 2,
	NILB_ADMIN_REMOVING = 3,   /* gone from the file, draining out */
};

/* Bits of struct nilb_control_state.flags. */
enum nilb_control_flags {
	NILB_CS_REMOVED_AT = 1,     /* removed_at_ms is set */
	NILB_CS_EMPTY_SINCE = 2,    /* empty_since_ms is set */
	NILB_CS_FIRST_DECIDES = 4,  /* unknown: the first result decides */
	NILB_CS_DIP6 = 8,           /* the DIP is IPv6, in `control_dip6` (dip 0) */
};

/* Value of the `control_state` map (ARRAY, key backend slot): what the
 * control plane owes one (service, backend) pair across a restart of the
 * daemon (health verdict, administrative state, removal times), so that a
 * daemon killed with -9 and restarted on the pinned maps moves no bucket and
 * forgets no backend still serving connections. Written and read by the
 * daemon only; the BPF programs never read it. Times are CLOCK_BOOTTIME
 * milliseconds. A slot with dip 0 and no NILB_CS_DIP6 is unused. 48 bytes.
 * An IPv6 service's record has service.vip 0 and service.pad 6, its VIP in
 * `control_vip6` at the same slot; a record of an IPv6 DIP (IPv6 cluster
 * network) has dip 0 and NILB_CS_DIP6, its DIP in `control_dip6` at the
 * same slot (an older daemon sees an unused slot). */
struct nilb_control_state {
	struct nilb_service_key service;
	__u32 dip;            /* network order; 0 = unused */
	__u32 weight;         /* configured weight */
	__u8 health;          /* enum nilb_control_health */
	__u8 admin;           /* enum nilb_control_admin */
	__u8 flags;           /* enum nilb_control_flags */
	__u8 encap_health;    /* enum nilb_control_health: the encapsulated check */
	__u32 transitions;    /* up/down transitions so far */
	__u64 since_ms;       /* the health verdict holds since */
	__u64 removed_at_ms;  /* left the file (NILB_CS_REMOVED_AT) */
	__u64 empty_since_ms; /* removing and owning no bucket since (NILB_CS_EMPTY_SINCE) */
};

/* Value of `filter_rules` (ARRAY, key rule id): what the data plane needs
 * of a filter rule, and its name for the tools that read the pins. */
struct nilb_filter_rule {
	__u8 kind;              /* enum nilb_filter_kind; 0: slot unused */
	__u8 flags;             /* NILB_FR_* */
	__u16 pad;
	__u32 scope;            /* 0 global, 1 + service index */
	__u32 mask_v4;          /* rate limits: network-order mask that turns a
				 * source into its key (/32 or /24) */
	__u32 prefix_v6;        /* rate limits: the same for IPv6 later (128 or 64) */
	__u64 pkt_interval_ns;  /* rate: 1e9 / packets per second (0: no limit) */
	__u64 pkt_tolerance_ns; /* rate: (burst - 1) x interval */
	__u64 syn_interval_ns;  /* the same for TCP SYNs */
	__u64 syn_tolerance_ns;
	__u8 name[32];          /* the rule's name, NUL-terminated (31 bytes at most) */
};

/* Value of `filter_stats` (PERCPU_ARRAY, key rule id). */
struct nilb_filter_stats {
	__u64 packets;  /* dropped by the rule (dry run: would have been) */
	__u64 bytes;    /* their L3 bytes */
};

/* Element of `filter_scopes` (ARRAY, key gen x NILB_FILTER_SCOPES + scope;
 * scope 0 global, 1 + service index): a scope's filters in one generation. */
struct nilb_filter_scope {
	__u32 no_match;  /* verdict word when no prefix matches (a service's
			  * allow list drops what it does not list) */
	__u16 flags;     /* NILB_FS_PREFIXES */
	__u16 rate[NILB_FILTER_RATE_RULES]; /* rate-limit rule ids; 0 ends the list */
	__u16 pad;
};

/* Element of a generation's long table (filter_long, an ARRAY of buckets):
 * addresses (network order) in /24s that have prefixes longer than /24,
 * each with its verdict word; a slot with verdict 0 is empty. */
struct nilb_filter_bucket {
	__u32 addr[NILB_FILTER_BUCKET_SLOTS];
	__u32 verdict[NILB_FILTER_BUCKET_SLOTS];
};

/* Key of a generation's service prefix trie (LPM_TRIE, in `filter_trie`):
 * the scope's 32 bits then the address, so that one trie holds every
 * service's lists and a match never crosses services. IPv6 gets a trie of
 * its own with a 16-byte address. */
struct nilb_filter_v4_key {
	__u32 prefixlen;  /* 32 + prefix length */
	__u32 scope;      /* 1 + service index, host order, matched whole */
	__u32 addr;       /* IPv4, network order */
};

/* Key of a rate-limit state (LRU_HASH in `filter_rate_lru`). The family tag and
 * the 16-byte address let IPv6 sources share the map later. */
struct nilb_rate_key {
	__u16 rule;     /* rule id */
	__u8 family;    /* 2 (AF_INET) */
	__u8 pad;
	__u32 addr[4];  /* source under the rule's mask; IPv4 in addr[0],
			 * network order, the rest 0 */
};

/* Value of a rate-limit state: GCRA, the token bucket kept as the time at
 * which it is full again (docs/design.md "Edge filters"). */
struct nilb_rate_state {
	__u64 pkt_tat_ns;     /* packets: theoretical arrival time */
	__u64 syn_tat_ns;     /* SYNs: theoretical arrival time */
	__u64 dropped;        /* packets this key lost to the rule (dry run: would have) */
	__u64 dropped_bytes;  /* their L3 bytes */
};

/* Input record of the hash probe program (bpf/hash_probe.bpf.c), used by
 * tests to prove the C and Rust flow hash agree. The hash is written back
 * over `out`. */
struct nilb_hash_probe {
	__u32 saddr;   /* network order */
	__u32 daddr;   /* network order */
	__u16 sport;   /* network order */
	__u16 dport;   /* network order */
	__u8 proto;
	__u8 pad[3];
	__u32 seed;    /* host order */
	__u32 out;     /* host order, written by the program */
};

/* Input record of the IPv6 hash probe (nilb_flow_hash6). */
struct nilb_hash_probe6 {
	__u32 saddr[4];  /* network order */
	__u32 daddr[4];  /* network order */
	__u16 sport;     /* network order */
	__u16 dport;     /* network order */
	__u8 proto;
	__u8 pad[3];
	__u32 seed;      /* host order */
	__u32 out;       /* host order, written by the program */
};

/* ---- QUIC-LB (bpf/quic_lb.h; docs/config.md "QUIC-LB") ------------------ */

enum nilb_quic_limits {
	/* Longest connection ID of QUIC versions 1 and 2. */
	NILB_QUIC_MAX_CID_LEN = 20,
	/* Largest server ID (19 bytes of block minus the 4-byte minimum nonce). */
	NILB_QUIC_MAX_SERVER_ID_LEN = 15,
	/* AES-128 key bytes. */
	NILB_QUIC_KEY_LEN = 16,
	/* Config rotation codepoint reserved for unroutable connection IDs. */
	NILB_QUIC_UNROUTABLE_CODEPOINT = 7,
};

/* struct nilb_quic_lb.algorithm. */
enum nilb_quic_algorithm {
	NILB_QUIC_OFF = 0,          /* not a QUIC-LB service */
	NILB_QUIC_PLAINTEXT = 1,    /* server ID in the clear */
	NILB_QUIC_SINGLE_PASS = 2,  /* one AES-128-ECB block (server ID + nonce = 16 bytes) */
	NILB_QUIC_FOUR_PASS = 3,    /* four-pass Feistel network over AES-128-ECB */
};

/* Bits of struct nilb_quic_lb.flags. */
enum nilb_quic_flags {
	/* The first octet's low 5 bits carry the CID length minus one. */
	NILB_QUIC_SELF_ENCODE_LENGTH = 1,
};

/* A service's QUIC-LB configuration as the decoder needs it. 8 bytes. */
struct nilb_quic_lb {
	__u8 algorithm;      /* enum nilb_quic_algorithm */
	__u8 codepoint;      /* config rotation codepoint, 0..6 */
	__u8 server_id_len;  /* bytes, 1..15 */
	__u8 nonce_len;      /* bytes, 4..18; server_id_len + nonce_len <= 19 */
	__u8 flags;          /* enum nilb_quic_flags */
	__u8 pad[3];
};

/* What quic_lb_decode makes of a connection ID. */
enum nilb_quic_decode {
	NILB_QD_OK = 0,              /* server ID found */
	NILB_QD_UNROUTABLE = 1,      /* codepoint 0b111 */
	NILB_QD_OTHER_CODEPOINT = 2, /* not this configuration's codepoint */
	NILB_QD_BAD_LENGTH = 3,      /* too short, over 20 bytes, or not the self-encoded length */
	NILB_QD_NO_KEY = 4,          /* keyed algorithm but no AES context installed */
	NILB_QD_CRYPTO_FAILED = 5,   /* the crypto kfunc failed */
};

/* Key of a server-ID map: a service and one of its server IDs (zeros after
 * the server ID's length). 20 bytes. */
struct nilb_quic_sid_key {
	__u32 service_index;
	__u8 sid[16];
};

/* Value of the `quic_servers` map (HASH, key struct nilb_quic_sid_key):
 * the backend a server ID routes to. 8 bytes. */
struct nilb_quic_backend {
	__u32 dip;    /* IPv4 network order */
	__u32 slot;   /* its (service, backend) slot: backend_stats, hop_cache */
};

/* Context of the syscall program that installs a service's AES key
 * (quic_lb_install_key): run with BPF_PROG_TEST_RUN. 24 bytes. */
struct nilb_quic_key_args {
	__u32 index;     /* in: slot of the context map (the service index) */
	__s32 status;    /* out: 0, or a negative errno */
	__u8 key[16];    /* in: AES-128 key */
	__u32 clear;     /* in: non-zero: remove the context instead */
	__u32 pad;
};

/* Input and output record of the QUIC-LB probe program
 * (bpf/quic_lb_probe.bpf.c), given as packet data: tests prove the C
 * decoder and src/quic_lb.rs agree. 56 bytes. */
struct nilb_quic_lb_probe {
	struct nilb_quic_lb cfg;   /* in */
	__u32 crypto_index;        /* in: the AES context's slot */
	__u32 cid_len;             /* in: 0..20 */
	__u8 cid[20];              /* in */
	__s32 result;              /* out: enum nilb_quic_decode */
	__u8 sid[16];              /* out: the server ID, zero-padded */
};

#endif /* NILB_H */
