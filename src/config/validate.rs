//! Semantic validation of the raw shape ([`super::raw`]) into the model
//! ([`super::model`]): every problem is reported with its field path (and
//! position, when the YAML gave one), and checking goes on after a problem
//! so that one pass reports them all. One function per section of the file.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::model::{
    assigned_server_id, Backend, Checker, Cluster, Config, DynamicWeight, Filters, HealthCheck,
    ListFile, LoadSource, NatSettings, PrefixRule, QuicLb, QuicServerId, Rate, RateRule, Rebalance,
    Routing, Scheme, Service, ServiceFilters, TlsOptions,
};
use super::raw::{
    RawBackend, RawCluster, RawConfig, RawDefaults, RawDynamicWeight, RawFilters, RawHealthCheck,
    RawHttp, RawNat, RawNone, RawPrefixRule, RawQuicLb, RawRateRule, RawRebalance, RawRouting,
    RawServerId, RawService, RawServiceFilters, RawTcp, RawTiming,
};
use super::{
    Position, Problem, DEFAULT_BIRDC, DEFAULT_BIRD_SOCKET, DEFAULT_DRAIN_FILE, DEFAULT_GUE_PORT,
    DEFAULT_ICMP_TOO_BIG_RATE, DEFAULT_INTERVAL_MS, DEFAULT_PANIC_THRESHOLD_PERCENT,
    DEFAULT_RATE_LIMIT_SOURCES, DEFAULT_RISE_FALL, DEFAULT_ROUTES_FILE, DEFAULT_TABLE_SIZE,
    DEFAULT_TIMEOUT_MS, DEFAULT_WEIGHT, DEFAULT_WITHDRAW_GRACE_MS, MAX_RATE_LIMIT_SOURCES,
    MAX_RATE_PER_SECOND, MAX_RULE_NAME, MAX_TOTAL_BUCKETS, MAX_WITHDRAW_GRACE_MS,
    MIN_BUCKETS_PER_BACKEND, MIN_INTERVAL_MS, MIN_RATE_LIMIT_SOURCES, MIN_TABLE_SIZE,
};
use crate::limits;
use crate::prefix::SourcePrefix;
use crate::quic_lb::{self, Algorithm, ServerId};
use crate::types::{Protocol, ServiceMode};

/// Collects problems while the raw file is turned into a [`Config`].
pub(super) struct Validator {
    pub(super) problems: Vec<Problem>,
    /// The file's text: positions are looked up in it when first needed.
    pub(super) src: String,
    /// Positions by field path ([`super::yaml::positions`]), made at the
    /// first lookup: a valid file without filters never needs them.
    pub(super) positions: Option<HashMap<String, Position>>,
    /// The first cluster address read (path, address): every other one
    /// must be of its family.
    pub(super) cluster_family: Option<(String, IpAddr)>,
}

/// The `defaults:` section, checked.
struct Defaults {
    table_size: u32,
    timing: RawTiming,
    rebalance: Rebalance,
    panic_threshold_percent: u32,
    encap_check: Option<bool>,
}

/// Names and keys seen so far, to report duplicates with the first use.
#[derive(Default)]
struct Seen {
    names: HashMap<String, usize>,
    keys: HashMap<(IpAddr, u16, Protocol), usize>,
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

/// Why an IPv6 address cannot be a VIP or a cluster address (balancer,
/// DIP, node); None if it can. Every address a
/// client can send to as unicast is fine (global, unique local fc00::/7,
/// documentation 2001:db8::/32 for tests); an IPv4-mapped address
/// (::ffff:0:0/96) would be the IPv4 address's service.
pub(crate) fn unusable_address6(a: Ipv6Addr) -> Option<&'static str> {
    let s = a.segments();
    if a.is_unspecified() {
        Some("the unspecified address")
    } else if a.is_loopback() {
        Some("the loopback address")
    } else if a.is_multicast() {
        Some("a multicast address (ff00::/8)")
    } else if s[0] & 0xffc0 == 0xfe80 {
        Some("link-local (fe80::/10): it names a different host on every link")
    } else if s[..5] == [0; 5] && s[5] == 0xffff {
        Some("IPv4-mapped (::ffff:0:0/96), which means its IPv4 address")
    } else if s[..6] == [0; 6] {
        Some("IPv4-compatible (::/96, deprecated by RFC 4291)")
    } else {
        None
    }
}

