//! Alpha virtual memory as the Alpha Architecture Reference Manual
//! (Fourth Edition, Part II-A "Memory Management", and the OSF/1 PALcode
//! of Part II-B) defines it for 8 KB pages, as an Alpha 21264 runs
//! FreeBSD's sys/alpha (FreeBSD 4.x to 6.x): the page-table entry format
//! and the translation the PALcode TB-miss handler performs.
//!
//! With 8 KB pages a virtual address has 43 significant bits, split
//! 10 + 10 + 10 + 13: SEG1 (bits 42:33) indexes the level-1 table, SEG2
//! (32:23) the level-2 table, SEG3 (22:13) the level-3 table, and bits 12:0
//! are the byte within the page. Every table is one 8 KB page of 1024
//! eight-byte PTEs. Bits 63:43 of an address must copy bit 42 (the 21264
//! with I_CTL[VA_48] clear), so user space is the lower 4 TB.
//!
//! There is no hardware walker: a DTB miss traps to PALcode, whose handler
//! reads the PTEs (through the virtual page table, falling back to the
//! three-level walk on a double miss) and loads the DTB. The model walks
//! the three levels and the timing model charges the trap (the profile's
//! `walk` cost). Nor does the hardware keep referenced or modified
//! bits: the FOR, FOW and FOE bits make an access fault, and the OS clears
//! them on the first access (FreeBSD's alpha pmap_emulate_reference).
//!
//! Larger pages come from the granularity hint: a level-3 PTE whose GH
//! field is g asks the TB to map 8^g pages (64 KB, 512 KB, 4 MB), aligned
//! virtually and physically, with one entry; software must give every PTE
//! of the block the same GH and attributes and contiguous frames.

pub mod pte;
pub mod walk;

pub use pte::{Gh, Pte, PteFlags};
pub use walk::AlphaWalker;

use crate::radix::VaRange;

/// log2 of the base page size (ALPHA_PGSHIFT, PAGE_SHIFT = 13).
pub const PAGE_SHIFT: u32 = 13;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// PTEs per table page (NPTEPG = 8192 / 8).
pub const NPTEPG: u64 = 1024;
/// Index-field shifts of the levels (ALPHA_L1SHIFT, ALPHA_L2SHIFT,
/// ALPHA_L3SHIFT).
pub const L1_SHIFT: u32 = 33;
pub const L2_SHIFT: u32 = 23;
pub const L3_SHIFT: u32 = 13;
/// Significant bits of a virtual address.
pub const VA_BITS: u32 = 43;
/// End of user space: the lower half of the 43-bit space
/// (VM_MAXUSER_ADDRESS, ALPHA_USEG_END + 1).
pub const MAX_USER_ADDRESS: u64 = 1 << (VA_BITS - 1);

/// Index of `va` in a table whose entries map 2^shift bytes.
#[inline]
pub fn index(va: u64, shift: u32) -> u64 {
    (va >> shift) & (NPTEPG - 1)
}

/// Whether `va` is a sign-extended 43-bit address.
#[inline]
pub fn canonical(va: u64) -> bool {
    VaRange::Canonical(VA_BITS).contains(va)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_split() {
        // SEG1 = 0x155, SEG2 = 0x2aa, SEG3 = 0x0f0, offset 0x1abc.
        let va = (0x155u64 << 33) | (0x2aa << 23) | (0x0f0 << 13) | 0x1abc;
        assert_eq!((index(va, L1_SHIFT), index(va, L2_SHIFT), index(va, L3_SHIFT)), (0x155, 0x2aa, 0x0f0));
        assert!(canonical(MAX_USER_ADDRESS - 1));
        assert!(!canonical(MAX_USER_ADDRESS));
        assert!(canonical(0xffff_fc00_0000_0000));
        assert_eq!(NPTEPG * 8, PAGE_SIZE, "a table is one page");
    }
}
