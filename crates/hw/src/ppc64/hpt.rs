//! The hashed page table and its hardware search (Power ISA v3.0 Book III,
//! 5.7.7, "Hashed Page Table Translation"), and the context page the model
//! gives the walker as an address space's root.
//!
//! The hashed page table (HTAB) is an array of 2^n page table entry groups
//! (PTEGs) of eight 16-byte entries, aligned to its size, at least 2^11
//! PTEGs (256 KB). For 256 MB segments the primary hash of a virtual page is
//! the low 39 bits of the VSID XORed with the page's index within its
//! segment (the segment offset shifted right by the segment's base page
//! size); the low n bits of the hash select the primary PTEG, of its
//! one's complement the secondary PTEG. The search reads the primary PTEG,
//! then the secondary, for a valid entry whose H bit says which hash it was
//! placed by and whose AVA matches; a large-page entry's actual size comes
//! from its LP bits, and the AVA bits inside the page are not compared.
//!
//! The walker sets R in the entry on every access and C on a store, as the
//! hardware does (ISA 5.7.8, "Reference and Change Recording"). A page the
//! table does not hold is a page fault (a data storage interrupt with
//! "no translation found") that the operating system resolves; a segment
//! the SLB does not hold is a segment interrupt, likewise handled by the
//! kernel, which loads the SLB.
//!
//! The SLB is modelled by the per-CPU walk cache (`Pwc`) at
//! `SEGMENT_SHIFT`: one entry per segment, keyed by ESID and address space,
//! whose value is the VSID word. The model consults it on a TLB miss only
//! (the ERAT and TLB of POWER are effective-address tagged in the model).
//!
//! The context page: the walker's only per-address-space input is a root
//! address. Here it names a page the kernel keeps per address space:
//! - doubleword 0: the HTAB descriptor in the format of doubleword 0 of a
//!   partition table entry (ISA 3.0: HTABORG in bits 59..18, HTABSIZE = n -
//!   11 in bits 4..0). On the machine this is one register (PTCR's
//!   partition table entry, SDR1 before ISA 3.0), the same for every
//!   address space; the model keeps a copy in each context page.
//! - from byte 16: the address space's segment table, ESID to VSID word,
//!   as (SLBE, SLBV) pairs in an open-addressed table of `CTX_SEG_SLOTS`
//!   (FreeBSD keeps the same map in a per-pmap tree and a user SLB cache).
//!   The hardware walk never reads it (it has the SLB); `probe`, which has
//!   no SLB, does.

use super::pte::{Hpte, HpteLo};
use super::slb::{SlbE, SlbV, SlbVFlags};
use super::{esid, segment_offset, PTEG_BYTES, PTEG_ENTRIES, HPTE_BYTES, SEGMENT_SHIFT, USER_VA_LIMIT};
use crate::addr::{PhysAddr, VirtAddr};
use crate::mmu::{perm, Access, Translation, WalkFault, WalkRefs, WalkReq, Walker};
use crate::physmem::PhysMem;
use crate::pwc::Pwc;

/// The VSID bits the hash uses for 256 MB segments (VSID bits 38..0;
/// FreeBSD VSID_HASH_MASK).
pub const VSID_HASH_MASK: u64 = 0x7f_ffff_ffff;
/// Fewest PTEGs a hashed page table may have (HTABSIZE = 0).
pub const MIN_PTEGS: u64 = 1 << 11;

/// Where and how large the hashed page table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HptGeometry {
    /// Real address of the first PTEG (HTABORG).
    pub htaborg: u64,
    /// Number of PTEGs, a power of two, at least `MIN_PTEGS`.
    pub pteg_count: u64,
}

/// The HTABORG field of a partition table entry's doubleword 0.
const PATE_HTABORG: u64 = 0x0fff_ffff_fffc_0000;
/// The HTABSIZE field.
const PATE_HTABSIZE: u64 = 0x1f;

