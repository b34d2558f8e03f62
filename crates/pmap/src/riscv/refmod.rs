//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced, pmap_clear_modify, and dropping
//! every mapping of a 2 MB physical run at once.
//!
//! A and D live in the leaves. Without Svadu the walker faults when they
//! are clear and pmap_fault sets them, so clearing A or D in place is
//! always safe: the next access or store through the mapping is seen
//! again. A 2 MB leaf has one A and one D for its 512 pages: A is cleared
//! by one page in 512 (`refbits`), and clearing D demotes the mapping so
//! the other pages keep theirs, as FreeBSD's riscv pmap does.

use super::Riscv;
use crate::base::{RefMod, Remove};
use crate::ptpage;
use crate::refbits::{self, TS_REFERENCED_MAX};
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L2_SHIFT, L2_SIZE, L3_SHIFT, LN_ENTRIES};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::PmapEnv;

impl Riscv {
    /// The leaf of every 2 MB mapping of `m`'s frame, then of every 4 KB
    /// mapping of `m`.
    fn leaves_of(&self, env: &PmapEnv, m: Pfn) -> Vec<Pte> {
        let big = self.pv.list_sp(m.addr().0).into_iter().map(|(pm, va)| (pm, va, L2_SHIFT));
        let small = self.pv.list(env, m).into_iter().map(|(pm, va)| (pm, va, L3_SHIFT));
        big.chain(small).map(|(pm, va, shift)| Self::rd(env.mem, self.entry(env.mem, pm, va, shift).expect("PV entry without a table"))).collect()
    }

}

impl RefMod for Riscv {
    /// pmap_is_modified: some mapping of `m` has D set (D is only ever set
    /// with W, and write protection clears both).
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.leaves_of(env, m).into_iter().any(|e| e.has(PteFlags::D))
    }

    /// pmap_is_referenced.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.leaves_of(env, m).into_iter().any(|e| e.has(PteFlags::A))
    }

    /// pmap_ts_referenced: wired mappings keep their A bit but count.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut count = 0;
        let dirty = PteFlags::W | PteFlags::D;
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let pa = self.entry(env.mem, pm, va, L2_SHIFT).expect("2MB PV entry without an L2 table");
            let l2 = Self::rd(env.mem, pa);
            debug_assert!(l2.is_leaf());
            if l2.has(dirty) {
                ptpage::dirty(env, m);
            }
            if l2.has(PteFlags::A) {
                if refbits::selected_for_clearing(m, pm, va, L2_SHIFT, LN_ENTRIES) && !l2.has(PteFlags::SW_WIRED) {
                    Self::wr(env.mem, pa, l2.without(PteFlags::A));
                    self.invalidate_page(env, pm, va);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    return count;
                }
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 table");
            let l3 = Self::rd(env.mem, pa);
            if l3.has(dirty) {
                ptpage::dirty(env, m);
            }
            if l3.has(PteFlags::A) {
                if !l3.has(PteFlags::SW_WIRED) {
                    Self::wr(env.mem, pa, l3.without(PteFlags::A));
                    self.invalidate_page(env, pm, va);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    break;
                }
            }
        }
        count
    }

    /// pmap_clear_modify: a writable 2 MB mapping is demoted and `m`'s new
    /// L3 entry loses W and D (so the next store faults and may
    /// repromote); 4 KB mappings lose D only.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let pa = self.entry(env.mem, pm, va, L2_SHIFT).expect("2MB PV entry without an L2 table");
            let l2 = Self::rd(env.mem, pa);
            if !l2.has(PteFlags::W) {
                continue;
            }
            if self.demote_l2(env, pm, va) && !l2.has(PteFlags::SW_WIRED) {
                let va4 = va + (m.addr().0 - l2.frame());
                let l3_pa = self.entry(env.mem, pm, va4, L3_SHIFT).expect("demoted mapping without an L3 table");
                let l3 = Self::rd(env.mem, l3_pa);
                Self::wr(env.mem, l3_pa, l3.without(PteFlags::W | PteFlags::D));
                ptpage::dirty(env, m);
                self.invalidate_page(env, pm, va4);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 table");
            let l3 = Self::rd(env.mem, pa);
            if l3.has(PteFlags::W | PteFlags::D) {
                Self::wr(env.mem, pa, l3.without(PteFlags::D));
                self.invalidate_page(env, pm, va);
            }
        }
    }

    /// Removes every mapping of the 2 MB physical run holding `m`: its
    /// 2 MB mappings whole (pmap_remove_l2, no demotion), then the 4 KB
    /// mappings of each of its 512 pages (pmap_remove_all).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let frame = m.addr().0 & !(L2_SIZE - 1);
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(frame) {
            self.remove_l2(env, pm, va, &mut free);
        }
        Self::free_all(env, free);
        let m0 = PhysAddr(frame).pfn();
        for k in 0..LN_ENTRIES as u32 {
            let mk = Pfn(m0.0 + k);
            if self.pv.is_mapped(env, mk) {
                self.remove_all(env, mk);
            }
        }
    }
}
