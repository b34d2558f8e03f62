//! The armv7 pmap: ARMv7 short-descriptor page tables (LPAE off) in
//! modelled physical memory, with transparent 1 MB sections (promotion,
//! direct section mappings, demotion reusing the kept L2 table, one-step
//! section removal) and, as a second level, 64 KB large pages promoted
//! from 16-page runs inside the 1 MB reservation; software emulation of
//! the referenced and modified bits through access flag and permission
//! faults (pmap_fault). Follows the design of FreeBSD's
//! sys/arm/arm/pmap-v6.c; function names in comments refer to it. FreeBSD's
//! armv7 pmap never uses large pages; that level follows the shape of
//! arm64's 64 KB (L3C) code: pmap_promote_l3c, pmap_demote_l3c,
//! pmap_enter_l3c.
//!
//! Descriptors as FreeBSD writes them (pte-v6.h). SCTLR.AFE and SCTLR.TRE
//! are set, so AP[0] is the access flag and TEX[2:1] are free for
//! software. In a small-page (PTE2) descriptor:
//! - AP[0] = PTE2_A: referenced; clear makes the next access fault.
//! - AP[1] = PTE2_U: user.
//! - AP[2] = PTE2_NM: not modified; the hardware sees the page read-only,
//!   so the first store faults and pmap_fault clears it.
//! - TEX[1] = PTE2_RO: software read-only (the real protection).
//! - TEX[2] = PTE2_W: wired.
//! - XN = PTE2_NX, S, nG as the hardware defines them; TEX[0], C, B = 0
//!   (TEX remap class 0: normal memory, write-back write-allocate).
//!
//! Sections carry the same bits in the section layout (ATTR_TO_L1); a
//! large page is 16 identical large-page descriptors with the same bits
//! in the large-page layout. Every descriptor is in domain 0.
//!
//! Tables. Each address space has a 16 KB, 16 KB-aligned L1 table. L2
//! tables are 1 KB; as in FreeBSD, four of them share one 4 KB page (a
//! PT2PG) that serves an aligned 4 MB of virtual space (`pt2pg`, FreeBSD's
//! PT2TAB). A PT2PG page is allocated when the first of its tables is
//! needed and freed when none holds an entry; until then, L1 entries stay
//! linked to its tables even when empty (as FreeBSD leaves them).
//!
//! What is always true (checked by `check`):
//! - `pt2_count[i]` is the number of valid entries in L2 table slot i
//!   (pt2_wirecount); a PT2PG page's `ref_count` is the sum over its four
//!   slots and is never 0 while the page is held.
//! - An L1 entry is a fault entry, a link to its own slot of its PT2PG
//!   page, or a section. A slot not linked holds no valid entry, except
//!   under a section made by promotion: there the slot keeps the 256
//!   entries the section replaced (the stash; FreeBSD leaves the promoted
//!   L2 table in place) and its count stays 256. A section mapped directly
//!   has no stash (count 0).
//! - A large page is 16 identical large-page descriptors at a 16-aligned
//!   index, mapping a 64 KB-aligned frame.
//! - Every valid managed leaf 4 KB page (a small page, or each 4 KB part
//!   of a large page) (pmap, va) -> m has exactly one PV entry on m's
//!   list; every managed section has one on its 1 MB frame's list.
//! - A managed section is never writable and unmodified (promotion
//!   write-protects clean pages first; a writable direct section is entered
//!   modified).
//! - TLBs: FreeBSD's armv7 pmap uses no ASIDs. User mappings have nG set,
//!   every address space runs with ASID 0, and switching TTBR0 flushes the
//!   CPU's non-global entries (cp15_ttbr_set's tlb_flush_all_ng_local).
//!   So only CPUs running an address space hold its translations, and TLB
//!   maintenance uses the hardware's inner-shareable broadcast: no IPIs.
//!   Every change of a valid entry is break-before-make: the entry is
//!   cleared and its translations flushed before the new one is written
//!   (the architecture forbids two TLB entries translating one address).

mod check;
mod demote;
mod enter;
mod fault;
mod promote;
mod refmod;
mod remove;

