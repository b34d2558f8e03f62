//! What the radix-table pmaps (amd64, riscv, arm64) share beyond their
//! descriptor formats: reading their own tables in software. Each level's
//! entries map 2^shift bytes and are indexed by 9 bits of the address; an
//! entry is invalid, a pointer to the next table, or (at the last level,
//! or as a superpage above it) a leaf. From that alone come the address of
//! an entry (pmap_pde, pmap_l2, ...), the leaf that maps an address
//! (pmap_pte), a walk over a range by table and superpage boundaries (the
//! loop heads of pmap_remove, pmap_protect and pmap_advise), and pruning
//! the tables a removal empties (pmap_unwire_ptp).

use crate::base::{Check, Core};
use crate::invariants::{self, Seen};
use crate::ptpage::{self, Stashes};
use crate::shootdown::Invalidate;
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{PmapEnv, PmapId};

/// An 8-byte descriptor as the pmap's own walks decode it.
pub trait Format: Copy + Eq {
    /// The invalid entry, all zero.
    const EMPTY: Self;
    fn from_bits(bits: u64) -> Self;
    fn bits(self) -> u64;
    fn valid(self) -> bool;
    /// Whether a valid entry above the last level maps memory itself (a
    /// superpage, or Arm's block) rather than pointing at a table.
    fn is_leaf(self) -> bool;
    /// The table a valid non-leaf entry points at.
    fn table(self) -> u64;

    /// The descriptor at `pa`.
    fn read(mem: &PhysMem, pa: PhysAddr) -> Self {
        rd(mem, pa)
    }
}

/// Reads the descriptor at `pa`.
#[inline]
pub fn rd<E: Format>(mem: &PhysMem, pa: PhysAddr) -> E {
    E::from_bits(mem.read_u64(pa))
}

/// Writes a descriptor no TLB can hold: into an invalid entry, or into a
/// table nothing points at yet.
#[inline]
pub fn wr<E: Format>(mem: &mut PhysMem, pa: PhysAddr, e: E) {
    mem.write_u64(pa, e.bits())
}

/// Writes `new` over the live entry at `pa` that translates
/// [va, va + size): the TLBs may hold the old one.
#[inline]
pub fn update<E: Format>(mem: &mut PhysMem, pa: PhysAddr, new: E, va: u64, size: u64) -> Invalidate {
    wr(mem, pa, new);
    Invalidate::new(va, size)
}

/// Clears the live entry at `pa` that translates [va, va + size).
#[inline]
pub fn clear<E: Format>(mem: &mut PhysMem, pa: PhysAddr, va: u64, size: u64) -> Invalidate {
    update(mem, pa, E::EMPTY, va, size)
}

/// Address of the entry for `va` in the table at `table` whose entries
/// map 2^shift bytes.
#[inline]
pub fn slot(table: u64, va: u64, shift: u32) -> PhysAddr {
    PhysAddr(table + ((va >> shift) & 511) * 8)
}

/// The first address of the next naturally aligned block of `size` bytes.
#[inline]
pub fn next_block(va: u64, size: u64) -> u64 {
    (va & !(size - 1)) + size
}

/// Whether [va, eva) covers the whole aligned block of `size` bytes that
/// starts at `va`.
#[inline]
pub fn covers(va: u64, eva: u64, size: u64) -> bool {
    va.is_multiple_of(size) && va + size <= eva
}

/// What maps an address, seen from a walk over a range: the tables
/// descended down to the entries that map 2 MB.
enum Step {
    /// Nothing is mapped from the address up to this one.
    Skip(u64),
    /// A 1 GB leaf; its entry's address.
    Leaf1g(PhysAddr),
    /// A 2 MB leaf; its entry's address.
    Leaf2m(PhysAddr),
    /// The last-level table covering the 2 MB around the address.
    Table(u64),
}

/// What maps one part of a range: the argument of `Tables::walk`'s
/// visitor.
pub enum Part {
    /// A 1 GB leaf; its entry's address.
    Leaf1g(PhysAddr),
    /// A 2 MB leaf; its entry's address.
    Leaf2m(PhysAddr),
    /// The last-level table covering the 2 MB around the address.
    Table(u64),
}

/// Where a walk goes after a part: past it, or to the same address again
/// (a superpage there was demoted into a table).
pub enum Next {
    Past,
    Again,
}

const SHIFT_1G: u32 = 30;
const SHIFT_2M: u32 = 21;

/// A pmap's radix tables: their format, levels and roots. The walks are
/// provided.
pub trait Tables {
    type Pte: Format;
    /// log2 of the bytes one entry of each level maps, root first; the
    /// last level maps 4 KB.
    fn shifts(&self) -> &'static [u32];
    /// The root table of `pm`.
    fn root_table(&self, pm: PmapId) -> u64;
    /// Base pages `pm` maps.
    fn resident(&self, pm: PmapId) -> u64;

