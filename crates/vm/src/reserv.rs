//! Superpage reservations (FreeBSD vm_reserv.c, after Navarro et al.).
//!
//! When a fault needs a page for an object range that could become a
//! superpage, a whole aligned physical block of the architecture's first
//! superpage size (2 MB on amd64, arm64 and riscv, 1 MB on armv7, 16 MB on
//! powerpc64, 4 MB on alpha; VM_LEVEL_0_ORDER in FreeBSD's vmparam.h) is reserved for that
//! range of the object and only the faulting page is handed out; later
//! faults on neighbouring offsets take the page at the matching position, so
//! virtual contiguity becomes physical contiguity and the pmap can promote.
//!
//! Data structures and what is always true of them:
//! - `rv[i]` describes the block of N = 2^order frames starting at frame
//!   i * N (the reservation array is indexed by physical address, as
//!   vm_reserv_array is), and `popmap[i * N / 64..]` its population. It is
//!   in use iff `object != 0`.
//! - For a reservation in use: `pindex` is the object offset (in pages) of
//!   its first page; page k of the block, if populated, is the object's page
//!   at `pindex + k`; `popcnt` equals the number of bits set in `popmap`;
//!   0 < popcnt; unpopulated pages of the block are in no buddy free list.
//! - A reservation is on the partially-populated queue iff it is in use and
//!   0 < popcnt < N. The queue is ordered by last change: the head is the
//!   least recently populated or depopulated, and is the first to be broken
//!   when the buddy allocator runs dry.
//! - Each object lists its reservations (`VmObject::rvq`), keyed by
//!   (pindex, reservation index).
//!
//! Sizes below the reservation's (arm64's 64 KB contiguous runs, armv7's
//! 64 KB large pages, alpha's 64 KB and 512 KB blocks) are not reservations
//! of their own: as in FreeBSD, the
//! pmap asks whether an aligned run inside the reservation is fully
//! populated (`is_populated_run`, vm_reserv_is_populated).

use crate::page::{pflags, ObjId, PageArray, NIL};
use crate::phys::VmPhys;
use splab_hw::Pfn;

/// Pages in the largest reservation any architecture has (powerpc64's
/// 16 MB, with room to spare). Object colours are kept modulo this, which
/// keeps them right modulo every smaller power of two.
pub const MAX_RESERV_NPAGES: u32 = 1 << 15;

#[derive(Clone)]
pub struct Reserv {
    pub object: ObjId,
    pub pindex: u32,
    pub popcnt: u16,
    inpartpopq: bool,
    prev: u32,
    next: u32,
}

impl Reserv {
    const FREE: Reserv = Reserv { object: 0, pindex: 0, popcnt: 0, inpartpopq: false, prev: NIL, next: NIL };
}

/// The counters FreeBSD exports under vm.reserv.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReservStats {
    /// vm.reserv.broken: reservations broken (unpopulated pages returned).
    pub broken: u64,
    /// vm.reserv.freed: reservations freed whole (popcnt dropped to 0).
    pub freed: u64,
    /// vm.reserv.reclaimed: reservations broken to satisfy an allocation.
    pub reclaimed: u64,
    /// Reservations created (splab.reserv.allocated).
    pub allocated: u64,
    /// Reservations that became fully populated (splab.reserv.fullpop_events).
    pub fullpop_events: u64,
}

pub struct Reservations {
    /// log2 of the pages in a reservation (VM_LEVEL_0_ORDER).
    order: u32,
    /// Pages in a reservation (VM_LEVEL_0_NPAGES).
    n: u32,
    rv: Vec<Reserv>,
    /// Population bitmaps, n / 64 words per reservation (at least one).
    popmap: Vec<u64>,
    head: u32,
    tail: u32,
    partpop: u64,
    partpop_unused_pages: u64,
    fullpop: u64,
    pub stats: ReservStats,
    /// Whether reservations are made at all (on whenever superpages are).
    pub enabled: bool,
}

