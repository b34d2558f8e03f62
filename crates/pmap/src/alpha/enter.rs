//! Entering mappings: one 8 KB page (pmap_enter) followed by the
//! promotion of the blocks around it, a whole block of a granularity hint
//! at once, and the resident pages of an object range
//! (pmap_enter_object).

use super::{block_pages, block_size, is_dirty, Alpha};
use crate::base::{each_resident, Enter, Remove};
use crate::ptpage;
use splab_hw::alpha::{Gh, Pte, PteFlags, PAGE_SIZE};
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::pmap::{prot, EnterFlags, PmapEnv, PmapError, PmapId, Prot};

impl Alpha {
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
                        let inv = Self::rewrite_block(env, p0, cnt, va, |x| x.without(clear));
                        self.invalidate(env, pm, inv);
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
                let inv = Self::update(env.mem, p, n, va, PAGE_SIZE);
                self.invalidate(env, pm, inv);
                if managed {
                    self.try_promote(env, pm, va, m);
                }
                return Ok(());
            }
            // Another page: the old mapping goes first; the entry stays
            // counted, as the new one takes its place.
            let inv = self.remove_one(env, pm, va);
            self.invalidate(env, pm, inv);
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
        self.remove(env, pm, va, va + size);
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
}

impl Enter for Alpha {
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind.index() {
            0 => self.enter_page(env, pm, va, m, pr, flags),
            g @ 1..=3 if self.enabled(g as u8) => self.enter_block(env, pm, va, m, pr, flags, g as u8),
            _ => Err(PmapError::BadPsind),
        }
    }

    /// pmap_enter_object: speculative mappings of the resident pages of a
    /// range (FOR set, read-only), 8 KB at a time; blocks form by promotion
    /// as each is completed.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: u64, end: u64, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        let fl = EnterFlags { access: prot::NONE, noreplace: true, ..Default::default() };
        each_resident(start, end, PAGE_SIZE, pages, |va, m| match self.enter_page(env, pm, va, m, pr & !prot::WRITE, fl) {
            Err(PmapError::NoMemory) => None,
            _ => Some(PAGE_SIZE),
        });
    }
}
