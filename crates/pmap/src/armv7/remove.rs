//! Removing and changing mappings: pmap_remove (sections in one step,
//! partial ones demoted first), pmap_remove_all, pmap_protect,
//! pmap_remove_write and pmap_advise. A large page is changed whole when
//! the range covers all of it, and demoted first otherwise.

use crate::base::{self, Remove};
use super::{is_dirty, Leaf, Armv7, PTE2_A, PTE2_NM, PTE2_NX, PTE2_RO, PTE2_W};
use crate::ptpage;
use crate::radix::{covers, next_block, Next};
use splab_hw::armv7::pte::{L1Desc, L2Desc, SectionFlags, SmallFlags};
use splab_hw::armv7::{l1_index, L2_ENTRIES, LARGE_SIZE, REPLICAS, SECTION_SIZE};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

/// What maps one 1 MB part of a range.
enum Part {
    /// A section; its L1 entry's address and value.
    Section(PhysAddr, L1Desc),
    /// An L2 table.
    Table,
}

impl Armv7 {
    /// Walks [sva, eva) a 1 MB part at a time, as pmap_remove, pmap_protect
    /// and pmap_advise do: `visit` gets each address where a section or an
    /// L2 table maps the range, and says whether to go past it or look
    /// again (after demoting the section); unmapped parts are skipped, and
    /// the walk stops when `pm` maps nothing more.
    fn walk(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, mut visit: impl FnMut(&mut Self, &mut PmapEnv, u64, Part) -> Next) {
        let mut va = sva;
        while va < eva && self.pm(pm).resident > 0 {
            let p1 = self.pte1_pa(pm, va);
            let e1 = Self::rd1(env.mem, p1);
            let part = if e1.is_section() {
                Part::Section(p1, e1)
            } else if e1.is_table() {
                Part::Table
            } else {
                va = next_block(va, SECTION_SIZE);
                continue;
            };
            if let Next::Past = visit(self, env, va, part) {
                va = next_block(va, SECTION_SIZE);
            }
        }
    }

    /// Hands the state of a mapping of `n` pages from `m0` back and drops
    /// nothing else (the per-page part of pmap_remove_pte1).
    fn hand_over_run(env: &mut PmapEnv, m0: Pfn, n: u32, f: SmallFlags) {
        for k in 0..n {
            Self::hand_over(env, Pfn(m0.0 + k), f);
        }
    }

    /// pmap_remove_pte1: removes the section at `va` (1 MB-aligned) in one
    /// step: cleared and flushed (one TLB entry), its PV entry gone, its
    /// state handed to all 256 pages, and the L2 table kept at promotion
    /// cleared and released (pmap_unwire_pt2_all).
    pub(crate) fn remove_pte1(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) {
        debug_assert!(va.is_multiple_of(SECTION_SIZE));
        let p1 = self.pte1_pa(pm, va);
        let old = Self::rd1(env.mem, p1);
        debug_assert!(old.is_section(), "remove_pte1: not a section");
        let inv = Self::update1(env.mem, p1, splab_hw::armv7::pte::L1Desc::FAULT, va, SECTION_SIZE);
        self.tlb_flush(env, pm, inv);
        self.pm_mut(pm).resident -= L2_ENTRIES;
        let m0 = PhysAddr(old.frame()).pfn_4k();
        if ptpage::managed(env, m0) {
            let removed = self.pv.remove_sp(old.frame(), pm, va);
            debug_assert!(removed, "no PV entry for the section at {va:#x}");
            Self::hand_over_run(env, m0, L2_ENTRIES as u32, SmallFlags::from_section(old.flags()));
        }
        let idx = l1_index(va);
        if self.pm(pm).pt2_count[idx as usize] > 0 {
            let table = self.pt2_table(pm, idx).expect("a stash lives in a PT2PG page");
            for i in 0..L2_ENTRIES {
                Self::wr2(env.mem, PhysAddr(table + i * 4), L2Desc::FAULT);
            }
            self.pt2_sub(env, pm, idx, L2_ENTRIES as u16, free);
        }
    }

