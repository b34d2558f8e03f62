//! Demotion of a 2 MB mapping to 512 4 KB mappings (pmap_demote_pde), and
//! of a 1 GB mapping to 512 2 MB mappings (pmap_demote_pdpe).
//!
//! The page-table page stashed at promotion is reused, refilled only if its
//! entries no longer match the superpage (protection or dirty state changed
//! since). A superpage mapped directly has no stash: a page-table page is
//! allocated, and if none can be had the 2 MB mapping is removed instead,
//! which is always safe because a later fault can recreate it.

use super::{table_flags, Amd64};
use crate::ptpage;
use crate::pte;
use crate::radix::{self, Format, Tables};
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{NPTEPG, PAGE_2M, PDPSHIFT};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapError, PmapId};

impl Amd64 {
    /// Demotes the 2 MB mapping covering `va`. Returns false if the mapping
    /// was removed instead.
    pub(crate) fn demote_pde(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let va2m = va & !(PAGE_2M - 1);
        let pde_pa = self.pde_pa(env.mem, pm, va2m).expect("demote: no page directory");
        let old = Pte::read(env.mem, pde_pa);
        debug_assert!(old.valid() && old.has(PteFlags::PS), "demote: not a 2MB mapping");
        let (ptp, valid) = match self.pm_mut(pm).stash.take(va2m) {
            Some(s) => (s.ptp, s.valid),
            None => {
                // A 2 MB mapping that has never been accessed is simply
                // destroyed; otherwise a page-table page is needed.
                if !old.has(PteFlags::A) {
                    return pte::demote_abort(self, env, pm, va2m);
                }
                match ptpage::alloc(env) {
                    Some(p) => (p, false),
                    None => return pte::demote_abort(self, env, pm, va2m),
                }
            }
        };
        env.phys.pages.get_mut(ptp).ref_count = NPTEPG as u16;
        let mut flags = old.flags() - PteFlags::PS - PteFlags::SW_PROMOTED - PteFlags::PAT_LARGE;
        if old.has(PteFlags::PAT_LARGE) {
            flags |= PteFlags::PAT_4K;
        }
        let frame = old.frame_2m();
        let first = Pte::new(frame, flags);
        let tpa = ptp.addr().0;
        if valid && Pte::read(env.mem, PhysAddr(tpa)) == first {
            self.st.pde.ptp_reused += 1;
        } else {
            // pmap_fill_ptp.
            for i in 0..NPTEPG {
                radix::wr(env.mem, PhysAddr(tpa + i * 8), Pte(first.0 + i * 4096));
            }
        }
        let newpde = Pte::new(tpa, (table_flags() - PteFlags::US) | (old.flags() & PteFlags::US));
        // No invalidation: a cached 2 MB translation maps the same frames
        // with the same attributes as the new 4 KB entries.
        radix::update(env.mem, pde_pa, newpde, va2m, PAGE_2M).unneeded();
        // The superpage's PV entry becomes 512 (pmap_pv_demote_pde).
        if old.has(PteFlags::SW_MANAGED) {
            self.pv.demote(env, PhysAddr(frame).pfn(), pm, va2m, NPTEPG as u32);
        }
        self.st.pde.demotions += 1;
        env.ev.demotions += 1;
        true
    }

    /// Demotes a 1 GB mapping to 512 2 MB mappings.
    pub(crate) fn demote_pdpe(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<(), PmapError> {
        let va1g = va & !((1u64 << PDPSHIFT) - 1);
        let pdpe_pa = self.entry(env.mem, pm, va1g, PDPSHIFT).expect("demote: no PDPT");
        let old = Pte::read(env.mem, pdpe_pa);
        debug_assert!(old.has(PteFlags::PS));
        let pd = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        env.phys.pages.get_mut(pd).ref_count = NPTEPG as u16;
        let frame = old.frame_1g();
        let flags = old.flags();
        for i in 0..NPTEPG {
            radix::wr(env.mem, PhysAddr(pd.addr().0 + i * 8), Pte::new(frame + i * PAGE_2M, flags));
        }
        // No invalidation, as for a 2 MB demotion.
        radix::update(env.mem, pdpe_pa, Pte::new(pd.addr().0, table_flags()), va1g, 1 << PDPSHIFT).unneeded();
        self.st.pdpe_demotions += 1;
        env.ev.demotions += 1;
        Ok(())
    }
}
