//! Page allocation as the rest of the kernel sees it (vm_page_alloc,
//! vm_page_alloc_noobj, vm_page_free): reservations first for object pages,
//! then the buddy allocator, then breaking the least recently changed
//! partially populated reservation when the buddy allocator is dry.
//!
//! The allocator also keeps the page queues and wakes the page daemon
//! (vm_domain_allocate): "free" here is what FreeBSD counts as free, the
//! buddy allocator's free pages plus the unpopulated pages of partially
//! populated reservations (breaking a reservation turns the second kind
//! into the first). An allocation that leaves fewer free pages than the
//! wake-up threshold asks for the daemon; an object page is refused when
//! only the reserve (v_free_reserved) is left, so that the page-table
//! pages a fault needs to map its page can still be had.
//!
//! Invariant: a frame is exactly one of: free in the buddy allocator; an
//! unpopulated page of a reservation; in use (`pflags::INUSE`).

use crate::page::{pflags, pq, ObjId, PageArray, PageQueues, VmPage, NIL};
use crate::phys::{VmPhys, VM_LEVEL_0_ORDER};
use crate::reserv::Reservations;
use splab_hw::Pfn;
use std::collections::BTreeSet;

/// The page daemon's free-page targets, in pages, scaled to the size of
/// memory as vm_pageout_init_domain does.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct PageoutTargets {
    /// v_free_reserved: allocations of object pages fail below this.
    pub free_reserved: u64,
    /// v_free_min: below this the machine is short of memory.
    pub free_min: u64,
    /// v_free_severe.
    pub free_severe: u64,
    /// v_free_target: what the daemon frees up to.
    pub free_target: u64,
    /// v_inactive_target: inactive pages the daemon keeps ready.
    pub inactive_target: u64,
    /// vm.pageout_wakeup_thresh: an allocation leaving fewer free pages
    /// wakes the daemon (90% of the free target).
    pub wakeup_thresh: u64,
    /// v_pageout_free_min.
    pub pageout_free_min: u64,
    /// vm_pageout_page_count: most pages laundered in one cluster.
    pub pageout_page_count: u64,
}

impl PageoutTargets {
    /// FreeBSD's formulas for a domain of `npages` 4 KB pages.
    pub fn for_pages(npages: u64) -> PageoutTargets {
        PageoutTargets::for_pages_of(npages, 4096)
    }

    /// The same for pages of `page` bytes.
    pub fn for_pages_of(npages: u64, page: u64) -> PageoutTargets {
        let pageout_page_count = if npages < 2000 { 8 } else { 32 };
        let interrupt_free_min = 2;
        // 2 * MAXBSIZE / PAGE_SIZE with MAXBSIZE = 64 KB.
        let pageout_free_min = 2 * 65536 / page + interrupt_free_min;
        let mut free_min = if npages > 1024 { 4 + (npages - 1024) / 200 } else { 4 };
        let free_reserved = pageout_page_count + pageout_free_min + npages / 768;
        let mut free_severe = free_min / 2;
        let free_target = 4 * free_min + free_reserved;
        free_min += free_reserved;
        free_severe += free_reserved;
        let inactive_target = ((3 * free_target) / 2).min(npages / 3);
        PageoutTargets {
            free_reserved,
            free_min,
            free_severe,
            free_target,
            inactive_target,
            wakeup_thresh: (free_target / 10) * 9,
            pageout_free_min,
            pageout_page_count,
        }
    }
}

/// The allocator's side of the page daemon: whether it has been asked to
/// run, and how many object-page allocations failed since it last ran.
#[derive(Clone, Debug, Default)]
pub struct PageoutRequest {
    /// vmd_pageout_wanted.
    pub wanted: bool,
    /// vmd_pageout_deficit: pages asked for by allocations that failed.
    pub deficit: u64,
    /// v_pdwakeups: times the daemon was woken.
    pub wakeups: u64,
}

/// What the allocator needs to know about the object a page is for.
#[derive(Clone, Copy, Debug)]
pub struct ObjInfo {
    pub id: ObjId,
    /// Object size in pages.
    pub size: u64,
    /// pg_color: the object's offset 0 corresponds to superpage offset
    /// `color` (in pages), so that object and virtual alignment agree.
    pub color: u32,
    /// Anonymous objects may grow, so a reservation may extend past the end.
    pub anon: bool,
    /// Whether reservations may be made for it (OBJ_COLORED).
    pub colored: bool,
}

