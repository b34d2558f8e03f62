//! What every pmap does to physical pages outside its descriptor format:
//! page-table pages (allocated zeroed, freed, their valid entries counted
//! in `ref_count`), the page-table page kept aside at promotion, and the
//! page state a mapping hands over when it goes (dirty, referenced).

use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::PmapEnv;
use std::collections::HashMap;

/// A page-table page set aside at promotion (pmap_insert_pt_page), and
/// whether its entries still describe the superpage as they are
/// (FreeBSD's mpte->valid), so that demotion can reuse it without
/// refilling it.
#[derive(Clone, Copy, Debug)]
pub struct Stash {
    pub ptp: Pfn,
    pub valid: bool,
}

/// The page-table pages of one address space kept aside at promotion, one
/// per superpage of 2^`SHIFT` bytes (the pmap's pm_root radix tree of
/// stashed pages). A stashed page is referenced by no entry: it is reused
/// when its superpage is demoted and freed when it is removed.
#[derive(Default)]
pub struct Stashes<const SHIFT: u32> {
    by_sp: HashMap<u64, Stash>,
}

impl<const SHIFT: u32> Stashes<SHIFT> {
    /// Keeps `ptp` for the superpage at `va` (pmap_insert_pt_page).
    pub fn insert(&mut self, va: u64, ptp: Pfn, valid: bool) {
        self.by_sp.insert(va >> SHIFT, Stash { ptp, valid });
    }

    /// Takes the page kept for the superpage at `va`
    /// (pmap_remove_pt_page).
    pub fn take(&mut self, va: u64) -> Option<Stash> {
        self.by_sp.remove(&(va >> SHIFT))
    }

    /// The superpage at `va` is removed: its kept page, if any, has no
    /// valid entries left to count and is queued on `free`.
    pub fn discard(&mut self, env: &mut PmapEnv, va: u64, free: &mut Vec<Pfn>) {
        if let Some(s) = self.take(va) {
            env.phys.pages.get_mut(s.ptp).ref_count = 0;
            free.push(s.ptp);
        }
    }

    /// Whether a page is kept for the superpage at `va`.
    pub fn contains(&self, va: u64) -> bool {
        self.by_sp.contains_key(&(va >> SHIFT))
    }

    /// The superpages with a kept page, as (virtual address, stash).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Stash)> {
        self.by_sp.iter().map(|(&k, s)| (k << SHIFT, s))
    }

    /// Frees every kept page (pmap_release).
    pub fn release(&self, env: &mut PmapEnv) {
        for s in self.by_sp.values() {
            free(env, s.ptp);
        }
    }
}

/// Allocates a zeroed page-table page with no valid entries
/// (vm_page_alloc_noobj with VM_ALLOC_ZERO).
pub fn alloc(env: &mut PmapEnv) -> Option<Pfn> {
    let p = env.phys.alloc_noobj()?;
    env.mem.zero_frame(p);
    let m = env.phys.pages.get_mut(p);
    m.flags |= pflags::PTPAGE | pflags::UNMANAGED;
    m.ref_count = 0;
    env.ev.pt_page_allocs += 1;
    Some(p)
}

/// Frees a page-table page; callers free only after invalidating the TLBs
/// and page-walk caches that may still point into it.
pub fn free(env: &mut PmapEnv, p: Pfn) {
    env.mem.zero_frame(p);
    env.phys.free_page(p);
}

/// Frees the page-table pages a removal queued, once nothing can walk
/// into them (after the invalidation that covers their unlinked entries).
pub fn free_all(env: &mut PmapEnv, free: Vec<Pfn>) {
    for p in free {
        self::free(env, p);
    }
}

/// Adds `delta` to the valid-entry count of the table at `table_pa`;
/// returns the new count.
pub fn adjust_ref(env: &mut PmapEnv, table_pa: u64, delta: i32) -> u16 {
    let m = env.phys.pages.get_mut(PhysAddr(table_pa).pfn());
    debug_assert!(m.has(pflags::PTPAGE), "{table_pa:#x} is not a page-table page");
    m.ref_count = (m.ref_count as i32 + delta) as u16;
    m.ref_count
}

/// Whether page `m` is managed (has PV entries).
pub fn managed(env: &PmapEnv, m: Pfn) -> bool {
    !env.phys.pages.get(m).has(pflags::UNMANAGED)
}

/// Transfers a mapping's modified state to its page (vm_page_dirty).
pub fn dirty(env: &mut PmapEnv, m: Pfn) {
    env.phys.pages.get_mut(m).flags |= pflags::DIRTY;
}

/// Transfers a mapping's accessed state to its page (PGA_REFERENCED).
pub fn referenced(env: &mut PmapEnv, m: Pfn) {
    env.phys.pages.get_mut(m).flags |= pflags::REFERENCED;
}

/// Transfers the state of a mapping that goes, of `n` pages from `m0`,
/// to each of its pages: modified (vm_page_dirty) if it was written,
/// referenced if it was accessed.
pub fn hand_over(env: &mut PmapEnv, m0: Pfn, n: u32, written: bool, accessed: bool) {
    for k in 0..n {
        let m = Pfn(m0.0 + k);
        if written {
            dirty(env, m);
        }
        if accessed {
            referenced(env, m);
        }
    }
}

/// Whether one mapping of `size` bytes at `va`, below `end`, can map the
/// object's pages from `m` on: `va` and `m` aligned to `size`, and
/// `pages`, which gives the object page at each address, giving the
/// consecutive frames from `m`.
pub fn is_run(pages: &dyn Fn(VirtAddr) -> Option<Pfn>, va: u64, end: u64, m: Pfn, size: u64) -> bool {
    let n = size / splab_hw::PAGE_SIZE;
    va.is_multiple_of(size)
        && va + size <= end
        && m.addr().0.is_multiple_of(size)
        && (1..n).all(|i| pages(VirtAddr(va + i * splab_hw::PAGE_SIZE)) == Some(Pfn(m.0 + i as u32)))
}

/// `is_run`, with `m`'s reservation fully populated: the test
/// pmap_enter_object makes (through m->psind) before mapping a superpage.
pub fn is_superpage_run(env: &PmapEnv, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, va: u64, end: u64, m: Pfn, size: u64) -> bool {
    env.phys.reserv.level_iffullpop(m) == 0 && is_run(pages, va, end, m, size)
}
