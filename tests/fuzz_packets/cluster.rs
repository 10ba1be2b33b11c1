//! The cluster network's family (docs/design.md "GUE wire format" and
//! "IPv6 cluster network"): what differs between outer IPv4 and outer IPv6
//! GUE, in one place, so that the model, the invariants and the generators
//! serve both. Frames for an IPv6 cluster network are made from the IPv4
//! ones (seeds, sweeps, structured and mutated frames) by [`to_o6`], which
//! rewrites the outer header and widens the hop list through one address
//! map ([`host6`]), then by outer-IPv6 mutations and sweeps of their own.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use rand::Rng;

use super::*;

/// The family of the cluster network (outer headers, hop entries).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Fam {
    V4,
    V6,
}

impl Fam {
    /// Outer IP header bytes (no options, no extension headers).
    pub fn ip_len(self) -> usize {
        match self {
            Fam::V4 => 20,
            Fam::V6 => 40,
        }
    }

    /// Bytes of one hop entry.
    pub fn hop_len(self) -> usize {
        match self {
            Fam::V4 => 4,
            Fam::V6 => 16,
        }
    }

    /// `NILB_MAX_GUE_HOPS` / `NILB_MAX_GUE_HOPS6`.
    pub fn max_hops(self) -> usize {
        match self {
            Fam::V4 => 8,
            Fam::V6 => 7,
        }
    }

    /// Where the GUE header starts in a frame (Ethernet, IP, UDP).
    pub fn gue_at(self) -> usize {
        14 + self.ip_len() + 8
    }

    /// Outer IP + UDP + GUE bytes listing `n` hops.
    pub fn overhead(self, n: usize) -> usize {
        self.ip_len() + 16 + self.hop_len() * n
    }

    /// The family of an outer frame by its EtherType.
    pub fn of_frame(f: &[u8]) -> Fam {
        if f.len() >= 14 && be16(f, 12) == 0x86dd {
            Fam::V6
        } else {
            Fam::V4
        }
    }

    /// A cluster address of this family for the IPv4 one of the IPv4
    /// fixtures (NODE, B12, ...): itself, or [`host6`] of it.
    pub fn host(self, a: Ipv4Addr) -> IpAddr {
        match self {
            Fam::V4 => a.into(),
            Fam::V6 => host6(a).into(),
        }
    }
}

/// The IPv6 cluster's prefix: the IPv4 fixtures' addresses in its low 32
/// bits (2001:db8:c::/96; nt0 has 2001:db8:c::a00:0/120, nt2
/// 2001:db8:c::a01:0/120).
pub const PREFIX6: [u16; 6] = [0x2001, 0xdb8, 0xc, 0, 0, 0];

/// The IPv6 twin of an IPv4 address, so that every IPv4 frame has an
/// outer-IPv6 one with the same meaning: unicast addresses go into
/// [`PREFIX6`]; those no node may relay to stay such in IPv6 (0.0.0.0 ->
/// ::, 127.0.0.1 -> ::1, other 127/8 -> ::ffff:a.b.c.d, other 0/8 ->
/// ::a.b.c.d, 169.254/16 -> fe80::, 224/4 and 240/4 -> ff02::), and the
/// IPv4 VIPs become IPv6 VIPs.
pub fn host6(a: Ipv4Addr) -> Ipv6Addr {
    let o = a.octets();
    let low = u32::from(a);
    let (hi, lo) = ((low >> 16) as u16, low as u16);
    match o {
        [0, 0, 0, 0] => Ipv6Addr::UNSPECIFIED,
        [127, 0, 0, 1] => Ipv6Addr::LOCALHOST,
        [127, ..] => a.to_ipv6_mapped(),
        [0, ..] => Ipv6Addr::new(0, 0, 0, 0, 0, 0, hi, lo),
        [169, 254, ..] => Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, hi, lo),
        [x, ..] if x >= 224 => Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, hi, lo),
        [10, 0, 0, 100] => VIP6,
        [10, 0, 0, 101] | [10, 0, 0, 102] => VIP6B,
        _ => {
            let p = PREFIX6;
            Ipv6Addr::new(p[0], p[1], p[2], p[3], p[4], p[5], hi, lo)
        }
    }
}

