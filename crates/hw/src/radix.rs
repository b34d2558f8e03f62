//! The hardware walk of a radix page table, written once for every format
//! that has one (x86-64, RISC-V Sv39/Sv48, AArch64, ARMv7 short
//! descriptors, Alpha's PALcode TB-miss walk); POWER's hashed page table is
//! not a radix table and walks apart (`ppc64::hpt`).
//!
//! Every radix walk is the same skeleton:
//! 1. refuse an address outside the translatable range (`BadAddress`);
//! 2. start at the deepest page-walk cache hit for the address, or at the
//!    root;
//! 3. descend: read the descriptor the address indexes in the current
//!    table from modelled memory, recording its physical address for the
//!    timing model, until it is invalid (its valid bits clear), the format
//!    decodes it as reserved or as a leaf, gathering on the way the
//!    restrictions table descriptors pass down;
//! 4. check the access against the leaf, and set or fault on its accessed
//!    and dirty state, in the architecture's order of faults;
//! 5. only if the access is allowed, keep the table pointers followed in
//!    the page-walk cache;
//! 6. make the leaf a `Translation` for the TLB.
//!
//! Every descriptor read is recorded, also on a walk that faults: the
//! reads happened, and the timing model charges each through the caches.
//! `probe` descends from the root in the same way with no side effects: no
//! walk cache, no accessed or dirty updates, nothing recorded.
//!
//! What differs between architectures is the `RadixFormat` each walker
//! implements: the levels, how a descriptor decodes, what the walk cache
//! keeps, the permission and accessed/dirty rules and how a leaf becomes a
//! translation. The walk is generic over its format: each architecture
//! gets its own compiled copy with the format's methods inlined, no call
//! goes through the trait.

use crate::addr::{PhysAddr, VirtAddr};
use crate::mmu::{Access, Translation, WalkFault, WalkRefs, WalkReq, Walker};
use crate::physmem::PhysMem;
use crate::pwc::Pwc;

/// The most levels a radix walk has (x86-64, AArch64 and Sv48 have four).
pub const MAX_LEVELS: usize = 4;

/// One level of a radix table: which virtual-address bits index it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    /// log2 of the bytes one entry of this level covers: the index field
    /// starts at this bit.
    pub shift: u32,
    /// Width of the index field (log2 of the entries of a table).
    pub bits: u32,
}

impl Level {
    /// A level of 2^bits entries each covering 2^shift bytes.
    pub const fn new(shift: u32, bits: u32) -> Level {
        Level { shift, bits }
    }
    /// Index of `va` in a table of this level.
    #[inline(always)]
    pub fn index(self, va: u64) -> u64 {
        (va >> self.shift) & ((1u64 << self.bits) - 1)
    }
}

/// Which virtual addresses a walk translates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VaRange {
    /// Sign-extended addresses of this many bits: every bit above the top
    /// one copies it (x86-64, RISC-V, Alpha).
    Canonical(u32),
    /// Addresses below this limit: what one translation table base covers
    /// (AArch64's and ARMv7's TTBR0).
    Below(u64),
}

impl VaRange {
    #[inline]
    pub fn contains(self, va: u64) -> bool {
        match self {
            VaRange::Canonical(bits) => {
                let top = (va as i64) >> (bits - 1);
                top == 0 || top == -1
            }
            VaRange::Below(limit) => va < limit,
        }
    }
}

/// The shape of a radix table.
#[derive(Debug)]
pub struct Geometry {
    /// The levels, root first.
    pub levels: &'static [Level],
    /// Page sizes (log2) a leaf can translate: what this architecture's
    /// TLB entries can have (`Walker::page_shifts`).
    pub page_shifts: &'static [u8],
    /// The addresses it translates; any other is a `BadAddress`.
    pub range: VaRange,
}

/// What one valid descriptor says, as its format decodes it.
pub enum Step<L> {
    /// An encoding that translates nothing: the walk faults with
    /// `NotPresent` at this level.
    NotPresent,
    /// A reserved encoding: the walk faults with `Reserved` at this level.
    Reserved,
    /// A pointer to the next table at `next`. `cache` is what the
    /// page-walk cache may keep for it (see `RadixFormat::cached_table`), or
    /// `None` when this descriptor must not be cached.
    Table { next: u64, cache: Option<u64> },
    /// The end of the walk.
    Leaf(L),
}

