//! The raw shape of the file: what serde accepts (unknown keys rejected,
//! optional fields as `Option`), before any semantic check. Only
//! [`super::validate`] reads these.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::model::{BackendState, LoadSource, RatePer, UnknownFlow};
use crate::types::{Protocol, ServiceMode};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub(super) version: u32,
    pub(super) cluster: RawCluster,
    #[serde(default)]
    pub(super) defaults: RawDefaults,
    #[serde(default)]
    pub(super) services: Vec<RawService>,
    pub(super) filters: Option<RawFilters>,
    pub(super) routing: Option<RawRouting>,
}

/// Top-level `routing:` (docs/config.md "Routing").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRouting {
    pub(super) bird_socket: Option<String>,
    pub(super) routes_file: Option<String>,
    pub(super) birdc: Option<String>,
    #[serde(default)]
    pub(super) drained: bool,
    pub(super) drain_file: Option<String>,
    #[serde(default)]
    pub(super) withdraw_on_fail_open: bool,
    pub(super) withdraw_grace_ms: Option<u64>,
}

/// Top-level `filters:` (docs/config.md "Filters").
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFilters {
    pub(super) rate_limit_sources: Option<u64>,
    #[serde(default)]
    pub(super) deny: Vec<RawPrefixRule>,
    #[serde(default)]
    pub(super) rate_limit: Vec<RawRateRule>,
}

/// A service's `filters:`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServiceFilters {
    pub(super) allow: Option<RawPrefixRule>,
    #[serde(default)]
    pub(super) deny: Vec<RawPrefixRule>,
    #[serde(default)]
    pub(super) rate_limit: Vec<RawRateRule>,
}

/// A deny or allow rule: prefixes inline and from list files.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrefixRule {
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) prefixes: Vec<String>,
    #[serde(default)]
    pub(super) files: Vec<String>,
    #[serde(default)]
    pub(super) dry_run: bool,
    #[serde(default)]
    pub(super) covers_cluster: bool,
}

/// A rate-limit rule.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRateRule {
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) per: RatePer,
    pub(super) packets_per_second: Option<u64>,
    pub(super) burst_packets: Option<u64>,
    pub(super) syns_per_second: Option<u64>,
    pub(super) burst_syns: Option<u64>,
    #[serde(default)]
    pub(super) dry_run: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    #[serde(default)]
    pub(super) hash_seed: u32,
    pub(super) balancers: Vec<String>,
    pub(super) gue_port: Option<u32>,
    #[serde(default)]
    pub(super) unknown_flow: UnknownFlow,
    pub(super) icmp_too_big_rate: Option<u32>,
    pub(super) nat: Option<RawNat>,
    pub(super) etcd: Option<RawEtcd>,
}

/// `cluster.etcd:` (tables shared through etcd, docs/config.md "Cluster").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEtcd {
    #[serde(default)]
    pub(super) endpoints: Vec<String>,
    pub(super) prefix: Option<String>,
    pub(super) lease_ttl_ms: Option<u64>,
}

/// `cluster.nat:` (NAT-mode flow table of every node).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNat {
    pub(super) max_flows: Option<u32>,
    pub(super) udp_timeout_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) table_size: Option<u32>,
    #[serde(default)]
    pub(super) health_check: RawTiming,
    #[serde(default)]
    pub(super) rebalance: RawRebalance,
    pub(super) panic_threshold_percent: Option<u32>,
    pub(super) encap_check: Option<bool>,
}

/// Cadence and thresholds (in `defaults.health_check`, or next to a checker).
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTiming {
    pub(super) interval_ms: Option<u64>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) rise_count: Option<u32>,
    pub(super) fall_count: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRebalance {
    pub(super) min_interval_ms: Option<u64>,
    pub(super) max_step_percent: Option<u32>,
    pub(super) min_bucket_age_ms: Option<u64>,
    pub(super) previous_owners: Option<u32>,
}

/// A service's `health_check`: one checker (directly or under kglb's
/// `checker:`) plus optional timing overrides.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHealthCheck {
    pub(super) http: Option<RawHttp>,
    pub(super) tcp: Option<RawTcp>,
    pub(super) none: Option<RawNone>,
    pub(super) checker: Option<RawCheckerKind>,
    pub(super) interval_ms: Option<u64>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) rise_count: Option<u32>,
    pub(super) fall_count: Option<u32>,
}

/// kglb's `checker:` block: exactly one kind.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheckerKind {
    pub(super) http: Option<RawHttp>,
    pub(super) tcp: Option<RawTcp>,
    pub(super) none: Option<RawNone>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) scheme: Option<String>,
    pub(super) uri: Option<String>,
    pub(super) check_port: Option<u32>,
    pub(super) codes: Option<Vec<u32>>,
    pub(super) host: Option<String>,
    pub(super) sni: Option<String>,
    pub(super) ca_file: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTcp {
    pub(super) check_port: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNone {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawService {
    pub(super) name: String,
    pub(super) vip: String,
    pub(super) port: u32,
    pub(super) protocol: Protocol,
    #[serde(default)]
    pub(super) mode: ServiceMode,
    pub(super) target_port: Option<u32>,
    pub(super) table_size: Option<u32>,
    pub(super) health_check: Option<RawHealthCheck>,
    pub(super) dynamic_weight: Option<RawDynamicWeight>,
    pub(super) panic_threshold_percent: Option<u32>,
    pub(super) encap_check: Option<bool>,
    pub(super) quic_lb: Option<RawQuicLb>,
    #[serde(default)]
    pub(super) backends: Vec<RawBackend>,
    pub(super) filters: Option<RawServiceFilters>,
}

/// A service's `quic_lb:` block.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuicLb {
    pub(super) codepoint: u32,
    pub(super) server_id_len: u32,
    pub(super) nonce_len: u32,
    pub(super) algorithm: String,
    pub(super) key_file: Option<String>,
    /// Never accepted: present only to say where a key goes instead.
    pub(super) key: Option<IgnoredAny>,
    pub(super) self_encode_length: Option<bool>,
}

/// A backend's `server_id`: hex digits (a string, exactly the configured
/// length) or an integer (its value, big-endian in the configured length).
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawServerId {
    Number(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDynamicWeight {
    pub(super) source: LoadSource,
    pub(super) metrics_port: Option<u32>,
    pub(super) metrics_path: Option<String>,
    pub(super) target_percent: Option<u32>,
    pub(super) interval_ms: Option<u64>,
    pub(super) deadband_percent: Option<u32>,
    pub(super) max_change_percent: Option<u32>,
    pub(super) min_weight_percent: Option<u32>,
    pub(super) max_weight_percent: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBackend {
    pub(super) dip: String,
    pub(super) hostname: Option<String>,
    pub(super) weight: Option<u32>,
    #[serde(default)]
    pub(super) state: BackendState,
    pub(super) server_id: Option<RawServerId>,
}