impl Reservations {
    /// Reservations of 2^order pages over `npages` frames (order 6 to 15).
    pub fn new(npages: u64, order: u32, enabled: bool) -> Reservations {
        assert!((6..=15).contains(&order), "reservation order {order}");
        let n = 1u32 << order;
        let count = npages.div_ceil(n as u64) as usize;
        Reservations {
            order,
            n,
            rv: vec![Reserv::FREE; count],
            popmap: vec![0; count * (n as usize / 64)],
            head: NIL,
            tail: NIL,
            partpop: 0,
            partpop_unused_pages: 0,
            fullpop: 0,
            stats: ReservStats::default(),
            enabled,
        }
    }

    pub fn get(&self, i: u32) -> &Reserv {
        &self.rv[i as usize]
    }

    /// Pages in a reservation (VM_LEVEL_0_NPAGES).
    #[inline]
    pub fn npages(&self) -> u32 {
        self.n
    }

    /// log2 of the pages in a reservation (VM_LEVEL_0_ORDER).
    pub fn order(&self) -> u32 {
        self.order
    }

    fn words(&self, i: u32) -> std::ops::Range<usize> {
        let w = self.n as usize / 64;
        i as usize * w..(i as usize + 1) * w
    }

    /// Whether page `idx` of reservation `i` is populated.
    #[inline]
    pub fn is_populated(&self, i: u32, idx: u32) -> bool {
        self.popmap[self.words(i).start + idx as usize / 64] >> (idx % 64) & 1 != 0
    }

    fn set_populated(&mut self, i: u32, idx: u32, on: bool) {
        let k = self.words(i).start + idx as usize / 64;
        let w = &mut self.popmap[k];
        if on {
            *w |= 1 << (idx % 64);
        } else {
            *w &= !(1 << (idx % 64));
        }
    }

    /// Whether `pfn` lies in a reservation whose aligned run of `npages`
    /// pages around it is fully populated (vm_reserv_is_populated): the
    /// test for superpage sizes smaller than a reservation.
    pub fn is_populated_run(&self, pfn: Pfn, npages: u32) -> bool {
        debug_assert!(npages.is_power_of_two() && npages <= self.n);
        let Some(i) = self.of_page(pfn) else { return false };
        let first = (pfn.0 - self.base(i).0) & !(npages - 1);
        (first..first + npages).all(|k| self.is_populated(i, k))
    }

    /// The reservation whose block holds `pfn` (vm_reserv_from_page), if that
    /// block is reserved.
    #[inline]
    pub fn of_page(&self, pfn: Pfn) -> Option<u32> {
        let i = pfn.0 >> self.order;
        (self.rv.get(i as usize)?.object != 0).then_some(i)
    }

    /// The first frame of reservation `i`'s block.
    #[inline]
    pub fn base(&self, i: u32) -> Pfn {
        Pfn(i << self.order)
    }

