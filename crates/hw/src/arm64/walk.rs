//! The AArch64 stage-1 hardware walk for EL0 accesses through TTBR0_EL1:
//! L0 -> L1 -> L2 -> L3, starting below the root when the walk caches hold
//! a table descriptor for the address.
//!
//! Faithful points (Arm ARM D8): a level-0 block and a level-3 descriptor
//! with bit 1 clear are translation faults; L1 and L2 blocks end the walk
//! with 1 GB and 2 MB pages; EL0 needs AP[1] on the leaf and no APTable[0]
//! above it, writes need AP[2] clear (or DBM) and no APTable[1], execution
//! needs UXN and UXNTable clear. Hardware access-flag and dirty-state
//! management (FEAT_HAFDBS with TCR_EL1.{HA,HD} set, as FreeBSD enables
//! them): the walker sets AF on the leaf it uses, and a write through a
//! leaf with AP[2] and DBM set clears AP[2], so the descriptor records
//! that the page was written.
//!
//! The Contiguous bit: when the L3 leaf has it and its aligned run of 16
//! descriptors is valid, maps one aligned 64 KB block in order and agrees
//! in every hardware attribute but AF (so also in dirty state), the
//! translation is returned as one 64 KB page, which the TLB caches as one
//! entry. A run that breaks the rules (the architecture makes the result
//! CONSTRAINED UNPREDICTABLE) is translated as 4 KB pages; the pmap's
//! checker reports such runs. The extra descriptors are looked at only to
//! decide this: the hardware reads just the one, and only that one read is
//! charged. Contiguous L2 blocks (32 MB) are not coalesced: the bit is a
//! hint the hardware may ignore, and this model does.

use super::pte::{Desc, DescFlags, ATTR_MASK};
use super::{L0_SHIFT, L1_SHIFT, L2_SHIFT, L3C_ENTRIES, L3C_SHIFT, L3C_SIZE, L3_SHIFT, L3_SIZE, VM_MAXUSER_ADDRESS};
use crate::addr::PhysAddr;
use crate::mmu::{perm, Access, Translation, WalkFault};
use crate::physmem::PhysMem;
use crate::radix::{Found, Geometry, Level, RadixFormat, Step, VaRange};

pub struct Arm64Walker;

/// L0 to L3 of 512 descriptors; TLB entries of 4 KB pages, 64 KB
/// contiguous runs, 2 MB and 1 GB blocks; TTBR0's range.
const GEOMETRY: Geometry = Geometry {
    levels: &[Level::new(L0_SHIFT, 9), Level::new(L1_SHIFT, 9), Level::new(L2_SHIFT, 9), Level::new(L3_SHIFT, 9)],
    page_shifts: &[12, 16, 21, 30],
    range: VaRange::Below(VM_MAXUSER_ADDRESS),
};
/// Table-descriptor bits that restrict the levels below.
const TABLE_LIMITS: DescFlags = DescFlags::PXN_TABLE
    .union(DescFlags::UXN_TABLE)
    .union(DescFlags::AP_TABLE_NO_EL0)
    .union(DescFlags::AP_TABLE_RO);
/// Software bits, which the hardware ignores.
const SW_BITS: u64 = 0xf << 55;
/// The attributes that must agree across a contiguous run for the TLB to
/// treat it as one entry: every hardware attribute but AF.
const RUN_ATTRS: u64 = ATTR_MASK & !SW_BITS & !DescFlags::AF.bits();

/// Hierarchical limits gathered from the table descriptors read.
#[derive(Clone, Copy, Default)]
pub struct TableLimits {
    no_el0: bool,
    read_only: bool,
    uxn: bool,
}

/// If the L3 descriptor at `entry_pa` is part of a well-formed contiguous
/// run, the run's 64 KB-aligned output address.
fn contiguous_run(mem: &PhysMem, entry_pa: u64) -> Option<u64> {
    let base = entry_pa & !(L3C_ENTRIES * 8 - 1);
    let first = Desc(mem.read_u64(PhysAddr(base)));
    if !first.is_table_or_page() || !first.has(DescFlags::CONTIGUOUS) || first.oa() & (L3C_SIZE - 1) != 0 {
        return None;
    }
    let consistent = (1..L3C_ENTRIES).all(|k| {
        let d = Desc(mem.read_u64(PhysAddr(base + k * 8)));
        d.is_table_or_page() && d.oa() == first.oa() + k * L3_SIZE && d.0 & RUN_ATTRS == first.0 & RUN_ATTRS
    });
    consistent.then_some(first.oa())
}

