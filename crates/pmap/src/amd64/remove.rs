//! Removing and changing mappings: pmap_remove (whole superpages in one
//! step, partial ones demoted first), pmap_remove_all, pmap_protect,
//! pmap_remove_write and pmap_advise.

use crate::ptpage;
use super::Amd64;
use crate::base::Remove;
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{NPTEPG, PAGE_1G, PAGE_2M, PML4SHIFT};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

const PAGE_512G: u64 = 1 << PML4SHIFT;

/// What a walk over a range found at one step.
enum Step {
    /// Nothing mapped up to this address.
    Skip(u64),
    /// A 1 GB leaf whose entry is at this address.
    Leaf1g(PhysAddr),
    /// A 2 MB leaf whose entry is at this address.
    Leaf2m(PhysAddr),
    /// A page-table page (its address) covering the 2 MB range.
    Table(u64),
}

impl Amd64 {
    fn step(&self, env: &PmapEnv, pm: PmapId, va: u64) -> Step {
        let pml4e = Self::rd(env.mem, Self::slot(self.pm(pm).pml4.addr().0, va, PML4SHIFT));
        if !pml4e.valid() {
            return Step::Skip((va & !(PAGE_512G - 1)) + PAGE_512G);
        }
        let pdpe_pa = Self::slot(pml4e.frame(), va, 30);
        let pdpe = Self::rd(env.mem, pdpe_pa);
        if !pdpe.valid() {
            return Step::Skip((va & !(PAGE_1G - 1)) + PAGE_1G);
        }
        if pdpe.has(PteFlags::PS) {
            return Step::Leaf1g(pdpe_pa);
        }
        let pde_pa = Self::slot(pdpe.frame(), va, 21);
        let pde = Self::rd(env.mem, pde_pa);
        if !pde.valid() {
            return Step::Skip(next_2m(va));
        }
        if pde.has(PteFlags::PS) {
            return Step::Leaf2m(pde_pa);
        }
        Step::Table(pde.frame())
    }

    /// Bookkeeping for a 4 KB mapping just cleared (pmap_remove_pte):
    /// transfer dirty and referenced state to the page, drop its PV entry.
    fn removed_pte(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, old: Pte) {
        self.pm_mut(pm).resident -= 1;
        if old.has(PteFlags::SW_MANAGED) {
            let m = PhysAddr(old.frame()).pfn();
            if old.has(PteFlags::RW | PteFlags::D) {
                ptpage::dirty(env, m);
            }
            if old.has(PteFlags::A) {
                env.phys.pages.get_mut(m).flags |= pflags::REFERENCED;
            }
            let removed = self.pv.remove(env, m, pm, va);
            debug_assert!(removed, "no PV entry for {va:#x}");
        }
    }

    /// Removes the 4 KB mappings in [sva, eva) of one page-table page
    /// (pmap_remove_ptes); an emptied page-table page is unlinked and queued
    /// on `free`. Returns whether any mapping was removed.
    pub(crate) fn remove_ptes(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, ptp: u64, free: &mut Vec<Pfn>) -> bool {
        let mut any = false;
        let mut va = sva;
        while va < eva {
            let pa = Self::slot(ptp, va, 12);
            let old = Self::rd(env.mem, pa);
            if old.valid() {
                Self::wr(env.mem, pa, Pte::EMPTY);
                self.removed_pte(env, pm, va, old);
                any = true;
                self.unuse(env, pm, va, 3, free);
            }
            va += 4096;
        }
        any
    }

    /// Removes a whole 2 MB mapping (pmap_remove_pde): its PV entry, the
    /// dirty and referenced state moved to all 512 pages, and the stashed
    /// page-table page freed. The caller invalidates.
    pub(crate) fn remove_pde(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) {
        let va2m = va & !(PAGE_2M - 1);
        let pde_pa = self.pde_pa(env.mem, pm, va2m).expect("remove_pde: no page directory");
        let old = Self::rd(env.mem, pde_pa);
        Self::wr(env.mem, pde_pa, Pte::EMPTY);
        self.pm_mut(pm).resident -= NPTEPG;
        if old.has(PteFlags::SW_MANAGED) {
            let frame = old.frame_2m();
            let removed = self.pv.remove_sp(frame, pm, va2m);
            debug_assert!(removed, "no PV entry for the 2MB mapping at {va2m:#x}");
            let m0 = PhysAddr(frame).pfn();
            for k in 0..NPTEPG as u32 {
                let m = Pfn(m0.0 + k);
                if old.has(PteFlags::RW | PteFlags::D) {
                    ptpage::dirty(env, m);
                }
                if old.has(PteFlags::A) {
                    env.phys.pages.get_mut(m).flags |= pflags::REFERENCED;
                }
            }
        }
        self.pm_mut(pm).stash.discard(env, va2m, free);
        self.unuse(env, pm, va2m, 2, free);
    }

