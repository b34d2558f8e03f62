//! The translation an Alpha 21264 performs on a DTB miss. The hardware
//! has no walker: the miss traps to PALcode, and the OSF/1 PALcode's
//! TB-miss flow (Alpha Architecture Reference Manual, Part II-B,
//! "Translation Buffer Miss") reads the level-3 PTE through the virtual
//! page table, or on a double miss walks level 1, level 2 and level 3,
//! then loads the DTB. The model walks the three levels (keeping the
//! level-2 and level-3 table addresses it followed in the walk cache, as
//! the virtual page table's own DTB entries spare the double miss); the
//! timing model charges the trap as the profile's `walk` cycles.
//!
//! Faults in the manual's order: an address that is not a sign-extended
//! 43-bit value is an access violation (`BadAddress` here, since nothing
//! maps it); V clear at any level is translation-not-valid; a level-3
//! entry without URE (UWE for a store) is an access violation; then FOR,
//! FOW and FOE give fault-on-read, -write and -execute, which the OS uses
//! to emulate reference and modify bits (FreeBSD's pmap_emulate_reference),
//! reported as `AccessedDirty`. Level-1 and level-2 entries need only V.
//!
//! The TB keeps the fault-on bits per entry; the model's TLB keeps write
//! permission and a dirty state only, so an entry with FOR set is not
//! loaded at all (any access through it faults), and an entry with FOW
//! set is loaded as clean (a later store re-enters here and takes the
//! fault-on-write). FreeBSD never leaves FOR set with FOW clear, so this
//! is the hardware's behaviour for every entry its pmap writes.
//!
//! A level-3 entry with granularity hint g yields one translation of
//! 8^g pages, aligned to its size, whose base is the entry's frame rounded
//! down to the block. The manual leaves a block whose entries disagree
//! UNPREDICTABLE; the model faults (`Reserved`) when the entry's frame is
//! not the one its position in the block calls for, so that a pmap error
//! shows instead of translating somewhere.

use super::pte::{Pte, PteFlags};
use super::{L1_SHIFT, L2_SHIFT, L3_SHIFT, NPTEPG, PAGE_SHIFT, VA_BITS};
use crate::mmu::{perm, Access, Translation, WalkFault};
use crate::physmem::PhysMem;
use crate::radix::{Found, Geometry, Level, RadixFormat, Step, VaRange};

/// The PALcode TB-miss walk of the OSF/1 (and FreeBSD) page tables.
#[derive(Default)]
pub struct AlphaWalker;

/// Levels 1, 2 and 3 of 1024 PTEs; the page sizes a DTB entry can have
/// (GH 0..3); sign-extended 43-bit addresses.
const GEOMETRY: Geometry = Geometry {
    levels: &[
        Level::new(L1_SHIFT, NPTEPG.trailing_zeros()),
        Level::new(L2_SHIFT, NPTEPG.trailing_zeros()),
        Level::new(L3_SHIFT, NPTEPG.trailing_zeros()),
    ],
    page_shifts: &[13, 16, 19, 22],
    range: VaRange::Canonical(VA_BITS),
};

/// Whether the level-3 entry's frame is where its block's position puts
/// it: the frame's low 3 GH bits equal the page's index in the block.
fn block_consistent(e: Pte, va: u64) -> bool {
    let mask = e.gh().pages() - 1;
    e.pfn() & mask == (va >> PAGE_SHIFT) & mask
}

/// Whether the entry permits a user-mode `access` (the ACV check): reads
/// and instruction fetches need URE, stores UWE.
fn permits(e: Pte, access: Access) -> bool {
    match access {
        Access::Read | Access::Exec => e.has(PteFlags::URE),
        Access::Write => e.has(PteFlags::UWE),
    }
}

/// Whether the access takes a fault-on trap: FOR on any access (see the
/// module comment), FOW on a store, FOE on an instruction fetch.
fn fault_on(e: Pte, access: Access) -> bool {
    e.has(PteFlags::FOR)
        || match access {
            Access::Read => false,
            Access::Write => e.has(PteFlags::FOW),
            Access::Exec => e.has(PteFlags::FOE),
        }
}

impl RadixFormat for AlphaWalker {
    type Limits = ();
    type Leaf = Pte;
    const VALID: u64 = PteFlags::V.bits();

