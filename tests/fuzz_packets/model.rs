//! The reference model: a parser for the frames each program sees, written
//! from the documented rules, and the exact outcome (verdict, counters,
//! output bytes, statistics) it predicts; plus the tolerated deviations.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nilb::config::UnknownFlow;

use super::cluster::{encapsulation, hop_at, v4_of, Fam};
use super::*;

/// One table as installed in the data plane.
pub struct Svc {
    pub index: u32,
    /// Per bucket: the first hop and the previous owners, newest first.
    pub buckets: Vec<(Option<IpAddr>, Vec<IpAddr>)>,
    pub slots: BTreeMap<IpAddr, u32>,
}

/// What the reference needs to know about a loaded data plane.
pub struct World {
    pub nt0_mac: [u8; 6],
    pub nt2_mac: [u8; 6],
    /// IPv4 and IPv6 services by (VIP, port, protocol).
    pub services: HashMap<(IpAddr, u16, u8), Svc>,
    pub vips: HashSet<Ipv4Addr>,
    pub vips6: HashSet<Ipv6Addr>,
    /// The cluster network's family, this node's address on it, and what
    /// the data plane holds as its IPv4 address (0.0.0.0 on an IPv6 one).
    pub fam: Fam,
    pub node: IpAddr,
    pub node4: Ipv4Addr,
    /// Cluster addresses (balancers, DIPs) of the cluster's family.
    pub cluster: HashSet<IpAddr>,
    pub unknown_flow: UnknownFlow,
}

pub enum Route {
    Tx([u8; 6]),
    Redirect([u8; 6]),
    /// On-link, no neighbour entry: the slow path (TC asks the FIB for the
    /// interface; the XDP output is the same for either).
    NoNeigh,
    Unroutable,
}

impl World {
    pub fn new(
        l: &Loaded,
        nt0: ([u8; 6], u32),
        nt2: ([u8; 6], u32),
        unknown_flow: UnknownFlow,
    ) -> World {
        let mut services = HashMap::new();
        for (k, t) in l.dp.live_tables().expect("live tables") {
            services.insert(
                (k.vip, k.port, k.protocol.number()),
                Svc {
                    index: t.service_index,
                    buckets: t.chains.clone(),
                    slots: t.slots.clone(),
                },
            );
        }
        let cfg = l.cp.config();
        let cluster: HashSet<IpAddr> = cfg.cluster_addresses().into_iter().collect();
        let fam = if cluster.iter().any(|a| a.is_ipv6()) {
            Fam::V6
        } else {
            Fam::V4
        };
        World {
            nt0_mac: nt0.0,
            nt2_mac: nt2.0,
            services,
            vips: cfg
                .vips()
                .into_iter()
                .filter_map(|v| match v {
                    IpAddr::V4(v) => Some(v),
                    IpAddr::V6(_) => None,
                })
                .collect(),
            vips6: cfg
                .vips()
                .into_iter()
                .filter_map(|v| match v {
                    IpAddr::V4(_) => None,
                    IpAddr::V6(v) => Some(v),
                })
                .collect(),
            fam,
            node: fam.host(NODE),
            node4: match fam {
                Fam::V4 => NODE,
                Fam::V6 => Ipv4Addr::UNSPECIFIED,
            },
            cluster,
            unknown_flow,
        }
    }

    pub fn is_vip(&self, a: Ipv4Addr) -> bool {
        self.vips.contains(&a)
    }

    pub fn is_vip6(&self, a: Ipv6Addr) -> bool {
        self.vips6.contains(&a)
    }

    /// The netns of `Env`: 10.0.0.0/24 on nt0 with neighbours .12 and .13,
    /// 10.1.0.0/24 on nt2 with neighbour .5, nothing else; the same in
    /// IPv6 (`cluster::host6` of each).
    pub fn route(&self, hop: IpAddr) -> Route {
        let hop = match hop {
            IpAddr::V4(h) => h,
            IpAddr::V6(h) => match v4_of(h) {
                Some(h) => h,
                None => return Route::Unroutable,
            },
        };
        let o = hop.octets();
        match (o[0], o[1], o[2], o[3]) {
            (10, 0, 0, 12) => Route::Tx(MAC12),
            (10, 0, 0, 13) => Route::Tx(MAC13),
            (10, 0, 0, _) => Route::NoNeigh,
            (10, 1, 0, 5) => Route::Redirect(MAC_R5),
            (10, 1, 0, _) => Route::NoNeigh,
            _ => Route::Unroutable,
        }
    }
}

// ---- expected outcomes ------------------------------------------------------------------

#[derive(Clone, Debug)]
pub enum Out {
    /// The output frame equals the input.
    Unchanged,
    /// Not looked at (dropped packets).
    Any,
    /// Exactly these bytes.
    Exact(Vec<u8>),
    /// These bytes, except the checksums (incremental updates): the outer
    /// IPv4 checksum at [14+10, 14+12) must verify when the input's did;
    /// the outer UDP checksum at [14+26, 14+28) is left to the checksum
    /// invariant (invariants.rs).
    Rewritten(Vec<u8>, bool),
}

/// Statistics a run moves besides the global counters.
#[derive(Clone, Copy, Debug)]
pub enum Stat {
    None,
    XdpBackend {
        slot: u32,
        bytes: u64,
        syn: bool,
    },
    /// Sent to the first hop (this node) without GUE: the backend's
    /// counters and the service's tc_decap.
    XdpLocalDirect {
        slot: u32,
        bytes: u64,
        syn: bool,
        service: u32,
    },
    XdpServiceDrop(u32),
    TcDecap(Option<u32>),
    TcForward(Option<u32>),
    TcDrop(Option<u32>),
}

#[derive(Clone, Debug)]
pub struct Outcome {
    pub verdict: u32,
    pub counters: Vec<&'static str>,
    pub out: Out,
    pub stat: Stat,
}