/// A host name as it may appear in logs, metrics labels and a Host header:
/// 1-253 characters, no whitespace or control characters.
fn is_host_name(h: &str) -> bool {
    !h.is_empty() && h.len() <= 253 && !h.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A name a TLS client may send as SNI: a DNS name, not an address literal.
fn is_dns_name(name: &str) -> bool {
    name.parse::<std::net::IpAddr>().is_err()
        && rustls_pki_types::DnsName::try_from(name.to_string()).is_ok()
}

/// A CA file for HTTPS checks must be an absolute path (the daemon may run
/// with another working directory than `nilb check`) to a readable PEM file
/// with at least one certificate.
fn check_ca_file(path: &std::path::Path) -> Result<(), String> {
    use rustls_pki_types::pem::PemObject;
    if !path.is_absolute() {
        return Err(format!(
            "`{}` is not an absolute path (the daemon resolves no relative paths)",
            path.display()
        ));
    }
    let iter = rustls_pki_types::CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut n = 0;
    for cert in iter {
        cert.map_err(|e| format!("{}: not a PEM certificate file: {e}", path.display()))?;
        n += 1;
    }
    if n == 0 {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(())
}

/// A QUIC-LB key file: an absolute path to a readable file holding 32 hex
/// digits (whitespace and `:` ignored). Messages never quote the contents.
fn read_quic_key(path: &std::path::Path) -> Result<quic_lb::Key, String> {
    use std::io::Read;
    if !path.is_absolute() {
        return Err(format!(
            "`{}` is not an absolute path (the daemon resolves no relative paths)",
            path.display()
        ));
    }
    let mut text = String::new();
    super::open_regular_file(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    quic_lb::Key::from_hex(&text).map_err(|_| {
        format!(
            "{} does not hold a QUIC-LB key: 32 hex digits (16 bytes) expected",
            path.display()
        )
    })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl Validator {
    /// Where `path` is in the file (None: unknown).
    pub(super) fn position(&mut self, path: &str) -> Option<Position> {
        let src = &self.src;
        self.positions
            .get_or_insert_with(|| super::yaml::positions(src).unwrap_or_default())
            .get(path)
            .copied()
    }

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
        let position = self.position(&path);
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

    /// A cluster address (balancer or backend DIP): a usable IPv4 address
    /// as [`Self::address`], or a global or unique-local IPv6 one
    /// ([`unusable_address6`]); every cluster address of the file of one
    /// family (docs/config.md "IPv6 cluster network").
    fn cluster_address(&mut self, path: &str, text: &str, role: &str) -> IpAddr {
        let a = match text.parse::<Ipv6Addr>() {
            Ok(a) => {
                if let Some(why) = unusable_address6(a) {
                    self.report(path, format!("{a} is {why} and cannot be a {role}"));
                }
                IpAddr::V6(a)
            }
            Err(_) if text.parse::<Ipv4Addr>().is_err() => {
                self.report(
                    path,
                    format!("`{text}` is not an IPv4 or IPv6 address literal"),
                );
                return IpAddr::V4(Ipv4Addr::UNSPECIFIED);
            }
            Err(_) => IpAddr::V4(self.address(path, text, role)),
        };
        match &self.cluster_family {
            None => self.cluster_family = Some((path.to_string(), a)),
            Some((first_path, first)) if first.is_ipv6() != a.is_ipv6() => {
                let family = |x: &IpAddr| if x.is_ipv6() { "IPv6" } else { "IPv4" };
                let message = format!(
                    "cluster addresses must be one family: {path} {a} is {} while {first_path} {first} is {}",
                    family(&a),
                    family(first)
                );
                self.report(path, message);
            }
            Some(_) => {}
        }
        a
    }

    /// A service address: an IPv4 address as [`Self::address`], or an
    /// IPv6 one ([`unusable_address6`]).
    fn vip_address(&mut self, path: &str, text: &str) -> IpAddr {
        if let Ok(a) = text.parse::<Ipv6Addr>() {
            if let Some(why) = unusable_address6(a) {
                self.report(path, format!("{a} is {why} and cannot be a VIP"));
            }
            return IpAddr::V6(a);
        }
        if text.parse::<Ipv4Addr>().is_err() {
            self.report(
                path,
                format!("`{text}` is not an IPv4 or IPv6 address literal"),
            );
            return IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        }
        IpAddr::V4(self.address(path, text, "VIP"))
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
            previous_owners: r.previous_owners.unwrap_or(d.previous_owners),
        };
        let most = crate::table::MAX_PREVIOUS as u32;
        if !(1..=most).contains(&out.previous_owners) {
            self.report(
                "defaults.rebalance.previous_owners",
                format!(
                    "{} is outside 1-{most} (a bucket lists its first hop and at most {most} previous owners)",
                    out.previous_owners
                ),
            );
        }
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
        let tls = self.tls_options(path, h, scheme);
        Checker::Http {
            scheme,
            uri,
            port,
            codes: codes.into_iter().map(|c| c.min(999) as u16).collect(),
            host: h.host.clone(),
            tls,
        }
    }

    /// `sni` and `ca_file` of an HTTP checker (HTTPS only). The server name
    /// defaults to `host` without a `:port` suffix, when that is a DNS name.
    fn tls_options(&mut self, path: &str, h: &RawHttp, scheme: Scheme) -> TlsOptions {
        if scheme != Scheme::Https {
            for (field, set) in [("sni", h.sni.is_some()), ("ca_file", h.ca_file.is_some())] {
                if set {
                    self.report(
                        format!("{path}.{field}"),
                        "only HTTPS checks have a TLS handshake (set scheme: https)",
                    );
                }
            }
            return TlsOptions::default();
        }
        let sni = match &h.sni {
            Some(name) => {
                if !is_dns_name(name) {
                    self.report(
                        format!("{path}.sni"),
                        format!("`{name}` is not a DNS name (an address is never sent as a TLS server name)"),
                    );
                }
                Some(name.clone())
            }
            None => h.host.as_deref().and_then(|host| {
                let name = match host.rsplit_once(':') {
                    Some((n, port)) if port.parse::<u16>().is_ok() => n,
                    _ => host,
                };
                is_dns_name(name).then(|| name.to_string())
            }),
        };
        let ca_file = h.ca_file.as_ref().map(|f| {
            let p = std::path::PathBuf::from(f);
            if let Err(why) = check_ca_file(&p) {
                self.report(format!("{path}.ca_file"), why);
            }
            p
        });
        TlsOptions { sni, ca_file }
    }

    /// The whole file: its sections in file order, then the limits that span
    /// services. Problems come out in this order.
    pub(super) fn config(&mut self, raw: RawConfig) -> Config {
        self.version(raw.version);
        let cluster = self.cluster(&raw.cluster);
        let defaults = self.defaults(&raw.defaults);
        let services = self.services(raw.services, &cluster, &defaults);
        let filters = self.filters(raw.filters.unwrap_or_default());
        let routing = raw.routing.map(|r| self.routing(r));
        let cfg = Config {
            cluster,
            rebalance: defaults.rebalance,
            services,
            filters,
            routing,
        };
        self.data_plane_limits(&cfg);
        self.filter_limits(&cfg);
        cfg
    }

    /// Top-level `routing:`: absolute paths, a bounded grace time.
    fn routing(&mut self, raw: RawRouting) -> Routing {
        let path = |v: &mut Self, field: &str, given: Option<String>, default: &str| {
            let p = given.unwrap_or_else(|| default.to_string());
            if !p.starts_with('/') {
                v.report(
                    format!("routing.{field}"),
                    format!("`{p}` is not an absolute path"),
                );
            }
            std::path::PathBuf::from(p)
        };
        let bird_socket = path(self, "bird_socket", raw.bird_socket, DEFAULT_BIRD_SOCKET);
        let routes_file = path(self, "routes_file", raw.routes_file, DEFAULT_ROUTES_FILE);
        let birdc = path(self, "birdc", raw.birdc, DEFAULT_BIRDC);
        let drain_file = path(self, "drain_file", raw.drain_file, DEFAULT_DRAIN_FILE);
        // Each path has one role: nilb writes routes_file, BIRD listens on
        // bird_socket, the operator creates drain_file (a routes file that
        // is also the drain file would drain the balancer for ever).
        let named = [
            ("bird_socket", &bird_socket),
            ("routes_file", &routes_file),
            ("birdc", &birdc),
            ("drain_file", &drain_file),
        ];
        for (i, (field, p)) in named.iter().enumerate() {
            if let Some((other, _)) = named[..i].iter().find(|(_, q)| q == p) {
                self.report(
                    format!("routing.{field}"),
                    format!(
                        "`{}` is also routing.{other}: each of bird_socket, routes_file, birdc and drain_file needs its own path",
                        p.display()
                    ),
                );
            }
        }
        let withdraw_grace_ms = match raw.withdraw_grace_ms {
            Some(g) if g > MAX_WITHDRAW_GRACE_MS => {
                self.report(
                    "routing.withdraw_grace_ms",
                    format!("{g} ms is more than {MAX_WITHDRAW_GRACE_MS} ms"),
                );
                DEFAULT_WITHDRAW_GRACE_MS
            }
            Some(g) => g,
            None => DEFAULT_WITHDRAW_GRACE_MS,
        };
        Routing {
            bird_socket,
            routes_file,
            birdc,
            drained: raw.drained,
            drain_file,
            withdraw_on_fail_open: raw.withdraw_on_fail_open,
            withdraw_grace_ms,
        }
    }

    /// Top-level `filters:`: the rate-limit state size, deny rules and rate
    /// limits (cluster coverage is checked once every address is known, in
    /// [`Validator::filter_limits`]).
    fn filters(&mut self, raw: RawFilters) -> Filters {
        let rate_limit_sources = match raw.rate_limit_sources {
            Some(n) if !(MIN_RATE_LIMIT_SOURCES..=MAX_RATE_LIMIT_SOURCES).contains(&n) => {
                self.report(
                    "filters.rate_limit_sources",
                    format!("{n} is outside {MIN_RATE_LIMIT_SOURCES}-{MAX_RATE_LIMIT_SOURCES}"),
                );
                DEFAULT_RATE_LIMIT_SOURCES
            }
            Some(n) => n as u32,
            None => DEFAULT_RATE_LIMIT_SOURCES,
        };
        let mut names = HashMap::new();
        let deny = raw
            .deny
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let field = format!("filters.deny[{i}]");
                self.prefix_rule(&field, r, &format!("deny-{i}"), true, &mut names)
            })
            .collect();
        let rate_limit = self.rate_rules("filters", raw.rate_limit, &mut names);
        Filters {
            rate_limit_sources,
            deny,
            rate_limit,
        }
    }

    /// A service's `filters:` (`sp`: the service's field path).
    fn service_filters(&mut self, sp: &str, raw: RawServiceFilters) -> ServiceFilters {
        let mut names = HashMap::new();
        let allow = raw.allow.map(|r| {
            let field = format!("{sp}.filters.allow");
            self.prefix_rule(&field, r, "allow", false, &mut names)
        });
        let deny = raw
            .deny
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let field = format!("{sp}.filters.deny[{i}]");
                self.prefix_rule(&field, r, &format!("deny-{i}"), false, &mut names)
            })
            .collect();
        let rate_limit = self.rate_rules(&format!("{sp}.filters"), raw.rate_limit, &mut names);
        ServiceFilters {
            allow,
            deny,
            rate_limit,
        }
    }

    /// A rule's name (or `default`): valid and unique in its scope (`names`:
    /// name -> field path of the rule that has it).
    fn rule_name(
        &mut self,
        field: &str,
        name: Option<String>,
        default: &str,
        names: &mut HashMap<String, String>,
    ) -> String {
        // A problem with a given name points at it, with a default name at the rule.
        let at = if name.is_some() {
            format!("{field}.name")
        } else {
            field.to_string()
        };
        let name = name.unwrap_or_else(|| default.to_string());
        if name.is_empty()
            || name.len() > MAX_RULE_NAME
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        {
            self.report(
                at,
                format!(
                    "`{name}` is not a valid rule name (1-{MAX_RULE_NAME} of A-Z a-z 0-9 _ . -)"
                ),
            );
        } else if let Some(prev) = names.insert(name.clone(), field.to_string()) {
            self.report(
                at,
                format!("rule name `{name}` is already used by {prev} in the same scope"),
            );
        }
        name
    }

    /// A deny or allow rule at `field`: name, inline prefixes (IPv4), list
    /// files; `global`: a top-level rule (only those may cover cluster
    /// addresses).
    fn prefix_rule(
        &mut self,
        field: &str,
        r: RawPrefixRule,
        default_name: &str,
        global: bool,
        names: &mut HashMap<String, String>,
    ) -> PrefixRule {
        let name = self.rule_name(field, r.name, default_name, names);
        let mut prefixes = Vec::new();
        for (i, text) in r.prefixes.iter().enumerate() {
            let path = format!("{field}.prefixes[{i}]");
            match text.trim().parse::<SourcePrefix>() {
                Ok(SourcePrefix::V4(p)) => {
                    let pos = self.position(&path);
                    prefixes.push((p, pos));
                }
                Ok(SourcePrefix::V6(..)) => self.report(
                    path,
                    format!("`{text}`: IPv6 prefixes are not filtered yet (nilb balances IPv4 only; XDP passes IPv6 untouched)"),
                ),
                Err(e) => self.report(path, e.0),
            }
        }
        let mut files = Vec::new();
        for (i, f) in r.files.iter().enumerate() {
            let path = format!("{field}.files[{i}]");
            if f.trim().is_empty() || f.contains('\0') {
                self.report(&path, format!("`{f}` is not a file name"));
                continue;
            }
            files.push(ListFile {
                path: f.into(),
                position: self.position(&path),
                field: path,
            });
        }
        if r.prefixes.is_empty() && r.files.is_empty() {
            self.report(
                field,
                "needs prefixes or files (one prefix per line) or both",
            );
        }
        if r.covers_cluster && !global {
            self.report(
                format!("{field}.covers_cluster"),
                "only top-level deny rules may cover cluster addresses (a service's rules never see the cluster's GUE or health checks)",
            );
        }
        PrefixRule {
            name,
            field: field.to_string(),
            prefixes,
            files,
            dry_run: r.dry_run,
            covers_cluster: r.covers_cluster && global,
        }
    }

    /// The rate limits of one scope (`base`: the path of its `filters`).
    fn rate_rules(
        &mut self,
        base: &str,
        raw: Vec<RawRateRule>,
        names: &mut HashMap<String, String>,
    ) -> Vec<RateRule> {
        let max = limits::FILTER_RATE_RULES as usize;
        if raw.len() > max {
            self.report(
                format!("{base}.rate_limit"),
                format!("{} rate limits; a scope may have at most {max}", raw.len()),
            );
        }
        raw.into_iter()
            .enumerate()
            .map(|(i, r)| {
                let field = format!("{base}.rate_limit[{i}]");
                let name = self.rule_name(&field, r.name, &format!("rate-{i}"), names);
                let packets = self.rate(
                    &field,
                    "packets_per_second",
                    r.packets_per_second,
                    "burst_packets",
                    r.burst_packets,
                );
                let syns = self.rate(
                    &field,
                    "syns_per_second",
                    r.syns_per_second,
                    "burst_syns",
                    r.burst_syns,
                );
                if r.packets_per_second.is_none() && r.syns_per_second.is_none() {
                    self.report(
                        &field,
                        "needs packets_per_second or syns_per_second (or both)",
                    );
                }
                RateRule {
                    name,
                    field,
                    per: r.per,
                    packets,
                    syns,
                    dry_run: r.dry_run,
                }
            })
            .collect()
    }

    /// One dimension of a rate limit: a rate (1 .. MAX_RATE_PER_SECOND) and
    /// its burst (default: one second's worth).
    fn rate(
        &mut self,
        field: &str,
        rate_key: &str,
        rate: Option<u64>,
        burst_key: &str,
        burst: Option<u64>,
    ) -> Option<Rate> {
        let Some(per_second) = rate else {
            if burst.is_some() {
                self.report(
                    format!("{field}.{burst_key}"),
                    format!("{burst_key} without {rate_key}"),
                );
            }
            return None;
        };
        if !(1..=MAX_RATE_PER_SECOND).contains(&per_second) {
            self.report(
                format!("{field}.{rate_key}"),
                format!("{per_second} is outside 1-{MAX_RATE_PER_SECOND}"),
            );
        }
        let given = burst.is_some();
        let burst = burst.unwrap_or(per_second);
        if given && !(1..=MAX_RATE_PER_SECOND).contains(&burst) {
            self.report(
                format!("{field}.{burst_key}"),
                format!("{burst} is outside 1-{MAX_RATE_PER_SECOND}"),
            );
        }
        Some(Rate {
            per_second: per_second.clamp(1, MAX_RATE_PER_SECOND),
            burst: burst.clamp(1, MAX_RATE_PER_SECOND),
        })
    }

    /// Limits over every filter rule: how many rules there are, and no
    /// top-level deny rule that is not marked `covers_cluster` covers a
    /// cluster address with an inline prefix (list files are checked when
    /// they are read, by [`crate::filters`]).
    fn filter_limits(&mut self, cfg: &Config) {
        let rules = cfg.filters.deny.len()
            + cfg.filters.rate_limit.len()
            + cfg
                .services
                .iter()
                .map(|s| {
                    s.filters.deny.len()
                        + s.filters.rate_limit.len()
                        + usize::from(s.filters.allow.is_some())
                })
                .sum::<usize>();
        let max = limits::MAX_FILTER_RULES as usize - 1;
        if rules > max {
            self.report(
                "filters",
                format!(
                    "{rules} filter rules over all scopes exceed the data plane's limit of {max}"
                ),
            );
        }
        let cluster = cfg.cluster_addresses();
        for (ri, r) in cfg.filters.deny.iter().enumerate() {
            if r.covers_cluster {
                continue;
            }
            for (pi, (p, _)) in r.prefixes.iter().enumerate() {
                if let Some(a) = cluster.iter().find_map(|a| match a {
                    IpAddr::V4(a) if p.contains(*a) => Some(*a),
                    _ => None,
                }) {
                    self.report(
                        format!("filters.deny[{ri}].prefixes[{pi}]"),
                        format!("{p} covers cluster address {a} (a balancer or backend; the cluster's own GUE and health checks are never filtered): narrow the prefix, or mark the rule `covers_cluster: true` to have cluster addresses exempted"),
                    );
                }
            }
        }
    }

    fn version(&mut self, version: u32) {
        if version != 1 {
            self.report(
                "version",
                format!("unsupported version {version} (this nilb reads version 1)"),
            );
        }
    }

    /// `cluster:`: balancers (at least one, distinct, usable) and the GUE port.
    fn cluster(&mut self, raw: &RawCluster) -> Cluster {
        let mut balancers = Vec::new();
        let mut seen = HashSet::new();
        if raw.balancers.is_empty() {
            self.report("cluster.balancers", "at least one balancer is required");
        }
        for (i, b) in raw.balancers.iter().enumerate() {
            let path = format!("cluster.balancers[{i}]");
            let a = self.cluster_address(&path, b, "balancer");
            if !seen.insert(a) {
                self.report(&path, format!("balancer {a} is listed twice"));
            }
            balancers.push(a);
        }
        let gue_port = match raw.gue_port {
            Some(p) => self.port("cluster.gue_port", p),
            None => DEFAULT_GUE_PORT,
        };
        let icmp_too_big_rate = match raw.icmp_too_big_rate {
            Some(r) if r > limits::ICMP_TOO_BIG_RATE_MAX => {
                let max = limits::ICMP_TOO_BIG_RATE_MAX;
                self.report(
                    "cluster.icmp_too_big_rate",
                    format!(
                        "{r} replies per second is more than {max} (per CPU; 0 turns the replies off)"
                    ),
                );
                0
            }
            Some(r) => r as u16,
            None => DEFAULT_ICMP_TOO_BIG_RATE,
        };
        let nat = self.nat(raw.nat.as_ref());
        let etcd = raw.etcd.as_ref().map(|e| self.etcd(e));
        Cluster {
            hash_seed: raw.hash_seed,
            balancers,
            gue_port,
            unknown_flow: raw.unknown_flow,
            icmp_too_big_rate,
            nat,
            etcd,
        }
    }

    /// `cluster.etcd`: at least one `http://ADDRESS:PORT` endpoint, a key
    /// prefix starting with `/`, a lease between 2 s and 60 s.
    fn etcd(&mut self, raw: &super::raw::RawEtcd) -> super::model::Etcd {
        if raw.endpoints.is_empty() {
            self.report(
                "cluster.etcd.endpoints",
                "at least one endpoint (http://ADDRESS:PORT) is required",
            );
        }
        let mut endpoints = Vec::new();
        for (i, e) in raw.endpoints.iter().enumerate() {
            let path = format!("cluster.etcd.endpoints[{i}]");
            match etcd_endpoint(e) {
                Ok(u) => endpoints.push(u),
                Err(why) => self.report(&path, format!("`{e}`: {why}")),
            }
        }
        let prefix = raw
            .prefix
            .clone()
            .unwrap_or_else(|| super::DEFAULT_ETCD_PREFIX.to_string());
        if !prefix.starts_with('/')
            || prefix.len() < 2
            || prefix.ends_with('/')
            || prefix.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            self.report(
                "cluster.etcd.prefix",
                format!("`{prefix}` is not a key prefix like /nilb/site1 (starts with /, no trailing /, no spaces)"),
            );
        }
        let lease_ttl_ms = match raw.lease_ttl_ms {
            Some(t) if !(2_000..=60_000).contains(&t) => {
                self.report(
                    "cluster.etcd.lease_ttl_ms",
                    format!(
                        "{t} ms is outside 2000-60000 (etcd leases are whole seconds, at least 2)"
                    ),
                );
                super::DEFAULT_ETCD_LEASE_TTL_MS
            }
            Some(t) => t,
            None => super::DEFAULT_ETCD_LEASE_TTL_MS,
        };
        super::model::Etcd {
            endpoints,
            prefix,
            lease_ttl_ms,
        }
    }

    /// `cluster.nat`: the NAT flow table's size and UDP timeout.
    fn nat(&mut self, raw: Option<&RawNat>) -> NatSettings {
        let mut nat = NatSettings::default();
        let Some(raw) = raw else { return nat };
        if let Some(n) = raw.max_flows {
            if !(1024..=limits::NAT_MAX_FLOWS).contains(&n) {
                self.report(
                    "cluster.nat.max_flows",
                    format!(
                        "{n} flows is outside 1024-{} (entries of the NAT flow table)",
                        limits::NAT_MAX_FLOWS
                    ),
                );
            } else {
                nat.max_flows = n;
            }
        }
        if let Some(t) = raw.udp_timeout_ms {
            if !(1_000..=86_400_000).contains(&t) {
                self.report(
                    "cluster.nat.udp_timeout_ms",
                    format!("{t} ms is outside 1000-86400000 (1 s to 1 day)"),
                );
            } else {
                nat.udp_timeout_ms = t;
            }
        }
        nat
    }

    /// A panic threshold: a percentage, 0 (off) to 100.
    fn panic_threshold(&mut self, path: &str, p: u32) -> u32 {
        if p > 100 {
            self.report(
                path,
                format!("{p} is outside 0-100 (percent of the healthy weight; 0 disables panic)"),
            );
        }
        p.min(100)
    }

    /// `defaults:`: table size, health-check timing, rebalance limits,
    /// panic threshold.
    fn defaults(&mut self, raw: &RawDefaults) -> Defaults {
        let table_size = match raw.table_size {
            Some(t) => {
                self.table_size("defaults.table_size", t);
                t
            }
            None => DEFAULT_TABLE_SIZE,
        };
        let panic_threshold_percent = match raw.panic_threshold_percent {
            Some(p) => self.panic_threshold("defaults.panic_threshold_percent", p),
            None => DEFAULT_PANIC_THRESHOLD_PERCENT,
        };
        Defaults {
            table_size,
            timing: raw.health_check,
            rebalance: self.rebalance(&raw.rebalance),
            panic_threshold_percent,
            encap_check: raw.encap_check,
        }
    }

    /// `services:`: how many, then each in file order.
    fn services(
        &mut self,
        raw: Vec<RawService>,
        cluster: &Cluster,
        defaults: &Defaults,
    ) -> Vec<Service> {
        let max_services = limits::MAX_SERVICES as usize;
        if raw.len() > max_services {
            self.report(
                "services",
                format!(
                    "{} services exceed the data plane's limit of {max_services}",
                    raw.len()
                ),
            );
        }
        let mut seen = Seen::default();
        raw.into_iter()
            .enumerate()
            .map(|(si, rs)| self.service(si, rs, cluster, defaults, &mut seen))
            .collect()
    }

    /// One service: name, address, table size, health check, dynamic
    /// weights, backends.
    fn service(
        &mut self,
        si: usize,
        mut rs: RawService,
        cluster: &Cluster,
        defaults: &Defaults,
        seen: &mut Seen,
    ) -> Service {
        let sp = format!("services[{si}]");
        self.service_name(&sp, si, &rs.name, seen);
        let (vip, port) = self.service_address(&sp, si, &rs, cluster, seen);
        let target_port = match (rs.mode, rs.target_port) {
            (ServiceMode::Nat, Some(t)) => {
                let t = self.port(&format!("{sp}.target_port"), t);
                if rs.protocol == Protocol::Udp && t == cluster.gue_port {
                    self.report(
                        format!("{sp}.target_port"),
                        format!("UDP port {t} is the cluster's GUE port"),
                    );
                }
                t
            }
            (ServiceMode::Dsr, Some(_)) => {
                self.report(
                    format!("{sp}.target_port"),
                    "target_port needs `mode: nat` (in DSR mode the backends listen on the VIP's port)",
                );
                port
            }
            (_, None) => port,
        };
        let table_size = self.service_table_size(&sp, &rs, defaults.table_size);
        // The backends listen on target_port: checks go there by default.
        let health_check = self.health_check(
            &sp,
            rs.health_check.as_ref(),
            &defaults.timing,
            target_port,
            rs.protocol,
        );
        let dynamic_weight = rs
            .dynamic_weight
            .as_ref()
            .map(|d| self.dynamic_weight(&format!("{sp}.dynamic_weight"), d));
        let panic_threshold_percent = match rs.panic_threshold_percent {
            Some(p) => self.panic_threshold(&format!("{sp}.panic_threshold_percent"), p),
            None => defaults.panic_threshold_percent,
        };
        let encap_check = self.encap_check(
            &sp,
            &rs,
            &health_check,
            defaults.encap_check,
            cluster.is_ipv6(),
        );
        let server_ids: Vec<Option<RawServerId>> =
            rs.backends.iter_mut().map(|b| b.server_id.take()).collect();
        let raw_quic = rs.quic_lb.take();
        if vip.is_ipv6()
            && rs.filters.as_ref().is_some_and(|f| {
                f.allow.is_some() || !f.deny.is_empty() || !f.rate_limit.is_empty()
            })
        {
            self.report(
                format!("{sp}.filters"),
                "edge filters match IPv4 sources only: an IPv6 service cannot have filters (an allow list would let every IPv6 source through)",
            );
        }
        // A DSR VIP at a balancer's address was reported with the address:
        // a backend at that address is not a second problem.
        let vip_reported = rs.mode == ServiceMode::Dsr && cluster.balancers.contains(&vip);
        let backends = self.backends(&sp, vip, rs.mode, vip_reported, rs.backends);
        let quic_lb = self.quic_lb(&sp, rs.protocol, raw_quic.as_ref(), &backends, server_ids);
        let filters = self.service_filters(&sp, rs.filters.unwrap_or_default());
        Service {
            name: rs.name,
            vip,
            port,
            protocol: rs.protocol,
            mode: rs.mode,
            target_port,
            table_size,
            health_check,
            dynamic_weight,
            panic_threshold_percent,
            encap_check,
            quic_lb,
            backends,
            filters,
        }
    }

    /// `encap_check`: the service's own value, else `defaults.encap_check`
    /// (default true) for TCP services that have a checker. Asking for it
    /// on a UDP service is an error (the check is a TCP handshake).
    fn encap_check(
        &mut self,
        sp: &str,
        rs: &RawService,
        check: &HealthCheck,
        default: Option<bool>,
        cluster_ipv6: bool,
    ) -> bool {
        let ipv6 = rs.vip.parse::<Ipv6Addr>().is_ok();
        match rs.encap_check {
            Some(true) if cluster_ipv6 => {
                self.report(
                    format!("{sp}.encap_check"),
                    "the encapsulated check sends its SYN in GUE over outer IPv4; on an IPv6 cluster network it cannot (the service's regular check decides)",
                );
                false
            }
            Some(true) if ipv6 => {
                self.report(
                    format!("{sp}.encap_check"),
                    "the encapsulated check sends an IPv4 SYN through GUE; an IPv6 service cannot have it (its regular check decides)",
                );
                false
            }
            Some(true) if rs.protocol == Protocol::Udp => {
                self.report(
                    format!("{sp}.encap_check"),
                    "the encapsulated check is a TCP handshake through GUE; a UDP service cannot have it",
                );
                false
            }
            Some(own) => own,
            None => {
                default.unwrap_or(true)
                    && rs.protocol == Protocol::Tcp
                    && check.checker != Checker::None
                    && !ipv6
                    && !cluster_ipv6
            }
        }
    }

    fn service_name(&mut self, sp: &str, si: usize, name: &str, seen: &mut Seen) {
        if !valid_name(name) {
            self.report(
                format!("{sp}.name"),
                format!("`{name}` is not a valid name (1-64 of A-Z a-z 0-9 _ . -)"),
            );
        } else if let Some(prev) = seen.names.insert(name.to_string(), si) {
            self.report(
                format!("{sp}.name"),
                format!("name `{name}` is already used by services[{prev}]"),
            );
        }
    }

    /// VIP and port: usable, not the GUE port (UDP), not a balancer, and
    /// (VIP, port, protocol) not served twice.
    fn service_address(
        &mut self,
        sp: &str,
        si: usize,
        rs: &RawService,
        cluster: &Cluster,
        seen: &mut Seen,
    ) -> (IpAddr, u16) {
        let vip = self.vip_address(&format!("{sp}.vip"), &rs.vip);
        let port = self.port(&format!("{sp}.port"), rs.port);
        if rs.protocol == Protocol::Udp && port == cluster.gue_port {
            self.report(
                format!("{sp}.port"),
                format!("UDP port {port} is the cluster's GUE port"),
            );
        }
        if vip.is_ipv6() && rs.mode == ServiceMode::Nat {
            self.report(
                format!("{sp}.mode"),
                "NAT mode is IPv4 only: an IPv6 service is DSR (its backends hold the VIP on lo)",
            );
        } else if cluster.is_ipv6() && rs.mode == ServiceMode::Nat {
            self.report(
                format!("{sp}.mode"),
                "NAT mode needs an IPv4 cluster network (its translation and flow table hold IPv4 node addresses): on an IPv6 cluster network a service is DSR",
            );
        }
        if cluster.balancers.contains(&vip) && rs.mode != ServiceMode::Nat {
            self.report(
                format!("{sp}.vip"),
                format!("{vip} is a balancer's own address, not a VIP (a service on a node's own address needs `mode: nat`)"),
            );
        }
        let key = (vip, port, rs.protocol);
        // An unusable VIP or port was reported already; comparing it
        // with others would only add false duplicates.
        let comparable = !vip.is_unspecified() && port != 0;
        if let Some(prev) = comparable.then(|| seen.keys.insert(key, si)).flatten() {
            self.report(
                sp,
                format!(
                    "({vip}, {port}, {}) is already served by services[{prev}]",
                    rs.protocol
                ),
            );
        }
        (vip, port)
    }

    /// The service's table size (its own or the default), large enough for
    /// its backends.
    fn service_table_size(&mut self, sp: &str, rs: &RawService, default: u32) -> u32 {
        let table_size = match rs.table_size {
            Some(t) => {
                self.table_size(&format!("{sp}.table_size"), t);
                t
            }
            None => default,
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
        table_size
    }

    /// A service's backends: usable, distinct addresses other than the VIP,
    /// weights in range, usable host names.
    fn backends(
        &mut self,
        sp: &str,
        vip: IpAddr,
        mode: ServiceMode,
        vip_reported: bool,
        raw: Vec<RawBackend>,
    ) -> Vec<Backend> {
        let mut backends = Vec::new();
        let mut dips = HashMap::new();
        for (bi, rb) in raw.into_iter().enumerate() {
            let bp = format!("{sp}.backends[{bi}]");
            let dip = self.cluster_address(&format!("{bp}.dip"), &rb.dip, "backend");
            // NAT mode: the node whose own address the service has is one
            // of its backends like any other.
            if dip == vip && mode != ServiceMode::Nat && !vip_reported {
                self.report(
                    format!("{bp}.dip"),
                    format!("{dip} is the service's VIP; a backend needs its own address"),
                );
            }
            // An unparsable dip was reported as such (and stands as the
            // unspecified address): not also a duplicate of another one.
            let duplicate = if dip.is_unspecified() {
                None
            } else {
                dips.insert(dip, bi)
            };
            if let Some(prev) = duplicate {
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
        backends
    }

    /// `quic_lb:` of a service (docs/config.md "QUIC-LB") and its backends'
    /// server IDs, checked by the draft's rules: codepoint 0-6 (7 marks
    /// unroutable IDs), server ID 1-15 bytes, nonce at least 4, together at
    /// most 19; the algorithm fitting the lengths (single-pass exactly one
    /// 16-byte block); a key from a file for the keyed algorithms, never
    /// inline; server IDs of the configured length and unique in the service.
    fn quic_lb(
        &mut self,
        sp: &str,
        protocol: Protocol,
        raw: Option<&RawQuicLb>,
        backends: &[Backend],
        server_ids: Vec<Option<RawServerId>>,
    ) -> Option<QuicLb> {
        let Some(q) = raw else {
            for (bi, s) in server_ids.iter().enumerate() {
                if s.is_some() {
                    self.report(
                        format!("{sp}.backends[{bi}].server_id"),
                        "only a QUIC-LB service (one with quic_lb:) has server IDs",
                    );
                }
            }
            return None;
        };
        let path = format!("{sp}.quic_lb");
        if protocol != Protocol::Udp {
            self.report(
                &path,
                "QUIC-LB routes QUIC, which runs over UDP: only a UDP service can have quic_lb",
            );
        }
        let codepoint = match q.codepoint {
            7 => {
                self.report(
                    format!("{path}.codepoint"),
                    "codepoint 7 (0b111) is reserved for unroutable connection IDs; use 0-6",
                );
                0
            }
            c if c > 7 => {
                self.report(
                    format!("{path}.codepoint"),
                    format!("codepoint {c} is outside 0-6 (the 3 high bits of the first octet; 7 is reserved)"),
                );
                0
            }
            c => c as u8,
        };
        let (min_sid, max_sid) = (quic_lb::MIN_SERVER_ID_LEN, quic_lb::MAX_SERVER_ID_LEN);
        let sid_len = q.server_id_len as usize;
        let sid_ok = (min_sid..=max_sid).contains(&sid_len);
        if !sid_ok {
            self.report(
                format!("{path}.server_id_len"),
                format!("server ID length {sid_len} is outside {min_sid}-{max_sid} bytes"),
            );
        }
        let nonce_len = q.nonce_len as usize;
        let mut lengths_ok = sid_ok;
        if nonce_len < quic_lb::MIN_NONCE_LEN {
            self.report(
                format!("{path}.nonce_len"),
                format!(
                    "nonce length {nonce_len} is below the minimum of {} bytes",
                    quic_lb::MIN_NONCE_LEN
                ),
            );
            lengths_ok = false;
        } else if sid_ok && sid_len + nonce_len > quic_lb::MAX_BLOCK_LEN {
            self.report(
                format!("{path}.nonce_len"),
                format!(
                    "server ID length {sid_len} + nonce length {nonce_len} = {} bytes exceeds {} (a connection ID is at most 20 bytes with its first octet)",
                    sid_len + nonce_len,
                    quic_lb::MAX_BLOCK_LEN
                ),
            );
            lengths_ok = false;
        }
        let algorithm = match q.algorithm.as_str() {
            "plaintext" => Some(Algorithm::Plaintext),
            "single-pass" => Some(Algorithm::SinglePass),
            "four-pass" => Some(Algorithm::FourPass),
            other => {
                self.report(
                    format!("{path}.algorithm"),
                    format!("unknown algorithm `{other}`, expected `plaintext`, `single-pass` or `four-pass`"),
                );
                None
            }
        };
        let block = sid_len + nonce_len;
        match algorithm {
            Some(Algorithm::SinglePass) if lengths_ok && block != 16 => self.report(
                format!("{path}.algorithm"),
                format!(
                    "single-pass encrypts one 16-byte AES block: server ID + nonce must be 16 bytes, not {block} (nonce_len {} would do; or use four-pass)",
                    16 - sid_len.min(12)
                ),
            ),
            Some(Algorithm::FourPass) if lengths_ok && block == 16 => self.report(
                format!("{path}.algorithm"),
                "with server ID + nonce = 16 bytes the draft uses single-pass (one AES block), not four-pass",
            ),
            _ => {}
        }
        if q.key.is_some() {
            self.report(
                format!("{path}.key"),
                "a key is never written in the configuration: put its 32 hex digits in a file only nilb can read and give that file's path as key_file",
            );
        }
        let keyed = matches!(algorithm, Some(Algorithm::SinglePass | Algorithm::FourPass));
        let key_file = q.key_file.as_ref().map(std::path::PathBuf::from);
        let key = match (&key_file, keyed) {
            (Some(_), false) if algorithm.is_some() => {
                self.report(
                    format!("{path}.key_file"),
                    "the plaintext algorithm uses no key (remove key_file, or choose single-pass or four-pass)",
                );
                None
            }
            (None, true) => {
                self.report(
                    &path,
                    format!(
                        "{} needs key_file: the absolute path of a file holding the 16-byte AES-128 key as 32 hex digits",
                        q.algorithm
                    ),
                );
                None
            }
            (Some(f), true) => match read_quic_key(f) {
                Ok(k) => Some(k),
                Err(why) => {
                    self.report(format!("{path}.key_file"), why);
                    None
                }
            },
            _ => None,
        };
        let server_ids = if sid_ok {
            self.server_ids(sp, sid_len, backends, server_ids)
        } else {
            Vec::new()
        };
        Some(QuicLb {
            codepoint,
            server_id_len: sid_len.min(max_sid) as u8,
            nonce_len: nonce_len.min(quic_lb::MAX_NONCE_LEN) as u8,
            algorithm: algorithm.unwrap_or(Algorithm::Plaintext),
            self_encode_length: q.self_encode_length.unwrap_or(false),
            key_file,
            key,
            server_ids,
        })
    }

    /// Each backend's server ID: its `server_id` (hex digits of exactly
    /// `len` bytes, or an integer that fits in them), else assigned from its
    /// address; unique in the service.
    fn server_ids(
        &mut self,
        sp: &str,
        len: usize,
        backends: &[Backend],
        raw: Vec<Option<RawServerId>>,
    ) -> Vec<QuicServerId> {
        let mut out = Vec::new();
        let mut seen: HashMap<ServerId, usize> = HashMap::new();
        let mut dips = HashSet::new();
        for (bi, (b, r)) in backends.iter().zip(raw).enumerate() {
            let field = format!("{sp}.backends[{bi}].server_id");
            let (server_id, assigned) = match r {
                None => (assigned_server_id(b.dip, len), true),
                Some(RawServerId::Text(t)) => match t.parse::<ServerId>() {
                    Ok(s) if s.len() == len => (s, false),
                    Ok(s) => {
                        self.report(
                            &field,
                            format!(
                                "server ID `{t}` is {} byte(s); quic_lb.server_id_len is {len}",
                                s.len()
                            ),
                        );
                        continue;
                    }
                    Err(_) => {
                        self.report(
                            &field,
                            format!("`{t}` is not a server ID: hex digits (`0a01`, `0a:01`) of {len} byte(s), or an integer"),
                        );
                        continue;
                    }
                },
                Some(RawServerId::Number(v)) => {
                    let bytes = v.to_be_bytes();
                    let fits = len >= 8 || v >> (8 * len) == 0;
                    if !fits {
                        self.report(
                            &field,
                            format!("server ID {v} does not fit in {len} byte(s) (quic_lb.server_id_len)"),
                        );
                        continue;
                    }
                    let mut b = [0u8; quic_lb::MAX_SERVER_ID_LEN];
                    let n = len.min(8);
                    b[len - n..len].copy_from_slice(&bytes[8 - n..]);
                    (ServerId::new(&b[..len]).expect("1..=15 bytes"), false)
                }
            };
            // Unusable and repeated addresses were reported already.
            if b.dip.is_unspecified() || !dips.insert(b.dip) {
                continue;
            }
            if let Some(&prev) = seen.get(&server_id) {
                let other = &out
                    .iter()
                    .find(|s: &&QuicServerId| s.server_id == server_id)
                    .expect("seen")
                    .dip;
                let prev_assigned = out
                    .iter()
                    .any(|s: &QuicServerId| s.server_id == server_id && s.assigned);
                self.report(
                    if assigned { format!("{sp}.backends[{bi}].dip") } else { field },
                    format!(
                        "server ID {server_id}{} is also {sp}.backends[{prev}]'s ({other}{}): server IDs are unique in a service; set server_id explicitly",
                        if assigned { ", assigned from the address," } else { "" },
                        if prev_assigned { ", assigned from its address" } else { "" },
                    ),
                );
                continue;
            }
            seen.insert(server_id, bi);
            out.push(QuicServerId {
                dip: b.dip,
                server_id,
                assigned,
            });
        }
        out
    }

    /// Limits over all services: the data plane's capacities ([`limits`]),
    /// the total bucket budget, and no backend at another service's VIP.
    fn data_plane_limits(&mut self, cfg: &Config) {
        let vips = cfg.vips();
        let v6 = vips.iter().filter(|v| v.is_ipv6()).count();
        for (n, family) in [(vips.len() - v6, "IPv4"), (v6, "IPv6")] {
            if n > limits::MAX_VIPS as usize {
                self.report(
                    "services",
                    format!(
                        "{n} distinct {family} VIPs exceed the data plane's limit of {}",
                        limits::MAX_VIPS
                    ),
                );
            }
        }
        // A node's own address may be a service address only in NAT mode
        // (a DSR VIP is held on every backend's lo).
        let dsr_vips: HashMap<IpAddr, usize> = cfg
            .services
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, s)| s.mode == ServiceMode::Dsr)
            .map(|(i, s)| (s.vip, i))
            .collect();
        // A NAT service on a node's own address is reached at that node:
        // only a balancer balances (and so translates) what arrives there.
        let mut node_dips: HashMap<IpAddr, (usize, usize)> = HashMap::new();
        for (si, s) in cfg.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                node_dips.entry(b.dip).or_insert((si, bi));
            }
        }
        for (si, s) in cfg.services.iter().enumerate() {
            if s.mode != ServiceMode::Nat || cfg.cluster.balancers.contains(&s.vip) {
                continue;
            }
            if let Some((sj, bj)) = node_dips.get(&s.vip) {
                self.report(
                    format!("services[{si}].vip"),
                    format!(
                        "{} is the own address of services[{sj}].backends[{bj}], which is not a balancer: its clients' packets reach no XDP balancer there (add it to cluster.balancers, or use a balancer's address or a VIP)",
                        s.vip
                    ),
                );
            }
        }
        for (si, s) in cfg.services.iter().enumerate() {
            for (bi, b) in s.backends.iter().enumerate() {
                let Some(sj) = dsr_vips.get(&b.dip) else {
                    continue;
                };
                if b.dip != s.vip {
                    self.report(
                        format!("services[{si}].backends[{bi}].dip"),
                        format!("{} is the VIP of services[{sj}], a DSR service (a service on a node's own address needs `mode: nat`)", b.dip),
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
    }
}

/// An etcd endpoint as nilb uses it: `http://ADDRESS:PORT` with an IPv4
/// literal or a bracketed IPv6 one (`http://[2001:db8::5]:2379`; nilb resolves no host names; TLS to etcd is not supported), no
/// path. Returns the URL without a trailing slash.
pub(crate) fn etcd_endpoint(e: &str) -> Result<String, String> {
    let rest = e
        .strip_prefix("http://")
        .ok_or("not an http:// URL (nilb talks to etcd's client port over plain HTTP)")?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or("no port (http://ADDRESS:PORT, e.g. http://10.0.0.5:2379)")?;
    match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(h6) => {
            h6.parse::<Ipv6Addr>().map_err(|_| {
                format!("`{host}` is not an IPv6 address in brackets (nilb resolves no host names)")
            })?;
        }
        None => {
            host.parse::<Ipv4Addr>().map_err(|_| {
                format!("`{host}` is not an IPv4 address or a bracketed IPv6 one (nilb resolves no host names)")
            })?;
        }
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(format!("http://{host}:{p}")),
        _ => Err(format!("`{port}` is not a port")),
    }
}
