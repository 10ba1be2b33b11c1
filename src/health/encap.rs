//! Encapsulated health checks (`encap_check`, docs/config.md "Health
//! checks"; docs/design.md "Health checks"): proof that a backend takes
//! GUE traffic for the VIP, as clients' packets reach it.
//!
//! Per check, the balancer sends through an ordinary UDP socket, from its
//! node address to `DIP:gue_port`, a GUE packet (no hop list) carrying a TCP
//! SYN from `node:P` to `VIP:port`, where P is a port the daemon reserves for
//! the check (a bound, not listening TCP socket, so nothing else on the node
//! uses it meanwhile). The backend's TC program decapsulates the SYN (it
//! comes from a cluster address) and its stack answers with a SYN-ACK from
//! the VIP straight to `node:P` (DSR). The balancer usually holds the VIP
//! on `lo`, so to its routing that SYN-ACK is a martian and no socket would
//! ever see it: a packet socket (AF_PACKET, with a classic BPF filter that
//! passes only TCP SYN-ACKs and RSTs addressed to the node) picks it up
//! before the IP layer. The checker then sends a RST through GUE, so the
//! backend drops its half-open connection at once. A SYN-ACK with the
//! expected acknowledgement number passes; a RST (nothing listens on the
//! VIP's port) or no answer within the timeout fails.
//!
//! Per check: 3 packets (SYN and RST out, 48 + 40 = 88 bytes of IP each
//! with GUE, SYN-ACK in), one half-open connection on the backend for one
//! round trip.
//!
//! The balancer's own backend is reached XDP -> TC inside the kernel, not
//! through the wire; there the check confirms that nilb's TC filter is
//! attached to the interface instead (status shows `local`).
//!
//! Building and parsing the packets is pure ([`gue_tcp_packet`],
//! [`parse_reply`], [`reply_filter`]); [`Prober`] holds the sockets and
//! [`EncapCheckers`] the periodic tasks.

use std::collections::HashMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use tokio::sync::{mpsc, oneshot};

use super::checker::CheckTarget;
use super::periodic::{run_periodically, Periodic, ProbeKey};
use crate::types::ServiceKey;

/// TCP flags.
#[cfg(test)]
const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// One encapsulated-check result.
#[derive(Clone, Debug)]
pub struct EncapResult {
    /// The service whose check this is.
    pub service: ServiceKey,
    /// The backend checked.
    pub dip: std::net::IpAddr,
    /// Task incarnation (see [`EncapCheckers::is_current`]).
    pub generation: u64,
    /// Ok, or why the check failed.
    pub result: Result<(), String>,
}

/// What one task checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncapSpec {
    /// The service's VIP and port (the SYN's destination).
    pub vip: SocketAddrV4,
    /// Time between checks, ms.
    pub interval_ms: u64,
    /// Hard limit per check, ms.
    pub timeout_ms: u64,
    /// The backend is this node: check the TC filter instead.
    pub local: bool,
}

/// One's complement sum of 16-bit big-endian words (odd byte padded).
fn sum16(data: &[u8], mut sum: u32) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [b] = chunks.remainder() {
        sum += (*b as u32) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A TCP segment without options or payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgement number (0 without ACK).
    pub ack: u32,
    /// Flags (SYN 0x02, RST 0x04, ACK 0x10, ...).
    pub flags: u8,
}

