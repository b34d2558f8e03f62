//! Software maintenance of the accessed and dirty bits (pmap_fault).
//!
//! Without Svadu, a RISC-V walker that finds A clear on the leaf it would
//! use, or D clear on a store, raises an ordinary page fault. FreeBSD's
//! riscv trap handler gives every page fault to pmap_fault first: if a
//! valid user leaf permits the access, it sets A (and D for a store) and
//! the access is retried, without vm_fault. Spurious faults (the bits were
//! already set, another CPU won the race, or a TLB held a stale entry) are
//! resolved the same way.

use super::Riscv;
use crate::radix::{self, Tables};
use splab_hw::riscv::pte::PteFlags;
use splab_vm::pmap::{prot, PmapEnv, PmapId, Prot};

impl Riscv {
    /// Returns whether the fault at `va` for `access` was resolved here.
    /// FreeBSD then fences the local TLB; the trap path has already dropped
    /// this CPU's translations of `va`.
    pub(crate) fn pmap_fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        let Some((e, _, pa)) = self.find_leaf(env.mem, pm, va) else { return false };
        let permits = if access & prot::WRITE != 0 {
            e.has(PteFlags::W)
        } else if access & prot::EXEC != 0 {
            e.has(PteFlags::X)
        } else {
            e.has(PteFlags::R)
        };
        if !e.has(PteFlags::U) || !permits {
            return false;
        }
        let bits = if access & prot::WRITE != 0 { PteFlags::A | PteFlags::D } else { PteFlags::A };
        if !e.has(bits) {
            radix::wr(env.mem, pa, e.with(bits));
        }
        self.st.ad_faults += 1;
        true
    }
}