    #[inline(always)]
    fn geometry(&self) -> &'static Geometry {
        &GEOMETRY
    }

    /// Level-1 and level-2 entries need only V; level 3 is always the leaf.
    #[inline(always)]
    fn decode(&self, level: usize, raw: u64, _: &mut ()) -> Step<Pte> {
        let e = Pte(raw);
        if level == 2 {
            Step::Leaf(e)
        } else {
            Step::Table { next: e.frame(), cache: Some(e.frame()) }
        }
    }

    #[inline(always)]
    fn permit(&self, _: &mut PhysMem, found: &mut Found<Self>, access: Access) -> Result<(), WalkFault> {
        let e = found.leaf;
        if !block_consistent(e, found.va) {
            return Err(WalkFault::Reserved { level: 2 });
        }
        if !permits(e, access) {
            return Err(WalkFault::Protection);
        }
        if fault_on(e, access) {
            return Err(WalkFault::AccessedDirty);
        }
        Ok(())
    }

    #[inline(always)]
    fn visible(&self, found: &Found<Self>) -> bool {
        block_consistent(found.leaf, found.va) && found.leaf.any(PteFlags::URE | PteFlags::UWE)
    }

    #[inline(always)]
    fn translation(&self, _: &PhysMem, found: &Found<Self>) -> Translation {
        let e = found.leaf;
        let shift = e.gh().shift();
        let mut p = perm::USER;
        if e.has(PteFlags::URE) {
            p |= perm::READ;
            if !e.has(PteFlags::FOE) {
                p |= perm::EXEC;
            }
        }
        if e.has(PteFlags::UWE) {
            p |= perm::WRITE;
        }
        if !e.has(PteFlags::FOW) {
            p |= perm::DIRTY;
        }
        if e.has(PteFlags::ASM) {
            p |= perm::GLOBAL;
        }
        Translation { pa_base: e.frame() & !((1u64 << shift) - 1), shift: shift as u8, perm: p }
    }
}

#[cfg(test)]
mod tests {
    use crate::VirtAddr;
    use super::super::index;
    use super::super::pte::Gh;
    use super::*;
    use crate::addr::PhysAddr;
    use crate::mmu::{WalkRefs, WalkReq, Walker};
    use crate::pwc::{Pwc, PwcLevelConfig};

    const USER_RW: PteFlags = PteFlags::V.union(PteFlags::URE).union(PteFlags::UWE).union(PteFlags::KRE).union(PteFlags::KWE);

    fn setup() -> (PhysMem, Pwc, WalkRefs) {
        (PhysMem::new(1 << 20, false), Pwc::new(&[PwcLevelConfig { shift: 23, entries: 4 }]), WalkRefs::default())
    }

    /// Level-1, -2 and -3 tables at 0x2000, 0x4000, 0x6000 linked for the
    /// first 8 MB of the address space; returns the level-1 and level-3.
    fn first_tables(mem: &mut PhysMem) -> (u64, u64) {
        let (l1, l2, l3) = (0x2000u64, 0x4000u64, 0x6000u64);
        mem.write_u64(PhysAddr(l1), Pte::table(l2).0);
        mem.write_u64(PhysAddr(l2), Pte::table(l3).0);
        (l1, l3)
    }

