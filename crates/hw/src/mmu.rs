//! The interface between the MMU (TLBs, page-walk caches) and an
//! architecture's hardware page-table walker.
//!
//! A walker reads descriptors in the architecture's real format from
//! modelled physical memory, sets accessed/dirty bits where that hardware
//! does, and returns a `Translation` for the TLB, or a `WalkFault`.

use crate::physmem::PhysMem;
use crate::pwc::Pwc;
use crate::addr::{PhysAddr, VirtAddr};
use serde::{Deserialize, Serialize};

/// The kind of memory access being translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
    Exec,
}

/// Permission bits of a translation as the TLB caches them.
pub mod perm {
    pub const READ: u8 = 1 << 0;
    pub const WRITE: u8 = 1 << 1;
    pub const EXEC: u8 = 1 << 2;
    pub const USER: u8 = 1 << 3;
    /// The descriptor's dirty state is set (a write needs no assist).
    pub const DIRTY: u8 = 1 << 4;
    /// A global translation, valid in every address space.
    pub const GLOBAL: u8 = 1 << 5;
}

/// A successful translation of one page of some size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Translation {
    /// Physical address of the first byte of the mapped page.
    pub pa_base: u64,
    /// log2 of the page size of this translation.
    pub shift: u8,
    /// `perm::*` bits.
    pub perm: u8,
}

impl Translation {
    pub fn allows(&self, access: Access) -> bool {
        match access {
            Access::Read => self.perm & perm::READ != 0,
            Access::Write => self.perm & perm::WRITE != 0,
            Access::Exec => self.perm & perm::EXEC != 0,
        }
    }
    pub fn pa(&self, va: u64) -> PhysAddr {
        PhysAddr(self.pa_base | (va & ((1u64 << self.shift) - 1)))
    }
}

/// Why a walk did not produce a usable translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkFault {
    /// No valid descriptor at the given level (0 = the root table).
    NotPresent { level: u8 },
    /// A valid translation exists but does not permit the access.
    Protection,
    /// The address is outside the translatable range (non-canonical).
    BadAddress,
    /// A valid leaf permits the access, but its accessed bit is clear, or
    /// its dirty bit is clear on a write, and this hardware leaves setting
    /// them to software (RISC-V without Svadu): a page fault the OS
    /// resolves by setting the bits.
    AccessedDirty,
    /// A reserved encoding at the given level (0 = the root table): a
    /// RISC-V PTE with W but not R, reserved high bits set, a pointer at the
    /// last level, or a superpage leaf whose frame is not aligned to its
    /// size. A page fault the OS never causes on purpose.
    Reserved { level: u8 },
    /// No SLB entry translates the address's segment (POWER's segment
    /// interrupt): the kernel loads the SLB and the access is retried.
    Segment,
}

/// Who keeps a leaf's accessed and dirty bits up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdUpdate {
    /// The walker sets them (x86-64 always; RISC-V with Svadu).
    Hardware,
    /// The walker raises a page fault and software sets them (RISC-V's
    /// behaviour before Svadu, the Svade extension).
    Fault,
}

/// Physical addresses the walker read, in order, so the timing model can
/// charge each through the cache hierarchy.
#[derive(Clone, Debug, Default)]
pub struct WalkRefs {
    pub n: usize,
    pub pa: [u64; 24],
}

impl WalkRefs {
    #[inline]
    pub fn push(&mut self, pa: u64) {
        if self.n < self.pa.len() {
            self.pa[self.n] = pa;
            self.n += 1;
        }
    }
    pub fn clear(&mut self) {
        self.n = 0;
    }
    pub fn as_slice(&self) -> &[u64] {
        &self.pa[..self.n]
    }
}

/// What one walk translates: `va` for `access` in the address space rooted
/// at `root`, tagged `asid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkReq {
    pub root: PhysAddr,
    pub asid: u16,
    pub va: VirtAddr,
    pub access: Access,
}

impl WalkReq {
    pub fn new(root: PhysAddr, asid: u16, va: VirtAddr, access: Access) -> WalkReq {
        WalkReq { root, asid, va, access }
    }
}

/// An architecture's hardware walk.
pub trait Walker: Send {
    /// Page sizes (log2) this architecture's TLB entries can have.
    fn page_shifts(&self) -> &[u8];
    /// Translates what `req` asks for, using and filling `pwc`, and notes
    /// the physical addresses the walk reads in `refs`.
    fn walk(&self, mem: &mut PhysMem, pwc: &mut Pwc, req: WalkReq, refs: &mut WalkRefs) -> Result<Translation, WalkFault>;
    /// The same walk without side effects (no A/D updates, no caches): what
    /// the page tables say now. Used by the checker to find stale TLB entries.
    fn probe(&self, mem: &PhysMem, root: PhysAddr, va: VirtAddr) -> Option<Translation>;
}