/// Whether an EL0 access of this kind is allowed by the leaf and the
/// table limits above it.
fn permitted(f: &Found<Arm64Walker>, access: Access) -> bool {
    let (d, t) = (f.leaf, f.limits);
    d.has(DescFlags::AP_EL0)
        && !t.no_el0
        && match access {
            Access::Read => true,
            Access::Write => !t.read_only && d.writable(),
            Access::Exec => !t.uxn && !d.has(DescFlags::UXN),
        }
}

impl RadixFormat for Arm64Walker {
    type Limits = TableLimits;
    type Leaf = Desc;
    const VALID: u64 = DescFlags::VALID.bits();

    #[inline(always)]
    fn geometry(&self) -> &'static Geometry {
        &GEOMETRY
    }

    #[inline(always)]
    fn decode(&self, level: usize, raw: u64, t: &mut TableLimits) -> Step<Desc> {
        let d = Desc(raw);
        match level {
            // A block at level 0 is not allowed with the 4 KB granule.
            0 if d.is_block() => Step::NotPresent,
            // Bit 1 clear at level 3 is a reserved encoding.
            3 if !d.is_table_or_page() => Step::NotPresent,
            3 => Step::Leaf(d),
            _ if d.is_block() => Step::Leaf(d),
            _ => {
                t.no_el0 |= d.has(DescFlags::AP_TABLE_NO_EL0);
                t.read_only |= d.has(DescFlags::AP_TABLE_RO);
                t.uxn |= d.has(DescFlags::UXN_TABLE);
                // The walk caches hold table descriptors without restrictions.
                let cache = (!d.flags().intersects(TABLE_LIMITS)).then_some(d.oa());
                Step::Table { next: d.oa(), cache }
            }
        }
    }

    #[inline(always)]
    fn permit(&self, mem: &mut PhysMem, found: &mut Found<Self>, access: Access) -> Result<(), WalkFault> {
        if !permitted(found, access) {
            return Err(WalkFault::Protection);
        }
        // Hardware management: AF on the leaf used, and AP[2] cleared by
        // a write through a writable-clean (DBM) leaf.
        let mut d = found.leaf.with(DescFlags::AF);
        if access == Access::Write {
            d = d.without(DescFlags::AP_RO);
        }
        if d != found.leaf {
            mem.write_u64(found.entry(), d.0);
            found.leaf = d;
        }
        Ok(())
    }

    #[inline(always)]
    fn visible(&self, found: &Found<Self>) -> bool {
        permitted(found, Access::Read)
    }

    /// The translation a leaf gives, coalescing contiguous runs.
    #[inline(always)]
    fn translation(&self, mem: &PhysMem, f: &Found<Self>) -> Translation {
        let d = f.leaf;
        let (pa_base, shift) = match f.level {
            1 => (d.block_oa(L1_SHIFT), L1_SHIFT),
            2 => (d.block_oa(L2_SHIFT), L2_SHIFT),
            _ => match d.has(DescFlags::CONTIGUOUS).then(|| contiguous_run(mem, f.entry().0)).flatten() {
                Some(base) => (base, L3C_SHIFT),
                None => (d.oa(), L3_SHIFT),
            },
        };
        let mut p = perm::READ | perm::USER;
        if !f.limits.read_only && d.writable() {
            p |= perm::WRITE;
            if d.written() {
                p |= perm::DIRTY;
            }
        }
        if !f.limits.uxn && !d.has(DescFlags::UXN) {
            p |= perm::EXEC;
        }
        if !d.has(DescFlags::NG) {
            p |= perm::GLOBAL;
        }
        Translation { pa_base, shift: shift as u8, perm: p }
    }
}

#[cfg(test)]
mod tests {
    use crate::VirtAddr;
    use super::super::pte::{ATTR_IDX_WRITE_BACK, SH_INNER};
    use super::super::index;
    use super::*;
    use crate::mmu::{WalkRefs, WalkReq, Walker};
    use crate::pwc::{Pwc, PwcLevelConfig};

    const L0: u64 = 0x1000;
    const L1: u64 = 0x2000;
    const L2: u64 = 0x3000;
    const L3: u64 = 0x4000;

