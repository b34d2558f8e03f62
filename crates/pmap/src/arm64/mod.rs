//! The arm64 pmap: 4-level translation tables (4 KB granule, 48-bit
//! addresses) in modelled physical memory in the VMSAv8-64 descriptor
//! format, with two transparent superpage sizes filled from one 2 MB
//! reservation: 64 KB runs of 16 L3 entries with the Contiguous bit (L3C)
//! and 2 MB L2 blocks; and 1 GB L1 blocks for large-page shared memory.
//! Follows the design of FreeBSD's sys/arm64/arm64/pmap.c; function names
//! in comments refer to it.
//!
//! Dirty state is kept the way FreeBSD keeps it with hardware dirty-state
//! management: a writable managed mapping has DBM (ATTR_SW_DBM) set, and is
//! clean while AP[2] (read-only) is also set; the first write clears
//! AP[2] in hardware. "Dirty" below means DBM set and AP[2] clear
//! (pmap_pte_dirty).
//!
//! What is always true (checked by `check`):
//! - Every page-table page is a page with `PTPAGE` set whose `ref_count`
//!   equals its number of valid entries (the L0 table excepted).
//! - Every valid managed L3 entry (pmap, va) -> page m has exactly one PV
//!   entry (pmap, va) on m's list, L3C runs included (as in FreeBSD, a
//!   64 KB mapping keeps its 16 PV entries); every managed L2 block has one
//!   on the list of its 2 MB physical frame (`pvh`); there are no others.
//! - An L3 entry with the Contiguous bit belongs to a run of 16 aligned,
//!   valid entries, all with the bit, mapping one 64 KB-aligned physical
//!   run in order, with identical attributes but AF. No L3C run and no L2
//!   block is writable but clean: promotion write-protects clean pages
//!   first, and a direct writable superpage mapping is made dirty.
//! - A page-table page stashed at L2 promotion is referenced by no entry;
//!   it is reused when the block is demoted, freed when it is removed.
//! - TLBs: every change that removes access or changes a frame is
//!   followed by a broadcast TLBI of the addresses changed; replacing a
//!   valid entry by a valid one of another size is break-before-make
//!   (entry invalid, TLBI, new entry: pmap_update_entry).

mod check;
mod demote;
mod enter;
mod promote;
mod refmod;
mod remove;

use crate::ptpage;
use crate::pv::PvTable;
use crate::spaces::Spaces;
use crate::shootdown;
use splab_hw::arm64::pte::{Desc, DescFlags, ATTR_IDX_WRITE_BACK, SH_INNER};
use splab_hw::arm64::{index, L0_SHIFT, L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3C_SIZE, L3_SHIFT, L3_SIZE, VM_MAXUSER_ADDRESS};
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr, VirtAddr};
use splab_vm::pmap::{prot, Advice, EnterFlags, Mapping, Pmap, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;
use std::collections::HashMap;

/// FreeBSD's pagesizes[] on arm64 with the 4 KB granule: psind 1 = L3C,
/// 2 = L2 block, 3 = L1 block.
const PAGESIZES: [u64; 4] = [L3_SIZE, L3C_SIZE, L2_SIZE, L1_SIZE];
const PSIND_L3C: Psind = Psind::new(1);
const PSIND_L2: Psind = Psind::new(2);
const PSIND_L1: Psind = Psind::new(3);

/// Why a promotion attempt failed (FreeBSD logs these with CTR; splab
/// counts them).
#[derive(Clone, Copy, Debug)]
pub(crate) enum PromoteFail {
    /// The first entry is invalid or does not map the first page of an
    /// aligned physical run of the superpage's size.
    FirstMisaligned,
    /// Some entry is invalid or does not map the next physical page.
    NotContiguous,
    /// Some entry's attributes differ from the first one's.
    Attributes,
}

/// FreeBSD's counters of one superpage size (vm.pmap.l2.*, vm.pmap.l3c.*)
/// and splab's failure reasons.
#[derive(Clone, Debug, Default)]
pub(crate) struct SizeStats {
    pub promotions: u64,
    pub p_failures: u64,
    pub mappings: u64,
    pub demotions: u64,
    pub fail_reason: [u64; 3],
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    pub l2: SizeStats,
    pub l3c: SizeStats,
    pub l1_mappings: u64,
    pub l1_demotions: u64,
    pub demotion_ptp_reused: u64,
    pub demotion_aborts: u64,
}

/// A page-table page set aside at L2 promotion (pmap_insert_pt_page), and
/// whether every entry it holds had AF set then (its vm_page "all valid"
/// mark): only then may demotion use it without refilling it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stash {
    pub ptp: Pfn,
    pub all_af: bool,
}

