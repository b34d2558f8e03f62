//! The ppc64-hpt pmap's invariants (see mod.rs), checked against the PVOs,
//! the PV lists, the context pages and every entry of the hashed page
//! table.

use crate::invariants;
use crate::base::Check;
use super::{pvof, Ppc64, Pvo, SP_MASK, SP_PAGES, SP_SHIFT, SP_SIZE};
use splab_hw::ppc64::hpt::{ctx_segments, CTX_HTAB};
use splab_hw::ppc64::pte::{Hpte, HpteLo};
use splab_hw::ppc64::slb::SlbV;
use splab_hw::ppc64::{esid, BASE_SHIFT, PTEG_ENTRIES, SEGMENT_SHIFT};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::page::pflags;
use splab_vm::pmap::{PmapEnv, PmapId};
use std::collections::HashMap;

impl Ppc64 {
    /// The superpage starting at `sva` is whole and uniform.
    fn check_superpage(&self, pm: PmapId, sva: u64, first: &Pvo) -> Result<(), String> {
        if first.pa & SP_MASK != 0 {
            return Err(format!("pmap {pm}: superpage at {sva:#x} maps unaligned frame {:#x}", first.pa));
        }
        let pvos: Vec<_> = self.pm(pm).pvos.range(sva..sva + SP_SIZE).collect();
        if pvos.len() as u64 != SP_PAGES {
            return Err(format!("pmap {pm}: superpage at {sva:#x} has {} PVOs", pvos.len()));
        }
        for (i, (&va, p)) in pvos.into_iter().enumerate() {
            let i = i as u64;
            if va != sva + i * 4096 || p.pa != first.pa + i * 4096 || !p.large() || p.prot != first.prot || p.flags != first.flags || p.wimg != first.wimg {
                return Err(format!("pmap {pm}: superpage at {sva:#x}: PVO at {va:#x} is {p:?}, the first {first:?}"));
            }
        }
        Ok(())
    }

    fn check_pvo(&self, env: &PmapEnv, pm: PmapId, va: u64, p: &Pvo) -> Result<(), String> {
        let m = Pfn((p.pa >> 12) as u32);
        invariants::page_mapping(env, &self.pv, pm, va, m, p.managed())?;
        let unmanaged = env.phys.pages.get(m).has(pflags::UNMANAGED);
        if p.managed() == unmanaged {
            return Err(format!("pmap {pm}: {va:#x}: PVO managed {} but page unmanaged {unmanaged}", p.managed()));
        }
        let Some(&vsid) = self.pm(pm).segs.get(&esid(va)) else {
            return Err(format!("pmap {pm}: {va:#x} is mapped in a segment with no VSID"));
        };
        if p.in_table() {
            let pa = self.geom().slot_pa(p.slot as u64);
            let e = Hpte { hi: env.mem.read_u64(PhysAddr(pa)), lo: env.mem.read_u64(PhysAddr(pa + 8)) };
            let want = Self::pte_from_pvo(vsid, va, p, e.hid());
            let rc = (HpteLo::R | HpteLo::C).bits();
            let group = p.slot as u64 / PTEG_ENTRIES;
            let home = self.geom().groups(vsid, va, BASE_SHIFT)[e.hid() as usize];
            if e.hi != want.hi || e.lo & !rc != want.lo || group != home {
                return Err(format!("pmap {pm}: {va:#x}: slot {} holds {e:?}, the PVO wants {want:?} in PTEG {home:#x}", p.slot));
            }
        }
        if p.large() && va & SP_MASK == 0 {
            self.check_superpage(pm, va, p)?;
        }
        Ok(())
    }

    /// Every valid entry of the HPT belongs to the PVO whose slot it is.
    fn check_table(&self, env: &PmapEnv, in_table: u64) -> Result<(), String> {
        let g = self.geom();
        let mut valid = 0;
        for slot in 0..g.pteg_count * PTEG_ENTRIES {
            let pa = g.slot_pa(slot);
            let e = Hpte { hi: env.mem.read_u64(PhysAddr(pa)), lo: 0 };
            if !e.valid() {
                continue;
            }
            valid += 1;
            let vsid = e.ava() >> 5;
            let Some(&(pm, es)) = self.vsid_owner.get(&vsid) else {
                return Err(format!("HPT slot {slot}: {e:?} of no address space"));
            };
            let va = (es << SEGMENT_SHIFT) | (g.page_index(slot, e) << BASE_SHIFT);
            if self.pvo(pm, va).is_none_or(|p| p.slot as u64 != slot) {
                return Err(format!("HPT slot {slot}: entry for pmap {pm} {va:#x} but that PVO is {:?}", self.pvo(pm, va)));
            }
        }
        if valid != in_table || valid != self.st.pte_valid {
            return Err(format!("HPT has {valid} valid entries, {in_table} PVOs are in it, moea64_pte_valid says {}", self.st.pte_valid));
        }
        Ok(())
    }

}

impl Check for Ppc64 {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        let Some(geom) = self.hpt else { return Ok(()) };
        let (mut managed, mut in_table, mut evicted) = (0u64, 0u64, 0u64);
        for (pm, p) in self.pmaps.iter() {
            let ctx = p.ctx.addr().0;
            if env.mem.read_u64(PhysAddr(ctx + CTX_HTAB)) != geom.to_pate() {
                return Err(format!("pmap {pm}: context page does not describe the HPT"));
            }
            let mut table: Vec<(u64, SlbV)> = ctx_segments(env.mem, ctx);
            let mut segs: Vec<(u64, SlbV)> = p.segs.iter().map(|(&e, &v)| (e, SlbV::user(v))).collect();
            table.sort_by_key(|s| s.0);
            segs.sort_by_key(|s| s.0);
            if table != segs {
                return Err(format!("pmap {pm}: segment table {table:x?} but the pmap's segments are {segs:x?}"));
            }
            if let Some((e, v)) = p.segs.iter().find(|(&e, &v)| self.vsid_owner.get(&v) != Some(&(pm, e))) {
                return Err(format!("pmap {pm}: VSID {v:#x} of segment {e:#x} is not recorded as its own"));
            }
            let mut count: HashMap<u64, u32> = HashMap::new();
            for (&va, pvo) in &p.pvos {
                self.check_pvo(env, pm, va, pvo)?;
                *count.entry(va >> SP_SHIFT).or_default() += 1;
                managed += pvo.managed() as u64;
                if pvo.in_table() {
                    in_table += 1;
                } else {
                    evicted += 1;
                }
                if pvo.flags & !(pvof::WIRED | pvof::MANAGED | pvof::LARGE) != 0 {
                    return Err(format!("pmap {pm}: {va:#x}: unknown PVO flags {:#x}", pvo.flags));
                }
            }
            if count != p.sp_count {
                return Err(format!("pmap {pm}: PVO counts per 16MB range are off"));
            }
        }
        if managed != self.pv.live() {
            return Err(format!("{} PV entries in use but {managed} managed PVOs", self.pv.live()));
        }
        if evicted != self.st.pte_overflow {
            return Err(format!("{evicted} PVOs out of the HPT but moea64_pte_overflow says {}", self.st.pte_overflow));
        }
        self.check_table(env, in_table)
    }
}
