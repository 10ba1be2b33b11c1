//! Tables into the bucket pool (docs/design.md "Maps"): which region each
//! service has, which address each backend slot holds, and the writes that
//! install a table so that a packet never sees a half-written chain or a
//! slot without its address.
//!
//! An install of a service whose region keeps its size writes the buckets
//! that changed in place, each with one aligned 8-byte store (the programs
//! read a bucket as one word) followed by its 2-byte `bucket_first` entry
//! (what the balancer reads first; the bucket is the truth), and touches
//! no other map: no `services` update, no RCU wait. A new service or a new
//! size gets a region of its own, filled completely, then one `services`
//! update points the programs at it; the old region goes into quarantine. Every slot a chain names has
//! its address written in `backends` before the first bucket names it.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags};

use super::abi::{
    self, ArrayMapping, BACKEND_STRIDE, BUCKET_BYTES, FIRST_BYTES, MAX_OWNERS, MOVED_BYTES,
};
use super::pool::{AllocError, Pool, Region, Usage, CHUNK_BUCKETS};
use crate::limits::MAX_BACKEND_SLOTS;
use crate::table::Table;
use crate::types::ServiceKey;

/// What the data plane reads of a table to install it: [`Table`] and
/// [`Chains`] implement it.
pub trait ChainSource {
    /// Buckets (a power of two).
    fn size(&self) -> u32;
    /// First hop of bucket `i`.
    fn first(&self, i: usize) -> Option<IpAddr>;
    /// Previous owners of bucket `i`, newest first, appended to `out` (the
    /// first [`MAX_OWNERS`]` - 1` are installed).
    fn previous(&self, i: usize, out: &mut Vec<IpAddr>);
    /// When bucket `i` last changed first hop (the table's clock, ms).
    fn moved_at(&self, i: usize) -> Option<u64>;
    /// The source as a [`Table`], if it is one: its hops are then read as
    /// entries of its short backend list ([`Table::entries`]).
    fn as_table(&self) -> Option<&Table> {
        None
    }
}

impl ChainSource for Table {
    fn size(&self) -> u32 {
        Table::size(self)
    }
    fn first(&self, i: usize) -> Option<IpAddr> {
        Table::first(self, i)
    }
    fn previous(&self, i: usize, out: &mut Vec<IpAddr>) {
        out.extend(Table::previous(self, i));
    }
    fn moved_at(&self, i: usize) -> Option<u64> {
        Table::moved_at(self, i)
    }
    fn as_table(&self) -> Option<&Table> {
        Some(self)
    }
}

/// Buckets given by their hops: per bucket the first hop and the previous
/// owners, newest first, with each bucket's move time (ms). What the data
/// plane reads back ([`super::LiveTable`]), and what fixtures install to
/// get chains the control plane would take many moves to make.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chains {
    /// Per bucket: first hop, previous owners newest first.
    pub chains: Vec<(Option<IpAddr>, Vec<IpAddr>)>,
    /// Per bucket: when its first hop last changed (ms), None: never.
    pub moved_at: Vec<Option<u64>>,
}

impl ChainSource for Chains {
    fn size(&self) -> u32 {
        self.chains.len() as u32
    }
    fn first(&self, i: usize) -> Option<IpAddr> {
        self.chains[i].0
    }
    fn previous(&self, i: usize, out: &mut Vec<IpAddr>) {
        out.extend_from_slice(&self.chains[i].1);
    }
    fn moved_at(&self, i: usize) -> Option<u64> {
        self.moved_at.get(i).copied().flatten()
    }
}

/// One table to install.
pub(super) struct Install<'a> {
    pub key: ServiceKey,
    pub index: u32,
    /// NAT mode: the backends' listening port (host order); None: DSR.
    pub nat_port: Option<u16>,
    pub table: &'a dyn ChainSource,
    pub slot_of: &'a dyn Fn(IpAddr) -> u32,
    /// Buckets that changed since this service's last install (None: all).
    pub changed: Option<&'a [u32]>,
}

