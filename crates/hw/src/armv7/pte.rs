//! ARMv7 short-descriptor translation table entries as newtypes over the
//! raw 32-bit word, with the field names of the ARM Architecture Reference
//! Manual (B3.5.1, "Short-descriptor translation table format
//! descriptors").
//!
//! First-level descriptors, by bits[1:0] (and bit 18 for sections):
//! - 0b00: fault.
//! - 0b01: page table. Bits[31:10] the L2 table's base, [8:5] the domain,
//!   3 NS, 2 PXN.
//! - 0b10, bit 18 = 0: section. Bits[31:20] base, 19 NS, 17 nG, 16 S,
//!   15 AP[2], [14:12] TEX, [11:10] AP[1:0], [8:5] domain, 4 XN, 3 C, 2 B.
//! - 0b10, bit 18 = 1: supersection. As a section, but bits[31:24] are
//!   PA[31:24], [23:20] PA[35:32] and [8:5] PA[39:36]; always domain 0.
//! - 0b11: reserved here (the PXN form of a section needs the PXN
//!   extension, which the modelled core lacks).
//!
//! Second-level descriptors, by bits[1:0]:
//! - 0b00: fault.
//! - 0b01: large page (64 KB). Bits[31:16] base, 15 XN, [14:12] TEX,
//!   11 nG, 10 S, 9 AP[2], [5:4] AP[1:0], 3 C, 2 B.
//! - 0b1x: small page (4 KB). Bits[31:12] base, 11 nG, 10 S, 9 AP[2],
//!   [8:6] TEX, [5:4] AP[1:0], 3 C, 2 B, 0 XN.
//!
//! The same attributes sit at different bits in each format; the
//! conversions here move them (FreeBSD's ATTR_TO_L1 and ATTR_TO_L2 do the
//! same between sections and small pages).

use crate::desc::flag_accessors;
use bitflags::bitflags;

bitflags! {
    /// Attribute bits of a section or supersection descriptor.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SectionFlags: u32 {
        /// B: bufferable (with C and TEX[0], the memory type; under TEX
        /// remap an index into PRRR/NMRR).
        const B = 1 << 2;
        /// C: cacheable (see B).
        const C = 1 << 3;
        /// XN: execute never.
        const XN = 1 << 4;
        /// Implementation defined.
        const IMP = 1 << 9;
        /// AP[0]: with SCTLR.AFE set, the access flag: an access through
        /// a descriptor with AP[0] clear takes an access flag fault (or,
        /// with hardware management, the walker sets it).
        const AP0 = 1 << 10;
        /// AP[1]: accessible at PL0 (user).
        const AP1 = 1 << 11;
        /// TEX[0]: memory type (with C and B).
        const TEX0 = 1 << 12;
        /// TEX[1]: ignored by hardware under TEX remap (software use).
        const TEX1 = 1 << 13;
        /// TEX[2]: ignored by hardware under TEX remap (software use).
        const TEX2 = 1 << 14;
        /// AP[2] (APX): read-only at every level.
        const AP2 = 1 << 15;
        /// S: shareable.
        const S = 1 << 16;
        /// nG: not global; the TLB entry is tagged with CONTEXTIDR.ASID.
        const NG = 1 << 17;
        /// Set in a supersection, clear in a section.
        const SUPER = 1 << 18;
        /// NS: non-secure physical address space.
        const NS = 1 << 19;
    }
}

bitflags! {
    /// Attribute bits of a small-page (4 KB) descriptor.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SmallFlags: u32 {
        /// XN: execute never.
        const XN = 1 << 0;
        /// B: bufferable.
        const B = 1 << 2;
        /// C: cacheable.
        const C = 1 << 3;
        /// AP[0]: the access flag (SCTLR.AFE set).
        const AP0 = 1 << 4;
        /// AP[1]: accessible at PL0.
        const AP1 = 1 << 5;
        /// TEX[0]: memory type.
        const TEX0 = 1 << 6;
        /// TEX[1]: software use under TEX remap.
        const TEX1 = 1 << 7;
        /// TEX[2]: software use under TEX remap.
        const TEX2 = 1 << 8;
        /// AP[2] (APX): read-only.
        const AP2 = 1 << 9;
        /// S: shareable.
        const S = 1 << 10;
        /// nG: not global.
        const NG = 1 << 11;
    }
}

