//! The validated configuration: what [`super::Config::parse`] returns once
//! every check passed. Field docs give each value's range; docs/config.md
//! describes the file.

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::{
    Position, DEFAULT_MAX_STEP_PERCENT, DEFAULT_MIN_BUCKET_AGE_MS, DEFAULT_MIN_STEP_INTERVAL_MS,
    DEFAULT_PREVIOUS_OWNERS, DEFAULT_RATE_LIMIT_SOURCES,
};
use crate::prefix::Prefix4;
use crate::quic_lb;
pub use crate::types::UnknownFlow;
use crate::types::{Protocol, ServiceKey, ServiceMode};

/// Administrative state of a backend (docs/config.md "Backend states").
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
    /// HTTPS: server name and certificate verification as in [`TlsOptions`]
    /// (by default no verification: backends are addressed by IP and
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
        /// Host header; default: the DIP, with `:port` unless the port is
        /// the scheme's default (80, 443).
        host: Option<String>,
        /// HTTPS only: server name and certificate verification.
        tls: TlsOptions,
    },
    /// A TCP connect to `port` on the DIP.
    Tcp {
        /// Port (host order).
        port: u16,
    },
    /// No check: every backend is always healthy.
    None,
}

/// TLS settings of an HTTPS health check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TlsOptions {
    /// Server name sent in the TLS handshake (SNI) and, with `ca_file`,
    /// the name the certificate must carry; default: the check's `host`
    /// (none when `host` is not set: an address is never sent as SNI).
    pub sni: Option<String>,
    /// PEM file of the CA certificates the backend's certificate must
    /// chain to (absolute path). None: certificates are not verified.
    pub ca_file: Option<std::path::PathBuf>,
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
    /// Previous owners a bucket remembers (the hops second chance walks
    /// after the first hop), 1..=[`crate::table::MAX_PREVIOUS`].
    pub previous_owners: u32,
}

impl Default for Rebalance {
    fn default() -> Self {
        Rebalance {
            min_interval_ms: DEFAULT_MIN_STEP_INTERVAL_MS,
            max_step_percent: DEFAULT_MAX_STEP_PERCENT,
            min_bucket_age_ms: DEFAULT_MIN_BUCKET_AGE_MS,
            previous_owners: DEFAULT_PREVIOUS_OWNERS,
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

/// What a rate limit counts separately (`per`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RatePer {
    /// Each source address.
    #[default]
    Address,
    /// Each /24 of IPv4 sources (each /64 of IPv6 sources, once nilb
    /// handles IPv6).
    Subnet,
}

impl fmt::Display for RatePer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RatePer::Address => "address",
            RatePer::Subnet => "subnet",
        })
    }
}

/// A list file named by a prefix rule (read by [`crate::filters`], not by
/// the configuration: `Config::parse` does no I/O).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ListFile {
    /// The path as written; relative paths are relative to the directory
    /// of the configuration file.
    pub path: PathBuf,
    /// Field path in the configuration, e.g. `filters.deny[0].files[1]`.
    pub field: String,
    /// Where the path is written in the configuration.
    pub position: Option<Position>,
}

/// A deny or allow rule: source prefixes inline and from list files.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PrefixRule {
    /// Name, unique in its scope (`[A-Za-z0-9_.-]{1,31}`); default
    /// `deny-N` or `allow`.
    pub name: String,
    /// Field path of the rule, e.g. `services[0].filters.allow`.
    pub field: String,
    /// Inline prefixes, with where each is written.
    pub prefixes: Vec<(Prefix4, Option<Position>)>,
    /// List files.
    pub files: Vec<ListFile>,
    /// Count what it would drop, drop nothing.
    pub dry_run: bool,
    /// (Global deny rules.) The rule may cover cluster addresses, which the
    /// data plane then exempts packet by packet; without it `nilb check`
    /// rejects such a rule.
    pub covers_cluster: bool,
}

/// A rate: so many per second, with a burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    /// Sustained rate, per second (>= 1).
    pub per_second: u64,
    /// Largest burst (>= 1): a source that was quiet may send this many at
    /// once.
    pub burst: u64,
}

