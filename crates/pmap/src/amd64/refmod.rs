//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced, pmap_clear_modify, and dropping
//! every mapping of a 2 MB physical run at once.
//!
//! The accessed (A) and dirty (D) bits live in the PTEs and PDEs, where the
//! walker sets them. A 2 MB mapping has one A and one D bit for all its 512
//! pages, which is why clearing them is special: A is cleared only for one
//! page in 512 (selected by a hash), and clearing D demotes the superpage
//! so that the other pages keep theirs.

use super::Amd64;
use crate::base::{RefMod, Remove};
use crate::ptpage;
use crate::refbits::{self, TS_REFERENCED_MAX};
use splab_hw::amd64::pte::PteFlags;
use splab_hw::amd64::{NPTEPG, PAGE_2M, PDRSHIFT};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::page::NIL;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Amd64 {
    /// The (pmap, va) of every 2 MB mapping of `m`'s frame, then of every
    /// 4 KB mapping of `m`, with the entry's address.
    fn leaves_of(&self, env: &PmapEnv, m: Pfn) -> Vec<(PmapId, u64, PhysAddr)> {
        self.pv
            .list_sp(m.addr().0)
            .into_iter()
            .chain(self.pv.list(env, m))
            .map(|(pm, va)| {
                let (_, _, pa) = self.find_leaf(env.mem, pm, va).expect("PV entry without a mapping");
                (pm, va, pa)
            })
            .collect()
    }

    /// Whether testing `m` may clear the A bit of the 2 MB mapping at
    /// (pm, va2m): one page in 512 (`refbits::selected_for_clearing`).
    pub(crate) fn selected_for_clearing(m: Pfn, pm: PmapId, va2m: u64) -> bool {
        refbits::selected_for_clearing(m, pm, va2m, PDRSHIFT, NPTEPG)
    }

}

impl RefMod for Amd64 {
    /// pmap_is_modified.
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.leaves_of(env, m).into_iter().any(|(_, _, pa)| Self::rd(env.mem, pa).has(PteFlags::RW | PteFlags::D))
    }

    /// pmap_is_referenced.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.leaves_of(env, m).into_iter().any(|(_, _, pa)| Self::rd(env.mem, pa).has(PteFlags::A))
    }

    /// pmap_ts_referenced. The hardware model can always clear A in place
    /// (FreeBSD's safe_to_clear_referenced holds), so no demotion is needed.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut count = 0;
        let rw_d = PteFlags::RW | PteFlags::D;
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let pa = self.pde_pa(env.mem, pm, va).expect("2MB PV entry without a page directory");
            let pde = Self::rd(env.mem, pa);
            debug_assert!(pde.valid() && pde.has(PteFlags::PS));
            if pde.has(rw_d) {
                // The superpage is dirty; only the page under test is marked.
                ptpage::dirty(env, m);
            }
            if pde.has(PteFlags::A) {
                if Self::selected_for_clearing(m, pm, va) && !pde.has(PteFlags::SW_W) {
                    Self::wr(env.mem, pa, pde.without(PteFlags::A));
                    self.invalidate_page(env, pm, va);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    return count;
                }
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.pte_pa(env.mem, pm, va).expect("PV entry without a PTE");
            let pte = Self::rd(env.mem, pa);
            if pte.has(rw_d) {
                ptpage::dirty(env, m);
            }
            if pte.has(PteFlags::A) {
                Self::wr(env.mem, pa, pte.without(PteFlags::A));
                self.invalidate_page(env, pm, va);
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    break;
                }
            }
        }
        count
    }

    /// pmap_clear_modify.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let pde = Self::rd(env.mem, self.pde_pa(env.mem, pm, va).expect("2MB PV entry without a page directory"));
            // A writable superpage is always dirty: promotion and direct
            // 2 MB mappings write-protect clean ones.
            if !pde.has(PteFlags::RW) {
                continue;
            }
            if self.demote_pde(env, pm, va) && !pde.has(PteFlags::SW_W) {
                // Write-protect the one page so that its next write faults
                // (and the range may be promoted again).
                let va4 = va + (m.addr().0 - pde.frame_2m());
                let pa = self.pte_pa(env.mem, pm, va4).expect("demoted mapping without a PTE");
                let pte = Self::rd(env.mem, pa);
                Self::wr(env.mem, pa, pte.without(PteFlags::RW | PteFlags::D));
                ptpage::dirty(env, m);
                self.invalidate_page(env, pm, va4);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.pte_pa(env.mem, pm, va).expect("PV entry without a PTE");
            let pte = Self::rd(env.mem, pa);
            if pte.has(PteFlags::RW | PteFlags::D) {
                Self::wr(env.mem, pa, pte.without(PteFlags::D));
                self.invalidate_page(env, pm, va);
            }
        }
    }

    /// Removes every mapping of the 2 MB physical run holding `m`: its
    /// 2 MB mappings whole (pmap_remove_pde, no demotion), then the 4 KB
    /// mappings of each of its 512 pages (pmap_remove_all).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let frame = m.addr().0 & !(PAGE_2M - 1);
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(frame) {
            self.remove_pde(env, pm, va, &mut free);
            self.invalidate_page(env, pm, va);
        }
        Self::free_all(env, free);
        let m0 = PhysAddr(frame).pfn();
        for k in 0..NPTEPG as u32 {
            let mk = Pfn(m0.0 + k);
            if env.phys.pages.get(mk).md != NIL {
                self.remove_all(env, mk);
            }
        }
    }
}