pub(crate) struct Pm {
    pub l0: Pfn,
    pub asid: u16,
    /// Stashed L3 pages by 2 MB virtual page number.
    pub stash: HashMap<u64, Stash>,
    /// 4 KB pages mapped (pm_stats.resident_count without the page-table
    /// pages).
    pub resident: u64,
}

/// What a walk over a range finds at one address.
pub(crate) enum At {
    /// Nothing mapped up to this address.
    Skip(u64),
    /// An L1 (1 GB) block; its entry's address.
    L1Block(PhysAddr),
    /// An L2 (2 MB) block; its entry's address.
    L2Block(PhysAddr),
    /// An L3 table covering the 2 MB around the address; its address.
    L3Table(u64),
}

pub struct PmapArm64 {
    pmaps: Spaces<Pm>,
    /// PV lists of 4 KB pages and of 2 MB physical frames (pa_to_pvh).
    pub(crate) pv: PvTable,
    /// vm.pmap.superpages_enabled.
    superpages_enabled: bool,
    pub(crate) st: Stats,
}

/// The first address of the next naturally aligned block of `size`.
pub(crate) fn next_block(va: u64, size: u64) -> u64 {
    (va & !(size - 1)) + size
}

impl PmapArm64 {
    pub fn new(npages: u64, superpages: bool) -> PmapArm64 {
        PmapArm64 {
            pmaps: Spaces::default(),
            pv: PvTable::new(npages, L2_SHIFT),
            superpages_enabled: superpages,
            st: Stats::default(),
        }
    }

    pub(crate) fn pm(&self, pm: PmapId) -> &Pm {
        self.pmaps.get(pm)
    }
    pub(crate) fn pm_mut(&mut self, pm: PmapId) -> &mut Pm {
        self.pmaps.get_mut(pm)
    }

    #[inline]
    pub(crate) fn rd(mem: &PhysMem, pa: PhysAddr) -> Desc {
        Desc(mem.read_u64(pa))
    }
    #[inline]
    pub(crate) fn wr(mem: &mut PhysMem, pa: PhysAddr, d: Desc) {
        mem.write_u64(pa, d.0)
    }

    /// Address of the entry for `va` in the table at `table`.
    #[inline]
    pub(crate) fn slot(table: u64, va: u64, shift: u32) -> PhysAddr {
        PhysAddr(table + index(va, shift) * 8)
    }

