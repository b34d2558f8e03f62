//! Removing and changing mappings: pmap_remove (whole 2 MB blocks and
//! 64 KB runs in one step, partial ones demoted first), pmap_remove_all,
//! pmap_protect (pmap_mask_set with pmap_protect_l2 and
//! pmap_mask_set_l3c), pmap_remove_write and pmap_advise.
//!
//! TLB invalidation of L3 entries is batched as FreeBSD batches it: a
//! run of changed addresses is invalidated in one range (one TLBI per
//! page) when the run ends.

use super::{next_block, At, Arm64};
use crate::base::Remove;
use crate::ptpage;
use splab_hw::arm64::pte::{Desc, DescFlags};
use splab_hw::arm64::{L1_SIZE, L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3C_SIZE, L3_SHIFT, L3_SIZE, LN_ENTRIES};
use splab_hw::{PhysAddr, Pfn};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

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

/// The start of a run of changed addresses not yet invalidated.
struct Pending(Option<u64>);

impl Pending {
    fn add(&mut self, va: u64) {
        self.0.get_or_insert(va);
    }
}

impl Arm64 {
    /// Invalidates the pending run up to `end` and starts a new one.
    fn flush(&mut self, env: &mut PmapEnv, pm: PmapId, p: &mut Pending, end: u64) {
        if let Some(start) = p.0.take() {
            self.invalidate_range(env, pm, start, end, true);
        }
    }

    /// Bookkeeping for a managed mapping of `n` pages from `m0` just
    /// cleared, whose entry (or the run's combined entry) was `old`: the
    /// dirty and referenced state moves to the pages.
    fn release_pages(env: &mut PmapEnv, m0: Pfn, n: u64, old: Desc) {
        for k in 0..n as u32 {
            if Self::dirty(old) {
                ptpage::dirty(env, Pfn(m0.0 + k));
            }
            if old.has(DescFlags::AF) {
                ptpage::referenced(env, Pfn(m0.0 + k));
            }
        }
    }

    /// Bookkeeping for one L3 entry just cleared (the body of
    /// pmap_remove_l3): resident count, page state, PV entry.
    fn removed_l3(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, old: Desc) {
        self.pm_mut(pm).resident -= 1;
        if old.has(DescFlags::SW_MANAGED) {
            let m = PhysAddr(old.oa()).pfn();
            Self::release_pages(env, m, 1, old);
            self.pv.del(env, m, pm, va);
        }
    }

