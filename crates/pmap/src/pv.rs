//! PV entries: for each physical page (and each superpage-sized physical
//! frame), the list of (address space, virtual address) pairs that map it.
//! Every pmap keeps these so that operations on a physical page can find
//! all of its mappings.
//!
//! Entries live in one arena and are linked through `next`; list heads are
//! stored by the owner (the page's `md` field for 4 KB mappings, a per-frame
//! table for superpage mappings). Freed entries are kept on a free list.
//! `PvTable` is the whole arrangement as every pmap here uses it: the
//! arena, the per-page heads in the page array, and the per-superpage-frame
//! heads (FreeBSD's pv_table, reached through pa_to_pvh).

use splab_hw::Pfn;
use splab_vm::page::NIL;
use splab_vm::pmap::{PmapEnv, PmapId};

#[derive(Clone, Copy, Debug)]
struct PvEntry {
    va: u64,
    pmap: u32,
    next: u32,
}

#[derive(Default)]
pub struct PvArena {
    e: Vec<PvEntry>,
    free: u32,
    live: u64,
}

impl PvArena {
    pub fn new() -> PvArena {
        PvArena { e: Vec::new(), free: NIL, live: 0 }
    }

    /// Adds (pmap, va) to the list at `head`.
    pub fn insert(&mut self, head: &mut u32, pmap: u32, va: u64) {
        let ent = PvEntry { va, pmap, next: *head };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.e[i as usize].next;
            self.e[i as usize] = ent;
            i
        } else {
            self.e.push(ent);
            (self.e.len() - 1) as u32
        };
        *head = i;
        self.live += 1;
    }

    /// Removes (pmap, va) from the list at `head`; false if absent.
    pub fn remove(&mut self, head: &mut u32, pmap: u32, va: u64) -> bool {
        let mut prev = NIL;
        let mut cur = *head;
        while cur != NIL {
            let c = self.e[cur as usize];
            if c.pmap == pmap && c.va == va {
                if prev == NIL {
                    *head = c.next;
                } else {
                    self.e[prev as usize].next = c.next;
                }
                self.e[cur as usize].next = self.free;
                self.free = cur;
                self.live -= 1;
                return true;
            }
            prev = cur;
            cur = c.next;
        }
        false
    }

    /// The (pmap, va) pairs on the list at `head`.
    pub fn list(&self, head: u32) -> Vec<(u32, u64)> {
        let mut v = Vec::new();
        let mut cur = head;
        while cur != NIL {
            let c = self.e[cur as usize];
            v.push((c.pmap, c.va));
            cur = c.next;
        }
        v
    }

    pub fn contains(&self, head: u32, pmap: u32, va: u64) -> bool {
        let mut cur = head;
        while cur != NIL {
            let c = self.e[cur as usize];
            if c.pmap == pmap && c.va == va {
                return true;
            }
            cur = c.next;
        }
        false
    }

    /// Entries in use.
    pub fn live(&self) -> u64 {
        self.live
    }

    pub fn host_bytes(&self) -> u64 {
        (self.e.capacity() * std::mem::size_of::<PvEntry>()) as u64
    }
}

/// The PV lists of a machine: one per 4 KB page, headed in the page's `md`
/// field, and one per superpage-sized, aligned physical frame, for
/// superpage mappings of it.
///
/// Invariant (checked by each pmap's `check`): every managed 4 KB leaf
/// (pmap, va) -> m has exactly one entry on m's list, every managed
/// superpage leaf has exactly one on its frame's list, and there are no
/// other entries.
pub struct PvTable {
    arena: PvArena,
    /// List heads of superpage frames, indexed by physical address >> sp_shift.
    pvh: Vec<u32>,
    sp_shift: u32,
}

impl PvTable {
    /// Lists for `npages` 4 KB pages and superpage frames of 2^sp_shift bytes.
    pub fn new(npages: u64, sp_shift: u32) -> PvTable {
        let per_frame = 1u64 << (sp_shift - splab_hw::PAGE_SHIFT);
        PvTable { arena: PvArena::new(), pvh: vec![NIL; npages.div_ceil(per_frame) as usize], sp_shift }
    }

    fn pvh_idx(&self, pa: u64) -> usize {
        (pa >> self.sp_shift) as usize
    }

    /// Adds (pm, va) to the list of 4 KB page `m`.
    pub fn add(&mut self, env: &mut PmapEnv, m: Pfn, pm: PmapId, va: u64) {
        self.arena.insert(&mut env.phys.pages.get_mut(m).md, pm, va);
    }

    /// Removes (pm, va) from the list of 4 KB page `m`; false if absent.
    pub fn remove(&mut self, env: &mut PmapEnv, m: Pfn, pm: PmapId, va: u64) -> bool {
        self.arena.remove(&mut env.phys.pages.get_mut(m).md, pm, va)
    }

