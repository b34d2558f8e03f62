//! The RISC-V hardware page walk for Sv39 and Sv48 (the privileged spec's
//! "Virtual Address Translation Process"), starting below the root when the
//! page-walk cache holds a pointer for the address.
//!
//! Faithful points: the address must be canonical for the mode; a PTE with
//! V clear, or W without R, or reserved bits faults; R or X marks a leaf at
//! any level, so a leaf at level 1 is a 2 MB megapage and at level 2 a 1 GB
//! gigapage; a superpage leaf whose PPN is not aligned to its size faults;
//! permissions come from the leaf alone (U for user mode, R, W, X); and the
//! A and D bits are either set by the walker (Svadu) or, when clear, make
//! the access page-fault (Svade), as the machine profile chooses. Only
//! pointers (non-leaf PTEs) are kept in the page-walk cache.

use super::pte::{Pte, PteFlags};
use super::{Mode, L0_SHIFT, L1_SHIFT, L2_SHIFT, L3_SHIFT};
use crate::mmu::{perm, Access, AdUpdate, Translation, WalkFault};
use crate::physmem::PhysMem;
use crate::radix::{Found, Geometry, Level, RadixFormat, Step, VaRange};

pub struct RiscvWalker {
    mode: Mode,
    ad: AdUpdate,
    /// The mode's geometry, SV39 or SV48.
    geometry: &'static Geometry,
}

impl RiscvWalker {
    pub fn new(mode: Mode, ad: AdUpdate) -> RiscvWalker {
        let geometry = match mode {
            Mode::Sv39 => &SV39,
            Mode::Sv48 => &SV48,
        };
        RiscvWalker { mode, ad, geometry }
    }
    pub fn mode(&self) -> Mode {
        self.mode
    }
    pub fn ad_update(&self) -> AdUpdate {
        self.ad
    }
}

/// Sv39: three levels of 512 PTEs, 4 KB pages, 2 MB megapages and 1 GB
/// gigapages, 39-bit canonical addresses.
const SV39: Geometry = Geometry {
    levels: &[Level::new(L1_SHIFT, 9), Level::new(L2_SHIFT, 9), Level::new(L3_SHIFT, 9)],
    page_shifts: &[12, 21, 30],
    range: VaRange::Canonical(39),
};
/// Sv48: a fourth level above, 512 GB terapages, 48-bit addresses.
const SV48: Geometry = Geometry {
    levels: &[Level::new(L0_SHIFT, 9), Level::new(L1_SHIFT, 9), Level::new(L2_SHIFT, 9), Level::new(L3_SHIFT, 9)],
    page_shifts: &[12, 21, 30, 39],
    range: VaRange::Canonical(48),
};

/// Whether a leaf permits a user-mode `access` (MXR and SUM are not
/// modelled: all workloads run in user mode).
#[inline]
fn permits(e: Pte, access: Access) -> bool {
    e.has(PteFlags::U)
        && match access {
            Access::Read => e.has(PteFlags::R),
            Access::Write => e.has(PteFlags::W),
            Access::Exec => e.has(PteFlags::X),
        }
}

#[inline]
fn make_perm(e: Pte) -> u8 {
    let mut p = 0;
    for (f, b) in [(PteFlags::R, perm::READ), (PteFlags::W, perm::WRITE), (PteFlags::X, perm::EXEC), (PteFlags::U, perm::USER), (PteFlags::D, perm::DIRTY), (PteFlags::G, perm::GLOBAL)] {
        if e.has(f) {
            p |= b;
        }
    }
    p
}

impl RadixFormat for RiscvWalker {
    type Limits = ();
    type Leaf = Pte;
    const VALID: u64 = PteFlags::V.bits();