impl HptGeometry {
    pub fn new(htaborg: u64, pteg_count: u64) -> HptGeometry {
        assert!(pteg_count.is_power_of_two() && pteg_count >= MIN_PTEGS, "bad PTEG count {pteg_count}");
        assert!(htaborg.is_multiple_of(pteg_count * PTEG_BYTES) && htaborg & !PATE_HTABORG == 0, "HTABORG {htaborg:#x} not aligned to the table");
        HptGeometry { htaborg, pteg_count }
    }
    /// Decodes doubleword 0 of a partition table entry.
    pub fn from_pate(d: u64) -> HptGeometry {
        HptGeometry { htaborg: d & PATE_HTABORG, pteg_count: MIN_PTEGS << (d & PATE_HTABSIZE) }
    }
    /// Encodes doubleword 0 of a partition table entry (HR = 0: hashed).
    pub fn to_pate(self) -> u64 {
        self.htaborg | (self.pteg_count.trailing_zeros() as u64 - 11)
    }
    pub fn mask(self) -> u64 {
        self.pteg_count - 1
    }
    /// Bytes of the whole table.
    pub fn bytes(self) -> u64 {
        self.pteg_count * PTEG_BYTES
    }
    /// Real address of PTEG number `group`.
    pub fn pteg_pa(self, group: u64) -> u64 {
        self.htaborg + (group & self.mask()) * PTEG_BYTES
    }
    /// Real address of slot `slot` (PTEG * 8 + index), FreeBSD's pvo_pte.slot.
    pub fn slot_pa(self, slot: u64) -> u64 {
        self.htaborg + slot * HPTE_BYTES
    }
    /// The slot number of the entry at real address `pa`.
    pub fn slot_of(self, pa: u64) -> u64 {
        (pa - self.htaborg) / HPTE_BYTES
    }
    /// The PTEGs an entry for `ea` in segment `vsid` may be in, primary
    /// then secondary, for a segment of 2^`base` byte base pages.
    pub fn groups(self, vsid: u64, ea: u64, base: u32) -> [u64; 2] {
        let h = hash(vsid, ea, base);
        [h & self.mask(), !h & self.mask()]
    }
    /// The effective address (segment offset) bits of the page of the
    /// entry in `slot`: the page index bits the hash implies, for a 4 KB
    /// base page (moea64_vpn_from_pte's reconstruction, inverted hash).
    pub fn page_index(self, slot: u64, e: Hpte) -> u64 {
        let vsid = e.ava() >> 5;
        let mut group = slot / PTEG_ENTRIES;
        if e.hid() {
            group = !group & self.mask();
        }
        // Index bits 15..11 come from the AVA, bits 10..0 from the hash.
        let low = ((vsid & VSID_HASH_MASK) ^ group) & 0x7ff;
        ((e.ava() & 0x1f) << 11) | low
    }
}

/// The primary hash of the page of `ea` in segment `vsid` whose base page
/// size is 2^`base` bytes (256 MB segments).
#[inline]
pub fn hash(vsid: u64, ea: u64, base: u32) -> u64 {
    (vsid & VSID_HASH_MASK) ^ (segment_offset(ea) >> base)
}

/// An entry found by a search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Real address of the entry.
    pub pa: u64,
    pub hpte: Hpte,
    /// log2 of the page size it maps.
    pub shift: u32,
}

/// Searches the primary, then the secondary PTEG for the entry translating
/// `ea` in the segment `slb` describes; `on_pteg` sees each PTEG read (each
/// is one 128-byte line on POWER8 and POWER9).
pub fn search(mem: &PhysMem, geom: HptGeometry, slb: SlbV, ea: u64, mut on_pteg: impl FnMut(u64)) -> Option<Found> {
    let base = slb.base_shift()?;
    let vsid = slb.vsid();
    for (hid, group) in [false, true].into_iter().zip(geom.groups(vsid, ea, base)) {
        let pteg = geom.pteg_pa(group);
        on_pteg(pteg);
        for i in 0..PTEG_ENTRIES {
            let pa = pteg + i * HPTE_BYTES;
            let hi = mem.read_u64(PhysAddr(pa));
            let e = Hpte { hi, lo: 0 };
            if !e.valid() || e.hid() != hid {
                continue;
            }
            let e = Hpte { hi, lo: mem.read_u64(PhysAddr(pa + 8)) };
            if let Some(shift) = e.actual_shift(base) {
                if e.matches(vsid, ea, shift) {
                    return Some(Found { pa, hpte: e, shift });
                }
            }
        }
    }
    None
}