    /// pmap_remove_pte2: removes one small page: cleared, flushed, handed
    /// back, and its slot counted down (which may free the PT2PG page).
    /// Returns whether the page went.
    fn remove_pte2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, p2: PhysAddr, free: &mut Vec<Pfn>) -> bool {
        let old = Self::rd2(env.mem, p2);
        debug_assert!(old.is_small());
        let inv = Self::update2(env.mem, p2, 1, L2Desc::FAULT, va);
        self.tlb_flush(env, pm, inv);
        self.pm_mut(pm).resident -= 1;
        let m = PhysAddr(old.frame()).pfn_4k();
        if ptpage::managed(env, m) {
            Self::hand_over(env, m, old.attrs());
            let removed = self.pv.remove(env, m, pm, va);
            debug_assert!(removed, "no PV entry for {va:#x}");
        }
        self.unuse(env, pm, va, free)
    }

    /// Removes the 4 KB mapping at `va`, demoting the large page holding it
    /// first. Returns whether the PT2PG page went.
    fn remove_page(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> bool {
        let p2 = self.pte2_pa(pm, va).expect("remove_page: no L2 table");
        if Self::rd2(env.mem, p2).is_large() {
            self.demote_large(env, pm, Self::group_base(va));
        }
        self.remove_pte2(env, pm, va, p2, free)
    }

    /// Removes the large page at `base` whole. Returns whether the PT2PG
    /// page went.
    fn remove_large(&mut self, env: &mut PmapEnv, pm: PmapId, base: u64, free: &mut Vec<Pfn>) -> bool {
        let p0 = self.pte2_pa(pm, base).expect("remove_large: no table");
        let old = Self::rd2(env.mem, p0);
        let inv = Self::update2(env.mem, p0, REPLICAS, L2Desc::FAULT, base);
        self.tlb_flush_range(env, pm, inv);
        self.pm_mut(pm).resident -= REPLICAS;
        let m0 = PhysAddr(old.frame()).pfn_4k();
        if ptpage::managed(env, m0) {
            for i in 0..REPLICAS {
                let removed = self.pv.remove(env, Pfn(m0.0 + i as u32), pm, base + i * 4096);
                debug_assert!(removed, "no PV entry for {:#x}", base + i * 4096);
            }
            Self::hand_over_run(env, m0, REPLICAS as u32, old.attrs());
        }
        self.pt2_sub(env, pm, l1_index(base), REPLICAS as u16, free)
    }

    /// Visits the valid entries of [sva, eva) in one L2 table: `f` gets
    /// each small page, and each large page the range covers whole, as
    /// (va, the entry's address, the entry, its size in pages); a large
    /// page partly inside is demoted first, so that only what is in the
    /// range changes. `f` returns false to stop (the table went).
    fn each_in_table(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, mut f: impl FnMut(&mut Self, &mut PmapEnv, u64, PhysAddr, L2Desc, u64) -> bool) {
        let mut va = sva;
        while va < eva {
            let Some(p2) = self.pte2_pa(pm, va) else { return };
            let e = Self::rd2(env.mem, p2);
            let mut n = 1;
            if e.is_large() {
                let base = Self::group_base(va);
                if va != base || base + LARGE_SIZE > eva {
                    self.demote_large(env, pm, base);
                    continue;
                }
                n = REPLICAS;
            }
            if e.valid() && !f(self, env, va, p2, e, n) {
                return;
            }
            va += n * 4096;
        }
    }

    /// Removes the mappings of [sva, eva) in one L2 table (the inner loop
    /// of pmap_remove); stops when the table's page is freed.
    pub(crate) fn remove_range_in_table(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, free: &mut Vec<Pfn>) {
        self.each_in_table(env, pm, sva, eva, |this, env, va, p2, e, _| {
            let gone = if e.is_large() { this.remove_large(env, pm, va, free) } else { this.remove_pte2(env, pm, va, p2, free) };
            !gone
        });
    }

    /// The attributes of an entry under pmap_protect: RO and NM without
    /// write access, NX without execute; a modified managed mapping that
    /// loses write access hands its state to its `n` pages first.
    fn protected(env: &mut PmapEnv, f: SmallFlags, frame: u64, n: u32, pr: Prot) -> SmallFlags {
        let mut nf = f;
        if pr & prot::WRITE == 0 {
            if is_dirty(f) && ptpage::managed(env, PhysAddr(frame).pfn_4k()) {
                for k in 0..n {
                    ptpage::dirty(env, Pfn(PhysAddr(frame).pfn_4k().0 + k));
                }
            }
            nf |= PTE2_RO | PTE2_NM;
        }
        if pr & prot::EXEC == 0 {
            nf |= PTE2_NX;
        }
        nf
    }

    /// Rewrites the attributes of each valid entry of [sva, eva) in one L2
    /// table with `f` (given the attributes, the first frame and the page
    /// count), a large page covered whole as one (its 16 entries, one
    /// 64 KB flush).
    fn update_range_in_table(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, mut f: impl FnMut(&mut PmapEnv, SmallFlags, u64, u32) -> SmallFlags) {
        self.each_in_table(env, pm, sva, eva, |this, env, va, p2, e, n| {
            let nf = f(env, e.attrs(), e.frame(), n as u32);
            if nf != e.attrs() {
                let new = e.without(e.attrs()).with(nf);
                let inv = Self::update2(env.mem, p2, n, new, va);
                this.tlb_flush_range(env, pm, inv);
            }
            true
        });
    }

}