/// A descent that reached a leaf: what the format's checks and its
/// translation look at.
pub struct Found<F: RadixFormat + ?Sized> {
    /// The address translated.
    pub va: u64,
    /// Physical addresses of the descriptors read, root first (the levels
    /// the walk cache skipped are not here).
    entries: [u64; MAX_LEVELS],
    n: usize,
    /// Level of the leaf (0 = the root table).
    pub level: usize,
    /// The leaf, as decoded (a format that updates the descriptor in
    /// memory updates this copy too).
    pub leaf: F::Leaf,
    /// What the table descriptors above the leaf passed down.
    pub limits: F::Limits,
}

impl<F: RadixFormat + ?Sized> Found<F> {
    /// Physical addresses of the descriptors read, root first.
    #[inline]
    pub fn entries(&self) -> &[u64] {
        &self.entries[..self.n]
    }
    /// Physical address of the leaf descriptor.
    #[inline]
    pub fn entry(&self) -> PhysAddr {
        PhysAddr(self.entries[self.n - 1])
    }
}

/// What differs between radix page-table formats. Implementing it makes a
/// type a `Walker`.
pub trait RadixFormat: Send {
    /// Bytes of one descriptor: 8, or 4 for ARMv7's short descriptors.
    const ENTRY_BYTES: u64 = 8;
    /// The bits of which a valid descriptor has at least one set (P, V, or
    /// ARMv7's two type bits): a descriptor with all clear is invalid, and
    /// the walk faults with `NotPresent` at its level.
    const VALID: u64;
    /// What table descriptors pass down to the levels below (x86-64's
    /// R/W, U/S and XD; AArch64's APTable and UXNTable; ARMv7's domain).
    type Limits: Copy + Default;
    /// A leaf descriptor, decoded.
    type Leaf: Copy;
    /// Whether a permitted walk that started from a walk-cache entry
    /// enters that entry again. ARMv7's walk does: it fills the cache with
    /// the L1 page-table descriptor it went through, whether it read it or
    /// took it from the cache (`Pwc::fill` takes the first free slot, so
    /// the entry can then stand twice).
    const REFILL_HIT: bool = false;

    /// The levels, the page sizes and the address range.
    fn geometry(&self) -> &'static Geometry;
    /// Decodes the valid descriptor `raw` read at `level` (0 = the root
    /// table), adding what a table descriptor restricts to `limits`.
    fn decode(&self, level: usize, raw: u64, limits: &mut Self::Limits) -> Step<Self::Leaf>;
    /// The table a page-walk cache entry names, and the limits that go
    /// with it: the inverse of `Step::Table`'s `cache`.
    #[inline(always)]
    fn cached_table(&self, cached: u64) -> (u64, Self::Limits) {
        (cached, Self::Limits::default())
    }
    /// Checks `access` against the leaf and the limits above it, and does
    /// what the hardware does with the accessed and dirty state (sets it in
    /// the descriptor, in memory and in `found.leaf`, or faults), in the
    /// architecture's order of faults.
    fn permit(&self, mem: &mut PhysMem, found: &mut Found<Self>, access: Access) -> Result<(), WalkFault>;
    /// Whether the checker sees a translation at all: what `probe` asks of
    /// a leaf instead of `permit`.
    fn visible(&self, found: &Found<Self>) -> bool;
    /// The translation a permitted leaf gives.
    fn translation(&self, mem: &PhysMem, found: &Found<Self>) -> Translation;
}

/// Reads descriptors from `start` (a table, its level and the limits above
/// it) down to a leaf. `read` sees the address of each descriptor read,
/// `follow` the walk-cache entry of each table pointer followed as (its
/// level's shift, the value to cache).
#[inline(always)]
fn descend<F: RadixFormat + ?Sized>(
    f: &F,
    mem: &PhysMem,
    start: (u64, usize, F::Limits),
    va: u64,
    mut read: impl FnMut(u64),
    mut follow: impl FnMut(u32, u64),
) -> Result<Found<F>, WalkFault> {
    let levels = f.geometry().levels;
    let (mut table, mut level, mut limits) = start;
    let mut entries = [0u64; MAX_LEVELS];
    let mut n = 0;
    loop {
        let l = levels[level];
        let ea = table + l.index(va) * F::ENTRY_BYTES;
        let raw = if F::ENTRY_BYTES == 4 { mem.read_u32(PhysAddr(ea)) as u64 } else { mem.read_u64(PhysAddr(ea)) };
        entries[n] = ea;
        n += 1;
        read(ea);
        if raw & F::VALID == 0 {
            return Err(WalkFault::NotPresent { level: level as u8 });
        }
        match f.decode(level, raw, &mut limits) {
            Step::NotPresent => return Err(WalkFault::NotPresent { level: level as u8 }),
            Step::Reserved => return Err(WalkFault::Reserved { level: level as u8 }),
            Step::Leaf(leaf) => return Ok(Found { va, entries, n, level, leaf, limits }),
            Step::Table { next, cache } => {
                if let Some(v) = cache {
                    follow(l.shift, v);
                }
                table = next;
                level += 1;
            }
        }
    }
}

