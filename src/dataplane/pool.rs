//! Regions of the bucket pool (docs/design.md "Maps"): every service's table
//! is a region of the one `buckets` array, `table_base .. table_base +
//! table_size`. Pure logic, no BPF: which regions are in use, which are free,
//! which wait out their quarantine.
//!
//! - The pool is a whole number of chunks of [`CHUNK_BUCKETS`] buckets (the
//!   largest table); regions are powers of two, aligned to their size, cut
//!   from a chunk by buddy allocation (a free block is halved until it fits,
//!   freed halves merge again with their buddy). The smallest free block that
//!   fits is taken, the lowest address first, so that small tables pack
//!   together and large blocks stay whole.
//! - A released region (a service removed, or moved to a region of another
//!   size) may still be read by a program that looked up the old `services`
//!   value: it is given out again only after [`QUARANTINE_MS`], far longer
//!   than any program run. Its own service may take it back at once (a
//!   restore after a failed reload): readers of either value see that
//!   service's buckets.
//! - Fragmentation is bounded: a request of size `s` fails only if every
//!   aligned block of `s` buckets holds some region smaller than `s` (or one
//!   that covers it), so the free buckets are then fewer than `s` times the
//!   number of regions smaller than `s` ([`Pool::alloc`]). Tables of one size
//!   never fragment the pool.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Buckets per chunk: the largest table (`NILB_MAX_TABLE_SIZE`); the pool is
/// a whole number of chunks.
pub const CHUNK_BUCKETS: u32 = crate::limits::MAX_TABLE_SIZE;

/// How long a released region waits before it is given to another service
/// (ms). Readers of the `services` value that pointed at it finish within
/// microseconds (one program run); a second leaves no doubt.
pub const QUARANTINE_MS: u64 = 1000;

/// Orders of the buddy allocator: regions of 2^0 .. 2^16 buckets.
const ORDERS: usize = CHUNK_BUCKETS.trailing_zeros() as usize + 1;

/// Buckets a pool needs for tables of these sizes: all of them plus one of
/// the largest (the new region of a table that changes size while its old
/// one is in use), in whole chunks, at least one.
pub fn pool_buckets_for(sizes: impl IntoIterator<Item = u32>) -> u32 {
    let (sum, max) = sizes
        .into_iter()
        .fold((0u64, 0u64), |(s, m), x| (s + x as u64, m.max(x as u64)));
    let chunk = CHUNK_BUCKETS as u64;
    let chunks = (sum + max).div_ceil(chunk).max(1);
    (chunks * chunk).min(u32::MAX as u64 / chunk * chunk) as u32
}

/// Buckets a pool needs at a start that adopts a pinned pool of
/// `pinned_pool` buckets holding the regions `pinned` and installs the
/// tables `wanted` (service, table size): at least [`pool_buckets_for`]
/// of the wanted sizes, and enough that every wanted table without a pinned
/// region of its size (a new service, a new size) gets a new region while
/// all pinned regions are still in use (an install takes its new regions,
/// largest first, before it frees any old one, and a freed region waits
/// out its quarantine). Found by placing them as the install will, on a
/// copy of the pinned pool grown a chunk at a time: the old regions lie
/// where an earlier daemon put them, so a sum could be short. A pinned
/// region that cannot be reserved (adoption installs that table anew) or
/// a size no region can have is left out of the pinned ones.
pub fn pool_buckets_at_start<K: Clone + Eq + Ord>(
    pinned_pool: u32,
    pinned: &[(K, Region)],
    wanted: &[(K, u32)],
) -> u32 {
    let least = pool_buckets_for(wanted.iter().map(|w| w.1));
    let mut pool: Pool<K> = Pool::new(pinned_pool);
    let mut kept = BTreeMap::new();
    for (k, r) in pinned {
        if pool.reserve(*r, k.clone()).is_ok() {
            kept.insert(k.clone(), r.size);
        }
    }
    let mut new: Vec<&(K, u32)> = wanted
        .iter()
        .filter(|(k, s)| kept.get(k) != Some(s) && order_of(*s).is_some())
        .collect();
    new.sort_by_key(|(_, s)| std::cmp::Reverse(*s));
    // Fresh chunks hold any such list (powers of two, largest first), so
    // this ends within sum / CHUNK_BUCKETS + 1 steps.
    let cap = u32::MAX / CHUNK_BUCKETS * CHUNK_BUCKETS;
    let mut buckets = pool.buckets();
    loop {
        let mut p = pool.clone();
        p.grow(buckets);
        if buckets >= cap || new.iter().all(|(k, s)| p.alloc(*s, k.clone(), 0).is_ok()) {
            return buckets.max(least);
        }
        buckets += CHUNK_BUCKETS;
    }
}