/// The IPv4 fixture address an IPv6 one in [`PREFIX6`] stands for.
pub fn v4_of(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    (s[..6] == PREFIX6).then(|| Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32))
}

/// The node's IPv6 address on the IPv6 cluster network.
pub fn node6() -> Ipv6Addr {
    host6(NODE)
}

pub fn addr16(b: &[u8], o: usize) -> Ipv6Addr {
    Ipv6Addr::from(<[u8; 16]>::try_from(&b[o..o + 16]).unwrap())
}

/// A hop entry of the GUE header at `g` (the header's first byte) of family `fam`.
pub fn hop_at(fam: Fam, g: &[u8], i: usize) -> IpAddr {
    match fam {
        Fam::V4 => addr(g, 8 + 4 * i).into(),
        Fam::V6 => addr16(g, 8 + 16 * i).into(),
    }
}

/// Ethernet + outer + UDP + GUE (inner protocol `proto`: 4 or 41) from
/// `node` to `first` listing `hops` + `inner`, as the balancer sends it
/// (docs/design.md "GUE wire format"), in the family of `first`.
#[allow(clippy::too_many_arguments)]
pub fn encapsulation(
    dmac: &[u8],
    smac: &[u8],
    node: IpAddr,
    first: IpAddr,
    hops: &[IpAddr],
    hash: u32,
    proto: u8,
    inner: &[u8],
) -> Vec<u8> {
    let mut gi = gue_header_any(proto, 0, hops);
    gi.extend_from_slice(inner);
    let (dmac, smac) = (dmac[..6].try_into().unwrap(), smac[..6].try_into().unwrap());
    match (node, first) {
        (IpAddr::V4(node), IpAddr::V4(first)) => {
            let mut f = eth(dmac, smac, 0x0800);
            f.extend_from_slice(&gue_outer(node, first, gue_sport(hash), GUE_PORT, &gi));
            f
        }
        (IpAddr::V6(node), IpAddr::V6(first)) => {
            let mut f = eth(dmac, smac, 0x86dd);
            f.extend_from_slice(&gue_outer6(node, first, hash, gue_sport(hash), &gi));
            f
        }
        _ => panic!("hop {first} of another family than the node {node}"),
    }
}

/// An outer-IPv6 GUE frame from `src` to this node listing `hops`.
pub fn gue_frame_o6(
    mac: [u8; 6],
    src: Ipv6Addr,
    next: u8,
    hops: &[Ipv6Addr],
    proto: u8,
    inner: &[u8],
) -> Vec<u8> {
    let hops: Vec<IpAddr> = hops.iter().map(|&h| h.into()).collect();
    let mut gi = gue_header_any(proto, next, &hops);
    gi.extend_from_slice(inner);
    let mut f = eth(mac, MAC12, 0x86dd);
    f.extend_from_slice(&gue_outer6(src, node6(), 0x12345, 0x8123, &gi));
    f
}

/// UDP checksum over the outer IPv6 pseudo-header of an outer-IPv6 frame
/// (0 when the one in the frame is valid); None when the frame is cut
/// short of its UDP length.
pub fn udp6_sum(f: &[u8]) -> Option<u16> {
    let o = f.get(14..)?;
    let len = be16(o, 44) as usize;
    let mut p = o.get(8..40)?.to_vec();
    p.extend_from_slice(&(len as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, IPPROTO_UDP]);
    p.extend_from_slice(o.get(40..40 + len)?);
    Some(csum(&p))
}

/// An outer-IPv6 GUE frame with its UDP checksum computed.
pub fn with_udp6_checksum(mut f: Vec<u8>) -> Vec<u8> {
    put16(&mut f, 14 + 46, 0);
    let c = match udp6_sum(&f).unwrap_or(0) {
        0 => 0xffff,
        c => c,
    };
    put16(&mut f, 14 + 46, c);
    f
}