pub struct Phys {
    pub buddy: VmPhys,
    pub pages: PageArray,
    pub reserv: Reservations,
    /// Each object's reservations, as (object, first pindex, reservation).
    rvq: BTreeSet<(ObjId, u32, u32)>,
    /// Frames taken at start-up to model a fragmented or aged machine.
    pub pinned: Vec<Pfn>,
    /// The page queues (active, inactive, laundry, unswappable).
    pub queues: PageQueues,
    pub targets: PageoutTargets,
    pub pageout: PageoutRequest,
    /// Object page allocations that would have made a new reservation but
    /// found no free superpage-sized block: their range cannot be promoted
    /// for lack of contiguity (splab.reserv.alloc_failures).
    pub reserv_alloc_failures: u64,
    /// Pages that belong to an object (resident program memory: anonymous,
    /// page cache), now and at most so far.
    pub object_pages: u64,
    pub object_pages_peak: u64,
}

impl Phys {
    /// Physical memory of `npages` frames with amd64's 2 MB reservations.
    pub fn new(npages: u64, ndomains: usize) -> Phys {
        Phys::with_reservation_order(npages, ndomains, VM_LEVEL_0_ORDER as u32)
    }

    /// Physical memory whose reservations are 2^order frames, the
    /// architecture's first superpage size.
    pub fn with_reservation_order(npages: u64, ndomains: usize, order: u32) -> Phys {
        Phys {
            buddy: VmPhys::new(npages, ndomains),
            pages: PageArray::new(npages),
            reserv: Reservations::new(npages, order, true),
            rvq: BTreeSet::new(),
            pinned: Vec::new(),
            queues: PageQueues::default(),
            targets: PageoutTargets::for_pages(npages),
            pageout: PageoutRequest::default(),
            reserv_alloc_failures: 0,
            object_pages: 0,
            object_pages_peak: 0,
        }
    }

    /// Free pages as FreeBSD counts them (vmd_free_count): free in the
    /// buddy allocator or unpopulated in a partially populated reservation.
    pub fn free_count(&self) -> u64 {
        self.buddy.free_count() + self.reserv.partpop_unused()
    }

    /// Asks the page daemon to run (pagedaemon_wakeup).
    pub fn pagedaemon_wakeup(&mut self) {
        if !self.pageout.wanted {
            self.pageout.wanted = true;
            self.pageout.wakeups += 1;
        }
    }

    /// After an allocation: wake the daemon if free pages fell below the
    /// threshold (vm_paging_needed).
    fn after_alloc(&mut self) {
        if self.free_count() < self.targets.wakeup_thresh {
            self.pagedaemon_wakeup();
        }
    }

    /// Puts a page on a queue's tail (or head), taking it off its old one.
    pub fn enqueue(&mut self, m: Pfn, q: u8, at_head: bool) {
        debug_assert!(self.pages.get(m).pageable(), "queueing unmanaged page {m:?}");
        self.queues.requeue(&mut self.pages, m, q, at_head);
    }

    /// Takes a page off its queue.
    pub fn dequeue(&mut self, m: Pfn) {
        self.queues.remove(&mut self.pages, m);
    }

    /// Moves a page to the tail of the inactive queue (vm_page_deactivate).
    pub fn deactivate(&mut self, m: Pfn) {
        if self.pages.get(m).pageable() && self.pages.get(m).queue() != pq::INACTIVE {
            self.enqueue(m, pq::INACTIVE, false);
        }
    }

    /// Marks a page recently used (vm_page_activate): onto the active
    /// queue if it is not there, with at least the initial activity count.
    pub fn activate(&mut self, m: Pfn) {
        if !self.pages.get(m).pageable() {
            return;
        }
        if self.pages.get(m).queue() != pq::ACTIVE {
            self.enqueue(m, pq::ACTIVE, false);
        }
        let p = self.pages.get_mut(m);
        if p.act_count() < crate::page::ACT_INIT {
            p.set_act_count(crate::page::ACT_INIT);
        }
    }

    /// Breaks up `fraction` of the free reservation-sized blocks by pinning
    /// one page in each, as another consumer of memory would have.
    pub fn fragment(&mut self, fraction: f64, seed: u64) {
        let taken = self.buddy.fragment(fraction, seed, self.reserv.order() as usize);
        self.pin(taken);
    }

    /// Ages `fraction` of the free reservation-sized blocks as long use
    /// leaves memory ([`VmPhys::age`](crate::phys::VmPhys::age)): half
    /// their pages held by other consumers, the rest free runs of 2^`run`
    /// frames handed out in no address order.
    pub fn age(&mut self, fraction: f64, seed: u64, run: usize) {
        let taken = self.buddy.age(fraction, seed, self.reserv.order() as usize, run);
        self.pin(taken);
    }

