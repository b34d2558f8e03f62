//! Page-table pages and page state as every pmap handles them: a
//! page-table page is allocated zeroed from the physical allocator
//! (vm_page_alloc_noobj with VM_ALLOC_ZERO), marked `PTPAGE` and
//! unmanaged, and its `ref_count` counts its valid entries (the root
//! table's excepted), as FreeBSD's pmaps keep it.

use splab_hw::{PhysAddr, Pfn};
use splab_vm::page::pflags;
use splab_vm::pmap::PmapEnv;

/// Allocates a zeroed page-table page with no valid entries; None when
/// memory is exhausted.
pub fn alloc(env: &mut PmapEnv) -> Option<Pfn> {
    let p = env.phys.alloc_noobj()?;
    env.mem.zero_frame(p);
    let m = env.phys.pages.get_mut(p);
    m.flags |= pflags::PTPAGE | pflags::UNMANAGED;
    m.ref_count = 0;
    env.ev.pt_page_allocs += 1;
    Some(p)
}

/// Returns a page-table page to the allocator, its contents cleared.
pub fn free(env: &mut PmapEnv, p: Pfn) {
    env.mem.zero_frame(p);
    env.phys.free_page(p);
}

/// Adds `delta` to the valid-entry count of the table at `table_pa`;
/// returns the new count.
pub fn adjust(env: &mut PmapEnv, table_pa: u64, delta: i32) -> u16 {
    let m = env.phys.pages.get_mut(PhysAddr(table_pa).pfn());
    debug_assert!(m.has(pflags::PTPAGE), "{table_pa:#x} is not a page-table page");
    let n = m.ref_count as i32 + delta;
    // A pmap may count entries it is about to make before removing the
    // ones they replace (pmap_enter_l3c), so the count may pass 512 briefly.
    debug_assert!(n >= 0, "page-table page {table_pa:#x}: {n} valid entries");
    m.ref_count = n as u16;
    m.ref_count
}

/// Whether page `m` is managed (has PV entries).
pub fn managed(env: &PmapEnv, m: Pfn) -> bool {
    !env.phys.pages.get(m).has(pflags::UNMANAGED)
}

/// Transfers a mapping's modified state to its page (vm_page_dirty).
pub fn dirty_page(env: &mut PmapEnv, m: Pfn) {
    env.phys.pages.get_mut(m).flags |= pflags::DIRTY;
}

/// Transfers a mapping's referenced state to its page (PGA_REFERENCED).
pub fn referenced(env: &mut PmapEnv, m: Pfn) {
    env.phys.pages.get_mut(m).flags |= pflags::REFERENCED;
}
