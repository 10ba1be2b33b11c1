//! Bucket tables, Beamer style (NSDI'18) with longer memories: each bucket
//! has a first hop (owner, gets new connections) and remembers its last
//! previous owners, newest first (the hop list second chance walks). Pure
//! logic: no BPF, no sockets, no clock (callers pass the time).
//!
//! Rules (docs/design.md "Tables and pacing"):
//! - every eligible backend gets a share of buckets proportional to its
//!   weight, within one bucket of exact (largest-remainder apportionment,
//!   ties broken by address so every node computes the same table);
//! - a change moves as few buckets as needed, and a moved bucket keeps its
//!   old first hop as its newest previous owner; a bucket remembers at most
//!   [`Table::previous_owners`] distinct previous owners (the chain), and
//!   forgets the last one listed when a move would exceed that;
//! - chains are trimmed: backends that may no longer be hops (offline, gone)
//!   leave every chain, a backend that becomes first hop again leaves the
//!   previous owners, and previous owners known down are listed after the
//!   others (so a dead machine never stands in front of a live one);
//! - which buckets move: (1) buckets one of whose previous owners must gain
//!   (a swap back: the chain only turns, nobody is forgotten); (2) buckets
//!   whose chain has room (the move forgets nobody), then the rest, each
//!   least recently moved first; (3) a free bucket goes to a previous owner
//!   that must gain, else next to the gaining backend's existing ranges, so
//!   ranges stay contiguous;
//! - moves forced by failure (`forced_out` owners, or no owner) are
//!   immediate; voluntary moves (weight changes, recoveries, drains) obey
//!   [`StepLimits`]: a budget of buckets per step and a minimum bucket age.
//!
//! The result is a deterministic function of the previous table, the targets
//! and the time: the same sequence of inputs gives the same table on every
//! node and every run.
//!
//! Storage: per table a list of the backends its chains name, and per bucket
//! four 16-bit indexes into it (first hop, then previous owners) and a 32-bit
//! move time: 12 bytes per bucket, in shared immutable chunks of 1,024
//! buckets: a table made from another (a rebalance) shares the chunks in
//! which no bucket changed, and a rebalance works on flat vectors that each
//! thread reuses (`Scratch`).

mod chunks;
#[cfg(test)]
mod sim;
#[cfg(test)]
pub(crate) mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr};

use chunks::Chunks;

/// Hops a bucket lists at most: its first hop and up to three previous
/// owners (`NILB_MAX_OWNERS`, the data plane's `hops[]`).
pub const MAX_OWNERS: usize = 4;

/// Previous owners a bucket remembers at most.
pub const MAX_PREVIOUS: usize = MAX_OWNERS - 1;

/// Address that stands for "no hop" in a [`Bucket`] (never a backend's: the
/// configuration rejects 0.0.0.0/8, and an IPv6 cluster lists no IPv4
/// address).
const NO_HOP: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// One bucket's hops by address (a copy: the table stores indexes): the
/// first hop, then the previous owners, newest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bucket {
    hops: [IpAddr; MAX_OWNERS],
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            hops: [NO_HOP; MAX_OWNERS],
        }
    }
}

impl Bucket {
    /// A bucket with this first hop (`None`: packets are dropped) and these
    /// previous owners, newest first (at most [`MAX_PREVIOUS`] are kept;
    /// unspecified addresses are skipped).
    pub fn new(first: Option<IpAddr>, previous: impl IntoIterator<Item = IpAddr>) -> Bucket {
        let mut b = Bucket::default();
        b.hops[0] = first.unwrap_or(NO_HOP);
        for (slot, p) in b.hops[1..]
            .iter_mut()
            .zip(previous.into_iter().filter(|p| *p != NO_HOP))
        {
            *slot = p;
        }
        b
    }

    /// Owner: gets new connections. `None`: packets are dropped and counted.
    pub fn first(&self) -> Option<IpAddr> {
        (self.hops[0] != NO_HOP).then_some(self.hops[0])
    }

    /// The newest previous owner: gets packets the first hop does not know.
    pub fn second(&self) -> Option<IpAddr> {
        self.previous().next()
    }

    /// Previous owners, newest first (those known down after the others).
    pub fn previous(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.hops[1..].iter().copied().take_while(|h| *h != NO_HOP)
    }

    /// Every hop listed: the first hop (if any), then the previous owners.
    pub fn hops(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.first().into_iter().chain(self.previous())
    }
}

/// A backend eligible as first hop, with its weight (> 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Backend address.
    pub dip: IpAddr,
    /// Relative weight; 0 means "not a first hop".
    pub weight: u32,
}

/// Limits on one step of voluntary moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepLimits {
    /// Voluntary moves (swaps included) allowed in this step.
    pub max_moves: usize,
    /// A bucket that moved less than this long ago (ms) is not moved
    /// voluntarily.
    pub min_age_ms: u64,
}

impl StepLimits {
    /// No limit: reach the targets in one step.
    pub const NONE: StepLimits = StepLimits {
        max_moves: usize::MAX,
        min_age_ms: 0,
    };
}

fn every(_: IpAddr) -> bool {
    true
}

fn nobody(_: IpAddr) -> bool {
    false
}

