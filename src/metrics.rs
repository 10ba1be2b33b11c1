//! Prometheus metrics: about once a second the control loop hands the
//! metrics server a copy of the control plane's state ([`Shared::publish`],
//! one reference count per service); the HTTP server (hyper, on its own
//! runtime) turns it and the data plane's counters into a [`Snapshot`] when
//! `/metrics` is asked for, off the loop, at most once per hand-over, and
//! encodes it with the prometheus-client crate (text format).
//!
//! Names follow Prometheus conventions: `nilb_` prefix, base units, `_total`
//! for counters. The host's CPU comes from /proc/stat, both as node_exporter
//! style counters (`nilb_host_cpu_seconds_total{mode}`) and as a gauge of the
//! recent utilisation (`nilb_host_cpu_utilization_ratio`, 0..1) that other
//! nodes' dynamic weights scrape.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tracing::{info, warn};

/// Labels of one sample.
pub type Labels = Vec<(String, String)>;

/// Counter or gauge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Monotonic count (name ends in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
}

/// One metric family: name, help, type and samples.
#[derive(Clone, Debug)]
pub struct Family {
    /// Full name, e.g. `nilb_backend_packets_total`.
    pub name: String,
    /// One-line meaning.
    pub help: String,
    /// Counter or gauge.
    pub kind: Kind,
    /// Label sets and values.
    pub samples: Vec<(Labels, f64)>,
}

/// Everything exported at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    families: Vec<Family>,
}

impl Snapshot {
    /// Add a family (or samples to an existing one of the same name).
    pub fn add(&mut self, name: &str, help: &str, kind: Kind, labels: Labels, value: f64) {
        match self.families.iter_mut().find(|f| f.name == name) {
            Some(f) => f.samples.push((labels, value)),
            None => self.families.push(Family {
                name: name.to_string(),
                help: help.to_string(),
                kind,
                samples: vec![(labels, value)],
            }),
        }
    }

    /// The families, in insertion order.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// Text exposition of this snapshot.
    pub fn encode(&self) -> Result<String> {
        self.clone().into_text()
    }

    /// Text exposition of this snapshot, consuming it (no copy).
    pub fn into_text(self) -> Result<String> {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(SnapshotCollector(Arc::new(self))));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .context("encoding metrics")?;
        Ok(out)
    }
}

/// Label helper: `labels(&[("service", "web")])`.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[derive(Debug)]
struct SnapshotCollector(Arc<Snapshot>);

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = &self.0;
        for f in &snap.families {
            // prometheus-client appends `_total` to counter names itself.
            let (name, metric_type) = match f.kind {
                Kind::Counter => (
                    f.name.strip_suffix("_total").unwrap_or(&f.name),
                    prometheus_client::metrics::MetricType::Counter,
                ),
                Kind::Gauge => (
                    f.name.as_str(),
                    prometheus_client::metrics::MetricType::Gauge,
                ),
            };
            let mut family = encoder.encode_descriptor(name, &f.help, None, metric_type)?;
            for (labels, value) in &f.samples {
                let e = family.encode_family(labels)?;
                match f.kind {
                    Kind::Counter => ConstCounter::new(*value).encode(e)?,
                    Kind::Gauge => ConstGauge::new(*value).encode(e)?,
                }
            }
        }
        Ok(())
    }
}

/// What the snapshot is built from: the control loop hands these over
/// about once a second (a copy of the control plane costs one reference
/// count per service), and the server builds and encodes the snapshot when
/// `/metrics` is asked for, off the loop (docs/design.md "Control plane").
#[derive(Clone)]
struct Inputs {
    cp: crate::control::ControlPlane,
    facts: DaemonFacts,
    cpu: Option<(CpuTimes, Option<f64>)>,
    /// Counts the hand-overs: a text encoded from the same inputs is
    /// served again.
    generation: u64,
}

#[derive(Default)]
struct SharedInner {
    /// Where the data plane's counters are read (handles of their maps).
    stats: Mutex<Option<Arc<dyn StatsSource + Send + Sync>>>,
    inputs: Mutex<Option<Inputs>>,
    /// The last text served and the generation of its inputs.
    text: Mutex<Option<(u64, Arc<String>)>>,
}

