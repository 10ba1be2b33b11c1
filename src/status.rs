//! The daemon's state as operators and tools see it: per service, each
//! backend's state, health, weight and bucket shares, the service's mode
//! (normal, drained-fallback, panic, fail-open), the node's role as it runs,
//! and the last reload. The daemon writes it atomically (temp file + rename)
//! to a YAML state file; `nilb status` reads that file and prints it as a
//! table, and `nilb status --json` prints the same content as JSON. Optional
//! values are written as `null` rather than left out, so that every field is
//! always present in both forms.

use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::control::ControlPlane;

/// Outcome of the last reload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadStatus {
    /// When it happened (RFC 3339, UTC).
    pub at: String,
    /// Whether it was applied.
    pub ok: bool,
    /// Why it was rejected or failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Reloads applied so far.
    pub succeeded: u64,
    /// Rejected or failed reloads so far.
    pub failed: u64,
}

/// One backend of one service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendStatus {
    /// Backend address.
    pub dip: IpAddr,
    /// Name from the config.
    #[serde(default)]
    pub hostname: Option<String>,
    /// active, drained, offline, or removing (gone from the file, draining out).
    pub state: String,
    /// unknown, up or down; `not checked` for backends that are not checked
    /// (offline, removing; and on nodes that are not balancers).
    pub health: String,
    /// The encapsulated check (GUE SYN to the VIP): unknown, up or down;
    /// `local` + health for this node's own backend (its TC filter is
    /// checked instead); absent when the service has no `encap_check`.
    #[serde(default)]
    pub encap_health: Option<String>,
    /// Why the last encapsulated check failed, if it did.
    #[serde(default)]
    pub encap_error: Option<String>,
    /// Configured weight.
    pub weight: u32,
    /// Effective weight (differs from `weight` under dynamic weights).
    #[serde(default)]
    pub effective_weight: f64,
    /// Last load reading: CPU utilisation percent or new connections per
    /// second (dynamic weights only).
    #[serde(default)]
    pub load: Option<f64>,
    /// Load readings that failed so far.
    #[serde(default)]
    pub load_errors: u64,
    /// Buckets where it is first hop.
    pub buckets: u32,
    /// Share of buckets as first hop, percent.
    pub share_percent: f64,
    /// Buckets where it is second hop.
    pub second_hop_buckets: u32,
    /// Share of buckets as second hop, percent.
    pub second_hop_percent: f64,
    /// Buckets where it is a previous owner, at any place of the hop list
    /// (second hop included).
    #[serde(default)]
    pub previous_hop_buckets: u32,
    /// Up/down transitions since the daemon started.
    pub transitions: u64,
    /// Why the last check failed, if it did.
    #[serde(default)]
    pub last_error: Option<String>,
}

/// The node's role: what the config asks for and what actually runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// Our XDP balancer is attached (as the kernel reports it).
    pub running: bool,
    /// The config lists this node in `cluster.balancers`.
    pub configured: bool,
}

fn yes() -> bool {
    true
}

fn normal() -> String {
    "normal".into()
}

/// One service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServiceStatus {
    /// Service name.
    pub name: String,
    /// VIP:port/protocol.
    pub key: String,
    /// Buckets.
    pub table_size: u32,
    /// No backend is healthy; all backends not offline are used.
    pub fail_open: bool,
    /// Which backends the table uses: normal, drained-fallback (no active
    /// backend healthy: healthy drained ones serve), panic (healthy weight
    /// below `panic_threshold_percent`: every active backend) or fail-open
    /// (no backend healthy: every backend not offline).
    #[serde(default = "normal")]
    pub mode: String,
    /// Leaving panic or fail-open: failed backends still own buckets and
    /// give them up in paced steps.
    #[serde(default)]
    pub exiting: bool,
    /// Voluntary bucket moves still to be done (paced by `rebalance`).
    pub pending_moves: usize,
    /// Previous owners a bucket remembers at most
    /// (`rebalance.previous_owners`).
    #[serde(default)]
    pub previous_owners: usize,
    /// Buckets by the number of previous owners they list: element `k`
    /// counts the buckets that list `k`.
    #[serde(default)]
    pub chain_lengths: Vec<u32>,
    /// Dynamic weights source (cpu or qps), if enabled.
    #[serde(default)]
    pub dynamic_weight: Option<String>,
    /// Backends, including ones being removed.
    pub backends: Vec<BackendStatus>,
}

