//! Checking one run: the hard invariants (verdicts, counters, nothing
//! malformed encapsulated, decapsulated or forwarded, every checksum of
//! every packet sent on valid), then the comparison with the model; notes
//! on what nilb accepts that no rule forbids.

use nilb::config::UnknownFlow;

use std::net::IpAddr;

use super::cluster::*;
use super::*;

/// Where an outer-IPv6 frame's UDP checksum lies.
fn udp_csum6() -> usize {
    14 + 46
}

/// The pseudo-header and the UDP datagram of a GUE frame `out` (Ethernet,
/// outer family `fam`, no outer extension headers): what the outer UDP
/// checksum covers. The datagram is cut to the frame if its length runs
/// past it.
fn outer_udp(out: &[u8], fam: Fam) -> (Vec<u8>, &[u8]) {
    let u = 14 + fam.ip_len();
    let len = be16(out, u + 4) as usize;
    let pseudo = match fam {
        Fam::V4 => [&out[26..34], &[0, IPPROTO_UDP], &out[u + 4..u + 6]].concat(),
        Fam::V6 => [
            &out[22..54],
            &(len as u32).to_be_bytes()[..],
            &[0, 0, 0, IPPROTO_UDP],
        ]
        .concat(),
    };
    (pseudo, out.get(u..u + len).unwrap_or(&out[u..]))
}

/// Independent structural check of an encapsulation the balancer produced
/// (`out` without the mark) of a packet of `tot` bytes whose GUE protocol
/// must be `proto` (4 or 41), in the cluster network's family: returns
/// what is wrong, if anything.
pub fn check_encapsulation(
    w: &World,
    frame: &[u8],
    tot: usize,
    proto: u8,
    out: &[u8],
) -> Option<String> {
    let fam = w.fam;
    if out.len() < 14 + fam.overhead(0) + 20 {
        return Some("shorter than Ethernet + GUE + IPv4".into());
    }
    let o = &out[14..];
    let u = fam.ip_len();
    let g = &o[u + 8..];
    let n = g[7] as usize;
    let words = 1 + n * fam.hop_len() / 4;
    let outer: [(bool, &str); 6] = match fam {
        Fam::V4 => [
            (be16(out, 12) == 0x0800, "ethertype"),
            (o[0] == 0x45 && o[1] == 0, "outer version/IHL/TOS"),
            (be16(o, 2) as usize == o.len(), "outer total length"),
            (
                o[4..10] == [0, 0, 0x40, 0, 64, 17],
                "outer ID/DF/TTL/protocol",
            ),
            (csum(&o[..20]) == 0, "outer checksum"),
            (IpAddr::V4(addr(o, 12)) == w.node, "outer source"),
        ],
        Fam::V6 => [
            (be16(out, 12) == 0x86dd, "ethertype"),
            (
                o[0] == 0x60 && o[1] >> 4 == 0,
                "outer version/traffic class",
            ),
            (be16(o, 4) as usize + 40 == o.len(), "outer payload length"),
            (o[6..8] == [17, 64], "outer next header/hop limit"),
            (
                u32::from_be_bytes([0, o[1] & 15, o[2], o[3]]) & 0x7fff
                    == (be16(o, 40) & 0x7fff) as u32,
                "flow label and UDP source port not of one hash",
            ),
            (IpAddr::V6(addr16(o, 8)) == w.node, "outer source"),
        ],
    };
    let checks: [(bool, &str); 6] = [
        (
            be16(o, u) & 0x8000 != 0 && be16(o, u + 2) == GUE_PORT,
            "UDP ports",
        ),
        (be16(o, u + 4) as usize == o.len() - u, "UDP length"),
        (
            n <= nilb::limits::MAX_PREVIOUS_OWNERS as usize + 1 && g[0] as usize == words,
            "GUE hlen/N",
        ),
        (
            g[1..7] == [proto, 0, 0, 0, 0, 0],
            "GUE proto/flags/type/next",
        ),
        (
            g.get(4 + 4 * words..) == Some(&frame[14..14 + tot]),
            "inner packet",
        ),
        // Last: any field above that is wrong changes it too.
        (
            {
                let (pseudo, datagram) = outer_udp(out, fam);
                be16(o, u + 6) == lco_check(&pseudo, datagram)
            },
            "UDP checksum (local checksum offload)",
        ),
    ];
    outer
        .iter()
        .chain(&checks)
        .find(|(ok, _)| !ok)
        .map(|(_, what)| format!("bad encapsulation: {what}"))
}

