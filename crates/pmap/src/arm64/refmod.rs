//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced, pmap_clear_modify, and dropping
//! every mapping of a 2 MB physical run at once.
//!
//! The walker sets AF and, through DBM, clears AP[2] on the first write
//! (FEAT_HAFDBS), so a cleared AF or a set AP[2] is seen again on the next
//! access or write. A 2 MB block has one AF for its 512 pages: it is
//! cleared by one page in 512 (`refbits`). In a 64 KB run the hardware
//! may set AF in any one of the 16 entries, so only the entry of the page
//! under test is cleared, and the run counts as referenced while any of
//! its entries still has AF. A dirty block, or a dirty 64 KB run, is
//! demoted before one of its pages is made clean, so that the others keep
//! their modified state and the page's next write is seen.

use super::Arm64;
use crate::base::{RefMod, Remove};
use crate::ptpage;
use crate::radix::{self, Format, Tables};
use crate::refbits::{self, TS_REFERENCED_MAX};
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L2_SHIFT, L2_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::pmap::{PmapEnv, PmapId};

impl Arm64 {
    /// The entry of every 2 MB block holding `m`, then of every 4 KB
    /// mapping of `m`, an entry of a 64 KB run with the run's combined
    /// accessed and dirty state (pmap_load_l3c).
    fn leaves_of(&self, env: &PmapEnv, m: Pfn) -> Vec<Desc> {
        let mut v: Vec<Desc> = self
            .pv
            .list_sp(m.addr().0)
            .into_iter()
            .map(|(pm, va)| Desc::read(env.mem, self.entry(env.mem, pm, va, L2_SHIFT).expect("PV entry without an L2 entry")))
            .collect();
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 entry");
            let e = Desc::read(env.mem, pa);
            v.push(if e.has(DescFlags::CONTIGUOUS) { Self::load_l3c(env.mem, pa) } else { e });
        }
        v
    }

    /// Makes `m`'s L3 entry at `pa` (mapping `va`) clean: its 64 KB run, if
    /// any, is demoted first (a run is never writable but clean); AP[2]
    /// is set and DBM kept, so the next write sets it again.
    fn write_protect_l3(&mut self, env: &mut PmapEnv, pm: PmapId, pa: PhysAddr, va: u64) {
        if Desc::read(env.mem, pa).has(DescFlags::CONTIGUOUS) {
            self.demote_l3c(env, pm, pa, va);
        }
        let l3 = Desc::read(env.mem, pa);
        let inv = radix::update(env.mem, pa, l3.with(DescFlags::AP_RO), va, L3_SIZE);
        self.invalidate_page(env, pm, inv, true);
    }

}

impl RefMod for Arm64 {
    /// pmap_is_modified (pmap_page_test_mappings).
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.leaves_of(env, m).into_iter().any(Self::dirty)
    }

    /// pmap_is_referenced.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.leaves_of(env, m).into_iter().any(|e| e.has(DescFlags::AF))
    }

    /// pmap_ts_referenced. Wired mappings keep AF but count.
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut count = 0;
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let pa = self.entry(env.mem, pm, va, L2_SHIFT).expect("PV entry without an L2 entry");
            let l2 = Desc::read(env.mem, pa);
            debug_assert!(l2.is_block());
            if Self::dirty(l2) {
                ptpage::dirty(env, m);
            }
            if l2.has(DescFlags::AF) {
                if refbits::selected_for_clearing(m, pm, va, L2_SHIFT, LN_ENTRIES) && !l2.has(DescFlags::SW_WIRED) {
                    let inv = radix::update(env.mem, pa, l2.without(DescFlags::AF), va, L2_SIZE);
                    self.invalidate_page(env, pm, inv, true);
                }
                count += 1;
                if count >= TS_REFERENCED_MAX {
                    return count;
                }
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 entry");
            let l3 = Desc::read(env.mem, pa);
            if Self::dirty(l3) {
                ptpage::dirty(env, m);
            }
            if l3.has(DescFlags::AF) {
                if !l3.has(DescFlags::SW_WIRED) {
                    // This entry only, Contiguous bit or not.
                    let inv = radix::update(env.mem, pa, l3.without(DescFlags::AF), va, L3_SIZE);
                    self.invalidate_page(env, pm, inv, true);
                }
                count += 1;
            } else if l3.has(DescFlags::CONTIGUOUS) && Self::load_l3c(env.mem, pa).has(DescFlags::AF) {
                // A 64 KB run is accessed until AF is clear in all 16.
                count += 1;
            }
            if count >= TS_REFERENCED_MAX {
                break;
            }
        }
        count
    }

    /// pmap_clear_modify: a writable 2 MB block is demoted and `m`'s new
    /// L3 entry made clean (so its next write is seen and the block may be
    /// promoted again), `m` being marked dirty for the caller to clean, as
    /// FreeBSD does; dirty 4 KB entries are made clean.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let l2 = Desc::read(env.mem, self.entry(env.mem, pm, va, L2_SHIFT).expect("PV entry without an L2 entry"));
            if !l2.has(DescFlags::DBM) {
                continue;
            }
            if self.demote_l2(env, pm, va) && !l2.has(DescFlags::SW_WIRED) {
                let va4 = va + (m.addr().0 - l2.block_oa(L2_SHIFT));
                let pa = self.entry(env.mem, pm, va4, L3_SHIFT).expect("demoted block without an L3 entry");
                self.write_protect_l3(env, pm, pa, va4);
                ptpage::dirty(env, m);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 entry");
            if Self::dirty(Desc::read(env.mem, pa)) {
                self.write_protect_l3(env, pm, pa, va);
            }
        }
    }

    /// Removes every mapping of the 2 MB physical run holding `m`: its
    /// blocks whole (pmap_remove_l2, no demotion), then the 4 KB and
    /// 64 KB mappings of each of its 512 pages (pmap_remove_all).
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        let frame = m.addr().0 & !(L2_SIZE - 1);
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(frame) {
            self.remove_l2(env, pm, va, &mut free);
        }
        ptpage::free_all(env, free);
        let m0 = PhysAddr(frame).pfn();
        for k in 0..LN_ENTRIES as u32 {
            let mk = Pfn(m0.0 + k);
            if self.pv.is_mapped(env, mk) {
                self.remove_all(env, mk);
            }
        }
    }
}
