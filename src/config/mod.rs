//! The YAML configuration (shared/CONFIG.md): schema, defaults and complete
//! validation before anything is applied.
//!
//! [`Config::parse`] either returns a fully validated [`Config`] or a
//! [`ConfigError`] listing every problem it found, each with the field path
//! (`services[1].backends[0].weight`) and, where known, line and column.
//! Shape errors (syntax, unknown or duplicate keys, wrong types, missing
//! fields) stop at the first one; semantic checks then report all problems.
//!
//! Implemented schema: `version`, `cluster` (hash_seed, balancers, gue_port,
//! unknown_flow), `defaults` (table_size, health_check, rebalance), `services`
//! with name, vip, port, protocol, table_size, health_check and backends (dip,
//! hostname, weight, state) and dynamic_weight (source cpu|qps, metrics_port,
//! target_percent and tuning knobs).
//!
//! Health checks accept CONFIG.md's shape (`health_check: {http: {...},
//! fall_count, ...}`) and the Ni/kglb nesting (`health_check: {checker: {http:
//! {...}}, fall_count, interval_ms, rise_count}`). A service without a checker
//! gets a TCP connect check on its port (TCP services) or none (UDP).

mod yaml;

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::path::Path;

use serde::Deserialize;

pub use yaml::Position;

use crate::dataplane::limits;

/// GUE UDP port when `cluster.gue_port` is absent (glb-director's).
pub const DEFAULT_GUE_PORT: u16 = 19523;
/// Buckets per service when neither the service nor `defaults` say.
pub const DEFAULT_TABLE_SIZE: u32 = 4096;
/// Smallest table a service may have.
pub const MIN_TABLE_SIZE: u32 = 16;
/// A table needs this many buckets per listed backend: with fewer, equal
/// weights cannot be honoured to within 1/16 (about 6 %) of a share.
pub const MIN_BUCKETS_PER_BACKEND: u32 = 16;
/// Weight when a backend gives none.
pub const DEFAULT_WEIGHT: u32 = 100;
/// Health-check and rebalance defaults (CONFIG.md).
pub const DEFAULT_INTERVAL_MS: u64 = 2000;
/// Default health-check timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 1000;
/// Default rise and fall counts.
pub const DEFAULT_RISE_FALL: u32 = 2;
/// Shortest health-check interval accepted.
pub const MIN_INTERVAL_MS: u64 = 100;
/// Default `rebalance.min_interval_ms`.
pub const DEFAULT_MIN_STEP_INTERVAL_MS: u64 = 10_000;
/// Default `rebalance.max_step_percent`.
pub const DEFAULT_MAX_STEP_PERCENT: u32 = 2;
/// Largest configuration file read, bytes.
pub const MAX_FILE_BYTES: usize = 4 << 20;
/// Most buckets over all services (16 bytes each in the data plane).
pub const MAX_TOTAL_BUCKETS: u64 = 4 << 20;
/// Problems printed in full; the rest are counted.
pub const MAX_PROBLEMS_SHOWN: usize = 100;
/// Default `rebalance.min_bucket_age_ms`.
pub const DEFAULT_MIN_BUCKET_AGE_MS: u64 = 300_000;

/// L4 protocol of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (IANA 6).
    Tcp,
    /// UDP (IANA 17).
    Udp,
}

impl Protocol {
    /// IANA protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => crate::hash::IPPROTO_TCP,
            Protocol::Udp => crate::hash::IPPROTO_UDP,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        })
    }
}

/// What the last hop does with a packet of a flow it does not know
/// (`cluster.unknown_flow`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownFlow {
    /// Drop and count it (default).
    #[default]
    Drop,
    /// Accept it locally; the stack answers a stray TCP segment with RST.
    Local,
}

/// Administrative state of a backend (CONFIG.md "States").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// Takes new connections.
    #[default]
    Active,
    /// No new connections; its buckets move away with it kept as second hop.
    Drained,
    /// Removed from first and second hop.
    Offline,
}

impl fmt::Display for BackendState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendState::Active => "active",
            BackendState::Drained => "drained",
            BackendState::Offline => "offline",
        })
    }
}

/// HTTP or HTTPS for an HTTP health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTPS; certificates are not verified (backends are addressed by IP and
    /// commonly use self-signed certificates).
    Https,
}

