//! The riscv pmap's invariants (see mod.rs): what its pointers and leaves
//! must be. The walk over every table, and the checks every radix pmap
//! shares, are `radix::CheckTables`'s.

use super::Riscv;
use crate::invariants::{self, Seen};
use crate::ptpage::Stashes;
use crate::radix::CheckTables;
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L1_SHIFT, L2_SHIFT, L3_SHIFT};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

impl CheckTables for Riscv {
    fn spaces(&self) -> Vec<(PmapId, u64, &Stashes<L2_SHIFT>)> {
        self.pmaps.iter().map(|(pm, p)| (pm, p.resident, &p.stash)).collect()
    }

    /// A readable user leaf mapping a frame in use, aligned to its size;
    /// 4 KB and 2 MB managed leaves on their PV lists, 2 MB leaves never
    /// writable but clean, 1 GB leaves unmanaged.
    fn check_leaf(&self, env: &PmapEnv, pm: PmapId, va: u64, shift: u32, e: Pte, seen: &mut Seen) -> Result<(), String> {
        let frame = e.frame();
        if !e.has(PteFlags::R | PteFlags::U) || e.reserved() {
            return Err(format!("pmap {pm}: leaf for {va:#x} is not a readable user leaf: {e:?}"));
        }
        if !frame.is_multiple_of(1 << shift) {
            return Err(format!("pmap {pm}: leaf for {va:#x} maps a misaligned frame: {e:?}"));
        }
        let managed = e.has(PteFlags::SW_MANAGED);
        invariants::page_mapping(env, &self.pv, pm, va, PhysAddr(frame).pfn(), managed && shift == L3_SHIFT)?;
        seen.resident += 1 << (shift - L3_SHIFT);
        match shift {
            L3_SHIFT => seen.pv += managed as u64,
            L2_SHIFT => {
                if e.has(PteFlags::W) && !e.has(PteFlags::D) {
                    return Err(format!("pmap {pm}: 2MB mapping at {va:#x} is writable but clean"));
                }
                if managed {
                    seen.pv += 1;
                    if !self.pv.contains_sp(frame, pm, va) {
                        return Err(format!("pmap {pm}: 2MB mapping at {va:#x} has no PV entry"));
                    }
                }
            }
            L1_SHIFT if managed => return Err(format!("pmap {pm}: managed 1GB mapping at {va:#x}")),
            L1_SHIFT => {}
            _ => return Err(format!("pmap {pm}: leaf at shift {shift} for {va:#x}")),
        }
        Ok(())
    }

    /// A pointer is V alone, and no last-level entry is one.
    fn check_pointer(&self, pm: PmapId, va: u64, e: Pte) -> Result<(), String> {
        if e != Pte::table(e.frame()) {
            return Err(format!("pmap {pm}: pointer for {va:#x} has bits other than V: {e:?}"));
        }
        Ok(())
    }
}