/// A per-source rate limit (a token bucket per source and limit).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RateRule {
    /// Name, unique in its scope; default `rate-N`.
    pub name: String,
    /// Field path of the rule, e.g. `filters.rate_limit[0]`.
    pub field: String,
    /// Per address or per subnet.
    pub per: RatePer,
    /// Packets per second, if limited.
    pub packets: Option<Rate>,
    /// TCP SYNs (new connections) per second, if limited.
    pub syns: Option<Rate>,
    /// Count what it would drop, drop nothing.
    pub dry_run: bool,
}

/// Top-level `filters:`: rules for everything the XDP balancer sees.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Filters {
    /// Rate-limit states kept at once (LRU), over all rules.
    pub rate_limit_sources: u32,
    /// Deny rules.
    pub deny: Vec<PrefixRule>,
    /// Rate limits.
    pub rate_limit: Vec<RateRule>,
}

impl Default for Filters {
    fn default() -> Self {
        Filters {
            rate_limit_sources: DEFAULT_RATE_LIMIT_SOURCES,
            deny: Vec::new(),
            rate_limit: Vec::new(),
        }
    }
}

/// A service's `filters:`: rules for its own packets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServiceFilters {
    /// When present, only these sources reach the service.
    pub allow: Option<PrefixRule>,
    /// Deny rules.
    pub deny: Vec<PrefixRule>,
    /// Rate limits.
    pub rate_limit: Vec<RateRule>,
}

impl ServiceFilters {
    /// Whether the service has any filter.
    pub fn is_empty(&self) -> bool {
        self.allow.is_none() && self.deny.is_empty() && self.rate_limit.is_empty()
    }
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
    /// Edge filters for everything the XDP balancer sees.
    pub filters: Filters,
    /// Announcing the VIPs over BGP through a routing daemon (None: nilb
    /// announces nothing, as a single balancer needs).
    pub routing: Option<Routing>,
}

/// `routing:`: how this balancer announces its VIPs (docs/config.md
/// "Routing"). nilb writes `routes_file` (one BIRD static route per VIP it
/// announces) and asks BIRD to re-read its config through `bird_socket`.
/// In both paths `{node}` stands for this node's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routing {
    /// BIRD's control socket (`birdc -s`).
    pub bird_socket: PathBuf,
    /// The file BIRD's config includes inside nilb's static protocol.
    pub routes_file: PathBuf,
    /// The `birdc` program.
    pub birdc: PathBuf,
    /// Withdraw every VIP of this balancer (drain) while the data plane
    /// keeps forwarding what still arrives.
    pub drained: bool,
    /// While this file exists the balancer is drained as with `drained`
    /// (`touch` to drain one balancer of a cluster sharing one config, `rm`
    /// to undo; checked every 200 ms).
    pub drain_file: PathBuf,
    /// Withdraw a service's VIP while the service fails open (no backend
    /// healthy); false: keep announcing it and fail open.
    pub withdraw_on_fail_open: bool,
    /// On SIGTERM, time between the withdrawal and detaching the data
    /// plane, ms: the router moves the traffic meanwhile.
    pub withdraw_grace_ms: u64,
}

/// `cluster:` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Seed of the flow hash (host order); the same on every balancer.
    pub hash_seed: u32,
    /// Nodes that receive VIP traffic and run the XDP balancer: all of one
    /// family with every backend's DIP (docs/config.md "IPv6 cluster
    /// network").
    pub balancers: Vec<IpAddr>,
    /// GUE UDP port (host order).
    pub gue_port: u16,
    /// Last-hop policy for unknown flows.
    pub unknown_flow: UnknownFlow,
    /// ICMP "fragmentation needed" replies a balancer sends per second and
    /// CPU to packets too big for the encapsulation (also the burst); 0:
    /// none, such packets are only dropped.
    pub icmp_too_big_rate: u16,
    /// NAT-mode flow table of every node (`cluster.nat`).
    pub nat: NatSettings,
    /// Tables shared through etcd (`cluster.etcd`; None: every balancer
    /// builds its own tables).
    pub etcd: Option<Etcd>,
}

impl Cluster {
    /// Whether the cluster network is IPv6 (balancers and DIPs IPv6, GUE in
    /// outer IPv6; docs/config.md "IPv6 cluster network"). A validated
    /// configuration has one family, that of its balancers.
    pub fn is_ipv6(&self) -> bool {
        self.balancers.first().is_some_and(IpAddr::is_ipv6)
    }
}

