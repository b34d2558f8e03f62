//! The Alpha pmap's invariants (see mod.rs), checked by reading every
//! level-3 table of every address space.

use super::{block_pages, Alpha};
use crate::base::Check;
use crate::invariants::{self, Seen};
use splab_hw::alpha::{Pte, PteFlags, L2_SHIFT, PAGE_SIZE};
use splab_hw::PhysAddr;
use splab_vm::pmap::PmapEnv;

impl Check for Alpha {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
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
            invariants::resident(pm, p.resident, &Seen { resident, pv: 0 })?;
        }
        Ok(())
    }
}
