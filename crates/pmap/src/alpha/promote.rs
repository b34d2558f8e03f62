//! Granularity-hint superpages: incremental promotion (64 KB, then 512 KB,
//! then 4 MB, each as soon as its block is populated and its entries
//! agree), demotion one level at a time, and the reference/modify
//! emulation that treats a block as one unit. Navarro et al. section 4
//! (promotion "incrementally", demotion "speculatively ... one level at a
//! time"); FreeBSD's alpha pmap_emulate_reference for the trap.

use super::{block_pages, block_size, PmapAlpha};
use splab_hw::alpha::{Gh, Pte, PteFlags, PAGE_SIZE};
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, PmapEnv, PmapId, Prot};

impl PmapAlpha {
    /// The addresses of the entries of the GH-`g` block holding `va`.
    pub(crate) fn block_entries(&self, env: &PmapEnv, pm: PmapId, va: u64, g: u8) -> (u64, PhysAddr, u64) {
        let size = block_size(g);
        let base = va & !(size - 1);
        let p0 = self.l3pte(env.mem, pm, base).expect("block's table present");
        (base, p0, block_pages(g))
    }

    /// Rewrites every entry of the block of `n` entries at `p0` by `f`.
    pub(crate) fn rewrite_block(env: &mut PmapEnv, p0: PhysAddr, n: u64, f: impl Fn(Pte) -> Pte) {
        for i in 0..n {
            let pa = PhysAddr(p0.0 + i * 8);
            let e = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, f(e));
        }
    }

    /// After `va` -> `m` was entered: promotes each enabled level in turn,
    /// smallest first, while the block around `va` is populated in the
    /// reservation (vm_reserv_is_populated) and its entries form a block
    /// (pmap_promote_l3c's checks at each size): the first entry maps an
    /// aligned frame, each next entry the next frame, all with the same
    /// bits but FOR. FOR is cleared in all if any entry is referenced.
    pub(crate) fn try_promote(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn) {
        for g in 1..=3u8 {
            if !self.enabled[g as usize] {
                continue;
            }
            let n = block_pages(g);
            if !env.phys.reserv.is_populated_run(m, n as u32) {
                return;
            }
            let (base, p0, _) = self.block_entries(env, pm, va, g);
            let first = Self::rd(env.mem, p0);
            if first.valid() && first.gh().value() >= g {
                continue;
            }
            if !self.block_agrees(env, p0, n) {
                self.st.gh[g as usize].p_failures += 1;
                return;
            }
            let referenced = (0..n).any(|i| !Self::rd(env.mem, PhysAddr(p0.0 + i * 8)).has(PteFlags::FOR));
            // The TB may hold entries of the smaller blocks: one TBIS for
            // each (any address of an entry invalidates it).
            let mut old = Vec::new();
            for i in 0..n {
                let e = Self::rd(env.mem, PhysAddr(p0.0 + i * 8));
                let sz = block_size(e.gh().value());
                let a = base + i * PAGE_SIZE;
                if a & (sz - 1) == 0 {
                    old.push(a);
                }
            }
            Self::rewrite_block(env, p0, n, |e| {
                let e = e.with_gh(Gh::new(g));
                if referenced {
                    e.without(PteFlags::FOR)
                } else {
                    e
                }
            });
            for a in old {
                self.invalidate(env, pm, a);
            }
            self.st.gh[g as usize].promotions += 1;
            env.ev.promotions += 1;
        }
    }

    /// Whether the `n` entries at `p0` can form a block: valid, the first's
    /// frame aligned to the block, each the next frame, equal but for the
    /// frame, GH and FOR, and none marked NOPROMOTE.
    fn block_agrees(&self, env: &PmapEnv, p0: PhysAddr, n: u64) -> bool {
        let first = Self::rd(env.mem, p0);
        let bits = |e: Pte| e.0 & PteFlags::PROMOTE.bits();
        if !first.valid() || first.has(PteFlags::NOPROMOTE) || !first.pfn().is_multiple_of(n) {
            return false;
        }
        (1..n).all(|i| {
            let e = Self::rd(env.mem, PhysAddr(p0.0 + i * 8));
            e.valid() && e.pfn() == first.pfn() + i && bits(e) == bits(first)
        })
    }

    /// Demotes the blocks holding `va` one level at a time until `va`'s
    /// entry is a single page: at each level all entries of the block take
    /// the next smaller GH, so the sibling blocks stay superpages. In
    /// place: never needs memory, never fails.
    pub(crate) fn demote(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) {
        let Some((p, e)) = self.find(env.mem, pm, va) else { return };
        let mut g = e.gh().value();
        if g == 0 {
            return;
        }
        while g > 0 {
            let (_, p0, n) = self.block_entries(env, pm, va, g);
            Self::rewrite_block(env, p0, n, |e| e.with_gh(Gh::new(g - 1)));
            self.st.gh[g as usize].demotions += 1;
            env.ev.demotions += 1;
            g -= 1;
        }
        debug_assert_eq!(Self::rd(env.mem, p).gh(), Gh::G8K);
        // The TB held one entry for the largest block: TBIS of any of its
        // addresses removes it.
        self.invalidate(env, pm, va);
    }

    /// Demotes so that [sva, eva) covers whole blocks only: the blocks
    /// that straddle either end are demoted (pmap_demote on clipping).
    pub(crate) fn demote_ends(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64) {
        for a in [sva, eva] {
            if let Some((_, e)) = self.find(env.mem, pm, a) {
                let size = block_size(e.gh().value());
                if a & (size - 1) != 0 {
                    self.demote(env, pm, a);
                }
            }
        }
    }

    /// pmap_emulate_reference: a fault-on-read or fault-on-write trap on a
    /// valid entry that permits the access clears FOR (and FOW on a write)
    /// in every entry of its block. Returns whether the trap was this.
    pub(crate) fn emulate_reference(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        let Some((_, e)) = self.find(env.mem, pm, va) else { return false };
        let write = access & prot::WRITE != 0;
        let clear = if write {
            if !e.has(PteFlags::UWE) || !e.any(PteFlags::FOR | PteFlags::FOW) {
                return false;
            }
            self.st.fow_faults += 1;
            PteFlags::FOR | PteFlags::FOW
        } else {
            if access & prot::READ == 0 || !e.has(PteFlags::FOR) {
                return false;
            }
            self.st.for_faults += 1;
            PteFlags::FOR
        };
        let (_, p0, n) = self.block_entries(env, pm, va, e.gh().value());
        Self::rewrite_block(env, p0, n, |x| x.without(clear));
        self.invalidate(env, pm, va);
        true
    }
}
