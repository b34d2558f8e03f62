//! Entering mappings: one 4 KB page (moea64_enter), a whole 16 MB
//! superpage at once (moea64_sp_enter), and the resident pages of an
//! object range (moea64_enter_object).

use crate::base::{each_resident, Core, Enter, Remove};
use super::{pvof, Ppc64, PSIND_SP, Pvo, NO_SLOT, SP_MASK, SP_PAGES, SP_SIZE};
use crate::ptpage;
use splab_hw::ppc64::pte::HpteLo;
use splab_hw::{Pfn, VirtAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot, Psind};

/// WIMG of every mapping here: ordinary, coherent memory (moea64_calc_wimg
/// of a page in a physical memory region: LPTE_M).
const WIMG_MEMORY: u8 = HpteLo::M.bits() as u8;

impl Ppc64 {
    /// Adds a PVO to its address space, its page's list and the HPT
    /// (moea64_pvo_enter).
    pub(crate) fn pvo_enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, pvo: Pvo) {
        debug_assert!(pvo.slot == NO_SLOT && va & 0xfff == 0);
        let p = self.pm_mut(pm);
        let old = p.pvos.insert(va, pvo);
        debug_assert!(old.is_none(), "PVO at {va:#x} exists");
        *p.sp_count.entry(va >> super::SP_SHIFT).or_default() += 1;
        if pvo.managed() {
            self.pv.add(env, Pfn((pvo.pa >> 12) as u32), pm, va);
        }
        self.pte_insert(env, pm, va);
    }

    fn new_pvo(pa: u64, pr: Prot, flags: &EnterFlags, managed: bool) -> Pvo {
        let mut f = 0;
        if managed {
            f |= pvof::MANAGED;
        }
        if flags.wired {
            f |= pvof::WIRED;
        }
        Pvo { pa, prot: pr, flags: f, wimg: WIMG_MEMORY, slot: NO_SLOT, refchg: 0 }
    }

    /// moea64_enter for a 4 KB page: a superpage in the way is demoted; an
    /// identical mapping stays (put back into the HPT if it was evicted);
    /// another is replaced. Then, if the page completes its reservation
    /// and its virtual and physical offsets in 16 MB agree, promotion is
    /// tried.
    pub(crate) fn enter_4k(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let managed = ptpage::managed(env, m);
        let pa = m.addr().0;
        self.vsid(env, pm, va)?;
        if self.pvo(pm, va & !SP_MASK).is_some_and(|p| p.large()) {
            self.sp_demote(env, pm, va);
        }
        let new = Self::new_pvo(pa, pr, &flags, managed);
        if let Some(old) = self.pvo(pm, va).copied() {
            if flags.noreplace {
                return Err(PmapError::Exists);
            }
            if (old.pa, old.prot, old.flags, old.wimg) == (new.pa, new.prot, new.flags, new.wimg) {
                if !old.in_table() {
                    self.pte_reinsert(env, pm, va);
                }
                return Ok(());
            }
            self.pvo_remove(env, pm, va);
        }
        self.pvo_enter(env, pm, va, new);
        if self.superpages_enabled() && managed && va & SP_MASK == pa & SP_MASK && env.phys.reserv.level_iffullpop(m) == 0 {
            self.sp_promote(env, pm, va, m);
        }
        Ok(())
    }

    /// moea64_sp_enter: maps the 16 MB run starting at `m` at `va` with
    /// 4096 large PVOs, after removing whatever was mapped there.
    pub(crate) fn sp_enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let pa = m.addr().0;
        debug_assert!(va & SP_MASK == 0 && pa & SP_MASK == 0, "unaligned 16MB mapping");
        if !self.superpages_enabled() && !env.phys.pages.get(m).has(pflags::LARGEPAGE) {
            return Err(PmapError::BadPsind);
        }
        if flags.noreplace && self.next_pvo(pm, va, va + SP_SIZE).is_some() {
            return Err(PmapError::Exists);
        }
        self.vsid(env, pm, va)?;
        self.remove(env, pm, va, va + SP_SIZE);
        let managed = ptpage::managed(env, m);
        for i in 0..SP_PAGES {
            let mut p = Self::new_pvo(pa + i * 4096, pr, &flags, managed);
            p.flags |= pvof::LARGE;
            self.pvo_enter(env, pm, va + i * 4096, p);
        }
        self.st.sp.mappings += 1;
        Ok(())
    }

}

impl Enter for Ppc64 {
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind {
            Psind::BASE => self.enter_4k(env, pm, va, m, pr, flags),
            PSIND_SP => self.sp_enter(env, pm, va, m, pr, flags),
            _ => Err(PmapError::BadPsind),
        }
    }

    /// moea64_enter_object: the resident pages of [start, end), read-only
    /// (and executable if asked): a superpage where an aligned 16 MB run of
    /// a fully populated reservation fits (m->psind == 1), 4 KB pages
    /// elsewhere. As in moea64, these go through moea64_enter and so
    /// replace what is mapped there.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let pr = pr & (prot::READ | prot::EXEC);
        each_resident(start, end, 4096, pages, |va, m| {
            if self.superpages_enabled() && ptpage::is_superpage_run(env, pages, va, end, m, SP_SIZE) && self.sp_enter(env, pm, va, m, pr, EnterFlags::default()).is_ok() {
                return Some(SP_SIZE);
            }
            // A failure (no room for a segment) leaves the page to be faulted.
            let _ = self.enter_4k(env, pm, va, m, pr, EnterFlags::default());
            Some(4096)
        });
    }
}