/// The GUE payload (what goes into the UDP datagram to `DIP:gue_port`):
/// an 8-byte GUE header with no hop list (docs/design.md "GUE wire
/// format"), then an IPv4 packet carrying `seg` with valid checksums.
pub fn gue_tcp_packet(seg: &Segment, ip_id: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(8 + 40);
    // GUE: version 0, C 0, hlen 1 (+ 0 hops); inner protocol 4; flags 0;
    // private type 0; next hop 0; hop count 0.
    p.extend_from_slice(&[1, 4, 0, 0, 0, 0, 0, 0]);
    let ip_start = p.len();
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&40u16.to_be_bytes());
    p.extend_from_slice(&ip_id.to_be_bytes());
    p.extend_from_slice(&[0x40, 0]); // DF
    p.extend_from_slice(&[64, 6, 0, 0]); // TTL, TCP, checksum
    p.extend_from_slice(&seg.src.ip().octets());
    p.extend_from_slice(&seg.dst.ip().octets());
    let csum = fold(sum16(&p[ip_start..ip_start + 20], 0));
    p[ip_start + 10..ip_start + 12].copy_from_slice(&csum.to_be_bytes());
    let tcp_start = p.len();
    p.extend_from_slice(&seg.src.port().to_be_bytes());
    p.extend_from_slice(&seg.dst.port().to_be_bytes());
    p.extend_from_slice(&seg.seq.to_be_bytes());
    p.extend_from_slice(&seg.ack.to_be_bytes());
    p.extend_from_slice(&[5 << 4, seg.flags]);
    let window: u16 = if seg.flags & RST != 0 { 0 } else { 64240 };
    p.extend_from_slice(&window.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&seg.src.ip().octets());
    pseudo.extend_from_slice(&seg.dst.ip().octets());
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    let csum = fold(sum16(&p[tcp_start..], sum16(&pseudo, 0)));
    p[tcp_start + 16..tcp_start + 18].copy_from_slice(&csum.to_be_bytes());
    p
}

/// The TCP header of an IPv4 packet (as a SOCK_DGRAM packet socket
/// delivers it, from the IP header on), if it is an unfragmented TCP
/// segment.
pub fn parse_reply(ip: &[u8]) -> Option<Segment> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ihl < 20 || u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 || ip.len() < ihl + 20 {
        return None;
    }
    let t = &ip[ihl..];
    let addr = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    Some(Segment {
        src: SocketAddrV4::new(addr(&ip[12..16]), u16::from_be_bytes([t[0], t[1]])),
        dst: SocketAddrV4::new(addr(&ip[16..20]), u16::from_be_bytes([t[2], t[3]])),
        seq: u32::from_be_bytes([t[4], t[5], t[6], t[7]]),
        ack: u32::from_be_bytes([t[8], t[9], t[10], t[11]]),
        flags: t[13],
    })
}

/// One instruction of a classic BPF program: (code, jt, jf, k).
pub type Insn = (u16, u8, u8, u32);

/// The classic BPF filter of the packet socket: IPv4, TCP, addressed to
/// `node`, not a fragment, ACK set and SYN or RST set. Offsets count from
/// the IP header (SOCK_DGRAM).
pub fn reply_filter(node: Ipv4Addr) -> Vec<Insn> {
    const LD_B_ABS: u16 = 0x30;
    const LD_H_ABS: u16 = 0x28;
    const LD_W_ABS: u16 = 0x20;
    const LDX_B_MSH: u16 = 0xb1;
    const LD_B_IND: u16 = 0x50;
    const AND_K: u16 = 0x54;
    const JEQ_K: u16 = 0x15;
    const JSET_K: u16 = 0x45;
    const RET_K: u16 = 0x06;
    // (code, k, jump-if-true target, jump-if-false target); targets are
    // "next", "accept" or "drop".
    #[derive(Clone, Copy)]
    enum T {
        Next,
        Accept,
        Drop,
    }
    let prog: [(u16, u32, T, T); 13] = [
        (LD_B_ABS, 0, T::Next, T::Next),
        (AND_K, 0xf0, T::Next, T::Next),
        (JEQ_K, 0x40, T::Next, T::Drop),
        (LD_B_ABS, 9, T::Next, T::Next),
        (JEQ_K, 6, T::Next, T::Drop),
        (LD_W_ABS, 16, T::Next, T::Next),
        (JEQ_K, u32::from(node), T::Next, T::Drop),
        (LD_H_ABS, 6, T::Next, T::Next),
        (JSET_K, 0x1fff, T::Drop, T::Next),
        (LDX_B_MSH, 0, T::Next, T::Next),
        (LD_B_IND, 13, T::Next, T::Next),
        (JSET_K, ACK as u32, T::Next, T::Drop),
        (JSET_K, (SYN | RST) as u32, T::Accept, T::Drop),
    ];
    let accept = prog.len();
    let drop = accept + 1;
    let mut out: Vec<Insn> = prog
        .iter()
        .enumerate()
        .map(|(i, &(code, k, t, f))| {
            let off = |x: T| match x {
                T::Next => 0,
                T::Accept => (accept - i - 1) as u8,
                T::Drop => (drop - i - 1) as u8,
            };
            let is_jump = code & 0x07 == 0x05;
            if is_jump {
                (code, off(t), off(f), k)
            } else {
                (code, 0, 0, k)
            }
        })
        .collect();
    out.push((RET_K, 0, 0, 256));
    out.push((RET_K, 0, 0, 0));
    out
}