/// Make the outer payload and UDP lengths and the inner length of an
/// outer-IPv6 GUE frame cover the frame (no outer extension headers, no
/// padding).
pub fn fix_gue_lengths6(f: &mut [u8]) {
    if f.len() < 14 + 56 || f.len() - 54 > 0xffff {
        return;
    }
    let plen = (f.len() - 54) as u16;
    put16(f, 14 + 4, plen);
    put16(f, 14 + 44, plen);
    let at = 14 + 56 + 16 * f[14 + 55] as usize;
    if f[14 + 49] == 41 {
        if at + 40 <= f.len() {
            put16(f, at + 4, (f.len() - at - 40) as u16);
        }
    } else if at + 20 <= f.len() {
        put16(f, at + 2, (f.len() - at) as u16);
        fix_ip_csum(f, at);
    }
}

/// The outer-IPv6 twin of a frame (unchanged unless IPv4/UDP with its UDP
/// header in the frame): the IPv6 header says what the IPv4 one said
/// (version 4 -> 6, addresses by [`host6`], TTL as hop limit, options as a
/// hop-by-hop header and fragment bits as a fragment header, which make
/// it no GUE any more), the hop list widened to 16-byte entries (hlen
/// 1 + 4N if it was 1 + N), and every length grown by what the frame grew,
/// so that consistent lengths stay consistent and lies stay lies.
pub fn to_o6(f: &[u8]) -> Vec<u8> {
    if f.len() < 34 || be16(f, 12) != 0x0800 {
        return f.to_vec();
    }
    let o = &f[14..];
    let ihl = (o[0] & 15) as usize * 4;
    if ihl < 20 || o[9] != IPPROTO_UDP || 14 + ihl + 8 > f.len() {
        return f.to_vec();
    }
    let ver = match o[0] >> 4 {
        4 => 6,
        6 => 4,
        v => v,
    };
    let tot = be16(o, 2) as usize;
    let frag = be16(o, 6) & 0x3fff;
    let udp = &o[ihl..ihl + 8];
    let mut g = o[ihl + 8..].to_vec();
    let mut grow = 0usize;
    if g.len() >= 8 {
        let n = g[7] as usize;
        let avail = n.min((g.len() - 8) / 4);
        let mut w = g[..8].to_vec();
        for i in 0..avail {
            w.extend_from_slice(&host6(addr(&g, 8 + 4 * i)).octets());
        }
        w.extend_from_slice(&g[8 + 4 * avail..]);
        if (g[0] & 0x1f) as usize == 1 + n {
            w[0] = (g[0] & 0xe0) | ((1 + 4 * n) & 0x1f) as u8;
        }
        grow = 12 * avail;
        g = w;
    }
    let mut ext = Vec::new();
    let mut nh = IPPROTO_UDP;
    if frag != 0 {
        let mut h = vec![nh, 0];
        h.extend_from_slice(&(((frag & 0x1fff) << 3) | ((frag >> 13) & 1)).to_be_bytes());
        h.extend_from_slice(&[0, 0, 0x12, 0x34]);
        ext.splice(0..0, h);
        nh = 44;
    }
    if ihl > 20 {
        let mut h = vec![nh, 0, 1, 4, 0, 0, 0, 0];
        h.extend_from_slice(&ext);
        ext = h;
        nh = 0;
    }
    let plen = tot.wrapping_sub(ihl).wrapping_add(grow + ext.len()) as u16;
    let label = (be16(udp, 0) as u32 * 0x9e37) & 0xfffff;
    let mut v = f[..12].to_vec();
    v.extend_from_slice(&[0x86, 0xdd]);
    v.extend_from_slice(&((ver as u32) << 28 | label).to_be_bytes());
    v.extend_from_slice(&plen.to_be_bytes());
    v.extend_from_slice(&[nh, o[8]]);
    v.extend_from_slice(&host6(addr(o, 12)).octets());
    v.extend_from_slice(&host6(addr(o, 16)).octets());
    v.extend_from_slice(&ext);
    v.extend_from_slice(&udp[..4]);
    v.extend_from_slice(&(be16(udp, 4).wrapping_add(grow as u16)).to_be_bytes());
    v.extend_from_slice(&udp[6..8]);
    v.extend_from_slice(&g);
    v
}

/// Hops of an IPv6 cluster: its members, the node (loop guard), others
/// in and out of the prefix, and those no node may relay to.
pub const BAD_HOPS6: [Ipv6Addr; 8] = [
    Ipv6Addr::UNSPECIFIED,
    Ipv6Addr::LOCALHOST,
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
    Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x0a00, 0x000c),
    Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0x0a00, 0x000c),
    VIP6,
    VIP6B,
];

