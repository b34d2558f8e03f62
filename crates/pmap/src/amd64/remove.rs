//! Removing and changing mappings: pmap_remove (whole superpages in one
//! step, partial ones demoted first), pmap_remove_all, pmap_protect,
//! pmap_remove_write and pmap_advise. Changes over a range are
//! invalidated together at the end, with one flush of the address space
//! (pmap_invalidate_all), or one INVLPG for a one-page removal.

use super::Amd64;
use crate::base::{self, Remove};
use crate::ptpage;
use crate::pte::{self, PteFormat};
use crate::radix::{self, Format, Next, Part, Tables, covers, next_block};
use crate::shootdown::{Batch, Invalidate};
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{NPTEPG, PAGE_1G, PAGE_2M, PAGE_4K, PAGE_SHIFT_4K, PDPSHIFT, PDRSHIFT};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};
use std::ops::Range;

impl Amd64 {
    /// Bookkeeping for a 4 KB mapping just cleared (pmap_remove_pte):
    /// transfer dirty and referenced state to the page, drop its PV entry.
    fn removed_pte(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, old: Pte) {
        self.pm_mut(pm).resident -= 1;
        if old.managed() {
            let m = PhysAddr(old.frame()).pfn_4k();
            ptpage::hand_over(env, m, 1, old.dirty(), old.accessed());
            self.pv.del(env, m, pm, va);
        }
    }

    /// Removes the 4 KB mappings in `range` of one page-table page
    /// (pmap_remove_ptes), each added to `batch`; an emptied page-table
    /// page is unlinked and queued on `free`.
    pub(crate) fn remove_ptes(&mut self, env: &mut PmapEnv, pm: PmapId, range: Range<u64>, ptp: u64, free: &mut Vec<Pfn>, batch: &mut Batch) {
        let mut va = range.start;
        while va < range.end {
            let pa = radix::slot(ptp, va, PAGE_SHIFT_4K);
            let old = Pte::read(env.mem, pa);
            if old.valid() {
                batch.add(radix::clear::<Pte>(env.mem, pa, va, PAGE_4K));
                self.removed_pte(env, pm, va, old);
                self.unuse(env, pm, va, PAGE_SHIFT_4K, free);
            }
            va += PAGE_4K;
        }
    }

