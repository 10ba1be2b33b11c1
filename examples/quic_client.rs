//! QUIC download client for the example server (examples/quic_server.rs)
//! and the harness scenario `quic`: runs downloads, can rebind its local UDP
//! socket mid-transfer (a new port, and optionally a new address: what a NAT
//! rebinding or a phone moving networks looks like to the server), and
//! reports which server answered each download and whether it completed.
//!
//! ```text
//! quic_client --server VIP:PORT [--count N] [--concurrency C] [--bytes B]
//!     [--rate-kbit R] [--rebind-after BYTES [--rebinds K] [--rebind-addr IP]]
//!     [--sport-base P] [--timeout-s T] [--idle-timeout-ms MS]
//! ```
//!
//! Each download has its own endpoint and socket (download i binds local
//! port sport-base + i, or any port), opens one stream, sends
//! `GET <bytes> <kbit/s>\n`, reads the server's name line and the bytes.
//! With --rebind-after it rebinds after that many bytes (and again every as
//! many, --rebinds times in all). Prints one JSON document:
//! `{"count","complete","failed","rebinds","by_server":{name:n},
//! "errors":{text:n},"results":[{"i","server","bytes","complete",
//! "rebinds","local":[addr...],"seconds","error"}]}`. Exit status 0 even
//! when downloads fail (the caller judges); 2 on bad arguments.
//!
//! The server's certificate is not verified (it is a fresh self-signed one
//! per run): this client is a test tool.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use quinn::crypto::rustls::QuicClientConfig;
use quinn::rustls;
use quinn::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use serde::Serialize;

/// Command line (see the module documentation).
#[derive(Parser, Debug, Clone)]
#[command(about = "QUIC download client with mid-transfer rebinding")]
struct Args {
    /// The server (the VIP and the service's port).
    #[arg(long)]
    server: SocketAddr,
    /// Downloads in all.
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Downloads at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Bytes per download.
    #[arg(long, default_value_t = 1_000_000)]
    bytes: u64,
    /// Rate the server paces each download to, kbit/s (0: unpaced).
    #[arg(long, default_value_t = 0)]
    rate_kbit: u64,
    /// Rebind the local socket after this many bytes (and every as many).
    #[arg(long)]
    rebind_after: Option<u64>,
    /// How many rebinds per download (with --rebind-after).
    #[arg(long, default_value_t = 1)]
    rebinds: u32,
    /// Local address of the new socket (default: any, so the same address
    /// with a new port).
    #[arg(long)]
    rebind_addr: Option<IpAddr>,
    /// Download i binds local port sport-base + i (0: any port).
    #[arg(long, default_value_t = 0)]
    sport_base: u16,
    /// A download that has not completed after this long fails.
    #[arg(long, default_value_t = 30.0)]
    timeout_s: f64,
    /// QUIC idle timeout, ms.
    #[arg(long, default_value_t = 5000)]
    idle_timeout_ms: u64,
}

/// One download's outcome.
#[derive(Serialize, Debug, Default)]
struct Outcome {
    i: usize,
    server: Option<String>,
    bytes: u64,
    complete: bool,
    rebinds: u32,
    local: Vec<String>,
    seconds: f64,
    error: Option<String>,
}

/// Accepts any server certificate (test tool; see the module docs).
#[derive(Debug)]
struct AnyServerCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn client_config(idle_timeout_ms: u64) -> Result<quinn::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServerCert(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"nilb-dl".to_vec()];
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls)?));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_millis(idle_timeout_ms).try_into()?));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// A UDP socket on (addr or any, port).
fn socket(addr: Option<IpAddr>, port: u16) -> Result<UdpSocket> {
    let ip = addr.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    UdpSocket::bind(SocketAddr::new(ip, port)).with_context(|| format!("binding {ip}:{port}"))
}

/// Run download `i` to completion or error, filling `out` as it goes.
async fn download(
    i: usize,
    a: &Args,
    config: quinn::ClientConfig,
    out: &mut Outcome,
) -> Result<()> {
    let port = if a.sport_base == 0 {
        0
    } else {
        a.sport_base.wrapping_add(i as u16)
    };
    let sock = socket(None, port)?;
    out.local.push(sock.local_addr()?.to_string());
    let mut endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        sock,
        Arc::new(quinn::TokioRuntime),
    )?;
    endpoint.set_default_client_config(config);
    let result = async {
        let conn = endpoint.connect(a.server, "nilb-quic.test")?.await?;
        let (mut send, mut recv) = conn.open_bi().await?;
        send.write_all(format!("GET {} {}\n", a.bytes, a.rate_kbit).as_bytes())
            .await?;
        send.finish()?;
        // The server's name line.
        let mut name = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            recv.read_exact(&mut byte)
                .await
                .context("reading the name line")?;
            if byte[0] == b'\n' {
                break;
            }
            name.push(byte[0]);
            if name.len() > 256 {
                bail!("no name line");
            }
        }
        out.server = Some(String::from_utf8_lossy(&name).into_owned());
        let mut buf = vec![0u8; 64 * 1024];
        let mut next_rebind = a.rebind_after;
        while let Some(n) = recv.read(&mut buf).await? {
            out.bytes += n as u64;
            if let Some(at) = next_rebind {
                if out.bytes >= at && out.rebinds < a.rebinds {
                    let s = socket(a.rebind_addr, 0)?;
                    out.local.push(s.local_addr()?.to_string());
                    endpoint.rebind(s)?;
                    out.rebinds += 1;
                    next_rebind = Some(at + a.rebind_after.expect("set"));
                }
            }
        }
        out.complete = out.bytes == a.bytes;
        if !out.complete {
            bail!("stream ended after {} of {} bytes", out.bytes, a.bytes);
        }
        conn.close(0u32.into(), b"done");
        Ok::<(), anyhow::Error>(())
    }
    .await;
    // Let the close reach the server (bounded).
    let _ = tokio::time::timeout(Duration::from_millis(500), endpoint.wait_idle()).await;
    result
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.count == 0 || args.concurrency == 0 {
        eprintln!("--count and --concurrency must be at least 1");
        std::process::exit(2);
    }
    let config = client_config(args.idle_timeout_ms)?;
    let limit = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    let mut tasks = Vec::new();
    for i in 0..args.count {
        let (a, config, limit) = (args.clone(), config.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await.expect("never closed");
            let start = Instant::now();
            let mut out = Outcome {
                i,
                ..Default::default()
            };
            let timeout = Duration::from_secs_f64(a.timeout_s);
            match tokio::time::timeout(timeout, download(i, &a, config, &mut out)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => out.error = Some(format!("{e:#}")),
                Err(_) => out.error = Some(format!("timed out after {} s", a.timeout_s)),
            }
            out.complete &= out.error.is_none();
            out.seconds = start.elapsed().as_secs_f64();
            out
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await?);
    }
    let mut by_server: BTreeMap<String, usize> = BTreeMap::new();
    let mut errors: BTreeMap<String, usize> = BTreeMap::new();
    for r in &results {
        if r.complete {
            *by_server
                .entry(r.server.clone().unwrap_or_default())
                .or_default() += 1;
        }
        if let Some(e) = &r.error {
            *errors.entry(e.clone()).or_default() += 1;
        }
    }
    let complete = results.iter().filter(|r| r.complete).count();
    println!(
        "{}",
        serde_json::json!({
            "count": results.len(),
            "complete": complete,
            "failed": results.len() - complete,
            "rebinds": results.iter().map(|r| r.rebinds as u64).sum::<u64>(),
            "by_server": by_server,
            "errors": errors,
            "results": results,
        })
    );
    Ok(())
}