impl Gen {
    /// An address for an outer-IPv6 field: cluster members, the node,
    /// relay-refused ones, outsiders, random.
    pub fn cluster_addr6(&mut self) -> Ipv6Addr {
        match self.below(10) {
            0..=2 => host6(self.pick(&[B12, B13, B14, R5, FAR])),
            3 => node6(),
            4 => self.pick(&BAD_HOPS6),
            5 => host6(OUTSIDER),
            6 => Ipv6Addr::new(0x2001, 0xdb8, 0xc, 1, 0, 0, 0, 0x12),
            7 => Ipv6Addr::from(self.rng.gen::<u128>()),
            _ => self.any_addr6(),
        }
    }

    /// A frame of the IPv4 generator for an IPv6 cluster network: its
    /// outer-IPv6 twin (nine in ten; the rest stay outer IPv4, which such
    /// a node passes), then 0-3 outer-IPv6 mutations.
    pub fn o6(&mut self, f: (String, Vec<u8>)) -> (String, Vec<u8>) {
        if self.chance(0.1) {
            return f;
        }
        let mut v = to_o6(&f.1);
        let k = match self.below(4) {
            0 | 1 => 0,
            2 => 1,
            _ => 2 + self.below(2),
        };
        for _ in 0..k {
            self.mutate_o6(&mut v);
        }
        self.clamp(&mut v);
        (format!("o6 {}", f.0), v)
    }

    /// One mutation of an outer-IPv6 GUE frame: outer fields (version,
    /// payload length, next header, an extension header, addresses), UDP
    /// length, GUE bytes, N with hlen and hop entries kept consistent or
    /// not, a hop entry, the next hop index, the inner packet, any byte.
    /// Lengths are repaired half of the time.
    pub fn mutate_o6(&mut self, f: &mut Vec<u8>) {
        if f.len() < 14 + 56 || be16(f, 12) != 0x86dd {
            let i =
                14.min(f.len().saturating_sub(1)) + self.below(f.len().saturating_sub(14).max(1));
            if i < f.len() {
                f[i] = self.u8i();
            }
            return;
        }
        let mut repair = self.chance(0.5);
        let g = 14 + 48;
        match self.below(16) {
            0 => f[14] = (self.below(16) as u8) << 4 | (f[14] & 15),
            1 => {
                let v = self.plen_lie(be16(f, 18));
                put16(f, 18, v);
                repair = false;
            }
            2 => {
                let v = self.plen_lie(be16(f, 14 + 44));
                put16(f, 14 + 44, v);
                repair = false;
            }
            3 => f[14 + 6] = self.pick(&[0u8, 6, 17, 43, 44, 58, 59, 60, 255]),
            4 => {
                // An extension header before UDP.
                let kind = self.pick(&[0u8, 43, 60, 44, 17]);
                let h = vec![f[14 + 6], 0, 1, 4, 0, 0, 0, 0];
                f.splice(54..54, h);
                f[14 + 6] = kind;
            }
            5 => {
                let a = self.cluster_addr6();
                f[14 + 8..14 + 24].copy_from_slice(&a.octets());
            }
            6 => {
                let a = if self.chance(0.5) {
                    node6()
                } else {
                    self.cluster_addr6()
                };
                f[14 + 24..14 + 40].copy_from_slice(&a.octets());
            }
            7 => {
                let i = g + self.below(8);
                f[i] = self.u8i();
                if i == g + 7 && self.chance(0.5) {
                    f[g] = (f[g] & 0xe0) | ((1 + 4 * f[g + 7] as usize) & 0x1f) as u8;
                }
            }
            8 => {
                // Change N, keep hlen consistent, add or remove hop entries.
                let old = f[g + 7] as usize;
                let new = self.below(10);
                f[g + 7] = new as u8;
                f[g] = (f[g] & 0xe0) | ((1 + 4 * new) & 0x1f) as u8;
                if new > old {
                    let entries: Vec<u8> = (0..new - old)
                        .flat_map(|_| self.cluster_addr6().octets())
                        .collect();
                    let at = (g + 8 + 16 * old).min(f.len());
                    f.splice(at..at, entries);
                } else if self.chance(0.7) {
                    let at = (g + 8 + 16 * new).min(f.len());
                    let end = (g + 8 + 16 * old).min(f.len());
                    f.drain(at..end);
                }
                if self.chance(0.5) {
                    f[g + 6] = self.below(new + 2) as u8;
                }
            }
            9 => {
                // A hop entry: one the node may not relay to, itself, a
                // member, an outsider.
                let n = f[g + 7] as usize;
                if n > 0 && g + 8 + 16 * n <= f.len() {
                    let k = if self.chance(0.7) {
                        (f[g + 6] as usize).min(n - 1)
                    } else {
                        self.below(n)
                    };
                    let a = self.cluster_addr6();
                    f[g + 8 + 16 * k..g + 24 + 16 * k].copy_from_slice(&a.octets());
                }
            }
            10 => f[g + 6] = self.below(f[g + 7] as usize + 2) as u8,
            11 => {
                let at = g + 8 + 16 * f[g + 7] as usize;
                if f[g + 1] == 41 {
                    self.mutate6(f, at);
                } else if at + 20 <= f.len() {
                    match self.below(4) {
                        0 => f[at] = self.u8i(),
                        1 => f[at + 9] = self.u8i(),
                        2 => {
                            let a = self.any_addr();
                            f[at + 16..at + 20].copy_from_slice(&a.octets());
                        }
                        _ => {
                            let v = self.pick(&[0x2000, 0x0001, 0x4000]);
                            put16(f, at + 6, v);
                        }
                    }
                }
            }
            12 => {
                let n = 14 + self.below(f.len() - 14);
                f.truncate(n);
                repair = false;
            }
            13 => {
                let n = 1 + self.below(64);
                let b = self.bytes(n);
                f.extend_from_slice(&b);
            }
            14 => {
                // The UDP checksum: non-zero, valid or not.
                if self.chance(0.5) {
                    let v = with_udp6_checksum(f.clone());
                    *f = v;
                } else {
                    let v = self.u16i();
                    put16(f, 14 + 46, v);
                }
                repair = false;
            }
            _ => {
                let i = 14 + self.below(f.len() - 14);
                f[i] = self.rng.gen();
            }
        }
        if repair && be16(f, 12) == 0x86dd && f.len() >= 14 + 56 && f[14 + 6] == IPPROTO_UDP {
            fix_gue_lengths6(f);
        }
    }
}

