//! Entering mappings: 4 KB pages (pmap_enter) followed by the promotion
//! attempts, 64 KB runs directly (pmap_enter_l3c), 2 MB blocks directly
//! (pmap_enter_l2), 1 GB blocks of large-page shared memory
//! (pmap_enter_largepage), and whole object ranges at once
//! (pmap_enter_object).

use super::{Arm64, L3C_SIZE, PSIND_L1, PSIND_L2, PSIND_L3C};
use crate::base::{each_resident, Core, Enter};
use crate::ptpage;
use crate::radix::{self, Format, Tables};
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L0_SHIFT, L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot, Psind};

impl Arm64 {
    /// The L1 entry's address for `va`, allocating the L1 table.
    fn alloc_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<PhysAddr, PmapError> {
        let l0e_pa = radix::slot(self.root_table(pm), va, L0_SHIFT);
        let mut l0e = Desc::read(env.mem, l0e_pa);
        if !l0e.valid() {
            let p = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
            l0e = Desc::table(p.addr_4k().0);
            radix::wr(env.mem, l0e_pa, l0e);
        }
        Ok(radix::slot(l0e.oa(), va, L1_SHIFT))
    }

    /// The entry `e` at `pa` in a page-table page below the root; if it is
    /// invalid, a new table is allocated and linked there, one more
    /// reference of the page holding `pa`.
    fn linked_table(env: &mut PmapEnv, pa: PhysAddr, e: Desc) -> Result<Desc, PmapError> {
        if e.valid() {
            return Ok(e);
        }
        let p = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        let e = Desc::table(p.addr_4k().0);
        radix::wr(env.mem, pa, e);
        ptpage::adjust_ref(env, pa.0 & !0xfff, 1);
        Ok(e)
    }

    /// The L2 entry's address for `va`, allocating the L1 and L2 tables;
    /// an L1 block in the way is demoted (pmap_alloc_l2).
    pub(crate) fn alloc_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<PhysAddr, PmapError> {
        let l1e_pa = self.alloc_l1(env, pm, va)?;
        let mut l1e = Desc::read(env.mem, l1e_pa);
        if l1e.is_block() {
            self.demote_l1(env, pm, va)?;
            l1e = Desc::read(env.mem, l1e_pa);
        }
        let l1e = Self::linked_table(env, l1e_pa, l1e)?;
        Ok(radix::slot(l1e.oa(), va, L2_SHIFT))
    }

    /// The L3 entry's address for `va` and its table, allocating tables as
    /// needed; an L2 block in the way is demoted, or removed if demotion
    /// fails (pmap_alloc_l3 and the demotion in pmap_enter).
    pub(crate) fn alloc_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<(PhysAddr, u64), PmapError> {
        let l2e_pa = self.alloc_l2(env, pm, va)?;
        if Desc::read(env.mem, l2e_pa).is_block() {
            self.demote_l2(env, pm, va);
        }
        // Demotion, or its failure, may have changed the tables above.
        let l2e_pa = self.alloc_l2(env, pm, va)?;
        let l2e = Self::linked_table(env, l2e_pa, Desc::read(env.mem, l2e_pa))?;
        Ok((radix::slot(l2e.oa(), va, L3_SHIFT), l2e.oa()))
    }

