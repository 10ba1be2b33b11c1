/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The flow hash, shared by the XDP balancer and the hash probe used in tests.
 * Rust twin: src/hash.rs (tests/hash_identity.rs proves they agree by running
 * this code through BPF_PROG_TEST_RUN).
 *
 * Definition: MurmurHash3 x86_32 (Austin Appleby, public domain) with the
 * cluster's hash_seed over a 16-byte key
 *   saddr[4] daddr[4] sport[2] dport[2] proto[1] 0 0 0
 * with addresses and ports in network byte order, i.e. the bytes as on the
 * wire. Murmur reads its 4-byte blocks little-endian, so the result does not
 * depend on the host's byte order.
 */
#ifndef NILB_HASH_H
#define NILB_HASH_H

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NILB_LE32(x) (x)
#else
#define NILB_LE32(x) __builtin_bswap32(x)
#endif

static __always_inline __u32 nilb_rotl32(__u32 x, int r)
{
	return (x << r) | (x >> (32 - r));
}

static __always_inline __u32 nilb_murmur_block(__u32 h, __u32 k)
{
	k *= 0xcc9e2d51;
	k = nilb_rotl32(k, 15);
	k *= 0x1b873593;
	h ^= k;
	h = nilb_rotl32(h, 13);
	return h * 5 + 0xe6546b64;
}

/*
 * Flow hash of an IPv4 4-tuple plus protocol.
 * saddr, daddr: network order (as loaded from the packet); sport, dport:
 * network order; proto: IPPROTO_*; seed: host order. Returns the 32-bit hash;
 * bucket = hash & table_mask, outer UDP source port = 0x8000 | (hash & 0x7fff).
 */
static __always_inline __u32 nilb_flow_hash(__u32 saddr, __u32 daddr, __u16 sport,
					    __u16 dport, __u8 proto, __u32 seed)
{
	/* The ports block as it sits in memory: sport bytes then dport bytes. */
	union {
		__u16 p[2];
		__u32 w;
	} ports = { .p = { sport, dport } };
	__u32 h = seed;

	h = nilb_murmur_block(h, NILB_LE32(saddr));
	h = nilb_murmur_block(h, NILB_LE32(daddr));
	h = nilb_murmur_block(h, NILB_LE32(ports.w));
	h = nilb_murmur_block(h, (__u32)proto);
	h ^= 16; /* key length */
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/*
 * Flow hash of an IPv6 4-tuple plus protocol: nilb_flow_hash with each
 * address folded to 32 bits, the XOR of its four words as loaded from the
 * packet: the 16-byte key
 *   fold(saddr)[4] fold(daddr)[4] sport[2] dport[2] proto[1] 0 0 0
 * (src/hash.rs flow_hash, fold6). The whole 40 bytes cost 6 MurmurHash3
 * blocks more, about 10 ns per packet (docs/design.md "Hash").
 * saddr, daddr: the addresses as four 32-bit words loaded from the packet.
 * Returns the 32-bit hash, used as the IPv4 one is.
 */
static __always_inline __u32 nilb_flow_hash6(const __u32 *saddr, const __u32 *daddr,
					     __u16 sport, __u16 dport, __u8 proto, __u32 seed)
{
	return nilb_flow_hash(saddr[0] ^ saddr[1] ^ saddr[2] ^ saddr[3],
			      daddr[0] ^ daddr[1] ^ daddr[2] ^ daddr[3], sport, dport, proto, seed);
}

#endif /* NILB_HASH_H */
