//! Removing and changing mappings: pmap_remove (whole superpages in one
//! step, partial ones demoted first), pmap_remove_all, pmap_protect,
//! pmap_remove_write, and pmap_advise.

use super::Riscv;
use crate::base::Remove;
use crate::ptpage;
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3_SHIFT, LN_ENTRIES};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

/// What a walk over a range found at one step.
enum Step {
    /// Nothing mapped up to this address.
    Skip(u64),
    /// A 1 GB leaf whose entry is at this address.
    Leaf1g(PhysAddr),
    /// A 2 MB leaf whose entry is at this address.
    Leaf2m(PhysAddr),
    /// An L3 table (its address) covering the 2 MB range.
    Table(u64),
}

fn next(va: u64, size: u64) -> u64 {
    (va & !(size - 1)) + size
}

impl Riscv {
    fn step(&self, env: &PmapEnv, pm: PmapId, va: u64) -> Step {
        let mut table = self.root_table(pm);
        for &s in self.mode.shifts() {
            let pa = Self::slot(table, va, s);
            let e = Self::rd(env.mem, pa);
            if !e.valid() {
                return Step::Skip(next(va, 1 << s));
            }
            if e.is_leaf() {
                return match s {
                    L1_SHIFT => Step::Leaf1g(pa),
                    L2_SHIFT => Step::Leaf2m(pa),
                    _ => unreachable!("a leaf at shift {s} in a walk of L2 entries"),
                };
            }
            if s == L2_SHIFT {
                return Step::Table(e.frame());
            }
            table = e.frame();
        }
        unreachable!("the walk stops at L2 entries")
    }

