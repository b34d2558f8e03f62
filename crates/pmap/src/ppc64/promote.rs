//! Promotion of 4096 4 KB mappings to one 16 MB superpage
//! (moea64_sp_promote), and the rewriting of a superpage's 4096 HPT
//! entries that promotion and demotion share (moea64_pte_replace_sp).
//!
//! Tried after a 4 KB page is entered whose reservation is now fully
//! populated and whose offset in 16 MB is the same virtually and
//! physically. Every page of the 16 MB range must be mapped, by the next
//! physical page of one 16 MB-aligned frame, with the same wired and
//! managed flags, the same protection and the same WIMG bits; each failed
//! check is counted by its reason. moea64 does not write-protect clean
//! pages first: it takes a promoted superpage to be referenced, and if
//! writable modified, and tells the VM so for all 4096 pages.

use crate::counters::PromoteFail;
use super::{pvof, rc, Ppc64, SP_MASK, SP_PAGES, SP_SHIFT, SP_SIZE};
use splab_hw::Pfn;
use splab_vm::pmap::{prot, PmapEnv, PmapId, Prot};

impl Ppc64 {
    /// Why the 4096 PVOs from `sva` cannot become a superpage of the 16 MB
    /// frame at `pa0`, if they cannot.
    fn promotion_check(&self, pm: PmapId, sva: u64, pa0: u64) -> Option<PromoteFail> {
        let p = self.pm(pm);
        if p.sp_count.get(&(sva >> SP_SHIFT)).copied().unwrap_or(0) as u64 != SP_PAGES {
            return Some(PromoteFail::Unmapped);
        }
        let first = p.pvos[&sva];
        for (i, (&va, pvo)) in p.pvos.range(sva..sva + SP_SIZE).enumerate() {
            debug_assert_eq!(va, sva + i as u64 * 4096, "4096 PVOs in range, one per page");
            if pvo.pa != pa0 + i as u64 * 4096 {
                return Some(PromoteFail::NotContiguous);
            }
            if pvo.flags & pvof::PROMOTE != first.flags & pvof::PROMOTE {
                return Some(PromoteFail::Flags);
            }
            if pvo.prot != first.prot {
                return Some(PromoteFail::Prot);
            }
            if pvo.wimg != first.wimg {
                return Some(PromoteFail::Wimg);
            }
        }
        None
    }

    /// Tries to make the 16 MB range around `va` one superpage; `m` is the
    /// page just entered. Returns whether it did.
    pub(crate) fn sp_promote(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn) -> bool {
        let sva = va & !SP_MASK;
        let pa0 = m.addr().0 & !SP_MASK;
        if let Some(why) = self.promotion_check(pm, sva, pa0) {
            return self.st.sp.failed(why);
        }
        for v in self.pvos_in(pm, sva, sva + SP_SIZE) {
            self.pvo_mut(pm, v).flags |= pvof::LARGE;
        }
        self.sp_replace(env, pm, sva);
        let first = self.pm(pm).pvos[&sva];
        let bits = rc::REF | if first.prot & prot::WRITE != 0 { rc::CHG } else { 0 };
        self.sp_refchg_process(env, pm, sva, bits, first.prot);
        // The superpage's own bits, cached with its first page (MDPG_ATTR_SP).
        self.pvo_mut(pm, sva).refchg |= bits;
        self.st.sp.promotions += 1;
        self.st.sp.mappings += 1;
        env.ev.promotions += 1;
        true
    }

    /// Rewrites the HPT entries of the 4096 PVOs from `sva` after their
    /// large flag changed: each is taken out (a tlbie each) and inserted
    /// again in its new form, evicted ones too. Returns the R and C bits
    /// of the entries taken out and those kept from earlier evictions.
    pub(crate) fn sp_replace(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64) -> u8 {
        self.batched_tlbie(env, pm, sva, |p, env| {
            let mut bits = 0;
            for v in p.pvos_in(pm, sva, sva + SP_SIZE) {
                match p.pte_unset(env, pm, v) {
                    Some(b) => bits |= b,
                    None => p.st.pte_overflow -= 1,
                }
                bits |= p.pvo(pm, v).expect("PVO").refchg;
                p.pte_insert(env, pm, v);
            }
            bits
        })
    }

    /// Hands a superpage's R and C bits to all 4096 of its pages, if it is
    /// managed and was writable (moea64_sp_refchg_process).
    pub(crate) fn sp_refchg_process(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, bits: u8, was: Prot) {
        let first = self.pm(pm).pvos[&sva];
        if !first.managed() || was & prot::WRITE == 0 {
            return;
        }
        let m0 = (first.pa & !SP_MASK) >> 12;
        for i in 0..SP_PAGES {
            Self::refchg_to_page(env, Pfn((m0 + i) as u32), bits);
        }
    }
}
