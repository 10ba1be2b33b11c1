//! The checkers: one task per (service, backend) on a tokio runtime, each
//! running its check every `interval_ms` (first run after a random delay, so
//! checks spread out) under a hard `timeout_ms`, and sending every result to
//! the control loop. A hung backend only delays its own task.
//!
//! HTTP(S) uses reqwest (rustls; certificates are not verified because
//! backends are addressed by IP and often self-signed; no connection reuse,
//! so every check opens a new connection like a client would). TCP checks are
//! a plain connect.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result};
use rand::Rng;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{Checker, HealthCheck, Scheme, ServiceKey};

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
    runtime: tokio::runtime::Handle,
    client: reqwest::Client,
    tx: mpsc::Sender<CheckResult>,
    tasks: HashMap<(ServiceKey, Ipv4Addr), (HealthCheck, u64, JoinHandle<()>)>,
    next_generation: u64,
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
            runtime,
            client: http_client()?,
            tx,
            tasks: HashMap::new(),
            next_generation: 1,
        })
    }

    /// Make the running tasks match `targets`: unchanged checks keep running
    /// (and their health state), changed ones restart, gone ones stop.
    /// Targets with the `none` checker get no task.
    pub fn sync(&mut self, targets: &[CheckTarget]) {
        let want: HashMap<(ServiceKey, Ipv4Addr), &CheckTarget> = targets
            .iter()
            .filter(|t| t.check.checker != Checker::None)
            .map(|t| ((t.service, t.dip), t))
            .collect();
        self.tasks.retain(|k, (check, _, handle)| {
            let keep = want.get(k).is_some_and(|t| t.check == *check);
            if !keep {
                handle.abort();
            }
            keep
        });
        for (k, t) in want {
            if self.tasks.contains_key(&k) {
                continue;
            }
            let generation = self.next_generation;
            self.next_generation += 1;
            let handle = self.runtime.spawn(run_task(
                self.client.clone(),
                (*t).clone(),
                generation,
                self.tx.clone(),
            ));
            self.tasks.insert(k, (t.check.clone(), generation, handle));
        }
    }

    /// Whether `r` comes from the task currently checking its target.
    pub fn is_current(&self, r: &CheckResult) -> bool {
        self.tasks
            .get(&(r.service, r.dip))
            .is_some_and(|(_, g, _)| *g == r.generation)
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

impl Drop for Checkers {
    fn drop(&mut self) {
        for (_, _, h) in self.tasks.values() {
            h.abort();
        }
    }
}

async fn run_task(
    client: reqwest::Client,
    t: CheckTarget,
    generation: u64,
    tx: mpsc::Sender<CheckResult>,
) {
    let interval = Duration::from_millis(t.check.interval_ms);
    // Spread the first checks over up to one interval (at most 1 s, so a
    // restarted daemon learns the truth quickly).
    let first = rand::thread_rng().gen_range(0..=t.check.interval_ms.min(1000));
    tokio::time::sleep(Duration::from_millis(first)).await;
    loop {
        let started = Instant::now();
        let result = check_once(&client, t.dip, &t.check).await;
        let msg = CheckResult {
            service: t.service,
            dip: t.dip,
            generation,
            result,
            elapsed: started.elapsed(),
        };
        if tx.send(msg).await.is_err() {
            return;
        }
        // +-5 % jitter keeps checks of many backends from lining up.
        let jitter = rand::thread_rng().gen_range(0.95..1.05);
        tokio::time::sleep_until(started + interval.mul_f64(jitter)).await;
    }
}
