//! The reference and modify emulation (FreeBSD's alpha
//! pmap_emulate_reference): a fault-on-read or fault-on-write trap on a
//! mapping that permits the access clears FOR (and FOW) in every entry of
//! its block, which the TB holds as one entry.

use super::Alpha;
use splab_hw::alpha::PteFlags;
use splab_vm::pmap::{prot, PmapEnv, PmapId, Prot};

impl Alpha {
    /// pmap_emulate_reference: a fault-on-read or fault-on-write trap on a
    /// valid entry that permits the access clears FOR (and FOW on a write)
    /// in every entry of its block. Returns whether the trap was this.
    pub(crate) fn emulate_reference(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        let Some((_, e)) = self.find(env.mem, pm, va) else { return false };
        let write = access & prot::WRITE != 0;
        let clear = if write {
            if !e.has(PteFlags::UWE) || !e.any(PteFlags::FOR | PteFlags::FOW) {
                return false;
            }
            self.st.fow_faults += 1;
            PteFlags::FOR | PteFlags::FOW
        } else {
            if access & prot::READ == 0 || !e.has(PteFlags::FOR) {
                return false;
            }
            self.st.for_faults += 1;
            PteFlags::FOR
        };
        let (_, p0, n) = self.block_entries(env, pm, va, e.gh().value());
        let inv = Self::rewrite_block(env, p0, n, va, |x| x.without(clear));
        self.invalidate(env, pm, inv);
        true
    }
}
