//! The Rust side of `bpf/nilb.h` and every `unsafe` in nilb: the generated
//! skeletons and header mirror, map key and value layouts ([`layout`]),
//! kernel calls libbpf-rs does not wrap ([`ffi`]) and program test runs
//! ([`test_run`]). Everything is re-exported here, so callers write
//! `abi::service_key`, `abi::test_run_xdp`, `abi::sys::...`.
//!
//! Byte order (as in the header): IPv4 addresses and ports inside map keys
//! and values are network order; counters, indexes, the hash seed and the
//! flags are host order.

#![allow(unsafe_code)]

pub mod ffi;
pub mod layout;
pub mod quic;
pub mod test_run;

pub use ffi::*;
pub use layout::*;
pub use quic::*;
pub use test_run::*;

/// bindgen's mirror of `bpf/nilb.h` (structs, limits, counters); the leaf
/// module [`crate::abi_sys`].
pub use crate::abi_sys as sys;

/// libbpf-rs skeleton of `bpf/nilb.bpf.c`.
#[allow(clippy::all, missing_docs, non_camel_case_types, dead_code)]
pub mod skel {
    include!(concat!(env!("OUT_DIR"), "/nilb.skel.rs"));
}

/// libbpf-rs skeleton of `bpf/hash_probe.bpf.c` (tests only).
#[allow(clippy::all, missing_docs, non_camel_case_types, dead_code)]
pub mod probe_skel {
    include!(concat!(env!("OUT_DIR"), "/hash_probe.skel.rs"));
}

include!(concat!(env!("OUT_DIR"), "/counter_names.rs"));
