//! A QUIC download server whose connection IDs carry its QUIC-LB server ID,
//! so that nilb routes its connections by connection ID (docs/config.md
//! "QUIC-LB"): the example of how a QUIC server issues routable IDs with
//! [`nilb::quic_lb`]. quinn with rustls; a self-signed certificate is
//! generated at start (clients of this example do not verify it).
//!
//! ```text
//! quic_server --listen VIP:PORT --name NAME \
//!     --nilb-config /etc/nilb/nilb.yaml --service SERVICE --dip THIS-BACKEND
//! quic_server --listen VIP:PORT --name NAME \
//!     --codepoint 1 --server-id-len 2 --nonce-len 6 --algorithm four-pass \
//!     --key-file /etc/nilb/quic-lb.key --server-id 0a01 [--self-encode-length]
//! quic_server --listen VIP:PORT --name NAME --random-cids
//! ```
//!
//! The first form takes the QUIC-LB parameters and this backend's server ID
//! (explicit or assigned) from nilb's own configuration file, the second
//! spells them out, the third issues plain random 8-byte IDs (a server that
//! knows nothing of QUIC-LB). Bind to the VIP so that replies leave from it
//! (direct server return).
//!
//! Protocol (ALPN `nilb-dl`): the client opens a bidirectional stream and
//! sends `GET <bytes> [<kbit/s>]\n`; the server answers `<name>\n`, then
//! that many bytes (paced to the rate when one is given), and finishes the
//! stream. When a download ends the server prints one JSON line:
//! `{"event":"served","name","bytes","peer_first","peer_last","migrations",
//! "seconds"}` (`migrations`: changes of the client's address seen while
//! sending). At start it prints `listening on ADDR ...` with its server ID.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use nilb::quic_lb::{self, Algorithm, CidGenerator, ConfigSpec, Key, ServerId};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::rustls;

/// Command line (see the module documentation).
#[derive(Parser, Debug)]
#[command(about = "QUIC download server issuing QUIC-LB connection IDs")]
struct Args {
    /// Address to listen on (the VIP and the service's port).
    #[arg(long)]
    listen: SocketAddr,
    /// Name sent as the first line of every download.
    #[arg(long)]
    name: String,
    /// nilb's configuration file: QUIC-LB parameters and server ID from it.
    #[arg(long, requires_all = ["service", "dip"])]
    nilb_config: Option<PathBuf>,
    /// With --nilb-config: the service's name.
    #[arg(long)]
    service: Option<String>,
    /// With --nilb-config: this backend's address (its `dip`).
    #[arg(long)]
    dip: Option<std::net::IpAddr>,
    /// Config rotation codepoint (0-6).
    #[arg(long)]
    codepoint: Option<u8>,
    /// Server ID length in bytes.
    #[arg(long)]
    server_id_len: Option<usize>,
    /// Nonce length in bytes.
    #[arg(long)]
    nonce_len: Option<usize>,
    /// plaintext, single-pass or four-pass (checked against key and lengths).
    #[arg(long)]
    algorithm: Option<String>,
    /// File with the 16-byte key as 32 hex digits (keyed algorithms).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// This server's ID, hex.
    #[arg(long)]
    server_id: Option<String>,
    /// The first octet carries the CID length.
    #[arg(long)]
    self_encode_length: bool,
    /// Plain random 8-byte connection IDs instead (no QUIC-LB).
    #[arg(long, conflicts_with_all = ["nilb_config", "codepoint", "server_id"])]
    random_cids: bool,
}

/// quinn's connection-ID hook on top of the library's generator: every ID
/// this server issues (its first source CID and those of
/// NEW_CONNECTION_ID frames) carries its server ID.
struct QuicLbCids {
    generator: CidGenerator,
}

impl quinn::ConnectionIdGenerator for QuicLbCids {
    fn generate_cid(&mut self) -> quinn::ConnectionId {
        quinn::ConnectionId::new(self.generator.generate_or_unroutable().as_bytes())
    }

