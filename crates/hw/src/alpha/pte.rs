//! Alpha page-table entries (Alpha Architecture Reference Manual, Part
//! II-A, "Page Table Entries"): a newtype over the 64-bit word with the
//! manual's field names.
//!
//! Layout: bit 0 V, 1 FOR, 2 FOW, 3 FOE, 4 ASM, bits 6:5 GH, bit 7
//! reserved, bits 8..11 KRE, ERE, SRE, URE (read enables per mode), bits
//! 12..15 KWE, EWE, SWE, UWE (write enables), bits 31:16 for software,
//! bits 63:32 the page frame number (of 8 KB frames).
//!
//! FreeBSD's alpha pmap (sys/alpha/include/pte.h) keeps two software bits
//! in 31:16, PG_WIRED and PG_MANAGED; the model keeps the same two and a
//! third, PG_NOPROMOTE, as the newer pmaps do, so the promotion code never
//! looks at a page it must not touch.

use crate::desc::flag_accessors;
use bitflags::bitflags;

bitflags! {
    /// Flag bits of an Alpha PTE (all but GH and PFN).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct PteFlags: u64 {
        /// V: valid. Clear: any access through it is a translation-not-
        /// valid fault. The other bits are then for software.
        const V = 1 << 0;
        /// FOR: fault on read. A load through the entry takes a
        /// fault-on-read trap; FreeBSD sets it to emulate a reference bit.
        const FOR = 1 << 1;
        /// FOW: fault on write, the modified-bit emulation.
        const FOW = 1 << 2;
        /// FOE: fault on execute.
        const FOE = 1 << 3;
        /// ASM: address space match. The translation is valid in every
        /// address space regardless of the ASN (a global mapping).
        const ASM = 1 << 4;
        /// KRE: kernel read enable.
        const KRE = 1 << 8;
        /// ERE: executive read enable (unused by Unix).
        const ERE = 1 << 9;
        /// SRE: supervisor read enable (unused by Unix).
        const SRE = 1 << 10;
        /// URE: user read enable.
        const URE = 1 << 11;
        /// KWE: kernel write enable.
        const KWE = 1 << 12;
        /// EWE: executive write enable.
        const EWE = 1 << 13;
        /// SWE: supervisor write enable.
        const SWE = 1 << 14;
        /// UWE: user write enable.
        const UWE = 1 << 15;
        /// Software bit 16: the mapping is wired (FreeBSD PG_WIRED).
        const WIRED = 1 << 16;
        /// Software bit 17: the page is managed, with PV entries
        /// (FreeBSD PG_MANAGED).
        const MANAGED = 1 << 17;
        /// Software bit 18: never promote a block containing this entry.
        const NOPROMOTE = 1 << 18;
    }
}

impl PteFlags {
    /// The fault-on bits, set by software to emulate reference and
    /// modify bits (FreeBSD PG_FOR | PG_FOW | PG_FOE).
    pub const FAULT_ON: PteFlags = PteFlags::FOR.union(PteFlags::FOW).union(PteFlags::FOE);
    /// Bits that must agree across a granularity-hint block for promotion:
    /// everything but the frame, GH and FOR (the reference emulation;
    /// promotion takes the block as referenced if any entry is).
    pub const PROMOTE: PteFlags = PteFlags::V
        .union(PteFlags::FOW)
        .union(PteFlags::FOE)
        .union(PteFlags::ASM)
        .union(PteFlags::KRE)
        .union(PteFlags::URE)
        .union(PteFlags::KWE)
        .union(PteFlags::UWE)
        .union(PteFlags::WIRED)
        .union(PteFlags::MANAGED)
        .union(PteFlags::NOPROMOTE);
}

/// Bits 6:5, the granularity hint.
pub const GH_SHIFT: u32 = 5;
pub const GH_MASK: u64 = 0b11 << GH_SHIFT;
/// Bit 7: reserved, must be zero.
pub const RESERVED: u64 = 1 << 7;
/// Bits 63:32, the page frame number.
pub const PFN_SHIFT: u32 = 32;
/// Bits 31:16, left to software.
pub const SOFTWARE_MASK: u64 = 0xffff << 16;

/// A granularity hint: the entry is one of an aligned block of 8^GH pages
/// that the TB may map with a single entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gh(u8);

impl Gh {
    /// 8 KB: one page.
    pub const G8K: Gh = Gh(0);
    /// 64 KB: 8 pages.
    pub const G64K: Gh = Gh(1);
    /// 512 KB: 64 pages.
    pub const G512K: Gh = Gh(2);
    /// 4 MB: 512 pages.
    pub const G4M: Gh = Gh(3);
    pub const ALL: [Gh; 4] = [Gh::G8K, Gh::G64K, Gh::G512K, Gh::G4M];

    pub fn new(v: u8) -> Gh {
        assert!(v < 4, "GH is a 2-bit field");
        Gh(v)
    }
    pub fn value(self) -> u8 {
        self.0
    }
    /// log2 of the bytes one TB entry with this hint maps: 13 + 3 GH.
    #[inline]
    pub fn shift(self) -> u32 {
        super::PAGE_SHIFT + 3 * self.0 as u32
    }
    /// Base pages in the block: 8^GH.
    #[inline]
    pub fn pages(self) -> u64 {
        1 << (3 * self.0 as u32)
    }
}

/// One Alpha PTE.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pte(pub u64);

impl Pte {
    pub const EMPTY: Pte = Pte(0);

