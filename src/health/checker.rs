//! The checkers: one task per (service, backend) on a tokio runtime (see
//! [`super::periodic`]), each running its check every `interval_ms` under a
//! hard `timeout_ms` and sending every result to the control loop. A hung
//! backend only delays its own task.
//!
//! HTTP(S) checks open a new connection per check, like a client would, and
//! send one `GET` with HTTP/1.1 (hyper). The Host header is the check's
//! `host`, else the DIP with `:port` unless the port is the scheme's default.
//! HTTPS (tokio-rustls) sends the check's server name (SNI: `sni`, or the
//! host name of `host`) and verifies the certificate against `ca_file` when
//! one is given; without it certificates are not verified (backends are
//! addressed by IP and often self-signed), but the handshake's signatures
//! still are. TCP checks are a plain connect.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context, Result};
use http_body_util::Empty;
use hyper::body::Bytes;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_rustls::rustls;

use super::periodic::{run_periodically, Periodic, ProbeKey};
use crate::config::{Checker, HealthCheck, Scheme, TlsOptions};
use crate::types::ServiceKey;

/// One check to run periodically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTarget {
    /// The service whose check this is.
    pub service: ServiceKey,
    /// The backend checked.
    pub dip: IpAddr,
    /// What to run and how often.
    pub check: HealthCheck,
}

/// One result.
#[derive(Clone, Debug)]
pub struct CheckResult {
    /// The service whose check this is.
    pub service: ServiceKey,
    /// The backend checked.
    pub dip: IpAddr,
    /// Which incarnation of the task produced it (stale results of a
    /// replaced check are ignored, see [`Checkers::is_current`]).
    pub generation: u64,
    /// Ok, or why the check failed.
    pub result: Result<(), String>,
    /// How long the check took.
    pub elapsed: Duration,
}

/// The running checker tasks.
pub struct Checkers {
    tasks: Periodic<HealthCheck>,
    tx: mpsc::Sender<CheckResult>,
}

/// The HTTP client of the load scrapes (dynamic weights).
pub fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(USER_AGENT)
        .build()
        .context("building the HTTP client for load scrapes")
}

/// User-Agent of health checks and load scrapes.
pub const USER_AGENT: &str = concat!("nilb-health/", env!("CARGO_PKG_VERSION"));

/// The Host header an HTTP check sends when its `host` is not set: the DIP,
/// with `:port` unless the port is the scheme's default (as browsers and
/// curl send it); an IPv6 DIP in brackets (RFC 3986).
pub fn default_host(dip: IpAddr, port: u16, scheme: Scheme) -> String {
    match (scheme, port, dip) {
        (Scheme::Http, 80, IpAddr::V4(_)) | (Scheme::Https, 443, IpAddr::V4(_)) => dip.to_string(),
        (Scheme::Http, 80, IpAddr::V6(_)) | (Scheme::Https, 443, IpAddr::V6(_)) => {
            format!("[{dip}]")
        }
        _ => SocketAddr::from((dip, port)).to_string(),
    }
}

/// Accepts any certificate (no `ca_file`), but still checks the
/// handshake's signatures with the certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
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
        cert: &rustls_pki_types::CertificateDer<'_>,
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

