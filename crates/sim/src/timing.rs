//! The timing model: caches for data and page-table lines, and the cycles
//! each CPU has spent, from the machine profile. It only consumes the
//! physical addresses the access path produces; nothing the access path
//! decides depends on it, which is what lets a batch's references be timed
//! after (and on another thread than) their translation.

use splab_hw::cache::{Cache, LINE_SHIFT};
use splab_hw::profile::{Prefetch, Profile};

/// Where the time went, in cycles, summed over CPUs.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct CycleBreakdown {
    pub data: f64,
    pub translation: f64,
    pub kernel: f64,
    /// Instructions' own work apart from their memory references (real
    /// programs run online; `instruction_cycles`).
    pub core: f64,
}

/// Cycles `n` instructions cost apart from their memory references: the
/// profile's `[core] cycles_per_instruction` each, or nothing where the
/// profile has no `[core]`.
pub fn instruction_cycles(p: &Profile, n: u64) -> f64 {
    p.core.map_or(0.0, |c| c.cycles_per_instruction * n as f64)
}

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
    /// Accesses that followed this one on its line with nothing between
    /// them, translated through the same first-level TLB entry without an
    /// assist, and stores only after a store: each a first-level hit that
    /// changes no cache state (the line is the cache's last), timed as one.
    pub repeats: u16,
}

pub struct Timing {
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    l3: Cache,
    dram: u32,
    inv_walk_mlp: f64,
    inv_data_mlp: f64,
    /// Per CPU, the share of an independent reference's latency it costs:
    /// 1 / data_mlp, or the window's share for the loop the CPU runs
    /// (`set_share`, `Profile::window_share`).
    share: Vec<f64>,
    /// `Profile::store_scale`: 1 unless stores overlap less than loads.
    store_scale: f64,
    /// The profile's `walk_holds_slot`: how translation and data overlap.
    slots: bool,
    /// The first cache level a walk's references look up
    /// (`Caches::walk_level`): 1, or 2 or 3 where the OS made its page
    /// tables cacheable in the outer levels only.
    walk_level: u8,
    /// The stream prefetcher beside each CPU's L2, if the profile has one,
    /// and what a covered miss costs: when overlapped with others (the
    /// stream's line time, scaled up by data_mlp as the cost divides it
    /// back down) and when a dependent load waits for it, by the number of
    /// streams followed at once (one value when the profile gives one
    /// line time for any number).
    streams: Vec<Streams>,
    prefetched_lat: Vec<u32>,
    prefetched_dependent_lat: Vec<u32>,
    /// Second-level misses the prefetcher covered.
    pub prefetched: u64,
    /// Dirty lines, where the profile charges writebacks or bounds the
    /// memory interface.
    dirty: Option<Dirty>,
    /// Cycles a line holds the memory interface (`Memory::channel_gbs`;
    /// 0: it bounds nothing).
    channel: f64,
    /// Lines the reference being charged moved to or from memory (its
    /// walk's and its data's fills, and the writebacks they caused).
    moved: u32,
    /// Scratch for batches: the same, by access.
    moved_by: Vec<u8>,
    /// Dirty lines the last level evicted (written back to memory).
    pub writebacks: u64,
    /// Cycles per CPU of translation and data access (kernel work is
    /// counted by the system beside these).
    pub cycles: Vec<f64>,
    pub breakdown: CycleBreakdown,
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
    /// Stores' extra cycles (`store_extra`), with their accesses.
    extras: Vec<(u32, u32)>,
}

/// The lines written since they last left the last-level cache, one bit
/// each by physical line number, and what writing one back costs (beyond
/// the memory interface's time for it, `Timing::channel`). The
/// last level stands for the whole hierarchy here: a line is dirty from
/// the store that writes it, whichever level it hit in, until the last
/// level evicts it (the model's levels are not inclusive, so a line a
/// store hit in L1 after the last level dropped it is written back the
/// next time the last level evicts it).
struct Dirty {
    bits: Vec<u64>,
    /// Latency added to an independent access whose fill evicts a dirty
    /// line: the profile's writeback time, scaled up by data_mlp as the
    /// cost divides it back down (as a prefetched line's is). A dependent
    /// access adds nothing: the write is buffered and nothing waits for it.
    /// 0 where the profile has no `writeback_ns`.
    lat: u32,
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

/// `f` of the prefetcher's line time for 1, 2, ... streams at once (one
/// value where it does not depend on the number; 0 without a prefetcher).
fn by_streams(p: &Profile, f: impl Fn(f64) -> u32) -> Vec<u32> {
    match &p.prefetch {
        None => vec![0],
        Some(pf) => (1..=pf.line_cycles_by_streams.len().max(1)).map(|k| f(pf.line_cycles_at(k))).collect(),
    }
}

impl Timing {
    pub fn new(p: &Profile) -> Result<Timing, String> {
        let mut l1 = Vec::new();
        let mut l2 = Vec::new();
        for _ in 0..p.cpus {
            l1.push(Cache::new(&p.cache.l1d)?);
            l2.push(Cache::new(&p.cache.l2)?);
        }
        Ok(Timing {
            l1,
            l2,
            l3: Cache::new(&p.cache.l3)?,
            dram: p.dram_cycles(),
            inv_walk_mlp: 1.0 / p.overlap.walk_mlp,
            inv_data_mlp: 1.0 / p.overlap.data_mlp,
            share: vec![1.0 / p.overlap.data_mlp; p.cpus],
            store_scale: p.store_scale(),
            slots: p.overlap.walk_holds_slot.unwrap_or(false),
            walk_level: p.cache.walk_level(),
            streams: p.prefetch.iter().flat_map(|pf| (0..p.cpus).map(|_| Streams::new(pf))).collect(),
            prefetched_lat: by_streams(p, |c| (c * p.overlap.data_mlp).round() as u32),
            prefetched_dependent_lat: by_streams(p, |c| (c.round() as u32).max(p.cache.l2.latency)),
            prefetched: 0,
            dirty: (p.writeback_cycles().is_some() || p.channel_line_cycles().is_some())
                .then(|| Dirty { bits: Vec::new(), lat: p.writeback_cycles().map_or(0, |c| (c * p.overlap.data_mlp).round() as u32) }),
            channel: p.channel_line_cycles().unwrap_or(0.0),
            moved: 0,
            moved_by: Vec::new(),
            writebacks: 0,
            cycles: vec![0.0; p.cpus],
            breakdown: CycleBreakdown::default(),
            cache_hits: [0; 3],
            dram_accesses: 0,
            scratch: Vec::new(),
            to_l2: Vec::new(),
            to_l3: Vec::new(),
            to_dram: Vec::new(),
            covered: Vec::new(),
            evicted: Vec::new(),
            extras: Vec::new(),
        })
    }

