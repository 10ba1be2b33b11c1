//! Talking to etcd: a small client of etcd's v3 JSON gateway (`/v3/kv/*`,
//! `/v3/lease/*`, part of etcd's stable v3 API since 3.4) over the HTTP
//! client nilb already has, and the task that runs the election, publishes
//! the leader's tables and follows the published ones
//! ([`ClusterSync`]). docs/design.md "Several balancers" says why the
//! gateway and not a gRPC client.
//!
//! The task polls (every [`POLL`]) instead of watching: a range of the
//! tables with `min_mod_revision` costs one small request when nothing
//! changed, survives etcd restarts without stream bookkeeping, and bounds
//! a follower's delay to the poll period plus one request.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::{
    leader_key, leader_node, leader_value, table_key, tables_prefix, Election, PublishedTable, Role,
};
use crate::config::Etcd;
use crate::types::ServiceKey;

/// How often the task polls etcd for published tables (follower) and
/// checks the leader key.
pub const POLL: Duration = Duration::from_millis(100);

/// Longest one request to etcd may take.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1500);

/// Operations per transaction (etcd's default `--max-txn-ops` is 128).
const TXN_OPS: usize = 64;

fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn unb64(v: &Value) -> Vec<u8> {
    v.as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .unwrap_or_default()
}

/// An int64 of the gateway's JSON (a string, or absent for 0).
pub(super) fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

/// The key after `key` in etcd's order of prefixes: the end of a range
/// over every key starting with `key`.
pub fn prefix_end(key: &str) -> Vec<u8> {
    let mut end = key.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// One key-value pair of a range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// Revision of its last change.
    pub mod_revision: i64,
    /// Lease attached (0: none).
    pub lease: i64,
}

/// A range's answer: the pairs and the store's revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeResult {
    /// The pairs found.
    pub kvs: Vec<Kv>,
    /// etcd's revision when it answered.
    pub revision: i64,
}