/// What a rebalance knows about the backends its chains name.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// May stay (or become) a previous owner: false for backends that are
    /// offline or gone, which leave every chain.
    pub keep: &'a dyn Fn(IpAddr) -> bool,
    /// Must lose its buckets now (failed health, offline). Owners that are
    /// neither targets nor forced out (drained, being removed) and owners
    /// above their quota give buckets away voluntarily.
    pub forced_out: &'a dyn Fn(IpAddr) -> bool,
    /// Known down: listed after the previous owners that are not, and the
    /// first forgotten when a chain is full.
    pub down: &'a dyn Fn(IpAddr) -> bool,
}

impl Default for Rules<'static> {
    /// Everybody may be a previous owner, nobody is forced out or down.
    fn default() -> Self {
        Rules {
            keep: &every,
            forced_out: &nobody,
            down: &nobody,
        }
    }
}

/// What a rebalance did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moves {
    /// Buckets whose first hop changed.
    pub moved: usize,
    /// Of those, buckets whose new first hop was one of their previous
    /// owners (a swap back: nobody is forgotten).
    pub swapped: usize,
    /// Of those, moves forced by failure (owner gone, down or offline).
    pub forced: usize,
    /// Buckets that still have to move voluntarily to reach the targets.
    pub pending: usize,
    /// Previous owners forgotten because a moved bucket's chain was full:
    /// connections still served by them lose their path.
    pub forgotten: usize,
}

/// One backend a table's chains name, with what it is in them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Host {
    dip: IpAddr,
    /// Buckets it is first hop of.
    owned: u32,
    /// Buckets it is a previous owner of.
    listed: u32,
    /// Buckets it is the newest previous owner (second hop) of.
    second: u32,
}

/// A bucket's chain: indexes into the table's hosts, 1-based (0 = none):
/// first hop, then the previous owners, newest first, 0-terminated.
type Chain = [u16; MAX_OWNERS];

/// A service's forwarding table: `size` buckets (a power of two), per bucket
/// its chain of owners and when (ms, caller's clock) it last changed first
/// hop.
#[derive(Clone, Debug)]
pub struct Table {
    /// Previous owners a bucket remembers at most (0..=[`MAX_PREVIOUS`]).
    previous: u8,
    /// The backends the chains name (chain entry k is `hosts[k - 1]`).
    hosts: Vec<Host>,
    /// Per bucket (shared with the tables this one was made from where
    /// they agree, see [`chunks`]).
    chains: Chunks<Chain>,
    /// Move times: 0 never, else `epoch_ms + v - 1`.
    moved: Chunks<u32>,
    /// Origin of the move times.
    epoch_ms: u64,
}

impl PartialEq for Table {
    /// Same size, memory, hops and move times (however they are stored).
    fn eq(&self, other: &Table) -> bool {
        self.previous == other.previous
            && self.chains.len() == other.chains.len()
            && self.changed_from(other).is_empty()
    }
}

impl Eq for Table {}

/// Apportion `size` buckets to `targets` by weight (largest remainder).
/// Returns one quota per target, in the same order; quotas sum to `size`
/// unless every weight is 0 (then all are 0). Each quota is within one bucket
/// of `size * weight / total`. Ties go to the lower address.
pub fn quotas(size: u32, targets: &[Target]) -> Vec<u32> {
    let total: u64 = targets.iter().map(|t| t.weight as u64).sum();
    if total == 0 {
        return vec![0; targets.len()];
    }
    let size = size as u64;
    let mut q: Vec<u32> = targets
        .iter()
        .map(|t| (size * t.weight as u64 / total) as u32)
        .collect();
    let given: u64 = q.iter().map(|&x| x as u64).sum();
    let mut order: Vec<usize> = (0..targets.len()).collect();
    order.sort_by_key(|&i| {
        (
            Reverse(size * targets[i].weight as u64 % total),
            targets[i].dip,
        )
    });
    for &i in order.iter().take((size - given) as usize) {
        q[i] += 1;
    }
    q
}

/// Like [`quotas`], but target `i` gets at most `caps[i]` buckets (None: no
/// cap); what a capped target cannot take is apportioned over the others by
/// weight ("water filling": repeat until no quota exceeds its cap). The
/// quotas sum to `size` unless every target is capped (then to the sum of
/// the caps, when that is smaller). Used for backends that may keep what
/// they own but must not gain (health unknown).
pub fn capped_quotas(size: u32, targets: &[Target], caps: &[Option<u32>]) -> Vec<u32> {
    assert_eq!(targets.len(), caps.len(), "one cap per target");
    let mut fixed: Vec<Option<u32>> = vec![None; targets.len()];
    loop {
        let open: Vec<usize> = (0..targets.len()).filter(|&i| fixed[i].is_none()).collect();
        let taken: u32 = fixed.iter().flatten().sum();
        let rest = size.saturating_sub(taken);
        let sub: Vec<Target> = open.iter().map(|&i| targets[i]).collect();
        let q = quotas(rest, &sub);
        let mut capped = false;
        for (j, &i) in open.iter().enumerate() {
            if let Some(c) = caps[i] {
                if q[j] > c {
                    fixed[i] = Some(c);
                    capped = true;
                }
            }
        }
        if !capped {
            let mut out: Vec<u32> = fixed.iter().map(|f| f.unwrap_or(0)).collect();
            for (j, &i) in open.iter().enumerate() {
                out[i] = q[j];
            }
            return out;
        }
    }
}