/// The whole state file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// This node's address.
    pub node: IpAddr,
    /// Whether this node runs the XDP balancer (our program attached, as
    /// the kernel reports it).
    pub balancer: bool,
    /// Whether the config makes this node a balancer (differs from
    /// `balancer` only when attaching or detaching failed).
    #[serde(default = "yes")]
    pub balancer_configured: bool,
    /// Configuration file in use.
    pub config_file: String,
    /// When this state was written (RFC 3339, UTC).
    pub written_at: String,
    /// Daemon process id.
    pub pid: u32,
    /// Last reload, if any since start.
    #[serde(default)]
    pub last_reload: Option<ReloadStatus>,
    /// Set when the daemon stopped and left the data plane running
    /// (`--keep-dataplane`): when, and what it left. The file then shows
    /// the tables the data plane still forwards with.
    #[serde(default)]
    pub stopped: Option<String>,
    /// Services in key order.
    pub services: Vec<ServiceStatus>,
    /// The edge filters in force (None: none configured, or not a
    /// balancer: filters apply where the XDP balancer runs).
    #[serde(default)]
    pub filters: Option<FiltersStatus>,
    /// VIP announcements and BIRD's sessions (None: no `routing:`).
    #[serde(default)]
    pub routing: Option<crate::routing::RoutingStatus>,
    /// Tables shared through etcd: role, revision, lag (None: no
    /// `cluster.etcd`).
    #[serde(default)]
    pub cluster: Option<crate::cluster::ClusterStatus>,
    /// The kernel's features and the parts of the config refused for a
    /// missing one (None: a state file of an older daemon).
    #[serde(default)]
    pub kernel: Option<crate::features::KernelStatus>,
}

/// The edge filters in force.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FiltersStatus {
    /// Rules by id.
    pub rules: Vec<FilterRuleStatus>,
    /// IPv4 prefixes over all rules.
    pub prefixes: usize,
    /// The live generation of the filter maps (0 or 1).
    pub generation: Option<u32>,
    /// Reading and compiling the lists, ms (last time they changed).
    pub compile_ms: u64,
    /// Building the maps and flipping to them, ms.
    pub maps_ms: Option<u64>,
    /// Kernel memory of the live filter maps, bytes.
    pub bytes: Option<u64>,
}

/// One filter rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilterRuleStatus {
    /// Rule id (counters in `nilb stats` and `nilb filters`).
    pub id: u16,
    /// Name.
    pub name: String,
    /// `global` or the service's `VIP:PORT/PROTOCOL`.
    pub scope: String,
    /// deny, allow or rate_limit.
    pub kind: String,
    /// Counts without dropping.
    pub dry_run: bool,
    /// IPv4 prefixes (deny and allow).
    pub prefixes: usize,
    /// Where they came from: `inline` or a list file, with counts.
    pub sources: Vec<String>,
}

impl FiltersStatus {
    /// The status of `set`, with what its compile and install took.
    pub fn of(
        set: &crate::filters::FilterSet,
        compile_ms: u64,
        install: Option<&crate::dataplane::filters::FilterInstall>,
    ) -> FiltersStatus {
        FiltersStatus {
            rules: set
                .rules
                .iter()
                .map(|r| FilterRuleStatus {
                    id: r.id,
                    name: r.ident.name.clone(),
                    scope: r.ident.scope.to_string(),
                    kind: r.ident.kind.as_str().to_string(),
                    dry_run: r.dry_run,
                    prefixes: r.prefixes(),
                    sources: r
                        .sources
                        .iter()
                        .map(|s| {
                            let mut t = format!("{}: {} prefixes", s.origin, s.prefixes);
                            if s.ipv6_ignored > 0 {
                                t += &format!(" ({} IPv6 ignored)", s.ipv6_ignored);
                            }
                            t
                        })
                        .collect(),
                })
                .collect(),
            prefixes: set.prefixes(),
            generation: install.map(|i| i.generation),
            compile_ms,
            maps_ms: install.map(|i| i.maps_ms),
            bytes: install.map(|i| i.bytes),
        }
    }
}

pub use crate::report::{address_width, rfc3339};

/// What `health` says of a backend that is not checked.
pub const NOT_CHECKED: &str = "not checked";

/// The columns of a service's backend table in `nilb status`, in order
/// (docs/operations.md lists them; a test compares the two).
pub const BACKEND_COLUMNS: [&str; 14] = [
    "backend",
    "hostname",
    "state",
    "health",
    "encap",
    "weight",
    "effective",
    "load",
    "buckets",
    "share",
    "2nd hop",
    "share",
    "prev hops",
    "last error",
];

