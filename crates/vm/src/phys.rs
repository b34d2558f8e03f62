//! The physical page allocator: a binary buddy allocator over 4 KB frames,
//! modelled on the role FreeBSD's `vm_phys` layer plays beneath the
//! reservation system.
//!
//! Physical memory is split into memory domains, each a contiguous range of
//! frames. Each domain keeps one free "list" per order `0..VM_NFREEORDER`,
//! stored as a [`BitTree`] rather than a linked list so that the whole
//! allocator costs about two bits per frame and "the lowest-addressed free
//! block" is a few word reads. Choosing the lowest address makes every run
//! of the simulator deterministic. An aged allocator ([`VmPhys::age`])
//! takes blocks from seeded pseudo-random places instead, as an aged
//! machine's free queues hand them out in no address order; runs stay
//! deterministic for a seed.
//!
//! Always true between calls (verified by [`VmPhys::check`]):
//! - bit `k` of order `o`'s tree in a domain is set exactly when the block of
//!   `2^o` frames whose number is `k` counted from the domain's first
//!   `2^o`-aligned slot is free, lies wholly inside that domain, and is a
//!   maximal free block (it is not part of a larger free block);
//! - free blocks never overlap, and no free block has its buddy (the block
//!   it would merge with) free at the same order inside the same domain, so
//!   coalescing is always complete;
//! - each domain's free counter equals the pages covered by its free blocks.

use crate::bittree::BitTree;
use splab_hw::addr::Pfn;
use std::fmt;
use std::ops::Range;

/// Number of buddy orders; the largest block is `2^(VM_NFREEORDER - 1)`
/// pages (16 MB of 4 KB pages).
pub const VM_NFREEORDER: usize = 13;
/// Order of a 2 MB superpage: amd64's level-0 reservation (other
/// architectures give their own to `Phys::with_reservation_order`).
pub const VM_LEVEL_0_ORDER: usize = 9;

const MAX_ORDER: usize = VM_NFREEORDER - 1;

/// Slots an aged allocator draws at random before falling back to the
/// first free block after one.
const AGED_DRAWS: usize = 256;

/// One memory domain: frames `[start, end)` and their free lists.
#[derive(Clone)]
struct Domain {
    start: u64,
    end: u64,
    free: u64,
    lists: Vec<BitTree>,
}

impl Domain {
    /// A domain with every list empty (nothing free yet).
    fn new(start: u64, end: u64) -> Self {
        let lists = (0..VM_NFREEORDER)
            .map(|o| {
                // Slots run from the aligned block holding `start` to the one
                // holding `end - 1`; the domain need not be 2^o-aligned.
                let slots = if end > start {
                    ((end - 1) >> o) - (start >> o) + 1
                } else {
                    0
                };
                BitTree::new(slots as usize)
            })
            .collect();
        Domain {
            start,
            end,
            free: 0,
            lists,
        }
    }

    /// The tree index of the `2^o`-aligned block starting at `pfn`, if the
    /// tree has a slot for it.
    fn slot(&self, pfn: u64, o: usize) -> Option<usize> {
        let k = pfn >> o;
        let origin = self.start >> o;
        if k < origin {
            return None;
        }
        let s = (k - origin) as usize;
        (s < self.lists[o].len()).then_some(s)
    }

    /// First frame of the block in slot `s` of order `o`.
    fn block_start(&self, s: usize, o: usize) -> u64 {
        ((self.start >> o) + s as u64) << o
    }

    fn has(&self, pfn: u64, o: usize) -> bool {
        self.slot(pfn, o).is_some_and(|s| self.lists[o].get(s))
    }

    fn insert(&mut self, pfn: u64, o: usize) {
        debug_assert!(pfn >= self.start && pfn + (1 << o) <= self.end);
        let s = self.slot(pfn, o).expect("block outside its domain");
        debug_assert!(!self.lists[o].get(s), "block {pfn:#x}/{o} already free");
        self.lists[o].set(s);
        self.free += 1 << o;
    }

    fn remove(&mut self, pfn: u64, o: usize) {
        let s = self.slot(pfn, o).expect("block outside its domain");
        debug_assert!(self.lists[o].get(s), "block {pfn:#x}/{o} not free");
        self.lists[o].clear(s);
        self.free -= 1 << o;
    }

    /// The free block (start, order) that contains frame `pfn`, if any.
    fn block_containing(&self, pfn: u64) -> Option<(u64, usize)> {
        (0..VM_NFREEORDER)
            .map(|o| (pfn & !((1u64 << o) - 1), o))
            .find(|&(b, o)| self.has(b, o))
    }

    /// The lowest-addressed free block that starts at or after `from`.
    fn first_block_from(&self, from: u64) -> Option<(u64, usize)> {
        let mut best: Option<(u64, usize)> = None;
        for o in 0..VM_NFREEORDER {
            let k = from.div_ceil(1 << o);
            let origin = self.start >> o;
            let s = k.saturating_sub(origin) as usize;
            if let Some(s) = self.lists[o].first_set_from(s) {
                let b = self.block_start(s, o);
                if best.is_none_or(|(bb, _)| b < bb) {
                    best = Some((b, o));
                }
            }
        }
        best
    }

