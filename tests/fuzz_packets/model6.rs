//! The reference model for IPv6 (docs/design.md "IPv6"), written from the
//! rules, like `model.rs` for IPv4:
//!
//! - XDP: IPv6 to no IPv6 VIP passes untouched; to a VIP: version 6 and the
//!   payload length within the frame; up to NILB_IPV6_MAX_EXT (4)
//!   extension headers of types 0/43/60 walked (length (h[1] + 1) x 8, each
//!   header's 8 bytes within the payload), a fifth dropped
//!   (`xdp_drop_ipv6_ext`), a fragment header dropped as a fragment; TCP
//!   (20 bytes, data offset 5 or more and within the payload), UDP (8
//!   bytes; a service's datagram's length 8 or more and within the
//!   payload), ICMPv6 (8 bytes; an error of types 1-4 quotes a 40-byte IPv6
//!   header from the VIP, version 6, and the 4 bytes of ports of a TCP/UDP
//!   quote, all within the message; echo requests and other types pass);
//!   then hashed, bucketed and encapsulated (GUE protocol 41) exactly as
//!   IPv4, or answered with ICMPv6 Packet Too Big;
//! - TC: GUE protocol 41 after the outer checks of IPv4: the inner IPv6
//!   header within the packet, version 6, 40 + payload length filling the
//!   GUE payload, the extension walk ending at an L4 header; an inner IPv6
//!   VIP; the L4 checks of XDP; the IPv6 sockets of the worker's namespace
//!   (`tcp_lookup6`, `udp_lookup6`), then second chance as IPv4
//!   (`tc_decap_ipv6` / `tc_forward_ipv6` counted besides); unknown_flow
//!   rst answers with an IPv6 RST from the VIP (rst_reply6).

use std::net::{IpAddr, Ipv6Addr};

use super::*;

pub const NEXTHDR_ICMPV6: u8 = 58;
/// NILB_IPV6_MAX_EXT.
pub const MAX_EXT: usize = 4;
/// NILB_MIN_IPV6_MTU.
pub const MIN_IPV6_MTU: usize = 1280;
/// Bytes of the packet an ICMPv6 Packet Too Big quotes at most (whole
/// 32-bit words: bpf/too_big.h).
pub const PTB6_QUOTE: usize = 184;

pub fn addr6(b: &[u8], o: usize) -> Ipv6Addr {
    let a: [u8; 16] = b[o..o + 16].try_into().unwrap();
    Ipv6Addr::from(a)
}

