//! ARMv7-A short-descriptor translation (VMSAv7 without LPAE; ARM
//! Architecture Reference Manual ARMv7-A/R, section B3.5): the
//! descriptor formats and the hardware walk.
//!
//! One translation table base (TTBR0, with TTBCR.N = 0) covers the whole
//! 32-bit address space. The first-level (L1) table has 4096 word entries
//! (16 KB, 16 KB-aligned), each for 1 MB of virtual space: a fault entry, a
//! pointer to a second-level (L2) table, a 1 MB section, or one of the 16
//! identical entries of a 16 MB supersection. An L2 table has 256 word
//! entries (1 KB) mapping 4 KB small pages, or, as 16 identical entries,
//! 64 KB large pages.
//!
//! How the machine is configured, as FreeBSD's pmap-v6 configures it:
//! SCTLR.AFE = 1 (AP[0] is an access flag and AP[2:1] use the simplified
//! access permissions model), SCTLR.TRE = 1 (TEX remap: TEX[0], C and B
//! index PRRR/NMRR, TEX[2:1] are left to software), domain 0 a client in
//! DACR, address-space identifiers from CONTEXTIDR for entries with nG set.

pub mod pte;
pub mod walk;

pub use pte::{L1Desc, L1Kind, L2Desc, L2Kind, SectionFlags, SmallFlags};
pub use walk::Armv7Walker;

/// Entries of the L1 table (NPTE1_IN_PT1) and its size in bytes.
pub const L1_ENTRIES: u64 = 4096;
pub const L1_TABLE_SIZE: u64 = 16 << 10;
/// Entries of an L2 table (NPTE2_IN_PT2) and its size in bytes.
pub const L2_ENTRIES: u64 = 256;
pub const L2_TABLE_SIZE: u64 = 1 << 10;

/// log2 of the sizes the descriptors map.
pub const SMALL_SHIFT: u32 = 12;
pub const LARGE_SHIFT: u32 = 16;
pub const SECTION_SHIFT: u32 = 20;
pub const SUPERSECTION_SHIFT: u32 = 24;
pub const SMALL_SIZE: u64 = 1 << SMALL_SHIFT;
pub const LARGE_SIZE: u64 = 1 << LARGE_SHIFT;
pub const SECTION_SIZE: u64 = 1 << SECTION_SHIFT;
pub const SUPERSECTION_SIZE: u64 = 1 << SUPERSECTION_SHIFT;
/// A large page is 16 identical L2 entries; a supersection 16 identical L1
/// entries.
pub const REPLICAS: u64 = 16;

/// Virtual addresses are 32 bits.
pub const VA_LIMIT: u64 = 1 << 32;

/// Index of `va` in the L1 table.
#[inline]
pub fn l1_index(va: u64) -> u64 {
    (va >> SECTION_SHIFT) & (L1_ENTRIES - 1)
}

/// Index of `va` in its L2 table.
#[inline]
pub fn l2_index(va: u64) -> u64 {
    (va >> SMALL_SHIFT) & (L2_ENTRIES - 1)
}

/// The Domain Access Control Register: two bits per domain.
pub mod dacr {
    /// Any access faults (a domain fault).
    pub const NO_ACCESS: u32 = 0b00;
    /// Accesses are checked against the descriptor's permissions.
    pub const CLIENT: u32 = 0b01;
    /// Reserved encoding; treated as no access.
    pub const RESERVED: u32 = 0b10;
    /// Accesses are not checked against permissions.
    pub const MANAGER: u32 = 0b11;

    /// The access type DACR gives domain `d` (0..16).
    pub fn domain(dacr: u32, d: u32) -> u32 {
        (dacr >> (2 * d)) & 0b11
    }

    /// FreeBSD's setting: domain 0 (used by every descriptor it writes) a
    /// client, every other domain no access.
    pub const FREEBSD: u32 = CLIENT;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_and_domains() {
        assert_eq!(l1_index(0xbfc0_1234), 0xbfc);
        assert_eq!(l2_index(0xbfc3_4567), 0x34);
        assert_eq!(L1_ENTRIES * 4, L1_TABLE_SIZE);
        assert_eq!(L2_ENTRIES * 4, L2_TABLE_SIZE);
        assert_eq!(L2_ENTRIES * SMALL_SIZE, SECTION_SIZE);
        assert_eq!(dacr::domain(0b11_01, 0), dacr::CLIENT);
        assert_eq!(dacr::domain(0b11_01, 1), dacr::MANAGER);
        assert_eq!(dacr::domain(dacr::FREEBSD, 5), dacr::NO_ACCESS);
    }
}
