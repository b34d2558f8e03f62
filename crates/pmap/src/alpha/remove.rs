//! Removing and changing mappings: pmap_remove, pmap_remove_all,
//! pmap_protect and pmap_remove_write. Blocks that straddle either end of
//! a range are demoted first; whole blocks inside change entry by entry.

use super::{is_dirty, Alpha};
use crate::base::Remove;
use crate::ptpage;
use splab_hw::alpha::{Pte, PteFlags, L2_SHIFT, PAGE_SIZE};
use splab_hw::{Pfn, PhysAddr};
use crate::shootdown::{Batch, Invalidate};
use splab_vm::pmap::{prot, Advice, PmapEnv, PmapId, Prot};

impl Alpha {
    /// Removes `va`'s valid single-page entry (GH 0 or a block being
    /// removed whole): PV entry, modified and referenced state to the page
    /// (pmap_remove_pte). The table's count is the caller's.
    pub(crate) fn remove_one(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Invalidate {
        let p = self.l3pte(env.mem, pm, va).expect("entry's table");
        let e = Self::rd(env.mem, p);
        let inv = Self::update(env.mem, p, Pte::EMPTY, va, PAGE_SIZE);
        self.pm_mut(pm).resident -= 1;
        if e.has(PteFlags::MANAGED) {
            let m = env.mem.pfn(PhysAddr(e.frame()));
            ptpage::hand_over(env, m, 1, is_dirty(e), !e.has(PteFlags::FOR));
            self.pv.del(env, m, pm, va);
        }
        inv
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
}

impl Remove for Alpha {
    /// pmap_remove: blocks straddling the ends are demoted first; whole
    /// blocks inside go entry by entry with one invalidation.
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        self.demote_ends(env, pm, sva, eva);
        for (va, stop) in self.table_spans(pm, sva, eva) {
            let mut batch = Batch::new();
            let mut removed = 0;
            let mut a = va;
            while a < stop {
                let p = self.l3pte(env.mem, pm, a).expect("table present");
                if Self::rd(env.mem, p).valid() {
                    batch.add(self.remove_one(env, pm, a));
                    removed += 1;
                }
                a += PAGE_SIZE;
            }
            self.invalidate_range(env, pm, &mut batch, va, stop - va);
            if removed > 0 {
                self.count(env, pm, va, -removed);
            }
        }
    }

    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            self.remove(env, pm, va, va + PAGE_SIZE);
        }
    }

    /// pmap_protect: only ever takes rights away. Removing read removes
    /// the mappings; removing write records a modification in the page and
    /// sets FOW; removing execute sets FOE. Blocks straddling the ends are
    /// demoted first, so every block keeps identical entries.
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, pr: Prot) {
        if pr & prot::READ == 0 {
            self.remove(env, pm, sva, eva);
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
            let mut batch = Batch::new();
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
                    batch.add(Self::update(env.mem, p, n, a, PAGE_SIZE));
                }
                a += PAGE_SIZE;
            }
            self.invalidate_range(env, pm, &mut batch, va, stop - va);
        }
    }

    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        for (pm, va) in self.pv.list(env, m) {
            self.protect(env, pm, va, va + PAGE_SIZE, prot::READ | prot::EXEC);
        }
    }

    /// FreeBSD's alpha pmap predates pmap_advise (added in FreeBSD 10,
    /// after the port was removed): MADV_DONTNEED and MADV_FREE change no
    /// mapping.
    fn advise(&mut self, _env: &mut PmapEnv, _pm: PmapId, _sva: u64, _eva: u64, _advice: Advice) {}
}
