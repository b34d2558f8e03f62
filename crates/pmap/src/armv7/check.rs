//! The armv7 pmap's invariants (see mod.rs), checked by walking every L1
//! table and every L2 table slot of every address space.

use crate::base::Check;
use super::{Pm, Armv7, DOMAIN, PTE2_A, PTE2_NM, PTE2_RO, PTE2_U, VM_MAXUSER_ADDRESS};
use crate::invariants::{self, Seen};
use crate::ptpage;
use splab_hw::armv7::pte::{L1Desc, L1Kind, SmallFlags};
use splab_hw::armv7::{L1_ENTRIES, L2_ENTRIES, REPLICAS, SECTION_SHIFT};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Armv7 {
    fn check_frame(env: &PmapEnv, pm: PmapId, va: u64, frame: u64) -> Result<Pfn, String> {
        let m = PhysAddr(frame).pfn();
        if m.idx() >= env.phys.pages.len() || !env.phys.pages.get(m).has(pflags::INUSE) || env.phys.buddy.is_free(m) {
            return Err(format!("pmap {pm}: {va:#x} maps frame {m:?}, which is not in use"));
        }
        Ok(m)
    }

    /// Checks the valid entries of L2 table slot `idx` at `table`; returns
    /// how many there are. `linked` says whether the L1 entry points here.
    fn check_pt2(&self, env: &PmapEnv, pm: PmapId, idx: u64, table: u64, linked: bool, seen: &mut Seen) -> Result<u64, String> {
        let mut valid = 0;
        for i in 0..L2_ENTRIES {
            let e = Self::rd2(env.mem, PhysAddr(table + i * 4));
            if !e.valid() {
                continue;
            }
            valid += 1;
            let va = idx << SECTION_SHIFT | i << 12;
            if e.is_large() {
                let g = i & !(REPLICAS - 1);
                let first = Self::rd2(env.mem, PhysAddr(table + g * 4));
                if first != e || !e.frame().is_multiple_of(REPLICAS * 4096) {
                    return Err(format!("pmap {pm}: large page at {va:#x} is not 16 identical aligned entries: {first:?} / {e:?}"));
                }
            }
            let s = e.small_view(i);
            let f = s.attrs();
            if !f.contains(PTE2_U) {
                return Err(format!("pmap {pm}: {va:#x} is not a user mapping: {e:?}"));
            }
            if f.contains(PTE2_RO) && !f.contains(PTE2_NM) {
                return Err(format!("pmap {pm}: {va:#x} is read-only but modified: {e:?}"));
            }
            if !linked {
                continue; // a stash: checked against its section by the caller
            }
            let m = Self::check_frame(env, pm, va, s.frame())?;
            seen.resident += 1;
            if ptpage::managed(env, m) {
                seen.pv += 1;
                if !self.pv.contains(env, m, pm, va) {
                    return Err(format!("pmap {pm}: {va:#x} -> {m:?} has no PV entry"));
                }
            }
        }
        Ok(valid)
    }

    /// Checks a section at L1 index `idx` and the slot under it.
    fn check_section(&self, env: &PmapEnv, pm: PmapId, p: &Pm, idx: u64, e: L1Desc, seen: &mut Seen) -> Result<(), String> {
        let va = idx << SECTION_SHIFT;
        let f = SmallFlags::from_section(e.flags());
        let m0 = Self::check_frame(env, pm, va, e.frame())?;
        if !f.contains(PTE2_U) || e.domain() != DOMAIN {
            return Err(format!("pmap {pm}: section at {va:#x} is not a user mapping in domain 0: {e:?}"));
        }
        seen.resident += L2_ENTRIES;
        if ptpage::managed(env, m0) {
            seen.pv += 1;
            if !self.pv.contains_sp(e.frame(), pm, va) {
                return Err(format!("pmap {pm}: section at {va:#x} has no PV entry"));
            }
            if f.contains(PTE2_NM) && !f.contains(PTE2_RO) {
                return Err(format!("pmap {pm}: managed section at {va:#x} is writable but unmodified: {e:?}"));
            }
        }
        match (p.pt2_count[idx as usize] as u64, self.pt2_table(pm, idx)) {
            (0, _) => Ok(()),
            (L2_ENTRIES, Some(table)) => {
                // The table kept at promotion maps the same frames.
                for i in 0..L2_ENTRIES {
                    let s = Self::rd2(env.mem, PhysAddr(table + i * 4)).small_view(i);
                    if !s.valid() || s.frame() != e.frame() + i * 4096 || !s.has(PTE2_A) {
                        return Err(format!("pmap {pm}: L2 table kept under the section at {va:#x} has entry {i} = {s:?}"));
                    }
                }
                Ok(())
            }
            (c, _) => Err(format!("pmap {pm}: section at {va:#x} over a slot counting {c} entries")),
        }
    }

    fn check_pmap(&self, env: &PmapEnv, pm: PmapId, p: &Pm) -> Result<u64, String> {
        for i in 0..4 {
            let l1 = env.phys.pages.get(Pfn(p.l1.0 + i));
            if !l1.has(pflags::PTPAGE) || !l1.has(pflags::INUSE) {
                return Err(format!("pmap {pm}: L1 table page {i} is not an in-use page-table page"));
            }
        }
        if !p.l1.addr().0.is_multiple_of(16 << 10) {
            return Err(format!("pmap {pm}: L1 table at {:?} is not 16 KB-aligned", p.l1));
        }
        let mut seen = Seen::default();
        let mut counted = vec![0u64; L1_ENTRIES as usize];
        for idx in 0..L1_ENTRIES {
            let e = Self::rd1(env.mem, PhysAddr(p.l1.addr().0 + idx * 4));
            let va = idx << SECTION_SHIFT;
            if !e.is_fault() && va >= VM_MAXUSER_ADDRESS {
                return Err(format!("pmap {pm}: L1 entry {idx} is beyond the user address space: {e:?}"));
            }
            let slot = self.pt2_table(pm, idx);
            match e.kind() {
                L1Kind::Fault => {}
                L1Kind::Table => {
                    if Some(e.table_base()) != slot || e.domain() != DOMAIN {
                        return Err(format!("pmap {pm}: L1 entry {idx} links {e:?}, not its slot {slot:?} in domain 0"));
                    }
                    counted[idx as usize] = self.check_pt2(env, pm, idx, e.table_base(), true, &mut seen)?;
                }
                L1Kind::Section => {
                    self.check_section(env, pm, p, idx, e, &mut seen)?;
                    if let Some(t) = slot {
                        counted[idx as usize] = self.check_pt2(env, pm, idx, t, false, &mut seen)?;
                    }
                }
                k => return Err(format!("pmap {pm}: L1 entry {idx} is a {k:?}")),
            }
            if e.is_fault() {
                if let Some(t) = slot {
                    counted[idx as usize] = self.check_pt2(env, pm, idx, t, false, &mut seen)?;
                }
            }
            if counted[idx as usize] != p.pt2_count[idx as usize] as u64 {
                return Err(format!("pmap {pm}: slot {idx} counts {} entries but holds {}", p.pt2_count[idx as usize], counted[idx as usize]));
            }
            if e.is_fault() && counted[idx as usize] != 0 {
                return Err(format!("pmap {pm}: unlinked slot {idx} holds entries"));
            }
        }
        for (&k, &page) in &p.pt2pg {
            let m = env.phys.pages.get(page);
            let sum: u64 = (k * 4..k * 4 + 4).map(|i| counted[i as usize]).sum();
            if !m.has(pflags::PTPAGE) || !m.has(pflags::INUSE) || m.ref_count as u64 != sum || sum == 0 {
                return Err(format!("pmap {pm}: PT2PG page {page:?} for 4 MB {k}: ref_count {} with {sum} entries", m.ref_count));
            }
        }
        invariants::resident(pm, p.resident, &seen)?;
        Ok(seen.pv)
    }

}

impl Check for Armv7 {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        let mut pv_seen = 0u64;
        for (pm, p) in self.pmaps.iter() {
            pv_seen += self.check_pmap(env, pm, p)?;
        }
        invariants::pv_entries(&self.pv, pv_seen)
    }
}