/// A region of the pool: `size` buckets from `base`, `size` a power of two
/// and `base` a multiple of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Region {
    /// First bucket (pool index).
    pub base: u32,
    /// Buckets (a power of two, at most [`CHUNK_BUCKETS`]).
    pub size: u32,
}

impl Region {
    /// One past the last bucket.
    pub fn end(&self) -> u64 {
        self.base as u64 + self.size as u64
    }
}

/// Buckets by state, for messages and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// The pool's size.
    pub buckets: u32,
    /// In regions in use.
    pub used: u32,
    /// In released regions still in quarantine.
    pub quarantined: u32,
    /// Free.
    pub free: u32,
    /// The largest free region.
    pub largest_free: u32,
}

/// Why a region could not be given out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// The size is not a power of two of at most [`CHUNK_BUCKETS`].
    BadSize(u32),
    /// No free block is large enough.
    Full {
        /// The size asked for.
        size: u32,
        /// The pool at that moment.
        usage: Usage,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::BadSize(s) => write!(
                f,
                "a table of {s} buckets does not fit a pool region (a power of two up to {CHUNK_BUCKETS})"
            ),
            AllocError::Full { size, usage: u } => write!(
                f,
                "the bucket pool has no free region of {size} buckets: {} buckets in all, {} in tables, {} released less than {} ms ago, {} free (largest free region {})",
                u.buckets, u.used, u.quarantined, QUARANTINE_MS, u.free, u.largest_free
            ),
        }
    }
}

impl std::error::Error for AllocError {}

#[derive(Clone, Debug)]
struct Quarantined<K> {
    region: Region,
    owner: K,
    released_ms: u64,
}

/// The regions of a bucket pool, each region owned by a `K` (a service).
#[derive(Clone, Debug)]
pub struct Pool<K> {
    buckets: u32,
    /// Free blocks by order (size 2^order), by base.
    free: Vec<BTreeSet<u32>>,
    /// Regions in use, by base: size and owner.
    live: BTreeMap<u32, (u32, K)>,
    quarantine: Vec<Quarantined<K>>,
}

fn order_of(size: u32) -> Option<usize> {
    (size.is_power_of_two() && size <= CHUNK_BUCKETS).then(|| size.trailing_zeros() as usize)
}

impl<K: Clone + Eq> Pool<K> {
    /// An empty pool of `buckets` (rounded down to whole chunks).
    pub fn new(buckets: u32) -> Self {
        let mut p = Pool {
            buckets: 0,
            free: vec![BTreeSet::new(); ORDERS],
            live: BTreeMap::new(),
            quarantine: Vec::new(),
        };
        p.grow(buckets);
        p
    }

    /// The pool's size in buckets.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// Add free chunks up to `buckets` (rounded down to whole chunks; a
    /// smaller size changes nothing): the pool copied into the prefix of a
    /// larger array keeps every region where it is.
    pub fn grow(&mut self, buckets: u32) {
        let buckets = buckets / CHUNK_BUCKETS * CHUNK_BUCKETS;
        let mut base = self.buckets;
        while base < buckets {
            self.free[ORDERS - 1].insert(base);
            base += CHUNK_BUCKETS;
        }
        self.buckets = self.buckets.max(buckets);
    }

    /// Give released regions whose quarantine is over (at `now_ms`) back to
    /// the free blocks ([`Pool::alloc`] does it first; call it before
    /// [`Pool::usage`] for a usage as of `now_ms`).
    pub fn expire(&mut self, now_ms: u64) {
        let mut i = 0;
        while i < self.quarantine.len() {
            if now_ms >= self.quarantine[i].released_ms + QUARANTINE_MS {
                let q = self.quarantine.swap_remove(i);
                self.free_block(q.region.base, q.region.size.trailing_zeros() as usize);
            } else {
                i += 1;
            }
        }
    }

    fn free_block(&mut self, mut base: u32, mut order: usize) {
        while order < ORDERS - 1 {
            let buddy = base ^ (1 << order);
            if !self.free[order].remove(&buddy) {
                break;
            }
            base = base.min(buddy);
            order += 1;
        }
        self.free[order].insert(base);
    }

