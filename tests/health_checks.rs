//! The health checkers against real local servers on 127.0.0.1: HTTP status
//! codes, HTTPS with a self-signed certificate, TCP connect, hard timeouts,
//! and a hung backend that must not delay the checks of others. No root.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nilb::config::{Checker, HealthCheck, Protocol, Scheme, ServiceKey, TlsOptions};
use nilb::health::checker::{check_once, CheckTarget, Checkers};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const HUNG: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

fn http(port: u16, scheme: Scheme, codes: Vec<u16>, timeout_ms: u64) -> HealthCheck {
    HealthCheck {
        checker: Checker::Http {
            scheme,
            uri: "/healthz".into(),
            port,
            codes,
            host: Some("backend.example".into()),
            tls: TlsOptions::default(),
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
    http_server_at(LOCAL, status).await
}

/// [`http_server`] on `addr`.
async fn http_server_at(
    addr: IpAddr,
    status: u16,
) -> (u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let l = TcpListener::bind((addr, 0)).await.unwrap();
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
    let (port, mut heads) = http_server(200).await;
    check_once(LOCAL, &http(port, Scheme::Http, vec![200], 1000))
        .await
        .expect("200 is healthy");
    let head = heads.recv().await.unwrap();
    assert!(head.starts_with("GET /healthz HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("host: backend.example"),
        "{head}"
    );

    let (port, _) = http_server(503).await;
    let err = check_once(LOCAL, &http(port, Scheme::Http, vec![200, 204], 1000))
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
    check_once(LOCAL, &http(port, Scheme::Https, vec![200], 2000))
        .await
        .expect("https against a self-signed certificate");
}

#[tokio::test]
async fn tcp_connect_and_refusal() {
    let l = TcpListener::bind((LOCAL, 0)).await.unwrap();
    let open = l.local_addr().unwrap().port();
    let tcp = |port| HealthCheck {
        checker: Checker::Tcp { port },
        interval_ms: 1000,
        timeout_ms: 500,
        rise_count: 1,
        fall_count: 1,
    };
    check_once(LOCAL, &tcp(open)).await.expect("listening");
    drop(l);
    let err = check_once(LOCAL, &tcp(open)).await.unwrap_err();
    assert!(err.contains("refused"), "{err}");
}

/// IPv6 DIPs (an IPv6 cluster network): HTTP to `http://[dip]:port/...`
/// with the Host header in brackets, and a TCP connect.
#[tokio::test]
async fn checks_reach_ipv6_dips() {
    const LOCAL6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let mut check = http(0, Scheme::Http, vec![200], 1000);
    let (port, mut heads) = http_server_at(LOCAL6, 200).await;
    if let Checker::Http { port: p, host, .. } = &mut check.checker {
        *p = port;
        *host = None;
    }
    check_once(LOCAL6, &check).await.expect("200 over IPv6");
    let head = heads.recv().await.unwrap().to_ascii_lowercase();
    assert!(head.contains(&format!("host: [::1]:{port}")), "{head}");
    let (port, _) = http_server_at(LOCAL6, 503).await;
    if let Checker::Http { port: p, .. } = &mut check.checker {
        *p = port;
    }
    let err = check_once(LOCAL6, &check).await.unwrap_err();
    assert!(err.contains(&format!("http://[::1]:{port}/")), "{err}");

    let l = TcpListener::bind((LOCAL6, 0)).await.unwrap();
    let open = l.local_addr().unwrap().port();
    let tcp = HealthCheck {
        checker: Checker::Tcp { port: open },
        interval_ms: 1000,
        timeout_ms: 500,
        rise_count: 1,
        fall_count: 1,
    };
    check_once(LOCAL6, &tcp).await.expect("listening on ::1");
    drop(l);
    let err = check_once(LOCAL6, &tcp).await.unwrap_err();
    assert!(err.contains(&format!("[::1]:{open}")), "{err}");
    assert_eq!(
        nilb::health::checker::default_host(LOCAL6, 80, Scheme::Http),
        "[::1]"
    );
}

/// A server that accepts and then says nothing.
async fn hung_server(addr: IpAddr) -> (u16, tokio::task::JoinHandle<()>) {
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
    let (port, _h) = hung_server(LOCAL).await;
    let started = Instant::now();
    let err = check_once(LOCAL, &http(port, Scheme::Http, vec![200], 300))
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
        vip: std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
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

/// A CA and a server certificate for `names` signed by it: (CA PEM, server
/// certificate DER, server key DER).
fn ca_and_server(
    names: &[&str],
) -> (
    String,
    tokio_rustls::rustls::pki_types::CertificateDer<'static>,
    tokio_rustls::rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params =
        rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    (
        ca.pem(),
        cert.der().clone(),
        tokio_rustls::rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
}

/// Serves its certificate only to clients that send `name` as SNI (like a
/// virtual-host TLS front end with no default certificate) and records the
/// server names it saw.
#[derive(Debug)]
struct RequireSni {
    name: String,
    key: Arc<tokio_rustls::rustls::sign::CertifiedKey>,
    seen: std::sync::Mutex<Vec<Option<String>>>,
}

impl tokio_rustls::rustls::server::ResolvesServerCert for RequireSni {
    fn resolve(
        &self,
        hello: tokio_rustls::rustls::server::ClientHello<'_>,
    ) -> Option<Arc<tokio_rustls::rustls::sign::CertifiedKey>> {
        let sni = hello.server_name().map(str::to_string);
        self.seen.lock().unwrap().push(sni.clone());
        (sni.as_deref() == Some(self.name.as_str())).then(|| self.key.clone())
    }
}

/// An HTTPS server on 127.0.0.1 that requires SNI `web.example` and
/// answers 200; returns its port, the CA PEM and the resolver (for the
/// names seen).
async fn sni_server() -> (u16, String, Arc<RequireSni>) {
    use tokio_rustls::rustls;
    let (ca_pem, der, key) = ca_and_server(&["web.example"]);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let signing = provider.key_provider.load_private_key(key).unwrap();
    let resolver = Arc::new(RequireSni {
        name: "web.example".into(),
        key: Arc::new(rustls::sign::CertifiedKey::new(vec![der], signing)),
        seen: Default::default(),
    });
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(resolver.clone());
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
    (port, ca_pem, resolver)
}

fn https(port: u16, host: Option<&str>, tls: TlsOptions) -> HealthCheck {
    HealthCheck {
        checker: Checker::Http {
            scheme: Scheme::Https,
            uri: "/healthz".into(),
            port,
            codes: vec![200],
            host: host.map(str::to_string),
            tls,
        },
        interval_ms: 1000,
        timeout_ms: 2000,
        rise_count: 1,
        fall_count: 1,
    }
}

/// The server name a check sends: `sni`, else the host name of `host`
/// (what `nilb check` fills in from the YAML; see the config tests).
fn sni(name: &str) -> TlsOptions {
    TlsOptions {
        sni: Some(name.into()),
        ca_file: None,
    }
}

#[tokio::test]
async fn https_sends_the_host_name_as_sni() {
    let (port, _, seen) = sni_server().await;
    check_once(LOCAL, &https(port, Some("web.example"), sni("web.example")))
        .await
        .expect("a server that requires SNI accepts the check's host name");
    let err = check_once(LOCAL, &https(port, None, TlsOptions::default()))
        .await
        .expect_err("without a name there is no SNI and the handshake fails");
    assert!(err.contains("TLS handshake"), "{err}");
    let seen = seen.seen.lock().unwrap().clone();
    assert_eq!(seen, vec![Some("web.example".to_string()), None]);
}

#[tokio::test]
async fn https_verifies_against_a_ca_file() {
    let (port, ca_pem, _) = sni_server().await;
    let dir = std::env::temp_dir().join(format!("nilb-ca-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("ca.pem");
    std::fs::write(&good, &ca_pem).unwrap();
    let (other_ca, _, _) = ca_and_server(&["web.example"]);
    let other = dir.join("other-ca.pem");
    std::fs::write(&other, other_ca).unwrap();
    let with = |name: &str, ca: &std::path::Path| TlsOptions {
        sni: Some(name.into()),
        ca_file: Some(ca.to_path_buf()),
    };
    check_once(
        LOCAL,
        &https(port, Some("web.example"), with("web.example", &good)),
    )
    .await
    .expect("signed by the CA in ca_file, for the name sent");
    let err = check_once(
        LOCAL,
        &https(port, Some("web.example"), with("web.example", &other)),
    )
    .await
    .expect_err("signed by another CA");
    assert!(err.contains("TLS handshake"), "{err}");
    assert!(err.contains("invalid peer certificate"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn default_host_header_is_exactly_as_documented() {
    // docs/config.md: Host = the DIP, with :port unless the port is the
    // scheme's default.
    let (port, mut heads) = http_server(200).await;
    let mut check = http(port, Scheme::Http, vec![200], 1000);
    if let Checker::Http { host, .. } = &mut check.checker {
        *host = None;
    }
    check_once(LOCAL, &check).await.unwrap();
    let head = heads.recv().await.unwrap();
    let host_line = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("host:"))
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert_eq!(host_line, format!("host: 127.0.0.1:{port}"));
    assert_eq!(
        nilb::health::checker::default_host(LOCAL, 80, Scheme::Http),
        "127.0.0.1"
    );
    assert_eq!(
        nilb::health::checker::default_host(LOCAL, 443, Scheme::Https),
        "127.0.0.1"
    );
}
