//! The amd64 pmap's invariants, checked by walking every page table.

use crate::radix::Format;
use super::Amd64;
use crate::base::Check;
use splab_hw::amd64::pte::{Pte, PteFlags};
use splab_hw::amd64::{NPTEPG, PDPSHIFT, PDRSHIFT, PML4SHIFT, VM_MAXUSER_ADDRESS};
use splab_hw::PhysAddr;
use splab_vm::page::pflags;
use splab_vm::pmap::PmapEnv;

impl Amd64 {
    fn table_entries(env: &PmapEnv, table: u64) -> Vec<(u64, Pte)> {
        (0..NPTEPG).map(|i| (i, Pte::read(env.mem, PhysAddr(table + i * 8)))).collect()
    }

    fn check_ptp(env: &PmapEnv, table: u64, what: &str) -> Result<(), String> {
        let m = env.phys.pages.get(PhysAddr(table).pfn());
        let valid = Self::table_entries(env, table).into_iter().filter(|(_, e)| e.valid()).count();
        if !m.has(pflags::PTPAGE) || !m.has(pflags::INUSE) {
            return Err(format!("{what} at {table:#x} is not an in-use page-table page"));
        }
        if m.ref_count as usize != valid {
            return Err(format!("{what} at {table:#x}: ref_count {} but {valid} valid entries", m.ref_count));
        }
        Ok(())
    }

}

impl Check for Amd64 {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        let mut pv_seen = 0u64;
        for (pm, p) in self.pmaps.iter() {
            let mut resident = 0u64;
            for (i4, e4) in Self::table_entries(env, p.pml4.addr().0) {
                if !e4.valid() {
                    continue;
                }
                let va4 = i4 << PML4SHIFT;
                if va4 >= VM_MAXUSER_ADDRESS {
                    return Err(format!("pmap {pm}: kernel-half PML4 entry {i4}"));
                }
                Self::check_ptp(env, e4.frame(), "PDPT page")?;
                for (i3, e3) in Self::table_entries(env, e4.frame()) {
                    if !e3.valid() {
                        continue;
                    }
                    let va3 = va4 | (i3 << PDPSHIFT);
                    if e3.has(PteFlags::PS) {
                        resident += 1 << 18;
                        continue;
                    }
                    Self::check_ptp(env, e3.frame(), "page directory")?;
                    for (i2, e2) in Self::table_entries(env, e3.frame()) {
                        if !e2.valid() {
                            continue;
                        }
                        let va2 = va3 | (i2 << PDRSHIFT);
                        if e2.has(PteFlags::PS) {
                            resident += NPTEPG;
                            if e2.has(PteFlags::SW_MANAGED) {
                                pv_seen += 1;
                                if !self.pv.contains_sp(e2.frame_2m(), pm, va2) {
                                    return Err(format!("pmap {pm}: 2MB mapping at {va2:#x} has no PV entry"));
                                }
                            }
                            continue;
                        }
                        if p.stash.contains(va2) {
                            return Err(format!("pmap {pm}: stashed page-table page for {va2:#x} while a table is mapped"));
                        }
                        Self::check_ptp(env, e2.frame(), "page-table page")?;
                        for (i1, e1) in Self::table_entries(env, e2.frame()) {
                            if !e1.valid() {
                                continue;
                            }
                            resident += 1;
                            let va = va2 | (i1 << 12);
                            let m = PhysAddr(e1.frame()).pfn();
                            let pg = env.phys.pages.get(m);
                            if !pg.has(pflags::INUSE) || env.phys.buddy.is_free(m) {
                                return Err(format!("pmap {pm}: {va:#x} maps free frame {m:?}"));
                            }
                            if e1.has(PteFlags::SW_MANAGED) {
                                pv_seen += 1;
                                if !self.pv.contains(env, m, pm, va) {
                                    return Err(format!("pmap {pm}: {va:#x} -> {m:?} has no PV entry"));
                                }
                            }
                        }
                    }
                }
            }
            for (va2, s) in p.stash.iter() {
                let pde = self.pde_pa(env.mem, pm, va2).map(|a| Pte::read(env.mem, a));
                if !pde.is_some_and(|e| e.valid() && e.has(PteFlags::PS)) {
                    return Err(format!("pmap {pm}: stash for {va2:#x} but no 2MB mapping there"));
                }
                if !env.phys.pages.get(s.ptp).has(pflags::PTPAGE) {
                    return Err(format!("pmap {pm}: stashed page {:?} is not a page-table page", s.ptp));
                }
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
