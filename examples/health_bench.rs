//! CPU cost of nilb's health checkers: N targets checked every second, for
//! TCP-connect, HTTP and encapsulated checks (`encap_check`: a GUE packet
//! with a TCP SYN to the VIP, the SYN-ACK caught by a packet socket, a RST
//! after), measured with getrusage over a fixed window.
//!
//! Runs in a private network namespace it creates for itself (unshare): the
//! targets are N distinct loopback addresses 127.1.x.y on one port, served by
//! a minimal HTTP responder in a child process (so its CPU is not counted).
//! For encapsulated checks the child also plays the backends' TC program and
//! stack: it receives the GUE datagrams on UDP 19523 and answers each SYN with
//! a SYN-ACK from the VIP to the checker's node address (127.0.0.1) through a
//! raw socket.
//! The checkers are nilb's own (`nilb::health::checker::Checkers`) on a tokio
//! runtime with `--threads` workers, as in `nilb run --check-threads`.
//!
//!   cargo run --release --example health_bench -- --targets 1000,10000 --seconds 10 [--kinds tcp,http,encap]
//!
//! Needs root (unshare, addresses on lo). Prints one line per case: checks
//! per second achieved, failures, CPU of the checker process as percent of
//! one core, and its peak RSS.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nilb::config::{Checker, HealthCheck, Protocol, Scheme, ServiceKey};
use nilb::health::checker::{CheckTarget, Checkers};

mod bench_common;
use bench_common::*;

const PORT: u16 = 8099;

/// The responder: accept, read the request head, answer 200, close.
fn serve() -> ! {
    let l = TcpListener::bind(("0.0.0.0", PORT)).expect("bind responder");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        l.set_nonblocking(true).unwrap();
        let l = tokio::net::TcpListener::from_std(l).unwrap();
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let mut got = 0;
                while got < buf.len() {
                    match s.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got += n,
                    }
                    if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    unreachable!()
}

/// The GUE port the encapsulated checks send to.
const GUE_PORT: u16 = 19523;
/// The checker's node address.
const NODE: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// The GUE side of the responder: answer each encapsulated SYN with a
/// SYN-ACK from its destination (the VIP) to its source, as a backend's
/// stack would after its TC program decapsulated it.
fn serve_gue() {
    use nilb::health::encap::{gue_tcp_packet, parse_reply, Segment};
    use socket2::{Domain, Protocol as P, SockAddr, Socket, Type};
    let udp = std::net::UdpSocket::bind(("0.0.0.0", GUE_PORT)).expect("bind GUE responder");
    // IPPROTO_RAW: the packets carry their own IP header.
    let raw = Socket::new(Domain::IPV4, Type::RAW, Some(P::from(255))).expect("raw socket");
    let mut buf = [0u8; 2048];
    loop {
        let Ok(n) = udp.recv(&mut buf) else { continue };
        if n < 8 + 40 {
            continue;
        }
        let Some(syn) = parse_reply(&buf[8..n]) else {
            continue;
        };
        if syn.flags != 0x02 {
            continue; // the checker's RST
        }
        let answer = Segment {
            src: syn.dst,
            dst: syn.src,
            seq: 7,
            ack: syn.seq.wrapping_add(1),
            flags: 0x12,
        };
        let pkt = gue_tcp_packet(&answer, 1);
        let to = SockAddr::from(std::net::SocketAddrV4::new(*syn.src.ip(), 0));
        let _ = raw.send_to(&pkt[8..], &to);
    }
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "{cmd} failed");
}

fn cpu_seconds() -> f64 {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
    t(u.user_time()) + t(u.system_time())
}

fn max_rss_mib() -> f64 {
    let u = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
    u.max_rss() as f64 / 1024.0
}

fn addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 1, (i / 250) as u8, (i % 250 + 1) as u8)
}