/// The maps the tables live in.
pub(super) struct PoolMaps<'a> {
    pub services: &'a dyn MapCore,
    /// `services6` (None: pins of a daemon without IPv6, read only).
    pub services6: Option<&'a dyn MapCore>,
    pub buckets: &'a dyn MapCore,
    /// `bucket_first` (None: pins of a daemon without it, read only).
    pub first: Option<&'a dyn MapCore>,
    pub moved: &'a dyn MapCore,
    pub backends: &'a dyn MapCore,
    /// `cache_gen` of the loaded programs (None: pins, read only),
    /// incremented after every write to `services` or `services6` so that
    /// the XDP programs' service caches drop what they hold
    /// (docs/design.md "Lookup caches").
    pub cache_gen: Option<&'a dyn MapCore>,
}

impl PoolMaps<'_> {
    /// [`bump_cache_gen`] of these maps' `cache_gen` (pins: a no-op).
    fn bump_cache_gen(&self) -> Result<()> {
        bump_cache_gen(self.cache_gen)
    }

    /// The services map of `key` (by its VIP's family) and its key bytes.
    fn service_entry(&self, key: &ServiceKey) -> Result<(&dyn MapCore, Vec<u8>)> {
        let (which, bytes) = abi::service_key(key);
        let map = match which {
            abi::ServicesMap::V4 => self.services,
            abi::ServicesMap::V6 => self
                .services6
                .with_context(|| format!("{key}: these maps have no services6 (IPv6)"))?,
        };
        Ok((map, bytes))
    }

    /// Buckets `range` of the pool only (the kernel maps every page of a
    /// mapping at once: mapping the regions an install touches, not the
    /// whole pool, keeps a one-table install cheap).
    fn map_bucket_range(&self, range: std::ops::Range<u64>, write: bool) -> Result<ArrayMapping> {
        ArrayMapping::new(
            self.buckets.as_fd(),
            range.start as usize * BUCKET_BYTES,
            (range.end - range.start) as usize * BUCKET_BYTES,
            write,
        )
        .context("mapping the bucket pool")
    }
    fn map_first_range(
        &self,
        range: std::ops::Range<u64>,
        write: bool,
    ) -> Result<Option<ArrayMapping>> {
        let Some(first) = self.first else {
            return Ok(None);
        };
        ArrayMapping::new(
            first.as_fd(),
            range.start as usize * FIRST_BYTES,
            (range.end - range.start) as usize * FIRST_BYTES,
            write,
        )
        .context("mapping bucket_first")
        .map(Some)
    }
    fn map_moved_range(&self, range: std::ops::Range<u64>, write: bool) -> Result<ArrayMapping> {
        ArrayMapping::new(
            self.moved.as_fd(),
            range.start as usize * MOVED_BYTES,
            (range.end - range.start) as usize * MOVED_BYTES,
            write,
        )
        .context("mapping bucket_moved")
    }
    fn map_backends(&self, write: bool) -> Result<ArrayMapping> {
        ArrayMapping::new(
            self.backends.as_fd(),
            0,
            MAX_BACKEND_SLOTS as usize * BACKEND_STRIDE,
            write,
        )
        .context("mapping backends")
    }
}

/// Increment `cache_gen` (skipping 0), read from the map so that any
/// writer continues the sequence. Called after each update or delete in
/// the maps the XDP programs cache (`services`, `services6`, `vips`,
/// `cluster_nodes`): the cached copy of the old entry then serves no later
/// packet (docs/design.md "Lookup caches"). Without the map (pins, read
/// only) a no-op.
pub(super) fn bump_cache_gen(map: Option<&dyn MapCore>) -> Result<()> {
    let Some(map) = map else {
        return Ok(());
    };
    let key = 0u32.to_ne_bytes();
    let cur = map
        .lookup(&key, MapFlags::ANY)
        .context("reading cache_gen")?
        .and_then(|v| {
            v.get(..4)
                .map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        })
        .unwrap_or(0);
    let next = cur.wrapping_add(1).max(1);
    map.update(&key, &next.to_ne_bytes(), MapFlags::ANY)
        .context("incrementing cache_gen")
}

