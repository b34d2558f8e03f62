//! The machine-independent side of the pmap interface (FreeBSD pmap(9)).
//!
//! Each architecture implements `Pmap` over its own page-table format; the
//! machine-independent VM calls only these operations and never sees a
//! descriptor bit. One `Pmap` value serves every address space of the
//! machine (pmaps are named by `PmapId`), because operations on a physical
//! page (remove_all, remove_write, is_modified) reach into every address
//! space that maps it through the page's PV list.

use crate::physalloc::Phys;
use crate::sysctl::Sysctls;
use splab_hw::machine::Mmu;
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr, VirtAddr};

pub type PmapId = u32;

/// Protection bits (vm_prot_t).
pub mod prot {
    pub const NONE: u8 = 0;
    pub const READ: u8 = 1;
    pub const WRITE: u8 = 2;
    pub const EXEC: u8 = 4;
    pub const RW: u8 = READ | WRITE;
    pub const ALL: u8 = READ | WRITE | EXEC;
}
pub type Prot = u8;

/// madvise(2) advice that reaches the pmap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    DontNeed,
    Free,
}

/// A page size, as its index in `Pmap::pagesizes()` (FreeBSD's psind):
/// 0 is the base page, 1 the first superpage size, 2 the second, ...
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Psind(u8);

impl Psind {
    /// The base page.
    pub const BASE: Psind = Psind(0);

    pub const fn new(index: u8) -> Psind {
        Psind(index)
    }

    /// The index in `Pmap::pagesizes()`.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a mapping is being entered (pmap_enter's flags argument).
#[derive(Clone, Copy, Debug, Default)]
pub struct EnterFlags {
    /// The access that caused the fault (sets A, and D for a write).
    pub access: Prot,
    pub wired: bool,
    /// The size of the mapping to make.
    pub psind: Psind,
    /// Fail rather than replace an existing mapping (PMAP_ENTER_NOREPLACE).
    pub noreplace: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PmapError {
    #[error("no memory for a page-table page")]
    NoMemory,
    #[error("a mapping already exists")]
    Exists,
    #[error("superpage size index not supported")]
    BadPsind,
}

/// Counts of events the timing model charges for.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct KernelEvents {
    pub faults: u64,
    /// Page faults the pmap resolved alone (pmap_fault), not counted in
    /// `faults`.
    pub pmap_faults: u64,
    pub zero_fills: u64,
    pub cow_copies: u64,
    pub page_ins: u64,
    pub pt_page_allocs: u64,
    pub invlpg: u64,
    pub tlb_flushes: u64,
    pub shootdown_ipis: u64,
    pub promotions: u64,
    pub demotions: u64,
    pub syscalls: u64,
    pub context_switches: u64,
    /// Pages the page daemon examined (queue scans, reference and dirty
    /// tests).
    pub pd_scanned: u64,
    /// Pages written to swap (the laundry's CPU work; the write itself is
    /// asynchronous, as in FreeBSD).
    pub swap_outs: u64,
    /// Pages read from swap by a fault, which waits for the read.
    pub swap_ins: u64,
    /// File pages written back to their file.
    pub vnode_outs: u64,
    /// Pages copied into a huge page a policy collapsed (khugepaged,
    /// MADV_COLLAPSE).
    #[serde(skip_serializing_if = "is_zero")]
    pub collapse_copies: u64,
    /// Pages moved by compaction (a copy each).
    #[serde(skip_serializing_if = "is_zero")]
    pub migrations: u64,
    /// Page-table entries khugepaged examined.
    #[serde(skip_serializing_if = "is_zero")]
    pub khugepaged_scanned: u64,
    /// Base-page mappings that failed promotion attempts examined before
    /// the one that stopped them (a pmap that counts them: powerpc64).
    #[serde(skip_serializing_if = "is_zero")]
    pub promotion_scanned: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// What the pmap may touch outside itself: physical pages and their
/// metadata, and which address space each CPU runs (the kernel's); modelled
/// memory, to read and write descriptors, and each CPU's MMU, to invalidate
/// its TLBs and walk caches (the machine's); and the event counters.
pub struct PmapEnv<'a> {
    pub phys: &'a mut Phys,
    pub mem: &'a mut PhysMem,
    /// Per CPU: its TLBs and page-walk caches.
    pub mmu: &'a mut [Mmu],
    /// Per CPU: the pmap active on it (pc_curpmap).
    pub curpmap: &'a mut [Option<PmapId>],
    pub ev: &'a mut KernelEvents,
}

impl PmapEnv<'_> {
    /// Marks `pm` active on no CPU (its address space is going away).
    pub fn deactivate(&mut self, pm: PmapId) {
        for c in self.curpmap.iter_mut() {
            if *c == Some(pm) {
                *c = None;
            }
        }
    }
}

