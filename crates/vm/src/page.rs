//! The page array: one `VmPage` per 4 KB frame of physical memory, indexed by
//! frame number (FreeBSD's vm_page_array), and the page queues the page
//! daemon scans (FreeBSD's vm_pagequeue), linked through the pages
//! themselves.
//!
//! `VmPage` is 24 bytes per frame (256 GiB of modelled memory costs 1.5 GiB
//! of host memory, 16 GiB costs 96 MiB). It was 16 bytes before page-out
//! existed; the queues need O(1) removal of a page from the middle of its
//! queue (when it is freed, faulted on or reactivated), as FreeBSD's
//! `plinks.q` TAILQ gives, so each page carries two 32-bit links. None of
//! the other fields is free for an object page (`object`, `pindex`, `md`
//! and `flags` are all in use, `ref_count` has only 16 bits), so the
//! growth is the links themselves: 8 bytes per 4 KB frame, 0.2%.
//!
//! The meaning of the fields depends on who owns the frame:
//! - a page of an object: `object` and `pindex` name it; it is on exactly
//!   one page queue (`queue()`), linked by `qprev`/`qnext`;
//! - a page-table page: `object` is 0, `pindex` is the pmap's index of the
//!   table, `ref_count` counts its valid entries; never on a queue;
//! - a free frame: nothing here is meaningful (the buddy bitmaps say it is
//!   free).
//!
//! `md` is the machine-dependent part: the head of the page's PV list.
//!
//! `flags` holds the page's flags (`pflags`) in its low 7 bits, the queue
//! it is on in bits 7-9 and its activity count (act_count) in bits 10-15.

use splab_hw::Pfn;

/// Object identifier; 0 means "no object".
pub type ObjId = u32;

/// "No entry" value for 32-bit links.
pub const NIL: u32 = u32::MAX;

pub mod pflags {
    /// The page holds data that differs from its backing store (m->dirty).
    pub const DIRTY: u16 = 1 << 0;
    /// Referenced since last scanned (PGA_REFERENCED).
    pub const REFERENCED: u16 = 1 << 1;
    /// A page-table page of some pmap.
    pub const PTPAGE: u16 = 1 << 2;
    /// Allocated and in use (object page, page-table page or pinned).
    pub const INUSE: u16 = 1 << 3;
    /// Not managed: no PV entries are kept (never promoted, never paged out).
    pub const UNMANAGED: u16 = 1 << 4;
    /// First page of a fully populated reservation (m->psind = 1).
    pub const PSIND1: u16 = 1 << 5;
    /// Part of a large-page shared-memory object (physically contiguous
    /// 1 GB run, mapped explicitly).
    pub const LARGEPAGE: u16 = 1 << 6;
}

/// The page queues (FreeBSD's PQ_*), as stored in a page's queue field.
pub mod pq {
    /// On no queue (PQ_NONE): free, a page-table page, or unmanaged.
    pub const NONE: u8 = 0;
    /// Not referenced lately: the page daemon frees these first, clean
    /// ones at once, dirty ones through the laundry (PQ_INACTIVE).
    pub const INACTIVE: u8 = 1;
    /// Recently used (PQ_ACTIVE); aged by the activity count.
    pub const ACTIVE: u8 = 2;
    /// Dirty and inactive, waiting to be written out (PQ_LAUNDRY).
    pub const LAUNDRY: u8 = 3;
    /// Dirty anonymous pages that could not be written because swap was
    /// full (PQ_UNSWAPPABLE).
    pub const UNSWAPPABLE: u8 = 4;
    /// Number of real queues + 1 (index 0 is NONE).
    pub const COUNT: usize = 5;
    pub const NAMES: [&str; COUNT] = ["none", "inactive", "active", "laundry", "unswappable"];
}

const FLAG_BITS: u16 = 0x7f;
const QUEUE_SHIFT: u32 = 7;
const QUEUE_MASK: u16 = 0x7 << QUEUE_SHIFT;
const ACT_SHIFT: u32 = 10;
const ACT_MASK: u16 = 0x3f << ACT_SHIFT;
/// Largest activity count the page can hold (FreeBSD's ACT_MAX is 64;
/// six bits give 63).
pub const ACT_MAX: u8 = 63;
/// Activity count a page gets when it is (re)activated (ACT_INIT).
pub const ACT_INIT: u8 = 5;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct VmPage {
    pub object: ObjId,
    pub pindex: u32,
    /// Machine-dependent: head of this page's PV list.
    pub md: u32,
    /// Previous and next page on the page's queue (plinks.q), NIL at the
    /// ends and when the page is on no queue.
    pub qprev: u32,
    pub qnext: u32,
    /// Page-table pages: number of valid entries. Object pages: wirings.
    pub ref_count: u16,
    /// `pflags`, the queue and the activity count (see the module comment).
    pub flags: u16,
}

