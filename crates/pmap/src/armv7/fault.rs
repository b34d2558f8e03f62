//! Software emulation of the referenced and modified bits (pmap_fault).
//!
//! FreeBSD's armv7 abort handler gives every access flag and permission
//! abort to pmap_fault before vm_fault. An access flag fault (AP[0] clear
//! on the section or page used) is resolved by setting PTE2_A; a write
//! permission fault on a mapping that is writable but not yet modified
//! (PTE2_NM set, PTE2_RO clear) by clearing PTE2_NM. A large page's 16
//! entries change together. Faults the hardware raised through a stale
//! TLB entry find nothing to change and are resolved too (the trap path
//! has already dropped this CPU's translation of the address); anything
//! the mapping does not permit goes on to vm_fault.

use super::{Leaf, Armv7, PTE2_A, PTE2_NM, PTE2_NX, PTE2_RO, PTE2_U};
use splab_hw::armv7::pte::{L2Desc, SmallFlags};
use splab_hw::armv7::REPLICAS;
use splab_hw::PhysAddr;
use splab_vm::pmap::{prot, PmapEnv, PmapId, Prot};

impl Armv7 {
    /// What to change in a user mapping with attributes `f` for `access`:
    /// the bits to set and to clear, or None if vm_fault must handle it.
    fn emulate(&mut self, f: SmallFlags, access: Prot) -> Option<(SmallFlags, SmallFlags)> {
        if !f.contains(PTE2_U) {
            return None;
        }
        if !f.contains(PTE2_A) {
            // FAULT_ACCESS_L1/L2: checked before permissions; a retry
            // raises the permission fault if there is one.
            self.st.af_faults += 1;
            return Some((PTE2_A, SmallFlags::empty()));
        }
        if access & prot::WRITE != 0 {
            if f.contains(PTE2_RO) {
                return None;
            }
            if f.contains(PTE2_NM) {
                // FAULT_PERM_L1/L2 with FSR_WNR: the first write.
                self.st.nm_faults += 1;
                return Some((SmallFlags::empty(), PTE2_NM));
            }
        }
        if access & prot::EXEC != 0 && f.contains(PTE2_NX) {
            return None;
        }
        Some((SmallFlags::empty(), SmallFlags::empty()))
    }

    /// Returns whether the fault at `va` for `access` was resolved here.
    pub(crate) fn pmap_fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        match self.find(env.mem, pm, va) {
            None => false,
            Some(Leaf::Section(p1, e)) => {
                let Some((set, clear)) = self.emulate(SmallFlags::from_section(e.flags()), access) else { return false };
                Self::wr1(env.mem, p1, e.with(set.to_section()).without(clear.to_section()));
                true
            }
            Some(Leaf::Pte2(p2, e)) => {
                let Some((set, clear)) = self.emulate(e.attrs(), access) else { return false };
                let n = e.with(set).without(clear);
                if n != e {
                    Self::write_entry(env, p2, va, e, n);
                }
                true
            }
        }
    }

    /// Writes `n` over the entry `e` at `p2` (for `va`): over all 16
    /// entries if `e` belongs to a large page.
    fn write_entry(env: &mut PmapEnv, p2: PhysAddr, va: u64, e: L2Desc, n: L2Desc) {
        if e.is_large() {
            let p0 = p2.0 - ((va >> 12) & (REPLICAS - 1)) * 4;
            for i in 0..REPLICAS {
                Self::wr2(env.mem, PhysAddr(p0 + i * 4), n);
            }
        } else {
            Self::wr2(env.mem, p2, n);
        }
    }
}
