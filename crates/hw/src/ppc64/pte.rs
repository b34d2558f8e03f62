//! Hashed page table entries (Power ISA v3.0 Book III, 5.7.7.1, "Page
//! Table Entry"): two doublewords. Bit positions are counted from the least
//! significant bit (the ISA counts from the most significant); values match
//! FreeBSD's pte.h (LPTE_*).
//!
//! Doubleword 0: B (bits 63..62, segment size; 0b00 = 256 MB), AVA (bits
//! 61..7, the abbreviated virtual address: virtual address bits 77..23),
//! SW (bits 6..3, software), L (bit 2, the page is larger than 4 KB), H
//! (bit 1, found through the secondary hash), V (bit 0, valid).
//!
//! Doubleword 1: pp0 (bit 63), ARPN (bits 55..12, the real page number; for
//! a large page its low bits hold LP, which names the actual page size), key
//! (bits 11..9), R (bit 8, referenced), C (bit 7, changed), WIMG (bits 6..3),
//! N (bit 2, no-execute), PP (bits 1..0, page protection).

use super::{segment_offset, BASE_SHIFT, LARGE_SHIFT};
use bitflags::bitflags;

bitflags! {
    /// Flag bits of doubleword 0.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct HpteHi: u64 {
        /// V: the entry is valid.
        const V = 1 << 0;
        /// H: the entry is in the PTEG of the secondary hash.
        const H = 1 << 1;
        /// L: the page is larger than 4 KB; LP in doubleword 1 says how large.
        const L = 1 << 2;
        /// SW bit: entry locked while software updates it (FreeBSD LPTE_LOCKED).
        const SW_LOCKED = 1 << 3;
        /// SW bit: the mapping is wired and must not be evicted (LPTE_WIRED).
        const SW_WIRED = 1 << 4;
    }
}

bitflags! {
    /// Flag bits of doubleword 1.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct HpteLo: u64 {
        /// PP (two bits) with pp0 and the segment's key: the access allowed.
        const PP1 = 1 << 1;
        const PP2 = 1 << 0;
        /// N: no instruction fetch (LPTE_NOEXEC).
        const N = 1 << 2;
        /// G: guarded storage.
        const G = 1 << 3;
        /// M: memory coherence required (all ordinary memory; LPTE_M).
        const M = 1 << 4;
        /// I: caching inhibited.
        const I = 1 << 5;
        /// W: write-through.
        const W = 1 << 6;
        /// C: changed. Set by the hardware on a store (LPTE_CHG).
        const C = 1 << 7;
        /// R: referenced. Set by the hardware on any access (LPTE_REF).
        const R = 1 << 8;
        /// pp0: the high bit of the three-bit page protection.
        const PP0 = 1 << 63;
    }
}

impl HpteLo {
    /// The WIMG storage attributes (LPTE_WIMG).
    pub const WIMG: HpteLo = HpteLo::W.union(HpteLo::I).union(HpteLo::M).union(HpteLo::G);
    /// PP = 0b10: read/write in both states with either key (LPTE_BW).
    pub const PP_RW: HpteLo = HpteLo::PP1;
    /// PP = 0b11: read-only in both states with either key (LPTE_BR).
    pub const PP_RO: HpteLo = HpteLo::PP1.union(HpteLo::PP2);
    /// The two low PP bits.
    pub const PP: HpteLo = HpteLo::PP1.union(HpteLo::PP2);
}

