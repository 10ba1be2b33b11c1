//! The Rust side of `bpf/nilb.h`: map key/value layouts, counter names, the
//! generated skeletons, and every `unsafe` and raw byte layout in nilb.
//!
//! Byte order (as in the header): IPv4 addresses and ports inside map keys
//! and values are network order; counters, indexes, the hash seed and the
//! flags are host order.

#![allow(unsafe_code)]

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, ProgramInput};

use crate::config::{Protocol, ServiceKey};
use crate::table::Table;

/// bindgen's mirror of `bpf/nilb.h` (structs, limits, counters).
#[allow(non_camel_case_types, non_upper_case_globals, dead_code, missing_docs)]
pub mod sys {
    include!(concat!(env!("OUT_DIR"), "/nilb_abi.rs"));
}

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

// SAFETY: plain C structs of integers (and integer arrays) without padding
// holes that matter for reading; any bit pattern is a valid value.
unsafe impl plain::Plain for sys::nilb_service_key {}
unsafe impl plain::Plain for sys::nilb_bucket {}
unsafe impl plain::Plain for sys::nilb_table_header {}
unsafe impl plain::Plain for sys::nilb_config {}
unsafe impl plain::Plain for sys::nilb_service_stats {}
unsafe impl plain::Plain for sys::nilb_backend_stats {}
unsafe impl plain::Plain for sys::nilb_hash_probe {}
unsafe impl plain::Plain for sys::nilb_addr_info {}

/// View a plain struct as its bytes.
pub fn bytes_of<T: plain::Plain>(v: &T) -> &[u8] {
    // SAFETY: T is Plain (no invalid bit patterns, no references); the slice
    // covers exactly the value and lives as long as the borrow.
    unsafe { plain::as_bytes(v) }
}

/// Copy a plain struct out of bytes (shorter input is an error).
pub fn read_struct<T: plain::Plain + Default>(bytes: &[u8]) -> Result<T> {
    let mut v = T::default();
    plain::copy_from_bytes(&mut v, bytes).map_err(|e| {
        anyhow::anyhow!("short map value for {}: {e:?}", std::any::type_name::<T>())
    })?;
    Ok(v)
}

/// Network-order u32 of an address as stored in maps (the wire bytes).
pub fn addr_be(a: Ipv4Addr) -> u32 {
    u32::from_ne_bytes(a.octets())
}

/// Inverse of [`addr_be`].
pub fn addr_from_be(v: u32) -> Ipv4Addr {
    Ipv4Addr::from(v.to_ne_bytes())
}

/// Key of the `services` map for a service.
pub fn service_key(k: &ServiceKey) -> sys::nilb_service_key {
    sys::nilb_service_key {
        vip: addr_be(k.vip),
        port: k.port.to_be(),
        proto: k.protocol.number(),
        pad: 0,
    }
}

/// Decode a `services` map key; None for a protocol nilb does not use.
pub fn parse_service_key(bytes: &[u8]) -> Result<Option<ServiceKey>> {
    let k: sys::nilb_service_key = read_struct(bytes)?;
    let protocol = match k.proto {
        crate::hash::IPPROTO_TCP => Protocol::Tcp,
        crate::hash::IPPROTO_UDP => Protocol::Udp,
        _ => return Ok(None),
    };
    Ok(Some(ServiceKey {
        vip: addr_from_be(k.vip),
        port: u16::from_be(k.port),
        protocol,
    }))
}

/// Size of one inner-array element (bucket or header), bytes.
pub const BUCKET_SIZE: u32 = std::mem::size_of::<sys::nilb_bucket>() as u32;

/// The contents of an inner bucket array, element by element: element 0 is
/// the header (table mask, service index), element 1 + i is bucket i;
/// `slot_of(dip)` gives the `backend_stats` slot of a first hop. Move times
/// are the table's clock, which the daemon runs on Unix milliseconds.
pub fn inner_table_values(
    table: &Table,
    service_index: u32,
    slot_of: &dyn Fn(Ipv4Addr) -> u32,
) -> Vec<u8> {
    let n = table.size() as usize + 1;
    let mut values = Vec::with_capacity(n * BUCKET_SIZE as usize);
    let hdr = sys::nilb_table_header {
        table_mask: table.size() - 1,
        service_index,
        pad: [0; 2],
    };
    values.extend_from_slice(bytes_of(&hdr));
    for (i, b) in table.buckets().iter().enumerate() {
        let v = sys::nilb_bucket {
            first_hop: b.first.map_or(0, addr_be),
            second_hop: b.second.map_or(0, addr_be),
            first_slot: b.first.map_or(0, slot_of),
            moved_at_s: table
                .moved_at(i)
                .map_or(0, |ms| (ms / 1000).clamp(1, u32::MAX as u64) as u32),
        };
        values.extend_from_slice(bytes_of(&v));
    }
    values
}

