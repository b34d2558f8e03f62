//! What the kernel does about a storage or segment interrupt before, or
//! instead of, vm_fault.
//!
//! A segment interrupt (no SLB entry for the address's segment) is
//! resolved by handle_user_slb_spill: the segment's VSID, allocated if the
//! segment is new, goes into the user SLB cache, which the return to user
//! space loads into the SLB. A storage interrupt for a page whose PVO
//! exists and permits the access means the PVO's entry was evicted from
//! the HPT: moea64 puts it back when vm_fault calls moea64_enter with the
//! same mapping ("if not in page table, reinsert it"); the model does that
//! here, without the rest of vm_fault. Every other fault goes to vm_fault.
//!
//! The trap handler cannot tell the model which CPU faulted, nor which
//! kind of interrupt it was; it reloads the SLB of every CPU running the
//! address space (each would on its own next return to user space) and
//! infers the kind from the state: a new segment, an evicted entry, or a
//! present one (then the fault was a segment fault on this CPU).

use super::Ppc64;
use splab_hw::ppc64::esid;
use splab_vm::pmap::{PmapEnv, PmapId, Prot};

impl Ppc64 {
    /// Returns whether the fault at `va` for `access` was resolved here.
    pub(crate) fn pmap_fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        let e = esid(va);
        let new_segment = !self.pm(pm).segs.contains_key(&e);
        if self.vsid(env, pm, va).is_err() {
            return false;
        }
        self.slb_insert_user(pm, e);
        self.slb_load(env, pm, e);
        if new_segment {
            self.st.slb_spills += 1;
            return true;
        }
        match self.pvo(pm, va).copied() {
            Some(p) if p.prot & access == access => {
                if p.in_table() {
                    self.st.slb_spills += 1;
                } else {
                    self.pte_reinsert(env, pm, va & !0xfff);
                    self.st.reinserts += 1;
                }
                true
            }
            _ => false,
        }
    }
}
