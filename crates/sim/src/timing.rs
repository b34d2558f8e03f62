//! The timing model: caches for data, instructions and page-table lines,
//! and per CPU the interval core (`core.rs`) that turns each reference's
//! latencies, its place in the instruction stream and the stream's
//! branches into cycles, from the machine profile. It only consumes the
//! physical addresses the access path produces; nothing the access path
//! decides depends on it, which is what lets a batch's references be timed
//! after (and on another thread than) their translation.

use crate::block::Block;
use crate::core::{CoreParts, CoreState, CoreStats, MemCfg, RefPlace, RefTime, Stack};
use splab_hw::cache::Cache;
#[cfg(test)]
use splab_hw::cache::LINE_SHIFT;
use splab_hw::profile::{Prefetch, Profile, WALK_MEMORY};
use std::sync::Arc;

/// Where the time went, in cycles, summed over CPUs.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CycleBreakdown {
    /// Dispatching instructions at the core's width.
    pub core: f64,
    /// Mispredicted branches.
    pub branch: f64,
    /// Instruction fetches that missed.
    pub fetch: f64,
    /// Waiting on data accesses.
    pub data: f64,
    /// Waiting on translation (TLB misses and walks).
    pub translation: f64,
    pub kernel: f64,
}

impl CycleBreakdown {
    pub(crate) fn add_stack(&mut self, s: &Stack) {
        self.core += s.base;
        self.branch += s.branch;
        self.fetch += s.fetch;
        self.data += s.data;
        self.translation += s.translation;
    }

    /// Every category's cycles.
    pub fn total(&self) -> f64 {
        self.core + self.branch + self.fetch + self.data + self.translation + self.kernel
    }
}

/// A place in a batch where the instruction stream says something
/// between references: before reference `at`, the CPU enters a block
/// (its index in the system's blocks), leaves the current one by a side
/// exit, or runs instructions the stream describes no further.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    pub at: u32,
    pub what: MarkKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    Enter(u32),
    Exit(u8),
    Instructions(u64),
}

/// A reference's place in its block: none (a synthetic loop's, or a
/// reference outside any block).
pub const NO_PLACE: u16 = u16::MAX;

/// A translated reference awaiting the cache model: its data address, the
/// fixed cycles of its TLB lookups and assists, and the range of its walk
/// references in the accompanying walk list.
#[derive(Clone, Copy, Debug)]
pub struct BatchRef {
    pub pa: u64,
    pub xlat: u32,
    pub walks_start: u32,
    pub walks_end: u32,
    /// A store: its line becomes dirty.
    pub write: bool,
    /// An instruction fetch (through the instruction cache).
    pub fetch: bool,
    /// Its place in the current block (`NO_PLACE`: none); repeats take
    /// the places after it.
    pub place: u16,
    /// Accesses (all loads or all stores: `repeat_write`) that followed
    /// this one on its line with nothing between them, translated through
    /// the same first-level TLB entry without an assist: each a
    /// first-level hit that changes no cache state (the line is the
    /// cache's last) but a store's dirtying of it.
    pub repeats: u16,
    /// Bytes from each access of the run to the next: repeat `n` is at
    /// `pa + n x stride` (the core's store-to-load matching reads its
    /// word), so that a run is timed as its accesses apart would be.
    pub stride: i8,
    /// The repeats are stores (a load's may be: a read-modify-write).
    pub repeat_write: bool,
}

impl BatchRef {
    /// A data reference outside any block.
    pub fn data(pa: u64, xlat: u32, walks_start: u32, walks_end: u32, write: bool) -> BatchRef {
        BatchRef { pa, xlat, walks_start, walks_end, write, fetch: false, place: NO_PLACE, repeats: 0, stride: 0, repeat_write: write }
    }
}

pub struct Timing {
    l1: Vec<Cache>,
    l1i: Vec<Cache>,
    l2: Vec<Cache>,
    l3: Cache,
    dram: u32,
    /// The first cache level a walk's references look up
    /// (`Caches::walk_level`): 1, or 2 or 3 where the OS made its page
    /// tables cacheable in the outer levels only, or 4 (`WALK_MEMORY`)
    /// where it made the walks non-cacheable: they read memory.
    walk_level: u8,
    /// The stream prefetcher beside each CPU's L2, if the profile has one,
    /// and the line time its streams deliver at by the number followed at
    /// once.
    streams: Vec<Streams>,
    stream_line: Vec<f32>,
    /// Second-level misses the prefetcher covered.
    pub prefetched: u64,
    /// Dirty lines, where the profile charges writebacks or bounds the
    /// memory interface.
    dirty: Option<Dirty>,
    /// The last level is write-through (`Caches::last_level_write_through`,
    /// with dirty lines tracked): a dirty line is written back when the
    /// second level evicts it, not the last.
    write_through: bool,
    /// Dirty lines written back to memory.
    pub writebacks: u64,
    /// Per CPU, the interval core.
    cores: Vec<CoreState>,
    /// The blocks the streams have named, compiled for the profile.
    blocks: Vec<Arc<Block>>,
    /// Cycles of the kernel's work per CPU are kept by the system; these
    /// are the rest.
    pub cache_hits: [u64; 3],
    pub dram_accesses: u64,
    /// Scratch for batches: each access's address and latency, and the
    /// accesses that reach the second and third levels.
    scratch: Vec<(u64, u32)>,
    to_l2: Vec<u32>,
    to_l3: Vec<u32>,
    to_dram: Vec<u32>,
    /// Accesses the prefetcher covered, with the streams it was following.
    covered: Vec<(u32, u32)>,
    /// Lines the last level evicted, with the accesses that evicted them.
    evicted: Vec<(u32, u64)>,
    /// Per access: missed the first level (bit 0), read memory (bit 1),
    /// and the dirty lines its fill evicted (the rest, shifted by 2).
    flags: Vec<u8>,
    /// Per access, the prefetcher's line time where it covered it.
    lines: Vec<f32>,
}

/// The lines written since they last left the last-level cache, one bit
/// each by physical line number. The last level stands for the whole
/// hierarchy here: a line is dirty from the store that writes it,
/// whichever level it hit in, until the last level evicts it (the model's
/// levels are not inclusive, so a line a store hit in L1 after the last
/// level dropped it is written back the next time the last level evicts
/// it), or, where the last level is write-through, until the second
/// level evicts it.
struct Dirty {
    bits: Vec<u64>,
}

impl Dirty {
    #[inline]
    fn mark(&mut self, line: u64) {
        let w = (line >> 6) as usize;
        if w >= self.bits.len() {
            self.bits.resize((w + 1).next_power_of_two(), 0);
        }
        self.bits[w] |= 1 << (line & 63);
    }

    /// Whether `line` was dirty; it is clean after.
    #[inline]
    fn take(&mut self, line: u64) -> bool {
        let Some(b) = self.bits.get_mut((line >> 6) as usize) else { return false };
        let m = 1u64 << (line & 63);
        let was = *b & m != 0;
        *b &= !m;
        was
    }
}

/// How many accesses ahead the last level's pass fetches the sets it
/// will probe, measured on a 2-CPU guest whose host maps it with 4 KB
/// pages: GUPS (`sim gups --log2-table 24 --updates 16777216 --memory 8G
/// --single-thread`, pinned, three interleaved runs each, build 414d2d3)
/// took a median 1.92 s at 12, 2.03 s at 6, 1.82 s at 24, 32 and 64,
/// 1.80 to 1.81 s at 48 (three sets of runs) and 1.81 s at 96; with
/// superpages off (half the updates), 2.22 s at 12 and 2.11 s at 48; the
/// STREAM triad's replay 1.75 s at either.
const L3_AHEAD: usize = 48;

const MISSED: u8 = 1;
const DRAM: u8 = 2;
const WB_SHIFT: u8 = 2;