    /// Rewrites each valid PTE in [sva, eva) of one page-table page with
    /// `f(env, old)`; returns whether any changed.
    fn update_ptes(env: &mut PmapEnv, ptp: u64, sva: u64, eva: u64, mut f: impl FnMut(&mut PmapEnv, Pte) -> Pte) -> bool {
        let mut any = false;
        let mut v = sva;
        while v < eva {
            let pa = Self::slot(ptp, v, 12);
            let old = Self::rd(env.mem, pa);
            if old.valid() {
                let n = f(env, old);
                if n != old {
                    Self::wr(env.mem, pa, n);
                    any = true;
                }
            }
            v += 4096;
        }
        any
    }

    pub(crate) fn free_all(env: &mut PmapEnv, free: Vec<Pfn>) {
        for p in free {
            ptpage::free(env, p);
        }
    }

    /// New protection bits for an entry under pmap_protect; moves the
    /// modified state to the page(s) when write access goes.
    fn protected(env: &mut PmapEnv, old: Pte, pr: Prot, npages: u32) -> Pte {
        let mut n = old;
        if pr & prot::WRITE == 0 && old.has(PteFlags::RW) {
            if old.has(PteFlags::SW_MANAGED | PteFlags::D) {
                let m0 = PhysAddr(if npages == 1 { old.frame() } else { old.frame_2m() }).pfn();
                for k in 0..npages {
                    ptpage::dirty(env, Pfn(m0.0 + k));
                }
            }
            n = n.without(PteFlags::RW | PteFlags::D);
        }
        if pr & prot::EXEC == 0 {
            n = n.with(PteFlags::NX);
        }
        n
    }

}

fn next_2m(va: u64) -> u64 {
    (va & !(PAGE_2M - 1)) + PAGE_2M
}