/// Checksums of IPv4 packet `p` (from its IP header to its end): whether
/// the IPv4 header's verifies, and whether the L4 checksum does where there
/// is one to verify (TCP, ICMP; UDP when non-zero); None for L4 when the
/// packet carries no such checksum or is cut short of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sums {
    pub ip: bool,
    pub l4: Option<bool>,
}

pub fn sums(p: &[u8]) -> Option<Sums> {
    if p.len() >= 40 && p[0] >> 4 == 6 {
        return sums6(p);
    }
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = (p[0] & 15) as usize * 4;
    let tot = be16(p, 2) as usize;
    if ihl < 20 || tot < ihl || tot > p.len() {
        return None;
    }
    let ip = csum(&p[..ihl]) == 0;
    let l4 = &p[ihl..tot];
    let pseudo = |proto: u8| {
        let mut v = p[12..20].to_vec();
        v.extend_from_slice(&[0, proto]);
        v.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        v.extend_from_slice(l4);
        csum(&v) == 0
    };
    let fragment = be16(p, 6) & 0x3fff != 0;
    let l4 = match p[9] {
        _ if fragment => None,
        IPPROTO_TCP if l4.len() >= 20 => Some(pseudo(IPPROTO_TCP)),
        IPPROTO_UDP if l4.len() >= 8 && be16(l4, 6) != 0 => Some(pseudo(IPPROTO_UDP)),
        IPPROTO_ICMP if l4.len() >= 8 => Some(csum(l4) == 0),
        _ => None,
    };
    Some(Sums { ip, l4 })
}

/// [`sums`] of an IPv6 packet (no header checksum: `ip` is true): the L4
/// checksum over the RFC 8200 pseudo-header when TCP, UDP (non-zero) or
/// ICMPv6 follows the IPv6 header directly; None if the payload length runs
/// past the bytes.
fn sums6(p: &[u8]) -> Option<Sums> {
    let plen = be16(p, 4) as usize;
    if 40 + plen > p.len() {
        return None;
    }
    let l4 = &p[40..40 + plen];
    let pseudo = |proto: u8| {
        let mut v = p[8..40].to_vec();
        v.extend_from_slice(&(l4.len() as u32).to_be_bytes());
        v.extend_from_slice(&[0, 0, 0, proto]);
        v.extend_from_slice(l4);
        csum(&v) == 0
    };
    let l4 = match p[6] {
        IPPROTO_TCP if l4.len() >= 20 => Some(pseudo(IPPROTO_TCP)),
        IPPROTO_UDP if l4.len() >= 8 && be16(l4, 6) != 0 => Some(pseudo(IPPROTO_UDP)),
        58 if l4.len() >= 8 => Some(pseudo(58)),
        _ => None,
    };
    Some(Sums { ip: true, l4 })
}