/// The prefetcher's line time for 1, 2, ... streams at once (one value
/// where it does not depend on the number; none without a prefetcher).
fn line_times(p: &Profile) -> Vec<f32> {
    match &p.prefetch {
        None => vec![0.0],
        Some(pf) => (1..=pf.line_cycles_by_streams.len().max(1)).map(|k| pf.line_cycles_at(k) as f32).collect(),
    }
}

impl Timing {
    pub fn new(p: &Profile) -> Result<Timing, String> {
        Timing::with_parts(p, CoreParts::default())
    }

    /// `new` with parts of the core model switched off (`CoreParts`).
    pub fn with_parts(p: &Profile, parts: CoreParts) -> Result<Timing, String> {
        let mut l1 = Vec::new();
        let mut l1i = Vec::new();
        let mut l2 = Vec::new();
        let shift = p.cache.line_shift();
        for _ in 0..p.cpus {
            l1.push(Cache::new(&p.cache.l1d, shift)?);
            l1i.push(Cache::new(&p.cache.l1i, shift)?);
            l2.push(Cache::new(&p.cache.l2, shift)?);
        }
        let line = p.channel_line_cycles().unwrap_or(0.0);
        let wb = p.writeback_cycles().unwrap_or(0.0);
        let mem = MemCfg { l1: p.cache.l1d.latency, l1i: p.cache.l1i.latency, l2: p.cache.l2.latency, stlb: p.costs.stlb_hit, chan_read: line, chan_wb: line.max(wb) };
        let tracks_dirty = p.writeback_cycles().is_some() || p.channel_line_cycles().is_some();
        Ok(Timing {
            l1,
            l1i,
            l2,
            l3: Cache::new(&p.cache.l3, shift)?,
            dram: p.dram_cycles(),
            walk_level: p.cache.walk_level(),
            streams: p.prefetch.iter().flat_map(|pf| (0..p.cpus).map(|_| Streams::new(pf, shift))).collect(),
            stream_line: line_times(p),
            prefetched: 0,
            dirty: tracks_dirty.then(|| Dirty { bits: Vec::new() }),
            write_through: tracks_dirty && p.cache.last_level_write_through(),
            writebacks: 0,
            cores: (0..p.cpus).map(|_| CoreState::new(&p.core, mem, parts)).collect(),
            blocks: Vec::new(),
            cache_hits: [0; 3],
            dram_accesses: 0,
            scratch: Vec::new(),
            to_l2: Vec::new(),
            to_l3: Vec::new(),
            to_dram: Vec::new(),
            covered: Vec::new(),
            evicted: Vec::new(),
            flags: Vec::new(),
            lines: Vec::new(),
        })
    }

    /// The cycles CPU `cpu` has spent on its instructions and their
    /// references.
    pub fn cycles(&self, cpu: usize) -> f64 {
        self.cores[cpu].time()
    }

    /// Where the CPUs' cycles went (the kernel's are the system's).
    pub fn breakdown(&self) -> CycleBreakdown {
        let mut b = CycleBreakdown::default();
        for c in &self.cores {
            b.add_stack(&c.stack());
        }
        b
    }

    /// What the cores counted, summed over CPUs.
    pub fn core_stats(&self) -> CoreStats {
        let mut s = CoreStats::default();
        for c in &self.cores {
            s.add(&c.stats());
        }
        s
    }

    /// Blocks the system defined since the last batch, in order.
    pub fn add_blocks(&mut self, blocks: impl IntoIterator<Item = Arc<Block>>) {
        self.blocks.extend(blocks);
    }

    /// The loop CPU `cpu` runs from now on (an index into the blocks), or
    /// none: each reference of a batch without a place is the loop's next.
    pub fn set_loop(&mut self, cpu: usize, block: Option<u32>) {
        let c = &mut self.cores[cpu];
        c.finish(&self.blocks, None);
        c.looped = block;
    }

    /// `n` instructions the stream describes no further, on `cpu`.
    pub fn instructions(&mut self, cpu: usize, n: u64) {
        self.cores[cpu].instructions(&self.blocks, n);
    }

    /// Latency of one access to physical address `pa` through the caches
    /// and the prefetcher.
    #[inline]
    pub fn mem_latency(&mut self, cpu: usize, pa: u64) -> u32 {
        self.access_latency_from(cpu, pa, 1, false).0
    }

    /// An access that looks the caches up from level `from` (1 to 3) on
    /// (the instruction cache at the first level for a `fetch`): its
    /// latency, whether it missed the first level, and for one that went
    /// past the second: whether it read memory, the line time of the
    /// prefetcher's stream that covered it (0: none) and whether its fill
    /// evicted a dirty line.
    #[inline]
    fn access_latency_from(&mut self, cpu: usize, pa: u64, from: u8, fetch: bool) -> (u32, u8, f32) {
        if from >= WALK_MEMORY {
            // A non-cacheable read: no cache is looked up or filled.
            self.dram_accesses += 1;
            return (self.dram, MISSED | DRAM, 0.0);
        }
        if from <= 1 {
            let l1 = if fetch { &mut self.l1i[cpu] } else { &mut self.l1[cpu] };
            if l1.access(pa) {
                self.cache_hits[0] += 1;
                return (l1.latency, 0, 0.0);
            }
        }
        // A dirty line leaves for memory when the last level evicts it,
        // or, where that level is write-through, the second.
        let mut wb = false;
        if from <= 2 {
            let hit = match self.dirty.as_mut().filter(|_| self.write_through) {
                None => self.l2[cpu].access(pa),
                Some(d) => {
                    let (hit, victim) = self.l2[cpu].access_evicting(pa);
                    wb = victim.is_some_and(|v| d.take(v));
                    hit
                }
            };
            if hit {
                self.cache_hits[1] += 1;
                return (self.l2[cpu].latency, MISSED, 0.0);
            }
        }
        let covered = if self.streams.is_empty() { 0 } else { self.streams[cpu].cover(pa >> self.l3.line_shift()) };
        let hit = match self.dirty.as_mut().filter(|_| !self.write_through) {
            None => self.l3.access(pa),
            Some(d) => {
                let (hit, victim) = self.l3.access_evicting(pa);
                wb = victim.is_some_and(|v| d.take(v));
                hit
            }
        };
        self.writebacks += wb as u64;
        let mut flags = MISSED | (wb as u8) << WB_SHIFT;
        let lat = if hit {
            self.cache_hits[2] += 1;
            self.l3.latency
        } else {
            self.dram_accesses += 1;
            flags |= DRAM;
            self.dram
        };
        let line = if covered > 0 {
            self.prefetched += 1;
            self.stream_line[(covered as usize).clamp(1, self.stream_line.len()) - 1]
        } else {
            0.0
        };
        (lat, flags, line)
    }

    /// A store to `pa` made its line dirty.
    #[inline]
    fn stored(&mut self, pa: u64) {
        if let Some(d) = self.dirty.as_mut() {
            d.mark(pa >> self.l3.line_shift());
        }
    }

    /// Charges one access: its translation cycles, its walk references and
    /// its data reference through the caches, and the core's time for it,
    /// as a reference outside any block (`dependent`: its address is the
    /// value the previous one loaded). A `write` dirties the line.
    #[inline]
    pub fn charge(&mut self, cpu: usize, xlat: u32, walks: &[u64], pa: u64, dependent: bool, write: bool) {
        let mut a = RefTime { xlat, walked: !walks.is_empty(), ..RefTime::default() };
        let l2 = self.l2[cpu].latency;
        for &w in walks {
            let (lat, f, _) = self.access_latency_from(cpu, w, self.walk_level, false);
            add_walk_read(&mut a, lat, f, l2);
        }
        let (data, f, line) = self.access_latency_from(cpu, pa, 1, false);
        if write {
            self.stored(pa);
        }
        a.data = data;
        a.missed = f & MISSED != 0;
        a.dram_lines += (f & DRAM != 0) as u8;
        a.writebacks += f >> WB_SHIFT;
        a.stream_line = line;
        let c = &mut self.cores[cpu];
        let place = match c.looped {
            Some(_) if !dependent => c.loop_place(&self.blocks).unwrap_or(RefPlace::Free { dependent }),
            _ => RefPlace::Free { dependent },
        };
        c.reference(&self.blocks, place, &a, write, pa);
    }

