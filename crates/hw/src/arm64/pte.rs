//! VMSAv8-64 translation table descriptors (4 KB granule, 48-bit output
//! addresses) as a newtype over the raw 64-bit word, with the attribute
//! bits by their Arm ARM names (D8.3). Bits 55..58 of block and page
//! descriptors are ignored by the hardware; FreeBSD's pmap keeps its own
//! state there (wired, managed, no-promote), and so does ours.
//!
//! One encoding serves every level: bit 0 says valid, bit 1 says table
//! (L0..L2) or page (L3) when set, block (L1, L2) when clear. An L3
//! descriptor with bit 1 clear is reserved and translates nothing.

use crate::desc::flag_accessors;
use bitflags::bitflags;

bitflags! {
    /// Attribute bits of a stage-1 descriptor.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct DescFlags: u64 {
        /// Valid: clear means any access through the entry faults.
        const VALID = 1 << 0;
        /// Descriptor type: table (L0..L2) or page (L3) when set, block
        /// (L1, L2) when clear.
        const TYPE = 1 << 1;
        /// AttrIndx[2:0]: index of the memory type in MAIR_EL1 (a field).
        const ATTR_INDX = 0b111 << 2;
        /// NS: non-secure output address (secure state only).
        const NS = 1 << 5;
        /// AP[1]: unprivileged (EL0) access allowed.
        const AP_EL0 = 1 << 6;
        /// AP[2]: read-only at every exception level.
        const AP_RO = 1 << 7;
        /// SH[1:0]: shareability (a field; 0b11 = inner shareable).
        const SH = 0b11 << 8;
        /// AF: access flag. With hardware management (HA) the walker sets
        /// it on first use instead of faulting.
        const AF = 1 << 10;
        /// nG: not global; the TLB entry is tagged with the ASID.
        const NG = 1 << 11;
        /// DBM: dirty bit modifier. With hardware management (HD), a write
        /// through an AP[2] = 1 entry with DBM set clears AP[2] instead of
        /// faulting: "writable but clean". FreeBSD calls it ATTR_SW_DBM.
        const DBM = 1 << 51;
        /// Contiguous: one of 16 adjacent, aligned entries with the same
        /// attributes mapping a contiguous, aligned 64 KB region; the TLB
        /// may cache them as one entry.
        const CONTIGUOUS = 1 << 52;
        /// PXN: no execution at EL1.
        const PXN = 1 << 53;
        /// UXN (XN): no execution at EL0.
        const UXN = 1 << 54;
        /// Software (ignored by hardware): the mapping is wired (ATTR_SW_WIRED).
        const SW_WIRED = 1 << 55;
        /// Software: the mapped page is managed, with PV entries
        /// (ATTR_SW_MANAGED).
        const SW_MANAGED = 1 << 56;
        /// Software: never promote or demote (ATTR_SW_NO_PROMOTE).
        const SW_NO_PROMOTE = 1 << 57;
        /// Table descriptors only: PXNTable, no EL1 execution below.
        const PXN_TABLE = 1 << 59;
        /// Table descriptors only: UXNTable, no EL0 execution below.
        const UXN_TABLE = 1 << 60;
        /// Table descriptors only: APTable[0], no EL0 access below.
        const AP_TABLE_NO_EL0 = 1 << 61;
        /// Table descriptors only: APTable[1], no writes below.
        const AP_TABLE_RO = 1 << 62;
        /// Table descriptors only: NSTable.
        const NS_TABLE = 1 << 63;
    }
}

/// SH field value of inner-shareable memory (ATTR_SH(ATTR_SH_IS)).
pub const SH_INNER: u64 = 0b11 << 8;
/// MAIR index of normal write-back memory in FreeBSD's MAIR_EL1 layout
/// (VM_MEMATTR_WRITE_BACK in sys/arm64/include/vm.h).
pub const ATTR_IDX_WRITE_BACK: u64 = 2 << 2;
/// Output address of a page or of the table a table descriptor names:
/// bits 47..12.
pub const OA_MASK: u64 = 0x0000_ffff_ffff_f000;
/// Output address of an L2 (2 MB) block: bits 47..21.
pub const L2_BLOCK_MASK: u64 = 0x0000_ffff_ffe0_0000;
/// Output address of an L1 (1 GB) block: bits 47..30.
pub const L1_BLOCK_MASK: u64 = 0x0000_ffff_c000_0000;
/// The attribute bits (FreeBSD's ATTR_MASK: bits 0..11 and 50..63).
pub const ATTR_MASK: u64 = 0xfffc_0000_0000_0fff;

