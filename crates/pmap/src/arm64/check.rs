//! The arm64 pmap's invariants (see mod.rs), checked by walking every
//! translation table.

use super::Arm64;
use crate::base::Check;
use crate::invariants;
use crate::radix::{Format, Tables};
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L0_SHIFT, L1_SHIFT, L1_SIZE, L2_SHIFT, L3C_ENTRIES, L3C_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES, VM_MAXUSER_ADDRESS};
use splab_hw::PhysAddr;
use splab_vm::pmap::PmapEnv;

impl Arm64 {
    /// The 512 descriptors of the table at `table`.
    fn table(env: &PmapEnv, table: u64) -> Vec<Desc> {
        (0..LN_ENTRIES).map(|i| Desc::read(env.mem, PhysAddr(table + i * 8))).collect()
    }

    fn check_ptp(env: &PmapEnv, table: u64, what: &str) -> Result<Vec<Desc>, String> {
        let entries = Self::table(env, table);
        invariants::page_table(env, table, entries.iter().filter(|e| e.valid()).count(), what)?;
        Ok(entries)
    }

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

impl Check for Arm64 {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        let mut pv_seen = 0u64;
        for (pm, p) in self.pmaps.iter() {
            let mut resident = 0u64;
            for (i0, e0) in Self::table(env, p.l0.addr().0).into_iter().enumerate().filter(|(_, e)| e.valid()) {
                let va0 = (i0 as u64) << L0_SHIFT;
                if va0 >= VM_MAXUSER_ADDRESS || !e0.is_table_or_page() {
                    return Err(format!("pmap {pm}: bad L0 entry {i0}: {e0:?}"));
                }
                let l1 = Self::check_ptp(env, e0.oa(), "L1 table")?;
                for (i1, e1) in l1.into_iter().enumerate().filter(|(_, e)| e.valid()) {
                    let va1 = va0 | ((i1 as u64) << L1_SHIFT);
                    if e1.is_block() {
                        if e1.has(DescFlags::SW_MANAGED) {
                            return Err(format!("pmap {pm}: managed 1GB block at {va1:#x}"));
                        }
                        resident += L1_SIZE / L3_SIZE;
                        continue;
                    }
                    let l2 = Self::check_ptp(env, e1.oa(), "L2 table")?;
                    for (i2, e2) in l2.into_iter().enumerate().filter(|(_, e)| e.valid()) {
                        let va2 = va1 | ((i2 as u64) << L2_SHIFT);
                        if e2.is_block() {
                            resident += LN_ENTRIES;
                            if e2.writable_clean() {
                                return Err(format!("pmap {pm}: 2MB block at {va2:#x} is writable but clean"));
                            }
                            if e2.has(DescFlags::SW_MANAGED) {
                                pv_seen += 1;
                                if !self.pv.contains_sp(e2.block_oa(L2_SHIFT), pm, va2) {
                                    return Err(format!("pmap {pm}: 2MB block at {va2:#x} has no PV entry"));
                                }
                            }
                            continue;
                        }
                        if p.stash.contains(va2) {
                            return Err(format!("pmap {pm}: stashed L3 table for {va2:#x} while a table is mapped"));
                        }
                        let l3 = Self::check_ptp(env, e2.oa(), "L3 table")?;
                        for (r, run) in l3.chunks(L3C_ENTRIES as usize).enumerate() {
                            Self::check_l3c_run(run, va2 | (r as u64 * L3C_SIZE)).map_err(|e| format!("pmap {pm}: {e}"))?;
                        }
                        for (i3, e3) in l3.into_iter().enumerate().filter(|(_, e)| e.valid()) {
                            let va = va2 | ((i3 as u64) << L3_SHIFT);
                            if !e3.is_table_or_page() {
                                return Err(format!("pmap {pm}: reserved L3 encoding at {va:#x}: {e3:?}"));
                            }
                            resident += 1;
                            let managed = e3.has(DescFlags::SW_MANAGED);
                            invariants::page_mapping(env, &self.pv, pm, va, PhysAddr(e3.oa()).pfn(), managed)?;
                            pv_seen += managed as u64;
                        }
                    }
                }
            }
            for (va2, s) in p.stash.iter() {
                let block = self.entry(env.mem, pm, va2, L2_SHIFT).is_some_and(|a| Desc::read(env.mem, a).is_block());
                invariants::stashed(env, pm, va2, s.ptp, block)?;
            }
            if resident != p.resident {
                return Err(format!("pmap {pm}: resident count {} but {resident} pages mapped", p.resident));
            }
        }
        if pv_seen != self.pv.live() {
            return Err(format!("{} PV entries in use but {pv_seen} managed mappings", self.pv.live()));
        }
        Ok(())
    }
}