impl Remove for Amd64 {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        let mut any = false;
        let mut va = sva;
        while va < eva {
            match self.step(env, pm, va) {
                Step::Skip(next) => va = next,
                Step::Leaf1g(pa) => {
                    let next = (va & !(PAGE_1G - 1)) + PAGE_1G;
                    if va.is_multiple_of(PAGE_1G) && next <= eva {
                        Self::wr(env.mem, pa, Pte::EMPTY);
                        self.pm_mut(pm).resident -= PAGE_1G / 4096;
                        self.unuse(env, pm, va, 1, &mut free);
                        any = true;
                        va = next;
                    } else if self.demote_pdpe(env, pm, va).is_err() {
                        // No page for the demotion: drop the whole mapping.
                        Self::wr(env.mem, pa, Pte::EMPTY);
                        self.pm_mut(pm).resident -= PAGE_1G / 4096;
                        self.unuse(env, pm, va, 1, &mut free);
                        any = true;
                        va = next;
                    }
                }
                Step::Leaf2m(_) => {
                    let next = next_2m(va);
                    if va.is_multiple_of(PAGE_2M) && next <= eva {
                        self.remove_pde(env, pm, va, &mut free);
                        any = true;
                        va = next;
                    } else if !self.demote_pde(env, pm, va) {
                        any = true;
                        va = next;
                    }
                }
                Step::Table(ptp) => {
                    let next = next_2m(va);
                    any |= self.remove_ptes(env, pm, va, next.min(eva), ptp, &mut free);
                    va = next;
                }
            }
        }
        if any {
            if eva - sva == 4096 {
                self.invalidate_page(env, pm, sva);
            } else {
                self.invalidate_all(env, pm);
            }
        }
        Self::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): superpage
    /// mappings of its 2 MB frame are demoted first.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            self.demote_pde(env, pm, va);
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.pte_pa(env.mem, pm, va).expect("PV entry without a PTE");
            let old = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, Pte::EMPTY);
            self.removed_pte(env, pm, va, old);
            self.invalidate_page(env, pm, va);
            self.unuse(env, pm, va, 3, &mut free);
        }
        Self::free_all(env, free);
    }

    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if pr & prot::READ == 0 {
            return self.remove(env, pm, sva, eva);
        }
        if pr & (prot::WRITE | prot::EXEC) == prot::WRITE | prot::EXEC {
            return;
        }
        let mut any = false;
        let mut va = sva;
        while va < eva {
            match self.step(env, pm, va) {
                Step::Skip(next) => va = next,
                Step::Leaf1g(pa) => {
                    let next = (va & !(PAGE_1G - 1)) + PAGE_1G;
                    if va.is_multiple_of(PAGE_1G) && next <= eva {
                        let old = Self::rd(env.mem, pa);
                        let n = Self::protected(env, old, pr, 0);
                        if n != old {
                            Self::wr(env.mem, pa, n);
                            any = true;
                        }
                        va = next;
                    } else if self.demote_pdpe(env, pm, va).is_err() {
                        va = next;
                    }
                }
                Step::Leaf2m(pa) => {
                    let next = next_2m(va);
                    if va.is_multiple_of(PAGE_2M) && next <= eva {
                        // pmap_protect_pde.
                        let old = Self::rd(env.mem, pa);
                        let n = Self::protected(env, old, pr, NPTEPG as u32);
                        if n != old {
                            Self::wr(env.mem, pa, n);
                            any = true;
                        }
                        va = next;
                    } else if !self.demote_pde(env, pm, va) {
                        any = true;
                        va = next;
                    }
                }
                Step::Table(ptp) => {
                    let next = next_2m(va);
                    any |= Self::update_ptes(env, ptp, va, next.min(eva), |env, old| Self::protected(env, old, pr, 1));
                    va = next;
                }
            }
        }
        if any {
            self.invalidate_all(env, pm);
        }
    }

    /// Write-protects every mapping of `m` (pmap_remove_write); writable
    /// superpage mappings of its frame are demoted first.
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let pde = Self::rd(env.mem, self.pde_pa(env.mem, pm, va).unwrap());
            if pde.has(PteFlags::RW) {
                self.demote_pde(env, pm, va);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.pte_pa(env.mem, pm, va).expect("PV entry without a PTE");
            let old = Self::rd(env.mem, pa);
            if old.has(PteFlags::RW) {
                if old.has(PteFlags::D) {
                    ptpage::dirty(env, m);
                }
                Self::wr(env.mem, pa, old.without(PteFlags::RW | PteFlags::D));
                self.invalidate_page(env, pm, va);
            }
        }
    }

    /// pmap_advise: superpages in the range are demoted and (unless wired)
    /// one of their 4 KB mappings removed so that a later access can
    /// repromote; then accessed bits are cleared, and modified bits too,
    /// with DONTNEED first moving the modified state to the page.
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, advice: Advice) {
        let mut free = Vec::new();
        let mut any = false;
        let mut va = sva;
        while va < eva {
            match self.step(env, pm, va) {
                Step::Skip(next) => va = next,
                Step::Leaf1g(_) => va = (va & !(PAGE_1G - 1)) + PAGE_1G,
                Step::Leaf2m(pa) => {
                    let old = Self::rd(env.mem, pa);
                    let next = next_2m(va);
                    if !old.has(PteFlags::SW_MANAGED) {
                        va = next;
                        continue;
                    }
                    if !self.demote_pde(env, pm, va) {
                        any = true;
                        va = next;
                        continue;
                    }
                    if !old.has(PteFlags::SW_W) {
                        let last = next.min(eva) - 4096;
                        let ptp = self.pte_pa(env.mem, pm, last).unwrap().0 & !0xfff;
                        any |= self.remove_ptes(env, pm, last, last + 4096, ptp, &mut free);
                    }
                }
                Step::Table(ptp) => {
                    let next = next_2m(va);
                    any |= Self::update_ptes(env, ptp, va, next.min(eva), |env, old| {
                        if !old.has(PteFlags::SW_MANAGED) {
                            old
                        } else if old.has(PteFlags::RW | PteFlags::D) {
                            if advice == Advice::DontNeed {
                                ptpage::dirty(env, PhysAddr(old.frame()).pfn());
                            }
                            old.without(PteFlags::D | PteFlags::A)
                        } else {
                            old.without(PteFlags::A)
                        }
                    });
                    va = next;
                }
            }
        }
        if any {
            self.invalidate_all(env, pm);
        }
        Self::free_all(env, free);
    }
}
