//! Entering mappings: 4 KB pages (pmap_enter), 2 MB pages directly
//! (pmap_enter_l2), 1 GB pages of large-page shared memory (as amd64's
//! pmap_enter_largepage), and whole object ranges at once
//! (pmap_enter_object with pmap_enter_2mpage and pmap_enter_quick).

use super::{Riscv, PSIND_L1, PSIND_L2};
use crate::base::{each_resident, Core, Enter};
use crate::ptpage;
use crate::pte::PteFormat;
use crate::radix::{self, Format, Tables};
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot, Psind};

impl Riscv {
    /// pmap_enter for a 4 KB page, then the promotion attempt: when the L3
    /// table is full and the reservation holding the page is fully
    /// populated, as FreeBSD's pmap_enter tries pmap_promote_l2.
    pub(crate) fn enter_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let managed = ptpage::managed(env, m);
        let pa = m.addr().0;
        let mut newl3 = Self::new_pte(pa, pr, &flags, managed);
        let l3_pa = self.alloc_entry(env, pm, va, L3_SHIFT)?;
        let ptp = l3_pa.0 & !0xfff;
        let orig = Pte::read(env.mem, l3_pa);
        if orig.valid() && flags.noreplace {
            return Err(PmapError::Exists);
        }
        if orig.valid() && orig.frame() == pa {
            // A protection or wiring change: the PV entry stays, the
            // modified state goes to the page, the accessed state stays.
            if orig.has(PteFlags::SW_MANAGED | PteFlags::D) {
                ptpage::dirty(env, m);
            }
            newl3 = Pte(newl3.0 | (orig.0 & PteFlags::A.bits()));
            let inv = radix::update(env.mem, l3_pa, newl3, va, L3_SIZE);
            self.invalidate_page(env, pm, inv);
        } else {
            if orig.valid() {
                // The physical page changed: the old mapping is invalidated
                // first, handing its state and PV entry back.
                let inv = radix::clear::<Pte>(env.mem, l3_pa, va, L3_SIZE);
                if orig.managed() {
                    let om = PhysAddr(orig.frame()).pfn();
                    ptpage::hand_over(env, om, 1, orig.modified(), orig.accessed());
                    self.pv.del(env, om, pm, va);
                }
                self.invalidate_page(env, pm, inv);
            } else {
                ptpage::adjust_ref(env, ptp, 1);
                self.pm_mut(pm).resident += 1;
            }
            if managed {
                self.pv.add(env, m, pm, va);
            }
            radix::wr(env.mem, l3_pa, newl3);
        }
        let full = env.phys.pages.get(PhysAddr(ptp).pfn()).ref_count as u64 == LN_ENTRIES;
        if full && self.superpages_enabled() && managed && env.phys.reserv.level_iffullpop(m) == 0 {
            self.promote_l2(env, pm, va);
        }
        Ok(())
    }

    /// pmap_enter_quick_locked: a read-only (or read/execute) speculative
    /// mapping, without A, made only if nothing maps `va` yet; a superpage
    /// in the way is left alone, and no promotion is tried.
    fn enter_quick(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot) {
        if self.find_leaf(env.mem, pm, va).is_some() {
            return;
        }
        let Ok(l3_pa) = self.alloc_entry(env, pm, va, L3_SHIFT) else { return };
        let managed = ptpage::managed(env, m);
        let newl3 = Self::new_pte(m.addr().0, pr & !prot::WRITE, &EnterFlags::default(), managed);
        if managed {
            self.pv.add(env, m, pm, va);
        }
        ptpage::adjust_ref(env, l3_pa.0 & !0xfff, 1);
        self.pm_mut(pm).resident += 1;
        // FreeBSD's pmap_enter_quick_locked fences the new entry too.
        let inv = radix::update(env.mem, l3_pa, newl3, va, L3_SIZE);
        self.invalidate_page(env, pm, inv);
    }

    /// Maps a 2 MB page directly (pmap_enter_l2): `m` is the first page of
    /// an aligned, fully populated 2 MB run. Mappings already in the range
    /// are removed (unless `noreplace`): a 2 MB one whole (pmap_remove_l2),
    /// 4 KB ones one by one (pmap_remove_l3), freeing their L3 table.
    pub(crate) fn enter_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(L2_SIZE) && m.addr().0.is_multiple_of(L2_SIZE), "unaligned 2MB mapping");
        if !self.superpages_enabled() && !env.phys.pages.get(m).has(pflags::LARGEPAGE) {
            return Err(PmapError::BadPsind);
        }
        let managed = ptpage::managed(env, m);
        let l2_pa = self.alloc_entry(env, pm, va, L2_SHIFT)?;
        let old = Pte::read(env.mem, l2_pa);
        if old.valid() {
            if flags.noreplace {
                return Err(PmapError::Exists);
            }
            let mut free = Vec::new();
            if old.is_leaf() {
                let inv = self.remove_l2(env, pm, va, &mut free);
                self.invalidate_range(env, pm, inv);
            } else {
                self.remove_l3_range(env, pm, va, va + L2_SIZE, old.frame(), &mut free);
            }
            ptpage::free_all(env, free);
        }
        // The removal may have freed the tables above.
        let l2_pa = self.alloc_entry(env, pm, va, L2_SHIFT)?;
        let newl2 = Self::new_pte(m.addr().0, pr, &flags, managed);
        if managed {
            self.pv.add_sp(m.addr().0, pm, va);
        }
        radix::wr(env.mem, l2_pa, newl2);
        ptpage::adjust_ref(env, l2_pa.0 & !0xfff, 1);
        self.pm_mut(pm).resident += LN_ENTRIES;
        self.st.l2.mappings += 1;
        Ok(())
    }

    /// Maps a 1 GB page of large-page shared memory with an L1 leaf, as
    /// amd64's pmap_enter_largepage maps a PDPE. Such pages are unmanaged:
    /// no PV entries.
    pub(crate) fn enter_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(L1_SIZE) && m.addr().0.is_multiple_of(L1_SIZE), "unaligned 1GB mapping");
        let l1_pa = self.alloc_entry(env, pm, va, L1_SHIFT)?;
        let old = Pte::read(env.mem, l1_pa);
        if old.valid() && (flags.noreplace || old.is_table()) {
            // An L2 table with mappings is in the way.
            return Err(PmapError::Exists);
        }
        let table = l1_pa.0 & !0xfff;
        if !old.valid() && !self.is_root(pm, table) {
            ptpage::adjust_ref(env, table, 1);
        }
        let new = Self::new_pte(m.addr().0, pr, &flags, false);
        if old.valid() {
            let inv = radix::update(env.mem, l1_pa, new, va, L1_SIZE);
            self.invalidate_page(env, pm, inv);
        } else {
            radix::wr(env.mem, l1_pa, new);
            self.pm_mut(pm).resident += L1_SIZE / 4096;
        }
        self.st.l1_mappings += 1;
        Ok(())
    }

}

