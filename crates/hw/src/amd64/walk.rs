//! The x86-64 hardware page walk: PML4 -> PDPT -> PD -> PT, starting below the
//! root when the paging-structure caches hold an entry for the address.
//!
//! Faithful points: permissions are the AND of R/W and U/S over every level
//! and the OR of XD; A is set on every entry used, D on the leaf on a write;
//! a PS bit in a PDPTE or PDE ends the walk with a 1 GB or 2 MB page; the
//! paging-structure caches hold only non-leaf entries.

use super::pte::{Pte, PteFlags};
use super::{index, PDPSHIFT, PDRSHIFT, PML4SHIFT};
use crate::addr::PhysAddr;
use crate::mmu::{perm, Access, Translation, WalkFault, WalkRefs, Walker};
use crate::physmem::PhysMem;
use crate::pwc::Pwc;

pub struct Amd64Walker;

const SHIFTS: [u8; 3] = [12, 21, 30];
/// Level shifts, root first: the bits each level's entry covers.
const LEVELS: [u32; 4] = [PML4SHIFT, PDPSHIFT, PDRSHIFT, 12];

fn canonical(va: u64) -> bool {
    let top = (va as i64) >> 47;
    top == 0 || top == -1
}

/// The leaf found by a walk, before permission checks.
struct Leaf {
    /// Physical addresses of the entries used, root first.
    entries: [u64; 4],
    n: usize,
    shift: u32,
    pte: Pte,
    rw: bool,
    us: bool,
    nx: bool,
}

/// Walks from `table` at level `lvl` (index into LEVELS), reading entries.
fn descend(mem: &PhysMem, mut table: u64, mut lvl: usize, va: u64, mut on_read: impl FnMut(u64, u32, u64)) -> Result<Leaf, WalkFault> {
    let mut leaf = Leaf { entries: [0; 4], n: 0, shift: 12, pte: Pte::EMPTY, rw: true, us: true, nx: false };
    loop {
        let shift = LEVELS[lvl];
        let ea = table + index(va, shift) * 8;
        let e = Pte(mem.read_u64(PhysAddr(ea)));
        leaf.entries[leaf.n] = ea;
        leaf.n += 1;
        if !e.valid() {
            return Err(WalkFault::NotPresent { level: lvl as u8 });
        }
        leaf.rw &= e.has(PteFlags::RW);
        leaf.us &= e.has(PteFlags::US);
        leaf.nx |= e.has(PteFlags::NX);
        let is_leaf = shift == 12 || ((shift == PDRSHIFT || shift == PDPSHIFT) && e.has(PteFlags::PS));
        if is_leaf {
            leaf.shift = shift;
            leaf.pte = e;
            return Ok(leaf);
        }
        on_read(ea, shift, e.frame());
        table = e.frame();
        lvl += 1;
    }
}

fn frame_of(pte: Pte, shift: u32) -> u64 {
    match shift {
        30 => pte.frame_1g(),
        21 => pte.frame_2m(),
        _ => pte.frame(),
    }
}

impl Walker for Amd64Walker {
    fn page_shifts(&self) -> &[u8] {
        &SHIFTS
    }

    fn walk(
        &self,
        mem: &mut PhysMem,
        pwc: &mut Pwc,
        root: PhysAddr,
        asid: u16,
        va: u64,
        access: Access,
        refs: &mut WalkRefs,
    ) -> Result<Translation, WalkFault> {
        if !canonical(va) {
            return Err(WalkFault::BadAddress);
        }
        // Start from the deepest paging-structure cache hit.
        let (table, lvl) = match pwc.lookup(va, asid) {
            Some((shift, t)) => (t, LEVELS.iter().position(|&s| s == shift as u32).unwrap() + 1),
            None => (root.0, 0),
        };
        let mut fills: [(u64, u32, u64); 4] = [(0, 0, 0); 4];
        let mut nf = 0;
        let leaf = descend(mem, table, lvl, va, |ea, shift, next| {
            fills[nf] = (ea, shift, next);
            nf += 1;
        });
        // The reads happened whether or not the walk succeeded.
        let leaf = match leaf {
            Ok(l) => l,
            Err(f) => {
                refs.push(0); // at least one reference was made
                return Err(f);
            }
        };
        for &ea in &leaf.entries[..leaf.n] {
            refs.push(ea);
        }
        // User-mode access rules (all workloads run in user mode).
        let ok = leaf.us
            && match access {
                Access::Read => true,
                Access::Write => leaf.rw,
                Access::Exec => !leaf.nx,
            };
        if !ok {
            return Err(WalkFault::Protection);
        }
        for &(_, shift, next) in &fills[..nf] {
            pwc.fill(va, asid, shift as u8, next);
        }
        // Set A on every entry used and D on the leaf for a write, as the
        // processor does with locked updates.
        for (i, &ea) in leaf.entries[..leaf.n].iter().enumerate() {
            let e = Pte(mem.read_u64(PhysAddr(ea)));
            let mut n = e.with(PteFlags::A);
            if i == leaf.n - 1 && access == Access::Write {
                n = n.with(PteFlags::D);
            }
            if n != e {
                mem.write_u64(PhysAddr(ea), n.0);
            }
        }
        let dirty = access == Access::Write || leaf.pte.has(PteFlags::D);
        Ok(Translation { pa_base: frame_of(leaf.pte, leaf.shift), shift: leaf.shift as u8, perm: make_perm(&leaf, dirty) })
    }

