//! A hierarchical bitmap: a set of small integers with O(levels) insertion,
//! removal and "lowest member at or above i" queries.
//!
//! The physical allocator keeps one of these per free-list order per domain;
//! a plain bitmap would make "find the lowest free block" a linear scan over
//! millions of words, while a linked list would cost a pointer per frame.

use std::fmt;

const WORD_BITS: usize = 64;

/// A bitmap over `len` bits with summary levels above it.
///
/// `levels[0]` holds the bits themselves, one per index. Each higher level
/// has one bit per word of the level below it. The top level is a single
/// word, so finding the lowest set bit reads exactly one word per level.
///
/// Invariants (checked by [`BitTree::check`]):
/// - bit `j` of level `l + 1` is set if and only if word `j` of level `l`
///   is non-zero;
/// - no bit at or beyond `len` is set in level 0;
/// - `count` equals the number of set bits in level 0.
///
/// Memory is `len / 8` bytes for the leaves plus about 1/63 of that for the
/// summaries.
#[derive(Clone)]
pub struct BitTree {
    len: usize,
    count: usize,
    levels: Vec<Vec<u64>>,
}

impl BitTree {
    /// Creates a tree over `len` bits, all clear.
    pub fn new(len: usize) -> Self {
        let mut levels = Vec::new();
        let mut bits = len.max(1);
        loop {
            let words = bits.div_ceil(WORD_BITS);
            // `vec![0; n]` maps zeroed memory, so a large tree is cheap to create.
            levels.push(vec![0u64; words]);
            if words == 1 {
                break;
            }
            bits = words;
        }
        BitTree {
            len,
            count: 0,
            levels,
        }
    }

    /// Number of bits the tree covers.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree covers no bits at all.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of set bits.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether bit `i` is set.
    pub fn get(&self, i: usize) -> bool {
        debug_assert!(i < self.len, "bit {i} out of range {}", self.len);
        self.levels[0][i / WORD_BITS] & (1 << (i % WORD_BITS)) != 0
    }

    /// Sets bit `i`; a no-op if it is already set.
    pub fn set(&mut self, i: usize) {
        assert!(i < self.len, "bit {i} out of range {}", self.len);
        let mut idx = i;
        for (l, level) in self.levels.iter_mut().enumerate() {
            let word = &mut level[idx / WORD_BITS];
            let was = *word;
            *word |= 1 << (idx % WORD_BITS);
            if l == 0 {
                if was == *word {
                    return;
                }
                self.count += 1;
            }
            // The summary above already records this word as non-empty.
            if was != 0 {
                return;
            }
            idx /= WORD_BITS;
        }
    }

    /// Clears bit `i`; a no-op if it is already clear.
    pub fn clear(&mut self, i: usize) {
        assert!(i < self.len, "bit {i} out of range {}", self.len);
        let mut idx = i;
        for (l, level) in self.levels.iter_mut().enumerate() {
            let word = &mut level[idx / WORD_BITS];
            let was = *word;
            *word &= !(1 << (idx % WORD_BITS));
            if l == 0 {
                if was == *word {
                    return;
                }
                self.count -= 1;
            }
            // Only an emptied word changes the summary above it.
            if *word != 0 {
                return;
            }
            idx /= WORD_BITS;
        }
    }

    /// Lowest set bit, reading one word per level.
    pub fn first_set(&self) -> Option<usize> {
        let top = self.levels.len() - 1;
        if self.levels[top][0] == 0 {
            return None;
        }
        Some(self.descend(top, 0))
    }

    /// Lowest set bit at or above `i`.
    pub fn first_set_from(&self, i: usize) -> Option<usize> {
        if i >= self.len {
            return None;
        }
        let mut pos = i;
        for l in 0..self.levels.len() {
            let level = &self.levels[l];
            let w = pos / WORD_BITS;
            if w >= level.len() {
                return None;
            }
            let masked = level[w] & (!0u64 << (pos % WORD_BITS));
            if masked != 0 {
                let hit = w * WORD_BITS + masked.trailing_zeros() as usize;
                return Some(if l == 0 {
                    hit
                } else {
                    self.descend(l - 1, hit)
                });
            }
            // Nothing left in this word: ask the summary for the next
            // non-empty word after it.
            pos = w + 1;
        }
        None
    }

