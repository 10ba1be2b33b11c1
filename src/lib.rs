//! nilb: a layer-4 load balancer for edge clusters.
//!
//! Library half of the one crate (the `nilb` binary is `src/main.rs`):
//! - [`config`]: YAML schema and validation (pure);
//! - [`hash`]: the flow hash shared with BPF (pure);
//! - [`table`]: Beamer-style bucket tables (pure);
//! - [`control`]: running config, tables and their application;
//! - [`dataplane`]: loading, attaching and filling the BPF programs;
//! - [`packet`]: frame building and parsing for replay and tests;
//! - [`quic_lb`]: QUIC-LB connection IDs for servers and the balancer (pure);
//! - [`daemon`], [`tools`]: `nilb run` and the operator commands.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod control;
pub mod daemon;
pub mod dataplane;
pub mod hash;
pub mod health;
pub mod metrics;
pub mod packet;
pub mod quic_lb;
pub mod replay;
pub mod status;
pub mod table;
pub mod tools;
pub mod weights;
