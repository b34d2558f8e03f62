//! The arm64 pmap's invariants (see mod.rs), checked by walking every
//! translation table.

use super::Arm64;
use crate::invariants::{self, Seen};
use crate::ptpage::Stashes;
use crate::radix::CheckTables;
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L1_SHIFT, L1_SIZE, L2_SHIFT, L3C_ENTRIES, L3C_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Arm64 {
    /// A 64 KB run whose entries have the Contiguous bit must be whole,
    /// in order, alike but for AF, and not writable but clean.
    fn check_l3c_run(run: &[Desc], va: u64) -> Result<(), String> {
        if !run.iter().any(|e| e.has(DescFlags::CONTIGUOUS)) {
            return Ok(());
        }
        let first = run[0];
        let bad = |why: &str| Err(format!("L3C run at {va:#x}: {why} ({first:?})"));
        if !first.is_table_or_page() || first.oa() & (L3C_SIZE - 1) != 0 {
            return bad("first entry invalid or misaligned");
        }
        for (k, e) in run.iter().enumerate() {
            if !e.is_table_or_page() || !e.has(DescFlags::CONTIGUOUS) || e.oa() != first.oa() + k as u64 * L3_SIZE {
                return bad(&format!("entry {k} is missing, not contiguous or out of order: {e:?}"));
            }
            if e.0 & DescFlags::PROMOTE != first.0 & DescFlags::PROMOTE {
                return bad(&format!("entry {k} has other attributes: {e:?}"));
            }
            if e.writable_clean() {
                return bad(&format!("entry {k} is writable but clean"));
            }
        }
        Ok(())
    }

}

impl CheckTables for Arm64 {
    fn spaces(&self) -> Vec<(PmapId, u64, &Stashes<L2_SHIFT>)> {
        self.pmaps.iter().map(|(pm, p)| (pm, p.resident, &p.stash)).collect()
    }

    /// L1 blocks are unmanaged; an L2 block is never writable but clean
    /// and, if managed, is on its frame's PV list; an L3 entry is a page
    /// (not a reserved encoding) mapping a frame in use and, if managed,
    /// on its page's PV list. There are no L0 blocks.
    fn check_leaf(&self, env: &PmapEnv, pm: PmapId, va: u64, shift: u32, e: Desc, seen: &mut Seen) -> Result<(), String> {
        let managed = e.has(DescFlags::SW_MANAGED);
        match shift {
            L1_SHIFT if managed => return Err(format!("pmap {pm}: managed 1GB block at {va:#x}")),
            L1_SHIFT => seen.resident += L1_SIZE / L3_SIZE,
            L2_SHIFT => {
                seen.resident += LN_ENTRIES;
                if e.writable_clean() {
                    return Err(format!("pmap {pm}: 2MB block at {va:#x} is writable but clean"));
                }
                if managed {
                    seen.pv += 1;
                    if !self.pv.contains_sp(e.block_oa(L2_SHIFT), pm, va) {
                        return Err(format!("pmap {pm}: 2MB block at {va:#x} has no PV entry"));
                    }
                }
            }
            L3_SHIFT if !e.is_table_or_page() => return Err(format!("pmap {pm}: reserved L3 encoding at {va:#x}: {e:?}")),
            L3_SHIFT => {
                seen.resident += 1;
                invariants::page_mapping(env, &self.pv, pm, va, PhysAddr(e.oa()).pfn(), managed)?;
                seen.pv += managed as u64;
            }
            _ => return Err(format!("pmap {pm}: bad entry at shift {shift} for {va:#x}: {e:?}")),
        }
        Ok(())
    }

    /// Every 64 KB run of the table is whole or not a run at all.
    fn check_last_table(&self, pm: PmapId, va: u64, entries: &[Desc]) -> Result<(), String> {
        for (r, run) in entries.chunks(L3C_ENTRIES as usize).enumerate() {
            Self::check_l3c_run(run, va | (r as u64 * L3C_SIZE)).map_err(|e| format!("pmap {pm}: {e}"))?;
        }
        Ok(())
    }
}