fn percent(n: u32, of: u32) -> f64 {
    (1000.0 * n as f64 / of.max(1) as f64).round() / 10.0
}

impl Status {
    /// Snapshot of `cp` for the node at `node` in `role`.
    pub fn of(
        cp: &ControlPlane,
        node: IpAddr,
        role: Role,
        config_file: &Path,
        last_reload: Option<ReloadStatus>,
    ) -> Status {
        // Health checks run where the configuration makes the node a
        // balancer.
        let checked = |b: &crate::control::BackendRuntime| {
            role.configured
                && b.removed_at_ms.is_none()
                && b.config.state != crate::config::BackendState::Offline
        };
        let mut services = Vec::new();
        for (key, st) in cp.services() {
            let svc = cp.service_config(key);
            let name = svc.map(|s| s.name.clone()).unwrap_or_default();
            let cpu = svc
                .and_then(|s| s.dynamic_weight.as_ref())
                .is_some_and(|d| d.source == crate::config::LoadSource::Cpu);
            let dynamic = svc
                .and_then(|s| s.dynamic_weight.as_ref())
                .map(|d| match d.source {
                    crate::config::LoadSource::Cpu => "cpu".to_string(),
                    crate::config::LoadSource::Qps => "qps".to_string(),
                });
            let encap_on = svc.is_some_and(|s| s.encap_check);
            let size = st.table.size();
            let firsts = st.table.shares();
            let seconds = st.table.second_shares();
            let previous = st.table.previous_shares();
            let backends = st
                .backends
                .values()
                .map(|b| {
                    let n = firsts.get(&b.config.dip).copied().unwrap_or(0);
                    let s = seconds.get(&b.config.dip).copied().unwrap_or(0);
                    let p = previous.get(&b.config.dip).copied().unwrap_or(0);
                    BackendStatus {
                        dip: b.config.dip,
                        hostname: b.config.hostname.clone(),
                        state: b.admin_state().to_string(),
                        health: if checked(b) {
                            b.health.health.to_string()
                        } else {
                            NOT_CHECKED.to_string()
                        },
                        encap_health: encap_on.then(|| match (checked(b), b.config.dip == node) {
                            (false, _) => NOT_CHECKED.to_string(),
                            (true, true) => format!("local {}", b.encap.health),
                            (true, false) => b.encap.health.to_string(),
                        }),
                        encap_error: b.encap.last_error.clone().filter(|_| checked(b)),
                        weight: b.config.weight,
                        effective_weight: (b.effective_weight * 10.0).round() / 10.0,
                        load: b.load.reading.map(|(v, _)| {
                            let v = if cpu { v * 100.0 } else { v };
                            (v * 10.0).round() / 10.0
                        }),
                        load_errors: b.load.errors,
                        buckets: n,
                        share_percent: percent(n, size),
                        second_hop_buckets: s,
                        second_hop_percent: percent(s, size),
                        previous_hop_buckets: p,
                        transitions: b.health.transitions,
                        last_error: b.health.last_error.clone().filter(|_| checked(b)),
                    }
                })
                .collect();
            services.push(ServiceStatus {
                name,
                key: key.to_string(),
                table_size: size,
                fail_open: st.fail_open(),
                mode: st.mode.name().to_string(),
                exiting: st.exiting,
                pending_moves: st.pending,
                previous_owners: st.table.previous_owners(),
                chain_lengths: st.table.chain_lengths().to_vec(),
                dynamic_weight: dynamic,
                backends,
            });
        }
        Status {
            node,
            balancer: role.running,
            balancer_configured: role.configured,
            config_file: config_file.display().to_string(),
            written_at: rfc3339(SystemTime::now()),
            pid: std::process::id(),
            last_reload,
            stopped: None,
            services,
            filters: None,
            routing: None,
            cluster: None,
            kernel: None,
        }
    }

    /// Whether the daemon that wrote this state still runs: its pid exists
    /// and is a `nilb run`.
    pub fn daemon_running(&self) -> bool {
        std::fs::read(format!("/proc/{}/cmdline", self.pid)).is_ok_and(|c| {
            let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
            args.first()
                .is_some_and(|a| a.windows(4).any(|w| w == b"nilb"))
                && args.iter().any(|a| *a == b"run")
        })
    }

    /// Write atomically to `path` (temp file in the same directory, then
    /// rename), creating the directory if needed.
    pub fn write(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        let text = serde_yaml::to_string(self).context("encoding the state")?;
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
    }

