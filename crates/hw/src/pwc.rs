//! Page-walk caches (Intel's paging-structure caches, Arm's walk caches):
//! small fully associative caches of non-leaf descriptors, so a walk can
//! start below the root.
//!
//! Level `i` caches, for an address space and the virtual-address bits above
//! `shift`, the physical address of the next table to read. A walk looks
//! for the deepest (smallest `shift`) hit.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PwcLevelConfig {
    /// Virtual-address bits below this are not part of the key (39 for the
    /// x86-64 PML4E cache, 30 for the PDPTE cache, 21 for the PDE cache).
    pub shift: u8,
    pub entries: usize,
}

struct Level {
    shift: u8,
    keys: Vec<u64>,
    table: Vec<u64>,
    lru: Vec<u32>,
}

pub struct Pwc {
    levels: Vec<Level>,
    clock: u32,
    pub hits: u64,
    pub misses: u64,
}

const INVALID: u64 = u64::MAX;

impl Pwc {
    pub fn new(cfg: &[PwcLevelConfig]) -> Pwc {
        let mut levels: Vec<Level> = cfg
            .iter()
            .filter(|c| c.entries > 0)
            .map(|c| Level { shift: c.shift, keys: vec![INVALID; c.entries], table: vec![0; c.entries], lru: vec![0; c.entries] })
            .collect();
        levels.sort_by_key(|l| l.shift);
        Pwc { levels, clock: 0, hits: 0, misses: 0 }
    }

    #[inline]
    fn key(va: u64, shift: u8, asid: u16) -> u64 {
        ((va >> shift) << 16) | asid as u64
    }

    /// The deepest cached entry for `va`, as (shift, next-table address),
    /// considering only levels with shift >= `min_shift`.
    pub fn lookup(&mut self, va: u64, asid: u16) -> Option<(u8, u64)> {
        self.clock = self.clock.wrapping_add(1);
        for l in &mut self.levels {
            let k = Self::key(va, l.shift, asid);
            if let Some(i) = l.keys.iter().position(|&x| x == k) {
                l.lru[i] = self.clock;
                self.hits += 1;
                return Some((l.shift, l.table[i]));
            }
        }
        self.misses += 1;
        None
    }

    /// Records that for `va`, the descriptor covering `shift` bits points to
    /// the table at `table_pa`.
    pub fn fill(&mut self, va: u64, asid: u16, shift: u8, table_pa: u64) {
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        if let Some(l) = self.levels.iter_mut().find(|l| l.shift == shift) {
            let k = Self::key(va, shift, asid);
            let i = l
                .keys
                .iter()
                .position(|&x| x == k || x == INVALID)
                .unwrap_or_else(|| (0..l.keys.len()).max_by_key(|&i| clock.wrapping_sub(l.lru[i])).unwrap_or(0));
            l.keys[i] = k;
            l.table[i] = table_pa;
            l.lru[i] = clock;
        }
    }

    /// Drops every entry of one address space (INVLPG and INVPCID drop all
    /// paging-structure cache entries of the PCID, whatever the address).
    pub fn invalidate_asid(&mut self, asid: u16) {
        for l in &mut self.levels {
            for k in l.keys.iter_mut() {
                if *k != INVALID && (*k & 0xffff) as u16 == asid {
                    *k = INVALID;
                }
            }
        }
    }

    /// Drops the entries of one address space that were used to translate
    /// some address in [start, end): what a TLBI VAE1 (all levels) does to
    /// Arm's walk caches for each page of the range.
    pub fn invalidate_range(&mut self, start: u64, end: u64, asid: u16) {
        for l in &mut self.levels {
            for k in l.keys.iter_mut() {
                if *k == INVALID || (*k & 0xffff) as u16 != asid {
                    continue;
                }
                let base = (*k >> 16) << l.shift;
                if base < end && start < base + (1u64 << l.shift) {
                    *k = INVALID;
                }
            }
        }
    }

    pub fn invalidate_all(&mut self) {
        for l in &mut self.levels {
            l.keys.fill(INVALID);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deepest_hit_wins_and_asid_flush() {
        let mut p = Pwc::new(&[
            PwcLevelConfig { shift: 39, entries: 2 },
            PwcLevelConfig { shift: 21, entries: 2 },
        ]);
        assert_eq!(p.lookup(0x40_0000, 3), None);
        p.fill(0x40_0000, 3, 39, 0x1000);
        assert_eq!(p.lookup(0x40_0000, 3), Some((39, 0x1000)));
        p.fill(0x40_0000, 3, 21, 0x5000);
        assert_eq!(p.lookup(0x5f_0000, 3), Some((21, 0x5000)));
        assert_eq!(p.lookup(0x60_0000, 3), Some((39, 0x1000)));
        p.invalidate_asid(3);
        assert_eq!(p.lookup(0x40_0000, 3), None);
    }

    #[test]
    fn range_invalidation_drops_only_covering_entries() {
        let mut p = Pwc::new(&[PwcLevelConfig { shift: 39, entries: 2 }, PwcLevelConfig { shift: 21, entries: 4 }]);
        p.fill(0x40_0000, 3, 39, 0x1000);
        p.fill(0x40_0000, 3, 21, 0x5000);
        p.fill(0x60_0000, 3, 21, 0x6000);
        p.fill(0x40_0000, 4, 21, 0x7000);
        p.invalidate_range(0x5f_f000, 0x60_0000, 3);
        assert_eq!(p.lookup(0x60_0000, 3), Some((21, 0x6000)), "the next 2 MB region is untouched");
        assert_eq!(p.lookup(0x40_0000, 3), None, "the 2 MB and 512 GB entries covering the range are gone");
        assert_eq!(p.lookup(0x40_0000, 4), Some((21, 0x7000)), "other address spaces keep theirs");
    }
}
