//! Removing and changing mappings: moea64_remove (whole superpages with
//! moea64_sp_remove, partial ones demoted first), moea64_remove_all,
//! moea64_protect (moea64_sp_protect, moea64_pvo_protect) and
//! moea64_remove_write.

use crate::base::Remove;
use super::{rc, Ppc64, SP_MASK, SP_SIZE};
use splab_hw::Pfn;
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

impl Ppc64 {
    /// Takes one PVO out of the HPT, its address space and its page's list
    /// (moea64_pvo_remove_from_pmap, moea64_pvo_remove_from_page). Returns
    /// its R and C bits; a managed writable mapping's go to its page.
    pub(crate) fn pvo_remove(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> u8 {
        let bits = match self.pte_unset(env, pm, va) {
            Some(b) => b,
            None => {
                self.st.pte_overflow -= 1;
                0
            }
        };
        let p = self.pm_mut(pm);
        let pvo = p.pvos.remove(&va).expect("PVO to remove");
        let k = va >> super::SP_SHIFT;
        let n = p.sp_count.get_mut(&k).expect("counted");
        *n -= 1;
        if *n == 0 {
            p.sp_count.remove(&k);
        }
        let bits = bits | pvo.refchg;
        if pvo.managed() {
            let m = Pfn((pvo.pa >> 12) as u32);
            let removed = self.pv.remove(env, m, pm, va);
            debug_assert!(removed, "no PV entry for {va:#x}");
            if pvo.prot & prot::WRITE != 0 {
                Self::refchg_to_page(env, m, bits);
            }
        }
        bits
    }

    /// Whether the superpage at `spva` lies wholly in [sva, eva)
    /// (moea64_sp_pvo_in_range).
    fn sp_in_range(spva: u64, sva: u64, eva: u64) -> bool {
        spva >= sva && spva + SP_SIZE <= eva
    }

    /// moea64_sp_remove: the 4096 PVOs of the superpage at `spva` go. The
    /// bits of all its entries go to all its pages, as at demotion (moea64
    /// gives each page its own entry's and relies on the pages having been
    /// dirtied at promotion).
    pub(crate) fn sp_remove(&mut self, env: &mut PmapEnv, pm: PmapId, spva: u64) {
        let first = *self.pvo(pm, spva).expect("superpage PVO");
        let bits = self.batched_tlbie(env, pm, spva, |p, env| p.pvos_in(pm, spva, spva + SP_SIZE).into_iter().fold(0, |b, v| b | p.pvo_remove(env, pm, v)));
        if first.managed() && first.prot & prot::WRITE != 0 {
            let m0 = (first.pa & !SP_MASK) >> 12;
            for i in 0..super::SP_PAGES {
                Self::refchg_to_page(env, Pfn((m0 + i) as u32), bits);
            }
        }
    }

    /// moea64_pvo_protect: the mapping at `va` keeps only what `pr` allows;
    /// its entry is rewritten, and if it loses write access its modified
    /// state goes to the page.
    pub(crate) fn pvo_protect(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, pr: Prot) {
        let old = *self.pvo(pm, va).expect("PVO");
        let new = old.prot & pr;
        if new == old.prot {
            return;
        }
        self.pvo_mut(pm, va).prot = new;
        let bits = self.pte_replace(env, pm, va).unwrap_or(0) | old.refchg;
        if old.managed() && old.prot & prot::WRITE != 0 {
            Self::refchg_to_page(env, Pfn((old.pa >> 12) as u32), bits);
        }
    }

    /// moea64_sp_protect: all 4096 PVOs of the superpage at `spva` keep
    /// only what `pr` allows; the superpage's bits go to all its pages.
    fn sp_protect(&mut self, env: &mut PmapEnv, pm: PmapId, spva: u64, pr: Prot) {
        let old = *self.pvo(pm, spva).expect("superpage PVO");
        if old.prot & pr == old.prot {
            return;
        }
        let bits = self.batched_tlbie(env, pm, spva, |p, env| {
            let mut bits = 0;
            for v in p.pvos_in(pm, spva, spva + SP_SIZE) {
                let pvo = p.pvo_mut(pm, v);
                pvo.prot &= pr;
                bits |= pvo.refchg;
                bits |= p.pte_replace(env, pm, v).unwrap_or(0);
            }
            bits
        });
        self.sp_refchg_process(env, pm, spva, bits, old.prot);
    }

}

impl Remove for Ppc64 {
    /// moea64_remove: removes every mapping in [sva, eva).
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut va = sva;
        while let Some((k, p)) = self.next_pvo(pm, va, eva) {
            if p.large() {
                let spva = k & !SP_MASK;
                if Self::sp_in_range(spva, sva, eva) {
                    self.sp_remove(env, pm, spva);
                    va = spva + SP_SIZE;
                    continue;
                }
                self.sp_demote(env, pm, k);
            }
            self.pvo_remove(env, pm, k);
            va = k + 4096;
        }
    }

    /// moea64_remove_all: removes every mapping of page `m`, demoting the
    /// superpages it is part of first.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            if self.pvo(pm, va).expect("listed PVO").large() {
                self.sp_demote(env, pm, va);
            }
            self.pvo_remove(env, pm, va);
        }
    }

    /// moea64_protect: reduces the protection of [sva, eva) to `pr`;
    /// without read access the mappings go.
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if pr & prot::READ == 0 {
            return self.remove(env, pm, sva, eva);
        }
        let mut va = sva;
        while let Some((k, p)) = self.next_pvo(pm, va, eva) {
            if p.large() {
                let spva = k & !SP_MASK;
                if Self::sp_in_range(spva, sva, eva) {
                    self.sp_protect(env, pm, spva, pr);
                    va = spva + SP_SIZE;
                    continue;
                }
                self.sp_demote(env, pm, k);
            }
            self.pvo_protect(env, pm, k, pr);
            va = k + 4096;
        }
    }

    /// moea64_remove_write: every writable mapping of `m` becomes
    /// read-only, superpages demoted first; if any was modified, so is
    /// the page.
    /// moea64 has no pmap_advise method: on powerpc, MADV_DONTNEED and
    /// MADV_FREE leave the mappings as they are.
    fn advise(&mut self, _env: &mut PmapEnv, _pm: PmapId, _sva: u64, _eva: u64, _advice: Advice) {}

    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        let mut bits = 0;
        for (pm, va) in self.pv.list(env, m) {
            let p = *self.pvo(pm, va).expect("listed PVO");
            if p.prot & prot::WRITE == 0 {
                continue;
            }
            if p.large() {
                self.sp_demote(env, pm, va);
            }
            self.pvo_mut(pm, va).prot &= !prot::WRITE;
            bits |= self.pte_replace(env, pm, va).unwrap_or(0) | p.refchg;
        }
        if bits & rc::CHG != 0 {
            crate::ptpage::dirty(env, m);
        }
    }
}