/// Checksums of a packet a program sent (`out`, Ethernet frame, without
/// XDP metadata) given the frame it received: every header it rewrote keeps
/// each checksum valid that was valid, and every header it built has valid
/// checksums.
/// - XDP, anything sent (TX, REDIRECT, handed to TC): the outer IPv4 and
///   the L4 checksum (UDP: 0, or valid) valid; a GUE packet's inner packet
///   with the checksums it came with.
/// - TC forward: outer IPv4 and UDP (zero stays zero) valid exactly when
///   they were; the inner packet untouched.
/// - TC decapsulation: the inner packet with the checksums it came with.
/// - TC reply (unknown_flow: rst): IPv4 (or IPv6) and TCP valid.
///
/// `tc`: for TC, the GUE overhead of the received frame and whether a hop
/// was left (a redirect is then a forward, else a reply).
pub fn checksum_problems(
    prog: Prog,
    frame: &[u8],
    verdict: u32,
    out: &[u8],
    tc: Option<(usize, bool)>,
) -> Vec<String> {
    let mut bad = Vec::new();
    let l3 = |f: &[u8]| f.get(14..).map(|x| x.to_vec()).unwrap_or_default();
    match (prog, verdict, tc) {
        (Prog::Xdp, XDP_TX | XDP_REDIRECT | XDP_PASS, _) if out != frame => {
            let fam = Fam::of_frame(out);
            let u = 14 + fam.ip_len();
            let is_gue = out.len() >= u + 8
                && out[14 + if fam == Fam::V4 { 9 } else { 6 }] == IPPROTO_UDP
                && be16(out, u + 2) == GUE_PORT;
            // A GUE packet's UDP checksum is judged below (LCO: it
            // verifies when the inner packet's checksums do).
            let s = sums(&l3(out));
            let ok = match s {
                Some(Sums { ip: true, l4 }) => is_gue || l4 != Some(false),
                _ => false,
            };
            if !ok {
                bad.push(format!("checksum: XDP sent a packet with {s:?}"));
            }
            if is_gue {
                // Local checksum offload (docs/design.md "Checksums"): the
                // outer UDP checksum is derived from the inner packet's
                // headers, so it verifies (summed over every byte) exactly
                // when the inner checksums do; 0 only when the inner packet
                // has none to derive it from.
                let check = be16(out, u + 6);
                let (pseudo, datagram) = outer_udp(out, fam);
                let want = lco_check(&pseudo, datagram);
                let verifies = csum(&[&pseudo[..], datagram].concat()) == 0;
                let inner_ok = matches!(
                    sums(&l3(frame)),
                    Some(Sums {
                        ip: true,
                        l4: Some(true)
                    })
                );
                if check != want {
                    bad.push(format!(
                        "checksum: outer UDP checksum {check:#06x}, local checksum offload gives {want:#06x}"
                    ));
                } else if check != 0 && verifies != inner_ok {
                    bad.push(format!(
                        "checksum: outer UDP checksum verifies {verifies}, the inner packet's {inner_ok}"
                    ));
                }
            }
            if is_gue && out.len() > fam.gue_at() + 8 {
                let n = out[fam.gue_at() + 7] as usize;
                let inner = out
                    .get(fam.gue_at() + 8 + fam.hop_len() * n..)
                    .unwrap_or(&[]);
                if sums(inner) != sums(&l3(frame)) {
                    bad.push("checksum: the inner packet's checksums changed".into());
                }
            }
        }
        (Prog::Tc, TC_ACT_REDIRECT, Some((h, true)))
            if Fam::of_frame(frame) == Fam::V6 && out.len() >= 14 + 48 =>
        {
            // Second chance over an IPv6 cluster network: no header
            // checksum; a non-zero UDP checksum kept valid.
            let (u_in, u_out) = (be16(frame, 14 + 46), be16(out, 14 + 46));
            let verify = |f: &[u8]| udp6_sum(f) == Some(0);
            if u_in == 0 && u_out != 0 {
                bad.push("checksum: a zero outer UDP checksum became non-zero".into());
            } else if u_in != 0 && (u_out == 0 || verify(out) != verify(frame)) {
                bad.push(format!(
                    "checksum: outer UDP checksum valid {} before the forward, {} after (now {u_out:#06x})",
                    verify(frame),
                    u_out != 0 && verify(out)
                ));
            }
            if out.get(14 + h..) != frame.get(14 + h..) {
                bad.push("checksum: the forward changed the inner packet".into());
            }
        }
        (Prog::Tc, TC_ACT_REDIRECT, Some((h, true))) if out.len() >= 14 + 28 => {
            // Second chance: rewritten outer headers.
            let ip_in = csum(&frame[14..34]) == 0;
            if (csum(&out[14..34]) == 0) != ip_in {
                bad.push(format!(
                    "checksum: outer IPv4 valid {ip_in} before the forward, not after"
                ));
            }
            let u_in = be16(frame, 14 + 26);
            let u_out = be16(out, 14 + 26);
            let verify = |f: &[u8]| {
                let o = &f[14..];
                let len = be16(o, 24) as usize;
                let mut v = o[12..20].to_vec();
                v.extend_from_slice(&[0, IPPROTO_UDP]);
                v.extend_from_slice(&(len as u16).to_be_bytes());
                v.extend_from_slice(&o[20..20 + len]);
                csum(&v) == 0
            };
            if u_in == 0 && u_out != 0 {
                bad.push("checksum: a zero outer UDP checksum became non-zero".into());
            } else if u_in != 0 && (u_out == 0 || verify(out) != verify(frame)) {
                bad.push(format!(
                    "checksum: outer UDP checksum valid {} before the forward, {} after (now {u_out:#06x})",
                    verify(frame),
                    u_out != 0 && verify(out)
                ));
            }
            if out.get(14 + h..) != frame.get(14 + h..) {
                bad.push("checksum: the forward changed the inner packet".into());
            }
        }
        (Prog::Tc, TC_ACT_REDIRECT, Some(_)) => {
            // A reply built here.
            let s = sums(&l3(out));
            if s != Some(Sums {
                ip: true,
                l4: Some(true),
            }) {
                bad.push(format!("checksum: TC replied with {s:?}"));
            }
        }
        (Prog::Tc, TC_ACT_OK, Some((h, _)))
            if out != frame && sums(&l3(out)) != frame.get(14 + h..).and_then(sums) =>
        {
            bad.push("checksum: the decapsulated packet's checksums changed".into());
        }
        _ => {}
    }
    bad
}