pub fn outcome(verdict: u32, counters: &[&'static str], out: Out) -> Outcome {
    Outcome {
        verdict,
        counters: counters.to_vec(),
        out,
        stat: Stat::None,
    }
}

// ---- XDP reference --------------------------------------------------------------------------

/// A flow the balancer must encapsulate.
#[derive(Clone, Debug)]
pub struct Flow {
    /// (VIP, port, protocol) of the service.
    pub key: (IpAddr, u16, u8),
    /// (client, VIP, client port, service port, protocol).
    pub tuple: (IpAddr, IpAddr, u16, u16, u8),
    pub tot: usize,
    pub syn: bool,
    pub icmp: bool,
}

#[derive(Clone, Debug)]
pub enum XdpClass {
    NonIp,
    /// Broken IPv4 or L4 header; dropped if addressed to a VIP.
    Malformed {
        vip: bool,
        why: &'static str,
    },
    Fragment {
        vip: bool,
    },
    /// IPv6 to a VIP with more than NILB_IPV6_MAX_EXT extension headers.
    TooManyExt,
    NotService(&'static str),
    /// ICMP to a VIP whose headers or quote are broken, or whose quote is
    /// not from that VIP.
    IcmpMalformed(&'static str),
    /// UDP to this node's GUE port: the XDP receive path (the TC reference
    /// says what TC would make of it).
    GueForNode,
    Balance(Flow),
}

impl XdpClass {
    /// Short name for the coverage tally.
    pub fn label(&self) -> String {
        match self {
            XdpClass::NonIp => "non-IP".into(),
            XdpClass::Malformed { vip, why } => {
                format!("malformed ({why}){}", if *vip { " to VIP" } else { "" })
            }
            XdpClass::Fragment { vip } => {
                format!("fragment{}", if *vip { " to VIP" } else { "" })
            }
            XdpClass::TooManyExt => "IPv6: too many extension headers".into(),
            XdpClass::NotService(why) => format!("not a service ({why})"),
            XdpClass::IcmpMalformed(why) => format!("ICMP malformed ({why})"),
            XdpClass::GueForNode => "GUE for this node".into(),
            XdpClass::Balance(f) => format!(
                "balance {}{}:{}/{}{}",
                if f.key.0.is_ipv6() { "IPv6 " } else { "" },
                f.key.0,
                f.key.1,
                f.key.2,
                if f.icmp { " (ICMP)" } else { "" }
            ),
        }
    }
}

/// The reference parser for frames reaching the balancer.
pub fn parse_xdp(w: &World, f: &[u8]) -> XdpClass {
    if f.len() >= 14 && be16(f, 12) == 0x86dd {
        return super::model6::parse_xdp6(w, f);
    }
    if f.len() < 14 || be16(f, 12) != 0x0800 || f.len() < 34 {
        return XdpClass::NonIp;
    }
    let ip = &f[14..];
    let ver = ip[0] >> 4;
    let ihl = (ip[0] & 15) as usize * 4;
    let tot = be16(ip, 2) as usize;
    let saddr = addr(ip, 12);
    let daddr = addr(ip, 16);
    let vip = w.is_vip(daddr);
    let bad = |why| XdpClass::Malformed { vip, why };
    if ver != 4 {
        return bad("IP version");
    }
    if ihl < 20 {
        return bad("IHL < 5");
    }
    if tot < ihl {
        return bad("total length < IHL");
    }
    if 14 + tot > f.len() {
        return bad("total length beyond the frame");
    }
    if be16(ip, 6) & 0x3fff != 0 {
        return XdpClass::Fragment { vip };
    }
    let l4 = &ip[ihl..tot];
    match ip[9] {
        IPPROTO_TCP | IPPROTO_UDP => {
            let proto = ip[9];
            let need = if proto == IPPROTO_TCP { 20 } else { 8 };
            if l4.len() < need {
                return bad("L4 header beyond the total length");
            }
            if proto == IPPROTO_TCP && l4[12] >> 4 < 5 {
                return bad("TCP data offset below 5");
            }
            if proto == IPPROTO_TCP && (l4[12] >> 4) as usize * 4 > l4.len() {
                return bad("TCP data offset past the segment");
            }
            let (sport, dport) = (be16(l4, 0), be16(l4, 2));
            // (An IPv6 cluster network's balancer has no IPv4 GUE path.)
            if proto == IPPROTO_UDP && w.fam == Fam::V4 && daddr == NODE && dport == GUE_PORT {
                return XdpClass::GueForNode;
            }
            let key = (daddr.into(), dport, proto);
            if !w.services.contains_key(&key) {
                return XdpClass::NotService("no such (VIP, port, protocol)");
            }
            // (Checked for a service's datagrams only.)
            if proto == IPPROTO_UDP && !(8..=l4.len()).contains(&(be16(l4, 4) as usize)) {
                return bad("UDP length below 8 or past the IP payload");
            }
            let syn = proto == IPPROTO_TCP && l4[13] & SYN != 0 && l4[13] & ACK == 0;
            XdpClass::Balance(Flow {
                key,
                tuple: (saddr.into(), daddr.into(), sport, dport, proto),
                tot,
                syn,
                icmp: false,
            })
        }
        IPPROTO_ICMP => {
            if !vip {
                return XdpClass::NotService("ICMP not to a VIP");
            }
            let (esaddr, edaddr, esport, edport, eproto) = match icmp_quote(l4, daddr) {
                IcmpQuote::Flow(q) => q,
                IcmpQuote::Ping => return XdpClass::NotService("ICMP echo request"),
                IcmpQuote::NoFlow(why) => return XdpClass::NotService(why),
                IcmpQuote::Malformed(why) => return XdpClass::IcmpMalformed(why),
            };
            let key = (esaddr.into(), esport, eproto);
            if !w.services.contains_key(&key) {
                return XdpClass::NotService("embedded flow of no service");
            }
            XdpClass::Balance(Flow {
                key,
                tuple: (edaddr.into(), esaddr.into(), edport, esport, eproto),
                tot,
                syn: false,
                icmp: true,
            })
        }
        _ => XdpClass::NotService("protocol not TCP/UDP/ICMP"),
    }
}

/// What an ICMP message to `vip` (its L4 bytes within the total length) is
/// about, by docs/design.md "Packet path": errors (destination unreachable,
/// time exceeded, parameter problem) quoting a TCP/UDP packet the VIP sent
/// are about that flow; an echo request is answered where it arrives; the
/// rest is about no flow.
pub enum IcmpQuote {
    /// (quoted source = the VIP, quoted destination, quoted source port,
    /// quoted destination port, protocol).
    Flow((Ipv4Addr, Ipv4Addr, u16, u16, u8)),
    Ping,
    NoFlow(&'static str),
    Malformed(&'static str),
}

pub fn icmp_quote(l4: &[u8], vip: Ipv4Addr) -> IcmpQuote {
    use IcmpQuote::*;
    if l4.len() < 8 {
        return Malformed("ICMP header beyond the total length");
    }
    match l4[0] {
        8 => return Ping,
        3 | 11 | 12 => {}
        _ => return NoFlow("ICMP neither an error nor an echo request"),
    }
    let emb = &l4[8..];
    if emb.len() < 20 {
        return Malformed("embedded IPv4 header truncated");
    }
    let eihl = (emb[0] & 15) as usize * 4;
    if emb[0] >> 4 != 4 || eihl < 20 {
        return Malformed("embedded IPv4 version/IHL");
    }
    if addr(emb, 12) != vip {
        return Malformed("embedded source is not the VIP the error was sent to");
    }
    if be16(emb, 6) & 0x1fff != 0 {
        return NoFlow("embedded later fragment");
    }
    let eproto = emb[9];
    if eproto != IPPROTO_TCP && eproto != IPPROTO_UDP {
        return NoFlow("embedded protocol not TCP/UDP");
    }
    if emb.len() < eihl + 4 {
        return Malformed("embedded ports truncated");
    }
    Flow((
        addr(emb, 12),
        addr(emb, 16),
        be16(emb, eihl),
        be16(emb, eihl + 2),
        eproto,
    ))
}

/// The hops the balancer lists for a bucket (first hop, previous owners
/// newest first) and a flow of `proto`: the previous owners in order, each
/// once and none equal to the first hop; for UDP, when any is listed, the
/// first hop again after them.
pub fn listed_hops(first: IpAddr, previous: &[IpAddr], proto: u8) -> Vec<IpAddr> {
    let mut hops: Vec<IpAddr> = Vec::new();
    for &p in previous {
        if p != first && !hops.contains(&p) {
            hops.push(p);
        }
    }
    if proto == IPPROTO_UDP && !hops.is_empty() {
        hops.push(first);
    }
    hops
}

/// The flow hash (src/hash.rs, either family) with `HASH_SEED`.
pub fn hash_ip(t: (IpAddr, IpAddr, u16, u16, u8)) -> u32 {
    nilb::hash::flow_hash(
        &nilb::hash::FlowTuple {
            saddr: t.0,
            daddr: t.1,
            sport: t.2,
            dport: t.3,
            proto: t.4,
        },
        HASH_SEED,
    )
}

pub fn expect_xdp(w: &World, f: &[u8], class: &XdpClass) -> Outcome {
    match class {
        XdpClass::NonIp => outcome(XDP_PASS, &["xdp_pass_non_ip"], Out::Unchanged),
        XdpClass::Malformed { vip: true, .. } | XdpClass::IcmpMalformed(_) => {
            outcome(XDP_DROP, &["xdp_drop_malformed"], Out::Any)
        }
        XdpClass::Fragment { vip: true } => outcome(XDP_DROP, &["xdp_drop_fragment"], Out::Any),
        XdpClass::TooManyExt => outcome(XDP_DROP, &["xdp_drop_ipv6_ext"], Out::Any),
        XdpClass::Malformed { vip: false, .. }
        | XdpClass::Fragment { vip: false }
        | XdpClass::NotService(_) => outcome(XDP_PASS, &["xdp_pass_not_service"], Out::Unchanged),
        XdpClass::GueForNode => expect_xdp_receive(w, f),
        XdpClass::Balance(flow) => {
            let svc = &w.services[&flow.key];
            let v6 = flow.key.0.is_ipv6();
            let gue_proto = if v6 { 41 } else { 4 };
            let hash = hash_ip(flow.tuple);
            let (first, previous) = &svc.buckets[(hash as usize) & (svc.buckets.len() - 1)];
            let first = *first;
            let Some(first) = first else {
                return Outcome {
                    verdict: XDP_DROP,
                    counters: vec!["xdp_drop_no_backend"],
                    out: Out::Any,
                    stat: Stat::XdpServiceDrop(svc.index),
                };
            };
            let hops = listed_hops(first, previous, flow.tuple.4);
            let overhead = w.fam.overhead(hops.len());
            let inner = &f[14..14 + flow.tot];
            // Does not fit the 1500-byte wire with GUE: answered (DF, not an
            // ICMP error, unicast source) or dropped.
            let too_big = flow.tot + overhead > MTU;
            let refused = || {
                let ip = &f[14..];
                if v6 {
                    // IPv6: always answered (no DF), but not about an
                    // ICMPv6 error nor to a multicast or unspecified source.
                    let src = super::model6::addr6(ip, 8);
                    if !flow.icmp && ip[8] != 0xff && !src.is_unspecified() {
                        let mtu = (MTU - overhead).max(1280) as u32;
                        let reply = super::model6::icmp6_too_big_reply(f, mtu);
                        return (XDP_TX, "xdp_icmp6_too_big", Out::Exact(reply));
                    }
                    return (XDP_DROP, "xdp_drop_too_big", Out::Any);
                }
                let src = ip[12];
                if !flow.icmp && be16(ip, 6) & 0x4000 != 0 && src != 0 && src != 127 && src < 224 {
                    let reply = icmp_frag_needed_reply(f, (MTU - overhead) as u16);
                    (XDP_TX, "xdp_icmp_too_big", Out::Exact(reply))
                } else {
                    (XDP_DROP, "xdp_drop_too_big", Out::Any)
                }
            };
            let (s, d, sp, dp, proto) = flow.tuple;
            // (IPv6 is TC's: never passed without GUE.)
            let accepted_here = match (s, d) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    proto == IPPROTO_TCP
                        && !flow.icmp
                        && (flow.syn || tcp_lookup(s, d, sp, dp) == Sock::Established)
                }
                _ => false,
            };
            if first == w.node && accepted_here {
                // TC would only take the GUE off again: no GUE at all (the
                // Ethernet padding trimmed, as for the encapsulation).
                return Outcome {
                    verdict: XDP_PASS,
                    counters: vec!["xdp_local_direct"],
                    out: Out::Exact(f[..14 + flow.tot].to_vec()),
                    stat: Stat::XdpLocalDirect {
                        slot: svc.slots[&first],
                        bytes: flow.tot as u64,
                        syn: flow.syn,
                        service: svc.index,
                    },
                };
            }
            let node = w.node;
            let (verdict, counter, out) = if first == node {
                if !hops.is_empty() && too_big {
                    refused()
                } else {
                    let e = encapsulation(
                        &f[0..6],
                        &f[6..12],
                        node,
                        first,
                        &hops,
                        hash,
                        gue_proto,
                        inner,
                    );
                    (XDP_PASS, "xdp_encap_local", Out::Exact(marked(&e)))
                }
            } else {
                match w.route(first) {
                    _ if too_big && !matches!(w.route(first), Route::Unroutable) => refused(),
                    Route::Tx(mac) => {
                        let e = encapsulation(
                            &mac, &w.nt0_mac, node, first, &hops, hash, gue_proto, inner,
                        );
                        (XDP_TX, "xdp_encap_tx", Out::Exact(e))
                    }
                    Route::Redirect(mac) => {
                        let e = encapsulation(
                            &mac, &w.nt2_mac, node, first, &hops, hash, gue_proto, inner,
                        );
                        (XDP_REDIRECT, "xdp_encap_redirect", Out::Exact(e))
                    }
                    Route::NoNeigh => {
                        let e = encapsulation(
                            &f[0..6],
                            &f[6..12],
                            node,
                            first,
                            &hops,
                            hash,
                            gue_proto,
                            inner,
                        );
                        (XDP_PASS, "xdp_encap_slow_path", Out::Exact(marked(&e)))
                    }
                    Route::Unroutable => (XDP_DROP, "xdp_drop_no_route", Out::Any),
                }
            };
            // Only what is sent counts for the backend and as forwarded ICMP.
            let sent = counter.starts_with("xdp_encap_");
            let mut counters = vec![counter];
            if sent && flow.icmp {
                counters.push("xdp_icmp_forwarded");
            }
            let stat = if sent {
                Stat::XdpBackend {
                    slot: svc.slots[&first],
                    bytes: flow.tot as u64,
                    syn: flow.syn,
                }
            } else {
                Stat::None
            };
            Outcome {
                verdict,
                counters,
                out,
                stat,
            }
        }
    }
}

/// GUE for this node reaching XDP (either program): decapsulated exactly
/// as TC would if TC's outcome is a SYN's or an established flow's
/// decapsulation (inner IPv4 or IPv6), else passed to TC untouched.
pub fn expect_xdp_receive(w: &World, f: &[u8]) -> Outcome {
    let tc = expect_tc(w, f, &parse_tc(w, f));
    let counter = match tc.counters[..] {
        ["tc_decap_syn"] | ["tc_decap_syn", "tc_decap_ipv6"] => "xdp_decap_syn",
        ["tc_decap_established"] | ["tc_decap_established", "tc_decap_ipv6"] => {
            "xdp_decap_established"
        }
        _ => return outcome(XDP_PASS, &["xdp_gue_to_tc"], Out::Unchanged),
    };
    Outcome {
        verdict: XDP_PASS,
        counters: vec![counter],
        out: tc.out,
        stat: tc.stat,
    }
}

// ---- TC reference -----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Local {
    Syn,
    Established,
    UdpConnected,
    UdpListener,
    IcmpKnown,
    /// An ICMP error about a UDP flow with only an unconnected socket.
    IcmpUdpListener,
    /// An echo request: answered by the first hop.
    Ping,
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Gue {
    pub n: usize,
    pub next: usize,
    pub hops: Vec<IpAddr>,
    pub hdr_len: usize,
    pub stats: Option<u32>,
    pub local: Local,
    /// The inner packet's protocol.
    pub proto: u8,
    /// The inner packet is IPv6 (GUE protocol 41).
    pub v6: bool,
}

#[derive(Clone, Debug)]
pub enum TcClass {
    /// Not GUE addressed to this node: passes untouched.
    NotForUs(&'static str),
    NotCluster,
    SelfUnmarked,
    /// The balancer's slow path: GUE from this node to another, with the
    /// hand-off mark (`MARK`) as source MAC: sent on (bpf_redirect_neigh).
    SlowPath,
    Malformed(&'static str),
    Unsupported(&'static str),
    InnerNotVip,
    Valid(Gue),
}

impl TcClass {
    /// Short name for the coverage tally.
    pub fn label(&self) -> String {
        match self {
            TcClass::NotForUs(why) => format!("not for us ({why})"),
            TcClass::NotCluster => "not cluster".into(),
            TcClass::SelfUnmarked => "self unmarked".into(),
            TcClass::SlowPath => "slow path (marked)".into(),
            TcClass::Malformed(why) => format!("malformed ({why})"),
            TcClass::Unsupported(why) => format!("unsupported ({why})"),
            TcClass::InnerNotVip => "inner not VIP".into(),
            TcClass::Valid(g) => format!(
                "valid {}{:?}, {}",
                if g.v6 { "IPv6 " } else { "" },
                g.local,
                if g.next < g.n {
                    "hop left"
                } else {
                    "no hop left"
                }
            ),
        }
    }
}

#[derive(PartialEq)]
pub enum Sock {
    None,
    Listen,
    Established,
}

/// TCP socket lookup in the worker's namespace, as for an incoming packet.
pub fn tcp_lookup(s: Ipv4Addr, d: Ipv4Addr, sp: u16, dp: u16) -> Sock {
    if (s, sp, d, dp) == (NODE, EST_PORT, VIP, 80) || (s, sp, d, dp) == (VIP, 80, NODE, EST_PORT) {
        Sock::Established
    } else if (d == VIP && dp == 80) || dp == 8080 {
        Sock::Listen
    } else {
        Sock::None
    }
}

#[derive(PartialEq)]
pub enum USock {
    None,
    Unconnected,
    Connected,
}

pub fn udp_lookup(s: Ipv4Addr, d: Ipv4Addr, sp: u16, dp: u16) -> USock {
    if (s, sp, d, dp) == (B12, UDP_PEER_PORT, VIP, UDP_CONN_PORT) {
        USock::Connected
    } else if d == VIP && dp == 53 {
        USock::Unconnected
    } else {
        USock::None
    }
}

/// The reference parser for frames reaching the TC program ("marked": the
/// hand-off mark `MARK` as the source MAC, as the balancer hands frames
/// to its own node's TC): the outer header of either family, then the GUE header and the inner packet, the same rules for
/// both (docs/design.md "IPv6 cluster network": "the IPv4 rules in the
/// same order").
pub fn parse_tc(w: &World, f: &[u8]) -> TcClass {
    let outer = if f.len() >= 14 && be16(f, 12) == 0x86dd {
        parse_outer6(w, f)
    } else {
        parse_outer4(w, f)
    };
    match outer {
        Ok((fam, udp_len)) => parse_gue(w, &f[fam.gue_at()..], fam, udp_len),
        Err(c) => c,
    }
}

/// Outer IPv4 + UDP of a frame for TC: the UDP length of GUE for this
/// node, or its class.
fn parse_outer4(w: &World, f: &[u8]) -> Result<(Fam, usize), TcClass> {
    use TcClass::*;
    if f.len() < 34 || be16(f, 12) != 0x0800 || f[14 + 9] != IPPROTO_UDP {
        return Err(NotForUs("not IPv4/UDP"));
    }
    let o = &f[14..];
    let oihl = (o[0] & 15) as usize * 4;
    if oihl < 20 {
        return Err(NotForUs("outer IHL < 5"));
    }
    if 14 + oihl + 8 > f.len() {
        return Err(NotForUs("no UDP header"));
    }
    if be16(o, oihl + 2) != GUE_PORT {
        return Err(NotForUs("not the GUE port"));
    }
    let (saddr, daddr) = (addr(o, 12), addr(o, 16));
    let marked = f[6..12] == MARK;
    if daddr != w.node4 {
        if marked && saddr == w.node4 && oihl == 20 {
            return Err(SlowPath);
        }
        return Err(NotForUs("GUE to another node"));
    }
    if !w.cluster.contains(&saddr.into()) {
        return Err(NotCluster);
    }
    if saddr == w.node4 && !marked {
        return Err(SelfUnmarked);
    }
    if oihl != 20 {
        return Err(Malformed("outer IP options"));
    }
    let tot = be16(o, 2) as usize;
    let udp_len = be16(o, 24) as usize;
    if o[0] >> 4 != 4 {
        return Err(Malformed("outer version"));
    }
    if be16(o, 6) & 0x3fff != 0 {
        return Err(Malformed("outer fragment"));
    }
    if tot < 20 || udp_len != tot - 20 {
        return Err(Malformed("UDP length != IP length - 20"));
    }
    if 14 + tot > f.len() {
        return Err(Malformed("outer total length beyond the frame"));
    }
    Ok((Fam::V4, udp_len))
}

/// Outer IPv6 + UDP of a frame for TC (an IPv6 cluster network's GUE:
/// next header UDP, no extension headers).
fn parse_outer6(w: &World, f: &[u8]) -> Result<(Fam, usize), TcClass> {
    use TcClass::*;
    if f.len() >= 14 + 40 && f[14 + 6] != IPPROTO_UDP {
        return Err(outer6_ext(w, f));
    }
    if f.len() < 14 + 48 {
        return Err(NotForUs("not IPv6/UDP without extension headers"));
    }
    if w.fam != Fam::V6 {
        return Err(NotForUs("outer IPv6 on an IPv4 cluster network"));
    }
    let o = &f[14..];
    if be16(o, 42) != GUE_PORT {
        return Err(NotForUs("not the GUE port"));
    }
    let (saddr, daddr) = (super::cluster::addr16(o, 8), super::cluster::addr16(o, 24));
    let marked = f[6..12] == MARK;
    if IpAddr::V6(daddr) != w.node {
        if marked && IpAddr::V6(saddr) == w.node {
            return Err(SlowPath);
        }
        return Err(NotForUs("GUE to another node"));
    }
    if !w.cluster.contains(&saddr.into()) {
        return Err(NotCluster);
    }
    if IpAddr::V6(saddr) == w.node && !marked {
        return Err(SelfUnmarked);
    }
    let plen = be16(o, 4) as usize;
    let udp_len = be16(o, 44) as usize;
    if o[0] >> 4 != 6 {
        return Err(Malformed("outer version"));
    }
    if udp_len != plen || udp_len < 8 {
        return Err(Malformed("UDP length != payload length"));
    }
    if 14 + 40 + plen > f.len() {
        return Err(Malformed("outer payload length beyond the frame"));
    }
    Ok((Fam::V6, udp_len))
}

/// An outer IPv6 frame whose next header is not UDP (tc_outer6_ext): on an
/// IPv6 cluster network, extension headers (or a first fragment's header
/// right after the IPv6 header) before UDP to the GUE port, addressed to
/// this node, are malformed GUE; anything else is not for us.
fn outer6_ext(w: &World, f: &[u8]) -> TcClass {
    use super::model6::{is_ext, walk6, Walk};
    use TcClass::*;
    let o = &f[14..];
    let nh = o[6];
    if w.fam != Fam::V6 || !(is_ext(nh) || nh == 44) {
        return NotForUs("not IPv6/UDP without extension headers");
    }
    if IpAddr::V6(super::cluster::addr16(o, 24)) != w.node {
        return NotForUs("outer extension headers to another node");
    }
    let udp = match walk6(o, be16(o, 4) as usize) {
        Walk::L4(off, IPPROTO_UDP) => off,
        Walk::Fragment
            if nh == 44 && o.len() >= 48 && o[40] == IPPROTO_UDP && be16(o, 42) & !7 == 0 =>
        {
            48
        }
        _ => return NotForUs("outer extension headers, not before UDP"),
    };
    if o.len() >= udp + 8 && be16(o, udp + 2) == GUE_PORT {
        Malformed("outer extension or fragment header before UDP to the GUE port")
    } else {
        NotForUs("outer extension headers, not GUE")
    }
}

/// The GUE header (`g`: from its first byte to the frame's end) of GUE for
/// this node in outer `fam`, UDP length `udp_len`, and the inner packet.
fn parse_gue(w: &World, g: &[u8], fam: Fam, udp_len: usize) -> TcClass {
    use TcClass::*;
    if udp_len < 16 {
        return Malformed("GUE header beyond the UDP length");
    }
    let n = g[7] as usize;
    let next = g[6] as usize;
    if g[0] >> 6 != 0 {
        return Malformed("GUE version");
    }
    if g[0] & 0x20 != 0 {
        return Malformed("GUE C bit");
    }
    if g[2] != 0 || g[3] != 0 {
        return Malformed("GUE flags");
    }
    if g[4] != 0 || g[5] != 0 {
        return Malformed("GUE private type");
    }
    if n > fam.max_hops() {
        return Malformed("more hops than the family allows");
    }
    if (g[0] & 0x1f) as usize != 1 + n * fam.hop_len() / 4 {
        return Malformed("hlen != 1 + N entries' words");
    }
    if next > n {
        return Malformed("next hop index > N");
    }
    let gue_len = 8 + fam.hop_len() * n;
    let hdr_len = fam.ip_len() + 8 + gue_len;
    if g[1] == 41 {
        if udp_len < 8 + gue_len + 40 {
            return Malformed("inner IPv6 header beyond the UDP length");
        }
        let hops = (0..n).map(|i| hop_at(fam, g, i)).collect();
        return super::model6::parse_tc6(
            w,
            &g[gue_len..],
            udp_len - 8 - gue_len,
            next,
            hops,
            hdr_len,
        );
    }
    if g[1] != 4 {
        return Malformed("inner protocol not 4");
    }
    if udp_len < 8 + gue_len + 20 {
        return Malformed("inner IPv4 header beyond the UDP length");
    }
    let hops: Vec<IpAddr> = (0..n).map(|i| hop_at(fam, g, i)).collect();
    let inner = &g[gue_len..];
    let itot = be16(inner, 2) as usize;
    let iihl = (inner[0] & 15) as usize * 4;
    if inner[0] >> 4 != 4 {
        return Malformed("inner version");
    }
    if iihl < 20 {
        return Malformed("inner IHL < 5");
    }
    if be16(inner, 6) & 0x3fff != 0 {
        return Malformed("inner fragment");
    }
    if itot != udp_len - 8 - gue_len {
        return Malformed("inner length != UDP length - GUE");
    }
    if itot < iihl {
        return Malformed("inner total length < IHL");
    }
    let (is, id) = (addr(inner, 12), addr(inner, 16));
    if !w.is_vip(id) {
        return InnerNotVip;
    }
    let proto = inner[9];
    let l4 = &inner[iihl..itot];
    let mut stats = if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) && l4.len() >= 4 {
        w.services
            .get(&(id.into(), be16(l4, 2), proto))
            .map(|s| s.index)
    } else {
        None
    };
    let local = match proto {
        IPPROTO_TCP => {
            if l4.len() < 20 || l4[12] >> 4 < 5 || (l4[12] >> 4) as usize * 4 > l4.len() {
                return Malformed("inner TCP header");
            }
            let fl = l4[13];
            if fl & SYN != 0 && fl & ACK == 0 {
                Local::Syn
            } else {
                match tcp_lookup(is, id, be16(l4, 0), be16(l4, 2)) {
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
            match udp_lookup(is, id, be16(l4, 0), be16(l4, 2)) {
                USock::Connected => Local::UdpConnected,
                USock::Unconnected => Local::UdpListener,
                USock::None => Local::Unknown,
            }
        }
        IPPROTO_ICMP => {
            let (es, ed, esp, edp, eproto) = match icmp_quote(l4, id) {
                IcmpQuote::Flow(q) => q,
                IcmpQuote::Ping => {
                    return Valid(Gue {
                        n,
                        next,
                        hops,
                        hdr_len,
                        stats: None,
                        local: Local::Ping,
                        proto,
                        v6: false,
                    })
                }
                IcmpQuote::NoFlow(why) => return Unsupported(why),
                IcmpQuote::Malformed(why) => return Malformed(why),
            };
            // Counted for the quoted flow's service.
            stats = w.services.get(&(es.into(), esp, eproto)).map(|s| s.index);
            if eproto == IPPROTO_TCP {
                if tcp_lookup(ed, es, edp, esp) == Sock::Established {
                    Local::IcmpKnown
                } else {
                    Local::Unknown
                }
            } else {
                match udp_lookup(ed, es, edp, esp) {
                    USock::Connected => Local::IcmpKnown,
                    USock::Unconnected => Local::IcmpUdpListener,
                    USock::None => Local::Unknown,
                }
            }
        }
        _ => return Unsupported("inner protocol not TCP/UDP/ICMP"),
    };
    Valid(Gue {
        n,
        next,
        hops,
        hdr_len,
        stats,
        local,
        proto,
        v6: false,
    })
}

/// A GUE frame without its outer headers (`hdr_len` bytes after
/// Ethernet), its Ethernet type that of the inner packet: 0x86DD when the
/// GUE header (after the outer IPv4 or IPv6 and UDP headers) says protocol
/// 41, else 0x0800.
pub fn decapsulated(f: &[u8], hdr_len: usize) -> Vec<u8> {
    let mut v = f[..14].to_vec();
    v[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    if f.get(Fam::of_frame(f).gue_at() + 1) == Some(&41) {
        v[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    }
    v.extend_from_slice(&f[14 + hdr_len..]);
    v
}

/// The source MAC TC gives a handed-off frame it keeps (bpf/common.h
/// `unmark`): the mark goes no further than TC.
pub const UNMARKED_SOURCE: [u8; 6] = [0x02, 0x00, 0x00, 0x6e, 0x69, 0x6c];

/// `f` as TC goes on with it past the cluster-source checks: a frame from
/// this node's own address (to it) with the hand-off mark gets
/// [`UNMARKED_SOURCE`] as its source MAC.
fn as_kept(w: &World, f: &[u8]) -> Vec<u8> {
    let mut v = f.to_vec();
    let own = if f.len() >= 14 + 40 && be16(f, 12) == 0x86dd {
        IpAddr::V6(super::cluster::addr16(&f[14..], 8)) == w.node
    } else {
        f.len() >= 34 && addr(&f[14..], 12) == w.node4
    };
    if own && f[6..12] == MARK {
        v[6..12].copy_from_slice(&UNMARKED_SOURCE);
    }
    v
}

pub fn expect_tc(w: &World, f: &[u8], class: &TcClass) -> Outcome {
    let kept = as_kept(w, f);
    let f = kept.as_slice();
    let shot = |c: &'static str| outcome(TC_ACT_SHOT, &[c], Out::Any);
    match class {
        TcClass::NotForUs(_) => outcome(TC_ACT_OK, &["tc_pass_other"], Out::Unchanged),
        TcClass::NotCluster => shot("tc_drop_not_cluster"),
        TcClass::SelfUnmarked => shot("tc_drop_self_unmarked"),
        TcClass::SlowPath => outcome(TC_ACT_REDIRECT, &["tc_slow_path_sent"], Out::Unchanged),
        TcClass::Malformed(_) => shot("tc_drop_malformed"),
        TcClass::Unsupported(_) => shot("tc_drop_unsupported"),
        TcClass::InnerNotVip => shot("tc_drop_inner_not_vip"),
        TcClass::Valid(g) => {
            // Inner IPv6: counted once more as such.
            let decap = |c: &'static str| Outcome {
                verdict: TC_ACT_OK,
                counters: if g.v6 {
                    vec![c, "tc_decap_ipv6"]
                } else {
                    vec![c]
                },
                out: Out::Exact(decapsulated(f, g.hdr_len)),
                stat: Stat::TcDecap(g.stats),
            };
            match g.local {
                Local::Syn => return decap("tc_decap_syn"),
                Local::Established => return decap("tc_decap_established"),
                Local::UdpConnected => return decap("tc_decap_udp"),
                Local::IcmpKnown => return decap("tc_decap_icmp"),
                Local::Ping => return decap("tc_decap_ping"),
                Local::UdpListener | Local::IcmpUdpListener | Local::Unknown => {}
            }
            if g.next < g.n {
                let hop = g.hops[g.next];
                if hop == w.node {
                    return decap("tc_decap_loop_guard");
                }
                if hop.is_unspecified() {
                    return shot("tc_drop_malformed");
                }
                if !relayable(w, hop) {
                    return shot("tc_drop_bad_next_hop");
                }
                // From this node to the hop, the next hop index past it.
                let mut v = f.to_vec();
                let fam = Fam::of_frame(f);
                let (s, d) = match fam {
                    Fam::V4 => (14 + 12, 14 + 16),
                    Fam::V6 => (14 + 8, 14 + 24),
                };
                let a = octets(w.node);
                v[s..s + a.len()].copy_from_slice(&a);
                v[d..d + a.len()].copy_from_slice(&octets(hop));
                v[fam.gue_at() + 6] = g.next as u8 + 1;
                let had_valid_csum = fam == Fam::V4 && csum(&f[14..34]) == 0;
                if had_valid_csum {
                    fix_ip_csum(&mut v, 14);
                }
                return Outcome {
                    verdict: TC_ACT_REDIRECT,
                    counters: if g.v6 {
                        vec!["tc_forward", "tc_forward_ipv6"]
                    } else {
                        vec!["tc_forward"]
                    },
                    out: Out::Rewritten(v, had_valid_csum),
                    stat: Stat::TcForward(g.stats),
                };
            }
            if g.local == Local::UdpListener {
                return decap("tc_decap_udp");
            }
            if g.local == Local::IcmpUdpListener {
                return decap("tc_decap_icmp");
            }
            if w.unknown_flow == UnknownFlow::Local {
                return decap("tc_decap_unknown_local");
            }
            if w.unknown_flow == UnknownFlow::Rst && g.proto == IPPROTO_TCP {
                let reply = if g.v6 {
                    rst_reply6(f, g.hdr_len)
                } else {
                    rst_reply(f, g.hdr_len)
                };
                if let Some(reply) = reply {
                    return Outcome {
                        verdict: TC_ACT_REDIRECT,
                        counters: vec!["tc_rst_sent"],
                        out: Out::Exact(reply),
                        stat: Stat::TcDrop(g.stats),
                    };
                }
            }
            Outcome {
                verdict: TC_ACT_SHOT,
                counters: vec!["tc_drop_unknown_flow"],
                out: Out::Any,
                stat: Stat::TcDrop(g.stats),
            }
        }
    }
}

/// The RST (RFC 793) that `unknown_flow: rst` sends for the inner TCP
/// segment of GUE frame `f` (outer headers `hdr_len` bytes): the frame's
/// MACs with type 0x0800, IPv4 VIP -> client (ID 0, DF, TTL 64), TCP without
/// options, window 0, both checksums valid. None for a RST (not answered).
pub fn rst_reply(f: &[u8], hdr_len: usize) -> Option<Vec<u8>> {
    let inner = &f[14 + hdr_len..];
    let iihl = (inner[0] & 15) as usize * 4;
    let itot = be16(inner, 2) as usize;
    let t = &inner[iihl..itot];
    let flags = t[13];
    if flags & RST != 0 {
        return None;
    }
    let (seq, ack, out_flags) = if flags & ACK != 0 {
        (u32::from_be_bytes([t[8], t[9], t[10], t[11]]), 0u32, RST)
    } else {
        let data = t.len().saturating_sub((t[12] >> 4) as usize * 4) as u32;
        let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
        let len = data + (flags & SYN != 0) as u32 + (flags & FIN != 0) as u32;
        (0, seq.wrapping_add(len), RST | ACK)
    };
    let (client, vip) = (addr(inner, 12), addr(inner, 16));
    let mut tcp_h = Vec::with_capacity(20);
    tcp_h.extend_from_slice(&t[2..4]);
    tcp_h.extend_from_slice(&t[0..2]);
    tcp_h.extend_from_slice(&seq.to_be_bytes());
    tcp_h.extend_from_slice(&ack.to_be_bytes());
    tcp_h.extend_from_slice(&[0x50, out_flags, 0, 0, 0, 0, 0, 0]);
    let mut pseudo = vip.octets().to_vec();
    pseudo.extend_from_slice(&client.octets());
    pseudo.extend_from_slice(&[0, IPPROTO_TCP, 0, 20]);
    pseudo.extend_from_slice(&tcp_h);
    let c = csum(&pseudo);
    put16(&mut tcp_h, 16, c);
    let mut ip = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, IPPROTO_TCP, 0, 0];
    ip.extend_from_slice(&vip.octets());
    ip.extend_from_slice(&client.octets());
    let c = csum(&ip);
    put16(&mut ip, 10, c);
    // (IPv4 whatever the outer family.)
    let mut out = f[..12].to_vec();
    out.extend_from_slice(&[0x08, 0x00]);
    out.extend_from_slice(&ip);
    out.extend_from_slice(&tcp_h);
    Some(out)
}

/// The RST `unknown_flow: rst` sends for the inner IPv6 TCP segment of GUE
/// frame `f` (outer headers `hdr_len` bytes): the frame's Ethernet header
/// with type 0x86DD, IPv6 VIP -> client (class and label 0, hop limit 64),
/// TCP without options, window 0, the checksum over the IPv6 pseudo-header;
/// RFC 793's numbers as for IPv4. None for a RST (not answered).
pub fn rst_reply6(f: &[u8], hdr_len: usize) -> Option<Vec<u8>> {
    let inner = &f[14 + hdr_len..];
    let plen = be16(inner, 4) as usize;
    let super::model6::Walk::L4(off, IPPROTO_TCP) = super::model6::walk6(inner, plen) else {
        return None;
    };
    let t = &inner[off..40 + plen];
    let flags = t[13];
    if flags & RST != 0 {
        return None;
    }
    let (seq, ack, out_flags) = if flags & ACK != 0 {
        (u32::from_be_bytes([t[8], t[9], t[10], t[11]]), 0u32, RST)
    } else {
        let data = t.len().saturating_sub((t[12] >> 4) as usize * 4) as u32;
        let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
        let len = data + (flags & SYN != 0) as u32 + (flags & FIN != 0) as u32;
        (0, seq.wrapping_add(len), RST | ACK)
    };
    let (client, vip) = (&inner[8..24], &inner[24..40]);
    let mut tcp_h = Vec::with_capacity(20);
    tcp_h.extend_from_slice(&t[2..4]);
    tcp_h.extend_from_slice(&t[0..2]);
    tcp_h.extend_from_slice(&seq.to_be_bytes());
    tcp_h.extend_from_slice(&ack.to_be_bytes());
    tcp_h.extend_from_slice(&[0x50, out_flags, 0, 0, 0, 0, 0, 0]);
    let mut pseudo = vip.to_vec();
    pseudo.extend_from_slice(client);
    pseudo.extend_from_slice(&[0, 0, 0, 20, 0, 0, 0, IPPROTO_TCP]);
    pseudo.extend_from_slice(&tcp_h);
    let c = csum(&pseudo);
    put16(&mut tcp_h, 16, c);
    let mut out = f[..12].to_vec();
    out.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 20, IPPROTO_TCP, 64]);
    out.extend_from_slice(vip);
    out.extend_from_slice(client);
    out.extend_from_slice(&tcp_h);
    Some(out)
}

// ---- tolerated deviations ---------------------------------------------------------------------

/// Where nilb may differ from the reference without forwarding anything it
/// should not, the outcome it produces instead and a name for the deviation
/// (reported as an observation with an example, not as a violation): a RST
/// over the rate limit (the outcome depends on time). (ICMP quotes are read
/// within the ICMP message's length only, in both programs: no deviation. A
/// GUE header past the UDP length, in the Ethernet padding, is malformed
/// whatever its protocol: no deviation either.)
pub fn tolerated(
    prog: Prog,
    w: &World,
    _f: &[u8],
    class_label: &str,
) -> Option<(Outcome, &'static str)> {
    match prog {
        Prog::Tc
            if w.unknown_flow == UnknownFlow::Rst
                && class_label == "valid Unknown, no hop left" =>
        {
            // Over the RST rate limit (NILB_RST_BURST at once, then one per
            // NILB_RST_INTERVAL_NS per CPU): dropped and counted instead.
            Some((
                outcome(TC_ACT_SHOT, &["tc_drop_rst_limited"], Out::Any),
                "tolerated: tc: unknown_flow rst over the RST rate limit (dropped and counted)",
            ))
        }
        _ => None,
    }
}

/// Whether TC may send a second-chance packet on to `hop`: a unicast
/// address (not 0/8, 127/8, 169.254/16, 224/4 or 240/4; IPv6: not ::/96,
/// ::ffff:0:0/96, fe80::/10 or ff00::/8) that is not a VIP
/// (docs/design.md "Second chance (TC)" and "IPv6 cluster network").
pub fn relayable(w: &World, hop: IpAddr) -> bool {
    match hop {
        IpAddr::V4(hop) => {
            let [first, second, ..] = hop.octets();
            // A VIP is refused unless it is a cluster address (a NAT-mode
            // service on a node's own address).
            !(first == 0
                || first == 127
                || first >= 224
                || (first, second) == (169, 254)
                || (w.is_vip(hop) && !w.cluster.contains(&IpAddr::V4(hop))))
        }
        IpAddr::V6(hop) => {
            let s = hop.segments();
            let low96 = s[..5] == [0; 5] && (s[5] == 0 || s[5] == 0xffff);
            !(low96
                || s[0] >> 8 == 0xff
                || s[0] & 0xffc0 == 0xfe80
                || (w.is_vip6(hop) && !w.cluster.contains(&IpAddr::V6(hop))))
        }
    }
}