/// Outer-IPv6 seeds: every hop a node may or may not relay to (each as
/// the next hop of a flow no socket owns, inner IPv4 and IPv6), the loop
/// guard, the longest lists (7 hops: fine; 8: malformed), sources in and
/// out of the cluster and the node's own unmarked and marked (the slow
/// path too), a SYN, non-zero UDP
/// checksums, extension headers.
pub fn tc_seeds_o6(mac: [u8; 6]) -> Vec<(String, Vec<u8>)> {
    let data4 = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40001, 80, ACK, b"x"));
    let data6 = super::seeds6::l3v6(CLIENT6, VIP6, IPPROTO_TCP, &[], &tcp(40001, 80, ACK, b"x"));
    let syn4 = l3(CLIENT, VIP, IPPROTO_TCP, &tcp(40002, 80, SYN, b""));
    let syn6 = super::seeds6::l3v6(CLIENT6, VIP6, IPPROTO_TCP, &[], &tcp(40002, 80, SYN, b""));
    let b12 = host6(B12);
    let members: Vec<Ipv6Addr> = [B13, B14, R5, FAR].iter().map(|&a| host6(a)).collect();
    let mut out = Vec::new();
    for (p, inner, name) in [(4u8, &data4, "v4"), (41, &data6, "v6")] {
        let g = |src, next, hops: &[Ipv6Addr]| gue_frame_o6(mac, src, next, hops, p, inner);
        for h in BAD_HOPS6
            .iter()
            .chain(&members)
            .chain(&[node6(), host6(OUTSIDER)])
        {
            out.push((format!("o6 {name} hop {h}"), g(b12, 0, &[*h])));
            out.push((
                format!("o6 {name} hop {h} after the loop"),
                g(b12, 1, &[node6(), *h]),
            ));
        }
        let seven: Vec<Ipv6Addr> = (0..7).map(|i| members[i % 4]).collect();
        out.push((format!("o6 {name} 7 hops"), g(b12, 6, &seven)));
        let mut eight = seven.clone();
        eight.push(host6(B13));
        out.push((format!("o6 {name} 8 hops"), g(b12, 0, &eight)));
        out.push((format!("o6 {name} no hop left"), g(b12, 1, &[host6(B13)])));
        out.push((format!("o6 {name} from node"), g(node6(), 0, &[])));
        // Marked as the balancer hands frames to its own TC: from this
        // node to itself (second chance applies), and the slow path (to
        // another node: sent on).
        out.push((
            format!("o6 {name} from node, marked"),
            marked(&g(node6(), 0, &[host6(B13)])),
        ));
        let mut slow = marked(&g(node6(), 0, &[]));
        slow[14 + 24..14 + 40].copy_from_slice(&host6(B13).octets());
        out.push((format!("o6 {name} slow path, marked"), slow));
        out.push((
            format!("o6 {name} not cluster"),
            g(host6(OUTSIDER), 0, &[host6(B13)]),
        ));
        out.push((
            format!("o6 {name} checksum"),
            with_udp6_checksum(g(b12, 0, &[host6(B13)])),
        ));
        out.push((
            format!("o6 {name} checksum 2 hops"),
            with_udp6_checksum(g(host6(B13), 1, &[node6(), host6(R5)])),
        ));
    }
    for (p, inner, name) in [(4u8, &syn4, "v4"), (41, &syn6, "v6")] {
        let f = gue_frame_o6(mac, b12, 0, &[host6(B13)], p, inner);
        out.push((format!("o6 {name} SYN"), f.clone()));
        // An outer extension header: no GUE for this node.
        let mut e = f.clone();
        e.splice(54..54, [IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0]);
        e[14 + 6] = 0;
        fix_plen(&mut e);
        out.push((format!("o6 {name} SYN behind a hop-by-hop header"), e));
        let mut other = f.clone();
        other[14 + 24..14 + 40].copy_from_slice(&host6(B13).octets());
        out.push((format!("o6 {name} SYN to another node"), other));
    }
    out
}