    /// Address of the L1 entry for `va`, if its L1 table exists (pmap_l1).
    pub(crate) fn l1_pa(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<PhysAddr> {
        let l0e = Self::rd(mem, Self::slot(self.pm(pm).l0.addr().0, va, L0_SHIFT));
        l0e.is_table_or_page().then(|| Self::slot(l0e.oa(), va, L1_SHIFT))
    }

    /// Address of the L2 entry for `va`, if its L2 table exists (pmap_l2).
    pub(crate) fn l2_pa(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<PhysAddr> {
        let l1e = Self::rd(mem, self.l1_pa(mem, pm, va)?);
        l1e.is_table_or_page().then(|| Self::slot(l1e.oa(), va, L2_SHIFT))
    }

    /// Address of the L3 entry for `va`, if its L3 table exists.
    pub(crate) fn l3_pa(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<PhysAddr> {
        let l2e = Self::rd(mem, self.l2_pa(mem, pm, va)?);
        l2e.is_table_or_page().then(|| Self::slot(l2e.oa(), va, L3_SHIFT))
    }

    /// What maps `va`, descending from the L0 table (the loop heads of
    /// pmap_remove, pmap_protect and pmap_advise).
    pub(crate) fn at(&self, mem: &PhysMem, pm: PmapId, va: u64) -> At {
        let l0e = Self::rd(mem, Self::slot(self.pm(pm).l0.addr().0, va, L0_SHIFT));
        if !l0e.valid() {
            return At::Skip(next_block(va, 1 << L0_SHIFT));
        }
        let l1_pa = Self::slot(l0e.oa(), va, L1_SHIFT);
        let l1e = Self::rd(mem, l1_pa);
        if !l1e.valid() {
            return At::Skip(next_block(va, L1_SIZE));
        }
        if l1e.is_block() {
            return At::L1Block(l1_pa);
        }
        let l2_pa = Self::slot(l1e.oa(), va, L2_SHIFT);
        let l2e = Self::rd(mem, l2_pa);
        if !l2e.valid() {
            return At::Skip(next_block(va, L2_SIZE));
        }
        if l2e.is_block() {
            return At::L2Block(l2_pa);
        }
        At::L3Table(l2e.oa())
    }

    /// The leaf entry for `va` with its level's shift and its address
    /// (pmap_pte).
    pub(crate) fn find_leaf(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<(Desc, u32, PhysAddr)> {
        match self.at(mem, pm, va) {
            At::Skip(_) => None,
            At::L1Block(pa) => Some((Self::rd(mem, pa), L1_SHIFT, pa)),
            At::L2Block(pa) => Some((Self::rd(mem, pa), L2_SHIFT, pa)),
            At::L3Table(ptp) => {
                let pa = Self::slot(ptp, va, L3_SHIFT);
                let e = Self::rd(mem, pa);
                e.valid().then_some((e, L3_SHIFT, pa))
            }
        }
    }

    /// Runs `f` on every CPU's MMU for this address space: a broadcast
    /// TLBI reaches every core of the inner-shareable domain.
    fn tlbi(&mut self, env: &mut PmapEnv, pm: PmapId, f: impl Fn(&mut splab_hw::machine::Mmu, u16)) {
        let asid = self.pm(pm).asid;
        shootdown::broadcast(env, asid, f);
    }

    /// TLBI VALE1IS (`final_only`) or VAE1IS, by address and ASID, for
    /// each 4 KB page of [sva, eva) (pmap_s1_invalidate_range). The last
    /// level only drops leaf translations; all levels also drops the walk
    /// caches' table entries for the range.
    pub(crate) fn invalidate_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, final_only: bool) {
        self.tlbi(env, pm, |mmu, asid| {
            mmu.tlb.invalidate_range(sva, eva, asid);
            if !final_only {
                mmu.pwc.invalidate_range(sva, eva, asid);
            }
        });
        env.ev.invlpg += (eva - sva).div_ceil(L3_SIZE);
    }

    /// One page: pmap_s1_invalidate_page.
    pub(crate) fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, final_only: bool) {
        let va = va & !(L3_SIZE - 1);
        self.invalidate_range(env, pm, va, va + L3_SIZE, final_only);
    }

    /// TLBI ASIDE1IS: every translation of the address space
    /// (pmap_s1_invalidate_all).
    pub(crate) fn invalidate_all(&mut self, env: &mut PmapEnv, pm: PmapId) {
        self.tlbi(env, pm, |mmu, asid| {
            mmu.tlb.invalidate_asid(asid);
            mmu.pwc.invalidate_asid(asid);
        });
        env.ev.tlb_flushes += 1;
    }

    /// Clears the valid bit of the `n` entries from `first`: the "break"
    /// of break-before-make.
    fn break_entries(env: &mut PmapEnv, first: PhysAddr, n: u64) {
        for k in 0..n {
            let pa = PhysAddr(first.0 + k * 8);
            let d = Self::rd(env.mem, pa);
            Self::wr(env.mem, pa, d.without(DescFlags::VALID));
        }
    }

    /// Replaces the valid entry at `entry` by `newd` break-before-make:
    /// invalid first, then [va, va + size) invalidated at every level
    /// (a table entry being replaced may be in the walk caches), then the
    /// new entry (pmap_update_entry).
    pub(crate) fn update_entry(&mut self, env: &mut PmapEnv, pm: PmapId, entry: PhysAddr, newd: Desc, va: u64, size: u64) {
        Self::break_entries(env, entry, 1);
        self.invalidate_range(env, pm, va, va + size, false);
        Self::wr(env.mem, entry, newd);
    }

    /// Remakes the 16 L3 entries of the 64 KB run from `first` as `newl3`
    /// and its next pages, break-before-make (pmap_update_strided).
    pub(crate) fn update_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, first: PhysAddr, newl3: Desc, va: u64) {
        Self::break_entries(env, first, L3C_ENTRIES);
        self.invalidate_range(env, pm, va, va + L3C_SIZE, true);
        for k in 0..L3C_ENTRIES {
            Self::wr(env.mem, PhysAddr(first.0 + k * 8), Desc(newl3.0 + k * L3_SIZE));
        }
    }

    /// Drops `delta` valid entries from the table at `level` (3 = an L3
    /// table, 2 = L2, 1 = L1) covering `va`; a table left empty is
    /// unlinked from its parent, the walk caches' entries for `va`
    /// invalidated, the page queued on `free`, and its parent unwired in
    /// turn (pmap_unwire_l3, _pmap_unwire_l3). Returns whether the table
    /// was freed.
    pub(crate) fn unwire(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, level: u8, delta: i32, free: &mut Vec<Pfn>) -> bool {
        let parent = match level {
            3 => self.l2_pa(env.mem, pm, va),
            2 => self.l1_pa(env.mem, pm, va),
            _ => Some(Self::slot(self.pm(pm).l0.addr().0, va, L0_SHIFT)),
        };
        let parent = parent.expect("unwire: no parent table");
        let table = Self::rd(env.mem, parent).oa();
        if ptpage::adjust_ref(env, table, -delta) > 0 {
            return false;
        }
        Self::wr(env.mem, parent, Desc::EMPTY);
        if level > 1 {
            self.unwire(env, pm, va, level - 1, 1, free);
        }
        self.invalidate_page(env, pm, va, false);
        free.push(PhysAddr(table).pfn());
        true
    }

    pub(crate) fn free_all(env: &mut PmapEnv, free: Vec<Pfn>) {
        for p in free {
            ptpage::free(env, p);
        }
    }

    /// Adds (pm, va) to the PV list of 4 KB page `m`.
    pub(crate) fn pv_add(&mut self, env: &mut PmapEnv, m: Pfn, pm: PmapId, va: u64) {
        self.pv.add(env, m, pm, va);
    }

    /// Removes (pm, va) from the PV list of 4 KB page `m` (pmap_pvh_free).
    pub(crate) fn pv_del(&mut self, env: &mut PmapEnv, m: Pfn, pm: PmapId, va: u64) {
        let removed = self.pv.remove(env, m, pm, va);
        debug_assert!(removed, "no PV entry for {va:#x} on {m:?}");
    }

    /// Adds (pm, va) to the PV list of the 2 MB frame at `frame`.
    pub(crate) fn pvh_add(&mut self, frame: u64, pm: PmapId, va: u64) {
        self.pv.add_sp(frame, pm, va);
    }

    /// Removes (pm, va) from the PV list of the 2 MB frame at `frame`.
    pub(crate) fn pvh_del(&mut self, frame: u64, pm: PmapId, va: u64) {
        let removed = self.pv.remove_sp(frame, pm, va);
        debug_assert!(removed, "no PV entry for the 2MB mapping at {va:#x}");
    }

    /// Whether a managed entry is dirty (pmap_pte_dirty): writable through
    /// DBM and written.
    pub(crate) fn dirty(e: Desc) -> bool {
        e.has(DescFlags::DBM) && e.written()
    }

    /// The entry for `va` of an L3C run with the accessed and dirty state
    /// of the whole run: the hardware may have updated any one of the 16
    /// (pmap_load_l3c).
    pub(crate) fn load_l3c(mem: &PhysMem, l3_pa: PhysAddr) -> Desc {
        let start = l3_pa.0 & !(16 * 8 - 1);
        let mut d = Self::rd(mem, l3_pa);
        for k in 0..16 {
            let e = Self::rd(mem, PhysAddr(start + k * 8));
            if Self::dirty(e) {
                d = d.without(DescFlags::AP_RO);
            }
            d = Desc(d.0 | (e.0 & DescFlags::AF.bits()));
        }
        d
    }

    /// The L3 entry pmap_enter makes for `pa` with `pr` (new_l3): a valid
    /// page of inner-shareable write-back memory, EL0-accessible, never
    /// executable at EL1, not global. A writable managed page gets DBM and
    /// stays read-only (clean) until written; the access that caused the
    /// fault sets AF, and a write makes it dirty at once. Speculative
    /// managed mappings (no access: pmap_enter_quick) leave AF clear.
    pub(crate) fn new_l3(pa: u64, pr: Prot, flags: &EnterFlags, managed: bool) -> Desc {
        let mut f = DescFlags::VALID
            | DescFlags::TYPE
            | DescFlags::AP_EL0
            | DescFlags::PXN
            | DescFlags::NG
            | DescFlags::from_bits_retain(SH_INNER | ATTR_IDX_WRITE_BACK);
        if flags.access & prot::ALL != 0 || !managed {
            f |= DescFlags::AF;
        }
        if pr & prot::EXEC == 0 {
            f |= DescFlags::UXN;
        }
        if pr & prot::WRITE == 0 {
            f |= DescFlags::AP_RO;
        }
        if flags.wired {
            f |= DescFlags::SW_WIRED;
        }
        if managed {
            f |= DescFlags::SW_MANAGED;
            if pr & prot::WRITE != 0 {
                f |= DescFlags::DBM;
                if flags.access & prot::WRITE == 0 {
                    f |= DescFlags::AP_RO;
                }
            }
        }
        Desc::new(pa, f)
    }

    fn leaf_prot(e: Desc) -> Prot {
        let mut p = prot::READ;
        if e.writable() {
            p |= prot::WRITE;
        }
        if !e.has(DescFlags::UXN) {
            p |= prot::EXEC;
        }
        p
    }

    pub(crate) fn superpages_on(&self) -> bool {
        self.superpages_enabled
    }
}

impl Pmap for PmapArm64 {
    fn arch(&self) -> &'static str {
        "arm64"
    }
    fn pagesizes(&self) -> &'static [u64] {
        &PAGESIZES
    }
    fn superpages_enabled(&self) -> bool {
        self.superpages_enabled
    }
    /// Reservations are 2 MB (VM_LEVEL_0_ORDER 9); 64 KB runs fill inside.
    fn reserv_psind(&self) -> Psind {
        PSIND_L2
    }
    fn max_user_address(&self) -> u64 {
        VM_MAXUSER_ADDRESS
    }

    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        let l0 = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        let Some(asid) = self.pmaps.alloc_asid() else {
            ptpage::free(env, l0);
            return Err(PmapError::NoMemory);
        };
        let p = Pm { l0, asid, stash: HashMap::new(), resident: 0 };
        Ok(self.pmaps.insert(p))
    }

    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        // The ASID may be reused: no CPU may keep its translations.
        self.invalidate_all(env, pm);
        let p = self.pmaps.remove(pm);
        debug_assert_eq!(p.resident, 0, "pmap released with mappings");
        for s in p.stash.values() {
            ptpage::free(env, s.ptp);
        }
        env.deactivate(pm);
        ptpage::free(env, p.l0);
        self.pmaps.free_asid(p.asid);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        self.pm(pm).l0.addr()
    }
    fn asid(&self, pm: PmapId) -> u16 {
        self.pm(pm).asid
    }

    /// pmap_activate: TTBR0_EL1 gets the L0 table and the ASID. Broadcast
    /// invalidation leaves nothing stale to flush on a switch.
    fn activate(&mut self, env: &mut PmapEnv, pm: PmapId, cpu: usize) {
        if env.curpmap[cpu] != Some(pm) {
            env.curpmap[cpu] = Some(pm);
            env.ev.context_switches += 1;
        }
    }

    fn enter(&mut self, env: &mut PmapEnv, pm: PmapId, va: VirtAddr, m: Pfn, pr: Prot, flags: EnterFlags) -> Result<(), PmapError> {
        match flags.psind {
            Psind::BASE => self.enter_l3(env, pm, va.0, m, pr, flags),
            PSIND_L3C => self.enter_l3c(env, pm, va.0, m, pr, flags),
            PSIND_L2 => self.enter_l2(env, pm, va.0, m, pr, flags),
            PSIND_L1 => self.enter_l1(env, pm, va.0, m, pr, flags),
            _ => Err(PmapError::BadPsind),
        }
    }

    fn enter_object(&mut self, env: &mut PmapEnv, pm: PmapId, start: VirtAddr, end: VirtAddr, pages: &dyn Fn(VirtAddr) -> Option<Pfn>, pr: Prot) {
        self.enter_object_impl(env, pm, start.0, end.0, pages, pr)
    }

    fn remove(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr) {
        self.remove_impl(env, pm, sva.0, eva.0)
    }

    fn remove_all(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.remove_all_impl(env, m)
    }

    fn protect(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, pr: Prot) {
        self.protect_impl(env, pm, sva.0, eva.0, pr)
    }

    fn remove_write(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.remove_write_impl(env, m)
    }

    fn advise(&mut self, env: &mut PmapEnv, pm: PmapId, sva: VirtAddr, eva: VirtAddr, advice: Advice) {
        self.advise_impl(env, pm, sva.0, eva.0, advice)
    }

    fn is_modified(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.is_modified_impl(env, m)
    }

    fn is_referenced(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.is_referenced_impl(env, m)
    }

    fn ts_referenced(&mut self, env: &mut PmapEnv, m: Pfn) -> u32 {
        self.ts_referenced_impl(env, m)
    }

    fn clear_modify(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.clear_modify_impl(env, m)
    }

    fn remove_all_superpage(&mut self, env: &mut PmapEnv, m: Pfn) {
        self.remove_all_superpage_impl(env, m)
    }

    fn page_is_mapped(&self, env: &PmapEnv, m: Pfn) -> bool {
        self.pv.is_mapped(env, m)
    }

    fn extract(&self, mem: &PhysMem, pm: PmapId, va: VirtAddr) -> Option<Mapping> {
        let (e, shift, _) = self.find_leaf(mem, pm, va.0)?;
        let base = if shift == L3_SHIFT { e.oa() } else { e.block_oa(shift) };
        let off = va.0 & ((1u64 << shift) - 1);
        let shown = if shift == L3_SHIFT && e.has(DescFlags::CONTIGUOUS) { splab_hw::arm64::L3C_SHIFT } else { shift };
        let dirty = e.written() && (e.has(DescFlags::DBM) || !e.has(DescFlags::SW_MANAGED));
        Some(Mapping { pa: PhysAddr(base + off), shift: shown as u8, prot: Self::leaf_prot(e), dirty })
    }

    fn sysctls(&self, out: &mut Sysctls) {
        let s = &self.st;
        out.int("vm.pmap.superpages_enabled", self.superpages_enabled as u64, "Are large page mappings enabled?");
        let descr: [(&str, &SizeStats, [&'static str; 7]); 2] = [
            (
                "l2",
                &s.l2,
                [
                    "2MB page promotions",
                    "2MB page promotion failures",
                    "2MB page mappings",
                    "2MB page demotions",
                    "2MB promotion failures: first L3 entry invalid or not 2MB-aligned",
                    "2MB promotion failures: an L3 entry missing or not the next page",
                    "2MB promotion failures: L3 entry attributes differ",
                ],
            ),
            (
                "l3c",
                &s.l3c,
                [
                    "64KB page promotions",
                    "64KB page promotion failures",
                    "64KB page mappings",
                    "64KB page demotions",
                    "64KB promotion failures: first L3 entry invalid or not 64KB-aligned",
                    "64KB promotion failures: an L3 entry missing or not the next page",
                    "64KB promotion failures: L3 entry attributes differ",
                ],
            ),
        ];
        for (name, z, d) in descr {
            out.int(&format!("vm.pmap.{name}.promotions"), z.promotions, d[0]);
            out.int(&format!("vm.pmap.{name}.p_failures"), z.p_failures, d[1]);
            out.int(&format!("vm.pmap.{name}.mappings"), z.mappings, d[2]);
            out.int(&format!("vm.pmap.{name}.demotions"), z.demotions, d[3]);
            for (k, why) in ["first_misaligned", "not_contiguous", "attributes"].iter().enumerate() {
                out.int(&format!("splab.pmap.{name}.p_failures.{why}"), z.fail_reason[k], d[4 + k]);
            }
        }
        out.int("vm.pmap.l1.demotions", s.l1_demotions, "1GB page demotions");
        out.int("splab.pmap.l1.mappings", s.l1_mappings, "1GB page mappings");
        out.int("splab.pmap.l2.demotion_ptp_reused", s.demotion_ptp_reused, "L2 demotions that reused the stashed page-table page");
        out.int("splab.pmap.l2.demotion_aborts", s.demotion_aborts, "L2 demotions that removed the mapping instead");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }

    fn set_tunable(&mut self, name: &str, value: i64) -> Result<(), String> {
        match name {
            "vm.pmap.superpages_enabled" if value == 0 || value == 1 => {
                self.superpages_enabled = value == 1;
                Ok(())
            }
            "vm.pmap.superpages_enabled" => Err(format!("vm.pmap.superpages_enabled must be 0 or 1, not {value}")),
            _ => Err(format!("unknown arm64 tunable {name:?} (known: vm.pmap.superpages_enabled)")),
        }
    }

    fn check(&self, env: &PmapEnv) -> Result<(), String> {
        self.check_impl(env)
    }

    fn host_bytes(&self) -> u64 {
        self.pv.host_bytes()
    }
}

#[cfg(test)]
mod tests;