    /// pmap_enter for a 4 KB page, then the promotion attempts: first the
    /// 64 KB run around it, when virtual and physical addresses agree
    /// modulo 64 KB and the reservation has the whole run populated
    /// (vm_reserv_is_populated); if that succeeds and both the L3 table
    /// and the reservation are full, the 2 MB block.
    pub(crate) fn enter_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let managed = ptpage::managed(env, m);
        let pa = m.addr_4k().0;
        let new = Self::new_l3(pa, pr, &flags, managed);
        let (l3_pa, table) = self.alloc_l3(env, pm, va)?;
        let orig = Desc::read(env.mem, l3_pa);
        if orig.valid() && flags.noreplace {
            return Err(PmapError::Exists);
        }
        if !orig.valid() {
            ptpage::adjust_ref(env, table, 1);
            self.pm_mut(pm).resident += 1;
            if managed {
                self.pv.add(env, m, pm, va);
            }
            radix::wr(env.mem, l3_pa, new);
        } else if orig.oa() != pa {
            // The physical page changed: take the old one out first.
            if orig.has(DescFlags::CONTIGUOUS) {
                self.demote_l3c(env, pm, l3_pa, va);
            }
            let old = Desc::read(env.mem, l3_pa);
            let inv = radix::clear::<Desc>(env.mem, l3_pa, va, L3_SIZE);
            let om = PhysAddr(old.oa()).pfn_4k();
            if old.has(DescFlags::AF) || !old.has(DescFlags::SW_MANAGED) {
                self.invalidate_page(env, pm, inv, true);
            } else {
                // A managed entry the hardware never set AF in was never
                // loaded into a TLB.
                inv.unneeded();
            }
            if old.has(DescFlags::SW_MANAGED) {
                ptpage::hand_over(env, om, 1, Self::dirty(old), old.has(DescFlags::AF));
                self.pv.del(env, om, pm, va);
            }
            if managed {
                self.pv.add(env, m, pm, va);
            }
            radix::wr(env.mem, l3_pa, new);
        } else if orig.without(DescFlags::AF) != new.without(DescFlags::AF) {
            // Same page, other attributes (protection, wiring, or a
            // contiguous run to break up).
            if orig.has(DescFlags::CONTIGUOUS) {
                self.demote_l3c(env, pm, l3_pa, va);
            }
            let old = Desc::read(env.mem, l3_pa);
            let inv = radix::update(env.mem, l3_pa, new, va, L3_SIZE);
            self.invalidate_page(env, pm, inv, true);
            if old.has(DescFlags::SW_MANAGED) && Self::dirty(old) {
                ptpage::dirty(env, m);
            }
        }
        let full_ptp = env.phys.pages.get(PhysAddr(table).pfn_4k()).ref_count as u64 == LN_ENTRIES;
        if self.superpages_enabled()
            && (va & (L3C_SIZE - 1)) == (pa & (L3C_SIZE - 1))
            && env.phys.reserv.is_populated_run(m, L3C_ENTRIES as u32)
            && self.promote_l3c(env, pm, l3_pa, va)
            && full_ptp
            && env.phys.reserv.level_iffullpop(m) == 0
        {
            self.promote_l2(env, pm, va);
        }
        Ok(())
    }

    /// Whether a superpage entry of `psind` may be entered for page `m`:
    /// transparent ones need the tunable, large-page memory never does.
    fn superpage_allowed(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.superpages_enabled() || env.phys.pages.get(m).has(pflags::LARGEPAGE)
    }

    /// Maps a 64 KB run directly (pmap_enter_l3c): `m` is the first page of
    /// an aligned run of 16 populated pages. Base mappings in the range are
    /// removed first unless `noreplace`, which fails instead.
    pub(crate) fn enter_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(L3C_SIZE) && m.addr_4k().0.is_multiple_of(L3C_SIZE), "unaligned 64KB mapping");
        if !self.superpage_allowed(env, m) {
            return Err(PmapError::BadPsind);
        }
        if flags.noreplace && self.entry(env.mem, pm, va, L2_SHIFT).is_some_and(|a| Desc::read(env.mem, a).is_block()) {
            return Err(PmapError::Exists);
        }
        let managed = ptpage::managed(env, m);
        let new = Self::new_l3(m.addr_4k().0, pr, &flags, managed).with(DescFlags::CONTIGUOUS);
        debug_assert!(!new.writable_clean(), "a writable 64KB mapping must be dirty");
        let (l3_pa, table) = self.alloc_l3(env, pm, va)?;
        let run = |k: u64| PhysAddr(l3_pa.0 + k * 8);
        if flags.noreplace && (0..L3C_ENTRIES).any(|k| Desc::read(env.mem, run(k)).valid()) {
            return Err(PmapError::Exists);
        }
        // The 16 new entries are counted first, so that removing what is
        // there cannot free the table.
        ptpage::adjust_ref(env, table, L3C_ENTRIES as i32);
        let mut free = Vec::new();
        self.remove_l3_range(env, pm, va, va + L3C_SIZE, table, &mut free);
        debug_assert!(free.is_empty());
        if managed {
            for k in 0..L3C_ENTRIES {
                self.pv.add(env, Pfn(m.0 + k as u32), pm, va + k * L3_SIZE);
            }
        }
        self.pm_mut(pm).resident += L3C_ENTRIES;
        for k in 0..L3C_ENTRIES {
            radix::wr(env.mem, run(k), Desc(new.0 + k * L3_SIZE));
        }
        self.st.l3c.mappings += 1;
        Ok(())
    }

    /// Maps a 2 MB block directly (pmap_enter_l2): `m` is the first page of
    /// an aligned, fully populated 2 MB run. Mappings already in the range
    /// are removed first unless `noreplace`, which fails instead.
    pub(crate) fn enter_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(L2_SIZE) && m.addr_4k().0.is_multiple_of(L2_SIZE), "unaligned 2MB mapping");
        if !self.superpage_allowed(env, m) {
            return Err(PmapError::BadPsind);
        }
        let managed = ptpage::managed(env, m);
        let new = Self::new_l3(m.addr_4k().0, pr, &flags, managed).without(DescFlags::TYPE);
        debug_assert!(!new.writable_clean(), "a writable 2MB mapping must be dirty");
        let l2_pa = self.alloc_l2(env, pm, va)?;
        let old = Desc::read(env.mem, l2_pa);
        if old.valid() {
            if flags.noreplace {
                return Err(PmapError::Exists);
            }
            let mut free = Vec::new();
            if old.is_block() {
                self.remove_l2(env, pm, va, &mut free);
            } else {
                self.remove_l3_range(env, pm, va, va + L2_SIZE, old.oa(), &mut free);
            }
            ptpage::free_all(env, free);
        }
        // The removal may have freed the L2 table.
        let l2_pa = self.alloc_l2(env, pm, va)?;
        if managed {
            self.pv.add_sp(m.addr_4k().0, pm, va);
        }
        radix::wr(env.mem, l2_pa, new);
        ptpage::adjust_ref(env, l2_pa.0 & !0xfff, 1);
        self.pm_mut(pm).resident += LN_ENTRIES;
        self.st.l2.mappings += 1;
        Ok(())
    }

    /// Maps a 1 GB block of large-page shared memory
    /// (pmap_enter_largepage). Such pages are unmanaged: no PV entries.
    pub(crate) fn enter_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(L1_SIZE) && m.addr_4k().0.is_multiple_of(L1_SIZE), "unaligned 1GB mapping");
        if !env.phys.pages.get(m).has(pflags::LARGEPAGE) {
            return Err(PmapError::BadPsind);
        }
        let l1_pa = self.alloc_l1(env, pm, va)?;
        let old = Desc::read(env.mem, l1_pa);
        if old.valid() && (flags.noreplace || !old.is_block()) {
            // A table with mappings is in the way.
            return Err(PmapError::Exists);
        }
        let new = Self::new_l3(m.addr_4k().0, pr, &flags, false).without(DescFlags::TYPE);
        if old.valid() {
            let inv = radix::update(env.mem, l1_pa, new, va, L1_SIZE);
            self.invalidate_page(env, pm, inv, true);
        } else {
            radix::wr(env.mem, l1_pa, new);
            ptpage::adjust_ref(env, l1_pa.0 & !0xfff, 1);
            self.pm_mut(pm).resident += L1_SIZE / L3_SIZE;
        }
        self.st.l1_mappings += 1;
        Ok(())
    }

}