/// The inputs of the latest snapshot, shared between the control loop and
/// the metrics server.
#[derive(Clone, Default)]
pub struct Shared(Arc<SharedInner>);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("metrics::Shared")
    }
}

impl Shared {
    /// Where the server reads the data plane's counters from.
    pub fn set_source(&self, stats: Arc<dyn StatsSource + Send + Sync>) {
        if let Ok(mut s) = self.0.stats.lock() {
            *s = Some(stats);
        }
    }

    /// Replace the inputs of the snapshot (cheap: no counters are read
    /// and nothing is encoded here). The control plane handed over before
    /// is dropped, so a replaced state is not kept alive by the metrics.
    pub fn publish(
        &self,
        cp: crate::control::ControlPlane,
        facts: DaemonFacts,
        cpu: Option<(CpuTimes, Option<f64>)>,
    ) {
        if let Ok(mut s) = self.0.inputs.lock() {
            let generation = s.as_ref().map_or(1, |i| i.generation + 1);
            *s = Some(Inputs {
                cp,
                facts,
                cpu,
                generation,
            });
        }
    }

    /// The snapshot of the latest inputs, built now (counters read from
    /// the data plane), or None before the first hand-over.
    pub fn snapshot(&self) -> Option<Snapshot> {
        let stats = self.0.stats.lock().ok()?.clone()?;
        let inputs = self.0.inputs.lock().ok()?.clone()?;
        Some(build(&*stats, &inputs.cp, inputs.facts, inputs.cpu))
    }

    /// The text exposition of the latest inputs: built and encoded at most
    /// once per hand-over, whoever asks.
    pub fn render(&self) -> Arc<String> {
        // One renderer at a time: concurrent scrapes wait for the text.
        let Ok(mut cache) = self.0.text.lock() else {
            return Arc::new("# metrics unavailable\n".into());
        };
        let generation = self
            .0
            .inputs
            .lock()
            .ok()
            .and_then(|i| i.as_ref().map(|i| i.generation))
            .unwrap_or(0);
        if let Some((g, text)) = cache.as_ref() {
            if *g == generation {
                return text.clone();
            }
        }
        let text = match self.snapshot().unwrap_or_default().into_text() {
            Ok(t) => t,
            Err(_) => "# encoding failed\n".into(),
        };
        let text = Arc::new(text);
        *cache = Some((generation, text.clone()));
        text
    }
}