    /// Latency of one access to physical address `pa` through the caches
    /// and the prefetcher.
    #[inline]
    pub fn mem_latency(&mut self, cpu: usize, pa: u64) -> u32 {
        self.access_latency(cpu, pa, false, false).0
    }

    /// `access_latency` of a walk's reference, which looks the caches up
    /// from `walk_level` on.
    #[inline]
    fn walk_latency(&mut self, cpu: usize, pa: u64, dependent: bool) -> u32 {
        self.access_latency_from(cpu, pa, dependent, false, self.walk_level).0
    }

    /// `mem_latency`, and for an independent `store` its `store_extra`
    /// (else 0); `dependent`: as a load that the next one waits for sees
    /// it (which matters for a miss the prefetcher covered).
    #[inline]
    fn access_latency(&mut self, cpu: usize, pa: u64, dependent: bool, store: bool) -> (u32, u32) {
        self.access_latency_from(cpu, pa, dependent, store, 1)
    }

    /// `access_latency` for an access that looks the caches up from level
    /// `from` (1 to 3) on.
    #[inline]
    fn access_latency_from(&mut self, cpu: usize, pa: u64, dependent: bool, store: bool, from: u8) -> (u32, u32) {
        if from <= 1 && self.l1[cpu].access(pa) {
            self.cache_hits[0] += 1;
            return (self.l1[cpu].latency, 0);
        }
        if from <= 2 && self.l2[cpu].access(pa) {
            self.cache_hits[1] += 1;
            let lat = self.l2[cpu].latency;
            return (lat, if store { self.store_extra(lat) } else { 0 });
        }
        let covered = if self.streams.is_empty() { 0 } else { self.streams[cpu].cover(pa >> LINE_SHIFT) };
        let (hit, wb) = match self.dirty.as_mut() {
            None => (self.l3.access(pa), 0),
            Some(d) => {
                let (hit, victim) = self.l3.access_evicting(pa);
                let wb = victim.is_some_and(|v| d.take(v));
                self.writebacks += wb as u64;
                self.moved += wb as u32;
                (hit, if wb && !dependent { d.lat } else { 0 })
            }
        };
        let lat = if hit {
            self.cache_hits[2] += 1;
            self.l3.latency
        } else {
            self.dram_accesses += 1;
            self.moved += 1;
            self.dram
        };
        if covered > 0 {
            self.prefetched += 1;
            (wb + self.prefetched_latency(lat, dependent, covered), 0)
        } else {
            (wb + lat, if store { self.store_extra(lat) } else { 0 })
        }
    }

    /// What an independent store that missed the first level and found
    /// its line `lat` away holds the store buffer beyond what a load holds
    /// a miss slot: its latency scaled by data_mlp / store_mlp, less the
    /// latency (`Overlap::store_mlp`). It is charged on top of the
    /// reference's overlapped cost, over data_mlp: the store buffer drains
    /// apart from the walkers and the load miss slots, so walks do not hide
    /// it. A store the prefetcher covered streams as a load does (none).
    #[inline]
    fn store_extra(&self, lat: u32) -> u32 {
        (lat as f64 * self.store_scale).round() as u32 - lat
    }

    /// An independent reference's cycles `cyc`, at least the memory
    /// interface's time for the `moved` lines it moved
    /// (`Memory::channel_gbs`).
    #[inline(always)]
    fn channel_bound(&self, cyc: f64, moved: u32) -> f64 {
        if moved == 0 {
            cyc
        } else {
            cyc.max(moved as f64 * self.channel)
        }
    }

    /// A store to `pa` made its line dirty.
    #[inline]
    fn stored(&mut self, pa: u64) {
        if let Some(d) = self.dirty.as_mut() {
            d.mark(pa >> LINE_SHIFT);
        }
    }