const _: () = assert!(std::mem::size_of::<VmPage>() == 24);
const _: () = assert!(pflags::LARGEPAGE as u32 <= FLAG_BITS as u32);

impl VmPage {
    pub const FREE: VmPage = VmPage { object: 0, pindex: 0, md: NIL, qprev: NIL, qnext: NIL, ref_count: 0, flags: 0 };

    pub fn has(&self, f: u16) -> bool {
        self.flags & f & FLAG_BITS != 0
    }
    /// The queue the page is on (`pq::*`).
    #[inline]
    pub fn queue(&self) -> u8 {
        ((self.flags & QUEUE_MASK) >> QUEUE_SHIFT) as u8
    }
    fn set_queue(&mut self, q: u8) {
        self.flags = (self.flags & !QUEUE_MASK) | ((q as u16) << QUEUE_SHIFT);
    }
    /// The page's activity count (m->act_count).
    #[inline]
    pub fn act_count(&self) -> u8 {
        ((self.flags & ACT_MASK) >> ACT_SHIFT) as u8
    }
    pub fn set_act_count(&mut self, a: u8) {
        self.flags = (self.flags & !ACT_MASK) | ((a.min(ACT_MAX) as u16) << ACT_SHIFT);
    }
    /// Whether the page daemon may look at the page: a managed page of an
    /// object (large-page memory and page-table pages are not).
    pub fn pageable(&self) -> bool {
        self.object != 0 && self.has(pflags::INUSE) && !self.has(pflags::UNMANAGED | pflags::PTPAGE)
    }
}

pub struct PageArray {
    pages: Vec<VmPage>,
}

impl PageArray {
    pub fn new(npages: u64) -> PageArray {
        PageArray { pages: vec![VmPage::FREE; npages as usize] }
    }
    #[inline]
    pub fn get(&self, pfn: Pfn) -> &VmPage {
        &self.pages[pfn.idx()]
    }
    #[inline]
    pub fn get_mut(&mut self, pfn: Pfn) -> &mut VmPage {
        &mut self.pages[pfn.idx()]
    }
    pub fn len(&self) -> usize {
        self.pages.len()
    }
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }
    pub fn host_bytes(&self) -> u64 {
        (self.pages.len() * std::mem::size_of::<VmPage>()) as u64
    }
}

/// One page queue (struct vm_pagequeue): a doubly linked list through the
/// pages' `qprev`/`qnext`, and its length.
#[derive(Clone, Copy, Debug)]
pub struct PageQueue {
    pub head: u32,
    pub tail: u32,
    pub cnt: u64,
}

impl Default for PageQueue {
    fn default() -> Self {
        PageQueue { head: NIL, tail: NIL, cnt: 0 }
    }
}

/// The page queues of the machine (one domain's vmd_pagequeues).
///
/// What is always true: a page is on queue q iff its queue field says q
/// (q != NONE); following `qnext` from `head` visits exactly the `cnt`
/// pages of the queue, and `qprev` mirrors it; a page on no queue has NIL
/// links.
#[derive(Clone, Debug, Default)]
pub struct PageQueues {
    pub q: [PageQueue; pq::COUNT],
}

impl PageQueues {
    /// Number of pages on queue `q`.
    pub fn count(&self, q: u8) -> u64 {
        self.q[q as usize].cnt
    }

    /// The first page of queue `q` (the oldest), if any.
    pub fn head(&self, q: u8) -> Option<Pfn> {
        let h = self.q[q as usize].head;
        (h != NIL).then_some(Pfn(h))
    }

    /// The page after `m` on its queue.
    pub fn next(&self, pages: &PageArray, m: Pfn) -> Option<Pfn> {
        let n = pages.get(m).qnext;
        (n != NIL).then_some(Pfn(n))
    }

    /// Puts `m`, which is on no queue, at the tail (or the head) of queue
    /// `q` (vm_pagequeue's TAILQ_INSERT_TAIL / _HEAD).
    pub fn insert(&mut self, pages: &mut PageArray, m: Pfn, q: u8, at_head: bool) {
        debug_assert!(q != pq::NONE && (q as usize) < pq::COUNT);
        debug_assert_eq!(pages.get(m).queue(), pq::NONE, "page {m:?} already on a queue");
        let qu = &mut self.q[q as usize];
        let (prev, next) = if at_head { (NIL, qu.head) } else { (qu.tail, NIL) };
        {
            let p = pages.get_mut(m);
            p.qprev = prev;
            p.qnext = next;
            p.set_queue(q);
        }
        if prev == NIL {
            qu.head = m.0;
        } else {
            pages.get_mut(Pfn(prev)).qnext = m.0;
        }
        if next == NIL {
            qu.tail = m.0;
        } else {
            pages.get_mut(Pfn(next)).qprev = m.0;
        }
        qu.cnt += 1;
    }

