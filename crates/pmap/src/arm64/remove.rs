//! Removing and changing mappings: pmap_remove (whole 2 MB blocks and
//! 64 KB runs in one step, partial ones demoted first), pmap_remove_all,
//! pmap_protect (pmap_mask_set with pmap_protect_l2 and
//! pmap_mask_set_l3c), pmap_remove_write and pmap_advise.
//!
//! TLB invalidation of L3 entries is batched as FreeBSD batches it: a
//! run of changed addresses is a `Batch`, invalidated in one range (one
//! TLBI per page) when the run ends.

use super::Arm64;
use crate::base::{self, Remove};
use crate::ptpage;
use crate::radix::{self, Format, Next, Part, Tables, covers, next_block};
use crate::shootdown::{Batch, Invalidate};
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L1_SIZE, L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3C_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};
use std::ops::Range;

/// A protection change: the bits `mask` of an entry become `bits`
/// (pmap_protect's mask and nbits).
#[derive(Clone, Copy)]
struct MaskSet {
    mask: u64,
    bits: u64,
}

impl MaskSet {
    fn apply(self, e: Desc) -> Desc {
        Desc((e.0 & !self.mask) | self.bits)
    }
    /// Whether the entry has the new protection already.
    fn holds(self, e: Desc) -> bool {
        e.0 & self.mask == self.bits
    }
    fn write_protects(self) -> bool {
        self.bits & DescFlags::AP_RO.bits() != 0
    }
}

impl Arm64 {
    /// Bookkeeping for a managed mapping of `n` pages from `m0` just
    /// cleared, whose entry (or the run's combined entry) was `old`: the
    /// dirty and referenced state moves to the pages.
    fn release_pages(env: &mut PmapEnv, m0: Pfn, n: u64, old: Desc) {
        ptpage::hand_over(env, m0, n as u32, Self::dirty(old), old.has(DescFlags::AF));
    }