    /// The cheap case of `charge`: no translation cycles, no walk, and the
    /// same line as the CPU's last access (a certain first-level hit).
    /// Returns false, changing nothing, when that is not the case.
    #[inline]
    pub fn charge_same_line(&mut self, cpu: usize, pa: u64, dependent: bool, write: bool) -> bool {
        let l1 = &mut self.l1[cpu];
        if !l1.is_last(pa) {
            return false;
        }
        l1.access(pa);
        let a = RefTime { data: l1.latency, ..RefTime::default() };
        if write {
            self.stored(pa);
        }
        self.cache_hits[0] += 1;
        let c = &mut self.cores[cpu];
        let place = match c.looped {
            Some(_) if !dependent => c.loop_place(&self.blocks).unwrap_or(RefPlace::Free { dependent }),
            _ => RefPlace::Free { dependent },
        };
        c.reference(&self.blocks, place, &a, write, pa);
        true
    }

    /// The first two levels' passes of `run_batch` where walks start
    /// below the first level: the data references go through L1, then its
    /// misses merged in program order with the walk references through L2
    /// (walk_level 2), or L1's data misses through L2 and its misses
    /// merged with the walk references on to L3 (walk_level 3), or L1's
    /// data misses through L2 and on to L3 with the walk references
    /// returned, for memory (`WALK_MEMORY`). `to_l2` ends with the
    /// references that missed L1, `to_l3` with every access that goes on
    /// to L3.
    fn pass_walks_below_l1(&mut self, cpu: usize, refs: &[BatchRef], acc: &mut [(u64, u32)], to_l2: &mut Vec<u32>, to_l3: &mut Vec<u32>, evicted: &mut Vec<(u32, u64)>) -> Vec<u32> {
        let mut data = Vec::with_capacity(refs.len());
        let mut walk = Vec::with_capacity(acc.len() - refs.len());
        let mut k = 0u32;
        for r in refs {
            walk.extend(k..k + (r.walks_end - r.walks_start));
            k += r.walks_end - r.walks_start;
            data.push(k);
            k += 1;
        }
        self.first_level(cpu, refs, acc, Some(&data), to_l2);
        if self.walk_level == 2 {
            let sel = merge(to_l2, &walk);
            self.l2_pass(cpu, acc, &sel, to_l3, evicted);
            self.cache_hits[1] += (sel.len() - to_l3.len()) as u64;
        } else {
            let mut l3_data = Vec::new();
            self.l2_pass(cpu, acc, to_l2, &mut l3_data, evicted);
            self.cache_hits[1] += (to_l2.len() - l3_data.len()) as u64;
            if self.walk_level >= WALK_MEMORY {
                *to_l3 = l3_data;
                return walk;
            }
            *to_l3 = merge(&l3_data, &walk);
        }
        Vec::new()
    }

    /// The second level's pass over the accesses `sel`, its misses in
    /// `misses`; where the last level is write-through, the lines it
    /// evicts in `evicted` (a dirty one is written back then).
    fn l2_pass(&mut self, cpu: usize, acc: &mut [(u64, u32)], sel: &[u32], misses: &mut Vec<u32>, evicted: &mut Vec<(u32, u64)>) {
        if self.write_through {
            self.l2[cpu].pass_evicting(acc, Some(sel), misses, 0, evicted);
        } else {
            self.l2[cpu].pass(acc, Some(sel), misses, 0);
        }
    }

    /// The first level's pass over the accesses `sel` (all where None):
    /// instruction fetches through the instruction cache, the rest
    /// through the data cache; their misses in program order in `to_l2`.
    fn first_level(&mut self, cpu: usize, refs: &[BatchRef], acc: &mut [(u64, u32)], sel: Option<&[u32]>, to_l2: &mut Vec<u32>) {
        let n = sel.map_or(acc.len(), |s| s.len());
        if !refs.iter().any(|r| r.fetch) {
            self.l1[cpu].pass(acc, sel, to_l2, 0);
            self.cache_hits[0] += (n - to_l2.len()) as u64;
            return;
        }
        // Which accesses are fetches: each fetch reference's last access
        // (its walk references are data).
        let mut fetch = vec![false; acc.len()];
        let mut k = 0usize;
        for r in refs {
            k += (r.walks_end - r.walks_start) as usize + 1;
            fetch[k - 1] = r.fetch;
        }
        let all: Vec<u32>;
        let sel = match sel {
            Some(s) => s,
            None => {
                all = (0..acc.len() as u32).collect();
                &all
            }
        };
        let (fs, ds): (Vec<u32>, Vec<u32>) = sel.iter().partition(|&&i| fetch[i as usize]);
        let (mut fm, mut dm) = (Vec::new(), Vec::new());
        self.l1i[cpu].pass(acc, Some(&fs), &mut fm, 0);
        self.l1[cpu].pass(acc, Some(&ds), &mut dm, 0);
        self.cache_hits[0] += (n - fm.len() - dm.len()) as u64;
        *to_l2 = merge(&dm, &fm);
    }

    /// Times a batch of references. Each cache only ever sees the accesses
    /// that reach it, in program order, so the batch is run one level at a
    /// time: every access through L1, then L1's misses through L2, then
    /// L2's misses through L3. The states and latencies are exactly those of
    /// running each access through all levels in turn; the passes are loops
    /// of independent lookups that the host overlaps. Then the core takes
    /// the references in program order with the stream's `marks`.
    pub fn run_batch(&mut self, cpu: usize, refs: &[BatchRef], walks: &[u64], marks: &[Mark]) {
        self.list_and_pass(cpu, refs, walks);
        self.core_pass(cpu, refs, marks);
    }

    /// The caches' passes over a batch whose accesses are listed here.
    fn list_and_pass(&mut self, cpu: usize, refs: &[BatchRef], walks: &[u64]) {
        let mut acc = std::mem::take(&mut self.scratch);
        let repeats = accesses(refs, walks, &mut acc);
        self.cache_pass(cpu, refs, acc, repeats, !walks.is_empty());
    }

    /// `run_batch` of a batch whose accesses (`accesses`, with the
    /// repeats it returned) the caller has listed, `walked` where its walk
    /// references were not empty; returns the list of the batch before,
    /// for the caller's next.
    pub fn run_listed(&mut self, cpu: usize, refs: &[BatchRef], acc: Vec<(u64, u32)>, repeats: u64, walked: bool, marks: &[Mark]) -> Vec<(u64, u32)> {
        let old = std::mem::take(&mut self.scratch);
        self.cache_pass(cpu, refs, acc, repeats, walked);
        self.core_pass(cpu, refs, marks);
        old
    }