/// Header and buckets read back from an inner map (for stats and lookups).
pub fn read_inner_table(
    map: &dyn MapCore,
) -> Result<(sys::nilb_table_header, Vec<sys::nilb_bucket>)> {
    let n = map.max_entries() as usize;
    let mut bytes = vec![0u8; n * BUCKET_SIZE as usize];
    with_mmap(map.as_fd(), n * BUCKET_SIZE as usize, false, |m| {
        bytes.copy_from_slice(m)
    })
    .context("reading a bucket array")?;
    let hdr: sys::nilb_table_header = read_struct(&bytes)?;
    let size = hdr.table_mask as usize + 1;
    if size + 1 > n {
        bail!(
            "bucket array header says {size} buckets, the array holds {}",
            n - 1
        );
    }
    let buckets = bytes[BUCKET_SIZE as usize..]
        .chunks_exact(BUCKET_SIZE as usize)
        .take(size)
        .map(read_struct)
        .collect::<Result<_>>()?;
    Ok((hdr, buckets))
}

/// Write `values` (whole elements) into a `BPF_F_MMAPABLE` array from
/// element 0, with one memory copy.
pub fn fill_array(map: &libbpf_rs::MapHandle, values: &[u8]) -> Result<()> {
    with_mmap(map.as_fd(), values.len(), true, |m| {
        m.copy_from_slice(values)
    })
    .context("filling a bucket array")
}

/// Map the first `len` bytes of a `BPF_F_MMAPABLE` array and run `f` on
/// them (read-only unless `write`).
fn with_mmap(fd: BorrowedFd<'_>, len: usize, write: bool, f: impl FnOnce(&mut [u8])) -> Result<()> {
    use nix::sys::mman::{mmap, munmap, MapFlags as MmapFlags, ProtFlags};
    let Some(nz) = std::num::NonZeroUsize::new(len) else {
        return Ok(());
    };
    let prot = if write {
        ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
    } else {
        ProtFlags::PROT_READ
    };
    // SAFETY: a shared mapping of a BPF array's value area, which is at
    // least `len` bytes (callers pass at most elements * value size); it
    // is unmapped before returning and only accessed through the slice.
    unsafe {
        let ptr =
            mmap(None, nz, prot, MmapFlags::MAP_SHARED, fd, 0).context("mmap of a BPF array")?;
        let slice = std::slice::from_raw_parts_mut(ptr.as_ptr().cast::<u8>(), len);
        f(slice);
        munmap(ptr, len).context("munmap of a BPF array")?;
    }
    Ok(())
}

/// Value of the `nilb_config` map.
pub fn config_value(node: Ipv4Addr, hash_seed: u32, gue_port: u16, flags: u32) -> sys::nilb_config {
    sys::nilb_config {
        node_addr: addr_be(node),
        hash_seed,
        gue_port: gue_port.to_be(),
        pad: 0,
        flags,
        outer_csum_base: outer_csum_base(node),
    }
}

/// Sum of the constant 16-bit words of nilb's outer IPv4 header (version 4,
/// IHL 5, TOS 0; ID 0; DF; TTL 64, UDP; source `node`) as native-order loads
/// of the wire bytes, the way the XDP program sums the per-packet words.
pub fn outer_csum_base(node: Ipv4Addr) -> u32 {
    let ttl = sys::nilb_wire::NILB_OUTER_TTL as u8;
    let o = node.octets();
    [
        [0x45, 0x00],
        [0x00, 0x00],
        [0x40, 0x00],
        [ttl, 17],
        [o[0], o[1]],
        [o[2], o[3]],
    ]
    .iter()
    .map(|w| u16::from_ne_bytes(*w) as u32)
    .sum()
}

/// Sum of a per-CPU u64 counter.
pub fn sum_percpu_u64(values: &[Vec<u8>]) -> u64 {
    values
        .iter()
        .filter_map(|v| v.get(..8))
        .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        .sum()
}