    /// Removes a whole 2 MB mapping (pmap_remove_pde): its PV entry, the
    /// dirty and referenced state moved to all 512 pages, and the stashed
    /// page-table page freed.
    pub(crate) fn remove_pde(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> Invalidate {
        let va2m = va & !(PAGE_2M - 1);
        let pde_pa = self.pde_pa(env.mem, pm, va2m).expect("remove_pde: no page directory");
        let old = Pte::read(env.mem, pde_pa);
        let inv = radix::clear::<Pte>(env.mem, pde_pa, va2m, PAGE_2M);
        self.pm_mut(pm).resident -= NPTEPG;
        if old.managed() {
            let frame = old.frame_2m();
            self.pv.del_sp(frame, pm, va2m);
            ptpage::hand_over(env, PhysAddr(frame).pfn_4k(), NPTEPG as u32, old.dirty(), old.accessed());
        }
        self.pm_mut(pm).stash.discard(env, va2m, free);
        self.unuse(env, pm, va2m, PDRSHIFT, free);
        inv
    }

    /// Removes a whole 1 GB mapping (unmanaged: no PV entry).
    fn remove_pdpe(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, pdpe_pa: PhysAddr, free: &mut Vec<Pfn>) -> Invalidate {
        let inv = radix::clear::<Pte>(env.mem, pdpe_pa, va & !(PAGE_1G - 1), PAGE_1G);
        self.pm_mut(pm).resident -= PAGE_1G / PAGE_4K;
        self.unuse(env, pm, va, PDPSHIFT, free);
        inv
    }

    /// New protection bits for an entry under pmap_protect; moves the
    /// modified state to the page(s) when write access goes.
    fn protected(env: &mut PmapEnv, old: Pte, pr: Prot, npages: u32) -> Pte {
        let mut n = old;
        if pr & prot::WRITE == 0 && old.has(PteFlags::RW) {
            if old.has(PteFlags::SW_MANAGED | PteFlags::D) {
                let m0 = PhysAddr(if npages == 1 { old.frame() } else { old.frame_2m() }).pfn_4k();
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

    /// pmap_protect_pde (and its 1 GB counterpart): the superpage leaf at
    /// `pa`, of `size` bytes and `npages` managed pages, reduced to `pr`.
    fn protect_leaf(env: &mut PmapEnv, pa: PhysAddr, va: u64, size: u64, npages: u32, pr: Prot, batch: &mut Batch) {
        let old = Pte::read(env.mem, pa);
        let n = Self::protected(env, old, pr, npages);
        if n != old {
            batch.add(radix::update(env.mem, pa, n, va, size));
        }
    }
}

impl Amd64 {
    /// `demote_pde` in a range operation: when the 2 MB mapping is
    /// removed instead, its range joins `batch`, to be invalidated with
    /// the rest. Returns whether the mapping was demoted.
    fn demote_pde_batched(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, batch: &mut Batch) -> bool {
        let demoted = self.demote_pde(env, pm, va);
        if !demoted {
            batch.add(Invalidate::new(va & !(PAGE_2M - 1), PAGE_2M));
        }
        demoted
    }
}

impl Remove for Amd64 {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        let mut batch = Batch::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            // Whole, or no page for the demotion: the mapping goes.
            Part::Leaf1g(pa) if covers(va, eva, PAGE_1G) || p.demote_pdpe(env, pm, va).is_err() => {
                batch.add(p.remove_pdpe(env, pm, va, pa, &mut free));
                Next::Past
            }
            Part::Leaf2m(_) if covers(va, eva, PAGE_2M) => {
                batch.add(p.remove_pde(env, pm, va, &mut free));
                Next::Past
            }
            // Removed instead: the flush below covers it too, as
            // pmap_remove's anyvalid does.
            Part::Leaf2m(_) if !p.demote_pde_batched(env, pm, va, &mut batch) => Next::Past,
            Part::Leaf1g(_) | Part::Leaf2m(_) => Next::Again,
            Part::Table(ptp) => {
                p.remove_ptes(env, pm, va..next_block(va, PAGE_2M).min(eva), ptp, &mut free, &mut batch);
                Next::Past
            }
        });
        // A one-page removal invalidates the page (pmap_remove_page),
        // anything larger everything.
        if eva - sva == PAGE_4K {
            if batch.take().is_some() {
                self.invalidate_page(env, pm, Invalidate::new(sva, PAGE_4K));
            }
        } else {
            self.invalidate_all(env, pm, &mut batch);
        }
        ptpage::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): superpage
    /// mappings of its 2 MB frame are demoted first.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        base::remove_all_demoting(self, env, m, Self::demote_pde, |p, env, pm, va, free| {
            let pa = p.pte_pa(env.mem, pm, va).expect("PV entry without a PTE");
            let old = Pte::read(env.mem, pa);
            let inv = radix::clear::<Pte>(env.mem, pa, va, PAGE_4K);
            p.removed_pte(env, pm, va, old);
            p.invalidate_page(env, pm, inv);
            p.unuse(env, pm, va, PAGE_SHIFT_4K, free);
        });
    }

    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if base::protect_needs_nothing_more(self, env, pm, sva, eva, pr) {
            return;
        }
        let mut batch = Batch::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Leaf1g(pa) if covers(va, eva, PAGE_1G) => {
                Self::protect_leaf(env, pa, va, PAGE_1G, 0, pr, &mut batch);
                Next::Past
            }
            Part::Leaf1g(_) if p.demote_pdpe(env, pm, va).is_err() => Next::Past,
            Part::Leaf2m(pa) if covers(va, eva, PAGE_2M) => {
                Self::protect_leaf(env, pa, va, PAGE_2M, NPTEPG as u32, pr, &mut batch);
                Next::Past
            }
            Part::Leaf2m(_) if !p.demote_pde_batched(env, pm, va, &mut batch) => Next::Past,
            Part::Leaf1g(_) | Part::Leaf2m(_) => Next::Again,
            Part::Table(ptp) => {
                pte::update_range(env, ptp, va, next_block(va, PAGE_2M).min(eva), &mut batch, |env, old| Self::protected(env, old, pr, 1));
                Next::Past
            }
        });
        self.invalidate_all(env, pm, &mut batch);
    }

    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        pte::remove_write(self, env, m)
    }

    /// pmap_advise: superpages in the range are demoted and (unless wired)
    /// one of their 4 KB mappings removed so that a later access can
    /// repromote; then accessed bits are cleared, and modified bits too,
    /// with DONTNEED first moving the modified state to the page.
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, advice: Advice) {
        let mut free = Vec::new();
        let mut batch = Batch::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Leaf1g(_) => Next::Past,
            Part::Leaf2m(pa) => {
                let old = Pte::read(env.mem, pa);
                if !old.managed() {
                    return Next::Past;
                }
                if !p.demote_pde_batched(env, pm, va, &mut batch) {
                    return Next::Past;
                }
                if !old.wired() {
                    let last = next_block(va, PAGE_2M).min(eva) - PAGE_4K;
                    let ptp = p.pte_pa(env.mem, pm, last).unwrap().0 & !0xfff;
                    p.remove_ptes(env, pm, last..last + PAGE_4K, ptp, &mut free, &mut batch);
                }
                // Its 4 KB entries are advised next.
                Next::Again
            }
            Part::Table(ptp) => {
                pte::update_range(env, ptp, va, next_block(va, PAGE_2M).min(eva), &mut batch, |env, old: Pte| pte::advised(env, old, advice));
                Next::Past
            }
        });
        self.invalidate_all(env, pm, &mut batch);
        ptpage::free_all(env, free);
    }
}