    /// The first half of `run_batch`: the caches' passes over the batch's
    /// accesses `acc` (`accesses`; `walked`: its walk references were not
    /// empty), whose latencies and flags the core's pass (`core_pass`,
    /// for the same batch, next) reads.
    fn cache_pass(&mut self, cpu: usize, refs: &[BatchRef], mut acc: Vec<(u64, u32)>, repeats: u64, walked: bool) {
        let mut to_l2 = std::mem::take(&mut self.to_l2);
        let mut to_l3 = std::mem::take(&mut self.to_l3);
        to_l2.clear();
        to_l3.clear();
        // The repeats: first-level hits on the line of the access before.
        self.l1[cpu].hits += repeats;
        self.cache_hits[0] += repeats;
        // The lines evicted where dirty lines leave for memory (the last
        // level, or the second where the last is write-through), with the
        // accesses that evicted them.
        let mut evicted = std::mem::take(&mut self.evicted);
        evicted.clear();
        // Walk references that read memory without a cache (`WALK_MEMORY`).
        let mut uncached = Vec::new();
        if self.walk_level == 1 || !walked {
            self.first_level(cpu, refs, &mut acc, None, &mut to_l2);
            self.l2_pass(cpu, &mut acc, &to_l2, &mut to_l3, &mut evicted);
            self.cache_hits[1] += (to_l2.len() - to_l3.len()) as u64;
        } else {
            uncached = self.pass_walks_below_l1(cpu, refs, &mut acc, &mut to_l2, &mut to_l3, &mut evicted);
        }
        // The prefetcher sees L2's misses in order.
        let mut covered = std::mem::take(&mut self.covered);
        covered.clear();
        if !self.streams.is_empty() {
            let shift = self.l3.line_shift();
            let s = &mut self.streams[cpu];
            covered.extend(to_l3.iter().filter_map(|&i| match s.cover(acc[i as usize].0 >> shift) {
                0 => None,
                k => Some((i, k)),
            }));
        }
        // The last level's tag store is too big for the host's caches:
        // fetch the sets `L3_AHEAD` accesses ahead, so that their loads
        // overlap.
        let mut dram = std::mem::take(&mut self.to_dram);
        dram.clear();
        if self.dirty.is_some() && !self.write_through {
            self.l3.pass_evicting(&mut acc, Some(&to_l3), &mut dram, L3_AHEAD, &mut evicted);
        } else {
            self.l3.pass(&mut acc, Some(&to_l3), &mut dram, L3_AHEAD);
        }
        let mut flags = std::mem::take(&mut self.flags);
        flags.clear();
        flags.resize(acc.len(), 0);
        for &i in &to_l2 {
            flags[i as usize] |= MISSED;
        }
        if self.walk_level > 1 {
            // Walk references that start below the first level miss it.
            for &i in &to_l3 {
                flags[i as usize] |= MISSED;
            }
        }
        self.cache_hits[2] += (to_l3.len() - dram.len()) as u64;
        if !uncached.is_empty() {
            dram = merge(&dram, &uncached);
        }
        for &i in &dram {
            acc[i as usize].1 = self.dram;
            flags[i as usize] |= MISSED | DRAM;
        }
        let mut lines = std::mem::take(&mut self.lines);
        lines.clear();
        if !covered.is_empty() {
            lines.resize(acc.len(), 0.0);
            for &(i, k) in &covered {
                lines[i as usize] = self.stream_line[(k as usize).clamp(1, self.stream_line.len()) - 1];
            }
        }
        if let Some(d) = self.dirty.as_mut() {
            // In program order: the access's evictions (of its walk
            // references', then its data's fill), then its store.
            let (mut e, mut k) = (0, 0);
            for r in refs {
                k += (r.walks_end - r.walks_start) as usize + 1;
                while let Some(&(v, line)) = evicted.get(e).filter(|x| (x.0 as usize) < k) {
                    if d.take(line) {
                        self.writebacks += 1;
                        flags[v as usize] = flags[v as usize].saturating_add(1 << WB_SHIFT);
                    }
                    e += 1;
                }
                if r.write || (r.repeats > 0 && r.repeat_write) {
                    d.mark(r.pa >> self.l3.line_shift());
                }
            }
        }
        self.evicted = evicted;
        self.prefetched += covered.len() as u64;
        self.covered = covered;
        self.dram_accesses += dram.len() as u64;
        self.to_dram = dram;
        self.flags = flags;
        self.lines = lines;
        self.scratch = acc;
        self.to_l2 = to_l2;
        self.to_l3 = to_l3;
    }

    /// Functional warming of a batch (`System::set_functional`): the
    /// caches' pass as `run_batch` makes it, so that the caches, the
    /// prefetcher and the dirty lines evolve as in full detail, and the
    /// stream's marks through the core's predictor and instruction count
    /// (`CoreState::warm`); the references are not timed.
    pub fn warm_pass(&mut self, cpu: usize, refs: &[BatchRef], walks: &[u64], marks: &[Mark]) {
        self.list_and_pass(cpu, refs, walks);
        let core = &mut self.cores[cpu];
        for mk in marks {
            core.warm(&self.blocks, mk.what);
        }
    }

