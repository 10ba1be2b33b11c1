//! Minimal HTTP server and short-connection load generator for nilb's end to
//! end benchmark (part 3 of BENCHMARKS.md), run by `scripts/bench.sh` in the
//! harness topology.
//!
//!   bench_http serve --port 80 [--threads 2] [--name node2]
//!       accept, read the request head, answer 200 with the name, close
//!       (the server closes first, so TIME_WAIT stays on the server side).
//!   bench_http load --addr IP:PORT [--seconds 4] [--threads 8]
//!       every thread: connect, GET /, read the reply to EOF, close, again,
//!       until the time is up; prints one JSON line with requests per second.
//!
//! Every socket operation has a 2 s timeout.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

mod bench_common;
use bench_common::*;

const TIMEOUT: Duration = Duration::from_secs(2);

fn serve() -> Result<()> {
    let port: u16 = arg("--port", "80").parse()?;
    let threads: usize = arg("--threads", "2").parse()?;
    let name = arg("--name", "backend");
    let l = TcpListener::bind(("0.0.0.0", port)).with_context(|| format!("binding port {port}"))?;
    eprintln!("listening on port {port}");
    let body = format!("{name}\n");
    let reply = Arc::new(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\nX-Backend: {name}\r\n\r\n{body}",
        body.len()
    ));
    let mut handles = Vec::new();
    for _ in 0..threads {
        let l = l.try_clone()?;
        let reply = reply.clone();
        handles.push(std::thread::spawn(move || loop {
            let Ok((mut s, _)) = l.accept() else {
                continue;
            };
            let _ = s.set_read_timeout(Some(TIMEOUT));
            let _ = s.set_write_timeout(Some(TIMEOUT));
            let mut buf = [0u8; 2048];
            let mut got = 0;
            while got < buf.len() {
                match s.read(&mut buf[got..]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got += n,
                }
                if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                    let _ = s.write_all(reply.as_bytes());
                    break;
                }
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    Ok(())
}

fn one(addr: &SocketAddr) -> Result<(), String> {
    let mut s =
        TcpStream::connect_timeout(addr, TIMEOUT).map_err(|e| format!("connect: {}", e.kind()))?;
    s.set_read_timeout(Some(TIMEOUT)).ok();
    s.set_write_timeout(Some(TIMEOUT)).ok();
    s.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {}", e.kind()))?;
    let mut reply = Vec::with_capacity(256);
    s.read_to_end(&mut reply)
        .map_err(|e| format!("read: {}", e.kind()))?;
    if !reply.starts_with(b"HTTP/1.1 200") {
        return Err("bad reply".into());
    }
    Ok(())
}

fn load() -> Result<()> {
    let addr: SocketAddr = arg("--addr", "").parse().context("--addr IP:PORT")?;
    let secs: f64 = arg("--seconds", "4").parse()?;
    let threads: usize = arg("--threads", "8").parse()?;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..threads {
        let stop = stop.clone();
        handles.push(std::thread::spawn(move || {
            let mut ok = 0u64;
            let mut errors: BTreeMap<String, u64> = BTreeMap::new();
            while !stop.load(Ordering::Relaxed) {
                match one(&addr) {
                    Ok(()) => ok += 1,
                    Err(e) => *errors.entry(e).or_insert(0) += 1,
                }
            }
            (ok, errors)
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let mut ok = 0;
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for h in handles {
        let (o, e) = h
            .join()
            .map_err(|_| anyhow::anyhow!("load thread panicked"))?;
        ok += o;
        for (k, v) in e {
            *errors.entry(k).or_insert(0) += v;
        }
    }
    let el = start.elapsed().as_secs_f64();
    // CPU of this process (all threads), including the kernel work (TCP,
    // softirq) done in its context: with the server's, the cost per request.
    let ru = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)?;
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    let cpu = tv(ru.user_time()) + tv(ru.system_time());
    let nerr: u64 = errors.values().sum();
    let kinds: Vec<String> = errors
        .iter()
        .map(|(k, v)| format!("\"{k}\": {v}"))
        .collect();
    println!(
        "{{\"addr\": \"{addr}\", \"ok\": {ok}, \"errors\": {nerr}, \"error_kinds\": {{{}}}, \"seconds\": {el:.3}, \"rps\": {:.1}, \"client_cpu_s\": {cpu:.3}}}",
        kinds.join(", "),
        ok as f64 / el
    );
    Ok(())
}

fn main() -> Result<()> {
    match std::env::args().nth(1).as_deref() {
        Some("serve") => serve(),
        Some("load") => load(),
        _ => bail!("usage: bench_http serve|load ... (see the source)"),
    }
}