/// Split `budget` over owners in proportion to what each must give
/// (largest remainder, ties to the lower address).
fn share_budget(budget: usize, excess: &[(IpAddr, usize)]) -> Vec<usize> {
    let total: usize = excess.iter().map(|e| e.1).sum();
    if budget >= total {
        return excess.iter().map(|e| e.1).collect();
    }
    let mut r: Vec<usize> = excess
        .iter()
        .map(|e| (budget as u128 * e.1 as u128 / total as u128) as usize)
        .collect();
    let given: usize = r.iter().sum();
    let mut order: Vec<usize> = (0..excess.len()).collect();
    order.sort_by_key(|&i| {
        (
            Reverse((budget as u128 * excess[i].1 as u128 % total as u128) as usize),
            excess[i].0,
        )
    });
    for &i in order.iter().take(budget - given) {
        r[i] += 1;
    }
    r
}

/// Number of previous owners a chain lists.
fn listed(c: &Chain) -> usize {
    c[1..].iter().take_while(|&&e| e != 0).count()
}

/// `c` with `first` as first hop and `candidates` (newest first) as
/// previous owners: entries that are 0, `first`, repeated, or not `keep`
/// are skipped, at most `max` are kept (returns how many others were
/// forgotten), then those known `down` go after the others (stable).
fn chain_of(
    first: u16,
    candidates: impl IntoIterator<Item = u16>,
    max: usize,
    keep: &[bool],
    down: &[bool],
) -> (Chain, usize) {
    let mut c: Chain = [0; MAX_OWNERS];
    c[0] = first;
    let mut n = 0;
    let mut forgotten = 0;
    for e in candidates {
        if e == 0 || e == first || !keep[e as usize] || c[1..1 + n].contains(&e) {
            continue;
        }
        if n == max {
            forgotten += 1;
            continue;
        }
        c[1 + n] = e;
        n += 1;
    }
    if c[1..1 + n].iter().any(|&e| down[e as usize]) {
        let mut sorted: Chain = [0; MAX_OWNERS];
        sorted[0] = first;
        let ups = c[1..1 + n].iter().filter(|&&e| !down[e as usize]);
        let downs = c[1..1 + n].iter().filter(|&&e| down[e as usize]);
        for (slot, &e) in sorted[1..].iter_mut().zip(ups.chain(downs)) {
            *slot = e;
        }
        c = sorted;
    }
    (c, forgotten)
}

/// Per rebalance: what each chain entry (host index, 1-based) is.
struct Roles {
    /// Target index of the entry (None: not a target).
    target: Vec<Option<usize>>,
    keep: Vec<bool>,
    forced: Vec<bool>,
    down: Vec<bool>,
}

impl Table {
    /// A table of `size` buckets with no hops, remembering up to
    /// [`MAX_PREVIOUS`] previous owners per bucket (see
    /// [`Table::with_previous_owners`]).
    pub fn empty(size: u32) -> Table {
        assert!(size.is_power_of_two(), "table size must be a power of two");
        Table {
            previous: MAX_PREVIOUS as u8,
            hosts: Vec::new(),
            chains: Chunks::freeze(&vec![[0; MAX_OWNERS]; size as usize], None),
            moved: Chunks::freeze(&vec![0; size as usize], None),
            epoch_ms: 0,
        }
    }

    /// A table with these buckets and move times, remembering up to
    /// `previous` previous owners (adopted from a running data plane, which
    /// keeps each bucket's hops and last move). Chains are cleaned as every
    /// table keeps them: repeated owners and the first hop are dropped from
    /// the previous owners, and at most `previous` of them are kept (the
    /// newest).
    pub fn adopt(buckets: Vec<Bucket>, moved_at: Vec<Option<u64>>, previous: usize) -> Table {
        assert!(
            buckets.len().is_power_of_two() && moved_at.len() == buckets.len(),
            "table size must be a power of two"
        );
        let previous = previous.min(MAX_PREVIOUS);
        let mut t = Table::empty(buckets.len() as u32).scratch();
        t.previous = previous as u8;
        let latest = moved_at.iter().flatten().max().copied().unwrap_or(0);
        t.epoch_ms = Self::epoch_for(latest);
        let mut index: BTreeMap<IpAddr, u16> = BTreeMap::new();
        for d in buckets.iter().flat_map(|b| b.hops()) {
            if let std::collections::btree_map::Entry::Vacant(v) = index.entry(d) {
                v.insert(t.intern(d));
            }
        }
        let n = t.hosts.len() + 1;
        let (keep, down) = (vec![true; n], vec![false; n]);
        for (i, b) in buckets.iter().enumerate() {
            let first = b.first().map_or(0, |d| index[&d]);
            let prev = b.previous().map(|d| index[&d]);
            t.chains[i] = chain_of(first, prev, previous, &keep, &down).0;
            if let Some(m) = moved_at[i] {
                t.moved[i] = t.encode(m);
            }
        }
        t.recount();
        t.freeze(None)
    }

