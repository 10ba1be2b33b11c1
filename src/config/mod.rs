//! The YAML configuration (shared/CONFIG.md): schema, defaults and complete
//! validation before anything is applied.
//!
//! [`Config::parse`] either returns a fully validated [`Config`] or a
//! [`ConfigError`] listing every problem it found, each with the field path
//! (`services[1].backends[0].weight`) and, where known, line and column.
//! Shape errors (syntax, unknown or duplicate keys, wrong types, missing
//! fields) stop at the first one; semantic checks then report all problems.
//!
//! Implemented subset of the target schema: `version`, `cluster` (hash_seed,
//! balancers, gue_port, unknown_flow), `defaults.table_size`, `services` with
//! name, vip, port, protocol, table_size and backends (dip, hostname, weight,
//! state). Health checks, rebalance limits and dynamic weights are later
//! issues; their keys are rejected as unknown until they are implemented, so a
//! file never silently means less than it says.

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

/// A validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Cluster-wide settings.
    pub cluster: Cluster,
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
        let raw: RawConfig = yaml::from_str(src).map_err(|e| ConfigError {
            problems: vec![Problem {
                path: e.path,
                message: e.message,
                position: e.position,
            }],
        })?;
        let mut v = Validator {
            problems: Vec::new(),
            positions: yaml::positions(src),
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
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawService {
    name: String,
    vip: String,
    port: u32,
    protocol: Protocol,
    table_size: Option<u32>,
    #[serde(default)]
    backends: Vec<RawBackend>,
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
    } else {
        None
    }
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
        let position = self.positions.get(&path).copied();
        self.problems.push(Problem {
            path,
            message: message.into(),
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
            if let Some(prev) = keys.insert(key, si) {
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
                self.report(
                    format!("{sp}.table_size"),
                    format!(
                        "table size {table_size} is too small for {} backends (needs at least {MIN_BUCKETS_PER_BACKEND} buckets per backend: {})",
                        rs.backends.len(),
                        needed.next_power_of_two()
                    ),
                );
            }

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
                    if h.is_empty() || h.len() > 253 || h.chars().any(|c| c.is_whitespace()) {
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