    /// The second half of `run_batch`: the core, reference by reference
    /// as `charge` does, with the stream's marks between them, from the
    /// latencies `cache_pass` left for the batch.
    fn core_pass(&mut self, cpu: usize, refs: &[BatchRef], marks: &[Mark]) {
        let (acc, flags, lines) = (&self.scratch, &self.flags, &self.lines);
        let (l1, l2) = (self.l1[cpu].latency, self.l2[cpu].latency);
        let core = &mut self.cores[cpu];
        let blocks = &self.blocks;
        // A batch with no marks whose references have no places of their
        // own and fetch nothing takes a path of its own: each reference
        // is a straight loop's next (GUPS, the synthetic kernels), or one
        // in no block (a data trace's), as `reference` would take it.
        if marks.is_empty() && refs.iter().all(|r| r.place == NO_PLACE && !r.fetch) {
            match core.looped {
                Some(l) => {
                    let b = &*blocks[l as usize];
                    if b.straight_loop && b.exits.is_empty() && !b.refs.is_empty() {
                        each_plain(refs, acc, flags, lines, l1, l2, #[inline(always)] |a, write, pa| core.straight_loop_reference(blocks, l, b, a, write, pa));
                        return;
                    }
                }
                None => {
                    each_plain(refs, acc, flags, lines, l1, l2, #[inline(always)] |a, write, pa| core.free_reference(false, a, write, pa));
                    return;
                }
            }
        }
        let mut m = 0;
        let mut k = 0;
        for (j, r) in refs.iter().enumerate() {
            while let Some(mk) = marks.get(m).filter(|mk| mk.at as usize <= j) {
                apply(core, blocks, mk.what);
                m += 1;
            }
            let a = ref_time(r, acc, flags, lines, l2, &mut k);
            if r.fetch {
                core.fetch(&a);
                continue;
            }
            let place = |core: &mut CoreState, n: u16| {
                if r.place != NO_PLACE {
                    RefPlace::Block(r.place.wrapping_add(n))
                } else if core.looped.is_some() {
                    core.loop_place(blocks).unwrap_or(RefPlace::Free { dependent: false })
                } else {
                    RefPlace::Free { dependent: false }
                }
            };
            let looped = r.place == NO_PLACE && core.looped.is_some();
            if looped {
                core.loop_reference(blocks, &a, r.write, r.pa);
            } else {
                let p = place(core, 0);
                core.reference_inline(blocks, p, &a, r.write, r.pa);
            }
            if r.repeats > 0 {
                // First-level hits.
                let hit = RefTime { data: l1, ..RefTime::default() };
                for n in 1..=r.repeats {
                    let pa = r.pa.wrapping_add_signed(i64::from(r.stride) * i64::from(n));
                    if looped {
                        core.loop_reference(blocks, &hit, r.repeat_write, pa);
                    } else {
                        let p = place(core, n);
                        core.reference(blocks, p, &hit, r.repeat_write, pa);
                    }
                }
            }
        }
        for mk in &marks[m..] {
            apply(core, blocks, mk.what);
        }
    }
}

/// Lists a batch's accesses in `acc` in program order, each reference's
/// walk references and then its own, with no latency yet; returns the
/// first-level hits its references' repeats are. The translating thread
/// lists a batch it hands over (`Timing::run_listed`), where it has the
/// time to spare.
pub fn accesses(refs: &[BatchRef], walks: &[u64], acc: &mut Vec<(u64, u32)>) -> u64 {
    acc.clear();
    acc.reserve(refs.len() + walks.len());
    let mut repeats = 0u64;
    for r in refs {
        if r.walks_start != r.walks_end {
            acc.extend(walks[r.walks_start as usize..r.walks_end as usize].iter().map(|&w| (w, 0)));
        }
        acc.push((r.pa, 0));
        repeats += u64::from(r.repeats);
    }
    repeats
}

/// Each reference of a batch (none a fetch, none with a place of its
/// own, no marks between them) and then its repeats, to `f` with its
/// time, whether it stores and its address.
#[inline(always)]
fn each_plain(refs: &[BatchRef], acc: &[(u64, u32)], flags: &[u8], lines: &[f32], l1: u32, l2: u32, mut f: impl FnMut(&RefTime, bool, u64)) {
    let mut k = 0;
    for r in refs {
        let a = ref_time(r, acc, flags, lines, l2, &mut k);
        f(&a, r.write, r.pa);
        if r.repeats > 0 {
            // First-level hits.
            let hit = RefTime { data: l1, ..RefTime::default() };
            for n in 1..=r.repeats {
                f(&hit, r.repeat_write, r.pa.wrapping_add_signed(i64::from(r.stride) * i64::from(n)));
            }
        }
    }
}

/// One of a walk's reads, `lat` cycles with the cache's `flags`, added
/// to its reference: to the translation's time (the part past a
/// second-level hit of `l2` cycles also to its far time), the lines read
/// from memory and the dirty lines its fill evicted.
#[inline(always)]
fn add_walk_read(a: &mut RefTime, lat: u32, flags: u8, l2: u32) {
    a.xlat += lat;
    a.walk_far += lat.saturating_sub(l2);
    a.dram_lines += (flags & DRAM != 0) as u8;
    a.writebacks += flags >> WB_SHIFT;
}

/// What the caches made of reference `r` of a batch, for the core: its
/// walk's references' and its data access's latencies and flags, from
/// place `k` of the cache pass's accesses (moved past them); `l2` is a
/// second-level hit's latency, past which a walk's read is far.
#[inline(always)]
fn ref_time(r: &BatchRef, acc: &[(u64, u32)], flags: &[u8], lines: &[f32], l2: u32, k: &mut usize) -> RefTime {
    let nw = (r.walks_end - r.walks_start) as usize;
    let mut a = RefTime { xlat: r.xlat, walked: nw > 0, ..RefTime::default() };
    if nw > 0 {
        for i in *k..*k + nw {
            add_walk_read(&mut a, acc[i].1, flags[i], l2);
        }
        *k += nw;
    }
    let f = flags[*k];
    a.data = acc[*k].1;
    a.missed = f & MISSED != 0;
    a.dram_lines += (f & DRAM != 0) as u8;
    a.writebacks += f >> WB_SHIFT;
    if !lines.is_empty() {
        a.stream_line = lines[*k];
    }
    *k += 1;
    a
}

/// What a mark tells the core.
pub(crate) fn apply(core: &mut CoreState, blocks: &[Arc<Block>], what: MarkKind) {
    match what {
        MarkKind::Enter(b) => core.enter(blocks, b),
        MarkKind::Exit(k) => core.finish(blocks, Some(k as usize)),
        MarkKind::Instructions(n) => core.instructions(blocks, n),
    }
}

/// Two ascending index lists merged in order.
fn merge(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut m = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if j == b.len() || (i < a.len() && a[i] < b[j]) {
            m.push(a[i]);
            i += 1;
        } else {
            m.push(b[j]);
            j += 1;
        }
    }
    m
}

/// The streams one CPU's prefetcher follows: per 4 KB physical page, the
/// last line that missed there and the direction the misses step in.
struct Streams {
    pages: Vec<StreamEntry>,
    distance: u64,
    clock: u64,
    /// Whether to count the streams followed at once (only where the
    /// profile's line time depends on it).
    count: bool,
    /// Whether a stream goes on into the physically next page
    /// (`Prefetch::next_page`).
    next_page: bool,
    /// log2 of the lines in a 4 KB page.
    page_shift: u32,
}

/// A stream counts as followed at once with others while it covered one
/// of the last this many second-level misses.
const STREAM_WINDOW: u64 = 16;

#[derive(Clone, Copy)]
struct StreamEntry {
    /// 4 KB page number (u64::MAX: unused).
    page: u64,
    last: u64,
    /// +1 or -1 once two misses stepped that way, else 0.
    dir: i64,
    used: u64,
    /// Clock of its last covered miss (0: none since it was taken).
    covered_at: u64,
}

/// log2 of the 64-byte lines in a 4 KB page (the tests' line size):
/// prefetchers of this kind train on one page at a time, since the next
/// physical page need not be the next virtual one; a stream goes on into
/// the adjacent frame only with `next_page`.
#[cfg(test)]
const PAGE_LINE_SHIFT: u32 = 12 - LINE_SHIFT;

impl Streams {
    /// Streams over lines of `1 << line_shift` bytes.
    fn new(p: &Prefetch, line_shift: u32) -> Streams {
        Streams {
            page_shift: 12 - line_shift,
            pages: vec![StreamEntry { page: u64::MAX, last: 0, dir: 0, used: 0, covered_at: 0 }; p.streams],
            distance: p.distance as u64,
            clock: 0,
            count: p.line_cycles_by_streams.len() > 1,
            next_page: p.next_page,
        }
    }

    /// Whether a miss in L2 on `line` was covered by a stream, training
    /// the streams on it: the first miss in a page starts following it
    /// (replacing the least recently used page), a second within the
    /// distance sets the direction, and later ones that step that way
    /// within the distance are covered (fetched ahead of the demand).
    /// Returns 0 when not covered, else how many streams are being
    /// followed at once (counted only where `count`, else 1): the pages
    /// that covered one of the last `STREAM_WINDOW` misses. A stream that
    /// has just trained again on its next page counts twice for a few
    /// misses (one that went on into the adjacent frame counts once).
    fn cover(&mut self, line: u64) -> u32 {
        if !self.covers(line) {
            return 0;
        }
        if !self.count {
            return 1;
        }
        let page = line >> self.page_shift;
        let clock = self.clock;
        let mut k = 0;
        for e in self.pages.iter_mut() {
            if e.page == page {
                e.covered_at = clock;
            }
            if e.covered_at > 0 && clock - e.covered_at < STREAM_WINDOW {
                k += 1;
            }
        }
        k.max(1)
    }

