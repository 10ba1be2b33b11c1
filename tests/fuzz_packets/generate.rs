//! Random frames and mutations, from a small seedable generator.

use std::net::Ipv4Addr;

use rand::Rng;

use super::*;

pub const U8S: &[u8] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 0x1f, 0x20, 0x21, 0x29, 0x3f, 0x40, 0x41, 0x44, 0x45,
    0x46, 0x4f, 0x60, 0x7f, 0x80, 0xc0, 0xe0, 0xfe, 0xff,
];
pub const U16S: &[u16] = &[
    0, 1, 2, 7, 8, 15, 16, 19, 20, 21, 27, 28, 35, 36, 39, 40, 44, 48, 59, 60, 61, 64, 80, 0x0800,
    0x2000, 0x3fff, 0x4000, 0x7fff, 0x8000, 0xfffe, 0xffff, GUE_PORT,
];

/// SplitMix64: a small, fast, seedable generator (the fuzz loop runs in a
/// debug build, where ChaCha costs more than the test run itself).
pub struct SplitMix(u64);

impl rand::RngCore for SplitMix {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        rand_core_fill(self, dest)
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        rand_core_fill(self, dest);
        Ok(())
    }
}

pub fn rand_core_fill(r: &mut SplitMix, dest: &mut [u8]) {
    use rand::RngCore;
    for chunk in dest.chunks_mut(8) {
        let v = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

pub struct Gen {
    pub rng: SplitMix,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen {
            rng: SplitMix(seed),
        }
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.rng.gen_range(0..n)
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        rand::RngCore::fill_bytes(&mut self.rng, &mut v);
        v
    }

    pub fn u8i(&mut self) -> u8 {
        if self.chance(0.5) {
            self.pick(U8S)
        } else {
            self.rng.gen()
        }
    }

    pub fn u16i(&mut self) -> u16 {
        if self.chance(0.5) {
            self.pick(U16S)
        } else {
            self.rng.gen()
        }
    }

    pub fn any_addr(&mut self) -> Ipv4Addr {
        if self.chance(0.2) {
            Ipv4Addr::from(self.rng.gen::<u32>())
        } else {
            self.pick(&[
                VIP,
                VIP2,
                VIP3,
                NODE,
                B12,
                B13,
                B14,
                R5,
                FAR,
                CLIENT,
                OUTSIDER,
                OTHER,
                Ipv4Addr::UNSPECIFIED,
                Ipv4Addr::BROADCAST,
                Ipv4Addr::new(224, 0, 0, 1),
                Ipv4Addr::LOCALHOST,
            ])
        }
    }

    pub fn port(&mut self) -> u16 {
        if self.chance(0.3) {
            self.rng.gen()
        } else {
            self.pick(&[
                80,
                80,
                80,
                53,
                53,
                443,
                8080,
                UDP_CONN_PORT,
                UDP_PEER_PORT,
                EST_PORT,
                GUE_PORT,
                0,
                1,
                65535,
            ])
        }
    }

    pub fn payload_len(&mut self) -> usize {
        match self.below(10) {
            0..=4 => 0,
            5..=7 => self.below(64),
            8 => 64 + self.below(600),
            _ => 1380 + self.below(140),
        }
    }

    /// An IPv4 header for `l4_len` bytes of payload with optional options,
    /// fragment field, and (sometimes) lies in version, IHL or total length.
    pub fn ip_header(&mut self, src: Ipv4Addr, dst: Ipv4Addr, proto: u8, l4_len: usize) -> Vec<u8> {
        let opts = if self.chance(0.1) {
            let n = 4 * (1 + self.below(10));
            let mut o = self.bytes(n);
            if self.chance(0.5) {
                o.iter_mut().for_each(|b| *b = 1); // NOPs
            }
            o
        } else {
            vec![]
        };
        let frag = match self.below(20) {
            0..=13 => 0,
            14..=16 => 0x4000,
            17 => 0x2000,
            18 => 1 + self.below(0x1fff) as u16,
            _ => self.rng.gen(),
        };
        let mut h = ipv4(src, dst, proto, l4_len, frag, &opts);
        if self.chance(0.05) {
            h[0] = (h[0] & 0x0f) | (self.below(16) as u8) << 4;
        }
        if self.chance(0.05) {
            h[0] = (h[0] & 0xf0) | self.below(16) as u8;
        }
        if self.chance(0.07) {
            let v = self.u16i();
            put16(&mut h, 2, v);
        }
        if self.chance(0.05) {
            h[1] = self.rng.gen(); // TOS
        }
        fix_ip_csum(&mut h, 0);
        if self.chance(0.05) {
            h[10] ^= 0x5a; // bad checksum: nobody on the path should care
        }
        h
    }

    pub fn tcp_l4(&mut self, sport: u16, dport: u16) -> Vec<u8> {
        let flags = match self.below(12) {
            0..=3 => SYN,
            4 => ACK,
            5 => ACK | PSH,
            6 => SYN | ACK,
            7 => RST,
            8 => FIN | ACK,
            9 => RST | ACK,
            _ => self.rng.gen(),
        };
        let plen = self.payload_len();
        let payload = self.bytes(plen);
        let mut t = tcp(sport, dport, flags, &[]);
        match self.below(20) {
            0 => t[12] = (self.below(16) as u8) << 4, // doff lies
            1 => {
                let n = 1 + self.below(10);
                t[12] = ((5 + n) as u8) << 4;
                let opts = self.bytes(4 * n);
                t.extend_from_slice(&opts);
            }
            _ => {}
        }
        t.extend_from_slice(&payload);
        t
    }

    pub fn udp_l4(&mut self, sport: u16, dport: u16) -> Vec<u8> {
        let plen = self.payload_len();
        let payload = self.bytes(plen);
        let mut u = udp(sport, dport, &payload);
        if self.chance(0.1) {
            let v = self.u16i();
            put16(&mut u, 4, v);
        }
        u
    }

    /// An embedded IPv4 packet as an ICMP error quotes it.
    pub fn embedded(&mut self) -> Vec<u8> {
        let (src, dst, proto, sport, dport) = match self.below(8) {
            0 => (VIP, NODE, IPPROTO_TCP, 80, EST_PORT),
            1 => (VIP, B12, IPPROTO_UDP, UDP_CONN_PORT, UDP_PEER_PORT),
            2 => (VIP, CLIENT, IPPROTO_TCP, 80, self.rng.gen()),
            3 => (VIP, CLIENT, IPPROTO_UDP, 53, self.rng.gen()),
            4 => (VIP3, CLIENT, IPPROTO_TCP, 8080, self.rng.gen()),
            _ => {
                let proto = match self.below(6) {
                    0..=2 => IPPROTO_TCP,
                    3 | 4 => IPPROTO_UDP,
                    _ => self.rng.gen(),
                };
                (
                    self.any_addr(),
                    self.any_addr(),
                    proto,
                    self.port(),
                    self.port(),
                )
            }
        };
        let quoted = match self.below(10) {
            0 => self.below(8),
            1 | 2 => 20 + self.below(40),
            _ => 8,
        };
        let l4 = match proto {
            IPPROTO_TCP => tcp(sport, dport, ACK, &[]),
            IPPROTO_UDP => udp(sport, dport, &[0; 12]),
            _ => self.bytes(20),
        };
        let mut full = l4.clone();
        full.resize(quoted.max(l4.len()), 0);
        let claimed = 20 + self.below(1400);
        let mut e = self.ip_header(src, dst, proto, claimed);
        e.extend_from_slice(&full[..quoted]);
        e
    }

    pub fn icmp_l4(&mut self) -> Vec<u8> {
        let (ty, code) = match self.below(14) {
            0..=5 => (3, 4),
            6 => (8, 0),
            7 => (0, 0),
            8 => (3, self.rng.gen()),
            9 => (11, self.below(2) as u8),
            10 => (12, 0),
            11 => (5, 1),
            _ => (self.rng.gen(), self.rng.gen()),
        };
        let mut m = vec![ty, code, 0, 0, 0, 0, 0x05, 0x78];
        if [3, 5, 11, 12].contains(&ty) || self.chance(0.2) {
            let e = self.embedded();
            m.extend_from_slice(&e);
        } else {
            let n = self.below(64);
            let b = self.bytes(n);
            m.extend_from_slice(&b);
        }
        let c = csum(&m);
        put16(&mut m, 2, c);
        m
    }

    /// A random IPv4 packet (L3), biased towards the services and sockets.
    pub fn l3_packet(&mut self) -> Vec<u8> {
        let (src, dst, proto, sport, dport) = match self.below(20) {
            0 => (NODE, VIP, IPPROTO_TCP, EST_PORT, 80),
            1 => (B12, VIP, IPPROTO_UDP, UDP_PEER_PORT, UDP_CONN_PORT),
            _ => {
                let src = if self.chance(0.5) {
                    CLIENT
                } else {
                    self.any_addr()
                };
                let dst = match self.below(10) {
                    0..=3 => VIP,
                    4 => VIP2,
                    5 => VIP3,
                    _ => self.any_addr(),
                };
                let proto = match self.below(20) {
                    0..=7 => IPPROTO_TCP,
                    8..=12 => IPPROTO_UDP,
                    13..=16 => IPPROTO_ICMP,
                    17 => 41,
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
            IPPROTO_ICMP => self.icmp_l4(),
            _ => {
                let n = self.below(80);
                self.bytes(n)
            }
        };
        let mut p = self.ip_header(src, dst, proto, l4.len());
        p.extend_from_slice(&l4);
        p
    }

    pub fn padding(&mut self) -> Vec<u8> {
        match self.below(10) {
            0 => vec![0; 1 + self.below(46)],
            1 => {
                let n = 1 + self.below(46);
                self.bytes(n)
            }
            _ => vec![],
        }
    }

    /// A frame for the balancer.
    pub fn xdp_frame(&mut self, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
        let f = match self.below(20) {
            0 => {
                let n = 14 + self.below(300);
                ("random".to_string(), self.bytes(n))
            }
            1 => {
                let n = 34 + self.below(300);
                let mut f = self.bytes(n);
                put16(&mut f, 12, 0x0800);
                ("random IPv4".to_string(), f)
            }
            2 => {
                let et = self.pick(&[0x0806, 0x86dd, 0x8100, 0x88a8, 0x0800, 0x0000, 0xffff]);
                let mut f = eth(MAC12, CLIENT_MAC, et);
                let p = self.l3_packet();
                if et == 0x8100 || et == 0x88a8 {
                    f.extend_from_slice(&[0, 1, 0x08, 0x00]); // VLAN 1, IPv4
                }
                f.extend_from_slice(&p);
                (format!("ethertype {et:#06x}"), f)
            }
            3..=13 => {
                let mut f = eth(MAC12, CLIENT_MAC, 0x0800);
                let p = self.l3_packet();
                f.extend_from_slice(&p);
                let pad = self.padding();
                f.extend_from_slice(&pad);
                ("structured".to_string(), f)
            }
            _ => self.mutated_seed(seeds, false),
        };
        self.finish(f, false)
    }

    /// A GUE frame for the TC program, mostly well-formed around a random
    /// inner packet, with every field sometimes wrong.
    /// A random seed with 1-4 mutations (`gue`: mutations aware of GUE).
    pub fn mutated_seed(&mut self, seeds: &[(String, Vec<u8>)], gue: bool) -> (String, Vec<u8>) {
        let (name, s) = &seeds[self.below(seeds.len())];
        let mut f = s.clone();
        for _ in 0..1 + self.below(4) {
            self.mutate(&mut f, gue);
        }
        (format!("mutated seed {name}"), f)
    }

    /// Last touch on every generated frame: one more mutation one time in
    /// ten, then the size clamp.
    pub fn finish(&mut self, mut f: (String, Vec<u8>), gue: bool) -> (String, Vec<u8>) {
        if self.chance(0.1) {
            self.mutate(&mut f.1, gue);
        }
        self.clamp(&mut f.1);
        f
    }

    pub fn gue_frame(&mut self) -> Vec<u8> {
        let src = match self.below(10) {
            0..=5 => B12,
            6 => B13,
            7 => self.pick(&[B14, R5, FAR, NODE]),
            _ => self.any_addr(),
        };
        let dst = if self.chance(0.92) {
            NODE
        } else {
            self.any_addr()
        };
        let n = match self.below(20) {
            0..=5 => 0,
            6..=13 => 1,
            14..=17 => 2 + self.below(7),
            _ => 9 + self.below(23),
        };
        let hops: Vec<Ipv4Addr> = (0..n)
            .map(|_| match self.below(12) {
                0..=4 => B13,
                5 => NODE,
                6 => Ipv4Addr::UNSPECIFIED,
                7 => R5,
                // Hops no node may relay to: not unicast, or a VIP.
                8 => match self.below(7) {
                    0 => Ipv4Addr::new(127, 0, 0, 1),
                    1 => Ipv4Addr::new(224, 0, 0, 1),
                    2 => Ipv4Addr::BROADCAST,
                    3 => Ipv4Addr::new(240, 1, 2, 3),
                    4 => Ipv4Addr::new(0, 1, 2, 3),
                    5 => Ipv4Addr::new(169, 254, 169, 254),
                    _ => VIP,
                },
                _ => self.any_addr(),
            })
            .collect();
        let next = if self.chance(0.85) {
            self.below(n + 1)
        } else {
            self.u8i() as usize
        };
        let inner = if self.chance(0.05) {
            // Nested GUE: the inner packet is itself GUE, to a VIP.
            let mut gi = gue_header(4, 0, &[B13]);
            let p = self.l3_packet();
            gi.extend_from_slice(&p);
            gue_outer(B12, VIP, 0x8001, GUE_PORT, &gi)
        } else {
            self.l3_packet()
        };
        let mut g = gue_header(4, next as u8, &hops);
        if self.chance(0.05) {
            g[0] = self.u8i();
        }
        if self.chance(0.05) {
            g[1] = self.pick(&[41, 0, 6, 17, 94, 255]);
        }
        for b in &mut g[2..6] {
            if self.chance(0.02) {
                *b = self.u8i();
            }
        }
        if self.chance(0.03) {
            // Hop list and N disagree.
            let extra = self.below(4);
            for _ in 0..extra {
                g.extend_from_slice(&B13.octets());
            }
            if self.chance(0.5) && g.len() >= 12 {
                g.truncate(g.len() - 4);
            }
        }
        g.extend_from_slice(&inner);
        let sport = self.rng.gen::<u16>() | 0x8000;
        let dport = if self.chance(0.95) {
            GUE_PORT
        } else {
            self.port()
        };
        let mut o = gue_outer(src, dst, sport, dport, &g);
        if self.chance(0.04) {
            // Outer options (lengths fixed).
            let k = 1 + self.below(10);
            let opts = vec![1u8; 4 * k];
            o.splice(20..20, opts);
            o[0] = 0x45 + k as u8;
            let tot = o.len() as u16;
            put16(&mut o, 2, tot);
        }
        if self.chance(0.03) {
            o[0] = (self.below(16) as u8) << 4 | (o[0] & 15);
        }
        if self.chance(0.03) {
            o[0] = (o[0] & 0xf0) | self.below(16) as u8;
        }
        if self.chance(0.03) {
            let v = self.pick(&[0x2000, 0x0001, 0x1fff, 0x6000, 0x8000]);
            put16(&mut o, 6, v);
        }
        if self.chance(0.04) {
            let v = self.u16i();
            put16(&mut o, 2, v);
        }
        if self.chance(0.04) {
            let ihl = (o[0] & 15) as usize * 4;
            if ihl >= 20 && ihl + 8 <= o.len() {
                let v = self.u16i();
                put16(&mut o, ihl + 4, v);
            }
        }
        fix_ip_csum(&mut o, 0);
        if self.chance(0.03) {
            o[11] ^= 0x33;
        }
        let mut f = eth(MAC12, CLIENT_MAC, 0x0800);
        f.extend_from_slice(&o);
        let pad = self.padding();
        f.extend_from_slice(&pad);
        f
    }

    /// A frame for the TC program.
    pub fn tc_frame(&mut self, seeds: &[(String, Vec<u8>)]) -> (String, Vec<u8>) {
        let f = match self.below(20) {
            0 => {
                let n = 14 + self.below(300);
                ("random".to_string(), self.bytes(n))
            }
            1 => {
                // Random bytes that pass the "GUE for this node" test.
                let n = 50 + self.below(200);
                let mut f = self.bytes(n);
                put16(&mut f, 12, 0x0800);
                f[14] = 0x45;
                f[14 + 9] = IPPROTO_UDP;
                let s = self.pick(&[B12, B13, NODE]);
                f[26..30].copy_from_slice(&s.octets());
                f[30..34].copy_from_slice(&NODE.octets());
                put16(&mut f, 36, GUE_PORT);
                ("random GUE-shaped".to_string(), f)
            }
            2 => {
                let mut f = eth(MAC12, CLIENT_MAC, 0x0800);
                let p = self.l3_packet();
                f.extend_from_slice(&p);
                ("plain IPv4".to_string(), f)
            }
            3..=14 => ("structured GUE".to_string(), self.gue_frame()),
            _ => self.mutated_seed(seeds, true),
        };
        self.finish(f, true)
    }

    /// Test runs need at least an Ethernet header; keep frames below a page.
    pub fn clamp(&mut self, f: &mut Vec<u8>) {
        if f.len() < 14 {
            let n = 14 - f.len();
            let b = self.bytes(n);
            f.extend_from_slice(&b);
        }
        f.truncate(3000);
    }

    /// One mutation; `gue`: also GUE- and inner-aware ones. Lengths and
    /// checksums are repaired half of the time so that deeper checks run.
    pub fn mutate(&mut self, f: &mut Vec<u8>, gue: bool) {
        let len = f.len();
        let inner_at = |f: &[u8]| {
            if f.len() >= 50 {
                Some(14 + 20 + 8 + 8 + 4 * f[49] as usize)
            } else {
                None
            }
        };
        let mut repair = self.chance(0.5);
        match self.below(if gue { 14 } else { 10 }) {
            0 => {
                let i = self.below(len);
                f[i] ^= 1 << self.below(8);
            }
            1 => {
                let i = self.below(len);
                f[i] = self.u8i();
            }
            2 if len >= 2 => {
                let i = self.below(len - 1);
                let v = self.u16i();
                put16(f, i, v);
            }
            3 => {
                let n = 14 + self.below(len.saturating_sub(14).max(1));
                f.truncate(n);
                repair = false;
            }
            4 => {
                let n = 1 + self.below(64);
                let b = self.bytes(n);
                f.extend_from_slice(&b);
            }
            5 if len > 14 => {
                let at = 14 + self.below(len - 14);
                let n = 1 + self.below(8);
                let b = self.bytes(n);
                f.splice(at..at, b);
            }
            6 if len > 15 => {
                let at = 14 + self.below(len - 14);
                let n = (1 + self.below(8)).min(len - at);
                f.drain(at..at + n);
            }
            7 if len >= 34 => {
                // Outer IPv4 fields.
                match self.below(7) {
                    0 => f[14] = self.u8i(),
                    1 => {
                        let v = self.u16i();
                        put16(f, 16, v);
                        repair = false;
                    }
                    2 => {
                        let v =
                            self.pick(&[0x2000, 0x0001, 0x1fff, 0x4000, 0x6000, 0x8000, 0xffff]);
                        put16(f, 20, v);
                    }
                    3 => f[23] = self.u8i(),
                    4 => {
                        let a = self.any_addr();
                        f[26..30].copy_from_slice(&a.octets());
                    }
                    5 => {
                        let a = self.any_addr();
                        f[30..34].copy_from_slice(&a.octets());
                    }
                    _ => put16(f, 12, 0x0800),
                }
            }
            8 if len >= 14 + 20 + 4 => {
                // L4 ports / flags behind the (claimed) IPv4 header.
                let ihl = (f[14] & 15) as usize * 4;
                let at = 14 + ihl.max(20);
                if at + 14 <= len {
                    match self.below(3) {
                        0 => {
                            let p = self.port();
                            put16(f, at + 2, p);
                        }
                        1 => f[at + 13] = self.u8i(),
                        _ => f[at + 12] = self.u8i(),
                    }
                }
            }
            9 => {
                let n = 1 + self.below(16);
                for _ in 0..n {
                    let i = self.below(len);
                    f[i] = self.rng.gen();
                }
            }
            10 if len >= 50 => {
                // A GUE byte.
                let i = 42 + self.below(8);
                f[i] = self.u8i();
                if i == 49 && self.chance(0.5) {
                    f[42] = (f[42] & 0xe0) | ((1 + f[49] as usize) & 0x1f) as u8;
                }
            }
            11 if len >= 50 => {
                // Change N, keep hlen consistent, add or remove hop words.
                let old = f[49] as usize;
                let new = self.below(12);
                f[49] = new as u8;
                f[42] = (f[42] & 0xe0) | ((1 + new) & 0x1f) as u8;
                if new > old {
                    let words: Vec<u8> = (0..new - old)
                        .flat_map(|_| self.any_addr().octets())
                        .collect();
                    let at = (50 + 4 * old).min(f.len());
                    f.splice(at..at, words);
                } else if self.chance(0.7) {
                    let at = (50 + 4 * new).min(f.len());
                    let end = (50 + 4 * old).min(f.len());
                    f.drain(at..end);
                }
                if self.chance(0.5) {
                    f[48] = self.below(new + 2) as u8;
                }
            }
            12 if len >= 50 => {
                // A hop word.
                let n = f[49] as usize;
                if n > 0 && 50 + 4 * n <= len {
                    let k = self.below(n);
                    let a = self.any_addr();
                    f[50 + 4 * k..54 + 4 * k].copy_from_slice(&a.octets());
                }
            }
            13 if len >= 50 && f[43] == 41 => {
                // An inner IPv6 field (lengths repaired there).
                let at = 50 + 4 * f[49] as usize;
                self.mutate6(f, at);
                repair = false;
            }
            13 => {
                // An inner IPv4 field.
                if let Some(at) = inner_at(f) {
                    if at + 20 <= f.len() {
                        match self.below(6) {
                            0 => f[at] = self.u8i(),
                            1 => {
                                let v = self.u16i();
                                put16(f, at + 2, v);
                                repair = false;
                            }
                            2 => {
                                let v = self.pick(&[0x2000, 0x0001, 0x1fff, 0x4000, 0x8000]);
                                put16(f, at + 6, v);
                            }
                            3 => f[at + 9] = self.u8i(),
                            4 => {
                                let a = self.any_addr();
                                f[at + 12..at + 16].copy_from_slice(&a.octets());
                            }
                            _ => {
                                let a = self.any_addr();
                                f[at + 16..at + 20].copy_from_slice(&a.octets());
                            }
                        }
                    }
                }
            }
            _ => {
                let i = self.below(len);
                f[i] = !f[i];
            }
        }
        if repair {
            if gue {
                fix_gue_lengths(f);
            } else {
                fix_ip_lengths(f);
            }
        }
    }
}

/// Make the IPv4 total length cover the frame and the checksum valid.
pub fn fix_ip_lengths(f: &mut [u8]) {
    if f.len() >= 34 && f.len() - 14 <= 0xffff {
        let tot = (f.len() - 14) as u16;
        put16(f, 16, tot);
        fix_ip_csum(f, 14);
    }
}

/// Make outer, UDP and inner lengths consistent with the frame (assuming an
/// outer header without options and no padding), checksums valid; an inner
/// IPv6 packet (GUE protocol 41) gets its payload length.
pub fn fix_gue_lengths(f: &mut [u8]) {
    if f.len() < 50 || f.len() - 14 > 0xffff {
        return;
    }
    let tot = f.len() - 14;
    put16(f, 16, tot as u16);
    put16(f, 38, (tot - 20) as u16);
    fix_ip_csum(f, 14);
    let at = 50 + 4 * f[49] as usize;
    if f[43] == 41 {
        if at + 40 <= f.len() {
            put16(f, at + 4, (f.len() - at - 40) as u16);
        }
        return;
    }
    if at + 20 <= f.len() {
        put16(f, at + 2, (f.len() - at) as u16);
        fix_ip_csum(f, at);
    }
}
