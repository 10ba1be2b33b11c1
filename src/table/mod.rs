//! Bucket tables, Beamer style (NSDI'18): each bucket has a first hop (owner,
//! gets new connections) and a second hop (previous owner). Pure logic: no
//! BPF, no sockets.
//!
//! Rules (DESIGN.md "Control plane", "Table"):
//! - every eligible backend gets a share of buckets proportional to its
//!   weight, within one bucket of exact (largest-remainder apportionment,
//!   ties broken by address so every node computes the same table);
//! - a change moves as few buckets as needed, and a moved bucket keeps its old
//!   first hop as second hop;
//! - which buckets move: (1) buckets whose second hop is a backend that must
//!   gain, by swapping first and second hop; (2) least recently moved buckets;
//!   (3) buckets next to the gaining backend's existing ranges, so ranges stay
//!   contiguous.
//!
//! The result is a deterministic function of the previous table and the
//! targets: the same sequence of configurations gives the same table on every
//! node and every run.

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
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

/// What a rebalance did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moves {
    /// Buckets whose first hop changed.
    pub moved: usize,
    /// Of those, buckets whose new first hop was their second hop (a swap).
    pub swapped: usize,
}

/// A service's forwarding table: `size` buckets (a power of two), the
/// generation of the last change and, per bucket, the generation in which it
/// last moved (for least-recently-moved choices).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    buckets: Vec<Bucket>,
    moved_at: Vec<u64>,
    generation: u64,
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

impl Table {
    /// A table of `size` buckets with no hops.
    pub fn empty(size: u32) -> Table {
        assert!(size.is_power_of_two(), "table size must be a power of two");
        Table {
            buckets: vec![Bucket::default(); size as usize],
            moved_at: vec![0; size as usize],
            generation: 0,
        }
    }

    /// A fresh table for `targets`: contiguous ranges, larger shares first,
    /// no second hops.
    pub fn build(size: u32, targets: &[Target]) -> Table {
        Table::empty(size).rebalance(targets, |_| false).0
    }

