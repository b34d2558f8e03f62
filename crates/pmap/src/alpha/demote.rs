//! Demotion one level at a time (Navarro et al. section 4: demotion
//! "speculatively ... one level at a time"): in place, rewriting the GH
//! field of the block's entries, so it needs no memory and never fails.

use super::{block_size, Alpha};
use splab_hw::alpha::Gh;
use crate::shootdown::Batch;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Alpha {
    /// Demotes the blocks holding `va` one level at a time until `va`'s
    /// entry is a single page: at each level all entries of the block take
    /// the next smaller GH, so the sibling blocks stay superpages. In
    /// place: never needs memory, never fails.
    pub(crate) fn demote(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let Some((p, e)) = self.find(env.mem, pm, va) else { return };
        let mut g = e.gh().value();
        if g == 0 {
            return;
        }
        let mut batch = Batch::new();
        while g > 0 {
            let (_, p0, n) = self.block_entries(env, pm, va, g);
            batch.add(Self::rewrite_block(env, p0, n, va, |e| e.with_gh(Gh::new(g - 1))));
            self.st.gh[g as usize].demotions += 1;
            env.ev.demotions += 1;
            g -= 1;
        }
        debug_assert_eq!(Self::rd(env.mem, p).gh(), Gh::G8K);
        // The TB held one entry for the largest block: TBIS of any of its
        // addresses removes it.
        self.invalidate_block(env, pm, &mut batch, va);
    }

    /// Demotes so that [sva, eva) covers whole blocks only: the blocks
    /// that straddle either end are demoted (pmap_demote on clipping).
    pub(crate) fn demote_ends(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        for a in [sva, eva] {
            if let Some((_, e)) = self.find(env.mem, pm, a) {
                let size = block_size(e.gh().value());
                if a & (size - 1) != 0 {
                    self.demote(env, pm, a);
                }
            }
        }
    }
}
