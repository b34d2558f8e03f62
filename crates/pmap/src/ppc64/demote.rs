//! Demotion of a 16 MB superpage to 4096 4 KB mappings
//! (moea64_sp_demote, moea64_sp_demote_aligned).
//!
//! The PVOs are already there, one per page: demotion clears their large
//! flag and rewrites their 4096 HPT entries as 4 KB ones, so it needs no
//! memory and cannot fail. A bit set in any entry of the superpage counts
//! for all of its pages.

use super::{Ppc64, SP_MASK};
use splab_vm::pmap::{PmapEnv, PmapId};

impl Ppc64 {
    /// Demotes the superpage holding `va` in `pm`.
    pub(crate) fn sp_demote(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let sva = va & !SP_MASK;
        let first = *self.pvo(pm, sva).expect("superpage PVO");
        debug_assert!(first.large(), "demote: {sva:#x} is not a superpage");
        for v in self.pvos_in(pm, sva, sva + super::SP_SIZE) {
            self.pvo_mut(pm, v).flags &= !super::pvof::LARGE;
        }
        let bits = self.sp_replace(env, pm, sva);
        self.sp_refchg_process(env, pm, sva, bits, first.prot);
        self.st.sp.demotions += 1;
        env.ev.demotions += 1;
    }
}