impl Remove for Armv7 {
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        let mut free = Vec::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Section(..) if covers(va, eva, SECTION_SIZE) => {
                p.remove_pte1(env, pm, va, &mut free);
                Next::Past
            }
            // Demotion failed: the section was destroyed.
            Part::Section(..) if !p.demote_pte1(env, pm, va) => Next::Past,
            Part::Section(..) => Next::Again,
            Part::Table => {
                p.remove_range_in_table(env, pm, va, next_block(va, SECTION_SIZE).min(eva), &mut free);
                Next::Past
            }
        });
        ptpage::free_all(env, free);
    }

    /// Removes every mapping of page `m` (pmap_remove_all): sections of its
    /// 1 MB frame and large pages holding it are demoted first.
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        base::remove_all_demoting(self, env, m, Self::demote_pte1, |p, env, pm, va, free| {
            p.remove_page(env, pm, va, free);
        });
    }

    /// pmap_protect: reduces the protection of [sva, eva) to `pr`.
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if base::protect_needs_nothing_more(self, env, pm, sva, eva, pr) {
            return;
        }
        self.walk(env, pm, sva, eva, |p, env, va, part| match part {
            Part::Section(p1, e1) if covers(va, eva, SECTION_SIZE) => {
                // pmap_protect_pte1: one flush for the one TLB entry.
                let f = SmallFlags::from_section(e1.flags());
                let nf = Self::protected(env, f, e1.frame(), L2_ENTRIES as u32, pr);
                if nf != f {
                    let inv = Self::update1(env.mem, p1, e1.without(e1.flags() - SectionFlags::SUPER).with(nf.to_section()), va, SECTION_SIZE);
                    p.tlb_flush(env, pm, inv);
                }
                Next::Past
            }
            Part::Section(..) if !p.demote_pte1(env, pm, va) => Next::Past,
            Part::Section(..) => Next::Again,
            Part::Table => {
                p.update_range_in_table(env, pm, va, next_block(va, SECTION_SIZE).min(eva), |env, f, frame, n| Self::protected(env, f, frame, n, pr));
                Next::Past
            }
        });
    }

    /// Write-protects every mapping of `m` (pmap_remove_write): writable
    /// sections of its frame and large pages holding it are demoted first.
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list_sp(m.addr_4k().0) {
            if let Some(Leaf::Section(_, e)) = self.find(env.mem, pm, va) {
                if !SmallFlags::from_section(e.flags()).contains(PTE2_RO) {
                    self.demote_pte1(env, pm, va);
                }
            }
        }
        for (pm, va) in self.pv.list(env, m) {
            let p2 = self.pte2_pa(pm, va).expect("PV entry without an L2 table");
            let e = Self::rd2(env.mem, p2);
            if e.has(PTE2_RO) {
                continue;
            }
            if e.is_large() {
                self.demote_large(env, pm, Self::group_base(va));
            }
            let e = Self::rd2(env.mem, p2);
            if is_dirty(e.attrs()) {
                ptpage::dirty(env, m);
            }
            let inv = Self::update2(env.mem, p2, 1, e.with(PTE2_RO | PTE2_NM), va);
            self.tlb_flush(env, pm, inv);
        }
    }

    /// pmap_advise for MADV_DONTNEED and MADV_FREE: a managed section in
    /// the range is demoted and, unless wired, the small page at the start
    /// of the range removed, so that a later access can repromote; then
    /// each managed mapping loses its referenced bit, and a modified one
    /// becomes unmodified (DONTNEED first hands the modified state to the
    /// page). The next access to each page takes an access flag fault that
    /// pmap_fault resolves.
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, advice: Advice) {
        let mut free = Vec::new();
        self.walk(env, pm, sva, eva, |p, env, va, part| {
            if let Part::Section(_, e1) = part {
                if !ptpage::managed(env, PhysAddr(e1.frame()).pfn_4k()) || !p.demote_pte1(env, pm, va) {
                    return Next::Past;
                }
                if !SmallFlags::from_section(e1.flags()).contains(PTE2_W) {
                    // Never frees the table: it is full.
                    p.remove_page(env, pm, va, &mut free);
                }
                // Its small pages are advised next.
                return Next::Again;
            }
            p.update_range_in_table(env, pm, va, next_block(va, SECTION_SIZE).min(eva), |env, f, frame, n| {
                if !ptpage::managed(env, PhysAddr(frame).pfn_4k()) {
                    return f;
                }
                if is_dirty(f) {
                    if advice == Advice::DontNeed {
                        for k in 0..n {
                            ptpage::dirty(env, Pfn(PhysAddr(frame).pfn_4k().0 + k));
                        }
                    }
                    (f | PTE2_NM) - PTE2_A
                } else {
                    f - PTE2_A
                }
            });
            Next::Past
        });
        ptpage::free_all(env, free);
    }
}