/// Independent check of an ICMP "fragmentation needed" the balancer sent
/// back (`out`) for client frame `frame`: only for a DF packet that does
/// not fit the wire with GUE (tot + 36 + 4N > MTU), from the VIP to the
/// client, quoting the packet, checksums valid. Returns what is wrong.
pub fn check_icmp_reply(w: &World, frame: &[u8], class: &XdpClass, out: &[u8]) -> Option<String> {
    let XdpClass::Balance(flow) = class else {
        return Some(format!(
            "ICMP reply to a frame the reference does not balance: {class:?}"
        ));
    };
    let ip = &frame[14..];
    let ihl = (ip[0] & 15) as usize * 4;
    if out.len() < 14 + 28 + 28 {
        return Some("ICMP reply shorter than Ethernet + IPv4 + ICMP + quote".into());
    }
    let o = &out[14..];
    let icmp = &o[20..];
    let mtu = be16(icmp, 6) as usize;
    let checks: [(bool, &str); 15] = [
        (!flow.icmp, "ICMP reply about an ICMP error"),
        (
            be16(ip, 6) & 0x4000 != 0,
            "ICMP reply to a packet without DF",
        ),
        (
            flow.tot
                + w.fam
                    .overhead(nilb::limits::MAX_PREVIOUS_OWNERS as usize + 1)
                > MTU,
            "ICMP reply to a packet that fits even with the most hops listed",
        ),
        (
            ip[12] != 0 && ip[12] != 127 && ip[12] < 224,
            "ICMP reply to a source that is not unicast",
        ),
        (
            out[0..6] == frame[6..12] && out[6..12] == frame[0..6],
            "MACs not swapped",
        ),
        (be16(out, 12) == 0x0800, "ethertype"),
        (o[0] == 0x45 && o[1] == 0xc0, "IPv4 version/IHL/TOS"),
        (be16(o, 2) as usize == o.len(), "IPv4 total length"),
        (
            o[4..10] == [0, 0, 0x40, 0, 64, 1],
            "IPv4 ID/DF/TTL/protocol",
        ),
        (csum(&o[..20]) == 0, "IPv4 checksum"),
        (
            addr(o, 12) == addr(ip, 16) && w.is_vip(addr(o, 12)) && addr(o, 16) == addr(ip, 12),
            "not from the VIP to the client",
        ),
        (
            icmp[0..2] == [3, 4] && icmp[4..6] == [0, 0],
            "ICMP type/code/unused",
        ),
        (csum(icmp) == 0, "ICMP checksum"),
        (
            (0..=nilb::limits::MAX_PREVIOUS_OWNERS as usize + 1)
                .any(|n| mtu == MTU - w.fam.overhead(n))
                && flow.tot > mtu,
            "next-hop MTU is not the wire's minus the GUE overhead, or the packet fits it",
        ),
        (
            icmp.get(8..) == Some(&ip[..ihl + 8]),
            "quote is not the IPv4 header + 8 bytes",
        ),
    ];
    checks
        .iter()
        .find(|(ok, _)| !ok)
        .map(|(_, what)| format!("bad ICMP reply: {what}"))
}