    /// Marks frames taken out of the free lists at start-up as in use by
    /// someone outside the model.
    fn pin(&mut self, taken: Vec<Pfn>) {
        for &p in &taken {
            self.pages.get_mut(p).flags = pflags::INUSE | pflags::UNMANAGED;
        }
        self.pinned.extend(taken);
    }

    /// Initialises a newly allocated page. The reservation's psind mark
    /// survives: the page that completes a reservation may be its first.
    fn mark_inuse(&mut self, pfn: Pfn, object: ObjId, pindex: u32) {
        let m = self.pages.get_mut(pfn);
        debug_assert_eq!(m.queue(), pq::NONE, "allocating a queued page");
        let keep = m.flags & pflags::PSIND1;
        *m = VmPage { object, pindex, flags: pflags::INUSE | keep, ..VmPage::FREE };
        if object != 0 {
            self.object_pages += 1;
            self.object_pages_peak = self.object_pages_peak.max(self.object_pages);
        }
    }

    /// The object's reservation covering `pindex`, if any (the lookup
    /// vm_reserv_alloc_page does through the neighbouring pages).
    fn reserv_covering(&self, obj: ObjId, pindex: u32) -> Option<u32> {
        let n = self.reserv.npages();
        let lo = pindex.saturating_sub(n - 1);
        self.rvq
            .range((obj, lo, 0)..=(obj, pindex, u32::MAX))
            .rev()
            .find(|&&(_, p, i)| pindex < p + n && !self.reserv.is_populated(i, pindex - p))
            .map(|&(_, _, i)| i)
    }

    fn reserv_overlaps(&self, obj: ObjId, first: u32) -> bool {
        let n = self.reserv.npages();
        let lo = first.saturating_sub(n - 1);
        self.rvq.range((obj, lo, 0)..(obj, first + n, 0)).next().is_some()
    }

    /// Tries to allocate the page for (object, pindex) from a reservation,
    /// creating one if the range allows (vm_reserv_alloc_page).
    fn reserv_alloc_page(&mut self, o: &ObjInfo, pindex: u32) -> Option<Pfn> {
        if !self.reserv.enabled || !o.colored {
            return None;
        }
        if let Some(i) = self.reserv_covering(o.id, pindex) {
            let p = self.reserv.get(i).pindex;
            return Some(self.reserv.populate(i, pindex - p, &mut self.pages));
        }
        // The aligned range this page's reservation would cover.
        let n = self.reserv.npages();
        let off = (pindex.wrapping_add(o.color)) % n;
        if off > pindex {
            return None;
        }
        let first = pindex - off;
        // A reservation for an object that will not grow must not extend
        // past its end.
        if !o.anon && first as u64 + n as u64 > o.size {
            return None;
        }
        if self.reserv_overlaps(o.id, first) {
            return None;
        }
        let Some(base) = self.buddy.alloc(self.reserv.order() as usize) else {
            self.reserv_alloc_failures += 1;
            return None;
        };
        let i = self.reserv.create(base, o.id, first);
        self.rvq.insert((o.id, first, i));
        Some(self.reserv.populate(i, off, &mut self.pages))
    }

    /// Breaks the least recently changed partially populated reservation
    /// (vm_reserv_reclaim_inactive). Returns whether one was broken.
    pub fn reclaim_inactive(&mut self) -> bool {
        let Some(i) = self.reserv.partpopq_head() else { return false };
        let (obj, pindex) = (self.reserv.get(i).object, self.reserv.get(i).pindex);
        self.reserv.break_rv(i, &mut self.pages, &mut self.buddy);
        self.rvq.remove(&(obj, pindex, i));
        self.reserv.stats.reclaimed += 1;
        true
    }

    fn alloc_base_page(&mut self) -> Option<Pfn> {
        loop {
            if let Some(p) = self.buddy.alloc(0) {
                return Some(p);
            }
            if !self.reclaim_inactive() {
                return None;
            }
        }
    }

    /// Allocates a page for an object (vm_page_alloc). The page's contents
    /// are not initialised; the caller zeroes or fills it. Fails, and wakes
    /// the page daemon, when only the reserve is left (vm_domain_allocate
    /// with VM_ALLOC_NORMAL) or memory is exhausted.
    pub fn alloc_page(&mut self, o: &ObjInfo, pindex: u32) -> Option<Pfn> {
        self.alloc_page_in(o, pindex, true)
    }