fn fix_plen(f: &mut [u8]) {
    let plen = (f.len() - 54) as u16;
    put16(f, 18, plen);
}

/// Systematic variants of outer-IPv6 frames: truncation at every offset,
/// every value of the next header, hop limit and each GUE header byte,
/// payload and UDP lengths off by -24..24, and N = 0..31 with hlen and
/// the entries consistent.
pub fn tc_sweeps_o6(seeds: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let bases: Vec<&(String, Vec<u8>)> = seeds
        .iter()
        .filter(|(n, _)| {
            n.ends_with("hop 2001:db8:c::a00:d")
                || n.ends_with("v6 SYN")
                || n.ends_with("v4 checksum 2 hops")
        })
        .collect();
    for (name, b) in bases {
        for n in 14..b.len() {
            out.push((format!("{name} cut at {n}"), b[..n].to_vec()));
        }
        for v in 0..=255u8 {
            let mut f = b.clone();
            f[14 + 6] = v;
            out.push((format!("{name} next header {v}"), f));
            for i in 0..8 {
                let mut f = b.clone();
                f[62 + i] = v;
                out.push((format!("{name} GUE byte {i} = {v}"), f));
            }
        }
        for d in -24i32..=24 {
            for at in [18, 14 + 44] {
                let mut f = b.clone();
                let v = (be16(&f, at) as i32 + d) as u16;
                put16(&mut f, at, v);
                out.push((format!("{name} length at {at} {d:+}"), f));
            }
        }
        for n in 0..32usize {
            let mut f = b[..70].to_vec();
            f[62] = (f[62] & 0xe0) | ((1 + 4 * n) & 0x1f) as u8;
            f[69] = n as u8;
            f[68] = n.min(1) as u8;
            for i in 0..n {
                let h = [host6(B13), node6(), host6(R5), host6(FAR)][i % 4];
                f.extend_from_slice(&h.octets());
            }
            let old_n = b[69] as usize;
            f.extend_from_slice(&b[70 + 16 * old_n..]);
            fix_gue_lengths6(&mut f);
            out.push((format!("{name} N = {n}"), f));
        }
    }
    out
}
