//! Entering mappings: 4 KB pages (pmap_enter), 2 MB pages directly
//! (pmap_enter_pde), 1 GB pages of large-page shared memory
//! (pmap_enter_largepage), and whole object ranges at once
//! (pmap_enter_object).

use super::{table_flags, Amd64, PSIND_1G, PSIND_2M};
use crate::base::{each_resident, Core, Enter};
use crate::ptpage;
use crate::radix::{self, Format};
use crate::shootdown::Batch;
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{NPTEPG, PAGE_1G, PAGE_2M, PAGE_SHIFT, PAGE_4K, PDPSHIFT};
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot, Psind};

impl Amd64 {
    /// Returns the PTE address for `va`, creating the page-table page if
    /// needed and demoting a 2 MB mapping in the way (pmap_allocpte).
    fn alloc_pte(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<(PhysAddr, u64), PmapError> {
        let mut pde_pa = self.alloc_pde(env, pm, va)?;
        let mut pde = Pte::read(env.mem, pde_pa);
        if pde.valid() && pde.has(PteFlags::PS) {
            // A failed demotion removes the 2 MB mapping; either way the PDE
            // no longer maps a superpage. The removal may have freed the
            // page directory (its only entry), so look the PDE up again.
            if !self.demote_pde(env, pm, va) {
                pde_pa = self.alloc_pde(env, pm, va)?;
            }
            pde = Pte::read(env.mem, pde_pa);
        }
        if !pde.valid() {
            let p = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
            pde = Pte::new(p.addr().0, table_flags());
            radix::wr(env.mem, pde_pa, pde);
            ptpage::adjust_ref(env, pde_pa.0 & !0xfff, 1);
        }
        Ok((radix::slot(pde.frame(), va, PAGE_SHIFT), pde.frame()))
    }

    /// pmap_enter for a 4 KB page, then the promotion attempt.
    pub(crate) fn enter_4k(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let managed = ptpage::managed(env, m);
        let pa = m.addr().0;
        let newpte = Self::new_pte(pa, pr, &flags, managed);
        let (pte_pa, ptp) = self.alloc_pte(env, pm, va)?;
        let orig = Pte::read(env.mem, pte_pa);
        if orig.valid() && flags.noreplace {
            return Err(PmapError::Exists);
        }
        // The PV entry (pm, va) belongs to the page the PTE maps: it stays
        // when the same managed page is mapped again, and moves otherwise.
        let same = orig.valid() && orig.frame() == pa;
        let had_pv = orig.valid() && orig.has(PteFlags::SW_MANAGED);
        let om = PhysAddr(orig.frame()).pfn();
        if had_pv && !(same && managed) {
            self.pv.remove(env, om, pm, va);
        }
        if managed && !(same && had_pv) {
            self.pv.add(env, m, pm, va);
        }
        if orig.valid() {
            let mut invalidate = false;
            if !same {
                invalidate |= orig.has(PteFlags::A);
            } else if orig.has(PteFlags::A) && !orig.has(PteFlags::NX) && newpte.has(PteFlags::NX) {
                invalidate = true;
            }
            if orig.has(PteFlags::RW | PteFlags::D) {
                if had_pv {
                    ptpage::dirty(env, om);
                }
                if !newpte.has(PteFlags::RW) {
                    invalidate = true;
                }
            }
            // Keep the accessed and modified state the entry already had
            // when it maps the same page with write access.
            let mut n = newpte;
            if same {
                n = Pte(n.0 | (orig.0 & PteFlags::A.bits()));
                if n.has(PteFlags::RW) {
                    n = Pte(n.0 | (orig.0 & PteFlags::D.bits()));
                }
            }
            let inv = radix::update(env.mem, pte_pa, n, va, PAGE_4K);
            if invalidate {
                self.invalidate_page(env, pm, inv);
            } else {
                // No cached translation lets through what the new entry
                // refuses: the old one was never accessed, or maps the
                // same page and loses at most a write access it never
                // used (a first write walks the tables again).
                inv.unneeded();
            }
        } else {
            radix::wr(env.mem, pte_pa, newpte);
            ptpage::adjust_ref(env, ptp, 1);
            self.pm_mut(pm).resident += 1;
        }
        // Promotion is tried when the page-table page is full and the
        // reservation holding the page is fully populated.
        let full = env.phys.pages.get(PhysAddr(ptp).pfn()).ref_count as u64 == NPTEPG;
        if self.superpages_enabled() && full && managed && env.phys.reserv.level_iffullpop(m) == 0 {
            self.promote_pde(env, pm, va);
        }
        Ok(())
    }

    /// Maps a 2 MB page directly (pmap_enter_pde): `m` is the first page of
    /// an aligned, fully populated 2 MB run. 4 KB mappings already in the
    /// range are removed (unless `noreplace`); their page-table page is kept
    /// aside for a later demotion.
    pub(crate) fn enter_pde(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(PAGE_2M) && m.addr().0.is_multiple_of(PAGE_2M), "unaligned 2MB mapping");
        if !self.superpages_enabled() && !env.phys.pages.get(m).has(splab_vm::page::pflags::LARGEPAGE) {
            return Err(PmapError::BadPsind);
        }
        let managed = ptpage::managed(env, m);
        let pde_pa = self.alloc_pde(env, pm, va)?;
        let old = Pte::read(env.mem, pde_pa);
        if old.valid() {
            if flags.noreplace {
                return Err(PmapError::Exists);
            }
            let mut free = Vec::new();
            if old.has(PteFlags::PS) {
                let inv = self.remove_pde(env, pm, va, &mut free);
                self.invalidate_page(env, pm, inv);
            } else {
                // Remove the 4 KB mappings; the emptied page-table page is
                // freed (user page-table pages are not kept, as in FreeBSD).
                let mut batch = Batch::new();
                self.remove_ptes(env, pm, va..va + PAGE_2M, old.frame(), &mut free, &mut batch);
                self.invalidate_all(env, pm, &mut batch);
            }
            ptpage::free_all(env, free);
        }
        // The PD page may have been freed if the removal emptied it.
        let pde_pa = self.alloc_pde(env, pm, va)?;
        let pd_page = pde_pa.0 & !0xfff;
        let f = Self::new_pte(m.addr().0, pr, &flags, managed).flags() | PteFlags::PS;
        let newpde = Pte::new(m.addr().0, f);
        if managed {
            self.pv.add_sp(m.addr().0, pm, va);
        }
        radix::wr(env.mem, pde_pa, newpde);
        ptpage::adjust_ref(env, pd_page, 1);
        self.pm_mut(pm).resident += NPTEPG;
        self.st.pde.mappings += 1;
        Ok(())
    }

