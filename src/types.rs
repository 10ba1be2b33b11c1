//! Vocabulary shared across layers, with no dependencies inside nilb except
//! the protocol numbers of [`crate::hash`]: the key of a service in the data
//! plane and its protocol (configuration, control plane, data plane and the
//! tools all name services by it), what the last hop does with an unknown
//! flow (configured, written into the data plane, shown by the tools), and a
//! backend's load sample (produced by the load scrapes and the balancer's
//! counters, consumed by the control plane's dynamic weights).

use std::fmt;
use std::net::IpAddr;

use serde::Deserialize;

/// L4 protocol of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// TCP (IANA 6).
    Tcp,
    /// UDP (IANA 17).
    Udp,
}

/// How a service's backends receive its packets (`services[].mode`;
/// docs/config.md "NAT mode", docs/design.md "NAT mode").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceMode {
    /// Direct server return (default): every backend holds the VIP on
    /// `lo` and its service listens on it.
    #[default]
    Dsr,
    /// The backends hold nothing: nilb's programs on each backend rewrite
    /// the destination to the backend's own address and `target_port` on
    /// the way in, and the replies' source back on the way out. The
    /// service address may be a node's own address.
    Nat,
}

impl std::fmt::Display for ServiceMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ServiceMode::Dsr => "dsr",
            ServiceMode::Nat => "nat",
        })
    }
}

/// What the last hop does with a packet of a flow it does not know
/// (`cluster.unknown_flow`; docs/config.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownFlow {
    /// Drop and count it (default).
    #[default]
    Drop,
    /// Accept it locally; the stack answers a stray TCP segment with RST.
    Local,
    /// Answer a TCP segment (not a RST) with a RST from the VIP, built by
    /// the TC program and rate-limited; drop anything else.
    Rst,
}

impl UnknownFlow {
    /// The name in the configuration: `drop`, `local` or `rst`.
    pub fn name(self) -> &'static str {
        match self {
            UnknownFlow::Drop => "drop",
            UnknownFlow::Local => "local",
            UnknownFlow::Rst => "rst",
        }
    }
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

/// Key of a service in the data plane: (VIP, port, protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// VIP: IPv4, or IPv6 (docs/design.md "IPv6").
    pub vip: IpAddr,
    /// Port, host order.
    pub port: u16,
    /// Protocol.
    pub protocol: Protocol,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.vip {
            IpAddr::V4(v) => write!(f, "{v}:{}/{}", self.port, self.protocol),
            IpAddr::V6(v) => write!(f, "[{v}]:{}/{}", self.port, self.protocol),
        }
    }
}

/// One load sample of a backend, as scraped or counted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LoadSample {
    /// CPU utilisation 0..1, read directly (nilb's own gauge).
    Utilisation(f64),
    /// Cumulative CPU seconds (busy, total), e.g. from node_exporter.
    CpuSeconds {
        /// Non-idle seconds over all CPUs.
        busy: f64,
        /// All seconds over all CPUs.
        total: f64,
    },
    /// Cumulative new connections sent to the backend by this balancer.
    Connections(u64),
}