    /// Address of the entry for `va` among those mapping 2^shift bytes, if
    /// every table above it exists (pmap_pde, pmap_l2, pmap_l3, ...).
    fn entry(&self, mem: &PhysMem, pm: PmapId, va: u64, shift: u32) -> Option<PhysAddr> {
        let mut table = self.root_table(pm);
        for &s in self.shifts() {
            let pa = slot(table, va, s);
            if s == shift {
                return Some(pa);
            }
            let e: Self::Pte = rd(mem, pa);
            if !e.valid() || e.is_leaf() {
                return None;
            }
            table = e.table();
        }
        unreachable!("no table level maps 2^{shift} bytes")
    }

    /// The leaf mapping `va`: its entry, the shift of its level, its
    /// address (pmap_pte).
    fn find_leaf(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<(Self::Pte, u32, PhysAddr)> {
        let shifts = self.shifts();
        let mut table = self.root_table(pm);
        for (i, &s) in shifts.iter().enumerate() {
            let pa = slot(table, va, s);
            let e: Self::Pte = rd(mem, pa);
            if !e.valid() {
                return None;
            }
            if i + 1 == shifts.len() || e.is_leaf() {
                return Some((e, s, pa));
            }
            table = e.table();
        }
        None
    }

    /// Walks [sva, eva) by what maps it, as the loops of pmap_remove,
    /// pmap_protect and pmap_advise do: `visit` gets each address where a
    /// superpage or a last-level table maps the range, and what; unmapped
    /// stretches are skipped a table at a time, and the walk stops when
    /// `pm` maps nothing more.
    fn walk(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, mut visit: impl FnMut(&mut Self, &mut PmapEnv, u64, Part) -> Next)
    where
        Self: Sized,
    {
        let mut va = sva;
        while va < eva && self.resident(pm) > 0 {
            let (part, size) = match step(self, env.mem, pm, va) {
                Step::Skip(next) => {
                    va = next;
                    continue;
                }
                Step::Leaf1g(pa) => (Part::Leaf1g(pa), 1 << SHIFT_1G),
                Step::Leaf2m(pa) => (Part::Leaf2m(pa), 1 << SHIFT_2M),
                Step::Table(t) => (Part::Table(t), 1 << SHIFT_2M),
            };
            if let Next::Past = visit(self, env, va, part) {
                va = next_block(va, size);
            }
        }
    }

    /// Counts one entry fewer in the table holding `va`'s entries of
    /// 2^shift bytes, then prunes that table if it is left empty
    /// (pmap_unwire_ptp). The root's entries are not counted.
    fn unuse(&self, env: &mut PmapEnv, pm: PmapId, va: u64, shift: u32, free: &mut Vec<Pfn>) {
        if shift == self.shifts()[0] {
            return;
        }
        let parent = self.entry(env.mem, pm, va, shift + 9).expect("unuse: the tables above exist");
        let table = rd::<Self::Pte>(env.mem, parent).table();
        ptpage::adjust_ref(env, table, -1);
        self.prune(env, pm, va, shift, free);
    }

    /// If the table holding `va`'s entries of 2^shift bytes has no valid
    /// entry, unlinks it from its parent and queues it on `free`, walking
    /// up (_pmap_unwire_ptp). The root stays. Callers free the queued pages
    /// after the invalidation that covers the unlinked entries.
    fn prune(&self, env: &mut PmapEnv, pm: PmapId, va: u64, shift: u32, free: &mut Vec<Pfn>) {
        if shift == self.shifts()[0] {
            return;
        }
        let parent = self.entry(env.mem, pm, va, shift + 9).expect("prune: the tables above exist");
        let table = rd::<Self::Pte>(env.mem, parent).table();
        if env.phys.pages.get(PhysAddr(table).pfn()).ref_count > 0 {
            return;
        }
        wr(env.mem, parent, Self::Pte::EMPTY);
        free.push(PhysAddr(table).pfn());
        self.unuse(env, pm, va, shift + 9, free);
    }
}

/// What maps `va` in `t`'s tables, descending to the entries that map 2 MB.
fn step<T: Tables + ?Sized>(t: &T, mem: &PhysMem, pm: PmapId, va: u64) -> Step {
    let mut table = t.root_table(pm);
    for &s in t.shifts() {
        let pa = slot(table, va, s);
        let e: T::Pte = rd(mem, pa);
        if !e.valid() {
            return Step::Skip(next_block(va, 1 << s));
        }
        if e.is_leaf() {
            return match s {
                SHIFT_1G => Step::Leaf1g(pa),
                SHIFT_2M => Step::Leaf2m(pa),
                _ => unreachable!("a leaf at shift {s} above the 2 MB entries"),
            };
        }
        if s == SHIFT_2M {
            return Step::Table(e.table());
        }
        table = e.table();
    }
    unreachable!("the walk stops at the 2 MB entries")
}

/// A radix pmap's own checks of what its tables hold (its check.rs).
/// With them, `Check` walks every table of every address space and makes
/// the checks every radix pmap makes: each table page but the root is an
/// in-use page-table page counting its valid entries, no root entry lies
/// beyond user space, no page-table page is stashed for a 2 MB range a
/// table maps, each stash is under a 2 MB leaf, the resident counts and
/// the PV lists agree with the leaves.
pub trait CheckTables: Tables + Core {
    /// The address spaces, with their resident counts and stashes.
    fn spaces(&self) -> Vec<(PmapId, u64, &Stashes<SHIFT_2M>)>;
    /// Checks a leaf of 2^shift bytes mapping `va`, and counts in `seen`
    /// the base pages and PV entries it stands for.
    fn check_leaf(&self, env: &PmapEnv, pm: PmapId, va: u64, shift: u32, e: Self::Pte, seen: &mut Seen) -> Result<(), String>;
    /// Checks an entry that points at a table. Nothing by default.
    fn check_pointer(&self, _pm: PmapId, _va: u64, _e: Self::Pte) -> Result<(), String> {
        Ok(())
    }
    /// Checks the entries of a last-level table, mapping from `va`, as a
    /// whole. Nothing by default.
    fn check_last_table(&self, _pm: PmapId, _va: u64, _entries: &[Self::Pte]) -> Result<(), String> {
        Ok(())
    }
}

impl<T: CheckTables> Check for T {
    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        let mut pv = 0;
        for (pm, resident, stash) in self.spaces() {
            let mut walk = CheckWalk { t: self, env, pm, stash, seen: Seen::default() };
            walk.table(self.root_table(pm), 0, 0)?;
            for (va, s) in stash.iter() {
                let superpage = self.find_leaf(env.mem, pm, va).is_some_and(|(_, shift, _)| shift == SHIFT_2M);
                invariants::stashed(env, pm, va, s.ptp, superpage)?;
            }
            invariants::resident(pm, resident, &walk.seen)?;
            pv += walk.seen.pv;
        }
        invariants::pv_entries(self.pv(), pv)
    }
}

