//! Identical tables on every balancer of a cluster through etcd
//! (docs/design.md "Several balancers", docs/config.md "Cluster").
//!
//! With `cluster.etcd` one balancer is elected leader (a key under the
//! cluster's prefix, held by a lease). The leader runs the table logic as a
//! single balancer does (health verdicts, weights, pacing) and publishes
//! each service's table after every change; the other balancers (followers)
//! install exactly the published tables, bucket for bucket, first hop and
//! previous owners. A new leader starts from the last published tables, so
//! a leader change moves no bucket. If etcd is unreachable every balancer
//! keeps forwarding with the tables it has; a leader whose lease may have
//! run out stops changing tables until it knows again.
//!
//! This module holds the pure parts: the encoding of a published table
//! ([`PublishedTable`]), the keys, the election's rules ([`Election`]) and
//! the status. [`etcd`] talks to etcd (its v3 JSON gateway) from a task of
//! its own.

pub mod etcd;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::table::{Bucket, Table, MAX_OWNERS};
use crate::types::ServiceKey;

/// Version of the published encoding (a follower ignores other versions).
pub const FORMAT: u32 = 1;

/// The key of the leader under `prefix`.
pub fn leader_key(prefix: &str) -> String {
    format!("{prefix}/leader")
}

/// The prefix of every published table.
pub fn tables_prefix(prefix: &str) -> String {
    format!("{prefix}/tables/")
}

/// The key of `service`'s published table.
pub fn table_key(prefix: &str, service: &ServiceKey) -> String {
    format!("{}{service}", tables_prefix(prefix))
}

/// The value of the leader key: the node and its lease, so that a
/// publication can be fenced on exactly this holder (a balancer that lost
/// its lease and got a new one is not the same holder).
pub fn leader_value(node: IpAddr, lease: i64) -> String {
    format!("{node} {lease}")
}

/// The node named by a leader key's value.
pub fn leader_node(value: &str) -> Option<IpAddr> {
    value.split_whitespace().next()?.parse().ok()
}

/// One service's table as the leader publishes it: every bucket's hops in
/// the table's own encoding (entry 0: no hop, entry `i`: `hops[i-1]`),
/// `MAX_OWNERS` entries per bucket (first hop, then previous owners newest
/// first), and each bucket's last move on the wall clock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedTable {
    /// [`FORMAT`].
    pub format: u32,
    /// The service (`VIP:PORT/PROTO`).
    pub service: String,
    /// Buckets.
    pub size: u32,
    /// Previous owners a bucket remembers.
    pub previous: u32,
    /// The backends the buckets name.
    pub hops: Vec<IpAddr>,
    /// Base64 of the entries, u16 little-endian, `MAX_OWNERS` per bucket.
    pub buckets: String,
    /// Base64 of each bucket's last first-hop change, Unix seconds, u32
    /// little-endian (0: never).
    pub moved: String,
    /// The leader that published it.
    pub leader: IpAddr,
    /// When it was published, Unix ms (the leader's clock).
    pub at_ms: u64,
}

/// A published table turned back into buckets and move times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowedTable {
    /// Every bucket's hops.
    pub buckets: Vec<Bucket>,
    /// Each bucket's last move, Unix ms (None: never).
    pub moved_unix_ms: Vec<Option<u64>>,
    /// Previous owners a bucket remembers.
    pub previous: usize,
}