    /// Whether any frame of the aligned block `pfn`/`o` is free.
    fn overlaps_free(&self, pfn: u64, o: usize) -> bool {
        let end = pfn + (1 << o);
        // A larger (or equal) free block containing this one...
        (o..VM_NFREEORDER).any(|j| self.has(pfn & !((1u64 << j) - 1), j))
            // ...or a smaller free block inside it.
            || (0..o).any(|j| {
                let s = (pfn >> j).saturating_sub(self.start >> j) as usize;
                self.lists[j]
                    .first_set_from(s)
                    .is_some_and(|s| self.block_start(s, j) < end)
            })
    }
}

/// Small deterministic PRNG (splitmix64) so that `fragment` and `age` give
/// the same layout for the same seed on every platform.
#[derive(Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-high; bias is negligible for our `n`).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// The physical memory allocator: per-domain buddy free lists.
#[derive(Clone)]
pub struct VmPhys {
    npages: u64,
    domains: Vec<Domain>,
    /// Set by [`VmPhys::age`]: the free lists are in no address order, as
    /// an aged machine's are, and a block is taken from a pseudo-random
    /// place in its list instead of the lowest address.
    aged: Option<SplitMix64>,
}

impl VmPhys {
    /// Creates an allocator over `npages` frames split into `ndomains`
    /// domains, with every frame free (the role of vm_phys_init plus
    /// vm_phys_add_seg). Domain boundaries are rounded to 16 MB when each
    /// domain is at least that large, so that no order-12 block is lost.
    pub fn new(npages: u64, ndomains: usize) -> VmPhys {
        assert!(ndomains >= 1, "need at least one domain");
        assert!(
            npages >= ndomains as u64,
            "{npages} pages cannot fill {ndomains} domains"
        );
        assert!(npages <= 1u64 << 32, "frame numbers are 32-bit");
        let per = npages / ndomains as u64;
        // Round boundaries to the largest power of two not above the domain
        // size (capped at the largest block): consecutive boundaries then
        // stay strictly increasing.
        let grain = (1u64 << MAX_ORDER).min(1 << per.ilog2());
        let bound = |i: u64| -> u64 {
            if i == ndomains as u64 {
                return npages;
            }
            let exact = i * npages / ndomains as u64;
            (exact + grain / 2) / grain * grain
        };
        let mut phys = VmPhys {
            npages,
            domains: (0..ndomains as u64)
                .map(|i| Domain::new(bound(i), bound(i + 1)))
                .collect(),
            aged: None,
        };
        for d in 0..ndomains {
            let Range { start, end } = phys.domain_range(d);
            phys.free_range(start, end);
        }
        phys
    }

    /// Total frames managed.
    pub fn npages(&self) -> u64 {
        self.npages
    }

    /// Number of memory domains.
    pub fn ndomains(&self) -> usize {
        self.domains.len()
    }

    /// Frames `[start, end)` belonging to domain `d`.
    pub fn domain_range(&self, d: usize) -> Range<u64> {
        self.domains[d].start..self.domains[d].end
    }

    /// The domain holding frame `pfn` (vm_phys_domain). Panics if the frame
    /// is beyond the end of memory.
    pub fn domain_of(&self, pfn: Pfn) -> usize {
        let p = pfn.0 as u64;
        assert!(p < self.npages, "{pfn:?} beyond end of memory");
        self.domains.partition_point(|d| d.end <= p)
    }

    /// Free pages in all domains (vm_cnt.v_free_count).
    pub fn free_count(&self) -> u64 {
        self.domains.iter().map(|d| d.free).sum()
    }

    /// Free pages in domain `d` (vmd_free_count).
    pub fn free_count_domain(&self, d: usize) -> u64 {
        self.domains[d].free
    }

    /// Number of maximal free blocks of exactly `order`, over all domains.
    pub fn free_blocks(&self, order: usize) -> u64 {
        self.domains
            .iter()
            .map(|d| d.lists[order].count() as u64)
            .sum()
    }

    /// Allocates an aligned block of `2^order` frames from domain `domain`
    /// only (vm_phys_alloc_pages): takes the lowest-addressed block of the
    /// smallest sufficient order (on an aged machine, one from a
    /// pseudo-random place in that list) and returns the unused upper
    /// halves to the free lists (vm_phys_split_pages).
    pub fn alloc_pages(&mut self, domain: usize, order: usize) -> Option<Pfn> {
        assert!(order < VM_NFREEORDER, "order {order} too large");
        let d = &mut self.domains[domain];
        for o in order..VM_NFREEORDER {
            let list = &d.lists[o];
            let found = match self.aged.as_mut() {
                // FreeBSD's free queues hand out the block freed longest
                // ago (vm_freelist_add puts freed blocks at the tail); after
                // long use that order bears no relation to the address.
                Some(rng) if list.count() > 1 => {
                    let n = list.len() as u64;
                    // Uniform over the list's blocks: draw slots until one
                    // is free; where few are, the first free one after a
                    // drawn slot (gaps bias that, so it is the fallback).
                    (0..AGED_DRAWS)
                        .map(|_| rng.below(n) as usize)
                        .find(|&s| list.get(s))
                        .or_else(|| list.first_set_from(rng.below(n) as usize))
                        .or_else(|| list.first_set())
                }
                _ => list.first_set(),
            };
            if let Some(s) = found {
                let pfn = d.block_start(s, o);
                d.remove(pfn, o);
                for j in (order..o).rev() {
                    d.insert(pfn + (1 << j), j);
                }
                return Some(Pfn(pfn as u32));
            }
        }
        None
    }

