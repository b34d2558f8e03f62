//! RISC-V Sv39/Sv48 page-table entries as a newtype over the raw 64-bit
//! word, with the flag bits by the privileged spec's names.
//!
//! Layout: bits 0-7 are V, R, W, X, U, G, A, D; bits 8-9 are RSW, left to
//! supervisor software (FreeBSD keeps "wired" and "managed" there, and so
//! do we); bits 10-53 are the physical page number; bits 54-63 are reserved
//! unless Svpbmt/Svnapot are implemented (they are not modelled, so a set
//! bit there is a reserved encoding).
//!
//! An entry with V set and R, W, X all clear points to the next table; with
//! R or X set it is a leaf. W without R is reserved.

use crate::desc::flag_accessors;
use bitflags::bitflags;

bitflags! {
    /// Flag bits of a RISC-V page-table entry.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PteFlags: u64 {
        /// V: the entry is valid; clear means any access through it faults.
        const V = 1 << 0;
        /// R: loads allowed (a leaf when R or X is set).
        const R = 1 << 1;
        /// W: stores allowed (reserved without R).
        const W = 1 << 2;
        /// X: instruction fetches allowed.
        const X = 1 << 3;
        /// U: accessible in user mode (leaf only; reserved in pointers).
        const U = 1 << 4;
        /// G: a global mapping, present in every address space.
        const G = 1 << 5;
        /// A: accessed since last cleared. Set by the walker with Svadu,
        /// otherwise an access through a leaf with A clear page-faults.
        const A = 1 << 6;
        /// D: written since last cleared; like A, by the walker with Svadu,
        /// otherwise a store through a leaf with D clear page-faults.
        const D = 1 << 7;
        /// RSW bit 8: software, the mapping is wired (FreeBSD PTE_SW_WIRED).
        const SW_WIRED = 1 << 8;
        /// RSW bit 9: software, the mapped page is managed, with PV entries
        /// (FreeBSD PTE_SW_MANAGED).
        const SW_MANAGED = 1 << 9;
    }
}

impl PteFlags {
    /// R, W and X: any of them set makes a valid entry a leaf
    /// (FreeBSD PTE_RWX).
    pub const RWX: PteFlags = PteFlags::R.union(PteFlags::W).union(PteFlags::X);
    /// The bits that must agree across the 512 entries for promotion
    /// (FreeBSD PTE_PROMOTE): everything but the frame and the software
    /// bits that do not describe the mapping.
    pub const PROMOTE: PteFlags = PteFlags::V
        .union(PteFlags::RWX)
        .union(PteFlags::D)
        .union(PteFlags::A)
        .union(PteFlags::G)
        .union(PteFlags::U)
        .union(PteFlags::SW_MANAGED)
        .union(PteFlags::SW_WIRED);
}

/// Position of the physical page number (FreeBSD PTE_PPN0_S).
pub const PPN_SHIFT: u32 = 10;
/// The PPN field: bits 10..53 (44 bits, 56-bit physical addresses).
pub const PPN_MASK: u64 = ((1u64 << 44) - 1) << PPN_SHIFT;
/// Bits 54..63: reserved for Svpbmt/Svnapot, not modelled.
pub const RESERVED_HI: u64 = !((1u64 << 54) - 1);

/// One page-table entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pte(pub u64);

impl Pte {
    pub const EMPTY: Pte = Pte(0);

    /// An entry for the 4 KB-aligned physical address `pa` with `flags`.
    pub fn new(pa: u64, flags: PteFlags) -> Pte {
        debug_assert!(pa & 0xfff == 0 && ((pa >> 12) << PPN_SHIFT) & !PPN_MASK == 0, "address {pa:#x} does not fit the PPN");
        Pte(((pa >> 12) << PPN_SHIFT) | flags.bits())
    }
    /// A pointer to the next-level table at `pa`: V alone, as FreeBSD
    /// writes them (A, D and U are reserved in pointers and kept clear).
    pub fn table(pa: u64) -> Pte {
        Pte::new(pa, PteFlags::V)
    }
    /// A valid leaf: V and one of R, W, X.
    #[inline]
    pub fn is_leaf(self) -> bool {
        self.valid() && self.any(PteFlags::RWX)
    }
    /// A valid pointer to the next table.
    #[inline]
    pub fn is_table(self) -> bool {
        self.valid() && !self.any(PteFlags::RWX)
    }
    /// Physical address the PPN names: a table, or the first byte of the
    /// page a leaf maps (FreeBSD PTE_TO_PHYS).
    #[inline]
    pub fn frame(self) -> u64 {
        ((self.0 & PPN_MASK) >> PPN_SHIFT) << 12
    }
    /// Whether the encoding is reserved: W without R, or a reserved high
    /// bit set.
    #[inline]
    pub fn reserved(self) -> bool {
        (self.has(PteFlags::W) && !self.has(PteFlags::R)) || self.0 & RESERVED_HI != 0
    }
}

flag_accessors!(Pte, PteFlags, valid = V, frame = frame);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::assert_bits;

    /// Bit positions from the privileged spec's Sv39 PTE figure.
    #[test]
    fn bit_positions_match_the_spec() {
        use PteFlags as F;
        assert_bits(&[(F::V, 0), (F::R, 1), (F::W, 2), (F::X, 3), (F::U, 4), (F::G, 5), (F::A, 6), (F::D, 7)]);
        assert_bits(&[(F::SW_WIRED, 8), (F::SW_MANAGED, 9)]);
        assert_eq!(PPN_MASK.trailing_zeros(), 10);
        assert_eq!(64 - PPN_MASK.leading_zeros(), 54);
    }

    #[test]
    fn encode_decode() {
        let p = Pte::new(0x8020_3000, PteFlags::V | PteFlags::R | PteFlags::W | PteFlags::U);
        // PPN 0x80203 at bit 10.
        assert_eq!(p.0, (0x80203 << 10) | 0x17);
        assert_eq!(p.frame(), 0x8020_3000);
        assert!(p.is_leaf() && !p.is_table() && !p.reserved());
        let t = Pte::table(0x1000);
        assert!(t.is_table() && !t.is_leaf());
        assert_eq!(t.0, (1 << 10) | 1);
        assert!(Pte::new(0, PteFlags::V | PteFlags::W).reserved(), "W without R");
        assert!(Pte(1 | (1 << 60)).reserved());
        assert_eq!(p.without(PteFlags::W).flags(), PteFlags::V | PteFlags::R | PteFlags::U);
    }
}
