//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced, pmap_clear_modify, and dropping
//! every mapping of a 2 MB physical run at once. They are amd64's too, on
//! another format: written once in `crate::pte`, from what riscv gives
//! them here.
//!
//! A and D live in the leaves. Without Svadu the walker faults when they
//! are clear and pmap_fault sets them, so clearing A or D in place is
//! always safe: the next access or store through the mapping is seen
//! again. A 2 MB leaf has one A and one D for its 512 pages: A is cleared
//! by one page in 512 (`refbits`), and clearing D demotes the mapping so
//! the other pages keep theirs, as FreeBSD's riscv pmap does.

use super::Riscv;
use crate::counters::SizeCounters;
use crate::pte::PtePmap;
use crate::shootdown::Invalidate;
use splab_hw::Pfn;
use splab_vm::pmap::{PmapEnv, PmapId};

impl PtePmap for Riscv {
    fn demote_2m(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        self.demote_l2(env, pm, va)
    }
    fn remove_2m(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> Invalidate {
        self.remove_l2(env, pm, va, free)
    }
    fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        self.invalidate_page(env, pm, inv)
    }
    /// pmap_remove_l2 fences the whole 2 MB range: 4 KB translations from
    /// before a promotion may still be in TLBs.
    fn invalidate_superpage(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        self.invalidate_range(env, pm, inv)
    }
    fn counters_2m(&mut self) -> &mut SizeCounters {
        &mut self.st.l2
    }
}
