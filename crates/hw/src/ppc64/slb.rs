//! Segment lookaside buffer entries (Power ISA v3.0 Book III, 5.7.6.1,
//! "Segment Lookaside Buffer"), in the two register images `slbmte` takes:
//! the ESID word (SLBE) and the VSID word (SLBV). Bit positions below are
//! counted from the least significant bit; the ISA counts from the most
//! significant (its bit 63 is bit 0 here). Values match FreeBSD's slb.h.

use super::{BASE_SHIFT, LARGE_SHIFT, SEGMENT_SHIFT};
use bitflags::bitflags;

/// The ESID word: the effective segment ID in bits 63..28, V, and the SLB
/// index the entry is written to in the low bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlbE(pub u64);

impl SlbE {
    /// V: the entry translates its segment.
    pub const V: u64 = 1 << 27;
    /// The low 12 bits name the SLB slot (`slbmte` RB[52:63]).
    pub const INDEX_MASK: u64 = 0xfff;

    pub fn new(esid: u64, index: u64) -> SlbE {
        debug_assert!(index <= Self::INDEX_MASK);
        SlbE((esid << SEGMENT_SHIFT) | Self::V | index)
    }
    pub fn valid(self) -> bool {
        self.0 & Self::V != 0
    }
    pub fn esid(self) -> u64 {
        self.0 >> SEGMENT_SHIFT
    }
}

bitflags! {
    /// Flag bits of the VSID word.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct SlbVFlags: u64 {
        /// Ks: the storage key used in privileged state.
        const KS = 1 << 11;
        /// Kp: the storage key used in problem (user) state; with it set,
        /// PP = 0b00 denies user access.
        const KP = 1 << 10;
        /// N: no instruction fetch from the segment.
        const N = 1 << 9;
        /// L: the segment's base page size is larger than 4 KB, as LP says.
        const L = 1 << 8;
        /// C: class, for `slbie` and `tlbie` selection.
        const C = 1 << 7;
        /// LP (two bits): with L, which large base page size.
        const LP1 = 1 << 5;
        const LP0 = 1 << 4;
    }
}

/// The VSID word: the virtual segment ID in bits 61..12, the segment size B
/// in bits 63..62 (0b00 = 256 MB, the only size modelled), and the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlbV(pub u64);

impl SlbV {
    /// Position of the VSID (FreeBSD SLBV_VSID_SHIFT).
    pub const VSID_SHIFT: u32 = 12;
    /// The VSID field: 50 bits for 256 MB segments.
    pub const VSID_MASK: u64 = ((1 << 50) - 1) << Self::VSID_SHIFT;
    const LP_MASK: u64 = SlbVFlags::LP1.bits() | SlbVFlags::LP0.bits();

    /// A user segment of `vsid` with 4 KB base pages (L = 0): FreeBSD's
    /// user segments, which hold 16 MB pages as mixed-size entries.
    pub fn user(vsid: u64) -> SlbV {
        SlbV((vsid << Self::VSID_SHIFT) | SlbVFlags::KP.bits())
    }
    /// A segment of `vsid` whose base page size is 16 MB (L = 1, LP =
    /// 0b00), as FreeBSD maps the kernel's direct map.
    pub fn large(vsid: u64) -> SlbV {
        SlbV((vsid << Self::VSID_SHIFT) | SlbVFlags::KP.bits() | SlbVFlags::L.bits())
    }
    pub fn vsid(self) -> u64 {
        (self.0 & Self::VSID_MASK) >> Self::VSID_SHIFT
    }
    pub fn flags(self) -> SlbVFlags {
        SlbVFlags::from_bits_truncate(self.0)
    }
    pub fn has(self, f: SlbVFlags) -> bool {
        self.flags().contains(f)
    }
    /// log2 of the segment's base page size from L||LP, for the sizes the
    /// model supports: 4 KB (L = 0) and 16 MB (L = 1, LP = 0b00). Other
    /// encodings (64 KB base pages) are not modelled.
    pub fn base_shift(self) -> Option<u32> {
        match (self.has(SlbVFlags::L), self.0 & Self::LP_MASK) {
            (false, 0) => Some(BASE_SHIFT),
            (true, 0) => Some(LARGE_SHIFT),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        let e = SlbE::new(0x12345, 3);
        assert_eq!(e.0, 0x1234_5000_0000 | (1 << 27) | 3);
        assert_eq!((e.esid(), e.valid()), (0x12345, true));
        let v = SlbV::user(0xabcdef);
        assert_eq!(v.0, (0xabcdef << 12) | 0x400);
        assert_eq!((v.vsid(), v.base_shift()), (0xabcdef, Some(12)));
        assert!(v.has(SlbVFlags::KP) && !v.has(SlbVFlags::L));
        assert_eq!(SlbV::large(7).base_shift(), Some(24));
        assert_eq!(SlbV((7 << 12) | 0x100 | 0x10).base_shift(), None, "64 KB base pages are not modelled");
    }
}