/// Position of the AVA in doubleword 0.
pub const AVA_SHIFT: u32 = 7;
/// The AVA field (LPTE_AVA_MASK).
pub const AVA_MASK: u64 = 0x3fff_ffff_ffff_ff80;
/// B (segment size) and AVA: what identifies the page (LPTE_AVPN_MASK).
pub const AVPN_MASK: u64 = 0xffff_ffff_ffff_ff80;
/// The ARPN field of doubleword 1 (bits 55..12).
pub const RPN_MASK: u64 = 0x00ff_ffff_ffff_f000;
/// The LP field: the low 8 bits of the ARPN of a large-page entry.
pub const LP_MASK: u64 = 0xff << 12;
/// LP of a 16 MB page in a segment of 4 KB base pages (FreeBSD
/// LPTE_LP_4K_16M; the encoding POWER7, POWER8 and POWER9 report in the
/// device tree's ibm,segment-page-sizes).
pub const LP_4K_16M: u64 = 0x38 << 12;
/// LP of a 16 MB page in a segment of 16 MB base pages.
pub const LP_16M_16M: u64 = 0;

/// The AVA of the page holding `ea` in segment `vsid`: virtual address
/// (VSID || segment offset) bits 77..23.
#[inline]
pub fn ava(vsid: u64, ea: u64) -> u64 {
    (vsid << 5) | (segment_offset(ea) >> 23)
}

/// One hashed page table entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Hpte {
    pub hi: u64,
    pub lo: u64,
}

impl Hpte {
    pub const EMPTY: Hpte = Hpte { hi: 0, lo: 0 };

    /// A valid entry mapping the page of `ea` in segment `vsid` to the
    /// real page at `pa`: a 4 KB page, or with `large` a 16 MB page in a
    /// segment of 4 KB base pages (`pa` is then the 16 MB frame). `hid`
    /// records that it sits in the secondary PTEG. `lo` holds the other
    /// doubleword-1 bits (PP, N, WIMG, R, C); `hi` the software bits.
    pub fn new(vsid: u64, ea: u64, pa: u64, large: bool, hid: bool, hi: HpteHi, lo: HpteLo) -> Hpte {
        let mut h = (ava(vsid, ea) << AVA_SHIFT) | (hi | HpteHi::V).bits();
        let mut l = lo.bits();
        if large {
            debug_assert!(pa.trailing_zeros() >= LARGE_SHIFT, "unaligned 16 MB frame {pa:#x}");
            h |= HpteHi::L.bits();
            l |= pa | LP_4K_16M;
        } else {
            debug_assert!(pa.trailing_zeros() >= BASE_SHIFT, "unaligned frame {pa:#x}");
            l |= pa;
        }
        if hid {
            h |= HpteHi::H.bits();
        }
        debug_assert!(pa & !RPN_MASK == 0, "address {pa:#x} does not fit the ARPN");
        Hpte { hi: h, lo: l }
    }

    pub fn hi_flags(self) -> HpteHi {
        HpteHi::from_bits_truncate(self.hi)
    }
    pub fn lo_flags(self) -> HpteLo {
        HpteLo::from_bits_truncate(self.lo)
    }
    pub fn valid(self) -> bool {
        self.hi & HpteHi::V.bits() != 0
    }
    pub fn hid(self) -> bool {
        self.hi & HpteHi::H.bits() != 0
    }
    pub fn large(self) -> bool {
        self.hi & HpteHi::L.bits() != 0
    }
    pub fn wired(self) -> bool {
        self.hi & HpteHi::SW_WIRED.bits() != 0
    }
    pub fn ava(self) -> u64 {
        (self.hi & AVA_MASK) >> AVA_SHIFT
    }
    /// The actual page size (log2) of the entry in a segment whose base
    /// page size is 2^`base`: 4 KB without L; with L, what LP encodes
    /// (16 MB as 0x38 under 4 KB base pages, as 0x00 under 16 MB ones).
    /// None for encodings the model does not implement.
    pub fn actual_shift(self, base: u32) -> Option<u32> {
        match (self.large(), base, self.lo & LP_MASK) {
            (false, BASE_SHIFT, _) => Some(BASE_SHIFT),
            (true, BASE_SHIFT, LP_4K_16M) | (true, LARGE_SHIFT, LP_16M_16M) => Some(LARGE_SHIFT),
            _ => None,
        }
    }
    /// The real address of the first byte of the page, for a page of
    /// 2^`shift` bytes (the LP bits of a large page are not address bits).
    pub fn frame(self, shift: u32) -> u64 {
        self.lo & RPN_MASK & !((1u64 << shift) - 1)
    }
    /// Whether the entry translates the page holding `ea` in `vsid`, for a
    /// page of 2^`shift` bytes: the AVAs agree above the page size (a 16 MB
    /// page ignores AVA bit 0, virtual address bit 23). B must be 0b00. The
    /// bits of the page number below the AVA are implied by the PTEG the
    /// entry was found in.
    pub fn matches(self, vsid: u64, ea: u64, shift: u32) -> bool {
        let ignore = if shift > 23 { (1u64 << (shift - 23)) - 1 } else { 0 };
        let b_256m = self.hi & (AVPN_MASK & !AVA_MASK) == 0;
        self.valid() && b_256m && (self.ava() | ignore) == (ava(vsid, ea) | ignore)
    }
}