impl Enter for Arm64 {
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind {
            Psind::BASE => self.enter_l3(env, pm, va, m, pr, flags),
            PSIND_L3C => self.enter_l3c(env, pm, va, m, pr, flags),
            PSIND_L2 => self.enter_l2(env, pm, va, m, pr, flags),
            PSIND_L1 => self.enter_l1(env, pm, va, m, pr, flags),
            _ => Err(PmapError::BadPsind),
        }
    }

    /// Maps the resident pages of [start, end) without write access
    /// (pmap_enter_object): a 2 MB block where the run is aligned and its
    /// reservation full (pmap_enter_l2_rx), else a 64 KB run where the 16
    /// pages are populated (pmap_enter_l3c_rx), else a 4 KB page
    /// (pmap_enter_quick). These are speculative mappings: AF stays clear.
    /// Existing mappings are left alone.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let pr = pr & !prot::WRITE;
        let fl = EnterFlags { access: prot::NONE, noreplace: true, ..Default::default() };
        each_resident(start, end, L3_SIZE, pages, |va, m| {
            if self.superpages_enabled() && ptpage::is_superpage_run(env, pages, va, end, m, L2_SIZE) {
                // An L2 block already there (KERN_NO_SPACE) is skipped too.
                let block_there = self.entry(env.mem, pm, va, L2_SHIFT).is_some_and(|a| Desc::read(env.mem, a).is_block());
                if block_there || self.enter_l2(env, pm, va, m, pr, fl).is_ok() {
                    return Some(L2_SIZE);
                }
            }
            if self.superpages_enabled()
                && env.phys.reserv.is_populated_run(m, L3C_ENTRIES as u32)
                && ptpage::is_run(pages, va, end, m, L3C_SIZE)
                && self.enter_l3c(env, pm, va, m, pr, fl).is_ok()
            {
                return Some(L3C_SIZE);
            }
            let _ = self.enter_l3(env, pm, va, m, pr, fl);
            Some(L3_SIZE)
        });
    }
}