    fn cid_len(&self) -> usize {
        self.generator.config().cid_len()
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// The QUIC-LB configuration and server ID the arguments give, or None for
/// --random-cids.
fn quic_lb_params(a: &Args) -> Result<Option<(quic_lb::Config, ServerId)>> {
    if a.random_cids {
        return Ok(None);
    }
    if let Some(path) = &a.nilb_config {
        let cfg = nilb::config::Config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        let name = a.service.as_deref().expect("clap requires it");
        let s = cfg
            .services
            .iter()
            .find(|s| s.name == name)
            .with_context(|| format!("no service `{name}` in {}", path.display()))?;
        let q = s
            .quic_lb
            .as_ref()
            .with_context(|| format!("service `{name}` has no quic_lb"))?;
        let dip = a.dip.expect("clap requires it");
        let sid = q
            .server_id_of(dip)
            .with_context(|| format!("{dip} is not a backend of `{name}`"))?;
        return Ok(Some((q.config(), sid)));
    }
    let (Some(codepoint), Some(server_id_len), Some(nonce_len), Some(sid)) =
        (a.codepoint, a.server_id_len, a.nonce_len, &a.server_id)
    else {
        bail!("give --nilb-config, or --codepoint, --server-id-len, --nonce-len and --server-id, or --random-cids");
    };
    let key = match &a.key_file {
        Some(f) => {
            let text = std::fs::read_to_string(f).with_context(|| format!("{}", f.display()))?;
            Some(Key::from_hex(&text).with_context(|| format!("{}", f.display()))?)
        }
        None => None,
    };
    let config = quic_lb::Config::new(&ConfigSpec {
        codepoint,
        server_id_len,
        nonce_len,
        key,
        self_encode_length: a.self_encode_length,
    })?;
    if let Some(alg) = &a.algorithm {
        if alg != config.algorithm().name() {
            bail!(
                "--algorithm {alg}, but the key and lengths give {}",
                config.algorithm().name()
            );
        }
    }
    let sid: ServerId = sid.parse()?;
    Ok(Some((config, sid)))
}

/// rustls server configuration with a fresh self-signed certificate.
fn tls_config() -> Result<QuicServerConfig> {
    let cert = rcgen::generate_simple_self_signed(vec!["nilb-quic.test".to_string()])?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)?;
    tls.alpn_protocols = vec![b"nilb-dl".to_vec()];
    Ok(QuicServerConfig::try_from(tls)?)
}

/// Parse `GET <bytes> [<kbit/s>]`.
fn parse_request(line: &str) -> Result<(u64, u64)> {
    let mut w = line.split_whitespace();
    if w.next() != Some("GET") {
        bail!("not a GET: {line:?}");
    }
    let bytes = w.next().context("GET without a size")?.parse()?;
    let rate = w.next().map(str::parse).transpose()?.unwrap_or(0);
    Ok((bytes, rate))
}

/// Serve one download on one stream: name line, then `bytes` bytes, paced
/// to `rate_kbit` (0: as fast as the connection goes).
async fn serve_stream(
    conn: quinn::Connection,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    name: Arc<String>,
) -> Result<()> {
    let mut req = Vec::new();
    let mut byte = [0u8; 1];
    while req.len() < 64 {
        if recv.read_exact(&mut byte).await.is_err() || byte[0] == b'\n' {
            break;
        }
        req.push(byte[0]);
    }
    let (bytes, rate_kbit) = parse_request(&String::from_utf8_lossy(&req))?;
    let start = Instant::now();
    let first = conn.remote_address();
    let mut last = first;
    let mut migrations = 0;
    send.write_all(format!("{name}\n").as_bytes()).await?;
    let chunk = vec![0x5au8; 16 * 1024];
    let mut sent = 0u64;
    while sent < bytes {
        let n = chunk.len().min((bytes - sent) as usize);
        send.write_all(&chunk[..n]).await?;
        sent += n as u64;
        let now = conn.remote_address();
        if now != last {
            migrations += 1;
            last = now;
        }
        if rate_kbit > 0 {
            let due = Duration::from_secs_f64(sent as f64 * 8.0 / (rate_kbit as f64 * 1000.0));
            if let Some(wait) = due.checked_sub(start.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }
    send.finish()?;
    // Wait until the client has everything (or the connection ends).
    let _ = send.stopped().await;
    let _ = recv.read_to_end(0).await;
    println!(
        "{}",
        serde_json::json!({
            "event": "served",
            "name": *name,
            "bytes": sent,
            "peer_first": first.to_string(),
            "peer_last": conn.remote_address().to_string(),
            "migrations": migrations,
            "seconds": start.elapsed().as_secs_f64(),
        })
    );
    Ok(())
}

async fn serve_connection(incoming: quinn::Incoming, name: Arc<String>) -> Result<()> {
    let conn = incoming.await?;
    loop {
        let (send, recv) = match conn.accept_bi().await {
            Ok(s) => s,
            Err(_) => return Ok(()),
        };
        let (conn, name) = (conn.clone(), name.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_stream(conn, send, recv, name).await {
                eprintln!("download failed: {e:#}");
            }
        });
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let params = quic_lb_params(&args)?;
    let mut endpoint_config = quinn::EndpointConfig::default();
    let described = match &params {
        Some((config, sid)) => {
            let described = format!(
                "server_id {sid} cid_len {} algorithm {} codepoint {}",
                config.cid_len(),
                config.algorithm().name(),
                config.codepoint()
            );
            let (config, sid) = (config.clone(), *sid);
            // Checked once here, so that the factory below cannot fail.
            CidGenerator::new(config.clone(), sid)?;
            endpoint_config.cid_generator(move || {
                Box::new(QuicLbCids {
                    generator: CidGenerator::new(config.clone(), sid).expect("checked"),
                })
            });
            described
        }
        None => "random 8-byte connection IDs".to_string(),
    };
    if let Some((config, _)) = &params {
        if config.algorithm() == Algorithm::Plaintext {
            eprintln!("note: plaintext QUIC-LB: the server ID is visible in every connection ID");
        }
    }
    let mut server_config = quinn::ServerConfig::with_crypto(Arc::new(tls_config()?));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_secs(10).try_into()?));
    server_config.transport_config(Arc::new(transport));
    server_config.migration(true);
    let socket =
        UdpSocket::bind(args.listen).with_context(|| format!("binding {}", args.listen))?;
    let endpoint = quinn::Endpoint::new(
        endpoint_config,
        Some(server_config),
        socket,
        Arc::new(quinn::TokioRuntime),
    )?;
    let ip: IpAddr = args.listen.ip();
    println!(
        "listening on {} ({ip}) name {} {described}",
        endpoint.local_addr()?,
        args.name
    );
    let name = Arc::new(args.name.clone());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let name = name.clone();
                tokio::spawn(async move {
                    if let Err(e) = serve_connection(incoming, name).await {
                        eprintln!("connection failed: {e:#}");
                    }
                });
            }
            _ = term.recv() => break,
        }
    }
    endpoint.close(0u32.into(), b"bye");
    println!("stopped");
    Ok(())
}