    /// A fresh table for `targets`: contiguous ranges, larger shares first,
    /// no previous owners.
    pub fn build(size: u32, targets: &[Target]) -> Table {
        let rules = Rules {
            forced_out: &every,
            ..Rules::default()
        };
        Table::empty(size)
            .rebalance(targets, &rules, 0, StepLimits::NONE)
            .0
    }

    /// This table remembering at most `previous` previous owners per bucket
    /// (0..=[`MAX_PREVIOUS`]): chains longer than that forget their last
    /// entries.
    pub fn with_previous_owners(&self, previous: usize) -> Table {
        let previous = previous.min(MAX_PREVIOUS);
        let mut t = self.scratch();
        t.previous = previous as u8;
        for c in &mut t.chains {
            for e in c[1 + previous..].iter_mut() {
                *e = 0;
            }
        }
        t.recount();
        t.freeze(Some(self))
    }

    /// The same flows' hops in a table of `size` buckets. Growing keeps every
    /// flow on its hops (new bucket `i` copies old bucket `i & (old - 1)`);
    /// shrinking keeps old bucket `i` for new bucket `i`, so flows of the other
    /// folded buckets may move. Follow with [`Table::rebalance`] to restore
    /// the quotas.
    pub fn resized(&self, size: u32) -> Table {
        assert!(size.is_power_of_two(), "table size must be a power of two");
        let old_mask = self.chains.len() - 1;
        let mut t = Scratch {
            previous: self.previous,
            hosts: self.hosts.clone(),
            chains: (0..size as usize)
                .map(|i| self.chains[i & old_mask])
                .collect(),
            moved: (0..size as usize)
                .map(|i| self.moved[i & old_mask])
                .collect(),
            epoch_ms: self.epoch_ms,
        };
        t.recount();
        t.freeze(None)
    }

    /// This table in flat vectors, to change.
    fn scratch(&self) -> Scratch {
        let (mut chains, mut moved) = SPARE.with(|s| s.take());
        chains.clear();
        moved.clear();
        self.chains.extend_into(&mut chains);
        self.moved.extend_into(&mut moved);
        Scratch {
            previous: self.previous,
            hosts: self.hosts.clone(),
            chains,
            moved,
            epoch_ms: self.epoch_ms,
        }
    }

    /// Previous owners a bucket remembers at most.
    pub fn previous_owners(&self) -> usize {
        self.previous as usize
    }

    /// Number of buckets.
    pub fn size(&self) -> u32 {
        self.chains.len() as u32
    }

    fn addr(&self, e: u16) -> Option<IpAddr> {
        (e != 0).then(|| self.hosts[e as usize - 1].dip)
    }

    /// First hop of bucket `i` (None: its packets are dropped).
    pub fn first(&self, i: usize) -> Option<IpAddr> {
        self.addr(self.chains[i][0])
    }

    /// Number of backends the chains name: the entries of
    /// [`Table::entries`] run from 1 to this.
    pub fn entry_count(&self) -> usize {
        self.hosts.len()
    }

    /// Address of chain entry `e` (1..=[`Table::entry_count`]; None for 0,
    /// "no hop").
    pub fn entry_addr(&self, e: u16) -> Option<IpAddr> {
        self.addr(e)
    }

    /// Bucket `i`'s hops as entries (see [`Table::entry_addr`]): first hop
    /// (0: none), then the previous owners, newest first, ended by 0.
    /// What installs read: a table names a few backends, so resolving each
    /// entry once is cheaper than each hop of each bucket.
    pub fn entries(&self, i: usize) -> [u16; MAX_OWNERS] {
        self.chains[i]
    }