/// `cluster.etcd:` (docs/config.md "Cluster", docs/design.md "Several
/// balancers"): one elected balancer computes the tables and publishes
/// them under `prefix`; the others install exactly what it published.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Etcd {
    /// Client URLs of the etcd members (`http://host:port`, addresses as
    /// literals: nilb resolves no host names).
    pub endpoints: Vec<String>,
    /// Key prefix of this cluster (no trailing slash): `PREFIX/leader`,
    /// `PREFIX/tables/<service key>`.
    pub prefix: String,
    /// Lease of the leader key, ms: how long a balancer that stopped
    /// without revoking it (SIGKILL, host down) stays leader.
    pub lease_ttl_ms: u64,
}

/// `cluster.nat:` (docs/config.md "NAT mode"): the per-node table of
/// NAT-mode flows (`nat_flows`, one entry per connection a backend
/// accepted for a `mode: nat` service).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatSettings {
    /// Entries `nat_flows` holds at most (set when the map is created; a
    /// change takes effect at the next start, which copies the flows).
    /// A new flow beyond it is dropped and counted; tracked ones are
    /// unaffected.
    pub max_flows: u32,
    /// Milliseconds without a packet after which a UDP flow's entry is
    /// removed (UDP has no end to see).
    pub udp_timeout_ms: u64,
}

impl Default for NatSettings {
    fn default() -> Self {
        NatSettings {
            max_flows: crate::limits::NAT_DEFAULT_FLOWS,
            udp_timeout_ms: 120_000,
        }
    }
}

/// One (VIP, port, protocol) with its backends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// Unique name, `[A-Za-z0-9_.-]{1,64}`.
    pub name: String,
    /// Service address: IPv4, or IPv6 (DSR only; carried over the IPv4
    /// cluster network as GUE inner protocol 41).
    pub vip: IpAddr,
    /// Service port (host order), 1-65535.
    pub port: u16,
    /// TCP or UDP.
    pub protocol: Protocol,
    /// DSR (the backends hold the VIP) or NAT (they hold nothing).
    pub mode: ServiceMode,
    /// NAT mode: the port the service listens on at every backend's own
    /// address (host order); `port` unless `target_port` is given. DSR:
    /// always `port`.
    pub target_port: u16,
    /// Buckets, a power of two in [`super::MIN_TABLE_SIZE`,
    /// `crate::limits::MAX_TABLE_SIZE`].
    pub table_size: u32,
    /// How its backends are checked.
    pub health_check: HealthCheck,
    /// Load-aware weights, if configured.
    pub dynamic_weight: Option<DynamicWeight>,
    /// Below this share (percent) of healthy active weight the service
    /// panics and uses every active backend by weight (0: never), 0-100.
    pub panic_threshold_percent: u32,
    /// Encapsulated health check (`encap_check`, docs/config.md "Health
    /// checks"): each backend must also answer a GUE-encapsulated SYN to
    /// the VIP. TCP services only.
    pub encap_check: bool,
    /// QUIC-LB routing by the server ID in QUIC connection IDs (UDP
    /// services only), if configured.
    pub quic_lb: Option<QuicLb>,
    /// Backends in file order.
    pub backends: Vec<Backend>,
    /// Edge filters for the service's own packets.
    pub filters: ServiceFilters,
}

/// `quic_lb:` of a UDP service (docs/config.md "QUIC-LB"): the balancer
/// sends a QUIC packet whose destination connection ID carries this
/// configuration's codepoint and a backend's server ID to that backend,
/// whatever its 4-tuple; servers issue such IDs with the same parameters
/// ([`crate::quic_lb::CidGenerator`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuicLb {
    /// Config rotation codepoint, 0-6 (7 marks unroutable IDs).
    pub codepoint: u8,
    /// Server ID length in bytes, 1-15.
    pub server_id_len: u8,
    /// Nonce length in bytes, 4-18; with the server ID at most 19.
    pub nonce_len: u8,
    /// plaintext, single-pass (server ID + nonce = 16 bytes) or four-pass.
    pub algorithm: quic_lb::Algorithm,
    /// Whether the first octet's low 5 bits carry the CID length - 1.
    pub self_encode_length: bool,
    /// Absolute path of the key file (keyed algorithms), re-read on every
    /// reload (key rotation).
    pub key_file: Option<PathBuf>,
    /// The AES-128 key read from `key_file` (keyed algorithms).
    pub key: Option<quic_lb::Key>,
    /// Each backend's server ID, in the order of the service's backends.
    pub server_ids: Vec<QuicServerId>,
}