    /// Allocates a block of `2^order` frames from any domain, trying domain
    /// 0 first and then each following domain (the domain iteration of
    /// vm_page_alloc, with a fixed start so runs are reproducible).
    pub fn alloc(&mut self, order: usize) -> Option<Pfn> {
        (0..self.domains.len()).find_map(|d| self.alloc_pages(d, order))
    }

    /// Frees the aligned block of `2^order` frames at `pfn`, merging it with
    /// its buddy for as long as the buddy is a free block of the same order
    /// in the same domain (vm_phys_free_pages).
    pub fn free_pages(&mut self, pfn: Pfn, order: usize) {
        assert!(order < VM_NFREEORDER, "order {order} too large");
        let mut p = pfn.0 as u64;
        debug_assert!(
            p & ((1 << order) - 1) == 0,
            "{pfn:?} not aligned to order {order}"
        );
        let di = self.domain_of(pfn);
        let d = &mut self.domains[di];
        debug_assert!(
            p + (1 << order) <= d.end,
            "block {pfn:?}/{order} crosses its domain"
        );
        debug_assert!(
            !d.overlaps_free(p, order),
            "block {pfn:?}/{order} already (partly) free"
        );
        let mut o = order;
        while o < MAX_ORDER {
            let buddy = p ^ (1 << o);
            // `has` is false for a buddy outside the domain: it has no slot
            // or its slot is never set.
            if !d.has(buddy, o) {
                break;
            }
            d.remove(buddy, o);
            p &= !(1 << o);
            o += 1;
        }
        d.insert(p, o);
    }

    /// Frees frames `[start, end)` (within one domain) as maximal aligned
    /// blocks, each coalesced as far as it goes.
    fn free_range(&mut self, mut start: u64, end: u64) {
        while start < end {
            let mut o = (start.trailing_zeros() as usize).min(MAX_ORDER);
            while start + (1 << o) > end {
                o -= 1;
            }
            self.free_pages(Pfn(start as u32), o);
            start += 1 << o;
        }
    }

    /// Allocates `npages` physically contiguous frames starting at a
    /// multiple of `align_pages` (a power of two), all within one domain
    /// (vm_phys_alloc_contig). Pages of the taken blocks outside the run go
    /// back to the free lists. Release with [`VmPhys::free_contig`].
    pub fn alloc_contig(&mut self, npages: u64, align_pages: u64) -> Option<Pfn> {
        assert!(npages > 0, "empty contiguous allocation");
        assert!(
            align_pages.is_power_of_two(),
            "alignment must be a power of two"
        );
        let start = (0..self.domains.len())
            .find_map(|di| Self::find_contig(&self.domains[di], npages, align_pages))?;
        self.take_range(start, start + npages);
        Some(Pfn(start as u32))
    }

    /// Where in domain `d` a run of `npages` aligned to `align` could start.
    fn find_contig(d: &Domain, npages: u64, align: u64) -> Option<u64> {
        if npages > d.free {
            return None;
        }
        // Cheap case first: a single block that is both big enough and
        // aligned enough; smallest order first to keep big blocks intact.
        let need = (npages.next_power_of_two().ilog2() as usize).max(align.ilog2() as usize);
        if need < VM_NFREEORDER {
            let hit = (need..VM_NFREEORDER)
                .find_map(|o| d.lists[o].first_set().map(|s| d.block_start(s, o)));
            if hit.is_some() {
                return hit;
            }
        }
        // Otherwise walk free blocks in address order, gluing adjacent ones
        // into runs, until a run holds an aligned stretch of npages.
        let mut run = (u64::MAX, u64::MAX);
        let mut cursor = d.start;
        while let Some((b, o)) = d.first_block_from(cursor) {
            if b != run.1 {
                run.0 = b;
            }
            run.1 = b + (1 << o);
            let cand = run.0.div_ceil(align).checked_mul(align)?;
            if cand.checked_add(npages).is_some_and(|e| e <= run.1) {
                return Some(cand);
            }
            cursor = run.1;
        }
        None
    }

    /// Removes frames `[s, e)`, all free and in one domain, from the free
    /// lists, returning the parts of the blocks they came from that lie
    /// outside `[s, e)`.
    fn take_range(&mut self, s: u64, e: u64) {
        let di = self.domain_of(Pfn(s as u32));
        let d = &mut self.domains[di];
        let (first, _) = d.block_containing(s).expect("run start not free");
        let mut cursor = first;
        while cursor < e {
            let (b, o) = d.block_containing(cursor).expect("run not free");
            debug_assert_eq!(b, cursor, "free blocks in a run must abut");
            d.remove(b, o);
            cursor = b + (1 << o);
        }
        self.free_range(first, s);
        self.free_range(e, cursor);
    }

    /// Frees `npages` frames starting at `pfn`, all allocated and in one
    /// domain, as maximal aligned blocks (vm_phys_free_contig).
    pub fn free_contig(&mut self, pfn: Pfn, npages: u64) {
        let start = pfn.0 as u64;
        debug_assert!(
            npages == 0 || self.domain_of(pfn) == self.domain_of(Pfn((start + npages - 1) as u32)),
            "contiguous run crosses domains"
        );
        self.free_range(start, start + npages);
    }

