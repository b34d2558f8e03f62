//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced and pmap_clear_modify, and
//! dropping every mapping of a reservation at once. The state is FOR and
//! FOW, emulated through fault-on traps (fault.rs); a block is one unit
//! for both, as the TB holds one entry for it.

use super::{block_size, is_dirty, Alpha};
use crate::base::{RefMod, Remove};
use crate::ptpage;
use crate::refbits::TS_REFERENCED_MAX;
use splab_hw::alpha::{PteFlags, PAGE_SIZE};
use splab_hw::Pfn;
use splab_vm::pmap::PmapEnv;

impl RefMod for Alpha {
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.pv.list(env, m).into_iter().any(|(pm, va)| self.find(env.mem, pm, va).is_some_and(|(_, e)| is_dirty(e)))
    }

    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.pv.list(env, m).into_iter().any(|(pm, va)| self.find(env.mem, pm, va).is_some_and(|(_, e)| !e.has(PteFlags::FOR)))
    }

    /// pmap_ts_referenced: counts the mappings of `m` with FOR clear and
    /// sets FOR again in their blocks, as FreeBSD's alpha pmap does with
    /// pmap_changebit (a block is referenced as a whole, as the TB sees
    /// it), up to PMAP_TS_REFERENCED_MAX.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut n = 0;
        for (pm, va) in self.pv.list(env, m) {
            let Some((_, e)) = self.find(env.mem, pm, va) else { continue };
            if e.has(PteFlags::FOR) {
                continue;
            }
            if is_dirty(e) {
                ptpage::dirty(env, m);
            }
            let (_, p0, cnt) = self.block_entries(env, pm, va, e.gh().value());
            let inv = Self::rewrite_block(env, p0, cnt, va, |x| x.with(PteFlags::FOR));
            self.invalidate(env, pm, inv);
            n += 1;
            if n >= TS_REFERENCED_MAX {
                break;
            }
        }
        n
    }

    /// pmap_clear_modify: every writable mapping of `m` that records a
    /// write gets FOW back; a block is demoted first, so that the other
    /// pages of it stay modified.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            let Some((_, e)) = self.find(env.mem, pm, va) else { continue };
            if !is_dirty(e) {
                continue;
            }
            self.demote(env, pm, va);
            let (p, e) = self.find(env.mem, pm, va).expect("still mapped");
            let inv = Self::update(env.mem, p, e.with(PteFlags::FOW), va, PAGE_SIZE);
            self.invalidate(env, pm, inv);
        }
    }

    /// Every mapping of the pages of a fully populated reservation goes,
    /// blocks whole (no demotion): each block lies inside the reservation.
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let n = env.phys.reserv.npages();
        for i in 0..n {
            for (pm, va) in self.pv.list(env, Pfn(m.0 + i)) {
                let Some((_, e)) = self.find(env.mem, pm, va) else { continue };
                let size = block_size(e.gh().value());
                let base = va & !(size - 1);
                self.remove(env, pm, base, base + size);
            }
        }
    }
}