    /// Bookkeeping for one L3 entry just cleared (the body of
    /// pmap_remove_l3): resident count, page state, PV entry.
    fn removed_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, old: Desc) {
        self.pm_mut(pm).resident -= 1;
        if old.has(DescFlags::SW_MANAGED) {
            let m = PhysAddr(old.oa()).pfn_4k();
            Self::release_pages(env, m, 1, old);
            self.pv.del(env, m, pm, va);
        }
    }

    /// Removes the whole 64 KB run starting at `va`, whose first entry is
    /// at `first` (pmap_remove_l3c), adding it to `batch`. Returns whether
    /// its L3 table was freed.
    fn remove_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, first: PhysAddr, va: u64, free: &mut Vec<Pfn>, batch: &mut Batch) -> bool {
        let whole = Self::load_l3c(env.mem, first);
        for k in 0..L3C_ENTRIES {
            radix::wr(env.mem, PhysAddr(first.0 + k * 8), Desc::EMPTY);
        }
        batch.add(Invalidate::new(va, L3C_SIZE));
        self.pm_mut(pm).resident -= L3C_ENTRIES;
        if whole.has(DescFlags::SW_MANAGED) {
            let m0 = PhysAddr(whole.oa()).pfn_4k();
            Self::release_pages(env, m0, L3C_ENTRIES, whole);
            for k in 0..L3C_ENTRIES {
                self.pv.del(env, Pfn(m0.0 + k as u32), pm, va + k * L3_SIZE);
            }
        }
        self.unwire(env, pm, va, 3, L3C_ENTRIES as i32, free)
    }

    /// Removes the L3 entries of [sva, eva) from the table at `table`
    /// (pmap_remove_l3_range); an emptied table is unlinked and queued on
    /// `free`.
    pub(crate) fn remove_l3_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, table: u64, free: &mut Vec<Pfn>) {
        let mut run = Batch::new();
        let mut va = sva;
        while va < eva {
            let pa = radix::slot(table, va, L3_SHIFT);
            let e = Desc::read(env.mem, pa);
            if !e.valid() {
                self.flush(env, pm, &mut run);
                va += L3_SIZE;
                continue;
            }
            if e.has(DescFlags::CONTIGUOUS) {
                if covers(va, eva, L3C_SIZE) {
                    let freed = self.remove_l3c(env, pm, pa, va, free, &mut run);
                    va += L3C_SIZE;
                    if freed {
                        break;
                    }
                    continue;
                }
                self.demote_l3c(env, pm, pa, va);
            }
            let old = Desc::read(env.mem, pa);
            run.add(radix::clear::<Desc>(env.mem, pa, va, L3_SIZE));
            self.removed_l3(env, pm, va, old);
            va += L3_SIZE;
            if self.unwire(env, pm, va - L3_SIZE, 3, 1, free) {
                break;
            }
        }
        self.flush(env, pm, &mut run);
    }

    /// Removes a whole 2 MB block (pmap_remove_l2): its PV entry, its dirty
    /// and referenced state given to all 512 pages, its stashed table
    /// freed.
    pub(crate) fn remove_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) {
        let va = va & !(L2_SIZE - 1);
        let l2_pa = self.entry(env.mem, pm, va, L2_SHIFT).expect("remove_l2: no L2 table");
        let old = Desc::read(env.mem, l2_pa);
        let inv = radix::clear::<Desc>(env.mem, l2_pa, va, L2_SIZE);
        // Promotion broke the 4 KB entries before making the block: one
        // TLBI for the block's one TLB entry suffices.
        self.invalidate_page(env, pm, inv, true);
        self.pm_mut(pm).resident -= LN_ENTRIES;
        if old.has(DescFlags::SW_MANAGED) {
            let frame = old.block_oa(L2_SHIFT);
            self.pv.del_sp(frame, pm, va);
            Self::release_pages(env, PhysAddr(frame).pfn_4k(), LN_ENTRIES, old);
        }
        self.pm_mut(pm).stash.discard(env, va, free);
        self.unwire(env, pm, va, 2, 1, free);
    }

    /// Removes a whole 1 GB block of large-page memory.
    fn remove_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, l1_pa: PhysAddr, free: &mut Vec<Pfn>) {
        let inv = radix::clear::<Desc>(env.mem, l1_pa, va, L1_SIZE);
        self.invalidate_page(env, pm, inv, true);
        self.pm_mut(pm).resident -= L1_SIZE / L3_SIZE;
        self.unwire(env, pm, va, 1, 1, free);
    }

    /// Applies a protection change to an entry of `npages` pages from
    /// `m0`; when write access goes, a dirty managed mapping's modified
    /// state moves to its pages.
    fn masked(env: &mut PmapEnv, old: Desc, ms: MaskSet, m0: Pfn, npages: u64) -> Desc {
        if ms.write_protects() && old.has(DescFlags::SW_MANAGED) && Self::dirty(old) {
            for k in 0..npages as u32 {
                ptpage::dirty(env, Pfn(m0.0 + k));
            }
        }
        ms.apply(old)
    }

    /// Changes a whole 2 MB block (pmap_protect_l2).
    fn protect_l2(&mut self, env: &mut PmapEnv, pm: PmapId, l2_pa: PhysAddr, va: u64, ms: MaskSet) {
        let old = Desc::read(env.mem, l2_pa);
        if ms.holds(old) {
            return;
        }
        let new = Self::masked(env, old, ms, PhysAddr(old.block_oa(L2_SHIFT)).pfn_4k(), LN_ENTRIES);
        let inv = radix::update(env.mem, l2_pa, new, va, L2_SIZE);
        self.invalidate_page(env, pm, inv, true);
    }

    /// Changes the whole 64 KB run at `va` in place (pmap_mask_set_l3c):
    /// the run's dirty state, from any of its entries, is what write
    /// protection saves.
    fn mask_set_l3c(env: &mut PmapEnv, first: PhysAddr, va: u64, ms: MaskSet) -> Invalidate {
        let whole = Self::load_l3c(env.mem, first);
        Self::masked(env, whole, ms, PhysAddr(whole.oa()).pfn_4k(), L3C_ENTRIES);
        for k in 0..L3C_ENTRIES {
            let pa = PhysAddr(first.0 + k * 8);
            let e = Desc::read(env.mem, pa);
            radix::wr(env.mem, pa, ms.apply(e));
        }
        Invalidate::new(va, L3C_SIZE)
    }

    /// pmap_advise over the L3 entries of `range` in `table`: each
    /// managed entry loses AF, a dirty one becomes clean (DONTNEED first
    /// gives its modified state to the page); a dirty one in a 64 KB run
    /// demotes the run, whose last page in the range is removed, since no
    /// run may be writable but clean. Changes are invalidated by runs.
    fn advise_l3_range(&mut self, env: &mut PmapEnv, pm: PmapId, range: Range<u64>, table: u64, advice: Advice, free: &mut Vec<Pfn>) {
        let end = range.end;
        let mut run = Batch::new();
        let mut v = range.start;
        while v < end {
            let pa = radix::slot(table, v, L3_SHIFT);
            let e = Desc::read(env.mem, pa);
            if !e.is_table_or_page() || !e.has(DescFlags::SW_MANAGED) || !(Self::dirty(e) || e.has(DescFlags::AF)) {
                self.flush(env, pm, &mut run);
                v += L3_SIZE;
                continue;
            }
            if Self::dirty(e) {
                if advice == Advice::DontNeed {
                    ptpage::dirty(env, PhysAddr(e.oa()).pfn_4k());
                }
                if e.has(DescFlags::CONTIGUOUS) {
                    self.demote_l3c(env, pm, pa, v);
                    if !e.has(DescFlags::SW_WIRED) {
                        let dva = (next_block(v, L3C_SIZE) - L3_SIZE).min(end - L3_SIZE);
                        self.remove_l3_range(env, pm, dva, dva + L3_SIZE, table, free);
                    }
                }
                let e = Desc::read(env.mem, pa);
                if e.valid() {
                    run.add(radix::update(env.mem, pa, e.without(DescFlags::AF).with(DescFlags::AP_RO), v, L3_SIZE));
                } else {
                    // Removed above, and invalidated there; the run's
                    // range covers it again.
                    run.add(Invalidate::new(v, L3_SIZE));
                }
            } else {
                // Clear AF in this entry, whatever its Contiguous bit.
                run.add(radix::update(env.mem, pa, e.without(DescFlags::AF), v, L3_SIZE));
            }
            v += L3_SIZE;
        }
        self.flush(env, pm, &mut run);
    }

    /// pmap_mask_set over the L3 entries of [sva, eva) in `table`.
    fn mask_set_l3_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, table: u64, ms: MaskSet) {
        let mut run = Batch::new();
        let mut va = sva;
        while va < eva {
            let pa = radix::slot(table, va, L3_SHIFT);
            let e = Desc::read(env.mem, pa);
            if !e.valid() || ms.holds(e) {
                self.flush(env, pm, &mut run);
                // The rest of a run has the same bits.
                va = if e.valid() && e.has(DescFlags::CONTIGUOUS) { next_block(va, L3C_SIZE) } else { va + L3_SIZE };
                continue;
            }
            if e.has(DescFlags::CONTIGUOUS) {
                if covers(va, eva, L3C_SIZE) {
                    run.add(Self::mask_set_l3c(env, pa, va, ms));
                    va += L3C_SIZE;
                    continue;
                }
                self.demote_l3c(env, pm, pa, va);
            }
            let e = Desc::read(env.mem, pa);
            let new = Self::masked(env, e, ms, PhysAddr(e.oa()).pfn_4k(), 1);
            run.add(radix::update(env.mem, pa, new, va, L3_SIZE));
            va += L3_SIZE;
        }
        self.flush(env, pm, &mut run);
    }

}

