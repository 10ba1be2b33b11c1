//! Per-bucket data of a table in shared, immutable chunks: a table made
//! from another (a rebalance, a reload) keeps the other's chunks where it
//! does not differ, so a step that moves a third of the buckets allocates
//! about a third of a table, and comparing the two skips the chunks they
//! share. Changes are made on flat vectors (`Scratch` in the parent
//! module) and frozen into chunks with [`Chunks::freeze`].

use std::ops::Index;
use std::sync::Arc;

/// Buckets per chunk (a power of two).
const CHUNK: usize = 1024;
const SHIFT: u32 = CHUNK.trailing_zeros();

/// `len` values in chunks of [`CHUNK`] (the last one shorter if `len` is
/// not a multiple).
#[derive(Clone, Debug)]
pub(super) struct Chunks<T> {
    len: usize,
    parts: Vec<Arc<[T]>>,
}

impl<T: Copy + PartialEq> Chunks<T> {
    /// The values of `v`, sharing each chunk of `base` (if given) that
    /// holds the same values.
    pub fn freeze(v: &[T], base: Option<&Chunks<T>>) -> Self {
        let parts = v
            .chunks(CHUNK)
            .enumerate()
            .map(|(k, part)| match base.and_then(|b| b.parts.get(k)) {
                Some(old) if **old == *part => Arc::clone(old),
                _ => Arc::from(part),
            })
            .collect();
        Chunks {
            len: v.len(),
            parts,
        }
    }

    /// Append the values to `v`.
    pub fn extend_into(&self, v: &mut Vec<T>) {
        v.reserve(self.len);
        for p in &self.parts {
            v.extend_from_slice(p);
        }
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Every value, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.parts.iter().flat_map(|p| p.iter())
    }

    /// The chunks: (index of the first value, values).
    pub fn parts(&self) -> impl Iterator<Item = (usize, &[T])> + '_ {
        self.parts
            .iter()
            .enumerate()
            .map(|(k, p)| (k * CHUNK, &p[..]))
    }

    /// Whether chunk `k` ([`Self::parts`] order) is the same (shared) in
    /// both.
    pub fn shares_part(&self, other: &Chunks<T>, k: usize) -> bool {
        match (self.parts.get(k), other.parts.get(k)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Bytes of the chunks (shared ones included, with their reference
    /// counts) and of the list of them.
    pub fn heap_bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
            + self.parts.len() * 2 * std::mem::size_of::<usize>()
            + self.parts.capacity() * std::mem::size_of::<Arc<[T]>>()
    }
}

impl<T> Index<usize> for Chunks<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        &self.parts[i >> SHIFT][i & (CHUNK - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_values_share_the_unchanged_chunks() {
        // Three full chunks and a short one.
        let n = 3 * CHUNK + CHUNK / 4;
        let v: Vec<u32> = (0..n as u32).collect();
        let a = Chunks::freeze(&v, None);
        assert_eq!((a.len(), a.parts.len(), a[n - 1]), (n, 4, n as u32 - 1));
        let mut back = vec![9];
        a.extend_into(&mut back);
        assert_eq!(back[1..], v[..]);
        let mut w = v.clone();
        w[CHUNK + 3] = 7;
        let b = Chunks::freeze(&w, Some(&a));
        assert_eq!((a[CHUNK + 3], b[CHUNK + 3]), (CHUNK as u32 + 3, 7));
        let shared: Vec<bool> = (0..4).map(|k| b.shares_part(&a, k)).collect();
        assert_eq!(shared, vec![true, false, true, true]);
        assert_eq!(b.iter().copied().collect::<Vec<_>>(), w);
        let starts: Vec<(usize, usize)> = b.parts().map(|(s, p)| (s, p.len())).collect();
        assert_eq!(
            starts,
            vec![
                (0, CHUNK),
                (CHUNK, CHUNK),
                (2 * CHUNK, CHUNK),
                (3 * CHUNK, CHUNK / 4)
            ]
        );
        // Another size shares nothing past what fits.
        let c = Chunks::freeze(&v[..2 * CHUNK + 1], Some(&a));
        assert!(c.shares_part(&a, 0) && c.shares_part(&a, 1) && !c.shares_part(&a, 2));
    }
}