/// One service's table as the maps hold it, raw: what `nilb tables` shows
/// and what adoption and [`super::LiveTable`] are made from.
#[derive(Clone, Debug)]
pub struct RawTable {
    /// The service.
    pub key: ServiceKey,
    /// Its `services` value (region and stats index).
    pub service: abi::sys::nilb_service,
    /// Its buckets' slots (`hops[]`), in bucket order.
    pub buckets: Vec<[u16; MAX_OWNERS]>,
    /// Its buckets' `bucket_moved` seconds (0: never), in bucket order.
    pub moved_s: Vec<u32>,
    /// Its buckets' `bucket_first` entries, in bucket order (empty: maps
    /// without `bucket_first`); each is [`abi::first_hop_entry`] of its
    /// bucket once an install is done.
    pub first: Vec<u16>,
}

impl RawTable {
    /// The region of the pool the table occupies.
    pub fn region(&self) -> Region {
        Region {
            base: self.service.table_base,
            size: self.service.table_mask.wrapping_add(1),
        }
    }
}

/// What [`read_raw`] returns: the tables, every backend slot's address
/// (index = slot) and what could not be read.
pub(super) type RawRead = (Vec<RawTable>, Vec<Option<IpAddr>>, Vec<String>);

/// What [`read_regions`] returns: each service with its `services` value
/// and region, in key order, and what could not be taken.
pub(super) type Regions = (
    Vec<(ServiceKey, abi::sys::nilb_service, Region)>,
    Vec<String>,
);

/// Every installed service's `services` value and region (or only
/// `only`'s) from `services` and `services6`, in key order, without
/// reading a bucket. A service whose region does not lie within a pool of
/// `pool` buckets is reported in the errors.
pub(super) fn read_regions(
    services: &dyn MapCore,
    services6: Option<&dyn MapCore>,
    pool: u32,
    only: Option<&ServiceKey>,
) -> Result<Regions> {
    let mut errors = Vec::new();
    let mut keys: Vec<ServiceKey> = match only {
        Some(k) => vec![*k],
        None => {
            let mut v = Vec::new();
            for k in services
                .keys()
                .chain(services6.iter().flat_map(|m| m.keys()))
            {
                if let Some(key) = abi::parse_service_key(&k)? {
                    v.push(key);
                }
            }
            v
        }
    };
    keys.sort();
    let mut found = Vec::with_capacity(keys.len());
    for key in keys {
        let (which, k) = abi::service_key(&key);
        let map = match which {
            abi::ServicesMap::V4 => services,
            abi::ServicesMap::V6 => match services6 {
                Some(m) => m,
                None => continue,
            },
        };
        let Some(v) = map.lookup(&k, MapFlags::ANY)? else {
            continue;
        };
        let service: abi::sys::nilb_service = abi::read_struct(&v)?;
        let size = service.table_mask.wrapping_add(1);
        let region = Region {
            base: service.table_base,
            size,
        };
        if !size.is_power_of_two() || size > CHUNK_BUCKETS || region.end() > pool as u64 {
            errors.push(format!(
                "{key}: table of {size} buckets at {} does not lie within the pool of {pool}",
                region.base
            ));
            continue;
        }
        found.push((key, service, region));
    }
    Ok((found, errors))
}