    /// Previous owners of bucket `i`, newest first (those known down after
    /// the others), at most [`Table::previous_owners`].
    pub fn previous(&self, i: usize) -> impl Iterator<Item = IpAddr> + '_ {
        self.chains[i][1..]
            .iter()
            .take_while(|&&e| e != 0)
            .map(|&e| self.hosts[e as usize - 1].dip)
    }

    /// The newest previous owner of bucket `i` (its second hop).
    pub fn second(&self, i: usize) -> Option<IpAddr> {
        self.addr(self.chains[i][1])
    }

    /// Bucket `i`'s hops by address.
    pub fn bucket(&self, i: usize) -> Bucket {
        Bucket::new(self.first(i), self.previous(i))
    }

    /// Every bucket's hops by address, index = `hash & (size - 1)` (a copy).
    pub fn buckets(&self) -> Vec<Bucket> {
        (0..self.chains.len()).map(|i| self.bucket(i)).collect()
    }

    /// When bucket `i` last changed first hop (None: never).
    pub fn moved_at(&self, i: usize) -> Option<u64> {
        self.decode(self.moved[i])
    }

    /// Buckets owned (as first hop) per backend.
    pub fn shares(&self) -> BTreeMap<IpAddr, u32> {
        self.count_by(|h| h.owned)
    }

    /// Buckets in which each backend is the second hop (the newest
    /// previous owner).
    pub fn second_shares(&self) -> BTreeMap<IpAddr, u32> {
        self.count_by(|h| h.second)
    }

    /// Buckets in which each backend is a previous owner (any position).
    pub fn previous_shares(&self) -> BTreeMap<IpAddr, u32> {
        self.count_by(|h| h.listed)
    }

    fn count_by(&self, f: impl Fn(&Host) -> u32) -> BTreeMap<IpAddr, u32> {
        self.hosts
            .iter()
            .filter(|h| f(h) > 0)
            .map(|h| (h.dip, f(h)))
            .collect()
    }

    /// Every backend some bucket lists (first hop or previous owner), in
    /// address order.
    pub fn hops(&self) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = self.hosts.iter().map(|h| h.dip).collect();
        v.sort();
        v
    }

    /// Buckets by the number of previous owners they list: element `k` is
    /// how many buckets list `k` previous owners.
    pub fn chain_lengths(&self) -> [u32; MAX_OWNERS] {
        let mut out = [0u32; MAX_OWNERS];
        for c in self.chains.iter() {
            out[listed(c)] += 1;
        }
        out
    }

    /// Bytes of memory this table holds (its vectors' capacity).
    pub fn heap_bytes(&self) -> usize {
        self.chains.heap_bytes()
            + self.moved.heap_bytes()
            + self.hosts.capacity() * std::mem::size_of::<Host>()
    }

    /// Number of maximal runs of consecutive buckets owned by `dip`.
    pub fn ranges(&self, dip: IpAddr) -> usize {
        let mut runs = 0;
        let mut prev = false;
        for i in 0..self.chains.len() {
            let mine = self.first(i) == Some(dip);
            if mine && !prev {
                runs += 1;
            }
            prev = mine;
        }
        runs
    }

    /// Indexes of the buckets whose hops or move time differ from `old`'s
    /// (every bucket if the sizes differ), ascending.
    pub fn changed_from(&self, old: &Table) -> Vec<u32> {
        if old.chains.len() != self.chains.len() {
            return (0..self.size()).collect();
        }
        // Old entry -> new entry, by address (u16::MAX: not in the new table).
        let mut map: Vec<u16> = vec![u16::MAX; old.hosts.len() + 1];
        map[0] = 0;
        let same_hosts = old.hosts.len() <= self.hosts.len()
            && old
                .hosts
                .iter()
                .zip(&self.hosts)
                .all(|(a, b)| a.dip == b.dip);
        if same_hosts {
            for (k, m) in map.iter_mut().enumerate() {
                *m = k as u16;
            }
        } else {
            let index: BTreeMap<IpAddr, u16> = self
                .hosts
                .iter()
                .enumerate()
                .map(|(k, h)| (h.dip, k as u16 + 1))
                .collect();
            for (k, h) in old.hosts.iter().enumerate() {
                if let Some(&e) = index.get(&h.dip) {
                    map[k + 1] = e;
                }
            }
        }
        let same_epoch = old.epoch_ms == self.epoch_ms;
        if same_hosts && same_epoch {
            // Entries and stored times mean the same in both tables: compare
            // them as they are, where the tables do not share them.
            let mut out = Vec::new();
            let parts = self.chains.parts().zip(self.moved.parts());
            let old_parts = old.chains.parts().zip(old.moved.parts());
            for (k, (((base, c), (_, m)), ((_, oc), (_, om)))) in parts.zip(old_parts).enumerate() {
                if self.chains.shares_part(&old.chains, k) && self.moved.shares_part(&old.moved, k)
                {
                    continue;
                }
                for j in 0..c.len() {
                    if c[j] != oc[j] || m[j] != om[j] {
                        out.push((base + j) as u32);
                    }
                }
            }
            return out;
        }
        let mut out = Vec::new();
        for (i, (a, b)) in old.chains.iter().zip(self.chains.iter()).enumerate() {
            let hops_differ = a.iter().zip(b).any(|(&x, &y)| map[x as usize] != y);
            let time_differs = if same_epoch {
                old.moved[i] != self.moved[i]
            } else {
                old.moved_at(i) != self.moved_at(i)
            };
            if hops_differ || time_differs {
                out.push(i as u32);
            }
        }
        out
    }

    /// Epoch for move times up to `latest`: 0 while they fit in 32 bits,
    /// else 2^31 ms (24.8 days) before `latest`.
    fn epoch_for(latest: u64) -> u64 {
        if latest < u32::MAX as u64 - 1 {
            0
        } else {
            latest - (1 << 31)
        }
    }

    fn decode(&self, v: u32) -> Option<u64> {
        (v != 0).then(|| self.epoch_ms + v as u64 - 1)
    }

    /// One step towards `targets` at time `now_ms`, with what `rules` says
    /// of the backends. Returns the new table and what moved;
    /// `Moves::pending` says whether more voluntary steps are needed. The
    /// new table shares this one's storage where they agree.
    pub fn rebalance(
        &self,
        targets: &[Target],
        rules: &Rules<'_>,
        now_ms: u64,
        limits: StepLimits,
    ) -> (Table, Moves) {
        let (new, moves) = self.scratch().rebalance(targets, rules, now_ms, limits);
        (new.freeze(Some(self)), moves)
    }
}

/// Largest scratch whose vectors a thread keeps for its next one (buckets;
/// 12 bytes each).
const SPARE_BUCKETS_MAX: usize = 1 << 16;

