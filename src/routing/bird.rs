//! Driving BIRD: a worker thread writes the routes file and runs `birdc
//! configure` whenever the announced set changes, and `birdc show
//! protocols` once a second for `nilb status`; a failed reconfiguration is
//! retried at that pace. The control loop never waits
//! for BIRD except when stopping ([`Announcer::flush`]).
//!
//! Why config + `birdc configure` and not a BGP library: BIRD keeps the BGP
//! sessions, timers and the router's view; nilb only says which routes exist.
//! Re-reading the config restarts only the protocols whose config changed
//! (nilb's static protocol): the BGP sessions stay up and send the
//! difference as UPDATE/withdraw messages.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{configure_ok, parse_protocols, parse_routes, render_routes, Session};

/// Where BIRD is and how to reach it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BirdPaths {
    /// `birdc`.
    pub birdc: PathBuf,
    /// BIRD's control socket.
    pub socket: PathBuf,
    /// The routes file nilb writes.
    pub routes_file: PathBuf,
}

/// The last attempt to put a set of routes in force.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyStatus {
    /// When (RFC 3339).
    pub at: String,
    /// BIRD took the new config.
    pub ok: bool,
    /// BIRD's or the system's words when not.
    #[serde(default)]
    pub error: Option<String>,
    /// Writing the file and `birdc configure`, ms.
    pub ms: u64,
    /// The VIPs the file announces.
    pub vips: Vec<Ipv4Addr>,
}

/// What the worker knows of BIRD.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BirdStatus {
    /// The last apply (None: nothing had to change since start).
    #[serde(default)]
    pub last_apply: Option<ApplyStatus>,
    /// Applies since start (ok, failed).
    pub applies: (u64, u64),
    /// BIRD's protocols at the last poll.
    #[serde(default)]
    pub protocols: Vec<Session>,
    /// Why the last poll failed, if it did.
    #[serde(default)]
    pub poll_error: Option<String>,
}

enum Request {
    Announce(BTreeSet<Ipv4Addr>),
    Flush(mpsc::Sender<Result<(), String>>),
}

/// The worker thread and its shared status.
pub struct Announcer {
    tx: Option<mpsc::Sender<Request>>,
    status: Arc<Mutex<BirdStatus>>,
    handle: Option<std::thread::JoinHandle<()>>,
    paths: BirdPaths,
}

impl Announcer {
    /// Start the worker. It touches nothing until the first
    /// [`Announcer::announce`].
    pub fn start(paths: BirdPaths) -> std::io::Result<Announcer> {
        let (tx, rx) = mpsc::channel();
        let status = Arc::new(Mutex::new(BirdStatus::default()));
        let worker = Worker {
            paths: paths.clone(),
            status: status.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("nilb-bird".into())
            .spawn(move || worker.run(rx))?;
        Ok(Announcer {
            tx: Some(tx),
            status,
            handle: Some(handle),
            paths,
        })
    }

    /// The paths this worker uses.
    pub fn paths(&self) -> &BirdPaths {
        &self.paths
    }

    /// Ask for exactly these VIPs to be announced (asynchronous; the latest
    /// request wins).
    pub fn announce(&self, vips: BTreeSet<Ipv4Addr>) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Request::Announce(vips));
        }
    }

    /// Wait until what was asked so far is in force in BIRD, at most
    /// `timeout`.
    pub fn flush(&self, timeout: Duration) -> Result<(), String> {
        let (ack, done) = mpsc::channel();
        self.tx
            .as_ref()
            .ok_or("worker stopped")?
            .send(Request::Flush(ack))
            .map_err(|_| "worker stopped".to_string())?;
        done.recv_timeout(timeout)
            .map_err(|_| format!("BIRD did not answer within {timeout:?}"))?
    }

    /// A copy of the status.
    pub fn status(&self) -> BirdStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Announcer {
    /// The worker ends once it has handled what is queued; it is not
    /// joined, so a BIRD that hangs (`birdc` never returns) cannot hang the
    /// daemon. Whoever needs a withdrawal done waits with
    /// [`Announcer::flush`], which is bounded.
    fn drop(&mut self) {
        self.tx = None;
        self.handle = None;
    }
}

struct Worker {
    paths: BirdPaths,
    status: Arc<Mutex<BirdStatus>>,
}

const POLL: Duration = Duration::from_secs(1);