    fn probe(&self, mem: &PhysMem, root: PhysAddr, va: u64) -> Option<Translation> {
        if !canonical(va) {
            return None;
        }
        let leaf = descend(mem, root.0, 0, va, |_, _, _| {}).ok()?;
        if !leaf.us {
            return None;
        }
        let dirty = leaf.pte.has(PteFlags::D);
        Some(Translation { pa_base: frame_of(leaf.pte, leaf.shift), shift: leaf.shift as u8, perm: make_perm(&leaf, dirty) })
    }
}

fn make_perm(leaf: &Leaf, dirty: bool) -> u8 {
    let mut p = perm::READ | perm::USER;
    if leaf.rw {
        p |= perm::WRITE;
    }
    if !leaf.nx {
        p |= perm::EXEC;
    }
    if dirty {
        p |= perm::DIRTY;
    }
    if leaf.pte.has(PteFlags::G) {
        p |= perm::GLOBAL;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pwc::PwcLevelConfig;

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
        let t = w.walk(&mut mem, &mut pwc, PhysAddr(pml4), 1, va, Access::Read, &mut refs).unwrap();
        assert_eq!(t.pa(va), PhysAddr(0x9_9abc));
        assert_eq!((t.shift, t.perm & perm::WRITE), (12, 0));
        assert_eq!(refs.as_slice(), &[pml4 + 254 * 8, pdpt + 72 * 8, pd + 418 * 8, pt + 359 * 8]);
        assert!(Pte(mem.read_u64(PhysAddr(pt + 359 * 8))).has(PteFlags::A), "A set by the walk");
        assert_eq!(w.walk(&mut mem, &mut pwc, PhysAddr(pml4), 1, va, Access::Write, &mut refs), Err(WalkFault::Protection));
        // Second walk starts at the PT thanks to the PDE cache.
        refs.clear();
        w.walk(&mut mem, &mut pwc, PhysAddr(pml4), 1, va, Access::Read, &mut refs).unwrap();
        assert_eq!(refs.as_slice(), &[pt + 359 * 8]);

        // A 2 MB page: PDE with PS at index 419.
        let va2 = (va & !((1 << 30) - 1)) | (419 << 21) | 0x1_2345;
        mem.write_u64(PhysAddr(pd + 419 * 8), Pte::new(0x4060_0000, user | PteFlags::PS).0);
        let t = w.walk(&mut mem, &mut pwc, PhysAddr(pml4), 1, va2, Access::Write, &mut refs).unwrap();
        assert_eq!((t.shift, t.pa(va2)), (21, PhysAddr(0x4061_2345)));
        let pde = Pte(mem.read_u64(PhysAddr(pd + 419 * 8)));
        assert!(pde.has(PteFlags::A | PteFlags::D), "A and D set on the 2 MB leaf");
        assert_eq!(w.probe(&mem, PhysAddr(pml4), va2).unwrap().pa_base, 0x4060_0000);
        assert_eq!(
            w.walk(&mut mem, &mut pwc, PhysAddr(pml4), 1, 0x8000_0000_0000, Access::Read, &mut refs),
            Err(WalkFault::BadAddress)
        );
        assert!(matches!(
            w.walk(&mut mem, &mut pwc, PhysAddr(pml4), 1, 0x1000, Access::Read, &mut refs),
            Err(WalkFault::NotPresent { level: 0 })
        ));
    }
}
