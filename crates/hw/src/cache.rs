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

/// Tags of up to 16 ways in one host cache line.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Block([u32; 16]);

/// A cache's tag store. Each set keeps its ways in recency order, most
/// recently used first, so LRU needs no timestamps and a set of up to 16
/// ways is one host cache line: the model's own lookups stay cheap even
/// for a 100 MB last-level cache. Tags are line numbers (physical address
/// >> 6), which fit 32 bits for the model's 256 GiB maximum.
pub struct Cache {
    sets: usize,
    ways: usize,
    blocks_per_set: usize,
    pow2: bool,
    tags: Vec<Block>,
    pub latency: u32,
    pub hits: u64,
    pub misses: u64,
    /// The line of the last access: it is the most recently used line of
    /// its set, so accessing it again is a hit that changes nothing.
    last: u32,
}

const INVALID: u32 = u32::MAX;

impl Cache {
    pub fn new(c: &CacheConfig) -> Result<Cache, String> {
        let lines = (c.size_kb * 1024) >> LINE_SHIFT;
        if c.ways == 0 || lines == 0 || lines % c.ways as u64 != 0 {
            return Err(format!("cache of {} KB with {} ways", c.size_kb, c.ways));
        }
        let sets = (lines / c.ways as u64) as usize;
        let blocks_per_set = c.ways.div_ceil(16);
        Ok(Cache {
            sets,
            ways: c.ways,
            blocks_per_set,
            pow2: sets.is_power_of_two(),
            tags: vec![Block([INVALID; 16]); sets * blocks_per_set],
            latency: c.latency,
            hits: 0,
            misses: 0,
            last: INVALID,
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
        let line = (pa >> LINE_SHIFT) as u32;
        if line == self.last {
            self.hits += 1;
            return true;
        }
        self.last = line;
        let set = self.set_of(pa >> LINE_SHIFT);
        let ways = self.ways;
        let b = set * self.blocks_per_set;
        let hit = if self.blocks_per_set == 1 {
            probe16(&mut self.tags[b].0, ways, line)
        } else {
            // Wider sets span several blocks; view them as one slice.
            let flat = flatten(&mut self.tags[b..b + self.blocks_per_set]);
            probe(&mut flat[..ways], line)
        };
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
        hit
    }

    pub fn size_bytes(&self) -> u64 {
        ((self.sets * self.ways) as u64) << LINE_SHIFT
    }
}

/// Finds `line` in a set kept in recency order and moves it to the front;
/// on a miss, inserts it at the front and drops the last (LRU) way.
#[inline]
fn probe(t: &mut [u32], line: u32) -> bool {
    // One pass: each way takes its predecessor's tag; stopping where the
    // line was found leaves it at the front and the rest in order.
    let mut prev = line;
    for slot in t.iter_mut() {
        let cur = std::mem::replace(slot, prev);
        if cur == line {
            return true;
        }
        prev = cur;
    }
    false
}

/// The same for a set of at most 16 ways in one block, without branches:
/// the position comes from a compare mask, and the move to front is a
/// lane-wise select, both of which the compiler vectorises.
#[inline]
fn probe16(b: &mut [u32; 16], ways: usize, line: u32) -> bool {
    let mut mask: u32 = 0;
    for (i, &t) in b.iter().enumerate() {
        mask |= ((t == line) as u32) << i;
    }
    mask &= ((1u64 << ways) - 1) as u32;
    let hit = mask != 0;
    let w = if hit { mask.trailing_zeros() as usize } else { ways - 1 };
    let old = *b;
    for i in 1..16 {
        b[i] = if i <= w { old[i - 1] } else { old[i] };
    }
    b[0] = line;
    hit
}

/// Views consecutive blocks as one slice of tags.
fn flatten(blocks: &mut [Block]) -> &mut [u32] {
    let len = blocks.len() * 16;
    let ptr = blocks.as_mut_ptr() as *mut u32;
    // SAFETY: Block is #[repr(align(64))] over [u32; 16], exactly 64 bytes,
    // so consecutive Blocks are consecutive u32s with no padding; the
    // pointer and length come from a valid mutable slice.
    unsafe { std::slice::from_raw_parts_mut(ptr, len) }
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