/// What a check got back.
#[derive(Debug)]
enum Reply {
    SynAck(Segment),
    Rst(Segment),
}

/// The sockets of the encapsulated checks: a UDP socket to send GUE from
/// the node address, a packet socket that receives the backends' answers,
/// and the checks waiting for them by source port.
pub struct Prober {
    node: Ipv4Addr,
    gue_port: u16,
    ifindex: i32,
    udp: tokio::net::UdpSocket,
    waiters: Arc<Mutex<HashMap<u16, oneshot::Sender<Reply>>>>,
    /// Tells the receiving thread to stop (it checks every 200 ms).
    stop: Arc<AtomicBool>,
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The receiving thread: read the packet socket (blocking, with a short
/// timeout to notice `stop`) and hand each SYN-ACK or RST to the check
/// waiting on its destination port.
fn receive(
    mut sock: socket2::Socket,
    node: Ipv4Addr,
    waiters: Arc<Mutex<HashMap<u16, oneshot::Sender<Reply>>>>,
    stop: Arc<AtomicBool>,
) {
    let mut buf = [0u8; 256];
    while !stop.load(Ordering::Relaxed) {
        let n = match sock.read(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                tracing::warn!("encapsulated checks: reading the packet socket failed: {e}; answers are no longer seen");
                return;
            }
        };
        let Some(seg) = parse_reply(&buf[..n]) else {
            continue;
        };
        if seg.dst.ip() != &node {
            continue;
        }
        let reply = if seg.flags & RST != 0 {
            Reply::Rst(seg)
        } else if seg.flags & (SYN | ACK) == SYN | ACK {
            Reply::SynAck(seg)
        } else {
            continue;
        };
        if let Some(tx) = waiters
            .lock()
            .ok()
            .and_then(|mut m| m.remove(&seg.dst.port()))
        {
            let _ = tx.send(reply);
        }
    }
}

impl Prober {
    /// Open the sockets (needs CAP_NET_RAW for the packet socket) and start
    /// the receiving thread; the UDP socket is registered with the current
    /// tokio runtime. `ifindex` is the interface nilb runs on (for
    /// the local check).
    pub fn new(node: Ipv4Addr, gue_port: u16, ifindex: i32) -> Result<Arc<Self>> {
        use socket2::{Domain, Protocol, SockFilter, Socket, Type};
        let eth_p_ip = (0x0800u16).to_be() as i32;
        let raw = Socket::new(Domain::PACKET, Type::DGRAM, Some(Protocol::from(eth_p_ip)))
            .context("opening a packet socket for the encapsulated checks (needs CAP_NET_RAW)")?;
        let filter: Vec<SockFilter> = reply_filter(node)
            .into_iter()
            .map(|(code, jt, jf, k)| SockFilter::new(code, jt, jf, k))
            .collect();
        raw.attach_filter(&filter)
            .context("attaching the SYN-ACK filter to the packet socket")?;
        raw.set_read_timeout(Some(Duration::from_millis(200)))?;
        let std_udp = std::net::UdpSocket::bind((node, 0))
            .with_context(|| format!("binding a UDP socket to {node} for GUE"))?;
        std_udp.set_nonblocking(true)?;
        let udp = tokio::net::UdpSocket::from_std(std_udp)?;
        let waiters: Arc<Mutex<HashMap<u16, oneshot::Sender<Reply>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (w, st) = (waiters.clone(), stop.clone());
        std::thread::Builder::new()
            .name("nilb-encap-rx".into())
            .spawn(move || receive(raw, node, w, st))
            .context("starting the encapsulated checks' receiver")?;
        Ok(Arc::new(Prober {
            node,
            gue_port,
            ifindex,
            udp,
            waiters,
            stop,
        }))
    }