    /// The latency of a miss in L2 the prefetcher covered while following
    /// `streams` streams, where the caches below would have answered in
    /// `lat`.
    #[inline]
    fn prefetched_latency(&self, lat: u32, dependent: bool, streams: u32) -> u32 {
        let v = if dependent { &self.prefetched_dependent_lat } else { &self.prefetched_lat };
        lat.min(v[(streams as usize).clamp(1, v.len()) - 1])
    }

    /// Cycles of an independent reference with `xlat` cycles of
    /// translation and `data` of data access, and the part of them put
    /// down to translation (see `Overlap::walk_holds_slot`). `walked`:
    /// the translation took a page walk; where walks hold miss slots, only
    /// those are bound by the walkers, and a translation the TLBs gave (an
    /// L2 TLB hit, pipelined as a cache access is) adds to the slot's time.
    /// `share`: the CPU's (1 / data_mlp, or the window's for its loop),
    /// in place of 1 / data_mlp.
    #[inline(always)]
    fn overlapped(&self, share: f64, xlat: u32, data: u32, walked: bool) -> (f64, f64) {
        if self.slots {
            let dc = data as f64 * share;
            let held = (xlat + data) as f64 * share;
            let cyc = if walked { (xlat as f64 * self.inv_walk_mlp).max(held) } else { held }.max(1.0);
            (cyc, cyc - dc)
        } else {
            let xc = xlat as f64 * self.inv_walk_mlp;
            ((xc + data as f64 * share).max(1.0), xc)
        }
    }

    /// Sets the share of an independent reference's latency that `cpu`'s
    /// references cost from now on (`Profile::window_share` for the loop
    /// it runs; 1 / data_mlp, the least, for none). Dependent references
    /// pay their whole latency either way.
    pub fn set_share(&mut self, cpu: usize, share: f64) {
        self.share[cpu] = share.max(self.inv_data_mlp);
    }

    /// Charges one access: its translation cycles, its walk references and
    /// its data reference through the caches, overlapped as the profile
    /// says unless the access depends on the previous one. A `write`
    /// dirties the line.
    #[inline]
    pub fn charge(&mut self, cpu: usize, xlat: u32, walks: &[u64], pa: u64, dependent: bool, write: bool) {
        let mut xlat = xlat;
        self.moved = 0;
        for &w in walks {
            xlat += self.walk_latency(cpu, w, dependent);
        }
        let store = write && !dependent && self.store_scale != 1.0;
        let (data, extra) = self.access_latency(cpu, pa, dependent, store);
        if write {
            self.stored(pa);
        }
        let (cyc, xc) = if dependent {
            let (xc, dc) = (xlat as f64, data as f64);
            ((xc + dc).max(1.0), xc)
        } else {
            let (cyc, xc) = self.overlapped(self.share[cpu], xlat, data, !walks.is_empty());
            (self.channel_bound(cyc + extra as f64 * self.inv_data_mlp, self.moved), xc)
        };
        self.cycles[cpu] += cyc;
        self.breakdown.translation += xc;
        self.breakdown.data += cyc - xc;
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
        let lat = l1.latency as f64;
        if write {
            self.stored(pa);
        }
        self.cache_hits[0] += 1;
        let cyc = if dependent { lat } else { (lat * self.share[cpu]).max(1.0) };
        self.cycles[cpu] += cyc;
        self.breakdown.data += cyc;
        true
    }


    /// The first two levels' passes of `run_batch` where walks start
    /// below the first level: the data references go through L1, then its
    /// misses merged in program order with the walk references through L2
    /// (walk_level 2), or L1's data misses through L2 and its misses
    /// merged with the walk references on to L3 (walk_level 3). `to_l2`
    /// ends with the data references that missed L1 (what stores' extras
    /// are read from), `to_l3` with every access that goes on to L3.
    fn pass_walks_below_l1(&mut self, cpu: usize, refs: &[BatchRef], acc: &mut [(u64, u32)], to_l2: &mut Vec<u32>, to_l3: &mut Vec<u32>) {
        let mut data = Vec::with_capacity(refs.len());
        let mut walk = Vec::with_capacity(acc.len() - refs.len());
        let mut k = 0u32;
        for r in refs {
            walk.extend(k..k + (r.walks_end - r.walks_start));
            k += r.walks_end - r.walks_start;
            data.push(k);
            k += 1;
        }
        let merge = |a: &[u32], b: &[u32]| -> Vec<u32> {
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
        };
        self.l1[cpu].pass(acc, Some(&data), to_l2, 0);
        self.cache_hits[0] += (data.len() - to_l2.len()) as u64;
        if self.walk_level == 2 {
            let sel = merge(to_l2, &walk);
            self.l2[cpu].pass(acc, Some(&sel), to_l3, 0);
            self.cache_hits[1] += (sel.len() - to_l3.len()) as u64;
            // Stores' extras look for data references only in to_l2.
        } else {
            let mut l3_data = Vec::new();
            self.l2[cpu].pass(acc, Some(to_l2), &mut l3_data, 0);
            self.cache_hits[1] += (to_l2.len() - l3_data.len()) as u64;
            *to_l3 = merge(&l3_data, &walk);
        }
    }