    /// Takes the single free frame `pfn` out of the free lists, splitting
    /// the free block that holds it (vm_phys_unfree_page). Returns false if
    /// the frame is not free.
    pub fn unfree_page(&mut self, pfn: Pfn) -> bool {
        let p = pfn.0 as u64;
        if p >= self.npages {
            return false;
        }
        let di = self.domain_of(pfn);
        let d = &mut self.domains[di];
        let Some((mut b, mut o)) = d.block_containing(p) else {
            return false;
        };
        d.remove(b, o);
        // Halve towards the frame, freeing the half that does not hold it;
        // that half's buddy is never free, so coalescing stays complete.
        while o > 0 {
            o -= 1;
            let half = 1 << o;
            if p < b + half {
                d.insert(b + half, o);
            } else {
                d.insert(b, o);
                b += half;
            }
        }
        true
    }

    /// Whether frame `pfn` lies inside some free block.
    pub fn is_free(&self, pfn: Pfn) -> bool {
        let p = pfn.0 as u64;
        p < self.npages
            && self.domains[self.domain_of(pfn)]
                .block_containing(p)
                .is_some()
    }

    /// The aligned regions of 2^`order` pages that are wholly free, sorted,
    /// with the first round(`fraction` * count) of them a uniform random
    /// sample (chosen by a seeded partial shuffle).
    fn sample_free_regions(&self, fraction: f64, rng: &mut SplitMix64, order: usize) -> (Vec<u64>, usize) {
        assert!(order < VM_NFREEORDER, "region order {order}");
        assert!(
            (0.0..=1.0).contains(&fraction),
            "fraction {fraction} out of range"
        );
        let mut regions = Vec::new();
        for d in &self.domains {
            for o in order..VM_NFREEORDER {
                for s in d.lists[o].iter() {
                    let b = d.block_start(s, o);
                    regions.extend((0..1u64 << (o - order)).map(|r| b + (r << order)));
                }
            }
        }
        // Sort so the choice depends only on the seed and the free layout.
        regions.sort_unstable();
        let take = ((fraction * regions.len() as f64).round() as usize).min(regions.len());
        // Partial Fisher-Yates: the first `take` entries become a uniform
        // random sample without replacement.
        for i in 0..take {
            let j = i + rng.below((regions.len() - i) as u64) as usize;
            regions.swap(i, j);
        }
        (regions, take)
    }

    /// Takes each of `pages` (all free) out of the free lists, and returns
    /// them sorted.
    fn unfree_all(&mut self, mut pages: Vec<Pfn>) -> Vec<Pfn> {
        for &p in &pages {
            let taken = self.unfree_page(p);
            debug_assert!(taken, "{p:?} in a wholly free region was not free");
        }
        pages.sort_unstable();
        pages
    }

    /// Fragments memory to model other consumers: of the aligned regions
    /// of 2^`order` pages (the reservation size, 2 MB on amd64) that are
    /// currently wholly free, chooses round(`fraction` * count) by a seeded
    /// shuffle, takes one pseudo-random page out of each with
    /// [`VmPhys::unfree_page`], and returns those pages, sorted. The caller
    /// keeps them allocated; no such block can then form there.
    pub fn fragment(&mut self, fraction: f64, seed: u64, order: usize) -> Vec<Pfn> {
        let mut rng = SplitMix64(seed);
        let (regions, take) = self.sample_free_regions(fraction, &mut rng, order);
        let pages = regions[..take]
            .iter()
            .map(|&r| Pfn((r + rng.below(1 << order)) as u32))
            .collect();
        self.unfree_all(pages)
    }

    /// Ages memory as long use by other consumers leaves it: of the wholly
    /// free regions of 2^`order` pages, round(`fraction` * count), chosen
    /// by a seeded shuffle, get one half of every aligned pair of runs of
    /// 2^`run` pages taken (which of the two at random), so that their
    /// free memory is runs of 2^`run` frames that cannot merge; and from
    /// then on every free list hands out its blocks in pseudo-random order
    /// rather than lowest address first. Allocations of single pages
    /// (page-table pages, pages outside any reservation) then take runs of
    /// 2^`run` frames from scattered places in those regions, as they do
    /// on a host that has run for a while: each run is split where it
    /// lies, and its pieces, alone in their smaller lists, go out next
    /// (vm_phys_alloc_freelist_pages splits only when the smaller lists
    /// are empty). Superpage-sized blocks come from the untouched regions.
    /// `run` 0 leaves single frames, never two adjacent. Returns the taken
    /// pages, sorted; the caller keeps them allocated.
    pub fn age(&mut self, fraction: f64, seed: u64, order: usize, run: usize) -> Vec<Pfn> {
        assert!(run < order, "aging keeps runs of 2^{run} pages, which need regions of more than 2^{order}");
        let mut rng = SplitMix64(seed ^ 0xa6ed_a6ed);
        let (regions, take) = self.sample_free_regions(fraction, &mut rng, order);
        let mut pages = Vec::with_capacity(take << (order - 1));
        for &r in &regions[..take] {
            for pair in (r..r + (1 << order)).step_by(2 << run) {
                let half = pair + (rng.below(2) << run);
                pages.extend((half..half + (1 << run)).map(|p| Pfn(p as u32)));
            }
        }
        let pages = self.unfree_all(pages);
        self.aged = Some(rng);
        pages
    }

    /// Whether [`VmPhys::age`] has aged this memory.
    pub fn is_aged(&self) -> bool {
        self.aged.is_some()
    }