pub(super) fn kvs_of(v: &Value) -> Vec<Kv> {
    v["kvs"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|kv| Kv {
                    key: unb64(&kv["key"]),
                    value: unb64(&kv["value"]),
                    mod_revision: int(&kv["mod_revision"]),
                    lease: int(&kv["lease"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A client of one etcd cluster (several endpoints: a failed request
/// moves to the next).
pub struct Client {
    http: reqwest::Client,
    endpoints: Vec<String>,
    current: usize,
}

impl Client {
    /// A client of `endpoints` (`http://ADDRESS:PORT`).
    pub fn new(endpoints: Vec<String>) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder()
                .timeout(REQUEST_TIMEOUT)
                .connect_timeout(Duration::from_millis(500))
                .no_proxy()
                .build()?,
            endpoints,
            current: 0,
        })
    }

    /// POST `body` to `path` of the current endpoint; on a transport
    /// error the next endpoint is used for the next call.
    pub async fn call(&mut self, path: &str, body: Value) -> Result<Value, String> {
        let Some(base) = self.endpoints.get(self.current) else {
            return Err("no endpoint".into());
        };
        let url = format!("{base}{path}");
        let r = async {
            let resp = self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| format!("{url}: {e}"))?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(|e| format!("{url}: {e}"))?;
            let v: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{url}: {status}, not JSON ({e})"))?;
            if !status.is_success() {
                return Err(format!(
                    "{url}: {status}: {}",
                    v["message"].as_str().or(v["error"].as_str()).unwrap_or("")
                ));
            }
            Ok(v)
        }
        .await;
        if r.is_err() && self.endpoints.len() > 1 {
            self.current = (self.current + 1) % self.endpoints.len();
        }
        r
    }

    /// Every key in `[key, end)` changed at `min_mod_revision` or later (0:
    /// all); `end` None: `key` alone.
    pub async fn range(
        &mut self,
        key: &str,
        end: Option<&[u8]>,
        min_mod_revision: i64,
    ) -> Result<RangeResult, String> {
        let mut body = json!({ "key": b64(key.as_bytes()) });
        if let Some(end) = end {
            body["range_end"] = json!(b64(end));
        }
        if min_mod_revision > 0 {
            body["min_mod_revision"] = json!(min_mod_revision.to_string());
        }
        let v = self.call("/v3/kv/range", body).await?;
        Ok(RangeResult {
            kvs: kvs_of(&v),
            revision: int(&v["header"]["revision"]),
        })
    }

    /// Grant a lease of `ttl_s` seconds; its id.
    pub async fn grant(&mut self, ttl_s: u64) -> Result<i64, String> {
        let v = self
            .call("/v3/lease/grant", json!({ "TTL": ttl_s.to_string() }))
            .await?;
        match int(&v["ID"]) {
            0 => Err(format!("lease grant without an ID: {v}")),
            id => Ok(id),
        }
    }

    /// Renew `lease`; the TTL left in seconds (0: etcd does not know it).
    pub async fn keepalive(&mut self, lease: i64) -> Result<i64, String> {
        let v = self
            .call("/v3/lease/keepalive", json!({ "ID": lease.to_string() }))
            .await?;
        Ok(int(&v["result"]["TTL"]))
    }

    /// Revoke `lease` (its keys go with it).
    pub async fn revoke(&mut self, lease: i64) -> Result<(), String> {
        self.call("/v3/lease/revoke", json!({ "ID": lease.to_string() }))
            .await
            .map(|_| ())
    }

    /// Put `key` = `value` with `lease` if nobody created `key` yet; else
    /// read it. Ok(None): we created it; Ok(Some(kv)): who holds it
    /// (None inside if it vanished meanwhile).
    pub async fn create_with_lease(
        &mut self,
        key: &str,
        value: &str,
        lease: i64,
    ) -> Result<Option<Option<Kv>>, String> {
        let k = b64(key.as_bytes());
        let v = self
            .call(
                "/v3/kv/txn",
                json!({
                    "compare": [{"target": "CREATE", "key": k, "createRevision": "0"}],
                    "success": [{"requestPut": {"key": k, "value": b64(value.as_bytes()), "lease": lease.to_string()}}],
                    "failure": [{"requestRange": {"key": k}}],
                }),
            )
            .await?;
        if v["succeeded"].as_bool() == Some(true) {
            return Ok(None);
        }
        let holder = v["responses"]
            .as_array()
            .and_then(|r| r.first())
            .map(|r| kvs_of(&r["response_range"]))
            .and_then(|k| k.into_iter().next());
        Ok(Some(holder))
    }

    /// Put every pair (None: delete the key) if `fence_key` still holds
    /// `fence_value`, in transactions of [`TXN_OPS`]. Ok(Some(revision)):
    /// all written; Ok(None): the fence failed (nothing more written).
    pub async fn put_fenced(
        &mut self,
        fence_key: &str,
        fence_value: &str,
        pairs: &[(String, Option<String>)],
    ) -> Result<Option<i64>, String> {
        let mut revision = 0;
        for chunk in pairs.chunks(TXN_OPS) {
            let ops: Vec<Value> = chunk
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => json!({"requestPut": {"key": b64(k.as_bytes()), "value": b64(v.as_bytes())}}),
                    None => json!({"requestDeleteRange": {"key": b64(k.as_bytes())}}),
                })
                .collect();
            let v = self
                .call(
                    "/v3/kv/txn",
                    json!({
                        "compare": [{"target": "VALUE", "key": b64(fence_key.as_bytes()), "value": b64(fence_value.as_bytes())}],
                        "success": ops,
                    }),
                )
                .await?;
            if v["succeeded"].as_bool() != Some(true) {
                return Ok(None);
            }
            revision = int(&v["header"]["revision"]);
        }
        Ok(Some(revision))
    }
}

/// What the control loop asks of the task.
#[derive(Debug)]
pub enum Request {
    /// Publish these tables and delete these services' keys (leader only;
    /// dropped otherwise: the leader publishes).
    Publish(Vec<PublishedTable>, Vec<ServiceKey>),
}

/// What the task tells the control loop, in order.
#[derive(Debug)]
pub enum Event {
    /// Tables published since the last event (`all`: every published
    /// table, a full snapshot, sent before the task reports `Leader`), with
    /// each one's mod revision, and etcd's revision.
    Tables {
        /// (mod revision, table).
        tables: Vec<(i64, PublishedTable)>,
        /// A full snapshot.
        all: bool,
        /// etcd's revision.
        revision: i64,
    },
    /// This balancer's role changed.
    Role(Role),
    /// A publication was acknowledged at this revision.
    Published(i64),
}

/// What the task shares with the status.
#[derive(Clone, Debug, Default)]
pub struct TaskStatus {
    /// The last request succeeded.
    pub connected: bool,
    /// The leader key's holder.
    pub leader: Option<IpAddr>,
    /// When etcd last answered.
    pub last_contact: Option<std::time::SystemTime>,
    /// The last error.
    pub error: Option<String>,
}

/// The running task and its channels.
pub struct ClusterSync {
    tx: mpsc::UnboundedSender<Request>,
    status: Arc<Mutex<TaskStatus>>,
    stop: Option<tokio::sync::oneshot::Sender<tokio::sync::oneshot::Sender<()>>>,
    /// The settings it runs with.
    pub config: Etcd,
}

