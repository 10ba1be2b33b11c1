//! CPU cost of nilb's health checkers: N targets checked every second, for
//! TCP-connect and HTTP checks, measured with getrusage over a fixed window.
//!
//! Runs in a private network namespace it creates for itself (unshare): the
//! targets are N distinct loopback addresses 127.1.x.y on one port, served by
//! a minimal HTTP responder in a child process (so its CPU is not counted).
//! The checkers are nilb's own (`nilb::health::checker::Checkers`) on a tokio
//! runtime with `--threads` workers, as in `nilb run --check-threads`.
//!
//!   cargo run --release --example health_bench -- --targets 1000,10000 --seconds 10
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
        serve();
    }
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
        vip: Ipv4Addr::new(10, 0, 0, 100),
        port: PORT,
        protocol: Protocol::Tcp,
    };
    for &n in &targets {
        for kind in ["tcp", "http"] {
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
                    dip: addr(i),
                    check: check.clone(),
                })
                .collect();
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .enable_all()
                .build()
                .unwrap();
            let (tx, mut rx) = tokio::sync::mpsc::channel(65536);
            let mut checkers = Checkers::new(rt.handle().clone(), tx).unwrap();
            checkers.sync(&list);
            // Drain results on this thread; count after the warm-up.
            let warm = Instant::now() + Duration::from_secs(2);
            let end = warm + Duration::from_secs(seconds);
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut cpu0 = None;
            let mut sample_error = None;
            while Instant::now() < end {
                match rx.try_recv() {
                    Ok(r) => {
                        if Instant::now() >= warm {
                            if cpu0.is_none() {
                                cpu0 = Some(cpu_seconds());
                            }
                            match r.result {
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
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
    let _ = responder.kill();
    let _ = responder.wait();
}