    /// Verifies the invariants stated in the module documentation. O(n).
    pub fn check(&self) -> Result<(), String> {
        let mut expect_start = 0;
        for (di, d) in self.domains.iter().enumerate() {
            if d.start != expect_start || d.end <= d.start {
                return Err(format!("domain {di} has bad range {}..{}", d.start, d.end));
            }
            expect_start = d.end;
            let mut blocks = Vec::new();
            let mut sum = 0u64;
            for (o, tree) in d.lists.iter().enumerate() {
                tree.check()
                    .map_err(|e| format!("domain {di} order {o}: {e}"))?;
                for s in tree.iter() {
                    let b = d.block_start(s, o);
                    if b < d.start || b + (1 << o) > d.end {
                        return Err(format!("block {b:#x}/{o} outside domain {di}"));
                    }
                    if o < MAX_ORDER && d.has(b ^ (1 << o), o) {
                        return Err(format!("block {b:#x}/{o} has a free buddy"));
                    }
                    blocks.push((b, o));
                    sum += 1 << o;
                }
            }
            if sum != d.free {
                return Err(format!(
                    "domain {di} counts {} free but blocks hold {sum}",
                    d.free
                ));
            }
            blocks.sort_unstable();
            for w in blocks.windows(2) {
                let ((b0, o0), (b1, o1)) = (w[0], w[1]);
                if b0 + (1 << o0) > b1 {
                    return Err(format!("blocks {b0:#x}/{o0} and {b1:#x}/{o1} overlap"));
                }
            }
        }
        if expect_start != self.npages {
            return Err(format!(
                "domains end at {expect_start}, memory at {}",
                self.npages
            ));
        }
        Ok(())
    }
}

