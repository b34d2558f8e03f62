//! The amd64 pmap's invariants (see mod.rs): what its leaves must be. The
//! walk over every table, and the checks every radix pmap shares, are
//! `radix::CheckTables`'s.

use super::Amd64;
use crate::invariants::{self, Seen};
use crate::ptpage::Stashes;
use crate::radix::CheckTables;
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{NPTEPG, PAGE_SHIFT, PDPSHIFT, PDRSHIFT};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

impl CheckTables for Amd64 {
    fn spaces(&self) -> Vec<(PmapId, u64, &Stashes<PDRSHIFT>)> {
        self.pmaps.iter().map(|(pm, p)| (pm, p.resident, &p.stash)).collect()
    }

    /// 1 GB pages are unmanaged; a managed 2 MB page is on its frame's PV
    /// list; a 4 KB page maps a frame in use and, if managed, is on its
    /// page's PV list.
    fn check_leaf(&self, env: &PmapEnv, pm: PmapId, va: u64, shift: u32, e: Pte, seen: &mut Seen) -> Result<(), String> {
        let managed = e.has(PteFlags::SW_MANAGED);
        match shift {
            PDPSHIFT => seen.resident += NPTEPG * NPTEPG,
            PDRSHIFT => {
                seen.resident += NPTEPG;
                if managed {
                    seen.pv += 1;
                    if !self.pv.contains_sp(e.frame_2m(), pm, va) {
                        return Err(format!("pmap {pm}: 2MB mapping at {va:#x} has no PV entry"));
                    }
                }
            }
            PAGE_SHIFT => {
                seen.resident += 1;
                invariants::page_mapping(env, &self.pv, pm, va, PhysAddr(e.frame()).pfn(), managed)?;
                seen.pv += managed as u64;
            }
            _ => return Err(format!("pmap {pm}: leaf at shift {shift} for {va:#x}: {e:?}")),
        }
        Ok(())
    }
}
