//! The x86-64 hardware page walk: PML4 -> PDPT -> PD -> PT, starting below the
//! root when the paging-structure caches hold an entry for the address.
//!
//! Faithful points: permissions are the AND of R/W and U/S over every level
//! and the OR of XD; A is set on every entry used, D on the leaf on a write;
//! a PS bit in a PDPTE or PDE ends the walk with a 1 GB or 2 MB page; the
//! paging-structure caches hold only non-leaf entries.

use super::pte::{Pte, PteFlags};
use super::{PAGE_SHIFT_4K, PDPSHIFT, PDRSHIFT, PML4SHIFT};
use crate::addr::PhysAddr;
use crate::mmu::{perm, Access, Translation, WalkFault};
use crate::physmem::PhysMem;
use crate::radix::{Found, Geometry, Level, RadixFormat, Step, VaRange};

pub struct Amd64Walker;

/// PML4, PDPT, PD and PT of 512 entries; 4 KB pages and 2 MB and 1 GB
/// superpages; 48-bit canonical addresses.
const GEOMETRY: Geometry = Geometry {
    levels: &[Level::new(PML4SHIFT, 9), Level::new(PDPSHIFT, 9), Level::new(PDRSHIFT, 9), Level::new(PAGE_SHIFT_4K, 9)],
    page_shifts: &[12, 21, 30],
    range: VaRange::Canonical(48),
};

/// The rights gathered over every entry used, the leaf's included: R/W and
/// U/S ANDed, XD ORed.
#[derive(Clone, Copy)]
pub struct Rights {
    rw: bool,
    us: bool,
    nx: bool,
}

impl Default for Rights {
    fn default() -> Rights {
        Rights { rw: true, us: true, nx: false }
    }
}

fn frame_of(pte: Pte, shift: u32) -> u64 {
    match shift {
        30 => pte.frame_1g(),
        21 => pte.frame_2m(),
        _ => pte.frame(),
    }
}

impl RadixFormat for Amd64Walker {
    type Limits = Rights;
    type Leaf = Pte;
    const VALID: u64 = PteFlags::P.bits();