thread_local! {
    /// The vectors of the last scratch this thread froze.
    static SPARE: std::cell::Cell<(Vec<Chain>, Vec<u32>)> =
        const { std::cell::Cell::new((Vec::new(), Vec::new())) };
}

/// A table being changed: a [`Table`]'s data in flat vectors, which the
/// rebalance works on, frozen into a [`Table`] when done.
#[derive(Clone, Debug)]
struct Scratch {
    previous: u8,
    hosts: Vec<Host>,
    chains: Vec<Chain>,
    moved: Vec<u32>,
    epoch_ms: u64,
}

impl Scratch {
    /// The table, sharing the chunks of `base` (if given) that hold the
    /// same data.
    fn freeze(self, base: Option<&Table>) -> Table {
        let t = Table {
            previous: self.previous,
            hosts: self.hosts,
            chains: Chunks::freeze(&self.chains, base.map(|b| &b.chains)),
            moved: Chunks::freeze(&self.moved, base.map(|b| &b.moved)),
            epoch_ms: self.epoch_ms,
        };
        // The vectors serve this thread's next scratch (a reload steps
        // many tables of one size: no allocation, and they stay in cache).
        if self.moved.capacity() <= SPARE_BUCKETS_MAX {
            SPARE.with(|s| s.set((self.chains, self.moved)));
        }
        t
    }

    fn moved_at(&self, i: usize) -> Option<u64> {
        self.decode(self.moved[i])
    }

    /// Entry of `dip`, added to the hosts if new.
    fn intern(&mut self, dip: IpAddr) -> u16 {
        if let Some(k) = self.hosts.iter().position(|h| h.dip == dip) {
            return k as u16 + 1;
        }
        assert!(
            self.hosts.len() < u16::MAX as usize - 1,
            "more backends in one table than 16-bit indexes hold"
        );
        self.hosts.push(Host {
            dip,
            owned: 0,
            listed: 0,
            second: 0,
        });
        self.hosts.len() as u16
    }

    /// Recount what each host is; drop hosts no chain names (renumbering
    /// the chains).
    fn recount(&mut self) {
        for h in &mut self.hosts {
            h.owned = 0;
            h.listed = 0;
            h.second = 0;
        }
        for c in &self.chains {
            if c[0] != 0 {
                self.hosts[c[0] as usize - 1].owned += 1;
            }
            if c[1] != 0 {
                self.hosts[c[1] as usize - 1].second += 1;
            }
            for &e in c[1..].iter().take_while(|&&e| e != 0) {
                self.hosts[e as usize - 1].listed += 1;
            }
        }
        if self.hosts.iter().all(|h| h.owned + h.listed > 0) {
            return;
        }
        let mut map: Vec<u16> = vec![0; self.hosts.len() + 1];
        let mut kept = Vec::with_capacity(self.hosts.len());
        for (k, h) in self.hosts.iter().enumerate() {
            if h.owned + h.listed > 0 {
                kept.push(*h);
                map[k + 1] = kept.len() as u16;
            }
        }
        self.hosts = kept;
        for c in &mut self.chains {
            for e in c.iter_mut() {
                *e = map[*e as usize];
            }
        }
    }

    fn decode(&self, v: u32) -> Option<u64> {
        (v != 0).then(|| self.epoch_ms + v as u64 - 1)
    }

    /// The stored form of time `t` (times before the epoch count as the
    /// epoch).
    fn encode(&self, t: u64) -> u32 {
        (t.saturating_sub(self.epoch_ms) + 1).min(u32::MAX as u64) as u32
    }

    /// Record that bucket `i` moved at `t`. A time 2^32 ms past the epoch
    /// moves the epoch to 2^31 ms before `t`: older times become the new
    /// epoch (they are older than any bucket age that matters).
    fn set_moved(&mut self, i: usize, t: u64) {
        if t.saturating_sub(self.epoch_ms) >= u32::MAX as u64 - 1 {
            let epoch = Table::epoch_for(t);
            for v in &mut self.moved {
                if *v != 0 {
                    let abs = self.epoch_ms + *v as u64 - 1;
                    *v = (abs.saturating_sub(epoch) + 1) as u32;
                }
            }
            self.epoch_ms = epoch;
        }
        self.moved[i] = self.encode(t);
    }