bitflags! {
    /// Attribute bits of a large-page (64 KB) descriptor.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct LargeFlags: u32 {
        /// B: bufferable.
        const B = 1 << 2;
        /// C: cacheable.
        const C = 1 << 3;
        /// AP[0]: the access flag.
        const AP0 = 1 << 4;
        /// AP[1]: accessible at PL0.
        const AP1 = 1 << 5;
        /// AP[2] (APX): read-only.
        const AP2 = 1 << 9;
        /// S: shareable.
        const S = 1 << 10;
        /// nG: not global.
        const NG = 1 << 11;
        /// TEX[0]: memory type.
        const TEX0 = 1 << 12;
        /// TEX[1]: software use under TEX remap.
        const TEX1 = 1 << 13;
        /// TEX[2]: software use under TEX remap.
        const TEX2 = 1 << 14;
        /// XN: execute never.
        const XN = 1 << 15;
    }
}

/// The attribute bits the three leaf formats share, in the order of
/// `SMALL_ORDER`, `SECTION_ORDER` and `LARGE_ORDER`: the conversion tables.
const SMALL_ORDER: [SmallFlags; 11] = [
    SmallFlags::B,
    SmallFlags::C,
    SmallFlags::XN,
    SmallFlags::AP0,
    SmallFlags::AP1,
    SmallFlags::TEX0,
    SmallFlags::TEX1,
    SmallFlags::TEX2,
    SmallFlags::AP2,
    SmallFlags::S,
    SmallFlags::NG,
];
const SECTION_ORDER: [SectionFlags; 11] = [
    SectionFlags::B,
    SectionFlags::C,
    SectionFlags::XN,
    SectionFlags::AP0,
    SectionFlags::AP1,
    SectionFlags::TEX0,
    SectionFlags::TEX1,
    SectionFlags::TEX2,
    SectionFlags::AP2,
    SectionFlags::S,
    SectionFlags::NG,
];
const LARGE_ORDER: [LargeFlags; 11] = [
    LargeFlags::B,
    LargeFlags::C,
    LargeFlags::XN,
    LargeFlags::AP0,
    LargeFlags::AP1,
    LargeFlags::TEX0,
    LargeFlags::TEX1,
    LargeFlags::TEX2,
    LargeFlags::AP2,
    LargeFlags::S,
    LargeFlags::NG,
];

impl SmallFlags {
    /// The same attributes in a section descriptor (ATTR_TO_L1).
    pub fn to_section(self) -> SectionFlags {
        let mut s = SectionFlags::empty();
        for (a, b) in SMALL_ORDER.iter().zip(SECTION_ORDER) {
            if self.contains(*a) {
                s |= b;
            }
        }
        s
    }
    /// The same attributes from a section descriptor (ATTR_TO_L2).
    #[inline]
    pub fn from_section(f: SectionFlags) -> SmallFlags {
        let mut s = SmallFlags::empty();
        for (a, b) in SMALL_ORDER.iter().zip(SECTION_ORDER) {
            if f.contains(b) {
                s |= *a;
            }
        }
        s
    }
    /// The same attributes in a large-page descriptor.
    pub fn to_large(self) -> LargeFlags {
        let mut s = LargeFlags::empty();
        for (a, b) in SMALL_ORDER.iter().zip(LARGE_ORDER) {
            if self.contains(*a) {
                s |= b;
            }
        }
        s
    }
    /// The same attributes from a large-page descriptor.
    #[inline]
    pub fn from_large(f: LargeFlags) -> SmallFlags {
        let mut s = SmallFlags::empty();
        for (a, b) in SMALL_ORDER.iter().zip(LARGE_ORDER) {
            if f.contains(b) {
                s |= *a;
            }
        }
        s
    }
}

/// What a first-level descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L1Kind {
    Fault,
    Table,
    Section,
    Supersection,
    Reserved,
}

/// A first-level descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct L1Desc(pub u32);

const L1_TYPE_TABLE: u32 = 0b01;
const L1_TYPE_SECTION: u32 = 0b10;
const DOMAIN_SHIFT: u32 = 5;
const DOMAIN_MASK: u32 = 0xf << DOMAIN_SHIFT;

impl L1Desc {
    pub const FAULT: L1Desc = L1Desc(0);