    /// Bookkeeping for a 4 KB mapping just cleared (pmap_remove_l3): the
    /// dirty and referenced state to the page, its PV entry off the list.
    fn removed_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, old: Pte) {
        self.pm_mut(pm).resident -= 1;
        if old.has(PteFlags::SW_MANAGED) {
            let m = PhysAddr(old.frame()).pfn();
            if old.has(PteFlags::D) {
                ptpage::dirty(env, m);
            }
            if old.has(PteFlags::A) {
                ptpage::referenced(env, m);
            }
            let removed = self.pv.remove(env, m, pm, va);
            debug_assert!(removed, "no PV entry for {va:#x}");
        }
    }

    /// Removes one 4 KB mapping (pmap_remove_l3): cleared, fenced, handed
    /// back, and its L3 table queued on `free` if that emptied it.
    fn remove_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, l3_pa: PhysAddr, free: &mut Vec<Pfn>) {
        let old = Self::rd(env.mem, l3_pa);
        Self::wr(env.mem, l3_pa, Pte::EMPTY);
        self.invalidate_page(env, pm, va);
        self.removed_l3(env, pm, va, old);
        self.unuse(env, pm, va, L3_SHIFT, free);
    }

    /// Removes the 4 KB mappings in [sva, eva) of the L3 table at `ptp`
    /// (the inner loop of pmap_remove): each as pmap_remove_l3 does, and
    /// each run of them with a range fence. Returns whether any was removed.
    pub(crate) fn remove_l3_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, ptp: u64, free: &mut Vec<Pfn>) -> bool {
        let mut any = false;
        let mut run = false;
        let mut va = sva;
        while va < eva {
            let pa = Self::slot(ptp, va, L3_SHIFT);
            if Self::rd(env.mem, pa).valid() {
                self.remove_l3(env, pm, va, pa, free);
                any = true;
                run = true;
            } else if run {
                self.invalidate_all(env, pm);
                run = false;
            }
            va += 4096;
        }
        if run {
            self.invalidate_all(env, pm);
        }
        any
    }

    /// Removes a whole 2 MB mapping (pmap_remove_l2): fenced over its whole
    /// range (4 KB translations from before a promotion may still be in
    /// TLBs), its PV entry gone, the dirty and referenced state handed to
    /// all 512 pages, and the stashed L3 table freed.
    pub(crate) fn remove_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) {
        let va2m = va & !(L2_SIZE - 1);
        let l2_pa = self.entry(env.mem, pm, va2m, L2_SHIFT).expect("remove_l2: no L2 table");
        let old = Self::rd(env.mem, l2_pa);
        debug_assert!(old.is_leaf(), "remove_l2: not a 2MB mapping");
        Self::wr(env.mem, l2_pa, Pte::EMPTY);
        self.invalidate_all(env, pm);
        self.pm_mut(pm).resident -= LN_ENTRIES;
        if old.has(PteFlags::SW_MANAGED) {
            let removed = self.pv.remove_sp(old.frame(), pm, va2m);
            debug_assert!(removed, "no PV entry for the 2MB mapping at {va2m:#x}");
            let m0 = PhysAddr(old.frame()).pfn();
            for k in 0..LN_ENTRIES as u32 {
                let m = Pfn(m0.0 + k);
                if old.has(PteFlags::D) {
                    ptpage::dirty(env, m);
                }
                if old.has(PteFlags::A) {
                    ptpage::referenced(env, m);
                }
            }
        }
        self.pm_mut(pm).stash.discard(env, va2m, free);
        self.unuse(env, pm, va2m, L2_SHIFT, free);
    }

    /// Removes a whole 1 GB mapping (unmanaged: no PV entry).
    fn remove_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, l1_pa: PhysAddr, free: &mut Vec<Pfn>) {
        Self::wr(env.mem, l1_pa, Pte::EMPTY);
        self.invalidate_all(env, pm);
        self.pm_mut(pm).resident -= L1_SIZE / 4096;
        self.unuse(env, pm, va, L1_SHIFT, free);
    }

    /// An entry under pmap_protect: `mask` cleared; when write access goes
    /// from a managed dirty mapping, the modified state goes to its pages.
    fn protected(env: &mut PmapEnv, old: Pte, mask: PteFlags, npages: u32) -> Pte {
        if mask.contains(PteFlags::W) && old.has(PteFlags::SW_MANAGED | PteFlags::D) {
            let m0 = PhysAddr(old.frame()).pfn();
            for k in 0..npages {
                ptpage::dirty(env, Pfn(m0.0 + k));
            }
        }
        old.without(mask)
    }

    /// Rewrites each valid entry in [sva, eva) of the L3 table at `ptp`
    /// with `f(env, old)`; returns whether any changed.
    fn update_l3_range(env: &mut PmapEnv, ptp: u64, sva: u64, eva: u64, mut f: impl FnMut(&mut PmapEnv, Pte) -> Pte) -> bool {
        let mut any = false;
        let mut va = sva;
        while va < eva {
            let pa = Self::slot(ptp, va, L3_SHIFT);
            let old = Self::rd(env.mem, pa);
            if old.valid() {
                let n = f(env, old);
                if n != old {
                    Self::wr(env.mem, pa, n);
                    any = true;
                }
            }
            va += 4096;
        }
        any
    }

    /// Rewrites one leaf with `f`; returns whether it changed.
    fn update_leaf(env: &mut PmapEnv, pa: PhysAddr, f: impl FnOnce(&mut PmapEnv, Pte) -> Pte) -> bool {
        let old = Self::rd(env.mem, pa);
        let n = f(env, old);
        if n != old {
            Self::wr(env.mem, pa, n);
        }
        n != old
    }

}

