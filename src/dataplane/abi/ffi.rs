//! Calls into the kernel that libbpf-rs does not wrap safely: the bucket
//! pool written and read through `mmap`, per-CPU reads,
//! the clsact qdisc, and XDP and TC queries and detaches by interface
//! (netlink through libbpf).

use std::os::fd::{AsFd, BorrowedFd};

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::layout::sum_percpu_u64;
use super::COUNTER_NAMES;

/// A shared mapping of a byte range of a `BPF_F_MMAPABLE` array's values
/// (the pool and `bucket_moved`): what the control plane writes buckets
/// through and tools read them from. Offsets are bytes from the array's
/// first value; the mapping covers whole pages around the range and is
/// unmapped when dropped (so the daemon's resident memory does not keep the
/// pool's pages).
pub struct ArrayMapping {
    ptr: std::ptr::NonNull<std::ffi::c_void>,
    map_len: usize,
    /// Byte offset of the mapping's start in the array.
    start: usize,
    /// Bytes of the range asked for, from `start + lead`.
    lead: usize,
    len: usize,
}

impl ArrayMapping {
    /// Map bytes `offset .. offset + len` of the array `fd` (read-only
    /// unless `write`). The caller keeps the range within the array.
    pub fn new(fd: BorrowedFd<'_>, offset: usize, len: usize, write: bool) -> Result<Self> {
        use nix::sys::mman::{mmap, MapFlags as MmapFlags, ProtFlags};
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096) as usize;
        let start = offset / page * page;
        let map_len = (offset + len.max(1)).div_ceil(page) * page - start;
        let prot = if write {
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE
        } else {
            ProtFlags::PROT_READ
        };
        let nz = std::num::NonZeroUsize::new(map_len).expect("at least one page");
        // SAFETY: a new shared mapping of the array's value area at a page
        // offset within it (the kernel refuses ranges beyond the array); the
        // pointer is only used through the accessors below, which stay
        // within `map_len`, and unmapped in Drop.
        let ptr = unsafe {
            mmap(
                None,
                nz,
                prot,
                MmapFlags::MAP_SHARED,
                fd,
                start as nix::libc::off_t,
            )
        }
        .with_context(|| format!("mmap of {len} bytes at {offset} of a BPF array"))?;
        Ok(ArrayMapping {
            ptr,
            map_len,
            start,
            lead: offset - start,
            len,
        })
    }

    /// Address of array byte `off` (within the range mapped), checked for
    /// `size` bytes and `align` alignment.
    fn at(&self, off: usize, size: usize, align: usize) -> *mut u8 {
        let rel = off
            .checked_sub(self.start + self.lead)
            .expect("offset before the mapped range");
        assert!(rel + size <= self.len, "access beyond the mapped range");
        assert_eq!(off % align, 0, "unaligned access to a BPF array");
        // SAFETY: within the mapping (checked above; `lead + len <= map_len`).
        unsafe { self.ptr.as_ptr().cast::<u8>().add(self.lead + rel) }
    }

    /// Store `v` at array byte `off` (8-byte aligned) with one aligned
    /// 8-byte store, so that a program reading it concurrently sees the old
    /// or the new value, never a mix.
    pub fn store_u64(&self, off: usize, v: u64) {
        let p = self.at(off, 8, 8).cast::<std::sync::atomic::AtomicU64>();
        // SAFETY: aligned, within the (writable) mapping; the memory is
        // shared with BPF programs, hence an atomic (plain mov) store.
        unsafe { (*p).store(v, std::sync::atomic::Ordering::Relaxed) }
    }

    /// Load the 8 bytes at array byte `off` (8-byte aligned) at once.
    pub fn load_u64(&self, off: usize) -> u64 {
        let p = self.at(off, 8, 8).cast::<std::sync::atomic::AtomicU64>();
        // SAFETY: aligned and within the mapping.
        unsafe { (*p).load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// Store `v` at array byte `off` (4-byte aligned), at once.
    pub fn store_u32(&self, off: usize, v: u32) {
        let p = self.at(off, 4, 4).cast::<std::sync::atomic::AtomicU32>();
        // SAFETY: aligned, within the (writable) mapping.
        unsafe { (*p).store(v, std::sync::atomic::Ordering::Relaxed) }
    }

    /// Load the 4 bytes at array byte `off` (4-byte aligned) at once.
    pub fn load_u32(&self, off: usize) -> u32 {
        let p = self.at(off, 4, 4).cast::<std::sync::atomic::AtomicU32>();
        // SAFETY: aligned and within the mapping.
        unsafe { (*p).load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// Store `v` at array byte `off` (2-byte aligned), at once, ordered
    /// after every earlier store of this thread (release): a program that
    /// reads it sees the stores made before it, such as a bucket before its
    /// `bucket_first` entry.
    pub fn store_u16_release(&self, off: usize, v: u16) {
        let p = self.at(off, 2, 2).cast::<std::sync::atomic::AtomicU16>();
        // SAFETY: aligned, within the (writable) mapping.
        unsafe { (*p).store(v, std::sync::atomic::Ordering::Release) }
    }

    /// Load the 2 bytes at array byte `off` (2-byte aligned) at once.
    pub fn load_u16(&self, off: usize) -> u16 {
        let p = self.at(off, 2, 2).cast::<std::sync::atomic::AtomicU16>();
        // SAFETY: aligned and within the mapping.
        unsafe { (*p).load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// Copy `bytes` to array byte `off` (a range no program reads yet, or
    /// whose readers accept any mix, such as the control plane's own
    /// `bucket_moved`).
    pub fn write(&self, off: usize, bytes: &[u8]) {
        let p = self.at(off, bytes.len(), 1);
        // SAFETY: within the (writable) mapping; `bytes` is a separate
        // allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) }
    }

    /// Copy array bytes `off .. off + len` out.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let p = self.at(off, len, 1);
        let mut out = vec![0u8; len];
        // SAFETY: within the mapping; `out` is a separate allocation.
        unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), len) }
        out
    }
}

impl Drop for ArrayMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr, self.map_len) };
    }
}