    #[inline]
    pub fn kind(self) -> L1Kind {
        match self.0 & 0b11 {
            0b00 => L1Kind::Fault,
            0b01 => L1Kind::Table,
            0b10 if self.0 & SectionFlags::SUPER.bits() != 0 => L1Kind::Supersection,
            0b10 => L1Kind::Section,
            _ => L1Kind::Reserved,
        }
    }
    pub fn is_fault(self) -> bool {
        self.kind() == L1Kind::Fault
    }
    pub fn is_table(self) -> bool {
        self.kind() == L1Kind::Table
    }
    pub fn is_section(self) -> bool {
        self.kind() == L1Kind::Section
    }

    /// A pointer to the L2 table at `pa` (1 KB-aligned), in `domain`.
    pub fn table(pa: u64, domain: u32) -> L1Desc {
        debug_assert!(pa & 0x3ff == 0 && pa >> 32 == 0, "L2 table address {pa:#x}");
        debug_assert!(domain < 16);
        L1Desc(pa as u32 | domain << DOMAIN_SHIFT | L1_TYPE_TABLE)
    }
    /// A section mapping the 1 MB frame at `pa` with `flags`, in `domain`.
    pub fn section(pa: u64, flags: SectionFlags, domain: u32) -> L1Desc {
        debug_assert!(pa & 0xf_ffff == 0 && pa >> 32 == 0, "section address {pa:#x}");
        debug_assert!(!flags.contains(SectionFlags::SUPER) && domain < 16);
        L1Desc(pa as u32 | flags.bits() | domain << DOMAIN_SHIFT | L1_TYPE_SECTION)
    }
    /// A supersection descriptor mapping the 16 MB frame at `pa` (up to
    /// 40 bits) with `flags`.
    pub fn supersection(pa: u64, flags: SectionFlags) -> L1Desc {
        debug_assert!(pa & 0xff_ffff == 0 && pa >> 40 == 0, "supersection address {pa:#x}");
        let base = (pa as u32 & 0xff00_0000) | (((pa >> 32) as u32 & 0xf) << 20) | (((pa >> 36) as u32 & 0xf) << DOMAIN_SHIFT);
        L1Desc(base | (flags | SectionFlags::SUPER).bits() | L1_TYPE_SECTION)
    }

    /// The L2 table a page-table descriptor points to.
    #[inline]
    pub fn table_base(self) -> u64 {
        (self.0 & 0xffff_fc00) as u64
    }
    /// The domain of a page-table or section descriptor (supersections
    /// are in domain 0).
    #[inline]
    pub fn domain(self) -> u32 {
        match self.kind() {
            L1Kind::Supersection => 0,
            _ => (self.0 & DOMAIN_MASK) >> DOMAIN_SHIFT,
        }
    }
    /// The first byte a section or supersection maps.
    #[inline]
    pub fn frame(self) -> u64 {
        match self.kind() {
            L1Kind::Supersection => {
                let w = self.0 as u64;
                (w & 0xff00_0000) | ((w >> 20) & 0xf) << 32 | ((w >> DOMAIN_SHIFT) & 0xf) << 36
            }
            _ => (self.0 & 0xfff0_0000) as u64,
        }
    }
    /// A section with the attributes of the small-page descriptor `e`,
    /// mapping the 1 MB frame that holds `e`'s page (FreeBSD's
    /// `(fpte2 & PTE1_FRAME) | ATTR_TO_L1(fpte2) | PTE1_V`).
    pub fn section_from_small(e: L2Desc, domain: u32) -> L1Desc {
        L1Desc::section(e.frame() & !0xf_ffff, e.small_flags().to_section(), domain)
    }
    /// The small-page descriptor that maps page `i` (0..256) of this
    /// section with its attributes (`pte1_pa | ATTR_TO_L2(pte1) | PTE2_V`).
    pub fn small_at(self, i: u64) -> L2Desc {
        debug_assert!(self.is_section() && i < 256);
        L2Desc::small(self.frame() + (i << 12), SmallFlags::from_section(self.flags()))
    }
}

// The attribute bits of a section or supersection.
flag_accessors!(L1Desc, SectionFlags);

impl std::fmt::Debug for L1Desc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind() {
            L1Kind::Table => write!(f, "L1(table {:#x} domain {})", self.table_base(), self.domain()),
            L1Kind::Section | L1Kind::Supersection => write!(f, "L1({:?} {:#x} {:?})", self.kind(), self.frame(), self.flags()),
            k => write!(f, "L1({k:?} {:#x})", self.0),
        }
    }
}

