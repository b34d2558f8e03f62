//! Removing and changing mappings: pmap_remove (whole superpages in one
//! step, partial ones demoted first), pmap_remove_all, pmap_protect,
//! pmap_remove_write, and pmap_advise.
//!
//! Fences follow FreeBSD's riscv pmap: each 4 KB mapping removed is fenced
//! by address (pmap_remove_l3), each run of them again as a range, and a
//! range fence is a full SFENCE.VMA (pmap_invalidate_range), as is the
//! fence after a superpage is removed.

use super::Riscv;
use crate::base::{self, Remove};
use crate::ptpage;
use crate::pte::{self, PteFormat};
use crate::radix::{self, Format, Next, Part, Tables, covers, next_block};
use crate::shootdown::{Batch, Invalidate};
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

impl Riscv {
    /// Removes one 4 KB mapping (pmap_remove_l3): cleared, fenced, its
    /// dirty and referenced state handed to the page, its PV entry off the
    /// list, and its L3 table queued on `free` if that emptied it.
    fn remove_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, l3_pa: PhysAddr, free: &mut Vec<Pfn>) {
        let old = Pte::read(env.mem, l3_pa);
        let inv = radix::clear::<Pte>(env.mem, l3_pa, va, L3_SIZE);
        self.invalidate_page(env, pm, inv);
        self.pm_mut(pm).resident -= 1;
        if old.managed() {
            let m = PhysAddr(old.frame()).pfn_4k();
            ptpage::hand_over(env, m, 1, old.modified(), old.accessed());
            self.pv.del(env, m, pm, va);
        }
        self.unuse(env, pm, va, L3_SHIFT, free);
    }

    /// Removes the 4 KB mappings in [sva, eva) of the L3 table at `ptp`
    /// (the inner loop of pmap_remove): each as pmap_remove_l3 does, and
    /// each run of them fenced again as a range.
    pub(crate) fn remove_l3_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, ptp: u64, free: &mut Vec<Pfn>) {
        let mut run = Batch::new();
        let mut va = sva;
        while va < eva {
            let pa = radix::slot(ptp, va, L3_SHIFT);
            if Pte::read(env.mem, pa).valid() {
                self.remove_l3(env, pm, va, pa, free);
                run.add(Invalidate::new(va, L3_SIZE));
            } else {
                self.invalidate_all(env, pm, &mut run);
            }
            va += L3_SIZE;
        }
        self.invalidate_all(env, pm, &mut run);
    }

    /// Removes a whole 2 MB mapping (pmap_remove_l2): its PV entry gone,
    /// the dirty and referenced state handed to all 512 pages, and the
    /// stashed L3 table freed. The caller fences its whole range
    /// (`invalidate_range`): 4 KB translations from before a promotion
    /// may still be in TLBs.
    pub(crate) fn remove_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> Invalidate {
        let va2m = va & !(L2_SIZE - 1);
        let l2_pa = self.entry(env.mem, pm, va2m, L2_SHIFT).expect("remove_l2: no L2 table");
        let old = Pte::read(env.mem, l2_pa);
        debug_assert!(old.is_leaf(), "remove_l2: not a 2MB mapping");
        let inv = radix::clear::<Pte>(env.mem, l2_pa, va2m, L2_SIZE);
        self.pm_mut(pm).resident -= LN_ENTRIES;
        if old.managed() {
            self.pv.del_sp(old.frame(), pm, va2m);
            ptpage::hand_over(env, PhysAddr(old.frame()).pfn_4k(), LN_ENTRIES as u32, old.modified(), old.accessed());
        }
        self.pm_mut(pm).stash.discard(env, va2m, free);
        self.unuse(env, pm, va2m, L2_SHIFT, free);
        inv
    }

    /// Removes a whole 1 GB mapping (unmanaged: no PV entry).
    fn remove_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, l1_pa: PhysAddr, free: &mut Vec<Pfn>) -> Invalidate {
        let inv = radix::clear::<Pte>(env.mem, l1_pa, va & !(L1_SIZE - 1), L1_SIZE);
        self.pm_mut(pm).resident -= L1_SIZE / L3_SIZE;
        self.unuse(env, pm, va, L1_SHIFT, free);
        inv
    }

    /// An entry under pmap_protect: `mask` cleared; when write access goes
    /// from a managed dirty mapping, the modified state goes to its pages.
    fn protected(env: &mut PmapEnv, old: Pte, mask: PteFlags, npages: u32) -> Pte {
        if mask.contains(PteFlags::W) && old.has(PteFlags::SW_MANAGED | PteFlags::D) {
            let m0 = PhysAddr(old.frame()).pfn_4k();
            for k in 0..npages {
                ptpage::dirty(env, Pfn(m0.0 + k));
            }
        }
        old.without(mask)
    }

    /// pmap_protect of a whole superpage leaf at `pa` of `size` bytes and
    /// `npages` managed pages.
    fn protect_leaf(env: &mut PmapEnv, pa: PhysAddr, va: u64, size: u64, npages: u32, mask: PteFlags, batch: &mut Batch) {
        let old = Pte::read(env.mem, pa);
        let n = Self::protected(env, old, mask, npages);
        if n != old {
            batch.add(radix::update(env.mem, pa, n, va, size));
        }
    }
}