/// What a health check does against one backend.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Checker {
    /// GET `uri` on `port`; healthy when the status is one of `codes`.
    Http {
        /// http or https.
        scheme: Scheme,
        /// Path and query, starting with `/`.
        uri: String,
        /// Port on the backend's DIP (host order).
        port: u16,
        /// Accepted status codes.
        codes: Vec<u16>,
        /// Host header; default: the DIP.
        host: Option<String>,
    },
    /// A TCP connect to `port` on the DIP.
    Tcp {
        /// Port (host order).
        port: u16,
    },
    /// No check: every backend is always healthy.
    None,
}

/// A service's health check (kglb style): checker, cadence and thresholds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    /// What to do per check.
    pub checker: Checker,
    /// Time between checks of one backend, ms.
    pub interval_ms: u64,
    /// Hard limit on one check, ms (<= interval).
    pub timeout_ms: u64,
    /// Consecutive successes that bring a backend back.
    pub rise_count: u32,
    /// Consecutive failures that take a backend out.
    pub fall_count: u32,
}

/// Limits on voluntary table changes (weight changes, recoveries, drains).
/// Moves forced by failures and `offline` are immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rebalance {
    /// Voluntary steps at most this often, ms.
    pub min_interval_ms: u64,
    /// At most this percentage of a table's buckets per voluntary step.
    pub max_step_percent: u32,
    /// A bucket is not moved voluntarily again before this age, ms.
    pub min_bucket_age_ms: u64,
}

impl Default for Rebalance {
    fn default() -> Self {
        Rebalance {
            min_interval_ms: DEFAULT_MIN_STEP_INTERVAL_MS,
            max_step_percent: DEFAULT_MAX_STEP_PERCENT,
            min_bucket_age_ms: DEFAULT_MIN_BUCKET_AGE_MS,
        }
    }
}

/// Where a service's dynamic weights read backend load from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadSource {
    /// Each backend's CPU utilisation, scraped from a Prometheus text
    /// endpoint (`nilb_host_cpu_utilization_ratio`, or node_exporter's
    /// `node_cpu_seconds_total`).
    Cpu,
    /// The balancer's own count of new connections per backend, per unit of
    /// configured weight.
    Qps,
}

/// `dynamic_weight`: load-aware adjustment of effective weights.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DynamicWeight {
    /// Where load comes from.
    pub source: LoadSource,
    /// Port of each backend's metrics endpoint (cpu).
    pub metrics_port: u16,
    /// Path of the metrics endpoint (cpu), default `/metrics`.
    pub metrics_path: String,
    /// CPU utilisation (percent) above which a backend sheds weight even
    /// inside the deadband.
    pub target_percent: u32,
    /// How often loads are read and weights adjusted, ms.
    pub interval_ms: u64,
    /// Loads within this many percentage points of each other (cpu; percent
    /// of the mean for qps) count as balanced: no change.
    pub deadband_percent: u32,
    /// Largest change of one backend's effective weight per round, percent.
    pub max_change_percent: u32,
    /// Lowest effective weight, percent of the configured weight.
    pub min_weight_percent: u32,
    /// Highest effective weight, percent of the configured weight.
    pub max_weight_percent: u32,
}

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Cluster-wide settings.
    pub cluster: Cluster,
    /// Limits on voluntary table changes (`defaults.rebalance`).
    pub rebalance: Rebalance,
    /// Services in file order.
    pub services: Vec<Service>,
}

/// `cluster:` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Seed of the flow hash (host order); the same on every balancer.
    pub hash_seed: u32,
    /// Nodes that receive VIP traffic and run the XDP balancer.
    pub balancers: Vec<Ipv4Addr>,
    /// GUE UDP port (host order).
    pub gue_port: u16,
    /// Last-hop policy for unknown flows.
    pub unknown_flow: UnknownFlow,
}

/// One (VIP, port, protocol) with its backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// Unique name, `[A-Za-z0-9_.-]{1,64}`.
    pub name: String,
    /// Service address.
    pub vip: Ipv4Addr,
    /// Service port (host order), 1-65535.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Buckets, a power of two in [`MIN_TABLE_SIZE`, `limits::MAX_TABLE_SIZE`].
    pub table_size: u32,
    /// How its backends are checked.
    pub health_check: HealthCheck,
    /// Load-aware weights, if configured.
    pub dynamic_weight: Option<DynamicWeight>,
    /// Backends in file order.
    pub backends: Vec<Backend>,
}