/// What a second-level descriptor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L2Kind {
    Fault,
    Large,
    Small,
}

/// A second-level descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct L2Desc(pub u32);

const L2_TYPE_LARGE: u32 = 0b01;
const L2_TYPE_SMALL: u32 = 0b10;

impl L2Desc {
    pub const FAULT: L2Desc = L2Desc(0);

    #[inline]
    pub fn kind(self) -> L2Kind {
        match self.0 & 0b11 {
            0b00 => L2Kind::Fault,
            0b01 => L2Kind::Large,
            _ => L2Kind::Small,
        }
    }
    pub fn valid(self) -> bool {
        self.kind() != L2Kind::Fault
    }
    pub fn is_large(self) -> bool {
        self.kind() == L2Kind::Large
    }
    pub fn is_small(self) -> bool {
        self.kind() == L2Kind::Small
    }

    /// A small-page descriptor for the 4 KB frame at `pa`.
    pub fn small(pa: u64, flags: SmallFlags) -> L2Desc {
        debug_assert!(pa & 0xfff == 0 && pa >> 32 == 0, "small page address {pa:#x}");
        L2Desc(pa as u32 | flags.bits() | L2_TYPE_SMALL)
    }
    /// A large-page descriptor for the 64 KB frame at `pa`.
    pub fn large(pa: u64, flags: LargeFlags) -> L2Desc {
        debug_assert!(pa & 0xffff == 0 && pa >> 32 == 0, "large page address {pa:#x}");
        L2Desc(pa as u32 | flags.bits() | L2_TYPE_LARGE)
    }

    /// The first byte the page maps.
    #[inline]
    pub fn frame(self) -> u64 {
        match self.kind() {
            L2Kind::Large => (self.0 & 0xffff_0000) as u64,
            _ => (self.0 & 0xffff_f000) as u64,
        }
    }
    /// Attribute bits of a small page.
    #[inline]
    pub fn small_flags(self) -> SmallFlags {
        debug_assert!(self.is_small());
        SmallFlags::from_bits_truncate(self.0)
    }
    /// Attribute bits of a large page.
    #[inline]
    pub fn large_flags(self) -> LargeFlags {
        debug_assert!(self.is_large());
        LargeFlags::from_bits_truncate(self.0)
    }
    /// A valid descriptor's attributes in the small-page layout.
    #[inline]
    pub fn attrs(self) -> SmallFlags {
        match self.kind() {
            L2Kind::Large => SmallFlags::from_large(self.large_flags()),
            _ => self.small_flags(),
        }
    }
    /// The small-page descriptor for page `i` (0..16) of this large page,
    /// with the same attributes.
    pub fn large_to_small(self, i: u64) -> L2Desc {
        debug_assert!(self.is_large() && i < 16);
        L2Desc::small(self.frame() + (i << 12), self.attrs())
    }
    /// The large-page descriptor with this small page's attributes,
    /// mapping the 64 KB frame that holds it.
    pub fn small_to_large(self) -> L2Desc {
        debug_assert!(self.is_small());
        L2Desc::large(self.frame() & !0xffff, self.small_flags().to_large())
    }
    /// What entry `i` of a table maps if this descriptor sits there, as a
    /// small page: itself for a small page; for one of a large page's 16
    /// entries, its 4 KB part (FreeBSD's view of a page table as PTE2s).
    pub fn small_view(self, i: u64) -> L2Desc {
        match self.kind() {
            L2Kind::Large => self.large_to_small(i & 15),
            _ => self,
        }
    }
    /// Whether all of `f` (small-page layout) is set in the attributes.
    pub fn has(self, f: SmallFlags) -> bool {
        self.attrs().contains(f)
    }
    /// This descriptor with `f` (small-page layout) also set, in its own
    /// format.
    pub fn with(self, f: SmallFlags) -> L2Desc {
        match self.kind() {
            L2Kind::Large => L2Desc(self.0 | f.to_large().bits()),
            _ => L2Desc(self.0 | f.bits()),
        }
    }
    /// This descriptor with `f` (small-page layout) cleared.
    pub fn without(self, f: SmallFlags) -> L2Desc {
        match self.kind() {
            L2Kind::Large => L2Desc(self.0 & !f.to_large().bits()),
            _ => L2Desc(self.0 & !f.bits()),
        }
    }
}