/// What a problem-state (user) access may do through `e` in segment `slb`:
/// (read, write, execute), from pp0||PP and the segment's Kp key (ISA 3.0
/// Book III 5.7.13.2, Table "PP bits"); instruction fetch also needs N = 0
/// in both the entry and the segment.
pub fn user_access(e: Hpte, slb: SlbV) -> (bool, bool, bool) {
    let lo = e.lo_flags();
    let pp = (lo.contains(HpteLo::PP0) as u8) << 2 | (e.lo & HpteLo::PP.bits()) as u8;
    let (r, w) = match (slb.has(SlbVFlags::KP), pp) {
        (false, 0b000..=0b010) => (true, true),
        (false, 0b011 | 0b110) => (true, false),
        (true, 0b010) => (true, true),
        (true, 0b001 | 0b011) => (true, false),
        _ => (false, false),
    };
    let x = r && !lo.contains(HpteLo::N) && !slb.has(SlbVFlags::N);
    (r, w, x)
}

fn make_translation(f: Found, slb: SlbV) -> Translation {
    let (r, w, x) = user_access(f.hpte, slb);
    let mut p = perm::USER;
    for (ok, b) in [(r, perm::READ), (w, perm::WRITE), (x, perm::EXEC), (f.hpte.lo_flags().contains(HpteLo::C), perm::DIRTY)] {
        if ok {
            p |= b;
        }
    }
    Translation { pa_base: f.hpte.frame(f.shift), shift: f.shift as u8, perm: p }
}

/// Byte offset of the HTAB descriptor in a context page.
pub const CTX_HTAB: u64 = 0;
/// Byte offset of the segment table in a context page.
pub const CTX_SEGS: u64 = 16;
/// Slots of the segment table: (4096 - 16) / 16.
pub const CTX_SEG_SLOTS: u64 = 255;