    /// Takes `m` off whatever queue it is on (vm_page_dequeue); nothing
    /// happens if it is on none.
    pub fn remove(&mut self, pages: &mut PageArray, m: Pfn) {
        let q = pages.get(m).queue();
        if q == pq::NONE {
            return;
        }
        let (prev, next) = (pages.get(m).qprev, pages.get(m).qnext);
        let qu = &mut self.q[q as usize];
        if prev == NIL {
            qu.head = next;
        } else {
            pages.get_mut(Pfn(prev)).qnext = next;
        }
        if next == NIL {
            qu.tail = prev;
        } else {
            pages.get_mut(Pfn(next)).qprev = prev;
        }
        qu.cnt -= 1;
        let p = pages.get_mut(m);
        p.qprev = NIL;
        p.qnext = NIL;
        p.set_queue(pq::NONE);
    }

    /// Moves `m` to the tail (or head) of queue `q`, from wherever it is.
    pub fn requeue(&mut self, pages: &mut PageArray, m: Pfn, q: u8, at_head: bool) {
        self.remove(pages, m);
        self.insert(pages, m, q, at_head);
    }

    /// Verifies the invariants above; returns how many pages are queued.
    pub fn check(&self, pages: &PageArray) -> Result<u64, String> {
        let mut total = 0;
        for q in 1..pq::COUNT as u8 {
            let qu = &self.q[q as usize];
            let (mut n, mut prev, mut cur) = (0u64, NIL, qu.head);
            while cur != NIL {
                let p = pages.get(Pfn(cur));
                if p.queue() != q || p.qprev != prev {
                    return Err(format!("{} queue broken at frame {cur}: queue field {}, prev {} (expected {prev})", pq::NAMES[q as usize], p.queue(), p.qprev));
                }
                if !p.pageable() {
                    return Err(format!("{} queue holds frame {cur}, which is not a managed object page (flags {:#x})", pq::NAMES[q as usize], p.flags));
                }
                n += 1;
                if n > qu.cnt {
                    return Err(format!("{} queue longer than its count {}", pq::NAMES[q as usize], qu.cnt));
                }
                prev = cur;
                cur = p.qnext;
            }
            if n != qu.cnt || prev != qu.tail {
                return Err(format!("{} queue: {n} pages linked, count {}, tail {} vs {prev}", pq::NAMES[q as usize], qu.cnt, qu.tail));
            }
            total += n;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(pages: &mut PageArray, i: u32) -> Pfn {
        let m = pages.get_mut(Pfn(i));
        m.object = 1;
        m.pindex = i;
        m.flags = pflags::INUSE;
        Pfn(i)
    }

    #[test]
    fn queue_field_and_activity_count_share_flags_without_clobbering() {
        let mut p = VmPage::FREE;
        p.flags = pflags::INUSE | pflags::DIRTY;
        p.set_queue(pq::LAUNDRY);
        p.set_act_count(200);
        assert_eq!((p.queue(), p.act_count()), (pq::LAUNDRY, ACT_MAX));
        assert!(p.has(pflags::DIRTY) && p.has(pflags::INUSE) && !p.has(pflags::REFERENCED));
        p.set_act_count(0);
        assert_eq!(p.queue(), pq::LAUNDRY);
    }

    #[test]
    fn insert_remove_requeue_keep_the_lists_consistent() {
        let mut pages = PageArray::new(16);
        let mut q = PageQueues::default();
        let ms: Vec<Pfn> = (0..6).map(|i| page(&mut pages, i)).collect();
        for &m in &ms[..4] {
            q.insert(&mut pages, m, pq::ACTIVE, false);
        }
        q.insert(&mut pages, ms[4], pq::INACTIVE, false);
        q.insert(&mut pages, ms[5], pq::INACTIVE, true);
        assert_eq!(q.head(pq::INACTIVE), Some(ms[5]), "inserted at the head");
        q.remove(&mut pages, ms[1]);
        q.remove(&mut pages, ms[1]);
        q.requeue(&mut pages, ms[0], pq::LAUNDRY, false);
        assert_eq!((q.count(pq::ACTIVE), q.count(pq::INACTIVE), q.count(pq::LAUNDRY)), (2, 2, 1));
        assert_eq!(q.head(pq::ACTIVE), Some(ms[2]));
        assert_eq!(q.next(&pages, ms[2]), Some(ms[3]));
        assert_eq!(q.check(&pages), Ok(5));
        // A page linked in one place but claiming another queue is found.
        pages.get_mut(ms[3]).set_queue(pq::INACTIVE);
        assert!(q.check(&pages).is_err());
    }
}