impl Remove for Arm64 {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            // Whole, or no page for the demotion: drop it all.
            Part::Leaf1g(pa) if covers(va, eva, L1_SIZE) || p.demote_l1(env, pm, va).is_err() => {
                p.remove_l1(env, pm, va & !(L1_SIZE - 1), pa, &mut free);
                Next::Past
            }
            Part::Leaf2m(_) if covers(va, eva, L2_SIZE) => {
                p.remove_l2(env, pm, va, &mut free);
                Next::Past
            }
            Part::Leaf2m(_) if !p.demote_l2(env, pm, va) => Next::Past,
            Part::Leaf1g(_) | Part::Leaf2m(_) => Next::Again,
            Part::Table(table) => {
                p.remove_l3_range(env, pm, va, next_block(va, L2_SIZE).min(eva), table, &mut free);
                Next::Past
            }
        });
        ptpage::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): 2 MB blocks of
    /// its frame are demoted first, 64 KB runs holding it too.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        base::remove_all_demoting(self, env, m, Self::demote_l2, |p, env, pm, va, free| {
            let pa = p.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 entry");
            if Desc::read(env.mem, pa).has(DescFlags::CONTIGUOUS) {
                p.demote_l3c(env, pm, pa, va);
            }
            let old = Desc::read(env.mem, pa);
            let inv = radix::clear::<Desc>(env.mem, pa, va, L3_SIZE);
            if old.has(DescFlags::AF) {
                p.invalidate_page(env, pm, inv, true);
            } else {
                // Never accessed: no TLB holds it.
                inv.unneeded();
            }
            p.removed_l3(env, pm, va, old);
            p.unwire(env, pm, va, 3, 1, free);
        });
    }

    /// pmap_protect: removing write access sets AP[2] and clears DBM;
    /// removing execute access sets UXN.
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if pr & prot::READ == 0 {
            return self.remove(env, pm, sva, eva);
        }
        let mut ms = MaskSet { mask: 0, bits: 0 };
        if pr & prot::WRITE == 0 {
            ms.mask |= (DescFlags::AP_RO | DescFlags::DBM).bits();
            ms.bits |= DescFlags::AP_RO.bits();
        }
        if pr & prot::EXEC == 0 {
            ms.mask |= DescFlags::UXN.bits();
            ms.bits |= DescFlags::UXN.bits();
        }
        if ms.mask == 0 {
            return;
        }
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Leaf1g(pa) if covers(va, eva, L1_SIZE) => {
                let old = Desc::read(env.mem, pa);
                if !ms.holds(old) {
                    let inv = radix::update(env.mem, pa, ms.apply(old), va, L1_SIZE);
                    p.invalidate_page(env, pm, inv, true);
                }
                Next::Past
            }
            Part::Leaf1g(_) if p.demote_l1(env, pm, va).is_err() => Next::Past,
            Part::Leaf2m(pa) if covers(va, eva, L2_SIZE) => {
                p.protect_l2(env, pm, pa, va, ms);
                Next::Past
            }
            Part::Leaf2m(_) if !p.demote_l2(env, pm, va) => Next::Past,
            Part::Leaf1g(_) | Part::Leaf2m(_) => Next::Again,
            Part::Table(table) => {
                p.mask_set_l3_range(env, pm, va, next_block(va, L2_SIZE).min(eva), table, ms);
                Next::Past
            }
        });
    }

    /// Write-protects every mapping of `m` (pmap_remove_write): writable 2 MB
    /// blocks of its frame are demoted first, writable 64 KB runs too.
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr_4k().0) {
            let l2_pa = self.entry(env.mem, pm, va, L2_SHIFT).expect("PV entry without an L2 entry");
            if Desc::read(env.mem, l2_pa).has(DescFlags::DBM) {
                self.demote_l2(env, pm, va);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.entry(env.mem, pm, va, L3_SHIFT).expect("PV entry without an L3 entry");
            let e = Desc::read(env.mem, pa);
            if !e.has(DescFlags::DBM) {
                continue;
            }
            if e.has(DescFlags::CONTIGUOUS) {
                self.demote_l3c(env, pm, pa, va);
            }
            let e = Desc::read(env.mem, pa);
            let inv = radix::update(env.mem, pa, e.with(DescFlags::AP_RO).without(DescFlags::DBM), va, L3_SIZE);
            if e.written() {
                ptpage::dirty(env, m);
            }
            self.invalidate_page(env, pm, inv, true);
        }
    }

    /// pmap_advise for MADV_DONTNEED and MADV_FREE. A 2 MB block in the
    /// range is demoted and, unless wired, the mapping of the last page of
    /// the range inside it removed so that a later access can repromote.
    /// Then each managed L3 entry loses AF, and a dirty one becomes clean
    /// (DONTNEED first gives its modified state to the page); a dirty one
    /// in a 64 KB run demotes the run, whose last page in the range is
    /// removed likewise, since no run may be writable but clean.
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, advice: Advice) {
        let mut free = Vec::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| {
            let end = next_block(va, L2_SIZE).min(eva);
            let table = match part {
                Part::Leaf1g(_) => return Next::Past,
                Part::Leaf2m(pa) => {
                    let old = Desc::read(env.mem, pa);
                    if !old.has(DescFlags::SW_MANAGED) || !p.demote_l2(env, pm, va) {
                        return Next::Past;
                    }
                    let table = Desc::read(env.mem, pa).oa();
                    if !old.has(DescFlags::SW_WIRED) {
                        p.remove_l3_range(env, pm, end - L3_SIZE, end, table, &mut free);
                    }
                    table
                }
                Part::Table(table) => table,
            };
            p.advise_l3_range(env, pm, va..end, table, advice, &mut free);
            Next::Past
        });
        ptpage::free_all(env, free);
    }
}
