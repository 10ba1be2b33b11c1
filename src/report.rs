//! What every operator report shares (`nilb status`, `stats`, `tables`,
//! `lookup`, `filters`, the state file and the routing status): the JSON
//! documents' schema version, times as RFC 3339, the width of address
//! columns. A leaf: the report modules use it, it uses none of them (so
//! they need not use each other for it).

use std::net::IpAddr;
use std::time::SystemTime;

/// Version of the JSON documents that `nilb status|stats|tables|lookup
/// --json` print (their top-level `schema` field). It is raised when a field
/// changes meaning, type or goes away; new fields may appear without a raise.
/// docs/operations.md ("Machine-readable output") describes every field.
pub const JSON_SCHEMA: u32 = 1;

/// RFC 3339 time of `t` (seconds precision, UTC).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// Width of a column of addresses in the text reports: 15 (a dotted quad
/// at its longest), or the longest address listed when one is longer (IPv6
/// DIPs of an IPv6 cluster network).
pub fn address_width<'a>(addrs: impl IntoIterator<Item = &'a IpAddr>) -> usize {
    addrs
        .into_iter()
        .map(|a| a.to_string().len())
        .max()
        .unwrap_or(0)
        .max(15)
}