    /// Removes the whole 64 KB run starting at `va`, whose first entry is
    /// at `first` (pmap_remove_l3c). Returns whether its L3 table was
    /// freed.
    fn remove_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, first: PhysAddr, va: u64, free: &mut Vec<Pfn>) -> bool {
        let whole = Self::load_l3c(env.mem, first);
        for k in 0..L3C_ENTRIES {
            Self::wr(env.mem, PhysAddr(first.0 + k * 8), Desc::EMPTY);
        }
        self.pm_mut(pm).resident -= L3C_ENTRIES;
        if whole.has(DescFlags::SW_MANAGED) {
            let m0 = PhysAddr(whole.oa()).pfn();
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
        let mut pending = Pending(None);
        let mut va = sva;
        while va < eva {
            let pa = Self::slot(table, va, L3_SHIFT);
            let e = Self::rd(env.mem, pa);
            if !e.valid() {
                self.flush(env, pm, &mut pending, va);
                va += L3_SIZE;
                continue;
            }
            if e.has(DescFlags::CONTIGUOUS) {
                if va.is_multiple_of(L3C_SIZE) && va + L3C_SIZE <= eva {
                    pending.add(va);
                    let freed = self.remove_l3c(env, pm, pa, va, free);
                    va += L3C_SIZE;
                    if freed {
                        break;
                    }
                    continue;
                }
                self.demote_l3c(env, pm, pa, va);
            }
            let old = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, Desc::EMPTY);
            self.removed_l3(env, pm, va, old);
            pending.add(va);
            va += L3_SIZE;
            if self.unwire(env, pm, va - L3_SIZE, 3, 1, free) {
                break;
            }
        }
        self.flush(env, pm, &mut pending, va);
    }

    /// Removes a whole 2 MB block (pmap_remove_l2): its PV entry, its dirty
    /// and referenced state given to all 512 pages, its stashed table
    /// freed.
    pub(crate) fn remove_l2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) {
        let va = va & !(L2_SIZE - 1);
        let l2_pa = self.l2_pa(env.mem, pm, va).expect("remove_l2: no L2 table");
        let old = Self::rd(env.mem, l2_pa);
        Self::wr(env.mem, l2_pa, Desc::EMPTY);
        // Promotion broke the 4 KB entries before making the block: one
        // TLBI for the block's one TLB entry suffices.
        self.invalidate_page(env, pm, va, true);
        self.pm_mut(pm).resident -= LN_ENTRIES;
        if old.has(DescFlags::SW_MANAGED) {
            let frame = old.block_oa(L2_SHIFT);
            self.pv.del_sp(frame, pm, va);
            Self::release_pages(env, PhysAddr(frame).pfn(), LN_ENTRIES, old);
        }
        self.pm_mut(pm).stash.discard(env, va, free);
        self.unwire(env, pm, va, 2, 1, free);
    }

    /// Removes a whole 1 GB block of large-page memory.
    fn remove_l1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, l1_pa: PhysAddr, free: &mut Vec<Pfn>) {
        Self::wr(env.mem, l1_pa, Desc::EMPTY);
        self.invalidate_page(env, pm, va, true);
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
        let old = Self::rd(env.mem, l2_pa);
        if ms.holds(old) {
            return;
        }
        let new = Self::masked(env, old, ms, PhysAddr(old.block_oa(L2_SHIFT)).pfn(), LN_ENTRIES);
        Self::wr(env.mem, l2_pa, new);
        self.invalidate_page(env, pm, va, true);
    }

    /// Changes a whole 64 KB run in place (pmap_mask_set_l3c): the run's
    /// dirty state, from any of its entries, is what write protection
    /// saves.
    fn mask_set_l3c(env: &mut PmapEnv, first: PhysAddr, ms: MaskSet) {
        let whole = Self::load_l3c(env.mem, first);
        Self::masked(env, whole, ms, PhysAddr(whole.oa()).pfn(), L3C_ENTRIES);
        for k in 0..L3C_ENTRIES {
            let pa = PhysAddr(first.0 + k * 8);
            let e = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, ms.apply(e));
        }
    }

    /// pmap_mask_set over the L3 entries of [sva, eva) in `table`.
    fn mask_set_l3_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, table: u64, ms: MaskSet) {
        let mut pending = Pending(None);
        let mut va = sva;
        while va < eva {
            let pa = Self::slot(table, va, L3_SHIFT);
            let e = Self::rd(env.mem, pa);
            if !e.valid() || ms.holds(e) {
                self.flush(env, pm, &mut pending, va);
                // The rest of a run has the same bits.
                va = if e.valid() && e.has(DescFlags::CONTIGUOUS) { next_block(va, L3C_SIZE) } else { va + L3_SIZE };
                continue;
            }
            if e.has(DescFlags::CONTIGUOUS) {
                if va.is_multiple_of(L3C_SIZE) && va + L3C_SIZE <= eva {
                    Self::mask_set_l3c(env, pa, ms);
                    pending.add(va);
                    va += L3C_SIZE;
                    continue;
                }
                self.demote_l3c(env, pm, pa, va);
            }
            let e = Self::rd(env.mem, pa);
            let new = Self::masked(env, e, ms, PhysAddr(e.oa()).pfn(), 1);
            Self::wr(env.mem, pa, new);
            pending.add(va);
            va += L3_SIZE;
        }
        self.flush(env, pm, &mut pending, va.min(eva));
    }

}