impl std::fmt::Debug for L2Desc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind() {
            L2Kind::Fault => write!(f, "L2(fault {:#x})", self.0),
            k => write!(f, "L2({k:?} {:#x} {:?})", self.frame(), self.attrs()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::assert_bits;

    /// Bit positions from the ARM ARM's short-descriptor figures.
    #[test]
    fn bit_positions_match_the_manual() {
        use SectionFlags as S;
        assert_bits(&[(S::B, 2), (S::C, 3), (S::XN, 4), (S::AP0, 10), (S::AP1, 11), (S::TEX0, 12)]);
        assert_bits(&[(S::AP2, 15), (S::S, 16), (S::NG, 17), (S::SUPER, 18), (S::NS, 19)]);
        assert_bits(&[(SmallFlags::XN, 0), (SmallFlags::AP0, 4), (SmallFlags::TEX0, 6), (SmallFlags::AP2, 9), (SmallFlags::NG, 11)]);
        assert_bits(&[(LargeFlags::AP0, 4), (LargeFlags::AP2, 9), (LargeFlags::TEX0, 12), (LargeFlags::XN, 15)]);
    }

    #[test]
    fn first_level_encodings() {
        let t = L1Desc::table(0x8012_3400, 3);
        assert_eq!((t.kind(), t.table_base(), t.domain()), (L1Kind::Table, 0x8012_3400, 3));
        assert_eq!(t.0, 0x8012_3400 | 3 << 5 | 1);
        let s = L1Desc::section(0x4560_0000, SectionFlags::AP0 | SectionFlags::AP1 | SectionFlags::NG, 0);
        assert_eq!((s.kind(), s.frame()), (L1Kind::Section, 0x4560_0000));
        assert_eq!(s.0, 0x4560_0000 | 1 << 17 | 1 << 11 | 1 << 10 | 0b10);
        // A supersection above 4 GB: PA[35:32] in bits 23:20, PA[39:36]
        // in bits 8:5.
        let ss = L1Desc::supersection(0x5_3f00_0000 | 0xa0_0000_0000, SectionFlags::AP0);
        assert_eq!(ss.kind(), L1Kind::Supersection);
        assert_eq!(ss.frame(), 0xa5_3f00_0000);
        assert_eq!(ss.0 & 0x00f0_0000, 0x5 << 20);
        assert_eq!(ss.domain(), 0);
        assert_eq!(L1Desc(0b11).kind(), L1Kind::Reserved);
        assert!(L1Desc::FAULT.is_fault());
    }

    #[test]
    fn second_level_encodings_and_conversions() {
        let f = SmallFlags::AP0 | SmallFlags::AP1 | SmallFlags::XN | SmallFlags::TEX1 | SmallFlags::NG;
        let p = L2Desc::small(0x1234_5000, f);
        assert_eq!(p.0, 0x1234_5000 | 1 << 11 | 1 << 7 | 1 << 5 | 1 << 4 | 0b11);
        assert_eq!((p.kind(), p.frame(), p.small_flags()), (L2Kind::Small, 0x1234_5000, f));
        // To a large page: TEX moves to 14:12 and XN to bit 15.
        let l = p.small_to_large();
        assert_eq!(l.0, 0x1234_0000 | 1 << 15 | 1 << 13 | 1 << 11 | 1 << 5 | 1 << 4 | 0b01);
        assert_eq!((l.kind(), l.frame(), l.attrs()), (L2Kind::Large, 0x1234_0000, f));
        assert_eq!(l.large_to_small(5), L2Desc::small(0x1234_5000, f));
        assert_eq!(l.small_view(0x25), L2Desc::small(0x1234_5000, f));
        assert!(l.with(SmallFlags::AP2).has(SmallFlags::AP2) && l.with(SmallFlags::AP2).is_large());
        assert_eq!(l.with(SmallFlags::AP2).0, l.0 | 1 << 9);
        // To and from a section.
        let s = L1Desc::section_from_small(p, 0);
        assert_eq!(s.frame(), 0x1230_0000);
        assert_eq!(s.flags(), SectionFlags::AP0 | SectionFlags::AP1 | SectionFlags::XN | SectionFlags::TEX1 | SectionFlags::NG);
        assert_eq!(s.small_at(0x45), p);
        // A small page has bit 1 set whatever bit 0 (XN) says.
        assert_eq!(L2Desc(0b10).kind(), L2Kind::Small);
        assert_eq!(L2Desc(0b11).kind(), L2Kind::Small);
    }
}
