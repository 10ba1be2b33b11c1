//! Calls into the kernel that libbpf-rs does not wrap safely: bucket arrays
//! created as inner maps and filled or read through `mmap`, per-CPU reads,
//! the clsact qdisc, and XDP and TC queries and detaches by interface
//! (netlink through libbpf).

use std::os::fd::{AsFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::layout::{read_struct, sum_percpu_u64, BUCKET_SIZE};
use super::{sys, COUNTER_NAMES};

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

/// Create a map of `map_type` with `flags` (filter maps made by the control
/// plane: the inner maps of the edge filters, the rate-limit LRU).
pub fn create_map(
    map_type: libbpf_rs::MapType,
    name: &str,
    key_size: u32,
    value_size: u32,
    entries: u32,
    flags: u32,
) -> Result<libbpf_rs::MapHandle> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: flags,
        ..Default::default()
    };
    libbpf_rs::MapHandle::create(map_type, Some(name), key_size, value_size, entries, &opts)
        .with_context(|| format!("creating map {name} ({entries} entries)"))
}

/// Memory the kernel charges for a map, bytes (`memlock` of its fdinfo).
pub fn map_memlock(map: &dyn MapCore) -> Option<u64> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(&map.as_fd());
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("memlock:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Wait until every BPF program that was running has finished (an RCU
/// grace period): the kernel waits for one after each update of a
/// map-in-map, so this updates one slot of a private ARRAY_OF_MAPS that no
/// program reads.
pub struct RcuBarrier {
    outer: libbpf_rs::MapHandle,
    inner: libbpf_rs::MapHandle,
}

impl RcuBarrier {
    /// The private maps (created once per data plane).
    pub fn new() -> Result<Self> {
        let inner = create_map(libbpf_rs::MapType::Array, "nilb_rcu_in", 4, 4, 1, 0)?;
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            inner_map_fd: std::os::fd::AsRawFd::as_raw_fd(&inner.as_fd()) as u32,
            ..Default::default()
        };
        let outer = libbpf_rs::MapHandle::create(
            libbpf_rs::MapType::ArrayOfMaps,
            Some("nilb_rcu"),
            4,
            4,
            1,
            &opts,
        )
        .context("creating the RCU barrier map")?;
        Ok(RcuBarrier { outer, inner })
    }

    /// One grace period.
    pub fn wait(&self) -> Result<()> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.inner.as_fd()) as u32;
        self.outer
            .update(&0u32.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .context("waiting for an RCU grace period")
    }
}

/// Write `values` (whole elements) into a `BPF_F_MMAPABLE` array from
/// element 0, with one memory copy.
pub fn fill_array(map: &libbpf_rs::MapHandle, values: &[u8]) -> Result<()> {
    with_mmap(map.as_fd(), values.len(), true, |m| {
        m.copy_from_slice(values)
    })
    .context("filling a bucket array")
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