impl Enter for Riscv {
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind {
            Psind::BASE => self.enter_l3(env, pm, va, m, pr, flags),
            PSIND_L2 => self.enter_l2(env, pm, va, m, pr, flags),
            PSIND_L1 => self.enter_l1(env, pm, va, m, pr, flags),
            _ => Err(PmapError::BadPsind),
        }
    }

    /// Maps the resident pages of [start, end) read-only, with 2 MB
    /// mappings where the run is aligned and its reservation fully
    /// populated (pmap_enter_2mpage), speculative 4 KB ones otherwise
    /// (pmap_enter_quick). Existing mappings are left alone.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let pr = pr & !prot::WRITE;
        let fl = EnterFlags { access: prot::NONE, noreplace: true, ..Default::default() };
        each_resident(start, end, L3_SIZE, pages, |va, m| {
            if self.superpages_enabled() && ptpage::is_superpage_run(env, pages, va, end, m, L2_SIZE) {
                match self.enter_l2(env, pm, va, m, pr, fl) {
                    Ok(()) => return Some(L2_SIZE),
                    // A 2 MB mapping already there counts as done
                    // (KERN_NO_SPACE in pmap_enter_object).
                    Err(PmapError::Exists) if self.find_leaf(env.mem, pm, va).is_some_and(|(_, s, _)| s == L2_SHIFT) => return Some(L2_SIZE),
                    Err(_) => {}
                }
            }
            self.enter_quick(env, pm, va, m, pr);
            Some(L3_SIZE)
        });
    }
}
