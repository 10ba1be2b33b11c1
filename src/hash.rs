//! The flow hash, bit-identical to `nilb_flow_hash` in `bpf/hash.h`.
//!
//! MurmurHash3 x86_32 (Austin Appleby, public domain) with the cluster's
//! `hash_seed` over a 16-byte key: source address (4), destination address
//! (4), source port (2), destination port (2), protocol (1), three zero bytes;
//! addresses and ports in network byte order, exactly as on the wire. An
//! IPv6 flow's key is the same 16 bytes with each address folded to 4: the
//! XOR of its four 4-byte groups (`nilb_flow_hash6`; 6 MurmurHash3 blocks
//! fewer than the 40 bytes of the whole addresses, docs/design.md "Hash"). The
//! bucket of a flow is `hash & (table_size - 1)`; the outer UDP source port
//! of its GUE packets is `0x8000 | (hash & 0x7fff)`.
//!
//! `tests/hash_identity.rs` runs the C version through BPF_PROG_TEST_RUN on
//! random tuples and compares.

use std::net::IpAddr;

/// IANA protocol numbers nilb balances.
pub const IPPROTO_TCP: u8 = 6;
/// IANA protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// A flow as the balancer sees it: client to VIP. Ports in host order here;
/// the hash uses their network-order bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    /// Client address (the same family as the VIP).
    pub saddr: IpAddr,
    /// VIP.
    pub daddr: IpAddr,
    /// Client port (host order).
    pub sport: u16,
    /// Service port (host order).
    pub dport: u16,
    /// IANA protocol number (6 TCP, 17 UDP).
    pub proto: u8,
}

impl FlowTuple {
    /// The hash key, as laid out in `bpf/hash.h`: 16 bytes, IPv6 addresses
    /// folded to 4 bytes each by [`fold6`] (an IPv4 address in an IPv6
    /// flow, which the data plane never sees, counts as its IPv4-mapped
    /// IPv6 address).
    pub fn key_bytes(&self) -> Vec<u8> {
        let mut k = Vec::with_capacity(16);
        match (self.saddr, self.daddr) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                k.extend_from_slice(&s.octets());
                k.extend_from_slice(&d.octets());
            }
            (s, d) => {
                let v6 = |a: IpAddr| match a {
                    IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                    IpAddr::V6(a) => a.octets(),
                };
                k.extend_from_slice(&fold6(&v6(s)));
                k.extend_from_slice(&fold6(&v6(d)));
            }
        }
        k.extend_from_slice(&self.sport.to_be_bytes());
        k.extend_from_slice(&self.dport.to_be_bytes());
        k.extend_from_slice(&[self.proto, 0, 0, 0]);
        k
    }
}

/// An IPv6 address (16 bytes, network order) folded to the 4 bytes of the
/// hash key: the bytewise XOR of its four 4-byte groups, which is the XOR of
/// the four 32-bit words the BPF program loads (XOR works byte by byte, so
/// byte order does not matter).
pub fn fold6(a: &[u8; 16]) -> [u8; 4] {
    let mut f = [0u8; 4];
    for (i, b) in a.iter().enumerate() {
        f[i % 4] ^= b;
    }
    f
}

#[inline]
fn murmur_block(h: u32, k: u32) -> u32 {
    let k = k
        .wrapping_mul(0xcc9e_2d51)
        .rotate_left(15)
        .wrapping_mul(0x1b87_3593);
    (h ^ k)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

/// The 32-bit flow hash of `flow` under `seed` (host order).
pub fn flow_hash(flow: &FlowTuple, seed: u32) -> u32 {
    let key = flow.key_bytes();
    let mut h = seed;
    for block in key.chunks_exact(4) {
        h = murmur_block(
            h,
            u32::from_le_bytes([block[0], block[1], block[2], block[3]]),
        );
    }
    h ^= key.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// Bucket index of a hash in a table of `table_size` buckets (power of two).
pub fn bucket_of(hash: u32, table_size: u32) -> u32 {
    debug_assert!(table_size.is_power_of_two());
    hash & (table_size - 1)
}

/// Outer UDP source port (host order) of GUE packets for a flow with `hash`.
pub fn gue_source_port(hash: u32) -> u16 {
    0x8000 | (hash & 0x7fff) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn matches_reference_murmur3() {
        // The reference implementation from crates.io over the same key bytes.
        let flow = FlowTuple {
            saddr: Ipv4Addr::new(192, 0, 2, 1).into(),
            daddr: Ipv4Addr::new(10, 0, 0, 100).into(),
            sport: 40000,
            dport: 80,
            proto: IPPROTO_TCP,
        };
        for seed in [0u32, 1, 0x5eed_1234, u32::MAX] {
            let want = murmur3::murmur3_32(&mut &flow.key_bytes()[..], seed).unwrap();
            assert_eq!(flow_hash(&flow, seed), want, "seed {seed:#x}");
        }
    }

    #[test]
    fn ipv6_key_folds_each_address_to_4_bytes() {
        let flow = FlowTuple {
            saddr: "2001:db8::1".parse::<Ipv6Addr>().unwrap().into(),
            daddr: "2001:db8:100::80".parse::<Ipv6Addr>().unwrap().into(),
            sport: 40000,
            dport: 443,
            proto: IPPROTO_TCP,
        };
        let k = flow.key_bytes();
        assert_eq!(k.len(), 16);
        // 20 01 0d b8 ^ 00 00 00 00 ^ 00 00 00 00 ^ 00 00 00 01
        assert_eq!(&k[..4], &[0x20, 0x01, 0x0d, 0xb9]);
        // 20 01 0d b8 ^ 01 00 00 00 ^ 00 00 00 00 ^ 00 00 00 80
        assert_eq!(&k[4..8], &[0x21, 0x01, 0x0d, 0x38]);
        assert_eq!(&k[8..], &[0x9c, 0x40, 0x01, 0xbb, 6, 0, 0, 0]);
        for seed in [0u32, 0x5eed_1234] {
            let want = murmur3::murmur3_32(&mut &k[..], seed).unwrap();
            assert_eq!(flow_hash(&flow, seed), want, "seed {seed:#x}");
        }
    }

    #[test]
    fn every_field_changes_the_hash() {
        let base = FlowTuple {
            saddr: Ipv4Addr::new(192, 0, 2, 1).into(),
            daddr: Ipv4Addr::new(10, 0, 0, 100).into(),
            sport: 40000,
            dport: 80,
            proto: IPPROTO_TCP,
        };
        let h = flow_hash(&base, 7);
        let variants = [
            FlowTuple {
                saddr: Ipv4Addr::new(192, 0, 2, 2).into(),
                ..base
            },
            FlowTuple {
                daddr: Ipv4Addr::new(10, 0, 0, 101).into(),
                ..base
            },
            FlowTuple {
                sport: 40001,
                ..base
            },
            FlowTuple { dport: 81, ..base },
            FlowTuple {
                proto: IPPROTO_UDP,
                ..base
            },
        ];
        for v in variants {
            assert_ne!(flow_hash(&v, 7), h, "{v:?}");
        }
        assert_ne!(flow_hash(&base, 8), h);
    }

    #[test]
    fn source_port_has_high_bit() {
        assert_eq!(gue_source_port(0), 0x8000);
        assert_eq!(gue_source_port(0xffff_ffff), 0xffff);
        assert_eq!(bucket_of(0x1234_5678, 4096), 0x678);
    }
}