/// Serve `GET /metrics` (and `/` with a pointer) on `addr` on `runtime`.
pub fn serve(runtime: &tokio::runtime::Runtime, addr: SocketAddr, shared: Shared) -> Result<()> {
    // Bind now (so a taken port fails the start), serve on `runtime`.
    let std_listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("binding the metrics endpoint {addr}"))?;
    std_listener
        .set_nonblocking(true)
        .context("metrics listener")?;
    if !addr.ip().is_loopback() {
        warn!(%addr, "metrics endpoint listens beyond loopback, as asked");
    }
    info!(%addr, "metrics at http://{addr}/metrics");
    runtime.spawn(async move {
        let listener = match tokio::net::TcpListener::from_std(std_listener) {
            Ok(l) => l,
            Err(e) => {
                warn!("metrics endpoint: {e}");
                return;
            }
        };
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let shared = shared.clone();
                        async move {
                            let (status, ctype, body) = match (req.method(), req.uri().path()) {
                                (&hyper::Method::GET, "/metrics") => {
                                    // Building reads every counter: a
                                    // blocking job, not on a check's worker.
                                    let text = tokio::task::spawn_blocking(move || shared.render())
                                        .await
                                        .map(|t| t.to_string())
                                        .unwrap_or_else(|_| "# metrics unavailable\n".into());
                                    (
                                        200,
                                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                        text,
                                    )
                                }
                                (&hyper::Method::GET, "/") => {
                                    (200, "text/plain", "nilb: see /metrics\n".to_string())
                                }
                                _ => (404, "text/plain", "not found\n".to_string()),
                            };
                            hyper::Response::builder()
                                .status(status)
                                .header("content-type", ctype)
                                .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    Ok(())
}

/// CPU time of the host from /proc/stat (first line, all CPUs), seconds by
/// mode.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTimes {
    /// user, nice, system, idle, iowait, irq, softirq, steal (seconds).
    pub modes: [f64; 8],
}

/// Mode names in /proc/stat order.
pub const CPU_MODES: [&str; 8] = [
    "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
];

impl CpuTimes {
    /// Parse the aggregate `cpu` line of /proc/stat (ticks of `hz`).
    pub fn parse(stat: &str, hz: f64) -> Option<CpuTimes> {
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let mut modes = [0.0; 8];
        for (i, v) in line.split_whitespace().skip(1).take(8).enumerate() {
            modes[i] = v.parse::<f64>().ok()? / hz;
        }
        Some(CpuTimes { modes })
    }

    /// Read /proc/stat now.
    pub fn read() -> Option<CpuTimes> {
        let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        CpuTimes::parse(&std::fs::read_to_string("/proc/stat").ok()?, hz)
    }

    /// (busy, total) seconds: busy is everything but idle and iowait.
    pub fn busy_total(&self) -> (f64, f64) {
        let total: f64 = self.modes.iter().sum();
        (total - self.modes[3] - self.modes[4], total)
    }
}

/// Host CPU utilisation over a sliding window of samples (about 5 s).
#[derive(Debug, Default)]
pub struct HostCpu {
    samples: VecDeque<(Instant, CpuTimes)>,
}

impl HostCpu {
    /// Take a sample; returns the latest times.
    pub fn sample(&mut self) -> Option<CpuTimes> {
        let t = CpuTimes::read()?;
        let now = Instant::now();
        self.samples.push_back((now, t));
        while self.samples.len() > 2 && now.duration_since(self.samples[0].0).as_secs_f64() > 5.0 {
            self.samples.pop_front();
        }
        Some(t)
    }

    /// Utilisation 0..1 across the window, if two samples exist.
    pub fn utilisation(&self) -> Option<f64> {
        let (a, b) = (self.samples.front()?.1, self.samples.back()?.1);
        crate::weights::utilisation_between(a.busy_total(), b.busy_total())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_follows_conventions() {
        let mut s = Snapshot::default();
        s.add(
            "nilb_backend_packets_total",
            "Packets sent to a backend.",
            Kind::Counter,
            labels(&[("service", "web"), ("backend", "10.0.0.12")]),
            42.0,
        );
        s.add(
            "nilb_service_fail_open",
            "1 when failing open.",
            Kind::Gauge,
            labels(&[("service", "web")]),
            0.0,
        );
        let text = s.encode().unwrap();
        assert!(
            text.contains("# TYPE nilb_backend_packets counter"),
            "{text}"
        );
        assert!(
            text.contains("nilb_backend_packets_total{service=\"web\",backend=\"10.0.0.12\"} 42"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE nilb_service_fail_open gauge"),
            "{text}"
        );
        assert!(
            text.contains("nilb_service_fail_open{service=\"web\"} 0"),
            "{text}"
        );
        // And nilb's own scraper can read what it exports.
        s.add(
            "nilb_host_cpu_utilization_ratio",
            "CPU.",
            Kind::Gauge,
            vec![],
            0.25,
        );
        let text = s.encode().unwrap();
        assert_eq!(
            crate::health::load::parse_cpu(&text),
            Ok(crate::types::LoadSample::Utilisation(0.25))
        );
    }

    /// Counters that count: every backend slot has sent `slot` packets;
    /// reads are counted. The kernel: Debian 12's, without the crypto
    /// kfuncs.
    #[derive(Default)]
    struct Counting {
        backend_reads: std::sync::atomic::AtomicUsize,
        kernel: std::sync::OnceLock<crate::features::KernelFeatures>,
    }

    impl StatsSource for Counting {
        fn counters(&self) -> Result<Vec<u64>> {
            Ok(vec![0; crate::dataplane::abi::COUNTER_NAMES.len()])
        }
        fn service_stats(&self, _index: u32) -> Result<crate::abi_sys::nilb_service_stats> {
            Ok(Default::default())
        }
        fn backend_stats(&self, slot: u32) -> Result<crate::abi_sys::nilb_backend_stats> {
            self.backend_reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(crate::abi_sys::nilb_backend_stats {
                packets: slot as u64,
                ..Default::default()
            })
        }
        fn filter_stats(&self, _id: u16) -> Result<crate::abi_sys::nilb_filter_stats> {
            Ok(Default::default())
        }
        fn kernel_features(&self) -> Option<&crate::features::KernelFeatures> {
            use crate::features::{KernelFeatures, FEATURES, QUIC_LB_CRYPTO};
            Some(self.kernel.get_or_init(|| {
                KernelFeatures::new(
                    "6.1.0-57-amd64",
                    FEATURES.iter().map(|f| f.name != QUIC_LB_CRYPTO).collect(),
                )
            }))
        }
    }

    fn control_plane() -> crate::control::ControlPlane {
        let cfg = crate::config::Config::parse(
            "version: 1\ncluster: {hash_seed: 1, balancers: [10.0.0.1]}\nservices:\n  \
             - {name: web, vip: 10.0.0.100, port: 80, protocol: tcp, health_check: {none: {}}, \
             backends: [{dip: 10.0.0.11}, {dip: 10.0.0.12}]}\n",
        )
        .unwrap();
        crate::control::ControlPlane::new(cfg, 0)
    }

    #[test]
    fn the_server_builds_the_snapshot_from_what_the_loop_hands_over() {
        let shared = Shared::default();
        let stats = Arc::new(Counting::default());
        shared.set_source(stats.clone());
        // Nothing handed over yet: nothing to build.
        assert!(shared.snapshot().is_none());
        let cp = control_plane();
        let key = *cp.services().keys().next().unwrap();
        let state = cp.services()[&key].clone();
        shared.publish(cp.clone(), DaemonFacts::default(), None);
        // Held by `cp`, `state` and the copy handed over.
        assert_eq!(Arc::strong_count(&state), 3);
        let text = shared.render();
        // Each backend's counters are read once per build: 2 backends.
        assert_eq!(
            stats
                .backend_reads
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
        // The kernel's features, each 1 or 0.
        assert!(
            text.contains(
                "nilb_kernel_feature{feature=\"quic_lb_crypto\",kind=\"optional\",since=\"6.10\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "nilb_kernel_feature{feature=\"redirect_neigh\",kind=\"base\",since=\"5.10\"} 1"
            ),
            "{text}"
        );
        // Slots 1 and 2: the service sums them.
        assert!(
            text.contains(
                "nilb_service_packets_total{service=\"web\",key=\"10.0.0.100:80/tcp\"} 3"
            ),
            "{text}"
        );
        // The same hand-over is not built again.
        assert!(Arc::ptr_eq(&text, &shared.render()));
        assert_eq!(
            stats
                .backend_reads
                .load(std::sync::atomic::Ordering::Relaxed),
            2
        );
        // A new hand-over replaces the old state (not kept alive by the
        // metrics) and is built anew when asked for.
        let next = cp.clone();
        drop(cp);
        shared.publish(next, DaemonFacts::default(), None);
        assert_eq!(Arc::strong_count(&state), 2, "the state copy and `next`");
        assert!(!Arc::ptr_eq(&text, &shared.render()));
        assert_eq!(
            stats
                .backend_reads
                .load(std::sync::atomic::Ordering::Relaxed),
            4
        );
    }

    #[test]
    fn proc_stat() {
        let t = CpuTimes::parse("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n", 100.0).unwrap();
        assert_eq!(t.busy_total(), (1.5, 10.0));
    }
}

/// Inputs of a snapshot that only the daemon knows.
#[derive(Clone, Copy, Debug, Default)]
pub struct DaemonFacts {
    /// Applied and rejected reloads since start.
    pub reloads: (u64, u64),
    /// Whether this node runs the XDP balancer (attached, as the kernel
    /// reports it).
    pub balancer: bool,
    /// Whether the config makes this node a balancer.
    pub balancer_configured: bool,
    /// Whether the last reload took effect (None: none since start).
    pub last_reload_ok: Option<bool>,
    /// Neighbour entries of hops refreshed, resolved, and found changed
    /// (see [`crate::neighbours`]).
    pub neighbour_refreshes: (u64, u64, u64),
}

/// Where a snapshot reads the data plane's counters: the BPF maps of the
/// running data plane, or a fake in tests.
pub trait StatsSource {
    /// All counters, in `COUNTER_NAMES` order.
    fn counters(&self) -> Result<Vec<u64>>;
    /// Stats of the service with stats index `index`, summed over CPUs.
    fn service_stats(&self, index: u32) -> Result<crate::abi_sys::nilb_service_stats>;
    /// Balancer stats of backend slot `slot`, summed over CPUs.
    fn backend_stats(&self, slot: u32) -> Result<crate::abi_sys::nilb_backend_stats>;
    /// Packets and bytes the edge filter rule `id` dropped, summed over CPUs.
    fn filter_stats(&self, id: u16) -> Result<crate::abi_sys::nilb_filter_stats>;
    /// NAT mode's flow-table sweep (flows now, TCP and UDP entries removed
    /// so far), once it has run; None otherwise.
    fn nat_sweep(&self) -> Option<(u64, u64, u64)> {
        None
    }
    /// The running kernel's features (None: not known to this source).
    fn kernel_features(&self) -> Option<&crate::features::KernelFeatures> {
        None
    }
}

impl StatsSource for crate::dataplane::Dataplane<'_> {
    fn counters(&self) -> Result<Vec<u64>> {
        crate::dataplane::Dataplane::counters(self)
    }
    fn service_stats(&self, index: u32) -> Result<crate::abi_sys::nilb_service_stats> {
        crate::dataplane::Dataplane::service_stats(self, index)
    }
    fn backend_stats(&self, slot: u32) -> Result<crate::abi_sys::nilb_backend_stats> {
        crate::dataplane::Dataplane::backend_stats(self, slot)
    }
    fn filter_stats(&self, id: u16) -> Result<crate::abi_sys::nilb_filter_stats> {
        crate::dataplane::Dataplane::filter_stats(self, id)
    }
    fn kernel_features(&self) -> Option<&crate::features::KernelFeatures> {
        Some(crate::dataplane::Dataplane::kernel_features(self))
    }
}

impl StatsSource for crate::dataplane::StatsMaps {
    fn counters(&self) -> Result<Vec<u64>> {
        crate::dataplane::StatsMaps::counters(self)
    }
    fn nat_sweep(&self) -> Option<(u64, u64, u64)> {
        crate::dataplane::StatsMaps::nat_sweep(self)
    }
    fn service_stats(&self, index: u32) -> Result<crate::abi_sys::nilb_service_stats> {
        crate::dataplane::StatsMaps::service_stats(self, index)
    }
    fn backend_stats(&self, slot: u32) -> Result<crate::abi_sys::nilb_backend_stats> {
        crate::dataplane::StatsMaps::backend_stats(self, slot)
    }
    fn filter_stats(&self, id: u16) -> Result<crate::abi_sys::nilb_filter_stats> {
        crate::dataplane::StatsMaps::filter_stats(self, id)
    }
    fn kernel_features(&self) -> Option<&crate::features::KernelFeatures> {
        // The daemon's own probe (the maps belong to its process).
        Some(crate::dataplane::probe::kernel_features())
    }
}

/// Build the snapshot of everything exported: data-plane counters (global,
/// per service, per backend), health and table state, reloads, host CPU.
pub fn build(
    dp: &dyn StatsSource,
    cp: &crate::control::ControlPlane,
    facts: DaemonFacts,
    cpu: Option<(CpuTimes, Option<f64>)>,
) -> Snapshot {
    use crate::dataplane::abi::COUNTER_NAMES;
    let mut s = Snapshot::default();
    s.add(
        "nilb_build_info",
        "nilb version (value 1).",
        Kind::Gauge,
        labels(&[("version", env!("CARGO_PKG_VERSION"))]),
        1.0,
    );
    if let Some(k) = dp.kernel_features() {
        for f in k.states() {
            let kind = match f.kind {
                crate::features::Kind::Base => "base",
                crate::features::Kind::Optional => "optional",
            };
            s.add(
                "nilb_kernel_feature",
                "1 when the running kernel has the feature (nilb features; off: what it serves is off, and config asking for it is refused).",
                Kind::Gauge,
                labels(&[("feature", &f.name), ("kind", kind), ("since", &f.since)]),
                if f.on { 1.0 } else { 0.0 },
            );
        }
    }
    s.add(
        "nilb_balancer",
        "1 when this node runs the XDP balancer (attached, as the kernel reports it).",
        Kind::Gauge,
        vec![],
        if facts.balancer { 1.0 } else { 0.0 },
    );
    s.add(
        "nilb_balancer_configured",
        "1 when the config makes this node a balancer (differs from nilb_balancer when attaching or detaching XDP failed).",
        Kind::Gauge,
        vec![],
        if facts.balancer_configured { 1.0 } else { 0.0 },
    );
    s.add(
        "nilb_last_reload_success",
        "1 when the last reload took effect (or none happened since start), 0 when it was rejected or failed (the running configuration was kept).",
        Kind::Gauge,
        vec![],
        if facts.last_reload_ok == Some(false) {
            0.0
        } else {
            1.0
        },
    );
    if let Ok(values) = dp.counters() {
        for (name, v) in COUNTER_NAMES.iter().zip(values) {
            let (family, help, result) = match name.split_once('_') {
                Some(("xdp", rest)) => (
                    "nilb_xdp_packets_total",
                    "Packets seen by the XDP balancer, by outcome (`nilb stats` explains each).",
                    rest,
                ),
                Some(("tc", rest)) => (
                    "nilb_tc_packets_total",
                    "Packets seen by the TC second-chance program, by outcome (`nilb stats` explains each).",
                    rest,
                ),
                Some(("nat", rest)) => (
                    "nilb_nat_packets_total",
                    "NAT mode: packets translated or dropped by the backend's NAT rules, by outcome (`nilb stats` explains each).",
                    rest,
                ),
                _ => continue,
            };
            s.add(
                family,
                help,
                Kind::Counter,
                labels(&[("result", result)]),
                v as f64,
            );
        }
    }
    if let Some((flows, tcp, udp)) = dp.nat_sweep() {
        s.add(
            "nilb_nat_flows",
            "NAT mode: flows in this node's nat_flows table at the last sweep.",
            Kind::Gauge,
            vec![],
            flows as f64,
        );
        for (proto, v) in [("tcp", tcp), ("udp", udp)] {
            s.add(
                "nilb_nat_flows_removed_total",
                "NAT mode: flow entries the sweep removed (TCP: socket gone; UDP: idle past cluster.nat.udp_timeout_ms).",
                Kind::Counter,
                labels(&[("protocol", proto)]),
                v as f64,
            );
        }
    }
    for (key, st) in cp.services() {
        let name = cp
            .config()
            .service(key)
            .map(|x| x.name.clone())
            .unwrap_or_default();
        let key_s = key.to_string();
        let svc = [("service", name.as_str()), ("key", key_s.as_str())];
        if let Ok(ss) = dp.service_stats(st.index) {
            let rows = [
                (
                    "nilb_service_balancer_dropped_packets_total",
                    "Packets the balancer dropped because their bucket had no first hop.",
                    ss.xdp_drops,
                ),
                (
                    "nilb_service_decapsulated_packets_total",
                    "Packets of the service this node accepted (decapsulated).",
                    ss.tc_decap,
                ),
                (
                    "nilb_service_second_chance_forwards_total",
                    "Packets of the service this node passed on to the next hop.",
                    ss.tc_forward,
                ),
                (
                    "nilb_service_unknown_flow_dropped_packets_total",
                    "Packets of the service this node dropped as unknown flows with no hop left.",
                    ss.tc_drops,
                ),
            ];
            for (n, h, v) in rows {
                s.add(n, h, Kind::Counter, labels(&svc), v as f64);
            }
        }
        // The balancer counts per (service, backend); the service's totals
        // are their sum over its current backends (a removed backend's
        // counts leave the sum, which Prometheus reads as a reset).
        // Each backend's counters read once (one system call per slot).
        let backend_stats: Vec<_> = st
            .backends
            .values()
            .map(|b| dp.backend_stats(b.slot).ok())
            .collect();
        let (mut packets, mut bytes, mut syns) = (0u64, 0u64, 0u64);
        for bs in backend_stats.iter().flatten() {
            packets += bs.packets;
            bytes += bs.bytes;
            syns += bs.syns;
        }
        for (n, h, v) in [
            (
                "nilb_service_packets_total",
                "Packets the balancer sent to the service's backends (sum over its current backends).",
                packets,
            ),
            (
                "nilb_service_bytes_total",
                "L3 bytes (before encapsulation) the balancer sent to the service's backends (sum over its current backends).",
                bytes,
            ),
            (
                "nilb_service_new_connections_total",
                "TCP SYNs the balancer sent to the service's backends (sum over its current backends).",
                syns,
            ),
        ] {
            s.add(n, h, Kind::Counter, labels(&svc), v as f64);
        }
        s.add(
            "nilb_service_fail_open",
            "1 when no backend is healthy and every backend not offline is used.",
            Kind::Gauge,
            labels(&svc),
            if st.fail_open() { 1.0 } else { 0.0 },
        );
        for mode in [
            crate::control::Mode::Normal,
            crate::control::Mode::DrainedFallback,
            crate::control::Mode::Panic,
            crate::control::Mode::FailOpen,
        ] {
            let mut l = labels(&svc);
            l.push(("mode".into(), mode.name().into()));
            s.add(
                "nilb_service_mode",
                "1 for the mode the service's table is in: normal, drained-fallback (healthy drained backends serve), panic (below panic_threshold_percent) or fail-open.",
                Kind::Gauge,
                l,
                if st.mode == mode { 1.0 } else { 0.0 },
            );
        }
        s.add(
            "nilb_service_exiting_fail_open",
            "1 while the service leaves panic or fail-open in paced steps.",
            Kind::Gauge,
            labels(&svc),
            if st.exiting { 1.0 } else { 0.0 },
        );
        s.add(
            "nilb_service_pending_bucket_moves",
            "Voluntary bucket moves still to be made (paced).",
            Kind::Gauge,
            labels(&svc),
            st.pending as f64,
        );
        s.add(
            "nilb_service_table_buckets",
            "Buckets in the service's table.",
            Kind::Gauge,
            labels(&svc),
            st.table.size() as f64,
        );
        for (kind, v) in [
            ("forced", st.moves_total.0),
            ("voluntary", st.moves_total.1),
            ("swap", st.moves_total.2),
        ] {
            let mut l = labels(&svc);
            l.push(("kind".into(), kind.into()));
            s.add("nilb_bucket_moves_total", "Buckets whose first hop changed (swap: back to its second hop; a subset of forced and voluntary).", Kind::Counter, l, v as f64);
        }
        let firsts = st.table.shares();
        let seconds = st.table.second_shares();
        for (b, stats) in st.backends.values().zip(&backend_stats) {
            let dip = b.config.dip.to_string();
            let host = b.config.hostname.clone().unwrap_or_else(|| dip.clone());
            let bl = labels(&[
                ("service", name.as_str()),
                ("backend", dip.as_str()),
                ("hostname", host.as_str()),
            ]);
            if let Some(bs) = stats {
                s.add(
                    "nilb_backend_packets_total",
                    "Packets the balancer sent to the backend as first hop.",
                    Kind::Counter,
                    bl.clone(),
                    bs.packets as f64,
                );
                s.add(
                    "nilb_backend_bytes_total",
                    "L3 bytes (before encapsulation) sent to the backend as first hop.",
                    Kind::Counter,
                    bl.clone(),
                    bs.bytes as f64,
                );
                s.add(
                    "nilb_backend_new_connections_total",
                    "TCP SYNs the balancer sent to the backend.",
                    Kind::Counter,
                    bl.clone(),
                    bs.syns as f64,
                );
            }
            let healthy = b.health.is_up();
            s.add(
                "nilb_backend_healthy",
                "1 when the backend passes its health check (0 when failing or not checked yet).",
                Kind::Gauge,
                bl.clone(),
                if healthy { 1.0 } else { 0.0 },
            );
            s.add(
                "nilb_backend_encap_healthy",
                "1 when the backend passes its encapsulated check (GUE SYN to the VIP), is not checked yet, or its service has none.",
                Kind::Gauge,
                bl.clone(),
                if b.encap.health == crate::health::Health::Down { 0.0 } else { 1.0 },
            );
            s.add(
                "nilb_backend_health_transitions_total",
                "Up/down transitions of the backend's health.",
                Kind::Counter,
                bl.clone(),
                b.health.transitions as f64,
            );
            for (hop, map) in [("first", &firsts), ("second", &seconds)] {
                let mut l = bl.clone();
                l.push(("hop".into(), hop.into()));
                s.add(
                    "nilb_backend_buckets",
                    "Buckets in which the backend is first or second hop.",
                    Kind::Gauge,
                    l,
                    map.get(&b.config.dip).copied().unwrap_or(0) as f64,
                );
            }
            for (kind, v) in [
                ("configured", b.config.weight as f64),
                ("effective", b.effective_weight),
            ] {
                let mut l = bl.clone();
                l.push(("kind".into(), kind.into()));
                s.add(
                    "nilb_backend_weight",
                    "Configured and effective (dynamic) weight.",
                    Kind::Gauge,
                    l,
                    v,
                );
            }
            if let Some((v, _)) = b.load.reading {
                s.add("nilb_backend_load", "Last load reading of dynamic weights: CPU utilisation ratio, or new connections per second.", Kind::Gauge, bl.clone(), v);
            }
            s.add(
                "nilb_backend_load_errors_total",
                "Load readings of dynamic weights that failed.",
                Kind::Counter,
                bl.clone(),
                b.load.errors as f64,
            );
        }
    }
    for (kind, v) in [
        ("refreshed", facts.neighbour_refreshes.0),
        ("resolved", facts.neighbour_refreshes.1),
        ("changed", facts.neighbour_refreshes.2),
    ] {
        s.add(
            "nilb_neighbour_refreshes_total",
            "Neighbour entries of hops re-resolved because the kernel had not confirmed them (refreshed), resolved because missing or failed (resolved), and refreshes that found a new MAC address (changed).",
            Kind::Counter,
            labels(&[("kind", kind)]),
            v as f64,
        );
    }
    for r in &cp.filters().rules {
        let scope = r.ident.scope.to_string();
        let l = labels(&[
            ("rule", r.ident.name.as_str()),
            ("scope", scope.as_str()),
            ("kind", r.ident.kind.as_str()),
            ("dry_run", if r.dry_run { "true" } else { "false" }),
        ]);
        if let Ok(st) = dp.filter_stats(r.id) {
            s.add(
                "nilb_filter_dropped_packets_total",
                "Packets an edge filter rule dropped (dry_run=\"true\": would have dropped).",
                Kind::Counter,
                l.clone(),
                st.packets as f64,
            );
            s.add(
                "nilb_filter_dropped_bytes_total",
                "L3 bytes of the packets an edge filter rule dropped (dry_run=\"true\": would have dropped).",
                Kind::Counter,
                l.clone(),
                st.bytes as f64,
            );
        }
        if r.rate.is_none() {
            s.add(
                "nilb_filter_prefixes",
                "IPv4 prefixes of a deny or allow rule (inline and from its list files).",
                Kind::Gauge,
                l,
                r.prefixes() as f64,
            );
        }
    }
    for (result, v) in [("success", facts.reloads.0), ("failure", facts.reloads.1)] {
        s.add(
            "nilb_reloads_total",
            "Configuration reloads (SIGHUP) applied or rejected.",
            Kind::Counter,
            labels(&[("result", result)]),
            v as f64,
        );
    }
    if let Some((times, util)) = cpu {
        for (mode, v) in CPU_MODES.iter().zip(times.modes) {
            s.add(
                "nilb_host_cpu_seconds_total",
                "CPU time of the host by mode, all CPUs (/proc/stat).",
                Kind::Counter,
                labels(&[("mode", mode)]),
                v,
            );
        }
        if let Some(u) = util {
            s.add(crate::health::load::CPU_GAUGE, "Host CPU utilisation over the last seconds, 0..1 (busy = all but idle and iowait).", Kind::Gauge, vec![], u);
        }
    }
    s
}