    /// One check of `dip` for the service at `vip`.
    pub async fn check(&self, dip: Ipv4Addr, spec: &EncapSpec) -> Result<(), String> {
        if spec.local {
            return crate::dataplane::tc_filter_check(self.ifindex);
        }
        // Reserve a source port: bound, not listening, so no other socket
        // of this node takes it while the check runs.
        let reserve = tokio::net::TcpSocket::new_v4()
            .and_then(|s| s.bind((self.node, 0).into()).map(|()| s))
            .map_err(|e| format!("reserving a source port: {e}"))?;
        let sport = reserve
            .local_addr()
            .map_err(|e| format!("reserving a source port: {e}"))?
            .port();
        let src = SocketAddrV4::new(self.node, sport);
        let isn: u32 = rand::random();
        let (tx, rx) = oneshot::channel();
        if let Ok(mut w) = self.waiters.lock() {
            w.insert(sport, tx);
        }
        let result = self.exchange(dip, spec, src, isn, rx).await;
        if let Ok(mut w) = self.waiters.lock() {
            w.remove(&sport);
        }
        drop(reserve);
        result
    }

    async fn exchange(
        &self,
        dip: Ipv4Addr,
        spec: &EncapSpec,
        src: SocketAddrV4,
        isn: u32,
        rx: oneshot::Receiver<Reply>,
    ) -> Result<(), String> {
        let to = SocketAddrV4::new(dip, self.gue_port);
        let syn = Segment {
            src,
            dst: spec.vip,
            seq: isn,
            ack: 0,
            flags: SYN,
        };
        self.udp
            .send_to(&gue_tcp_packet(&syn, rand::random()), to)
            .await
            .map_err(|e| format!("sending GUE to {to}: {e}"))?;
        let timeout = Duration::from_millis(spec.timeout_ms);
        match tokio::time::timeout(timeout, rx).await {
            Err(_) | Ok(Err(_)) => Err(format!(
                "no answer from {} within {} ms to a GUE-encapsulated SYN sent to {to}: the backend does not decapsulate GUE (is nilb's TC program attached?) or its answer is lost",
                spec.vip, spec.timeout_ms
            )),
            Ok(Ok(Reply::Rst(seg))) => Err(format!(
                "{} answered a GUE-encapsulated SYN (sent to {to}) with RST: decapsulation works, but nothing listens on the VIP's port",
                seg.src
            )),
            Ok(Ok(Reply::SynAck(seg))) => {
                if seg.src != spec.vip || seg.ack != isn.wrapping_add(1) {
                    return Err(format!(
                        "unexpected SYN-ACK from {} (ack {}, expected {} from {})",
                        seg.src,
                        seg.ack,
                        isn.wrapping_add(1),
                        spec.vip
                    ));
                }
                // Reset the half-open connection on the backend.
                let rst = Segment {
                    src,
                    dst: spec.vip,
                    seq: seg.ack,
                    ack: 0,
                    flags: RST,
                };
                let _ = self
                    .udp
                    .send_to(&gue_tcp_packet(&rst, rand::random()), to)
                    .await;
                Ok(())
            }
        }
    }
}

/// The running encapsulated-check tasks.
pub struct EncapCheckers {
    tasks: Periodic<EncapSpec>,
    prober: Arc<Prober>,
    node: Ipv4Addr,
    tx: mpsc::Sender<EncapResult>,
}

impl EncapCheckers {
    /// Checkers on `runtime` for the node at `node` (GUE from it to
    /// `gue_port`), sending results to `tx`.
    pub fn new(
        runtime: tokio::runtime::Handle,
        node: Ipv4Addr,
        gue_port: u16,
        ifindex: i32,
        tx: mpsc::Sender<EncapResult>,
    ) -> Result<Self> {
        let prober = {
            let _guard = runtime.enter();
            Prober::new(node, gue_port, ifindex)?
        };
        Ok(EncapCheckers {
            tasks: Periodic::new(runtime),
            prober,
            node,
            tx,
        })
    }