/// Facts about what nilb accepted that no documented rule forbids, worth a
/// line in the report (counted with a first example, never violations).
pub fn xdp_notes(frame: &[u8], flow: &Flow) -> Vec<&'static str> {
    let mut v = Vec::new();
    let ip = &frame[14..];
    if flow.key.0.is_ipv6() {
        // (The L4 header's offset: after the extension headers.)
        if let super::model6::Walk::L4(off, IPPROTO_UDP) = super::model6::walk6(ip, flow.tot - 40) {
            if !flow.icmp && (be16(ip, off + 4) as usize) < flow.tot - off {
                v.push("note: xdp encapsulates IPv6 UDP shorter than its payload (legal: the stack trims the rest)");
            }
        }
        return v;
    }
    let ihl = (ip[0] & 15) as usize * 4;
    let l4 = &ip[ihl..flow.tot];
    if csum(&ip[..ihl]) != 0 {
        v.push("note: xdp encapsulates packets whose IPv4 header checksum is wrong (not verified)");
    }
    // (An ICMP error quoting another VIP's flow is malformed for the
    // reference: encapsulating one is a violation, not a note.)
    if flow.icmp {
        return v;
    }
    // (A TCP data offset past the segment and a UDP length below 8 or past
    // the IP payload are malformed for the reference: encapsulating one is
    // a violation.)
    if ip[9] == IPPROTO_UDP && (be16(l4, 4) as usize) < l4.len() {
        v.push("note: xdp encapsulates UDP shorter than its IP payload (legal: the stack trims the rest)");
    }
    v
}

pub fn tc_notes(w: &World, frame: &[u8], g: &Gue, verdict: u32) -> Vec<&'static str> {
    let mut v = Vec::new();
    if w.fam == Fam::V4 && csum(&frame[14..34]) != 0 {
        v.push(
            "note: tc decapsulates/forwards GUE whose outer IPv4 checksum is wrong (not verified)",
        );
    }
    if verdict == TC_ACT_REDIRECT {
        let hop = g.hops[g.next];
        if !w.cluster.contains(&hop) {
            v.push("note: tc second chance forwards to a unicast hop outside this node's cluster set (allowed: a backend being removed)");
        }
    }
    if g.v6 {
        return v;
    }
    let inner = &frame[14 + g.hdr_len..];
    let iihl = (inner[0] & 15) as usize * 4;
    let itot = be16(inner, 2) as usize;
    let l4 = &inner[iihl..itot];
    if csum(&inner[..iihl]) != 0 && verdict == TC_ACT_OK {
        v.push("note: tc decapsulates inner packets whose IPv4 checksum is wrong (the stack drops them)");
    }
    if inner[9] == IPPROTO_UDP && (be16(l4, 4) as usize) < l4.len() {
        v.push("note: tc accepts inner UDP shorter than its IP payload (legal: the stack trims the rest)");
    }
    v
}