    /// A region of `size` buckets for `owner` at `now_ms`: a region `owner`
    /// released in quarantine, if one has this size; else the smallest free
    /// block that fits (lowest address first), halved down to `size`. Fails
    /// only if every aligned block of `size` buckets holds a region smaller
    /// than `size` or lies in a larger one (see the module's bound).
    pub fn alloc(&mut self, size: u32, owner: K, now_ms: u64) -> Result<Region, AllocError> {
        let order = order_of(size).ok_or(AllocError::BadSize(size))?;
        self.expire(now_ms);
        if let Some(i) = self
            .quarantine
            .iter()
            .position(|q| q.owner == owner && q.region.size == size)
        {
            let q = self.quarantine.swap_remove(i);
            self.live.insert(q.region.base, (size, owner));
            return Ok(q.region);
        }
        let Some(mut o) = (order..ORDERS).find(|&o| !self.free[o].is_empty()) else {
            return Err(AllocError::Full {
                size,
                usage: self.usage(),
            });
        };
        let base = self.free[o].pop_first().expect("non-empty");
        while o > order {
            o -= 1;
            self.free[o].insert(base + (1 << o));
        }
        self.live.insert(base, (size, owner));
        Ok(Region { base, size })
    }

    /// Release the region at `region.base` (in use) at `now_ms`: it waits
    /// out [`QUARANTINE_MS`] before another owner gets it. A region not in
    /// use is ignored.
    pub fn release(&mut self, region: Region, now_ms: u64) {
        if let Some((size, owner)) = self.live.remove(&region.base) {
            self.quarantine.push(Quarantined {
                region: Region {
                    base: region.base,
                    size,
                },
                owner,
                released_ms: now_ms,
            });
        }
    }

    /// Mark `region` as in use by `owner` (a region an earlier daemon gave
    /// out, found in the adopted maps). Fails if it is not a valid region,
    /// lies beyond the pool or overlaps a region in use or in quarantine.
    pub fn reserve(&mut self, region: Region, owner: K) -> Result<(), String> {
        let order = order_of(region.size)
            .ok_or_else(|| format!("{} buckets is not a region size", region.size))?;
        if region.base % region.size != 0 || region.end() > self.buckets as u64 {
            return Err(format!(
                "region {}+{} is not aligned or lies beyond the pool of {} buckets",
                region.base, region.size, self.buckets
            ));
        }
        for o in order..ORDERS {
            let block = region.base & !((1u32 << o) - 1);
            if self.free[o].remove(&block) {
                let (mut block, mut o) = (block, o);
                while o > order {
                    o -= 1;
                    if region.base & (1 << o) != 0 {
                        self.free[o].insert(block);
                        block += 1 << o;
                    } else {
                        self.free[o].insert(block + (1 << o));
                    }
                }
                self.live.insert(region.base, (region.size, owner));
                return Ok(());
            }
        }
        Err(format!(
            "region {}+{} overlaps another table's",
            region.base, region.size
        ))
    }

    /// The owner of the region in use at `base`.
    pub fn owner(&self, base: u32) -> Option<&K> {
        self.live.get(&base).map(|(_, k)| k)
    }