    /// The same flows' hops in a table of `size` buckets. Growing keeps every
    /// flow on its hops (new bucket `i` copies old bucket `i & (old - 1)`);
    /// shrinking keeps old bucket `i` for new bucket `i`, so flows of the other
    /// folded buckets may move. Follow with [`Table::rebalance`] to restore
    /// the quotas.
    pub fn resized(&self, size: u32) -> Table {
        assert!(size.is_power_of_two(), "table size must be a power of two");
        let old_mask = self.buckets.len() - 1;
        let pick = |i: usize| i & old_mask;
        Table {
            buckets: (0..size as usize).map(|i| self.buckets[pick(i)]).collect(),
            moved_at: (0..size as usize).map(|i| self.moved_at[pick(i)]).collect(),
            generation: self.generation,
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

    /// Changes applied since [`Table::empty`].
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Generation in which bucket `i` last changed first hop (0: never).
    pub fn moved_at(&self, i: usize) -> u64 {
        self.moved_at[i]
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

    /// The table for new `targets`, moving as few buckets as possible.
    ///
    /// `second_ok(dip)` says whether `dip` may stay or become a second hop
    /// (false for backends that are offline or gone). Backends not in
    /// `targets` (or with weight 0) lose all their buckets; drained backends
    /// are passed here as not-a-target but `second_ok`.
    pub fn rebalance(
        &self,
        targets: &[Target],
        second_ok: impl Fn(Ipv4Addr) -> bool,
    ) -> (Table, Moves) {
        let size = self.buckets.len();
        let targets: Vec<Target> = targets.iter().copied().filter(|t| t.weight > 0).collect();
        let quota = quotas(size as u32, &targets);
        let index: HashMap<Ipv4Addr, usize> = targets
            .iter()
            .enumerate()
            .map(|(i, t)| (t.dip, i))
            .collect();

        let mut new = self.clone();
        new.generation += 1;
        let generation = new.generation;

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
        // Buckets without an eligible owner, with their previous first hop.
        let mut free: Vec<(usize, Option<Ipv4Addr>)> = Vec::new();
        for (i, b) in new.buckets.iter().enumerate() {
            match b.first.and_then(|f| index.get(&f)) {
                Some(&t) => need[t] -= 1,
                None => free.push((i, b.first)),
            }
        }
        let owner = |b: &Bucket| b.first.and_then(|f| index.get(&f).copied());

        // Least recently moved first; ties by index.
        let mut lru: Vec<usize> = (0..size).collect();
        lru.sort_by_key(|&i| (new.moved_at[i], i));

        let mut moves = Moves::default();
        let mut assign = |new: &mut Table, i: usize, g: usize, prev: Option<Ipv4Addr>| {
            let b = &mut new.buckets[i];
            let dip = targets[g].dip;
            if b.second == Some(dip) {
                moves.swapped += 1;
            }
            let keep = |a: Option<Ipv4Addr>| a.filter(|&a| a != dip && second_ok(a));
            b.second = keep(prev).or(keep(b.second));
            b.first = Some(dip);
            new.moved_at[i] = generation;
            moves.moved += 1;
        };

        // (1) Swaps: an over-quota owner gives a bucket back to its second
        // hop when that backend must gain.
        for &i in &lru {
            let b = new.buckets[i];
            let (Some(a), Some(g)) = (owner(&b), b.second.and_then(|s| index.get(&s).copied()))
            else {
                continue;
            };
            if need[a] < 0 && need[g] > 0 {
                need[a] += 1;
                need[g] -= 1;
                assign(&mut new, i, g, b.first);
            }
        }
        // Free buckets go back to their second hop when it must gain.
        let mut pending: Vec<(usize, Option<Ipv4Addr>)> = Vec::with_capacity(free.len());
        for (i, prev) in free {
            match new.buckets[i].second.and_then(|s| index.get(&s).copied()) {
                Some(g) if need[g] > 0 => {
                    need[g] -= 1;
                    assign(&mut new, i, g, prev);
                }
                _ => pending.push((i, prev)),
            }
        }

        // (2) Over-quota owners release their least recently moved buckets,
        // from the high end of their ranges (the rest stays contiguous).
        let mut release: Vec<usize> = (0..size).collect();
        release.sort_by_key(|&i| (new.moved_at[i], Reverse(i)));
        for i in release {
            if let Some(a) = owner(&new.buckets[i]) {
                if need[a] < 0 {
                    need[a] += 1;
                    pending.push((i, new.buckets[i].first));
                    new.buckets[i].first = None;
                }
            }
        }

        // (3) Gainers take the free buckets in index order, preferring
        // buckets adjacent to their own ranges; otherwise the backend with
        // the largest remaining need (ties: lower address) starts a range.
        pending.sort_unstable_by_key(|&(i, _)| i);
        let mut by_need: BTreeSet<(Reverse<i64>, Ipv4Addr, usize)> = need
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(g, &n)| (Reverse(n), targets[g].dip, g))
            .collect();
        let is_pending: Vec<bool> = {
            let mut v = vec![false; size];
            for &(i, _) in &pending {
                v[i] = true;
            }
            v
        };
        for (i, prev) in pending {
            let neighbour = |j: Option<usize>| {
                j.filter(|&j| j < size && !(is_pending[j] && j > i))
                    .and_then(|j| owner(&new.buckets[j]))
                    .filter(|&g| need[g] > 0)
            };
            let g = neighbour(i.checked_sub(1))
                .or_else(|| neighbour(Some(i + 1)))
                .or_else(|| by_need.first().map(|&(_, _, g)| g));
            match g {
                Some(g) => {
                    by_need.remove(&(Reverse(need[g]), targets[g].dip, g));
                    need[g] -= 1;
                    if need[g] > 0 {
                        by_need.insert((Reverse(need[g]), targets[g].dip, g));
                    }
                    assign(&mut new, i, g, prev);
                }
                None => {
                    // No eligible backend at all: the bucket drops packets,
                    // but its previous owner stays reachable as second hop.
                    let b = &mut new.buckets[i];
                    if b.first.is_some() || prev.is_some() {
                        new.moved_at[i] = generation;
                    }
                    b.first = None;
                    if let Some(p) = prev.filter(|&p| second_ok(p)) {
                        b.second = Some(p);
                    }
                }
            }
        }
        (new, moves)
    }
}