/// What went wrong with one frame (hard invariants first, then the model).
pub fn check(
    prog: Prog,
    w: &World,
    frame: &[u8],
    verdict: u32,
    out: &[u8],
    deltas: &[(&'static str, u64)],
) -> Checked {
    let mut bad = Vec::new();
    let mut observations = Vec::new();
    let (class_text, want) = match prog {
        Prog::Xdp => {
            let class = parse_xdp(w, frame);
            // Hard: verdicts.
            if !(1..=4).contains(&verdict) {
                bad.push(format!(
                    "verdict {verdict} is not DROP/PASS/TX/REDIRECT{}",
                    if verdict == XDP_ABORTED {
                        " (XDP_ABORTED)"
                    } else {
                        ""
                    }
                ));
            }
            // Hard: counters.
            let main: Vec<_> = deltas
                .iter()
                .filter(|(n, _)| *n != "xdp_icmp_forwarded")
                .collect();
            // Forwarded ICMP is counted only with a verdict that sent it.
            let icmp_ok = deltas.iter().all(|(n, v)| {
                *n != "xdp_icmp_forwarded"
                    || (*v == 1 && main.iter().all(|(m, _)| m.starts_with("xdp_encap_")))
            });
            if main.len() != 1 || main[0].1 != 1 || !main[0].0.starts_with("xdp_") || !icmp_ok {
                bad.push(format!("counters do not add up to one verdict: {deltas:?}"));
            }
            // Hard: nothing malformed is encapsulated.
            let encap = match verdict {
                // An ICMP reply (protocol 1) or an encapsulation (UDP).
                XDP_TX if out.len() > 23 && be16(out, 12) == 0x0800 && out[23] == IPPROTO_ICMP => {
                    if let Some(why) = check_icmp_reply(w, frame, &class, out) {
                        bad.push(why);
                    }
                    None
                }
                // An ICMPv6 Packet Too Big (an encapsulation is outer
                // IPv6 UDP).
                XDP_TX
                    if out.len() >= 14 + 40
                        && be16(out, 12) == 0x86dd
                        && out[14 + 6] != IPPROTO_UDP =>
                {
                    if let Some(why) = super::model6::check_icmp6_reply(w, frame, &class, out) {
                        bad.push(why);
                    }
                    None
                }
                XDP_TX | XDP_REDIRECT => Some(out),
                // The XDP receive path's decapsulation (checked against
                // the TC reference by the model).
                XDP_PASS if out != frame && matches!(class, XdpClass::GueForNode) => None,
                // A local first hop's packet passed without GUE: only its
                // Ethernet padding may be gone.
                XDP_PASS
                    if deltas.iter().any(|(n, _)| *n == "xdp_local_direct")
                        && frame.starts_with(out) =>
                {
                    None
                }
                XDP_PASS if out != frame => {
                    // Handed to TC: the hand-off mark as source MAC.
                    if out.len() >= 12 && out[6..12] == MARK {
                        Some(out)
                    } else {
                        bad.push("XDP_PASS changed the frame without the hand-off mark".into());
                        None
                    }
                }
                _ => None,
            };
            if let Some(e) = encap {
                bad.extend(checksum_problems(prog, frame, verdict, e, None));
                match &class {
                    XdpClass::Balance(flow) => {
                        let proto = if flow.key.0.is_ipv6() { 41 } else { 4 };
                        if let Some(why) = check_encapsulation(w, frame, flow.tot, proto, e) {
                            bad.push(why);
                        }
                        observations.extend(xdp_notes(frame, flow));
                    }
                    other => bad.push(format!(
                        "encapsulated a frame the reference rejects: {other:?}"
                    )),
                }
            }
            (
                (format!("{class:?}"), class.label()),
                expect_xdp(w, frame, &class),
            )
        }
        Prog::Tc => {
            let class = parse_tc(w, frame);
            if ![TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT].contains(&verdict) {
                bad.push(format!("verdict {verdict} is not OK/SHOT/REDIRECT"));
            }
            if let TcClass::Valid(g) = &class {
                bad.extend(checksum_problems(
                    prog,
                    frame,
                    verdict,
                    out,
                    Some((g.hdr_len, g.next < g.n)),
                ));
            }
            // One verdict counter; for inner IPv6 decapsulated or
            // forwarded, tc_decap_ipv6 or tc_forward_ipv6 besides.
            let v6_extra = |n: &str| n == "tc_decap_ipv6" || n == "tc_forward_ipv6";
            let main: Vec<_> = deltas.iter().filter(|(n, _)| !v6_extra(n)).collect();
            let extra: Vec<_> = deltas.iter().filter(|(n, _)| v6_extra(n)).collect();
            let inner_v6 = matches!(&class, TcClass::Valid(g) if g.v6);
            let extra_ok = match (&extra[..], main.first()) {
                ([], _) => true,
                ([("tc_decap_ipv6", 1)], Some((m, _))) => {
                    inner_v6 && m.starts_with("tc_decap_") && verdict == TC_ACT_OK
                }
                ([("tc_forward_ipv6", 1)], Some((m, _))) => {
                    inner_v6 && *m == "tc_forward" && verdict == TC_ACT_REDIRECT
                }
                _ => false,
            };
            if main.len() != 1 || main[0].1 != 1 || !main[0].0.starts_with("tc_") || !extra_ok {
                bad.push(format!("counters do not add up to one verdict: {deltas:?}"));
            }
            match (verdict, &class) {
                (TC_ACT_OK, TcClass::NotForUs(_)) if out == frame => {}
                (TC_ACT_OK, c) if out == frame => {
                    bad.push(format!("passed untouched GUE for this node: {c:?}"))
                }
                (TC_ACT_OK, TcClass::Valid(g)) => {
                    if out != decapsulated(frame, g.hdr_len) {
                        bad.push("TC_ACT_OK with an output that is not the decapsulation".into());
                    }
                    observations.extend(tc_notes(w, frame, g, verdict));
                }
                (TC_ACT_OK, c) => bad.push(format!("decapsulated an invalid frame: {c:?}")),
                (TC_ACT_REDIRECT, TcClass::Valid(g)) if g.next >= g.n => {
                    // No hop left: only unknown_flow: rst sends something,
                    // a RST from the VIP.
                    let o = out.get(14..).unwrap_or(&[]);
                    let rst = if g.v6 {
                        o.len() == 60
                            && o[0] >> 4 == 6
                            && o[6] == IPPROTO_TCP
                            && o[40 + 13] & RST != 0
                            && <[u8; 16]>::try_from(&o[8..24])
                                .is_ok_and(|a| w.is_vip6(Ipv6Addr::from(a)))
                    } else {
                        o.len() == 40
                            && o[9] == IPPROTO_TCP
                            && o[20 + 13] & RST != 0
                            && w.is_vip(addr(o, 12))
                    };
                    if w.unknown_flow != UnknownFlow::Rst || g.proto != IPPROTO_TCP || !rst {
                        bad.push(format!(
                            "redirected something other than a RST at the last hop: {g:?}"
                        ));
                    }
                }
                (TC_ACT_REDIRECT, TcClass::Valid(g)) => {
                    let hop = g.hops.get(g.next).copied();
                    if hop.is_none()
                        || hop == Some(w.node)
                        || hop.is_some_and(|h| !super::model::relayable(w, h))
                    {
                        bad.push(format!("forwarded without a usable next hop: {g:?}"));
                    } else {
                        observations.extend(tc_notes(w, frame, g, verdict));
                    }
                }
                // The balancer's own slow path: marked frames come only from
                // this node's XDP program (a forger would have to guess the
                // 46-bit mark), which sends what it built; TC checks no more
                // of them than their addresses.
                (TC_ACT_REDIRECT, TcClass::SlowPath) => {}
                (TC_ACT_REDIRECT, c) => bad.push(format!("forwarded an invalid frame: {c:?}")),
                _ => {}
            }
            (
                (format!("{class:?}"), class.label()),
                expect_tc(w, frame, &class),
            )
        }
    };

    // The model: verdict, counters, output; or a tolerated deviation.
    let mut got_counters: Vec<&str> = deltas
        .iter()
        .flat_map(|(n, v)| std::iter::repeat_n(*n, *v as usize))
        .collect();
    got_counters.sort();
    let matches = |want: &Outcome| {
        let mut want_counters = want.counters.clone();
        want_counters.sort();
        let out_ok = match &want.out {
            Out::Any => true,
            Out::Unchanged => out == frame,
            Out::Exact(v) => out == &v[..],
            Out::Rewritten(v, csum_valid) => {
                // All but the outer UDP checksum (and IPv4's header one).
                let (ip, udp) = match Fam::of_frame(v) {
                    Fam::V4 => (24, 40),
                    Fam::V6 => (udp_csum6(), udp_csum6()),
                };
                let same = |a: usize, b: usize| out.get(a..b) == v.get(a..b);
                out.len() == v.len()
                    && same(0, ip)
                    && same(ip + 2, udp.max(ip + 2))
                    && same(udp + 2, v.len())
                    && (!csum_valid || csum(&out[14..34]) == 0)
            }
        };
        (
            verdict == want.verdict && got_counters == want_counters && out_ok,
            want_counters,
            out_ok,
        )
    };
    let (ok, want_counters, out_ok) = matches(&want);
    // A reply the per-CPU rate limit held back instead.
    let limited = outcome(XDP_DROP, &["xdp_drop_too_big_limited"], Out::Any);
    let reply =
        want.counters.contains(&"xdp_icmp_too_big") || want.counters.contains(&"xdp_icmp6_too_big");
    if !ok && reply && matches(&limited).0 {
        observations.push("tolerated: xdp: an ICMP too-big reply held back by the rate limit");
    } else if !ok {
        match tolerated(prog, w, frame, &class_text.1) {
            Some((alt, name)) if matches(&alt).0 => observations.push(name),
            _ => {
                let want_out = match &want.out {
                    Out::Any => "(any)".to_string(),
                    Out::Unchanged => "(unchanged)".to_string(),
                    Out::Exact(v) | Out::Rewritten(v, _) => short_hex(v),
                };
                bad.push(format!(
                    "model: expected verdict {} counters {:?} output {}; got verdict {verdict} counters {:?} output {}",
                    want.verdict,
                    want_counters,
                    want_out,
                    got_counters,
                    if out_ok { "(as expected)".to_string() } else { short_hex(out) }
                ));
            }
        }
    }
    Checked {
        bad,
        want,
        class: class_text.0,
        label: class_text.1,
        observations,
    }
}

/// The verdict of the reference on one run.
pub struct Checked {
    /// Violations.
    pub bad: Vec<String>,
    /// The outcome the reference expects.
    pub want: Outcome,
    /// The reference class (Debug) and its short label.
    pub class: String,
    pub label: String,
    /// Tolerated deviations and notes.
    pub observations: Vec<&'static str>,
}
