//! x86-64 (amd64) long-mode paging with 4-level tables: the descriptor
//! format (Intel SDM vol. 3A, 4.5) and the hardware walk.

pub mod pte;
pub mod walk;

pub use pte::{Pte, PteFlags};
pub use walk::Amd64Walker;

/// Entries per table (each table is one 4 KB page of 8-byte entries).
pub const NPTEPG: u64 = 512;
/// Bytes mapped by one PTE, PDE (PS=1) and PDPTE (PS=1).
pub const PAGE_4K: u64 = 1 << 12;
pub const PAGE_2M: u64 = 1 << 21;
pub const PAGE_1G: u64 = 1 << 30;
/// Shifts of the index fields of each level, root first.
pub const PML4SHIFT: u32 = 39;
pub const PDPSHIFT: u32 = 30;
pub const PDRSHIFT: u32 = 21;
pub const PAGE_SHIFT_4K: u32 = 12;
/// Highest user address + 1 (the lower canonical half of 48-bit addresses).
pub const VM_MAXUSER_ADDRESS: u64 = 1 << 47;

/// Index of `va` in the table at the level whose entries map 2^shift bytes.
#[inline]
pub fn index(va: u64, shift: u32) -> u64 {
    (va >> shift) & (NPTEPG - 1)
}