/// Per-CPU service stats summed over CPUs.
pub fn sum_service_stats(values: &[Vec<u8>]) -> Result<sys::nilb_service_stats> {
    let mut total = sys::nilb_service_stats::default();
    for v in values {
        let s: sys::nilb_service_stats = read_struct(v)?;
        total.xdp_drops += s.xdp_drops;
        total.tc_decap += s.tc_decap;
        total.tc_forward += s.tc_forward;
        total.tc_drops += s.tc_drops;
    }
    Ok(total)
}

/// Per-CPU backend stats summed over CPUs.
pub fn sum_backend_stats(values: &[Vec<u8>]) -> Result<sys::nilb_backend_stats> {
    let mut total = sys::nilb_backend_stats::default();
    for v in values {
        let s: sys::nilb_backend_stats = read_struct(v)?;
        total.packets += s.packets;
        total.bytes += s.bytes;
        total.syns += s.syns;
    }
    Ok(total)
}

/// Read and sum one per-CPU element of a stats map.
pub fn read_percpu<T>(
    map: &dyn MapCore,
    index: u32,
    sum: fn(&[Vec<u8>]) -> Result<T>,
) -> Result<T> {
    let v = map
        .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)?
        .with_context(|| format!("{} has no element {index}", map.name().to_string_lossy()))?;
    sum(&v)
}

/// All counters of a `counters` map, in [`COUNTER_NAMES`] order.
pub fn read_counters(map: &dyn MapCore) -> Result<Vec<u64>> {
    (0..COUNTER_NAMES.len() as u32)
        .map(|i| {
            let v = map
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)?
                .with_context(|| format!("counter {i} missing"))?;
            Ok(sum_percpu_u64(&v))
        })
        .collect()
}

/// Create an ARRAY map of `entries` elements of `value_size` bytes (u32 keys),
/// usable as an inner map of `services`: its flags must equal the template's
/// (`BPF_F_INNER_MAP`, which also lets sizes differ, and `BPF_F_MMAPABLE`).
pub fn create_array(name: &str, value_size: u32, entries: u32) -> Result<libbpf_rs::MapHandle> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_INNER_MAP | libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
        ..Default::default()
    };
    libbpf_rs::MapHandle::create(
        libbpf_rs::MapType::Array,
        Some(name),
        4,
        value_size,
        entries,
        &opts,
    )
    .with_context(|| format!("creating bucket array {name} ({entries} entries)"))
}

/// Value that makes a map-in-map slot point at `inner`.
pub fn map_fd_value(inner: BorrowedFd<'_>) -> [u8; 4] {
    (inner.as_raw_fd() as u32).to_ne_bytes()
}

/// Run `prog` once on `frame` with an optional input context; returns the
/// verdict and the output frame (room for 256 bytes of growth).
fn test_run(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    context_in: Option<&mut [u8]>,
    context_out: Option<&mut [u8]>,
) -> Result<(u32, Vec<u8>)> {
    let mut out = vec![0u8; frame.len() + 256];
    let input = ProgramInput {
        data_in: Some(frame),
        data_out: Some(&mut out),
        context_in,
        context_out,
        ..Default::default()
    };
    let output = prog
        .test_run(input)
        .with_context(|| format!("BPF_PROG_TEST_RUN of {}", prog.name().to_string_lossy()))?;
    let verdict = output.return_value;
    let len = output.data.map(|d| d.len()).unwrap_or(0);
    out.truncate(len);
    Ok((verdict, out))
}

/// One XDP test run, split the way the kernel sees the buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpRun {
    /// The program's verdict (`XDP_*`).
    pub verdict: u32,
    /// XDP metadata the program left in front of the frame (`data_meta` to
    /// `data`); nilb's is [`nilb_wire::NILB_XDP_MARK`](sys::nilb_wire::NILB_XDP_MARK)
    /// in host byte order on packets it hands to TC, else empty.
    pub meta: Vec<u8>,
    /// The frame from `data` to `data_end`: what the stack or the wire gets.
    pub frame: Vec<u8>,
}