    /// The state as one line of JSON: a top-level `schema` field
    /// ([`crate::report::JSON_SCHEMA`]) followed by the fields of the state
    /// file, with the same names and values.
    pub fn to_json(&self) -> Result<String> {
        #[derive(Serialize)]
        struct Doc<'a> {
            schema: u32,
            #[serde(flatten)]
            status: &'a Status,
        }
        serde_json::to_string(&Doc {
            schema: crate::report::JSON_SCHEMA,
            status: self,
        })
        .context("encoding the state as JSON")
    }

    /// Read a state file.
    pub fn read(path: &Path) -> Result<Status> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (is `nilb run` running with --state-file {}?)",
                path.display(),
                path.display()
            )
        })?;
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Human-readable table (columns: [`BACKEND_COLUMNS`]).
    pub fn print(&self, out: &mut dyn Write) -> Result<()> {
        let role = match (self.balancer, self.balancer_configured) {
            (true, true) => "balancer",
            (false, false) => "backend only",
            (false, true) => "configured as balancer, but XDP is NOT attached: backend only",
            (true, false) => "configured as backend only, but XDP is still attached: balancer",
        };
        writeln!(
            out,
            "node {} ({role}), pid {}, config {}, state written {}",
            self.node, self.pid, self.config_file, self.written_at
        )?;
        if let Some(stopped) = &self.stopped {
            writeln!(
                out,
                "DAEMON STOPPED ({stopped}): this is its last state; the data plane keeps forwarding with these tables"
            )?;
        } else if !self.daemon_running() {
            writeln!(
                out,
                "DAEMON NOT RUNNING (pid {} is gone, e.g. killed): this is its last state; a data plane it left keeps forwarding with these tables",
                self.pid
            )?;
        }
        match &self.last_reload {
            None => writeln!(out, "last reload: none since start")?,
            Some(r) if r.ok => writeln!(out, "last reload: {} ok ({} applied, {} rejected so far)", r.at, r.succeeded, r.failed)?,
            Some(r) => writeln!(
                out,
                "last reload: {} FAILED, running configuration kept ({} applied, {} rejected so far): {}",
                r.at,
                r.succeeded,
                r.failed,
                r.error.as_deref().unwrap_or("?")
            )?,
        }
        if let Some(k) = &self.kernel {
            k.print(out)?;
        }
        if let Some(r) = &self.routing {
            r.print(out)?;
        }
        if let Some(c) = &self.cluster {
            c.print(out)?;
        }
        if let Some(f) = &self.filters {
            writeln!(
                out,
                "filters: {} rule(s), {} prefixes, generation {}, compiled in {} ms, maps built and flipped in {}, {}  (counters: nilb filters)",
                f.rules.len(),
                f.prefixes,
                f.generation.map_or("-".to_string(), |g| g.to_string()),
                f.compile_ms,
                f.maps_ms.map_or("-".to_string(), |m| format!("{m} ms")),
                f.bytes.map_or("-".to_string(), |b| format!("{:.1} MiB", b as f64 / 1048576.0)),
            )?;
            for r in &f.rules {
                writeln!(
                    out,
                    "  rule {:>4} {:<24} {:<22} {:<10}{} {}",
                    r.id,
                    r.name,
                    r.scope,
                    r.kind,
                    if r.dry_run { " (dry run)" } else { "" },
                    r.sources.join(", ")
                )?;
            }
        }
        for s in &self.services {
            writeln!(out)?;
            let mode = match s.mode.as_str() {
                "fail-open" => "FAIL-OPEN (no healthy backend: every backend not offline)",
                "panic" => {
                    "PANIC (healthy weight below panic_threshold_percent: every active backend)"
                }
                "drained-fallback" => {
                    "drained-fallback (no healthy active backend: healthy drained backends serve)"
                }
                _ if s.exiting => "normal, leaving fail-open/panic in paced steps",
                _ => "normal",
            };
            writeln!(
                out,
                "service {} {}  table {}  fail-open {}  mode {}  pending moves {}",
                s.name,
                s.key,
                s.table_size,
                if s.fail_open { "YES" } else { "no" },
                mode,
                s.pending_moves
            )?;
            let chains: Vec<String> = s
                .chain_lengths
                .iter()
                .enumerate()
                .map(|(k, n)| format!("{k}: {n}"))
                .collect();
            writeln!(
                out,
                "  previous owners remembered: up to {}; buckets by previous owners listed: {}",
                s.previous_owners,
                chains.join(", ")
            )?;
            let c = BACKEND_COLUMNS;
            let w = address_width(s.backends.iter().map(|b| &b.dip));
            writeln!(
                out,
                "  {:<w$} {:<16} {:<9} {:<11} {:<11} {:>6} {:>9} {:>6} {:>8} {:>7} {:>8} {:>7} {:>9}  {}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11], c[12], c[13]
            )?;
            for b in &s.backends {
                let load = b.load.map_or("-".to_string(), |l| format!("{l:.1}"));
                let error = match (&b.last_error, &b.encap_error) {
                    (Some(e), _) => e.clone(),
                    (None, Some(e)) => format!("encap: {e}"),
                    (None, None) => String::new(),
                };
                writeln!(
                    out,
                    "  {:<w$} {:<16} {:<9} {:<11} {:<11} {:>6} {:>9.1} {:>6} {:>8} {:>6.1}% {:>8} {:>6.1}% {:>9}  {}",
                    b.dip.to_string(),
                    b.hostname.as_deref().unwrap_or("-"),
                    b.state,
                    b.health,
                    b.encap_health.as_deref().unwrap_or("off"),
                    b.weight,
                    b.effective_weight,
                    load,
                    b.buckets,
                    b.share_percent,
                    b.second_hop_buckets,
                    b.second_hop_percent,
                    b.previous_hop_buckets,
                    error
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn address_columns_widen_for_long_ipv6_addresses() {
        let a: Vec<IpAddr> = ["10.0.0.11", "2001:db8::1"]
            .map(|a| a.parse().unwrap())
            .into();
        assert_eq!(address_width(&a), 15);
        let b: IpAddr = "2001:db8:1234:5678::abcd".parse().unwrap();
        assert_eq!(address_width(a.iter().chain([&b])), 24);
        assert_eq!(address_width(&[]), 15);
    }

    fn sample() -> Status {
        Status {
            node: Ipv4Addr::new(10, 0, 0, 11).into(),
            balancer: true,
            balancer_configured: true,
            config_file: "/etc/nilb/nilb.yaml".into(),
            written_at: "2025-01-01T00:00:00Z".into(),
            pid: 42,
            last_reload: Some(ReloadStatus {
                at: "2025-01-01T00:00:00Z".into(),
                ok: false,
                error: Some("services[0]: bad".into()),
                succeeded: 3,
                failed: 1,
            }),
            stopped: None,
            services: vec![ServiceStatus {
                name: "web".into(),
                key: "10.0.0.100:80/tcp".into(),
                table_size: 1024,
                fail_open: false,
                mode: "normal".into(),
                exiting: false,
                pending_moves: 7,
                previous_owners: 3,
                chain_lengths: vec![1000, 20, 3, 1],
                dynamic_weight: None,
                backends: vec![BackendStatus {
                    dip: Ipv4Addr::new(10, 0, 0, 12).into(),
                    hostname: None,
                    state: "active".into(),
                    health: "up".into(),
                    encap_health: Some("up".into()),
                    encap_error: None,
                    weight: 2,
                    effective_weight: 2.0,
                    load: Some(40.5),
                    load_errors: 0,
                    buckets: 512,
                    share_percent: 50.0,
                    second_hop_buckets: 3,
                    second_hop_percent: 0.3,
                    previous_hop_buckets: 5,
                    transitions: 1,
                    last_error: None,
                }],
            }],
            filters: Some(FiltersStatus {
                rules: vec![FilterRuleStatus {
                    id: 1,
                    name: "feed".into(),
                    scope: "global".into(),
                    kind: "deny".into(),
                    dry_run: false,
                    prefixes: 3,
                    sources: vec!["/etc/nilb/feed.txt: 3 prefixes".into()],
                }],
                prefixes: 3,
                generation: Some(1),
                compile_ms: 2,
                maps_ms: None,
                bytes: Some(33_554_432),
            }),
            routing: None,
            cluster: None,
            kernel: Some(crate::features::KernelStatus {
                release: "6.1.0-57-amd64".into(),
                features: crate::features::KernelFeatures::new(
                    "6.1.0-57-amd64",
                    crate::features::FEATURES
                        .iter()
                        .map(|f| f.name != crate::features::QUIC_LB_CRYPTO)
                        .collect(),
                )
                .states(),
                refused: vec![crate::features::Refusal {
                    service: "quic".into(),
                    what: "quic_lb single-pass".into(),
                    feature: crate::features::QUIC_LB_CRYPTO.into(),
                    reason: "quic_lb_crypto: needs the crypto kfuncs (Linux 6.10 or newer)".into(),
                    instead: "its packets follow the bucket table".into(),
                }],
            }),
        }
    }

    #[test]
    fn the_kernel_line_says_what_is_off_and_what_is_refused() {
        let mut out = Vec::new();
        sample().print(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("kernel 6.1.0-57-amd64: features OFF: quic_lb_crypto (needs Linux 6.10)"),
            "{text}"
        );
        assert!(
            text.contains("REFUSED for service quic: quic_lb single-pass: quic_lb_crypto"),
            "{text}"
        );
        let back: Status = serde_json::from_str(&sample().to_json().unwrap()).unwrap();
        assert_eq!(back.kernel, sample().kernel);
    }

    #[test]
    fn json_is_the_state_file_plus_schema() {
        let s = sample();
        let json: serde_json::Value = serde_json::from_str(&s.to_json().unwrap()).unwrap();
        assert_eq!(json["schema"], crate::report::JSON_SCHEMA);
        let yaml: serde_json::Value =
            serde_yaml::from_str(&serde_yaml::to_string(&s).unwrap()).unwrap();
        let mut without = json.clone();
        without.as_object_mut().unwrap().remove("schema");
        assert_eq!(without, yaml);
        // absent values are present as null
        let b = &json["services"][0]["backends"][0];
        assert!(b.get("hostname").unwrap().is_null());
        assert!(b.get("last_error").unwrap().is_null());
        assert!(json["services"][0].get("dynamic_weight").unwrap().is_null());
        assert_eq!(json["last_reload"]["failed"], 1);
    }

    #[test]
    fn unchecked_backends_say_so_and_the_encapsulated_check_is_shown() {
        let yaml = "version: 1\ncluster: {balancers: [10.0.0.11]}\nservices:\n  - name: web\n    vip: 10.0.0.100\n    port: 80\n    protocol: tcp\n    backends:\n      - {dip: 10.0.0.11}\n      - {dip: 10.0.0.12}\n      - {dip: 10.0.0.13, state: offline}\n";
        let mut cp = ControlPlane::new(crate::config::Config::parse(yaml).unwrap(), 0);
        let key = cp.services().keys().next().copied().unwrap();
        // The offline backend was up before it was set offline: its last
        // verdict must not be shown as if it were still checked.
        cp.observe(&key, Ipv4Addr::new(10, 0, 0, 13).into(), Ok(()), 1);
        cp.observe_encap(
            &key,
            Ipv4Addr::new(10, 0, 0, 12).into(),
            Err("no SYN-ACK".into()),
            1,
        );
        let node: IpAddr = Ipv4Addr::new(10, 0, 0, 11).into();
        let role = |on: bool| Role {
            running: on,
            configured: on,
        };
        let s = Status::of(&cp, node, role(true), Path::new("/x.yaml"), None);
        let b: Vec<(&str, Option<&str>)> = s.services[0]
            .backends
            .iter()
            .map(|b| (b.health.as_str(), b.encap_health.as_deref()))
            .collect();
        assert_eq!(
            b,
            [
                ("unknown", Some("local unknown")),
                ("unknown", Some("down")),
                (NOT_CHECKED, Some(NOT_CHECKED)),
            ]
        );
        assert_eq!(
            s.services[0].backends[1].encap_error.as_deref(),
            Some("no SYN-ACK")
        );
        // A node that is not a balancer checks nothing.
        let s = Status::of(
            &cp,
            Ipv4Addr::new(10, 0, 0, 12).into(),
            role(false),
            Path::new("/x.yaml"),
            None,
        );
        assert!(s.services[0]
            .backends
            .iter()
            .all(|b| b.health == NOT_CHECKED));
    }

    #[test]
    fn reads_state_files_with_or_without_null_fields() {
        let s = sample();
        let dir = std::env::temp_dir().join(format!("nilb-status-test-{}", std::process::id()));
        let path = dir.join("state.yaml");
        s.write(&path).unwrap();
        assert_eq!(Status::read(&path).unwrap(), s);
        // a file from a daemon that left optional fields out
        let text = std::fs::read_to_string(&path).unwrap();
        let older: String = text
            .lines()
            .filter(|l| !l.trim_end().ends_with(": null"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_ne!(older, text);
        std::fs::write(&path, older).unwrap();
        assert_eq!(Status::read(&path).unwrap(), s);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