/// A backend of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// The backend's own address (GUE outer destination).
    pub dip: Ipv4Addr,
    /// Name shown in status and logs.
    pub hostname: Option<String>,
    /// Relative share of new connections, 1-65535.
    pub weight: u32,
    /// Administrative state.
    pub state: BackendState,
}

impl Backend {
    /// Hostname if given, else the address.
    pub fn label(&self) -> String {
        self.hostname
            .clone()
            .unwrap_or_else(|| self.dip.to_string())
    }
}

/// Key of a service in the data plane: (VIP, port, protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// VIP.
    pub vip: Ipv4Addr,
    /// Port, host order.
    pub port: u16,
    /// Protocol.
    pub protocol: Protocol,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}/{}", self.vip, self.port, self.protocol)
    }
}

impl Service {
    /// The service's data-plane key.
    pub fn key(&self) -> ServiceKey {
        ServiceKey {
            vip: self.vip,
            port: self.port,
            protocol: self.protocol,
        }
    }
}

impl Config {
    /// Read and validate the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
            problems: vec![Problem {
                path: String::new(),
                message: format!("cannot read {}: {e}", path.display()),
                position: None,
            }],
        })?;
        Config::parse(&src)
    }

    /// Validate YAML text.
    pub fn parse(src: &str) -> Result<Config, ConfigError> {
        let shape = |e: yaml::ShapeError| ConfigError {
            problems: vec![Problem {
                path: e.path,
                message: e.message,
                position: e.position,
            }],
        };
        if src.len() > MAX_FILE_BYTES {
            return Err(ConfigError {
                problems: vec![Problem {
                    path: String::new(),
                    message: format!(
                        "the file has {} bytes; nilb reads at most {MAX_FILE_BYTES}",
                        src.len()
                    ),
                    position: None,
                }],
            });
        }
        // A byte-order mark is not part of the YAML.
        let src = src.strip_prefix('\u{feff}').unwrap_or(src);
        let positions = yaml::positions(src).map_err(shape)?;
        let raw: RawConfig = yaml::from_str(src).map_err(shape)?;
        let mut v = Validator {
            problems: Vec::new(),
            positions,
        };
        let cfg = v.config(raw);
        if v.problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError {
                problems: v.problems,
            })
        }
    }

    /// Every address allowed to send GUE to a node: the balancers and every
    /// listed backend of every service (a first hop forwards to the second).
    pub fn cluster_addresses(&self) -> BTreeSet<Ipv4Addr> {
        let mut set: BTreeSet<Ipv4Addr> = self.cluster.balancers.iter().copied().collect();
        for s in &self.services {
            set.extend(s.backends.iter().map(|b| b.dip));
        }
        set
    }

    /// Distinct VIP addresses.
    pub fn vips(&self) -> BTreeSet<Ipv4Addr> {
        self.services.iter().map(|s| s.vip).collect()
    }

    /// The service with this key.
    pub fn service(&self, key: &ServiceKey) -> Option<&Service> {
        self.services.iter().find(|s| s.key() == *key)
    }
}

/// One problem in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Field path such as `services[1].backends[0].weight` (empty: the file).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// Line and column when known.
    pub position: Option<Position>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)?;
        } else {
            write!(f, "{}: {}", self.path, self.message)?;
        }
        if let Some(p) = self.position {
            write!(f, " (line {}, column {})", p.line, p.column)?;
        }
        Ok(())
    }
}

/// A rejected configuration: every problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// At least one problem.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "invalid configuration ({n} problem{})",
            if n == 1 { "" } else { "s" }
        )?;
        for p in self.problems.iter().take(MAX_PROBLEMS_SHOWN) {
            write!(f, "\n  {p}")?;
        }
        if n > MAX_PROBLEMS_SHOWN {
            write!(f, "\n  ... and {} more", n - MAX_PROBLEMS_SHOWN)?;
        }
        Ok(())
    }
}

impl ConfigError {
    /// All problems on one line (for logs), at most the first 10.
    pub fn one_line(&self) -> String {
        let mut parts: Vec<String> = self
            .problems
            .iter()
            .take(10)
            .map(|p| p.to_string())
            .collect();
        if self.problems.len() > 10 {
            parts.push(format!("and {} more", self.problems.len() - 10));
        }
        parts.join("; ")
    }
}

impl std::error::Error for ConfigError {}