    /// Iterates over the set bits in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let mut next = self.first_set();
        std::iter::from_fn(move || {
            let cur = next?;
            next = self.first_set_from(cur + 1);
            Some(cur)
        })
    }

    /// From a known non-zero word `word` of level `l`, follows lowest set
    /// bits down to a leaf index.
    fn descend(&self, l: usize, word: usize) -> usize {
        let mut idx = word;
        for level in self.levels[..=l].iter().rev() {
            let w = level[idx];
            debug_assert!(w != 0, "summary bit set over an empty word");
            idx = idx * WORD_BITS + w.trailing_zeros() as usize;
        }
        idx
    }

    /// Verifies the invariants stated on the struct. O(len / 64).
    pub fn check(&self) -> Result<(), String> {
        let leaves = &self.levels[0];
        let pop: usize = leaves.iter().map(|w| w.count_ones() as usize).sum();
        if pop != self.count {
            return Err(format!("count {} but {} bits set", self.count, pop));
        }
        if !self.len.is_multiple_of(WORD_BITS) {
            let last = leaves[leaves.len() - 1];
            if last >> (self.len % WORD_BITS) != 0 {
                return Err("bit set beyond len".into());
            }
        }
        for l in 1..self.levels.len() {
            let (below, above) = (&self.levels[l - 1], &self.levels[l]);
            for (j, &w) in below.iter().enumerate() {
                let summary = above[j / WORD_BITS] & (1 << (j % WORD_BITS)) != 0;
                if summary != (w != 0) {
                    return Err(format!("level {l} summary bit {j} is {summary}"));
                }
            }
            let tail = below.len() % WORD_BITS;
            if tail != 0 && above[above.len() - 1] >> tail != 0 {
                return Err(format!("level {l} summary bit beyond its level"));
            }
        }
        Ok(())
    }
}

impl fmt::Debug for BitTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BitTree")
            .field("len", &self.len)
            .field("count", &self.count)
            .field("levels", &self.levels.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn empty_tree_has_nothing() {
        let t = BitTree::new(1000);
        assert_eq!(t.first_set(), None);
        assert_eq!(t.first_set_from(0), None);
        assert_eq!(t.count(), 0);
        assert!(t.check().is_ok());
        let z = BitTree::new(0);
        assert!(z.is_empty());
        assert_eq!(z.first_set(), None);
        assert_eq!(z.first_set_from(0), None);
    }

    #[test]
    fn set_clear_get_count() {
        let mut t = BitTree::new(200);
        t.set(5);
        t.set(5);
        t.set(199);
        t.set(64);
        assert_eq!(t.count(), 3);
        assert!(t.get(5) && t.get(64) && t.get(199) && !t.get(6));
        t.clear(5);
        t.clear(5);
        assert_eq!(t.count(), 2);
        assert!(!t.get(5));
        assert!(t.check().is_ok());
    }

    #[test]
    fn first_set_across_levels() {
        // 2^20 bits gives four levels.
        let n = 1 << 20;
        let mut t = BitTree::new(n);
        assert_eq!(t.levels.len(), 4);
        t.set(n - 1);
        assert_eq!(t.first_set(), Some(n - 1));
        t.set(70_000);
        t.set(3);
        assert_eq!(t.first_set(), Some(3));
        assert_eq!(t.first_set_from(4), Some(70_000));
        assert_eq!(t.first_set_from(70_000), Some(70_000));
        assert_eq!(t.first_set_from(70_001), Some(n - 1));
        t.clear(n - 1);
        assert_eq!(t.first_set_from(70_001), None);
        t.clear(3);
        t.clear(70_000);
        assert_eq!(t.first_set(), None);
        assert!(t.check().is_ok());
    }

    #[test]
    fn large_tree_is_cheap() {
        let n = 1 << 27;
        let mut t = BitTree::new(n);
        t.set(n - 1);
        t.set(12345);
        assert_eq!(t.first_set(), Some(12345));
        assert_eq!(t.first_set_from(12346), Some(n - 1));
        assert_eq!(t.iter().collect::<Vec<_>>(), vec![12345, n - 1]);
    }

    proptest! {
        #[test]
        fn matches_btreeset(
            n in 1usize..300_000,
            ops in proptest::collection::vec((any::<bool>(), any::<u32>()), 0..300),
            probes in proptest::collection::vec(any::<u32>(), 0..20),
        ) {
            let mut t = BitTree::new(n);
            let mut model = BTreeSet::new();
            for (set, x) in ops {
                let i = x as usize % n;
                if set {
                    t.set(i);
                    model.insert(i);
                } else {
                    t.clear(i);
                    model.remove(&i);
                }
                prop_assert_eq!(t.first_set(), model.iter().next().copied());
            }
            prop_assert_eq!(t.count(), model.len());
            for p in probes {
                let i = p as usize % (n + 10);
                prop_assert_eq!(t.first_set_from(i), model.range(i..).next().copied());
            }
            prop_assert_eq!(t.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            prop_assert!(t.check().is_ok());
        }
    }
}