fn main() {
    if std::env::args().any(|a| a == "--serve") {
        std::thread::spawn(serve_gue);
        serve();
    }
    let kinds: Vec<String> = arg("--kinds", "tcp,http,encap")
        .split(',')
        .map(str::to_string)
        .collect();
    let targets: Vec<usize> = arg("--targets", "1000,10000")
        .split(',')
        .map(|s| s.parse().expect("--targets N[,N]"))
        .collect();
    let seconds: u64 = arg("--seconds", "10").parse().unwrap();
    let threads: usize = arg("--threads", "1").parse().unwrap();
    let interval_ms: u64 = arg("--interval-ms", "1000").parse().unwrap();

    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare: run as root");
    sh("ip link set lo up");
    let _ = nix::sys::resource::setrlimit(
        nix::sys::resource::Resource::RLIMIT_NOFILE,
        1 << 20,
        1 << 20,
    );
    let mut responder: Child = Command::new(std::env::current_exe().unwrap())
        .arg("--serve")
        .spawn()
        .expect("responder");
    // Give it time to bind.
    for _ in 0..50 {
        if std::net::TcpStream::connect(("127.0.0.1", PORT)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    {
        let mut s = std::net::TcpStream::connect(("127.1.0.1", PORT)).expect("responder up");
        s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut r = String::new();
        let _ = s.read_to_string(&mut r);
        assert!(r.starts_with("HTTP/1.1 200"), "responder: {r}");
    }

    println!(
        "health checker CPU, {} cores, interval {interval_ms} ms, {threads} checker thread(s), {seconds} s per case (after 2 s warm-up)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    println!(
        "{:<6} {:>8} {:>12} {:>10} {:>12} {:>10}",
        "check", "targets", "checks/s", "failures", "CPU % core", "RSS MiB"
    );
    let service = ServiceKey {
        vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
        port: PORT,
        protocol: Protocol::Tcp,
    };
    for &n in &targets {
        for kind in kinds.iter().map(String::as_str) {
            let checker = match kind {
                "tcp" => Checker::Tcp { port: PORT },
                _ => Checker::Http {
                    scheme: Scheme::Http,
                    uri: "/healthz".into(),
                    port: PORT,
                    codes: vec![200],
                    host: None,
                    tls: Default::default(),
                },
            };
            let check = HealthCheck {
                checker,
                interval_ms,
                timeout_ms: interval_ms.min(1000),
                rise_count: 2,
                fall_count: 2,
            };
            let list: Vec<CheckTarget> = (0..n)
                .map(|i| CheckTarget {
                    service,
                    dip: addr(i).into(),
                    check: check.clone(),
                })
                .collect();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .unwrap();
            let (tx, mut rx) = tokio::sync::mpsc::channel(65536);
            let (etx, mut erx) = tokio::sync::mpsc::channel(65536);
            let mut checkers = Checkers::new(rt.handle().clone(), tx).unwrap();
            let mut encap = None;
            if kind == "encap" {
                let mut e = nilb::health::encap::EncapCheckers::new(
                    rt.handle().clone(),
                    NODE,
                    GUE_PORT,
                    1,
                    etx,
                )
                .expect("encapsulated checkers (root: packet socket)");
                e.sync(&list);
                encap = Some(e);
            } else {
                checkers.sync(&list);
            }
            // Drain results on this thread; count after the warm-up.
            let warm = Instant::now() + Duration::from_secs(2);
            let end = warm + Duration::from_secs(seconds);
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut cpu0 = None;
            let mut sample_error = None;
            while Instant::now() < end {
                let next = rx
                    .try_recv()
                    .map(|r| r.result)
                    .or_else(|_| erx.try_recv().map(|r| r.result));
                match next {
                    Ok(result) => {
                        if Instant::now() >= warm {
                            if cpu0.is_none() {
                                cpu0 = Some(cpu_seconds());
                            }
                            match result {
                                Ok(()) => ok += 1,
                                Err(e) => {
                                    failed += 1;
                                    sample_error.get_or_insert(e);
                                }
                            }
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
            let cpu = cpu_seconds() - cpu0.unwrap_or_else(cpu_seconds);
            println!(
                "{:<6} {:>8} {:>12.0} {:>10} {:>12.1} {:>10.1}",
                kind,
                n,
                (ok + failed) as f64 / seconds as f64,
                failed,
                100.0 * cpu / seconds as f64,
                max_rss_mib()
            );
            if let Some(e) = sample_error {
                println!("       e.g. {e}");
            }
            drop(checkers);
            drop(encap);
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
    let _ = responder.kill();
    let _ = responder.wait();
}