// ---- raw shape (what serde accepts) -----------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    version: u32,
    cluster: RawCluster,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    services: Vec<RawService>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    #[serde(default)]
    hash_seed: u32,
    balancers: Vec<String>,
    gue_port: Option<u32>,
    #[serde(default)]
    unknown_flow: UnknownFlow,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    table_size: Option<u32>,
    #[serde(default)]
    health_check: RawTiming,
    #[serde(default)]
    rebalance: RawRebalance,
}

/// Cadence and thresholds (in `defaults.health_check`, or next to a checker).
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct RawTiming {
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rise_count: Option<u32>,
    fall_count: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRebalance {
    min_interval_ms: Option<u64>,
    max_step_percent: Option<u32>,
    min_bucket_age_ms: Option<u64>,
}

/// A service's `health_check`: one checker (directly or under kglb's
/// `checker:`) plus optional timing overrides.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawHealthCheck {
    http: Option<RawHttp>,
    tcp: Option<RawTcp>,
    none: Option<RawNone>,
    checker: Option<RawCheckerKind>,
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    rise_count: Option<u32>,
    fall_count: Option<u32>,
}

/// kglb's `checker:` block: exactly one kind.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCheckerKind {
    http: Option<RawHttp>,
    tcp: Option<RawTcp>,
    none: Option<RawNone>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    scheme: Option<String>,
    uri: Option<String>,
    check_port: Option<u32>,
    codes: Option<Vec<u32>>,
    host: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTcp {
    check_port: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNone {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: String,
    vip: String,
    port: u32,
    protocol: Protocol,
    table_size: Option<u32>,
    health_check: Option<RawHealthCheck>,
    dynamic_weight: Option<RawDynamicWeight>,
    #[serde(default)]
    backends: Vec<RawBackend>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDynamicWeight {
    source: LoadSource,
    metrics_port: Option<u32>,
    metrics_path: Option<String>,
    target_percent: Option<u32>,
    interval_ms: Option<u64>,
    deadband_percent: Option<u32>,
    max_change_percent: Option<u32>,
    min_weight_percent: Option<u32>,
    max_weight_percent: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBackend {
    dip: String,
    hostname: Option<String>,
    weight: Option<u32>,
    #[serde(default)]
    state: BackendState,
}

// ---- semantic validation -------------------------------------------------------

struct Validator {
    problems: Vec<Problem>,
    positions: HashMap<String, Position>,
}

/// Why an address cannot be used as a VIP, DIP or balancer; None if it can.
fn unusable_address(a: Ipv4Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        Some("the unspecified address")
    } else if a.is_loopback() {
        Some("a loopback address")
    } else if a.is_multicast() {
        Some("a multicast address")
    } else if a.is_broadcast() {
        Some("the broadcast address")
    } else if a.octets()[0] == 0 {
        Some("in 0.0.0.0/8 (\"this network\")")
    } else if a.octets()[0] >= 240 {
        Some("in the reserved 240.0.0.0/4")
    } else if a.is_link_local() {
        Some("link-local (169.254.0.0/16)")
    } else {
        None
    }
}

/// A host name as it may appear in logs, metrics labels and a Host header:
/// 1-253 characters, no whitespace or control characters.
fn is_host_name(h: &str) -> bool {
    !h.is_empty() && h.len() <= 253 && !h.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl Validator {
    fn report(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let path = path.into();
        let message = message.into();
        // A defaults problem is found once per service; report it once.
        if self
            .problems
            .iter()
            .any(|p| p.path == path && p.message == message)
        {
            return;
        }
        let position = self.positions.get(&path).copied();
        self.problems.push(Problem {
            path,
            message,
            position,
        });
    }

    fn address(&mut self, path: &str, text: &str, role: &str) -> Ipv4Addr {
        match text.parse::<Ipv4Addr>() {
            Ok(a) => {
                if let Some(why) = unusable_address(a) {
                    self.report(path, format!("{a} is {why} and cannot be a {role}"));
                }
                a
            }
            Err(_) => {
                self.report(path, format!("`{text}` is not an IPv4 address literal"));
                Ipv4Addr::UNSPECIFIED
            }
        }
    }

    fn port(&mut self, path: &str, port: u32) -> u16 {
        if !(1..=65535).contains(&port) {
            self.report(path, format!("port {port} is outside 1-65535"));
            return 0;
        }
        port as u16
    }

    fn table_size(&mut self, path: &str, size: u32) {
        let max = limits::MAX_TABLE_SIZE;
        if !size.is_power_of_two() {
            self.report(path, format!("table size {size} is not a power of two"));
        } else if !(MIN_TABLE_SIZE..=max).contains(&size) {
            self.report(
                path,
                format!("table size {size} is outside {MIN_TABLE_SIZE}-{max}"),
            );
        }
    }

    fn rebalance(&mut self, r: &RawRebalance) -> Rebalance {
        const DAY_MS: u64 = 86_400_000;
        let d = Rebalance::default();
        let out = Rebalance {
            min_interval_ms: r.min_interval_ms.unwrap_or(d.min_interval_ms),
            max_step_percent: r.max_step_percent.unwrap_or(d.max_step_percent),
            min_bucket_age_ms: r.min_bucket_age_ms.unwrap_or(d.min_bucket_age_ms),
        };
        if out.min_interval_ms > DAY_MS {
            self.report(
                "defaults.rebalance.min_interval_ms",
                "more than a day makes no sense",
            );
        }
        if !(1..=100).contains(&out.max_step_percent) {
            self.report(
                "defaults.rebalance.max_step_percent",
                format!("{} is outside 1-100", out.max_step_percent),
            );
        }
        if out.min_bucket_age_ms > DAY_MS {
            self.report(
                "defaults.rebalance.min_bucket_age_ms",
                "more than a day makes no sense",
            );
        }
        out
    }

    /// Check one cadence field set; `path` is where these fields live.
    fn timing(&mut self, path: &str, t: &RawTiming, base: &RawTiming) -> (u64, u64, u32, u32) {
        let interval = t
            .interval_ms
            .or(base.interval_ms)
            .unwrap_or(DEFAULT_INTERVAL_MS);
        let timeout = t
            .timeout_ms
            .or(base.timeout_ms)
            .unwrap_or(DEFAULT_TIMEOUT_MS);
        let rise = t
            .rise_count
            .or(base.rise_count)
            .unwrap_or(DEFAULT_RISE_FALL);
        let fall = t
            .fall_count
            .or(base.fall_count)
            .unwrap_or(DEFAULT_RISE_FALL);
        // Report at the field that set the value (here, or in the defaults).
        let at = |own: bool, field: &str| {
            if own {
                format!("{path}.{field}")
            } else {
                format!("defaults.health_check.{field}")
            }
        };
        if interval < MIN_INTERVAL_MS {
            self.report(
                at(t.interval_ms.is_some(), "interval_ms"),
                format!("interval {interval} ms is below the minimum of {MIN_INTERVAL_MS} ms"),
            );
        } else if interval > 3_600_000 {
            self.report(
                at(t.interval_ms.is_some(), "interval_ms"),
                "interval above one hour",
            );
        }
        if timeout < 10 {
            self.report(
                at(t.timeout_ms.is_some(), "timeout_ms"),
                format!("timeout {timeout} ms is below 10 ms"),
            );
        } else if timeout > interval && interval >= MIN_INTERVAL_MS {
            self.report(
                at(t.timeout_ms.is_some(), "timeout_ms"),
                format!("timeout {timeout} ms is longer than the interval {interval} ms"),
            );
        }
        for (v, field) in [(rise, "rise_count"), (fall, "fall_count")] {
            if !(1..=100).contains(&v) {
                let own = if field == "rise_count" {
                    t.rise_count
                } else {
                    t.fall_count
                };
                self.report(at(own.is_some(), field), format!("{v} is outside 1-100"));
            }
        }
        (interval, timeout, rise, fall)
    }

    fn health_check(
        &mut self,
        sp: &str,
        raw: Option<&RawHealthCheck>,
        defaults: &RawTiming,
        service_port: u16,
        protocol: Protocol,
    ) -> HealthCheck {
        let path = format!("{sp}.health_check");
        let empty = RawHealthCheck::default();
        let hc = raw.unwrap_or(&empty);
        let own = RawTiming {
            interval_ms: hc.interval_ms,
            timeout_ms: hc.timeout_ms,
            rise_count: hc.rise_count,
            fall_count: hc.fall_count,
        };
        let (interval_ms, timeout_ms, rise_count, fall_count) = self.timing(&path, &own, defaults);

        // The checker: directly, or under kglb's `checker:`; exactly one kind.
        let mut kinds: Vec<(String, Checker)> = Vec::new();
        let mut collect = |this: &mut Self,
                           base: &str,
                           http: &Option<RawHttp>,
                           tcp: &Option<RawTcp>,
                           none: &Option<RawNone>| {
            if let Some(h) = http {
                let c = this.http_checker(&format!("{base}.http"), h, service_port);
                kinds.push((format!("{base}.http"), c));
            }
            if let Some(t) = tcp {
                let port = match t.check_port {
                    Some(p) => this.port(&format!("{base}.tcp.check_port"), p),
                    None => service_port,
                };
                kinds.push((format!("{base}.tcp"), Checker::Tcp { port }));
            }
            if none.is_some() {
                kinds.push((format!("{base}.none"), Checker::None));
            }
        };
        collect(self, &path, &hc.http, &hc.tcp, &hc.none);
        if let Some(k) = &hc.checker {
            let base = format!("{path}.checker");
            collect(self, &base, &k.http, &k.tcp, &k.none);
            if k.http.is_none() && k.tcp.is_none() && k.none.is_none() {
                self.report(base, "needs one of http, tcp or none");
            }
        }
        let checker = match kinds.len() {
            0 if raw.is_some() && hc.checker.is_none() => {
                self.report(
                    &path,
                    "needs a checker: one of http, tcp or none (or kglb's checker: {...})",
                );
                Checker::None
            }
            0 => match protocol {
                Protocol::Tcp => Checker::Tcp { port: service_port },
                Protocol::Udp => Checker::None,
            },
            1 => kinds.pop().expect("one").1,
            _ => {
                let names: Vec<&str> = kinds.iter().map(|(p, _)| p.as_str()).collect();
                self.report(
                    &path,
                    format!("give exactly one checker, not {}", names.join(" and ")),
                );
                Checker::None
            }
        };
        HealthCheck {
            checker,
            interval_ms,
            timeout_ms,
            rise_count,
            fall_count,
        }
    }

    fn dynamic_weight(&mut self, path: &str, d: &RawDynamicWeight) -> DynamicWeight {
        let metrics_port = match (d.source, d.metrics_port) {
            (_, Some(p)) => self.port(&format!("{path}.metrics_port"), p),
            (LoadSource::Cpu, None) => {
                self.report(
                    path,
                    "source cpu needs metrics_port (each backend's metrics endpoint)",
                );
                0
            }
            (LoadSource::Qps, None) => 0,
        };
        let metrics_path = d.metrics_path.clone().unwrap_or_else(|| "/metrics".into());
        if !metrics_path.starts_with('/')
            || metrics_path
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            self.report(
                format!("{path}.metrics_path"),
                format!("`{metrics_path}` is not a request path"),
            );
        }
        let mut percent = |field: &str, v: Option<u32>, default: u32, lo: u32, hi: u32| {
            let v = v.unwrap_or(default);
            if !(lo..=hi).contains(&v) {
                self.report(
                    format!("{path}.{field}"),
                    format!("{v} is outside {lo}-{hi}"),
                );
            }
            v
        };
        let target_percent = percent("target_percent", d.target_percent, 70, 1, 100);
        let deadband_percent = percent("deadband_percent", d.deadband_percent, 5, 1, 50);
        let max_change_percent = percent("max_change_percent", d.max_change_percent, 20, 1, 100);
        let min_weight_percent = percent("min_weight_percent", d.min_weight_percent, 10, 1, 100);
        let max_weight_percent =
            percent("max_weight_percent", d.max_weight_percent, 400, 100, 10_000);
        let interval_ms = d.interval_ms.unwrap_or(2000);
        if !(500..=3_600_000).contains(&interval_ms) {
            self.report(
                format!("{path}.interval_ms"),
                format!("{interval_ms} ms is outside 500-3600000"),
            );
        }
        DynamicWeight {
            source: d.source,
            metrics_port,
            metrics_path,
            target_percent,
            interval_ms,
            deadband_percent,
            max_change_percent,
            min_weight_percent,
            max_weight_percent,
        }
    }

    fn http_checker(&mut self, path: &str, h: &RawHttp, service_port: u16) -> Checker {
        let scheme = match h.scheme.as_deref().unwrap_or("http") {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => {
                self.report(
                    format!("{path}.scheme"),
                    format!("unknown scheme `{other}`, expected `http` or `https`"),
                );
                Scheme::Http
            }
        };
        let uri = h.uri.clone().unwrap_or_else(|| "/".into());
        if !uri.starts_with('/')
            || uri.len() > 2048
            || uri.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            self.report(
                format!("{path}.uri"),
                format!("`{uri}` is not a request path (must start with `/`, no spaces or control characters)"),
            );
        }
        let port = match h.check_port {
            Some(p) => self.port(&format!("{path}.check_port"), p),
            None => service_port,
        };
        let codes = h.codes.clone().unwrap_or_else(|| vec![200]);
        if codes.is_empty() {
            self.report(format!("{path}.codes"), "needs at least one status code");
        }
        for (i, c) in codes.iter().enumerate() {
            if !(100..=599).contains(c) {
                self.report(
                    format!("{path}.codes[{i}]"),
                    format!("{c} is not an HTTP status code (100-599)"),
                );
            }
        }
        if let Some(host) = &h.host {
            if !is_host_name(host) {
                self.report(
                    format!("{path}.host"),
                    format!("`{host}` is not a usable Host header"),
                );
            }
        }
        Checker::Http {
            scheme,
            uri,
            port,
            codes: codes.into_iter().map(|c| c.min(999) as u16).collect(),
            host: h.host.clone(),
        }
    }

    fn config(&mut self, raw: RawConfig) -> Config {
        if raw.version != 1 {
            self.report(
                "version",
                format!(
                    "unsupported version {} (this nilb reads version 1)",
                    raw.version
                ),
            );
        }

        let mut balancers = Vec::new();
        let mut seen = HashSet::new();
        if raw.cluster.balancers.is_empty() {
            self.report("cluster.balancers", "at least one balancer is required");
        }
        for (i, b) in raw.cluster.balancers.iter().enumerate() {
            let path = format!("cluster.balancers[{i}]");
            let a = self.address(&path, b, "balancer");
            if !seen.insert(a) {
                self.report(&path, format!("balancer {a} is listed twice"));
            }
            balancers.push(a);
        }
        let gue_port = match raw.cluster.gue_port {
            Some(p) => self.port("cluster.gue_port", p),
            None => DEFAULT_GUE_PORT,
        };
        let default_table = match raw.defaults.table_size {
            Some(t) => {
                self.table_size("defaults.table_size", t);
                t
            }
            None => DEFAULT_TABLE_SIZE,
        };
        let default_timing = raw.defaults.health_check;
        let rebalance = self.rebalance(&raw.defaults.rebalance);

        let max_services = limits::MAX_SERVICES as usize;
        if raw.services.len() > max_services {
            self.report(
                "services",
                format!(
                    "{} services exceed the data plane's limit of {max_services}",
                    raw.services.len()
                ),
            );
        }

        let mut services = Vec::new();
        let mut names = HashMap::new();
        let mut keys = HashMap::new();
        for (si, rs) in raw.services.into_iter().enumerate() {
            let sp = format!("services[{si}]");
            if !valid_name(&rs.name) {
                self.report(
                    format!("{sp}.name"),
                    format!(
                        "`{}` is not a valid name (1-64 of A-Z a-z 0-9 _ . -)",
                        rs.name
                    ),
                );
            } else if let Some(prev) = names.insert(rs.name.clone(), si) {
                self.report(
                    format!("{sp}.name"),
                    format!("name `{}` is already used by services[{prev}]", rs.name),
                );
            }
            let vip = self.address(&format!("{sp}.vip"), &rs.vip, "VIP");
            let port = self.port(&format!("{sp}.port"), rs.port);
            if rs.protocol == Protocol::Udp && port == gue_port {
                self.report(
                    format!("{sp}.port"),
                    format!("UDP port {port} is the cluster's GUE port"),
                );
            }
            if balancers.contains(&vip) {
                self.report(
                    format!("{sp}.vip"),
                    format!("{vip} is a balancer's own address, not a VIP"),
                );
            }
            let key = (vip, port, rs.protocol);
            // An unusable VIP or port was reported already; comparing it
            // with others would only add false duplicates.
            let comparable = !vip.is_unspecified() && port != 0;
            if let Some(prev) = comparable.then(|| keys.insert(key, si)).flatten() {
                self.report(
                    &sp,
                    format!(
                        "({vip}, {port}, {}) is already served by services[{prev}]",
                        rs.protocol
                    ),
                );
            }
            let table_size = match rs.table_size {
                Some(t) => {
                    self.table_size(&format!("{sp}.table_size"), t);
                    t
                }
                None => default_table,
            };
            let needed = (rs.backends.len() as u64) * MIN_BUCKETS_PER_BACKEND as u64;
            let size_ok = table_size.is_power_of_two()
                && (MIN_TABLE_SIZE..=limits::MAX_TABLE_SIZE).contains(&table_size);
            if size_ok && needed > table_size as u64 {
                // Point at the field that set the size.
                let (path, origin) = if rs.table_size.is_some() {
                    (format!("{sp}.table_size"), String::new())
                } else {
                    (
                        "defaults.table_size".to_string(),
                        format!(" (service `{}`)", rs.name),
                    )
                };
                self.report(
                    path,
                    format!(
                        "table size {table_size} is too small for {} backends{origin} (needs at least {MIN_BUCKETS_PER_BACKEND} buckets per backend: {})",
                        rs.backends.len(),
                        needed.next_power_of_two()
                    ),
                );
            }

            let health_check = self.health_check(
                &sp,
                rs.health_check.as_ref(),
                &default_timing,
                port,
                rs.protocol,
            );
            let dynamic_weight = rs
                .dynamic_weight
                .as_ref()
                .map(|d| self.dynamic_weight(&format!("{sp}.dynamic_weight"), d));

            let mut backends = Vec::new();
            let mut dips = HashMap::new();
            for (bi, rb) in rs.backends.into_iter().enumerate() {
                let bp = format!("{sp}.backends[{bi}]");
                let dip = self.address(&format!("{bp}.dip"), &rb.dip, "backend");
                if dip == vip {
                    self.report(
                        format!("{bp}.dip"),
                        format!("{dip} is the service's VIP; a backend needs its own address"),
                    );
                }
                if let Some(prev) = dips.insert(dip, bi) {
                    self.report(
                        format!("{bp}.dip"),
                        format!("backend {dip} is already listed as {sp}.backends[{prev}]"),
                    );
                }
                let weight = rb.weight.unwrap_or(DEFAULT_WEIGHT);
                if !(1..=65535).contains(&weight) {
                    self.report(
                        format!("{bp}.weight"),
                        format!("weight {weight} is outside 1-65535 (use state: drained or offline to take a backend out)"),
                    );
                }
                if let Some(h) = &rb.hostname {
                    if !is_host_name(h) {
                        self.report(
                            format!("{bp}.hostname"),
                            format!("`{h}` is not a usable hostname"),
                        );
                    }
                }
                backends.push(Backend {
                    dip,
                    hostname: rb.hostname,
                    weight,
                    state: rb.state,
                });
            }
            services.push(Service {
                name: rs.name,
                vip,
                port,
                protocol: rs.protocol,
                table_size,
                health_check,
                dynamic_weight,
                backends,
            });
        }

        let cfg = Config {
            cluster: Cluster {
                hash_seed: raw.cluster.hash_seed,
                balancers,
                gue_port,
                unknown_flow: raw.cluster.unknown_flow,
            },
            rebalance,
            services,
        };

        let vips = cfg.vips();
        if vips.len() > limits::MAX_VIPS as usize {
            self.report(
                "services",
                format!(
                    "{} distinct VIPs exceed the data plane's limit of {}",
                    vips.len(),
                    limits::MAX_VIPS
                ),
            );
        }
        for (si, s) in cfg.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                if vips.contains(&b.dip) && b.dip != s.vip {
                    self.report(
                        format!("services[{si}].backends[{bi}].dip"),
                        format!("{} is a VIP of another service", b.dip),
                    );
                }
            }
        }
        let buckets: u64 = cfg.services.iter().map(|s| s.table_size as u64).sum();
        if buckets > MAX_TOTAL_BUCKETS {
            self.report(
                "services",
                format!("{buckets} buckets over all services exceed the limit of {MAX_TOTAL_BUCKETS} (16 MiB of bucket tables per {} buckets)", 1 << 20),
            );
        }
        let pairs: usize = cfg.services.iter().map(|s| s.backends.len()).sum();
        if pairs >= limits::MAX_BACKEND_SLOTS as usize {
            self.report(
                "services",
                format!(
                    "{pairs} backends over all services exceed the data plane's limit of {}",
                    limits::MAX_BACKEND_SLOTS - 1
                ),
            );
        }
        let nodes = cfg.cluster_addresses().len();
        if nodes > limits::MAX_CLUSTER_NODES as usize {
            self.report(
                "services",
                format!(
                    "{nodes} cluster addresses (balancers and backends) exceed the data plane's limit of {}",
                    limits::MAX_CLUSTER_NODES
                ),
            );
        }
        cfg
    }
}
