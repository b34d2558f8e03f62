//! Promotion: 256 small-page mappings to one 1 MB section
//! (pmap_promote_pte1), and 16 to one 64 KB large page (after arm64's
//! pmap_promote_l3c; FreeBSD's armv7 pmap has no large pages).
//!
//! Both are tried right after a mapping is entered. The first entry must
//! be valid, referenced, and map the first page of an aligned frame of the
//! superpage's size; every other entry must map the next physical page and
//! agree with the first on the PTE2_PROMOTE bits. Writable entries that
//! were never written (NM set, RO clear) get RO first, so that the
//! superpage, whose single NM covers all its pages, stays read-only to the
//! MMU until written: no TLB flush is needed for that, as RO is a software
//! bit and NM already makes the hardware refuse writes. Entries of a
//! large page inside the table count as their 4 KB parts, and are
//! write-protected all 16 together, so a failed attempt never leaves a
//! large page's entries different.

use crate::counters::PromoteFail;
use super::{Leaf, Armv7, DOMAIN, PTE2_A, PTE2_NM, PTE2_PROMOTE, PTE2_RO};
use splab_hw::armv7::pte::{L1Desc, L2Desc};
use splab_hw::armv7::{l2_index, L2_ENTRIES, LARGE_SIZE, REPLICAS, SECTION_SIZE};
use splab_hw::PhysAddr;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Armv7 {
    /// Sets RO on entry `i` of the table at `table`, whose entries map from
    /// `table_va` on, if it is writable and unmodified (all 16 entries of
    /// a large page at once); returns the entry as a small page, as it now
    /// is.
    fn write_protect_clean(env: &mut PmapEnv, table: u64, table_va: u64, i: u64) -> L2Desc {
        let e = Self::rd2(env.mem, PhysAddr(table + i * 4));
        if e.has(PTE2_NM) && !e.has(PTE2_RO) {
            let n = e.with(PTE2_RO);
            let (k, count) = if e.is_large() { (i & !15, REPLICAS) } else { (i, 1) };
            // No flush: RO is a software bit, and NM already makes the
            // hardware refuse writes.
            Self::update2(env.mem, PhysAddr(table + k * 4), count, n, table_va + k * 4096).unneeded();
            return n.small_view(i);
        }
        e.small_view(i)
    }

    /// Checks the `n` entries from index `first` of the table at `table`,
    /// whose entries map from `table_va` on, for promotion to a page of
    /// `n` * 4 KB. Returns the first entry, write-protected if it was
    /// clean, or why not.
    fn promotable(env: &mut PmapEnv, table: u64, table_va: u64, first: u64, n: u64) -> Result<L2Desc, PromoteFail> {
        let size = n * 4096;
        let f = Self::rd2(env.mem, PhysAddr(table + first * 4)).small_view(first);
        if !f.valid() || !f.has(PTE2_A) || !f.frame().is_multiple_of(size) {
            return Err(PromoteFail::FirstMisaligned);
        }
        let f = Self::write_protect_clean(env, table, table_va, first);
        for i in 1..n {
            let e = Self::rd2(env.mem, PhysAddr(table + (first + i) * 4)).small_view(first + i);
            if !e.valid() || e.frame() != f.frame() + i * 4096 {
                return Err(PromoteFail::NotContiguous);
            }
            let e = Self::write_protect_clean(env, table, table_va, first + i);
            if e.attrs() & PTE2_PROMOTE != f.attrs() & PTE2_PROMOTE {
                return Err(PromoteFail::Attributes);
            }
        }
        Ok(f)
    }

    /// pmap_promote_pte1: tries to replace the L2 table covering `va` with
    /// one section. The table stays where it is, full, as the stash a later
    /// demotion reuses. Returns whether it promoted.
    pub(crate) fn promote_pte1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        if !self.superpage_allowed(va, SECTION_SIZE) {
            return false;
        }
        let va1m = va & !(SECTION_SIZE - 1);
        let p1 = self.pte1_pa(pm, va1m);
        let e1 = Self::rd1(env.mem, p1);
        if !e1.is_table() {
            return false;
        }
        let first = match Self::promotable(env, e1.table_base(), va1m, 0, L2_ENTRIES) {
            Ok(f) => f,
            Err(why) => return self.st.section.failed(why),
        };
        let npte1 = L1Desc::section_from_small(first, DOMAIN);
        // One PV entry for the section instead of 256 (pmap_pv_promote_pte1).
        let m0 = PhysAddr(first.frame()).pfn();
        if crate::ptpage::managed(env, m0) {
            self.pv.promote(env, m0, pm, va1m, L2_ENTRIES as u32);
        }
        // pmap_change_pte1: break before make, every small and large
        // translation of the range flushed.
        let inv = Self::update1(env.mem, p1, L1Desc::FAULT, va1m, SECTION_SIZE);
        self.tlb_flush_range(env, pm, inv);
        Self::wr1(env.mem, p1, npte1);
        self.st.section.promotions += 1;
        env.ev.promotions += 1;
        true
    }

    /// Tries to replace the 16 small-page entries of the aligned 64 KB
    /// run holding `va` with a large page (as arm64's pmap_promote_l3c sets
    /// ATTR_CONTIGUOUS on 16 L3 entries). PV entries stay per 4 KB page.
    /// Returns whether it promoted.
    pub(crate) fn promote_large(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        if !self.superpage_allowed(va, LARGE_SIZE) {
            return false;
        }
        let base = Self::group_base(va);
        let Some(Leaf::Pte2(p0, e0)) = self.find(env.mem, pm, base) else { return false };
        if e0.is_large() {
            return false;
        }
        let table = p0.0 - l2_index(base) * 4;
        let first = match Self::promotable(env, table, base & !(SECTION_SIZE - 1), l2_index(base), REPLICAS) {
            Ok(f) => f,
            Err(why) => return self.st.large.failed(why),
        };
        let large = first.small_to_large();
        let inv = Self::update2(env.mem, p0, REPLICAS, L2Desc::FAULT, base);
        self.tlb_flush_range(env, pm, inv);
        for i in 0..REPLICAS {
            Self::wr2(env.mem, PhysAddr(p0.0 + i * 4), large);
        }
        self.st.large.promotions += 1;
        env.ev.promotions += 1;
        true
    }
}
