//! Entering, removing and protecting mappings, and the page daemon's
//! reference and modify operations (pmap_enter, pmap_enter_object,
//! pmap_remove, pmap_protect, pmap_ts_referenced, pmap_clear_modify), and
//! the invariant check.

use super::{block_pages, block_size, is_dirty, PmapAlpha};
use crate::ptpage;
use crate::refbits::TS_REFERENCED_MAX;
use splab_hw::alpha::{Gh, Pte, PteFlags, L2_SHIFT, PAGE_SIZE};
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot};

impl PmapAlpha {
    /// pmap_enter of one 8 KB page, then promotion of the blocks around it.
    pub(crate) fn enter_page(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        let p = self.alloc_l3pte(env, pm, va)?;
        let managed = ptpage::managed(env, m);
        let pa = env.mem.addr(m).0;
        let old = Self::rd(env.mem, p);
        if old.valid() {
            if flags.noreplace {
                return Err(PmapError::Exists);
            }
            if old.frame() == pa && old.gh().value() > 0 {
                // The same page again with the same rights (a retried
                // fault): the block stays; the access is recorded in it.
                let n = Self::new_pte(pa, pr, flags.access, flags.wired, managed, old.gh());
                let same = |e: Pte| e.0 & !PteFlags::FAULT_ON.bits();
                if same(n) == same(old) {
                    let clear = PteFlags::FAULT_ON.difference(n.flags()) & (PteFlags::FOR | PteFlags::FOW);
                    if old.any(clear) {
                        let (_, p0, cnt) = self.block_entries(env, pm, va, old.gh().value());
                        Self::rewrite_block(env, p0, cnt, |x| x.without(clear));
                        self.invalidate(env, pm, va);
                    }
                    return Ok(());
                }
            }
            self.demote(env, pm, va);
            let old = Self::rd(env.mem, p);
            if old.frame() == pa {
                // A protection change of the same page; a recorded write
                // and reference stay.
                let mut n = Self::new_pte(pa, pr, flags.access, flags.wired, managed, Gh::G8K);
                if is_dirty(old) && pr & prot::WRITE != 0 {
                    n = n.without(PteFlags::FOW);
                }
                if !old.has(PteFlags::FOR) {
                    n = n.without(PteFlags::FOR);
                }
                Self::wr(env.mem, p, n);
                self.invalidate(env, pm, va);
                if managed {
                    self.try_promote(env, pm, va, m);
                }
                return Ok(());
            }
            // Another page: the old mapping goes first; the entry stays
            // counted, as the new one takes its place.
            self.remove_one(env, pm, va);
            self.invalidate(env, pm, va);
        } else {
            self.count(env, pm, va, 1);
        }
        Self::wr(env.mem, p, Self::new_pte(pa, pr, flags.access, flags.wired, managed, Gh::G8K));
        self.pm_mut(pm).resident += 1;
        if managed {
            self.pv.add(env, m, pm, va);
            self.try_promote(env, pm, va, m);
        }
        Ok(())
    }

