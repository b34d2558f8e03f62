//! The ARMv7 short-descriptor hardware walk (ARM ARM B3.5 and B3.7),
//! starting from a cached L1 page-table descriptor when the walk cache
//! holds one for the address.
//!
//! Faithful points: TTBR0 covers all 4 GB (TTBCR.N = 0), so the L1 index
//! is VA[31:20]; L1 fault and reserved encodings fault at level 0, an L2
//! fault entry at level 1; any of a large page's (or supersection's) 16
//! identical entries gives the whole 64 KB (16 MB) translation. Faults come
//! in the architecture's priority order: translation, then access flag,
//! then domain, then permission. With SCTLR.AFE set, a leaf with AP[0]
//! clear takes an access flag fault, unless the hardware manages the flag
//! (SCTLR.HA), in which case the walker sets AP[0] in the descriptor it
//! read. A domain that DACR marks no-access (or reserved) faults; a manager
//! domain skips permission checks; a client domain checks the simplified
//! access permissions: AP[1] for PL0 access, AP[2] clear for writes, XN
//! clear for instruction fetches. There is no dirty bit: a store through a
//! writable entry needs no assist. Entries with nG set are tagged with the
//! ASID (CONTEXTIDR); others are global. The walk cache holds L1
//! page-table descriptors only (the L2 table's address and its domain).
//! Memory types (TEX/C/B) do not change timing in the model.

use super::pte::{L1Desc, L1Kind, L2Desc, L2Kind, SectionFlags, SmallFlags};
use super::{dacr, L1_ENTRIES, L2_ENTRIES, SECTION_SHIFT, SMALL_SHIFT, VA_LIMIT};
use crate::mmu::{perm, Access, AdUpdate, Translation, WalkFault};
use crate::physmem::PhysMem;
use crate::radix::{Found, Geometry, Level, RadixFormat, Step, VaRange};

pub struct Armv7Walker {
    /// The Domain Access Control Register.
    dacr: u32,
    /// Who sets the access flag: the walker (SCTLR.HA) or software after
    /// an access flag fault.
    af: AdUpdate,
}

impl Armv7Walker {
    pub fn new(dacr: u32, af: AdUpdate) -> Armv7Walker {
        Armv7Walker { dacr, af }
    }
    /// The walker FreeBSD's pmap-v6 configures: domain 0 a client and the
    /// access flag left to software.
    pub fn freebsd() -> Armv7Walker {
        Armv7Walker::new(dacr::FREEBSD, AdUpdate::Fault)
    }
}

/// The L1 table (4096 entries, indexed by VA[31:20]) and an L2 table (256
/// entries, VA[19:12]); small and large pages, sections and
/// supersections; the 4 GB TTBR0 covers.
const GEOMETRY: Geometry = Geometry {
    levels: &[Level::new(SECTION_SHIFT, L1_ENTRIES.trailing_zeros()), Level::new(SMALL_SHIFT, L2_ENTRIES.trailing_zeros())],
    page_shifts: &[12, 16, 20, 24],
    range: VaRange::Below(VA_LIMIT),
};
/// The bits of an L1 page-table descriptor's table base.
const TABLE_BASE: u64 = !0x3ff;

/// The leaf a descent found.
#[derive(Clone, Copy)]
pub struct Leaf {
    /// Whether it is an L1 descriptor (section or supersection).
    l1: bool,
    /// First byte of the mapped page and log2 of its size.
    frame: u64,
    shift: u8,
    /// Attributes in the small-page layout.
    attrs: SmallFlags,
    /// The TLB permissions its domain gives it, or `None` for a domain
    /// fault.
    perm: Option<u8>,
}

impl Armv7Walker {
    /// A leaf with `attrs` (small-page layout) in `domain`.
    #[inline]
    fn leaf(&self, l1: bool, frame: u64, shift: u8, attrs: SmallFlags, domain: u32) -> Leaf {
        Leaf { l1, frame, shift, attrs, perm: self.permissions(attrs, domain) }
    }

    /// The TLB permissions of a leaf with `attrs` in `domain`, or `None`
    /// for a domain fault: the permission checks of a client domain, none
    /// for a manager domain.
    #[inline]
    fn permissions(&self, attrs: SmallFlags, domain: u32) -> Option<u8> {
        let global = if attrs.contains(SmallFlags::NG) { 0 } else { perm::GLOBAL };
        match dacr::domain(self.dacr, domain) {
            dacr::MANAGER => Some(perm::READ | perm::WRITE | perm::EXEC | perm::USER | perm::DIRTY | global),
            dacr::CLIENT => {
                if !attrs.contains(SmallFlags::AP1) {
                    // PL1-only: no access from user mode.
                    return Some(global);
                }
                let mut p = perm::READ | perm::USER | global;
                if !attrs.contains(SmallFlags::AP2) {
                    p |= perm::WRITE | perm::DIRTY;
                }
                if !attrs.contains(SmallFlags::XN) {
                    p |= perm::EXEC;
                }
                Some(p)
            }
            _ => None,
        }
    }
}