/// The segment table slot `esid` is looked for first.
fn ctx_home(esid: u64) -> u64 {
    (esid.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % CTX_SEG_SLOTS
}

/// Real address of segment table slot `i` of the context page at `ctx`.
fn ctx_slot(ctx: u64, i: u64) -> PhysAddr {
    PhysAddr(ctx + CTX_SEGS + i * 16)
}

/// The VSID word of `esid` in the segment table of the context page at
/// `ctx`, if it has one.
pub fn ctx_lookup(mem: &PhysMem, ctx: u64, esid: u64) -> Option<SlbV> {
    let home = ctx_home(esid);
    for k in 0..CTX_SEG_SLOTS {
        let pa = ctx_slot(ctx, (home + k) % CTX_SEG_SLOTS);
        let e = SlbE(mem.read_u64(pa));
        if !e.valid() {
            return None;
        }
        if e.esid() == esid {
            return Some(SlbV(mem.read_u64(PhysAddr(pa.0 + 8))));
        }
    }
    None
}

/// Adds `esid` -> `v` to the segment table of the context page at `ctx`.
/// Entries are never removed while the address space lives (FreeBSD frees
/// user VSIDs only with the pmap). Returns false if the table is full.
pub fn ctx_insert(mem: &mut PhysMem, ctx: u64, esid: u64, v: SlbV) -> bool {
    let home = ctx_home(esid);
    for k in 0..CTX_SEG_SLOTS {
        let i = (home + k) % CTX_SEG_SLOTS;
        let pa = ctx_slot(ctx, i);
        let e = SlbE(mem.read_u64(pa));
        debug_assert!(!e.valid() || e.esid() != esid, "segment {esid:#x} already in the table");
        if !e.valid() {
            mem.write_u64(pa, SlbE::new(esid, i).0);
            mem.write_u64(PhysAddr(pa.0 + 8), v.0);
            return true;
        }
    }
    false
}

/// Every (ESID, VSID word) of the segment table of the context page at `ctx`.
pub fn ctx_segments(mem: &PhysMem, ctx: u64) -> Vec<(u64, SlbV)> {
    (0..CTX_SEG_SLOTS)
        .filter_map(|i| {
            let pa = ctx_slot(ctx, i);
            let e = SlbE(mem.read_u64(pa));
            e.valid().then(|| (e.esid(), SlbV(mem.read_u64(PhysAddr(pa.0 + 8)))))
        })
        .collect()
}

/// The hashed page table search as the MMU performs it on a TLB miss.
pub struct HptWalker;

const SHIFTS: [u8; 2] = [12, 24];

impl Walker for HptWalker {
    fn page_shifts(&self) -> &[u8] {
        &SHIFTS
    }

    fn walk(&self, mem: &mut PhysMem, pwc: &mut Pwc, req: WalkReq, refs: &mut WalkRefs) -> Result<Translation, WalkFault> {
        let WalkReq { root, asid, va, access } = req;
        let va = va.0;
        if va >= USER_VA_LIMIT {
            return Err(WalkFault::BadAddress);
        }
        let slb = match pwc.lookup(va, asid) {
            Some((shift, v)) if shift as u32 == SEGMENT_SHIFT => SlbV(v),
            _ => return Err(WalkFault::Segment),
        };
        // The partition table entry is cached on chip: not a memory reference.
        let geom = HptGeometry::from_pate(mem.read_u64(PhysAddr(root.0 + CTX_HTAB)));
        let f = search(mem, geom, slb, va, |pteg| refs.push(pteg)).ok_or(WalkFault::NotPresent { level: 0 })?;
        let (r, w, x) = user_access(f.hpte, slb);
        let ok = match access {
            Access::Read => r,
            Access::Write => w,
            Access::Exec => x,
        };
        if !ok {
            return Err(WalkFault::Protection);
        }
        // Reference and change recording: R on any access, C on a store.
        let want = if access == Access::Write { HpteLo::R | HpteLo::C } else { HpteLo::R };
        let mut e = f.hpte;
        if !e.lo_flags().contains(want) {
            e.lo |= want.bits();
            mem.write_u64(PhysAddr(f.pa + 8), e.lo);
        }
        Ok(make_translation(Found { hpte: e, ..f }, slb))
    }

    fn probe(&self, mem: &PhysMem, root: PhysAddr, va: VirtAddr) -> Option<Translation> {
        let va = va.0;
        if va >= USER_VA_LIMIT {
            return None;
        }
        let slb = ctx_lookup(mem, root.0, esid(va))?;
        let geom = HptGeometry::from_pate(mem.read_u64(PhysAddr(root.0 + CTX_HTAB)));
        let f = search(mem, geom, slb, va, |_| {})?;
        let t = make_translation(f, slb);
        (t.perm & perm::READ != 0).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::super::pte::HpteHi;
    use super::super::{LARGE_SHIFT, LARGE_SIZE};
    use super::*;
    use crate::pwc::PwcLevelConfig;

    const HTAB: u64 = 0x40_0000; // 4 MB, aligned to the 256 KB table
    const CTX: u64 = 0x1000;

    fn setup() -> (PhysMem, Pwc, WalkRefs, HptGeometry) {
        let mut mem = PhysMem::new(1 << 14, false);
        let geom = HptGeometry::new(HTAB, MIN_PTEGS);
        mem.write_u64(PhysAddr(CTX + CTX_HTAB), geom.to_pate());
        (mem, Pwc::new(&[PwcLevelConfig { shift: SEGMENT_SHIFT as u8, entries: 4 }]), WalkRefs::default(), geom)
    }

    fn put(mem: &mut PhysMem, pa: u64, e: Hpte) {
        mem.write_u64(PhysAddr(pa), e.hi);
        mem.write_u64(PhysAddr(pa + 8), e.lo);
    }

    /// The hash and the PTEGs of one address, worked out by hand.
    #[test]
    fn hash_by_hand() {
        let geom = HptGeometry::new(HTAB, MIN_PTEGS);
        // Segment offset 0x0123_4000: 4 KB page index 0x1234.
        let (vsid, ea) = (0x2b_cdef_1234u64, 0x5_0123_4567u64);
        assert_eq!(hash(vsid, ea, 12), (vsid & VSID_HASH_MASK) ^ 0x1234);
        assert_eq!(hash(vsid, ea, 12), 0x2b_cdef_0000);
        // 2048 PTEGs: the low 11 bits.
        assert_eq!(geom.groups(vsid, ea, 12), [0x000, 0x7ff]);
        assert_eq!(geom.pteg_pa(0x7ff), HTAB + 0x7ff * 128);
        // With 16 MB base pages the page index is 0x01.
        assert_eq!(hash(vsid, ea, 24), 0x2b_cdef_1235);
        // The descriptor round-trips: HTABSIZE = log2(PTEGs) - 11.
        let big = HptGeometry::new(1 << 30, 1 << 20);
        assert_eq!(big.to_pate(), (1 << 30) | 9);
        assert_eq!(HptGeometry::from_pate(big.to_pate()), big);
        // The page index of an entry follows from its slot, H and AVA.
        let e = Hpte::new(vsid, ea, 0x5000, false, true, HpteHi::empty(), HpteLo::PP_RW);
        let slot = geom.groups(vsid, ea, 12)[1] * 8 + 3;
        assert_eq!(geom.page_index(slot, e), 0x1234);
    }

    #[test]
    fn primary_and_secondary_search_set_r_and_c() {
        let (mut mem, mut pwc, mut refs, geom) = setup();
        let (vsid, ea) = (0x3_0000_0042u64, 0x10_0000_7010u64);
        pwc.fill(ea, 1, SEGMENT_SHIFT as u8, SlbV::user(vsid).0);
        let [p, s] = geom.groups(vsid, ea, 12);
        // The primary PTEG is full of other pages; the entry is in slot 5 of the secondary.
        for i in 0..8 {
            put(&mut mem, geom.pteg_pa(p) + i * 16, Hpte::new(vsid + 1 + i, ea, 0x2000, false, false, HpteHi::empty(), HpteLo::PP_RW));
        }
        let slot_pa = geom.pteg_pa(s) + 5 * 16;
        put(&mut mem, slot_pa, Hpte::new(vsid, ea, 0x9000, false, true, HpteHi::empty(), HpteLo::PP_RW | HpteLo::M));
        let t = HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Read), &mut refs).unwrap();
        assert_eq!((t.pa(ea), t.shift, t.perm & perm::DIRTY), (PhysAddr(0x9010), 12, 0));
        assert_eq!(refs.as_slice(), &[geom.pteg_pa(p), geom.pteg_pa(s)]);
        let lo = HpteLo::from_bits_truncate(mem.read_u64(PhysAddr(slot_pa + 8)));
        assert!(lo.contains(HpteLo::R) && !lo.contains(HpteLo::C));
        let t = HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Write), &mut refs).unwrap();
        assert_ne!(t.perm & perm::DIRTY, 0);
        assert!(HpteLo::from_bits_truncate(mem.read_u64(PhysAddr(slot_pa + 8))).contains(HpteLo::C));
        // An entry in the secondary PTEG without H is not a match.
        put(&mut mem, slot_pa, Hpte::new(vsid, ea, 0x9000, false, false, HpteHi::empty(), HpteLo::PP_RW));
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Read), &mut refs), Err(WalkFault::NotPresent { level: 0 }));
    }

    #[test]
    fn segment_miss_protection_and_bad_addresses() {
        let (mut mem, mut pwc, mut refs, geom) = setup();
        let (vsid, ea) = (0x77u64, 0x2000_3000u64);
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Read), &mut refs), Err(WalkFault::Segment));
        pwc.fill(ea, 1, SEGMENT_SHIFT as u8, SlbV::user(vsid).0);
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 2, VirtAddr(ea), Access::Read), &mut refs), Err(WalkFault::Segment), "another address space");
        let pa = geom.pteg_pa(geom.groups(vsid, ea, 12)[0]);
        put(&mut mem, pa, Hpte::new(vsid, ea, 0x5000, false, false, HpteHi::empty(), HpteLo::PP_RO | HpteLo::N));
        assert!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Read), &mut refs).is_ok());
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Write), &mut refs), Err(WalkFault::Protection));
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Exec), &mut refs), Err(WalkFault::Protection));
        // PP = 0b00 with Kp set: no user access at all.
        put(&mut mem, pa, Hpte::new(vsid, ea, 0x5000, false, false, HpteHi::empty(), HpteLo::empty()));
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Read), &mut refs), Err(WalkFault::Protection));
        assert_eq!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(USER_VA_LIMIT), Access::Read), &mut refs), Err(WalkFault::BadAddress));
    }

    /// A 16 MB page in a 4 KB base-page segment is found through the hash
    /// of any of its 4 KB pages that has an entry, and translates the whole
    /// 16 MB; a segment with 16 MB base pages hashes by 16 MB page.
    #[test]
    fn large_pages_in_mixed_and_large_segments() {
        let (mut mem, mut pwc, mut refs, geom) = setup();
        let vsid = 0x1_2345u64;
        let sp = 0x3000_0000u64; // 16 MB aligned, in segment 3
        pwc.fill(sp, 1, SEGMENT_SHIFT as u8, SlbV::user(vsid).0);
        let ea = sp + 0x45_6789;
        let g = geom.groups(vsid, ea, 12)[0];
        put(&mut mem, geom.pteg_pa(g) + 32, Hpte::new(vsid, ea, 0x200_0000, true, false, HpteHi::empty(), HpteLo::PP_RW));
        let t = HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea), Access::Read), &mut refs).unwrap();
        assert_eq!((t.shift as u32, t.pa_base, t.pa(ea)), (LARGE_SHIFT, 0x200_0000, PhysAddr(0x200_0000 + 0x45_6789)));
        // Another 4 KB page of the same 16 MB page hashes elsewhere: no entry there.
        assert!(HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(sp + 0x80_0000), Access::Read), &mut refs).is_err());

        let big_seg = 0x5000_0000u64;
        pwc.fill(big_seg, 1, SEGMENT_SHIFT as u8, SlbV::large(vsid + 1).0);
        let ea = big_seg + LARGE_SIZE + 0x1234;
        let g = geom.groups(vsid + 1, ea, 24)[0];
        let mut e = Hpte::new(vsid + 1, ea, 0x400_0000, true, false, HpteHi::empty(), HpteLo::PP_RW);
        e.lo = (e.lo & !super::super::pte::LP_MASK) | super::super::pte::LP_16M_16M;
        put(&mut mem, geom.pteg_pa(g), e);
        let t = HptWalker.walk(&mut mem, &mut pwc, WalkReq::new(PhysAddr(CTX), 1, VirtAddr(ea + 0xff_0000), Access::Read), &mut refs).unwrap();
        assert_eq!(t.pa_base, 0x400_0000);
    }

    #[test]
    fn probe_reads_the_context_segment_table() {
        let (mut mem, _, _, geom) = setup();
        let (vsid, ea) = (0x99u64, 0x7_2000_0000u64);
        assert!(HptWalker.probe(&mem, PhysAddr(CTX), VirtAddr(ea)).is_none());
        assert!(ctx_insert(&mut mem, CTX, esid(ea), SlbV::user(vsid)));
        assert_eq!(ctx_lookup(&mem, CTX, esid(ea)), Some(SlbV::user(vsid)));
        assert_eq!(ctx_lookup(&mem, CTX, esid(ea) + 1), None);
        let pa = geom.pteg_pa(geom.groups(vsid, ea, 12)[1]);
        put(&mut mem, pa + 16 * 7, Hpte::new(vsid, ea, 0xa000, false, true, HpteHi::empty(), HpteLo::PP_RW));
        let t = HptWalker.probe(&mem, PhysAddr(CTX), VirtAddr(ea + 8)).unwrap();
        assert_eq!((t.pa(ea + 8), t.perm & perm::WRITE), (PhysAddr(0xa008), perm::WRITE));
        assert_eq!(mem.read_u64(PhysAddr(pa + 16 * 7 + 8)) & HpteLo::R.bits(), 0, "probe records nothing");
        // The table holds 255 segments, then is full.
        for k in 1..CTX_SEG_SLOTS {
            assert!(ctx_insert(&mut mem, CTX, 0x100 + k, SlbV::user(k)));
        }
        assert!(!ctx_insert(&mut mem, CTX, 0x5000, SlbV::user(1)));
        assert_eq!(ctx_segments(&mem, CTX).len(), CTX_SEG_SLOTS as usize);
        assert_eq!(ctx_lookup(&mem, CTX, 0x100 + 200), Some(SlbV::user(200)));
    }
}