    /// A whole block of GH `g` at once (the soft fault's superpage case and
    /// large-page memory): what was mapped in the range goes, then all
    /// 8^g entries are written with GH g.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enter_block(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags, g: u8) -> Result<(), PmapError> {
        let (size, n) = (block_size(g), block_pages(g));
        if va & (size - 1) != 0 || !(m.0 as u64).is_multiple_of(n) {
            return Err(PmapError::BadPsind);
        }
        self.alloc_l3pte(env, pm, va)?;
        // Keep the table while the old mappings go.
        self.count(env, pm, va, 1);
        self.remove_range(env, pm, va, va + size);
        let managed = ptpage::managed(env, m);
        let p0 = self.l3pte(env.mem, pm, va).expect("table kept");
        for i in 0..n {
            let mi = Pfn(m.0 + i as u32);
            let e = Self::new_pte(env.mem.addr(mi).0, pr, flags.access, flags.wired, managed, Gh::new(g));
            Self::wr(env.mem, PhysAddr(p0.0 + i * 8), e);
            if managed {
                self.pv.add(env, mi, pm, va + i * PAGE_SIZE);
            }
        }
        self.count(env, pm, va, n as i32 - 1);
        self.pm_mut(pm).resident += n;
        self.st.gh[g as usize].mappings += 1;
        Ok(())
    }

    /// pmap_enter_object: speculative mappings of the resident pages of a
    /// range (FOR set, read-only), 8 KB at a time; blocks form by promotion
    /// as each is completed.
    pub(crate) fn enter_object_impl(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let fl = EnterFlags { access: prot::NONE, noreplace: true, ..Default::default() };
        let mut va = start;
        while va < end {
            if let Some(m) = pages(VirtAddr(va)) {
                if self.enter_page(env, pm, va, m, pr & !prot::WRITE, fl) == Err(PmapError::NoMemory) {
                    return;
                }
            }
            va += PAGE_SIZE;
        }
    }

    /// Removes `va`'s valid single-page entry (GH 0 or a block being
    /// removed whole): PV entry, modified and referenced state to the page
    /// (pmap_remove_pte). The table's count is the caller's.
    fn remove_one(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let p = self.l3pte(env.mem, pm, va).expect("entry's table");
        let e = Self::rd(env.mem, p);
        Self::wr(env.mem, p, Pte::EMPTY);
        self.pm_mut(pm).resident -= 1;
        if e.has(PteFlags::MANAGED) {
            let m = env.mem.pfn(PhysAddr(e.frame()));
            if is_dirty(e) {
                ptpage::dirty(env, m);
            }
            if !e.has(PteFlags::FOR) {
                ptpage::referenced(env, m);
            }
            self.pv.remove(env, m, pm, va);
        }
    }

    /// The parts [va, stop) of [sva, eva) that have a level-3 table, one
    /// per table.
    fn table_spans(&self, pm: PmapId, sva: u64, eva: u64) -> Vec<(u64, u64)> {
        let mut v = Vec::new();
        let mut va = sva;
        while va < eva {
            let table_end = ((va >> L2_SHIFT) + 1) << L2_SHIFT;
            if self.pm(pm).l3.contains_key(&(va >> L2_SHIFT)) {
                v.push((va, table_end.min(eva)));
            }
            va = table_end;
        }
        v
    }

    /// pmap_remove: blocks straddling the ends are demoted first; whole
    /// blocks inside go entry by entry with one invalidation.
    pub(crate) fn remove_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        self.demote_ends(env, pm, sva, eva);
        for (va, stop) in self.table_spans(pm, sva, eva) {
            let mut removed = 0;
            let mut a = va;
            while a < stop {
                let p = self.l3pte(env.mem, pm, a).expect("table present");
                if Self::rd(env.mem, p).valid() {
                    self.remove_one(env, pm, a);
                    removed += 1;
                }
                a += PAGE_SIZE;
            }
            if removed > 0 {
                self.invalidate_range(env, pm, va, stop - va);
                self.count(env, pm, va, -removed);
            }
        }
    }

    /// pmap_protect: only ever takes rights away. Removing read removes
    /// the mappings; removing write records a modification in the page and
    /// sets FOW; removing execute sets FOE. Blocks straddling the ends are
    /// demoted first, so every block keeps identical entries.
    pub(crate) fn protect_impl(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if pr & prot::READ == 0 {
            self.remove_range(env, pm, sva, eva);
            return;
        }
        let mut take = PteFlags::empty();
        if pr & prot::WRITE == 0 {
            take |= PteFlags::UWE | PteFlags::KWE;
        }
        let set_foe = pr & prot::EXEC == 0;
        if take.is_empty() && !set_foe {
            return;
        }
        self.demote_ends(env, pm, sva, eva);
        for (va, stop) in self.table_spans(pm, sva, eva) {
            let mut changed = false;
            let mut a = va;
            while a < stop {
                let p = self.l3pte(env.mem, pm, a).expect("table present");
                let e = Self::rd(env.mem, p);
                let mut n = e.without(take);
                if !take.is_empty() {
                    n = n.with(PteFlags::FOW);
                }
                if set_foe {
                    n = n.with(PteFlags::FOE);
                }
                if e.valid() && n != e {
                    if is_dirty(e) && !is_dirty(n) && e.has(PteFlags::MANAGED) {
                        ptpage::dirty(env, env.mem.pfn(PhysAddr(e.frame())));
                    }
                    Self::wr(env.mem, p, n);
                    changed = true;
                }
                a += PAGE_SIZE;
            }
            if changed {
                self.invalidate_range(env, pm, va, stop - va);
            }
        }
    }

    /// pmap_ts_referenced: counts the mappings of `m` with FOR clear and
    /// sets FOR again in their blocks, as FreeBSD's alpha pmap does with
    /// pmap_changebit (a block is referenced as a whole, as the TB sees
    /// it), up to PMAP_TS_REFERENCED_MAX.
    pub(crate) fn ts_referenced_impl(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        let mut n = 0;
        for (pm, va) in self.pv.list(env, m) {
            let Some((_, e)) = self.find(env.mem, pm, va) else { continue };
            if e.has(PteFlags::FOR) {
                continue;
            }
            if is_dirty(e) {
                ptpage::dirty(env, m);
            }
            let (_, p0, cnt) = self.block_entries(env, pm, va, e.gh().value());
            Self::rewrite_block(env, p0, cnt, |x| x.with(PteFlags::FOR));
            self.invalidate(env, pm, va);
            n += 1;
            if n >= TS_REFERENCED_MAX {
                break;
            }
        }
        n
    }

    /// pmap_clear_modify: every writable mapping of `m` that records a
    /// write gets FOW back; a block is demoted first, so that the other
    /// pages of it stay modified.
    pub(crate) fn clear_modify_impl(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            let Some((_, e)) = self.find(env.mem, pm, va) else { continue };
            if !is_dirty(e) {
                continue;
            }
            self.demote(env, pm, va);
            let (p, e) = self.find(env.mem, pm, va).expect("still mapped");
            Self::wr(env.mem, p, e.with(PteFlags::FOW));
            self.invalidate(env, pm, va);
        }
    }

    /// The invariants of the module comment.
    pub(crate) fn check_impl(&self, env: &PmapEnv) -> Result<(), String> {
        for (pm, p) in self.spaces.iter() {
            let mut resident = 0;
            for (&key, &(t, count)) in &p.l3 {
                let base = key << L2_SHIFT;
                let tpa = env.mem.addr(t).0;
                let mut valid = 0;
                for i in 0..1024u64 {
                    let e = Self::rd(env.mem, PhysAddr(tpa + i * 8));
                    if !e.valid() {
                        continue;
                    }
                    valid += 1;
                    let va = base + i * PAGE_SIZE;
                    let g = e.gh().value();
                    let n = block_pages(g);
                    let first = Self::rd(env.mem, PhysAddr(tpa + (i & !(n - 1)) * 8));
                    let same = |x: Pte| x.0 & !(0xffff_ffffu64 << 32) == e.0 & !(0xffff_ffffu64 << 32);
                    if g > 0 && (!same(first) || e.pfn() != first.pfn() + (i & (n - 1)) || !first.pfn().is_multiple_of(n)) {
                        return Err(format!("pmap {pm} va {va:#x}: {e:?} is not in a consistent GH {g} block (first {first:?})"));
                    }
                    if e.has(PteFlags::MANAGED) {
                        let m = env.mem.pfn(PhysAddr(e.frame()));
                        if !self.pv.contains(env, m, pm, va) {
                            return Err(format!("pmap {pm} va {va:#x}: no PV entry on {m:?}"));
                        }
                    }
                }
                if valid != count as u64 {
                    return Err(format!("pmap {pm}: level-3 table {key:#x} counts {count}, holds {valid}"));
                }
                resident += valid;
            }
            if resident != p.resident {
                return Err(format!("pmap {pm}: resident {} but {resident} entries", p.resident));
            }
        }
        Ok(())
    }
}
