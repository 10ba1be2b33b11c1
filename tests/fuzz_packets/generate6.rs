//! Random IPv6 frames and IPv6-aware mutations (the generator of
//! `generate.rs`).

use std::net::{Ipv4Addr, Ipv6Addr};

use rand::Rng;

use super::model6::NEXTHDR_ICMPV6;
use super::*;

impl Gen {
    pub fn any_addr6(&mut self) -> Ipv6Addr {
        if self.chance(0.15) {
            Ipv6Addr::from(self.rng.gen::<u128>())
        } else {
            self.pick(&[
                VIP6,
                VIP6,
                VIP6B,
                CLIENT6,
                CLIENT6,
                OTHER6,
                ROUTER6,
                Ipv6Addr::UNSPECIFIED,
                Ipv6Addr::LOCALHOST,
                Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
                Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
                Ipv4Addr::new(10, 0, 0, 100).to_ipv6_mapped(),
            ])
        }
    }

    /// Extension headers before an L4 header of `last`: usually none, else
    /// a chain of 1-6 of types 0/43/60 (and sometimes a fragment header),
    /// lengths mostly small, sometimes lying.
    pub fn ext6(&mut self, last: u8) -> (u8, Vec<u8>) {
        if self.chance(0.6) {
            return (last, vec![]);
        }
        let k = 1 + self.below(6);
        let mut kinds: Vec<u8> = (0..k).map(|_| self.pick(&[0u8, 43, 60])).collect();
        if self.chance(0.15) {
            let at = self.below(k + 1);
            kinds.insert(at, 44);
        }
        let lens: Vec<u8> = (0..kinds.len())
            .map(|_| match self.below(10) {
                0..=5 => 0,
                6..=8 => 1 + self.below(3) as u8,
                _ => self.u8i(),
            })
            .collect();
        // (Lying lengths over 4 are written after the chain is built: the
        // header's bytes stay what the chain says.)
        let real: Vec<u8> = lens.iter().map(|l| (*l).min(4)).collect();
        let (first, mut ext) = super::seeds6::ext_chain(&kinds, &real, last);
        let mut at = 0;
        for (i, kind) in kinds.iter().enumerate() {
            let len = if *kind == 44 { 0 } else { real[i] as usize };
            if *kind != 44 && lens[i] != real[i] {
                ext[at + 1] = lens[i];
            }
            at += (len + 1) * 8;
        }
        (first, ext)
    }

    /// An ICMPv6 message to `dst`: mostly errors quoting flows of the IPv6
    /// services, echo requests, other types.
    pub fn icmp6_l4(&mut self, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let ty = match self.below(12) {
            0..=2 => 2,
            3 => 1,
            4 => 3,
            5 => 4,
            6 => 128,
            7 => 129,
            8 => self.pick(&[133u8, 134, 135, 136, 137, 143]),
            _ => self.rng.gen(),
        };
        let code = if self.chance(0.8) { 0 } else { self.rng.gen() };
        let body = if (1..=4).contains(&ty) || self.chance(0.2) {
            let (qs, qd, proto, sp, dp) = match self.below(10) {
                8 => (VIP6, VIP6B, IPPROTO_TCP, 80, EST_PORT),
                9 => (VIP6, CLIENT6, IPPROTO_UDP, UDP_CONN_PORT, UDP_PEER_PORT),
                0..=2 => (dst, CLIENT6, IPPROTO_TCP, 80, self.rng.gen()),
                3 | 4 => (dst, CLIENT6, IPPROTO_UDP, 53, self.rng.gen()),
                5 => (VIP6B, CLIENT6, IPPROTO_TCP, 8080, self.rng.gen()),
                _ => {
                    let proto = match self.below(6) {
                        0..=2 => IPPROTO_TCP,
                        3 | 4 => IPPROTO_UDP,
                        _ => self.rng.gen(),
                    };
                    (
                        self.any_addr6(),
                        self.any_addr6(),
                        proto,
                        self.port(),
                        self.port(),
                    )
                }
            };
            let mut q = super::seeds6::ipv6(qs, qd, proto, 20 + self.below(1400));
            if self.chance(0.05) {
                q[0] = (self.below(16) as u8) << 4;
            }
            let l4 = match proto {
                IPPROTO_TCP => tcp(sp, dp, ACK, &[]),
                IPPROTO_UDP => udp(sp, dp, &[0; 12]),
                _ => self.bytes(20),
            };
            q.extend_from_slice(&l4);
            let keep = match self.below(10) {
                0 => self.below(q.len()),
                1 => 40 + self.below(8),
                _ => q.len(),
            };
            q.truncate(keep);
            q
        } else {
            let n = self.below(64);
            self.bytes(n)
        };
        let word = if ty == 2 { 1280 } else { self.rng.gen() };
        super::seeds6::icmp6(src, dst, ty, code, word, &body)
    }