/// Create an ARRAY map of `entries` values of `value_size` bytes (u32 keys)
/// with `BPF_F_MMAPABLE`: a grown bucket pool or `bucket_moved`.
pub fn create_mmapable_array(
    name: &str,
    value_size: u32,
    entries: u32,
) -> Result<libbpf_rs::MapHandle> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_MMAPABLE,
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
    .with_context(|| format!("creating array {name} ({entries} entries)"))
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

/// Fill a `BPF_F_MMAPABLE` array that no program reads yet with `values`
/// (its first `values.len()` bytes), through a mapping.
pub fn fill_array(map: &libbpf_rs::MapHandle, values: &[u8]) -> Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    let m = ArrayMapping::new(map.as_fd(), 0, values.len(), true).context("filling an array")?;
    m.write(0, values);
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
    tc_hook(ifindex, false)
}

fn tc_hook(ifindex: i32, egress: bool) -> libbpf_rs::libbpf_sys::bpf_tc_hook {
    libbpf_rs::libbpf_sys::bpf_tc_hook {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_tc_hook>() as _,
        ifindex,
        attach_point: if egress {
            libbpf_rs::libbpf_sys::BPF_TC_EGRESS
        } else {
            libbpf_rs::libbpf_sys::BPF_TC_INGRESS
        },
        ..Default::default()
    }
}

/// Program id of the TC egress filter (`handle`, `priority`) on `ifindex`,
/// if there is one (NAT mode's reply program).
pub fn tc_egress_prog_id(ifindex: i32, handle: u32, priority: u32) -> Option<u32> {
    let hook = tc_hook(ifindex, true);
    let mut opts = tc_opts(handle, priority);
    // SAFETY: both structs are initialised and outlive the call.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_tc_query(&hook, &mut opts) };
    (rc == 0).then_some(opts.prog_id)
}

/// Remove the TC egress filter (`handle`, `priority`) from `ifindex`.
pub fn tc_egress_detach(ifindex: i32, handle: u32, priority: u32) -> Result<()> {
    let hook = tc_hook(ifindex, true);
    let opts = tc_opts(handle, priority);
    // SAFETY: both structs are initialised and outlive the call.
    let rc = unsafe { libbpf_rs::libbpf_sys::bpf_tc_detach(&hook, &opts) };
    if rc != 0 {
        bail!(
            "detaching the TC egress filter from ifindex {ifindex}: {}",
            std::io::Error::from_raw_os_error(-rc)
        );
    }
    Ok(())
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

/// Give the allocator's free memory back to the system (glibc's
/// `malloc_trim`, all arenas): after a reload the replaced state's tables
/// are free, but glibc keeps freed blocks below its mmap threshold (a
/// 4096-bucket table is 48 KiB) in the heap, resident. Returns whether
/// memory was released. Other C libraries: nothing to do (musl returns
/// freed pages itself).
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointers; it locks each arena.
        unsafe { nix::libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