/// Every installed service's table (or only `only`'s) and the `backends`
/// slots, read from the maps (through read-only mappings), tables in key
/// order. A service whose region does not lie within the pool is reported
/// in the errors, not read.
pub(super) fn read_raw(maps: &PoolMaps<'_>, only: Option<&ServiceKey>) -> Result<RawRead> {
    let backends = read_backends(maps)?;
    let mut out = Vec::new();
    let (found, errors) = read_regions(
        maps.services,
        maps.services6,
        maps.buckets.max_entries(),
        only,
    )?;
    // One mapping of the part of the pool the tables span (one table's
    // region when only one is asked for).
    let (lo, hi) = found.iter().fold((u64::MAX, 0u64), |(lo, hi), (_, _, r)| {
        (lo.min(r.base as u64), hi.max(r.end()))
    });
    if found.is_empty() {
        return Ok((out, backends, errors));
    }
    let (b, m, f) = (
        maps.map_bucket_range(lo..hi, false)?,
        maps.map_moved_range(lo..hi, false)?,
        maps.map_first_range(lo..hi, false)?,
    );
    for (key, service, region) in found {
        let (base, size) = (region.base as usize, region.size as usize);
        let words = b.read(base * BUCKET_BYTES, size * BUCKET_BYTES);
        let moved = m.read(base * MOVED_BYTES, size * MOVED_BYTES);
        let first = f.as_ref().map_or_else(Vec::new, |f| {
            (base..base + size)
                .map(|i| f.load_u16(i * FIRST_BYTES))
                .collect()
        });
        out.push(RawTable {
            key,
            service,
            buckets: words
                .chunks_exact(BUCKET_BYTES)
                .map(|w| abi::bucket_hops(u64::from_ne_bytes(w.try_into().expect("8 bytes"))))
                .collect(),
            moved_s: moved
                .chunks_exact(MOVED_BYTES)
                .map(|w| u32::from_ne_bytes(w.try_into().expect("4 bytes")))
                .collect(),
            first,
        });
    }
    out.sort_by_key(|t| t.key);
    Ok((out, backends, errors))
}

/// Every slot's address in `backends` (index = slot).
fn read_backends(maps: &PoolMaps<'_>) -> Result<Vec<Option<IpAddr>>> {
    let map = maps.map_backends(false)?;
    let bytes = map.read(0, MAX_BACKEND_SLOTS as usize * BACKEND_STRIDE);
    bytes
        .chunks_exact(BACKEND_STRIDE)
        .map(|e| Ok(abi::backend_of(&abi::read_struct(e)?)))
        .collect()
}

/// An install found no region for a table: the error's kind, found by
/// downcast (`anyhow::Error::is::<NoRoom>`), so that the daemon retries a
/// reload that failed so while released regions wait out their quarantine.
#[derive(Debug)]
pub struct NoRoom {
    /// The service whose table found no room.
    pub key: ServiceKey,
    /// The allocator's reason.
    pub reason: String,
    /// Buckets the change needs in new regions.
    pub batch: u64,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no room for the table of {}: {}; this change needs {} buckets in new regions while the tables it replaces are still in use; the pool is sized from the configuration when nilb starts (a restart grows it)",
            self.key, self.reason, self.batch
        )
    }
}

impl std::error::Error for NoRoom {}

/// What the data plane knows of the pool between installs: regions,
/// slots' addresses and how many bucket entries name each slot.
pub(super) struct PoolBook {
    pool: Pool<ServiceKey>,
    /// Region, stats index and attributes (flags and NAT port,
    /// [`abi::service_attrs`]) of each service.
    regions: BTreeMap<ServiceKey, (Region, u32, u32)>,
    slot_addr: Vec<Option<IpAddr>>,
    slot_refs: Vec<u32>,
    epoch: Instant,
    /// Bucket words stored so far (a word equal to the installed one is
    /// not stored).
    stores: u64,
}

fn add_refs(refs: &mut [u32], word: u64, delta: i64) {
    for s in abi::bucket_hops(word) {
        if s != 0 {
            let r = &mut refs[s as usize];
            *r = (*r as i64 + delta).max(0) as u32;
        }
    }
}

impl PoolBook {
    /// An empty pool of `buckets` (the maps are new).
    pub fn new(buckets: u32) -> Self {
        PoolBook {
            pool: Pool::new(buckets),
            regions: BTreeMap::new(),
            slot_addr: vec![None; MAX_BACKEND_SLOTS as usize],
            slot_refs: vec![0; MAX_BACKEND_SLOTS as usize],
            epoch: Instant::now(),
            stores: 0,
        }
    }

