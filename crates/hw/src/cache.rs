//! Set-associative caches with LRU replacement, for data lines and for the
//! page-table lines the walker reads. Only tags are kept: timing depends on
//! where a line is, not on its value.
//!
//! Invariant: a line is present at most once in a cache.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    pub size_kb: u64,
    pub ways: usize,
    /// Load-to-use latency of a hit, in core cycles.
    pub latency: u32,
}

pub const LINE_SHIFT: u32 = 6;

pub struct Cache {
    sets: usize,
    ways: usize,
    pow2: bool,
    tags: Vec<u64>,
    lru: Vec<u32>,
    clock: u32,
    pub latency: u32,
    pub hits: u64,
    pub misses: u64,
}

const INVALID: u64 = u64::MAX;

impl Cache {
    pub fn new(c: &CacheConfig) -> Result<Cache, String> {
        let lines = (c.size_kb * 1024) >> LINE_SHIFT;
        if c.ways == 0 || lines == 0 || lines % c.ways as u64 != 0 {
            return Err(format!("cache of {} KB with {} ways", c.size_kb, c.ways));
        }
        let sets = (lines / c.ways as u64) as usize;
        Ok(Cache {
            sets,
            ways: c.ways,
            pow2: sets.is_power_of_two(),
            tags: vec![INVALID; lines as usize],
            lru: vec![0; lines as usize],
            clock: 0,
            latency: c.latency,
            hits: 0,
            misses: 0,
        })
    }

    #[inline]
    fn set_of(&self, line: u64) -> usize {
        if self.pow2 {
            line as usize & (self.sets - 1)
        } else {
            // Large last-level caches hash addresses over slices; a
            // multiplicative hash and a range reduction stand in for that.
            let h = line.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((h as u128 * self.sets as u128) >> 64) as usize
        }
    }

    /// Looks up the line holding physical address `pa`; on a miss the line
    /// is filled, evicting the set's least recently used line. Returns
    /// whether it hit.
    #[inline]
    pub fn access(&mut self, pa: u64) -> bool {
        let line = pa >> LINE_SHIFT;
        let base = self.set_of(line) * self.ways;
        self.clock = self.clock.wrapping_add(1);
        let tags = &mut self.tags[base..base + self.ways];
        if let Some(w) = tags.iter().position(|&t| t == line) {
            self.lru[base + w] = self.clock;
            self.hits += 1;
            return true;
        }
        self.misses += 1;
        let clock = self.clock;
        let lru = &self.lru[base..base + self.ways];
        let victim = tags
            .iter()
            .position(|&t| t == INVALID)
            .unwrap_or_else(|| (0..lru.len()).max_by_key(|&w| clock.wrapping_sub(lru[w])).unwrap_or(0));
        tags[victim] = line;
        self.lru[base + victim] = clock;
        false
    }

    pub fn size_bytes(&self) -> u64 {
        (self.tags.len() as u64) << LINE_SHIFT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_after_fill_and_lru_eviction() {
        // 2 sets x 2 ways of 64-byte lines.
        let mut c = Cache::new(&CacheConfig { size_kb: 0, ways: 2, latency: 4 }).err();
        assert!(c.take().is_some(), "zero-sized cache refused");
        let mut c = Cache::new(&CacheConfig { size_kb: 1, ways: 2, latency: 4 }).unwrap();
        assert!(!c.access(0));
        assert!(c.access(8));
        let sets = 8u64; // 1 KB / 64 / 2
        let a = 0;
        let b = sets * 64;
        let d = 2 * sets * 64;
        assert!(!c.access(b));
        assert!(c.access(a)); // a is now MRU
        assert!(!c.access(d)); // evicts b
        assert!(c.access(a));
        assert!(!c.access(b));
    }
}
