//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced, pmap_clear_modify, and dropping
//! every mapping of a 1 MB physical run at once.
//!
//! The bits are FreeBSD's software ones, emulated through faults
//! (pmap_fault): PTE2_A clear makes the next access take an access flag
//! fault, PTE2_NM set makes the next store take a permission fault, so
//! clearing A or setting NM in place is always seen again. A section has
//! one A for its 256 pages: it is cleared by one page in 256 (`refbits`,
//! as pmap-v6.c hashes it). A 64 KB large page is 16 identical entries
//! with one A between them, so it is treated the same way, one page in 16
//! clearing all 16. A modified section or large page is demoted before
//! one of its pages is made unmodified, so that the others keep their
//! state.

use crate::base::{RefMod, Remove};
use super::{is_dirty, Leaf, Armv7, PTE2_A, PTE2_NM, PTE2_RO, PTE2_W};
use crate::ptpage;
use crate::refbits::{self, TS_REFERENCED_MAX};
use splab_hw::armv7::pte::SmallFlags;
use splab_hw::armv7::{L2_ENTRIES, LARGE_SHIFT, REPLICAS, SECTION_SHIFT, SECTION_SIZE};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::pmap::PmapEnv;

impl Armv7 {
    /// The attributes of every section holding `m`, then of every small
    /// or large page mapping of `m`.
    fn attrs_of(&self, env: &PmapEnv, m: Pfn) -> Vec<SmallFlags> {
        self.pv
            .all(env, m)
            .into_iter()
            .filter_map(|(pm, va)| match self.find(env.mem, pm, va) {
                Some(Leaf::Section(_, e)) => Some(SmallFlags::from_section(e.flags())),
                Some(Leaf::Pte2(_, e)) => Some(e.attrs()),
                None => None,
            })
            .collect()
    }

}

impl RefMod for Armv7 {
    /// pmap_is_modified: some mapping of `m` has neither NM nor RO set.
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.attrs_of(env, m).into_iter().any(is_dirty)
    }

    /// pmap_is_referenced.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.attrs_of(env, m).into_iter().any(|f| f.contains(PTE2_A))
    }

    /// pmap_ts_referenced. Wired mappings keep A but count.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut count = 0;
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let Some(Leaf::Section(p1, e)) = self.find(env.mem, pm, va) else { panic!("section PV entry without a section at {va:#x}") };
            let f = SmallFlags::from_section(e.flags());
            if is_dirty(f) {
                ptpage::dirty(env, m);
            }
            if f.contains(PTE2_A) {
                if refbits::selected_for_clearing(m, pm, va, SECTION_SHIFT, L2_ENTRIES) && !f.contains(PTE2_W) {
                    let inv = Self::update1(env.mem, p1, e.without(PTE2_A.to_section()), va, SECTION_SIZE);
                    self.tlb_flush(env, pm, inv);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    return count;
                }
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let p2 = self.pte2_pa(pm, va).expect("PV entry without an L2 table");
            let e = Self::rd2(env.mem, p2);
            let f = e.attrs();
            if is_dirty(f) {
                ptpage::dirty(env, m);
            }
            if f.contains(PTE2_A) {
                if e.is_large() {
                    let base = Self::group_base(va);
                    if refbits::selected_for_clearing(m, pm, base, LARGE_SHIFT, REPLICAS) && !f.contains(PTE2_W) {
                        let p0 = PhysAddr(p2.0 - ((va - base) >> 12) * 4);
                        let inv = Self::update2(env.mem, p0, REPLICAS, e.without(PTE2_A), base);
                        self.tlb_flush_range(env, pm, inv);
                    }
                } else if !f.contains(PTE2_W) {
                    let inv = Self::update2(env.mem, p2, 1, e.without(PTE2_A), va);
                    self.tlb_flush(env, pm, inv);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    break;
                }
            }
        }
        count
    }

    /// pmap_clear_modify: a writable section is demoted and `m`'s new small
    /// page marked unmodified (so its next store faults and the section may
    /// be promoted again), `m` being marked dirty for the caller to clean,
    /// as pmap-v6.c does; a modified large page is demoted likewise; a
    /// modified small page gets NM back.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let Some(Leaf::Section(_, e)) = self.find(env.mem, pm, va) else { panic!("section PV entry without a section at {va:#x}") };
            let f = SmallFlags::from_section(e.flags());
            if f.contains(PTE2_RO) {
                continue;
            }
            if self.demote_pte1(env, pm, va) && !f.contains(PTE2_W) {
                let va4 = (va & !(SECTION_SIZE - 1)) + (m.addr().0 - e.frame());
                let p2 = self.pte2_pa(pm, va4).expect("demoted section without an L2 table");
                let s = Self::rd2(env.mem, p2);
                if s.valid() {
                    let inv = Self::update2(env.mem, p2, 1, s.with(PTE2_NM), va4);
                    ptpage::dirty(env, m);
                    self.tlb_flush(env, pm, inv);
                }
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let p2 = self.pte2_pa(pm, va).expect("PV entry without an L2 table");
            let e = Self::rd2(env.mem, p2);
            if !is_dirty(e.attrs()) {
                continue;
            }
            if e.is_large() {
                self.demote_large(env, pm, Self::group_base(va));
            }
            let e = Self::rd2(env.mem, p2);
            let inv = Self::update2(env.mem, p2, 1, e.with(PTE2_NM), va);
            self.tlb_flush(env, pm, inv);
        }
    }

    /// Removes every mapping of the 1 MB physical run holding `m`: its
    /// sections whole (pmap_remove_pte1, no demotion), then the small and
    /// large page mappings of each of its 256 pages (pmap_remove_all).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let frame = m.addr().0 & !(SECTION_SIZE - 1);
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(frame) {
            self.remove_pte1(env, pm, va & !(SECTION_SIZE - 1), &mut free);
        }
        ptpage::free_all(env, free);
        let m0 = PhysAddr(frame).pfn();
        for k in 0..L2_ENTRIES as u32 {
            let mk = Pfn(m0.0 + k);
            if self.pv.is_mapped(env, mk) {
                self.remove_all(env, mk);
            }
        }
    }
}