    /// The attributes FreeBSD gives a user page: valid page, AF, inner
    /// shareable write-back memory, EL0 access, PXN, not global.
    fn user(extra: DescFlags) -> DescFlags {
        DescFlags::VALID
            | DescFlags::TYPE
            | DescFlags::AF
            | DescFlags::AP_EL0
            | DescFlags::PXN
            | DescFlags::NG
            | DescFlags::from_bits_retain(SH_INNER | ATTR_IDX_WRITE_BACK)
            | extra
    }

    /// Tables for `va` down to the L3 table at L3.
    fn tables(mem: &mut PhysMem, va: u64) {
        mem.write_u64(PhysAddr(L0 + index(va, 39) * 8), Desc::table(L1).0);
        mem.write_u64(PhysAddr(L1 + index(va, 30) * 8), Desc::table(L2).0);
        mem.write_u64(PhysAddr(L2 + index(va, 21) * 8), Desc::table(L3).0);
    }

    fn walk(mem: &mut PhysMem, pwc: &mut Pwc, va: u64, a: Access, refs: &mut WalkRefs) -> Result<Translation, WalkFault> {
        refs.clear();
        Arm64Walker.walk(mem, pwc, WalkReq::new(PhysAddr(L0), 7, VirtAddr(va), a), refs)
    }

