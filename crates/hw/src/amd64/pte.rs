//! x86-64 paging-structure entries (PML4E, PDPTE, PDE, PTE) as a newtype over
//! the raw 64-bit word, with the architectural flag bits by their SDM names.
//! Bits 9-11 are ignored by the hardware; FreeBSD's pmap keeps its own
//! software state there (wired, managed, promoted), and so does ours.

use crate::desc::flag_accessors;
use bitflags::bitflags;

bitflags! {
    /// Flag bits of an x86-64 paging-structure entry.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PteFlags: u64 {
        /// P: the entry is valid; clear means any access faults.
        const P = 1 << 0;
        /// R/W: writes allowed (on every level of the walk).
        const RW = 1 << 1;
        /// U/S: user-mode accesses allowed (on every level of the walk).
        const US = 1 << 2;
        /// PWT: page-level write-through (cacheability, with PCD and PAT).
        const PWT = 1 << 3;
        /// PCD: page-level cache disable.
        const PCD = 1 << 4;
        /// A: accessed; set by the walker on every entry it uses.
        const A = 1 << 5;
        /// D: dirty; set by the processor on the first write through a leaf.
        const D = 1 << 6;
        /// PS in a PDPTE or PDE: this entry maps a 1 GB / 2 MB page.
        /// In a PTE the same bit is PAT (see `PAT_4K`).
        const PS = 1 << 7;
        /// G: global, kept across CR3 loads.
        const G = 1 << 8;
        /// Software (ignored by hardware): the mapping is wired (FreeBSD PG_W).
        const SW_W = 1 << 9;
        /// Software: the mapped page is managed, with PV entries (PG_MANAGED).
        const SW_MANAGED = 1 << 10;
        /// Software: in a PDE, the mapping was created by promotion, so its
        /// page-table page was stashed (PG_PROMOTED).
        const SW_PROMOTED = 1 << 11;
        /// PAT in a PDPTE/PDE with PS set (bit 12; bit 7 is PS there).
        const PAT_LARGE = 1 << 12;
        /// XD/NX: instruction fetches not allowed (with EFER.NXE).
        const NX = 1 << 63;
    }
}

impl PteFlags {
    /// PAT bit of a 4 KB PTE (bit 7, the position of PS in other levels).
    pub const PAT_4K: PteFlags = PteFlags::PS;
    /// The attribute bits that must agree across entries for promotion:
    /// every bit except the address and A, D (and the software wired bit,
    /// which the real pmap also requires to match, so it stays in).
    pub const PROMOTE_MASK: PteFlags = PteFlags::from_bits_truncate(
        PteFlags::P.bits()
            | PteFlags::RW.bits()
            | PteFlags::US.bits()
            | PteFlags::PWT.bits()
            | PteFlags::PCD.bits()
            | PteFlags::PS.bits()
            | PteFlags::G.bits()
            | PteFlags::SW_W.bits()
            | PteFlags::SW_MANAGED.bits()
            | PteFlags::NX.bits(),
    );
}

/// Physical-address field of a PTE or non-leaf entry: bits 12..51.
pub const PG_FRAME: u64 = 0x000f_ffff_ffff_f000;
/// Physical-address field of a 2 MB PDE: bits 21..51.
pub const PG_PS_FRAME: u64 = 0x000f_ffff_ffe0_0000;
/// Physical-address field of a 1 GB PDPTE: bits 30..51.
pub const PG_1G_FRAME: u64 = 0x000f_ffff_c000_0000;

/// One paging-structure entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pte(pub u64);

impl Pte {
    pub const EMPTY: Pte = Pte(0);

    pub fn new(pa: u64, flags: PteFlags) -> Pte {
        debug_assert!(pa & !PG_FRAME == 0, "address {pa:#x} does not fit PG_FRAME");
        Pte(pa | flags.bits())
    }
    /// Frame address of a 4 KB PTE or of the table a non-leaf entry names.
    #[inline]
    pub fn frame(self) -> u64 {
        self.0 & PG_FRAME
    }
    /// Frame address of a 2 MB PDE.
    #[inline]
    pub fn frame_2m(self) -> u64 {
        self.0 & PG_PS_FRAME
    }
    /// Frame address of a 1 GB PDPTE.
    #[inline]
    pub fn frame_1g(self) -> u64 {
        self.0 & PG_1G_FRAME
    }
}

flag_accessors!(Pte, PteFlags, valid = P, frame = frame);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::assert_bits;

    /// Bit positions from the Intel SDM, Table 4-19 (PTE) / 4-18 (PDE 2MB).
    #[test]
    fn bit_positions_match_the_manual() {
        use PteFlags as F;
        let bits = [(F::P, 0), (F::RW, 1), (F::US, 2), (F::PWT, 3), (F::PCD, 4), (F::A, 5), (F::D, 6), (F::PS, 7), (F::PAT_4K, 7), (F::G, 8)];
        assert_bits(&bits);
        assert_bits(&[(F::PAT_LARGE, 12), (F::NX, 63)]);
    }

    #[test]
    fn encode_decode() {
        let p = Pte::new(0x1234_5000, PteFlags::P | PteFlags::RW | PteFlags::NX);
        assert_eq!(p.0, 0x8000_0000_1234_5003);
        assert_eq!(p.frame(), 0x1234_5000);
        assert!(p.valid() && p.has(PteFlags::RW) && !p.has(PteFlags::US));
        let pde = Pte::new(0x4060_0000, PteFlags::P | PteFlags::PS | PteFlags::US);
        assert_eq!(pde.0, 0x4060_0085);
        assert_eq!(pde.frame_2m(), 0x4060_0000);
        let pdpe = Pte::new(0x1_4000_0000, PteFlags::P | PteFlags::PS);
        assert_eq!(pdpe.frame_1g(), 0x1_4000_0000);
        assert_eq!(pde.without(PteFlags::PS).0, 0x4060_0005);
    }
}