    /// Whether these checkers send GUE from `node` to `gue_port` (else they
    /// must be rebuilt).
    pub fn matches(&self, node: Ipv4Addr, gue_port: u16) -> bool {
        self.node == node && self.prober.gue_port == gue_port
    }

    /// Make the running tasks match `targets` (as
    /// [`super::checker::Checkers::sync`]).
    pub fn sync(&mut self, targets: &[CheckTarget]) {
        let node = self.node;
        // The probe is an IPv4 SYN inside GUE over outer IPv4: IPv6
        // services, and every service of an IPv6 cluster network (which
        // the configuration refuses to give the check), are judged by
        // their regular check only (docs/config.md "Encapsulated check").
        let want: HashMap<ProbeKey, EncapSpec> = targets
            .iter()
            .filter_map(|t| {
                let std::net::IpAddr::V4(vip) = t.service.vip else {
                    return None;
                };
                if !t.dip.is_ipv4() {
                    return None;
                }
                Some((
                    (t.service, t.dip),
                    EncapSpec {
                        vip: SocketAddrV4::new(vip, t.service.port),
                        interval_ms: t.check.interval_ms,
                        timeout_ms: t.check.timeout_ms,
                        local: t.dip == std::net::IpAddr::V4(node),
                    },
                ))
            })
            .collect();
        let (prober, tx) = (self.prober.clone(), self.tx.clone());
        self.tasks
            .sync(&want, move |(service, dip), spec, generation| {
                let (prober, tx) = (prober.clone(), tx.clone());
                let interval = Duration::from_millis(spec.interval_ms);
                run_periodically(
                    interval,
                    Duration::from_secs(1),
                    move || {
                        let (prober, spec) = (prober.clone(), spec.clone());
                        async move {
                            EncapResult {
                                service,
                                dip,
                                generation,
                                result: match dip {
                                    std::net::IpAddr::V4(d) => prober.check(d, &spec).await,
                                    std::net::IpAddr::V6(_) => {
                                        Err("the encapsulated check is IPv4 only".into())
                                    }
                                },
                            }
                        }
                    },
                    tx,
                )
            });
    }

    /// Whether `r` comes from the live task of its target.
    pub fn is_current(&self, r: &EncapResult) -> bool {
        self.tasks.is_current(&(r.service, r.dip), r.generation)
    }

    /// Number of running tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no task runs.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(flags: u8) -> Segment {
        Segment {
            src: "10.0.0.11:40000".parse().unwrap(),
            dst: "10.0.0.100:80".parse().unwrap(),
            seq: 0x01020304,
            ack: 0,
            flags,
        }
    }

    #[test]
    fn gue_syn_is_byte_exact_with_valid_checksums() {
        let p = gue_tcp_packet(&seg(SYN), 0x1234);
        assert_eq!(p.len(), 48);
        assert_eq!(&p[..8], &[1, 4, 0, 0, 0, 0, 0, 0], "GUE, no hops");
        let inner = &p[8..];
        let (ip, rest) = etherparse::Ipv4Header::from_slice(inner).unwrap();
        assert_eq!(ip.calc_header_checksum(), ip.header_checksum);
        assert!(ip.dont_fragment);
        assert_eq!(ip.identification, 0x1234);
        let (tcp, payload) = etherparse::TcpHeader::from_slice(rest).unwrap();
        assert!(payload.is_empty());
        assert!(tcp.syn && !tcp.ack && !tcp.rst);
        assert_eq!((tcp.source_port, tcp.destination_port), (40000, 80));
        assert_eq!(tcp.sequence_number, 0x01020304);
        assert_eq!(
            tcp.calc_checksum_ipv4(&ip, &[]).unwrap(),
            tcp.checksum,
            "TCP checksum"
        );
        let back = parse_reply(inner).unwrap();
        assert_eq!(back, seg(SYN));
    }

