//! The YAML configuration (docs/config.md): schema, defaults and complete
//! validation before anything is applied.
//!
//! [`Config::parse`] either returns a fully validated [`Config`] or a
//! [`ConfigError`] listing every problem it found, each with the field path
//! (`services[1].backends[0].weight`) and, where known, line and column.
//! Every problem is reported: shape problems (unknown keys, wrong types,
//! missing fields) one after the other, then semantic ones; only a syntax
//! error or a duplicate key stops the check there (the message says so).
//!
//! Implemented schema: `version`, `cluster` (hash_seed, balancers, gue_port,
//! unknown_flow), `defaults` (table_size, health_check, rebalance,
//! panic_threshold_percent), `services` with name, vip, port, protocol,
//! table_size, health_check, panic_threshold_percent and backends (dip,
//! hostname, weight, state) and dynamic_weight (source cpu|qps, metrics_port,
//! target_percent and tuning knobs), and `filters` (top level and per service:
//! deny and allow rules with inline prefixes and list files, rate limits;
//! list files are named here and read by [`crate::filters`]).
//!
//! Health checks accept the shape of docs/config.md (`health_check: {http:
//! {...}, fall_count, ...}`) and the Ni/kglb nesting (`health_check: {checker:
//! {http: {...}}, fall_count, interval_ms, rise_count}`). A service without a
//! checker gets a TCP connect check on its port (TCP services) or none (UDP).
//!
//! Layout: `yaml` turns the text into the raw serde shape of `raw`, which
//! `validate` checks section by section into the types of `model`
//! (re-exported here).

mod model;
mod raw;
mod validate;
mod yaml;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Service keys and protocols live in [`crate::types`]; re-exported because
/// a [`Service`] is named by them.
pub use crate::types::{Protocol, ServiceKey};
/// `cluster.etcd` (tables shared through etcd).
pub use model::Etcd;
pub use model::{
    assigned_server_id, ipv4_only, Backend, BackendState, Checker, Cluster, Config, DynamicWeight,
    Filters, HealthCheck, ListFile, LoadSource, PrefixRule, QuicLb, QuicServerId, Rate, RatePer,
    RateRule, Rebalance, Routing, Scheme, Service, ServiceFilters, TlsOptions, UnknownFlow,
};
pub(crate) use validate::unusable_address6;
pub use yaml::Position;

use raw::RawConfig;
use validate::Validator;

/// GUE UDP port when `cluster.gue_port` is absent (glb-director's).
pub const DEFAULT_GUE_PORT: u16 = 19523;
/// `cluster.icmp_too_big_rate` when absent: replies per second per CPU.
pub const DEFAULT_ICMP_TOO_BIG_RATE: u16 = crate::limits::ICMP_TOO_BIG_RATE_DEFAULT;
/// Buckets per service when neither the service nor `defaults` say.
pub const DEFAULT_TABLE_SIZE: u32 = 4096;
/// Smallest table a service may have.
pub const MIN_TABLE_SIZE: u32 = 16;
/// A table needs this many buckets per listed backend: with fewer, equal
/// weights cannot be honoured to within 1/16 (about 6 %) of a share.
pub const MIN_BUCKETS_PER_BACKEND: u32 = 16;
/// Weight when a backend gives none.
pub const DEFAULT_WEIGHT: u32 = 100;
/// Default health-check interval (docs/config.md "Health checks").
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
/// Default `panic_threshold_percent` (docs/config.md "Panic threshold":
/// off, because spreading new connections onto backends known to fail
/// loses them for certain at layer 4, while the overload it prevents is
/// only a risk).
pub const DEFAULT_PANIC_THRESHOLD_PERCENT: u32 = 0;
/// Default `rebalance.min_bucket_age_ms`.
pub const DEFAULT_MIN_BUCKET_AGE_MS: u64 = 300_000;
/// Default `rebalance.previous_owners`: as many as the data plane lists
/// (docs/design.md "Tables and pacing": each one more keeps connections
/// through one more move of their bucket; the cost is 4 bytes of GUE per
/// previous owner listed, only in buckets that moved).
pub const DEFAULT_PREVIOUS_OWNERS: u32 = crate::table::MAX_PREVIOUS as u32;
/// Default `filters.rate_limit_sources` (rate-limit states kept at once).
pub const DEFAULT_RATE_LIMIT_SOURCES: u32 = 65_536;
/// Default `routing.bird_socket` (Debian's bird2).
pub const DEFAULT_BIRD_SOCKET: &str = "/run/bird/bird.ctl";
/// Default `routing.routes_file`.
pub const DEFAULT_ROUTES_FILE: &str = "/run/nilb/bird-routes.conf";
/// Default `routing.drain_file`.
pub const DEFAULT_DRAIN_FILE: &str = "/run/nilb/drain";
/// Default `routing.birdc`.
pub const DEFAULT_BIRDC: &str = "/usr/sbin/birdc";
/// Default `routing.withdraw_grace_ms`.
pub const DEFAULT_WITHDRAW_GRACE_MS: u64 = 2_000;
/// Default `cluster.etcd.prefix`.
pub const DEFAULT_ETCD_PREFIX: &str = "/nilb";
/// Default `cluster.etcd.lease_ttl_ms`.
pub const DEFAULT_ETCD_LEASE_TTL_MS: u64 = 3_000;
/// Largest `routing.withdraw_grace_ms`.
pub const MAX_WITHDRAW_GRACE_MS: u64 = 60_000;
/// Largest `filters.rate_limit_sources` (about 100 bytes each in the kernel).
pub const MAX_RATE_LIMIT_SOURCES: u64 = 1 << 24;
/// Smallest `filters.rate_limit_sources`.
pub const MIN_RATE_LIMIT_SOURCES: u64 = 1024;
/// Longest filter rule name (the data plane keeps 31 bytes and a NUL).
pub const MAX_RULE_NAME: usize = 31;
/// Highest rate a rate limit accepts, per second.
pub const MAX_RATE_PER_SECOND: u64 = 1_000_000_000;

