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

use crate::base::{one_superpage_tunable, Core, Md, Params, Tunable};
use crate::counters::{size_names, SizeCounters, SizeNames};
use crate::ptpage::{self, Stashes};
use crate::pv::PvTable;
use crate::radix::{self, Format, Tables};
use crate::shootdown::{self, Batch, Invalidate};
use crate::spaces::{pm_accessors, Spaces};
use splab_hw::arm64::pte::{Desc, DescFlags, ATTR_IDX_WRITE_BACK, SH_INNER};
use splab_hw::arm64::{L0_SHIFT, L1_SHIFT, L1_SIZE, L2_SHIFT, L2_SIZE, L3C_ENTRIES, L3C_SIZE, L3_SHIFT, L3_SIZE, VM_MAXUSER_ADDRESS};
use splab_hw::physmem::PhysMem;
use splab_hw::{Pfn, PhysAddr};
use splab_vm::pmap::{prot, EnterFlags, Mapping, PmapEnv, PmapError, PmapId, Prot, Psind};
use splab_vm::sysctl::Sysctls;

/// FreeBSD's pagesizes[] on arm64 with the 4 KB granule: psind 1 = L3C,
/// 2 = L2 block, 3 = L1 block.
const PAGESIZES: [u64; 4] = [L3_SIZE, L3C_SIZE, L2_SIZE, L1_SIZE];
const PSIND_L3C: Psind = Psind::new(1);
const PSIND_L2: Psind = Psind::new(2);
const PSIND_L1: Psind = Psind::new(3);
const PARAMS: Params = Params { arch: "arm64", pagesizes: &PAGESIZES, reserv_psind: PSIND_L2, max_user_address: VM_MAXUSER_ADDRESS };

/// vm.pmap.l2.*, and the reasons of failed promotions (FreeBSD logs them
/// with CTR; splab counts them).
const L2: SizeNames = size_names!("l2", "2MB", [
    (FirstMisaligned, "first_misaligned", "2MB promotion failures: first L3 entry invalid or not 2MB-aligned"),
    (NotContiguous, "not_contiguous", "2MB promotion failures: an L3 entry missing or not the next page"),
    (Attributes, "attributes", "2MB promotion failures: L3 entry attributes differ"),
], demotion: ("L2 demotions that reused the stashed page-table page", "L2 demotions that removed the mapping instead"));

/// vm.pmap.l3c.*, likewise.
const L3C: SizeNames = size_names!("l3c", "64KB", [
    (FirstMisaligned, "first_misaligned", "64KB promotion failures: first L3 entry invalid or not 64KB-aligned"),
    (NotContiguous, "not_contiguous", "64KB promotion failures: an L3 entry missing or not the next page"),
    (Attributes, "attributes", "64KB promotion failures: L3 entry attributes differ"),
]);

#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    pub l2: SizeCounters,
    pub l3c: SizeCounters,
    pub l1_mappings: u64,
    pub l1_demotions: u64,
}

pub(crate) struct Pm {
    pub l0: Pfn,
    pub asid: u16,
    /// L3 tables kept aside at L2 promotion, valid only if every entry had
    /// AF then (its vm_page "all valid" mark): only then may demotion use
    /// the table without refilling it.
    pub stash: Stashes<L2_SHIFT>,
    /// 4 KB pages mapped (pm_stats.resident_count without the page-table
    /// pages).
    pub resident: u64,
}

/// The arm64 pmap.
pub type PmapArm64 = Md<Arm64>;

impl PmapArm64 {
    pub fn new(npages: u64, superpages: bool) -> PmapArm64 {
        Md(Arm64 {
            pmaps: Spaces::default(),
            pv: PvTable::new(npages, L2_SHIFT),
            superpages_enabled: Tunable::new("vm.pmap.superpages_enabled", "Are large page mappings enabled?", superpages),
            st: Stats::default(),
        })
    }
}

pub struct Arm64 {
    pub(crate) pmaps: Spaces<Pm>,
    /// PV lists of 4 KB pages and of 2 MB physical frames (pa_to_pvh).
    pub(crate) pv: PvTable,
    superpages_enabled: Tunable,
    pub(crate) st: Stats,
}