    /// A level-3 entry mapping the 8 KB frame at `pa` with `flags` and
    /// granularity hint `gh`.
    pub fn new(pa: u64, flags: PteFlags, gh: Gh) -> Pte {
        debug_assert!(pa & (super::PAGE_SIZE - 1) == 0 && pa >> (super::PAGE_SHIFT + 32) == 0, "{pa:#x} is not an 8 KB frame");
        Pte(((pa >> super::PAGE_SHIFT) << PFN_SHIFT) | ((gh.0 as u64) << GH_SHIFT) | flags.bits())
    }
    /// A level-1 or level-2 entry naming the next table at `pa`: V with
    /// kernel read and write, as FreeBSD's pmap writes them (the PALcode
    /// checks only V on these levels).
    pub fn table(pa: u64) -> Pte {
        Pte::new(pa, PteFlags::V | PteFlags::KRE | PteFlags::KWE, Gh::G8K)
    }
    #[inline]
    pub fn gh(self) -> Gh {
        Gh(((self.0 & GH_MASK) >> GH_SHIFT) as u8)
    }
    pub fn with_gh(self, gh: Gh) -> Pte {
        Pte((self.0 & !GH_MASK) | ((gh.0 as u64) << GH_SHIFT))
    }
    /// The page frame number (of 8 KB frames).
    #[inline]
    pub fn pfn(self) -> u64 {
        self.0 >> PFN_SHIFT
    }
    /// Physical address the PFN names (FreeBSD's alpha_ptob(PG_PFNUM)).
    #[inline]
    pub fn frame(self) -> u64 {
        self.pfn() << super::PAGE_SHIFT
    }
    /// The same entry for the frame `pa`.
    pub fn with_frame(self, pa: u64) -> Pte {
        Pte(((pa >> super::PAGE_SHIFT) << PFN_SHIFT) | (self.0 & ((1 << PFN_SHIFT) - 1)))
    }
}

flag_accessors!(Pte, PteFlags, valid = V);

impl std::fmt::Debug for Pte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pte({:#x}: pfn {:#x} gh {} {:?})", self.0, self.pfn(), self.gh().0, self.flags())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::assert_bits;

    /// Every field at the bit the Architecture Reference Manual gives it.
    #[test]
    fn bit_positions() {
        use PteFlags as F;
        assert_bits(&[(F::V, 0), (F::FOR, 1), (F::FOW, 2), (F::FOE, 3), (F::ASM, 4)]);
        assert_bits(&[(F::KRE, 8), (F::ERE, 9), (F::SRE, 10), (F::URE, 11)]);
        assert_bits(&[(F::KWE, 12), (F::EWE, 13), (F::SWE, 14), (F::UWE, 15)]);
        assert_eq!(GH_MASK, 0x60, "GH is bits 6:5");
        for f in [PteFlags::WIRED, PteFlags::MANAGED, PteFlags::NOPROMOTE] {
            assert_eq!(f.bits() & !SOFTWARE_MASK, 0, "{f:?} is a software bit (31:16)");
        }
        assert_eq!(PteFlags::all().bits() & (GH_MASK | RESERVED | !((1u64 << 32) - 1)), 0);
    }

    /// Encodes each kind of entry and decodes it back field by field.
    #[test]
    fn encode_decode_each_kind() {
        // An invalid entry: every bit clear.
        assert!(!Pte::EMPTY.valid());
        // A table pointer: V, KRE, KWE, PFN in 63:32.
        let t = Pte::table(0x1234_6000);
        assert_eq!(t.0, (0x1234_6000u64 >> 13) << 32 | 0x1 | 0x100 | 0x1000);
        assert_eq!((t.frame(), t.gh()), (0x1234_6000, Gh::G8K));
        // A user read-write 8 KB page, clean and unreferenced as FreeBSD
        // enters one: FOR and FOW set, wired and managed.
        let f = PteFlags::V | PteFlags::URE | PteFlags::UWE | PteFlags::KRE | PteFlags::KWE | PteFlags::FOR | PteFlags::FOW | PteFlags::FOE | PteFlags::MANAGED | PteFlags::WIRED;
        let p = Pte::new(0x2_0000_e000, f, Gh::G8K);
        assert_eq!(p.0, 0x10_0007u64 << 32 | 0x3_990f);
        assert_eq!((p.pfn(), p.frame(), p.flags(), p.gh()), (0x10_0007, 0x2_0000_e000, f, Gh::G8K));
        // Each granularity hint: the value in bits 6:5 and the size.
        for (g, v, size) in [(Gh::G8K, 0u64, 8u64 << 10), (Gh::G64K, 1, 64 << 10), (Gh::G512K, 2, 512 << 10), (Gh::G4M, 3, 4 << 20)] {
            let e = Pte::new(0x40_0000, PteFlags::V | PteFlags::URE | PteFlags::ASM, g);
            assert_eq!(e.0 & GH_MASK, v << 5);
            assert_eq!((e.gh(), 1u64 << e.gh().shift(), e.gh().pages() * 8192), (g, size, size));
            assert!(e.has(PteFlags::ASM) && !e.any(PteFlags::UWE));
            assert_eq!(Pte::EMPTY.with_gh(g).gh(), g);
        }
        // Clearing the fault-on bits, as pmap_emulate_reference does.
        assert_eq!(p.without(PteFlags::FAULT_ON).0, p.0 & !0xe);
        assert_eq!(p.with_frame(0x6000).frame(), 0x6000);
        assert_eq!(p.with_frame(0x6000).flags(), f);
    }
}