    /// A random IPv6 packet (L3), biased towards the IPv6 services.
    pub fn l3_packet6(&mut self) -> Vec<u8> {
        let (src, dst, proto, sport, dport) = match self.below(20) {
            // The flows of the namespace's IPv6 sockets.
            0 => (VIP6B, VIP6, IPPROTO_TCP, EST_PORT, 80),
            1 => (CLIENT6, VIP6, IPPROTO_UDP, UDP_PEER_PORT, UDP_CONN_PORT),
            _ => {
                let src = if self.chance(0.6) {
                    CLIENT6
                } else {
                    self.any_addr6()
                };
                let dst = match self.below(10) {
                    0..=4 => VIP6,
                    5 | 6 => VIP6B,
                    _ => self.any_addr6(),
                };
                let proto = match self.below(20) {
                    0..=7 => IPPROTO_TCP,
                    8..=12 => IPPROTO_UDP,
                    13..=16 => NEXTHDR_ICMPV6,
                    17 => 59,
                    _ => self.rng.gen(),
                };
                let sport = if self.chance(0.7) {
                    self.rng.gen_range(1024..=65535)
                } else {
                    self.port()
                };
                (src, dst, proto, sport, self.port())
            }
        };
        let l4 = match proto {
            IPPROTO_TCP => self.tcp_l4(sport, dport),
            IPPROTO_UDP => self.udp_l4(sport, dport),
            NEXTHDR_ICMPV6 => self.icmp6_l4(src, dst),
            _ => {
                let n = self.below(80);
                self.bytes(n)
            }
        };
        let (first, ext) = self.ext6(proto);
        let mut p = super::seeds6::l3v6(src, dst, first, &ext, &l4);
        if self.chance(0.05) {
            p[0] = (self.below(16) as u8) << 4 | (p[0] & 15);
        }
        if self.chance(0.07) {
            let v = self.plen_lie(be16(&p, 4));
            put16(&mut p, 4, v);
        }
        if self.chance(0.05) {
            p[1] = self.rng.gen(); // class and label
        }
        p
    }

    /// A payload length near or far from `v`.
    pub fn plen_lie(&mut self, v: u16) -> u16 {
        if self.chance(0.7) {
            let d = self.below(81) as i32 - 40;
            (v as i32 + d).clamp(0, 0xffff) as u16
        } else {
            self.u16i()
        }
    }

    /// An IPv6 frame for the balancer.
    pub fn xdp_frame6(&mut self, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
        let f = match self.below(20) {
            0 => {
                let n = 54 + self.below(300);
                let mut f = self.bytes(n);
                put16(&mut f, 12, 0x86dd);
                if self.chance(0.5) {
                    f[14] = 0x60 | (f[14] & 15);
                    f[14 + 24..14 + 40].copy_from_slice(&VIP6.octets());
                }
                ("random IPv6".to_string(), f)
            }
            1..=11 => {
                let p = self.l3_packet6();
                let mut f = eth(MAC12, CLIENT_MAC, 0x86dd);
                f.extend_from_slice(&p);
                let pad = self.padding();
                f.extend_from_slice(&pad);
                ("structured IPv6".to_string(), f)
            }
            _ => {
                let (name, s) = &seeds[self.below(seeds.len())];
                let mut f = s.clone();
                for _ in 0..1 + self.below(4) {
                    self.mutate6(&mut f, 14);
                }
                (format!("mutated seed {name}"), f)
            }
        };
        let mut f = f;
        if self.chance(0.1) {
            self.mutate6(&mut f.1, 14);
        }
        self.clamp(&mut f.1);
        f
    }

    /// A GUE protocol 41 frame for the TC program, mostly well-formed
    /// around a random inner IPv6 packet, every field sometimes wrong.
    pub fn gue_frame6(&mut self) -> Vec<u8> {
        let mut f = self.gue_frame();
        // Replace the inner IPv4 packet with an IPv6 one (lengths made
        // consistent again unless the outer ones were lies).
        let ok = f.len() >= 50 && be16(&f, 12) == 0x0800 && f[14] == 0x45 && f[14 + 28 + 1] == 4;
        if !ok {
            return f;
        }
        let n = f[49] as usize;
        let at = 50 + 4 * n;
        if at > f.len() {
            return f;
        }
        let lied = be16(&f, 16) as usize != f.len() - 14;
        let p = self.l3_packet6();
        f.truncate(at);
        f.extend_from_slice(&p);
        f[43] = 41;
        if !lied || self.chance(0.5) {
            fix_gue_lengths(&mut f);
        }
        if self.chance(0.03) {
            f[43] = self.pick(&[4, 0, 6, 17, 94, 255]);
        }
        let pad = self.padding();
        f.extend_from_slice(&pad);
        f
    }

