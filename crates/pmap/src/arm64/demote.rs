//! Demotion: a 64 KB run to 16 ordinary L3 entries (pmap_demote_l3c), a
//! 2 MB block to an L3 table (pmap_demote_l2_locked), and a 1 GB block to
//! an L2 table of 2 MB blocks (pmap_demote_l1).
//!
//! A demoted 2 MB block reuses the L3 table stashed at its promotion,
//! refilled only if some entry lacked AF when it was stashed or the
//! block's attributes changed since (pmap_fill_l3). A block mapped
//! directly has no stash: a table is allocated, and if none can be had,
//! or the block was never accessed, the mapping is removed instead
//! (pmap_demote_l2_abort), which is always safe because a later fault
//! recreates it. The new L3 entries carry the Contiguous bit, as
//! FreeBSD's do: a demoted block becomes 32 runs of 64 KB, and only the
//! run that must change is demoted further.

use super::Arm64;
use crate::ptpage;
use crate::shootdown::Invalidate;
use crate::radix::{self, Format, Tables};
use splab_hw::arm64::pte::{Desc, DescFlags, ATTR_MASK};
use splab_hw::arm64::{L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3C_SIZE, L3_SIZE, LN_ENTRIES};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::pmap::{PmapEnv, PmapError, PmapId};

impl Arm64 {
    /// Breaks the 64 KB run holding the L3 entry at `l3_pa` into 16
    /// independent entries. The hardware may have set AF or cleared AP[2]
    /// in any one entry of the run, so the run's accessed and dirty state
    /// is given to all 16. The entries are made invalid and the range
    /// invalidated (if any was accessed, TLBs may hold the 64 KB entry)
    /// before they are rewritten.
    pub(crate) fn demote_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, l3_pa: PhysAddr, va: u64) {
        let start = l3_pa.0 & !(L3C_ENTRIES * 8 - 1);
        let mut dirty = false;
        let mut nbits = DescFlags::VALID;
        for k in 0..L3C_ENTRIES {
            let pa = PhysAddr(start + k * 8);
            let e = Desc::read(env.mem, pa);
            debug_assert!(e.has(DescFlags::CONTIGUOUS) && !e.writable_clean(), "demote_l3c: {e:?} at {pa:?}");
            radix::wr(env.mem, pa, e.without(DescFlags::CONTIGUOUS | DescFlags::VALID));
            dirty |= Self::dirty(e);
            nbits |= e.flags() & DescFlags::AF;
        }
        let va = va & !(L3C_SIZE - 1);
        let inv = Invalidate::new(va, L3C_SIZE);
        if nbits.contains(DescFlags::AF) {
            self.invalidate_range(env, pm, inv, true);
        } else {
            // No entry of the run was ever accessed: no TLB holds it.
            inv.unneeded();
        }
        for k in 0..L3C_ENTRIES {
            let pa = PhysAddr(start + k * 8);
            let mut e = Desc::read(env.mem, pa).with(nbits);
            if dirty {
                e = e.without(DescFlags::AP_RO);
            }
            radix::wr(env.mem, pa, e);
        }
        self.st.l3c.demotions += 1;
        env.ev.demotions += 1;
    }

    /// Removes a 2 MB block in place of demoting it (pmap_demote_l2_abort).
    fn demote_l2_abort(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let mut free = Vec::new();
        self.remove_l2(env, pm, va, &mut free);
        ptpage::free_all(env, free);
        self.st.l2.aborts += 1;
        false
    }

    /// Demotes the 2 MB block covering `va`. Returns false if the mapping
    /// was removed instead.
    pub(crate) fn demote_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let va = va & !(L2_SIZE - 1);
        let l2_pa = self.entry(env.mem, pm, va, L2_SHIFT).expect("demote_l2: no L2 table");
        let old = Desc::read(env.mem, l2_pa);
        debug_assert!(old.is_block(), "demote_l2: not a block: {old:?}");
        debug_assert!(!old.writable_clean(), "demote_l2: writable but clean block");
        if !old.has(DescFlags::AF) {
            return self.demote_l2_abort(env, pm, va);
        }
        let (ml3, stashed_whole) = match self.pm_mut(pm).stash.take(va) {
            Some(s) => (s.ptp, s.valid),
            None => match ptpage::alloc(env) {
                Some(p) => (p, false),
                None => return self.demote_l2_abort(env, pm, va),
            },
        };
        let table = ml3.addr().0;
        let newl3 = Desc(old.0 | DescFlags::TYPE.bits() | DescFlags::CONTIGUOUS.bits());
        let first = Desc::read(env.mem, PhysAddr(table));
        if stashed_whole && first.0 & DescFlags::PROMOTE == newl3.0 & DescFlags::PROMOTE && first.oa() == newl3.oa() {
            self.st.l2.ptp_reused += 1;
        } else {
            // pmap_fill_l3.
            for k in 0..LN_ENTRIES {
                radix::wr(env.mem, PhysAddr(table + k * 8), Desc(newl3.0 + k * L3_SIZE));
            }
        }
        env.phys.pages.get_mut(ml3).ref_count = LN_ENTRIES as u16;
        // One TLBI suffices for the one 2 MB TLB entry.
        self.update_entry(env, pm, l2_pa, Desc::table(table), va, L3_SIZE);
        // The block's PV entry becomes 512 (pmap_pv_demote_l2).
        if old.has(DescFlags::SW_MANAGED) {
            let frame = old.block_oa(L2_SHIFT);
            self.pv.del_sp(frame, pm, va);
            let m0 = PhysAddr(frame).pfn();
            for k in 0..LN_ENTRIES {
                self.pv.add(env, Pfn(m0.0 + k as u32), pm, va + k * L3_SIZE);
            }
        }
        self.st.l2.demotions += 1;
        env.ev.demotions += 1;
        true
    }

    /// Demotes a 1 GB block to 512 2 MB blocks. Unlike FreeBSD, the new
    /// blocks do not get the Contiguous bit (32 MB L2C runs are not
    /// modelled).
    pub(crate) fn demote_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<(), PmapError> {
        let va = va & !(L1_SIZE - 1);
        let l1_pa = self.entry(env.mem, pm, va, L1_SHIFT).expect("demote_l1: no L1 table");
        let old = Desc::read(env.mem, l1_pa);
        debug_assert!(old.is_block() && !old.has(DescFlags::SW_MANAGED));
        let l2 = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        env.phys.pages.get_mut(l2).ref_count = LN_ENTRIES as u16;
        let attrs = old.0 & ATTR_MASK;
        let frame = old.block_oa(L1_SHIFT);
        for k in 0..LN_ENTRIES {
            radix::wr(env.mem, PhysAddr(l2.addr().0 + k * 8), Desc(attrs | (frame + k * L2_SIZE)));
        }
        self.update_entry(env, pm, l1_pa, Desc::table(l2.addr().0), va, L3_SIZE);
        self.st.l1_demotions += 1;
        env.ev.demotions += 1;
        Ok(())
    }
}