impl PublishedTable {
    /// Encode `table` of `service`; `to_unix_ms` turns the table's move
    /// times (the control plane's clock) into Unix ms.
    pub fn encode(
        service: &ServiceKey,
        table: &Table,
        leader: IpAddr,
        at_ms: u64,
        to_unix_ms: &dyn Fn(u64) -> u64,
    ) -> PublishedTable {
        let size = table.size() as usize;
        let hops: Vec<IpAddr> = (1..=table.entry_count())
            .filter_map(|e| table.entry_addr(e as u16))
            .collect();
        let mut entries = Vec::with_capacity(size * MAX_OWNERS * 2);
        let mut moved = Vec::with_capacity(size * 4);
        for i in 0..size {
            for e in table.entries(i) {
                entries.extend_from_slice(&e.to_le_bytes());
            }
            let m = table.moved_at(i).map_or(0, |m| {
                (to_unix_ms(m).saturating_add(500) / 1000).max(1) as u32
            });
            moved.extend_from_slice(&m.to_le_bytes());
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        PublishedTable {
            format: FORMAT,
            service: service.to_string(),
            size: size as u32,
            previous: table.previous_owners() as u32,
            hops,
            buckets: b64.encode(entries),
            moved: b64.encode(moved),
            leader,
            at_ms,
        }
    }

    /// Why this table cannot be installed on a node of the cluster family
    /// `ipv6` (None: it can): its leader or a hop of the other family, as
    /// when IPv4 and IPv6 cluster networks share one etcd prefix during a
    /// migration. An IPv4 node would send GUE to the first 4 bytes of an
    /// IPv6 DIP; nodes never follow another family's tables (as they never
    /// adopt its pins).
    pub fn family_problem(&self, ipv6: bool) -> Option<String> {
        let family = |v6: bool| if v6 { "IPv6" } else { "IPv4" };
        if let Some(a) = std::iter::once(&self.leader)
            .chain(&self.hops)
            .find(|a| a.is_ipv6() != ipv6)
        {
            return Some(format!(
                "it names {a}, an {} address, and this node's cluster network is {}: another family's cluster publishes under this prefix (give each its own cluster.etcd.prefix)",
                family(a.is_ipv6()),
                family(ipv6)
            ));
        }
        None
    }

    /// The buckets and move times, checked: the right format and lengths,
    /// a power-of-two size, every entry naming a listed hop.
    pub fn decode(&self) -> Result<FollowedTable, String> {
        if self.format != FORMAT {
            return Err(format!("format {} (this nilb reads {FORMAT})", self.format));
        }
        let size = self.size as usize;
        if size == 0 || !size.is_power_of_two() {
            return Err(format!("size {size} is not a power of two"));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let entries = b64
            .decode(&self.buckets)
            .map_err(|e| format!("buckets: {e}"))?;
        let moved = b64.decode(&self.moved).map_err(|e| format!("moved: {e}"))?;
        if entries.len() != size * MAX_OWNERS * 2 || moved.len() != size * 4 {
            return Err(format!(
                "{} bytes of buckets and {} of move times for {size} buckets",
                entries.len(),
                moved.len()
            ));
        }
        let hop = |e: u16| -> Result<Option<IpAddr>, String> {
            match e {
                0 => Ok(None),
                e => self
                    .hops
                    .get(e as usize - 1)
                    .copied()
                    .map(Some)
                    .ok_or_else(|| format!("entry {e} names no hop ({} listed)", self.hops.len())),
            }
        };
        let mut buckets = Vec::with_capacity(size);
        for chunk in entries.chunks_exact(MAX_OWNERS * 2) {
            let e: Vec<u16> = chunk
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            let first = hop(e[0])?;
            let mut previous = Vec::new();
            for &x in &e[1..] {
                match hop(x)? {
                    Some(a) => previous.push(a),
                    None => break,
                }
            }
            buckets.push(Bucket::new(first, previous));
        }
        let moved_unix_ms = moved
            .chunks_exact(4)
            .map(|b| {
                let s = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                (s != 0).then_some(s as u64 * 1000)
            })
            .collect();
        Ok(FollowedTable {
            buckets,
            moved_unix_ms,
            previous: (self.previous as usize).min(MAX_OWNERS - 1),
        })
    }

    /// Whether `other` holds the same table (buckets, previous owners and
    /// move times; who published it and when aside).
    pub fn same_table(&self, other: &PublishedTable) -> bool {
        self.service == other.service
            && self.size == other.size
            && self.previous == other.previous
            && self.moved == other.moved
            && match (self.decode(), other.decode()) {
                (Ok(a), Ok(b)) => a.buckets == b.buckets,
                _ => false,
            }
    }

    /// The service this table is for.
    pub fn service_key(&self) -> Option<ServiceKey> {
        parse_service_key(&self.service)
    }
}

/// `VIP:PORT/PROTO` (`[VIP]:PORT/PROTO` for IPv6, as `ServiceKey`
/// displays it) back into a key.
pub fn parse_service_key(s: &str) -> Option<ServiceKey> {
    let (addr, proto) = s.rsplit_once('/')?;
    let (vip, port) = addr.rsplit_once(':')?;
    let vip = match vip.strip_prefix('[') {
        Some(v6) => v6
            .strip_suffix(']')?
            .parse::<std::net::Ipv6Addr>()
            .ok()?
            .into(),
        None => vip.parse::<Ipv4Addr>().ok()?.into(),
    };
    Some(ServiceKey {
        vip,
        port: port.parse().ok()?,
        protocol: match proto {
            "tcp" => crate::types::Protocol::Tcp,
            "udp" => crate::types::Protocol::Udp,
            _ => return None,
        },
    })
}

impl FollowedTable {
    /// The table, its move times on the control plane's clock
    /// (`from_unix_ms`), remembering at least `previous` previous owners.
    pub fn to_table(&self, previous: usize, from_unix_ms: &dyn Fn(u64) -> u64) -> Table {
        Table::adopt(
            self.buckets.clone(),
            self.moved_unix_ms
                .iter()
                .map(|m| m.map(from_unix_ms))
                .collect(),
            previous.max(self.previous),
        )
    }
}

/// This balancer's part in the cluster.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Not known yet (etcd not reached since start).
    #[default]
    Unknown,
    /// Holds the leader key: computes and publishes the tables.
    Leader,
    /// Installs what the leader publishes.
    Follower,
}

impl Role {
    /// Name in status and logs.
    pub fn name(self) -> &'static str {
        match self {
            Role::Unknown => "unknown",
            Role::Leader => "leader",
            Role::Follower => "follower",
        }
    }
}