impl Worker {
    fn run(self, rx: mpsc::Receiver<Request>) {
        let mut want: Option<BTreeSet<Ipv4Addr>> = None;
        let mut dirty = false;
        let mut last_poll = Instant::now() - POLL;
        let mut first = true;
        loop {
            let wait = POLL.saturating_sub(last_poll.elapsed());
            let mut flushes = Vec::new();
            match rx.recv_timeout(wait) {
                Ok(r) => {
                    let mut next = Some(r);
                    while let Some(r) = next {
                        match r {
                            Request::Announce(v) => {
                                dirty = dirty || want.as_ref() != Some(&v);
                                want = Some(v);
                            }
                            Request::Flush(ack) => flushes.push(ack),
                        }
                        next = rx.try_recv().ok();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if let Some(w) = &want {
                if dirty {
                    let r = self.apply(w, first);
                    first = false;
                    dirty = r.is_err();
                    for f in flushes.drain(..) {
                        let _ = f.send(r.clone());
                    }
                }
            }
            for f in flushes {
                let _ = f.send(Ok(()));
            }
            if last_poll.elapsed() >= POLL {
                last_poll = Instant::now();
                self.poll();
            }
        }
    }

    /// Put `vips` in force: write the file if it differs and have BIRD
    /// re-read its config. A file that already says the same (a daemon
    /// restarted after SIGKILL) is left alone: BIRD already announces it.
    fn apply(&self, vips: &BTreeSet<Ipv4Addr>, first: bool) -> Result<(), String> {
        let started = Instant::now();
        let text = render_routes(vips);
        if first {
            let current = std::fs::read_to_string(&self.paths.routes_file).ok();
            if current.as_deref().map(parse_routes).as_ref() == Some(vips) {
                return Ok(());
            }
        }
        let r = write_atomically(&self.paths.routes_file, &text)
            .and_then(|()| birdc(&self.paths, &["configure"]))
            .and_then(|reply| configure_ok(&reply));
        let ms = started.elapsed().as_millis() as u64;
        match &r {
            Ok(()) => tracing::info!(
                vips = ?vips,
                ms,
                "BIRD reconfigured: announcing {} VIP(s)",
                vips.len()
            ),
            Err(e) => {
                // Once per kind of failure, not once per retry.
                let same = self.status.lock().is_ok_and(|s| {
                    s.last_apply
                        .as_ref()
                        .is_some_and(|a| a.error.as_ref() == Some(e))
                });
                if !same {
                    tracing::warn!(error = %e, "BIRD reconfiguration failed; retrying every second")
                }
            }
        }
        if let Ok(mut s) = self.status.lock() {
            if r.is_ok() {
                s.applies.0 += 1;
            } else {
                s.applies.1 += 1;
            }
            s.last_apply = Some(ApplyStatus {
                at: crate::report::rfc3339(std::time::SystemTime::now()),
                ok: r.is_ok(),
                error: r.clone().err(),
                ms,
                vips: vips.iter().copied().collect(),
            });
        }
        r
    }

    fn poll(&self) {
        let r = birdc(&self.paths, &["show", "protocols"]);
        if let Ok(mut s) = self.status.lock() {
            match r {
                Ok(text) => {
                    s.protocols = parse_protocols(&text);
                    s.poll_error = None;
                }
                Err(e) => s.poll_error = Some(e),
            }
        }
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming to {}: {e}", path.display()))
}

/// Longest a `birdc` call may take before it is killed: BIRD answers
/// `configure` and `show protocols` in milliseconds; a BIRD that accepts
/// the connection and never answers would otherwise stop the worker (no
/// announcements, withdrawals or status) for good.
const BIRDC_TIMEOUT: Duration = Duration::from_secs(5);

/// Run `birdc -s SOCKET ARGS...`; its stdout and stderr together.
/// Errors: birdc cannot be started, exits non-zero with no output, or does
/// not finish within [`BIRDC_TIMEOUT`] (then it is killed).
fn birdc(paths: &BirdPaths, args: &[&str]) -> Result<String, String> {
    birdc_within(paths, args, BIRDC_TIMEOUT)
}

fn birdc_within(paths: &BirdPaths, args: &[&str], timeout: Duration) -> Result<String, String> {
    let child = Command::new(&paths.birdc)
        .arg("-s")
        .arg(&paths.socket)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {}: {e}", paths.birdc.display()))?;
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(timeout) {
        Ok(r) => r.map_err(|e| format!("running {}: {e}", paths.birdc.display()))?,
        Err(_) => {
            // The reader thread reaps it once it is dead.
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            return Err(format!(
                "{} {} did not finish within {timeout:?}; killed",
                paths.birdc.display(),
                args.join(" ")
            ));
        }
    };
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if text.trim().is_empty() && !out.status.success() {
        return Err(format!(
            "{} exited with {}",
            paths.birdc.display(),
            out.status
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod timeout_tests {
    use super::*;

    /// A `birdc` that never answers is killed after the timeout instead of
    /// stopping the worker; one that answers is read whole.
    #[test]
    fn a_hung_birdc_is_killed() {
        let dir = std::env::temp_dir().join(format!("nilb-birdc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let paths = |birdc| BirdPaths {
            birdc,
            socket: dir.join("bird.ctl"),
            routes_file: dir.join("routes.conf"),
        };
        let hung = paths(script("hung", "exec sleep 30"));
        let started = Instant::now();
        let e = birdc_within(&hung, &["configure"], Duration::from_millis(300)).unwrap_err();
        assert!(e.contains("did not finish within"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let ok = paths(script("ok", "echo \"0016 Reconfigured $*\""));
        let out = birdc_within(&ok, &["configure"], Duration::from_secs(5)).unwrap();
        assert!(out.contains("Reconfigured -s"), "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