    /// Times a batch of references. Each cache only ever sees the accesses
    /// that reach it, in program order, so the batch is run one level at a
    /// time: every access through L1, then L1's misses through L2, then
    /// L2's misses through L3. The states and latencies are exactly those of
    /// running each access through all levels in turn; the passes are loops
    /// of independent lookups that the host overlaps.
    pub fn run_batch(&mut self, cpu: usize, refs: &[BatchRef], walks: &[u64]) {
        let mut acc = std::mem::take(&mut self.scratch);
        let mut to_l2 = std::mem::take(&mut self.to_l2);
        let mut to_l3 = std::mem::take(&mut self.to_l3);
        acc.clear();
        to_l2.clear();
        to_l3.clear();
        acc.reserve(refs.len() + walks.len());
        let mut repeats = 0u64;
        for r in refs {
            if r.walks_start != r.walks_end {
                acc.extend(walks[r.walks_start as usize..r.walks_end as usize].iter().map(|&w| (w, 0)));
            }
            acc.push((r.pa, 0));
            repeats += u64::from(r.repeats);
        }
        // The repeats: first-level hits on the line of the access before.
        self.l1[cpu].hits += repeats;
        self.cache_hits[0] += repeats;
        if self.walk_level == 1 || walks.is_empty() {
            self.l1[cpu].pass(&mut acc, None, &mut to_l2, 0);
            self.cache_hits[0] += (acc.len() - to_l2.len()) as u64;
            self.l2[cpu].pass(&mut acc, Some(&to_l2), &mut to_l3, 0);
            self.cache_hits[1] += (to_l2.len() - to_l3.len()) as u64;
        } else {
            self.pass_walks_below_l1(cpu, refs, &mut acc, &mut to_l2, &mut to_l3);
        }
        // The prefetcher sees L2's misses in order.
        let mut covered = std::mem::take(&mut self.covered);
        covered.clear();
        if !self.streams.is_empty() {
            let s = &mut self.streams[cpu];
            covered.extend(to_l3.iter().filter_map(|&i| match s.cover(acc[i as usize].0 >> LINE_SHIFT) {
                0 => None,
                k => Some((i, k)),
            }));
        }
        // The last level's tag store is too big for the host's caches:
        // fetch the sets a few accesses ahead, so that their loads overlap.
        let mut dram = std::mem::take(&mut self.to_dram);
        dram.clear();
        let mut evicted = std::mem::take(&mut self.evicted);
        evicted.clear();
        if self.dirty.is_some() {
            self.l3.pass_evicting(&mut acc, Some(&to_l3), &mut dram, 12, &mut evicted);
        } else {
            self.l3.pass(&mut acc, Some(&to_l3), &mut dram, 12);
        }
        for &i in &dram {
            acc[i as usize].1 = self.dram;
        }
        // Lines each access moved to or from memory, where the interface
        // bounds the references' cost.
        let mut moved = std::mem::take(&mut self.moved_by);
        moved.clear();
        if self.channel > 0.0 {
            moved.resize(acc.len(), 0);
            for &i in &dram {
                moved[i as usize] += 1;
            }
        }
        for &(i, k) in &covered {
            acc[i as usize].1 = self.prefetched_latency(acc[i as usize].1, false, k);
        }
        let mut extras = std::mem::take(&mut self.extras);
        extras.clear();
        let stores = self.store_scale != 1.0;
        if stores || self.dirty.is_some() {
            // In program order, as `charge` sees them: a store's extra
            // (where it missed the first level, its index in to_l2, and
            // the prefetcher did not cover it), the access's evictions (of
            // its walk references', then its data's fill), then its store.
            // The lists are all in order.
            let (mut j, mut c, mut e, mut k) = (0, 0, 0, 0);
            for r in refs {
                k += (r.walks_end - r.walks_start) as usize + 1;
                let i = (k - 1) as u32;
                if stores && r.write {
                    while to_l2.get(j).is_some_and(|&m| m < i) {
                        j += 1;
                    }
                    while covered.get(c).is_some_and(|x| x.0 < i) {
                        c += 1;
                    }
                    if to_l2.get(j) == Some(&i) && covered.get(c).map(|x| x.0) != Some(i) {
                        extras.push((i, self.store_extra(acc[i as usize].1)));
                    }
                }
                if let Some(d) = self.dirty.as_mut() {
                    while let Some(&(v, line)) = evicted.get(e).filter(|x| (x.0 as usize) < k) {
                        if d.take(line) {
                            self.writebacks += 1;
                            acc[v as usize].1 += d.lat;
                            if let Some(m) = moved.get_mut(v as usize) {
                                *m += 1;
                            }
                        }
                        e += 1;
                    }
                    if r.write {
                        d.mark(r.pa >> LINE_SHIFT);
                    }
                }
            }
        }
        self.evicted = evicted;
        self.prefetched += covered.len() as u64;
        self.covered = covered;
        self.cache_hits[2] += (to_l3.len() - dram.len()) as u64;
        self.dram_accesses += dram.len() as u64;
        self.to_dram = dram;
        // Cycles, reference by reference, as `charge` computes them (the
        // sums in the same order, so the same to the last bit).
        let (mut cycles, mut tr, mut da) = (self.cycles[cpu], self.breakdown.translation, self.breakdown.data);
        let (mut k, mut e) = (0, 0);
        let share = self.share[cpu];
        let (rc, rx) = self.overlapped(share, 0, self.l1[cpu].latency, false);
        for r in refs {
            let mut xlat = r.xlat;
            let nw = (r.walks_end - r.walks_start) as usize;
            let first = k;
            if nw > 0 {
                xlat += acc[k..k + nw].iter().map(|a| a.1).sum::<u32>();
                k += nw;
            }
            let data = acc[k].1;
            let (mut cyc, xc) = self.overlapped(share, xlat, data, nw > 0);
            if extras.get(e).is_some_and(|x| x.0 as usize == k) {
                cyc += extras[e].1 as f64 * self.inv_data_mlp;
                e += 1;
            }
            k += 1;
            if !moved.is_empty() {
                cyc = self.channel_bound(cyc, moved[first..k].iter().map(|&m| m as u32).sum());
            }
            cycles += cyc;
            tr += xc;
            da += cyc - xc;
            for _ in 0..r.repeats {
                cycles += rc;
                tr += rx;
                da += rc - rx;
            }
        }
        self.cycles[cpu] = cycles;
        self.breakdown.translation = tr;
        self.breakdown.data = da;
        self.scratch = acc;
        self.moved_by = moved;
        self.to_l2 = to_l2;
        self.to_l3 = to_l3;
        self.extras = extras;
    }
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

/// Lines in a 4 KB page: prefetchers of this kind train on one page at a
/// time, since the next physical page need not be the next virtual one; a
/// stream goes on into the adjacent frame only with `next_page`.
const PAGE_LINE_SHIFT: u32 = 12 - LINE_SHIFT;

impl Streams {
    fn new(p: &Prefetch) -> Streams {
        Streams {
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
        let page = line >> PAGE_LINE_SHIFT;
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
        let page = line >> PAGE_LINE_SHIFT;
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

/// A batch of references travelling to the timing thread with the timing
/// state itself, and back.
pub struct Job {
    pub timing: Box<Timing>,
    pub cpu: usize,
    pub refs: Vec<BatchRef>,
    pub walks: Vec<u64>,
}

/// A one-item hand-off between two threads. The waiting side spins for a
/// while before it parks: a batch takes the other thread tens of
/// microseconds, less than a sleep and wake-up costs on a virtual machine,
/// where waking a parked thread means an interrupt to another virtual CPU.
struct Slot<T> {
    item: std::sync::Mutex<Option<T>>,
    full: std::sync::atomic::AtomicBool,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot { item: std::sync::Mutex::new(None), full: std::sync::atomic::AtomicBool::new(false) }
    }

    /// Leaves `v` for the waiter and wakes it if it parked. The slot must be
    /// empty (one item is in flight at a time).
    fn put(&self, v: T, waiter: &std::thread::Thread) {
        *self.item.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
        self.full.store(true, std::sync::atomic::Ordering::Release);
        waiter.unpark();
    }

    fn try_take(&self) -> Option<T> {
        if !self.full.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.full.store(false, std::sync::atomic::Ordering::Relaxed);
        self.item.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Waits for an item; None once `closed()` holds and the slot is empty.
    /// The putter wakes the thread it was given; a waiter on another thread
    /// still sees the item within a millisecond.
    fn take(&self, closed: impl Fn() -> bool) -> Option<T> {
        // Long enough to cover the other thread's batch on an idle host,
        // short enough not to steal a busy host's cores.
        const SPIN: std::time::Duration = std::time::Duration::from_micros(100);
        let mut start: Option<std::time::Instant> = None;
        let mut n = 0u32;
        loop {
            if let Some(v) = self.try_take() {
                return Some(v);
            }
            if closed() {
                return self.try_take();
            }
            n = n.wrapping_add(1);
            if !n.is_multiple_of(32) {
                std::hint::spin_loop();
                continue;
            }
            let t0 = *start.get_or_insert_with(std::time::Instant::now);
            if t0.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                // A put between the check and here leaves the unpark token,
                // so this returns at once.
                std::thread::park_timeout(std::time::Duration::from_millis(1));
            }
        }
    }
}

struct Shared {
    jobs: Slot<Job>,
    done: Slot<Job>,
    closed: std::sync::atomic::AtomicBool,
}

/// A thread that runs the timing model for batches while the caller
/// translates the next one (the machine's second core). One batch is in
/// flight at a time: the timing state travels with it.
pub struct Worker {
    shared: std::sync::Arc<Shared>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    pub fn spawn() -> Worker {
        let shared = std::sync::Arc::new(Shared { jobs: Slot::new(), done: Slot::new(), closed: false.into() });
        let (sh, back) = (shared.clone(), std::thread::current());
        let handle = std::thread::Builder::new()
            .name("splab-timing".into())
            .spawn(move || {
                while let Some(mut job) = sh.jobs.take(|| sh.closed.load(std::sync::atomic::Ordering::Acquire)) {
                    job.timing.run_batch(job.cpu, &job.refs, &job.walks);
                    sh.done.put(job, &back);
                }
            })
            .expect("spawning the timing thread");
        Worker { shared, handle: Some(handle) }
    }

    /// Hands a batch to the timing thread. Called from the thread that
    /// spawned the worker, with no batch in flight.
    pub fn send(&self, job: Job) {
        let h = self.handle.as_ref().expect("worker running");
        self.shared.jobs.put(job, h.thread());
    }

    /// Waits for the batch in flight.
    pub fn recv(&self) -> Job {
        let h = self.handle.as_ref().expect("worker running");
        self.shared.done.take(|| h.is_finished()).expect("timing thread alive")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.closed.store(true, std::sync::atomic::Ordering::Release);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sapphire-rapids as built in; with a stream prefetcher and walks
    /// holding miss slots; with writebacks charged as well; with stores
    /// overlapping less than loads; and with walks looking the caches up
    /// from the second and from the third level.
    fn profiles() -> Vec<Profile> {
        let p = Profile::load("sapphire-rapids").unwrap();
        let mut q = p.clone();
        q.overlap.walk_holds_slot = Some(true);
        q.prefetch = Some(Prefetch { streams: 4, distance: 20, line_cycles: 12.5, line_cycles_by_streams: vec![], next_page: false });
        // And charging writebacks, with a last level small enough that a
        // test's few thousand references evict from it.
        let mut w = q.clone();
        w.memory.writeback_ns = Some(3.0);
        w.cache.l3 = splab_hw::cache::CacheConfig { size_kb: 128, ways: 16, latency: 40 };
        // And stores that miss overlapping half as much as loads.
        let mut s = w.clone();
        s.overlap.store_mlp = Some(s.overlap.data_mlp / 2.0);
        // And walks that start below the first level (second, third).
        let (mut w2, mut w3) = (s.clone(), s.clone());
        w2.cache.walk_level = Some(2);
        w3.cache.walk_level = Some(3);
        // And a memory interface that bounds streams (a line in 20
        // cycles), without a writeback cost of its own.
        let mut c = w3.clone();
        c.memory.writeback_ns = None;
        c.memory.channel_gbs = Some(64.0 * c.freq_ghz / 20.0);
        vec![p, q, w, s, w2, w3, c]
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
                refs.last().map(|r: &BatchRef| r.pa + 64).unwrap()
            } else {
                x % (512 << 20)
            };
            refs.push(BatchRef { pa, xlat: i % 11, walks_start: start, walks_end: walks.len() as u32, write: i % 4 == 1, repeats: 0 });
        }
        for chunk in refs.chunks(300) {
            a.run_batch(1, chunk, &walks);
        }
        for r in &refs {
            b.charge(1, r.xlat, &walks[r.walks_start as usize..r.walks_end as usize], r.pa, false, r.write);
        }
        assert_eq!(a.cycles, b.cycles);
        assert_eq!((a.cache_hits, a.dram_accesses, a.prefetched), (b.cache_hits, b.dram_accesses, b.prefetched));
        assert_eq!(a.prefetched > 0, p.prefetch.is_some(), "{}", a.prefetched);
        assert_eq!(a.writebacks, b.writebacks);
        assert_eq!(a.writebacks > 0, p.memory.writeback_ns.is_some() || p.memory.channel_gbs.is_some(), "{}", a.writebacks);
        assert_eq!(a.breakdown.data, b.breakdown.data);
        // And the caches hold the same lines: the same accesses hit or miss next.
        for r in &refs[..500] {
            assert_eq!(a.mem_latency(1, r.pa ^ 0x40), b.mem_latency(1, r.pa ^ 0x40));
        }
    }

    /// Walks that start at a lower level never hit the levels above it:
    /// the same walk line read again and again costs the first level's
    /// latency from level 1, the second's from level 2, the third's from 3.
    #[test]
    fn walks_look_the_caches_up_from_their_level() {
        for (level, want) in [(1u8, 0usize), (2, 1), (3, 2)] {
            let mut p = profiles()[0].clone();
            p.cache.walk_level = Some(level);
            let lat = [p.cache.l1d.latency, p.cache.l2.latency, p.cache.l3.latency][want];
            let mut t = Timing::new(&p).unwrap();
            let walk = [1u64 << 30];
            t.charge(0, 0, &walk, 2 << 30, true, false);
            let before = t.breakdown.translation;
            t.charge(0, 0, &walk, 2 << 30, true, false);
            assert_eq!(t.breakdown.translation - before, lat as f64, "walk_level {level}");
        }
    }

    /// With a writeback cost, a dirty line costs it when the last level
    /// evicts it: storing to every line of a region eight times the last
    /// level writes back all but what it still holds, and costs each
    /// writeback's time more than reading the region does; a dependent
    /// access waits for none of them; and reads write nothing back.
    #[test]
    fn dirty_lines_cost_a_writeback_when_the_last_level_evicts_them() {
        let mut w = profiles()[2].clone();
        w.prefetch = None;
        let lines = 8 * 1024 * 1024 / 64;
        let refs = |write: bool| -> Vec<BatchRef> {
            (0..lines).map(|i| BatchRef { pa: (1 << 30) + i * 64, xlat: 0, walks_start: 0, walks_end: 0, write, repeats: 0 }).collect()
        };
        let run = |write: bool| {
            let mut t = Timing::new(&w).unwrap();
            t.run_batch(0, &refs(write), &[]);
            t
        };
        let (st, ld) = (run(true), run(false));
        let held = w.cache.l3.size_kb * 1024 / 64;
        assert!(st.writebacks >= lines - held && st.writebacks <= lines, "{}", st.writebacks);
        assert_eq!(ld.writebacks, 0);
        let lat = (w.writeback_cycles().unwrap() * w.overlap.data_mlp).round();
        let extra = st.writebacks as f64 * lat / w.overlap.data_mlp;
        assert!((st.cycles[0] - ld.cycles[0] - extra).abs() < 1e-6 * st.cycles[0], "{} {} {extra}", st.cycles[0], ld.cycles[0]);
        // Dependent stores: the same writebacks, no time for them.
        let (mut a, mut b) = (Timing::new(&w).unwrap(), Timing::new(&w).unwrap());
        for r in refs(true) {
            a.charge(0, 0, &[], r.pa, true, true);
            b.charge(0, 0, &[], r.pa, true, false);
        }
        assert_eq!((a.writebacks, b.writebacks), (st.writebacks, 0));
        assert_eq!(a.cycles, b.cycles);
    }

    /// With a memory interface, a stream of stores whose fills evict dirty
    /// lines moves two lines a store: where the interface carries two in
    /// less than the stream's overlapped miss time, the writebacks hide in
    /// its idle time and stores cost what loads do; where it does not,
    /// each such store costs the interface's time for both lines. Loads
    /// alone never reach it here, and dependent stores wait their latency.
    #[test]
    fn the_memory_interface_bounds_fills_and_writebacks_together() {
        let mut p = profiles()[0].clone();
        p.cache.l3 = splab_hw::cache::CacheConfig { size_kb: 128, ways: 16, latency: 40 };
        let per_line = p.dram_cycles() as f64 / p.overlap.data_mlp;
        let lines = 8 * 1024 * 1024 / 64;
        let held = p.cache.l3.size_kb * 1024 / 64;
        let run = |p: &Profile, write: bool, batch: bool| {
            let mut t = Timing::new(p).unwrap();
            let refs: Vec<BatchRef> = (0..lines).map(|i| BatchRef { pa: (1 << 30) + i * 64, xlat: 0, walks_start: 0, walks_end: 0, write, repeats: 0 }).collect();
            if batch {
                t.run_batch(0, &refs, &[]);
            } else {
                refs.iter().for_each(|r| t.charge(0, 0, &[], r.pa, false, r.write));
            }
            t
        };
        for (line, bound) in [(0.4 * per_line, false), (0.75 * per_line, true)] {
            let mut c = p.clone();
            c.memory.channel_gbs = Some(64.0 * c.freq_ghz / line);
            assert!((c.channel_line_cycles().unwrap() - line).abs() < 1e-9);
            for batch in [false, true] {
                let (st, ld) = (run(&c, true, batch), run(&c, false, batch));
                assert_eq!(st.writebacks, lines - held);
                assert_eq!(ld.cycles, run(&p, false, batch).cycles, "loads alone are below the bound");
                let want = if bound { (lines - held) as f64 * (2.0 * line - per_line) } else { 0.0 };
                let got = st.cycles[0] - ld.cycles[0];
                assert!((got - want).abs() < 1e-6 * st.cycles[0], "line {line}: {got} vs {want}");
            }
        }
        // Dependent stores wait their latency, above any bound.
        let mut c = p.clone();
        c.memory.channel_gbs = Some(64.0 * c.freq_ghz / (0.75 * per_line));
        let (mut a, mut b) = (Timing::new(&c).unwrap(), Timing::new(&p).unwrap());
        for i in 0..lines {
            a.charge(0, 0, &[], (1 << 30) + i * 64, true, true);
            b.charge(0, 0, &[], (1 << 30) + i * 64, true, true);
        }
        assert_eq!(a.cycles, b.cycles);
    }

    /// With store_mlp half of data_mlp, independent stores to random lines
    /// cost twice what loads do; stores the prefetcher covers stream as
    /// loads do, and stores that hit the first level cost what loads do.
    #[test]
    fn stores_that_miss_overlap_as_the_profile_says() {
        let mut s = profiles()[1].clone();
        s.overlap.store_mlp = Some(s.overlap.data_mlp / 2.0);
        let cycles = |pa: &dyn Fn(u64) -> u64, write: bool| -> f64 {
            let mut t = Timing::new(&s).unwrap();
            let refs: Vec<BatchRef> = (0..4096u64).map(|i| BatchRef { pa: pa(i), xlat: 0, walks_start: 0, walks_end: 0, write, repeats: 0 }).collect();
            t.run_batch(0, &refs, &[]);
            t.cycles[0]
        };
        let random = |i: u64| (2 << 30) + (i * 2654435761 % 4096) * 4096;
        let r = cycles(&random, true) / cycles(&random, false);
        assert!((r - 2.0).abs() < 0.02, "{r}");
        let seq = |i: u64| (1 << 30) + i * 64;
        let r = cycles(&seq, true) / cycles(&seq, false);
        assert!((1.0..1.1).contains(&r), "{r}");
        // 64 lines in 64 pages and 64 first-level sets: only the first
        // touch of each misses, so only those 64 cost more as stores.
        let few = |i: u64| (3 << 30) + (i % 64) * (4096 + 64);
        let extra = 64.0 * (s.store_scale() - 1.0) * s.dram_cycles() as f64 / s.overlap.data_mlp;
        let d = cycles(&few, true) - cycles(&few, false);
        assert!((d - extra).abs() < 1e-6 * extra, "{d} {extra}");
    }

    /// The prefetcher follows a page once two misses step the same way,
    /// covers later misses that keep stepping within the distance, and
    /// forgets the least recently used page for a new one.
    #[test]
    fn streams_train_then_cover() {
        let mut s = Streams::new(&Prefetch { streams: 2, distance: 4, line_cycles: 10.0, line_cycles_by_streams: vec![], next_page: false });
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
            let mut s = Streams::new(&Prefetch { streams: 4, distance: 8, line_cycles: 10.0, line_cycles_by_streams: vec![], next_page });
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
        let mut s = Streams::new(&pf);
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
        let mut u = Streams::new(&Prefetch { line_cycles_by_streams: vec![], ..pf });
        let got: Vec<u32> = (0..30).map(|i| u.cover(page(10 + i % 3, i / 3))).collect();
        assert!(got[24..].iter().all(|&k| k == 1), "{got:?}");
    }

    /// With a line time by streams, one stream runs at the first value and
    /// three interleaved at the third, in the batch path as in the single.
    #[test]
    fn line_time_follows_the_streams_at_once() {
        let mut q = profiles()[1].clone();
        q.prefetch.as_mut().unwrap().line_cycles_by_streams = vec![30.0, 20.0, 10.0];
        let line = |n: u64, at: &dyn Fn(u64) -> u64, batch: bool| -> f64 {
            let mut t = Timing::new(&q).unwrap();
            let refs: Vec<BatchRef> = (0..n).map(|i| BatchRef { pa: at(i), xlat: 0, walks_start: 0, walks_end: 0, write: false, repeats: 0 }).collect();
            if batch {
                t.run_batch(0, &refs, &[]);
            } else {
                for r in &refs {
                    let c = t.mem_latency(0, r.pa) as f64 * t.inv_data_mlp;
                    t.cycles[0] += c;
                }
            }
            t.cycles[0] / n as f64
        };
        let one = |i: u64| (1 << 30) + i * 64;
        let three = |i: u64| (1 << 30) + (i % 3) * (64 << 20) + (i / 3) * 64;
        for batch in [true, false] {
            let (a, b) = (line(6144, &one, batch), line(6144, &three, batch));
            assert!((a - 30.0).abs() < 4.0 && (b - 10.0).abs() < 3.0, "batch {batch}: {a} {b}");
        }
    }

    /// A stream that misses L2 runs at the prefetched line time when
    /// overlapped, while the same lines in random order pay the memory
    /// latency; walks holding slots never cost more than walks adding.
    #[test]
    fn prefetched_streams_and_slot_overlap() {
        let ps = profiles();
        let q = &ps[1];
        let mut t = Timing::new(q).unwrap();
        let seq: Vec<BatchRef> = (0..4096u64).map(|i| BatchRef { pa: (1 << 30) + i * 64, xlat: 0, walks_start: 0, walks_end: 0, write: false, repeats: 0 }).collect();
        t.run_batch(0, &seq, &[]);
        let streamed = t.cycles[0];
        assert!(t.prefetched >= 4096 - 2 * 64, "{}", t.prefetched);
        let line = q.prefetch.as_ref().unwrap().line_cycles;
        assert!((streamed / 4096.0 - line).abs() < 0.1 * line, "{streamed}");
        let mut u = Timing::new(q).unwrap();
        let rnd: Vec<BatchRef> = (0..4096u64).map(|i| BatchRef { pa: (2 << 30) + (i * 2654435761 % 4096) * 4096, ..seq[0] }).collect();
        u.run_batch(0, &rnd, &[]);
        assert!(u.cycles[0] > 2.0 * streamed, "{} vs {streamed}", u.cycles[0]);
        // Slots: a walk under a memory miss costs less than the sum, and
        // never less than the walk alone over walk_mlp. A translation
        // without a walk (an L2 TLB hit) is not bound by the walkers: it
        // adds to the slot's time.
        let (add, slot) = (Timing::new(&ps[0]).unwrap(), Timing::new(q).unwrap());
        let (wm, dm) = (q.overlap.walk_mlp, q.overlap.data_mlp);
        for (x, d) in [(0u32, 300u32), (60, 300), (60, 16), (200, 5)] {
            let (a, _) = add.overlapped(add.share[0], x, d, true);
            let (b, bx) = slot.overlapped(slot.share[0], x, d, true);
            assert!(b <= a + 1e-9 && b >= x as f64 / wm - 1e-9, "{x} {d}: {a} {b}");
            assert!(bx >= 0.0 && bx <= b, "{x} {d}: {bx} {b}");
            let (h, hx) = slot.overlapped(slot.share[0], x, d, false);
            assert!((h - ((x + d) as f64 / dm).max(1.0)).abs() < 1e-9 && h <= b && (hx - (h - d as f64 / dm)).abs() < 1e-9, "{x} {d}: {h} {b}");
            // Walks adding to data: unchanged by it.
            assert_eq!(add.overlapped(add.share[0], x, d, false), add.overlapped(add.share[0], x, d, true));
        }
    }
}