/// What the pmap knows about one mapping, for checks and display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub pa: PhysAddr,
    /// log2 of the size of the page that maps it.
    pub shift: u8,
    pub prot: Prot,
    pub dirty: bool,
}

/// The machine-dependent page-table layer of one architecture.
pub trait Pmap: Send {
    /// Architecture name as splab spells it (amd64, ...).
    fn arch(&self) -> &'static str;
    /// Page sizes in bytes, base first (FreeBSD's pagesizes[]).
    fn pagesizes(&self) -> &'static [u64];
    /// Whether transparent superpages are enabled (the tunable).
    fn superpages_enabled(&self) -> bool;
    /// Index in `pagesizes()` of the size a reservation covers (the
    /// machine-dependent VM_LEVEL_0_ORDER of FreeBSD's vmparam.h, as a
    /// page size). Smaller superpage sizes fill inside a reservation and
    /// are asked about with vm_reserv_is_populated: arm64 reserves 2 MB
    /// (index 2) and promotes 64 KB runs (index 1) inside it.
    fn reserv_psind(&self) -> Psind {
        Psind::new(1)
    }

    /// Takes the memory the pmap needs for good before anything else is
    /// allocated (pmap_bootstrap): the powerpc64 hashed page table. Called
    /// once by the system at boot; the default takes nothing.
    fn bootstrap(&mut self, _env: &mut PmapEnv) {}