    #[test]
    fn rst_has_no_window() {
        let p = gue_tcp_packet(&seg(RST), 1);
        let back = parse_reply(&p[8..]).unwrap();
        assert_eq!(back.flags, RST);
        assert_eq!(&p[8 + 20 + 14..8 + 20 + 16], &[0, 0]);
    }

    #[test]
    fn parse_refuses_fragments_and_other_protocols() {
        let mut p = gue_tcp_packet(&seg(SYN | ACK), 1)[8..].to_vec();
        assert!(parse_reply(&p).is_some());
        p[6] |= 0x20; // MF
        assert!(parse_reply(&p).is_none());
        p[6] &= !0x20;
        p[9] = 17;
        assert!(parse_reply(&p).is_none());
        assert!(parse_reply(&p[..30]).is_none());
    }

    /// A tiny interpreter of the classic BPF subset the filter uses, to
    /// test the filter's verdicts without a socket.
    fn run(prog: &[Insn], pkt: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let byte = |o: usize| pkt.get(o).copied().map(u32::from);
        loop {
            let (code, jt, jf, k) = prog[pc];
            pc += 1;
            match code {
                0x30 => {
                    a = match byte(k as usize) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0x28 => {
                    a = match (byte(k as usize), byte(k as usize + 1)) {
                        (Some(h), Some(l)) => h << 8 | l,
                        _ => return 0,
                    }
                }
                0x20 => {
                    let o = k as usize;
                    if o + 4 > pkt.len() {
                        return 0;
                    }
                    a = u32::from_be_bytes([pkt[o], pkt[o + 1], pkt[o + 2], pkt[o + 3]]);
                }
                0xb1 => {
                    x = match byte(k as usize) {
                        Some(v) => 4 * (v & 0xf),
                        None => return 0,
                    }
                }
                0x50 => {
                    a = match byte((x + k) as usize) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0x54 => a &= k,
                0x15 => pc += if a == k { jt } else { jf } as usize,
                0x45 => pc += if a & k != 0 { jt } else { jf } as usize,
                0x06 => return k,
                other => panic!("opcode {other:#x}"),
            }
        }
    }

    #[test]
    fn filter_passes_only_syn_acks_and_rsts_to_the_node() {
        let node: Ipv4Addr = "10.0.0.11".parse().unwrap();
        let f = reply_filter(node);
        let to_node = |flags: u8| {
            let s = Segment {
                src: "10.0.0.100:80".parse().unwrap(),
                dst: SocketAddrV4::new(node, 40000),
                seq: 7,
                ack: 8,
                flags,
            };
            gue_tcp_packet(&s, 1)[8..].to_vec()
        };
        assert_eq!(run(&f, &to_node(SYN | ACK)), 256);
        assert_eq!(run(&f, &to_node(RST | ACK)), 256);
        assert_eq!(run(&f, &to_node(ACK)), 0, "plain ACK");
        assert_eq!(run(&f, &to_node(SYN)), 0, "SYN without ACK");
        assert_eq!(run(&f, &to_node(FIN | ACK)), 0);
        let mut other = to_node(SYN | ACK);
        other[19] = 12; // another destination
        assert_eq!(run(&f, &other), 0);
        let mut frag = to_node(SYN | ACK);
        frag[7] = 1; // fragment offset
        assert_eq!(run(&f, &frag), 0);
        let mut udp = to_node(SYN | ACK);
        udp[9] = 17;
        assert_eq!(run(&f, &udp), 0);
    }
}