impl std::fmt::Debug for Hpte {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hpte(ava {:#x} {:?} rpn {:#x} {:?})", self.ava(), self.hi_flags(), self.lo & RPN_MASK, self.lo_flags())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::assert_bits;

    /// Bit positions from the ISA's PTE figure, counted from the LSB.
    #[test]
    fn bit_positions_match_the_isa() {
        assert_bits(&[(HpteHi::V, 0), (HpteHi::H, 1), (HpteHi::L, 2)]);
        assert_bits(&[(HpteLo::N, 2), (HpteLo::G, 3), (HpteLo::M, 4), (HpteLo::I, 5), (HpteLo::W, 6), (HpteLo::C, 7), (HpteLo::R, 8), (HpteLo::PP0, 63)]);
        // FreeBSD's values for the same fields.
        assert_eq!((HpteLo::PP_RW.bits(), HpteLo::PP_RO.bits(), HpteLo::WIMG.bits()), (2, 3, 0x78));
        assert_eq!(AVPN_MASK & !AVA_MASK, 0xc000_0000_0000_0000, "B above the AVA");
        assert_eq!(LP_4K_16M, 0x38000);
    }

    #[test]
    fn encode_decode() {
        let vsid = 0x12_3456_789a;
        let ea = 0x7_4567_8000u64; // segment 0x7, offset 0x0567_8000
        let e = Hpte::new(vsid, ea, 0x9876_5000, false, true, HpteHi::SW_WIRED, HpteLo::PP_RW | HpteLo::M);
        assert!(e.valid() && e.hid() && !e.large() && e.wired());
        assert_eq!(e.ava(), (vsid << 5) | (0x0567_8000 >> 23));
        assert_eq!(e.hi, (e.ava() << 7) | 0x13);
        assert_eq!(e.frame(12), 0x9876_5000);
        assert_eq!(e.actual_shift(12), Some(12));
        assert_eq!(e.actual_shift(24), None, "a 4 KB entry in a 16 MB segment");
        assert!(e.matches(vsid, ea + 0xfff, 12));
        assert!(!e.matches(vsid + 1, ea, 12));
        assert!(!e.matches(vsid, ea + (1 << 23), 12));

        let big = Hpte::new(vsid, 0x4500_0000 + 0x12_3000, 0x1_0300_0000, true, false, HpteHi::empty(), HpteLo::PP_RO);
        assert!(big.large());
        assert_eq!(big.lo & LP_MASK, LP_4K_16M);
        assert_eq!((big.actual_shift(12), big.frame(24)), (Some(24), 0x1_0300_0000));
        // The 16 MB page spans virtual address bit 23: both halves match.
        assert!(big.matches(vsid, 0x4500_0000, 24) && big.matches(vsid, 0x4580_0000, 24));
        assert!(!big.matches(vsid, 0x4600_0000, 24));
    }
}