/// Run an XDP program once on `frame` as if received on `ingress_ifindex`
/// (0: the loopback device). Returns the verdict and the output buffer as
/// BPF_PROG_TEST_RUN returns it: metadata, if the program left any, then
/// the frame. [`test_run_xdp_split`] separates the two.
pub fn test_run_xdp(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    ingress_ifindex: u32,
) -> Result<(u32, Vec<u8>)> {
    let run = test_run_xdp_split(prog, frame, ingress_ifindex)?;
    let mut out = run.meta;
    out.extend_from_slice(&run.frame);
    Ok((run.verdict, out))
}

/// Like [`test_run_xdp`], with the metadata split off the frame. The kernel
/// reports the metadata length in the output context: `xdp_md.data` is
/// `data - data_meta` after the run (net/bpf/test_run.c).
pub fn test_run_xdp_split(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    ingress_ifindex: u32,
) -> Result<XdpRun> {
    use skel::types::xdp_md;
    let mut ctx = zeroed_ctx::<xdp_md>();
    put_u32(
        &mut ctx,
        std::mem::offset_of!(xdp_md, data_end),
        frame.len() as u32,
    );
    put_u32(
        &mut ctx,
        std::mem::offset_of!(xdp_md, ingress_ifindex),
        ingress_ifindex,
    );
    let mut ctx_out = zeroed_ctx::<xdp_md>();
    let (verdict, mut out) = test_run(prog, frame, Some(&mut ctx), Some(&mut ctx_out))?;
    let at = std::mem::offset_of!(xdp_md, data);
    let meta_len = u32::from_ne_bytes(ctx_out[at..at + 4].try_into().expect("4 bytes")) as usize;
    if meta_len > out.len() {
        bail!(
            "BPF_PROG_TEST_RUN reported {meta_len} bytes of XDP metadata in a {}-byte output",
            out.len()
        );
    }
    let frame = out.split_off(meta_len);
    Ok(XdpRun {
        verdict,
        meta: out,
        frame,
    })
}

/// Run a TC (sched_cls) program once on `frame` as if received on `ifindex`
/// (0: the loopback device). Returns the verdict and the output frame.
pub fn test_run_tc(
    prog: &libbpf_rs::ProgramMut<'_>,
    frame: &[u8],
    ifindex: u32,
) -> Result<(u32, Vec<u8>)> {
    use skel::types::__sk_buff;
    let mut ctx = zeroed_ctx::<__sk_buff>();
    put_u32(&mut ctx, std::mem::offset_of!(__sk_buff, ifindex), ifindex);
    test_run(prog, frame, Some(&mut ctx), None)
}

/// A test-run context of type `T` as all-zero bytes. Built as bytes, not as
/// a Rust value, because the kernel rejects non-zero padding (EINVAL).
fn zeroed_ctx<T>() -> Vec<u8> {
    vec![0u8; std::mem::size_of::<T>()]
}

fn put_u32(buf: &mut [u8], offset: usize, v: u32) {
    buf[offset..offset + 4].copy_from_slice(&v.to_ne_bytes());
}

/// Create the clsact qdisc on `ifindex`. Returns true if this call created it
/// (so that detaching may remove it again), false if it already existed.
pub fn create_clsact(ifindex: i32) -> Result<bool> {
    let mut raw = libbpf_rs::libbpf_sys::bpf_tc_hook {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tc_hook>() as _,
        ifindex,
        attach_point: libbpf_rs::libbpf_sys::BPF_TC_INGRESS,
        ..Default::default()
    };
    // SAFETY: `raw` is a valid, initialised bpf_tc_hook owned by this frame;
    // libbpf only reads it.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_tc_hook_create(&mut raw) };
    match rc {
        0 => Ok(true),
        e if -e == nix::errno::Errno::EEXIST as i32 => Ok(false),
        e => bail!(
            "creating clsact qdisc on ifindex {ifindex}: {}",
            std::io::Error::from_raw_os_error(-e)
        ),
    }
}

