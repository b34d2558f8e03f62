//! Demotion of a 2 MB mapping to 512 4 KB mappings (pmap_demote_l2_locked),
//! and of a 1 GB mapping to 512 2 MB mappings (as amd64's
//! pmap_demote_pdpe; FreeBSD's riscv pmap makes no user 1 GB mappings to
//! demote).
//!
//! A 2 MB mapping that has never been accessed is destroyed rather than
//! demoted. Otherwise the L3 table stashed at promotion is reused, refilled
//! only if the mapping's attributes changed since; a mapping made directly
//! has no stash, so a page is allocated, and if none can be had the 2 MB
//! mapping is removed instead, which is always safe because a later fault
//! recreates what is needed.

use super::Riscv;
use crate::ptpage;
use crate::pte;
use crate::radix::{self, Format, Tables};
use splab_hw::riscv::pte::{Pte, PteFlags, PPN_SHIFT};
use splab_hw::riscv::{L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, LN_ENTRIES};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapError, PmapId};

impl Riscv {
    /// Fills the L3 table at `tpa` with the 512 entries that map what the
    /// 2 MB leaf `l2e` maps.
    fn fill_l3(env: &mut PmapEnv, tpa: u64, l2e: Pte) {
        for i in 0..LN_ENTRIES {
            radix::wr(env.mem, PhysAddr(tpa + i * 8), Pte(l2e.0 + (i << PPN_SHIFT)));
        }
    }

    /// Demotes the 2 MB mapping covering `va`. Returns false if the mapping
    /// was removed instead.
    pub(crate) fn demote_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let va2m = va & !(L2_SIZE - 1);
        let l2_pa = self.entry(env.mem, pm, va2m, L2_SHIFT).expect("demote: no L2 table");
        let old = Pte::read(env.mem, l2_pa);
        debug_assert!(old.is_leaf(), "demote: not a 2MB mapping");
        debug_assert!(!old.has(PteFlags::W) || old.has(PteFlags::D), "demote: a writable 2MB mapping without D");
        if !old.has(PteFlags::A) {
            return pte::demote_abort(self, env, pm, va2m);
        }
        let (ptp, valid) = match self.pm_mut(pm).stash.take(va2m) {
            Some(s) => (s.ptp, s.valid),
            None => match ptpage::alloc(env) {
                Some(p) => (p, false),
                None => return pte::demote_abort(self, env, pm, va2m),
            },
        };
        env.phys.pages.get_mut(ptp).ref_count = LN_ENTRIES as u16;
        let tpa = ptp.addr().0;
        let promote = PteFlags::PROMOTE.bits();
        if valid && Pte::read(env.mem, PhysAddr(tpa)).0 & promote == old.0 & promote {
            self.st.l2.ptp_reused += 1;
        } else {
            Self::fill_l3(env, tpa, old);
        }
        // No fence: a cached 2 MB translation maps the same frames with the
        // same bits as the new 4 KB entries.
        radix::update(env.mem, l2_pa, Pte::table(tpa), va2m, L2_SIZE).unneeded();
        // The superpage's PV entry becomes 512 (pmap_pv_demote_l2).
        if old.has(PteFlags::SW_MANAGED) {
            self.pv.demote(env, PhysAddr(old.frame()).pfn(), pm, va2m, LN_ENTRIES as u32);
        }
        self.st.l2.demotions += 1;
        env.ev.demotions += 1;
        true
    }

    /// Demotes the 1 GB mapping covering `va` to 512 2 MB mappings. Fails
    /// only for want of a page for the L2 table.
    pub(crate) fn demote_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<(), PmapError> {
        let va1g = va & !(L1_SIZE - 1);
        let l1_pa = self.entry(env.mem, pm, va1g, L1_SHIFT).expect("demote: no L1 table");
        let old = Pte::read(env.mem, l1_pa);
        debug_assert!(old.is_leaf(), "demote: not a 1GB mapping");
        let t = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        env.phys.pages.get_mut(t).ref_count = LN_ENTRIES as u16;
        for i in 0..LN_ENTRIES {
            let e = Pte(old.0 + ((i * (L2_SIZE >> 12)) << PPN_SHIFT));
            radix::wr(env.mem, PhysAddr(t.addr().0 + i * 8), e);
        }
        // No fence, as for a 2 MB demotion.
        radix::update(env.mem, l1_pa, Pte::table(t.addr().0), va1g, L1_SIZE).unneeded();
        self.st.l1_demotions += 1;
        env.ev.demotions += 1;
        Ok(())
    }
}