/// The server ID of one backend of a QUIC-LB service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuicServerId {
    /// The backend.
    pub dip: IpAddr,
    /// Its server ID (`server_id_len` bytes).
    pub server_id: quic_lb::ServerId,
    /// True when nilb assigned it (no `server_id` in the file): the last
    /// `server_id_len` bytes of the address, zero-extended in front.
    pub assigned: bool,
}

impl QuicLb {
    /// The library configuration servers and the balancer share.
    pub fn config(&self) -> quic_lb::Config {
        quic_lb::Config::new(&quic_lb::ConfigSpec {
            codepoint: self.codepoint,
            server_id_len: self.server_id_len as usize,
            nonce_len: self.nonce_len as usize,
            key: self.key.clone(),
            self_encode_length: self.self_encode_length,
        })
        .expect("validated by the configuration loader")
    }

    /// The server ID of backend `dip`, if it is one of the service's.
    pub fn server_id_of(&self, dip: IpAddr) -> Option<quic_lb::ServerId> {
        self.server_ids
            .iter()
            .find(|s| s.dip == dip)
            .map(|s| s.server_id)
    }

    /// Length of the connection IDs this configuration's servers issue:
    /// 1 + server ID + nonce bytes.
    pub fn cid_len(&self) -> usize {
        1 + self.server_id_len as usize + self.nonce_len as usize
    }
}

/// The server ID nilb assigns to a backend without `server_id`: the last
/// `len` bytes of its address, zero-extended in front when `len` is more
/// than the address has (10.0.0.12 with 1 byte: `0c`; with 2: `000c`; with
/// 6: `00000a00000c`; 2001:db8::12 with 2: `0012`).
pub fn assigned_server_id(dip: IpAddr, len: usize) -> quic_lb::ServerId {
    let mut b = [0u8; quic_lb::MAX_SERVER_ID_LEN];
    let o: Vec<u8> = match dip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let n = len.min(o.len());
    b[len - n..len].copy_from_slice(&o[o.len() - n..]);
    quic_lb::ServerId::new(&b[..len]).expect("1..=15 bytes")
}

/// The IPv4 addresses of `set` (what the edge filters, which match IPv4
/// sources, exempt as cluster addresses).
pub fn ipv4_only(set: &BTreeSet<IpAddr>) -> BTreeSet<std::net::Ipv4Addr> {
    set.iter()
        .filter_map(|a| match a {
            IpAddr::V4(a) => Some(*a),
            IpAddr::V6(_) => None,
        })
        .collect()
}

/// A backend of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// The backend's own address (GUE outer destination), of the cluster's
    /// family.
    pub dip: IpAddr,
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
    /// Every address allowed to send GUE to a node: the balancers and every
    /// listed backend of every service (a first hop forwards to the second).
    pub fn cluster_addresses(&self) -> BTreeSet<IpAddr> {
        let mut set: BTreeSet<IpAddr> = self.cluster.balancers.iter().copied().collect();
        for s in &self.services {
            set.extend(s.backends.iter().map(|b| b.dip));
        }
        set
    }

    /// The IPv4 ones of [`Self::cluster_addresses`] (all of them on an IPv4
    /// cluster network, none on an IPv6 one): what the edge filters, which
    /// match IPv4 sources, exempt.
    pub fn cluster_addresses_v4(&self) -> BTreeSet<std::net::Ipv4Addr> {
        ipv4_only(&self.cluster_addresses())
    }

    /// Distinct VIP addresses.
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        self.services.iter().map(|s| s.vip).collect()
    }

    /// The service with this key.
    pub fn service(&self, key: &ServiceKey) -> Option<&Service> {
        self.services.iter().find(|s| s.key() == *key)
    }
}
