//! nilb: a layer-4 load balancer for edge clusters.
//!
//! Library half of the one crate (the `nilb` binary is `src/main.rs`), its
//! modules in layers from the top of the dependency graph down: a module
//! uses only modules of its own layer or further down, and there are no
//! cycles (tests/layers.rs checks both against this list):
//! - [`daemon`]: `nilb run`;
//! - [`tools`], [`filter_report`], [`replay`], [`metrics`], [`status`]: the
//!   operator commands (filters: `nilb filters` and their part of the
//!   others), the replay tool, Prometheus metrics and the state file;
//! - [`control`]: running config, tables and their application through
//!   [`dataplane::DataplaneOps`];
//! - [`dataplane`]: loading, attaching and filling the BPF programs;
//!   [`neighbours`]: fresh neighbour entries for the hops; [`health`]:
//!   backend health checks and load scrapes; [`weights`]: the
//!   dynamic-weights controller; [`cluster`]: tables shared through etcd;
//!   [`routing`]: VIP announcements through BIRD;
//! - [`netlink`]: rtnetlink requests; [`filters`]: the edge filters compiled
//!   from the config and its list files (pure, but for reading the list
//!   files);
//! - [`config`]: YAML schema and validation (pure); [`features`]: the
//!   kernel features nilb uses and what each missing one turns off (pure);
//! - [`table`]: Beamer-style bucket tables (pure); [`packet`]: one-line
//!   frame descriptions for replay; [`quic_lb`]: QUIC-LB connection IDs for
//!   servers and the balancer (pure); [`report`]: what the reports share
//!   (JSON schema version, RFC 3339 times, address column widths);
//! - leaves: [`hash`] (the flow hash shared with BPF), [`prefix`] (source
//!   prefixes and list files of the edge filters), [`types`] (service keys,
//!   load samples), [`limits`] (the data plane's compiled-in capacities),
//!   [`abi_sys`] (the generated mirror of `bpf/nilb.h`), [`clock`] (the
//!   boot-time clock the control plane runs on), [`split`] (large work split
//!   over the CPUs).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod abi_sys;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod control;
pub mod daemon;
pub mod dataplane;
pub mod features;
pub mod filter_report;
pub mod filters;
pub mod hash;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod neighbours;
pub mod netlink;
pub mod packet;
pub mod prefix;
pub mod quic_lb;
pub mod replay;
pub mod report;
pub mod routing;
pub mod split;
pub mod status;
pub mod table;
pub mod tools;
pub mod types;
pub mod weights;
