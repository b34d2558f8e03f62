//! Referenced and modified state for the page daemon: pmap_is_modified,
//! pmap_is_referenced, pmap_ts_referenced, pmap_clear_modify, and dropping
//! every mapping of a 2 MB physical run at once. They are riscv's too, on
//! another format: written once in `crate::pte`, from what amd64 gives
//! them here.
//!
//! The accessed (A) and dirty (D) bits live in the PTEs and PDEs, where the
//! walker sets them. A 2 MB mapping has one A and one D bit for all its 512
//! pages, which is why clearing them is special: A is cleared only for one
//! page in 512 (selected by a hash), and clearing D demotes the superpage
//! so that the other pages keep theirs.

use super::Amd64;
use crate::counters::SizeCounters;
use crate::pte::PtePmap;
use crate::shootdown::Invalidate;
use splab_hw::Pfn;
use splab_vm::pmap::{PmapEnv, PmapId};

impl PtePmap for Amd64 {
    fn demote_2m(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> bool {
        self.demote_pde(env, pm, va)
    }
    fn remove_2m(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> Invalidate {
        self.remove_pde(env, pm, va, free)
    }
    fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        self.invalidate_page(env, pm, inv)
    }
    /// A 2 MB mapping has one TLB entry: INVLPG of its address.
    fn invalidate_superpage(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        self.invalidate_page(env, pm, inv)
    }
    fn counters_2m(&mut self) -> &mut SizeCounters {
        &mut self.st.pde
    }
}