/// Where the extension headers of an IPv6 packet lead.
#[derive(Debug, PartialEq)]
pub enum Walk {
    /// The L4 header's offset from the IPv6 header, and its protocol.
    L4(usize, u8),
    Fragment,
    TooMany,
    Malformed(&'static str),
}

pub fn is_ext(nh: u8) -> bool {
    nh == 0 || nh == 43 || nh == 60
}

/// Walk the extension headers of `ip` (the IPv6 header and what follows it
/// in the frame) whose payload length is `plen`.
pub fn walk6(ip: &[u8], plen: usize) -> Walk {
    let mut off = 40;
    let mut nh = ip[6];
    for i in 0..MAX_EXT {
        if !is_ext(nh) {
            break;
        }
        // Hop-by-hop options only right after the IPv6 header (RFC 8200 4.1).
        if nh == 0 && i > 0 {
            return Walk::Malformed("hop-by-hop header not first");
        }
        if off + 4 > ip.len() || off + 8 > 40 + plen {
            return Walk::Malformed("extension header beyond the payload");
        }
        // A routing header with segments left: the VIP is not the final
        // destination (type 0 is deprecated, RFC 5095).
        if nh == 43 && ip[off + 3] != 0 {
            return Walk::Malformed("routing header with segments left");
        }
        nh = ip[off];
        off += (ip[off + 1] as usize + 1) * 8;
    }
    if is_ext(nh) {
        return Walk::TooMany;
    }
    if nh == 44 {
        return Walk::Fragment;
    }
    if off > 40 + plen {
        return Walk::Malformed("extension headers end beyond the payload");
    }
    Walk::L4(off, nh)
}

/// What an ICMPv6 message to `vip` (its bytes within the payload) is about.
pub enum Quote6 {
    /// (quoted source = the VIP, quoted destination, quoted source port,
    /// quoted destination port, protocol).
    Flow((Ipv6Addr, Ipv6Addr, u16, u16, u8)),
    Ping,
    NoFlow(&'static str),
    Malformed(&'static str),
}

pub fn icmp6_quote(l4: &[u8], vip: Ipv6Addr) -> Quote6 {
    use Quote6::*;
    if l4.len() < 8 {
        return Malformed("ICMPv6 header beyond the payload");
    }
    match l4[0] {
        128 => return Ping,
        1..=4 => {}
        _ => return NoFlow("ICMPv6 neither an error nor an echo request"),
    }
    let q = &l4[8..];
    if q.len() < 40 {
        return Malformed("quoted IPv6 header truncated");
    }
    if q[0] >> 4 != 6 {
        return Malformed("quoted IPv6 version");
    }
    if addr6(q, 8) != vip {
        return Malformed("quoted source is not the VIP the error was sent to");
    }
    // (As for IPv4: the ports matter only for a TCP/UDP quote.)
    if q[6] != IPPROTO_TCP && q[6] != IPPROTO_UDP {
        return NoFlow("quoted next header not TCP/UDP");
    }
    if q.len() < 44 {
        return Malformed("quoted ports truncated");
    }
    Flow((addr6(q, 8), addr6(q, 24), be16(q, 40), be16(q, 42), q[6]))
}

/// The reference parser for IPv6 frames (Ethernet type 0x86DD) reaching
/// the balancer.
pub fn parse_xdp6(w: &World, f: &[u8]) -> XdpClass {
    if f.len() < 14 + 40 {
        return XdpClass::NonIp;
    }
    let ip = &f[14..];
    let (saddr, daddr) = (addr6(ip, 8), addr6(ip, 24));
    if w.fam == super::cluster::Fam::V6 && IpAddr::V6(daddr) == w.node {
        // An IPv6 cluster network's GUE for this node: a valid IPv6
        // header whose next header is UDP (no extension headers) to the
        // GUE port, the UDP header within the payload.
        let plen = be16(ip, 4) as usize;
        if ip[0] >> 4 == 6
            && 14 + 40 + plen <= f.len()
            && walk6(ip, plen) == Walk::L4(40, IPPROTO_UDP)
            && plen >= 8
            && be16(ip, 42) == GUE_PORT
        {
            return XdpClass::GueForNode;
        }
    }
    if !w.is_vip6(daddr) {
        return XdpClass::NotService("not an IPv6 VIP");
    }
    let bad = |why| XdpClass::Malformed { vip: true, why };
    if ip[0] >> 4 != 6 {
        return bad("IPv6 version");
    }
    let plen = be16(ip, 4) as usize;
    if 14 + 40 + plen > f.len() {
        return bad("IPv6 payload length beyond the frame");
    }
    let (off, nh) = match walk6(ip, plen) {
        Walk::L4(off, nh) => (off, nh),
        Walk::Fragment => return XdpClass::Fragment { vip: true },
        Walk::TooMany => return XdpClass::TooManyExt,
        Walk::Malformed(why) => return bad(why),
    };
    let tot = 40 + plen;
    let l4 = &ip[off..tot];
    match nh {
        IPPROTO_TCP | IPPROTO_UDP => {
            let need = if nh == IPPROTO_TCP { 20 } else { 8 };
            if l4.len() < need {
                return bad("L4 header beyond the payload");
            }
            if nh == IPPROTO_TCP && l4[12] >> 4 < 5 {
                return bad("TCP data offset below 5");
            }
            if nh == IPPROTO_TCP && (l4[12] >> 4) as usize * 4 > l4.len() {
                return bad("TCP data offset past the segment");
            }
            let (sport, dport) = (be16(l4, 0), be16(l4, 2));
            let key = (IpAddr::V6(daddr), dport, nh);
            if !w.services.contains_key(&key) {
                return XdpClass::NotService("no such IPv6 (VIP, port, protocol)");
            }
            if nh == IPPROTO_UDP && !(8..=l4.len()).contains(&(be16(l4, 4) as usize)) {
                return bad("UDP length below 8 or past the payload");
            }
            let syn = nh == IPPROTO_TCP && l4[13] & SYN != 0 && l4[13] & ACK == 0;
            XdpClass::Balance(Flow {
                key,
                tuple: (saddr.into(), daddr.into(), sport, dport, nh),
                tot,
                syn,
                icmp: false,
            })
        }
        NEXTHDR_ICMPV6 => {
            let (qs, qd, qsp, qdp, qp) = match icmp6_quote(l4, daddr) {
                Quote6::Flow(q) => q,
                Quote6::Ping => return XdpClass::NotService("ICMPv6 echo request"),
                Quote6::NoFlow(why) => return XdpClass::NotService(why),
                Quote6::Malformed(why) => return XdpClass::IcmpMalformed(why),
            };
            let key = (IpAddr::V6(qs), qsp, qp);
            if !w.services.contains_key(&key) {
                return XdpClass::NotService("quoted IPv6 flow of no service");
            }
            XdpClass::Balance(Flow {
                key,
                tuple: (qd.into(), qs.into(), qdp, qsp, qp),
                tot,
                syn: false,
                icmp: true,
            })
        }
        _ => XdpClass::NotService("IPv6 next header not TCP/UDP/ICMPv6"),
    }
}

/// ICMPv6 checksum of `msg` from `src` to `dst` (RFC 8200 8.1
/// pseudo-header); 0 when `msg` carries a valid one.
pub fn icmp6_csum(src: &[u8], dst: &[u8], msg: &[u8]) -> u16 {
    let mut p = src.to_vec();
    p.extend_from_slice(dst);
    p.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, NEXTHDR_ICMPV6]);
    p.extend_from_slice(msg);
    csum(&p)
}

/// The ICMPv6 Packet Too Big the balancer must send back for client frame
/// `f` with MTU `mtu` (bpf/too_big.h): MACs swapped, IPv6 (class and label
/// 0, next header 58, hop limit 64) from the packet's destination (the
/// VIP) to its source, type 2 code 0, the MTU, the packet's first
/// min(40 + payload length, 184) bytes in whole 32-bit words.
pub fn icmp6_too_big_reply(f: &[u8], mtu: u32) -> Vec<u8> {
    let ip = &f[14..];
    let tot = 40 + be16(ip, 4) as usize;
    let q = tot.min(PTB6_QUOTE) & !3;
    let mut msg = vec![2, 0, 0, 0];
    msg.extend_from_slice(&mtu.to_be_bytes());
    msg.extend_from_slice(&ip[..q]);
    let c = icmp6_csum(&ip[24..40], &ip[8..24], &msg);
    put16(&mut msg, 2, c);
    let mut out = f[6..12].to_vec();
    out.extend_from_slice(&f[0..6]);
    out.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(&[NEXTHDR_ICMPV6, 64]);
    out.extend_from_slice(&ip[24..40]);
    out.extend_from_slice(&ip[8..24]);
    out.extend_from_slice(&msg);
    out
}

/// Independent check of an ICMPv6 Packet Too Big the balancer sent back
/// (`out`) for client frame `frame`: only for a packet that does not fit
/// the wire with GUE, not an ICMPv6 error, from a source that is neither
/// multicast nor unspecified; well-formed, from the VIP to the client, a
/// valid checksum, an MTU of at least 1280 that the packet does not fit,
/// quoting the packet's first bytes. Returns what is wrong.
pub fn check_icmp6_reply(w: &World, frame: &[u8], class: &XdpClass, out: &[u8]) -> Option<String> {
    let XdpClass::Balance(flow) = class else {
        return Some(format!(
            "ICMPv6 reply to a frame the reference does not balance: {class:?}"
        ));
    };
    let ip = &frame[14..];
    if out.len() < 14 + 40 + 8 + 48 {
        return Some("ICMPv6 reply shorter than Ethernet + IPv6 + ICMPv6 + 48 bytes".into());
    }
    let o = &out[14..];
    let icmp = &o[40..];
    let mtu = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]) as usize;
    let quote = &icmp[8..];
    let checks: [(bool, &str); 13] = [
        (flow.key.0.is_ipv6(), "ICMPv6 reply to IPv4"),
        (!flow.icmp, "ICMPv6 reply about an ICMPv6 error"),
        (
            flow.tot
                + w.fam
                    .overhead(nilb::limits::MAX_PREVIOUS_OWNERS as usize + 1)
                > MTU,
            "ICMPv6 reply to a packet that fits even with the most hops listed",
        ),
        (
            ip[8] != 0xff && !addr6(ip, 8).is_unspecified(),
            "ICMPv6 reply to a multicast or unspecified source",
        ),
        (
            out[0..6] == frame[6..12] && out[6..12] == frame[0..6],
            "MACs not swapped",
        ),
        (be16(out, 12) == 0x86dd, "ethertype"),
        (o[0..4] == [0x60, 0, 0, 0], "IPv6 version/class/label"),
        (be16(o, 4) as usize == o.len() - 40, "IPv6 payload length"),
        (
            o[6] == NEXTHDR_ICMPV6 && o[7] == 64,
            "next header/hop limit",
        ),
        (
            addr6(o, 8) == addr6(ip, 24) && w.is_vip6(addr6(o, 8)) && addr6(o, 24) == addr6(ip, 8),
            "not from the VIP to the client",
        ),
        (
            icmp[0..2] == [2, 0] && icmp6_csum(&o[8..24], &o[24..40], icmp) == 0,
            "ICMPv6 type/code/checksum",
        ),
        (
            mtu >= MIN_IPV6_MTU
                && (0..=nilb::limits::MAX_PREVIOUS_OWNERS as usize + 1)
                    .any(|n| mtu == (MTU - w.fam.overhead(n)).max(MIN_IPV6_MTU))
                && flow.tot + w.fam.overhead(0) > mtu,
            "MTU below 1280, not the wire's minus the GUE overhead, or the packet fits it",
        ),
        (
            quote.len() >= 48
                && out.len() - 14 <= MIN_IPV6_MTU
                && frame.get(14..14 + quote.len()) == Some(quote)
                && quote.len() <= flow.tot,
            "quote is not the packet's first bytes (at least 48, within 1280)",
        ),
    ];
    checks
        .iter()
        .find(|(ok, _)| !ok)
        .map(|(_, what)| format!("bad ICMPv6 reply: {what}"))
}

