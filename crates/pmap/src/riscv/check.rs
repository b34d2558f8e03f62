//! The riscv pmap's invariants (see mod.rs), checked by walking every page
//! table of every address space.

use super::Riscv;
use crate::radix::{Format, Tables};
use crate::base::Check;
use splab_hw::riscv::pte::{Pte, PteFlags};
use splab_hw::riscv::{L1_SHIFT, L2_SHIFT, L3_SHIFT, LN_ENTRIES};
use splab_hw::PhysAddr;
use splab_vm::page::pflags;
use splab_vm::pmap::{PmapEnv, PmapId};

/// What the walk has seen so far.
#[derive(Default)]
struct Seen {
    resident: u64,
    pv: u64,
}

impl Riscv {
    fn check_ptp(env: &PmapEnv, table: u64, valid: usize, what: &str) -> Result<(), String> {
        let m = env.phys.pages.get(PhysAddr(table).pfn());
        if !m.has(pflags::PTPAGE) || !m.has(pflags::INUSE) {
            return Err(format!("{what} at {table:#x} is not an in-use page-table page"));
        }
        if m.ref_count as usize != valid {
            return Err(format!("{what} at {table:#x}: ref_count {} but {valid} valid entries", m.ref_count));
        }
        Ok(())
    }

    /// Checks one leaf mapping `va` at `shift`.
    fn check_leaf(&self, env: &PmapEnv, pm: PmapId, va: u64, shift: u32, e: Pte, seen: &mut Seen) -> Result<(), String> {
        let frame = e.frame();
        if !e.has(PteFlags::R | PteFlags::U) || e.reserved() {
            return Err(format!("pmap {pm}: leaf for {va:#x} is not a readable user leaf: {e:?}"));
        }
        if !frame.is_multiple_of(1 << shift) {
            return Err(format!("pmap {pm}: leaf for {va:#x} maps a misaligned frame: {e:?}"));
        }
        let m = PhysAddr(frame).pfn();
        let pg = env.phys.pages.get(m);
        if !pg.has(pflags::INUSE) || env.phys.buddy.is_free(m) {
            return Err(format!("pmap {pm}: {va:#x} maps free frame {m:?}"));
        }
        seen.resident += 1 << (shift - L3_SHIFT);
        match shift {
            L3_SHIFT if e.has(PteFlags::SW_MANAGED) => {
                seen.pv += 1;
                if !self.pv.contains(env, m, pm, va) {
                    return Err(format!("pmap {pm}: {va:#x} -> {m:?} has no PV entry"));
                }
            }
            L2_SHIFT => {
                if e.has(PteFlags::W) && !e.has(PteFlags::D) {
                    return Err(format!("pmap {pm}: 2MB mapping at {va:#x} is writable but clean"));
                }
                if e.has(PteFlags::SW_MANAGED) {
                    seen.pv += 1;
                    if !self.pv.contains_sp(frame, pm, va) {
                        return Err(format!("pmap {pm}: 2MB mapping at {va:#x} has no PV entry"));
                    }
                }
            }
            L1_SHIFT if e.has(PteFlags::SW_MANAGED) => return Err(format!("pmap {pm}: managed 1GB mapping at {va:#x}")),
            L1_SHIFT | L3_SHIFT => {}
            _ => return Err(format!("pmap {pm}: leaf at shift {shift} for {va:#x}")),
        }
        Ok(())
    }

    /// Checks the table at `table` (entries mapping 2^shifts[depth] bytes,
    /// the first at `base`) and everything below it.
    fn check_table(&self, env: &PmapEnv, pm: PmapId, table: u64, depth: usize, base: u64, seen: &mut Seen) -> Result<(), String> {
        let shift = self.mode.shifts()[depth];
        let mut valid = 0;
        for i in 0..LN_ENTRIES {
            let e = Pte::read(env.mem, PhysAddr(table + i * 8));
            if !e.valid() {
                continue;
            }
            valid += 1;
            let va = base | (i << shift);
            if depth == 0 && va >= self.mode.max_user_address() {
                return Err(format!("pmap {pm}: root entry {i} is beyond the user address space"));
            }
            if e.is_leaf() {
                self.check_leaf(env, pm, va, shift, e, seen)?;
                continue;
            }
            if e != Pte::table(e.frame()) {
                return Err(format!("pmap {pm}: pointer for {va:#x} has bits other than V: {e:?}"));
            }
            if shift == L3_SHIFT {
                return Err(format!("pmap {pm}: a pointer in an L3 table at {va:#x}"));
            }
            if shift == L2_SHIFT && self.pm(pm).stash.contains(va) {
                return Err(format!("pmap {pm}: stashed L3 table for {va:#x} while a table is mapped"));
            }
            self.check_table(env, pm, e.frame(), depth + 1, va, seen)?;
        }
        if depth > 0 {
            Self::check_ptp(env, table, valid, "page-table page")?;
        }
        Ok(())
    }

}

impl Check for Riscv {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        let mut pv_seen = 0u64;
        for (pm, p) in self.pmaps.iter() {
            let mut seen = Seen::default();
            self.check_table(env, pm, p.root.addr().0, 0, 0, &mut seen)?;
            for (va, s) in p.stash.iter() {
                if self.find_leaf(env.mem, pm, va).is_none_or(|(_, shift, _)| shift != L2_SHIFT) {
                    return Err(format!("pmap {pm}: stash for {va:#x} but no 2MB mapping there"));
                }
                if !env.phys.pages.get(s.ptp).has(pflags::PTPAGE) {
                    return Err(format!("pmap {pm}: stashed page {:?} is not a page-table page", s.ptp));
                }
            }
            if seen.resident != p.resident {
                return Err(format!("pmap {pm}: resident count {} but {} pages mapped", p.resident, seen.resident));
            }
            pv_seen += seen.pv;
        }
        if pv_seen != self.pv.live() {
            return Err(format!("{} PV entries in use but {pv_seen} managed mappings", self.pv.live()));
        }
        Ok(())
    }
}