    /// `alloc_page`, trying a reservation only when `reserv` is true (the
    /// fault path passes false for a range advised out of superpages:
    /// `map::eflags::NORESERV`, a splab extension).
    pub fn alloc_page_in(&mut self, o: &ObjInfo, pindex: u32, reserv: bool) -> Option<Pfn> {
        if self.free_count() <= self.targets.free_reserved {
            return self.alloc_failed();
        }
        let from_reserv = if reserv { self.reserv_alloc_page(o, pindex) } else { None };
        let pfn = match from_reserv {
            Some(p) => p,
            None => match self.alloc_base_page() {
                Some(p) => p,
                None => return self.alloc_failed(),
            },
        };
        self.mark_inuse(pfn, o.id, pindex);
        self.after_alloc();
        Some(pfn)
    }

    /// Allocates an aligned block of 2^`order` pages for the object
    /// offsets from `pindex` on, straight from the buddy allocator (no
    /// reservation): what an eager superpage policy allocates at a fault
    /// (Linux's folio of that order, Shimizu's superpage). The pages'
    /// contents are not initialised. None, without waking the page daemon,
    /// when no free block of that order exists or the block would dip
    /// into the reserve: the caller falls back to a smaller order.
    pub fn alloc_block(&mut self, o: &ObjInfo, pindex: u32, order: u32) -> Option<Pfn> {
        let n = 1u64 << order;
        if self.free_count() < self.targets.free_reserved + n {
            return None;
        }
        let base = self.buddy.alloc(order as usize)?;
        for i in 0..n as u32 {
            self.mark_inuse(Pfn(base.0 + i), o.id, pindex + i);
        }
        self.after_alloc();
        Some(base)
    }

    /// Notes a failed allocation: the daemon is woken and told of the
    /// deficit (vm_domain_alloc_fail).
    fn alloc_failed(&mut self) -> Option<Pfn> {
        self.pageout.deficit += 1;
        self.pagedaemon_wakeup();
        None
    }

    /// Allocates a page that belongs to no object, such as a page-table page
    /// (vm_page_alloc_noobj). These may use the reserve (as FreeBSD's
    /// VM_ALLOC_SYSTEM class may), so that a fault that got its page can
    /// also get the page-table pages to map it.
    pub fn alloc_noobj(&mut self) -> Option<Pfn> {
        let Some(pfn) = self.alloc_base_page() else { return self.alloc_failed() };
        self.mark_inuse(pfn, 0, 0);
        self.after_alloc();
        Some(pfn)
    }

    /// Frees a page (vm_page_free): back to its reservation if it is in one,
    /// else to the buddy allocator.
    pub fn free_page(&mut self, pfn: Pfn) {
        debug_assert!(self.pages.get(pfn).has(pflags::INUSE), "freeing free page {pfn:?}");
        debug_assert!(self.pages.get(pfn).md == NIL, "freeing mapped page {pfn:?}");
        self.dequeue(pfn);
        if self.pages.get(pfn).object != 0 {
            self.object_pages -= 1;
        }
        *self.pages.get_mut(pfn) = VmPage::FREE;
        if let Some(i) = self.reserv.of_page(pfn) {
            let r = self.reserv.get(i);
            let (obj, p) = (r.object, r.pindex);
            let idx = pfn.0 - self.reserv.base(i).0;
            let freed_whole = r.popcnt == 1;
            self.reserv.depopulate(i, idx, &mut self.pages, &mut self.buddy);
            if freed_whole {
                self.rvq.remove(&(obj, p, i));
            }
        } else {
            self.buddy.free_pages(pfn, 0);
        }
    }

    /// Moves a page to another object and offset; its reservation moves
    /// with it (vm_page_rename + vm_reserv_rename). `backing_offset` is the
    /// offset of the old object within the new one's backing range.
    pub fn rename_page(&mut self, pfn: Pfn, old: ObjId, new: ObjId, new_pindex: u32, backing_offset: u32) {
        let m = self.pages.get_mut(pfn);
        debug_assert_eq!(m.object, old);
        m.object = new;
        m.pindex = new_pindex;
        if let Some(i) = self.reserv.of_page(pfn) {
            let r = self.reserv.get(i);
            if r.object == old {
                let p = r.pindex;
                // The reservation's first offset in the new object; a range
                // that would start before offset 0 cannot be renamed, so the
                // reservation is broken instead.
                self.rvq.remove(&(old, p, i));
                if p >= backing_offset {
                    let np = p - backing_offset;
                    self.reserv.rename(i, new, np);
                    self.rvq.insert((new, np, i));
                } else {
                    self.reserv.break_rv(i, &mut self.pages, &mut self.buddy);
                }
            }
        }
    }

