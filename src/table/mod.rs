//! Bucket tables, Beamer style (NSDI'18): each bucket has a first hop (owner,
//! gets new connections) and a second hop (previous owner). Pure logic: no
//! BPF, no sockets, no clock (callers pass the time).
//!
//! Rules (docs/design.md "Tables and pacing"):
//! - every eligible backend gets a share of buckets proportional to its
//!   weight, within one bucket of exact (largest-remainder apportionment,
//!   ties broken by address so every node computes the same table);
//! - a change moves as few buckets as needed, and a moved bucket keeps its old
//!   first hop as second hop;
//! - which buckets move: (1) buckets whose second hop is a backend that must
//!   gain, by swapping first and second hop; (2) least recently moved buckets;
//!   (3) buckets next to the gaining backend's existing ranges, so ranges stay
//!   contiguous;
//! - moves forced by failure (`forced_out` owners, or no owner) are immediate;
//!   voluntary moves (weight changes, recoveries, drains) obey [`StepLimits`]:
//!   a budget of buckets per step and a minimum bucket age.
//!
//! The result is a deterministic function of the previous table, the targets
//! and the time: the same sequence of inputs gives the same table on every
//! node and every run.

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::net::Ipv4Addr;

/// One bucket: first and second hop (`None` = no hop).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    /// Owner: gets new connections. `None`: packets are dropped and counted.
    pub first: Option<Ipv4Addr>,
    /// Previous owner: gets packets the first hop does not know.
    pub second: Option<Ipv4Addr>,
}

/// A backend eligible as first hop, with its weight (> 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// Backend address.
    pub dip: Ipv4Addr,
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

/// What a rebalance did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moves {
    /// Buckets whose first hop changed.
    pub moved: usize,
    /// Of those, buckets whose new first hop was their second hop (a swap).
    pub swapped: usize,
    /// Of those, moves forced by failure (owner gone, down or offline).
    pub forced: usize,
    /// Buckets that still have to move voluntarily to reach the targets.
    pub pending: usize,
}