    #[inline(always)]
    fn geometry(&self) -> &'static Geometry {
        &GEOMETRY
    }

    #[inline(always)]
    fn decode(&self, level: usize, raw: u64, r: &mut Rights) -> Step<Pte> {
        let e = Pte(raw);
        r.rw &= e.has(PteFlags::RW);
        r.us &= e.has(PteFlags::US);
        r.nx |= e.has(PteFlags::NX);
        let shift = GEOMETRY.levels[level].shift;
        if shift == PAGE_SHIFT_4K || ((shift == PDRSHIFT || shift == PDPSHIFT) && e.has(PteFlags::PS)) {
            Step::Leaf(e)
        } else {
            Step::Table { next: e.frame(), cache: Some(e.frame()) }
        }
    }

    #[inline(always)]
    fn permit(&self, mem: &mut PhysMem, found: &mut Found<Self>, access: Access) -> Result<(), WalkFault> {
        // User-mode access rules (all workloads run in user mode).
        let r = found.limits;
        let ok = r.us
            && match access {
                Access::Read => true,
                Access::Write => r.rw,
                Access::Exec => !r.nx,
            };
        if !ok {
            return Err(WalkFault::Protection);
        }
        // Set A on every entry used and D on the leaf for a write, as the
        // processor does with locked updates.
        let last = found.entries().len() - 1;
        for i in 0..=last {
            let ea = found.entries()[i];
            let e = Pte(mem.read_u64(PhysAddr(ea)));
            let mut n = e.with(PteFlags::A);
            if i == last && access == Access::Write {
                n = n.with(PteFlags::D);
            }
            if n != e {
                mem.write_u64(PhysAddr(ea), n.0);
            }
            if i == last {
                found.leaf = n;
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn visible(&self, found: &Found<Self>) -> bool {
        found.limits.us
    }

    #[inline(always)]
    fn translation(&self, _: &PhysMem, found: &Found<Self>) -> Translation {
        let (r, pte, shift) = (found.limits, found.leaf, GEOMETRY.levels[found.level].shift);
        let mut p = perm::READ | perm::USER;
        if r.rw {
            p |= perm::WRITE;
        }
        if !r.nx {
            p |= perm::EXEC;
        }
        if pte.has(PteFlags::D) {
            p |= perm::DIRTY;
        }
        if pte.has(PteFlags::G) {
            p |= perm::GLOBAL;
        }
        Translation { pa_base: frame_of(pte, shift), shift: shift as u8, perm: p }
    }
}

#[cfg(test)]
mod tests {
    use crate::VirtAddr;
    use super::super::index;
    use super::*;
    use crate::mmu::{WalkRefs, WalkReq, Walker};
    use crate::pwc::{Pwc, PwcLevelConfig};

    /// Builds, by hand, the tables for one 4 KB page and one 2 MB page and
    /// walks an address through each (Intel SDM 4.5, Figures 4-8 and 4-9).
    #[test]
    fn walk_by_hand() {
        let mut mem = PhysMem::new(1 << 20, false);
        let user = PteFlags::P | PteFlags::RW | PteFlags::US;
        let (pml4, pdpt, pd, pt) = (0x1000u64, 0x2000u64, 0x3000u64, 0x4000u64);
        let va: u64 = 0x0000_7f12_3456_7abc;
        // va = PML4 index 254, PDPT index 72, PD index 418, PT index 359.
        assert_eq!((index(va, 39), index(va, 30), index(va, 21), index(va, 12)), (254, 72, 418, 359));
        mem.write_u64(PhysAddr(pml4 + 254 * 8), Pte::new(pdpt, user).0);
        mem.write_u64(PhysAddr(pdpt + 72 * 8), Pte::new(pd, user).0);
        mem.write_u64(PhysAddr(pd + 418 * 8), Pte::new(pt, user).0);
        mem.write_u64(PhysAddr(pt + 359 * 8), Pte::new(0x9_9000, PteFlags::P | PteFlags::US).0);
        let mut pwc = Pwc::new(&[PwcLevelConfig { shift: 21, entries: 4 }]);
        let mut refs = WalkRefs::default();
        let w = Amd64Walker;
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(pml4), 1, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!(t.pa(va), PhysAddr(0x9_9abc));
        assert_eq!((t.shift, t.perm & perm::WRITE), (12, 0));
        assert_eq!(refs.as_slice(), &[pml4 + 254 * 8, pdpt + 72 * 8, pd + 418 * 8, pt + 359 * 8]);
        assert!(Pte(mem.read_u64(PhysAddr(pt + 359 * 8))).has(PteFlags::A), "A set by the walk");
        assert_eq!(w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(pml4), 1, VirtAddr(va), Access::Write), &mut refs), Err(WalkFault::Protection));
        // Second walk starts at the PT thanks to the PDE cache.
        refs.clear();
        w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(pml4), 1, VirtAddr(va), Access::Read), &mut refs).unwrap();
        assert_eq!(refs.as_slice(), &[pt + 359 * 8]);

        // A 2 MB page: PDE with PS at index 419.
        let va2 = (va & !((1 << 30) - 1)) | (419 << 21) | 0x1_2345;
        mem.write_u64(PhysAddr(pd + 419 * 8), Pte::new(0x4060_0000, user | PteFlags::PS).0);
        let t = w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(pml4), 1, VirtAddr(va2), Access::Write), &mut refs).unwrap();
        assert_eq!((t.shift, t.pa(va2)), (21, PhysAddr(0x4061_2345)));
        let pde = Pte(mem.read_u64(PhysAddr(pd + 419 * 8)));
        assert!(pde.has(PteFlags::A | PteFlags::D), "A and D set on the 2 MB leaf");
        assert_eq!(w.probe(&mem, PhysAddr(pml4), VirtAddr(va2)).unwrap().pa_base, 0x4060_0000);
        assert_eq!(
            w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(pml4), 1, VirtAddr(0x8000_0000_0000), Access::Read), &mut refs),
            Err(WalkFault::BadAddress)
        );
        assert!(matches!(
            w.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(pml4), 1, VirtAddr(0x1000), Access::Read), &mut refs),
            Err(WalkFault::NotPresent { level: 0 })
        ));
    }
}