impl DescFlags {
    /// Attributes that must agree across entries for a promotion (or for
    /// the TLB to treat a contiguous run as one): everything but the
    /// output address, the access flag and the Contiguous bit (FreeBSD's
    /// ATTR_PROMOTE).
    pub const PROMOTE: u64 = ATTR_MASK & !(DescFlags::CONTIGUOUS.bits() | DescFlags::AF.bits());
    /// The descriptor type bits (ATTR_DESCR_MASK).
    pub const DESCR_MASK: u64 = DescFlags::VALID.bits() | DescFlags::TYPE.bits();
}

/// One translation table descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Desc(pub u64);

impl Desc {
    pub const EMPTY: Desc = Desc(0);

    pub fn new(pa: u64, flags: DescFlags) -> Desc {
        debug_assert!(pa & !OA_MASK == 0, "address {pa:#x} does not fit the output address field");
        Desc(pa | flags.bits())
    }
    /// A table descriptor naming the next-level table at `pa`.
    pub fn table(pa: u64) -> Desc {
        Desc::new(pa, DescFlags::VALID | DescFlags::TYPE)
    }
    /// A valid table descriptor (at L0..L2) or page descriptor (at L3).
    #[inline]
    pub fn is_table_or_page(self) -> bool {
        self.0 & DescFlags::DESCR_MASK == DescFlags::DESCR_MASK
    }
    /// A valid block descriptor (meaningful at L1 and L2).
    #[inline]
    pub fn is_block(self) -> bool {
        self.0 & DescFlags::DESCR_MASK == DescFlags::VALID.bits()
    }
    /// Output address of a page, or address of the table a table
    /// descriptor names.
    #[inline]
    pub fn oa(self) -> u64 {
        self.0 & OA_MASK
    }
    /// Output address of a block whose level maps 2^shift bytes.
    #[inline]
    pub fn block_oa(self, shift: u32) -> u64 {
        self.0 & OA_MASK & !((1u64 << shift) - 1)
    }
    /// Writable through hardware dirty-state management: read-write, or
    /// read-only with DBM (a write clears AP[2]).
    #[inline]
    pub fn writable(self) -> bool {
        !self.has(DescFlags::AP_RO) || self.has(DescFlags::DBM)
    }
    /// Writable and already written: AP[2] clear.
    #[inline]
    pub fn written(self) -> bool {
        !self.has(DescFlags::AP_RO)
    }
    /// Writable but clean: AP[2] and DBM both set.
    pub fn writable_clean(self) -> bool {
        self.has(DescFlags::AP_RO | DescFlags::DBM)
    }
}

flag_accessors!(Desc, DescFlags, valid = VALID, frame = oa);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desc::assert_bits;

    /// Bit positions from the Arm ARM, D8.3 (stage 1 block and page
    /// descriptor attributes; table descriptor attributes).
    #[test]
    fn bit_positions_match_the_manual() {
        use DescFlags as F;
        assert_bits(&[(F::VALID, 0), (F::TYPE, 1), (F::NS, 5), (F::AP_EL0, 6), (F::AP_RO, 7), (F::AF, 10), (F::NG, 11)]);
        assert_eq!((F::ATTR_INDX.bits(), F::SH.bits()), (0b111 << 2, 0b11 << 8), "AttrIndx[2:0] and SH[1:0]");
        assert_bits(&[(F::DBM, 51), (F::CONTIGUOUS, 52), (F::PXN, 53), (F::UXN, 54)]);
        assert_bits(&[(F::UXN_TABLE, 60), (F::AP_TABLE_NO_EL0, 61), (F::AP_TABLE_RO, 62), (F::NS_TABLE, 63)]);
    }

    #[test]
    fn encode_decode() {
        let page = Desc::new(0x1234_5000, DescFlags::VALID | DescFlags::TYPE | DescFlags::AF | DescFlags::AP_EL0);
        assert_eq!(page.0, 0x1234_5443);
        assert!(page.is_table_or_page() && !page.is_block());
        assert_eq!(page.oa(), 0x1234_5000);
        let block = Desc::new(0x4060_0000, DescFlags::VALID | DescFlags::AP_RO | DescFlags::DBM);
        assert!(block.is_block() && block.writable() && block.writable_clean() && !block.written());
        assert_eq!(block.block_oa(21), 0x4060_0000);
        let l1 = Desc::new(0x1_4000_0000, DescFlags::VALID);
        assert_eq!(l1.block_oa(30), 0x1_4000_0000);
        assert!(!Desc::new(0x5000, DescFlags::VALID | DescFlags::TYPE | DescFlags::AP_RO).writable());
        // The promotion mask ignores the address, AF and Contiguous only.
        let a = page.with(DescFlags::CONTIGUOUS);
        assert_eq!(a.0 & DescFlags::PROMOTE, page.without(DescFlags::AF).0 & DescFlags::PROMOTE);
        assert_ne!(page.0 & DescFlags::PROMOTE, page.with(DescFlags::UXN).0 & DescFlags::PROMOTE);
    }
}