/// A service's forwarding table: `size` buckets (a power of two) and, per
/// bucket, when (ms, caller's clock) it last changed first hop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    buckets: Vec<Bucket>,
    moved_at: Vec<Option<u64>>,
}

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
fn share_budget(budget: usize, excess: &[(Ipv4Addr, usize)]) -> Vec<usize> {
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

impl Table {
    /// A table of `size` buckets with no hops.
    pub fn empty(size: u32) -> Table {
        assert!(size.is_power_of_two(), "table size must be a power of two");
        Table {
            buckets: vec![Bucket::default(); size as usize],
            moved_at: vec![None; size as usize],
        }
    }

    /// A table with these buckets and move times (adopted from a running
    /// data plane, which keeps each bucket's last move in the bucket array).
    pub fn adopt(buckets: Vec<Bucket>, moved_at: Vec<Option<u64>>) -> Table {
        assert!(
            buckets.len().is_power_of_two() && moved_at.len() == buckets.len(),
            "table size must be a power of two"
        );
        Table { buckets, moved_at }
    }

    /// A fresh table for `targets`: contiguous ranges, larger shares first,
    /// no second hops.
    pub fn build(size: u32, targets: &[Target]) -> Table {
        Table::empty(size)
            .rebalance(targets, |_| false, |_| true, 0, StepLimits::NONE)
            .0
    }

    /// The same flows' hops in a table of `size` buckets. Growing keeps every
    /// flow on its hops (new bucket `i` copies old bucket `i & (old - 1)`);
    /// shrinking keeps old bucket `i` for new bucket `i`, so flows of the other
    /// folded buckets may move. Follow with [`Table::rebalance`] to restore
    /// the quotas.
    pub fn resized(&self, size: u32) -> Table {
        assert!(size.is_power_of_two(), "table size must be a power of two");
        let old_mask = self.buckets.len() - 1;
        Table {
            buckets: (0..size as usize)
                .map(|i| self.buckets[i & old_mask])
                .collect(),
            moved_at: (0..size as usize)
                .map(|i| self.moved_at[i & old_mask])
                .collect(),
        }
    }

    /// The buckets, index = `hash & (size - 1)`.
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// Number of buckets.
    pub fn size(&self) -> u32 {
        self.buckets.len() as u32
    }

    /// When bucket `i` last changed first hop (None: never).
    pub fn moved_at(&self, i: usize) -> Option<u64> {
        self.moved_at[i]
    }

    /// First hop of bucket `i` (None: its packets are dropped).
    pub fn first(&self, i: usize) -> Option<Ipv4Addr> {
        self.buckets[i].first
    }

    /// Previous owners of bucket `i`, newest first.
    pub fn previous(&self, i: usize) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.buckets[i].second.into_iter()
    }

    /// Buckets owned (as first hop) per backend.
    pub fn shares(&self) -> BTreeMap<Ipv4Addr, u32> {
        let mut m = BTreeMap::new();
        for b in &self.buckets {
            if let Some(f) = b.first {
                *m.entry(f).or_insert(0) += 1;
            }
        }
        m
    }

    /// Buckets in which each backend is the second hop.
    pub fn second_shares(&self) -> BTreeMap<Ipv4Addr, u32> {
        let mut m = BTreeMap::new();
        for b in &self.buckets {
            if let Some(s) = b.second {
                *m.entry(s).or_insert(0) += 1;
            }
        }
        m
    }

    /// Number of maximal runs of consecutive buckets owned by `dip`.
    pub fn ranges(&self, dip: Ipv4Addr) -> usize {
        let mut runs = 0;
        let mut prev = false;
        for b in &self.buckets {
            let mine = b.first == Some(dip);
            if mine && !prev {
                runs += 1;
            }
            prev = mine;
        }
        runs
    }

    /// One step towards `targets` at time `now_ms`.
    ///
    /// - `second_ok(dip)`: `dip` may stay or become a second hop (false for
    ///   backends that are offline or gone).
    /// - `forced_out(dip)`: `dip` must lose its buckets now (failed health,
    ///   offline). Owners that are neither targets nor forced out (drained,
    ///   being removed) and owners above their quota give buckets away
    ///   voluntarily, within `limits`.
    ///
    /// Returns the new table and what moved; `Moves::pending` says whether
    /// more voluntary steps are needed.
    pub fn rebalance(
        &self,
        targets: &[Target],
        second_ok: impl Fn(Ipv4Addr) -> bool,
        forced_out: impl Fn(Ipv4Addr) -> bool,
        now_ms: u64,
        limits: StepLimits,
    ) -> (Table, Moves) {
        let size = self.buckets.len();
        let targets: Vec<Target> = targets.iter().copied().filter(|t| t.weight > 0).collect();
        let quota = quotas(size as u32, &targets);
        let index: HashMap<Ipv4Addr, usize> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| (t.dip, i))
            .collect();
        let target_of = |a: Option<Ipv4Addr>| a.and_then(|a| index.get(&a).copied());

        let mut new = self.clone();
        // Second hops that may no longer be used are cleared.
        for b in &mut new.buckets {
            if let Some(s) = b.second {
                if !second_ok(s) || b.first == Some(s) {
                    b.second = None;
                }
            }
        }

        // need[t] = quota - owned; negative: must give buckets away.
        let mut need: Vec<i64> = quota.iter().map(|&q| q as i64).collect();
        let mut forced_free: Vec<(usize, Option<Ipv4Addr>)> = Vec::new();
        // Owners that are not targets but leave voluntarily (drained...).
        let mut leaving: BTreeMap<Ipv4Addr, usize> = BTreeMap::new();
        for (i, b) in new.buckets.iter().enumerate() {
            match (target_of(b.first), b.first) {
                (Some(t), _) => need[t] -= 1,
                (None, Some(f)) if !forced_out(f) => *leaving.entry(f).or_insert(0) += 1,
                (None, _) => forced_free.push((i, b.first)),
            }
        }
        let old_enough = |t: &Table, i: usize| {
            t.moved_at[i].is_none_or(|m| now_ms.saturating_sub(m) >= limits.min_age_ms)
        };
        let lru_key = |t: &Table, i: usize| t.moved_at[i].map_or(0, |m| m + 1);

        let mut moves = Moves::default();
        let assign =
            |new: &mut Table, moves: &mut Moves, i: usize, g: usize, prev: Option<Ipv4Addr>| {
                let b = &mut new.buckets[i];
                let dip = targets[g].dip;
                if b.second == Some(dip) {
                    moves.swapped += 1;
                }
                let keep = |a: Option<Ipv4Addr>| a.filter(|&a| a != dip && second_ok(a));
                b.second = keep(prev).or(keep(b.second));
                b.first = Some(dip);
                // A bucket that never had an owner is assigned, not moved:
                // no connection depends on it, so its age does not start.
                if prev.is_some() || new.moved_at[i].is_some() {
                    new.moved_at[i] = Some(now_ms);
                }
                moves.moved += 1;
            };

        // Forced: buckets without a usable owner move now, preferring their
        // second hop, then adjacency / largest need (see `fill`).
        let forced = new.fill(
            &targets,
            &index,
            &mut need,
            forced_free,
            &mut moves,
            &assign,
            &second_ok,
            now_ms,
        );
        moves.forced = forced;

        // Voluntary budget.
        let mut budget = limits.max_moves;

        // (1) Swaps: a bucket of an owner that must give goes back to its
        // second hop when that backend must gain.
        let mut lru: Vec<usize> = (0..size).collect();
        lru.sort_by_key(|&i| (lru_key(&new, i), i));
        for &i in &lru {
            if budget == 0 {
                break;
            }
            let b = new.buckets[i];
            let Some(g) = target_of(b.second) else {
                continue;
            };
            if need[g] <= 0 || !old_enough(&new, i) {
                continue;
            }
            let gives = match (target_of(b.first), b.first) {
                (Some(a), _) => need[a] < 0,
                (None, Some(f)) => leaving.contains_key(&f),
                _ => false,
            };
            if !gives {
                continue;
            }
            match target_of(b.first) {
                Some(a) => need[a] += 1,
                None => {
                    let f = b.first.expect("leaving owner");
                    let n = leaving.get_mut(&f).expect("leaving owner");
                    *n -= 1;
                    if *n == 0 {
                        leaving.remove(&f);
                    }
                }
            }
            need[g] -= 1;
            budget -= 1;
            assign(&mut new, &mut moves, i, g, b.first);
        }

        // (2) Releases: owners that must give, least recently moved first,
        // from the high end of their ranges (the rest stays contiguous); the
        // budget is shared in proportion to what each must give.
        let mut excess: Vec<(Ipv4Addr, usize)> = targets
            .iter()
            .enumerate()
            .filter(|&(t, _)| need[t] < 0)
            .map(|(t, x)| (x.dip, (-need[t]) as usize))
            .collect();
        excess.extend(leaving.iter().map(|(&d, &n)| (d, n)));
        excess.sort();
        let allowance = share_budget(budget, &excess);
        let mut allow: HashMap<Ipv4Addr, usize> = excess
            .iter()
            .zip(&allowance)
            .map(|(e, &a)| (e.0, a))
            .collect();
        let mut order: Vec<usize> = (0..size).collect();
        order.sort_by_key(|&i| (lru_key(&new, i), Reverse(i)));
        let mut released: Vec<(usize, Option<Ipv4Addr>)> = Vec::new();
        for i in order {
            let Some(owner) = new.buckets[i].first else {
                continue;
            };
            let Some(left) = allow.get_mut(&owner) else {
                continue;
            };
            if *left == 0 || !old_enough(&new, i) {
                continue;
            }
            *left -= 1;
            if let Some(t) = index.get(&owner) {
                need[*t] += 1;
            }
            released.push((i, Some(owner)));
        }
        new.fill(
            &targets, &index, &mut need, released, &mut moves, &assign, &second_ok, now_ms,
        );

        // Voluntary work left: buckets still owned by leavers or above quota.
        let mut pending = 0usize;
        for b in &new.buckets {
            if let (None, Some(f)) = (target_of(b.first), b.first) {
                if !forced_out(f) {
                    pending += 1;
                }
            }
        }
        pending += need
            .iter()
            .filter(|&&n| n < 0)
            .map(|&n| (-n) as usize)
            .sum::<usize>();
        moves.pending = pending;
        (new, moves)
    }

    /// Give each bucket in `free` (index, previous first hop) a new owner:
    /// its second hop if that backend must gain, else the owner of an
    /// adjacent bucket that must gain, else the backend with the largest
    /// remaining need (ties: lower address). Buckets nobody can take keep no
    /// first hop. Returns how many got an owner.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &mut self,
        targets: &[Target],
        index: &HashMap<Ipv4Addr, usize>,
        need: &mut [i64],
        mut free: Vec<(usize, Option<Ipv4Addr>)>,
        moves: &mut Moves,
        assign: &impl Fn(&mut Table, &mut Moves, usize, usize, Option<Ipv4Addr>),
        second_ok: &impl Fn(Ipv4Addr) -> bool,
        now_ms: u64,
    ) -> usize {
        if free.is_empty() {
            return 0;
        }
        let size = self.buckets.len();
        let target_of = |a: Option<Ipv4Addr>| a.and_then(|a| index.get(&a).copied());
        let mut assigned = 0;

        // Second hop first (a swap back).
        let mut rest = Vec::with_capacity(free.len());
        for (i, prev) in free.drain(..) {
            match target_of(self.buckets[i].second) {
                Some(g) if need[g] > 0 => {
                    need[g] -= 1;
                    assign(self, moves, i, g, prev);
                    assigned += 1;
                }
                _ => {
                    // Mark as free so neighbours do not count it.
                    self.buckets[i].first = None;
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
        let mut by_need: BinaryHeap<(i64, Reverse<Ipv4Addr>, usize)> = need
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(g, &n)| (n, Reverse(targets[g].dip), g))
            .collect();
        // The bucket assigned last, and to whom: in a run of free buckets the
        // left neighbour is usually it, which saves a lookup.
        let mut last: Option<(usize, usize)> = None;
        for (i, prev) in rest {
            let owner = |j: usize| match last {
                Some((k, g)) if k == j => Some(g),
                _ => target_of(self.buckets[j].first),
            };
            let neighbour = |j: Option<usize>| {
                j.filter(|&j| j < size && !pending[j])
                    .and_then(owner)
                    .filter(|&g| need[g] > 0)
            };
            let g = neighbour(i.checked_sub(1))
                .or_else(|| neighbour(Some(i + 1)))
                .or_else(|| {
                    while let Some(&(n, dip, g)) = by_need.peek() {
                        if need[g] == n {
                            return Some(g);
                        }
                        by_need.pop();
                        if need[g] > 0 {
                            by_need.push((need[g], dip, g));
                        }
                    }
                    None
                });
            pending[i] = false;
            match g {
                Some(g) => {
                    need[g] -= 1;
                    assign(self, moves, i, g, prev);
                    assigned += 1;
                    last = Some((i, g));
                }
                None => {
                    // No eligible backend at all: the bucket drops packets,
                    // but its previous owner stays reachable as second hop.
                    if prev.is_some() {
                        self.moved_at[i] = Some(now_ms);
                    }
                    if let Some(p) = prev.filter(|&p| second_ok(p)) {
                        self.buckets[i].second = Some(p);
                    }
                    last = None;
                }
            }
        }
        assigned
    }
}