    /// Maps a 1 GB page of large-page shared memory (pmap_enter_largepage).
    /// Such pages are unmanaged: no PV entries.
    pub(crate) fn enter_pdpe(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(PAGE_1G) && m.addr().0.is_multiple_of(PAGE_1G), "unaligned 1GB mapping");
        let pml4e = self.alloc_pdpt(env, pm, va)?;
        let pdpe_pa = radix::slot(pml4e.frame(), va, PDPSHIFT);
        let old = Pte::read(env.mem, pdpe_pa);
        if old.valid() {
            if flags.noreplace || !old.has(PteFlags::PS) {
                // A page directory with mappings is in the way.
                return Err(PmapError::Exists);
            }
        } else {
            ptpage::adjust_ref(env, pml4e.frame(), 1);
        }
        let f = Self::new_pte(m.addr().0, pr, &flags, false).flags() | PteFlags::PS;
        let new = Pte::new(m.addr().0, f);
        if old.valid() {
            let inv = radix::update(env.mem, pdpe_pa, new, va, PAGE_1G);
            self.invalidate_page(env, pm, inv);
        } else {
            radix::wr(env.mem, pdpe_pa, new);
            self.pm_mut(pm).resident += PAGE_1G / 4096;
        }
        self.st.pdpe_mappings += 1;
        Ok(())
    }

}

impl Enter for Amd64 {
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind {
            Psind::BASE => self.enter_4k(env, pm, va, m, pr, flags),
            PSIND_2M => self.enter_pde(env, pm, va, m, pr, flags),
            PSIND_1G => self.enter_pdpe(env, pm, va, m, pr, flags),
            _ => Err(PmapError::BadPsind),
        }
    }

    /// Maps the resident pages of [start, end) read-only or as given, with
    /// 2 MB mappings where the run is aligned and its reservation fully
    /// populated (pmap_enter_2mpage), 4 KB ones otherwise
    /// (pmap_enter_quick). Existing mappings are left alone.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let pr = pr & !prot::WRITE;
        let fl = EnterFlags { access: prot::NONE, noreplace: true, ..Default::default() };
        each_resident(start, end, PAGE_4K, pages, |va, m| {
            if self.superpages_enabled() && ptpage::is_superpage_run(env, pages, va, end, m, PAGE_2M) && self.enter_pde(env, pm, va, m, pr, fl).is_ok() {
                return Some(PAGE_2M);
            }
            let _ = self.enter_4k(env, pm, va, m, pr, fl);
            Some(PAGE_4K)
        });
    }
}