impl Remove for Riscv {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            // Whole, or no page to demote it: the mapping goes.
            Part::Leaf1g(pa) if covers(va, eva, L1_SIZE) || p.demote_l1(env, pm, va).is_err() => {
                let inv = p.remove_l1(env, pm, va, pa, &mut free);
                p.invalidate_range(env, pm, inv);
                Next::Past
            }
            Part::Leaf2m(_) if covers(va, eva, L2_SIZE) => {
                let inv = p.remove_l2(env, pm, va, &mut free);
                p.invalidate_range(env, pm, inv);
                Next::Past
            }
            // Demotion failed: the large page mapping was destroyed.
            Part::Leaf2m(_) if !p.demote_l2(env, pm, va) => Next::Past,
            Part::Leaf1g(_) | Part::Leaf2m(_) => Next::Again,
            Part::Table(ptp) => {
                p.remove_l3_range(env, pm, va, next_block(va, L2_SIZE).min(eva), ptp, &mut free);
                Next::Past
            }
        });
        ptpage::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): superpage
    /// mappings of its 2 MB frame are demoted first.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        base::remove_all_demoting(self, env, m, Self::demote_l2, |p, env, pm, va, free| {
            let pa = p.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 table");
            p.remove_l3(env, pm, va, pa, free);
        });
    }

    /// pmap_protect: reduces the protection of [sva, eva) to `pr`.
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if base::protect_needs_nothing_more(self, env, pm, sva, eva, pr) {
            return;
        }
        let mut mask = PteFlags::empty();
        if pr & prot::WRITE == 0 {
            mask |= PteFlags::W | PteFlags::D;
        }
        if pr & prot::EXEC == 0 {
            mask |= PteFlags::X;
        }
        let mut batch = Batch::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Leaf1g(pa) if covers(va, eva, L1_SIZE) => {
                Self::protect_leaf(env, pa, va, L1_SIZE, 0, mask, &mut batch);
                Next::Past
            }
            Part::Leaf1g(_) if p.demote_l1(env, pm, va).is_err() => Next::Past,
            Part::Leaf2m(pa) if covers(va, eva, L2_SIZE) => {
                Self::protect_leaf(env, pa, va, L2_SIZE, LN_ENTRIES as u32, mask, &mut batch);
                Next::Past
            }
            Part::Leaf2m(_) if !p.demote_l2(env, pm, va) => Next::Past,
            Part::Leaf1g(_) | Part::Leaf2m(_) => Next::Again,
            Part::Table(ptp) => {
                pte::update_range(env, ptp, va, next_block(va, L2_SIZE).min(eva), &mut batch, |env, old| Self::protected(env, old, mask, 1));
                Next::Past
            }
        });
        self.invalidate_all(env, pm, &mut batch);
    }

    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        pte::remove_write(self, env, m)
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
        let mut batch = Batch::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Leaf1g(_) => Next::Past,
            Part::Leaf2m(pa) => {
                let old = Pte::read(env.mem, pa);
                if !old.managed() || !p.demote_l2(env, pm, va) {
                    return Next::Past;
                }
                if !old.wired() {
                    let last = next_block(va, L2_SIZE).min(eva) - L3_SIZE;
                    let l3_pa = p.entry(env.mem, pm, last, L3_SHIFT).expect("demoted");
                    p.remove_l3(env, pm, last, l3_pa, &mut free);
                }
                // Its L3 entries are advised next.
                Next::Again
            }
            Part::Table(ptp) => {
                pte::update_range(env, ptp, va, next_block(va, L2_SIZE).min(eva), &mut batch, |env, old: Pte| pte::advised(env, old, advice));
                Next::Past
            }
        });
        self.invalidate_all(env, pm, &mut batch);
        ptpage::free_all(env, free);
    }
}