    /// An IPv6-in-GUE frame for the TC program.
    pub fn tc_frame6(&mut self, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
        let f = match self.below(20) {
            0 => {
                // Random bytes that pass the "GUE for this node" test with
                // protocol 41.
                let n = 90 + self.below(200);
                let mut f = self.bytes(n);
                put16(&mut f, 12, 0x0800);
                f[14] = 0x45;
                f[14 + 9] = IPPROTO_UDP;
                let s = self.pick(&[B12, B13, NODE]);
                f[26..30].copy_from_slice(&s.octets());
                f[30..34].copy_from_slice(&NODE.octets());
                put16(&mut f, 36, GUE_PORT);
                f[42] = 1;
                f[43] = 41;
                f[44..48].fill(0);
                f[48] = 0;
                f[49] = 0;
                if self.chance(0.5) {
                    fix_gue_lengths(&mut f);
                }
                ("random GUE-shaped IPv6".to_string(), f)
            }
            1..=11 => ("structured GUE IPv6".to_string(), self.gue_frame6()),
            _ => {
                let (name, s) = &seeds[self.below(seeds.len())];
                let mut f = s.clone();
                for _ in 0..1 + self.below(4) {
                    if self.chance(0.5) {
                        let at = f.get(49).map(|n| 50 + 4 * *n as usize).unwrap_or(f.len());
                        self.mutate6(&mut f, at);
                    } else {
                        self.mutate(&mut f, true);
                    }
                }
                (format!("mutated seed {name}"), f)
            }
        };
        let mut f = f;
        if self.chance(0.1) {
            self.mutate(&mut f.1, true);
        }
        self.clamp(&mut f.1);
        f
    }

    /// One IPv6-aware mutation of the IPv6 packet at `at` in frame `f`
    /// (14 for a client frame, the inner packet for GUE): header fields,
    /// payload length +-N, extension header bytes, or any byte. The
    /// lengths are repaired half of the time (payload length; GUE lengths
    /// when `at` > 14).
    pub fn mutate6(&mut self, f: &mut Vec<u8>, at: usize) {
        if f.len() < at + 40 {
            if f.len() > 14 {
                let i = 14 + self.below(f.len() - 14);
                f[i] = self.u8i();
            }
            return;
        }
        let mut repair = self.chance(0.5);
        match self.below(12) {
            0 => f[at] = (self.below(16) as u8) << 4 | (f[at] & 15),
            1 => {
                let v = self.plen_lie(be16(f, at + 4));
                put16(f, at + 4, v);
                repair = false;
            }
            2 => f[at + 6] = self.pick(&[0u8, 6, 17, 43, 44, 58, 59, 60, 255]),
            3 => {
                let a = self.any_addr6();
                f[at + 8..at + 24].copy_from_slice(&a.octets());
            }
            4 => {
                let a = self.any_addr6();
                f[at + 24..at + 40].copy_from_slice(&a.octets());
            }
            5 => {
                // An extension header's next header or length byte.
                let mut off = at + 40;
                let mut nh = f[at + 6];
                let mut hs = Vec::new();
                while super::model6::is_ext(nh) && off + 2 <= f.len() && hs.len() < 8 {
                    hs.push(off);
                    nh = f[off];
                    off += (f[off + 1] as usize + 1) * 8;
                }
                if let Some(&h) = hs.get(self.below(hs.len().max(1))) {
                    if self.chance(0.5) {
                        f[h + 1] = self.u8i();
                    } else {
                        f[h] = self.pick(&[0u8, 6, 17, 43, 44, 58, 60]);
                    }
                } else {
                    // Insert an 8-byte header.
                    let kind = self.pick(&[0u8, 43, 60, 44]);
                    let h = vec![f[at + 6], 0, 1, 4, 0, 0, 0, 0];
                    f.splice(at + 40..at + 40, h);
                    f[at + 6] = kind;
                }
            }
            6 => {
                let n = at + self.below(f.len() - at);
                f.truncate(n);
                repair = false;
            }
            7 => {
                let i = at + self.below(f.len() - at);
                f[i] ^= 1 << self.below(8);
            }
            8 => {
                let i = at + self.below((f.len() - at).min(120));
                f[i] = self.u8i();
            }
            9 => {
                let n = 1 + self.below(64);
                let b = self.bytes(n);
                f.extend_from_slice(&b);
            }
            10 => {
                // L4 ports/flags/length after a header without extensions.
                let l4 = at + 40;
                if l4 + 14 <= f.len() {
                    match self.below(3) {
                        0 => {
                            let p = self.port();
                            put16(f, l4 + 2, p);
                        }
                        1 => f[l4 + 13] = self.u8i(),
                        _ => {
                            let v = self.u16i();
                            put16(f, l4 + 4, v);
                        }
                    }
                }
            }
            _ => {
                let i = 14 + self.below(f.len() - 14);
                f[i] = self.rng.gen();
            }
        }
        if repair && f.len() >= at + 40 {
            if at > 14 {
                fix_gue_lengths(f);
            } else if f.len() - at - 40 <= 0xffff {
                let plen = (f.len() - at - 40) as u16;
                put16(f, at + 4, plen);
            }
        }
    }
}