impl Arm64 {
    pm_accessors!(pmaps);

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
    fn tlbi_range(&mut self, env: &mut PmapEnv, pm: PmapId, sva: u64, eva: u64, final_only: bool) {
        self.tlbi(env, pm, |mmu, asid| {
            mmu.tlb.invalidate_range(sva, eva, asid);
            if !final_only {
                mmu.pwc.invalidate_range(sva, eva, asid);
            }
        });
        env.ev.invlpg += (eva - sva).div_ceil(L3_SIZE);
    }

    /// Invalidates the whole of a change, a TLBI per 4 KB page.
    pub(crate) fn invalidate_range(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate, final_only: bool) {
        self.tlbi_range(env, pm, inv.va, inv.va + inv.size, final_only);
    }

    /// One TLBI, at the change's address (pmap_s1_invalidate_page): enough
    /// for a block, whose one TLB entry any of its addresses names.
    pub(crate) fn invalidate_page(&mut self, env: &mut PmapEnv, pm: PmapId, inv: Invalidate, final_only: bool) {
        let va = inv.va & !(L3_SIZE - 1);
        self.tlbi_range(env, pm, va, va + L3_SIZE, final_only);
    }

    /// Invalidates a batch of L3 changes as one range of last-level TLBIs.
    pub(crate) fn flush(&mut self, env: &mut PmapEnv, pm: PmapId, batch: &mut Batch) {
        if let Some((start, end)) = batch.take() {
            self.tlbi_range(env, pm, start, end, true);
        }
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

    /// Clears the valid bit of the `n` entries from `first`, which
    /// translate [va, va + size): the "break" of break-before-make.
    pub(crate) fn break_entries(env: &mut PmapEnv, first: PhysAddr, n: u64, va: u64, size: u64) -> Invalidate {
        for k in 0..n {
            let pa = PhysAddr(first.0 + k * 8);
            let d = Desc::read(env.mem, pa);
            radix::wr(env.mem, pa, d.without(DescFlags::VALID));
        }
        Invalidate::new(va, size)
    }

    /// Replaces the valid entry at `entry` by `newd` break-before-make:
    /// invalid first, then [va, va + size) invalidated at every level
    /// (a table entry being replaced may be in the walk caches), then the
    /// new entry (pmap_update_entry).
    pub(crate) fn update_entry(&mut self, env: &mut PmapEnv, pm: PmapId, entry: PhysAddr, newd: Desc, va: u64, size: u64) {
        let inv = Self::break_entries(env, entry, 1, va, size);
        self.invalidate_range(env, pm, inv, false);
        radix::wr(env.mem, entry, newd);
    }

    /// Remakes the 16 L3 entries of the 64 KB run from `first` as `newl3`
    /// and its next pages, break-before-make (pmap_update_strided).
    pub(crate) fn update_l3c(&mut self, env: &mut PmapEnv, pm: PmapId, first: PhysAddr, newl3: Desc, va: u64) {
        let inv = Self::break_entries(env, first, L3C_ENTRIES, va, L3C_SIZE);
        self.invalidate_range(env, pm, inv, true);
        for k in 0..L3C_ENTRIES {
            radix::wr(env.mem, PhysAddr(first.0 + k * 8), Desc(newl3.0 + k * L3_SIZE));
        }
    }

    /// Drops `delta` valid entries from the table at `level` (3 = an L3
    /// table, 2 = L2, 1 = L1) covering `va`; a table left empty is
    /// unlinked from its parent, the walk caches' entries for `va`
    /// invalidated, the page queued on `free`, and its parent unwired in
    /// turn (pmap_unwire_l3, _pmap_unwire_l3). Returns whether the table
    /// was freed.
    pub(crate) fn unwire(&mut self, env: &mut PmapEnv, pm: PmapId, va: u64, level: u8, delta: i32, free: &mut Vec<Pfn>) -> bool {
        let parent_shift = [L0_SHIFT, L1_SHIFT, L2_SHIFT][level as usize - 1];
        let parent = self.entry(env.mem, pm, va, parent_shift).expect("unwire: no parent table");
        let table = Desc::read(env.mem, parent).oa();
        if ptpage::adjust_ref(env, table, -delta) > 0 {
            return false;
        }
        let inv = radix::clear::<Desc>(env.mem, parent, va, L3_SIZE);
        if level > 1 {
            self.unwire(env, pm, va, level - 1, 1, free);
        }
        self.invalidate_page(env, pm, inv, false);
        free.push(PhysAddr(table).pfn_4k());
        true
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
        let mut d = Desc::read(mem, l3_pa);
        for k in 0..16 {
            let e = Desc::read(mem, PhysAddr(start + k * 8));
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

}

impl Tables for Arm64 {
    type Pte = Desc;
    fn shifts(&self) -> &'static [u32] {
        &[L0_SHIFT, L1_SHIFT, L2_SHIFT, L3_SHIFT]
    }
    fn root_table(&self, pm: PmapId) -> u64 {
        self.pm(pm).l0.addr_4k().0
    }
    fn resident(&self, pm: PmapId) -> u64 {
        self.pm(pm).resident
    }
}

impl Core for Arm64 {
    fn params(&self) -> Params {
        PARAMS
    }
    one_superpage_tunable!(superpages_enabled);

    fn pinit(&mut self, env: &mut PmapEnv) -> Result<PmapId, PmapError> {
        let l0 = ptpage::alloc(env).ok_or(PmapError::NoMemory)?;
        let Some(asid) = self.pmaps.alloc_asid() else {
            ptpage::free(env, l0);
            return Err(PmapError::NoMemory);
        };
        Ok(self.pmaps.insert(Pm { l0, asid, stash: Stashes::default(), resident: 0 }))
    }

    fn release(&mut self, env: &mut PmapEnv, pm: PmapId) {
        // The ASID may be reused: no CPU may keep its translations.
        self.invalidate_all(env, pm);
        let p = self.pmaps.remove(pm);
        debug_assert_eq!(p.resident, 0, "pmap released with mappings");
        p.stash.release(env);
        env.deactivate(pm);
        ptpage::free(env, p.l0);
        self.pmaps.free_asid(p.asid);
    }

    fn root(&self, pm: PmapId) -> PhysAddr {
        self.pm(pm).l0.addr_4k()
    }
    fn asid(&self, pm: PmapId) -> u16 {
        self.pm(pm).asid
    }

    // pmap_activate_sw: TTBR0_EL1 gets the L0 table and the ASID.
    // Broadcast invalidation leaves nothing stale to flush on a switch.

    fn extract(&self, mem: &PhysMem, pm: PmapId, va: u64) -> Option<Mapping> {
        let (e, shift, _) = self.find_leaf(mem, pm, va)?;
        let base = if shift == L3_SHIFT { e.oa() } else { e.block_oa(shift) };
        let off = va & ((1u64 << shift) - 1);
        let shown = if shift == L3_SHIFT && e.has(DescFlags::CONTIGUOUS) { splab_hw::arm64::L3C_SHIFT } else { shift };
        let dirty = e.written() && (e.has(DescFlags::DBM) || !e.has(DescFlags::SW_MANAGED));
        Some(Mapping { pa: PhysAddr(base + off), shift: shown as u8, prot: Self::leaf_prot(e), dirty })
    }

    fn size_counters(&self, psind: Psind) -> Option<&SizeCounters> {
        match psind {
            PSIND_L3C => Some(&self.st.l3c),
            PSIND_L2 => Some(&self.st.l2),
            _ => None,
        }
    }
    fn counters(&self, out: &mut Sysctls) {
        let s = &self.st;
        s.l2.sysctls(&L2, out);
        s.l3c.sysctls(&L3C, out);
        out.int("vm.pmap.l1.demotions", s.l1_demotions, "1GB page demotions");
        out.int("splab.pmap.l1.mappings", s.l1_mappings, "1GB page mappings");
        out.int("splab.pmap.pv_entries", self.pv.live(), "PV entries in use");
    }
}

#[cfg(test)]
mod tests;