/// The check of one address space's tables.
struct CheckWalk<'a, 'e, T: CheckTables> {
    t: &'a T,
    env: &'a PmapEnv<'e>,
    pm: PmapId,
    stash: &'a Stashes<SHIFT_2M>,
    seen: Seen,
}

impl<T: CheckTables> CheckWalk<'_, '_, T> {
    /// Checks the table at `table`, whose entries map 2^shifts[depth]
    /// bytes from `base` on, and everything below it.
    fn table(&mut self, table: u64, depth: usize, base: u64) -> Result<(), String> {
        let (t, env, pm) = (self.t, self.env, self.pm);
        let shifts = t.shifts();
        let (shift, last) = (shifts[depth], depth + 1 == shifts.len());
        let entries: Vec<T::Pte> = (0..512).map(|i| rd(env.mem, PhysAddr(table + i * 8))).collect();
        if depth > 0 {
            invariants::page_table(env, table, entries.iter().filter(|e| e.valid()).count(), "page-table page")?;
        }
        if last {
            t.check_last_table(pm, base, &entries)?;
        }
        for (i, &e) in entries.iter().enumerate().filter(|(_, e)| e.valid()) {
            let va = base | (i as u64) << shift;
            if depth == 0 && va >= t.params().max_user_address {
                return Err(format!("pmap {pm}: root entry {i} is beyond the user address space"));
            }
            if last || e.is_leaf() {
                t.check_leaf(env, pm, va, shift, e, &mut self.seen)?;
                continue;
            }
            t.check_pointer(pm, va, e)?;
            if shift == SHIFT_2M && self.stash.contains(va) {
                return Err(format!("pmap {pm}: stashed page-table page for {va:#x} while a table is mapped"));
            }
            self.table(e.table(), depth + 1, va)?;
        }
        Ok(())
    }
}


/// `Format` for a descriptor type that is a `u64` newtype with `EMPTY`
/// and `valid()`, given how a leaf and a table pointer read.
macro_rules! u64_format {
    ($t:ty, leaf: $leaf:expr, table: $table:expr) => {
        impl Format for $t {
            const EMPTY: Self = <$t>::EMPTY;
            fn from_bits(bits: u64) -> Self {
                Self(bits)
            }
            fn bits(self) -> u64 {
                self.0
            }
            fn valid(self) -> bool {
                self.valid()
            }
            fn is_leaf(self) -> bool {
                $leaf(self)
            }
            fn table(self) -> u64 {
                $table(self)
            }
        }
    };
}

u64_format!(splab_hw::amd64::pte::Pte, leaf: |e: Self| e.has(splab_hw::amd64::pte::PteFlags::PS), table: |e: Self| e.frame());
u64_format!(splab_hw::riscv::pte::Pte, leaf: |e: Self| e.is_leaf(), table: |e: Self| e.frame());
u64_format!(splab_hw::arm64::pte::Desc, leaf: |e: Self| e.is_block(), table: |e: Self| e.oa());