/// The access flag's bit in the descriptor a leaf was read from.
fn af_bit(l: &Leaf) -> u32 {
    if l.l1 {
        SectionFlags::AP0.bits()
    } else {
        SmallFlags::AP0.bits() // the same bit in the large-page format
    }
}

impl RadixFormat for Armv7Walker {
    const ENTRY_BYTES: u64 = 4;
    const REFILL_HIT: bool = true;
    /// The domain of the L1 page-table descriptor the walk went through.
    type Limits = u32;
    type Leaf = Leaf;
    /// Bits[1:0]: 0b00 is a fault entry at either level.
    const VALID: u64 = 0b11;

    #[inline(always)]
    fn geometry(&self) -> &'static Geometry {
        &GEOMETRY
    }

    #[inline(always)]
    fn decode(&self, level: usize, raw: u64, domain: &mut u32) -> Step<Leaf> {
        if level == 0 {
            let e = L1Desc(raw as u32);
            return match e.kind() {
                L1Kind::Fault => Step::NotPresent,
                L1Kind::Reserved => Step::Reserved,
                L1Kind::Section | L1Kind::Supersection => {
                    let shift = if e.kind() == L1Kind::Section { 20 } else { 24 };
                    let attrs = SmallFlags::from_section(e.flags() - SectionFlags::SUPER);
                    Step::Leaf(self.leaf(true, e.frame(), shift, attrs, e.domain()))
                }
                L1Kind::Table => {
                    // The walk cache keeps the L2 table's address with its
                    // domain in the low bits.
                    *domain = e.domain();
                    Step::Table { next: e.table_base(), cache: Some(e.table_base() | e.domain() as u64) }
                }
            };
        }
        let e = L2Desc(raw as u32);
        let shift = match e.kind() {
            L2Kind::Fault => return Step::NotPresent,
            L2Kind::Large => 16,
            L2Kind::Small => 12,
        };
        Step::Leaf(self.leaf(false, e.frame(), shift, e.attrs(), *domain))
    }

    #[inline(always)]
    fn cached_table(&self, cached: u64) -> (u64, u32) {
        (cached & TABLE_BASE, (cached & 0xf) as u32)
    }

    #[inline(always)]
    fn permit(&self, mem: &mut PhysMem, found: &mut Found<Self>, access: Access) -> Result<(), WalkFault> {
        let leaf = found.leaf;
        if !leaf.attrs.contains(SmallFlags::AP0) {
            match self.af {
                AdUpdate::Fault => return Err(WalkFault::AccessedDirty),
                AdUpdate::Hardware => {
                    let ea = found.entry();
                    mem.write_u32(ea, mem.read_u32(ea) | af_bit(&leaf));
                    found.leaf.attrs |= SmallFlags::AP0;
                }
            }
        }
        let p = leaf.perm.ok_or(WalkFault::Protection)?; // a domain fault
        let needed = match access {
            Access::Read => perm::READ,
            Access::Write => perm::WRITE,
            Access::Exec => perm::EXEC,
        };
        if p & needed == 0 {
            return Err(WalkFault::Protection);
        }
        Ok(())
    }

    #[inline(always)]
    fn visible(&self, found: &Found<Self>) -> bool {
        found.leaf.perm.is_some_and(|p| p & perm::USER != 0)
    }

    #[inline(always)]
    fn translation(&self, _: &PhysMem, found: &Found<Self>) -> Translation {
        let l = &found.leaf;
        // A permitted or visible leaf is in a domain that allows access.
        Translation { pa_base: l.frame, shift: l.shift, perm: l.perm.unwrap_or(0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VirtAddr;
    use crate::addr::PhysAddr;
    use crate::armv7::pte::LargeFlags;
    use crate::mmu::{WalkRefs, WalkReq, Walker};
    use crate::pwc::{Pwc, PwcLevelConfig};

    /// User read/write, accessed, not global: what FreeBSD writes for a
    /// dirty user page (AP[0] = A, AP[1] = U, S, nG).
    const URW: SmallFlags = SmallFlags::AP0.union(SmallFlags::AP1).union(SmallFlags::S).union(SmallFlags::NG);

    fn setup() -> (PhysMem, Pwc, WalkRefs) {
        (PhysMem::new(1 << 16, false), Pwc::new(&[PwcLevelConfig { shift: 20, entries: 4 }]), WalkRefs::default())
    }

    fn walk(w: &Armv7Walker, mem: &mut PhysMem, pwc: &mut Pwc, root: u64, va: u64, a: Access) -> Result<Translation, WalkFault> {
        w.walk(mem, pwc, WalkReq::new(PhysAddr(root), 7, VirtAddr(va), a), &mut WalkRefs::default())
    }

    /// Builds, by hand, an L1 table with a page-table pointer, a section
    /// and a supersection, and walks addresses through each.
    #[test]
    fn walk_by_hand() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (root, l2t) = (0x4000u64, 0x8400u64);
        let w = Armv7Walker::freebsd();
        let va: u64 = 0x1234_5678;
        // L1 index 0x123, L2 index 0x45.
        mem.write_u32(PhysAddr(root + 0x123 * 4), L1Desc::table(l2t, 0).0);
        mem.write_u32(PhysAddr(l2t + 0x45 * 4), L2Desc::small(0x9_9000, URW | SmallFlags::AP2).0);
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 7, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!((t.pa(va), t.shift), (PhysAddr(0x9_9678), 12));
        assert_eq!(t.perm & (perm::WRITE | perm::GLOBAL), 0, "read-only, not global");
        assert_eq!(refs.as_slice(), &[root + 0x123 * 4, l2t + 0x45 * 4]);
        assert_eq!(walk(&w, &mut mem, &mut pwc, root, va, Access::Write), Err(WalkFault::Protection));
        // The walk cache now holds the L1 descriptor: one read.
        refs.clear();
        w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 7, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!(refs.as_slice(), &[l2t + 0x45 * 4]);

        // A section at L1 index 0x200, writable, executable.
        mem.write_u32(PhysAddr(root + 0x200 * 4), L1Desc::section(0x7f0_0000, URW.to_section(), 0).0);
        let t = walk(&w, &mut mem, &mut pwc, root, 0x2001_2345, Access::Write).unwrap();
        assert_eq!((t.shift, t.pa(0x2001_2345)), (20, PhysAddr(0x7f1_2345)));
        assert_ne!(t.perm & perm::DIRTY, 0, "no dirty bit: a writable entry needs no assist");
        assert_ne!(t.perm & perm::EXEC, 0);
        // A supersection: 16 identical entries from index 0x300.
        let ss = L1Desc::supersection(0x0300_0000, (URW - SmallFlags::NG).to_section() | SectionFlags::XN);
        for i in 0..16 {
            mem.write_u32(PhysAddr(root + (0x300 + i) * 4), ss.0);
        }
        let t = walk(&w, &mut mem, &mut pwc, root, 0x30a_bcde + 0x2d00_0000, Access::Read).unwrap();
        assert_eq!((t.shift, t.pa(0x30a_bcde)), (24, PhysAddr(0x30a_bcde)));
        assert_ne!(t.perm & perm::GLOBAL, 0, "nG clear");
        assert_eq!(walk(&w, &mut mem, &mut pwc, root, 0x3000_0000, Access::Exec), Err(WalkFault::Protection), "XN");
        // Fault entries, a reserved L1 encoding, and addresses past 4 GB.
        assert_eq!(walk(&w, &mut mem, &mut pwc, root, 0x1000, Access::Read), Err(WalkFault::NotPresent { level: 0 }));
        assert_eq!(walk(&w, &mut mem, &mut pwc, root, 0x1234_6000, Access::Read), Err(WalkFault::NotPresent { level: 1 }));
        mem.write_u32(PhysAddr(root + 0x400 * 4), 0x4010_0003);
        assert_eq!(walk(&w, &mut mem, &mut pwc, root, 0x4000_0000, Access::Read), Err(WalkFault::Reserved { level: 0 }));
        assert_eq!(walk(&w, &mut mem, &mut pwc, root, 1 << 32, Access::Read), Err(WalkFault::BadAddress));
        assert_eq!(w.page_shifts(), &[12, 16, 20, 24]);
    }

    #[test]
    fn any_of_a_large_pages_sixteen_entries_translates_all_of_it() {
        let (mut mem, mut pwc, _) = setup();
        let (root, l2t) = (0x4000u64, 0x8000u64);
        let w = Armv7Walker::freebsd();
        mem.write_u32(PhysAddr(root), L1Desc::table(l2t, 0).0);
        let large = L2Desc::large(0x5_0000, URW.to_large());
        assert_eq!(large.large_flags(), LargeFlags::AP0 | LargeFlags::AP1 | LargeFlags::S | LargeFlags::NG);
        for i in 16..32 {
            mem.write_u32(PhysAddr(l2t + i * 4), large.0);
        }
        for va in [0x1_0000u64, 0x1_7abc, 0x1_ffff] {
            let t = walk(&w, &mut mem, &mut pwc, root, va, Access::Write).unwrap();
            assert_eq!((t.shift, t.pa(va)), (16, PhysAddr(0x5_0000 + (va & 0xffff))));
        }
        assert_eq!(w.probe(&mem, PhysAddr(root), VirtAddr(0x1_2000)).unwrap().shift, 16);
    }

    #[test]
    fn access_flag_faults_or_is_set_by_the_walker() {
        let (mut mem, mut pwc, _) = setup();
        let root = 0x4000u64;
        let section = L1Desc::section(0x10_0000, (URW - SmallFlags::AP0).to_section(), 0);
        mem.write_u32(PhysAddr(root + 4), section.0);
        let va = 0x10_0010;
        let sw = Armv7Walker::freebsd();
        assert_eq!(walk(&sw, &mut mem, &mut pwc, root, va, Access::Read), Err(WalkFault::AccessedDirty));
        assert_eq!(mem.read_u32(PhysAddr(root + 4)), section.0, "software management leaves the entry alone");
        // The access flag fault comes before the permission fault.
        let ro = section.with(SectionFlags::AP2);
        mem.write_u32(PhysAddr(root + 4), ro.0);
        assert_eq!(walk(&sw, &mut mem, &mut pwc, root, va, Access::Write), Err(WalkFault::AccessedDirty));
        let hw = Armv7Walker::new(dacr::FREEBSD, AdUpdate::Hardware);
        assert_eq!(walk(&hw, &mut mem, &mut pwc, root, va, Access::Write), Err(WalkFault::Protection));
        assert!(L1Desc(mem.read_u32(PhysAddr(root + 4))).has(SectionFlags::AP0), "SCTLR.HA: the walker set AP[0]");
        assert!(walk(&hw, &mut mem, &mut pwc, root, va, Access::Read).is_ok());
        assert!(walk(&sw, &mut mem, &mut pwc, root, va, Access::Read).is_ok());
    }

    #[test]
    fn domains_gate_and_bypass_the_permission_checks() {
        let (mut mem, mut pwc, _) = setup();
        let root = 0x4000u64;
        // A read-only, kernel-only section in domain 2.
        let s = L1Desc::section(0x20_0000, (SmallFlags::AP0 | SmallFlags::AP2).to_section(), 2);
        mem.write_u32(PhysAddr(root + 8), s.0);
        let va = 0x20_0000;
        // FreeBSD's DACR: only domain 0 is usable.
        assert_eq!(walk(&Armv7Walker::freebsd(), &mut mem, &mut pwc, root, va, Access::Read), Err(WalkFault::Protection));
        assert!(Armv7Walker::freebsd().probe(&mem, PhysAddr(root), VirtAddr(va)).is_none());
        // Domain 2 a client: user access needs AP[1].
        let client = Armv7Walker::new(dacr::CLIENT << 4, AdUpdate::Fault);
        assert_eq!(walk(&client, &mut mem, &mut pwc, root, va, Access::Read), Err(WalkFault::Protection));
        // Domain 2 a manager: no permission checks at all.
        let manager = Armv7Walker::new(dacr::MANAGER << 4, AdUpdate::Fault);
        let t = walk(&manager, &mut mem, &mut pwc, root, va, Access::Write).unwrap();
        assert_eq!(t.pa(va), PhysAddr(0x20_0000));
    }

    #[test]
    fn walk_cache_keeps_the_domain_of_the_table() {
        let (mut mem, mut pwc, _) = setup();
        let (root, l2t) = (0x4000u64, 0x8c00u64);
        mem.write_u32(PhysAddr(root), L1Desc::table(l2t, 1).0);
        mem.write_u32(PhysAddr(l2t), L2Desc::small(0x7000, URW).0);
        let both = Armv7Walker::new(dacr::CLIENT | dacr::CLIENT << 2, AdUpdate::Fault);
        assert!(walk(&both, &mut mem, &mut pwc, root, 0x10, Access::Read).is_ok());
        // A walker that forbids domain 1 faults even through the cached
        // descriptor.
        let only0 = Armv7Walker::freebsd();
        assert_eq!(walk(&only0, &mut mem, &mut pwc, root, 0x10, Access::Read), Err(WalkFault::Protection));
    }
}