/// The election's rules, apart from etcd: whether this balancer may act as
/// leader now, given what it last heard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Election {
    /// The lease held (None: none granted, or it ran out).
    pub lease: Option<i64>,
    /// When the lease was last confirmed alive (grant or keepalive),
    /// caller's ms.
    pub confirmed_ms: Option<u64>,
    /// The lease's TTL, ms.
    pub ttl_ms: u64,
    /// The leader key names us with this lease.
    pub holds_key: bool,
}

impl Election {
    /// An election with leases of `ttl_ms`.
    pub fn new(ttl_ms: u64) -> Election {
        Election {
            ttl_ms,
            ..Election::default()
        }
    }

    /// A lease was granted at `now_ms`.
    pub fn granted(&mut self, lease: i64, now_ms: u64) {
        self.lease = Some(lease);
        self.confirmed_ms = Some(now_ms);
        self.holds_key = false;
    }

    /// A keepalive answered at `now_ms` with the lease's remaining TTL
    /// (0: etcd no longer knows it: expired or revoked).
    pub fn kept_alive(&mut self, ttl_left_ms: u64, now_ms: u64) {
        if ttl_left_ms == 0 {
            self.lost();
        } else {
            self.confirmed_ms = Some(now_ms);
        }
    }

    /// The lease is gone: no key held.
    pub fn lost(&mut self) {
        self.lease = None;
        self.confirmed_ms = None;
        self.holds_key = false;
    }

    /// Whether we may act as leader at `now_ms`: we hold the key and the
    /// lease was confirmed less than a TTL ago minus a safety margin (a
    /// third of the TTL), so that by the time another balancer can win
    /// the key this one has stopped changing tables.
    pub fn is_leader(&self, now_ms: u64) -> bool {
        self.holds_key
            && self
                .confirmed_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < self.ttl_ms * 2 / 3)
    }

    /// Whether the lease must be renewed now (a third of the TTL passed).
    pub fn keepalive_due(&self, now_ms: u64) -> bool {
        self.confirmed_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= self.ttl_ms / 3)
    }
}

/// `cluster` in the state file and `nilb status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The etcd endpoints.
    pub endpoints: Vec<String>,
    /// The key prefix.
    pub prefix: String,
    /// The last request to etcd succeeded.
    pub connected: bool,
    /// This balancer's role.
    pub role: Role,
    /// The leader as the leader key names it (None: none, or unknown).
    #[serde(default)]
    pub leader: Option<IpAddr>,
    /// etcd's revision of the tables in force here: the newest mod
    /// revision of a published table this balancer installed (follower)
    /// or published (leader); 0: none.
    pub revision: i64,
    /// Tables in force here that differ from the published ones (a leader
    /// waiting to publish, a follower waiting for a service it does not
    /// know yet); 0 when in step.
    pub pending: usize,
    /// Follower: ms from the last publication etcd saw to its install
    /// here (the last one); leader: ms from a table change to its
    /// publication acknowledged by etcd.
    #[serde(default)]
    pub lag_ms: Option<u64>,
    /// When etcd last answered (RFC 3339).
    #[serde(default)]
    pub last_contact: Option<String>,
    /// The last error talking to etcd.
    #[serde(default)]
    pub error: Option<String>,
    /// Publications (leader) or installs (follower) since start.
    pub updates: u64,
}

impl ClusterStatus {
    /// Human-readable lines for `nilb status`.
    pub fn print(&self, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
        writeln!(
            out,
            "cluster: etcd {} (prefix {}): {}, role {}{}",
            self.endpoints.join(","),
            self.prefix,
            if self.connected {
                "connected"
            } else {
                "NOT CONNECTED"
            },
            self.role.name(),
            self.leader
                .map(|l| format!(", leader {l}"))
                .unwrap_or_default()
        )?;
        writeln!(
            out,
            "  tables at etcd revision {}, {} pending, lag {}, {} {} so far",
            self.revision,
            self.pending,
            self.lag_ms.map_or("-".to_string(), |l| format!("{l} ms")),
            self.updates,
            if self.role == Role::Leader {
                "publications"
            } else {
                "installs"
            }
        )?;
        if let Some(e) = &self.error {
            writeln!(
                out,
                "  etcd: {e} (forwarding goes on with the tables in force)"
            )?;
        }
        Ok(())
    }
}

/// The published tables a follower has seen, by service, with the mod
/// revision of each.
pub type Published = BTreeMap<ServiceKey, (i64, PublishedTable)>;

#[cfg(test)]
mod tests;
