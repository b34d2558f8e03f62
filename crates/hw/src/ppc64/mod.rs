//! 64-bit POWER server processors (Power ISA v2.07 and v3.0, Book III
//! "Storage Control") translating through a hashed page table: the segment
//! lookaside buffer entry (`slb`), the hashed page table entry (`pte`), and
//! the hash functions and hardware page-table search (`hpt`).
//!
//! An effective address is split into a 256 MB segment (the ESID, bits
//! 63..28) and an offset. The SLB gives the segment's virtual segment ID
//! (VSID) and base page size; VSID and offset form the virtual address,
//! whose page number is hashed to choose a page table entry group (PTEG) of
//! eight entries. An entry may map a page larger than the segment's base
//! page size ("mixed page-size segments", ISA 2.06 and later): FreeBSD maps
//! its 16 MB superpages that way, in segments whose base page size is 4 KB.

pub mod hpt;
pub mod pte;
pub mod slb;

pub use hpt::{HptGeometry, HptWalker};
pub use pte::{Hpte, HpteHi, HpteLo};
pub use slb::{SlbE, SlbV};

/// log2 of the segment size (256 MB segments, SLB B = 0b00).
pub const SEGMENT_SHIFT: u32 = 28;
pub const SEGMENT_SIZE: u64 = 1 << SEGMENT_SHIFT;
/// log2 of the base page size FreeBSD uses for every user segment.
pub const BASE_SHIFT: u32 = 12;
/// log2 of the large page size (16 MB), FreeBSD's HPT_SP_SHIFT.
pub const LARGE_SHIFT: u32 = 24;
pub const LARGE_SIZE: u64 = 1 << LARGE_SHIFT;
/// Entries in a page table entry group.
pub const PTEG_ENTRIES: u64 = 8;
/// Bytes of one hashed page table entry (two doublewords).
pub const HPTE_BYTES: u64 = 16;
/// Bytes of one PTEG (one 128-byte cache line on POWER8 and POWER9).
pub const PTEG_BYTES: u64 = PTEG_ENTRIES * HPTE_BYTES;
/// Highest user effective address + 1 the model translates. The ISA
/// translates all 64 bits; the model's TLB keys keep 56, and splab's
/// workloads stay far below this.
pub const USER_VA_LIMIT: u64 = 1 << 48;

/// The effective segment ID of `ea`.
#[inline]
pub fn esid(ea: u64) -> u64 {
    ea >> SEGMENT_SHIFT
}

/// The offset of `ea` within its segment.
#[inline]
pub fn segment_offset(ea: u64) -> u64 {
    ea & (SEGMENT_SIZE - 1)
}
