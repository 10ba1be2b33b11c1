//! The checkers: one task per (service, backend) on a tokio runtime (see
//! [`super::periodic`]), each running its check every `interval_ms` under a
//! hard `timeout_ms` and sending every result to the control loop. A hung
//! backend only delays its own task.
//!
//! HTTP(S) uses reqwest (rustls; certificates are not verified because
//! backends are addressed by IP and often self-signed; no connection reuse,
//! so every check opens a new connection like a client would). TCP checks are
//! a plain connect.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::periodic::{run_periodically, Periodic, ProbeKey};
use crate::config::{Checker, HealthCheck, Scheme};
use crate::types::ServiceKey;

/// One check to run periodically.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckTarget {
    /// The service whose check this is.
    pub service: ServiceKey,
    /// The backend checked.
    pub dip: Ipv4Addr,
    /// What to run and how often.
    pub check: HealthCheck,
}

/// One result.
#[derive(Clone, Debug)]
pub struct CheckResult {
    /// The service whose check this is.
    pub service: ServiceKey,
    /// The backend checked.
    pub dip: Ipv4Addr,
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
    client: reqwest::Client,
    tx: mpsc::Sender<CheckResult>,
}

/// The HTTP client all checks share.
pub fn http_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("nilb-health/", env!("CARGO_PKG_VERSION")))
        .build()
        .context("building the HTTP client for health checks")
}

/// Run `check` once against `dip`, within its timeout.
pub async fn check_once(
    client: &reqwest::Client,
    dip: Ipv4Addr,
    check: &HealthCheck,
) -> Result<(), String> {
    let timeout = Duration::from_millis(check.timeout_ms);
    let work = async {
        match &check.checker {
            Checker::None => Ok(()),
            Checker::Tcp { port } => tokio::net::TcpStream::connect(SocketAddr::from((dip, *port)))
                .await
                .map(drop)
                .map_err(|e| format!("tcp connect {dip}:{port}: {e}")),
            Checker::Http {
                scheme,
                uri,
                port,
                codes,
                host,
            } => {
                let scheme = match scheme {
                    Scheme::Http => "http",
                    Scheme::Https => "https",
                };
                let url = format!("{scheme}://{dip}:{port}{uri}");
                let mut req = client.get(&url).timeout(timeout);
                if let Some(h) = host {
                    req = req.header(reqwest::header::HOST, h);
                }
                let resp = req
                    .send()
                    .await
                    .map_err(|e| format!("{url}: {}", root_cause(&e)))?;
                let status = resp.status().as_u16();
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
            client: http_client()?,
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
        let (client, tx) = (self.client.clone(), self.tx.clone());
        self.tasks
            .sync(&want, move |(service, dip), check, generation| {
                let (client, tx) = (client.clone(), tx.clone());
                let interval = Duration::from_millis(check.interval_ms);
                // At most 1 s before the first check: a restarted daemon learns
                // the truth quickly.
                run_periodically(
                    interval,
                    Duration::from_secs(1),
                    move || {
                        let (client, check) = (client.clone(), check.clone());
                        async move {
                            let started = Instant::now();
                            let result = check_once(&client, dip, &check).await;
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
