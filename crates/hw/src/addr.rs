//! Address and frame types shared by every layer.
//!
//! Physical and virtual addresses are distinct types so that one cannot be
//! passed where the other is expected; a physical frame number (`Pfn`) names
//! a frame of modelled physical memory, one base page of the architecture:
//! 4 KB, or 8 KB on the Alpha (`PhysMem::page_shift`).

use serde::Serialize;
use std::fmt;

/// log2 of a 4 KB page, the base page of every architecture but the
/// Alpha. There is no global base page size: a system's is its pmap's
/// smallest size (`PhysMem::page_shift`). The `_4k` conversions below
/// (`PhysAddr::pfn_4k`, `Pfn::addr_4k`) are for code that only runs with
/// 4 KB frames (the 4 KB architectures' pmaps and walkers); code that may
/// run with 8 KB pages converts through `PhysMem::pfn` and `PhysMem::addr`.
pub const PAGE_SHIFT_4K: u32 = 12;
/// Bytes in a 4 KB page.
pub const PAGE_SIZE_4K: u64 = 1 << PAGE_SHIFT_4K;

/// A physical address in modelled physical memory.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct PhysAddr(pub u64);

/// A virtual address in some address space.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct VirtAddr(pub u64);

/// A physical frame number: physical address >> the base page shift. 32 bits cover
/// 16 TiB of modelled memory, far beyond the 256 GiB the model supports.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize)]
pub struct Pfn(pub u32);

impl PhysAddr {
    pub fn pfn_4k(self) -> Pfn {
        Pfn((self.0 >> PAGE_SHIFT_4K) as u32)
    }
}

impl Pfn {
    pub fn addr_4k(self) -> PhysAddr {
        PhysAddr((self.0 as u64) << PAGE_SHIFT_4K)
    }
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

impl VirtAddr {
    pub fn trunc(self, size: u64) -> VirtAddr {
        VirtAddr(self.0 & !(size - 1))
    }
    pub fn is_aligned(self, size: u64) -> bool {
        self.0 & (size - 1) == 0
    }
}

impl fmt::Debug for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PA({:#x})", self.0)
    }
}
impl fmt::Debug for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VA({:#x})", self.0)
    }
}
impl fmt::Debug for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pfn({:#x})", self.0)
    }
}
impl fmt::Display for VirtAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
impl fmt::Display for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}
