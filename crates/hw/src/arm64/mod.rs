//! AArch64 stage-1 translation (VMSAv8-64) with the 4 KB granule and 48-bit
//! virtual addresses: four levels of tables, L0 to L3. The descriptor
//! format (Arm ARM D8.3, "Translation table descriptor formats") and the
//! hardware walk with hardware management of the access flag and dirty
//! state (FEAT_HAFDBS, ARMv8.1), as a Neoverse N1 has it.
//!
//! Each table is one 4 KB page of 512 eight-byte descriptors. An L1 block
//! maps 1 GB, an L2 block 2 MB, an L3 page 4 KB; sixteen aligned L3 pages
//! with the Contiguous bit may be cached as one 64 KB TLB entry.

pub mod pte;
pub mod walk;

pub use pte::{Desc, DescFlags};
pub use walk::Arm64Walker;

/// Descriptors per table (FreeBSD's Ln_ENTRIES).
pub const LN_ENTRIES: u64 = 512;
/// Shifts of the index fields of each level, root first (L0_SHIFT..L3_SHIFT).
pub const L0_SHIFT: u32 = 39;
pub const L1_SHIFT: u32 = 30;
pub const L2_SHIFT: u32 = 21;
pub const L3_SHIFT: u32 = 12;
/// Bytes mapped by one L0 table descriptor, L1 block, L2 block and L3 page.
pub const L0_SIZE: u64 = 1 << L0_SHIFT;
pub const L1_SIZE: u64 = 1 << L1_SHIFT;
pub const L2_SIZE: u64 = 1 << L2_SHIFT;
pub const L3_SIZE: u64 = 1 << L3_SHIFT;
/// L3 entries in one contiguous run, the run's log2 size, and its size
/// (FreeBSD's L3C_ENTRIES, L3C_SIZE: 16 x 4 KB = 64 KB).
pub const L3C_ENTRIES: u64 = 16;
pub const L3C_SHIFT: u32 = 16;
pub const L3C_SIZE: u64 = 1 << L3C_SHIFT;
/// Highest user address + 1: TTBR0_EL1 translates virtual addresses whose
/// bits 63..48 are zero (T0SZ = 16).
pub const VM_MAXUSER_ADDRESS: u64 = 1 << 48;

/// Index of `va` in the table at the level whose entries map 2^shift bytes.
#[inline]
pub fn index(va: u64, shift: u32) -> u64 {
    (va >> shift) & (LN_ENTRIES - 1)
}