impl<F: RadixFormat> Walker for F {
    fn page_shifts(&self) -> &[u8] {
        self.geometry().page_shifts
    }

    fn walk(&self, mem: &mut PhysMem, pwc: &mut Pwc, req: WalkReq, refs: &mut WalkRefs) -> Result<Translation, WalkFault> {
        let WalkReq { root, asid, va, access } = req;
        let va = va.0;
        if !self.geometry().range.contains(va) {
            return Err(WalkFault::BadAddress);
        }
        let hit = pwc.lookup(va, asid);
        let start = match hit {
            Some((shift, cached)) => {
                let level = self.geometry().levels.iter().position(|l| l.shift == shift as u32).expect("walk cache level is a table level");
                let (table, limits) = self.cached_table(cached);
                (table, level + 1, limits)
            }
            None => (root.0, 0, F::Limits::default()),
        };
        let mut fills = [(0u32, 0u64); MAX_LEVELS - 1];
        let mut nf = 0;
        let mut found = descend(self, mem, start, va, |ea| refs.push(ea), |shift, v| {
            fills[nf] = (shift, v);
            nf += 1;
        })?;
        self.permit(mem, &mut found, access)?;
        for &(shift, v) in &fills[..nf] {
            pwc.fill(va, asid, shift as u8, v);
        }
        if let (true, Some((shift, cached))) = (F::REFILL_HIT, hit) {
            pwc.fill(va, asid, shift, cached);
        }
        Ok(self.translation(mem, &found))
    }