    fn unlink(&mut self, i: u32) {
        let (p, n) = (self.rv[i as usize].prev, self.rv[i as usize].next);
        if p == NIL {
            self.head = n;
        } else {
            self.rv[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.rv[n as usize].prev = p;
        }
        let r = &mut self.rv[i as usize];
        r.prev = NIL;
        r.next = NIL;
        r.inpartpopq = false;
        self.partpop -= 1;
        self.partpop_unused_pages -= (self.n - r.popcnt as u32) as u64;
    }

    fn push_tail(&mut self, i: u32) {
        let (t, n) = (self.tail, self.n);
        {
            let r = &mut self.rv[i as usize];
            r.prev = t;
            r.next = NIL;
            r.inpartpopq = true;
            self.partpop += 1;
            self.partpop_unused_pages += (n - r.popcnt as u32) as u64;
        }
        if t == NIL {
            self.head = i;
        } else {
            self.rv[t as usize].next = i;
        }
        self.tail = i;
    }

    /// Takes the reservation off the queue before its population changes
    /// (the queue's unused-page total is kept from the count).
    fn dequeue(&mut self, i: u32) {
        if self.rv[i as usize].inpartpopq {
            self.unlink(i);
        }
    }

    /// Puts the reservation at its place on the partially-populated queue
    /// after a change of population: the tail if partial, off if full.
    fn requeue(&mut self, i: u32) {
        debug_assert!(!self.rv[i as usize].inpartpopq);
        let c = self.rv[i as usize].popcnt as u32;
        if c > 0 && c < self.n {
            self.push_tail(i);
        }
    }

    /// Creates a reservation over a freshly allocated block for the
    /// object range starting at `pindex` (the second half of
    /// vm_reserv_alloc_page).
    pub fn create(&mut self, base: Pfn, object: ObjId, pindex: u32) -> u32 {
        debug_assert_eq!(base.0 % self.n, 0);
        let i = base.0 >> self.order;
        let r = &mut self.rv[i as usize];
        debug_assert_eq!(r.object, 0, "reservation {i} already in use");
        *r = Reserv { object, pindex, ..Reserv::FREE };
        self.stats.allocated += 1;
        i
    }

    /// Marks page `idx` of the reservation populated (vm_reserv_populate).
    /// Returns the page's frame.
    pub fn populate(&mut self, i: u32, idx: u32, pages: &mut PageArray) -> Pfn {
        self.dequeue(i);
        debug_assert!(!self.is_populated(i, idx), "reservation {i} page {idx} populated twice");
        self.set_populated(i, idx, true);
        let r = &mut self.rv[i as usize];
        r.popcnt += 1;
        if r.popcnt as u32 == self.n {
            self.fullpop += 1;
            self.stats.fullpop_events += 1;
            pages.get_mut(self.base(i)).flags |= pflags::PSIND1;
        }
        self.requeue(i);
        Pfn(self.base(i).0 + idx)
    }

    /// Marks page `idx` unpopulated (vm_reserv_depopulate); a reservation
    /// whose count drops to zero is freed whole to the buddy allocator.
    pub fn depopulate(&mut self, i: u32, idx: u32, pages: &mut PageArray, phys: &mut VmPhys) {
        self.dequeue(i);
        debug_assert!(self.is_populated(i, idx), "reservation {i} page {idx} not populated");
        if self.rv[i as usize].popcnt as u32 == self.n {
            self.fullpop -= 1;
            pages.get_mut(self.base(i)).flags &= !pflags::PSIND1;
        }
        self.set_populated(i, idx, false);
        let r = &mut self.rv[i as usize];
        r.popcnt -= 1;
        if r.popcnt == 0 {
            self.rv[i as usize] = Reserv::FREE;
            phys.free_pages(self.base(i), self.order as usize);
            self.stats.freed += 1;
        } else {
            self.requeue(i);
        }
    }

    /// Breaks a reservation (vm_reserv_break): its unpopulated pages go back
    /// to the buddy allocator as maximal runs; its populated pages become
    /// ordinary pages. The caller removes it from its object's list.
    pub fn break_rv(&mut self, i: u32, pages: &mut PageArray, phys: &mut VmPhys) -> ObjId {
        if self.rv[i as usize].inpartpopq {
            self.unlink(i);
        }
        let r = self.rv[i as usize].clone();
        if r.popcnt as u32 == self.n {
            self.fullpop -= 1;
            pages.get_mut(self.base(i)).flags &= !pflags::PSIND1;
        }
        let base = self.base(i).0;
        let mut k = 0;
        while k < self.n {
            if self.is_populated(i, k) {
                k += 1;
                continue;
            }
            let start = k;
            while k < self.n && !self.is_populated(i, k) {
                k += 1;
            }
            phys.free_contig(Pfn(base + start), (k - start) as u64);
        }
        self.rv[i as usize] = Reserv::FREE;
        let w = self.words(i);
        self.popmap[w].fill(0);
        self.stats.broken += 1;
        r.object
    }

    /// The least recently changed partially populated reservation, the one
    /// vm_reserv_reclaim_inactive breaks.
    pub fn partpopq_head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Moves a reservation to another object (vm_reserv_rename), when a
    /// shadow object absorbs its backing object's pages.
    pub fn rename(&mut self, i: u32, new_object: ObjId, new_pindex: u32) {
        let r = &mut self.rv[i as usize];
        r.object = new_object;
        r.pindex = new_pindex;
    }

    /// 0 if the reservation holding `pfn` is fully populated, -1 otherwise
    /// (vm_reserv_level_iffullpop).
    #[inline]
    pub fn level_iffullpop(&self, pfn: Pfn) -> i32 {
        match self.of_page(pfn) {
            Some(i) if self.rv[i as usize].popcnt as u32 == self.n => 0,
            _ => -1,
        }
    }

    /// Unpopulated pages of partially populated reservations: free as far
    /// as the page daemon is concerned (they count in vmd_free_count), and
    /// returned to the buddy allocator by breaking the reservation.
    pub fn partpop_unused(&self) -> u64 {
        self.partpop_unused_pages
    }

    /// vm.reserv.fullpop: current number of fully populated reservations.
    pub fn fullpop(&self) -> u64 {
        self.fullpop
    }

    /// vm.reserv.partpopq in FreeBSD's text form: per level, the unused
    /// kilobytes and the number of reservations on the queue.
    /// `page_kb` is the base page size in KB.
    pub fn partpopq_text(&self, page_kb: u64) -> String {
        format!(
            "\nLEVEL     SIZE  NUMBER\n\n   0: {:>8}K, {:>6}\n",
            self.partpop_unused_pages * page_kb,
            self.partpop
        )
    }

    /// Verifies the invariants stated at the top of this module against the
    /// page array (each populated page belongs to the reservation's object
    /// at the matching offset, or was renamed with it).
    pub fn check(&self, pages: &PageArray, phys: &VmPhys) -> Result<(), String> {
        let mut q = 0;
        let mut cur = self.head;
        let mut prev = NIL;
        while cur != NIL {
            let r = &self.rv[cur as usize];
            if !r.inpartpopq || r.prev != prev {
                return Err(format!("partpopq link broken at reservation {cur}"));
            }
            q += 1;
            prev = cur;
            cur = r.next;
        }
        if q != self.partpop {
            return Err(format!("partpopq has {q} entries, count says {}", self.partpop));
        }
        let unused: u64 = self.rv.iter().filter(|r| r.inpartpopq).map(|r| (self.n - r.popcnt as u32) as u64).sum();
        if unused != self.partpop_unused_pages {
            return Err(format!("partpopq holds {unused} unused pages, total says {}", self.partpop_unused_pages));
        }
        let mut full = 0;
        for (i, r) in self.rv.iter().enumerate() {
            if r.object == 0 {
                continue;
            }
            let n: u32 = self.popmap[self.words(i as u32)].iter().map(|w| w.count_ones()).sum();
            if n != r.popcnt as u32 || n == 0 {
                return Err(format!("reservation {i}: popcnt {} but {n} bits set", r.popcnt));
            }
            if n == self.n {
                full += 1;
            }
            if r.inpartpopq != (n < self.n) {
                return Err(format!("reservation {i}: popcnt {n}, inpartpopq {}", r.inpartpopq));
            }
            let base = self.base(i as u32);
            if pages.get(base).has(pflags::PSIND1) != (n == self.n) {
                return Err(format!("reservation {i}: popcnt {n}, psind mark {} (first page flags {:#x}, object {})", pages.get(base).has(pflags::PSIND1), pages.get(base).flags, pages.get(base).object));
            }
            for k in 0..self.n {
                let pfn = Pfn(base.0 + k);
                let m = pages.get(pfn);
                if self.is_populated(i as u32, k) {
                    if !m.has(pflags::INUSE) || phys.is_free(pfn) {
                        return Err(format!("reservation {i}: populated page {k} ({pfn:?}) not in use"));
                    }
                } else if phys.is_free(pfn) || m.has(pflags::INUSE) {
                    return Err(format!("reservation {i}: unpopulated page {k} ({pfn:?}) is free or in use"));
                }
            }
        }
        if full != self.fullpop {
            return Err(format!("{full} full reservations, count says {}", self.fullpop));
        }
        Ok(())
    }

    pub fn host_bytes(&self) -> u64 {
        (self.rv.len() * std::mem::size_of::<Reserv>() + self.popmap.len() * 8) as u64
    }
}