    fn covers(&mut self, line: u64) -> bool {
        self.clock += 1;
        let page = line >> self.page_shift;
        let found = self.pages.iter().position(|e| e.page == page).or_else(|| {
            if !self.next_page {
                return None;
            }
            let (line_i, distance) = (line as i64, self.distance as i64);
            // A stream that stepped off its page's edge into the adjacent
            // frame goes on there, still knowing its direction.
            let k = self.pages.iter().position(|e| {
                e.dir != 0 && e.page.wrapping_add(e.dir as u64) == page && (1..=distance).contains(&((line_i - e.last as i64) * e.dir))
            })?;
            self.pages[k].page = page;
            Some(k)
        });
        let e = match found {
            Some(k) => &mut self.pages[k],
            None => {
                let k = self.pages.iter().enumerate().min_by_key(|(_, e)| e.used).map_or(0, |(k, _)| k);
                self.pages[k] = StreamEntry { page, last: line, dir: 0, used: self.clock, covered_at: 0 };
                return false;
            }
        };
        e.used = self.clock;
        let step = line as i64 - e.last as i64;
        if step == 0 {
            return false;
        }
        let near = step.unsigned_abs() <= self.distance;
        let covered = near && e.dir == step.signum();
        e.dir = if near { step.signum() } else { 0 };
        e.last = line;
        covered
    }
}

/// A batch of references for the timing thread: the first of a run of
/// batches brings the timing state with it, which stays with the thread
/// until the caller asks for it back (`Worker::take_back`).
pub struct Job {
    pub timing: Option<Box<Timing>>,
    /// Blocks defined since the last batch, added before it is timed.
    pub blocks: Vec<Arc<Block>>,
    pub cpu: usize,
    pub refs: Vec<BatchRef>,
    pub walks: Vec<u64>,
    pub marks: Vec<Mark>,
    /// The batch's accesses (`accesses`) where the caller listed them,
    /// with their repeats in `listed`; else a buffer for the list.
    pub acc: Vec<(u64, u32)>,
    pub listed: Option<u64>,
    /// Functional warming (`Timing::warm_pass`) rather than timing.
    pub functional: bool,
}

/// What comes back of a batch: its buffers for reuse, and the host
/// seconds the timing thread took for it.
pub struct Done {
    pub refs: Vec<BatchRef>,
    pub walks: Vec<u64>,
    pub marks: Vec<Mark>,
    /// A list of accesses to reuse.
    pub acc: Vec<(u64, u32)>,
    pub busy_seconds: f64,
}

/// What goes to the timing thread: a batch, or the request for the timing
/// state once the batches before it are done.
enum ToWorker {
    Batch(Job),
    GiveBack,
}

/// What comes back from it, in the order the requests went.
pub enum FromWorker {
    Done(Done),
    Timing(Box<Timing>),
}

/// Batches the caller may have sent and not yet heard back of: enough to
/// ride out batches that take one thread longer than the other (a batch
/// with faults or promotions in it), few enough that their buffers stay
/// small.
pub const IN_FLIGHT: usize = 4;

/// Waits for a message on `rx`; None once the sender is gone and nothing
/// is left. It spins for a while before it blocks: a batch takes the
/// other thread tens of microseconds, less than a sleep and wake-up costs
/// on a virtual machine, where waking a blocked thread means an interrupt
/// to another virtual CPU.
fn take<T>(rx: &std::sync::mpsc::Receiver<T>) -> Option<T> {
    use std::sync::mpsc::TryRecvError;
    // Long enough to cover the other thread's batch on an idle host,
    // short enough not to steal a busy host's cores.
    const SPIN: std::time::Duration = std::time::Duration::from_micros(100);
    let mut start: Option<std::time::Instant> = None;
    let mut n = 0u32;
    loop {
        match rx.try_recv() {
            Ok(v) => return Some(v),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(32) && start.get_or_insert_with(std::time::Instant::now).elapsed() >= SPIN {
            return rx.recv().ok();
        }
        std::hint::spin_loop();
    }
}

/// A thread that runs the timing model for batches while the caller
/// translates the next ones (the machine's second core). The timing state
/// goes with the first batch and stays until asked back; up to
/// `IN_FLIGHT` batches queue for it meanwhile. Dropping the worker closes
/// its queue: the thread times what is queued and ends.
pub struct Worker {
    jobs: Option<std::sync::mpsc::Sender<ToWorker>>,
    done: std::sync::mpsc::Receiver<FromWorker>,
    handle: Option<std::thread::JoinHandle<()>>,
    /// Batches sent and not yet heard back of.
    in_flight: usize,
}

impl Worker {
    pub fn spawn() -> Worker {
        let (jobs, rx) = std::sync::mpsc::channel::<ToWorker>();
        let (back, done) = std::sync::mpsc::channel::<FromWorker>();
        let handle = std::thread::Builder::new()
            .name("splab-timing".into())
            .spawn(move || {
                let mut timing: Option<Box<Timing>> = None;
                while let Some(msg) = take(&rx) {
                    let job = match msg {
                        ToWorker::GiveBack => {
                            let t = timing.take().expect("the timing state came with a batch");
                            if back.send(FromWorker::Timing(t)).is_err() {
                                return;
                            }
                            continue;
                        }
                        ToWorker::Batch(job) => job,
                    };
                    let start = std::time::Instant::now();
                    if job.timing.is_some() {
                        timing = job.timing;
                    }
                    let t = timing.as_mut().expect("the timing state came with the first batch");
                    t.add_blocks(job.blocks);
                    let mut done = Done { refs: job.refs, walks: job.walks, marks: job.marks, acc: Vec::new(), busy_seconds: 0.0 };
                    if job.functional {
                        t.warm_pass(job.cpu, &done.refs, &done.walks, &done.marks);
                        done.acc = job.acc;
                    } else if let Some(repeats) = job.listed {
                        done.acc = t.run_listed(job.cpu, &done.refs, job.acc, repeats, !done.walks.is_empty(), &done.marks);
                    } else {
                        t.run_batch(job.cpu, &done.refs, &done.walks, &done.marks);
                        done.acc = job.acc;
                    }
                    done.busy_seconds = start.elapsed().as_secs_f64();
                    if back.send(FromWorker::Done(done)).is_err() {
                        return;
                    }
                }
            })
            .expect("spawning the timing thread");
        Worker { jobs: Some(jobs), done, handle: Some(handle), in_flight: 0 }
    }

    fn send_msg(&self, m: ToWorker) {
        self.jobs.as_ref().expect("worker running").send(m).expect("timing thread alive");
    }

    /// Hands a batch to the timing thread (with the timing state, if it
    /// is not there already). Called once fewer than `IN_FLIGHT` batches
    /// are in flight.
    pub fn send(&mut self, job: Job) {
        debug_assert!(self.in_flight < IN_FLIGHT);
        self.send_msg(ToWorker::Batch(job));
        self.in_flight += 1;
    }

    /// Whether another batch may go without waiting.
    pub fn has_room(&self) -> bool {
        self.in_flight < IN_FLIGHT
    }

    /// A batch's return, if one is there (`wait`: waiting for one, of the
    /// batches in flight).
    pub fn done(&mut self, wait: bool) -> Option<Done> {
        if self.in_flight == 0 {
            return None;
        }
        let msg = if wait { Some(take(&self.done).expect("timing thread alive")) } else { self.done.try_recv().ok() };
        match msg? {
            FromWorker::Done(d) => {
                self.in_flight -= 1;
                Some(d)
            }
            FromWorker::Timing(_) => unreachable!("the timing state comes back only when asked"),
        }
    }

    /// The timing state back, once every batch in flight is done; their
    /// returns go to `each`.
    pub fn take_back(&mut self, mut each: impl FnMut(Done)) -> Box<Timing> {
        self.send_msg(ToWorker::GiveBack);
        loop {
            match take(&self.done).expect("timing thread alive") {
                FromWorker::Done(d) => {
                    self.in_flight -= 1;
                    each(d);
                }
                FromWorker::Timing(t) => {
                    debug_assert_eq!(self.in_flight, 0);
                    return t;
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sapphire-rapids as built in; with a stream prefetcher; with
    /// writebacks charged as well (and a last level small enough that a
    /// test's few thousand references evict from it); with walks looking
    /// the caches up from the second and from the third level; and with
    /// a memory interface that bounds streams (a line in 20 cycles).
    fn profiles() -> Vec<Profile> {
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut q = p.clone();
        q.prefetch = Some(Prefetch { streams: 4, distance: 20, line_cycles: 12.5, line_cycles_by_streams: vec![], next_page: false });
        let mut w = q.clone();
        w.memory.writeback_ns = Some(3.0);
        w.cache.l3 = splab_hw::cache::CacheConfig { size_kb: 128, ways: 16, latency: 40 };
        let (mut w2, mut w3, mut w4) = (w.clone(), w.clone(), w.clone());
        w2.cache.walk_level = Some(2);
        w3.cache.walk_level = Some(3);
        w4.cache.walk_level = Some(WALK_MEMORY);
        let mut c = w3.clone();
        c.memory.writeback_ns = None;
        c.memory.channel_gbs = Some(64.0 * c.freq_ghz / 20.0);
        let mut c4 = c.clone();
        c4.cache.walk_level = Some(WALK_MEMORY);
        // 128-byte and 32-byte lines, with the prefetcher, writebacks and
        // the interface (32: also with walks from memory).
        let (mut q128, mut w128, mut c128) = (q.clone(), w.clone(), c.clone());
        for x in [&mut q128, &mut w128, &mut c128] {
            x.cache.line_bytes = Some(128);
        }
        let (mut q32, mut w32, mut c32) = (q.clone(), w.clone(), c4.clone());
        for x in [&mut q32, &mut w32, &mut c32] {
            x.cache.line_bytes = Some(32);
        }
        vec![p, q, w, w2, w3, w4, c, c4, q128, w128, c128, q32, w32, c32]
    }

    /// Lines are the profile's: a stream of 64-byte steps over 128-byte
    /// lines misses every level once a line, half as often as over 64-byte
    /// lines, and writes back half as many lines; over 32-byte lines it
    /// misses as often as over 64-byte ones (every other line).
    #[test]
    fn lines_are_the_profiles_size() {
        let mut p = profiles()[2].clone();
        p.prefetch = None;
        let lines64 = 16 * 1024 * 1024 / 64;
        let run = |p: &Profile| {
            let mut t = Timing::new(p).unwrap();
            stream(&mut t, (0..lines64).map(|i| (1 << 30) + i * 64), true);
            (t.dram_accesses, t.writebacks)
        };
        let (d64, wb64) = run(&p);
        p.cache.line_bytes = Some(128);
        let (d128, wb128) = run(&p);
        assert_eq!(d64, lines64);
        assert_eq!(d128, lines64 / 2);
        assert!(wb128 * 2 <= wb64 && wb128 > 0, "{wb64} {wb128}");
        // 64-byte steps over 32-byte lines touch every other line.
        p.cache.line_bytes = Some(32);
        let (d32, wb32) = run(&p);
        assert_eq!(d32, lines64);
        assert!(wb32 <= wb64 && wb32 > 0, "{wb64} {wb32}");
    }

    /// Running a batch level by level gives exactly the state and cycles of
    /// charging each reference through all levels in turn.
    #[test]
    fn level_by_level_batches_match_reference_by_reference() {
        for p in profiles() {
            batches_match(&p);
        }
    }

    fn batches_match(p: &Profile) {
        let p = p.clone();
        let mut a = Timing::new(&p).unwrap();
        let mut b = Timing::new(&p).unwrap();
        let mut x = 99u64;
        let mut walks = Vec::new();
        let mut refs = Vec::new();
        let line = 1u64 << p.cache.line_shift();
        for i in 0..5000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let start = walks.len() as u32;
            if i % 7 == 0 {
                walks.push((x % (64 << 20)) & !7);
                walks.push(((x >> 3) % (1 << 20)) & !7);
            }
            // Mostly random, sometimes the same line again, sometimes
            // the next line (streams for the prefetcher).
            let pa = if i % 3 == 0 && i > 0 {
                refs.last().map(|r: &BatchRef| r.pa + 8).unwrap()
            } else if i % 5 == 1 && i > 0 {
                refs.last().map(|r: &BatchRef| r.pa + line).unwrap()
            } else {
                x % (512 << 20)
            };
            refs.push(BatchRef::data(pa, i % 11, start, walks.len() as u32, i % 4 == 1));
        }
        for chunk in refs.chunks(300) {
            a.run_batch(1, chunk, &walks, &[]);
        }
        for r in &refs {
            b.charge(1, r.xlat, &walks[r.walks_start as usize..r.walks_end as usize], r.pa, false, r.write);
        }
        assert_eq!(a.cycles(1), b.cycles(1));
        assert!(a.cycles(1) > 0.0);
        assert_eq!((a.cache_hits, a.dram_accesses, a.prefetched), (b.cache_hits, b.dram_accesses, b.prefetched));
        assert_eq!(a.prefetched > 0, p.prefetch.is_some(), "{}", a.prefetched);
        assert_eq!(a.writebacks, b.writebacks);
        assert_eq!(a.writebacks > 0, p.memory.writeback_ns.is_some() || p.memory.channel_gbs.is_some(), "{}", a.writebacks);
        assert_eq!(a.breakdown().data, b.breakdown().data);
        // And the caches hold the same lines: the same accesses hit or miss next.
        for r in &refs[..500] {
            assert_eq!(a.mem_latency(1, r.pa ^ 0x40), b.mem_latency(1, r.pa ^ 0x40));
        }
    }

    /// Walks that start at a lower level never hit the levels above it:
    /// the same walk line read again and again costs the first level's
    /// latency from level 1, the second's from level 2, the third's from
    /// 3, and memory's from `WALK_MEMORY`, where no cache holds it.
    #[test]
    fn walks_look_the_caches_up_from_their_level() {
        for (level, want) in [(1u8, 0usize), (2, 1), (3, 2), (WALK_MEMORY, 3)] {
            let mut p = profiles()[0].clone();
            p.cache.walk_level = Some(level);
            let dram = p.dram_cycles();
            let lat = [p.cache.l1d.latency, p.cache.l2.latency, p.cache.l3.latency, dram][want];
            let mut t = Timing::new(&p).unwrap();
            let walk = 1u64 << 30;
            t.access_latency_from(0, walk, t.walk_level, false);
            assert_eq!(t.access_latency_from(0, walk, t.walk_level, false).0, lat, "walk_level {level}");
        }
    }

    /// Independent references, one a cycle or so of instructions apart.
    fn stream(t: &mut Timing, pas: impl Iterator<Item = u64>, write: bool) -> f64 {
        let refs: Vec<BatchRef> = pas.map(|pa| BatchRef::data(pa, 0, 0, 0, write)).collect();
        let n = refs.len() as f64;
        for c in refs.chunks(1000) {
            t.run_batch(0, c, &[], &[]);
        }
        t.cycles(0) / n
    }

    /// Dirty lines are written back when the last level evicts them:
    /// storing to every line of a region eight times the last level writes
    /// back all but what it still holds, and reads write back nothing.
    #[test]
    fn dirty_lines_are_written_back_when_the_last_level_evicts_them() {
        let mut w = profiles()[2].clone();
        w.prefetch = None;
        let lines = 8 * 1024 * 1024 / 64;
        let run = |p: &Profile, write: bool| {
            let mut t = Timing::new(p).unwrap();
            let per = stream(&mut t, (0..lines).map(|i| (1 << 30) + i * 64), write);
            (t, per)
        };
        let ((st, _), (ld, _)) = (run(&w, true), run(&w, false));
        let held = w.cache.l3.size_kb * 1024 / 64;
        assert!(st.writebacks >= lines - held && st.writebacks <= lines, "{}", st.writebacks);
        assert_eq!(ld.writebacks, 0);
    }

    /// Where the last level is write-through, a dirty line is written
    /// back when the second level evicts it: stores to a region that the
    /// last level holds but the second does not write back all but what
    /// the second still holds, where a write-back last level writes back
    /// none, in a batch and one access at a time alike.
    #[test]
    fn a_write_through_last_level_writes_back_what_the_second_level_evicts() {
        let mut p = profiles()[0].clone();
        p.prefetch = None;
        p.memory.writeback_ns = Some(3.0);
        p.cache.l3 = splab_hw::cache::CacheConfig { size_kb: 32 * 1024, ways: 16, latency: 40 };
        let l3_lines = p.cache.l3.size_kb * 1024 / 64;
        let l2_lines = p.cache.l2.size_kb * 1024 / 64;
        let lines = l3_lines / 4;
        assert!(lines >= 4 * l2_lines, "{lines} lines against the second level's {l2_lines}");
        let pas = || (0..lines).map(|i| (1 << 30) + i * 64);
        for wt in [false, true] {
            p.cache.last_level_write_through = Some(wt);
            let mut batched = Timing::new(&p).unwrap();
            stream(&mut batched, pas(), true);
            let mut single = Timing::new(&p).unwrap();
            for pa in pas() {
                single.charge(0, 0, &[], pa, false, true);
            }
            for t in [&batched, &single] {
                if wt {
                    assert!(t.writebacks >= lines - l2_lines && t.writebacks <= lines, "{}", t.writebacks);
                } else {
                    assert_eq!(t.writebacks, 0);
                }
            }
        }
    }

    /// With a memory interface, a stream of independent misses runs no
    /// faster than a line a line time, and stores that evict dirty lines
    /// move two lines each.
    #[test]
    fn the_memory_interface_bounds_fills_and_writebacks() {
        let mut p = profiles()[0].clone();
        p.cache.l3 = splab_hw::cache::CacheConfig { size_kb: 128, ways: 16, latency: 40 };
        let line = 20.0;
        p.memory.channel_gbs = Some(64.0 * p.freq_ghz / line);
        let lines = 8 * 1024 * 1024 / 64;
        let at = |i: u64| (1 << 30) + (i * 2654435761 % lines) * 64;
        let (mut a, mut b) = (Timing::new(&p).unwrap(), Timing::new(&p).unwrap());
        let ld = stream(&mut a, (0..lines).map(at), false);
        let st = stream(&mut b, (0..lines).map(at).chain((0..lines).map(at)), true);
        assert!((ld - line).abs() < 0.1 * line, "loads {ld}");
        assert!(b.writebacks > lines / 2 && st > 1.3 * line, "stores {st}, {} writebacks", b.writebacks);
    }

    /// The prefetcher follows a page once two misses step the same way,
    /// covers later misses that keep stepping within the distance, and
    /// forgets the least recently used page for a new one.
    #[test]
    fn streams_train_then_cover() {
        let mut s = Streams::new(&Prefetch { streams: 2, distance: 4, line_cycles: 10.0, line_cycles_by_streams: vec![], next_page: false }, LINE_SHIFT);
        let page = |p: u64, l: u64| (p << PAGE_LINE_SHIFT) + l;
        // Ascending in page 7: two misses train it, the rest are covered.
        let got: Vec<bool> = (0..6).map(|l| s.covers(page(7, l))).collect();
        assert_eq!(got, [false, false, true, true, true, true]);
        // A jump beyond the distance untrains it; stepping again retrains.
        assert!(!s.covers(page(7, 30)));
        assert!(!s.covers(page(7, 31)));
        assert!(s.covers(page(7, 33)));
        // Descending in page 9.
        let got: Vec<bool> = (0..4).map(|l| s.covers(page(9, 60 - l))).collect();
        assert_eq!(got, [false, false, true, true]);
        // A third page evicts page 7 (least recently used): it starts over.
        assert!(!s.covers(page(11, 0)));
        assert!(!s.covers(page(7, 34)));
        assert!(!s.covers(page(7, 35)));
        assert!(s.covers(page(7, 36)));
    }

    /// With `next_page`, a stream that steps off its page's edge into the
    /// adjacent frame goes on covering there, up or down; a stream that
    /// jumps to a frame further off, or one without `next_page`, starts
    /// over with two misses.
    #[test]
    fn streams_go_on_into_the_next_frame_only_where_the_profile_says() {
        let page = |p: u64, l: u64| (p << PAGE_LINE_SHIFT) + l;
        let run = |next_page: bool, pages: &[u64], down: bool| -> Vec<bool> {
            let mut s = Streams::new(&Prefetch { streams: 4, distance: 8, line_cycles: 10.0, line_cycles_by_streams: vec![], next_page }, LINE_SHIFT);
            let lines: Vec<u64> = (0..64).map(|l| if down { 63 - l } else { l }).collect();
            pages.iter().flat_map(|&p| lines.iter().map(move |&l| page(p, l))).map(|x| s.covers(x)).collect()
        };
        let uncovered = |v: &[bool]| v.iter().filter(|&&c| !c).count();
        // Three contiguous frames up, three down: two misses to train.
        assert_eq!(uncovered(&run(true, &[5, 6, 7], false)), 2);
        assert_eq!(uncovered(&run(true, &[7, 6, 5], true)), 2);
        // Without it, or across scattered frames, each page trains anew.
        assert_eq!(uncovered(&run(false, &[5, 6, 7], false)), 6);
        assert_eq!(uncovered(&run(true, &[5, 9, 2], false)), 6);
        // Going down into the frame above is not going on.
        assert_eq!(uncovered(&run(true, &[6, 7], true)), 4);
    }

    /// Streams followed at once are counted where the line time depends
    /// on it: one stream counts once (twice for a few misses after it
    /// steps into its next page); three interleaved count three; and one
    /// left alone again counts once after the window.
    #[test]
    fn streams_followed_at_once_are_counted() {
        let pf = Prefetch { streams: 8, distance: 16, line_cycles: 10.0, line_cycles_by_streams: vec![30.0, 20.0, 10.0], next_page: false };
        let mut s = Streams::new(&pf, LINE_SHIFT);
        let page = |p: u64, l: u64| (p << PAGE_LINE_SHIFT) + l;
        let one: Vec<u32> = (0..128).map(|i| s.cover(page(3 + i / 64, i % 64))).collect();
        assert_eq!(&one[..4], [0, 0, 1, 1]);
        assert_eq!(&one[64..67], [0, 0, 2], "{one:?}");
        assert!(one[2..64].iter().chain(&one[80..]).all(|&k| k == 1), "{one:?}");
        let three: Vec<u32> = (0..30).map(|i| s.cover(page(10 + i % 3, i / 3))).collect();
        assert_eq!(&three[24..], [3, 3, 3, 3, 3, 3], "{three:?}");
        let alone: Vec<u32> = (10..40).map(|l| s.cover(page(10, l))).collect();
        assert_eq!(alone[29], 1, "{alone:?}");
        // Without a line time by streams nothing is counted.
        let mut u = Streams::new(&Prefetch { line_cycles_by_streams: vec![], ..pf }, LINE_SHIFT);
        let got: Vec<u32> = (0..30).map(|i| u.cover(page(10 + i % 3, i / 3))).collect();
        assert!(got[24..].iter().all(|&k| k == 1), "{got:?}");
    }

    /// A stream that misses L2 runs at the prefetcher's line time, while
    /// the same lines in random order pay the memory latency over the
    /// line-fill buffers.
    #[test]
    fn prefetched_streams_run_at_the_line_time() {
        let q = &profiles()[1];
        let mut t = Timing::new(q).unwrap();
        let seq = stream(&mut t, (0..4096u64).map(|i| (1 << 30) + i * 64), false);
        assert!(t.prefetched >= 4096 - 2 * 64, "{}", t.prefetched);
        let line = q.prefetch.as_ref().unwrap().line_cycles;
        assert!((seq - line).abs() < 0.1 * line, "{seq}");
        let mut u = Timing::new(q).unwrap();
        let rnd = stream(&mut u, (0..4096u64).map(|i| (2 << 30) + (i * 2654435761 % 4096) * 4096), false);
        let want = q.dram_cycles() as f64 / q.core.mshrs as f64;
        assert!(rnd > seq && (rnd - want).abs() < 0.25 * want, "{rnd} vs {want}");
    }

    /// With a line time by streams, one stream runs at the first value and
    /// three interleaved at the third.
    #[test]
    fn line_time_follows_the_streams_at_once() {
        let mut q = profiles()[1].clone();
        q.prefetch.as_mut().unwrap().line_cycles_by_streams = vec![30.0, 20.0, 10.0];
        let one = |i: u64| (1 << 30) + i * 64;
        let three = |i: u64| (1 << 30) + (i % 3) * (64 << 20) + (i / 3) * 64;
        let (a, b) = (stream(&mut Timing::new(&q).unwrap(), (0..6144).map(one), false), stream(&mut Timing::new(&q).unwrap(), (0..6144).map(three), false));
        assert!((a - 30.0).abs() < 4.0 && (b - 10.0).abs() < 3.0, "{a} {b}");
    }
}