    /// One page by hand: the four reads, AF set by the walk, a write
    /// through a DBM page clearing AP[2], the walk cache skipping levels.
    #[test]
    fn walk_by_hand_with_hardware_dirty_state() {
        let mut mem = PhysMem::new(1 << 20, false);
        let mut pwc = Pwc::new(&[PwcLevelConfig { shift: 21, entries: 4 }]);
        let mut refs = WalkRefs::default();
        let va: u64 = 0x0000_7f12_3456_7abc;
        assert_eq!((index(va, 39), index(va, 30), index(va, 21), index(va, 12)), (254, 72, 418, 359));
        tables(&mut mem, va);
        let pte_pa = L3 + 359 * 8;
        let clean = user(DescFlags::AP_RO | DescFlags::DBM) - DescFlags::AF;
        mem.write_u64(PhysAddr(pte_pa), Desc::new(0x9_9000, clean).0);
        let t = walk(&mut mem, &mut pwc, va, Access::Read, &mut refs).unwrap();
        assert_eq!((t.pa(va), t.shift), (PhysAddr(0x9_9abc), 12));
        assert_eq!(refs.as_slice(), &[L0 + 254 * 8, L1 + 72 * 8, L2 + 418 * 8, pte_pa]);
        assert_eq!(t.perm & (perm::WRITE | perm::DIRTY | perm::GLOBAL), perm::WRITE, "writable, clean, not global");
        let d = Desc(mem.read_u64(PhysAddr(pte_pa)));
        assert!(d.has(DescFlags::AF) && d.has(DescFlags::AP_RO), "AF set by the walk, still clean");
        // The write: the L2 table entry is in the walk cache now.
        let t = walk(&mut mem, &mut pwc, va, Access::Write, &mut refs).unwrap();
        assert_eq!(refs.as_slice(), &[pte_pa]);
        assert_ne!(t.perm & perm::DIRTY, 0);
        assert!(!Desc(mem.read_u64(PhysAddr(pte_pa))).has(DescFlags::AP_RO), "the write cleared AP[2]");
        // Read-only without DBM: writes fault; without AP[1], EL0 cannot read.
        mem.write_u64(PhysAddr(pte_pa), Desc::new(0x9_9000, user(DescFlags::AP_RO)).0);
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Write, &mut refs), Err(WalkFault::Protection));
        mem.write_u64(PhysAddr(pte_pa), Desc::new(0x9_9000, user(DescFlags::empty()) - DescFlags::AP_EL0).0);
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs), Err(WalkFault::Protection));
        mem.write_u64(PhysAddr(pte_pa), Desc::new(0x9_9000, user(DescFlags::UXN)).0);
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Exec, &mut refs), Err(WalkFault::Protection));
        // Bit 1 clear at L3 is reserved: a translation fault.
        mem.write_u64(PhysAddr(pte_pa), Desc::new(0x9_9000, user(DescFlags::empty()) - DescFlags::TYPE).0);
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs), Err(WalkFault::NotPresent { level: 3 }));
        assert_eq!(walk(&mut mem, &mut pwc, 1 << 48, Access::Read, &mut refs), Err(WalkFault::BadAddress));
        assert_eq!(walk(&mut mem, &mut pwc, 0x1000, Access::Read, &mut refs), Err(WalkFault::NotPresent { level: 0 }));
        assert_eq!(refs.as_slice(), &[L0], "the one descriptor read is charged");
    }

    #[test]
    fn blocks_and_table_limits() {
        let mut mem = PhysMem::new(1 << 20, false);
        let mut pwc = Pwc::new(&[]);
        let mut refs = WalkRefs::default();
        let va: u64 = 0x40_0000_0000 | (5 << 21) | 0x1_2345;
        tables(&mut mem, va);
        let block = (user(DescFlags::empty()) - DescFlags::TYPE) - DescFlags::AF;
        mem.write_u64(PhysAddr(L2 + 5 * 8), Desc::new(0x4060_0000, block).0);
        let t = walk(&mut mem, &mut pwc, va, Access::Write, &mut refs).unwrap();
        assert_eq!((t.shift, t.pa(va)), (21, PhysAddr(0x4061_2345)));
        assert!(Desc(mem.read_u64(PhysAddr(L2 + 5 * 8))).has(DescFlags::AF), "AF set on the block");
        assert_eq!(Arm64Walker.probe(&mem, PhysAddr(L0), VirtAddr(va)).unwrap().pa_base, 0x4060_0000);
        // APTable[1] in the L1 table descriptor forbids writes below it.
        mem.write_u64(PhysAddr(L1 + index(va, 30) * 8), Desc::table(L2).with(DescFlags::AP_TABLE_RO).0);
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Write, &mut refs), Err(WalkFault::Protection));
        assert!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs).is_ok());
        // A 1 GB block at L1; a block at L0 is a translation fault.
        mem.write_u64(PhysAddr(L1 + index(va, 30) * 8), Desc::new(0x4000_0000, block).0);
        let t = walk(&mut mem, &mut pwc, va, Access::Read, &mut refs).unwrap();
        assert_eq!((t.shift, t.pa_base), (30, 0x4000_0000));
        mem.write_u64(PhysAddr(L0 + index(va, 39) * 8), Desc::new(0, block).0);
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs), Err(WalkFault::NotPresent { level: 0 }));
    }

    /// Sixteen aligned, consistent L3 entries with the Contiguous bit give
    /// one 64 KB translation; any inconsistency falls back to 4 KB.
    #[test]
    fn contiguous_runs_coalesce_only_when_well_formed() {
        let mut mem = PhysMem::new(1 << 20, false);
        let mut pwc = Pwc::new(&[]);
        let mut refs = WalkRefs::default();
        let va: u64 = 0x7_0000_0000 + 0x2_0000; // L3 index 32: a run start
        tables(&mut mem, va);
        let run = |mem: &mut PhysMem, f: &dyn Fn(u64) -> Desc| {
            for k in 0..16 {
                mem.write_u64(PhysAddr(L3 + (32 + k) * 8), f(k).0);
            }
        };
        let c = user(DescFlags::CONTIGUOUS);
        run(&mut mem, &|k| Desc::new(0x50_0000 + k * 4096, c));
        let t = walk(&mut mem, &mut pwc, va + 0x5123, Access::Read, &mut refs).unwrap();
        assert_eq!((t.shift, t.pa_base, t.pa(va + 0x5123)), (16, 0x50_0000, PhysAddr(0x50_5123)));
        assert_eq!(refs.n, 4, "only the one L3 descriptor is read");
        // AF may differ within a run.
        run(&mut mem, &|k| Desc::new(0x50_0000 + k * 4096, if k == 3 { c - DescFlags::AF } else { c }));
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs).unwrap().shift, 16);
        // A gap, a misaligned output address, a differing permission.
        run(&mut mem, &|k| if k == 9 { Desc::EMPTY } else { Desc::new(0x50_0000 + k * 4096, c) });
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs).unwrap().shift, 12);
        run(&mut mem, &|k| Desc::new(0x50_1000 + k * 4096, c));
        assert_eq!(walk(&mut mem, &mut pwc, va, Access::Read, &mut refs).unwrap().shift, 12);
        run(&mut mem, &|k| Desc::new(0x50_0000 + k * 4096, if k == 15 { c | DescFlags::AP_RO } else { c }));
        let t = walk(&mut mem, &mut pwc, va, Access::Write, &mut refs).unwrap();
        assert_eq!((t.shift, t.pa_base), (12, 0x50_0000));
        assert!(Arm64Walker.probe(&mem, PhysAddr(L0), VirtAddr(va + 15 * 4096)).is_some_and(|t| t.perm & perm::WRITE == 0));
    }
}
