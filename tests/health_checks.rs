//! The health checkers against real local servers on 127.0.0.1: HTTP status
//! codes, HTTPS with a self-signed certificate, TCP connect, hard timeouts,
//! and a hung backend that must not delay the checks of others. No root.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nilb::config::{Checker, HealthCheck, Protocol, Scheme, ServiceKey};
use nilb::health::checker::{check_once, http_client, CheckTarget, Checkers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LOCAL: Ipv4Addr = Ipv4Addr::LOCALHOST;
const HUNG: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn http(port: u16, scheme: Scheme, codes: Vec<u16>, timeout_ms: u64) -> HealthCheck {
    HealthCheck {
        checker: Checker::Http {
            scheme,
            uri: "/healthz".into(),
            port,
            codes,
            host: Some("backend.example".into()),
        },
        interval_ms: 1000,
        timeout_ms,
        rise_count: 2,
        fall_count: 2,
    }
}

/// Read one request head from `s`; return it.
async fn read_head<S: AsyncReadExt + Unpin>(s: &mut S) -> String {
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
        if buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    String::from_utf8_lossy(&buf[..got]).into_owned()
}

/// A plain HTTP server answering every request with `status`; returns its
/// port and a channel of the request heads it saw.
async fn http_server(status: u16) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let l = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                let _ = tx.send(head);
                let resp = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (port, rx)
}

#[tokio::test]
async fn http_status_codes_decide() {
    let client = http_client().unwrap();
    let (port, mut heads) = http_server(200).await;
    check_once(&client, LOCAL, &http(port, Scheme::Http, vec![200], 1000))
        .await
        .expect("200 is healthy");
    let head = heads.recv().await.unwrap();
    assert!(head.starts_with("GET /healthz HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("host: backend.example"),
        "{head}"
    );

    let (port, _) = http_server(503).await;
    let err = check_once(
        &client,
        LOCAL,
        &http(port, Scheme::Http, vec![200, 204], 1000),
    )
    .await
    .unwrap_err();
    assert!(err.contains("status 503"), "{err}");
}

#[tokio::test]
async fn https_works_against_a_self_signed_server() {
    let cert = rcgen::generate_simple_self_signed(vec!["backend.example".to_string()]).unwrap();
    let der = cert.cert.der().clone();
    let key =
        tokio_rustls::rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der())
            .unwrap();
    // The server names its crypto provider explicitly: no process-wide
    // default is installed, so the checker's client must bring its own.
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let l = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                let _ = read_head(&mut tls).await;
                let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                let _ = tls.shutdown().await;
            });
        }
    });
    let client = http_client().unwrap();
    check_once(&client, LOCAL, &http(port, Scheme::Https, vec![200], 2000))
        .await
        .expect("https against a self-signed certificate");
}

#[tokio::test]
async fn tcp_connect_and_refusal() {
    let client = http_client().unwrap();
    let l = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let open = l.local_addr().unwrap().port();
    let tcp = |port| HealthCheck {
        checker: Checker::Tcp { port },
        interval_ms: 1000,
        timeout_ms: 500,
        rise_count: 1,
        fall_count: 1,
    };
    check_once(&client, LOCAL, &tcp(open))
        .await
        .expect("listening");
    drop(l);
    let err = check_once(&client, LOCAL, &tcp(open)).await.unwrap_err();
    assert!(err.contains("refused"), "{err}");
}

/// A server that accepts and then says nothing.
async fn hung_server(addr: Ipv4Addr) -> (u16, tokio::task::JoinHandle<()>) {
    let l = TcpListener::bind((addr, 0)).await.unwrap();
    let port = l.local_addr().unwrap().port();
    let h = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (s, _) = l.accept().await.unwrap();
            held.push(s);
        }
    });
    (port, h)
}

#[tokio::test]
async fn timeouts_are_hard() {
    let client = http_client().unwrap();
    let (port, _h) = hung_server(LOCAL).await;
    let started = Instant::now();
    let err = check_once(&client, LOCAL, &http(port, Scheme::Http, vec![200], 300))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(err.contains("timed out"), "{err}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(600),
        "{took:?}"
    );
}

#[test]
fn a_hung_backend_does_not_delay_the_others() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (hung_port, fast_port) = runtime.block_on(async {
        let (hung, h) = hung_server(HUNG).await;
        std::mem::forget(h);
        let (fast, rx) = http_server(200).await;
        std::mem::forget(rx);
        (hung, fast)
    });
    let service = ServiceKey {
        vip: Ipv4Addr::new(10, 0, 0, 100),
        port: 80,
        protocol: Protocol::Tcp,
    };
    let mut hung = http(hung_port, Scheme::Http, vec![200], 900);
    hung.interval_ms = 1000;
    let mut fast = http(fast_port, Scheme::Http, vec![200], 100);
    fast.interval_ms = 100;
    let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
    let mut checkers = Checkers::new(runtime.handle().clone(), tx).unwrap();
    checkers.sync(&[
        CheckTarget {
            service,
            dip: HUNG,
            check: hung,
        },
        CheckTarget {
            service,
            dip: LOCAL,
            check: fast,
        },
    ]);
    assert_eq!(checkers.len(), 2);
    // In 2.5 s the fast target (every 100 ms) must report about 20 times even
    // though the hung one blocks for 900 ms per check.
    let deadline = Instant::now() + Duration::from_millis(2500);
    let (mut fast_ok, mut hung_failed) = (0, 0);
    while Instant::now() < deadline {
        if let Ok(r) = rx.try_recv() {
            assert!(checkers.is_current(&r));
            if r.dip == HUNG {
                assert!(r.result.is_err());
                hung_failed += 1;
            } else {
                assert!(r.result.is_ok(), "{:?}", r.result);
                fast_ok += 1;
            }
        } else {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    println!("in 2.5 s: fast target {fast_ok} successes, hung target {hung_failed} timeouts");
    assert!(fast_ok >= 15, "fast checks were delayed: {fast_ok}");
    assert!((1..=3).contains(&hung_failed), "hung: {hung_failed}");

    checkers.sync(&[]);
    assert!(checkers.is_empty());
    drop(checkers);
    runtime.shutdown_timeout(Duration::from_secs(1));
}