/// TCP socket lookup for an incoming IPv6 packet in the worker's namespace
/// (env.rs): the connection [VIP6B]:EST_PORT <-> [VIP6]:80, the listener on
/// [VIP6]:80.
pub fn tcp_lookup6(s: Ipv6Addr, d: Ipv6Addr, sp: u16, dp: u16) -> Sock {
    if (s, sp, d, dp) == (VIP6B, EST_PORT, VIP6, 80)
        || (s, sp, d, dp) == (VIP6, 80, VIP6B, EST_PORT)
    {
        Sock::Established
    } else if d == VIP6 && dp == 80 {
        Sock::Listen
    } else {
        Sock::None
    }
}

/// UDP socket lookup: [VIP6]:5353 connected to [CLIENT6]:4444, [VIP6]:53.
pub fn udp_lookup6(s: Ipv6Addr, d: Ipv6Addr, sp: u16, dp: u16) -> USock {
    if (s, sp, d, dp) == (CLIENT6, UDP_PEER_PORT, VIP6, UDP_CONN_PORT) {
        USock::Connected
    } else if d == VIP6 && dp == 53 {
        USock::Unconnected
    } else {
        USock::None
    }
}

/// The TC reference for GUE protocol 41: `ip` the inner packet and what
/// follows it in the frame, `carried` the bytes the GUE payload carries
/// (at least 40), the outer checks and the GUE header's already passed
/// (`next`, `hops`; the outer headers take `hdr_len` bytes).
pub fn parse_tc6(
    w: &World,
    ip: &[u8],
    carried: usize,
    next: usize,
    hops: Vec<IpAddr>,
    hdr_len: usize,
) -> TcClass {
    use TcClass::*;
    let n = hops.len();
    if ip[0] >> 4 != 6 {
        return Malformed("inner IPv6 version");
    }
    let plen = be16(ip, 4) as usize;
    if 40 + plen != carried {
        return Malformed("inner IPv6 length != UDP length - GUE");
    }
    let ip = &ip[..40 + plen];
    let (off, nh) = match walk6(ip, plen) {
        Walk::L4(off, nh) => (off, nh),
        Walk::Fragment => return Malformed("inner IPv6 fragment"),
        Walk::TooMany => return Malformed("inner IPv6: too many extension headers"),
        Walk::Malformed(why) => return Malformed(why),
    };
    let (is, id) = (addr6(ip, 8), addr6(ip, 24));
    if !w.is_vip6(id) {
        return InnerNotVip;
    }
    let l4 = &ip[off..];
    let mut stats = None;
    let local = match nh {
        IPPROTO_TCP => {
            if l4.len() < 20 || l4[12] >> 4 < 5 || (l4[12] >> 4) as usize * 4 > l4.len() {
                return Malformed("inner TCP header");
            }
            stats = w
                .services
                .get(&(IpAddr::V6(id), be16(l4, 2), nh))
                .map(|s| s.index);
            if l4[13] & SYN != 0 && l4[13] & ACK == 0 {
                Local::Syn
            } else {
                match tcp_lookup6(is, id, be16(l4, 0), be16(l4, 2)) {
                    Sock::Established => Local::Established,
                    // A SYN-cookie ACK is never valid here (no recent
                    // listen queue overflow).
                    _ => Local::Unknown,
                }
            }
        }
        IPPROTO_UDP => {
            if l4.len() < 8 || !(8..=l4.len()).contains(&(be16(l4, 4) as usize)) {
                return Malformed("inner UDP header");
            }
            stats = w
                .services
                .get(&(IpAddr::V6(id), be16(l4, 2), nh))
                .map(|s| s.index);
            match udp_lookup6(is, id, be16(l4, 0), be16(l4, 2)) {
                USock::Connected => Local::UdpConnected,
                USock::Unconnected => Local::UdpListener,
                USock::None => Local::Unknown,
            }
        }
        NEXTHDR_ICMPV6 => match icmp6_quote(l4, id) {
            Quote6::Flow((qs, qd, qsp, qdp, qp)) => {
                stats = w.services.get(&(IpAddr::V6(qs), qsp, qp)).map(|s| s.index);
                // The flow in the client's direction.
                if qp == IPPROTO_TCP {
                    if tcp_lookup6(qd, qs, qdp, qsp) == Sock::Established {
                        Local::IcmpKnown
                    } else {
                        Local::Unknown
                    }
                } else {
                    match udp_lookup6(qd, qs, qdp, qsp) {
                        USock::Connected => Local::IcmpKnown,
                        USock::Unconnected => Local::IcmpUdpListener,
                        USock::None => Local::Unknown,
                    }
                }
            }
            Quote6::Ping => Local::Ping,
            Quote6::NoFlow(why) => return Unsupported(why),
            Quote6::Malformed(why) => return Malformed(why),
        },
        _ => return Unsupported("inner next header not TCP/UDP/ICMPv6"),
    };
    Valid(Gue {
        n,
        next,
        hops,
        hdr_len,
        stats,
        local,
        proto: nh,
        v6: true,
    })
}
