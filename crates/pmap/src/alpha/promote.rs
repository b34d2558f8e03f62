//! Granularity-hint superpages: incremental promotion (64 KB, then 512 KB,
//! then 4 MB, each as soon as its block is populated and its entries
//! agree). Navarro et al. section 4 (promotion "incrementally").

use super::{block_pages, block_size, Alpha};
use splab_hw::alpha::{Gh, Pte, PteFlags, PAGE_SIZE};
use splab_hw::{Pfn, PhysAddr};
use crate::shootdown::Invalidate;
use splab_vm::pmap::{PmapEnv, PmapId};

impl Alpha {
    /// The addresses of the entries of the GH-`g` block holding `va`.
    pub(crate) fn block_entries(&self, env: &PmapEnv, pm: PmapId, va: u64, g: u8) -> (u64, PhysAddr, u64) {
        let size = block_size(g);
        let base = va & !(size - 1);
        let p0 = self.l3pte(env.mem, pm, base).expect("block's table present");
        (base, p0, block_pages(g))
    }

    /// Rewrites every entry of the block of `n` entries at `p0`, which
    /// `va` is an address of, by `f`.
    pub(crate) fn rewrite_block(env: &mut PmapEnv, p0: PhysAddr, n: u64, va: u64, f: impl Fn(Pte) -> Pte) -> Invalidate {
        for i in 0..n {
            let pa = PhysAddr(p0.0 + i * 8);
            let e = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, f(e));
        }
        Invalidate::new(va, n * PAGE_SIZE)
    }

    /// After `va` -> `m` was entered: promotes each enabled level in turn,
    /// smallest first, while the block around `va` is populated in the
    /// reservation (vm_reserv_is_populated) and its entries form a block
    /// (pmap_promote_l3c's checks at each size): the first entry maps an
    /// aligned frame, each next entry the next frame, all with the same
    /// bits but FOR. FOR is cleared in all if any entry is referenced.
    pub(crate) fn try_promote(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn) {
        for g in 1..=3u8 {
            if !self.enabled(g) {
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
            let inv = Self::rewrite_block(env, p0, n, base, |e| {
                let e = e.with_gh(Gh::new(g));
                if referenced {
                    e.without(PteFlags::FOR)
                } else {
                    e
                }
            });
            self.invalidate_blocks(env, pm, inv, &old);
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

}
