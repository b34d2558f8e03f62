//! Promotion: 16 L3 entries to one 64 KB run with the Contiguous bit
//! (pmap_promote_l3c), and 512 L3 entries to one 2 MB L2 block
//! (pmap_promote_l2).
//!
//! Both are tried from pmap_enter, the 64 KB run first. The checks are
//! FreeBSD's: the first entry must be a valid page mapping the first 4 KB
//! of an aligned physical run of the superpage's size; every other entry
//! must map the next physical page and have the same attributes except AF
//! (ATTR_PROMOTE). Entries are checked from the last to the first, and each
//! writable but clean entry is made read-only first (DBM cleared), so that
//! the first write to the superpage is seen as a fault and no superpage is
//! ever writable but clean; no TLB invalidation is needed for that, since
//! a clean entry's translation must be re-walked before a write. AF is
//! kept on the superpage only if every entry had it. The old entries are
//! replaced break-before-make.

use super::Arm64;
use crate::base::Core;
use crate::radix::{self, Format, Tables};
use crate::counters::PromoteFail;
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3C_SIZE, L3_SIZE, LN_ENTRIES};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

/// How the checks of one promotion went.
enum Run {
    /// Every entry fits; the superpage's attributes (those of the first
    /// entry, AF only if every entry had it).
    Fits(Desc),
    Fails(PromoteFail),
}

impl Arm64 {
    /// Clears DBM on a writable, clean entry mapping `va`.
    fn write_protect_clean(env: &mut PmapEnv, pa: PhysAddr, va: u64, e: Desc) -> Desc {
        if !e.writable_clean() {
            return e;
        }
        let n = e.without(DescFlags::DBM);
        // No TLBI: a clean entry's translation is walked again before a
        // write.
        radix::update(env.mem, pa, n, va, L3_SIZE).unneeded();
        n
    }

    /// The checks shared by both sizes over the `n` entries from `first`,
    /// which map from `va` on.
    fn check_run(env: &mut PmapEnv, first: PhysAddr, va: u64, n: u64, size: u64) -> Run {
        let e0 = Desc::read(env.mem, first);
        if !e0.is_table_or_page() || e0.oa() & (size - 1) != 0 {
            return Run::Fails(PromoteFail::FirstMisaligned);
        }
        let e0 = Self::write_protect_clean(env, first, va, e0);
        let mut all_af = e0.has(DescFlags::AF);
        for k in (1..n).rev() {
            let pa = PhysAddr(first.0 + k * 8);
            let e = Desc::read(env.mem, pa);
            if !e.is_table_or_page() || e.oa() != e0.oa() + k * L3_SIZE {
                return Run::Fails(PromoteFail::NotContiguous);
            }
            let e = Self::write_protect_clean(env, pa, va + k * L3_SIZE, e);
            if e.0 & DescFlags::PROMOTE != e0.0 & DescFlags::PROMOTE {
                return Run::Fails(PromoteFail::Attributes);
            }
            all_af &= e.has(DescFlags::AF);
        }
        Run::Fits(if all_af { e0 } else { e0.without(DescFlags::AF) })
    }

    /// Tries to make the 64 KB run holding the L3 entry at `l3_pa` one
    /// contiguous mapping. Returns whether it did.
    pub(crate) fn promote_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, l3_pa: PhysAddr, va: u64) -> bool {
        if !self.superpages_enabled() {
            return false;
        }
        let first = PhysAddr(l3_pa.0 & !(L3C_ENTRIES * 8 - 1));
        if Desc::read(env.mem, first).has(DescFlags::SW_NO_PROMOTE) {
            return false;
        }
        let va = va & !(L3C_SIZE - 1);
        let newl3 = match Self::check_run(env, first, va, L3C_ENTRIES, L3C_SIZE) {
            Run::Fits(d) => d.with(DescFlags::CONTIGUOUS),
            Run::Fails(why) => return self.st.l3c.failed(why),
        };
        // Remake the 16 entries with the Contiguous bit (pmap_update_strided).
        self.update_l3c(env, pm, first, newl3, va);
        self.st.l3c.promotions += 1;
        env.ev.promotions += 1;
        true
    }

    /// Tries to replace the L3 table covering `va` with one 2 MB block.
    /// Returns whether it did.
    pub(crate) fn promote_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        if !self.superpages_enabled() {
            return false;
        }
        let va = va & !(L2_SIZE - 1);
        let Some(l2_pa) = self.entry(env.mem, pm, va, L2_SHIFT) else { return false };
        let l2e = Desc::read(env.mem, l2_pa);
        if !l2e.is_table_or_page() {
            return false;
        }
        let ptp = PhysAddr(l2e.oa());
        if Desc::read(env.mem, ptp).has(DescFlags::SW_NO_PROMOTE) {
            return false;
        }
        let first = match Self::check_run(env, ptp, va, LN_ENTRIES, L2_SIZE) {
            Run::Fits(d) => d,
            Run::Fails(why) => return self.st.l2.failed(why),
        };
        let all_af = first.has(DescFlags::AF);
        let newl2 = first.without(DescFlags::CONTIGUOUS | DescFlags::TYPE);
        // Keep the L3 table as it is for a later demotion.
        self.pm_mut(pm).stash.insert(va, ptp.pfn(), all_af);
        // One PV entry for the block instead of 512 (pmap_pv_promote_l2).
        if newl2.has(DescFlags::SW_MANAGED) {
            self.pv.promote(env, PhysAddr(newl2.oa()).pfn(), pm, va, LN_ENTRIES as u32);
        }
        self.update_entry(env, pm, l2_pa, newl2, va, L2_SIZE);
        self.st.l2.promotions += 1;
        env.ev.promotions += 1;
        true
    }
}