    /// The book of maps an earlier daemon filled (adoption, possibly after
    /// the pool grew): each service's region reserved as it is, its
    /// `bucket_first` entries rewritten from its buckets (an earlier daemon
    /// may have had no `bucket_first`, or died between a bucket and its
    /// entry). Returns the book and what could not be taken over (a region
    /// that does not fit or overlaps another: that service is installed
    /// anew).
    pub fn adopt(maps: &PoolMaps<'_>) -> Result<(Self, Vec<String>)> {
        let mut book = PoolBook::new(maps.buckets.max_entries());
        let (tables, backends, mut errors) = read_raw(maps, None)?;
        book.slot_addr = backends;
        for t in tables {
            // Every table `services` points at, taken over or not (an entry
            // depends on its bucket only, and the programs read these
            // regions until a table not taken over is installed anew).
            let r = t.region();
            if let Some(f) = maps.map_first_range(r.base as u64..r.end(), true)? {
                for (i, h) in t.buckets.iter().enumerate() {
                    let e = abi::first_hop_entry(abi::bucket_word(*h));
                    if t.first.get(i) != Some(&e) {
                        f.store_u16_release((r.base as usize + i) * FIRST_BYTES, e);
                    }
                }
            }
            if let Err(e) = book.pool.reserve(r, t.key) {
                errors.push(format!("{}: {e}", t.key));
                continue;
            }
            for h in &t.buckets {
                add_refs(&mut book.slot_refs, abi::bucket_word(*h), 1);
            }
            book.regions.insert(
                t.key,
                (
                    t.region(),
                    t.service.service_index,
                    abi::service_attrs(&t.service),
                ),
            );
        }
        Ok((book, errors))
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The pool's buckets by state.
    pub fn usage(&self) -> Usage {
        self.pool.usage()
    }

    /// Whether `key` has a region (an installed table) in this book.
    pub fn has(&self, key: &ServiceKey) -> bool {
        self.regions.contains_key(key)
    }

    /// Buckets of `key`'s region (None: no installed table): an install of
    /// another size takes a region of its own.
    pub fn region_size(&self, key: &ServiceKey) -> Option<u32> {
        self.regions.get(key).map(|r| r.0.size)
    }

    /// Install `items` (see the module): regions first, for all items at
    /// once (a batch that does not fit the pool fails before anything is
    /// written), then per item the slots' addresses, the buckets and, for a
    /// new region, the `services` update. An error while writing leaves the
    /// items before it installed.
    pub fn install(&mut self, maps: &PoolMaps<'_>, items: &[Install<'_>]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let now = self.now_ms();
        // Quarantines that are over end now, so that an error below gives
        // the pool as it is.
        self.pool.expire(now);
        // 1. Regions: new services and new sizes, largest first (they pack
        //    best), on a copy of the pool until all fit.
        let mut pool = self.pool.clone();
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(items[i].table.size()));
        let mut regions: Vec<Option<Region>> = vec![None; items.len()];
        for &i in &order {
            let it = &items[i];
            let size = it.table.size();
            if !size.is_power_of_two() || size > CHUNK_BUCKETS {
                bail!(
                    "{}: a table of {size} buckets (a power of two up to {CHUNK_BUCKETS})",
                    it.key
                );
            }
            match self.regions.get(&it.key) {
                Some((r, _, _)) if r.size == size => regions[i] = Some(*r),
                _ => {
                    let r = pool.alloc(size, it.key, now).map_err(|e| {
                        // The live pool's usage, not the trial copy's (which
                        // holds this batch's regions placed so far).
                        let e = match e {
                            AllocError::Full { size, .. } => AllocError::Full {
                                size,
                                usage: self.pool.usage(),
                            },
                            e => e,
                        };
                        let batch: u64 = order
                            .iter()
                            .filter(|&&j| {
                                self.regions.get(&items[j].key).map(|r| r.0.size)
                                    != Some(items[j].table.size())
                            })
                            .map(|&j| items[j].table.size() as u64)
                            .sum();
                        anyhow::Error::new(NoRoom {
                            key: it.key,
                            reason: e.to_string(),
                            batch,
                        })
                    })?;
                    regions[i] = Some(r);
                }
            }
        }
        self.pool = pool;
        // 2. Per item: slots, buckets, region swap, through mappings of
        //    the part of the pool the items' new and current regions span.
        let touched = regions.iter().flatten().copied().chain(
            items
                .iter()
                .filter_map(|it| self.regions.get(&it.key).map(|r| r.0)),
        );
        let (lo, hi) = touched.fold((u64::MAX, 0u64), |(lo, hi), r| {
            (lo.min(r.base as u64), hi.max(r.end()))
        });
        let (b, f, m, be) = (
            maps.map_bucket_range(lo..hi, true)?,
            maps.map_first_range(lo..hi, true)?
                .context("installing a table needs bucket_first")?,
            maps.map_moved_range(lo..hi, true)?,
            maps.map_backends(true)?,
        );
        for (i, it) in items.iter().enumerate() {
            let region = regions[i].expect("allocated above");
            if let Err(e) = self.install_one(maps, (&b, &f, &m, &be), it, region, now) {
                // Regions of the items not installed go back (their own
                // service may take them again at once).
                for (j, later) in items.iter().enumerate().skip(i) {
                    let r = regions[j].expect("allocated above");
                    if self.regions.get(&later.key).map(|x| x.0) != Some(r) {
                        self.pool.release(r, now);
                    }
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn install_one(
        &mut self,
        maps: &PoolMaps<'_>,
        (b, f, m, be): (&ArrayMapping, &ArrayMapping, &ArrayMapping, &ArrayMapping),
        it: &Install<'_>,
        region: Region,
        now: u64,
    ) -> Result<()> {
        let cur = self.regions.get(&it.key).copied();
        let fresh = cur.map(|c| c.0) != Some(region);
        let size = region.size as usize;
        let all: Vec<u32>;
        let idxs: &[u32] = match (fresh, it.changed) {
            (false, Some(c)) => c,
            _ => {
                all = (0..region.size).collect();
                &all
            }
        };
        if let Some(&bad) = idxs.iter().find(|&&i| i as usize >= size) {
            bail!("{}: changed bucket {bad} beyond its {size} buckets", it.key);
        }
        // Slots of every hop written, each checked: within the map, not 0,
        // one address per slot.
        // Tables name a few backends: a short list beats hashing every hop
        // of every bucket; a long one moves to a map.
        let mut memo: Vec<(IpAddr, u16)> = Vec::new();
        let mut memo_big: HashMap<IpAddr, u16> = HashMap::new();
        let mut assign: BTreeMap<u16, IpAddr> = BTreeMap::new();
        let mut slot = |a: IpAddr, assign: &mut BTreeMap<u16, IpAddr>| -> Result<u16> {
            if let Some(&(_, s)) = memo.iter().find(|(x, _)| *x == a) {
                return Ok(s);
            }
            if let Some(&s) = memo_big.get(&a) {
                return Ok(s);
            }
            let s = (it.slot_of)(a);
            if s == 0 || s >= MAX_BACKEND_SLOTS {
                bail!(
                    "{}: backend {a} has slot {s}, outside 1..{MAX_BACKEND_SLOTS}",
                    it.key
                );
            }
            let s = s as u16;
            if let Some(&other) = assign.get(&s) {
                if other != a {
                    bail!("{}: backends {other} and {a} both have slot {s}", it.key);
                }
            }
            assign.insert(s, a);
            if memo.len() < 16 {
                memo.push((a, s));
            } else {
                memo_big.insert(a, s);
            }
            Ok(s)
        };
        let mut words = Vec::with_capacity(idxs.len());
        let mut prev = Vec::with_capacity(MAX_OWNERS);
        if let Some(t) = it.table.as_table() {
            // Each entry's slot, found when a bucket first names it (slots
            // are never 0: 0 is "not yet").
            let mut slots: Vec<u16> = vec![0; t.entry_count() + 1];
            for &i in idxs {
                let i = i as usize;
                let entries = t.entries(i);
                let mut hops = [0u16; MAX_OWNERS];
                for (k, (&e, h)) in entries.iter().zip(hops.iter_mut()).enumerate() {
                    if e == 0 {
                        if k == 0 {
                            continue;
                        }
                        break;
                    }
                    let e = e as usize;
                    if slots[e] == 0 {
                        let a = t.entry_addr(e as u16).expect("entry of the table");
                        slots[e] = slot(a, &mut assign)?;
                    }
                    *h = slots[e];
                }
                words.push((i, abi::bucket_word(hops), abi::moved_value(t.moved_at(i))));
            }
        } else {
            for &i in idxs {
                let i = i as usize;
                let mut hops = [0u16; MAX_OWNERS];
                if let Some(f) = it.table.first(i) {
                    hops[0] = slot(f, &mut assign)?;
                }
                prev.clear();
                it.table.previous(i, &mut prev);
                for (h, &p) in hops[1..].iter_mut().zip(&prev) {
                    *h = slot(p, &mut assign)?;
                }
                words.push((
                    i,
                    abi::bucket_word(hops),
                    abi::moved_value(it.table.moved_at(i)),
                ));
            }
        }
        // A slot that changes address must not be named by any bucket that
        // keeps naming it: only buckets this install rewrites may still.
        let old_base = cur.map(|c| c.0.base as usize);
        let reassigned: Vec<(u16, IpAddr)> = assign
            .iter()
            .filter(|(s, a)| self.slot_addr[**s as usize] != Some(**a))
            .map(|(s, a)| (*s, *a))
            .collect();
        if reassigned
            .iter()
            .any(|(s, _)| self.slot_refs[*s as usize] > 0)
        {
            let mut rewritten = vec![0u32; MAX_BACKEND_SLOTS as usize];
            if let Some(ob) = old_base {
                let old_idxs: Box<dyn Iterator<Item = usize>> = if fresh {
                    Box::new(0..cur.expect("has a region").0.size as usize)
                } else {
                    Box::new(idxs.iter().map(|&i| i as usize))
                };
                for i in old_idxs {
                    add_refs(&mut rewritten, b.load_u64((ob + i) * BUCKET_BYTES), 1);
                }
            }
            for (s, a) in &reassigned {
                let named = self.slot_refs[*s as usize];
                if named > rewritten[*s as usize] {
                    bail!(
                        "{}: slot {s} is given to {a} while {} bucket entr{} of installed tables still name it for {}",
                        it.key,
                        named - rewritten[*s as usize],
                        if named - rewritten[*s as usize] == 1 { "y" } else { "ies" },
                        self.slot_addr[*s as usize].map_or("another backend".into(), |x| x.to_string())
                    );
                }
            }
        }
        // Addresses first.
        for (s, a) in &reassigned {
            let off = *s as usize * BACKEND_STRIDE;
            let v = abi::backend_value(*a);
            // family and the rest of the address, then the IPv4 word the
            // programs read, which makes the slot usable.
            be.write(off + 4, &abi::bytes_of(&v)[4..]);
            be.store_u32(off, v.addr[0]);
            self.slot_addr[*s as usize] = Some(*a);
        }
        // Buckets, each before its `bucket_first` entry: a program uses an
        // entry without the chain bit alone and otherwise the whole bucket,
        // so it forwards by the bucket as it was or as it is, never a mix.
        let base = region.base as usize;
        for &(i, w, mv) in &words {
            let off = (base + i) * BUCKET_BYTES;
            let old = b.load_u64(off);
            if fresh || old != w {
                b.store_u64(off, w);
                self.stores += 1;
                if !fresh {
                    add_refs(&mut self.slot_refs, old, -1);
                }
                add_refs(&mut self.slot_refs, w, 1);
            }
            let (foff, e) = ((base + i) * FIRST_BYTES, abi::first_hop_entry(w));
            if fresh || f.load_u16(foff) != e {
                f.store_u16_release(foff, e);
            }
            m.store_u32((base + i) * MOVED_BYTES, mv);
        }
        let old_attrs = cur.map_or(0, |c| c.2);
        let flags = abi::with_nat(old_attrs, it.nat_port);
        let rewritten = fresh || cur.map(|c| c.1) != Some(it.index) || flags != old_attrs;
        if rewritten {
            let val = abi::service_value(region.base, region.size, it.index, flags);
            let (map, k) = maps.service_entry(&it.key)?;
            map.update(&k, abi::bytes_of(&val), MapFlags::ANY)
                .with_context(|| format!("pointing {} at its table", it.key))?;
        }
        if fresh {
            if let Some((old, _, _)) = cur {
                for i in 0..old.size as usize {
                    add_refs(
                        &mut self.slot_refs,
                        b.load_u64((old.base as usize + i) * BUCKET_BYTES),
                        -1,
                    );
                }
                self.pool.release(old, now);
            }
        }
        self.regions.insert(it.key, (region, it.index, flags));
        // The book matches the maps before the increment, so that a failed
        // one leaves nothing to repair but the caches' 25 jiffies.
        if rewritten {
            maps.bump_cache_gen()?;
        }
        Ok(())
    }

    /// Services whose `nilb_service.flags` have all of `bits` (flag bits
    /// only, below 1 << 16).
    pub fn with_flags(&self, bits: u32) -> Vec<ServiceKey> {
        self.regions
            .iter()
            .filter(|(_, v)| v.2 & bits == bits)
            .map(|(k, _)| *k)
            .collect()
    }

    /// Set (`on`) or clear `bit` in the `services` value of `key` (one
    /// map update, only if it changes). A service without an installed
    /// table is left alone: its first install writes the flags it has.
    pub fn set_flag(
        &mut self,
        maps: &PoolMaps<'_>,
        key: &ServiceKey,
        bit: u32,
        on: bool,
    ) -> Result<()> {
        self.set_attrs(maps, key, |a| if on { a | bit } else { a & !bit })
    }

    /// Rewrite the attributes ([`abi::service_attrs`]) of `key`'s
    /// `services` value as `f` says (one map update, only if they change).
    /// A service without an installed table is left alone.
    pub fn set_attrs(
        &mut self,
        maps: &PoolMaps<'_>,
        key: &ServiceKey,
        f: impl Fn(u32) -> u32,
    ) -> Result<()> {
        let Some((r, index, flags)) = self.regions.get(key).copied() else {
            return Ok(());
        };
        let next = f(flags);
        if next == flags {
            return Ok(());
        }
        let val = abi::service_value(r.base, r.size, index, next);
        let (map, k) = maps.service_entry(key)?;
        map.update(&k, abi::bytes_of(&val), MapFlags::ANY)
            .with_context(|| format!("setting the flags of {key}"))?;
        self.regions.insert(*key, (r, index, next));
        maps.bump_cache_gen()
    }

    /// The services with an installed table.
    pub fn services(&self) -> Vec<ServiceKey> {
        self.regions.keys().copied().collect()
    }

    /// Remove `key` from `services` and put its region into quarantine.
    pub fn remove(&mut self, maps: &PoolMaps<'_>, key: &ServiceKey) -> Result<()> {
        let (map, k) = maps.service_entry(key)?;
        map.delete(&k)
            .with_context(|| format!("removing service {key}"))?;
        let mut unref = Ok(());
        if let Some((r, _, _)) = self.regions.remove(key) {
            unref = maps
                .map_bucket_range(r.base as u64..r.end(), false)
                .map(|b| {
                    for i in 0..r.size as usize {
                        add_refs(
                            &mut self.slot_refs,
                            b.load_u64((r.base as usize + i) * BUCKET_BYTES),
                            -1,
                        );
                    }
                });
            let now = self.now_ms();
            self.pool.release(r, now);
        }
        // After the book (a released region waits out its quarantine
        // first, far longer than the caches keep an entry), whatever the
        // slot counts' mapping did.
        let bumped = maps.bump_cache_gen();
        unref.and(bumped)
    }

    /// Bucket words stored since the book was made.
    pub fn stores(&self) -> u64 {
        self.stores
    }

    /// Bucket entries of installed tables that name `slot`.
    pub fn refs(&self, slot: u32) -> u32 {
        self.slot_refs.get(slot as usize).copied().unwrap_or(0)
    }
}