    /// Creates an empty address space (pmap_pinit).
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError>;
    /// Frees an address space with no mappings left (pmap_release).
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId);
    /// Root of the page tables, as the CPU's translation base register holds it.
    fn root(&self, pm: PmapId) -> PhysAddr;
    /// Address-space identifier the TLB tags entries with.
    fn asid(&self, pm: PmapId) -> u16;
    /// Makes `pm` the address space running on `cpu` (pmap_activate).
    fn activate(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize);

    /// Maps page `m` at `va` (pmap_enter); with a superpage `flags.psind`,
    /// `m` is the first page of a physically contiguous, aligned
    /// superpage-sized run. May promote the surrounding superpage
    /// afterwards.
    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: VirtAddr, m: Pfn, prot: Prot, flags: EnterFlags) -> Result<(), PmapError>;
    /// Maps the resident pages of an object range at once, read-only, using
    /// superpage mappings where a fully populated aligned run allows
    /// (pmap_enter_object). `pages` gives the page at each offset.
    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: VirtAddr, end: VirtAddr, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, prot: Prot);
    /// Removes mappings in [sva, eva) (pmap_remove).
    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr);
    /// Removes every mapping of page `m` in every address space (pmap_remove_all).
    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn);
    /// Reduces protection in [sva, eva) to `prot` (pmap_protect).
    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, prot: Prot);
    /// Write-protects every mapping of `m` (pmap_remove_write).
    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn);
    /// Applies madvise advice to the mappings in range (pmap_advise).
    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, advice: Advice);
    /// Whether any mapping of `m` is modified (pmap_is_modified): a
    /// writable mapping with its dirty bit set, 4 KB or a superpage
    /// mapping whose frame holds `m`. No side effects.
    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool;
    /// Whether any mapping of `m` (4 KB, or a superpage mapping whose
    /// frame holds `m`) has its referenced (accessed) bit set
    /// (pmap_is_referenced). No side effects.
    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool;
    /// Counts and clears the referenced bits of `m`'s mappings
    /// (pmap_ts_referenced), for the page daemon. Returns the number of
    /// mappings found referenced, stopping at 5 (PMAP_TS_REFERENCED_MAX);
    /// 0 only if no mapping of `m` is referenced.
    ///
    /// A referenced superpage mapping counts as a reference to every base
    /// page in it. Its one bit is shared by all of them, so it is cleared
    /// only when `m` is the base page selected by a hash of the physical
    /// page number, the virtual superpage number and the address space
    /// (FreeBSD's choice), and left set for the others; where clearing is
    /// not possible without demotion, the superpage is demoted and `m`'s
    /// base mapping removed instead. Cleared bits are invalidated in the
    /// TLBs of every CPU running the address space. As a side effect, a
    /// mapping found writable and modified marks `m` dirty
    /// (`pflags::DIRTY`).
    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32;
    /// Clears the modified state of `m`'s mappings (pmap_clear_modify), so
    /// that the next write to `m` through any of them is seen again (by
    /// `is_modified` or by a fault). Base-page mappings that are writable
    /// and modified lose their dirty bit (TLBs invalidated). A writable
    /// superpage mapping holding `m` is demoted first (its dirty bit is
    /// shared by all its base pages), and `m`'s new base mapping is made
    /// read-only and clean while the other base pages keep their state,
    /// so that a later write faults and may repromote; `m` is marked dirty
    /// in that case, as FreeBSD does, for the caller to clean. If the
    /// demotion cannot get a page-table page, the superpage mapping is
    /// removed and its dirty state moves to all its base pages. The
    /// caller clears `pflags::DIRTY` afterwards.
    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn);
    /// Removes every mapping of every page of the aligned, physically
    /// contiguous run of the size a reservation covers
    /// (`pagesizes()[reserv_psind()]`) that holds `m`: superpage mappings
    /// of that size are removed whole, without demotion, and smaller
    /// mappings of each of its pages one by one.
    /// Referenced and modified state moves to the pages' flags as with
    /// `remove_all`. The page daemon uses it to drop a clean superpage
    /// whole (splab's; FreeBSD demotes through pmap_remove_all instead).
    /// Architectures without superpages may fall back to `remove_all` on
    /// each page of the run.
    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn);
    /// Whether any mapping of `m` exists.
    fn page_is_mapped(&self, env: &PmapEnv, m: Pfn) -> bool;
    /// Tries to resolve a page fault at `va` for `access` without the
    /// machine-independent fault handler: one the hardware raised because
    /// a valid mapping that permits the access has its accessed bit clear,
    /// or its dirty bit clear on a write (FreeBSD's pmap_fault, which the
    /// riscv trap handler calls before vm_fault). On powerpc64 with a
    /// hashed page table, also a segment fault (no SLB entry for the
    /// segment) and a fault on a mapping whose page table entry was
    /// evicted from the hashed table. Returns whether it did.
    /// Architectures whose hardware sets those bits have nothing to do.
    fn fault(&mut self, _env: &mut PmapEnv, _pm: PmapId, _va: VirtAddr, _access: Prot) -> bool {
        false
    }

    /// The pmap's view of `va` (pmap_extract plus attributes).
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: VirtAddr) -> Option<Mapping>;
    /// Adds this pmap's tunables and counters.
    fn sysctls(&self, out: &mut Sysctls);
    /// Demotions of mappings of size `psind` so far, where the pmap counts
    /// them for that size (FreeBSD's `vm.pmap.<level>.demotions`).
    fn demotions(&self, _psind: Psind) -> Option<u64> {
        None
    }
    /// Sets a tunable by its sysctl name; Err names what was wrong.
    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), String>;
    /// Verifies the pmap's invariants (PV lists agree with the page tables,
    /// page-table page counts equal their valid entries).
    fn check(&self, env: &PmapEnv) -> Result<(), String>;
    /// Highest user virtual address + 1.
    fn max_user_address(&self) -> u64;
    /// Host bytes used by the pmap's own structures.
    fn host_bytes(&self) -> u64;
}