/// Program id attached with XDP in `mode_flag` mode (`XDP_FLAGS_DRV_MODE` or
/// `XDP_FLAGS_SKB_MODE`) on `ifindex`; 0 if none.
pub fn xdp_prog_id(ifindex: i32, mode_flag: u32) -> Result<u32> {
    let mut id = 0u32;
    // SAFETY: `id` outlives the call; libbpf writes one u32 through it.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_xdp_query_id(ifindex, mode_flag as i32, &mut id) };
    if rc != 0 {
        bail!(
            "querying XDP on ifindex {ifindex}: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(id)
}

/// Detach whatever XDP program runs in `mode_flag` mode on `ifindex`.
pub fn xdp_detach(ifindex: i32, mode_flag: u32) -> Result<()> {
    // SAFETY: no pointers are passed (opts NULL).
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_xdp_detach(ifindex, mode_flag, std::ptr::null()) };
    if rc != 0 {
        bail!(
            "detaching XDP from ifindex {ifindex}: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(())
}

fn tc_ingress_hook(ifindex: i32) -> libbpf_rs::libbpf_sys::bpf_tc_hook {
    libbpf_rs::libbpf_sys::bpf_tc_hook {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tc_hook>() as _,
        ifindex,
        attach_point: libbpf_rs::libbpf_sys::BPF_TC_INGRESS,
        ..Default::default()
    }
}

fn tc_opts(handle: u32, priority: u32) -> libbpf_rs::libbpf_sys::bpf_tc_opts {
    libbpf_rs::libbpf_sys::bpf_tc_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tc_opts>() as _,
        handle,
        priority,
        ..Default::default()
    }
}

/// Program id of the TC ingress filter (`handle`, `priority`) on `ifindex`.
pub fn tc_filter_prog_id(ifindex: i32, handle: u32, priority: u32) -> Option<u32> {
    let hook = tc_ingress_hook(ifindex);
    let mut opts = tc_opts(handle, priority);
    // SAFETY: both structs are initialised and outlive the call.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_tc_query(&hook, &mut opts) };
    (rc == 0).then_some(opts.prog_id)
}

/// Remove the TC ingress filter (`handle`, `priority`) from `ifindex`.
pub fn tc_filter_detach(ifindex: i32, handle: u32, priority: u32) -> Result<()> {
    let hook = tc_ingress_hook(ifindex);
    let opts = tc_opts(handle, priority);
    // SAFETY: both structs are initialised and outlive the call.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_tc_detach(&hook, &opts) };
    if rc != 0 {
        bail!(
            "detaching the TC filter from ifindex {ifindex}: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_header() {
        assert_eq!(std::mem::size_of::<sys::nilb_service_key>(), 8);
        assert_eq!(std::mem::size_of::<sys::nilb_bucket>(), 16);
        assert_eq!(std::mem::size_of::<sys::nilb_table_header>(), 16);
        assert_eq!(std::mem::size_of::<sys::nilb_backend_stats>(), 24);
        assert_eq!(std::mem::size_of::<sys::nilb_config>(), 20);
        assert_eq!(std::mem::size_of::<sys::nilb_service_stats>(), 32);
        assert_eq!(std::mem::size_of::<skel::types::xdp_md>(), 24);
    }

    #[test]
    fn counter_names_follow_the_enum() {
        assert_eq!(
            COUNTER_NAMES.len(),
            sys::nilb_counter::NILB_COUNTER_MAX as usize
        );
        assert_eq!(
            COUNTER_NAMES[sys::nilb_counter::C_TC_FORWARD as usize],
            "tc_forward"
        );
        assert_eq!(
            COUNTER_NAMES[sys::nilb_counter::C_XDP_DROP_FRAGMENT as usize],
            "xdp_drop_fragment"
        );
        assert!(COUNTER_HELP.iter().all(|h| !h.is_empty()));
    }

    #[test]
    fn service_key_bytes_are_network_order() {
        let k = ServiceKey {
            vip: Ipv4Addr::new(10, 0, 0, 100),
            port: 80,
            protocol: Protocol::Tcp,
        };
        let raw = service_key(&k);
        assert_eq!(bytes_of(&raw), &[10, 0, 0, 100, 0, 80, 6, 0]);
        assert_eq!(parse_service_key(bytes_of(&raw)).unwrap(), Some(k));
    }

    #[test]
    fn inner_elements_layout() {
        let t = Table::build(
            16,
            &[crate::table::Target {
                dip: Ipv4Addr::new(10, 0, 0, 12),
                weight: 1,
            }],
        );
        let v = inner_table_values(&t, 7, &|_| 9);
        assert_eq!(v.len(), 17 * 16);
        assert_eq!(
            &v[..8],
            &[15u32.to_ne_bytes(), 7u32.to_ne_bytes()].concat()[..]
        );
        assert_eq!(&v[16..24], &[10, 0, 0, 12, 0, 0, 0, 0]);
        assert_eq!(&v[24..28], &9u32.to_ne_bytes());
    }
}