    /// Removes the entry (pm, va) of page `m`, which must be there
    /// (pmap_pvh_free).
    pub fn del(&mut self, env: &mut PmapEnv, m: Pfn, pm: PmapId, va: u64) {
        let removed = self.remove(env, m, pm, va);
        debug_assert!(removed, "no PV entry for {va:#x} on {m:?}");
    }

    /// Adds (pm, va) to the list of the superpage frame holding `pa`.
    pub fn add_sp(&mut self, pa: u64, pm: PmapId, va: u64) {
        let i = self.pvh_idx(pa);
        self.arena.insert(&mut self.pvh[i], pm, va);
    }

    /// Removes (pm, va) from the list of the superpage frame holding `pa`.
    pub fn remove_sp(&mut self, pa: u64, pm: PmapId, va: u64) -> bool {
        let i = self.pvh_idx(pa);
        self.arena.remove(&mut self.pvh[i], pm, va)
    }

    /// Removes the superpage entry (pm, va) of the frame holding `pa`,
    /// which must be there.
    pub fn del_sp(&mut self, pa: u64, pm: PmapId, va: u64) {
        let removed = self.remove_sp(pa, pm, va);
        debug_assert!(removed, "no PV entry for the superpage mapping at {va:#x}");
    }

    /// The 4 KB mappings of page `m`, as (pmap, va).
    pub fn list(&self, env: &PmapEnv, m: Pfn) -> Vec<(PmapId, u64)> {
        self.arena.list(env.phys.pages.get(m).md)
    }

    /// The superpage mappings of the frame holding physical address `pa`.
    pub fn list_sp(&self, pa: u64) -> Vec<(PmapId, u64)> {
        self.arena.list(self.pvh[self.pvh_idx(pa)])
    }

    /// Every mapping of page `m`: its own, then its superpage frame's.
    pub fn all(&self, env: &PmapEnv, m: Pfn) -> Vec<(PmapId, u64)> {
        let mut v = self.list(env, m);
        v.extend(self.list_sp(m.addr().0));
        v
    }

    pub fn contains(&self, env: &PmapEnv, m: Pfn, pm: PmapId, va: u64) -> bool {
        self.arena.contains(env.phys.pages.get(m).md, pm, va)
    }

    pub fn contains_sp(&self, pa: u64, pm: PmapId, va: u64) -> bool {
        self.arena.contains(self.pvh[self.pvh_idx(pa)], pm, va)
    }

    /// Whether `m` is mapped at all, alone or in a superpage
    /// (pmap_page_is_mapped).
    pub fn is_mapped(&self, env: &PmapEnv, m: Pfn) -> bool {
        env.phys.pages.get(m).md != NIL || self.pvh[self.pvh_idx(m.addr().0)] != NIL
    }

    /// The entries of the `n` base pages from `m0`, mapped from `va` on,
    /// become one entry for the superpage (pmap_pv_promote_pde,
    /// pmap_pv_promote_l2).
    pub fn promote(&mut self, env: &mut PmapEnv, m0: Pfn, pm: PmapId, va: u64, n: u32) {
        for i in 0..n {
            let removed = self.remove(env, Pfn(m0.0 + i), pm, va + i as u64 * splab_hw::PAGE_SIZE);
            debug_assert!(removed, "promotion: no PV entry for page {i}");
        }
        self.add_sp(m0.addr().0, pm, va);
    }

    /// The superpage's entry becomes one entry per base page
    /// (pmap_pv_demote_pde, pmap_pv_demote_l2).
    pub fn demote(&mut self, env: &mut PmapEnv, m0: Pfn, pm: PmapId, va: u64, n: u32) {
        let removed = self.remove_sp(m0.addr().0, pm, va);
        debug_assert!(removed, "demotion: no PV entry for the superpage at {va:#x}");
        for i in 0..n {
            self.add(env, Pfn(m0.0 + i), pm, va + i as u64 * splab_hw::PAGE_SIZE);
        }
    }

    /// Entries in use.
    pub fn live(&self) -> u64 {
        self.arena.live()
    }

    pub fn host_bytes(&self) -> u64 {
        self.arena.host_bytes() + self.pvh.len() as u64 * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_reuse() {
        let mut a = PvArena::new();
        let mut h = NIL;
        a.insert(&mut h, 1, 0x1000);
        a.insert(&mut h, 2, 0x2000);
        a.insert(&mut h, 1, 0x3000);
        assert_eq!(a.live(), 3);
        assert!(a.remove(&mut h, 2, 0x2000));
        assert!(!a.remove(&mut h, 2, 0x2000));
        assert_eq!(a.list(h), vec![(1, 0x3000), (1, 0x1000)]);
        a.insert(&mut h, 3, 0x4000);
        assert_eq!(a.host_bytes() / 16, a.e.capacity() as u64);
        assert_eq!(a.e.len(), 3, "freed entry reused");
    }
}