use crate::base::{Core, Md, Params, Tunable};
use crate::counters::{size_names, SizeCounters, SizeNames};
use crate::ptpage;
use crate::pv::PvTable;
use crate::shootdown::{self, Invalidate};
use crate::spaces::{pm_accessors, Spaces};
use splab_hw::armv7::pte::{L1Desc, L2Desc, SmallFlags};
use splab_hw::armv7::{l1_index, l2_index, L1_ENTRIES, L2_TABLE_SIZE, LARGE_SIZE, SECTION_SHIFT, SECTION_SIZE};
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::page::{pflags, VmPage};
use splab_vm::pmap::{prot, EnterFlags, Mapping, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;
use std::collections::HashMap;

/// Page sizes as FreeBSD's arm pmap_init sets pagesizes[]: 4 KB and the
/// 1 MB section. Reservations are 1 MB (VM_LEVEL_0_ORDER 8). The 64 KB
/// level lives inside the pmap: it is promoted and mapped from populated
/// runs within a reservation (vm_reserv_is_populated), never requested by
/// the machine-independent layer.
const PAGESIZES: [u64; 2] = [4096, SECTION_SIZE];
const PSIND_SECTION: Psind = Psind::new(1);
const PARAMS: Params = Params { arch: "armv7", pagesizes: &PAGESIZES, reserv_psind: PSIND_SECTION, max_user_address: VM_MAXUSER_ADDRESS };

/// The ASID every address space runs with (see the module comment).
const ASID: u16 = 0;

/// FreeBSD's VM_MAXUSER_ADDRESS on arm: KERNBASE (0xc0000000) less the
/// 4 MB PT2MAP window.
pub const VM_MAXUSER_ADDRESS: u64 = 0xbfc0_0000;

/// Where the exception vectors are: FreeBSD runs with SCTLR.V set, at
/// ARM_VECTORS_HIGH. Never part of a superpage.
pub const VECTORS_HIGH: u64 = 0xffff_0000;

/// Most physical memory short descriptors address (32-bit physical
/// addresses; only supersections reach further, and FreeBSD makes none).
pub const MAX_PHYS_BYTES: u64 = 1 << 32;

/// The domain of every descriptor (FreeBSD's PTE1_LINK and PTE1 leave the
/// domain field 0).
const DOMAIN: u32 = 0;

/// Software names of the descriptor bits, in the small-page layout
/// (pte-v6.h). `PTE2_V` is the descriptor type, not a flag.
pub(crate) const PTE2_A: SmallFlags = SmallFlags::AP0;
pub(crate) const PTE2_U: SmallFlags = SmallFlags::AP1;
pub(crate) const PTE2_NM: SmallFlags = SmallFlags::AP2;
pub(crate) const PTE2_RO: SmallFlags = SmallFlags::TEX1;
pub(crate) const PTE2_W: SmallFlags = SmallFlags::TEX2;
pub(crate) const PTE2_NX: SmallFlags = SmallFlags::XN;
pub(crate) const PTE2_S: SmallFlags = SmallFlags::S;
pub(crate) const PTE2_NG: SmallFlags = SmallFlags::NG;
pub(crate) const PTE2_ATTR_MASK: SmallFlags = SmallFlags::TEX0.union(SmallFlags::C).union(SmallFlags::B);
/// The bits that must agree across the entries of a promotion
/// (PTE2_PROMOTE).
pub(crate) const PTE2_PROMOTE: SmallFlags = PTE2_A
    .union(PTE2_NM)
    .union(PTE2_S)
    .union(PTE2_NG)
    .union(PTE2_NX)
    .union(PTE2_RO)
    .union(PTE2_U)
    .union(PTE2_W)
    .union(PTE2_ATTR_MASK);

/// Whether a mapping with these attributes has been written
/// (pte2_is_dirty: neither NM nor RO set).
pub(crate) fn is_dirty(f: SmallFlags) -> bool {
    !f.intersects(PTE2_NM | PTE2_RO)
}

/// vm.pmap.section.*, and the reasons of failed promotions (FreeBSD
/// logs them with CTR, failure(1) to failure(4); splab counts them).
const SECTION: SizeNames = size_names!("section", "1MB", [
    (FirstMisaligned, "first", "Promotion failed: first entry invalid, unreferenced or misaligned"),
    (NotContiguous, "not_contiguous", "Promotion failed: an entry invalid or not the next frame"),
    (Attributes, "attributes", "Promotion failed: entry attributes differ"),
], demotion: ("Demotions that reused the L2 table kept at promotion", "Demotions that removed the mapping instead"));

/// vm.pmap.largepage.*, likewise.
const LARGEPAGE: SizeNames = size_names!("largepage", "64KB", [
    (FirstMisaligned, "first", "Promotion failed: first entry invalid, unreferenced or misaligned"),
    (NotContiguous, "not_contiguous", "Promotion failed: an entry invalid or not the next frame"),
    (Attributes, "attributes", "Promotion failed: entry attributes differ"),
]);

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// 1 MB sections (vm.pmap.section.*).
    pub section: SizeCounters,
    /// 64 KB large pages (vm.pmap.largepage.*).
    pub large: SizeCounters,
    pub af_faults: u64,
    pub nm_faults: u64,
}

