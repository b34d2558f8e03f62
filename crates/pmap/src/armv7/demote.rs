//! Demotion of a section to 256 small pages (pmap_demote_pte1), and of a
//! 64 KB large page to 16 (as arm64's pmap_demote_l3c).
//!
//! A section never referenced is destroyed rather than demoted. Otherwise
//! the L2 table kept at promotion is reused, refilled only if the section's
//! attributes changed since; a section mapped directly has none, so its
//! slot is filled, in the PT2PG page that other tables of the 4 MB already
//! use, or in a newly allocated one. If no page can be had the section is
//! removed instead, which is always safe: a later fault recreates what is
//! needed. A large page is demoted in place and cannot fail.

use crate::ptpage;
use super::{Armv7, DOMAIN, PTE2_A, PTE2_PROMOTE};
use splab_hw::armv7::pte::{L1Desc, L2Desc};
use splab_hw::armv7::{l1_index, L2_ENTRIES, LARGE_SIZE, REPLICAS, SECTION_SIZE};
use splab_hw::armv7::pte::SectionFlags;
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Armv7 {
    /// Removes a section in place of demoting it.
    fn demote_abort(&mut self, env: &mut PmapEnv, pm: PmapId, va1m: u64) -> bool {
        let mut free = Vec::new();
        self.remove_pte1(env, pm, va1m, &mut free);
        ptpage::free_all(env, free);
        self.st.section.aborts += 1;
        false
    }

    /// pmap_demote_pte1: demotes the section covering `va`. Returns false
    /// if the section was removed instead.
    pub(crate) fn demote_pte1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        let va1m = va & !(SECTION_SIZE - 1);
        let idx = l1_index(va);
        let p1 = self.pte1_pa(pm, va1m);
        let old = Self::rd1(env.mem, p1);
        debug_assert!(old.is_section(), "demote: not a section");
        if !old.has(SectionFlags::AP0) {
            return self.demote_abort(env, pm, va1m);
        }
        if self.pt2_table(pm, idx).is_none() && self.alloc_pt2pg(env, pm, idx).is_none() {
            return self.demote_abort(env, pm, va1m);
        }
        let table = self.pt2_table(pm, idx).expect("slot exists");
        let first = old.small_at(0);
        debug_assert!(first.has(PTE2_A));
        if self.pm(pm).pt2_count[idx as usize] == 0 {
            // Demoting a section mapped directly: a fresh table.
            Self::fill_pt2(env, table, old);
            self.pt2_add(env, pm, idx, L2_ENTRIES as u16);
        } else {
            debug_assert_eq!(self.pm(pm).pt2_count[idx as usize] as u64, L2_ENTRIES, "a stash is full");
            let kept = Self::rd2(env.mem, PhysAddr(table)).small_view(0);
            debug_assert_eq!(kept.frame(), first.frame(), "the stash maps the section's frames");
            if kept.attrs() & PTE2_PROMOTE == first.attrs() & PTE2_PROMOTE {
                self.st.section.ptp_reused += 1;
            } else {
                Self::fill_pt2(env, table, old);
            }
        }
        // pmap_change_pte1: break before make.
        let inv = Self::update1(env.mem, p1, L1Desc::FAULT, va1m, SECTION_SIZE);
        self.tlb_flush(env, pm, inv);
        Self::wr1(env.mem, p1, L1Desc::table(table, DOMAIN));
        // The section's PV entry becomes 256 (pmap_pv_demote_pte1).
        let m0 = PhysAddr(old.frame()).pfn();
        if crate::ptpage::managed(env, m0) {
            self.pv.demote(env, m0, pm, va1m, L2_ENTRIES as u32);
        }
        self.st.section.demotions += 1;
        env.ev.demotions += 1;
        true
    }

    /// pmap_fill_pt2: the 256 small pages that map what section `s` maps.
    fn fill_pt2(env: &mut PmapEnv, table: u64, s: L1Desc) {
        for i in 0..L2_ENTRIES {
            Self::wr2(env.mem, PhysAddr(table + i * 4), s.small_at(i));
        }
    }

    /// Replaces the large page at `base` (64 KB-aligned) with the 16 small
    /// pages that map the same frames with the same attributes.
    pub(crate) fn demote_large(&mut self, env: &mut PmapEnv, pm: PmapId, base: u64) {
        debug_assert!(base.is_multiple_of(LARGE_SIZE));
        let p0 = self.pte2_pa(pm, base).expect("demote_large: no L2 table");
        let large = Self::rd2(env.mem, p0);
        debug_assert!(large.is_large(), "demote_large: not a large page");
        let inv = Self::update2(env.mem, p0, REPLICAS, L2Desc::FAULT, base);
        self.tlb_flush_range(env, pm, inv);
        for i in 0..REPLICAS {
            Self::wr2(env.mem, PhysAddr(p0.0 + i * 4), large.large_to_small(i));
        }
        self.st.large.demotions += 1;
        env.ev.demotions += 1;
    }
}