impl ClusterSync {
    /// Start the task on `runtime` for `node`; its events go to `events`.
    pub fn start(
        runtime: &tokio::runtime::Runtime,
        config: Etcd,
        node: IpAddr,
        events: mpsc::UnboundedSender<Event>,
    ) -> anyhow::Result<ClusterSync> {
        let client = Client::new(config.endpoints.clone())?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let status = Arc::new(Mutex::new(TaskStatus::default()));
        let task = Task {
            client,
            prefix: config.prefix.clone(),
            node,
            election: Election::new(config.lease_ttl_ms),
            role: Role::Unknown,
            events,
            status: status.clone(),
            last_revision: 0,
            queue: BTreeMap::new(),
            started: Instant::now(),
            last_leader_check: None,
        };
        runtime.spawn(task.run(rx, stop_rx));
        Ok(ClusterSync {
            tx,
            status,
            stop: Some(stop_tx),
            config,
        })
    }

    /// Ask for a publication (asynchronous).
    pub fn publish(&self, tables: Vec<PublishedTable>, deletes: Vec<ServiceKey>) {
        if !tables.is_empty() || !deletes.is_empty() {
            let _ = self.tx.send(Request::Publish(tables, deletes));
        }
    }

    /// A copy of the task's status.
    pub fn status(&self) -> TaskStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stop the task; a leader revokes its lease first so that another
    /// balancer takes over at once (waits at most `timeout`).
    pub fn stop(mut self, timeout: Duration) {
        if let Some(stop) = self.stop.take() {
            let (ack, done) = tokio::sync::oneshot::channel();
            if stop.send(ack).is_ok() {
                let _ = wait_blocking(done, timeout);
            }
        }
    }
}