    /// Regions in use, by base.
    pub fn regions(&self) -> impl Iterator<Item = (Region, &K)> + '_ {
        self.live
            .iter()
            .map(|(&base, (size, k))| (Region { base, size: *size }, k))
    }

    /// Buckets in use, in quarantine and free.
    pub fn usage(&self) -> Usage {
        let used = self.live.values().map(|(s, _)| *s).sum();
        let quarantined = self.quarantine.iter().map(|q| q.region.size).sum();
        let mut free = 0;
        let mut largest_free = 0;
        for (o, set) in self.free.iter().enumerate() {
            free += set.len() as u32 * (1 << o);
            if !set.is_empty() {
                largest_free = 1 << o;
            }
        }
        Usage {
            buckets: self.buckets,
            used,
            quarantined,
            free,
            largest_free,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every bucket is in exactly one of: a live region, a quarantined
    /// region, a free block; blocks are aligned and within the pool.
    fn check_partition(p: &Pool<u32>) {
        // Blocks sorted by base must tile 0 .. buckets exactly.
        let mut blocks: Vec<(u32, u32)> = Vec::new();
        for (&base, (size, _)) in &p.live {
            blocks.push((base, *size));
        }
        for q in &p.quarantine {
            blocks.push((q.region.base, q.region.size));
        }
        for (o, set) in p.free.iter().enumerate() {
            for &base in set {
                blocks.push((base, 1 << o));
            }
        }
        blocks.sort();
        let mut next = 0u64;
        for (base, size) in blocks {
            assert_eq!(base % size, 0, "block {base}+{size} aligned");
            assert_eq!(
                base as u64, next,
                "blocks tile the pool (gap or overlap at {base})"
            );
            next = base as u64 + size as u64;
        }
        assert_eq!(next, p.buckets as u64, "every bucket accounted for");
        let u = p.usage();
        assert_eq!(u.used + u.quarantined + u.free, u.buckets);
    }

    #[test]
    fn sizing_covers_all_tables_and_one_largest() {
        assert_eq!(pool_buckets_for([]), CHUNK_BUCKETS);
        assert_eq!(pool_buckets_for([4096; 16]), 2 * CHUNK_BUCKETS);
        assert_eq!(pool_buckets_for([4096; 15]), CHUNK_BUCKETS);
        // 1,000 x 4,096: 4,096,000 + 4,096 -> 63 chunks (4,128,768 buckets)
        assert_eq!(pool_buckets_for([4096; 1000]), 63 * CHUNK_BUCKETS);
        assert_eq!(pool_buckets_for([65536, 16]), 3 * CHUNK_BUCKETS);
    }

    /// Whether a pool of `buckets` holding `pinned` gives each of `new` a
    /// region, largest first, as an install does.
    fn start_fits(buckets: u32, pinned: &[(u32, Region)], new: &[(u32, u32)]) -> bool {
        let mut p: Pool<u32> = Pool::new(buckets);
        for (k, r) in pinned {
            p.reserve(*r, *k).unwrap();
        }
        let mut new = new.to_vec();
        new.sort_by_key(|(_, s)| std::cmp::Reverse(*s));
        new.iter().all(|(k, s)| p.alloc(*s, *k, 0).is_ok())
    }

    #[test]
    fn a_start_that_resizes_several_tables_has_room_for_old_and_new() {
        // Three tables of 16,384 pinned in one chunk, all resized to 32,768
        // at a restart: the old regions stay in use while the new ones are
        // taken, 147,456 buckets in all. Tables plus one largest is 131,072.
        let r = |i: u32| Region {
            base: i * 16384,
            size: 16384,
        };
        let pinned = [(0, r(0)), (1, r(1)), (2, r(2))];
        let wanted = [(0, 32768), (1, 32768), (2, 32768)];
        assert_eq!(pool_buckets_for(wanted.map(|w| w.1)), 2 * CHUNK_BUCKETS);
        assert!(!start_fits(2 * CHUNK_BUCKETS, &pinned, &wanted));
        let n = pool_buckets_at_start(CHUNK_BUCKETS, &pinned, &wanted);
        assert_eq!(n, 3 * CHUNK_BUCKETS);
        assert!(start_fits(n, &pinned, &wanted));
        // Sizes kept: nothing new, the usual sizing.
        let same = [(0, 16384), (1, 16384), (2, 16384)];
        assert_eq!(
            pool_buckets_at_start(CHUNK_BUCKETS, &pinned, &same),
            CHUNK_BUCKETS
        );
        // No pins: the usual sizing too.
        assert_eq!(pool_buckets_at_start(0, &[], &wanted), 2 * CHUNK_BUCKETS);
        // A larger pinned pool keeps its size when it has room.
        assert_eq!(
            pool_buckets_at_start(4 * CHUNK_BUCKETS, &pinned, &wanted),
            4 * CHUNK_BUCKETS
        );
    }

    #[test]
    fn tables_sized_for_fit_in_any_order_and_one_resize_more() {
        // Sizes in an awkward order: descending-size packing is not needed
        // for the sized pool to hold them (buddy allocation without frees
        // leaves at most one free block per order).
        let sizes = [16u32, 65536, 1024, 4096, 16, 32768, 4096, 256, 65536, 2048];
        let mut p: Pool<u32> = Pool::new(pool_buckets_for(sizes));
        let regions: Vec<Region> = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| p.alloc(s, i as u32, 0).unwrap())
            .collect();
        check_partition(&p);
        // The largest table can take a new region while its old one is in use.
        p.alloc(65536, 1, 0).unwrap();
        p.release(regions[1], 0);
        check_partition(&p);
    }

    #[test]
    fn quarantine_keeps_a_released_region_from_others_for_a_second() {
        let mut p: Pool<u32> = Pool::new(CHUNK_BUCKETS);
        let a = p.alloc(CHUNK_BUCKETS, 1, 0).unwrap();
        p.release(a, 10_000);
        let full = p.alloc(16, 2, 10_999).unwrap_err();
        assert!(
            matches!(full, AllocError::Full { size: 16, usage } if usage.quarantined == CHUNK_BUCKETS),
            "{full:?}"
        );
        assert!(full.to_string().contains("released less than 1000 ms ago"));
        // Its own service takes it back at once (same size only).
        assert!(p.alloc(1024, 1, 10_001).is_err());
        assert_eq!(p.alloc(CHUNK_BUCKETS, 1, 10_001).unwrap(), a);
        p.release(a, 20_000);
        assert_eq!(
            p.alloc(16, 2, 21_000).unwrap(),
            Region { base: 0, size: 16 }
        );
        check_partition(&p);
    }

    #[test]
    fn freed_buddies_merge_back_into_whole_chunks() {
        let mut p: Pool<u32> = Pool::new(2 * CHUNK_BUCKETS);
        let rs: Vec<Region> = (0..64).map(|i| p.alloc(2048, i, 0).unwrap()).collect();
        assert_eq!(p.usage().free, 0);
        for r in rs {
            p.release(r, 0);
        }
        assert!(p.alloc(16, 99, 999).is_err(), "still in quarantine");
        let big = p.alloc(CHUNK_BUCKETS, 99, 1000).unwrap();
        assert_eq!(big.size, CHUNK_BUCKETS);
        assert_eq!(p.usage().largest_free, CHUNK_BUCKETS);
        check_partition(&p);
    }

    #[test]
    fn reserve_rebuilds_an_adopted_pool_and_refuses_overlaps() {
        let mut p: Pool<u32> = Pool::new(2 * CHUNK_BUCKETS);
        p.reserve(
            Region {
                base: 4096,
                size: 4096,
            },
            1,
        )
        .unwrap();
        p.reserve(
            Region {
                base: 65536 + 512,
                size: 512,
            },
            2,
        )
        .unwrap();
        check_partition(&p);
        assert!(p
            .reserve(
                Region {
                    base: 4096,
                    size: 1024
                },
                3
            )
            .is_err());
        assert!(p
            .reserve(
                Region {
                    base: 0,
                    size: 8192
                },
                3
            )
            .is_err());
        assert!(p
            .reserve(
                Region {
                    base: 100,
                    size: 64
                },
                3
            )
            .is_err());
        assert!(p
            .reserve(
                Region {
                    base: 131072,
                    size: 16
                },
                3
            )
            .is_err());
        assert_eq!(p.owner(4096), Some(&1));
        // New regions avoid the reserved ones.
        for i in 0..30 {
            let r = p.alloc(4096, 10 + i, 0).unwrap();
            assert!(r.end() <= 4096 || r.base >= 8192);
        }
        check_partition(&p);
    }

    #[test]
    fn growth_keeps_regions_and_adds_free_chunks() {
        let mut p: Pool<u32> = Pool::new(CHUNK_BUCKETS);
        let a = p.alloc(32768, 1, 0).unwrap();
        p.grow(3 * CHUNK_BUCKETS);
        assert_eq!(p.buckets(), 3 * CHUNK_BUCKETS);
        assert_eq!(p.owner(a.base), Some(&1));
        assert_eq!(p.usage().free, 3 * CHUNK_BUCKETS - 32768);
        p.grow(CHUNK_BUCKETS);
        assert_eq!(p.buckets(), 3 * CHUNK_BUCKETS, "never shrinks");
        check_partition(&p);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let mut p: Pool<u32> = Pool::new(CHUNK_BUCKETS);
        assert_eq!(p.alloc(3000, 1, 0), Err(AllocError::BadSize(3000)));
        assert_eq!(
            p.alloc(2 * CHUNK_BUCKETS, 1, 0),
            Err(AllocError::BadSize(2 * CHUNK_BUCKETS))
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Alloc(u32),
        Release(usize),
        Wait(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (4u32..=16).prop_map(|o| Op::Alloc(1 << o)),
            3 => any::<usize>().prop_map(Op::Release),
            1 => (0u64..1500).prop_map(Op::Wait),
        ]
    }

    proptest! {

        /// Whatever regions an earlier daemon left and whatever the new
        /// config keeps, resizes or adds: the start's pool holds the
        /// pinned regions and every new one, at least the usual sizing,
        /// and a chunk less would not do (unless the usual sizing or the
        /// pinned pool decided).
        #[test]
        fn a_start_pool_holds_pinned_and_new_regions(
            old in proptest::collection::vec(0u32..=16, 0..24),
            change in proptest::collection::vec((any::<bool>(), 0u32..=16), 0..24),
            added in proptest::collection::vec(0u32..=16, 0..6),
        ) {
            let old: Vec<u32> = old.iter().map(|&o| 1 << o).collect();
            let mut p: Pool<u32> = Pool::new(pool_buckets_for(old.iter().copied()));
            let pinned: Vec<(u32, Region)> = old
                .iter()
                .enumerate()
                .map(|(i, &s)| (i as u32, p.alloc(s, i as u32, 0).unwrap()))
                .collect();
            let pinned_pool = p.buckets();
            let mut wanted: Vec<(u32, u32)> = old
                .iter()
                .zip(change.iter().chain(std::iter::repeat(&(false, 0))))
                .enumerate()
                .map(|(i, (&s, &(resize, o)))| (i as u32, if resize { 1 << o } else { s }))
                .collect();
            wanted.extend(added.iter().enumerate().map(|(i, &o)| (1000 + i as u32, 1 << o)));
            let new: Vec<(u32, u32)> = wanted
                .iter()
                .filter(|(k, s)| old.get(*k as usize) != Some(s))
                .copied()
                .collect();
            let n = pool_buckets_at_start(pinned_pool, &pinned, &wanted);
            prop_assert!(n >= pool_buckets_for(wanted.iter().map(|w| w.1)));
            prop_assert!(start_fits(n, &pinned, &new));
            if n > pool_buckets_for(wanted.iter().map(|w| w.1)) && n > pinned_pool {
                prop_assert!(!start_fits(n - CHUNK_BUCKETS, &pinned, &new));
            }
        }
        /// Random allocations, releases and waits: regions never overlap,
        /// quarantined regions go to no one else, and a failed request of
        /// `s` buckets leaves fewer than `s` free buckets per region smaller
        /// than `s` (the fragmentation bound).
        #[test]
        fn no_overlap_quarantine_and_fragmentation_bound(ops in proptest::collection::vec(op(), 1..400)) {
            let mut p: Pool<u32> = Pool::new(4 * CHUNK_BUCKETS);
            let mut live: Vec<(Region, u32)> = Vec::new();
            let mut released: Vec<(Region, u32, u64)> = Vec::new();
            let mut now = 0u64;
            let mut next_owner = 0u32;
            for op in ops {
                match op {
                    Op::Alloc(s) => {
                        next_owner += 1;
                        let before = p.clone();
                        match p.alloc(s, next_owner, now) {
                            Ok(r) => {
                                prop_assert_eq!(r.size, s);
                                for (q, _, t) in &released {
                                    let overlaps = r.base < q.base + q.size && q.base < r.base + r.size;
                                    prop_assert!(!(overlaps && now < t + QUARANTINE_MS),
                                        "region {:?} given out {} ms after {:?} was released", r, now - t, q);
                                }
                                live.push((r, next_owner));
                            }
                            Err(AllocError::Full { usage, .. }) => {
                                let mut after_expiry = before.clone();
                                after_expiry.expire(now);
                                let small = after_expiry.live.values().filter(|(z, _)| *z < s).count()
                                    + after_expiry.quarantine.iter().filter(|q| q.region.size < s).count();
                                prop_assert!((usage.free as u64) < s as u64 * small.max(1) as u64,
                                    "{} free buckets, {} regions smaller than {}", usage.free, small, s);
                            }
                            Err(e) => prop_assert!(false, "{e}"),
                        }
                    }
                    Op::Release(i) if !live.is_empty() => {
                        let (r, o) = live.swap_remove(i % live.len());
                        p.release(r, now);
                        released.push((r, o, now));
                    }
                    Op::Release(_) => {}
                    Op::Wait(ms) => now += ms,
                }
                check_partition(&p);
            }
        }
    }
}
