//! Entering mappings: 4 KB pages (pmap_enter) followed by the promotion
//! attempts, 1 MB sections directly (pmap_enter_pte1), and whole object
//! ranges at once (pmap_enter_object with pmap_enter_1mpage, a 64 KB
//! counterpart after arm64's pmap_enter_l3c, and pmap_enter_quick).

use crate::base::{each_resident, Enter};
use super::{is_dirty, Armv7, PSIND_SECTION, DOMAIN, PTE2_A, PTE2_NG, PTE2_NM, PTE2_NX, PTE2_RO, PTE2_S, PTE2_U, VM_MAXUSER_ADDRESS};
use crate::ptpage;
use splab_hw::armv7::pte::{L1Desc, L2Desc, SmallFlags};
use splab_hw::armv7::{l1_index, L2_ENTRIES, LARGE_SIZE, REPLICAS, SECTION_SIZE};
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot, Psind};

impl Armv7 {
    /// pmap_enter for a 4 KB page, then the promotion attempts: a 64 KB
    /// large page when the 16-page run of the reservation around `m` is
    /// populated and its 16 entries are valid (as arm64's pmap_enter
    /// tries pmap_promote_l3c), and a section when the L2 table is full
    /// and the reservation fully populated (pmap_promote_pte1).
    pub(crate) fn enter_pte2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let managed = ptpage::managed(env, m);
        let pa = m.addr().0;
        let npte2 = Self::new_pte2(pa, pr, &flags, va);
        let p2 = self.alloc_pte2(env, pm, va)?;
        let idx = l1_index(va);
        if Self::rd2(env.mem, p2).is_large() {
            // Only the whole 64 KB may change at once.
            self.demote_large(env, pm, Self::group_base(va));
        }
        let opte2 = Self::rd2(env.mem, p2);
        if opte2.valid() && flags.noreplace {
            return Err(PmapError::Exists);
        }
        if opte2.valid() && opte2.frame() == pa {
            // A protection or wiring change. As in FreeBSD, an entry that
            // differs only in A and NM is left as it is.
            let keep = PTE2_NM | PTE2_A;
            if opte2.attrs() - keep != npte2.attrs() - keep {
                let inv = Self::update2(env.mem, p2, 1, L2Desc::FAULT, va);
                self.tlb_flush(env, pm, inv);
                Self::wr2(env.mem, p2, npte2);
                if managed {
                    Self::hand_over(env, m, opte2.attrs());
                }
            }
        } else {
            if opte2.valid() {
                // The physical page changed: break before make, the old
                // page's state and PV entry handed back.
                let inv = Self::update2(env.mem, p2, 1, L2Desc::FAULT, va);
                self.tlb_flush(env, pm, inv);
                let om = PhysAddr(opte2.frame()).pfn();
                if ptpage::managed(env, om) {
                    Self::hand_over(env, om, opte2.attrs());
                    let removed = self.pv.remove(env, om, pm, va);
                    debug_assert!(removed, "pmap_enter: no PV entry for {va:#x}");
                }
            } else {
                self.pt2_add(env, pm, idx, 1);
                self.pm_mut(pm).resident += 1;
            }
            if managed {
                self.pv.add(env, m, pm, va);
            }
            Self::wr2(env.mem, p2, npte2);
        }
        if !managed {
            return Ok(());
        }
        if self.lp_enabled.on && env.phys.reserv.is_populated_run(m, REPLICAS as u32) && self.run_is_mapped(env, pm, va) {
            self.promote_large(env, pm, va);
        }
        let full = self.pm(pm).pt2_count[idx as usize] as u64 == L2_ENTRIES;
        if full && self.sp_enabled.on && env.phys.reserv.level_iffullpop(m) == 0 {
            self.promote_pte1(env, pm, va);
        }
        Ok(())
    }

    /// Hands a mapping's referenced and modified state to its page.
    pub(crate) fn hand_over(env: &mut PmapEnv, m: Pfn, f: SmallFlags) {
        if f.contains(PTE2_A) {
            ptpage::referenced(env, m);
        }
        if is_dirty(f) {
            ptpage::dirty(env, m);
        }
    }

    /// Whether the 16 entries of the aligned 64 KB run holding `va` are
    /// all valid small pages (the large-page counterpart of a full L2
    /// table).
    fn run_is_mapped(&self, env: &PmapEnv, pm: PmapId, va: u64) -> bool {
        let Some(p0) = self.pte2_pa(pm, Self::group_base(va)) else { return false };
        (0..REPLICAS).all(|i| Self::rd2(env.mem, PhysAddr(p0.0 + i * 4)).is_small())
    }

    /// pmap_enter_pte1: maps a section directly. `m` is the first page of
    /// an aligned, fully populated 1 MB run (or of large-page shared
    /// memory). Mappings in the way are removed (unless `noreplace`): a
    /// section whole (pmap_remove_pte1), 4 KB ones one by one.
    pub(crate) fn enter_section(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        debug_assert!(va.is_multiple_of(SECTION_SIZE) && m.addr().0.is_multiple_of(SECTION_SIZE), "unaligned section");
        let largepage = env.phys.pages.get(m).has(pflags::LARGEPAGE);
        if (!self.sp_enabled.on && !largepage) || !self.superpage_allowed(va, SECTION_SIZE) {
            return Err(PmapError::BadPsind);
        }
        let managed = ptpage::managed(env, m);
        let npte1 = L1Desc::section_from_small(Self::new_pte2(m.addr().0, pr, &flags, va), DOMAIN);
        self.enter_pte1(env, pm, va, npte1, managed, flags.noreplace)
    }

    /// The common part of direct section mappings (pmap_enter_pte1).
    fn enter_pte1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, npte1: L1Desc, managed: bool, noreplace: bool) -> Result<(), PmapError> {
        let p1 = self.pte1_pa(pm, va);
        let old = Self::rd1(env.mem, p1);
        if old.is_section() || (old.is_table() && self.pm(pm).pt2_count[l1_index(va) as usize] > 0) {
            if noreplace {
                return Err(PmapError::Exists);
            }
            let mut free = Vec::new();
            if old.is_section() {
                self.remove_pte1(env, pm, va, &mut free);
            } else {
                self.remove_range_in_table(env, pm, va, va + SECTION_SIZE, &mut free);
            }
            ptpage::free_all(env, free);
        }
        if Self::rd1(env.mem, p1).is_table() {
            // Still linked to an empty table of a PT2PG page that other
            // tables keep: the walk cache may hold the link.
            let inv = Self::update1(env.mem, p1, L1Desc::FAULT, va, SECTION_SIZE);
            self.tlb_flush(env, pm, inv);
        }
        if managed {
            self.pv.add_sp(npte1.frame(), pm, va);
        }
        Self::wr1(env.mem, p1, npte1);
        self.pm_mut(pm).resident += L2_ENTRIES;
        self.st.section.mappings += 1;
        Ok(())
    }

    /// pmap_enter_quick_locked: a read-only (or read/execute) speculative
    /// mapping, unreferenced and unmodified, made only if nothing maps
    /// `va`; a section in the way is left alone, and no promotion is tried.
    fn enter_quick(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot) {
        if self.find(env.mem, pm, va).is_some() || Self::rd1(env.mem, self.pte1_pa(pm, va)).is_section() {
            return;
        }
        let Ok(p2) = self.alloc_pte2(env, pm, va) else { return };
        let mut f = PTE2_RO | PTE2_NM | PTE2_S | PTE2_NG;
        if va < VM_MAXUSER_ADDRESS {
            f |= PTE2_U;
        }
        if pr & prot::EXEC == 0 {
            f |= PTE2_NX;
        }
        if ptpage::managed(env, m) {
            self.pv.add(env, m, pm, va);
        }
        self.pt2_add(env, pm, l1_index(va), 1);
        self.pm_mut(pm).resident += 1;
        Self::wr2(env.mem, p2, L2Desc::small(m.addr().0, f));
    }

    /// pmap_enter_1mpage: a read-only, unreferenced section for a fully
    /// populated reservation, made only where nothing is mapped.
    fn enter_1mpage(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot) -> Result<(), PmapError> {
        let mut f = PTE2_RO | PTE2_NM | PTE2_S | PTE2_NG | PTE2_U;
        if pr & prot::EXEC == 0 {
            f |= PTE2_NX;
        }
        let npte1 = L1Desc::section_from_small(L2Desc::small(m.addr().0, f), DOMAIN);
        self.enter_pte1(env, pm, va, npte1, ptpage::managed(env, m), true)
    }

    /// Maps a populated, aligned 64 KB run with one large page: read-only,
    /// unreferenced, made only where none of the 16 entries is valid (the
    /// large-page counterpart of pmap_enter_1mpage, as arm64's
    /// pmap_enter_l3c is of pmap_enter_l2). Returns whether it did.
    fn enter_64kpage(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot) -> bool {
        if Self::rd1(env.mem, self.pte1_pa(pm, va)).is_section() {
            return false;
        }
        if let Some(p0) = self.pte2_pa(pm, va) {
            if (0..REPLICAS).any(|i| Self::rd2(env.mem, PhysAddr(p0.0 + i * 4)).valid()) {
                return false;
            }
        }
        let Ok(p0) = self.alloc_pte2(env, pm, va) else { return false };
        let mut f = PTE2_RO | PTE2_NM | PTE2_S | PTE2_NG | PTE2_U;
        if pr & prot::EXEC == 0 {
            f |= PTE2_NX;
        }
        let large = L2Desc::small(m.addr().0, f).small_to_large();
        let managed = ptpage::managed(env, m);
        for i in 0..REPLICAS {
            if managed {
                self.pv.add(env, Pfn(m.0 + i as u32), pm, va + i * 4096);
            }
            Self::wr2(env.mem, PhysAddr(p0.0 + i * 4), large);
        }
        self.pt2_add(env, pm, l1_index(va), REPLICAS as u16);
        self.pm_mut(pm).resident += REPLICAS;
        self.st.large.mappings += 1;
        true
    }

    /// Whether the object's page `m` at `va` starts a run [va, va + size)
    /// inside [.., end) that one mapping of `size` may cover: aligned
    /// virtually and physically, allowed there, managed, populated in its
    /// reservation (all of it for a section, vm_reserv_level_iffullpop; the
    /// 16 pages for a large page, vm_reserv_is_populated), and made of the
    /// consecutive frames.
    fn direct_fits(&self, env: &PmapEnv, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, va: u64, end: u64, m: Pfn, size: u64) -> bool {
        let populated = if size == SECTION_SIZE {
            env.phys.reserv.level_iffullpop(m) == 0
        } else {
            env.phys.reserv.is_populated_run(m, (size / 4096) as u32)
        };
        self.superpage_allowed(va, size) && ptpage::managed(env, m) && populated && ptpage::is_run(pages, va, end, m, size)
    }

}