/// Wait for a oneshot from a thread that is not in the task's runtime.
fn wait_blocking(rx: tokio::sync::oneshot::Receiver<()>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut rx = rx;
    loop {
        match rx.try_recv() {
            Ok(()) => return true,
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => return false,
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

struct Task {
    client: Client,
    prefix: String,
    node: IpAddr,
    election: Election,
    role: Role,
    events: mpsc::UnboundedSender<Event>,
    status: Arc<Mutex<TaskStatus>>,
    /// Newest mod revision of a table seen (follower polls after it).
    last_revision: i64,
    /// Publications not yet acknowledged, by service (None: delete).
    queue: BTreeMap<ServiceKey, Option<PublishedTable>>,
    started: Instant,
    last_leader_check: Option<Instant>,
}

impl Task {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn note<T>(&self, r: &Result<T, String>) {
        if let Ok(mut s) = self.status.lock() {
            match r {
                Ok(_) => {
                    if !s.connected {
                        tracing::info!("etcd reachable");
                    }
                    s.connected = true;
                    s.error = None;
                    s.last_contact = Some(std::time::SystemTime::now());
                }
                Err(e) => {
                    if s.connected || s.error.is_none() {
                        tracing::warn!(error = %e, "etcd unreachable: forwarding goes on with the tables in force; retrying");
                    }
                    s.connected = false;
                    s.error = Some(e.clone());
                }
            }
        }
    }

    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Request>,
        mut stop: tokio::sync::oneshot::Receiver<tokio::sync::oneshot::Sender<()>>,
    ) {
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ack = &mut stop => {
                    if let Some(lease) = self.election.lease {
                        let _ = self.client.revoke(lease).await;
                    }
                    if let Ok(ack) = ack {
                        let _ = ack.send(());
                    }
                    return;
                }
                r = rx.recv() => {
                    let Some(Request::Publish(tables, deletes)) = r else { return };
                    for t in tables {
                        if let Some(k) = t.service_key() {
                            self.queue.insert(k, Some(t));
                        }
                    }
                    for k in deletes {
                        self.queue.insert(k, None);
                    }
                    while let Ok(Request::Publish(tables, deletes)) = rx.try_recv() {
                        for t in tables {
                            if let Some(k) = t.service_key() {
                                self.queue.insert(k, Some(t));
                            }
                        }
                        for k in deletes {
                            self.queue.insert(k, None);
                        }
                    }
                    if self.role == Role::Leader {
                        self.flush().await;
                    }
                }
                _ = poll.tick() => self.round().await,
            }
            if self.events.is_closed() {
                return;
            }
        }
    }

    /// One poll: the lease, the leader key, the role, then publish
    /// (leader) or follow (otherwise).
    async fn round(&mut self) {
        let ttl_s = self.election.ttl_ms.div_ceil(1000).max(2);
        match self.election.lease {
            None => {
                let r = self.client.grant(ttl_s).await;
                self.note(&r);
                if let Ok(id) = r {
                    self.election.granted(id, self.now_ms());
                }
            }
            Some(lease) if self.election.keepalive_due(self.now_ms()) => {
                let r = self.client.keepalive(lease).await;
                self.note(&r);
                if let Ok(ttl) = r {
                    self.election
                        .kept_alive(ttl.max(0) as u64 * 1000, self.now_ms());
                }
            }
            Some(_) => {}
        }
        let key = leader_key(&self.prefix);
        if let Some(lease) = self.election.lease {
            let mine = leader_value(self.node, lease);
            let check_due = self
                .last_leader_check
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(500));
            if !self.election.holds_key || check_due {
                self.last_leader_check = Some(Instant::now());
                let r = self.client.create_with_lease(&key, &mine, lease).await;
                self.note(&r);
                match r {
                    Ok(None) => {
                        self.election.holds_key = true;
                        self.set_leader(Some(self.node));
                    }
                    Ok(Some(holder)) => {
                        let value = holder
                            .as_ref()
                            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
                        self.election.holds_key = value.as_deref() == Some(mine.as_str());
                        self.set_leader(value.as_deref().and_then(leader_node));
                    }
                    Err(_) => {}
                }
            }
        }
        let role = if self.election.is_leader(self.now_ms()) {
            Role::Leader
        } else if self.status.lock().is_ok_and(|s| s.connected) || self.role != Role::Unknown {
            Role::Follower
        } else {
            Role::Unknown
        };
        if role != self.role {
            if role == Role::Leader {
                // Start from what was published last: fetch it all first.
                match self.snapshot().await {
                    Ok(()) => {}
                    Err(_) => return,
                }
            }
            if role != Role::Leader {
                // Whatever was queued is the next leader's to publish.
                self.queue.clear();
            }
            tracing::info!(role = role.name(), "cluster role");
            self.role = role;
            let _ = self.events.send(Event::Role(role));
        }
        if self.role == Role::Leader {
            if !self.queue.is_empty() {
                self.flush().await;
            }
        } else if self.status.lock().is_ok_and(|s| s.connected) {
            self.follow().await;
        }
    }

    fn set_leader(&self, leader: Option<IpAddr>) {
        if let Ok(mut s) = self.status.lock() {
            if s.leader != leader {
                tracing::info!(leader = ?leader, "cluster leader");
            }
            s.leader = leader;
        }
    }

    /// Every published table, as one [`Event::Tables`] with `all`.
    async fn snapshot(&mut self) -> Result<(), String> {
        let prefix = tables_prefix(&self.prefix);
        let r = self
            .client
            .range(&prefix, Some(&prefix_end(&prefix)), 0)
            .await;
        self.note(&r);
        let r = r?;
        let tables = decode_kvs(&r.kvs);
        self.last_revision = r.kvs.iter().map(|k| k.mod_revision).max().unwrap_or(0);
        let _ = self.events.send(Event::Tables {
            tables,
            all: true,
            revision: r.revision,
        });
        Ok(())
    }

    /// Tables changed since the last poll. After etcd lost its data (its
    /// revision went back) everything is read again.
    async fn follow(&mut self) {
        let prefix = tables_prefix(&self.prefix);
        let r = self
            .client
            .range(&prefix, Some(&prefix_end(&prefix)), self.last_revision + 1)
            .await;
        self.note(&r);
        let Ok(r) = r else { return };
        if r.revision < self.last_revision {
            let _ = self.snapshot().await;
            return;
        }
        if r.kvs.is_empty() {
            return;
        }
        self.last_revision = r
            .kvs
            .iter()
            .map(|k| k.mod_revision)
            .max()
            .unwrap_or(self.last_revision);
        let _ = self.events.send(Event::Tables {
            tables: decode_kvs(&r.kvs),
            all: false,
            revision: r.revision,
        });
    }

    /// Publish what is queued, fenced on our leader key.
    async fn flush(&mut self) {
        let Some(lease) = self.election.lease else {
            return;
        };
        let pairs: Vec<(String, Option<String>)> = self
            .queue
            .iter()
            .map(|(k, t)| {
                (
                    table_key(&self.prefix, k),
                    t.as_ref()
                        .map(|t| serde_json::to_string(t).unwrap_or_default()),
                )
            })
            .collect();
        let r = self
            .client
            .put_fenced(
                &leader_key(&self.prefix),
                &leader_value(self.node, lease),
                &pairs,
            )
            .await;
        self.note(&r);
        match r {
            Ok(Some(revision)) => {
                self.queue.clear();
                self.last_revision = self.last_revision.max(revision);
                let _ = self.events.send(Event::Published(revision));
            }
            Ok(None) => {
                tracing::warn!("publication refused: this balancer no longer holds the leader key");
                self.election.holds_key = false;
            }
            Err(_) => {}
        }
    }
}

/// The tables of a range (values that do not decode are skipped).
fn decode_kvs(kvs: &[Kv]) -> Vec<(i64, PublishedTable)> {
    kvs.iter()
        .filter_map(|kv| {
            serde_json::from_slice::<PublishedTable>(&kv.value)
                .ok()
                .map(|t| (kv.mod_revision, t))
        })
        .collect()
}