impl Remove for Arm64 {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        let mut va = sva;
        while va < eva && self.pm(pm).resident > 0 {
            match self.at(env.mem, pm, va) {
                At::Skip(next) => va = next,
                At::L1Block(pa) => {
                    let next = next_block(va, L1_SIZE);
                    if (va.is_multiple_of(L1_SIZE) && next <= eva) || self.demote_l1(env, pm, va).is_err() {
                        // Whole, or no page for the demotion: drop it all.
                        self.remove_l1(env, pm, va & !(L1_SIZE - 1), pa, &mut free);
                        va = next;
                    }
                }
                At::L2Block(_) => {
                    let next = next_block(va, L2_SIZE);
                    if va.is_multiple_of(L2_SIZE) && next <= eva {
                        self.remove_l2(env, pm, va, &mut free);
                        va = next;
                    } else if !self.demote_l2(env, pm, va) {
                        va = next;
                    }
                }
                At::L3Table(table) => {
                    let next = next_block(va, L2_SIZE);
                    self.remove_l3_range(env, pm, va, next.min(eva), table, &mut free);
                    va = next;
                }
            }
        }
        Self::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): 2 MB blocks of
    /// its frame are demoted first, 64 KB runs holding it too.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        let mut free = Vec::new();
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            self.demote_l2(env, pm, va);
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.l3_pa(env.mem, pm, va).expect("PV entry without an L3 entry");
            if Self::rd(env.mem, pa).has(DescFlags::CONTIGUOUS) {
                self.demote_l3c(env, pm, pa, va);
            }
            let old = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, Desc::EMPTY);
            if old.has(DescFlags::AF) {
                self.invalidate_page(env, pm, va, true);
            }
            self.removed_l3(env, pm, va, old);
            self.unwire(env, pm, va, 3, 1, &mut free);
        }
        Self::free_all(env, free);
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
        let mut va = sva;
        while va < eva {
            match self.at(env.mem, pm, va) {
                At::Skip(next) => va = next,
                At::L1Block(pa) => {
                    let next = next_block(va, L1_SIZE);
                    if va.is_multiple_of(L1_SIZE) && next <= eva {
                        let old = Self::rd(env.mem, pa);
                        if !ms.holds(old) {
                            Self::wr(env.mem, pa, ms.apply(old));
                            self.invalidate_page(env, pm, va, true);
                        }
                        va = next;
                    } else if self.demote_l1(env, pm, va).is_err() {
                        va = next;
                    }
                }
                At::L2Block(pa) => {
                    let next = next_block(va, L2_SIZE);
                    if va.is_multiple_of(L2_SIZE) && next <= eva {
                        self.protect_l2(env, pm, pa, va, ms);
                        va = next;
                    } else if !self.demote_l2(env, pm, va) {
                        va = next;
                    }
                }
                At::L3Table(table) => {
                    let next = next_block(va, L2_SIZE);
                    self.mask_set_l3_range(env, pm, va, next.min(eva), table, ms);
                    va = next;
                }
            }
        }
    }

    /// Write-protects every mapping of `m` (pmap_remove_write): writable 2 MB
    /// blocks of its frame are demoted first, writable 64 KB runs too.
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr().0) {
            let l2_pa = self.l2_pa(env.mem, pm, va).expect("PV entry without an L2 entry");
            if Self::rd(env.mem, l2_pa).has(DescFlags::DBM) {
                self.demote_l2(env, pm, va);
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let pa = self.l3_pa(env.mem, pm, va).expect("PV entry without an L3 entry");
            let e = Self::rd(env.mem, pa);
            if !e.has(DescFlags::DBM) {
                continue;
            }
            if e.has(DescFlags::CONTIGUOUS) {
                self.demote_l3c(env, pm, pa, va);
            }
            let e = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, e.with(DescFlags::AP_RO).without(DescFlags::DBM));
            if e.written() {
                ptpage::dirty(env, m);
            }
            self.invalidate_page(env, pm, va, true);
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
        let mut va = sva;
        while va < eva {
            let next = next_block(va, L2_SIZE);
            let table = match self.at(env.mem, pm, va) {
                At::Skip(n) => {
                    va = n;
                    continue;
                }
                At::L1Block(_) => {
                    va = next_block(va, L1_SIZE);
                    continue;
                }
                At::L2Block(pa) => {
                    let old = Self::rd(env.mem, pa);
                    if !old.has(DescFlags::SW_MANAGED) || !self.demote_l2(env, pm, va) {
                        va = next;
                        continue;
                    }
                    let table = Self::rd(env.mem, pa).oa();
                    if !old.has(DescFlags::SW_WIRED) {
                        let last = next.min(eva) - L3_SIZE;
                        self.remove_l3_range(env, pm, last, last + L3_SIZE, table, &mut free);
                    }
                    table
                }
                At::L3Table(table) => table,
            };
            let end = next.min(eva);
            let mut pending = Pending(None);
            let mut v = va;
            while v < end {
                let pa = Self::slot(table, v, L3_SHIFT);
                let e = Self::rd(env.mem, pa);
                if !e.is_table_or_page() || !e.has(DescFlags::SW_MANAGED) || !(Self::dirty(e) || e.has(DescFlags::AF)) {
                    self.flush(env, pm, &mut pending, v);
                    v += L3_SIZE;
                    continue;
                }
                if Self::dirty(e) {
                    if advice == Advice::DontNeed {
                        ptpage::dirty(env, PhysAddr(e.oa()).pfn());
                    }
                    if e.has(DescFlags::CONTIGUOUS) {
                        self.demote_l3c(env, pm, pa, v);
                        if !e.has(DescFlags::SW_WIRED) {
                            let dva = (next_block(v, L3C_SIZE) - L3_SIZE).min(end - L3_SIZE);
                            self.remove_l3_range(env, pm, dva, dva + L3_SIZE, table, &mut free);
                        }
                    }
                    let e = Self::rd(env.mem, pa);
                    if e.valid() {
                        Self::wr(env.mem, pa, e.without(DescFlags::AF).with(DescFlags::AP_RO));
                    }
                } else {
                    // Clear AF in this entry, whatever its Contiguous bit.
                    Self::wr(env.mem, pa, e.without(DescFlags::AF));
                }
                pending.add(v);
                v += L3_SIZE;
            }
            self.flush(env, pm, &mut pending, v);
            va = next;
        }
        Self::free_all(env, free);
    }
}