impl Enter for Armv7 {
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind {
            Psind::BASE => self.enter_pte2(env, pm, va, m, pr, flags),
            PSIND_SECTION => self.enter_section(env, pm, va, m, pr, flags),
            _ => Err(PmapError::BadPsind),
        }
    }

    /// Maps the resident pages of [start, end) read-only (pmap_enter_object):
    /// sections where the run is aligned and its reservation fully
    /// populated (pmap_enter_1mpage), 64 KB large pages where a 16-page run
    /// is (with vm.pmap.lp_enabled), speculative 4 KB ones otherwise
    /// (pmap_enter_quick). Existing mappings are left alone.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let pr = pr & !prot::WRITE;
        each_resident(start, end, 4096, pages, |va, m| {
            if self.sp_enabled.on && self.direct_fits(env, pages, va, end, m, SECTION_SIZE) {
                match self.enter_1mpage(env, pm, va, m, pr) {
                    Ok(()) => return Some(SECTION_SIZE),
                    // A section already there counts as done.
                    Err(PmapError::Exists) if Self::rd1(env.mem, self.pte1_pa(pm, va)).is_section() => return Some(SECTION_SIZE),
                    Err(_) => {}
                }
            }
            if self.lp_enabled.on && self.direct_fits(env, pages, va, end, m, LARGE_SIZE) && self.enter_64kpage(env, pm, va, m, pr) {
                return Some(LARGE_SIZE);
            }
            self.enter_quick(env, pm, va, m, pr);
            Some(4096)
        });
    }
}