/// The TLS client configuration of an HTTPS check: shared by all checks
/// without a CA file; read from the file otherwise.
pub fn tls_config(tls: &TlsOptions) -> Result<Arc<rustls::ClientConfig>, String> {
    static UNVERIFIED: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let provider = || Arc::new(rustls::crypto::ring::default_provider());
    let builder = || {
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))
    };
    let Some(path) = &tls.ca_file else {
        if let Some(c) = UNVERIFIED.get() {
            return Ok(c.clone());
        }
        let config = builder()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth();
        return Ok(UNVERIFIED.get_or_init(|| Arc::new(config)).clone());
    };
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let certs = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("ca_file {}: {e}", path.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
    }
    Ok(Arc::new(
        builder()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// A check ready to run: the TLS configuration of an HTTPS check is built
/// once (a CA file is read when the check is prepared, not per check).
#[derive(Clone)]
pub struct Prepared {
    check: HealthCheck,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Prepared {
    /// Prepare `check`; fails only when its CA file cannot be used.
    pub fn new(check: &HealthCheck) -> Result<Self, String> {
        let tls = match &check.checker {
            Checker::Http {
                scheme: Scheme::Https,
                tls,
                ..
            } => Some(tls_config(tls)?),
            _ => None,
        };
        Ok(Prepared {
            check: check.clone(),
            tls,
        })
    }

    /// Run the check once against `dip`, within its timeout.
    pub async fn run(&self, dip: IpAddr) -> Result<(), String> {
        let check = &self.check;
        let timeout = Duration::from_millis(check.timeout_ms);
        let work = async {
            match &check.checker {
                Checker::None => Ok(()),
                Checker::Tcp { port } => TcpStream::connect(SocketAddr::from((dip, *port)))
                    .await
                    .map(drop)
                    .map_err(|e| format!("tcp connect {}: {e}", SocketAddr::from((dip, *port)))),
                Checker::Http {
                    scheme,
                    uri,
                    port,
                    codes,
                    host,
                    tls,
                } => {
                    let url = format!(
                        "{}://{}{uri}",
                        match scheme {
                            Scheme::Http => "http",
                            Scheme::Https => "https",
                        },
                        SocketAddr::from((dip, *port))
                    );
                    let host = host
                        .clone()
                        .unwrap_or_else(|| default_host(dip, *port, *scheme));
                    let status = self
                        .http_get(dip, *port, uri, &host, tls)
                        .await
                        .map_err(|e| format!("{url}: {e}"))?;
                    if codes.contains(&status) {
                        Ok(())
                    } else {
                        Err(format!("{url}: status {status}, expected one of {codes:?}"))
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {} ms", check.timeout_ms)),
        }
    }

    /// One GET on a new connection; the response's status code.
    async fn http_get(
        &self,
        dip: IpAddr,
        port: u16,
        uri: &str,
        host: &str,
        tls: &TlsOptions,
    ) -> Result<u16, String> {
        let stream = TcpStream::connect(SocketAddr::from((dip, port)))
            .await
            .map_err(|e| root_cause(&e))?;
        let _ = stream.set_nodelay(true);
        let request = hyper::Request::get(uri)
            .header(hyper::header::HOST, host)
            .header(hyper::header::USER_AGENT, USER_AGENT)
            .header(hyper::header::CONNECTION, "close")
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        match &self.tls {
            None => send(hyper_util::rt::TokioIo::new(stream), request).await,
            Some(config) => {
                let name = match &tls.sni {
                    Some(n) => rustls_pki_types::ServerName::try_from(n.clone())
                        .map_err(|e| format!("server name {n}: {e}"))?,
                    None => rustls_pki_types::ServerName::IpAddress(dip.into()),
                };
                let tls_stream = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("TLS handshake: {}", root_cause(&e)))?;
                send(hyper_util::rt::TokioIo::new(tls_stream), request).await
            }
        }
    }
}

/// Send `request` on a fresh HTTP/1.1 connection over `io`; the status.
async fn send<I>(io: I, request: hyper::Request<Empty<Bytes>>) -> Result<u16, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| root_cause(&e))?;
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let result = sender
        .send_request(request)
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| root_cause(&e));
    driver.abort();
    result
}

/// Run `check` once against `dip`, within its timeout.
pub async fn check_once(dip: IpAddr, check: &HealthCheck) -> Result<(), String> {
    Prepared::new(check)?.run(dip).await
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

impl Checkers {
    /// Checkers that spawn their tasks on `runtime` and send results to `tx`.
    pub fn new(runtime: tokio::runtime::Handle, tx: mpsc::Sender<CheckResult>) -> Result<Self> {
        Ok(Checkers {
            tasks: Periodic::new(runtime),
            tx,
        })
    }

    /// Make the running tasks match `targets`: unchanged checks keep running
    /// (and their health state), changed ones restart, gone ones stop.
    /// Targets with the `none` checker get no task.
    pub fn sync(&mut self, targets: &[CheckTarget]) {
        let want: HashMap<ProbeKey, HealthCheck> = targets
            .iter()
            .filter(|t| t.check.checker != Checker::None)
            .map(|t| ((t.service, t.dip), t.check.clone()))
            .collect();
        let tx = self.tx.clone();
        self.tasks
            .sync(&want, move |(service, dip), check, generation| {
                let tx = tx.clone();
                let interval = Duration::from_millis(check.interval_ms);
                let prepared = Prepared::new(&check);
                // At most 1 s before the first check: a restarted daemon learns
                // the truth quickly.
                run_periodically(
                    interval,
                    Duration::from_secs(1),
                    move || {
                        let prepared = prepared.clone();
                        async move {
                            let started = Instant::now();
                            let result = match &prepared {
                                Ok(p) => p.run(dip).await,
                                Err(e) => Err(e.clone()),
                            };
                            CheckResult {
                                service,
                                dip,
                                generation,
                                result,
                                elapsed: started.elapsed(),
                            }
                        }
                    },
                    tx,
                )
            });
    }

    /// Whether `r` comes from the task currently checking its target.
    pub fn is_current(&self, r: &CheckResult) -> bool {
        self.tasks.is_current(&(r.service, r.dip), r.generation)
    }

    /// Number of running check tasks.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// True when no check runs.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}