    fn probe(&self, mem: &PhysMem, root: PhysAddr, va: VirtAddr) -> Option<Translation> {
        let va = va.0;
        if !self.geometry().range.contains(va) {
            return None;
        }
        let found = descend(self, mem, (root.0, 0, F::Limits::default()), va, |_| {}, |_, _| {}).ok()?;
        self.visible(&found).then(|| self.translation(mem, &found))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amd64::{Amd64Walker, Pte, PteFlags};
    use crate::mmu::perm;
    use crate::pwc::PwcLevelConfig;

    const USER: PteFlags = PteFlags::P.union(PteFlags::RW).union(PteFlags::US);
    const PML4: u64 = 0x1000;
    const PDPT: u64 = 0x2000;
    const PD: u64 = 0x3000;
    const PT: u64 = 0x4000;
    /// PML4 index 1, PDPT index 2, PD index 3, PT index 4.
    const VA: u64 = (1 << 39) | (2 << 30) | (3 << 21) | (4 << 12) | 0x567;

    /// The descriptor addresses a walk of VA reads, root first.
    fn path() -> [u64; 4] {
        [PML4 + 8, PDPT + 2 * 8, PD + 3 * 8, PT + 4 * 8]
    }

    /// x86-64 tables for VA down to the PD, with `pte` in the PT slot.
    fn tables(pte: Pte) -> PhysMem {
        let mut mem = PhysMem::new(1 << 20, false);
        let [pml4e, pdpte, pde, ptep] = path();
        mem.write_u64(PhysAddr(pml4e), Pte::new(PDPT, USER).0);
        mem.write_u64(PhysAddr(pdpte), Pte::new(PD, USER).0);
        mem.write_u64(PhysAddr(pde), Pte::new(PT, USER).0);
        mem.write_u64(PhysAddr(ptep), pte.0);
        mem
    }

    fn pwc() -> Pwc {
        Pwc::new(&[PwcLevelConfig { shift: 39, entries: 2 }, PwcLevelConfig { shift: 21, entries: 2 }])
    }

    fn walk(mem: &mut PhysMem, pwc: &mut Pwc, access: Access) -> (Result<Translation, WalkFault>, Vec<u64>) {
        let mut refs = WalkRefs::default();
        let r = Amd64Walker.walk(mem, pwc, WalkReq::new(PhysAddr(PML4), 1, VirtAddr(VA), access), &mut refs);
        (r, refs.as_slice().to_vec())
    }

    /// A walk that faults has still read the descriptors down to the one
    /// that made it fault, and the timing model is given each of them; the
    /// walk cache learns nothing from it.
    #[test]
    fn a_faulting_walk_records_the_entries_it_read() {
        let mut mem = tables(Pte::EMPTY);
        let mut pwc = pwc();
        let (r, refs) = walk(&mut mem, &mut pwc, Access::Read);
        assert_eq!(r, Err(WalkFault::NotPresent { level: 3 }));
        assert_eq!(refs, path(), "all four levels were read");
        let (_, refs) = walk(&mut mem, &mut pwc, Access::Read);
        assert_eq!(refs, path(), "nothing was cached from the faulting walk");

        // Not present at the PD: three reads.
        mem.write_u64(PhysAddr(path()[2]), 0);
        let (r, refs) = walk(&mut mem, &mut pwc, Access::Read);
        assert_eq!((r, refs.as_slice()), (Err(WalkFault::NotPresent { level: 2 }), &path()[..3]));

        // A protection fault reads the whole path and sets no A bit.
        let mut mem = tables(Pte::new(0x9000, PteFlags::P | PteFlags::US));
        let (r, refs) = walk(&mut mem, &mut pwc, Access::Write);
        assert_eq!((r, refs), (Err(WalkFault::Protection), path().to_vec()));
        assert!(path().iter().all(|&ea| !Pte(mem.read_u64(PhysAddr(ea))).has(PteFlags::A)));

        // The permitted walk fills the walk cache: the next starts at the PT.
        let (r, _) = walk(&mut mem, &mut pwc, Access::Read);
        assert_eq!(r.map(|t| t.pa(VA)), Ok(PhysAddr(0x9567)));
        let (_, refs) = walk(&mut mem, &mut pwc, Access::Read);
        assert_eq!(refs, [path()[3]]);
    }

    /// `probe` reports what the tables say without touching anything: no
    /// accessed or dirty bit, no walk-cache lookup or fill.
    #[test]
    fn probe_has_no_side_effects() {
        let mut mem = tables(Pte::new(0x9000, USER));
        let mut pwc = pwc();
        let before: Vec<u64> = path().iter().map(|&ea| mem.read_u64(PhysAddr(ea))).collect();
        let t = Amd64Walker.probe(&mem, PhysAddr(PML4), VirtAddr(VA)).expect("mapped");
        assert_eq!((t.pa(VA), t.shift, t.perm & perm::DIRTY), (PhysAddr(0x9567), 12, 0));
        let after: Vec<u64> = path().iter().map(|&ea| mem.read_u64(PhysAddr(ea))).collect();
        assert_eq!(before, after, "no A or D bit set");
        assert_eq!(Amd64Walker.probe(&mem, PhysAddr(PML4), VirtAddr(VA | (1 << 47))), None, "not canonical");
        // The walk after the probe starts at the root and reads every level.
        let (r, refs) = walk(&mut mem, &mut pwc, Access::Write);
        assert_ne!(r.expect("permitted").perm & perm::DIRTY, 0);
        assert_eq!(refs, path());
        assert_eq!((pwc.hits, pwc.misses), (0, 1), "only the walk looked in the walk cache");
        assert!(Pte(mem.read_u64(PhysAddr(path()[3]))).has(PteFlags::A | PteFlags::D), "the walk set A and D");
    }

    #[test]
    fn ranges_and_levels() {
        assert!(VaRange::Canonical(48).contains(0xffff_8000_0000_0000));
        assert!(!VaRange::Canonical(48).contains(1 << 47));
        assert!(VaRange::Below(1 << 32).contains(0xffff_ffff) && !VaRange::Below(1 << 32).contains(1 << 32));
        assert_eq!(Level::new(20, 12).index(0xbfc3_4567), 0xbfc);
        assert_eq!(Level::new(12, 8).index(0xbfc3_4567), 0x34);
    }
}