    /// One step towards `targets` at time `now_ms`, with what `rules` says
    /// of the backends. Returns the new table and what moved;
    /// `Moves::pending` says whether more voluntary steps are needed.
    fn rebalance(
        self,
        targets: &[Target],
        rules: &Rules<'_>,
        now_ms: u64,
        limits: StepLimits,
    ) -> (Scratch, Moves) {
        let size = self.chains.len();
        let max_prev = self.previous as usize;
        let targets: Vec<Target> = targets.iter().copied().filter(|t| t.weight > 0).collect();
        let quota = quotas(size as u32, &targets);

        let mut new = self;
        let tg: Vec<u16> = targets.iter().map(|t| new.intern(t.dip)).collect();
        let n = new.hosts.len() + 1;
        let mut roles = Roles {
            target: vec![None; n],
            keep: vec![false; n],
            forced: vec![false; n],
            down: vec![false; n],
        };
        for (k, h) in new.hosts.iter().enumerate() {
            roles.keep[k + 1] = (rules.keep)(h.dip);
            roles.forced[k + 1] = (rules.forced_out)(h.dip);
            roles.down[k + 1] = (rules.down)(h.dip);
        }
        for (g, &e) in tg.iter().enumerate() {
            roles.target[e as usize] = Some(g);
        }

        // Chains as the rules want them: previous owners that may no
        // longer be hops leave, those known down go last. Chains are kept
        // clean (no repeats, not the first hop, not longer than the
        // memory), so without such owners there is nothing to do.
        let trim = (1..n).any(|k| !roles.keep[k] || roles.down[k]);
        for c in new.chains.iter_mut().filter(|c| trim && c[1] != 0) {
            let (t, _) = chain_of(
                c[0],
                c[1..].iter().copied(),
                max_prev,
                &roles.keep,
                &roles.down,
            );
            *c = t;
        }

        // need[t] = quota - owned; negative: must give buckets away.
        let mut need: Vec<i64> = quota.iter().map(|&q| q as i64).collect();
        let mut forced_free: Vec<(usize, u16)> = Vec::new();
        // Owners that are not targets but leave voluntarily (drained...),
        // by entry.
        let mut leaving: Vec<usize> = vec![0; n];
        for (i, c) in new.chains.iter().enumerate() {
            let f = c[0] as usize;
            match roles.target[f] {
                Some(t) => need[t] -= 1,
                None if f != 0 && !roles.forced[f] => leaving[f] += 1,
                None => forced_free.push((i, c[0])),
            }
        }
        let old_enough = |t: &Scratch, i: usize| {
            t.moved_at(i)
                .is_none_or(|m| now_ms.saturating_sub(m) >= limits.min_age_ms)
        };
        let lru_key = |t: &Scratch, i: usize| t.moved_at(i).map_or(0, |m| m + 1);

        let mut moves = Moves::default();

        // Forced: buckets without a usable owner move now, preferring a
        // previous owner, then adjacency / largest need (see `fill`).
        let forced = new.fill(&tg, &roles, &mut need, forced_free, &mut moves, now_ms);
        moves.forced = forced;

        // Voluntary moves: the budget is shared over the owners that must
        // give, in proportion to what each must give.
        let mut excess: Vec<(IpAddr, usize)> = targets
            .iter()
            .enumerate()
            .filter(|&(t, _)| need[t] < 0)
            .map(|(t, x)| (x.dip, (-need[t]) as usize))
            .collect();
        excess.extend(
            leaving
                .iter()
                .enumerate()
                .filter(|&(_, &k)| k > 0)
                .map(|(e, &k)| (new.hosts[e - 1].dip, k)),
        );
        excess.sort();
        let allowance = share_budget(limits.max_moves, &excess);
        let mut allow: Vec<usize> = vec![0; n];
        for (e, a) in excess.iter().zip(&allowance) {
            let k = new.hosts.iter().position(|h| h.dip == e.0).expect("host") + 1;
            allow[k] = *a;
        }

        // (1) Swaps: a bucket of an owner that must give goes back to its
        // newest previous owner that must gain.
        // (Keys computed once; they are unique, so an unstable sort gives
        // the one order.)
        let mut lru: Vec<(u64, usize)> = (0..size)
            .filter(|&i| allow[new.chains[i][0] as usize] > 0)
            .map(|i| (lru_key(&new, i), i))
            .collect();
        lru.sort_unstable();
        for &(_, i) in &lru {
            let c = new.chains[i];
            let f = c[0] as usize;
            if allow[f] == 0 || !old_enough(&new, i) {
                continue;
            }
            let Some(g) = new.swap_target(i, &roles, &need) else {
                continue;
            };
            match roles.target[f] {
                Some(a) => need[a] += 1,
                None => leaving[f] -= 1,
            }
            allow[f] -= 1;
            need[g] -= 1;
            new.assign(i, tg[g], c[0], &roles, &mut moves, now_ms);
        }

        // (2) Releases: what each owner's share of the budget allows still,
        // buckets whose chain has room first (their move forgets nobody),
        // then least recently moved, from the high end of their ranges (the
        // rest stays contiguous).
        let full = |t: &Scratch, i: usize| listed(&t.chains[i]) >= max_prev;
        let mut order: Vec<(bool, u64, Reverse<usize>)> = (0..size)
            .filter(|&i| allow[new.chains[i][0] as usize] > 0)
            .map(|i| (full(&new, i), lru_key(&new, i), Reverse(i)))
            .collect();
        order.sort_unstable();
        let mut released: Vec<(usize, u16)> = Vec::new();
        for (_, _, Reverse(i)) in order {
            let owner = new.chains[i][0];
            let left = &mut allow[owner as usize];
            if *left == 0 || !old_enough(&new, i) {
                continue;
            }
            *left -= 1;
            if let Some(t) = roles.target[owner as usize] {
                need[t] += 1;
            }
            released.push((i, owner));
        }
        new.fill(&tg, &roles, &mut need, released, &mut moves, now_ms);

        // Voluntary work left: buckets still owned by leavers or above quota.
        let mut pending = 0usize;
        for c in &new.chains {
            let f = c[0] as usize;
            if f != 0 && roles.target[f].is_none() && !roles.forced[f] {
                pending += 1;
            }
        }
        pending += need
            .iter()
            .filter(|&&n| n < 0)
            .map(|&n| (-n) as usize)
            .sum::<usize>();
        moves.pending = pending;
        new.recount();
        (new, moves)
    }