    /// Builds the three levels for one address by hand and walks it:
    /// va 0x246_68b3_d79b (SEG1 0x123, SEG2 0x0d1, SEG3 0x19e,
    /// offset 0x179b) in a level-1 table at 0x10000, level 2 at 0x12000,
    /// level 3 at 0x14000, mapping the 8 KB frame 0x7_6540_0000... (PFN
    /// 0x3b_2a00).
    #[test]
    fn walk_by_hand() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (l1, l2, l3) = (0x1_0000u64, 0x1_2000u64, 0x1_4000u64);
        let va: u64 = (0x123 << 33) | (0x0d1 << 23) | (0x19e << 13) | 0x179b;
        assert_eq!(va, 0x246_68b3_d79b);
        assert_eq!((index(va, L1_SHIFT), index(va, L2_SHIFT), index(va, L3_SHIFT)), (0x123, 0xd1, 0x19e));
        // The entries, written as raw words: PFN in 63:32, V|KRE|KWE for
        // the tables, V|KRE|URE|KWE|UWE for the page.
        mem.write_u64(PhysAddr(l1 + 0x123 * 8), (l2 >> 13) << 32 | 0x1101);
        mem.write_u64(PhysAddr(l2 + 0xd1 * 8), (l3 >> 13) << 32 | 0x1101);
        mem.write_u64(PhysAddr(l3 + 0x19e * 8), 0x3b_2a00u64 << 32 | 0x9901);
        let w = AlphaWalker;
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 1, VirtAddr(va), Access::Write), &mut refs).unwrap();
        assert_eq!((t.pa(va), t.shift), (PhysAddr(0x7_6540_0000 | 0x179b), 13));
        assert_eq!(t.perm & (perm::READ | perm::WRITE | perm::DIRTY | perm::GLOBAL), perm::READ | perm::WRITE | perm::DIRTY);
        assert_eq!(refs.as_slice(), &[l1 + 0x123 * 8, l2 + 0xd1 * 8, l3 + 0x19e * 8]);
        // The walk cache now holds the level-3 table: one read.
        refs.clear();
        w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 1, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!(refs.as_slice(), &[l3 + 0x19e * 8]);
        assert_eq!(w.probe(&mem, PhysAddr(l1), VirtAddr(va)).unwrap().pa(va), t.pa(va));
        // Translation not valid at each level.
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 1, VirtAddr(0x2000), Access::Read), &mut refs), Err(WalkFault::NotPresent { level: 0 }));
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 1, VirtAddr(va + (1 << 23)), Access::Read), &mut refs), Err(WalkFault::NotPresent { level: 1 }));
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 1, VirtAddr(va + (1 << 13)), Access::Read), &mut refs), Err(WalkFault::NotPresent { level: 2 }));
        // Bits 63:43 must copy bit 42.
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 1, VirtAddr(1 << 43), Access::Read), &mut refs), Err(WalkFault::BadAddress));
    }

    /// The fault-on bits emulate reference and modify: FOR faults any
    /// access, FOW a store, FOE an instruction fetch; a read through a
    /// FOW entry is loaded clean.
    #[test]
    fn fault_on_bits() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (l1, l3) = first_tables(&mut mem);
        let w = AlphaWalker;
        let mut at = |mem: &mut PhysMem, e: Pte, a: Access| {
            mem.write_u64(PhysAddr(l3 + 8), e.0);
            w.walk(mem, &mut pwc, WalkReq::new(PhysAddr(l1), 0, VirtAddr(0x2000), a), &mut refs)
        };
        let e = Pte::new(0x8000, USER_RW | PteFlags::FAULT_ON, Gh::G8K);
        for a in [Access::Read, Access::Write, Access::Exec] {
            assert_eq!(at(&mut mem, e, a), Err(WalkFault::AccessedDirty));
        }
        let referenced = e.without(PteFlags::FOR);
        assert_eq!(at(&mut mem, referenced, Access::Read).unwrap().perm & perm::DIRTY, 0);
        assert_eq!(at(&mut mem, referenced, Access::Write), Err(WalkFault::AccessedDirty));
        assert_eq!(at(&mut mem, referenced, Access::Exec), Err(WalkFault::AccessedDirty));
        assert_ne!(at(&mut mem, referenced.without(PteFlags::FOW), Access::Write).unwrap().perm & perm::DIRTY, 0);
        // Access violation comes before fault-on-write.
        assert_eq!(at(&mut mem, referenced.without(PteFlags::UWE), Access::Write), Err(WalkFault::Protection));
        assert_eq!(at(&mut mem, Pte::new(0x8000, PteFlags::V | PteFlags::KRE, Gh::G8K), Access::Read), Err(WalkFault::Protection));
    }

    /// A granularity hint makes one translation of the whole aligned block;
    /// an entry whose frame is out of place in its block faults.
    #[test]
    fn granularity_hint_blocks() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (l1, l3) = first_tables(&mut mem);
        let w = AlphaWalker;
        // A 4 MB block: all 512 entries of the level-3 table, frames from
        // 0x80_0000 (4 MB-aligned).
        for i in 0..512u64 {
            mem.write_u64(PhysAddr(l3 + i * 8), Pte::new(0x80_0000 + i * 8192, USER_RW, Gh::G4M).0);
        }
        let va = 0x12_3456;
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 0, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!((t.shift, t.pa_base, t.pa(va)), (22, 0x80_0000, PhysAddr(0x92_3456)));
        // A 64 KB block at the second 64 KB of the table: entries 8..16.
        for i in 8..16u64 {
            mem.write_u64(PhysAddr(l3 + i * 8), Pte::new(0x2_0000 + (i - 8) * 8192, USER_RW, Gh::G64K).0);
        }
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 0, VirtAddr(0x1_abcd), Access::Read), &mut refs).unwrap();
        assert_eq!((t.shift, t.pa(0x1_abcd)), (16, PhysAddr(0x2_abcd)));
        // A 512 KB hint on an entry whose frame is not where its position
        // in the block puts it.
        mem.write_u64(PhysAddr(l3 + 64 * 8), Pte::new(0x10_2000, USER_RW, Gh::G512K).0);
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(l1), 0, VirtAddr(64 * 8192), Access::Read), &mut refs), Err(WalkFault::Reserved { level: 2 }));
        assert_eq!(w.page_shifts(), &[13, 16, 19, 22]);
    }
}
