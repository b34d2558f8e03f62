//! Promotion of 512 4 KB mappings to one 2 MB mapping (pmap_promote_l2).
//!
//! Tried right after a mapping is entered, when the L3 table is full and
//! the reservation holding the page is fully populated. The first PTE must
//! map the first page of an aligned 2 MB frame; every other PTE must map
//! the next physical page and agree with the first on the PTE_PROMOTE bits
//! (V, R, W, X, U, G, A, D and the software bits). Writable but clean PTEs
//! are made read-only first, so that the superpage's first write is seen:
//! its D bit covers all 512 pages. No fence is needed for that: a store
//! through a TLB entry whose D is clear must consult the PTE again, and
//! then finds W clear.

use super::Riscv;
use crate::counters::PromoteFail;
use crate::pte::write_protect_clean;
use crate::radix::{self, Format, Tables};
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L2_SHIFT, L2_SIZE, LN_ENTRIES};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Riscv {
    /// Tries to replace the L3 table covering `va` with one 2 MB leaf.
    /// Returns whether it did.
    pub(crate) fn promote_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let va2m = va & !(L2_SIZE - 1);
        let Some(l2_pa) = self.entry(env.mem, pm, va2m, L2_SHIFT) else { return false };
        let l2e = Pte::read(env.mem, l2_pa);
        if !l2e.is_table() {
            return false;
        }
        let ptp = l2e.frame();
        let first_pa = PhysAddr(ptp);
        let first = Pte::read(env.mem, first_pa);
        if !first.valid() || !first.frame().is_multiple_of(L2_SIZE) {
            return self.st.l2.failed(PromoteFail::FirstMisaligned);
        }
        let first = write_protect_clean(env, first_pa, va2m, first);
        let promote = PteFlags::PROMOTE.bits();
        let mut pa = first.frame() + 4096;
        for i in 1..LN_ENTRIES {
            let e_pa = PhysAddr(ptp + i * 8);
            let e = Pte::read(env.mem, e_pa);
            if !e.valid() || e.frame() != pa {
                return self.st.l2.failed(PromoteFail::NotContiguous);
            }
            let e = write_protect_clean(env, e_pa, va2m + i * 4096, e);
            if e.0 & promote != first.0 & promote {
                return self.st.l2.failed(PromoteFail::Attributes);
            }
            pa += 4096;
        }
        // Keep the L3 table for a later demotion (pmap_insert_pt_page).
        self.pm_mut(pm).stash.insert(va2m, PhysAddr(ptp).pfn(), true);
        // One PV entry for the superpage instead of 512 (pmap_pv_promote_l2).
        if first.has(PteFlags::SW_MANAGED) {
            self.pv.promote(env, PhysAddr(first.frame()).pfn(), pm, va2m, LN_ENTRIES as u32);
        }
        // A leaf has the same format at every level: the first PTE, as it
        // is, maps the 2 MB page. No fence: the 4 KB translations cached
        // from the stashed table map the same frames with the same bits.
        radix::update(env.mem, l2_pa, first, va2m, L2_SIZE).unneeded();
        self.st.l2.promotions += 1;
        env.ev.promotions += 1;
        true
    }
}
