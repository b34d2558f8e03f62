//! Referenced and changed state for the page daemon: moea64_is_modified
//! and moea64_is_referenced (moea64_query_bit), moea64_ts_referenced and
//! moea64_clear_modify (moea64_clear_bit), with their superpage cases
//! (moea64_sp_query, moea64_sp_clear), and dropping every mapping of a
//! 16 MB physical run at once.
//!
//! R and C live in the HPT entries, where the hardware search sets them,
//! and, for entries evicted from the table, in the PVO (`Pvo::refchg`).
//! A superpage is 4096 PVOs with an entry each, and its R and C are the
//! OR over all of them: any page referenced or changed counts for every
//! page of it. Clearing R in place (with a tlbie) is always possible, so
//! R is cleared in all 4096 entries at once, but only when the page under
//! test is the one in 4096 that `refbits` selects; clearing C of one page
//! needs the superpage demoted first, and the page's mapping is then
//! write-protected so that its next store faults and may repromote.
//!
//! Where the model departs from moea64:
//! - moea64_sp_clear counts a reference for every page of a superpage
//!   that is not the selected one without looking at the bits; here R is
//!   looked for (stopping at the first entry that has it), so that a test
//!   returns 0 only when nothing is referenced, as the Pmap interface asks
//!   and as the other pmaps do.
//! - moea64 caches bits it finds in the vm_page (mdpg_attrs, MDPG_ATTR_SP
//!   for superpages); the model keeps only the bits of evicted entries and
//!   those of a promotion (in the first PVO), and looks at the entries
//!   every time.
//! - An entry whose bit is already clear is left alone (moea64 rewrites
//!   it and issues a tlbie anyway): an entry without R has not been loaded
//!   into any TLB since R was last cleared, one without C holds no
//!   translation that lets a store through unrecorded.
//! - ts_referenced stops at `TS_REFERENCED_MAX` references, and a mapping
//!   found writable and changed marks the page dirty, as in the other
//!   pmaps (moea64_clear_bit walks the whole list and counts only).

use crate::base::RefMod;
use super::{pvof, rc, Ppc64, SP_MASK, SP_PAGES, SP_SHIFT, SP_SIZE};
use crate::ptpage;
use crate::refbits::{self, TS_REFERENCED_MAX};
use splab_hw::Pfn;
use splab_vm::pmap::{prot, PmapEnv, PmapId};

impl Ppc64 {
    /// moea64_sp_query: the R and C bits of the superpage holding `va` in
    /// `pm`, gathered from the entries and kept bits of its 4096 PVOs,
    /// stopping as soon as every bit of `want` has been found.
    pub(crate) fn sp_query(&self, env: &PmapEnv, pm: PmapId, va: u64, want: u8) -> u8 {
        let sva = va & !SP_MASK;
        let mut bits = 0;
        for (_, p) in self.pm(pm).pvos.range(sva..sva + SP_SIZE) {
            bits |= self.pte_bits(env.mem, p) | p.refchg;
            if bits & want == want {
                break;
            }
        }
        bits
    }

    /// moea64_query_bit: whether some mapping of `m` has `bit` (R or C)
    /// set; for a superpage mapping, some entry of the superpage.
    pub(crate) fn query_bit(&self, env: &PmapEnv, m: Pfn, bit: u8) -> bool {
        self.pv.list(env, m).into_iter().any(|(pm, va)| {
            let p = self.pvo(pm, va).expect("listed PVO");
            let bits = if p.large() { self.sp_query(env, pm, va, bit) } else { self.pte_bits(env.mem, p) | p.refchg };
            bits & bit != 0
        })
    }

    /// moea64_pte_clear on one PVO, and on the bits kept from its
    /// evictions: `bit` is cleared in both. Returns the R and C bits the
    /// mapping had.
    fn pvo_clear(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, bit: u8) -> u8 {
        let p = *self.pvo(pm, va).expect("PVO to clear");
        let now = self.pte_bits(env.mem, &p);
        if now & bit != 0 {
            self.pte_clear(env, pm, va, bit);
        }
        self.pvo_mut(pm, va).refchg &= !bit;
        now | p.refchg
    }

