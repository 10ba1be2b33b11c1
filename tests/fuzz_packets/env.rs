//! The namespace every worker runs in: the fuzz configuration, the data
//! planes loaded from it, and the sockets the TC program looks up.

use std::net::{Ipv4Addr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream, UdpSocket};

use nilb::config::UnknownFlow;

use super::cluster::*;
use super::*;

/// Services: web (TCP VIP:80, six backends reaching every XDP verdict: this
/// node, two neighbours, one without neighbour entry, one behind nt2, one
/// without route), dns (UDP VIP:53), empty (no backend), alt-dns (UDP,
/// second hops after the reload), wild; and on IPv6 VIPs (over the same
/// IPv4 backends): web6 (TCP [VIP6]:80, web's backends), dns6 (UDP
/// [VIP6]:53, second hops after the reload), empty6 ([VIP6B]:443, no
/// backend), wild6 (TCP [VIP6B]:8080).
/// `drained`: the reload that gives buckets a second hop. ICMP "too big"
/// replies at 65535 per second per CPU: a run never meets the limit.
/// `fam`: the cluster network's family; on an IPv6 one every cluster
/// address (balancer, DIPs) is the `cluster::host6` twin of the IPv4 one.
pub fn fuzz_config(unknown_flow: &str, drained: bool, fam: Fam) -> String {
    let (s13, s12) = if drained {
        ("drained", "drained")
    } else {
        ("active", "active")
    };
    let text = format!(
        "version: 1
cluster:
  hash_seed: {HASH_SEED:#x}
  balancers: [10.0.0.11]
  unknown_flow: {unknown_flow}
  icmp_too_big_rate: 65535
defaults:
  rebalance: {{min_interval_ms: 0, max_step_percent: 100, min_bucket_age_ms: 0}}
services:
  - name: web
    vip: 10.0.0.100
    port: 80
    protocol: tcp
    table_size: 256
    backends:
      - {{dip: 10.0.0.11}}
      - {{dip: 10.0.0.12}}
      - {{dip: 10.0.0.13, state: {s13}}}
      - {{dip: 10.0.0.14}}
      - {{dip: 10.1.0.5}}
      - {{dip: 172.16.0.5}}
  - name: dns
    vip: 10.0.0.100
    port: 53
    protocol: udp
    table_size: 64
    backends: [{{dip: 10.0.0.12}}, {{dip: 10.0.0.14}}]
  - name: empty
    vip: 10.0.0.101
    port: 443
    protocol: tcp
    table_size: 16
    backends: []
  - name: alt-dns
    vip: 10.0.0.101
    port: 53
    protocol: udp
    table_size: 32
    backends: [{{dip: 10.0.0.13, state: {s13}}}, {{dip: 10.0.0.12}}]
  - name: wild
    vip: 10.0.0.102
    port: 8080
    protocol: tcp
    table_size: 64
    backends: [{{dip: 10.0.0.11}}, {{dip: 10.0.0.12, state: {s12}}}]
  - name: web6
    vip: \"2001:db8::100\"
    port: 80
    protocol: tcp
    table_size: 256
    backends:
      - {{dip: 10.0.0.11}}
      - {{dip: 10.0.0.12}}
      - {{dip: 10.0.0.13, state: {s13}}}
      - {{dip: 10.0.0.14}}
      - {{dip: 10.1.0.5}}
      - {{dip: 172.16.0.5}}
  - name: dns6
    vip: \"2001:db8::100\"
    port: 53
    protocol: udp
    table_size: 64
    backends: [{{dip: 10.0.0.13, state: {s13}}}, {{dip: 10.0.0.12}}, {{dip: 10.0.0.14}}]
  - name: empty6
    vip: \"2001:db8::101\"
    port: 443
    protocol: tcp
    table_size: 16
    backends: []
  - name: wild6
    vip: \"2001:db8::101\"
    port: 8080
    protocol: tcp
    table_size: 64
    backends: [{{dip: 10.0.0.11}}, {{dip: 10.0.0.12, state: {s12}}}]
"
    );
    if fam == Fam::V4 {
        return text;
    }
    let mut text = text.replace(
        "balancers: [10.0.0.11]",
        &format!("balancers: [\"{}\"]", node6()),
    );
    for a in [NODE, B12, B13, B14, R5, FAR] {
        text = text.replace(&format!("dip: {a}}}"), &format!("dip: \"{}\"}}", host6(a)));
        text = text.replace(&format!("dip: {a},"), &format!("dip: \"{}\",", host6(a)));
    }
    text
}

/// Sockets held open for the whole run (the TC program looks them up).
pub struct Sockets {
    pub _listener: TcpListener,
    pub _wild: TcpListener,
    pub _client: TcpStream,
    pub _server: TcpStream,
    pub _udp53: UdpSocket,
    pub _udpc: UdpSocket,
    /// IPv6: a listener on [VIP6]:80 with an established connection from
    /// [VIP6B]:EST_PORT, an unconnected UDP socket on [VIP6]:53 and one on
    /// [VIP6]:5353 connected to [CLIENT6]:4444.
    pub _listener6: TcpListener,
    pub _client6: TcpStream,
    pub _server6: TcpStream,
    pub _udp53_6: UdpSocket,
    pub _udpc6: UdpSocket,
}

/// A worker's namespace with the data planes of both cluster families
/// loaded (`p4`, `p6`); it derefs to `p4`, the IPv4 cluster network's.
pub struct Env {
    pub ifindex: u32,
    pub p4: Planes,
    pub p6: Planes,
    pub _socks: Sockets,
}

impl std::ops::Deref for Env {
    type Target = Planes;
    fn deref(&self) -> &Planes {
        &self.p4
    }
}

/// The data planes of one cluster network: `a` (unknown_flow: drop)
/// serves XDP and TC, `b` (unknown_flow: local) and `c` (unknown_flow:
/// rst) serve TC.
pub struct Planes {
    /// nt0's, where frames come in.
    pub ifindex: u32,
    pub a: Loaded,
    pub b: Loaded,
    pub c: Loaded,
    pub wa: World,
    pub wb: World,
    pub wc: World,
    /// Counters of `a`, `b` and `c` after the last run.
    pub last: [std::cell::RefCell<Vec<u64>>; 3],
}

/// Give some buckets of web (TCP) and dns (UDP) longer chains than the
/// control plane makes yet, written straight into the data plane: up to
/// three previous owners, with repeats, the first hop among them and
/// backends of other services (every hop has a slot with its address).
/// The move times stay as they are.
pub fn lengthen_chains(l: &mut Loaded, fam: Fam) {
    let live = l.dp.live_tables().expect("live tables");
    let slots: std::collections::BTreeMap<std::net::IpAddr, u32> =
        live.iter().flat_map(|(_, t)| t.slots.clone()).collect();
    let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
    for (key, t) in live {
        let patterns: Vec<Vec<Ipv4Addr>> = match (key.port, key.protocol.number()) {
            (80, IPPROTO_TCP) => vec![
                vec![a("10.0.0.14"), a("10.0.0.12"), NODE],
                vec![a("10.0.0.13"), a("10.0.0.13"), a("10.0.0.12")],
                vec![a("10.1.0.5"), a("172.16.0.5"), a("10.0.0.14")],
                vec![NODE, a("10.0.0.12")],
            ],
            (53, IPPROTO_UDP) if key.vip == VIP || key.vip == VIP6 => vec![
                vec![a("10.0.0.13"), a("10.0.0.12"), NODE],
                vec![a("10.0.0.14"), a("10.0.0.12")],
                vec![NODE, NODE, a("10.0.0.13")],
            ],
            _ => continue,
        };
        let mut chains = t.to_chains();
        let mut changed = Vec::new();
        for (i, c) in chains.chains.iter_mut().enumerate() {
            // Every other bucket keeps what the control plane made.
            if i % 2 == 0 || c.0.is_none() {
                continue;
            }
            let p = &patterns[(i / 2) % patterns.len()];
            // A pattern naming the first hop first shows that it is skipped.
            c.1 = p.iter().map(|&h| fam.host(h)).collect();
            changed.push(i as u32);
        }
        l.dp.install_chains(
            &key,
            t.service_index,
            &chains,
            // The service's own slot of a backend, else another service's.
            &|d| t.slots.get(&d).copied().unwrap_or(slots[&d]),
            Some(&changed),
        )
        .expect("installing longer chains");
    }
}

pub fn setup() -> Env {
    let net = TestNet::new();
    ip("link add nt2 type veth peer name nt3");
    ip("addr add 10.1.0.1/24 dev nt2");
    ip("link set nt2 up");
    ip("link set nt3 up");
    ip("neigh replace 10.1.0.5 lladdr 02:00:00:00:01:05 dev nt2 nud permanent");
    let nt2_mac = mac_from_ip_link("nt2");
    let nt2 = (nt2_mac, nix::net::if_::if_nametoindex("nt2").unwrap());
    let nt0 = (net.mac, net.ifindex);

    // The IPv6 cluster network: the node and its neighbours in
    // cluster::PREFIX6 on nt0 and nt2, as in IPv4 (10.0.0.14: no
    // neighbour entry; 172.16.0.5: no route); forwarding on for the FIB.
    ip(&format!("-6 addr add {}/120 dev nt0 nodad", node6()));
    ip(&format!(
        "-6 addr add {}/120 dev nt2 nodad",
        host6(Ipv4Addr::new(10, 1, 0, 1))
    ));
    for (a, dev, mac) in [
        (B12, "nt0", MAC12),
        (B13, "nt0", MAC13),
        (R5, "nt2", MAC_R5),
    ] {
        let m: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
        ip(&format!(
            "-6 neigh replace {} lladdr {} dev {dev} nud permanent",
            host6(a),
            m.join(":")
        ));
    }
    for conf in ["all", "nt0", "nt2"] {
        std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/forwarding"), "1")
            .expect("IPv6 forwarding");
    }
    let planes = |fam: Fam| {
        let node = fam.host(NODE);
        let one = |uf: &str| {
            let mut l = load(&fuzz_config(uf, false, fam), node);
            l.reload(&fuzz_config(uf, true, fam), node);
            lengthen_chains(&mut l, fam);
            l
        };
        let (a, b, c) = (one("drop"), one("local"), one("rst"));
        let wa = World::new(&a, nt0, nt2, UnknownFlow::Drop);
        let wb = World::new(&b, nt0, nt2, UnknownFlow::Local);
        let wc = World::new(&c, nt0, nt2, UnknownFlow::Rst);
        assert_eq!(wa.fam, fam);
        // The reload must have produced buckets with a second hop, and
        // lengthen_chains buckets with longer chains in a TCP and a UDP
        // service.
        for (key, n) in [
            ((VIP.into(), 80, IPPROTO_TCP), 1),
            ((VIP.into(), 80, IPPROTO_TCP), 3),
            ((VIP.into(), 53, IPPROTO_UDP), 3),
            ((VIP6.into(), 80, IPPROTO_TCP), 1),
            ((VIP6.into(), 80, IPPROTO_TCP), 3),
            ((VIP6.into(), 53, IPPROTO_UDP), 3),
        ] {
            assert!(
                wa.services[&key].buckets.iter().any(|b| b.1.len() == n),
                "{key:?}: no bucket with {n} previous owners ({fam:?} cluster)"
            );
        }
        let last = [
            std::cell::RefCell::new(a.dp.counters().unwrap()),
            std::cell::RefCell::new(b.dp.counters().unwrap()),
            std::cell::RefCell::new(c.dp.counters().unwrap()),
        ];
        Planes {
            ifindex: net.ifindex,
            a,
            b,
            c,
            wa,
            wb,
            wc,
            last,
        }
    };
    let (p4, p6) = (planes(Fam::V4), planes(Fam::V6));

    let listener = TcpListener::bind(SocketAddrV4::new(VIP, 80)).unwrap();
    let wild = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080)).unwrap();
    let client = connect_from(NODE, EST_PORT, VIP, 80);
    let (server, _) = listener.accept().unwrap();
    let udp53 = UdpSocket::bind(SocketAddrV4::new(VIP, 53)).unwrap();
    let udpc = UdpSocket::bind(SocketAddrV4::new(VIP, UDP_CONN_PORT)).unwrap();
    udpc.connect(SocketAddrV4::new(B12, UDP_PEER_PORT)).unwrap();
    // IPv6: the VIPs on lo, the clients' prefix on nt0 (a route for the
    // connected UDP socket).
    ip("-6 addr add 2001:db8::100/128 dev lo nodad");
    ip("-6 addr add 2001:db8::101/128 dev lo nodad");
    ip("-6 addr add 2001:db8:1::11/64 dev nt0 nodad");
    let v6 = |a, p| SocketAddrV6::new(a, p, 0, 0);
    let listener6 = TcpListener::bind(v6(VIP6, 80)).unwrap();
    let client6 = {
        let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
        s.bind(&v6(VIP6B, EST_PORT).into()).unwrap();
        s.connect(&v6(VIP6, 80).into()).unwrap();
        TcpStream::from(s)
    };
    let (server6, _) = listener6.accept().unwrap();
    let udp53_6 = UdpSocket::bind(v6(VIP6, 53)).unwrap();
    let udpc6 = UdpSocket::bind(v6(VIP6, UDP_CONN_PORT)).unwrap();
    udpc6.connect(v6(CLIENT6, UDP_PEER_PORT)).unwrap();
    // (The counters after the sockets' own packets: none reach TC or XDP
    // test runs, but the snapshot is taken last all the same.)
    for p in [&p4, &p6] {
        for (l, last) in [&p.a, &p.b, &p.c].into_iter().zip(&p.last) {
            *last.borrow_mut() = l.dp.counters().unwrap();
        }
    }
    Env {
        ifindex: net.ifindex,
        p4,
        p6,
        _socks: Sockets {
            _listener: listener,
            _wild: wild,
            _client: client,
            _server: server,
            _udp53: udp53,
            _udpc: udpc,
            _listener6: listener6,
            _client6: client6,
            _server6: server6,
            _udp53_6: udp53_6,
            _udpc6: udpc6,
        },
    }
}