pub(crate) struct Pm {
    /// The first of the four pages of the L1 table (TTBR0).
    pub l1: Pfn,
    /// PT2PG pages by L1 index / 4 (FreeBSD's PT2TAB).
    pub pt2pg: HashMap<u64, Pfn>,
    /// Valid entries per L2 table slot, by L1 index (pt2_wirecount).
    pub pt2_count: Vec<u16>,
    /// Base pages mapped.
    pub resident: u64,
}

/// What maps an address.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Leaf {
    /// A section; its L1 entry's address.
    Section(PhysAddr, L1Desc),
    /// A small page or one of a large page's entries, and its address.
    Pte2(PhysAddr, L2Desc),
}

/// The armv7 pmap.
pub type PmapArmv7 = Md<Armv7>;

pub struct Armv7 {
    pub(crate) pmaps: Spaces<Pm>,
    /// PV lists per 4 KB page and per 1 MB frame.
    pub(crate) pv: PvTable,
    /// 1 MB sections.
    pub(crate) sp_enabled: Tunable,
    /// 64 KB large pages.
    pub(crate) lp_enabled: Tunable,
    /// The exception vectors page: high vectors unless a test says
    /// otherwise (the older arm pmap mapped low vectors at VA 0 into every
    /// user address space).
    pub(crate) vectors: u64,
    pub(crate) st: Stats,
}

impl PmapArmv7 {
    /// A pmap for `npages` of physical memory, with sections on or off;
    /// 64 KB large pages start off (vm.pmap.lp_enabled = 0).
    pub fn new(npages: u64, superpages: bool) -> Result<PmapArmv7, String> {
        if npages * 4096 > MAX_PHYS_BYTES {
            return Err(format!(
                "armv7 short descriptors address at most 4 GiB of physical memory, not {} MiB (choose --memory 4G or less)",
                (npages * 4096) >> 20
            ));
        }
        Ok(Md(Armv7 {
            pmaps: Spaces::default(),
            pv: PvTable::new(npages, SECTION_SHIFT),
            sp_enabled: Tunable::new("vm.pmap.sp_enabled", "Are large page mappings enabled?", superpages),
            lp_enabled: Tunable::new("vm.pmap.lp_enabled", "Are 64KB large page mappings enabled? (splab's second level)", false),
            vectors: VECTORS_HIGH,
            st: Stats::default(),
        }))
    }
}

impl Armv7 {

    pm_accessors!(pmaps);

    #[inline]
    pub(crate) fn rd1(mem: &PhysMem, pa: PhysAddr) -> L1Desc {
        L1Desc(mem.read_u32(pa))
    }
    #[inline]
    pub(crate) fn wr1(mem: &mut PhysMem, pa: PhysAddr, e: L1Desc) {
        mem.write_u32(pa, e.0)
    }
    #[inline]
    pub(crate) fn rd2(mem: &PhysMem, pa: PhysAddr) -> L2Desc {
        L2Desc(mem.read_u32(pa))
    }
    #[inline]
    pub(crate) fn wr2(mem: &mut PhysMem, pa: PhysAddr, e: L2Desc) {
        mem.write_u32(pa, e.0)
    }

    /// Address of `va`'s L1 entry (pmap_pte1).
    pub(crate) fn pte1_pa(&self, pm: PmapId, va: u64) -> PhysAddr {
        PhysAddr(self.pm(pm).l1.addr_4k().0 + l1_index(va) * 4)
    }

    /// Address of L2 table slot `idx` (an L1 index), if its PT2PG page
    /// exists (page_pt2pa).
    pub(crate) fn pt2_table(&self, pm: PmapId, idx: u64) -> Option<u64> {
        self.pm(pm).pt2pg.get(&(idx >> 2)).map(|p| p.addr_4k().0 + (idx & 3) * L2_TABLE_SIZE)
    }