    /// The first page of the fully populated reservation holding `pfn`
    /// (vm_reserv_to_superpage): the reservation marks that page with
    /// psind 1 (`pflags::PSIND1`) while it is full.
    pub fn to_superpage(&self, pfn: Pfn) -> Option<Pfn> {
        let m0 = Pfn(pfn.0 & !(self.reserv.npages() - 1));
        self.pages.get(m0).has(pflags::PSIND1).then_some(m0)
    }

    pub fn check(&self) -> Result<(), String> {
        self.buddy.check()?;
        self.queues.check(&self.pages)?;
        self.reserv.check(&self.pages, &self.buddy)?;
        for &(obj, p, i) in &self.rvq {
            let r = self.reserv.get(i);
            if r.object != obj || r.pindex != p {
                return Err(format!("rvq entry ({obj}, {p}, {i}) but reservation says ({}, {})", r.object, r.pindex));
            }
        }
        Ok(())
    }

    pub fn host_bytes(&self) -> u64 {
        self.pages.host_bytes() + self.reserv.host_bytes() + self.buddy.npages() / 4 + self.rvq.len() as u64 * 24
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(id: ObjId) -> ObjInfo {
        ObjInfo { id, size: 1 << 20, color: 0, anon: true, colored: true }
    }

    /// Reservations of each architecture's size: 1 MB (armv7), 2 MB
    /// (amd64, arm64, riscv) and 16 MB (powerpc64) blocks fill, mark their
    /// first page, answer the sub-run query, and free whole.
    #[test]
    fn reservations_of_every_size() {
        for order in [8u32, 9, 12] {
            let n = 1u32 << order;
            let mut p = Phys::with_reservation_order(4 * 4096, 1, order);
            let o = anon(7);
            let pages: Vec<Pfn> = (0..n).map(|k| p.alloc_page(&o, k).unwrap()).collect();
            assert_eq!(pages[0].0 % n, 0, "order {order}: the reservation is aligned");
            assert!(pages.windows(2).all(|w| w[1].0 == w[0].0 + 1), "order {order}: contiguous");
            assert_eq!(p.to_superpage(pages[n as usize / 2]), Some(pages[0]));
            assert_eq!(p.reserv.level_iffullpop(pages[3]), 0);
            p.check().unwrap();
            // Free one page of the second 16-page run: that run is no longer
            // populated, the first still is, the reservation is partial.
            p.free_page(pages[17]);
            assert!(p.reserv.is_populated_run(pages[3], 16));
            assert!(!p.reserv.is_populated_run(pages[20], 16));
            assert_eq!(p.to_superpage(pages[3]), None);
            p.check().unwrap();
            for (k, &m) in pages.iter().enumerate() {
                if k != 17 {
                    p.free_page(m);
                }
            }
            assert_eq!(p.reserv.stats.freed, 1, "order {order}: freed whole");
            p.check().unwrap();
        }
    }

    /// The page that completes a reservation may be its first one; the
    /// superpage mark must survive that page's initialisation.
    #[test]
    fn first_page_allocated_last_keeps_the_mark() {
        let mut p = Phys::with_reservation_order(2048, 1, 8);
        let o = anon(3);
        let pages: Vec<Pfn> = (1..256).rev().map(|k| p.alloc_page(&o, k).unwrap()).collect();
        let first = p.alloc_page(&o, 0).unwrap();
        assert_eq!(first.0 + 1, pages[pages.len() - 1].0);
        assert_eq!(p.to_superpage(first), Some(first));
        p.check().unwrap();
    }

    /// Breaking a reservation returns its unpopulated pages to the buddy
    /// allocator; the populated ones stay in use.
    #[test]
    fn reclaim_breaks_the_oldest_partial_reservation() {
        let mut p = Phys::with_reservation_order(2048, 1, 8);
        let a = p.alloc_page(&anon(1), 0).unwrap();
        let b = p.alloc_page(&anon(2), 0).unwrap();
        let free_before = p.buddy.free_count();
        assert!(p.reclaim_inactive());
        assert_eq!(p.buddy.free_count(), free_before + 255);
        assert_eq!(p.reserv.of_page(a), None, "the older reservation was broken");
        assert!(p.reserv.of_page(b).is_some());
        p.check().unwrap();
    }
}