    /// moea64_sp_pvo_clear: clears `bit` in every entry of the superpage
    /// holding `va` in `pm`, with one batched invalidation of the range.
    /// Returns the superpage's R and C bits before.
    fn sp_pvo_clear(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, bit: u8) -> u8 {
        let sva = va & !SP_MASK;
        self.batched_tlbie(env, pm, sva, |p, env| p.pvos_in(pm, sva, sva + SP_SIZE).into_iter().fold(0, |b, v| b | p.pvo_clear(env, pm, v, bit)))
    }

}

impl RefMod for Ppc64 {
    /// moea64_is_modified (moea64_query_bit(m, LPTE_CHG)).
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.query_bit(env, m, rc::CHG)
    }

    /// moea64_is_referenced (moea64_query_bit(m, LPTE_REF)).
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.query_bit(env, m, rc::REF)
    }

    /// moea64_ts_referenced (moea64_clear_bit(m, LPTE_REF)). A superpage
    /// mapping's R bits are cleared, in all its entries, only when `m` is
    /// the page the hash selects and the mapping is not wired; for any
    /// other page the superpage is only looked at.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut count = 0;
        for (pm, va) in self.pv.list(env, m) {
            let p = *self.pvo(pm, va).expect("listed PVO");
            let writable = p.prot & prot::WRITE != 0;
            let bits = if !p.large() {
                self.pvo_clear(env, pm, va, rc::REF)
            } else if refbits::selected_for_clearing(m, pm, va, SP_SHIFT, SP_PAGES) && p.flags & pvof::WIRED == 0 {
                self.sp_pvo_clear(env, pm, va, rc::REF)
            } else {
                self.sp_query(env, pm, va, rc::REF | if writable { rc::CHG } else { 0 })
            };
            if writable && bits & rc::CHG != 0 {
                ptpage::dirty(env, m);
            }
            if bits & rc::REF != 0 {
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    break;
                }
            }
        }
        count
    }

    /// moea64_clear_modify (moea64_clear_bit(m, LPTE_CHG)). A superpage
    /// mapping with C set somewhere is demoted (its bits, C included, go
    /// to all its pages), then `m`'s own mapping loses C and, unless
    /// wired, write access, so that its next store faults and the range
    /// may be promoted again; a superpage with no C set is left whole.
    /// 4 KB mappings lose C only.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            let p = *self.pvo(pm, va).expect("listed PVO");
            if p.large() {
                if self.sp_query(env, pm, va, rc::CHG) & rc::CHG == 0 {
                    continue;
                }
                self.sp_demote(env, pm, va);
                self.pvo_clear(env, pm, va, rc::CHG);
                if p.flags & pvof::WIRED == 0 {
                    self.pvo_protect(env, pm, va, prot::READ | prot::EXEC);
                }
                continue;
            }
            self.pvo_clear(env, pm, va, rc::CHG);
        }
    }

    /// Removes every mapping of the 16 MB physical run holding `m`: its
    /// superpage mappings whole (moea64_sp_remove, no demotion), and the
    /// 4 KB mappings of each of its 4096 pages. Bits go to the pages as
    /// removal gives them (for mappings that were writable).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let m0 = m.0 & !(SP_PAGES as u32 - 1);
        for k in 0..SP_PAGES as u32 {
            let mk = Pfn(m0 + k);
            for (pm, va) in self.pv.list(env, mk) {
                let Some(p) = self.pvo(pm, va).copied() else { continue };
                if p.large() {
                    self.sp_remove(env, pm, va & !SP_MASK);
                } else {
                    self.pvo_remove(env, pm, va);
                }
            }
        }
    }
}