    /// Address of `va`'s entry in its L2 table slot, if the slot exists
    /// (pmap_pte2_quick). The slot may be unlinked (a stash).
    pub(crate) fn pte2_pa(&self, pm: PmapId, va: u64) -> Option<PhysAddr> {
        self.pt2_table(pm, l1_index(va)).map(|t| PhysAddr(t + l2_index(va) * 4))
    }

    /// What maps `va`, if anything.
    pub(crate) fn find(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Leaf> {
        if va >= splab_hw::armv7::VA_LIMIT {
            return None;
        }
        let p1 = self.pte1_pa(pm, va);
        let e1 = Self::rd1(mem, p1);
        if e1.is_section() {
            return Some(Leaf::Section(p1, e1));
        }
        if !e1.is_table() {
            return None;
        }
        let p2 = PhysAddr(e1.table_base() + l2_index(va) * 4);
        let e2 = Self::rd2(mem, p2);
        e2.valid().then_some(Leaf::Pte2(p2, e2))
    }

    /// Allocates a zeroed PT2PG page for the 4 MB holding L1 index `idx`.
    fn alloc_pt2pg(&mut self, env: &mut PmapEnv, pm: PmapId, idx: u64) -> Option<Pfn> {
        let p = ptpage::alloc(env)?;
        env.phys.pages.get_mut(p).pindex = (idx >> 2) as u32;
        self.pm_mut(pm).pt2pg.insert(idx >> 2, p);
        Some(p)
    }

    /// Returns the address of `va`'s L2 entry, linking an L2 table (and
    /// allocating its PT2PG page) as needed (pmap_allocpte2). A section in
    /// the way is demoted; if that fails the section is gone and the walk
    /// starts over.
    pub(crate) fn alloc_pte2(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64) -> Result<PhysAddr, PmapError> {
        let idx = l1_index(va);
        let p1 = self.pte1_pa(pm, va);
        loop {
            let e1 = Self::rd1(env.mem, p1);
            if e1.is_section() {
                self.demote_pte1(env, pm, va);
                continue;
            }
            if !e1.is_table() {
                let table = match self.pt2_table(pm, idx) {
                    Some(t) => t,
                    None => {
                        self.alloc_pt2pg(env, pm, idx).ok_or(PmapError::NoMemory)?;
                        self.pt2_table(pm, idx).expect("just allocated")
                    }
                };
                debug_assert_eq!(self.pm(pm).pt2_count[idx as usize], 0, "linking a table with entries");
                Self::wr1(env.mem, p1, L1Desc::table(table, DOMAIN));
            }
            return Ok(self.pte2_pa(pm, va).expect("linked"));
        }
    }

    /// Adds `n` valid entries to slot `idx` (pt2_wirecount_inc).
    pub(crate) fn pt2_add(&mut self, env: &mut PmapEnv, pm: PmapId, idx: u64, n: u16) {
        let page = self.pm(pm).pt2pg[&(idx >> 2)];
        self.pm_mut(pm).pt2_count[idx as usize] += n;
        ptpage::adjust_ref(env, page.addr_4k().0, n as i32);
    }

    /// Removes `n` valid entries from slot `idx` (pt2_wirecount_dec,
    /// pmap_unuse_pt2). When that leaves the whole PT2PG page without
    /// entries, the L1 entries linked to its tables are cleared and their
    /// translations flushed, and the page is queued on `free`
    /// (pmap_unwire_pt2pg). Returns whether the page went.
    pub(crate) fn pt2_sub(&mut self, env: &mut PmapEnv, pm: PmapId, idx: u64, n: u16, free: &mut Vec<Pfn>) -> bool {
        let page = self.pm(pm).pt2pg[&(idx >> 2)];
        let c = &mut self.pm_mut(pm).pt2_count[idx as usize];
        debug_assert!(*c >= n, "slot {idx}: removing {n} of {c} entries");
        *c -= n;
        if ptpage::adjust_ref(env, page.addr_4k().0, -(n as i32)) > 0 {
            return false;
        }
        let first = idx & !3;
        for i in first..first + 4 {
            let p1 = PhysAddr(self.pm(pm).l1.addr_4k().0 + i * 4);
            let e1 = Self::rd1(env.mem, p1);
            if e1.is_table() {
                debug_assert_eq!(e1.table_base() & !0xfff, page.addr_4k().0);
                let inv = Self::update1(env.mem, p1, L1Desc::FAULT, i << SECTION_SHIFT, SECTION_SIZE);
                self.tlb_flush(env, pm, inv);
            }
        }
        self.pm_mut(pm).pt2pg.remove(&(idx >> 2));
        free.push(page);
        true
    }

    /// One entry fewer for `va`'s slot (pmap_unuse_pt2).
    pub(crate) fn unuse(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, free: &mut Vec<Pfn>) -> bool {
        self.pt2_sub(env, pm, l1_index(va), 1, free)
    }

    /// Writes `e` over the live L1 entry at `p1`, which translates
    /// [va, va + size).
    pub(crate) fn update1(mem: &mut PhysMem, p1: PhysAddr, e: L1Desc, va: u64, size: u64) -> Invalidate {
        Self::wr1(mem, p1, e);
        Invalidate::new(va, size)
    }

    /// Writes `e` over the `n` live L2 entries from `p2` (one small page,
    /// or the 16 of a large page), which translate [va, va + n * 4 KB).
    pub(crate) fn update2(mem: &mut PhysMem, p2: PhysAddr, n: u64, e: L2Desc, va: u64) -> Invalidate {
        for i in 0..n {
            Self::wr2(mem, PhysAddr(p2.0 + i * 4), e);
        }
        Invalidate::new(va, n * 4096)
    }

    /// pmap_tlb_flush: one address, every CPU running `pm`, by broadcast;
    /// it drops the translations of the address of every size.
    pub(crate) fn tlb_flush(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        shootdown::broadcast_invalidate_page(env, pm, ASID, inv.va);
    }

    /// pmap_tlb_flush_range: every 4 KB page of the change.
    pub(crate) fn tlb_flush_range(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate) {
        let mut a = inv.va;
        while a < inv.va + inv.size {
            shootdown::broadcast_invalidate_page(env, pm, ASID, a);
            a += 4096;
        }
    }

    /// The small-page descriptor pmap_enter makes for `pa` with `pr`
    /// (pmap_enter's npte2): always referenced (the mapping is made for an
    /// access), not modified unless the access is a write, read-only
    /// unless `pr` has write, user below VM_MAXUSER_ADDRESS, not global,
    /// shareable, normal write-back memory.
    pub(crate) fn new_pte2(pa: u64, pr: Prot, flags: &EnterFlags, va: u64) -> L2Desc {
        let mut f = PTE2_A | PTE2_S | PTE2_NG;
        if flags.access & prot::WRITE == 0 || pr & prot::WRITE == 0 {
            f |= PTE2_NM;
        }
        if pr & prot::WRITE == 0 {
            f |= PTE2_RO;
        }
        if pr & prot::EXEC == 0 {
            f |= PTE2_NX;
        }
        if flags.wired {
            f |= PTE2_W;
        }
        if va < VM_MAXUSER_ADDRESS {
            f |= PTE2_U;
        }
        L2Desc::small(pa, f)
    }

    /// Whether the `size`-byte superpage at `va` may ever be promoted or
    /// mapped whole: not in kernel space and not holding the exception
    /// vectors page.
    pub(crate) fn superpage_allowed(&self, va: u64, size: u64) -> bool {
        let base = va & !(size - 1);
        base + size <= VM_MAXUSER_ADDRESS && !(base..base + size).contains(&self.vectors)
    }

    /// The protection the hardware grants now: write only when both RO and
    /// NM are clear (an unmodified writable page is read-only to the MMU
    /// until pmap_fault clears NM).
    fn leaf_prot(f: SmallFlags) -> Prot {
        let mut p = prot::READ;
        if is_dirty(f) {
            p |= prot::WRITE;
        }
        if !f.contains(PTE2_NX) {
            p |= prot::EXEC;
        }
        p
    }

    /// The first address of the aligned 64 KB run holding `va`.
    pub(crate) fn group_base(va: u64) -> u64 {
        va & !(LARGE_SIZE - 1)
    }

    /// Allocates the L1 table: four contiguous pages, 16 KB-aligned
    /// (pmap_pinit's pt1 allocation), breaking reservations if the free
    /// lists have no such block.
    fn alloc_l1(env: &mut PmapEnv) -> Option<Pfn> {
        let p = loop {
            if let Some(p) = env.phys.buddy.alloc(2) {
                break p;
            }
            if !env.phys.reclaim_inactive() {
                return None;
            }
        };
        for i in 0..4 {
            let f = Pfn(p.0 + i);
            env.mem.zero_frame(f);
            *env.phys.pages.get_mut(f) = VmPage { flags: pflags::INUSE | pflags::PTPAGE | pflags::UNMANAGED, ..VmPage::FREE };
        }
        env.ev.pt_page_allocs += 4;
        Some(p)
    }

    fn free_l1(env: &mut PmapEnv, p: Pfn) {
        for i in 0..4 {
            let f = Pfn(p.0 + i);
            env.mem.zero_frame(f);
            *env.phys.pages.get_mut(f) = VmPage::FREE;
        }
        env.phys.buddy.free_pages(p, 2);
    }
}

impl Core for Armv7 {
    fn params(&self) -> Params {
        PARAMS
    }
    fn superpages_enabled(&self) -> bool {
        self.sp_enabled.on
    }
    fn tunables(&self) -> Vec<&Tunable> {
        vec![&self.sp_enabled, &self.lp_enabled]
    }
    fn tunables_mut(&mut self) -> Vec<&mut Tunable> {
        vec![&mut self.sp_enabled, &mut self.lp_enabled]
    }
    fn pv(&self) -> &PvTable {
        &self.pv
    }
    fn host_bytes(&self) -> u64 {
        self.pv.host_bytes() + self.pmaps.iter().map(|(_, p)| p.pt2_count.len() as u64 * 2 + p.pt2pg.len() as u64 * 16).sum::<u64>()
    }