impl fmt::Debug for VmPhys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VmPhys")
            .field("npages", &self.npages)
            .field("ndomains", &self.domains.len())
            .field("free", &self.free_count())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BIG: u64 = 1 << MAX_ORDER;

    /// Number of 2 MB-aligned regions that are wholly free.
    fn free_regions(p: &VmPhys) -> u64 {
        (VM_LEVEL_0_ORDER..VM_NFREEORDER)
            .map(|o| p.free_blocks(o) << (o - VM_LEVEL_0_ORDER))
            .sum()
    }

    #[test]
    fn new_covers_memory_with_maximal_blocks() {
        let n = 3 * BIG + 512 + 3;
        let p = VmPhys::new(n, 1);
        assert_eq!(p.free_count(), n);
        assert_eq!(p.free_blocks(12), 3);
        assert_eq!(p.free_blocks(9), 1);
        assert_eq!(p.free_blocks(1), 1);
        assert_eq!(p.free_blocks(0), 1);
        assert_eq!(p.npages(), n);
        assert_eq!(p.ndomains(), 1);
        p.check().unwrap();
    }

    #[test]
    fn alloc_free_round_trip_every_order() {
        let mut p = VmPhys::new(4 * BIG + 100, 2);
        let initial = p.free_blocks(12);
        for order in 0..VM_NFREEORDER {
            let pfn = p.alloc(order).unwrap();
            assert_eq!(pfn.0 as u64 % (1 << order), 0, "order {order} misaligned");
            assert!(!p.is_free(pfn));
            assert!(!p.is_free(Pfn(pfn.0 + (1 << order) - 1)));
            assert_eq!(p.free_count(), p.npages() - (1 << order));
            p.check().unwrap();
            p.free_pages(pfn, order);
            assert_eq!(p.free_blocks(12), initial);
            assert_eq!(p.free_count(), p.npages());
            p.check().unwrap();
        }
    }

    #[test]
    fn lowest_address_first() {
        let mut p = VmPhys::new(BIG, 1);
        assert_eq!(p.alloc_pages(0, 0), Some(Pfn(0)));
        assert_eq!(p.alloc_pages(0, 0), Some(Pfn(1)));
        assert_eq!(p.alloc_pages(0, 1), Some(Pfn(2)));
        assert_eq!(p.alloc_pages(0, 0), Some(Pfn(4)));
        assert_eq!(p.alloc_pages(0, 0), Some(Pfn(5)));
        assert_eq!(p.alloc_pages(0, 3), Some(Pfn(8)));
        p.check().unwrap();
    }

    #[test]
    fn exhaustion_returns_none_and_free_recoalesces() {
        let mut p = VmPhys::new(2 * BIG, 1);
        let mut held: Vec<(Pfn, usize)> = Vec::new();
        // Mixed orders until nothing of order 5 is left, then fill with 0.
        let mut i = 0;
        while let Some(pfn) = p.alloc(i % 6) {
            held.push((pfn, i % 6));
            i += 1;
        }
        while let Some(pfn) = p.alloc(0) {
            held.push((pfn, 0));
        }
        assert_eq!(p.free_count(), 0);
        assert_eq!(p.alloc(0), None);
        assert_eq!(p.alloc_contig(1, 1), None);
        p.check().unwrap();
        // Free in a scrambled but deterministic order.
        let len = held.len();
        for k in 0..len {
            let (pfn, o) = held[(k * 7919) % len];
            p.free_pages(pfn, o);
        }
        assert_eq!(p.free_blocks(12), 2);
        assert_eq!(p.free_count(), 2 * BIG);
        p.check().unwrap();
    }

    #[test]
    fn buddy_coalescing_across_orders() {
        let mut p = VmPhys::new(BIG, 1);
        for _ in 0..BIG {
            p.alloc(0).unwrap();
        }
        p.free_pages(Pfn(0), 0);
        p.free_pages(Pfn(1), 0);
        assert_eq!(p.free_blocks(1), 1);
        assert_eq!(p.free_blocks(0), 0);
        p.free_pages(Pfn(3), 0);
        assert_eq!(p.free_blocks(0), 1);
        p.free_pages(Pfn(2), 0);
        assert_eq!(p.free_blocks(2), 1);
        assert_eq!(p.free_blocks(1), 0);
        // Even pages next: none of them has a free buddy.
        for k in (4..BIG as u32).step_by(2) {
            p.free_pages(Pfn(k), 0);
        }
        assert_eq!(p.free_blocks(0), BIG / 2 - 2);
        p.check().unwrap();
        for k in (5..BIG as u32).step_by(2) {
            p.free_pages(Pfn(k), 0);
        }
        assert_eq!(p.free_blocks(12), 1);
        assert_eq!((0..12).map(|o| p.free_blocks(o)).sum::<u64>(), 0);
        p.check().unwrap();
    }

    #[test]
    fn domain_boundaries_and_isolation() {
        let p = VmPhys::new(10 * BIG, 3);
        for d in 0..3 {
            let r = p.domain_range(d);
            assert_eq!(r.start % BIG, 0);
            assert_eq!(p.domain_of(Pfn(r.start as u32)), d);
            assert_eq!(p.domain_of(Pfn(r.end as u32 - 1)), d);
        }
        // Small domains that are not 2^o-aligned: a block never spans two.
        let mut p = VmPhys::new(1000, 3);
        assert_eq!(p.domain_range(1), 256..768);
        assert_eq!(p.free_count_domain(1), 512);
        // 256..512 and 512..768 are buddies of blocks in other domains only.
        assert_eq!(p.free_blocks(9), 0);
        let mut held = Vec::new();
        while let Some(pfn) = p.alloc_pages(1, 0) {
            assert_eq!(p.domain_of(pfn), 1);
            held.push(pfn);
        }
        assert_eq!(held.len(), 512);
        for pfn in held {
            p.free_pages(pfn, 0);
        }
        assert_eq!(p.free_blocks(9), 0);
        p.check().unwrap();
    }

    #[test]
    fn empty_domain_returns_none_but_alloc_falls_back() {
        let mut p = VmPhys::new(4 * BIG, 2);
        assert_eq!(p.domain_range(0), 0..2 * BIG);
        assert_eq!(p.alloc_pages(0, 12), Some(Pfn(0)));
        assert_eq!(p.alloc_pages(0, 12), Some(Pfn(BIG as u32)));
        assert_eq!(p.free_count_domain(0), 0);
        assert_eq!(p.alloc_pages(0, 0), None);
        let pfn = p.alloc(0).unwrap();
        assert_eq!(p.domain_of(pfn), 1);
        assert_eq!(pfn, Pfn(2 * BIG as u32));
        // A contiguous run may not cross the boundary either: leave
        // 4096..8192 free in domain 0 and 8192..12288 free in domain 1.
        p.free_pages(Pfn(BIG as u32), 12);
        assert_eq!(p.alloc_pages(1, 12), Some(Pfn(3 * BIG as u32)));
        p.free_pages(pfn, 0);
        assert_eq!(p.free_count(), 2 * BIG);
        assert_eq!(p.alloc_contig(BIG + 1, 1), None);
        assert_eq!(p.alloc_contig(BIG, 1), Some(Pfn(BIG as u32)));
        p.check().unwrap();
    }

    #[test]
    fn unfree_page_and_is_free() {
        let mut p = VmPhys::new(BIG, 1);
        assert!(p.is_free(Pfn(1000)));
        assert!(p.unfree_page(Pfn(1000)));
        assert!(!p.is_free(Pfn(1000)));
        assert!(p.is_free(Pfn(999)) && p.is_free(Pfn(1001)));
        assert!(!p.unfree_page(Pfn(1000)));
        assert!(!p.unfree_page(Pfn(BIG as u32)));
        assert!(!p.is_free(Pfn(BIG as u32)));
        assert_eq!(p.free_count(), BIG - 1);
        assert_eq!(p.free_blocks(12), 0);
        // One block per order below 12: the halves not holding page 1000.
        for o in 0..12 {
            assert_eq!(p.free_blocks(o), 1, "order {o}");
        }
        p.check().unwrap();
        p.free_pages(Pfn(1000), 0);
        assert_eq!(p.free_blocks(12), 1);
        p.check().unwrap();
    }

    #[test]
    fn alloc_contig_alignment_and_odd_sizes() {
        let mut p = VmPhys::new(4 * BIG, 1);
        let a = p.alloc_contig(3, 1).unwrap();
        assert_eq!(a, Pfn(0));
        assert!(p.is_free(Pfn(3)));
        let b = p.alloc_contig(5, 8).unwrap();
        assert_eq!(b.0 % 8, 0);
        let c = p.alloc_contig(1000, 512).unwrap();
        assert_eq!(c.0 % 512, 0);
        for (pfn, n) in [(a, 3), (b, 5), (c, 1000)] {
            for k in 0..n {
                assert!(!p.is_free(Pfn(pfn.0 + k)));
            }
        }
        assert_eq!(p.free_count(), 4 * BIG - 1008);
        p.check().unwrap();
        p.free_contig(b, 5);
        p.free_contig(a, 3);
        p.free_contig(c, 1000);
        assert_eq!(p.free_blocks(12), 4);
        p.check().unwrap();
    }

    #[test]
    fn alloc_contig_glues_small_blocks_and_spans_big_ones() {
        let mut p = VmPhys::new(8 * BIG, 1);
        // A run of small blocks straddling an order-12 boundary.
        for _ in 0..8 {
            p.alloc(12).unwrap();
        }
        p.free_contig(Pfn(BIG as u32 - 3), 10);
        assert_eq!(p.alloc_contig(11, 1), None);
        assert_eq!(p.alloc_contig(10, 1), Some(Pfn(BIG as u32 - 3)));
        assert_eq!(p.free_count(), 0);
        p.free_contig(Pfn(BIG as u32 - 3), 10);
        assert_eq!(p.alloc_contig(4, 4), Some(Pfn(BIG as u32)));
        assert_eq!(p.free_count(), 6);
        p.check().unwrap();
        // Larger than the largest block.
        let mut p = VmPhys::new(8 * BIG, 1);
        let n = 5 * BIG + 7;
        let a = p.alloc_contig(n, BIG).unwrap();
        assert_eq!(a, Pfn(0));
        assert_eq!(p.free_count(), 8 * BIG - n);
        p.check().unwrap();
        p.free_contig(a, n);
        assert_eq!(p.free_blocks(12), 8);
        p.check().unwrap();
    }

    #[test]
    fn age_leaves_scattered_single_frames_and_whole_blocks_elsewhere() {
        let mut p = VmPhys::new(8 * BIG, 1);
        let before = free_regions(&p);
        assert_eq!(before, 64);
        let pinned = p.age(0.5, 7, VM_LEVEL_0_ORDER, 0);
        p.check().unwrap();
        // Half the regions, half their pages: one of every aligned pair.
        assert_eq!(pinned.len(), 32 * 256);
        let pairs: std::collections::BTreeSet<u32> = pinned.iter().map(|p| p.0 >> 1).collect();
        assert_eq!(pairs.len(), pinned.len(), "one page of each pair");
        assert_eq!(free_regions(&p), 32);
        assert_eq!(p.free_blocks(0), 32 * 256, "the aged regions' free memory is single frames");
        assert!(p.is_aged());
        // Single pages come from the aged regions, in no address order:
        // never two consecutive frames, and over the 16 colours of a 64 KB
        // way (a stand-in for a cache's) they spread unevenly, as random
        // frames do, not in the even rotation consecutive ones would make.
        let got: Vec<u64> = (0..256).map(|_| p.alloc(0).unwrap().0 as u64).collect();
        assert!(got.windows(2).all(|w| w[1] != w[0] + 1), "consecutive frames");
        assert!(got.iter().all(|&f| pinned.binary_search(&Pfn((f ^ 1) as u32)).is_ok()), "a frame outside the aged regions");
        let mut colours = [0u32; 16];
        got.iter().for_each(|&f| colours[(f & 15) as usize] += 1);
        assert!(colours.iter().max().unwrap() - colours.iter().min().unwrap() >= 4, "{colours:?}");
        let sorted = got.windows(2).filter(|w| w[1] > w[0]).count();
        assert!((64..192).contains(&sorted), "{sorted} of 255 steps went up");
        // Superpage-sized blocks still come whole from the other regions.
        let mut whole = 0;
        while p.alloc(VM_LEVEL_0_ORDER).is_some() {
            whole += 1;
        }
        assert_eq!(whole, 32);
        p.check().unwrap();
        // Same seed, same layout; none asked, nothing aged.
        assert_eq!(VmPhys::new(8 * BIG, 1).age(0.5, 7, VM_LEVEL_0_ORDER, 0), pinned);
        let mut q = VmPhys::new(8 * BIG, 1);
        assert!(q.age(0.0, 7, VM_LEVEL_0_ORDER, 0).is_empty());
        assert_eq!(free_regions(&q), 64);
    }

    #[test]
    fn age_in_runs_hands_out_runs_from_scattered_places() {
        let mut p = VmPhys::new(8 * BIG, 1);
        let pinned = p.age(0.5, 7, VM_LEVEL_0_ORDER, 2);
        p.check().unwrap();
        // Half the regions, half their pages, in aligned runs of four.
        assert_eq!(pinned.len(), 32 * 256);
        let runs: std::collections::BTreeSet<u32> = pinned.iter().map(|p| p.0 >> 2).collect();
        assert_eq!(runs.len() * 4, pinned.len(), "whole runs of four taken");
        let eights: std::collections::BTreeSet<u32> = pinned.iter().map(|p| p.0 >> 3).collect();
        assert_eq!(eights.len() * 4, pinned.len(), "one run of every aligned eight");
        assert_eq!(p.free_blocks(2), 32 * 64, "the aged regions' free memory is runs of four");
        assert_eq!(p.free_blocks(0) + p.free_blocks(1), 0);
        // Single pages come four in a row, each four from a random run.
        let got: Vec<u64> = (0..256).map(|_| p.alloc(0).unwrap().0 as u64).collect();
        for run in got.chunks(4) {
            assert_eq!(run[0] & 3, 0, "{run:?}");
            assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "{run:?}");
            assert!(pinned.binary_search(&Pfn((run[0] ^ 4) as u32)).is_ok(), "a run outside the aged regions");
        }
        let followed = got.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert_eq!(followed, 3 * 64);
        let starts_up = got.chunks(4).collect::<Vec<_>>().windows(2).filter(|w| w[1][0] > w[0][0]).count();
        assert!((16..48).contains(&starts_up), "{starts_up} of 63 runs went up");
        p.check().unwrap();
        let mut whole = 0;
        while p.alloc(VM_LEVEL_0_ORDER).is_some() {
            whole += 1;
        }
        assert_eq!(whole, 32);
    }

    #[test]
    fn fragment_half_blocks_exactly_half_the_regions() {
        let mut p = VmPhys::new(8 * BIG + 512, 2);
        let before = free_regions(&p);
        assert_eq!(before, 65);
        let pinned = p.fragment(0.5, 42, VM_LEVEL_0_ORDER);
        assert_eq!(pinned.len(), 33);
        let regions: std::collections::BTreeSet<u32> = pinned.iter().map(|p| p.0 >> 9).collect();
        assert_eq!(regions.len(), 33, "one page per region");
        assert_eq!(free_regions(&p), before - 33);
        assert_eq!(p.free_count(), p.npages() - 33);
        p.check().unwrap();
        let mut got = 0;
        while p.alloc(VM_LEVEL_0_ORDER).is_some() {
            got += 1;
        }
        assert_eq!(got, before - 33);
        // Same seed, same pages; another seed, another choice.
        let mut q = VmPhys::new(8 * BIG + 512, 2);
        assert_eq!(q.fragment(0.5, 42, VM_LEVEL_0_ORDER), pinned);
        let mut r = VmPhys::new(8 * BIG + 512, 2);
        assert_ne!(r.fragment(0.5, 43, VM_LEVEL_0_ORDER), pinned);
        // Extremes.
        let mut s = VmPhys::new(2 * BIG, 1);
        assert!(s.fragment(0.0, 1, VM_LEVEL_0_ORDER).is_empty());
        assert_eq!(s.fragment(1.0, 1, VM_LEVEL_0_ORDER).len(), 16);
        assert_eq!(free_regions(&s), 0);
        s.check().unwrap();
    }

    #[test]
    fn large_memories_construct_quickly() {
        let t = std::time::Instant::now();
        let mut p = VmPhys::new((256u64 << 30) >> 12, 1);
        assert_eq!(p.free_blocks(12), 16384);
        let a = p.alloc(0).unwrap();
        p.free_pages(a, 0);
        assert_eq!(p.free_blocks(12), 16384);
        let q = VmPhys::new((64u64 << 30) >> 12, 4);
        assert_eq!(q.free_count_domain(3), 1 << 22);
        assert!(t.elapsed().as_secs_f64() < 2.0, "took {:?}", t.elapsed());
        q.check().unwrap();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(usize),
        Free(usize),
        Unfree(u32),
        Contig(u64, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..VM_NFREEORDER).prop_map(Op::Alloc),
            4 => any::<usize>().prop_map(Op::Free),
            2 => any::<u32>().prop_map(Op::Unfree),
            1 => (1u64..700, 0u32..11).prop_map(|(n, a)| Op::Contig(n, a)),
        ]
    }

    proptest! {
        #[test]
        fn random_ops_keep_invariants(
            npages in 1u64..(3 * BIG + 700),
            ndomains in 1usize..4,
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let ndomains = ndomains.min(npages as usize);
            let mut p = VmPhys::new(npages, ndomains);
            // (start, pages, order if from alloc / unfree_page)
            let mut held: Vec<(u32, u64, Option<usize>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Alloc(o) => {
                        if let Some(pfn) = p.alloc(o) {
                            prop_assert_eq!(pfn.0 % (1 << o), 0);
                            held.push((pfn.0, 1 << o, Some(o)));
                        }
                    }
                    Op::Free(i) if !held.is_empty() => {
                        let (s, n, o) = held.swap_remove(i % held.len());
                        match o {
                            Some(o) => p.free_pages(Pfn(s), o),
                            None => p.free_contig(Pfn(s), n),
                        }
                    }
                    Op::Free(_) => {}
                    Op::Unfree(x) => {
                        let pfn = Pfn(x % npages as u32);
                        let was = p.is_free(pfn);
                        prop_assert_eq!(p.unfree_page(pfn), was);
                        if was {
                            held.push((pfn.0, 1, Some(0)));
                        }
                    }
                    Op::Contig(n, a) => {
                        if let Some(pfn) = p.alloc_contig(n, 1 << a) {
                            prop_assert_eq!(pfn.0 % (1 << a), 0);
                            held.push((pfn.0, n, None));
                        }
                    }
                }
                if let Err(e) = p.check() {
                    return Err(TestCaseError::fail(e));
                }
                let held_pages: u64 = held.iter().map(|h| h.1).sum();
                prop_assert_eq!(p.free_count(), npages - held_pages);
                let mut sorted = held.clone();
                sorted.sort_unstable();
                for w in sorted.windows(2) {
                    prop_assert!(w[0].0 as u64 + w[0].1 <= w[1].0 as u64, "held blocks overlap");
                }
                for h in &held {
                    prop_assert!(!p.is_free(Pfn(h.0)));
                    prop_assert!(!p.is_free(Pfn(h.0 + h.1 as u32 - 1)));
                }
            }
            for (s, n, o) in held {
                match o {
                    Some(o) => p.free_pages(Pfn(s), o),
                    None => p.free_contig(Pfn(s), n),
                }
            }
            prop_assert_eq!(p.free_count(), npages);
            if let Err(e) = p.check() {
                return Err(TestCaseError::fail(e));
            }
            // Fully coalesced again: the same layout as a fresh allocator.
            let fresh = VmPhys::new(npages, ndomains);
            for o in 0..VM_NFREEORDER {
                prop_assert_eq!(p.free_blocks(o), fresh.free_blocks(o));
            }
        }
    }
}