impl Remove for Riscv {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        let mut va = sva;
        while va < eva && self.pm(pm).resident > 0 {
            match self.step(env, pm, va) {
                Step::Skip(n) => va = n,
                Step::Leaf1g(pa) => {
                    let n = next(va, L1_SIZE);
                    if (va.is_multiple_of(L1_SIZE) && n <= eva) || self.demote_l1(env, pm, va).is_err() {
                        // Whole, or no page to demote it: the mapping goes.
                        self.remove_l1(env, pm, va, pa, &mut free);
                        va = n;
                    }
                }
                Step::Leaf2m(_) => {
                    let n = next(va, L2_SIZE);
                    if va.is_multiple_of(L2_SIZE) && n <= eva {
                        self.remove_l2(env, pm, va, &mut free);
                        va = n;
                    } else if !self.demote_l2(env, pm, va) {
                        // The large page mapping was destroyed.
                        va = n;
                    }
                }
                Step::Table(ptp) => {
                    let n = next(va, L2_SIZE);
                    self.remove_l3_range(env, pm, va, n.min(eva), ptp, &mut free);
                    va = n;
                }
            }
        }
        Self::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): superpage
    /// mappings of its 2 MB frame are demoted first.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            self.demote_l2(env, pm, va);
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 table");
            self.remove_l3(env, pm, va, pa, &mut free);
        }
        Self::free_all(env, free);
    }

    /// pmap_protect: reduces the protection of [sva, eva) to `pr`.
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if pr & prot::READ == 0 {
            return self.remove(env, pm, sva, eva);
        }
        if pr & (prot::WRITE | prot::EXEC) == prot::WRITE | prot::EXEC {
            return;
        }
        let mut mask = PteFlags::empty();
        if pr & prot::WRITE == 0 {
            mask |= PteFlags::W | PteFlags::D;
        }
        if pr & prot::EXEC == 0 {
            mask |= PteFlags::X;
        }
        let mut any = false;
        let mut va = sva;
        while va < eva {
            match self.step(env, pm, va) {
                Step::Skip(n) => va = n,
                Step::Leaf1g(pa) => {
                    let n = next(va, L1_SIZE);
                    if va.is_multiple_of(L1_SIZE) && n <= eva {
                        any |= Self::update_leaf(env, pa, |env, old| Self::protected(env, old, mask, 0));
                        va = n;
                    } else if self.demote_l1(env, pm, va).is_err() {
                        va = n;
                    }
                }
                Step::Leaf2m(pa) => {
                    let n = next(va, L2_SIZE);
                    if va.is_multiple_of(L2_SIZE) && n <= eva {
                        any |= Self::update_leaf(env, pa, |env, old| Self::protected(env, old, mask, LN_ENTRIES as u32));
                        va = n;
                    } else if !self.demote_l2(env, pm, va) {
                        va = n;
                    }
                }
                Step::Table(ptp) => {
                    let n = next(va, L2_SIZE);
                    any |= Self::update_l3_range(env, ptp, va, n.min(eva), |env, old| Self::protected(env, old, mask, 1));
                    va = n;
                }
            }
        }
        if any {
            self.invalidate_all(env, pm);
        }
    }

    /// Write-protects every mapping of `m` (pmap_remove_write): writable
    /// superpage mappings of its frame are demoted first.
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let l2 = self.entry(env.mem, pm, va, L2_SHIFT).map(|pa| Self::rd(env.mem, pa));
            if l2.is_some_and(|e| e.has(PteFlags::W)) {
                self.demote_l2(env, pm, va);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 table");
            let old = Self::rd(env.mem, pa);
            if old.has(PteFlags::W) {
                if old.has(PteFlags::D) {
                    ptpage::dirty(env, m);
                }
                Self::wr(env.mem, pa, old.without(PteFlags::W | PteFlags::D));
                self.invalidate_page(env, pm, va);
            }
        }
    }

    /// pmap_advise. FreeBSD's riscv pmap_advise does nothing; this one does
    /// what amd64's and arm64's do, so that MADV_DONTNEED and MADV_FREE
    /// have the same effect on every architecture: 2 MB mappings in the
    /// range are demoted and (unless wired) one of their 4 KB mappings
    /// removed, so that a later access can repromote; then A is cleared,
    /// and D too, with DONTNEED first handing the modified state to the
    /// page. Without Svadu the next access to each page takes a fault that
    /// pmap_fault resolves.
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, advice: Advice) {
        let mut free = Vec::new();
        let mut any = false;
        let mut va = sva;
        while va < eva {
            match self.step(env, pm, va) {
                Step::Skip(n) => va = n,
                Step::Leaf1g(_) => va = next(va, L1_SIZE),
                Step::Leaf2m(pa) => {
                    let old = Self::rd(env.mem, pa);
                    let n = next(va, L2_SIZE);
                    if !old.has(PteFlags::SW_MANAGED) {
                        va = n;
                        continue;
                    }
                    if !self.demote_l2(env, pm, va) {
                        va = n;
                        continue;
                    }
                    if !old.has(PteFlags::SW_WIRED) {
                        let last = n.min(eva) - 4096;
                        let l3_pa = self.entry(env.mem, pm, last, L3_SHIFT).expect("demoted");
                        self.remove_l3(env, pm, last, l3_pa, &mut free);
                    }
                    // The L3 entries are handled on the next step.
                }
                Step::Table(ptp) => {
                    let n = next(va, L2_SIZE);
                    any |= Self::update_l3_range(env, ptp, va, n.min(eva), |env, old| {
                        if !old.has(PteFlags::SW_MANAGED) {
                            old
                        } else if old.has(PteFlags::D) {
                            if advice == Advice::DontNeed {
                                ptpage::dirty(env, PhysAddr(old.frame()).pfn());
                            }
                            old.without(PteFlags::D | PteFlags::A)
                        } else {
                            old.without(PteFlags::A)
                        }
                    });
                    va = n;
                }
            }
        }
        if any {
            self.invalidate_all(env, pm);
        }
        Self::free_all(env, free);
    }
}