    /// pmap_pinit: an empty L1 table. (FreeBSD also copies the kernel's
    /// L1 entries into it; the model has no kernel mappings.)
    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        let l1 = Self::alloc_l1(env).ok_or(PmapError::NoMemory)?;
        Ok(self.pmaps.insert(Pm { l1, pt2pg: HashMap::new(), pt2_count: vec![0; L1_ENTRIES as usize], resident: 0 }))
    }

    /// pmap_release. CPUs that ran the address space keep its non-global
    /// translations only until their next TTBR0 switch, which flushes them.
    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        let p = self.pmaps.remove(pm);
        debug_assert_eq!(p.resident, 0, "pmap released with mappings");
        debug_assert!(p.pt2pg.is_empty(), "pmap released with L2 tables");
        env.deactivate(pm);
        Self::free_l1(env, p.l1);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        self.pm(pm).l1.addr_4k()
    }
    fn asid(&self, _pm: PmapId) -> u16 {
        ASID
    }

    /// TTBR0 takes the new L1 table, then the CPU's non-global TLB
    /// entries and walk cache are flushed (cp15_ttbr_set).
    fn activate_sw(&mut self, env: &mut PmapEnv, _pm: PmapId, cpu: usize) {
        let mmu = &mut env.mmu[cpu];
        mmu.tlb.invalidate_asid(ASID);
        mmu.pwc.invalidate_all();
        env.ev.tlb_flushes += 1;
    }

    fn fault(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, access: Prot) -> bool {
        self.pmap_fault(env, pm, va, access)
    }

    /// pmap_extract with the protection the MMU grants now (see
    /// `leaf_prot`) and whether the mapping is modified.
    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping> {
        let (frame, shift, f) = match self.find(mem, pm, va)? {
            Leaf::Section(_, e) => (e.frame(), SECTION_SHIFT, SmallFlags::from_section(e.flags())),
            Leaf::Pte2(_, e) if e.is_large() => (e.frame(), splab_hw::armv7::LARGE_SHIFT, e.attrs()),
            Leaf::Pte2(_, e) => (e.frame(), 12, e.attrs()),
        };
        let off = va & ((1u64 << shift) - 1);
        Some(Mapping { pa: PhysAddr(frame + off), shift: shift as u8, prot: Self::leaf_prot(f), dirty: is_dirty(f) })
    }

    fn counters(&self, out: &mut Sysctls) {
        let s = &self.st;
        s.section.sysctls(&SECTION, out);
        s.large.sysctls(&LARGEPAGE, out);
        out.int("splab.pmap.af_faults", s.af_faults, "Access flag faults resolved by pmap_fault (referenced emulation)");
        out.int("splab.pmap.nm_faults", s.nm_faults, "Permission faults resolved by pmap_fault (modified emulation)");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }
}

#[cfg(test)]
mod tests;
