//! Promotion of 512 4 KB mappings to one 2 MB mapping (pmap_promote_pde).
//!
//! Tried right after a mapping is entered, when the page-table page is full
//! and the reservation holding the page is fully populated. The first PTE
//! must map the first page of an aligned 2 MB frame and have been accessed;
//! every other PTE must map the next physical page, be accessed, and have
//! the same attributes. Writable but clean PTEs are made read-only first,
//! so that the superpage's first write is seen (its dirty bit covers all
//! 512 pages). The PTEs are checked from the last to the first.

use super::Amd64;
use crate::counters::PromoteFail;
use crate::pte::write_protect_clean;
use crate::radix::{self, Format};
use splab_hw::amd64::pte::{Pte, PteFlags, PG_FRAME};
use splab_hw::amd64::{NPTEPG, PAGE_2M};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

/// Attribute bits that must agree across the 512 PTEs (PG_PTE_PROMOTE).
fn promote_bits() -> u64 {
    (PteFlags::PROMOTE_MASK | PteFlags::D).bits()
}

impl Amd64 {
    /// Tries to replace the page-table page covering `va` with one 2 MB
    /// mapping. Returns whether it did.
    pub(crate) fn promote_pde(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let va2m = va & !(PAGE_2M - 1);
        let Some(pde_pa) = self.pde_pa(env.mem, pm, va2m) else { return false };
        let pde = Pte::read(env.mem, pde_pa);
        if !pde.valid() || pde.has(PteFlags::PS) {
            return false;
        }
        let ptp = pde.frame();
        let first_pa = PhysAddr(ptp);
        let first = Pte::read(env.mem, first_pa);
        let need = PteFlags::A | PteFlags::P;
        if first.0 & ((PG_FRAME & (PAGE_2M - 1)) | need.bits()) != need.bits() {
            let why = if !first.valid() || !first.frame().is_multiple_of(PAGE_2M) { PromoteFail::FirstMisaligned } else { PromoteFail::NotAccessed };
            return self.st.pde.failed(why);
        }
        let newpde = write_protect_clean(env, first_pa, va2m, first);
        // Expected frame | A | P of the last PTE, then walking down.
        let mut expect = (newpde.frame() + PAGE_2M - 4096) | need.bits();
        for i in (1..NPTEPG).rev() {
            let pa = PhysAddr(ptp + i * 8);
            let old = Pte::read(env.mem, pa);
            if old.0 & (PG_FRAME | need.bits()) != expect {
                let why = if old.valid() && old.frame() == expect & PG_FRAME { PromoteFail::NotAccessed } else { PromoteFail::NotContiguous };
                return self.st.pde.failed(why);
            }
            let old = write_protect_clean(env, pa, va2m + i * 4096, old);
            if old.0 & promote_bits() != newpde.0 & promote_bits() {
                return self.st.pde.failed(PromoteFail::Attributes);
            }
            expect -= 4096;
        }
        // Keep the page-table page for a later demotion.
        let ptp_pfn = PhysAddr(ptp).pfn();
        self.pm_mut(pm).stash.insert(va2m, ptp_pfn, true);
        // One PV entry for the superpage instead of 512 (pmap_pv_promote_pde).
        let frame = newpde.frame();
        if newpde.has(PteFlags::SW_MANAGED) {
            self.pv.promote(env, PhysAddr(frame).pfn(), pm, va2m, NPTEPG as u32);
        }
        // The PTE's PAT bit sits at bit 12 in a 2 MB PDE.
        let mut flags = newpde.flags() - PteFlags::PAT_4K;
        if newpde.has(PteFlags::PAT_4K) {
            flags |= PteFlags::PAT_LARGE;
        }
        let sp = Pte::new(frame, flags | PteFlags::PS | PteFlags::SW_PROMOTED);
        // No invalidation (pde_store): the 4 KB translations cached from
        // the stashed table map the same frames with the same attributes.
        radix::update(env.mem, pde_pa, sp, va2m, PAGE_2M).unneeded();
        self.st.pde.promotions += 1;
        env.ev.promotions += 1;
        true
    }
}