    #[inline(always)]
    fn geometry(&self) -> &'static Geometry {
        self.geometry
    }

    #[inline(always)]
    fn decode(&self, level: usize, raw: u64, _: &mut ()) -> Step<Pte> {
        let e = Pte(raw);
        if e.reserved() {
            return Step::Reserved;
        }
        let levels = self.geometry().levels;
        if e.is_leaf() {
            // A superpage's PPN bits below its size must be zero.
            let misaligned = e.frame() & ((1u64 << levels[level].shift) - 1) != 0;
            return if misaligned { Step::Reserved } else { Step::Leaf(e) };
        }
        if level + 1 == levels.len() {
            // A pointer where only a leaf may be.
            return Step::Reserved;
        }
        Step::Table { next: e.frame(), cache: Some(e.frame()) }
    }

    #[inline(always)]
    fn permit(&self, mem: &mut PhysMem, found: &mut Found<Self>, access: Access) -> Result<(), WalkFault> {
        let e = found.leaf;
        if !permits(e, access) {
            return Err(WalkFault::Protection);
        }
        let need = if access == Access::Write { PteFlags::A | PteFlags::D } else { PteFlags::A };
        if !e.has(need) {
            match self.ad {
                AdUpdate::Fault => return Err(WalkFault::AccessedDirty),
                AdUpdate::Hardware => {
                    // Svadu: the update is atomic with the permission check.
                    found.leaf = e.with(need);
                    mem.write_u64(found.entry(), found.leaf.0);
                }
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn visible(&self, found: &Found<Self>) -> bool {
        found.leaf.has(PteFlags::U)
    }

    #[inline(always)]
    fn translation(&self, _: &PhysMem, found: &Found<Self>) -> Translation {
        let e = found.leaf;
        Translation { pa_base: e.frame(), shift: self.geometry().levels[found.level].shift as u8, perm: make_perm(e) }
    }
}

#[cfg(test)]
mod tests {
    use crate::VirtAddr;
    use super::super::index;
    use super::*;
    use crate::addr::PhysAddr;
    use crate::mmu::{WalkRefs, WalkReq, Walker};
    use crate::pwc::{Pwc, PwcLevelConfig};

    const USER_RW: PteFlags = PteFlags::V.union(PteFlags::R).union(PteFlags::W).union(PteFlags::U);

    fn setup() -> (PhysMem, Pwc, WalkRefs) {
        (PhysMem::new(1 << 20, false), Pwc::new(&[PwcLevelConfig { shift: 21, entries: 4 }]), WalkRefs::default())
    }

    /// Builds, by hand, the Sv39 tables for one 4 KB page and one 2 MB
    /// megapage and walks addresses through each.
    #[test]
    fn sv39_walk_by_hand() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (root, l2t, l3t) = (0x1000u64, 0x2000u64, 0x3000u64);
        let va: u64 = 0x12_3456_7abc;
        // VPN[2] = 72, VPN[1] = 418, VPN[0] = 359.
        assert_eq!((index(va, 30), index(va, 21), index(va, 12)), (72, 418, 359));
        mem.write_u64(PhysAddr(root + 72 * 8), Pte::table(l2t).0);
        mem.write_u64(PhysAddr(l2t + 418 * 8), Pte::table(l3t).0);
        mem.write_u64(PhysAddr(l3t + 359 * 8), Pte::new(0x9_9000, PteFlags::V | PteFlags::R | PteFlags::U | PteFlags::A).0);
        let w = RiscvWalker::new(Mode::Sv39, AdUpdate::Fault);
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!((t.pa(va), t.shift, t.perm & perm::WRITE), (PhysAddr(0x9_9abc), 12, 0));
        assert_eq!(refs.as_slice(), &[root + 72 * 8, l2t + 418 * 8, l3t + 359 * 8]);
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Write), &mut refs), Err(WalkFault::Protection));
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Exec), &mut refs), Err(WalkFault::Protection));
        // The walk cache holds the pointer to the L3 table: one read.
        refs.clear();
        w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!(refs.as_slice(), &[l3t + 359 * 8]);

        // A megapage leaf at level 1, index 419.
        let va2 = (va & !((1 << 30) - 1)) | (419 << 21) | 0x1_2345;
        mem.write_u64(PhysAddr(l2t + 419 * 8), Pte::new(0x4060_0000, USER_RW | PteFlags::A | PteFlags::D).0);
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va2), Access::Write), &mut refs).unwrap();
        assert_eq!((t.shift, t.pa(va2)), (21, PhysAddr(0x4061_2345)));
        assert_eq!(w.probe(&mem, PhysAddr(root), VirtAddr(va2)).unwrap().pa_base, 0x4060_0000);
        // Non-canonical and not-present addresses.
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(1 << 38), Access::Read), &mut refs), Err(WalkFault::BadAddress));
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(0x1000), Access::Read), &mut refs), Err(WalkFault::NotPresent { level: 0 }));
    }

    #[test]
    fn accessed_and_dirty_fault_or_are_set_by_the_walker() {
        let (mut mem, mut pwc, mut refs) = setup();
        let root = 0x1000u64;
        // A gigapage leaf in the root, clean and never accessed.
        let leaf_pa = PhysAddr(root + 2 * 8);
        mem.write_u64(leaf_pa, Pte::new(0x4000_0000, USER_RW).0);
        let va = (2u64 << 30) + 0x5678;
        let svade = RiscvWalker::new(Mode::Sv39, AdUpdate::Fault);
        assert_eq!(svade.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Read), &mut refs), Err(WalkFault::AccessedDirty));
        assert_eq!(mem.read_u64(leaf_pa), Pte::new(0x4000_0000, USER_RW).0, "Svade leaves the PTE alone");
        mem.write_u64(leaf_pa, Pte::new(0x4000_0000, USER_RW | PteFlags::A).0);
        let t = svade.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!((t.shift, t.perm & perm::DIRTY), (30, 0));
        assert_eq!(svade.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Write), &mut refs), Err(WalkFault::AccessedDirty), "a store needs D");

        let svadu = RiscvWalker::new(Mode::Sv39, AdUpdate::Hardware);
        mem.write_u64(leaf_pa, Pte::new(0x4000_0000, USER_RW).0);
        svadu.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert!(Pte(mem.read_u64(leaf_pa)).has(PteFlags::A) && !Pte(mem.read_u64(leaf_pa)).has(PteFlags::D));
        let t = svadu.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Write), &mut refs).unwrap();
        assert!(Pte(mem.read_u64(leaf_pa)).has(PteFlags::A | PteFlags::D));
        assert_ne!(t.perm & perm::DIRTY, 0);
    }

    #[test]
    fn reserved_encodings_and_misaligned_superpages_fault() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (root, l2t) = (0x1000u64, 0x2000u64);
        let w = RiscvWalker::new(Mode::Sv39, AdUpdate::Hardware);
        mem.write_u64(PhysAddr(root), Pte::table(l2t).0);
        // A megapage whose frame is 4 KB- but not 2 MB-aligned.
        mem.write_u64(PhysAddr(l2t), Pte::new(0x20_1000, USER_RW).0);
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(0x10), Access::Read), &mut refs), Err(WalkFault::Reserved { level: 1 }));
        // W without R.
        mem.write_u64(PhysAddr(l2t + 8), Pte::new(0x40_0000, PteFlags::V | PteFlags::W | PteFlags::U).0);
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(0x20_0000), Access::Write), &mut refs), Err(WalkFault::Reserved { level: 1 }));
        // A pointer at level 0.
        let l3t = 0x3000u64;
        mem.write_u64(PhysAddr(l2t + 16), Pte::table(l3t).0);
        mem.write_u64(PhysAddr(l3t), Pte::table(0x5000).0);
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(0x40_0000), Access::Read), &mut refs), Err(WalkFault::Reserved { level: 2 }));
        // A user access to a supervisor page.
        mem.write_u64(PhysAddr(l3t + 8), Pte::new(0x9000, PteFlags::V | PteFlags::R | PteFlags::A).0);
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(0x40_1000), Access::Read), &mut refs), Err(WalkFault::Protection));
    }

    #[test]
    fn sv48_has_four_levels() {
        let (mut mem, mut pwc, mut refs) = setup();
        let (root, l1t, l2t, l3t) = (0x1000u64, 0x2000u64, 0x3000u64, 0x4000u64);
        let va: u64 = 0x7f12_3456_7abc;
        let w = RiscvWalker::new(Mode::Sv48, AdUpdate::Hardware);
        mem.write_u64(PhysAddr(root + index(va, 39) * 8), Pte::table(l1t).0);
        mem.write_u64(PhysAddr(l1t + index(va, 30) * 8), Pte::table(l2t).0);
        mem.write_u64(PhysAddr(l2t + index(va, 21) * 8), Pte::table(l3t).0);
        mem.write_u64(PhysAddr(l3t + index(va, 12) * 8), Pte::new(0x7000, USER_RW).0);
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Write), &mut refs).unwrap();
        assert_eq!(t.pa(va), PhysAddr(0x7abc));
        assert_eq!(refs.n, 4);
        assert_eq!(w.page_shifts(), &[12, 21, 30, 39]);
        assert_eq!(
            RiscvWalker::new(Mode::Sv39, AdUpdate::Hardware).walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(root), 0, VirtAddr(va), Access::Read), &mut refs),
            Err(WalkFault::BadAddress),
            "not canonical under Sv39"
        );
    }
}