/// Open `path` for reading if it is a regular file (symlinks followed).
/// A FIFO, a device or a directory is refused before it is opened, so that
/// reading the configuration, a list file or a key file cannot block the
/// daemon's loop (a FIFO's open waits for a writer).
/// Errors: the `stat` error, or `InvalidInput` "not a regular file".
pub fn open_regular_file(path: &Path) -> std::io::Result<std::fs::File> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or directory is never read)",
        ));
    }
    std::fs::File::open(path)
}

impl Config {
    /// Read and validate the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let src = open_regular_file(path).and_then(|mut f| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut f, &mut s).map(|_| s)
        });
        let src = src.map_err(|e| {
            // `nsenter --mount` and systemd start in `/`: say where a
            // relative path was looked for.
            let base = if path.is_relative() {
                std::env::current_dir()
                    .map(|d| format!(" (a relative path, looked up in {})", d.display()))
                    .unwrap_or_default()
            } else {
                String::new()
            };
            ConfigError {
                problems: vec![Problem {
                    path: String::new(),
                    message: format!("cannot read {}{base}: {e}", path.display()),
                    position: None,
                }],
            }
        })?;
        let config = Config::parse(&src)?;
        config.check_paths_against(path)?;
        Ok(config)
    }

    /// The files nilb writes or watches must not be the configuration file
    /// itself (`path`): a `routing.routes_file` equal to it would be
    /// overwritten with BIRD routes, a `drain_file` equal to it would drain
    /// the balancer for as long as the file exists; nor may the routes file
    /// be the drain file. Compared as each balancer sees them (`{node}`
    /// replaced by its address) and by identity where the files exist
    /// (symbolic and hard links count). Errors: one problem per field.
    pub fn check_paths_against(&self, path: &Path) -> Result<(), ConfigError> {
        use std::os::unix::fs::MetadataExt;
        let Some(r) = &self.routing else {
            return Ok(());
        };
        let absolute = |p: &Path| {
            std::env::current_dir()
                .map(|d| d.join(p))
                .unwrap_or_else(|_| p.to_path_buf())
        };
        let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
            _ => absolute(a) == absolute(b),
        };
        let on = |p: &Path, node: Option<IpAddr>| match node {
            Some(n) => PathBuf::from(p.to_string_lossy().replace("{node}", &n.to_string())),
            None => p.to_path_buf(),
        };
        let mut nodes: Vec<Option<IpAddr>> =
            self.cluster.balancers.iter().copied().map(Some).collect();
        if nodes.is_empty() {
            nodes.push(None);
        }
        let mut problems: Vec<Problem> = Vec::new();
        let mut report = |field: &str, message: String| {
            let field = format!("routing.{field}");
            if !problems.iter().any(|p| p.path == field) {
                problems.push(Problem {
                    path: field,
                    message,
                    position: None,
                });
            }
        };
        for node in nodes {
            let at = node.map_or(String::new(), |n| format!(" on balancer {n}"));
            for (field, p) in [
                ("routes_file", &r.routes_file),
                ("drain_file", &r.drain_file),
                ("bird_socket", &r.bird_socket),
                ("birdc", &r.birdc),
            ] {
                if same(&on(p, node), path) {
                    report(
                        field,
                        format!(
                            "`{}`{at} is the configuration file itself; give routing.{field} a path of its own",
                            p.display()
                        ),
                    );
                }
            }
            if same(&on(&r.routes_file, node), &on(&r.drain_file, node)) {
                report(
                    "drain_file",
                    format!(
                        "`{}`{at} is also routing.routes_file: the balancer would stay drained for as long as it announces",
                        r.drain_file.display()
                    ),
                );
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
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
        // The limits first (aliases must not expand before); positions only
        // where a problem is reported.
        yaml::check_limits(src).map_err(shape)?;
        let (raw, shapes) = yaml::from_str_all::<RawConfig>(src);
        let positions = if shapes.errors.is_empty() {
            None
        } else {
            Some(yaml::positions(src).map_err(shape)?)
        };
        let mut problems: Vec<Problem> = shapes
            .errors
            .into_iter()
            .map(|e| Problem {
                // A missing field has no position of its own: its mapping's.
                position: e.position.or_else(|| {
                    let positions = positions.as_ref()?;
                    let mut p = e.path.as_str();
                    loop {
                        if let Some(pos) = positions.get(p) {
                            return Some(*pos);
                        }
                        p = &p[..p.rfind(['.', '['])?];
                    }
                }),
                path: e.path,
                message: e.message,
            })
            .collect();
        if shapes.stopped {
            if let Some(last) = problems.last_mut() {
                last.message.push_str(
                    " (nilb cannot read the file past this point: problems after it are not reported)",
                );
            }
        }
        let Some(raw) = raw else {
            return Err(ConfigError { problems });
        };
        let mut v = Validator {
            problems: Vec::new(),
            src: src.to_string(),
            positions,
            cluster_family: None,
        };
        let cfg = v.config(raw);
        // Semantic problems at fields that had to be patched (or at the
        // mapping that holds them) are consequences of the shape problems
        // already reported.
        let under = |path: &str| {
            shapes.patched.iter().any(|p| {
                let parent = p.rfind(['.', '[']).map_or("", |i| &p[..i]);
                path == p
                    || path == parent
                    || path.starts_with(&format!("{p}."))
                    || path.starts_with(&format!("{p}["))
            })
        };
        problems.extend(v.problems.into_iter().filter(|p| !under(&p.path)));
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError { problems })
        }
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