    /// The target index of bucket `i`'s newest previous owner that must
    /// gain, if any.
    fn swap_target(&self, i: usize, roles: &Roles, need: &[i64]) -> Option<usize> {
        self.chains[i][1..]
            .iter()
            .take_while(|&&e| e != 0)
            .find_map(|&e| roles.target[e as usize].filter(|&g| need[g] > 0))
    }

    /// Give bucket `i` (whose first hop was `prev`) the first hop `to`.
    fn assign(
        &mut self,
        i: usize,
        to: u16,
        prev: u16,
        roles: &Roles,
        moves: &mut Moves,
        now_ms: u64,
    ) {
        let c = self.chains[i];
        if c[1..].contains(&to) {
            moves.swapped += 1;
        }
        let max = self.previous as usize;
        let candidates = std::iter::once(prev).chain(c[1..].iter().copied());
        let (chain, forgotten) = chain_of(to, candidates, max, &roles.keep, &roles.down);
        self.chains[i] = chain;
        moves.forgotten += forgotten;
        // A bucket that never had an owner is assigned, not moved: no
        // connection depends on it, so its age does not start.
        if prev != 0 || self.moved[i] != 0 {
            self.set_moved(i, now_ms);
        }
        moves.moved += 1;
    }

    /// Give each bucket in `free` (index, previous first hop) a new owner:
    /// its newest previous owner that must gain, else the owner of an
    /// adjacent bucket that must gain, else the backend with the largest
    /// remaining need (ties: lower address). Buckets nobody can take keep
    /// no first hop (their previous first hop joins the previous owners).
    /// Returns how many got an owner.
    fn fill(
        &mut self,
        tg: &[u16],
        roles: &Roles,
        need: &mut [i64],
        mut free: Vec<(usize, u16)>,
        moves: &mut Moves,
        now_ms: u64,
    ) -> usize {
        if free.is_empty() {
            return 0;
        }
        let size = self.chains.len();
        let mut assigned = 0;

        // A previous owner first (a swap back).
        let mut rest = Vec::with_capacity(free.len());
        for (i, prev) in free.drain(..) {
            match self.swap_target(i, roles, need) {
                Some(g) => {
                    need[g] -= 1;
                    self.assign(i, tg[g], prev, roles, moves, now_ms);
                    assigned += 1;
                }
                None => {
                    // Mark as free so neighbours do not count it.
                    self.chains[i][0] = 0;
                    rest.push((i, prev));
                }
            }
        }
        rest.sort_unstable_by_key(|&(i, _)| i);
        let mut pending = vec![false; size];
        for &(i, _) in &rest {
            pending[i] = true;
        }
        // Largest remaining need first (ties: lower address), with lazy
        // updates: an entry whose need changed is refreshed when it surfaces.
        let dip = |g: usize| self.hosts[tg[g] as usize - 1].dip;
        let mut by_need: BinaryHeap<(i64, Reverse<IpAddr>, usize)> = need
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(g, &n)| (n, Reverse(dip(g)), g))
            .collect();
        // The bucket assigned last, and to whom: in a run of free buckets the
        // left neighbour is usually it, which saves a lookup.
        let mut last: Option<(usize, usize)> = None;
        for (i, prev) in rest {
            let owner = |j: usize| match last {
                Some((k, g)) if k == j => Some(g),
                _ => roles.target[self.chains[j][0] as usize],
            };
            let neighbour = |j: Option<usize>| {
                j.filter(|&j| j < size && !pending[j])
                    .and_then(owner)
                    .filter(|&g| need[g] > 0)
            };
            let g = neighbour(i.checked_sub(1))
                .or_else(|| neighbour(Some(i + 1)))
                .or_else(|| {
                    while let Some(&(n, d, g)) = by_need.peek() {
                        if need[g] == n {
                            return Some(g);
                        }
                        by_need.pop();
                        if need[g] > 0 {
                            by_need.push((need[g], d, g));
                        }
                    }
                    None
                });
            pending[i] = false;
            match g {
                Some(g) => {
                    need[g] -= 1;
                    self.assign(i, tg[g], prev, roles, moves, now_ms);
                    assigned += 1;
                    last = Some((i, g));
                }
                None => {
                    // No eligible backend at all: the bucket drops packets,
                    // but its previous owner stays reachable.
                    if prev != 0 {
                        self.set_moved(i, now_ms);
                    }
                    let c = self.chains[i];
                    let candidates = std::iter::once(prev).chain(c[1..].iter().copied());
                    let max = self.previous as usize;
                    let (chain, forgotten) = chain_of(0, candidates, max, &roles.keep, &roles.down);
                    self.chains[i] = chain;
                    moves.forgotten += forgotten;
                    last = None;
                }
            }
        }
        assigned
    }
}
